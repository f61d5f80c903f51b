"""Verdicts at a glance follow the results: each rule of report/claims.py flips its verdict word on the evidence it
names, and the report puts the verdicts first, colours its marks in HTML and drops one-seed noise."""

from __future__ import annotations

import json
from typing import Any

import pytest

from claim_records import iv, keys_geometry, run, verdicts
from report_runs import write_run
from windtunnel.report import build_report, claim_evidence, claims
from windtunnel.report.collect import RunRecord

BIJECTION = "Transformer exact on bijection (belief accumulation)"


def seeds(task: str, arch: str, value: float, n: int = 3, **kw: Any) -> list[RunRecord]:
    return [run(task, arch, s, value, **kw) for s in range(n)]


UNIFORM = [run("bijection", "uniform", 0, 1.107)]  # the context-blind floor of the bijection column


def test_a_tick_reproduces_and_an_absent_column_is_not_run():
    v = verdicts(seeds("bijection", "transformer", 0.004) + UNIFORM)
    assert v[BIJECTION]["verdict"] == "reproduced"
    assert v[BIJECTION]["cells"] == "transformer/bijection ✓ 0.004, 3/3 seeds ✓"
    recall = v["Transformer exact on recall (random-access binding)"]
    assert (recall["verdict"], recall["why"]) == ("undecided", "not run in this report: no recall column")
    lstm = v["LSTM exact on bijection (accumulation)"]
    assert (lstm["verdict"], lstm["why"]) == ("undecided", "not run in this report: no lstm run of bijection")
    assert set(recall) - {"cells"} == {"claim", "verdict", "evidence", "why", "rule", "scope"} and recall["rule"]


@pytest.mark.parametrize(
    ("curve", "verdict", "why"),
    [
        ((0.5, 0.3), "undecided", "validation error still falling at the last evaluation (3/3 seeds)"),
        ((0.301, 0.3), "refuted", "off the floor, and its validation error had stopped falling on every seed"),
        ((), "undecided", "no validation curve to tell a plateau (3/3 seeds)"),
    ],
)
def test_a_fail_refutes_only_once_its_validation_error_stopped_falling(curve, verdict, why):
    v = verdicts(seeds("bijection", "transformer", 0.3, curve=curve) + UNIFORM)[BIJECTION]
    assert (v["verdict"], v["why"]) == (verdict, why)
    assert v["cells"] == "transformer/bijection ✗ 0.300, 0/3 seeds ✓"


def test_a_fail_on_the_context_blind_floor_or_of_one_seed_refutes_nothing():
    floor = seeds("bijection", "transformer", 1.107, curve=(1.107, 1.107))
    alone = verdicts(floor + seeds("bijection", "mamba", 1.2, curve=(1.2, 1.2)) + UNIFORM)
    assert alone[BIJECTION]["verdict"] == "undecided"
    why = alone[BIJECTION]["why"]
    assert why.startswith("on the context-blind floor") and "every architecture" in why
    mamba_left = verdicts(floor + seeds("bijection", "mamba", 0.2, curve=(0.2, 0.2)) + UNIFORM)
    assert mamba_left[BIJECTION]["why"].startswith("on the context-blind floor, which other architectures left: the")
    assert mamba_left["Mamba exact on bijection (accumulation)"]["verdict"] == "refuted"
    lstm = [run("bijection", "lstm", 0, 0.3, curve=(0.3, 0.3))]
    one = verdicts(lstm + UNIFORM)["LSTM exact on bijection (accumulation)"]
    assert one["verdict"] == "undecided" and one["why"].startswith("1 seed:")
    assert one["cells"] == "lstm/bijection ✗ 0.300"  # one seed: no seed count


def test_a_claim_that_an_architecture_fails_needs_another_to_be_exact_at_the_same_budget():
    claim = "LSTM not exact on the HMM (no transport)"
    floor = [run("hmm", "uniform", 0, 0.417)]  # the HMM column's context-blind floor
    lstm = seeds("hmm", "lstm", 0.2, n=2, curve=(0.2, 0.2))  # off the floor, no longer falling, on 2 seeds
    found = verdicts(lstm + seeds("hmm", "transformer", 0.004) + floor)[claim]
    assert found["verdict"] == "reproduced" and found["why"].startswith("off the floor, transformer ✓ at the same")
    unlearnt = verdicts(lstm + seeds("hmm", "transformer", 0.2, curve=(0.2, 0.2)) + floor)[claim]
    assert unlearnt["verdict"] == "undecided" and unlearnt["why"].startswith("no architecture reached ✓ on hmm")
    assert verdicts(seeds("hmm", "lstm", 0.004) + floor)[claim]["verdict"] == "refuted"
    # an LSTM that never left the floor: a failure to train and a limit of the architecture look alike there, so it is
    # no more evidence that it cannot transport belief than, under "exact", that it can (the context-blind predictor
    # would earn the claim otherwise)
    untrained = seeds("hmm", "lstm", 0.417, n=2, curve=(0.417, 0.417))
    blind = verdicts(untrained + seeds("hmm", "transformer", 0.004) + floor)[claim]
    assert blind["verdict"] == "undecided" and blind["why"].startswith("on the context-blind floor, which other arch")
    sticky = "Transformer and Mamba carry belief through the sticky HMM's long transport demand"
    both = seeds("hmm-sticky", "transformer", 0.004) + seeds("hmm-sticky", "mamba", 0.004)
    carried = verdicts(both + [run("hmm-sticky", "lstm", 0, 0.4)])[sticky]
    assert carried["verdict"] == "reproduced"
    assert "lstm/hmm-sticky ✗ 0.400, belief horizon none (of 3 obs)" in carried["evidence"]  # who carries belief
    mlps = "MLPs realise no primitive"
    exact = seeds("bijection", "transformer", 0.004)
    assert verdicts(exact + seeds("bijection", "mlp", 0.7, n=2, curve=(0.7, 0.7)) + UNIFORM)[mlps]["verdict"] == (
        "reproduced"
    )
    assert verdicts(exact + seeds("bijection", "mlp", 0.05, n=2, kl=0.05))[mlps]["verdict"] == "undecided"  # ◐
    assert verdicts(exact + seeds("bijection", "mlp", 0.004))[mlps]["verdict"] == "refuted"


@pytest.mark.parametrize(
    ("transformer", "mamba", "verdict"),
    [(1.0, 0.45, "reproduced"), (1.0, 1.0, "refuted"), (0.5, 0.4, "undecided")],
)
def test_mamba_weaker_at_binding_compares_the_recall_cells(transformer, mamba, verdict):
    recs = seeds("recall", "transformer", transformer) + seeds("recall", "mamba", mamba, curve=(mamba, mamba))
    assert verdicts(recs)["Mamba weaker than the transformer at binding (recall)"]["verdict"] == verdict


def test_a_mamba_that_failed_to_train_is_not_evidence_that_it_binds_worse():
    claim = "Mamba weaker than the transformer at binding (recall)"
    tf = seeds("recall", "transformer", 1.0)
    falling = seeds("recall", "mamba", 0.45, curve=(0.2, 0.45))  # still learning at the budget's end
    assert verdicts(tf + falling)[claim]["verdict"] == "undecided"
    assert "still falling" in verdicts(tf + falling)[claim]["why"]
    assert verdicts(tf + seeds("recall", "mamba", 0.45))[claim]["verdict"] == "undecided"  # no curve to tell
    one_binds = [run("recall", "mamba", 0, 1.0, curve=(1.0, 1.0))]
    one_binds += [run("recall", "mamba", s, 0.1, curve=(0.1, 0.1)) for s in (1, 2)]
    found = verdicts(tf + one_binds)[claim]
    assert found["verdict"] == "undecided" and "seeds disagree" in found["why"]


def test_geometry_claims_are_judged_on_models_that_infer():
    keys, sharpening = "Layer-0 keys orthogonal (transformer)", "Query–key sharpening across layers (transformer)"
    exact = [run("bijection", "transformer", s, 0.004, geometry=keys_geometry(0.05 + s / 100, 80.0)) for s in range(3)]
    v = verdicts(exact)
    assert v[keys]["verdict"] == "reproduced" and "vs init 0.160, Gaussian 0.140" in v[keys]["evidence"]
    assert v[sharpening]["verdict"] == "reproduced" and v[sharpening]["cells"].endswith(
        "80% lower, 80% lower, 80% lower"
    )
    against = [run("bijection", "transformer", s, 0.004, geometry=keys_geometry(0.5, -5.0)) for s in range(3)]
    for r in against:  # at the paper's budget, keys measured with the paper's width-matched Gaussian baseline
        r.config["train"] = {"steps": 50_000, "batch_size": 256}
        r.geometry["keys"]["by_token_set"]["key_tokens"]["gaussian_baseline"] = 0.082
    assert {verdicts(against)[c]["verdict"] for c in (keys, sharpening)} == {"refuted"}
    failed = [run("bijection", "transformer", s, 0.3, geometry=keys_geometry(0.05, 80.0)) for s in range(3)]
    why = verdicts(failed)[keys]["why"]
    assert why.startswith("transformer/bijection is ✗") and "infers" in why  # the cell, its mark, the reason
    assert "entropy error 0.3 > 0.1 bits" in why and "KL(exact ‖ model) 0.3 > 0.1 bits" in why  # its shortfall
    unprobed = verdicts(seeds("bijection", "transformer", 0.004))[keys]
    assert (unprobed["verdict"], unprobed["why"]) == ("undecided", "geometry not probed")


def test_length_generalisation_keeps_the_level_at_two_and_a_half_times_the_training_length():
    claim = "Length generalisation to 2.5× the training length (transformer, HMM K)"
    kept = verdicts(seeds("hmm", "transformer", 0.004, long=0.005))[claim]
    assert kept["verdict"] == "reproduced" and kept["cells"].endswith("at K=20 → ✓ 0.005 at K=50")
    assert verdicts(seeds("hmm", "transformer", 0.004, long=0.3))[claim]["verdict"] == "refuted"
    assert verdicts(seeds("hmm", "transformer", 0.004))[claim]["why"] == "not evaluated at 2.5× the training K"


def test_the_report_opens_with_the_verdicts_colours_its_marks_and_drops_one_seed_noise(tmp_path):
    metrics = {"entropy_mae_bits": iv(0.05), "kl_bits": iv(0.05)}  # ◐ on one seed
    evals = {"default": {"task_params": {}, "n": 10, "metrics": metrics}}
    run_dir = write_run(tmp_path / "runs", "bijection-transformer", evals=evals)
    results = build_report([run_dir], tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Verdicts at a glance" in md.splitlines()
    assert md.index("## Verdicts at a glance") < md.index("## Table 1")
    claim_line = next(line for line in md.splitlines() if line.startswith(f"- **undecided** · {BIJECTION}: "))
    assert "transformer/bijection ◐ 0.050" in claim_line and "scope: " in claim_line
    table1 = next(line for line in md[md.index("## Table 1") :].splitlines() if line.startswith("| transformer |"))
    assert table1.startswith("| transformer | ◐ 0.050 [0.050, 0.050] · KL 0.050 [0.050, 0.050] (paper ")
    assert "seed" not in table1 and "(0/1)" not in md
    saved = json.loads((tmp_path / "report" / "results.json").read_text())
    assert saved["claims"] == results["claims"] and len(saved["claims"]) == len(claims.CLAIMS)
    assert {c["verdict"] for c in saved["claims"]} <= {"reproduced", "refuted", "undecided"}
    html = (tmp_path / "report" / "report.html").read_text()
    assert "<span class='mark approximate'>◐</span> 0.050" in html  # coloured, the symbol kept as text
    assert "<span class='verdict undecided'>undecided</span>" in html and "overflow-x:auto" in html
    assert html.index("Verdicts at a glance") < html.index("Table 1")


def test_a_cell_of_unfinished_runs_only_says_so_and_an_absent_sticky_column_prints_no_empty_evidence():
    """Runs stopped before their budget are left out of the cells (never their config's run), and the claim says
    that is why it is undecided, not that nothing ran; a claim over an absent column has no ': ;' evidence."""
    stopped = [run("hmm", "transformer", s, 0.05) for s in range(3)]
    for r in stopped:
        r.config["train"] = {"steps": 7850, "batch_size": 64}
        r.evals["default"]["step"] = 2720
    v = verdicts(stopped)
    hmm = v["Transformer exact on the HMM (belief transport)"]
    assert hmm["verdict"] == "undecided"
    why = hmm["why"]
    assert why.startswith("no finished transformer run of hmm") and "unfinished" in why
    assert "2,720 of 7,850" in why and "3 runs" in why  # steps trained of the budget
    sticky = next(c for name, c in v.items() if "sticky HMM" in name)
    assert sticky["verdict"] == "undecided" and sticky["evidence"].strip("; ") == sticky["evidence"]


def test_a_claim_over_several_cells_gives_each_reason_once():
    """Two cells whose reasons share a part (both on the floor, one also still falling) name the shared part once:
    the sticky-HMM claim of the standard tier printed "on the context-blind floor ..." twice."""
    floor = "on the context-blind floor, as is every architecture in the column: the budget lifted none off it"
    falling = "validation error still falling at the last evaluation (1/3 seeds)"
    found = claim_evidence._combine(
        [
            claim_evidence.Finding(claim_evidence.UNDECIDED, "transformer/hmm-sticky ✗ 0.891", f"{floor}; {falling}"),
            claim_evidence.Finding(claim_evidence.UNDECIDED, "mamba/hmm-sticky ✗ 0.839", floor),
            claim_evidence.Finding(claim_evidence.UNDECIDED, "lstm/hmm-sticky ✗ 0.891", floor),
        ],
        claim_evidence.REPRODUCED,
    )
    assert found.why == f"{floor}; {falling}"
    assert found.evidence == "transformer/hmm-sticky ✗ 0.891; mamba/hmm-sticky ✗ 0.839; lstm/hmm-sticky ✗ 0.891"
