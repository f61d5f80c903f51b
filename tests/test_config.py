"""RunConfig: loading, dotted overrides, validation messages, resolution and the config.json round trip."""

from __future__ import annotations

import json

import pytest

from windtunnel import tasks
from windtunnel.config import RunConfig, apply_overrides, build_config, config_to_json, load_config
from windtunnel.resolve import eval_name, resolve_config, resolve_loss


def test_dotted_overrides_route_task_and_model_keys():
    data = apply_overrides({}, {"task.V": 10, "task.name": "bijection", "model.d_model": 64, "train.lr": 1e-3})
    assert data == {
        "task": {"params": {"V": 10}, "name": "bijection"},
        "model": {"size": {"d_model": 64}},
        "train": {"lr": 1e-3},
    }
    cfg = build_config(overrides={"task.V": 10, "train.lr": 1e-3})
    assert cfg.task.params == {"V": 10} and cfg.train.lr == 1e-3


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"train.lr": -1}, "train.lr"),
        ({"train.schedule": "linear"}, "train.schedule"),
        ({"train.bogus": 1}, "train.bogus"),
        ({"seed": -3}, "seed"),
        ({"model.preset": "huge"}, "model.preset"),
        ({"train.betas": [0.9, 1.5]}, "train.betas"),
        ({"eval.n": 0}, "eval.n"),
        ({"train.compile": "fastest"}, "train.compile: must be true, false or a torch.compile mode"),
    ],
)
def test_validation_errors_name_the_field(overrides, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        build_config(overrides=overrides)


@pytest.mark.parametrize("setting", [False, True, "reduce-overhead", "max-autotune"])
def test_compile_is_a_boolean_or_a_mode(setting):
    assert build_config(overrides={"train.compile": setting}).train.compile == setting


def test_yaml_and_json_files(tmp_path):
    (tmp_path / "c.yaml").write_text("task: {name: hmm, params: {K: 10}}\ntrain: {steps: 7}\nseed: 3\n")
    cfg = load_config(tmp_path / "c.yaml")
    assert (cfg.task.name, cfg.task.params["K"], cfg.train.steps, cfg.seed) == ("hmm", 10, 7, 3)
    (tmp_path / "c.json").write_text(json.dumps({"train": {"lr": 0.01}}))
    assert build_config(tmp_path / "c.json", {"train.steps": 3}).train.lr == 0.01
    with pytest.raises(FileNotFoundError, match="config"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("- a list\n")
    with pytest.raises(ValueError, match="mapping"):
        load_config(tmp_path / "bad.yaml")


def test_resolve_expands_preset_defaults_and_max_len():
    cfg = build_config(
        overrides={
            "task.name": "hmm",
            "model.preset": "smoke",
            "model.d_model": 48,
            "eval.overrides": [{"K": 30}, {"K": 50}],
        }
    )
    r = resolve_config(cfg)
    assert r.task.params == tasks.make("hmm").params.stored()  # defaults filled in (but off-by-default options)
    assert r.model.size["d_model"] == 48 and "n_layers" in r.model.size  # preset expanded, override wins
    assert r.model.max_len == tasks.make("hmm", K=50).spec.seq_len > tasks.make("hmm").spec.seq_len
    assert resolve_config(r) == r  # idempotent


def test_resolved_config_round_trips_through_json():
    r = resolve_config(build_config(overrides={"model.preset": "smoke", "train.checkpoint_schedule": [5, 1, 5]}))
    assert r.train.checkpoint_schedule == [1, 5]
    again = RunConfig.model_validate(json.loads(config_to_json(r)))
    assert again == r


def test_resolve_rejects_bad_task_params_and_arch():
    with pytest.raises(ValueError, match=r"bijection\.V"):
        resolve_config(build_config(overrides={"task.V": 1}))
    with pytest.raises(ValueError, match="unknown task"):
        resolve_config(build_config(overrides={"task.name": "nope"}))
    with pytest.raises(ValueError, match="arch"):
        resolve_config(build_config(overrides={"model.arch": "nope"}))
    with pytest.raises(ValueError, match="max_len"):
        resolve_config(build_config(overrides={"model.max_len": 5}))
    with pytest.raises(ValueError, match="model.size"):  # said by resolve_config: the schema loads no model
        resolve_config(build_config(overrides={"model.arch": "oracle", "model.d_model": 3}))


def test_model_size_is_typed_at_resolve_time():
    """The architecture's Size validates model.size before anything is built; the config keeps only given fields
    and the derived `init`."""
    r = resolve_config(build_config(overrides={"model.arch": "mamba", "model.preset": "smoke", "model.d_state": 8}))
    assert r.model.size == {"n_layers": 2, "d_model": 32, "d_state": 8, "init": "normal"}
    with pytest.raises(ValueError, match=r"model\.size\.d_state: .*integer"):
        resolve_config(build_config(overrides={"model.arch": "mamba", "model.d_state": 2.5}))
    with pytest.raises(ValueError, match=r"model\.size\.dt_rank: .*'auto' or an integer >= 1"):
        resolve_config(build_config(overrides={"model.arch": "mamba", "model.dt_rank": 0}))
    with pytest.raises(ValueError, match=r"model\.size\.pos: .*'learned', 'none', 'rotary'"):
        resolve_config(build_config(overrides={"model.pos": "sinusoid"}))


@pytest.mark.parametrize(
    "arch,size,init",
    [
        ("transformer", {}, "normal"),
        ("lstm", {}, "normal"),
        ("mlp-pointwise", {}, "normal"),
        ("mamba", {}, "normal"),
        ("mamba", {"variant": "paper"}, "torch"),  # the authors' block keeps PyTorch's init
        ("mamba", {"variant": "paper", "init": "normal"}, "normal"),  # explicit wins
        ("transformer", {"init": "torch"}, "torch"),
    ],
)
def test_resolved_config_records_the_concrete_init(arch, size, init):
    overrides = {"model.arch": arch, "model.preset": "smoke", **{f"model.{k}": v for k, v in size.items()}}
    r = resolve_config(build_config(overrides=overrides))
    assert r.model.size["init"] == init and resolve_config(r) == r


def test_stored_config_without_init_reads_as_the_normal_init_it_trained_with(tmp_path):
    """Run directories written before `init` existed trained every architecture, the paper Mamba too, with "normal"
    init; today's default for the paper Mamba is "torch", so a stored config without the field is upgraded."""
    from windtunnel.store import rundir
    from windtunnel.store.records.run_dir import read_config

    cfg = resolve_config(
        build_config(overrides={"model.arch": "mamba", "model.preset": "smoke", "model.variant": "paper"})
    )
    old = cfg.model_dump(mode="json")
    del old["model"]["size"]["init"]
    (tmp_path / rundir.CONFIG).write_text(json.dumps(old))
    stored = read_config(tmp_path)
    assert stored.model.size["init"] == "normal" and cfg.model.size["init"] == "torch"
    assert stored.model_dump()["model"] | {"size": cfg.model.size} == cfg.model_dump()["model"]  # only init differs
    with pytest.raises(ValueError, match=r"model\.size\.init: .*'normal' or 'torch'"):
        resolve_config(build_config(overrides={"model.init": "xavier"}))


@pytest.mark.parametrize(("stored", "attention"), [(True, "explicit"), (False, "auto")])
def test_stored_transformer_with_the_retired_explicit_alias_reads_as_its_attention(tmp_path, stored, attention):
    """`TransformerSize.explicit` (an alias of attention="explicit") is retired: a new config naming it is refused,
    and a stored config.json that has it reads as the attention it trained with."""
    from windtunnel.store import rundir
    from windtunnel.store.records.run_dir import read_config

    cfg = resolve_config(build_config(overrides={"model.preset": "smoke"}))
    old = cfg.model_dump(mode="json")
    old["model"]["size"]["explicit"] = stored
    (tmp_path / rundir.CONFIG).write_text(json.dumps(old))
    size = read_config(tmp_path).model.size
    assert "explicit" not in size and size.get("attention", "auto") == attention
    with pytest.raises(ValueError, match=r"model\.size\.explicit"):
        resolve_config(build_config(overrides={"model.preset": "smoke", "model.size.explicit": True}))


def test_auto_loss_and_eval_names():
    assert resolve_loss(build_config(), tasks.make("bijection")) == "ce"
    assert resolve_loss(build_config(overrides={"task.name": "hmm"}), tasks.make("hmm")) == "soft_ce"
    assert resolve_loss(build_config(overrides={"task.name": "regression"}), tasks.make("regression")) == "gaussian_nll"
    assert resolve_loss(build_config(overrides={"train.loss": "soft_ce"}), tasks.make("bijection")) == "soft_ce"
    assert eval_name({}) == "default" and eval_name({"K": 50}) == "K=50"
