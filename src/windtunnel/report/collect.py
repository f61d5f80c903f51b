"""Read run directories into flat records the report can tabulate (only files, never a live model)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from windtunnel import runs


@dataclass
class RunRecord:
    """What the report needs from one run directory."""

    path: Path
    task: str
    arch: str
    seed: int
    config: dict[str, Any]
    evals: dict[str, Any]  # eval.json: name -> {"task_params", "n", "metrics", "per_position"}
    history: list[dict[str, Any]] = field(default_factory=list)  # metrics.jsonl lines
    geometry: dict[str, Any] | None = None

    @property
    def default(self) -> dict[str, Any]:
        return self.evals.get("default", {})

    def metric(self, name: str, eval_name: str = "default") -> dict[str, float] | None:
        """`{"mean", "lo", "hi"}` of an aggregate metric, or None where the run has no such number."""
        m = self.evals.get(eval_name, {}).get("metrics", {}).get(name)
        return m if isinstance(m, dict) and m.get("mean") is not None else None

    @property
    def steps(self) -> int:
        return int(self.config.get("train", {}).get("steps", 0) or 0)

    @property
    def batch_size(self) -> int:
        return int(self.config.get("train", {}).get("batch_size", 0) or 0)

    @property
    def wall_s(self) -> float | None:
        """Training wall time from the last logged line (None for untrained baselines)."""
        times = [h["elapsed_s"] for h in self.history if isinstance(h.get("elapsed_s"), (int, float))]
        return max(times) if times else None

    @property
    def eval_curve(self) -> list[tuple[int, float]]:
        """(step, entropy_mae_bits) from the periodic (validation-stream) evaluations in metrics.jsonl."""
        return self.curve("entropy_mae_bits")

    def curve(self, metric: str) -> list[tuple[int, float]]:
        """(step, metric) from the periodic (validation-stream) evaluations in metrics.jsonl."""
        pts = []
        for h in self.history:
            v = h.get(metric)
            if h.get("split") == "eval" and isinstance(v, (int, float)):
                pts.append((int(h["step"]), float(v)))
        return pts


def _read_json(path: Path) -> Any:
    return runs.read_json(path) if path.exists() else None


def read_run(path: str | Path) -> RunRecord:
    """One run directory -> RunRecord; a directory without config.json is an error naming it."""
    p = Path(path)
    config = _read_json(p / "config.json")
    if config is None:
        raise ValueError(f"report: {p} is not a run directory (no config.json)")
    return RunRecord(
        path=p,
        task=config["task"]["name"],
        arch=config["model"]["arch"],
        seed=int(config.get("seed", 0)),
        config=config,
        evals=_read_json(p / "eval.json") or {},
        history=runs.read_metrics(p),
        geometry=_read_json(p / "geometry.json"),
    )


def find_runs(paths: list[str | Path]) -> list[RunRecord]:
    """Run directories named directly, or found one level below a directory (e.g. a suite's runs/)."""
    found: list[RunRecord] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise ValueError(f"report: {p} does not exist")
        if (p / "config.json").exists():
            found.append(read_run(p))
            continue
        subs = sorted(d for d in p.rglob("config.json") if d.parent != p)
        if not subs:
            raise ValueError(f"report: no run directories (with config.json) under {p}")
        found.extend(read_run(d.parent) for d in subs)
    return found
