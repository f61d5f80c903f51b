"""One training loop for every task and architecture: optimiser and schedule from `optim`, curriculum stages from
`curriculum`, gradient clipping, fresh data per step.

Each step's batch is `task.sample(B, seed=train_seed(seed, step))` on the training device, so a run resumed from
a checkpoint sees exactly the data it would have seen, with no data-RNG state to save. Periodic evaluation reads
the validation stream (`val_seed`); the final evaluation, the one reported, reads the test stream (`test_seed`):
three disjoint seed ranges (runs.py). Checkpoints, metrics and the final evaluation go into the run directory.
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical

from windtunnel import checkpoints, rundir, runs, tracking
from windtunnel.config import RunConfig, resolve_config, resolve_loss, run_identity
from windtunnel.curriculum import Curriculum
from windtunnel.errors import TrainingDiverged
from windtunnel.evaluate import evaluate, evaluate_model
from windtunnel.lock import LOCK_FILE, OWNER_FILE, DirLock
from windtunnel.models import baselines
from windtunnel.models.base import predictive
from windtunnel.optim import lr_at, make_optimizer
from windtunnel.precision import autocast
from windtunnel.seeds import train_seed, val_seed
from windtunnel.tasks.base import Batch, TaskSpec


def resolve_device(choice: str) -> torch.device:
    """'auto' -> CUDA when present, else CPU; 'cuda' without a GPU is a user error."""
    if choice == "cuda" and not torch.cuda.is_available():
        raise ValueError("train.device: 'cuda' requested but no CUDA device is available (use 'auto' or 'cpu')")
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(choice)


def compute_loss(kind: str, spec: TaskSpec, out: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Mean training loss over scored positions: ce on targets, soft_ce on posterior probs, or Gaussian NLL."""
    mask = batch.target_mask.bool()
    if kind == "ce":
        return F.cross_entropy(out[mask].float(), batch.targets[mask].long())
    if kind == "soft_ce":
        # soft_ce is for class answers, whose posterior is a Categorical
        probs = cast(Categorical, batch.posterior).probs[mask].float()  # (N,K)
        return -(probs * torch.log_softmax(out[mask].float(), -1)).sum(-1).mean()
    if kind == "gaussian_nll":
        if spec.answer_kind != "real":
            raise ValueError("train.loss: gaussian_nll needs a task with real answers")
        return -predictive(spec, out).log_prob(batch.targets.float())[mask].mean()
    raise ValueError(f"train.loss: unknown loss {kind!r}")


def validation_line(result: dict[str, Any]) -> dict[str, Any]:
    """What a periodic (validation) evaluation logs: the point metrics, and for a task with approximate posteriors
    the closest one and the belief horizon (point estimates: no intervals at training time)."""
    line = dict(result["metrics_point"])
    v = result.get("verdict") or {}
    if result.get("approximations"):
        line["closest"] = v.get("closest")
        if v.get("horizon_max") is not None:
            line["horizon"], line["horizon_max"] = v.get("horizon"), v.get("horizon_max")
    return line


def checkpoint_steps(cfg: RunConfig) -> set[int]:
    """Steps that get a checkpoint: every checkpoint_every, the explicit schedule, and the final step."""
    t = cfg.train
    steps = set(t.checkpoint_schedule or []) | {t.steps}
    if t.checkpoint_every:
        steps |= set(range(t.checkpoint_every, t.steps + 1, t.checkpoint_every))
    return {s for s in steps if 1 <= s <= t.steps}


def _prune(run_dir: Path, cfg: RunConfig) -> None:
    """Keep the newest `keep_checkpoints` periodic checkpoints; scheduled ones are never deleted."""
    keep = cfg.train.keep_checkpoints
    if keep is None:
        return
    protected = set(cfg.train.checkpoint_schedule or [])
    periodic = [s for s in checkpoints.list_checkpoints(run_dir) if s not in protected]
    for s in periodic[:-keep]:
        checkpoints.delete_checkpoint(run_dir, s)


def _check_resumable(run_dir: Path, cfg: RunConfig) -> int:
    """The step a resume of `run_dir` with `cfg` continues from; refuses a config that differs in more than steps."""
    if not (run_dir / rundir.CONFIG).is_file():
        raise ValueError(f"resume: {str(run_dir)!r} is not a run directory (no config.json)")
    stored = rundir.read_config(run_dir)
    a, b = run_identity(stored), run_identity(cfg)  # train.loggers may change too: they change no number
    a["train"].pop("steps"), b["train"].pop("steps")
    if a != b:
        diff = [k for k in a if a[k] != b[k]]
        raise ValueError(
            f"resume: the config differs from {str(run_dir / rundir.CONFIG)!r} in {diff} "
            "(only train.steps may change on resume)"
        )
    changed = rundir.version_diff(run_dir)
    if changed:
        raise ValueError(
            f"resume: {str(run_dir)!r} was trained by other code ({'; '.join(changed)}); a resumed run would mix "
            "two versions' numbers: train it anew (--overwrite) or resume it with the code that made it"
        )
    step = checkpoints.resume_step(run_dir) or 0
    if step > cfg.train.steps:
        raise ValueError(f"train.steps: the run already has a checkpoint at step {step} > {cfg.train.steps}")
    return step


def _clear(run_dir: Path) -> None:
    """Delete a run directory's contents, except the lock this process holds on it."""
    for p in run_dir.iterdir():
        if p.name in (LOCK_FILE, OWNER_FILE):
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def _prepare_run_dir(run_dir: Path, cfg: RunConfig, resume: bool, overwrite: bool) -> int:
    """Clear or reopen a run directory whose lock this process holds; returns the step to resume from."""
    _refuse_existing(run_dir, resume, overwrite)  # again, under the lock: another writer may have filled it
    rundir.clean_temp_files(run_dir)
    exists = (run_dir / rundir.CONFIG).exists() or any(p.name not in (LOCK_FILE, OWNER_FILE) for p in run_dir.iterdir())
    if exists and resume:
        step = _check_resumable(run_dir, cfg)
        rundir.truncate_metrics(run_dir, step)
        rundir.write_config(run_dir, cfg)
        return step
    if exists:
        _clear(run_dir)  # overwrite (checked by _refuse_existing before the lock was taken)
    (run_dir / rundir.FIGURES).mkdir(exist_ok=True)
    rundir.write_versions(run_dir)
    rundir.write_config(run_dir, cfg)
    return 0


def _refuse_existing(run_dir: Path, resume: bool, overwrite: bool) -> None:
    """Before anything is created: an existing, non-empty `run_dir` needs resume or overwrite, and overwrite
    only ever deletes a run directory."""
    if not run_dir.exists():
        return
    if not run_dir.is_dir():
        raise ValueError(f"--out: {str(run_dir)!r} is a file, not a directory")
    contents = [p for p in run_dir.iterdir() if p.name not in (LOCK_FILE, OWNER_FILE)]
    if not contents or resume:
        return
    if not overwrite:
        raise FileExistsError(
            f"run_dir: {str(run_dir)!r} already exists; pass overwrite=True (--overwrite) "
            "to replace it or resume=True (--resume) to continue it"
        )
    if not (run_dir / rundir.CONFIG).is_file():
        raise ValueError(f"overwrite: {str(run_dir)!r} is not empty and not a run directory; refusing to delete it")


def _progress_bar(total: int, initial: int, enabled: bool) -> Any:
    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc="train", dynamic_ncols=True)


def train(
    config: RunConfig | dict,
    run_dir: str | Path,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    *,
    trust_code: bool = False,
    callbacks: Sequence[tracking.Callback] = (),
) -> dict:
    """Train (or, for oracle/uniform, only evaluate) the configured model; returns the final eval.json dict.

    resume=True continues from checkpoints/latest.json (or, if that one is corrupt, the newest good checkpoint;
    metrics after that step are dropped and recomputed identically); overwrite=True replaces an existing run
    directory. Everything is validated -- config, task, model, device, the output path -- before anything is
    created, and the run directory's lock is held throughout (RunInUseError if another process holds it).
    trust_code=True allows an import-string `model.arch`. Raises TrainingDiverged on NaN/inf. `callbacks`
    (windtunnel.tracking.Callback), then the loggers `train.loggers` names, see every metrics.jsonl line as it is
    written and the final evaluation.
    """
    cfg = resolve_config(config)
    run_dir = Path(run_dir)
    task = runs.build_task(cfg)
    device = resolve_device(cfg.train.device)
    model = runs.build_model(cfg, task.spec, task, trust_code=trust_code, exclude=(run_dir, run_dir.parent))
    callbacks = tracking.check_callbacks(callbacks)
    tracking.check_loggers(cfg.train.loggers)
    rundir.check_writable(run_dir)
    _refuse_existing(run_dir, resume, overwrite)
    created = rundir.first_missing(run_dir)  # what this call creates, removed again if it is refused
    lock = DirLock(run_dir)
    try:
        lock.acquire()
        start = _prepare_run_dir(run_dir, cfg, resume, overwrite)
    except BaseException:
        if lock.is_locked:
            lock.release()
        if created is not None:  # a refused command leaves nothing behind
            shutil.rmtree(created, ignore_errors=True)
        raise
    try:
        with tracking.opened(cfg, run_dir, start, callbacks) as cbs:
            results = _train_locked(cfg, run_dir, task, model.to(device), device, start, progress, trust_code, cbs)
            cbs.on_end(results)
            return results
    finally:
        lock.release()


def _train_locked(
    cfg: RunConfig,
    run_dir: Path,
    task: Any,
    model: nn.Module,
    device: torch.device,
    start: int,
    progress: bool,
    trust_code: bool,
    callbacks: tracking.Callback,
) -> dict:
    """The training loop proper, in a prepared run directory whose lock this process holds."""
    if baselines.is_baseline(model) or cfg.train.steps == 0:
        if not baselines.is_baseline(model) and start == 0:
            checkpoints.save_checkpoint(run_dir, 0, model)
        return evaluate(runs.load_run(run_dir, trust_code=trust_code), device=device)

    opt = make_optimizer(model, cfg)
    if start:
        checkpoints.load_checkpoint(run_dir, start, model, opt, restore_rng=True)
    loss_kind = resolve_loss(cfg, task)
    curriculum = Curriculum(cfg, task)
    fwd = torch.compile(model) if cfg.train.compile else model
    t = cfg.train
    ckpt_at = checkpoint_steps(cfg)
    log = tracking.TrackedLog(rundir.MetricsLog(run_dir), callbacks)  # metrics.jsonl, each line then to callbacks
    bar = _progress_bar(t.steps, start, progress)
    last_eval: float | None = None
    # Wall time and training time (steps only: no evaluation, logging or checkpoints) accumulated over every
    # (re)start of this run, so an interrupted run reports its true cost.
    previous = rundir.read_metrics(run_dir)
    elapsed0 = max((float(r.get("elapsed_s", 0.0)) for r in previous), default=0.0)
    train_s = max((float(r.get("train_s", 0.0)) for r in previous), default=0.0)
    t_start = time.perf_counter()
    train_s_last, step_last, tokens = train_s, start, 0
    try:
        model.train()
        for step in range(start + 1, t.steps + 1):
            t0 = time.perf_counter()
            lr = lr_at(step, cfg)
            for g in opt.param_groups:
                g["lr"] = lr
            step_task = curriculum.task_at(step)
            batch = step_task.sample(t.batch_size, seed=train_seed(cfg.seed, step), device=device)
            with autocast(device, t.dtype):
                out = fwd(batch.inputs)
            loss = compute_loss(loss_kind, step_task.spec, out, batch)
            loss_value = float(loss.detach())
            if not math.isfinite(loss_value):
                raise TrainingDiverged(step, "loss", checkpoints.latest_step(run_dir))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip or float("inf"))
            if not torch.isfinite(gnorm):
                raise TrainingDiverged(step, "gradients", checkpoints.latest_step(run_dir))
            opt.step()
            train_s += time.perf_counter() - t0
            tokens += batch.inputs.shape[0] * batch.inputs.shape[1]
            if step % t.log_every == 0 or step == t.steps:
                dt = max(train_s - train_s_last, 1e-9)
                log.write(
                    {
                        "step": step,
                        "loss": loss_value,
                        "lr": lr,
                        "grad_norm": float(gnorm),
                        "time_s": dt / (step - step_last),
                        "tokens_per_s": tokens / dt,
                        "train_s": round(train_s, 3),
                        "elapsed_s": round(elapsed0 + time.perf_counter() - t_start, 3),
                    }
                )
                train_s_last, step_last, tokens = train_s, step, 0
            if t.eval_every and (step % t.eval_every == 0 or step == t.steps):
                m = evaluate_model(model, task, cfg, n=t.eval_size, device=device, n_boot=0, stream="validation")
                model.train()
                log.write(
                    {
                        "step": step,
                        "split": "eval",
                        **validation_line(m),
                        "train_s": round(train_s, 3),
                    }
                )
                last_eval = m["metrics_point"]["entropy_mae_bits"]
            if step in ckpt_at:
                log.sync()
                checkpoints.save_checkpoint(run_dir, step, model, opt, extra={"loss": loss_value})
                _prune(run_dir, cfg)
            if bar is not None:
                bar.update(1)
                post = {"loss": f"{loss_value:.4f}"}
                if last_eval is not None:
                    post["eval_mae"] = f"{last_eval:.4f}"
                bar.set_postfix(post, refresh=False)
    finally:
        log.close()
        if bar is not None:
            bar.close()
    model.eval()
    return evaluate(runs.load_run(run_dir, trust_code=trust_code), device=device, model=model)


__all__ = ["TrainingDiverged", "compute_loss", "lr_at", "train", "train_seed", "val_seed", "validation_line"]
