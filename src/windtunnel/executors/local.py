"""The embedded executor: jobs in this process (`jobs=1`) or in a pool of local worker processes. Needs nothing but
the package; `make demo` uses it.

The driver owns its workers: each worker dies with the driver however the driver ends (`watch_parent`), so no
worker outlives it holding a run's lock or the caller's stdout/stderr pipe.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
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
        pool = ProcessPoolExecutor(
            max_workers=min(self.jobs, len(jobs)), initializer=watch_parent, initargs=(os.getpid(),)
        )
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


PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent ends


def watch_parent(parent: int, poll_s: float = 1.0) -> None:
    """Pool-worker initializer: die with the driver `parent`. On Linux the kernel sends SIGKILL when the parent ends
    (PR_SET_PDEATHSIG; the parent is checked right after, in case it ended first); elsewhere a daemon thread polls
    the parent's pid. SIGTERM gets its default action back, so `stop_workers` ends a worker mid-run."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the driver's SIGTERM -> KeyboardInterrupt, if inherited
    if sys.platform.startswith("linux") and _set_parent_death_signal(signal.SIGKILL):
        if os.getppid() != parent:
            os._exit(1)
        return

    def poll() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(target=poll, name="windtunnel-parent-watch", daemon=True).start()


def _set_parent_death_signal(sig: int) -> bool:
    """prctl(PR_SET_PDEATHSIG, sig) through libc; False where it is not available."""
    with contextlib.suppress(OSError, AttributeError, TypeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0
    return False


def stop_workers(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the worker processes at once. `shutdown(wait=True)` would instead wait
    for every queued run to train to its end; a killed run's directory stays resumable (its lock dies with it)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())  # no public API before Python 3.14
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
