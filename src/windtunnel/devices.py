"""Devices and dtypes: which device a run uses (`resolve_device`) and a model is on (`model_device`), how many CPU
threads its computations take (`limit_threads`), what the CPU can do (native bf16, SIMD flags, a bf16 LSTM kernel),
and bf16 autocast where the hardware runs it natively (training, and evaluation on request)."""

from __future__ import annotations

import contextlib
import functools
import warnings
from pathlib import Path

import torch

BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # x86 instruction sets that compute bf16 dot products natively
# The x86 instruction sets a CPU's float32 and bf16 matmul speed depends on (a benchmark's header names them).
SIMD_FLAGS = ("fma", "avx2", "avx512f", "avx512_vnni", *BF16_FLAGS, "amx_tile")


def resolve_device(choice: str) -> torch.device:
    """'auto' -> CUDA when present, else CPU; 'cuda' without a GPU is a user error."""
    if choice == "cuda" and not torch.cuda.is_available():
        raise ValueError("train.device: 'cuda' requested but no CUDA device is available (use 'auto' or 'cpu')")
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(choice)


def limit_threads(threads: int) -> None:
    """Every CPU thread pool of this process at `threads`: torch's and the BLAS/OpenMP pools numpy, scipy and
    scikit-learn compute in (the geometry probes' PCA and clustering). Left to their defaults those pools take every
    core: where runs outnumber the cores their threads spin against each other, and a probe's SVD of a 4,000 x 128
    matrix took 2.6 s instead of 0.04 s (docs/results/tier-timing.md)."""
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    threadpool_limits(limits=threads)  # not as a context: the limit holds for the rest of the process


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's parameters (CPU for a model without any: the baselines)."""
    p = next(iter(model.parameters()), None)
    return p.device if p is not None else torch.device("cpu")


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 matmuls natively (AVX512-BF16 / AMX), not by emulation.

    oneDNN's own check (`torch.ops.mkldnn._is_mkldnn_bf16_supported`) also says yes on plain AVX-512 CPUs, where it
    emulates bf16 more slowly than float32 (measured on an AVX-512 Xeon without AVX512-BF16): on Linux the CPU flags
    decide; elsewhere oneDNN's answer is used.
    """
    flags = _cpu_flags()
    if flags is not None:
        return any(f in flags for f in BF16_FLAGS)
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def cpu_simd_flags() -> list[str] | None:
    """The `SIMD_FLAGS` this CPU has, in that order; None where the CPU flags cannot be read (not x86 Linux)."""
    flags = _cpu_flags()
    return None if flags is None else [f for f in SIMD_FLAGS if f in flags]


@functools.cache
def _cpu_flags() -> frozenset[str] | None:
    """The CPU feature flags from /proc/cpuinfo (x86 Linux), or None where they cannot be read."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        return None
    return None


@functools.cache
def cpu_bf16_lstm() -> bool:
    """Whether this machine's oneDNN has a bf16 LSTM kernel: probed once with a tiny `nn.LSTM` forward under CPU bf16
    autocast. It has none on AVX2-only CPUs ("could not create a primitive descriptor for the LSTM forward
    propagation primitive"), where PyTorch still autocasts the LSTM's inputs to bf16; AVX-512 CPUs run it, emulated
    or native."""
    layer = torch.nn.LSTM(4, 4, batch_first=True)
    try:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            layer(torch.zeros(1, 2, 4))
    except RuntimeError:
        return False
    return True


def lstm_needs_float32(x: torch.Tensor) -> bool:
    """True where an `nn.LSTM` on `x` would run under a CPU bf16 autocast this machine has no LSTM kernel for: the
    caller then runs the recurrence in float32 with autocast off (same weights, the float32 result)."""
    return (
        x.device.type == "cpu"
        and torch.is_autocast_enabled("cpu")
        and torch.get_autocast_dtype("cpu") == torch.bfloat16
        and not cpu_bf16_lstm()
    )


def autocast(device: torch.device | str, dtype: str) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA or on a CPU with native bf16; float32 (a no-op context) otherwise.

    A CPU without native bf16 emulates it 10-18x slower per step than float32 (measured on an AVX2 EPYC, the HMM
    quick and bijection paper presets), so there bf16 falls back to float32 -- the numbers a float32 run gives --
    with a warning naming the missing feature.
    """
    device = torch.device(device)
    if dtype == "bf16" and device.type == "cpu" and not cpu_has_native_bf16():
        warnings.warn(
            f"dtype bf16: this CPU has no native bf16 (none of {', '.join(BF16_FLAGS)} in its flags); running in "
            "float32",
            stacklevel=2,
        )
        return contextlib.nullcontext()
    if dtype == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
