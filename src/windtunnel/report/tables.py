"""Table 1 (architecture x primitive) and the memorisation table, built from run records."""

from __future__ import annotations

import math
from collections import defaultdict
from statistics import mean
from typing import Any

from windtunnel.report.collect import RunRecord

# Thresholds for the pass/fail mark of each primitive (stated in the report).
MAX_ENTROPY_ERROR_BITS = 0.05
MIN_RECALL_ACCURACY = 0.95

COLUMNS = [  # (task, metric, column title, higher is better)
    ("bijection", "entropy_mae_bits", "Bijection entropy error (bits)", False),
    ("hmm", "entropy_mae_bits", "HMM entropy error (bits)", False),
    ("recall", "accuracy", "Recall accuracy", True),
    ("regression", "entropy_mae_bits", "Regression entropy error (bits)", False),
]
ROW_ORDER = ["transformer", "mamba", "lstm", "mlp", "mlp-pointwise", "oracle", "uniform"]

# The paper's numbers (v3 table, paper-spec.md §5.2; MLP HMM from [BEDH]; per-position MLP control and the
# uniform floor from the authors' follow-up / arithmetic). None where the paper reports nothing.
PAPER: dict[str, dict[str, float | None]] = {
    "transformer": {"bijection": 0.007, "hmm": 0.049, "recall": 1.0, "regression": None},
    "mamba": {"bijection": 0.010, "hmm": 0.024, "recall": 0.978, "regression": None},
    "lstm": {"bijection": 0.009, "hmm": 0.411, "recall": 0.005, "regression": None},
    "mlp": {"bijection": 1.85, "hmm": 0.40, "recall": None, "regression": None},
    "mlp-pointwise": {"bijection": 1.107, "hmm": None, "recall": None, "regression": None},
    "oracle": {"bijection": 0.0, "hmm": 0.0, "recall": 1.0, "regression": 0.0},
    "uniform": {"bijection": 1.107, "hmm": None, "recall": 1 / 256, "regression": None},
}


def passes(task: str, value: float) -> bool:
    """The primitive's pass mark: entropy error <= 0.05 bits, or recall accuracy >= 95%."""
    return value >= MIN_RECALL_ACCURACY if task == "recall" else value <= MAX_ENTROPY_ERROR_BITS


def _fmt(value: float, metric: str) -> str:
    if metric == "accuracy":
        return f"{100 * value:.1f}%"
    if value != 0 and abs(value) < 1e-3:
        return f"{value:.1e}"
    return f"{value:.3f}"


def cell_value(runs: list[RunRecord], metric: str) -> dict[str, Any] | None:
    """Mean over seeds of a metric, with the widest 95% interval among the seeds (one seed: its own CI)."""
    vals = [r.metric(metric) for r in runs]
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return {"mean": mean(v["mean"] for v in vals), "lo": min(v["lo"] for v in vals),
            "hi": max(v["hi"] for v in vals), "seeds": len(vals)}


def primitives_table(records: list[RunRecord]) -> tuple[list[str], list[list[str]], dict[str, Any]]:
    """Rows = architectures (+ oracle, uniform); columns = the four wind tunnels; returns (header, rows, data)."""
    by_cell: dict[tuple[str, str], list[RunRecord]] = defaultdict(list)
    for r in records:
        by_cell[(r.arch, r.task)].append(r)
    archs = [a for a in ROW_ORDER if any(k[0] == a for k in by_cell)]
    archs += sorted({a for a, _ in by_cell} - set(archs))
    header = ["Architecture"] + [c[2] for c in COLUMNS] + ["Primitives passed"]
    rows, data = [], {}
    for arch in archs:
        row, passed, tested = [arch], 0, 0
        for task, metric, _, _ in COLUMNS:
            cell = cell_value(by_cell.get((arch, task), []), metric)
            paper = PAPER.get(arch, {}).get(task)
            paper_txt = f" (paper {_fmt(paper, metric)})" if paper is not None else ""
            if cell is None:
                row.append("—" + paper_txt)
                continue
            ok = passes(task, cell["mean"])
            tested += 1
            passed += ok
            data.setdefault(arch, {})[task] = {**cell, "metric": metric, "pass": ok, "paper": paper}
            row.append(f"{'✓' if ok else '✗'} {_fmt(cell['mean'], metric)} "
                       f"[{_fmt(cell['lo'], metric)}, {_fmt(cell['hi'], metric)}]{paper_txt}")
        row.append(f"{passed}/{tested}")
        rows.append(row)
    return header, rows, data


def disagreements(data: dict[str, Any]) -> list[str]:
    """Cells of Table 1 (`primitives_table`'s data) that fall on the other side of the pass mark from the paper's."""
    mark = {True: "passes", False: "fails"}
    out = []
    for arch, cells in data.items():
        for task, c in cells.items():
            if c["paper"] is not None and passes(task, c["paper"]) != c["pass"]:
                out.append(f"{arch} on {task}: {_fmt(c['mean'], c['metric'])} here {mark[c['pass']]}; the paper's "
                           f"{_fmt(c['paper'], c['metric'])} {mark[not c['pass']]}")
    return out


def memorisation_table(records: list[RunRecord], log10_hypotheses: dict[str, float]) -> list[list[str]]:
    """Per task: hypotheses in the space against the most sequences any run of it saw in training."""
    rows = []
    for task in sorted({r.task for r in records}):
        seen = max((r.steps * r.batch_size for r in records if r.task == task), default=0)
        h = log10_hypotheses.get(task)
        if h is None:
            h_txt, verdict = "?", "unknown"
        elif math.isinf(h):
            h_txt, verdict = "continuous (infinite)", "cannot be memorised"
        else:
            h_txt = f"10^{h:.1f}"
            ratio = h - math.log10(seen) if seen else math.inf
            verdict = f"seen fraction 10^-{ratio:.1f}" if seen else "no training"
        rows.append([task, h_txt, f"{seen:,}", verdict])
    return rows


def approximations_table(records: list[RunRecord]) -> tuple[list[str], list[list[str]]] | None:
    """Which approximate posterior each model computes (tasks whose eval.json has "approximations", e.g. HMM window
    filters): per run, KL(approximation || model) for each approximation and KL(exact || model), the closest marked;
    a last row per task gives each approximation's own entropy error against the exact posterior."""
    with_approx = [r for r in records if r.default.get("approximations")]
    if not with_approx:
        return None
    names = list(with_approx[0].default["approximations"])
    header = ["Task", "Architecture", *(f"KL from '{n}'" for n in names), "KL from exact", "Closest"]
    rows = []
    for r in sorted(with_approx, key=lambda r: (r.task, r.arch, r.seed)):
        approx = r.default["approximations"]
        kl = {n: approx[n]["kl_from_model_bits"] for n in names if n in approx}
        exact = r.metric("kl_bits")
        if exact is not None:
            kl["exact"] = exact["mean"]
        closest = min(kl, key=kl.get) if kl else "—"
        rows.append([r.task, r.arch, *(f"{kl[n]:.4f}" if n in kl else "—" for n in names),
                     f"{kl['exact']:.4f}" if "exact" in kl else "—", closest])
    for task in sorted({r.task for r in with_approx}):
        ref = next(r for r in with_approx if r.task == task).default["approximations"]
        rows.append([task, "(the approximation's own entropy error)",
                     *(f"{ref[n]['entropy_mae_bits']:.4f}" if n in ref else "—" for n in names), "0", ""])
    return header, rows
