"""Pre-norm causal transformer (the paper's bijection model: 6 layers x 6 heads x d 192, d_ff 768, ~2.68M params).

Token (+ learned absolute position) embedding -> L x [h += Attn(RMSNorm(h)); h += MLP(RMSNorm(h))] -> RMSNorm ->
head tied to the answer tokens' embeddings where the spec allows. Attention has no biases, the MLP has biases.
Attention runs fused (`F.scaled_dot_product_attention`) on GPUs; where a probe asks for the attention pattern
(`blocks.{l}.attn.pattern`, models/hooks.py) it computes the weights explicitly. `attention="auto"` (default) also
uses the explicit path on CPUs: PyTorch's CPU flash-attention backward is slow at these short lengths (bf16 training
step of the paper bijection model at batch 128 on 2 cores: 0.42 s fused, 0.19 s explicit; equal in float32).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from windtunnel.models.base import InitSize, ResidualModel, size_int
from windtunnel.models.common import INIT_STD, FeedForward, initialise, zero_residual_projections
from windtunnel.models.hooks import LayerHook


def rotary(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding (rotate-half form) of (B,H,T,dh) queries or keys; dh must be even."""
    T, dh = x.shape[-2], x.shape[-1]
    inv_freq = base ** (-torch.arange(0, dh, 2, device=x.device, dtype=torch.float32) / dh)  # (dh/2,)
    angles = torch.arange(T, device=x.device, dtype=torch.float32)[:, None] * inv_freq  # (T,dh/2)
    cos, sin = angles.cos().repeat(1, 2).to(x.dtype), angles.sin().repeat(1, 2).to(x.dtype)  # (T,dh)
    x1, x2 = x[..., : dh // 2], x[..., dh // 2 :]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def recency_slopes(n_recency: int, n_heads: int) -> tuple[float, ...]:
    """ALiBi's slopes of `n_heads` heads, 2^(-8 (h+1) / n_heads) for h = 0..n_heads-1 (Press et al. 2022), the first
    (steepest, most local) `n_recency` of them: the slope of each recency head, in head order."""
    return tuple(2.0 ** (-8.0 * (h + 1) / n_heads) for h in range(n_recency))


def recency_bias(slopes: tuple[float, ...], n_heads: int, T: int, device: torch.device) -> torch.Tensor:
    """(H,T,T) additive attention bias: -slope_h (t - s) for query t and key s <= t on the heads `slopes` covers
    (the first len(slopes)), 0 on the others, -inf above the diagonal (the causal mask, so it replaces is_causal)."""
    slope = torch.zeros(n_heads, device=device)  # (H,)
    slope[: len(slopes)] = torch.tensor(slopes, device=device)
    pos = torch.arange(T, device=device)
    dist = (pos[:, None] - pos[None, :]).float()  # (T,T): t - s
    return (-slope[:, None, None] * dist).masked_fill(dist < 0, float("-inf"))  # (H,T,T)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention without biases, with hook points q, k, v, pattern and z (models/hooks.py).

    `sink=True` adds one learned logit per head to every softmax denominator (an attention sink with a zero value):
    a head may then give each of n matching tokens weight near 1 instead of 1/n, so it can *sum* what it reads, not
    only average it. Sink heads always run the explicit path; their attention rows sum to 1 - (weight on the sink).

    `recency`: the ALiBi slopes of the first len(recency) heads (`recency_slopes`), each adding the fixed bias
    -slope (t - s) to its scores (`recency_bias`): no parameter, on both paths (fused with it as a float mask).
    """

    def __init__(
        self, d_model: int, n_heads: int, rope: bool, sink: bool = False, recency: tuple[float, ...] = ()
    ) -> None:
        super().__init__()
        self.n_heads, self.d_head, self.rope = n_heads, d_model // n_heads, rope
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.sink = nn.Parameter(torch.zeros(n_heads)) if sink else None
        self.recency = tuple(recency)

    @torch.no_grad()
    def mimic(self) -> None:
        """Mimetic initialisation: copy each head's query rows of the qkv weight onto its key rows, so W_q W_k^T =
        W_q W_q^T, about d std^2 I per head (Trockman & Kolter 2023, in its simplest form)."""
        d = self.out_proj.weight.shape[0]
        self.qkv.weight[d : 2 * d] = self.qkv.weight[:d]

    @property
    def w_k(self) -> torch.Tensor:
        """(d,d) key projection, rows = heads x d_head (the qkv weight is laid out [q; k; v], heads contiguous)."""
        d = self.out_proj.weight.shape[0]
        return self.qkv.weight[d : 2 * d]

    def forward(self, x: torch.Tensor, explicit: bool, hook: LayerHook) -> torch.Tensor:
        B, T, d = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.d_head).permute(2, 0, 3, 1, 4)  # 3 x (B,H,T,dh)
        if self.rope:
            q, k = rotary(q), rotary(k)
        q, k, v = hook("attn.q", q), hook("attn.k", k), hook("attn.v", v)
        bias = recency_bias(self.recency, self.n_heads, T, x.device) if self.recency else None  # (H,T,T)
        if explicit or self.sink is not None:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.d_head)  # (B,H,T,T)
            if bias is not None:
                scores = scores + bias.to(scores.dtype)  # the causal mask included
            else:
                causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
                scores = scores.masked_fill(~causal, float("-inf"))
            if self.sink is None:
                attn = scores.softmax(dim=-1)  # (B,H,T,T)
            else:
                sink = self.sink.to(scores.dtype)[None, :, None, None].expand(B, -1, T, 1)  # (B,H,T,1)
                attn = torch.cat([scores, sink], dim=-1).softmax(dim=-1)[..., :T]  # (B,H,T,T), rows sum < 1
            y = hook("attn.pattern", attn) @ v  # (B,H,T,dh)
        elif bias is not None:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype))  # (B,H,T,dh)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B,H,T,dh)
        y = hook("attn.z", y).transpose(1, 2).reshape(B, T, d)  # (B,T,d)
        return self.out_proj(y)


class Block(nn.Module):
    """One pre-norm transformer layer: attention then MLP, each added to the residual stream."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        rope: bool,
        eps: float,
        sink: bool = False,
        recency: tuple[float, ...] = (),
    ) -> None:
        super().__init__()
        self.norm1 = nn.RMSNorm(d_model, eps=eps)
        self.attn = CausalSelfAttention(d_model, n_heads, rope, sink, recency)
        self.mlp = FeedForward(d_model, d_ff, norm="rms", eps=eps)

    def forward(self, h: torch.Tensor, explicit: bool, hook: LayerHook) -> torch.Tensor:
        h = h + hook("attn.out", self.attn(self.norm1(h), explicit, hook))  # (B,T,d)
        h = hook("resid_mid", h)
        return h + hook("mlp.out", self.mlp(h))


class TransformerSize(InitSize):
    """Size of a `Transformer`. `d_ff` None: 4 d_model.

    `pos`: "learned" (absolute table, GPT-2 and the official code), "rotary" (relative, on q and k), "none", or
    "learned+rotary" (both: absolute slots to read a prompt's header, relative offsets to find earlier tokens).
    `logit_scale`: a learned scale of the answer logits (`OutputHead`). `attn_sink`: one learned sink logit per head
    (`CausalSelfAttention`). `init`: "normal" (default) or "torch" (PyTorch's defaults, the authors' G3 model;
    `InitSize`). `init_std`: std of init="normal", N(0, std) on every Linear/Embedding weight (GPT-2's 0.02; residual
    output projections get std/sqrt(2 n_layers)); giving it with init="torch" is an error.
    `attention`: "fused" (scaled_dot_product_attention), "explicit" (weights materialised), or "auto" (fused on
    CUDA, explicit on CPU, where it is faster). `zero_init_out`: zero the attention and MLP output projections at
    init (`common.zero_residual_projections`), under either `init`, so every block starts as the identity.

    Attention-side initialisation (both off by default; off, the model and its random draws are as without them):
    `recency_heads` (0..n_heads): the first that many heads of layer 0 add the ALiBi bias -slope_h (t - s) to their
    scores, slopes the steepest of ALiBi's geometric sequence for n_heads heads, 2^(-8 (h+1) / n_heads), so they start
    out reading the last few positions (the previous observation, which a filter needs). The bias is fixed, not
    learned: no parameter, so the optimiser, the checkpoint's tensors and the geometry probes' weights are those of
    the model without it, and the learned scores can still outweigh it (as in ALiBi). `mimetic_init`: every
    attention layer starts with its key weights a copy of its query weights (`CausalSelfAttention.mimic`), so W_q W_k^T
    is about d std^2 I per head and a token first attends to tokens like itself (mimetic initialisation, Trockman &
    Kolter 2023); it draws no random number, so every other weight is the default init's.
    """

    n_layers: int = size_int(6)
    n_heads: int = size_int(6)
    d_model: int = size_int(192)
    d_ff: int | None = Field(default=None, ge=1, strict=True)
    pos: Literal["learned", "none", "rotary", "learned+rotary"] = "learned"
    tie: bool = True
    eps: float = Field(default=1e-5, gt=0)
    attention: Literal["auto", "fused", "explicit"] = "auto"
    init_std: float = Field(default=INIT_STD, gt=0)
    logit_scale: bool = False
    attn_sink: bool = False
    zero_init_out: bool = False
    recency_heads: int = size_int(0, lo=0)
    mimetic_init: bool = False

    def learned_positions(self) -> bool:
        return self.pos in ("learned", "learned+rotary")

    def position_limit(self) -> bool:
        return self.learned_positions()  # rotary and "none" read any length

    @model_validator(mode="after")
    def _heads_fit(self) -> TransformerSize:
        if self.init == "torch" and "init_std" in self.model_fields_set:
            raise ValueError("init_std: sets the std of init='normal' and has no effect with init='torch'")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model: must be divisible by n_heads={self.n_heads} (got {self.d_model})")
        if self.recency_heads > self.n_heads:
            raise ValueError(
                f"recency_heads: must be between 0 and n_heads = {self.n_heads} (got {self.recency_heads})"
            )
        if self.pos in ("rotary", "learned+rotary") and (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"pos: rotary needs an even head dim (got d_model/n_heads = {self.d_model // self.n_heads})"
            )
        return self


class Transformer(ResidualModel):
    """Causal pre-norm transformer; its size is a `TransformerSize`. A layer whose `attn.pattern` is hooked or cached
    runs the explicit attention path.

    Ablation: `with model.ablate(heads={(layer, head)}, layers={l}, parts="attn"|"mlp"|"block"): ...`.
    """

    Size = TransformerSize
    size: TransformerSize
    row, color, cost = 10, "C0", 1.0  # models.info: report row, figure colour, relative training cost
    layer_hooks = ("attn.q", "attn.k", "attn.v", "attn.pattern", "attn.z", "attn.out", "resid_mid", "mlp.out")
    resid_parts = ("attn.out", "mlp.out")

    def build_layers(self) -> None:
        """n_layers pre-norm blocks (layer 0's first `recency_heads` heads with ALiBi slopes), the final RMSNorm."""
        s = self.size
        self.n_layers, self.n_heads, self.pos, self.attention = s.n_layers, s.n_heads, s.pos, s.attention
        rope = s.pos in ("rotary", "learned+rotary")
        d_ff = 4 * s.d_model if s.d_ff is None else s.d_ff
        recency = recency_slopes(s.recency_heads, s.n_heads)  # layer 0's only
        self.blocks = nn.ModuleList(
            Block(s.d_model, s.n_heads, d_ff, rope, s.eps, s.attn_sink, recency if l == 0 else ())
            for l in range(s.n_layers)
        )
        self.norm = nn.RMSNorm(s.d_model, eps=s.eps)

    def initialise_weights(self) -> None:
        """`init` (with `init_std` and GPT-2's scaled residual projections), then `zero_init_out`, `mimetic_init`."""
        s = self.size
        initialise(self, s.init, s.init_std, residual_layers=s.n_layers)
        if s.zero_init_out:
            zero_residual_projections(self)
        if s.mimetic_init:
            for module in self.modules():
                if isinstance(module, CausalSelfAttention):
                    module.mimic()

    def layer(self, l: int, h: torch.Tensor) -> torch.Tensor:
        explicit = (
            self.attention == "explicit"
            or (self.attention == "auto" and h.device.type != "cuda")
            or self.wants(f"blocks.{l}.attn.pattern")
        )
        return self.blocks[l](h, explicit, self.layer_hook(l))  # (B,T,d)

    def state_size(self, T: int) -> int:
        """KV cache: keys and values of every layer for T tokens."""
        return 2 * self.n_layers * int(T) * self.d_model
