"""Training and evaluation throughput at the paper presets, beside the authors' code (measured, not asserted).

    python benchmarks/bench_train.py [--steps 8] [--dtype float32 bf16] [--quick] [--tasks bijection hmm]
        [--archs transformer] [--device auto] [--paper-cells] [--mamba-scan SCAN]
        [--authors-repo DIR] [--authors-steps N] [--peak-n 2048] [--eval-n 2000] [--json PATH]

    # on a GPU (scripts/gpu-check.sh): every paper cell as the paper tier trains it, on CUDA
    python benchmarks/bench_train.py --device cuda --paper-cells --tasks bijection hmm recall regression \
        --archs transformer mamba lstm mlp mlp-pointwise --steps 20 --eval-n 0 --json bench_train.json

In one process, with torch's current thread count (set OMP_NUM_THREADS to choose it), for each task and dtype:

* ours: runs the real training loop (`windtunnel.train.train`) for `--steps` steps and reads tokens/s from
  metrics.jsonl (the first two logged steps are warm-up and excluded, as long as one step remains). The timed step
  includes sampling the batch and gradient clipping. By default: the transformer (`--archs`) at the `--tier`
  preset on the task's default parameters, batch CASES[task], on `--device` (default auto: CUDA when present, as
  `train.device`). With `--paper-cells` each (task, arch) is instead the paper tier's own cell config
  (`suites.paper.run_config(task, arch, "paper")`: its task parameters, batch size, optimiser and schedule), with
  only the steps, logging, evaluation, checkpoints, device and dtype replaced. `--mamba-scan` sets Mamba's
  `model.size.scan` (e.g. "parallel", to compare with mamba-ssm's kernel that "auto" picks on CUDA).
* theirs (only with `--authors-repo`): imports the authors' model classes from a work tree of their repository
  (vishalmisra/bayesian-wind-tunnel, MIT licence; nothing of it is copied here) and times a plain training step on
  one fixed batch of random tokens: forward, cross-entropy, backward, grad-norm clip 1.0 and AdamW, as their scripts
  do (their train.py scripts), 2 warm-up steps then `--authors-steps` timed steps:
  - bijection: `experiments/jlens/models.py:SepVocabTinyGPT(vocab_size=40, dim=192, n_layers=6, n_heads=6,
    max_seq_len=38)`, G3 format: V=20 with separate key/value vocab, 37 tokens, batch 128, labels at the 19 key
    positions, AdamW lr 3e-4 weight decay 0.1;
  - HMM: `src/models/gpt_mini.py:GPTMini(GPTMiniConfig(vocab_size=105, d_model=256, n_heads=8, n_layers=9,
    num_states=5, max_seq_len=1024, dropout=0.1))`, 93 tokens (K=20), batch 64, soft-target cross-entropy over
    the 5 states at the 20 observation positions, AdamW lr 3e-4 weight decay 0.01. Their dropout 0.1 is kept
    (it is what their training runs with); ours has none.
  Their step runs in float32, and in bf16 autocast only where `windtunnel.devices.cpu_has_native_bf16()`.
  Printed: tokens/s of both and the ratio ours / theirs.
* FLOP/s: the peak is the best of a few timed square `--peak-n` matmuls after a warm-up, in float32 and (when bf16
  is asked for) bf16. The training step is estimated at

      FLOPs/step = 6 * n_params * B * T  +  12 * n_layers * T^2 * d_model * B

  (6 N per token for forward + backward through the weights, including the embedding tables, so a slight
  overestimate; plus q.k^T and attention.v, 2 * 2 T^2 d forward per layer and sequence, x3 with the backward,
  causal mask not discounted; the attention term for the transformer only). Achieved GFLOP/s = FLOPs/step /
  (s/step), printed with its percentage of the float32 peak, or of the bf16 peak when the step really ran in bf16
  (on the CPU our bf16 falls back to float32 without native bf16; CUDA runs bf16 autocast). The peak is measured
  on `--device`.

Then `evaluate` is timed on `--eval-n` bijection sequences (0 skips it). `--json PATH` writes every number.

A work tree of the authors' repository (any of):

    git clone https://github.com/vishalmisra/bayesian-wind-tunnel /tmp/authors
    git --git-dir=<mirror>/repo worktree add /tmp/authors HEAD
    mkdir /tmp/authors && git --git-dir=<mirror>/repo archive HEAD -- src experiments/jlens | tar -x -C /tmp/authors

(the last when a mirror lacks some large result files: a full `git archive HEAD` stops at a missing blob; only
`src/` and `experiments/jlens/` are needed).

The full measurement (both tasks, float32 and bf16, authors' code, 2 threads):

    OMP_NUM_THREADS=2 python benchmarks/bench_train.py --authors-repo /tmp/authors --json bench_train.json

Authors' scripts on a 2-core CPU (measured with this benchmark's --authors-repo mode, docs/training.md):
bijection 6x192 batch 128 ~10k tokens/s; HMM 9x256
batch 64 ~2.3k tokens/s; 2,000-sequence bijection evaluation 104 s.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import sys
import tempfile
import time
import warnings
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F

from windtunnel import rundir, runs
from windtunnel.config import RunConfig, build_config
from windtunnel.devices import cpu_has_native_bf16, resolve_device
from windtunnel.evaluate import evaluate
from windtunnel.machine import machine_description
from windtunnel.suites import paper
from windtunnel.train import train

# batch per task when not --paper-cells (bijection, HMM: the authors' transformer scripts; recall, regression:
# the paper tier's transformer cells)
CASES = {"bijection": {"batch": 128}, "hmm": {"batch": 64}, "recall": {"batch": 64}, "regression": {"batch": 128}}
DEFAULT_TASKS = ["bijection", "hmm"]
WARMUP_LOGGED = 2  # logged steps of our run dropped as warm-up
AUTHORS_WARMUP = 2  # untimed steps before the authors' timed ones


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
    if device.type == "cpu":
        return "fused"
    from windtunnel.models.mamba import kernel_available

    return "kernel" if kernel_available(device) else "parallel"


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
) -> dict:
    cfg = bench_config(task, arch, batch, steps, dtype, tier, device, paper_cell, mamba_scan)
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


# --- theirs -------------------------------------------------------------------------------------------------------

# task -> (file in their repository, its module name when their repository root is on sys.path, class)
AUTHORS_MODELS = {
    "bijection": ("experiments/jlens/models.py", "experiments.jlens.models", "SepVocabTinyGPT"),
    "hmm": ("src/models/gpt_mini.py", "src.models.gpt_mini", "GPTMini"),
}


def import_authors(repo: Path, task: str) -> ModuleType:
    """The authors' module defining `task`'s model, imported from the work tree `repo`.

    As a package module first (`repo` goes on sys.path). Both need only torch and the standard library at 670c6d6
    (`src/models/__init__.py` also imports `tinygpt.py`, likewise torch only), so nothing extra was needed. Should a
    package import fail (a missing optional dependency in an `__init__`) or resolve to another `src`/`experiments`
    package, the one file that defines the model is loaded on its own instead.
    """
    rel, name, _ = AUTHORS_MODELS[task]
    path = (repo / rel).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"--authors-repo: {path} not found; is {repo} a work tree of their repository?")
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    try:
        mod = importlib.import_module(name)
        if Path(mod.__file__).resolve() == path:
            return mod
    except ImportError as err:
        print(f"  note: importing {name} failed ({err}); loading {rel} on its own")
    spec = importlib.util.spec_from_file_location(f"_authors_{task}_model", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def authors_setup(repo: Path, task: str, batch: int) -> tuple[torch.nn.Module, torch.Tensor, object, float]:
    """(model, inputs, loss_fn(model, inputs) -> loss, weight decay) for the authors' `task` model at paper size."""
    mod = import_authors(repo, task)
    torch.manual_seed(0)
    if task == "bijection":
        V, L = 20, 19
        T = 2 * L - 1  # G3: [k1, v1+V, ..., k18, v18+V, k19]
        model = mod.SepVocabTinyGPT(vocab_size=2 * V, dim=192, n_layers=6, n_heads=6, max_seq_len=2 * L)
        x = torch.randint(0, 2 * V, (batch, T))
        labels = torch.full((batch, T), -100)
        labels[:, 0::2] = torch.randint(V, 2 * V, (batch, L))  # every key position predicts its value token

        def loss_fn(m: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
            logits = m(inputs)
            return F.cross_entropy(logits.reshape(-1, 2 * V).float(), labels.reshape(-1), ignore_index=-100)

        return model, x, loss_fn, 0.1
    K, header, vocab, states = 20, 53, 105, 5
    T = header + 2 * K
    with warnings.catch_warnings():  # "enable_nested_tensor is True, but ... norm_first was True": harmless
        warnings.simplefilter("ignore", UserWarning)
        model = mod.GPTMini(
            mod.GPTMiniConfig(
                vocab_size=vocab, d_model=256, n_heads=8, n_layers=9, num_states=states, max_seq_len=1024, dropout=0.1
            )
        )
    x = torch.randint(0, vocab, (batch, T))
    pos = header + 1 + 2 * torch.arange(K)  # the observation-symbol tokens 54, 56, ..., 92
    target = torch.softmax(torch.randn(batch, K, states), -1)  # stands in for the filtered posteriors

    def loss_fn(m: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        logits, _ = m(inputs)
        p = torch.softmax(logits[:, pos].float(), -1)
        return -(target * torch.log(p + 1e-10)).sum(-1).mean()  # as their compute_loss

    return model, x, loss_fn, 0.01


def bench_authors(repo: Path, task: str, batch: int, steps: int, dtype: str) -> dict:
    model, x, loss_fn, wd = authors_setup(repo, task, batch)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=wd)
    times = []
    for i in range(AUTHORS_WARMUP + steps):
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = loss_fn(model, x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i >= AUTHORS_WARMUP:
            times.append(time.perf_counter() - t0)
    s_per_step = sum(times) / len(times)
    T = x.shape[1]
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)  # tied weights counted once
    n_layers, d_model = (6, 192) if task == "bijection" else (9, 256)
    flops = train_flops(params, n_layers, d_model, T, batch)
    return {
        "s_per_step": s_per_step,
        "steps_per_s": 1 / s_per_step,
        "tokens_per_s": batch * T / s_per_step,
        "params": params,
        "timed_steps": steps,
        "n_layers": n_layers,
        "d_model": d_model,
        "seq_len": T,
        "flops_per_step": flops,
        "gflops": flops / s_per_step / 1e9,
        "effective_dtype": dtype,
        "loss_last": float(loss.detach()),
    }


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


def _pct(gflops: float, peaks: dict, dtype: str) -> float | None:
    return 100.0 * gflops / peaks[dtype] if peaks.get(dtype) else None


def _fmt(r: dict, peaks: dict) -> str:
    pct = _pct(r["gflops"], peaks, r["effective_dtype"])
    pct_s = f" = {pct:.0f}% of {r['effective_dtype']} peak" if pct is not None else ""
    return (
        f"params {r['params'] / 1e6:.2f}M  {r['s_per_step']:.3f} s/step  {r['steps_per_s']:.2f} steps/s  "
        f"{r['tokens_per_s']:,.0f} tokens/s  {r['gflops']:.1f} GFLOP/s{pct_s}"
    )


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
    ap.add_argument(
        "--authors-repo",
        type=Path,
        default=None,
        help="work tree of vishalmisra/bayesian-wind-tunnel (see the module docstring)",
    )
    ap.add_argument(
        "--authors-steps",
        type=int,
        default=None,
        help="timed steps of the authors' model, after 2 warm-up steps (default: as many as ours)",
    )
    ap.add_argument("--peak-n", type=int, default=2048, help="matmul size for the peak FLOP/s (0 skips)")
    ap.add_argument("--eval-n", type=int, default=2000, help="bijection sequences to time `evaluate` on (0 skips)")
    ap.add_argument("--json", type=Path, default=None, help="write every number to this JSON file")
    args = ap.parse_args()
    if args.paper_cells and args.tier != "paper":
        ap.error("--paper-cells: the paper tier's cells (leave --tier at paper)")
    tasks = ["bijection"] if args.quick else args.tasks
    steps = 5 if args.quick else args.steps
    authors_steps = args.authors_steps or max(1, steps - WARMUP_LOGGED)
    native_bf16 = cpu_has_native_bf16()
    threads = torch.get_num_threads()
    machine = machine_description()
    dev = resolve_device(args.device)
    print(f"torch {torch.__version__}, threads {threads}, tier {args.tier}, native bf16 {native_bf16}")
    print(f"machine: {machine['machine']}")
    if dev.type != "cpu":
        print(f"device: {dev} ({machine['device']})")

    peaks: dict[str, float] = {}
    if args.peak_n:
        peak_dtypes = {"float32": torch.float32, **({"bf16": torch.bfloat16} if "bf16" in args.dtype else {})}
        for name, dt in peak_dtypes.items():
            peaks[name] = matmul_peak(args.peak_n, dt, device=dev)
            note = "" if name == "float32" or native_bf16 or dev.type == "cuda" else " (emulated: no native bf16)"
            print(f"peak  {name:<7} {args.peak_n}x{args.peak_n} matmul: {peaks[name]:.1f} GFLOP/s{note}")

    repo = args.authors_repo.resolve() if args.authors_repo is not None else None
    if repo is None:
        print("authors' code: skipped (no --authors-repo; see the docstring for how to make a work tree)")

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
            ours["pct_peak"] = _pct(ours["gflops"], peaks, ours["effective_dtype"])
            fallback = " (ran float32: no native bf16)" if ours["effective_dtype"] != dtype else ""
            name = "" if args.archs == ["transformer"] else f"{arch:<13} "  # the arch column only when asked for
            print(f"train {task:<9} {name}batch {batch:>3} {dtype:<7} ours   {_fmt(ours, peaks)}{fallback}")
            theirs, ratio = None, None
            compare = repo is not None and arch == "transformer" and task in AUTHORS_MODELS  # their transformers
            if compare and dtype == "bf16" and not native_bf16:
                print(f"train {task:<9} batch {batch:>3} {dtype:<7} theirs skipped: no native bf16 on this CPU")
            elif compare:
                theirs = bench_authors(repo, task, batch, authors_steps, dtype)
                theirs["pct_peak"] = _pct(theirs["gflops"], peaks, theirs["effective_dtype"])
                ratio = ours["tokens_per_s"] / theirs["tokens_per_s"]
                print(f"train {task:<9} batch {batch:>3} {dtype:<7} theirs {_fmt(theirs, peaks)}")
                print(f"train {task:<9} batch {batch:>3} {dtype:<7} ours / theirs tokens/s = {ratio:.2f}x")
            cases.append(
                {
                    "task": task,
                    "arch": arch,
                    "batch": batch,
                    "dtype": dtype,
                    "ours": ours,
                    "theirs": theirs,
                    "ratio_ours_over_theirs": ratio,
                }
            )

    evals = []
    for dtype in args.dtype if args.eval_n else []:
        dt = bench_eval(args.eval_n, args.tier, dtype, args.device)
        evals.append({"dtype": dtype, "n": args.eval_n, "seconds": dt, "sequences_per_s": args.eval_n / dt})
        print(f"eval  bijection {args.eval_n} sequences {dtype:<7}: {dt:.2f} s  ({args.eval_n / dt:,.0f} sequences/s)")

    if args.json is not None:
        out = {
            "machine": machine,
            "torch_threads": threads,
            "native_bf16": native_bf16,
            "tier": args.tier,
            "device": str(dev),
            "paper_cells": args.paper_cells,
            "archs": args.archs,
            "mamba_scan": args.mamba_scan,
            "steps": steps,
            "authors_steps": authors_steps if repo is not None else None,
            "authors_repo": str(repo) if repo is not None else None,
            "peak_matmul_n": args.peak_n or None,
            "peak_gflops": peaks,
            "flops_formula": "6*n_params*B*T + 12*n_layers*T^2*d_model*B per training step",
            "cases": cases,
            "eval": evals,
        }
        args.json.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
