"""A plugin package for the tests (tests/test_plugins.py) and the walk-through of docs/own-model.md: a wind tunnel and
an architecture of a user's own.

    coin  a coin of unknown bias p ~ Beta(a, b) flipped n times; at every position the next flip's exact posterior
          predictive is P(heads) = (a + heads so far) / (a + b + flips so far) (Beta-Bernoulli)
    gru   a stacked GRU, the LSTM's shape (models/lstm.py) with `nn.GRU` layers; hook point `blocks.{l}.gru.h`

Importing the module registers both (`--import windtunnel_demo_plugin`); the test's dist-info names them as entry
points of the groups `windtunnel.tasks` and `windtunnel.models` too (an installed package's way).
"""

from __future__ import annotations

import math
from typing import cast

import torch
from pydantic import Field
from torch import nn
from torch.distributions import Categorical

from windtunnel import models, tasks
from windtunnel.models import InitSize, ResidualModel
from windtunnel.tasks import Batch, Task, TaskParams, TaskSpec

START = 2  # the token before the first flip (flips are 0 = tails, 1 = heads)


class CoinParams(TaskParams):
    n: int = Field(8, ge=1, description="flips per sequence")
    a: float = Field(1.0, gt=0, description="Beta prior on the bias: pseudo-heads")
    b: float = Field(1.0, gt=0, description="Beta prior on the bias: pseudo-tails")


class Coin(Task[CoinParams]):
    """Predict the next flip of a coin whose bias is drawn afresh per sequence."""

    name, Params = "coin", CoinParams
    primitive, title = "belief accumulation (counting)", "Coin"
    length_param = "n"
    approximations_note = "Coin: 'fair coin' (always 50/50: ignores the flips), 'last flip' (repeats it, 90/10)."

    @property
    def spec(self) -> TaskSpec:
        return TaskSpec(
            "coin", "tokens", "classes", seq_len=self.params.n, vocab_size=3, n_classes=2, log10_hypotheses=math.inf
        )

    def _posterior(self, flips: torch.Tensor) -> torch.Tensor:
        """(B,n) flips -> (B,n,2) P(next flip) before each flip: Beta-Bernoulli predictive, float64."""
        p = self.params
        before = torch.cat([torch.zeros_like(flips[:, :1]), flips[:, :-1]], dim=1).to(torch.float64).cumsum(1)
        seen = torch.arange(flips.shape[1], device=flips.device, dtype=torch.float64)  # flips before position t
        heads = (p.a + before) / (p.a + p.b + seen)  # (B,n)
        return torch.stack([1 - heads, heads], dim=-1)

    def _sample(self, batch_size: int, g: torch.Generator, device: torch.device) -> Batch:
        p, n = self.params, self.params.n
        gamma_a = torch._standard_gamma(torch.full((batch_size,), p.a, dtype=torch.float64, device=device), g)
        gamma_b = torch._standard_gamma(torch.full((batch_size,), p.b, dtype=torch.float64, device=device), g)
        bias = gamma_a / (gamma_a + gamma_b)  # (B,) Beta(a, b)
        flips = (torch.rand(batch_size, n, generator=g, device=device, dtype=torch.float64) < bias[:, None]).long()
        inputs = torch.cat([torch.full_like(flips[:, :1], START), flips[:, :-1]], dim=1)  # (B,n): start, x_1..
        posterior = Categorical(probs=self._posterior(flips).float(), validate_args=False)
        mask = torch.ones_like(flips, dtype=torch.bool)
        return Batch(inputs, mask, flips, posterior, latent={"bias": bias})

    def approximations(self, batch: Batch) -> dict[str, Categorical]:
        B, T = batch.target_mask.shape
        fair = torch.full((B, T, 2), 0.5, device=batch.device)
        prev = batch.inputs.clamp_max(1)  # the last flip (the start token reads as tails)
        last = torch.nn.functional.one_hot(prev, 2).float() * 0.8 + 0.1
        return {"fair coin": Categorical(probs=fair), "last flip": Categorical(probs=last)}


class GRUSize(InitSize):
    """Size of a `GRU` (no position embedding: a recurrence knows where it is)."""

    n_layers: int = Field(default=2, ge=1, strict=True)
    d_model: int = Field(default=64, ge=1, strict=True)
    tie: bool = True


class GRU(ResidualModel):
    """Stacked GRU: embedding -> n_layers nn.GRU -> LayerNorm -> head; hook point `blocks.{l}.gru.h`."""

    Size = GRUSize
    size: GRUSize
    layer_hooks = ("gru.h",)

    def build_layers(self) -> None:
        s = self.size
        self.n_layers = s.n_layers
        self.layers = nn.ModuleList(nn.GRU(s.d_model, s.d_model, batch_first=True) for _ in range(s.n_layers))
        self.norm = nn.LayerNorm(s.d_model)

    def layer(self, l: int, x: torch.Tensor) -> torch.Tensor:
        h, _ = cast(nn.GRU, self.layers[l])(x)  # (B,T,d)
        return self.layer_hook(l)("gru.h", h)

    def state_size(self, T: int) -> int:
        return self.n_layers * self.d_model


tasks.register("coin", Coin)
models.register("gru", GRU)
