"""The one launcher of every driver (`reproduce`, `sweep`, `time-to-bayes`): claim --out -> launch -> summarise.

    launcher = launch(out, options, KIND)  # threads per run and the executor, checked before anything is created
    with launcher:  # --out: never a run directory, writable, locked for the driver's life, not another driver's
        ...  # the driver's own checks of what --out holds (`launcher.found`: its manifest; a tier, a grid)
        launcher.claim(wanted, echo, fresh=fresh)  # its run directories checked, the manifest written at once
        results = launcher.execute(jobs, "12 runs, tier quick", echo)  # storage token, first line, runs, progress
        launcher.record(names)  # the finished runs join the manifest
        ...  # the driver summarises: its table or report, with `launcher.machine()` and `launcher.wall_s()`

`ExecutorOptions` are the options every driver takes for where and how its runs execute, as its CLI command's
`--executor`, `--jobs`, `--threads`, `--ray-address`, `--max-retries` and `--progress` give them.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from windtunnel.config import RunConfig
from windtunnel.executors.base import Executor, Job, write_storage_token
from windtunnel.executors.driver import execute
from windtunnel.executors.local import LocalExecutor
from windtunnel.executors.ray_cluster import DEFAULT_RETRIES, RayExecutor
from windtunnel.machine import machine_description
from windtunnel.store import manifest
from windtunnel.store.lock import DirLock
from windtunnel.store.records.drivers import ManifestEntry, ManifestRecord
from windtunnel.store.rundir import check_writable

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class ExecutorOptions:
    """Where a driver's runs execute: `executor` "local" (`jobs` processes at once) or "ray" (the cluster at
    `ray_address`, each run retried at most `max_retries` times, default 3); `threads` CPU threads per run (None: the
    cores split between the jobs locally, 1 on Ray); `progress`: live progress on stderr."""

    executor: str = "local"
    jobs: int = 1
    threads: int | None = None
    ray_address: str | None = None
    max_retries: int | None = None
    progress: bool = False


def default_threads(jobs: int = 1) -> int:
    """CPU threads per run when none are given: this machine's cores split between `jobs` runs at once."""
    return max(1, (os.cpu_count() or 1) // max(1, jobs))


def threads_per_run(executor: str, jobs: int, threads: int | None) -> int:
    """CPU threads per run: `threads` when given (>= 1), else this machine's cores split between `jobs` local
    runs, else 1 on Ray (whose nodes get as many runs as they have CPUs)."""
    if threads is not None and threads < 1:
        raise ValueError(f"--threads: must be >= 1 (got {threads})")
    return threads or (default_threads(jobs) if executor == "local" else 1)


def placement(runner: Executor, jobs: int) -> str:
    """How runs are placed, for a command's first line: "2 job(s)" locally, "Ray" on a cluster."""
    return f"{jobs} job(s)" if runner.name == "local" else "Ray"


def make_executor(name: str, jobs: int = 1, ray_address: str | None = None, max_retries: int | None = None) -> Executor:
    """The executor called `name` ("local" with `jobs` processes, or "ray" on the cluster at `ray_address`)."""
    if name == "local":
        if ray_address is not None or max_retries is not None:
            raise ValueError("--ray-address, --max-retries: only with --executor ray")
        return LocalExecutor(jobs)
    if name == "ray":
        if jobs != 1:
            raise ValueError("--jobs: only with --executor local (Ray places runs by the cluster's resources)")
        return RayExecutor(ray_address, DEFAULT_RETRIES if max_retries is None else max_retries)
    raise ValueError(f"--executor: must be one of {', '.join(EXECUTORS)} (got {name!r})")


def refuse_unowned_outputs(out: Path, kind: str, found: ManifestRecord | None, outputs: Sequence[str]) -> None:
    """A FileExistsError where `out`, owned by no driver (`found` None), already holds one of `outputs`, the files a
    driver of `kind` writes there: someone's own file, refused rather than replaced."""
    if found is not None:
        return
    for name in outputs:
        if os.path.lexists(out / name):
            raise FileExistsError(
                f"--out: {str(out / name)!r} is already there and no {kind} owns {str(out)!r} (no manifest.json); "
                "use another --out"
            )


@contextlib.contextmanager
def holding(out: Path) -> Iterator[None]:
    """`out` as a driver's output directory, for the life of the block: never a run directory itself (nor inside
    one), writable, and locked (one driver per --out; each run also locks itself)."""
    manifest.refuse_run_directory(out)
    check_writable(out)
    with DirLock(out, "output directory"):
        yield


class Launch:
    """One driver's runs into `out`, on the executor `options` choose (see `launch`). Its threads per run and its
    executor are fixed, and checked, when it is made; `with` it, --out is held (`holding`) and, for a driver of
    `kind`, refused where another driver owns it (`found`: what says who does); then `claim` and `record` keep its
    manifest."""

    def __init__(
        self, out: str | Path, options: ExecutorOptions, kind: str | None = None, outputs: Sequence[str] = ()
    ) -> None:
        self.out = Path(out)
        self.options = options
        self.kind = kind
        self.outputs = tuple(outputs)  # what the driver writes into --out: never replaced in one it does not own
        self.found: ManifestRecord | None = None  # --out's manifest (an older --out's upgraded) when it was held
        self._claimed: list[ManifestEntry] = []  # the earlier runs the manifest kept when --out was claimed
        self._fields: dict[str, Any] = {}  # the manifest's own fields (a reproduce's tier)
        self.threads = threads_per_run(options.executor, options.jobs, options.threads)
        self.executor = make_executor(
            options.executor, jobs=options.jobs, ray_address=options.ray_address, max_retries=options.max_retries
        )
        self.started: float | None = None  # the first `execute`: a driver's second pass (more seeds) adds to its wall
        self._machine: dict[str, Any] | None = None
        self._held: contextlib.AbstractContextManager[None] | None = None

    def __enter__(self) -> Launch:
        held = holding(self.out)
        held.__enter__()
        self._held = held
        if self.kind is not None:
            try:
                self.found = manifest.refuse_other_kind(self.out, self.kind)
                refuse_unowned_outputs(self.out, self.kind, self.found, self.outputs)
            except BaseException as err:
                self.__exit__(type(err), err, err.__traceback__)
                raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.__exit__(exc_type, exc, tb)

    def claim(
        self,
        wanted: Mapping[str, RunConfig],
        echo: Callable[[str], None],
        *,
        fresh: bool = False,
        needs: Sequence[str] = (),
        **fields: Any,
    ) -> manifest.Plan:
        """Make --out this driver's, inside `with` and after the driver's own checks: every run directory it is about
        to skip, resume or create checked against the config it asks for (`claim_runs`), then the manifest written at
        once, its earlier entries that still exist kept, with `fields` (a reproduce's tier). Returns the plan: what is
        reused, resumed, trained and set aside, and the manifest entries kept."""
        kind = self._driver_kind()
        plan = self.claim_runs(wanted, echo, fresh=fresh, needs=needs)
        kept = manifest.accumulate(self.out, self.found.runs if self.found is not None else [], {})
        self._claimed = [ManifestEntry(name=n, config_hash=h) for n, h in kept.items()]
        self._fields = fields
        manifest.write_manifest(self.out, kind, kept, **fields)
        return replace(plan, kept=tuple(self._claimed))

    def claim_runs(
        self,
        wanted: Mapping[str, RunConfig],
        echo: Callable[[str], None],
        *,
        fresh: bool = False,
        needs: Sequence[str] = (),
    ) -> manifest.Plan:
        """Check the run directories `out/runs/<name>` of `wanted` against their configs, all before any work
        (`manifest.claim_runs`: a mismatch is an error, or with `fresh` set aside, each echoed); returns the plan
        (a finished run is reused only with every file in `needs`)."""
        plan = manifest.claim_runs(self.out, wanted, fresh, needs)
        for moved in plan.set_aside:
            echo(f"  set aside (not the run asked for) -> {moved}")
        return plan

    def finished(self, names: Sequence[str]) -> list[str]:
        """The finished runs among `names`, in order (`manifest.finished_runs`)."""
        return list(manifest.finished_runs(self.out, list(names)))

    def record(self, names: Sequence[str], *, keep: bool = True) -> None:
        """Write the manifest of the finished runs among `names` (`manifest.finished_runs`), after the entries kept
        when --out was claimed (`keep`; without it, `names`' finished runs alone: a sweep lists its own points)."""
        kind = self._driver_kind()
        finished = manifest.finished_runs(self.out, list(names))
        runs = manifest.accumulate(self.out, self._claimed, finished) if keep else finished
        manifest.write_manifest(self.out, kind, runs, **self._fields)

    def _driver_kind(self) -> str:
        """The driver's kind, where --out is held as that driver's (a manifest is written only so)."""
        if self.kind is None or self._held is None:
            raise RuntimeError("a driver claims and records --out inside `with launch(out, options, kind)`")
        return self.kind

    def machine(self) -> dict[str, Any]:
        """The machine record (`machine.machine_description`) the driver's results carry, read once."""
        if self._machine is None:
            self._machine = machine_description()
        return self._machine

    def wall_s(self) -> float:
        """Seconds since the runs started (the first `execute`), to 0.1 s; 0 before any."""
        return 0.0 if self.started is None else round(time.time() - self.started, 1)

    def execute(self, jobs: Sequence[Job], what: str, echo: Callable[[str], None]) -> list[dict[str, Any]]:
        """Run `jobs` (each given this launch's threads per run and a fresh storage token under --out, which every
        node checks before it trains), longest first, with live progress if the options ask for it; first echo
        "`what`, 2 job(s) x 1 thread(s) -> OUT". Returns the results in the jobs' order (`driver.execute`)."""
        storage = write_storage_token(self.out)
        jobs = [replace(job, threads=self.threads, storage=storage) for job in jobs]
        echo(f"{what}, {placement(self.executor, self.options.jobs)} x {self.threads} thread(s) -> {self.out}")
        if self.started is None:
            self.started = time.time()
        return execute(jobs, self.executor, echo, progress=self.options.progress)


def launch(out: str | Path, options: ExecutorOptions, kind: str | None = None, outputs: Sequence[str] = ()) -> Launch:
    """A driver's launch of its runs into `out` (the module's docstring shows its use): threads per run and the
    executor from `options`, checked now; then, `with` it, --out checked, locked and (for a driver of `kind`) not
    another driver's, nor holding its `outputs` while no driver owns it, `claim` and `record` for its manifest,
    `execute` for the runs, and the machine record for the driver's summary."""
    return Launch(out, options, kind, outputs)


__all__ = [
    "EXECUTORS",
    "ExecutorOptions",
    "Launch",
    "default_threads",
    "holding",
    "launch",
    "make_executor",
    "placement",
    "refuse_unowned_outputs",
    "threads_per_run",
]
