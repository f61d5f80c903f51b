"""The time-to-Bayes table and plot (`windtunnel.time_to_bayes` writes them): from a results dict -- what
`time_to_bayes.json` holds -- the Markdown table of training seconds to each precision mark, and the log-log plot of
the headline error against training seconds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from windtunnel.evaluation.crossings import EXACT_FILTER, PRECISION_MARKS, format_mark, mark_header
from windtunnel.evaluation.metric_specs import METRICS
from windtunnel.plotting import save, subplots
from windtunnel.store.records.drivers import MACHINE_KEYS  # what must match for seconds to compare (re-exported here)


def markdown(data: dict[str, Any]) -> str:
    """One table per headline metric: training seconds [seed range] @ median step to each mark, and the final test
    value (mean, min–max over seeds). Cells of different machines or settings (`allow_mixed`) are tagged [m1], [m2]
    after the machine lines they ran on."""
    setups: dict[str, dict[str, Any]] = {}
    for c in data["cells"]:
        m = c.get("machine", data["machine"])
        setups.setdefault(json.dumps([m.get(k) for k in MACHINE_KEYS]), m)
    tag = {key: (f" [m{i}]" if len(setups) > 1 else "") for i, key in enumerate(setups, 1)}
    if len(setups) == 1:
        lines = [f"Machine: {_machine_line(data['machine'])}", ""]
    else:
        lines = [
            "Cells ran on different machines or settings (combined with --allow-mixed); seconds compare only "
            "between cells of one:",
            "",
        ]
        lines += [f"- [m{i}] {_machine_line(m)}" for i, m in enumerate(setups.values(), 1)] + [""]
    for metric in dict.fromkeys(c["metric"] for c in data["cells"]):
        cells = [c for c in data["cells"] if c["metric"] == metric]
        present = {m for c in cells for m in c["marks"]}  # in PRECISION_MARKS order (JSON files store keys sorted)
        marks = [m for m in (*(f"{v:g}" for v in PRECISION_MARKS[metric]), EXACT_FILTER) if m in present]
        head = [mark_header(m, metric) for m in marks]
        lines += [
            f"**{metric}** (seconds of training to first reach each mark, median [range] @ step, seeds)",
            "",
            "| cell | seeds | dtype | " + " | ".join(head) + " | final (test) |",
            "|---|---|---|" + "---|" * len(marks) + "---|",
        ]
        for c in cells:
            t = c["test"]
            final = (
                "—"
                if t is None
                else (f"{t['mean']:.4f}" + ("" if len(c["seeds"]) == 1 else f" ({t['min']:.4f}–{t['max']:.4f})"))
            )
            hits = [(format_mark(c["marks"][m]) if m in c["marks"] else "n/a") for m in marks]
            m = c.get("machine", data["machine"])
            label = c["label"] + tag[json.dumps([m.get(k) for k in MACHINE_KEYS])]
            lines.append(
                f"| {label} | {len(c['seeds'])} | {c['seeds'][0].get('dtype', '?')} | "
                + " | ".join(hits)
                + f" | {final} |"
            )
        lines.append("")
    return "\n".join(lines)


def _machine_line(m: dict[str, Any]) -> str:
    return (
        f"{m.get('machine')}; torch {m.get('torch')}; {m.get('threads_per_run')} thread(s) per run, "
        f"{m.get('jobs')} run(s) at once."
    )


def plot(data: dict[str, Any], path: str | Path) -> None:
    """Log-log plot of the headline error (1 - accuracy for recall) against training seconds, one panel per task,
    one colour per cell, one line per seed; the marks as dotted lines."""
    tasks = list(dict.fromkeys(c["cell"]["task"] for c in data["cells"]))
    fig, axes = subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4.2), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        cells = [c for c in data["cells"] if c["cell"]["task"] == task]
        metric = cells[0]["metric"]
        for i, c in enumerate(cells):
            for j, s in enumerate(c["seeds"]):
                pts = [
                    (e["train_s"], METRICS[metric].error(e[metric]))
                    for e in s["curve"]
                    if e.get(metric) is not None and e["train_s"] > 0
                ]
                pts = [(x, max(y, 1e-4)) for x, y in pts]
                if pts:
                    ax.plot(
                        *zip(*pts, strict=True), color=f"C{i}", lw=1.2, alpha=0.9, label=c["label"] if j == 0 else None
                    )
        for mark in PRECISION_MARKS[metric]:
            y = METRICS[metric].error(mark)
            if y > 0:
                ax.axhline(y, color="grey", ls=":", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("training seconds")
        ax.set_ylabel(f"1 - {metric}" if METRICS[metric].higher_is_better else f"{metric} (validation)")
        ax.set_title(task)
        ax.legend(fontsize=6)
    fig.tight_layout()
    save(fig, path, dpi=120)


__all__ = ["MACHINE_KEYS", "markdown", "plot"]
