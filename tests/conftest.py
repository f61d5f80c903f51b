"""Test-wide settings: one intra-op thread (tiny models run faster on a shared 2-core machine; thread pools
spinning against each other made them ~20x slower there); `holder`, a process that holds a directory's lock."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

HOLDER = """
import sys, time
from windtunnel.store.lock import DirLock
lock = DirLock(sys.argv[1]).acquire()
print("locked", flush=True)
time.sleep(120)
"""


@pytest.fixture
def holder():
    """Start a process that holds a directory's lock (a second writer or driver must be refused); killed after."""
    procs = []

    def start(directory: Path) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", HOLDER, str(directory)], stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "locked"
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` run only where CUDA is available (never in CI); elsewhere they are reported as skipped."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def trained(tmp_path):
    """A finished two-step smoke run directory (`tests/cli_args.train_args`), trained through the CLI."""
    from typer.testing import CliRunner

    from cli_args import train_args
    from windtunnel.cli import app

    out = tmp_path / "run"
    r = CliRunner().invoke(app, train_args(out))
    assert r.exit_code == 0, r.output
    return out
