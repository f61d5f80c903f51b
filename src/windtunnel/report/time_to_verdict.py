"""Time to verdict: the step and training seconds at which a run's periodic validation evaluations first reached ◐
and ✓, summarised over a Table 1 cell's seeds and put in words."""

from __future__ import annotations

from collections import Counter
from typing import Any

from windtunnel.evaluation import crossings
from windtunnel.report.collect import RunRecord, validation_evals


def run_time_to_verdict(r: RunRecord) -> dict[str, Any]:
    """One run's time to verdict from its periodic validation evaluations (metrics.jsonl, `collect.validation_evals`):
    {"seed", "run", "steps" (trained), "evaluations" (with a recorded verdict; 0: no validation curve), "approx" and
    "exact": the first evaluation whose verdict is ◐ or better / ✓ ({"step", "train_s"}, `crossings.verdict_crossings`)
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
        **crossings.verdict_crossings(judged),
        "stopped_early": st.stopped_early,
    }


def cell_time_to_verdict(runs: list[RunRecord]) -> dict[str, Any]:
    """A Table 1 cell's time to verdict over its seeds (`run_time_to_verdict`): per mark ("approx": ◐ or better,
    "exact": ✓) how many of the seeds with a validation curve got there ("reached" of "of") and, over those that
    did, the median step and the median [min, max] training seconds (`crossings.summarize_marks`), None where no seed
    has a curve; "steps": the most steps any seed with a curve trained (the N of "not within N steps"); "curves":
    how many seeds have one; "seeds": each seed's own; "text": the cell's words (`time_to_verdict_text`)."""
    seeds = [run_time_to_verdict(r) for r in sorted(runs, key=lambda r: (r.seed, r.path.name))]
    curves = [s for s in seeds if s["evaluations"]]
    summary = crossings.summarize_marks([{m: s[m] for m in crossings.VERDICT_MARKS} for s in curves]) if curves else {}
    out: dict[str, Any] = {
        **{m: summary.get(m) for m in crossings.VERDICT_MARKS},
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
