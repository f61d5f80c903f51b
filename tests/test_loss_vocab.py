"""`train.loss: ce_vocab`: cross-entropy over every token logit of a tied head (the authors' 2V-way loss on the
sep-vocab bijection), computed from the hidden state of the training pass itself; what `model(inputs)` returns,
evaluation and every config without it are unchanged."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from cli_args import train_args
from windtunnel import runs, tasks
from windtunnel.cli import app
from windtunnel.config import TrainConfig, build_config, config_to_json
from windtunnel.evaluation.evaluate import evaluate, evaluate_model
from windtunnel.models.common import tied_head
from windtunnel.resolve import resolve_config, resolve_loss
from windtunnel.store import manifest
from windtunnel.suites import paper, paper_diff
from windtunnel.suites.paper import run_config
from windtunnel.suites.paper_diff import config_deviations
from windtunnel.training import train as tr

V, L = 6, 5
TINY = {"task.name": "bijection", "task.V": V, "task.L": L, "model.preset": "smoke", "train.device": "cpu"}


def _model(arch: str = "transformer", **size):
    cfg = resolve_config(
        build_config(overrides={**TINY, "model.arch": arch, **{f"model.size.{k}": v for k, v in size.items()}})
    )
    task = runs.build_task(cfg)
    torch.manual_seed(0)
    return runs.build_model(cfg, task.spec, task), task


def _pass(model, task, seed: int = 1):
    """One training-style pass: the batch, the V logits `model(inputs)` returns and the head's input of that pass."""
    batch = task.sample(16, seed=seed)
    with tr._head_input(tied_head(model)) as seen:
        out = model(batch.inputs)
    return batch, out, seen.pop()


@pytest.mark.parametrize(
    ("arch", "size"),
    [("transformer", {}), ("transformer", {"logit_scale": True}), ("lstm", {}), ("mamba", {}), ("mlp-pointwise", {})],
)
def test_loss_is_cross_entropy_over_every_tied_token_logit(arch, size):
    model, task = _model(arch, **size)
    spec = task.spec
    batch, out, h = _pass(model, task)
    head = tied_head(model)
    assert head is not None and spec.vocab_size == 2 * V and spec.answer_token_offset == V
    E = model.embed.tok.weight  # (2V, d): keys 0..V-1, values V..2V-1
    scale = head.log_scale.exp() if head.log_scale is not None else 1.0
    brute = (h @ E.t()) * scale  # (B,T,2V)
    logits = head.vocab_logits(h)
    torch.testing.assert_close(logits, brute)
    torch.testing.assert_close(logits[..., V:], out)  # the answer rows are what forward returns
    mask = batch.target_mask.bool()
    expected = F.cross_entropy(brute[mask], batch.targets[mask].long() + V)
    torch.testing.assert_close(tr.compute_loss("ce_vocab", spec, logits, batch), expected)
    assert out.shape[-1] == V  # model(inputs) is still the V value logits


def test_gradient_pushes_key_token_logits_down_unlike_the_v_way_loss():
    model, task = _model()
    batch, out, h = _pass(model, task)
    head, E = tied_head(model), model.embed.tok.weight
    h = h.detach()  # only the head's use of E: the input embedding's own gradient is not the point
    logits = head.vocab_logits(h)
    logits.retain_grad()
    tr.compute_loss("ce_vocab", task.spec, logits, batch).backward()
    mask = batch.target_mask.bool()
    assert (logits.grad[mask][:, :V] > 0).all()  # a descent step lowers every key-token logit at a scored position
    assert E.grad[:V].abs().sum() > 0  # the key rows of E get gradient
    E.grad = None
    tr.compute_loss("ce", task.spec, head(h), batch).backward()
    assert E.grad[:V].abs().sum() == 0 and E.grad[V:].abs().sum() > 0  # the V-way loss never reaches the key rows


def test_training_with_it_keeps_the_predictive_and_evaluation(tmp_path, monkeypatch):
    o = {**TINY, "model.arch": "transformer", "train.steps": 4, "train.batch_size": 8, "train.eval_every": 2}
    o |= {"train.eval_size": 8, "eval.n": 16}
    cfg = build_config(overrides={**o, "train.loss": "ce_vocab"})
    seen = []
    real = tr.compute_loss

    def spy(kind, spec, out, batch):
        seen.append((kind, out.shape[-1]))
        return real(kind, spec, out, batch)

    monkeypatch.setattr(tr, "compute_loss", spy)
    result = tr.train(cfg, tmp_path / "r", progress=False)
    assert seen == [("ce_vocab", 2 * V)] * 4  # every step scored all 2V token logits
    run = runs.load_run(tmp_path / "r")
    model = run.model
    assert not tied_head(model)._forward_pre_hooks  # no hook is left on a model read back
    batch = run.task.sample(4, seed=3)
    with torch.no_grad():
        assert model(batch.inputs).shape[-1] == V  # the predictive is the V value logits, as for any loss
    # the evaluation is the same computation whatever the loss: the V-way config's evaluation of these weights is
    # the run's own
    v_way = resolve_config(build_config(overrides=o))
    ours = evaluate_model(model, run.task, run.config, device="cpu", n_boot=0)
    theirs = evaluate_model(model, run.task, v_way, device="cpu", n_boot=0)
    assert ours["metrics_point"] == theirs["metrics_point"]
    assert result["default"]["metrics"]["entropy_mae_bits"]["mean"] == pytest.approx(
        evaluate(run, device="cpu", write=False)["default"]["metrics"]["entropy_mae_bits"]["mean"]
    )


def test_refusals_name_train_loss_before_anything_is_created(tmp_path):
    for overrides, what in (
        ({"model.arch": "mlp"}, "untied head"),  # the prefix MLP has an untied head
        ({"model.arch": "transformer", "model.size.tie": False}, "tie false"),
        ({"model.arch": "transformer", "task.name": "regression", "task.V": None, "task.L": None}, "input tokens"),
        ({"model.arch": "transformer", "task.name": "hmm", "task.V": None, "task.L": None}, "input tokens"),
    ):
        o = {**TINY, **overrides, "train.loss": "ce_vocab"}
        o = {k: v for k, v in o.items() if v is not None}
        with pytest.raises(ValueError, match=f"train.loss: 'ce_vocab'.*{what}"):
            resolve_config(build_config(overrides=o))
    result = CliRunner().invoke(
        app, train_args(tmp_path / "r", "--set", "model.size.tie=false", "--set", "train.loss=ce_vocab")
    )
    assert result.exit_code == 2 and "train.loss" in result.output, result.output
    assert not (tmp_path / "r").exists()


def test_a_model_without_a_tied_head_is_refused_before_the_run_directory(tmp_path, monkeypatch):
    """An import-string architecture's head is known only once built: train() refuses it there, still before the run
    directory exists (here: a registered model whose head lookup finds none)."""
    monkeypatch.setattr(tr, "tied_head", lambda model: None)
    cfg = build_config(overrides={**TINY, "model.arch": "transformer", "train.loss": "ce_vocab", "train.steps": 1})
    with pytest.raises(ValueError, match=r"train\.loss: 'ce_vocab' .*tied output head"):
        tr.train(cfg, tmp_path / "r", progress=False)
    assert not (tmp_path / "r").exists()


# manifest.config_hash of the resolved default config, computed by the code before ce_vocab existed
DEFAULT_HASH = "eeab9c792cf7"


def test_configs_without_it_are_unchanged():
    assert TrainConfig().loss == "auto"
    cfg = resolve_config(build_config())
    assert '"loss": "auto"' in config_to_json(cfg) and manifest.config_hash(cfg) == DEFAULT_HASH
    explicit = resolve_config(build_config(overrides={"train.loss": "auto"}))
    assert manifest.config_hash(explicit) == manifest.config_hash(cfg)
    assert resolve_loss(cfg, tasks.make("bijection")) == "ce"
    with tr._head_input(None) as seen:  # the loop of any other loss registers nothing
        assert seen == []
    # the committed runs' hashes (docs/results) are recomputed in tests/test_geometry_control.py


def test_deviations_see_it_as_the_authors_loss_form():
    tier = run_config("bijection", "transformer", "quick")  # the tier's recipe trains against the posterior
    assert any("loss = soft-target cross-entropy" in line for line in config_deviations(tier)["training"])
    quick = {**tier, "train": {k: v for k, v in tier["train"].items() if k != "loss"}}  # auto: the V-way loss
    assert any("loss = V-way" in line for line in config_deviations(quick)["training"])
    vocab = {**quick, "train": {**quick["train"], "loss": "ce_vocab"}}
    assert not any("loss = " in line for line in config_deviations(vocab)["training"])
    paired = {**vocab, "task": {**vocab["task"], "params": {"format": "paired"}}}  # V tokens: ce_vocab is V-way there
    assert any("loss = V-way" in line for line in config_deviations(paired)["training"])


def test_paper_tier_bijection_cells_train_with_the_authors_loss():
    lines = paper_diff.deviations("paper")
    for arch in ("transformer", "mamba", "lstm", "mlp-pointwise"):  # the authors' form is the 2V-way tied loss
        assert run_config("bijection", arch, "paper")["train"]["loss"] == "ce_vocab"
        assert not any(line.startswith(f"bijection / {arch} training: ") and "loss = " in line for line in lines)
        resolve_config(run_config("bijection", arch, "paper"))  # every one has a tied head
    assert "loss" not in run_config("bijection", "mlp", "paper")["train"]  # the prefix MLP: ours, untied
    assert all("loss" not in run_config("hmm", a, "paper")["train"] for a in paper.ARCHS)  # auto is their soft CE
    assert all("loss" not in r.config["train"] for r in paper.suite("smoke"))
    for tier in ("quick", "standard"):  # their recipe's soft targets, for every trained cell
        assert {r.config["train"].get("loss") for r in paper.suite(tier) if r.config["train"]["steps"]} == {"posterior"}
