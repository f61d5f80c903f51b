"""Table 1's cells from run records: runs grouped into configurations, each configuration's seeds pooled into one cell
value, the status mark of a run that is not its config's finished run, the wind tunnel its runs trained on, and the
order of rows and columns.

Cells are configurations: runs that differ in anything but the seed are separate cells, labelled by the keys that
differ; a run that is not its config's run (unfinished, extended, config.json edited: `collect.RunState`) is a cell
of its own, labelled so, and every cell, row and run whose record is not "finished" carries `STATUS_MARK` and its
status. Each cell's mark is `marks.verdict` on its seeds pooled by `seed_pool.pool` (entropy error and KL both, at the
conservative end of the across-seed interval; the belief horizon for the HMM); see `marks.rule_text`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from windtunnel import models, tasks
from windtunnel.evaluation import marks, seed_pool
from windtunnel.evaluation.metric_specs import METRICS, headline_metric
from windtunnel.report.collect import RunRecord
from windtunnel.runs.resume import STATUSES
from windtunnel.suites.settings import paper_setting, values

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


def build_tunnel(task: str, params: dict[str, Any]) -> tasks.Task[Any] | None:
    """The wind tunnel `task` at `params`, or None where this version cannot build it."""
    try:
        return tasks.make(task, **params)
    except (ValueError, KeyError, TypeError):
        return None


def tunnel_of(runs: list[RunRecord]) -> tasks.Task[Any] | None:
    """The wind tunnel of a configuration's runs at their task parameters (None where it cannot be built)."""
    return build_tunnel(runs[0].task, runs[0].params)


# --- one cell ----------------------------------------------------------------------------------------------


def cell_value(runs: list[RunRecord], metric: str, setting: str = "default") -> dict[str, Any] | None:
    """One Table 1 cell from the runs of one configuration (one per training seed): mean, seed spread, interval,
    verdict (`marks.verdict` of the seeds pooled by `seed_pool.pool`) and each seed's own; None where no run has the
    metric in `setting`."""
    scored = sorted([r for r in runs if r.metric(metric, setting) is not None], key=lambda r: r.seed)
    if not scored:
        return None
    task = tunnel_of(scored) or tasks.info(scored[0].task)
    settings = [r.evals[setting] for r in scored]
    pooled = seed_pool.pool(settings)
    verdict = marks.verdict(task, pooled)
    seed_verdicts = [marks.verdict(task, seed_pool.pool([s])) for s in settings]
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


def tunnel(task: str, records: list[RunRecord]) -> tasks.Task[Any] | None:
    """The wind tunnel `task` at the parameters its first run trained with (`tunnel_of`), or None where this version
    cannot build it (a task no longer registered, or parameters it no longer accepts)."""
    return build_tunnel(task, next((r.params for r in records if r.task == task), {}))


def task_references(task: str, records: list[RunRecord]) -> list[Any]:
    """The tunnel's own reference levels (`Task.references`), [] when it names none."""
    built = tunnel(task, records)
    return built.references() if built is not None else []


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
