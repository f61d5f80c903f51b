"""The compiled selective scan (`models/scan_kernel.py`, Mamba's CPU path where a C compiler builds it) against the
plain autograd loop and the eager fused scan; and what happens where it does not build."""

from __future__ import annotations

import pytest
import torch

from scan_reference import grads, make_inputs, reference
from windtunnel import models, tasks
from windtunnel.models import scan_kernel
from windtunnel.models.scan_kernel import CHUNK, compiled_selective_scan
from windtunnel.models.scans import selective_scan

SPEC = tasks.make("bijection").spec
needs_kernel = pytest.mark.skipif(not scan_kernel.available(), reason="no C compiler builds the compiled scan here")
NAMES = ["u", "delta", "A", "B", "C"]
# lengths below, at, just past and across several of the backward's checkpoint chunks
LENGTHS = [1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5]


@needs_kernel
@pytest.mark.parametrize("T", LENGTHS)
def test_compiled_scan_equals_the_sequential_loop_float64(T):
    xs = make_inputs(3, T, 5, 4, torch.float64, seed=T)
    w = torch.randn(3, T, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    torch.testing.assert_close(compiled_selective_scan(*xs), reference(*xs))
    for name, a, b in zip(NAMES, grads(compiled_selective_scan, xs, w), grads(reference, xs, w), strict=True):
        torch.testing.assert_close(a, b, msg=name)


@needs_kernel
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 5, 3, 4), (1, CHUNK + 3, 2, 5)])
def test_compiled_scan_gradcheck_float64(shape):
    assert torch.autograd.gradcheck(compiled_selective_scan, make_inputs(*shape, torch.float64, seed=sum(shape)))


@needs_kernel
def test_compiled_scan_float32_at_training_size_matches_float64_and_the_fused_scan():
    """(B,T,Di,N) = (8,37,256,16) in float32 (its polynomial exp, its reordered sums) against the float64 loop."""
    xs = make_inputs(8, 37, 256, 16, torch.float32, seed=3)
    xd = [x.detach().double().requires_grad_() for x in xs]
    w = torch.randn(8, 37, 256, generator=torch.Generator().manual_seed(4))
    y = compiled_selective_scan(*xs)
    torch.testing.assert_close(y.double(), reference(*xd), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(y, selective_scan(*xs), atol=1e-5, rtol=1e-4)
    exact = grads(reference, xd, w.double())
    for name, a, b in zip(NAMES, grads(compiled_selective_scan, xs, w), exact, strict=True):
        torch.testing.assert_close(a.double(), b, atol=1e-5 * b.abs().max().item(), rtol=1e-4, msg=name)


@needs_kernel
def test_compiled_scan_accepts_strided_inputs():
    """The block passes views (B, C from a split); the result does not depend on memory layout."""
    xs = make_inputs(3, 20, 5, 4, torch.float64, seed=5)
    u, delta, A, B, C = (x.detach() for x in xs)
    BC = torch.cat([B, C], dim=-1).requires_grad_()  # (B,T,2N)
    Bv, Cv = BC.split([4, 4], dim=-1)  # non-contiguous views
    ut = u.transpose(0, 1).contiguous().transpose(0, 1).requires_grad_()  # time-major storage
    y = compiled_selective_scan(ut, delta, A.t().contiguous().t(), Bv, Cv)
    torch.testing.assert_close(y, reference(u, delta, A, B, C))
    gy = torch.randn(20, 3, 5, dtype=torch.float64).transpose(0, 1)  # non-contiguous incoming gradient
    g = torch.autograd.grad(y, (ut, BC), gy)
    xr = [x.detach().requires_grad_() for x in (u, B, C)]
    g_ref = torch.autograd.grad(reference(xr[0], delta, A, xr[1], xr[2]), xr, gy)
    torch.testing.assert_close(g[0], g_ref[0])
    torch.testing.assert_close(g[1], torch.cat([g_ref[1], g_ref[2]], dim=-1))


@needs_kernel
def test_compiled_scan_long_decay_is_stable():
    """delta A far below the float32 exponent range (the state forgets at once): finite, and the exact values."""
    xs = make_inputs(2, 20, 3, 4, torch.float32, seed=6)
    with torch.no_grad():
        xs[1].mul_(200.0)
    y = compiled_selective_scan(*xs)
    assert all(torch.isfinite(g).all() for g in torch.autograd.grad(y.square().sum(), xs))
    torch.testing.assert_close(y, reference(*xs), atol=1e-4, rtol=1e-4)


@needs_kernel
def test_compiled_scan_split_over_threads_is_the_one_thread_scan():
    """With several torch threads each scans a share of the batch; A's gradient sums the shares."""
    xs = make_inputs(5, 19, 6, 3, torch.float64, seed=7)
    w = torch.randn(5, 19, 6, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = (compiled_selective_scan(*xs), *grads(compiled_selective_scan, xs, w))
        torch.set_num_threads(3)
        many = (compiled_selective_scan(*xs), *grads(compiled_selective_scan, xs, w))
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(one, many, strict=True):
        torch.testing.assert_close(a, b)


@needs_kernel
def test_compiled_scan_under_vmap_is_each_slice_scanned_alone():
    """Stacked seeds (`torch.func.vmap` over a leading model axis) scan each slice as one unbatched call."""
    stacks = [make_inputs(2, 9, 4, 3, torch.float64, seed=s) for s in (10, 11)]
    xs = [torch.stack([a.detach(), b.detach()]).requires_grad_() for a, b in zip(*stacks, strict=True)]
    y = torch.func.vmap(compiled_selective_scan)(*xs)  # (2,B,T,Di)
    torch.testing.assert_close(y, torch.stack([reference(*s) for s in stacks]))
    g = torch.autograd.grad(y.sum(), xs)
    for i, s in enumerate(stacks):
        for name, a, b in zip(NAMES, g, torch.autograd.grad(reference(*s).sum(), s), strict=True):
            torch.testing.assert_close(a[i], b, msg=name)


@pytest.fixture
def no_compiler(monkeypatch):
    """A process whose $CC does not exist: the library is built again (and fails) under it, then forgotten."""
    monkeypatch.setenv("CC", "/nonexistent/windtunnel-cc")
    scan_kernel.library.cache_clear()
    scan_kernel.warn_unavailable.cache_clear()
    yield
    scan_kernel.library.cache_clear()
    scan_kernel.warn_unavailable.cache_clear()


def test_without_a_compiler_auto_falls_back_to_the_fused_scan_and_compiled_is_a_clear_error(no_compiler):
    assert not scan_kernel.available()
    assert "windtunnel-cc" in str(scan_kernel.library())
    torch.manual_seed(0)
    auto = models.make("mamba", SPEC, n_layers=2, d_model=16)
    fused = models.make("mamba", SPEC, n_layers=2, d_model=16, scan="fused")
    fused.load_state_dict(auto.state_dict())
    x = torch.randint(0, SPEC.vocab_size, (2, 7), generator=torch.Generator().manual_seed(0))
    with pytest.warns(RuntimeWarning, match=r"compiled Mamba scan is not available \(.*windtunnel-cc.*eager fused"):
        y = auto(x)
    torch.testing.assert_close(y, fused(x), atol=0, rtol=0)  # the same ops: the fused scan ran
    compiled = models.make("mamba", SPEC, n_layers=2, d_model=16, scan="compiled")
    with pytest.raises(ValueError, match=r"model\.size\.scan: 'compiled' is not available here \(.*windtunnel-cc"):
        compiled(x)


def test_a_failed_compile_says_what_the_compiler_said(monkeypatch, tmp_path):
    cc = tmp_path / "cc"
    cc.write_text("#!/bin/sh\necho 'cc: error: no such target' >&2\nexit 1\n")
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    scan_kernel.library.cache_clear()
    try:
        reason = scan_kernel.library()
    finally:
        scan_kernel.library.cache_clear()
    assert isinstance(reason, str) and "no such target" in reason and "selective_scan.c" in reason
