"""Value manifold: PCA of representations against the entropy of the posterior at each point.

Top level (`final`, `values`): at the scored positions, against the exact posterior entropy. Two representations:
the final-layer representation the head reads (hook point `final`, every architecture) and the last layer's
attention value vectors, heads concatenated (`blocks.{L-1}.attn.v` = W_V applied to that layer's normed residual
input, attention models only; Paper III's protocol PCAs the final layer's value vectors).

`by_position_set` repeats both on two position sets, each beside the same architecture at init (same held-out
sequences) and i.i.d. Gaussian points of the same count and dimension:
  * "scored_positions": the scored (key) positions, exact posterior entropy (the top level's points);
  * "value_positions": the positions the authors' geometric_analysis.py used, where the task names them
    (`value_positions(inputs)`; bijection: the revealed values, entropy log2(V - #distinct values before)).
"""

from __future__ import annotations

from typing import Any

import torch

from windtunnel.geometry.data import ProbeData, not_applicable
from windtunnel.geometry.stats import gaussian_manifold_baseline, manifold_stats

PAPER = {
    "pc1_var": "0.84-0.90 (transformer, Paper III's reference); Mamba 0.219, LSTM 0.923 on HMM (v3)",
    "entropy_r2": "Mamba 0.40, LSTM 0.004 on HMM (v3)",
}
MIN_POINTS = 10


def points(
    rep: torch.Tensor, mask: torch.Tensor, entropy: torch.Tensor, max_points: int, seed: int = 0
) -> tuple[Any, Any, Any]:
    """Rows of `rep` (B,T,d) where `mask` (B,T) holds, their `entropy` (B,T) and flat indices; subsampled to
    `max_points` with a fixed seed (the same rows for any `rep` of the same mask)."""
    x = rep[mask]  # (N,d)
    h = entropy[mask]  # (N,)
    idx = torch.arange(x.shape[0])
    if x.shape[0] > max_points:
        g = torch.Generator().manual_seed(seed)
        idx = torch.randperm(x.shape[0], generator=g)[:max_points].sort().values
    return x[idx.to(x.device)], h[idx.to(h.device)], idx


def scored_points(data: ProbeData, rep: torch.Tensor, max_points: int, seed: int = 0) -> tuple[Any, Any, Any]:
    """Rows of `rep` (B,T,d) at scored positions, their posterior entropies and flat indices; subsampled."""
    return points(rep, data.mask, data.post_entropy, max_points, seed)


def value_vectors(data: ProbeData) -> torch.Tensor | None:
    """(B,T,H*dh) the last layer's attention value vectors, heads concatenated; None without attention."""
    last = len(data.resid) - 2  # the last layer's index (resid: the embedding, then one per layer)
    v = data.cache.get(f"blocks.{last}.attn.v") if last >= 0 else None  # (B,H,T,dh)
    return None if v is None else v.permute(0, 2, 1, 3).flatten(2)  # (B,H,T,dh) -> (B,T,H*dh)


def representations(data: ProbeData) -> dict[str, torch.Tensor | None]:
    """The two representations the manifold probe reads, (B,T,d) each, None where the model has none."""
    return {"final": data.final, "values": value_vectors(data)}


def position_sets(data: ProbeData, task: Any = None) -> dict[str, tuple[torch.Tensor, torch.Tensor] | str]:
    """name -> (mask (B,T), entropy bits (B,T)), or the reason the set does not apply."""
    out: dict[str, tuple[torch.Tensor, torch.Tensor] | str] = {"scored_positions": (data.mask, data.post_entropy)}
    named = getattr(task, "value_positions", None)
    if named is None or data.batch.inputs.dim() != 2:
        out["value_positions"] = "the task names no value positions (bijection token inputs only)"
    else:
        mask, bits = named(data.batch.inputs)
        out["value_positions"] = (mask.bool(), bits.double())
    return out


def _stats_at(
    rep: torch.Tensor | None, mask: torch.Tensor, bits: torch.Tensor, max_points: int, seed: int, gaussian: bool
) -> dict[str, Any]:
    """`manifold_stats` of `rep` (B,T,d) where `mask` holds, against `bits`; with `gaussian`, the Gaussian
    baseline of the same (n,d) and entropies beside it."""
    if rep is None:
        return not_applicable("the architecture has no attention value vectors")
    x, h, _ = points(rep, mask, bits, max_points, seed)  # (n,d), (n,)
    if x.shape[0] < MIN_POINTS:
        return not_applicable(f"fewer than {MIN_POINTS} positions")
    out: dict[str, Any] = manifold_stats(x, h, seed=seed)
    if gaussian:
        out["gaussian"] = gaussian_manifold_baseline(x.shape[0], x.shape[1], h, seed=seed)
    return out


def position_manifolds(
    data: ProbeData, task: Any = None, init_data: ProbeData | None = None, max_points: int = 4000, seed: int = 0
) -> dict[str, Any]:
    """position set -> representation -> `manifold_stats`, with `gaussian` (same n and d) and, given `init_data`
    (the init model on the same sequences), `init` beside each."""
    init_reps = representations(init_data) if init_data is not None else None
    out: dict[str, Any] = {}
    for name, where in position_sets(data, task).items():
        if isinstance(where, str):
            out[name] = not_applicable(where)
            continue
        mask, bits = where
        out[name] = {}
        for rep_name, rep in representations(data).items():
            r = _stats_at(rep, mask, bits, max_points, seed, gaussian=True)
            if init_reps is not None and "not_applicable" not in r:
                r["init"] = _stats_at(init_reps[rep_name], mask, bits, max_points, seed, gaussian=False)
            out[name][rep_name] = r
    return out


def value_manifold(
    data: ProbeData, max_points: int = 4000, seed: int = 0, task: Any = None, init_data: ProbeData | None = None
) -> dict[str, Any]:
    """PC1/PC1+2 variance, dim at 95%, participation ratio, best-PC correlation with entropy and held-out R^2, per
    representation at the scored positions; `by_position_set`: both position sets with init and Gaussian beside."""
    if data.batch.posterior is None or int(data.mask.sum()) < MIN_POINTS:
        return not_applicable(f"fewer than {MIN_POINTS} scored positions")
    sets = position_manifolds(data, task, init_data, max_points, seed)
    scored = sets["scored_positions"]
    # the top level: the scored positions' numbers without their baselines (the keys this probe always wrote)
    out: dict[str, Any] = {k: {n: v for n, v in scored[k].items() if n not in ("gaussian", "init")} for k in scored}
    out["by_position_set"] = sets
    out["paper"] = PAPER
    return out
