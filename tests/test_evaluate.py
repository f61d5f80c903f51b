"""Evaluation: baselines, eval.json layout with length-generalisation settings, one forward pass per batch."""

from __future__ import annotations

import json

import pytest
import torch

from windtunnel import runs
from windtunnel.config import build_config
from windtunnel.evaluation.evaluate import evaluate
from windtunnel.training.train import train


def _hmm_run(tmp_path):
    cfg = build_config(
        overrides={
            "task.name": "hmm",
            "task.K": 6,
            "model.preset": "smoke",
            "train.steps": 2,
            "train.batch_size": 8,
            "train.eval_every": 0,
            "eval.n": 24,
            "eval.batch_size": 10,
            "eval.overrides": [{"K": 9}],
            "train.device": "cpu",
        }
    )
    train(cfg, tmp_path / "hmm", progress=False)
    return runs.load_run(tmp_path / "hmm")


def test_baselines_from_config_oracle_zero_uniform_floor():
    o = evaluate(build_config(overrides={"model.arch": "oracle"}), n=100)["default"]
    assert all(
        o["metrics"][k] == {"mean": 0.0, "lo": 0.0, "hi": 0.0}
        for k in ("entropy_mae_bits", "entropy_mae_curve_bits", "kl_bits")
    )
    assert o["metrics"]["accuracy"]["mean"] == o["metrics"]["bayes_accuracy"]["mean"]
    u = evaluate(build_config(overrides={"model.arch": "uniform"}), n=100)["default"]
    assert u["metrics"]["entropy_mae_bits"]["mean"] == pytest.approx(1.1073, abs=1e-4)
    assert u["per_position"]["model_entropy_bits"] == pytest.approx([4.321928] * 19, abs=1e-5)
    assert u["per_position"]["bayes_entropy_bits"][0] == pytest.approx(4.321928, abs=1e-5)
    assert u["per_position"]["bayes_entropy_bits"][-1] == pytest.approx(1.0)


def test_uniform_on_real_answers_is_finite_and_worse_than_oracle():
    cfg = {"model.arch": "uniform", "task.name": "regression"}
    u = evaluate(build_config(overrides=cfg), n=64)["default"]["metrics"]
    assert u["accuracy"] is None and u["kl_bits"]["mean"] > 0.05
    o = evaluate(build_config(overrides={**cfg, "model.arch": "oracle"}), n=64)["default"]["metrics"]
    assert o["nll_bits"]["mean"] < u["nll_bits"]["mean"]


def test_eval_json_layout_with_length_generalisation(tmp_path):
    run = _hmm_run(tmp_path)
    assert run.config.model.max_len >= 9 * 2 + 53  # allocated for the longest evaluated K
    data = json.loads((run.path / "eval.json").read_text())
    assert set(data) == {"default", "K=9"}
    for name, K in (("default", 6), ("K=9", 9)):
        r = data[name]
        assert r["task_params"]["K"] == K and r["n"] == 24 and r["step"] == 2
        assert set(r["per_position"]) == {
            "model_entropy_bits",
            "bayes_entropy_bits",
            "entropy_abs_err_bits",
            "kl_bits",
            "accuracy",
        }
        assert all(len(v) == K for v in r["per_position"].values())
        m = r["metrics"]["entropy_mae_bits"]
        assert m["lo"] <= m["mean"] <= m["hi"]
    # a setting the run does not record goes beside eval.json, under the settings that differ (tests/test_reeval.py)
    extra = evaluate(run, overrides=[{"K": 7}], n=12)
    assert set(json.loads((run.path / "eval.json").read_text())) == {"default", "K=9"}
    assert extra["K=7"]["n"] == 12 and extra["K=7"]["extra"] == "K=7,eval.n=12"
    assert json.loads((run.path / "evals" / "K=7,eval.n=12.json").read_text()) == extra


def test_deterministic_and_one_forward_pass_per_batch(tmp_path):
    run = _hmm_run(tmp_path)
    model = run.model
    calls = []
    model.register_forward_hook(lambda mod, inp, out: calls.append(tuple(inp[0].shape)))
    a = evaluate(run, n=24, batch_size=10, write=False)
    assert calls == [(10, 65), (10, 65), (4, 65), (10, 71), (10, 71), (4, 71)]
    b = evaluate(run, n=24, batch_size=10, write=False)
    assert a == b


def test_bad_overrides_name_the_field(tmp_path):
    run = _hmm_run(tmp_path)
    with pytest.raises(ValueError, match=r"hmm\.K"):
        evaluate(run, overrides=[{"K": 0}], n=4)
    with pytest.raises(ValueError, match="max_len"):
        evaluate(run, overrides=[{"K": 200}], n=4)
    with pytest.raises(ValueError, match="n: must be"):
        evaluate(run, n=0)


class _WindowFilter(torch.nn.Module):
    """A 'model' that computes the HMM's one-observation filter exactly (baseline-style predict)."""

    baseline = True

    def __init__(self, task):
        super().__init__()
        self.task = task

    def predict(self, batch):
        return self.task.approximations(batch)["last 1 obs"]


def test_approximations_identify_the_filter_a_model_computes():
    cfg = build_config(overrides={"task.name": "hmm", "model.arch": "oracle", "eval.n": 60, "eval.batch_size": 25})
    task = runs.build_task(cfg)
    r = evaluate(cfg, model=_WindowFilter(task), overrides=[{}], write=False)["default"]
    approx = r["approximations"]
    W = max(task.windows())
    assert list(approx) == ["context-blind", *(f"last {w} obs" for w in range(1, W + 1))]
    assert [a["depth"] for a in approx.values()] == list(range(W + 1))
    assert approx["last 1 obs"]["kl_from_model_bits"] == pytest.approx(0.0, abs=1e-6)
    assert r["closest"]["name"] == "last 1 obs"  # named as itself
    assert approx["last 1 obs"]["gain_bits"]["mean"] == pytest.approx(0.0, abs=1e-9)  # no gain over itself
    assert approx["context-blind"]["gain_bits"]["lo"] > 0  # but it beats reading nothing
    assert r["verdict"]["horizon"] == 0 and r["verdict"]["level"] == "fail"  # no belief transport
    g = approx["last 2 obs"]["gain_bits"]
    assert g["hi"] < 0 and g["lo"] <= g["mean"] <= g["hi"]  # the 2-observation filter is better than it
    assert approx["last 2 obs"]["kl_from_model_bits"] > 0.005
    # the approximation's own errors are the model's errors when the model is that approximation
    assert approx["last 1 obs"]["kl_bits"] == pytest.approx(r["metrics"]["kl_bits"]["mean"], rel=1e-4)
    assert approx["last 1 obs"]["entropy_mae_bits"] == pytest.approx(r["metrics"]["entropy_mae_bits"]["mean"], rel=1e-4)
    # tasks without approximations get no entry
    assert "approximations" not in evaluate(build_config(overrides={"model.arch": "oracle"}), n=20)["default"]
