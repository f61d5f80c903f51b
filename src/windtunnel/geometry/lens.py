"""Logit lens: how close to the exact posterior is the head applied to the residual stream after each layer?

For layer l (0 = the embedding, L = after the last layer) at scored positions:
    KL_l = KL(posterior || predictive(head(final_norm(resid[l]))))   in bits,
averaged over scored positions. KL_L is the model's own KL (the head reads final_norm(resid[L])).

Model contract relied on: `model.norm` (the final norm) and `model.head` (the output head), as in
models/transformer.py; the cache's "resid" list (embedding, then after every layer).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from windtunnel.geometry.data import ProbeData, not_applicable
from windtunnel.metrics import kl_divergence_bits
from windtunnel.models.base import predictive


@torch.no_grad()
def logit_lens(model: nn.Module, data: ProbeData) -> dict[str, Any]:
    """Mean KL(posterior || lens_l) in bits at scored positions for every residual-stream layer."""
    norm, head = getattr(model, "norm", None), getattr(model, "head", None)
    resid = data.cache.get("resid") or []
    if norm is None or head is None:
        return not_applicable("the model exposes no final norm + head (model.norm, model.head)")
    if len(resid) < 2:
        return not_applicable("the cache has no per-layer residual stream")
    kl = []
    for h in resid:
        q = predictive(model.spec, head(norm(h)))
        k = kl_divergence_bits(data.batch.posterior, q)  # (B,T) bits
        kl.append(float(k[data.mask].mean()))
    return {"kl_bits_per_layer": kl, "layers": ["embedding"] + [f"layer {i}" for i in range(len(resid) - 1)],
            "paper": {"kl": "falls with depth (official evaluate_kl_layers); no number reported"}}
