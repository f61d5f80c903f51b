"""`as_task(tunnel)`: any wind tunnel seen as a `Task`, so the toolkit reads every tunnel through one contract.

A tunnel that subclasses `Task` is returned as it is. Any other object (the `WindTunnel` protocol: `name`, `spec`,
`sample`, and whichever optional members it has) is wrapped in a `TunnelAdapter`, which gives the tunnel's own member
where it has one and `Task`'s default otherwise. This module is the one place that asks an object which members it
has.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.distributions import Distribution

from windtunnel.tasks.base import OPTIONAL, Batch, Reference, Task, TaskParams, TaskSpec

# Metadata read from the tunnel as it is, Task's value where it has none; those of _EMPTY also where it has None.
_METADATA = (
    "description",
    "primitive",
    "title",
    "headline_metric",
    "default_loss",
    "length_param",
    "capacity",
    "approximations_note",
    "controls_note",
)
_EMPTY = ("mark_thresholds", "auxiliary_targets_offered")
_ATTRIBUTES = ("name", "params", "transport_demand")  # members of OPTIONAL that are values, not methods


def as_task(tunnel: Any) -> Task[Any]:
    """`tunnel` as a `Task`: itself where it is one, else a `TunnelAdapter` over it."""
    return tunnel if isinstance(tunnel, Task) else TunnelAdapter(tunnel)


class TunnelAdapter(Task[Any]):
    """A `Task` over `tunnel`, an object that does not subclass Task: `spec` and `sample` are the tunnel's; each
    metadata attribute and optional hook is the tunnel's own where it has one, else Task's default ("not offered").
    Without controls of its own an adapted tunnel has none (Task's generic controls are a subclass's default)."""

    def __init__(self, tunnel: Any) -> None:  # no Task.__init__: the parameters, if any, are the tunnel's own
        self.tunnel = tunnel
        attrs: dict[str, Any] = {
            "name": getattr(tunnel, "name", type(tunnel).__name__),
            "params": getattr(tunnel, "params", TaskParams()),
            **{k: getattr(tunnel, k, getattr(Task, k)) for k in _METADATA},
            **{k: getattr(tunnel, k, None) or {} for k in _EMPTY},
        }
        for key, value in attrs.items():
            setattr(self, key, value)

    def _own(self, hook: str) -> Callable[..., Any] | None:
        found = getattr(self.tunnel, hook, None)
        return found if callable(found) else None

    def offers(self, member: str) -> bool:
        """Whether the tunnel has `member` (one of `OPTIONAL`) itself: an attribute for name, params and
        transport_demand, a callable for the hooks."""
        if member not in OPTIONAL:
            return super().offers(member)  # the ValueError naming the optional members
        if member in _ATTRIBUTES:
            return hasattr(self.tunnel, member)
        return self._own(member) is not None

    @property
    def spec(self) -> TaskSpec:
        return self.tunnel.spec

    def sample(self, *args: Any, **kwargs: Any) -> Batch:
        """The tunnel's own `sample`, called with exactly the arguments given."""
        return self.tunnel.sample(*args, **kwargs)

    def with_params(self, **overrides: Any) -> TunnelAdapter:
        raise NotImplementedError(f"task {self.name!r}: build it again with tasks.make(name, **params)")

    def posterior_for(self, inputs: torch.Tensor) -> Distribution:
        own = self._own("posterior_for")
        return own(inputs) if own is not None else super().posterior_for(inputs)

    def approximations(self, batch: Batch) -> Mapping[str, Distribution]:
        own = self._own("approximations")
        return own(batch) if own is not None else {}

    def approximation_depths(self) -> dict[str, int]:
        own = self._own("approximation_depths")
        return own() if own is not None else {}

    def approximation_positions(self) -> dict[str, tuple[int, ...]]:
        own = self._own("approximation_positions")
        return own() if own is not None else {}

    @property
    def transport_demand(self) -> Any:
        return getattr(self.tunnel, "transport_demand", None)

    def controls(self, batch: Batch) -> dict[str, Distribution]:
        own = self._own("controls")
        return own(batch) if own is not None else {}

    def references(self) -> list[Reference]:
        own = self._own("references")
        return list(own()) if own is not None else []

    def attention_evidence(
        self, inputs: torch.Tensor, mask: torch.Tensor
    ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        own = self._own("attention_evidence")
        return own(inputs, mask) if own is not None else {}

    def value_positions(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        own = self._own("value_positions")
        return own(inputs) if own is not None else None

    def observation_slots(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        own = self._own("observation_slots")
        return own(inputs) if own is not None else None

    def sample_bytes(self, batch_size: int) -> int | None:
        own = self._own("sample_bytes")
        return own(batch_size) if own is not None else None

    def prior_predictive(self, batch: Batch) -> Distribution | None:
        own = self._own("prior_predictive")
        return own(batch) if own is not None else None

    def auxiliary_targets(self, batch: Batch) -> dict[str, torch.Tensor]:
        own = self._own("auxiliary_targets")
        return own(batch) if own is not None else {}

    def describe(self, batch: Batch, index: int = 0) -> list[str]:
        own = self._own("describe")
        return own(batch, index) if own is not None else super().describe(batch, index)

    def __repr__(self) -> str:
        return repr(self.tunnel)
