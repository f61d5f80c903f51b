"""Mamba (selective state-space model) in PyTorch, with fused, parallel and sequential scans, and mamba-ssm's CUDA
kernel where it is installed.

`variant="reference"` follows the Mamba paper / state-spaces reference block (mamba-minimal's structure):
    [u, z] = in_proj(x);  u = SiLU(causal depthwise conv_k(u));  [dt, B, C] = x_proj(u)
    delta = softplus(dt_proj(dt))  (B,T,Di);  A = -exp(A_log)  (Di,N)
    h_t = exp(delta_t A) * h_{t-1} + delta_t B_t u_t   (B,Di,N);  y_t = h_t C_t + D u_t;  out = out_proj(y * SiLU(z))
with the residual h + block(RMSNorm(h)) and a final RMSNorm. The recurrence is linear in h, so training never
builds a per-step autograd graph. `scan="auto"` (default) picks, by the input's device:
  * CPU: `scan="fused"`, `selective_scan`: one loop over t computing exp(delta A), h and y = h C from (B,N,Di) slabs,
    with a hand-written reverse-loop backward. It never materialises the (B,T,Di,N) dA / dBu tensors (CPU training
    is memory- and allocation-bound): ~5x faster model steps than "parallel" at batch 64, d 128 (1 thread).
  * CUDA with `mamba_ssm` importable (the `cuda` extra, `pip install -e '.[cuda]'`): `scan="kernel"`,
    `kernel_selective_scan`, the same recurrence (no D, no gate, no softplus inside) by mamba-ssm's fused CUDA kernel
    `selective_scan_fn`, forward and backward; tested equal to the fused CPU scan (tests/test_gpu.py).
  * elsewhere: `scan="parallel"`, a custom autograd function on the materialised dA, dBu whose backward is itself a
    reverse scan, with a log-depth Hillis-Steele kernel (GPU) or a single in-place pass (CPU; see `parallel_scan`).
An explicit `scan="kernel"` off CUDA, or where `mamba_ssm` does not import, is a ValueError naming model.size.scan.
`scan="sequential"` runs the plain autograd loop over t -- the reference the fast paths are tested against. The states
h_t are materialised (hook point `blocks.{l}.ssm.h`, models/hooks.py) only in a layer whose h a probe asks for.

`variant="paper"` is the authors' simplified block (`MambaBlock` of experiments/paper1_bijection/train_mamba.py
in vishalmisra/bayesian-wind-tunnel): rank-1 dt, a shared A_log =
log(0.1 [1..N]), clamps on delta, delta A, delta B u and the state, a LayerNorm on y, no pre-norm, nan_to_num after
every block, final LayerNorm. Its state clamp makes the recurrence non-linear, so it always scans sequentially.
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Callable, Mapping
from typing import Any, Literal, cast

import torch
import torch.nn.functional as F
from pydantic import Field, field_validator
from torch import nn
from torch.autograd.function import once_differentiable

from windtunnel.models.base import InitSize, ResidualModel, size_int
from windtunnel.models.common import Init, InputEmbedding, OutputHead, check_choice, initialise, no_weight_decay
from windtunnel.models.hooks import LayerHook
from windtunnel.models.registry import register
from windtunnel.tasks.base import TaskSpec

# ---------------------------------------------------------------------------------------------- scans


def _hillis_steele_(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """In place: b_t <- sum_{s<=t} (prod_{s<r<=t} a_r) b_s along dim 1 (h_t = a_t h_{t-1} + b_t, h_{-1}=0).

    log2(T) rounds; round k composes each step with the one 2^k earlier. Destroys `a`; returns `b`.
    """
    T, k = a.shape[1], 1
    while k < T:
        b[:, k:] = b[:, k:] + a[:, k:] * b[:, :-k]  # right side is materialised before the write
        if 2 * k < T:
            a[:, k:] = a[:, k:] * a[:, :-k]
        k *= 2
    return b


def _loop_(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The same result as `_hillis_steele_` by one in-place pass over t (no autograd graph, so no per-step cost)."""
    for t in range(1, b.shape[1]):
        b[:, t].addcmul_(a[:, t], b[:, t - 1])
    return b


SCAN_KERNELS = {"hillis-steele": _hillis_steele_, "loop": _loop_}


class _LinearScan(torch.autograd.Function):
    """h = scan(a, b) over dim 1 with a hand-written backward that is itself a reverse scan.

    Backward of h_t = a_t h_{t-1} + b_t: g_t = dL/dh_t + a_{t+1} g_{t+1} (a reverse scan), dL/db_t = g_t,
    dL/da_t = g_t h_{t-1}. Only a and h are saved, not the per-step intermediates autograd would keep.
    """

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor, kernel: str) -> torch.Tensor:
        h = SCAN_KERNELS[kernel](a.clone(), b.clone())
        ctx.save_for_backward(a, h)
        ctx.kernel = kernel
        return h

    @staticmethod
    def backward(ctx, grad_h: torch.Tensor):
        a, h = ctx.saved_tensors
        if ctx.kernel == "loop":  # g_t += a_{t+1} g_{t+1}, in place, from the end
            g = grad_h.clone()
            for t in range(g.shape[1] - 2, -1, -1):
                g[:, t].addcmul_(a[:, t + 1], g[:, t + 1])
        else:  # the same reverse scan as a forward scan over flipped time
            a_next = torch.cat([a[:, 1:], torch.zeros_like(a[:, :1])], dim=1)  # a_{t+1}, 0 past the end
            g = _hillis_steele_(a_next.flip(1), grad_h.flip(1)).flip(1)  # flip() copies: safe to write in place
        grad_a = torch.zeros_like(a)
        grad_a[:, 1:] = g[:, 1:] * h[:, :-1]  # h_{-1} = 0
        return grad_a, g, None


def parallel_scan(a: torch.Tensor, b: torch.Tensor, kernel: str = "auto") -> torch.Tensor:
    """All states of h_t = a_t * h_{t-1} + b_t (h_{-1} = 0); a, b (B,T,...) -> h (B,T,...).

    kernel: "hillis-steele" (log2 T rounds over the whole tensor: the parallel scan, best on GPU), "loop" (one
    in-place pass over t outside autograd: memory-bound CPUs run it ~4x faster), or "auto" (loop on CPU).
    Both share the analytic backward, so training never builds a per-step autograd graph.
    """
    if kernel == "auto":
        kernel = "loop" if a.device.type == "cpu" else "hillis-steele"
    check_choice("kernel", kernel, SCAN_KERNELS)
    return _LinearScan.apply(a, b, kernel)


def sequential_scan(a: torch.Tensor, b: torch.Tensor, clamp: float | None = None) -> torch.Tensor:
    """The same recurrence as a plain loop over t (optionally clamping h to +-clamp each step, paper variant)."""
    h = torch.zeros_like(b[:, 0])
    states = []
    for t in range(b.shape[1]):
        h = a[:, t] * h + b[:, t]
        if clamp is not None:
            h = h.clamp(-clamp, clamp)
        states.append(h)
    return torch.stack(states, dim=1)


_LOG2E = math.log2(math.e)


class _SelectiveScan(torch.autograd.Function):
    """y = selective_scan(u, delta, A, B, C) fused over t, keeping only per-step (B,N,Di) work tensors.

    Forward: h_t = exp(delta_t A) * h_{t-1} + (delta_t u_t) B_t  (h_{-1} = 0),  y_t = sum_n C_t[n] h_t[n].
    Why: the unfused path materialises dA, exp(dA), dBu, h and the einsum over (B,T,Di,N) and autograd keeps more;
    on CPU that is memory- and allocation-bound. Here each step is a handful of in-place ops on one (B,N,Di) slab
    (state layout n-major, so the sums over n and the contractions over d are vectorised bmm / strided sums), and
    only the states h_t are saved; exp(delta_t A) is recomputed in backward. The states are T separate (B,N,Di)
    tensors, not one (T,B,N,Di) block: glibc serves blocks over 32 MiB by a fresh mmap each call, and first-touch
    page faults on it cost ~13 ms per 40 MB, about what the whole forward loop costs. exp is computed as
    exp2(delta * A log2 e): ~4x faster than torch.exp on the CPU build we use, relative error <= ~2e-6 in float32.

    Backward (reverse loop), with g_t = dL/dh_t = C_t gy_t + exp(delta_{t+1} A) g_{t+1}:
        dC_t[n] = sum_d gy_t[d] h_t[n,d];   d(delta u)_t[d] = sum_n B_t[n] g_t[n,d];
        dB_t[n] = sum_d (delta u)_t[d] g_t[n,d];
        q_t = g_t exp(delta_t A) h_{t-1} = dL/d(delta_t A):  ddelta_t += sum_n q_t A;  dA += sum_{b,t} q_t delta_t.
    """

    @staticmethod
    def forward(ctx, u, delta, A, Bm, Cm):
        T = u.shape[1]
        dt = delta.transpose(0, 1).contiguous()  # (T,B,Di)
        du = (delta * u).transpose(0, 1).contiguous()  # (T,B,Di)
        Bt = Bm.transpose(0, 1).contiguous()  # (T,B,N)
        Ct = Cm.transpose(0, 1).contiguous()  # (T,B,N)
        At = A.t().contiguous()  # (N,Di)
        A2 = At * _LOG2E  # (N,Di): exp(delta A) = exp2(delta A2)
        y = u.new_empty(T, u.shape[0], 1, A.shape[0])  # (T,B,1,Di)
        dA = u.new_empty(u.shape[0], A.shape[1], A.shape[0])  # (B,N,Di) work buffer
        H: list[torch.Tensor] = []  # T states h_t (B,N,Di), one tensor each (see the class docstring)
        for t in range(T):
            if t == 0:
                h = torch.mul(Bt[0, :, :, None], du[0, :, None, :])  # (B,N,Di)
            else:
                torch.mul(dt[t, :, None, :], A2, out=dA).exp2_()  # exp(delta_t A)
                h = torch.mul(dA, H[t - 1]).addcmul_(Bt[t, :, :, None], du[t, :, None, :])  # (B,N,Di)
            torch.bmm(Ct[t, :, None, :], h, out=y[t])  # (B,1,N) @ (B,N,Di)
            H.append(h)
        ctx.save_for_backward(u, At, dt, du, Bt, Ct, *H)
        return y.squeeze(2).transpose(0, 1)  # (B,T,Di)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y):
        u, At, dt, du, Bt, Ct, *H = ctx.saved_tensors  # H: T states (B,N,Di)
        T = len(H)
        A2 = At * _LOG2E  # (N,Di)
        gy = grad_y.transpose(0, 1).contiguous()  # (T,B,Di)
        g = torch.zeros_like(H[0])  # (B,N,Di): dL/dh_t, then the carry to t-1
        dA, q = torch.empty_like(g), torch.empty_like(g)  # (B,N,Di) work buffers
        gA = torch.zeros_like(g)  # (B,N,Di): sum over t of q_t delta_t, summed over b at the end
        g_du = torch.empty_like(dt)[:, :, None, :]  # (T,B,1,Di): dL/d(delta u)
        g_dt = torch.zeros_like(dt)  # (T,B,Di): the part of dL/d(delta) through exp(delta A)
        gB = torch.empty_like(Bt)[:, :, None, :]  # (T,B,1,N)
        gC = torch.empty_like(Ct)[:, :, None, :]  # (T,B,1,N)
        for t in range(T - 1, -1, -1):
            g.addcmul_(Ct[t, :, :, None], gy[t, :, None, :])  # g = dL/dh_t
            torch.bmm(gy[t, :, None, :], H[t].transpose(1, 2), out=gC[t])  # (B,1,Di) @ (B,Di,N)
            torch.bmm(Bt[t, :, None, :], g, out=g_du[t])  # (B,1,N) @ (B,N,Di)
            torch.bmm(du[t, :, None, :], g.transpose(1, 2), out=gB[t])  # (B,1,Di) @ (B,Di,N)
            if t > 0:
                torch.mul(dt[t, :, None, :], A2, out=dA).exp2_()  # exp(delta_t A), recomputed
                g.mul_(dA)  # carry: exp(delta_t A) dL/dh_t
                torch.mul(g, H[t - 1], out=q)  # q_t = dL/d(delta_t A)  (B,N,Di)
                gA.addcmul_(q, dt[t, :, None, :])
                torch.sum(q.mul_(At), dim=1, out=g_dt[t])  # sum_n q_t A
        g_du = g_du.squeeze(2)  # (T,B,Di)
        grad_u = (g_du * dt).transpose(0, 1)  # (B,T,Di)
        grad_delta = g_du.mul_(u.transpose(0, 1)).add_(g_dt).transpose(0, 1)  # (B,T,Di)
        grad_A = gA.sum(0).t()  # (Di,N)
        return grad_u, grad_delta, grad_A, gB.squeeze(2).transpose(0, 1), gC.squeeze(2).transpose(0, 1)


def selective_scan(
    u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor
) -> torch.Tensor:
    """y (B,T,Di) of the selective SSM, h_t = exp(delta_t A) h_{t-1} + delta_t u_t B_t, y_t = h_t C_t (no D skip).

    u, delta (B,T,Di); A (Di,N); B, C (B,T,N). Fused loop over t with a hand-written reverse-loop backward (see
    `_SelectiveScan`): the fast CPU training path (scan fwd+bwd at (B,T,Di,N) = (64,37,256,16), 1 thread: ~25 ms
    vs ~255 ms for `parallel_scan` on the unfused tensors). The states h are not returned (asking for the hook
    point `ssm.h` switches that layer to a scan that materialises them).
    Runs in the inputs' promoted dtype, at least float32, with autocast off (a bf16 state would drift).
    """
    dtype = torch.promote_types(torch.result_type(u, delta), torch.result_type(A, B))
    dtype = torch.promote_types(torch.promote_types(dtype, C.dtype), torch.float32)
    with torch.autocast(u.device.type, enabled=False):
        return _SelectiveScan.apply(*(x.to(dtype) for x in (u, delta, A, B, C)))


KERNEL_HINT = "use scan='auto' (the kernel on CUDA when mamba-ssm imports, else the parallel scan; fused on CPU)"


@functools.cache
def mamba_ssm_scan() -> Callable[..., torch.Tensor] | None:
    """mamba-ssm's `selective_scan_fn` (mamba_ssm.ops.selective_scan_interface), or None where it does not import.

    Any import failure counts as absent (not installed, or a build that does not load against this torch / CUDA:
    ImportError, OSError on a missing shared library, RuntimeError from a CUDA extension). Looked up once.
    """
    try:
        module = importlib.import_module("mamba_ssm.ops.selective_scan_interface")
    except (ImportError, OSError, RuntimeError):
        return None
    fn = getattr(module, "selective_scan_fn", None)
    return fn if callable(fn) else None


def kernel_available(device: torch.device | str) -> bool:
    """Whether `scan="kernel"` can run on `device`: CUDA, with `mamba_ssm` importable."""
    return torch.device(device).type == "cuda" and mamba_ssm_scan() is not None


def kernel_selective_scan(
    u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor
) -> torch.Tensor:
    """`selective_scan` by mamba-ssm's CUDA kernel: the same y (B,T,Di) from the same (B,T,...) layouts.

    h_t = exp(delta_t A) h_{t-1} + delta_t u_t B_t,  y_t = C_t . h_t: `selective_scan_fn(u, delta, A, B, C)` with
    u, delta as (B,Di,T), A (Di,N), B, C as (B,N,T), no D, no z, delta_softplus=False (delta is already the
    softplus); it returns y (B,Di,T), transposed back here. Its backward is the kernel's too. Runs in float32 (the
    inputs promoted as `selective_scan` does, autocast off); float64 is refused (the kernel has no float64 path).
    Raises ValueError (naming model.size.scan) off CUDA, or where mamba_ssm does not import.
    """
    if u.device.type != "cuda":
        raise ValueError(
            f"model.size.scan: 'kernel' (mamba-ssm's selective scan) runs on CUDA only (got inputs on {u.device}); "
            f"{KERNEL_HINT}"
        )
    fn = mamba_ssm_scan()
    if fn is None:
        raise ValueError(
            "model.size.scan: 'kernel' needs the mamba-ssm package (pip install -e '.[cuda]'), and "
            f"mamba_ssm.ops.selective_scan_interface does not import here; {KERNEL_HINT}"
        )
    dtype = torch.promote_types(torch.result_type(u, delta), torch.result_type(A, B))
    dtype = torch.promote_types(torch.promote_types(dtype, C.dtype), torch.float32)
    if dtype == torch.float64:
        raise ValueError(
            "model.size.scan: 'kernel' (mamba-ssm) has no float64 path; use scan='parallel' or 'sequential' for float64"
        )
    with torch.autocast(u.device.type, enabled=False):
        return call_in_kernel_layout(fn, *(x.to(torch.float32) for x in (u, delta, A, B, C)))


def call_in_kernel_layout(
    fn: Callable[..., torch.Tensor],
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
) -> torch.Tensor:
    """y (B,T,Di) = fn(u, delta, A, B, C) called in mamba-ssm's `selective_scan_fn` layouts and keywords (u, delta
    (B,Di,T); A (Di,N); B, C (B,N,T); no D, no z, delta_softplus=False; it returns (B,Di,T)), from this module's
    (B,T,Di), (Di,N), (B,T,N). Apart from `kernel_selective_scan` so the layouts are tested on the CPU too."""
    y = fn(
        u.transpose(1, 2),  # (B,Di,T)
        delta.transpose(1, 2),  # (B,Di,T)
        A.contiguous(),  # (Di,N)
        B.transpose(1, 2),  # (B,N,T)
        C.transpose(1, 2),  # (B,N,T)
        D=None,
        z=None,
        delta_softplus=False,
    )  # (B,Di,T)
    return y.transpose(1, 2)  # (B,T,Di)


# ---------------------------------------------------------------------------------------------- block


class MambaBlock(nn.Module):
    """One selective-SSM mixer, with hook points ssm.delta, B, C, h (when a scan materialises it) and y."""

    def __init__(self, d_model: int, d_state: int, expand: int, d_conv: int, dt_rank: int, variant: str) -> None:
        super().__init__()
        self.variant, self.d_state, self.d_conv = variant, d_state, d_conv
        self.d_inner = di = expand * d_model
        self.dt_rank = dt_rank if variant == "reference" else 1
        self.in_proj = nn.Linear(d_model, 2 * di, bias=False)
        self.conv = nn.Conv1d(di, di, d_conv, groups=di, padding=d_conv - 1)
        self.x_proj = nn.Linear(di, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, di)
        a_shape = (di, d_state) if variant == "reference" else (d_state,)
        # never weight-decayed (the reference marks both `_no_weight_decay`): decay would pull A toward -1, D toward 0
        self.A_log = no_weight_decay(nn.Parameter(torch.empty(a_shape)))  # (Di,N) reference, (N,) paper
        self.D = no_weight_decay(nn.Parameter(torch.empty(di)))  # (Di,)
        self.y_norm = nn.LayerNorm(di) if variant == "paper" else None
        self.out_proj = nn.Linear(di, d_model, bias=False)

    @torch.no_grad()
    def reset_ssm_parameters(self, dt_min: float = 1e-3, dt_max: float = 0.1, dt_floor: float = 1e-4) -> None:
        """Mamba's SSM init of A_log, D and dt_proj, the block's own under either `init` (run after the generic one)."""
        n = torch.arange(1, self.d_state + 1, dtype=torch.float32, device=self.A_log.device)
        self.D.fill_(1.0)
        if self.variant == "paper":  # the authors' MambaBlock init
            self.A_log.copy_(torch.log(0.1 * n))
            nn.init.uniform_(self.dt_proj.weight, -0.01, 0.01)
            nn.init.constant_(self.dt_proj.bias, 0.1)
            return
        self.A_log.copy_(torch.log(n).expand(self.d_inner, -1))  # S4D-real: A = -[1..N] per channel
        nn.init.uniform_(self.dt_proj.weight, -(self.dt_rank**-0.5), self.dt_rank**-0.5)
        u = torch.rand(self.d_inner, device=self.D.device)
        dt = torch.exp(u * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)).clamp(min=dt_floor)
        self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus: softplus(bias) = dt

    def forward(self, x: torch.Tensor, scan: str, hook: LayerHook) -> torch.Tensor:
        """(B,T,d) -> (B,T,d). scan: "sequential" (autograd loop), "parallel" (`parallel_scan`), "fused"
        (`selective_scan`) or "kernel" (`kernel_selective_scan`, mamba-ssm on CUDA); the last two never materialise
        the states: `ssm.h` is not reached. The paper variant always scans sequentially."""
        T = x.shape[1]
        u, z = self.in_proj(x).chunk(2, dim=-1)  # (B,T,Di) each
        u = F.silu(self.conv(u.transpose(1, 2))[..., :T].transpose(1, 2))  # causal depthwise conv, (B,T,Di)
        dt, Bm, Cm = self.x_proj(u).split([self.dt_rank, self.d_state, self.d_state], dim=-1)  # (B,T,r),(B,T,N)x2
        delta = F.softplus(self.dt_proj(dt))  # (B,T,Di)
        if self.variant == "paper":
            delta = delta.clamp(1e-4, 10.0)
        delta, Bm, Cm = hook("ssm.delta", delta), hook("ssm.B", Bm), hook("ssm.C", Cm)
        if self.variant == "paper":
            A = -torch.exp(self.A_log.clamp(max=5.0)).expand(self.d_inner, -1)  # (Di,N), shared over channels
            dA = (delta[..., None] * A).clamp(-20.0, 0.0)  # (B,T,Di,N)
            dBu = ((delta * u)[..., None] * Bm[:, :, None, :]).clamp(-10.0, 10.0)  # (B,T,Di,N)
            h = sequential_scan(dA.exp(), dBu, clamp=100.0)  # (B,T,Di,N)
        elif scan in ("fused", "kernel"):
            h = None
            fused = selective_scan if scan == "fused" else kernel_selective_scan
            y = fused(u, delta, -torch.exp(self.A_log), Bm, Cm)  # (B,T,Di)
        else:
            A = -torch.exp(self.A_log)  # (Di,N)
            dA = delta[..., None] * A  # (B,T,Di,N)
            dBu = (delta * u)[..., None] * Bm[:, :, None, :]  # (B,T,Di,N)
            h = sequential_scan(dA.exp(), dBu) if scan == "sequential" else parallel_scan(dA.exp(), dBu)
        if h is not None:
            y = torch.einsum("btdn,btn->btd", hook("ssm.h", h), Cm)  # (B,T,Di)
        y = hook("ssm.y", y)
        if self.y_norm is not None:
            y = self.y_norm(y)
        y = (y + self.D * u) * F.silu(z)  # (B,T,Di)
        return self.out_proj(y)


class MambaSize(InitSize):
    """Size of a `Mamba`. `dt_rank` "auto": ceil(d_model/16). `variant`: "reference" (Mamba-1: pre-norm RMSNorm
    residual) or "paper" (the authors' block: no pre-norm, LayerNorm on y, scalar dt). `pos` None: "learned" for
    the paper variant, "none" for the reference one. `init` None (`InitSize`): "normal" for the reference variant,
    "torch" for the paper one, whose authors' block keeps PyTorch's defaults (at 6 x 192 a block's output is ~0.19
    of the residual stream's norm at init under "torch", ~0.05 under "normal"). Run directories written before
    `init` existed trained the paper variant with "normal", and their stored configs read as that
    (`resolve.upgrade_stored`).
    `scan` (reference variant; the paper variant always scans sequentially): "auto" = fused on CPU, on CUDA "kernel"
    (mamba-ssm's `selective_scan_fn`) when `mamba_ssm` imports, else parallel; "kernel" explicitly, off CUDA or
    without mamba_ssm, is a ValueError at the forward. A layer whose state `ssm.h` is hooked or cached materialises
    it with the parallel scan, or the sequential one when scan="sequential"."""

    n_layers: int = size_int(6)
    d_model: int = size_int(192)
    d_state: int = size_int(16)
    expand: int = size_int(2)
    d_conv: int = size_int(4)
    dt_rank: int | Literal["auto"] = "auto"
    variant: Literal["reference", "paper"] = "reference"
    scan: Literal["auto", "fused", "parallel", "sequential", "kernel"] = "auto"
    pos: Literal["none", "learned"] | None = None
    tie: bool = True
    eps: float = Field(default=1e-5, gt=0)
    logit_scale: bool = False

    def default_init(self) -> Init:
        return "torch" if self.variant == "paper" else "normal"

    def positions(self) -> str:
        """`pos` resolved: "learned" or "none"."""
        return ("learned" if self.variant == "paper" else "none") if self.pos is None else self.pos

    def learned_positions(self) -> bool:
        return self.positions() == "learned"

    def position_limit(self) -> bool:
        return self.learned_positions()

    @field_validator("dt_rank", mode="before")
    @classmethod
    def _dt_rank(cls, v: Any) -> int | Literal["auto"]:
        if v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            return v
        raise ValueError("must be 'auto' or an integer >= 1")


class Mamba(ResidualModel):
    """Stack of Mamba blocks; its size is a `MambaSize`.

    Ablation: `with model.ablate(layers={l}):` makes layer l the identity.
    """

    Size = MambaSize
    size: MambaSize
    layer_hooks = ("ssm.delta", "ssm.B", "ssm.C", "ssm.h", "ssm.y", "ssm.out")
    resid_parts = ("ssm.out",)

    def __init__(self, spec: TaskSpec, size: MambaSize | Mapping[str, Any] | None = None, **fields: Any) -> None:
        super().__init__(spec, size, **fields)
        s = self.size
        self.n_layers, self.d_conv, self.variant, self.scan = s.n_layers, s.d_conv, s.variant, s.scan
        dt_rank = math.ceil(s.d_model / 16) if s.dt_rank == "auto" else s.dt_rank
        self.embed = InputEmbedding(spec, s.d_model, s.max_len, pos=s.positions(), reserved=s.reserved_positions)
        self.max_len = self.embed.max_len
        self.blocks = nn.ModuleList(
            MambaBlock(s.d_model, s.d_state, s.expand, s.d_conv, dt_rank, s.variant) for _ in range(s.n_layers)
        )
        # reference: pre-norm residual h + block(RMSNorm(h)); paper: h + block(h), no norm
        self.norms = nn.ModuleList(
            nn.RMSNorm(s.d_model, eps=s.eps) if s.variant == "reference" else nn.Identity() for _ in range(s.n_layers)
        )
        self.norm = nn.RMSNorm(s.d_model, eps=s.eps) if s.variant == "reference" else nn.LayerNorm(s.d_model, eps=s.eps)
        self.head = OutputHead(spec, s.d_model, tie=s.tie, embedding=self.embed, logit_scale=s.logit_scale)
        initialise(self, s.init)
        for block in self.blocks:
            cast(MambaBlock, block).reset_ssm_parameters()  # ModuleList items are typed Module
        self.d_model, self.d_state, self.d_inner = s.d_model, s.d_state, s.expand * s.d_model

    def layer(self, l: int, h: torch.Tensor) -> torch.Tensor:
        scan = self.scan
        if self.wants(f"blocks.{l}.ssm.h"):  # the fused scan never holds the states: materialise them here only
            scan = "sequential" if scan == "sequential" else "parallel"
        elif scan == "auto":  # the fused loop on CPU (memory-bound); mamba-ssm's kernel on CUDA, else parallel
            if h.device.type == "cpu":
                scan = "fused"
            else:
                scan = "kernel" if kernel_available(h.device) and h.dtype != torch.float64 else "parallel"
        hook = self.layer_hook(l)
        h = h + hook("ssm.out", self.blocks[l](self.norms[l](h), scan, hook))  # (B,T,d)
        return torch.nan_to_num(h) if self.variant == "paper" else h

    def state_size(self, T: int) -> int:
        """SSM state (Di x N) plus the conv buffer (Di x (k-1)) per layer; independent of T."""
        return self.n_layers * (self.d_inner * self.d_state + self.d_inner * (self.d_conv - 1))


register("mamba", Mamba)
