"""Experiment tracking: callbacks that `train()` hands every metrics.jsonl record, and two built-in loggers.

metrics.jsonl stays the record; a callback sees each line just after it is written there: step lines
(`{"step", "loss", "lr", ...}`) through `on_step`, validation lines (`{"step", "split": "eval", ...}`) through
`on_eval`, and the final evaluation (train()'s return value, eval.json) through `on_end`. `close` runs last, whether
training ended or failed. Pass your own with `train(..., callbacks=[...])`; the loggers named in `train.loggers`
(or `windtunnel train --logger NAME`) are added after them:

    tensorboard   run_dir/tensorboard/   scalars; view with `tensorboard --logdir RUN_DIR/tensorboard`
    wandb         run_dir/wandb/         one wandb run per run directory (resumed with it); WANDB_MODE etc. apply

Each needs its optional extra (`pip install 'windtunnel[tensorboard]'`); a missing one is a ValueError naming it,
raised before anything is created. Loggers change no number, so `train.loggers` is not part of a run's identity
(`config.run_identity`).
"""

from __future__ import annotations

import importlib.util
import os
import secrets
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from windtunnel.config import RunConfig
from windtunnel.rundir import MetricsLog

TENSORBOARD_DIR, WANDB_DIR = "tensorboard", "wandb"
_WANDB_ID = "windtunnel-run-id"  # in run_dir/wandb/: the wandb run a resumed run directory continues
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
        (run_dir / WANDB_DIR).mkdir(exist_ok=True)
        id_file = run_dir / WANDB_DIR / _WANDB_ID
        run_id = id_file.read_text().strip() if id_file.is_file() else secrets.token_hex(8)
        id_file.write_text(run_id + "\n")
        self.run = wandb.init(
            dir=str(run_dir),  # wandb writes run_dir/wandb/
            project=os.environ.get("WANDB_PROJECT", "windtunnel"),
            name=run_dir.name,
            id=run_id,
            resume="allow",
            config=cfg.model_dump(mode="json"),
        )
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


def check_loggers(names: Sequence[str]) -> None:
    """A ValueError naming the extra to install for the first logger whose package is missing."""
    for name in names:
        if importlib.util.find_spec(_REQUIRES[name]) is None:
            raise ValueError(
                f"train.loggers: {name!r} needs the {_REQUIRES[name]} package; "
                f"install the extra with pip install 'windtunnel[{name}]'"
            )


def check_callbacks(callbacks: Sequence[Any]) -> list[Any]:
    """`callbacks` as a list, each checked to have every hook (subclass `Callback` for no-op defaults)."""
    for i, cb in enumerate(callbacks):
        missing = [h for h in HOOKS if not callable(getattr(cb, h, None))]
        if missing:
            raise ValueError(
                f"callbacks[{i}]: {type(cb).__name__} has no {', '.join(missing)} "
                "(subclass windtunnel.tracking.Callback for no-op defaults)"
            )
    return list(callbacks)


def make_logger(name: str, cfg: RunConfig, run_dir: Path, start: int) -> Callback:
    """The logger `name` (one of `train.loggers`), writing under `run_dir`, for a run (re)started at step `start`."""
    if name == "tensorboard":
        return TensorBoardLogger(run_dir / TENSORBOARD_DIR, start, cfg.train.steps)
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
    "final_scalars",
    "make_logger",
    "opened",
    "scalars",
]
