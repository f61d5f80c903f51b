"""Training and evaluation throughput at the paper presets, beside the authors' code (measured, not asserted).

    python benchmarks/bench_train.py [--steps 8] [--dtype float32 bf16] [--quick] [--tasks bijection hmm]
        [--authors-repo DIR] [--authors-steps N] [--peak-n 2048] [--eval-n 2000] [--json PATH]

In one process, with torch's current thread count (set OMP_NUM_THREADS to choose it), for each task and dtype:

* ours: runs the real training loop (`windtunnel.train.train`) for `--steps` steps and reads tokens/s from
  metrics.jsonl (the first two logged steps are warm-up and excluded, as long as one step remains). The timed step
  includes sampling the batch and gradient clipping.
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
  Their step runs in float32, and in bf16 autocast only where `windtunnel.precision.cpu_has_native_bf16()`.
  Printed: tokens/s of both and the ratio ours / theirs.
* FLOP/s: the peak is the best of a few timed square `--peak-n` matmuls after a warm-up, in float32 and (when bf16
  is asked for) bf16. The training step is estimated at

      FLOPs/step = 6 * n_params * B * T  +  12 * n_layers * T^2 * d_model * B

  (6 N per token for forward + backward through the weights, including the embedding tables, so a slight
  overestimate; plus q.k^T and attention.v, 2 * 2 T^2 d forward per layer and sequence, x3 with the backward,
  causal mask not discounted). Achieved GFLOP/s = FLOPs/step / (s/step), printed with its percentage of the float32
  peak, or of the bf16 peak when the step really ran in bf16 (our bf16 falls back to float32 without native bf16).

Then `evaluate` is timed on `--eval-n` bijection sequences (0 skips it). `--json PATH` writes every number.

A work tree of the authors' repository (any of):

    git clone https://github.com/vishalmisra/bayesian-wind-tunnel /tmp/authors
    git --git-dir=<mirror>/repo worktree add /tmp/authors HEAD
    mkdir /tmp/authors && git --git-dir=<mirror>/repo archive HEAD -- src experiments/jlens | tar -x -C /tmp/authors

(the last when the mirror lacks some large result files, as /work/.mirror/vishalmisra+bayesian-wind-tunnel/repo
does: a full `git archive HEAD` stops at a missing blob; only `src/` and `experiments/jlens/` are needed).

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
from windtunnel.config import build_config
from windtunnel.evaluate import evaluate
from windtunnel.precision import cpu_has_native_bf16
from windtunnel.reproduce import machine_description
from windtunnel.train import train

CASES = {"bijection": {"batch": 128}, "hmm": {"batch": 64}}
WARMUP_LOGGED = 2  # logged steps of our run dropped as warm-up
AUTHORS_WARMUP = 2  # untimed steps before the authors' timed ones


def train_flops(n_params: int, n_layers: int, d_model: int, T: int, batch: int) -> float:
    """Estimated FLOPs of one training step (forward + backward): see the module docstring."""
    return 6.0 * n_params * batch * T + 12.0 * n_layers * T**2 * d_model * batch


# --- ours ---------------------------------------------------------------------------------------------------------


def bench_train(task: str, batch: int, steps: int, dtype: str, tier: str) -> dict:
    cfg = build_config(
        overrides={
            "task.name": task,
            "model.arch": "transformer",
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
    )
    with tempfile.TemporaryDirectory() as d:
        with warnings.catch_warnings():  # the no-native-bf16 fallback warning; reported as effective_dtype instead
            warnings.filterwarnings("ignore", message="dtype: this CPU has no native bf16")
            train(cfg, Path(d) / "run", progress=False)
        logged = [r for r in rundir.read_metrics(Path(d) / "run") if "loss" in r]
        lines = logged[min(WARMUP_LOGGED, len(logged) - 1) :]  # skip warm-up steps, keep at least one
        run = runs.load_run(Path(d) / "run")
        params = run.model.n_params()
        size, T = run.config.model.size, run.task.spec.seq_len
    s_per_step = sum(r["time_s"] for r in lines) / len(lines)
    tokens = sum(r["tokens_per_s"] for r in lines) / len(lines)
    flops = train_flops(params, size["n_layers"], size["d_model"], T, batch)
    return {
        "s_per_step": s_per_step,
        "steps_per_s": 1 / s_per_step,
        "tokens_per_s": tokens,
        "params": params,
        "timed_steps": len(lines),
        "n_layers": size["n_layers"],
        "d_model": size["d_model"],
        "seq_len": T,
        "flops_per_step": flops,
        "gflops": flops / s_per_step / 1e9,
        "effective_dtype": "bf16" if dtype == "bf16" and cpu_has_native_bf16() else "float32",
    }


def bench_eval(n: int, tier: str, dtype: str) -> float:
    cfg = build_config(overrides={"model.arch": "transformer", "model.preset": tier, "eval.dtype": dtype})
    evaluate(cfg, n=50)  # warm-up
    t = time.perf_counter()
    evaluate(cfg, n=n)
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


def matmul_peak(n: int, dtype: torch.dtype, repeats: int = 5) -> float:
    """GFLOP/s of the fastest of `repeats` n x n matmuls (2 n^3 FLOPs each) after one warm-up."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
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
    ap.add_argument("--tasks", nargs="+", choices=list(CASES), default=list(CASES))
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
    tasks = ["bijection"] if args.quick else args.tasks
    steps = 5 if args.quick else args.steps
    authors_steps = args.authors_steps or max(1, steps - WARMUP_LOGGED)
    native_bf16 = cpu_has_native_bf16()
    threads = torch.get_num_threads()
    machine = machine_description()
    print(f"torch {torch.__version__}, threads {threads}, tier {args.tier}, native bf16 {native_bf16}")
    print(f"machine: {machine['machine']}")

    peaks: dict[str, float] = {}
    if args.peak_n:
        peak_dtypes = {"float32": torch.float32, **({"bf16": torch.bfloat16} if "bf16" in args.dtype else {})}
        for name, dt in peak_dtypes.items():
            peaks[name] = matmul_peak(args.peak_n, dt)
            note = "" if name == "float32" or native_bf16 else " (emulated: no native bf16)"
            print(f"peak  {name:<7} {args.peak_n}x{args.peak_n} matmul: {peaks[name]:.1f} GFLOP/s{note}")

    repo = args.authors_repo.resolve() if args.authors_repo is not None else None
    if repo is None:
        print("authors' code: skipped (no --authors-repo; see the docstring for how to make a work tree)")

    cases = []
    for task in tasks:
        batch = CASES[task]["batch"]
        for dtype in args.dtype:
            ours = bench_train(task, batch, steps, dtype, args.tier)
            ours["pct_peak"] = _pct(ours["gflops"], peaks, ours["effective_dtype"])
            fallback = " (ran float32: no native bf16)" if ours["effective_dtype"] != dtype else ""
            print(f"train {task:<9} batch {batch:>3} {dtype:<7} ours   {_fmt(ours, peaks)}{fallback}")
            theirs, ratio = None, None
            if repo is not None and dtype == "bf16" and not native_bf16:
                print(f"train {task:<9} batch {batch:>3} {dtype:<7} theirs skipped: no native bf16 on this CPU")
            elif repo is not None:
                theirs = bench_authors(repo, task, batch, authors_steps, dtype)
                theirs["pct_peak"] = _pct(theirs["gflops"], peaks, theirs["effective_dtype"])
                ratio = ours["tokens_per_s"] / theirs["tokens_per_s"]
                print(f"train {task:<9} batch {batch:>3} {dtype:<7} theirs {_fmt(theirs, peaks)}")
                print(f"train {task:<9} batch {batch:>3} {dtype:<7} ours / theirs tokens/s = {ratio:.2f}x")
            cases.append(
                {
                    "task": task,
                    "batch": batch,
                    "dtype": dtype,
                    "ours": ours,
                    "theirs": theirs,
                    "ratio_ours_over_theirs": ratio,
                }
            )

    evals = []
    for dtype in args.dtype if args.eval_n else []:
        dt = bench_eval(args.eval_n, args.tier, dtype)
        evals.append({"dtype": dtype, "n": args.eval_n, "seconds": dt, "sequences_per_s": args.eval_n / dt})
        print(f"eval  bijection {args.eval_n} sequences {dtype:<7}: {dt:.2f} s  ({args.eval_n / dt:,.0f} sequences/s)")

    if args.json is not None:
        out = {
            "machine": machine,
            "torch_threads": threads,
            "native_bf16": native_bf16,
            "tier": args.tier,
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
