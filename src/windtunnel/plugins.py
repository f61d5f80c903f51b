"""Plugins: a user's own tasks and architectures, by name, on every command.

Two ways in:

    --import MODULE      every command that builds tasks or models (train, eval, probe, report, sweep, reproduce,
                         time-to-bayes, tasks) imports MODULE first; its code registers tasks
                         (`windtunnel.tasks.register`) and architectures (`windtunnel.models.register`). MODULE is
                         looked up on sys.path and in the current directory (as `python -m` would).
    entry points         an installed package declares, in its pyproject.toml,
                             [project.entry-points."windtunnel.tasks"]
                             coin = "mypkg.tasks:Coin"
                             [project.entry-points."windtunnel.models"]
                             gru = "mypkg.models:GRU"
                         each is loaded the first time its name is looked up and not found among the registered
                         names (or when the names are listed) and registered under the entry point's name. A broken
                         one is a `PluginWarning` naming it, never an error of an unrelated command.

The imports of `windtunnel train` are recorded in the run's config (`imports`; config.json omits an empty list, so a
run without plugins keeps its config text, hash and identity). Importing a module runs its code, and a run directory
may come from anyone, so the rule for a config that records imports (a run directory's, a config file's, a sweep's
base) is that of an import-string architecture (`models.resolve`): its modules are imported only where the user says
so. A module already imported (by `--import`, or by the Python caller) is used as it is; otherwise `trust_code=True`
(CLI: `--trust-code`) imports it, from an installed package only (never the current directory or the run
directory); otherwise it is an `UntrustedCodeError` naming the module and both flags. A worker of a sweep or a suite
imports its job's modules itself: the driver has already imported them.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import warnings
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from windtunnel.errors import MAX_SHOWN, UntrustedCodeError, shorten

TASKS_GROUP = "windtunnel.tasks"
MODELS_GROUP = "windtunnel.models"
# entry-point group -> the registry module whose `register(name, obj)` takes what an entry point names
GROUPS = {TASKS_GROUP: "windtunnel.tasks.registry", MODELS_GROUP: "windtunnel.models.registry"}

DEBUG_ENV = "WINDTUNNEL_DEBUG"  # as the CLI's: 1 shows the traceback of a module that fails to import
_MODULE_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class PluginError(ValueError):
    """A module named by `--import` (or a config's `imports`) is not a module name, cannot be found, or failed to
    import; the message names it."""


class PluginWarning(UserWarning):
    """An installed package's entry point could not be loaded or registered (the command goes on without it)."""


def check_module_name(name: Any) -> str:
    """`name` if it is a dotted module name (`mygru`, `my_pkg.models`), else a ValueError saying what is expected."""
    if not isinstance(name, str) or not _MODULE_NAME.match(name):
        raise ValueError(
            f"must be a module name like mygru or my_pkg.models (got {name!r}); a file: name its module, without .py"
        )
    return name


def unique(names: Iterable[str]) -> list[str]:
    """`names` in their first order, each once."""
    return list(dict.fromkeys(names))


# --- importing modules ----------------------------------------------------------------------------------------


def import_plugins(names: Iterable[str], *, where: str = "--import") -> list[str]:
    """Import each module of `names` (in order, each once), as the user asked: from sys.path or the current
    directory. Returns the names. A name that is no module name, a module that cannot be found and a module whose
    code raises are each a PluginError naming it (`--import mygru: no module named 'mygru' ...`)."""
    done = []
    for name in unique(names):
        try:
            check_module_name(name)
        except ValueError as err:
            raise PluginError(f"{where} {name}: {err}") from None
        if name not in sys.modules:
            _import_here(name, where)
        done.append(name)
    return done


def _import_here(name: str, where: str) -> None:
    _USER_MODULES.add(name)
    cwd = os.getcwd()
    saved = list(sys.path)
    if not any(os.path.realpath(p or os.curdir) == os.path.realpath(cwd) for p in saved):
        sys.path.insert(0, cwd)  # for the import only: later imports see the path as it was
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name is not None and (name == err.name or name.startswith(err.name + ".")):
            raise PluginError(
                f"{where} {name}: no module named {err.name!r} (not installed, and not in the current directory {cwd})"
            ) from err
        raise PluginError(f"{where} {name}: importing it failed: {err}") from err
    except SystemExit as err:
        raise PluginError(f"{where} {name}: {exit_message(err)}") from None
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # noqa: BLE001 - the module's own code failed (an Exception or any other): one line
        if os.environ.get(DEBUG_ENV) == "1":  # the module's own traceback, to debug it
            raise
        raise PluginError(
            f"{where} {name}: importing it raised {_raised(err)} ({DEBUG_ENV}=1 for the traceback)"
        ) from err
    finally:
        sys.path[:] = saved


def _raised(err: BaseException) -> str:
    """`Type: message` of an exception a user's code raised, on one line and bounded (`Type` alone without one)."""
    text = shorten(" ".join(str(err).split()), 4 * MAX_SHOWN)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def exit_message(err: SystemExit) -> str:
    """What a module that called `sys.exit` while it was imported did, for the error naming it: left alone, the exit
    would end the command with the module's code (0 for sys.exit(0)) and say nothing."""
    return f"importing it called sys.exit({err.code!r}); a plugin module must not exit"


def _not_imported(names: Sequence[str], where: str, trust_flag: bool) -> None:
    missing = [n for n in unique(names) if n not in sys.modules]
    if not missing:
        return
    flags = " ".join(f"--import {n}" for n in missing)
    trust = f" (or --trust-code to import {'it' if len(missing) == 1 else 'them'} from an installed package)"
    raise UntrustedCodeError(
        f"{where}: the config imports {', '.join(map(repr, missing))}, which this process has not imported; "
        f"importing a module runs its code: pass {flags}{trust if trust_flag else ''}"
    )


def require(
    names: Sequence[str], *, trust_code: bool = False, exclude: tuple[str | Path, ...] = (), where: str = "imports"
) -> None:
    """Make sure the modules a config records (`names`) are imported, by the rule of this module's docstring:
    already imported, or imported now from an installed package with `trust_code`; else an UntrustedCodeError that
    names each module and the flags. `exclude`: directories (a run directory) an import may not come from."""
    missing = [n for n in unique(names) if n not in sys.modules]
    if not trust_code:
        _not_imported(missing, where, trust_flag=True)
        return
    for name in missing:
        try:
            import_installed(check_module_name(name), exclude)
        except ModuleNotFoundError as err:
            raise PluginError(
                f"{where}: cannot import {name!r} from an installed package ({err}); --trust-code never imports from "
                f"the current directory or a run directory: for a module of your own, pass --import {name}"
            ) from None
        except PluginError as err:  # it called sys.exit (import_installed)
            raise PluginError(f"{where}: {err}") from None
        except KeyboardInterrupt:
            raise
        except BaseException as err:  # noqa: BLE001 - the module's own code failed: one line naming it
            raise PluginError(f"{where}: importing {name!r} raised {_raised(err)}") from err


def _untrusted_paths(extra: tuple[str | Path, ...]) -> set[str]:
    """sys.path entries an import must not come from: the current directory ('' or its path) and `extra`."""
    return {os.path.realpath(p) for p in (os.getcwd(), *extra)}


def import_installed(module: str, exclude: tuple[str | Path, ...]) -> Any:
    """Import `module` from an installed package: the current directory and `exclude` (a run directory) are taken off
    sys.path for the duration (what `--trust-code` imports, for import-string architectures and a config's imports).
    A module that calls sys.exit while it is imported is a PluginError naming it."""
    _USER_MODULES.add(module)
    bad = _untrusted_paths(exclude)
    saved = list(sys.path)
    sys.path[:] = [p for p in saved if os.path.realpath(p or os.curdir) not in bad]
    try:
        return importlib.import_module(module)
    except SystemExit as err:
        raise PluginError(f"{module}: {exit_message(err)}") from None
    finally:
        sys.path[:] = saved


def check_imported(names: Sequence[str], where: str = "imports") -> None:
    """`require` without trust: every module `names` lists is already imported, else an UntrustedCodeError naming
    each and `--import` (imports nothing)."""
    _not_imported(names, where, trust_flag=False)


# --- entry points ---------------------------------------------------------------------------------------------

# (group, sys.path) -> entry points of that group, and the (name, value) pairs already loaded or tried: a new
# sys.path entry (an installed package, a test's dist-info) is looked at again.
_SEEN: dict[tuple[str, tuple[str, ...]], tuple[list[Any], set[tuple[str, str]]]] = {}
_BUSY: set[str] = set()  # groups being loaded: a plugin module that lists names while it loads loads nothing more
_FROM_ENTRY_POINTS: dict[tuple[str, str], str] = {}  # (group, registered name) -> the entry point's value


def _state(group: str) -> tuple[list[Any], set[tuple[str, str]]]:
    key = (group, tuple(sys.path))
    if key not in _SEEN:
        try:
            found = list(metadata.entry_points(group=group))
        except Exception as err:  # noqa: BLE001 - a broken installed distribution: say so, go on without plugins
            warnings.warn(f"entry points {group}: cannot list them ({type(err).__name__}: {err})", PluginWarning, 3)
            found = []
        _SEEN[key] = (found, set())
    return _SEEN[key]


def _dist(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    return f" of {dist.name} {dist.version}" if dist is not None else ""


def load_entry_points(group: str, name: str | None = None) -> list[str]:
    """Load the entry points of `group` ("windtunnel.tasks" or "windtunnel.models") called `name` (None: all) that
    were not loaded yet, and register each object under its entry point's name; returns the names registered. One
    that fails to load or register, or whose name is taken by another object, is a PluginWarning naming it."""
    if group not in GROUPS:
        raise ValueError(f"entry points: group must be one of {', '.join(GROUPS)} (got {group!r})")
    if group in _BUSY:
        return []
    _BUSY.add(group)
    try:
        registry = importlib.import_module(GROUPS[group])
        found, tried = _state(group)
        added = []
        for ep in found:
            if (name is not None and ep.name != name) or (ep.name, ep.value) in tried:
                continue
            tried.add((ep.name, ep.value))
            what = f"entry point {group} {ep.name!r} ({ep.value}{_dist(ep)})"
            _USER_MODULES.add(ep.module)
            try:
                obj = ep.load()
            except SystemExit as err:  # its module called sys.exit: the command goes on without it
                warnings.warn(f"{what}: cannot load it ({exit_message(err)}); ignored", PluginWarning, 3)
                continue
            except KeyboardInterrupt:
                raise
            except BaseException as err:  # noqa: BLE001 - a broken plugin must not break unrelated commands
                warnings.warn(f"{what}: cannot load it ({_raised(err)}); ignored", PluginWarning, 3)
                continue
            current = registry._REGISTRY.peek(ep.name)
            if current is obj:  # its module registered it when the entry point imported it
                _FROM_ENTRY_POINTS[(group, ep.name)] = ep.value
                continue
            if current is not None:  # a built-in, or another plugin's: the first one stays
                warnings.warn(f"{what}: the name is taken by {_qualname(current)}; ignored", PluginWarning, 3)
                continue
            try:
                registry.register(ep.name, obj)
            except (ValueError, TypeError) as err:
                warnings.warn(f"{what}: cannot register it ({err}); ignored", PluginWarning, 3)
                continue
            _FROM_ENTRY_POINTS[(group, ep.name)] = ep.value
            added.append(ep.name)
        return added
    finally:
        _BUSY.discard(group)


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}"


def reset() -> None:
    """Forget which entry points were seen and loaded (tests that install and remove a plugin)."""
    _SEEN.clear()
    _FROM_ENTRY_POINTS.clear()


# --- a user's own code at fault --------------------------------------------------------------------------------

# Modules imported as a user's code: by --import, a config's imports (--trust-code), an import-string architecture
# or an entry point. With the modules of every registered task and architecture that is not windtunnel's, their
# top-level packages are the code `user_fault` names.
_USER_MODULES: set[str] = set()
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_KINDS = {TASKS_GROUP: "task", MODELS_GROUP: "architecture"}


def _imported(module: str) -> dict[str, Any]:
    """Name -> factory of the registry module `module`'s imported entries; {} where the module is not imported yet."""
    registry = getattr(sys.modules.get(module), "_REGISTRY", None)
    return registry.imported() if registry is not None else {}


def _user_roots() -> set[str]:
    """The top-level packages of a user's code (`_USER_MODULES`, and every registered factory's module outside
    windtunnel; registries not imported yet are not imported)."""
    names = set(_USER_MODULES)
    for module in GROUPS.values():
        names.update(str(getattr(f, "__module__", "")) for f in _imported(module).values())
    return {n.partition(".")[0] for n in names if n} - {"windtunnel", "builtins", "__main__"}


def _kind_of_frame(frame: Any, roots: set[str]) -> str:
    """ "windtunnel", "user" (a module of `roots`) or "other" (torch, the standard library, other libraries)."""
    name = str(frame.f_globals.get("__name__") or "")
    if name == "windtunnel" or name.startswith("windtunnel.") or frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        return "windtunnel"
    return "user" if name.partition(".")[0] in roots else "other"


def _registered_as(obj: Any) -> str | None:
    """`architecture 'name'` or `task 'name'` where `obj` (a frame's `self`) is an instance of a registered class."""
    for group, module in GROUPS.items():
        for name, factory in _imported(module).items():
            if isinstance(factory, type) and isinstance(obj, factory):
                return f"{_KINDS[group]} {name!r}"
    return None


def _frame_text(frame: Any, line: int) -> tuple[str, str]:
    """(`module.Class.function`, `file.py, line N`): what a user's frame is called in an error line."""
    code = frame.f_code
    qualname = getattr(code, "co_qualname", None)  # Python 3.11+
    if qualname is None:
        owner = frame.f_locals.get("self")
        qualname = f"{type(owner).__qualname__}.{code.co_name}" if owner is not None else code.co_name
    return f"{frame.f_globals.get('__name__')}.{qualname}", f"{os.path.basename(code.co_filename)}, line {line}"


def user_fault(err: BaseException, *, direct: bool = False, context: str = "") -> str | None:
    """One line naming the user's code that raised `err` (an exception, SystemExit or any other BaseException), or
    None where none of a user's code is in its traceback: the innermost frame of a module of the user's own
    (`--import`ed, a config's imports, an import string, an entry point, or the module of a registered task or
    architecture), as `architecture 'gru' (mygru.GRU.forward, mygru.py, line 12) raised RuntimeError: ...`.
    direct: only where the user's frame is the innermost of windtunnel's and the user's (what it called in
    torch or another library aside): an error windtunnel raised about what a user's code gave it (a ValueError
    naming a field) keeps its own message. context (" at training step 3") follows what the code did."""
    roots = _user_roots()
    if not roots:
        return None
    frames = []
    tb = err.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    kinds = [_kind_of_frame(f, roots) for f, _ in frames]
    users = [i for i, k in enumerate(kinds) if k == "user"]
    if not users:
        return None
    inner = users[-1]
    if direct and "windtunnel" in kinds[inner + 1 :]:
        return None
    frame, line = frames[inner]
    label = _registered_as(frame.f_locals.get("self"))
    name, place = _frame_text(frame, line)
    head = f"{label} ({name}, {place})" if label else f"{name} ({place})"
    if isinstance(err, SystemExit):
        return f"{head} called sys.exit({err.code!r}){context}: your own code must not exit"
    through = ""
    deeper = [i for i in range(inner + 1, len(frames)) if kinds[i] == "windtunnel"]
    if deeper:
        through = f" in windtunnel code it called ({frames[deeper[-1]][0].f_globals.get('__name__')})"
    kind, _, text = _raised(err).partition(": ")
    said = f"{kind}{through}{context}" + (f": {text}" if text else "")
    return f"{head} raised {said} -- an error in your own code, not in windtunnel ({DEBUG_ENV}=1 for the traceback)"


# --- what a command line needs to find a name again -----------------------------------------------------------


def provider(group: str, name: str) -> str | None:
    """The module a command line must `--import` to find the registered task or architecture `name` again: the
    module that defines its factory; None for a built-in, an entry point's (found by name) or a name not registered.
    "__main__" for one defined in the running script, which no command line can import."""
    if (group, name) in _FROM_ENTRY_POINTS:
        return None
    registry = importlib.import_module(GROUPS[group])
    factory = registry._REGISTRY.peek(name)
    module = getattr(factory, "__module__", None) if factory is not None else None
    if not isinstance(module, str) or module == "windtunnel" or module.startswith("windtunnel."):
        return None
    return module


def providers(config: dict[str, Any]) -> list[str]:
    """`provider` of a raw config's task and architecture (those that are registered from a module)."""
    task = (config.get("task") or {}).get("name", "bijection")
    arch = (config.get("model") or {}).get("arch", "transformer")
    found = [provider(TASKS_GROUP, task) if isinstance(task, str) else None]
    found.append(provider(MODELS_GROUP, arch) if isinstance(arch, str) else None)
    return unique(m for m in found if m is not None)


__all__ = [
    "MODELS_GROUP",
    "TASKS_GROUP",
    "PluginError",
    "PluginWarning",
    "check_imported",
    "check_module_name",
    "import_plugins",
    "load_entry_points",
    "provider",
    "providers",
    "require",
    "reset",
    "unique",
    "user_fault",
]
