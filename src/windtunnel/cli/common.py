"""Shared CLI helpers: one way to fail (message, exit code 2) and to parse `k=v` options."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import typer
import yaml
from pydantic import ValidationError

F = TypeVar("F", bound=Callable[..., Any])

EXIT_USAGE = 2


def fail(message: str) -> NoReturn:
    """Print `error: message` to stderr and exit 2 -- never a traceback for bad input."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(EXIT_USAGE)


def guarded(fn: F) -> F:
    """Turn user-input errors (ValueError, pydantic ValidationError, missing files) into `fail`."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ValidationError as err:
            fail("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()))
        except (ValueError, FileNotFoundError, FileExistsError) as err:
            fail(str(err))

    return wrapper  # type: ignore[return-value]


def parse_value(text: str) -> Any:
    """Parse a command-line value as YAML scalar/list (`3`, `1e-3`, `true`, `[20,30]`), else keep the string."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def parse_kv(items: list[str] | None, option: str) -> dict[str, Any]:
    """`["a=1", "b.c=x"]` -> `{"a": 1, "b.c": "x"}`; a malformed item is a usage error naming `option`."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(f"{option}: expected key=value, got {item!r}")
        out[key.strip()] = parse_value(value.strip())
    return out
