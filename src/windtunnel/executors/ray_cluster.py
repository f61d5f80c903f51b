"""The Ray executor: one Ray task per run, on any node of a Ray cluster (`ray[default]`, the `windtunnel[ray]` extra).

Each task asks for what its run needs -- one GPU when the cluster has GPUs and the run may use one, else `threads`
CPUs -- and runs `run_job` there: train or resume, evaluate and probe on the device it trained on, mark done. A task
whose worker process or node dies is retried (at most `max_retries` times) and resumes from the run's last
checkpoint; an error of the run itself (bad config, a diverged run, storage the node cannot see) is not retried.
Run directories live under the driver's --out, which every node must see (docs/scale-out.md).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from typing import Any

from windtunnel.executors.base import Job, OnResult, run_job

DEFAULT_RETRIES = 3


def import_ray() -> Any:
    """The `ray` module, or a ValueError saying how to install it."""
    os.environ.setdefault("RAY_DISABLE_USAGE_STATS", "1")
    try:
        import ray
    except ImportError:
        raise ValueError(
            "--executor ray: Ray is not installed; install the extra with pip install 'windtunnel[ray]'"
        ) from None
    return ray


def task_resources(job: Job, cluster_gpus: float) -> dict[str, float]:
    """Ray resources for one run: a GPU (and one CPU) on a cluster with GPUs unless the run is pinned to the CPU;
    else its CPU threads."""
    device = job.config.get("train", {}).get("device", "auto")
    if cluster_gpus > 0 and device != "cpu":
        return {"num_gpus": 1, "num_cpus": 1}
    return {"num_cpus": max(1, job.threads)}


def run_on_node(job: Job) -> dict[str, Any]:
    """`run_job` inside a Ray task; the result also names the Ray node it ran on."""
    import ray

    return {**run_job(job), "node": ray.get_runtime_context().get_node_id()}


def check_reachable(address: str | None, timeout: float = 10.0) -> None:
    """Fail in seconds, not after Ray's own minutes of retries, when nothing listens at a HOST:PORT address (None,
    "auto" and "local" are Ray's to resolve)."""
    if address is None or address in ("auto", "local"):
        return
    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--ray-address: expected auto or HOST:PORT (got {address!r})")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as err:
        raise ValueError(
            f"--ray-address: no Ray cluster answers at {address!r} ({err.strerror or err}); start one with "
            "`ray start --head` (docs/scale-out.md) or check the address"
        ) from None


class RayExecutor:
    """Runs jobs as Ray tasks on the cluster at `address` (None: `ray.init()`'s default -- RAY_ADDRESS, a cluster
    started on this machine, else a new local one; "auto": an existing cluster; "HOST:PORT": that cluster's head)."""

    name = "ray"

    def __init__(self, address: str | None = None, max_retries: int = DEFAULT_RETRIES) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries: must be >= 0 (got {max_retries})")
        self.address, self.max_retries = address, max_retries
        import_ray()  # before anything is created: Ray is installed ...
        check_reachable(address)  # ... and a cluster answers at the address given

    def run(self, jobs: Sequence[Job], on_result: OnResult | None = None) -> list[dict[str, Any]]:
        ray = import_ray()
        started = not ray.is_initialized()
        if started:
            try:
                ray.init(address=self.address, log_to_driver=False, configure_logging=False)
            except ConnectionError as err:
                raise ValueError(f"--ray-address: cannot reach a Ray cluster at {self.address!r}: {err}") from None
        try:
            return self._run(ray, jobs, on_result)
        finally:
            if started:
                ray.shutdown()

    def _run(self, ray: Any, jobs: Sequence[Job], on_result: OnResult | None) -> list[dict[str, Any]]:
        gpus = float(ray.cluster_resources().get("GPU", 0))
        remote = ray.remote(run_on_node)
        pending: dict[Any, Job] = {}
        for job in jobs:
            options = {
                **task_resources(job, gpus),
                "max_retries": self.max_retries,
                "retry_exceptions": False,
                "scheduling_strategy": "SPREAD",  # long runs go to different nodes rather than queue on one
            }
            pending[remote.options(name=job.name, **options).remote(job)] = job
        results: list[dict[str, Any]] = []
        failures: list[BaseException] = []
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                job = pending.pop(ready[0])
                try:
                    result = ray.get(ready[0])
                except ray.exceptions.RayTaskError as err:  # the run itself failed: its own exception, not Ray's
                    failures.append(err.cause if isinstance(err.cause, BaseException) else err)
                    continue
                except ray.exceptions.RayError as err:  # its worker or node died more often than max_retries
                    failures.append(
                        RuntimeError(f"{job.name}: the Ray task failed after {self.max_retries} retries: {err}")
                    )
                    continue
                results.append(result)
                if on_result is not None:
                    on_result(result)
        except BaseException:  # the driver stops (Ctrl-C): stop its runs too, so a re-run finds their locks free
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
        if failures:  # every other run went on to the end, as with the local executor
            raise failures[0]
        return results


__all__ = ["DEFAULT_RETRIES", "RayExecutor", "check_reachable", "import_ray", "run_on_node", "task_resources"]
