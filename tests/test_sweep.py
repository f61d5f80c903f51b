"""`windtunnel sweep`: grid parsing, the cross product and its run names, validation before anything exists, and an
end-to-end sweep on the local executor (tables, re-run skips, a different sweep refused)."""

from __future__ import annotations

import csv
import json
import re

import pytest
from typer.testing import CliRunner

from windtunnel.cli import app
from windtunnel.config import apply_overrides
from windtunnel.sweep import SWEEP_CONFIG, expand, key_labels, parse_grid, sweep

runner = CliRunner()

# A smoke-sized bijection transformer: a run trains and evaluates in well under a second.
BASE = {
    "task": {"name": "bijection", "params": {"V": 6, "L": 5}},
    "model": {"arch": "transformer", "preset": "smoke"},
    "train": {"steps": 6, "batch_size": 8, "device": "cpu"},
    "eval": {"n": 64},
}
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
        sweep(BASE, {"seed": [0]}, out, executor="nope")
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


def test_sweep_trains_every_point_and_tabulates_it(swept):
    _, out, output = swept
    names = {"lr=0.001-seed=0", "lr=0.001-seed=1", "lr=0.003-seed=0", "lr=0.003-seed=1"}
    assert {p.name for p in (out / "runs").iterdir()} == names
    assert str(out / "sweep.md") in output
    table = json.loads((out / "sweep.json").read_text())
    rows = table["rows"]
    assert len(rows) == 4 and {r["run"] for r in rows} == names
    assert table["grid"] == {"train.lr": [0.001, 0.003], "seed": [0, 1]} and table["executor"] == "local"
    assert table["machine"] and table["total_wall_s"] >= 0 and not table["missing"]
    errors = [r["metrics"]["entropy_mae_bits"]["mean"] for r in rows]
    assert errors == sorted(errors) and rows[0]["best"] and not any(r["best"] for r in rows[1:])
    for r in rows:
        run_dir = out / "runs" / r["run"]
        metrics = json.loads((run_dir / "eval.json").read_text())["default"]["metrics"]
        for m in ("entropy_mae_bits", "kl_bits", "accuracy"):
            assert r["metrics"][m] == {k: metrics[m][k] for k in ("mean", "lo", "hi")}
        assert r["wall_s"] == json.loads((run_dir / "done.json").read_text())["wall_s"]
        assert r["tokens_per_s"] > 0
        config = json.loads((run_dir / "config.json").read_text())
        assert (config["train"]["lr"], config["seed"]) == (r["values"]["train.lr"], r["values"]["seed"])
    with open(out / "sweep.csv") as f:
        lines = list(csv.DictReader(f))
    assert [line["run"] for line in lines] == [r["run"] for r in rows]
    assert {"train.lr", "seed", "entropy_mae_bits_lo", "accuracy_hi", "tokens_per_s"} <= set(lines[0])
    assert float(lines[0]["entropy_mae_bits"]) == errors[0]
    md = (out / "sweep.md").read_text()
    assert md.startswith("# Sweep of ") and "train.lr=0.001,0.003" in md and "windtunnel sweep " in md
    assert md.count("| ★ |") == 1 and all(name in md for name in names)


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
