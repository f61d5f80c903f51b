"""Task registry: `make(name, **params)`, `names()`, and `register(name, factory)` for users' own tunnels."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_FACTORIES: dict[str, Callable[..., Any]] = {}


def register(name: str, factory: Callable[..., Any], *, overwrite: bool = False) -> None:
    """Add a wind tunnel. `factory(**params)` must return an object with `spec` and `sample(...)`."""
    if not name or not isinstance(name, str):
        raise ValueError("register: name must be a non-empty string")
    if name in _FACTORIES and not overwrite:
        raise ValueError(f"register: task {name!r} already exists (pass overwrite=True to replace it)")
    if not callable(factory):
        raise TypeError("register: factory must be callable")
    _FACTORIES[name] = factory


def names() -> list[str]:
    """Registered task names, built-ins first."""
    return list(_FACTORIES)


def make(name: str, **params: Any) -> Any:
    """Build the task `name` with `params` (paper settings where a parameter is not given)."""
    if name not in _FACTORIES:
        raise ValueError(f"task: unknown task {name!r}; choose one of {', '.join(_FACTORIES)}")
    return _FACTORIES[name](**params)
