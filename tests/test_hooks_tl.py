"""The TransformerLens calls researchers type first: `run_with_hooks(x, fwd_hooks=[(name, fn)])`,
`cache.accumulated_resid()`, `cache["resid_post", 0]`, and a one-line error where a TL habit does not apply."""

from __future__ import annotations

import copy

import pytest
import torch

from hook_models import ARCHS, build, inputs
from windtunnel.models.activation_cache import TL_SHORT_NAMES


def zero_head(h: int):
    """A hook zeroing head h of attn.z (B,H,T,dh): that head then adds nothing to the residual stream."""

    def fn(z, hook):
        z = z.clone()
        z[:, h] = 0.0
        return z

    return fn


@pytest.mark.parametrize("form", ["pairs", "predicate", "dict", "positional"])
def test_zeroing_a_head_with_run_with_hooks_equals_zeroing_its_output_weights(form):
    model = build("transformer")
    x = inputs(model)
    l, h, dh = 1, 1, model.d_model // model.n_heads
    edited = copy.deepcopy(model)
    with torch.no_grad():
        edited.blocks[l].attn.out_proj.weight[:, h * dh : (h + 1) * dh] = 0.0  # head h's columns of W_O
        manual, base = edited(x), model(x)
        name = f"blocks.{l}.attn.z"
        hooked = {
            "pairs": lambda: model.run_with_hooks(x, fwd_hooks=[(name, zero_head(h))]),
            "predicate": lambda: model.run_with_hooks(x, fwd_hooks=[(lambda n: n == name, zero_head(h))]),
            "dict": lambda: model.run_with_hooks(x, fwd_hooks={name: zero_head(h)}),
            "positional": lambda: model.run_with_hooks(x, [(name, zero_head(h))]),
        }[form]()
    torch.testing.assert_close(hooked, manual, atol=1e-5, rtol=1e-4)
    assert (hooked - base).abs().max() > 1e-3  # the head mattered
    assert model._active is None and torch.equal(model(x), base)  # and its hook is gone


@pytest.mark.parametrize("arch", ["transformer", "mlp"])
def test_hooks_returning_none_on_every_point_leave_the_output_bit_identical(arch):
    model = build(arch)
    x = inputs(model)
    seen = []
    with torch.no_grad():
        base = model(x)
        probed = model.run_with_hooks(x, fwd_hooks=[(lambda name: True, lambda a, hook: seen.append(hook.name))])
    assert torch.equal(probed, base)
    assert seen == list(model.hook_names)  # a predicate reaches every point it accepts, once, in forward order


def test_pairs_on_one_point_run_in_list_order_each_on_the_previous_result():
    model = build("transformer")
    x = inputs(model)
    with torch.no_grad():
        both = model.run_with_hooks(x, fwd_hooks=[("embed", lambda a, hook: a * 2), ("embed", lambda a, hook: a + 1)])
        once = model.run_with_hooks(x, fwd_hooks=[("embed", lambda a, hook: a * 2 + 1)])
    torch.testing.assert_close(both, once)


def test_hooks_are_removed_after_an_exception():
    model = build("transformer")
    x = inputs(model)
    with torch.no_grad():
        base = model(x)

        def boom(a, hook):
            raise RuntimeError("boom")

        hooks = [("embed", lambda a, hook: a * 0), ("blocks.1.attn.z", boom)]
        with pytest.raises(RuntimeError, match="boom"):
            model.run_with_hooks(x, fwd_hooks=hooks)
        assert model._active is None and model._hook_users == 0
        assert torch.equal(model(x), base)
        with pytest.raises(ValueError, match="no such point"):  # a bad name after a good one: none is left on
            model.run_with_hooks(x, fwd_hooks=[("embed", lambda a, hook: a * 0), ("blocks.0.nope", boom)])
        assert model._active is None and torch.equal(model(x), base)


@pytest.mark.parametrize("arch", ARCHS)
def test_accumulated_resid_stacks_resid_pre_of_each_layer_then_the_final_stream(arch):
    model = build(arch)
    _, cache = model.run_with_cache(inputs(model))
    L = model.n_layers
    resid, labels = cache.accumulated_resid(return_labels=True)
    expected = [cache[f"blocks.{l}.resid_pre"] for l in range(L)] + [cache[f"blocks.{L - 1}.resid_post"]]
    assert torch.equal(resid, torch.stack(expected))  # (L+1,B,T,d)
    assert labels == [f"{l}_pre" for l in range(L)] + ["final_post"]
    assert torch.equal(cache.accumulated_resid(-1), resid) and torch.equal(cache.accumulated_resid(L), resid)
    assert torch.equal(cache.accumulated_resid(1), torch.stack(expected[:2]))  # up to layer 1's input
    assert torch.equal(cache.accumulated_resid(-2), torch.stack(expected[:L]))  # every layer's input
    assert torch.equal(cache.accumulated_resid(pos_slice=-1), resid[:, :, -1])  # (L+1,B,d): the last position


def test_accumulated_resid_with_resid_mid_follows_transformerlens_order():
    model = build("transformer")
    _, cache = model.run_with_cache(inputs(model))
    resid, labels = cache.accumulated_resid(1, incl_mid=True, mlp_input=True, return_labels=True)
    assert labels == ["0_pre", "0_mid", "1_pre", "1_mid"]
    assert torch.equal(resid, torch.stack([cache[f"blocks.{label[0]}.resid_{label[2:]}"] for label in labels]))
    _, labels = cache.accumulated_resid(incl_mid=True, return_labels=True)
    assert labels == ["0_pre", "0_mid", "1_pre", "1_mid", "final_post"]


@pytest.mark.parametrize("arch", ARCHS)
def test_tuple_keys_equal_the_string_keys(arch):
    model = build(arch)
    _, cache = model.run_with_cache(inputs(model))
    L = model.n_layers
    for point in cache.layer_points:
        for l in range(L):
            assert cache[point, l] is cache[f"blocks.{l}.{point}"]
            assert cache[point, l - L] is cache[f"blocks.{l}.{point}"]  # negative layers count from the end
    for short, point in TL_SHORT_NAMES.items():  # TL's names, where windtunnel has the point
        if point in cache.layer_points:
            assert cache[short, -1] is cache[f"blocks.{L - 1}.{point}"]
    if arch == "transformer":
        assert cache["pattern", 0] is cache["blocks.0.attn.pattern"]
        assert cache["attn_out", 1] is cache["blocks.1.attn.out"] and cache["mlp_out", 0] is cache["blocks.0.mlp.out"]


def test_tl_habits_that_do_not_apply_are_one_line_errors():
    model = build("transformer")
    x = inputs(model)
    _, cache = model.run_with_cache(x)
    errors = {
        r"cache\['resid_post', 7\] on Transformer \(2 layers\): layer must be an integer in 0\.\.1, or -2\.\.-1": (
            KeyError,
            lambda: cache["resid_post", 7],
        ),
        r"'attn_scores' is no per-layer point of Transformer; those are resid_pre, .*TL's q, k, v, pattern, z": (
            KeyError,
            lambda: cache["attn_scores", 0],
        ),
        r"expected \(name, layer\), e\.g\. cache\['resid_post', 0\]": (KeyError, lambda: cache["q", 0, "attn"]),
        r"'blocks\.0\.hook_resid_post': no hook point of Transformer \(did you mean blocks\.0\.resid_post": (
            KeyError,
            lambda: cache["blocks.0.hook_resid_post"],
        ),
        r"'blocks\.0\.resid_post': not in the cache; ask run_with_cache": (
            KeyError,
            lambda: model.run_with_cache(x, names_filter="final")[1]["resid_post", 0],
        ),
        r"hook 'blocks\.0\.attn\.hook_z': no such point on Transformer \(did you mean blocks\.0\.attn\.z": (
            ValueError,
            lambda: model.run_with_hooks(x, fwd_hooks=[("blocks.0.attn.hook_z", zero_head(0))]),
        ),
        r"the filter '<lambda>' selects no hook point of Transformer .*not TL's hook_z": (
            ValueError,
            lambda: model.run_with_hooks(x, fwd_hooks=[(lambda name: name.endswith("hook_z"), zero_head(0))]),
        ),
        r"expected \(name or name -> bool, fn\) pairs": (
            ValueError,
            lambda: model.run_with_hooks(x, fwd_hooks=["blocks.0.attn.z"]),
        ),
        r"give fwd_hooks or fns .* not both": (
            ValueError,
            lambda: model.run_with_hooks(x, {"embed": zero_head(0)}, fwd_hooks=[]),
        ),
        r"bwd_hooks are not supported \(hook points are forward-only\)": (
            ValueError,
            lambda: model.run_with_hooks(x, fwd_hooks=[], bwd_hooks=[("embed", zero_head(0))]),
        ),
        r"reset_hooks_end=False is not supported \(hooks belong to one call\)": (
            ValueError,
            lambda: model.run_with_hooks(x, fwd_hooks=[], reset_hooks_end=False),
        ),
        r"apply_ln=True needs the norm scales TL caches .*apply model\.norm": (
            ValueError,
            lambda: cache.accumulated_resid(apply_ln=True),
        ),
        r"accumulated_resid on Transformer \(2 layers; layer 2 is the final stream\): .* 0\.\.2, or -3\.\.-1": (
            ValueError,
            lambda: cache.accumulated_resid(3),
        ),
        r"pos_slice must be an int or a slice": (ValueError, lambda: cache.accumulated_resid(pos_slice="last")),
        r"accumulated_resid: blocks\.0\.resid_pre, blocks\.1\.resid_pre, blocks\.1\.resid_post not in the cache": (
            ValueError,
            lambda: model.run_with_cache(x, names_filter="final")[1].accumulated_resid(),
        ),
    }
    for message, (error, call) in errors.items():
        with pytest.raises(error, match=message) as raised:
            call()
        assert "\n" not in str(raised.value), message
    _, lstm_cache = build("lstm").run_with_cache(inputs(build("lstm")))
    with pytest.raises(ValueError, match="accumulated_resid on LSTM: incl_mid / mlp_input need resid_mid"):
        lstm_cache.accumulated_resid(incl_mid=True)
    with pytest.raises(KeyError, match=r"'pattern' is no per-layer point of LSTM; those are resid_pre, lstm\.h"):
        lstm_cache["pattern", 0]
