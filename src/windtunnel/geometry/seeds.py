"""Geometry across the training seeds of one cell: each headline probe number (trained, init and baseline) as its
mean over the seeds' geometry.json, with a Student-t interval when >= 2 seeds have it, computed on a scale that keeps
it inside the statistic's range (`Scale`) and back-transformed.

    >>> across_seeds([geometry_seed0, geometry_seed1])["authors' L0 signed key cos, key tokens"]["trained"]
    {"n_seeds": 2, "mean": ..., "interval": [lo, hi], "values": [...], "scale": "Fisher z"}

A quantity whose seeds may differ by orders of magnitude (a memory move: 4e-6 on a seed that carries nothing, 0.07
on four that carry it) is summarised per seed (`PER_SEED`): every seed's value, their median and their range, never
a mean of them (a geometric mean of 4e-6 and four 0.07s is 0.010, like no seed).

A plain t-interval of two seeds leaves a bounded range ([-1.004, -0.943] for a correlation, [-0.130, 1.270] for a
variance share): a correlation's interval is taken on Fisher's z = atanh(r), a share's on its logit, a participation
ratio's on log(PR - 1), and the mean is the back-transformed mean on that scale. A correlation with a principal
component has an arbitrary sign (the PC's), so it is summarised as |r| (per-seed -0.70, -0.57, +0.61 is one
magnitude, not an interval spanning 0). A number a probe marks not measurable on the task (`within_position` where
the entropy does not vary within any position) is summarised as {"not_measurable": reason}: "not measurable".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from windtunnel.evaluation.metrics import seed_interval
from windtunnel.geometry.registry import KeyPath, dig, seed_quantities


@dataclass(frozen=True)
class Scale:
    """The range [lo, hi] a statistic lives in (None: unbounded that side) and whether its sign is arbitrary
    (`fold`: summarised as |value|). The across-seed interval is taken on the scale that maps the range onto the
    real line -- logit of (v - lo)/(hi - lo) when bounded both sides (for [-1, 1] that is 2 atanh v: Fisher z),
    log(v - lo) or -log(hi - v) when bounded one side -- and mapped back, so it never leaves the range."""

    name: str
    lo: float | None = None
    hi: float | None = None
    fold: bool = False
    per_seed: bool = False  # summarised by the seeds' median and range, no mean or interval (`PER_SEED`)

    def to(self, v: float) -> float:
        lo, hi = self.lo, self.hi
        if lo is not None and hi is not None:
            eps = 1e-12 * (hi - lo)
            u = (min(max(v, lo + eps), hi - eps) - lo) / (hi - lo)
            return math.log(u / (1.0 - u))
        if lo is not None:
            return math.log(max(v - lo, 1e-12))
        if hi is not None:
            return -math.log(max(hi - v, 1e-12))
        return v

    def back(self, t: float) -> float:
        lo, hi = self.lo, self.hi
        if lo is not None and hi is not None:
            u = 1.0 / (1.0 + math.exp(-t)) if t >= 0 else math.exp(t) / (1.0 + math.exp(t))
            return lo + (hi - lo) * u
        if lo is not None:
            return lo + math.exp(t)
        if hi is not None:
            return hi - math.exp(-t)
        return t


LINEAR = Scale("linear")
FRACTION = Scale("logit", 0.0, 1.0)  # a share of variance, of attention mass, a mean |cosine|
CORRELATION = Scale("Fisher z", -1.0, 1.0)  # a correlation or a signed mean cosine
PC_CORRELATION = Scale("Fisher z of |r|", -1.0, 1.0, fold=True)  # with a PC, whose sign is arbitrary
PARTICIPATION = Scale("log(PR - 1)", 1.0, None)  # a participation ratio, >= 1
POSITIVE = Scale("log", 0.0, None)  # an entropy in bits
R2 = Scale("-log(1 - R^2)", None, 1.0)  # a held-out R^2: at most 1, may be negative
PER_SEED = Scale("per seed: median and range", per_seed=True)  # seeds that may differ by orders of magnitude

# (quantity, trained path, init path (() = none), (baseline label, baseline path), scale) into geometry.json: each
# probe declares its own (`Probe.seed_quantities`, geometry/builtin/); `seed_quantities()` lists every registered one.
Quantity = tuple[str, KeyPath, KeyPath, tuple[str, KeyPath], Scale]

BLIND = "position + own input (context-blind)"


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def not_measurable(d: Any, path: KeyPath) -> str | None:
    """The reason a probe gave for not measuring the number at `path` (a {"not_measurable": reason} on the way to
    it), else None."""
    for p in path:
        if isinstance(d, dict) and "not_measurable" in d:
            return str(d["not_measurable"])
        d = dig(d, p)
        if d is None:
            return None
    return None


def seed_summary(values: list[float], scale: Scale = LINEAR) -> dict[str, Any]:
    """n_seeds, mean, the across-seed Student-t 95% interval (None under 2 seeds; `metrics.seed_interval`) and the
    values, on `scale` (folded to |value| where its sign is arbitrary): mean and interval are taken of the
    transformed values and mapped back, so both stay in the statistic's range; "scale" names it."""
    vals = [abs(v) for v in values] if scale.fold else list(values)
    if scale.per_seed:
        return per_seed_summary(vals)
    t = [scale.to(v) for v in vals]
    out: dict[str, Any] = {"n_seeds": len(vals), "mean": scale.back(sum(t) / len(t)), "values": vals}
    if len(vals) == 1:
        out["mean"] = vals[0]  # one seed: its own value, exactly
    interval = [scale.back(x) for x in seed_interval(t)] if len(vals) >= 2 else None
    if interval is not None and scale.fold:
        interval[0] = max(interval[0], 0.0)  # |r| >= 0
    out["interval"] = interval
    if scale is not LINEAR:
        out["scale"] = scale.name
    return out


def small(v: float) -> str:
    """A number to 3 decimals, or to 2 significant digits where it is nonzero and below 0.001 (4e-06, not 0.000)."""
    return f"{v:.1e}" if v != 0 and abs(v) < 1e-3 else f"{v:.3f}"


def per_seed_summary(values: list[float]) -> dict[str, Any]:
    """n_seeds, the values (in seed order), their median and their range [min, max]; no mean and no interval
    ("interval": None): the summary of a `PER_SEED` quantity."""
    ordered = sorted(values)
    n = len(ordered)
    median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    return {
        "n_seeds": n,
        "median": median,
        "range": [ordered[0], ordered[-1]],
        "values": list(values),
        "interval": None,
        "scale": PER_SEED.name,
    }


def seed_text(summary: dict[str, Any] | None) -> str:
    """A `seed_summary` as text: mean [95% interval over seeds], or the mean alone for one seed; a per-seed one as
    `median 0.067, range 0.000–0.070 (seeds 0.000, 0.070, 0.067, 0.067, 0.063)`; "not measurable" where the probe
    said so; "—" for None."""
    if summary is None:
        return "—"
    if "not_measurable" in summary:
        return "not measurable"
    if "median" in summary:
        vals = summary["values"]
        if len(vals) == 1:
            return small(vals[0])
        lo, hi = summary["range"]
        each = ", ".join(small(v) for v in vals)
        return f"median {small(summary['median'])}, range {small(lo)}–{small(hi)} (seeds {each})"
    lo_hi = summary["interval"]
    return f"{summary['mean']:.3f}" + (f" [{lo_hi[0]:.3f}, {lo_hi[1]:.3f}]" if lo_hi else "")


def across_seeds(geometries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """quantity -> {"trained", "init", "baseline"}: `seed_summary` over the seeds that have the number on the
    quantity's `Scale` (None where none has; {"not_measurable": reason} where the probe of every seed said it is
    not measurable on this task), and "baseline_label"; quantities no seed has are left out."""
    out: dict[str, dict[str, Any]] = {}
    for name, trained, init, (label, baseline), scale in seed_quantities():
        row: dict[str, Any] = {}
        for part, path in (("trained", trained), ("init", init), ("baseline", baseline)):
            vals = [float(v) for g in geometries if path and _number(v := dig(g, *path))]
            reasons = {r for g in geometries if path and (r := not_measurable(g, path))}
            if vals:
                row[part] = seed_summary(vals, scale)
            elif reasons:
                row[part] = {"not_measurable": "; ".join(sorted(reasons))}
            else:
                row[part] = None
        if row["trained"] is not None:
            out[name] = {**row, "baseline_label": label}
    return out
