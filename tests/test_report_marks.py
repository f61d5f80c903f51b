"""Table 1's marks cannot flatter: three levels, seed intervals, and no approximate posterior earns ✓."""

from __future__ import annotations

from pathlib import Path

import pytest
from scipy import stats

from report_runs import record
from windtunnel.evaluation import marks
from windtunnel.report import formatting, table_cells, tables
from windtunnel.report.collect import RunRecord
from windtunnel.suites.settings import PAPER_RESULTS, PAPER_SETTINGS, SOURCE_KINDS, Sourced


@pytest.mark.parametrize(
    ("value", "level"), [(0.004, "exact"), (0.01, "exact"), (0.03, "approximate"), (0.1, "approximate"), (0.2, "fail")]
)
def test_entropy_levels(value, level):
    assert marks.level_of_value("entropy_mae_bits", value) == level


@pytest.mark.parametrize(("value", "level"), [(1.0, "exact"), (0.99, "exact"), (0.95, "approximate"), (0.5, "fail")])
def test_accuracy_levels(value, level):
    assert marks.level_of_value("accuracy", value) == level


HMM_WINDOWS = {"context-blind": 0, "last 1 obs": 1, "last 2 obs": 2, "last 3 obs": 3}


def test_a_windowed_filter_cannot_earn_exact():
    """A model at 0.005 bits that does not beat the three-observation filter is ◐, not ✓."""
    gains = dict(zip(HMM_WINDOWS, [0.4, 0.03, 0.01, 0.0], strict=True))
    window = record(
        "hmm", "transformer", 0, 0.005, kl_exact=0.004, gains={n: (d, gains[n]) for n, d in HMM_WINDOWS.items()}
    )
    cell = table_cells.cell_value([window], "entropy_mae_bits")
    assert cell["level"] == "approximate" and cell["seed_levels"] == ["approximate"]
    assert (cell["horizon"], cell["horizon_max"]) == (2, 3) and formatting.horizon_text(cell) == "2 of 3 obs"
    exact = record(
        "hmm", "transformer", 0, 0.005, kl_exact=0.0005, gains={n: (d, 0.01) for n, d in HMM_WINDOWS.items()}
    )
    cell = table_cells.cell_value([exact], "entropy_mae_bits")
    assert cell["level"] == "exact" and formatting.horizon_text(cell) == "3 of 3 obs (every window)"
    # a task without approximations is marked on its numbers alone: entropy error and KL
    assert table_cells.cell_value([record("bijection", "lstm", 0, 0.005)], "entropy_mae_bits")["level"] == "exact"
    blind = record("bijection", "lstm", 0, 0.0, kl_exact=19.5)  # right entropy, wrong distribution
    assert table_cells.cell_value([blind], "entropy_mae_bits")["level"] == "fail"


def test_the_mark_uses_the_seed_interval_not_evaluation_noise():
    """Three seeds whose mean is exact but whose spread is wide: the t-interval's upper end decides."""
    vals = [0.002, 0.004, 0.0135]
    runs = [record("bijection", "transformer", s, v, lo=v - 1e-4, hi=v + 1e-4) for s, v in enumerate(vals)]
    cell = table_cells.cell_value(runs, "entropy_mae_bits")
    m, sd, n = sum(vals) / 3, stats.tstd(vals), 3
    half = stats.t.ppf(0.975, n - 1) * sd / n**0.5
    assert cell["interval"] == "seeds" and cell["mean"] == pytest.approx(m)
    assert (cell["lo"], cell["hi"]) == pytest.approx((m - half, m + half))  # never clipped: the lower end is < 0
    assert cell["lo"] < 0
    assert cell["mean"] < marks.Thresholds().exact_bits < cell["hi"]
    assert cell["level"] == "approximate"  # the mean alone would have said exact
    assert cell["seeds_exact"] == 2 and cell["seed_levels"] == ["exact", "exact", "approximate"]
    assert (cell["seed_min"], cell["seed_max"]) == (0.002, 0.0135)
    # accuracy: the lower end decides
    acc = [record("recall", "mamba", s, v, metric="accuracy") for s, v in enumerate([1.0, 0.995, 0.96])]
    cell = table_cells.cell_value(acc, "accuracy")
    assert cell["lo"] < marks.Thresholds().exact_accuracy and cell["level"] == "approximate"
    # one seed: its bootstrap interval, and the cell says so
    one = table_cells.cell_value([record("bijection", "lstm", 0, 0.009, lo=0.008, hi=0.011)], "entropy_mae_bits")
    assert one["interval"] == "bootstrap" and one["level"] == "approximate"


def test_table_rows_show_seed_spread_horizon_and_paper_only_at_paper_params():
    gains = {n: (d, g) for (n, d), g in zip(HMM_WINDOWS.items(), [0.4, 0.03, -0.01, -0.02], strict=True)}
    runs = [record("hmm", "mamba", s, v, kl_exact=0.03, gains=gains) for s, v in enumerate([0.08, 0.085, 0.083])]
    header, rows, data = tables.primitives_table(runs)
    assert "HMM: KL-nearest reference · belief horizon" in header
    row = dict(zip(header, rows[0], strict=True))
    assert row["HMM entropy error (bits)"].startswith("◐ 0.083 [")
    assert "seeds 0.080–0.085 · 0/3 seeds ✓" in row["HMM entropy error (bits)"]
    assert "(paper 0.024)" in row["HMM entropy error (bits)"]
    assert row["HMM: KL-nearest reference · belief horizon"] == "exact · 1 of 3 obs"
    assert data["mamba"]["hmm"]["paper_source"].startswith("paper: ")
    small = [record("hmm", "mamba", s, 0.08, params={"S": 3}, kl_exact=0.03, gains=gains) for s in range(2)]
    _, rows, _ = tables.primitives_table(small)
    assert "paper" not in rows[0][1]  # S = 3 is not the paper's task: no paper number beside it


def test_runs_that_differ_in_a_task_parameter_are_separate_cells():
    runs = [record("hmm", "lstm", 0, 0.3, params={"K": 10}), record("hmm", "lstm", 0, 0.4, params={"K": 20})]
    header, rows, data = tables.primitives_table(runs)
    assert [r[0] for r in rows] == ["lstm (task.params.K=10)", "lstm (task.params.K=20)"]
    assert all("seed" not in r[1] for r in rows)  # one seed each: no seed count (Table 1's legend says so)
    assert table_cells.mixed_configurations(runs) == [
        "lstm / hmm: 2 configurations (task.params.K=10; task.params.K=20)"
    ]
    same = [record("hmm", "lstm", s, 0.3, params={"K": 10}) for s in range(2)]  # seeds of one configuration
    assert len(tables.primitives_table(same)[1]) == 1 and not table_cells.mixed_configurations(same)


def test_every_paper_value_carries_a_source_tag():
    for task, per_arch in PAPER_SETTINGS.items():
        for arch, entries in per_arch.items():
            assert entries, (task, arch)
            for key, v in entries.items():
                assert isinstance(v, Sourced), (task, arch, key)
                assert any(v.source.startswith(k + ": ") and len(v.source) > len(k) + 4 for k in SOURCE_KINDS)
    for arch, cells in PAPER_RESULTS.items():
        for task, v in cells.items():
            assert isinstance(v, Sourced) and v.source.startswith("paper: "), (arch, task)
    with pytest.raises(ValueError, match="source"):
        Sourced(1, "somewhere")


def test_paper_tier_is_built_from_the_sourced_table():
    from windtunnel.models.presets import preset
    from windtunnel.suites import run_config
    from windtunnel.suites.settings import paper_setting, values

    for task in ("bijection", "hmm", "recall", "regression"):
        for arch in ("transformer", "mamba", "lstm", "mlp", "mlp-pointwise"):
            cfg = run_config(task, arch, "paper")
            table = paper_setting(task, arch)
            for key, v in values(table, "train.").items():
                got = cfg["train"][key]
                assert (tuple(got) if isinstance(got, list) else got) == v, (task, arch, key)
            assert cfg["task"]["params"] == values(table, "task.")
            sized = values(table, "model.")  # the authors' model form goes into the cell's size, over the preset
            assert cfg["model"].get("size", {}) == sized, (task, arch)
            size = preset(task, arch, "paper").as_config()
            assert all(size[k] == v for k, v in sized.items() if k in size), (task, arch)  # the preset agrees
    # the HMM settings of the authors' scripts: weight decay 0.01, no warmup, ~23k steps for Mamba and LSTM
    hmm = run_config("hmm", "mamba", "paper")["train"]
    assert (hmm["weight_decay"], hmm["warmup_steps"], hmm["steps"], hmm["dtype"]) == (0.01, 0, 23_460, "float32")


def test_docs_settings_table_matches_the_code():
    from windtunnel.suites.settings import settings_markdown

    doc = Path(__file__).resolve().parents[1] / "docs" / "paper-settings.md"
    assert doc.read_text() == settings_markdown(), "regenerate: python -m windtunnel.suites.settings > " + str(doc)


def test_capacity_table_reports_the_largest_n_at_each_level():
    def run(arch, seed, accs):
        evals = {
            ("default" if n == 16 else f"N={n}"): {
                "task_params": {"N": n},
                "metrics": {
                    "accuracy": {"mean": a, "lo": a, "hi": a},
                    "entropy_mae_bits": {"mean": 0.001, "lo": 0.001, "hi": 0.001},
                    "kl_bits": {"mean": 0.001, "lo": 0.001, "hi": 0.001},
                },
            }
            for n, a in accs.items()
        }
        return RunRecord(
            path=Path(f"recall-{arch}-s{seed}"),
            task="recall",
            arch=arch,
            seed=seed,
            config={"task": {"name": "recall", "params": {"N": 16}}},
            evals=evals,
        )

    recs = [
        run("transformer", 0, {4: 1.0, 8: 1.0, 16: 0.995}),
        run("transformer", 1, {4: 1.0, 8: 0.99, 16: 0.97}),
        run("mamba", 0, {4: 0.995, 8: 0.93, 16: 0.4}),
    ]
    header, rows = tables.capacity_table(recs, "recall", "N")
    assert header == ["Architecture", "N = 4", "N = 8", "N = 16", "largest exact", "largest approximate"]
    assert rows[0] == ["transformer", "✓ 100.0%", "◐ 99.5%", "✗ 98.2%", "4", "8"]  # two seeds: a wide t-interval
    assert rows[1] == ["mamba", "✓ 99.5%", "◐ 93.0%", "✗ 40.0%", "4", "8"]
    assert tables.capacity_table([r for r in recs if r.arch == "mamba"][:0], "recall", "N") is None


def test_recall_below_stored_value_chance_is_called_an_optimisation_failure():
    recs = [
        RunRecord(
            path=Path(f"recall-{a}"),
            task="recall",
            arch=a,
            seed=0,
            config={"task": {"name": "recall", "params": {"N": 16}}},
            evals={},
        )
        for a in ("lstm", "uniform")
    ]
    data = {
        "lstm": {"recall": {"mean": 0.04}},
        "mamba": {"recall": {"mean": 0.9}},
        "uniform": {"recall": {"mean": 0.004}},
    }
    assert tables.below_floor(data, recs) == ["recall / lstm (4.0% < chance among the 16 stored values 6.2%)"]
    refs = tables.reference_levels(recs)
    assert any(r.startswith("recall: chance") and "16 stored values" in r and "6.2%" in r for r in refs)
    assert any(r.startswith("recall: scored at the answer slot") for r in refs)


def test_seed_intervals_are_never_clipped_to_the_metric_range():
    """The Student-t interval the seeds give, past the metric's range where it reaches it: clipping would print a
    lower end of 0 as if the seeds had pinned it."""
    acc = [record("recall", "mamba", s, v, metric="accuracy") for s, v in enumerate([0.06, 0.22, 0.19])]
    cell = table_cells.cell_value(acc, "accuracy")
    assert cell["lo"] < 0.0 < cell["hi"] < 1.0
    err = [record("bijection", "mamba", s, v) for s, v in enumerate([0.001, 0.002, 0.05])]
    assert table_cells.cell_value(err, "entropy_mae_bits")["lo"] < 0.0


def test_time_to_bayes_table_reads_first_crossings_from_each_runs_history():
    def run(task, arch, seed, curve):
        hist = [
            {"step": s, "split": "eval", "train_s": t, tables.headline_metric(task): v, **extra}
            for s, t, v, extra in curve
        ]
        return RunRecord(
            path=Path(f"{task}-{arch}-s{seed}"),
            task=task,
            arch=arch,
            seed=seed,
            config={},
            evals={},
            history=[{"step": 1, "loss": 1.0}, *hist],
        )

    recs = [
        run(
            "hmm",
            "transformer",
            0,
            [
                (100, 10.0, 0.2, {"horizon": 1, "horizon_max": 3}),
                (200, 20.0, 0.04, {"horizon": 3, "horizon_max": 3}),
                (300, 30.0, 0.009, {"horizon": 3, "horizon_max": 3}),
            ],
        ),
        run(
            "hmm",
            "transformer",
            1,
            [(100, 12.0, 0.08, {"horizon": 2, "horizon_max": 3}), (200, 24.0, 0.03, {"horizon": 2, "horizon_max": 3})],
        ),
        run("recall", "mamba", 0, [(50, 5.0, 0.95, {}), (100, 9.0, 1.0, {})]),
        RunRecord(
            path=Path("old"),
            task="bijection",
            arch="lstm",
            seed=0,
            config={},
            evals={},
            history=[{"step": 5, "split": "eval", "entropy_mae_bits": 0.1}],
        ),
    ]  # no train_s: left out
    header, rows = tables.time_to_bayes_table(recs)
    assert header[3:8] == ["≤ 0.1 bits", "≤ 0.05 bits", "≤ 0.02 bits", "≤ 0.01 bits", "exact filter"]
    hmm = next(r for r in rows if r[0] == "hmm")
    assert hmm[2] == "2"
    assert hmm[3] == "16 s [12–20] @150 2/2"  # seed 0 at step 200 (20 s), seed 1 at step 100 (12 s)
    assert hmm[4] == "22 s [20–24] @200 2/2"
    assert hmm[6] == "30 s [30–30] @300 1/2" and hmm[7] == "20 s [20–20] @200 1/2"
    recall = next(r for r in rows if r[0] == "recall")
    assert recall[-1] == "≥ 90%: 5 s @50; ≥ 99%: 9 s @100; ≥ 100%: 9 s @100"
    assert not any(r[0] == "bijection" for r in rows)
