"""Build the report (report.md, report.html with its figures/*.png beside it, results.json) from run directories."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from windtunnel import tasks
from windtunnel.evaluation import marks
from windtunnel.evaluation.evaluate import score_controls
from windtunnel.evaluation.metric_specs import METRICS
from windtunnel.geometry import registry as geometry_registry
from windtunnel.geometry.seeds import across_seeds, seed_text
from windtunnel.report import claims, figures, formatting, prose, table_cells, tables
from windtunnel.report.collect import RunRecord, find_runs
from windtunnel.report.document import (
    Banner,
    Bullets,
    Contents,
    Details,
    Document,
    Figure,
    Heading,
    Paragraph,
    Table,
    Verdicts,
)
from windtunnel.report.time_to_verdict import untimed_note
from windtunnel.store import rundir
from windtunnel.store.records.drivers import ReproduceRecord
from windtunnel.suites import TIER_CAVEATS


def controls_rows(records: list[RunRecord]) -> tuple[list[list[str]], list[str]]:
    """Every adversarial control and approximation of each task configuration in `records`, scored on the test
    stream as a model is (`evaluate.score_controls`, n = the largest eval size of its runs): table rows, and the names
    of any that earned ✓ or ◐ when it should not have (a control never may; an approximation never ✓)."""
    by_params: dict[tuple[str, str], list[RunRecord]] = {}
    for r in records:
        by_params.setdefault(table_cells.params_key(r), []).append(r)
    labels, _ = table_cells.task_labels(records)
    rows, flagged = [], []
    for key, runs in sorted(by_params.items()):
        task = table_cells.tunnel_of(runs)
        if task is None:
            continue
        n = max(int(r.default.get("n") or 0) for r in runs) or 1000
        metric = tables.headline_metric(runs[0].task)
        for name, scores in score_controls(task, n=n, seed=0).items():
            v = marks.verdict(task, scores)
            control = name.startswith("control:")
            if (control and v.level != "fail") or v.level == "exact":
                flagged.append(f"{labels[key]} {name} ({v.mark})")
            m = scores["metrics"]
            rows.append(
                [
                    labels[key],
                    name,
                    formatting.fmt(m["entropy_mae_bits"]["mean"], "entropy_mae_bits"),
                    formatting.fmt(m["kl_bits"]["mean"], "kl_bits"),
                    formatting.fmt(m["accuracy"]["mean"], "accuracy") if m.get("accuracy") else "—",
                    f"{v.mark} "
                    + marks.shortfall(v.level, v.reasons)
                    + (f" · closest: {v.closest_text}" if v.closest_text and metric else ""),
                ]
            )
    return rows, flagged


def _deviation_lines(meta: ReproduceRecord | None) -> list[str]:
    lines = list(meta.deviations) if meta is not None else []
    return lines or ["none recorded (runs made outside `windtunnel reproduce`; see each run's config.json)"]


def _geometry_rows(records: list[RunRecord]) -> list[list[str]]:
    """One row per probed run: the headline number of each probe, "—" where it does not apply."""
    columns = geometry_registry.columns()
    return [
        [r.task, r.arch + table_cells.runs_tag([r])] + [c.text(r.geometry) for c in columns]
        for r in sorted(records, key=lambda r: (r.task, r.arch, r.seed))
        if r.geometry
    ]


def geometry_across_seeds(records: list[RunRecord]) -> tuple[list[list[str]], list[dict[str, Any]]]:
    """Per cell (runs differing only in the seed) with probed seeds, every registered probe's quantities across seeds
    (`Probe.seed_quantities`): table rows and the JSON for results.json."""
    rows, data = [], []
    for (arch, task), by_config in sorted(
        table_cells.configurations(records).items(), key=lambda kv: (kv[0][1], kv[0][0])
    ):
        for label, runs in sorted(by_config.items()):
            probed = sorted((r for r in runs if r.geometry), key=lambda r: r.seed)
            if not probed:
                continue
            summary = across_seeds([r.geometry for r in probed if r.geometry])
            data.append({"task": task, "arch": arch, "config": label, "seeds": [r.seed for r in probed], **summary})
            cell = f"{arch} ({label})" if label else arch
            for name, q in summary.items():
                base = f"{q['baseline_label']}: {seed_text(q['baseline'])}"
                rows.append([task, cell, name, seed_text(q["trained"]), seed_text(q["init"]), base, str(len(probed))])
    return rows, data


def _table_section(doc: Document, title: str, table: tuple[list[str], list[list[str]]] | None, text: str) -> None:
    """A heading, a paragraph saying what the table shows, and the table; nothing when there is no table."""
    if table:
        doc.add(Heading(title))
        doc.add(Paragraph(text))
        doc.add(Table(*table))


def _listing(doc: Document, lead: str, items: list[str], none: str | None = None) -> None:
    """A paragraph `lead` + the items joined by "; " + "."; with no items, `lead` + `none` + ".", or nothing."""
    if items or none is not None:
        doc.add(Paragraph(lead + ("; ".join(items) if items else str(none)) + "."))


def build_report(
    paths: list[str | Path], out: str | Path, meta: ReproduceRecord | Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Read run directories under `paths`, write the report into `out`, return the results dict. `meta`: what
    reproduce recorded (`records.drivers.ReproduceRecord`; default: `out`/reproduce.json where there is one, else that
    of the one path given, a reproduce's --out reported elsewhere)."""
    out = Path(out)
    records = find_runs(paths)  # every input read and validated before anything is created
    meta = _load_meta(out, meta, paths)
    out.mkdir(parents=True, exist_ok=True)
    doc = Document(prose.TITLE)

    header, rows, data = tables.primitives_table(records)
    seed_rows, seed_geometry = geometry_across_seeds(records)
    verdicts = claims.judge_claims(records, data, seed_geometry, _added_seeds(meta))
    task_note = table_cells.task_labels(records)[1]
    _tier_caveat(doc, meta)
    doc.add(Contents())
    _verdicts_section(doc, verdicts)
    _glance_section(doc, records, data)
    _table1_section(doc, header, rows, data)
    mixed = _table1_notes(doc, records, data)
    _reference_levels(doc, records)
    _tunnels_section(doc, records, data, out)
    _figures_section(doc, records, out)
    _length_generalisation_section(doc, records)
    _capacity_sections(doc, records)
    _filters_section(doc, records)
    control_rows = _controls_section(doc, records, task_note)
    _time_to_bayes_section(doc, records)
    _geometry_section(doc, records)
    _geometry_across_seeds_section(doc, seed_rows)
    _memorisation_section(doc, records, task_note)
    _what_was_run_section(doc, records, meta)
    _deviations_section(doc, meta)

    rundir.atomic_write(out / "report.md", doc.markdown(out))
    rundir.atomic_write(out / "report.html", doc.html(out))
    results = _results(records, verdicts, data, control_rows, mixed, seed_geometry, meta)
    rundir.atomic_write(out / "results.json", json.dumps(results, indent=2, default=_json_default))
    return results


def _added_seeds(meta: ReproduceRecord | None) -> dict[str, list[int]] | None:
    """The seeds a tier's disagreement rule added to each cell: as reproduce.json says; none outside a reproduce or
    where its command asked for the seeds (--seeds); None (infer from the tier's first seeds) for a record that does
    not say."""
    if meta is None or "--seeds" in (meta.command or ""):
        return meta.added_seeds if meta is not None and meta.added_seeds is not None else {}
    return meta.added_seeds


def _load_meta(
    out: Path, meta: ReproduceRecord | Mapping[str, Any] | None, paths: list[str | Path]
) -> ReproduceRecord | None:
    """`meta` as reproduce's record (a mapping: what a reproduce.json holds, checked), or where none is given (or
    an empty one), `out`/reproduce.json's, else, with one path given, that path's: a reproduce's --out reported into
    another folder keeps its tier's notes (checked: a garbled file names its field); None for runs made outside
    `windtunnel reproduce`."""
    if isinstance(meta, ReproduceRecord):
        return meta
    if meta:
        return ReproduceRecord.parse(dict(meta), Path("meta"))
    here = ReproduceRecord.find(out)
    return ReproduceRecord.find(paths[0]) if here is None and len(paths) == 1 else here


def _verdicts_section(doc: Document, verdicts: list[dict[str, str]]) -> None:
    """Verdicts at a glance: each claim's verdict, and the rules that give it."""
    doc.add(Heading("Verdicts at a glance"))
    doc.add(Verdicts(verdicts))
    doc.add(Paragraph(claims.RULES_TEXT))


def _glance_section(doc: Document, records: list[RunRecord], data: dict[str, dict[str, Any]]) -> None:
    """At a glance: each cell's mark and headline mean, a link to its row in its tunnel's details."""
    if data:
        doc.add(Heading("At a glance: architecture × tunnel"))
        doc.add(Paragraph(prose.GLANCE))
        doc.add(Table(*tables.glance_table(records, data), css="glance"))


def _table1_section(doc: Document, header: list[str], rows: list[list[str]], data: dict[str, dict[str, Any]]) -> None:
    """Table 1, architecture × inference primitive, with what its cells are (folded away but for one sentence)."""
    doc.add(Heading("Table 1: architecture × inference primitive"))
    doc.add(Details(prose.TABLE1_SUMMARY, [Paragraph(prose.TABLE1.substitute(rule=marks.rule_text()))]))
    doc.add(Table(header, rows))
    _beyond_range_note(doc, rows)
    if untimed := untimed_note(data):
        doc.add(Paragraph(untimed))


def _beyond_range_note(doc: Document, rows: list[list[Any]]) -> None:
    """The footnote of `formatting.BEYOND_RANGE`, under a table where some interval end carries it."""
    if any(formatting.BEYOND_RANGE in str(c) for row in rows for c in row):
        doc.add(Paragraph(prose.BEYOND_RANGE.substitute(mark=formatting.BEYOND_RANGE)))


def _tunnels_section(doc: Document, records: list[RunRecord], data: dict[str, dict[str, Any]], out: Path) -> None:
    """Each tunnel's cells in detail: a forest plot of every cell against the thresholds and the context-blind floor,
    and a row per cell (the at-a-glance grid's links land there)."""
    if not data:
        return
    doc.add(Heading("Each cell against the thresholds"))
    doc.add(Paragraph(prose.TUNNELS))
    for task, metric, _ in table_cells.columns(records):
        built = table_cells.tunnel(task, records)
        header, rows = tables.tunnel_details(task, metric, data)
        if not rows:
            continue
        doc.add(Heading(tasks.info(task).title, 3, anchor=f"tunnel-{task}"))
        th = marks.thresholds(built) if built is not None else marks.Thresholds()
        metrics = [metric] + (["kl_bits"] if metric != "kl_bits" else [])
        path = figures.forest_figure(task, metrics, data, th, _floors(task, records, data), out)
        if path is not None:
            doc.add(Figure(path, prose.FOREST_CAPTION.substitute(task=task)))
        doc.add(Table(header, rows))
        _beyond_range_note(doc, rows)


def _floors(task: str, records: list[RunRecord], data: dict[str, dict[str, Any]]) -> list[figures.Floor]:
    """The reference lines of a tunnel's forest plot: the uniform predictor's cell (the context-blind floor, as under
    Reference levels) and the tunnel's own failure floors (`Task.references` with floor=True)."""
    metric = tables.headline_metric(task)
    c = data.get("uniform", {}).get(task)
    out = []
    if c is not None:
        kl = {"kl_bits": c["kl_bits"]["mean"]} if c.get("kl_bits") else {}
        out.append(figures.Floor("context-blind floor (uniform)", {metric: c["mean"], **kl}))
    out += [
        figures.Floor(ref.label, {metric: ref.value})
        for ref in table_cells.task_references(task, records)
        if ref.floor and ref.value is not None
    ]
    return out


def _table1_notes(doc: Document, records: list[RunRecord], data: dict[str, dict[str, Any]]) -> list[str]:
    """The listings under Table 1: marked runs, mixed configurations (returned, for results.json), disagreements with
    the paper and results below a tunnel's failure floor."""
    _listing(doc, prose.MARKED_RUNS_LEAD.substitute(mark=table_cells.STATUS_MARK), table_cells.marked_runs(records))
    mixed = table_cells.mixed_configurations(records)
    _listing(doc, prose.MIXED_LEAD, mixed)
    _listing(doc, prose.DISAGREEMENTS_LEAD, tables.disagreements(data), none="nowhere")
    _listing(doc, prose.BELOW_FLOOR_LEAD, tables.below_floor(data, records))
    return mixed


def _reference_levels(doc: Document, records: list[RunRecord]) -> None:
    """Reference levels and scoring of each task, last under Table 1."""
    _listing(doc, prose.REFERENCE_LEVELS_LEAD, tables.reference_levels(records))


def _figures_section(doc: Document, records: list[RunRecord], out: Path) -> None:
    """Figures: drawn into `out`/figures, each subsection's heading and text before its figures."""
    figure_sections = figures.report_figures(records, out)
    if not figure_sections:
        return
    doc.add(Heading("Figures"))
    doc.add(Paragraph(figures.FIGURES_TEXT))
    for title, text, figs in figure_sections:
        if title:
            doc.add(Heading(title, 3))
        if text:
            doc.add(Paragraph(text))
        for path, caption in figs:
            doc.add(Figure(path, caption))


def _length_generalisation_section(doc: Document, records: list[RunRecord]) -> None:
    """Length generalisation: each run evaluated at more than one length, its headline metric at each."""
    lg_rows = []
    for r in sorted(records, key=lambda r: (r.task, r.arch, r.seed)):
        if len(r.evals) > 1:
            metric = tables.headline_metric(r.task)
            cells = [
                f"{name}: {formatting.fmt(m['mean'], metric)}{table_cells.runs_tag([r], name)}"
                for name in r.evals
                if (m := r.metric(metric, name)) is not None
            ]
            lg_rows.append([r.task, r.path.name, metric, "; ".join(cells)])
    if lg_rows:
        doc.add(Heading("Length generalisation"))
        doc.add(Paragraph(prose.LENGTH_GENERALISATION))
        doc.add(Table(["Task", "Run", "Metric", "Per evaluation"], lg_rows))


def _capacity_sections(doc: Document, records: list[RunRecord]) -> None:
    """One capacity table per present tunnel that has a capacity parameter: its headline metric against it."""
    for task in table_cells.task_order({r.task for r in records}):
        built = table_cells.tunnel(task, records)
        capacity = built.capacity if built is not None else None
        if not capacity:
            continue
        param, what = capacity
        metric = METRICS[tables.headline_metric(task)].title
        _table_section(
            doc,
            prose.CAPACITY_TITLE.substitute(task=tasks.info(task).title, metric=metric, what=what),
            tables.capacity_table(records, task, param),
            prose.CAPACITY.substitute(metric=metric, what=what, param=param),
        )


def _filters_section(doc: Document, records: list[RunRecord]) -> None:
    """Which filter does each model compute: the posterior each run is closest to, and its gain over each (a table per
    task, its windows in numeric order); what the columns are, each tunnel's note once, folded away."""
    per_task = tables.approximations_tables(records)
    if not per_task:
        return
    present = table_cells.task_order({r.task for r in records})
    built = [b for b in (table_cells.tunnel(task, records) for task in present) if b is not None]
    notes = [b.approximations_note for b in built if b.approximations_note]
    doc.add(Heading("Which filter does each model compute?"))
    doc.add(Details(prose.APPROXIMATIONS_SUMMARY, [Paragraph(prose.APPROXIMATIONS + " ".join(dict.fromkeys(notes)))]))
    for task, header, rows in per_task:
        doc.add(Table(header, rows, prose.APPROXIMATIONS_CAPTION.substitute(task=task)))


def _controls_section(doc: Document, records: list[RunRecord], task_note: str) -> list[list[str]]:
    """Adversarial controls, scored and marked as a model is; returns their rows (for results.json)."""
    control_rows, flagged = controls_rows(records)
    if control_rows:
        doc.add(Heading("Adversarial controls: predictors that do not infer"))
        verdict = prose.CONTROLS_PASSED if not flagged else prose.CONTROLS_FAILED + "; ".join(flagged) + "."
        doc.add(Paragraph(prose.CONTROLS + verdict))
        header = ["Task", "Predictor", "Entropy error", "KL(exact ‖ predictor)", "Accuracy", "Mark"]
        doc.add(Table(header, control_rows, task_note))
    return control_rows


def _time_to_bayes_section(doc: Document, records: list[RunRecord]) -> None:
    """Time to Bayes: training seconds until the validation-stream headline metric first reached each mark."""
    _table_section(doc, "Time to Bayes", tables.time_to_bayes_table(records), prose.TIME_TO_BAYES)


def _tier_caveat(doc: Document, meta: ReproduceRecord | None) -> None:
    """First in the report: what the tier's numbers can carry, where the tier declares it (`suites.TIER_CAVEATS`)."""
    caveat = TIER_CAVEATS.get(meta.tier) if meta is not None else None
    if caveat:
        doc.add(Banner(caveat))


def _geometry_section(doc: Document, records: list[RunRecord]) -> None:
    """Geometry: the headline number of each registered probe, per probed run."""
    geo = _geometry_rows(records)
    if geo:
        doc.add(Heading("Geometry"))
        doc.add(Paragraph(prose.GEOMETRY))
        doc.add(Table(["Task", "Architecture"] + [c.header for c in geometry_registry.columns()], geo))


def _geometry_across_seeds_section(doc: Document, seed_rows: list[list[str]]) -> None:
    """Geometry across seeds: each probe's quantities over the probed seeds of each cell (`geometry_across_seeds`)."""
    if seed_rows:
        doc.add(Heading("Geometry across seeds", 3))
        doc.add(Paragraph(prose.GEOMETRY_ACROSS_SEEDS))
        doc.add(Table(["Task", "Architecture", "Quantity", "Trained", "Init", "Baseline", "Seeds"], seed_rows))


def _memorisation_section(doc: Document, records: list[RunRecord], task_note: str) -> None:
    """Why memorisation is ruled out: hypotheses against the sequences each task's runs saw."""
    doc.add(Heading("Why memorisation is ruled out"))
    header = ["Task", "Hypotheses", "Sequences seen in training (max over runs)", "Verdict"]
    doc.add(Table(header, tables.memorisation_table(records), task_note))


_META_KEYS = (
    "tier",
    "machine",
    "device",
    "torch",
    "executor",
    "run_devices",
    "run_hosts",
    "seeds",
    "jobs",
    "threads",
    "total_wall_s",
    "runs_reused",
    "sum_run_wall_s",
    "command",
)
_RUN_COLUMNS = [
    "Run",
    "Task",
    "Arch",
    "Seed",
    "Status",
    "Steps",
    "Batch",
    "Train wall (s)",
    "Train+eval+probe (s)",
    "Validation, last two evaluations",
]


def _what_was_run_section(doc: Document, records: list[RunRecord], meta: ReproduceRecord | None) -> None:
    """What was run: the tier's metadata, then one row per run."""
    doc.add(Heading("What was run"))
    given = {k: getattr(meta, k) for k in _META_KEYS} if meta is not None else {}
    doc.add(Bullets([f"{k}: {v}" for k, v in given.items() if v is not None] or [prose.NO_RUN_METADATA]))
    run_rows = [_run_row(r, meta) for r in sorted(records, key=lambda r: (r.task, r.arch, r.seed))]
    doc.add(Paragraph(prose.WHAT_WAS_RUN))
    doc.add(Table(_RUN_COLUMNS, run_rows))


def _run_row(r: RunRecord, meta: ReproduceRecord | None) -> list[str]:
    """What was run's row of run `r`: status, steps, batch, wall times and the last two validation evaluations."""
    total = meta.run_wall_s.get(r.path.name) if meta is not None else None
    metric = tables.headline_metric(r.task)
    tail = r.curve(metric)[-2:]
    late = " → ".join(f"{formatting.fmt(v, metric)} (step {s:,})" for s, v in tail) if len(tail) == 2 else "—"
    st = r.state()
    return [
        r.path.name,
        r.task,
        r.arch,
        str(r.seed),
        (f"{table_cells.STATUS_MARK} {st.status}" if st.marked else st.status)
        + (f" (stopped early at step {st.stopped_early:,})" if st.stopped_early is not None else ""),
        f"{st.steps_trained:,}" + (f" of {r.steps:,}" if st.steps_trained != r.steps else ""),
        str(r.batch_size),
        f"{r.wall_s:.0f}" if r.wall_s is not None else "—",
        f"{total:.0f}" if isinstance(total, (int, float)) else "—",
        late,
    ]


def _deviations_section(doc: Document, meta: ReproduceRecord | None) -> None:
    """Deviations from the paper's settings, as `windtunnel reproduce` recorded them."""
    doc.add(Heading("Deviations from the paper's settings", 3))
    doc.add(Bullets(_deviation_lines(meta)))


def _results(
    records: list[RunRecord],
    verdicts: list[dict[str, str]],
    data: dict[str, dict[str, Any]],
    control_rows: list[list[str]],
    mixed: list[str],
    seed_geometry: list[dict[str, Any]],
    meta: ReproduceRecord | None,
) -> dict[str, Any]:
    """results.json: the claims, Table 1's data, every run, the controls, mixed configurations, geometry across seeds
    and the run metadata."""
    return {
        "claims": verdicts,
        "table1": data,
        "runs": [
            {
                "name": r.path.name,
                "task": r.task,
                "arch": r.arch,
                "seed": r.seed,
                **asdict(r.state()),  # status, steps (its config's), steps_trained, sequences_seen, notes
                "wall_s": r.wall_s,
                "evals": {k: v.get("metrics", {}) for k, v in r.evals.items()},
                **({"approximations": r.default["approximations"]} if r.default.get("approximations") else {}),
                **({"closest": r.default["closest"]} if r.default.get("closest") else {}),
            }
            for r in records
        ],
        "controls": control_rows,
        "mixed_configurations": mixed,
        "geometry_across_seeds": seed_geometry,
        "meta": meta.report_json() if meta is not None else {},
    }


def _json_default(o: Any) -> Any:
    if isinstance(o, float) and math.isinf(o):
        return "inf"
    return str(o)
