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


def linear_probe_r2(x: Any, y: Any, test_frac: float = 0.2, seed: int = 0, ridge: float = 1e-6) -> float:
    """Held-out R^2 of a ridge regression from rows of `x` (n,d) to `y` (n,), on a fixed random split.

    Features are standardised on the training part; `ridge` is relative to the mean feature variance (1 after
    standardising), so a target that is an exact linear function of the features scores R^2 = 1 (up to ~1e-6).
    R^2 = 1 - SSE/SST on the test part (SST about the test mean), so it can be negative, never above 1.
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
    mu, sd = a[tr].mean(0), a[tr].std(0)
    sd[sd == 0] = 1.0
    xtr, xte = (a[tr] - mu) / sd, (a[te] - mu) / sd
    ymu = b[tr].mean()
    gram = xtr.T @ xtr + ridge * len(tr) * np.eye(a.shape[1])
    w = np.linalg.solve(gram, xtr.T @ (b[tr] - ymu))
    pred = xte @ w + ymu
    sst = ((b[te] - b[te].mean()) ** 2).sum()
    sse = ((b[te] - pred) ** 2).sum()
    if sst <= 0:
        return 1.0 if sse <= 1e-12 else 0.0
    return float(1.0 - sse / sst)


def manifold_stats(x: Any, entropy: Any, seed: int = 0) -> dict[str, float]:
    """PCA summary of representations `x` (n,d) against the posterior entropy (n,) of each point."""
    ratios, scores = pca(x)
    best = best_pc(scores, entropy)
    return {
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


def gaussian_manifold_baseline(n: int, d: int, entropy: Any, seed: int = 0) -> dict[str, float]:
    """`manifold_stats` of i.i.d. Gaussian points (n,d) labelled with the same entropies (n,): what PC1 share,
    participation ratio and entropy correlation look like with no structure at all (PC1 ~ 1/d, correlations ~ 0)."""
    return manifold_stats(np.random.default_rng(seed).standard_normal((int(n), int(d))), entropy, seed=seed)


# --------------------------------------------------------------------------------------------- clusters


def cluster_stats(x: Any, labels: Any, k: int, seed: int = 0, max_silhouette: int = 3000) -> dict[str, float]:
    """k-means (k clusters) on rows of `x` (n,d) against reference `labels` (n,).

    Returns the adjusted Rand index between k-means clusters and `labels` (1 = same partition, ~0 = chance)
    and the silhouette of `labels` in the representation space (on at most `max_silhouette` points).
    """
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score, silhouette_score

    a, lab = _np(x), np.asarray(labels).ravel()
    if a.ndim != 2 or a.shape[0] != lab.size:
        raise ValueError(f"x, labels: need x (n,d) and labels (n,) (got {a.shape} and {lab.shape})")
    if not 2 <= int(k) <= a.shape[0]:
        raise ValueError(f"k: must be in [2, {a.shape[0]}] (got {k})")
    km = KMeans(n_clusters=int(k), n_init=4, random_state=seed).fit(a)
    out = {"ari": float(adjusted_rand_score(lab, km.labels_)), "n_points": int(lab.size)}
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
