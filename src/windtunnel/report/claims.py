"""The paper's claims judged from the report's own numbers: reproduced, refuted, or undecided, and why.

`CLAIMS` is the table: each claim's words, its rule in one line, and the function that applies the rule to `Evidence`
(Table 1's cells, the runs behind them and the geometry across seeds). The rules are conservative by construction:

* one seed decides nothing, either way: a one-seed ✓ reproduces (or refutes) no more than a one-seed ✗ refutes;
* a claim that an architecture is exact is reproduced by a ✓ cell of two seeds or more and refuted only by a ✗ that a
  larger budget is unlikely to overturn: the model left the context-blind floor, every seed's validation error had
  stopped falling at its last evaluation, and there are at least two seeds;
* a claim that an architecture is *not* exact is refuted by a ✓ and reproduced only by a decisive ✗ (plateaued, two
  seeds or more) on a tunnel some other architecture made exact (two seeds or more) at the same budget;
* a geometry claim is judged only on a model that infers (◐ or ✓), refuted only on a ✓ one with two seeds or more,
  and a probe refutes only as the paper measured it at its scale (`scale_gaps`; for the layer-0 keys also the token
  set and a width-matched Gaussian baseline): otherwise "not reproduced at this budget", with the evidence;
* everything else is undecided, with the reason: not run, not probed, one seed, still falling, on the floor.

Every claim states its scope (`scope_text`: the sizes it was tested at beside the paper's); a claim over a cell to
which the tier added seeds because its first seeds disagreed (with each other, or with their pooled mark) says so and
gives the first seeds' pooled mark
(`added_seeds_note`); a claim about recall shows the capacity curve (`capacity_text`).

"Still falling": the last periodic validation evaluation improved the error (1 − accuracy for accuracy) by more than
`STILL_FALLING` of the one before.

Where the rules live: `claim_evidence` (`Evidence`, `Cell`, `Finding`), `table1_claims` (the claims about Table 1's
cells and what makes a ✗ decisive), `geometry_claims` (the probes' claims, `scale_gaps`), `claim_scope` (`scope_text`,
`added_seeds_note`, `capacity_text`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from windtunnel.report import table_cells
from windtunnel.report.claim_evidence import Evidence, Finding
from windtunnel.report.claim_scope import added_seeds_note, capacity_text, scope_text
from windtunnel.report.collect import RunRecord
from windtunnel.report.geometry_claims import (
    CHANCE_ARI,
    CLUSTER_ARI,
    LENGTH_RATIO,
    NOT_AT_BUDGET,
    SHARPENING_PCT,
    _clusters_cell,
    _keys_cell,
    _length_cell,
    _manifold_cell,
    _probed,
    _sharpening_cell,
)
from windtunnel.report.table1_claims import MLPS, all_exact, exact, mlps_none, not_exact, weaker

# --- the table -----------------------------------------------------------------------------------------------

DECISIVE_FAIL = (
    "✗ refutes only off the context-blind floor, plateaued on every seed (not still falling), with ≥ 2 seeds"
)


@dataclass(frozen=True)
class Claim:
    """A claim of the paper: its words, its rule in one line, the function that applies the rule, and the cells it
    reads (`archs` on `tasks`; None: every tunnel), whose sizes its scope states beside the paper's."""

    text: str
    rule: str
    judge: Callable[[Evidence], Finding]
    archs: tuple[str, ...] = ()
    tasks: tuple[str, ...] | None = ()


def _exact_claim(text: str, arch: str, task: str) -> Claim:
    rule = f"reproduced by a ✓ cell of ≥ 2 seeds; {DECISIVE_FAIL}"
    return Claim(text, rule, partial(exact, arch, task), (arch,), (task,))


def _not_exact_claim(text: str, arch: str, task: str) -> Claim:
    rule = (
        "refuted by a ✓ cell of ≥ 2 seeds; reproduced by a ✗ off the context-blind floor (on it the model did not "
        "train: no evidence either way) and plateaued on ≥ 2 seeds where another architecture is "
    )
    return Claim(text, rule + "✓ at the same budget", partial(not_exact, arch, task), (arch,), (task,))


PROBE_SCALE = (
    f"a probe against the claim refutes only at the paper's scale (its task size and budget; for the keys its token "
    f"set and a width-matched Gaussian baseline), else '{NOT_AT_BUDGET}'"
)


def _geometry_claim(text: str, rule: str, arch: str, tasks: tuple[str, ...], judge: Callable[..., Any]) -> Claim:
    def apply(ev: Evidence) -> Finding:
        return _probed(ev, arch, tasks, partial(judge, ev))

    rule += f"; judged on ◐/✓ cells of ≥ 2 seeds only, refuted only on ✓ with ≥ 2 seeds; {PROBE_SCALE}"
    return Claim(text, rule, apply, (arch,), tasks)


CLAIMS: list[Claim] = [
    _exact_claim("Transformer exact on bijection (belief accumulation)", "transformer", "bijection"),
    _exact_claim("Transformer exact on the HMM (belief transport)", "transformer", "hmm"),
    _exact_claim("Transformer exact on recall (random-access binding)", "transformer", "recall"),
    _exact_claim("Mamba exact on bijection (accumulation)", "mamba", "bijection"),
    _exact_claim("Mamba exact on the HMM (transport)", "mamba", "hmm"),
    Claim(
        "Mamba weaker than the transformer at binding (recall)",
        "reproduced when the transformer is ◐/✓ and Mamba a worse level on every seed, plateaued, >= 2 seeds (or both "
        "◐, Mamba's interval entirely below); "
        "refuted when Mamba is at least as good and ✓, or better; each cell ≥ 2 seeds",
        partial(weaker, "mamba", "transformer", "recall"),
        ("transformer", "mamba"),
        ("recall",),
    ),
    _exact_claim("LSTM exact on bijection (accumulation)", "lstm", "bijection"),
    _not_exact_claim("LSTM not exact on the HMM (no transport)", "lstm", "hmm"),
    _not_exact_claim("LSTM not exact on recall (no binding)", "lstm", "recall"),
    Claim(
        "MLPs realise no primitive",
        "refuted by any MLP ✓ of ≥ 2 seeds; reproduced when no MLP cell is ◐ or ✓ and one ✗ is decisive (off the "
        "context-blind floor, plateaued, ≥ 2 seeds, another architecture ✓ there)",
        mlps_none,
        MLPS,
        None,
    ),
    Claim(
        "Transformer and Mamba carry belief through the sticky HMM's long transport demand",
        f"both exact on hmm-sticky (✓ covers every window below the demand); {DECISIVE_FAIL}",
        partial(all_exact, ("transformer", "mamba"), "hmm-sticky"),
        ("transformer", "mamba"),
        ("hmm-sticky",),
    ),
    _geometry_claim(
        "Layer-0 keys orthogonal (transformer)",
        "mean |off-diagonal cos| of the L0 keys (key tokens) below both init and Gaussian keys over seeds; refuted "
        "when above both",
        "transformer",
        ("bijection", "hmm"),
        _keys_cell,
    ),
    _geometry_claim(
        "Query–key sharpening across layers (transformer)",
        f"attention entropy falls first → last layer by ≥ {SHARPENING_PCT:g}% on every probed seed; refuted when it "
        "does not fall on any",
        "transformer",
        ("bijection", "hmm"),
        _sharpening_cell,
    ),
    _geometry_claim(
        "Value manifold ordered by posterior entropy (transformer)",
        "|Spearman(PC1, H)| within position above the context-blind reference and init over seeds (pooled only "
        "supports, where within position is not measurable); refuted when within position at or below the reference",
        "transformer",
        ("bijection", "hmm"),
        _manifold_cell,
    ),
    _geometry_claim(
        "Mamba's states cluster by HMM state",
        f"k-means ARI against the MAP state ≥ {CLUSTER_ARI:g} on every probed seed; refuted when < {CHANCE_ARI:g} on "
        "every seed",
        "mamba",
        ("hmm",),
        _clusters_cell,
    ),
    Claim(
        f"Length generalisation to {LENGTH_RATIO:g}× the training length (transformer, HMM K)",
        f"the cell keeps its level at K ≥ {LENGTH_RATIO:g}× the trained K; judged on ◐/✓ cells only, refuted only "
        "when a ✓ drops, with ≥ 2 seeds",
        lambda ev: _probed(ev, "transformer", ("hmm",), lambda c: _length_cell("K", c)),
        ("transformer",),
        ("hmm",),
    ),
]


def judge_claims(
    records: list[RunRecord],
    table1: dict[str, dict[str, Any]],
    geometry: list[dict[str, Any]] | None = None,
    added: Mapping[str, Sequence[int]] | None = None,
) -> list[dict[str, str]]:
    """Every claim of `CLAIMS` judged on the report's numbers: {claim, verdict, evidence, why, rule, scope}. The
    evidence ends with the capacity curve of the claim's recall cells (`capacity_text`) and its scope (`scope_text`:
    the sizes it was tested at beside the paper's); the reasons end with the seeds the tier added to a cell of the
    claim after its first seeds disagreed (or agreed on a mark their pooled interval did not give), with those first
    seeds' pooled mark (`added_seeds_note`; `added`: the
    seeds reproduce.json says the tier added, as `added_seeds` takes it)."""
    ev = Evidence(records, table1, geometry or [])
    out = []
    for claim in CLAIMS:
        f = claim.judge(ev)
        tasks = claim.tasks if claim.tasks is not None else tuple(ev.columns)
        cells = [c for t in table_cells.task_order(set(tasks)) for a in claim.archs for c in ev.cells(a, t)]
        scope = scope_text(ev, claim.archs, claim.tasks)
        capacity = [capacity_text(c) for c in cells] if claim.tasks is not None else []  # a claim about a tunnel
        evidence = "; ".join(p for p in (f.evidence, *capacity) if p)
        why = "; ".join(p for p in (f.why, *(added_seeds_note(c, added) for c in cells)) if p)
        line = " · ".join(p for p in (evidence, f"scope: {scope}" if scope else "") if p)
        found = {"claim": claim.text, "verdict": f.verdict, "evidence": line, "why": why, "rule": claim.rule}
        out.append({**found, "scope": scope})
    return out


RULES_TEXT = (
    "Generated from the numbers below by report/claims.py, never by hand. Reproduced: the cells or probes show it on "
    "≥ 2 seeds (one seed decides nothing, a ✓ no more than a ✗). Refuted: only evidence a larger budget is unlikely "
    "to overturn (a ✗ off the context-blind floor whose validation error had stopped falling on each of ≥ 2 seeds; a "
    f"geometry probe against the claim on a ✓ model of ≥ 2 seeds, measured as the paper measured it at its scale, "
    f"else '{NOT_AT_BUDGET}'). Undecided: anything else, with the reason. Each claim states its scope: the sizes it "
    "was tested at (task, steps × batch, sequences seen) beside the paper's; where the tier added seeds to a cell "
    "because its first seeds disagreed on the mark, with each other or with their pooled mark, the claim says so and "
    "gives the first seeds' pooled mark. Each claim's rule "
    "is in results.json (claims)."
)
