"""Training and evaluation throughput at the paper presets (measured, not asserted).

    python benchmarks/bench_train.py [--steps 8] [--dtype float32 bf16] [--quick]

Runs the real training loop (`windtunnel.train.train`) for a few steps and reads tokens/s from metrics.jsonl
(first logged step excluded as warm-up), then times `evaluate` on 2,000 bijection sequences.
Authors' code on a 2-core CPU: bijection 6x192 batch 128 ~10k tokens/s; HMM 9x256 batch 64 ~2.3k tokens/s;
2,000-sequence bijection evaluation 104 s.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from windtunnel import runs
from windtunnel.config import build_config
from windtunnel.evaluate import evaluate
from windtunnel.train import train

CASES = {"bijection": {"batch": 128}, "hmm": {"batch": 64}}


def bench_train(task: str, batch: int, steps: int, dtype: str, tier: str) -> dict:
    cfg = build_config(overrides={
        "task.name": task, "model.arch": "transformer", "model.preset": tier, "train.steps": steps,
        "train.batch_size": batch, "train.log_every": 1, "train.eval_every": 0, "train.checkpoint_every": 0,
        "train.dtype": dtype, "train.warmup_steps": 1, "eval.n": 8})
    with tempfile.TemporaryDirectory() as d:
        train(cfg, Path(d) / "run", progress=False)
        lines = [r for r in runs.read_metrics(Path(d) / "run") if "loss" in r][2:]  # skip warm-up steps
        params = runs.load_run(Path(d) / "run").model.n_params()
    s_per_step = sum(r["time_s"] for r in lines) / len(lines)
    tokens = sum(r["tokens_per_s"] for r in lines) / len(lines)
    return {"s_per_step": s_per_step, "steps_per_s": 1 / s_per_step, "tokens_per_s": tokens, "params": params}


def bench_eval(n: int, tier: str, dtype: str) -> float:
    cfg = build_config(overrides={"model.arch": "transformer", "model.preset": tier, "eval.dtype": dtype})
    evaluate(cfg, n=50)  # warm-up
    t = time.perf_counter()
    evaluate(cfg, n=n)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--dtype", nargs="+", default=["float32", "bf16"])
    ap.add_argument("--tier", default="paper")
    ap.add_argument("--quick", action="store_true", help="bijection only, 5 steps")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, tier {args.tier}")
    cases = {"bijection": CASES["bijection"]} if args.quick else CASES
    steps = 5 if args.quick else args.steps
    for task, c in cases.items():
        for dtype in args.dtype:
            r = bench_train(task, c["batch"], steps, dtype, args.tier)
            print(f"train {task:<9} batch {c['batch']:>3} {dtype:<7} params {r['params'] / 1e6:.2f}M  "
                  f"{r['s_per_step']:.3f} s/step  {r['steps_per_s']:.2f} steps/s  {r['tokens_per_s']:,.0f} tokens/s")
    for dtype in args.dtype:
        dt = bench_eval(2000, args.tier, dtype)
        print(f"eval  bijection 2000 sequences {dtype:<7}: {dt:.2f} s  ({2000 / dt:,.0f} sequences/s)")


if __name__ == "__main__":
    main()
