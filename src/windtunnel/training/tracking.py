"""Experiment tracking: callbacks that `train()` hands every metrics.jsonl record, and two built-in loggers.

metrics.jsonl stays the record; a callback sees each line just after it is written there: step lines
(`{"step", "loss", "lr", ...}`) through `on_step`, validation lines (`{"step", "split": "eval", ...}`) through
`on_eval`, and the final evaluation (train()'s return value, eval.json) through `on_end`. `close` runs last, whether
training ended or failed. Pass your own with `train(..., callbacks=[...])`; the loggers named in `train.loggers`
(or `windtunnel train --logger NAME`) are added after them:

    tensorboard   run_dir/tensorboard/   scalars; view with `tensorboard --logdir RUN_DIR/tensorboard`
    wandb         run_dir/wandb/         one wandb run per run directory (resumed with it); WANDB_MODE etc. apply

Each needs its optional extra (`pip install 'windtunnel[tensorboard]'`); a missing one is a ValueError naming it,
raised before anything is created, as is what would make `wandb.init` fail (`check_wandb`). Loggers change no
number, so `train.loggers` is not part of a run's identity (`config.run_identity`).
"""

from __future__ import annotations

import importlib.util
import os
import re
import secrets
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from windtunnel.config import RunConfig
from windtunnel.errors import CheckpointError, described, shorten
from windtunnel.store import rundir
from windtunnel.store.rundir import MetricsLog, atomic_write, folder, open_regular

TENSORBOARD_DIR, WANDB_DIR = rundir.TENSORBOARD, rundir.WANDB  # named in the run-directory layout
_WANDB_ID = rundir.WANDB_ID  # in run_dir/wandb/: the wandb run a resumed run directory continues
_WANDB_ID_FORM = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what windtunnel writes there (16 hex digits) and wandb accepts
HOOKS = ("on_step", "on_eval", "on_end", "close")


class Callback:
    """Base class of training callbacks: every method is a no-op, so a subclass overrides only what it needs."""

    def on_step(self, step: int, record: dict[str, Any]) -> None:
        """A training-step line of metrics.jsonl (every `train.log_every` steps and the last)."""

    def on_eval(self, step: int, results: dict[str, Any]) -> None:
        """A validation line of metrics.jsonl (every `train.eval_every` steps and the last)."""

    def on_end(self, summary: dict[str, Any]) -> None:
        """The final evaluation on the test stream, as train() returns it and eval.json holds it."""

    def close(self) -> None:
        """Release files and processes; called once, after on_end or after a failure."""


def scalars(record: Mapping[str, Any], prefix: str) -> dict[str, float]:
    """The numeric fields of a metrics line as `{prefix/key: value}` (not `step`; text such as `closest` is left
    to metrics.jsonl)."""
    return {
        f"{prefix}/{k}": float(v)
        for k, v in record.items()
        if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def final_scalars(summary: Mapping[str, Any]) -> dict[str, float]:
    """The final evaluation's means as `{test/SETTING/METRIC: mean}` (metrics a task does not have are skipped)."""
    return {
        f"test/{setting}/{metric}": float(v["mean"])
        for setting, result in summary.items()
        for metric, v in (result.get("metrics") or {}).items()
        if v and v.get("mean") is not None
    }


class TensorBoardLogger(Callback):
    """Scalars to `log_dir` (train/*, val/*, test/SETTING/*); a resume from step `start` first drops the events
    after it, which the resumed run writes again."""

    def __init__(self, log_dir: str | Path, start: int = 0, final_step: int = 0) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=start + 1 if start else None)
        self.step = final_step

    def _add(self, values: Mapping[str, float], step: int) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)
        self.step = max(self.step, step)

    def on_step(self, step: int, record: dict[str, Any]) -> None:
        self._add(scalars(record, "train"), step)

    def on_eval(self, step: int, results: dict[str, Any]) -> None:
        self._add(scalars(results, "val"), step)

    def on_end(self, summary: dict[str, Any]) -> None:
        self._add(final_scalars(summary), self.step)

    def close(self) -> None:
        self.writer.close()


class WandbLogger(Callback):
    """One wandb run per run directory, files under `run_dir/wandb/`: the same steps and names as TensorBoard, the
    final evaluation in its summary, the config as its config. Its id is kept there, so a resumed run directory
    continues its wandb run. Project: $WANDB_PROJECT, else "windtunnel"; WANDB_MODE=offline works without an
    account."""

    def __init__(self, run_dir: str | Path, cfg: RunConfig) -> None:
        import wandb

        run_dir = Path(run_dir)
        run_id = stored_wandb_id(run_dir) or secrets.token_hex(8)
        atomic_write(folder(run_dir, WANDB_DIR) / _WANDB_ID, run_id + "\n")  # replaces whatever is there: never blocks
        try:
            self.run = wandb.init(
                dir=str(run_dir),  # wandb writes run_dir/wandb/
                project=_wandb_project(),
                name=run_dir.name,
                id=run_id,
                resume="allow",
                config=cfg.model_dump(mode="json"),
            )
        except Exception as err:  # noqa: BLE001 - wandb's own error (network, server): one line naming the logger
            raise ValueError(f"train.loggers: wandb.init failed: {_one_line(err)}") from None
        self.ended = False

    def on_step(self, step: int, record: dict[str, Any]) -> None:
        self.run.log(scalars(record, "train"), step=step)

    def on_eval(self, step: int, results: dict[str, Any]) -> None:
        self.run.log(scalars(results, "val"), step=step)

    def on_end(self, summary: dict[str, Any]) -> None:
        self.run.summary.update(final_scalars(summary))
        self.ended = True

    def close(self) -> None:
        self.run.finish(exit_code=0 if self.ended else 1)


# name -> the module its extra installs (the extra has the logger's name)
_REQUIRES = {"tensorboard": "tensorboard", "wandb": "wandb"}


def check_loggers(names: Sequence[str], run_dir: Path | None = None, resume: bool = False) -> None:
    """Before the run directory is created or touched: a ValueError naming the extra to install for the first logger
    whose package is missing, and for wandb what would make `wandb.init` fail (`check_wandb`; the id a resumed
    `run_dir` keeps, `stored_wandb_id`)."""
    for name in names:
        if importlib.util.find_spec(_REQUIRES[name]) is None:
            raise ValueError(
                f"train.loggers: {name!r} needs the {_REQUIRES[name]} package; "
                f"install the extra with pip install 'windtunnel[{name}]'"
            )
    if "wandb" in names:
        check_wandb(stored_wandb_id(run_dir) if resume and run_dir is not None else None)


def _one_line(err: BaseException) -> str:
    """The first line of an error's message, at most 300 characters (wandb's errors span many lines)."""
    return shorten((str(err).strip().splitlines() or [type(err).__name__])[0], 300)


def _wandb_project() -> str:
    return os.environ.get("WANDB_PROJECT", "windtunnel")


def stored_wandb_id(run_dir: Path) -> str | None:
    """The wandb run id kept in `run_dir/wandb/windtunnel-run-id` (None if there is none). A file there that is not a
    regular file (a FIFO would block the read for ever) or holds no wandb id is a CheckpointError naming it."""
    path = folder(run_dir, WANDB_DIR) / _WANDB_ID
    try:
        with open_regular(path) as f:
            text = f.read(200).decode("utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path} cannot be read: {getattr(err, 'strerror', None) or err}") from None
    if not _WANDB_ID_FORM.fullmatch(text):
        raise CheckpointError(f"{path}: holds {described(text)}, not a wandb run id (1 to 64 letters, digits, _ or -)")
    return text


def check_wandb(run_id: str | None = None) -> None:
    """A ValueError for what would make `wandb.init` fail (or, on a terminal, stop to ask): a project
    ($WANDB_PROJECT) or run id it refuses, or online mode (WANDB_MODE is not offline or disabled) without an API key
    (WANDB_API_KEY, `wandb login`). wandb's own settings decide, read as `wandb.init` reads them."""
    import wandb

    try:
        wandb.Settings(project=_wandb_project(), run_id=run_id)
    except Exception as err:  # noqa: BLE001 - wandb's validation error, whatever its kind
        raise ValueError(f"train.loggers: wandb: {_one_line(err)}") from None
    try:
        from wandb.sdk import wandb_setup
        from wandb.sdk.lib.wbauth import authenticate
    except ImportError:  # another wandb version: its own error, from wandb.init, is made one line there
        return
    settings = wandb_setup.singleton().settings
    if settings.mode in ("offline", "dryrun", "disabled"):
        return
    try:
        auth = authenticate.authenticate_session(
            host=settings.base_url, source="windtunnel", prompt=False, update_session=False
        )
    except Exception as err:  # noqa: BLE001 - a malformed key: wandb's message, one line
        raise ValueError(f"train.loggers: wandb: {_one_line(err)}") from None
    if auth is None:
        raise ValueError(
            "train.loggers: wandb logs online here (WANDB_MODE is not offline) but has no API key: set "
            "WANDB_MODE=offline to write the run under RUN/wandb, or WANDB_API_KEY (or run `wandb login`)"
        )


def check_callbacks(callbacks: Sequence[Any]) -> list[Any]:
    """`callbacks` as a list, each checked to have every hook (subclass `Callback` for no-op defaults)."""
    for i, cb in enumerate(callbacks):
        missing = [h for h in HOOKS if not callable(getattr(cb, h, None))]
        if missing:
            raise ValueError(
                f"callbacks[{i}]: {type(cb).__name__} has no {', '.join(missing)} "
                "(subclass windtunnel.training.tracking.Callback for no-op defaults)"
            )
    return list(callbacks)


def make_logger(name: str, cfg: RunConfig, run_dir: Path, start: int) -> Callback:
    """The logger `name` (one of `train.loggers`), writing under `run_dir`, for a run (re)started at step `start`."""
    if name == "tensorboard":
        return TensorBoardLogger(folder(run_dir, TENSORBOARD_DIR), start, cfg.train.steps)
    if name == "wandb":
        return WandbLogger(run_dir, cfg)
    raise ValueError(f"train.loggers: unknown logger {name!r} (one of {', '.join(_REQUIRES)})")


class CallbackList(Callback):
    """Several callbacks as one, called in order; `close` closes each, even after one fails."""

    def __init__(self, callbacks: Sequence[Any]) -> None:
        self.callbacks = list(callbacks)

    def on_step(self, step: int, record: dict[str, Any]) -> None:
        for cb in self.callbacks:
            cb.on_step(step, record)

    def on_eval(self, step: int, results: dict[str, Any]) -> None:
        for cb in self.callbacks:
            cb.on_eval(step, results)

    def on_end(self, summary: dict[str, Any]) -> None:
        for cb in self.callbacks:
            cb.on_end(summary)

    def close(self) -> None:
        errors = []
        for cb in self.callbacks:
            try:
                cb.close()
            except Exception as err:  # noqa: BLE001 - close the others, then raise the first
                errors.append(err)
        if errors:
            raise errors[0]


@contextmanager
def opened(cfg: RunConfig, run_dir: Path, start: int, callbacks: Sequence[Any] = ()) -> Iterator[CallbackList]:
    """The given callbacks then the configured loggers, as one `CallbackList`, closed on leaving."""
    cbs = CallbackList(callbacks)
    try:
        for name in cfg.train.loggers:
            cbs.callbacks.append(make_logger(name, cfg, run_dir, start))  # appended one by one: all are closed
        yield cbs
    finally:
        cbs.close()


class TrackedLog:
    """The metrics.jsonl writer of a run that hands each line, once written, to the callbacks: validation lines
    (`"split": "eval"`) to on_eval, every other line to on_step."""

    def __init__(self, log: MetricsLog, callbacks: Callback) -> None:
        self.log, self.callbacks = log, callbacks

    def write(self, record: dict) -> None:
        self.log.write(record)
        hook = self.callbacks.on_eval if record.get("split") == "eval" else self.callbacks.on_step
        hook(int(record["step"]), record)

    def sync(self) -> None:
        self.log.sync()

    def close(self) -> None:
        self.log.close()


__all__ = [
    "Callback",
    "CallbackList",
    "TENSORBOARD_DIR",
    "WANDB_DIR",
    "TensorBoardLogger",
    "TrackedLog",
    "WandbLogger",
    "check_callbacks",
    "check_loggers",
    "check_wandb",
    "final_scalars",
    "make_logger",
    "opened",
    "scalars",
    "stored_wandb_id",
]
