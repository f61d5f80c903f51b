"""How the suite's run configs depart from the paper's sourced settings (`suites.settings`): `deviations(tier)`, a
tier's lines for the report, and `config_deviations(cfg)`, one run config's, each naming the source of the value."""

from __future__ import annotations

from typing import Any

from windtunnel import tasks
from windtunnel.config import EvalConfig, TrainConfig, validate
from windtunnel.models import size_class
from windtunnel.models.presets import preset
from windtunnel.resolve import aux_text
from windtunnel.suites.paper import ARCHS, BUDGET, TIERS, preset_tier, protocol_text, run_config, tier_tasks
from windtunnel.suites.settings import Sourced, our_forms, paper_setting


def _label(key: str) -> str:
    """How a table key reads in a deviation line: `train.lr` -> "lr", `form.model` -> "form", `form.init` -> "init
    form", `form.loss` -> "loss"."""
    return {"form.model": "form", "form.init": "init form"}.get(key, key.split(".", 1)[1])


def _diff(ours: dict[str, Any], paper: dict[str, Sourced]) -> list[str]:
    """`key = ours (value there)` for each sourced key whose value differs from ours, grouped by source:
    "steps = 1200 (50000), lr = 0.001 (0.0003) [authors' code: experiments/...]"."""
    by_source: dict[str, list[str]] = {}
    for key in sorted(paper):
        ref = paper[key]
        a = ours.get(key, "default")
        if _norm(a) != _norm(ref.value):
            by_source.setdefault(ref.source, []).append(f"{_label(key)} = {_norm(a)} ({_norm(ref.value)})")
    return [f"{', '.join(items)} [{source}]" for source, items in by_source.items()]


def _norm(v: Any) -> Any:
    """Compare tuples and lists alike (configs store betas as lists)."""
    return tuple(v) if isinstance(v, (list, tuple)) else v


def _prefixed(prefix: str, d: dict[str, Any]) -> dict[str, Any]:
    return {f"{prefix}.{k}": v for k, v in d.items()}


def _config_values(cfg: dict[str, Any]) -> dict[str, Any]:
    """Everything a trained run config (a plain dict, `run_config`'s form) does, under the table's keys: its resolved
    model size (preset, its own size keys, derived fields such as `init`), train and eval config with defaults, and
    our fixed forms."""
    task, arch = cfg["task"]["name"], cfg["model"]["arch"]
    tier = cfg["model"].get("preset")
    base = preset(task, arch, tier).as_config() if tier else {}
    size = size_class(arch).of({**base, **cfg["model"].get("size", {})})
    dumped = size.model_dump()
    return {
        **_prefixed("model", dumped),
        **_prefixed("train", {**TrainConfig().model_dump(), **cfg.get("train", {})}),
        **_prefixed("eval", {**EvalConfig().model_dump(), **cfg.get("eval", {})}),
        **our_forms(task, arch, dumped, cfg.get("train", {}).get("loss", "auto"), cfg["task"].get("params", {})),
    }


# Which line of a cell's deviations a table key belongs to.
_GROUPS = {"model": ("model.", "form.model", "form.init"), "training": ("train.", "form."), "evaluation": ("eval.",)}


def _group(key: str) -> str:
    return next(g for g, starts in _GROUPS.items() if key.startswith(starts))


def deviations(tier: str) -> list[str]:
    """Every setting in which `tier` differs from the sourced paper settings, one line per task or cell and group
    (model, training, evaluation), each naming the source of the value it departs from: sizes, init, optimiser and
    what its weight decay applies to, schedule, and the fixed forms our code cannot change (loss, data, checkpoint,
    layer form), so the paper tier lists its own remaining differences too."""
    if tier not in TIERS:
        raise ValueError(f"tier: must be one of {', '.join(TIERS)} (got {tier!r})")
    lines = []
    if tier != "paper":
        lines.append(
            f"model sizes: the '{preset_tier(tier)}' presets of windtunnel.models.presets; the MLPs are "
            "capacity-matched to the transformer of the same preset"
        )
    if tier in BUDGET:
        lines.append(protocol_text(tier))
    for task in tier_tasks(tier):
        task_diff = config_deviations(run_config(task, "transformer", tier))["task"]
        if task_diff:
            lines.append(f"{task}: " + "; ".join(task_diff))
        for arch in ARCHS:
            for group, diff in config_deviations(run_config(task, arch, tier)).items():
                if diff and group != "task":
                    lines.append(f"{task} / {arch} {group}: " + "; ".join(diff))
    return lines


def config_deviations(cfg: dict[str, Any]) -> dict[str, list[str]]:
    """How one trained run config (a plain dict, `run_config`'s form, any tier or overrides) departs from the sourced
    settings of its (task, arch) cell, by group ("task", "model", "training", "evaluation"; a group with no
    difference is []), each line naming the source of the value it departs from, fixed forms (loss, data,
    checkpoint) included, and an auxiliary target (`train.aux_target`, which the paper did not use): what a benchmark
    states beside a number it compares with the authors'."""
    task, arch = cfg["task"]["name"], cfg["model"]["arch"]
    defaults = tasks.make(task).params.model_dump()
    sourced = paper_setting(task, arch)
    out = {
        "task": _diff(
            _prefixed("task", {**defaults, **cfg["task"].get("params", {})}),
            {k: v for k, v in paper_setting(task, "*").items() if k.startswith("task.")},
        )
    }
    ours = _config_values(cfg)
    for group in _GROUPS:
        out[group] = _diff(ours, {k: v for k, v in sourced.items() if not k.startswith("task.") and _group(k) == group})
    if cfg.get("train", {}).get("aux_target") is not None:
        out["training"].append(aux_text(validate(cfg)))
    return out
