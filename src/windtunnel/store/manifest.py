"""What a driver's --out holds: the manifest of its own runs, and the one check that a run directory about to be
skipped or resumed is the run asked for.

Every driver (`reproduce`, `sweep`, `time-to-bayes`) owns its --out and records the runs it finished there:

    out/manifest.json                        {"format": 1, "kind": "reproduce", "tier": "quick",
                                              "runs": [{"name": "hmm-lstm", "config_hash": "3f2a..."}, ...]}
    out/runs/<name>/                         the run directories
    out/superseded/<name>-<YYYYmmddTHHMMSS>/ a run set aside by --fresh (nothing is ever deleted)

A run's `config_hash` is the sha256 (first 12 hex digits) of its config.json as stored, so the manifest says which
directory content it means. Reports read the runs the manifest lists (`run_dirs`), never everything under runs/.

Reuse: before a driver skips a finished run or resumes an interrupted one, `claim_runs` compares the stored resolved
config (`records.run_dir.read_config`, old stored configs upgraded) with the requested one (`resolve.resolve_config`),
and
the code versions the run recorded (versions.json: windtunnel, torch) with this process's; a mismatch is a
`RunMismatchError` naming the differing keys, or with `fresh` the old directory is set aside.
`executors.base.run_job` asks `check_same_run` again on the worker, so no executor can skip or resume another run.

manifest.json itself is read and written by its record (`records.drivers.ManifestRecord`); the launcher claims --out
with the functions here (`executors.Launch.claim`). Run names: a sweep names its points from their grid values
(`point_name`), time-to-Bayes its seeds from their config hash (`config_hash`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import reprlib
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from windtunnel.config import RunConfig, config_to_json, run_identity
from windtunnel.errors import CheckpointError, RunInUseError, RunMismatchError
from windtunnel.store import rundir
from windtunnel.store.lock import is_locked
from windtunnel.store.records.drivers import FORMAT, KINDS, LEGACY_MARKERS, MANIFEST, ManifestEntry, ManifestRecord
from windtunnel.store.records.run_dir import read_config, version_diff
from windtunnel.store.rundir import (
    CONFIG,
    DONE,
    EVAL,
    contents,
    read_regular,
)

SUPERSEDED, RUNS = "superseded", "runs"
_SHOWN_KEYS = 6  # differing keys named in a mismatch message before "and N more"


# --- the same run ------------------------------------------------------------------------------------------


def config_hash(cfg: RunConfig) -> str:
    """The short hash of a resolved config: the first 12 hex digits of the sha256 of its config.json text, taken
    without `train.loggers` (trackers change no number, so they never give a run another name)."""
    bare = cfg.model_copy(update={"train": cfg.train.model_copy(update={"loggers": []})})
    return _digest(config_to_json(bare).encode())


def stored_hash(run_dir: str | Path) -> str:
    """The short hash of a run directory's config.json as stored (what its manifest entry records)."""
    return _digest(read_regular(Path(run_dir) / CONFIG))


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


_ABSENT = _Absent()


def _show(value: Any) -> str:
    return repr(value) if value is _ABSENT else reprlib.repr(json.loads(json.dumps(value)))


def config_changes(old: Any, new: Any, where: str = "") -> list[tuple[str, Any, Any]]:
    """Where two configs (plain JSON data) differ, as (dotted path, old value, new value) in sorted path order, a
    key on one side only with `(absent)` on the other; lists are compared whole."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[tuple[str, Any, Any]] = []
        for key in sorted(set(old) | set(new), key=str):
            path = f"{where}.{key}" if where else str(key)
            out += config_changes(old.get(key, _ABSENT), new.get(key, _ABSENT), path)
        return out
    return [] if old == new else [(where, old, new)]


def change_line(path: str, old: Any, new: Any) -> str:
    """One `config_changes` entry as `model.size.d_model: 128 → 64`."""
    return f"{path}: {_show(old)} → {_show(new)}"


def config_diff(old: Any, new: Any, where: str = "") -> list[str]:
    """Where two configs (plain JSON data) differ: `["train.steps: 6 → 400", "eval.n: 64 → 2000"]`, dotted paths
    in sorted order; lists are compared whole."""
    return [change_line(*change) for change in config_changes(old, new, where)]


def check_same_run(run_dir: str | Path, cfg: RunConfig) -> bool:
    """Whether `run_dir` holds the run `cfg` asks for: True for a run of that resolved config (`train.loggers` aside:
    `config.run_identity`), False where there is no run yet (no directory, or only a lock). A run of another config,
    or trained by other code (windtunnel or torch: `records.run_dir.version_diff`), is a RunMismatchError naming the
    differing keys; an unreadable config.json a CheckpointError naming it; a non-empty directory without one a
    ValueError."""
    run_dir = Path(run_dir)
    if not (run_dir / CONFIG).exists():
        if contents(run_dir):
            raise ValueError(
                f"{run_dir}: not empty but not a run directory (no config.json); nothing is reused from it: "
                "use another --out, or --fresh to set it aside"
            )
        return False
    diff = config_diff(run_identity(read_config(run_dir)), run_identity(cfg))
    diff += version_diff(run_dir)
    if diff:
        more = f"; and {len(diff) - _SHOWN_KEYS} more" if len(diff) > _SHOWN_KEYS else ""
        raise RunMismatchError(
            f"{run_dir}: holds a run of another config ({'; '.join(diff[:_SHOWN_KEYS])}{more}); it is neither "
            "reused nor resumed: use another --out, or --fresh to set it aside and train this run anew"
        )
    return True


def is_finished(run_dir: str | Path) -> bool:
    """A run that needs no more work: marked done (done.json) with its final evaluation (eval.json) present."""
    return (Path(run_dir) / DONE).exists() and (Path(run_dir) / EVAL).exists()


def set_aside(run_dir: Path, out: Path) -> Path:
    """Move a run directory to `out/superseded/<name>-<time>` (never delete it); returns where it went. A directory
    a live process writes is a RunInUseError."""
    if is_locked(run_dir):
        raise RunInUseError(f"{run_dir}: in use by another process; it cannot be set aside")
    dest_dir = out / SUPERSEDED
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = base = dest_dir / f"{run_dir.name}-{time.strftime('%Y%m%dT%H%M%S')}"
    n = 1
    while dest.exists():
        n += 1
        dest = base.with_name(f"{base.name}-{n}")
    os.rename(run_dir, dest)
    return dest


@dataclass(frozen=True)
class Plan:
    """What a driver's claim of its --out found for the runs it asked for (`asked`, in order): the finished ones it
    reuses (read back, never trained again), those with work left to resume (interrupted, or finished without a file
    the driver needs), the new ones to train, where the mismatched directories went (--fresh), and the earlier
    manifest entries kept."""

    asked: tuple[str, ...] = ()
    reuse: tuple[str, ...] = ()
    resume: tuple[str, ...] = ()
    train: tuple[str, ...] = ()
    set_aside: tuple[Path, ...] = ()
    kept: tuple[ManifestEntry, ...] = ()

    @property
    def todo(self) -> tuple[str, ...]:
        """The runs with work to do (resumed or trained), in the order asked."""
        return tuple(n for n in self.asked if n not in self.reuse)


def claim_runs(out: Path, wanted: Mapping[str, RunConfig], fresh: bool = False, needs: Sequence[str] = ()) -> Plan:
    """Check every run directory `out/runs/<name>` a driver is about to skip, resume or create against the config it
    asks for (`check_same_run`), all before any work. Without `fresh` the first mismatch is raised, counting the
    others; with it each mismatched (or unreadable) directory is set aside. Returns the plan: which runs are reused
    (finished, with every file in `needs`), resumed or trained anew, and what was set aside."""
    bad: list[tuple[Path, Exception]] = []
    for name, cfg in wanted.items():
        run_dir = out / RUNS / name
        try:
            check_same_run(run_dir, cfg)
        except (ValueError, CheckpointError) as err:
            bad.append((run_dir, err))
    if bad and not fresh:
        first = bad[0][1]
        if len(bad) == 1:
            raise first
        others = ", ".join(p.name for p, _ in bad[1:])
        raise type(first)(f"{first} (and {len(bad) - 1} more not the runs asked for: {others})")
    moved = tuple(set_aside(run_dir, out) for run_dir, _ in bad)
    reuse: list[str] = []
    resume: list[str] = []
    train: list[str] = []
    for name in wanted:
        run_dir = out / RUNS / name
        if is_finished(run_dir) and all((run_dir / f).exists() for f in needs):
            reuse.append(name)
        else:
            (resume if (run_dir / CONFIG).exists() else train).append(name)
    return Plan(tuple(wanted), tuple(reuse), tuple(resume), tuple(train), moved)


def set_aside_listed(out: Path, found: ManifestRecord) -> list[tuple[str, Path]]:
    """Set aside the runs `found` (`out`'s manifest) lists -- for an --out written before manifests, every directory
    under its runs/ -- when a driver takes `out` over with --fresh. Returns each run's name and where it went."""
    runs = out / RUNS
    listed = [runs / e.name for e in found.runs]
    stale = sorted(runs.iterdir()) if found.legacy and runs.is_dir() else listed
    return [(d.name, set_aside(d, out)) for d in stale if d.is_dir()]


# --- the manifest ------------------------------------------------------------------------------------------


def read_manifest(out: str | Path) -> ManifestRecord | None:
    """`out/manifest.json`, checked (a CheckpointError names the file and the field), or None where there is none
    (an --out written before manifests included: `ManifestRecord.find` upgrades that one)."""
    return ManifestRecord.read(out) if ManifestRecord.exists(out) else None


def listed(out: str | Path) -> list[ManifestEntry]:
    """The runs `out`'s manifest lists (each its `name` and `config_hash`), [] where it has none."""
    manifest = read_manifest(out)
    return manifest.runs if manifest is not None else []


def out_kind(out: str | Path) -> tuple[str, str] | None:
    """Which driver's --out this is, and the file that says so: the manifest's kind, or for an --out written before
    manifests the driver's own result file; None for a new or unclaimed directory."""
    recorded = ManifestRecord.find(out)
    return None if recorded is None else (recorded.kind, recorded.source)


def refuse_other_kind(out: str | Path, kind: str) -> ManifestRecord | None:
    """A ValueError where `out` belongs to another driver: a reproduce never reads a sweep's runs, and so on. Returns
    what says who owns `out` (`ManifestRecord.find`: an older --out's upgraded), None where nothing does."""
    recorded = ManifestRecord.find(out)
    if recorded is not None and recorded.kind != kind:
        raise ValueError(
            f"--out: {str(out)!r} holds the runs of a {recorded.kind} ({recorded.source}); a {kind} writes an --out "
            "of its own: use another"
        )
    return recorded


def refuse_run_directory(out: str | Path) -> None:
    """A ValueError where `out` is a run directory or lies inside one (config.json beside what training writes): a
    driver's runs nested in a run's files would be read as part of it, and its runs/ as something of the run's."""
    run = rundir.run_directory_of(out)
    if run is not None:
        where = "is" if run == Path(os.path.abspath(out)) else f"lies inside {str(run)!r}, which is"
        raise ValueError(f"--out: {str(out)!r} {where} a run directory; a driver writes an --out of its own")


def write_manifest(out: str | Path, kind: str, runs: Mapping[str, str], **extra: Any) -> None:
    """Write `out/manifest.json` atomically: `runs` (name -> config hash, in order) and `extra` fields (a reproduce's
    tier)."""
    ManifestRecord.of(kind, runs, **extra).write(out)


def finished_runs(out: Path, names: list[str]) -> dict[str, str]:
    """The finished runs among `names` under `out/runs/`, name -> stored config hash: what a manifest records."""
    return {n: stored_hash(out / RUNS / n) for n in names if is_finished(out / RUNS / n)}


def accumulate(
    out: Path, previous: Iterable[ManifestEntry | Mapping[str, Any]], new: Mapping[str, str]
) -> dict[str, str]:
    """Earlier manifest entries (records, or their plain data) that still exist, then `new`: an earlier entry with a
    name or config hash of a new one (the same run under another name) gives way to it."""
    entries = [e if isinstance(e, ManifestEntry) else ManifestEntry.model_validate(e) for e in previous]
    kept = {
        e.name: e.config_hash
        for e in entries
        if e.name not in new and e.config_hash not in new.values() and (out / RUNS / e.name / CONFIG).exists()
    }
    return {**kept, **new}


def run_dirs(out: str | Path) -> list[Path]:
    """The run directories `out`'s manifest lists, each checked to be the run it records (its config.json hashes to
    the entry's config_hash); a missing or changed one is a CheckpointError naming it."""
    out = Path(out)
    if not (out / MANIFEST).exists():
        raise ValueError(f"{out}: no {MANIFEST}")
    dirs = []
    for entry in ManifestRecord.read(out).runs:
        run_dir = out / RUNS / entry.name
        if not (run_dir / CONFIG).is_file():
            raise CheckpointError(f"{out / MANIFEST}: lists {entry.name}, but {run_dir} has no config.json")
        if stored_hash(run_dir) != entry.config_hash:
            raise CheckpointError(
                f"{run_dir}: its config.json changed since {out / MANIFEST} listed it (config hash "
                f"{stored_hash(run_dir)}, listed {entry.config_hash})"
            )
        dirs.append(run_dir)
    return dirs


# --- run names ----------------------------------------------------------------------------------------------

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")  # what a run-directory name may not contain ("=" only joins key and value)
_MAX_NAME = 200  # below every filesystem's 255-byte limit on a name


@dataclass(frozen=True)
class SweepPoint:
    """One combination of grid values: its run-directory `name`, the grid `values` (dotted key -> value), the raw
    `config` (base + overrides) it trains, and that config `resolved` (validated, everything explicit)."""

    name: str
    values: dict[str, Any]
    config: dict[str, Any]
    resolved: RunConfig = field(repr=False, compare=False)


def grid_text(grid: dict[str, list[Any]]) -> list[str]:
    """The grid as `--grid` items: `["train.lr=0.001,0.0003", "seed=0,1"]`."""
    return [f"{k}={','.join(value_text(v) for v in vs)}" for k, vs in grid.items()]


def value_text(value: Any) -> str:
    """A value as a user writes it: strings as they are, everything else as JSON (`true`, `0.001`, `[20, 30]`)."""
    return value if isinstance(value, str) else json.dumps(value)


def _label(text: str) -> str:
    """Filesystem-safe text: runs of other characters (and "=") become "_"."""
    return _UNSAFE.sub("_", text.replace("=", "_")) or "_"


def _value_label(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "+".join(_value_label(v) for v in value) or "_"
    return _label(value_text(value).replace(", ", ","))


def key_labels(keys: Sequence[str]) -> dict[str, str]:
    """The name part of each grid key: its last component, or the full dotted key where two keys share it."""
    last = [k.split(".")[-1] for k in keys]
    return {k: _label(k if last.count(s) > 1 else s) for k, s in zip(keys, last, strict=True)}


def point_name(values: dict[str, Any], labels: dict[str, str], taken: set[str]) -> str:
    """`lr=0.001-seed=0`: grid `values` as a filesystem-safe name (keys by their `key_labels`), made unique among
    `taken`, which it joins. A sweep names its run directories so, and the table its settings."""
    name = "-".join(f"{labels[k]}={_value_label(v)}" for k, v in values.items())
    if len(name) > _MAX_NAME:  # keep it readable at the front, unique by a hash of the whole
        name = name[: _MAX_NAME - 9] + "-" + hashlib.sha1(name.encode()).hexdigest()[:8]
    unique, n = name, 1
    while unique in taken:  # different values with the same safe text (e.g. "a/b" and "a_b")
        n += 1
        unique = f"{name}-{n}"
    taken.add(unique)
    return unique


__all__ = [
    "FORMAT",
    "KINDS",
    "LEGACY_MARKERS",
    "MANIFEST",
    "Plan",
    "RUNS",
    "SUPERSEDED",
    "SweepPoint",
    "accumulate",
    "change_line",
    "check_same_run",
    "claim_runs",
    "config_changes",
    "config_diff",
    "config_hash",
    "finished_runs",
    "grid_text",
    "is_finished",
    "key_labels",
    "listed",
    "out_kind",
    "point_name",
    "read_manifest",
    "refuse_other_kind",
    "refuse_run_directory",
    "run_dirs",
    "set_aside",
    "set_aside_listed",
    "stored_hash",
    "value_text",
    "write_manifest",
]
