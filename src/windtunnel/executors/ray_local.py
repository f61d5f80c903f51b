"""A multi-node Ray cluster on this machine: a head and worker nodes, each a `ray start --block` subprocess that is
stopped by its PID (never `ray stop`, which ends every Ray process on the machine). For the tests, the executor
benchmark, and trying `--executor ray` without a cluster.

Every node listens on 127.0.0.1 only, where this machine allows it. Ray's servers listen on the loopback interface
alone when the node's address is exactly 127.0.0.1, and on every interface otherwise. But `ray start` on Linux
rewrites a loopback `--node-ip-address` or `--address` ("127.0.0.1", "localhost") to the machine's network address
(`ray._private.services.resolve_ip_for_localhost`). So:
  * the head is started with `--node-ip-address 127.0.0.1` and `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, under which
    Ray keeps a loopback address as given (Ray's own single-machine rule);
  * each worker node joins through a name of this machine that resolves to 127.0.0.1 alone (`loopback_name`, e.g.
    the host name in /etc/hosts) and which Ray does not rewrite; Ray then takes 127.0.0.1, the address it reaches
    the head from, as the node's address (a `--node-ip-address 127.0.0.1` would be rewritten).
Where no such name exists, every node is started with `--node-ip-address 127.0.0.1`, which Ray rewrites as above, and
the cluster listens on every interface while it runs (`loopback_only` is False; docs/scale-out.md).

Every node and the driver use token authentication with a token of the cluster's own (`RAY_AUTH_MODE=token`, a 0600
file under the cluster's temporary folder), and each node runs with HOME in that folder: nothing in the user's
`~/.ray` (an `auth_token` another Ray left there) changes how the cluster starts or whom it admits.

The nodes die with the process that started them (`dies_with`): a test run or benchmark killed by a timeout, even by
SIGKILL, leaves no cluster running. The kernel ties a node to the thread that started it, so start a cluster on a
thread that outlives it (the main thread).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from windtunnel.executors.local import PR_SET_PDEATHSIG
from windtunnel.executors.ray_cluster import (
    CLUSTER_VAR,
    LOOPBACK,
    driver_auth,
    import_ray,
    token_env,
    with_auth,
    write_token,
)

STARTED = "Ray runtime started"


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dies_with(parent: int) -> Callable[[], None] | None:
    """A `preexec_fn` for a node's `ray start`: the kernel SIGKILLs it when `parent` ends (PR_SET_PDEATHSIG, kept
    across exec), and it exits at once if `parent` has already ended, as `local.watch_parent` does for pool workers.
    Its GCS, raylet and agents die with it (Ray's own fate sharing, the same prctl) and its workers with their raylet,
    so a cluster outlives no driver killed by a timeout. libc is looked up here, before the fork: between fork and
    exec the child only makes two system calls. None where there is no prctl (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def preexec() -> None:
        if prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0 or os.getppid() != parent:
            os._exit(1)

    return preexec


def loopback_name() -> str | None:
    """A name of this machine that resolves to 127.0.0.1 and nothing else, other than the ones Ray rewrites
    ("localhost", "127.0.0.1"): the host name, or another name /etc/hosts gives 127.0.0.1; None if there is none."""
    names = [socket.gethostname(), socket.getfqdn()]
    with contextlib.suppress(OSError):
        for line in Path("/etc/hosts").read_text().splitlines():
            fields = line.split("#", 1)[0].split()
            if fields and fields[0] == LOOPBACK:
                names += fields[1:]
    for name in dict.fromkeys(names):
        if name in ("localhost", LOOPBACK) or not name:
            continue
        try:
            addresses = {info[4][0] for info in socket.getaddrinfo(name, None)}
        except (OSError, UnicodeError):
            continue
        if addresses == {LOOPBACK}:
            return name
    return None


class LocalCluster:
    """`nodes` Ray nodes (the first is the head) with `cpus` CPUs each; `address` is the head's HOST:PORT, and
    `loopback_only` whether the nodes listen on 127.0.0.1 alone (see the module docstring).

    Use as a context manager; logs go to `log_dir` (default: a new temporary folder). While it runs, this process
    is the cluster's driver (Ray's auth variables are set to the cluster's token, and restored by `stop`); a driver
    in another process needs `env` in its environment."""

    def __init__(self, nodes: int = 2, cpus: int = 1, log_dir: str | Path | None = None, timeout: float = 90) -> None:
        if nodes < 1 or cpus < 1:
            raise ValueError(f"nodes and cpus: must be >= 1 (got {nodes}, {cpus})")
        self.nodes, self.cpus, self.timeout = nodes, cpus, timeout
        self.log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="windtunnel-ray-"))
        # The cluster's own folder (mode 0700, short for the socket paths), removed by stop(): its token, the nodes'
        # HOME (no ~/.ray of the user's) and Ray's folder (sessions, sockets; Ray makes it 0777, so the token is not
        # kept there). The cluster leaves nothing in /tmp/ray, in particular no "current cluster" that
        # `--ray-address auto` would find.
        self.temp_dir = tempfile.mkdtemp(prefix="wt-ray-")
        self.token_path = write_token(self.temp_dir)
        self.home = Path(self.temp_dir) / "home"
        self.home.mkdir()
        self.ray_dir = Path(self.temp_dir) / "ray"
        self.ray_dir.mkdir()
        self.env = token_env(self.token_path)  # Ray's auth settings for any driver of this cluster
        self._auth = contextlib.ExitStack()
        self.port = free_port()
        name = loopback_name()
        self.loopback_only = name is not None
        self.address = f"{name or LOOPBACK}:{self.port}"
        self.procs: list[subprocess.Popen] = []

    def _start_node(self, name: str, *args: str, head: bool = False) -> None:
        ray_cli = str(Path(sys.executable).parent / "ray")
        cmd = [ray_cli, "start", "--block", "--num-cpus", str(self.cpus), "--num-gpus", "0"]
        if head or not self.loopback_only:
            cmd += ["--node-ip-address", LOOPBACK]
        cmd += ["--object-store-memory", str(100 * 2**20), "--disable-usage-stats", "--temp-dir", str(self.ray_dir)]
        cmd += ["--dashboard-agent-listen-port", str(free_port()), "--metrics-export-port", str(free_port()), *args]
        drop = ("RAY_ADDRESS", CLUSTER_VAR)
        env = with_auth({k: v for k, v in os.environ.items() if k not in drop}, self.env)
        env.update(RAY_DISABLE_USAGE_STATS="1", OMP_NUM_THREADS=str(self.cpus), HOME=str(self.home))
        if head and self.loopback_only:
            env[CLUSTER_VAR] = "0"  # keep the head's 127.0.0.1 as given
        log = self.log_dir / f"{name}.log"
        with log.open("w") as f:  # the child keeps its own descriptor
            proc = subprocess.Popen(
                cmd,
                stdout=f,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=dies_with(os.getpid()),  # two system calls between fork and exec (see dies_with)
            )
        self.procs.append(proc)
        deadline = time.time() + self.timeout
        while STARTED not in log.read_text():
            if proc.poll() is not None or time.time() > deadline:
                tail = log.read_text()[-3000:]
                raise RuntimeError(f"ray start ({name}) did not come up (exit {proc.returncode}):\n{tail}")
            time.sleep(0.2)

    def start(self) -> LocalCluster:
        """Start the head, then the worker nodes; return once every node has joined. From here to `stop` this
        process drives the cluster with its token."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._auth.enter_context(driver_auth(self.env))
            head = [
                "--head",
                "--port",
                str(self.port),
                "--include-dashboard",
                "false",
                "--dashboard-port",
                str(free_port()),
            ]
            self._start_node("head", *head, "--ray-client-server-port", str(free_port()), head=True)
            for i in range(1, self.nodes):
                self._start_node(f"worker{i}", "--address", self.address)
            self._wait_for_nodes()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_for_nodes(self) -> None:
        ray = import_ray()
        ray.init(address=self.address, log_to_driver=False, configure_logging=False)
        try:
            deadline = time.time() + self.timeout
            while sum(bool(n["Alive"]) for n in ray.nodes()) < self.nodes:
                if time.time() > deadline:
                    raise RuntimeError(f"only some of the {self.nodes} Ray nodes joined in {self.timeout} s")
                time.sleep(0.5)
        finally:
            ray.shutdown()

    def node_processes(self, i: int) -> list[Any]:
        """Every process of node `i` (0: the head) as `psutil.Process`: its `ray start` and all that descends from it
        (Ray's workers lead process groups of their own, so the node's group alone does not hold them)."""
        import_ray()  # Ray ships psutil and puts it on the path
        import psutil

        try:
            root = psutil.Process(self.procs[i].pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    @staticmethod
    def _kill(processes: list[Any]) -> None:
        """SIGKILL each process still running; psutil checks it is the same process, not a reused pid."""
        import psutil

        for p in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()

    def kill_node(self, i: int) -> None:
        """SIGKILL every process of node `i` at once, as when its machine dies (for fault tests)."""
        self._kill(self.node_processes(i))
        self.procs[i].wait()

    def stop(self) -> None:
        """SIGTERM to each node's `ray start` (it ends its raylet and workers), then SIGKILL to whatever of the node
        is left."""
        for i in reversed(range(len(self.procs))):
            proc, processes = self.procs[i], self.node_processes(i)
            if proc.poll() is None:
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=30)
            self._kill(processes)
            proc.wait()
        self.procs = []
        self._auth.close()  # this process's Ray auth settings as they were before start()
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


__all__ = ["LOOPBACK", "LocalCluster", "dies_with", "free_port", "loopback_name"]
