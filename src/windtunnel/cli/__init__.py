"""`windtunnel` command line: thin shells over the Python API. The only module that prints for humans.

Each command group lives in its own module and registers itself on `app`.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="windtunnel",
    help="Bayesian wind tunnels: is your sequence model doing exact Bayesian inference?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    """`--version`: windtunnel's version and torch's (what a bug report needs), then exit 0."""
    if not value:
        return
    import torch

    import windtunnel

    typer.echo(f"windtunnel {windtunnel.__version__} (torch {torch.__version__})")
    raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="print the windtunnel and torch versions"
    ),
) -> None:
    """Bayesian wind tunnels: is your sequence model doing exact Bayesian inference?"""


# Command modules attach their commands to `app` on import.
from windtunnel.cli import tasks_cmd, train_cmd, probe_cmd, reproduce_cmd, bench_cmd, sweep_cmd  # noqa: E402, F401, I001


def _one_line_warning(message: Warning | str, category: type[Warning], *_: object, **__: object) -> str:
    """Warnings (a lock taken over, a checkpoint skipped on resume) as one `warning: ...` line, without source."""
    return f"warning: {message}\n"


def main() -> None:
    import warnings

    warnings.formatwarning = _one_line_warning
    app()
