"""GPT-NeoX / Pythia (`hf-gpt-neox`, `model_type` "gpt_neox"): rotary on the first `rotary_pct` of each head's
features, LayerNorms, parallel residual by default (attention and MLP both read the layer's input), GELU MLP.

Layout: q, k and v are one nn.Linear query_key_value, weight (3d, d), whose output features are laid out PER HEAD:
(H, 3, dh), head h's [q; k; v] at rows h*3dh .. (h+1)*3dh, as GPTNeoXAttention reads it
(`view(B, T, H, 3*dh)` then `chunk(3, dim=-1)`). Reading it as (3, H, dh), [q; k; v] each d rows, mixes q, k and v
of neighbouring heads. Muon orthogonalises q, k and v each on its own: Split((dh, dh, dh), repeat=H).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field
from torch import nn

from windtunnel.models.common import Split
from windtunnel.models.hf.core import Adapter, HFArchitecture, HFSize, Slice


class GPTNeoXAdapter(Adapter):
    """GPT-NeoX's layout (module docstring)."""

    family = "hf-gpt-neox"
    model_types = ("gpt_neox",)

    def __init__(self, base: nn.Module) -> None:
        super().__init__(base)
        self.parallel = bool(self.config.use_parallel_residual)

    def layers(self) -> Any:
        return self.base.layers

    def final_norm(self) -> nn.Module:
        return self.base.final_layer_norm

    def attention(self, l: int) -> Any:
        return self.layers()[l].attention

    def projections(self, l: int) -> dict[str, Slice]:
        qkv = self.attention(l).query_key_value  # (3d, d): rows (H, 3, dh)
        dh, H = self.d_head, self.n_heads
        dev = qkv.weight.device
        return {
            name: Slice(qkv.weight, qkv.bias, 0, self.head_index(j * dh, 3 * dh, H, dev), H)
            for j, name in enumerate(("q", "k", "v"))
        }

    def out_proj(self, l: int) -> nn.Module:
        return self.attention(l).dense

    def norms(self, l: int) -> tuple[nn.Module, nn.Module | None]:
        layer = self.layers()[l]
        return layer.input_layernorm, layer.post_attention_layernorm

    def mlp(self, l: int) -> nn.Module:
        return self.layers()[l].mlp

    def muon_layout(self) -> dict[str, Any]:
        dh = self.d_head
        split = Split((dh, dh, dh), repeat=self.n_heads)
        return {f"layers.{l}.attention.query_key_value.weight": split for l in range(self.n_layers)}


class GPTNeoXSize(HFSize):
    """Size of `hf-gpt-neox` (`HFSize`), plus `rotary_pct` (the rotary fraction of each head's features; Pythia's
    0.25), `rope_theta` and `parallel_residual` (GPTNeoXConfig use_parallel_residual)."""

    rotary_pct: float = Field(default=0.25, gt=0, le=1)
    rope_theta: float = Field(default=10000.0, gt=0)
    parallel_residual: bool = True

    def rotary_dims(self) -> int | None:
        return int(self.d_model // self.n_heads * self.rotary_pct)


class HFGPTNeoX(HFArchitecture):
    """GPT-NeoX from `transformers` with random weights (module docstring); its size is a `GPTNeoXSize`."""

    Size = GPTNeoXSize
    adapter_class = GPTNeoXAdapter
    base_class, token_table = "GPTNeoXModel", "embed_in"
    row = 81

    @classmethod
    def hf_config(cls, lib: Any, size: Any, max_len: int) -> Any:
        rope = {"rope_type": "default", "rope_theta": size.rope_theta, "partial_rotary_factor": size.rotary_pct}
        return lib.GPTNeoXConfig(
            vocab_size=1, hidden_size=size.d_model, num_hidden_layers=size.n_layers, num_attention_heads=size.n_heads,
            intermediate_size=size.d_ff or 4 * size.d_model, max_position_embeddings=max_len,
            layer_norm_eps=size.eps, initializer_range=size.init_std, use_parallel_residual=size.parallel_residual,
            rope_parameters=rope, hidden_dropout=0.0, attention_dropout=0.0, bos_token_id=None, eos_token_id=None,
            tie_word_embeddings=False, use_cache=False,
        )  # fmt: skip
