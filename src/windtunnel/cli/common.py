"""Shared CLI helpers: one way to fail (one line on stderr -- stdout where stderr is closed --, exit 2 for bad input, 1
for corrupt data) and to parse `k=v` options."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import typer
from pydantic import ValidationError

from windtunnel.config import parse_value

F = TypeVar("F", bound=Callable[..., Any])

EXIT_USAGE = 2  # bad input: fix the command
EXIT_DATA = 1  # corrupt or mismatched data, a directory in use, a diverged run
DEVICES = ("auto", "cpu", "cuda")  # --device of eval and probe
DEBUG_ENV = "WINDTUNNEL_DEBUG"  # set to 1 to see the traceback of an unexpected error


def error_line(message: str) -> None:
    """`error: message` on stderr, or on stdout where stderr is closed (`2>&-`) or gone: a failure is never silent."""
    line = f"error: {message}"
    try:
        if sys.stderr is None:  # fd 2 was closed when Python started
            raise OSError("no stderr")
        typer.echo(line, err=True)
        return
    except (OSError, ValueError):  # closed or broken after start
        pass
    with contextlib.suppress(OSError, ValueError):
        typer.echo(line)


def fail(message: str) -> NoReturn:
    """Print `error: message` (`error_line`) and exit 2 -- never a traceback for bad input."""
    error_line(message)
    raise typer.Exit(EXIT_USAGE)


def fail_data(message: str) -> NoReturn:
    """Print `error: message` (`error_line`) and exit 1: the input files are corrupt or in use, not the command
    wrong."""
    error_line(message)
    raise typer.Exit(EXIT_DATA)


def guarded(fn: F) -> F:
    """Every error becomes one line on stderr: bad input (ValueError, pydantic ValidationError, a missing or
    unusable path) exits 2; corrupt data, a run directory in use or a diverged run exits 1. An error of no known kind
    is a bug: it exits 1 naming its type, with the traceback when WINDTUNNEL_DEBUG=1."""
    from windtunnel.errors import CheckpointError, RunInUseError, TrainingDiverged

    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _check_no_option_objects(fn.__name__, signature, args, kwargs)
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except ValidationError as err:
            fail("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()))
        except (
            ValueError,
            FileNotFoundError,
            FileExistsError,
            NotADirectoryError,
            IsADirectoryError,
            PermissionError,
        ) as err:
            fail(_os_message(err))
        except (CheckpointError, RunInUseError, TrainingDiverged) as err:
            fail_data(str(err))
        except OSError as err:  # disk full, I/O error: the data could not be read or written
            fail_data(_os_message(err))
        except Exception as err:  # noqa: BLE001 - the last line of defence: one line, never a traceback
            return _unexpected(err)

    return wrapper  # type: ignore[return-value]


def _check_no_option_objects(name: str, signature: inspect.Signature, args: Any, kwargs: Any) -> None:
    """A command function called from Python without some of its options receives typer's OptionInfo objects as
    their values (how `demo` once broke on `reproduce`'s new `--import`): a bug, named here rather than deep inside."""
    bound = signature.bind_partial(*args, **kwargs)
    bound.apply_defaults()
    unset = [k for k, v in bound.arguments.items() if isinstance(v, typer.models.ParameterInfo)]
    if unset:
        error_line(
            f"internal error: {name} was called without its option(s) {', '.join(unset)}, which reached it as typer "
            "objects; this is a bug in windtunnel"
        )
        raise typer.Exit(EXIT_DATA)


def _os_message(err: Exception) -> str:
    """`path: reason` for OS errors (whose str() is "[Errno 20] Not a directory: 'x'"), str(err) otherwise."""
    if isinstance(err, OSError) and err.filename is not None:
        return f"{err.filename}: {err.strerror or err}"
    return str(err)


def _unexpected(err: Exception) -> NoReturn:
    if os.environ.get(DEBUG_ENV) == "1":
        raise err
    error_line(
        f"internal error ({type(err).__name__}: {err}); this is a bug in windtunnel -- rerun with "
        f"{DEBUG_ENV}=1 for the traceback and report it"
    )
    raise typer.Exit(EXIT_DATA)


def parse_kv(items: list[str] | None, option: str) -> dict[str, Any]:
    """`["a=1", "b.c=x"]` -> `{"a": 1, "b.c": "x"}`; a malformed item is a usage error naming `option`."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(f"{option}: expected key=value, got {item!r}")
        out[key.strip()] = parse_value(value.strip())
    return out


# The options of every command that runs a set of runs on an executor (reproduce, sweep, time-to-bayes): one
# definition each, so their names, defaults and help read the same everywhere.
def executor_option() -> Any:
    return typer.Option("local", help="where runs execute: local (this machine) or ray (a Ray cluster)")


def jobs_option(default: int = 1) -> Any:
    return typer.Option(
        default, help="with --executor local: runs trained in parallel (threads are split between them)"
    )


def threads_option() -> Any:
    return typer.Option(None, help="CPU threads per run (default: the cores split between --jobs locally, 1 on Ray)")


def ray_address_option() -> Any:
    return typer.Option(
        None, help="with --executor ray: auto (an existing cluster) or HOST:PORT of its head (default: Ray's own)"
    )


def max_retries_option() -> Any:
    return typer.Option(None, help="with --executor ray: retries of a run whose worker or node died (default 3)")


def fresh_option() -> Any:
    return typer.Option(
        False,
        "--fresh",
        help="a run directory under --out that holds another config (or, for reproduce, another tier's runs) is "
        "moved to --out/superseded/ and trained anew, instead of an error; nothing is deleted",
    )


def progress_option() -> Any:
    return typer.Option(True, help="live progress on stderr (in place on a terminal, periodic lines else)")


# `--import MODULE` on every command that builds tasks or models (windtunnel.plugins): one definition, one help text.
IMPORT_HELP = (
    "import MODULE first (repeatable; a module on sys.path or in the current directory): its code may register "
    "tasks and architectures (windtunnel.tasks.register, windtunnel.models.register) to use by name. Importing runs "
    "its code"
)


def import_option(recorded: str = "") -> Any:
    """The `--import MODULE` option; `recorded`: what the command does with the names beyond importing them."""
    return typer.Option(None, "--import", metavar="MODULE", help=IMPORT_HELP + (f"; {recorded}" if recorded else ""))


def import_modules(names: list[str] | None) -> list[str]:
    """Import the modules of `--import` (windtunnel.plugins.import_plugins): a module that cannot be found or fails
    to import is a PluginError (a ValueError: one line, exit 2, under `guarded`). Returns the names, each once."""
    from windtunnel.plugins import import_plugins

    return import_plugins(names or [])


def device_option(default: str | None, help: str) -> Any:
    """--device: auto (CUDA when present), cpu or cuda."""
    return typer.Option(default, "--device", help=help)


def cli_device(choice: str) -> Any:
    """The torch device --device names; a bad name, or cuda without a GPU, is a one-line error naming --device."""
    import torch

    from windtunnel.devices import resolve_device

    if choice not in DEVICES:
        raise ValueError(f"--device: must be one of {', '.join(DEVICES)} (got {choice!r})")
    if choice == "cuda" and not torch.cuda.is_available():  # said here: resolve_device's message names train.device
        raise ValueError("--device: 'cuda' requested but no CUDA device is available (use auto or cpu)")
    return resolve_device(choice)
