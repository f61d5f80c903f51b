"""`windtunnel train` / `windtunnel eval`: happy paths and user errors (exit 2, message names the field)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cli_args import SMOKE, train_args
from windtunnel.cli import app

runner = CliRunner()


def test_train_then_eval(tmp_path):
    out = tmp_path / "run"
    r = runner.invoke(app, train_args(out))
    assert r.exit_code == 0, r.output
    assert "entropy_mae_bits" in r.output and (out / "eval.json").exists()
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["task"]["params"]["V"] == 5 and cfg["train"]["steps"] == 2 and cfg["model"]["size"]["d_model"]
    r = runner.invoke(app, ["eval", str(out), "--n", "6", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["default"]["n"] == 6  # where it was written: on stderr, beside the JSON
    assert f"wrote {out / 'evals' / 'eval.n=6.json'}" in r.stderr
    r = runner.invoke(app, ["eval", str(out), "--set", "task.L=3", "--n", "4"])
    assert r.exit_code == 0, r.output
    assert "L=3" in r.output and "L=3" in json.loads((out / "evals" / "L=3,eval.n=4.json").read_text())
    assert set(json.loads((out / "eval.json").read_text())) == {"default"}  # the recorded evaluation only
    r = runner.invoke(app, train_args(out, "--resume"))
    assert r.exit_code == 0, r.output


def test_oracle_run_from_config_file(tmp_path):
    (tmp_path / "c.yaml").write_text("model: {arch: oracle}\neval: {n: 20}\n")
    r = runner.invoke(app, ["train", "--config", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "o" / "eval.json").read_text())["default"]["metrics"]["kl_bits"]["mean"] == 0.0


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--set", "train.lr=-1"], "train.lr"),
        (["--set", "task.V=1"], "bijection.V"),
        (["--task", "nope"], "unknown task"),
        (["--arch", "nope"], "arch"),
        (["--preset", "huge"], "model.preset"),
        (["--set", "train.nope=1"], "train.nope"),
        (["--set", "oops"], "--set"),
        (["--config", "/nonexistent.yaml"], "config"),
        (["--steps", "-3"], "train.steps"),
        (["--set", "model.d_model=0"], "model.size.d_model"),
        (["--set", "model.n_heads=5"], "model.size.d_model: must be divisible by n_heads=5"),
        (["--arch", "mamba", "--set", "model.n_heads=4"], "model.size.n_heads: Extra inputs are not permitted"),
        (["--arch", "lstm", "--set", "model.dropout=1.5"], "model.size.dropout"),
    ],
)
def test_train_user_errors_exit_2_naming_the_field(tmp_path, args, field):
    r = runner.invoke(app, ["train", "--out", str(tmp_path / "r"), "--no-progress", *args])
    assert r.exit_code == 2, r.output
    assert field in r.output and "Traceback" not in r.output


def test_existing_dir_and_eval_errors(tmp_path):
    out = tmp_path / "u"
    assert runner.invoke(app, ["train", "--arch", "uniform", "--out", str(out), "--set", "eval.n=8"]).exit_code == 0
    r = runner.invoke(app, ["train", "--arch", "uniform", "--out", str(out)])
    assert r.exit_code == 2 and "--overwrite" in r.output
    r = runner.invoke(app, ["eval", str(tmp_path / "missing")])
    assert r.exit_code == 2 and "run_dir" in r.output
    r = runner.invoke(app, ["eval", str(out), "--set", "train.lr=1"])
    assert r.exit_code == 2 and "task." in r.output
    r = runner.invoke(app, ["eval", str(out), "--set", "task.V=1"])
    assert r.exit_code == 2 and "bijection.V" in r.output
    r = runner.invoke(app, ["eval", str(out), "--n", "0"])
    assert r.exit_code == 2 and "--n" in r.output


def test_corrupted_checkpoint_is_reported_without_traceback(tmp_path):
    out = tmp_path / "run"
    assert runner.invoke(app, ["train", "--arch", "transformer", "--out", str(out), *SMOKE]).exit_code == 0
    ck = out / "checkpoints" / "step_00000002.safetensors"
    ck.write_bytes(ck.read_bytes()[:100])
    r = runner.invoke(app, ["eval", str(out)])
    assert r.exit_code == 1 and "corrupted or truncated" in r.output and "Traceback" not in r.output


def test_stack_seeds_trains_each_seed_into_a_run_of_its_own(tmp_path):
    out = tmp_path / "stack"
    r = runner.invoke(app, train_args(out, "--stack-seeds", "0,3"))
    assert r.exit_code == 0, r.output
    assert "stacked with 2 seeds" in r.output and "forward by vmap" in r.output
    assert [json.loads((out / d / "config.json").read_text())["seed"] for d in ("s0", "s3")] == [0, 3]
    assert all((out / d / "eval.json").exists() for d in ("s0", "s3"))
    r = runner.invoke(app, ["train", "--resume", str(out), "--stack-seeds", "0,3", "--steps", "3", "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "resuming at step 2" in r.output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--stack-seeds", "0,x"], "--stack-seeds '0,x': expected seeds (integers >= 0) separated by commas"),
        (["--stack-seeds", "1,1"], "--stack-seeds '1,1': each seed once"),
        (["--stack-seeds", "0,1", "--seed", "2"], "--stack-seeds: not with --seed"),
        (["--stack-seeds", "0,1", "--overwrite"], "--stack-seeds: not with --overwrite"),
    ],
)
def test_stack_seeds_bad_input_exits_2_naming_the_option(tmp_path, extra, message):
    r = runner.invoke(app, train_args(tmp_path / "stack", *extra))
    assert r.exit_code == 2 and message in r.output, r.output
    assert not (tmp_path / "stack").exists()
