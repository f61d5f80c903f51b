"""One training loop for every task and architecture: optimiser and schedule from `optim`, curriculum stages from
`curriculum`, gradient clipping, fresh data per step.

Each step's batch is `task.sample(B, seed=train_seed(seed, step))` on the training device, so a run resumed from
a checkpoint sees exactly the data it would have seen, with no data-RNG state to save. Periodic evaluation reads
the validation stream (`val_seed`); the final evaluation, the one reported, reads the test stream (`test_seed`):
three disjoint seed ranges (runs.py). Checkpoints, metrics and the final evaluation go into the run directory.

Resume continues a run from its latest checkpoint with the run's own config; only the keys in
`resume.RESUMABLE_KEYS` may differ (opening the run directory: `windtunnel.runs.resume`). With `handle_signals=True`
(the CLI), SIGINT and SIGTERM stop the loop after the current step with a checkpoint there, which a resume continues
exactly (`TrainingInterrupted`).
"""

from __future__ import annotations

import contextlib
import math
import shlex
import signal
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical, Normal, kl_divergence

from windtunnel import models, plugins, runs
from windtunnel.config import RunConfig, lr_at, validate
from windtunnel.devices import autocast, resolve_device
from windtunnel.errors import TrainingDiverged, TrainingInterrupted, UserCodeError
from windtunnel.evaluation.evaluate import evaluate
from windtunnel.models.base import check_output, predictive
from windtunnel.models.common import OutputHead, tied_head
from windtunnel.resolve import aux_text, resolve_config, resolve_loss
from windtunnel.runs import checkpoints
from windtunnel.runs.resume import open_run_dir
from windtunnel.seeds import train_seed
from windtunnel.store import rundir
from windtunnel.tasks.base import Batch, TaskSpec, check_posterior
from windtunnel.training import tracking
from windtunnel.training.curriculum import Curriculum
from windtunnel.training.optim import describe
from windtunnel.training.steps import (
    RunSteps,
    WeightAverage,
    exact_streak,
    is_checkpoint_step,
    optimiser_step,
    training_state,
    validation_line,
)


def compute_loss(kind: str, spec: TaskSpec, out: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Mean training loss over scored positions: ce on targets, soft_ce on posterior probs, Gaussian NLL of the
    targets, or gaussian_kl, the closed-form KL(exact posterior predictive || model's Gaussian) (soft_ce and
    gaussian_kl have the sampled losses' minimiser without their sampling noise); for ce_vocab `out` is the tied
    head's logits over the whole vocabulary (`OutputHead.vocab_logits`), the target the answer's token
    (answer_token_offset + class)."""
    mask = batch.target_mask.bool()
    if kind == "ce":
        return F.cross_entropy(out[mask].float(), batch.targets[mask].long())
    if kind == "ce_vocab":
        if spec.answer_token_offset is None:
            raise ValueError("train.loss: ce_vocab needs a task whose answers are input tokens (answer_token_offset)")
        return F.cross_entropy(out[mask].float(), batch.targets[mask].long() + int(spec.answer_token_offset))
    if kind == "soft_ce":
        if not isinstance(batch.posterior, Categorical):  # soft_ce is for class answers, whose posterior is one
            raise ValueError("train.loss: soft_ce needs a task with class answers and a Categorical posterior")
        probs = batch.posterior.probs[mask].float()  # (N,K)
        return -(probs * torch.log_softmax(out[mask].float(), -1)).sum(-1).mean()
    if kind == "gaussian_nll":
        if spec.answer_kind != "real":
            raise ValueError("train.loss: gaussian_nll needs a task with real answers")
        return -predictive(spec, out).log_prob(batch.targets.float())[mask].mean()
    if kind == "gaussian_kl":
        exact = batch.posterior
        if spec.answer_kind != "real" or not isinstance(exact, Normal):
            raise ValueError("train.loss: gaussian_kl needs a task with real answers and a Gaussian posterior")
        model = cast(Normal, predictive(spec, out))
        exact = Normal(exact.loc.float(), exact.scale.float(), validate_args=False)
        return kl_divergence(exact, model)[mask].mean()
    raise ValueError(f"train.loss: unknown loss {kind!r}")


def _count(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 10**6 else f"{n / 1e3:.1f}k" if n >= 10**3 else str(n)


def size_text(cfg: RunConfig) -> str:
    """The dimensions of a config's model size (`n_layers=2, d_model=32, ...`: its n_* and d_* fields, defaults of a
    registered architecture's `Size` included)."""
    size: dict[str, Any] = dict(cfg.model.size)
    if cfg.model.arch in models.names():
        size = models.size_class(cfg.model.arch).of(size).model_dump(mode="json")
    dims = [f"{k}={v}" for k, v in size.items() if k.startswith(("n_", "d_")) and type(v) is int]
    dims += [f"{k}={size[k]}" for k in ("recency_heads",) if size.get(k)]  # initialisation options, when on
    dims += [k for k in ("mimetic_init",) if size.get(k) is True]
    return ", ".join(dims)


def start_line(
    cfg: RunConfig, model: nn.Module, device: torch.device, start: int = 0, aux: nn.Module | None = None
) -> str:
    """What a run trains, in one line: task and its parameters, architecture, preset and size, parameter count,
    steps x batch, optimiser (under muon, which tensors each optimiser holds: `optim.describe`) and learning-rate
    schedule, an auxiliary target (`resolve.aux_text`; its head `aux` is not counted in the model's parameters),
    seed, device (and the step a resume continues from)."""
    params = ", ".join(f"{k}={v}" for k, v in cfg.task.params.items())
    task = f"{cfg.task.name} ({params})" if params else cfg.task.name
    if models.is_baseline(cfg.model.arch) or models.is_baseline(model):
        return f"evaluate: {task} · {cfg.model.arch} baseline, not trained · {device}"
    n = sum(p.numel() for p in model.parameters())
    preset = f"{cfg.model.preset}: " if cfg.model.preset else ""
    t = cfg.train
    warmup = f", warmup {t.warmup_steps}" if t.warmup_steps else ""
    resumed = f" · resuming at step {start}" if start else ""
    groups = f" · {describe(model, cfg, aux)['summary']}" if t.optimizer == "muon" else ""
    auxiliary = f" · {aux_text(cfg)}" if t.aux_target is not None else ""
    average = f" · EMA of the weights (decay {t.ema_decay:g}) evaluated and saved" if t.ema_decay is not None else ""
    return (
        f"train: {task} · {cfg.model.arch} ({preset}{size_text(cfg)}), {_count(n)} parameters · {t.steps:,} steps × "
        f"batch {t.batch_size} · {t.optimizer} lr {t.lr:g} {t.schedule}{warmup}{groups}{auxiliary}{average} · seed "
        f"{cfg.seed} · {device}{resumed}"
    )


class _Stop:
    """Where SIGINT/SIGTERM stand in a training loop (`_stopping_on_signals`): `signum` of the first one, which stops
    the loop after the step it arrived in; `final` once only the final evaluation is left (a signal stops at once)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.final = False


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Which signals stop a training loop: True for `STOP_SIGNALS`, False for none, or the signal numbers themselves (a pool
# worker takes SIGTERM only: SIGINT, a terminal's Ctrl-C, is its driver's to pass on).
HandleSignals = bool | Collection[int]


@contextlib.contextmanager
def signals_handled(enabled: HandleSignals, handler: Callable[[int, Any], None]) -> Iterator[bool]:
    """While inside, the signals `enabled` names (True: SIGINT and SIGTERM) go to `handler`; only in the main thread
    (the only one that can set handlers); yields whether any does. The previous handlers are restored on leaving."""
    chosen = STOP_SIGNALS if enabled is True else tuple(enabled or ())
    if not chosen or threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous = {sig: signal.signal(sig, handler) for sig in chosen}
    try:
        yield True
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)


@contextlib.contextmanager
def _stopping_on_signals(enabled: HandleSignals, run_dir: Path, last_step: int) -> Iterator[_Stop]:
    """While training, SIGINT and SIGTERM (those `enabled` names) ask the loop to stop after the current step (it
    writes a checkpoint there and raises TrainingInterrupted); a second one, or one during the final evaluation (whose
    checkpoint, of step `last_step`, is written), raises TrainingInterrupted at once. Only the main thread can set
    handlers: elsewhere, or unless `enabled`, the signals keep their handlers. The previous handlers are restored on
    leaving."""
    stop = _Stop()

    def handler(signum: int, frame: object) -> None:
        if stop.final:
            raise TrainingInterrupted(signum, str(run_dir), last_step, saved=True)
        if stop.signum is None:
            stop.signum = signum
            return
        raise TrainingInterrupted(signum, str(run_dir), checkpoints.latest_step(run_dir), saved=False)

    with signals_handled(enabled, handler):
        yield stop


def _vocab_head(model: nn.Module) -> OutputHead:
    """The tied head whose every token logit `train.loss: ce_vocab` trains on; ValueError naming train.loss where the
    model has none (an untied head, or an architecture without an `OutputHead`)."""
    head = tied_head(model)
    if head is None:
        raise ValueError(
            "train.loss: 'ce_vocab' needs a model with one tied output head (models.common.OutputHead, tie=True); "
            f"{type(model).__name__} has none (use train.loss auto or ce)"
        )
    return head


def _stopped(err: BaseException, cfg: RunConfig, run_dir: Path, context: str, trust_code: bool, trained: bool) -> str:
    """The error line of a run that a model or task of the user's stopped by calling sys.exit (or raising another
    BaseException that is no Exception) `context` (" at training step 3"): the code that did it
    (`plugins.user_fault`), what is kept of the run (the checkpoints written before: the run is unfinished, as after
    a second Ctrl-C) and the command that goes on: a resume, or once training is done (`trained`) an evaluation."""
    who = plugins.user_fault(err, context=context)
    if who is None:  # none of its frames in a module known as the user's
        did = f"called sys.exit({err.code!r})" if isinstance(err, SystemExit) else f"raised {type(err).__name__}"
        who = f"the run's model or task {did}{context}"
    kept = checkpoints.latest_step(run_dir)
    flags = [f"--import {shlex.quote(m)}" for m in cfg.imports] + (["--trust-code"] if trust_code else [])
    command = "windtunnel eval" if trained else "windtunnel train --resume"
    again = " ".join([command, shlex.quote(str(run_dir)), *flags])
    if trained:
        return f"{who}; training had finished: the checkpoint of step {kept} is kept; evaluate it with: {again}"
    what = f"the checkpoint of step {kept} is kept" if kept is not None else "no checkpoint had been written yet"
    return f"{who}; the run stopped unfinished: {what}; continue with: {again}"


def _output_head(model: nn.Module) -> OutputHead | None:
    """The model's one `OutputHead` (`model.head`, else the only one among its modules), or None."""
    head = getattr(model, "head", None)
    if isinstance(head, OutputHead):
        return head
    heads = [m for m in model.modules() if isinstance(m, OutputHead)]
    return heads[0] if len(heads) == 1 else None


class AuxHead(nn.Module):
    """Linear(d_model -> n) on the hidden state the output head reads, trained towards a task's auxiliary target
    (`train.aux_target`) with weight `aux_weight`: a training device beside the model, never part of it (evaluation,
    probes and the checkpoint's weights file see the plain model). Initialised as `nn.Linear` is, U(+-1/sqrt(d)), from
    a generator of its own seeded by the run's seed, so the model, the data and the global RNG are those of the same
    run without it."""

    def __init__(self, d_model: int, n: int, target: str, aux_weight: float, seed: int) -> None:
        super().__init__()
        self.target, self.aux_weight = target, aux_weight
        g = torch.Generator().manual_seed(seed)
        bound = 1.0 / math.sqrt(d_model)
        self.weight = nn.Parameter((torch.rand(n, d_model, generator=g) * 2 - 1) * bound)  # (n,d)
        self.bias = nn.Parameter((torch.rand(n, generator=g) * 2 - 1) * bound)  # (n,)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B,T,d) -> (B,T,n) logits, in the head's dtype (float32 also under bf16 autocast)."""
        with torch.autocast(hidden.device.type, enabled=False):
            return F.linear(hidden.to(self.weight.dtype), self.weight, self.bias)

    def loss(self, hidden: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """KL(target || softmax(logits)) in nats, the mean over the scored positions `mask` (B,T) of the hidden
        states (B,T,d) against the target probabilities (B,T,n)."""
        logq = torch.log_softmax(self(hidden)[mask], -1)  # (N,n)
        p = target[mask].to(logq.dtype)  # (N,n)
        return (torch.special.xlogy(p, p) - p * logq).sum(-1).mean()


def make_aux_head(cfg: RunConfig, task: Any, model: nn.Module) -> AuxHead | None:
    """The auxiliary head of a run with `train.aux_target` (None without one, or for a baseline, which does not
    train), on the model's device, sized by one no-grad forward in eval mode of one training sequence (the hidden
    width the output head reads; the target's width from the task); ValueError naming train.aux_target for a model
    without one `OutputHead`."""
    t = cfg.train
    if t.aux_target is None or not t.aux_weight or models.is_baseline(model):
        return None
    head = _output_head(model)
    if head is None:
        raise ValueError(
            f"train.aux_target: needs a model with one output head (models.common.OutputHead) to read the hidden "
            f"state from; {type(model).__name__} has none"
        )
    device = next(iter(model.parameters())).device
    batch = task.sample(1, seed=train_seed(cfg.seed, 1), device=device)
    was_training = model.training
    with torch.no_grad(), _head_input(head) as seen:
        model.eval()
        model(batch.inputs)
    model.train(was_training)
    width = int(task.auxiliary_targets(batch)[t.aux_target].shape[-1])
    return AuxHead(int(seen[-1].shape[-1]), width, t.aux_target, float(t.aux_weight), cfg.seed).to(device)


@contextlib.contextmanager
def _head_input(head: OutputHead | None) -> Iterator[list[torch.Tensor]]:
    """While inside, each forward pass through `head` appends the hidden state it reads (B,T,d) to the yielded list,
    so the training step computes `head.vocab_logits` of the same pass (no second forward; `model(inputs)` returns
    what it always does). Nothing is registered for head None; the hook is removed on leaving."""
    seen: list[torch.Tensor] = []
    if head is None:
        yield seen
        return

    def keep(module: nn.Module, args: tuple[Any, ...]) -> None:
        seen.clear()  # only the latest pass (an evaluation's passes in between are dropped)
        seen.append(args[0])

    handle = head.register_forward_pre_hook(keep)
    try:
        yield seen
    finally:
        handle.remove()


def prepare_run(
    config: RunConfig | dict, run_dir: Path, *, resume: bool, overwrite: bool, trust_code: bool
) -> tuple[RunConfig, Any, torch.device, nn.Module, AuxHead | None, dict[str, Any] | None]:
    """Everything a run is built and checked by before its directory is touched: the resolved config, task, device,
    model (on the CPU), auxiliary head and the optimiser description for trained.json (None for a baseline). The
    config's modules, the loss, the first training batch's posterior, the loggers and the output path are checked
    here, so a refused run creates nothing."""
    run_dir = Path(run_dir)
    plugins.require(  # the config's modules (`imports`): imported by the caller, or here with trust_code
        (config if isinstance(config, RunConfig) else validate(config)).imports,
        trust_code=trust_code,
        exclude=(run_dir, run_dir.parent),
    )
    cfg = resolve_config(config)
    task = runs.build_task(cfg)
    device = resolve_device(cfg.train.device)
    model = runs.build_model(cfg, task.spec, task, trust_code=trust_code, exclude=(run_dir, run_dir.parent))
    if resolve_loss(cfg, task) == "ce_vocab" and not models.is_baseline(model):
        _vocab_head(model)  # an import-string architecture's head is known only now, still before anything is created
    # the first training batch: a task's broken posterior (a plugin's) is refused before it is trained on or scored
    check_posterior(cfg.task.name, task.sample(cfg.train.batch_size, seed=train_seed(cfg.seed, 1), device=device))
    if not overwrite:  # --overwrite refuses a directory holding any link itself, naming it (exit 2)
        rundir.check_folders(run_dir)  # no folder of the run directory is followed through a link
    tracking.check_loggers(cfg.train.loggers, run_dir, resume)  # wandb's errors too, before the directory is touched
    rundir.check_writable(run_dir)
    aux = make_aux_head(cfg, task, model) if cfg.train.steps else None  # train.aux_target: a head beside the model
    # which tensors each optimiser trains, for trained.json (and muon without a hidden matrix refused here)
    optimizer = None if models.is_baseline(model) else describe(model, cfg, aux)
    return cfg, task, device, model, aux, optimizer


def compiled(fn: Any, setting: bool | str) -> Any:
    """`fn` under torch.compile as `train.compile` asks (true: its default mode; a name: that mode), else `fn`."""
    if setting is False:
        return fn
    return torch.compile(fn, mode=None if setting is True else setting)


def train(
    config: RunConfig | dict,
    run_dir: str | Path,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    *,
    trust_code: bool = False,
    callbacks: Sequence[tracking.Callback] = (),
    handle_signals: HandleSignals = False,
    echo: Callable[[str], None] | None = None,
) -> dict:
    """Train (or, for oracle/uniform, only evaluate) the configured model; returns the final eval.json dict.

    resume=True continues from checkpoints/latest.json (or, if that one is corrupt, the newest good checkpoint;
    metrics after that step are dropped and recomputed identically); overwrite=True replaces an existing run
    directory. Everything is validated -- config, task, model, device, the output path -- before anything is
    created, and the run directory's lock is held throughout (RunInUseError if another process holds it).
    trust_code=True allows an import-string `model.arch`. Raises TrainingDiverged on NaN/inf. `callbacks`
    (windtunnel.training.tracking.Callback), then the loggers `train.loggers` names, see every metrics.jsonl line as
    it is written and the final evaluation. A resume may change only the keys in `resume.RESUMABLE_KEYS`
    (`resume.resume_config` builds the config from the run's own). handle_signals=True (main thread only; the CLI
    sets it): SIGINT or SIGTERM writes a checkpoint at the current step and raises TrainingInterrupted (exit code
    130 / 143); a collection of signal numbers handles only those. `echo`, if given, gets one line saying what is
    trained (`start_line`) before the first step.
    """
    run_dir = Path(run_dir)
    callbacks = tracking.check_callbacks(callbacks)
    cfg, task, device, model, aux, optimizer = prepare_run(
        config, run_dir, resume=resume, overwrite=overwrite, trust_code=trust_code
    )
    lock, start, changed = open_run_dir(run_dir, cfg, resume, overwrite, optimizer)
    try:
        if echo is not None:
            line = start_line(cfg, model, device, start, aux)
            echo(line + (f" (changed: {'; '.join(changed)})" if changed else ""))
        with tracking.opened(cfg, run_dir, start, callbacks) as cbs:
            model = model.to(device)
            aux = aux.to(device) if aux is not None else None
            results = _train_locked(
                cfg,
                run_dir,
                task,
                model,
                device,
                start,
                progress,
                trust_code,
                cbs,
                handle_signals=handle_signals,
                aux=aux,
            )
            cbs.on_end(results)
            return results
    finally:
        lock.release()


def final_evaluation(
    cfg: RunConfig, run_dir: Path, model: nn.Module, shown: nn.Module, device: torch.device, trust_code: bool
) -> dict:
    """The run's final evaluation (eval.json) of `shown`, the trained `model` or its weight average, once training is
    done; a sys.exit of a user's model here is a UserCodeError naming it (`_stopped`)."""
    model.eval()
    try:
        return evaluate(runs.load_run(run_dir, trust_code=trust_code), device=device, model=shown)
    except (Exception, KeyboardInterrupt):
        raise
    except BaseException as err:  # noqa: BLE001 - as in training: sys.exit of a user's model is named
        raise UserCodeError(_stopped(err, cfg, run_dir, " in the final evaluation", trust_code, True)) from err


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
    *,
    handle_signals: HandleSignals = False,
    aux: AuxHead | None = None,
) -> dict:
    """The training loop proper, in a prepared run directory whose lock this process holds; `aux`: the auxiliary
    head of a run with `train.aux_target` (`make_aux_head`), trained and checkpointed beside the model."""
    if models.is_baseline(model) or cfg.train.steps == 0:
        if not models.is_baseline(model) and start == 0:
            checkpoints.save_checkpoint(run_dir, 0, model)
        return evaluate(runs.load_run(run_dir, trust_code=trust_code), device=device)

    opt, ema = training_state(cfg, run_dir, model, start, aux)
    loss_kind = resolve_loss(cfg, task)
    vocab_head = _vocab_head(model) if loss_kind == "ce_vocab" else None
    # the head whose input this step's losses read (ce_vocab's every-token logits, the auxiliary head): None for neither
    read_head = vocab_head if vocab_head is not None else _output_head(model) if aux is not None else None
    clipped = [*model.parameters(), *aux.parameters()] if aux is not None else None  # one gradient norm over both
    curriculum = Curriculum(cfg, task)
    fwd = compiled(model, cfg.train.compile)
    t = cfg.train
    steps = RunSteps(cfg, run_dir, task, model, opt, device, start, callbacks, progress=progress, aux=aux, ema=ema)
    with _stopping_on_signals(handle_signals, run_dir, t.steps) as stop, _head_input(read_head) as head_input:
        step = start  # the step in progress (for an error raised before the first)
        try:
            model.train()
            for step in range(start + 1, steps.last + 1):
                t0 = time.perf_counter()
                lr = lr_at(step, cfg)
                for g in opt.param_groups:
                    g["lr"] = lr
                step_task = curriculum.task_at(step)
                batch = step_task.sample(t.batch_size, seed=train_seed(cfg.seed, step), device=device)
                check_posterior(cfg.task.name, batch, f"the training batch of step {step}")  # every batch trained on
                with autocast(device, t.dtype):  # a plugin's output of the wrong shape is named here, not in the loss
                    out = check_output(model, step_task.spec, batch.inputs, fwd(batch.inputs), f"training step {step}")
                hidden = head_input.pop() if read_head is not None else None  # (B,T,d) the state fed to the head
                if vocab_head is not None and hidden is not None:  # ce_vocab: every token's logit, from that state
                    out = vocab_head.vocab_logits(hidden)
                loss = compute_loss(loss_kind, step_task.spec, out, batch)
                aux_value = None
                if aux is not None:  # train.aux_target: the task's exact auxiliary target at the scored positions
                    assert hidden is not None  # read_head is the output head whenever aux is set
                    target = step_task.auxiliary_targets(batch)[aux.target]  # (B,T,n)
                    aux_loss = aux.loss(hidden, target, batch.target_mask)
                    aux_value = float(aux_loss.detach())
                    loss = loss + aux.aux_weight * aux_loss
                loss_value = float(loss.detach())
                if not math.isfinite(loss_value):
                    raise TrainingDiverged(step, "loss", checkpoints.latest_step(run_dir))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                gnorm = optimiser_step(cfg, run_dir, step, opt, clipped if clipped is not None else model.parameters())
                if ema is not None:
                    ema.update(model, step)
                extra = {"aux_loss": aux_value} if aux_value is not None else None
                tokens = batch.inputs.shape[0] * batch.inputs.shape[1]
                steps.record(step, time.perf_counter() - t0, tokens, loss_value, lr, gnorm, extra)
                if stop.signum is not None:  # SIGINT/SIGTERM: a checkpoint at this step, then stop
                    raise steps.interrupted(step, stop.signum, loss_value)
                if steps.stopped:
                    break
        except (Exception, KeyboardInterrupt):  # Ctrl-C and SIGTERM are TrainingInterrupted, as they were
            raise
        except BaseException as err:  # noqa: BLE001 - sys.exit, or another BaseException, of a user's model or task
            raise UserCodeError(_stopped(err, cfg, run_dir, f" at training step {step}", trust_code, False)) from err
        finally:
            steps.close()
        stop.final = True  # the last step's checkpoint is written: a signal now stops the final evaluation at once
        return final_evaluation(cfg, run_dir, model, steps.shown, device, trust_code)


__all__ = [
    "AuxHead",
    "RunSteps",
    "WeightAverage",
    "compute_loss",
    "exact_streak",
    "final_evaluation",
    "make_aux_head",
    "is_checkpoint_step",
    "optimiser_step",
    "prepare_run",
    "start_line",
    "train",
    "training_state",
    "validation_line",
]
