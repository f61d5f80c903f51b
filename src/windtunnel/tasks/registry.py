"""Task registry: `make(name, **params)`, `names()`, and `register(name, factory)` for users' own tunnels."""

from __future__ import annotations

from typing import Any

from windtunnel.registry import Registry

_REGISTRY = Registry("task")

register = _REGISTRY.register  # register(name, factory, overwrite=False); factory(**params) -> task
unregister = _REGISTRY.unregister
names = _REGISTRY.names


def make(name: str, **params: Any) -> Any:
    """Build the task `name` with `params` (paper settings where a parameter is not given)."""
    return _REGISTRY.get(name)(**params)
