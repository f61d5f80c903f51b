"""Phi (`hf-phi`, `model_type` "phi"; Phi-1/1.5/2): one LayerNorm read by attention and MLP in parallel, rotary on
the first `partial_rotary_factor` of each head's features (Phi-2: 0.4), biases everywhere, GELU MLP.

Layout: separate q_proj, k_proj, v_proj (heads contiguous; k and v with num_key_value_heads), output `dense`,
optional LayerNorms on each head's q and k before rotary (`qk_layernorm`). Each projection is its own Muon matrix.
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field
from torch import nn

from windtunnel.models.hf.core import HFArchitecture, HFSize
from windtunnel.models.hf.llama import LlamaAdapter


class PhiAdapter(LlamaAdapter):
    """Phi's layout (module docstring): Llama's separate q/k/v, with Phi's own final norm, q/k LayerNorms, output
    projection and one norm read by attention and MLP in parallel."""

    family = "hf-phi"
    model_types = ("phi",)
    parallel = True

    def final_norm(self) -> nn.Module:
        return self.base.final_layernorm

    def qk_norm(self, l: int, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        attn = self.attention(l)
        if getattr(attn, "qk_layernorm", False):
            return attn.q_layernorm(q), attn.k_layernorm(k)
        return q, k

    def out_proj(self, l: int) -> nn.Module:
        return self.attention(l).dense

    def norms(self, l: int) -> tuple[nn.Module, nn.Module | None]:
        return self.layers()[l].input_layernorm, None  # the MLP reads the same normed input


class PhiSize(HFSize):
    """Size of `hf-phi` (`HFSize`), plus `partial_rotary_factor` (the rotary fraction of each head's features) and
    `rope_theta`."""

    partial_rotary_factor: float = Field(default=0.5, gt=0, le=1)
    rope_theta: float = Field(default=10000.0, gt=0)

    def rotary_dims(self) -> int | None:
        return int(self.d_model // self.n_heads * self.partial_rotary_factor)


class HFPhi(HFArchitecture):
    """Phi from `transformers` with random weights (module docstring); its size is a `PhiSize`."""

    Size = PhiSize
    adapter_class = PhiAdapter
    base_class, token_table = "PhiModel", "embed_tokens"
    row = 83

    @classmethod
    def hf_config(cls, lib: Any, size: Any, max_len: int) -> Any:
        rotary = size.partial_rotary_factor
        rope = {"rope_type": "default", "rope_theta": size.rope_theta, "partial_rotary_factor": rotary}
        return lib.PhiConfig(
            vocab_size=1, hidden_size=size.d_model, num_hidden_layers=size.n_layers, num_attention_heads=size.n_heads,
            intermediate_size=size.d_ff or 4 * size.d_model, max_position_embeddings=max_len, layer_norm_eps=size.eps,
            initializer_range=size.init_std, rope_parameters=rope, resid_pdrop=0.0, embd_pdrop=0.0,
            attention_dropout=0.0, bos_token_id=None, eos_token_id=None, pad_token_id=None,
            tie_word_embeddings=False, use_cache=False,
        )  # fmt: skip
