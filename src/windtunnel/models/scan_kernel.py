"""The selective scan compiled from C (`selective_scan.c`) at run time: Mamba's CPU training path where a C compiler
is present, the eager fused scan (`scans.selective_scan`) where not.

The eager fused scan runs a handful of PyTorch ops on a (B,N,Di) slab per time step, each a pass over memory; the C
loop keeps a sequence's state (N,Di) in cache and makes one pass over its inputs, and its backward recomputes the
states chunk by chunk (`CHUNK` steps) from the checkpoints the forward kept instead of saving T of them. Timings and
the machine: docs/results/mamba-scans.md.

The library is compiled once per process, with the system's C compiler (`$CC`, else `cc`, `gcc` or `clang` on the
PATH) and `-march=native` (compiled and run on the same machine), into a temporary directory that is removed once
the library is loaded; there is nothing to install and no cache to go stale. It takes no torch headers and is called
through ctypes (which releases the GIL, so `torch.get_num_threads()` threads each scan a share of the batch).
exp is computed as a polynomial 2^x to ~1e-7 relative in float32 (libm's exp2 in float64); sums over d may be
reordered by the compiler (`-fassociative-math`). Compared with the eager scan in tests/test_scan_kernel.py.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import shutil
import subprocess
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from torch.autograd.function import once_differentiable

from windtunnel.models.scans import FusedScanFunction, scan_dtype

SOURCE = Path(__file__).with_name("selective_scan.c")
FLAGS = (
    "-O3",
    "-march=native",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-fassociative-math",
    "-fno-signed-zeros",
    "-fPIC",
    "-shared",
)
CHUNK = 16  # time steps the backward recomputes from one checkpoint: (CHUNK+1) states of (N,Di) stay in cache
_LOG2E = math.log2(math.e)
_SUFFIX = {torch.float32: "float32", torch.float64: "float64"}


def compiler() -> str | None:
    """The C compiler to build with: `$CC` if set, else the first of cc, gcc, clang on the PATH."""
    if cc := os.environ.get("CC"):
        return cc
    return next((path for name in ("cc", "gcc", "clang") if (path := shutil.which(name))), None)


@functools.cache
def library() -> ctypes.CDLL | str:
    """The compiled scan library, or why there is none (no compiler, the compile or the load failed). Once per
    process."""
    cc = compiler()
    if cc is None:
        return "no C compiler found ($CC unset; none of cc, gcc, clang on the PATH)"
    with tempfile.TemporaryDirectory(prefix="windtunnel-scan-") as tmp:
        out = Path(tmp) / "selective_scan.so"
        try:
            command = [cc, *FLAGS, str(SOURCE), "-o", str(out), "-lm"]
            subprocess.run(command, check=True, capture_output=True, text=True, timeout=120)
            lib = ctypes.CDLL(str(out))
        except (OSError, subprocess.SubprocessError) as err:
            detail = getattr(err, "stderr", None) or str(err)
            return f"compiling {SOURCE.name} with {cc} failed: {detail.strip()[-400:]}"
    for suffix in _SUFFIX.values():
        getattr(lib, f"scan_forward_{suffix}").restype = None
        getattr(lib, f"scan_backward_{suffix}").restype = None
    return lib


def available() -> bool:
    """Whether the compiled scan can run here (builds it on the first call)."""
    return not isinstance(library(), str)


@functools.cache
def warn_unavailable() -> None:
    """Once per process, where the library did not build: say why, and that Mamba scans by the eager fused scan."""
    reason = library()
    if isinstance(reason, str):
        warnings.warn(
            f"the compiled Mamba scan is not available ({reason}); Mamba runs the eager fused scan on the CPU, "
            "the same recurrence, slower per step (docs/results/mamba-scans.md)",
            RuntimeWarning,
            stacklevel=2,
        )


def _call(name: str, sizes: tuple[int, ...], tensors: list[torch.Tensor]) -> None:
    """One kernel call: int64 sizes, then the tensors' data pointers (each contiguous)."""
    lib = library()
    assert not isinstance(lib, str), lib
    getattr(lib, name)(*(ctypes.c_int64(s) for s in sizes), *(ctypes.c_void_p(x.data_ptr()) for x in tensors))


@functools.cache
def _pool(pid: int, n: int) -> ThreadPoolExecutor:
    """n worker threads of process `pid` (a forked child has none of its parent's threads: it gets its own pool)."""
    return ThreadPoolExecutor(max_workers=n, thread_name_prefix="windtunnel-scan")


def _over_batch(B: int, fn) -> list:
    """fn(b0, b1) on `torch.get_num_threads()` contiguous shares of the batch rows, in threads (the kernel releases
    the GIL); the results in order."""
    n = max(1, min(B, torch.get_num_threads()))
    bounds = [(B * i // n, B * (i + 1) // n) for i in range(n)]
    if n == 1:
        return [fn(0, B)]
    return list(_pool(os.getpid(), n).map(lambda b: fn(*b), bounds))


def _contiguous(x: torch.Tensor) -> torch.Tensor:
    """x contiguous, as a view where it already is (autograd refuses an input returned as-is and saved)."""
    return x.view_as(x) if x.is_contiguous() else x.contiguous()


class _CompiledScan(FusedScanFunction):
    """y = selective_scan(u, delta, A, B, C) by the compiled kernels (the forward returns what backward reads after y:
    `FusedScanFunction`)."""

    @staticmethod
    def forward(u, delta, A, Bm, Cm):
        B, T, Di = u.shape
        N = A.shape[1]
        suffix = _SUFFIX[u.dtype]
        dt = _contiguous(delta)  # (B,T,Di)
        du = delta * u  # (B,T,Di)
        Bc, Cc = _contiguous(Bm), _contiguous(Cm)  # (B,T,N)
        At = A.t().contiguous()  # (N,Di)
        A2 = At * _LOG2E  # (N,Di): exp(delta A) = 2^(delta A2)
        y = u.new_empty(B, T, Di)
        S = u.new_empty(B, -(-T // CHUNK), N, Di)  # the state entering each chunk

        def run(b0: int, b1: int) -> None:
            h = u.new_empty(N, Di)
            parts = [dt[b0:b1], du[b0:b1], Bc[b0:b1], Cc[b0:b1], A2, y[b0:b1], S[b0:b1], h]
            _call(f"scan_forward_{suffix}", (b1 - b0, T, N, Di, CHUNK), parts)

        _over_batch(B, run)
        return y, dt, du, Bc, Cc, At, A2, S

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y, *_):
        u, dt, du, Bc, Cc, At, A2, S = ctx.saved_tensors
        B, T, Di = u.shape
        N = At.shape[0]
        suffix = _SUFFIX[u.dtype]
        gy = grad_y.contiguous()  # (B,T,Di)
        g_du, g_dt = torch.empty_like(du), torch.empty_like(dt)  # (B,T,Di)
        gB, gC = torch.empty_like(Bc), torch.empty_like(Cc)  # (B,T,N)

        def run(b0: int, b1: int) -> torch.Tensor:
            gA = torch.zeros_like(At)  # (N,Di): this share's sum over b and t
            work = [u.new_empty(N, Di), u.new_empty(CHUNK + 1, N, Di), u.new_empty(CHUNK, N, Di)]
            rows = [x[b0:b1] for x in (dt, du, Bc, Cc)]
            outs = [gy[b0:b1], g_du[b0:b1], g_dt[b0:b1], gA, gB[b0:b1], gC[b0:b1]]
            _call(f"scan_backward_{suffix}", (b1 - b0, T, N, Di, CHUNK), [*rows, A2, At, S[b0:b1], *outs, *work])
            return gA

        grad_A = torch.stack(_over_batch(B, run)).sum(0).t()  # (Di,N)
        grad_u = g_du * dt  # (B,T,Di)
        grad_delta = g_du.mul_(u).add_(g_dt)  # (B,T,Di)
        return grad_u, grad_delta, grad_A, gB, gC


def compiled_selective_scan(
    u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor
) -> torch.Tensor:
    """`scans.selective_scan` (y (B,T,Di) from u, delta (B,T,Di), A (Di,N), B, C (B,T,N)) by the compiled kernels.

    Runs in the inputs' promoted dtype, at least float32 (float32 or float64), with autocast off. ValueError, naming
    model.size.scan, off the CPU or where the library did not build (`library()` says why).
    """
    if u.device.type != "cpu":
        raise ValueError(f"model.size.scan: 'compiled' runs on the CPU only (got inputs on {u.device})")
    lib = library()
    if isinstance(lib, str):
        raise ValueError(f"model.size.scan: 'compiled' is not available here ({lib}); use scan='auto' or 'fused'")
    dtype = scan_dtype(u, delta, A, B, C)
    with torch.autocast("cpu", enabled=False):
        return _CompiledScan.apply(*(x.to(dtype) for x in (u, delta, A, B, C)))[0]
