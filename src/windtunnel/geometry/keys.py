"""Key orthogonality (the "hypothesis frame"): how close to orthogonal are the keys of a set of tokens?

Two definitions of a token's key, each reported with its own init and Gaussian baselines:
  * weight-only (the top level wherever the model exposes its key projection, as the built-in transformer does):
        K^{(l,h)} = RMSNorm_l(E[tokens]) @ W_K^{(l,h)T}          (n_tokens, d_head)
    with E the token embedding, RMSNorm_l the layer's pre-attention norm and W_K^{(l,h)} the head's key rows; for
    layers > 0 the same embeddings go through that layer's norm and W_K. It isolates what the paper's claim is about,
    how W_K places the tokens, free of positions and of earlier layers.
  * token keys (`token_keys`, always; the top level where the weights are not exposed: hf-gpt2, hf-gpt-neox,
    hf-llama, hf-phi, a user's model): read through hook points only (docs/hooks.md), the key the model itself
    computes for t at the first position of the one-token sequence [t], `blocks.{l}.attn.k` at position 0, per key
    head (H_k: the key/value heads under grouped-query attention, `n_key_heads`). At position 0 a token attends
    only to itself, so this is t's key under the model's own norm, its position-0 embedding and, for l > 0, earlier
    layers' updates on [t] alone. With learned positions the position-0 row is added to every token alike and pulls
    their keys together: on the smoke bijection transformer layer 0 reads 0.467 as token keys against 0.182
    weight-only (init 0.462 / 0.187), which is why it is not the top level where the weights can be read. The two
    agree at layer 0 where position 0 adds nothing (pos "none" or "rotary"; tests/test_keys_hooks.py).
Reported per layer and head: mean |off-diagonal cosine|, beside the same architecture at initialisation (same
definition) and i.i.d. Gaussian keys of the same shape (E|cos| ~ sqrt(2/(pi d_head))); `definition` names the top
level's. `key_cosines` (the figures) uses the top level's definition.

The authors' statistic (official qkv_analysis.py:cmd_orthogonality): K = E[tokens] @ W_K^{(l,h)T} from the RAW
embeddings (no norm, no positions, at every layer), rows normalised, the SIGNED mean (and std) of the off-diagonal
cosines per head; per layer the mean over heads, on the same tokens as ours. Its Gaussian baseline has mean 0 and
spread sqrt(2/(n(n-1) d_head)). It is a statistic of the weights, and the raw embeddings never appear at any hook
point, so it exists only where the weight contract does (`authors_*`, unchanged); elsewhere `authors_not_applicable`
says why, and no number is given. With an init model, `layer0_direction` says in words (DIRECTION_WORDS) how
training moved layer 0 on each statistic that exists.

Token sets. The top-level numbers are on `probe_tokens` (the VALUE tokens V..2V-1 of sep-vocab bijection, labelled
by `token_set`), which is NOT the authors' set: their cmd_orthogonality keys tok_emb(0..V-1), the KEY tokens.
`by_token_set` repeats every statistic, with its own init and Gaussian baselines, on each set of `token_sets`
(bijection: "key_tokens" = 0..V-1, the authors' set, and "value_tokens"; other token tasks: "all_tokens").

What each part relies on. Token keys: `model.spec` (token inputs), `model.n_layers`, `model.run_with_cache` and the
`blocks.{l}.attn.k` hook points, shape (B, H_k, T, d_head). The weight contract (models/transformer.py), read only
by the weight-only and the authors' statistics: `model.embed.token_weight` (V,d), `model.blocks[l].norm1`, and
`model.blocks[l].attn.w_k` (the (d,d) key projection, rows = heads x d_head) with `.attn.n_heads`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch import nn

from windtunnel.geometry.data import model_spec, not_applicable
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
    from windtunnel.models.hooks import HookedModel
    from windtunnel.models.transformer import Block

PAPER = {"layer0_mean_abs_cos": 0.052, "random_baseline": 0.082, "source": "v3 (MC); official checklist: < 0.1"}

KEY_POINT = "blocks.{l}.attn.k"  # the hook point token keys are read from (docs/hooks.md)
DEFINITION = (
    "token keys: blocks.{l}.attn.k at position 0 of the one-token sequence [t], per key head, read through hook "
    "points (the model's own norm, position-0 embedding and, for l > 0, earlier layers' updates on [t])"
)
WEIGHT_ONLY_DEFINITION = "RMSNorm_l(E[tokens]) @ W_K^(l,h)T from the weights (no positions, no residual updates)"

# The one vocabulary for how training moved layer 0 (trained vs init): ours compares mean |cos| (lower = more
# orthogonal); the authors' compares |signed mean cos| (closer to 0 = more orthogonal on average). A change
# of at most DIRECTION_TOL (cosine units) either way is "unchanged".
DIRECTION_TOL = 0.005
DIRECTION_WORDS = {
    "ours_mean_abs_cos": {-1: "more orthogonal than at init", 1: "less orthogonal than at init", 0: "unchanged"},
    "authors_signed_mean_cos": {-1: "closer to 0 than at init", 1: "further from 0 than at init", 0: "unchanged"},
}

NO_KEYS = "the architecture has no attention keys"
REAL_INPUTS = "the task has real-valued inputs: there are no token embeddings to key"


def _frame_parts(model: nn.Module) -> str | None:
    """Reason the key probe (token keys) cannot run on `model`, or None when it can: it needs `blocks.{l}.attn.k`
    hook points on every layer and token inputs, nothing else of the architecture."""
    names = getattr(model, "hook_names", None)
    n_layers = getattr(model, "n_layers", None)
    if not callable(getattr(model, "run_with_cache", None)) or names is None or not isinstance(n_layers, int):
        return NO_KEYS
    if n_layers < 1 or not all(KEY_POINT.format(l=l) in names for l in range(n_layers)):
        return NO_KEYS
    spec = getattr(model, "spec", None)
    if spec is None or getattr(spec, "input_kind", None) != "tokens":
        return REAL_INPUTS
    return None


def _weight_parts(model: nn.Module) -> str | None:
    """Reason the weight-only statistics (ours and the authors') cannot be computed on `model`, or None."""
    blocks = getattr(model, "blocks", None)
    if blocks is None or not all(
        hasattr(b, "norm1") and hasattr(getattr(b, "attn", None), "w_k") and hasattr(b.attn, "n_heads") for b in blocks
    ):
        return (
            "needs the key projection W_K as weights (attn.w_k, with norm1 and embed.token_weight: the built-in "
            "transformer's layout), which this architecture does not expose; the token keys need none"
        )
    embed = getattr(model, "embed", None)
    if embed is None or getattr(embed, "token_weight", None) is None:
        return "needs the token embedding matrix (embed.token_weight), which this architecture does not expose"
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


def _device(model: nn.Module) -> torch.device:
    for t in (*model.parameters(), *model.buffers()):
        return t.device
    return torch.device("cpu")


@torch.no_grad()
def token_keys(model: nn.Module, tokens: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Per layer (H_k, n_tokens, d_head) token keys of `tokens` (default `probe_tokens`): `blocks.{l}.attn.k` at
    position 0 of the one-token sequences [t] (module docstring). Reads hook points only; the model runs in eval mode
    for the pass and its modes are restored after. ValueError where the probe does not apply."""
    reason = _frame_parts(model)
    if reason:
        raise ValueError(f"token keys: {reason}")
    hooked = cast("HookedModel", model)
    ids = (probe_tokens(model_spec(model)) if tokens is None else tokens).reshape(-1)
    names = [KEY_POINT.format(l=l) for l in range(hooked.n_layers)]
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        _, cache = hooked.run_with_cache(ids.to(_device(model), torch.long)[:, None], names_filter=names)  # (n,1)
    finally:
        for m, mode in modes:
            m.training = mode
    out = []
    for name in names:
        k = cache[name]  # (n,H_k,1,dh)
        if k.dim() != 4 or k.shape[0] != ids.numel() or k.shape[2] != 1:
            raise ValueError(
                f"token keys: {name} has shape {tuple(k.shape)} on a batch of {ids.numel()} one-token sequences; "
                "expected (B,H,T,d_head) (docs/hooks.md)"
            )
        out.append(k[:, :, 0].transpose(0, 1).float().cpu())  # (H_k,n,dh)
    return out


@torch.no_grad()
def weight_only_keys(model: nn.Module, norm: bool = True, tokens: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Per layer (H, n_tokens, d_head) weight-only keys RMSNorm_l(E[tokens]) @ W_K^T (the top-level statistic);
    norm=False: of the RAW embeddings, no norm and no positions even for l > 0 (the authors' cmd_orthogonality).
    Reads the weight contract (module docstring); ValueError where the model lacks it."""
    reason = _weight_parts(model)
    if reason:
        raise ValueError(f"weight-only keys: {reason}")
    # the contract above (nn.Module's stubs type the attributes it does not know as `Tensor | Module`)
    embed, blocks = cast("InputEmbedding", model.embed), cast("Iterable[Block]", model.blocks)
    weight = embed.token_weight
    assert weight is not None  # token inputs (_weight_parts)
    ids = probe_tokens(model_spec(model)) if tokens is None else tokens
    emb = weight[ids.to(weight.device)]  # (n,d)
    out = []
    for block in blocks:
        attn = block.attn
        k = (block.norm1(emb) if norm else emb) @ attn.w_k.T  # (n,d)
        out.append(k.view(k.shape[0], attn.n_heads, -1).transpose(0, 1).float().cpu())  # (H,n,dh)
    return out


def raw_token_keys(model: nn.Module, tokens: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Per layer (H, n_tokens, d_head) keys of the RAW embeddings of `tokens` (default `probe_tokens`): the
    authors' statistic's input (weight contract)."""
    return weight_only_keys(model, norm=False, tokens=tokens)


def direction(stat: str, trained: float, init: float, tol: float = DIRECTION_TOL) -> str:
    """DIRECTION_WORDS[stat] for the change init -> trained (|values| for the signed statistic)."""
    if stat == "authors_signed_mean_cos":
        trained, init = abs(trained), abs(init)
    delta = trained - init
    return DIRECTION_WORDS[stat][0 if abs(delta) <= tol else (1 if delta > 0 else -1)]


def key_cosines(model: nn.Module) -> np.ndarray:
    """(L,H,n,n) cosine matrices of the probe tokens' keys under the top-level statistic's definition (weight-only
    where the weight contract exists, else token keys), for the heatmaps."""
    keys = weight_only_keys(model) if _weight_parts(model) is None else token_keys(model)
    return np.stack([np.stack([cosine_matrix(k) for k in layer]) for layer in keys])


def _abs_stats(keys: list[torch.Tensor], init_keys: list[torch.Tensor] | None, seed: int) -> dict[str, Any]:
    """Our statistic (mean |off-diagonal cos|) of per-layer (H,n,dh) keys, with its Gaussian baseline and, given the
    init model's keys (same definition), the init values and the layer-0 direction."""
    per_head = [[mean_abs_offdiag_cosine(k) for k in layer] for layer in keys]
    n, dh = int(keys[0].shape[1]), int(keys[0].shape[2])
    out: dict[str, Any] = {
        "mean_abs_cos_per_layer": [float(np.mean(h)) for h in per_head],
        "mean_abs_cos_per_head": per_head,
        "gaussian_baseline": gaussian_keys_baseline(n, dh, seed=seed),
        "gaussian_expected": expected_abs_cosine_random(dh),
    }
    if init_keys is not None:
        out["init_mean_abs_cos_per_layer"] = [
            float(np.mean([mean_abs_offdiag_cosine(k) for k in layer])) for layer in init_keys
        ]
    layer0 = out["mean_abs_cos_per_layer"][0]
    out["layer0_vs_gaussian_pct"] = 100.0 * (layer0 - out["gaussian_baseline"]) / out["gaussian_baseline"]
    return out


def _authors_per_head(keys: list[torch.Tensor]) -> tuple[list[list[float]], list[list[float]]]:
    """(signed mean, std) of the off-diagonal cosines of the raw keys, each (L,H)."""
    stats = [[signed_offdiag_cosine(k) for k in layer] for layer in keys]
    return [[m for m, _ in layer] for layer in stats], [[s for _, s in layer] for layer in stats]


def _orthogonality(model: nn.Module, tokens: torch.Tensor, init_model: nn.Module | None, seed: int) -> dict[str, Any]:
    """Every statistic of `tokens`' keys, per layer and head, with Gaussian (and, given `init_model`, init)
    baselines, each beside the number of its own definition: the schema of the top level of `key_orthogonality`
    and of each `by_token_set` entry. Top level: the weight-only statistic where the weight contract exists, else
    the token keys; `token_keys`: always the token keys (module docstring)."""
    n = int(tokens.numel())
    if n < 2:
        return not_applicable("fewer than two probe tokens")
    keys = token_keys(model, tokens)
    init_keys = token_keys(init_model, tokens) if init_model is not None else None
    tk: dict[str, Any] = {
        "definition": DEFINITION,
        "n_key_heads": int(keys[0].shape[0]),
        **_abs_stats(keys, init_keys, seed),
    }
    if init_keys is not None:
        tk["layer0_direction"] = {
            "ours_mean_abs_cos": direction(
                "ours_mean_abs_cos", tk["mean_abs_cos_per_layer"][0], tk["init_mean_abs_cos_per_layer"][0]
            )
        }
    reason = _weight_parts(model)
    out: dict[str, Any] = {"tokens": [int(tokens.min()), int(tokens.max())], "n_tokens": n}
    if reason is not None:  # no weights to read: the token keys are the statistic
        out.update({"d_head": int(keys[0].shape[2]), **tk})
        out["authors_not_applicable"] = f"the authors' raw-embedding statistic {reason}"
        out["token_keys"] = tk
        return out
    init_w = init_model if init_model is not None and _weight_parts(init_model) is None else None
    weight_keys = weight_only_keys(model, tokens=tokens)
    weight = _abs_stats(weight_keys, weight_only_keys(init_w, tokens=tokens) if init_w is not None else None, seed)
    signed, spread = _authors_per_head(raw_token_keys(model, tokens))
    out.update(
        {
            "definition": WEIGHT_ONLY_DEFINITION,
            "d_head": int(weight_keys[0].shape[2]),
            **weight,
            "authors_signed_mean_cos_per_layer": [float(np.mean(h)) for h in signed],
            "authors_signed_mean_cos_per_head": signed,
            "authors_signed_std_cos_per_head": spread,
            "authors_gaussian_baseline": gaussian_signed_cosine_baseline(n, int(weight_keys[0].shape[2]), seed=seed),
        }
    )
    if init_w is not None:
        init_signed = [float(np.mean(h)) for h in _authors_per_head(raw_token_keys(init_w, tokens))[0]]
        out["init_authors_signed_mean_cos_per_layer"] = init_signed
        out["layer0_direction"] = {
            "ours_mean_abs_cos": direction(
                "ours_mean_abs_cos", out["mean_abs_cos_per_layer"][0], out["init_mean_abs_cos_per_layer"][0]
            ),
            "authors_signed_mean_cos": direction(
                "authors_signed_mean_cos", out["authors_signed_mean_cos_per_layer"][0], init_signed[0]
            ),
        }
        out["direction_tolerance"] = DIRECTION_TOL
    out["token_keys"] = tk
    return out


def key_orthogonality(model: nn.Module, init_model: nn.Module | None = None, seed: int = 0) -> dict[str, Any]:
    """Key orthogonality per layer and head: ours (mean |cos| of the token keys, every architecture with
    `blocks.{l}.attn.k` hook points) and, where the weights are exposed, the weight-only one and the authors'.

    Each with its Gaussian baseline; with `init_model`, the init values (same definition) and the layer-0 direction
    in words. Top level: on `probe_tokens` (named in `token_set`); `by_token_set`: the same on every set of
    `token_sets`. {"not_applicable": reason} without attention keys or without token inputs.
    """
    reason = _frame_parts(model)
    if reason:
        return not_applicable(reason)
    spec = model_spec(model)
    out = _orthogonality(model, probe_tokens(spec), init_model, seed)
    if "not_applicable" in out:
        return out
    sets = token_sets(spec)
    out["token_set"] = "value_tokens" if "value_tokens" in sets else "all_tokens"
    out["by_token_set"] = {name: _orthogonality(model, ids, init_model, seed) for name, ids in sets.items()}
    out["paper"] = PAPER
    return out
