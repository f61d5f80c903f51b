"""The paper suite: every wind tunnel x every architecture (+ oracle and uniform rows), at three tiers.

A suite is a plain list of run configs. Tiers:
    smoke     seconds; the tests run it end to end
    quick     the whole table on a 2-core CPU in about half an hour (smaller tasks/models where needed), 3 seeds for
              every transformer and Mamba cell (the cells the paper makes claims about), 1 for the controls
    standard  the quick sizes trained with the recipes the time-to-Bayes benchmark kept (`windtunnel.recipes`), in
              about two hours on 2 cores, same seeds; frequent validation so the report can say how long each cell
              took to reach each precision mark
    paper     the paper's and the authors' settings (`suites.settings.PAPER_SETTINGS`, each value sourced), for a GPU

Every setting in which a tier differs from that sourced table is reported by `deviations(tier)`, computed from the
configs themselves, so the report can never forget one and names where each "paper" value comes from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from windtunnel import tasks
from windtunnel.config import BASELINES, TrainConfig
from windtunnel.models.presets import preset
from windtunnel.suites.settings import OUR_MODEL_FORM, Sourced, paper_setting, values

TIERS = ("smoke", "quick", "standard", "paper")
TASKS = ("bijection", "hmm", "recall", "regression")
ARCHS = ("transformer", "mamba", "lstm", "mlp", "mlp-pointwise")
CLAIMED = ("transformer", "mamba")  # the architectures the paper makes claims about: seeds matter most here

# Training seeds per cell when `suite(seeds=None)`: the claimed architectures get a seed spread, controls one seed.
SEEDS: dict[str, dict[str, int]] = {
    "smoke": {},
    "quick": {"transformer": 3, "mamba": 3},
    "standard": {"transformer": 3, "mamba": 3},
    "paper": {"transformer": 3, "mamba": 3},
}

# Task sizes per tier (parameters not listed take the task's defaults); the paper tier's come from the sourced table.
TASK_PARAMS: dict[str, dict[str, dict[str, Any]]] = {
    "paper": {task: values(paper_setting(task, "*"), "task.") for task in TASKS},
    "quick": {
        "bijection": {},
        "hmm": {},
        # Binding beyond 4 pairs did not form within a CPU budget (a 2x64 transformer stayed at chance among the stored
        # values for 3,000 steps at N = 8 and 2,500 at N = 16), nor did scoring at the answer slot at N = 4 (chance
        # after 800 steps, against 100% by step 500 at the key): docs/reproduce.md. The capacity curve evaluates
        # the N = 4 models at 6, 8 and 16 pairs.
        "recall": {"N": 4, "key_vocab": 16, "value_vocab": 16, "n_filler": 4, "M": 4, "score_at": "key"},
        # One token per revealed (x, y) pair: without it no transformer recipe left the prior-mean plateau within
        # 3,000 steps (docs/results/time-to-bayes.md).
        "regression": {"pair_tokens": True},
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
    "paper": {"hmm": [{"K": 30}, {"K": 50}], "recall": [{"N": 16}, {"N": 32}, {"N": 96}], "regression": [{"n": 48}]},
    "quick": {"hmm": [{"K": 30}, {"K": 50}], "recall": [{"N": 6}, {"N": 8}, {"N": 16}], "regression": [{"n": 48}]},
    "smoke": {"hmm": [{"K": 9}]},
}

# The standard tier trains the quick sizes for longer.
TASK_PARAMS["standard"] = TASK_PARAMS["quick"]
LENGTH_GEN["standard"] = LENGTH_GEN["quick"]

# Quick tier: (steps, batch size, learning rate) per (task, arch) and per seed, sized so the whole table -- 3 seeds of
# every transformer and Mamba cell, one of every control -- trains in about half an hour on 2 CPU cores in float32
# (per-step times measured on a 2-core AVX-512 Xeon without native bf16, docs/reproduce.md). These budgets are far
# below what exactness needs: the quick tier shows where each architecture is after minutes, with marks that say so.
# HMM cells sat on the uniform floor at 250-400 steps per seed as at 100-200 (a first 46-minute tier run), so the
# budget goes where a few minutes show learning (recall, bijection).
# The MLP controls get the transformer's budget of the same task (the same budget rule as what they control).
QUICK: dict[tuple[str, str], tuple[int, int, float]] = {
    ("bijection", "transformer"): (1_000, 32, 1e-3),
    ("bijection", "mamba"): (300, 32, 2e-3),
    ("bijection", "lstm"): (3_500, 64, 2e-3),
    ("hmm", "transformer"): (200, 32, 1e-3),
    ("hmm", "mamba"): (100, 32, 1e-3),
    ("hmm", "lstm"): (200, 64, 2e-3),
    ("recall", "transformer"): (1_500, 64, 1e-3),
    ("recall", "mamba"): (800, 64, 2e-3),
    ("recall", "lstm"): (2_500, 64, 2e-3),
    ("regression", "transformer"): (200, 64, 1e-3),
    ("regression", "mamba"): (100, 64, 2e-3),
    ("regression", "lstm"): (500, 64, 2e-3),
}
SMOKE = (6, 8, 1e-3)
EVAL_N = {"smoke": 64, "quick": 300, "standard": 1000, "paper": 2000}

# The recipe of every trained cell at the quick and standard tiers (`windtunnel.recipes`): the time-to-Bayes
# benchmark's findings (docs/results/time-to-bayes.md): Muon on the hidden matrices with a warmup-stable-decay schedule
# for the bijection and HMM transformers (bijection 0.0178 bits at 3,000 steps against 0.0287 with AdamW; HMM 0.0131
# against 0.076), warmup-stable-decay for the rest (bijection transformer 0.0287 against 0.040 with the cosine). The
# MLP controls take their task's transformer recipe (the same rule as their budget).
RECIPE: dict[tuple[str, str], str] = {
    **{
        (task, arch): "wsd"
        for task in ("bijection", "hmm", "recall", "regression")
        for arch in ("transformer", "mamba", "lstm")
    },
    ("bijection", "transformer"): "muon",
    ("hmm", "transformer"): "muon",
}

# Standard tier: (steps, batch size, lr) per (task, arch) and per seed, at the quick sizes. The budgets fit the whole
# table -- 3 seeds of every transformer and Mamba cell -- into the two-hour wall on 2 cores, evaluation and probes
# included, from the benchmark's per-step times (1 thread per run, 2 runs at once): about half the steps the
# benchmark's best single-seed curves used, so these cells stop short of the marks those curves reached (bijection
# transformer: 0.0178 bits at 3,000 steps).
STANDARD: dict[tuple[str, str], tuple[int, int, float]] = {
    ("bijection", "transformer"): (1_500, 64, 2e-3),
    ("bijection", "mamba"): (500, 32, 2e-3),
    ("bijection", "lstm"): (5_000, 64, 2e-3),
    ("hmm", "transformer"): (1_200, 32, 1e-3),
    ("hmm", "mamba"): (300, 32, 1e-3),
    ("hmm", "lstm"): (1_000, 64, 2e-3),
    ("recall", "transformer"): (2_000, 64, 1e-3),
    ("recall", "mamba"): (1_200, 64, 2e-3),
    ("recall", "lstm"): (4_000, 64, 2e-3),
    ("regression", "transformer"): (1_200, 64, 1e-3),
    ("regression", "mamba"): (300, 64, 2e-3),
    ("regression", "lstm"): (1_500, 64, 2e-3),
}


def _budget_arch(arch: str) -> str:
    """An MLP control takes its task's transformer budget (the same budget rule as what it controls)."""
    return "transformer" if arch in ("mlp", "mlp-pointwise") else arch


def quick_budget(task: str, arch: str) -> tuple[int, int, float]:
    """(steps, batch size, lr) of a quick cell; an MLP control takes its task's transformer budget."""
    return QUICK[(task, _budget_arch(arch))]


def standard_budget(task: str, arch: str) -> tuple[int, int, float]:
    """(steps, batch size, lr) of a standard cell; an MLP control takes its task's transformer budget."""
    return STANDARD[(task, _budget_arch(arch))]


def recipe_for(task: str, arch: str) -> str:
    """The recipe a quick or standard cell trains with; an MLP control takes its task's transformer recipe. (Trained
    with warmup-stable-decay AdamW instead, the quick bijection MLP ended at 0.517 bits against 0.443 with Muon, for
    150 s less wall: the README's quick-tier notes.)"""
    return RECIPE[(task, _budget_arch(arch))]


def preset_tier(tier: str) -> str:
    """The size-preset tier a suite tier trains at: the standard tier uses the quick sizes."""
    return "quick" if tier == "standard" else tier


def dense_schedule(steps: int) -> list[int]:
    """Checkpoint steps dense early and sparse late (x1.5 apart), for the frame-precision dissociation probe."""
    out: list[int] = []
    s: float = 10
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
        out = {**values(paper_setting(task, arch), "train."), "eval_every": 5000, "checkpoint_every": 10_000}
        out["betas"] = list(out.get("betas", (0.9, 0.999)))
    elif tier == "standard":  # frequent validation: the report reads each cell's time to every precision mark
        steps, batch, lr = standard_budget(task, arch)
        out = {
            "steps": steps,
            "batch_size": batch,
            "lr": lr,
            "warmup_steps": max(1, steps // 20),
            "eval_every": max(1, steps // 20),
            "checkpoint_every": max(1, steps // 5),
            "keep_checkpoints": 1,
            "weight_decay": 0.01,
            "dtype": "float32",
        }
    else:
        steps, batch, lr = quick_budget(task, arch) if tier == "quick" else SMOKE
        out = {
            "steps": steps,
            "batch_size": batch,
            "lr": lr,
            "warmup_steps": max(1, steps // 20),
            "eval_every": max(1, steps // 5),
            "checkpoint_every": 0,
            "weight_decay": 0.01,
            "dtype": "float32",
        }
    if arch == "transformer" and tier != "smoke":  # the frame (attention) vs precision probe needs the history
        out["checkpoint_schedule"] = dense_schedule(out["steps"])
    return out


def run_config(task: str, arch: str, tier: str, seed: int = 0) -> dict[str, Any]:
    """The config of one cell of the table, as a plain dict ready for `RunConfig.model_validate`."""
    if tier not in TIERS:
        raise ValueError(f"tier: must be one of {', '.join(TIERS)} (got {tier!r})")
    trained = arch not in BASELINES
    train = _train_settings(task, arch, tier) if trained else {"steps": 0}
    cfg = {
        "task": {"name": task, "params": dict(TASK_PARAMS[tier].get(task, {}))},
        "model": {"arch": arch, "preset": preset_tier(tier) if trained else None},
        "train": train,
        "eval": {"n": EVAL_N[tier], "overrides": list(LENGTH_GEN[tier].get(task, []))},
        "seed": seed,
    }
    if tier in ("quick", "standard") and trained:
        from windtunnel.recipes import get_recipe

        cfg = get_recipe(recipe_for(task, arch)).apply(cfg)
    return cfg


def seeds_for(arch: str, tier: str, seeds: int | None = None) -> int:
    """Training seeds of a cell: `seeds` when given (baselines: always 1), else the tier's default."""
    if arch in BASELINES:
        return 1
    return seeds if seeds is not None else SEEDS[tier].get(arch, 1)


def _matches(task: str, arch: str, only: dict[str, str] | None) -> bool:
    if not only:
        return True
    unknown = set(only) - {"task", "arch"}
    if unknown:
        raise ValueError(f"only: filter keys must be task or arch (got {', '.join(sorted(unknown))})")
    cell = {"task": task, "arch": arch}
    return all(cell[k] in v.split(",") for k, v in only.items())


def suite(tier: str, seeds: int | None = None, only: dict[str, str] | None = None) -> list[SuiteRun]:
    """Every (task, architecture, seed) cell of the paper table at `tier`; baselines once per task.

    seeds: training seeds of every trained cell (None: the tier's default, `SEEDS`). A cell with more than one
    seed names its runs `<task>-<arch>-s<seed>`.
    """
    if tier not in TIERS:
        raise ValueError(f"tier: must be one of {', '.join(TIERS)} (got {tier!r})")
    if seeds is not None and seeds < 1:
        raise ValueError(f"seeds: must be >= 1 (got {seeds})")
    runs = []
    for task in TASKS:
        for arch in (*ARCHS, *BASELINES):
            if not _matches(task, arch, only):
                continue
            k = seeds_for(arch, tier, seeds)
            for seed in range(k):
                name = f"{task}-{arch}" + (f"-s{seed}" if k > 1 else "")
                runs.append(SuiteRun(name, run_config(task, arch, tier, seed)))
    return runs


def _diff(ours: dict[str, Any], paper: dict[str, Sourced]) -> list[str]:
    """`key = ours (value there)` for each sourced key whose value differs from ours, grouped by source:
    "steps = 1200 (100000), lr = 0.001 (0.0003) [authors' code: configs/...]"."""
    by_source: dict[str, list[str]] = {}
    for key in sorted(paper):
        ref = paper[key]
        a = ours.get(key, "default")
        if _norm(a) != _norm(ref.value):
            by_source.setdefault(ref.source, []).append(f"{key.split('.', 1)[1]} = {_norm(a)} ({_norm(ref.value)})")
    return [f"{', '.join(items)} [{source}]" for source, items in by_source.items()]


def _norm(v: Any) -> Any:
    """Compare tuples and lists alike (configs store betas as lists)."""
    return tuple(v) if isinstance(v, (list, tuple)) else v


def _prefixed(prefix: str, d: dict[str, Any]) -> dict[str, Any]:
    return {f"{prefix}.{k}": v for k, v in d.items()}


def deviations(tier: str) -> list[str]:
    """Every setting in which `tier` differs from the sourced paper settings, one line per task or cell, each naming
    the source of the value it departs from; implementation differences (norms, dropout, numerics) included."""
    if tier not in TIERS:
        raise ValueError(f"tier: must be one of {', '.join(TIERS)} (got {tier!r})")
    lines = []
    if tier != "paper":
        lines.append(
            f"model sizes: the '{preset_tier(tier)}' presets of windtunnel.models.presets; the MLPs are "
            "capacity-matched to the transformer of the same preset"
        )
    for task in TASKS:
        cfg = run_config(task, "transformer", tier)
        defaults = tasks.make(task).params.model_dump()
        task_diff = _diff(
            _prefixed("task", {**defaults, **cfg["task"]["params"]}),
            {k: v for k, v in paper_setting(task, "*").items() if k.startswith("task.")},
        )
        if task_diff:
            lines.append(f"{task}: " + "; ".join(task_diff))
        for arch in ARCHS:
            sourced = paper_setting(task, arch)
            if arch in ("transformer", "mamba", "lstm"):
                size = preset(task, arch, preset_tier(tier)).model_dump()  # defaults included: presets leave some unset
                ours = _prefixed("model", {**size, **run_config(task, arch, tier)["model"].get("size", {})})
                model_diff = _diff(
                    ours, {k: v for k, v in sourced.items() if k.startswith("model.") and k != "model.norm"}
                )
                if "model.norm" in sourced and sourced["model.norm"].value != OUR_MODEL_FORM[arch]:
                    kind, _, where = sourced["model.norm"].source.partition(": ")
                    model_diff.append(
                        f"form = {OUR_MODEL_FORM[arch]} ({sourced['model.norm'].value}) [{kind}: {where}]"
                    )
                if model_diff:
                    lines.append(f"{task} / {arch} model: " + "; ".join(model_diff))
            train = _prefixed("train", {**TrainConfig().model_dump(), **run_config(task, arch, tier)["train"]})
            train_diff = _diff(train, {k: v for k, v in sourced.items() if k.startswith("train.")})
            if train_diff:
                lines.append(f"{task} / {arch} training: " + "; ".join(train_diff))
    return lines
