"""Time-to-Bayes: how long until a model is Bayes-exact? Wall-clock training seconds and steps to each precision mark.

A cell is (task, architecture, recipe, budget); each seed of a cell is one training run with frequent cheap
evaluation on the validation stream (never the test stream). From its `metrics.jsonl` the benchmark reads the first
evaluation at which the headline metric reaches each mark:

    entropy error  0.1, 0.05, 0.02, 0.01 bits     (recall: accuracy 90%, 99%, 100%)
    HMM, also      "exact filter": the model's belief horizon covers every window filter (`crossings.crossings`)

Times are *training* seconds (`train_s`: optimiser steps only, no evaluation or checkpoints), with the machine,
threads and dtype recorded. Results: `time_to_bayes.json`, `time_to_bayes.md` and a log-log plot of error against
training seconds per cell (`time_to_bayes.png`; the table and plot: `report.time_to_bayes`). Run with
`windtunnel time-to-bayes` or `benchmarks/bench_time_to_bayes.py`.

A run is named `<task>-<arch>-<recipe>-<steps>x<batch>-lr<lr>-s<seed>-<hash>`, the hash that of its resolved config
(`manifest.config_hash`), so two cells that differ in anything are two runs; labels are read from the resolved config.
A recipe here sets only the optimiser, schedule and curriculum (`recipes.TRAINING_KEYS`). The driver holds --out's
lock, reuses a run only when its stored config is the one asked for (the launcher's claim, `executors.Launch.claim`),
and accumulates: a new cell joins the cells already in `time_to_bayes.json` (the same setting replaces its earlier
result), provided the machine, torch, threads and jobs match (`records.drivers.MACHINE_KEYS`; `allow_mixed` labels
each cell with its own machine).

The package: `cells` (the cell spec, `parse_cell`, each seed's run config, run names and labels), `results`
(reading and summarising finished seeds, merging, and writing `time_to_bayes.json` through its record,
`records.drivers.TimeToBayesRecord`) and `driver` (`run`).
"""

from __future__ import annotations

from windtunnel.evaluation.crossings import summarize_marks
from windtunnel.time_to_bayes.cells import Cell, SeedRun, cell_config, cell_label, cell_runs, parse_cell, run_name
from windtunnel.time_to_bayes.driver import _plan, _run_locked, run
from windtunnel.time_to_bayes.results import (
    KIND,
    RESULTS,
    _accumulate,
    _check_machines,
    _same_cell,
    _write,
    merge,
    read_results,
    read_seed,
    summarize_cell,
)

__all__ = [
    "KIND",
    "RESULTS",
    "Cell",
    "SeedRun",
    "_accumulate",
    "_check_machines",
    "_plan",
    "_run_locked",
    "_same_cell",
    "_write",
    "cell_config",
    "cell_label",
    "cell_runs",
    "merge",
    "parse_cell",
    "read_results",
    "read_seed",
    "run",
    "run_name",
    "summarize_cell",
    "summarize_marks",
]
