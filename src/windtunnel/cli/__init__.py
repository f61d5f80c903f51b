"""`windtunnel` command line: thin shells over the Python API. The only module that prints for humans.

Each command group lives in its own module and registers itself on `app`. This module imports none of them (they
import torch: seconds) until `main` runs or `app` is asked for, so the console entry's Ctrl-C handling is in place
before that import starts.
"""

from __future__ import annotations

import os
import signal
from typing import Any

__all__ = ["app", "main"]

EXIT_INTERRUPTED = 130  # 128 + SIGINT: what a shell reports for a command ended by Ctrl-C


def _load() -> Any:
    """The Typer app with every command attached; command modules attach their commands to it on import."""
    from windtunnel.cli import tasks_cmd, train_cmd, probe_cmd, reproduce_cmd, bench_cmd, sweep_cmd, compare_cmd  # noqa: F401, I001
    from windtunnel.cli import llm_cmd  # noqa: F401
    from windtunnel.cli.root import app

    return app


def __getattr__(name: str) -> Any:
    if name == "app":  # `from windtunnel.cli import app`: the app with its commands
        return _load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _one_line_warning(message: Warning | str, category: type[Warning], *_: object, **__: object) -> str:
    """Warnings (a lock taken over, a checkpoint skipped on resume) as one `warning: ...` line, without source."""
    return f"warning: {message}\n"


def _exit_interrupted(signum: int, frame: Any) -> None:
    """SIGINT while the commands load: nothing has been done or written yet, so leave at once (a KeyboardInterrupt
    raised inside a third-party import can be swallowed by its bare `except:` and the command would run on)."""
    os._exit(EXIT_INTERRUPTED)


def main() -> None:
    """The console entry. A Ctrl-C while the commands load (importing torch takes seconds) exits 130 without a
    traceback, as typer ends one in a command that has no handler of its own."""
    from windtunnel.malloc import tune_malloc

    tune_malloc()  # before torch allocates anything: evaluation and probes run about twice as fast (malloc.py)
    previous = signal.getsignal(signal.SIGINT)
    # A Ctrl-C the caller ignores (nohup, a background job) stays ignored; None: a handler not set from Python.
    ours = previous not in (signal.SIG_IGN, None)
    if ours:
        signal.signal(signal.SIGINT, _exit_interrupted)
    try:
        app = _load()
    finally:
        if ours:
            signal.signal(signal.SIGINT, previous)
    import warnings

    warnings.formatwarning = _one_line_warning
    app()
