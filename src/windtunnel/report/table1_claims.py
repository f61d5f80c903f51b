"""The claims about Table 1's cells (an architecture exact or not exact on a tunnel, weaker than another, MLPs
realising no primitive), and what makes a ✗ decisive: off the context-blind floor, plateaued, on two seeds or more."""

from __future__ import annotations

from typing import Any

from windtunnel.evaluation import marks
from windtunnel.evaluation.metric_specs import METRICS
from windtunnel.geometry.seeds import dig
from windtunnel.report import table_cells
from windtunnel.report.claim_evidence import (
    MIN_SEEDS,
    REFUTED,
    REPRODUCED,
    UNDECIDED,
    Cell,
    Evidence,
    Finding,
    _combine,
    _reasons,
)
from windtunnel.report.collect import RunRecord

STILL_FALLING = 0.01  # a relative improvement of the error at the last evaluation above this: not yet a plateau
MLPS = ("mlp", "mlp-pointwise")


def _missing(ev: Evidence, arch: str, task: str) -> Finding | None:
    """Undecided where the column or the architecture's cell is not in this report."""
    if task not in ev.columns:
        return Finding(UNDECIDED, "", f"not run in this report: no {task} column")
    if not ev.cells(arch, task):
        variants = [r for r in ev.records if (r.arch, r.task) == (arch, task) and r.state().variant]
        if variants:  # left out of the cells: an unfinished, extended or edited run is not its config's run
            return Finding(UNDECIDED, "", f"no finished {arch} run of {task}: {_variant_text(variants)}")
        return Finding(UNDECIDED, "", f"not run in this report: no {arch} run of {task}")
    return None


def _variant_text(records: list[RunRecord]) -> str:
    """What the runs left out of the cells are, e.g. 'unfinished at step 2,720 of 7,850 (3 runs)'."""
    texts = [r.state().variant for r in records]
    counts = {t: texts.count(t) for t in dict.fromkeys(texts)}
    return "; ".join(f"{t} ({n} runs)" if n > 1 else str(t) for t, n in counts.items())


# --- what makes a ✗ decisive ---------------------------------------------------------------------------------


def still_falling(r: RunRecord, metric: str) -> bool | None:
    """Whether the run's validation error improved at its last periodic evaluation by more than `STILL_FALLING` of the
    one before (None: fewer than two evaluations)."""
    tail = r.curve(metric)[-2:]
    if len(tail) < 2:
        return None
    before, last = (METRICS[metric].error(v) for _, v in tail)
    return last < (1.0 - STILL_FALLING) * before


def _floors(ev: Evidence, task: str) -> list[float]:
    """The context-blind floor of a column: the best context-blind predictor's score in it (the uniform baseline, the
    per-position MLP) and a tunnel's failure floor (chance among recall's stored values)."""
    floors = [b.data["mean"] for b in ev.context_blind(task)]
    return floors + [
        ref.value for ref in table_cells.task_references(task, ev.records) if ref.floor and ref.value is not None
    ]


def _at_floor(closest: Any, m: dict[str, float], metric: str, floors: list[float]) -> bool:
    if closest == marks.CONTEXT_BLIND:
        return True
    spec = METRICS[metric]  # not measurably better than the best floor
    return not spec.better(spec.worst_end(m), spec.best(floors))


def on_floor(ev: Evidence, cell: Cell) -> bool | None:
    """Whether a cell has not measurably left the context-blind floor: its KL-nearest reference is the context-blind
    one, or its interval reaches the best context-blind predictor's score in its column (the uniform baseline, the
    per-position MLP) or a tunnel's failure floor (chance among recall's stored values). None where no floor is
    known."""
    c = cell.data
    floors = _floors(ev, cell.task)
    if c.get("closest") != marks.CONTEXT_BLIND and not floors:
        return None
    return _at_floor(c.get("closest"), c, c["metric"], floors)


def seeds_off_floor(ev: Evidence, cell: Cell) -> int:
    """How many of a cell's seeds measurably left the context-blind floor on their own (`on_floor`'s test on each
    seed's own scores: its KL-nearest reference and its bootstrap interval), checked before the pooled cell is
    called on the floor: a Student-t interval over few seeds may reach the floor where a seed clearly left it."""
    if len(cell.runs) < 2:
        return 0
    floors, metric = _floors(ev, cell.task), cell.data["metric"]
    off = 0
    for r in cell.runs:
        m = marks.finite(r.metric(metric))
        closest = (r.default.get("closest") or {}).get("name")
        if m is not None and (floors or closest == marks.CONTEXT_BLIND):
            off += not _at_floor(closest, m, metric, floors)
    return off


def _budget_reasons(cell: Cell) -> list[str]:
    """Why a ✗ of this cell may be the budget's: seeds still falling, seeds without a curve, one seed."""
    trend = [still_falling(r, cell.data["metric"]) for r in cell.runs]
    out = []
    of = f"/{len(trend)} seeds)" if len(trend) > 1 else ""
    if falling := sum(t is True for t in trend):
        out.append("validation error still falling at the last evaluation" + (f" ({falling}{of}" if of else ""))
    if blind := sum(t is None for t in trend):
        out.append("no validation curve to tell a plateau" + (f" ({blind}{of}" if of else ""))
    if len(cell.runs) < MIN_SEEDS:
        out.append("1 seed: one training seed's failure may be a bad draw")
    return out


def _floor_reason(ev: Evidence, cell: Cell) -> str | None:
    at = on_floor(ev, cell)
    if at is None:
        return "no context-blind reference to tell whether it left the floor"
    if not at:
        return None
    n = len(cell.runs)
    if off := seeds_off_floor(ev, cell):  # per seed first: never "on the floor" where a seed measurably left it
        if off < n:
            return f"seeds disagree: {off} of {n} measurably off the context-blind floor"
        floor = marks.unseparated("the context-blind floor", n, cell.data.get("interval"))
        return f"{floor} over seeds (each of {n} seeds measurably off it on its own)"
    if all(on_floor(ev, c) and not seeds_off_floor(ev, c) for c in ev.column(cell.task)):
        return "on the context-blind floor, as is every architecture in the column: the budget lifted none off it"
    return (
        "on the context-blind floor, which other architectures left: the floor does not tell a failure to train from a "
        "limit of the architecture"
    )


def _level_reason(cell: Cell) -> str | None:
    """Why a cell that is neither ✓ nor ✗ decides nothing."""
    if cell.level == "invalid":
        return "⚠ sees the answer: its numbers are evidence of nothing"
    if cell.level == "approximate":
        short = ", ".join(dig(cell.data, "verdict", "reasons") or [])
        return f"◐ approximate{f' ({short})' if short else ''}: between the claim and its negation at this budget"
    return None


# --- claims about Table 1 ------------------------------------------------------------------------------------


ONE_SEED_TICK = "1 seed: one training seed's ✓ may be a good draw, as its ✗ may be a bad one (deciding needs ≥ 2 seeds)"


def _exact_cell(ev: Evidence, cell: Cell) -> Finding:
    if cell.level == "exact":
        if len(cell.runs) < MIN_SEEDS:
            return Finding(UNDECIDED, cell.text(), ONE_SEED_TICK)
        return Finding(REPRODUCED, cell.text())
    if reason := _level_reason(cell):
        return Finding(UNDECIDED, cell.text(), reason)
    reasons = [r for r in (_floor_reason(ev, cell), *_budget_reasons(cell)) if r]
    if reasons:
        return Finding(UNDECIDED, cell.text(), "; ".join(reasons))
    return Finding(REFUTED, cell.text(), "off the floor, and its validation error had stopped falling on every seed")


def _not_exact_cell(ev: Evidence, cell: Cell) -> Finding:
    if cell.level == "exact":
        if len(cell.runs) < MIN_SEEDS:
            return Finding(UNDECIDED, cell.text(), ONE_SEED_TICK)
        return Finding(REFUTED, cell.text())
    if reason := _level_reason(cell):
        return Finding(UNDECIDED, cell.text(), reason)
    # a ✗ on the context-blind floor does not tell a failure to train from a limit of the architecture: it says no
    # more that the architecture cannot infer than, under "exact", that it can
    floor = _floor_reason(ev, cell)
    exact = [
        c.name
        for c in ev.column(cell.task)
        if c.arch != cell.arch and c.level == "exact" and len(c.runs) >= MIN_SEEDS  # one seed's ✓ decides nothing
    ]
    reasons = [floor] if floor else []
    if not exact:
        reasons.append(
            f"no architecture reached ✓ on {cell.task} at this budget (on ≥ {MIN_SEEDS} seeds), so a ✗ says nothing"
        )
    reasons += _budget_reasons(cell)
    if reasons:
        return Finding(UNDECIDED, cell.text(), "; ".join(reasons))
    return Finding(
        REPRODUCED, cell.text(), f"off the floor, {', '.join(exact)} ✓ at the same budget; it had stopped falling"
    )


def exact(arch: str, task: str, ev: Evidence) -> Finding:
    """The architecture is exact on the tunnel: any configuration's ✓ reproduces it."""
    return _missing(ev, arch, task) or _combine([_exact_cell(ev, c) for c in ev.cells(arch, task)], REPRODUCED)


def not_exact(arch: str, task: str, ev: Evidence) -> Finding:
    """The architecture is not exact on the tunnel: any configuration's ✓ refutes it."""
    return _missing(ev, arch, task) or _combine([_not_exact_cell(ev, c) for c in ev.cells(arch, task)], REFUTED)


def mlps_none(ev: Evidence) -> Finding:
    """No MLP is exact or approximate anywhere, and at least one fails decisively (`_not_exact_cell`)."""
    cells = [c for arch in MLPS for task in table_cells.task_order(ev.columns) for c in ev.cells(arch, task)]
    if not cells:
        return Finding(UNDECIDED, "", "not run in this report: no MLP runs")
    findings = [_not_exact_cell(ev, c) for c in cells]
    evidence = "; ".join(c.text() for c in cells)
    if any(c.level == "exact" and len(c.runs) >= MIN_SEEDS for c in cells):
        return Finding(REFUTED, evidence)
    if ticks := [f"{c.name}/{c.task} ✓ on {ONE_SEED_TICK}" for c in cells if c.level == "exact"]:
        return Finding(UNDECIDED, evidence, "; ".join(ticks))
    if between := [f"{c.name}/{c.task} {reason}" for c in cells if (reason := _level_reason(c))]:
        return Finding(UNDECIDED, evidence, "; ".join(between))
    if decisive := [f.why for f in findings if f.verdict == REPRODUCED]:
        return Finding(REPRODUCED, evidence, "no MLP cell ◐ or ✓; " + decisive[0])
    return Finding(UNDECIDED, evidence, "no MLP failure is decisive: " + _reasons(findings))


def all_exact(archs: tuple[str, ...], task: str, ev: Evidence) -> Finding:
    """Every one of `archs` is exact on the tunnel; the evidence shows every trained architecture's cell there with
    its belief horizon (which architectures carry belief)."""
    findings = [exact(a, task, ev) for a in archs]
    verdicts = {f.verdict for f in findings}
    verdict = REFUTED if REFUTED in verdicts else REPRODUCED if verdicts == {REPRODUCED} else UNDECIDED
    shown = sorted(ev.column(task), key=lambda c: table_cells.arch_row(c.arch))
    evidence = "; ".join(c.text(horizon=True) for c in shown) or "; ".join(f.evidence for f in findings if f.evidence)
    return Finding(verdict, evidence, _reasons(findings, verdict))


def weaker(arch: str, than: str, task: str, ev: Evidence) -> Finding:
    """`arch` is weaker than `than` on the tunnel: a worse level, or at ◐ both an interval entirely below."""
    if missing := _missing(ev, arch, task) or _missing(ev, than, task):
        return missing
    a = min(ev.cells(arch, task), key=lambda c: marks.LEVELS.index(c.level))
    b = min(ev.cells(than, task), key=lambda c: marks.LEVELS.index(c.level))
    evidence = f"{a.text()} vs {b.text()}"
    if "invalid" in (a.level, b.level):
        return Finding(UNDECIDED, evidence, "⚠ sees the answer: no comparison")
    if one := [c.name for c in (a, b) if len(c.runs) < MIN_SEEDS]:
        return Finding(UNDECIDED, evidence, f"{' and '.join(one)} on 1 seed: deciding needs ≥ {MIN_SEEDS} seeds")
    rank_a, rank_b = marks.LEVELS.index(a.level), marks.LEVELS.index(b.level)
    if rank_a < rank_b or a.level == b.level == "exact":
        return Finding(REFUTED, evidence, f"{arch} at least as good as {than} here")
    if b.level == "fail":
        return Finding(UNDECIDED, evidence, f"{than} not ◐ or ✓ at this budget: nothing to be weaker than")
    if rank_a > rank_b:
        # a weaker mark from an optimisation failure is no evidence about the architecture: its seeds must agree
        # (none at `than`'s level) and its curve must have stopped falling, on >= 2 seeds
        level_b = marks.LEVELS.index(b.level)
        if any(marks.LEVELS.index(lv) <= level_b for lv in a.data.get("seed_levels") or []):
            return Finding(UNDECIDED, evidence, f"{arch}'s seeds disagree: one reaches {than}'s level")
        if reasons := _budget_reasons(a):
            return Finding(UNDECIDED, evidence, "; ".join(reasons))
        return Finding(REPRODUCED, evidence)
    spec = METRICS[a.data["metric"]]  # both ◐: separated intervals decide
    if spec.better(spec.worst_end(b.data), spec.best_end(a.data)):
        return Finding(REPRODUCED, evidence, "both ◐, its interval entirely worse")
    if spec.better(spec.worst_end(a.data), spec.best_end(b.data)):
        return Finding(REFUTED, evidence, "both ◐, its interval entirely better")
    few = next((c.data for c in (a, b) if marks.too_few_seeds(c.data["seeds"], c.data.get("interval"))), None)
    if few is not None:
        return Finding(UNDECIDED, evidence, f"both ◐, {marks.unseparated(than, few['seeds'], few.get('interval'))}")
    return Finding(UNDECIDED, evidence, "both ◐, intervals not separated")
