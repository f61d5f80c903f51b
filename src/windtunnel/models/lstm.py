"""Stacked LSTM: embedding -> L single-layer LSTMs -> LayerNorm -> head (tied where the spec allows).

Each layer runs as a fused `nn.LSTM`. Where a probe asks for the cell states (hook point `blocks.{l}.lstm.c`,
models/hooks.py) that layer runs the same weights through an explicit cell loop (PyTorch's gate order i, f, g, o)
that records the hidden and cell state at every step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, cast

import torch
from pydantic import Field
from torch import nn

from windtunnel.devices import lstm_needs_float32
from windtunnel.models.base import InitSize, ResidualModel, size_int
from windtunnel.models.common import InputEmbedding, OutputHead, initialise
from windtunnel.tasks.base import TaskSpec


def lstm_cell_loop(layer: nn.LSTM, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Run a single-layer batch-first `nn.LSTM` step by step; returns h, c for every step, each (B,T,d)."""
    # nn.LSTM registers its weights by name at runtime, so torch's stubs type them as `Tensor | Module`
    w_ih, w_hh = cast(torch.Tensor, layer.weight_ih_l0), cast(torch.Tensor, layer.weight_hh_l0)
    b_ih, b_hh = cast(torch.Tensor, layer.bias_ih_l0), cast(torch.Tensor, layer.bias_hh_l0)
    gx = x @ w_ih.t() + b_ih + b_hh  # (B,T,4d), input part of all gates
    B, T, d = x.shape[0], x.shape[1], layer.hidden_size
    h, c = x.new_zeros(B, d), x.new_zeros(B, d)
    hs, cs = [], []
    for t in range(T):
        i, f, g, o = (gx[:, t] + h @ w_hh.t()).chunk(4, dim=-1)  # (B,d) each
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        hs.append(h)
        cs.append(c)
    return torch.stack(hs, dim=1), torch.stack(cs, dim=1)


class LSTMSize(InitSize):
    """Size of an `LSTM`: `dropout` applies between layers (the authors' LSTMs use 0.1). `init`: `InitSize`; the LSTM
    weights keep PyTorch's U(+-1/sqrt(d)) under both."""

    n_layers: int = size_int(6)
    d_model: int = size_int(192)
    pos: Literal["none", "learned"] = "none"
    tie: bool = True
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    logit_scale: bool = False

    def learned_positions(self) -> bool:
        return self.pos == "learned"

    def position_limit(self) -> bool:
        return self.learned_positions()


class LSTM(ResidualModel):
    """Stacked LSTM; its size is an `LSTMSize`.

    Ablation: `with model.ablate(layers={l}):` makes layer l the identity (its input passes straight through).
    """

    Size = LSTMSize
    size: LSTMSize
    row, color, cost = 30, "C2", 0.55  # models.info: report row, figure colour, relative training cost
    layer_hooks = ("lstm.h", "lstm.c")

    def __init__(self, spec: TaskSpec, size: LSTMSize | Mapping[str, Any] | None = None, **fields: Any) -> None:
        super().__init__(spec, size, **fields)
        s = self.size
        self.n_layers, self.d_model = s.n_layers, s.d_model
        self.embed = InputEmbedding(spec, s.d_model, s.max_len, pos=s.pos, reserved=s.reserved_positions)
        self.max_len = self.embed.max_len
        self.layers = nn.ModuleList(nn.LSTM(s.d_model, s.d_model, batch_first=True) for _ in range(s.n_layers))
        self.dropout = nn.Dropout(s.dropout)
        self.norm = nn.LayerNorm(s.d_model)
        self.head = OutputHead(spec, s.d_model, tie=s.tie, embedding=self.embed, logit_scale=s.logit_scale)
        initialise(self, s.init)  # Linear/Embedding only; LSTM weights keep PyTorch's U(-1/sqrt(d), 1/sqrt(d))

    def layer(self, l: int, x: torch.Tensor) -> torch.Tensor:
        """Layer l replaces the stream with its hidden states: resid_post = lstm.h."""
        hook, lstm = self.layer_hook(l), cast(nn.LSTM, self.layers[l])  # ModuleList items are typed Module
        if l > 0:
            x = self.dropout(x)
        if self.wants(f"blocks.{l}.lstm.c"):  # the fused nn.LSTM returns only h: run the cell loop for c
            h, c = lstm_cell_loop(lstm, x)  # (B,T,d) each
            hook("lstm.c", c)
        elif lstm_needs_float32(x):  # CPU bf16 autocast without a bf16 LSTM kernel here (AVX2): float32 recurrence
            with torch.autocast("cpu", enabled=False):
                h, _ = lstm(x.float())  # (B,T,d)
        else:
            h, _ = lstm(x)  # (B,T,d)
        return hook("lstm.h", h)

    def state_size(self, T: int) -> int:
        """h and c of every layer; independent of T."""
        return 2 * self.n_layers * self.d_model
