"""One spec per metric: what each number the report, compare, sweep, progress and the marks print is called, its
unit, which way is better, how it is printed, and whether it can be a task's headline (in the manner of
lm-evaluation-harness's metric registry). Also the one accessor of a task's headline metric (`headline_metric`) and
the one mean over training seeds with its Student-t interval (`pool_seeds`).

    METRICS["kl_bits"].title        "KL(exact ‖ model) (bits)"   (the long title: compare's tables)
    METRICS["kl_bits"].short_title  "KL (bits)"                  (narrow tables: the sweep)
    METRICS["kl_bits"].words        "KL(exact ‖ model)"          (in sentences: the marks' reasons)
    METRICS["accuracy"].fmt(0.971)  "97.1%"

The metric values themselves are defined in `metrics.py`; the task's own `headline_metric` (tasks.base) must be one
of `HEADLINE_METRICS` here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from windtunnel import tasks
from windtunnel.evaluation.metrics import seed_interval
from windtunnel.text import number

DEFAULT_HEADLINE = "entropy_mae_bits"  # a task's headline metric where it names none


@dataclass(frozen=True)
class MetricSpec:
    """A metric's facts. `words`: the quantity in a sentence ("entropy error"); `short_words`: in narrow tables (""
    for `words`); `unit`: "bits" or "fraction" (printed as a percentage); `higher_is_better`; `headline`: whether it
    can be a task's headline (Table 1's column, the marks, time to Bayes)."""

    name: str
    words: str
    unit: str
    higher_is_better: bool
    headline: bool
    short_words: str = ""

    @property
    def title(self) -> str:
        """A column or axis title: the words with the unit where it is bits ("entropy error (bits)", "accuracy")."""
        return self._titled(self.words)

    @property
    def short_title(self) -> str:
        """The title in a narrow table ("KL (bits)")."""
        return self._titled(self.short_words or self.words)

    def _titled(self, words: str) -> str:
        return f"{words} ({self.unit})" if self.unit == "bits" else words

    def fmt(self, value: float) -> str:
        """The value as tables print it: a percentage to one decimal for a fraction, bits to 3 decimals (1e-4 style
        below 0.001), "nan" for a value that is not finite."""
        if not math.isfinite(value):
            return "nan"
        if self.unit == "fraction":
            return f"{number(100 * value, '.1f')}%"
        if value != 0 and abs(value) < 1e-3:
            return f"{value:.1e}"
        return number(value, ".3f")  # never "-0.000"

    def fmt_live(self, value: float) -> str:
        """The value as live progress prints it: a percentage to one decimal, else four decimals."""
        return f"{number(100 * value, '.1f')}%" if self.unit == "fraction" else number(value, ".4f")

    def reaches(self, value: float, mark: float) -> bool:
        """Whether `value` is at `mark` or on its better side."""
        return value >= mark if self.higher_is_better else value <= mark

    def better(self, a: float, b: float) -> bool:
        """Whether `a` is strictly better than `b`."""
        return a > b if self.higher_is_better else a < b

    def worst_end(self, interval: Mapping[str, Any]) -> Any:
        """The conservative end of an interval {"lo", "hi"}: the lower end where higher is better, else the upper."""
        return interval["lo"] if self.higher_is_better else interval["hi"]

    def best_end(self, interval: Mapping[str, Any]) -> Any:
        """The optimistic end of an interval {"lo", "hi"}."""
        return interval["hi"] if self.higher_is_better else interval["lo"]

    def best(self, values: Iterable[float]) -> float:
        """The best of `values`."""
        return max(values) if self.higher_is_better else min(values)

    def error(self, value: float) -> float:
        """The value as an error, lower better (1 - accuracy; an error itself)."""
        return 1 - value if self.higher_is_better else value

    def sort_key(self, value: float) -> float:
        """Ascending best first."""
        return -value if self.higher_is_better else value


METRICS: dict[str, MetricSpec] = {
    s.name: s
    for s in (
        MetricSpec("entropy_mae_bits", "entropy error", "bits", higher_is_better=False, headline=True),
        MetricSpec(
            "entropy_mae_curve_bits", "entropy error, mean curve", "bits", higher_is_better=False, headline=False
        ),
        MetricSpec("kl_bits", "KL(exact ‖ model)", "bits", higher_is_better=False, headline=False, short_words="KL"),
        MetricSpec("nll_bits", "NLL", "bits", higher_is_better=False, headline=False),
        MetricSpec("accuracy", "accuracy", "fraction", higher_is_better=True, headline=True),
    )
}
HEADLINE_METRICS = tuple(name for name, s in METRICS.items() if s.headline)


def spec(metric: str) -> MetricSpec:
    """The spec of `metric`; KeyError naming the known metrics."""
    try:
        return METRICS[metric]
    except KeyError:
        raise KeyError(f"unknown metric {metric!r} (known: {', '.join(METRICS)})") from None


def headline_metric(task: Any) -> str:
    """A task's headline metric: of a task name, the registered tunnel's (`tasks.info`); of a task, tunnel class or
    `TunnelInfo`, its `headline_metric` ("entropy_mae_bits" where it sets none)."""
    if isinstance(task, str):
        return tasks.info(task).headline_metric
    return str(task.headline_metric if isinstance(task, tasks.TunnelInfo) else tasks.as_task(task).headline_metric)


def pool_seeds(values: Sequence[float], level: float = 0.95) -> dict[str, float | None]:
    """The mean of one number over training seeds with its two-sided Student-t interval: {"mean", "lo", "hi"}, never
    clipped to the metric's range (an error's lower end below 0, an accuracy past 1: the interval the seeds give).
    Under two seeds "lo" and "hi" are None; where a value is not finite the mean is their plain average (NaN or inf)
    and the ends are NaN."""
    if not values:
        raise ValueError("pool_seeds: no values")
    vals = [float(v) for v in values]
    finite = all(math.isfinite(v) for v in vals)
    mean = fmean(vals) if finite else sum(vals) / len(vals)
    if len(vals) < 2:
        return {"mean": mean, "lo": None, "hi": None}
    if not finite:
        return {"mean": mean, "lo": math.nan, "hi": math.nan}
    lo, hi = seed_interval(vals, level)
    return {"mean": mean, "lo": lo, "hi": hi}


__all__ = ["DEFAULT_HEADLINE", "HEADLINE_METRICS", "METRICS", "MetricSpec", "headline_metric", "pool_seeds", "spec"]
