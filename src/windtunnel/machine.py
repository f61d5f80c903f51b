"""Where runs were made: the machine record every driver (reproduce, sweep, time-to-bayes) and benchmark writes, and
how much memory this machine has (`memory`, what `windtunnel.budget` checks a run against)."""

from __future__ import annotations

import contextlib
import os
import platform
from pathlib import Path
from typing import Any

import torch


def machine_description() -> dict[str, Any]:
    """CPU model and cores, accelerator, torch and Python versions."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return {
        "machine": f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.machine()}",
        "device": device,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


# cgroup limits on this process's memory (v2, then v1): a container's limit is the memory it can use
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def ram_bytes() -> int | None:
    """This machine's total RAM, or its cgroup's memory limit where that is lower; None where neither is known."""
    known: list[int] = []
    with contextlib.suppress(AttributeError, OSError, ValueError):  # no sysconf, or no such name here
        known.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    for path in _CGROUP_LIMITS:
        try:
            known.append(int(Path(path).read_text().strip()))
        except (OSError, ValueError):  # absent, or "max" (no limit)
            continue
    return min((k for k in known if k > 0), default=None)


def memory(cuda: bool = False) -> tuple[int, str] | None:
    """The most memory a run on this machine can use, in bytes, and where it is ("RAM", "GPU"): the RAM, or for a
    run on CUDA the larger of the RAM and GPU 0's memory. The GPU's is read only where CUDA has already started in
    this process: starting it here would break the worker processes a driver forks later. None where unknown."""
    found = [(b, "RAM") for b in [ram_bytes()] if b is not None]
    if cuda and torch.cuda.is_available() and torch.cuda.is_initialized():
        found.append((int(torch.cuda.get_device_properties(0).total_memory), "GPU"))
    return max(found, default=None)
