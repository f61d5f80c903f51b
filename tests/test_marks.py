"""marks.verdict: the one rule, read from the whole distribution (entropy error and KL, intervals, horizons)."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from windtunnel import marks, tasks


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
    pooled = marks.pool(settings)
    m, sd = sum(vals) / 3, stats.tstd(vals)
    half = stats.t.ppf(0.975, 2) * sd / 3**0.5
    e = pooled["metrics"]["entropy_mae_bits"]
    assert pooled["interval"] == "seeds" and e["mean"] == pytest.approx(m)
    assert (e["lo"], e["hi"]) == pytest.approx((m - half, m + half))  # never clipped at 0
    assert marks.verdict(BIJ, pooled).level == "approximate"  # the mean alone would say exact
    one = marks.pool([scores(0.009, 0.001)])
    assert one["interval"] == "bootstrap" and marks.verdict(BIJ, one).level == "exact"
    nan = marks.pool([scores(0.001, 0.001), scores(math.nan, 0.001)])
    assert marks.verdict(BIJ, nan).level == "fail"


def test_pool_recomputes_closest_and_gains_over_seeds():
    a = scores(0.001, 0.002, approximations=windows({0: 0.4, 1: 0.05}))
    b = scores(0.001, 0.003, approximations=windows({0: 0.41, 1: 0.06}))
    pooled = marks.pool([a, b])
    assert pooled["closest"]["name"] == "exact"
    g = pooled["approximations"]["last 1 obs"]["gain_bits"]
    assert g["mean"] == pytest.approx(0.055) and g["lo"] < 0.055 < g["hi"]


def test_crossings_skip_nan_and_read_horizons():
    evals = [
        {"step": 1, "train_s": 1.0, "entropy_mae_bits": math.nan, "horizon": 2, "horizon_max": 2},
        {"step": 2, "train_s": 2.0, "entropy_mae_bits": 0.05, "horizon": 1, "horizon_max": 2},
    ]
    c = marks.crossings(evals, "entropy_mae_bits")
    assert c["0.1"] == {"step": 2, "train_s": 2.0} and c["0.01"] is None
    assert c[marks.EXACT_FILTER] == {"step": 1, "train_s": 1.0}


def gap(nll: tuple[float, float, float], acc: tuple[float, float, float] | None = None) -> dict:
    """A `bayes_gap` as `evaluate.bayes_gap` writes it: NLL(model) - NLL(exact), accuracy difference (mean, lo, hi)."""
    return {"level": marks.INVALID_LEVEL, "nll_bits": iv(*nll), "accuracy": None if acc is None else iv(*acc)}


def test_measurably_better_than_the_exact_posterior_is_invalid():
    """⚠ overrides every other level where the NLL of the realised answers is below the exact posterior's at the upper
    end of its interval, or the accuracy above the exact argmax's at the lower end; rounding (NUMERICAL_BITS) and an
    interval reaching zero are not evidence."""
    cheat = marks.verdict(BIJ, scores(2.4, 3.4, bayes_gap=gap((-3.07, -3.1, -3.0), (0.86, 0.84, 0.88))))
    assert (cheat.level, cheat.mark) == ("invalid", "⚠") and "sees the answer" in cheat.reasons[0]
    assert len([r for r in cheat.reasons if "sees the answer" in r]) == 2
    assert marks.verdict(BIJ, scores(0.001, 0.001, bayes_gap=gap((-0.2, -0.3, -0.1)))).level == "invalid"
    assert marks.verdict(BIJ, scores(0.5, 0.5, bayes_gap=gap((0.1, 0.05, 0.2), (0.02, 0.001, 0.04)))).level == "invalid"
    oracle = scores(0.0, 0.0, bayes_gap=gap((0.0, 0.0, 0.0), (0.0, 0.0, 0.0)))
    assert marks.verdict(BIJ, oracle).level == "exact"
    rounding = scores(0.0, 0.0, bayes_gap=gap((-1e-16, -2e-16, -1e-16)))
    assert marks.verdict(BIJ, rounding).level == "exact"
    noisy = scores(0.004, 0.004, bayes_gap=gap((-0.01, -0.03, 0.01), (0.01, -0.01, 0.03)))
    assert marks.verdict(BIJ, noisy).level == "exact"
    assert marks.verdict(BIJ, scores(0.0, 0.0, bayes_gap=gap((math.nan, math.nan, math.nan)))).level == "exact"
    assert "invalid" in marks.LEVELS and marks.MARK["invalid"] == "⚠"


def test_pool_takes_the_envelope_of_the_seeds_invalid_checks():
    """Seeds share the test stream, so the invalid check pools the seeds' own intervals (their envelope), never a
    Student-t over seed means that would shrink to a point for seeds that agree."""
    a = scores(0.001, 0.001, bayes_gap=gap((-0.002, -0.004, 0.001)))
    b = scores(0.001, 0.001, bayes_gap=gap((-0.002, -0.004, 0.0005)))
    pooled = marks.pool([a, b])
    assert pooled["bayes_gap"]["nll_bits"] == pytest.approx({"mean": -0.002, "lo": -0.004, "hi": 0.001})
    assert marks.verdict(BIJ, pooled).level == "exact"
    both = marks.pool([scores(0.3, 0.3, bayes_gap=gap((-1.0, -1.1, -0.9)))] * 2)
    assert marks.verdict(BIJ, both).level == "invalid"
    assert "bayes_gap" not in marks.pool([scores(0.0, 0.0), scores(0.0, 0.0)])


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
