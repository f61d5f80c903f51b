"""GPT-2 (`hf-gpt2`, `model_type` "gpt2"): learned absolute positions (`wpe`), pre-LayerNorm sequential layers, GELU
MLP.

Layout: q, k and v are one `Conv1D` c_attn, a Linear stored transposed: weight (d, 3d), x @ W + b. Its output
columns are [q | k | v], each d wide with the heads contiguous (head h at h*dh .. (h+1)*dh), as GPT2Attention splits
it (`split(d, dim=2)`, then `view(..., H, dh)`). Muon orthogonalises q, k and v as column blocks of that weight.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from windtunnel.models.common import Split
from windtunnel.models.hf.core import Adapter, HFArchitecture, HFSize, Rope, Slice


class GPT2Adapter(Adapter):
    """GPT-2's layout (module docstring)."""

    family = "hf-gpt2"
    model_types = ("gpt2",)

    def check(self) -> None:
        if getattr(self.config, "add_cross_attention", False):
            raise ValueError("hf-gpt2: a GPT-2 with cross-attention is an encoder-decoder part, not a causal LM")

    def layers(self) -> Any:
        return self.base.h

    def final_norm(self) -> nn.Module:
        return self.base.ln_f

    def attention(self, l: int) -> Any:
        return self.layers()[l].attn

    def scaling(self, l: int) -> float:
        """GPT2Attention's factor on q . k, from its config (older transformers keep no `scaling` on the module)."""
        scale = self.d_head**-0.5 if self.config.scale_attn_weights else 1.0
        return scale / (l + 1) if self.config.scale_attn_by_inverse_layer_idx else scale

    def projections(self, l: int) -> dict[str, Slice]:
        c = self.attention(l).c_attn  # Conv1D, weight (d, 3d): output features along dim 1
        d, dh, H = self.d_model, self.d_head, self.n_heads
        dev = c.weight.device
        return {
            name: Slice(c.weight, c.bias, 1, self.head_index(j * d, dh, H, dev), H, start=j * d)
            for j, name in enumerate(("q", "k", "v"))
        }

    def out_proj(self, l: int) -> nn.Module:
        return self.attention(l).c_proj

    def norms(self, l: int) -> tuple[nn.Module, nn.Module | None]:
        layer = self.layers()[l]
        return layer.ln_1, layer.ln_2

    def mlp(self, l: int) -> nn.Module:
        return self.layers()[l].mlp

    def positions(self, x: torch.Tensor) -> tuple[torch.Tensor, Rope | None]:
        T, limit = x.shape[1], int(self.config.n_positions)
        if T > limit:
            raise ValueError(f"inputs: sequence length must be <= {limit}, GPT-2's n_positions (got {T})")
        return x + self.base.wpe(torch.arange(T, device=x.device)), None  # (B,T,d)

    def muon_layout(self) -> dict[str, Any]:
        d = self.d_model
        return {f"h.{l}.attn.c_attn.weight": Split((d, d, d), dim=1) for l in range(self.n_layers)}


class GPT2Size(HFSize):
    """Size of `hf-gpt2` (`HFSize`): GPT2Config n_layer, n_embd, n_head, n_inner = d_ff, n_positions = max_len."""


class HFGPT2(HFArchitecture):
    """GPT-2 from `transformers` with random weights (module docstring); its size is a `GPT2Size`."""

    Size = GPT2Size
    adapter_class = GPT2Adapter
    base_class, token_table = "GPT2Model", "wte"
    row = 80

    @classmethod
    def hf_config(cls, lib: Any, size: Any, max_len: int) -> Any:
        return lib.GPT2Config(
            vocab_size=1, n_positions=max_len, n_embd=size.d_model, n_layer=size.n_layers, n_head=size.n_heads,
            n_inner=size.d_ff or 4 * size.d_model, layer_norm_epsilon=size.eps, initializer_range=size.init_std,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None, use_cache=False,
        )  # fmt: skip
