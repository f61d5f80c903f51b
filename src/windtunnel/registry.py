"""A named registry of factories: the one mechanism behind `tasks.register` and `models.register`.

A registry with an entry-point group (`windtunnel.tasks`, `windtunnel.models`) also holds what installed packages
declare there: each is loaded when its name is looked up and not registered yet, or when the names are listed
(`windtunnel.plugins.load_entry_points`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from windtunnel.text import did_you_mean


class Registry:
    """Name -> factory, with clear errors naming the kind of thing registered (`task`, `architecture`)."""

    def __init__(self, kind: str, entry_points: str | None = None) -> None:
        self.kind = kind
        self.entry_points = entry_points  # the entry-point group installed packages add to this registry through
        self._factories: dict[str, Callable[..., Any]] = {}

    def _discover(self, name: str | None = None) -> None:
        """Load the entry points called `name` (None: all) not loaded yet (windtunnel.plugins)."""
        if self.entry_points is not None:
            from windtunnel.plugins import load_entry_points

            load_entry_points(self.entry_points, name)

    def peek(self, name: str) -> Callable[..., Any] | None:
        """The factory registered as `name`, or None; loads no entry point."""
        return self._factories.get(name)

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
        """Registered names, in registration order (built-ins first; installed packages' entry points loaded)."""
        self._discover()
        return list(self._factories)

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str) and name not in self._factories:
            self._discover(name)
        return name in self._factories

    def get(self, name: str) -> Callable[..., Any]:
        if name not in self._factories:
            self._discover(name)
        if name not in self._factories:
            self._discover()  # every plugin's name, for the message
            raise ValueError(
                f"{self.kind}: unknown {self.kind} {name!r}{did_you_mean(name, self._factories)}; "
                f"choose one of {', '.join(self._factories)}"
            )
        return self._factories[name]
