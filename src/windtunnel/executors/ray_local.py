"""A multi-node Ray cluster on this machine: a head and worker nodes, each a `ray start --block` subprocess that is
stopped by its PID (never `ray stop`, which ends every Ray process on the machine). For the tests, the executor
benchmark, and trying `--executor ray` without a cluster.

Each node is started with `--node-ip-address 127.0.0.1` and ports of its own. Ray 2.x on Linux replaces a loopback
node address by the machine's own address (`ray._private.services.resolve_ip_for_localhost`) and its servers listen on
every interface, so such a cluster is reachable from the machine's network while it runs (docs/scale-out.md).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from windtunnel.executors.ray_cluster import import_ray

STARTED = "Ray runtime started"


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalCluster:
    """`nodes` Ray nodes (the first is the head) with `cpus` CPUs each; `address` is the head's HOST:PORT.

    Use as a context manager; logs go to `log_dir` (default: a new temporary folder)."""

    def __init__(self, nodes: int = 2, cpus: int = 1, log_dir: str | Path | None = None, timeout: float = 90) -> None:
        if nodes < 1 or cpus < 1:
            raise ValueError(f"nodes and cpus: must be >= 1 (got {nodes}, {cpus})")
        self.nodes, self.cpus, self.timeout = nodes, cpus, timeout
        self.log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="windtunnel-ray-"))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []

    def _start_node(self, name: str, *args: str) -> None:
        ray_cli = str(Path(sys.executable).parent / "ray")
        cmd = [ray_cli, "start", "--block", "--node-ip-address", "127.0.0.1", "--num-cpus", str(self.cpus)]
        cmd += ["--num-gpus", "0", "--object-store-memory", str(100 * 2**20), "--disable-usage-stats"]
        cmd += ["--dashboard-agent-listen-port", str(free_port()), "--metrics-export-port", str(free_port()), *args]
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update(RAY_DISABLE_USAGE_STATS="1", OMP_NUM_THREADS=str(self.cpus))
        log = self.log_dir / f"{name}.log"
        with log.open("w") as f:  # the child keeps its own descriptor
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.procs.append(proc)
        deadline = time.time() + self.timeout
        while STARTED not in log.read_text():
            if proc.poll() is not None or time.time() > deadline:
                tail = log.read_text()[-3000:]
                raise RuntimeError(f"ray start ({name}) did not come up (exit {proc.returncode}):\n{tail}")
            time.sleep(0.2)

    def start(self) -> LocalCluster:
        """Start the head, then the worker nodes; return once every node has joined."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            head = [
                "--head",
                "--port",
                str(self.port),
                "--include-dashboard",
                "false",
                "--dashboard-port",
                str(free_port()),
            ]
            self._start_node("head", *head, "--ray-client-server-port", str(free_port()))
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

    def stop(self) -> None:
        """SIGTERM to each node's `ray start` (it ends its raylet and workers), then SIGKILL to its process group."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=30)
            with contextlib.suppress(ProcessLookupError):  # whatever of this node is left: its group, started here
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        self.procs = []

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


__all__ = ["LocalCluster", "free_port"]
