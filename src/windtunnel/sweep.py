"""`sweep`: one base run config, a grid of dotted overrides, every combination trained and tabulated.

    windtunnel sweep base.yaml --grid train.lr=1e-3,3e-4 --grid seed=0,1,2 --out runs/lr-sweep

Every point of the grid is a run directory `out/runs/<name>` (a readable name built from its grid values, e.g.
`lr=0.001-seed=0`), trained by any executor (`windtunnel.executors`: local processes or a Ray cluster) with the same
`run_job` as `reproduce`, so a point's numbers do not depend on where it ran. Every point is validated before
anything is created, the longest runs start first, and a re-run trains only what is missing (a finished run has
`done.json`), reusing a run directory only when it holds the point's resolved config (the launcher's claim,
`executors.Launch.claim`; with `fresh` a mismatched one is set aside). `out/manifest.json` lists the sweep's finished
points, `out/sweep-config.json` the sweep that owns --out (`records.drivers.SweepConfigRecord`); a point's name is
`manifest.point_name`'s.

The table -- `out/sweep.md`, `sweep.csv`, `sweep.json` -- is picked on the validation stream, never the test stream,
each setting (the runs that differ only in `seed`) with its mean and interval over seeds: `report.sweep_table`.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from windtunnel import plugins
from windtunnel.config import RunConfig, apply_overrides, parse_value, read_file
from windtunnel.executors import ExecutorOptions, Job, Launch, launch
from windtunnel.models import is_import_string
from windtunnel.report.sweep_table import TABLE_CSV, TABLE_JSON, TABLE_MD, write_table
from windtunnel.resolve import resolve_config
from windtunnel.store import manifest
from windtunnel.store.manifest import SweepPoint, grid_text, key_labels, point_name, value_text
from windtunnel.store.records.drivers import SWEEP_BASE, SWEEP_CONFIG, SweepBaseRecord, SweepConfigRecord, plain

KIND = "sweep"  # the manifest kind of a sweep's --out


# --- the grid ----------------------------------------------------------------------------------------------


def _split_values(text: str, item: str) -> list[str]:
    """`a,[1,2],'x,y'` -> ["a", "[1,2]", "'x,y'"]: commas inside brackets, braces or quotes belong to one value."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth < 0:
                raise ValueError(f"--grid: unbalanced {ch!r} in {item!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth or quote:
        raise ValueError(f"--grid: unclosed {'quote' if quote else 'bracket'} in {item!r}")
    parts.append(text[start:])
    return [p.strip() for p in parts]


def _check_key(key: str, item: str, option: str = "--grid") -> None:
    """A grid key (or a --set key given a value that is no mapping, `option`) is a dotted path to one setting: never
    malformed, never a section (`train`, `model.size`), whose value would silently replace every setting in it."""
    if not key or not all(p.strip() for p in key.split(".")):
        raise ValueError(f"{option}: malformed key in {item!r}; expected a dotted config key like train.lr")
    node: Any = RunConfig().model_dump(mode="json")
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return  # a leaf, or a key validation names
        node = node[part]
    if isinstance(node, dict):
        what, example = ("a grid key", "sweep its settings instead, e.g. --grid {}.<name>=v1,v2")
        if option != "--grid":
            what, example = (f"a {option} key", f"set its settings instead, e.g. {option} {{}}.<name>=value")
        raise ValueError(
            f"{option} {key}: {what} must be a leaf setting; {key} is a section, and a value would replace all of "
            f"it: {example.format(key)}"
        )


def _check_values(key: str, values: Sequence[Any], item: str) -> None:
    if not values:
        raise ValueError(f"--grid: no values in {item!r}; expected {key}=v1,v2,...")
    for i, v in enumerate(values):
        if v in values[:i]:
            raise ValueError(f"--grid: {item!r} repeats the value {value_text(v)}")


def parse_grid(items: list[str]) -> dict[str, list[Any]]:
    """`["train.lr=1e-3,3e-4", "seed=0,1"]` -> `{"train.lr": [0.001, 0.0003], "seed": [0, 1]}`, keys in order.

    Each value is parsed as a YAML scalar or list; `task.params.K=[20,30],[40]` gives two list values. A malformed
    item, an empty value, a value given twice or a key given twice is a ValueError naming `--grid` and the item."""
    grid: dict[str, list[Any]] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"--grid: expected key=v1,v2,... (got {item!r})")
        _check_key(key, item)
        if key in grid:
            raise ValueError(f"--grid: {key} is given twice (second: {item!r}); list all its values in one --grid")
        raw = _split_values(text, item) if text.strip() else []
        if any(not v for v in raw):
            raise ValueError(f"--grid: empty value in {item!r}")
        values = [parse_value(v) for v in raw]
        _check_values(key, values, item)
        grid[key] = values
    return grid


# --- points ------------------------------------------------------------------------------------------------


def _resolve(cfg: dict[str, Any], where: str) -> RunConfig:
    try:
        return resolve_config(cfg)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


def _base_error(base: dict[str, Any]) -> str | None:
    try:
        resolve_config(base)
    except ValueError as err:
        return str(err)
    return None


def expand(base: dict[str, Any], grid: dict[str, list[Any]]) -> list[SweepPoint]:
    """The cross product of `grid` over `base`: keys in the order given, each key's values in order (the last key
    varies fastest). Every point is validated here, before anything is created: a bad value is a ValueError naming
    the grid item and the field (`--grid train.lr=-1: train.lr: Input should be greater than 0 (got -1)`), a bad
    combination names all of the point's values, and two points that are the same run are refused."""
    if not grid:
        raise ValueError("--grid: give at least one key=v1,v2,...")
    for key, options in grid.items():
        _check_key(key, key)
        _check_values(key, options, f"{key}={','.join(map(value_text, options))}")
    base_error = _base_error(base)
    if base_error is None:  # blame a bad value on its own grid item, not on the point it first appears in
        for key, options in grid.items():
            for v in options:
                _resolve(apply_overrides(base, {key: v}), f"--grid {key}={value_text(v)}")
    labels = key_labels(list(grid))
    taken: set[str] = set()
    points: list[SweepPoint] = []
    seen: dict[str, str] = {}
    for combo in itertools.product(*grid.values()):
        values = dict(zip(grid, combo, strict=True))
        config = apply_overrides(base, values)
        where = "--grid " + " ".join(f"{k}={value_text(v)}" for k, v in values.items())
        try:
            resolved = resolve_config(config)
        except ValueError as err:
            raise ValueError(f"config: {err}" if str(err) == base_error else f"{where}: {err}") from None
        name = point_name(values, labels, taken)
        same = seen.setdefault(resolved.model_dump_json(), name)
        if same != name:
            raise ValueError(f"--grid: points {same} and {name} are the same run (two keys or values set one field)")
        points.append(SweepPoint(name, values, config, resolved))
    return points


# --- the sweep ---------------------------------------------------------------------------------------------


def sweep(
    config: str | Path | dict[str, Any],
    grid: dict[str, list[Any]],
    out: str | Path,
    options: ExecutorOptions = ExecutorOptions(),
    overrides: dict[str, Any] | None = None,
    echo: Callable[[str], None] = lambda _: None,
    fresh: bool = False,
    imports: Sequence[str] = (),
) -> dict[str, Any]:
    """Train every point of `grid` over the base `config` (a YAML/JSON file or a dict; `overrides`: dotted keys set
    on every point; `imports`: modules imported first and added to the base's `imports`, with those that registered
    its task and architecture: windtunnel.plugins) into `out/runs/`, on the executor of `options`
    (`executors.launch`: threads per run, local jobs or a Ray cluster, progress), longest runs first; then write the
    table. A point's directory holding another config is refused unless `fresh` (set aside to `out/superseded/`).
    Holds `out`'s lock; returns what sweep.json holds."""
    overrides = dict(overrides or {})
    for key, value in overrides.items():
        if key in grid:
            raise ValueError(f"--set {key}: also swept by --grid; give it in one place")
        if not isinstance(value, dict):  # a mapping may stand for a whole section; anything else would erase it
            _check_key(key, key, "--set")
    base = apply_overrides(read_file(config) if not isinstance(config, dict) else config, overrides)
    # `imports`, and the modules that registered the base's task and architecture in this process (a Python sweep's;
    # not the running script's, which no command line can import): every point records them, so its run directory
    # and the sweep's Command: line find those names again
    found = [m for m in plugins.providers(base) if m != "__main__"]
    needed = [*plugins.import_plugins(imports), *found]
    if needed:
        listed = base.get("imports")
        base["imports"] = plugins.unique([*(listed if isinstance(listed, list) else []), *needed])
    points = expand(base, grid)
    for p in points:
        _check_builtin(p.resolved)
    out = Path(out)
    launcher = launch(out, options, KIND, (TABLE_MD, TABLE_CSV, TABLE_JSON, SWEEP_BASE))
    record = SweepConfigRecord(
        config=None if isinstance(config, dict) else str(config), overrides=overrides, base=base, grid=grid
    )
    meta = {
        "executor": options.executor,
        "jobs": options.jobs,
        "threads": launcher.threads,
        "command": _command(record, out, options),
    }
    note = _command_note(base)
    if note:
        meta["command_note"] = note
    with launcher:  # one sweep per output directory, never another driver's
        record, points = _same_sweep(out, record, points)
        plan = launcher.claim({p.name: p.resolved for p in points}, echo, fresh=fresh)
        record.write(out)  # the sweep owns --out now, with the grid's key order
        if isinstance(config, dict):  # the Command: line reads it back
            SweepBaseRecord(plain(config)).write(out)
        return _sweep_locked(launcher, plan, points, record, meta, echo)


def _check_builtin(cfg: RunConfig) -> None:
    if is_import_string(cfg.model.arch):
        module = cfg.model.arch.partition(":")[0]
        raise ValueError(
            f"model.arch: {cfg.model.arch!r} is an import string; a sweep runs architectures by name: register the "
            f"class in {module} (windtunnel.models.register(NAME, Class)) and pass --import {module} with "
            "model.arch=NAME"
        )


def _command_imports(base: dict[str, Any]) -> list[str]:
    """The modules a re-run must `--import`: the base's `imports`."""
    listed = base.get("imports")
    return plugins.unique(m for m in listed if isinstance(m, str)) if isinstance(listed, list) else []


def _command_note(base: dict[str, Any]) -> str | None:
    """Why the Command: line cannot find a name again, where a task or architecture is the running script's own."""
    if "__main__" not in plugins.providers(base):
        return None
    return (
        "The task or architecture of this sweep was registered by the script that ran it (__main__), which no command "
        "line can import: move it into a module and add --import MODULE to re-run this command."
    )


def _same_sweep(
    out: Path, record: SweepConfigRecord, points: list[SweepPoint]
) -> tuple[SweepConfigRecord, list[SweepPoint]]:
    """A sweep reruns in its own --out only: refuse one of another sweep (another base config or other grid keys)
    or of other runs. Returns the record and points in the key order the directory's sweep first used (same keys,
    same run names)."""
    old = SweepConfigRecord.find(out)
    if old is None:
        if (out / manifest.RUNS).exists():
            raise ValueError(f"--out: {str(out)!r} holds runs/ of something other than a sweep; use a new --out")
        return record, points
    if plain(old.base) != plain(record.base):
        raise ValueError(
            f"--out: {str(out)!r} holds a sweep of another base config ({old.config or 'a dict'}, "
            f"--set {old.overrides or {}}); use a new --out for this one"
        )
    keys = list(old.grid)
    if set(keys) != set(record.grid):
        raise ValueError(
            f"--out: {str(out)!r} holds a sweep over {', '.join(keys)}, not {', '.join(record.grid)}; "
            "use a new --out for this one"
        )
    if keys == list(record.grid):
        return record, points
    record = record.model_copy(update={"grid": {k: record.grid[k] for k in keys}})
    return record, expand(record.base, record.grid)


def _sweep_locked(
    launcher: Launch,
    plan: manifest.Plan,
    points: list[SweepPoint],
    record: SweepConfigRecord,
    meta: dict[str, Any],
    echo: Callable[[str], None],
) -> dict[str, Any]:
    out = launcher.out
    runs_dir = out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    jobs = [Job(p.name, p.config, str(runs_dir), probe=False) for p in points]
    found = sorted(plan.reuse)  # read, never trained again
    todo = len(plan.todo)

    def tabulate() -> dict[str, Any]:
        """The table of what has finished (the runs this call trained: finished now, not before), and the manifest
        of its runs."""
        trained = sorted(launcher.finished(plan.todo))
        timed = {**meta, "trained": trained, "total_wall_s": launcher.wall_s(), "skipped": found}
        data = write_table(out, points, record.model_dump(), timed, launcher.machine())
        launcher.record([p.name for p in points], keep=False)  # this sweep's points only
        return data

    try:
        launcher.execute(jobs, f"{len(points)} runs ({todo} to train)", echo)  # longest first
    except BaseException:  # keep the table of what did finish, then report the failure
        with contextlib.suppress(Exception):
            tabulate()
        raise
    return tabulate()


def _command(record: SweepConfigRecord, out: Path, options: ExecutorOptions) -> str:
    """The `windtunnel sweep` command line of a sweep (a dict config: the copy written to `out/sweep-base.json`),
    with an `--import` for each module the base needs (`_command_imports`) and the executor options given."""
    parts = ["windtunnel sweep", record.config or str(out / SWEEP_BASE)]
    parts += [f"--import {m}" for m in _command_imports(record.base)]
    parts += [f"--grid {g}" for g in grid_text(record.grid)]
    parts += [f"--set {k}={value_text(v)}" for k, v in record.overrides.items()]
    parts += [f"--out {out}", f"--executor {options.executor}"]
    given = {
        "--jobs": options.jobs if options.jobs != 1 else None,
        "--threads": options.threads,
        "--ray-address": options.ray_address,
        "--max-retries": options.max_retries,
    }
    parts += [f"{k} {v}" for k, v in given.items() if v is not None]
    return " ".join(parts)


__all__ = [
    "SWEEP_BASE",
    "SWEEP_CONFIG",
    "expand",
    "parse_grid",
    "sweep",
]
