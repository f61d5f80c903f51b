"""Architecture registry: `make(arch, spec, size)`, `names()`, `register(name, Arch)`, `size_class(arch)`, and
`info(arch)`, the metadata an architecture declares on its class (row, follows, context_blind, baseline, cost, color,
depth_factors); `is_baseline(arch)` asks the one question every stage asks of it (trained or not) of a name, a class
or a model.
The built-ins are registered by import string (`BUILT_IN`): each module is imported the first time its name is looked
up, so importing `windtunnel.models` imports no architecture.

An architecture is a class with a `Size` (a `models.base.ModelSize` subclass) built as `Arch(spec, size)` or
`Arch(spec, **fields)`. It may also be named by an import string `package.module:Class`.
Importing a module runs its code, and a run directory may come from anyone, so an import string is resolved only
with `trust_code=True` (CLI: `--trust-code`), and even then never from the current directory or a run directory:
the module must be installed (or already imported by the caller).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from windtunnel.errors import UntrustedCodeError
from windtunnel.models.base import ModelSize, SequenceModel
from windtunnel.plugins import import_installed
from windtunnel.registry import Registry
from windtunnel.tasks.base import TaskSpec
from windtunnel.text import did_you_mean

_REGISTRY = Registry[Callable[..., Any]]("arch", entry_points="windtunnel.models")

# The built-in architectures, in registration order (`names()`); the report orders them by their `row`.
BUILT_IN = {
    "oracle": "windtunnel.models.baselines:Oracle",
    "uniform": "windtunnel.models.baselines:Uniform",
    "lstm": "windtunnel.models.lstm:LSTM",
    "mamba": "windtunnel.models.mamba:Mamba",
    "mlp": "windtunnel.models.mlp:PrefixMLP",
    "mlp-pointwise": "windtunnel.models.mlp:PointwiseMLP",
    "transformer": "windtunnel.models.transformer:Transformer",
}
# Hugging Face `transformers` families (models/hf, the `hf` extra): registered like the built-ins, imported when their
# name is looked up (which imports transformers only when one is built), but no built-in: no suite runs them.
HF = {
    "hf-gpt2": "windtunnel.models.hf.gpt2:HFGPT2",
    "hf-gpt-neox": "windtunnel.models.hf.gpt_neox:HFGPTNeoX",
    "hf-llama": "windtunnel.models.hf.llama:HFLlama",
    "hf-phi": "windtunnel.models.hf.phi:HFPhi",
    "hf-causal-lm": "windtunnel.models.hf.wrap:HFCausalLM",  # a causal LM of one's own (`from_hf(lm, task)`)
}
for _name, _target in {**BUILT_IN, **HF}.items():
    _REGISTRY.register_lazy(_name, _target)

unregister = _REGISTRY.unregister
names = _REGISTRY.names

_IMPORT_STRING = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class ArchFactory(Protocol):
    """What `resolve` returns: an architecture class (or factory) that declares its typed `Size`."""

    Size: type[ModelSize]

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


def _check_sized(arch: str, factory: Any) -> ArchFactory:
    """An architecture must declare its typed size: `factory.Size`, a ModelSize subclass."""
    size = getattr(factory, "Size", None)
    if not (isinstance(size, type) and issubclass(size, ModelSize)):
        raise ValueError(
            f"arch: {arch!r} declares no size; give the class a `Size`, a subclass of "
            "windtunnel.models.base.ModelSize listing its size fields (docs/models.md)"
        )
    return factory


def register(name: str, factory: Any, overwrite: bool = False) -> None:
    """Register architecture class `factory` (with a `Size`) under `name`."""
    _REGISTRY.register(name, _check_sized(name, factory), overwrite=overwrite)


def is_import_string(arch: str) -> bool:
    """Whether `arch` has the form `package.module:Attr` (checked without importing anything)."""
    return bool(_IMPORT_STRING.match(arch))


def check(arch: str) -> None:
    """Validate an architecture name without importing anything: registered, or a well-formed import string."""
    if arch in _REGISTRY or is_import_string(arch):
        return
    raise ValueError(
        f"arch: unknown architecture {arch!r}{did_you_mean(arch, names())}; choose one of {', '.join(names())} "
        "or give an import string 'package.module:Class'"
    )


def resolve(arch: str, *, trust_code: bool = False, exclude: tuple[str | Path, ...] = ()) -> ArchFactory:
    """The factory for a registered name, or, with `trust_code=True`, for a `module:attr` import string.

    exclude: directories (a run directory) that, like the current directory, an import may not come from.
    """
    if arch in _REGISTRY:
        return cast(ArchFactory, _REGISTRY.get(arch))  # `register` admits only factories _check_sized passed
    check(arch)
    if not trust_code:
        raise UntrustedCodeError(
            f"model.arch: {arch!r} is an import string, and importing it would run its code; "
            "pass --trust-code (Python: trust_code=True) if you trust where it comes from"
        )
    mod_name, _, attr = arch.partition(":")
    try:
        obj: Any = import_installed(mod_name, exclude)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"arch: cannot import {arch!r} from an installed package: {err}") from None
    return _check_sized(arch, obj)


def peek(arch: str) -> ArchFactory | None:
    """The factory of a registered architecture, or of an import string whose module is already imported (by
    `--import` or the caller), else None; imports nothing."""
    if arch in _REGISTRY:
        return cast(ArchFactory, _REGISTRY.get(arch))
    if not is_import_string(arch):
        return None
    mod_name, _, attr = arch.partition(":")
    obj: Any = sys.modules.get(mod_name)
    for part in attr.split("."):
        obj = getattr(obj, part, None)
    try:
        return _check_sized(arch, obj) if obj is not None else None
    except ValueError:
        return None


def size_class(arch: str, *, trust_code: bool = False) -> Any:
    """The `ModelSize` subclass architecture `arch` declares (an import string is imported only with trust_code)."""
    return resolve(arch, trust_code=trust_code).Size


def make(arch: str, spec: TaskSpec, size: Any = None, *, trust_code: bool = False, **fields: Any) -> Any:
    """Build architecture `arch` for a task `spec`: `size` (its Size object or a mapping) with `fields` on top."""
    return resolve(arch, trust_code=trust_code)(spec, size, **fields)


@dataclass(frozen=True)
class ArchInfo:
    """An architecture's metadata (the ClassVars `models.base.SequenceModel` declares), with the defaults filled in."""

    name: str
    row: int  # sort key of its report rows
    follows: str | None  # a control's: the architecture whose size, budget and recipe it takes (None: its own)
    context_blind: bool  # cannot (or need not) read the context
    baseline: bool  # never trained
    cost: float  # relative training cost per step, token and parameter (transformer 1.0)
    color: str | None  # its colour in figures (None: the report picks one from the name)
    depth_factors: tuple[float, ...] = (1.0,)  # a control's: the depths its preset tries, times the followed depth


_INFO_TYPES: dict[str, tuple[type, ...]] = {
    "row": (int,),
    "follows": (str, type(None)),
    "context_blind": (bool,),
    "baseline": (bool,),
    "cost": (int, float),
    "color": (str, type(None)),
    "depth_factors": (tuple,),
}


def _declared(name: str, obj: Any, key: str) -> Any:
    """Metadata `key` as `obj` (an architecture's class, or a model built from one) declares it, else `SequenceModel`'s
    default; ValueError naming `name.key` for a value of the wrong type."""
    types = _INFO_TYPES[key]
    value = getattr(obj, key, getattr(SequenceModel, key))
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        kinds = " or ".join("None" if t is type(None) else t.__name__ for t in types)
        raise ValueError(f"{name}.{key}: must be {kinds} (got {value!r})")
    return value


def info(arch: str) -> ArchInfo:
    """The metadata of architecture `arch`, read from its class (a built-in's module is imported now; an import string
    only if its module already is): `SequenceModel`'s defaults for what the class does not set, and for a name not
    found (e.g. an old run directory's). ValueError for a value of the wrong type."""
    factory = peek(arch)
    values = {key: _declared(arch, factory, key) for key in _INFO_TYPES}
    if not values["cost"] > 0:
        raise ValueError(f"{arch}.cost: must be > 0 (got {values['cost']!r})")
    factors = values["depth_factors"]
    if not factors or not all(isinstance(f, (int, float)) and not isinstance(f, bool) and f > 0 for f in factors):
        raise ValueError(f"{arch}.depth_factors: must be a non-empty tuple of numbers > 0 (got {factors!r})")
    return ArchInfo(name=arch, **{**values, "cost": float(values["cost"]), "depth_factors": tuple(map(float, factors))})


def built_ins(*, baseline: bool | None = None) -> list[str]:
    """The built-in architectures in report-row order: all of them, only the baselines (`baseline=True`) or only
    those that are trained (`baseline=False`). Imports every built-in's module."""
    rows = sorted(BUILT_IN, key=lambda a: info(a).row)
    return [a for a in rows if baseline is None or is_baseline(a) == baseline]


def is_baseline(arch: Any) -> bool:
    """Whether `arch` is a baseline: a never-trained predictor of whole batches (`predict(batch)` in place of a forward
    pass), evaluated like any run but never trained, probed or sized. The one place this is asked: `arch` is an
    architecture's name (`info(arch).baseline`: a built-in, a registered one of one's own, or an import string whose
    module is already imported), its class (factory), or a model built from it; each reads the `baseline` its class
    declares (`SequenceModel`'s False when it declares none). ValueError for a value that is not a bool."""
    if isinstance(arch, str):
        return bool(_declared(arch, peek(arch), "baseline"))
    name = arch.__name__ if isinstance(arch, type) else type(arch).__name__
    return bool(_declared(name, arch, "baseline"))
