"""Size presets per (task, architecture, tier): `preset("bijection", "transformer", "paper")` -> a TransformerSize.

Tiers: `smoke` (tiny, for tests), `quick` (trains in minutes on a 2-core CPU), `paper` (the paper's sizes:
bijection 6 layers x 6 heads x d 192; HMM 9 x 8 x 256; recall and regression use the bijection sizes).
The controls (`info(arch).follows`: the two MLPs) have no sizes of their own: their depth and width are solved to match
the preset of the architecture they follow (the transformer) of the same (task, tier) within 1% of its parameter
count, at the depths their `depth_factors` name. Unknown (user) task names get the generic sizes of the tier.
"""

from __future__ import annotations

import functools
import math
from typing import Any, cast

from windtunnel import tasks
from windtunnel.models.base import ModelSize
from windtunnel.models.common import check_choice, count_params, match_params
from windtunnel.models.registry import built_ins, check, info, peek, resolve, size_class
from windtunnel.tasks.base import TaskSpec
from windtunnel.tiers import SIZE_TIERS

_TIERS = SIZE_TIERS

# Generic sizes per tier; per-task overrides below. A control's (`info(arch).follows`: the MLPs) are the fields it keeps
# while its depth and width are matched to the architecture it follows (`_matched`): the prefix MLP's slot width.
_GENERIC: dict[str, dict[str, dict[str, Any]]] = {
    "smoke": {
        "transformer": dict(n_layers=2, n_heads=2, d_model=32, d_ff=64),
        "mamba": dict(n_layers=2, d_model=32),
        "lstm": dict(n_layers=2, d_model=32),
        "mlp": dict(d_emb=4),
    },
    "quick": {
        "transformer": dict(n_layers=4, n_heads=4, d_model=128, d_ff=512),
        "mamba": dict(n_layers=4, d_model=128),
        "lstm": dict(n_layers=3, d_model=128),
        "mlp": dict(d_emb=8),
    },
    "paper": {
        "transformer": dict(n_layers=6, n_heads=6, d_model=192, d_ff=768),
        "mamba": dict(n_layers=6, d_model=192),
        "lstm": dict(n_layers=6, d_model=192),
        "mlp": dict(d_emb=16),
    },
}
_OVERRIDES: dict[tuple[str, str], dict[str, dict[str, Any]]] = {
    # Binding forms fast in small models: at the quick tier's recall size (4 pairs) a 2 x 64 transformer was perfect
    # by step 400, while 4 x 128 was still at chance among the stored values at step 750 (docs/reproduce.md).
    ("recall", "quick"): {
        "transformer": dict(n_layers=2, n_heads=4, d_model=64, d_ff=256),
        "mamba": dict(n_layers=2, d_model=64),
        "lstm": dict(n_layers=2, d_model=64),
    },
    # The HMM's matrices sit at fixed prompt positions; Mamba has no positions of its own (the official HMM Mamba has
    # none either) and must count its way through the 53-token header. With learned positions the quick HMM Mamba
    # reached 0.084 bits after 3,000 steps, against 0.170 without (docs/reproduce.md).
    # 8 heads (the paper's HMM head count) at the same width: 0.083 vs 0.088 bits after 2,000 steps. Rotary q/k on
    # top of the learned table (finding "the previous observation" is a relative lookup): two of four seeds/settings
    # left the one-observation-filter plateau by step 2,000 (0.045 and 0.038 bits at 3,000), against step ~2,400 or
    # later with the learned table alone (docs/reproduce.md).
    # The LSTM's plain stack (each layer replaces the stream with its h, the N(0, 0.02) embedding read unnormalised)
    # sat on the HMM's context-blind floor on every recipe tried, up to 8,000 steps, and did not learn even a 2-state,
    # 2-symbol HMM of 2 observations in 1,000 steps with AdamW; with each layer reading LayerNorm of its input and
    # adding its h to it, the same 3 x 128 LSTM leaves the floor by step 700 (docs/results/time-to-bayes.md, the LSTM
    # on the HMM).
    ("hmm", "quick"): {
        "transformer": dict(n_layers=4, n_heads=8, d_model=128, d_ff=512, pos="learned+rotary"),
        "mamba": dict(n_layers=4, d_model=128, pos="learned"),
        "lstm": dict(n_layers=3, d_model=128, norm_inputs=True, residual=True),
    },
    # The authors' models (suites.settings.PAPER_SETTINGS): bijection Mamba and LSTM read learned positions, the HMM
    # ones none; both LSTMs use inter-layer dropout 0.1. These are sizes: the paper tier adds the authors' forms from
    # that table in model.size (Mamba variant="paper" with pos "none" for the HMM, init "torch" where theirs is).
    ("bijection", "paper"): {
        "transformer": _GENERIC["paper"]["transformer"],
        "mamba": dict(n_layers=6, d_model=192, pos="learned"),
        "lstm": dict(n_layers=6, d_model=192, pos="learned", dropout=0.1),
    },
    ("hmm", "paper"): {
        "transformer": dict(n_layers=9, n_heads=8, d_model=256, d_ff=1024),
        "mamba": dict(n_layers=9, d_model=256),
        "lstm": dict(n_layers=9, d_model=256, dropout=0.1),
    },
}
_OVERRIDES.update({("hmm-sticky", tier): _OVERRIDES[("hmm", tier)] for tier in ("quick", "paper")})  # the HMM's sizes


def tiers() -> list[str]:
    """The preset tiers, smallest first."""
    return list(_TIERS)


def archs() -> list[str]:
    """Architectures that have presets: the trained built-ins, in report-row order."""
    return built_ins(baseline=False)


def preset(task_name: str, arch: str, tier: str, spec: TaskSpec | None = None) -> ModelSize:
    """The size of `arch` for `task_name` at `tier`, as the architecture's Size object (fields not in the preset keep
    their defaults and stay unset: `.as_config()` gives the preset's own fields). Build with
    `models.make(arch, spec, size)`.

    `spec` is only needed for the MLPs of a task that is not registered (their sizes depend on the vocabulary
    and length); registered tasks are looked up at default parameters. An architecture of the user's own (registered,
    or an import string whose module is imported) gets the tier's generic sizes (`user_preset`).
    """
    check_choice("tier", tier, _TIERS)
    if arch not in archs():
        return user_preset(arch, tier)
    if info(arch).follows is None:
        fields = _OVERRIDES.get((task_name, tier), {}).get(arch, _GENERIC[tier][arch])
    else:
        fields = _matched(task_name, arch, tier, spec if spec is not None else _default_spec(task_name))
    return size_class(arch).of(fields)


def user_preset(arch: str, tier: str) -> ModelSize:
    """The size at `tier` of an architecture without presets of its own: the generic transformer sizes of the tier
    (smoke 2 x 32, quick 4 x 128, paper 6 x 192; n_heads and d_ff too where its Size declares them), each field
    only where its `Size` declares it. A ValueError where it is unknown, not importable here, or declares neither
    n_layers nor d_model."""
    check_choice("tier", tier, _TIERS)
    factory = peek(arch)
    if factory is None:
        check(arch)  # not registered and no import string: a ValueError naming it
        raise ValueError(
            f"model.preset: the size of {arch!r} is read only when the run builds it (importing runs code); pass "
            "--import MODULE (its module) to read it now, or register the class there and give --arch NAME, or give "
            "model.size instead of a preset"
        )
    declared = factory.Size.model_fields
    fields = {k: v for k, v in _GENERIC[tier]["transformer"].items() if k in declared}
    if not {"n_layers", "d_model"} & set(fields):
        raise ValueError(
            f"model.preset: {arch!r} has no presets, and its Size declares neither n_layers nor d_model, the fields "
            "the generic presets set; give its size in model.size instead"
        )
    return factory.Size.of(fields, where="model.size.")


def _default_spec(task_name: str) -> TaskSpec:
    if task_name not in tasks.names():
        raise ValueError(f"spec: task {task_name!r} is not registered; pass its TaskSpec to size an MLP")
    return tasks.make(task_name).spec


@functools.cache
def _matched(task_name: str, arch: str, tier: str, spec: TaskSpec) -> dict[str, Any]:
    """A control's size fields: its generic ones, with the depth and width that match the parameter count of the
    preset of the architecture it follows; the depths tried are its `depth_factors` times that preset's depth."""
    control = info(arch)
    follows = cast(str, control.follows)
    size = preset(task_name, follows, tier)
    target = count_params(resolve(follows), spec, size)
    depth: int = cast(Any, size).n_layers  # the followed preset's depth (the transformer's n_layers)
    depths = tuple(_scaled(depth, f) for f in control.depth_factors)
    return match_params(resolve(arch), spec, target, "d_model", depths, **_GENERIC[tier].get(arch, {}))


def _scaled(depth: int, factor: float) -> int:
    """`factor` times `depth`, rounded away from `depth` (up for a factor above 1, down below it), at least 1."""
    return math.ceil(factor * depth) if factor >= 1 else max(1, math.floor(factor * depth))
