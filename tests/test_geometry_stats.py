"""Geometry statistics on synthetic inputs whose answer is known in closed form."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.metrics import adjusted_rand_score

from windtunnel.geometry import stats


def test_entropy_one_hot_and_uniform():
    rows = torch.zeros(3, 8)
    rows[0, 3] = 1.0
    rows[1] = 1 / 8
    rows[2, :5] = 1 / 5
    h = stats.probs_entropy_bits(rows)
    assert h[0].item() == pytest.approx(0.0, abs=1e-12)
    assert h[1].item() == pytest.approx(3.0)
    assert h[2].item() == pytest.approx(math.log2(5))


def test_kl_and_js():
    p = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    assert stats.probs_kl_bits(p, torch.log(p.clamp_min(1e-30)))[0].item() == pytest.approx(0.0, abs=1e-9)
    q = torch.full((3,), 1 / 3)
    # KL(one-hot || uniform over 3) = log2 3
    assert stats.probs_kl_bits(p[1], torch.log(q)).item() == pytest.approx(math.log2(3))
    a, b = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    assert stats.js_bits(a, b).item() == pytest.approx(1.0)
    assert stats.js_bits(a, a).item() == pytest.approx(0.0, abs=1e-9)


def test_orthonormal_keys_cosine_zero_and_parallel_one():
    q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((16, 16)))
    assert stats.mean_abs_offdiag_cosine(q[:10] * 3.0) == pytest.approx(0.0, abs=1e-10)
    same = np.tile(np.arange(1.0, 5.0), (6, 1))
    same[::2] *= -1  # anti-parallel counts as |cos| = 1
    assert stats.mean_abs_offdiag_cosine(same) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="keys"):
        stats.mean_abs_offdiag_cosine(np.ones((1, 4)))


@pytest.mark.parametrize("d", [8, 32, 192])
def test_gaussian_baseline_matches_closed_form(d):
    exact = stats.expected_abs_cosine_random(d)
    assert exact == pytest.approx(math.sqrt(2 / (math.pi * d)), rel=0.15)
    assert stats.gaussian_keys_baseline(40, d, seed=1, repeats=20) == pytest.approx(exact, rel=0.05)


def test_linear_function_of_entropy_gives_r2_one_and_spearman_one():
    rng = np.random.default_rng(0)
    h = rng.uniform(0, 4, size=400)
    direction = rng.standard_normal(12)
    x = np.outer(h, direction) + 0.5  # every point on one line through the offset
    out = stats.manifold_stats(x, h)
    assert out["pc1_var"] == pytest.approx(1.0, abs=1e-9)
    assert out["dim95"] == 1
    assert abs(out["best_pc_spearman"]) == pytest.approx(1.0)
    assert abs(out["best_pc_pearson"]) == pytest.approx(1.0)
    assert out["entropy_r2"] == pytest.approx(1.0, abs=1e-5)


def test_r2_of_noise_is_not_positive_and_never_above_one():
    rng = np.random.default_rng(1)
    r2 = stats.linear_probe_r2(rng.standard_normal((300, 5)), rng.standard_normal(300))
    assert r2 < 0.1
    assert r2 <= 1.0


def test_pca_ratios_and_effective_dim():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2000, 3)) * np.array([3.0, 1.0, 0.1])
    ratios, scores = stats.pca(x)
    expected = np.array([9.0, 1.0, 0.01]) / 10.01
    np.testing.assert_allclose(ratios, expected, atol=0.01)
    assert scores.shape == (2000, 3)
    assert stats.effective_dim(ratios, 0.95) == 2
    assert stats.effective_dim(ratios, 0.5) == 1
    with pytest.raises(ValueError, match="threshold"):
        stats.effective_dim(ratios, 1.5)


def test_well_separated_clusters_ari_one():
    rng = np.random.default_rng(3)
    labels = np.repeat(np.arange(5), 60)
    centres = rng.standard_normal((5, 8)) * 50
    x = centres[labels] + rng.standard_normal((300, 8)) * 0.1
    out = stats.cluster_stats(x, labels, k=5)
    assert out["ari"] == pytest.approx(1.0)
    assert out["silhouette"] > 0.9
    shuffled = rng.permutation(labels)
    bad = stats.cluster_stats(x, shuffled, k=5)
    assert -1 <= bad["ari"] < 0.1
    assert bad["silhouette"] < 0.1


def test_a_collapsed_representation_is_clustered_as_far_as_it_goes_and_says_so():
    """Fewer distinct points than k (a dead model): as many clusters as there are points, a note, no library warning."""
    labels = np.repeat(np.arange(4), 50)
    x = np.repeat(np.eye(3)[[0, 1]], 100, axis=0)  # (200,3): two distinct points, split along the labels 0-1 / 2-3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        two = stats.cluster_stats(x, labels, k=4)
        one = stats.cluster_stats(np.ones((200, 3)), labels, k=4)
    assert two["ari"] == pytest.approx(adjusted_rand_score(labels // 2, labels)) and "only 2 distinct" in two["note"]
    assert one["ari"] == 0.0 and "only 1 distinct" in one["note"]
    assert "note" not in stats.cluster_stats(np.eye(4)[labels], labels, k=4)


def test_first_step_where_settles():
    steps = [0, 10, 20, 30, 40]
    assert stats.first_step_where(steps, [False, True, False, True, True]) == 30
    assert stats.first_step_where(steps, [True] * 5) == 0
    assert stats.first_step_where(steps, [True, True, True, True, False]) is None


def test_correlations_constant_input_is_zero():
    assert stats.correlations(np.ones(10), np.arange(10)) == {"pearson": 0.0, "spearman": 0.0}


def test_signed_offdiag_cosine_hand_case():
    keys = np.array([[2.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])  # pairs: 0, -1, 0 (each twice off the diagonal)
    mean, std = stats.signed_offdiag_cosine(keys)
    assert mean == pytest.approx(-1 / 3)
    assert std == pytest.approx(math.sqrt(1 / 3 - 1 / 9))
    assert stats.signed_offdiag_cosine(np.tile([1.0, 2.0], (5, 1))) == pytest.approx((1.0, 0.0))


@pytest.mark.parametrize("n,d", [(6, 8), (20, 32)])
def test_gaussian_signed_baseline_centred_with_closed_form_spread(n, d):
    b = stats.gaussian_signed_cosine_baseline(n, d, seed=3, repeats=400)
    assert b["expected_std"] == pytest.approx(math.sqrt(2 / (n * (n - 1) * d)))
    assert abs(b["mean"]) < 4 * b["expected_std"] / math.sqrt(400)
    assert b["std"] == pytest.approx(b["expected_std"], rel=0.15)
    assert b["cos_std"] == pytest.approx(1 / math.sqrt(d), rel=0.15)
    with pytest.raises(ValueError, match="n, d"):
        stats.gaussian_signed_cosine_baseline(1, d)
