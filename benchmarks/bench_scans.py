"""Mamba's CPU scans alone: forward and forward + backward of the eager fused scan (`scans.selective_scan`) and the
compiled one (`scan_kernel.compiled_selective_scan`) at the tiers' shapes, in float32, with the ratio.

    python benchmarks/bench_scans.py [--threads 1] [--reps 20] [--json PATH]

Shapes (B,T,Di,N): the quick and standard tiers' 4 x 128 Mamba on the HMM (batch 32, T 93), on the bijection
(batch 32, T 37) and the paper HMM Mamba's inner width (9 x 256: Di 512) at batch 64. Each timing is the median of
`--reps` calls after two warm-up calls, on inputs in the ranges a trained block sees (tests/test_mamba_scan.py). The
numbers behind docs/results/mamba-scans.md; the whole training step: benchmarks/bench_train.py --mamba-scan.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from windtunnel.devices import cpu_simd_flags
from windtunnel.machine import machine_description
from windtunnel.models import scan_kernel
from windtunnel.models.scans import selective_scan

SHAPES = {"hmm quick (32,93,256,16)": (32, 93, 256, 16), "bijection quick (32,37,256,16)": (32, 37, 256, 16)}
SHAPES["hmm paper (64,93,512,16)"] = (64, 93, 512, 16)


def inputs(b: int, t: int, di: int, n: int) -> list[torch.Tensor]:
    """u, delta (B,T,Di), A (Di,N), B, C (B,T,N) in a trained block's ranges, requiring grad."""
    g = torch.Generator().manual_seed(0)
    u = torch.randn(b, t, di, generator=g)
    delta = F.softplus(torch.randn(b, t, di, generator=g) - 2)
    A = -torch.arange(1, n + 1, dtype=torch.float32) * torch.rand(di, 1, generator=g).add(0.5)
    return [x.requires_grad_() for x in (u, delta, A, torch.randn(b, t, n, generator=g), torch.randn(b, t, n))]


def median_ms(fn, reps: int) -> float:
    """The median of `reps` timed calls of fn(), in ms, after two warm-up calls."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def time_scan(scan, xs: list[torch.Tensor], w: torch.Tensor, reps: int) -> tuple[float, float]:
    """(forward, forward + backward) median ms of `scan` on `xs`; the backward of sum(y * w)."""

    def forward() -> None:
        with torch.no_grad():
            scan(*xs)

    def step() -> None:
        torch.autograd.grad((scan(*xs) * w).sum(), xs)

    return median_ms(forward, reps), median_ms(step, reps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if not scan_kernel.available():
        sys.exit(f"the compiled scan does not build here: {scan_kernel.library()}")
    machine = machine_description()
    print(f"torch {machine['torch']}, {args.threads} thread(s), {machine['machine']}, flags: {cpu_simd_flags()}")
    rows = []
    for name, shape in SHAPES.items():
        xs, w = inputs(*shape), torch.randn(shape[:3])
        fused = time_scan(selective_scan, xs, w, args.reps)
        compiled = time_scan(scan_kernel.compiled_selective_scan, xs, w, args.reps)
        rows.append({"shape": name, "fused_ms": fused, "compiled_ms": compiled})
        print(
            f"{name:32s} forward {fused[0]:7.1f} -> {compiled[0]:6.1f} ms ({compiled[0] / fused[0]:.2f}x)   "
            f"forward+backward {fused[1]:7.1f} -> {compiled[1]:6.1f} ms ({compiled[1] / fused[1]:.2f}x)"
        )
    if args.json:
        record = {**machine, "cpu_flags": cpu_simd_flags(), "threads": args.threads, "rows": rows}
        args.json.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
