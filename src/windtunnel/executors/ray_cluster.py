"""The Ray executor: one Ray task per run, on any node of a Ray cluster (`ray[default]`, the `windtunnel[ray]` extra).

Each task asks for what its run needs -- one GPU when the cluster has GPUs and the run may use one, else `threads`
CPUs -- and runs `run_job` there: train or resume, evaluate and probe on the device it trained on, mark done. A task
whose worker process or node dies is retried (at most `max_retries` times) and resumes from the run's last
checkpoint; an error of the run itself (bad config, a diverged run, storage the node cannot see) is not retried.
Run directories live under the driver's --out, which every node must see (docs/scale-out.md).

Authentication: a driver connects with Ray's token settings from its environment (`RAY_AUTH_MODE=token` and
`RAY_AUTH_TOKEN_PATH`, docs/scale-out.md). Without an address, where Ray would start a new local cluster, the
executor gives that cluster a token of its own (a 0600 file in a private folder, removed afterwards), so Ray does
not write a world-readable `~/.ray/auth_token` that later clusters would pick up, and starts it on 127.0.0.1 alone
(`single_machine`): its GCS, raylet, agents and workers listen on the loopback interface, not on every one. A
cluster other machines may reach is started by hand (`ray start --head`, docs/scale-out.md) and given as the address.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
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


def ray_internal(name: str) -> Any:
    """A module of Ray's own internals (`ray._raylet`, `ray._private.services`, ...), untyped: Ray 2.60's are what
    its own CLI uses to read auth settings and dial a GCS, and ship no complete type stubs."""
    import_ray()
    return importlib.import_module(name)


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


AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")  # Ray's token settings, read from the env
TOKEN_FILE = "auth_token"


def write_token(directory: str | Path) -> Path:
    """A fresh random token in `directory`/auth_token, readable by its owner alone (mode 0600 from creation)."""
    path = Path(directory) / TOKEN_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    return path


def token_env(path: str | Path) -> dict[str, str | None]:
    """Ray's settings for token authentication with the token in file `path` (None: the variable is unset)."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": None, "RAY_AUTH_TOKEN_PATH": str(path)}


def with_auth(base: Mapping[str, str], auth: Mapping[str, str | None]) -> dict[str, str]:
    """The environment `base` with Ray's auth variables replaced by `auth` (None: unset): for a node or a driver
    started as a subprocess."""
    env = {k: v for k, v in base.items() if k not in AUTH_VARS}
    env.update({k: v for k, v in auth.items() if v is not None})
    return env


def refresh_auth() -> None:
    """Make this process's Ray re-read its auth settings from the environment (Ray caches the mode and the token)."""
    raylet = ray_internal("ray._raylet")
    raylet.Config.initialize("")  # the mode first: a token reloaded under a stale mode fails a check inside Ray
    raylet.AuthenticationTokenLoader.instance().reset_cache()


@contextlib.contextmanager
def driver_auth(env: Mapping[str, str | None]) -> Iterator[None]:
    """This process's Ray auth variables set to `env` (None: unset) while the block runs, then restored; Ray's cache
    is refreshed both times. For a driver in this process; subprocesses take `env` in theirs."""
    saved = {k: os.environ.get(k) for k in AUTH_VARS}
    _set_env(env)
    refresh_auth()
    try:
        yield
    finally:
        _set_env(saved)
        refresh_auth()


def _set_env(env: Mapping[str, str | None]) -> None:
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@contextlib.contextmanager
def private_token() -> Iterator[Path]:
    """A token of this driver's own (0600, in a 0700 folder) set as Ray's while the block runs, removed after."""
    folder = tempfile.mkdtemp(prefix="windtunnel-ray-auth-")
    try:
        path = write_token(folder)
        with driver_auth(token_env(path)):
            yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


LOOPBACK = "127.0.0.1"
# Ray's switch for clusters of more than one machine; "0" is its rule on macOS and Windows: a node at 127.0.0.1 keeps
# that address (elsewhere Ray rewrites it to the network address), so its servers listen on the loopback interface.
CLUSTER_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextlib.contextmanager
def single_machine() -> Iterator[None]:
    """Ray's rule for a cluster of this machine alone while the block runs: `CLUSTER_VAR=0` in the environment the
    nodes it starts inherit, and in this process, where Ray read it once at import (`ENABLE_RAY_CLUSTER`); both
    restored after."""
    constants = ray_internal("ray._private.ray_constants")
    saved, saved_env = constants.ENABLE_RAY_CLUSTER, os.environ.get(CLUSTER_VAR)
    constants.ENABLE_RAY_CLUSTER = False
    os.environ[CLUSTER_VAR] = "0"
    try:
        yield
    finally:
        constants.ENABLE_RAY_CLUSTER = saved
        _set_env({CLUSTER_VAR: saved_env})


def starts_local_cluster(address: str | None) -> bool:
    """Whether `ray.init(address)` would start a new local cluster rather than connect to one (Ray's own rule:
    "local", or no address with no RAY_ADDRESS and no cluster started on this machine)."""
    if address == "local":
        return True
    if address is not None:
        return False
    services = ray_internal("ray._private.services")
    try:
        return services.canonicalize_bootstrap_address(None) is None
    except Exception:  # noqa: BLE001 - Ray could not tell: let it decide, as before
        return False


def wants_private_token(address: str | None) -> bool:
    """True where the driver should give a new local cluster its own token: Ray would start one, and the user set
    no token and did not turn authentication off (Ray would then write ~/.ray/auth_token, world-readable)."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled":
        return False
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return False
    return starts_local_cluster(address)


def _parse_address(address: str) -> tuple[str, str]:
    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"--ray-address: expected auto or HOST:PORT (got {address!r})")
    return host, port


def check_reachable(address: str | None, timeout: float = 10.0) -> None:
    """Fail in seconds, not after Ray's own minutes of retries, unless a Ray GCS answers at the address Ray will
    dial (Ray dials 127.0.0.1 and localhost as this host's network address): one GCS RPC, with this process's
    token where token authentication is on. A listener that is not a Ray GCS, or a GCS that refuses the token, is a
    ValueError. None where Ray would start a new local cluster, and "local", need no check."""
    if address is not None and address not in ("auto", "local"):
        _parse_address(address)  # the form first, before Ray is asked anything
    if address == "local" or starts_local_cluster(address):
        return
    services = ray_internal("ray._private.services")
    try:
        target = services.canonicalize_bootstrap_address(address)
    except ConnectionError as err:  # "auto" and no cluster on this machine
        raise ValueError(f"--ray-address {address}: {err}") from None
    if target is None:
        return
    _gcs_handshake(address or target, target, timeout)


def _gcs_handshake(given: str, target: str, timeout: float) -> None:
    """One GetClusterId RPC to the GCS at `target`; a clear ValueError for each way it can fail."""
    grpc = ray_internal("grpc")  # Ray's dependency
    auth = ray_internal("ray._private.authentication.authentication_utils")
    pb2 = ray_internal("ray.core.generated.gcs_service_pb2")
    pb2_grpc = ray_internal("ray.core.generated.gcs_service_pb2_grpc")
    dialled = f" (Ray dials it as {target})" if target != given else ""
    channel = ray_internal("ray._private.grpc_utils").init_grpc_channel(target)  # TLS and token, as Ray's clients
    try:
        pb2_grpc.NodeInfoGcsServiceStub(channel).GetClusterId(pb2.GetClusterIdRequest(), timeout=timeout)
    except grpc.RpcError as err:
        code = err.code() if callable(getattr(err, "code", None)) else None
        if code == grpc.StatusCode.UNAUTHENTICATED:
            which = "this driver's token" if auth.is_token_auth_enabled() else "a driver without a token"
            raise ValueError(
                f"--ray-address: the Ray cluster at {given!r} refuses {which}; give the driver the cluster's token: "
                "RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=FILE (docs/scale-out.md)"
            ) from None
        detail = code.name if code is not None else type(err).__name__
        if code == grpc.StatusCode.UNIMPLEMENTED:
            detail += ": something listens there, but not a Ray GCS"
        raise ValueError(
            f"--ray-address: no Ray cluster answers at {given!r}{dialled} within {timeout:g} s ({detail}); start "
            "one with `ray start --head` (docs/scale-out.md) or check the address"
        ) from None
    finally:
        channel.close()


def check_resources(jobs: Sequence[Job], nodes: Sequence[Mapping[str, Any]], cluster_gpus: float) -> None:
    """ValueError at once for a run no node of the cluster can ever hold (Ray would leave it pending for good):
    more CPUs than the largest node has, naming that node's CPUs."""
    alive = [n.get("Resources", {}) for n in nodes if n.get("Alive")]
    largest = max((float(r.get("CPU", 0)) for r in alive), default=0.0)
    for job in jobs:
        need = task_resources(job, cluster_gpus)
        if need.get("num_cpus", 0) > largest:
            raise ValueError(
                f"--threads {job.threads}: no node of the Ray cluster has {need['num_cpus']} CPUs; the largest has "
                f"{largest:g} (ask for at most {largest:g} threads per run)"
            )


class RayExecutor:
    """Runs jobs as Ray tasks on the cluster at `address` (None: `ray.init()`'s default -- RAY_ADDRESS, a cluster
    started on this machine, else a new local one, on 127.0.0.1 alone; "auto": an existing cluster; "HOST:PORT": that
    cluster's head)."""

    name = "ray"

    def __init__(self, address: str | None = None, max_retries: int = DEFAULT_RETRIES) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries: must be >= 0 (got {max_retries})")
        self.address, self.max_retries = address, max_retries
        import_ray()  # before anything is created: Ray is installed ...
        check_reachable(address)  # ... and a cluster answers at the address given

    def run(self, jobs: Sequence[Job], on_result: OnResult | None = None) -> list[dict[str, Any]]:
        ray = import_ray()
        if ray.is_initialized():
            return self._run(ray, jobs, on_result)
        with contextlib.ExitStack() as stack:  # left in reverse: Ray shut down, then its settings restored
            if wants_private_token(self.address):
                stack.enter_context(private_token())
            local: dict[str, Any] = {}
            if starts_local_cluster(self.address):  # a new cluster of this machine, on 127.0.0.1 alone
                stack.enter_context(single_machine())
                local = {"_node_ip_address": LOOPBACK, "include_dashboard": False}
            try:
                ray.init(address=self.address, log_to_driver=False, configure_logging=False, **local)
            except ConnectionError as err:
                raise ValueError(f"--ray-address: cannot reach a Ray cluster at {self.address!r}: {err}") from None
            stack.callback(ray.shutdown)
            return self._run(ray, jobs, on_result)

    def _run(self, ray: Any, jobs: Sequence[Job], on_result: OnResult | None) -> list[dict[str, Any]]:
        gpus = float(ray.cluster_resources().get("GPU", 0))
        check_resources(jobs, ray.nodes(), gpus)
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


__all__ = [
    "AUTH_VARS",
    "CLUSTER_VAR",
    "DEFAULT_RETRIES",
    "LOOPBACK",
    "RayExecutor",
    "check_reachable",
    "check_resources",
    "driver_auth",
    "import_ray",
    "private_token",
    "ray_internal",
    "refresh_auth",
    "run_on_node",
    "single_machine",
    "starts_local_cluster",
    "task_resources",
    "token_env",
    "wants_private_token",
    "with_auth",
    "write_token",
]
