"""The paper's figures from run records: calibration curves, length generalisation, training curves, and the geometry
probes' figures (layer-0 keys beside init, attention entropy, value manifold, frame-precision dissociation, state
clusters, memory profile).

Every figure is drawn from configurations, never a pool of them: a cell is one configuration
(`table_cells.configurations`, Table 1's grouping: runs that differ only in the seed), each line or panel is one cell,
and its seed is named (the lowest seed that has the data, or every seed overlaid, each labelled). A probe figure is the
PNG the probe drew into its run's figures/ (`geometry.figures.write_figures`), copied to
`figures/<kind>_<task>_<arch>[_<hash>].png`, the hash (of the configuration) only where the architecture has several
configurations of the task; the memory profile is drawn from geometry.json's numbers where a run was probed before its
PNG existed.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from windtunnel import models
from windtunnel.evaluation.metric_specs import METRICS, headline_metric
from windtunnel.geometry import registry as geometry_registry
from windtunnel.geometry.seeds import dig
from windtunnel.plotting import save, subplots
from windtunnel.report import table_cells
from windtunnel.report.collect import RunRecord
from windtunnel.store import rundir

# Colours of the architectures that declare none (`models.info(arch).color`: a user's own), none of them a built-in's:
# each name gets one by a hash of the name, so it has the same colour in every figure and every report.
# Hues apart from the built-ins' blue, orange, green, red, purple, grey and black: brown, pink, olive, cyan, gold,
# magenta, ochre.
USER_COLORS = ("C5", "C6", "C8", "C9", "#e6ab02", "#e7298a", "#a6761d")
SEED_STYLES = ("-", "--", ":", "-.")  # one line style per seed of a cell, in seed order
MAX_COLUMNS = 5  # panels per row of a figure with one panel per cell


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


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:8]


def _save(fig, path: Path) -> Path:
    return save(fig, path, bbox_inches="tight")


# --- cells: one configuration each ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One configuration of an architecture on a task (`table_cells.configurations`): its runs, in seed order."""

    task: str
    arch: str
    label: str  # "" where the architecture has one configuration of the task, else the keys that differ
    runs: tuple[RunRecord, ...]

    @property
    def name(self) -> str:
        """The architecture and its configuration, as Table 1's rows name it."""
        return f"{self.arch} ({self.label})" if self.label else self.arch

    @property
    def caption(self) -> str:
        """The short cell label of a caption: "hmm · mamba", "bijection · transformer (train.lr=0.001)"."""
        return f"{self.task} · {self.name}"

    @property
    def slug(self) -> str:
        """A file-name part, the same for this configuration in every report: task and architecture, and a hash of
        the configuration where the label says there are several."""
        base = f"{_slug(self.task)}_{_slug(self.arch)}"
        if not self.label:
            return base
        first = self.runs[0]
        return f"{base}_{_digest([table_cells.config_key(first), first.state().variant])}"


def cells(records: list[RunRecord]) -> list[Cell]:
    """Every configuration in `records`, by task (registration order), architecture (table order) and configuration
    (Table 1's)."""
    out = []
    configs = table_cells.configurations(records)
    order = {t: i for i, t in enumerate(table_cells.task_order({t for _, t in configs}))}
    for (arch, task), by_label in sorted(
        configs.items(), key=lambda kv: (order[kv[0][1]], table_cells.arch_row(kv[0][0]), kv[0][0])
    ):
        for label, runs in by_label.items():
            out.append(Cell(task, arch, label, tuple(sorted(runs, key=lambda r: (r.seed, r.path.name)))))
    return out


def seed_text(run: RunRecord, among: list[RunRecord], what: str) -> str:
    """ "seed 0", or "seed 0 (of seeds 0, 1, 2 {what})" where the cell has several."""
    seeds = sorted({r.seed for r in among})
    return f"seed {run.seed}" + (f" (of seeds {', '.join(map(str, seeds))} {what})" if len(seeds) > 1 else "")


# --- curves ---------------------------------------------------------------------------------------------------------


def _grid(n: int, width: float, height: float) -> tuple[Any, list[Any]]:
    """A figure of `n` panels sharing their y axis, at most MAX_COLUMNS a row; the unused panels hidden."""
    cols = min(MAX_COLUMNS, max(n, 1))
    rows = (n + cols - 1) // cols
    fig, axes = subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False, sharey=True)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _first_with(runs: tuple[RunRecord, ...], test: Callable[[RunRecord], bool]) -> RunRecord | None:
    return next((r for r in runs if test(r)), None)


def calibration_figures(records: list[RunRecord], task: str, out: Path) -> list[tuple[Path, str]]:
    """Per task configuration (task parameters, `table_cells.params_key`; one figure each): the per-position predictive
    entropy of each cell's lowest seed with per-position curves against the exact Bayes entropy."""

    def curves(r: RunRecord) -> bool:
        c = r.default.get("per_position", {})
        return bool(c.get("model_entropy_bits") and c.get("bayes_entropy_bits"))

    groups: dict[tuple[str, str], list[tuple[Cell, RunRecord]]] = {}
    for cell in cells(records):
        r = _first_with(cell.runs, curves) if cell.task == task and cell.arch != "oracle" else None
        if r is not None:
            groups.setdefault(table_cells.params_key(r), []).append((cell, r))
    labels, _ = table_cells.task_labels(records)
    drawn = []
    for key, lines in groups.items():
        fig, ax = subplots(figsize=(6.5, 4))
        bayes = lines[0][1].default["per_position"]["bayes_entropy_bits"]
        ax.plot(range(1, len(bayes) + 1), bayes, "k--", lw=2.5, label="exact Bayes")
        for cell, r in lines:
            ys = r.default["per_position"]["model_entropy_bits"]
            name = f"{cell.name}, seed {r.seed}"
            ax.plot(range(1, len(ys) + 1), ys, marker="o", ms=3, color=arch_color(cell.arch), label=_label(name))
        title = labels.get(key, task)
        ax.set_xlabel("scored position")
        ax.set_ylabel("predictive entropy (bits)")
        ax.set_title(f"{_label(title)}: model entropy vs exact posterior entropy")
        ax.legend(fontsize=7)
        name = f"calibration_{_slug(task)}" + (f"_{_digest(key[1])}" if len(groups) > 1 else "")
        path = _save(fig, out / "figures" / f"{name}.png")
        drawn.append(
            (
                path,
                f"{title}: per-position predictive entropy of each cell (one line each: its lowest seed, named in the "
                "legend) against the exact Bayes entropy",
            )
        )
    return drawn


def length_generalisation_figure(records: list[RunRecord], task: str, out: Path) -> Path | None:
    """Per-position entropy error at the training length and each longer evaluation, one panel per cell (its lowest
    seed evaluated at more than one length, named in the panel's title)."""
    panels = [
        (cell, r)
        for cell in cells(records)
        if cell.task == task and cell.arch != "oracle" and (r := _first_with(cell.runs, lambda r: len(r.evals) > 1))
    ]
    if not panels:
        return None
    fig, axes = _grid(len(panels), 4, 3.5)
    for i, (ax, (cell, r)) in enumerate(zip(axes, panels, strict=True)):
        for name, ev in r.evals.items():
            ys = ev.get("per_position", {}).get("entropy_abs_err_bits")
            if ys:
                label = "train length" if name == "default" else _label(name)
                ax.plot(range(1, len(ys) + 1), ys, label=label)
        ax.set_title(_label(f"{cell.name}, seed {r.seed}"), fontsize=8)
        ax.set_xlabel("scored position")
        if i % MAX_COLUMNS == 0:
            ax.set_ylabel("|H_model - H_Bayes| (bits)")
        if ax.get_legend_handles_labels()[0]:  # a run without per-position curves draws nothing to label
            ax.legend(fontsize=7)
    fig.suptitle(f"{_label(task)}: length generalisation")
    fig.tight_layout()
    return _save(fig, out / "figures" / f"length_generalisation_{_slug(task)}.png")


# A validation value of 0 on a log axis is drawn here (an entropy error of exactly 0 has no logarithm).
CURVE_FLOOR = 1e-6


def training_curves_figure(records: list[RunRecord], out: Path) -> Path | None:
    """The validation-stream headline metric (entropy error, or accuracy where it is the task's headline) against
    training step: one panel per cell, titled by its task and configuration, every seed of it a line labelled by its
    seed (markers at each evaluation, so a run evaluated once is a visible point); the panels of one task share their
    y range. No panel pools configurations."""
    panels: list[tuple[Cell, str, list[tuple[RunRecord, list[tuple[int, float]]]]]] = []
    for cell in cells(records):
        metric = headline_metric(cell.task)
        curves = [(r, c) for r in cell.runs if (c := r.curve(metric))]
        if curves:
            panels.append((cell, metric, curves))
    if not panels:
        return None
    span: dict[str, tuple[float, float]] = {}  # task -> its panels' shared y range
    for cell, metric, curves in panels:
        ys = [_y(v, metric) for _, c in curves for _, v in c]
        lo, hi = span.get(cell.task, (math.inf, -math.inf))
        span[cell.task] = (min(lo, *ys), max(hi, *ys))
    by_task: dict[str, list[int]] = {}  # task -> its panels' indices; each task starts a row of its own
    for i, (cell, _, _) in enumerate(panels):
        by_task.setdefault(cell.task, []).append(i)
    cols = min(MAX_COLUMNS, max(len(v) for v in by_task.values()))
    where: dict[int, tuple[int, int]] = {}
    row = 0
    for indices in by_task.values():
        for k, i in enumerate(indices):
            where[i] = (row + k // cols, k % cols)
        row += (len(indices) + cols - 1) // cols
    fig, grid = subplots(row, cols, figsize=(3.4 * cols, 2.9 * row), squeeze=False)
    for ax in grid.flat:
        ax.set_visible(False)
    for i, (cell, metric, curves) in enumerate(panels):
        ax = grid[where[i]]
        ax.set_visible(True)
        for k, (r, c) in enumerate(curves):
            steps, values = zip(*c, strict=True)
            style = SEED_STYLES[k % len(SEED_STYLES)]
            label = f"seed {r.seed}" + table_cells.runs_tag([r])
            ax.plot(
                steps,
                [_y(v, metric) for v in values],
                style,
                marker="o",
                ms=3,
                color=arch_color(cell.arch),
                label=label,
            )
        lo, hi = span[cell.task]
        if METRICS[metric].unit == "fraction":  # a linear axis; bits on a log one
            pad = max(0.02, 0.05 * (hi - lo))
            ax.set_ylim(lo - pad, hi + pad)
        else:
            ax.set_yscale("log")
            ax.set_ylim(lo / 1.3, hi * 1.3)
        ax.set_title(_label(cell.caption), fontsize=8)
        ax.set_xlabel("step", fontsize=8)
        if where[i][1] == 0:
            ax.set_ylabel(METRICS[metric].title, fontsize=8)
        ax.tick_params(which="both", labelsize=7)
        ax.legend(fontsize=6)
    fig.tight_layout()
    return _save(fig, out / "figures" / "training_curves.png")


def _y(v: float, metric: str) -> float:
    return v if METRICS[metric].unit == "fraction" else max(v, CURVE_FLOOR)


# --- the probes' figures -------------------------------------------------------------------------------------------

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MAX_PNG_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class ProbeFigure(geometry_registry.ReportFigure):
    """A registered probe's report figure (`geometry.registry.ReportFigure`: the PNG `source` the probe draws into a
    run's figures/, its heading, paragraph, caption, architectures and fallback `draw`) with `probe`, the geometry.json
    key of the probe that draws it (the figure is shown only where that probe applied)."""

    probe: str = ""


def probe_figure_kinds() -> list[ProbeFigure]:
    """Every registered probe's report figures (`Probe.report_figures`, geometry/registry.py), in their order."""
    return [
        ProbeFigure(**{k.name: getattr(f, k.name) for k in fields(f)}, probe=probe.name)
        for probe, f in geometry_registry.report_figures()
    ]


def _applies(g: dict[str, Any] | None, probe: str) -> bool:
    result = dig(g, probe)
    return isinstance(result, dict) and "not_applicable" not in result and "error" not in result


def run_png(r: RunRecord, name: str) -> bytes | None:
    """The bytes of the PNG `name` the probe drew into run `r`'s figures/ -- a regular file (no link, nor a folder of
    links), named in its geometry.json's "figures" (so drawn by the probe behind those numbers; read in the run's own
    figures/, so a moved run keeps them), that is a PNG -- or None."""
    listed = dig(r.geometry, "figures")
    if not isinstance(listed, list) or name not in {Path(p).name for p in listed if isinstance(p, str)}:
        return None
    folder = r.path / rundir.FIGURES
    path = folder / name
    try:
        if folder.is_symlink() or path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_PNG_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    return data if data.startswith(PNG_MAGIC) else None


def probe_figures(records: list[RunRecord], out: Path) -> list[tuple[str, str, list[tuple[Path, str]]]]:
    """Per kind of `probe_figure_kinds` (its heading and paragraph; a kind with no figure left out): one figure per cell
    whose probe applied, from its lowest probed seed that has the figure (or, for a kind that draws seeds overlaid,
    `draw_seeds`, from every probed seed), captioned with the cell, the seeds and what it shows."""
    sections = []
    for kind in probe_figure_kinds():
        drawn = []
        for cell in cells(records):
            if kind.archs is not None and cell.arch not in kind.archs:
                continue
            probed = [r for r in cell.runs if r.geometry]
            dest = out / "figures" / f"{kind.kind}_{cell.slug}.png"
            if kind.draw_seeds is not None:  # every probed seed overlaid, each labelled
                seeds = [(r.seed, dig(r.geometry, kind.probe)) for r in probed if _applies(r.geometry, kind.probe)]
                if seeds and kind.draw_seeds(seeds, dest) is not None:
                    which = ", ".join(str(s) for s, _ in seeds)
                    which = f"seed {which}" if len(seeds) == 1 else f"seeds {which} overlaid"
                    drawn.append((dest, f"{cell.caption}, {which}: {kind.what(probed[0].geometry or {})}"))
                continue
            for r in probed:
                if not _applies(r.geometry, kind.probe):
                    continue
                png = run_png(r, kind.source)
                if png is not None:
                    rundir.atomic_write(dest, png)
                elif kind.draw is None or kind.draw(dig(r.geometry, kind.probe), dest) is None:
                    continue
                assert r.geometry is not None
                caption = f"{cell.caption}, {seed_text(r, probed, 'probed')}: {kind.what(r.geometry)}"
                drawn.append((dest, caption))
                break
        if drawn:
            sections.append((kind.title, kind.text, drawn))
    return sections


# --- everything -----------------------------------------------------------------------------------------------------

FIGURES_TEXT = (
    "Each figure, line or panel is one configuration: a cell of Table 1 (runs that differ only in the seed); no figure "
    "pools configurations or seeds. Where a cell has several seeds, a figure draws its lowest seed that has the data "
    "and says which (caption, legend or panel title), or overlays every seed, each labelled. A probe figure is the one "
    "the geometry probe drew for that run (docs/geometry.md), named by its kind and cell."
)


def report_figures(records: list[RunRecord], out: Path) -> list[tuple[str, str, list[tuple[Path, str]]]]:
    """Every figure of the report, as (sub-heading, paragraph, [(PNG path, caption)]) in order: calibration and
    length generalisation per task, training curves per cell, then the probes' figures (`probe_figures`); "" = no
    sub-heading (or paragraph)."""
    first: list[tuple[Path, str]] = []
    present = table_cells.task_order({r.task for r in records})
    for task in present:
        first += calibration_figures(records, task, out)
    for task in present:
        p = length_generalisation_figure(records, task, out)
        if p:
            first.append(
                (
                    p,
                    f"{task}: per-position entropy error at the training length and longer, one panel per cell (its "
                    "lowest seed evaluated at several lengths, named in the panel's title)",
                )
            )
    p = training_curves_figure(records, out)
    if p:
        first.append(
            (
                p,
                "validation-stream headline metric during training (entropy error, or accuracy where that is the "
                "task's headline), one panel per cell (task · configuration), every seed a line labelled by its seed",
            )
        )
    sections = [("", "", first)] if first else []
    return sections + probe_figures(records, out)


# --- forest plots: every cell against the thresholds ---------------------------------------------------------------

LEVEL_COLORS = {"exact": "#1a7f37", "approximate": "#9a6700", "fail": "#cf222e", "invalid": "#8250df"}
FLOOR_STYLES = (":", "-.")  # the floors' lines, in order
BITS_AXIS_FLOOR = 1e-3  # the left edge of a forest plot's log axis in bits, at least (an end below it: an arrow)


@dataclass(frozen=True)
class Floor:
    """A reference line of a forest plot: `label`, and its `value` per metric (a metric it has no value for: none)."""

    label: str
    values: dict[str, float]


def forest_figure(
    task: str,
    metrics: list[str],
    data: dict[str, dict[str, Any]],
    thresholds: Any,
    floors: list[Floor],
    out: Path,
) -> Path | None:
    """A forest plot of tunnel `task`: a panel per metric in `metrics` (its headline first, then KL), a row per Table 1
    cell (`tables.primitives_table`'s data: seeds pooled), its mean as a dot coloured by its mark and its interval as a
    bar, against the ◐ and ✓ thresholds (`marks.Thresholds`) and the `floors` (the context-blind predictor). Bits on a
    log axis: an interval end at or below `BITS_AXIS_FLOOR` (0 bits and below included) is an arrow at the axis'
    edge; an accuracy interval is drawn whole, the part past 100% over a grey band labelled beyond the range. None
    where no cell has the task."""
    rows = [(name, cells[task]) for name, cells in data.items() if task in cells]
    if not rows:
        return None
    fig, axes = subplots(1, len(metrics), figsize=(4.6 * len(metrics) + 1.2, 0.42 * len(rows) + 1.6), squeeze=False)
    ys = list(range(len(rows)))[::-1]  # the first row at the top
    for k, (ax, metric) in enumerate(zip(axes[0], metrics, strict=True)):
        spec = METRICS[metric]
        points = [
            (y, c["level"], _finite(c if metric == c.get("metric", metric) else c.get(metric)))
            for y, (_, c) in zip(ys, rows, strict=True)
        ]
        if spec.unit == "fraction":
            _forest_fraction(ax, points)
            marks_at = [(thresholds.exact_accuracy, "✓"), (thresholds.approx_accuracy, "◐")]
        else:
            _forest_bits(ax, points)
            marks_at = [(thresholds.exact_bits, "✓"), (thresholds.approx_bits, "◐")]
        for (value, sym), ha in zip(marks_at, ("left", "right"), strict=True):  # ✓ and ◐ apart where they are close
            ax.axvline(value, color="#555", ls="--", lw=1)
            ax.annotate(
                f"{sym} {spec.fmt(value)}",
                (value, 1.0),
                xycoords=("data", "axes fraction"),
                fontsize=7,
                ha=ha,
                va="bottom",
                color="#555",
            )
        for k_floor, floor in enumerate(floors):
            style = FLOOR_STYLES[k_floor % len(FLOOR_STYLES)]
            if metric in floor.values and math.isfinite(floor.values[metric]):
                ax.axvline(floor.values[metric], color="#888", ls=style, lw=1.5, label=_label(floor.label))
        ax.set_xlabel(spec.title)
        ax.set_yticks(ys)
        ax.set_yticklabels([_label(name) for name, _ in rows] if k == 0 else [], fontsize=8)
        ax.set_ylim(-0.7, len(rows) - 0.3)
        ax.grid(axis="x", alpha=0.3)
    handles: dict[str, Any] = {}
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(lab, h)
    if handles:
        fig.legend(list(handles.values()), list(handles), fontsize=7, loc="lower center", ncol=len(handles))
    fig.suptitle(f"{_label(task)}: every cell (seeds pooled) against the ◐/✓ thresholds", fontsize=10)
    fig.tight_layout(rect=(0, 0.07 if handles else 0, 1, 1))
    return _save(fig, out / "figures" / f"forest_{_slug(task)}.png")


Point = tuple[int, str, "dict[str, float] | None"]  # (row, the cell's level, its interval {"mean", "lo", "hi"})


def _finite(m: Any) -> dict[str, float] | None:
    """An interval {"mean", "lo", "hi"} of finite numbers, else None (nothing drawn)."""
    try:
        vals = {k: float(m[k]) for k in ("mean", "lo", "hi")}
    except (KeyError, TypeError, ValueError):
        return None
    return vals if all(math.isfinite(v) for v in vals.values()) else None


def _dot(ax: Any, y: float, c: dict[str, float], level: str) -> None:
    ax.plot([c["mean"]], [y], "o", color=LEVEL_COLORS.get(level, "k"), ms=6, zorder=3)


def _forest_bits(ax: Any, points: list[Point]) -> None:
    """Bits on a log axis from `BITS_AXIS_FLOOR` (or lower, to show the smallest positive value): an end at or below
    the edge is an arrow there, labelled "≤ 0 ‡" where it is beyond the range (below 0 bits)."""
    positive = [v for _, _, c in points if c for v in (c["mean"], c["lo"], c["hi"]) if v > 0]
    edge = min([BITS_AXIS_FLOOR, *(v / 2 for v in positive)])
    right = max([1.0, *(v * 1.5 for v in positive)])
    ax.set_xscale("log")
    ax.set_xlim(edge, right)
    for y, level, c in points:
        if not c:
            continue
        lo, hi = max(c["lo"], edge), max(c["hi"], edge)
        ax.plot([lo, hi], [y, y], "-", color=LEVEL_COLORS.get(level, "k"), lw=2, alpha=0.7)
        if c["lo"] <= edge:
            ax.plot([edge], [y], "<", color=LEVEL_COLORS.get(level, "k"), ms=6)
            if c["lo"] < 0:
                ax.annotate("lower end < 0 ‡", (edge, y), xytext=(8, 4), textcoords="offset points", fontsize=6)
        if c["mean"] > 0:
            _dot(ax, y, c, level)


def _forest_fraction(ax: Any, points: list[Point]) -> None:
    """Accuracy as a percentage, each interval whole; past 100% a grey band, labelled beyond the metric's range."""
    hi = max([1.0, *(c["hi"] for _, _, c in points if c)])
    lo = min([0.0, *(c["lo"] for _, _, c in points if c)])
    ax.set_xlim(lo - 0.02, hi + 0.02)
    if hi > 1.0:
        ax.axvspan(1.0, hi + 0.02, color="#ddd", zorder=0)
        ax.annotate(
            "beyond the range ‡",
            (1.0, 0.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, 3),
            textcoords="offset points",
            fontsize=6,
            color="#555",
        )
    if lo < 0.0:
        ax.axvspan(lo - 0.02, 0.0, color="#ddd", zorder=0)
    ax.xaxis.set_major_formatter(lambda x, _: f"{100 * x:.0f}%")
    for y, level, c in points:
        if not c:
            continue
        ax.plot([c["lo"], c["hi"]], [y, y], "-", color=LEVEL_COLORS.get(level, "k"), lw=2, alpha=0.7)
        _dot(ax, y, c, level)
