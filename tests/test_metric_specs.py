"""One spec per metric (`windtunnel.evaluation.metric_specs`): the only source of metric titles, units, directions and
formats; the one accessor of a task's headline metric; the one mean over seeds with its Student-t interval."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
from scipy import stats

from windtunnel import tasks
from windtunnel.config import warmup_for
from windtunnel.evaluation.crossings import PRECISION_MARKS
from windtunnel.evaluation.metric_specs import HEADLINE_METRICS, METRICS, MetricSpec, headline_metric, pool_seeds, spec
from windtunnel.evaluation.seed_pool import seed_stats
from windtunnel.executors.driver import headline
from windtunnel.progress import format_val
from windtunnel.report import formatting, sweep_table, tables
from windtunnel.tasks.base import HEADLINE_METRICS as TASK_HEADLINE_METRICS

SRC = Path(__file__).resolve().parents[1] / "src" / "windtunnel"


def test_every_metric_the_tables_print_has_a_spec():
    assert set(sweep_table.METRICS) <= set(METRICS)  # the sweep table's columns
    assert {"entropy_mae_bits", "kl_bits"} <= set(METRICS)  # compare's columns beside each input's headline
    assert set(HEADLINE_METRICS) == set(TASK_HEADLINE_METRICS)  # Table 1's columns, the marks, time to Bayes
    assert set(PRECISION_MARKS) <= set(HEADLINE_METRICS)
    assert all(isinstance(s, MetricSpec) and s.name == name for name, s in METRICS.items())


def test_the_spec_is_the_only_title_source():
    """No module but metric_specs holds a dict literal from metric names to words: every title comes from the spec."""
    found = []
    for path in SRC.rglob("*.py"):
        if path.name == "metric_specs.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict) and node.keys:
                keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
                strings = [v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
                # words, not only identifiers (metrics.PER_SEQUENCE_METRICS' attributes, collect's field kinds)
                texts = len(strings) == len(node.values) and not all(v.isidentifier() for v in strings)
                if texts and len(keys) == len(node.keys) and len(set(keys) & set(METRICS)) >= 2:
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert not found, f"metric titles outside metric_specs: {found}"


def test_titles_read_as_before():
    assert [METRICS[m].title for m in ("entropy_mae_bits", "kl_bits", "accuracy")] == [
        "entropy error (bits)",
        "KL(exact ‖ model) (bits)",
        "accuracy",
    ]
    assert {m: METRICS[m].short_title for m in sweep_table.METRICS} == {  # the sweep table's narrow titles
        "entropy_mae_bits": "entropy error (bits)",
        "kl_bits": "KL (bits)",
        "accuracy": "accuracy",
    }
    assert [METRICS[m].words for m in ("entropy_mae_bits", "kl_bits")] == ["entropy error", "KL(exact ‖ model)"]


def test_formats():
    bits, acc = METRICS["kl_bits"], METRICS["accuracy"]
    assert [bits.fmt(v) for v in (0.1234, 2e-5, 0.0, -0.0, math.nan, math.inf)] == [
        "0.123",
        "2.0e-05",
        "0.000",
        "0.000",
        "nan",
        "nan",
    ]
    assert acc.fmt(0.9712) == "97.1%" and acc.fmt(math.nan) == "nan"
    assert formatting.fmt(0.9712, "accuracy") == "97.1%" and formatting.fmt(2e-5, "entropy_mae_bits") == "2.0e-05"
    assert bits.fmt_live(2e-5) == "0.0000" and acc.fmt_live(0.9712) == "97.1%"
    assert format_val(0.12345, "entropy_mae_bits") == "0.1235"


def test_direction():
    err, acc = METRICS["entropy_mae_bits"], METRICS["accuracy"]
    assert err.reaches(0.01, 0.01) and not err.reaches(0.02, 0.01) and err.better(0.1, 0.2)
    assert acc.reaches(0.99, 0.99) and not acc.reaches(0.9, 0.99) and acc.better(0.9, 0.8)
    assert acc.error(0.9) == pytest.approx(0.1) and err.error(0.3) == 0.3
    assert sorted([0.2, 0.1, 0.3], key=err.sort_key) == [0.1, 0.2, 0.3]
    assert sorted([0.2, 0.1, 0.3], key=acc.sort_key) == [0.3, 0.2, 0.1]
    iv = {"lo": 0.1, "hi": 0.3}
    assert (err.worst_end(iv), err.best_end(iv), acc.worst_end(iv), acc.best_end(iv)) == (0.3, 0.1, 0.1, 0.3)
    assert err.best([0.2, 0.1]) == 0.1 and acc.best([0.2, 0.1]) == 0.2
    with pytest.raises(KeyError, match="unknown metric 'bogus'"):
        spec("bogus")


@pytest.mark.parametrize("name", tasks.names())
def test_headline_metric_agrees_with_each_registered_task(name):
    metric = tasks.info(name).headline_metric
    assert headline_metric(name) == metric == tables.headline_metric(name)
    assert headline_metric(tasks.info(name)) == metric  # a TunnelInfo, as the report hands to the marks
    assert headline({"task": {"name": name}}) == metric  # what live progress shows
    assert METRICS[metric].headline


def test_headline_metric_of_an_object_without_one_is_the_default():
    assert headline_metric(object()) == "entropy_mae_bits"


@pytest.mark.parametrize(
    "values", [[0.1, 0.3], [0.012, 0.015, 0.011], [0.97, 1.0, 0.99, 0.95, 0.98], [-0.2, 0.4, 0.0, 0.1]]
)
def test_pool_seeds_is_the_student_t_interval(values):
    n = len(values)
    mean = sum(values) / n
    lo, hi = stats.t.interval(0.95, n - 1, loc=mean, scale=stats.sem(values))
    pooled = pool_seeds(values)
    assert pooled["mean"] == pytest.approx(mean, abs=1e-15)
    assert (pooled["lo"], pooled["hi"]) == pytest.approx((lo, hi), rel=1e-12)
    assert seed_stats(values) == pooled  # the marks pool through it


def test_pool_seeds_edges():
    assert pool_seeds([0.5]) == {"mean": 0.5, "lo": None, "hi": None}
    nan = pool_seeds([0.1, math.nan])
    assert all(isinstance(v, float) and math.isnan(v) for v in nan.values())
    assert pool_seeds([math.inf, 1.0])["mean"] == math.inf
    with pytest.raises(ValueError):
        pool_seeds([])


def test_the_warmup_rule():
    assert [warmup_for(s) for s in (0, 10, 20, 1000, 7850)] == [1, 1, 1, 50, 392]
