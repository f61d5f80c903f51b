"""Recipes, schedules, the curriculum sampler, Muon, and the time-to-Bayes bookkeeping."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from windtunnel import runs
from windtunnel.config import build_config, lr_at
from windtunnel.evaluation.crossings import EXACT_FILTER, crossings
from windtunnel.resolve import resolve_config
from windtunnel.runs import checkpoints
from windtunnel.store import rundir
from windtunnel.suites.paper import run_config
from windtunnel.time_to_bayes import Cell, cell_config, parse_cell
from windtunnel.training.curriculum import Curriculum
from windtunnel.training.optim import BlockMuon, MultiOptimizer, make_optimizer
from windtunnel.training.recipes import RECIPES, get_recipe, parse_recipe
from windtunnel.training.train import train


def _smoke(**extra):
    o = {
        "task.name": "hmm",
        "task.K": 6,
        "task.S": 3,
        "task.O": 3,
        "model.arch": "transformer",
        "model.preset": "smoke",
        "train.steps": 8,
        "train.batch_size": 4,
        "train.log_every": 1,
        "train.eval_every": 4,
        "train.eval_size": 4,
        "train.warmup_steps": 1,
        "train.checkpoint_every": 4,
        "eval.n": 8,
        "train.device": "cpu",
    }
    o.update(extra)
    return build_config(overrides=o)


# --- schedules ---------------------------------------------------------------------------------------------


def test_wsd_schedule_values_at_the_boundaries():
    cfg = build_config(
        overrides={
            "train.steps": 100,
            "train.lr": 1.0,
            "train.warmup_steps": 10,
            "train.schedule": "wsd",
            "train.cooldown_frac": 0.2,
            "train.min_lr_ratio": 0.1,
        }
    )
    assert lr_at(1, cfg) == pytest.approx(0.1) and lr_at(10, cfg) == pytest.approx(1.0)
    assert lr_at(11, cfg) == lr_at(80, cfg) == 1.0  # stable until the cooldown starts after step 80
    assert lr_at(81, cfg) == pytest.approx(1.0 - 0.9 / 20)
    assert lr_at(90, cfg) == pytest.approx(0.55) and lr_at(100, cfg) == pytest.approx(0.1)
    lrs = [lr_at(s, cfg) for s in range(80, 101)]
    assert all(a > b for a, b in zip(lrs[:-1], lrs[1:], strict=True))  # strictly decreasing through the cooldown


def test_wsd_cooldown_never_eats_the_warmup():
    cfg = build_config(
        overrides={
            "train.steps": 20,
            "train.lr": 1.0,
            "train.warmup_steps": 15,
            "train.schedule": "wsd",
            "train.cooldown_frac": 0.9,
        }
    )
    assert lr_at(15, cfg) == pytest.approx(1.0)  # the cooldown starts after warmup, not at step 2
    assert lr_at(20, cfg) == 0.0 and 0 < lr_at(18, cfg) < 1


def test_cosine_ends_at_the_floor_and_is_half_way_at_mid_span():
    cfg = build_config(
        overrides={"train.steps": 110, "train.lr": 2.0, "train.warmup_steps": 10, "train.min_lr_ratio": 0.0}
    )
    assert lr_at(60, cfg) == pytest.approx(1.0) and lr_at(110, cfg) == pytest.approx(0.0, abs=1e-12)


# --- curriculum ---------------------------------------------------------------------------------------------


def test_curriculum_sampler_switches_stages_at_their_last_step():
    cfg = resolve_config(
        build_config(
            overrides={
                "task.name": "hmm",
                "task.K": 20,
                "train.steps": 100,
                "train.curriculum": [{"until": 10, "params": {"K": 5}}, {"until": 30, "params": {"K": 10}}],
            }
        )
    )
    task = runs.build_task(cfg)
    cur = Curriculum(cfg, task)
    ks = {s: cur.task_at(s).params.K for s in (1, 10, 11, 30, 31, 100)}
    assert ks == {1: 5, 10: 5, 11: 10, 30: 10, 31: 20, 100: 20}
    assert cur.task_at(31) is task and len(cur) == 2
    assert cur.task_at(5).params.S == task.params.S  # only the stage's own parameters change


def test_a_stickiness_stage_trains_on_chains_of_that_stickiness_and_the_task_on_its_own_after():
    """A curriculum stage may change any parameter that keeps the model's shapes: the sticky HMM's stages draw T with
    the stage's rho (each row's diagonal about rho or more, to the cent grid), after the last stage the task's own."""
    cfg = resolve_config(
        build_config(
            overrides={
                "task.name": "hmm-sticky",
                "train.steps": 10,
                "train.curriculum": [{"until": 3, "params": {"stickiness": 0.5}}],
            }
        )
    )
    task = runs.build_task(cfg)
    cur = Curriculum(cfg, task)
    assert cur.task_at(3).params.stickiness == 0.5 and cur.task_at(4) is task
    assert cur.task_at(3).spec == task.spec  # same prompt format, vocabulary and answers
    diag = torch.diagonal(cur.task_at(3).sample(256, seed=1).latent["transition"], dim1=-2, dim2=-1)  # (B,S)
    assert diag.min() >= 0.47 and diag.mean() < 0.8  # rho 0.5 (to the cent grid): far less sticky than 0.85-0.95
    full = torch.diagonal(task.sample(256, seed=1).latent["transition"], dim1=-2, dim2=-1)
    assert full.min() >= 0.82


def test_the_emission_curriculum_recipe_peaks_e_early_and_trains_on_the_task_after():
    """benchmarks/recipes/emission-curriculum.yaml: E's rows peaked (clarity 0.8, then 0.4) for the first half of the
    steps, the task's own Dirichlet rows after, the prompt format unchanged."""
    base = run_config("hmm", "lstm", "standard")
    base["train"]["steps"] = 100
    recipe = get_recipe(str(Path(__file__).parents[1] / "benchmarks" / "recipes" / "emission-curriculum.yaml"))
    cfg = resolve_config(recipe.apply(base))
    task = runs.build_task(cfg)
    cur = Curriculum(cfg, task)
    clarity = {s: cur.task_at(s).params.emission_clarity for s in (1, 30, 31, 50, 51, 100)}
    assert clarity == {1: 0.8, 30: 0.8, 31: 0.4, 50: 0.4, 51: 0.0, 100: 0.0}
    assert cur.task_at(1).spec == task.spec and cur.task_at(51) is task

    def top(t):  # mean of each E row's largest entry
        return float(t.sample(256, seed=1).latent["emission"].max(-1).values.mean())

    assert top(cur.task_at(1)) > 0.7 > top(cur.task_at(31)) > top(task)


def test_curriculum_is_validated_when_the_config_resolves():
    with pytest.raises(ValueError, match="strictly increasing"):
        build_config(overrides={"train.curriculum": [{"until": 10}, {"until": 10}]})
    with pytest.raises(ValueError, match=r"train\.curriculum\[0\].*changes vocab_size"):
        resolve_config(
            build_config(
                overrides={"task.name": "bijection", "train.curriculum": [{"until": 5, "params": {"V": 10, "L": 5}}]}
            )
        )
    with pytest.raises(ValueError, match=r"train\.curriculum\[0\]"):
        resolve_config(
            build_config(overrides={"task.name": "hmm", "train.curriculum": [{"until": 5, "params": {"K": -1}}]})
        )
    # a stage longer than the task makes room for itself in the model's positions
    cfg = resolve_config(
        build_config(
            overrides={"task.name": "hmm", "task.K": 6, "train.curriculum": [{"until": 5, "params": {"K": 9}}]}
        )
    )
    longest = runs.build_task(build_config(overrides={"task.name": "hmm", "task.K": 9})).spec.seq_len
    assert cfg.model.max_len - (cfg.model.reserved_positions or 0) == longest  # the rest is reserved for 2.5 x K


def test_training_with_a_curriculum_samples_the_stage_lengths(tmp_path, monkeypatch):
    from windtunnel.training import train as tr

    seen = []
    real = tr.compute_loss

    def spy(kind, spec, out, batch):
        seen.append(batch.inputs.shape[1])
        return real(kind, spec, out, batch)

    monkeypatch.setattr(tr, "compute_loss", spy)
    cfg = _smoke(**{"train.curriculum": [{"until": 3, "params": {"K": 3}}]})
    train(cfg, tmp_path / "r", progress=False)
    short, full = (
        runs.build_task(
            build_config(overrides={"task.name": "hmm", "task.S": 3, "task.O": 3, "task.K": k})
        ).spec.seq_len
        for k in (3, 6)
    )
    assert seen == [short] * 3 + [full] * 5


# --- optimisers ----------------------------------------------------------------------------------------------


def test_muon_takes_the_hidden_matrices_only():
    cfg = resolve_config(_smoke(**{"train.optimizer": "muon"}))
    task = runs.build_task(cfg)
    model = runs.build_model(cfg, task.spec, task)
    opt = make_optimizer(model, cfg)
    assert isinstance(opt, MultiOptimizer)
    muon, adamw = opt.optimizers
    assert isinstance(muon, BlockMuon) and isinstance(adamw, torch.optim.AdamW)
    ortho = {id(p) for g in muon.param_groups for p in g["params"]}
    names = {n for n, p in model.named_parameters() if id(p) in ortho}
    assert names and all(n.startswith("blocks.") and n.endswith(".weight") for n in names)
    assert not any("embed" in n or "head" in n or "norm" in n for n in names)
    n_total = sum(1 for _ in model.parameters())
    assert len(ortho) + sum(len(g["params"]) for g in adamw.param_groups) == n_total
    opt.param_groups[0]["lr"] = 0.123  # one list of groups: the schedule reaches both optimisers
    assert muon.param_groups[0]["lr"] == 0.123


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
@pytest.mark.parametrize("variant", ["reference", "paper"])
def test_mamba_a_log_and_d_are_never_decayed(variant, optimizer):
    """A_log ((Di,N) in the reference variant) and D are marked no-decay, as in state-spaces/mamba: AdamW's group
    without weight decay, never Muon (which decays everything it holds)."""
    cfg = resolve_config(_smoke(**{"model.arch": "mamba", "model.variant": variant, "train.optimizer": optimizer}))
    task = runs.build_task(cfg)
    model = runs.build_model(cfg, task.spec, task)
    opt = make_optimizer(model, cfg)
    groups = opt.param_groups
    undecayed = {id(p) for g in groups if g["weight_decay"] == 0 for p in g["params"]}
    ssm = {n: p for n, p in model.named_parameters() if n.endswith((".A_log", ".D"))}
    assert len(ssm) == 2 * model.n_layers and all(id(p) in undecayed for p in ssm.values())
    assert (model.blocks[0].A_log.ndim == 2) == (variant == "reference")
    decayed = {id(p) for g in groups if g["weight_decay"] > 0 for p in g["params"]}
    assert id(model.blocks[0].in_proj.weight) in decayed  # the matrices still decay
    if optimizer == "muon":
        ortho = {id(p) for g in opt.optimizers[0].param_groups for p in g["params"]}
        assert ortho and not ortho & {id(p) for p in ssm.values()}


def test_a_parameter_marked_no_weight_decay_leaves_both_decayed_groups():
    from windtunnel.models.common import no_weight_decay

    cfg = resolve_config(_smoke(**{"train.optimizer": "muon"}))
    task = runs.build_task(cfg)
    model = runs.build_model(cfg, task.spec, task)
    w = no_weight_decay(model.blocks[0].attn.qkv.weight)  # a hidden matrix Muon would otherwise take
    opt = make_optimizer(model, cfg)
    (where,) = [g["weight_decay"] for g in opt.param_groups if any(p is w for p in g["params"])]
    assert where == 0.0 and not any(p is w for g in opt.optimizers[0].param_groups for p in g["params"])


@pytest.mark.parametrize("arch", ["transformer", "mamba"])
def test_weight_decay_on_all_decays_every_parameter(arch):
    """`train.weight_decay_on="all"` is torch.optim.AdamW(model.parameters(), weight_decay=wd), as in the authors'
    scripts: after one step with zero gradients every parameter (embeddings, norms, biases, Mamba's A_log and D) is
    scaled by 1 - lr*wd; with the default "matrices" the norms, biases and A_log/D stay as they were."""
    variant = {"model.variant": "paper"} if arch == "mamba" else {}
    shrunk = {}
    for on in ("all", "matrices"):
        cfg = resolve_config(
            _smoke(**{"model.arch": arch, **variant, "train.weight_decay": 0.5, "train.weight_decay_on": on})
        )
        task = runs.build_task(cfg)
        model = runs.build_model(cfg, task.spec, task)
        opt = make_optimizer(model, cfg)
        assert len(opt.param_groups) == 2  # one state layout for both modes
        with torch.no_grad():  # nonzero everywhere (zero-initialised biases would look decayed)
            for p in model.parameters():
                p.uniform_(0.5, 1.5)
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        for g in opt.param_groups:
            g["lr"] = 0.1
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        opt.step()
        shrunk[on] = {n for n, p in model.named_parameters() if torch.allclose(p, before[n] * (1 - 0.1 * 0.5))}
    names = {n for n, _ in model.named_parameters()}
    assert shrunk["all"] == names
    kept = names - shrunk["matrices"]
    assert any(n.endswith(".bias") for n in kept) and any("norm" in n for n in kept)
    if arch == "mamba":
        assert {n for n in names if n.endswith((".A_log", ".D"))} <= kept


def test_weight_decay_on_is_validated_and_defaults_to_matrices():
    from windtunnel.config import TrainConfig, validate

    assert TrainConfig().weight_decay_on == "matrices"  # existing configs train exactly as before
    with pytest.raises(ValueError, match=r"train\.weight_decay_on: .*'matrices'.*'all'"):
        validate({"train": {"weight_decay_on": "embeddings"}})


def test_muon_run_resumes_exactly(tmp_path):
    import shutil

    cfg = _smoke(**{"train.optimizer": "muon", "train.schedule": "wsd"})
    fresh = train(cfg, tmp_path / "fresh", progress=False)
    shutil.copytree(tmp_path / "fresh", tmp_path / "cut")  # as if stopped after the step-4 checkpoint
    checkpoints.delete_checkpoint(tmp_path / "cut", 8)
    rundir.write_json(tmp_path / "cut" / "checkpoints" / "latest.json", {"step": 4})
    (tmp_path / "cut" / "eval.json").unlink()
    resumed = train(cfg, tmp_path / "cut", resume=True, progress=False)
    assert resumed["default"]["metrics"] == fresh["default"]["metrics"]
    a = runs.load_run(tmp_path / "cut").model.state_dict()
    b = runs.load_run(tmp_path / "fresh").model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


# --- recipes -------------------------------------------------------------------------------------------------


def test_recipes_apply_overrides_and_fractional_curricula():
    base = run_config("hmm", "transformer", "quick")
    before = json.loads(json.dumps(base))
    cfg = RECIPES.get("curriculum").apply(base)
    assert cfg["train"]["schedule"] == "wsd" and base == before  # a copy
    steps = base["train"]["steps"]
    assert [s["until"] for s in cfg["train"]["curriculum"]] == [round(0.1 * steps), round(0.25 * steps)]
    assert [s["params"]["K"] for s in cfg["train"]["curriculum"]] == [5, 10]
    assert "curriculum" not in RECIPES.get("curriculum").apply(run_config("bijection", "transformer", "quick"))["train"]
    resolve_config(cfg)  # a valid run config
    assert RECIPES.get("baseline").apply(base) == base


def test_recipes_cannot_change_the_task_or_the_loss_unless_an_ablation(tmp_path):
    with pytest.raises(ValueError, match="task.K: a recipe may set train"):
        parse_recipe({"name": "x", "overrides": {"task.K": 5}})
    with pytest.raises(ValueError, match="eval.n"):
        parse_recipe({"name": "x", "by_task": {"hmm": {"eval.n": 5}}})
    with pytest.raises(ValueError, match="ablation"):
        parse_recipe({"name": "x", "overrides": {"train.loss": "ce"}})
    assert parse_recipe({"name": "x", "overrides": {"train.loss": "ce"}, "ablation": True}).ablation
    with pytest.raises(ValueError, match="strictly increasing"):
        parse_recipe({"name": "x", "curriculum": {"hmm": [{"frac": 0.5}, {"frac": 0.2}]}})
    with pytest.raises(ValueError, match="frac"):
        parse_recipe({"name": "x", "curriculum": {"hmm": [{"frac": 1.5}]}})
    f = tmp_path / "mine.yaml"
    f.write_text("overrides:\n  train.schedule: wsd\n  train.lr: 0.002\n")
    r = get_recipe(f)
    assert r.name == "mine" and r.overrides == {"train.schedule": "wsd", "train.lr": 0.002}
    with pytest.raises(ValueError, match="neither a registered recipe"):
        get_recipe("no-such-recipe")


@pytest.mark.parametrize("steps", [".inf", "-.inf", ".nan", "1.5", "-1", "lots", "true"])
def test_a_recipe_step_count_that_is_no_whole_number_is_one_error_naming_the_key(tmp_path, steps):
    """`train.steps: .inf` was an OverflowError inside `Recipe.apply` (it turns curriculum fractions into steps)."""
    f = tmp_path / "r.yaml"
    f.write_text(f"overrides:\n  train.steps: {steps}\n")
    with pytest.raises(ValueError, match=rf"{f}: recipe: overrides: train\.steps: .*whole number"):
        get_recipe(f)
    with pytest.raises(ValueError, match=r"by_task: train\.steps: .*whole number"):
        parse_recipe({"name": "x", "by_task": {"hmm": {"train.steps": float("inf")}}})
    base = run_config("hmm", "transformer", "smoke")
    with pytest.raises(ValueError, match=r"^config: train\.steps: .*>= 0.*\binf$"):
        RECIPES.get("curriculum").apply({**base, "train": {**base["train"], "steps": float("inf")}})
    assert parse_recipe({"name": "x", "overrides": {"train.steps": 40}}).apply(base)["train"]["steps"] == 40


# --- time-to-Bayes bookkeeping -------------------------------------------------------------------------------


def test_crossings_are_the_first_evaluation_at_each_mark():
    evals = [
        {"step": 10, "train_s": 1.0, "entropy_mae_bits": 0.2},
        {"step": 20, "train_s": 2.0, "entropy_mae_bits": 0.04, "horizon": 1, "horizon_max": 5},
        {"step": 30, "train_s": 3.0, "entropy_mae_bits": 0.06, "horizon": 5, "horizon_max": 5},
        {"step": 40, "train_s": 4.0, "entropy_mae_bits": float("nan"), "horizon": 5, "horizon_max": 5},
        {"step": 50, "train_s": 5.0, "entropy_mae_bits": 0.01, "horizon": 5, "horizon_max": 5},
    ]
    c = crossings(evals, "entropy_mae_bits")
    assert c["0.1"] == {"step": 20, "train_s": 2.0} and c["0.05"] == {"step": 20, "train_s": 2.0}
    assert c["0.02"] == c["0.01"] == {"step": 50, "train_s": 5.0}  # a NaN evaluation reaches no mark
    assert c[EXACT_FILTER] == {"step": 30, "train_s": 3.0}
    acc = crossings(
        [{"step": 5, "train_s": 0.5, "accuracy": 0.95}, {"step": 6, "train_s": 0.6, "accuracy": 1.0}], "accuracy"
    )
    assert acc == {
        "0.9": {"step": 5, "train_s": 0.5},
        "0.99": {"step": 6, "train_s": 0.6},
        "1": {"step": 6, "train_s": 0.6},
    }
    assert crossings([{"step": 5, "train_s": 0.5, "entropy_mae_bits": 0.5}], "entropy_mae_bits")["0.1"] is None


def test_cells_parse_and_build_their_run_configs():
    cell = parse_cell(
        "task=bijection,arch=transformer,recipe=wsd,steps=300,batch_size=32,lr=2e-3,seeds=3,set.model.size.d_model=64"
    )
    assert cell == Cell(
        task="bijection",
        arch="transformer",
        recipe="wsd",
        steps=300,
        batch_size=32,
        lr=2e-3,
        seeds=3,
        set={"model.size.d_model": 64},
    )
    cfg = resolve_config(cell_config(cell, seed=2))
    t = cfg.train
    assert (t.steps, t.batch_size, t.lr, t.schedule, t.warmup_steps, cfg.seed) == (300, 32, 2e-3, "wsd", 15, 2)
    assert cfg.model.size["d_model"] == 64 and t.eval_every == cell.eval_every
    with pytest.raises(ValueError, match="steps"):
        parse_cell("task=bijection,arch=transformer")
    with pytest.raises(ValueError, match="expected key=value"):
        parse_cell("task=bijection,transformer")


def test_a_cell_with_a_recipe_file_names_its_runs_by_the_recipe_file():
    from windtunnel.time_to_bayes import cell_runs

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "recipes" / "recall-curriculum.yaml"
    cell = parse_cell(
        f"task=recall,arch=transformer,recipe={path},steps=100,set.task.params.N=32,"
        "set.task.params.key_vocab=64,set.task.params.value_vocab=64"
    )
    (run,) = cell_runs(cell)
    assert cell.recipe_name == "recall-curriculum.yaml" and "/" not in run.name
    assert run.name.startswith("recall-transformer-recall-curriculum.yaml-100x64-lr0.001-s0-")
    cfg = resolve_config(cell_config(cell, seed=0))
    assert [(s.until, s.params["N"]) for s in cfg.train.curriculum] == [(20, 8), (45, 24)]
    assert cfg.task.params["N"] == 32 and cfg.train.schedule == "wsd"  # evaluation keeps the task's own N


def test_merge_combines_results_in_mark_order_and_refuses_mixed_machines(tmp_path):
    from windtunnel.store import rundir as run_files
    from windtunnel.time_to_bayes import merge, summarize_marks

    def result(machine, label):
        seeds = [
            {
                "crossings": {"0.1": {"step": 10, "train_s": 2.0}, "0.05": None, "0.02": None, "0.01": None},
                "dtype": "float32",
                "curve": [{"step": 10, "train_s": 2.0, "entropy_mae_bits": 0.09}],
            }
        ]
        return {
            "machine": {"machine": machine, "torch": "2.13", "threads_per_run": 1, "jobs": 2},
            "wall_s": 5,
            "cells": [
                {
                    "label": label,
                    "metric": "entropy_mae_bits",
                    "cell": {"task": "bijection"},
                    "marks": summarize_marks([s["crossings"] for s in seeds]),
                    "seeds": seeds,
                    "test": {"mean": 0.2, "min": 0.2, "max": 0.2},
                }
            ],
        }

    for name, machine in (("a", "cpu A"), ("b", "cpu A"), ("c", "cpu B")):
        (tmp_path / name).mkdir()
        run_files.write_json(tmp_path / name / "time_to_bayes.json", result(machine, f"cell {name}"))
    data = merge([tmp_path / "a", tmp_path / "b" / "time_to_bayes.json"], tmp_path / "out")
    assert [c["label"] for c in data["cells"]] == ["cell a", "cell b"] and data["wall_s"] == 10
    assert data["merged_from"] == ["../a", "../b/time_to_bayes.json"]  # relative to the merged --out
    md = (tmp_path / "out" / "time_to_bayes.md").read_text()
    assert "| ≤ 0.1 bits | ≤ 0.05 bits | ≤ 0.02 bits | ≤ 0.01 bits |" in md and "2 s @10" in md
    assert (tmp_path / "out" / "time_to_bayes.png").stat().st_size > 0
    with pytest.raises(ValueError, match="different machines"):
        merge([tmp_path / "a", tmp_path / "c"], tmp_path / "out2")
    with pytest.raises(ValueError, match="no time_to_bayes.json"):
        merge([tmp_path / "missing"], tmp_path / "out3")


def test_time_to_bayes_command_runs_a_smoke_cell_end_to_end(tmp_path):
    import json

    from typer.testing import CliRunner

    from windtunnel.cli import app

    out = tmp_path / "ttb"
    res = CliRunner().invoke(
        app,
        [
            "time-to-bayes",
            "--out",
            str(out),
            "--threads",
            "1",
            "--cell",
            "task=hmm,arch=transformer,tier=smoke,recipe=wsd,steps=6,batch_size=4,eval_every=2,eval_size=4,seeds=2",
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads((out / "time_to_bayes.json").read_text())
    (cell,) = data["cells"]
    assert cell["metric"] == "entropy_mae_bits" and len(cell["seeds"]) == 2
    assert set(cell["marks"]) == {"0.1", "0.05", "0.02", "0.01", EXACT_FILTER}
    seed = cell["seeds"][0]
    assert [e["step"] for e in seed["curve"]] == [2, 4, 6]
    assert all(e["train_s"] > 0 and "closest" in e and "horizon" in e for e in seed["curve"])
    assert seed["test"]["entropy_mae_bits"] > 0 and seed["threads"] == 1
    assert (out / "time_to_bayes.png").exists() and "hmm/transformer/wsd" in (out / "time_to_bayes.md").read_text()
    again = CliRunner().invoke(app, ["time-to-bayes", "--merge", str(out), "--out", str(tmp_path / "m")])
    assert again.exit_code == 0 and (tmp_path / "m" / "time_to_bayes.md").exists()
    bad = CliRunner().invoke(app, ["time-to-bayes", "--out", str(tmp_path / "bad"), "--cell", "task=hmm,steps=3"])
    assert bad.exit_code == 2 and "arch" in bad.output and not (tmp_path / "bad").exists()
