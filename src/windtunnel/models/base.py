"""The model protocol every architecture follows, and how its output becomes a predictive distribution.

    out = model(inputs)                 # (B,T,K) logits, or (B,T,2) Gaussian (mean, log-variance)
    out, cache = model(inputs, cache=True)

The cache is a dict:
    "resid":  list of (B,T,d) tensors -- the residual stream after the embedding and after every layer
    "final":  (B,T,d) -- the representation the head reads (after the final norm)
    "layers": list (one per layer) of dicts with the architecture's internals, e.g.
              transformer: q, k, v (B,H,T,dh), attn (B,H,T,T)
              mamba:       delta (B,T,Di), B (B,T,N), C (B,T,N), h (B,T,Di,N)
              lstm:        h, c (B,T,d)
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributions import Categorical, Distribution, Normal

from windtunnel.tasks.base import TaskSpec

# Bounds on a Gaussian head's log-variance: keeps NLL finite early in training.
LOGVAR_MIN, LOGVAR_MAX = -12.0, 8.0


class SequenceModel(nn.Module):
    """Base class of all architectures: a causal map from (B,T[,D]) inputs to per-position outputs."""

    spec: TaskSpec

    def forward(self, inputs: torch.Tensor, cache: bool = False):  # pragma: no cover - interface
        raise NotImplementedError

    def n_params(self) -> int:
        """Trainable parameter count (tied weights counted once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def state_size(self, T: int) -> int:
        """Numbers kept per sequence at inference after T tokens (KV cache, recurrent state, ...)."""
        raise NotImplementedError


def predictive(spec: TaskSpec, out: torch.Tensor) -> Distribution:
    """Turn a model's head output into the predictive distribution with batch shape (B,T)."""
    if spec.answer_kind == "classes":
        return Categorical(logits=out.float(), validate_args=False)
    mean, logvar = out.float().unbind(-1)
    scale = torch.exp(0.5 * logvar.clamp(LOGVAR_MIN, LOGVAR_MAX))
    return Normal(mean, scale, validate_args=False)
