"""Task registry: `make(name, **params)`, `names()`, and `register(name, factory)` for users' own tunnels."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from windtunnel.registry import Registry
from windtunnel.tasks.adapter import as_task
from windtunnel.tasks.base import DEFAULT_LOSSES, HEADLINE_METRICS, Task

_REGISTRY = Registry[Callable[..., Any]]("task", entry_points="windtunnel.tasks")

register = _REGISTRY.register  # register(name, factory, overwrite=False); factory(**params) -> task
unregister = _REGISTRY.unregister
names = _REGISTRY.names


def make(name: str, **params: Any) -> Task[Any]:
    """Build the task `name` with `params` (paper settings where a parameter is not given), as a `Task`: a tunnel
    registered without subclassing Task comes back adapted (`as_task`)."""
    return as_task(_REGISTRY.get(name)(**params))


@dataclass(frozen=True)
class TunnelInfo:
    """A wind tunnel's metadata (`tasks.base.Task`), with the defaults filled in."""

    name: str
    primitive: str
    title: str
    headline_metric: str
    default_loss: str
    length_param: str | None = None  # the parameter that sets the sequence length (None: none does)


def info(name: str) -> TunnelInfo:
    """The metadata of the registered tunnel `name`, read from its class (defaults for what it does not set, and
    for a name no longer registered, e.g. in an old run directory). ValueError for a value outside the allowed set."""
    try:
        factory: Any = _REGISTRY.get(name)
    except ValueError:
        factory = None
    metric = getattr(factory, "headline_metric", "entropy_mae_bits")
    loss = getattr(factory, "default_loss", "ce")
    if metric not in HEADLINE_METRICS:
        raise ValueError(f"{name}.headline_metric: must be one of {', '.join(HEADLINE_METRICS)} (got {metric!r})")
    if loss not in DEFAULT_LOSSES:
        raise ValueError(f"{name}.default_loss: must be one of {', '.join(DEFAULT_LOSSES)} (got {loss!r})")
    length = getattr(factory, "length_param", None)
    if length is not None and not isinstance(length, str):
        raise ValueError(f"{name}.length_param: must be a parameter name or None (got {length!r})")
    return TunnelInfo(
        name=name,
        primitive=str(getattr(factory, "primitive", "") or ""),
        title=str(getattr(factory, "title", "") or name.capitalize()),
        headline_metric=metric,
        default_loss=loss,
        length_param=length,
    )
