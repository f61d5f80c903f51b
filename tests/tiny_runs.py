"""Tiny trained runs shared by the probe tests (CPU and CUDA): eight steps with checkpoints at 2, 4 and 8, so the
frame-precision probe has a history."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def train_checkpointed(run_dir: Path, task: str, params: dict[str, Any], arch: str, size: dict[str, Any]) -> Path:
    """Train `arch` at `size` on `task` for 8 steps on the CPU into `run_dir`; returns `run_dir`."""
    from windtunnel.training.train import train

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


# A few-step smoke run on the CPU, as dotted overrides (the task and anything else are added by each test).
SMOKE_TRAIN = {
    "model.preset": "smoke",
    "train.steps": 4,
    "train.batch_size": 8,
    "train.log_every": 1,
    "train.eval_every": 2,
    "train.eval_size": 8,
    "train.warmup_steps": 1,
    "train.checkpoint_every": 2,
    "eval.n": 16,
    "eval.batch_size": 8,
    "train.device": "cpu",
}


def smoke_config(**overrides: Any) -> Any:
    """A resolved-ready RunConfig: SMOKE_TRAIN with `overrides` (dotted keys, given as a dict's items) on top."""
    from windtunnel.config import build_config

    return build_config(overrides={**SMOKE_TRAIN, **overrides})
