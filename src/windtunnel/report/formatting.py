"""How the report prints a metric value (`fmt`), an interval with any end beyond the metric's range labelled
(`interval_text`), and a belief horizon (`horizon_text`)."""

from __future__ import annotations

import math
from typing import Any

from windtunnel.evaluation.metric_specs import METRICS


def fmt(value: float, metric: str) -> str:
    """A metric value as printed in tables (`MetricSpec.fmt`): percent for accuracy, bits to 3 decimals (or 1e-4
    style) otherwise."""
    return METRICS[metric].fmt(value)


# Beside an interval end past the range the metric's values can take (`RANGES`): the interval is printed as the seeds
# give it, never clipped (`seed_pool.seed_stats`), and labelled so (`prose.BEYOND_RANGE`).
BEYOND_RANGE = "‡"
RANGES = {
    "accuracy": (0.0, 1.0),
    "entropy_mae_bits": (0.0, math.inf),
    "entropy_mae_curve_bits": (0.0, math.inf),
    "kl_bits": (0.0, math.inf),
}


def beyond_range(value: float, metric: str) -> bool:
    """Whether `value` lies outside the values `metric` can take (below 0 bits, an accuracy past 100%)."""
    lo, hi = RANGES.get(metric, (-math.inf, math.inf))
    return value < lo or value > hi


def interval_text(m: dict[str, float] | None, metric: str) -> str:
    """ "mean [lo, hi]", an end beyond the metric's range labelled `BEYOND_RANGE` ("78.8% [32.0%, 125.6%‡]")."""
    if not m:
        return "—"
    ends = (fmt(m[k], metric) + (BEYOND_RANGE if beyond_range(m[k], metric) else "") for k in ("lo", "hi"))
    return f"{fmt(m['mean'], metric)} [{', '.join(ends)}]"


def horizon_text(c: dict[str, Any]) -> str:
    """The belief horizon of a cell in words: "3 of 8 obs", "8 of 8 obs (every window)", "none"."""
    if c.get("horizon_max") is None:
        return "—"
    h, w = c.get("horizon"), c["horizon_max"]
    if h is None:
        return f"none (of {w} obs)"
    return f"{h} of {w} obs" + (" (every window)" if h == w else "")
