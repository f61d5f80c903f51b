"""Command-line arguments shared by the CLI tests: a tiny smoke training run on the CPU, and a base config a sweep's
points train in well under a second."""

from __future__ import annotations

from pathlib import Path

# The smoke preset on a 5-symbol bijection, tiny batches, no progress bar, the CPU.
TINY = ["--preset", "smoke", "--no-progress"] + [
    a for kv in ("task.V=5", "task.L=4", "train.batch_size=4", "eval.n=8", "train.device=cpu") for a in ("--set", kv)
]
SMOKE = [*TINY, "--steps", "2"]  # two steps: a finished run in about a second
# A smoke-sized bijection transformer as a sweep's base config: a point trains and evaluates in well under a second.
SWEEP_BASE = {
    "task": {"name": "bijection", "params": {"V": 6, "L": 5}},
    "model": {"arch": "transformer", "preset": "smoke"},
    "train": {"steps": 6, "batch_size": 8, "device": "cpu"},
    "eval": {"n": 64},
}


def train_args(out: str | Path, *extra: str) -> list[str]:
    """`windtunnel train` of the smoke bijection transformer into `out`, plus `extra` options."""
    return ["train", "--task", "bijection", "--arch", "transformer", "--out", str(out), *SMOKE, *extra]
