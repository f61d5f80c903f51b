"""The driver's side of every executor: order jobs longest first, watch them with live progress, report each finished
run as it arrives. `reproduce`, `sweep` and `time-to-bayes` all run their jobs through `execute`."""

from __future__ import annotations

import contextlib
import functools
import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

from windtunnel import tasks
from windtunnel.evaluation.metric_specs import headline_metric
from windtunnel.executors.base import Executor, Job
from windtunnel.models.common import count_params
from windtunnel.models.presets import preset
from windtunnel.models.registry import info, is_baseline, resolve
from windtunnel.progress import Progress, Tracked


def config_cost(cfg: dict[str, Any]) -> float:
    """Training tokens x parameters of a raw run config, weighted by the architecture's relative cost
    (`models.info(arch).cost`; 0 for baselines): orders runs so the longest start first, and weights the suite's ETA.
    Seeds of one cell cost the same (computed once)."""
    model, train, task = cfg.get("model", {}), cfg.get("train", {}), cfg.get("task", {})
    return _cost(json.dumps({"model": model, "train": train, "task": task}, sort_keys=True))


@functools.lru_cache(maxsize=1024)
def _cost(key: str) -> float:
    cfg = json.loads(key)
    model, train = cfg.get("model", {}), cfg.get("train", {})
    arch = model.get("arch", "transformer")
    if is_baseline(arch) or not train.get("steps"):
        return 0.0
    task = cfg.get("task", {})
    spec = tasks.make(task.get("name", "bijection"), **task.get("params", {})).spec
    base = preset(task.get("name", "bijection"), arch, model["preset"], spec) if model.get("preset") else None
    n_params = count_params(resolve(arch), spec, base, **model.get("size", {}))
    return train["steps"] * train.get("batch_size", 64) * spec.seq_len * n_params * info(arch).cost


def headline(cfg: dict[str, Any]) -> str:
    """The validation number progress shows for a run: its task's headline metric (`metric_specs.headline_metric`)."""
    return headline_metric(cfg.get("task", {}).get("name", "bijection"))


def finished_line(result: dict[str, Any]) -> str:
    """`name: finished in 12.3 s` (or `skipped (done)`, or `resumed from step 400`)."""
    if result.get("skipped"):
        return f"  {result['name']}: skipped (done)"
    resumed = f" (resumed from step {result['resumed_from']})" if result.get("resumed_from") else ""
    return f"  {result['name']}: finished in {result.get('wall_s', '?')} s{resumed}"


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While a driver runs its jobs, SIGTERM (`kill`, a CI timeout) takes Ctrl-C's path: KeyboardInterrupt, so the
    executor stops its workers, what finished stays, the driver writes what it can and releases its locks. Only the
    main thread can set a handler; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def execute(
    jobs: Sequence[Job],
    executor: Executor,
    echo: Callable[[str], None] = lambda _: None,
    progress: bool = True,
    stream: TextIO | None = None,
) -> list[dict[str, Any]]:
    """Run `jobs` on `executor`, longest first; with `progress`, live progress on `stream` (default stderr; none where
    stderr is closed) from the first second, and each finished run's line above it, else each line to `echo`;
    returns the results in the jobs' order."""
    costs = {job.name: config_cost(job.config) for job in jobs}
    ordered = sorted(jobs, key=lambda j: costs[j.name], reverse=True)  # parallel runs finish close together
    if stream is None and sys.stderr is None:  # stderr closed (2>&-): each finished run's line goes to `echo`
        progress = False
    with sigterm_as_interrupt():
        if not progress:
            results = executor.run(ordered, lambda r: echo(finished_line(r)))
        else:
            tracked = [Tracked(j.name, j.run_dir, j.steps, costs[j.name] or 1e-9, headline(j.config)) for j in ordered]
            with Progress(tracked, stream=stream, title=f"{len(jobs)} runs on {executor.name}") as bar:
                results = executor.run(ordered, lambda r: bar.log(finished_line(r)))
    by_name = {r["name"]: r for r in results}
    return [by_name[j.name] for j in jobs if j.name in by_name]


__all__ = ["config_cost", "execute", "finished_line", "headline", "sigterm_as_interrupt"]
