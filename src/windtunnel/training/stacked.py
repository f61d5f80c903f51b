"""Seeds of one config trained in one process as one stacked model, each run directory left as `train` leaves it.

Every step each seed samples its own batch (`train_seed(seed, step)`), the seeds' parameters are stacked along a new
leading dimension and one `torch.func.vmap` of `functional_call` runs all forwards at once; the losses are computed
per seed, summed, and one backward puts each seed's gradient into its own parameters (`torch.stack` is
differentiable). Clipping, the optimiser step, validation, metrics, checkpoints and the final evaluation are then
each seed's own, by the solo loop's functions (`train.RunSteps`, `train.optimiser_step`, `train.final_evaluation`).
Where vmap cannot run a model (`nn.LSTM` has no batching rule; a model that draws random numbers in training) the
forward falls back to one call per seed inside the same loop. Each seed keeps its own global RNG state, so dropout
and the checkpoints' saved RNG states are those of the seed trained alone.

A seed whose loss or gradients are not finite ends as a solo run does (its `TrainingDiverged` is its result) and
leaves the stack; the others go on. On resume each run continues from its own latest checkpoint: a seed joins the
stack at the first step after its checkpoint. With `handle_signals=True` (the CLI), SIGINT and SIGTERM stop the stack
after the current step with a checkpoint there of every seed still training (`StackInterrupted`). Why stack: on a
GPU, small models are bound by kernel launches, and n seeds stacked launch as many kernels as one; on a CPU the
stacked step is no faster (docs/training.md).
"""

from __future__ import annotations

import contextlib
import copy
import math
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from windtunnel import models
from windtunnel.config import RunConfig, lr_at
from windtunnel.devices import autocast
from windtunnel.errors import TrainingDiverged, TrainingInterrupted
from windtunnel.models.base import check_output
from windtunnel.resolve import resolve_config, resolve_loss
from windtunnel.runs import checkpoints
from windtunnel.runs.resume import open_run_dir
from windtunnel.seeds import train_seed
from windtunnel.store import rundir
from windtunnel.store.lock import DirLock
from windtunnel.tasks.base import check_posterior
from windtunnel.training import tracking
from windtunnel.training.curriculum import Curriculum
from windtunnel.training.steps import RunSteps, WeightAverage, optimiser_step, training_state
from windtunnel.training.train import (
    compiled,
    compute_loss,
    final_evaluation,
    prepare_run,
    signals_handled,
    start_line,
    train,
)


class StackInterrupted(TrainingInterrupted):
    """SIGINT or SIGTERM stopped a stack (`train_stacked(..., handle_signals=True)`): `step` is the step every seed
    still training wrote its checkpoint at (`saved`), or None where a second signal stopped at once (each run resumes
    from its own latest checkpoint); `run_dirs` the stack's runs."""

    def __init__(self, signum: int, run_dirs: Sequence[Path], step: int | None, saved: bool) -> None:
        super().__init__(signum, str(run_dirs[0]), step, saved)
        self.run_dirs = list(run_dirs)
        where = f"a checkpoint of step {step} written by every seed in training" if saved else "stopped at once"
        self.args = (f"{signal.Signals(signum).name}: {where}; each run resumes from its latest checkpoint",)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.signum, self.run_dirs, self.step, self.saved)


@contextlib.contextmanager
def _stopping_on_signals(enabled: bool, run_dirs: Sequence[Path]) -> Iterator[list[int]]:
    """While the stack trains, the first SIGINT/SIGTERM is noted in the yielded list (the loop stops after the current
    step) and a second one raises StackInterrupted at once; only in the main thread and where `enabled`. The previous
    handlers are restored on leaving."""
    arrived: list[int] = []

    def handler(signum: int, frame: object) -> None:
        if arrived:
            raise StackInterrupted(signum, run_dirs, None, saved=False)
        arrived.append(signum)

    with signals_handled(enabled, handler):
        yield arrived


def check_group(cfgs: Sequence[RunConfig]) -> None:
    """ValueError unless `cfgs` are one config at distinct seeds, with no training feature the stacked loop does not
    run (named by its config field: train.aux_target)."""
    if not cfgs:
        raise ValueError("configs: no config to train")
    first = cfgs[0].model_dump(mode="json", exclude={"seed"})
    for cfg in cfgs[1:]:
        other = cfg.model_dump(mode="json", exclude={"seed"})
        if other != first:
            diff = sorted(_differences(first, other))
            raise ValueError(
                f"configs: stacked seeds must share one config except `seed`; seed {cfg.seed} differs from seed "
                f"{cfgs[0].seed} in {', '.join(diff)}"
            )
    seeds = [c.seed for c in cfgs]
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ValueError(f"seed: each stacked run needs a seed of its own; {repeated} given more than once")
    t = cfgs[0].train
    if t.aux_target is not None and t.aux_weight:
        raise ValueError("train.aux_target: the stacked loop trains no auxiliary head; train these seeds one by one")


def _differences(a: Any, b: Any, path: str = "") -> Iterator[str]:
    """The dotted paths (`train.lr`) at which two JSON values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in a.keys() | b.keys():
            yield from _differences(a.get(key), b.get(key), f"{path}.{key}" if path else key)
    elif a != b:
        yield path or "the config"


class SeedRng:
    """One seed's global RNG state (CPU, and the device's on CUDA), made the global one while `active`: the seeds of a
    stack draw (dropout) and checkpoint the random numbers each draws alone."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state(self.cuda, self.device)
        try:
            yield
        finally:
            self.cpu = torch.get_rng_state()
            if self.cuda is not None:
                self.cuda = torch.cuda.get_rng_state(self.device)


class StackedForward:
    """The training forward of several models of one architecture: one `vmap` over their stacked parameters and
    buffers where it runs, else (decided at the first call, `mode` "loop", `reason` why) one call per model, each
    under its own RNG state. `mode` is None until the first call. With `compile` (`train.compile`: true or a mode
    such as "reduce-overhead", CUDA graphs on a GPU) the vmapped forward runs under torch.compile, so the seeds'
    forward and backward are one compiled graph; the loop's calls stay eager."""

    def __init__(self, model: nn.Module, compile: bool | str = False) -> None:
        self.base = copy.deepcopy(model).to("meta").train()  # the module structure, without storage
        self.mode: str | None = None
        self.reason: str | None = None
        self._apply = compiled(self._apply_vmapped, compile)

    def __call__(self, nets: Sequence[nn.Module], inputs: Sequence[torch.Tensor], rngs: Sequence[SeedRng]) -> list:
        """Each model's output (B,T,K) for its inputs (B,T,...)."""
        if self.mode != "loop":
            try:
                out = self._vmapped(nets, torch.stack(list(inputs)))  # (n,B,T,K)
            except (RuntimeError, NotImplementedError) as err:
                if self.mode == "vmap":
                    raise
                self.mode, self.reason = "loop", str(err).strip().splitlines()[0]
            else:
                self.mode = "vmap"
                return list(out.unbind(0))
        outs = []
        for net, x, rng in zip(nets, inputs, rngs, strict=True):
            with rng.active():
                outs.append(net(x))
        return outs

    def _vmapped(self, nets: Sequence[nn.Module], x: torch.Tensor) -> torch.Tensor:
        """One vmap over the models' stacked tensors; a buffer the forward changed in place is copied back."""
        owned = [dict(net.named_parameters()) for net in nets]
        params = {name: torch.stack([p[name] for p in owned]) for name in owned[0]}  # (n,...) each
        kept = [dict(net.named_buffers()) for net in nets]
        buffers = {name: torch.stack([b[name] for b in kept]) for name in kept[0]}  # (n,...) each
        versions = {name: b._version for name, b in buffers.items()}
        out = self._apply(params, buffers, x)  # (n,B,T,K)
        with torch.no_grad():
            for name, b in buffers.items():
                if b._version != versions[name]:
                    for i, own in enumerate(kept):
                        own[name].copy_(b[i])
        return out

    def _apply_vmapped(
        self, params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor], x: torch.Tensor
    ) -> torch.Tensor:
        """The base module over each slice of the stacked tensors (n,...) and inputs (n,B,T,...): (n,B,T,K)."""

        def one(p: dict[str, torch.Tensor], b: dict[str, torch.Tensor], xi: torch.Tensor) -> torch.Tensor:
            return torch.func.functional_call(self.base, (p, b), (xi,))

        return torch.func.vmap(one)(params, buffers, x)


@dataclass
class _Seed:
    """One run of the stack: its config, directory and lock, model and training state, bookkeeping and result."""

    cfg: RunConfig
    run_dir: Path
    task: Any
    model: nn.Module
    device: torch.device
    start: int
    lock: DirLock
    rng: SeedRng
    opt: Any = None
    ema: WeightAverage | None = None
    steps: RunSteps | None = None
    curriculum: Curriculum | None = None
    callbacks: Any = None
    result: dict | BaseException | None = None
    exits: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def trains(self, step: int) -> bool:
        assert self.steps is not None
        return self.result is None and self.start < step <= self.steps.last

    def fail(self, err: BaseException) -> None:
        """End this run with `err` as its result, its directory left as a solo run that raised it leaves it."""
        self.result = err
        self.close()

    def finish(self, trust_code: bool) -> None:
        """The final evaluation, the run's result, once its last step is trained."""
        assert self.steps is not None
        self.steps.close()
        with self.rng.active():
            self.result = final_evaluation(
                self.cfg, self.run_dir, self.model, self.steps.shown, self.device, trust_code
            )
        self.callbacks.on_end(self.result)
        self.close()

    def close(self) -> None:
        if self.steps is not None:
            self.steps.close()
        self.exits.close()
        if self.lock.is_locked:
            self.lock.release()


def train_stacked(
    configs: Sequence[RunConfig | dict],
    run_dirs: Sequence[str | Path],
    *,
    resume: bool = False,
    progress: bool = False,
    handle_signals: bool = False,
    echo: Callable[[str], None] | None = None,
) -> list[dict | BaseException]:
    """Train the seeds `configs` (one config, distinct seeds) into `run_dirs` as one stacked model in this process;
    each run directory ends as `train(config, run_dir, resume=resume)` would leave it. Returns, per run, its final
    eval.json dict or the error that ended it (`TrainingDiverged`, ...). Invalid groups are a ValueError before any
    directory is touched (`check_group`); baselines and train.steps 0 train nothing and are evaluated by `train`.
    handle_signals=True (main thread only): SIGINT or SIGTERM writes a checkpoint of every seed still training at the
    current step and raises StackInterrupted (a second signal: at once). `echo` gets each run's start line and,
    after the first step, how the forward was stacked."""
    if len(configs) != len(run_dirs):
        raise ValueError(f"run_dirs: {len(run_dirs)} directories for {len(configs)} configs")
    dirs = [Path(d) for d in run_dirs]
    if len({d.resolve() for d in dirs}) != len(dirs):
        raise ValueError("run_dirs: each run needs a directory of its own")
    cfgs = [resolve_config(c) for c in configs]
    check_group(cfgs)
    if models.is_baseline(cfgs[0].model.arch) or cfgs[0].train.steps == 0:
        return [_solo(cfg, d, resume, echo) for cfg, d in zip(cfgs, dirs, strict=True)]
    prepared = []
    for cfg, d in zip(cfgs, dirs, strict=True):
        cfg, task, device, model, _, optimizer = prepare_run(cfg, d, resume=resume, overwrite=False, trust_code=False)
        if resolve_loss(cfg, task) == "ce_vocab":
            raise ValueError("train.loss: the stacked loop does not train ce_vocab (the tied head's vocabulary logits)")
        rundir.refuse_existing(d, resume, False)
        prepared.append((cfg, d, task, device, model, optimizer, SeedRng(device)))  # the RNG as build_model left it
    seeds: list[_Seed] = []
    try:
        for cfg, d, task, device, model, optimizer, rng in prepared:
            lock, start, changed = open_run_dir(d, cfg, resume, False, optimizer)
            seed = _Seed(cfg, d, task, model.to(device), device, start, lock, rng)
            seeds.append(seed)
            if echo is not None:
                note = f" (changed: {'; '.join(changed)})" if changed else ""
                echo(f"{start_line(cfg, model, device, start)}{note} · stacked with {len(prepared)} seeds")
        with _stopping_on_signals(handle_signals, dirs) as arrived:
            for seed in seeds:
                _open(seed, progress)
            _loop(seeds, echo, arrived)
    finally:
        for seed in seeds:
            seed.close()
    return [seed.result if seed.result is not None else RuntimeError("not trained") for seed in seeds]


def _solo(cfg: RunConfig, run_dir: Path, resume: bool, echo: Callable[[str], None] | None) -> dict | BaseException:
    """A run with nothing to stack (a baseline, or train.steps 0), as `train` runs it; its error as its result."""
    try:
        return train(cfg, run_dir, resume=resume, progress=False, echo=echo)
    except Exception as err:  # noqa: BLE001 - one run's error is that run's result
        return err


def _open(seed: _Seed, progress: bool) -> None:
    """The run's optimiser (restored on resume), curriculum, loggers and step bookkeeping, under its own RNG."""
    cfg = seed.cfg
    with seed.rng.active():
        seed.opt, seed.ema = training_state(cfg, seed.run_dir, seed.model, seed.start)
    seed.curriculum = Curriculum(cfg, seed.task)
    seed.callbacks = seed.exits.enter_context(tracking.opened(cfg, seed.run_dir, seed.start, ()))
    seed.steps = RunSteps(
        cfg, seed.run_dir, seed.task, seed.model, seed.opt, seed.device, seed.start, seed.callbacks,
        progress=progress, ema=seed.ema,
    )  # fmt: skip
    seed.model.train()


def _loop(seeds: list[_Seed], echo: Callable[[str], None] | None, arrived: Sequence[int] = ()) -> None:
    """The stacked training loop, from the earliest start among the runs to the last step any of them trains; once
    `arrived` holds a signal, every run still training checkpoints the step just trained and StackInterrupted ends
    the loop."""
    forward = StackedForward(seeds[0].model, seeds[0].cfg.train.compile)
    for s in seeds:  # resumed at its last step (or where it stopped early): only the final evaluation is left
        if s.steps is not None and s.start >= s.steps.last:
            _after_training(s)
    first = min(s.start for s in seeds) + 1
    last = max(s.steps.last for s in seeds if s.steps is not None)
    for step in range(first, last + 1):
        alive = [s for s in seeds if s.trains(step)]
        if not alive:
            continue
        t0 = time.perf_counter()
        try:
            losses, tokens = _losses(alive, step, forward)
        except Exception as err:  # noqa: BLE001 - the shared forward failed: every run in it ends with the error
            for s in alive:
                s.fail(err)
            continue
        if step == first and echo is not None:
            why = f" (vmap: {forward.reason})" if forward.reason else ""
            setting = alive[0].cfg.train.compile
            mode = "default" if setting is True else setting
            how = f", compiled ({mode})" if setting and forward.mode == "vmap" else ""
            echo(f"stacked: {len(alive)} seeds, forward by {forward.mode}{why}{how}")
        finite = {id(s): loss for s, loss in zip(alive, losses, strict=True) if loss is not None}
        stepped = [s for s in alive if id(s) in finite]
        for s in stepped:
            s.opt.zero_grad(set_to_none=True)
        if stepped:
            torch.stack([finite[id(s)] for s in stepped]).sum().backward()
        done: list[tuple[_Seed, int, float, float, float]] = []
        for s, n_tokens in zip(alive, tokens, strict=True):
            if id(s) not in finite:
                continue
            lr = lr_at(step, s.cfg)
            try:
                gnorm = optimiser_step(s.cfg, s.run_dir, step, s.opt, s.model.parameters())
            except TrainingDiverged as err:
                s.fail(err)
                continue
            if s.ema is not None:
                s.ema.update(s.model, step)
            done.append((s, n_tokens, float(finite[id(s)].detach()), lr, gnorm))
        seconds = time.perf_counter() - t0  # the stack's step: what each of its runs took
        extra = {"stacked": len(alive), "stacked_forward": forward.mode}
        for s, n_tokens, loss_value, lr, gnorm in done:
            _after_step(s, step, seconds, n_tokens, loss_value, lr, gnorm, extra)
        if arrived and any(s.result is None for s in seeds):
            losses_of = {id(s): loss_value for s, _, loss_value, _, _ in done}
            for s in seeds:
                if s.result is None and id(s) in losses_of:  # a seed not yet in the stack keeps its checkpoint
                    assert s.steps is not None
                    with s.rng.active():
                        s.steps.interrupted(step, arrived[0], losses_of[id(s)])
            raise StackInterrupted(arrived[0], [s.run_dir for s in seeds], step, saved=True)


def _losses(alive: list[_Seed], step: int, forward: StackedForward) -> tuple[list[torch.Tensor | None], list[int]]:
    """Each run's training loss at `step` from one stacked forward of its own batch, and the tokens it holds; None for
    a run whose loss is not finite, which ends there with TrainingDiverged as a solo run does."""
    batches, tasks = [], []
    for s in alive:
        for g in s.opt.param_groups:
            g["lr"] = lr_at(step, s.cfg)
        assert s.curriculum is not None
        step_task = s.curriculum.task_at(step)
        batch = step_task.sample(s.cfg.train.batch_size, seed=train_seed(s.cfg.seed, step), device=s.device)
        check_posterior(s.cfg.task.name, batch, f"the training batch of step {step}")
        batches.append(batch)
        tasks.append(step_task)
    device, dtype = alive[0].device, alive[0].cfg.train.dtype
    with autocast(device, dtype):
        outs = forward([s.model for s in alive], [b.inputs for b in batches], [s.rng for s in alive])  # (B,T,K) each
    losses: list[torch.Tensor | None] = []
    for s, step_task, batch, out in zip(alive, tasks, batches, outs, strict=True):
        out = check_output(s.model, step_task.spec, batch.inputs, out, f"training step {step}")
        loss = compute_loss(resolve_loss(s.cfg, s.task), step_task.spec, out, batch)
        if not math.isfinite(float(loss.detach())):
            s.fail(TrainingDiverged(step, "loss", checkpoints.latest_step(s.run_dir)))
            losses.append(None)
        else:
            losses.append(loss)
    return losses, [b.inputs.shape[0] * b.inputs.shape[1] for b in batches]


def _after_step(
    s: _Seed, step: int, seconds: float, tokens: int, loss_value: float, lr: float, gnorm: float, extra: dict[str, Any]
) -> None:
    """The run's metrics, validation and checkpoint of `step` (`RunSteps.record`), and its final evaluation once it
    has trained its last step; an error in them is that run's result."""
    assert s.steps is not None
    try:
        with s.rng.active():
            s.steps.record(step, seconds, tokens, loss_value, lr, gnorm, extra)
    except Exception as err:  # noqa: BLE001 - one run's error is that run's result
        s.fail(err)
        return
    if s.steps.stopped or step == s.steps.last:
        _after_training(s)


def _after_training(s: _Seed) -> None:
    """The run's final evaluation, its result; an error in it is that run's result."""
    try:
        s.finish(trust_code=False)
    except Exception as err:  # noqa: BLE001 - one run's error is that run's result
        s.fail(err)


__all__ = ["SeedRng", "StackInterrupted", "StackedForward", "check_group", "train_stacked"]
