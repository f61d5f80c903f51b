"""The paper suite: every wind tunnel x every architecture (+ oracle and uniform rows), at three tiers.

A suite is a plain list of run configs. Tiers:
    smoke  seconds; the tests run it end to end
    quick  the whole table on a 2-core CPU in about half an hour (smaller tasks/models where needed)
    paper  the paper's task sizes, model sizes and budgets, meant for a GPU

Every setting that differs from the paper tier is reported by `deviations(tier)`, computed from the configs
themselves, so the report can never forget one.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from windtunnel import tasks
from windtunnel.models.presets import preset
from windtunnel.models.registry import resolve

TIERS = ("smoke", "quick", "paper")
TASKS = ("bijection", "hmm", "recall", "regression")
ARCHS = ("transformer", "mamba", "lstm", "mlp", "mlp-pointwise")
BASELINES = ("oracle", "uniform")

# The primitive each wind tunnel isolates, and the headline metric of its column in Table 1.
PRIMITIVE = {
    "bijection": ("belief accumulation", "entropy_mae_bits"),
    "hmm": ("belief transport", "entropy_mae_bits"),
    "recall": ("random-access binding", "accuracy"),
    "regression": ("continuous inference", "entropy_mae_bits"),
}

# Task sizes per tier (parameters not listed take the task's paper defaults).
TASK_PARAMS: dict[str, dict[str, dict[str, Any]]] = {
    "paper": {"bijection": {}, "hmm": {}, "recall": {}, "regression": {}},
    "quick": {
        "bijection": {},
        "hmm": {},
        "recall": {"N": 4, "key_vocab": 16, "value_vocab": 16, "n_filler": 4, "M": 4},
        "regression": {},
    },
    "smoke": {
        "bijection": {"V": 6, "L": 5},
        "hmm": {"S": 3, "O": 3, "K": 6},
        "recall": {"N": 4, "key_vocab": 8, "value_vocab": 8, "n_filler": 2, "M": 2},
        "regression": {"d": 2, "n": 6},
    },
}

# Length generalisation: evaluate at longer sequences than trained on (paper: HMM K=20 -> 30, 50).
LENGTH_GEN: dict[str, dict[str, list[dict[str, Any]]]] = {
    "paper": {"hmm": [{"K": 30}, {"K": 50}], "recall": [{"N": 96}], "regression": [{"n": 48}]},
    "quick": {"hmm": [{"K": 30}, {"K": 50}], "recall": [{"N": 6}], "regression": [{"n": 48}]},
    "smoke": {"hmm": [{"K": 9}]},
}

# Paper tier: the paper's budgets (paper-spec.md §3; recall and regression: our choice, no published budget).
PAPER_BUDGET: dict[str, tuple[int, int]] = {  # task -> (steps, batch size)
    "bijection": (100_000, 128), "hmm": (150_000, 64), "recall": (100_000, 64), "regression": (50_000, 128)}
PAPER_LR: dict[str, float] = {"transformer": 3e-4, "mamba": 1e-4, "lstm": 3e-4, "mlp": 3e-4, "mlp-pointwise": 3e-4}

# Quick tier: (steps, batch size, learning rate) per (task, arch), tuned on a 2-core CPU so the whole table trains
# in about half an hour (docs/reproduce.md). The flat MLP controls cannot use context at any budget; they get a
# short run, enough to reach their context-blind floor.
QUICK: dict[tuple[str, str], tuple[int, int, float]] = {
    ("bijection", "transformer"): (2_500, 64, 1e-3),
    ("bijection", "mamba"): (1_500, 64, 2e-3),
    ("bijection", "lstm"): (5_000, 64, 2e-3),
    ("hmm", "transformer"): (4_000, 64, 1e-3),
    ("hmm", "mamba"): (3_000, 32, 1e-3),
    ("hmm", "lstm"): (1_500, 64, 2e-3),
    ("recall", "transformer"): (1_500, 64, 1e-3),
    ("recall", "mamba"): (1_500, 64, 2e-3),
    ("recall", "lstm"): (2_500, 64, 2e-3),
    ("regression", "transformer"): (1_000, 64, 1e-3),
    ("regression", "mamba"): (600, 64, 2e-3),
    ("regression", "lstm"): (1_500, 64, 2e-3),
}
QUICK_MLP = (250, 64, 1e-3)
SMOKE = (6, 8, 1e-3)
EVAL_N = {"smoke": 64, "quick": 1000, "paper": 2000}


def dense_schedule(steps: int) -> list[int]:
    """Checkpoint steps dense early and sparse late (x1.5 apart), for the frame-precision dissociation probe."""
    out, s = [], 10
    while s < steps:
        out.append(int(s))
        s = max(s + 1, s * 1.5)
    return out


@dataclass(frozen=True)
class SuiteRun:
    """One entry of a suite: a run name (its directory) and its config as a plain dict."""

    name: str
    config: dict[str, Any]


def _train_settings(task: str, arch: str, tier: str) -> dict[str, Any]:
    if tier == "paper":
        steps, batch = PAPER_BUDGET[task]
        out = {"steps": steps, "batch_size": batch, "lr": PAPER_LR.get(arch, 3e-4), "warmup_steps": 2000,
               "eval_every": 5000, "checkpoint_every": 10_000, "weight_decay": 0.1, "dtype": "bf16"}
    else:
        steps, batch, lr = (QUICK.get((task, arch), QUICK_MLP) if tier == "quick" else SMOKE)
        out = {"steps": steps, "batch_size": batch, "lr": lr, "warmup_steps": max(1, steps // 20),
               "eval_every": max(1, steps // 5), "checkpoint_every": 0, "weight_decay": 0.01,
               "dtype": "bf16" if tier == "quick" else "float32"}
    if arch == "transformer" and tier != "smoke":  # the frame (attention) vs precision probe needs the history
        out["checkpoint_schedule"] = dense_schedule(steps)
    return out


def run_config(task: str, arch: str, tier: str, seed: int = 0) -> dict[str, Any]:
    """The config of one cell of the table, as a plain dict ready for `RunConfig.model_validate`."""
    if tier not in TIERS:
        raise ValueError(f"tier: must be one of {', '.join(TIERS)} (got {tier!r})")
    trained = arch not in BASELINES
    train = _train_settings(task, arch, tier) if trained else {"steps": 0}
    return {
        "task": {"name": task, "params": dict(TASK_PARAMS[tier].get(task, {}))},
        "model": {"arch": arch, "preset": tier if trained else None},
        "train": train,
        "eval": {"n": EVAL_N[tier], "overrides": list(LENGTH_GEN[tier].get(task, []))},
        "seed": seed,
    }


def _matches(task: str, arch: str, only: dict[str, str] | None) -> bool:
    if not only:
        return True
    unknown = set(only) - {"task", "arch"}
    if unknown:
        raise ValueError(f"only: filter keys must be task or arch (got {', '.join(sorted(unknown))})")
    cell = {"task": task, "arch": arch}
    return all(cell[k] in v.split(",") for k, v in only.items())


def suite(tier: str, seeds: int = 1, only: dict[str, str] | None = None) -> list[SuiteRun]:
    """Every (task, architecture, seed) cell of the paper table at `tier`; baselines once per task."""
    if seeds < 1:
        raise ValueError(f"seeds: must be >= 1 (got {seeds})")
    runs = []
    for task in TASKS:
        for arch in (*ARCHS, *BASELINES):
            if not _matches(task, arch, only):
                continue
            for seed in range(seeds if arch not in BASELINES else 1):
                name = f"{task}-{arch}" + (f"-s{seed}" if seeds > 1 else "")
                runs.append(SuiteRun(name, run_config(task, arch, tier, seed)))
    return runs


def _diff(ours: dict[str, Any], paper: dict[str, Any], skip: tuple[str, ...] = ()) -> list[str]:
    """`key = ours (paper: x)` for each key whose value differs; keys absent on one side read "default"."""
    out = []
    for key in sorted(set(ours) | set(paper)):
        if key in skip:
            continue
        a, b = ours.get(key, "default"), paper.get(key, "default")
        if a != b:
            out.append(f"{key} = {a} (paper: {b})")
    return out


def _prefixed(prefix: str, d: dict[str, Any]) -> dict[str, Any]:
    return {f"{prefix}.{k}": v for k, v in d.items()}


def _size_defaults(arch: str) -> dict[str, Any]:
    """The size keywords an architecture's constructor defaults, so presets that leave one unset still compare."""
    params = inspect.signature(resolve(arch)).parameters
    return {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}


def deviations(tier: str) -> list[str]:
    """Every setting in which `tier` differs from the paper tier, one line per task or cell, from the configs."""
    if tier == "paper":
        return []
    lines = [f"model sizes: the '{tier}' presets of windtunnel.models.presets (paper: the 'paper' presets); the MLPs"
             " are capacity-matched to the transformer of the same preset"]
    for task in TASKS:
        ours, paper = run_config(task, "transformer", tier), run_config(task, "transformer", "paper")
        defaults = tasks.make(task).params.model_dump()
        task_diff = _diff(_prefixed("task", {**defaults, **ours["task"]["params"]}),
                          _prefixed("task", {**defaults, **paper["task"]["params"]}))
        task_diff += _diff(_prefixed("eval", ours["eval"]), _prefixed("eval", paper["eval"]))
        if task_diff:
            lines.append(f"{task}: " + "; ".join(task_diff))
        for arch in ("transformer", "mamba", "lstm"):
            size = _size_defaults(arch)
            model_diff = _diff({**size, **preset(task, arch, tier)}, {**size, **preset(task, arch, "paper")})
            if model_diff:
                lines.append(f"{task} / {arch} model: " + "; ".join(model_diff))
        for arch in ARCHS:
            skip = ("eval_every", "checkpoint_every", "checkpoint_schedule")
            train_diff = _diff(run_config(task, arch, tier)["train"], run_config(task, arch, "paper")["train"], skip)
            if train_diff:
                lines.append(f"{task} / {arch} training: " + "; ".join(train_diff))
    return lines
