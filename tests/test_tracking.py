"""Experiment tracking: callbacks see exactly the metrics.jsonl lines and the final evaluation; TensorBoard and
(offline) wandb write under the run directory; `train.loggers` never changes a run's stored text, hash or identity."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from cli_args import train_args
from tiny_runs import smoke_config
from windtunnel.cli import app
from windtunnel.config import RunConfig, config_to_json, run_identity, validate
from windtunnel.resolve import resolve_config
from windtunnel.runs import checkpoints
from windtunnel.store import manifest, rundir
from windtunnel.training import tracking
from windtunnel.training.train import train


def _cfg(**extra):
    o = {"task.name": "bijection", "task.V": 5, "task.L": 4, "train.batch_size": 4, "eval.n": 8}
    return smoke_config(**{**o, **extra})


class Recorder(tracking.Callback):
    def __init__(self):
        self.calls = []

    def on_step(self, step, record):
        self.calls.append(("step", step, record))

    def on_eval(self, step, results):
        self.calls.append(("eval", step, results))

    def on_end(self, summary):
        self.calls.append(("end", summary))

    def close(self):
        self.calls.append(("close",))


# --- config: loggers are no part of a run ----------------------------------------------------------------------


def test_default_config_json_has_no_loggers_and_old_configs_read():
    text = config_to_json(RunConfig())
    assert "loggers" not in text
    stored = json.loads(text)  # a config.json written before the field existed
    assert validate(stored).train.loggers == []
    cfg = validate({"train": {"loggers": ["wandb", "tensorboard", "wandb"]}})
    assert cfg.train.loggers == ["wandb", "tensorboard"]
    assert json.loads(config_to_json(cfg))["train"]["loggers"] == ["wandb", "tensorboard"]
    assert validate(json.loads(config_to_json(cfg))) == cfg
    assert run_identity(cfg) == run_identity(RunConfig())
    assert manifest.config_hash(cfg) == manifest.config_hash(RunConfig())


def test_unknown_logger_names_the_field():
    with pytest.raises(ValueError, match=r"train\.loggers\.0: .*'tensorboard' or 'wandb'"):
        validate({"train": {"loggers": ["tb"]}})


def test_loggers_do_not_make_another_run(tmp_path):
    run = tmp_path / "r"
    train(_cfg(), run, progress=False)
    assert manifest.check_same_run(run, resolve_config(_cfg(**{"train.loggers": ["tensorboard"]})))
    pytest.importorskip("tensorboard")
    train(_cfg(**{"train.loggers": ["tensorboard"], "train.steps": 6}), run, resume=True, progress=False)
    assert (run / tracking.TENSORBOARD_DIR).is_dir()
    assert manifest.check_same_run(run, resolve_config(_cfg(**{"train.steps": 6})))


# --- callbacks -------------------------------------------------------------------------------------------------


def test_callbacks_see_the_metrics_lines_and_the_final_evaluation(tmp_path):
    rec = Recorder()
    result = train(_cfg(), tmp_path / "r", progress=False, callbacks=[rec])
    lines = rundir.read_metrics(tmp_path / "r")
    seen = [c for c in rec.calls if c[0] in ("step", "eval")]
    assert [c[2] for c in seen] == lines
    assert [(c[0], c[1]) for c in seen] == [
        (("eval" if r.get("split") == "eval" else "step"), r["step"]) for r in lines
    ]
    assert rec.calls[-2:] == [("end", result), ("close",)]


def test_callbacks_are_closed_after_a_failure(tmp_path):
    class Boom(Recorder):
        def on_eval(self, step, results):
            raise RuntimeError("boom")

    rec = Boom()
    with pytest.raises(RuntimeError, match="boom"):
        train(_cfg(), tmp_path / "r", progress=False, callbacks=[rec])
    assert rec.calls[-1] == ("close",) and not any(c[0] == "end" for c in rec.calls)


def test_a_callback_without_the_hooks_is_refused_before_anything_is_created(tmp_path):
    class Partial:
        def on_step(self, step, record):
            pass

    with pytest.raises(ValueError, match=r"callbacks\[0\]: Partial has no on_eval, on_end, close"):
        train(_cfg(), tmp_path / "r", progress=False, callbacks=[Partial()])
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("name", ["tensorboard", "wandb"])
def test_a_missing_extra_is_one_line_before_anything_is_created(tmp_path, monkeypatch, name):
    monkeypatch.setitem(sys.modules, name, None)  # importlib.util.find_spec now says it is not installed
    with pytest.raises(ValueError, match=rf"pip install 'windtunnel\[{name}\]'"):
        train(_cfg(**{"train.loggers": [name]}), tmp_path / "r", progress=False)
    assert not (tmp_path / "r").exists()


# --- the built-in loggers --------------------------------------------------------------------------------------


def _tensorboard_scalars(log_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_event_files_hold_the_metrics(tmp_path):
    pytest.importorskip("tensorboard")
    run = tmp_path / "r"
    result = train(_cfg(**{"train.loggers": ["tensorboard"]}), run, progress=False)
    got = _tensorboard_scalars(run / tracking.TENSORBOARD_DIR)
    lines = rundir.read_metrics(run)
    evals = [r for r in lines if r.get("split") == "eval"]
    final = result["default"]["metrics"]["entropy_mae_bits"]["mean"]
    want = {
        "train/loss": [(r["step"], r["loss"]) for r in lines if "loss" in r],
        "val/entropy_mae_bits": [(r["step"], r["entropy_mae_bits"]) for r in evals],
        "test/default/entropy_mae_bits": [(4, final)],
    }
    for tag, points in want.items():
        assert [s for s, _ in got[tag]] == [s for s, _ in points], tag
        assert [v for _, v in got[tag]] == pytest.approx([v for _, v in points], rel=1e-6), tag
    assert "train/step" not in got


def test_tensorboard_resume_replaces_the_steps_after_the_checkpoint(tmp_path):
    pytest.importorskip("tensorboard")
    run = tmp_path / "r"
    cfg = _cfg(**{"train.loggers": ["tensorboard"]})
    train(cfg, run, progress=False)
    checkpoints.delete_checkpoint(run, 4)  # as if killed after step 4's lines, before its checkpoint
    with pytest.warns(RuntimeWarning, match="resuming from step 2"):
        train(cfg, run, resume=True, progress=False)
    steps = [s for s, _ in _tensorboard_scalars(run / tracking.TENSORBOARD_DIR)["train/loss"]]
    assert steps == [1, 2, 3, 4]


@pytest.fixture
def wandb_offline(tmp_path, monkeypatch):
    """wandb offline, every directory it writes (config, cache, data, logs) in tmp_path, never HOME."""
    wandb = pytest.importorskip("wandb")
    home = tmp_path / "wandb-home"
    for var, sub in [("WANDB_DIR", "dir"), ("WANDB_CONFIG_DIR", "config"), ("WANDB_CACHE_DIR", "cache")]:
        monkeypatch.setenv(var, str(home / sub))
    monkeypatch.setenv("WANDB_DATA_DIR", str(home / "data"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("HOME", str(home / "home"))
    yield wandb
    wandb.teardown()


def test_wandb_offline_run_is_written_under_the_run_directory(tmp_path, wandb_offline):
    run = tmp_path / "r"
    train(_cfg(**{"train.loggers": ["wandb"]}), run, progress=False)
    offline = sorted((run / tracking.WANDB_DIR).glob("offline-run-*"))
    assert len(offline) == 1
    run_id = (run / tracking.WANDB_DIR / "windtunnel-run-id").read_text().strip()
    data = (offline[0] / f"run-{run_id}.wandb").read_bytes()  # protobuf records: the tags are there as text
    assert all(tag in data for tag in (b"train/loss", b"val/entropy_mae_bits", b"test/default/entropy_mae_bits"))
    train(_cfg(**{"train.loggers": ["wandb"], "train.steps": 6}), run, resume=True, progress=False)
    assert (run / tracking.WANDB_DIR / "windtunnel-run-id").read_text().strip() == run_id  # the same wandb run
    assert not (tmp_path / "wandb-home" / "home").exists() or not any((tmp_path / "wandb-home" / "home").iterdir())


def test_cli_logger_option(tmp_path):
    pytest.importorskip("tensorboard")
    out = tmp_path / "run"
    r = CliRunner().invoke(app, train_args(out, "--logger", "tensorboard"))
    assert r.exit_code == 0, r.output
    assert json.loads((out / "config.json").read_text())["train"]["loggers"] == ["tensorboard"]
    assert list((out / tracking.TENSORBOARD_DIR).glob("events.out.tfevents.*"))
    r = CliRunner().invoke(app, train_args(tmp_path / "b", "--logger", "tb"))
    assert r.exit_code == 2 and "train.loggers.0" in r.output
