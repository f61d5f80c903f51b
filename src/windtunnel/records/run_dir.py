"""The JSON files of a run directory as typed records, one pydantic model per file, and the only code that reads or
writes them (`rundir` names the files and does the atomic writes and checked reads of their bytes).

    config.json         ConfigFile (a `RunConfig`; `StoredConfig`, the fields the report reads, for any version's)
    versions.json       Versions            trained.json    Trained             resumes.json    Resumes
    eval.json, evals/   EvalFile            geometry.json   Geometry            done.json       Done

A record keeps every value as the file holds it (no coercion, unknown keys kept), so what it writes is byte for byte
what the dict-literal writers wrote and a record read and written back is the file it was read from (an older form
comes back in today's). A file that is
garbled, or a field of the wrong kind, is a `CheckpointError` naming the file and the field. Every older form a
released version wrote is read here, in today's form, beside a comment naming what wrote it.
"""

from __future__ import annotations

import json
import math
import reprlib
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar

import torch
from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError, field_validator, model_validator
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

import windtunnel
from windtunnel import rundir
from windtunnel.config import RunConfig, config_to_json, validate
from windtunnel.errors import MAX_SHOWN, CheckpointError, shorten
from windtunnel.resolve import upgrade_stored

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
    """A field the file must have: absent, it is an error saying what was expected (not pydantic's "Field required")."""
    return Field(default=MISSING, validate_default=True)


class _Record(BaseModel):
    """A JSON object of a record: keys it does not declare are kept (a newer version's, a plugin's)."""

    model_config = ConfigDict(extra="allow")


def _where(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as the field it names: `default.run.notes[0]`."""
    parts: list[str] = []
    for p in loc:
        parts.append(f"[{p}]" if isinstance(p, int) else ("." if parts else "") + shorten(str(p), MAX_SHOWN))
    return "".join(parts)


def _problem(err: Any) -> str:
    """What is wrong with one field, as every run-directory check says it: `expected a string, got 5`."""
    got = reprlib.repr(err.get("input"))
    if err["type"] == "kind":
        return f"expected {err['ctx']['expected']}, got {got}"
    if err["type"] in ("model_type", "dict_type"):
        return f"expected a JSON object, got {got}"
    if err["type"] == "list_type":
        return f"expected a list, got {got}"
    if err["type"] == "message":  # a check's own words (`Trained.config`: the config's validation error)
        return str(err["ctx"]["message"])
    return f"{err['msg']} (got {got})"


def checkpoint_error(path: Path, err: ValidationError) -> CheckpointError:
    """The first invalid field of a record read from `path`, as one line naming the file and the field."""
    first = err.errors()[0]
    where = _where(first["loc"])
    return CheckpointError(f"{path}: {where}: {_problem(first)}" if where else f"{path}: {_problem(first)}")


# --- one file per record -----------------------------------------------------------------------------------------

F = TypeVar("F", bound="_File")


class _File:
    """What every record of one JSON file has: its path in a run directory, a checked read (`read`; `find`: None
    where the file is absent), `to_json` (what it writes) and an atomic `write` (`rundir.write_json`, sorted keys)."""

    NAME: ClassVar[str]

    @classmethod
    def path(cls, run_dir: str | Path) -> Path:
        return Path(run_dir) / cls.NAME

    @classmethod
    def exists(cls, run_dir: str | Path) -> bool:
        return cls.path(run_dir).exists()

    @classmethod
    def remove(cls, run_dir: str | Path) -> None:
        cls.path(run_dir).unlink(missing_ok=True)

    @classmethod
    def parse(cls: type[F], data: Any, path: Path) -> F:
        """`data` (the JSON object of `path`) as this record; a field of the wrong kind is a CheckpointError."""
        try:
            return cls.model_validate(data)  # type: ignore[attr-defined]
        except ValidationError as err:
            raise checkpoint_error(path, err) from None

    @classmethod
    def read(cls: type[F], run_dir: str | Path) -> F:
        path = cls.path(run_dir)
        return cls.parse(rundir.read_json_object(path), path)

    @classmethod
    def find(cls: type[F], run_dir: str | Path) -> F | None:
        return cls.read(run_dir) if cls.exists(run_dir) else None

    def to_json(self) -> Any:
        """The file's JSON object: the keys read (or given), each value as it was."""
        return self.model_dump(exclude_unset=True)  # type: ignore[attr-defined]

    def write(self, run_dir: str | Path) -> None:
        rundir.write_json(self.path(run_dir), self.to_json())


class RunFile(_File, _Record):
    """A run-directory file holding one JSON object of named fields."""


# --- config.json -------------------------------------------------------------------------------------------------


class ConfigFile:
    """config.json: the fully resolved `RunConfig` (`config_to_json`), read in today's form (`upgrade`)."""

    NAME = rundir.CONFIG

    @staticmethod
    def upgrade(data: Any) -> Any:
        """A stored config (a dict, changed in place) in today's form -- the one place an older config.json (or
        trained.json's config) is upgraded: a size field added since reads as what the run trained with (`init`,
        before issue 25 every run was initialised "normal"), a retired one as its successor (the transformer's
        `explicit`, now `attention`); `resolve.upgrade_stored` holds both tables."""
        return upgrade_stored(data)

    @classmethod
    def path(cls, run_dir: str | Path) -> Path:
        return Path(run_dir) / cls.NAME

    @classmethod
    def read(cls, run_dir: str | Path) -> RunConfig:
        """A run directory's config.json, validated and upgraded; unreadable or invalid is a CheckpointError naming the
        file and the field."""
        path = cls.path(run_dir)
        try:
            return validate(cls.upgrade(rundir.read_json_object(path)))
        except ValueError as err:
            raise CheckpointError(f"{path}: {err}") from None

    @classmethod
    def write(cls, run_dir: str | Path, cfg: RunConfig) -> None:
        rundir.atomic_write(cls.path(run_dir), config_to_json(cfg))

    @classmethod
    def stored(cls, run_dir: str | Path) -> StoredConfig:
        """The fields of config.json the report reads (`StoredConfig`), checked but not validated as a RunConfig."""
        return StoredConfig.read(run_dir)


class _TaskPart(_Record):
    name: Text = required()
    params: dict[str, Any] = Field(default_factory=dict)


class _ModelPart(_Record):
    arch: Text = required()


class _TrainPart(_Record):
    steps: Count | None = None
    batch_size: Count | None = None


class StoredConfig(RunFile):
    """config.json as the report reads it: the task, architecture, seed and training length of a run written by any
    version (unknown keys kept, nothing validated beyond these), upgraded as `ConfigFile.upgrade` does."""

    NAME: ClassVar[str] = rundir.CONFIG
    task: _TaskPart = required()
    model: _ModelPart = required()
    seed: Integer | None = None
    train: _TrainPart = Field(default_factory=_TrainPart)
    eval: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        return ConfigFile.upgrade(data)


def read_config(run_dir: str | Path) -> RunConfig:
    """`ConfigFile.read`: a run directory's config.json in today's form."""
    return ConfigFile.read(run_dir)


def write_config(run_dir: str | Path, cfg: RunConfig) -> None:
    ConfigFile.write(run_dir, cfg)


# --- versions.json -------------------------------------------------------------------------------------------------


class Versions(RunFile):
    """versions.json: the code that trained the run, written when its directory is created. A run made before
    issue 26 has none (`find` is None): it is judged by its config alone."""

    NAME: ClassVar[str] = rundir.VERSIONS
    windtunnel: Text = required()
    torch: Text = required()

    @classmethod
    def current(cls) -> Versions:
        """This process's code."""
        return cls(windtunnel=windtunnel.__version__, torch=torch.__version__)


def code_versions() -> dict[str, str]:
    """The versions of the code whose numbers a run's files hold: windtunnel's and torch's."""
    return Versions.current().to_json()


def version_diff(run_dir: str | Path) -> list[str]:
    """Where the code that trained `run_dir` differs from this process's: `["versions.torch: '2.12.0' → '2.13.0'"]`;
    [] for the same code, or a run that recorded none."""
    stored = Versions.find(run_dir)
    if stored is None:
        return []
    held = stored.to_json()
    return [f"versions.{k}: {held.get(k)!r} → {v!r}" for k, v in code_versions().items() if held.get(k) != v]


# --- trained.json --------------------------------------------------------------------------------------------------


class Exported(_Record):
    """A model trained outside windtunnel and exported into the run (`runs.save_run`): by what, which model, and the
    steps it trained by its own account (None: not known)."""

    by: Text | None = None
    model: Text | None = None
    steps: Count | None = None


class Trained(RunFile):
    """trained.json: the config the run's checkpoints were trained with (written whenever training starts; config.json
    is what a person reads and may edit, this the record it is checked against), which parameters each optimiser
    trains (`optim.describe`) and, for an exported model, `exported`. A run made before issue 35 has no trained.json
    (`find` is None: its config.json is the record); one written before issue 37 (Muon per block) has no `optimizer`,
    and one before `runs.save_run` (issue 38) no `exported`: both read as None."""

    NAME: ClassVar[str] = rundir.TRAINED
    config: RunConfig = required()
    optimizer: dict[str, Any] | None = None
    exported: Exported | None = None

    @field_validator("config", mode="before")
    @classmethod
    def _config(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value  # a RunConfig given; anything else fails as "expected a JSON object"
        try:
            return validate(ConfigFile.upgrade(value))
        except ValueError as err:
            raise PydanticCustomError("message", "{message}", {"message": str(err)}) from None

    def to_json(self) -> dict[str, Any]:
        data = {"config": json.loads(config_to_json(self.config)), "optimizer": self.optimizer}
        return data if self.exported is None else {**data, "exported": self.exported.model_dump(exclude_unset=True)}


# --- resumes.json --------------------------------------------------------------------------------------------------


class Resume(_Record):
    """One resume that changed keys: the step it continued from, the changes (`path: old → new`) and the schedule
    note of a changed learning-rate schedule (None: none)."""

    step: Integer = required()
    changed: list[Text] = required()
    note: Text | None = None


class Resumes(RunFile):
    """resumes.json: the run's resumes that changed keys, in order (its config.json holds only the new values); a run
    never resumed with a change has none."""

    NAME: ClassVar[str] = rundir.RESUMES
    resumes: list[Resume] = required()

    @classmethod
    def history(cls, run_dir: str | Path) -> list[Resume]:
        found = cls.find(run_dir)
        return [] if found is None else found.resumes

    @classmethod
    def record(cls, run_dir: str | Path, resume: Resume) -> None:
        """Append `resume` to the run's resumes.json, atomically."""
        cls(resumes=[*cls.history(run_dir), resume]).write(run_dir)


# --- eval.json and evals/NAME.json ---------------------------------------------------------------------------------

# What a run's weights are (`resume.run_record`), most serious first: stopped before its last step; config.json no
# longer the config it trained with; trained outside windtunnel and exported (`runs.save_run`); extended by a resume
# that changed the learning rates already trained; resumed with changed keys (all in `resume.RESUMABLE_KEYS`: the run
# its config trains from scratch); none of these.
STATUSES = ("unfinished", "edited", "exported", "extended", "resumed", "finished")


class MetricCI(_Record):
    """An aggregate metric: its mean and bootstrap interval (NaN and inf kept: reported, never ranked). Declared in
    the order the file holds them (sorted), so a record read back dumps as the file holds it."""

    hi: Real = required()
    lo: Real = required()
    mean: Real = required()


class StoppedEarly(_Record):
    step: Count = required()
    evaluations: Positive | None = None


class RunStatus(_Record):
    """An evaluation's record of what the run's weights are (`resume.run_record`)."""

    status: Annotated[str, Kind(f"one of {', '.join(STATUSES)}", lambda v: v in STATUSES)] = required()
    steps: Count = required()
    steps_trained: Count = required()
    sequences_seen: Count = required()
    notes: list[Text] = required()
    stopped_early: StoppedEarly | None = None


class EvalEntry(_Record):
    """One evaluation setting of eval.json (or evals/NAME.json): its step, n and forward batch, the task parameters
    it ran at, the aggregate metrics (None: one the task does not define), per-position curves, approximations and
    the record of what the run is; other keys (verdict, bayes_gap, closest, stream) kept as they are. An entry
    written before issue 35 has no `run` (the report reads it from the step and the config) and no `batch_size`."""

    step: Count | None = None
    arch: Text | None = None
    n: Positive | None = None
    batch_size: Positive | None = None
    task_params: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, MetricCI | None] = Field(default_factory=dict)
    per_position: dict[str, Curve | None] = Field(default_factory=dict)
    approximations: dict[str, dict[str, Any]] = Field(default_factory=dict)
    run: RunStatus | None = None
    extra: Text | None = None  # the name of an evaluation at other settings than the run's (evals/NAME.json only)


class EvalFile(_File, RootModel[dict[str, EvalEntry]]):
    """eval.json, the run's recorded evaluation (entries by setting name, at the run's own settings), or
    evals/NAME.json, an evaluation at other settings (`rundir.eval_file`); `merge` is the one writer of both."""

    NAME: ClassVar[str] = rundir.EVAL

    @classmethod
    def path(cls, run_dir: str | Path, extra: str | None = None) -> Path:
        return rundir.eval_file(run_dir, extra)

    @property
    def entries(self) -> dict[str, EvalEntry]:
        return self.root

    @classmethod
    def read(cls, run_dir: str | Path, extra: str | None = None) -> EvalFile:
        """eval.json (`extra` None), where an entry marked "extra" is a CheckpointError naming it (`merge` never
        writes one there), or evals/NAME.json."""
        path = cls.path(run_dir, extra)
        found = cls.parse(rundir.read_json_object(path), path)
        for name, entry in found.root.items() if extra is None else ():
            if entry.extra is not None:
                raise CheckpointError(
                    f"{path}: {name}.extra: an evaluation at other settings than the run's "
                    f"({reprlib.repr(entry.extra)}) is kept in {rundir.EVALS}/, never in {rundir.EVAL}; move it there"
                )
        return found

    @classmethod
    def read_or_empty(cls, run_dir: str | Path, extra: str | None = None) -> EvalFile:
        """`read`, or no entries where the file is absent (a run not evaluated yet)."""
        return cls.read(run_dir, extra) if cls.path(run_dir, extra).exists() else cls({})

    def set_apart(self) -> set[str]:
        """The entries at another n than the default entry's: before issue 38 `windtunnel eval --n` merged an
        evaluation at another n into eval.json (extra evaluations now go to evals/NAME.json), so such an entry is no
        recorded evaluation and no label could say its n."""
        default = self.root.get("default")
        n = None if default is None else default.n
        if n is None:
            return set()
        return {k for k, v in self.root.items() if (v.n if "n" in v.model_fields_set else n) != n}

    @classmethod
    def merge(cls, run_dir: str | Path, results: dict[str, Any]) -> dict[Path, EvalFile]:
        """Merge evaluation results (by setting name) atomically into their files: an entry marked "extra" (settings
        that differ from the run's) into evals/NAME.json, any other into eval.json, so an extra evaluation never
        lands in eval.json; returns {file: its merged record}."""
        by_extra: dict[str | None, dict[str, Any]] = {}
        for setting, entry in results.items():
            by_extra.setdefault(entry.get("extra"), {})[setting] = entry
        merged: dict[Path, EvalFile] = {}
        for extra, entries in by_extra.items():
            path = cls.path(run_dir, extra)
            record = cls.parse({**cls.read_or_empty(run_dir, extra).to_json(), **entries}, path)
            rundir.write_json(path, record.to_json())
            merged[path] = record
        return merged


def merge_eval(run_dir: str | Path, results: dict[str, Any]) -> dict[Path, EvalFile]:
    """`EvalFile.merge`: the one writer of eval.json and evals/NAME.json."""
    return EvalFile.merge(run_dir, results)


# --- geometry.json -------------------------------------------------------------------------------------------------


class Geometry(RunFile):
    """geometry.json (`geometry.run.probe_run`): what was probed -- the run (relative to this file), its architecture,
    task, step and seed, the init the probes compare with, the held-out sequences -- the figures drawn, and each
    probe's result under its name (`probes`: a JSON object each, {"not_applicable": reason} where it did not apply).
    Every field is optional: a probe before issue 25 wrote no seed or init_source, one before geometry.json named
    its run relative to itself wrote `run_dir` as the path it was given, and one without figures lists none."""

    NAME: ClassVar[str] = rundir.GEOMETRY
    __pydantic_extra__: dict[str, dict[str, Any]] = Field(init=False)
    run_dir: Text | None = None
    arch: Text | None = None
    task: Text | None = None
    step: Count | None = None
    seed: Integer | None = None
    init_source: Text | None = None
    n_sequences: Count | None = None
    entropy_error_bits: Real | None = None
    heldout_seed: Text | None = None
    figures: list[Text] | None = None

    @property
    def probes(self) -> dict[str, dict[str, Any]]:
        return dict(self.__pydantic_extra__ or {})

    @classmethod
    def from_results(cls, results: dict[str, Any], out_dir: str | Path) -> Geometry:
        """`probe_run`'s results as plain JSON (a number of any type as a float), checked as the file will be read."""
        return cls.parse(json.loads(json.dumps(results, default=float)), cls.path(out_dir))


# --- done.json -----------------------------------------------------------------------------------------------------


class Done(RunFile):
    """done.json, written last by `executors.run_job`: the run is trained, evaluated and probed as asked, with the
    wall time of that attempt, where it ran and the step it resumed from. reproduce's own run_one, before the
    executors, wrote only wall_s and probe: the others read as None."""

    NAME: ClassVar[str] = rundir.DONE
    wall_s: Finite | None = None
    probe: Text | None = None
    device: Text | None = None
    host: Text | None = None
    pid: Integer | None = None
    resumed_from: Count | None = None


def read_done(run_dir: str | Path) -> Done:
    """A finished run's done.json, each field of its kind or null (CheckpointError naming the file and the field
    otherwise), so a garbled marker never reaches a table as a wrong number or a traceback."""
    return Done.read(run_dir)


__all__ = [
    "KINDS",
    "MISSING",
    "STATUSES",
    "ConfigFile",
    "Done",
    "EvalEntry",
    "EvalFile",
    "Exported",
    "Geometry",
    "MetricCI",
    "Resume",
    "Resumes",
    "RunFile",
    "RunStatus",
    "StoredConfig",
    "Trained",
    "Versions",
    "code_versions",
    "merge_eval",
    "read_config",
    "read_done",
    "version_diff",
    "write_config",
]
