"""Architecture registry: `make(arch, spec, **size)`, `names()`, `register(name, factory)`.

An architecture may also be named by an import string `package.module:Class`; the class is called as
`Class(spec, **size)`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from windtunnel.registry import Registry
from windtunnel.tasks.base import TaskSpec

_REGISTRY = Registry("arch")

register = _REGISTRY.register  # register(name, factory, overwrite=False); factory(spec, **size) -> nn.Module
unregister = _REGISTRY.unregister
names = _REGISTRY.names


def resolve(arch: str) -> Callable[..., Any]:
    """The factory for a registered name or a `module:attr` import string."""
    if arch in _REGISTRY:
        return _REGISTRY.get(arch)
    if ":" in arch:
        mod_name, _, attr = arch.partition(":")
        try:
            return getattr(importlib.import_module(mod_name), attr)
        except (ImportError, AttributeError) as err:
            raise ValueError(f"arch: cannot import {arch!r}: {err}") from None
    raise ValueError(f"arch: unknown architecture {arch!r}; choose one of {', '.join(names())} "
                     "or give an import string 'package.module:Class'")


def make(arch: str, spec: TaskSpec, **size: Any) -> Any:
    """Build architecture `arch` for a task `spec` with size parameters `size`."""
    return resolve(arch)(spec, **size)
