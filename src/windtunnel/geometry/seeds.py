"""Geometry across the training seeds of one cell: each headline probe number (trained, init and baseline) as its
mean over the seeds' geometry.json, with a Student-t interval (`metrics.seed_interval`) when >= 2 seeds have it.

    >>> across_seeds([geometry_seed0, geometry_seed1])["authors' L0 signed key cos, key tokens"]["trained"]
    {"n_seeds": 2, "mean": ..., "interval": [lo, hi], "values": [...]}
"""

from __future__ import annotations

import math
from typing import Any

from windtunnel.metrics import seed_interval

KeyPath = tuple[Any, ...]  # a path into geometry.json, e.g. ("keys", "by_token_set", "key_tokens")


def dig(d: Any, *path: Any) -> Any:
    """d[path0][path1]... or None where any step is missing (probes that do not apply have no numbers)."""
    for p in path:
        try:
            d = d[p]
        except (KeyError, IndexError, TypeError):
            return None
    return d


def _keys(token_set: str) -> list[tuple[str, KeyPath, KeyPath, tuple[str, KeyPath]]]:
    base: KeyPath = ("keys", "by_token_set", token_set)
    return [
        (
            f"L0 key mean |cos|, {token_set.replace('_', ' ')}",
            (*base, "mean_abs_cos_per_layer", 0),
            (*base, "init_mean_abs_cos_per_layer", 0),
            ("Gaussian keys", (*base, "gaussian_baseline")),
        ),
        (
            f"authors' L0 signed key cos, {token_set.replace('_', ' ')}",
            (*base, "authors_signed_mean_cos_per_layer", 0),
            (*base, "init_authors_signed_mean_cos_per_layer", 0),
            ("Gaussian keys", (*base, "authors_gaussian_baseline", "mean")),
        ),
    ]


def _manifold(positions: str, rep: str) -> list[tuple[str, KeyPath, KeyPath, tuple[str, KeyPath]]]:
    base: KeyPath = ("manifold", "by_position_set", positions, rep)
    where = f"{rep} at {positions.replace('_', ' ')}"
    stats = [("PC1 var", "pc1_var"), ("PC1+2 var", "pc12_var"), ("participation ratio", "participation_ratio")]
    stats.append(("Spearman(PC1, H)", "pc1_spearman"))
    return [
        (f"{label}, {where}", (*base, key), (*base, "init", key), ("Gaussian points", (*base, "gaussian", key)))
        for label, key in stats
    ]


def _attention(layer: int, which: str) -> list[tuple[str, KeyPath, KeyPath, tuple[str, KeyPath]]]:
    base: KeyPath = ("attention", "unseen_value_evidence")
    return [
        (
            f"mass on revealed values, {which} layer (unrevealed keys)",
            (*base, "mass_per_layer", layer),
            (*base, "init_mass_per_layer", layer),
            ("uniform attention (exact eliminator: 1)", (*base, "uniform_mass")),
        ),
        (
            f"entropy inside revealed values, {which} layer (bits)",
            (*base, "spread_bits_per_layer", layer),
            (),
            ("even over revealed values (Bayes-implied)", (*base, "bayes_entropy_bits")),
        ),
    ]


# (quantity, trained path, init path (() = none), (baseline label, baseline path)) into geometry.json
SEED_QUANTITIES: list[tuple[str, KeyPath, KeyPath, tuple[str, KeyPath]]] = [
    *_keys("key_tokens"),
    *_keys("value_tokens"),
    *_keys("all_tokens"),
    *(q for pos in ("value_positions", "scored_positions") for rep in ("values", "final") for q in _manifold(pos, rep)),
    *_attention(0, "first"),
    *_attention(-1, "last"),
]


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def seed_summary(values: list[float]) -> dict[str, Any]:
    """n_seeds, mean, the across-seed Student-t 95% interval (None under 2 seeds) and the values."""
    out: dict[str, Any] = {"n_seeds": len(values), "mean": sum(values) / len(values), "values": values}
    out["interval"] = list(seed_interval(values)) if len(values) >= 2 else None
    return out


def seed_text(summary: dict[str, Any] | None) -> str:
    """A `seed_summary` as text: mean [95% interval over seeds], or the mean alone for one seed; "—" for None."""
    if summary is None:
        return "—"
    lo_hi = summary["interval"]
    return f"{summary['mean']:.3f}" + (f" [{lo_hi[0]:.3f}, {lo_hi[1]:.3f}]" if lo_hi else "")


def across_seeds(geometries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """quantity -> {"trained", "init", "baseline"}: `seed_summary` over the seeds that have the number (None where
    none has), and "baseline_label"; quantities no seed has are left out."""
    out: dict[str, dict[str, Any]] = {}
    for name, trained, init, (label, baseline) in SEED_QUANTITIES:
        row: dict[str, Any] = {}
        for part, path in (("trained", trained), ("init", init), ("baseline", baseline)):
            vals = [float(v) for g in geometries if path and _number(v := dig(g, *path))]
            row[part] = seed_summary(vals) if vals else None
        if row["trained"] is not None:
            out[name] = {**row, "baseline_label": label}
    return out
