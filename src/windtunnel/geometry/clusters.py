"""State clusters: do final-layer representations group by the posterior's most likely state (HMM filtering)?

k-means with k = number of classes on the final-layer representation at scored positions; the reference
labels are the exact posterior's MAP class. Reported: adjusted Rand index (clusters vs MAP labels), silhouette
of the MAP labels, and the held-out linear-probe R^2 for posterior entropy, pooled (the paper's; position alone can
raise it) and within position (`stats.within_position_stats`).
"""

from __future__ import annotations

from typing import Any, cast

from torch.distributions import Categorical

from windtunnel.geometry.data import ProbeData, not_applicable
from windtunnel.geometry.manifold import point_positions, scored_points
from windtunnel.geometry.stats import cluster_stats, linear_probe_r2, pca, within_position_stats

# A posterior whose top two classes are this close has no meaningful MAP state (e.g. bijection: uniform).
TIE_TOL = 1e-6
MAX_TIED_FRACTION = 0.5


def map_labels(data: ProbeData) -> tuple[Any, float] | None:
    """(B,T) MAP class of the exact posterior and the fraction of scored positions where it is tied."""
    probs = getattr(data.batch.posterior, "probs", None)
    if probs is None:
        return None
    top2 = probs.topk(min(2, probs.shape[-1]), dim=-1).values  # (B,T,2)
    tied = (top2[..., 0] - top2[..., -1] < TIE_TOL) if probs.shape[-1] > 1 else top2[..., 0] < 0
    return probs.argmax(-1), float(tied[data.mask].float().mean())


def state_clusters(data: ProbeData, max_points: int = 4000, seed: int = 0) -> dict[str, Any]:
    """Cluster statistics of the hook point `final` at scored positions against MAP posterior states."""
    labels = map_labels(data)
    if labels is None:
        return not_applicable("the answer is real-valued: there are no discrete states to cluster")
    lab, tied = labels
    if tied > MAX_TIED_FRACTION:
        return not_applicable(
            f"the posterior's MAP class is tied at {tied:.0%} of scored positions "
            "(no state to recover, e.g. uniform over remaining values)"
        )
    k = int(cast(Categorical, data.batch.posterior).probs.shape[-1])  # map_labels found class probabilities
    x, h, idx = scored_points(data, data.final, max_points, seed)
    y = lab[data.mask][idx.to(lab.device)]
    if x.shape[0] < max(10, k + 1):
        return not_applicable("too few scored positions to cluster")
    ratios, scores = pca(x)
    pos = point_positions(data.mask, idx).cpu().numpy()  # (n,)
    out: dict[str, Any] = cluster_stats(x, y.cpu().numpy(), k=k, seed=seed)
    out.update(
        {
            "k": k,
            "tied_fraction": tied,
            "pc1_var": float(ratios[0]),
            "entropy_r2": linear_probe_r2(x, h, seed=seed),
            "within_position": within_position_stats(x, scores[:, 0], h, pos, seed=seed),
            "paper": {
                "clusters": "5 for Mamba on HMM (v3)",
                "entropy_r2": "Mamba 0.40 vs LSTM 0.004 (v3)",
                "pc1_var": "Mamba 0.219 vs LSTM 0.923 (v3)",
            },
        }
    )
    return out
