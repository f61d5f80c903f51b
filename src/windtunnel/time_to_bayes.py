"""Time-to-Bayes: how long until a model is Bayes-exact? Wall-clock training seconds and steps to each precision mark.

A cell is (task, architecture, recipe, budget); each seed of a cell is one training run with frequent cheap
evaluation on the validation stream (never the test stream). From its `metrics.jsonl` the benchmark reads the first
evaluation at which the headline metric reaches each mark:

    entropy error  0.1, 0.05, 0.02, 0.01 bits     (recall: accuracy 90%, 99%, 100%)
    HMM, also      "exact filter": the model's belief horizon covers every window filter (`marks.crossings`)

Times are *training* seconds (`train_s`: optimiser steps only, no evaluation or checkpoints), with the machine,
threads and dtype recorded. Results: `time_to_bayes.json`, `time_to_bayes.md` and a log-log plot of error against
training seconds per cell (`time_to_bayes.png`; the table and plot: `report.time_to_bayes`). Run with
`windtunnel time-to-bayes` or `benchmarks/bench_time_to_bayes.py`.

A run is named `<task>-<arch>-<recipe>-<steps>x<batch>-lr<lr>-s<seed>-<hash>`, the hash that of its resolved config
(`manifest.config_hash`), so two cells that differ in anything are two runs; labels are read from the resolved config.
A recipe here sets only the optimiser, schedule and curriculum (`recipes.TRAINING_KEYS`). The driver holds --out's
lock, reuses a run only when its stored config is the one asked for (`manifest.claim_runs`), and accumulates: a new
cell joins the cells already in `time_to_bayes.json` (the same setting replaces its earlier result), provided the
machine, torch, threads and jobs match (`MACHINE_KEYS`; `allow_mixed` labels each cell with its own machine).
"""

from __future__ import annotations

import json
import os
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from windtunnel import manifest, rundir
from windtunnel.config import RunConfig, apply_overrides, parse_value, warmup_for
from windtunnel.errors import CheckpointError, error_message
from windtunnel.executors import ExecutorOptions, Job, Launch, holding, launch
from windtunnel.marks import crossings, summarize_marks, verdict_crossings
from windtunnel.metric_specs import headline_metric, pool_seeds
from windtunnel.recipes import RECIPES, get_recipe
from windtunnel.report.collect import read_history, read_test_metrics, validation_evals
from windtunnel.report.time_to_bayes import MACHINE_KEYS, markdown, plot
from windtunnel.resolve import resolve_config
from windtunnel.suites.paper import MAX_SEEDS, TASKS, run_config

KIND = "time-to-bayes"  # the manifest kind of a time-to-bayes --out
RESULTS = "time_to_bayes.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")  # what a run-name part may not contain


class Cell(BaseModel):
    """One benchmark cell: the tier's task size and model preset, trained with `recipe` for `steps` at `batch_size`
    and `lr`, evaluated every `eval_every` steps on `eval_size` validation sequences; `seeds` runs."""

    model_config = ConfigDict(extra="forbid")
    task: str
    arch: str
    recipe: str = "baseline"
    tier: str = "quick"
    steps: int = Field(ge=1)
    batch_size: int = Field(default=64, ge=1)
    lr: float = Field(default=1e-3, gt=0, allow_inf_nan=False)
    warmup_steps: int | None = Field(default=None, ge=0)  # None: 5% of the steps, as the quick tier
    eval_every: int = Field(default=100, ge=1)
    eval_size: int = Field(default=256, ge=1)
    seeds: int = Field(default=1, ge=1, le=MAX_SEEDS)  # bounded before any run is resolved
    set: dict[str, Any] = Field(default_factory=dict)  # extra dotted overrides (model.size.*, train.*, task.params.*)

    @property
    def recipe_name(self) -> str:
        """The recipe as labels show it: a registered name as given, a recipe file by its file name (`wsd.yaml`, never
        to be read as the registered `wsd`)."""
        return self.recipe if self.recipe in RECIPES else Path(self.recipe).name


@dataclass(frozen=True)
class SeedRun:
    """One seed of a cell: its run-directory `name`, the raw `config` it trains and that config `resolved`."""

    seed: int
    name: str
    config: dict[str, Any]
    resolved: RunConfig = field(repr=False, compare=False)


def cell_config(cell: Cell, seed: int) -> dict[str, Any]:
    """The run config of one seed of a cell: the tier's config of (task, arch) with the cell's budget and recipe. A
    task outside the paper suite, or a recipe that sets more than training keys, is a ValueError naming it."""
    if cell.task not in TASKS:
        raise ValueError(f"--cell task: {cell.task!r} is not a task of the paper suite ({', '.join(TASKS)})")
    recipe = get_recipe(cell.recipe)
    recipe.check_training_only(cell.task, cell.steps, f"--cell recipe {cell.recipe!r}")  # before apply reads it
    cfg = run_config(cell.task, cell.arch, cell.tier, seed)
    warmup = cell.warmup_steps if cell.warmup_steps is not None else warmup_for(cell.steps)
    cfg = apply_overrides(
        cfg,
        {
            "train.steps": cell.steps,
            "train.batch_size": cell.batch_size,
            "train.lr": cell.lr,
            "train.warmup_steps": warmup,
            "train.eval_every": cell.eval_every,
            "train.eval_size": cell.eval_size,
            "train.checkpoint_every": max(cell.eval_every, cell.steps // 10),
            "train.checkpoint_schedule": None,
            "train.keep_checkpoints": 1,
            "train.log_every": min(50, cell.eval_every),
        },
    )
    cfg = recipe.apply(cfg)
    return apply_overrides(cfg, cell.set)


def _part(text: str, limit: int = 40) -> str:
    """Run-name-safe text (the hash beside it keeps the name unique)."""
    return _UNSAFE.sub("_", text)[:limit] or "_"


def run_name(cell: Cell, cfg: RunConfig) -> str:
    """`hmm-transformer-wsd-3000x32-lr0.001-s0-3f2a9c01b7de`: a readable prefix read from the resolved config, then
    the hash of that config (`manifest.config_hash`)."""
    t = cfg.train
    prefix = f"{cfg.task.name}-{_part(cfg.model.arch)}-{_part(cell.recipe_name)}-{t.steps}x{t.batch_size}-lr{t.lr:g}"
    return f"{prefix}-s{cfg.seed}-{manifest.config_hash(cfg)}"


def cell_runs(cell: Cell) -> list[SeedRun]:
    """Every seed of a cell, resolved and named; a bad cell is a ValueError naming the field, and seeds that resolve
    to one run (`set.seed` fixes every seed's) are refused."""
    runs = []
    for seed in range(cell.seeds):
        raw = cell_config(cell, seed)
        resolved = resolve_config(raw)
        runs.append(SeedRun(seed, run_name(cell, resolved), raw, resolved))
    if len({r.name for r in runs}) < len(runs):
        raise ValueError(
            f"--cell seeds={cell.seeds}: every seed is one run (set.seed fixes the seed of all of them); use seeds=1"
        )
    return runs


def _at(data: Any, dotted: str) -> Any:
    """The value at a dotted key of a config dump (None where it is not there)."""
    for part in dotted.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data


def _short(value: Any) -> Any:
    """A label's view of a value: a list of more than four items as `[first, …, last] (n)`."""
    if isinstance(value, list) and len(value) > 4:
        return f"[{value[0]}, …, {value[-1]}] ({len(value)})"
    return value


def cell_label(cell: Cell, cfg: RunConfig) -> str:
    """`hmm/transformer/wsd (3000x32, lr 0.001, adamw, wsd, d_model=96)`, every value read from the resolved config of
    the cell's first seed (the preset is named where it is not the quick one; `set` keys by their last part, long
    lists shortened)."""
    t = cfg.train
    parts = [f"{t.steps}x{t.batch_size}", f"lr {t.lr:g}", t.optimizer, t.schedule]
    if cfg.model.preset not in (None, "quick"):
        parts.append(f"{cfg.model.preset} preset")
    dump = cfg.model_dump(mode="json")
    parts += [f"{k.split('.')[-1]}={_short(_at(dump, k))}" for k in sorted(cell.set)]
    return f"{cfg.task.name}/{cfg.model.arch}/{cell.recipe_name} ({', '.join(parts)})"


def read_seed(run: SeedRun, out: Path, threads: int) -> dict[str, Any]:
    """One trained seed of a cell: its validation curve, the marks it crossed, its first ◐-or-better and first ✓
    validation verdict (`marks.verdict_crossings`), and its final test numbers."""
    run_dir = out / manifest.RUNS / run.name
    final = read_test_metrics(run_dir)  # the test stream, written by train(); checked, naming a bad field
    lines = read_history(run_dir)  # checked, naming a bad field
    evals = validation_evals(lines)
    steps = [r for r in lines if "loss" in r]
    metric = headline_metric(run.resolved.task.name)
    keep = ("step", "train_s", "entropy_mae_bits", "kl_bits", "accuracy", "impossible_mass", "closest", "horizon")
    return {
        "seed": run.resolved.seed,
        "run_dir": f"{manifest.RUNS}/{run.name}",  # relative to the benchmark's --out: results stay valid when moved
        "config_hash": manifest.config_hash(run.resolved),
        "metric": metric,
        "curve": [{k: e[k] for k in keep if k in e} for e in evals],
        "crossings": crossings(evals, metric),
        "time_to_verdict": verdict_crossings(evals),  # first ◐-or-better and first ✓ validation verdict
        "train_s": steps[-1]["train_s"] if steps else None,
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in steps[1:]) if len(steps) > 1 else None,
        "final_validation": {k: evals[-1].get(k) for k in keep if k in evals[-1]} if evals else None,
        "test": {k: (v["mean"] if v else None) for k, v in final.items()},
        "dtype": run.resolved.train.dtype,
        "threads": threads,
    }


def summarize_cell(cell: Cell, runs: list[SeedRun], seeds: list[dict[str, Any]], machine: dict[str, Any]) -> dict:
    """A cell's seeds: their marks (`summarize_marks`) and final test value (mean, min, max); `key` (the first seed's
    config hash) says which setting it is, so a later result of the same setting replaces it."""
    metric = seeds[0]["metric"]
    test = [s["test"][metric] for s in seeds if s["test"].get(metric) is not None]
    return {
        "key": manifest.config_hash(runs[0].resolved),
        "cell": cell.model_dump(),
        "label": cell_label(cell, runs[0].resolved),
        "metric": metric,
        "marks": summarize_marks([s["crossings"] for s in seeds]),
        "test": {"mean": pool_seeds(test)["mean"], "min": min(test), "max": max(test)} if test else None,
        "recipe": get_recipe(cell.recipe).model_dump(mode="json"),
        "machine": machine,
        "seeds": seeds,
    }


def _plan(cells: list[Cell]) -> list[tuple[Cell, list[SeedRun]]]:
    """Every cell's seeds, validated before anything is created; two cells that are one setting are refused."""
    planned = [(c, cell_runs(c)) for c in cells]
    seen: dict[str, int] = {}
    for i, (_, runs) in enumerate(planned, 1):
        first = seen.setdefault(runs[0].name, i)
        if first != i:
            raise ValueError(f"--cell: cells {first} and {i} are the same runs (their resolved configs are equal)")
    return planned


def run(
    cells: list[Cell],
    out: str | Path,
    options: ExecutorOptions = ExecutorOptions(),
    echo: Any = print,
    *,
    fresh: bool = False,
    allow_mixed: bool = False,
    probe: bool = False,
) -> dict[str, Any]:
    """Run every seed of every cell on the executor of `options` (`executors.launch`: threads per run, local jobs or
    a Ray cluster, progress), holding `out`'s lock; add the cells to the results already in `out` (refused where
    machine, torch, threads or jobs differ, unless `allow_mixed`) and write JSON, Markdown and the plot; returns the
    results dict. A finished seed (its `done.json`) is read back, not trained again; a run directory of another
    config is refused unless `fresh` (set aside to `out/superseded/`). `probe`: every seed's run also gets the
    geometry probes (geometry.json in its run directory; a finished run without one is probed)."""
    out = Path(out)
    launcher = launch(out, options)
    planned = _plan(cells)  # fail on a bad cell, recipe or config before any training or any directory is made
    threads, runner = launcher.threads, launcher.executor
    machine = {**launcher.machine(), "threads_per_run": threads, "jobs": options.jobs, "executor": runner.name}
    with launcher:  # one driver per --out
        manifest.refuse_other_kind(out, KIND)
        previous = read_results(out / RESULTS) if (out / RESULTS).exists() else None
        if previous is not None:
            _check_machines(
                [(f"the results already in {out}", previous["machine"]), ("this call", machine)], allow_mixed, "--out"
            )
        wanted = {r.name: r.resolved for _, runs in planned for r in runs}
        for moved in manifest.claim_runs(out, wanted, fresh):
            echo(f"  set aside (not the run asked for) -> {moved}")
        manifest.write_manifest(out, KIND, manifest.accumulate(out, manifest.listed(out), {}))  # claimed now
        return _run_locked(planned, launcher, machine, previous, echo, probe)


def _run_locked(
    planned: list[tuple[Cell, list[SeedRun]]],
    launcher: Launch,
    machine: dict[str, Any],
    previous: dict[str, Any] | None,
    echo: Any,
    probe: bool = False,
) -> dict[str, Any]:
    out = launcher.out
    runs_dir = out / manifest.RUNS
    work = [Job(r.name, r.config, str(runs_dir), probe=probe) for _, rs in planned for r in rs]
    todo = [
        j for j in work if not manifest.is_finished(j.run_dir) or (probe and not (j.run_dir / rundir.GEOMETRY).exists())
    ]
    launcher.execute(todo, f"time-to-Bayes: {len(planned)} cell(s), {len(work)} run(s)", echo)
    cells = [summarize_cell(c, rs, [read_seed(r, out, launcher.threads) for r in rs], machine) for c, rs in planned]
    data = _accumulate(previous, cells, machine, launcher.wall_s())
    finished = manifest.finished_runs(out, [j.name for j in work])
    manifest.write_manifest(out, KIND, manifest.accumulate(out, manifest.listed(out), finished))
    echo(_write(data, out))
    return data


def _same_cell(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether a stored cell is the setting of a new one: by key, or (results written before keys) by the request."""
    return old.get("key") == new["key"] if "key" in old else old.get("cell") == new["cell"]


def _accumulate(
    previous: dict[str, Any] | None, cells: list[dict[str, Any]], machine: dict[str, Any], wall_s: float
) -> dict[str, Any]:
    """The results already in --out with this call's cells joined: a cell of the same setting is replaced in place,
    a new one appended; each earlier cell keeps its machine."""
    if previous is None:
        return {"machine": machine, "wall_s": wall_s, "cells": cells}
    merged = [{**c, "machine": c.get("machine", previous["machine"])} for c in previous["cells"]]
    for new in cells:
        i = next((i for i, c in enumerate(merged) if _same_cell(c, new)), None)
        if i is None:
            merged.append(new)
        else:
            merged[i] = new
    return {**previous, "wall_s": round(float(previous.get("wall_s", 0.0)) + wall_s, 1), "cells": merged}


def _write(data: dict[str, Any], out: Path) -> str:
    """time_to_bayes.json, .md and .png into `out`; returns the Markdown."""
    text = markdown(data)
    rundir.write_json(out / RESULTS, data)
    rundir.atomic_write(out / "time_to_bayes.md", text)
    plot(data, out / "time_to_bayes.png")
    return text


def _need(ok: bool, path: Path, where: str, expected: str, got: Any) -> None:
    if not ok:
        raise CheckpointError(f"{path}: {where}: expected {expected}, got {json.dumps(got)[:60]}")


def read_results(path: Path) -> dict[str, Any]:
    """A time_to_bayes.json, checked where the table and plot read it (CheckpointError naming the file and field)."""
    data = rundir.read_json_object(path)
    _need(isinstance(data.get("machine"), dict), path, "machine", "an object", data.get("machine"))
    _need(isinstance(data.get("cells"), list), path, "cells", "a list", data.get("cells"))
    wall = data.get("wall_s", 0.0)
    _need(isinstance(wall, (int, float)) and not isinstance(wall, bool), path, "wall_s", "a number", wall)
    for i, c in enumerate(data["cells"]):
        where = f"cells[{i}]"
        _need(isinstance(c, dict), path, where, "an object", c)
        for key, kind, what in (("label", str, "a string"), ("metric", str, "a string"), ("marks", dict, "an object")):
            _need(isinstance(c.get(key), kind), path, f"{where}.{key}", what, c.get(key))
        _need(
            isinstance(c.get("cell"), dict) and isinstance(c["cell"].get("task"), str),
            path,
            f"{where}.cell.task",
            "a task name",
            c.get("cell"),
        )
        seeds = c.get("seeds")
        _need(
            isinstance(seeds, list) and bool(seeds) and all(isinstance(s, dict) for s in seeds),
            path,
            f"{where}.seeds",
            "a non-empty list of objects",
            seeds,
        )
    return data


def _check_machines(sources: list[tuple[str, dict[str, Any]]], allow_mixed: bool, what: str) -> None:
    """Refuse results whose seconds do not compare (a `MACHINE_KEYS` value differs) unless `allow_mixed`."""
    if allow_mixed:
        return
    first_name, first = sources[0]
    for name, m in sources[1:]:
        for key in MACHINE_KEYS:
            if m.get(key) != first.get(key):
                raise ValueError(
                    f"{what}: results come from different machines or settings ({key}: {first.get(key)!r} in "
                    f"{first_name}, {m.get(key)!r} in {name}); their seconds do not compare (--allow-mixed combines "
                    "them anyway, each cell labelled with its own machine)"
                )


def merge(sources: list[str | Path], out: str | Path, *, allow_mixed: bool = False) -> dict[str, Any]:
    """Combine earlier results (directories holding time_to_bayes.json, or the JSON files) into one table and plot
    in a new `out`, under its lock; each cell keeps its own machine. Refused: no sources, a source given twice, an
    `out` that is a source or already holds results, two sources with one setting, and (unless `allow_mixed`)
    sources whose machine, torch, threads or jobs differ. Returns the merged results dict."""
    if not sources:
        raise ValueError("merge: nothing to merge")
    out = Path(out)
    paths: list[Path] = []
    for src in sources:
        p = Path(src) / RESULTS if Path(src).is_dir() else Path(src)
        if not p.is_file():
            raise ValueError(f"merge: no {RESULTS} at {str(src)!r}")
        if p.resolve() in [q.resolve() for q in paths]:
            raise ValueError(f"merge: {str(src)!r} is given twice")
        paths.append(p)
    if (out / RESULTS).resolve() in [p.resolve() for p in paths]:
        raise ValueError(f"merge: --out {str(out)!r} is one of the sources; merge into a new directory")
    if (out / RESULTS).exists():
        raise ValueError(f"merge: --out {str(out)!r} already holds time-to-Bayes results; merge into a new directory")
    loaded = [(str(src), read_results(p)) for src, p in zip(sources, paths, strict=True)]
    _check_machines([(name, d["machine"]) for name, d in loaded], allow_mixed, "merge")
    cells: list[dict[str, Any]] = []
    origin: dict[str, str] = {}
    for name, d in loaded:
        for c in d["cells"]:
            if "key" in c and origin.setdefault(c["key"], name) != name:
                raise ValueError(f"merge: the cell {c['label']!r} is in both {origin[c['key']]} and {name}")
            cells.append({**c, "machine": c.get("machine", d["machine"])})
    if not cells:
        raise ValueError("merge: nothing to merge")
    first = loaded[0][1]["machine"]
    data = {
        "machine": first,
        "wall_s": round(sum(float(d.get("wall_s", 0.0)) for _, d in loaded), 1),
        "cells": cells,
        "merged_from": [os.path.relpath(s, out) for s in sources],  # relative to out: the results move with it
    }
    with holding(out):
        manifest.refuse_other_kind(out, KIND)
        _write(data, out)
    return data


def parse_cell(text: str) -> Cell:
    """`task=bijection,arch=transformer,recipe=wsd,steps=3000` (plus batch_size, lr, seeds, ...; `set.KEY=V` for
    extra overrides) -> Cell; values read as `--set` values are. ValueError names a bad field or a key given twice."""
    fields: dict[str, Any] = {"set": {}}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--cell: expected key=value, got {item!r}")
        where, name = (fields["set"], key[4:]) if key.startswith("set.") else (fields, key)
        if name in where:
            raise ValueError(f"--cell {text!r}: {key} is given twice")
        where[name] = parse_value(value.strip())
    try:
        return Cell.model_validate(fields)
    except ValidationError as err:
        raise ValueError(f"--cell {text!r}: {error_message(err, model=Cell)}") from None
