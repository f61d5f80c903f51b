"""A named registry: the one mechanism behind tasks, architectures, geometry probes and training recipes.

A registry holds factories (`tasks.register`, `models.register`) or, where it is given the type it `holds`, ready
objects of that type (`geometry.registry.register_probe`, `training.recipes.RECIPES`); the same rules name, list, look
up and refuse entries in each, and their errors name the kind of thing registered.

A registry with an entry-point group (`windtunnel.tasks`, `windtunnel.models`) also holds what installed packages
declare there: each is loaded when its name is looked up and not registered yet, or when the names are listed
(`windtunnel.plugins.load_entry_points`). A built-in may be registered lazily, by an import string
(`register_lazy`): its module is imported the first time its name is looked up, so that importing the registry
imports none of them."""

from __future__ import annotations

import importlib
from collections.abc import Collection
from typing import Any, Generic, TypeVar, cast

from windtunnel.plugins import load_entry_points
from windtunnel.text import did_you_mean

T = TypeVar("T")


class Registry(Generic[T]):
    """Name -> entry of one `kind` (`task`, `arch`, `probe`, `recipe`): a factory, or an instance of `holds` where it is
    given."""

    def __init__(
        self,
        kind: str,
        *,
        holds: type[T] | None = None,
        entry_points: str | None = None,
        reserved: Collection[str] = (),
        name_rule: str = "empty, or not a string",
        caller: str = "register",
    ) -> None:
        self.kind = kind
        self.holds = holds  # the type of its entries (None: factories, any callable)
        self.entry_points = entry_points  # the entry-point group installed packages add to it through (None: none)
        self.reserved = frozenset(reserved)  # names it refuses
        self.name_rule = name_rule  # what a name may not be, as its error says
        self.caller = caller  # the function its errors name (`register`, `register_probe`)
        # name -> entry, or the import string `package.module:Attr` of a lazy entry not looked up yet
        self._entries: dict[str, T | str] = {}

    def _discover(self, name: str | None = None) -> None:
        """Load the entry points called `name` (None: all) not loaded yet (windtunnel.plugins)."""
        if self.entry_points is not None:
            load_entry_points(self.entry_points, name)

    def _entry(self, name: str) -> T:
        """The entry registered as `name`, importing it first if it is a lazy one."""
        entry = self._entries[name]
        if isinstance(entry, str):
            module, _, attr = entry.partition(":")
            obj: Any = importlib.import_module(module)
            for part in attr.split("."):
                obj = getattr(obj, part)
            self._entries[name] = entry = cast(T, obj)
        return entry

    def _check(self, name: str, entry: Any) -> None:
        """A TypeError for an entry this registry cannot hold, a ValueError for a name it refuses."""
        if self.holds is None and not callable(entry):
            raise TypeError(f"{self.caller}: factory must be callable")
        if self.holds is not None and not isinstance(entry, self.holds):
            raise TypeError(f"{self.caller}: expected a {self.holds.__name__} (got {type(entry).__name__})")
        if not isinstance(name, str) or not name or name in self.reserved:
            raise ValueError(f"{self.caller}: {name!r} is not a {self.kind} name ({self.name_rule})")

    def register(self, name: str, entry: T, *, overwrite: bool = False) -> None:
        """Add `entry` as `name`, after every entry registered before it; a name taken is a ValueError unless
        `overwrite` (then the entry keeps its place)."""
        self._check(name, entry)
        if name in self._entries and not overwrite:
            raise ValueError(f"{self.caller}: {self.kind} {name!r} already exists (pass overwrite=True to replace it)")
        self._entries[name] = entry

    def register_lazy(self, name: str, target: str) -> None:
        """Register `name` as the import string `target` ("package.module:Attr", the package's own code): imported the
        first time the name is looked up; listed by `names` and found by `in` without importing anything."""
        if name in self._entries:
            raise ValueError(f"{self.caller}: {self.kind} {name!r} already exists")
        self._entries[name] = target

    def unregister(self, name: str) -> None:
        """Remove `name` (no error if it is absent): for tests and notebooks that register temporary entries."""
        self._entries.pop(name, None)

    def names(self) -> list[str]:
        """Registered names, in registration order (built-ins first; installed packages' entry points loaded)."""
        self._discover()
        return list(self._entries)

    def values(self) -> list[T]:
        """Every registered entry (lazy ones imported), in registration order."""
        return [self._entry(name) for name in self.names()]

    def imported(self) -> dict[str, T]:
        """Name -> entry of those already imported (lazy ones not looked up yet left out); imports nothing."""
        return {name: entry for name, entry in list(self._entries.items()) if not isinstance(entry, str)}

    def peek(self, name: str) -> T | None:
        """The entry registered as `name` (a lazy one imported), or None; loads no entry point."""
        return self._entry(name) if name in self._entries else None

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str) and name not in self._entries:
            self._discover(name)
        return name in self._entries

    def get(self, name: str) -> T:
        """The entry registered as `name`; a ValueError naming the kind, the closest name and every name otherwise."""
        if name not in self._entries:
            self._discover(name)
        if name not in self._entries:
            self._discover()  # every plugin's name, for the message
            raise ValueError(
                f"{self.kind}: unknown {self.kind} {name!r}{did_you_mean(name, self._entries)}; "
                f"choose one of {', '.join(self._entries)}"
            )
        return self._entry(name)
