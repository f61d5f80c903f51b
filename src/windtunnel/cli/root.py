"""The `windtunnel` Typer app, its --version and its root callback; the command modules attach to it.

The command modules import only typer, the standard library and light windtunnel modules: help and --version answer
without loading torch. Each command imports what it computes with in its own body (`common.loading`).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption


def _reflow(text: str | None) -> str | None:
    """Each paragraph of a docstring as one line: the terminal wraps help, not the line breaks of the source."""
    if text is None:
        return None
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n"))


def _no_flag_placeholder(params: Iterable[Any]) -> None:
    """A flag takes no value, so its help shows no `<bool>` beside it (typer's rich help shows a type for every
    option)."""
    for p in params:
        if isinstance(p, TyperOption) and p.is_flag and p.metavar is None:
            p.metavar = ""


class Command(TyperCommand):
    """A command whose help is its docstring reflowed, the first paragraph being the one line `windtunnel --help`
    shows, with no placeholder beside a flag."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["help"] = _reflow(kwargs.get("help"))
        super().__init__(*args, **kwargs)
        _no_flag_placeholder(self.params)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        _no_flag_placeholder([option])
        return option


class Group(TyperGroup):
    """A command group with the help conventions of `Command`."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["help"] = _reflow(kwargs.get("help"))
        super().__init__(**kwargs)
        _no_flag_placeholder(self.params)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        _no_flag_placeholder([option])
        return option


class App(typer.Typer):
    """A Typer whose groups are `Group`s and whose commands are `Command`s."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cls=Group, **kwargs)

    def command(self, *args: Any, **kwargs: Any) -> Any:
        return super().command(*args, cls=Command, **kwargs)


app = App(
    name="windtunnel",
    help="Bayesian wind tunnels: is your sequence model doing exact Bayesian inference?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    """`--version`: windtunnel's version and torch's (what a bug report needs), then exit 0. Torch's is read from its
    installed metadata: importing torch takes seconds."""
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    import windtunnel

    try:
        torch = version("torch")
    except PackageNotFoundError:
        torch = "not installed"
    typer.echo(f"windtunnel {windtunnel.__version__} (torch {torch})")
    raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="print the windtunnel and torch versions"
    ),
) -> None:
    """Bayesian wind tunnels: is your sequence model doing exact Bayesian inference?"""
