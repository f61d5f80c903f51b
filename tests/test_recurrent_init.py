"""Init options that get models off their early loss plateau: the LSTM's forget-gate bias and chrono init
(`model.size.forget_bias`, `model.size.chrono`), its input norms and residual stream (`model.size.norm_inputs`,
`model.size.residual`), and zeroed residual output projections (`model.size.zero_init_out`,
transformer and Mamba). Each option changes only the weights it names; left out, every model is as before."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from cli_args import SMOKE
from windtunnel import models, tasks
from windtunnel.cli import app
from windtunnel.models import presets

T_MAX = 37  # the bijection task's sequence length


def build(arch: str, seed: int = 0, task: str = "bijection", **fields) -> nn.Module:
    torch.manual_seed(seed)
    return models.make(arch, tasks.make(task).spec, presets.preset(task, arch, "smoke"), **fields)


def gate_biases(model: nn.Module) -> list[tuple[torch.Tensor, ...]]:
    """Each layer's (bias_ih, bias_hh), split into PyTorch's gates: 8 tensors (i, f, g, o of ih, then of hh)."""
    return [(*lstm.bias_ih_l0.detach().chunk(4), *lstm.bias_hh_l0.detach().chunk(4)) for lstm in model.layers]


def differing(a: nn.Module, b: nn.Module) -> set[str]:
    """Names of the state_dict entries where two models of the same architecture differ."""
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    return {k for k in sa if not torch.equal(sa[k], sb[k])}


BIASES = {f"layers.{l}.bias_{x}_l0" for l in range(2) for x in ("ih", "hh")}


@pytest.mark.parametrize("init", ["normal", "torch"])
def test_forget_bias_sets_the_forget_slice_of_every_layer(init):
    """bias_ih's forget slice holds the value, bias_hh's is zero (the cell adds them); nothing else moves."""
    base, model = build("lstm", init=init), build("lstm", init=init, forget_bias=1.5)
    assert len(model.layers) == 2 and differing(base, model) == BIASES
    for (i, f, g, o, hi, hf, hg, ho), old in zip(gate_biases(model), gate_biases(base), strict=True):
        assert torch.all(f == 1.5) and torch.all(hf == 0)
        for got, want in zip((i, g, o, hi, hg, ho), old[:1] + old[2:5] + old[6:], strict=True):
            assert torch.equal(got, want)
    assert torch.equal(torch.rand(3), (build("lstm", init=init), torch.rand(3))[1])  # draws nothing extra


def test_chrono_init_spreads_forget_times_up_to_t_max():
    """b_f = log U[1, T_max - 1] per unit and layer, b_i = -b_f, their hh slices zero; g and o keep PyTorch's; the
    draw is a function of the seed, and every other weight is what the same seed draws without it."""
    base, model = build("lstm"), build("lstm", chrono=T_MAX)
    assert differing(base, model) == BIASES
    fs = []
    for (i, f, g, o, hi, hf, hg, ho), old in zip(gate_biases(model), gate_biases(base), strict=True):
        assert float(f.min()) >= 0.0 and float(f.max()) <= math.log(T_MAX - 1)
        assert float(f.max() - f.min()) > math.log(T_MAX - 1) / 2  # spread over the range, not one value
        assert torch.equal(i, -f) and not hi.any() and not hf.any()
        assert all(torch.equal(a, b) for a, b in zip((g, o, hg, ho), old[2:4] + old[6:], strict=True))
        fs.append(f)
    assert not torch.equal(fs[0], fs[1])  # each layer draws its own
    assert not differing(model, build("lstm", chrono=T_MAX)) and differing(model, build("lstm", seed=1, chrono=T_MAX))
    assert all(torch.all(b[1] == 0) for b in gate_biases(build("lstm", chrono=2)))  # U[1, 1]: log 1


@pytest.mark.parametrize(
    ("arch", "fields"),
    [("lstm", {"forget_bias": None, "chrono": None, "norm_inputs": False, "residual": False}),
     ("transformer", {"zero_init_out": False}),
     ("mamba", {"zero_init_out": False}), ("mamba", {"variant": "paper", "zero_init_out": False})],
)  # fmt: skip
def test_defaults_leave_models_and_configs_as_before(arch, fields):
    """The options at their defaults build the model the same seed built before they existed, and a size that does
    not give them stores none of them (config.json and its hash as before)."""
    extra = {k: v for k, v in fields.items() if k == "variant"}
    assert not differing(build(arch, **extra), build(arch, **fields))
    Size = models.size_class(arch)
    assert not set(fields) - {"variant"} & set(Size.of(extra).as_config(resolved=True))


@pytest.mark.parametrize(
    ("arch", "fields"),
    [("transformer", {}), ("transformer", {"init": "torch"}), ("mamba", {}), ("mamba", {"variant": "paper"})],
)
def test_zero_init_out_makes_every_block_the_identity(arch, fields):
    """With the projections into the residual stream zeroed, each block's output stream is its input stream; only
    those projections differ from the default build, so training still starts from the same other weights."""
    model = build(arch, **fields, zero_init_out=True)
    zeroed = {k for k in model.state_dict() if ".out_proj." in k and not k.startswith("head")}
    assert all(not model.state_dict()[k].any() for k in zeroed)
    weights = {k for k in zeroed if k.endswith(".weight")}  # biases are zero under init="normal" anyway
    assert len(weights) == model.n_layers * (2 if arch == "transformer" else 1)
    assert weights <= differing(build(arch, **fields), model) <= zeroed
    inputs = tasks.make("bijection").sample(4, seed=0).inputs
    names = [f"blocks.{l}.{p}" for l in range(model.n_layers) for p in ("resid_pre", "resid_post")]
    with torch.no_grad():
        _, cache = model.run_with_cache(inputs, names=names)
    for l in range(model.n_layers):
        assert torch.equal(cache[f"blocks.{l}.resid_pre"], cache[f"blocks.{l}.resid_post"]), l


def test_lstm_norm_inputs_and_residual_compute_what_they_say():
    """norm_inputs: each layer's nn.LSTM reads LayerNorm(x); residual: the layer's output is x + h. Every weight the
    default build has is drawn as in it (the input norms add parameters, at LayerNorm's own init: ones and zeros)."""
    base = build("lstm")
    model = build("lstm", norm_inputs=True, residual=True)
    sb, sm = base.state_dict(), model.state_dict()
    assert {k for k in sm if k not in sb} == {f"input_norms.{l}.{p}" for l in range(2) for p in ("weight", "bias")}
    assert all(torch.equal(sb[k], sm[k]) for k in sb)
    with torch.no_grad():
        for norm in model.input_norms:  # away from LayerNorm's init, so the test sees the norm's own weights
            norm.weight.normal_(1.0, 0.3)
            norm.bias.normal_(0.0, 0.3)
    inputs = tasks.make("bijection").sample(4, seed=0).inputs
    names = [f"blocks.{l}.{p}" for l in range(2) for p in ("resid_pre", "resid_post", "lstm.h")]
    with torch.no_grad():
        _, cache = model.run_with_cache(inputs, names=names)
        for l in range(2):
            x = cache[f"blocks.{l}.resid_pre"]
            h, _ = model.layers[l](model.input_norms[l](x))
            torch.testing.assert_close(cache[f"blocks.{l}.lstm.h"], h)
            torch.testing.assert_close(cache[f"blocks.{l}.resid_post"], x + h)
    only_res = build("lstm", residual=True)
    with torch.no_grad():
        _, cache = only_res.run_with_cache(inputs, names=names)
        x = cache["blocks.1.resid_pre"]
        torch.testing.assert_close(cache["blocks.1.resid_post"], x + only_res.layers[1](x)[0])


@pytest.mark.parametrize(
    ("arch", "size", "match"),
    [
        ("lstm", {"forget_bias": math.inf}, r"model\.size\.forget_bias: Input should be a finite number"),
        ("lstm", {"forget_bias": math.nan}, r"model\.size\.forget_bias: Input should be a finite number"),
        ("lstm", {"chrono": 1}, r"model\.size\.chrono: Input should be greater than or equal to 2"),
        ("lstm", {"chrono": 8.0}, r"model\.size\.chrono: Input should be a valid integer"),
        ("lstm", {"forget_bias": 1.0, "chrono": 8}, r"model\.size\.chrono: .*give forget_bias or chrono, not both"),
        ("lstm", {"zero_init_out": True}, r"model\.size\.zero_init_out: Extra inputs are not permitted"),
        ("lstm", {"residual": "yes"}, r"model\.size\.residual: Input should be a valid boolean"),
        ("lstm", {"norm_inputs": 1}, r"model\.size\.norm_inputs: Input should be a valid boolean"),
        ("transformer", {"zero_init_out": "maybe"}, r"model\.size\.zero_init_out: Input should be a valid boolean"),
    ],
)
def test_bad_values_are_errors_naming_the_field(arch, size, match):
    with pytest.raises(ValueError, match=match):
        models.size_class(arch).of(size, where="model.size.")


def test_forget_bias_from_the_command_line(tmp_path):
    """`--set model.size.forget_bias=1.0` reaches the model and the run's stored config."""
    out = tmp_path / "run"
    args = ["train", "--task", "bijection", "--arch", "lstm", "--out", str(out), *SMOKE]
    r = CliRunner().invoke(app, [*args, "--set", "model.size.forget_bias=1.0"])
    assert r.exit_code == 0, r.output
    assert json.loads((out / "config.json").read_text())["model"]["size"]["forget_bias"] == 1.0
