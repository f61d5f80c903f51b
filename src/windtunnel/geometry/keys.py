"""Key orthogonality (the "hypothesis frame"): how close to orthogonal are the keys of a set of tokens?

A weight-only probe, no forward pass: for layer l and head h,
    K^{(l,h)} = RMSNorm_l(E[tokens]) @ W_K^{(l,h)T}          (n_tokens, d_head)
with E the token embedding, RMSNorm_l the layer's pre-attention norm and W_K^{(l,h)} the head's key rows. For
layers > 0 the same token embeddings go through that layer's norm and W_K (the real layer-l keys also carry
the residual updates of earlier layers and positions; this probe measures only the weights). Tokens: the
answer tokens when the spec says answers are input tokens (bijection values), else every input token.
Reported: mean |off-diagonal cosine| per layer and head, beside the same architecture at initialisation and
i.i.d. Gaussian keys of the same shape (E|cos| ~ sqrt(2/(pi d_head))).

Beside it, the authors' statistic (official qkv_analysis.py:cmd_orthogonality): K = E[tokens] @ W_K^{(l,h)T} from
the RAW embeddings (no norm, no positions, at every layer), rows normalised, the SIGNED mean (and std) of the
off-diagonal cosines per head; per layer the mean over heads, on the same tokens as ours. Its Gaussian baseline
has mean 0 and spread sqrt(2/(n(n-1) d_head)). With an init model, `layer0_direction` says in words
(DIRECTION_WORDS) how training moved layer 0 on both statistics.

Token sets. The top-level numbers are on `probe_tokens` (the VALUE tokens V..2V-1 of sep-vocab bijection, labelled
by `token_set`), which is NOT the authors' set: their cmd_orthogonality keys tok_emb(0..V-1), the KEY tokens.
`by_token_set` repeats every statistic, with its own init and Gaussian baselines, on each set of `token_sets`
(bijection: "key_tokens" = 0..V-1, the authors' set, and "value_tokens"; other token tasks: "all_tokens").

Model contract relied on (models/transformer.py): `model.embed.token_weight` (V,d), `model.blocks[l].norm1`, and
`model.blocks[l].attn.w_k` (the (d,d) key projection, rows = heads x d_head) with `.attn.n_heads`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch import nn

from windtunnel.geometry.data import not_applicable
from windtunnel.geometry.stats import (
    cosine_matrix,
    expected_abs_cosine_random,
    gaussian_keys_baseline,
    gaussian_signed_cosine_baseline,
    mean_abs_offdiag_cosine,
    signed_offdiag_cosine,
)

if TYPE_CHECKING:
    from windtunnel.models.common import InputEmbedding
    from windtunnel.models.transformer import Block

PAPER = {"layer0_mean_abs_cos": 0.052, "random_baseline": 0.082, "source": "v3 (MC); official checklist: < 0.1"}

# The one vocabulary for how training moved layer 0 (trained vs init): ours compares mean |cos| (lower = more
# orthogonal); the authors' compares |signed mean cos| (closer to 0 = more orthogonal on average). A change
# of at most DIRECTION_TOL (cosine units) either way is "unchanged".
DIRECTION_TOL = 0.005
DIRECTION_WORDS = {
    "ours_mean_abs_cos": {-1: "more orthogonal than at init", 1: "less orthogonal than at init", 0: "unchanged"},
    "authors_signed_mean_cos": {-1: "closer to 0 than at init", 1: "further from 0 than at init", 0: "unchanged"},
}


def _frame_parts(model: nn.Module) -> str | None:
    """Reason the key probe cannot run on `model`, or None when it can."""
    blocks = getattr(model, "blocks", None)
    if blocks is None or not all(hasattr(getattr(b, "attn", None), "w_k") for b in blocks):
        return "the architecture has no attention keys"
    embed = getattr(model, "embed", None)
    if embed is None or getattr(embed, "token_weight", None) is None:
        return "the task has real-valued inputs: there are no token embeddings to key"
    return None


def probe_tokens(spec: Any) -> torch.Tensor:
    """Token ids of the top-level key statistics: the answer (VALUE) tokens if they are inputs, else the whole
    vocabulary. Not the authors' set for bijection (they used the key tokens 0..V-1: `token_sets`)."""
    if spec.answer_token_offset is not None:
        lo = int(spec.answer_token_offset)
        return torch.arange(lo, lo + int(spec.n_classes))
    return torch.arange(int(spec.vocab_size))


def token_sets(spec: Any) -> dict[str, torch.Tensor]:
    """Named token sets to key: where answers are input tokens, "key_tokens" = 0..K-1 (the authors'
    qkv_analysis.py tok_ids = arange(V); sep-vocab keys) and "value_tokens" (`probe_tokens`); else "all_tokens"."""
    if spec.answer_token_offset is None:
        return {"all_tokens": probe_tokens(spec)}
    return {
        "key_tokens": torch.arange(min(int(spec.n_classes), int(spec.vocab_size))),
        "value_tokens": probe_tokens(spec),
    }


@torch.no_grad()
def token_keys(model: nn.Module, norm: bool = True, tokens: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Per layer (H, n_tokens, d_head) weight-only keys of `tokens` (default `probe_tokens`; see module docstring);
    norm=False: of the RAW embeddings, no norm and no positions even for l > 0 (the authors' cmd_orthogonality)."""
    # the contract above (nn.Module's stubs type the attributes it does not know as `Tensor | Module`)
    embed, blocks = cast("InputEmbedding", model.embed), cast("Iterable[Block]", model.blocks)
    weight = embed.token_weight
    assert weight is not None  # token inputs (_frame_parts)
    ids = probe_tokens(model.spec) if tokens is None else tokens
    emb = weight[ids.to(weight.device)]  # (n,d)
    out = []
    for block in blocks:
        attn = block.attn
        k = (block.norm1(emb) if norm else emb) @ attn.w_k.T  # (n,d)
        out.append(k.view(k.shape[0], attn.n_heads, -1).transpose(0, 1).float().cpu())  # (H,n,dh)
    return out


def raw_token_keys(model: nn.Module, tokens: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Per layer (H, n_tokens, d_head) keys of the RAW embeddings of `tokens` (default `probe_tokens`): the
    authors' statistic's input."""
    return token_keys(model, norm=False, tokens=tokens)


def direction(stat: str, trained: float, init: float, tol: float = DIRECTION_TOL) -> str:
    """DIRECTION_WORDS[stat] for the change init -> trained (|values| for the signed statistic)."""
    if stat == "authors_signed_mean_cos":
        trained, init = abs(trained), abs(init)
    delta = trained - init
    return DIRECTION_WORDS[stat][0 if abs(delta) <= tol else (1 if delta > 0 else -1)]


def key_cosines(model: nn.Module) -> np.ndarray:
    """(L,H,n,n) key cosine matrices of the probe tokens, for the heatmaps."""
    return np.stack([np.stack([cosine_matrix(k) for k in layer]) for layer in token_keys(model)])


def _per_head(model: nn.Module, tokens: torch.Tensor | None = None) -> list[list[float]]:
    return [[mean_abs_offdiag_cosine(k) for k in layer] for layer in token_keys(model, tokens=tokens)]


def _authors_per_head(
    model: nn.Module, tokens: torch.Tensor | None = None
) -> tuple[list[list[float]], list[list[float]]]:
    """(signed mean, std) of the off-diagonal cosines of the raw keys, each (L,H)."""
    stats = [[signed_offdiag_cosine(k) for k in layer] for layer in raw_token_keys(model, tokens)]
    return [[m for m, _ in layer] for layer in stats], [[s for _, s in layer] for layer in stats]


def _orthogonality(model: nn.Module, tokens: torch.Tensor, init_model: nn.Module | None, seed: int) -> dict[str, Any]:
    """Both statistics of `tokens`' keys, per layer and head, with Gaussian (and, given `init_model`, init)
    baselines: the schema of the top level of `key_orthogonality` and of each `by_token_set` entry."""
    per_head = _per_head(model, tokens)
    keys0 = token_keys(model, tokens=tokens)[0]  # (H,n,dh)
    n, dh = int(keys0.shape[1]), int(keys0.shape[2])
    if n < 2:
        return not_applicable("fewer than two probe tokens")
    out: dict[str, Any] = {
        "tokens": [int(tokens.min()), int(tokens.max())],
        "n_tokens": n,
        "d_head": dh,
        "mean_abs_cos_per_layer": [float(np.mean(h)) for h in per_head],
        "mean_abs_cos_per_head": per_head,
        "gaussian_baseline": gaussian_keys_baseline(n, dh, seed=seed),
        "gaussian_expected": expected_abs_cosine_random(dh),
    }
    signed, spread = _authors_per_head(model, tokens)
    out.update(
        {
            "authors_signed_mean_cos_per_layer": [float(np.mean(h)) for h in signed],
            "authors_signed_mean_cos_per_head": signed,
            "authors_signed_std_cos_per_head": spread,
            "authors_gaussian_baseline": gaussian_signed_cosine_baseline(n, dh, seed=seed),
        }
    )
    if init_model is not None:
        init = _per_head(init_model, tokens)
        out["init_mean_abs_cos_per_layer"] = [float(np.mean(h)) for h in init]
        out["init_authors_signed_mean_cos_per_layer"] = [
            float(np.mean(h)) for h in _authors_per_head(init_model, tokens)[0]
        ]
        out["layer0_direction"] = {
            "ours_mean_abs_cos": direction(
                "ours_mean_abs_cos", out["mean_abs_cos_per_layer"][0], out["init_mean_abs_cos_per_layer"][0]
            ),
            "authors_signed_mean_cos": direction(
                "authors_signed_mean_cos",
                out["authors_signed_mean_cos_per_layer"][0],
                out["init_authors_signed_mean_cos_per_layer"][0],
            ),
        }
        out["direction_tolerance"] = DIRECTION_TOL
    layer0 = out["mean_abs_cos_per_layer"][0]
    out["layer0_vs_gaussian_pct"] = 100.0 * (layer0 - out["gaussian_baseline"]) / out["gaussian_baseline"]
    return out


def key_orthogonality(model: nn.Module, init_model: nn.Module | None = None, seed: int = 0) -> dict[str, Any]:
    """Key orthogonality per layer and head: ours (mean |cos|, normed keys) and the authors' (signed, raw keys).

    Each with its Gaussian baseline; with `init_model`, the init values and the layer-0 direction in words. Top
    level: on `probe_tokens` (named in `token_set`); `by_token_set`: the same on every set of `token_sets`.
    """
    reason = _frame_parts(model)
    if reason:
        return not_applicable(reason)
    spec = model.spec
    out = _orthogonality(model, probe_tokens(spec), init_model, seed)
    if "not_applicable" in out:
        return out
    sets = token_sets(spec)
    out["token_set"] = "value_tokens" if "value_tokens" in sets else "all_tokens"
    out["by_token_set"] = {name: _orthogonality(model, ids, init_model, seed) for name, ids in sets.items()}
    out["paper"] = PAPER
    return out
