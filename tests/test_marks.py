"""marks.verdict: the one rule, read from the whole distribution (entropy error and KL, intervals, horizons)."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from windtunnel import tasks
from windtunnel.evaluation import crossings, marks, seed_pool


def iv(mean: float, lo: float | None = None, hi: float | None = None) -> dict[str, float]:
    return {"mean": mean, "lo": mean if lo is None else lo, "hi": mean if hi is None else hi}


def scores(ent: float, kl: float, acc: float | None = None, **extra: object) -> dict:
    m = {"entropy_mae_bits": iv(ent), "kl_bits": iv(kl), "accuracy": None if acc is None else iv(acc)}
    return {"metrics": m, **extra}


BIJ = tasks.make("bijection", V=6, L=5)
RECALL = tasks.make("recall", N=4, key_vocab=8, value_vocab=8, n_filler=2, M=2)


@pytest.mark.parametrize(
    ("ent", "kl", "level"),
    [
        (0.004, 0.004, "exact"),
        (0.01, 0.01, "exact"),
        (0.004, 0.03, "approximate"),  # entropy alone would say exact
        (0.03, 0.004, "approximate"),
        (0.1, 0.1, "approximate"),
        (0.0, 19.5, "fail"),  # the context-blind support predictor: entropy error 0, KL 19.5 bits
        (0.2, 0.001, "fail"),
        (math.nan, 0.001, "fail"),
        (0.001, math.inf, "fail"),
    ],
)
def test_a_mark_needs_entropy_error_and_kl(ent, kl, level):
    v = marks.verdict(BIJ, scores(ent, kl))
    assert v.level == level and v.mark == marks.MARK[level]
    assert (not v.reasons) == (level == "exact")


def test_the_conservative_end_of_each_interval_decides():
    s = scores(0.005, 0.005)
    s["metrics"]["kl_bits"] = iv(0.005, 0.004, 0.012)
    v = marks.verdict(BIJ, s)
    assert v.level == "approximate" and any("KL" in r and "upper end" in r for r in v.reasons)
    assert marks.verdict(BIJ, {"metrics": {"entropy_mae_bits": iv(0.0)}}).level == "fail"  # KL missing


@pytest.mark.parametrize(
    ("ent_hi", "acc_lo", "said"),
    [
        (0.1004, 1.0, "entropy error 0.1004 > 0.1 bits"),  # 3 digits would read "0.1 > 0.1"
        (0.0213, 1.0, "entropy error 0.0213 > 0.01 bits"),
        (0.010002, 1.0, "entropy error 0.010002 > 0.01 bits"),
        (0.001, 0.98996, "accuracy 98.996% < 99%"),  # one decimal would read "99.0% < 99%"
        (0.001, 0.973, "accuracy 97.3% < 99%"),
    ],
)
def test_a_reason_never_reads_as_its_threshold(ent_hi, acc_lo, said):
    s = scores(0.001, 0.001, acc=1.0)
    s["metrics"]["entropy_mae_bits"] = iv(0.001, 0.0, ent_hi)
    s["metrics"]["accuracy"] = iv(1.0, acc_lo, 1.0)
    v = marks.verdict(RECALL, s)
    assert any(said in r for r in v.reasons), v.reasons
    assert marks.apart(0.1004, 0.1) == "0.1004" and marks.apart(0.5, 0.1) == "0.5"


def test_accuracy_headline_needs_accuracy_and_the_distribution():
    assert marks.verdict(RECALL, scores(0.001, 0.002, acc=1.0)).level == "exact"
    assert marks.verdict(RECALL, scores(0.001, 0.002, acc=0.95)).level == "approximate"
    assert marks.verdict(RECALL, scores(0.001, 0.002, acc=0.5)).level == "fail"
    assert marks.verdict(RECALL, scores(0.001, 0.5, acc=1.0)).level == "fail"  # right argmax, wrong distribution
    s = scores(0.001, 0.002, acc=0.995)
    s["metrics"]["accuracy"] = iv(0.995, 0.985, 1.0)  # lower end below 99%
    assert marks.verdict(RECALL, s).level == "approximate"


def test_a_task_may_set_its_own_thresholds():
    class Lenient:
        headline_metric = "entropy_mae_bits"
        mark_thresholds = {"exact_bits": 0.05}

    assert marks.verdict(Lenient(), scores(0.03, 0.03)).level == "exact"
    assert marks.verdict(BIJ, scores(0.03, 0.03)).level == "approximate"


def windows(gains: dict[int, float], lo_shift: float = 0.0) -> dict:
    """HMM-like approximations: depth 0 (context-blind) and windows 1..W with the given gains."""
    out = {}
    for depth, g in gains.items():
        name = marks.CONTEXT_BLIND if depth == 0 else f"last {depth} obs"
        out[name] = {"depth": depth, "gain_bits": iv(g, g - lo_shift, g + lo_shift), "kl_from_model_bits": 0.1}
    return out


def test_belief_horizon_decides_exact_and_approximate_on_filters():
    every = windows({0: 0.4, 1: 0.03, 2: 0.01, 3: 0.003, 4: 0.001})
    assert marks.belief_horizon(every) == (4, 4)
    assert marks.verdict(BIJ, scores(0.002, 0.001, approximations=every)).level == "exact"
    three = windows({0: 0.4, 1: 0.03, 2: 0.01, 3: 0.003, 4: 0.0})  # a 4-observation window filter: no gain over w=4
    v = marks.verdict(BIJ, scores(0.001, 0.001, approximations=three))
    assert (v.level, v.horizon, v.horizon_max) == ("approximate", 3, 4)
    assert "best 4-observation predictor" in v.reasons[-1]
    noisy = windows({0: 0.4, 1: 0.03, 2: 0.01, 3: 0.003, 4: 0.001}, lo_shift=0.002)  # w=4 gain interval reaches 0
    assert marks.belief_horizon(noisy) == (3, 4)
    one = windows({0: 0.4, 1: 0.0, 2: -0.02, 3: -0.03, 4: -0.03})  # the one-observation filter: no transport
    assert marks.verdict(BIJ, scores(0.09, 0.03, approximations=one)).level == "fail"
    blind = windows({0: 0.0, 1: -0.3, 2: -0.4, 3: -0.4, 4: -0.4})
    assert marks.belief_horizon(blind) == (None, 4)


def test_closest_says_none_when_no_better_than_context_blind():
    blind = windows({0: 0.0, 1: -0.3})
    closest = {"name": marks.CONTEXT_BLIND, "margins": {marks.CONTEXT_BLIND: iv(0.0), "exact": iv(0.4, 0.3, 0.5)}}
    assert marks.closest_text(closest, blind) == "none: no better than context-blind"
    good = windows({0: 0.4, 1: 0.1})
    tie = {"name": "last 1 obs", "margins": {"last 1 obs": iv(0.0), "exact": iv(0.001, -0.001, 0.003)}}
    assert marks.closest_text(tie, good) == "last 1 obs (not separated from exact)"


def test_pool_uses_the_seed_interval():
    vals = [0.002, 0.004, 0.0135]
    settings = [scores(v, 0.001) for v in vals]
    pooled = seed_pool.pool(settings)
    m, sd = sum(vals) / 3, stats.tstd(vals)
    half = stats.t.ppf(0.975, 2) * sd / 3**0.5
    e = pooled["metrics"]["entropy_mae_bits"]
    assert pooled["interval"] == "seeds" and e["mean"] == pytest.approx(m)
    assert (e["lo"], e["hi"]) == pytest.approx((m - half, m + half))  # never clipped at 0
    assert marks.verdict(BIJ, pooled).level == "approximate"  # the mean alone would say exact
    one = seed_pool.pool([scores(0.009, 0.001)])
    assert one["interval"] == "bootstrap" and marks.verdict(BIJ, one).level == "exact"
    nan = seed_pool.pool([scores(0.001, 0.001), scores(math.nan, 0.001)])
    assert marks.verdict(BIJ, nan).level == "fail"


def test_pool_recomputes_closest_and_gains_over_seeds():
    a = scores(0.001, 0.002, approximations=windows({0: 0.4, 1: 0.05}))
    b = scores(0.001, 0.003, approximations=windows({0: 0.41, 1: 0.06}))
    pooled = seed_pool.pool([a, b])
    assert pooled["closest"]["name"] == "exact"
    g = pooled["approximations"]["last 1 obs"]["gain_bits"]
    assert g["mean"] == pytest.approx(0.055) and g["lo"] < 0.055 < g["hi"]


def test_crossings_skip_nan_and_read_horizons():
    evals = [
        {"step": 1, "train_s": 1.0, "entropy_mae_bits": math.nan, "horizon": 2, "horizon_max": 2},
        {"step": 2, "train_s": 2.0, "entropy_mae_bits": 0.05, "horizon": 1, "horizon_max": 2},
    ]
    c = crossings.crossings(evals, "entropy_mae_bits")
    assert c["0.1"] == {"step": 2, "train_s": 2.0} and c["0.01"] is None
    assert c[crossings.EXACT_FILTER] == {"step": 1, "train_s": 1.0}


def gap(
    nll: tuple[float, float, float],
    acc: tuple[float, float, float] | None = None,
    evidence: tuple[float | None, float | None] = (0.0, None),
) -> dict:
    """A `bayes_gap` as `evaluate.bayes_gap` writes it: NLL(model) - NLL(exact), accuracy difference (mean, lo, hi),
    and the bits of evidence (NLL, accuracy) against reading only the input."""
    return {
        "level": marks.INVALID_LEVEL,
        "nll_bits": iv(*nll),
        "accuracy": None if acc is None else iv(*acc),
        "evidence_bits": {"nll": evidence[0], "accuracy": evidence[1]},
    }


def test_invalid_needs_evidence_not_an_interval():
    """⚠ overrides every other level where the evidence against reading only the input (log2 of an e-value, NLL or
    accuracy) reaches INVALID_EVIDENCE_BITS (9.97 bits at 99.9%); an interval below zero without that evidence, a gap
    without evidence, rounding and NaN accuse nothing."""
    assert marks.INVALID_EVIDENCE_BITS == pytest.approx(math.log2(1000)) == marks.evidence_threshold()
    cheat = marks.verdict(BIJ, scores(2.4, 3.4, bayes_gap=gap((-3.07, -3.1, -3.0), (0.86, 0.84, 0.88), (900, 400))))
    assert (cheat.level, cheat.mark) == ("invalid", "⚠") and "sees the answer" in cheat.reasons[0]
    assert len([r for r in cheat.reasons if "sees the answer" in r]) == 2
    assert "900 bits of evidence on the NLL" in cheat.reasons[0]
    assert marks.verdict(BIJ, scores(0.001, 0.001, bayes_gap=gap((-0.2, -0.3, -0.1), None, (12, None)))).level == (
        "invalid"
    )
    by_accuracy = gap((0.1, 0.05, 0.2), (0.02, 0.001, 0.04), (-3.0, 10.5))
    assert marks.verdict(BIJ, scores(0.5, 0.5, bayes_gap=by_accuracy)).level == "invalid"
    below = scores(0.001, 0.001, bayes_gap=gap((-2.5e-4, -5.6e-4, -3.8e-6), (0, 0, 0), (0.03, 0.0)))
    assert marks.verdict(BIJ, below).level == "exact"  # the interval is below zero, the evidence is not there
    no_evidence = scores(0.001, 0.001, bayes_gap={"level": 0.999, "nll_bits": iv(-1.0, -1.1, -0.9)})
    assert marks.verdict(BIJ, no_evidence).level == "exact"
    just_short = scores(0.001, 0.001, bayes_gap=gap((-0.2, -0.3, -0.1), None, (9.9, None)))
    assert marks.verdict(BIJ, just_short).level == "exact"
    oracle = scores(0.0, 0.0, bayes_gap=gap((0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 0.0)))
    assert marks.verdict(BIJ, oracle).level == "exact"
    assert marks.verdict(BIJ, scores(0.0, 0.0, bayes_gap=gap((math.nan,) * 3, None, (math.nan, None)))).level == (
        "exact"
    )
    assert "invalid" in marks.LEVELS and marks.MARK["invalid"] == "⚠"


def test_pool_accuses_only_on_evidence_every_seed_carries():
    """Seeds share the test stream, so their evidence does not add up: the pooled cell keeps the least of the seeds'
    evidence (and the envelope of their intervals, as a description), never a Student-t over seed means."""
    a = scores(0.001, 0.001, bayes_gap=gap((-0.002, -0.004, 0.001), None, (14.0, None)))
    b = scores(0.001, 0.001, bayes_gap=gap((-0.002, -0.004, 0.0005), None, (3.0, None)))
    pooled = seed_pool.pool([a, b])
    assert pooled["bayes_gap"]["nll_bits"] == pytest.approx({"mean": -0.002, "lo": -0.004, "hi": 0.001})
    assert pooled["bayes_gap"]["evidence_bits"] == {"nll": 3.0, "accuracy": None}
    assert marks.verdict(BIJ, pooled).level == "exact"
    both = seed_pool.pool([scores(0.3, 0.3, bayes_gap=gap((-1.0, -1.1, -0.9), None, (50.0, None)))] * 2)
    assert marks.verdict(BIJ, both).level == "invalid"
    assert "bayes_gap" not in seed_pool.pool([scores(0.0, 0.0), scores(0.0, 0.0)])


def test_what_a_mark_certifies():
    th = marks.Thresholds()
    assert marks.certifies(th) == "exact at 0.01 bits"
    assert marks.certifies(th, "accuracy") == "exact at 0.01 bits, accuracy ≥ 99%"
    assert marks.certifies(th, depth=2) == "exact at 0.01 bits; memory beyond the last 2 observations"
    v = marks.verdict(BIJ, scores(0.002, 0.001, approximations=windows({0: 0.4, 1: 0.03, 2: 0.01})))
    assert v.certifies == "exact at 0.01 bits; memory beyond the last 2 observations"
    assert marks.verdict(RECALL, scores(0.0, 0.0, acc=1.0)).certifies == "exact at 0.01 bits, accuracy ≥ 99%"
    assert "transport demand W" in marks.rule_text() and "⚠ invalid" in marks.rule_text()


def test_a_tunnel_with_windows_is_never_exact_without_their_scores():
    """✓ on an HMM certifies memory: scores without the window filters (approximations=False) cannot show it."""
    hmm = tasks.make("hmm")
    v = marks.verdict(hmm, scores(0.001, 0.001))
    assert v.level == "approximate" and "not measured" in v.reasons[-1]
    assert v.certifies == f"exact at 0.01 bits; memory beyond the last {hmm.transport_demand.window - 1} observations"


def test_gains_within_rounding_are_not_measurable():
    tiny = windows({0: 0.4, 1: 0.03, 2: 5e-7})  # a float64 copy of the 2-observation window beats its float32 self
    assert marks.belief_horizon(tiny) == (1, 2)


def per_position(gains: dict[int, list[tuple[float, float]]], average: float = 0.05) -> dict:
    """HMM-like approximations measured position by position: per depth, (mean, lower end) of the gain at each of its
    positions 10, 11, ...; each with an average gain `average` that on its own would be measurable."""
    out = windows(dict.fromkeys(gains, average))
    for depth, at in gains.items():
        name = marks.CONTEXT_BLIND if depth == 0 else f"last {depth} obs"
        worst = min(range(len(at)), key=lambda j: at[j][1])
        out[name].update(
            positions=list(range(10, 10 + len(at))),
            gain_by_position=[m for m, _ in at],
            gain_worst={"position": 10 + worst, **iv(at[worst][0], at[worst][1], at[worst][0] + 0.01)},
        )
    return out


def test_the_horizon_reads_every_position_where_a_window_is_outside():
    """Measured position by position, a window is beaten only where the gain's interval clears rounding at every one of
    its positions -- the average gain no longer decides; the point horizon (time to Bayes) reads each position's mean.
    """
    good = per_position({0: [(0.4, 0.3)], 1: [(0.03, 0.02), (0.03, 0.02)], 2: [(0.01, 0.005), (0.012, 0.004)]})
    assert marks.belief_horizon(good) == (2, 2) == marks.belief_horizon(good, point=True)
    late = per_position({0: [(0.4, 0.3)], 1: [(0.03, 0.02)], 2: [(0.01, 0.005), (0.0, -1e-9)]})
    assert marks.belief_horizon(late) == (1, 2) == marks.belief_horizon(late, point=True)
    v = marks.verdict(BIJ, scores(0.002, 0.001, approximations=late))
    assert v.level == "approximate" and "after observation 12" in v.reasons[0]
    noisy = per_position({0: [(0.4, 0.3)], 1: [(0.03, 0.02)], 2: [(0.01, 0.005), (0.004, -0.001)]})
    assert marks.belief_horizon(noisy) == (1, 2) and marks.belief_horizon(noisy, point=True) == (2, 2)
    assert not marks.beats({"positions": [3], "gain_worst": None, "gain_bits": iv(0.1)})
    assert marks.beats({"gain_bits": iv(0.1)}) and not marks.beats({"gain_bits": iv(0.1, -0.01)})


def test_pool_keeps_each_positions_gain_over_seeds():
    a = per_position({0: [(0.4, 0.3)], 2: [(0.01, 0.005), (0.004, 0.001)]})
    b = per_position({0: [(0.4, 0.3)], 2: [(0.012, 0.005), (0.006, 0.001)]})
    c = per_position({0: [(0.4, 0.3)], 2: [(0.011, 0.005), (0.005, 0.001)]})
    pooled = seed_pool.pool([scores(0.002, 0.001, approximations=x) for x in (a, b, c)])["approximations"]["last 2 obs"]
    assert pooled["positions"] == [10, 11]
    assert pooled["gain_by_position"] == pytest.approx([0.011, 0.005])
    t = stats.t.ppf(0.975, 2) * 0.001 / math.sqrt(3)
    assert pooled["gain_worst"] == pytest.approx({"position": 11, "mean": 0.005, "lo": 0.005 - t, "hi": 0.005 + t})
    moved = per_position({0: [(0.4, 0.3)], 2: [(0.01, 0.005)]})  # measured at other positions: no per-position pool
    mixed = seed_pool.pool([scores(0.002, 0.001, approximations=x) for x in (a, moved)])["approximations"]["last 2 obs"]
    assert "positions" not in mixed and "gain_worst" not in mixed
