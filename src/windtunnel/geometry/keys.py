"""Key orthogonality (the "hypothesis frame"): how close to orthogonal are the keys of the answer tokens?

A weight-only probe, no forward pass: for layer l and head h,
    K^{(l,h)} = RMSNorm_l(E[tokens]) @ W_K^{(l,h)T}          (n_tokens, d_head)
with E the token embedding, RMSNorm_l the layer's pre-attention norm and W_K^{(l,h)} the head's key rows. For
layers > 0 the same token embeddings go through that layer's norm and W_K (the real layer-l keys also carry
the residual updates of earlier layers and positions; this probe measures only the weights). Tokens: the
answer tokens when the spec says answers are input tokens (bijection values), else every input token.
Reported: mean |off-diagonal cosine| per layer and head, beside the same architecture at initialisation and
i.i.d. Gaussian keys of the same shape (E|cos| ~ sqrt(2/(pi d_head))).

Model contract relied on (models/transformer.py): `model.embed.token_weight` (V,d), `model.blocks[l].norm1`,
`model.blocks[l].attn.qkv` (a bias-free Linear d -> 3d laid out [q; k; v], heads contiguous), `.attn.n_heads`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from windtunnel.geometry.data import not_applicable
from windtunnel.geometry.stats import (
    cosine_matrix,
    expected_abs_cosine_random,
    gaussian_keys_baseline,
    mean_abs_offdiag_cosine,
)

PAPER = {"layer0_mean_abs_cos": 0.052, "random_baseline": 0.082, "source": "v3 (MC); official checklist: < 0.1"}


def _frame_parts(model: nn.Module) -> str | None:
    """Reason the key probe cannot run on `model`, or None when it can."""
    blocks = getattr(model, "blocks", None)
    if blocks is None or not all(hasattr(getattr(b, "attn", None), "qkv") for b in blocks):
        return "the architecture has no attention keys"
    embed = getattr(model, "embed", None)
    if embed is None or getattr(embed, "token_weight", None) is None:
        return "the task has real-valued inputs: there are no token embeddings to key"
    return None


def probe_tokens(spec: Any) -> torch.Tensor:
    """Token ids whose keys form the frame: the answer tokens if they are inputs, else the whole vocabulary."""
    if spec.answer_token_offset is not None:
        lo = int(spec.answer_token_offset)
        return torch.arange(lo, lo + int(spec.n_classes))
    return torch.arange(int(spec.vocab_size))


@torch.no_grad()
def token_keys(model: nn.Module) -> list[torch.Tensor]:
    """Per layer (H, n_tokens, d_head) weight-only keys of the probe tokens (see module docstring)."""
    emb = model.embed.token_weight[probe_tokens(model.spec).to(model.embed.token_weight.device)]  # (n,d)
    out = []
    for block in model.blocks:
        attn = block.attn
        d = emb.shape[1]
        w_k = attn.qkv.weight[d : 2 * d]  # (d,d) rows = H heads x d_head
        k = block.norm1(emb) @ w_k.T  # (n,d)
        out.append(k.view(k.shape[0], attn.n_heads, -1).transpose(0, 1).float().cpu())  # (H,n,dh)
    return out


def key_cosines(model: nn.Module) -> np.ndarray:
    """(L,H,n,n) key cosine matrices of the probe tokens, for the heatmaps."""
    return np.stack([np.stack([cosine_matrix(k) for k in layer]) for layer in token_keys(model)])


def _per_head(model: nn.Module) -> list[list[float]]:
    return [[mean_abs_offdiag_cosine(k) for k in layer] for layer in token_keys(model)]


def key_orthogonality(model: nn.Module, init_model: nn.Module | None = None, seed: int = 0) -> dict[str, Any]:
    """Mean |off-diagonal cosine| of the probe tokens' keys per layer and head, with two random baselines."""
    reason = _frame_parts(model)
    if reason:
        return not_applicable(reason)
    per_head = _per_head(model)
    keys0 = token_keys(model)[0]
    n, dh = int(keys0.shape[1]), int(keys0.shape[2])
    if n < 2:
        return not_applicable("fewer than two probe tokens")
    out: dict[str, Any] = {
        "n_tokens": n,
        "d_head": dh,
        "mean_abs_cos_per_layer": [float(np.mean(h)) for h in per_head],
        "mean_abs_cos_per_head": per_head,
        "gaussian_baseline": gaussian_keys_baseline(n, dh, seed=seed),
        "gaussian_expected": expected_abs_cosine_random(dh),
    }
    if init_model is not None:
        init = _per_head(init_model)
        out["init_mean_abs_cos_per_layer"] = [float(np.mean(h)) for h in init]
    layer0 = out["mean_abs_cos_per_layer"][0]
    out["layer0_vs_gaussian_pct"] = 100.0 * (layer0 - out["gaussian_baseline"]) / out["gaussian_baseline"]
    out["paper"] = PAPER
    return out
