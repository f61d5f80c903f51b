"""Architecture registry: `make(arch, spec, **size)`, `names()`, `register(name, factory)`.

An architecture may also be named by an import string `package.module:Class`; the class is called as
`Class(spec, **size)`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from windtunnel.tasks.base import TaskSpec

_FACTORIES: dict[str, Callable[..., Any]] = {}


def register(name: str, factory: Callable[..., Any], *, overwrite: bool = False) -> None:
    """Add an architecture; `factory(spec, **size)` returns an nn.Module following the model protocol."""
    if not name or not isinstance(name, str):
        raise ValueError("register: name must be a non-empty string")
    if name in _FACTORIES and not overwrite:
        raise ValueError(f"register: architecture {name!r} already exists (pass overwrite=True)")
    if not callable(factory):
        raise TypeError("register: factory must be callable")
    _FACTORIES[name] = factory


def names() -> list[str]:
    return list(_FACTORIES)


def resolve(arch: str) -> Callable[..., Any]:
    """The factory for a registered name or a `module:attr` import string."""
    if arch in _FACTORIES:
        return _FACTORIES[arch]
    if ":" in arch:
        mod_name, _, attr = arch.partition(":")
        try:
            return getattr(importlib.import_module(mod_name), attr)
        except (ImportError, AttributeError) as err:
            raise ValueError(f"arch: cannot import {arch!r}: {err}") from None
    raise ValueError(f"arch: unknown architecture {arch!r}; choose one of {', '.join(_FACTORIES)} "
                     "or give an import string 'package.module:Class'")


def make(arch: str, spec: TaskSpec, **size: Any) -> Any:
    """Build architecture `arch` for a task `spec` with size parameters `size`."""
    return resolve(arch)(spec, **size)
