"""Shared CLI helpers: one way to fail (one line on stderr -- stdout where stderr is closed --, exit 2 for bad input, 1
for corrupt data), to parse `k=v` options, to load what a command computes with, and one definition of each option
that several commands take.

Imports here stay light (typer and the standard library): every command module imports this one, and help must not
wait for torch."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import EllipsisType
from typing import Any, NoReturn, TypeVar

import typer

F = TypeVar("F", bound=Callable[..., Any])

EXIT_USAGE = 2  # bad input: fix the command
EXIT_DATA = 1  # corrupt or mismatched data, a directory in use, a diverged run
EXIT_INTERRUPTED = 130  # 128 + SIGINT: what a shell reports for a command ended by Ctrl-C
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
    unusable path) exits 2; corrupt data, a run directory in use or a diverged run exits 1. An error a user's own
    code raised (a plugin's model or task: an exception, sys.exit or any other BaseException but Ctrl-C) exits 2
    naming that code and its own message (`plugins.user_fault`). An error of no known kind is a bug: it exits 1
    naming its type. WINDTUNNEL_DEBUG=1 shows the traceback of either of the last two."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from pydantic import ValidationError  # here, not at import: help never loads pydantic

        from windtunnel.errors import CheckpointError, RunInUseError, TrainingDiverged

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
            fail(_user_fault(err, direct=True) or _os_message(err))
        except (CheckpointError, RunInUseError, TrainingDiverged) as err:
            fail_data(str(err))
        except OSError as err:  # disk full, I/O error: the data could not be read or written
            message = _user_fault(err, direct=True)
            if message is not None:  # the user's own code's
                fail(message)
            fail_data(_os_message(err))
        except Exception as err:  # noqa: BLE001 - the last line of defence: one line, never a traceback
            return _unexpected(err)
        except KeyboardInterrupt:
            raise
        except BaseException as err:  # SystemExit, or any other BaseException: a user's code's is one line
            message = _user_fault(err)
            if message is None:
                raise
            fail(message)

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


def _user_fault(err: BaseException, direct: bool = False) -> str | None:
    """`plugins.user_fault`: the line naming the user's code that raised `err`, or None (WINDTUNNEL_DEBUG=1: `err`
    raised again, for its traceback)."""
    from windtunnel.errors import UserCodeError
    from windtunnel.plugins import user_fault

    message = user_fault(err, direct=direct)
    if os.environ.get(DEBUG_ENV) == "1" and (message is not None or isinstance(err, UserCodeError)):
        raise err
    return message


def _unexpected(err: Exception) -> NoReturn:
    message = _user_fault(err)
    if message is not None:
        fail(message)
    if os.environ.get(DEBUG_ENV) == "1":
        raise err
    error_line(
        f"internal error ({type(err).__name__}: {err}); this is a bug in windtunnel -- rerun with "
        f"{DEBUG_ENV}=1 for the traceback and report it"
    )
    raise typer.Exit(EXIT_DATA)


def parse_kv(items: list[str] | None, option: str) -> dict[str, Any]:
    """`["a=1", "b.c=x"]` -> `{"a": 1, "b.c": "x"}`; a malformed item is a usage error naming `option`."""
    from windtunnel.config import parse_value

    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(f"{option}: expected key=value, got {item!r}")
        out[key.strip()] = parse_value(value.strip())
    return out


@contextlib.contextmanager
def loading() -> Iterator[None]:
    """While the block imports what a command computes with (torch, scipy: seconds), a Ctrl-C exits 130 at once, with
    no traceback: nothing has been done yet, and a KeyboardInterrupt raised inside a third-party import can be
    swallowed by its bare `except:` and the command run on. A Ctrl-C the caller ignores (nohup, a background job)
    stays ignored, and off the main thread, where no handler can be set, the block runs as it is."""
    previous = signal.getsignal(signal.SIGINT)
    # None: a handler not set from Python
    ours = previous not in (signal.SIG_IGN, None) and threading.current_thread() is threading.main_thread()
    if ours:
        signal.signal(signal.SIGINT, _exit_interrupted)
    try:
        yield
    finally:
        if ours:
            signal.signal(signal.SIGINT, previous)


def _exit_interrupted(signum: int, frame: Any) -> None:
    os._exit(EXIT_INTERRUPTED)


def use_threads(threads: int | None) -> None:
    """`--threads` of a command that computes in this process: torch's CPU threads and the BLAS/OpenMP pools
    (`devices.limit_threads`; None: their defaults)."""
    if threads is None:
        return
    if threads < 1:
        raise ValueError(f"--threads: must be >= 1 (got {threads})")
    from windtunnel.devices import limit_threads

    limit_threads(threads)


# One definition of each option several commands take, so that its name, short form, default and help read the same
# everywhere. A help is one line; the details are in the docs it names.
EXECUTION = "Execution"  # the help heading of the options that say where and on how many threads the work runs


def out_option(default: Path | None | EllipsisType, help: str) -> Any:
    """`-o/--out`: where the command writes (`...`: required)."""
    return typer.Option(default, "--out", "-o", help=help)


def executor_option() -> Any:
    return typer.Option(
        "local",
        "--executor",
        help="local (this machine) or ray (a Ray cluster, docs/scale-out.md)",
        rich_help_panel=EXECUTION,
    )


def jobs_option(default: int = 1) -> Any:
    return typer.Option(
        default,
        "--jobs",
        help="runs trained at once with --executor local (threads split between them)",
        rich_help_panel=EXECUTION,
    )


def threads_option(per_run: bool = True) -> Any:
    """`--threads`: CPU threads per run of a command that launches runs (`per_run`), else of this process's torch."""
    help = (
        "CPU threads per run (default: the cores split between --jobs; 1 on Ray)"
        if per_run
        else "CPU threads torch computes with (default: torch's own)"
    )
    return typer.Option(None, "--threads", help=help, rich_help_panel=EXECUTION)


def ray_address_option() -> Any:
    return typer.Option(
        None,
        "--ray-address",
        help="with --executor ray: auto or the head's HOST:PORT (default: Ray's own)",
        rich_help_panel=EXECUTION,
    )


def max_retries_option() -> Any:
    return typer.Option(
        None,
        "--max-retries",
        help="with --executor ray: retries of a run whose worker died (default 3)",
        rich_help_panel=EXECUTION,
    )


def device_option(default: str | None, help: str) -> Any:
    """`--device`: auto (CUDA when present), cpu or cuda."""
    return typer.Option(default, "--device", help=help, rich_help_panel=EXECUTION)


def fresh_option() -> Any:
    return typer.Option(
        False, "--fresh", help="move a run of another config to --out/superseded/ and train anew (none deleted)"
    )


def progress_option() -> Any:
    return typer.Option(
        True, "--progress/--no-progress", help="live progress on stderr (in place on a terminal, else periodic lines)"
    )


def import_option() -> Any:
    """`--import MODULE` on every command that builds tasks or models (windtunnel.plugins)."""
    return typer.Option(
        None,
        "--import",
        metavar="MODULE",
        help="import MODULE first, for its tasks and models (repeatable; docs/own-model.md)",
    )


def trust_code_option() -> Any:
    """`--trust-code` on every command that loads a config: it may name code to import."""
    return typer.Option(
        False, "--trust-code", help="import the modules a config names, for configs you trust (docs/own-model.md)"
    )


def import_modules(names: list[str] | None) -> list[str]:
    """Import the modules of `--import` (windtunnel.plugins.import_plugins): a module that cannot be found or fails
    to import is a PluginError (a ValueError: one line, exit 2, under `guarded`). Returns the names, each once."""
    from windtunnel.plugins import import_plugins

    return import_plugins(names or [])


def cli_device(choice: str) -> Any:
    """The torch device --device names; a bad name, or cuda without a GPU, is a one-line error naming --device."""
    import torch

    from windtunnel.devices import resolve_device

    if choice not in DEVICES:
        raise ValueError(f"--device: must be one of {', '.join(DEVICES)} (got {choice!r})")
    if choice == "cuda" and not torch.cuda.is_available():  # said here: resolve_device's message names train.device
        raise ValueError("--device: 'cuda' requested but no CUDA device is available (use auto or cpu)")
    return resolve_device(choice)


def read_only_run(run_dir: Path, writes: str, elsewhere: str) -> str:
    """The one line for a run directory a command would write into but cannot: what it writes there (`writes`) and
    the option that writes it elsewhere (`elsewhere`, e.g. "--out FILE"), the run then only read."""
    return (
        f"RUN_DIR {str(run_dir)!r} is read-only (read-only storage or no write permission), and {writes} into it; "
        f"pass {elsewhere} to write elsewhere and only read the run"
    )


def writable_dir(path: Path) -> bool:
    """Whether files can be made in the existing folder `path` (a read-only mount says no, even to root)."""
    return os.access(path, os.W_OK | os.X_OK)
