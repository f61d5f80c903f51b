"""Metric functions on hand-computed inputs: entropies, KL, MAE vs curve MAE, accuracy, bootstrap intervals."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import Categorical, Normal

from windtunnel import tasks
from windtunnel.evaluation import metrics
from windtunnel.tasks.base import Batch


def _batch(post: torch.distributions.Distribution, targets: torch.Tensor, mask: torch.Tensor | None = None) -> Batch:
    B, T = targets.shape
    mask = torch.ones(B, T, dtype=torch.bool) if mask is None else mask
    return Batch(inputs=torch.zeros(B, T, dtype=torch.long), target_mask=mask, targets=targets, posterior=post)


def test_categorical_entropy_and_kl_match_hand_computation():
    p = torch.tensor([[[0.5, 0.5, 0.0, 0.0]]])  # (1,1,4), zeros: 0 log 0 = 0
    q = torch.tensor([[[0.25, 0.25, 0.25, 0.25]]])
    batch = _batch(Categorical(probs=p), torch.tensor([[1]]))
    pred = Categorical(probs=q)
    assert metrics.entropy_bits(batch.posterior).item() == pytest.approx(1.0)
    assert metrics.kl_bits(pred, batch) == pytest.approx(1.0)  # sum 0.5 log2(0.5/0.25) * 2
    assert metrics.entropy_mae_bits(pred, batch) == pytest.approx(1.0)
    assert metrics.nll_bits(pred, batch) == pytest.approx(2.0)
    # KL is asymmetric and infinite where the model gives 0 to a possible answer
    assert math.isinf(metrics.kl_divergence_bits(Categorical(probs=q), Categorical(probs=p)).item())


def test_normal_entropy_and_kl_closed_form():
    post = Normal(torch.tensor([[0.0]]), torch.tensor([[1.0]]))
    pred = Normal(torch.tensor([[1.0]]), torch.tensor([[2.0]]))
    batch = _batch(post, torch.tensor([[0.5]]))
    kl_nats = math.log(2.0) + (1 + 1) / (2 * 4) - 0.5
    assert metrics.kl_bits(pred, batch) == pytest.approx(kl_nats / math.log(2))
    assert metrics.entropy_mae_bits(pred, batch) == pytest.approx(1.0)  # differential entropies differ by log2(2)
    assert metrics.accuracy(pred, batch) is None
    nll = -pred.log_prob(torch.tensor(0.5)).item() / math.log(2)
    assert metrics.nll_bits(pred, batch) == pytest.approx(nll)


def test_mae_and_curve_mae_differ_when_errors_cancel():
    # two sequences, one position: model over-estimates entropy on one and under-estimates on the other
    post = Categorical(probs=torch.tensor([[[0.5, 0.5]], [[0.5, 0.5]]]))  # H = 1 bit both
    pred = Categorical(probs=torch.tensor([[[1.0, 0.0]], [[0.5, 0.5]]]))  # H = 0 and 1
    post2 = Categorical(probs=torch.tensor([[[0.5, 0.5]], [[1.0, 0.0]]]))  # H = 1 and 0
    b = _batch(post2, torch.zeros(2, 1, dtype=torch.long))
    assert metrics.entropy_mae_bits(pred, b) == pytest.approx(1.0)
    assert metrics.entropy_mae_curve_bits(pred, b) == pytest.approx(0.0)
    b1 = _batch(post, torch.zeros(2, 1, dtype=torch.long))
    assert metrics.entropy_mae_bits(pred, b1) == pytest.approx(0.5)
    assert metrics.entropy_mae_curve_bits(pred, b1) == pytest.approx(0.5)


def test_accuracy_and_mask_and_ragged_positions():
    logits = torch.tensor([[[2.0, 0.0], [0.0, 2.0], [2.0, 0.0]], [[0.0, 2.0], [0.0, 2.0], [0.0, 2.0]]])
    targets = torch.tensor([[0, 0, 0], [1, 1, 0]])
    mask = torch.tensor([[True, True, False], [False, True, True]])
    b = _batch(Categorical(logits=logits), targets, mask)
    # scored: seq0 pos0 (right), pos1 (wrong); seq1 pos1 (right), pos2 (wrong)
    assert metrics.accuracy(Categorical(logits=logits), b) == pytest.approx(0.5)
    t = metrics.score_table(Categorical(logits=logits), b)
    assert t.correct.tolist() == [[1.0, 0.0], [1.0, 0.0]]  # aligned by scored-position index
    mask_r = torch.tensor([[True, True, True], [False, True, False]])
    t = metrics.score_table(Categorical(logits=logits), _batch(Categorical(logits=logits), targets, mask_r))
    assert t.correct.shape == (2, 3) and torch.isnan(t.correct[1, 1:]).all()
    s = metrics.summarize(t, n_boot=0)
    assert s["metrics"]["accuracy"]["mean"] == pytest.approx(3 / 4)  # mean over the 4 scored pairs
    assert s["per_position"]["accuracy"] == [1.0, 0.0, 1.0]


def test_oracle_zero_and_uniform_floor_on_bijection():
    task = tasks.make("bijection")
    batch = task.sample(64, seed=1)
    t = metrics.score_table(batch.posterior, batch)
    assert metrics.summarize(t, n_boot=0)["metrics"]["kl_bits"]["mean"] == 0.0
    assert metrics.entropy_mae_bits(batch.posterior, batch) == 0.0
    assert metrics.accuracy(batch.posterior, batch) == metrics.bayes_accuracy(batch)
    uniform = Categorical(logits=torch.zeros(*batch.target_mask.shape, 20))
    closed = math.log2(20) - sum(math.log2(20 - t) for t in range(19)) / 19
    assert metrics.entropy_mae_bits(uniform, batch) == pytest.approx(closed, abs=1e-9)
    assert closed == pytest.approx(1.1073, abs=1e-4)


def test_bootstrap_interval_contains_mean_and_shrinks_with_n():
    g = torch.Generator().manual_seed(0)
    widths = []
    for n in (50, 800):
        probs = torch.softmax(torch.randn(n, 4, 3, generator=g), -1)
        post = Categorical(probs=torch.softmax(torch.randn(n, 4, 3, generator=g), -1))
        b = _batch(post, torch.zeros(n, 4, dtype=torch.long))
        s = metrics.summarize(metrics.score_table(Categorical(probs=probs), b), n_boot=500, seed=3)
        for name in ("entropy_mae_bits", "kl_bits", "entropy_mae_curve_bits", "accuracy"):
            m = s["metrics"][name]
            assert m["lo"] <= m["mean"] <= m["hi"], name
        widths.append(s["metrics"]["kl_bits"]["hi"] - s["metrics"]["kl_bits"]["lo"])
        assert s["metrics"]["kl_bits"]["mean"] == pytest.approx(metrics.kl_bits(Categorical(probs=probs), b))
    assert widths[1] < widths[0] / 2
    assert len(s["per_position"]["kl_bits"]) == 4


def test_table_concatenation_equals_one_batch():
    task = tasks.make("hmm", K=5)
    batch = task.sample(20, seed=0)
    pred = Categorical(logits=torch.zeros(*batch.target_mask.shape, task.spec.n_classes))
    whole = metrics.summarize(metrics.score_table(pred, batch), n_boot=0)["metrics"]
    halves = []
    for sl in (slice(0, 7), slice(7, 20)):
        sub = Batch(
            batch.inputs[sl], batch.target_mask[sl], batch.targets[sl], Categorical(probs=batch.posterior.probs[sl])
        )
        halves.append(metrics.score_table(Categorical(logits=pred.logits[sl]), sub))
    split = metrics.summarize(metrics.ScoreTable.cat(halves), n_boot=0)["metrics"]
    for k in whole:
        assert split[k]["mean"] == pytest.approx(whole[k]["mean"])


def test_impossible_mass_is_the_model_probability_on_ruled_out_answers():
    p = torch.tensor([[[0.5, 0.5, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]])  # (1,2,4)
    q = torch.tensor([[[0.4, 0.4, 0.15, 0.05], [0.97, 0.01, 0.01, 0.01]]])
    batch = _batch(Categorical(probs=p), torch.tensor([[0, 0]]))
    table = metrics.score_table(Categorical(logits=q.log()), batch)
    assert table.impossible_mass[0].tolist() == pytest.approx([0.2, 0.03])
    s = metrics.summarize(table, n_boot=0)["metrics"]
    assert s["impossible_mass"]["mean"] == pytest.approx(0.115)
    # the leak costs far more entropy than KL: the asymmetry the headline metric punishes
    assert (
        metrics.entropy_mae_bits(Categorical(probs=q[:, 1:]), _batch(Categorical(probs=p[:, 1:]), torch.tensor([[0]])))
        > 0.2
    )
    assert metrics.kl_bits(Categorical(probs=q[:, 1:]), _batch(Categorical(probs=p[:, 1:]), torch.tensor([[0]]))) < 0.05
    normal = metrics.score_table(
        Normal(torch.zeros(1, 1), torch.ones(1, 1)),
        _batch(Normal(torch.zeros(1, 1), torch.ones(1, 1)), torch.zeros(1, 1)),
    )
    assert normal.impossible_mass is None


def _ragged_table(n: int, seed: int) -> metrics.ScoreTable:
    """A Categorical ScoreTable over n sequences of 5 positions, each sequence scoring 1..5 of them."""
    g = torch.Generator().manual_seed(seed)
    pred = Categorical(logits=torch.randn(n, 5, 4, generator=g))
    post = Categorical(logits=2 * torch.randn(n, 5, 4, generator=g))
    mask = torch.rand(n, 5, generator=g) < 0.7
    mask[:, 0] = True
    return metrics.score_table(pred, _batch(post, torch.randint(0, 4, (n, 5), generator=g), mask))


def test_bootstrap_blocks_are_bounded_and_draw_the_classic_bootstrap():
    n, R = 50_000, 1000
    total = torch.zeros(R, dtype=torch.float64)  # (R,) draws per resample
    sq, block_totals, start = 0.0, [], 0
    for rows, counts in metrics._bootstrap_blocks(n, R, seed=0):
        assert counts.shape == (R, rows.stop - rows.start) and counts.numel() <= metrics.BOOT_BLOCK_ELEMS
        assert rows.start == start and (counts >= 0).all()
        start = rows.stop
        total += counts.sum(1)
        sq += float(((counts - 1) ** 2).sum())
        if rows.stop < n:
            block_totals.append(counts.sum(1))
    assert start == n and (total == n).all()  # every resample draws n whole sequences
    assert sq / (n * R) == pytest.approx(1 - 1 / n, abs=0.01)  # Binomial(n, 1/n) per sequence
    size = rows.start // len(block_totals)
    var = torch.stack(block_totals).var(1).mean()  # a block's share: Binomial(n, size/n)
    assert float(var) == pytest.approx(size * (1 - size / n), rel=0.05)


def test_summarize_memory_does_not_scale_with_sequences_times_resamples(monkeypatch):
    n, R = 50_000, 1000
    largest = []
    blocks = metrics._bootstrap_blocks

    def spy(*args):
        for rows, counts in blocks(*args):
            largest.append(counts.numel())
            yield rows, counts

    monkeypatch.setattr(metrics, "_bootstrap_blocks", spy)
    s = metrics.summarize(_ragged_table(n, seed=1), n_boot=R, seed=0)
    assert len(largest) > 1 and max(largest) <= metrics.BOOT_BLOCK_ELEMS < n * R // 40
    assert s["metrics"]["kl_bits"]["lo"] < s["metrics"]["kl_bits"]["mean"] < s["metrics"]["kl_bits"]["hi"]


def test_bootstrap_agrees_with_brute_force_resampling_and_means_are_exact():
    n, R = 300, 4000
    table = _ragged_table(n, seed=2)
    s = metrics.summarize(table, n_boot=R, seed=5)
    assert s == metrics.summarize(table, n_boot=R, seed=5)  # deterministic for a seed
    point = metrics.summarize(table, n_boot=0)["metrics"]
    idx = torch.randint(0, n, (R, n), generator=torch.Generator().manual_seed(99))  # (R,n) resampled sequences

    def check(name: str, boots: torch.Tensor, mean: float) -> None:
        m = s["metrics"][name]
        assert m["mean"] == point[name]["mean"] and m["mean"] == pytest.approx(mean, rel=1e-12, abs=1e-15)
        lo, hi = (float(q) for q in torch.quantile(boots, torch.tensor([0.025, 0.975], dtype=torch.float64)))
        assert (m["lo"], m["hi"]) == pytest.approx((lo, hi), abs=0.1 * (hi - lo)), name  # Monte-Carlo noise

    for name, attr in metrics.PER_SEQUENCE_METRICS.items():
        x = getattr(table, attr)  # (n,S)
        check(name, x[idx].flatten(1).nanmean(1), float(x.nanmean()))
    hm, hb = table.model_entropy_bits, table.bayes_entropy_bits
    curve = (hm[idx].nanmean(1) - hb[idx].nanmean(1)).abs().nanmean(1)  # (R,)
    check("entropy_mae_curve_bits", curve, float((hm.nanmean(0) - hb.nanmean(0)).abs().mean()))
