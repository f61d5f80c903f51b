"""Config resolution: a `RunConfig` expanded into the fully explicit one a run records, and the checks a run's
settings pass against the task and model it builds (evaluation overrides, the loss, reserved positions).

The schema lives in `windtunnel.config`; this module builds tasks and reads architectures' sizes to fill it in.
"""

from __future__ import annotations

import math
from typing import Any

from windtunnel import budget, models, tasks
from windtunnel.config import RunConfig, validate
from windtunnel.models.presets import preset
from windtunnel.plugins import check_imported

# Length generalisation: a model with a learned position table reserves positions for its task at this multiple of
# the task's length parameter (the paper trains the HMM at K = 20 and tests up to K = 50; paper-spec §4.3).
LENGTH_RESERVE = 2.5


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
    if models.is_baseline(cfg.model.arch):
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
    name = tasks.info(task_name).length_param
    value = params.get(name) if name is not None else None
    if name is None or not isinstance(value, int) or isinstance(value, bool):
        return None
    try:
        longer = tasks.make(task_name, **{**params, name: math.floor(LENGTH_RESERVE * value + 0.5)})
    except ValueError:
        return None
    return int(longer.spec.seq_len)


def resolve_config(cfg: RunConfig | dict[str, Any], *, check_memory: bool = True) -> RunConfig:
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

    Bounds last (`windtunnel.budget`, skipped with check_memory=False): a run that needs more memory than this machine
    has, or more than `budget.MAX_STEPS` steps, is a ValueError naming the fields of `cfg` to change.
    """
    cfg = cfg if isinstance(cfg, RunConfig) else validate(cfg)
    check_imported(cfg.imports)  # a config's own modules are imported by who asked for them (windtunnel.plugins)
    # here, not in the schema: windtunnel.config loads no model
    if models.is_baseline(cfg.model.arch) and cfg.model.size:
        raise ValueError(f"model.size: the {cfg.model.arch!r} baseline has no size parameters")
    task = tasks.make(cfg.task.name, **cfg.task.params)
    if cfg.train.loss == "ce_vocab" and not models.is_baseline(cfg.model.arch):
        _check_vocab_loss(task.spec)
    _check_loss_kind(cfg.train.loss, task.spec)
    _check_aux_target(cfg.train.aux_target, task)
    params = task.params.stored() if task.offers("params") else dict(cfg.task.params)
    lengths = [task.spec.seq_len]
    for o in eval_settings(cfg)[1:]:
        try:
            lengths.append(tasks.make(cfg.task.name, **{**params, **o}).spec.seq_len)
        except ValueError as err:
            raise ValueError(f"eval.overrides {o}: {err}") from None
    for i, stage in enumerate(cfg.train.curriculum):
        if stage.until >= cfg.train.steps:  # the run would end inside the stage: never trained on the task itself
            raise ValueError(
                f"train.curriculum[{i}].until: {stage.until} is not below train.steps ({cfg.train.steps}), so the "
                "run would never train on the task itself; end the stage earlier or train longer"
            )
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
    if not models.is_baseline(cfg.model.arch):
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
    resolved = validate(data)
    if check_memory:  # before anything is built or allocated
        budget.check(cfg, resolved, lambda variant: resolve_config(variant, check_memory=False))
    return resolved


def auxiliary_targets_offered(task: Any) -> dict[str, str]:
    """The auxiliary targets a task offers (`Task.auxiliary_targets_offered`: name -> what it is, in words)."""
    return dict(task.auxiliary_targets_offered)


def _check_aux_target(name: str | None, task: Any) -> None:
    """ValueError naming train.aux_target and the targets the task offers where it offers no target `name`."""
    offered = auxiliary_targets_offered(task)
    if name is None or name in offered:
        return
    has = f"offers {', '.join(repr(n) for n in offered)}" if offered else "offers no auxiliary target"
    raise ValueError(f"train.aux_target: task {task.name!r} {has} (got {name!r})")


def aux_text(cfg: RunConfig) -> str:
    """A run's auxiliary target in words ("an auxiliary target the paper did not use: the exact next-state prior
    b_t·T, weight 0.5"), or "" where it has none (`train.aux_target`)."""
    t = cfg.train
    if t.aux_target is None:
        return ""
    what = auxiliary_targets_offered(tasks.make(cfg.task.name, **cfg.task.params)).get(t.aux_target, t.aux_target)
    return f"an auxiliary target the paper did not use: {what}, weight {t.aux_weight:g}"


def _check_vocab_loss(spec: Any) -> None:
    """`train.loss: ce_vocab` scores every token logit of a tied head, so the task's answers must be input tokens
    (`TaskSpec.answer_token_offset`); ValueError naming train.loss otherwise."""
    if spec.answer_kind != "classes" or spec.input_kind != "tokens" or spec.answer_token_offset is None:
        raise ValueError(
            f"train.loss: 'ce_vocab' needs a task whose answers are input tokens (answer_token_offset); task "
            f"{spec.name!r} has none (use train.loss auto)"
        )


# The losses that read one kind of answer: class answers (a Categorical posterior) or real ones (a Gaussian).
_CLASS_LOSSES = ("ce", "soft_ce", "ce_vocab")
_REAL_LOSSES = ("gaussian_nll", "gaussian_kl")


def _check_loss_kind(loss: str, spec: Any) -> None:
    """ValueError naming train.loss where the loss reads the other kind of answer than the task's."""
    real = spec.answer_kind == "real"
    if loss in (_CLASS_LOSSES if real else _REAL_LOSSES):
        fits = ", ".join(("auto", "posterior", *(_REAL_LOSSES if real else _CLASS_LOSSES)))
        raise ValueError(
            f"train.loss: {loss!r} is for {'class' if real else 'real'} answers; task {spec.name!r} has "
            f"{'real' if real else 'class'} answers (use one of {fits})"
        )


def resolve_loss(cfg: RunConfig, task: Any) -> str:
    """The loss a run trains with: the explicit choice ("posterior": soft_ce for class answers, gaussian_kl for real
    ones), else gaussian_nll for real answers, else the task's own `default_loss` ("ce" on sampled targets unless the
    tunnel says "soft_ce"; tasks.base.Task)."""
    if cfg.train.loss == "posterior":
        return "gaussian_kl" if task.spec.answer_kind == "real" else "soft_ce"
    if cfg.train.loss != "auto":
        return cfg.train.loss
    if task.spec.answer_kind == "real":
        return "gaussian_nll"
    pref = task.default_loss
    return pref if pref in ("ce", "soft_ce") else "ce"
