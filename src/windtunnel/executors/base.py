"""What every executor runs: a `Job` (one run directory to train, evaluate and probe) and `run_job`, the one function
that does it, on whichever process, node or device the executor chose.

A job is plain data (its config as a dict, its run directory as a path), so it travels to a worker process or a Ray
node unchanged. `run_job` is idempotent: a finished run (`done.json` and `eval.json`) is read back, an interrupted one
resumes from its last checkpoint (the trainer is kill-equal: the resumed run ends with the numbers of an uninterrupted
one), so a retried job costs only the steps since that checkpoint. Either only when the directory holds the run asked
for: its stored resolved config equals the job's (`manifest.check_same_run`), else a `RunMismatchError`.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from windtunnel.devices import limit_threads, resolve_device
from windtunnel.errors import StorageError
from windtunnel.geometry.run import probe_run
from windtunnel.malloc import tune_malloc
from windtunnel.models import is_baseline
from windtunnel.plugins import import_plugins
from windtunnel.resolve import resolve_config
from windtunnel.runs import checkpoints
from windtunnel.store.manifest import check_same_run, is_finished
from windtunnel.store.records.run_dir import Done, Geometry
from windtunnel.store.rundir import atomic_write
from windtunnel.training import train as training

STORAGE_TOKEN = ".windtunnel-storage"  # written under --out by the driver; every job reads it before any work


@dataclass(frozen=True)
class Job:
    """One run: `name` (its directory under `runs_dir`), its raw `config`, whether to probe its geometry, CPU
    `threads` (torch's and the BLAS pools', `devices.limit_threads`), and the storage token the driver wrote under
    --out (None: no check)."""

    name: str
    config: dict[str, Any]
    runs_dir: str
    probe: bool = False
    threads: int = 1
    storage: tuple[str, str] | None = None  # (path of the token file, its content)

    @property
    def run_dir(self) -> Path:
        return Path(self.runs_dir) / self.name

    @property
    def steps(self) -> int:
        return int(self.config.get("train", {}).get("steps", 0) or 0)


OnResult = Callable[[dict[str, Any]], None]


class Executor(Protocol):
    """Runs jobs somewhere and hands each result to `on_result` as it arrives; returns all results (any order)."""

    name: str

    def run(self, jobs: Sequence[Job], on_result: OnResult | None = None) -> list[dict[str, Any]]: ...


def write_storage_token(out: Path) -> tuple[str, str]:
    """Write a fresh token under `out` (the directory every node must see); returns (path, token) for the jobs."""
    token = uuid.uuid4().hex
    path = out / STORAGE_TOKEN
    atomic_write(path, token + "\n")
    return str(path), token


def check_storage(storage: tuple[str, str] | None) -> None:
    """Fail at once, before any training, when this node does not see the driver's --out (StorageError)."""
    if storage is None:
        return
    path, token = storage
    try:
        seen = Path(path).read_text().strip()
    except OSError:
        seen = None
    if seen != token:
        what = "does not exist" if seen is None else "holds another driver's token"
        raise StorageError(
            f"--out: {str(Path(path).parent)!r} is not the driver's output directory on node {socket.gethostname()} "
            f"({STORAGE_TOKEN} {what}); run directories must live on storage every node sees, e.g. a shared "
            "filesystem mounted at the same path on every node (docs/scale-out.md)"
        )


def run_job(job: Job, *, handle_signals: training.HandleSignals = False) -> dict[str, Any]:
    """Train (or resume) one run, evaluate it at every length and, if asked, probe it, all on the run's training
    device; mark it done. A finished run is skipped; a run directory of another config is a RunMismatchError (never
    skipped, never resumed); one marked done without its eval.json is evaluated again. Returns {"name", "skipped",
    "wall_s", ...} (done.json's fields). With `handle_signals` (True: SIGINT and SIGTERM, or the signals listed; in a
    main thread), such a signal during training writes a checkpoint at the current step and raises
    TrainingInterrupted, as `windtunnel train` does."""
    tune_malloc()  # a worker process or Ray node keeps freed tensor memory for reuse, as the console entry does
    check_storage(job.storage)
    run_dir = job.run_dir
    # the config's own modules (`imports`): the driver imported them (--import) before it made the job, so a worker
    # process or node imports them as the user asked (windtunnel.plugins)
    import_plugins(job.config.get("imports") or [], where="imports")
    config = resolve_config(job.config)
    check_same_run(run_dir, config)
    if is_finished(run_dir):
        done = Done.read(run_dir)  # a garbled done.json, or a field of the wrong kind, is an error naming it
        if job.probe and not is_baseline(config.model.arch) and not Geometry.exists(run_dir):
            # finished without its probe (reproduce once probed only each cell's first seed): probe it now
            limit_threads(max(1, job.threads))
            probe_run(run_dir, device=resolve_device(config.train.device))
        return {"name": job.name, "skipped": True, **done.model_dump()}
    Done.remove(run_dir)  # marked done but its eval.json is gone: resume (to the end) and evaluate
    limit_threads(max(1, job.threads))
    start = time.time()
    resumed = max(checkpoints.list_checkpoints(run_dir), default=0) if run_dir.exists() else 0  # this attempt's start
    # ends with the final evaluation
    training.train(config, run_dir, resume=run_dir.exists(), progress=False, handle_signals=handle_signals)
    device = resolve_device(config.train.device)
    probed = job.probe and not is_baseline(config.model.arch)
    probe_start = time.time()
    if probed:
        probe_run(run_dir, device=device)
    done = Done(
        wall_s=round(time.time() - start, 1),
        probe_s=round(time.time() - probe_start, 1) if probed else None,
        probe="done" if probed else "skipped",
        device=str(device),
        host=socket.gethostname(),
        pid=os.getpid(),
        resumed_from=resumed,
    )
    done.write(run_dir)
    return {"name": job.name, "skipped": False, **done.model_dump()}


__all__ = ["STORAGE_TOKEN", "Executor", "Job", "OnResult", "check_storage", "run_job", "write_storage_token"]
