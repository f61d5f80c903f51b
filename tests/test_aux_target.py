"""The auxiliary training target (`train.aux_target`, `train.aux_weight`; `Task.auxiliary_targets`): the HMM's exact
next-state prior b_t·T against brute force, off by default with every stored config unchanged, on it adds its loss
without touching the model's initialisation or data, a resume is exact, and bad settings are refused by name."""

from __future__ import annotations

import itertools
import json

import pytest
import torch
from typer.testing import CliRunner

from tiny_runs import smoke_config
from windtunnel import runs, tasks
from windtunnel.cli import app
from windtunnel.config import apply_overrides, build_config, config_to_json, run_identity, validate
from windtunnel.resolve import resolve_config
from windtunnel.runs import checkpoints
from windtunnel.seeds import train_seed
from windtunnel.store import manifest, rundir
from windtunnel.suites.paper import recipe_text, run_config
from windtunnel.suites.paper_diff import config_deviations
from windtunnel.training import train as tr
from windtunnel.training.optim import describe

AUX = {"train.aux_target": "next_state_prior", "train.aux_weight": 0.5}
HMM = {"task.name": "hmm", "task.K": 4, "train.schedule": "constant"}
# manifest.config_hash of the resolved default config, as before the auxiliary target existed (test_loss_vocab too)
DEFAULT_HASH = "eeab9c792cf7"


def _brute_force(T: torch.Tensor, E: torch.Tensor, obs: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(filter (K,S), next-state prior (K,S)) float64 of one sequence by summing over every hidden path: at t, the
    joint of s_1..s_t+1 with o_1..o_t, marginalised to s_t (the filter) and to s_t+1 (the prior)."""
    S, K = T.shape[0], len(obs)
    filt, prior = torch.zeros(K, S, dtype=torch.float64), torch.zeros(K, S, dtype=torch.float64)
    for t in range(K):
        for path in itertools.product(range(S), repeat=t + 2):  # s_1..s_t+1, s_t+2 (0-based: path[t + 1] is next)
            p = 1.0 / S
            for k in range(t + 1):
                p *= (T[path[k - 1], path[k]] if k else 1.0) * E[path[k], obs[k]]
            p *= T[path[t], path[t + 1]]
            filt[t, path[t]] += p
            prior[t, path[t + 1]] += p
    return filt / filt.sum(-1, keepdim=True), prior / prior.sum(-1, keepdim=True)


@pytest.mark.parametrize(("S", "O", "K", "name"), [(2, 3, 4, "hmm"), (3, 4, 3, "hmm"), (3, 3, 4, "hmm-sticky")])
def test_next_state_prior_is_the_filter_carried_through_T_by_brute_force(S, O, K, name):
    task = tasks.make(name, S=S, O=O, K=K)
    assert "next_state_prior" in task.auxiliary_targets_offered
    batch = task.sample(4, seed=3)
    target = task.auxiliary_targets(batch)["next_state_prior"]  # (B,T,S)
    assert target.shape == (*batch.target_mask.shape, S)
    positions, _ = task.observation_slots(batch.inputs)  # (B,K): the scored position of o_1..o_K
    assert torch.equal(batch.target_mask.nonzero()[:, 1].reshape(4, K), positions)
    for b in range(4):
        cents = [(batch.latent[k][b].double() * 100).round() / 100 for k in ("transition", "emission")]
        filt, prior = _brute_force(*cents, batch.latent["observations"][b].tolist())
        at = positions[b]
        # the scored posterior there is b_t; the target is b_t T for that same t
        assert torch.allclose(batch.posterior.probs[b, at].double(), filt, atol=1e-6)
        assert torch.allclose(target[b, at].double(), prior, atol=1e-6)
        assert torch.allclose(target[b, at].double(), filt @ cents[0], atol=1e-6)
    off = ~batch.target_mask
    assert torch.allclose(target[off], torch.full_like(target[off], 1.0 / S))  # uniform where nothing is scored
    assert tasks.make("bijection").auxiliary_targets(tasks.make("bijection").sample(2, seed=0)) == {}


def test_off_by_default_and_absent_from_config_json_and_its_hash():
    cfg = resolve_config(build_config())
    assert cfg.train.aux_target is None and cfg.train.aux_weight is None
    assert "aux_" not in config_to_json(cfg) and manifest.config_hash(cfg) == DEFAULT_HASH
    zero = resolve_config(build_config(overrides={"train.aux_weight": 0}))
    assert config_to_json(zero) == config_to_json(cfg) and manifest.config_hash(zero) == DEFAULT_HASH
    hmm = validate({"task": {"name": "hmm"}, "train": {"aux_weight": 0.0}, "seed": 3})
    assert "aux_" not in json.dumps(run_identity(hmm))
    assert manifest.config_hash(hmm) == manifest.config_hash(validate({"task": {"name": "hmm"}, "seed": 3}))
    on = validate({"task": {"name": "hmm"}, "train": {"aux_target": "next_state_prior", "aux_weight": 0.5}})
    assert json.loads(config_to_json(on))["train"]["aux_weight"] == 0.5
    assert manifest.config_hash(on) != manifest.config_hash(validate({"task": {"name": "hmm"}}))
    # the recipe and deviation texts name it only when on
    assert "auxiliary" not in recipe_text("quick")
    tier = run_config("hmm", "transformer", "quick")
    assert not any("auxiliary" in line for line in config_deviations(tier)["training"])
    with_aux = apply_overrides(tier, AUX)
    said = config_deviations(with_aux)["training"][-1]
    assert "auxiliary target" in said and "b_t·T" in said and "weight 0.5" in said  # what, and its weight


def _steps(run_dir) -> list[dict]:
    return [r for r in rundir.read_metrics(run_dir) if "loss" in r and "split" not in r]


def test_a_run_with_aux_weight_zero_is_bit_identical_to_the_default(tmp_path):
    a = tr.train(smoke_config(**HMM), tmp_path / "a", progress=False)
    b = tr.train(smoke_config(**HMM, **{"train.aux_weight": 0}), tmp_path / "b", progress=False)
    assert [r["loss"] for r in _steps(tmp_path / "a")] == [r["loss"] for r in _steps(tmp_path / "b")]
    assert not any("aux_loss" in r for r in _steps(tmp_path / "a"))
    sa, sb = (runs.load_run(tmp_path / x).model.state_dict() for x in "ab")
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    assert a["default"]["metrics"] == b["default"]["metrics"]


def test_on_it_adds_its_loss_with_the_same_init_and_data(tmp_path, monkeypatch):
    off_cfg, on_cfg = smoke_config(**HMM), smoke_config(**HMM, **AUX)
    seen: dict[str, list] = {"off": [], "on": []}
    real_sample = type(tasks.make("hmm")).sample

    def sampling(key):
        def sample(self, *args, **kwargs):
            batch = real_sample(self, *args, **kwargs)
            seen[key].append(batch.inputs.clone())
            return batch

        return sample

    monkeypatch.setattr(type(tasks.make("hmm")), "sample", sampling("off"))
    tr.train(off_cfg, tmp_path / "off", progress=False)
    monkeypatch.setattr(type(tasks.make("hmm")), "sample", sampling("on"))
    tr.train(on_cfg, tmp_path / "on", progress=False)
    # the same data, the same number of draws (the head's sizing draw is an extra sequence of step 1's seed)
    off_steps = [x for x in seen["off"] if x.shape[0] == off_cfg.train.batch_size]
    on_steps = [x for x in seen["on"] if x.shape[0] == on_cfg.train.batch_size]
    assert len(off_steps) == len(on_steps) and all(torch.equal(x, y) for x, y in zip(off_steps, on_steps, strict=True))

    # the same initialisation: the model at step 0 is the one built without the head
    task = runs.build_task(resolve_config(on_cfg))
    plain = runs.build_model(resolve_config(off_cfg), task.spec, task)
    model = runs.build_model(resolve_config(on_cfg), task.spec, task)
    rng = torch.get_rng_state()
    aux = tr.make_aux_head(resolve_config(on_cfg), task, model)
    assert torch.equal(torch.get_rng_state(), rng)  # the head draws from its own generator
    assert all(torch.equal(x, y) for x, y in zip(plain.state_dict().values(), model.state_dict().values(), strict=True))
    assert aux is not None and aux.weight.shape == (5, 32) and aux.target == "next_state_prior"
    again = tr.make_aux_head(resolve_config(on_cfg), task, model)
    assert again is not None and torch.equal(again.weight, aux.weight)  # seeded by the run's seed

    # the loss differs from step 1 on and carries the auxiliary KL; every head tensor gets a gradient
    off, on = _steps(tmp_path / "off"), _steps(tmp_path / "on")
    assert off[0]["loss"] != on[0]["loss"] and all(r["aux_loss"] > 0 for r in on)
    batch = task.sample(8, seed=train_seed(on_cfg.seed, 1))
    with tr._head_input(tr._output_head(model)) as hidden:
        model(batch.inputs)
    loss = aux.loss(hidden.pop(), task.auxiliary_targets(batch)["next_state_prior"], batch.target_mask)
    loss.backward()
    assert aux.weight.grad is not None and bool(aux.weight.grad.abs().sum() > 0) and bool(aux.bias.grad.abs().sum())
    assert any(bool(p.grad.abs().sum() > 0) for p in model.parameters() if p.grad is not None)  # it reaches the trunk

    # the weights file holds the plain model (evaluation loads it as is); the head trains on AdamW under muon
    assert not any(k.startswith("aux_head") for k in runs.load_run(tmp_path / "on").model.state_dict())
    groups = describe(model, resolve_config(smoke_config(**HMM, **AUX, **{"train.optimizer": "muon"})), aux)
    assert "aux_head.weight" in groups["adamw"]["decay"] and "aux_head.bias" in groups["adamw"]["no_decay"]
    assert not any(k.startswith("aux_head") for k in groups["muon"])
    text = "an auxiliary target the paper did not use: the exact next-state prior b_t·T, weight 0.5"
    assert groups["auxiliary"] == text and text in tr.start_line(resolve_config(on_cfg), model, "cpu", aux=aux)
    assert "auxiliary" not in tr.start_line(resolve_config(off_cfg), plain, "cpu")
    assert "auxiliary" not in describe(plain, resolve_config(off_cfg))


def test_a_resumed_run_with_the_head_is_the_uninterrupted_one(tmp_path):
    extra = {**HMM, **AUX, "train.optimizer": "muon", "train.checkpoint_every": 1, "train.eval_every": 0}
    whole = tr.train(smoke_config(**extra), tmp_path / "whole", progress=False)
    tr.train(smoke_config(**extra, **{"train.steps": 2}), tmp_path / "cut", progress=False)
    cut = tr.train(smoke_config(**extra), tmp_path / "cut", resume=True, progress=False)
    assert [(r["step"], r["loss"], r["aux_loss"]) for r in _steps(tmp_path / "cut")] == [
        (r["step"], r["loss"], r["aux_loss"]) for r in _steps(tmp_path / "whole")
    ]
    assert cut["default"]["metrics"] == whole["default"]["metrics"]
    cfg = resolve_config(smoke_config(**extra))
    task = runs.build_task(cfg)
    heads = []
    for name in ("whole", "cut"):
        model = runs.build_model(cfg, task.spec, task)
        aux = tr.make_aux_head(cfg, task, model)
        assert aux is not None
        checkpoints.load_checkpoint(tmp_path / name, 4, model, aux=aux)
        heads.append((model.state_dict(), aux.state_dict()))
    for a, b in zip(*heads, strict=True):
        assert all(torch.equal(a[k], b[k]) for k in a)
    # a checkpoint without the head's tensors is named when the head is asked for
    plain_cfg = resolve_config(smoke_config(**HMM, **{"train.steps": 1}))
    tr.train(plain_cfg, tmp_path / "plain", progress=False)
    with pytest.raises(checkpoints.CheckpointError, match="auxiliary head"):
        checkpoints.load_checkpoint(tmp_path / "plain", 1, runs.build_model(plain_cfg, task.spec, task), aux=aux)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"train.aux_target": "nope", "train.aux_weight": 1}, "train.aux_target: task 'hmm' offers 'next_state_prior'"),
        ({"task.name": "bijection", **AUX}, "train.aux_target: task 'bijection' offers no auxiliary target"),
        ({"train.aux_weight": -1}, "train.aux_weight: Input should be greater than or equal to 0"),
        ({"train.aux_weight": 0.5}, "train.aux_weight: needs train.aux_target"),
        ({"train.aux_target": "next_state_prior"}, "train.aux_weight: must be > 0"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(overrides, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        resolve_config(build_config(overrides={"task.name": "hmm", **overrides}))


def test_the_cli_refuses_a_negative_weight_with_exit_code_2(tmp_path):
    r = CliRunner().invoke(
        app, ["train", "--task", "hmm", "--out", str(tmp_path / "r"), "--set", "train.aux_weight=-1", "--no-progress"]
    )
    assert r.exit_code == 2, r.output
    assert "train.aux_weight" in r.output and "Traceback" not in r.output and not (tmp_path / "r").exists()
