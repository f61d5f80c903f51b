"""The fused selective scan (`selective_scan`, Mamba's CPU training path) against the plain autograd loop."""

from __future__ import annotations

import math

import pytest
import torch

from scan_reference import grads, make_inputs, reference
from windtunnel import models, tasks
from windtunnel.models import mamba, scan_kernel, scans
from windtunnel.models.scans import selective_scan, sequential_scan

SPEC = tasks.make("bijection").spec
REG = tasks.make("regression").spec


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 1, 3, 2), (2, 5, 3, 4), (3, 7, 5, 3), (1, 13, 2, 5)])
def test_fused_scan_gradcheck_float64(shape):
    xs = make_inputs(*shape, torch.float64, seed=sum(shape))
    assert torch.autograd.gradcheck(selective_scan, xs)


@pytest.mark.parametrize("shape", [(1, 1, 4, 3), (2, 2, 3, 5), (3, 9, 7, 4), (2, 37, 6, 16)])
def test_fused_scan_equals_sequential_float64(shape):
    xs = make_inputs(*shape, torch.float64, seed=1)
    w = torch.randn(shape[:3], generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    torch.testing.assert_close(selective_scan(*xs), reference(*xs))
    names = ["u", "delta", "A", "B", "C"]
    for name, a, b in zip(names, grads(selective_scan, xs, w), grads(reference, xs, w), strict=True):
        torch.testing.assert_close(a, b, msg=name)


def test_fused_scan_equals_sequential_float32_realistic():
    """Training size (B,T,Di,N) = (16,37,256,16) in float32, against the float64 sequential reference."""
    xs = make_inputs(16, 37, 256, 16, torch.float32, seed=3)
    xd = [x.detach().double().requires_grad_() for x in xs]
    w = torch.randn(16, 37, 256, generator=torch.Generator().manual_seed(4))
    y, y_ref = selective_scan(*xs), reference(*xd)
    torch.testing.assert_close(y.double(), y_ref, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(y, reference(*xs), atol=1e-5, rtol=1e-4)  # and the float32 sequential path
    for name, a, b in zip(
        ["u", "delta", "A", "B", "C"], grads(selective_scan, xs, w), grads(reference, xd, w.double()), strict=True
    ):
        scale = b.abs().max().item()
        torch.testing.assert_close(a.double(), b, atol=1e-5 * scale, rtol=1e-4, msg=name)


def test_fused_scan_accepts_strided_inputs():
    """The block passes views (B, C come from a split); results must not depend on memory layout."""
    xs = make_inputs(3, 6, 5, 4, torch.float64, seed=5)
    u, delta, A, B, C = (x.detach() for x in xs)
    BC = torch.cat([B, C], dim=-1).requires_grad_()  # (B,T,2N)
    Bv, Cv = BC.split([4, 4], dim=-1)  # non-contiguous views
    ut = u.transpose(0, 1).contiguous().transpose(0, 1).requires_grad_()  # (B,T,Di), time-major storage
    At = A.t().contiguous().t().requires_grad_()  # (Di,N), transposed storage
    y = selective_scan(ut, delta, At, Bv, Cv)
    torch.testing.assert_close(y, reference(u, delta, A, B, C))
    gy = torch.randn(6, 3, 5, dtype=torch.float64).transpose(0, 1)  # non-contiguous incoming gradient
    g_fused = torch.autograd.grad(y, (ut, At, BC), gy)
    xr = [x.detach().requires_grad_() for x in (u, A, B, C)]
    y_ref = reference(xr[0], delta, xr[1], xr[2], xr[3])
    g_ref = torch.autograd.grad(y_ref, xr, gy)
    torch.testing.assert_close(g_fused[0], g_ref[0])
    torch.testing.assert_close(g_fused[1], g_ref[1])
    torch.testing.assert_close(g_fused[2], torch.cat([g_ref[2], g_ref[3]], dim=-1))


def test_fused_scan_long_decay_is_stable():
    """Large delta A (state forgets at once, exp underflows to 0) gives finite values and gradients."""
    xs = make_inputs(2, 20, 3, 4, torch.float32, seed=6)
    with torch.no_grad():
        xs[1].mul_(200.0)
    y = selective_scan(*xs)
    assert torch.isfinite(y).all()
    assert all(torch.isfinite(g).all() for g in torch.autograd.grad(y.square().sum(), xs))
    torch.testing.assert_close(y, reference(*xs), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("spec", [SPEC, REG], ids=["tokens", "real"])
@pytest.mark.parametrize("T", [1, 13])
def test_mamba_model_scan_modes_agree(spec, T):
    """fused, compiled (where a C compiler builds it), parallel and sequential give the same model output and
    parameter gradients (float64)."""
    torch.manual_seed(0)
    modes = ("fused", "parallel", "sequential") + (("compiled",) if scan_kernel.available() else ())
    ms = {s: models.make("mamba", spec, n_layers=2, d_model=16, d_state=5, scan=s).double() for s in modes}
    for m in ms.values():
        m.load_state_dict(ms["fused"].state_dict())
    g = torch.Generator().manual_seed(T)
    x = (
        torch.randint(0, spec.vocab_size, (3, T), generator=g)
        if spec.input_kind == "tokens"
        else torch.randn(3, T, spec.input_dim, generator=g, dtype=torch.float64)
    )
    outs = {s: m(x) for s, m in ms.items()}
    gs = {s: torch.autograd.grad(outs[s].square().sum(), list(ms[s].parameters())) for s in ms}
    names = [n for n, _ in ms["fused"].named_parameters()]
    for s in modes[1:]:
        torch.testing.assert_close(outs["fused"], outs[s])
        for name, a, b in zip(names, gs["fused"], gs[s], strict=True):
            torch.testing.assert_close(a, b, msg=f"{s}: {name}")
    out_cache, cache = ms["fused"].run_with_cache(x, names=["blocks.0.ssm.h"])  # asking for h scans another way
    torch.testing.assert_close(out_cache, outs["fused"])
    assert cache["blocks.0.ssm.h"].shape == (3, T, ms["fused"].d_inner, 5)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiler", "no-compiler"])
def test_mamba_auto_scan_uses_the_compiled_scan_on_cpu_else_the_fused_one(monkeypatch, compiled):
    if compiled and not scan_kernel.available():
        pytest.skip(f"the compiled scan does not build here: {scan_kernel.library()}")
    monkeypatch.setattr(scan_kernel, "available", lambda: compiled)
    name = "compiled_selective_scan" if compiled else "selective_scan"
    real, calls = getattr(mamba, name), []

    def spy(*args):
        calls.append(args[0].shape)
        return real(*args)

    monkeypatch.setattr(mamba, name, spy)
    m = models.make("mamba", SPEC, n_layers=2, d_model=16)
    assert m.scan == "auto"
    m(torch.zeros(2, 5, dtype=torch.long)).sum().backward()
    assert calls == [(2, 5, 32)] * 2
    m.run_with_cache(torch.zeros(2, 5, dtype=torch.long), names=["blocks.0.ssm.h", "blocks.1.ssm.h"])
    assert len(calls) == 2  # asking for every layer's state never takes the fused path


def test_mamba_scan_is_validated():
    with pytest.raises(ValueError, match="scan"):
        models.make("mamba", SPEC, n_layers=1, d_model=16, scan="blelloch")


def test_fused_scan_float32_close_to_exact_exp():
    """The exp2 rewrite: exp(x) = exp2(x log2 e) within float32 noise over the range the scan sees."""
    x = -torch.linspace(0, 80, 10001)
    a = torch.exp2(x * math.log2(math.e))
    torch.testing.assert_close(a.double(), torch.exp(x.double()), rtol=1e-5, atol=1e-30)


def test_fused_scan_under_bf16_autocast():
    """train.autocast on CPU: the fused scan runs in float32 and the model tracks the parallel path."""
    torch.manual_seed(0)
    fused = models.make("mamba", SPEC, n_layers=2, d_model=16, scan="fused")
    par = models.make("mamba", SPEC, n_layers=2, d_model=16, scan="parallel")
    par.load_state_dict(fused.state_dict())
    x = torch.randint(0, SPEC.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a, b = fused(x), par(x)
    torch.testing.assert_close(a.float(), b.float(), atol=0.05, rtol=0.05)
    a.float().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in fused.parameters())


@pytest.mark.parametrize("scan", ["fused", "compiled"])
def test_fused_scans_promote_low_precision_to_float32(scan):
    """bf16 inputs (as autocast makes them) are scanned in float32: the result matches the exact scan of them."""
    if scan == "compiled" and not scan_kernel.available():
        pytest.skip(f"the compiled scan does not build here: {scan_kernel.library()}")
    fn = selective_scan if scan == "fused" else scan_kernel.compiled_selective_scan
    xs = [x.detach().to(torch.bfloat16) for x in make_inputs(2, 37, 8, 16, torch.float32, seed=7)]
    xs[2] = xs[2].float()  # A = -exp(A_log) stays float32 under autocast
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = fn(*xs)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y.double(), reference(*(x.double() for x in xs)), atol=1e-5, rtol=1e-4)


def kernel_layout_reference(u, delta, A, B, C, D=None, z=None, delta_softplus=False):
    """A CPU stand-in for mamba-ssm's `selective_scan_fn` in ITS layouts (u, delta (B,Di,T); A (Di,N); B, C (B,N,T);
    returns (B,Di,T)), written from its documented contract, to test the layouts `kernel_selective_scan` passes."""
    assert D is None and z is None and delta_softplus is False
    assert u.shape == delta.shape and B.shape == C.shape and A.shape == (u.shape[1], B.shape[1])
    dA = torch.einsum("bdl,dn->bldn", delta, A)  # (B,T,Di,N)
    dBu = torch.einsum("bdl,bnl,bdl->bldn", delta, B, u)  # (B,T,Di,N)
    return torch.einsum("bldn,bnl->bdl", sequential_scan(dA.exp(), dBu), C)  # (B,Di,T)


def test_kernel_layouts_match_the_fused_scan():
    """`call_in_kernel_layout` transposes (B,T,.) to the kernel's (B,.,T) and back: with a reference in the kernel's
    layouts it equals the fused scan, forward and backward (the CUDA kernel itself: tests/test_gpu.py)."""
    xs = make_inputs(2, 7, 5, 3, torch.float64, seed=8)
    w = torch.randn(2, 7, 5, generator=torch.Generator().manual_seed(9), dtype=torch.float64)

    def via_kernel_layout(*args):
        return scans.call_in_kernel_layout(kernel_layout_reference, *args)

    torch.testing.assert_close(via_kernel_layout(*xs), selective_scan(*xs))
    names = ["u", "delta", "A", "B", "C"]
    for name, a, b in zip(names, grads(via_kernel_layout, xs, w), grads(selective_scan, xs, w), strict=True):
        torch.testing.assert_close(a, b, msg=name)


def test_kernel_scan_off_cuda_is_a_clear_error(monkeypatch):
    """scan="kernel" on the CPU: a ValueError naming model.size.scan, with or without mamba_ssm installed."""
    m = models.make("mamba", SPEC, n_layers=1, d_model=16, scan="kernel")
    x = torch.zeros(2, 5, dtype=torch.long)
    with pytest.raises(ValueError, match=r"model\.size\.scan: 'kernel'.*CUDA only"):
        m(x)
    monkeypatch.setattr(scans, "mamba_ssm_scan", lambda: kernel_layout_reference)  # as if mamba-ssm imported
    with pytest.raises(ValueError, match=r"model\.size\.scan: 'kernel'.*CUDA only"):
        m(x)
    assert not scans.kernel_available("cpu")
    xs = make_inputs(1, 3, 2, 2, torch.float32)
    with pytest.raises(ValueError, match=r"model\.size\.scan"):
        scans.kernel_selective_scan(*xs)
    # asking for a layer's state h never reaches the kernel: that layer scans in parallel, on any device
    out, cache = m.run_with_cache(x, names=["blocks.0.ssm.h"])
    assert cache["blocks.0.ssm.h"].shape == (2, 5, 32, 16)


def test_kernel_scan_without_mamba_ssm_is_a_clear_error(monkeypatch):
    """Where mamba_ssm does not import, the kernel says so. The device check comes first, so the input claims to be
    on CUDA (a tensor subclass: only its .device is read before the import check)."""
    monkeypatch.setattr(scans, "mamba_ssm_scan", lambda: None)
    assert not scans.kernel_available("cuda")

    class FakeCuda(torch.Tensor):
        @property
        def device(self):
            return torch.device("cuda")

    u = torch.zeros(1, 2, 3).as_subclass(FakeCuda)
    with pytest.raises(ValueError, match=r"model\.size\.scan: 'kernel' needs the mamba-ssm package"):
        scans.kernel_selective_scan(u, u, torch.zeros(3, 2), torch.zeros(1, 2, 2), torch.zeros(1, 2, 2))


def test_auto_scan_stays_on_a_cpu_scan_even_with_mamba_ssm(monkeypatch):
    monkeypatch.setattr(scans, "mamba_ssm_scan", lambda: kernel_layout_reference)
    monkeypatch.setattr(scan_kernel, "available", lambda: False)
    calls = []

    def spy(*args):
        calls.append("fused")
        return selective_scan(*args)

    monkeypatch.setattr(mamba, "selective_scan", spy)
    models.make("mamba", SPEC, n_layers=2, d_model=16)(torch.zeros(2, 5, dtype=torch.long))
    assert calls == ["fused", "fused"]


def test_kernel_is_a_valid_scan_choice():
    assert models.make("mamba", SPEC, n_layers=1, d_model=16, scan="kernel").scan == "kernel"
    assert "kernel" in str(mamba.MambaSize.model_fields["scan"].annotation)
