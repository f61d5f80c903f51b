"""The selective-scan machinery of `models/mamba.py`: the recurrence h_t = a_t h_{t-1} + b_t over time, and its
selective-SSM form h_t = exp(delta_t A) h_{t-1} + delta_t u_t B_t, y_t = h_t C_t, by the scans the block picks from:

  * `sequential_scan`: the plain autograd loop over t, the reference the fast paths are tested against (and the
    paper variant's clamped recurrence).
  * `parallel_scan`: a custom autograd function on the materialised dA, dBu whose backward is itself a reverse scan,
    by a log-depth Hillis-Steele kernel (GPU) or one in-place pass over t (CPU).
  * `selective_scan`: the fused CPU scan, one loop over t from (B,N,Di) slabs with a hand-written reverse-loop
    backward; it never materialises the (B,T,Di,N) dA / dBu tensors.
  * `kernel_selective_scan`: the same recurrence by mamba-ssm's CUDA kernel `selective_scan_fn`, where it imports.

Timings behind these choices: docs/results/mamba-scans.md.
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Callable

import torch
from torch.autograd.function import once_differentiable

from windtunnel.models.common import check_choice


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
    dL/da_t = g_t h_{t-1}. Only a and h are saved, not the per-step intermediates autograd would keep. Under
    `torch.func.vmap` (stacked seeds) each slice is scanned as one call (`_per_slice`), so it is exactly the
    unbatched scan.
    """

    @staticmethod
    def forward(a: torch.Tensor, b: torch.Tensor, kernel: str) -> torch.Tensor:
        return SCAN_KERNELS[kernel](a.clone(), b.clone())

    @staticmethod
    def setup_context(ctx, inputs, output):
        a, _, kernel = inputs
        ctx.save_for_backward(a, output)
        ctx.kernel = kernel

    @staticmethod
    def vmap(info, in_dims, a, b, kernel):
        return _per_slice(_LinearScan, info, in_dims, (a, b, kernel))

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


def _per_slice(fn: type[torch.autograd.Function], info, in_dims, args: tuple) -> tuple:
    """The vmap rule of a scan: `fn` applied to each slice along the vmapped dimension (an unbatched tensor argument
    shared by all), the results stacked at dim 0. Each slice is the call an unbatched run makes, with its own
    backward, so a batch of stacked models scans exactly as each model alone."""
    n = info.batch_size
    sliced = [[x] * n if d is None else list(x.movedim(d, 0).unbind(0)) for x, d in zip(args, in_dims, strict=True)]
    outs = [fn.apply(*(column[i] for column in sliced)) for i in range(n)]
    if isinstance(outs[0], tuple):
        return tuple(torch.stack(o) for o in zip(*outs, strict=True)), (0,) * len(outs[0])
    return torch.stack(outs), 0


def parallel_scan(a: torch.Tensor, b: torch.Tensor, kernel: str = "auto") -> torch.Tensor:
    """All states of h_t = a_t * h_{t-1} + b_t (h_{-1} = 0); a, b (B,T,...) -> h (B,T,...).

    kernel: "hillis-steele" (log2 T rounds over the whole tensor: the parallel scan, best on GPU), "loop" (one
    in-place pass over t outside autograd: faster on memory-bound CPUs, docs/results/mamba-scans.md), or "auto"
    (loop on CPU).
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


class FusedScanFunction(torch.autograd.Function):
    """A selective scan y = f(u, delta, A, B, C) whose forward returns, after y, the tensors its backward reads
    (outputs, not ctx, so that `setup_context` can save them and `torch.func.vmap` (stacked seeds) can run it: each
    slice as one unbatched call, `_per_slice`). Its backward receives u and those tensors as `ctx.saved_tensors`."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(*output[1:])
        ctx.save_for_backward(inputs[0], *output[1:])

    @classmethod
    def vmap(cls, info, in_dims, u, delta, A, Bm, Cm):
        return _per_slice(cls, info, in_dims, (u, delta, A, Bm, Cm))


def scan_dtype(*xs: torch.Tensor) -> torch.dtype:
    """The dtype a fused scan runs in: the inputs' promoted dtype, at least float32 (a bf16 state would drift)."""
    dtype = torch.float32
    for x in xs:
        dtype = torch.promote_types(dtype, x.dtype)
    return dtype


class _SelectiveScan(FusedScanFunction):
    """y = selective_scan(u, delta, A, B, C) fused over t, keeping only per-step (B,N,Di) work tensors.

    Forward: h_t = exp(delta_t A) * h_{t-1} + (delta_t u_t) B_t  (h_{-1} = 0),  y_t = sum_n C_t[n] h_t[n].
    Why: the unfused path materialises dA, exp(dA), dBu, h and the einsum over (B,T,Di,N) and autograd keeps more;
    on CPU that is memory- and allocation-bound. Here each step is a handful of in-place ops on one (B,N,Di) slab
    (state layout n-major, so the sums over n and the contractions over d are vectorised bmm / strided sums), and
    only the states h_t are saved; exp(delta_t A) is recomputed in backward. The states are T separate (B,N,Di)
    tensors, not one (T,B,N,Di) block: glibc serves a block that large by a fresh mmap each call, whose first-touch
    page faults cost about what the whole forward loop does. exp is computed as exp2(delta * A log2 e), faster than
    torch.exp on the CPU at float32 accuracy. Both measured: docs/results/mamba-scans.md.
    The forward returns the saved tensors after y (`FusedScanFunction`: the generated vmap rule has no `bmm(out=)`).

    Backward (reverse loop), with g_t = dL/dh_t = C_t gy_t + exp(delta_{t+1} A) g_{t+1}:
        dC_t[n] = sum_d gy_t[d] h_t[n,d];   d(delta u)_t[d] = sum_n B_t[n] g_t[n,d];
        dB_t[n] = sum_d (delta u)_t[d] g_t[n,d];
        q_t = g_t exp(delta_t A) h_{t-1} = dL/d(delta_t A):  ddelta_t += sum_n q_t A;  dA += sum_{b,t} q_t delta_t.
    """

    @staticmethod
    def forward(u, delta, A, Bm, Cm):
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
        # y (B,T,Di), then what backward reads: outputs, not ctx, so that `setup_context` (torch.func) can save them
        return (y.squeeze(2).transpose(0, 1), At, dt, du, Bt, Ct, *H)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y, *_):
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
    `_SelectiveScan`): the fast CPU training path, well ahead of `parallel_scan` on the unfused tensors
    (docs/results/mamba-scans.md). The states h are not returned (asking for the hook point `ssm.h` switches that
    layer to a scan that materialises them).
    Runs in the inputs' promoted dtype, at least float32, with autocast off (a bf16 state would drift).
    """
    dtype = scan_dtype(u, delta, A, B, C)
    with torch.autocast(u.device.type, enabled=False):
        return _SelectiveScan.apply(*(x.to(dtype) for x in (u, delta, A, B, C)))[0]


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
    dtype = scan_dtype(u, delta, A, B, C)
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
