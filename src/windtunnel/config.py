"""Run configuration: one typed, validated `RunConfig` (task, model, train, eval, seed) per run.

Configs load from YAML/JSON and take dotted `--set` overrides. This module is the schema and its file forms only;
`windtunnel.resolve` expands a config into everything a run depends on (model preset into `model.size`, task
defaults into `task.params`, `model.max_len`), so the `config.json` of a run directory alone rebuilds its task and
model.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
)

from windtunnel.errors import error_message
from windtunnel.plugins import check_module_name, unique
from windtunnel.tiers import SizeTier

# Experiment trackers the training loop can feed (windtunnel.training.tracking).
LoggerName = Literal["tensorboard", "wandb"]
# torch.compile modes `train.compile` may name besides true/false (reduce-overhead: CUDA graphs on a GPU).
CompileMode = Literal["reduce-overhead", "max-autotune"]
COMPILE_MODES: tuple[str, ...] = get_args(CompileMode)


def _check_finite(value: Any, where: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where or 'value'} must be a finite number (got {value})")
    if isinstance(value, dict):
        for k, v in value.items():
            _check_finite(v, f"{where}.{k}" if where else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_finite(v, f"{where}[{i}]")


def _finite(value: Any) -> Any:
    """Validator: refuse inf/nan anywhere inside free-form parameters (dicts and lists of numbers), naming the key."""
    _check_finite(value, "")
    return value


class _Strict(BaseModel):
    """Unknown keys are an error, not silently ignored; so is a non-finite number in any float field."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    # Fields added after run directories were first written: left out of the dump while empty (None or []), so every
    # config that does not use them keeps its stored text, hash and identity.
    _OMIT_EMPTY: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_empty(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for name in self._OMIT_EMPTY:
            if getattr(self, name) in (None, []):
                data.pop(name, None)
        return data


class TaskConfig(_Strict):
    """Which wind tunnel, and its parameters (validated by building the task)."""

    name: str = "bijection"
    params: dict[str, Any] = Field(default_factory=dict)

    _params_finite = field_validator("params")(_finite)


class ModelConfig(_Strict):
    """Architecture, optional size preset, size overrides on top of it, and positions to allocate.

    `reserved_positions`: how many of the last of the `max_len` positions are reserved for evaluating sequences
    longer than any the run trains on or its config evaluates (`common.PositionTable`: never read in training, and
    drawn so that no weight or later random number of the run changes). None (default): `resolve.resolve_config`
    reserves, for an architecture with a learned position table and no `max_len` given, the positions of the task
    at `resolve.LENGTH_RESERVE` x its length parameter; 0: none. config.json omits None (a run's stored text and
    hash are as before the field existed), and a resolved config stores None for no reservation.
    """

    _OMIT_EMPTY = ("reserved_positions",)

    arch: str = "transformer"
    preset: SizeTier | None = None
    size: dict[str, Any] = Field(default_factory=dict)
    max_len: int | None = Field(default=None, ge=1)
    reserved_positions: int | None = Field(default=None, ge=0)

    _size_finite = field_validator("size")(_finite)


class CurriculumStage(_Strict):
    """Train on the task with `params` overriding its parameters for every step <= `until`."""

    until: int = Field(ge=1)
    params: dict[str, Any] = Field(default_factory=dict)

    _params_finite = field_validator("params")(_finite)


def warmup_for(steps: int) -> int:
    """The warmup of a run whose budget sets it: 5% of the steps, at least one (the quick, standard and smoke tiers;
    a time-to-Bayes cell that names none)."""
    return max(1, steps // 20)


class TrainConfig(_Strict):
    """Optimiser, schedule, curriculum, loss, logging/eval/checkpoint cadence and numerics of the training loop.

    Schedules (after `warmup_steps` of linear warmup): "cosine" to min_lr_ratio*lr at `steps`; "constant"; "wsd"
    (warmup-stable-decay): constant, then a linear cooldown to min_lr_ratio*lr over the last `cooldown_frac` of the
    steps. Optimisers: "adamw"; "muon" (`optim.BlockMuon` on each hidden matrix's blocks: every LSTM gate,
    attention's q, k and v, Conv1D-style layers; learning rate matched to AdamW's update RMS; AdamW on embeddings,
    head, norms, biases and Mamba's dt_proj, conv, A_log and D: `optim.describe`). `weight_decay_on`: "matrices"
    (default: weight matrices only, not norms, biases, embeddings or `no_weight_decay`-marked parameters) or "all"
    (every parameter, as `torch.optim.AdamW(model.parameters(), weight_decay=...)` in the authors' scripts).

    Early stop (`early_stop`, 0 or None: off, the default): with `early_stop` = n >= 1 a run stops after the n-th
    consecutive periodic validation evaluation (every `eval_every` steps) whose verdict is ✓ exact -- `marks.verdict`
    on the validation result with bootstrap intervals over its `eval_size` sequences, at the conservative end of each
    interval, as the final evaluation's verdict is; any other verdict (◐, ✗, ⚠) restarts the count. A run that stops
    writes its checkpoint at that step and its final (test-stream) evaluation as at its last step, and is a finished
    run that stopped early, not an interrupted one (`resume.run_record`); a resume trains it no further. The
    learning-rate schedule stays the config's, over `steps`: an early stop cuts it where it stands (a cosine schedule
    has not decayed). It counts evaluations before the last step only, so it needs `eval_every` between 1 and
    `steps` - 1 (anything else is refused: it could never stop the run). config.json omits the field when off (a
    run's stored text and hash are as before it existed).

    Auxiliary target (`aux_target`, `aux_weight`; off by default): training also fits one of the task's auxiliary
    targets (`Task.auxiliary_targets`: the HMM's "next_state_prior", b_t·T) with a Linear head of its own on the
    hidden state the output head reads, adding aux_weight x KL(target || its softmax) at the scored positions to the
    loss. The head is a training device: evaluation, probes and the checkpoint's model weights never see it. Both
    fields are set together (a weight > 0 names a target; a target needs a weight > 0); a weight of 0 is stored as
    None (off), and config.json omits both when off (a run's stored text and hash are as before they existed).

    Weight averaging (`ema_decay`, None: off, the default): training keeps an exponential moving average of the
    model's parameters, ema = decay ema + (1 - decay) params after each optimiser step from the first step's weights on
    (buffers copied); the periodic validation, the final evaluation and the checkpoints' weights files are the
    average's, the trained weights go with the training state (an exact resume). config.json omits it when off.
    """

    _OMIT_EMPTY = ("loggers", "early_stop", "aux_target", "aux_weight", "ema_decay")

    steps: int = Field(default=1000, ge=0)
    batch_size: int = Field(default=64, ge=1)
    lr: float = Field(default=3e-4, gt=0, allow_inf_nan=False)
    min_lr_ratio: float = Field(default=0.0, ge=0, le=1)
    warmup_steps: int = Field(default=100, ge=0)
    schedule: Literal["cosine", "constant", "wsd"] = "cosine"
    cooldown_frac: float = Field(default=0.2, ge=0, le=1)
    optimizer: Literal["adamw", "muon"] = "adamw"
    weight_decay: float = Field(default=0.01, ge=0, allow_inf_nan=False)
    weight_decay_on: Literal["matrices", "all"] = "matrices"
    curriculum: list[CurriculumStage] = Field(default_factory=list)
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float | None = Field(default=1.0, gt=0)
    # "ce_vocab": cross-entropy over every token logit of a tied head (target: answer_token_offset + class); on the
    # sep-vocab bijection that is the authors' 2V-way loss (resolve_config refuses it where there is no tied head).
    # "gaussian_kl": the closed-form KL(exact Gaussian predictive || model's) of a real-answer task; "posterior": soft
    # targets, the exact posterior itself (soft_ce for classes, gaussian_kl for real answers: resolve.resolve_loss)
    loss: Literal["auto", "ce", "soft_ce", "gaussian_nll", "gaussian_kl", "posterior", "ce_vocab"] = "auto"
    eval_every: int = Field(default=500, ge=0)  # 0: only the final evaluation
    eval_size: int = Field(default=256, ge=1)
    early_stop: int | None = Field(default=None, ge=0)  # see the docstring; 0 is stored as None (off)
    aux_target: str | None = Field(default=None, min_length=1)  # see the docstring: a task's auxiliary target
    aux_weight: float | None = Field(default=None, ge=0, validate_default=True)  # 0 is stored as None (off)
    ema_decay: float | None = Field(default=None, gt=0, lt=1)  # see the docstring: weight averaging
    log_every: int = Field(default=10, ge=1)
    checkpoint_every: int = Field(default=1000, ge=0)  # 0: only the final checkpoint (+ schedule)
    checkpoint_schedule: list[int] | None = None
    keep_checkpoints: int | None = Field(default=None, ge=1)  # None: keep all
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["float32", "bf16"] = "float32"
    # torch.compile of the training forward: true (its default mode) or a mode by name ("reduce-overhead": CUDA
    # graphs on a GPU, launches replayed; on a CPU the compiled code without them); false, the default, runs eager
    compile: bool | CompileMode = False
    # Trackers fed the metrics.jsonl records (windtunnel.training.tracking). They change no number, so config.json
    # omits an empty list (a run's stored text and hash are as before the field existed) and no run comparison reads
    # them.
    loggers: list[LoggerName] = Field(default_factory=list)

    @field_validator("compile", mode="before")
    @classmethod
    def _compile(cls, v: Any) -> Any:
        """One message for a setting that is neither a boolean nor a mode, not one per member of the union."""
        if isinstance(v, bool) or v in COMPILE_MODES:
            return v
        modes = ", ".join(repr(m) for m in COMPILE_MODES)
        raise ValueError(f"must be true, false or a torch.compile mode ({modes})")

    @field_validator("loggers")
    @classmethod
    def _loggers(cls, v: list[str]) -> list[str]:
        return list(dict.fromkeys(v))  # `--logger tensorboard` given twice means one writer

    @field_validator("early_stop")
    @classmethod
    def _early_stop(cls, v: int | None, info: ValidationInfo) -> int | None:
        """0 and None are one setting (off), stored as None: omitted from config.json. On, it needs a validation
        evaluation before the last step (the rule counts only those: the last step ends the run anyway), so
        train.eval_every must be at least 1 and below train.steps, else the setting could never stop the run."""
        steps, every = info.data.get("steps"), info.data.get("eval_every")
        if v and steps and every is not None and not 0 < every < steps:
            why = "0 (only the final evaluation)" if every == 0 else f"{every:,}, not below train.steps ({steps:,})"
            fix = f"set train.eval_every between 1 and {steps - 1:,}, or" if steps > 1 else "a one-step run cannot:"
            raise ValueError(
                f"can never stop the run: train.eval_every is {why}, so no validation evaluation runs before its "
                f"last step; {fix} leave train.early_stop off"
            )
        return v or None

    @field_validator("aux_weight")
    @classmethod
    def _aux_weight(cls, v: float | None, info: ValidationInfo) -> float | None:
        """0 and None are one setting (off), stored as None; a weight needs a target and a target a weight. Whether
        the task offers the target is checked where the task is built (`resolve.resolve_config`)."""
        target = info.data.get("aux_target")
        if v and target is None:
            raise ValueError(
                "needs train.aux_target, the name of an auxiliary target of the task (e.g. next_state_prior for the "
                "HMMs); leave train.aux_weight at 0 for none"
            )
        if not v and target is not None:
            raise ValueError(f"must be > 0 to train on train.aux_target {target!r} (0 or none: no auxiliary target)")
        return v or None

    @field_validator("betas")
    @classmethod
    def _betas(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not all(0 <= b < 1 for b in v):
            raise ValueError("each beta must be in [0, 1)")
        return v

    @field_validator("checkpoint_schedule")
    @classmethod
    def _schedule(cls, v: list[int] | None) -> list[int] | None:
        if v is None:
            return v
        if any(s < 1 for s in v):
            raise ValueError("checkpoint steps must be >= 1")
        return sorted(set(v))

    @field_validator("curriculum")
    @classmethod
    def _curriculum(cls, v: list[CurriculumStage]) -> list[CurriculumStage]:
        ends = [st.until for st in v]
        if ends != sorted(set(ends)):
            raise ValueError(f"stage 'until' steps must be strictly increasing (got {ends})")
        return v


class EvalConfig(_Strict):
    """Final evaluation: number of sequences, forward batch size, extra task-parameter settings to test."""

    n: int = Field(default=2000, ge=1)
    batch_size: int = Field(default=250, ge=1)
    overrides: list[dict[str, Any]] = Field(default_factory=list)
    _overrides_finite = field_validator("overrides")(_finite)
    # float32 by default (the reported numbers); bf16 is faster on CPUs with native bf16, and what it does to the
    # metrics is measured in docs/training.md (`eval.dtype`).
    dtype: Literal["float32", "bf16"] = "float32"


class RunConfig(_Strict):
    """Everything a run depends on; its JSON form is the run directory's config.json."""

    _OMIT_EMPTY = ("imports",)

    task: TaskConfig = Field(default_factory=TaskConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    seed: int = Field(default=0, ge=0, lt=2**31)
    # Modules imported before the run's task and model are built (`--import`; windtunnel.plugins): they register a
    # user's own tasks and architectures. Loading a run imports them only where the user says so (--import, or
    # --trust-code for installed packages). config.json omits an empty list: a run's stored text and hash are as
    # before the field existed.
    imports: list[str] = Field(default_factory=list)

    @field_validator("imports")
    @classmethod
    def _imports(cls, v: list[str]) -> list[str]:
        for i, name in enumerate(v):
            try:
                check_module_name(name)
            except ValueError as err:
                raise ValueError(f"imports[{i}]: {err}") from None
        return unique(v)  # a module given twice is imported once


def lr_at(step: int, cfg: RunConfig) -> float:
    """Learning rate for update number `step` (1-based): linear warmup to `lr`, then

    cosine   half-cosine from lr at the end of warmup to min_lr_ratio*lr at `steps`;
    constant lr;
    wsd      lr until the last `cooldown_frac` of the steps, then linear to min_lr_ratio*lr at `steps`.
    """
    t = cfg.train
    if t.warmup_steps and step <= t.warmup_steps:
        return t.lr * step / t.warmup_steps
    floor = t.min_lr_ratio * t.lr
    if t.schedule == "constant":
        return t.lr
    if t.schedule == "wsd":
        start = max(t.warmup_steps, t.steps - round(t.cooldown_frac * t.steps))  # last step at full lr
        if step <= start:
            return t.lr
        frac = min(1.0, (step - start) / max(1, t.steps - start))
        return t.lr - (t.lr - floor) * frac
    span = max(1, t.steps - t.warmup_steps)
    frac = min(1.0, (step - t.warmup_steps) / span)
    return floor + (t.lr - floor) * 0.5 * (1 + math.cos(math.pi * frac))


def validate(data: dict[str, Any]) -> RunConfig:
    """Dict -> RunConfig; a ValidationError becomes a ValueError naming each bad field."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        raise ValueError(error_message(err, model=RunConfig)) from None


class _Loader(yaml.SafeLoader):
    """YAML 1.1 as `yaml.safe_load` reads it, plus exponent floats without a dot (`1e-3`, `3E4`), which YAML 1.1
    (unlike 1.2 and JSON) would leave as strings."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789")
)


def parse_value(text: str) -> Any:
    """A command-line value (`--set`, `--grid`, `--only`) as a YAML scalar or list (`3`, `1e-3` -> 0.001, `true`,
    `[20,30]`), else the string as written (YAML's dates and sets stay strings)."""
    try:
        value = yaml.load(text, Loader=_Loader)  # a SafeLoader: builds plain data only
        json.dumps(value)  # a date or a set is no config value: keep what was written
    except (yaml.YAMLError, TypeError, ValueError):
        return text
    return value


# Bounds on a config or recipe file, far above any real one (a few KB, a few hundred values, 5 levels deep): a YAML
# alias bomb (each alias repeats the node it names, so a few hundred bytes can stand for 10^9 values) or a deeply
# nested file is refused when it is read, not expanded by what validates or reports it.
MAX_FILE_BYTES = 1 << 20
MAX_NODES = 100_000  # values, each alias counted as the values it repeats
MAX_DEPTH = 64


def read_file(path: str | Path) -> dict[str, Any]:
    """Raw dict from a YAML or JSON config file, within MAX_FILE_BYTES, MAX_NODES and MAX_DEPTH (a ValueError
    naming the file otherwise)."""
    p = Path(path)
    if not p.is_file():
        if p.exists():  # a folder, a device (/dev/null), a FIFO: never opened
            kind = "a directory" if p.is_dir() else "a device, FIFO or socket"
            raise ValueError(f"config: {str(p)!r} is {kind}, not a config file")
        raise FileNotFoundError(f"config: no such file {str(p)!r}")
    with p.open("rb") as f:
        raw = f.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        raise ValueError(f"config: {str(p)!r} is larger than {MAX_FILE_BYTES} bytes; a config or recipe is a few KB")
    try:
        text = raw.decode("utf-8")
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as err:
        raise ValueError(f"config: cannot parse {str(p)!r}: {_parse_error(err)}") from None
    except RecursionError:
        raise ValueError(f"config: {str(p)!r} is nested more than {MAX_DEPTH} levels deep") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"config: {str(p)!r} must hold a mapping at the top level")
    _check_bounds(data, str(p))
    return data


def _parse_error(err: Exception) -> str:
    """A parser's error as one line: YAML's names the line and column of the problem and of what it was parsing,
    never the file's text (its message quotes the line, over several lines)."""
    if isinstance(err, yaml.MarkedYAMLError):
        where = f"line {err.problem_mark.line + 1}, column {err.problem_mark.column + 1}: " if err.problem_mark else ""
        context = err.context_mark
        during = (
            f" ({err.context} at line {context.line + 1}, column {context.column + 1})"
            if err.context and context is not None
            else ""
        )
        return f"{where}{err.problem or 'not YAML'}{during}"
    return " ".join(str(err).split())


def _check_bounds(data: Any, where: str) -> None:
    """A ValueError naming `where` if `data`, with every YAML alias expanded, holds more than MAX_NODES values or
    nests deeper than MAX_DEPTH. Walks at most MAX_NODES values, so a bomb (or an alias that contains itself) is
    refused in the time of a real file."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise ValueError(
                f"config: {where!r} holds more than {MAX_NODES} values once its YAML aliases are expanded (an alias "
                "repeats what it names); a config or recipe holds a few hundred"
            )
        if depth > MAX_DEPTH:
            raise ValueError(f"config: {where!r} is nested more than {MAX_DEPTH} levels deep")
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children)


def load_config(path: str | Path) -> RunConfig:
    """Load and validate a RunConfig from a YAML or JSON file."""
    return validate(read_file(path))


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any] | None) -> dict[str, Any]:
    """Apply dotted overrides (`train.lr`, `task.V`, `model.size.d_model`, `model.d_model`) to a raw config dict.

    `task.X` with X not a TaskConfig field goes to `task.params.X`; `model.X` with X not a ModelConfig field
    goes to `model.size.X`. Other unknown keys are left in place for validation to reject by name.
    """
    out = json.loads(json.dumps(data))  # deep copy of plain data
    for key, value in (overrides or {}).items():
        parts = key.split(".")
        if not all(parts):
            raise ValueError(f"--set: malformed key {key!r}")
        if len(parts) == 2 and parts[0] == "task" and parts[1] not in TaskConfig.model_fields:
            parts = ["task", "params", parts[1]]
        elif len(parts) == 2 and parts[0] == "model" and parts[1] not in ModelConfig.model_fields:
            parts = ["model", "size", parts[1]]
        node = out
        for p in parts[:-1]:
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise ValueError(f"--set {key}: {p!r} is not a section")
            node = nxt
        node[parts[-1]] = value
    return out


def build_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None, **fields: Any) -> RunConfig:
    """Config file (optional) + dotted overrides (+ keyword shortcuts given as dotted keys) -> RunConfig."""
    data = read_file(path) if path is not None else {}
    return validate(apply_overrides(data, {**fields, **(overrides or {})}))


def run_identity(cfg: RunConfig) -> dict[str, Any]:
    """A config's JSON data less what changes no number (`train.loggers`): what must match for a stored run to be
    the run asked for (manifest.check_same_run, resume) and what a run's `config_hash` is of."""
    data = cfg.model_dump(mode="json")
    data["train"].pop("loggers", None)
    return data


def config_to_json(cfg: RunConfig) -> str:
    """Stable, human-readable JSON of a config."""
    return json.dumps(cfg.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
