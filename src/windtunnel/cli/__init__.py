"""`windtunnel` command line: thin shells over the Python API. The only module that prints for humans.

Each command group lives in its own module and registers itself on `app`. Those modules are light (torch and the rest
are imported inside the command that computes with them), so help and --version answer at once; this module imports
them when `main` runs or `app` is asked for.
"""

from __future__ import annotations

from typing import Any

__all__ = ["app", "main"]


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


def main() -> None:
    """The console entry. A Ctrl-C while a command loads what it computes with exits 130 without a traceback
    (`common.loading`), as typer ends one in a command that has no handler of its own."""
    from windtunnel.malloc import tune_malloc

    tune_malloc()  # before torch allocates anything: evaluation and probes run about twice as fast (malloc.py)
    import warnings

    from windtunnel.cli.common import loading

    with loading():
        app = _load()
    warnings.formatwarning = _one_line_warning
    app()
