"""The JSON files of a run directory as typed records, one pydantic model per file, and the only code that reads or
writes them (`rundir` names the files and does the atomic writes and checked reads of their bytes).

    config.json         ConfigFile (a `RunConfig`; `StoredConfig`, the fields the report reads, for any version's)
    versions.json       Versions            trained.json    Trained             resumes.json    Resumes
    eval.json, evals/   EvalFile            geometry.json   Geometry            done.json       Done
    metrics.jsonl       read_history (its records, the fields read checked), validation_evals

A record keeps every value as the file holds it (no coercion, unknown keys kept), so what it writes is byte for byte
what the dict-literal writers wrote and a record read and written back is the file it was read from (an older form
comes back in today's). A file that is garbled, or a field of the wrong kind, is a `CheckpointError` naming the file
and the field (`records.base`). Every older form a released version wrote is read here, in today's form, beside a
comment naming what wrote it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field, RootModel, field_validator, model_validator
from pydantic_core import PydanticCustomError

import windtunnel
from windtunnel.config import RunConfig, config_to_json, validate
from windtunnel.errors import CheckpointError
from windtunnel.store import rundir
from windtunnel.store.records import base
from windtunnel.store.records.base import (
    MISSING,
    Count,
    Curve,
    Finite,
    Integer,
    JsonFile,
    Kind,
    Positive,
    Real,
    Record,
    RecordFile,
    Text,
    problem,
    required,
)

LEVELS = ("exact", "approximate", "fail", "invalid")  # a verdict's levels, best first; "invalid" overrides the rest

# --- config.json -------------------------------------------------------------------------------------------------


class ConfigFile:
    """config.json: the fully resolved `RunConfig` (`config_to_json`), read in today's form (`upgrade`)."""

    NAME = rundir.CONFIG

    # Size fields added after run directories were first written, by architecture, with the value every run stored
    # without them trained with: before `init` existed every built-in architecture was initialised "normal".
    ADDED_SIZE_FIELDS: ClassVar[dict[str, dict[str, Any]]] = {
        arch: {"init": "normal"} for arch in ("lstm", "mamba", "mlp", "mlp-pointwise", "transformer")
    }
    # Size fields retired since, by architecture, each with the field that now says the same: `explicit: true` was an
    # alias of `attention: "explicit"` (and `explicit: false` said nothing).
    RETIRED_SIZE_FIELDS: ClassVar[dict[str, dict[str, tuple[str, dict[Any, Any]]]]] = {
        arch: {"explicit": ("attention", {True: "explicit"})}
        for arch in ("transformer", "hf-gpt2", "hf-gpt-neox", "hf-llama", "hf-phi")
    }

    @classmethod
    def upgrade(cls, data: Any) -> Any:
        """A stored config (a dict, changed in place and returned) in today's form -- the one place an older
        config.json (or trained.json's config) is upgraded: a size field added since reads as what the run trained
        with (`ADDED_SIZE_FIELDS`), a retired one as its successor (`RETIRED_SIZE_FIELDS`). Anything else passes."""
        model = data.get("model") if isinstance(data, dict) else None
        size = model.get("size") if isinstance(model, dict) else None
        arch = model.get("arch") if isinstance(model, dict) else None
        if not isinstance(size, dict) or not isinstance(arch, str):
            return data
        for key, value in cls.ADDED_SIZE_FIELDS.get(arch, {}).items():
            size.setdefault(key, value)
        for key, (field, values) in cls.RETIRED_SIZE_FIELDS.get(arch, {}).items():
            if key in size:
                old = size.pop(key)
                if old in values:
                    size.setdefault(field, values[old])
        return data

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


class _TaskPart(Record):
    name: Text = required()
    params: dict[str, Any] = Field(default_factory=dict)


class _ModelPart(Record):
    arch: Text = required()


class _TrainPart(Record):
    steps: Count | None = None
    batch_size: Count | None = None


class StoredConfig(RecordFile):
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


class Versions(RecordFile):
    """versions.json: the code that trained the run, written when its directory is created. A run made before
    versions were recorded has none (`find` is None): it is judged by its config alone."""

    NAME: ClassVar[str] = rundir.VERSIONS
    windtunnel: Text = required()
    torch: Text = required()

    @classmethod
    def current(cls) -> Versions:
        """This process's code."""
        return cls(windtunnel=windtunnel.__version__, torch=version("torch"))


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


class Exported(Record):
    """A model trained outside windtunnel and exported into the run (`runs.save_run`): by what, which model, the
    steps it trained by its own account (None: not known), and the training settings its config did not give
    (`unknown`, config paths such as "train.lr": config.json holds windtunnel's defaults there)."""

    by: Text | None = None
    model: Text | None = None
    steps: Count | None = None
    unknown: list[Text] | None = None


class Trained(RecordFile):
    """trained.json: the config the run's checkpoints were trained with (written whenever training starts; config.json
    is what a person reads and may edit, this the record it is checked against), which parameters each optimiser
    trains (`optim.describe`) and, for an exported model, `exported`. A run made before trained.json existed has none
    (`find` is None: its config.json is the record); one written before Muon per block has no `optimizer`,
    and one before `runs.save_run` no `exported`: both read as None."""

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


class Resume(Record):
    """One resume that changed keys: the step it continued from, the changes (`path: old → new`) and the schedule
    note of a changed learning-rate schedule (None: none)."""

    step: Integer = required()
    changed: list[Text] = required()
    note: Text | None = None


class Resumes(RecordFile):
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


class MetricCI(Record):
    """An aggregate metric: its mean and bootstrap interval (NaN and inf kept: reported, never ranked). Declared in
    the order the file holds them (sorted), so a record read back dumps as the file holds it."""

    hi: Real = required()
    lo: Real = required()
    mean: Real = required()


class StoppedEarly(Record):
    step: Count = required()
    evaluations: Positive | None = None


class RunStatus(Record):
    """An evaluation's record of what the run's weights are (`resume.run_record`)."""

    status: Annotated[str, Kind(f"one of {', '.join(STATUSES)}", lambda v: v in STATUSES)] = required()
    steps: Count = required()
    steps_trained: Count = required()
    sequences_seen: Count = required()
    notes: list[Text] = required()
    stopped_early: StoppedEarly | None = None


class EvalEntry(Record):
    """One evaluation setting of eval.json (or evals/NAME.json): its step, n and forward batch, the task parameters
    it ran at, the aggregate metrics (None: one the task does not define), per-position curves, approximations and
    the record of what the run is; other keys (verdict, bayes_gap, closest, stream) kept as they are. An entry
    written before trained.json existed has no `run` (the report reads it from the step and the config) and no
    `batch_size`."""

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


class EvalFile(JsonFile, RootModel[dict[str, EvalEntry]]):
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
        found = cls.load(path)
        for name, entry in found.root.items() if extra is None else ():
            if entry.extra is not None:
                raise CheckpointError(
                    f"{path}: {name}.extra: an evaluation at other settings than the run's is kept in "
                    f"{rundir.EVALS}/, never in {rundir.EVAL}; move it there"
                )
        return found

    @classmethod
    def read_or_empty(cls, run_dir: str | Path, extra: str | None = None) -> EvalFile:
        """`read`, or no entries where the file is absent (a run not evaluated yet)."""
        return cls.read(run_dir, extra) if cls.path(run_dir, extra).exists() else cls({})

    def set_apart(self) -> set[str]:
        """The entries at another n than the default entry's: once, `windtunnel eval --n` merged an
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


def read_test_metrics(
    run_dir: str | Path, metrics: tuple[str, ...] | None = None
) -> dict[str, dict[str, float] | None]:
    """The test-stream `metrics` (default: all) of a run's default evaluation (eval.json): {metric: {"mean", "lo",
    "hi"}}, None where the task has no such metric. NaN and inf are kept (reported, never ranked); a value that is
    not a number is a CheckpointError naming the file and the field."""
    path = EvalFile.path(run_dir)
    default = EvalFile.read(run_dir).entries.get("default")
    if default is None or "metrics" not in default.model_fields_set:
        where = "default" if default is None else "default.metrics"
        raise CheckpointError(f"{path}: {where}: {problem('a JSON object', MISSING)}")
    out: dict[str, dict[str, float] | None] = {}
    for m in default.metrics if metrics is None else metrics:
        ci = default.metrics.get(m)
        out[m] = None if ci is None else {"mean": float(ci.mean), "lo": float(ci.lo), "hi": float(ci.hi)}
    return out


def merge_eval(run_dir: str | Path, results: dict[str, Any]) -> dict[Path, EvalFile]:
    """`EvalFile.merge`: the one writer of eval.json and evals/NAME.json."""
    return EvalFile.merge(run_dir, results)


# --- geometry.json -------------------------------------------------------------------------------------------------


class Geometry(RecordFile):
    """geometry.json (`geometry.run.probe_run`): what was probed -- the run (relative to this file), its architecture,
    task, step and seed, the init the probes compare with, the held-out sequences -- the figures drawn, and each
    probe's result under its name (`probes`: a JSON object each, {"not_applicable": reason} where it did not apply).
    A figure's path is relative to the folder of this file (one stored absolute is read as it is).
    Every field is optional: an early probe wrote no seed or init_source, one before geometry.json named
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
    entropy_error_sample: Text | None = None  # which sequences entropy_error_bits is over (not eval.json's)
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


class Done(RecordFile):
    """done.json, written last by `executors.run_job`: the run is trained, evaluated and probed as asked, with the
    wall time of that attempt (`probe_s` of it in the geometry probes), where it ran and the step it resumed from.
    reproduce's own run_one, before the executors, wrote only wall_s and probe, and runs marked done before probe_s
    was recorded lack it: those fields read as None."""

    NAME: ClassVar[str] = rundir.DONE
    wall_s: Finite | None = None
    probe: Text | None = None
    device: Text | None = None
    host: Text | None = None
    pid: Integer | None = None
    resumed_from: Count | None = None
    probe_s: Finite | None = None


def read_done(run_dir: str | Path) -> Done:
    """A finished run's done.json, each field of its kind or null (CheckpointError naming the file and the field
    otherwise), so a garbled marker never reaches a table as a wrong number or a traceback."""
    return Done.read(run_dir)


# --- metrics.jsonl -----------------------------------------------------------------------------------------------

# kind -> (test, what the error says was expected): the records' kinds and a verdict's level
KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    **base.KINDS,
    "level": (lambda v: v in LEVELS, f"a verdict level ({', '.join(LEVELS)})"),
}
# metrics.jsonl fields the report reads (wall time; curves and time to Bayes of the headline metrics,
# metric_specs.headline_metric; a periodic evaluation's verdict, time to verdict).
HISTORY_FIELDS = {
    "elapsed_s": "number",
    "train_s": "number",
    "entropy_mae_bits": "number",
    "accuracy": "number",
    "verdict": "level",
}


def checked(value: Any, kind: str, path: Path, where: str) -> Any:
    """`value` if it is of `kind` (see KINDS), else a one-line CheckpointError naming the file and the field."""
    test, expected = KINDS[kind]
    if value is MISSING or not test(value):
        raise CheckpointError(f"{path}: {where}: {problem(expected, value)}")
    return value


def _check_history(history: list[dict[str, Any]], path: Path) -> list[dict[str, Any]]:
    """metrics.jsonl records (`rundir.read_metrics` has checked that each is an object with a step): the fields in
    HISTORY_FIELDS numbers or null."""
    for i, h in enumerate(history, 1):
        for key, kind in HISTORY_FIELDS.items():
            if h.get(key) is not None:
                checked(h[key], kind, path, f"record {i}.{key}")
    return history


def read_history(run_dir: str | Path) -> list[dict[str, Any]]:
    """A run's metrics.jsonl records, the fields in HISTORY_FIELDS checked (CheckpointError naming the file, the
    record and the field otherwise)."""
    return _check_history(rundir.read_metrics(run_dir), Path(run_dir) / rundir.METRICS)


def validation_evals(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The periodic (validation-stream) evaluations of a run's metrics.jsonl records (`read_history`), in order: the
    `"split": "eval"` lines that carry their training seconds. The one reader of a validation curve: time to Bayes
    (`crossings.crossings`) and time to verdict (`crossings.verdict_crossings`) read these."""
    return [h for h in history if h.get("split") == "eval" and "train_s" in h]


__all__ = [
    "HISTORY_FIELDS",
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
    "RunStatus",
    "StoredConfig",
    "Trained",
    "Versions",
    "checked",
    "code_versions",
    "merge_eval",
    "read_config",
    "read_done",
    "read_history",
    "read_test_metrics",
    "validation_evals",
    "version_diff",
    "write_config",
]
