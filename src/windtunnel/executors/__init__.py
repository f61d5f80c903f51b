"""Executors: where a suite's or a sweep's runs execute, behind one small interface (`Executor.run(jobs)`).

    local   this machine: inline, or a pool of worker processes (the embedded default; needs nothing more)
    ray     a Ray cluster: one Ray task per run, retried after a fault and resumed from its checkpoint

Every executor runs the same `run_job`, so a run's numbers do not depend on where it ran (same seeds and threads,
same eval.json).
"""

from __future__ import annotations

import os

from windtunnel.executors.base import STORAGE_TOKEN, Executor, Job, check_storage, run_job, write_storage_token
from windtunnel.executors.local import LocalExecutor

EXECUTORS = ("local", "ray")


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
        from windtunnel.executors.ray_cluster import DEFAULT_RETRIES, RayExecutor

        return RayExecutor(ray_address, DEFAULT_RETRIES if max_retries is None else max_retries)
    raise ValueError(f"--executor: must be one of {', '.join(EXECUTORS)} (got {name!r})")


__all__ = [
    "EXECUTORS",
    "STORAGE_TOKEN",
    "Executor",
    "Job",
    "LocalExecutor",
    "check_storage",
    "default_threads",
    "make_executor",
    "placement",
    "run_job",
    "threads_per_run",
    "write_storage_token",
]
