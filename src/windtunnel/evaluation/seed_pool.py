"""A cell of several training seeds as one set of scores for `marks.verdict`: every number the mean of the seeds'
means with its Student-t interval, each approximation's gains pooled position by position (`pool`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import fmean
from typing import Any

from windtunnel.evaluation.marks import EXACT, closest_posterior, finite
from windtunnel.evaluation.metric_specs import pool_seeds


def seed_stats(values: list[float]) -> dict[str, float]:
    """Mean of >= 2 seed values with its 95% Student-t interval (`metric_specs.pool_seeds`), never clipped to the
    metric's range (an error's lower end may be below 0, an accuracy's upper end past 1: the interval the seeds
    give)."""
    return pool_seeds(values)  # type: ignore[return-value]  # >= 2 values: both ends are numbers


def pool(settings: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One cell's scores from its seeds' evaluation settings (same task parameters), for `verdict`: with >= 2 seeds
    every number is the mean of the seed means with its Student-t interval (unclipped: `seed_stats`), and each
    approximation keeps every seed's own gain ("seed_gains", for `closest_text`); one seed keeps its own bootstrap
    intervals. NaN anywhere stays NaN (and fails the verdict)."""
    if not settings:
        raise ValueError("pool: no settings")
    if len(settings) == 1:
        return {**settings[0], "seeds": 1, "interval": "bootstrap"}
    metrics: dict[str, Any] = {}
    for name in settings[0].get("metrics") or {}:
        vals = [_mean_of(s.get("metrics", {}).get(name)) for s in settings]
        if any(v is None for v in vals):
            metrics[name] = None
            continue
        clean = [float(v) for v in vals if v is not None]
        if not all(math.isfinite(v) for v in clean):
            metrics[name] = {"mean": math.nan, "lo": math.nan, "hi": math.nan}
            continue
        metrics[name] = seed_stats(clean)
    out: dict[str, Any] = {"metrics": metrics, "seeds": len(settings), "interval": "seeds"}
    gaps = [g for s in settings if isinstance(g := s.get("bayes_gap"), Mapping)]
    if len(gaps) == len(settings):
        out["bayes_gap"] = {
            "level": gaps[0].get("level"),
            **{k: _envelope([g.get(k) for g in gaps]) for k in ("nll_bits", "accuracy")},
            "evidence_bits": {k: _least([g.get("evidence_bits") for g in gaps], k) for k in ("nll", "accuracy")},
        }
    approx_sets = [s.get("approximations") or {} for s in settings]
    names = [n for n in approx_sets[0] if all(n in a for a in approx_sets)]
    if names:
        pooled = {}
        for n in names:
            first = approx_sets[0][n]
            pooled[n] = {
                "depth": first.get("depth"),
                **{k: fmean(float(a[n].get(k, math.nan)) for a in approx_sets) for k in _APPROX_NUMBERS},
                "gain_bits": seed_stats([_mean_or_nan(a[n].get("gain_bits")) for a in approx_sets]),
                "seed_gains": [finite(a[n].get("gain_bits")) for a in approx_sets],
                **_pool_positions([a[n] for a in approx_sets]),
            }
        out["approximations"] = pooled
        kl = {EXACT: [_mean_or_nan(s.get("metrics", {}).get("kl_bits")) for s in settings]}
        kl.update({n: [float(a[n].get("kl_from_model_bits", math.nan)) for a in approx_sets] for n in names})
        out["closest"] = closest_posterior(kl, seed_stats)
    return out


_APPROX_NUMBERS = ("entropy_mae_bits", "kl_bits", "kl_from_model_bits")  # per approximation, averaged over seeds


def _pool_positions(seeds: list[Mapping[str, Any]]) -> dict[str, Any]:
    """An approximation's per-position gains pooled over seeds: at each position the mean of the seeds' means with
    its Student-t interval (`seed_stats`), the worst being the lowest lower end; {} where a seed lacks them or the
    seeds were measured at different positions (then the average gain decides: `beats`)."""
    where = [tuple(s.get("positions") or ()) for s in seeds]
    if not where[0] or any(w != where[0] for w in where):
        return {}
    means = [list(s.get("gain_by_position") or []) for s in seeds]
    if any(len(m) != len(where[0]) for m in means):
        return {}
    intervals = [seed_stats([float(m[j]) for m in means]) for j in range(len(where[0]))]
    worst = min(range(len(intervals)), key=lambda j: intervals[j]["lo"] if math.isfinite(intervals[j]["lo"]) else -1e9)
    return {
        "positions": list(where[0]),
        "gain_by_position": [iv["mean"] for iv in intervals],
        "gain_worst": {"position": where[0][worst], **intervals[worst]},
    }


def _envelope(intervals: list[Any]) -> dict[str, float] | None:
    """The seeds' own intervals joined: mean of the means, the lowest lower and the highest upper end (None where one is
    missing). For the invalid check: the seeds share the test stream, so their spread is not its evaluation noise."""
    found = [finite(m) for m in intervals]
    if not found or any(m is None for m in found):
        return None
    ok = [m for m in found if m is not None]
    return {"mean": fmean(m["mean"] for m in ok), "lo": min(m["lo"] for m in ok), "hi": max(m["hi"] for m in ok)}


def _least(evidence: list[Any], key: str) -> float | None:
    """The smallest of the seeds' evidence `key` (None where a seed has none): a pooled cell is accused only on
    evidence every seed carries on its own (the seeds share the test sequences, so their evidence does not add up)."""
    found = [e.get(key) if isinstance(e, Mapping) else None for e in evidence]
    numbers = [float(v) for v in found if isinstance(v, (int, float))]
    return min(numbers) if numbers and len(numbers) == len(found) else None


def _mean_of(m: Any) -> float | None:
    return None if not isinstance(m, Mapping) or m.get("mean") is None else float(m["mean"])


def _mean_or_nan(m: Any) -> float:
    v = _mean_of(m)
    return math.nan if v is None else v


__all__ = ["pool", "seed_stats"]
