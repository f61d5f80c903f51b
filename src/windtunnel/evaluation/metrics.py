"""Metrics in bits: pure functions of (predictive distribution, Batch). One definition per name.

* `entropy_mae_bits`       mean over (sequence, scored position) of |H_model - H_bayes|  (the headline)
* `entropy_mae_curve_bits` per scored-position index: average H_model and H_bayes over sequences first, take
                           |diff|, then average over positions (the authors' calibration-figure number)
* `kl_bits`                KL(posterior || model) per scored position, averaged
* `nll_bits`               mean -log2 q(target)
* `accuracy`               argmax model == realised target (classes only; None for real answers)
* `bayes_accuracy`         argmax posterior == realised target (a reference ceiling)

For real answers (Normal), entropies are differential entropies in bits and KL is the Gaussian KL in bits.
Positions are indexed by scored-position index: the t-th scored position of each sequence.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

import torch
from scipy import stats
from torch.distributions import Categorical, Distribution, Normal

from windtunnel.tasks.base import Batch

LN2 = math.log(2.0)


def _params(dist: Distribution) -> tuple[str, tuple[torch.Tensor, ...]]:
    """Float64 parameters of a Categorical (log-probs) or Normal (loc, scale)."""
    if isinstance(dist, Categorical):
        if "probs" in dist.__dict__:  # given as probabilities: keep exact zeros (log 0 = -inf)
            p = dist.probs.double()
            return "cat", ((p / p.sum(-1, keepdim=True)).log(),)
        return "cat", (torch.log_softmax(dist.logits.double(), -1),)
    if isinstance(dist, Normal):
        return "normal", (dist.loc.double(), dist.scale.double())
    raise TypeError(f"metrics: unsupported distribution {type(dist).__name__} (Categorical or Normal)")


def entropy_bits(dist: Distribution) -> torch.Tensor:
    """Entropy in bits per batch element (0 log 0 = 0; differential entropy for Normal)."""
    kind, ps = _params(dist)
    if kind == "cat":
        logp = ps[0]
        return -(logp.exp() * logp).nan_to_num(0.0).sum(-1) / LN2
    return (0.5 * math.log(2 * math.pi * math.e) + ps[1].log()) / LN2


def kl_divergence_bits(p: Distribution, q: Distribution) -> torch.Tensor:
    """KL(p || q) in bits per batch element; terms with p = 0 contribute 0."""
    kp, pp = _params(p)
    kq, pq = _params(q)
    if kp != kq:
        raise TypeError("metrics: KL between different distribution families")
    if kp == "cat":
        logp, logq = pp[0], pq[0]
        prob = logp.exp()
        term = torch.where(prob > 0, prob * (logp - logq), torch.zeros_like(prob))
        return term.sum(-1) / LN2
    (m1, s1), (m2, s2) = pp, pq
    return (torch.log(s2 / s1) + (s1**2 + (m1 - m2) ** 2) / (2 * s2**2) - 0.5) / LN2


def _argmax(dist: Categorical) -> torch.Tensor:
    return dist.logits.argmax(-1)


@dataclass
class ScoreTable:
    """Per-(sequence, scored-position) values, shape (N, S); NaN where a sequence has fewer scored positions.

    Concatenate tables from several batches with `ScoreTable.cat`, then aggregate with `summarize`.
    """

    model_entropy_bits: torch.Tensor  # (N,S)
    bayes_entropy_bits: torch.Tensor  # (N,S)
    kl_bits: torch.Tensor  # (N,S)
    nll_bits: torch.Tensor  # (N,S)
    correct: torch.Tensor | None  # (N,S) 1.0/0.0, None for real answers
    bayes_correct: torch.Tensor | None  # (N,S)
    # (N,S) model probability on the classes the exact posterior rules out (probability 0), None for real answers.
    # Tiny in KL (about its size / ln 2) but costly in entropy (about m log2(n/m) bits): the leak the entropy
    # error punishes.
    impossible_mass: torch.Tensor | None = None
    # (N,S) the exact posterior's own -log2 p(target): the model's NLL minus it, paired by answer, has expectation
    # KL(exact ‖ model) >= 0 for any predictor that reads only the input (`marks.sees_the_answer`)
    bayes_nll_bits: torch.Tensor | None = None

    @property
    def entropy_abs_err_bits(self) -> torch.Tensor:
        return (self.model_entropy_bits - self.bayes_entropy_bits).abs()

    @staticmethod
    def cat(tables: list[ScoreTable]) -> ScoreTable:
        """Stack tables along the sequence axis (padding the position axis with NaN)."""
        S = max(t.kl_bits.shape[1] for t in tables)

        def pad(x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.pad(x, (0, S - x.shape[1]), value=float("nan"))

        out: dict[str, Any] = {}  # field name -> (N,S) tensor, or None for an Optional field
        for f in fields(ScoreTable):
            vals = [getattr(t, f.name) for t in tables]
            out[f.name] = None if any(v is None for v in vals) else torch.cat([pad(v) for v in vals])
        return ScoreTable(**out)


def _to_table(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Scatter per-(b,t) values (B,T) at mask into (B,S): the s-th scored position of each row, NaN padded."""
    B = mask.shape[0]
    rank = mask.long().cumsum(1) - 1  # (B,T) index among scored positions
    S = int(mask.sum(1).max().item()) if mask.any() else 0
    out = torch.full((B, max(S, 1)), float("nan"), dtype=torch.float64, device=x.device)
    rows = torch.arange(B, device=x.device)[:, None].expand_as(mask)
    out[rows[mask], rank[mask]] = x[mask].double()
    return out[:, :S] if S else out[:, :0]


def to_table(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-(b,t) values (B,T) as (B,S) float64 by scored-position index (the s-th scored position of each row), NaN
    where a row has fewer scored positions."""
    return _to_table(x, mask)


def score_table(pred: Distribution, batch: Batch) -> ScoreTable:
    """Score a predictive distribution (batch shape (B,T)) against a batch's exact posterior and targets."""
    mask = batch.target_mask.bool()
    post = batch.posterior
    if tuple(pred.batch_shape) != tuple(mask.shape):
        raise ValueError(f"metrics: predictive batch shape {tuple(pred.batch_shape)} != mask {tuple(mask.shape)}")
    h_model = entropy_bits(pred)
    h_bayes = entropy_bits(post)
    kl = kl_divergence_bits(post, pred)  # TypeError unless both are Categorical or both Normal
    correct: torch.Tensor | None
    bayes_correct: torch.Tensor | None
    impossible: torch.Tensor | None
    if isinstance(pred, Categorical):
        assert isinstance(post, Categorical)
        logq = _params(pred)[1][0]
        tgt = torch.where(mask, batch.targets, torch.zeros_like(batch.targets)).long()
        nll = -logq.gather(-1, tgt[..., None])[..., 0] / LN2
        bayes_nll = -_params(post)[1][0].gather(-1, tgt[..., None])[..., 0] / LN2
        correct = (_argmax(pred) == tgt).double()
        bayes_correct = (_argmax(post) == tgt).double()
        impossible = (logq.exp() * (post.probs == 0)).sum(-1)  # (B,T)
    else:
        assert isinstance(pred, Normal) and isinstance(post, Normal)
        tgt = torch.where(mask, batch.targets, torch.zeros_like(batch.targets)).double()
        nll = -Normal(pred.loc.double(), pred.scale.double(), validate_args=False).log_prob(tgt) / LN2
        bayes_nll = -Normal(post.loc.double(), post.scale.double(), validate_args=False).log_prob(tgt) / LN2
        correct = bayes_correct = impossible = None
    return ScoreTable(
        model_entropy_bits=_to_table(h_model, mask),
        bayes_entropy_bits=_to_table(h_bayes, mask),
        kl_bits=_to_table(kl, mask),
        nll_bits=_to_table(nll, mask),
        correct=None if correct is None else _to_table(correct, mask),
        bayes_correct=None if bayes_correct is None else _to_table(bayes_correct, mask),
        impossible_mass=None if impossible is None else _to_table(impossible, mask),
        bayes_nll_bits=_to_table(bayes_nll, mask),
    )


def _mean(x: torch.Tensor) -> float:
    return float(x.nanmean().item())


def _curve_mae(h_model: torch.Tensor, h_bayes: torch.Tensor) -> float:
    return _mean((h_model.nanmean(0) - h_bayes.nanmean(0)).abs())


# --- the named metrics: one definition each -------------------------------------------------------------


def entropy_mae_bits(pred: Distribution, batch: Batch) -> float:
    """Mean over (sequence, scored position) of |H_model - H_bayes| in bits (the headline metric)."""
    return _mean(score_table(pred, batch).entropy_abs_err_bits)


def entropy_mae_curve_bits(pred: Distribution, batch: Batch) -> float:
    """|mean-over-sequences H_model - mean-over-sequences H_bayes| per position, averaged over positions."""
    t = score_table(pred, batch)
    return _curve_mae(t.model_entropy_bits, t.bayes_entropy_bits)


def kl_bits(pred: Distribution, batch: Batch) -> float:
    """KL(exact posterior || model) in bits, averaged over (sequence, scored position)."""
    return _mean(score_table(pred, batch).kl_bits)


def nll_bits(pred: Distribution, batch: Batch) -> float:
    """Mean -log2 q(realised target) over scored positions (differential for real answers)."""
    return _mean(score_table(pred, batch).nll_bits)


def accuracy(pred: Distribution, batch: Batch) -> float | None:
    """Fraction of scored positions where the model's argmax is the realised target; None for real answers."""
    c = score_table(pred, batch).correct
    return None if c is None else _mean(c)


def bayes_accuracy(batch: Batch) -> float | None:
    """Accuracy of the exact posterior's argmax: the best any predictor can do on average."""
    c = score_table(batch.posterior, batch).bayes_correct
    return None if c is None else _mean(c)


# --- aggregation: per-position curves and bootstrap intervals --------------------------------------------

PER_SEQUENCE_METRICS = {
    "entropy_mae_bits": "entropy_abs_err_bits",
    "kl_bits": "kl_bits",
    "nll_bits": "nll_bits",
    "accuracy": "correct",
    "bayes_accuracy": "bayes_correct",
    "model_entropy_bits": "model_entropy_bits",
    "bayes_entropy_bits": "bayes_entropy_bits",
    "impossible_mass": "impossible_mass",
}


# Elements (resamples x sequences) of one block of bootstrap counts: bounds the bootstrap's memory whatever n.
BOOT_BLOCK_ELEMS = 1 << 20


def _bootstrap_blocks(n: int, n_boot: int, seed: int) -> Iterator[tuple[slice, torch.Tensor]]:
    """(rows, (R,c) resample counts) for consecutive blocks of c sequences, R x c <= BOOT_BLOCK_ELEMS.

    Over all blocks each resample's counts are Multinomial(n, 1/n): n whole sequences drawn with replacement (the
    classic bootstrap). A block's share of a resample's draws is binomial given the draws not yet placed, and the
    share is spread uniformly over the block, so peak memory is O(BOOT_BLOCK_ELEMS), not O(n_boot x n).
    Deterministic for (n, n_boot, seed).
    """
    g = torch.Generator().manual_seed(seed)
    c = max(1, BOOT_BLOCK_ELEMS // n_boot)
    left = torch.full((n_boot,), float(n), dtype=torch.float64)  # (R,) draws not yet placed
    for a in range(0, n, c):
        size = min(c, n - a)
        share = size / (n - a)  # the block's probability for each draw not yet placed: 1 for the last block
        m = left if share == 1 else torch.binomial(left, torch.full_like(left, share), generator=g)  # (R,)
        left = left - m
        draw_of = torch.repeat_interleave(torch.arange(n_boot), m.long())  # (M,) resample of each draw, M ~ R*size
        seq = torch.randint(0, size, draw_of.shape, generator=g)  # (M,) sequence within the block
        counts = torch.bincount(draw_of * size + seq, minlength=n_boot * size).view(n_boot, size)  # (R,size)
        yield slice(a, a + size), counts.double()


def _bootstrap(seq: torch.Tensor, hm: torch.Tensor, hb: torch.Tensor, n_boot: int, seed: int) -> torch.Tensor:
    """(R,M+1) bootstrap replicates: the M ratio estimators (counts @ sums) / (counts @ cnts) of `seq` (N,2M):
    M per-sequence sums then their M counts; last column the per-position curve MAE of entropies hm, hb (N,S)."""
    M, S = seq.shape[1] // 2, hm.shape[1]
    acc = torch.zeros(n_boot, 2 * M + 3 * S, dtype=torch.float64)  # (R,2M+3S) count-weighted sums
    for rows, counts in _bootstrap_blocks(seq.shape[0], n_boot, seed):
        m, b = hm[rows], hb[rows]  # (c,S) this block's entropies
        feats = torch.cat([seq[rows], m.nan_to_num(0.0), b.nan_to_num(0.0), (~m.isnan()).double()], 1)  # (c,2M+3S)
        acc += counts @ feats
    ratios = acc[:, :M] / acc[:, M : 2 * M]  # (R,M)
    cm, cb, denom = acc[:, 2 * M :].unflatten(1, (3, S)).unbind(1)  # (R,S) each
    curve = (cm / denom - cb / denom).abs().nanmean(1)  # (R,)
    return torch.cat([ratios, curve[:, None]], 1)


def summarize(table: ScoreTable, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
    """Aggregate metrics with bootstrap intervals over sequences, plus per-position curves.

    Returns {"metrics": {name: {"mean", "lo", "hi"}}, "per_position": {curve: [...]}}. Aggregates that are
    not defined (accuracy for real answers) are None. The bootstrap resamples whole sequences; every statistic
    is a ratio of count-weighted sums over sequences, accumulated block by block (`_bootstrap_blocks`).
    """
    alpha = (1 - level) / 2
    names, sums, cnts = [], [], []
    for name, attr in PER_SEQUENCE_METRICS.items():
        x = getattr(table, attr)
        if x is None:
            continue
        names.append(name)
        sums.append(x.nan_to_num(0.0).sum(1).cpu())  # (N,) per-sequence sum
        cnts.append((~x.isnan()).sum(1).double().cpu())  # (N,) per-sequence scored positions
    hm, hb = table.model_entropy_bits.cpu(), table.bayes_entropy_bits.cpu()  # (N,S)
    boots = _bootstrap(torch.stack(sums + cnts, 1), hm, hb, n_boot, seed) if n_boot > 0 else None

    def interval(mean: float, b: torch.Tensor | None) -> dict[str, float]:
        if b is None:
            return {"mean": mean, "lo": mean, "hi": mean}
        q = torch.quantile(b, torch.tensor([alpha, 1 - alpha], dtype=torch.float64))
        return {"mean": mean, "lo": float(q[0]), "hi": float(q[1])}

    metrics: dict[str, dict[str, float] | None] = dict.fromkeys(PER_SEQUENCE_METRICS)
    for j, name in enumerate(names):
        metrics[name] = interval(float(sums[j].sum() / cnts[j].sum()), None if boots is None else boots[:, j])
    metrics["entropy_mae_curve_bits"] = interval(_curve_mae(hm, hb), None if boots is None else boots[:, -1])

    def curve(x: torch.Tensor | None) -> list[float] | None:
        return None if x is None else [float(v) for v in x.nanmean(0).cpu()]

    per_position = {
        "model_entropy_bits": curve(table.model_entropy_bits),
        "bayes_entropy_bits": curve(table.bayes_entropy_bits),
        "entropy_abs_err_bits": curve(table.entropy_abs_err_bits),
        "kl_bits": curve(table.kl_bits),
        "accuracy": curve(table.correct),
    }
    return {"metrics": metrics, "per_position": per_position}


# --- intervals of paired differences and of seed means ------------------------------------------------------


def ratio_intervals(
    sums: torch.Tensor, counts: torch.Tensor, n_boot: int = 1000, seed: int = 0, level: float = 0.95
) -> list[dict[str, float]]:
    """Per column of `sums` (N,M) -- per-sequence sums of a per-position quantity, e.g. a difference of two KLs --
    its mean over scored positions (sum of sums / sum of `counts`: (N,) shared by every column, or (N,M) one per
    column, e.g. 1 where a sequence is scored at one position) with a bootstrap interval over whole sequences. Every
    column is resampled with the same draws, so differences are paired by sequence."""
    sums, counts = sums.double().cpu(), counts.double().cpu()
    cols = counts if counts.dim() == 2 else counts[:, None].expand_as(sums)  # (N,M) scored positions per column
    means = sums.sum(0) / cols.sum(0).clamp_min(1.0)  # (M,)
    if n_boot <= 0 or sums.shape[0] < 2:
        return [{"mean": float(m), "lo": float(m), "hi": float(m)} for m in means]
    M = sums.shape[1]
    acc = torch.zeros(n_boot, 2 * M, dtype=torch.float64)  # (R,2M) resampled sums, then counts
    for rows, draws in _bootstrap_blocks(sums.shape[0], n_boot, seed):
        acc += draws @ torch.cat([sums[rows], cols[rows]], 1)
    boots = acc[:, :M] / acc[:, M:].clamp_min(1.0)  # (R,M)
    alpha = (1 - level) / 2
    q = torch.quantile(boots, torch.tensor([alpha, 1 - alpha], dtype=torch.float64), dim=0)  # (2,M)
    return [{"mean": float(m), "lo": float(q[0, j]), "hi": float(q[1, j])} for j, m in enumerate(means)]


def seed_interval(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """Two-sided Student-t interval of the mean of >= 2 seed values (training-seed spread)."""
    n = len(values)
    m = sum(values) / n
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return m - half, m + half


# --- evidence against "reads only the input", valid whatever the tails -------------------------------------------

# The bets of `evidence_bits`: the e-value is the average of one product per fraction staked, so it is within
# log2(len(BETS)) bits of the best of them in hindsight and a single sequence with nothing to show ruins none.
BETS = (1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625)


def evidence_bits(log_e: torch.Tensor) -> float:
    """log2 of an e-value over independent units, from each unit's own log e-value `log_e` (N,), natural log: a
    nonnegative e_i whose expectation is at most 1 under the null hypothesis. The e-value is the average over the
    fractions lambda of `BETS` of prod_i (1 - lambda + lambda e_i): each product has expectation at most 1 for
    independent units, so their average does, and by Markov's inequality it reaches 1/alpha with probability at most
    alpha under the null hypothesis -- whatever the distribution of the e_i, heavy tails included (no variance, no
    normal or bootstrap approximation is assumed). 0 bits for no units."""
    log_e = log_e.double().cpu()
    if log_e.numel() == 0:
        return 0.0
    per_bet = []
    for lam in BETS:
        if lam == 1.0:
            per_bet.append(log_e.sum())
            continue
        stake = torch.logaddexp(torch.full_like(log_e, math.log1p(-lam)), log_e + math.log(lam))  # log(1-l+l e)
        per_bet.append(stake.sum())
    total = torch.stack(per_bet).logsumexp(0) - math.log(len(BETS))
    return float(total) / LN2
