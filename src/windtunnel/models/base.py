"""The model protocol every architecture follows, the residual skeleton they share, and how an output becomes a
predictive distribution.

    out = model(inputs)                                  # (B,T,K) logits, or (B,T,2) Gaussian (mean, log-variance)
    out, cache = model.run_with_cache(inputs, names=[...])   # named activations (models/hooks.py, docs/hooks.md)

Every built-in architecture is a `ResidualModel`: embed -> n_layers x `layer(l, h)` -> final norm -> head, with the
hook points embed, blocks.{l}.resid_pre, blocks.{l}.resid_post and final placed here once; an architecture file
holds only its layer (the mixer and how it joins the residual stream) and that layer's own hook points.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributions import Categorical, Distribution, Normal

from windtunnel.models.hooks import HookedModel
from windtunnel.tasks.base import TaskSpec

# Bounds on a Gaussian head's log-variance: keeps NLL finite early in training.
LOGVAR_MIN, LOGVAR_MAX = -12.0, 8.0


class SequenceModel(nn.Module):
    """Base class of all architectures: a causal map from (B,T[,D]) inputs to per-position outputs."""

    spec: TaskSpec

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def n_params(self) -> int:
        """Trainable parameter count (tied weights counted once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def state_size(self, T: int) -> int:
        """Numbers kept per sequence at inference after T tokens (KV cache, recurrent state, ...)."""
        raise NotImplementedError


class ResidualModel(HookedModel, SequenceModel):
    """embed -> n_layers x layer(l, h) -> final norm -> head, with the shared hook points around every layer."""

    embed: nn.Module
    norm: nn.Module
    head: nn.Module

    def layer(self, l: int, h: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        """Layer l on the (B,T,d) residual stream: the stream it leaves (for most layers h + mixer(norm(h)))."""
        raise NotImplementedError

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        h = self.hook("embed", self.embed(inputs))  # (B,T,d)
        for l in range(self.n_layers):
            h = self.hook(f"blocks.{l}.resid_pre", h)
            h = self.hook(f"blocks.{l}.resid_post", self.layer(l, h))  # (B,T,d)
        return self.head(self.hook("final", self.norm(h)))  # (B,T,K) or (B,T,2)


def predictive(spec: TaskSpec, out: torch.Tensor) -> Distribution:
    """Turn a model's head output into the predictive distribution with batch shape (B,T)."""
    if spec.answer_kind == "classes":
        return Categorical(logits=out.float(), validate_args=False)
    mean, logvar = out.float().unbind(-1)
    scale = torch.exp(0.5 * logvar.clamp(LOGVAR_MIN, LOGVAR_MAX))
    return Normal(mean, scale, validate_args=False)
