"""Table 1 (architecture x primitive), the memorisation table and the report's other tables (reference levels, capacity,
approximations, time to Bayes, the at-a-glance grid and each tunnel's details), built from run records.

Its cells (configurations, their seeds pooled) come from `report.table_cells`.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from typing import Any

from windtunnel import models, tasks
from windtunnel.evaluation import crossings, marks
from windtunnel.evaluation.metric_specs import METRICS, headline_metric
from windtunnel.report.collect import RunRecord
from windtunnel.report.document import Cell, slug
from windtunnel.report.formatting import fmt, horizon_text, interval_text
from windtunnel.report.table_cells import (
    STATUS_MARK,
    arch_row,
    at_paper_params,
    cell_value,
    columns,
    configurations,
    params_key,
    runs_tag,
    status_tag,
    task_labels,
    task_order,
    task_references,
    tunnel,
    tunnel_of,
)
from windtunnel.report.time_to_verdict import cell_time_to_verdict
from windtunnel.suites.settings import paper_result

_interval = interval_text


def _cell_text(c: dict[str, Any], metric: str) -> str:
    text = f"{marks.MARK[c['level']]} {_interval(c, metric)}{status_tag(c['statuses'])}"
    if metric != "kl_bits" and c.get("kl_bits"):
        text += f" · KL {_interval(c['kl_bits'], 'kl_bits')}"
    if c["seeds"] >= 2:
        return (
            text + f" · seeds {fmt(c['seed_min'], metric)}–{fmt(c['seed_max'], metric)} · "
            f"{c['seeds_exact']}/{c['seeds']} seeds ✓"
        )
    return text  # one seed: no seed count (Table 1's legend says what its interval is)


def primitives_table(records: list[RunRecord]) -> tuple[list[str], list[list[str]], dict[str, Any]]:
    """Rows = architectures (+ oracle, uniform), one per configuration where an architecture's runs of a task differ
    in more than the seed; columns = the wind tunnels in `records` (plus, for a task with approximate posteriors,
    its closest-posterior and belief-horizon column); returns (header, rows, data)."""
    configs = configurations(records)
    archs = sorted({a for a, _ in configs}, key=lambda a: (arch_row(a), a))
    row_keys = [
        (a, label) for a in archs for label in dict.fromkeys(lb for (x, _), v in configs.items() if x == a for lb in v)
    ]
    cols = columns(records)
    cells: dict[tuple[str, str, str], dict[str, Any] | None] = {}
    for arch, label in row_keys:
        for task, metric, _ in cols:
            runs = configs.get((arch, task), {}).get(label)
            cells[(arch, label, task)] = cell_value(runs, metric) if runs else None
    with_approx = {task for (_, _, task), c in cells.items() if c is not None and "closest" in c}
    header = ["Architecture"]
    for task, _, title in cols:
        header.append(title)
        if task in with_approx:
            header.append(f"{tasks.info(task).title}: KL-nearest reference · belief horizon")
    header += ["Exact (✓) / approximate (◐)"]
    rows: list[list[str]] = []
    data: dict[str, Any] = {}
    for arch, label in row_keys:
        name = f"{arch} ({label})" if label else arch
        row, counts, tested = [name], dict.fromkeys(marks.LEVELS, 0), 0
        for task, metric, _ in cols:
            cell = cells[(arch, label, task)]
            runs = configs.get((arch, task), {}).get(label) or []
            paper = paper_result(arch, task) if runs and at_paper_params(task, runs[0].params) else None
            paper_txt = f" (paper {fmt(paper.value, metric)})" if paper is not None else ""
            if cell is None:
                row.append("—")
                if task in with_approx:
                    row.append("—")
                continue
            tested += 1
            counts[cell["level"]] += 1
            ttv = cell_time_to_verdict(runs)
            data.setdefault(name, {})[task] = {
                **cell,
                "metric": metric,
                "config": label,
                "paper": paper.value if paper else None,
                "paper_source": paper.source if paper else None,
                "time_to_verdict": ttv,
            }
            timed = f" · {ttv['text']}" if ttv["curves"] else ""  # else one note under the table (`untimed_note`)
            row.append(_cell_text(cell, metric) + paper_txt + timed)
            if task in with_approx:
                closest = cell.get("closest_text") or "—"
                row.append(f"{closest} · {horizon_text(cell)}")
        row.append(
            f"{counts['exact']}/{tested} ✓, {counts['approximate']}/{tested} ◐"
            + (f", {counts['invalid']}/{tested} ⚠" if counts["invalid"] else "")
        )
        rows.append(row)
    return header, rows, data


def reference_levels(records: list[RunRecord]) -> list[str]:
    """Derived reference levels per task (never the paper's numbers): what ✓ certifies there (`marks.certifies`, with
    the tunnel's transport demand where it has one), the uniform predictor's score (the context-blind floor) and each
    tunnel's own levels (`Task.references`, e.g. chance among stored values)."""
    out = []
    for task in task_order({r.task for r in records}):
        metric = headline_metric(task)
        built = tunnel(task, records)
        if built is not None:
            th, demand = marks.thresholds(built), built.transport_demand
            depth = demand.window - 1 if demand is not None else 0
            out.append(
                f"{task}: ✓ certifies {marks.certifies(th, metric, depth)}"
                + (f" (transport demand {demand.text()})" if demand is not None else "")
            )
        uniform = next((r.metric(metric) for r in records if r.task == task and r.arch == "uniform"), None)
        if uniform is not None:
            out.append(f"{task}: uniform predictor (context-blind) {fmt(uniform['mean'], metric)}")
        for ref in task_references(task, records):
            value = f" {fmt(ref.value, metric)}" if ref.value is not None else ""
            out.append(f"{task}: {ref.label}{value}" + (f" ({ref.note})" if ref.note else ""))
    return out


def below_floor(data: dict[str, Any], records: list[RunRecord]) -> list[str]:
    """Table 1 cells on the wrong side of a tunnel's failure floor (a `Reference` with floor=True, e.g. chance among
    recall's stored values): such a model failed to optimise; its number says nothing about the architecture."""
    out = []
    for task in task_order({r.task for r in records}):
        metric = headline_metric(task)
        for ref in task_references(task, records):
            if not ref.floor or ref.value is None:
                continue
            for arch, cells in data.items():
                c = cells.get(task)
                if c is None or models.info(arch).context_blind:
                    continue
                if METRICS[metric].better(ref.value, c["mean"]):
                    sign = "<" if METRICS[metric].higher_is_better else ">"
                    out.append(
                        f"{task} / {arch} ({fmt(c['mean'], metric)} {sign} {ref.label} {fmt(ref.value, metric)})"
                    )
    return out


def capacity_table(records: list[RunRecord], task: str, param: str) -> tuple[list[str], list[list[str]]] | None:
    """A capacity curve: per architecture configuration, the headline metric (mean over seeds) and its mark at every
    evaluated value of `param` (the training value and each eval override that changes it), and the largest value
    at which the architecture is exact and approximate (`marks.verdict` of the seeds there). None when no run of
    `task` was evaluated at more than one value."""
    metric = headline_metric(task)
    curves: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for (arch, t), variants in configurations(records).items():
        if t != task or arch == "oracle":
            continue
        for label, runs in variants.items():
            name = f"{arch} ({label})" if label else arch
            for setting in runs[0].evals:
                value = (runs[0].evals[setting].get("task_params") or {}).get(param)
                c = cell_value(runs, metric, setting)
                if value is not None and c is not None:
                    curves[name][int(value)] = c
    points = sorted({v for c in curves.values() for v in c})
    if len(points) < 2:
        return None
    header = ["Architecture", *(f"{param} = {v}" for v in points), "largest exact", "largest approximate"]
    rows = []
    for name in sorted(curves, key=lambda n: (arch_row(n.split(" ")[0]), n)):
        cells = curves[name]
        best = {
            lv: max(
                (v for v, c in cells.items() if marks.LEVELS.index(c["level"]) <= marks.LEVELS.index(lv)), default=None
            )
            for lv in ("exact", "approximate")
        }
        rows.append(
            [
                name,
                *(
                    f"{marks.MARK[cells[v]['level']]} {fmt(cells[v]['mean'], metric)}{status_tag(cells[v]['statuses'])}"
                    if v in cells
                    else "—"
                    for v in points
                ),
                *(str(best[lv]) if best[lv] is not None else "none" for lv in ("exact", "approximate")),
            ]
        )
    return header, rows


def disagreements(data: dict[str, Any]) -> list[str]:
    """Cells of Table 1 (`primitives_table`'s data) whose level differs from the level the paper's number reaches by
    its headline metric alone (the paper reports no KL, so its own level is an upper bound)."""
    out = []
    for arch, cells in data.items():
        for task, c in cells.items():
            if c["paper"] is None:
                continue
            theirs = marks.level_of_value(c["metric"], c["paper"])
            if theirs != c["level"]:
                out.append(
                    f"{arch} on {task}: {fmt(c['mean'], c['metric'])} is {c['level']} here; the paper's "
                    f"{fmt(c['paper'], c['metric'])} is {theirs} by its headline alone"
                )
    return out


def memorisation_verdict(log10_hypotheses: float, seen: int) -> str:
    """The fraction of a finite hypothesis space that `seen` training sequences could have covered, as 10^x
    (x < 0), or "memorisation possible" once training saw at least as many sequences as there are hypotheses."""
    if not seen:
        return "no training"
    exponent = math.log10(seen) - log10_hypotheses
    return "memorisation possible" if exponent >= 0 else f"seen fraction 10^{exponent:.1f}"


def memorisation_table(records: list[RunRecord]) -> list[list[str]]:
    """Per task configuration (task parameters, labelled by `task_labels`): hypotheses in its space against the most
    sequences any run of it saw in training."""
    by_params: dict[tuple[str, str], list[RunRecord]] = defaultdict(list)
    for r in records:
        by_params[params_key(r)].append(r)
    labels, _ = task_labels(records)
    rows = []
    for (task, params), runs in sorted(by_params.items()):
        seen = max((r.state().sequences_seen for r in runs), default=0)  # what trained, not what the config asks
        built = tunnel_of(runs)
        h = float(built.spec.log10_hypotheses) if built is not None else None
        if h is None:
            h_txt, verdict = "?", "unknown"
        elif math.isinf(h):
            h_txt, verdict = "continuous (infinite)", "cannot be memorised"
        else:
            h_txt = f"10^{h:.1f}"
            verdict = memorisation_verdict(h, seen)
        rows.append([labels[(task, params)], h_txt, f"{seen:,}", verdict])
    return rows


def approximation_order(name: str) -> tuple[int, float, str]:
    """Sort key of an approximation's name: 'context-blind' first, then the windows 'last w obs' by w as a number
    (1, 2, ..., 10, not 1, 10, 11, 2), then any other name."""
    if name == marks.CONTEXT_BLIND:
        return (0, 0.0, name)
    m = re.fullmatch(r"last (\d+) obs", name)
    return (1, float(m.group(1)), name) if m else (2, 0.0, name)


def approximations_tables(records: list[RunRecord]) -> list[tuple[str, list[str], list[list[str]]]]:
    """Which approximate posterior each model computes, one table per task whose eval.json has "approximations" (the
    HMMs' context-blind reference and window filters), as (task, header, rows): per run, the KL-nearest reference
    (paired intervals), the belief horizon, and per approximation (in `approximation_order`) the model's gain over
    it, KL(exact ‖ approximation) − KL(exact ‖ model) in bits with its interval (> 0: the model is measurably closer
    to the exact posterior than the approximation is); a last row gives each approximation's own entropy error and
    KL against the exact posterior."""
    out = []
    for task in task_order({r.task for r in records if r.default.get("approximations")}):
        runs = [r for r in records if r.task == task and r.default.get("approximations")]
        names = sorted({n for r in runs for n in r.default["approximations"]}, key=approximation_order)
        header = ["Task", "Run", "KL-nearest reference", "Belief horizon", *(f"gain over '{n}'" for n in names)]
        rows = []
        for r in sorted(runs, key=lambda r: (arch_row(r.arch), r.arch, r.seed, r.path.name)):
            c = cell_value([r], headline_metric(r.task)) or {}
            approx = r.default["approximations"]
            rows.append(
                [
                    r.task,
                    r.path.name + runs_tag([r]),
                    c.get("closest_text") or "—",
                    horizon_text(c),
                    *(
                        _interval(marks.finite(approx[n].get("gain_bits")), "kl_bits") if n in approx else "—"
                        for n in names
                    ),
                ]
            )
        ref = runs[0].default["approximations"]
        rows.append(
            [
                task,
                "(the approximation's own entropy error / KL from exact)",
                "",
                "",
                *(
                    f"{ref[n]['entropy_mae_bits']:.4f} / {ref[n].get('kl_bits', math.nan):.4f}" if n in ref else "—"
                    for n in names
                ),
            ]
        )
        out.append((task, header, rows))
    return out


def time_to_bayes_table(records: list[RunRecord]) -> tuple[list[str], list[list[str]]] | None:
    """Training seconds until each cell's validation headline metric first reached each precision mark (0.1 / 0.05 /
    0.02 / 0.01 bits; recall 90 / 99 / 100%; HMM also the first evaluation on the exact filter): median over seeds
    [range] @ median step, and how many seeds got there. Cells are Table 1's (`configurations`: runs that differ in
    anything but the seed are rows of their own, labelled by the keys that differ). Runs without training-time
    evaluations are left out."""
    cells: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    tags: dict[tuple[str, str, str], list[RunRecord]] = defaultdict(list)
    for (arch, task), by_config in configurations(records).items():
        for label, runs in by_config.items():
            for r in sorted(runs, key=lambda r: r.seed):
                evals = r.validation
                if evals:
                    cells[(task, arch, label)].append(crossings.crossings(evals, headline_metric(task)))
                    tags[(task, arch, label)].append(r)
    if not cells:
        return None
    columns_ = [*(f"{m:g}" for m in crossings.PRECISION_MARKS["entropy_mae_bits"]), crossings.EXACT_FILTER]
    titles = [crossings.mark_header(m, "entropy_mae_bits") for m in columns_]
    header = ["Task", "Arch", "Seeds", *titles, "Accuracy marks"]
    rows = []
    for (task, arch, label), per_seed in sorted(cells.items(), key=lambda kv: (kv[0][0], arch_row(kv[0][1]))):
        summary = crossings.summarize_marks(per_seed)
        name = (f"{arch} ({label})" if label else arch) + runs_tag(tags[(task, arch, label)])
        if headline_metric(task) == "accuracy":
            acc = "; ".join(f"{crossings.mark_header(m, 'accuracy')}: {_mark_text(v)}" for m, v in summary.items())
            rows.append([task, name, str(len(per_seed)), *("" for _ in columns_), acc])
        else:
            rows.append(
                [
                    task,
                    name,
                    str(len(per_seed)),
                    *(_mark_text(summary[m]) if m in summary else "n/a" for m in columns_),
                    "",
                ]
            )
    return header, rows


def _mark_text(m: dict[str, Any]) -> str:
    """`crossings.format_mark`, less the seed count of a one-seed cell that did not get there ("—", not "— (0/1)")."""
    return "—" if m["of"] == 1 and not m["reached"] else crossings.format_mark(m)


# --- at a glance, and each cell in detail ---------------------------------------------------------------------------


def cell_anchor(task: str, name: str) -> str:
    """The anchor of a Table 1 cell's row in its tunnel's details (`tunnel_details`), which the at-a-glance grid
    links to."""
    return "cell-" + slug(f"{task}-{name}")


def glance_table(records: list[RunRecord], data: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """The at-a-glance grid: a row per Table 1 row (`primitives_table`'s data), a column per tunnel; each cell its mark
    and headline mean (`Cell`, coloured by its level), a link to its row in the tunnel's details."""
    cols = columns(records)
    header = ["Architecture", *(f"{tasks.info(task).title}: {METRICS[metric].short_title}" for task, metric, _ in cols)]
    rows: list[list[Any]] = []
    for name, cells in data.items():
        row: list[Any] = [name]
        for task, metric, _ in cols:
            c = cells.get(task)
            if c is None:
                row.append("—")
                continue
            text = f"{marks.MARK[c['level']]} {fmt(c['mean'], metric)}{' ' + STATUS_MARK if c['statuses'] else ''}"
            row.append(Cell(text, href="#" + cell_anchor(task, name), level=c["level"]))
        rows.append(row)
    return header, rows


def tunnel_details(task: str, metric: str, data: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """One tunnel's cells in detail, a row each (the anchor `cell_anchor` on its first column): the mark, the headline
    and KL intervals (ends beyond the metric's range labelled, `interval_text`), the seeds and how many are ✓ on
    their own, and why the cell is not one level higher (`marks.shortfall`)."""
    title = METRICS[metric].title
    header = [
        "Architecture",
        "Mark",
        title[:1].upper() + title[1:],
        "KL(exact ‖ model) (bits)",
        "Seeds (✓ on their own)",
        "Why not one level higher",
    ]
    rows: list[list[Any]] = []
    for name, cells in data.items():
        c = cells.get(task)
        if c is None:
            continue
        v = c.get("verdict") or {}
        rows.append(
            [
                Cell(name, anchor=cell_anchor(task, name)),
                f"{marks.MARK[c['level']]} {c['level']}{status_tag(c['statuses'])}",
                interval_text(c, metric),
                interval_text(c.get("kl_bits"), "kl_bits") if metric != "kl_bits" else "—",
                f"{c['seeds']} ({c['seeds_exact']} ✓)",
                marks.shortfall(c["level"], v.get("reasons") or ()) or "—",
            ]
        )
    return header, rows
