"""Time-to-Bayes on this machine: training seconds until each cell first reaches the paper's precision marks.

    python benchmarks/bench_time_to_bayes.py [--group bijection|hmm|regression|levers|all] [--seeds N]
                                             [--jobs 2] [--threads 1] [--out runs/time-to-bayes]

The same as `windtunnel time-to-bayes --cell ...` with the cells of docs/results/time-to-bayes.md: for each wind
tunnel, today's quick-tier recipe ("before") and the recipe the benchmark kept ("after"), at the budgets of the
issue's targets; `levers`: each lever of the CPU recipe (soft targets, LSTM gate-bias inits, Muon on recurrent
matrices) against its wsd control, 2 seeds. Writes time_to_bayes.json / .md / .png under --out. Long: hours on 2
cores for `all`.
"""

from __future__ import annotations

import argparse

from windtunnel.executors import ExecutorOptions
from windtunnel.time_to_bayes import Cell, run

# Each group: one wind tunnel's "before" (today's quick-tier recipe: AdamW, warmup + cosine) and "after" (the recipe
# docs/results/time-to-bayes.md found faster) at the same budget; eval every ~3% of the run.
GROUPS: dict[str, list[Cell]] = {
    "bijection": [
        Cell(
            task="bijection", arch="transformer", recipe="baseline", steps=3000, batch_size=64, lr=1e-3, eval_every=100
        ),
        Cell(task="bijection", arch="transformer", recipe="muon", steps=3000, batch_size=64, lr=2e-3, eval_every=100),
    ],
    "hmm": [
        Cell(task="hmm", arch="transformer", recipe="wsd", steps=3000, batch_size=32, lr=1e-3, eval_every=100),
        Cell(task="hmm", arch="transformer", recipe="muon", steps=3000, batch_size=32, lr=1e-3, eval_every=100),
    ],
    "regression": [
        Cell(task="regression", arch="transformer", recipe="wsd", steps=1500, batch_size=64, lr=1e-3, eval_every=100),
        Cell(
            task="regression",
            arch="transformer",
            recipe="wsd",
            steps=1500,
            batch_size=64,
            lr=1e-3,
            eval_every=100,
            set={"task.params.pair_tokens": True},
        ),
    ],
}


def _pair(task: str, arch: str, steps: int, batch: int, lr: float, *changes: dict) -> list[Cell]:
    """A lever against its control: the wsd cell and each change on top of it (a recipe or extra overrides), 2 seeds,
    the same budget, learning rate and evaluation cadence."""
    base = {"task": task, "arch": arch, "recipe": "wsd", "steps": steps, "batch_size": batch, "lr": lr}
    base |= {"eval_every": max(25, steps // 30), "seeds": 2}
    if task == "regression":
        base["set"] = {"task.params.pair_tokens": True}  # the quick tier's regression format
    return [Cell(**base), *(Cell(**{**base, **c, "set": {**base.get("set", {}), **c.get("set", {})}}) for c in changes)]


# The levers of the CPU recipe, each against the wsd control at a budget where the control is still falling.
GROUPS["levers"] = [
    *_pair("bijection", "transformer", 1200, 32, 2e-3, {"recipe": "soft"}),
    *_pair("regression", "transformer", 600, 64, 2e-3, {"recipe": "soft"}),
    *_pair(
        "hmm",
        "lstm",
        800,
        32,
        2e-3,
        {"set": {"model.size.forget_bias": 1.0}},
        {"set": {"model.size.chrono": 20}},
        {"recipe": "muon"},
    ),
    *_pair("hmm", "mamba", 800, 32, 1e-3, {"recipe": "muon"}),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--group", choices=[*GROUPS, "all"], default="bijection")
    ap.add_argument("--seeds", type=int, default=None, help="seeds per cell (default: each cell's own)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads per run")
    ap.add_argument("--out", default="runs/time-to-bayes")
    args = ap.parse_args()
    cells = [c for g, cs in GROUPS.items() if args.group in (g, "all") for c in cs]
    if args.seeds is not None:
        cells = [c.model_copy(update={"seeds": args.seeds}) for c in cells]
    run(cells, args.out, ExecutorOptions(jobs=args.jobs, threads=args.threads))


if __name__ == "__main__":
    main()
