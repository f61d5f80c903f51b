"""Fabricated report inputs shared by the report tests: a run directory written without training (`write_run`, its
headline metric METRIC) and a run record with one headline metric (`record`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from windtunnel.report.collect import RunRecord

METRIC = {"mean": 0.05, "lo": 0.04, "hi": 0.06}


def write_run(
    root: Path,
    name: str,
    arch: str = "transformer",
    task: str = "bijection",
    config: Any = None,
    evals: Any = None,
    metrics_lines: list[str] | None = None,
) -> Path:
    """A fabricated run directory (config.json, eval.json, optionally metrics.jsonl): no training needed."""
    d = root / name
    d.mkdir(parents=True)
    if config is None:
        config = {
            "task": {"name": task, "params": {}},
            "model": {"arch": arch},
            "seed": 0,
            "train": {"steps": 10, "batch_size": 4},
        }
    if evals is None:
        evals = {"default": {"task_params": {}, "n": 10, "metrics": {"entropy_mae_bits": METRIC}}}
    (d / "config.json").write_text(json.dumps(config))
    (d / "eval.json").write_text(json.dumps(evals))
    if metrics_lines is not None:
        (d / "metrics.jsonl").write_text("".join(line + "\n" for line in metrics_lines))
    return d


def record(
    task: str,
    arch: str,
    seed: int,
    value: float,
    lo: float | None = None,
    hi: float | None = None,
    metric: str = "entropy_mae_bits",
    kl_exact: float | None = None,
    gains: dict[str, tuple[int, float]] | None = None,
    params: dict | None = None,
) -> RunRecord:
    """A run record with one headline metric, KL(exact ‖ model) (default: the same numbers as the headline for an
    entropy headline, 0.001 for accuracy), and optionally approximations {name: (depth, gain over it)}."""
    iv = {"mean": value, "lo": value if lo is None else lo, "hi": value if hi is None else hi}
    metrics = {metric: iv}
    kl = kl_exact if kl_exact is not None else (None if metric == "entropy_mae_bits" else 0.001)
    metrics["kl_bits"] = dict(iv) if kl is None else {"mean": kl, "lo": kl, "hi": kl}
    if metric == "accuracy":
        metrics["entropy_mae_bits"] = {"mean": 0.001, "lo": 0.001, "hi": 0.001}
    default: dict = {"metrics": metrics}
    if gains is not None:
        default["approximations"] = {
            n: {
                "depth": d,
                "gain_bits": {"mean": g, "lo": g - 1e-4, "hi": g + 1e-4},
                "kl_from_model_bits": 0.1,
                "entropy_mae_bits": 0.0,
                "kl_bits": 0.1,
            }
            for n, (d, g) in gains.items()
        }
        default["closest"] = {"name": "exact", "margins": {}}
    return RunRecord(
        path=Path(f"{task}-{arch}-s{seed}"),
        task=task,
        arch=arch,
        seed=seed,
        config={"task": {"name": task, "params": params or {}}, "seed": seed},
        evals={"default": default},
    )
