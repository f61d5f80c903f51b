"""Value manifold: PCA of representations at scored positions against the exact posterior entropy.

Two representations, both at the scored positions: the final-layer representation the head reads
(hook point `final`, every architecture) and the last layer's attention value vectors with heads concatenated
(`blocks.{L-1}.attn.v`, attention models only).
"""

from __future__ import annotations

from typing import Any

import torch

from windtunnel.geometry.data import ProbeData, not_applicable
from windtunnel.geometry.stats import manifold_stats

PAPER = {
    "pc1_var": "0.84-0.90 (transformer, Paper III's reference); Mamba 0.219, LSTM 0.923 on HMM (v3)",
    "entropy_r2": "Mamba 0.40, LSTM 0.004 on HMM (v3)",
}


def scored_points(data: ProbeData, rep: torch.Tensor, max_points: int, seed: int = 0) -> tuple[Any, Any, Any]:
    """Rows of `rep` (B,T,d) at scored positions, their posterior entropies and flat indices; subsampled."""
    x = rep[data.mask]  # (N,d)
    h = data.post_entropy[data.mask]  # (N,)
    idx = torch.arange(x.shape[0])
    if x.shape[0] > max_points:
        g = torch.Generator().manual_seed(seed)
        idx = torch.randperm(x.shape[0], generator=g)[:max_points].sort().values
    return x[idx.to(x.device)], h[idx.to(h.device)], idx


def value_manifold(data: ProbeData, max_points: int = 4000, seed: int = 0) -> dict[str, Any]:
    """PC1/PC1+2 variance, dim at 95%, best-PC correlation with entropy and held-out R^2, per representation."""
    if data.batch.posterior is None or int(data.mask.sum()) < 10:
        return not_applicable("fewer than 10 scored positions")
    out: dict[str, Any] = {}
    x, h, _ = scored_points(data, data.final, max_points, seed)
    out["final"] = manifold_stats(x, h, seed=seed)
    last = len(data.resid) - 2  # the last layer's index (resid: the embedding, then one per layer)
    v = data.cache.get(f"blocks.{last}.attn.v") if last >= 0 else None  # (B,H,T,dh)
    if v is None:
        out["values"] = not_applicable("the architecture has no attention value vectors")
    else:
        flat = v.permute(0, 2, 1, 3).flatten(2)  # (B,H,T,dh) -> (B,T,H*dh)
        xv, hv, _ = scored_points(data, flat, max_points, seed)
        out["values"] = manifold_stats(xv, hv, seed=seed)
    out["paper"] = PAPER
    return out
