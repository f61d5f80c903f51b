"""What each claim states beside its verdict: the sizes it was tested at beside the paper's (`scope_text`), the seeds
the tier added to its cells after their first seeds disagreed (`added_seeds_note`), and a recall cell's capacity curve
(`capacity_text`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from windtunnel.evaluation import marks
from windtunnel.report import formatting, table_cells
from windtunnel.report.claim_evidence import Cell, Evidence
from windtunnel.report.collect import RunRecord
from windtunnel.suites.paper import first_seeds
from windtunnel.suites.settings import paper_setting, values

# How a task parameter reads in a claim's scope ("{}" is its value); a parameter not listed reads "key=value".
PARAM_WORDS = {
    "N": "{} pairs",
    "key_vocab": "{} keys",
    "value_vocab": "{} values",
    "n_filler": "{} fillers",
    "score_at": "scored at the {}",
    "stickiness": "stickiness {}",
    "min_prob": "min prob {}",
}


def _value_text(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "–".join(map(str, v))
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)


def _params_text(task: str, params: dict[str, Any]) -> str:
    """The task parameters the paper sets (`suites.settings`, task.*), in its order, as `params` has them."""
    keys = list(values(paper_setting(task, "*"), "task.")) or sorted(params)
    return ", ".join(_param_word(k, params[k]) for k in keys if k in params)


def _paper_sequences(task: str, arch: str) -> int | None:
    """The sequences the paper's budget for the cell shows a model (steps × batch), None where it sets none."""
    train = values(paper_setting(task, arch), "train.")
    steps, batch = train.get("steps"), train.get("batch_size")
    return int(steps) * int(batch) if isinstance(steps, int) and isinstance(batch, int) else None


def _budget_text(runs: list[RunRecord]) -> str:
    """`1,200 steps × 32 = 38,400 sequences` of a cell's runs (a range of sequences seen where they stopped early;
    "with a curriculum" where its training changed the task's sizes on the way)."""
    r = runs[0]
    if r.steps <= 0:  # no training budget recorded
        return ""
    seen = sorted({x.state().sequences_seen for x in runs})
    text = f"{r.steps:,} steps × {r.batch_size}"
    text += f" = {seen[0]:,} sequences" if len(seen) == 1 else f", {seen[0]:,}–{seen[-1]:,} sequences (early stop)"
    return text + (", with a curriculum" if (r.config.get("train") or {}).get("curriculum") else "")


def _paper_budget_text(task: str, arch: str) -> str | None:
    train = values(paper_setting(task, arch), "train.")
    if (n := _paper_sequences(task, arch)) is None:
        return None
    return f"{train['steps']:,} steps × {train['batch_size']} = {n:,} sequences"


def scope_text(ev: Evidence, archs: tuple[str, ...], tasks: tuple[str, ...] | None) -> str:
    """What a claim was tested at beside the paper's, per tunnel: `recall tested at 16 pairs, 32 keys, …, 3,000 steps ×
    64 = 192,000 sequences; the paper's 64 pairs, 256 keys, …, 50,000 steps × 64 = 3,200,000 sequences`; "" where
    none of its cells ran. A budget that differs between the claim's architectures is given per architecture."""
    out = []
    for task in table_cells.task_order(set(tasks) & ev.columns if tasks is not None else ev.columns):
        cells = [c for a in archs for c in ev.cells(a, task)]
        if not cells:
            continue
        tested = table_cells.full_params(task, cells[0].runs[0].params) or cells[0].runs[0].params
        ours = {c.name: _budget_text(c.runs) for c in cells}
        paper_params = table_cells.full_params(task, values(paper_setting(task, "*"), "task."))
        theirs = {c.arch: b for c in cells if (b := _paper_budget_text(task, c.arch)) is not None}
        line = f"{task} tested at {', '.join(p for p in (_params_text(task, tested), _per_arch(ours)) if p)}"
        if paper_params is not None or theirs:
            paper = [_params_text(task, paper_params) if paper_params is not None else "", _per_arch(theirs)]
            line += f"; the paper's {', '.join(p for p in paper if p)}"
        out.append(line)
    return "; ".join(out)


def _per_arch(texts: dict[str, str]) -> str:
    """One text where every architecture has the same, else `arch text` each."""
    unique = list(dict.fromkeys(texts.values()))
    return unique[0] if len(unique) == 1 else ", ".join(f"{a} {t}" for a, t in texts.items())


def added_seeds(
    cell: Cell, added: Mapping[str, Sequence[int]] | None = None
) -> tuple[list[RunRecord], list[RunRecord]] | None:
    """(the first seeds, those the tier added) where the tier's disagreement rule added seeds to the cell
    (`suites.paper.more_seeds`: its first seeds' marks disagreed, with each other or with their pooled mark, so it ran
    more); None where it added none.
    `added`: what reproduce.json says it added to each cell (`task-arch` -> seeds); None (a record that does not say)
    infers it from the tier's first seeds (`suites.paper.first_seeds`)."""
    runs = sorted(cell.runs, key=lambda r: r.seed)
    if added is not None:
        extra = set(added.get(f"{cell.task}-{cell.arch}", ()))
        first, later = [r for r in runs if r.seed not in extra], [r for r in runs if r.seed in extra]
    else:
        n0 = first_seeds(cell.arch, (cell.runs[0].config.get("model") or {}).get("preset"))
        if n0 is None:
            return None
        first, later = [r for r in runs if r.seed < n0], [r for r in runs if r.seed >= n0]
        if len(first) != n0:
            return None
    if not first or not later:
        return None
    c = table_cells.cell_value(first, cell.data["metric"])
    if c is None or len({*c["seed_levels"], c["level"]}) < 2:  # the first seeds agreed: the further ones were asked for
        return None
    return first, later


def added_seeds_note(cell: Cell, added: Mapping[str, Sequence[int]] | None = None) -> str | None:
    """`transformer/recall: seeds 3, 4 added by the tier after its first 3 seeds disagreed (✓ ◐ ✓); those 3 pooled are
    ◐ 98.1%` (or `... after its first 3 seeds, each ✓, pooled to a lower mark; those 3 pooled are ◐ ...`): no claim
    rests on seeds added after a disagreement without saying so."""
    split = added_seeds(cell, added)
    if split is None:
        return None
    first, later = split
    c = table_cells.cell_value(first, cell.data["metric"])
    assert c is not None
    levels = c["seed_levels"]
    why = (
        f" disagreed ({' '.join(marks.MARK[lv] for lv in levels)})"
        if len(set(levels)) > 1
        else f", each {marks.MARK[levels[0]]}, pooled to a {_direction(levels[0], c['level'])} mark"
    )
    return (
        f"{cell.name}/{cell.task}: seed{'s' if len(later) > 1 else ''} {', '.join(str(r.seed) for r in later)} "
        f"added by the tier after its first {len(first)} seeds{why}; those {len(first)} pooled are "
        f"{marks.MARK[c['level']]} "
        f"{formatting.fmt(c['mean'], cell.data['metric'])}"
    )


def _direction(seeds: str, pooled: str) -> str:
    """ "lower" where the pooled level is worse than the level every seed has (`marks.LEVELS`, best first)."""
    return "lower" if marks.LEVELS.index(pooled) > marks.LEVELS.index(seeds) else "higher"


CAPACITY_PARAM = {"recall": "N"}  # a tunnel whose claims show the capacity curve: its size parameter


def capacity_text(cell: Cell) -> str | None:
    """A cell's capacity curve beside its claim: the headline at each evaluated size above the trained one, beside
    the share of it that was trained (N_trained / N): `capacity (trained at 16 pairs): 24 pairs ✗ 65.0% (16/24 =
    67% trained), 32 pairs ✗ 49.0% (16/32 = 50% trained)`; None where it was evaluated at no larger size."""
    param = CAPACITY_PARAM.get(cell.task)
    trained = (table_cells.full_params(cell.task, cell.runs[0].params) or cell.runs[0].params).get(param or "")
    if param is None or not isinstance(trained, int):
        return None
    metric, points = cell.data["metric"], []
    for setting, e in cell.runs[0].evals.items():
        n = (e.get("task_params") or {}).get(param)
        if isinstance(n, int) and n > trained and (c := table_cells.cell_value(cell.runs, metric, setting)) is not None:
            mark = f"{marks.MARK[c['level']]} {formatting.fmt(c['mean'], metric)}"
            points.append((n, f"{_param_word(param, n)} {mark} ({trained}/{n} = {100 * trained / n:.0f}% trained)"))
    if not points:
        return None
    curve = ", ".join(t for _, t in sorted(points))
    return f"{cell.name} capacity (trained at {_param_word(param, trained)}): {curve}"


def _param_word(param: str, value: Any) -> str:
    return PARAM_WORDS.get(param, f"{param}={{}}").format(_value_text(value))
