"""Honest wording at small numbers of seeds: a Student-t interval over two seeds has one degree of freedom
and covers almost anything, so the report says "too few seeds to separate" where it would have said "not separated";
it never calls a cell "no better than context-blind" while one of its seeds is measurably better; it prints intervals
unclipped; a sweep's ★ says when it is not separated from the runner-up; and a ✗ names the condition of ◐ it missed,
never ✓'s."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from report_runs import write_run
from windtunnel.evaluation import marks
from windtunnel.report import build_report, claims, sweep_table, table_cells, tables
from windtunnel.report.build import geometry_across_seeds
from windtunnel.report.collect import RunRecord
from windtunnel.report.formatting import BEYOND_RANGE, fmt
from windtunnel.store.records.drivers import SweepTableRecord, plain

BIJECTION = "Transformer exact on bijection (belief accumulation)"
CLOSEST = "HMM: KL-nearest reference · belief horizon"


def iv(mean: float, half: float = 0.0) -> dict[str, float]:
    return {"mean": mean, "lo": mean - half, "hi": mean + half}


def hmm_eval(
    kl: float,
    blind_gain: tuple[float, float] = (0.4, 0.01),
    window_gain: tuple[float, float] = (0.05, 0.01),
    window_kl: float = 0.5,
    err: float = 0.005,
) -> dict[str, Any]:
    """One seed's default evaluation of the HMM: entropy error `err`, KL(exact ‖ model) `kl`, and two references,
    the context-blind one and the one-observation window, each with the model's gain over it (mean, half-width of its
    own bootstrap interval) and KL(reference ‖ model) (`window_kl` for the window, 1.0 for the context-blind one)."""
    return {
        "task_params": {},
        "n": 10,
        "metrics": {"entropy_mae_bits": iv(err, 1e-4), "kl_bits": iv(kl, 1e-4)},
        "approximations": {
            "context-blind": {
                "depth": 0,
                "gain_bits": iv(*blind_gain),
                "kl_from_model_bits": 1.0,
                "entropy_mae_bits": 0.4,
                "kl_bits": 0.4,
            },
            "last 1 obs": {
                "depth": 1,
                "gain_bits": iv(*window_gain),
                "kl_from_model_bits": window_kl,
                "entropy_mae_bits": 0.05,
                "kl_bits": 0.05,
            },
        },
        "closest": {"name": "exact", "margins": {}},
    }


def record(task: str, arch: str, seed: int, default: dict[str, Any], history: list | None = None) -> RunRecord:
    return RunRecord(
        path=Path(f"{task}-{arch}-s{seed}"),
        task=task,
        arch=arch,
        seed=seed,
        config={"task": {"name": task, "params": {}}, "model": {"arch": arch}, "seed": seed},
        evals={"default": default},
        history=history or [],
    )


def bijection(err: float, kl: float | None = None, half: float = 1e-4) -> dict[str, Any]:
    k = err if kl is None else kl
    return {"task_params": {}, "n": 10, "metrics": {"entropy_mae_bits": iv(err, half), "kl_bits": iv(k, half)}}


def cell(runs: list[RunRecord]) -> dict[str, Any]:
    out = table_cells.cell_value(runs, tables.headline_metric(runs[0].task))
    assert out is not None
    return out


# --- 1. too few seeds to separate -----------------------------------------------------------------------------


def test_the_rule_is_defined_once():
    assert marks.MIN_SEPARATING_SEEDS == 3
    assert marks.too_few_seeds(2, "seeds") and not marks.too_few_seeds(3, "seeds")
    assert not marks.too_few_seeds(1, "bootstrap") and not marks.too_few_seeds(2, "bootstrap")
    assert marks.unseparated("exact", 2, "seeds") == "too few seeds to separate from exact"
    assert marks.unseparated("exact", 3, "seeds") == "not separated from exact"
    assert marks.unseparated("exact") == "not separated from exact"


def test_two_seeds_whose_closest_margin_reaches_zero_are_too_few_to_separate():
    """The window's KL margin over exact: mean 0.01 bits, one seed each way; over two seeds its interval reaches 0
    because t has one degree of freedom, not because the seeds tie."""
    two = [
        record("hmm", "transformer", 0, hmm_eval(0.01, window_kl=0.045)),
        record("hmm", "transformer", 1, hmm_eval(0.05, window_kl=0.035)),
    ]
    c = cell(two)
    closest = c["closest_text"]
    assert closest.startswith("exact (") and "too few seeds" in closest and "last 1 obs" in closest
    header, rows, _ = tables.primitives_table(two)
    shown = dict(zip(header, rows[0], strict=True))[CLOSEST]
    assert "too few seeds" in shown and "last 1 obs" in shown and "not separated" not in shown
    # three seeds as spread: the interval has two degrees of freedom, and a tie is a tie
    three = [*two, record("hmm", "transformer", 2, hmm_eval(0.03, window_kl=0.04))]
    assert cell(three)["closest_text"] == "exact (not separated from last 1 obs)"


def test_a_two_seed_belief_horizon_and_threshold_say_too_few_seeds():
    """The ✗/◐ reasons over two seeds: the horizon's gain interval and the metric's upper end are the width of a
    one-degree-of-freedom interval, and the words say so."""
    runs = [
        record("hmm", "transformer", 0, hmm_eval(0.004, window_gain=(0.02, 0.001))),
        record("hmm", "transformer", 1, hmm_eval(0.006, window_gain=(-0.01, 0.001))),
    ]
    reasons = cell(runs)["verdict"]["reasons"]
    assert any(
        r.startswith("belief horizon 0: ") and "too few seeds" in r and "1-observation predictor" in r for r in reasons
    )
    assert not any("not measurably better" in r for r in reasons)
    err = [record("bijection", "transformer", s, bijection(v, kl=0.001)) for s, v in enumerate([0.004, 0.006])]
    c = cell(err)
    assert c["level"] == "approximate" and c["mean"] < 0.01 < c["hi"]
    (why,) = c["verdict"]["reasons"]
    assert why.endswith("> 0.01 bits (upper end; the mean 0.005 is within: too few seeds to separate)")


def test_two_seed_comparisons_in_claims_are_too_few_seeds_not_ties():
    """Mamba weaker at binding: both ◐, two seeds each, intervals overlapping."""

    def recall(arch: str, accs: list[float]) -> list[RunRecord]:
        out = []
        for s, a in enumerate(accs):
            metrics = {"accuracy": iv(a), "entropy_mae_bits": iv(0.001), "kl_bits": iv(0.001)}
            out.append(record("recall", arch, s, {"task_params": {}, "metrics": metrics}))
        return out

    runs = recall("mamba", [0.945, 0.946]) + recall("transformer", [0.95, 0.951])
    _, _, data = tables.primitives_table(runs)
    found = {c["claim"]: c for c in claims.judge_claims(runs, data, [])}
    weaker = found["Mamba weaker than the transformer at binding (recall)"]
    assert weaker["verdict"] == "undecided"
    assert weaker["why"].startswith("both ◐") and "too few seeds" in weaker["why"]
    assert weaker["why"].endswith("transformer")  # the architecture it is not separated from
    assert "intervals not separated" not in weaker["why"]


# --- 2. per-seed check before "no better than context-blind" --------------------------------------------------


def test_a_seed_measurably_better_than_context_blind_is_never_no_better():
    """Seed 0 beats the context-blind reference by 0.3 bits on its own, seed 1 does not: the pooled two-seed interval
    reaches zero, but "none: no better than context-blind" would deny seed 0."""
    split = [
        record("hmm", "transformer", 0, hmm_eval(0.2, blind_gain=(0.3, 0.01))),
        record("hmm", "transformer", 1, hmm_eval(0.4, blind_gain=(-0.001, 0.001))),
    ]
    c = cell(split)
    assert c["closest_text"].startswith("seeds disagree: 1 of 2 ") and "context-blind" in c["closest_text"]
    header, rows, _ = tables.primitives_table(split)
    shown = dict(zip(header, rows[0], strict=True))[CLOSEST]
    assert shown.startswith("seeds disagree: 1 of 2 measurably better than context-blind")
    assert "no better than context-blind" not in shown
    # every seed better on its own, the pooled interval not: too few seeds, not "none"
    both = [
        record("hmm", "transformer", 0, hmm_eval(0.2, blind_gain=(0.3, 0.01))),
        record("hmm", "transformer", 1, hmm_eval(0.4, blind_gain=(0.01, 0.001))),
    ]
    closest = cell(both)["closest_text"]
    assert closest.startswith("too few seeds") and "context-blind" in closest and "each of 2 seeds" in closest
    # no seed better: "none" is the truth
    none = [record("hmm", "transformer", s, hmm_eval(0.4, blind_gain=(-0.001, 0.001))) for s in range(2)]
    assert cell(none)["closest_text"] == "none: no better than context-blind"


def test_a_seed_off_the_floor_is_never_called_on_the_floor():
    """Bijection: seed 0 at 0.05 bits, seed 1 on the uniform floor (1.107): the two-seed interval reaches the floor,
    but the claim must not say the cell is on it."""
    uniform = [record("bijection", "uniform", 0, bijection(1.107))]
    split = [
        record("bijection", "transformer", 0, bijection(0.05, half=0.001)),
        record("bijection", "transformer", 1, bijection(1.107, half=0.001)),
    ]
    records = split + uniform
    _, _, data = tables.primitives_table(records)
    found = {c["claim"]: c for c in claims.judge_claims(records, data, geometry_across_seeds(records)[1])}
    why = found[BIJECTION]["why"]
    assert found[BIJECTION]["verdict"] == "undecided"
    assert "seeds disagree: 1 of 2 " in why and "off the context-blind floor" in why
    assert "on the context-blind floor" not in why


# --- 3. intervals unclipped -----------------------------------------------------------------------------------


def test_intervals_are_printed_unclipped_and_the_legend_says_so(tmp_path):
    runs = [
        write_run(tmp_path / "runs", f"bijection-transformer-s{s}", evals={"default": bijection(v)})
        for s, v in enumerate([0.001, 0.05])
    ]
    for s, d in enumerate(runs):  # two seeds of one configuration
        cfg = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**cfg, "seed": s}))
    results = build_report(runs, tmp_path / "report")
    c = results["table1"]["transformer"]["bijection"]
    assert c["seeds"] == 2 and c["lo"] < 0  # the Student-t interval the seeds give, below 0 bits
    md = (tmp_path / "report" / "report.md").read_text()
    row = next(line for line in md[md.index("## Table 1") :].splitlines() if line.startswith("| transformer |"))
    assert f"0.026 [{fmt(c['lo'], 'entropy_mae_bits')}{BEYOND_RANGE}, " in row and "[0.000, " not in row
    assert "never clipped" in md
    # the end beyond the range is labelled, and the footnote under Table 1 says what the label means
    assert f"{BEYOND_RANGE} beyond the metric's range" in md
    # accuracy past 100% is printed as it is
    acc = [
        record("recall", "mamba", s, {"metrics": {"accuracy": iv(a), "entropy_mae_bits": iv(0.001)}})
        for s, a in enumerate([0.9, 1.0])
    ]
    assert cell(acc)["hi"] > 1.0


def test_sweep_intervals_are_unclipped():
    rows = [sweep_row(0.001, s, v) for s, v in enumerate([0.001, 0.05])]
    (s,) = sweep_table.settings(rows, ["train.lr", "seed"])
    assert s["validation"]["entropy_mae_bits"]["lo"] < 0 and s["metrics"]["entropy_mae_bits"]["lo"] < 0


# --- 4. the sweep's ★ against the runner-up ---------------------------------------------------------------------


def sweep_row(lr: float, seed: int, value: float) -> dict[str, Any]:
    test = {m: iv(value, 0.01) for m in ("entropy_mae_bits", "kl_bits")} | {"accuracy": iv(0.5, 0.01)}
    return {
        "run": f"lr={lr}-seed={seed}",
        "values": {"train.lr": lr, "seed": seed},
        "seed": seed,
        "task": "bijection",
        "validation": {"entropy_mae_bits": value, "kl_bits": value, "accuracy": 0.5},
        "metrics": test,
        "wall_s": 1.0,
        "tokens_per_s": 100.0,
    }


def sweep_md(rows: list[dict[str, Any]], out: Path) -> tuple[dict[str, Any], str]:
    """The ranked settings (with their picks) and sweep.md's text, as `write_table` makes them."""
    keys = list(dict.fromkeys(k for r in rows for k in r["values"]))
    ranked = sweep_table.rank(sweep_table.settings(rows, keys))
    sweep_table._picks(ranked)
    for r in rows:
        r["unranked"], r["best"] = None, next(s["best"] for s in ranked if s["setting"] == r["setting"])
    data = {
        "base": {},
        "config": "base.yaml",
        "overrides": {},
        "grid": {k: sorted({r["values"][k] for r in rows}) for k in keys},
        "executor": "local",
        "jobs": 1,
        "threads": 1,
        "command": "windtunnel sweep base.yaml",
        "trained": [],
        "total_wall_s": 0.0,
        "machine": "test",
        "device": "cpu",
        "torch": "test",
        "python": "test",
        "headline": {"bijection": "entropy_mae_bits"},
        "settings": ranked,
        "rows": rows,
        "missing": [],
        "skipped": [],
    }
    best = next(s for s in ranked if s["best"])
    return best, sweep_table._markdown(SweepTableRecord.model_validate(plain(data)), out)


@pytest.mark.parametrize(
    ("values", "separated", "text"),
    [
        (  # one seed per grid point: single seeds compared, never separated
            {0.001: [0.25], 0.002: [0.26], 0.004: [1.1]},
            False,
            "one seed per point: ★ not separated from the runner-up lr=0.002 (validation ",
        ),
        (  # two seeds each, overlapping
            {0.001: [0.24, 0.26], 0.002: [0.25, 0.27]},
            False,
            "★: too few seeds to separate from the runner-up lr=0.002 (validation ",
        ),
        (  # three seeds each, overlapping
            {0.001: [0.2, 0.25, 0.3], 0.002: [0.22, 0.27, 0.32]},
            False,
            "★: not separated from the runner-up lr=0.002 (validation ",
        ),
        (  # three seeds each, disjoint
            {0.001: [0.100, 0.101, 0.102], 0.002: [0.300, 0.301, 0.302]},
            True,
            "★ separated from the runner-up lr=0.002 (validation ",
        ),
    ],
)
def test_the_sweep_says_whether_its_star_is_separated_from_the_runner_up(tmp_path, values, separated, text):
    rows = [sweep_row(lr, s, v) for lr, vs in values.items() for s, v in enumerate(vs)]
    best, md = sweep_md(rows, tmp_path)
    assert best["setting"].startswith("lr=0.001")
    assert best["pick"]["separated"] is separated and best["pick"]["runner_up"].startswith("lr=0.002")
    assert best["pick"]["text"].startswith(text)
    assert f"The pick: {best['pick']['text']}." in md
    assert md.index("The pick:") < md.index("## Runs")


# --- 5. a ✗ names the condition of ◐ it missed ------------------------------------------------------------------


def test_a_fail_names_the_approximate_condition_it_missed_not_the_exact_one():
    """Entropy error 0.05 bits is within ◐ (it misses only ✓'s 0.01); KL 0.3 bits misses ◐'s 0.1: the ✗ is the
    KL's."""
    c = cell([record("bijection", "transformer", 0, bijection(0.05, kl=0.3))])
    v = c["verdict"]
    assert c["level"] == "fail"
    assert v["reasons"] == ["KL(exact ‖ model) 0.3 > 0.1 bits (upper end)"]
    assert not any("0.01 bits" in r for r in v["reasons"])
    assert any("entropy error" in r and "> 0.01 bits" in r for r in v["exact_reasons"])  # kept, for ✓
    assert marks.shortfall(v["level"], v["reasons"]) == f"misses ◐: {v['reasons'][0]}"  # the mark, then the reason
    # the HMM: within ✓ on both metrics, but no better than the best one-observation predictor: that is the ✗
    hmm = cell([record("hmm", "transformer", 0, hmm_eval(0.005, err=0.05, window_gain=(-0.01, 0.001)))])
    assert hmm["level"] == "fail"
    assert hmm["verdict"]["reasons"] == [
        "belief horizon 0: not measurably better than the best 1-observation predictor"
    ]
    # a ◐ keeps naming ✓'s thresholds: that is what it missed
    approx = cell([record("bijection", "transformer", 0, bijection(0.05, kl=0.05))])
    assert approx["level"] == "approximate" and all("> 0.01 bits" in r for r in approx["verdict"]["reasons"])
    assert marks.shortfall("approximate", approx["verdict"]["reasons"]).startswith("misses ✓: ")


def test_the_report_explains_a_fail_by_the_approximate_condition(tmp_path):
    """Where the report says why a ✗ cell cannot speak for a geometry claim, and in its controls table."""
    geometry = {
        "keys": {
            "by_token_set": {
                "key_tokens": {
                    "mean_abs_cos_per_layer": [0.05],
                    "init_mean_abs_cos_per_layer": [0.16],
                    "gaussian_baseline": 0.14,
                }
            }
        }
    }
    runs = [record("bijection", "transformer", s, bijection(0.05, kl=0.3)) for s in range(3)]
    for r in runs:
        r.geometry = geometry
    _, _, data = tables.primitives_table(runs)
    found = {c["claim"]: c for c in claims.judge_claims(runs, data, geometry_across_seeds(runs)[1])}
    why = found["Layer-0 keys orthogonal (transformer)"]["why"]
    assert why.startswith("transformer/bijection is ✗ (misses ◐: KL(exact ‖ model) ")
    assert "> 0.1 bits (upper end)" in why and "0.01 bits" not in why
    # the controls table of a built report: a ✗ control names what ◐ needs, never ✓'s threshold alone
    run_dir = write_run(tmp_path / "runs", "bijection-transformer", evals={"default": bijection(0.05, kl=0.3)})
    build_report([run_dir], tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    control_rows = [line for line in md.splitlines() if line.startswith("| bijection | control:")]
    assert control_rows and all("| ✗ misses ◐: " in line for line in control_rows)
    assert not any("> 0.01 bits" in line and "> 0.1 bits" not in line for line in control_rows)
