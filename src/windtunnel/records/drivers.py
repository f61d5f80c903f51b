"""The records of a driver's --out: one pydantic model per file `reproduce`, `sweep` and `time-to-bayes` keep there,
and the only code that reads or writes it.

    out/manifest.json        ManifestRecord        which driver owns --out, and the finished runs it lists
    out/reproduce.json       ReproduceRecord       a reproduce's tier, machine, executor, walls and deviations
    out/sweep-config.json    SweepConfigRecord     a sweep's base config, overrides and grid (it owns --out)
    out/sweep-base.json      SweepBaseRecord       a sweep of a config dict: that dict, for its Command: line
    out/time_to_bayes.json   TimeToBayesRecord     time-to-Bayes cells, each with its seeds and its machine

A read is checked: a garbled file, or a field of the wrong kind, is a `CheckpointError` naming the file and the field.
Readers get typed objects; every older format is upgraded where its record is validated (an --out written before
manifests: `ManifestRecord.find`; a reproduce.json before executors and threads; time-to-Bayes cells before each
carried its machine). A write is byte for byte what the drivers' dict literals wrote (key order, `sort_keys`,
indentation, floats): `to_json` gives that dict, `write` writes it with `rundir.write_json`.
"""

from __future__ import annotations

import json
import re
import reprlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    RootModel,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from windtunnel.errors import CheckpointError
from windtunnel.rundir import read_json_object, write_json

MANIFEST, REPRODUCE, TIME_TO_BAYES = "manifest.json", "reproduce.json", "time_to_bayes.json"
SWEEP_CONFIG = "sweep-config.json"  # the base config and grid of the sweep that owns an output directory
SWEEP_BASE = "sweep-base.json"  # a sweep of a config dict (Python): that dict, for its Command: line to re-run
FORMAT = 1  # manifest.json's format
Kind = Literal["reproduce", "sweep", "time-to-bayes"]
KINDS: tuple[str, ...] = get_args(Kind)  # the drivers that own an --out
# The file by which an --out written before manifests says which driver made it.
LEGACY_MARKERS = {SWEEP_CONFIG: "sweep", TIME_TO_BAYES: "time-to-bayes", REPRODUCE: "reproduce"}
# What must match for training seconds to compare across time-to-Bayes cells of one table (merge and accumulation).
MACHINE_KEYS = ("machine", "device", "torch", "threads_per_run", "jobs")
_SAFE_NAME = re.compile(r"[A-Za-z0-9._+=-]+")  # a run name is one path component (no "/", never "." or "..")

R = TypeVar("R", bound="Record")
F = TypeVar("F", bound="DriverFile")


def plain(obj: Any) -> Any:
    """`obj` as JSON data (tuples become lists), to compare with what a JSON file holds."""
    return json.loads(json.dumps(obj))


def _where(data: Any, loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as the field a reader knows (`cells[0].cell.task`): the keys and indices found in
    `data`, a missing key last, and none of pydantic's own tags (a union's member names)."""
    parts: list[str] = []
    for i, part in enumerate(loc):
        if isinstance(data, dict) and (part in data or i == len(loc) - 1):
            parts.append(("." if parts else "") + str(part))
            data = data.get(part) if isinstance(part, str) else None
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            parts.append(f"[{part}]")
            data = data[part]
    return "".join(parts) or "(the whole file)"


def _parse(cls: type[R], data: Any, path: Path) -> R:
    """`data` (what `path` holds) as a `cls`, strictly: a field of the wrong kind is a one-line CheckpointError
    naming the file and the field."""
    try:
        return cls.model_validate(data, strict=True)
    except ValidationError as err:
        first = err.errors()[0]
        if first["type"] == "missing":
            what, got = "expected a value", "nothing (the key is missing)"
        else:
            what = first["msg"].removeprefix("Value error, ").replace("Input should be ", "expected ")
            got = reprlib.repr(first.get("input"))
        raise CheckpointError(f"{path}: {_where(data, first['loc'])}: {what}, got {got}") from None


class Record(BaseModel):
    """A record, or a part of one: its optional fields in `OMIT_NONE` are left out of the file when None (an older
    file never had them), every other field is written as it is."""

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if v is not None or k not in self.OMIT_NONE}


class DriverFile(Record):
    """The record of one file of a driver's --out, `NAME` (as `records.run_dir`'s: `read`, `find`, `to_json`,
    `write`), written with sorted keys unless their order means something (`SORT_KEYS`)."""

    NAME: ClassVar[str]
    SORT_KEYS: ClassVar[bool] = True

    @classmethod
    def path(cls, out: str | Path) -> Path:
        """Where the file lies in `out`."""
        return Path(out) / cls.NAME

    @classmethod
    def load(cls: type[F], path: str | Path) -> F:
        """The record a file holds (`NAME` in an --out, or any file of its kind: a merge's source), checked."""
        return _parse(cls, read_json_object(path), Path(path))

    @classmethod
    def read(cls: type[F], out: str | Path) -> F:
        """The record in `out`, checked (a missing file is a CheckpointError naming it)."""
        return cls.load(cls.path(out))

    @classmethod
    def find(cls: type[F], out: str | Path) -> F | None:
        """The record in `out`, checked, or None where `out` has no such file."""
        return cls.read(out) if cls.path(out).exists() else None

    def to_json(self) -> dict[str, Any]:
        """What the file holds, as plain data in the order it is written."""
        return self.model_dump()

    def write(self, out: str | Path) -> None:
        """Write `out/NAME` atomically (`rundir.write_json`)."""
        write_json(self.path(out), self.to_json(), sort_keys=self.SORT_KEYS)


# --- manifest.json -----------------------------------------------------------------------------------------


class ManifestEntry(Record):
    """One run a manifest lists: its directory `name` under runs/ and the short hash of its config.json."""

    name: str
    config_hash: str

    @field_validator("name")
    @classmethod
    def _one_component(cls, name: str) -> str:
        if not _SAFE_NAME.fullmatch(name) or name in (".", ".."):
            raise ValueError("expected a run directory name")
        return name


class ManifestRecord(DriverFile):
    """manifest.json: the driver that owns --out (`kind`; a reproduce's `tier`) and its finished runs, in order."""

    NAME: ClassVar[str] = MANIFEST
    SORT_KEYS: ClassVar[bool] = False
    OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"tier"})

    format: int = FORMAT
    kind: Kind
    tier: str | None = None
    runs: list[ManifestEntry]
    _source: str = PrivateAttr(default=MANIFEST)

    @classmethod
    def of(cls, kind: str, runs: Mapping[str, str], tier: str | None = None) -> ManifestRecord:
        """A manifest of `kind` listing `runs` (name -> config hash, in order)."""
        entries = [ManifestEntry(name=n, config_hash=h) for n, h in runs.items()]
        return cls.model_validate({"kind": kind, "tier": tier, "runs": entries})

    @classmethod
    def find(cls, out: str | Path) -> ManifestRecord | None:
        """What says which driver owns `out`: its manifest.json, or for an --out written before manifests, the
        driver's own result file (`LEGACY_MARKERS`), upgraded to a manifest of no runs (a reproduce's tier read from
        its reproduce.json; `source` names the file); None for a new or unclaimed directory."""
        if cls.path(out).exists():
            return cls.read(out)
        for marker, kind in LEGACY_MARKERS.items():
            if (Path(out) / marker).exists():
                tier = ReproduceRecord.load(Path(out) / marker).tier if marker == REPRODUCE else None
                legacy = cls.model_validate({"kind": kind, "tier": tier, "runs": []})
                legacy._source = marker
                return legacy
        return None

    @property
    def source(self) -> str:
        """The file that says which driver owns --out: manifest.json, or an older --out's result file."""
        return self._source

    @property
    def legacy(self) -> bool:
        """Whether --out was written before manifests: its runs were never listed (each is checked on its own)."""
        return self._source != MANIFEST


# --- reproduce.json ----------------------------------------------------------------------------------------


class ReproduceRecord(DriverFile):
    """reproduce.json: what a reproduce ran and where -- its tier, the driver's machine (`machine_description`), the
    seeds of each cell, the executor, jobs and threads, the devices and hosts the runs trained on, this call's wall
    and each run's, the command, and the tier's deviations from the paper. Fields a release before them did not
    write are absent (None); an older file's `seeds` is one count for every cell, and its executor was local."""

    NAME: ClassVar[str] = REPRODUCE
    model_config = ConfigDict(extra="allow")  # a machine record's later fields are kept
    OMIT_NONE: ClassVar[frozenset[str]] = frozenset(
        ("machine", "device", "torch", "python", "seeds", "jobs", "run_devices", "run_hosts", "threads")
        + ("total_wall_s", "runs_reused", "command")
    )

    tier: str
    machine: str | None = None
    device: str | None = None
    torch: str | None = None
    python: str | None = None
    seeds: dict[str, int] | int | None = None  # cell -> seeds; an older file: seeds per cell
    jobs: int | None = None
    executor: str = "local"  # an older file ran locally
    run_devices: str | None = None
    run_hosts: list[str] | None = None
    threads: int | None = None
    total_wall_s: float | None = None
    runs_reused: int | None = None
    run_wall_s: dict[str, float | int | None] = Field(default_factory=dict)  # as each run's done.json holds it
    command: str | None = None
    deviations: list[str] = Field(default_factory=list)


# --- sweep-config.json, sweep-base.json ------------------------------------------------------------------


class SweepConfigRecord(DriverFile):
    """sweep-config.json: the sweep that owns --out -- its `config` file (None: a config dict), the `overrides` on
    every point, the `base` config they make, and the `grid` (key -> values, in the order that names its runs)."""

    NAME: ClassVar[str] = SWEEP_CONFIG
    SORT_KEYS: ClassVar[bool] = False  # the grid's key order names the runs

    config: str | None = None
    overrides: dict[str, Any] = Field(default_factory=dict)
    base: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, list[Any]] = Field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """As JSON data: a grid of tuples (a Python sweep's) is written as lists, as a re-read gives them."""
        return plain(self.model_dump())


class SweepBaseRecord(RootModel[dict[str, Any]]):
    """sweep-base.json: the config dict a sweep from Python was given, which its Command: line names as CONFIG."""

    NAME: ClassVar[str] = SWEEP_BASE

    @classmethod
    def load(cls, path: str | Path) -> SweepBaseRecord:
        """The config dict a sweep-base.json holds (a JSON object, else a CheckpointError naming it)."""
        return cls(read_json_object(path))

    def write(self, out: str | Path) -> None:
        """Write `out/sweep-base.json`, the dict's keys in their order."""
        write_json(Path(out) / self.NAME, plain(self.root), sort_keys=False)


# --- time_to_bayes.json ------------------------------------------------------------------------------------


class CellRequest(Record):
    """The `--cell` a time-to-Bayes cell was asked as (`time_to_bayes.Cell`'s fields); its task is what a table and
    plot group by."""

    model_config = ConfigDict(extra="allow")
    task: str


class TimeToBayesCell(Record):
    """One cell of time_to_bayes.json: its setting's `key` (its first seed's config hash; None in results written
    before keys, matched by `cell` instead), the request, label, headline metric, seconds to each mark, final test
    value, recipe, the machine it ran on, and its seeds (each a finished run read back)."""

    model_config = ConfigDict(extra="allow")
    OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"key", "recipe"})

    key: str | None = None
    cell: CellRequest
    label: str
    metric: str
    marks: dict[str, Any]
    test: dict[str, Any] | None = None
    recipe: dict[str, Any] | None = None
    machine: dict[str, Any]
    seeds: list[dict[str, Any]] = Field(min_length=1)

    def same_setting(self, other: TimeToBayesCell) -> bool:
        """Whether this stored cell is the setting of `other`: by key, or (results written before keys) by the
        request."""
        return self.key == other.key if self.key is not None else self.cell == other.cell


class TimeToBayesRecord(DriverFile):
    """time_to_bayes.json: the `machine` of the call that first wrote it, the training `wall_s` summed over calls,
    the `cells`, and (a merge) the results it was `merged_from`, relative to its --out. Older results' cells carry no
    machine of their own: they read as the file's."""

    NAME: ClassVar[str] = TIME_TO_BAYES
    model_config = ConfigDict(extra="allow")
    OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"merged_from"})

    machine: dict[str, Any]
    wall_s: float = 0.0
    cells: list[TimeToBayesCell]
    merged_from: list[str] | None = None

    @model_validator(mode="before")
    @classmethod
    def _cells_carry_their_machine(cls, data: Any) -> Any:
        """Upgrade results written before each cell carried its machine: such a cell ran on the file's."""
        if isinstance(data, dict) and isinstance(data.get("machine"), dict) and isinstance(data.get("cells"), list):
            machine = data["machine"]
            cells = [{**c, "machine": c.get("machine", machine)} if isinstance(c, dict) else c for c in data["cells"]]
            return {**data, "cells": cells}
        return data


__all__ = [
    "FORMAT",
    "KINDS",
    "LEGACY_MARKERS",
    "MACHINE_KEYS",
    "MANIFEST",
    "REPRODUCE",
    "SWEEP_BASE",
    "SWEEP_CONFIG",
    "TIME_TO_BAYES",
    "CellRequest",
    "DriverFile",
    "ManifestEntry",
    "ManifestRecord",
    "Record",
    "ReproduceRecord",
    "SweepBaseRecord",
    "SweepConfigRecord",
    "TimeToBayesCell",
    "TimeToBayesRecord",
    "plain",
]
