"""Stacked LSTM: embedding -> L single-layer LSTMs -> LayerNorm -> head (tied where the spec allows); optionally a
LayerNorm on each layer's input (`norm_inputs`) and each layer added to its input (`residual`).

Each layer runs as a fused `nn.LSTM`. Where a probe asks for the cell states (hook point `blocks.{l}.lstm.c`,
models/hooks.py) that layer runs the same weights through an explicit cell loop (PyTorch's gate order i, f, g, o)
that records the hidden and cell state at every step.
"""

from __future__ import annotations

from typing import Literal, cast

import torch
from pydantic import Field, model_validator
from torch import nn

from windtunnel.devices import lstm_needs_float32
from windtunnel.models.base import InitSize, ResidualModel, size_int
from windtunnel.models.common import initialise


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


@torch.no_grad()
def init_gate_biases(layer: nn.LSTM, forget_bias: float | None = None, chrono: int | None = None) -> None:
    """Set a single-layer `nn.LSTM`'s forget-gate bias to `forget_bias`, or chrono-initialise its input and forget
    gates (b_f = log U[1, chrono - 1] per unit from the global RNG, b_i = -b_f); the value sits in bias_ih with
    the same slice of bias_hh zeroed, since the cell adds the two. Neither given: PyTorch's init stays."""
    b_ih, b_hh = cast(torch.Tensor, layer.bias_ih_l0), cast(torch.Tensor, layer.bias_hh_l0)  # (4d,): i, f, g, o
    d = layer.hidden_size
    if chrono is not None:
        b_f = torch.empty(d, dtype=b_ih.dtype, device=b_ih.device).uniform_(1.0, chrono - 1.0).log()
        b_ih[:d], b_hh[:d] = -b_f, 0.0
    elif forget_bias is not None:
        b_f = torch.full((d,), forget_bias, dtype=b_ih.dtype, device=b_ih.device)
    else:
        return
    b_ih[d : 2 * d], b_hh[d : 2 * d] = b_f, 0.0


class LSTMSize(InitSize):
    """Size of an `LSTM`: `dropout` applies between layers (the authors' LSTMs use 0.1). `init`: `InitSize`; the LSTM
    weights keep PyTorch's U(+-1/sqrt(d)) under both.

    Gate-bias init, to get the recurrence off its early loss plateau (`init_gate_biases`; None: PyTorch's biases):
    `forget_bias` v sets every layer's forget-gate bias to v (v = 1: Gers et al. 2000, Jozefowicz et al. 2015), so
    the cell keeps its state from the start; `chrono` T sets the chrono init of Tallec & Ollivier 2018 ("Can
    recurrent neural networks warp time?"): b_f = log U[1, T - 1], b_i = -b_f, forget times spread up to T steps
    (e.g. the task's sequence length). At most one of the two. The LSTM has no residual output projection (a layer
    replaces the stream with its h), so it has no `zero_init_out`.

    Two options for a deep stack that will not start learning (both off by default: the authors' form):
    `norm_inputs`: each layer reads LayerNorm(x), not x. Without it the gates barely see the tokens at the start: the
    "normal" init's embedding rows are N(0, 0.02) and a layer's h is mostly far below 1, so against U(+-1/sqrt(d))
    input weights a token moves each gate's pre-activation by about 0.01 and the gradient that would teach the layer
    to read it is as small. `residual`: layer l's output is x + h, not h (Wu et al. 2016's residual stacked LSTM), so
    the stream keeps each token's embedding past layers that have not learned to pass it on
    (docs/results/time-to-bayes.md, the LSTM on the HMM)."""

    n_layers: int = size_int(6)
    d_model: int = size_int(192)
    pos: Literal["none", "learned"] = "none"
    tie: bool = True
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    logit_scale: bool = False
    forget_bias: float | None = None
    chrono: int | None = Field(default=None, ge=2, strict=True)
    norm_inputs: bool = Field(default=False, strict=True)
    residual: bool = Field(default=False, strict=True)

    def learned_positions(self) -> bool:
        return self.pos == "learned"

    def position_limit(self) -> bool:
        return self.learned_positions()

    @model_validator(mode="after")
    def _one_gate_init(self) -> LSTMSize:
        if self.forget_bias is not None and self.chrono is not None:
            raise ValueError("chrono: sets the forget-gate bias itself; give forget_bias or chrono, not both")
        return self


class LSTM(ResidualModel):
    """Stacked LSTM; its size is an `LSTMSize`.

    Ablation: `with model.ablate(layers={l}):` makes layer l the identity (its input passes straight through).
    """

    Size = LSTMSize
    size: LSTMSize
    row, color, cost = 30, "C2", 0.55  # models.info: report row, figure colour, relative training cost
    layer_hooks = ("lstm.h", "lstm.c")

    def build_layers(self) -> None:
        """n_layers single-layer `nn.LSTM`s (dropout between them), then the final LayerNorm."""
        s = self.size
        self.n_layers = s.n_layers
        self.layers = nn.ModuleList(nn.LSTM(s.d_model, s.d_model, batch_first=True) for _ in range(s.n_layers))
        # registered only when on, so a model without it has the same parameters, state_dict and random draws
        if s.norm_inputs:
            self.input_norms = nn.ModuleList(nn.LayerNorm(s.d_model) for _ in range(s.n_layers))
        self.dropout = nn.Dropout(s.dropout)
        self.norm = nn.LayerNorm(s.d_model)

    def initialise_weights(self) -> None:
        """`init` on the Linear/Embedding weights (the LSTM weights keep PyTorch's U(-1/sqrt(d), 1/sqrt(d))), then the
        gate-bias init, last, so every other weight is drawn as without it."""
        s = self.size
        initialise(self, s.init)
        for lstm in self.layers:
            init_gate_biases(cast(nn.LSTM, lstm), s.forget_bias, s.chrono)

    def layer(self, l: int, x: torch.Tensor) -> torch.Tensor:
        """Layer l replaces the stream with its hidden states, resid_post = lstm.h, or adds them to it (`residual`)."""
        hook, lstm = self.layer_hook(l), cast(nn.LSTM, self.layers[l])  # ModuleList items are typed Module
        stream = x  # (B,T,d)
        if l > 0:
            x = self.dropout(x)
        if self.size.norm_inputs:
            x = self.input_norms[l](x)  # (B,T,d), unit scale per token whatever the embedding's or h's scale
        if self.wants(f"blocks.{l}.lstm.c"):  # the fused nn.LSTM returns only h: run the cell loop for c
            h, c = lstm_cell_loop(lstm, x)  # (B,T,d) each
            hook("lstm.c", c)
        elif lstm_needs_float32(x):  # CPU bf16 autocast without a bf16 LSTM kernel here (AVX2): float32 recurrence
            with torch.autocast("cpu", enabled=False):
                h, _ = lstm(x.float())  # (B,T,d)
        else:
            h, _ = lstm(x)  # (B,T,d)
        h = hook("lstm.h", h)
        return stream + h if self.size.residual else h

    def state_size(self, T: int) -> int:
        """h and c of every layer; independent of T."""
        return 2 * self.n_layers * self.d_model
