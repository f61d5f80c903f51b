"""Soft targets (`train.loss: posterior`): cross-entropy against the exact posterior for class answers, the closed-form
Gaussian KL for real ones; each checked against an independent formula, its minimum at the exact posterior, and the
sampled loss it replaces (same expectation, less variance)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch.distributions import Categorical, Normal

from windtunnel import tasks
from windtunnel.config import build_config
from windtunnel.models.base import LOGVAR_MAX, LOGVAR_MIN
from windtunnel.resolve import resolve_config, resolve_loss
from windtunnel.training.recipes import get_recipe, parse_recipe
from windtunnel.training.train import compute_loss

CLASS_TASKS = {"bijection": {"V": 6, "L": 5}, "hmm": {"S": 3, "O": 3, "K": 6}, "recall": {}}


def _batch(name: str, params: dict, n: int = 64):
    task = tasks.make(name, **params)
    return task, task.sample(n, seed=3)


@pytest.mark.parametrize("name", sorted(CLASS_TASKS))
def test_posterior_loss_is_the_expected_cross_entropy_and_is_least_at_the_posterior(name):
    task, batch = _batch(name, CLASS_TASKS[name])
    assert resolve_loss(build_config(overrides={"task.name": name, "train.loss": "posterior"}), task) == "soft_ce"
    assert isinstance(batch.posterior, Categorical)
    mask = batch.target_mask.bool()
    K = batch.posterior.probs.shape[-1]
    logits = torch.randn(*mask.shape, K, generator=torch.Generator().manual_seed(0))
    p, logq = batch.posterior.probs[mask], torch.log_softmax(logits[mask], -1)
    by_hand = sum(-(pi * lq).sum().item() for pi, lq in zip(p, logq, strict=True)) / len(p)
    assert compute_loss("soft_ce", task.spec, logits, batch).item() == pytest.approx(by_hand, rel=1e-5)
    # at the exact posterior the loss is its entropy, the least any predictor can reach
    at_exact = compute_loss("soft_ce", task.spec, torch.log(batch.posterior.probs.clamp_min(1e-30)), batch).item()
    entropy = batch.posterior.entropy()[mask].mean().item()
    assert at_exact == pytest.approx(entropy, abs=1e-5)
    assert compute_loss("soft_ce", task.spec, logits, batch).item() > at_exact
    # the sampled loss has the same expectation: averaged over many draws of the answers, ce -> soft_ce
    draws = batch.posterior.sample((4000,))[:, mask]  # (draws, N)
    sampled = -logq.gather(-1, draws.T).mean().item()
    assert sampled == pytest.approx(compute_loss("soft_ce", task.spec, logits, batch).item(), rel=0.02)


def test_gaussian_kl_is_the_closed_form_and_zero_at_the_exact_predictive():
    task, batch = _batch("regression", {"d": 2, "n": 6})
    assert resolve_loss(build_config(overrides={"task.name": "regression", "train.loss": "posterior"}), task) == (
        "gaussian_kl"
    )
    post, mask = batch.posterior, batch.target_mask.bool()
    assert isinstance(post, Normal)
    g = torch.Generator().manual_seed(1)
    mean, logvar = torch.randn(*mask.shape, generator=g), torch.randn(*mask.shape, generator=g).clamp(-3, 3)
    out = torch.stack([mean, logvar], -1)  # (B,T,2): the Gaussian head's mean and log-variance
    m0, s0 = post.loc[mask], post.scale[mask]
    m1, v1 = mean[mask], logvar[mask].exp()
    by_hand = (0.5 * torch.log(v1 / s0**2) + (s0**2 + (m0 - m1) ** 2) / (2 * v1) - 0.5).mean().item()
    assert compute_loss("gaussian_kl", task.spec, out, batch).item() == pytest.approx(by_hand, rel=1e-5)
    logvar_exact = (2 * torch.log(post.scale)).clamp(LOGVAR_MIN, LOGVAR_MAX)
    exact = torch.stack([post.loc, logvar_exact], -1)
    assert compute_loss("gaussian_kl", task.spec, exact, batch).item() == pytest.approx(0.0, abs=1e-5)

    # its gradient is the sampled Gaussian NLL's in expectation over answers drawn from the exact predictive
    def grad(loss: str, b) -> torch.Tensor:
        x = out.clone().requires_grad_(True)
        compute_loss(loss, task.spec, x, b).backward()
        return x.grad

    draws = 2000
    mean_nll = sum(grad("gaussian_nll", replace(batch, targets=post.sample())) for _ in range(draws)) / draws
    kl = grad("gaussian_kl", batch)
    assert torch.allclose(mean_nll[mask], kl[mask], atol=0.1 * kl[mask].abs().max().item())


@pytest.mark.parametrize(
    ("name", "params", "loss"),
    [("bijection", {}, "gaussian_kl"), ("bijection", {}, "gaussian_nll"), ("regression", {}, "soft_ce")],
)
def test_a_loss_for_the_other_kind_of_answer_is_refused_naming_train_loss(name, params, loss):
    with pytest.raises(ValueError, match=r"train\.loss: .*answers"):
        resolve_config(build_config(overrides={"task.name": name, "train.loss": loss, "model.preset": "smoke"}))


def test_soft_targets_are_a_recipe_of_their_own_while_other_loss_changes_stay_ablations():
    soft = get_recipe("soft")
    assert not soft.ablation and soft.overrides["train.loss"] == "posterior"
    with pytest.raises(ValueError, match="ablation"):
        parse_recipe({"name": "x", "overrides": {"train.loss": "ce"}})
    with pytest.raises(ValueError, match="ablation"):
        parse_recipe({"name": "x", "by_task": {"hmm": {"train.loss": "gaussian_nll"}}})
