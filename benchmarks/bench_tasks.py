"""Sampling speed of every built-in wind tunnel: sequences per second at batch 1024 (median of a few repeats).

    python benchmarks/bench_tasks.py [--batch 1024] [--repeats 5] [--device cpu] [--threads N]

On a busy shared CPU, `--threads 1` avoids thread oversubscription (it can be 10-100x faster there).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from windtunnel import tasks


def bench(name: str, batch: int, repeats: int, device: str) -> float:
    """Median sequences/s of `tasks.make(name).sample(batch)` (posterior included), after one warm-up."""
    task = tasks.make(name)
    task.sample(batch, seed=0, device=device)  # warm-up
    times = []
    for r in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        task.sample(batch, seed=r + 1, device=device)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return batch / statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    print(
        f"task sampling, batch {args.batch}, median of {args.repeats}, device {args.device}, "
        f"torch threads {torch.get_num_threads()}"
    )
    for name in tasks.names():
        rate = bench(name, args.batch, args.repeats, args.device)
        spec = tasks.make(name).spec
        print(f"{name:<12} T={spec.seq_len:<4} {rate:>12,.0f} sequences/s")


if __name__ == "__main__":
    main()
