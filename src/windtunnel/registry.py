"""A named registry of factories: the one mechanism behind `tasks.register` and `models.register`.

A registry with an entry-point group (`windtunnel.tasks`, `windtunnel.models`) also holds what installed packages
declare there: each is loaded when its name is looked up and not registered yet, or when the names are listed
(`windtunnel.plugins.load_entry_points`). A built-in may be registered lazily, by an import string
(`register_lazy`): its module is imported the first time its name is looked up, so that importing the registry
imports none of them."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from windtunnel.plugins import load_entry_points
from windtunnel.text import did_you_mean


class Registry:
    """Name -> factory, with clear errors naming the kind of thing registered (`task`, `architecture`)."""

    def __init__(self, kind: str, entry_points: str | None = None) -> None:
        self.kind = kind
        self.entry_points = entry_points  # the entry-point group installed packages add to this registry through
        # name -> factory, or the import string `package.module:Attr` of a lazy entry not looked up yet
        self._factories: dict[str, Callable[..., Any] | str] = {}

    def _discover(self, name: str | None = None) -> None:
        """Load the entry points called `name` (None: all) not loaded yet (windtunnel.plugins)."""
        if self.entry_points is not None:
            load_entry_points(self.entry_points, name)

    def _factory(self, name: str) -> Callable[..., Any]:
        """The factory of the registered `name`, importing it first if it is a lazy entry."""
        entry = self._factories[name]
        if isinstance(entry, str):
            module, _, attr = entry.partition(":")
            obj: Any = importlib.import_module(module)
            for part in attr.split("."):
                obj = getattr(obj, part)
            self._factories[name] = entry = obj
        return entry

    def peek(self, name: str) -> Callable[..., Any] | None:
        """The factory registered as `name` (a lazy one imported), or None; loads no entry point."""
        return self._factory(name) if name in self._factories else None

    def register(self, name: str, factory: Callable[..., Any], *, overwrite: bool = False) -> None:
        if not name or not isinstance(name, str):
            raise ValueError("register: name must be a non-empty string")
        if name in self._factories and not overwrite:
            raise ValueError(f"register: {self.kind} {name!r} already exists (pass overwrite=True to replace it)")
        if not callable(factory):
            raise TypeError("register: factory must be callable")
        self._factories[name] = factory

    def register_lazy(self, name: str, target: str) -> None:
        """Register `name` as the import string `target` ("package.module:Attr", the package's own code): imported the
        first time the name is looked up; listed by `names` and found by `in` without importing anything."""
        if name in self._factories:
            raise ValueError(f"register: {self.kind} {name!r} already exists")
        self._factories[name] = target

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
        return self._factory(name)
