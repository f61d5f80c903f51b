"""Table 1 (architecture x primitive) and the memorisation table, built from run records.

Cells are configurations: runs that differ in anything but the seed are separate cells, labelled by the keys that
differ; a run that is not its config's run (unfinished, extended, config.json edited: `collect.RunState`) is a cell
of its own, labelled so, and every cell, row and run whose record is not "finished" carries `STATUS_MARK` and its
status. Each cell's mark is `marks.verdict` on its seeds pooled by `marks.pool` (entropy error and KL both, at the
conservative end of the across-seed interval; the belief horizon for the HMM); see `marks.rule_text`.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from windtunnel import marks, models, tasks
from windtunnel.metric_specs import METRICS, headline_metric
from windtunnel.report.collect import RunRecord, validation_evals
from windtunnel.report.document import Cell, slug
from windtunnel.resume import STATUSES
from windtunnel.suites.settings import paper_result, paper_setting, values

STATUS_MARK = "†"  # beside a cell or run whose weights are not (only) the finished run of its config


def status_tag(statuses: Iterable[str]) -> str:
    """The mark of a cell or run from the statuses of its runs (`RunRecord.state`): " † unfinished, resumed"; "" when
    every run is finished."""
    found = set(statuses)
    marked = [s for s in STATUSES if s in found and s != "finished"]
    return f" {STATUS_MARK} {', '.join(marked)}" if marked else ""


def runs_tag(runs: Iterable[RunRecord], setting: str = "default") -> str:
    """`status_tag` of the evaluation `setting` of `runs`."""
    return status_tag(r.state(setting).status for r in runs)


def marked_runs(records: list[RunRecord]) -> list[str]:
    """One line per run whose default evaluation is not its config's finished run: its name and why (the footnote
    under Table 1)."""
    out = []
    for r in sorted(records, key=lambda r: (r.task, r.arch, r.seed, r.path.name)):
        st = r.state()
        if st.marked:
            out.append(f"{r.path.name}: {'; '.join(st.notes) or st.status}")
    return out


def arch_row(arch: str) -> int:
    """Where an architecture's rows go in every table: `models.info(arch).row` (an architecture the registry does not
    know comes after the built-ins)."""
    return models.info(arch).row


def task_order(names: set[str] | list[str]) -> list[str]:
    """Tasks in registration order (the built-in tunnels first), then any no longer registered, by name."""
    registered = [t for t in tasks.names() if t in names]
    return registered + sorted(set(names) - set(registered))


def columns(records: list[RunRecord]) -> list[tuple[str, str, str]]:
    """Table 1's columns, one per task in `records`: (task, headline metric, column title)."""
    out = []
    for task in task_order({r.task for r in records}):
        metric = headline_metric(task)
        out.append((task, metric, f"{tasks.info(task).title} {METRICS[metric].title}"))
    return out


# --- cells are configurations ------------------------------------------------------------------------------


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted keys -> JSON text of each leaf."""
    if isinstance(d, dict) and d:
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): json.dumps(d, sort_keys=True)}


def config_key(r: RunRecord) -> str:
    """The run's full config minus its seed: runs with equal keys are seeds of one cell."""
    return json.dumps({k: v for k, v in r.config.items() if k != "seed"}, sort_keys=True)


def _config_labels(keys: Iterable[str]) -> dict[str, str]:
    """Each config key (`config_key`) -> "" when there is one, else the dotted keys whose values differ among them
    ("task.params.K=10")."""
    keys = list(dict.fromkeys(keys))
    if len(keys) == 1:
        return {keys[0]: ""}
    flats = {key: _flat(json.loads(key)) for key in keys}
    paths = sorted({k for f in flats.values() for k in f})
    differ = [k for k in paths if len({f.get(k) for f in flats.values()}) > 1]
    return {key: ", ".join(f"{k}={flats[key].get(k, '—')}" for k in differ) for key in keys}


def configurations(records: list[RunRecord]) -> dict[tuple[str, str], dict[str, list[RunRecord]]]:
    """(arch, task) -> {label: runs of one configuration}; the label is "" when (arch, task) has one configuration,
    else the dotted keys whose values differ among its configurations ("task.params.K=10"); runs that are not their
    config's run (`RunState.variant`: unfinished, extended, edited) are a configuration of their own, labelled so."""
    groups: dict[tuple[str, str], dict[tuple[str, str], list[RunRecord]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        groups[(r.arch, r.task)][(config_key(r), r.state().variant)].append(r)
    out: dict[tuple[str, str], dict[str, list[RunRecord]]] = {}
    for cell, by_config in groups.items():
        labels = _config_labels(key for key, _ in by_config)
        ordered = sorted(by_config.items(), key=lambda kv: kv[0][1] != "")  # the config's own runs first
        out[cell] = {", ".join(x for x in (labels[key], v) if x): runs for (key, v), runs in ordered}
    return out


def mixed_configurations(records: list[RunRecord]) -> list[str]:
    """A warning line per (arch, task) whose runs are of more than one configuration (config.json less the seed)."""
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in records:
        groups[(r.arch, r.task)].append(config_key(r))
    return [
        f"{arch} / {task}: {len(labels)} configurations ({'; '.join(labels.values())})"
        for (arch, task), keys in groups.items()
        if len(labels := _config_labels(keys)) > 1
    ]


def full_params(task: str, params: dict[str, Any]) -> dict[str, Any] | None:
    """A task's parameters with its defaults filled in, or None where this version cannot build it."""
    built = build_tunnel(task, params)
    return None if built is None else dict(built.params.model_dump(mode="json"))


def at_paper_params(task: str, params: dict[str, Any]) -> bool:
    """Whether `params` are the paper's task parameters (so a paper number or hypothesis count may stand beside)."""
    try:
        paper = values(paper_setting(task, "*"), "task.")
    except KeyError:
        return False
    mine, theirs = full_params(task, params), full_params(task, paper)
    return mine is not None and mine == theirs


def build_tunnel(task: str, params: dict[str, Any]) -> Any:
    """The wind tunnel `task` at `params`, or None where this version cannot build it."""
    try:
        return tasks.make(task, **params)
    except (ValueError, KeyError, TypeError):
        return None


def tunnel_of(runs: list[RunRecord]) -> Any:
    """The wind tunnel of a configuration's runs at their task parameters (None where it cannot be built)."""
    return build_tunnel(runs[0].task, runs[0].params)


# --- one cell ----------------------------------------------------------------------------------------------


def cell_value(runs: list[RunRecord], metric: str, setting: str = "default") -> dict[str, Any] | None:
    """One Table 1 cell from the runs of one configuration (one per training seed): mean, seed spread, interval,
    verdict (`marks.verdict` of the seeds pooled by `marks.pool`) and each seed's own; None where no run has the
    metric in `setting`."""
    scored = sorted([r for r in runs if r.metric(metric, setting) is not None], key=lambda r: r.seed)
    if not scored:
        return None
    task = tunnel_of(scored) or tasks.info(scored[0].task)
    settings = [r.evals[setting] for r in scored]
    pooled = marks.pool(settings)
    verdict = marks.verdict(task, pooled)
    seed_verdicts = [marks.verdict(task, marks.pool([s])) for s in settings]
    vals = [float(s["metrics"][metric]["mean"]) for s in settings]
    m = pooled["metrics"][metric]
    return {
        "mean": m["mean"],
        "lo": m["lo"],
        "hi": m["hi"],
        "interval": pooled["interval"],
        "seeds": len(vals),
        "seed_values": vals,
        "seed_min": min(vals),
        "seed_max": max(vals),
        "kl_bits": pooled["metrics"].get("kl_bits"),
        "entropy_mae_bits": pooled["metrics"].get("entropy_mae_bits"),
        "level": verdict.level,
        "verdict": verdict.to_dict(),
        "seed_levels": [v.level for v in seed_verdicts],
        "statuses": sorted({r.state(setting).status for r in scored} - {"finished"}, key=STATUSES.index),
        "seeds_exact": sum(v.level == "exact" for v in seed_verdicts),
        **({"closest": verdict.closest, "closest_text": verdict.closest_text} if verdict.closest else {}),
        **({"horizon": verdict.horizon, "horizon_max": verdict.horizon_max} if verdict.horizon_max is not None else {}),
    }


# --- time to verdict ----------------------------------------------------------------------------------------


def run_time_to_verdict(r: RunRecord) -> dict[str, Any]:
    """One run's time to verdict from its periodic validation evaluations (metrics.jsonl, `collect.validation_evals`):
    {"seed", "run", "steps" (trained), "evaluations" (with a recorded verdict; 0: no validation curve), "approx" and
    "exact": the first evaluation whose verdict is ◐ or better / ✓ ({"step", "train_s"}, `marks.verdict_crossings`)
    or None, "stopped_early" (the step, or None)}."""
    evals = validation_evals(r.history)
    judged = [e for e in evals if e.get("verdict") is not None]
    st = r.state()
    return {
        "seed": r.seed,
        "run": r.path.name,
        "steps": st.steps_trained,
        "evaluations": len(judged),
        "unjudged": len(evals) - len(judged),  # logged before validation verdicts were (no conservative verdict)
        **marks.verdict_crossings(judged),
        "stopped_early": st.stopped_early,
    }


def cell_time_to_verdict(runs: list[RunRecord]) -> dict[str, Any]:
    """A Table 1 cell's time to verdict over its seeds (`run_time_to_verdict`): per mark ("approx": ◐ or better,
    "exact": ✓) how many of the seeds with a validation curve got there ("reached" of "of") and, over those that
    did, the median step and the median [min, max] training seconds (`marks.summarize_marks`), None where no seed
    has a curve; "steps": the most steps any seed with a curve trained (the N of "not within N steps"); "curves":
    how many seeds have one; "seeds": each seed's own; "text": the cell's words (`time_to_verdict_text`)."""
    seeds = [run_time_to_verdict(r) for r in sorted(runs, key=lambda r: (r.seed, r.path.name))]
    curves = [s for s in seeds if s["evaluations"]]
    summary = marks.summarize_marks([{m: s[m] for m in marks.VERDICT_MARKS} for s in curves]) if curves else {}
    out: dict[str, Any] = {
        **{m: summary.get(m) for m in marks.VERDICT_MARKS},
        "steps": max((s["steps"] for s in curves), default=None),
        "curves": len(curves),
        "seeds": seeds,
    }
    out["text"] = time_to_verdict_text(out)
    return out


def _seconds(s: float) -> str:
    return f"{s:,.0f} s" if s >= 10 else f"{s:.2g} s"


def time_to_verdict_text(t: dict[str, Any]) -> str:
    """A cell's time to verdict in words: "✓ at 1,200 steps (95 s), 3/3 seeds", "◐ at 400 steps (31 s); ✓ not within
    3,000 steps", "neither ◐ nor ✓ within 3,000 steps"; "no validation curve" where no seed has periodic evaluations
    with a verdict ("not trained" for baselines; "validation curve without verdicts" for runs whose periodic
    evaluations predate the logged verdict: their point metrics cannot give the conservative one). Steps and seconds:
    medians over the seeds that got there."""
    seeds = t["seeds"]
    if not t["curves"]:
        if seeds and all(s["steps"] == 0 for s in seeds):
            return "not trained"
        if any(s.get("unjudged") for s in seeds):
            return "validation curve without verdicts (logged before they were)"
        return "no validation curve"
    approx, exact = t["approx"], t["exact"]
    if not approx["reached"]:
        parts = [f"neither ◐ nor ✓ within {t['steps']:,} steps"]
    else:
        same = exact["reached"] == approx["reached"] and exact.get("median_step") == approx["median_step"]
        parts = []
        for sym, m in (("◐", approx), ("✓", exact)):
            if sym == "◐" and same:
                continue  # ✓ where ◐ first was: ◐ adds nothing
            if not m["reached"]:
                parts.append(f"{sym} not within {t['steps']:,} steps")
                continue
            at = f"{sym} at {m['median_step']:,.0f} steps ({_seconds(m['median_s'])})"
            parts.append(at + (f", {m['reached']}/{m['of']} seeds" if m["of"] > 1 else ""))
    if t["curves"] < len(seeds):
        parts.append(f"{len(seeds) - t['curves']} of {len(seeds)} seeds without a validation curve")
    return "; ".join(parts)


def untimed_note(data: dict[str, dict[str, Any]]) -> str:
    """One line under Table 1 for the trained cells that show no time to verdict, and why (their words from
    `time_to_verdict_text`), instead of the same words in every such cell; "" where every trained cell has one."""
    why = [
        t["text"]
        for row in data.values()
        for cell in row.values()
        if (t := cell.get("time_to_verdict")) and not t["curves"] and t["text"] != "not trained"
    ]
    if not why:
        return ""
    counts = ", ".join(f"{w} ({n} cell{'s' if n > 1 else ''})" for w, n in Counter(why).most_common())
    return f"Time to verdict is not shown in {len(why)} trained cell{'s' if len(why) > 1 else ''}: {counts}."


def fmt(value: float, metric: str) -> str:
    """A metric value as printed in tables (`MetricSpec.fmt`): percent for accuracy, bits to 3 decimals (or 1e-4
    style) otherwise."""
    return METRICS[metric].fmt(value)


# Beside an interval end past the range the metric's values can take (`RANGES`): the interval is printed as the seeds
# give it, never clipped (`marks.seed_stats`), and labelled so (`prose.BEYOND_RANGE`).
BEYOND_RANGE = "‡"
RANGES = {
    "accuracy": (0.0, 1.0),
    "entropy_mae_bits": (0.0, math.inf),
    "entropy_mae_curve_bits": (0.0, math.inf),
    "kl_bits": (0.0, math.inf),
}


def beyond_range(value: float, metric: str) -> bool:
    """Whether `value` lies outside the values `metric` can take (below 0 bits, an accuracy past 100%)."""
    lo, hi = RANGES.get(metric, (-math.inf, math.inf))
    return value < lo or value > hi


def interval_text(m: dict[str, float] | None, metric: str) -> str:
    """ "mean [lo, hi]", an end beyond the metric's range labelled `BEYOND_RANGE` ("78.8% [32.0%, 125.6%‡]")."""
    if not m:
        return "—"
    ends = (fmt(m[k], metric) + (BEYOND_RANGE if beyond_range(m[k], metric) else "") for k in ("lo", "hi"))
    return f"{fmt(m['mean'], metric)} [{', '.join(ends)}]"


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


def horizon_text(c: dict[str, Any]) -> str:
    """The belief horizon of a cell in words: "3 of 8 obs", "8 of 8 obs (every window)", "none"."""
    if c.get("horizon_max") is None:
        return "—"
    h, w = c.get("horizon"), c["horizon_max"]
    if h is None:
        return f"none (of {w} obs)"
    return f"{h} of {w} obs" + (" (every window)" if h == w else "")


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


def tunnel(task: str, records: list[RunRecord]) -> Any:
    """The wind tunnel `task` at the parameters its first run trained with (`tunnel_of`), or None where this version
    cannot build it (a task no longer registered, or parameters it no longer accepts)."""
    return build_tunnel(task, next((r.params for r in records if r.task == task), {}))


def task_references(task: str, records: list[RunRecord]) -> list[Any]:
    """The tunnel's own reference levels (`WindTunnel.references`), [] when it names none."""
    found = getattr(tunnel(task, records), "references", None)
    return list(found()) if callable(found) else []


def reference_levels(records: list[RunRecord]) -> list[str]:
    """Derived reference levels per task (never the paper's numbers): what ✓ certifies there (`marks.certifies`, with
    the tunnel's transport demand where it has one), the uniform predictor's score (the context-blind floor) and each
    tunnel's own levels (`WindTunnel.references`, e.g. chance among stored values)."""
    out = []
    for task in task_order({r.task for r in records}):
        metric = headline_metric(task)
        built = tunnel(task, records)
        if built is not None:
            th, demand = marks.thresholds(built), getattr(built, "transport_demand", None)
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


def params_key(r: RunRecord) -> tuple[str, str]:
    """A run's task configuration: (task, its stored parameters as sorted JSON)."""
    return r.task, json.dumps(r.params, sort_keys=True)


def task_labels(records: list[RunRecord]) -> tuple[dict[tuple[str, str], str], str]:
    """Short row labels for task configurations (`params_key`): the task alone where it has one, else the task and
    the parameters that differ among its configurations, defaults filled in ("bijection (L=4, V=4)"); and a footnote
    giving each label's full parameters (empty when no configuration has any)."""
    by_task: dict[str, list[str]] = defaultdict(list)
    for r in records:
        task, params = params_key(r)
        if params not in by_task[task]:
            by_task[task].append(params)
    labels: dict[tuple[str, str], str] = {}
    notes: dict[str, str] = {}  # label -> its parameters (equal full parameters share a label)
    for task in task_order(set(by_task)):
        full = {p: full_params(task, json.loads(p)) or json.loads(p) for p in by_task[task]}
        differ = _config_labels(json.dumps(f, sort_keys=True) for f in full.values())
        for p, f in full.items():
            label = differ[json.dumps(f, sort_keys=True)]
            labels[(task, p)] = f"{task} ({label})" if label else task
            if f:
                notes[labels[(task, p)]] = json.dumps(f, sort_keys=True)
    text = "; ".join(f"{label}: {params}" for label, params in notes.items())
    return labels, f"Task parameters (defaults filled in): {text}." if notes else ""


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
                    cells[(task, arch, label)].append(marks.crossings(evals, headline_metric(task)))
                    tags[(task, arch, label)].append(r)
    if not cells:
        return None
    columns_ = [*(f"{m:g}" for m in marks.PRECISION_MARKS["entropy_mae_bits"]), marks.EXACT_FILTER]
    header = ["Task", "Arch", "Seeds", *(marks.mark_header(m, "entropy_mae_bits") for m in columns_), "Accuracy marks"]
    rows = []
    for (task, arch, label), per_seed in sorted(cells.items(), key=lambda kv: (kv[0][0], arch_row(kv[0][1]))):
        summary = marks.summarize_marks(per_seed)
        name = (f"{arch} ({label})" if label else arch) + runs_tag(tags[(task, arch, label)])
        if headline_metric(task) == "accuracy":
            acc = "; ".join(f"{marks.mark_header(m, 'accuracy')}: {_mark_text(v)}" for m, v in summary.items())
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
    """`marks.format_mark`, less the seed count of a one-seed cell that did not get there ("—", not "— (0/1)")."""
    return "—" if m["of"] == 1 and not m["reached"] else marks.format_mark(m)


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
