"""Small helpers the built-in wind tunnels share: random permutations, sampling, and posterior packing."""

from __future__ import annotations

import math

import torch
from torch.distributions import Categorical, Normal


def random_perm(batch: int, n: int, g: torch.Generator, device: torch.device) -> torch.Tensor:
    """(B,n) long: an independent uniform permutation of 0..n-1 per row (argsort of uniform noise)."""
    return torch.rand(batch, n, generator=g, device=device).argsort(dim=-1)


def sample_rows(probs: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Draw one class per row of `probs` (...,K) by inverse CDF; returns (...) long. Uses only `g`."""
    cdf = probs.double().cumsum(-1)  # (...,K)
    u = torch.rand(probs.shape[:-1], generator=g, device=probs.device, dtype=torch.float64)  # (...)
    u = u * cdf[..., -1]
    idx = (cdf <= u.unsqueeze(-1)).sum(-1)  # (...): number of classes whose cdf is passed
    return idx.clamp_max(probs.shape[-1] - 1)


def scatter_posterior(probs: torch.Tensor, mask: torch.Tensor, shape: tuple[int, int, int]) -> Categorical:
    """Categorical with batch shape (B,T) over K classes: `probs` (N,K) at the True entries of `mask`
    (B,T), uniform elsewhere; computed in float64 by the caller, returned as float32."""
    B, T, K = shape
    full = torch.full((B, T, K), 1.0 / K, dtype=torch.float32, device=mask.device)  # (B,T,K)
    full[mask] = probs.to(torch.float32)
    return Categorical(probs=full, validate_args=False)


def scatter_normal(loc: torch.Tensor, scale: torch.Tensor, mask: torch.Tensor) -> Normal:
    """Normal with batch shape (B,T): (loc, scale) (N,) at the True entries of `mask`, N(0,1) elsewhere."""
    full_loc = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)  # (B,T)
    full_scale = torch.ones(mask.shape, dtype=torch.float32, device=mask.device)  # (B,T)
    full_loc[mask] = loc.to(torch.float32)
    full_scale[mask] = scale.to(torch.float32)
    return Normal(full_loc, full_scale, validate_args=False)


def scatter_targets(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,T) targets: `values` (N,) at the True entries of `mask`, 0 elsewhere, dtype of `values`."""
    out = torch.zeros(mask.shape, dtype=values.dtype, device=mask.device)  # (B,T)
    out[mask] = values
    return out


def log10_falling(n: int, k: int) -> float:
    """log10 of n! / (n-k)!: the number of ordered draws of k distinct items from n."""
    return (math.lgamma(n + 1) - math.lgamma(n - k + 1)) / math.log(10.0)
