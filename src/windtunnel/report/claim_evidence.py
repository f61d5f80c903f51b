"""What the paper's claims are judged on and what a judgement is: `Evidence` (Table 1's cells, the runs behind them and
the geometry across seeds), its `Cell`s, a claim's `Finding` and its verdict words, and how several cells' findings
combine into one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from windtunnel import models
from windtunnel.evaluation import marks
from windtunnel.report import table_cells
from windtunnel.report.collect import RunRecord
from windtunnel.report.formatting import fmt, horizon_text

REPRODUCED, REFUTED, UNDECIDED = "reproduced", "refuted", "undecided"
MIN_SEEDS = 2  # the fewest training seeds a failure must hold on before it counts against (or for) a claim


@dataclass(frozen=True)
class Finding:
    """A claim's verdict, the cells or probes that decide it, and why (the reason where undecided)."""

    verdict: str
    evidence: str
    why: str = ""


@dataclass
class Cell:
    """One Table 1 cell of the finished runs of one configuration: its row name, the cell and its runs."""

    arch: str
    task: str
    label: str  # the configuration's label ("" where the architecture has one configuration of the task)
    data: dict[str, Any]
    runs: list[RunRecord]

    @property
    def name(self) -> str:
        return f"{self.arch} ({self.label})" if self.label else self.arch

    @property
    def level(self) -> str:
        return str(self.data["level"])

    def text(self, horizon: bool = False) -> str:
        """The cell in words, "transformer/bijection ✗ 0.268, 0/3 seeds ✓" (a seed count only where there are more
        than one), with its belief horizon if asked."""
        c = self.data
        seeds = f", {c['seeds_exact']}/{c['seeds']} seeds ✓" if c["seeds"] > 1 else ""
        belief = f", belief horizon {horizon_text(c)}" if horizon and c.get("horizon_max") is not None else ""
        return f"{self.name}/{self.task} {marks.MARK[self.level]} {fmt(c['mean'], c['metric'])}{seeds}{belief}"


@dataclass
class Evidence:
    """What the claims are judged on: the run records, Table 1's data (`tables.primitives_table`) and the geometry
    across seeds (`build.geometry_across_seeds`); cells of runs that are not their config's run are left out."""

    records: list[RunRecord]
    table1: dict[str, dict[str, Any]]
    geometry: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.columns = {r.task for r in self.records}
        self._cells: dict[tuple[str, str], list[Cell]] = {}
        for (arch, task), by_label in table_cells.configurations(self.records).items():
            for label, runs in by_label.items():
                data = self.table1.get(f"{arch} ({label})" if label else arch, {}).get(task)
                if data is not None and not runs[0].state().variant:
                    self._cells.setdefault((arch, task), []).append(Cell(arch, task, label, data, runs))

    def cells(self, arch: str, task: str) -> list[Cell]:
        return self._cells.get((arch, task), [])

    def column(self, task: str) -> list[Cell]:
        """Every cell of a task's column, trained architectures only (no baselines, nothing context-blind)."""
        return [c for (a, t), cells in self._cells.items() if t == task and _trained(a) for c in cells]

    def context_blind(self, task: str) -> list[Cell]:
        """The cells of a task's column that read no context and are not exact (the oracle need not read it)."""
        return [
            c
            for (a, t), cells in self._cells.items()
            if t == task and models.info(a).context_blind
            for c in cells
            if c.level != "exact"
        ]

    def seed_geometry(self, cell: Cell) -> dict[str, Any]:
        """The cell's entry of the geometry across seeds ({} where it was not probed)."""
        key = (cell.task, cell.arch, cell.label)
        return next((g for g in self.geometry if (g["task"], g["arch"], g["config"]) == key), {})


def _trained(arch: str) -> bool:
    return not (models.is_baseline(arch) or models.info(arch).context_blind)


def _combine(findings: list[Finding], wins: str | None) -> Finding:
    """One verdict from several cells: `wins` where any cell has it (a ✓ shows an architecture can); else the verdict
    all share; with `wins` None (geometry), the one decided verdict among undecided cells; else undecided. The
    evidence of all, the reasons of the cells that carry the verdict."""
    verdicts = {f.verdict for f in findings}
    decided = verdicts - {UNDECIDED}
    if wins in verdicts:
        verdict = wins
    elif len(verdicts) == 1 or (wins is None and len(decided) == 1):
        verdict = (decided or verdicts).pop()
    else:
        verdict = UNDECIDED
    why = "the cells disagree" if verdict == UNDECIDED and len(decided) == 2 else _reasons(findings, verdict)
    return Finding(verdict, "; ".join(f.evidence for f in findings if f.evidence), why)


def _reasons(findings: list[Finding], verdict: str | None = None) -> str:
    """The reasons of the findings (of those with `verdict`, where given), each once, also where two cells' reasons
    share a part ("on the floor; still falling" and "on the floor")."""
    return "; ".join(
        dict.fromkeys(p for f in findings if f.why and verdict in (None, f.verdict) for p in f.why.split("; "))
    )
