"""What every training loop does around its steps, the solo loop (`train`) and stacked seeds (`stacked`) alike: the
optimiser and weight average of a run (`training_state`), the clipped optimiser step (`optimiser_step`), and each
step's bookkeeping (`RunSteps`): the metrics line, the periodic validation with its early-stop count
(`validation_line`, `exact_streak`), the checkpoints (`is_checkpoint_step`) and the progress display."""

from __future__ import annotations

import copy
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from windtunnel.config import RunConfig
from windtunnel.errors import TrainingDiverged, TrainingInterrupted
from windtunnel.evaluation import marks
from windtunnel.evaluation.evaluate import evaluate_model
from windtunnel.progress import StepLines
from windtunnel.runs import checkpoints
from windtunnel.runs.resume import EARLY_STOP
from windtunnel.store import rundir
from windtunnel.training import tracking
from windtunnel.training.optim import make_optimizer


def validation_line(result: dict[str, Any]) -> dict[str, Any]:
    """What a periodic (validation) evaluation logs: the point metrics; its verdict's level ("verdict": `marks.verdict`
    at the conservative end of the bootstrap intervals over the validation sequences, what `train.early_stop` and
    the report's time to verdict read); and for a task with approximate posteriors the closest one and the belief
    horizon of the point estimates of the gains (what time to Bayes's "exact filter" mark reads)."""
    line = dict(result["metrics_point"])
    v = result.get("verdict") or {}
    if result.get("approximations"):
        line["closest"] = v.get("closest")
        if v.get("horizon_max") is not None:
            line["horizon"], line["horizon_max"] = marks.belief_horizon(result["approximations"], point=True)
    if v.get("level") is not None:
        line["verdict"] = v["level"]
    return line


def exact_streak(records: list[dict[str, Any]]) -> int:
    """How many of the last periodic validation evaluations in `records` (metrics.jsonl) are in a row ✓ exact."""
    evals = [r for r in records if r.get("split") == "eval"]
    n = 0
    for r in reversed(evals):
        if r.get("verdict") != "exact":
            break
        n += 1
    return n


def is_checkpoint_step(cfg: RunConfig, step: int) -> bool:
    """Whether `step` gets a checkpoint: every checkpoint_every, the explicit schedule, and the final step. Asked step
    by step, so nothing lists every checkpoint step (at train.steps 1e9, checkpoint_every 1 such a set fills RAM)."""
    t = cfg.train
    every = bool(t.checkpoint_every) and step % t.checkpoint_every == 0
    return 1 <= step <= t.steps and (every or step == t.steps or step in (t.checkpoint_schedule or ()))


def _prune(run_dir: Path, cfg: RunConfig) -> None:
    """Keep the newest `keep_checkpoints` periodic checkpoints; scheduled ones are never deleted."""
    keep = cfg.train.keep_checkpoints
    if keep is None:
        return
    protected = set(cfg.train.checkpoint_schedule or [])
    periodic = [s for s in checkpoints.list_checkpoints(run_dir) if s not in protected]
    for s in periodic[:-keep]:
        checkpoints.delete_checkpoint(run_dir, s)


def _progress_bar(total: int, initial: int, enabled: bool) -> Any:
    if not enabled or sys.stderr is None or not sys.stderr.isatty():
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc="train", dynamic_ncols=True)


def _progress_lines(total: int, initial: int, enabled: bool) -> StepLines | None:
    """Plain `progress: ` lines on a stderr that is not a terminal (CI, nohup, a log file), where no bar is drawn."""
    if not enabled or sys.stderr is None or sys.stderr.isatty():
        return None
    return StepLines(total, initial, stream=sys.stderr)


class WeightAverage:
    """The exponential moving average of a model's parameters (`train.ema_decay`): `model`, a copy of the trained
    model, holds ema_1 = params_1 after the first step and ema_t = decay ema_t-1 + (1 - decay) params_t after each
    later one, buffers copied. It draws no random number, so the trained model and its data are those without it."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        self.decay = decay
        self.model = copy.deepcopy(model).eval()
        self.model.requires_grad_(False)

    @torch.no_grad()
    def update(self, model: nn.Module, step: int) -> None:
        """Fold in the trained `model`'s parameters after optimiser step `step` (step 1 starts the average)."""
        keep = self.decay if step > 1 else 0.0
        for avg, p in zip(self.model.parameters(), model.parameters(), strict=True):
            avg.mul_(keep).add_(p.detach(), alpha=1.0 - keep)
        for kept, b in zip(self.model.buffers(), model.buffers(), strict=True):
            kept.copy_(b)


def training_state(
    cfg: RunConfig, run_dir: Path, model: nn.Module, start: int, aux: nn.Module | None = None
) -> tuple[Any, WeightAverage | None]:
    """A run's optimiser (`make_optimizer`, over the model and its auxiliary head) and weight average
    (`train.ema_decay`, else None), restored with the global RNG from the run's checkpoint `start` when it resumes."""
    opt = make_optimizer(model, cfg, aux)
    ema = WeightAverage(model, cfg.train.ema_decay) if cfg.train.ema_decay is not None else None
    if start:
        averaged = None if ema is None else ema.model
        checkpoints.load_checkpoint(run_dir, start, model, opt, restore_rng=True, aux=aux, averaged=averaged)
    return opt, ema


class RunSteps:
    """The bookkeeping of one run's training steps, the same for the solo loop and for seeds trained stacked
    (`training.stacked`): each step's metrics line, the periodic validation with its early-stop count, the
    checkpoints, the progress display. Wall and training seconds add up over every (re)start of the run, so an
    interrupted run reports its true cost; `stopped` is set once `train.early_stop` ends the run."""

    def __init__(
        self,
        cfg: RunConfig,
        run_dir: Path,
        task: Any,
        model: nn.Module,
        opt: Any,
        device: torch.device,
        start: int,
        callbacks: tracking.Callback,
        *,
        progress: bool,
        aux: nn.Module | None = None,
        ema: WeightAverage | None = None,
    ) -> None:
        self.cfg, self.run_dir, self.task, self.model, self.opt, self.device = cfg, run_dir, task, model, opt, device
        self.aux, self.ema = aux, ema
        # what validation, the weights files and the final evaluation read: the weight average where there is one
        self.averaged = None if ema is None else ema.model
        self.shown = model if ema is None else ema.model
        t = cfg.train
        self.log = tracking.TrackedLog(rundir.MetricsLog(run_dir), callbacks)  # metrics.jsonl, then the callbacks
        self.bar = _progress_bar(t.steps, start, progress)
        self.lines = _progress_lines(t.steps, start, progress)
        self.last_eval: float | None = None
        previous = rundir.read_metrics(run_dir)
        self.elapsed0 = max((float(r.get("elapsed_s", 0.0)) for r in previous), default=0.0)
        self.train_s = max((float(r.get("train_s", 0.0)) for r in previous), default=0.0)
        self.t_start = time.perf_counter()
        self.train_s_last, self.step_last, self.tokens = self.train_s, start, 0
        # ✓ validation evaluations in a row so far; a run that stopped early at the step it resumes from (its
        # metrics.jsonl record there, written before that checkpoint) trains no further
        self.streak = exact_streak(previous)
        self.stopped = any(r.get("event") == EARLY_STOP and r["step"] == start for r in previous)
        self.last = start if self.stopped else t.steps  # the last step this (re)start trains

    def record(
        self,
        step: int,
        seconds: float,
        tokens: int,
        loss_value: float,
        lr: float,
        gnorm: float,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """After optimiser step `step`, which took `seconds` of training on `tokens` tokens: the metrics line (with
        `extra`'s fields), a validation evaluation, a checkpoint and the progress display where they are due."""
        t = self.cfg.train
        self.train_s += seconds
        self.tokens += tokens
        if step % t.log_every == 0 or step == t.steps:
            dt = max(self.train_s - self.train_s_last, 1e-9)
            line = {
                "step": step,
                "loss": loss_value,
                "lr": lr,
                "grad_norm": gnorm,
                "time_s": dt / (step - self.step_last),
                "tokens_per_s": self.tokens / dt,
                "train_s": round(self.train_s, 3),
                "elapsed_s": round(self.elapsed0 + time.perf_counter() - self.t_start, 3),
            }
            self.log.write({**line, **(extra or {})})
            self.train_s_last, self.step_last, self.tokens = self.train_s, step, 0
        if t.eval_every and (step % t.eval_every == 0 or step == t.steps):
            # bootstrap intervals (evaluate's default n_boot): the verdict at their conservative end
            m = evaluate_model(self.shown, self.task, self.cfg, n=t.eval_size, device=self.device, stream="validation")
            self.model.train()
            validation = validation_line(m)
            self.log.write({"step": step, "split": "eval", **validation, "train_s": round(self.train_s, 3)})
            self.last_eval = m["metrics_point"]["entropy_mae_bits"]
            self.streak = self.streak + 1 if validation.get("verdict") == "exact" else 0
            if t.early_stop and self.streak >= t.early_stop and step < t.steps:  # the rule: TrainConfig's doc
                self.stopped = True
                self.log.write(
                    {"step": step, "event": EARLY_STOP, "evaluations": self.streak, "train_s": round(self.train_s, 3)}
                )
        if is_checkpoint_step(self.cfg, step) or self.stopped:  # an early stop's step gets the final checkpoint
            self.checkpoint(step, {"loss": loss_value})
            _prune(self.run_dir, self.cfg)
        if self.bar is not None:
            self.bar.update(1)
            post = {"loss": f"{loss_value:.4f}"}
            if self.last_eval is not None:
                post["eval_mae"] = f"{self.last_eval:.4f}"
            self.bar.set_postfix(post, refresh=False)
        if self.lines is not None:
            self.lines.update(step, loss_value, self.last_eval)

    def checkpoint(self, step: int, extra: dict[str, Any]) -> None:
        """The run's checkpoint of `step` (metrics.jsonl synced first, so the log holds every line it reflects)."""
        self.log.sync()
        checkpoints.save_checkpoint(
            self.run_dir, step, self.model, self.opt, extra=extra, aux=self.aux, averaged=self.averaged
        )

    def interrupted(self, step: int, signum: int, loss_value: float) -> TrainingInterrupted:
        """What SIGINT/SIGTERM during step `step` ends the run with, its checkpoint at that step written."""
        if not (is_checkpoint_step(self.cfg, step) or self.stopped):
            self.checkpoint(step, {"loss": loss_value, "signal": signal.Signals(signum).name})
        return TrainingInterrupted(signum, str(self.run_dir), step, saved=True)

    def close(self) -> None:
        self.log.close()
        if self.bar is not None:
            self.bar.close()


def optimiser_step(cfg: RunConfig, run_dir: Path, step: int, opt: Any, params: Any) -> float:
    """Clip the gradients of `params` to `train.grad_clip` and take `opt`'s step; returns the gradient norm before
    clipping. Non-finite gradients raise TrainingDiverged (naming the run's latest checkpoint) and step nothing."""
    gnorm = nn.utils.clip_grad_norm_(params, cfg.train.grad_clip or float("inf"))
    if not torch.isfinite(gnorm):
        raise TrainingDiverged(step, "gradients", checkpoints.latest_step(run_dir))
    opt.step()
    return float(gnorm)


__all__ = [
    "RunSteps",
    "WeightAverage",
    "exact_streak",
    "is_checkpoint_step",
    "optimiser_step",
    "training_state",
    "validation_line",
]
