"""Llama (`hf-llama`, `model_type` "llama"): rotary on every feature, RMSNorms, SwiGLU MLP, grouped-query attention.

Layout: separate q_proj (H*dh rows), k_proj and v_proj (n_kv_heads*dh rows each), heads contiguous. With GQA
(n_kv_heads < n_heads) query head h reads key/value head h // (n_heads / n_kv_heads), as HF's `repeat_kv`: the hook
points `attn.k` and `attn.v` are the model's own (B,n_kv_heads,T,dh), repeated to the query heads for the pattern
and z. Splitting k and v by the query-head count instead reads them wrongly. Each projection is its own Muon matrix.
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field, model_validator
from torch import nn

from windtunnel.models.hf.core import Adapter, HFArchitecture, HFSize, Slice


def separate(attn: nn.Module, heads: dict[str, int], names: dict[str, str]) -> dict[str, Slice]:
    """q, k, v of an attention with one nn.Linear each (`names`: q/k/v -> the module's attribute)."""
    out = {}
    for key, attr in names.items():
        lin = getattr(attn, attr)
        index = torch.arange(lin.weight.shape[0], device=lin.weight.device)
        out[key] = Slice(lin.weight, lin.bias, 0, index, heads[key], start=0)
    return out


class LlamaAdapter(Adapter):
    """Llama's layout (module docstring)."""

    family = "hf-llama"
    model_types = ("llama",)

    @property
    def n_kv_heads(self) -> int:
        return int(getattr(self.config, "num_key_value_heads", None) or self.n_heads)

    @property
    def d_head(self) -> int:
        return int(getattr(self.config, "head_dim", None) or self.d_model // self.n_heads)

    def layers(self) -> Any:
        return self.base.layers

    def final_norm(self) -> nn.Module:
        return self.base.norm

    def attention(self, l: int) -> Any:
        return self.layers()[l].self_attn

    def projections(self, l: int) -> dict[str, Slice]:
        heads = {"q": self.n_heads, "k": self.n_kv_heads, "v": self.n_kv_heads}
        return separate(self.attention(l), heads, {"q": "q_proj", "k": "k_proj", "v": "v_proj"})

    def out_proj(self, l: int) -> nn.Module:
        return self.attention(l).o_proj

    def norms(self, l: int) -> tuple[nn.Module, nn.Module | None]:
        layer = self.layers()[l]
        return layer.input_layernorm, layer.post_attention_layernorm

    def mlp(self, l: int) -> nn.Module:
        return self.layers()[l].mlp


class LlamaSize(HFSize):
    """Size of `hf-llama` (`HFSize`), plus `n_kv_heads` (key/value heads, GQA; None: n_heads; must divide n_heads)
    and `rope_theta`. `eps` is the RMSNorms' (rms_norm_eps)."""

    n_kv_heads: int | None = Field(default=None, ge=1, strict=True)
    rope_theta: float = Field(default=10000.0, gt=0)

    def rotary_dims(self) -> int | None:
        return self.d_model // self.n_heads

    @model_validator(mode="after")
    def _kv_fit(self) -> LlamaSize:
        if self.n_kv_heads is not None and self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_kv_heads: must divide n_heads={self.n_heads} (got {self.n_kv_heads})")
        return self


class HFLlama(HFArchitecture):
    """Llama from `transformers` with random weights (module docstring); its size is a `LlamaSize`."""

    Size = LlamaSize
    adapter_class = LlamaAdapter
    base_class, token_table = "LlamaModel", "embed_tokens"
    row = 82

    @classmethod
    def hf_config(cls, lib: Any, size: Any, max_len: int) -> Any:
        return lib.LlamaConfig(
            vocab_size=1, hidden_size=size.d_model, num_hidden_layers=size.n_layers, num_attention_heads=size.n_heads,
            num_key_value_heads=size.n_kv_heads or size.n_heads, intermediate_size=size.d_ff or 4 * size.d_model,
            max_position_embeddings=max_len, rms_norm_eps=size.eps, initializer_range=size.init_std,
            rope_parameters={"rope_type": "default", "rope_theta": size.rope_theta}, bos_token_id=None,
            eos_token_id=None, pad_token_id=None, tie_word_embeddings=False, use_cache=False,
        )  # fmt: skip
