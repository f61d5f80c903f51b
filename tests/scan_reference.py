"""The selective-scan test inputs and reference shared by tests/test_mamba_scan.py and tests/test_scan_kernel.py: the
unfused autograd loop every fast scan is compared with, inputs in a trained block's ranges, and input gradients."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from windtunnel.models.scans import sequential_scan


def reference(u, delta, A, B, C):
    """The unfused computation the Mamba block does with scan="sequential" (autograd through every step)."""
    dA = delta[..., None] * A  # (B,T,Di,N)
    dBu = (delta * u)[..., None] * B[:, :, None, :]  # (B,T,Di,N)
    return torch.einsum("btdn,btn->btd", sequential_scan(dA.exp(), dBu), C)  # (B,T,Di)


def make_inputs(b, t, di, n, dtype, seed=0):
    """Realistic ranges: delta = softplus(.) around 0.01-1, A = -[1..N] (S4D-real) times a per-channel jitter."""
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(b, t, di, generator=g, dtype=dtype)  # (B,T,Di)
    delta = F.softplus(torch.randn(b, t, di, generator=g, dtype=dtype) - 2)  # (B,T,Di)
    A = -torch.arange(1, n + 1, dtype=dtype) * torch.rand(di, 1, generator=g, dtype=dtype).add(0.5)  # (Di,N)
    B = torch.randn(b, t, n, generator=g, dtype=dtype)  # (B,T,N)
    C = torch.randn(b, t, n, generator=g, dtype=dtype)  # (B,T,N)
    return [x.requires_grad_() for x in (u, delta, A, B, C)]


def grads(f, xs, w):
    """The gradients of sum(f(*xs) * w) with respect to every input."""
    return torch.autograd.grad((f(*xs) * w).sum(), xs)
