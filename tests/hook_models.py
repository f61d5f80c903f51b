"""Models for the hook tests: the architectures they cover (ARCHS), a seeded smoke model of one (`build`) and inputs
it reads (`inputs`)."""

from __future__ import annotations

import torch

from windtunnel import models, tasks
from windtunnel.models import presets

ARCHS = ["transformer", "mamba", "lstm", "mlp", "mlp-pointwise"]


def build(arch: str, task: str = "bijection", **extra):
    torch.manual_seed(0)
    spec = tasks.make(task, **({"V": 6, "L": 5} if task == "bijection" else {})).spec
    return models.make(arch, spec, presets.preset(task, arch, "smoke"), **extra).eval()


def inputs(model, B: int = 3, T: int = 8, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    spec = model.spec
    if spec.input_kind == "tokens":
        return torch.randint(0, spec.vocab_size, (B, T), generator=g)
    return torch.randn(B, T, spec.input_dim, generator=g)
