"""The table of a sweep (`windtunnel.sweep`) -- `out/sweep.md`, `sweep.csv`, `sweep.json`. The names of grid values that
both the sweep's run directories and the table's settings carry are `manifest`'s (`point_name`), re-exported.

The table is picked on the validation stream, never the test stream: each run's validation numbers are the last
`"split": "eval"` line of its metrics.jsonl at its final step (the periodic evaluation of training, on the validation
stream; for a run that stopped early, `train.early_stop`, the step it stopped at). Runs that differ only in `seed` are
one *setting*; each setting gets the mean over its seeds of the validation metrics and of the test metrics, with a 95%
Student-t interval over the seeds (two or more; one seed: the run's bootstrap interval on the test stream, none on
validation). Settings are ranked by the mean validation headline metric of their task (entropy error lower is better,
accuracy higher; a tie goes to the setting whose runs ended their training sooner, on average over its seeds: an early
stop, `train.early_stop`, is a lasting ✓ reached in fewer steps), each task's settings together, and ★ marks each task's
best. A setting or run without a final validation evaluation (train.eval_every = 0, or a baseline, which does not train)
or with a NaN/inf value (validation, or the test stream's headline) is never ★, sorts last, and the table says why. The
test-stream numbers -- entropy error, KL and accuracy with their 95% intervals -- are reported beside them, never used
for the pick. Each ★ says whether it is separated from its task's runner-up (`pick`): by disjoint validation intervals
over seeds ("too few seeds to separate" under three seeds, `marks.unseparated`), never where single seeds are compared
("one seed per point: ★ not separated from the runner-up"). Intervals are never clipped to a metric's range. sweep.md
has the per-setting table first, then one row per run (its validation and test numbers, wall time, training throughput),
grouped by setting in rank order.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from statistics import median
from typing import Any

from windtunnel.evaluation import marks
from windtunnel.evaluation.metric_specs import METRICS as SPECS
from windtunnel.evaluation.metric_specs import headline_metric, pool_seeds
from windtunnel.report.collect import read_test_metrics
from windtunnel.report.document import Document, Heading, Paragraph, Table
from windtunnel.report.formatting import fmt
from windtunnel.runs.resume import EARLY_STOP
from windtunnel.store import manifest
from windtunnel.store.manifest import (  # the names of grid values, defined with the run names (re-exported here)
    SweepPoint,
    grid_text,
    key_labels,
    point_name,
    value_text,
)
from windtunnel.store.records.drivers import SweepRow, SweepSetting, SweepTableRecord, plain
from windtunnel.store.records.run_dir import read_done
from windtunnel.store.rundir import atomic_write, read_metrics

TABLE_MD, TABLE_CSV, TABLE_JSON = "sweep.md", "sweep.csv", SweepTableRecord.NAME
METRICS = ("entropy_mae_bits", "kl_bits", "accuracy")  # the table's metrics, each with its 95% interval
BEST = "★"
SEED = "seed"  # the grid key whose values repeat one setting: rows that differ only in it are one setting


# --- the table ---------------------------------------------------------------------------------------------

NO_VALIDATION = "no validation evaluation at the final step (train.eval_every = 0, or a baseline that does not train)"


def _number(value: Any) -> float | None:
    """A metrics.jsonl value as a float (NaN and inf kept: they are reported, and never ranked); None if absent."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def final_step(records: list[dict[str, Any]], steps: int) -> int:
    """The step a run's training ended at, from its metrics.jsonl `records`: `steps`, or the step it stopped early at
    (`train.early_stop`)."""
    return next((r["step"] for r in records if r.get("event") == EARLY_STOP), steps)


def final_validation(
    run_dir: Path, steps: int, records: list[dict[str, Any]] | None = None
) -> dict[str, float | None] | None:
    """The validation-stream metrics of a run's final step: the last `"split": "eval"` line of metrics.jsonl (its
    `records`, read here where not given) at step `steps`, or at the step the run stopped early at (`final_step`)
    ({metric: value}, None where that line lacks the metric), or None where the run has none (train.eval_every = 0,
    or a baseline, which does not train)."""
    records = read_metrics(run_dir) if records is None else records
    steps = final_step(records, steps)
    lines = [r for r in records if r.get("split") == "eval" and r.get("step") == steps]
    return {m: _number(lines[-1].get(m)) for m in METRICS} if lines else None


def run_row(point: SweepPoint, run_dir: Path) -> dict[str, Any]:
    """One table row from a finished run directory: grid values, its seed, the validation metrics of its final
    step ("validation": {metric: value}, what the pick reads; None where it has none), each test-stream metric
    of the default evaluation setting ("metrics": {metric: {"mean", "lo", "hi"}}, None where the task has none;
    reported, never used for the pick), wall time (done.json) and the median training throughput (tokens/s of
    metrics.jsonl's training lines; None for a baseline, which does not train)."""
    evaluation = read_test_metrics(run_dir, METRICS)  # checked: a garbled eval.json or done.json names the field
    done = read_done(run_dir)
    records = read_metrics(run_dir)  # read once: validation, the stop and the throughput all come from it
    speeds = [r["tokens_per_s"] for r in records if "split" not in r and "tokens_per_s" in r]
    steps = point.resolved.train.steps
    return {
        "run": point.name,
        "values": point.values,
        "seed": point.resolved.seed,
        "task": point.resolved.task.name,
        "validation": final_validation(run_dir, steps, records),
        "stopped_at": final_step(records, steps),
        "metrics": evaluation,
        "wall_s": done.wall_s,
        "tokens_per_s": round(median(speeds), 1) if speeds else None,
    }


def _score(item: dict[str, Any], metric: str) -> float | None:
    """The validation value an item (a row: a number; a setting: its mean) is ranked by; None if missing or not
    finite."""
    v = (item.get("validation") or {}).get(metric)
    v = v["mean"] if isinstance(v, dict) else v
    return v if v is not None and math.isfinite(v) else None


def _unranked(item: dict[str, Any], metric: str) -> str | None:
    """Why an item cannot be ★ (None if it can): no finite validation value, or a test-stream value that is NaN or
    inf (a broken final evaluation is never shown as best, whatever its validation said)."""
    if _score(item, metric) is None:
        if item.get("validation") is None:
            return NO_VALIDATION
        v = item["validation"].get(metric)
        v = v["mean"] if isinstance(v, dict) else v
        what = f"validation {SPECS[metric].short_title}"
        return f"no {what} at the final step" if v is None else f"{what} is {v}"
    test = (item.get("metrics") or {}).get(metric)
    if test is not None and not math.isfinite(test["mean"]):
        return f"test {SPECS[metric].short_title} is {test['mean']}"
    return None


def rank(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Items (runs or settings) best first by the task's headline metric on the validation stream (entropy error
    ascending, accuracy descending); a tie on it (recall's 100% at several rates) goes to the item whose training
    ended sooner (`stopped_at`: a run stopped early by `train.early_stop` reached a lasting ✓ in fewer steps), then
    to the order given; an item with no final validation evaluation or a NaN/inf value (validation, or its test-stream
    headline) sorts last and is never best ("unranked" says why). With more than one task, each task's items
    together. Marks each task's best ("best")."""
    tasks_seen = list(dict.fromkeys(r["task"] for r in items))
    headline = {t: headline_metric(t) for t in tasks_seen}
    for item in items:
        item["unranked"] = _unranked(item, headline[item["task"]])

    def key(item: dict[str, Any]) -> tuple[int, int, float, float]:
        metric = headline[item["task"]]
        v = _score(item, metric)
        if v is None or item["unranked"] is not None:
            return tasks_seen.index(item["task"]), 1, 0.0, 0.0
        stopped = item.get("stopped_at")
        return tasks_seen.index(item["task"]), 0, SPECS[metric].sort_key(v), math.inf if stopped is None else stopped

    ranked = sorted(items, key=key)
    for i, item in enumerate(ranked):
        first = i == 0 or ranked[i - 1]["task"] != item["task"]
        item["best"] = first and item["unranked"] is None
    return ranked


def _over_seeds(values: list[float]) -> dict[str, Any]:
    """The mean over seeds with its 95% Student-t interval (`metric_specs.pool_seeds`: never clipped to the metric's
    range), no interval (None ends) under two seeds or where a value is not finite (the mean then spreads NaN/inf)."""
    pooled: dict[str, Any] = dict(pool_seeds(values))
    if not all(math.isfinite(v) for v in values):
        pooled.update(lo=None, hi=None)
    return pooled


def _setting_validation(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any] | None] | None:
    """Each validation metric's mean over the seeds, with its interval over seeds (n >= 2; none for one seed);
    None where a run has no final validation evaluation."""
    if any(r["validation"] is None for r in runs):
        return None
    out: dict[str, dict[str, Any] | None] = {}
    for m in METRICS:
        values = [r["validation"][m] for r in runs]
        if any(v is None for v in values):
            out[m] = None
            continue
        out[m] = {**_over_seeds(values), "interval": "seeds" if len(values) >= 2 else None}
    return out


def _mean_stop(runs: list[dict[str, Any]]) -> float | None:
    """The mean over a setting's seeds of the step each run's training ended at (None where a row lacks it: a table
    written before `stopped_at` was)."""
    steps = [r.get("stopped_at") for r in runs]
    if not steps or any(s is None for s in steps):
        return None
    return sum(s for s in steps if s is not None) / len(steps)


def _setting_test(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any] | None]:
    """Each test metric's mean over the seeds with its 95% interval: Student-t over the seeds (n >= 2), or the one
    run's own bootstrap interval."""
    out: dict[str, dict[str, Any] | None] = {}
    for m in METRICS:
        cells = [r["metrics"][m] for r in runs]
        if any(c is None for c in cells):
            out[m] = None
        elif len(cells) == 1:
            out[m] = {**cells[0], "interval": "bootstrap"}
        else:
            values = [c["mean"] for c in cells]
            out[m] = {**_over_seeds(values), "interval": "seeds"}
    return out


def pick(best: dict[str, Any], runner_up: dict[str, Any], metric: str) -> dict[str, Any]:
    """Whether a ★ setting is separated from its task's runner-up on the validation stream: {"runner_up" (its
    setting), "separated", "text"}. Separated only where both have an interval over seeds (two seeds or more) and
    the intervals are disjoint; where either is one seed, single seeds are compared and nothing is separated ("one
    seed per point: ★ not separated from the runner-up"); an overlap over fewer than three seeds is "too few seeds
    to separate" (`marks.unseparated`)."""
    a, b = best["validation"][metric], runner_up["validation"][metric]
    who = f"the runner-up {runner_up['setting']}"
    scores = f"validation {fmt(a['mean'], metric)} vs {fmt(b['mean'], metric)}"
    single = [s["setting"] for s in (best, runner_up) if s["n_seeds"] < 2]
    ends = (a.get("lo"), a.get("hi"), b.get("lo"), b.get("hi"))
    separated = False
    if single:
        lead = "one seed per point" if len(single) == 2 else f"one seed at {single[0]}"
        text = f"{lead}: {BEST} not separated from {who} ({scores}: single seeds compared, no interval over seeds)"
    elif any(v is None for v in ends):
        text = f"{BEST} not separated from {who} ({scores}: no interval over seeds)"
    else:
        spec = SPECS[metric]  # disjoint, the best on the better side
        separated = spec.better(float(spec.worst_end(a)), float(spec.best_end(b)))
        if separated:
            text = f"{BEST} separated from {who} ({scores}: intervals over seeds disjoint)"
        else:
            n = min(best["n_seeds"], runner_up["n_seeds"])
            text = f"{BEST}: {marks.unseparated(who, n, 'seeds')} ({scores}: intervals over seeds overlap)"
    ours, theirs = best.get("stopped_at"), runner_up.get("stopped_at")
    if a["mean"] == b["mean"] and ours is not None and theirs is not None and ours < theirs:
        text += f"; tied on validation: {BEST} ended its training sooner (step {ours:,.0f} against {theirs:,.0f})"
    return {"runner_up": runner_up["setting"], "separated": separated, "text": text}


def _picks(ranked: list[dict[str, Any]]) -> None:
    """Sets "pick" on every setting (`rank`ed): `pick` on each task's ★ against the next ranked setting of its task,
    None elsewhere (and on a ★ without a runner-up)."""
    for i, s in enumerate(ranked):
        runner_up = next((r for r in ranked[i + 1 :] if r["task"] == s["task"] and r["unranked"] is None), None)
        s["pick"] = pick(s, runner_up, headline_metric(s["task"])) if s["best"] and runner_up else None


def settings(rows: list[dict[str, Any]], keys: list[str]) -> list[dict[str, Any]]:
    """The rows grouped into settings -- their grid values minus `seed` -- in grid order, each with its runs,
    seeds, the validation metrics' means over the seeds (what the pick reads) and the test metrics' means, with
    their intervals. Sets each row's "setting" to its setting's name."""
    labels = key_labels(keys)
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        values = {k: v for k, v in r["values"].items() if k != SEED}
        groups.setdefault(json.dumps([r["task"], plain(values)]), []).append(r)
    taken: set[str] = set()
    out = []
    for runs in groups.values():
        values = {k: v for k, v in runs[0]["values"].items() if k != SEED}
        name = point_name(values, labels, taken) if values else "base"
        for r in runs:
            r["setting"] = name
        out.append(
            {
                "setting": name,
                "values": values,
                "task": runs[0]["task"],
                "runs": [r["run"] for r in runs],
                "seeds": [r["seed"] for r in runs],
                "n_seeds": len(runs),
                "validation": _setting_validation(runs),
                "stopped_at": _mean_stop(runs),
                "metrics": _setting_test(runs),
            }
        )
    return out


def write_table(
    out: Path,
    points: list[SweepPoint],
    record: dict[str, Any],
    meta: dict[str, Any],
    machine: dict[str, Any],
) -> dict[str, Any]:
    """sweep.json (`SweepTableRecord`), sweep.csv and sweep.md in `out`: one setting per grid combination of
    everything but `seed` ("settings", best first by the mean validation headline metric, ★ on each task's best), one
    row per finished point ("rows", grouped by setting in that order; a run's "best" says it is a run of a ★ setting);
    a point not finished is listed under "missing". `record`: the sweep (its base, config, overrides and grid);
    `meta`: the call's executor, jobs, threads, command (and its note), the runs it trained and skipped, its wall
    time; `machine`: where it ran (`machine.machine_description`). Returns what sweep.json holds."""
    done = [p for p in points if manifest.is_finished(out / "runs" / p.name)]
    rows = [run_row(p, out / "runs" / p.name) for p in done]
    ranked = rank(settings(rows, list(record["grid"])))
    _picks(ranked)
    headline = {t: headline_metric(t) for t in dict.fromkeys(r["task"] for r in rows)}
    by_setting = {(s["task"], s["setting"]): s for s in ranked}
    for r in rows:
        r["unranked"] = _unranked(r, headline[r["task"]])
        r["best"] = by_setting[(r["task"], r["setting"])]["best"]
    order = {(s["task"], s["setting"]): i for i, s in enumerate(ranked)}
    rows.sort(key=lambda r: order[(r["task"], r["setting"])])  # stable: a setting's seeds in grid order
    table = SweepTableRecord.model_validate(
        plain(
            {
                **{k: record[k] for k in ("base", "config", "overrides", "grid")},
                **meta,
                **machine,
                "headline": headline,
                "settings": ranked,
                "rows": rows,
                "missing": [p.name for p in points if not manifest.is_finished(out / "runs" / p.name)],
            }
        )
    )
    table.write(out)
    atomic_write(out / TABLE_CSV, _csv(rows, list(record["grid"])))
    atomic_write(out / TABLE_MD, _markdown(table, out))
    return table.to_json()


def _csv(rows: list[dict[str, Any]], keys: list[str]) -> str:
    """One line per run: grid values, the final validation metrics (validation_*), the test metrics with their
    intervals (entropy_mae_bits, entropy_mae_bits_lo, ...), wall time, tokens/s, run, setting, best (a run of a
    ★ setting)."""
    header = [
        *keys,
        *(f"validation_{m}" for m in METRICS),
        *(f"{m}{s}" for m in METRICS for s in ("", "_lo", "_hi")),
        *("wall_s", "tokens_per_s", "run", "setting", "best"),
    ]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for r in rows:
        cells = [value_text(r["values"][k]) for k in keys]
        cells += [_repr((r["validation"] or {}).get(m)) for m in METRICS]
        for m in METRICS:
            v = r["metrics"][m]
            cells += [repr(v[s]) for s in ("mean", "lo", "hi")] if v else ["", "", ""]
        cells += [_repr(r[k]) for k in ("wall_s", "tokens_per_s")]
        writer.writerow([*cells, r["run"], r["setting"], "1" if r["best"] else ""])
    return buf.getvalue()


def _repr(value: Any) -> str:
    return "" if value is None else repr(value)


def _markdown(table: SweepTableRecord, out: Path) -> str:
    """sweep.md: what was swept and how it is ranked, the settings best first with the pick, then every run."""
    keys = list(table.grid)
    setting_keys = [k for k in keys if k != SEED]
    base = table.config or "a config dict"
    if table.overrides:
        base += " with " + ", ".join(f"{k}={value_text(v)}" for k, v in table.overrides.items())
    doc = Document(f"Sweep of {base} over {' × '.join(grid_text(table.grid))}")
    doc.add(Paragraph(f"Command: `{table.command}`"))
    if table.command_note:
        doc.add(Paragraph(table.command_note))
    headline = ", ".join(f"{t}: {SPECS[m].short_title}" for t, m in table.headline.items())
    metrics = set(table.headline.values())
    val_title = f"validation {SPECS[next(iter(metrics))].short_title}" if len(metrics) == 1 else "validation headline"
    doc.add(
        Paragraph(
            f"{len(table.settings)} settings ({', '.join(setting_keys) or 'the base config'}), "
            f"{len(table.rows)} runs. Settings are ranked by the mean over their seeds of the headline metric "
            f"({headline}) on the validation stream, at each run's final step, a tie going to the setting whose "
            f"training ended sooner (an early stop); {BEST} marks the best setting"
            f"{' of each task' if len(table.headline) > 1 else ''}. A setting or run with no final validation "
            "evaluation, or a NaN/inf one (or a NaN/inf test-stream headline), is never "
            f"{BEST} and comes last. Test-stream numbers are reported only, never used for the pick. Intervals are "
            "95%: over seeds (Student t, never clipped to the metric's range) where a setting has two or more, else "
            "the run's bootstrap interval over its test sequences (a single validation value has none). "
            f"Executor {table.executor}, "
            f"{table.threads} thread(s) per run, {table.machine}, device {table.device}; "
            f"{_wall_text(table)}."
        )
    )
    test = [f"test {SPECS[m].short_title} [95% CI]" for m in METRICS]
    header = ["", *setting_keys, "seeds", f"{val_title} [95% CI]", *test, "runs", "not ranked"]
    doc.add(Heading("Settings, best first"))
    doc.add(Table(header, [_setting_cells(table, s, setting_keys) for s in table.settings]))
    picks = [(s.task, s.pick["text"]) for s in table.settings if s.pick]
    if picks:
        many = len(table.headline) > 1
        doc.add(Paragraph("The pick: " + "; ".join((f"{t}: " if many else "") + text for t, text in picks) + "."))
    header = ["", *keys, val_title, *test, "wall (s)", "tokens/s", "run", "not ranked"]
    doc.add(Heading(f"Runs, by setting ({BEST}: a run of the best setting)"))
    doc.add(Table(header, [_run_cells(table, r, keys) for r in table.rows]))
    if table.missing:
        doc.add(Paragraph(f"Not finished: {', '.join(table.missing)}."))
    return doc.markdown(out)


def _interval_cell(v: dict[str, Any] | None, metric: str) -> str:
    """A mean with its 95% interval where it has one ("" where there is no value)."""
    if v is None:
        return ""
    if v.get("lo") is None or v.get("hi") is None:
        return fmt(v["mean"], metric)
    return f"{fmt(v['mean'], metric)} [{fmt(v['lo'], metric)}, {fmt(v['hi'], metric)}]"


def _setting_cells(table: SweepTableRecord, s: SweepSetting, keys: list[str]) -> list[str]:
    """sweep.md's row of a setting: ★, its grid values, seeds, validation and test metrics, runs, why not ranked."""
    metric = table.headline[s.task]
    return [
        BEST if s.best else "",
        *(value_text(s.values[k]) for k in keys),
        str(s.n_seeds),
        _interval_cell((s.validation or {}).get(metric), metric),
        *(_interval_cell(s.metrics[m], m) for m in METRICS),
        ", ".join(s.runs),
        s.unranked or "",
    ]


def _run_cells(table: SweepTableRecord, r: SweepRow, keys: list[str]) -> list[str]:
    """sweep.md's row of a run: ★ (a run of the best setting), grid values, final validation value, test metrics,
    walls, throughput, its name and why it is not ranked."""
    metric = table.headline[r.task]
    validation = (r.validation or {}).get(metric)
    return [
        BEST if r.best else "",
        *(value_text(r.values[k]) for k in keys),
        "" if validation is None else fmt(validation, metric),
        *(_interval_cell(r.metrics[m], m) for m in METRICS),
        "" if r.wall_s is None else f"{r.wall_s:.1f}",
        "" if r.tokens_per_s is None else f"{r.tokens_per_s:,.0f}",
        r.run,
        r.unranked or "",
    ]


def _wall_text(table: SweepTableRecord) -> str:
    """This call's wall time, how many runs it trained (a re-run of a finished sweep trains none: its wall time is
    not the sweep's) and the runs' own training walls summed."""
    runs = sum(r.wall_s or 0 for r in table.rows)
    return (
        f"{table.total_wall_s:.0f} s in this call, {len(table.trained)} of {len(table.rows)} runs trained by it; "
        f"the runs' own walls sum to {runs:.0f} s"
    )


__all__ = [
    "BEST",
    "METRICS",
    "NO_VALIDATION",
    "SEED",
    "TABLE_CSV",
    "TABLE_JSON",
    "TABLE_MD",
    "SweepPoint",
    "final_validation",
    "grid_text",
    "key_labels",
    "plain",
    "point_name",
    "rank",
    "run_row",
    "settings",
    "value_text",
    "write_table",
]
