"""`windtunnel sweep`: grid parsing, the cross product and its run names, validation before anything exists, an
end-to-end sweep on the local executor (tables, re-run skips, a different sweep refused), and the pick: ★ on the
validation stream (never the test stream), seeds averaged into settings, NaN and unvalidated points never ★."""

from __future__ import annotations

import csv
import json
import math
import re
import shutil

import pytest
from typer.testing import CliRunner

from cli_args import SWEEP_BASE
from windtunnel.cli import app
from windtunnel.config import apply_overrides
from windtunnel.evaluation.metrics import seed_interval
from windtunnel.executors import ExecutorOptions
from windtunnel.machine import machine_description
from windtunnel.report.sweep_table import NO_VALIDATION, key_labels, pick, rank, write_table
from windtunnel.store.records.drivers import SweepTableRecord
from windtunnel.sweep import SWEEP_CONFIG, expand, parse_grid, sweep

runner = CliRunner()

BASE = SWEEP_BASE  # a smoke-sized bijection transformer: a run trains and evaluates in well under a second
GRID = ["--grid", "train.lr=1e-3,3e-3", "--grid", "seed=0,1", "--no-progress", "--threads", "1"]
SAFE = re.compile(r"^[A-Za-z0-9._=+-]+$")


# --- parse_grid --------------------------------------------------------------------------------------------


def test_parse_grid_values_are_yaml_scalars_in_order():
    grid = parse_grid(["train.lr=1e-3,3e-4", "seed=0,1,2", "train.compile=true,false", "train.schedule=cosine,wsd"])
    assert list(grid) == ["train.lr", "seed", "train.compile", "train.schedule"]
    assert grid["train.lr"] == [0.001, 0.0003] and all(isinstance(v, float) for v in grid["train.lr"])
    assert grid["seed"] == [0, 1, 2] and grid["train.compile"] == [True, False]
    assert grid["train.schedule"] == ["cosine", "wsd"]


def test_parse_grid_brackets_and_quotes_hold_commas():
    grid = parse_grid(["task.params.K=[20,30],[40]", "train.betas=[0.9, 0.99]", "x.y='a,b',c", "m={a: 1, b: 2}"])
    assert grid["task.params.K"] == [[20, 30], [40]]
    assert grid["train.betas"] == [[0.9, 0.99]]
    assert grid["x.y"] == ["a,b", "c"]
    assert grid["m"] == [{"a": 1, "b": 2}]


@pytest.mark.parametrize(
    ("items", "what"),
    [
        (["seed"], "expected key=v1,v2"),
        (["=1,2"], "malformed key"),
        (["train..lr=1"], "malformed key"),
        (["seed="], "no values"),
        (["seed=0,,1"], "empty value"),
        (["seed=0,"], "empty value"),
        (["seed=0,0"], "repeats the value 0"),
        (["seed=0", "seed=1"], "given twice"),
        (["task.params.K=[20,30"], "unclosed bracket"),
        (["task.params.K=20]"], "unbalanced"),
        (["x='a,b"], "unclosed quote"),
    ],
)
def test_parse_grid_errors_name_the_option_and_item(items, what):
    with pytest.raises(ValueError, match=re.escape(what)) as err:
        parse_grid(items)
    assert str(err.value).startswith("--grid") and repr(items[-1]) in str(err.value)


# --- expand ------------------------------------------------------------------------------------------------


def test_expand_is_the_cross_product_in_grid_order():
    points = expand(BASE, {"train.lr": [1e-3, 3e-3], "seed": [0, 1, 2]})
    assert [tuple(p.values.values()) for p in points] == [(lr, s) for lr in (1e-3, 3e-3) for s in (0, 1, 2)]
    assert points[0].name == "lr=0.001-seed=0" and points[-1].name == "lr=0.003-seed=2"
    assert len({p.name for p in points}) == 6 and all(SAFE.match(p.name) for p in points)
    assert points[4].config == apply_overrides(BASE, {"train.lr": 3e-3, "seed": 1})
    assert points[4].resolved.train.lr == 3e-3 and points[4].resolved.model.size["d_model"]


def test_expand_names_ambiguous_keys_in_full_and_unsafe_values_safely():
    assert key_labels(["train.lr", "optim.lr", "seed"]) == {k: k for k in ("train.lr", "optim.lr", "seed")}
    points = expand(BASE, {"train.batch_size": [4, 8], "eval.batch_size": [16], "train.betas": [[0.9, 0.99]]})
    assert [p.name for p in points] == [
        "train.batch_size=4-eval.batch_size=16-betas=0.9+0.99",
        "train.batch_size=8-eval.batch_size=16-betas=0.9+0.99",
    ]
    assert all(SAFE.match(p.name) for p in points)


def test_expand_refuses_two_points_that_are_one_run():
    with pytest.raises(ValueError, match="same run"):
        expand(BASE, {"task.V": [6, 7], "task.params.V": [8]})  # both keys set task.params.V


def test_expand_blames_the_value_then_the_combination_then_the_base():
    with pytest.raises(ValueError, match=re.escape("--grid train.lr=-1: train.lr: Input should be greater than 0")):
        expand(BASE, {"seed": [0, 1], "train.lr": [1e-3, -1]})
    base = apply_overrides(BASE, {"task.L": 3})  # V=4 fits L=3, L=5 fits V=6; V=4 with L=5 does not
    with pytest.raises(ValueError, match=re.escape("--grid task.V=4 task.L=5: bijection.L")):
        expand(base, {"task.V": [6, 4], "task.L": [3, 5]})
    with pytest.raises(ValueError, match=re.escape("config: train.steps")):
        expand(apply_overrides(BASE, {"train.steps": -1}), {"seed": [0, 1]})


def test_sweep_validates_every_point_before_creating_anything(tmp_path):
    out = tmp_path / "a" / "sweep"
    with pytest.raises(ValueError, match=re.escape("--grid train.lr=-1: train.lr: Input should be greater than 0")):
        sweep(BASE, {"train.lr": [1e-3, -1]}, out)
    with pytest.raises(ValueError, match="--set seed: also swept"):
        sweep(BASE, {"seed": [0]}, out, overrides={"seed": 1})
    with pytest.raises(ValueError, match="--executor"):
        sweep(BASE, {"seed": [0]}, out, ExecutorOptions("nope"))
    assert not (tmp_path / "a").exists()


# --- end to end --------------------------------------------------------------------------------------------


def _cli(config, out, *extra):
    return runner.invoke(app, ["sweep", str(config), *GRID, "--out", str(out), *extra])


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """One CLI sweep of train.lr x seed (4 runs) on the local executor: (config file, out, CLI output)."""
    tmp = tmp_path_factory.mktemp("sweep")
    config = tmp / "base.json"
    config.write_text(json.dumps(BASE))
    out = tmp / "out"
    r = _cli(config, out)
    assert r.exit_code == 0, r.output
    return config, out, r.output


def _final_eval(run_dir):
    """The last validation line of a run's metrics.jsonl at its final step."""
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in lines if r.get("split") == "eval" and r["step"] == BASE["train"]["steps"]][-1]


def test_sweep_trains_every_point_and_tabulates_it(swept):
    _, out, output = swept
    names = {"lr=0.001-seed=0", "lr=0.001-seed=1", "lr=0.003-seed=0", "lr=0.003-seed=1"}
    assert {p.name for p in (out / "runs").iterdir()} == names
    assert str(out / "sweep.md") in output
    table = json.loads((out / "sweep.json").read_text())
    rows, settings = table["rows"], table["settings"]
    assert len(rows) == 4 and {r["run"] for r in rows} == names
    assert table["grid"] == {"train.lr": [0.001, 0.003], "seed": [0, 1]} and table["executor"] == "local"
    assert table["machine"] and table["total_wall_s"] >= 0 and not table["missing"]
    assert sorted(table["trained"]) == sorted(names) and table["skipped"] == []
    assert "in this call, 4 of 4 runs trained by it" in (out / "sweep.md").read_text()
    # two settings (lr), two seeds each, best first by the mean validation entropy error; ★ on the first only
    assert [s["setting"] for s in settings] in (["lr=0.001", "lr=0.003"], ["lr=0.003", "lr=0.001"])
    errors = [s["validation"]["entropy_mae_bits"]["mean"] for s in settings]
    assert errors == sorted(errors) and settings[0]["best"] and not settings[1]["best"]
    assert f"best setting (validation) {settings[0]['setting']} (2 seeds" in output
    # rows: grouped by setting in that order, seeds in grid order; a row's "best": a run of the ★ setting
    assert [r["run"] for r in rows] == [run for s in settings for run in s["runs"]]
    assert [r["run"] for r in rows if r["best"]] == settings[0]["runs"]
    for r in rows:
        run_dir = out / "runs" / r["run"]
        metrics = json.loads((run_dir / "eval.json").read_text())["default"]["metrics"]
        for m in ("entropy_mae_bits", "kl_bits", "accuracy"):
            assert r["metrics"][m] == {k: metrics[m][k] for k in ("mean", "lo", "hi")}  # the test stream
            assert r["validation"][m] == _final_eval(run_dir)[m]  # the validation stream, final step
        assert r["wall_s"] == json.loads((run_dir / "done.json").read_text())["wall_s"]
        assert r["tokens_per_s"] > 0 and r["unranked"] is None
        config = json.loads((run_dir / "config.json").read_text())
        assert (config["train"]["lr"], config["seed"]) == (r["values"]["train.lr"], r["values"]["seed"])
        assert r["seed"] == config["seed"] and r["setting"] == f"lr={config['train']['lr']}"
    with open(out / "sweep.csv") as f:
        lines = list(csv.DictReader(f))
    assert [line["run"] for line in lines] == [r["run"] for r in rows]
    assert {"train.lr", "seed", "entropy_mae_bits_lo", "accuracy_hi", "tokens_per_s"} <= set(lines[0])
    assert {"validation_entropy_mae_bits", "setting", "best"} <= set(lines[0])
    assert float(lines[0]["entropy_mae_bits"]) == rows[0]["metrics"]["entropy_mae_bits"]["mean"]
    assert float(lines[0]["validation_entropy_mae_bits"]) == rows[0]["validation"]["entropy_mae_bits"]
    assert [line["best"] for line in lines] == ["1", "1", "", ""]
    md = (out / "sweep.md").read_text()
    assert md.startswith("# Sweep of ") and "train.lr=0.001,0.003" in md and "windtunnel sweep " in md
    assert all(name in md for name in names) and "test entropy error (bits) [95% CI]" in md
    assert md.index("## Settings") < md.index("## Runs")
    settings_md, runs_md = md.split("## Runs")
    assert settings_md.count("| ★ |") == 1 and runs_md.count("| ★ |") == 2


def test_seeds_are_one_setting_with_mean_and_interval_over_seeds(swept):
    _, out, _ = swept
    table = json.loads((out / "sweep.json").read_text())
    rows = {r["run"]: r for r in table["rows"]}
    for s in table["settings"]:
        lr = s["values"]["train.lr"]
        assert s["values"] == {"train.lr": lr} and s["task"] == "bijection"
        assert s["runs"] == [f"lr={lr}-seed=0", f"lr={lr}-seed=1"] and s["seeds"] == [0, 1] and s["n_seeds"] == 2
        for m in ("entropy_mae_bits", "kl_bits", "accuracy"):
            for stream, of in (
                ("validation", lambda r, m=m: r["validation"][m]),
                ("metrics", lambda r, m=m: r["metrics"][m]["mean"]),
            ):
                values = [of(rows[run]) for run in s["runs"]]
                lo, hi = seed_interval(values)
                cell = s[stream][m]
                assert cell["mean"] == pytest.approx(sum(values) / 2) and cell["interval"] == "seeds"
                assert (cell["lo"], cell["hi"]) == pytest.approx((lo, hi))  # never clipped to the metric's range
                assert cell["lo"] <= cell["mean"] <= cell["hi"]


def _copy(swept, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(swept[1], out)
    return out


def _retable(out):
    """Write the tables of `out` again from its run directories (what a re-run of the sweep does)."""
    record = json.loads((out / SWEEP_CONFIG).read_text())
    meta = {"executor": "local", "jobs": 1, "threads": 1, "command": "windtunnel sweep CONFIG"}
    meta |= {"trained": [], "total_wall_s": 0.0, "skipped": []}
    return write_table(out, expand(record["base"], record["grid"]), record, meta, machine_description())


def _set_validation(run_dir, add_at=None, **values):
    """Set metrics of the last validation line at the final step of a run's metrics.jsonl (add_at: on a copy of it
    at step `add_at`, appended after it)."""
    path = run_dir / "metrics.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    at = [i for i, r in enumerate(lines) if r.get("split") == "eval" and r["step"] == BASE["train"]["steps"]][-1]
    if add_at is not None:
        lines.append({**lines[at], "step": add_at})
        at = len(lines) - 1
    lines[at].update(values)
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))


def _set_test(run_dir, **values):
    """Set metrics (mean, lo and hi alike) of a run's test-stream evaluation (eval.json's default setting)."""
    path = run_dir / "eval.json"
    data = json.loads(path.read_text())
    for m, v in values.items():
        data["default"]["metrics"][m].update(mean=v, lo=v, hi=v)
    path.write_text(json.dumps(data))


def test_the_pick_reads_validation_not_test(swept, tmp_path):
    out = _copy(swept, tmp_path)
    runs = out / "runs"
    for seed in (0, 1):  # lr=0.001: best on the test stream, worst on validation; lr=0.003 the other way round
        _set_test(runs / f"lr=0.001-seed={seed}", entropy_mae_bits=0.01)
        _set_test(runs / f"lr=0.003-seed={seed}", entropy_mae_bits=0.9)
        _set_validation(runs / f"lr=0.001-seed={seed}", entropy_mae_bits=0.5 + seed)
        _set_validation(runs / f"lr=0.003-seed={seed}", entropy_mae_bits=0.2 + seed / 10)
    _set_validation(runs / "lr=0.001-seed=0", add_at=3, entropy_mae_bits=0.0)  # not the final step: not read
    table = _retable(out)
    best = [s for s in table["settings"] if s["best"]]
    assert [s["setting"] for s in best] == ["lr=0.003"] == [table["settings"][0]["setting"]]
    assert best[0]["validation"]["entropy_mae_bits"]["mean"] == pytest.approx(0.25)
    assert best[0]["metrics"]["entropy_mae_bits"]["mean"] == pytest.approx(0.9)  # reported, not used
    assert table["settings"][1]["metrics"]["entropy_mae_bits"]["mean"] == pytest.approx(0.01)
    assert [r["run"] for r in table["rows"] if r["best"]] == ["lr=0.003-seed=0", "lr=0.003-seed=1"]
    assert json.loads((out / "sweep.json").read_text())["settings"][0]["setting"] == "lr=0.003"
    # the last validation line at the final step is the one read
    _set_validation(runs / "lr=0.001-seed=0", add_at=6, entropy_mae_bits=0.0)
    _set_validation(runs / "lr=0.001-seed=1", add_at=6, entropy_mae_bits=0.0)
    table = _retable(out)
    assert [s["setting"] for s in table["settings"] if s["best"]] == ["lr=0.001"]
    assert table["settings"][0]["validation"]["entropy_mae_bits"]["mean"] == 0.0


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_nan_or_inf_metric_is_never_best(swept, tmp_path, bad):
    out = _copy(swept, tmp_path)
    runs = out / "runs"
    for seed in (0, 1):
        _set_validation(runs / f"lr=0.001-seed={seed}", entropy_mae_bits=0.01)  # would be best but for the NaN
        _set_validation(runs / f"lr=0.003-seed={seed}", entropy_mae_bits=0.5)
    _set_validation(runs / "lr=0.001-seed=1", entropy_mae_bits=bad)
    _set_test(runs / "lr=0.001-seed=1", entropy_mae_bits=bad)
    table = _retable(out)
    first, last = table["settings"]
    assert first["setting"] == "lr=0.003" and first["best"] and first["unranked"] is None
    assert last["setting"] == "lr=0.001" and not last["best"] and str(bad) in last["unranked"]
    assert last["validation"]["entropy_mae_bits"]["lo"] is None  # no interval over a non-finite value
    rows = {r["run"]: r for r in table["rows"]}
    assert str(bad) in rows["lr=0.001-seed=1"]["unranked"] and rows["lr=0.001-seed=0"]["unranked"] is None
    assert [r["run"] for r in table["rows"]][-2:] == ["lr=0.001-seed=0", "lr=0.001-seed=1"]  # last
    md = (out / "sweep.md").read_text()
    assert f"validation entropy error (bits) is {bad}" in md
    # every setting non-finite: no ★ at all
    for seed in (0, 1):
        _set_validation(runs / f"lr=0.003-seed={seed}", entropy_mae_bits=math.nan)
    table = _retable(out)
    assert not any(s["best"] for s in table["settings"]) and not any(r["best"] for r in table["rows"])
    assert "| ★ |" not in (out / "sweep.md").read_text()


def test_rank_keeps_tasks_together_and_never_marks_nan_or_missing():
    def item(task, metric, value):
        return {"task": task, "validation": None if value is None else {metric: value}}

    items = [
        item("bijection", "entropy_mae_bits", math.nan),
        item("recall", "accuracy", 0.5),
        item("bijection", "entropy_mae_bits", 0.3),
        item("bijection", "entropy_mae_bits", None),
        item("recall", "accuracy", 0.9),
        item("bijection", "entropy_mae_bits", 0.1),
        {"task": "recall", "validation": {"accuracy": {"mean": math.inf}}},
    ]
    ranked = rank(items)
    assert [r["task"] for r in ranked] == ["bijection"] * 4 + ["recall"] * 3
    v = [(r["validation"] or {}).get("entropy_mae_bits", (r["validation"] or {}).get("accuracy")) for r in ranked]
    assert v[:2] == [0.1, 0.3] and math.isnan(v[2]) and v[3] is None and v[4:6] == [0.9, 0.5]
    assert [r["best"] for r in ranked] == [True, False, False, False, True, False, False]
    assert ranked[3]["unranked"] == NO_VALIDATION and "is nan" in ranked[2]["unranked"]
    assert "is inf" in ranked[6]["unranked"] and ranked[4]["unranked"] is None


def test_a_tie_on_the_headline_goes_to_the_run_that_ended_sooner():
    """Recall at 100% on several rates: the ★ is the one whose training ended first (an early stop at a lasting ✓),
    whatever the grid order; a table without `stopped_at` (written before it was) keeps the order given; a strictly
    better headline still wins over an earlier stop."""

    def item(acc, stopped):
        return {"task": "recall", "validation": {"accuracy": acc}, "stopped_at": stopped}

    ranked = rank([item(1.0, 3000), item(1.0, 2400), item(1.0, 2700), item(0.5, 150)])
    assert [r["stopped_at"] for r in ranked] == [2400, 2700, 3000, 150] and ranked[0]["best"]
    ranked = rank([item(1.0, None), item(1.0, None)])
    assert [r["best"] for r in ranked] == [True, False]
    ranked = rank([item(0.99, 900), item(1.0, 3000)])
    assert ranked[0]["validation"]["accuracy"] == 1.0
    ranked = rank(
        [{"task": "hmm", "validation": {"entropy_mae_bits": v}, "stopped_at": s} for v, s in ((0.2, 9), (0.1, 99))]
    )
    assert ranked[0]["stopped_at"] == 99  # entropy error first, the stop only breaks a tie

    def setting(name, stopped):
        return {"setting": name, "n_seeds": 1, "stopped_at": stopped, "validation": {"accuracy": {"mean": 1.0}}}

    text = pick(setting("lr=0.002", 2400), setting("lr=0.004", 2700), "accuracy")["text"]
    assert text.endswith("tied on validation: ★ ended its training sooner (step 2,400 against 2,700)")


def test_a_point_without_validation_is_never_best(tmp_path):
    """The oracle (a baseline: no training, no validation) is best on the test stream, and a transformer with
    train.eval_every = 0 has no validation line: neither can be ★; one seed per setting: the run's own bootstrap
    interval on the test stream, none on validation."""
    config = tmp_path / "base.json"
    config.write_text(json.dumps(BASE))
    grid = ["--grid", "model.arch=transformer,oracle", "--grid", "train.eval_every=0,500", "--no-progress"]
    r = runner.invoke(app, ["sweep", str(config), *grid, "--threads", "1", "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    table = json.loads((tmp_path / "out" / "sweep.json").read_text())
    settings = {s["setting"]: s for s in table["settings"]}
    assert [s["setting"] for s in table["settings"]][0] == "arch=transformer-eval_every=500"
    assert [s["setting"] for s in table["settings"] if s["best"]] == ["arch=transformer-eval_every=500"]
    (said,) = [line for line in r.output.splitlines() if "best setting" in line]
    assert "(validation)" in said and "arch=transformer-eval_every=500 " in said and "1 seed" in said
    oracle = settings["arch=oracle-eval_every=500"]
    assert oracle["metrics"]["entropy_mae_bits"]["mean"] == pytest.approx(0.0, abs=1e-6)  # best on test
    for name in ("arch=transformer-eval_every=0", "arch=oracle-eval_every=0", "arch=oracle-eval_every=500"):
        assert settings[name]["validation"] is None and not settings[name]["best"]
        assert settings[name]["unranked"] == NO_VALIDATION
    best = settings["arch=transformer-eval_every=500"]
    run = next(row for row in table["rows"] if row["run"] == best["runs"][0])
    assert best["n_seeds"] == 1 and best["validation"]["entropy_mae_bits"]["lo"] is None
    assert best["metrics"]["entropy_mae_bits"] == {**run["metrics"]["entropy_mae_bits"], "interval": "bootstrap"}
    assert NO_VALIDATION in (tmp_path / "out" / "sweep.md").read_text()  # why the others are unranked


def test_rerun_skips_finished_runs_and_keeps_the_table(swept):
    config, out, _ = swept
    before = {p.name: (p / "metrics.jsonl").read_bytes() for p in (out / "runs").iterdir()}
    rows = json.loads((out / "sweep.json").read_text())["rows"]
    r = _cli(config, out)
    assert r.exit_code == 0, r.output
    assert r.output.count("skipped (done)") == 4
    assert {p.name: (p / "metrics.jsonl").read_bytes() for p in (out / "runs").iterdir()} == before
    table = json.loads((out / "sweep.json").read_text())
    assert table["rows"] == rows and sorted(table["skipped"]) == sorted(before) and not table["trained"]
    assert SweepTableRecord.read(out).to_json() == table  # the record reads back what it wrote
    assert "in this call, 0 of 4 runs trained by it" in (out / "sweep.md").read_text()


def test_another_sweep_into_the_same_out_is_refused(swept):
    config, out, _ = swept
    recorded = (out / SWEEP_CONFIG).read_text()
    r = runner.invoke(app, ["sweep", str(config), "--grid", "train.lr=1e-3", "--out", str(out)])
    assert r.exit_code == 2 and "holds a sweep over train.lr, seed" in r.output
    r = _cli(config, out, "--set", "train.steps=5")
    assert r.exit_code == 2 and "another base config" in r.output
    assert (out / SWEEP_CONFIG).read_text() == recorded


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--executor", "nope"], "error: --executor: must be one of local, ray (got 'nope')"),
        (["--grid", "seed"], "error: --grid: expected key=v1,v2"),
        (["--jobs", "0"], "error: jobs: must be >= 1"),
        (["--threads", "0"], "error: --threads: must be >= 1"),
        (["--ray-address", "auto"], "error: --ray-address"),
    ],
)
def test_cli_bad_input_exits_2_with_one_error_line(tmp_path, extra, message):
    (tmp_path / "base.yaml").write_text("task: {name: bijection, params: {V: 6, L: 5}}\n")
    r = _cli(tmp_path / "base.yaml", tmp_path / "out", *extra)
    assert r.exit_code == 2, r.output
    assert message in r.output and r.output.count("error:") == 1
    assert not (tmp_path / "out").exists()


def test_cli_missing_config_or_grid_exits_2(tmp_path):
    r = _cli(tmp_path / "nope.yaml", tmp_path / "out")
    assert r.exit_code == 2 and "no such file" in r.output
    (tmp_path / "base.yaml").write_text("{}\n")
    r = runner.invoke(app, ["sweep", str(tmp_path / "base.yaml"), "--out", str(tmp_path / "out")])
    assert r.exit_code == 2 and "error: --grid: give at least one" in r.output


def test_a_task_without_accuracy_tabulates(tmp_path):
    """Regression has real answers (no accuracy): its table has no accuracy and still picks a setting."""
    config = tmp_path / "base.json"
    base = {**BASE, "task": {"name": "regression", "params": {"d": 2, "n": 6}}, "train": {**BASE["train"]}}
    base["train"]["eval_every"] = 3
    config.write_text(json.dumps(base))
    grid = ["--grid", "train.lr=1e-3,3e-3", "--no-progress", "--threads", "1"]
    r = runner.invoke(app, ["sweep", str(config), *grid, "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    table = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert all(row["metrics"]["accuracy"] is None for row in table["rows"])
    assert sum(s["best"] for s in table["settings"]) == 1
