"""The results of time-to-Bayes: a finished seed read back (`read_seed`), a cell's seeds summarised
(`summarize_cell`), `time_to_bayes.json` read and checked (`read_results`: its record,
`records.drivers.TimeToBayesRecord`), a call's cells joined to those already in --out (`_accumulate`), earlier
results merged (`merge`), and the JSON, Markdown and plot written (`_write`)."""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any

from windtunnel.evaluation.crossings import crossings, summarize_marks, verdict_crossings
from windtunnel.evaluation.metric_specs import headline_metric, pool_seeds
from windtunnel.executors import holding, refuse_unowned_outputs
from windtunnel.report.time_to_bayes import markdown, plot
from windtunnel.store import manifest, rundir
from windtunnel.store.records.drivers import MACHINE_KEYS, TIME_TO_BAYES, TimeToBayesCell, TimeToBayesRecord
from windtunnel.store.records.run_dir import read_history, read_test_metrics, validation_evals
from windtunnel.time_to_bayes.cells import Cell, SeedRun, cell_label
from windtunnel.training.recipes import get_recipe

KIND = "time-to-bayes"  # the manifest kind of a time-to-bayes --out
RESULTS = TIME_TO_BAYES
OUTPUTS = (RESULTS, "time_to_bayes.md", "time_to_bayes.png")  # what `_write` writes into --out


def read_seed(run: SeedRun, out: Path, threads: int) -> dict[str, Any]:
    """One trained seed of a cell: its validation curve, the marks it crossed, its first ◐-or-better and first ✓
    validation verdict (`crossings.verdict_crossings`), and its final test numbers."""
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


def summarize_cell(
    cell: Cell, runs: list[SeedRun], seeds: list[dict[str, Any]], machine: dict[str, Any]
) -> TimeToBayesCell:
    """A cell's seeds: their marks (`summarize_marks`) and final test value (mean, min, max); `key` (the first seed's
    config hash) says which setting it is, so a later result of the same setting replaces it."""
    metric = seeds[0]["metric"]
    test = [s["test"][metric] for s in seeds if s["test"].get(metric) is not None]
    return TimeToBayesCell.model_validate(
        {
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
    )


_same_cell = TimeToBayesCell.same_setting  # whether a stored cell is the setting of a new one (by key, or request)


def _accumulate(
    previous: TimeToBayesRecord | None, cells: list[TimeToBayesCell], machine: dict[str, Any], wall_s: float
) -> TimeToBayesRecord:
    """The results already in --out with this call's cells joined: a cell of the same setting is replaced in place,
    a new one appended; each earlier cell keeps its machine."""
    if previous is None:
        return TimeToBayesRecord(machine=machine, wall_s=wall_s, cells=cells)
    merged = list(previous.cells)
    for new in cells:
        i = next((i for i, c in enumerate(merged) if c.same_setting(new)), None)
        if i is None:
            merged.append(new)
        else:
            merged[i] = new
    return previous.model_copy(update={"wall_s": round(previous.wall_s + wall_s, 1), "cells": merged})


def _write(data: TimeToBayesRecord, out: Path) -> str:
    """time_to_bayes.json, .md and .png into `out`; returns the Markdown."""
    dumped = data.to_json()
    text = markdown(dumped)
    data.write(out)
    rundir.atomic_write(out / "time_to_bayes.md", text)
    plot(dumped, out / "time_to_bayes.png")
    return text


def read_results(path: Path) -> TimeToBayesRecord:
    """A time_to_bayes.json, checked where the table and plot read it (CheckpointError naming the file and field)."""
    return TimeToBayesRecord.load(path)


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
    _check_machines([(name, d.machine) for name, d in loaded], allow_mixed, "merge")
    cells: list[TimeToBayesCell] = []
    origin: dict[str, str] = {}
    for name, d in loaded:
        for c in d.cells:  # each with its machine (an older file's cells: the file's)
            if c.key is not None and origin.setdefault(c.key, name) != name:
                raise ValueError(f"merge: the cell {c.label!r} is in both {origin[c.key]} and {name}")
            cells.append(c)
    if not cells:
        raise ValueError("merge: nothing to merge")
    data = TimeToBayesRecord(
        machine=loaded[0][1].machine,
        wall_s=round(sum(d.wall_s for _, d in loaded), 1),
        cells=cells,
        merged_from=[os.path.relpath(s, out) for s in sources],  # relative to out: the results move with it
    )
    with holding(out):
        refuse_unowned_outputs(out, KIND, manifest.refuse_other_kind(out, KIND), OUTPUTS)
        _write(data, out)
    return data.to_json()
