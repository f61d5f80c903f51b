"""A run's predictor and task, built from its config; `load_run`: a run directory opened for reading; and
`save_run`, its inverse: a model trained in a loop of one's own made into a run directory.

Opening a run never imports code: an import-string architecture in its config is built only with `trust_code=True`.
File names and file I/O: `windtunnel.store.rundir`; checkpoints: `windtunnel.runs.checkpoints`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel
from torch import nn

from windtunnel import budget, models, plugins, tasks
from windtunnel.config import RunConfig, validate
from windtunnel.errors import CheckpointError
from windtunnel.models.base import ModelSize
from windtunnel.resolve import resolve_config
from windtunnel.runs.checkpoints import latest_step, list_checkpoints, load_checkpoint, save_checkpoint
from windtunnel.runs.resume import open_run_dir
from windtunnel.store import rundir
from windtunnel.store.records.run_dir import ConfigFile, EvalFile
from windtunnel.store.rundir import CONFIG, check_run_dir, read_metrics
from windtunnel.tasks.base import TaskSpec


def build_task(cfg: RunConfig) -> tasks.Task[Any]:
    """The run's wind tunnel at its resolved parameters."""
    return tasks.make(cfg.task.name, **cfg.task.params)


def build_model(
    cfg: RunConfig,
    spec: TaskSpec,
    task: Any = None,
    *,
    trust_code: bool = False,
    exclude: tuple[str | Path, ...] = (),
    check: bool = True,
) -> nn.Module:
    """The run's predictor, freshly initialised (seeded by cfg.seed): an architecture or a baseline, built from its
    typed size (`model.size` with `model.max_len` and `model.reserved_positions`), once it is within the bounds a
    training config is held to (`budget.check_depth`, `budget.check_model`: a shared config.json is read by eval,
    probe and compare without being trained). check: refuse a model that sees the future (`models.check_causal`,
    CausalityError) -- before anything trains, plugins included.

    trust_code: allow `model.arch` to be an import string (importing runs code; see `models.resolve`), never from
    the current directory or the directories in `exclude`.
    """
    factory = models.resolve(cfg.model.arch, trust_code=trust_code, exclude=exclude)
    reserved = {"reserved_positions": cfg.model.reserved_positions} if cfg.model.reserved_positions else {}
    size = factory.Size.of({"max_len": cfg.model.max_len, **reserved, **cfg.model.size}, where="model.size.")
    budget.check_depth(size)  # a plugin's size too; then a registered architecture's weights (`budget.check_model`)
    budget.check_model(cfg)
    torch.manual_seed(cfg.seed)
    model = factory(spec, size, task=task) if models.is_baseline(factory) else factory(spec, size)
    return models.check_causal(model, spec, name=f"model.arch: {cfg.model.arch!r}") if check else model


def check_finite_weights(model: nn.Module, where: str) -> None:
    """A CheckpointError naming `where` and the first parameter or buffer of `model` holding NaN or inf: weights that
    pass their checksums may still have been written after a run diverged, and would score a finite number."""
    for name, value in model.state_dict().items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            what = "NaN" if bool(torch.isnan(value).any()) else "inf"
            raise CheckpointError(f"{where}: weight {name!r} holds {what} values; the model cannot be evaluated")


@dataclass
class Run:
    """A run directory opened for reading: config, task, model (latest weights, eval mode), metrics, eval.

    trust_code: whether an import-string architecture in the config may be imported to build the model.
    """

    path: Path
    config: RunConfig
    trust_code: bool = False

    @cached_property
    def task(self) -> Any:
        return build_task(self.config)

    @cached_property
    def model(self) -> nn.Module:
        """The predictor with the latest checkpoint's weights (baselines need none), in eval mode."""
        step = latest_step(self.path)
        if step is None:
            m = build_model(
                self.config,
                self.task.spec,
                self.task,
                trust_code=self.trust_code,
                exclude=(self.path, self.path.parent),
            )
            if not models.is_baseline(m):
                raise CheckpointError(f"{self.path}: the run has no checkpoint yet")
            return m.eval()
        return self.load_checkpoint(step)

    def load_checkpoint(self, step: int, check: bool = True) -> nn.Module:
        """A fresh model with the weights of checkpoint `step`, in eval mode; check: refuse weights that are not
        finite or a model that sees the future (False: only read the weights, to compare them)."""
        m = build_model(
            self.config,
            self.task.spec,
            self.task,
            trust_code=self.trust_code,
            exclude=(self.path, self.path.parent),
            check=False,  # checked below, with the weights it is evaluated with
        )
        if not models.is_baseline(m):
            load_checkpoint(self.path, step, m)
            if not check:
                return m.eval()
            check_finite_weights(m, f"{self.path}: checkpoint of step {step}")
        where = f"{self.path}: model.arch {self.config.model.arch!r} at step {step}"
        return models.check_causal(m, self.task.spec, name=where).eval()

    def checkpoints(self) -> list[int]:
        return list_checkpoints(self.path)

    def metrics(self) -> list[dict]:
        return read_metrics(self.path)

    def eval(self) -> EvalFile:
        """The run's recorded evaluation (eval.json); no entries before it is evaluated."""
        return EvalFile.read_or_empty(self.path)


def load_run(run_dir: str | Path, *, trust_code: bool = False) -> Run:
    """Open a run directory for reading (error if it has no config.json, or one whose model is beyond the bounds of
    `budget.check_model`, naming the file). Importing nothing: an import-string
    architecture is only built when `trust_code=True`, and the modules its config records (`imports`) must be
    imported already (`--import`) or are imported from an installed package with `trust_code=True`
    (windtunnel.plugins)."""
    p = check_run_dir(run_dir)  # "does not exist" / "is a file" / "is not a run directory (no config.json)"
    cfg = ConfigFile.read(p)
    # the modules it records: imported already (--import), or from an installed package with trust_code
    plugins.require(cfg.imports, trust_code=trust_code, exclude=(p, p.parent), where=str(p / CONFIG))
    try:  # a shared config.json is held to a training config's bounds before anything reads on (`build_model` too)
        budget.check_model(cfg)
    except ValueError as err:
        raise ValueError(f"{p / CONFIG}: {err}") from None
    return Run(path=p, config=cfg, trust_code=trust_code)


# --- save_run: a model trained elsewhere, as a run directory ---------------------------------------------------

# What a config must say for a model whose architecture is not registered (save_run cannot name it itself).
_ARCH_NEEDED = (
    "windtunnel eval, probe and report rebuild a run's model from config.json by its architecture's name: register "
    "the class (windtunnel.models.register(NAME, Class), with a `Size`; docs/own-model.md) in a module the commands "
    "--import, and pass config={'model': {'arch': NAME, 'size': {...}}} with the size fields that build this model "
    "(or give the model a `size`, a ModelSize, for save_run to read)"
)


def save_run(
    model: nn.Module,
    task: Any,
    out: str | Path,
    config: RunConfig | dict[str, Any] | None = None,
    *,
    steps: int | None = None,
    overwrite: bool = False,
    trust_code: bool = False,
) -> Path:
    """Make a run directory at `out` from `model`, trained in a loop of one's own, so `windtunnel eval`, `probe` and
    `report` (and `load_run`) read it as any run; returns `out`.

    Writes config.json, versions.json, trained.json marking the run exported (trained outside windtunnel: its
    record's status is "exported", `resume.run_record`) and the model's weights as the final checkpoint, of step
    `steps` (how long it trained, where known; else the config's train.steps where the config gives it; else
    unknown, and the checkpoint is step 0). Nothing is evaluated: `windtunnel eval OUT` writes its eval.json.
    How it trained is what `config` says (train.lr, train.batch_size, train.optimizer, seed, ...); each such setting
    it does not give holds windtunnel's default in config.json and is listed as not known in trained.json
    (`exported.unknown`) and in the run's record notes, never passed off as what the model trained with.

    task: a task name or a task object (registered by name: the run rebuilds it with `tasks.make`). config: a
    RunConfig or a nested dict; its task must agree with `task`; model.arch and model.size must build this model.
    None, or a config without a model section: the architecture is the registered name of the model's class and the
    size its `size` (a ModelSize); a model of another class needs them in `config` (`_ARCH_NEEDED`). A Hugging Face
    causal LM goes in wrapped for the task, `windtunnel.hf.from_hf(lm, task)` (architecture `hf-causal-lm`). The modules
    that registered the task and architecture are recorded in the config's imports.

    Checked before anything is written, as a training run is: a model of finite weights whose output at a position
    reads no later input (`models.check_causal`), of the task's shape (inputs, and K logits or a Gaussian per
    position), and rebuilt from the config with exactly these outputs. An existing non-empty `out` is refused
    unless it is a run directory and `overwrite` (`rundir.refuse_existing`: nothing else is ever deleted).
    """
    out = Path(out)
    rundir.check_writable(out, "out")
    rundir.refuse_existing(out, resume=False, overwrite=overwrite)  # before any work: open_run_dir checks again
    model = getattr(model, "_orig_mod", model)  # a torch.compile'd model: the module it wraps
    if not isinstance(model, nn.Module) or models.is_baseline(model):
        raise ValueError(
            f"model: expected a trained torch.nn.Module (got {type(model).__name__}); a baseline needs no export: "
            "windtunnel train --arch oracle|uniform evaluates it"
        )
    data = _given(config)
    task = _task_of(task, data.get("task") or {})
    steps = _steps_of(steps, data.get("train") or {})
    check_finite_weights(model, "model")
    _check_outputs(model, task)
    models.check_causal(model, task.spec, name=f"model {type(model).__name__!r}")
    cfg = resolve_config(_export_config(model, task, data, steps))
    _check_rebuilt(model, cfg, task, trust_code)
    exported: dict[str, Any] = {"by": "windtunnel.save_run", "model": _qualname(type(model)), "steps": steps}
    unknown = _not_given(data, steps)
    if unknown:
        exported["unknown"] = unknown
    lock, _, _ = open_run_dir(out, cfg, resume=False, overwrite=overwrite, exported=exported)
    try:
        save_checkpoint(out, steps or 0, model, extra={"exported": True})
    finally:
        lock.release()
    return out


def _given(config: RunConfig | dict[str, Any] | None) -> dict[str, Any]:
    """The fields a config passed to save_run gives (a RunConfig: those set), validated, as a nested dict."""
    if config is None:
        return {}
    cfg = config if isinstance(config, RunConfig) else validate(config)
    return cfg.model_dump(mode="json", exclude_unset=True)


def _task_of(task: Any, given: dict[str, Any]) -> tasks.Task[Any]:
    """save_run's task object: a name built with the config's task.params, or a task object, which the run must
    build again by name (`tasks.make(name, **params)`: registered, the same class and parameters)."""
    if isinstance(task, str):
        if given.get("name", task) != task:
            raise ValueError(f"config: task.name {given['name']!r} is not the task given, {task!r}")
        _check_registered(task)
        return tasks.make(task, **given.get("params", {}))
    adapted = tasks.as_task(task)
    name, params = adapted.name, adapted.params
    named = adapted.offers("name") and adapted.offers("params") and isinstance(name, str)
    if not named or not isinstance(params, BaseModel):
        raise ValueError(f"task: expected a task name or a task object with a name and params (got {type(task)})")
    if given.get("name", name) != name:
        raise ValueError(f"config: task.name {given['name']!r} is not the task given, {name!r}")
    _check_registered(name)
    rebuilt = tasks.make(name, **params.model_dump(mode="json"))
    if _tunnel_class(rebuilt) is not type(task) or rebuilt.params != params:
        raise ValueError(
            f"task: tasks.make({name!r}, ...) builds {_qualname(_tunnel_class(rebuilt))}, not this "
            f"{_qualname(type(task))} at its parameters; a run rebuilds its task by name: register the task's own "
            "class under its name"
        )
    if "params" in given and tasks.make(name, **given["params"]).params != params:
        raise ValueError(f"config: task.params {given['params']} are not the task's ({params.model_dump(mode='json')})")
    return adapted


def _tunnel_class(task: tasks.Task[Any]) -> type:
    """The class of the tunnel `task` is: its own, or for an adapted tunnel (`tasks.as_task`) the tunnel's."""
    return type(task.tunnel) if isinstance(task, tasks.TunnelAdapter) else type(task)


def _check_registered(name: str) -> None:
    if name not in tasks.names():
        raise ValueError(
            f"task: {name!r} is not a registered task, so a run could not build it again: register its class "
            f"(windtunnel.tasks.register({name!r}, Class)) in a module the commands --import"
        )


def _steps_of(steps: int | None, given_train: dict[str, Any]) -> int | None:
    """The steps the exported model trained: `steps`, else the config's train.steps where it gives one, else None
    (unknown); the two must agree where both are given."""
    stated = given_train.get("steps")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 0):
        raise ValueError(f"steps: expected an integer >= 0, the steps the model trained (got {steps!r})")
    if steps is not None and stated is not None and stated != steps:
        raise ValueError(f"steps: {steps} is not the config's train.steps ({stated}); give one of them")
    return steps if steps is not None else stated


# The settings of how a model trained (`RunConfig.train` fields and the seed): an exported run whose config does not
# give one records it as not known (`_not_given`). Settings of the machinery (logging, checkpoints, device) are not.
TRAINING_SETTINGS = (
    "steps", "batch_size", "lr", "min_lr_ratio", "warmup_steps", "schedule", "cooldown_frac", "optimizer",
    "weight_decay", "weight_decay_on", "curriculum", "betas", "grad_clip", "loss", "early_stop", "aux_target",
    "aux_weight", "ema_decay", "dtype",
)  # fmt: skip


def _not_given(given: dict[str, Any], steps: int | None) -> list[str]:
    """The training settings (`TRAINING_SETTINGS`, and `seed`) that the config passed to save_run does not give, as
    config paths ("train.lr"): config.json holds windtunnel's defaults there, not what the model trained with."""
    train = given.get("train") or {}
    missing = [f"train.{k}" for k in TRAINING_SETTINGS if k not in train and not (k == "steps" and steps is not None)]
    return missing + ([] if "seed" in given else ["seed"])


def _arch_name(model: nn.Module) -> str | None:
    """The name `model`'s class is registered under (`models.register`), or None."""
    return next((name for name in models.names() if models.resolve(name) is type(model)), None)


def _export_config(model: nn.Module, task: Any, given: dict[str, Any], steps: int | None) -> dict[str, Any]:
    """The config of an exported run (before `resolve_config`): what `given` says, the task's name and parameters,
    the architecture's registered name and the model's size where the config gives none, train.steps = `steps` (0:
    unknown), and the modules that registered the task and the architecture in its imports."""
    data = {**given, "task": {"name": task.name, "params": task.params.model_dump(mode="json")}}
    section = dict(given.get("model") or {})
    section.setdefault("arch", _arch_name(model))
    if section["arch"] is None:
        raise ValueError(
            f"config: model.arch: {_qualname(type(model))} is not a registered architecture; {_ARCH_NEEDED}"
        )
    if "size" not in section and "preset" not in section:
        size = getattr(model, "size", None)
        if not isinstance(size, ModelSize):
            raise ValueError(f"config: model.size: {_qualname(type(model))} has no `size` to read; {_ARCH_NEEDED}")
        fields = size.model_dump(mode="json")
        section.setdefault("max_len", fields.pop("max_len"))
        section.setdefault("reserved_positions", fields.pop("reserved_positions"))
        section["size"] = fields
    data["model"] = section
    data["train"] = {**(given.get("train") or {}), "steps": steps or 0}
    found = plugins.providers(data)
    if "__main__" in found:
        warnings.warn(
            "save_run: the task or architecture was registered by the running script (__main__), which no command "
            "line can import: windtunnel eval, probe and report find it only once it is registered by a module "
            "they --import",
            RuntimeWarning,
            stacklevel=3,
        )
    data["imports"] = plugins.unique([*given.get("imports", []), *(m for m in found if m != "__main__")])
    return data


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


@torch.no_grad()
def _forward(model: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """`model(inputs)` in eval mode, its training mode restored."""
    was_training = model.training
    model.eval()
    try:
        return model(inputs)
    finally:
        model.train(was_training)


def _probe_inputs(model: nn.Module, task: Any) -> torch.Tensor:
    """A few sequences of `task` on the device of `model`'s weights (what save_run's checks feed it)."""
    param = next(iter(model.parameters()), None)
    return task.sample(4, seed=0, device=param.device if param is not None else "cpu").inputs


def _check_outputs(model: nn.Module, task: Any) -> None:
    """ValueError unless `model` maps `task`'s inputs to (B,T,output_dim): K logits, or a Gaussian's two numbers."""
    inputs = _probe_inputs(model, task)
    want = (*inputs.shape[:2], task.spec.output_dim)
    try:
        out = _forward(model, inputs)
    except (RuntimeError, ValueError, IndexError) as err:
        raise ValueError(
            f"model: does not run on task {task.spec.name!r}'s inputs {tuple(inputs.shape)}: {err}"
        ) from None
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        spec = getattr(model, "spec", None)
        hint = (
            "; a Hugging Face causal LM answers through its answer tokens' logits: save windtunnel.hf.from_hf(lm, task)"
            if isinstance(spec, TaskSpec) and spec.answer_kind == "classes" and spec.output_dim == spec.vocab_size
            else ""
        )
        raise ValueError(f"model: expected outputs of shape {want} on task {task.spec.name!r} (got {got}){hint}")


def _check_rebuilt(model: nn.Module, cfg: RunConfig, task: Any, trust_code: bool) -> None:
    """ValueError unless the model `cfg` builds takes `model`'s weights and then gives its outputs: what the run's
    commands will load is this model."""
    where = f"config: model.arch {cfg.model.arch!r} with model.size {cfg.model.size}"
    with torch.random.fork_rng(devices=[]):  # build_model seeds torch: the caller's random state is left as it was
        rebuilt = build_model(cfg, task.spec, task, trust_code=trust_code, check=False)
    try:
        rebuilt.load_state_dict(model.state_dict(), strict=True)
    except RuntimeError as err:
        first = str(err).strip().splitlines()
        raise ValueError(f"{where} builds a model whose weights are not this one's ({first[-1].strip()})") from None
    inputs = _probe_inputs(model, task)
    mine, theirs = _forward(model, inputs), _forward(rebuilt.to(inputs.device), inputs)
    if not torch.allclose(mine.float(), theirs.float(), rtol=1e-5, atol=1e-6):
        raise ValueError(f"{where} builds a model with this one's weights but other outputs; give the size it has")
