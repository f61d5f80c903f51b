"""Training and evaluation throughput of our code at the paper presets, with FLOP/s (measured, not asserted).

    python benchmarks/bench_train.py [--steps 8] [--dtype float32 bf16] [--quick] [--tasks bijection hmm]
        [--archs transformer] [--device auto] [--paper-cells] [--mamba-scan SCAN]
        [--peak-n 2048] [--eval-n 2000] [--json PATH]

    # on a GPU (scripts/gpu-check.sh): every paper cell as the paper tier trains it, on CUDA
    python benchmarks/bench_train.py --device cuda --paper-cells --tasks bijection hmm recall regression \
        --archs transformer mamba lstm mlp mlp-pointwise --steps 20 --eval-n 0 --json bench_train.json

The authors' models, timed beside ours: benchmarks/bench_authors.py. Measured numbers: README.md ("Speed"),
docs/results/time-to-bayes.md and docs/results/gpu/.

In one process, with torch's current thread count (set OMP_NUM_THREADS to choose it), for each task and dtype:

* training: runs the real training loop (`windtunnel.training.train.train`) for `--steps` steps and reads tokens/s from
  metrics.jsonl (the first two logged steps are warm-up and excluded, as long as one step remains). The timed step
  includes sampling the batch and gradient clipping. By default: the transformer (`--archs`) at the `--tier`
  preset on the task's default parameters, batch CASES[task], on `--device` (default auto: CUDA when present, as
  `train.device`). With `--paper-cells` each (task, arch) is instead the paper tier's own cell config
  (`suites.paper.run_config(task, arch, "paper")`: its task parameters, batch size, optimiser and schedule), with
  only the steps, logging, evaluation, checkpoints, device and dtype replaced. `--mamba-scan` sets Mamba's
  `model.size.scan` (e.g. "parallel", to compare with mamba-ssm's kernel that "auto" picks on CUDA).
* FLOP/s: the peak is the best of a few timed square `--peak-n` matmuls after a warm-up, in float32 and (when bf16
  is asked for) bf16. The training step is estimated at

      FLOPs/step = 6 * n_params * B * T  +  12 * n_layers * T^2 * d_model * B

  (6 N per token for forward + backward through the weights, including the embedding tables, so a slight
  overestimate; plus q.k^T and attention.v, 2 * 2 T^2 d forward per layer and sequence, x3 with the backward,
  causal mask not discounted; the attention term for the transformer only). Achieved GFLOP/s = FLOPs/step /
  (s/step), printed with its percentage of the float32 peak, or of the bf16 peak when the step really ran in bf16
  (on the CPU our bf16 falls back to float32 without native bf16; CUDA runs bf16 autocast). The peak is measured
  on `--device`.
* evaluation: `evaluate` timed on `--eval-n` bijection sequences (0 skips it).

`--json PATH` writes every number.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
import warnings
from pathlib import Path

import torch

from windtunnel import runs
from windtunnel.config import RunConfig, build_config
from windtunnel.devices import cpu_has_native_bf16, resolve_device
from windtunnel.evaluation.evaluate import evaluate
from windtunnel.machine import machine_description
from windtunnel.store import rundir
from windtunnel.suites import paper
from windtunnel.training.train import train

# batch per task when not --paper-cells (bijection, HMM: the authors' transformer scripts; recall, regression:
# the paper tier's transformer cells)
CASES = {"bijection": {"batch": 128}, "hmm": {"batch": 64}, "recall": {"batch": 64}, "regression": {"batch": 128}}
DEFAULT_TASKS = ["bijection", "hmm"]
WARMUP_LOGGED = 2  # logged steps of our run dropped as warm-up


FLOPS_FORMULA = "6*n_params*B*T + 12*n_layers*T^2*d_model*B per training step"


def train_flops(n_params: int, n_layers: int, d_model: int, T: int, batch: int, attention: bool = True) -> float:
    """Estimated FLOPs of one training step (forward + backward): see the module docstring."""
    return 6.0 * n_params * batch * T + (12.0 * n_layers * T**2 * d_model * batch if attention else 0.0)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def effective_dtype(dtype: str, device: torch.device) -> str:
    """What a `train.dtype` really runs as: bf16 autocast on CUDA, on the CPU only with native bf16."""
    if dtype != "bf16":
        return "float32"
    return "bf16" if device.type == "cuda" or cpu_has_native_bf16() else "float32"


# --- ours ---------------------------------------------------------------------------------------------------------


def mamba_scan_used(model: torch.nn.Module, device: torch.device) -> str:
    """The scan a Mamba model's layers run on `device` (what scan="auto" resolves to: models/mamba.py)."""
    if getattr(model, "variant", None) == "paper":
        return "sequential (paper variant)"
    scan = str(getattr(model, "scan", "auto"))
    if scan != "auto":
        return scan
    from windtunnel.models.mamba import auto_scan

    return auto_scan(device, torch.float32)


def bench_config(
    task: str,
    arch: str,
    batch: int,
    steps: int,
    dtype: str,
    tier: str,
    device: str = "auto",
    paper_cell: bool = False,
    mamba_scan: str | None = None,
    compile: bool = False,
) -> RunConfig | dict:
    """The config of one benchmark run (see the module docstring): a RunConfig, or the paper cell's plain dict."""
    if paper_cell:
        cfg = paper.run_config(task, arch, "paper")
        cfg["train"] = {
            **cfg["train"],
            "steps": steps,
            "log_every": 1,
            "eval_every": 0,
            "checkpoint_every": 0,
            "checkpoint_schedule": None,
            "dtype": dtype,
            "device": device,
            "compile": compile,
        }
        cfg["eval"] = {"n": 8}
    else:
        overrides = {
            "task.name": task,
            "model.arch": arch,
            "model.preset": tier,
            "train.steps": steps,
            "train.batch_size": batch,
            "train.log_every": 1,
            "train.eval_every": 0,
            "train.checkpoint_every": 0,
            "train.dtype": dtype,
            "train.warmup_steps": 1,
            "eval.n": 8,
        }
        if device != "auto":  # auto is the config's default: leave the config as it was before --device existed
            overrides["train.device"] = device
        if mamba_scan is not None and arch == "mamba":
            overrides["model.size.scan"] = mamba_scan
        if compile:  # torch.compile of the model (train.compile); its compilation falls in the warm-up steps
            overrides["train.compile"] = True
        return build_config(overrides=overrides)
    if mamba_scan is not None and arch == "mamba":
        cfg["model"]["size"] = {**cfg["model"].get("size", {}), "scan": mamba_scan}
    return cfg


def bench_train(
    task: str,
    batch: int,
    steps: int,
    dtype: str,
    tier: str,
    arch: str = "transformer",
    device: str = "auto",
    paper_cell: bool = False,
    mamba_scan: str | None = None,
    compile: bool = False,
) -> dict:
    cfg = bench_config(task, arch, batch, steps, dtype, tier, device, paper_cell, mamba_scan, compile)
    dev = resolve_device(device)
    with tempfile.TemporaryDirectory() as d:
        with warnings.catch_warnings():  # the no-native-bf16 fallback warning; reported as effective_dtype instead
            warnings.filterwarnings("ignore", message="dtype: this CPU has no native bf16")
            train(cfg, Path(d) / "run", progress=False)
        logged = [r for r in rundir.read_metrics(Path(d) / "run") if "loss" in r]
        lines = logged[min(WARMUP_LOGGED, len(logged) - 1) :]  # skip warm-up steps, keep at least one
        run = runs.load_run(Path(d) / "run")
        model = run.model
        params = model.n_params()
        size, T = run.config.model.size, run.task.spec.seq_len
        batch = run.config.train.batch_size
        n_layers = int(size.get("n_layers", getattr(model, "n_layers", 0)))
        d_model = int(size.get("d_model", getattr(model, "d_model", 0)))
        scan = mamba_scan_used(model, dev) if arch == "mamba" else None
    s_per_step = sum(r["time_s"] for r in lines) / len(lines)
    tokens = sum(r["tokens_per_s"] for r in lines) / len(lines)
    flops = train_flops(params, n_layers, d_model, T, batch, attention=arch == "transformer")
    out = {
        "arch": arch,
        "device": str(dev),
        "batch": batch,
        "s_per_step": s_per_step,
        "steps_per_s": 1 / s_per_step,
        "tokens_per_s": tokens,
        "params": params,
        "timed_steps": len(lines),
        "n_layers": n_layers,
        "d_model": d_model,
        "seq_len": T,
        "flops_per_step": flops,
        "gflops": flops / s_per_step / 1e9,
        "effective_dtype": effective_dtype(dtype, dev),
    }
    if scan is not None:
        out["mamba_scan"] = scan
    return out


def bench_eval(n: int, tier: str, dtype: str, device: str = "auto") -> float:
    cfg = build_config(overrides={"model.arch": "transformer", "model.preset": tier, "eval.dtype": dtype})
    dev = resolve_device(device)
    where = {"device": dev} if dev.type != "cpu" else {}  # the CPU: evaluate's default, as before --device
    evaluate(cfg, n=50, **where)  # warm-up
    _sync(dev)
    t = time.perf_counter()
    evaluate(cfg, n=n, **where)
    _sync(dev)
    return time.perf_counter() - t


# --- peak ---------------------------------------------------------------------------------------------------------


def matmul_peak(n: int, dtype: torch.dtype, repeats: int = 5, device: torch.device | None = None) -> float:
    """GFLOP/s of the fastest of `repeats` n x n matmuls (2 n^3 FLOPs each) after one warm-up, on `device`."""
    dev = device or torch.device("cpu")
    a, b = torch.randn(n, n).to(dev, dtype), torch.randn(n, n).to(dev, dtype)
    torch.mm(a, b)
    _sync(dev)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
        _sync(dev)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n**3 / best / 1e9


# --- main ---------------------------------------------------------------------------------------------------------


def pct_of_peak(gflops: float, peaks: dict, dtype: str) -> float | None:
    return 100.0 * gflops / peaks[dtype] if peaks.get(dtype) else None


def fmt_result(r: dict, peaks: dict) -> str:
    pct = pct_of_peak(r["gflops"], peaks, r["effective_dtype"])
    pct_s = f" = {pct:.0f}% of {r['effective_dtype']} peak" if pct is not None else ""
    return (
        f"params {r['params'] / 1e6:.2f}M  {r['s_per_step']:.3f} s/step  {r['steps_per_s']:.2f} steps/s  "
        f"{r['tokens_per_s']:,.0f} tokens/s  {r['gflops']:.1f} GFLOP/s{pct_s}"
    )


def print_machine(tier: str, device: str) -> tuple[dict, bool, torch.device]:
    """Print the machine; return (the head of the JSON record: machine, threads, native bf16, tier, device; native CPU
    bf16; the resolved device)."""
    native_bf16 = cpu_has_native_bf16()
    threads = torch.get_num_threads()
    machine = machine_description()
    dev = resolve_device(device)
    print(f"torch {torch.__version__}, threads {threads}, tier {tier}, native bf16 {native_bf16}")
    print(f"machine: {machine['machine']}")
    if dev.type != "cpu":
        print(f"device: {dev} ({machine['device']})")
    head = {"machine": machine, "torch_threads": threads, "native_bf16": native_bf16, "tier": tier, "device": str(dev)}
    return head, native_bf16, dev


def measure_peaks(n: int, dtypes: list[str], dev: torch.device, native_bf16: bool) -> dict[str, float]:
    """The matmul peak GFLOP/s in float32 and, when `dtypes` has bf16, bf16 (printed); {} when n is 0."""
    peaks: dict[str, float] = {}
    if n:
        peak_dtypes = {"float32": torch.float32, **({"bf16": torch.bfloat16} if "bf16" in dtypes else {})}
        for name, dt in peak_dtypes.items():
            peaks[name] = matmul_peak(n, dt, device=dev)
            note = "" if name == "float32" or native_bf16 or dev.type == "cuda" else " (emulated: no native bf16)"
            print(f"peak  {name:<7} {n}x{n} matmul: {peaks[name]:.1f} GFLOP/s{note}")
    return peaks


def write_record(path: Path, head: dict, peak_n: int, peaks: dict, cases: list, **rest) -> None:
    """Write the JSON record: `head` (print_machine's and the script's own settings), the peak, the cases, `rest`."""
    out = {
        **head,
        "peak_matmul_n": peak_n or None,
        "peak_gflops": peaks,
        "flops_formula": FLOPS_FORMULA,
        "cases": cases,
        **rest,
    }
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8, help="our training steps per case (first 2 are warm-up)")
    ap.add_argument("--dtype", nargs="+", default=["float32", "bf16"])
    ap.add_argument("--tier", default="paper")
    ap.add_argument("--quick", action="store_true", help="bijection only, 5 steps")
    ap.add_argument("--tasks", nargs="+", choices=list(CASES), default=DEFAULT_TASKS)
    ap.add_argument("--archs", nargs="+", choices=list(paper.ARCHS), default=["transformer"])
    ap.add_argument(
        "--device", choices=["auto", "cpu", "cuda"], default="auto", help="train.device (auto: CUDA when present)"
    )
    ap.add_argument(
        "--paper-cells",
        action="store_true",
        help="each (task, arch) as the paper tier's cell config (batch, optimiser, task parameters); needs tier paper",
    )
    ap.add_argument("--mamba-scan", default=None, help="model.size.scan of the Mamba runs (default: the preset's)")
    ap.add_argument("--peak-n", type=int, default=2048, help="matmul size for the peak FLOP/s (0 skips)")
    ap.add_argument("--eval-n", type=int, default=2000, help="bijection sequences to time `evaluate` on (0 skips)")
    ap.add_argument("--json", type=Path, default=None, help="write every number to this JSON file")
    args = ap.parse_args()
    if args.paper_cells and args.tier != "paper":
        ap.error("--paper-cells: the paper tier's cells (leave --tier at paper)")
    tasks = ["bijection"] if args.quick else args.tasks
    steps = 5 if args.quick else args.steps
    head, native_bf16, dev = print_machine(args.tier, args.device)
    peaks = measure_peaks(args.peak_n, args.dtype, dev, native_bf16)

    cases = []
    for task, arch in [(t, a) for t in tasks for a in args.archs]:
        for dtype in args.dtype:
            ours = bench_train(
                task,
                CASES[task]["batch"],
                steps,
                dtype,
                args.tier,
                arch=arch,
                device=args.device,
                paper_cell=args.paper_cells,
                mamba_scan=args.mamba_scan,
            )
            batch = ours["batch"]
            ours["pct_peak"] = pct_of_peak(ours["gflops"], peaks, ours["effective_dtype"])
            fallback = " (ran float32: no native bf16)" if ours["effective_dtype"] != dtype else ""
            name = "" if args.archs == ["transformer"] else f"{arch:<13} "  # the arch column only when asked for
            print(f"train {task:<9} {name}batch {batch:>3} {dtype:<7} ours   {fmt_result(ours, peaks)}{fallback}")
            cases.append({"task": task, "arch": arch, "batch": batch, "dtype": dtype, "ours": ours})

    evals = []
    for dtype in args.dtype if args.eval_n else []:
        dt = bench_eval(args.eval_n, args.tier, dtype, args.device)
        evals.append({"dtype": dtype, "n": args.eval_n, "seconds": dt, "sequences_per_s": args.eval_n / dt})
        print(f"eval  bijection {args.eval_n} sequences {dtype:<7}: {dt:.2f} s  ({args.eval_n / dt:,.0f} sequences/s)")

    if args.json is not None:
        own = {"paper_cells": args.paper_cells, "archs": args.archs, "mamba_scan": args.mamba_scan, "steps": steps}
        write_record(args.json, {**head, **own}, args.peak_n, peaks, cases, eval=evals)


if __name__ == "__main__":
    main()
