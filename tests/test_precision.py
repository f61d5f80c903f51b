"""bf16 autocast only where the CPU computes bf16 natively; emulated bf16 falls back to float32 with a warning."""

from __future__ import annotations

import contextlib

import pytest
import torch

from windtunnel import precision


@pytest.mark.parametrize(("flags", "native"), [({"avx512f", "avx512bw"}, False), ({"avx512f", "avx512_bf16"}, True),
                                               ({"amx_bf16", "amx_tile"}, True), (set(), False)])
def test_native_bf16_is_read_from_the_cpu_flags(monkeypatch, flags, native):
    monkeypatch.setattr(precision, "_cpu_flags", lambda: frozenset(flags))
    assert precision.cpu_has_native_bf16() is native


def test_emulated_bf16_falls_back_to_float32(monkeypatch):
    monkeypatch.setattr(precision, "_cpu_flags", lambda: frozenset({"avx512f"}))
    with pytest.warns(UserWarning, match="no native bf16"):
        ctx = precision.autocast("cpu", "bf16")
    assert isinstance(ctx, contextlib.nullcontext)
    monkeypatch.setattr(precision, "_cpu_flags", lambda: frozenset({"avx512_bf16"}))
    with precision.autocast("cpu", "bf16"):
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16 and torch.is_autocast_enabled("cpu")
    assert isinstance(precision.autocast("cpu", "float32"), contextlib.nullcontext)
