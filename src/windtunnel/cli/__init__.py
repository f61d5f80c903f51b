"""`windtunnel` command line: thin shells over the Python API. The only module that prints for humans.

Each command group lives in its own module and registers itself on `app`.
"""

from __future__ import annotations

from windtunnel.cli.root import app

__all__ = ["app", "main"]

# Command modules attach their commands to `app` on import.
from windtunnel.cli import tasks_cmd, train_cmd, probe_cmd, reproduce_cmd, bench_cmd, sweep_cmd  # noqa: E402, F401, I001


def _one_line_warning(message: Warning | str, category: type[Warning], *_: object, **__: object) -> str:
    """Warnings (a lock taken over, a checkpoint skipped on resume) as one `warning: ...` line, without source."""
    return f"warning: {message}\n"


def main() -> None:
    import warnings

    warnings.formatwarning = _one_line_warning
    app()
