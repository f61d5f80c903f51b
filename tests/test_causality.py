"""The leak alarm: `models.check_causal` passes every built-in architecture and refuses, in one line naming
the first position that sees the future, a plugin that reads later inputs -- a bidirectional mixer, a model that
reads x[:, t+1], one that leaks only at its last position or at one middle position, on token and real-vector
tasks -- before `windtunnel train` creates anything, and a model whose leak appears only in its trained weights
before `windtunnel eval` scores it. A future-dependent shift of all logits (same distribution) is not a leak."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch
from typer.testing import CliRunner

from windtunnel import models, tasks
from windtunnel.cli import app
from windtunnel.evaluation.evaluate import evaluate
from windtunnel.models import CausalityError, check_causal, presets
from windtunnel.models.causality import find_leak
from windtunnel.runs import load_run
from windtunnel.runs.checkpoints import latest_step, save_checkpoint

runner = CliRunner()

MODULE = "wt_leaky_plugin"
# A plugin module: one residual skeleton whose layer adds a causal running mean and, per class, some future.
SOURCE = '''
import torch
from pydantic import Field
from torch import nn

from windtunnel import models
from windtunnel.models import ModelSize, ResidualModel


class Causal(ResidualModel):
    """embed -> n_layers x (h + W running_mean(h) + W' future(h)) -> LayerNorm -> head; future() reads nothing."""

    class Size(ModelSize):  # no init field: the weights keep PyTorch's defaults
        n_layers: int = Field(default=1, ge=1)
        d_model: int = Field(default=16, ge=1)

    def embedding_positions(self):
        return "learned"

    def build_layers(self):
        d, self.n_layers = self.size.d_model, self.size.n_layers
        self.past = nn.ModuleList(nn.Linear(d, d) for _ in range(self.n_layers))
        self.ahead = nn.ModuleList(nn.Linear(d, d) for _ in range(self.n_layers))
        self.norm = nn.LayerNorm(d)

    def future(self, h):  # (B,T,d) -> (B,T,d) what position t reads of positions > t
        return torch.zeros_like(h)

    def layer(self, l, h):
        seen = torch.arange(1, h.shape[1] + 1, device=h.device, dtype=h.dtype)[:, None]  # (T,1)
        return h + torch.tanh(self.past[l](h.cumsum(1) / seen) + self.ahead[l](self.future(h)))  # (B,T,d)


class Mixer(Causal):
    """Bidirectional: every position reads the mean of the whole sequence (a mixer without its causal mask)."""

    def future(self, h):
        return h.mean(1, keepdim=True).expand_as(h)


class Next(Causal):
    """Reads x[:, t+1]: the stream one position ahead (zero at the last)."""

    def future(self, h):
        return torch.cat([h[:, 1:], torch.zeros_like(h[:, :1])], 1)


class Last(Causal):
    """Leaks only at its last prediction: position T-2 reads position T-1."""

    def future(self, h):
        out = torch.zeros_like(h)
        out[:, -2] = h[:, -1]
        return out


class Middle(Causal):
    """Leaks at one middle position only: position 3 reads position 5."""

    def future(self, h):
        out = torch.zeros_like(h)
        out[:, 3] = h[:, 5]
        return out


class Gated(Next):
    """Reads x[:, t+1] through a gate that starts at 0: causal at init, leaky once the gate is trained open."""

    def __init__(self, spec, size=None, **fields):
        super().__init__(spec, size, **fields)
        self.gate = nn.Parameter(torch.zeros(()))

    def future(self, h):
        return self.gate * super().future(h)


class Shift(Causal):
    """Adds a future-dependent constant to all K logits: the same distribution, so no leak."""

    def forward(self, inputs):
        out = super().forward(inputs)  # (B,T,K)
        later = inputs.flip(1).cumsum(1).flip(1).to(out.dtype)  # (B,T) sum of the tokens from t on
        return out + later[..., None]


for name, arch in [("causal", Causal), ("mixer", Mixer), ("next", Next), ("last", Last), ("middle", Middle),
                   ("gated", Gated), ("shift", Shift)]:
    models.register(f"leaky-{name}", arch, overwrite=True)
'''
NAMES = ["causal", "mixer", "next", "last", "middle", "gated", "shift"]
TINY = ["--preset", "smoke", "--no-progress", "--steps", "2"] + [
    a for kv in ("task.V=5", "task.L=4", "train.batch_size=4", "eval.n=8", "train.device=cpu") for a in ("--set", kv)
]


@pytest.fixture
def leaky(tmp_path, monkeypatch):
    """The plugin module written to tmp_path (the current directory), imported; forgotten again after."""
    (tmp_path / f"{MODULE}.py").write_text(SOURCE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(MODULE, None)
    yield importlib.import_module(MODULE)
    sys.modules.pop(MODULE, None)
    for name in NAMES:
        models.registry.unregister(f"leaky-{name}")


def _build(arch: str, task: str, **params) -> tuple[torch.nn.Module, tasks.TaskSpec]:
    torch.manual_seed(0)
    spec = tasks.make(task, **params).spec
    return models.make(arch, spec), spec


def _one_line(r, *fragments: str) -> str:
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.output, r.output
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


# --- every built-in architecture is causal ------------------------------------------------------------------

VARIANTS = [(a, {}) for a in models.built_ins(baseline=False)] + [
    ("mamba", {"variant": "paper"}),
    ("transformer", {"pos": "rotary"}),
    ("transformer", {"attention": "fused"}),
    ("transformer", {"attn_sink": True}),
]


@pytest.mark.parametrize("task", ["bijection", "hmm", "recall", "regression"])
@pytest.mark.parametrize(
    "arch,extra", VARIANTS, ids=lambda v: "-".join(map(str, v.values())) if isinstance(v, dict) else v
)
def test_every_built_in_architecture_passes(arch, extra, task):
    torch.manual_seed(0)
    spec = tasks.make(task).spec
    for init in ("normal", "torch"):
        model = models.make(arch, spec, presets.preset(task, arch, "smoke"), init=init, **extra)
        model.train()
        state = torch.random.get_rng_state()
        assert find_leak(model, spec) is None
        assert check_causal(model, spec) is model
        assert model.training and torch.equal(torch.random.get_rng_state(), state)  # mode and global RNG as found


def test_baselines_and_float64_models_pass():
    spec = tasks.make("regression").spec
    for arch in models.built_ins(baseline=True):
        check_causal(models.make(arch, spec), spec)  # no forward pass: causal by construction
    assert find_leak(models.make("lstm", spec, presets.preset("regression", "lstm", "smoke")).double(), spec) is None


# --- leaky plugins are caught, at the first position that sees the future ------------------------------------


@pytest.mark.parametrize("task", ["bijection", "regression"])  # (B,T) tokens -> logits; (B,T,D) reals -> Gaussian
@pytest.mark.parametrize(
    "name,position,cut", [("mixer", 0, None), ("next", 0, 1), ("last", -2, -1), ("middle", 3, 5), ("causal", None, 0)]
)
def test_a_leak_is_found_where_it_is(leaky, task, name, position, cut):
    model, spec = _build(f"leaky-{name}", task)
    T = spec.seq_len
    leak = find_leak(model, spec)
    if position is None:
        assert leak is None
        return
    assert leak is not None and leak.position == position % T and leak.positions == T and leak.cuts == T - 1
    assert leak.change > 1e-3
    if cut is not None:
        assert leak.cut == cut % T  # the latest cut that moves it: the farthest input it reads
    cls = type(model).__name__
    with pytest.raises(CausalityError, match=rf"^model '{cls}' is not causal: ") as err:
        check_causal(model, spec)
    assert f"position {leak.position} " in str(err.value)


def test_a_future_shift_of_every_logit_is_not_a_leak(leaky):
    model, spec = _build("leaky-shift", "bijection")
    with torch.no_grad():
        x = torch.randint(0, spec.vocab_size, (1, spec.seq_len))
        y = x.clone()
        y[:, 5:] = (y[:, 5:] + 1) % spec.vocab_size
        assert not torch.allclose(model(x)[:, :5], model(y)[:, :5])  # the raw logits move ...
    assert find_leak(model, spec) is None  # ... the distribution does not


def test_long_sequences_try_spaced_cuts_with_both_ends(leaky):
    model, spec = _build("leaky-last", "recall")  # T = 329: more cuts than fit in MAX_TOKENS
    leak = find_leak(model, spec)
    assert leak is not None and leak.position == spec.seq_len - 2 and leak.cuts < spec.seq_len - 1
    assert find_leak(models.make("leaky-next", spec), spec, max_tokens=64).position == 0  # 2 cuts still catch it
    with pytest.raises(CausalityError, match=r"329 positions, \d+ cuts\)"):
        check_causal(model, spec)


def test_a_wrong_output_shape_is_one_line(leaky):
    model, spec = _build("leaky-causal", "bijection")
    with pytest.raises(ValueError, match=r"^model: forward must return \(B,T,20\) outputs \(got \(37, 20\)\)$"):
        check_causal(_summed(model), spec)


def _summed(model: torch.nn.Module) -> torch.nn.Module:
    """`model` with its position axis summed out: (B,K) outputs."""

    class Summed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x).sum(1)

    return Summed()


# --- the CLI refuses before anything is created -------------------------------------------------------------


@pytest.mark.parametrize("name,position", [("mixer", 0), ("next", 0), ("last", -2)])
def test_train_refuses_a_leaky_plugin_in_one_line_and_creates_nothing(leaky, tmp_path, name, position):
    position %= tasks.make("bijection", V=5, L=4).spec.seq_len  # the --set task.V=5, task.L=4 of TINY
    out = tmp_path / "run"
    args = ["train", "--import", MODULE, "--task", "bijection", "--arch", f"leaky-{name}", "--out", str(out), *TINY]
    _one_line(
        runner.invoke(app, args),
        f"model.arch: 'leaky-{name}' is not causal: its output at position {position} changes",
    )
    assert not out.exists()


def test_a_leak_in_the_trained_weights_is_refused_before_it_is_scored(leaky, tmp_path):
    out = tmp_path / "run"
    args = ["train", "--import", MODULE, "--task", "bijection", "--arch", "leaky-gated", "--out", str(out), *TINY]
    assert runner.invoke(app, args).exit_code == 0  # the gate starts shut: causal at init
    run = load_run(out)
    step = latest_step(out)
    model = run.load_checkpoint(step)
    with torch.no_grad():
        model.gate.fill_(1.0)  # trained open
    save_checkpoint(out, step, model)
    line = _one_line(runner.invoke(app, ["eval", str(out), "--n", "8"]), f"model.arch 'leaky-gated' at step {step}")
    # two layers (the smoke size), each reading one position ahead: position 0 reads up to position 2
    assert "output at position 0 " in line and "inputs from position 2 on" in line  # the leak: where, from where
    with pytest.raises(CausalityError):  # a model handed to evaluate is checked too (train's final evaluation)
        evaluate(run.config, model=model, n=8, write=False)
