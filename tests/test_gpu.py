"""CUDA paths, where a GPU is present (marked `gpu`; skipped elsewhere): the fused kernels that only run on CUDA
against the paths the CPU tests check."""

from __future__ import annotations

import pytest
import torch

from windtunnel import models, tasks
from windtunnel.models import presets

pytestmark = pytest.mark.gpu


def _pair(arch: str, task: str, **extra):
    torch.manual_seed(0)
    spec = tasks.make(task).spec
    size = presets.preset(task, arch, "smoke")
    cpu = models.make(arch, spec, size, **extra).eval()
    gpu = models.make(arch, spec, size, **extra).eval().cuda()
    gpu.load_state_dict(cpu.state_dict())
    return cpu, gpu, tasks.make(task).sample(8, seed=0)


def test_transformer_fused_attention_on_cuda_matches_the_explicit_path():
    cpu, gpu, batch = _pair("transformer", "bijection")
    with torch.no_grad():
        fused = gpu(batch.inputs.cuda())  # attention="auto": scaled_dot_product_attention on CUDA
        _, cache = gpu.run_with_cache(batch.inputs.cuda(), names=["blocks.0.attn.pattern"])  # explicit on layer 0
        torch.testing.assert_close(fused.cpu(), cpu(batch.inputs), atol=1e-4, rtol=1e-4)
    assert cache["blocks.0.attn.pattern"].is_cuda


def test_mamba_parallel_scan_on_cuda_matches_the_cpu_fused_scan():
    cpu, gpu, batch = _pair("mamba", "hmm")
    x = batch.inputs
    with torch.no_grad():
        torch.testing.assert_close(gpu(x.cuda()).cpu(), cpu(x), atol=1e-4, rtol=1e-4)  # hillis-steele vs fused loop
    out = gpu(x.cuda())
    out.float().square().sum().backward()  # the analytic reverse scan runs on CUDA
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in gpu.parameters())
