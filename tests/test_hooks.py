"""Hook points: every name on every architecture, caching only what is asked, patching through `hooks()`."""

from __future__ import annotations

import pytest
import torch

from hook_models import ARCHS, build, inputs
from windtunnel.models import mamba as mamba_module
from windtunnel.models import scan_kernel
from windtunnel.models.base import predictive

LOCAL = {  # per-layer hook points beyond resid_pre / resid_post, where the concept exists
    "transformer": {"attn.q", "attn.k", "attn.v", "attn.pattern", "attn.z", "attn.out", "resid_mid", "mlp.out"},
    "mamba": {"ssm.delta", "ssm.B", "ssm.C", "ssm.h", "ssm.y", "ssm.out"},
    "lstm": {"lstm.h", "lstm.c"},
    "mlp": {"mlp.out"},
    "mlp-pointwise": {"mlp.out"},
}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("task", ["bijection", "regression"])
def test_every_hook_point_exists_with_its_shape(arch, task):
    model = build(arch, task)
    L, B, T = model.n_layers, 3, 8
    expected = {"embed", "final"} | {
        f"blocks.{l}.{n}" for l in range(L) for n in {"resid_pre", "resid_post"} | LOCAL[arch]
    }
    assert set(model.hook_names) == expected and len(model.hook_names) == len(expected)
    x = inputs(model, B, T)
    with torch.no_grad():
        out, cache = model.run_with_cache(x)
        torch.testing.assert_close(out, model(x), atol=1e-5, rtol=1e-4)  # slow paths compute the same function
    assert set(cache) == expected  # every point is reached, including the ones that need a slow path
    d = cache["final"].shape[-1]
    for l in range(L):
        assert cache[f"blocks.{l}.resid_pre"].shape == cache[f"blocks.{l}.resid_post"].shape == (B, T, d)
        torch.testing.assert_close(
            cache[f"blocks.{l}.resid_pre"], cache["embed"] if l == 0 else cache[f"blocks.{l - 1}.resid_post"]
        )
    torch.testing.assert_close(model.head(cache["final"]), out)
    first = {n.split(".", 2)[2]: v for n, v in cache.items() if n.startswith("blocks.0.")}
    if arch == "transformer":
        H = model.n_heads
        assert first["attn.q"].shape == first["attn.k"].shape == first["attn.z"].shape == (B, H, T, d // H)
        assert first["attn.pattern"].shape == (B, H, T, T) and torch.all(first["attn.pattern"].triu(1) == 0)
        torch.testing.assert_close(first["attn.pattern"].sum(-1), torch.ones(B, H, T))
        torch.testing.assert_close(first["resid_mid"], first["resid_pre"] + first["attn.out"])
        torch.testing.assert_close(first["resid_post"], first["resid_mid"] + first["mlp.out"])
    elif arch == "mamba":
        Di, N = model.d_inner, model.d_state
        assert first["ssm.delta"].shape == first["ssm.y"].shape == (B, T, Di) and (first["ssm.delta"] > 0).all()
        assert first["ssm.B"].shape == first["ssm.C"].shape == (B, T, N)
        assert first["ssm.h"].shape == (B, T, Di, N)
        torch.testing.assert_close(first["ssm.y"], torch.einsum("btdn,btn->btd", first["ssm.h"], first["ssm.C"]))
        torch.testing.assert_close(first["resid_post"], first["resid_pre"] + first["ssm.out"])
    elif arch == "lstm":
        assert first["lstm.h"].shape == first["lstm.c"].shape == (B, T, d)
        torch.testing.assert_close(first["lstm.h"], first["resid_post"])
    else:
        torch.testing.assert_close(first["resid_post"], first["resid_pre"] + first["mlp.out"])


@pytest.mark.parametrize("arch", ARCHS)
def test_run_with_cache_returns_exactly_the_names_asked(arch):
    model = build(arch)
    x = inputs(model)
    names = ["embed", f"blocks.{model.n_layers - 1}.resid_post", "final"]
    with torch.no_grad():
        out, cache = model.run_with_cache(x, names=names)
        plain = model(x)
    assert sorted(cache) == sorted(names)
    assert torch.equal(out, plain)  # nothing asked that needs a slow path: the same kernels, the same bits
    assert model._active is None  # nothing stays switched on after the call
    with pytest.raises(ValueError, match=r"'blocks\.9\.resid_pre': layer 9 is out of range"):
        model.run_with_cache(x, names=["blocks.9.resid_pre"])
    with pytest.raises(ValueError, match="no such point.*docs/hooks.md"):
        model.run_with_cache(x, names=["blocks.0.attention"])


def test_mamba_keeps_the_fused_scan_unless_h_is_asked(monkeypatch):
    monkeypatch.setattr(scan_kernel, "available", lambda: False)  # scan="auto" runs the eager fused scan
    model = build("mamba")
    calls = []
    real = mamba_module.selective_scan
    monkeypatch.setattr(mamba_module, "selective_scan", lambda *a: calls.append(1) or real(*a))
    x = inputs(model)
    with torch.no_grad():
        out, cache = model.run_with_cache(x, names=["final", "blocks.0.ssm.y", "blocks.0.ssm.delta"])
        assert len(calls) == model.n_layers and "blocks.0.ssm.h" not in cache  # the fast path on every layer
        calls.clear()
        out_h, cache_h = model.run_with_cache(x, names=["blocks.1.ssm.h"])
        assert len(calls) == model.n_layers - 1  # only the layer whose state is asked scans another way
        assert cache_h["blocks.1.ssm.h"].shape == (x.shape[0], x.shape[1], model.d_inner, model.d_state)
    torch.testing.assert_close(out_h, out, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
def test_identity_patches_change_nothing_and_a_real_patch_changes_the_output(arch):
    model = build(arch)
    x = inputs(model)
    with torch.no_grad():
        base = model(x)
        every = dict.fromkeys(model.hook_names, lambda a, name: a.clone())  # replace with an equal copy
        with model.hooks({"blocks.0.resid_post": lambda a, name: None}):  # read-only: returns nothing
            assert torch.equal(model(x), base)
        torch.testing.assert_close(model.run_with_hooks(x, every), base, atol=1e-5, rtol=1e-4)
        steer = model.run_with_hooks(x, {"blocks.0.resid_post": lambda a, name: a + 1.0})
        assert not torch.allclose(steer, base)
        assert torch.equal(model(x), base)  # the hook is gone after the context


def test_hooks_nest_in_order_and_check_what_they_return():
    model = build("transformer")
    x = inputs(model)
    seen = []
    with torch.no_grad(), model.hooks({"embed": lambda a, name: seen.append("outer") or a * 2}):
        with model.hooks({"embed": lambda a, name: seen.append("inner") or a + 1}):
            _, cache = model.run_with_cache(x, names=["embed"])
        _, outer_only = model.run_with_cache(x, names=["embed"])
    assert seen == ["outer", "inner", "outer"]
    torch.testing.assert_close(cache["embed"], outer_only["embed"] + 1)  # the inner hook ran on the outer's result
    with pytest.raises(ValueError, match=r"hook 'final': must return None or a tensor of shape \(3, 8, 32\)"):
        model.run_with_hooks(x, {"final": lambda a, name: a[:, :1]})
    with pytest.raises(ValueError, match="expected a function"), model.hooks({"final": 3}):
        pass


def test_activation_patching_on_a_trained_model_moves_the_prediction(tmp_path):
    from windtunnel.config import build_config
    from windtunnel.runs import load_run
    from windtunnel.training.train import train

    cfg = build_config(
        overrides={
            "task.name": "bijection",
            "task.V": 6,
            "task.L": 5,
            "model.arch": "transformer",
            "model.preset": "smoke",
            "train.steps": 60,
            "train.batch_size": 16,
            "train.eval_every": 60,
            "train.eval_size": 16,
            "eval.n": 16,
            "train.device": "cpu",
        }
    )
    train(cfg, tmp_path / "run", progress=False)
    run = load_run(tmp_path / "run")
    model, task = run.model.eval(), run.task
    clean, corrupt = task.sample(1, seed=11).inputs, task.sample(1, seed=12).inputs  # (1,T) each
    t = clean.shape[1] // 2
    _, donor = model.run_with_cache(corrupt, names=["blocks.0.resid_post"])

    def patch_from(s: int):
        def fn(a: torch.Tensor, name: str) -> torch.Tensor:
            a = a.clone()
            a[:, s:] = donor["blocks.0.resid_post"][:, s:]  # (1,T-s,d) from the corrupt sequence
            return a

        return fn

    with torch.no_grad():
        base_clean, base_corrupt = model(clean), model(corrupt)
        patched = model.run_with_hooks(clean, {"blocks.0.resid_post": patch_from(t)})
        everything = model.run_with_hooks(clean, {"blocks.0.resid_post": patch_from(0)})
    torch.testing.assert_close(everything, base_corrupt)  # the whole stream patched: the corrupt run's output
    assert torch.equal(patched[:, :t], base_clean[:, :t])  # causal: earlier positions do not see the patch
    p_clean, p_patch = predictive(model.spec, base_clean), predictive(model.spec, patched)
    p_corrupt = predictive(model.spec, base_corrupt)
    moved = torch.distributions.kl_divergence(p_patch, p_corrupt)[0, t:]  # (T-t,)
    stayed = torch.distributions.kl_divergence(p_clean, p_corrupt)[0, t:]
    assert moved.mean() < stayed.mean()  # the patched positions predict like the corrupt sequence, not the clean


def test_ablation_is_a_hook():
    model = build("transformer")
    x = inputs(model)
    with torch.no_grad():
        base = model(x)
        with model.ablate(layers={0}, parts="block"):
            _, abl = model.run_with_cache(x, names=["blocks.0.resid_pre", "blocks.0.resid_post"])
            assert model.wants("blocks.0.resid_post")
        assert torch.equal(abl["blocks.0.resid_post"], abl["blocks.0.resid_pre"])
        with model.ablate(layers={1}, parts="attn"):
            _, no_attn = model.run_with_cache(
                x, names=["blocks.1.attn.out", "blocks.1.resid_mid", "blocks.1.resid_pre"]
            )
        assert not no_attn["blocks.1.attn.out"].any()
        assert torch.equal(no_attn["blocks.1.resid_mid"], no_attn["blocks.1.resid_pre"])
        assert torch.equal(model(x), base)
