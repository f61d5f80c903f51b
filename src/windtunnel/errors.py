"""The errors a user can meet, by what they mean and the exit code the CLI gives them.

bad input (exit 2)      ValueError and its subclasses (`UntrustedCodeError`, `StorageError`, `RunMismatchError`),
                        FileNotFoundError, ...: the command (or the cluster's storage, or the --out it names) was
                        wrong; fix it and run again
corrupt data (exit 1)   `CheckpointError`: a file of a run directory is missing, truncated, garbled or does not
                        match its config; `RunInUseError`: another live process is writing the run directory;
                        `TrainingDiverged`: the loss or gradients became non-finite
interrupted (130/143)   `TrainingInterrupted`: SIGINT or SIGTERM stopped training (exit 128 + the signal's number);
                        the run is resumable from the checkpoint it names
"""

from __future__ import annotations

import shlex
import signal


class CheckpointError(RuntimeError):
    """A run-directory file is missing, corrupted, truncated or does not match the run; the message names the file
    (and the field or line where one is to blame)."""


class RunInUseError(RuntimeError):
    """Another live process holds the run directory's write lock."""


class StorageError(ValueError):
    """A worker (a process or a cluster node) does not see the driver's output directory: run directories must live
    on storage every node sees."""


class RunMismatchError(ValueError):
    """A driver asked for a run whose directory holds a run of another config: it is neither skipped nor resumed.
    The message names the directory and the differing keys (dotted paths, old -> new)."""


class UntrustedCodeError(ValueError):
    """A config names code to import (`package.module:Class`) and the caller did not opt in with trust_code."""


class TrainingDiverged(RuntimeError):
    """Loss or gradients became non-finite; checkpoints written before it are kept."""

    def __init__(self, step: int, what: str, kept: int | None = None) -> None:
        where = (
            f"the last good checkpoint, step {kept}, is kept"
            if kept is not None
            else "no checkpoint had been written yet"
        )
        super().__init__(f"training diverged at step {step}: non-finite {what} ({where})")
        self.step, self.what, self.kept = step, what, kept


class TrainingInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped training (`train(..., handle_signals=True)`): a KeyboardInterrupt, so code that
    catches Ctrl-C catches it too. `step` is the checkpoint a resume continues from (written at the step the signal
    arrived unless `saved` is False: a second signal stopped at once), `exit_code` 128 + the signal's number."""

    def __init__(self, signum: int, run_dir: str, step: int | None, saved: bool) -> None:
        name = signal.Signals(signum).name
        if saved:
            where = f"checkpoint of step {step} written to {run_dir}/checkpoints"
        elif step is not None:
            where = f"stopped at once; the latest checkpoint is step {step}"
        else:
            where = "stopped at once, before any checkpoint: a resume starts from step 0"
        super().__init__(f"{name}: {where}; continue with: windtunnel train --resume {shlex.quote(run_dir)}")
        self.signum, self.run_dir, self.step, self.saved = signum, run_dir, step, saved
        self.exit_code = 128 + signum


__all__ = [
    "CheckpointError",
    "RunInUseError",
    "RunMismatchError",
    "StorageError",
    "TrainingDiverged",
    "TrainingInterrupted",
    "UntrustedCodeError",
]
