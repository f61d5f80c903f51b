"""Where runs were made: the machine record every driver (reproduce, sweep, time-to-bayes) and benchmark writes."""

from __future__ import annotations

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
