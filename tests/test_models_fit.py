"""Each architecture learns a tiny bijection (V=4) in a few hundred CPU steps; the per-position MLP cannot."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from windtunnel import models, tasks
from windtunnel.models import presets

TASK = tasks.make("bijection", V=4, L=4)
# Exact posterior entropies log 4, log 3, log 2, 0: a context-blind model sits at KL ~0.59 nats from Bayes.


def fit_kl(arch: str, steps: int = 200) -> float:
    """Train on fresh batches with cross-entropy; return the mean KL(posterior || model) in nats on held-out data."""
    torch.manual_seed(0)
    spec = TASK.spec
    model = models.make(arch, spec, presets.preset("bijection", arch, "smoke", spec=spec))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        b = TASK.sample(32, generator=g)
        loss = F.cross_entropy(model(b.inputs)[b.target_mask], b.targets[b.target_mask])
        opt.zero_grad()
        loss.backward()
        opt.step()
    test = TASK.sample(512, seed=123)
    with torch.no_grad():
        logp = model(test.inputs).log_softmax(-1)  # (B,T,K)
    p = test.posterior.probs
    kl = (p * (p.clamp_min(1e-12).log() - logp)).sum(-1)  # (B,T)
    return kl[test.target_mask].mean().item()


@pytest.mark.parametrize("arch", ["transformer", "mamba", "lstm", "mlp"])
def test_context_models_approach_bayes(arch):
    assert fit_kl(arch) < 0.15


def test_pointwise_mlp_stays_context_blind():
    assert fit_kl("mlp-pointwise") > 0.45
