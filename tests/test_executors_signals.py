"""Drivers own their workers: a `windtunnel sweep --jobs 2` driver ended by SIGTERM or SIGKILL leaves no live
process behind -- no pool worker training on, holding a run's lock or the caller's pipe (a `| cat` reader gets EOF).
SIGTERM takes Ctrl-C's path (the table of what finished is written, the locks are released)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from windtunnel.store.lock import is_locked, read_owner
from windtunnel.store.rundir import OWNER_FILE
from windtunnel.suites import suite

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for process groups")

WINDTUNNEL = str(Path(sys.executable).parent / "windtunnel")
TIMEOUT = 120.0  # seconds to wait for something that should happen within a few


def live_in_group(pgid: int) -> list[int]:
    """The pids of the processes of process group `pgid` that still run (zombies are dead: they hold nothing)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            state, pgrp = fields[0], int(fields[2])
            if pgrp == pgid and state not in ("Z", "X"):
                pids.append(int(stat.parent.name))
    return pids


def wait_for(condition, what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def slow_sweep_config(path: Path) -> Path:
    """The smoke bijection transformer with far more steps than a test waits for: its runs never finish by
    themselves."""
    cfg = next(e.config for e in suite("smoke", only={"task": "bijection", "arch": "transformer"}))
    cfg = json.loads(json.dumps(cfg))
    cfg["train"].update(steps=1_000_000, checkpoint_every=1_000_000, eval_every=0, log_every=50, device="cpu")
    path.write_text(json.dumps(cfg))
    return path


@pytest.fixture
def sweep_driver(tmp_path):
    """Start `windtunnel sweep slow.yaml --grid seed=0,1 --jobs 2 --threads 1` in its own process group, its stdout
    and stderr one pipe read by `cat`; yields (driver, cat, out, worker pids) once both workers train. Whatever is
    left of the group at the end is SIGKILLed by pid."""
    config, out, log = slow_sweep_config(tmp_path / "slow.yaml"), tmp_path / "k2", tmp_path / "cat.log"
    read, write = os.pipe()
    args = ["sweep", str(config), "--grid", "seed=0,1", "--jobs", "2", "--threads", "1", "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    driver = subprocess.Popen([WINDTUNNEL, *args], stdout=write, stderr=write, env=env, start_new_session=True)
    with log.open("wb") as sink:
        cat = subprocess.Popen(["cat"], stdin=read, stdout=sink)
    os.close(read)
    os.close(write)
    try:
        owners = lambda: [read_owner(p.parent) for p in (out / "runs").glob(f"*/{OWNER_FILE}")]  # noqa: E731
        wait_for(lambda: len(owners()) == 2 or driver.poll() is not None, "both runs to start")
        assert driver.poll() is None, log.read_text()
        workers = [o["pid"] for o in owners() if o]
        assert len(workers) == 2 and driver.pid not in workers
        yield driver, cat, out, workers
    finally:
        for pid in [*live_in_group(driver.pid), driver.pid, cat.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        driver.wait()
        cat.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_killed_sweep_driver_leaves_no_live_worker_and_the_pipe_ends(sweep_driver, sig):
    driver, cat, out, workers = sweep_driver
    os.kill(driver.pid, sig)  # the driver alone, as `kill -TERM $!` does: not its process group
    driver.wait(timeout=TIMEOUT)
    assert driver.returncode != 0
    wait_for(lambda: not live_in_group(driver.pid), "every process of the driver's group to end")
    assert all(pid not in live_in_group(driver.pid) for pid in workers)
    cat.wait(timeout=TIMEOUT)  # EOF: nothing holds the caller's pipe any more
    assert not is_locked(out)  # the sweep's lock on --out ...
    assert not any(is_locked(p) for p in (out / "runs").iterdir())  # ... and every run's lock are free
    if sig == signal.SIGTERM:  # Ctrl-C's path: the table is written (nothing finished: both points missing)
        table = json.loads((out / "sweep.json").read_text())
        assert table["rows"] == [] and len(table["missing"]) == 2
