"""The `windtunnel` Typer app, its --version and its root callback; the command modules attach to it."""

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
