"""No predictor that does not infer can be marked: the task's controls are ✗, window filters are never ✓ and are
named as themselves, the oracle is ✓ everywhere -- scored by `evaluate.score_predictor`, exactly as eval.json is."""

from __future__ import annotations

import pytest
import torch
from torch.distributions import Categorical, Normal

from windtunnel import tasks
from windtunnel.evaluate import control_predictors, score_controls, score_predictor
from windtunnel.suites.paper import TASK_PARAMS, TASKS

# Every tier's task parameters (the rule is one for every tier; the paper tier's HMM and bijection are the defaults).
TIER_PARAMS = [(task, tier, TASK_PARAMS[tier].get(task, {})) for tier in ("smoke", "quick") for task in TASKS]
N = 120


def _id(p):
    return f"{p[0]}-{p[1]}"


@pytest.mark.parametrize("case", TIER_PARAMS, ids=_id)
def test_the_oracle_is_exact_and_no_control_earns_a_mark(case):
    name, _, params = case
    task = tasks.make(name, **params)
    oracle = score_predictor(task, lambda b: b.posterior, n=N, seed=0)
    assert oracle["verdict"]["level"] == "exact", oracle["verdict"]["reasons"]
    scored = score_controls(task, n=N, seed=0)
    controls = {k: v for k, v in scored.items() if k.startswith("control: ")}
    assert len(controls) >= 2, f"{name}: a task declares at least two adversarial controls"
    for label, s in controls.items():
        assert s["verdict"]["level"] == "fail", (name, label, s["verdict"])
        assert s["metrics"]["kl_bits"]["mean"] > 0.1, (name, label)
    for label, s in scored.items():  # an approximate posterior is at most approximate
        assert s["verdict"]["level"] != "exact", (name, label, s["verdict"])


def test_entropy_matching_controls_really_match_the_entropy():
    """The controls are adversarial: each matches the exact entropy (bijection support, renamed classes, blind mean)
    so only KL can tell them apart -- the case the old entropy-only rule marked ✓."""
    bij = score_controls(tasks.make("bijection"), n=N, seed=0)
    assert bij["control: context-blind support"]["metrics"]["entropy_mae_bits"]["mean"] < 1e-9
    assert bij["control: context-blind support"]["metrics"]["kl_bits"]["mean"] > 1.0
    reg = score_controls(tasks.make("regression"), n=N, seed=0)
    assert reg["control: blind mean"]["metrics"]["entropy_mae_bits"]["mean"] < 1e-9


@pytest.mark.parametrize("K", [6, 20])
def test_each_window_filter_is_named_as_itself_and_never_exact(K):
    task = tasks.make("hmm", K=K)
    W = max(task.windows())
    preds = control_predictors(task)
    for w in range(1, W + 1):
        s = score_predictor(task, preds[f"approximation: last {w} obs"], n=N, seed=0)
        v = s["verdict"]
        assert s["closest"]["name"] == f"last {w} obs"
        assert v["level"] != "exact" and v["horizon"] == w - 1, (w, v)
    blind = score_predictor(task, preds["approximation: context-blind"], n=N, seed=0)
    assert blind["verdict"]["level"] == "fail" and blind["verdict"]["horizon"] is None


def test_the_uniform_predictor_is_closest_to_the_context_blind_reference():
    task = tasks.make("hmm")

    def uniform(batch):
        B, T = batch.target_mask.shape
        return Categorical(logits=torch.zeros(B, T, task.spec.n_classes))

    s = score_predictor(task, uniform, n=N, seed=0)
    assert s["closest"]["name"] == "context-blind"
    assert s["verdict"]["closest_text"] == "none: no better than context-blind"
    assert s["verdict"]["level"] == "fail"


def test_score_predictor_scores_a_function_as_eval_json_scores_a_model():
    task = tasks.make("regression", d=2, n=6)

    def prior(batch):
        shape = batch.target_mask.shape
        return Normal(torch.zeros(shape), torch.full(shape, 2.0))

    s = score_predictor(task, prior, n=40, seed=3)
    assert {"task_params", "n", "stream", "metrics", "per_position", "metrics_point", "verdict"} <= set(s)
    assert s["stream"] == "test" and s["n"] == 40 and s["verdict"]["level"] == "fail"
    again = score_predictor(task, prior, n=40, seed=4)  # the test stream does not depend on the seed
    assert again["metrics"]["kl_bits"]["mean"] == s["metrics"]["kl_bits"]["mean"]
    with pytest.raises(ValueError, match="n: must be"):
        score_predictor(task, prior, n=0)
