"""Time to Bayes read off a validation curve: the first evaluation at which a metric reaches each precision mark
(`crossings`) or the verdict reaches ◐ and ✓ (`verdict_crossings`), summarised over seeds for the tables."""

from __future__ import annotations

import math
import statistics
from typing import Any

from windtunnel.evaluation.metric_specs import METRICS

# Time to Bayes: the precision marks a validation curve is read at, per headline metric, and the HMM's extra mark.
PRECISION_MARKS: dict[str, tuple[float, ...]] = {
    "entropy_mae_bits": (0.1, 0.05, 0.02, 0.01),
    "accuracy": (0.9, 0.99, 1.0),
}
EXACT_FILTER = "exact filter"


def crossings(evals: list[dict[str, Any]], metric: str) -> dict[str, dict[str, float] | None]:
    """First evaluation at which `metric` reaches each precision mark: {mark: {"step", "train_s"} or None}; for a
    task with window filters also the first one whose (point) belief horizon covers every window (`EXACT_FILTER`)."""

    def better(v: Any, m: float) -> bool:
        if not isinstance(v, (int, float)) or not math.isfinite(v):
            return False
        return spec.reaches(v, m)

    spec = METRICS[metric]
    out: dict[str, dict[str, float] | None] = {}
    for mark in PRECISION_MARKS[metric]:
        hit = next((e for e in evals if better(e.get(metric), mark)), None)
        out[f"{mark:g}"] = None if hit is None else {"step": hit["step"], "train_s": hit["train_s"]}
    if any("horizon_max" in e for e in evals):
        hit = next((e for e in evals if e.get("horizon") is not None and e["horizon"] == e.get("horizon_max")), None)
        out[EXACT_FILTER] = None if hit is None else {"step": hit["step"], "train_s": hit["train_s"]}
    return out


# Time to verdict: the levels a periodic validation evaluation's verdict (its "verdict" in metrics.jsonl) must reach
# for each mark -- ◐ is approximate or better, ✓ exact (⚠ invalid is never better).
VERDICT_MARKS: dict[str, tuple[str, ...]] = {"approx": ("exact", "approximate"), "exact": ("exact",)}


def verdict_crossings(evals: list[dict[str, Any]]) -> dict[str, dict[str, float] | None]:
    """First periodic validation evaluation whose verdict (its "verdict" level, `marks.verdict` at the conservative end
    of the bootstrap intervals over the validation sequences) reaches each of `VERDICT_MARKS`: {"approx": {"step",
    "train_s"} or None, "exact": ...}; an evaluation without a recorded verdict reaches nothing."""
    out: dict[str, dict[str, float] | None] = {}
    for mark, levels in VERDICT_MARKS.items():
        hit = next((e for e in evals if e.get("verdict") in levels), None)
        out[mark] = None if hit is None else {"step": hit["step"], "train_s": hit["train_s"]}
    return out


def summarize_marks(per_seed: list[dict[str, dict[str, float] | None]]) -> dict[str, dict[str, Any]]:
    """Per mark, over seeds' `crossings`: how many reached it, median and range of training seconds, median step."""
    out: dict[str, Any] = {}
    for mark in per_seed[0]:
        hits = [h for c in per_seed if (h := c.get(mark)) is not None]
        out[mark] = {"reached": len(hits), "of": len(per_seed)}
        if hits:
            secs, steps = [h["train_s"] for h in hits], [h["step"] for h in hits]
            out[mark].update(
                median_s=statistics.median(secs), min_s=min(secs), max_s=max(secs), median_step=statistics.median(steps)
            )
    return out


def format_mark(m: dict[str, Any]) -> str:
    """`"412 s [380–460] @1,300 2/3"`: median training seconds [range over seeds] @ median step, seeds reaching."""
    if not m["reached"]:
        return f"— (0/{m['of']})"
    span = "" if m["of"] == 1 else f" [{m['min_s']:,.0f}–{m['max_s']:,.0f}]"
    seeds = "" if m["of"] == 1 else f" {m['reached']}/{m['of']}"
    return f"{m['median_s']:,.0f} s{span} @{m['median_step']:,.0f}{seeds}"


def mark_header(mark: str, metric: str) -> str:
    """Column title of a mark: "≤ 0.01 bits", "≥ 99%" or "exact filter"."""
    if mark == EXACT_FILTER:
        return mark
    return f"≥ {float(mark):.0%}" if METRICS[metric].unit == "fraction" else f"≤ {mark} {METRICS[metric].unit}"


__all__ = [
    "EXACT_FILTER",
    "PRECISION_MARKS",
    "VERDICT_MARKS",
    "crossings",
    "format_mark",
    "mark_header",
    "summarize_marks",
    "verdict_crossings",
]
