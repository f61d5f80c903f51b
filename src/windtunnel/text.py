"""How numbers and names are written for people: the small rules every table and error message follows.

* `number(value, spec)`: `format(value, spec)`, except that a value that rounds to zero is written without a sign
  (`0.000`, never `-0.000`);
* `did_you_mean(name, choices)`: ` (did you mean 'x'?)` for the choice closest to a mistyped name, else "".
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def number(value: float, spec: str = ".3f") -> str:
    """`value` formatted with `spec` (".3f", ".4g", ".1e", ...); a value that rounds to zero has no minus sign."""
    text = format(value, spec)
    if text.startswith("-"):
        try:
            if float(text) == 0.0:
                return ("+" if "+" in spec else "") + text[1:]
        except ValueError:  # a spec float() cannot read back (e.g. with "," grouping): leave it as written
            pass
    return text


def close_match(name: object, choices: Iterable[str]) -> str | None:
    """The choice closest to `name` (difflib, similarity >= 0.6), or None where none is close or name is no
    string."""
    if not isinstance(name, str) or not name:
        return None
    found = difflib.get_close_matches(name, [c for c in choices if c != name], n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(name: object, choices: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the choice closest to a mistyped `name`, or "" where none is close."""
    match = close_match(name, choices)
    return f" (did you mean {match!r}?)" if match is not None else ""


__all__ = ["close_match", "did_you_mean", "number"]
