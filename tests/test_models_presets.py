"""Presets: paper sizes, capacity matching of both MLPs to the transformer within 1%, tiers and errors."""

from __future__ import annotations

import inspect

import pytest

from windtunnel import models, tasks
from windtunnel.models import presets
from windtunnel.models.common import count_params, match_params
from windtunnel.models.mlp import PointwiseMLP
from windtunnel.tasks.base import TaskSpec

TASKS = ["bijection", "hmm", "recall", "regression"]


def n_params(task: str, arch: str, tier: str, spec: TaskSpec | None = None) -> int:
    spec = spec or tasks.make(task).spec
    return count_params(models.resolve(arch), spec, presets.preset(task, arch, tier, spec=spec))


def test_tiers():
    assert presets.tiers() == ["smoke", "quick", "paper"]


def test_paper_transformer_bijection_is_2_67m():
    assert abs(n_params("bijection", "transformer", "paper") - 2.67e6) / 2.67e6 < 0.01
    spec = tasks.make("bijection").spec
    size = presets.preset("bijection", "transformer", "paper")
    assert size.as_config() == dict(n_layers=6, n_heads=6, d_model=192, d_ff=768)
    # the official production model (vocab 40, 38 positions): 2,677,440
    assert count_params(models.resolve("transformer"), spec, size, max_len=38) == 2_677_440


def test_paper_hmm_sizes():
    hmm_tf = presets.preset("hmm", "transformer", "paper")
    assert hmm_tf.as_config() == dict(n_layers=9, n_heads=8, d_model=256, d_ff=1024)
    assert presets.preset("hmm", "mamba", "paper").as_config() == dict(n_layers=9, d_model=256)
    assert presets.preset("hmm", "lstm", "paper").as_config() == dict(n_layers=9, d_model=256, dropout=0.1)
    # the authors' bijection LSTM and Mamba read learned positions; their LSTMs use inter-layer dropout 0.1
    bij_lstm = presets.preset("bijection", "lstm", "paper")
    assert bij_lstm.as_config() == dict(n_layers=6, d_model=192, pos="learned", dropout=0.1)
    assert presets.preset("bijection", "mamba", "paper").as_config() == dict(n_layers=6, d_model=192, pos="learned")
    # official LSTMHMM (no positions, untied 5-way head, LayerNorm): 4,765,701
    assert n_params("hmm", "lstm", "paper") == 4_765_701


@pytest.mark.parametrize("tier", ["smoke", "quick", "paper"])
@pytest.mark.parametrize("task", TASKS)
def test_mlps_match_transformer_within_1pct(task, tier):
    target = n_params(task, "transformer", tier)
    for arch in ("mlp", "mlp-pointwise"):
        got = n_params(task, arch, tier)
        assert abs(got - target) / target <= 0.01, (arch, got, target)


def test_a_controls_depths_are_the_factors_it_declares():
    """presets names no control: the depths it tries are the control's `depth_factors` times the followed depth,
    rounded away from it (the pointwise MLP's 8 d^2 per block against the transformer's 12 d^2: 1.5x first)."""
    source = inspect.getsource(presets)
    assert not [name for name in ("mlp-pointwise", "PointwiseMLP", "PrefixMLP") if name in source]
    assert models.info("mlp-pointwise").depth_factors == (1.5, 1.0, 2.0)
    assert models.info("mlp").depth_factors == (1.5, 1.0, 2.0, 0.5)
    assert [presets._scaled(9, f) for f in models.info("mlp").depth_factors] == [14, 9, 18, 4]
    assert presets.preset("bijection", "mlp-pointwise", "paper").n_layers == 9  # 1.5 x the transformer's 6


def test_smoke_is_tiny():
    for task in TASKS:
        for arch in presets.archs():
            assert 5_000 <= n_params(task, arch, "smoke") <= 60_000, (task, arch)


def test_user_task_falls_back_to_generic_sizes():
    spec = TaskSpec(name="mine", input_kind="tokens", answer_kind="classes", seq_len=12, vocab_size=9, n_classes=3)
    assert presets.preset("mine", "transformer", "quick") == presets.preset("bijection", "transformer", "quick")
    target = n_params("mine", "transformer", "quick", spec=spec)
    assert abs(n_params("mine", "mlp", "quick", spec=spec) - target) / target <= 0.01
    with pytest.raises(ValueError, match="spec"):
        presets.preset("mine", "mlp", "quick")


def test_bad_tier_and_arch():
    with pytest.raises(ValueError, match="tier"):
        presets.preset("bijection", "transformer", "huge")
    with pytest.raises(ValueError, match="arch"):
        presets.preset("bijection", "gru", "smoke")


def test_match_params_solves_width_and_reports_failure():
    spec = tasks.make("bijection").spec
    size = match_params(PointwiseMLP, spec, 500_000, "d_model", depths=(3,))
    assert abs(count_params(PointwiseMLP, spec, **size) - 500_000) / 500_000 <= 0.01
    with pytest.raises(ValueError, match="target params"):
        match_params(PointwiseMLP, spec, 10, "d_model", depths=(3,))
