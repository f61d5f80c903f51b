"""Peak memory of one activation-caching forward pass, by what is asked (hook points, models/hooks.py).

Each mode runs in a fresh process (peak RSS is per process) on the same held-out batch, under torch.no_grad:
    plain     model(x): no hooks
    probes    run_with_cache(x, names=geometry.data.probe_hook_names(model)): what `windtunnel probe` caches
    states    run_with_cache(x): every hook point, including each Mamba layer's state h (B,T,Di,N)

    python benchmarks/bench_cache_memory.py                       # the paper HMM Mamba at n = 256 sequences
    python benchmarks/bench_cache_memory.py --arch transformer --task bijection --n 256 --out bench.json
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

MODES = ("plain", "probes", "states")


def measure(task: str, arch: str, tier: str, n: int, mode: str) -> dict:
    """One mode in this process: peak RSS (MiB) before and after the pass, bytes of cached tensors, seconds."""
    import torch

    from windtunnel import models, tasks
    from windtunnel.geometry.data import heldout_batch, probe_hook_names
    from windtunnel.models.presets import preset
    from windtunnel.suites.paper import run_config

    torch.manual_seed(0)
    t = tasks.make(task, **run_config(task, arch, tier, 0)["task"]["params"])
    model = models.make(arch, t.spec, preset(task, arch, tier)).eval()
    batch = heldout_batch(t, n)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    with torch.no_grad():
        if mode == "plain":
            model(batch.inputs)
            cache = {}
        else:
            names = probe_hook_names(model) if mode == "probes" else None
            _, cache = model.run_with_cache(batch.inputs, names=names)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "mode": mode,
        "seconds": round(seconds, 3),
        "peak_rss_mib": round(peak, 1),
        "rss_before_pass_mib": round(base, 1),
        "pass_peak_mib": round(peak - base, 1),
        "cached_mib": round(sum(v.numel() * v.element_size() for v in cache.values()) / 2**20, 1),
        "n_cached": len(cache),
        "seq_len": int(batch.inputs.shape[1]),
        "n": n,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="hmm")
    ap.add_argument("--arch", default="mamba")
    ap.add_argument("--tier", default="paper", help="size preset and task size (suites.paper)")
    ap.add_argument("--n", type=int, default=256, help="sequences in the batch")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one mode in this process
    a = ap.parse_args()
    if a.one:
        print(json.dumps(measure(a.task, a.arch, a.tier, a.n, a.one)))
        return
    rows = []
    for mode in a.modes.split(","):
        cmd = [
            sys.executable,
            __file__,
            "--task",
            a.task,
            "--arch",
            a.arch,
            "--tier",
            a.tier,
            "--n",
            str(a.n),
            "--one",
            mode,
        ]
        row = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
        rows.append(row)
        print(
            f"{a.task}/{a.arch} ({a.tier}, n={a.n}) {mode:7s} pass peak {row['pass_peak_mib']:9.1f} MiB  "
            f"cached {row['cached_mib']:9.1f} MiB  {row['seconds']:.2f} s"
        )
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"task": a.task, "arch": a.arch, "tier": a.tier, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
