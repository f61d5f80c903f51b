"""Two or more runs, or cells of a directory of runs, side by side (`windtunnel compare`).

Per input: its verdict, the headline metric, entropy error and KL with their intervals, and the steps it trained, as
the report computes them (`table_cells.cell_value`: a cell's seeds pooled by `seed_pool.pool`, one configuration
per cell).
Against the first input, the reference: each metric's difference, paired over test sequences where both were scored
on the same ones, else unpaired; the config keys that differ; validation curves on one axes (`plot_curves`).

eval.json keeps aggregates and per-position curves, not per-sequence values, so a paired difference re-scores the
checkpoint each run's eval.json scored on the test stream (`evaluate.score`: the same sequences for every run of a
task setting, `seeds.test_seed`) and resamples whole sequences with one set of bootstrap draws for both sides
(`metrics.ratio_intervals`). It is measurable where its 95% interval excludes zero (beyond float rounding,
`marks.NUMERICAL_BITS`, for a difference in bits). A cell of several seeds enters with its per-sequence values
averaged over the seeds: that interval is evaluation noise only, the seed spread is in the cells' own intervals.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from windtunnel.evaluation import marks, metrics
from windtunnel.evaluation.metric_specs import METRICS, headline_metric
from windtunnel.plotting import save, subplots
from windtunnel.report.collect import MISSING, RunRecord, find_runs, read_run, validation_evals
from windtunnel.report.document import Bullets, Document, Figure, Heading, Paragraph, Table
from windtunnel.report.formatting import fmt
from windtunnel.report.table_cells import arch_row, cell_value, configurations, status_tag, task_order
from windtunnel.store import rundir
from windtunnel.store.manifest import change_line, config_changes

RECHECK_BITS = 1e-6  # a re-scored mean further than this from eval.json's: the weights or the code changed since


class CompareInputError(ValueError):
    """Bad input to `compare`, naming the parameter at fault (`argument`: "paths" or "cells")."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(message)
        self.argument = argument

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.argument, str(self))


@dataclass(frozen=True)
class Input:
    """One side of a comparison: a run directory, or the runs (seeds) of one configuration in a directory of runs;
    `cell`: its pooled scores and verdict (`table_cells.cell_value` of its headline metric)."""

    label: str
    runs: tuple[RunRecord, ...]
    cell: dict[str, Any]

    @property
    def task(self) -> str:
        return self.runs[0].task

    @property
    def arch(self) -> str:
        return self.runs[0].arch

    @property
    def name(self) -> str:
        """The input in words: "runs/paper-quick — hmm / transformer, seeds 0, 1, 2"."""
        seeds = ", ".join(str(r.seed) for r in self.runs)
        return f"{self.label} — {self.task} / {self.arch}, seed{'s' if len(self.runs) > 1 else ''} {seeds}"

    @property
    def metric(self) -> str:
        return headline_metric(self.task)

    def value(self, metric: str) -> dict[str, float] | None:
        """{"mean", "lo", "hi"} of `metric`, pooled over the seeds as the verdict pools them (None: not scored)."""
        if metric == self.metric:
            return {k: self.cell[k] for k in ("mean", "lo", "hi")}
        return self.cell.get(metric) or cell_value(list(self.runs), metric)

    @property
    def config(self) -> dict[str, Any]:
        """The runs' config.json less `train.loggers` (they change no number); `seed`: the seeds, where several."""
        cfg = dict(self.runs[0].config)
        cfg["train"] = {k: v for k, v in cfg.get("train", {}).items() if k != "loggers"}
        seeds = sorted(r.seed for r in self.runs)
        cfg["seed"] = seeds[0] if len(seeds) == 1 else seeds
        return cfg


@dataclass(frozen=True)
class Difference:
    """`metric` of an input minus the reference's; paired: with the 95% bootstrap interval over test sequences and
    `separated` = measurable (the interval excludes 0); unpaired: no interval, `separated` = their intervals are
    disjoint."""

    metric: str
    mean: float
    lo: float | None = None
    hi: float | None = None
    separated: bool = False


@dataclass(frozen=True)
class Pairing:
    """Input `other` against the reference: `paired` or not, `how` (what was re-scored, or why it is not paired), the
    test sequences of a paired comparison, one Difference per metric, and `notes` (a re-scored mean that differs
    from eval.json's)."""

    other: int
    paired: bool
    how: str
    differences: tuple[Difference, ...]
    n: int | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Comparison:
    """What `compare` found: the inputs (the first is the reference), the metrics compared, one Pairing per other
    input, the config keys that differ ((dotted key, value per input)), and the figure of the curves, if drawn."""

    inputs: tuple[Input, ...]
    metrics: tuple[str, ...]
    pairings: tuple[Pairing, ...]
    config_diff: tuple[tuple[str, tuple[str, ...]], ...]
    plot: Path | None = None


# --- which inputs -------------------------------------------------------------------------------------------


def _lookup(config: Mapping[str, Any], dotted: str) -> Any:
    """The value at a dotted key of a nested config, `collect.MISSING` where there is none."""
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return MISSING
        node = node[part]
    return node


def _matches(r: RunRecord, spec: Mapping[str, Any]) -> bool:
    """Whether run `r` has every `key=value` of a cell selection: task, arch, seed, or any dotted config key."""
    for key, want in spec.items():
        have = {"task": r.task, "arch": r.arch, "seed": r.seed}.get(key, _lookup(r.config, key))
        if have != want and str(have) != str(want):
            return False
    return True


def _spec_text(spec: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in spec.items())


def _input(label: str, runs: list[RunRecord]) -> Input:
    """An Input of `runs` (one configuration), scored as the report scores a cell; a bad input without eval.json."""
    cell = cell_value(runs, headline_metric(runs[0].task))
    if cell is None:
        where = ", ".join(str(r.path) for r in runs)
        raise CompareInputError(
            "paths", f"{where}: no test evaluation (eval.json 'default'); run `windtunnel eval` on it first"
        )
    return Input(label, tuple(sorted(runs, key=lambda r: (r.seed, r.path.name))), cell)


def _cells(name: str, records: list[RunRecord]) -> list[Input]:
    """The configurations of `records` (`table_cells.configurations`: seeds pooled, configs never), in report order."""
    grouped = configurations(records)
    order = task_order({task for _, task in grouped})
    cells = sorted(grouped.items(), key=lambda kv: (order.index(kv[0][1]), arch_row(kv[0][0])))
    return [
        _input(f"{name} [{label}]" if label else name, runs) for _, configs in cells for label, runs in configs.items()
    ]


def select(paths: Sequence[str | Path], cells: Sequence[Mapping[str, Any]] | None = None) -> list[Input]:
    """The inputs named by `paths`: a run directory is one input; a directory of runs (a reproduce, sweep or report
    --out with its manifest, or any folder of runs) is one input per configuration, its seeds pooled, restricted by
    `cells` to the runs matching any one selection ({"task": "hmm", "arch": "transformer"}; keys task, arch, seed
    or dotted config keys). Needs two or more; CompareInputError naming `paths` or `cells` otherwise."""
    specs = [dict(s) for s in cells or []]
    out: list[Input] = []
    used = [False] * len(specs)
    folders: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.is_dir():
            raise CompareInputError("paths", f"{p}: {'is not a directory' if p.exists() else 'does not exist'}")
        if (p / rundir.CONFIG).exists():
            out.append(_input(str(raw), [read_run(p)]))
            continue
        try:
            records = find_runs([p])
        except ValueError as err:
            reason = str(err).removeprefix("report: ")
            raise CompareInputError(
                "paths", f"{p}: neither a run directory (no {rundir.CONFIG}) nor a directory of runs ({reason})"
            ) from None
        folders.append(p)
        chosen = records
        if specs:
            hits = [{id(r) for r in records if _matches(r, s)} for s in specs]
            used = [u or bool(h) for u, h in zip(used, hits, strict=True)]
            chosen = [r for r in records if any(id(r) in h for h in hits)]
        out += _cells(str(raw), chosen) if chosen else []
    if specs and not folders:
        raise CompareInputError("cells", "selects the cells of a directory of runs, but every input is a run directory")
    for spec, hit in zip(specs, used, strict=True):
        if not hit:
            raise CompareInputError("cells", f"{_spec_text(spec)}: matches no run in {', '.join(map(str, folders))}")
    if len(out) < 2:
        got = "; ".join(i.label for i in out) or "none"
        raise CompareInputError("paths", f"compare needs two or more runs or cells (got {len(out)}: {got})")
    return out


# --- paired over the test sequences --------------------------------------------------------------------------


class NotPaired(Exception):
    """Why two inputs cannot be paired over test sequences (the comparison falls back to the unpaired one)."""


def paired_difference(
    reference: torch.Tensor,
    other: torch.Tensor,
    counts: torch.Tensor,
    names: Sequence[str],
    n_boot: int = 1000,
    seed: int = 0,
) -> list[Difference]:
    """Per metric (column of `reference` and `other`, (N,M) per-sequence sums over scored positions; `counts` (N,)
    the scored positions): other − reference over all scored positions, with a 95% bootstrap interval over whole
    sequences, both sides resampled with the same draws (`metrics.ratio_intervals`); measurable where the interval
    excludes 0, by more than `marks.NUMERICAL_BITS` for a metric in bits."""
    ivs = metrics.ratio_intervals(other - reference, counts, n_boot, seed)
    out = []
    for name, iv in zip(names, ivs, strict=True):
        tol = marks.NUMERICAL_BITS if METRICS[name].unit == "bits" else 0.0
        out.append(Difference(name, iv["mean"], iv["lo"], iv["hi"], iv["lo"] > tol or iv["hi"] < -tol))
    return out


def _stream(inp: Input, with_n: bool) -> dict[str, Any]:
    """Which test sequences an input's evaluation scored: task, its parameters, the stream (and how many)."""
    seen = []
    for r in inp.runs:
        ev = r.default
        s = {"task": r.task, "task_params": ev.get("task_params"), "stream": ev.get("stream", "test")}
        if with_n:
            s["n"] = ev.get("n")
        if s not in seen:
            seen.append(s)
    if len(seen) > 1:
        raise NotPaired(f"the seeds of {inp.label} were scored on different test sequences")
    return seen[0]


def sequence_sums(
    r: RunRecord, names: Sequence[str], n: int, trust_code: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Re-score the checkpoint a run's eval.json scored (its "default" step) on the first `n` test sequences, on the
    CPU: per sequence, the sums over its scored positions of each metric in `names` (N,M) and the count (N,)."""
    from windtunnel import runs
    from windtunnel.budget import check_evaluation
    from windtunnel.evaluation import evaluate

    run = runs.load_run(r.path, trust_code=trust_code)
    step = r.default.get("step")
    if step is not None and step not in run.checkpoints():
        raise NotPaired(f"{r.path}: the checkpoint eval.json scored (step {step}) is not there")
    cfg = run.config
    batch_size = int(r.default.get("batch_size") or cfg.eval.batch_size)
    check_evaluation(cfg, n, batch_size)
    model = run.model if step is None else run.load_checkpoint(step)
    predict = evaluate.ModelPredictor(model, run.task.spec, "cpu", cfg.eval.dtype)
    table = evaluate.score(predict, run.task, cfg.seed, n, batch_size, "cpu")
    cols = [getattr(table, metrics.PER_SEQUENCE_METRICS[m]) for m in names]
    missing = [m for m, c in zip(names, cols, strict=True) if c is None]
    if missing:
        raise NotPaired(f"{r.path}: its task has no per-sequence {', '.join(missing)}")
    sums = torch.stack([c.nan_to_num(0.0).sum(1) for c in cols], 1).cpu()  # (N,M)
    return sums, (~table.kl_bits.isnan()).sum(1).double().cpu()


Rescored = dict[tuple[Any, ...], tuple[torch.Tensor, torch.Tensor]]  # inputs re-scored once, whatever they meet


def _rescored(
    inp: Input, names: Sequence[str], n: int, trust_code: bool, notes: list[str], cache: Rescored
) -> tuple[torch.Tensor, torch.Tensor]:
    """An input's per-sequence sums (`sequence_sums`), averaged over its seeds, from `cache` where it was re-scored
    already; a note for every re-scored mean that is not eval.json's (where `n` is the n eval.json scored)."""
    key = (tuple(str(r.path) for r in inp.runs), tuple(names), n)
    if key in cache:
        return cache[key]
    parts = []
    for r in inp.runs:
        sums, counts = sequence_sums(r, names, n, trust_code)
        parts.append((sums, counts))
        if r.default.get("n") != n:
            continue
        for j, name in enumerate(names):
            stored, again = r.metric(name), float(sums[:, j].sum() / counts.sum().clamp_min(1.0))
            if stored is not None and abs(stored["mean"] - again) > RECHECK_BITS * max(1.0, abs(again)):
                notes.append(
                    f"{r.path}: re-scored {METRICS[name].title} {fmt(again, name)} is not eval.json's "
                    f"{fmt(stored['mean'], name)} (weights or code changed since it was evaluated)"
                )
    counts = parts[0][1]
    if any(not torch.equal(c, counts) for _, c in parts):
        raise NotPaired(f"the seeds of {inp.label} score different positions of the same sequences")
    cache[key] = torch.stack([s for s, _ in parts]).mean(0), counts
    return cache[key]


def _unpaired(ref: Input, other: Input, names: Sequence[str]) -> list[Difference]:
    """Other − reference of each metric's pooled means; separated where their intervals are disjoint."""
    out = []
    for name in names:
        a, b = ref.value(name), other.value(name)
        if a is None or b is None:
            continue
        out.append(Difference(name, b["mean"] - a["mean"], separated=b["lo"] > a["hi"] or b["hi"] < a["lo"]))
    return out


def pair(
    ref: Input,
    other: Input,
    index: int,
    names: Sequence[str],
    n: int | None = None,
    paired: bool = True,
    n_boot: int = 1000,
    trust_code: bool = False,
    cache: Rescored | None = None,
) -> Pairing:
    """Input `index` against the reference: paired over the test sequences both were scored on (the first `n`, or
    all eval.json scored), else the unpaired difference with the reason it is not paired. `cache`: inputs already
    re-scored (the reference is re-scored once for all the others)."""
    cache = {} if cache is None else cache
    if not paired:
        return Pairing(
            index, False, "not paired: --no-paired (the unpaired comparison only)", tuple(_unpaired(ref, other, names))
        )
    try:
        a, b = _stream(ref, n is None), _stream(other, n is None)
        if a != b:
            changes = "; ".join(change_line(*c) for c in config_changes(a, b))
            raise NotPaired(f"different test sequences ({changes})")
        if n is None and not isinstance(a["n"], int):
            raise NotPaired("eval.json does not say how many test sequences it scored")
        count = int(n if n is not None else a["n"])
        usable = [m for m in names if ref.value(m) is not None and other.value(m) is not None]
        notes: list[str] = []
        sums_a, counts = _rescored(ref, usable, count, trust_code, notes, cache)
        sums_b, counts_b = _rescored(other, usable, count, trust_code, notes, cache)
        if not torch.equal(counts, counts_b):
            raise NotPaired("the two score different positions of the same sequences")
    except NotPaired as why:
        return Pairing(index, False, f"not paired: {why}", tuple(_unpaired(ref, other, names)))
    how = (
        f"paired over the same {count:,} test sequences: both re-scored on them (eval.json keeps no per-sequence "
        "values), 95% bootstrap interval over sequences"
    )
    if any(len(i.runs) > 1 for i in (ref, other)):
        how += "; a cell's per-sequence values averaged over its seeds (evaluation noise only)"
    diffs = paired_difference(sums_a, sums_b, counts, usable, n_boot=n_boot)
    return Pairing(index, True, how, tuple(diffs), count, tuple(notes))


# --- the config keys that differ ---------------------------------------------------------------------------


def _shown(value: Any) -> str:
    if value is MISSING:
        return "(absent)"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def config_diff(configs: Sequence[Mapping[str, Any]]) -> list[tuple[str, tuple[str, ...]]]:
    """The dotted keys whose values differ between the first config and any other (`manifest.config_changes`; lists
    compared whole), each with its value in every config ("(absent)" where it has none), in sorted key order."""
    keys = sorted({path for cfg in configs[1:] for path, _, _ in config_changes(configs[0], cfg)})
    return [(key, tuple(_shown(_lookup(cfg, key)) for cfg in configs)) for key in keys]


# --- curves ------------------------------------------------------------------------------------------------


def plot_curves(inputs: Sequence[Input], metric: str, path: str | Path) -> Path | None:
    """Every input's validation curve of `metric` (metrics.jsonl, `collect.validation_evals`) against the step on one
    axes, one colour per input (each seed of a cell a line of its colour), as a PNG at `path`; None where no input
    has a curve."""
    fig, ax = subplots(figsize=(7, 4.2))
    values: list[float] = []  # every point drawn
    for i, inp in enumerate(inputs):
        label: str | None = f"{letter(i)}: {inp.name}".replace("$", r"\$")  # `$` would start mathtext
        for r in inp.runs:
            pts = [(int(h["step"]), float(h[metric])) for h in validation_evals(r.history) if h.get(metric) is not None]
            if not pts:
                continue
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, color=f"C{i % 10}", marker="o", ms=2.5, label=label)
            label = None
            values += ys
    if not values:
        return None
    if metric != "accuracy" and min(values) > 0 and max(values) > 10 * min(values):  # log where it spans decades
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(f"validation {METRICS[metric].title}")
    ax.legend(fontsize=7)
    return save(fig, path, bbox_inches="tight")


# --- the whole comparison ------------------------------------------------------------------------------------


def letter(i: int) -> str:
    """The short name of input i in tables: A, B, ..., Z, then 27, 28, ..."""
    return chr(ord("A") + i) if i < 26 else str(i + 1)


def compare(
    paths: Sequence[str | Path],
    cells: Sequence[Mapping[str, Any]] | None = None,
    *,
    n: int | None = None,
    paired: bool = True,
    n_boot: int = 1000,
    trust_code: bool = False,
    plot: str | Path | None = None,
) -> Comparison:
    """Compare the inputs `paths` and `cells` name (`select`), each against the first: pooled scores and verdicts,
    paired differences over the test sequences (the first `n`; default: the n eval.json scored; `paired=False`:
    unpaired only, nothing re-scored), the config keys that differ, and with `plot` the validation curves of the
    reference's headline metric as a PNG there."""
    if n is not None and n < 1:
        raise ValueError(f"n: must be >= 1 (got {n})")
    inputs = select(paths, cells)
    names = tuple(dict.fromkeys([*(i.metric for i in inputs), "entropy_mae_bits", "kl_bits"]))
    ref = inputs[0]
    cache: Rescored = {}
    pairings = tuple(
        pair(ref, other, i, names, n=n, paired=paired, n_boot=n_boot, trust_code=trust_code, cache=cache)
        for i, other in enumerate(inputs[1:], 1)
    )
    figure = plot_curves(inputs, ref.metric, plot) if plot is not None else None
    return Comparison(tuple(inputs), names, pairings, tuple(config_diff([i.config for i in inputs])), figure)


# --- as text and Markdown ----------------------------------------------------------------------------------


def _interval(m: Mapping[str, float] | None, metric: str) -> str:
    return "—" if not m else f"{fmt(m['mean'], metric)} [{fmt(m['lo'], metric)}, {fmt(m['hi'], metric)}]"


def _signed(value: float, metric: str) -> str:
    return ("+" if value > 0 else "") + fmt(value, metric)


def _steps(inp: Input) -> str:
    trained = sorted({r.state().steps_trained for r in inp.runs})
    if trained == [0]:
        return "not trained"
    span = f"{trained[0]:,}" if len(trained) == 1 else f"{trained[0]:,}–{trained[-1]:,}"
    return f"{span} of {max(r.steps for r in inp.runs):,}"


def _result(d: Difference, paired: bool, who: str, inputs: Sequence[Input] = ()) -> str:
    """A difference in words; unpaired, the inputs' own intervals decide, and where one of them is a Student-t interval
    over too few seeds (`marks.too_few_seeds`) an overlap is "too few seeds to separate", not a tie."""
    way = f"{who} {'higher' if d.mean > 0 else 'lower'}"
    if paired:
        return f"measurable: {way}" if d.separated else "not measurable"
    if d.separated:
        return f"intervals disjoint: {way}"
    few = next((i for i in inputs if marks.too_few_seeds(i.cell.get("seeds"), i.cell.get("interval"))), None)
    return "intervals overlap" if few is None else marks.unseparated("each other", few.cell["seeds"])


def document(c: Comparison) -> Document:
    """The comparison as a `report.document.Document`, the one source of its text and Markdown."""
    ref = letter(0)
    doc = Document(f"Comparison of {len(c.inputs)} inputs (reference {ref})")
    doc.add(Bullets([f"{letter(i)}: {inp.name}" for i, inp in enumerate(c.inputs)]))
    headlines = {inp.metric for inp in c.inputs}
    header = ["Input", "Verdict", *(METRICS[m].title + (" (headline)" if m in headlines else "") for m in c.metrics)]
    rows = [
        [
            letter(i),
            f"{inp.cell['verdict']['mark']} {inp.cell['level']}{status_tag(inp.cell['statuses'])}",
            *(_interval(inp.value(m), m) for m in c.metrics),
            _steps(inp),
            f"{len(inp.runs)}: " + ("Student-t over seeds" if len(inp.runs) > 1 else "bootstrap over test sequences"),
        ]
        for i, inp in enumerate(c.inputs)
    ]
    rule = (
        "verdicts by the report's rule: entropy error and KL(exact ‖ model) both within the level at the upper end of "
        "their 95% intervals (marks.rule_text)"
    )
    doc.add(Table([*header, "Steps trained", "Seeds: 95% interval"], rows, rule))
    why = [
        f"{letter(i)}: {marks.shortfall(inp.cell['level'], reasons)}"
        for i, inp in enumerate(c.inputs)
        if (reasons := inp.cell["verdict"]["reasons"])
    ]
    if why:
        doc.add(Heading("Why not a higher mark"))
        doc.add(Bullets(why))
    doc.add(Heading(f"Differences against {ref}"))
    diff_rows, hows = [], []
    for p in c.pairings:
        who = letter(p.other)
        hows.append(f"{who} − {ref}: {p.how}")
        hows += [f"{who} − {ref}: note: {note}" for note in p.notes]
        for d in p.differences:
            iv = (
                f"[{_signed(d.lo, d.metric)}, {_signed(d.hi, d.metric)}]"
                if d.lo is not None and d.hi is not None
                else "—"
            )
            diff_rows.append(
                [
                    f"{who} − {ref}",
                    METRICS[d.metric].title,
                    _signed(d.mean, d.metric),
                    iv,
                    _result(d, p.paired, who, (c.inputs[0], c.inputs[p.other])),
                ]
            )
    doc.add(Table(["Inputs", "Metric", "Difference", "95% interval", "Result"], diff_rows))
    doc.add(Bullets(hows))
    doc.add(Heading("Config keys that differ"))
    if c.config_diff:
        doc.add(Table(["Key", *map(letter, range(len(c.inputs)))], [[k, *v] for k, v in c.config_diff]))
    else:
        doc.add(Paragraph("none: the inputs are of one configuration (train.loggers aside)"))
    if c.plot is not None:
        doc.add(Figure(c.plot.resolve(), f"validation {METRICS[c.inputs[0].metric].title} against the step"))
    return doc


def to_markdown(c: Comparison, base: str | Path = ".") -> str:
    """The comparison as Markdown; the figure's link relative to `base` (where the Markdown file is)."""
    return document(c).markdown(Path(base).resolve())


def _table_text(t: Table) -> list[str]:
    widths = [max(len(r[i]) for r in [t.header, *t.rows]) for i in range(len(t.header))]

    def line(cells: list[str]) -> str:
        return "  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)).rstrip()

    out = [line(t.header), line(["-" * w for w in widths]), *map(line, t.rows)]
    return out + (textwrap.wrap(t.caption, 116, initial_indent="  ", subsequent_indent="  ") if t.caption else [])


def to_text(c: Comparison) -> str:
    """The comparison as plain text for a terminal (the same blocks as `to_markdown`)."""
    doc = document(c)
    out = [doc.title, "=" * len(doc.title)]
    for b in doc.blocks:
        if isinstance(b, Heading):
            out += ["", b.text, "-" * len(b.text)]
        elif isinstance(b, Paragraph):
            out += textwrap.wrap(b.text, 118)
        elif isinstance(b, Bullets):
            for item in b.items:
                out += textwrap.wrap(item, 118, initial_indent="  ", subsequent_indent="    ")
        elif isinstance(b, Table):
            out += ["", *_table_text(b), ""]
        elif isinstance(b, Figure):
            out += ["", f"figure: {b.path} ({b.caption})"]
    return "\n".join(out).rstrip() + "\n"
