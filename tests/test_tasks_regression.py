"""Bayesian regression: predictive against an independent numpy computation, layout, entropy trajectory."""

from __future__ import annotations

import math

import numpy as np
import pytest

from windtunnel import tasks
from windtunnel.evaluation.metrics import entropy_bits


@pytest.mark.parametrize("params", [dict(), dict(d=1, n=5, tau=2.0, sigma=0.1), dict(d=3, n=4, tau=0.5, sigma=1.5)])
def test_predictive_matches_direct_inverse(params):
    task = tasks.make("regression", **params)
    p = task.params
    b = task.sample(4, seed=3)
    xs, ys = b.latent["xs"].double().numpy(), b.latent["ys"].double().numpy()
    for i in range(4):
        for t in range(p.n):
            X, y, x = xs[i, :t], ys[i, :t], xs[i, t]
            cov = np.linalg.inv(X.T @ X / p.sigma**2 + np.eye(p.d) / p.tau**2)
            mu = cov @ X.T @ y / p.sigma**2
            assert b.posterior.loc[i, 2 * t].item() == pytest.approx(x @ mu, abs=1e-4)
            assert b.posterior.scale[i, 2 * t].item() ** 2 == pytest.approx(p.sigma**2 + x @ cov @ x, rel=1e-5)
            assert b.targets[i, 2 * t].item() == pytest.approx(ys[i, t])


def test_layout_and_spec():
    task = tasks.make("regression")
    spec = task.spec
    assert (spec.input_kind, spec.answer_kind, spec.seq_len, spec.input_dim) == ("real", "real", 47, 6)
    assert math.isinf(spec.log10_hypotheses)
    b = task.sample(3, seed=0)
    x = b.inputs
    np.testing.assert_array_equal(x[:, 0::2, :4].numpy(), b.latent["xs"].numpy())
    assert float(x[:, 0::2, 4:].abs().max()) == 0.0
    np.testing.assert_array_equal(x[:, 1::2, 4].numpy(), b.latent["ys"][:, :-1].numpy())
    assert bool((x[:, 1::2, 5] == 1).all()) and float(x[:, 1::2, :4].abs().max()) == 0.0
    # unscored y positions carry N(0, 1)
    assert float(b.posterior.loc[:, 1::2].abs().max()) == 0.0 and bool((b.posterior.scale[:, 1::2] == 1).all())


def test_ys_follow_the_weights():
    b = tasks.make("regression", sigma=0.5).sample(256, seed=1)
    resid = b.latent["ys"] - (b.latent["xs"] * b.latent["w"][:, None]).sum(-1)
    assert resid.std().item() == pytest.approx(0.5, rel=0.05)


def test_entropy_moves_from_prior_to_noise():
    """Defaults: the predictive entropy starts near the prior's and ends near the noise floor."""
    b = tasks.make("regression").sample(512, seed=2)
    curve = entropy_bits(b.posterior)[:, 0::2].mean(0)  # (n,)
    floor = 0.5 * math.log2(2 * math.pi * math.e * 0.25)
    assert curve[0].item() > floor + 1.5
    assert curve[-1].item() < floor + 0.25
    assert bool((curve[1:] < curve[:-1] + 0.05).all())  # (nearly) monotone decrease


@pytest.mark.parametrize(
    ("params", "match"),
    [
        (dict(d=0), r"regression\.d: .*greater than or equal to 1"),
        (dict(n=0), r"regression\.n: .*greater than or equal to 1"),
        (dict(tau=0), r"regression\.tau: .*greater than 0"),
        (dict(sigma=-1.0), r"regression\.sigma: .*greater than 0"),
    ],
)
def test_bad_params(params, match):
    with pytest.raises(ValueError, match=match):
        tasks.make("regression", **params)


def test_pair_tokens_put_each_x_beside_its_y_and_change_nothing_else():
    import torch

    plain = tasks.make("regression", d=3, n=5).sample(4, seed=11)
    paired_task = tasks.make("regression", d=3, n=5, pair_tokens=True)
    paired = paired_task.sample(4, seed=11)
    xs = plain.latent["xs"]
    torch.testing.assert_close(paired.inputs[:, 1::2, :3], xs[:, :-1])  # y-token i carries x_i
    torch.testing.assert_close(paired.inputs[:, 0::2], plain.inputs[:, 0::2])  # x-tokens unchanged
    torch.testing.assert_close(paired.inputs[:, 1::2, 3:], plain.inputs[:, 1::2, 3:])  # y and flag unchanged
    assert torch.equal(paired.target_mask, plain.target_mask) and torch.equal(paired.targets, plain.targets)
    torch.testing.assert_close(paired.posterior.loc, plain.posterior.loc)
    assert paired_task.describe(paired)[1].startswith("(x=[")
