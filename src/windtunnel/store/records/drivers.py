"""The records of a driver's --out: one pydantic model per file `reproduce`, `sweep` and `time-to-bayes` keep there,
and the only code that reads or writes it.

    out/manifest.json        ManifestRecord        which driver owns --out, and the finished runs it lists
    out/reproduce.json       ReproduceRecord       a reproduce's tier, machine, executor, walls and deviations
    out/sweep-config.json    SweepConfigRecord     a sweep's base config, overrides and grid (it owns --out)
    out/sweep-base.json      SweepBaseRecord       a sweep of a config dict: that dict, for its Command: line
    out/sweep.json           SweepTableRecord      a sweep's table: its settings ranked, its runs, what it trained
    out/time_to_bayes.json   TimeToBayesRecord     time-to-Bayes cells, each with its seeds and its machine

A read is checked: a garbled file, or a field of the wrong kind, is a `CheckpointError` naming the file and the field.
Readers get typed objects; every older format is upgraded where its record is validated (an --out written before
manifests: `ManifestRecord.find`; a reproduce.json before executors and threads; time-to-Bayes cells before each
carried its machine). A write is byte for byte what the drivers' dict literals wrote (key order, `sort_keys`,
indentation, floats): `to_json` gives that dict, every field in it (`EVERY_FIELD`), `write` writes it with
`rundir.write_json` (`records.base`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import Field, PrivateAttr, RootModel, field_validator, model_validator
from pydantic_core import PydanticCustomError

from windtunnel.store.records import base
from windtunnel.store.records.base import JsonFile, Record, RecordFile

MANIFEST, REPRODUCE, TIME_TO_BAYES = "manifest.json", "reproduce.json", "time_to_bayes.json"
SWEEP_CONFIG = "sweep-config.json"  # the base config and grid of the sweep that owns an output directory
SWEEP_BASE = "sweep-base.json"  # a sweep of a config dict (Python): that dict, for its Command: line to re-run
SWEEP_TABLE = "sweep.json"  # a sweep's table (also sweep.md and sweep.csv, written from it)
FORMAT = 1  # manifest.json's format
Kind = Literal["reproduce", "sweep", "time-to-bayes"]
KINDS: tuple[str, ...] = get_args(Kind)  # the drivers that own an --out
# The file by which an --out written before manifests says which driver made it.
LEGACY_MARKERS = {SWEEP_CONFIG: "sweep", TIME_TO_BAYES: "time-to-bayes", REPRODUCE: "reproduce"}
# What must match for training seconds to compare across time-to-Bayes cells of one table (merge and accumulation).
MACHINE_KEYS = ("machine", "device", "torch", "threads_per_run", "jobs")
_SAFE_NAME = re.compile(r"[A-Za-z0-9._+=-]+")  # a run name's characters (`_run_name`)


def plain(obj: Any) -> Any:
    """`obj` as JSON data (tuples become lists), to compare with what a JSON file holds."""
    return json.loads(json.dumps(obj))


# --- manifest.json -----------------------------------------------------------------------------------------


def _run_name(name: Any) -> bool:
    """Whether `name` is one path component: no "/", never "." or ".."."""
    return isinstance(name, str) and _SAFE_NAME.fullmatch(name) is not None and name not in (".", "..")


RunName = Annotated[str, base.Kind("a run directory name", _run_name)]


class ManifestEntry(Record):
    """One run a manifest lists: its directory `name` under runs/ and the short hash of its config.json."""

    name: RunName
    config_hash: str


class ManifestRecord(RecordFile):
    """manifest.json: the driver that owns --out (`kind`; a reproduce's `tier`) and its finished runs, in order."""

    NAME: ClassVar[str] = MANIFEST
    SORT_KEYS: ClassVar[bool] = False
    EVERY_FIELD: ClassVar[bool] = True
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


class ReproduceRecord(RecordFile):
    """reproduce.json: what a reproduce ran and where -- its tier, the driver's machine (`machine_description`), the
    seeds of each cell, the executor, jobs and threads, the devices and hosts the runs trained on, this call's wall
    and each run's, the command, and the tier's deviations from the paper. Fields a release before them did not
    write are absent (None); an older file's `seeds` is one count for every cell, and its executor was local. A
    machine record's later fields are kept."""

    NAME: ClassVar[str] = REPRODUCE
    EVERY_FIELD: ClassVar[bool] = True
    OMIT_NONE: ClassVar[frozenset[str]] = frozenset(
        ("machine", "device", "torch", "python", "seeds", "jobs", "run_devices", "run_hosts", "threads")
        + ("total_wall_s", "runs_reused", "command", "added_seeds")
    )

    tier: str
    machine: str | None = None
    device: str | None = None
    torch: str | None = None
    python: str | None = None
    seeds: dict[str, int] | int | None = None  # cell -> seeds; an older file: seeds per cell
    # cell -> the seeds the tier's disagreement rule added to it (`suites.paper.more_seeds`); an older file: None
    added_seeds: dict[str, list[int]] | None = None
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

    @property
    def sum_run_wall_s(self) -> float | None:
        """The summed wall time of the tier's runs (its cost, whatever interrupted or resumed it); None where it
        records none."""
        return round(sum(v or 0.0 for v in self.run_wall_s.values()), 1) if self.run_wall_s else None

    def report_json(self) -> dict[str, Any]:
        """The report's `meta` (results.json): this record, with `sum_run_wall_s` where it records run walls."""
        total = self.sum_run_wall_s
        return {**self.to_json(), **({"sum_run_wall_s": total} if total is not None else {})}


# --- sweep-config.json, sweep-base.json ------------------------------------------------------------------


class SweepConfigRecord(RecordFile):
    """sweep-config.json: the sweep that owns --out -- its `config` file (None: a config dict), the `overrides` on
    every point, the `base` config they make, and the `grid` (key -> values, in the order that names its runs)."""

    NAME: ClassVar[str] = SWEEP_CONFIG
    SORT_KEYS: ClassVar[bool] = False  # the grid's key order names the runs
    EVERY_FIELD: ClassVar[bool] = True

    config: str | None = None
    overrides: dict[str, Any] = Field(default_factory=dict)
    base: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, list[Any]] = Field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """As JSON data: a grid of tuples (a Python sweep's) is written as lists, as a re-read gives them."""
        return plain(super().to_json())


class SweepBaseRecord(JsonFile, RootModel[dict[str, Any]]):
    """sweep-base.json: the config dict a sweep from Python was given, which its Command: line names as CONFIG,
    written with the dict's keys in their order."""

    NAME: ClassVar[str] = SWEEP_BASE
    SORT_KEYS: ClassVar[bool] = False

    def to_json(self) -> dict[str, Any]:
        return plain(self.root)


# --- sweep.json ----------------------------------------------------------------------------------------------


class SweepRow(Record):
    """One finished run of a sweep's table: its grid `values` and seed, task, the validation metrics of its final
    step (None: it has none), the test metrics with their intervals, its walls, its setting, why it cannot be ★
    (`unranked`, None if it can), whether it is a run of a ★ setting (`best`) and the step its training ended at
    (`stopped_at`: an early stop's, else its steps)."""

    run: RunName
    values: dict[str, Any]
    seed: Annotated[int, base.Kind("integer")]
    task: str
    validation: dict[str, Any] | None
    metrics: dict[str, Any]
    wall_s: Annotated[float, base.Kind("real")] | None
    tokens_per_s: Annotated[float, base.Kind("real")] | None
    setting: str
    unranked: str | None
    best: bool
    stopped_at: Annotated[int, base.Kind("integer")] | None = None  # None: a table written before it was


class SweepSetting(Record):
    """One setting of a sweep's table (its grid values but the seed): its runs and seeds, the validation and test
    metrics pooled over the seeds, why it cannot be ★ (None if it can), `best` (★) and, on a ★, the `pick` against
    the next setting of its task (None elsewhere, and in a table written before picks were: docs/results/lr-sweep)."""

    setting: str
    values: dict[str, Any]
    task: str
    runs: list[RunName]
    seeds: list[Annotated[int, base.Kind("integer")]]
    n_seeds: Annotated[int, base.Kind("positive")]
    validation: dict[str, Any] | None
    metrics: dict[str, Any]
    unranked: str | None
    best: bool
    pick: dict[str, Any] | None = None
    stopped_at: Annotated[float, base.Kind("real")] | None = None  # mean over seeds; None: written before it was


class SweepTableRecord(RecordFile):
    """sweep.json: the sweep (`base`, `config`, `overrides`, `grid`), the call that wrote it (executor, jobs,
    threads, its command line, a note where that line cannot find a name again, the runs it `trained` and this call's
    wall), the machine, each task's headline metric, the `settings` best first, the `rows` by setting, the points not
    finished (`missing`) and the finished runs the call found and did not train again (`skipped`)."""

    NAME: ClassVar[str] = SWEEP_TABLE
    SORT_KEYS: ClassVar[bool] = False  # the order a reader reads it in: the sweep, the call, the table
    EVERY_FIELD: ClassVar[bool] = True
    OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"command_note"})

    base: dict[str, Any]
    config: str | None
    overrides: dict[str, Any]
    grid: dict[str, list[Any]]
    executor: str
    jobs: Annotated[int, base.Kind("positive")]
    threads: Annotated[int, base.Kind("positive")]
    command: str
    command_note: str | None = None
    trained: list[RunName]
    total_wall_s: Annotated[float, base.Kind("number")]
    machine: str
    device: str
    torch: str
    python: str
    headline: dict[str, str]
    settings: list[SweepSetting]
    rows: list[SweepRow]
    missing: list[RunName]
    skipped: list[RunName]


# --- time_to_bayes.json ------------------------------------------------------------------------------------


class CellRequest(Record):
    """The `--cell` a time-to-Bayes cell was asked as (`time_to_bayes.Cell`'s fields); its task is what a table and
    plot group by."""

    task: str


class SeedRange(Record):
    """A time-to-Bayes cell's final test value over its seeds: the mean, the lowest and the highest."""

    mean: base.Real = base.required()
    min: base.Real = base.required()
    max: base.Real = base.required()


class TimeToBayesCell(Record):
    """One cell of time_to_bayes.json: its setting's `key` (its first seed's config hash; None in results written
    before keys, matched by `cell` instead), the request, label, headline metric, seconds to each mark, final test
    value, recipe, the machine it ran on, and its seeds (each a finished run read back)."""

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"key", "recipe"})

    key: str | None = None
    cell: CellRequest
    label: str
    metric: str
    marks: dict[str, Any]
    test: SeedRange | None = None
    recipe: dict[str, Any] | None = None
    machine: dict[str, Any]
    seeds: list[dict[str, Any]] = Field(min_length=1)

    def same_setting(self, other: TimeToBayesCell) -> bool:
        """Whether this stored cell is the setting of `other`: by key, or (results written before keys) by the
        request."""
        return self.key == other.key if self.key is not None else self.cell == other.cell


class TimeToBayesRecord(RecordFile):
    """time_to_bayes.json: the `machine` of the call that first wrote it, the training `wall_s` summed over calls,
    the `cells`, and (a merge) the results it was `merged_from`, relative to its --out. Older results' cells carry no
    machine of their own: they read as the file's."""

    NAME: ClassVar[str] = TIME_TO_BAYES
    EVERY_FIELD: ClassVar[bool] = True
    OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"merged_from"})

    machine: dict[str, Any]
    wall_s: float = 0.0
    cells: list[TimeToBayesCell]
    merged_from: list[str] | None = None

    @field_validator("cells", mode="after")
    @classmethod
    def _one_cell_per_setting(cls, cells: list[TimeToBayesCell]) -> list[TimeToBayesCell]:
        """A setting is one cell (a new result of it replaces the old): two cells of one key would be two rows of one
        setting."""
        for j, cell in enumerate(cells):
            i = next((i for i, c in enumerate(cells[:j]) if cell.key is not None and c.key == cell.key), None)
            if i is not None:
                raise PydanticCustomError(
                    "message",
                    "{message}",
                    {"message": f"cells {i} and {j} are one setting (the same key); keep one of them"},
                )
        return cells

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
    "SWEEP_TABLE",
    "TIME_TO_BAYES",
    "CellRequest",
    "ManifestEntry",
    "ManifestRecord",
    "ReproduceRecord",
    "RunName",
    "SweepBaseRecord",
    "SweepConfigRecord",
    "SweepRow",
    "SweepSetting",
    "SweepTableRecord",
    "TimeToBayesCell",
    "TimeToBayesRecord",
    "plain",
]
