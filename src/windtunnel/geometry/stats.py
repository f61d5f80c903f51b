"""Pure statistics behind the geometry probes: entropies, cosines, PCA, linear probes, clusters, divergences.

Everything here is a function of arrays only (no model, no task), so each number the probes report can be
checked on synthetic inputs with a known answer (tests/test_geometry_stats.py). Entropies are in bits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from scipy import stats as sps
from scipy.special import gammaln

LOG2 = math.log(2.0)
EPS = 1e-12


def _np(x: Any) -> np.ndarray:
    """Float64 numpy copy of a tensor or array-like."""
    if isinstance(x, torch.Tensor):
        x = x.detach().to("cpu", torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


# --------------------------------------------------------------------------------------------- entropies


def probs_entropy_bits(p: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Shannon entropy in bits of probability vectors along `dim` (0 log 0 = 0); one value per row.

    Apply it per attention row and per head BEFORE any averaging: averaging weights first under-states entropy
    (Jensen), which is the mistake Paper III warns about.
    """
    p = p.double()
    return -(torch.special.xlogy(p, p)).sum(dim) / LOG2


def probs_kl_bits(p: torch.Tensor, log_q: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """KL(p || q) in bits along `dim`, from probabilities `p` and log-probabilities `log_q` (0 log 0 = 0)."""
    p = p.double()
    log_q = log_q.double()
    plogp = torch.special.xlogy(p, p)
    plogq = torch.where(p > 0, p * log_q, torch.zeros_like(p))
    return (plogp - plogq).sum(dim) / LOG2


def js_bits(p: torch.Tensor, q: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Jensen-Shannon divergence in bits (in [0, 1]) between probability vectors along `dim`."""
    p, q = p.double(), q.double()
    m = 0.5 * (p + q)
    log_m = torch.log(m.clamp_min(EPS))
    return 0.5 * probs_kl_bits(p, log_m, dim) + 0.5 * probs_kl_bits(q, log_m, dim)


def row_cosine(a: torch.Tensor, b: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Cosine similarity of paired rows of `a` and `b` along `dim` (0 where a row is all zeros)."""
    a, b = a.double(), b.double()
    num = (a * b).sum(dim)
    den = a.norm(dim=dim) * b.norm(dim=dim)
    return torch.where(den > 0, num / den.clamp_min(EPS), torch.zeros_like(num))


# --------------------------------------------------------------------------------------------- key frame


def cosine_matrix(keys: Any) -> np.ndarray:
    """(n,n) cosine matrix of the rows of `keys` (n,d)."""
    k = _np(keys)
    if k.ndim != 2 or k.shape[0] < 2:
        raise ValueError(f"keys: expected an (n,d) array with n >= 2 (got shape {k.shape})")
    k = k / np.maximum(np.linalg.norm(k, axis=1, keepdims=True), EPS)
    return k @ k.T


def mean_abs_offdiag_cosine(keys: Any) -> float:
    """Mean |cosine| over the off-diagonal pairs of the rows of `keys` (n,d): 0 for orthogonal keys."""
    c = cosine_matrix(keys)
    n = c.shape[0]
    off = ~np.eye(n, dtype=bool)
    return float(np.abs(c[off]).mean())


def expected_abs_cosine_random(d: int) -> float:
    """E|cos| between two independent isotropic vectors in d dimensions (about sqrt(2/(pi d)) for large d).

    Exact: Gamma(d/2) / (sqrt(pi) Gamma((d+1)/2)).
    """
    if int(d) < 1:
        raise ValueError(f"d: must be >= 1 (got {d})")
    d = int(d)
    return float(math.exp(gammaln(d / 2) - gammaln((d + 1) / 2)) / math.sqrt(math.pi))


def gaussian_keys_baseline(n: int, d: int, seed: int = 0, repeats: int = 8) -> float:
    """Mean |off-diagonal cosine| of i.i.d. Gaussian keys of shape (n,d), averaged over `repeats` draws."""
    rng = np.random.default_rng(seed)
    return float(np.mean([mean_abs_offdiag_cosine(rng.standard_normal((n, d))) for _ in range(repeats)]))


def signed_offdiag_cosine(keys: Any) -> tuple[float, float]:
    """(mean, std) of the SIGNED off-diagonal cosines of the rows of `keys` (n,d): the authors' statistic."""
    c = cosine_matrix(keys)
    off = c[~np.eye(c.shape[0], dtype=bool)]
    return float(off.mean()), float(off.std())


def gaussian_signed_cosine_baseline(n: int, d: int, seed: int = 0, repeats: int = 64) -> dict[str, float]:
    """The authors' signed statistic on i.i.d. Gaussian keys (n,d), over `repeats` draws.

    `mean`/`std`: mean and spread over draws of the signed mean (expected 0 and sqrt(2/(n(n-1)d)), given as
    `expected_std`: distinct pairs' cosines are uncorrelated, each of variance 1/d); `cos_std`: the mean
    within-draw std of the cosines (about 1/sqrt(d)), to set beside the per-head std.
    """
    if int(n) < 2 or int(d) < 1:
        raise ValueError(f"n, d: need n >= 2 and d >= 1 (got {n}, {d})")
    rng = np.random.default_rng(seed)
    draws = np.array([signed_offdiag_cosine(rng.standard_normal((n, d))) for _ in range(repeats)])  # (R,2)
    return {
        "mean": float(draws[:, 0].mean()),
        "std": float(draws[:, 0].std()),
        "expected_std": math.sqrt(2.0 / (n * (n - 1) * d)),
        "cos_std": float(draws[:, 1].mean()),
    }


# --------------------------------------------------------------------------------------------- manifold


def pca(x: Any) -> tuple[np.ndarray, np.ndarray]:
    """Unscaled PCA of the rows of `x` (n,d) by SVD of the centred data.

    Returns (explained-variance ratios over ALL components, scores (n, r)) with r = min(n, d).
    """
    a = _np(x)
    if a.ndim != 2 or a.shape[0] < 2:
        raise ValueError(f"x: expected an (n,d) array with n >= 2 (got shape {a.shape})")
    a = a - a.mean(0, keepdims=True)
    u, s, _ = np.linalg.svd(a, full_matrices=False)
    var = s**2
    total = var.sum()
    ratios = var / total if total > 0 else np.zeros_like(var)
    return ratios, u * s


def effective_dim(ratios: Any, threshold: float = 0.95) -> int:
    """Smallest number of leading components whose explained variance reaches `threshold` (full spectrum)."""
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold: must be in (0, 1] (got {threshold})")
    cum = np.cumsum(_np(ratios))
    if cum.size == 0 or cum[-1] <= 0:
        return 0
    return int(min(np.searchsorted(cum, threshold * cum[-1] - 1e-12) + 1, cum.size))


def participation_ratio(ratios: Any) -> float:
    """(sum l)^2 / sum l^2 of the PCA spectrum: the number of components the variance is spread over (1 = a line,
    d = isotropic); 0 for an empty or all-zero spectrum."""
    lam = _np(ratios)
    sq = float((lam**2).sum())
    return float(lam.sum() ** 2 / sq) if sq > 0 else 0.0


def correlations(x: Any, y: Any) -> dict[str, float]:
    """Pearson and Spearman correlation of two 1-d samples (nan-free; 0 when either is constant)."""
    a, b = _np(x).ravel(), _np(y).ravel()
    if a.shape != b.shape:
        raise ValueError(f"x, y: need the same length (got {a.size} and {b.size})")
    if a.size < 3 or a.std() == 0 or b.std() == 0:
        return {"pearson": 0.0, "spearman": 0.0}
    return {"pearson": float(sps.pearsonr(a, b)[0]), "spearman": float(sps.spearmanr(a, b)[0])}


def best_pc(scores: Any, y: Any, n_pcs: int = 5) -> dict[str, float]:
    """The leading PC (of the first `n_pcs`) with the largest |Pearson r| against `y`, with both correlations."""
    s = _np(scores)
    best: dict[str, float] = {"pc": 0, "pearson": 0.0, "spearman": 0.0}
    for i in range(min(n_pcs, s.shape[1])):
        c = correlations(s[:, i], y)
        if abs(c["pearson"]) > abs(best["pearson"]):
            best = {"pc": i + 1, **c}
    return best


def linear_probe_r2(
    x: Any, y: Any, test_frac: float = 0.2, seed: int = 0, ridge: float = 1e-6, groups: Any = None
) -> float:
    """Held-out R^2 of a ridge regression from rows of `x` (n,d) to `y` (n,), on a fixed random split.

    Features are standardised on the training part; `ridge` is relative to the mean feature variance (1 after
    standardising), so a target that is an exact linear function of the features scores R^2 = 1 (up to ~1e-6).
    R^2 = 1 - SSE/SST on the test part (SST about the test mean), so it can be negative, never above 1.

    groups (n,), e.g. each point's position: R^2 within groups, what `x` predicts of `y` beyond its group. `x` and
    `y` are centred by their group's means on the training part (test points of a group with no training point are
    left out), and SST is the error of those group means alone: 1 = the rest of `y` predicted exactly, 0 = nothing
    beyond the group (a representation of the group alone), < 0 = worse than the group means.
    """
    a, b = _np(x), _np(y).ravel()
    if a.ndim != 2 or a.shape[0] != b.size:
        raise ValueError(f"x, y: need x (n,d) and y (n,) (got {a.shape} and {b.shape})")
    if not 0 < test_frac < 1:
        raise ValueError(f"test_frac: must be in (0, 1) (got {test_frac})")
    n = b.size
    n_test = max(1, int(round(n * test_frac)))
    if n - n_test < 2:
        raise ValueError(f"x: need at least {n_test + 2} rows for a split (got {n})")
    perm = np.random.default_rng(seed).permutation(n)
    te, tr = perm[:n_test], perm[n_test:]
    if groups is not None:
        a, b, te = _centre_by_group(a, b, np.asarray(groups).ravel(), tr, te)
    pred = _ridge_predict(a[tr], b[tr], a[te], ridge)
    sst = ((b[te] - (0.0 if groups is not None else b[te].mean())) ** 2).sum()
    sse = ((b[te] - pred) ** 2).sum()
    if sst <= 0:
        return 1.0 if sse <= 1e-12 else 0.0
    return float(1.0 - sse / sst)


def _ridge_predict(xtr: np.ndarray, ytr: np.ndarray, xte: np.ndarray, ridge: float) -> np.ndarray:
    """(m,) predictions at `xte` (m,d) of a ridge regression fitted to `xtr` (n,d), `ytr` (n,), features
    standardised on `xtr`, `ridge` relative to their variance (1), an unpenalised intercept."""
    mu, sd = xtr.mean(0), xtr.std(0)
    sd[sd == 0] = 1.0
    a, t = (xtr - mu) / sd, (xte - mu) / sd
    ymu = ytr.mean()
    w = np.linalg.solve(a.T @ a + ridge * len(ytr) * np.eye(a.shape[1]), a.T @ (ytr - ymu))
    return np.asarray(t @ w + ymu)


def cross_fitted(x: Any, y: Any, folds: int = 5, seed: int = 0, ridge: float = 1e-6) -> np.ndarray:
    """(n,) held-out ridge predictions of `y` (n,) from `x` (n,d): each point predicted by the fit to the other
    folds (a fixed random split into `folds`), so no point's own value is in its prediction."""
    a, b = _np(x), _np(y).ravel()
    parts = np.array_split(np.random.default_rng(seed).permutation(b.size), int(folds))
    out = np.empty_like(b)
    for k, te in enumerate(parts):
        tr = np.concatenate([p for j, p in enumerate(parts) if j != k])
        out[te] = _ridge_predict(a[tr], b[tr], a[te], ridge)
    return out


def _centre_by_group(
    a: np.ndarray, b: np.ndarray, groups: np.ndarray, tr: np.ndarray, te: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a, b) (n,d), (n,) minus their group's means over the training rows `tr`, and the test rows `te` whose group
    has a training row (the others have no group mean to be centred by)."""
    if groups.size != b.size:
        raise ValueError(f"groups: need one per row (got {groups.size} for {b.size} rows)")
    _, inv = np.unique(groups, return_inverse=True)
    count = np.bincount(inv[tr], minlength=inv.max() + 1).astype(np.float64)  # (G,) training rows per group
    te = te[count[inv[te]] > 0]
    if te.size == 0:
        raise ValueError("groups: no test row shares a group with a training row")
    mean_a = np.zeros((count.size, a.shape[1]))  # (G,d)
    np.add.at(mean_a, inv[tr], a[tr])
    mean_b = np.bincount(inv[tr], weights=b[tr], minlength=count.size)  # (G,)
    safe = np.maximum(count, 1.0)
    return a - (mean_a / safe[:, None])[inv], b - (mean_b / safe)[inv], te


# A position whose posterior entropies spread less than this (std, bits) has none to correlate: float noise of a
# constant (bijection without replacement: log2(V - t) at every sequence, within-position std 4e-16).
VARIES_BITS = 1e-9
MIN_WITHIN_POINTS = 10


def varying_groups(y: Any, groups: Any, tol: float = VARIES_BITS) -> np.ndarray:
    """(n,) bool: the points whose group's `y` varies (std over the group > `tol`); a group of one point does not."""
    b, g = _np(y).ravel(), np.asarray(groups).ravel()
    if g.size != b.size:
        raise ValueError(f"y, groups: need the same length (got {b.size} and {g.size})")
    _, inv = np.unique(g, return_inverse=True)
    count = np.bincount(inv).astype(np.float64)  # (G,)
    mean = np.bincount(inv, weights=b) / count
    var = np.bincount(inv, weights=(b - mean[inv]) ** 2) / count
    return (var > tol**2)[inv]


def within_group_correlations(x: Any, y: Any, groups: Any) -> dict[str, float]:
    """Pooled within-group Pearson and Spearman correlation of two 1-d samples: each centred within its group
    (Spearman: ranked within its group first), then one correlation over all points. Whatever the groups differ
    by (a position's mean) cannot move it; a group where either is constant adds variance but no covariance.
    0 where either has no variance left within groups."""
    a, b, g = _np(x).ravel(), _np(y).ravel(), np.asarray(groups).ravel()
    if not a.size == b.size == g.size:
        raise ValueError(f"x, y, groups: need the same length (got {a.size}, {b.size} and {g.size})")
    out = {}
    for name, (u, v) in (("pearson", (a, b)), ("spearman", _ranked_within(a, b, g))):
        u, v = _centred_within(u, g), _centred_within(v, g)
        den = math.sqrt(float((u**2).sum() * (v**2).sum()))
        out[name] = float((u * v).sum() / den) if den > 0 else 0.0
    return out


def _centred_within(a: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """(n,) `a` minus its group's mean."""
    _, inv = np.unique(groups, return_inverse=True)
    return a - (np.bincount(inv, weights=a) / np.bincount(inv))[inv]


def _ranked_within(a: np.ndarray, b: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n,) each of `a` and `b` replaced by its rank within its group (ties: average rank)."""
    ra, rb = np.empty_like(a), np.empty_like(b)
    for g in np.unique(groups):
        at = groups == g
        ra[at], rb[at] = sps.rankdata(a[at]), sps.rankdata(b[at])
    return ra, rb


def within_position_stats(x: Any, pc1: Any, entropy: Any, positions: Any, seed: int = 0) -> dict[str, Any]:
    """The entropy statistics position cannot fake: pooled within-position Pearson and Spearman of PC1 scores `pc1`
    (n,) with the `entropy` (n,), and the held-out ridge R^2 of `x` (n,d) for the entropy beyond each position's mean
    (`linear_probe_r2` with groups), over the points of positions where the entropy varies (`varying_groups`); a
    position where it does not contributes nothing. {"not_measurable": reason} where fewer than MIN_WITHIN_POINTS
    such points remain (bijection without replacement has none: its entropy is a function of position)."""
    h, pos = _np(entropy).ravel(), np.asarray(positions).ravel()
    keep = varying_groups(h, pos)
    if not keep.any():
        return {
            "not_measurable": "the posterior entropy does not vary within any position (it is a function of the "
            "position alone), so its correlation with anything is a statistic of position"
        }
    if int(keep.sum()) < MIN_WITHIN_POINTS:
        return {
            "not_measurable": f"only {int(keep.sum())} points at positions where the posterior entropy varies "
            f"(needs {MIN_WITHIN_POINTS})"
        }
    a, s, h, pos = _np(x)[keep], _np(pc1).ravel()[keep], h[keep], pos[keep]
    corr = within_group_correlations(s, h, pos)
    return {
        "n_points": int(keep.sum()),
        "n_positions": int(np.unique(pos).size),
        "pc1_pearson": corr["pearson"],
        "pc1_spearman": corr["spearman"],
        "entropy_r2": linear_probe_r2(a, h, seed=seed, groups=pos),
    }


def manifold_stats(x: Any, entropy: Any, seed: int = 0, positions: Any = None) -> dict[str, Any]:
    """PCA summary of representations `x` (n,d) against the posterior entropy (n,) of each point; given each point's
    position (n,), also `within_position` (`within_position_stats`). The pooled correlations and R^2 read the
    entropy's differences between positions too, which a representation of position alone carries."""
    ratios, scores = pca(x)
    best = best_pc(scores, entropy)
    out: dict[str, Any] = {
        "n_points": int(_np(entropy).size),
        "pc1_var": float(ratios[0]),
        "pc12_var": float(ratios[:2].sum()),
        "dim95": effective_dim(ratios, 0.95),
        "participation_ratio": participation_ratio(ratios),
        "best_pc": int(best["pc"]),
        "best_pc_pearson": float(best["pearson"]),
        "best_pc_spearman": float(best["spearman"]),
        "pc1_spearman": correlations(scores[:, 0], entropy)["spearman"],
        "entropy_r2": linear_probe_r2(x, entropy, seed=seed),
    }
    if positions is not None:
        out["within_position"] = within_position_stats(x, scores[:, 0], entropy, positions, seed=seed)
    return out


def reference_stats(z: Any, entropy: Any, seed: int = 0, positions: Any = None) -> dict[str, Any]:
    """The entropy statistics of `manifold_stats` for a reference representation `z` (n,F) -- features of what a
    predictor that cannot infer reads (the position, its own input) -- at the most it allows: its "PC1" is the
    held-out prediction of the entropy from `z` (`cross_fitted`), the component of any representation carrying
    only `z` that correlates best. A trained model's correlation at or below it is one `z` can fake."""
    best = cross_fitted(z, entropy, seed=seed)  # (n,)
    corr = correlations(best, entropy)
    out: dict[str, Any] = {
        "n_points": int(_np(entropy).size),
        "pc1_pearson": corr["pearson"],
        "pc1_spearman": corr["spearman"],
        "entropy_r2": linear_probe_r2(z, entropy, seed=seed),
    }
    if positions is not None:
        out["within_position"] = within_position_stats(z, best, entropy, positions, seed=seed)
    return out


def gaussian_manifold_baseline(n: int, d: int, entropy: Any, seed: int = 0, positions: Any = None) -> dict[str, Any]:
    """`manifold_stats` of i.i.d. Gaussian points (n,d) labelled with the same entropies (n,) (and positions):
    what PC1 share, participation ratio and entropy correlation look like with no structure at all (PC1 ~ 1/d,
    correlations ~ 0)."""
    x = np.random.default_rng(seed).standard_normal((int(n), int(d)))
    return manifold_stats(x, entropy, seed=seed, positions=positions)


# --------------------------------------------------------------------------------------------- clusters


def cluster_stats(x: Any, labels: Any, k: int, seed: int = 0, max_silhouette: int = 3000) -> dict[str, Any]:
    """k-means (k clusters) on rows of `x` (n,d) against reference `labels` (n,).

    Returns the adjusted Rand index between k-means clusters and `labels` (1 = same partition, ~0 = chance)
    and the silhouette of `labels` in the representation space (on at most `max_silhouette` points); where the rows
    take fewer than k distinct values, that many clusters and a `note` saying so.
    """
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score, silhouette_score

    a, lab = _np(x), np.asarray(labels).ravel()
    if a.ndim != 2 or a.shape[0] != lab.size:
        raise ValueError(f"x, labels: need x (n,d) and labels (n,) (got {a.shape} and {lab.shape})")
    if not 2 <= int(k) <= a.shape[0]:
        raise ValueError(f"k: must be in [2, {a.shape[0]}] (got {k})")
    # A collapsed representation (an untrained or dead model) has fewer distinct points than k: k-means cannot make
    # more clusters than that, so it makes as many as there are, and the record says so.
    distinct = int(np.unique(a, axis=0).shape[0])
    found = (
        KMeans(n_clusters=min(distinct, int(k)), n_init=4, random_state=seed).fit(a).labels_
        if distinct > 1
        else np.zeros(lab.size)
    )
    out: dict[str, Any] = {"ari": float(adjusted_rand_score(lab, found)), "n_points": int(lab.size)}
    if distinct < int(k):
        out["note"] = f"only {distinct} distinct representations among {lab.size} points: {distinct} clusters, not {k}"
    n_lab = np.unique(lab).size
    if 2 <= n_lab < lab.size:
        idx = np.random.default_rng(seed).permutation(lab.size)[:max_silhouette]
        if np.unique(lab[idx]).size >= 2:
            out["silhouette"] = float(silhouette_score(a[idx], lab[idx]))
    return out


# --------------------------------------------------------------------------------------------- dynamics


def first_step_where(steps: Sequence[int], ok: Sequence[bool]) -> int | None:
    """The first step from which `ok` holds at every later checkpoint too (None if it never settles)."""
    if len(steps) != len(ok):
        raise ValueError(f"steps, ok: need the same length (got {len(steps)} and {len(ok)})")
    found = None
    for s, good in zip(steps, ok, strict=True):
        if good and found is None:
            found = int(s)
        elif not good:
            found = None
    return found


# --------------------------------------------------------------------------------------------- intervals


def bootstrap_ratios(
    num: torch.Tensor, den: torch.Tensor, n_boot: int = 1000, seed: int = 0, level: float = 0.95
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per column of `num`, `den` (N,M) -- one row per sequence -- the ratio of column sums sum(num)/sum(den) (a
    mean where `den` is all ones) and its bootstrap `level` interval over rows, every column resampled with the same
    draws (paired). Returns (estimates (M,), intervals (M,2)) float64; nan where a sum of `den` is 0."""
    num, den = num.detach().double().cpu(), den.detach().double().cpu()
    if num.shape != den.shape or num.dim() != 2 or num.shape[0] < 1:
        shapes = f"{tuple(num.shape)}, {tuple(den.shape)}"
        raise ValueError(f"num, den: need the same (N,M) shape with N >= 1 (got {shapes})")
    n = num.shape[0]

    def ratio(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.where(b != 0, a / torch.where(b != 0, b, 1.0), torch.nan)

    est = ratio(num.sum(0), den.sum(0))  # (M,)
    if n_boot <= 0 or n < 2:
        return est, torch.stack([est, est], 1)
    g = torch.Generator().manual_seed(int(seed))
    draws = torch.randint(0, n, (int(n_boot), n), generator=g)  # (R,N) rows drawn with replacement
    counts = torch.zeros(int(n_boot), n, dtype=torch.float64).scatter_add_(1, draws, torch.ones_like(draws).double())
    boots = ratio(counts @ num, counts @ den)  # (R,M)
    alpha = (1 - level) / 2
    q = torch.nanquantile(boots, torch.tensor([alpha, 1 - alpha], dtype=torch.float64), dim=0)  # (2,M)
    return est, q.T
