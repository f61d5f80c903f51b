"""A named registry of factories: the one mechanism behind `tasks.register` and `models.register`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Registry:
    """Name -> factory, with clear errors naming the kind of thing registered (`task`, `architecture`)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._factories: dict[str, Callable[..., Any]] = {}

    def register(self, name: str, factory: Callable[..., Any], *, overwrite: bool = False) -> None:
        if not name or not isinstance(name, str):
            raise ValueError("register: name must be a non-empty string")
        if name in self._factories and not overwrite:
            raise ValueError(f"register: {self.kind} {name!r} already exists (pass overwrite=True to replace it)")
        if not callable(factory):
            raise TypeError("register: factory must be callable")
        self._factories[name] = factory

    def unregister(self, name: str) -> None:
        """Remove `name` (no error if it is absent): for tests and notebooks that register temporary entries."""
        self._factories.pop(name, None)

    def names(self) -> list[str]:
        """Registered names, in registration order (built-ins first)."""
        return list(self._factories)

    def __contains__(self, name: object) -> bool:
        return name in self._factories

    def get(self, name: str) -> Callable[..., Any]:
        if name not in self._factories:
            raise ValueError(f"{self.kind}: unknown {self.kind} {name!r}; choose one of {', '.join(self._factories)}")
        return self._factories[name]
