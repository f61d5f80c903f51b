"""Four architectures behind one protocol (see `windtunnel.models.base`).

Glossary:
    architecture   a class registered under a name (`models.register`, `models.names()`), or named by an import
                   string `package.module:Class`; built as `Arch(spec, size)` for a task's `TaskSpec`. The built-ins
                   (transformer, mamba, lstm, mlp, mlp-pointwise, oracle, uniform) are registered by import string and
                   imported the first time their name is looked up: importing this package imports none of them.
    Size           `Arch.Size`, a pydantic `ModelSize` subclass: the one place an architecture's size fields, their
                   defaults and allowed ranges are written; a config's `model.size` is validated against it.
    preset, tier   `presets.preset(task, arch, tier)`: a built-in's Size for a task at a size tier (smoke, quick,
                   paper); an architecture of one's own gets the tier's generic sizes (`presets.user_preset`).
    baseline       a never-trained predictor of whole batches (`oracle`: the exact posterior; `uniform`: the
                   context-blind floor), registered as an architecture (`models.baselines`); asked in one way
                   everywhere, `is_baseline(arch)` (a name, class or model; `info(arch).baseline`), a user's own too.
    control        an architecture that `follows` another (`info(arch).follows`): the two MLPs take the
                   transformer's size (matched to its parameter count), budget and recipe; they have no attention
                   and no recurrence.
    context-blind  cannot (the oracle: need not) read the context: `mlp-pointwise` (each position sees only its own
                   token) and the baselines (`info(arch).context_blind`); the report checks no failure floor for them.
    hook point     a named activation (`embed`, `blocks.{l}.resid_pre`, ..., `final`) that `run_with_cache` records
                   and `hooks` reads or replaces (`models.hooks`, docs/hooks.md).
    learned position table  `common.PositionTable`: one learned vector per position up to `max_len`, its last
                   `reserved_positions` rows a buffer kept for evaluating longer sequences; `Size.learned_positions()`
                   says whether a model has one.

`check_causal(model, spec)` refuses a model whose output at a position depends on a later input (CausalityError,
exit 2): every model is checked before it trains or is evaluated (`models.causality`).

`info(arch)` is what the suites and the report read of an architecture (row order, follows, context-blindness,
baseline, relative cost, colour): ClassVars on its class, with `SequenceModel`'s defaults for a user's own.
"""

from windtunnel.models.base import InitSize, ModelSize, ResidualModel, SequenceModel, predictive
from windtunnel.models.causality import CausalityError, check_causal
from windtunnel.models.registry import (
    ArchInfo,
    built_ins,
    check,
    info,
    is_baseline,
    is_import_string,
    make,
    names,
    register,
    resolve,
    size_class,
)

__all__ = [
    "ArchInfo",
    "CausalityError",
    "InitSize",
    "ModelSize",
    "ResidualModel",
    "SequenceModel",
    "built_ins",
    "check",
    "check_causal",
    "info",
    "is_baseline",
    "is_import_string",
    "make",
    "names",
    "predictive",
    "register",
    "resolve",
    "size_class",
]
