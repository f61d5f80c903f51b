"""Numeric precision: bf16 autocast where the hardware runs it natively (training, and evaluation on request)."""

from __future__ import annotations

import contextlib
import warnings

import torch


def cpu_has_native_bf16() -> bool:
    """Whether oneDNN can run bf16 matmuls natively on this CPU (AVX512-BF16 / AMX)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def autocast(device: torch.device | str, dtype: str) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA or on a CPU with native bf16; float32 (a no-op context) otherwise.

    A CPU without native bf16 would emulate it slower than float32, so there bf16 falls back, with a warning.
    """
    device = torch.device(device)
    if dtype == "bf16" and device.type == "cpu" and not cpu_has_native_bf16():
        warnings.warn("dtype: this CPU has no native bf16; running in float32", stacklevel=2)
        return contextlib.nullcontext()
    if dtype == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
