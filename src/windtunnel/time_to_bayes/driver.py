"""The time-to-Bayes driver: every seed of every cell planned and checked before anything is made, trained on the
executor under --out's lock (a finished seed read back), and the results accumulated and written (`run`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from windtunnel.executors import ExecutorOptions, Job, Launch, launch
from windtunnel.store import manifest, rundir
from windtunnel.store.records.drivers import TimeToBayesRecord
from windtunnel.time_to_bayes.cells import Cell, SeedRun, cell_runs
from windtunnel.time_to_bayes.results import (
    KIND,
    OUTPUTS,
    _accumulate,
    _check_machines,
    _write,
    read_seed,
    summarize_cell,
)


def _plan(cells: list[Cell]) -> list[tuple[Cell, list[SeedRun]]]:
    """Every cell's seeds, validated before anything is created; two cells that are one setting are refused."""
    planned = []
    for i, c in enumerate(cells, 1):
        try:
            planned.append((c, cell_runs(c)))
        except ValueError as err:
            if len(cells) == 1:
                raise
            what = f"{c.task}/{c.arch}/{c.recipe_name}, {c.steps} steps"  # which of the cells given
            raise ValueError(f"--cell {i} ({what}): {str(err).removeprefix('--cell ')}") from None
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
    launcher = launch(out, options, KIND, OUTPUTS)
    planned = _plan(cells)  # fail on a bad cell, recipe or config before any training or any directory is made
    threads, runner = launcher.threads, launcher.executor
    machine = {**launcher.machine(), "threads_per_run": threads, "jobs": options.jobs, "executor": runner.name}
    with launcher:  # one driver per --out, never another driver's
        previous = TimeToBayesRecord.find(out)
        if previous is not None:
            _check_machines(
                [(f"the results already in {out}", previous.machine), ("this call", machine)], allow_mixed, "--out"
            )
        needs = (rundir.GEOMETRY,) if probe else ()  # a finished run without its probes is probed
        plan = launcher.claim({r.name: r.resolved for _, runs in planned for r in runs}, echo, fresh=fresh, needs=needs)
        return _run_locked(planned, plan, launcher, machine, previous, echo, probe)


def _run_locked(
    planned: list[tuple[Cell, list[SeedRun]]],
    plan: manifest.Plan,
    launcher: Launch,
    machine: dict[str, Any],
    previous: TimeToBayesRecord | None,
    echo: Any,
    probe: bool = False,
) -> dict[str, Any]:
    out = launcher.out
    runs_dir = out / manifest.RUNS
    work = [Job(r.name, r.config, str(runs_dir), probe=probe) for _, rs in planned for r in rs]
    todo = [j for j in work if j.name in plan.todo]
    launcher.execute(todo, f"time-to-Bayes: {len(planned)} cell(s), {len(work)} run(s)", echo)
    cells = [summarize_cell(c, rs, [read_seed(r, out, launcher.threads) for r in rs], machine) for c, rs in planned]
    data = _accumulate(previous, cells, machine, launcher.wall_s())
    launcher.record([j.name for j in work])
    echo(_write(data, out))
    return data.to_json()
