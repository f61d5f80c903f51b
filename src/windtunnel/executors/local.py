"""The embedded executor: jobs in this process (`jobs=1`) or in a pool of local worker processes. Needs nothing but
the package; `make demo` uses it."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from windtunnel.executors.base import Job, OnResult, run_job


class LocalExecutor:
    """`jobs` runs at once on this machine: inline for one, else a `ProcessPoolExecutor` of `jobs` processes."""

    name = "local"

    def __init__(self, jobs: int = 1) -> None:
        if jobs < 1:
            raise ValueError(f"jobs: must be >= 1 (got {jobs})")
        self.jobs = jobs

    def run(self, jobs: Sequence[Job], on_result: OnResult | None = None) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = []

        def done(result: dict[str, Any]) -> None:
            results.append(result)
            if on_result is not None:
                on_result(result)

        if self.jobs == 1 or len(jobs) <= 1:
            for job in jobs:
                done(run_job(job))
            return results
        pool = ProcessPoolExecutor(max_workers=min(self.jobs, len(jobs)))
        failures: list[BaseException] = []
        try:
            for future in as_completed([pool.submit(run_job, job) for job in jobs]):
                try:
                    done(future.result())
                except Exception as err:  # noqa: BLE001 - the other runs go on; the first error is raised below
                    failures.append(err)
        except BaseException:  # Ctrl-C, or the pool broke: stop every run now (each resumes from its checkpoint)
            stop_workers(pool)
            raise
        pool.shutdown()
        if failures:
            raise failures[0]
        return results


def stop_workers(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the worker processes at once. `shutdown(wait=True)` would instead wait
    for every queued run to train to its end; a killed run's directory stays resumable (its lock dies with it)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())  # no public API before Python 3.14
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
