"""Training loop: every (task, architecture) pair trains; schedule; divergence; kill -9 and resume reproduces."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tiny_runs import smoke_config
from windtunnel import models, runs
from windtunnel.config import build_config, lr_at
from windtunnel.errors import TrainingDiverged
from windtunnel.runs import checkpoints
from windtunnel.store import rundir
from windtunnel.training.train import train

# Small task settings so a smoke run of every pair stays fast.
TINY_TASKS = {
    "bijection": {"V": 6, "L": 5},
    "hmm": {"K": 6},
    "recall": {"N": 6, "key_vocab": 16, "value_vocab": 16, "n_filler": 4, "M": 2},
    "regression": {"d": 2, "n": 6},
}


def _cfg(task: str = "bijection", arch: str = "transformer", **extra):
    tiny = {f"task.{k}": v for k, v in TINY_TASKS[task].items()}
    return smoke_config(**{"task.name": task, "model.arch": arch, **tiny, **extra})


@pytest.mark.parametrize("task", list(TINY_TASKS))
@pytest.mark.parametrize("arch", [a for a in models.names() if a in ("transformer", "lstm", "mamba", "mlp")])
def test_every_pair_trains_and_writes_a_run(tmp_path, task, arch):
    result = train(_cfg(task, arch), tmp_path / "run", progress=False)
    m = result["default"]["metrics"]
    assert math.isfinite(m["entropy_mae_bits"]["mean"]) and math.isfinite(m["kl_bits"]["mean"])
    assert m["kl_bits"]["mean"] >= -1e-9
    assert (m["accuracy"] is None) == (task == "regression")
    run = runs.load_run(tmp_path / "run")
    assert run.checkpoints() == [2, 4]
    lines = run.metrics()
    assert [r["step"] for r in lines if "loss" in r] == [1, 2, 3, 4]
    assert [r["step"] for r in lines if r.get("split") == "eval"] == [2, 4]  # periodic + last step (validation)
    assert all(math.isfinite(r["loss"]) and r["tokens_per_s"] > 0 for r in lines if "loss" in r)
    assert run.eval().to_json()["default"]["metrics"] == m
    assert not run.model.training


def test_training_reduces_loss_on_bijection(tmp_path):
    cfg = _cfg(
        **{
            "train.steps": 60,
            "train.lr": 3e-3,
            "train.batch_size": 32,
            "train.eval_every": 0,
            "train.checkpoint_every": 0,
        }
    )
    train(cfg, tmp_path / "r", progress=False)
    losses = [r["loss"] for r in runs.load_run(tmp_path / "r").metrics() if "loss" in r]
    assert sum(losses[-10:]) / 10 < sum(losses[:10]) / 10 - 0.1


def test_lr_schedule_warmup_cosine_and_constant():
    cfg = build_config(
        overrides={"train.steps": 100, "train.lr": 1.0, "train.warmup_steps": 10, "train.min_lr_ratio": 0.1}
    )
    assert lr_at(5, cfg) == pytest.approx(0.5) and lr_at(10, cfg) == pytest.approx(1.0)
    assert lr_at(55, cfg) == pytest.approx(0.55) and lr_at(100, cfg) == pytest.approx(0.1)
    const = build_config(overrides={"train.schedule": "constant", "train.warmup_steps": 0, "train.lr": 0.3})
    assert lr_at(1, const) == lr_at(999, const) == 0.3


def test_existing_run_dir_is_protected(tmp_path):
    train(_cfg(), tmp_path / "r", progress=False)
    with pytest.raises(FileExistsError, match="overwrite"):
        train(_cfg(), tmp_path / "r", progress=False)
    train(_cfg(**{"seed": 5}), tmp_path / "r", overwrite=True, progress=False)
    assert runs.load_run(tmp_path / "r").config.seed == 5
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "precious.txt").write_text("x")
    with pytest.raises(ValueError, match="not a run directory"):
        train(_cfg(), tmp_path / "other", overwrite=True, progress=False)
    assert (tmp_path / "other" / "precious.txt").exists()
    with pytest.raises(ValueError, match="only train.steps"):
        train(_cfg(**{"train.lr": 0.5}), tmp_path / "r", resume=True, progress=False)


def test_divergence_stops_with_step_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    import windtunnel.training.train as tr

    real = tr.compute_loss
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        loss = real(*args, **kwargs)
        return loss * float("nan") if calls["n"] == 3 else loss

    monkeypatch.setattr(tr, "compute_loss", flaky)
    with pytest.raises(TrainingDiverged, match="step 3: non-finite loss") as info:
        train(_cfg(), tmp_path / "r", progress=False)
    assert info.value.step == 3 and info.value.what == "loss"
    assert checkpoints.latest_step(tmp_path / "r") == 2
    runs.load_run(tmp_path / "r").load_checkpoint(2)  # the kept checkpoint loads


def test_oracle_and_uniform_make_runs_without_training(tmp_path):
    o = train(build_config(overrides={"model.arch": "oracle", "eval.n": 64}), tmp_path / "o", progress=False)
    u = train(build_config(overrides={"model.arch": "uniform", "eval.n": 64}), tmp_path / "u", progress=False)
    for k in ("entropy_mae_bits", "entropy_mae_curve_bits", "kl_bits"):
        assert o["default"]["metrics"][k]["mean"] == 0.0
    assert u["default"]["metrics"]["entropy_mae_bits"]["mean"] == pytest.approx(1.1073, abs=1e-4)
    assert not (tmp_path / "o" / "checkpoints").exists() and (tmp_path / "o" / "eval.json").exists()


KILL_SCRIPT = """
import json, sys
from windtunnel.config import validate
from windtunnel.training.train import train
train(validate(json.loads(sys.argv[1])), sys.argv[2], progress=False)
"""


def test_sigkill_and_resume_matches_uninterrupted_run(tmp_path):
    cfg = _cfg(
        **{
            "train.steps": 100,
            "train.checkpoint_every": 10,
            "train.eval_every": 30,
            "train.log_every": 5,
            "train.batch_size": 16,
            "eval.n": 32,
        }
    )
    killed = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", KILL_SCRIPT, json.dumps(cfg.model_dump(mode="json")), str(killed)], env=env
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        step = (killed / "checkpoints" / "latest.json").exists() and checkpoints.latest_step(killed)
        if step and step >= 10:
            break
        assert proc.poll() is None, "training subprocess exited before it could be killed"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    stopped_at = checkpoints.latest_step(killed)
    assert stopped_at < 100 and not (killed / "eval.json").exists()

    resumed = train(cfg, killed, resume=True, progress=False)
    fresh = train(cfg, tmp_path / "fresh", progress=False)
    assert resumed["default"]["metrics"] == fresh["default"]["metrics"]
    assert resumed["default"]["per_position"] == fresh["default"]["per_position"]

    def key_lines(path):
        return [
            (r["step"], r.get("split"), r.get("loss"), r.get("entropy_mae_bits")) for r in rundir.read_metrics(path)
        ]

    assert key_lines(killed) == key_lines(tmp_path / "fresh")  # no duplicated or missing lines
    a = runs.load_run(killed).model.state_dict()
    b = runs.load_run(tmp_path / "fresh").model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
