"""Model protocol: shapes, heads, causality on every task spec, registry, ablation, bad input (hooks: test_hooks)."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

from windtunnel import models, tasks
from windtunnel.models import presets
from windtunnel.models.base import ModelSize, ResidualModel, SequenceModel, predictive
from windtunnel.models.common import InputEmbedding, OutputHead
from windtunnel.models.mamba import PaperMambaBlock, ReferenceMambaBlock

ARCHS = ["transformer", "mamba", "lstm", "mlp", "mlp-pointwise"]
TASKS = ["bijection", "hmm", "recall", "regression"]
VARIANTS = [(a, {}) for a in ARCHS] + [
    ("mamba", {"variant": "paper"}),
    ("transformer", {"pos": "rotary"}),
    ("transformer", {"pos": "learned+rotary"}),
    ("lstm", {"norm_inputs": True, "residual": True}),
]


def build(arch: str, task: str, **extra) -> SequenceModel:
    torch.manual_seed(0)
    spec = tasks.make(task).spec
    return models.make(arch, spec, presets.preset(task, arch, "smoke"), **extra).eval()


def random_inputs(spec, B: int, T: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if spec.input_kind == "tokens":
        return torch.randint(0, spec.vocab_size, (B, T), generator=g)
    return torch.randn(B, T, spec.input_dim, generator=g)


def test_names_cover_the_four_architectures():
    assert set(ARCHS) <= set(models.names())


def variant_id(v):
    """`pos-learned`-style ids: a flag that is on reads as its name."""
    return "-".join(k if x is True else str(x) for k, x in v.items()) if isinstance(v, dict) else v


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("arch,extra", VARIANTS, ids=variant_id)
def test_causal_and_shapes(arch, extra, task):
    model = build(arch, task, **extra)
    spec = model.spec
    T = min(spec.seq_len, 40)
    x = random_inputs(spec, 2, T)
    with torch.no_grad():
        out = model(x)
        assert out.shape == (2, T, spec.output_dim)
        assert torch.isfinite(out).all()
        for t in (0, T // 2, T - 2):
            y = x.clone()
            y[:, t + 1 :] = random_inputs(spec, 2, T, seed=t + 1)[:, t + 1 :]
            out2 = model(y)
            torch.testing.assert_close(out2[:, : t + 1], out[:, : t + 1], atol=1e-5, rtol=0)
            assert not torch.allclose(out2[:, t + 1 :], out[:, t + 1 :])
        # the first input reaches the last position (float64: at init the influence can be ~1e-8), except in
        # the per-position control
        model.double()
        x = x if spec.input_kind == "tokens" else x.double()
        y = x.clone()
        y[:, 0] = random_inputs(spec, 2, T, seed=99)[:, 0]
        assert torch.equal(model(y)[:, -1], model(x)[:, -1]) == (arch == "mlp-pointwise")


@pytest.mark.parametrize("arch", ARCHS)
def test_full_length_recall(arch):
    """The longest spec (recall, T=329) runs end to end."""
    model = build(arch, "recall")
    x = random_inputs(model.spec, 1, model.spec.seq_len)
    with torch.no_grad():
        assert model(x).shape == (1, model.spec.seq_len, model.spec.n_classes)


@pytest.mark.parametrize("task", TASKS)
def test_heads_and_predictive(task):
    spec = tasks.make(task).spec
    emb = InputEmbedding(spec, 16)
    head = OutputHead(spec, 16, tie=True, embedding=emb)
    assert head.tied == (spec.answer_token_offset is not None)
    h = torch.randn(2, 5, 16)
    out = head(h)
    assert out.shape == (2, 5, spec.output_dim)
    if head.tied:
        lo = spec.answer_token_offset
        torch.testing.assert_close(out[0, 0, 1], h[0, 0] @ emb.tok.weight[lo + 1])
        assert not any(p is emb.tok.weight for p in head.parameters())  # shared weight not registered twice
    dist = predictive(spec, out)
    assert dist.batch_shape == (2, 5)


@pytest.mark.parametrize("tie", [True, False])
def test_head_computes_float32_logits_under_bf16_autocast(tie):
    """bf16 logits would quantise the posterior (spacing ~0.03 at |logit| ~5); the head stays float32 (and float64
    models stay float64)."""
    spec = tasks.make("bijection").spec
    emb = InputEmbedding(spec, 16)
    head = OutputHead(spec, 16, tie=tie, embedding=emb)
    h = torch.randn(2, 5, 16) * 20
    exact = head(h)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = head(h)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, exact)
    emb.double()  # the tied weight lives in the embedding, not in the head
    assert head.double()(h.double()).dtype == torch.float64


def test_untied_head_when_asked():
    spec = tasks.make("bijection").spec
    tied = models.make("transformer", spec, n_layers=1, n_heads=1, d_model=8)
    untied = models.make("transformer", spec, n_layers=1, n_heads=1, d_model=8, tie=False)
    assert untied.n_params() - tied.n_params() == 8 * spec.n_classes + spec.n_classes


@pytest.mark.parametrize("arch", ARCHS)
def test_the_skeleton_builds_the_embedding_and_the_head(arch):
    """An architecture writes only its layers: no built-in defines a constructor or builds an `OutputHead` of its
    own; the skeleton's model is embed first and head last (the order its parameters draw from the RNG)."""
    cls = models.resolve(arch)
    assert issubclass(cls, ResidualModel)
    own = cls.__mro__[: cls.__mro__.index(ResidualModel)]  # the architecture's classes (the MLPs' shared base too)
    assert not [c for c in own if "__init__" in vars(c)]
    assert "OutputHead(" not in inspect.getsource(inspect.getmodule(cls))
    model = build(arch, "bijection")
    children = [name for name, _ in model.named_children()]
    assert children[0] == "embed" and children[-1] == "head" and isinstance(model.head, OutputHead)
    assert (model.head.tied, isinstance(model.embed, InputEmbedding)) == (arch != "mlp", arch != "mlp")


@pytest.mark.parametrize("variant", ["reference", "paper"])
def test_mamba_blocks_are_the_variants_class(variant):
    model = build("mamba", "bijection", variant=variant)
    block = ReferenceMambaBlock if variant == "reference" else PaperMambaBlock
    assert all(type(b) is block for b in model.blocks)
    assert model.blocks[0].A_log.shape == ((16,) if variant == "paper" else (64, 16))  # shared over channels or not


@pytest.mark.parametrize("arch", ARCHS)
def test_state_size(arch):
    model = build(arch, "bijection")
    s10, s20 = model.state_size(10), model.state_size(20)
    if arch in ("transformer", "mlp"):
        assert s20 == 2 * s10 > 0
    elif arch in ("mamba", "lstm"):
        assert s20 == s10 > 0
    if arch == "transformer":
        assert s10 == 2 * model.n_layers * 10 * 32
    if arch == "lstm":
        assert s10 == 2 * model.n_layers * model.d_model


def test_init_gives_sane_step_one_loss():
    """N(0,0.02) init: the first loss is about log K, not ~125 as with PyTorch-default embeddings."""
    task = tasks.make("bijection")
    batch = task.sample(64, seed=0)
    for arch in ARCHS:
        model = build(arch, "bijection")
        loss = nn.functional.cross_entropy(model(batch.inputs)[batch.target_mask], batch.targets[batch.target_mask])
        assert abs(loss.item() - torch.log(torch.tensor(20.0)).item()) < 0.5, arch


@pytest.mark.parametrize("arch", ARCHS)
def test_max_len_allows_longer_inputs(arch):
    spec = tasks.make("bijection").spec
    model = models.make(arch, spec, presets.preset("bijection", arch, "smoke"), max_len=2 * spec.seq_len)
    x = random_inputs(spec, 1, 2 * spec.seq_len)
    assert model(x).shape[1] == 2 * spec.seq_len
    short = models.make(arch, spec, presets.preset("bijection", arch, "smoke"))
    if short.size.position_limit():  # a learned table or weights per position: max_len bounds the inputs
        with pytest.raises(ValueError, match="max_len"):
            short(x)
    else:  # no table (the smoke Mamba and LSTM): any length runs
        assert short(x).shape[1] == 2 * spec.seq_len


def test_bad_inputs_and_sizes():
    spec = tasks.make("bijection").spec
    model = build("transformer", "bijection")
    with pytest.raises(ValueError, match="inputs"):
        model(torch.randn(2, 5, 3))
    with pytest.raises(ValueError, match="inputs"):
        model(torch.randn(2, 5))
    with pytest.raises(ValueError, match="d_model"):
        models.make("transformer", spec, d_model=10, n_heads=3)
    with pytest.raises(ValueError, match="n_layers"):
        models.make("lstm", spec, n_layers=0)
    with pytest.raises(ValueError, match="variant"):
        models.make("mamba", spec, variant="fast")
    with pytest.raises(ValueError, match="pos"):
        models.make("transformer", spec, pos="sinusoid")
    with pytest.raises(ValueError, match="arch"):
        models.make("nope", spec)
    reg = tasks.make("regression").spec
    with pytest.raises(ValueError, match="input_dim"):
        models.make("lstm", reg, n_layers=1, d_model=8)(torch.randn(1, 4, reg.input_dim + 1))


class TinyUserModel(SequenceModel):
    """A user model: embedding + causal running mean + head, built from the shared pieces."""

    class Size(ModelSize):
        d_model: int = 8

    def __init__(self, spec, size=None, **fields):
        super().__init__()
        self.spec, self.size = spec, self.Size.of(size, fields)
        self.embed = InputEmbedding(spec, self.size.d_model)
        self.head = OutputHead(spec, self.size.d_model, embedding=self.embed)

    def forward(self, inputs, cache=False):
        h = self.embed(inputs)  # (B,T,d)
        h = h.cumsum(1) / torch.arange(1, h.shape[1] + 1)[:, None]
        return self.head(h)

    def state_size(self, T):
        return self.head.proj.in_features if self.head.proj is not None else 8


def test_import_string_and_register():
    spec = tasks.make("bijection").spec
    with pytest.raises(ValueError, match="trust_code=True"):  # an import string is code: opt in
        models.make(f"{__name__}:TinyUserModel", spec, d_model=4)
    model = models.make(f"{__name__}:TinyUserModel", spec, d_model=4, trust_code=True)
    assert isinstance(model, TinyUserModel) and model(torch.zeros(1, 3, dtype=torch.long)).shape == (1, 3, 20)
    models.register("tiny-user-test", TinyUserModel, overwrite=True)
    assert isinstance(models.make("tiny-user-test", spec), TinyUserModel)
    with pytest.raises(ValueError, match="declares no size"):  # an architecture must type its size
        models.register("untyped-user-test", lambda spec, **kw: TinyUserModel(spec, **kw))
    with pytest.raises(ValueError, match="cannot import"):
        models.make(f"{__name__}:Missing", spec, trust_code=True)


def test_transformer_head_and_layer_ablation():
    model = build("transformer", "bijection")
    x = random_inputs(model.spec, 2, 11)
    with torch.no_grad():
        base, cache = model.run_with_cache(x, names=["blocks.1.resid_post"])
        with model.ablate(layers={0}, parts="block"):
            _, abl = model.run_with_cache(x, names=["blocks.0.resid_pre", "blocks.0.resid_post"])
        torch.testing.assert_close(abl["blocks.0.resid_post"], abl["blocks.0.resid_pre"])
        with model.ablate(heads={(0, 1)}):
            one_head = model(x)
        assert not torch.allclose(one_head, base)
        # zeroing a head equals removing its slice of the output projection
        W = model.blocks[0].attn.out_proj.weight
        saved = W.detach().clone()
        W[:, 16:32] = 0  # smoke: 2 heads x 16
        torch.testing.assert_close(model(x), one_head)
        W.copy_(saved)
        with model.ablate(layers={1}, parts="mlp"):
            _, no_mlp = model.run_with_cache(x, names=["blocks.1.resid_post", "blocks.1.resid_mid"])
        # layer 1 without its MLP: resid after = resid before + attention output only
        assert not torch.allclose(no_mlp["blocks.1.resid_post"], cache["blocks.1.resid_post"])
        torch.testing.assert_close(no_mlp["blocks.1.resid_post"], no_mlp["blocks.1.resid_mid"])
        torch.testing.assert_close(model(x), base)  # restored after the context
    with pytest.raises(ValueError, match="heads"), model.ablate(heads={(0, 7)}):
        pass


@pytest.mark.parametrize("arch", ["mamba", "lstm", "mlp", "mlp-pointwise"])
def test_layer_ablation_makes_identity(arch):
    model = build(arch, "bijection")
    x = random_inputs(model.spec, 2, 7)
    with torch.no_grad(), model.ablate(layers={1}):
        _, cache = model.run_with_cache(x, names=["blocks.1.resid_pre", "blocks.1.resid_post"])
    torch.testing.assert_close(cache["blocks.1.resid_post"], cache["blocks.1.resid_pre"])
    with pytest.raises(ValueError, match="parts"), model.ablate(layers={0}, parts="attn"):
        pass


def test_transformer_init_std():
    spec = tasks.make("hmm").spec
    torch.manual_seed(0)
    wide = models.make("transformer", spec, n_layers=2, n_heads=2, d_model=64, init_std=0.06)
    torch.manual_seed(0)
    default = models.make("transformer", spec, n_layers=2, n_heads=2, d_model=64)
    qkv = wide.blocks[0].attn.qkv.weight.detach()
    assert abs(float(qkv.std()) - 0.06) < 0.003
    assert abs(float(default.blocks[0].attn.qkv.weight.detach().std()) - 0.02) < 0.001
    # residual projections keep GPT-2's 1/sqrt(2 L) scaling of the chosen std
    assert abs(float(wide.blocks[0].attn.out_proj.weight.detach().std()) - 0.06 / 2) < 0.003
    with pytest.raises(ValueError, match="init_std"):
        models.make("transformer", spec, n_layers=1, n_heads=1, d_model=8, init_std=0)


@pytest.mark.parametrize("arch", ARCHS)
def test_logit_scale_multiplies_the_class_logits_by_a_learned_exp(arch):
    plain = build(arch, "bijection")
    scaled = build(arch, "bijection", logit_scale=True)
    assert scaled.head.log_scale is not None and plain.head.log_scale is None
    assert sum(p.numel() for p in scaled.parameters()) == sum(p.numel() for p in plain.parameters()) + 1
    x = random_inputs(plain.spec, 2, plain.spec.seq_len)
    scaled.load_state_dict({**plain.state_dict(), "head.log_scale": torch.tensor(0.7)})
    with torch.no_grad():
        torch.testing.assert_close(scaled(x), plain(x) * torch.tensor(0.7).exp())
    assert build(arch, "regression", logit_scale=True).head.log_scale is None  # no logits to scale


def test_attention_sink_lets_a_head_sum_instead_of_average():
    model = build("transformer", "bijection", attn_sink=True)
    attn = model.blocks[0].attn
    x = random_inputs(model.spec, 2, 5)
    names = ["blocks.0.attn.pattern", "blocks.0.attn.out"]
    with torch.no_grad():
        attn.sink.fill_(-30.0)  # a sink nobody attends to: plain causal softmax
        _, off = model.run_with_cache(x, names=names)
        torch.testing.assert_close(off["blocks.0.attn.pattern"].sum(-1), torch.ones(2, attn.n_heads, 5))
        plain = build("transformer", "bijection")
        plain.load_state_dict({k: v for k, v in model.state_dict().items() if not k.endswith(".sink")})
        torch.testing.assert_close(off["blocks.0.attn.out"], plain.run_with_cache(x, names=names)[1][names[1]])
        attn.sink.fill_(3.0)  # a strong sink takes mass from every row: each token's weight no longer sums to 1
        _, on = model.run_with_cache(x, names=names)
        assert (on["blocks.0.attn.pattern"].sum(-1) < 0.9).all()
    causal_ok = model.eval()
    xs = random_inputs(causal_ok.spec, 1, causal_ok.spec.seq_len)
    ys = xs.clone()
    ys[0, -1] = (ys[0, -1] + 1) % causal_ok.spec.vocab_size
    with torch.no_grad():
        torch.testing.assert_close(causal_ok(xs)[:, :-1], causal_ok(ys)[:, :-1])  # still causal


@pytest.mark.parametrize("arch", ARCHS)
def test_forward_from_a_cached_stream_equals_the_whole_pass(arch):
    """`forward_from(l, resid_pre of l)` is the rest of `forward`, under ablations of layer l or later too: the
    ablation probe's shortcut (geometry/ablation.py) gives the numbers of a whole ablated pass, bit for bit."""
    model = build(arch, "hmm")
    x = random_inputs(model.spec, 3, 9)
    names = [f"blocks.{l}.resid_pre" for l in range(model.n_layers)]
    with torch.no_grad():
        out, cache = model.run_with_cache(x, names=names)
        for l in range(model.n_layers):
            assert torch.equal(model.forward_from(l, cache[names[l]]), out)
            with model.ablate(layers={l}, parts="mlp" if arch == "transformer" else "block"):
                assert torch.equal(model.forward_from(l, cache[names[l]]), model(x))
        if arch == "transformer":
            with model.ablate(heads={(1, 0)}):
                assert torch.equal(model.forward_from(1, cache[names[1]]), model(x))


def test_ablation_probe_takes_the_shortcut_with_the_same_numbers():
    """geometry.ablation.ablations with and without `forward_from`: the same dictionary, number for number."""
    from windtunnel.geometry.ablation import ablations
    from windtunnel.geometry.data import heldout_batch

    task = tasks.make("hmm")
    model = build("transformer", "hmm")
    batch = heldout_batch(task, 8)
    fast, slow = ablations(model, batch), ablations(model, batch, shortcut=False)
    assert fast == slow and len(fast["heads"]) == model.n_layers
