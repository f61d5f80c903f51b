"""`windtunnel.save_run`: a model trained in a loop of one's own becomes a run directory that eval, probe
and report read as any run, after the checks a training run makes; it is marked exported, never resumed."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from typer.testing import CliRunner

import windtunnel
from windtunnel import models, runs, tasks
from windtunnel.cli import app
from windtunnel.errors import CheckpointError
from windtunnel.evaluation.evaluate import evaluate, evaluate_model
from windtunnel.models import CausalityError
from windtunnel.report import build_report, read_run
from windtunnel.runs.resume import run_record
from windtunnel.training.train import train

runner = CliRunner()
SIZE = {"n_layers": 1, "d_model": 16, "n_heads": 2, "d_ff": 32}


def _own_loop(task, steps: int = 3, seed: int = 0) -> nn.Module:
    """A tiny transformer trained as a user would: their own optimiser and loop, windtunnel only for the data."""
    torch.manual_seed(seed)
    model = models.make("transformer", task.spec, SIZE)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(steps):
        batch = task.sample(16, seed=step)
        mask = batch.target_mask.bool()
        loss = F.cross_entropy(model(batch.inputs)[mask], batch.targets[mask].long())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@pytest.fixture(scope="module")
def task():
    return tasks.make("bijection", V=5, L=4)


@pytest.fixture(scope="module")
def saved(tmp_path_factory, task):
    """(the model, its run directory): saved with its steps and a small eval.n."""
    model = _own_loop(task)
    out = tmp_path_factory.mktemp("saved") / "run"
    assert windtunnel.save_run(model, task, out, {"eval": {"n": 24, "batch_size": 8}}, steps=3) == out
    return model, out


def test_a_saved_run_has_the_files_of_a_run_and_says_it_was_exported(saved):
    model, out = saved
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "versions.json", "trained.json", "checkpoints"} <= names
    cfg = runs.load_run(out).config
    assert cfg.model.arch == "transformer" and cfg.model.size["d_model"] == 16 and cfg.train.steps == 3
    assert cfg.task.params["V"] == 5 and cfg.eval.n == 24 and cfg.imports == []
    exported = json.loads((out / "trained.json").read_text())["exported"]
    unknown = exported.pop("unknown")  # the training settings its config did not give: defaults in config.json
    assert exported == {"by": "windtunnel.save_run", "model": "windtunnel.models.transformer.Transformer", "steps": 3}
    assert "train.lr" in unknown and "train.batch_size" in unknown and "train.steps" not in unknown
    rec = run_record(out, 3)
    assert rec["status"] == "exported" and rec["steps_trained"] == 3 and "trained outside windtunnel" in rec["notes"][0]
    loaded, mine = runs.load_run(out).model.state_dict(), model.state_dict()
    assert runs.load_run(out).checkpoints() == [3]
    assert loaded.keys() == mine.keys() and all(torch.equal(v, mine[k]) for k, v in loaded.items())


def test_eval_of_a_saved_run_equals_evaluating_the_model(saved, task):
    model, out = saved
    cfg = runs.load_run(out).config
    direct = evaluate_model(model, task, cfg)  # the same model, seeds and settings, never saved
    got = evaluate(out)["default"]
    assert got["metrics"] == direct["metrics"] and got["per_position"] == direct["per_position"]
    assert got["run"]["status"] == "exported" and "extra" not in got
    r = runner.invoke(app, ["eval", str(out), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["default"]["metrics"] == direct["metrics"]
    assert "warning:" in r.stderr and "exported: trained outside windtunnel" in r.stderr
    assert json.loads((out / "eval.json").read_text())["default"]["metrics"] == direct["metrics"]


def test_probe_and_report_read_a_saved_run(saved, tmp_path):
    _, out = saved
    if not (out / "eval.json").exists():
        evaluate(out)
    r = runner.invoke(app, ["probe", str(out), "--n", "16", "--no-figures"])
    assert r.exit_code == 0, r.output
    assert "transformer on bijection, step 3" in r.output and (out / "geometry.json").is_file()
    assert read_run(out).state().variant == "exported: trained outside windtunnel"
    results = build_report([out], tmp_path / "report")
    (entry,) = results["runs"]
    assert entry["status"] == "exported" and entry["steps_trained"] == 3


def test_a_saved_run_is_never_resumed(saved):
    _, out = saved
    cfg = runs.load_run(out).config
    with pytest.raises(ValueError, match="trained outside windtunnel"):
        train(cfg, out, resume=True, progress=False)


def test_without_steps_the_steps_are_unknown(task, tmp_path):
    out = windtunnel.save_run(_own_loop(task), "bijection", tmp_path / "r", {"task": {"params": {"V": 5, "L": 4}}})
    assert runs.load_run(out).checkpoints() == [0] and runs.load_run(out).config.train.steps == 0
    rec = run_record(out, 0)
    assert rec["status"] == "exported" and "not known" in rec["notes"][0]


class _Peeks(nn.Module):
    """Sees the future: every position's logits read the mean embedding of the whole sequence."""

    def __init__(self, spec):
        super().__init__()
        self.emb = nn.Embedding(spec.vocab_size, spec.output_dim)

    def forward(self, x):
        return self.emb(x).mean(1, keepdim=True).expand(-1, x.shape[1], -1)


def test_a_model_that_sees_the_future_is_refused_and_nothing_is_written(task, tmp_path):
    with pytest.raises(CausalityError, match="is not causal"):
        windtunnel.save_run(_Peeks(task.spec), task, tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_nan_weights_and_the_wrong_task_are_refused(task, tmp_path):
    model = _own_loop(task)
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] = float("nan")
    with pytest.raises(CheckpointError, match="holds NaN"):
        windtunnel.save_run(model, task, tmp_path / "nan")
    other = tasks.make("bijection", V=6, L=4)  # a larger vocabulary than the model embeds
    with pytest.raises(ValueError, match="task 'bijection'") as err:
        windtunnel.save_run(_own_loop(task), other, tmp_path / "vocab")
    assert "inputs" in str(err.value)
    three = nn.Embedding(task.spec.vocab_size, 3)  # causal, but 3 logits where the task has 5 classes
    with pytest.raises(ValueError, match=rf"expected outputs of shape \(4, {task.spec.seq_len}, 5\)"):
        windtunnel.save_run(three, task, tmp_path / "shape")
    assert not any((tmp_path / d).exists() for d in ("nan", "vocab", "shape"))


def test_an_unregistered_architecture_is_told_what_the_config_needs(task, tmp_path):
    class Mine(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(task.spec.vocab_size, task.spec.output_dim)

        def forward(self, x):
            return self.emb(x)

    with pytest.raises(ValueError, match=r"not a registered architecture; .*models\.register\(NAME, Class\)"):
        windtunnel.save_run(Mine(), task, tmp_path / "r")
    # a config whose size builds another model than this one is refused before anything is written
    wrong = {"model": {"arch": "transformer", "size": {**SIZE, "d_model": 8}}}
    with pytest.raises(ValueError, match="builds a model") as err:
        windtunnel.save_run(_own_loop(task), task, tmp_path / "r", wrong)
    assert "weights" in str(err.value)
    assert not (tmp_path / "r").exists()


def test_an_existing_directory_is_replaced_only_if_it_is_a_run(saved, task, tmp_path):
    _, out = saved
    model = _own_loop(task, seed=1)
    with pytest.raises(FileExistsError, match="already exists; pass overwrite=True"):
        windtunnel.save_run(model, task, out)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        windtunnel.save_run(model, task, mine)
    with pytest.raises(ValueError, match=r"not a run directory.*'notes\.txt'"):
        windtunnel.save_run(model, task, mine, overwrite=True)
    assert (mine / "notes.txt").read_text() == "mine" and {p.name for p in mine.iterdir()} == {"notes.txt"}
    copy = tmp_path / "copy"
    windtunnel.save_run(model, task, copy, steps=3)
    evaluate(copy)
    windtunnel.save_run(_own_loop(task, seed=2), task, copy, steps=5, overwrite=True)  # a run: replaced
    assert runs.load_run(copy).checkpoints() == [5] and not (copy / "eval.json").exists()


@pytest.mark.gpu
def test_a_cuda_model_saves_and_a_cuda_run_records_its_evaluation(task, tmp_path):
    """On CUDA: save_run's checks run where the model lives, and train's final evaluation (the model on the GPU,
    compared with its checkpoint) is the run's recorded one."""
    model = _own_loop(task).cuda()
    out = windtunnel.save_run(model, task, tmp_path / "saved", steps=3)
    assert evaluate(out)["default"]["metrics"]["kl_bits"]["mean"] == pytest.approx(
        evaluate_model(model, task, runs.load_run(out).config)["metrics"]["kl_bits"]["mean"], rel=1e-4, abs=1e-6
    )
    from tiny_runs import smoke_config

    result = train(smoke_config(**{"task.V": 5, "task.L": 4, "train.device": "cuda"}), tmp_path / "t", progress=False)
    assert "extra" not in result["default"] and (tmp_path / "t" / "eval.json").is_file()
