"""Seeds trained stacked in one process (`training.stacked.train_stacked`) against the same seeds trained in
separate processes at the same time, in seed-steps per second, on the HMM at each tier's cell config.

    python benchmarks/bench_stacked.py [--tiers smoke quick standard] [--archs transformer mamba lstm mlp]
        [--seeds 1 3 5] [--steps N] [--warmup 2] [--stacked-threads N] [--device cpu] [--json PATH]

For each tier, architecture and seed count n, the cell `suites.paper.run_config("hmm", arch, tier, seed=s)` for
s = 0..n-1, with `--steps` steps (default per tier: STEPS), no periodic evaluation, only the final checkpoint and a
small final evaluation, is trained twice, each in fresh worker processes: (a) all n seeds stacked in one process with
`--stacked-threads` intra-op threads (default: n, at most the machine's cores: the cores the separate runs use), and
(b) n processes with one seed and one thread each, which import and then wait for one another so that they train at
the same time. Only the steps after `--warmup` are timed, by the wall clock: (a) from metrics.jsonl's `elapsed_s`,
n seed-steps per stacked step; (b) from the first process's first timed step to the last one's last step (each
process stamps its steps by a training callback), n x the timed steps over that span. Start-up, the final
evaluation and checkpoint are outside both. The ratio is (a) / (b): above 1 the stack trains more seed-steps per
second. The machine line names the CPU, its avx2 / avx512f / amx flags and the torch version. Measured numbers:
docs/training.md ("Stacked seeds").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from windtunnel.devices import _cpu_flags
from windtunnel.machine import machine_description
from windtunnel.store import rundir
from windtunnel.suites import paper

TIERS = ["smoke", "quick", "standard"]
ARCHS = ["transformer", "mamba", "lstm", "mlp"]
FLAGS = ("avx2", "avx512f", "amx_tile", "amx_bf16")
STEPS = {"smoke": 30, "quick": 16, "standard": 8}  # per run: about as many seconds at each tier on 2 idle cores


def cell(arch: str, tier: str, seed: int, steps: int, device: str) -> dict[str, Any]:
    """The HMM cell of `tier` at `seed`, trained `steps` steps with every step logged, no periodic evaluation, the final
    checkpoint only and a small final evaluation (none of which is timed)."""
    cfg = paper.run_config("hmm", arch, tier, seed=seed)
    cfg["train"].update(steps=steps, eval_every=0, log_every=1, checkpoint_every=0, device=device)
    cfg["train"].pop("early_stop", None)
    cfg["eval"].update(n=16, overrides=[])
    return cfg


def stacked_rate(run_dir: Path, n: int, warmup: int) -> float:
    """Seed-steps per second of n stacked seeds after the first `warmup` steps, by the wall clock (`elapsed_s`)."""
    lines = [r for r in rundir.read_metrics(run_dir) if "loss" in r]
    first, last = lines[warmup - 1] if warmup else {"step": 0, "elapsed_s": 0.0}, lines[-1]
    return n * (last["step"] - first["step"]) / max(last["elapsed_s"] - first["elapsed_s"], 1e-9)


def separate_rate(stamps: list[dict[str, float]], warmup: int) -> float:
    """Seed-steps per second of processes trained at the same time: every timed step over the wall-clock span from
    the first one's first timed step to the last one's last step (`stamps`: each process's {step: time})."""
    begin = min(s[str(warmup)] if warmup else s["start"] for s in stamps)
    end = max(s[str(max(int(k) for k in s if k != "start"))] for s in stamps)
    timed = sum(max(int(k) for k in s if k != "start") - warmup for s in stamps)
    return timed / max(end - begin, 1e-9)


class Stamps:
    """A training callback (`tracking.Callback`'s hooks) that notes the wall-clock time of each logged step."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {"start": time.time()}

    def on_step(self, step: int, record: dict[str, Any]) -> None:
        self.times[str(step)] = time.time()

    def on_eval(self, step: int, results: dict[str, Any]) -> None:
        pass

    def on_end(self, summary: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


def worker(spec: dict[str, Any]) -> None:
    """One worker process: train `spec["configs"]` into `spec["dirs"]` stacked, or one config alone once the "go"
    file exists (after writing its "ready" file), its step times into the "stamps" file."""
    torch.set_num_threads(spec["threads"])
    if spec["stacked"]:
        from windtunnel.training.stacked import train_stacked

        results = train_stacked(spec["configs"], spec["dirs"])
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            raise failed[0]
        return
    from windtunnel.training.train import train

    Path(spec["ready"]).touch()
    while not Path(spec["go"]).exists():
        time.sleep(0.005)
    stamps = Stamps()
    train(spec["configs"][0], spec["dirs"][0], progress=False, callbacks=[stamps])
    Path(spec["stamps"]).write_text(json.dumps(stamps.times))


def launch(spec: dict[str, Any]) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": str(spec["threads"]), "MKL_NUM_THREADS": str(spec["threads"])}
    return subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(spec)], env=env)


def wait(procs: list[subprocess.Popen]) -> None:
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"a worker failed (exit codes {codes})")


def measure(arch: str, tier: str, n: int, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Seed-steps/s of n seeds stacked in one process and of n separate one-thread processes, and their ratio."""
    steps = args.steps or STEPS[tier]
    cfgs = [cell(arch, tier, s, steps, args.device) for s in range(n)]
    threads = args.stacked_threads or min(n, os.cpu_count() or 1)
    stack_dirs = [str(root / f"{tier}-{arch}-{n}-stacked-s{s}") for s in range(n)]
    wait([launch({"stacked": True, "configs": cfgs, "dirs": stack_dirs, "threads": threads})])
    stacked = stacked_rate(Path(stack_dirs[0]), n, args.warmup)
    specs = []
    for s, c in enumerate(cfgs):
        name = root / f"{tier}-{arch}-{n}-solo-s{s}"
        files = {k: str(name.with_suffix(f".{k}")) for k in ("ready", "go", "stamps")}
        specs.append({"stacked": False, "configs": [c], "dirs": [str(name)], "threads": 1, **files})
    procs = [launch(spec) for spec in specs]
    while not all(Path(spec["ready"]).exists() for spec in specs):  # all imported: start them together
        if any(p.poll() for p in procs):
            break
        time.sleep(0.01)
    for spec in specs:
        Path(spec["go"]).touch()
    wait(procs)
    separate = separate_rate([json.loads(Path(spec["stamps"]).read_text()) for spec in specs], args.warmup)
    forward = next(r["stacked_forward"] for r in rundir.read_metrics(stack_dirs[0]) if "stacked_forward" in r)
    return {
        "tier": tier,
        "arch": arch,
        "seeds": n,
        "steps": steps,
        "stacked_threads": threads,
        "forward": forward,
        "stacked_seed_steps_per_s": stacked,
        "separate_seed_steps_per_s": separate,
        "ratio": stacked / separate,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiers", nargs="+", choices=TIERS, default=TIERS)
    ap.add_argument("--archs", nargs="+", choices=ARCHS, default=ARCHS)
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 3, 5], help="seed counts to compare")
    ap.add_argument("--steps", type=int, default=0, help="steps per run (0: STEPS of the tier; --warmup untimed)")
    ap.add_argument("--warmup", type=int, default=2, help="steps not timed (start-up, the first vmap attempt)")
    ap.add_argument("--stacked-threads", type=int, default=0, help="threads of the stacked process (0: n, <= cores)")
    ap.add_argument("--device", default="cpu", help="train.device of every run")
    ap.add_argument("--json", type=Path, default=None, help="write every number to this JSON file")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        worker(json.loads(args.worker))
        return
    if not 0 <= args.warmup < min([args.steps] if args.steps else [STEPS[t] for t in args.tiers]):
        ap.error(f"--warmup: must be at least 0 and below every run's steps (got {args.warmup})")
    machine = machine_description()
    flags = _cpu_flags() or frozenset()
    has = ", ".join(f"{f} {'yes' if f in flags else 'no'}" for f in FLAGS)
    print(f"machine: {machine['machine']} · {has} · torch {machine['torch']} · device {args.device}")
    per_tier = ", ".join(f"{t} {args.steps or STEPS[t]}" for t in args.tiers)
    print(f"steps per run: {per_tier}, the first {args.warmup} untimed; seed-steps/s: seeds x steps per second")
    print(f"{'tier':<9} {'arch':<12} {'seeds':>5} {'forward':<7} {'stacked':>9} {'separate':>9} {'ratio':>6}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for tier in args.tiers:
            for arch in args.archs:
                for n in args.seeds:
                    r = measure(arch, tier, n, args, Path(tmp))
                    rows.append(r)
                    print(
                        f"{tier:<9} {arch:<12} {n:>5} {r['forward']:<7} {r['stacked_seed_steps_per_s']:>9.2f} "
                        f"{r['separate_seed_steps_per_s']:>9.2f} {r['ratio']:>6.2f}",
                        flush=True,
                    )
    if args.json is not None:
        record = {"machine": machine, "flags": sorted(f for f in FLAGS if f in flags), "warmup": args.warmup}
        args.json.write_text(json.dumps({**record, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
