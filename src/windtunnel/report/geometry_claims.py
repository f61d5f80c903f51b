"""The geometry claims judged on each cell (layer-0 key orthogonality, query–key sharpening, the value manifold
ordered by entropy, Mamba's state clusters, length generalisation): only on a model that infers, and a probe against
a claim refutes only as the paper measured it at its scale."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from windtunnel.evaluation import marks
from windtunnel.geometry.keys import PAPER as KEYS_PAPER
from windtunnel.geometry.seeds import dig
from windtunnel.report import formatting, table_cells
from windtunnel.report.claim_evidence import (
    MIN_SEEDS,
    REFUTED,
    REPRODUCED,
    UNDECIDED,
    Cell,
    Evidence,
    Finding,
    _combine,
)
from windtunnel.report.claim_scope import _paper_sequences
from windtunnel.text import number

NOT_AT_BUDGET = "not reproduced at this budget"  # a probe against the claim, measured away from the paper's scale
KEY_WIDTH_TOLERANCE = 0.15  # a Gaussian-key baseline within this fraction of the paper's: a width-matched statistic
PAPER_GAUSSIAN_KEYS = float(str(KEYS_PAPER["random_baseline"]))  # the paper's random-key mean |cos| (0.082)
SHARPENING_PCT = 10.0  # attention entropy must fall first → last layer by at least this much (paper: 85–90%)
CLUSTER_ARI = 0.5  # k-means clusters agree with the MAP states at least this well: "clusters by state"
CHANCE_ARI = 0.1  # below this the clusters are at chance (ARI ≈ 0)
LENGTH_RATIO = 2.5  # the paper's length test: trained at K = 20, evaluated at K = 50
INFERS = ("exact", "approximate")  # the levels of a model whose geometry can speak for the claims


def _numbers(values: list[Any]) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]


def _judge_geometry(
    cell: Cell,
    evidence: str,
    supports: bool,
    contradicts: bool,
    seeds: int,
    otherwise: str,
    scale_gaps: list[str] | None = None,
) -> Finding:
    """A geometry finding on one cell: it supports the claim only on a model that infers (◐ or ✓) probed at
    `MIN_SEEDS` seeds or more, contradicts it only on a ✓ one probed at `MIN_SEEDS` seeds or more; a probe's
    contradiction refutes only at the paper's scale (`scale_gaps`: how this measurement differs from the paper's,
    None for a claim read from evaluations, not a probe): otherwise "not reproduced at this budget"."""
    if cell.level not in INFERS:
        missed = marks.shortfall(cell.level, dig(cell.data, "verdict", "reasons") or [])
        why = f"{cell.name}/{cell.task} is {marks.MARK[cell.level]}{f' ({missed})' if missed else ''}: the claim is "
        return Finding(UNDECIDED, evidence, why + "about a model that infers (◐ or ✓)")
    if supports and seeds < MIN_SEEDS:
        return Finding(UNDECIDED, evidence, f"for the claim on 1 seed: reproducing needs ≥ {MIN_SEEDS} seeds")
    if supports:
        return Finding(REPRODUCED, evidence)
    if contradicts and cell.level == "exact" and seeds >= MIN_SEEDS and scale_gaps:
        gaps = ", ".join(scale_gaps)
        why = f"{NOT_AT_BUDGET}: against the claim on {cell.text()}, but not as the paper measured it at its scale"
        why += f" ({gaps})"
        return Finding(UNDECIDED, evidence, why)
    if contradicts and cell.level == "exact" and seeds >= MIN_SEEDS:
        return Finding(REFUTED, evidence, f"on {cell.text()}")
    if contradicts:
        return Finding(UNDECIDED, evidence, f"against the claim, but on {cell.text()} (refuting needs ✓ and 2 seeds)")
    return Finding(UNDECIDED, evidence, otherwise)


def _probed(ev: Evidence, arch: str, tasks: tuple[str, ...], judge: Callable[[Cell], Finding | None]) -> Finding:
    """`judge` on every probed cell of `arch` on `tasks`, combined (reproduced or refuted only where no cell says the
    other); undecided where none was run or probed."""
    cells = [c for t in tasks for c in ev.cells(arch, t)]
    if not cells:
        return Finding(UNDECIDED, "", f"not run in this report: no {arch} run of {' or '.join(tasks)}")
    findings = [f for c in cells if (f := judge(c)) is not None]
    if not findings:
        return Finding(UNDECIDED, "; ".join(c.text() for c in cells), "geometry not probed")
    return _combine(findings, None)


def _seed_quantity(ev: Evidence, cell: Cell, names: list[str]) -> tuple[str, dict[str, Any]] | None:
    """The first of `names` the cell's geometry across seeds has a trained number for."""
    g = ev.seed_geometry(cell)
    return next(((n, g[n]) for n in names if "mean" in (dig(g, n, "trained") or {})), None)


def _interval_of(q: dict[str, Any]) -> str | None:
    """ "seeds" where a geometry quantity's trained number has an interval over seeds (two or more), else None."""
    return "seeds" if q["trained"].get("interval") else None


def _ends(s: dict[str, Any]) -> tuple[float, float]:
    """The across-seed interval of a `geometry.seeds.seed_summary`, or its value range (one seed: the value)."""
    lo, hi = s["interval"] if s.get("interval") else (min(s["values"]), max(s["values"]))
    return float(lo), float(hi)


def _keys_cell(ev: Evidence, cell: Cell) -> Finding | None:
    found = _seed_quantity(ev, cell, ["L0 key mean |cos|, key tokens", "L0 key mean |cos|, all tokens"])
    if found is None:
        return None
    name, q = found
    refs = {k: q[k]["mean"] for k in ("init", "baseline") if "mean" in (q.get(k) or {})}
    if not refs:
        return Finding(UNDECIDED, f"{cell.name}/{cell.task} {name}", "no init or Gaussian baseline")
    lo, hi = _ends(q["trained"])
    words = {"init": "init", "baseline": "Gaussian"}
    evidence = f"{cell.name}/{cell.task} {name} {q['trained']['mean']:.3f} [{lo:.3f}, {hi:.3f}] vs " + ", ".join(
        f"{words[k]} {v:.3f}" for k, v in refs.items()
    )
    if name.endswith("key tokens") and cell.runs[0].params.get("with_replacement") is False:
        evidence += " (keys distinct within a sequence: no query needs a past key token, so nothing trains them apart)"
    n = q["trained"]["n_seeds"]
    why = marks.unseparated("init and Gaussian" if len(refs) > 1 else words[next(iter(refs))], n, _interval_of(q))
    gaps = _key_gaps(name, refs.get("baseline")) + scale_gaps(cell)
    return _judge_geometry(cell, evidence, hi < min(refs.values()), lo > max(refs.values()), n, why, gaps)


def _key_width(gaussian: float) -> float:
    """The key width d whose i.i.d. Gaussian keys have mean |cos| `gaussian` (≈ sqrt(2 / (π d)))."""
    return 2.0 / (math.pi * gaussian**2)


def _key_gaps(name: str, gaussian: float | None) -> list[str]:
    """How a layer-0 key statistic differs from the paper's (`geometry.keys.PAPER`: the key tokens, against Gaussian
    keys of mean |cos| 0.082, a key width near 95): the token set and the width its Gaussian baseline implies."""
    paper = PAPER_GAUSSIAN_KEYS
    gaps = [] if name.endswith("key tokens") else [f"{name.rsplit(', ', 1)[-1]}, not the key tokens the paper used"]
    if gaussian is None:
        gaps.append("no Gaussian baseline to match the paper's width")
    elif abs(gaussian - paper) > KEY_WIDTH_TOLERANCE * paper:
        gaps.append(
            f"Gaussian keys {gaussian:.3f} (width ≈ {_key_width(gaussian):.0f}) against the paper's {paper:g} (width ≈ "
            f"{_key_width(paper):.0f})"
        )
    return gaps


def scale_gaps(cell: Cell) -> list[str]:
    """How a cell was trained away from the paper's scale: a task smaller or otherwise set than the paper's, and
    fewer sequences seen than the paper's budget for the architecture (steps × batch); [] at the paper's scale."""
    gaps = [] if table_cells.at_paper_params(cell.task, cell.runs[0].params) else ["task not at the paper's size"]
    paper = _paper_sequences(cell.task, cell.arch)
    seen = max(r.state().sequences_seen for r in cell.runs)
    if paper is not None and seen < paper:
        gaps.append(f"{seen:,} sequences seen against the paper's {paper:,}")
    return gaps


def _sharpening_cell(ev: Evidence, cell: Cell) -> Finding | None:
    drops = _numbers([dig(r.geometry, "attention", "drop_first_to_last_pct") for r in cell.runs])
    if not drops:
        return None
    evidence = f"{cell.name}/{cell.task} attention entropy, last layer against first: " + ", ".join(
        f"{number(abs(d), '.0f')}% {'lower' if d >= 0 else 'higher'}"
        for d in drops  # a negative drop is a rise
    )
    supports, contradicts = all(d >= SHARPENING_PCT for d in drops), all(d <= 0 for d in drops)
    why = f"a drop under {SHARPENING_PCT:g}%"
    return _judge_geometry(cell, evidence, supports, contradicts, len(drops), why, scale_gaps(cell))


def _manifold_cell(ev: Evidence, cell: Cell) -> Finding | None:
    where = [f"{rep} at {pos}" for pos in ("value positions", "scored positions") for rep in ("final", "values")]
    within = _seed_quantity(ev, cell, [f"|Spearman(PC1, H)| within position, {w}" for w in where])
    pooled = _seed_quantity(ev, cell, [f"|Spearman(PC1, H)|, {w}" for w in where])
    if (found := within or pooled) is None:
        return None
    name, q = found
    blind, init = dig(q, "baseline", "mean"), dig(q, "init", "mean")
    lo, hi = _ends(q["trained"])
    evidence = f"{cell.name}/{cell.task} {name} {q['trained']['mean']:.3f} vs context-blind " + (
        f"{blind:.3f}" if blind is not None else "—"
    )
    if blind is None:
        return Finding(UNDECIDED, evidence, "no context-blind reference: position alone may order it")
    supports = lo > max(blind, init if init is not None else -math.inf)
    if within is None:  # pooled over positions: position may fake it, so it can support the claim but never refute it
        why = "within position not measurable here, and position with the current input orders the entropy as well"
        return _judge_geometry(cell, evidence, supports, False, q["trained"]["n_seeds"], why, scale_gaps(cell))
    n = q["trained"]["n_seeds"]
    why = marks.unseparated("the context-blind reference and init", n, _interval_of(q), "not measurably above")
    return _judge_geometry(cell, evidence, supports, hi <= blind, n, why, scale_gaps(cell))


def _clusters_cell(ev: Evidence, cell: Cell) -> Finding | None:
    aris = _numbers([dig(r.geometry, "clusters", "ari") for r in cell.runs])
    if not aris:
        return None
    sil = _numbers([dig(r.geometry, "clusters", "silhouette") for r in cell.runs])
    evidence = f"{cell.name}/{cell.task} cluster ARI " + ", ".join(f"{a:.2f}" for a in aris)
    evidence += (" · silhouette " + ", ".join(f"{s:.2f}" for s in sil)) if sil else ""
    supports, contradicts = all(a >= CLUSTER_ARI for a in aris), all(a < CHANCE_ARI for a in aris)
    why = "ARI between chance and clustered"
    return _judge_geometry(cell, evidence, supports, contradicts, len(aris), why, scale_gaps(cell))


def _length_cell(param: str, cell: Cell) -> Finding:
    trained = (table_cells.full_params(cell.task, cell.runs[0].params) or cell.runs[0].params).get(param)
    longer = [
        (value, name)
        for name, e in cell.runs[0].evals.items()
        if isinstance(value := (e.get("task_params") or {}).get(param), (int, float))
        and isinstance(trained, (int, float))
        and value >= LENGTH_RATIO * trained
    ]
    if not longer:
        return Finding(UNDECIDED, cell.text(), f"not evaluated at {LENGTH_RATIO:g}× the training {param}")
    value, setting = max(longer)
    long = table_cells.cell_value(cell.runs, cell.data["metric"], setting)
    if long is None:
        return Finding(UNDECIDED, cell.text(), f"no {param}={value} number")
    at_long = f"{marks.MARK[long['level']]} {formatting.fmt(long['mean'], cell.data['metric'])}"
    evidence = f"{cell.text()} at {param}={trained} → {at_long} at {param}={value}"
    kept = marks.LEVELS.index(long["level"]) <= marks.LEVELS.index(cell.level)
    return _judge_geometry(cell, evidence, kept, not kept, len(cell.runs), "")
