"""Geometry statistics position cannot fake: entropy correlations and R^2 within position, beside a
context-blind reference, and across-seed summaries that respect the statistic's range and PC1's arbitrary sign.

A referee's two questions, asked of each statistic: can a representation that does not infer pass it (a position
code, the current token, an untrained model), and can one that carries the posterior entropy pass it?"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from windtunnel import models, tasks
from windtunnel.evaluation.metrics import entropy_bits, seed_interval
from windtunnel.geometry import stats
from windtunnel.geometry.data import ProbeData, collect
from windtunnel.geometry.manifold import context_blind, position_manifolds
from windtunnel.geometry.seeds import CORRELATION, FRACTION, LINEAR, PC_CORRELATION, R2, Scale, seed_summary

T, PER = 18, 200  # positions, points per position


def _positions() -> np.ndarray:
    return np.repeat(np.arange(T), PER)  # (n,)


def _position_code(pos: np.ndarray, rng: np.random.Generator, noise: int = 6) -> np.ndarray:
    """(n, 3 + noise) a smooth code of the position (what a positional embedding gives) and noise dimensions."""
    t = pos / T
    return np.column_stack([t, t**2, np.sin(3 * t), 0.1 * rng.standard_normal((pos.size, noise))])


# --- the statistics ----------------------------------------------------------------------------------------


def test_an_entropy_that_is_a_function_of_position_is_not_measurable_within_it():
    """Bijection without replacement: log2(20 - t) at every sequence (float noise 4e-16 within a position). A
    position code reaches pooled R^2 ~1 and |rho| ~1; within position there is nothing to measure."""
    rng = np.random.default_rng(0)
    pos = _positions()
    h = np.log2(20 - pos) + 4e-16 * rng.standard_normal(pos.size)
    out = stats.manifold_stats(_position_code(pos, rng), h, positions=pos)
    assert out["entropy_r2"] > 0.99 and abs(out["pc1_spearman"]) > 0.99  # the pooled statistics: position's
    assert "function of the position alone" in out["within_position"]["not_measurable"]


def test_a_position_code_cannot_fake_the_within_position_statistics():
    rng = np.random.default_rng(1)
    pos = _positions()
    h = np.log2(20 - pos) + 0.3 * rng.standard_normal(pos.size)  # varies within every position
    out = stats.manifold_stats(_position_code(pos, rng), h, positions=pos)
    assert out["entropy_r2"] > 0.8 and abs(out["pc1_spearman"]) > 0.8  # pooled: looks like an entropy manifold
    within = out["within_position"]
    assert within["n_points"] == pos.size and within["n_positions"] == T
    assert abs(within["pc1_spearman"]) < 0.05 and abs(within["pc1_pearson"]) < 0.05
    assert within["entropy_r2"] < 0.02


def test_a_representation_of_the_entropy_passes_within_position():
    rng = np.random.default_rng(2)
    pos = _positions()
    h = np.log2(20 - pos) + 0.3 * rng.standard_normal(pos.size)
    x = np.column_stack([3 * h, _position_code(pos, rng)])  # the entropy on the leading direction
    within = stats.manifold_stats(x, h, positions=pos)["within_position"]
    assert abs(within["pc1_spearman"]) > 0.99 and within["entropy_r2"] > 0.99


def test_positions_without_variance_contribute_nothing():
    rng = np.random.default_rng(3)
    pos = _positions()
    h = np.log2(20 - pos) + 0.3 * rng.standard_normal(pos.size)
    x = _position_code(pos, rng)
    score = x[:, 0] + rng.standard_normal(pos.size)
    x_const = rng.standard_normal((500, x.shape[1]))  # 5 more positions whose entropy does not vary
    pos_const = np.repeat(np.arange(T, T + 5), 100)
    both = stats.within_position_stats(
        np.vstack([x, x_const]),
        np.r_[score, rng.standard_normal(500)],
        np.r_[h, np.log2(pos_const)],
        np.r_[pos, pos_const],
    )
    assert both == stats.within_position_stats(x, score, h, pos)
    assert stats.varying_groups([1.0, 1.0, 2.0, 5.0, 7.0], [0, 0, 1, 2, 2]).tolist() == [
        False,
        False,
        False,
        True,
        True,
    ]
    too_few = stats.within_position_stats(np.zeros((4, 2)), [0, 1, 2, 3], [0.0, 1.0, 0.0, 2.0], [0, 0, 1, 1])
    assert too_few["not_measurable"].startswith("only 4 points")


def test_within_group_correlation_ignores_what_groups_differ_by():
    rng = np.random.default_rng(4)
    g = np.repeat(np.arange(10), 50)
    x, y = rng.standard_normal(500), rng.standard_normal(500)
    y = y + 0.5 * x
    shifted = stats.within_group_correlations(x + 10 * g, y - 7 * g**2, g)
    assert shifted == pytest.approx(stats.within_group_correlations(x, y, g))
    assert shifted["pearson"] == pytest.approx(np.corrcoef(x, y)[0, 1], abs=0.05)  # no offsets: the plain one
    assert stats.within_group_correlations(np.ones(500), y, g) == {"pearson": 0.0, "spearman": 0.0}


def test_grouped_r2_counts_only_what_group_means_leave():
    rng = np.random.default_rng(5)
    g = np.repeat(np.arange(20), 30)
    y = g.astype(float) + rng.standard_normal(600)
    x_group = np.column_stack([g, g**2]).astype(float)  # the group alone
    assert stats.linear_probe_r2(x_group, y) > 0.9  # pooled
    assert stats.linear_probe_r2(x_group, y, groups=g) == pytest.approx(0.0, abs=0.05)  # nothing beyond the group
    x_rest = np.column_stack([x_group, y - g])  # ... and the rest of y
    assert stats.linear_probe_r2(x_rest, y, groups=g) > 0.99
    with pytest.raises(ValueError, match="groups"):
        stats.linear_probe_r2(x_group, y, groups=g[:10])


def test_reference_stats_are_held_out_so_they_cannot_fake_what_is_not_there():
    """Its "PC1" is a cross-fitted prediction: 200 noise features for 1000 points fit any target in sample."""
    rng = np.random.default_rng(6)
    z, y = rng.standard_normal((1000, 200)), rng.standard_normal(1000)
    ref = stats.reference_stats(z, y, positions=np.repeat(np.arange(10), 100))
    assert abs(ref["pc1_spearman"]) < 0.1 and ref["entropy_r2"] < 0.05
    assert abs(ref["within_position"]["pc1_spearman"]) < 0.1
    in_sample = np.linalg.lstsq(np.column_stack([z, np.ones(1000)]), y, rcond=None)[0]
    assert np.corrcoef(np.column_stack([z, np.ones(1000)]) @ in_sample, y)[0, 1] > 0.4  # what it guards against


# --- the probe: a model, its init, the context-blind reference ---------------------------------------------


def _probe_data(task, rep_of) -> ProbeData:
    """ProbeData on 256 held-out sequences whose `final` representation is `rep_of(batch, entropy)` (B,T,d)."""
    torch.manual_seed(0)
    data = collect(models.make("transformer", task.spec, n_layers=1, n_heads=1, d_model=8), task, n=256)
    data.cache = {"final": rep_of(data.batch, data.post_entropy).float()}
    return data


@pytest.mark.parametrize("kind", ["infers", "position", "own token"])
def test_the_probe_sets_each_representation_beside_the_context_blind_reference(kind):
    """Bijection with replacement (the entropy varies within a position: how many distinct values are revealed, and
    whether the key repeats). A representation carrying the entropy beats the context-blind reference within
    position; a position code or the current token does not."""
    task = tasks.make("bijection", V=6, L=8, with_replacement=True)
    g = torch.Generator().manual_seed(0)

    def rep_of(batch, h):  # (B,T,8)
        B, L = batch.inputs.shape
        noise = 0.01 * torch.randn(B, L, 8, generator=g, dtype=torch.float64)
        if kind == "infers":
            return noise + torch.nn.functional.pad(h[..., None], (0, 7))
        if kind == "position":
            t = torch.arange(L, dtype=torch.float64) / L
            return noise + torch.stack([t, t**2, t.sin()], -1).expand(B, L, 3).repeat(1, 1, 3)[..., :8]
        tokens = torch.nn.functional.one_hot(batch.inputs, task.spec.vocab_size).double()  # (B,T,V)
        return noise + tokens @ torch.randn(task.spec.vocab_size, 8, generator=g, dtype=torch.float64)  # own token

    data = _probe_data(task, rep_of)
    m = position_manifolds(data, task)["scored_positions"]["final"]
    blind = m["context_blind"]
    w, wb = m["within_position"], blind["within_position"]
    assert wb["n_points"] == w["n_points"] > 1000 and wb["n_positions"] == w["n_positions"] == 7  # t=0 never varies
    if kind == "infers":  # (Spearman < 1: the exact entropy takes a few values, the noise breaks their ties)
        assert abs(w["pc1_pearson"]) > 0.99 and w["entropy_r2"] > 0.99
        assert abs(w["pc1_spearman"]) > abs(wb["pc1_spearman"]) + 0.2 and w["entropy_r2"] > wb["entropy_r2"] + 0.2
    else:
        assert abs(w["pc1_spearman"]) <= abs(wb["pc1_spearman"]) + 0.05 and w["entropy_r2"] <= wb["entropy_r2"] + 0.05
    if kind == "position":
        assert w["entropy_r2"] < 0.02 and abs(w["pc1_spearman"]) < 0.05  # position alone: nothing within


def test_context_blind_features_are_the_position_and_the_own_input():
    task = tasks.make("bijection", V=6, L=6)
    data = _probe_data(task, lambda batch, h: h[..., None])
    idx = torch.arange(int(data.mask.sum()))
    z = context_blind(data, data.mask, idx, task)  # (n, T+V)
    L, V = data.mask.shape[1], task.spec.vocab_size
    assert z.shape == (idx.numel(), L + V) and bool((z.sum(1) == 2).all())  # one position, one token
    assert torch.equal(z[:, :L].argmax(1), torch.arange(L).expand_as(data.mask)[data.mask])
    assert torch.equal(z[:, L:].argmax(1), data.batch.inputs[data.mask])
    reg = tasks.make("regression")
    rdata = _probe_data(reg, lambda batch, h: h[..., None])
    ridx = torch.arange(int(rdata.mask.sum()))
    D = reg.spec.input_dim
    assert context_blind(rdata, rdata.mask, ridx, reg).shape == (
        ridx.numel(),
        rdata.mask.shape[1] + D + D * (D + 1) // 2,
    )


def test_the_exact_entropy_varies_within_position_only_where_the_task_says_so():
    for params, varies in (({"V": 6, "L": 6}, False), ({"V": 6, "L": 8, "with_replacement": True}, True)):
        batch = tasks.make("bijection", **params).sample(64, seed=0)
        h, m = entropy_bits(batch.posterior).double(), batch.target_mask.bool()
        pos = torch.arange(m.shape[1]).expand_as(m)[m]
        assert stats.varying_groups(h[m].numpy(), pos.numpy()).any() == varies


# --- across seeds --------------------------------------------------------------------------------------------


def test_pc1_correlations_across_seeds_are_magnitudes():
    """Per-seed -0.70, -0.57, +0.61: one magnitude whose sign is the PC's; a signed mean's interval spans 0."""
    lo, hi = seed_interval([-0.70, -0.57, 0.61])
    assert lo < 0 < hi  # the old summary
    s = seed_summary([-0.70, -0.57, 0.61], PC_CORRELATION)
    assert s["values"] == [0.70, 0.57, 0.61] and s["scale"] == "Fisher z of |r|"
    z = [math.atanh(v) for v in (0.70, 0.57, 0.61)]
    assert s["mean"] == pytest.approx(math.tanh(sum(z) / 3))
    assert s["interval"] == pytest.approx([math.tanh(t) for t in seed_interval(z)])
    assert 0 < s["interval"][0] < s["mean"] < s["interval"][1] < 1


@pytest.mark.parametrize(
    "values,scale,old",
    [
        ([-0.971, -0.976], CORRELATION, (-1.004, -0.943)),  # two seeds' Spearman: a plain interval leaves [-1, 1]
        ([0.515, 0.625], FRACTION, (-0.130, 1.270)),  # two seeds' PC1 share: a plain interval leaves [0, 1]
        ([0.2, 0.9], R2, None),
    ],
)
def test_two_seed_intervals_stay_in_the_statistic_s_range(values, scale, old):
    if old is not None:
        assert seed_interval(values) == pytest.approx(old, abs=2e-3)
    s = seed_summary(values, scale)
    lo, hi = s["interval"]
    bound_lo = scale.lo if scale.lo is not None else -math.inf
    assert bound_lo <= lo <= s["mean"] <= hi <= (scale.hi if scale.hi is not None else math.inf)
    assert min(values) < s["mean"] < max(values)


def test_scales_round_trip_and_linear_is_the_plain_interval():
    for scale in (FRACTION, CORRELATION, R2, Scale("log(PR - 1)", 1.0, None), Scale("hi", None, 3.0)):
        for v in (0.3, 0.5, 0.9):
            assert scale.back(scale.to(v + (1.0 if scale.lo == 1.0 else 0.0))) == pytest.approx(
                v + (1.0 if scale.lo == 1.0 else 0.0)
            )
    plain = seed_summary([0.1, 0.4, 0.3])
    assert plain["interval"] == pytest.approx(list(seed_interval([0.1, 0.4, 0.3])))
    assert plain["mean"] == pytest.approx(0.8 / 3) and "scale" not in plain
    assert seed_summary([-0.4], PC_CORRELATION) == {
        "n_seeds": 1,
        "mean": 0.4,
        "values": [0.4],
        "interval": None,
        "scale": "Fisher z of |r|",
    }
    assert LINEAR.to(5.0) == 5.0
