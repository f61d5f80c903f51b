"""Logit lens: how close to the exact posterior is the head applied to the residual stream after each layer?

For layer l (0 = the embedding, L = after the last layer) at scored positions, lens_l =
predictive(head(final_norm(resid[l]))) and, in bits, averaged over scored positions, in both directions:
    ours:      KL(posterior || lens_l)                     "kl_bits_per_layer"
    authors':  KL(lens_l || posterior + POSTERIOR_FLOOR)   "kl_lens_to_posterior_bits_per_layer"
The authors' direction (official train.py:evaluate_kl_layers, KL(model || Bayes + 1e-12)) is infinite wherever
the lens puts mass on an answer the posterior rules out (bijection: revealed values; recall: a point mass), so
the posterior is floored at 1e-12 as theirs was; `lens_mass_on_impossible_per_layer` says how much mass that
is. For real answers both are Gaussian KLs (no floor). KL_L is the model's own KL (the head reads resid[L]).

Model contract relied on: `model.norm` (the final norm) and `model.head` (the output head), as in
models/transformer.py; the residual stream after the embedding and every layer (hook points `embed` and
`blocks.{l}.resid_post`, `ProbeData.resid`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributions import Categorical

from windtunnel.evaluation.metrics import kl_divergence_bits
from windtunnel.geometry.data import ProbeData, model_spec, not_applicable
from windtunnel.models.base import predictive

POSTERIOR_FLOOR = 1e-12  # added to the posterior's probabilities in the authors' direction (as they did)

DIRECTION = {
    "kl_bits_per_layer": "KL(posterior || lens): ours, the same direction as metrics.kl_bits",
    "kl_lens_to_posterior_bits_per_layer": f"KL(lens || posterior + {POSTERIOR_FLOOR:g}): the authors' "
    "(official evaluate_kl_layers, KL(model || Bayes))",
}


def floored(posterior: Any, floor: float = POSTERIOR_FLOOR) -> Any:
    """The posterior with `floor` added to every class probability (Normal posteriors are returned as they are)."""
    if not isinstance(posterior, Categorical):
        return posterior
    return Categorical(probs=posterior.probs.double() + floor, validate_args=False)  # renormalised in metrics


@torch.no_grad()
def logit_lens(model: nn.Module, data: ProbeData) -> dict[str, Any]:
    """Mean KL between the posterior and lens_l, both directions, in bits at scored positions for every layer."""
    norm, head = getattr(model, "norm", None), getattr(model, "head", None)
    resid = data.resid
    if norm is None or head is None:
        return not_applicable("the model exposes no final norm + head (model.norm, model.head)")
    if len(resid) < 2:
        return not_applicable("the cache has no per-layer residual stream")
    post = data.batch.posterior
    post_floor = floored(post)
    kl, kl_rev, impossible = [], [], []
    for h in resid:
        q = predictive(model_spec(model), head(norm(h)))
        kl.append(float(kl_divergence_bits(post, q)[data.mask].mean()))  # (B,T) bits -> mean
        kl_rev.append(float(kl_divergence_bits(q, post_floor)[data.mask].mean()))
        if isinstance(post, Categorical):
            assert isinstance(q, Categorical)  # kl_divergence_bits raised for a q of another family
            mass = (q.probs.double() * (post.probs == 0)).sum(-1)  # (B,T) lens mass on ruled-out answers
            impossible.append(float(mass[data.mask].mean()))
    out: dict[str, Any] = {
        "kl_bits_per_layer": kl,
        "kl_lens_to_posterior_bits_per_layer": kl_rev,
        "direction": DIRECTION,
        "layers": ["embedding"] + [f"layer {i}" for i in range(len(resid) - 1)],
        "paper": {
            "kl": "falls with depth (official evaluate_kl_layers, KL(model || Bayes + 1e-12)); no number reported"
        },
    }
    if impossible:
        out["posterior_floor"] = POSTERIOR_FLOOR
        out["lens_mass_on_impossible_per_layer"] = impossible
    return out
