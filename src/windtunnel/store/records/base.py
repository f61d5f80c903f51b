"""What every record shares -- a run directory's files (`records.run_dir`) and a driver's --out (`records.drivers`):

    Kind, KINDS, required()   kinds of JSON values a field holds, checked and kept exactly as they are
    Record                    a JSON object of named fields: keys it does not declare kept, `OMIT_NONE` left out
    JsonFile, RecordFile      one file's record: a checked read (`load`, `read`, `find`), `to_json` and an atomic
                              `write` (`rundir.write_json`)
    checkpoint_error          a field of the wrong kind as one line naming the file and the field

A read is strict (no coercion: "3" is no number, a number no string), and every problem says it one way:

    PATH: FIELD: expected WHAT, got VALUE       runs/a/eval.json: default.run.notes[1]: expected a string, got 3

VALUE is a number as it is, anything else only its kind and size (`got a string of 5 characters`): an error never
echoes text a file holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, ValidationError, model_serializer
from pydantic_core import CoreSchema, ErrorDetails, PydanticCustomError, core_schema

from windtunnel.errors import MAX_SHOWN, CheckpointError, described, shorten
from windtunnel.store import rundir

# --- kinds of JSON values, checked and kept as they are ----------------------------------------------------------


class _Missing:
    """An absent key, told apart from an explicit null in error messages."""

    def __repr__(self) -> str:
        return "nothing (the key is missing)"


MISSING = _Missing()


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# kind -> (test, what the error says was expected)
KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "number": (lambda v: _is_number(v) and math.isfinite(v), "a finite number"),
    "real": (_is_number, "a number"),  # NaN and inf allowed: a result that is reported, never ranked
    "integer": (_is_int, "an integer"),
    "count": (lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
    "positive": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "text": (lambda v: isinstance(v, str), "a string"),
    "object": (lambda v: isinstance(v, dict), "a JSON object"),
    "list": (lambda v: isinstance(v, list), "a list"),
    "curve": (lambda v: isinstance(v, list) and all(map(_is_number, v)), "a list of numbers"),  # nan: no data there
}


def problem(expected: str, got: Any) -> str:
    """What is wrong with one field, as every record's check says it: `expected a string, got 5`; a value that is no
    number is told by its kind and size alone (`got a string of 26 characters`, `errors.described`): an error line
    never echoes text a file holds."""
    return f"expected {expected}, got {got!r}" if got is MISSING else f"expected {expected}, got {described(got)}"


class Kind:
    """A field's kind (`KINDS`, or a test and what it expects): the value is checked and kept exactly as it is, so an
    int stays an int and a record written back holds the numbers it was read with."""

    def __init__(self, kind: str, test: Callable[[Any], bool] | None = None) -> None:
        self.test, self.expected = (test, kind) if test is not None else KINDS[kind]

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> CoreSchema:
        return core_schema.no_info_plain_validator_function(self.check)

    def check(self, value: Any) -> Any:
        if value is MISSING or not self.test(value):
            raise PydanticCustomError("kind", "expected {expected}", {"expected": self.expected})
        return value


Finite = Annotated[float, Kind("number")]
Real = Annotated[float, Kind("real")]
Integer = Annotated[int, Kind("integer")]
Count = Annotated[int, Kind("count")]
Positive = Annotated[int, Kind("positive")]
Text = Annotated[str, Kind("text")]
Curve = Annotated[list[float], Kind("curve")]


def required() -> Any:
    """A field the file must have: absent, it is an error saying what was expected, not only that a value was."""
    return Field(default=MISSING, validate_default=True)


# --- a field of the wrong kind, in one line ----------------------------------------------------------------------

# pydantic's error types, as the records say what was expected (a kind's own words, `Kind`, come with its error)
_EXPECTED = {
    "missing": "a value",
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "dict_type": "a JSON object",
    "model_type": "a JSON object",
    "list_type": "a list",
    "too_short": "{min_length} or more items",
}


def _where(data: Any, loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as the field a reader knows (`cells[0].cell.task`): the keys and indices found in
    `data`, a missing key last, and none of pydantic's own tags (a union's member names)."""
    parts: list[str] = []
    for i, part in enumerate(loc):
        if isinstance(data, dict) and (part in data or i == len(loc) - 1):
            parts.append(("." if parts else "") + shorten(str(part), MAX_SHOWN))
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            parts.append(f"[{part}]")
            data = data[part]
    return "".join(parts)


def _problem(err: ErrorDetails) -> str:
    kind, ctx = err["type"], err.get("ctx", {})
    if kind == "message":  # a check's own words (`run_dir.Trained.config`: the config's validation error)
        return str(ctx["message"])
    got = MISSING if kind == "missing" else err.get("input")
    if kind == "kind" or kind in _EXPECTED:
        return problem(ctx["expected"] if kind == "kind" else _EXPECTED[kind].format(**ctx), got)
    return problem(err["msg"].removeprefix("Value error, ").removeprefix("Input should be "), got)


def checkpoint_error(path: Path, err: ValidationError, data: Any) -> CheckpointError:
    """The first invalid field of the record `path` holds (`data`), as one line naming the file and the field."""
    first = err.errors()[0]
    where = _where(data, first["loc"])
    return CheckpointError(f"{path}: {where}: {_problem(first)}" if where else f"{path}: {_problem(first)}")


# --- records and their files -------------------------------------------------------------------------------------


class Record(BaseModel):
    """A JSON object of a record, or a part of one: keys it does not declare are kept (a newer version's, a
    plugin's); its optional fields in `OMIT_NONE` are left out of the file when None (an older file never had them)."""

    model_config = ConfigDict(extra="allow")
    OMIT_NONE: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if v is not None or k not in self.OMIT_NONE} if self.OMIT_NONE else data


F = TypeVar("F", bound="JsonFile")


class JsonFile:
    """What every record of one JSON file `NAME` has (mixed into a `Record` or a pydantic `RootModel`): its path in a
    directory, a checked read (`load` a file, `read` a directory's, `find`: None where it is absent), `to_json` (what
    it writes) and an atomic `write` (`rundir.write_json`: keys sorted unless their order means something,
    `SORT_KEYS`). `to_json` holds the keys read or given, so a record read and written back is the file it was read
    from; with `EVERY_FIELD`, every field too, at its default where none was given (an older file upgraded)."""

    NAME: ClassVar[str]
    SORT_KEYS: ClassVar[bool] = True
    EVERY_FIELD: ClassVar[bool] = False

    @classmethod
    def path(cls, folder: str | Path) -> Path:
        return Path(folder) / cls.NAME

    @classmethod
    def exists(cls, folder: str | Path) -> bool:
        return cls.path(folder).exists()

    @classmethod
    def remove(cls, folder: str | Path) -> None:
        cls.path(folder).unlink(missing_ok=True)

    @classmethod
    def parse(cls: type[F], data: Any, path: Path) -> F:
        """`data` (what `path` holds) as this record, strictly; a field of the wrong kind is a CheckpointError."""
        try:
            return cls.model_validate(data, strict=True)  # type: ignore[attr-defined]
        except ValidationError as err:
            raise checkpoint_error(path, err, data) from None

    @classmethod
    def load(cls: type[F], path: str | Path) -> F:
        """The record a file holds (`NAME` in a directory, or any file of its kind: a merge's source), checked."""
        return cls.parse(rundir.read_json_object(path), Path(path))

    @classmethod
    def read(cls: type[F], folder: str | Path) -> F:
        """The record in `folder`, checked (a missing file is a CheckpointError naming it)."""
        return cls.load(cls.path(folder))

    @classmethod
    def find(cls: type[F], folder: str | Path) -> F | None:
        """The record in `folder`, checked, or None where `folder` has no such file."""
        return cls.read(folder) if cls.exists(folder) else None

    def to_json(self) -> Any:
        """What the file holds, as plain data in the order it is written."""
        return self.model_dump(exclude_unset=not self.EVERY_FIELD)  # type: ignore[attr-defined]

    def write(self, folder: str | Path) -> None:
        """Write `folder/NAME` atomically."""
        rundir.write_json(self.path(folder), self.to_json(), sort_keys=self.SORT_KEYS)


class RecordFile(JsonFile, Record):
    """A file holding one JSON object of named fields."""


__all__ = [
    "KINDS",
    "MISSING",
    "Count",
    "Curve",
    "Finite",
    "Integer",
    "JsonFile",
    "Kind",
    "Positive",
    "Real",
    "Record",
    "RecordFile",
    "Text",
    "checkpoint_error",
    "problem",
    "required",
]
