"""The two never-trained predictors, registered as architectures so every consumer builds a run's predictor the same
way: `oracle` (the exact posterior; every error metric reads 0) and `uniform` (the context-blind floor)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, cast

import torch
from torch import nn
from torch.distributions import Categorical, Distribution, Normal

from windtunnel.models.base import ModelSize, check_output, predictive
from windtunnel.models.registry import built_ins, is_baseline
from windtunnel.tasks.adapter import as_task
from windtunnel.tasks.base import Batch, TaskSpec


class BaselineSize(ModelSize):
    """A baseline has no size fields (`max_len` is accepted and unused: it reads no positions)."""


class _Baseline(nn.Module):
    """A predictor of whole batches (`predict(batch)`), built like an architecture: `Baseline(spec, size, task=...)`."""

    Size = BaselineSize
    baseline = context_blind = True  # models.info: never trained; reads no context (the oracle needs none)

    def __init__(
        self, spec: TaskSpec, size: ModelSize | Mapping[str, Any] | None = None, task: Any = None, **fields: Any
    ) -> None:
        super().__init__()
        self.spec, self.task = spec, task
        self.size = self.Size.of(size, fields)

    def predict(self, batch: Batch) -> Distribution:  # pragma: no cover - interface
        raise NotImplementedError


class Oracle(_Baseline):
    """The exact-Bayes predictor: returns the batch's posterior. Every error metric must read 0 for it."""

    row, color = 60, "k"  # models.info: report row, figure colour

    def predict(self, batch: Batch) -> Distribution:
        return batch.posterior


class Uniform(_Baseline):
    """The context-blind floor: uniform over the K answer classes.

    For real answers it uses the task's `prior_predictive(batch)` if the task provides one, else a Normal
    with the mean and variance of the batch's targets pooled over all scored positions.
    """

    row, color = 70, "C7"  # models.info: report row, figure colour

    def predict(self, batch: Batch) -> Distribution:
        B, T = batch.target_mask.shape
        if self.spec.answer_kind == "classes":
            assert self.spec.n_classes is not None  # TaskSpec: class answers have n_classes
            logits = torch.zeros(B, T, int(self.spec.n_classes), device=batch.device)  # (B,T,K)
            return Categorical(logits=logits, validate_args=False)
        prior = as_task(self.task).prior_predictive(batch) if self.task is not None else None
        if prior is not None:
            return prior
        y = batch.targets[batch.target_mask.bool()].double()
        mean, std = y.mean(), y.std().clamp_min(1e-6)
        shape = batch.target_mask.shape
        return Normal(mean.expand(shape).float(), std.expand(shape).float(), validate_args=False)


class _PredictsBatches(Protocol):
    """What a baseline (`is_baseline`) offers in place of a forward pass."""

    def predict(self, batch: Batch) -> Distribution: ...


def predict(model: nn.Module, spec: TaskSpec, batch: Batch) -> Distribution:
    """Predictive distribution (batch shape (B,T)) of a model or baseline on a batch, in one forward pass."""
    if is_baseline(model):
        return cast(_PredictsBatches, model).predict(batch)  # duck-typed: any module with `baseline = True`
    return predictive(spec, check_output(model, spec, batch.inputs, model(batch.inputs), "evaluation"))


# The built-in baselines' names: never trained, evaluated like any run. Kept for those who import it; whether an
# architecture (a user's own included) is a baseline is `models.is_baseline(arch)`, never membership in this tuple.
BASELINES = tuple(built_ins(baseline=True))
__all__ = ["BASELINES", "BaselineSize", "Oracle", "Uniform", "is_baseline", "predict"]
