"""A user's own code at fault: a plugin model that exits, raises (an Exception or another BaseException) or returns
outputs of the wrong shape part-way through training or evaluation, and a plugin module that raises a BaseException
as it is imported. Each is one line naming the user's code (its module and class) and what it did, exit 2, never a
traceback, never "internal error" nor "a bug in windtunnel"; a run stopped by its model keeps the checkpoints
written before and says how to resume."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from cli_args import TINY
from windtunnel import models, plugins, tasks
from windtunnel.cli import app
from windtunnel.runs import checkpoints

runner = CliRunner()

MODULE, ARCH = "wt_faulty_model", "wt_faulty"

# A linear model of the inputs' embedding whose forward misbehaves as FAULT says: at training forward `at` (counted
# from 1; the causality check before training runs in eval mode and is not counted), or with `at` 0 at every forward
# in eval mode (evaluation, the causality check of a stored run).
FAULTY_MODEL = '''
import sys

from pydantic import Field

from windtunnel import models
from windtunnel.models import ModelSize, SequenceModel
from windtunnel.models.common import InputEmbedding, OutputHead

FAULT = {"kind": "none", "at": 3}


class Halt(BaseException):
    """Not an Exception: what a user's own control flow may raise."""


class Faulty(SequenceModel):
    class Size(ModelSize):
        d_model: int = Field(default=8, ge=1)

    def __init__(self, spec, size=None, **fields):
        super().__init__()
        self.spec, self.size = spec, self.Size.of(size, fields)
        self.embed = InputEmbedding(spec, self.size.d_model, self.size.max_len or spec.seq_len, pos="none")
        self.head = OutputHead(spec, self.size.d_model)
        self.steps = 0

    def forward(self, inputs):
        if self.training:
            self.steps += 1
        due = self.steps == FAULT["at"] if self.training else FAULT["at"] == 0
        kind = FAULT["kind"] if due else "none"
        if kind == "exit":
            sys.exit(0)
        if kind == "raise":
            raise RuntimeError("my model's own failure")
        if kind == "value":
            raise ValueError("my model's own value error")
        if kind == "halt":
            raise Halt("my model halts")
        out = self.head(self.embed(inputs))  # (B,T,K)
        return out[:, :-1] if kind == "short" else out

    def state_size(self, T):
        return 0


models.register("wt_faulty", Faulty)
'''


@pytest.fixture
def faulty(tmp_path, monkeypatch):
    """The module `wt_faulty_model` (architecture `wt_faulty`) in the current directory, imported; its FAULT dict
    sets what its forward does. Unregistered and forgotten after."""
    (tmp_path / f"{MODULE}.py").write_text(FAULTY_MODEL)
    monkeypatch.chdir(tmp_path)
    plugins.import_plugins([MODULE])
    yield sys.modules[MODULE].FAULT
    models.registry.unregister(ARCH)
    sys.modules.pop(MODULE, None)


def train_args(out, *extra: str) -> list[str]:
    """Five smoke steps of `wt_faulty` on the bijection, a checkpoint every second step."""
    return ["train", "--import", MODULE, "--task", "bijection", "--arch", ARCH, "--out", str(out), *TINY] + [
        "--steps", "5", "--set", "train.checkpoint_every=2", "--set", "model.size.d_model=8", *extra
    ]  # fmt: skip


def error_line(r, code: int = 2) -> str:
    """The one `error:` line of a command refused or stopped (after what train said it trains), no traceback."""
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output and "internal error" not in r.output, r.output
    assert "bug in windtunnel" not in r.output, r.output
    (line,) = [ln for ln in r.output.splitlines() if ln.startswith("error: ")]
    return line


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("raise", "raised RuntimeError: my model's own failure"),
        ("value", "raised ValueError: my model's own value error"),
        ("halt", "raised Halt at training step 3: my model halts"),
    ],
)
def test_a_plugin_model_that_raises_at_step_3_is_named_with_its_own_message(faulty, tmp_path, kind, said):
    faulty.update(kind=kind)
    out = tmp_path / "run"
    line = error_line(runner.invoke(app, train_args(out)))
    assert f"{MODULE}.Faulty.forward" in line and f"{MODULE}.py, line " in line and said in line, line
    assert f"architecture {ARCH!r}" in line and "your own code" in line, line
    assert checkpoints.latest_step(out) == 2  # what was trained before it is kept
    assert not (out / "eval.json").exists()


def test_a_plugin_model_that_exits_at_step_3_stops_the_run_unfinished_naming_it(faulty, tmp_path):
    """sys.exit(0) inside forward ended the command with exit 0, no evaluation and nothing said."""
    faulty.update(kind="exit")
    out = tmp_path / "run"
    line = error_line(runner.invoke(app, train_args(out)))
    assert f"architecture {ARCH!r} " in line and f"{MODULE}.Faulty.forward" in line, line  # what, and where
    assert f"{MODULE}.py, line " in line, line
    assert "called sys.exit(0) at training step 3" in line, line
    assert "the checkpoint of step 2 is kept" in line, line
    assert f"windtunnel train --resume {out} --import {MODULE}" in line, line
    assert checkpoints.latest_step(out) == 2 and not (out / "eval.json").exists()
    r = runner.invoke(app, ["eval", str(out), "--import", MODULE])  # the run is unfinished, and says so
    assert r.exit_code == 0, r.output
    record = json.loads((out / "eval.json").read_text())["default"]["run"]
    assert record["status"] == "unfinished" and record["steps_trained"] == 2


def test_a_plugin_model_that_exits_or_raises_while_a_run_is_evaluated_is_named(faulty, tmp_path):
    out = tmp_path / "run"
    assert runner.invoke(app, train_args(out)).exit_code == 0
    faulty.update(kind="exit", at=0)  # every forward in eval mode: the stored run's causality check first
    line = error_line(runner.invoke(app, ["eval", str(out), "--import", MODULE]))
    assert f"architecture {ARCH!r} ({MODULE}.Faulty.forward" in line and "called sys.exit(0)" in line, line
    faulty.update(kind="raise")
    line = error_line(runner.invoke(app, ["eval", str(out), "--import", MODULE]))
    assert "RuntimeError: my model's own failure" in line, line


def test_a_plugin_model_returning_one_position_too_few_at_step_3_is_named_with_both_shapes(faulty, tmp_path):
    faulty.update(kind="short")
    out = tmp_path / "run"
    spec = tasks.make("bijection", V=5, L=4).spec
    T, K = spec.seq_len, spec.n_classes
    line = error_line(runner.invoke(app, train_args(out)))
    assert f"model {MODULE}.Faulty" in line and "training step 3" in line, line
    assert f"outputs of shape (4, {T}, {K})" in line and f"inputs of shape (4, {T})" in line, line
    assert f"returned (4, {T - 1}, {K})" in line, line
    assert checkpoints.latest_step(out) == 2


HALTING_MODULE = """
class Halt(BaseException):
    pass


raise Halt("not today")
"""


def test_a_plugin_module_raising_a_base_exception_on_import_is_one_line_naming_it(tmp_path, monkeypatch):
    (tmp_path / "wt_halting_plugin.py").write_text(HALTING_MODULE)
    monkeypatch.chdir(tmp_path)
    try:
        line = error_line(runner.invoke(app, ["tasks", "--import", "wt_halting_plugin"]))
        assert "--import wt_halting_plugin: " in line and "Halt: not today" in line, line
    finally:
        sys.modules.pop("wt_halting_plugin", None)


FAULTY_TASK = '''
import sys

import torch
from torch.distributions import Categorical

from windtunnel import tasks
from windtunnel.tasks import Batch, Task, TaskParams, TaskSpec

FAULT = {"kind": "none", "at": 3}


class CoinParams(TaskParams):
    n: int = 6


class Coin(Task[CoinParams]):
    """Fair coin flips whose sampling misbehaves as FAULT says at the `at`-th batch it samples."""

    name, Params = "wt_faulty_coin", CoinParams

    def __init__(self, **params):
        super().__init__(**params)
        self.batches = 0

    @property
    def spec(self):
        return TaskSpec("wt_faulty_coin", "tokens", "classes", seq_len=self.params.n, vocab_size=3, n_classes=2)

    def _sample(self, batch_size, g, device):
        self.batches += 1
        if self.batches == FAULT["at"] and FAULT["kind"] == "exit":
            sys.exit(5)
        if self.batches == FAULT["at"] and FAULT["kind"] == "raise":
            raise KeyError("no such flip")
        n = self.params.n
        flips = (torch.rand(batch_size, n, generator=g, device=device) < 0.5).long()
        inputs = torch.cat([torch.full_like(flips[:, :1], 2), flips[:, :-1]], dim=1)
        mask = torch.ones(batch_size, n, dtype=torch.bool, device=device)
        probs = torch.full((batch_size, n, 2), 0.5, device=device)
        return Batch(inputs, mask, flips, Categorical(probs=probs, validate_args=False))


tasks.register("wt_faulty_coin", Coin)
'''


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("raise", "raised KeyError: 'no such flip' -- an error in your own code"),
        ("exit", "called sys.exit(5) at training"),
    ],
)
def test_a_plugin_task_that_raises_or_exits_while_it_samples_is_named(tmp_path, monkeypatch, kind, said):
    (tmp_path / "wt_faulty_task.py").write_text(FAULTY_TASK)
    monkeypatch.chdir(tmp_path)
    try:
        plugins.import_plugins(["wt_faulty_task"])
        sys.modules["wt_faulty_task"].FAULT.update(kind=kind)
        args = ["train", "--import", "wt_faulty_task", "--task", "wt_faulty_coin", "--arch", "transformer"]
        opts = [a for kv in ("train.batch_size=4", "eval.n=8", "train.device=cpu") for a in ("--set", kv)]
        out = tmp_path / "run"
        r = runner.invoke(app, [*args, "--out", str(out), "--preset", "smoke", "--no-progress", "--steps", "5", *opts])
        line = error_line(r)
        assert "task 'wt_faulty_coin' " in line and "wt_faulty_task.Coin._sample" in line, line  # what, and where
        assert "wt_faulty_task.py, line " in line, line
        assert said in line, line
        assert not (out / "eval.json").exists()
    finally:
        tasks.registry.unregister("wt_faulty_coin")
        sys.modules.pop("wt_faulty_task", None)
