"""Two levers against slow transformer training, both off by default: attention-side initialisation
(`model.size.recency_heads`, ALiBi-style recency bias on layer 0; `model.size.mimetic_init`, W_k copied from W_q) and
weight averaging (`train.ema_decay`). Off, models, training and every stored config are as without them; on, they do
what they say, stay causal, agree across attention paths, and an averaged run resumes exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tiny_runs import smoke_config
from windtunnel import models, runs, tasks
from windtunnel.config import build_config, config_to_json, load_config
from windtunnel.evaluation.evaluate import evaluate
from windtunnel.models.causality import find_leak
from windtunnel.models.transformer import TransformerSize, recency_slopes
from windtunnel.resolve import resolve_config
from windtunnel.runs import checkpoints
from windtunnel.store import manifest, rundir
from windtunnel.training import train as tr

SPEC = tasks.make("hmm", K=6).spec
SIZE = {"n_layers": 2, "n_heads": 4, "d_model": 32, "d_ff": 64}
HMM = {"task.name": "hmm", "task.K": 4, "train.schedule": "constant"}
QUICK = Path(__file__).resolve().parents[1] / "docs" / "results" / "quick"
# manifest.config_hash of the resolved default config (test_aux_target, test_loss_vocab too)
DEFAULT_HASH = "eeab9c792cf7"


def build(seed: int = 0, **extra) -> models.SequenceModel:
    torch.manual_seed(seed)
    return models.make("transformer", SPEC, {**SIZE, **extra})


def same_state(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def tokens(B: int = 3, T: int = 25, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, SPEC.vocab_size, (B, T), generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------------------------- off by default


def test_off_the_model_and_its_random_draws_are_the_default_ones():
    plain = build()
    after_plain = torch.get_rng_state()
    off = build(recency_heads=0, mimetic_init=False)
    assert torch.equal(torch.get_rng_state(), after_plain)
    assert same_state(plain.state_dict(), off.state_dict())
    x = tokens()
    assert torch.equal(plain(x), off(x))
    assert TransformerSize().recency_heads == 0 and TransformerSize().mimetic_init is False
    assert TransformerSize.of(SIZE).as_config() == SIZE  # unset options stay out of a size's config form


def test_off_every_stored_config_keeps_its_text_and_hash():
    cfg = resolve_config(build_config())
    text = config_to_json(cfg)
    assert "ema_decay" not in text and "recency_heads" not in text and "mimetic_init" not in text
    assert manifest.config_hash(cfg) == DEFAULT_HASH
    # a committed run's config.json reads and hashes as the manifest recorded it
    recorded = {r["name"]: r["config_hash"] for r in json.loads((QUICK / "manifest.json").read_text())["runs"]}
    for name in ("hmm-transformer-s0", "bijection-transformer-s0"):
        path = QUICK / "runs" / name / "config.json"
        stored = load_config(path)
        assert stored.train.ema_decay is None
        assert config_to_json(stored) == path.read_text() and manifest.config_hash(stored) == recorded[name]
    on = build_config(overrides={"train.ema_decay": 0.99, "model.size.recency_heads": 2})
    assert json.loads(config_to_json(on))["train"]["ema_decay"] == 0.99
    assert manifest.config_hash(on) != manifest.config_hash(build_config())


def _steps(run_dir: Path) -> list[dict]:
    return [r for r in rundir.read_metrics(run_dir) if "loss" in r and "split" not in r]


def test_off_training_is_bit_identical(tmp_path):
    a = tr.train(smoke_config(**HMM), tmp_path / "a", progress=False)
    extra = {"model.size.recency_heads": 0, "model.size.mimetic_init": False}
    b = tr.train(smoke_config(**HMM, **extra), tmp_path / "b", progress=False)
    assert [r["loss"] for r in _steps(tmp_path / "a")] == [r["loss"] for r in _steps(tmp_path / "b")]
    sa, sb = (runs.load_run(tmp_path / x).model.state_dict() for x in "ab")
    assert same_state(sa, sb) and a["default"]["metrics"] == b["default"]["metrics"]
    state = load_state(tmp_path / "a", 4)
    assert not any(k.startswith("trained.") for k in state)  # no trained copy beside the weights without EMA


# --------------------------------------------------------------------------------------------- recency heads


def test_recency_heads_start_out_reading_the_previous_positions():
    model = build(recency_heads=2, attention="explicit")
    x = tokens(B=4, T=30)
    _, cache = model.run_with_cache(x, names=["blocks.0.attn.pattern", "blocks.1.attn.pattern"])
    pattern = cache["blocks.0.attn.pattern"]  # (B,H,T,T)
    t = 29
    for h in range(2):  # the recency heads: the previous position far above one 20 back
        assert bool((pattern[:, h, t, t - 1] > 2 * pattern[:, h, t, t - 20]).all())
        assert bool((pattern[:, h, t, t - 2] > pattern[:, h, t, t - 20]).all())
    # the other heads, and layer 1, have no such preference at init (near-uniform)
    for p in (pattern[:, 2:], cache["blocks.1.attn.pattern"]):
        assert bool((p[..., t, t - 1] < 1.5 * p[..., t, t - 20]).all())
    assert recency_slopes(2, 4) == (0.25, 1 / 16)  # ALiBi's steepest two of four heads, 2^(-8 (h+1) / n)
    # no parameter: the state dict is the default one
    assert same_state(model.state_dict(), build(attention="explicit").state_dict())


@pytest.mark.parametrize("heads", [1, 4])
@pytest.mark.parametrize("attention", ["explicit", "fused"])
def test_recency_heads_keep_the_model_causal(heads, attention):
    for init in ("normal", "torch"):
        model = build(recency_heads=heads, attention=attention, init=init, mimetic_init=True)
        assert find_leak(model, SPEC) is None


@pytest.mark.parametrize("pos", ["learned", "learned+rotary"])
def test_fused_and_explicit_attention_agree_with_recency_heads(pos):
    fused = build(recency_heads=3, attention="fused", pos=pos)
    explicit = build(recency_heads=3, attention="explicit", pos=pos)
    explicit.load_state_dict(fused.state_dict())
    x = tokens(B=3, T=17)
    a, b = fused(x), explicit(x)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    ga = torch.autograd.grad(a.square().sum(), list(fused.parameters()))
    gb = torch.autograd.grad(b.square().sum(), list(explicit.parameters()))
    for u, v in zip(ga, gb, strict=True):
        torch.testing.assert_close(u, v, atol=1e-5, rtol=1e-3)
    sink = build(recency_heads=3, attention="explicit", pos=pos, attn_sink=True)  # zero sink logits: the same rows
    sink.load_state_dict({**fused.state_dict(), **{k: v for k, v in sink.state_dict().items() if "sink" in k}})
    _, cache = sink.run_with_cache(x, names=["blocks.0.attn.pattern"])
    assert bool((cache["blocks.0.attn.pattern"].triu(1) == 0).all())  # the sink path stays causal too


# --------------------------------------------------------------------------------------------- mimetic init


def test_mimetic_init_makes_each_heads_query_key_product_diagonal():
    wide = {"n_heads": 8, "d_model": 128}  # W_q W_q^T: diagonal d std^2, off-diagonal ~ sqrt(d) std^2
    model, plain = build(mimetic_init=True, **wide), build(**wide)
    d, dh = 128, 16
    for block, ref in zip(model.blocks, plain.blocks, strict=True):
        w, w0 = block.attn.qkv.weight.detach(), ref.attn.qkv.weight.detach()
        assert torch.equal(w[:d], w0[:d]) and torch.equal(w[2 * d :], w0[2 * d :])  # q and v rows: the default's
        assert torch.equal(w[d : 2 * d], w[:d])
        for h in range(8):
            rows = slice(h * dh, (h + 1) * dh)
            m = w[:d][rows] @ w[d : 2 * d][rows].T  # (dh,dh) W_q W_k^T of head h
            diag, off = m.diagonal(), m[~torch.eye(dh, dtype=torch.bool)].abs()
            assert float(diag.min()) > 1.5 * float(off.max()) and float(diag.mean()) > 8 * float(off.mean())
            # without it the same product has no diagonal to speak of
            m0 = w0[:d][rows] @ w0[d : 2 * d][rows].T
            assert float(m0.diagonal().abs().mean()) < 3 * float(m0[~torch.eye(dh, dtype=torch.bool)].abs().mean())
    # only the key rows change: every other weight is the default init's
    rest = {k: v for k, v in model.state_dict().items() if "qkv" not in k}
    assert same_state(rest, {k: v for k, v in plain.state_dict().items() if "qkv" not in k})


@pytest.mark.parametrize(
    ("size", "message"),
    [
        ({"recency_heads": 5}, "recency_heads: must be between 0 and n_heads = 4 (got 5)"),
        ({"recency_heads": -1}, "recency_heads: Input should be greater than or equal to 0"),
        ({"recency_heads": 1.5}, "recency_heads: Input should be a valid integer"),
        ({"mimetic_init": "maybe"}, "mimetic_init: Input should be a valid boolean"),
    ],
)
def test_bad_init_options_are_refused_naming_the_field(size, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        models.make("transformer", SPEC, {**SIZE, **size})
    with pytest.raises(ValueError, match="model.size." + message.split(":")[0]):
        sizes = {f"model.size.{k}": v for k, v in {**SIZE, **size}.items()}
        resolve_config(build_config(overrides={"task.name": "hmm", **sizes}))


def test_the_run_description_names_the_options_when_on():
    on = resolve_config(
        smoke_config(
            **HMM,
            **{"model.size.recency_heads": 2, "model.size.mimetic_init": True, "train.ema_decay": 0.99},
        )
    )
    off = resolve_config(smoke_config(**HMM))
    task = runs.build_task(on)
    line = tr.start_line(on, runs.build_model(on, task.spec, task), "cpu")
    assert "recency_heads=2" in line and "mimetic_init" in line and "EMA" in line and "0.99" in line
    plain = tr.start_line(off, runs.build_model(off, task.spec, task), "cpu")
    assert "recency" not in plain and "mimetic" not in plain and "EMA" not in plain


# --------------------------------------------------------------------------------------------- weight averaging


def load_state(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    """The training-state tensors of checkpoint `step` (verified)."""
    from safetensors.torch import load_file

    checkpoints.verify_checkpoint(run_dir, step)
    return load_file(str(Path(run_dir) / "checkpoints" / f"step_{step:08d}.state.safetensors"))


def test_the_saved_weights_are_the_ema_recurrence_of_the_trained_ones(tmp_path, monkeypatch):
    decay = 0.7
    cfg = smoke_config(**HMM, **{"train.ema_decay": decay, "train.checkpoint_every": 1})
    seen: list[dict[str, torch.Tensor]] = []  # the trained weights after each optimiser step
    real = tr.WeightAverage.update

    def update(self, model, step):
        seen.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        real(self, model, step)

    monkeypatch.setattr(tr.WeightAverage, "update", update)
    result = tr.train(cfg, tmp_path / "r", progress=False)
    assert len(seen) == cfg.train.steps
    ema = {k: v.double() for k, v in seen[0].items()}  # the average starts at the first step's weights
    for step, trained in enumerate(seen, start=1):
        if step > 1:
            ema = {k: decay * ema[k] + (1 - decay) * trained[k].double() for k in ema}
        run = runs.load_run(tmp_path / "r")
        saved = run.load_checkpoint(step, check=False).state_dict()
        assert all(torch.allclose(saved[k].double(), ema[k], atol=1e-6) for k in ema)
        held = {k[len("trained.") :]: v for k, v in load_state(tmp_path / "r", step).items() if "trained." in k}
        assert same_state(held, trained)  # the trained weights go with the training state
        if step > 1:
            assert not same_state(saved, trained)
    # the final evaluation is the average's: it holds the run's recorded weights, so it is the recorded evaluation
    again = evaluate(runs.load_run(tmp_path / "r"), write=False)
    assert again["default"]["metrics"] == result["default"]["metrics"]


def test_on_the_trained_model_and_its_data_are_those_without_it(tmp_path):
    tr.train(smoke_config(**HMM), tmp_path / "off", progress=False)
    tr.train(smoke_config(**HMM, **{"train.ema_decay": 0.9}), tmp_path / "on", progress=False)
    assert [r["loss"] for r in _steps(tmp_path / "off")] == [r["loss"] for r in _steps(tmp_path / "on")]
    held = {k[len("trained.") :]: v for k, v in load_state(tmp_path / "on", 4).items() if "trained." in k}
    assert same_state(held, runs.load_run(tmp_path / "off").model.state_dict())


def test_a_resumed_averaged_run_is_the_uninterrupted_one(tmp_path):
    extra = {**HMM, "train.ema_decay": 0.8, "train.optimizer": "muon", "train.checkpoint_every": 1}
    whole = tr.train(smoke_config(**extra), tmp_path / "whole", progress=False)
    tr.train(smoke_config(**extra, **{"train.steps": 2}), tmp_path / "cut", progress=False)
    cut = tr.train(smoke_config(**extra), tmp_path / "cut", resume=True, progress=False)
    assert [(r["step"], r["loss"]) for r in _steps(tmp_path / "cut")] == [
        (r["step"], r["loss"]) for r in _steps(tmp_path / "whole")
    ]
    a, b = (runs.load_run(tmp_path / x).model.state_dict() for x in ("whole", "cut"))
    assert same_state(a, b) and cut["default"]["metrics"] == whole["default"]["metrics"]
    ta, tb = (
        {k: v for k, v in load_state(tmp_path / x, 4).items() if k.startswith("trained.")} for x in ("whole", "cut")
    )
    assert ta and same_state(ta, tb)
    # a checkpoint without the trained weights is named when a resume needs them
    cfg = resolve_config(smoke_config(**HMM, **{"train.steps": 1}))
    tr.train(cfg, tmp_path / "plain", progress=False)
    task = runs.build_task(cfg)
    model, avg = (runs.build_model(cfg, task.spec, task) for _ in range(2))
    with pytest.raises(checkpoints.CheckpointError, match="ema_decay"):
        checkpoints.load_checkpoint(tmp_path / "plain", 1, model, averaged=avg)


@pytest.mark.parametrize("value", [1.5, 1.0, 0.0, -0.1])
def test_a_bad_ema_decay_is_refused_naming_the_field(value):
    with pytest.raises(ValueError, match=r"train\.ema_decay"):
        build_config(overrides={"train.ema_decay": value})
