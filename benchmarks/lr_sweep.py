"""The fair protocol's learning-rate sweep: for every (task, architecture) of a tier, `windtunnel sweep` over
`suites.paper.LR_GRID` at the tier's budget (the same steps x batch for every architecture of a task), one seed per
point, picked on the validation stream (the sweep's ★); a pick on an edge of the grid sweeps one doubling further
that way, up to `LR_EDGE_STEPS` times (`extend_grid`), in the same --out (the finished points are read, not trained
again). Each cell's base config is written beside its sweep, so the `Command:` line of its sweep.md re-runs it.

    python benchmarks/lr_sweep.py --tier quick --out runs/lr-sweep-quick               # every cell, 2 at a time
    python benchmarks/lr_sweep.py --tier quick --out runs/lr-sweep-quick --picks       # the LR_PICKS the sweeps made
    python benchmarks/lr_sweep.py --tier standard --tasks hmm --out runs/lr-sweep-hmm  # one task's cells only

Evaluation on the test stream is cut to 100 sequences with no length-generalisation settings (the pick never reads
it); training, validation and everything the pick reads are the tier's own.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

import yaml

from windtunnel.executors import ExecutorOptions
from windtunnel.models.baselines import BASELINES
from windtunnel.report.sweep_table import TABLE_JSON
from windtunnel.store.records.drivers import SweepConfigRecord
from windtunnel.suites.paper import ARCHS, LR_GRID, TASKS, budget, extend_grid, run_config
from windtunnel.sweep import sweep

SWEEP_EVAL = {"n": 100, "overrides": []}


def base_config(task: str, arch: str, tier: str) -> dict:
    """The tier's config of (task, arch), seed 0, with the cheap test evaluation and no probe checkpoints, and without
    the tier's picked learning rate (the grid sets it): a cell's base does not change when its sweep's pick is
    applied, so the same command re-runs into its --out."""
    cfg = run_config(task, arch, tier, seed=0)
    cfg["train"].pop("checkpoint_schedule", None)
    cfg["train"].pop("lr", None)
    cfg["eval"] = dict(SWEEP_EVAL)
    return cfg


def run_cell(cell_key: tuple[str, str], tier: str, out: Path) -> dict:
    """One cell's sweep over the learning-rate grid (one process, one thread per run)."""
    task, arch = cell_key
    cell = out / f"{task}-{arch}"
    cell.mkdir(parents=True, exist_ok=True)
    base = cell / "base.yaml"
    base.write_text(yaml.safe_dump(base_config(task, arch, tier), sort_keys=False))
    grid: list[float] | None = _start_grid(cell)
    wall = 0.0
    while grid is not None:
        result = sweep(base, {"train.lr": grid}, cell, ExecutorOptions(jobs=1, threads=1))
        wall += result["total_wall_s"]
        grid = extend_grid(grid, _best(result))
    return {**result, "total_wall_s": wall}  # the table of the widest grid, the wall of every call


def _start_grid(cell: Path) -> list[float]:
    """`LR_GRID`, or the wider grid an earlier call on this cell widened it to (its points are read, not trained
    again, and stay in the table)."""
    done = SweepConfigRecord.find(cell)
    grid = [float(v) for v in done.grid.get("train.lr", [])] if done is not None else []
    return grid if set(LR_GRID) <= set(grid) else list(LR_GRID)


def _best(table: dict) -> float | None:
    """The learning rate of a sweep table's ★ setting (None: no setting finished)."""
    best = [s["values"]["train.lr"] for s in table["settings"] if s["best"]]
    return best[0] if best else None


def picks(out: Path) -> dict[tuple[str, str], float]:
    """(task, arch) -> the learning rate of its sweep's ★ row."""
    found = {}
    for task in TASKS:
        for arch in ARCHS:
            path = out / f"{task}-{arch}" / TABLE_JSON
            if not path.is_file():
                continue
            best = _best(json.loads(path.read_text()))
            if best is not None:
                found[(task, arch)] = best
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tier", default="quick", choices=("quick", "standard"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=2, help="cells swept at once (each one run at a time)")
    parser.add_argument("--picks", action="store_true", help="print the picks of finished sweeps and stop")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS), help="sweep these tasks' cells only")
    trained = [a for a in ARCHS if a not in BASELINES]
    parser.add_argument("--archs", nargs="+", choices=trained, default=trained, help="and these architectures' only")
    args = parser.parse_args()
    if args.picks:
        for (task, arch), lr in picks(args.out).items():
            print(f'    ("{task}", "{arch}"): {lr!r},')
        return
    cells = [(t, a) for t in args.tasks for a in args.archs]
    steps = {t: budget(t, args.tier)[0] for t in TASKS}
    cells.sort(key=lambda c: -steps[c[0]])
    work = partial(run_cell, tier=args.tier, out=args.out)
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        for (task, arch), result in zip(cells, pool.map(work, cells), strict=True):
            print(f"{task}/{arch}: {result['total_wall_s']:.0f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
