"""Tiny trained runs shared by the probe tests (CPU and CUDA): eight steps with checkpoints at 2, 4 and 8, so the
frame-precision probe has a history."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def train_checkpointed(run_dir: Path, task: str, params: dict[str, Any], arch: str, size: dict[str, Any]) -> Path:
    """Train `arch` at `size` on `task` for 8 steps on the CPU into `run_dir`; returns `run_dir`."""
    from windtunnel.train import train

    cfg = {
        "task": {"name": task, "params": params},
        "model": {"arch": arch, "size": size},
        "train": {
            "steps": 8,
            "batch_size": 16,
            "warmup_steps": 2,
            "eval_every": 0,
            "log_every": 4,
            "checkpoint_every": 0,
            "checkpoint_schedule": [2, 4],
            "device": "cpu",
        },
        "eval": {"n": 16},
        "seed": 0,
    }
    train(cfg, run_dir, progress=False)
    return run_dir
