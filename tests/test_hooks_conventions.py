"""Interpretability habits from TransformerLens and nnsight: `names_filter` forms, a cache without autograd unless
asked, `ActivationCache.stack` / `decompose_resid`, hook functions taking a hook object, and nnsight wrapping."""

from __future__ import annotations

import pytest
import torch

from hook_models import ARCHS, build, inputs
from windtunnel.models.activation_cache import ActivationCache
from windtunnel.models.hooks import HookPoint

ADDITIVE = [arch for arch in ARCHS if arch != "lstm"]  # the LSTM's layers replace the stream


def test_names_filter_takes_a_list_a_tuple_one_name_or_a_function():
    model = build("transformer")
    x = inputs(model)
    asked = ["blocks.1.attn.pattern", "final"]
    _, by_list = model.run_with_cache(x, names_filter=asked)
    _, by_tuple = model.run_with_cache(x, names_filter=tuple(asked))
    _, by_fn = model.run_with_cache(x, names_filter=lambda name: name in asked)
    _, by_names_fn = model.run_with_cache(x, names=lambda name: name in asked)  # the older spelling takes it too
    _, by_positional = model.run_with_cache(x, asked)
    for cache in (by_tuple, by_fn, by_names_fn, by_positional):
        assert list(cache) == asked  # forward order
        for name in asked:
            torch.testing.assert_close(cache[name], by_list[name])
    _, one = model.run_with_cache(x, names_filter="final")
    _, one_old = model.run_with_cache(x, names="final")  # one name, not its characters
    assert list(one) == list(one_old) == ["final"]
    _, none = model.run_with_cache(x, names_filter=lambda name: False)
    assert dict(none) == {}


def test_names_filter_mistakes_are_clear_errors():
    model = build("transformer")
    x = inputs(model)
    with pytest.raises(ValueError, match="names_filter or names .* not both"):
        model.run_with_cache(x, names=["final"], names_filter=["final"])
    with pytest.raises(ValueError, match=r"names_filter: expected .*\(got int\)"):
        model.run_with_cache(x, names_filter=3)
    with pytest.raises(ValueError, match=r"hook 'blocks\.0\.attention': no such point"):
        model.run_with_cache(x, names_filter="blocks.0.attention")


def test_run_with_cache_keeps_no_graph_unless_asked():
    model = build("transformer").train()
    x = inputs(model)
    out, cache = model.run_with_cache(x, names_filter=["blocks.0.resid_post", "final"])
    assert not out.requires_grad and all(a.grad_fn is None and not a.requires_grad for a in cache.values())
    out, cache = model.run_with_cache(x, names_filter=["blocks.0.resid_post", "final"], grad=True)
    assert out.grad_fn is not None and all(a.grad_fn is not None for a in cache.values())
    (grad,) = torch.autograd.grad(out.sum(), cache["blocks.0.resid_post"])  # (B,T,d): d out / d activation
    assert grad.shape == cache["blocks.0.resid_post"].shape and grad.abs().sum() > 0


def test_the_cache_is_a_dict_with_a_short_repr():
    model = build("transformer")
    _, cache = model.run_with_cache(inputs(model, B=3, T=8), names_filter="final")
    assert isinstance(cache, ActivationCache) and isinstance(cache, dict)
    assert cache == {"final": cache["final"]} and list(dict(cache)) == ["final"]
    assert repr(cache) == f"ActivationCache(Transformer, {{final: (3, 8, {model.d_model})}})"


@pytest.mark.parametrize("arch", ARCHS)
def test_stack_puts_one_point_of_every_layer_on_a_layer_dim(arch):
    model = build(arch)
    x = inputs(model, B=3, T=8)
    _, cache = model.run_with_cache(x)
    stacked = cache.stack("resid_post")  # (L,B,T,d)
    assert stacked.shape == (model.n_layers, 3, 8, model.d_model)
    for l in range(model.n_layers):
        torch.testing.assert_close(stacked[l], cache[f"blocks.{l}.resid_post"])
    if arch == "transformer":
        assert cache.stack("attn.pattern").shape == (model.n_layers, 3, model.n_heads, 8, 8)


def test_stack_errors_name_the_point_and_what_is_missing():
    model = build("transformer")
    x = inputs(model)
    _, cache = model.run_with_cache(x, names_filter=["final", "blocks.0.resid_post"])
    with pytest.raises(ValueError, match=r"stack\('final'\): not a per-layer point .* resid_pre, attn\.q"):
        cache.stack("final")
    with pytest.raises(ValueError, match=r"stack\('resid_post'\): blocks\.1\.resid_post not in the cache"):
        cache.stack("resid_post")


@pytest.mark.parametrize("arch", ADDITIVE)
@pytest.mark.parametrize("task", ["bijection", "regression"])
def test_decompose_resid_parts_sum_to_the_residual_stream(arch, task):
    model = build(arch, task)
    _, cache = model.run_with_cache(inputs(model))
    L = model.n_layers
    parts, labels = cache.decompose_resid()  # (n_parts,B,T,d)
    assert labels == ["embed", *(f"blocks.{l}.{p}" for l in range(L) for p in model.resid_parts)]
    assert parts.shape == (len(labels), *cache["embed"].shape)
    torch.testing.assert_close(parts.sum(0), cache[f"blocks.{L - 1}.resid_post"], atol=1e-5, rtol=1e-5)
    for layer in range(L):  # the stream entering each layer
        parts, labels = cache.decompose_resid(layer)
        assert len(labels) == 1 + layer * len(model.resid_parts)
        torch.testing.assert_close(parts.sum(0), cache[f"blocks.{layer}.resid_pre"], atol=1e-5, rtol=1e-5)


def test_decompose_resid_says_what_it_cannot_do():
    lstm = build("lstm")
    _, cache = lstm.run_with_cache(inputs(lstm))
    with pytest.raises(ValueError, match="^decompose_resid: LSTM") as err:
        cache.decompose_resid()
    assert "residual stream" in str(err.value)
    model = build("transformer")
    _, cache = model.run_with_cache(inputs(model), names_filter=lambda name: name.endswith("attn.out"))
    with pytest.raises(ValueError, match=r"decompose_resid: embed, blocks\.0\.mlp\.out.* not in the cache"):
        cache.decompose_resid()
    with pytest.raises(ValueError, match=r"layer: must be an integer in \[0, 2\]"):
        cache.decompose_resid(layer=5)


def test_hook_functions_take_a_name_or_a_hook_object():
    """A hook gets a `HookPoint`: a str equal to the name (the current form) that has `.name` and `.layer()`
    (TransformerLens' form), so both signatures work side by side."""
    model = build("transformer")
    x = inputs(model)
    seen: list[tuple[str, int]] = []

    def by_name(a: torch.Tensor, name: str) -> torch.Tensor:
        assert name == "blocks.1.mlp.out" and name.startswith("blocks.1.")
        return torch.zeros_like(a)

    def by_hook(a: torch.Tensor, hook: HookPoint) -> None:
        seen.append((hook.name, hook.layer()))
        assert type(hook.name) is str

    with torch.no_grad():
        ablated = model.run_with_hooks(x, {"blocks.1.mlp.out": lambda a, name: torch.zeros_like(a)})
        with model.hooks({"blocks.1.mlp.out": by_name}), model.hooks({"blocks.0.attn.z": by_hook}):
            out = model(x)
    torch.testing.assert_close(out, ablated)
    assert seen == [("blocks.0.attn.z", 0)]
    assert HookPoint("final") == "final" and {HookPoint("final"): 1}["final"] == 1
    with pytest.raises(ValueError, match="'final': not a per-layer point"):
        HookPoint("final").layer()


def test_nnsight_traces_and_patches_a_windtunnel_model():
    """nnsight (the `nnsight` extra) wraps any nn.Module: what it reads and patches agrees with the hook points."""
    nnsight = pytest.importorskip("nnsight")
    model = build("transformer")
    x = inputs(model)
    with torch.no_grad():
        out, cache = model.run_with_cache(x, names_filter="blocks.0.mlp.out")
        ablated = model.run_with_hooks(x, {"blocks.0.mlp.out": lambda a, hook: torch.zeros_like(a)})
        wrapped = nnsight.NNsight(model)
        with wrapped.trace(x):
            mlp0 = wrapped.blocks[0].mlp.output.save()  # (B,T,d)
            traced = wrapped.output.save()
        with wrapped.trace(x):
            wrapped.blocks[0].mlp.output = torch.zeros_like(wrapped.blocks[0].mlp.output)
            patched = wrapped.output.save()
    torch.testing.assert_close(mlp0, cache["blocks.0.mlp.out"])
    torch.testing.assert_close(traced, out)
    torch.testing.assert_close(patched, ablated)
    assert not torch.allclose(patched, out)
