"""Value manifold: PCA of representations against the entropy of the posterior at each point.

Top level (`final`, `values`): at the scored positions, against the exact posterior entropy. Two representations:
the final-layer representation the head reads (hook point `final`, every architecture) and the last layer's
attention value vectors, heads concatenated (`blocks.{L-1}.attn.v` = W_V applied to that layer's normed residual
input, attention models only; Paper III's protocol PCAs the final layer's value vectors).

`by_position_set` repeats both on two position sets, each beside the same architecture at init (same held-out
sequences), i.i.d. Gaussian points of the same count and dimension, and a context-blind reference (`context_blind`:
the one-hot position and the current input, all a reader of nothing else holds, at its best: `stats.reference_stats`
takes its held-out entropy prediction as its "PC1", so it has the entropy statistics only):
  * "scored_positions": the scored (key) positions, exact posterior entropy (the top level's points);
  * "value_positions": the positions the authors' geometric_analysis.py used, where the task names them
    (`value_positions(inputs)`; bijection: the revealed values, entropy log2(V - #distinct values before)).

Position can fake the pooled entropy statistics: where the entropy is a function of position (bijection without
replacement: log2(20 - t) at every sequence) Spearman(PC1, H) and the entropy R^2 over all points measure how a
representation encodes position, which an untrained model and the context-blind reference do too. Every set of
points therefore also has `within_position` (`stats.within_position_stats`): the same correlations and R^2 within
position, pooled over the positions where the entropy varies, or {"not_measurable": reason} where none does.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from windtunnel.geometry.data import ProbeData, not_applicable
from windtunnel.geometry.stats import gaussian_manifold_baseline, manifold_stats, reference_stats

PAPER = {
    "pc1_var": "0.84-0.90 (transformer, Paper III's reference); Mamba 0.219, LSTM 0.923 on HMM (v3)",
    "entropy_r2": "Mamba 0.40, LSTM 0.004 on HMM (v3); pooled over positions (compare within_position)",
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
    inputs = data.batch.inputs
    named = task.value_positions(inputs) if task is not None and inputs.dim() == 2 else None
    if named is None:
        out["value_positions"] = "the task names no value positions (bijection token inputs only)"
    else:
        mask, bits = named
        out["value_positions"] = (mask.bool(), bits.double())
    return out


def point_positions(mask: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """(n,) the position t of each point `points` returned: rows `idx` of the (B,T) `mask`'s true cells."""
    T = mask.shape[1]
    pos = torch.arange(T, device=mask.device).expand_as(mask)[mask]  # (N,)
    return pos[idx.to(pos.device)]


def context_blind(data: ProbeData, mask: torch.Tensor, idx: torch.Tensor, task: Any = None) -> torch.Tensor:
    """(n, T+F) the context-blind reference of points `idx` of `mask` (B,T): the one-hot position and the current
    input (a one-hot token over the task's vocabulary, or the input vector with its pairwise products) -- what a
    reader of its own position and input alone holds, so a statistic it matches is one position and input can fake
    (linear probes of it: any function of position and token; of a real input, up to quadratic)."""
    inputs = data.batch.inputs  # (B,T) or (B,T,D)
    T = mask.shape[1]
    pos = F.one_hot(point_positions(mask, idx), T).double()  # (n,T)
    own = inputs[mask][idx.to(inputs.device)]  # (n,) token ids or (n,D)
    if inputs.dim() == 2:
        vocab = (task.spec.vocab_size if task is not None else None) or int(inputs.max()) + 1
        own = F.one_hot(own.long(), int(vocab)).double()  # (n,V): any function of the token is linear in it
    else:  # the vector and its pairwise products: a Gaussian posterior's entropy is quadratic in its query
        own = own.double()
        i, j = torch.triu_indices(own.shape[1], own.shape[1])
        own = torch.cat([own, own[:, i] * own[:, j]], dim=-1)  # (n, D + D(D+1)/2)
    return torch.cat([pos, own], dim=-1)


def _stats_of(x: torch.Tensor, h: torch.Tensor, pos: Any, seed: int, gaussian: bool) -> dict[str, Any]:
    """`manifold_stats` of points `x` (n,d) against entropies `h` (n,), within positions `pos` (n,) too; with
    `gaussian`, the Gaussian baseline of the same (n,d), entropies and positions beside it."""
    if x.shape[0] < MIN_POINTS:
        return not_applicable(f"fewer than {MIN_POINTS} positions")
    out: dict[str, Any] = manifold_stats(x, h, seed=seed, positions=pos)
    if gaussian:
        out["gaussian"] = gaussian_manifold_baseline(x.shape[0], x.shape[1], h, seed=seed, positions=pos)
    return out


def _stats_at(
    rep: torch.Tensor | None, mask: torch.Tensor, bits: torch.Tensor, max_points: int, seed: int, gaussian: bool
) -> dict[str, Any]:
    """`_stats_of` the rows of `rep` (B,T,d) where `mask` holds (`points`), against `bits` (B,T)."""
    if rep is None:
        return not_applicable("the architecture has no attention value vectors")
    x, h, idx = points(rep, mask, bits, max_points, seed)  # (n,d), (n,)
    return _stats_of(x, h, point_positions(mask, idx).cpu().numpy(), seed, gaussian)


def position_manifolds(
    data: ProbeData, task: Any = None, init_data: ProbeData | None = None, max_points: int = 4000, seed: int = 0
) -> dict[str, Any]:
    """position set -> representation -> `manifold_stats`, with `gaussian` (same n and d), `context_blind`
    (`stats.reference_stats` of `context_blind`, one per position set) and, given `init_data` (the init model on the
    same sequences), `init` beside each."""
    init_reps = representations(init_data) if init_data is not None else None
    out: dict[str, Any] = {}
    for name, where in position_sets(data, task).items():
        if isinstance(where, str):
            out[name] = not_applicable(where)
            continue
        mask, bits = where
        out[name] = {}
        blind: dict[str, Any] | None = None  # the same for every representation: computed once
        for rep_name, rep in representations(data).items():
            r = _stats_at(rep, mask, bits, max_points, seed, gaussian=True)
            if "not_applicable" not in r:
                if init_reps is not None:
                    r["init"] = _stats_at(init_reps[rep_name], mask, bits, max_points, seed, gaussian=False)
                if blind is None:
                    _, h, idx = points(bits[..., None], mask, bits, max_points, seed)  # every rep's rows
                    pos = point_positions(mask, idx).cpu().numpy()
                    blind = reference_stats(context_blind(data, mask, idx, task), h, seed=seed, positions=pos)
                r["context_blind"] = blind
            out[name][rep_name] = r
    return out


def value_manifold(
    data: ProbeData, max_points: int = 4000, seed: int = 0, task: Any = None, init_data: ProbeData | None = None
) -> dict[str, Any]:
    """PC1/PC1+2 variance, dim at 95%, participation ratio, best-PC correlation with entropy and held-out R^2 (pooled,
    and `within_position`), per representation at the scored positions; `by_position_set`: both position sets with
    init, Gaussian and context-blind beside."""
    if data.batch.posterior is None or int(data.mask.sum()) < MIN_POINTS:
        return not_applicable(f"fewer than {MIN_POINTS} scored positions")
    sets = position_manifolds(data, task, init_data, max_points, seed)
    scored = sets["scored_positions"]
    # the top level: the scored positions' numbers without their baselines (the keys this probe always wrote)
    baselines = ("gaussian", "init", "context_blind")
    out: dict[str, Any] = {k: {n: v for n, v in scored[k].items() if n not in baselines} for k in scored}
    out["by_position_set"] = sets
    out["paper"] = PAPER
    return out
