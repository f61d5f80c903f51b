"""Architecture registry: `make(arch, spec, size)`, `names()`, `register(name, Arch)`, `size_class(arch)`.

An architecture is a class with a `Size` (a `models.base.ModelSize` subclass) built as `Arch(spec, size)` or
`Arch(spec, **fields)`. It may also be named by an import string `package.module:Class`.
Importing a module runs its code, and a run directory may come from anyone, so an import string is resolved only
with `trust_code=True` (CLI: `--trust-code`), and even then never from the current directory or a run directory:
the module must be installed (or already imported by the caller).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from windtunnel.errors import UntrustedCodeError
from windtunnel.plugins import import_installed
from windtunnel.registry import Registry
from windtunnel.tasks.base import TaskSpec
from windtunnel.text import did_you_mean

if TYPE_CHECKING:
    from windtunnel.models.base import ModelSize

_REGISTRY = Registry("arch", entry_points="windtunnel.models")

unregister = _REGISTRY.unregister
names = _REGISTRY.names

_IMPORT_STRING = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class ArchFactory(Protocol):
    """What `resolve` returns: an architecture class (or factory) that declares its typed `Size`."""

    Size: type[ModelSize]

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


def _check_sized(arch: str, factory: Any) -> ArchFactory:
    """An architecture must declare its typed size: `factory.Size`, a ModelSize subclass."""
    from windtunnel.models.base import ModelSize

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
