"""Verdicts: the one home of the marks. Is a predictor exact, approximate, or neither -- and why not?

`verdict(task, scores)` reads the whole distribution, not one summary of it. `scores` is one evaluation setting as
eval.json holds it (`evaluate.score_predictor`), or a cell's seeds pooled by `pool`:

    ✓ exact        entropy error ≤ 0.01 bits AND KL(exact ‖ model) ≤ 0.01 bits, each at the conservative (upper) end
                   of its interval; accuracy ≥ 99% (lower end) where accuracy is the headline; and, for a task
                   whose approximate posteriors have depths (the HMMs' window filters "last w obs", the best
                   predictors of the last w observations, for every w below the tunnel's transport demand W), a belief
                   horizon that covers every one of them, position by position
    ◐ approximate  both ≤ 0.1 bits, accuracy ≥ 90% where it is the headline, and (with depths) a horizon of at least
                   the shallowest window: measurably better than the best one-observation predictor
    ⚠ invalid      evidence that it sees the answer: an e-value against "reads only the input" of at least
                   1 / (1 − INVALID_LEVEL) (INVALID_EVIDENCE_BITS, 9.97 bits at 99.9%), on the NLL of the realised
                   answers or on the accuracy of its argmax (`sees_the_answer`)
    ✗ otherwise    -- including any number that is missing or not finite.

The transport certificate is per position. W (`tasks.hmm.transport_demand`) is the shortest window within the exact
level on its own at every scored position (entropy error and KL, each averaged over a fixed reference sample at that
position); every window w < W is outside it at some positions (`approximation_positions`). The model beats window w
(`beats`) when its gain KL(exact ‖ window) − KL(exact ‖ model) has its interval above float rounding (NUMERICAL_BITS)
at every one of those positions ("gain_worst": the lowest lower end), and the belief horizon is the largest depth w
such that the model beats every approximation of depth ≤ w. So a predictor that is exact early and reads only the
last few observations late is held to the windows where it forgets; an approximation scored without positions is
judged on its average gain ("gain_bits").

What ✓ certifies on a tunnel (`certifies`): exactness at the exact level, and with windows, memory beyond the last
W - 1 observations at every position where fewer are not enough (a predictor measurably closer to the exact posterior
than the best predictor of the last w observations at a position reads further back than w there). A task may set its
own thresholds (`mark_thresholds = {"exact_bits": ...}` on the task). Entropy error alone certifies nothing: a
predictor can match the posterior's entropy everywhere without reading the context (each task's `controls`), so KL is
always part of the rule. The closest posterior is the KL-nearest reference, the candidate minimising KL(· ‖ model),
with paired intervals of every other candidate's margin over it: a description of the predictor, never a memory claim
(the horizon is); where the model is not measurably better than the context-blind reference on average it is "none:
no better than context-blind" -- unless a seed of a pooled cell is on its own ("seeds disagree: 1 of 2 measurably
better than context-blind").

⚠ rests on evidence, never on an interval. Per test sequence, the e-value of its NLL is the mean over its scored
positions of the likelihood ratio q(answer) / p(answer) (model over exact posterior); for the accuracy it is 1 plus
the sequence's mean accuracy difference from the exact argmax. The assumption, and the only one: the answers are drawn
from the exact posterior given the input (true of every tunnel by construction) and the sequences are independent.
Then for any predictor that reads only the input each sequence's e-value has expectation at most 1 (its NLL one is the
predictor's probability on the answers the exact posterior allows), so a product over sequences has too, and
`metrics.evidence_bits` (the average of such products over a few stakes) reaches 1 / alpha with probability at most
alpha (Markov's inequality). No variance, normal limit or bootstrap is assumed: a few rare answers the exact posterior
gave 1e-4 (a smoothed exact posterior's gains: heavy tails) cannot produce it. Pooled seeds keep the least of their
evidence (they share the test sequences). The paired intervals of the NLL and accuracy differences stay in the scores
as a description.

Small numbers of seeds (`too_few_seeds`): a Student-t interval over two seeds has one degree of freedom (t = 12.7 at
95%) and covers almost anything, so where such an interval reaches a reference the words say "too few seeds to
separate" (`unseparated`), never "not separated" as if the seeds had shown no difference. Intervals are never
clipped to a metric's range: a lower end below 0 bits, or an accuracy interval past 100%, is the interval the seeds
give, and says how little they pin the value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from statistics import fmean
from typing import Any

from windtunnel.evaluation.metric_specs import METRICS, headline_metric
from windtunnel.store.records.run_dir import LEVELS
from windtunnel.tasks.adapter import as_task
from windtunnel.tasks.base import EXACT_BITS, Task
from windtunnel.tasks.registry import TunnelInfo

MARK = {"exact": "✓", "approximate": "◐", "fail": "✗", "invalid": "⚠"}
# The level of the invalid check (`bayes_gap` in the scores): a predictor that reads only the input reaches the evidence
# ⚠ needs with probability at most 1 - INVALID_LEVEL, stricter than the 95% of the other marks, since ⚠ accuses the
# predictor of seeing the answer (the gap's descriptive intervals are drawn at this level too).
INVALID_LEVEL = 0.999
# The bits of evidence ⚠ needs (`sees_the_answer`): log2 of the e-value 1 / (1 - INVALID_LEVEL).
INVALID_EVIDENCE_BITS = math.log2(1.0 / (1.0 - INVALID_LEVEL))
# Differences in bits smaller than this are float rounding (posteriors and approximations are stored in float32, ~1e-7
# relative), never evidence: a gain over an approximation, or an NLL below the exact posterior's, must exceed it.
NUMERICAL_BITS = 1e-6
CONTEXT_BLIND = "context-blind"  # the name of the reference that reads nothing, where a task's approximations have it
# The fewest training seeds whose Student-t interval can separate a cell from a reference: at 2 it has one degree of
# freedom (t = 12.7 at 95%, against 4.3 at 3 seeds) and covers almost anything, so a tie there is too few seeds.
MIN_SEPARATING_SEEDS = 3
EXACT = "exact"  # the exact posterior, as a candidate for "closest"


@dataclass(frozen=True)
class Thresholds:
    """The levels of the rule: bits for entropy error and KL (both), fractions for accuracy."""

    exact_bits: float = EXACT_BITS
    approx_bits: float = 0.1
    exact_accuracy: float = 0.99
    approx_accuracy: float = 0.90


@dataclass(frozen=True)
class Verdict:
    """A predictor's level ("exact" | "approximate" | "fail" | "invalid"), why it is not one level higher (`reasons`:
    for ✗ the conditions of ◐ it fails, never ✓'s; for ◐ those of ✓; for ⚠ why it sees the answer, then every other
    condition it fails), every condition of ✓ it fails (`exact_reasons`), for tasks with approximations its belief
    horizon (of `horizon_max`) and the KL-nearest reference (`closest`), and what ✓ certifies on this task
    (`certifies`)."""

    level: str
    reasons: tuple[str, ...] = ()
    exact_reasons: tuple[str, ...] = ()
    horizon: int | None = None
    horizon_max: int | None = None
    closest: str | None = None
    closest_text: str | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    certifies: str = ""

    @property
    def mark(self) -> str:
        return MARK[self.level]

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "mark": self.mark,
            "reasons": list(self.reasons),
            "exact_reasons": list(self.exact_reasons),
        }


def _built(task: Any) -> Task[Any] | None:
    """`task` as a `Task` (`as_task`); None for a `TunnelInfo`, the metadata of a tunnel that could not be built."""
    return None if isinstance(task, TunnelInfo) else as_task(task)


def thresholds(task: Any) -> Thresholds:
    """The task's own thresholds (`mark_thresholds`, a dict of `Thresholds` fields) over the defaults."""
    built = _built(task)
    return Thresholds(**dict(built.mark_thresholds if built is not None else {}))


def finite(m: Any) -> dict[str, float] | None:
    """An interval {"mean", "lo", "hi"} whose three numbers are finite, else None."""
    if not isinstance(m, Mapping):
        return None
    try:
        vals = {k: float(m[k]) for k in ("mean", "lo", "hi")}
    except (KeyError, TypeError, ValueError):
        return None
    return vals if all(math.isfinite(v) for v in vals.values()) else None


def level_of_value(metric: str, value: float, th: Thresholds | None = None) -> str:
    """The level one bare number of `metric` would reach on its own (the paper's entropy-only numbers, a curve point):
    never a verdict, which needs KL too."""
    th = th or Thresholds()
    if not math.isfinite(value):
        return "fail"
    if metric == "accuracy":
        return "exact" if value >= th.exact_accuracy else "approximate" if value >= th.approx_accuracy else "fail"
    return "exact" if value <= th.exact_bits else "approximate" if value <= th.approx_bits else "fail"


def belief_horizon(approximations: Mapping[str, Any], point: bool = False) -> tuple[int | None, int | None]:
    """(horizon, deepest window) from approximations with a "depth": the largest depth w such that the model beats
    every approximation of depth ≤ w (`beats`); horizon None where it does not beat the shallowest. (None, None) when
    no approximation has a depth. point: read the gains' means instead of their intervals (a training-time curve)."""
    ordered = sorted((int(a["depth"]), name) for name, a in approximations.items() if a.get("depth") is not None)
    if not ordered:
        return None, None
    horizon = None
    for depth, name in ordered:
        if not beats(approximations[name], point):
            break
        horizon = depth
    return horizon, ordered[-1][0]


def beats(approximation: Mapping[str, Any], point: bool = False) -> bool:
    """Whether the model is measurably closer to the exact posterior than `approximation`: where its scores have the
    positions at which it is outside the exact level ("positions", `evaluate.ApproximationScores`), its gain interval
    above float rounding (NUMERICAL_BITS) at every one of them ("gain_worst", the lowest lower end); otherwise its
    average gain ("gain_bits"). point: the means instead (every position's mean gain, or the average's)."""
    if approximation.get("positions"):
        if point:
            gains = approximation.get("gain_by_position") or []
            return bool(gains) and all(
                isinstance(g, (int, float)) and math.isfinite(g) and g > NUMERICAL_BITS for g in gains
            )
        return measurably_better(approximation.get("gain_worst"))
    if point:
        f = finite(approximation.get("gain_bits"))
        return f is not None and f["mean"] > NUMERICAL_BITS
    return measurably_better(approximation.get("gain_bits"))


def _where(approximation: Mapping[str, Any]) -> str:
    """ " after observation 17 (gain 0.0002 [-0.001, 0.002] bits)": the position where a model fails to beat an
    approximation measured position by position ("" where it is not)."""
    worst = finite(approximation.get("gain_worst")) if approximation.get("positions") else None
    if worst is None:
        return ""
    k = int(approximation["gain_worst"].get("position", -1)) + 1
    return f" after observation {k} (gain {worst['mean']:.2g} [{worst['lo']:.2g}, {worst['hi']:.2g}] bits)"


def too_few_seeds(seeds: Any, interval: Any = "seeds") -> bool:
    """Whether an interval is a Student-t interval over training seeds (`interval` "seeds", as `pool` and Table 1's
    cells say) of fewer than `MIN_SEPARATING_SEEDS` seeds: one that reaches a reference says nothing about a
    difference. One seed's interval (the bootstrap over test sequences) is evaluation noise, narrow: never "too few"."""
    return interval == "seeds" and isinstance(seeds, int) and 2 <= seeds < MIN_SEPARATING_SEEDS


def unseparated(what: str, seeds: Any = None, interval: Any = "seeds", otherwise: str = "not separated from") -> str:
    """The words for an interval that reaches `what`: "too few seeds to separate from {what}" where it is a Student-t
    interval over too few seeds (`too_few_seeds`), else "{otherwise} {what}" ("not separated from exact"). The one
    rule for every such phrase of the report."""
    return f"too few seeds to separate from {what}" if too_few_seeds(seeds, interval) else f"{otherwise} {what}"


def measurably_better(gain: Any) -> bool:
    """Whether a gain interval (bits; `gain_bits` of an approximation) lies above float rounding."""
    f = finite(gain)
    return f is not None and f["lo"] > NUMERICAL_BITS


def closest_text(
    closest: Mapping[str, Any] | None, approximations: Mapping[str, Any], seeds: Any = None, interval: Any = None
) -> str | None:
    """The closest posterior in words: its name, "(not separated from ...)" where a margin's interval reaches zero
    ("too few seeds to separate from ..." over too few seeds, `unseparated`), or "none: no better than context-blind"
    where the model does not beat the context-blind reference -- unless a seed does on its own (a pooled cell keeps
    each seed's gain, "seed_gains"): "seeds disagree: 1 of 2 measurably better than context-blind", or where every
    seed does, "too few seeds to separate from context-blind (each of 2 seeds measurably better on its own)"."""
    if not closest:
        return None
    blind = approximations.get(CONTEXT_BLIND)
    if blind is not None and not measurably_better(blind.get("gain_bits")):
        per_seed = list(blind.get("seed_gains") or [])
        better = sum(measurably_better(g) for g in per_seed)
        if not better:
            return f"none: no better than {CONTEXT_BLIND}"
        if better < len(per_seed):
            return f"seeds disagree: {better} of {len(per_seed)} measurably better than {CONTEXT_BLIND}"
        over = unseparated(CONTEXT_BLIND, seeds, interval)
        return f"{over} (each of {better} seeds measurably better on its own)"
    name = str(closest["name"])
    tied = [c for c, m in (closest.get("margins") or {}).items() if c != name and (f := finite(m)) and f["lo"] <= 0]
    return name + (f" ({unseparated(', '.join(tied), seeds, interval)})" if tied else "")


def closest_posterior(kl: Mapping[str, Sequence[float]], intervals: Any) -> dict[str, Any]:
    """{"name", "margins"} over candidates (exact and each approximation) given KL(candidate ‖ model) per unit
    (`kl[c]`: one value per sequence sum or per seed, paired across candidates): the name minimising the mean, and
    each candidate's margin over it (`intervals(differences)` -> {"mean", "lo", "hi"})."""
    means = {c: fmean(v) for c, v in kl.items()}
    best = min(means, key=means.__getitem__)
    margins = {c: intervals([a - b for a, b in zip(v, kl[best], strict=True)]) for c, v in kl.items()}
    return {"name": best, "margins": margins}


def apart(value: float, threshold: float, spec: str = "g", least: int = 3) -> str:
    """`value` written with `least` digits (`spec` "g": significant, "f": decimals) or as many more as it takes not to
    read as the `threshold` it is compared with: 0.1004 against 0.1 is "0.1004", never "0.1 > 0.1"."""
    for digits in range(least, least + 8):
        text = f"{value:.{digits}{spec}}"
        if float(text) != threshold:
            return text
    return repr(value)


def verdict(task: Any, scores: Mapping[str, Any]) -> Verdict:
    """The verdict of one evaluation setting (or pooled cell) of a predictor on `task` (see the module docstring)."""
    th = thresholds(task)
    metric = headline_metric(task)
    got = scores.get("metrics") or {}
    seeds, interval = scores.get("seeds"), scores.get("interval")
    few = too_few_seeds(seeds, interval)
    level, found = "exact", []  # (the level a failed condition caps at, the condition in words)

    def cap(to: str, reason: str) -> None:
        nonlocal level
        found.append((to, reason))
        if LEVELS.index(to) > LEVELS.index(level):
            level = to

    def end(which: str, mean: float, within: bool) -> str:
        """ "(upper end)", or with too few seeds and the mean itself within: that the interval's width decides."""
        if few and within:
            return f"({which} end; the mean {mean:.3g} is within: too few seeds to separate)"
        return f"({which} end)"

    for name in ("entropy_mae_bits", "kl_bits"):
        m = finite(got.get(name))
        if m is None:
            cap("fail", f"{METRICS[name].words}: no finite value")
        elif m["hi"] > th.approx_bits:
            high = end("upper", m["mean"], m["mean"] <= th.approx_bits)
            cap("fail", f"{METRICS[name].words} {apart(m['hi'], th.approx_bits)} > {th.approx_bits:g} bits {high}")
        elif m["hi"] > th.exact_bits:
            high = end("upper", m["mean"], m["mean"] <= th.exact_bits)
            cap("approximate", f"{METRICS[name].words} {apart(m['hi'], th.exact_bits)} > {th.exact_bits:g} bits {high}")
    if metric == "accuracy":
        m = finite(got.get("accuracy"))
        if m is None:
            cap("fail", "accuracy: no finite value")
        elif m["lo"] < th.approx_accuracy:
            low = end("lower", m["mean"], m["mean"] >= th.approx_accuracy)
            bound = 100 * th.approx_accuracy
            cap("fail", f"accuracy {apart(100 * m['lo'], bound, 'f', 1)}% < {bound:.0f}% {low}")
        elif m["lo"] < th.exact_accuracy:
            low = end("lower", m["mean"], m["mean"] >= th.exact_accuracy)
            bound = 100 * th.exact_accuracy
            cap("approximate", f"accuracy {apart(100 * m['lo'], bound, 'f', 1)}% < {bound:.0f}% {low}")
    approx = scores.get("approximations") or {}
    horizon, deepest = belief_horizon(approx)
    if not approx and _declared_depth(task):
        cap("approximate", "belief horizon not measured (no window-filter scores): exactness without memory unproven")
    if deepest:  # windows 1..W-1 below the transport demand (depth 0 alone: no window is needed)
        shallowest = min(int(a["depth"]) for a in approx.values() if a.get("depth") is not None and a["depth"] > 0)
        if horizon is None or horizon < shallowest:
            what = f"the best {shallowest}-observation predictor"
            first = min(
                (a for a in approx.values() if a.get("depth") is not None and int(a["depth"]) > (horizon or -1)),
                key=lambda a: int(a["depth"]),
            )
            cap(
                "fail",
                f"belief horizon {'none' if horizon is None else horizon}: "
                + unseparated(what, seeds, interval, "not measurably better than")
                + (_where(first) if int(first["depth"]) == shallowest else ""),
            )
        elif horizon < deepest:
            beyond = min(
                int(a["depth"]) for a in approx.values() if a.get("depth") is not None and a["depth"] > horizon
            )
            what = f"the best {beyond}-observation predictor"
            window = next(a for a in approx.values() if a.get("depth") is not None and int(a["depth"]) == beyond)
            cap(
                "approximate",
                f"belief horizon {horizon} of {deepest}: "
                + unseparated(what, seeds, interval, "not measurably better than")
                + _where(window),
            )
    else:
        for name, a in approx.items():
            if not measurably_better(a.get("gain_bits")):
                cap(
                    "approximate",
                    unseparated(f"'{name}'", seeds, interval, "not measurably closer to the exact posterior than"),
                )
    everything = [reason for _, reason in found]
    reasons = [reason for to, reason in found if to == level]  # why not one level higher: ◐'s conditions for a ✗
    answer = sees_the_answer(scores.get("bayes_gap"))
    if answer:
        level, reasons = "invalid", answer + everything
    closest = scores.get("closest")
    return Verdict(
        level=level,
        reasons=tuple(reasons),
        exact_reasons=tuple(everything),
        horizon=horizon,
        horizon_max=deepest,
        closest=str(closest["name"]) if closest else None,
        closest_text=closest_text(closest, approx, seeds, interval),
        thresholds=th,
        certifies=certifies(th, metric, deepest if deepest is not None else _declared_depth(task)),
    )


def shortfall(level: str, reasons: Sequence[str]) -> str:
    """Why a verdict is not one level higher, in words: "misses ◐: KL(exact ‖ model) 0.3 > 0.1 bits (upper end)" for a
    ✗ (its `reasons`: the conditions of ◐ it fails, never ✓'s), "misses ✓: ..." for a ◐, a ⚠'s reasons as they are;
    "" where there are none (✓)."""
    if not reasons:
        return ""
    above = {"fail": MARK["approximate"], "approximate": MARK["exact"]}.get(level)
    return (f"misses {above}: " if above else "") + "; ".join(reasons)


def _declared_depth(task: Any) -> int:
    """The deepest approximation the task declares (`approximation_depths`), 0 where it declares none."""
    built = _built(task)
    return max(built.approximation_depths().values(), default=0) if built is not None else 0


def certifies(th: Thresholds, metric: str = "entropy_mae_bits", depth: int = 0) -> str:
    """What ✓ certifies on a tunnel whose deepest window below its transport demand keeps `depth` observations:
    "exact at 0.01 bits; memory beyond the last 2 observations" (beating the best predictor of the last w
    observations needs an older one)."""
    out = f"exact at {th.exact_bits:g} bits"
    if metric == "accuracy":
        out += f", accuracy ≥ {100 * th.exact_accuracy:.0f}%"
    if depth > 0:
        out += f"; memory beyond the last {depth} observation{'s' if depth > 1 else ''}"
    return out


def sees_the_answer(gap: Any) -> list[str]:
    """Why a predictor is invalid, from its `bayes_gap` (paired by answer against the exact posterior; [] where it is
    not): its evidence against reading only the input ("evidence_bits", log2 of an e-value: `evaluate.bayes_gap`) at
    least `INVALID_EVIDENCE_BITS`, on the NLL of the realised answers or on the accuracy of its argmax. A gap without
    evidence (intervals alone) accuses nothing."""
    if not isinstance(gap, Mapping):
        return []
    evidence = gap.get("evidence_bits")
    if not isinstance(evidence, Mapping):
        return []
    level = float(gap.get("level") or INVALID_LEVEL)
    chance = f"{100 * (1 - level):.2g}%"
    out = []
    for key, what in (("nll", "NLL"), ("accuracy", "accuracy")):
        bits = evidence.get(key)
        if not isinstance(bits, (int, float)) or not math.isfinite(bits) or bits < evidence_threshold(level):
            continue
        m = finite(gap.get("nll_bits" if key == "nll" else "accuracy"))
        if m is None:
            gap_words = ""
        elif key == "nll":
            gap_words = f"NLL of the realised answers {-m['mean']:.3g} bits below the exact posterior's; "
        else:
            gap_words = f"accuracy {100 * m['mean']:.1f} points above the exact posterior's argmax; "
        out.append(
            f"{gap_words}{bits:.3g} bits of evidence on the {what} against reading only the input (≥ "
            f"{evidence_threshold(level):.3g}: at most {chance} chance for any predictor of the input, whatever the "
            "tails): it sees the answer"
        )
    return out


def evidence_threshold(level: float = INVALID_LEVEL) -> float:
    """The bits of evidence (log2 e-value) ⚠ needs at `level`: log2(1 / (1 - level)), 9.97 bits at 99.9%."""
    return math.log2(1.0 / (1.0 - level))


def rule_text(th: Thresholds | None = None) -> str:
    """The rule in words, for the report and README."""
    th = th or Thresholds()
    return (
        f"✓ exact = entropy error ≤ {th.exact_bits:g} bits and KL(exact ‖ model) ≤ {th.exact_bits:g} bits (both at "
        f"the upper end of their intervals), accuracy ≥ {100 * th.exact_accuracy:.0f}% where accuracy is the headline, "
        "and, for the HMMs, measurably closer to the exact filter (paired interval) than the best predictor of the "
        "last w observations for every w below the tunnel's transport demand W (the shortest window within "
        f"{th.exact_bits:g} bits on its own at every scored position), at every position where that window is outside "
        f"{th.exact_bits:g} bits: ✓ certifies exactness at {th.exact_bits:g} bits, and on the HMMs memory beyond the "
        f"last W − 1 observations wherever fewer are not enough; ◐ approximate = both ≤ {th.approx_bits:g} bits, "
        f"accuracy ≥ {100 * th.approx_accuracy:.0f}% where it is the headline, and for the HMMs measurably better "
        "than the best one-observation predictor at every position where it is outside the exact level; ⚠ invalid = "
        "evidence that it sees the answer: an e-value against 'reads only the input' (per test sequence the mean "
        "likelihood ratio model / exact posterior of the realised answers, or 1 + its accuracy gain over the exact "
        f"argmax; multiplied over sequences) of at least {1 / (1 - INVALID_LEVEL):,.0f} ({INVALID_EVIDENCE_BITS:.3g} "
        f"bits), which a predictor of the input reaches with probability ≤ {100 * (1 - INVALID_LEVEL):.2g}% whatever "
        "the tails of its gains; ✗ otherwise (a missing or non-finite number "
        "included). Intervals: the 95% Student-t interval over training seeds (≥ 2 seeds), or the run's bootstrap "
        "interval over test sequences (1 seed: evaluation noise only); the invalid check takes over seeds the "
        "least of the seeds' own evidence (seeds share the test sequences). Intervals are never clipped to a "
        "metric's range: a lower end below 0 bits or an accuracy past 100% is what the seeds give, and says how "
        f"little they pin the value; over fewer than {MIN_SEPARATING_SEEDS} seeds the Student-t interval (1 degree of "
        "freedom at 2 seeds) covers almost anything, and where it reaches a reference the report says 'too few seeds "
        "to separate', not 'not separated'"
    )


__all__ = [
    "CONTEXT_BLIND",
    "INVALID_LEVEL",
    "INVALID_EVIDENCE_BITS",
    "LEVELS",
    "NUMERICAL_BITS",
    "MARK",
    "MIN_SEPARATING_SEEDS",
    "Thresholds",
    "Verdict",
    "beats",
    "belief_horizon",
    "certifies",
    "evidence_threshold",
    "closest_posterior",
    "closest_text",
    "measurably_better",
    "level_of_value",
    "rule_text",
    "sees_the_answer",
    "shortfall",
    "too_few_seeds",
    "unseparated",
    "thresholds",
    "verdict",
]
