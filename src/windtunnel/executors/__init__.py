"""Executors: where a suite's or a sweep's runs execute, behind one small interface (`Executor.run(jobs)`).

    local   this machine: inline, or a pool of worker processes (the embedded default; needs nothing more)
    ray     a Ray cluster: one Ray task per run, retried after a fault and resumed from its checkpoint

Every executor runs the same `run_job`, so a run's numbers do not depend on where it ran (same seeds and threads,
same eval.json). Every driver launches its runs through `launch` (executors/launch.py), with `ExecutorOptions`.
"""

from __future__ import annotations

from windtunnel.executors.base import STORAGE_TOKEN, Executor, Job, check_storage, run_job, write_storage_token
from windtunnel.executors.launch import (
    EXECUTORS,
    ExecutorOptions,
    Launch,
    default_threads,
    holding,
    launch,
    make_executor,
    placement,
    refuse_unowned_outputs,
    threads_per_run,
)
from windtunnel.executors.local import LocalExecutor

__all__ = [
    "EXECUTORS",
    "STORAGE_TOKEN",
    "Executor",
    "ExecutorOptions",
    "Job",
    "Launch",
    "LocalExecutor",
    "check_storage",
    "default_threads",
    "holding",
    "launch",
    "make_executor",
    "placement",
    "refuse_unowned_outputs",
    "run_job",
    "threads_per_run",
    "write_storage_token",
]
