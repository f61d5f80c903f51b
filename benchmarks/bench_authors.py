"""The authors' models timed beside ours at the paper presets, one training step each (measured, not asserted).

    python benchmarks/bench_authors.py --authors-repo DIR [--steps 8] [--dtype float32 bf16]
        [--tasks bijection hmm] [--authors-steps N] [--compile ours theirs] [--peak-n 2048] [--json PATH]

Without `--authors-repo` it says so and exits 0 (so `make bench` runs it anywhere). Measured numbers: README.md
("Speed") and docs/results/time-to-bayes.md ("Training throughput against the authors' code").

In one process, with torch's current thread count (set OMP_NUM_THREADS to choose it), on the CPU, for each task
(the two the authors publish a transformer for) and dtype:

* ours: the paper-preset transformer trained by our loop, as benchmarks/bench_train.py times it (batch
  bench_train.CASES[task], `--steps` steps, the first two logged steps warm-up).
* theirs: imports the authors' model classes from a work tree of their repository (vishalmisra/bayesian-wind-tunnel,
  MIT licence; nothing of it is copied here) and times a plain training step on one fixed batch of random tokens:
  forward, cross-entropy, backward, grad-norm clip 1.0 and AdamW, as their scripts do (their train.py scripts),
  2 warm-up steps then `--authors-steps` timed steps:
  - bijection: `experiments/jlens/models.py:SepVocabTinyGPT(vocab_size=40, dim=192, n_layers=6, n_heads=6,
    max_seq_len=38)`, G3 format: V=20 with separate key/value vocab, 37 tokens, batch 128, labels at the 19 key
    positions, AdamW lr 3e-4 weight decay 0.1;
  - HMM: `src/models/gpt_mini.py:GPTMini(GPTMiniConfig(vocab_size=105, d_model=256, n_heads=8, n_layers=9,
    num_states=5, max_seq_len=1024, dropout=0.1))`, 93 tokens (K=20), batch 64, soft-target cross-entropy over
    the 5 states at the 20 observation positions, AdamW lr 3e-4 weight decay 0.01. Their dropout 0.1 is kept
    (it is what their training runs with); ours has none.
  Their step runs in float32, and in bf16 autocast only where `windtunnel.devices.cpu_has_native_bf16()`.

Printed: tokens/s of both, the ratio ours / theirs, and the achieved FLOP/s of each against the matmul peak (the
estimate of benchmarks/bench_train.py's docstring). `--json PATH` writes every number; the work tree is recorded
as the repository's name and, where it is a git work tree, its commit (not its path).

A work tree of the authors' repository (any of; DIR anywhere, e.g. next to this checkout):

    git clone https://github.com/vishalmisra/bayesian-wind-tunnel DIR
    git --git-dir=<mirror>/repo worktree add DIR HEAD
    mkdir DIR && git --git-dir=<mirror>/repo archive HEAD -- src experiments/jlens | tar -x -C DIR

(the last when a mirror lacks some large result files: a full `git archive HEAD` stops at a missing blob; only
`src/` and `experiments/jlens/` are needed).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F

from bench_train import (  # the sibling script (python puts benchmarks/ on sys.path)
    CASES,
    WARMUP_LOGGED,
    bench_train,
    fmt_result,
    measure_peaks,
    pct_of_peak,
    print_machine,
    train_flops,
    write_record,
)

AUTHORS_REPO = "vishalmisra/bayesian-wind-tunnel"
AUTHORS_WARMUP = 2  # untimed steps before the authors' timed ones
TIER = "paper"
DEVICE = "cpu"  # their step autocasts on the CPU; ours runs there too, so the ratio compares one machine

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


def bench_authors(repo: Path, task: str, batch: int, steps: int, dtype: str, compile: bool = False) -> dict:
    model, x, loss_fn, wd = authors_setup(repo, task, batch)
    model.train()
    forward = torch.compile(model) if compile else model  # compiled in the first (untimed) warm-up step
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=wd)
    times = []
    for i in range(AUTHORS_WARMUP + steps):
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = loss_fn(forward, x)
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
        "compiled": compile,
        "loss_last": float(loss.detach()),
    }


def work_tree_commit(repo: Path) -> str | None:
    """The commit checked out in `repo`, or None where it is not the top of a git work tree (e.g. a `git archive`
    export, which may sit inside another repository's tree)."""
    cmd = ["git", "-C", str(repo), "rev-parse", "--show-toplevel", "HEAD"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None
    return out[1] if len(out) == 2 and Path(out[0]).resolve() == repo.resolve() else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--authors-repo",
        type=Path,
        default=None,
        help=f"work tree of {AUTHORS_REPO} (see the module docstring); without it nothing runs",
    )
    ap.add_argument("--steps", type=int, default=8, help="our training steps per case (first 2 are warm-up)")
    ap.add_argument("--dtype", nargs="+", default=["float32", "bf16"])
    ap.add_argument("--tasks", nargs="+", choices=list(AUTHORS_MODELS), default=list(AUTHORS_MODELS))
    ap.add_argument(
        "--authors-steps",
        type=int,
        default=None,
        help="timed steps of the authors' model, after 2 warm-up steps (default: as many as ours)",
    )
    ap.add_argument(
        "--compile",
        nargs="+",
        choices=["ours", "theirs"],
        default=[],
        help="torch.compile our model (train.compile) and/or theirs; compilation falls in the warm-up steps",
    )
    ap.add_argument("--peak-n", type=int, default=2048, help="matmul size for the peak FLOP/s (0 skips)")
    ap.add_argument("--json", type=Path, default=None, help="write every number to this JSON file")
    args = ap.parse_args()
    if args.authors_repo is None:
        print("authors' code: skipped (no --authors-repo; see the docstring for how to make a work tree)")
        return
    repo = args.authors_repo.resolve()
    authors_steps = args.authors_steps or max(1, args.steps - WARMUP_LOGGED)
    head, native_bf16, dev = print_machine(TIER, DEVICE)
    peaks = measure_peaks(args.peak_n, args.dtype, dev, native_bf16)

    cases = []
    for task in args.tasks:
        for dtype in args.dtype:
            ours = bench_train(
                task, CASES[task]["batch"], args.steps, dtype, TIER, device=DEVICE, compile="ours" in args.compile
            )
            ours["compiled"] = "ours" in args.compile
            batch = ours["batch"]
            ours["pct_peak"] = pct_of_peak(ours["gflops"], peaks, ours["effective_dtype"])
            fallback = " (ran float32: no native bf16)" if ours["effective_dtype"] != dtype else ""
            print(f"train {task:<9} batch {batch:>3} {dtype:<7} ours   {fmt_result(ours, peaks)}{fallback}")
            theirs, ratio = None, None
            if dtype == "bf16" and not native_bf16:
                print(f"train {task:<9} batch {batch:>3} {dtype:<7} theirs skipped: no native bf16 on this CPU")
            else:
                theirs = bench_authors(repo, task, batch, authors_steps, dtype, compile="theirs" in args.compile)
                theirs["pct_peak"] = pct_of_peak(theirs["gflops"], peaks, theirs["effective_dtype"])
                ratio = ours["tokens_per_s"] / theirs["tokens_per_s"]
                print(f"train {task:<9} batch {batch:>3} {dtype:<7} theirs {fmt_result(theirs, peaks)}")
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

    if args.json is not None:
        own = {
            "steps": args.steps,
            "authors_steps": authors_steps,
            "authors_repo": AUTHORS_REPO,
            "authors_commit": work_tree_commit(repo),
            "compile": args.compile,
        }
        write_record(args.json, {**head, **own}, args.peak_n, peaks, cases)


if __name__ == "__main__":
    main()
