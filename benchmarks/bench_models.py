"""Forward+backward throughput (tokens/s) of every architecture at the quick and paper presets.

    python benchmarks/bench_models.py                  # bijection quick+paper, hmm paper
    python benchmarks/bench_models.py --steps 5 --batch 32 --archs transformer mamba

One AdamW step per timed iteration on a fixed batch of random tokens (data generation is excluded: it is
negligible next to the model). Prints one row per (task, tier, arch).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from windtunnel import models, tasks
from windtunnel.models import presets

DEFAULT_RUNS = [("bijection", "quick"), ("bijection", "paper"), ("hmm", "paper")]


def bench(task: str, tier: str, arch: str, batch: int, steps: int, device: str) -> tuple[int, float]:
    """(params, tokens/s) for `steps` timed training steps after one warm-up step."""
    spec = tasks.make(task).spec
    model = models.make(arch, spec, presets.preset(task, arch, tier)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, spec.vocab_size, (batch, spec.seq_len), device=device)
    y = torch.randint(0, spec.n_classes, (batch, spec.seq_len), device=device)

    def step() -> None:
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step()
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    return model.n_params(), steps * batch * spec.seq_len / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--archs", nargs="+", default=presets.archs())
    parser.add_argument("--runs", nargs="+", default=[f"{t}:{r}" for t, r in DEFAULT_RUNS], help="task:tier pairs")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    print(f"device={args.device} threads={torch.get_num_threads()} batch={args.batch} steps={args.steps}")
    print(f"{'task':<10} {'tier':<6} {'arch':<14} {'params':>10} {'tokens/s':>10}")
    for run in args.runs:
        task, _, tier = run.partition(":")
        for arch in args.archs:
            n, tps = bench(task, tier, arch, args.batch, args.steps, args.device)
            print(f"{task:<10} {tier:<6} {arch:<14} {n:>10,} {tps:>10,.0f}", flush=True)


if __name__ == "__main__":
    main()
