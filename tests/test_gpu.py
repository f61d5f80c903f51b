"""CUDA paths, where a GPU is present (marked `gpu`; skipped elsewhere): the fused kernels that only run on CUDA
against the paths the CPU tests check, and the geometry probes run on CUDA against the same probes on the CPU.

Float32 is compared in IEEE float32: TF32 (cuDNN convolutions allow it by default) is switched off for these tests,
since what they check is that the kernels compute the same thing, not how much precision TF32 gives away."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from tiny_runs import train_checkpointed
from windtunnel import models, tasks
from windtunnel.models import mamba, presets, scans
from windtunnel.models.scans import kernel_selective_scan, selective_scan

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _ieee_float32():
    """No TF32 in matmuls or convolutions during a test; the previous settings are restored after it."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    if conv is not None and hasattr(conv, "fp32_precision"):  # torch >= 2.9: the fp32_precision settings
        before = (torch.backends.cuda.matmul.fp32_precision, conv.fp32_precision)
        torch.backends.cuda.matmul.fp32_precision, conv.fp32_precision = "ieee", "ieee"
        yield
        torch.backends.cuda.matmul.fp32_precision, conv.fp32_precision = before
    else:
        before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, False
        yield
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def _need_kernel():
    if scans.mamba_ssm_scan() is None:
        pytest.skip("mamba-ssm does not import here (pip install -e '.[cuda]')")


def _pair(arch: str, task: str, **extra):
    torch.manual_seed(0)
    spec = tasks.make(task).spec
    size = presets.preset(task, arch, "smoke")
    cpu = models.make(arch, spec, size, **extra).eval()
    gpu = models.make(arch, spec, size, **extra).eval().cuda()
    gpu.load_state_dict(cpu.state_dict())
    return cpu, gpu, tasks.make(task).sample(8, seed=0)


def _assert_grads_close(gpu: torch.nn.Module, cpu: torch.nn.Module) -> None:
    for (name, pg), pc in zip(gpu.named_parameters(), cpu.parameters(), strict=True):
        assert (pg.grad is None) == (pc.grad is None), name
        if pc.grad is not None:
            scale = pc.grad.abs().max().item()
            torch.testing.assert_close(pg.grad.cpu(), pc.grad, atol=1e-4 * scale + 1e-6, rtol=1e-3, msg=name)


def test_transformer_fused_attention_on_cuda_matches_the_explicit_path():
    cpu, gpu, batch = _pair("transformer", "bijection")
    with torch.no_grad():
        fused = gpu(batch.inputs.cuda())  # attention="auto": scaled_dot_product_attention on CUDA
        _, cache = gpu.run_with_cache(batch.inputs.cuda(), names=["blocks.0.attn.pattern"])  # explicit on layer 0
        torch.testing.assert_close(fused.cpu(), cpu(batch.inputs), atol=1e-4, rtol=1e-4)
    assert cache["blocks.0.attn.pattern"].is_cuda


def test_mamba_parallel_scan_on_cuda_matches_the_cpu_fused_scan():
    cpu, gpu, batch = _pair("mamba", "hmm", scan="parallel")  # CPU: "parallel" too, but equal to fused (CPU tests)
    x = batch.inputs
    with torch.no_grad():
        torch.testing.assert_close(gpu(x.cuda()).cpu(), cpu(x), atol=1e-4, rtol=1e-4)  # hillis-steele vs loop
    out = gpu(x.cuda())
    out.float().square().sum().backward()  # the analytic reverse scan runs on CUDA
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in gpu.parameters())


# ------------------------------------------------------------------------------------ mamba-ssm's kernel


def _scan_inputs(b: int, t: int, di: int, n: int, seed: int) -> list[torch.Tensor]:
    """(u, delta, A, B, C) in realistic ranges (as tests/test_mamba_scan.py's make_inputs), float32 on the CPU."""
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(b, t, di, generator=g)  # (B,T,Di)
    delta = F.softplus(torch.randn(b, t, di, generator=g) - 2)  # (B,T,Di)
    A = -torch.arange(1, n + 1, dtype=torch.float32) * torch.rand(di, 1, generator=g).add(0.5)  # (Di,N)
    B = torch.randn(b, t, n, generator=g)  # (B,T,N)
    C = torch.randn(b, t, n, generator=g)  # (B,T,N)
    return [u, delta, A, B, C]


@pytest.mark.parametrize("shape", [(1, 1, 4, 3), (2, 37, 64, 16), (3, 93, 40, 16), (2, 300, 16, 8)])
def test_mamba_ssm_kernel_matches_the_cpu_fused_scan(shape):
    """mamba-ssm's selective_scan_fn (through kernel_selective_scan) = the CPU fused selective_scan, y and the
    gradients of u, delta, A, B and C."""
    _need_kernel()
    xs = _scan_inputs(*shape, seed=sum(shape))
    w = torch.randn(shape[:3], generator=torch.Generator().manual_seed(1))  # (B,T,Di) weights of y in the loss
    cpu = [x.clone().requires_grad_() for x in xs]
    gpu = [x.cuda().requires_grad_() for x in xs]
    y_cpu, y_gpu = selective_scan(*cpu), kernel_selective_scan(*gpu)
    assert y_gpu.is_cuda and y_gpu.shape == y_cpu.shape == shape[:3] and y_gpu.dtype == torch.float32
    scale = y_cpu.abs().max().item()
    torch.testing.assert_close(y_gpu.detach().cpu(), y_cpu.detach(), atol=1e-5 * scale + 1e-6, rtol=1e-4)
    (y_cpu * w).sum().backward()
    (y_gpu * w.cuda()).sum().backward()
    for name, a, b in zip(["u", "delta", "A", "B", "C"], gpu, cpu, strict=True):
        assert a.grad is not None and b.grad is not None, name
        s = b.grad.abs().max().item()
        torch.testing.assert_close(a.grad.cpu(), b.grad, atol=1e-4 * s + 1e-6, rtol=1e-3, msg=name)


def test_mamba_ssm_kernel_promotes_bf16_and_refuses_float64():
    _need_kernel()
    xs = [x.cuda() for x in _scan_inputs(2, 9, 8, 4, seed=3)]
    low = [x.to(torch.bfloat16) if i != 2 else x for i, x in enumerate(xs)]  # A stays float32 under autocast
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = kernel_selective_scan(*low)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y.cpu(), selective_scan(*(x.float().cpu() for x in low)), atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match=r"model\.size\.scan: 'kernel'.*float64"):
        kernel_selective_scan(*(x.double() for x in xs))


def test_mamba_model_auto_scan_uses_the_kernel_on_cuda_and_matches_the_cpu(monkeypatch):
    """scan="auto" on CUDA with mamba-ssm: every layer through the kernel; output and every parameter gradient as
    the CPU model's (fused scan)."""
    _need_kernel()
    cpu, gpu, batch = _pair("mamba", "hmm")
    assert gpu.scan == "auto"
    calls = []
    real = mamba.kernel_selective_scan

    def spy(*args):
        calls.append(args[0].device.type)
        return real(*args)

    monkeypatch.setattr(mamba, "kernel_selective_scan", spy)
    x = batch.inputs
    out_gpu, out_cpu = gpu(x.cuda()), cpu(x)
    assert calls == ["cuda"] * gpu.n_layers
    torch.testing.assert_close(out_gpu.detach().cpu(), out_cpu.detach(), atol=1e-4, rtol=1e-4)
    out_gpu.float().square().sum().backward()
    out_cpu.float().square().sum().backward()
    _assert_grads_close(gpu, cpu)
    explicit = models.make("mamba", tasks.make("hmm").spec, presets.preset("hmm", "mamba", "smoke"), scan="kernel")
    explicit.load_state_dict(cpu.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(explicit.eval().cuda()(x.cuda()).cpu(), out_cpu.detach(), atol=1e-4, rtol=1e-4)


def test_mamba_model_kernel_trains_under_bf16_autocast():
    _need_kernel()
    _, gpu, batch = _pair("mamba", "bijection", scan="kernel")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = gpu(batch.inputs.cuda())
    out.float().square().sum().backward()
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in gpu.parameters())


# ------------------------------------------------------------------------------------ probes on CUDA

# Relative / absolute tolerance of a probe number on CUDA against the CPU (float32 throughout, summed in another
# order). A ratio of two ablation deltas divides by a small number, so it gets a wider relative tolerance. A rank
# correlation moves in steps when two nearly tied float32 values swap order: near zero (an untrained model's) it gets
# an absolute tolerance of its own (measured on an H200: -0.00225 on CUDA against -0.00271 on the CPU).
REL, ABS, RATIO_REL, RANK_ABS = 1e-3, 1e-4, 2e-2, 2e-3


def _mismatches(a, b, path: str = "") -> list[tuple[str, object, object]]:
    """Every (path, a, b) where two geometry.json trees differ beyond the tolerances above."""
    if isinstance(a, dict):
        paths = {"figures", "run_dir"}  # where the probes wrote (and whether they drew): not numbers
        if not isinstance(b, dict) or a.keys() - paths != b.keys() - paths:
            return [(path, sorted(a), sorted(b) if isinstance(b, dict) else b)]
        return [m for k in sorted(a.keys() - paths) for m in _mismatches(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return [(path, a, b)]
        return [m for i, (x, y) in enumerate(zip(a, b, strict=True)) for m in _mismatches(x, y, f"{path}[{i}]")]
    if isinstance(a, float) or isinstance(b, float):
        rel = RATIO_REL if path.endswith("ratio_to_second") else REL
        tol = RANK_ABS if path.endswith("spearman") else ABS
        close = math.isclose(a, b, rel_tol=rel, abs_tol=tol) or (math.isnan(a) and math.isnan(b))
        return [] if close else [(path, a, b)]
    return [] if a == b else [(path, a, b)]  # int, str, bool, None: exactly


def _assert_results_close(a, b) -> None:
    wrong = _mismatches(a, b)
    assert not wrong, f"{len(wrong)} numbers differ: " + "; ".join(f"{p}: {x} vs {y}" for p, x, y in wrong[:20])


RUNS = {
    "transformer-bijection": (
        "transformer",
        "bijection",
        {"V": 6, "L": 5},
        {"n_layers": 2, "n_heads": 2, "d_model": 16},
    ),
    "mamba-hmm": ("mamba", "hmm", {}, {"n_layers": 2, "d_model": 16}),
}


@pytest.fixture(scope="module", params=list(RUNS))
def trained_run(request, tmp_path_factory):
    """A tiny run trained on the CPU, with three checkpoints (so the frame-precision probe runs too)."""
    arch, task, params, size = RUNS[request.param]
    return train_checkpointed(tmp_path_factory.mktemp(request.param) / "run", task, params, arch, size)


def test_probe_run_on_cuda_matches_the_cpu(trained_run, tmp_path):
    """probe_run(device='cuda'): the same held-out sequences, every probe number as on the CPU within float32
    tolerance, figures drawn from CUDA tensors, and `windtunnel probe --device cuda` the same."""
    from windtunnel.cli import app
    from windtunnel.geometry.run import probe_run

    def geometry(name: str) -> dict:
        return json.loads((tmp_path / name / "geometry.json").read_text())

    probe_run(trained_run, out=tmp_path / "cpu", n=64)
    on_cuda = probe_run(trained_run, out=tmp_path / "cuda", n=64, device="cuda")
    cpu, gpu = geometry("cpu"), geometry("cuda")
    assert gpu["step"] == cpu["step"] == 8 and len(gpu["dynamics"]["checkpoints"]) == 3
    assert [k for k, v in gpu.items() if isinstance(v, dict) and "error" in v] == [], "a probe failed on CUDA"
    _assert_results_close(gpu, cpu)
    assert sorted(p.rsplit("/", 1)[-1] for p in on_cuda["figures"]) == sorted(
        p.rsplit("/", 1)[-1] for p in cpu["figures"]
    )
    res = CliRunner().invoke(
        app,
        ["probe", str(trained_run), "--n", "64", "--no-figures", "--device", "cuda", "--out", str(tmp_path / "cli")],
    )
    assert res.exit_code == 0, res.output
    _assert_results_close(geometry("cli"), cpu)
