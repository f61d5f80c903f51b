"""The key probe runs on any model with `blocks.{l}.attn.k` hook points and token inputs, reading no attribute of the
architecture (token keys); where the key projection is exposed (the built-in transformer) its top level stays the
weight-only statistic, with the token keys beside it (`token_keys`).

Token keys: the key the model computes for token t at position 0 of the one-token sequence [t]. Checked here: on the
built-in transformer they equal norm1(E[t]) @ W_K^T computed by hand from the weights where position 0 adds nothing
(pos "none"; rotary rotates position 0 by angle 0); the probe runs on hf-gpt2 and hf-llama with grouped-query
attention, with init and Gaussian baselines of the same definition; a transformer whose `attn.w_k`, `norm1` and
`embed.token_weight` are renamed still gets it (the weight-only statistics say why they are missing); Mamba, the LSTM
and the MLP, which have no `attn.k` points, and real-valued inputs are not applicable.
"""

from __future__ import annotations

import copy
import math
import os

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the Hugging Face models are built from configs: nothing downloads

from windtunnel import models, tasks
from windtunnel.geometry.keys import (
    DEFINITION,
    WEIGHT_ONLY_DEFINITION,
    key_cosines,
    key_orthogonality,
    probe_tokens,
    token_keys,
    weight_only_keys,
)
from windtunnel.geometry.probes import probe_model
from windtunnel.geometry.stats import (
    cosine_matrix,
    expected_abs_cosine_random,
    gaussian_keys_baseline,
    mean_abs_offdiag_cosine,
)
from windtunnel.models.common import InputEmbedding
from windtunnel.models.transformer import Block, CausalSelfAttention

TASK = tasks.make("bijection", V=6, L=5)
SIZE = {"n_layers": 2, "n_heads": 2, "d_model": 16}


def transformer(seed: int = 0, **fields):
    torch.manual_seed(seed)
    return models.make("transformer", TASK.spec, {**SIZE, **fields}).eval()


def by_hand(model, tokens: torch.Tensor, layers: int) -> list[torch.Tensor]:
    """(H,n,dh) keys of layers 0..layers-1 from the weights, for a model without positions: the stream of the
    one-token sequences [t] through the blocks' own modules, then norm1 @ W_K^T (qkv rows d..2d) split into heads."""
    d, H = model.d_model, model.n_heads
    h = model.embed.tok.weight[tokens][:, None]  # (n,1,d): no position added
    out = []
    with torch.no_grad():
        for l in range(layers):
            block = model.blocks[l]
            w_k = block.attn.qkv.weight[d : 2 * d]  # (d,d), rows heads x dh
            k = block.norm1(h[:, 0]) @ w_k.T  # (n,d)
            out.append(k.view(len(tokens), H, -1).transpose(0, 1))  # (H,n,dh)
            h = block(h, True, lambda name, x: x)  # the next layer's input: this block on [t] alone
    return out


# ------------------------------------------------------------------ (1) parity with the weights


@pytest.mark.parametrize("pos", ["none", "rotary"])
def test_layer0_token_keys_are_norm1_embedding_times_wk_where_position_0_adds_nothing(pos):
    # pos "none": the embedding is E[t] alone; "rotary": position 0 is rotated by angle 0, the identity. So at
    # layer 0 the hook's key of [t] is norm1(E[t]) @ W_K^T, the weight-only key, to float tolerance.
    model = transformer(pos=pos)
    tokens = probe_tokens(TASK.spec)
    hook = token_keys(model)
    assert [tuple(k.shape) for k in hook] == [(2, 6, 8)] * 2  # (H,n,dh) per layer
    assert torch.allclose(hook[0], by_hand(model, tokens, 1)[0], atol=1e-6)
    assert torch.allclose(hook[0], weight_only_keys(model)[0], atol=1e-6)  # the module's own explicit path
    r = key_orthogonality(model)
    tk = r["token_keys"]
    assert tk["mean_abs_cos_per_layer"][0] == pytest.approx(r["mean_abs_cos_per_layer"][0], abs=1e-6)
    # beyond layer 0 the token key carries layer 0's update of [t]; the weight-only key does not
    assert tk["mean_abs_cos_per_layer"][1] != pytest.approx(r["mean_abs_cos_per_layer"][1], abs=1e-4)
    assert tk["definition"] == DEFINITION and r["definition"] == WEIGHT_ONLY_DEFINITION


def test_token_keys_beyond_layer0_and_with_learned_positions_are_the_models_own():
    model = transformer(pos="none")
    tokens = probe_tokens(TASK.spec)
    for hook, hand in zip(token_keys(model), by_hand(model, tokens, 2), strict=True):  # layer 1: after block 0
        assert torch.allclose(hook, hand, atol=1e-6)
    learned = transformer(pos="learned")
    d, p0, block = learned.d_model, learned.embed.pos.weight[0], learned.blocks[0]  # p0: added to every token
    with torch.no_grad():
        k = block.norm1(learned.embed.tok.weight[tokens] + p0) @ block.attn.qkv.weight[d : 2 * d].T  # (n,d)
    hook0 = token_keys(learned)[0]
    assert torch.allclose(hook0, k.view(6, 2, -1).transpose(0, 1), atol=1e-6)
    assert not torch.allclose(hook0, weight_only_keys(learned)[0], atol=1e-3)  # the weights alone miss the position


def test_each_statistic_its_figure_and_its_baselines_share_one_definition():
    model, init = transformer(seed=0), transformer(seed=1)
    r = key_orthogonality(model, init_model=init, seed=3)
    # the top level (the weights are exposed): weight-only keys, and the heatmaps draw the same keys
    weight = weight_only_keys(model)
    assert r["mean_abs_cos_per_head"] == [[mean_abs_offdiag_cosine(k) for k in layer] for layer in weight]
    cos = key_cosines(model)  # (L,H,n,n): what the heatmaps draw
    off = ~np.eye(6, dtype=bool)
    drawn = np.array([[np.abs(c[off]).mean() for c in layer] for layer in cos])  # (L,H)
    assert np.allclose(drawn, np.array(r["mean_abs_cos_per_head"]), atol=1e-12)
    tk = r["token_keys"]
    assert tk["mean_abs_cos_per_head"] == [[mean_abs_offdiag_cosine(k) for k in layer] for layer in token_keys(model)]
    # each init number sits beside the trained one of the same definition
    alone = key_orthogonality(init)
    assert r["init_mean_abs_cos_per_layer"] == pytest.approx(alone["mean_abs_cos_per_layer"])
    assert tk["init_mean_abs_cos_per_layer"] == pytest.approx(alone["token_keys"]["mean_abs_cos_per_layer"])
    assert r["init_mean_abs_cos_per_layer"] != pytest.approx(tk["init_mean_abs_cos_per_layer"])
    assert r["gaussian_baseline"] == gaussian_keys_baseline(6, 8, seed=3)
    assert tk["gaussian_baseline"] == r["gaussian_baseline"]  # same shape of keys
    assert set(r["layer0_direction"]) == {"ours_mean_abs_cos", "authors_signed_mean_cos"}
    assert set(tk["layer0_direction"]) == {"ours_mean_abs_cos"}
    for entry in r["by_token_set"].values():
        assert entry["token_keys"]["n_key_heads"] == 2 and entry["definition"] == WEIGHT_ONLY_DEFINITION


def test_token_keys_leave_the_models_modes_as_they_were():
    model = transformer().train()
    model.blocks[1].eval()
    token_keys(model)
    assert model.training and model.blocks[0].training and not model.blocks[1].training


# ------------------------------------------------------------------ (2) Hugging Face architectures


HF_TOY = dict(n_layers=2, d_model=32, n_heads=4, d_ff=64)


def hf(arch: str, seed: int = 0, **extra):
    pytest.importorskip("transformers")
    torch.manual_seed(seed)
    return models.make(arch, TASK.spec, {**HF_TOY, **extra}).eval()


@pytest.mark.parametrize(("arch", "extra", "key_heads"), [("hf-gpt2", {}, 4), ("hf-llama", {"n_kv_heads": 2}, 2)])
def test_probe_runs_on_hugging_face_architectures(arch, extra, key_heads):
    model, init = hf(arch, **extra), hf(arch, seed=1, **extra)
    assert not hasattr(model, "blocks")  # no built-in layout to fall back on
    r = key_orthogonality(model, init_model=init)
    assert "not_applicable" not in r and "error" not in r, r
    assert r["n_key_heads"] == key_heads and r["d_head"] == 8 and r["n_tokens"] == 6
    for name in ("mean_abs_cos_per_layer", "init_mean_abs_cos_per_layer"):
        assert len(r[name]) == 2 and all(math.isfinite(c) and 0 <= c <= 1 for c in r[name])
    assert [len(h) for h in r["mean_abs_cos_per_head"]] == [key_heads, key_heads]
    assert 0 < r["gaussian_baseline"] < 1 and r["gaussian_baseline"] == gaussian_keys_baseline(6, 8, seed=0)
    assert r["gaussian_expected"] == expected_abs_cosine_random(8)
    assert math.isfinite(r["layer0_vs_gaussian_pct"])
    assert set(r["layer0_direction"]) == {"ours_mean_abs_cos"}
    # the weights' statistics say why they are absent, with no number
    assert "w_k" in r["authors_not_applicable"] and r["definition"] == DEFINITION and r["token_keys"]["n_key_heads"]
    assert not any(k.startswith("authors_signed") for k in r)
    for entry in r["by_token_set"].values():
        assert entry["n_key_heads"] == key_heads and math.isfinite(entry["init_mean_abs_cos_per_layer"][0])
    assert r["init_mean_abs_cos_per_layer"] == pytest.approx(key_orthogonality(init)["mean_abs_cos_per_layer"])
    assert key_cosines(model).shape == (2, key_heads, 6, 6)
    # the token key is the model's own key at position 0 of any sequence starting with t (causal attention)
    seqs = TASK.sample(6, seed=0).inputs.clone()
    seqs[:, 0] = probe_tokens(TASK.spec)
    _, cache = model.run_with_cache(seqs, names_filter=["blocks.0.attn.k", "blocks.1.attn.k"])
    for l, keys in enumerate(token_keys(model)):
        assert torch.allclose(keys, cache[f"blocks.{l}.attn.k"][:, :, 0].transpose(0, 1), atol=1e-5)


def test_probe_model_reports_keys_for_a_hugging_face_model():
    model = hf("hf-llama", n_kv_heads=2)
    results, _ = probe_model(model, TASK, n=8, probes=("keys",))
    assert results["keys"]["n_key_heads"] == 2 and len(results["keys"]["mean_abs_cos_per_layer"]) == 2


# ------------------------------------------------------------------ (3) no attribute dependence


class RenamedAttention(CausalSelfAttention):
    @property
    def w_k(self):
        raise AttributeError("w_k was renamed key_projection")

    @property
    def key_projection(self) -> torch.Tensor:
        return CausalSelfAttention.w_k.fget(self)


class RenamedBlock(Block):
    def forward(self, h, explicit, hook):  # Block.forward with norm1 renamed pre_attn_norm
        h = h + hook("attn.out", self.attn(self.pre_attn_norm(h), explicit, hook))
        h = hook("resid_mid", h)
        return h + hook("mlp.out", self.mlp(h))


class RenamedEmbedding(InputEmbedding):
    @property
    def token_weight(self):
        raise AttributeError("token_weight was renamed table")


def renamed(model):
    """A copy of `model` (untied head: it does not read the embedding) whose attn.w_k, norm1 and
    embed.token_weight are gone under other names; the forward pass is unchanged."""
    other = copy.deepcopy(model)
    other.embed.__class__ = RenamedEmbedding
    for block in other.blocks:
        block.attn.__class__ = RenamedAttention
        block.__class__ = RenamedBlock
        block.pre_attn_norm = block.norm1
        del block.norm1
    return other


def test_a_model_without_the_weight_attributes_still_gets_the_token_key_probe():
    model, init = transformer(tie=False), transformer(seed=1, tie=False)
    other, other_init = renamed(model), renamed(init)
    block = other.blocks[0]
    assert not hasattr(block.attn, "w_k") and not hasattr(block, "norm1") and not hasattr(other.embed, "token_weight")
    x = TASK.sample(4, seed=0).inputs
    assert torch.equal(other(x), model(x))  # the same model under other names
    want, got = key_orthogonality(model, init_model=init), key_orthogonality(other, init_model=other_init)
    assert "not_applicable" not in got and "error" not in got, got
    # without the weights the token keys are the top level, and they equal the original model's token keys
    for name in ("mean_abs_cos_per_layer", "mean_abs_cos_per_head", "init_mean_abs_cos_per_layer", "gaussian_baseline"):
        assert got[name] == want["token_keys"][name] == got["token_keys"][name]
    assert got["layer0_direction"] == want["token_keys"]["layer0_direction"]
    assert np.array_equal(
        key_cosines(other), np.stack([np.stack([cosine_matrix(k) for k in layer]) for layer in token_keys(model)])
    )
    assert got["definition"] == DEFINITION and "authors_not_applicable" in got
    assert "authors_signed_mean_cos_per_layer" in want and want["definition"] == WEIGHT_ONLY_DEFINITION


# ------------------------------------------------------------------ (4) not applicable


@pytest.mark.parametrize("arch", ["mamba", "lstm", "mlp"])
def test_architectures_without_attention_keys_are_not_applicable(arch):
    torch.manual_seed(0)
    size = {"n_layers": 2, "d_model": 16} if arch != "mlp" else {"n_layers": 1, "d_model": 16, "d_emb": 4}
    model = models.make(arch, TASK.spec, **size)
    assert not any(name.endswith("attn.k") for name in model.hook_names)
    assert key_orthogonality(model) == {"not_applicable": "the architecture has no attention keys"}
    with pytest.raises(ValueError, match="no attention keys"):
        token_keys(model)


def test_real_valued_inputs_are_not_applicable():
    torch.manual_seed(0)
    model = models.make("transformer", tasks.make("regression").spec, **SIZE)
    assert key_orthogonality(model) == {
        "not_applicable": "the task has real-valued inputs: there are no token embeddings to key"
    }
