"""Held-out probe data: one forward pass with the activation cache over sequences the model never trained on.

Probes read the test stream (`runs.test_seed`) from index `PROBE_OFFSET` upward: never a training or validation
sequence (the official analysis scripts rebuilt the training dataset with the same seed), and never the chunks
the evaluation scores (indices below PROBE_OFFSET).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from windtunnel.metrics import entropy_bits as dist_entropy_bits
from windtunnel.metrics import entropy_mae_bits
from windtunnel.models.base import predictive
from windtunnel.runs import test_seed
from windtunnel.tasks.base import Batch

PROBE_OFFSET = 2**29  # test-stream index of the first probe batch


def not_applicable(reason: str) -> dict[str, str]:
    """The one shape of a probe result that does not apply to this architecture or task."""
    return {"not_applicable": reason}


@dataclass
class ProbeData:
    """A held-out batch, the model's output on it and its activation cache, plus per-position entropies."""

    batch: Batch
    out: torch.Tensor  # (B,T,K) logits or (B,T,2)
    cache: dict[str, Any]
    mask: torch.Tensor  # (B,T) bool scored positions
    post_entropy: torch.Tensor  # (B,T) float64 bits, exact posterior
    model_entropy: torch.Tensor  # (B,T) float64 bits, model predictive

    @property
    def entropy_error(self) -> float:
        """Mean |H_model - H_posterior| in bits over scored positions (= metrics.entropy_mae_bits)."""
        return float((self.model_entropy - self.post_entropy).abs()[self.mask].mean())


def entropy_error_bits(model: torch.nn.Module, batch: Batch) -> float:
    """Mean |H_model - H_posterior| (bits) over the scored positions of `batch` (used by ablations, dynamics)."""
    with torch.no_grad():
        out = model(batch.inputs)
    return entropy_mae_bits(predictive(model.spec, out), batch)


def heldout_batch(task: Any, n: int, offset: int = 0, device: torch.device | str = "cpu") -> Batch:
    """`n` held-out sequences of `task` from the test stream, index PROBE_OFFSET + offset."""
    if int(n) < 1:
        raise ValueError(f"n: must be >= 1 (got {n})")
    return task.sample(int(n), seed=test_seed(PROBE_OFFSET + int(offset)), device=device)


def collect(model: torch.nn.Module, task: Any, n: int = 256, offset: int = 0) -> ProbeData:
    """Run `model` with cache=True on `n` held-out sequences of `task`."""
    device = next(model.parameters()).device
    batch = heldout_batch(task, n, offset, device)
    model.eval()
    with torch.no_grad():
        out, cache = model(batch.inputs, cache=True)
    return ProbeData(
        batch=batch,
        out=out,
        cache=cache,
        mask=batch.target_mask.bool(),
        post_entropy=dist_entropy_bits(batch.posterior).double(),
        model_entropy=dist_entropy_bits(predictive(model.spec, out)).double(),
    )


def max_entropy_bits(T: int) -> float:
    """Entropy of a uniform attention row over T keys: the upper bound of any attention entropy."""
    return math.log2(max(int(T), 1))
