"""The paper's figures from run records: calibration curves, length generalisation, training curves."""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from pathlib import Path

from windtunnel import models
from windtunnel.plotting import save, subplots
from windtunnel.report.collect import RunRecord
from windtunnel.report.tables import headline_metric

# Colours of the architectures that declare none (`models.info(arch).color`: a user's own), none of them a built-in's:
# each name gets one by a hash of the name, so it has the same colour in every figure and every report.
# Hues apart from the built-ins' blue, orange, green, red, purple, grey and black: brown, pink, olive, cyan, gold,
# magenta, ochre.
USER_COLORS = ("C5", "C6", "C8", "C9", "#e6ab02", "#e7298a", "#a6761d")


def arch_color(arch: str) -> str:
    """The colour of an architecture in every figure: its own (`models.info`), else one of USER_COLORS, stable per
    name."""
    color = models.info(arch).color
    if color is not None:
        return color
    digest = hashlib.sha256(arch.encode()).digest()
    return USER_COLORS[int.from_bytes(digest[:4], "big") % len(USER_COLORS)]


def _label(text: str) -> str:
    """A run-supplied name as literal figure text: a `$` would start matplotlib mathtext (which can fail to parse)."""
    return text.replace("$", r"\$")


def _slug(name: str) -> str:
    """A run-supplied task name as a safe file-name part: letters, digits, '.', '_' and '-' kept, the rest '_'."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip(".") or "_"


def _save(fig, path: Path) -> Path:
    return save(fig, path, bbox_inches="tight")


def _first_seed(records: list[RunRecord]) -> dict[str, RunRecord]:
    out: dict[str, RunRecord] = {}
    for r in sorted(records, key=lambda r: r.seed):
        out.setdefault(r.arch, r)
    return out


def calibration_figure(records: list[RunRecord], task: str, out: Path) -> Path | None:
    """Per-position predictive entropy of each architecture against the exact Bayes entropy."""
    runs = _first_seed([r for r in records if r.task == task and r.arch != "oracle"])
    curves = {a: r.default.get("per_position", {}) for a, r in runs.items()}
    curves = {a: c for a, c in curves.items() if c.get("model_entropy_bits") and c.get("bayes_entropy_bits")}
    if not curves:
        return None
    fig, ax = subplots(figsize=(6.5, 4))
    bayes = next(iter(curves.values()))["bayes_entropy_bits"]
    ax.plot(range(1, len(bayes) + 1), bayes, "k--", lw=2.5, label="exact Bayes")
    for arch, c in curves.items():
        ys = c["model_entropy_bits"]
        ax.plot(range(1, len(ys) + 1), ys, marker="o", ms=3, color=arch_color(arch), label=_label(arch))
    ax.set_xlabel("scored position")
    ax.set_ylabel("predictive entropy (bits)")
    ax.set_title(f"{_label(task)}: model entropy vs exact posterior entropy")
    ax.legend(fontsize=8)
    return _save(fig, out / "figures" / f"calibration_{_slug(task)}.png")


def length_generalisation_figure(records: list[RunRecord], task: str, out: Path) -> Path | None:
    """Per-position entropy error at the training length and each longer evaluation, one panel per architecture."""
    runs = _first_seed([r for r in records if r.task == task and r.arch not in ("oracle",)])
    runs = {a: r for a, r in runs.items() if len(r.evals) > 1}
    if not runs:
        return None
    fig, axes = subplots(1, len(runs), figsize=(4 * len(runs), 3.5), sharey=True, squeeze=False)
    for ax, (arch, r) in zip(axes[0], runs.items(), strict=True):
        for name, ev in r.evals.items():
            ys = ev.get("per_position", {}).get("entropy_abs_err_bits")
            if ys:
                label = "train length" if name == "default" else _label(name)
                ax.plot(range(1, len(ys) + 1), ys, label=label)
        ax.set_title(_label(arch))
        ax.set_xlabel("scored position")
        if ax.get_legend_handles_labels()[0]:  # a run without per-position curves draws nothing to label
            ax.legend(fontsize=7)
    axes[0][0].set_ylabel("|H_model - H_Bayes| (bits)")
    fig.suptitle(f"{_label(task)}: length generalisation")
    return _save(fig, out / "figures" / f"length_generalisation_{_slug(task)}.png")


def training_curves_figure(records: list[RunRecord], out: Path) -> Path | None:
    """Held-out headline metric against training step, one panel per task."""
    by_task: dict[str, list[RunRecord]] = defaultdict(list)
    for r in records:
        if r.eval_curve:
            by_task[r.task].append(r)
    if not by_task:
        return None
    fig, axes = subplots(1, len(by_task), figsize=(4 * len(by_task), 3.5), squeeze=False)
    for ax, (task, runs) in zip(axes[0], sorted(by_task.items()), strict=True):
        labelled: set[str] = set()  # one legend entry per architecture, however many runs (seeds, configs) it has
        for r in sorted(runs, key=lambda r: (r.arch, r.seed)):
            xs, ys = zip(*r.eval_curve, strict=True)
            ax.plot(xs, ys, color=arch_color(r.arch), label=None if r.arch in labelled else _label(r.arch))
            labelled.add(r.arch)
        ax.set_title(_label(task))
        ax.set_xlabel("step")
        accuracy = headline_metric(task) == "accuracy"
        if not accuracy:
            ax.set_yscale("log")
        ax.set_ylabel("accuracy" if accuracy else "entropy error (bits)")
        ax.legend(fontsize=7)
    return _save(fig, out / "figures" / "training_curves.png")
