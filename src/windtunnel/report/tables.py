"""Table 1 (architecture x primitive) and the memorisation table, built from run records.

Marks cannot flatter: three levels, each read from the conservative end of the across-seed interval --
    ✓ exact        entropy error <= 0.01 bits (the authors' own PASS), or accuracy >= 99%; and, for a task with
                   approximate posteriors (the HMM's window filters), the model is closer (KL) to the exact
                   posterior than to every approximation, so no approximation can earn it
    ◐ approximate  entropy error <= 0.1 bits (the authors' PARTIAL), or accuracy >= 90%
    ✗ otherwise.
With >= 2 seeds the interval is the 95% Student-t interval of the seed means (training-seed spread); with one seed
it is that run's bootstrap interval over test sequences (evaluation noise only), and the cell says so.
"""

from __future__ import annotations

import math
from collections import defaultdict
from statistics import mean, stdev
from typing import Any

from scipy import stats

from windtunnel import tasks
from windtunnel.report.collect import RunRecord
from windtunnel.suites.settings import paper_result

EXACT_BITS, APPROX_BITS = 0.01, 0.1
EXACT_ACCURACY, APPROX_ACCURACY = 0.99, 0.90
LEVELS = ("exact", "approximate", "fail")
MARK = {"exact": "✓", "approximate": "◐", "fail": "✗"}

CONTEXT_BLIND = ("uniform", "oracle", "mlp-pointwise")  # predictors that cannot (or need not) read the stored pairs
ROW_ORDER = ["transformer", "mamba", "lstm", "mlp", "mlp-pointwise", "oracle", "uniform"]
METRIC_WORDS = {"entropy_mae_bits": "entropy error (bits)", "accuracy": "accuracy"}


def headline_metric(task: str) -> str:
    """The metric a task's column reports: the tunnel's own `headline_metric` (tasks.info)."""
    return tasks.info(task).headline_metric


def task_order(names: set[str] | list[str]) -> list[str]:
    """Tasks in registration order (the built-in tunnels first), then any no longer registered, by name."""
    registered = [t for t in tasks.names() if t in names]
    return registered + sorted(set(names) - set(registered))


def columns(records: list[RunRecord]) -> list[tuple[str, str, str]]:
    """Table 1's columns, one per task in `records`: (task, headline metric, column title)."""
    out = []
    for task in task_order({r.task for r in records}):
        meta = tasks.info(task)
        out.append((task, meta.headline_metric, f"{meta.title} {METRIC_WORDS[meta.headline_metric]}"))
    return out


def level(metric: str, worst: float) -> str:
    """ "exact", "approximate" or "fail" for a value at the conservative end of its interval."""
    if metric == "accuracy":
        return "exact" if worst >= EXACT_ACCURACY else "approximate" if worst >= APPROX_ACCURACY else "fail"
    return "exact" if worst <= EXACT_BITS else "approximate" if worst <= APPROX_BITS else "fail"


def mark_rule() -> str:
    """The marks in words, for the report."""
    return (
        f"✓ exact = entropy error ≤ {EXACT_BITS} bits (the authors' PASS) or accuracy ≥ "
        f"{100 * EXACT_ACCURACY:.0f}%, and, where the task has approximate posteriors (HMM window filters), "
        "closer in KL to the exact posterior than to every one of them; ◐ approximate = ≤ "
        f"{APPROX_BITS} bits (the authors' PARTIAL) or ≥ {100 * APPROX_ACCURACY:.0f}%; ✗ otherwise. Each mark "
        "is read from the conservative end of the cell's interval: the 95% Student-t interval over training "
        "seeds (≥ 2 seeds), or the run's bootstrap interval over test sequences (1 seed: evaluation noise only)"
    )


def closest_approximation(records: list[RunRecord]) -> dict[str, Any] | None:
    """Mean over runs of KL(approximation ‖ model) per approximation and KL(exact ‖ model); the smallest names the
    posterior the model computes ("exact" or an approximation's name). None for tasks without approximations."""
    kls: dict[str, list[float]] = defaultdict(list)
    for r in records:
        approx = r.default.get("approximations")
        exact = r.metric("kl_bits")
        if not isinstance(approx, dict) or not approx or exact is None:
            return None
        for name, a in approx.items():
            kls[name].append(float(a["kl_from_model_bits"]))
        kls["exact"].append(float(exact["mean"]))
    if not kls:
        return None
    kl = {name: mean(v) for name, v in kls.items()}
    return {"closest": min(kl, key=kl.__getitem__), "kl_bits": kl}


def _level_given_closest(metric: str, worst: float, approx: dict[str, Any] | None) -> str:
    """`level`, capped at "approximate" when the model is closer to an approximation than to the exact posterior."""
    lv = level(metric, worst)
    return "approximate" if lv == "exact" and approx is not None and approx["closest"] != "exact" else lv


def seed_interval(values: list[float], level_: float = 0.95) -> tuple[float, float]:
    """Two-sided Student-t interval of the mean of >= 2 seed values."""
    m, n = mean(values), len(values)
    half = stats.t.ppf(0.5 + level_ / 2, n - 1) * stdev(values) / math.sqrt(n)
    return m - half, m + half


def cell_value(runs: list[RunRecord], metric: str) -> dict[str, Any] | None:
    """One Table 1 cell from its runs (one per training seed): mean, seed spread, interval, per-seed and cell
    levels, closest approximation; None where no run has the metric."""
    metrics = [(r, r.metric(metric)) for r in runs]
    scored = sorted([(r, m) for r, m in metrics if m is not None], key=lambda x: x[0].seed)
    if not scored:
        return None
    higher = metric == "accuracy"
    vals = [m["mean"] for _, m in scored]
    if len(vals) >= 2:
        lo, hi = seed_interval(vals)
        lo, hi = max(lo, 0.0), min(hi, 1.0) if higher else hi  # accuracies live in [0, 1], errors are >= 0
        interval = "seeds"
    else:
        lo, hi = scored[0][1]["lo"], scored[0][1]["hi"]
        interval = "bootstrap"
    approx = closest_approximation([r for r, _ in scored])
    cell_level = _level_given_closest(metric, lo if higher else hi, approx)
    seed_levels = [
        _level_given_closest(metric, m["lo"] if higher else m["hi"], closest_approximation([r])) for r, m in scored
    ]
    return {
        "mean": mean(vals),
        "lo": lo,
        "hi": hi,
        "interval": interval,
        "seeds": len(vals),
        "seed_values": vals,
        "seed_min": min(vals),
        "seed_max": max(vals),
        "level": cell_level,
        "seed_levels": seed_levels,
        "seeds_exact": seed_levels.count("exact"),
        **({"closest": approx["closest"], "closest_kl_bits": approx["kl_bits"]} if approx else {}),
    }


def fmt(value: float, metric: str) -> str:
    """A metric value as printed in tables: percent for accuracy, bits to 3 decimals (or 1e-4 style) otherwise."""
    if metric == "accuracy":
        return f"{100 * value:.1f}%"
    if value != 0 and abs(value) < 1e-3:
        return f"{value:.1e}"
    return f"{value:.3f}"


def _cell_text(c: dict[str, Any], metric: str) -> str:
    text = f"{MARK[c['level']]} {fmt(c['mean'], metric)} [{fmt(c['lo'], metric)}, {fmt(c['hi'], metric)}]"
    if c["seeds"] >= 2:
        return (
            text + f" · seeds {fmt(c['seed_min'], metric)}–{fmt(c['seed_max'], metric)} · "
            f"{c['seeds_exact']}/{c['seeds']} seeds ✓"
        )
    return text + " · 1 seed"


def primitives_table(records: list[RunRecord]) -> tuple[list[str], list[list[str]], dict[str, Any]]:
    """Rows = architectures (+ oracle, uniform); columns = the wind tunnels in `records`, a user's registered ones
    included (plus the closest-posterior column of each task that has approximations); returns (header, rows,
    data)."""
    by_cell: dict[tuple[str, str], list[RunRecord]] = defaultdict(list)
    for r in records:
        by_cell[(r.arch, r.task)].append(r)
    archs = [a for a in ROW_ORDER if any(k[0] == a for k in by_cell)]
    archs += sorted({a for a, _ in by_cell} - set(archs))
    cols = columns(records)
    cells = {
        (arch, task): cell_value(by_cell.get((arch, task), []), metric) for arch in archs for task, metric, _ in cols
    }
    with_approx = {task for (_, task), c in cells.items() if c is not None and "closest" in c}
    header = ["Architecture"]
    for task, _, title in cols:
        header.append(title)
        if task in with_approx:
            header.append(f"{tasks.info(task).title}: closest posterior")
    header += ["Exact (✓) / approximate (◐)"]
    rows: list[list[str]] = []
    data: dict[str, Any] = {}
    for arch in archs:
        row, counts, tested = [arch], dict.fromkeys(LEVELS, 0), 0
        for task, metric, _ in cols:
            cell = cells[(arch, task)]
            paper = paper_result(arch, task)
            paper_txt = f" (paper {fmt(paper.value, metric)})" if paper is not None else ""
            if cell is None:
                row.append("—" + paper_txt)
                if task in with_approx:
                    row.append("—")
                continue
            tested += 1
            counts[cell["level"]] += 1
            data.setdefault(arch, {})[task] = {
                **cell,
                "metric": metric,
                "paper": paper.value if paper else None,
                "paper_source": paper.source if paper else None,
            }
            row.append(_cell_text(cell, metric) + paper_txt)
            if task in with_approx:
                closest = cell.get("closest")
                row.append(f"{closest} (KL {cell['closest_kl_bits'][closest]:.3f})" if closest else "—")
        row.append(f"{counts['exact']}/{tested} ✓, {counts['approximate']}/{tested} ◐")
        rows.append(row)
    return header, rows, data


def tunnel(task: str, records: list[RunRecord]) -> Any:
    """The wind tunnel `task` at the parameters its runs trained with, or None where this version cannot build it
    (a task no longer registered, or parameters it no longer accepts)."""
    params = next((r.params for r in records if r.task == task), {})
    try:
        return tasks.make(task, **params)
    except (ValueError, KeyError, TypeError):
        return None


def task_references(task: str, records: list[RunRecord]) -> list[Any]:
    """The tunnel's own reference levels (`WindTunnel.references`), [] when it names none."""
    found = getattr(tunnel(task, records), "references", None)
    return list(found()) if callable(found) else []


def reference_levels(records: list[RunRecord]) -> list[str]:
    """Derived reference levels per task (never the paper's numbers): the uniform predictor's score (the
    context-blind floor) and each tunnel's own levels (`WindTunnel.references`, e.g. chance among stored values)."""
    out = []
    for task in task_order({r.task for r in records}):
        metric = headline_metric(task)
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
                if arch in CONTEXT_BLIND or c is None:
                    continue
                worse = c["mean"] < ref.value if metric == "accuracy" else c["mean"] > ref.value
                if worse:
                    sign = "<" if metric == "accuracy" else ">"
                    out.append(
                        f"{task} / {arch} ({fmt(c['mean'], metric)} {sign} {ref.label} {fmt(ref.value, metric)})"
                    )
    return out


def capacity_table(records: list[RunRecord], task: str, param: str) -> tuple[list[str], list[list[str]]] | None:
    """A capacity curve: per architecture, the headline metric (mean over seeds) at every evaluated value of `param`
    (the training value and each eval override that changes it), and the largest value at which the architecture is
    exact and approximate. None when no run of `task` was evaluated at more than one value."""
    metric = headline_metric(task)
    curves: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.task != task or r.arch in ("oracle",):
            continue
        for name, ev in r.evals.items():
            value = (ev.get("task_params") or {}).get(param)
            m = r.metric(metric, name)
            if value is not None and m is not None:
                curves[r.arch][int(value)].append(m["mean"])
    points = sorted({v for c in curves.values() for v in c})
    if len(points) < 2:
        return None
    header = ["Architecture", *(f"{param} = {v}" for v in points), "largest exact", "largest approximate"]
    rows = []
    for arch in [a for a in ROW_ORDER if a in curves] + sorted(set(curves) - set(ROW_ORDER)):
        means = {v: mean(vals) for v, vals in curves[arch].items()}
        best = {
            lv: max((v for v, m in means.items() if LEVELS.index(level(metric, m)) <= LEVELS.index(lv)), default=None)
            for lv in ("exact", "approximate")
        }
        rows.append(
            [
                arch,
                *(fmt(means[v], metric) if v in means else "—" for v in points),
                *(str(best[lv]) if best[lv] is not None else "none" for lv in ("exact", "approximate")),
            ]
        )
    return header, rows


def disagreements(data: dict[str, Any]) -> list[str]:
    """Cells of Table 1 (`primitives_table`'s data) whose level differs from the level of the paper's number."""
    out = []
    for arch, cells in data.items():
        for task, c in cells.items():
            if c["paper"] is None:
                continue
            theirs = level(c["metric"], c["paper"])
            if theirs != c["level"]:
                out.append(
                    f"{arch} on {task}: {fmt(c['mean'], c['metric'])} is {c['level']} here; the paper's "
                    f"{fmt(c['paper'], c['metric'])} is {theirs}"
                )
    return out


def memorisation_verdict(log10_hypotheses: float, seen: int) -> str:
    """The fraction of a finite hypothesis space that `seen` training sequences could have covered, as 10^x
    (x < 0), or "memorisation possible" once training saw at least as many sequences as there are hypotheses."""
    if not seen:
        return "no training"
    exponent = math.log10(seen) - log10_hypotheses
    return "memorisation possible" if exponent >= 0 else f"seen fraction 10^{exponent:.1f}"


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
            verdict = memorisation_verdict(h, seen)
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
    header = ["Task", "Run", *(f"KL from '{n}'" for n in names), "KL from exact", "Closest"]
    rows = []
    for r in sorted(with_approx, key=lambda r: (r.task, r.arch, r.seed)):
        found = closest_approximation([r])
        kl = found["kl_bits"] if found else {}
        rows.append(
            [
                r.task,
                r.path.name,
                *(f"{kl[n]:.4f}" if n in kl else "—" for n in names),
                f"{kl['exact']:.4f}" if "exact" in kl else "—",
                found["closest"] if found else "—",
            ]
        )
    for task in sorted({r.task for r in with_approx}):
        ref = next(r for r in with_approx if r.task == task).default["approximations"]
        rows.append(
            [
                task,
                "(the approximation's own entropy error)",
                *(f"{ref[n]['entropy_mae_bits']:.4f}" if n in ref else "—" for n in names),
                "0",
                "",
            ]
        )
    return header, rows


def time_to_bayes_table(records: list[RunRecord]) -> tuple[list[str], list[list[str]]] | None:
    """Training seconds until each cell's validation headline metric first reached each precision mark (0.1 / 0.05 /
    0.02 / 0.01 bits; recall 90 / 99 / 100%; HMM also the first evaluation on the exact filter): median over seeds
    [range] @ median step, and how many seeds got there. Runs without training-time evaluations are left out."""
    from windtunnel.time_to_bayes import MARKS, crossings, format_mark, mark_header, summarize_marks

    cells: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        evals = [h for h in r.history if h.get("split") == "eval" and "train_s" in h]
        if evals:
            cells[(r.task, r.arch)].append(crossings(evals, headline_metric(r.task)))
    if not cells:
        return None
    marks = [*(f"{m:g}" for m in MARKS["entropy_mae_bits"]), "exact filter"]
    header = ["Task", "Arch", "Seeds", *(mark_header(m, "entropy_mae_bits") for m in marks), "Accuracy marks"]
    rows = []
    order = {a: i for i, a in enumerate(ROW_ORDER)}
    for (task, arch), per_seed in sorted(cells.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 99))):
        summary = summarize_marks(per_seed)
        if headline_metric(task) == "accuracy":
            acc = "; ".join(f"{mark_header(m, 'accuracy')}: {format_mark(v)}" for m, v in summary.items())
            rows.append([task, arch, str(len(per_seed)), *("" for _ in marks), acc])
        else:
            rows.append(
                [
                    task,
                    arch,
                    str(len(per_seed)),
                    *(format_mark(summary[m]) if m in summary else "n/a" for m in marks),
                    "",
                ]
            )
    return header, rows
