"""Hugging Face families as windtunnel architectures (`models.hf`, `windtunnel.hf.from_hf`), each at toy size (2 layers,
d_model 32) from a config with random weights, offline.

Per family: the forward is the HF model's own (its causal mask included); the adapter's q, k, v, pattern and z are
what the HF attention computes (recorded inside HF's own `eager_attention_forward`); zeroing the adapter's value slice
of the weights zeroes that layer's attention-weighted values in HF's own forward and leaves q and k alone; every
architecture passes the causality check; Muon gets every hidden matrix with q, k and v as separate blocks; a smoke run
of each trains on bijection from the CLI."""

from __future__ import annotations

import json
import os

import pytest
import torch
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here downloads; make sure nothing tries
transformers = pytest.importorskip("transformers")

from typer.testing import CliRunner  # noqa: E402

from cli_args import TINY  # noqa: E402
from windtunnel import models, tasks  # noqa: E402
from windtunnel.cli import app  # noqa: E402
from windtunnel.config import validate  # noqa: E402
from windtunnel.hf import from_hf  # noqa: E402
from windtunnel.models.common import Split  # noqa: E402
from windtunnel.models.hf import core  # noqa: E402
from windtunnel.training.optim import BlockMuon, describe  # noqa: E402

SPEC = tasks.make("bijection", V=6, L=5).spec
TOY = dict(n_layers=2, d_model=32, n_heads=4, d_ff=64)
# (architecture, extra size fields): Llama with grouped-query attention, GPT-NeoX with its sequential variant too
CASES = [
    ("hf-gpt2", {}),
    ("hf-gpt-neox", {}),
    ("hf-gpt-neox", {"parallel_residual": False}),
    ("hf-llama", {"n_kv_heads": 2}),
    ("hf-llama", {}),
    ("hf-phi", {}),
]
IDS = ["gpt2", "neox", "neox-sequential", "llama-gqa", "llama", "phi"]
MODELING = {  # the HF module whose eager_attention_forward each family's attention calls
    "hf-gpt2": "transformers.models.gpt2.modeling_gpt2",
    "hf-gpt-neox": "transformers.models.gpt_neox.modeling_gpt_neox",
    "hf-llama": "transformers.models.llama.modeling_llama",
    "hf-phi": "transformers.models.phi.modeling_phi",
}
MUON = validate({"train": {"optimizer": "muon", "weight_decay": 0.1}})
# hidden matrices per layer: fused qkv + out + 2 MLP (GPT-2, NeoX); q, k, v, out + 3 SwiGLU (Llama); + 2 MLP (Phi)
MATRICES = {"gpt2": 4, "gpt_neox": 4, "llama": 7, "phi": 6}


def build(arch: str, **extra) -> nn.Module:
    torch.manual_seed(0)
    return models.make(arch, SPEC, {**TOY, **extra})


def tokens(B: int = 3) -> torch.Tensor:
    return torch.randint(0, int(SPEC.vocab_size), (B, SPEC.seq_len), generator=torch.Generator().manual_seed(1))


def record(monkeypatch, arch: str) -> list[dict[str, torch.Tensor]]:
    """Calls of the family's own attention function, in layer order: its query, key, value (before GQA's repeat),
    weights and output (B,T,H,dh), as HF computes them."""
    import importlib

    module = importlib.import_module(MODELING[arch])
    original = module.eager_attention_forward
    calls: list[dict[str, torch.Tensor]] = []

    def spy(mod, query, key, value, *args, **kwargs):
        out, weights = original(mod, query, key, value, *args, **kwargs)
        calls.append({"q": query, "k": key, "v": value, "pattern": weights, "z": out})
        return out, weights

    monkeypatch.setattr(module, "eager_attention_forward", spy)
    return calls


def hf_forward(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The HF base model's own forward (its causal mask, its layer code) on the task's embedding of x."""
    return model.hf(inputs_embeds=model.embed(x)).last_hidden_state


# --- the adapters are the HF computation -----------------------------------------------------------------------


@pytest.mark.parametrize(("arch", "extra"), CASES, ids=IDS)
def test_the_forward_and_every_attention_point_are_the_hf_model_s_own(monkeypatch, arch, extra):
    model = build(arch, **extra).eval()
    x = tokens()
    calls = record(monkeypatch, arch)
    with torch.no_grad():
        theirs = hf_forward(model, x)
    out, cache = model.run_with_cache(x)
    torch.testing.assert_close(cache["final"], theirs, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out, model.head(theirs), rtol=1e-5, atol=1e-5)
    assert len(calls) == model.n_layers
    for l, call in enumerate(calls):
        for name in ("q", "k", "v", "pattern"):
            torch.testing.assert_close(cache[f"blocks.{l}.attn.{name}"], call[name], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(cache[f"blocks.{l}.attn.z"].transpose(1, 2), call["z"], rtol=1e-5, atol=1e-6)
    kv = extra.get("n_kv_heads", TOY["n_heads"])
    assert cache["blocks.0.attn.q"].shape == (3, TOY["n_heads"], SPEC.seq_len, 8)
    assert cache["blocks.0.attn.k"].shape == cache["blocks.0.attn.v"].shape == (3, kv, SPEC.seq_len, 8)


@pytest.mark.parametrize(("arch", "extra"), CASES, ids=IDS)
def test_zeroing_the_adapter_s_value_slice_zeroes_the_layer_s_attention_weighted_values(monkeypatch, arch, extra):
    model = build(arch, **extra).eval()
    x = tokens()
    calls = record(monkeypatch, arch)
    with torch.no_grad():
        hf_forward(model, x)
        before = calls[:]
        calls.clear()
        v = model.adapter.projections(1)["v"]
        v.weight.index_fill_(v.dim, v.index, 0.0)
        if v.bias is not None:
            v.bias.index_fill_(0, v.index, 0.0)
        hf_forward(model, x)
    _, cache = model.run_with_cache(x)
    assert torch.equal(calls[1]["v"], torch.zeros_like(calls[1]["v"]))  # HF's own values of layer 1
    assert torch.equal(calls[1]["z"], torch.zeros_like(calls[1]["z"]))  # and what its heads read out
    assert torch.equal(cache["blocks.1.attn.z"], torch.zeros_like(cache["blocks.1.attn.z"]))
    for name in ("q", "k"):  # only the values: the slice is no mix of q, k and v
        torch.testing.assert_close(calls[1][name], before[1][name])
    torch.testing.assert_close(calls[0]["z"], before[0]["z"])  # and only that layer


def test_neox_s_fused_qkv_is_per_head_not_three_blocks(monkeypatch):
    """The authors' slicing, (3, H, dh): its "values" (the last d rows) are a mix of q, k and v of several heads, so
    zeroing them leaves GPT-NeoX's values standing; the adapter's per-head (H, 3, dh) slice zeroes them."""
    model = build("hf-gpt-neox").eval()
    calls = record(monkeypatch, "hf-gpt-neox")
    d = TOY["d_model"]
    with torch.no_grad():
        model.hf.layers[0].attention.query_key_value.weight[2 * d :] = 0.0
        model.hf.layers[0].attention.query_key_value.bias[2 * d :] = 0.0
        hf_forward(model, tokens())
    assert calls[0]["v"].abs().amax() > 0.01 and (calls[0]["q"] == 0).any() and (calls[0]["k"] == 0).any()


def test_gqa_query_heads_share_their_key_value_head():
    model = build("hf-llama", n_kv_heads=2).eval()
    x = tokens()
    # a pattern computed from the model's own 2 key heads, head h reading key head h // 2 (HF's repeat_kv)
    _, cache = model.run_with_cache(x, names_filter=["blocks.0.attn.q", "blocks.0.attn.k", "blocks.0.attn.pattern"])
    q, k = cache["blocks.0.attn.q"], cache["blocks.0.attn.k"]
    for h in range(TOY["n_heads"]):
        scores = q[:, h] @ k[:, h // 2].transpose(-2, -1) / 8**0.5
        scores = scores.masked_fill(~torch.ones_like(scores, dtype=torch.bool).tril(), float("-inf"))
        torch.testing.assert_close(cache["blocks.0.attn.pattern"][:, h], scores.softmax(-1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("arch", "extra"), CASES, ids=IDS)
def test_every_hf_architecture_is_causal_and_hooks_as_the_built_ins(arch, extra):
    model = build(arch, **extra)
    assert models.check_causal(model, SPEC) is model
    x = tokens()
    out, cache = model.run_with_cache(x)
    assert set(cache) == set(model.hook_names)
    parts, _ = cache.decompose_resid()
    torch.testing.assert_close(parts.sum(0), cache["blocks.1.resid_post"], rtol=1e-5, atol=1e-5)
    with model.ablate(layers={0, 1}):  # every layer the identity: the output is the head on the embedding's norm
        torch.testing.assert_close(model(x), model.head(model.norm(cache["embed"])), rtol=1e-5, atol=1e-5)
    fused = build(arch, attention="fused", **extra)  # the fused path is causal as well, and computes the same
    models.check_causal(fused, SPEC)
    torch.testing.assert_close(fused(x), out, rtol=1e-4, atol=1e-5)


def test_a_real_input_task_and_sizes_that_do_not_fit():
    spec = tasks.make("regression").spec
    out = models.make("hf-llama", spec, TOY)(torch.randn(2, spec.seq_len, int(spec.input_dim)))
    assert out.shape == (2, spec.seq_len, 2)
    with pytest.raises(ValueError, match="n_kv_heads: must divide n_heads=4"):
        models.make("hf-llama", SPEC, TOY, n_kv_heads=3)
    with pytest.raises(ValueError, match="rotary: 1 rotary features per head"):
        models.make("hf-gpt-neox", SPEC, TOY, rotary_pct=0.125)
    with pytest.raises(ValueError, match="max_len"):  # GPT-2's position table holds max_len positions
        build("hf-gpt2")(torch.zeros(1, SPEC.seq_len + 1, dtype=torch.long))


def test_gpt2_with_heads_of_one_dimension_trains_and_the_rotary_families_refuse_them_naming_the_fields(tmp_path):
    """A head of dimension 1 is a valid GPT-2 head (no rotary features; q . k a product of two numbers): its
    attention output was a strided view GPT-2's Conv1D could not read ("internal error" from `view`). The rotary
    families need an even number >= 2 of rotary features per head and refuse it when the size is validated."""
    size = dict(n_layers=1, d_model=2, n_heads=2, d_ff=4)
    x = tokens()
    torch.manual_seed(0)
    explicit = models.make("hf-gpt2", SPEC, size, attention="explicit")
    fused = models.make("hf-gpt2", SPEC, size, attention="fused")
    fused.load_state_dict(explicit.state_dict())
    out = explicit(x)
    assert out.shape == (3, SPEC.seq_len, SPEC.n_classes)
    torch.testing.assert_close(fused(x), out, rtol=1e-4, atol=1e-5)
    out.sum().backward()
    models.check_causal(explicit, SPEC)
    run = ["train", "--task", "bijection", "--arch", "hf-gpt2", "--out", str(tmp_path / "run"), *TINY, "--steps", "2"]
    sizes = [a for k, v in size.items() for a in ("--set", f"model.size.{k}={v}")]
    r = CliRunner().invoke(app, [*run, *sizes])
    assert r.exit_code == 0, r.output
    for arch in ("hf-gpt-neox", "hf-llama", "hf-phi"):
        with pytest.raises(ValueError, match=r"rotary: .*\(head dim 1\).*even"):
            models.make(arch, SPEC, size)


def test_a_missing_transformers_says_how_to_install_it(monkeypatch):
    def missing(name):
        raise ImportError(name)

    monkeypatch.setattr(core.importlib, "import_module", missing)
    with pytest.raises(ValueError, match=r"pip install 'windtunnel\[hf\]'"):
        build("hf-gpt2")


# --- Muon ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("arch", "extra"), CASES, ids=IDS)
def test_muon_gets_every_hidden_matrix_with_q_k_and_v_apart(arch, extra):
    model = build(arch, **extra)
    d = describe(model, MUON)
    muon, adamw = d["muon"], [*d["adamw"]["decay"], *d["adamw"]["no_decay"]]
    assert sorted([*muon, *adamw]) == sorted(n for n, _ in model.named_parameters())
    hidden = {n for n, p in model.named_parameters() if n.startswith("hf.") and n.endswith("weight") and p.ndim == 2}
    assert set(muon) == hidden - {"hf.wpe.weight"}  # every hidden matrix; GPT-2's position table is an embedding
    assert all(n.startswith(("embed.", "head.", "hf.")) for n in adamw)
    assert not any(n.startswith(("embed.", "head.")) for n in muon)
    D, kv = 32, 8 * extra.get("n_kv_heads", 4)
    for l in range(2):
        if arch == "hf-gpt2":
            assert muon[f"hf.h.{l}.attn.c_attn.weight"] == [D, D, D]  # Conv1D (d, 3d): [q | k | v] by columns
            assert {f"hf.h.{l}.{m}.weight" for m in ("attn.c_proj", "mlp.c_fc", "mlp.c_proj")} <= set(muon)
        elif arch == "hf-gpt-neox":
            assert muon[f"hf.layers.{l}.attention.query_key_value.weight"] == [D, D, D]  # per head, gathered
        else:
            a = f"hf.layers.{l}.self_attn"
            assert [muon[f"{a}.{p}_proj.weight"] for p in "qkv"] == [[D], [kv], [kv]]


@pytest.mark.parametrize(
    ("shape", "split", "gather"),
    [
        # GPT-2's Conv1D (d, 3d): q, k, v are column blocks
        ((8, 24), Split((8, 8, 8), dim=1), lambda w: [w[:, j * 8 : (j + 1) * 8] for j in range(3)]),
        # GPT-NeoX's (3d, d) per head, (H=2, 3, dh=4) rows: block j gathers rows h*12 + j*4 .. +4 of both heads
        ((24, 8), Split((4, 4, 4), repeat=2), lambda w: [w.view(2, 3, 4, 8)[:, j].reshape(8, 8) for j in range(3)]),
    ],
)
def test_a_split_steps_as_muon_on_each_gathered_block(shape, split, gather):
    torch.manual_seed(0)
    w = torch.randn(shape)
    whole = nn.Parameter(w.clone())
    parts = [nn.Parameter(p.clone()) for p in gather(w)]
    opts = [BlockMuon([(whole, split)], lr=0.05), BlockMuon(parts, lr=0.05)]
    for _ in range(2):
        g = torch.randn(shape)
        whole.grad = g.clone()
        for p, gp in zip(parts, gather(g), strict=True):
            p.grad = gp.clone()
        for o in opts:
            o.step()
    for got, want in zip(gather(whole.detach()), parts, strict=True):
        torch.testing.assert_close(got, want.detach())
    with pytest.raises(ValueError, match="do not split"):
        BlockMuon([(nn.Parameter(torch.zeros(8, 24)), Split((8, 8, 8)))])


# --- from_hf ---------------------------------------------------------------------------------------------------


def causal_lms() -> dict[str, nn.Module]:
    """Causal LMs as a user has them (vocab 50, random weights), one per family, with the options the architectures
    do not set: GPT-2's tied head, Llama's GQA with its own head_dim, Phi's q/k LayerNorms."""
    t = transformers
    common = dict(vocab_size=50, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    configs = {
        "gpt2": t.GPT2Config(
            n_embd=32, n_layer=2, n_head=4, n_positions=16, scale_attn_by_inverse_layer_idx=True, **common
        ),
        "gpt_neox": t.GPTNeoXConfig(max_position_embeddings=16, **small, **common),
        "llama": t.LlamaConfig(num_key_value_heads=2, head_dim=16, max_position_embeddings=16, **small, **common),
        "phi": t.PhiConfig(qk_layernorm=True, max_position_embeddings=16, **small, **common),
    }
    torch.manual_seed(0)
    auto = t.AutoModelForCausalLM
    return {name: auto.from_config(c, attn_implementation="eager").eval() for name, c in configs.items()}


def test_from_hf_wraps_each_family_with_its_own_logits_and_the_hook_points():
    for name, lm in causal_lms().items():
        wrapped = from_hf(lm)  # checks its logits against the model's own first
        ids = torch.randint(0, 50, (2, 12))
        out, cache = wrapped.run_with_cache(ids)
        torch.testing.assert_close(out, lm(input_ids=ids).logits, rtol=1e-5, atol=1e-5)
        assert set(cache) == set(wrapped.hook_names) and out.shape == (2, 12, 50), name
        assert models.check_causal(wrapped, wrapped.spec) is wrapped
        muon = describe(wrapped, MUON)["muon"]
        assert not any("lm_head" in n or "embed" in n or "wte" in n for n in muon), name  # edges: AdamW
        assert len(muon) == MATRICES[name] * 2, name


def test_from_hf_refuses_what_it_cannot_read():
    lm = causal_lms()["gpt2"]
    with pytest.raises(ValueError, match="give the causal LM"):
        from_hf(lm.transformer)
    block = lm.transformer.h[0]
    layer_forward = block.forward

    def changed(*args, **kwargs):  # a layer computing what the adapter does not
        out = layer_forward(*args, **kwargs)
        return (out[0] * 1.5, *out[1:]) if isinstance(out, tuple) else out * 1.5  # older transformers: a tuple

    block.forward = changed
    with pytest.raises(ValueError, match="differs from its own"):
        from_hf(lm)
    bert = nn.Module()
    bert.config = transformers.BertConfig()
    with pytest.raises(ValueError, match="no adapter for model_type 'bert'"):
        from_hf(bert)


# --- the CLI ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["hf-gpt2", "hf-gpt-neox", "hf-llama", "hf-phi"])
def test_each_trains_on_bijection_from_the_cli(tmp_path, arch):
    out = tmp_path / arch
    args = ["train", "--task", "bijection", "--arch", arch, "--out", str(out), *TINY, "--steps", "4"]
    r = CliRunner().invoke(app, [*args, "--set", "train.optimizer=muon"])
    assert r.exit_code == 0, r.output
    family = arch.removeprefix("hf-").replace("-", "_")
    assert f"muon: {2 * MATRICES[family]} matrices" in r.output  # q, k and v among the blocks
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model"]["arch"] == arch and cfg["model"]["size"]["n_layers"] == 2
    assert json.loads((out / "eval.json").read_text())["default"]["metrics"]["kl_bits"]["mean"] >= 0
