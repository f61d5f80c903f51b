"""bf16 autocast only where the CPU computes bf16 natively; emulated bf16 falls back to float32 with a warning."""

from __future__ import annotations

import contextlib

import pytest
import torch

from windtunnel import devices


@pytest.mark.parametrize(
    ("flags", "native"),
    [
        ({"avx512f", "avx512bw"}, False),
        ({"avx512f", "avx512_bf16"}, True),
        ({"amx_bf16", "amx_tile"}, True),
        (set(), False),
    ],
)
def test_native_bf16_is_read_from_the_cpu_flags(monkeypatch, flags, native):
    monkeypatch.setattr(devices, "_cpu_flags", lambda: frozenset(flags))
    assert devices.cpu_has_native_bf16() is native


def test_emulated_bf16_falls_back_to_float32(monkeypatch):
    monkeypatch.setattr(devices, "_cpu_flags", lambda: frozenset({"avx512f"}))
    with pytest.warns(UserWarning, match="no native bf16"):
        ctx = devices.autocast("cpu", "bf16")
    assert isinstance(ctx, contextlib.nullcontext)
    monkeypatch.setattr(devices, "_cpu_flags", lambda: frozenset({"avx512_bf16"}))
    with devices.autocast("cpu", "bf16"):
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16 and torch.is_autocast_enabled("cpu")
    assert isinstance(devices.autocast("cpu", "float32"), contextlib.nullcontext)


@pytest.mark.parametrize("task", ["bijection", "regression"])
@pytest.mark.parametrize("arch", ["transformer", "mamba", "lstm", "mlp", "mlp-pointwise"])
def test_bf16_autocast_keeps_norms_fused(task, arch):
    """Under bf16 autocast the residual stream stays float32, so no norm meets a bf16 input with a float32 weight
    (rms_norm's unfused fallback, which warns "Mismatch dtype between input and weight")."""
    import warnings

    from windtunnel import runs
    from windtunnel.config import build_config
    from windtunnel.resolve import resolve_config

    cfg = resolve_config(build_config(overrides={"model.arch": arch, "model.preset": "smoke", "task.name": task}))
    t = runs.build_task(cfg)
    model = runs.build_model(cfg, t.spec, t)
    batch = t.sample(2, seed=0)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*Mismatch dtype")
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(batch.inputs)
        out.float().sum().backward()
