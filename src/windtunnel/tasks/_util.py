"""Small helpers the built-in wind tunnels share: random permutations, sampling, and posterior packing."""

from __future__ import annotations

import math

import torch
from torch.distributions import Categorical, Distribution, Normal


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


def peak_rows(rows: torch.Tensor, weight: float, g: torch.Generator) -> torch.Tensor:
    """Rows (B,R,C) as weight P + (1 - weight) rows, P a one-hot row at a column drawn per sequence from `g` (distinct
    columns where R <= C, a permutation where R = C); weight 0 returns the rows and draws nothing."""
    if weight == 0.0:
        return rows
    B, R, C = rows.shape
    order = torch.rand(B, max(R, C), generator=g, device=rows.device, dtype=torch.float64).argsort(-1)  # (B,max)
    peak = torch.nn.functional.one_hot(order[:, :R] % C, C).to(rows.dtype)  # (B,R,C)
    return weight * peak + (1 - weight) * rows


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


def token_inputs(inputs: torch.Tensor, seq_len: int) -> torch.Tensor:
    """`inputs` as (B,seq_len) long token ids; a ValueError naming the expected shape where they are not integer tokens
    of that length (`posterior_for` of a token tunnel)."""
    if inputs.dim() != 2 or inputs.shape[1] != seq_len or inputs.is_floating_point() or inputs.is_complex():
        raise ValueError(
            f"inputs: expected integer tokens of shape (B, {seq_len}) (got {tuple(inputs.shape)}, {inputs.dtype})"
        )
    return inputs.long()


def first_invalid(checks: list[tuple[torch.Tensor, str]]) -> None:
    """A ValueError "inputs: <what> (sequence i)" for the first (bad (B,) bool, what) that holds for some sequence:
    the one-line reason `posterior_for` refuses an input no sequence of the tunnel could be."""
    for bad, what in checks:
        if bool(bad.any()):
            raise ValueError(f"inputs: {what} (sequence {int(bad.nonzero()[0, 0])})")


def log10_falling(n: int, k: int) -> float:
    """log10 of n! / (n-k)!: the number of ordered draws of k distinct items from n."""
    return (math.lgamma(n + 1) - math.lgamma(n - k + 1)) / math.log(10.0)


# --- adversarial controls (Task.controls): predictors that match the exact entropy without inferring ---

CONTROL_FLOOR = 1e-12  # least mass a categorical control puts on a class: finite logs, entropy moved < 1e-8 bits


def floored(probs: torch.Tensor) -> Categorical:
    """Categorical (batch shape probs.shape[:-1]) from `probs` (...,K) with every class given at least
    CONTROL_FLOOR, so that log-probs and KL(exact || control) stay finite; float32 like the exact posterior."""
    return Categorical(probs=probs.to(torch.float32).clamp_min(CONTROL_FLOOR), validate_args=False)


def scatter_control(probs: torch.Tensor, mask: torch.Tensor) -> Categorical:
    """`floored` Categorical with batch shape (B,T) = mask.shape: `probs` (N,K) at the True entries of `mask`, uniform
    elsewhere (`scatter_posterior`)."""
    return floored(scatter_posterior(probs, mask, (*mask.shape, probs.shape[-1])).probs)


def can_shift(mask: torch.Tensor) -> bool:
    """Whether `other_sequence` can give every scored position something other than itself."""
    return mask.shape[0] > 1 or int(mask[0].sum()) > 1


def other_sequence(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """x (B,T,...) with each sequence's entries replaced by the previous sequence's at the same position (batch
    rolled by one); for B == 1, each scored position's entry by the next scored position's (cyclically)."""
    if x.shape[0] > 1:
        return x.roll(1, dims=0)
    idx = mask[0].nonzero().flatten()  # (P,) scored positions
    out = x.clone()
    out[0, idx] = x[0, idx.roll(-1)]
    return out


def entropy_matched_ramp(probs: torch.Tensor, iters: int = 60) -> torch.Tensor:
    """(N,K) float64: q_j ~ exp(-beta j) over classes 0..K-1, beta >= 0 solved by bisection so that each row's
    entropy equals that of `probs` (N,K). It reads how uncertain the posterior is, never about which class."""
    p = probs.double()
    target = -torch.special.xlogy(p, p).sum(-1, keepdim=True)  # (N,1) nats
    ramp = torch.arange(p.shape[-1], dtype=torch.float64, device=p.device)  # (K,)
    lo, hi = torch.zeros_like(target), torch.full_like(target, 50.0)  # entropy(beta=50) < 1e-19 nats

    def logq(beta: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(-beta * ramp, -1)  # (N,K)

    for _ in range(iters):  # entropy decreases in beta
        mid = (lo + hi) / 2
        lq = logq(mid)
        too_flat = -(lq.exp() * lq).sum(-1, keepdim=True) > target  # (N,1)
        lo, hi = torch.where(too_flat, mid, lo), torch.where(too_flat, hi, mid)
    return logq((lo + hi) / 2).exp()


def generic_controls(posterior: Distribution, mask: torch.Tensor) -> dict[str, Distribution]:
    """The controls any tunnel gets (`Task.controls`): another sequence's posterior at the same position, and for
    class answers the exact posterior with its labels renamed (cyclic shift by one) and the entropy-matched ramp.
    Empty for a single class (nothing can be wrong) or a distribution family other than Categorical / Normal."""
    out: dict[str, Distribution] = {}
    if isinstance(posterior, Categorical):
        probs = posterior.probs  # (B,T,K)
        if probs.shape[-1] < 2:
            return out
        if can_shift(mask):
            out["another sequence's posterior"] = floored(other_sequence(probs, mask))
        out["renamed classes"] = floored(probs.roll(1, dims=-1))
        out["entropy only"] = scatter_control(entropy_matched_ramp(probs[mask]), mask)
    elif isinstance(posterior, Normal) and can_shift(mask):
        loc, scale = (v.expand(posterior.batch_shape) for v in (posterior.loc, posterior.scale))  # (B,T)
        out["another sequence's posterior"] = Normal(
            other_sequence(loc, mask), other_sequence(scale, mask), validate_args=False
        )
    return out
