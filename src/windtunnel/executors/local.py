"""The embedded executor: jobs in this process (`jobs=1`) or in a pool of local worker processes. Needs nothing but
the package; `make demo` uses it.

The driver owns its workers: each worker dies with the driver however the driver ends (`watch_parent`), so no
worker outlives it holding a run's lock or the caller's stdout/stderr pipe. Interrupted (Ctrl-C, SIGTERM), the driver
stops each worker with one SIGTERM (`stop_workers`): the run it trains writes a checkpoint at its current step, as
`windtunnel train` does, and the worker starts nothing more. Workers ignore SIGINT: a terminal's Ctrl-C reaches the
whole process group, and each run is to get the driver's one signal, not two (a second one stops training at once).
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
                done(run_job(job, handle_signals=True))
            return results
        pool = ProcessPoolExecutor(
            max_workers=min(self.jobs, len(jobs)), initializer=watch_parent, initargs=(os.getpid(),)
        )
        failures: list[BaseException] = []
        try:
            for future in as_completed([pool.submit(run_in_worker, job) for job in jobs]):
                try:
                    done(future.result())
                except Exception as err:  # noqa: BLE001 - the other runs go on; the first error is raised below
                    failures.append(err)
        except BaseException:  # Ctrl-C, or the pool broke: stop every run now (each checkpoints its step)
            stop_workers(pool)
            raise
        pool.shutdown()
        if failures:
            raise failures[0]
        return results


PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent ends
STOP_GRACE_S = 120.0  # how long `stop_workers` lets a worker finish its step and checkpoint before it kills it


class _WorkerState:
    """A pool worker's own: whether a job is running, and whether the driver has asked it to stop."""

    in_job = False
    stopping = False


def _stop_worker(signum: int, frame: object) -> None:
    """A worker's SIGTERM outside training (training installs its own handler): between jobs it exits; inside one
    (evaluating, probing) the job ends with KeyboardInterrupt. Either way the worker starts no further job."""
    _WorkerState.stopping = True
    if not _WorkerState.in_job:
        raise SystemExit(128 + signum)
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def run_in_worker(job: Job) -> dict[str, Any]:
    """`run_job` in a pool worker, stoppable by the driver's SIGTERM: a run in training checkpoints its current step
    (TrainingInterrupted); a job already queued when the stop came is not started."""
    if _WorkerState.stopping:
        raise KeyboardInterrupt("the driver stopped its workers")
    _WorkerState.in_job = True
    try:
        return run_job(job, handle_signals=(signal.SIGTERM,))
    except KeyboardInterrupt:
        _WorkerState.stopping = True
        raise
    finally:
        _WorkerState.in_job = False


def watch_parent(parent: int, poll_s: float = 1.0) -> None:
    """Pool-worker initializer: die with the driver `parent`. On Linux the kernel sends SIGKILL when the parent ends
    (PR_SET_PDEATHSIG; the parent is checked right after, in case it ended first); elsewhere a daemon thread polls
    the parent's pid. The worker ignores SIGINT (a terminal's Ctrl-C is the driver's to pass on) and takes SIGTERM as
    the driver's request to stop (`_stop_worker`; not the driver's SIGTERM -> KeyboardInterrupt, if inherited)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop_worker)
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


def stop_workers(pool: ProcessPoolExecutor, grace_s: float = STOP_GRACE_S) -> None:
    """Cancel what has not started and stop the worker processes now: one SIGTERM each (a run in training writes a
    checkpoint at its current step), then up to `grace_s` seconds for them to end, then SIGKILL for any left, or at
    once on a second Ctrl-C. `shutdown(wait=True)` would instead wait for every queued run to train to its end; a
    killed run's directory stays resumable from its last checkpoint (its lock dies with it)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())  # no public API before Python 3.14
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    deadline = time.monotonic() + grace_s
    try:
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
