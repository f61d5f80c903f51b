"""Weight init (`model.size.init`): "torch" is PyTorch's own default init of every module, as in the authors' code;
"normal" is the N(0, std) init the models always had; the paper Mamba variant defaults to "torch"."""

from __future__ import annotations

import functools
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from windtunnel import models, tasks
from windtunnel.models import presets
from windtunnel.models.common import INIT_STD, init_weights, scale_residual_projections

VARIANTS = [
    ("transformer", {}),
    ("mamba", {}),
    ("mamba", {"variant": "paper"}),
    ("lstm", {}),
    ("mlp", {}),
    ("mlp-pointwise", {}),
]
IDS = [a + "-" + "-".join(e.values()) if e else a for a, e in VARIANTS]
# Parameters an architecture defines itself, not a PyTorch module's default: Mamba's SSM parameters (the block's
# init under either mode), the prefix MLP's slot weights (checked on their own below), learned scalars.
OWN = (".A_log", ".D", ".dt_proj.weight", ".dt_proj.bias", "embed.weight", "embed.bias", "log_scale", ".sink")


def build(arch: str, task: str, seed: int = 0, **extra) -> nn.Module:
    torch.manual_seed(seed)
    return models.make(arch, tasks.make(task).spec, presets.preset(task, arch, "smoke"), **extra)


def torch_default(m: nn.Module) -> tuple[nn.Module, float] | None:
    """A freshly built PyTorch module of the same kind and shape as `m`, and the bound of its uniform init
    (1/sqrt(fan_in); 0 for a normal or constant init); None for other modules."""
    if isinstance(m, nn.Embedding):
        return nn.Embedding(m.num_embeddings, m.embedding_dim), 0.0
    if isinstance(m, nn.Linear):
        return nn.Linear(m.in_features, m.out_features, bias=m.bias is not None), 1 / math.sqrt(m.in_features)
    if isinstance(m, nn.LSTM):
        return nn.LSTM(m.input_size, m.hidden_size, batch_first=True), 1 / math.sqrt(m.hidden_size)
    if isinstance(m, nn.Conv1d):
        fan_in = m.in_channels // m.groups * m.kernel_size[0]
        ref = nn.Conv1d(m.in_channels, m.out_channels, m.kernel_size, groups=m.groups, padding=m.padding)
        return ref, 1 / math.sqrt(fan_in)
    if isinstance(m, (nn.LayerNorm, nn.RMSNorm)):
        return type(m)(m.normalized_shape), 0.0
    return None


@pytest.mark.parametrize("task", ["bijection", "regression"])
@pytest.mark.parametrize("arch,extra", VARIANTS, ids=IDS)
def test_torch_init_matches_pytorch_defaults(arch, extra, task):
    """Every parameter of every module has the statistics of the same module freshly built by PyTorch: Embedding
    N(0,1), Linear/Conv/LSTM U(+-1/sqrt(fan_in)) (std 1/sqrt(3 fan_in)), norms ones and zeros. The paper Mamba
    variant gets this without asking."""
    init = {} if extra.get("variant") == "paper" else {"init": "torch"}
    model = build(arch, task, **extra, **init)
    assert model.size.init == "torch"
    torch.manual_seed(1)  # the references draw other numbers: statistics are compared, not values
    checked = set()
    for name, m in model.named_modules():
        ref = torch_default(m)
        if ref is None or name.endswith("dt_proj"):
            continue
        ref_module, bound = ref
        for pname, want in ref_module.named_parameters():
            got, want = getattr(m, pname).detach(), want.detach()
            where = f"{name}.{pname}"
            assert got.shape == want.shape, where
            if want.std() == 0:  # constant init: norms' ones and zeros
                assert torch.equal(got, want), where
                checked.add(where)
                continue
            n, sd = got.numel(), bound / math.sqrt(3) if bound else 1.0  # the init's std: uniform, or N(0,1)
            assert abs(float(got.std() / want.std()) - 1) < 0.05 + 3 / math.sqrt(n), where  # two sampled stds
            assert abs(float(got.std()) / sd - 1) < 0.05 + 3 / math.sqrt(n), where
            assert abs(float(got.mean())) < 4 * sd / math.sqrt(n), where
            if bound:
                assert float(got.abs().max()) <= bound, where
            checked.add(where)
    named = {n for n, _ in model.named_parameters()}
    assert all(n.endswith(OWN) for n in named - checked), sorted(named - checked)
    if arch == "mlp":  # the prefix slots are one Linear(max_len * d_emb, d_model), split: its default init
        emb = model.embed
        bound = 1 / math.sqrt(emb.weight.shape[0] * emb.weight.shape[1])  # weight (max_len, d_emb, d_model)
        for p in (emb.weight.detach(), emb.bias.detach()):
            assert float(p.abs().max()) <= bound and abs(float(p.std()) * math.sqrt(3) / bound - 1) < 0.3


@pytest.mark.parametrize("arch,extra", VARIANTS, ids=IDS)
def test_normal_init_is_n0_std_with_scaled_residual_projections(arch, extra):
    """init="normal" (every architecture's default but the paper Mamba's): N(0, 0.02) Linear/Embedding weights, zero
    biases, residual out_proj at 0.02/sqrt(2 L) in the transformer and MLPs; the default needs no field."""
    model = build(arch, "bijection", **extra, **({"init": "normal"} if extra else {}))
    assert model.size.init == "normal"
    scaled = arch in ("transformer", "mlp", "mlp-pointwise")
    for name, m in model.named_modules():
        if not isinstance(m, (nn.Linear, nn.Embedding)) or name.endswith("dt_proj"):
            continue
        std = INIT_STD / math.sqrt(2 * model.n_layers) if scaled and name.endswith("out_proj") else INIT_STD
        w = m.weight.detach()
        assert abs(float(w.std()) / std - 1) < 0.05 + 3 / math.sqrt(w.numel()) and abs(float(w.mean())) < std, name
        if getattr(m, "bias", None) is not None:
            assert not m.bias.any(), name


@pytest.mark.parametrize("arch", ["transformer", "lstm", "mlp-pointwise"])
def test_normal_init_is_the_torch_init_overwritten_as_before(arch):
    """init="normal" draws exactly what the models drew before `init` existed: the constructors' PyTorch init, then
    N(0, std) on Linear/Embedding weights and GPT-2's scaled residual projections, from the same seed."""
    normal = build(arch, "hmm", seed=3)
    old = build(arch, "hmm", seed=3, init="torch")
    with torch.no_grad():
        old.apply(functools.partial(init_weights, std=INIT_STD))
        if arch != "lstm":
            scale_residual_projections(old, old.n_layers)
    a, b = normal.state_dict(), old.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("variant", ["reference", "paper"])
def test_mamba_ssm_parameters_keep_the_blocks_init_under_both_inits(variant):
    normal, torch_init = (build("mamba", "bijection", variant=variant, init=i) for i in ("normal", "torch"))
    assert models.size_class("mamba")(variant=variant).init == ("torch" if variant == "paper" else "normal")
    for a, b in zip(normal.blocks, torch_init.blocks, strict=True):
        assert torch.equal(a.A_log, b.A_log) and torch.equal(a.D, b.D)
        for block in (a, b):
            w, bias = block.dt_proj.weight.detach(), block.dt_proj.bias.detach()
            if variant == "paper":  # the authors' U(-0.01, 0.01) weight and bias 0.1
                assert float(w.abs().max()) <= 0.01 and torch.all(bias == 0.1)
            else:  # Mamba's inverse-softplus dt bias: softplus(bias) in [dt_min, dt_max]
                assert float(w.abs().max()) <= block.dt_rank**-0.5
                dt = F.softplus(bias)
                assert float(dt.min()) >= 1e-4 and float(dt.max()) <= 0.1 + 1e-6


def test_init_field_resolves_and_rejects_bad_values():
    Size = models.size_class("mamba")
    assert Size(variant="paper").as_config() == {"variant": "paper"}  # derived, not given
    assert Size(variant="paper").as_config(resolved=True) == {"variant": "paper", "init": "torch"}
    assert Size(variant="paper", init="normal").init == "normal"  # an explicit value wins
    assert Size.of(Size(), {"variant": "paper"}).init == "torch"  # re-derived after a merge
    for arch in ("transformer", "lstm", "mlp", "mlp-pointwise"):
        assert models.size_class(arch)().init == "normal"
    with pytest.raises(ValueError, match=r"model\.size\.init: .*'normal' or 'torch'"):
        Size.of({"init": "xavier"}, where="model.size.")
    with pytest.raises(ValueError, match="init_std"):
        models.size_class("transformer").of({"init": "torch", "init_std": 0.05})


def test_g3_bijection_transformer_starts_at_the_authors_step_one_loss():
    """The authors' G3 model (6 x 6 x 192, tied head, 40-token vocab, 37 positions; official-code.md section 6.1)
    starts at a loss of 125.5 under PyTorch's init: their cross-entropy is over all 40 tied logits, where the query
    key's own embedding row dominates. N(0, 0.02) starts near ln 40."""
    task = tasks.make("bijection")
    assert (task.spec.vocab_size, task.spec.seq_len) == (40, 37)
    batch = task.sample(32, seed=0)
    mask, targets = batch.target_mask, batch.targets[batch.target_mask] + task.spec.answer_token_offset
    losses = {}
    for init in ("torch", "normal"):
        torch.manual_seed(0)
        model = models.make("transformer", task.spec, presets.preset("bijection", "transformer", "paper"), init=init)
        with torch.no_grad():
            _, cache = model.run_with_cache(batch.inputs, names=["final"])
            logits = cache["final"] @ model.embed.token_weight.t()  # (B,T,40): the authors' full tied head
        losses[init] = F.cross_entropy(logits[mask], targets).item()
    assert 100 < losses["torch"] < 150, losses
    assert abs(losses["normal"] - math.log(40)) < 0.3, losses
