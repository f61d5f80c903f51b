"""Bounds before allocation (windtunnel.budget): a config whose run cannot fit this machine's memory, trains more than
`budget.MAX_STEPS` steps or has more than `budget.MAX_LAYERS` layers is one line naming the field, exit 2, before
anything is created: through --set, a shared config.json, --grid, a recipe's curriculum and `eval --n` alike. The
estimate counts the model exactly (on the meta device, drawing no random number) and is a lower bound of what a
training step really saves; checkpoint steps are asked one by one, never listed."""

from __future__ import annotations

import json
import re

import pytest
import torch
from typer.testing import CliRunner

from cli_args import SWEEP_BASE, train_args
from windtunnel import budget, models, runs, tasks
from windtunnel.cli import app
from windtunnel.config import validate
from windtunnel.resolve import resolve_config
from windtunnel.tasks.regression import Regression
from windtunnel.training.train import is_checkpoint_step

runner = CliRunner()
HUGE = 10**11
# The refusal's form: the field(s), the estimate in GB with its largest parts, the machine's memory in GB.
REFUSAL = re.compile(
    r"^error: (?P<fields>[\w.\[\], -]+): this run needs at least [\d,.]+ GB of memory to (train|evaluate) "
    r"\(.+\), more than the [\d,.]+ GB this machine has \((RAM|GPU)\)$"
)


def _one_error(result, code: int = 2) -> str:
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in result.output and "internal error" not in result.output, result.output
    return lines[0]


def _refused(line: str) -> list[str]:
    """The fields a memory refusal names."""
    match = REFUSAL.match(line)
    assert match, line
    return match["fields"].split(", ")


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        ("model.max_len", HUGE, "model.max_len"),
        ("model.reserved_positions", HUGE, "model.reserved_positions"),
        ("model.d_model", 10**8, "model.size.d_model"),
        ("model.d_ff", HUGE, "model.size.d_ff"),
        ("task.V", HUGE, "task.params.V"),
        ("train.batch_size", HUGE, "train.batch_size"),
        ("eval.n", 10**12, "eval.n"),
    ],
)
def test_a_run_beyond_the_machine_s_memory_is_one_line_naming_the_field(tmp_path, key, value, field):
    out = tmp_path / "run"
    line = _one_error(runner.invoke(app, train_args(out, "--set", f"{key}={value}")))
    assert _refused(line) == [field]
    assert not out.exists()


def test_steps_and_layers_are_bounded(tmp_path):
    """1e11 steps is a time, not a memory, problem, and 100,000 layers of a smoke-width model fit in memory but build
    for minutes and train for years: both are refused at once, at their bound; the bound itself is accepted."""
    out = tmp_path / "run"
    line = _one_error(runner.invoke(app, train_args(out, "--set", f"train.steps={HUGE}")))
    assert line.startswith(f"error: train.steps: must be at most 1,000,000,000 (got {HUGE:,}): ")
    line = _one_error(runner.invoke(app, train_args(out, "--set", "model.n_layers=100000")))
    assert line.startswith("error: model.size.n_layers: must be at most 1,000 (got 100,000)")
    assert not out.exists()
    base = {**SWEEP_BASE, "train": {**SWEEP_BASE["train"], "steps": budget.MAX_STEPS}}
    assert resolve_config(base).train.steps == budget.MAX_STEPS
    with pytest.raises(ValueError, match="^model.size.n_layers: must be at most"):
        resolve_config({**base, "model": {**base["model"], "size": {"n_layers": budget.MAX_LAYERS + 1}}})


def test_checkpoint_steps_are_asked_one_by_one(tmp_path):
    """Every checkpoint_every, the schedule and the last step, as before; at the largest step count and a checkpoint
    every step, nothing lists them (a set of a billion steps would not fit in memory)."""
    cfg = validate({"train": {"steps": 10, "checkpoint_every": 3, "checkpoint_schedule": [2, 5, 12]}})
    assert [s for s in range(0, 13) if is_checkpoint_step(cfg, s)] == [2, 3, 5, 6, 9, 10]
    every = validate({"train": {"steps": budget.MAX_STEPS, "checkpoint_every": 1}})
    assert is_checkpoint_step(every, budget.MAX_STEPS - 1) and not is_checkpoint_step(every, budget.MAX_STEPS + 1)


def test_every_path_to_a_config_is_bounded(tmp_path):
    """A shared config.json (`train --config`), a sweep's --grid and a time-to-bayes recipe's curriculum stage are
    refused alike, naming the field, before their --out exists."""
    shared = tmp_path / "shared.json"
    shared.write_text(json.dumps({**SWEEP_BASE, "eval": {"n": 10**12}}))
    out = tmp_path / "run"
    line = _one_error(runner.invoke(app, ["train", "--config", str(shared), "--out", str(out), "--no-progress"]))
    assert _refused(line) == ["eval.n"] and not out.exists()

    base = tmp_path / "base.json"
    base.write_text(json.dumps(SWEEP_BASE))
    grid = ["sweep", str(base), "--grid", "model.size.d_model=32,100000000", "--out", str(tmp_path / "swept")]
    line = _one_error(runner.invoke(app, grid))
    prefix = "error: --grid model.size.d_model=100000000: "
    assert line.startswith(prefix) and _refused("error: " + line[len(prefix) :]) == ["model.size.d_model"]
    assert not (tmp_path / "swept").exists()

    recipe = tmp_path / "long-stage.yaml"
    recipe.write_text("curriculum:\n  hmm: [{frac: 0.5, params: {K: 1000000000}}]\n")  # a stage 1e9 steps long
    cell = f"task=hmm,arch=transformer,tier=smoke,recipe={recipe},steps=6,batch_size=4,seeds=1"
    line = _one_error(runner.invoke(app, ["time-to-bayes", "--cell", cell, "--out", str(tmp_path / "ttb")]))
    assert "train.curriculum[0].params.K: " in line and "at least" in line and not (tmp_path / "ttb").exists()


def test_eval_of_a_stored_run_is_bounded(tmp_path):
    """`eval RUN --n 1e12`, and `eval RUN` of a run whose shared config.json says eval.n: 1e12, name what to change;
    nothing is written to the run."""
    run = tmp_path / "run"
    assert runner.invoke(app, train_args(run)).exit_code == 0
    before = (run / "eval.json").read_text()
    assert _refused(_one_error(runner.invoke(app, ["eval", str(run), "--n", str(10**12)]))) == ["--n"]
    config = json.loads((run / "config.json").read_text())
    config["eval"]["n"] = 10**12
    (run / "config.json").write_text(json.dumps(config))
    assert _refused(_one_error(runner.invoke(app, ["eval", str(run)]))) == ["eval.n"]
    assert (run / "eval.json").read_text() == before


@pytest.mark.parametrize(
    ("key", "value", "refusal"),
    [
        ("n_layers", 100_000, "model.size.n_layers: must be at most 1,000 (got 100,000)"),
        ("d_model", 10**8, "model.size: this run needs at least"),
    ],
)
def test_every_command_that_builds_a_stored_run_s_model_holds_it_to_the_bounds(tmp_path, key, value, refusal):
    """A shared run whose config.json says n_layers: 100000 hung eval, probe and compare (the bound was checked only
    when training); now each names the file and the field in one line, exit 2, at once, as does `runs.build_model`
    (every path that builds a model from a record)."""
    run, other = tmp_path / "run", tmp_path / "other"
    assert runner.invoke(app, train_args(run)).exit_code == 0
    assert runner.invoke(app, train_args(other)).exit_code == 0
    config = json.loads((run / "config.json").read_text())
    config["model"]["size"][key] = value
    (run / "config.json").write_text(json.dumps(config))
    for args in (["eval", str(run)], ["probe", str(run), "--n", "4"], ["compare", str(other), str(run)]):
        line = _one_error(runner.invoke(app, args))
        assert line.startswith(f"error: {run / 'config.json'}: {refusal}"), line
    with pytest.raises(ValueError, match=re.escape(refusal)):
        runs.build_model(validate(config), tasks.make("bijection", V=5, L=4).spec)


def test_the_inputs_and_the_sampling_a_config_allocates_are_counted(monkeypatch):
    """Regression at d = 1e8: the bound counted seq_len x output_dim, not the inputs (B x T x d) nor what sampling
    holds, and the process grew to 24 GB before it was killed (counting scored positions sampled one sequence of
    it). Now the refusal names task.params.d, and nothing of that size is sampled."""
    sampled: list[int] = []
    original = Regression._sample

    def spy(self, batch_size, g, device):
        sampled.append(self.params.d)
        if self.params.d > 4:  # what the old bound did: never let the test allocate it
            raise MemoryError(f"sampled at d={self.params.d}")
        return original(self, batch_size, g, device)

    monkeypatch.setattr(Regression, "_sample", spy)
    base = {"task": {"name": "regression"}, "model": {"arch": "transformer", "preset": "smoke"}}
    base["train"] = {"steps": 5, "batch_size": 8, "device": "cpu"}
    refused = r"^task.params.d: this run needs at least [\d,.]+ GB of memory to train \(sampling a block of 250 "
    for d, inputs in ((10**8, "1e+08 inputs"), (10**4, "10,002 inputs")):
        with pytest.raises(ValueError, match=refused + f"sequences x 47 positions x {re.escape(inputs)}: ") as err:
            resolve_config({**base, "task": {"name": "regression", "params": {"d": d}}})
        assert _refused("error: " + str(err.value)) == ["task.params.d"]
    assert max(sampled, default=0) <= 4  # only the default d was sampled, to count the refusal's variants
    task = tasks.make("regression", d=1000)
    assert budget.sampled_bytes(task, 250) == 2 * 250 * 24 * 1000**2 * 8  # (B, n, d, d) in float64, twice
    assert budget.batch_bytes(task.spec, 250) == 250 * 47 * (1002 * 4 + 1 + 8 + 2 * 4)


BUILT_INS = ("transformer", "mamba", "lstm", "mlp", "mlp-pointwise")


@pytest.mark.parametrize("arch", BUILT_INS)
def test_the_model_is_counted_exactly_and_draws_no_random_number(arch):
    """The count of the meta-device build (extrapolated per layer past budget.EXACT_LAYERS) is the real model's, and
    estimating leaves the global RNG as it was."""
    spec = tasks.make("bijection", V=6, L=5).spec
    factory = models.resolve(arch)
    size = factory.Size.of({"max_len": spec.seq_len, "n_layers": budget.EXACT_LAYERS + 3, "d_model": 24})
    real = factory(spec, size)
    state = torch.get_rng_state()
    counted = budget.model_size(factory, spec, size)
    assert torch.equal(torch.get_rng_state(), state)
    others = [*(p for p in real.parameters() if not p.requires_grad), *real.buffers()]
    trained = sum(p.numel() for p in real.parameters() if p.requires_grad)
    assert counted == (trained, sum(t.numel() * t.element_size() for t in others))


@pytest.mark.parametrize("arch", BUILT_INS)
def test_the_activations_counted_are_at_most_what_a_step_saves(arch):
    """The estimate is a lower bound: a real forward pass of each built-in saves at least the activations counted
    (`budget.ACTIVATION_FLOATS` per sequence, position, d_model unit and layer), so no run that fits is refused."""
    train = {**SWEEP_BASE["train"], "batch_size": 16, "eval_every": 0}  # the training step is the peak
    cfg = resolve_config({**SWEEP_BASE, "model": {"arch": arch, "preset": "smoke"}, "train": train, "eval": {"n": 8}})
    (part,) = [p for p in budget.estimate(cfg).parts if p.what.startswith("activations")]
    factory, size = budget.typed_size(cfg)
    spec = tasks.make(cfg.task.name, **cfg.task.params).spec
    model = factory(spec, size)
    saved: dict[tuple[int, int], int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[(t.untyped_storage().data_ptr(), t.numel())] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(torch.zeros((16, spec.seq_len), dtype=torch.long))
    assert 0 < part.bytes <= sum(saved.values())
