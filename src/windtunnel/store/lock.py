"""One writer per run directory: an advisory file lock (`filelock`) held for the life of a writer.

The lock is an OS file lock (flock), so it dies with its process: a lock left by a killed writer is free to take, and
the next writer takes it over, saying whose it was. Who holds a lock is recorded beside it (pid, host, start time) so
that a second writer fails at once with "run directory is in use by pid N on HOST". Readers (evaluating a finished
run, building a report) do not lock.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import warnings
from pathlib import Path
from types import TracebackType

from filelock import FileLock, Timeout

from windtunnel.errors import RunInUseError
from windtunnel.store.rundir import LOCK_FILE, OWNER_FILE, atomic_write, read_regular


def _describe(owner: dict) -> str:
    return f"pid {owner.get('pid', '?')} on {owner.get('host', '?')}"


def read_owner(directory: str | Path) -> dict | None:
    """The recorded holder of `directory`'s lock ({"pid", "host", "since"}), or None if none is recorded."""
    try:
        data = json.loads(read_regular(Path(directory) / OWNER_FILE))  # never blocks on a FIFO
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class DirLock:
    """Context manager: hold `directory`'s write lock or raise RunInUseError at once (never wait).

    `what` names the directory in messages ("run directory", "output directory").
    """

    def __init__(self, directory: str | Path, what: str = "run directory") -> None:
        self.directory = Path(directory)
        self.what = what
        self._lock = FileLock(str(self.directory / LOCK_FILE), timeout=0)
        self.took_over: dict | None = None  # the dead holder whose lock this one took over, if any

    def acquire(self) -> DirLock:
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            owner = read_owner(self.directory) or {}
            raise RunInUseError(
                f"{self.directory}: {self.what} is in use by {_describe(owner)} "
                f"(since {owner.get('since', '?')}); wait for it to finish or stop it"
            ) from None
        stale = read_owner(self.directory)
        if stale is not None:  # its holder died without releasing: the OS freed the lock, its record stayed
            self.took_over = stale
            warnings.warn(
                f"{self.directory}: took over the lock of {_describe(stale)}, which is no longer running",
                RuntimeWarning,
                stacklevel=2,
            )
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}

        atomic_write(self.directory / OWNER_FILE, json.dumps(owner) + "\n")
        return self

    def release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.directory / OWNER_FILE).unlink()
        self._lock.release()

    @property
    def is_locked(self) -> bool:
        return self._lock.is_locked

    def __enter__(self) -> DirLock:
        return self.acquire()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def is_locked(directory: str | Path) -> bool:
    """Whether a live process holds `directory`'s lock (probes by trying to take it)."""
    directory = Path(directory)
    if not (directory / LOCK_FILE).exists():
        return False
    probe = FileLock(str(directory / LOCK_FILE), timeout=0)
    try:
        probe.acquire(timeout=0)
    except Timeout:
        return True
    probe.release()
    return False


__all__ = ["DirLock", "is_locked", "read_owner"]
