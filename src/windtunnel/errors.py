"""The errors a user can meet, by what they mean and the exit code the CLI gives them.

bad input (exit 2)      ValueError and its subclasses (`UntrustedCodeError`, `StorageError`, `RunMismatchError`),
                        FileNotFoundError, ...: the command (or the cluster's storage, or the --out it names) was
                        wrong; fix it and run again. A user's own code at fault (a plugin's model or task that
                        raised, exited or returned the wrong shape: `UserCodeError`, `plugins.user_fault`) is one
                        line naming that code, exit 2 too: fix it and run again
corrupt data (exit 1)   `CheckpointError`: a file of a run directory is missing, truncated, garbled or does not
                        match its config (`NonFiniteOutputs`: its weights predict NaN or inf); `RunInUseError`:
                        another live process is writing the run directory; `TrainingDiverged`: the loss or gradients
                        became non-finite
interrupted (130/143)   `TrainingInterrupted`: SIGINT or SIGTERM stopped training (exit 128 + the signal's number);
                        the run is resumable from the checkpoint it names
"""

from __future__ import annotations

import reprlib
import shlex
import signal
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from windtunnel.text import close_match


class CheckpointError(RuntimeError):
    """A run-directory file is missing, corrupted, truncated or does not match the run; the message names the file
    (and the field or line where one is to blame)."""


class NonFiniteOutputs(CheckpointError):
    """A model's predictive distribution holds NaN or inf at a scored position although its weights are finite (weights
    near float32's limit overflow): it is no prediction, and no number is reported for it. Corrupt data, like the
    checkpoint it came from; the message names the run and the checkpoint where there is one."""


class RunInUseError(RuntimeError):
    """Another live process holds the run directory's write lock."""


class StorageError(ValueError):
    """A worker (a process or a cluster node) does not see the driver's output directory: run directories must live
    on storage every node sees."""


class RunMismatchError(ValueError):
    """A driver asked for a run whose directory holds a run of another config: it is neither skipped nor resumed.
    The message names the directory and the differing keys (dotted paths, old -> new)."""


class UserCodeError(ValueError):
    """A user's own code (a plugin's model or task, an import-string architecture) exited, raised a BaseException
    that is no Exception, or returned what it must not (outputs of the wrong shape); the message names that code (its
    module and class, file and line) and, for a training run it stopped, what is kept and how to resume."""


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

    def __reduce__(self) -> tuple[Any, ...]:  # rebuilt from its fields where a worker process sends it back
        return type(self), (self.step, self.what, self.kept)


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

    def __reduce__(self) -> tuple[Any, ...]:  # rebuilt from its fields where a worker process sends it back
        return type(self), (self.signum, self.run_dir, self.step, self.saved)


__all__ = [
    "CheckpointError",
    "NonFiniteOutputs",
    "RunInUseError",
    "RunMismatchError",
    "StorageError",
    "TrainingDiverged",
    "TrainingInterrupted",
    "UntrustedCodeError",
    "UserCodeError",
]


# --- the one formatter of validation errors (configs, task parameters, model sizes, recipes, cells) ---------------


def error_message(
    err: ValidationError, where: str = "config", prefix: str = "", model: type[BaseModel] | None = None
) -> str:
    """One line per invalid field: `train.lr: Input should be greater than 0 (got -1)`, each field name after
    `prefix`. An error of the whole object (a check across fields, whose message names them) is given as is, or after
    `where` when it names nothing. With `model` (the class validated), an unknown key names the closest known one:
    `train.lrr: Extra inputs are not permitted (got 1; did you mean 'lr'?)`. Bounded: a value is shown in at most
    MAX_SHOWN characters and at most MAX_FIELDS fields are named, so a huge input never makes a huge line."""
    parts = []
    errors = err.errors()
    if len(errors) > MAX_FIELDS:
        parts.append(f"{len(errors)} fields are invalid, the first {MAX_FIELDS}")
        errors = errors[:MAX_FIELDS]
    for e in errors:
        msg = shorten(e["msg"].removeprefix("Value error, "), 4 * MAX_SHOWN)
        loc = ".".join(shorten(str(p), MAX_SHOWN) for p in e["loc"])
        if not loc:
            parts.append(prefix + msg if ": " in msg else f"{where}: {msg}")
            continue
        notes = [f"got {_shown(e['input'])}"] if "input" in e and not isinstance(e["input"], dict) else []
        if e["type"] == "extra_forbidden" and model is not None and len(str(e["loc"][-1])) <= MAX_SHOWN:
            match = close_match(e["loc"][-1], _known_keys(model, e["loc"][:-1]))
            notes += [f"did you mean {match!r}?"] if match else []
        parts.append(f"{prefix}{loc}: {msg}" + (f" ({'; '.join(notes)})" if notes else ""))
    return "; ".join(parts)


MAX_SHOWN = 120  # characters of a value an error message shows
MAX_FIELDS = 20  # invalid fields an error message names


_REPR = reprlib.Repr()  # a list of 10^6 values is never formatted whole: its first few, then "..."
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxother = 3, 8, 8, MAX_SHOWN, MAX_SHOWN


def shorten(text: str, limit: int) -> str:
    """`text` cut to `limit` characters (its end replaced by "…"): what an error line shows of something unbounded."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def described(value: Any) -> str:
    """A value read from a file, as an error message may show it: a number, true/false or null as it is (what a
    field of the wrong kind or range needs to be seen), anything else by its kind and size alone (`a string of 26
    characters`, `a list of 3 items`), so no error line ever echoes text a file holds (a secret in a file planted in
    a run directory)."""
    if value is None or isinstance(value, (bool, int, float)):
        return shorten(repr(value), MAX_SHOWN)
    if isinstance(value, str):
        return f"a string of {_many(len(value), 'character')}"
    if isinstance(value, (list, tuple)):
        return f"a list of {_many(len(value), 'item')}"
    if isinstance(value, dict):
        return f"a JSON object of {_many(len(value), 'key')}"
    return f"a {type(value).__name__}"


def _many(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def _shown(value: Any) -> str:
    """`repr(value)`, cut to MAX_SHOWN characters."""
    return shorten(_REPR.repr(value), MAX_SHOWN)


def _known_keys(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The field names of the (nested) model at `loc` below `model` (list indices skipped), [] where `loc` leads
    out of pydantic models (into a dict of task parameters, say)."""
    current: type[BaseModel] | None = model
    for part in loc:
        if isinstance(part, int):
            continue
        field = current.model_fields.get(part) if current is not None else None
        current = _model_in(field.annotation) if field is not None else None
        if current is None:
            return []
    return list(current.model_fields) if current is not None else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (`X`, `X | None`, `list[X]`), or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
