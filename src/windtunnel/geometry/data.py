"""Held-out probe data: one forward pass, caching the named activations the probes read (models/hooks.py), over
sequences the model never trained on.

Probes read the test stream (`seeds.test_seed`) from index `PROBE_OFFSET` upward: never a training or validation
sequence (the official analysis scripts rebuilt the training dataset with the same seed), and never the chunks
the evaluation scores (indices below PROBE_OFFSET).

Device: the probes run where the model's parameters are. The held-out sequences are always drawn by the CPU
generator of their seed and then moved there (`to_device`), so a model probed on CUDA reads the very sequences it
reads on the CPU (a CUDA generator draws other numbers from the same seed) and the two agree to float tolerance
(tests/test_gpu.py); on the CPU nothing is moved. Every number leaves as a Python float, and every array goes
through `.cpu()` before numpy / scikit-learn (geometry/stats.py).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace
from typing import Any, cast

import torch
from torch.distributions import Distribution

from windtunnel.devices import model_device
from windtunnel.evaluation.metrics import entropy_bits as dist_entropy_bits
from windtunnel.evaluation.metrics import entropy_mae_bits
from windtunnel.models.base import predictive
from windtunnel.models.hooks import HookedModel
from windtunnel.seeds import test_seed
from windtunnel.tasks.base import Batch, TaskSpec

PROBE_OFFSET = 2**29  # test-stream index of the first probe batch


def not_applicable(reason: str) -> dict[str, str]:
    """The one shape of a probe result that does not apply to this architecture or task."""
    return {"not_applicable": reason}


def model_spec(model: torch.nn.Module) -> TaskSpec:
    """The task spec a predictor holds (`SequenceModel.spec`, and the baselines' too): nn.Module's stubs type an
    attribute they do not know as `Tensor | Module`."""
    return cast(TaskSpec, model.spec)


def probe_hook_names(model: torch.nn.Module) -> list[str]:
    """The hook points the probes read, where the model has them: the residual stream after the embedding and
    every layer, the final representation, every layer's attention pattern and the last layer's values. Never a
    recurrent state (Mamba's h is the largest activation and needs the slow scan; no probe reads it)."""
    have = set(getattr(model, "hook_names", ()))
    L = int(getattr(model, "n_layers", 0))
    want = [
        "embed",
        *(f"blocks.{l}.resid_post" for l in range(L)),
        "final",
        *(f"blocks.{l}.attn.pattern" for l in range(L)),
        f"blocks.{L - 1}.attn.v",
    ]
    return [n for n in want if n in have]


@dataclass
class ProbeData:
    """A held-out batch, the model's output on it and its named activations, plus per-position entropies."""

    batch: Batch
    out: torch.Tensor  # (B,T,K) logits or (B,T,2)
    cache: dict[str, torch.Tensor]  # hook name -> activation (probe_hook_names)
    mask: torch.Tensor  # (B,T) bool scored positions
    post_entropy: torch.Tensor  # (B,T) float64 bits, exact posterior
    model_entropy: torch.Tensor  # (B,T) float64 bits, model predictive

    def per_layer(self, point: str) -> list[torch.Tensor] | None:
        """`blocks.{l}.<point>` for every layer l = 0, 1, ... in the cache, or None when layer 0 has none."""
        out: list[torch.Tensor] = []
        while (x := self.cache.get(f"blocks.{len(out)}.{point}")) is not None:
            out.append(x)
        return out or None

    @property
    def resid(self) -> list[torch.Tensor]:
        """The residual stream after the embedding and after every layer, (B,T,d) each ([] when not cached)."""
        post = self.per_layer("resid_post")
        return [self.cache["embed"], *post] if post and "embed" in self.cache else []

    @property
    def final(self) -> torch.Tensor:
        """(B,T,d): the representation the head reads (hook point `final`, after the final norm)."""
        return self.cache["final"]

    @property
    def entropy_error(self) -> float:
        """Mean |H_model - H_posterior| in bits over scored positions (= metrics.entropy_mae_bits)."""
        return float((self.model_entropy - self.post_entropy).abs()[self.mask].mean())


def entropy_error_bits(model: torch.nn.Module, batch: Batch) -> float:
    """Mean |H_model - H_posterior| (bits) over the scored positions of `batch` (used by ablations, dynamics)."""
    with torch.no_grad():
        out = model(batch.inputs)
    return entropy_error_of(model, out, batch)


def entropy_error_of(model: torch.nn.Module, out: torch.Tensor, batch: Batch) -> float:
    """`entropy_error_bits` of `model`'s head output `out` on `batch`, already computed."""
    return entropy_mae_bits(predictive(model_spec(model), out), batch)


def _distribution_to(dist: Distribution, device: torch.device) -> Distribution:
    """A copy of `dist` whose tensors (parameters, and any already-computed lazy ones) live on `device`.

    Copied attribute by attribute, not rebuilt from a parameter: `Categorical(probs=p)` renormalises p, which could
    change the last bit of a probability."""
    out = copy.copy(dist)
    out.__dict__.update({k: v.to(device) for k, v in vars(dist).items() if isinstance(v, torch.Tensor)})
    return out


def to_device(batch: Batch, device: torch.device | str) -> Batch:
    """`batch` with every tensor (inputs, mask, targets, posterior, latent) on `device`; the batch itself when it
    is there already."""
    dev = torch.device(device)
    if batch.inputs.device == dev:
        return batch
    return replace(
        batch,
        inputs=batch.inputs.to(dev),
        target_mask=batch.target_mask.to(dev),
        targets=batch.targets.to(dev),
        posterior=_distribution_to(batch.posterior, dev),
        latent={k: v.to(dev) if isinstance(v, torch.Tensor) else v for k, v in batch.latent.items()},
    )


def heldout_batch(task: Any, n: int, offset: int = 0, device: torch.device | str = "cpu") -> Batch:
    """`n` held-out sequences of `task` from the test stream, index PROBE_OFFSET + offset, on `device`.

    Drawn on the CPU (the same sequences whatever `device`), then moved to `device` (see the module docstring)."""
    if int(n) < 1:
        raise ValueError(f"n: must be >= 1 (got {n})")
    batch = task.sample(int(n), seed=test_seed(PROBE_OFFSET + int(offset)), device="cpu")
    return to_device(batch, device)


def check_fits(model: torch.nn.Module, task: Any) -> None:
    """ValueError where `model`'s spec answers otherwise than `task` (input kind, answer kind, K): every probe reads
    the outputs as the task's answers (`predictive(model.spec, ...)`), so a model answering over another K (a Hugging
    Face LM's whole vocabulary) would report a wrong number, not fail."""
    mine, theirs = getattr(model, "spec", None), task.spec
    if not isinstance(mine, TaskSpec) or not isinstance(theirs, TaskSpec):
        return
    for field in ("input_kind", "answer_kind", "output_dim"):
        if getattr(mine, field) != getattr(theirs, field):
            hint = (
                "; a Hugging Face causal LM answers a wind tunnel through its answer tokens: windtunnel.hf.from_hf(lm, "
                "task)"
                if mine.answer_kind == "classes" and mine.output_dim == mine.vocab_size
                else ""
            )
            raise ValueError(
                f"model: its spec ({mine.name!r}) has {field} {getattr(mine, field)}, task {theirs.name!r} "
                f"{getattr(theirs, field)}: its outputs are not the task's answers{hint}"
            )


def collect(model: torch.nn.Module, task: Any, n: int = 256, offset: int = 0) -> ProbeData:
    """Run `model` on `n` held-out sequences of `task` on the model's device, caching `probe_hook_names(model)`; a
    model whose outputs are not the task's answers is refused first (`check_fits`)."""
    check_fits(model, task)
    device = model_device(model)
    batch = heldout_batch(task, n, offset, device)
    model.eval()
    cache: dict[str, torch.Tensor]  # an ActivationCache, or {} for a model without hook points
    with torch.no_grad():
        if hasattr(model, "run_with_cache"):
            hooked = cast(HookedModel, model)  # duck-typed: any model with hook points
            out, cache = hooked.run_with_cache(batch.inputs, names=probe_hook_names(model))
        else:  # a model without hook points: the probes that need activations say "not applicable"
            out, cache = model(batch.inputs), {}
    return ProbeData(
        batch=batch,
        out=out,
        cache=cache,
        mask=batch.target_mask.bool(),
        post_entropy=dist_entropy_bits(batch.posterior).double(),
        model_entropy=dist_entropy_bits(predictive(model_spec(model), out)).double(),
    )


def max_entropy_bits(T: int) -> float:
    """Entropy of a uniform attention row over T keys: the upper bound of any attention entropy."""
    return math.log2(max(int(T), 1))
