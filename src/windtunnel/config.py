"""Run configuration: one typed, validated `RunConfig` (task, model, train, eval, seed) per run.

Configs load from YAML/JSON, take dotted `--set` overrides, and `resolve_config` expands everything a run
depends on (model preset into `model.size`, task defaults into `task.params`, `model.max_len`), so the
`config.json` of a run directory alone rebuilds its task and model.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from windtunnel.errors import error_message
from windtunnel.tiers import SizeTier

# Predictors that are evaluated like models but never trained (windtunnel.models.baselines).
BASELINES = ("oracle", "uniform")

# Length generalisation: a model with a learned position table reserves positions for its task at this multiple of
# the task's length parameter (the paper trains the HMM at K = 20 and tests up to K = 50; paper-spec §4.3).
LENGTH_RESERVE = 2.5

# Experiment trackers the training loop can feed (windtunnel.tracking).
LoggerName = Literal["tensorboard", "wandb"]


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
    drawn so that no weight or later random number of the run changes). None (default): `resolve_config` reserves,
    for an architecture with a learned position table and no `max_len` given, the positions of the task at
    LENGTH_RESERVE x its length parameter; 0: none. config.json omits None (a run's stored text and hash are as
    before the field existed), and a resolved config stores None for no reservation.
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


class TrainConfig(_Strict):
    """Optimiser, schedule, curriculum, loss, logging/eval/checkpoint cadence and numerics of the training loop.

    Schedules (after `warmup_steps` of linear warmup): "cosine" to min_lr_ratio*lr at `steps`; "constant"; "wsd"
    (warmup-stable-decay): constant, then a linear cooldown to min_lr_ratio*lr over the last `cooldown_frac` of the
    steps. Optimisers: "adamw"; "muon" (`torch.optim.Muon` on the hidden weight matrices, learning rate matched to
    AdamW's update RMS, and AdamW on embeddings, head, norms and biases). `weight_decay_on`: "matrices" (default:
    weight matrices only, not norms, biases, embeddings or `no_weight_decay`-marked parameters) or "all" (every
    parameter, as `torch.optim.AdamW(model.parameters(), weight_decay=...)` in the authors' scripts).
    """

    _OMIT_EMPTY = ("loggers",)

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
    # sep-vocab bijection that is the authors' 2V-way loss (resolve_config refuses it where there is no tied head)
    loss: Literal["auto", "ce", "soft_ce", "gaussian_nll", "ce_vocab"] = "auto"
    eval_every: int = Field(default=500, ge=0)  # 0: only the final evaluation
    eval_size: int = Field(default=256, ge=1)
    log_every: int = Field(default=10, ge=1)
    checkpoint_every: int = Field(default=1000, ge=0)  # 0: only the final checkpoint (+ schedule)
    checkpoint_schedule: list[int] | None = None
    keep_checkpoints: int | None = Field(default=None, ge=1)  # None: keep all
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["float32", "bf16"] = "float32"
    compile: bool = False
    # Trackers fed the metrics.jsonl records (windtunnel.tracking). They change no number, so config.json omits an
    # empty list (a run's stored text and hash are as before the field existed) and no run comparison reads them.
    loggers: list[LoggerName] = Field(default_factory=list)

    @field_validator("loggers")
    @classmethod
    def _loggers(cls, v: list[str]) -> list[str]:
        return list(dict.fromkeys(v))  # `--logger tensorboard` given twice means one writer

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
    # float32 by default (the reported numbers); bf16 is ~3x faster on CPUs with native bf16 and moved the quick
    # bijection transformer's entropy error by 3e-5 bits on 2,000 sequences (docs/training.md).
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
        from windtunnel.plugins import check_module_name, unique

        for i, name in enumerate(v):
            try:
                check_module_name(name)
            except ValueError as err:
                raise ValueError(f"imports[{i}]: {err}") from None
        return unique(v)  # a module given twice is imported once

    @model_validator(mode="after")
    def _baseline_has_no_size(self) -> RunConfig:
        if self.model.arch in BASELINES and self.model.size:
            raise ValueError(f"model.size: the {self.model.arch!r} baseline has no size parameters")
        return self


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


def read_file(path: str | Path) -> dict[str, Any]:
    """Raw dict from a YAML or JSON config file."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"config: no such file {str(p)!r}")
    try:
        data = json.loads(p.read_text()) if p.suffix == ".json" else yaml.safe_load(p.read_text())
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise ValueError(f"config: cannot parse {str(p)!r}: {err}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"config: {str(p)!r} must hold a mapping at the top level")
    return data


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


def eval_name(override: dict[str, Any]) -> str:
    """Name of an evaluation setting: "default" for {}, else "K=50" / "K=50,V=10"."""
    return ",".join(f"{k}={v}" for k, v in sorted(override.items())) or "default"


def eval_settings(cfg: RunConfig) -> list[dict[str, Any]]:
    """The task-parameter overrides evaluated at the end of a run, the training setting first."""
    out: list[dict[str, Any]] = [{}]
    for o in cfg.eval.overrides:
        if o and o not in out:
            out.append(dict(o))
    return out


# TaskSpec fields that size a model's embedding and head.
_MODEL_SHAPE = ("input_kind", "answer_kind", "vocab_size", "input_dim", "n_classes", "answer_token_offset")


def _check_same_shape(spec: Any, base: Any, where: str, what: str) -> None:
    """A task variant may change sequence lengths, never what a model's embedding and head are sized for."""
    for field in _MODEL_SHAPE:
        if getattr(spec, field) != getattr(base, field):
            raise ValueError(
                f"{where}: changes {field} ({getattr(base, field)} -> {getattr(spec, field)}); "
                f"{what} may only change sequence lengths"
            )


def check_override(cfg: RunConfig, override: dict[str, Any]) -> Any:
    """Validate an evaluation setting of a resolved run config (task parameters to change) against the model the run
    trained; returns the task. The task must build, keep the model's input and output sizes, and, for an
    architecture with a position limit (`max_len`), fit in it."""
    from windtunnel import tasks

    where = f"eval override {eval_name(override)}"
    if "name" in override:
        raise ValueError(f"{where}: an evaluation may not change the task (name)")
    base = tasks.make(cfg.task.name, **cfg.task.params)
    try:
        task = tasks.make(cfg.task.name, **{**cfg.task.params, **override})
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    _check_same_shape(task.spec, base.spec, where, "an evaluation")
    limit = cfg.model.size.get("max_len", cfg.model.max_len)  # every architecture's Size has max_len
    if limit is not None and task.spec.seq_len > limit and _position_limit(cfg):
        raise ValueError(
            f"{where}: its sequences have {task.spec.seq_len} positions, more than the model's "
            f"model.max_len = {limit}; train with a larger model.max_len to evaluate them"
        )
    return task


def _position_limit(cfg: RunConfig) -> bool:
    """Whether the run's model refuses inputs longer than its max_len: a baseline never; a registered architecture
    as its Size says (`ModelSize.position_limit`: not one without a learned position table); anything else does."""
    from windtunnel import models

    if cfg.model.arch in BASELINES:
        return False
    if cfg.model.arch not in models.names():
        return True
    try:
        return bool(models.size_class(cfg.model.arch).of(cfg.model.size).position_limit())
    except ValueError:
        return True


def reserved_length(task_name: str, params: dict[str, Any]) -> int | None:
    """The sequence length a learned position table reserves positions for: that of the task with its length
    parameter (`tasks.info(name).length_param`) at LENGTH_RESERVE x its value, rounded half up; None when the task
    declares no length parameter or refuses that value (recall's N beyond its key vocabulary, say)."""
    from windtunnel import tasks

    name = tasks.info(task_name).length_param
    value = params.get(name) if name is not None else None
    if name is None or not isinstance(value, int) or isinstance(value, bool):
        return None
    try:
        longer = tasks.make(task_name, **{**params, name: math.floor(LENGTH_RESERVE * value + 0.5)})
    except ValueError:
        return None
    return int(longer.spec.seq_len)


def resolve_config(cfg: RunConfig | dict[str, Any]) -> RunConfig:
    """Expand a config into the fully explicit one a run records.

    Builds the task (validating task.params and each curriculum stage; defaults filled in), expands the preset into
    model.size (explicit size keys win) and sets model.max_len to the longest sequence over all evaluation settings
    and curriculum stages. The model size is validated against the architecture's `Size` (an import-string
    architecture's when the run builds it, as importing runs code) and records its derived fields (`init`).

    Length generalisation by default: when model.max_len is not given and the architecture has a learned position
    table (`ModelSize.learned_positions`: the transformer, and Mamba or the LSTM with pos "learned"; not the
    capacity-matched MLPs), max_len also covers the task at LENGTH_RESERVE x its length parameter (`reserved_length`),
    and model.reserved_positions records how many positions past the longest trained or evaluated one that added.
    Reserving changes no weight and no number of training (`common.PositionTable`).
    """
    from windtunnel import models, tasks
    from windtunnel.models.presets import preset

    cfg = cfg if isinstance(cfg, RunConfig) else validate(cfg)
    from windtunnel.plugins import check_imported

    check_imported(cfg.imports)  # a config's own modules are imported by who asked for them (windtunnel.plugins)
    task = tasks.make(cfg.task.name, **cfg.task.params)
    if cfg.train.loss == "ce_vocab" and cfg.model.arch not in BASELINES:
        _check_vocab_loss(task.spec)
    params = task.params.model_dump(mode="json") if hasattr(task, "params") else dict(cfg.task.params)
    lengths = [task.spec.seq_len]
    for o in eval_settings(cfg)[1:]:
        try:
            lengths.append(tasks.make(cfg.task.name, **{**params, **o}).spec.seq_len)
        except ValueError as err:
            raise ValueError(f"eval.overrides {o}: {err}") from None
    for i, stage in enumerate(cfg.train.curriculum):
        where = f"train.curriculum[{i}].params {stage.params}"
        try:
            spec = tasks.make(cfg.task.name, **{**params, **stage.params}).spec
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
        _check_same_shape(spec, task.spec, where, "a curriculum stage")
        lengths.append(spec.seq_len)
    longest = max(lengths)
    max_len = cfg.model.max_len or longest
    if max_len < longest:
        raise ValueError(
            f"model.max_len: must be >= {longest}, the longest evaluated or trained sequence (got {max_len})"
        )
    size = dict(cfg.model.size)
    table: bool | None = False  # whether the model has a learned position table (None: not known before it is built)
    if cfg.model.arch not in BASELINES:
        models.check(cfg.model.arch)  # unknown arch -> ValueError naming it; imports nothing
        if cfg.model.preset is not None:
            size = {**preset(cfg.task.name, cfg.model.arch, cfg.model.preset, spec=task.spec).as_config(), **size}
        table = None
        if cfg.model.arch in models.names():  # an import string's Size is read when the run builds it (trust_code)
            typed = models.size_class(cfg.model.arch).of(size, where="model.size.")
            table = typed.learned_positions()
            if cfg.train.loss == "ce_vocab" and not getattr(typed, "tie", False):
                raise ValueError(
                    f"train.loss: 'ce_vocab' needs a tied output head (a logit per token); {cfg.model.arch!r} "
                    + ("has model.size.tie false" if hasattr(typed, "tie") else "has an untied head")
                    + " (use train.loss auto or ce)"
                )
            # resolved=True: fields derived from others (`init`) are stored at their concrete values
            size = typed.as_config(resolved=True)
    reserved = cfg.model.reserved_positions
    if reserved is None:  # the default: reserve for LENGTH_RESERVE x the training length where a table can hold it
        reserved = 0
        target = reserved_length(cfg.task.name, params) if table and cfg.model.max_len is None else None
        if target is not None and target > longest and "max_len" not in size:
            max_len, reserved = target, target - longest
    elif reserved:
        if table is False:
            raise ValueError(
                f"model.reserved_positions: {cfg.model.arch!r} has no learned position table to reserve rows in "
                f"(got {reserved})"
            )
        if cfg.model.max_len is None:
            max_len = longest + reserved
        elif max_len - reserved < longest:
            raise ValueError(
                f"model.reserved_positions: must leave the longest evaluated or trained sequence ({longest}) "
                f"outside the reserved rows of model.max_len = {max_len} (got {reserved})"
            )
    data = cfg.model_dump(mode="json")
    data["task"]["params"] = params
    data["model"]["size"] = size
    data["model"]["max_len"] = max_len
    data["model"]["reserved_positions"] = reserved or None  # None: no reservation (config.json omits it)
    return validate(data)


# Size fields added after run directories were first written, with the value every run stored without them trained
# with: before `init` existed every architecture, the paper Mamba variant included, was initialised "normal".
_ADDED_SIZE_FIELDS = {"init": "normal"}


def upgrade_stored(data: Any) -> Any:
    """A stored config.json (a dict, changed in place and returned) in today's form: a registered architecture's
    `model.size` that lacks a field added since (`_ADDED_SIZE_FIELDS`) gets the value that run trained with, not
    today's default (which for `init` depends on the architecture). Anything that is not such a config passes as is."""
    from windtunnel import models

    model = data.get("model") if isinstance(data, dict) else None
    size = model.get("size") if isinstance(model, dict) else None
    arch = model.get("arch") if isinstance(model, dict) else None
    if not isinstance(size, dict) or not isinstance(arch, str) or arch not in models.names():
        return data
    declared = models.size_class(arch).model_fields
    for key, value in _ADDED_SIZE_FIELDS.items():
        if key in declared and key not in size:
            size[key] = value
    return data


def run_identity(cfg: RunConfig) -> dict[str, Any]:
    """A config's JSON data less what changes no number (`train.loggers`): what must match for a stored run to be
    the run asked for (manifest.check_same_run, resume) and what a run's `config_hash` is of."""
    data = cfg.model_dump(mode="json")
    data["train"].pop("loggers", None)
    return data


def config_to_json(cfg: RunConfig) -> str:
    """Stable, human-readable JSON of a config."""
    return json.dumps(cfg.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def _check_vocab_loss(spec: Any) -> None:
    """`train.loss: ce_vocab` scores every token logit of a tied head, so the task's answers must be input tokens
    (`TaskSpec.answer_token_offset`); ValueError naming train.loss otherwise."""
    if spec.answer_kind != "classes" or spec.input_kind != "tokens" or spec.answer_token_offset is None:
        raise ValueError(
            f"train.loss: 'ce_vocab' needs a task whose answers are input tokens (answer_token_offset); task "
            f"{spec.name!r} has none (use train.loss auto)"
        )


def resolve_loss(cfg: RunConfig, task: Any) -> str:
    """The loss a run trains with: the explicit choice, else gaussian_nll for real answers, else the task's own
    `default_loss` ("ce" on sampled targets unless the tunnel says "soft_ce"; tasks.base.WindTunnel)."""
    if cfg.train.loss != "auto":
        return cfg.train.loss
    if task.spec.answer_kind == "real":
        return "gaussian_nll"
    pref = getattr(task, "default_loss", "ce")
    return pref if pref in ("ce", "soft_ce") else "ce"
