"""Capacity-matched MLP controls: no attention, no recurrence.

`mlp` (PrefixMLP) reads the whole causal prefix at every position t: the input is the concatenation of a small
embedding e(x_s) (d_emb) for every slot s = 0..max_len-1, with the slots after t zero-padded. Its first layer
on that flattened vector is  W [e(x_0); ...; e(x_t); 0; ...; 0] = sum_{s<=t} W_s e(x_s)  with W_s the slot-s
block of W, so all positions are computed at once as a cumulative sum over s of W_s e(x_s) -- the same function
as the padded-flatten MLP, without building a (B,T,max_len*d_emb) tensor. A learned vector per position t (the
equivalent of appending a one-hot of t to the flattened input) tells it where the prefix ends. Then residual
blocks h += Linear(GELU(Linear(LayerNorm(h)))), a final LayerNorm and an untied head.

`mlp-pointwise` is the per-position control (the authors' MLPControl): token + position embedding, residual
blocks, final RMSNorm, tied head; each position sees only its own token, so it is the context-blind floor.

Match either to a parameter budget with `windtunnel.models.common.match_params` (presets.py does).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from windtunnel.models.base import InitSize, ResidualModel, size_int
from windtunnel.models.common import INIT_STD, INITS, FeedForward, InputEmbedding, check_choice, initialise
from windtunnel.tasks.base import TaskSpec


class _ResidualMLP(ResidualModel):
    """Shared body: embed (subclass) -> n_layers residual FeedForward blocks -> final norm (subclass) -> head."""

    size: PrefixMLPSize | PointwiseMLPSize
    layer_hooks = ("mlp.out",)
    resid_parts = ("mlp.out",)
    head_before_layers = True  # under init="torch" the head's weights are drawn before the blocks'

    def final_norm(self) -> nn.Module:  # pragma: no cover - interface
        """The norm between the last block and the head."""
        raise NotImplementedError

    def build_layers(self) -> None:
        """n_layers residual blocks LayerNorm -> Linear(d, ratio d) -> GELU -> Linear, then the final norm."""
        s = self.size
        self.n_layers = s.n_layers
        self.blocks = nn.ModuleList(
            FeedForward(s.d_model, s.ratio * s.d_model, norm="layer") for _ in range(s.n_layers)
        )
        self.norm = self.final_norm()

    def initialise_weights(self) -> None:
        """`init`, with GPT-2's scaled residual projections under "normal"."""
        initialise(self, self.size.init, residual_layers=self.n_layers)

    def layer(self, l: int, h: torch.Tensor) -> torch.Tensor:
        return h + self.hook(f"blocks.{l}.mlp.out", self.blocks[l](h))  # (B,T,d)


class PrefixEmbedding(nn.Module):
    """(B,T[,D]) -> (B,T,d_model): out_t = b + P_t + sum_{s<=t} W_s e(x_s), the first layer on the padded prefix.

    init "normal": W ~ N(0, 0.02), b = 0; "torch": what `nn.Linear(max_len * d_emb, d_model)` would draw, W and b
    ~ U(+-1/sqrt(max_len * d_emb)) (W is that Linear's weight, split into slots).
    """

    def __init__(
        self, spec: TaskSpec, d_model: int, d_emb: int, max_len: int | None, init: str | None = "normal"
    ) -> None:
        super().__init__()
        self.slot = InputEmbedding(spec, d_emb, max_len, pos="none", limit=True)  # e(x_s), (B,T,d_emb); W_s per slot
        self.max_len = self.slot.max_len
        self.weight = nn.Parameter(torch.empty(self.max_len, d_emb, d_model))  # W_s blocks
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.pos = nn.Embedding(self.max_len, d_model)  # P_t
        if check_choice("init", init, INITS) == "normal":
            nn.init.normal_(self.weight, std=INIT_STD)
        else:
            bound = 1 / math.sqrt(self.max_len * d_emb)  # nn.Linear's default: kaiming-uniform(a=sqrt 5) and bias
            nn.init.uniform_(self.weight, -bound, bound)
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        e = self.slot(inputs)  # (B,T,d_emb)
        T = e.shape[1]
        per_slot = torch.einsum("bse,sed->bsd", e, self.weight[:T])  # (B,T,d_model): W_s e(x_s)
        return per_slot.cumsum(dim=1) + self.bias + self.pos(torch.arange(T, device=e.device))  # (B,T,d_model)


class PrefixMLPSize(InitSize):
    """Size of a `PrefixMLP`: `d_emb` is the slot embedding width, `ratio` the hidden width of a block / d_model."""

    n_layers: int = size_int(9, lo=0)
    d_model: int = size_int(384)
    d_emb: int = size_int(16)
    ratio: int = size_int(1)
    logit_scale: bool = False


class PrefixMLP(_ResidualMLP):
    """MLP over the flattened zero-padded causal prefix; its size is a `PrefixMLPSize`."""

    Size = PrefixMLPSize
    size: PrefixMLPSize
    row, color, cost = 40, "C3", 0.6  # models.info: report row, figure colour, relative training cost
    follows = "transformer"  # a control: the transformer's parameter count (presets), budget and recipe
    depth_factors = (1.5, 1.0, 2.0, 0.5)  # presets: the depths tried, times the transformer's

    def make_embedding(self) -> nn.Module:
        """The first layer on the zero-padded prefix, a `PrefixEmbedding`."""
        s = self.size
        return PrefixEmbedding(self.spec, s.d_model, s.d_emb, self.max_len, s.init)

    def final_norm(self) -> nn.Module:
        return nn.LayerNorm(self.d_model)

    def state_size(self, T: int) -> int:
        """It must keep the embedded prefix: T slots of d_emb numbers."""
        return int(T) * self.size.d_emb


class PointwiseMLPSize(InitSize):
    """Size of a `PointwiseMLP`: `ratio` is the hidden width of a block / d_model."""

    n_layers: int = size_int(9, lo=0)
    d_model: int = size_int(192)
    ratio: int = size_int(4)
    tie: bool = True
    logit_scale: bool = False


class PointwiseMLP(_ResidualMLP):
    """Per-position control, no mixing across positions; its size is a `PointwiseMLPSize`."""

    Size = PointwiseMLPSize
    size: PointwiseMLPSize
    row, color, cost = 50, "C4", 0.55  # models.info: report row, figure colour, relative training cost
    follows = "transformer"  # a control: the transformer's parameter count (presets), budget and recipe
    # presets: the depths tried, times the transformer's; a block holds 8 d^2 against its 12 d^2, so 1.5x first
    depth_factors = (1.5, 1.0, 2.0)
    context_blind = True  # each position sees only its own token

    def embedding_positions(self) -> str:
        """A learned table: the token and its position are all a position sees. It is capacity-matched at the
        training length, so its size has no `learned_positions()` rows to reserve."""
        return "learned"

    def final_norm(self) -> nn.Module:
        return nn.RMSNorm(self.d_model, eps=1e-5)

    def state_size(self, T: int) -> int:
        """Nothing is carried between positions."""
        return 0
