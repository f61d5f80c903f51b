"""Muon's groups per architecture (`optim.muon_blocks`, `optim.describe`), `BlockMuon` against torch.optim.Muon, its
checkpoint round trip, and the run header and trained.json that say which optimiser trains what."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from windtunnel import models, tasks
from windtunnel.config import validate
from windtunnel.models import presets
from windtunnel.runs import checkpoints
from windtunnel.runs.resume import TRAINED
from windtunnel.training.optim import BlockMuon, MultiOptimizer, describe, is_conv1d, make_optimizer
from windtunnel.training.train import start_line, train

MUON = validate({"train": {"optimizer": "muon", "weight_decay": 0.1}})


def build(arch: str, task: str = "hmm", **extra) -> nn.Module:
    torch.manual_seed(0)
    return models.make(arch, tasks.make(task).spec, presets.preset(task, arch, "smoke"), **extra)


def split(model: nn.Module) -> tuple[dict[str, list[int]], set[str], set[str]]:
    """describe()'s Muon matrices with their blocks, AdamW's decayed and undecayed names; every parameter once."""
    d = describe(model, MUON)
    muon, decay, no_decay = d["muon"], set(d["adamw"]["decay"]), set(d["adamw"]["no_decay"])
    assert sorted([*muon, *decay, *no_decay]) == sorted(n for n, _ in model.named_parameters())
    return muon, decay, no_decay


# --- groups per architecture ---------------------------------------------------------------------------------


def test_transformer_splits_its_fused_qkv_into_q_k_and_v():
    model = build("transformer")
    muon, decay, no_decay = split(model)
    d = model.d_model
    for l in range(model.n_layers):
        assert muon[f"blocks.{l}.attn.qkv.weight"] == [d, d, d]  # (3d, d) laid out [q; k; v]
        for name in ("attn.out_proj", "mlp.fc1", "mlp.out_proj"):
            assert len(muon[f"blocks.{l}.{name}.weight"]) == 1
    assert len(muon) == 4 * model.n_layers
    assert all(n.startswith(("embed.", "head.")) for n in decay)  # AdamW decays only the edge matrices
    assert {"embed.tok.weight", "embed.pos.weight"} <= no_decay and "blocks.0.norm1.weight" in no_decay


def test_lstm_orthogonalises_every_gate_of_both_matrices_on_its_own():
    """The LSTM trained with AdamW alone under optimizer=muon before (no nn.Linear inside its layers)."""
    model = build("lstm")
    muon, _, no_decay = split(model)
    d = model.d_model
    want = {f"layers.{l}.weight_{w}_l0": [d] * 4 for l in range(model.n_layers) for w in ("ih", "hh")}  # i, f, g, o
    assert muon == want
    assert {f"layers.0.bias_{w}_l0" for w in ("ih", "hh")} <= no_decay


@pytest.mark.parametrize("variant", ["reference", "paper"])
def test_mamba_keeps_dt_proj_conv_a_log_and_d_on_adamw(variant):
    model = build("mamba", variant=variant)
    muon, decay, no_decay = split(model)
    block = model.blocks[0]
    di, n, r = block.d_inner, block.d_state, block.dt_rank
    assert muon["blocks.0.in_proj.weight"] == [di, di]  # [u; z]
    assert muon["blocks.0.x_proj.weight"] == [r, n, n]  # [dt; B; C]
    assert muon["blocks.0.out_proj.weight"] == [model.d_model]
    assert not any(k.endswith(("dt_proj.weight", "conv.weight", "A_log", ".D")) for k in muon)
    assert {"blocks.0.dt_proj.weight", "blocks.0.conv.weight"} <= decay  # rank-dt_rank / depthwise: AdamW, decayed
    assert {"blocks.0.A_log", "blocks.0.D", "blocks.0.dt_proj.bias", "blocks.0.conv.bias"} <= no_decay


@pytest.mark.parametrize("arch", ["mlp", "mlp-pointwise"])
def test_mlps_give_muon_their_feed_forward_matrices(arch):
    model = build(arch)
    muon, decay, _ = split(model)
    want = {f"blocks.{l}.{k}.weight" for l in range(model.n_layers) for k in ("fc1", "out_proj")}
    assert set(muon) == want and all(len(b) == 1 for b in muon.values())
    if arch == "mlp":  # the prefix embedding's (max_len, d_emb, d) slot weights and the untied head stay on AdamW
        assert {"embed.weight", "head.proj.weight"} <= decay


class Conv1D(nn.Module):
    """Hugging Face's Conv1D: weight (in, out), x @ W + b."""

    def __init__(self, nf: int, nx: int) -> None:
        super().__init__()
        self.nf, self.nx = nf, nx
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.bias, x.reshape(-1, self.nx), self.weight).view(*x.shape[:-1], self.nf)


class Transposed(Conv1D):
    """The same layout under another class name: found by its nx, nf and (nx, nf) weight."""


class Plugin(nn.Module):
    """A plugin-like model: Conv1D layers, torch's attention and GRU, a raw matrix of unknown use, an embedding."""

    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.emb = nn.Embedding(11, d)
        self.c_fc = Conv1D(4 * d, d)  # (d, 4d)
        self.c_proj = Transposed(d, 4 * d)  # (4d, d)
        self.attn = nn.MultiheadAttention(d, 2)
        self.gru = nn.GRU(d, d)
        self.table = nn.Parameter(torch.randn(d, d))  # not a layer Muon knows: AdamW
        self.norm = nn.LayerNorm(d)


def test_a_plugin_s_conv1d_attention_and_gru_go_to_muon_by_block():
    model = Plugin()
    assert is_conv1d(model.c_fc) and is_conv1d(model.c_proj) and not is_conv1d(nn.Conv1d(2, 2, 3))
    muon, decay, no_decay = split(model)
    assert muon == {
        "c_fc.weight": [8],
        "c_proj.weight": [32],
        "attn.in_proj_weight": [8, 8, 8],  # [q; k; v]
        "attn.out_proj.weight": [8],
        "gru.weight_ih_l0": [8, 8, 8],  # r, z, n
        "gru.weight_hh_l0": [8, 8, 8],
    }
    assert decay == {"table"} and {"emb.weight", "norm.weight", "c_fc.bias", "gru.bias_hh_l0"} <= no_decay
    assert describe(model, MUON)["summary"] == "muon: 6 matrices (12 blocks); adamw: 10 tensors (1 decayed)"


def test_muon_with_no_hidden_matrix_is_refused():
    model = nn.Sequential(nn.Embedding(5, 4), nn.LayerNorm(4))
    with pytest.raises(ValueError, match=r"train\.optimizer: muon has no hidden matrix"):
        make_optimizer(model, MUON)
    assert describe(model, validate({"train": {"optimizer": "adamw"}}))["muon"] == {}


# --- BlockMuon -----------------------------------------------------------------------------------------------


def _steps(opts: list[torch.optim.Optimizer], params: list[list[nn.Parameter]], grads: list[torch.Tensor]) -> None:
    """One step per gradient: param lists[i] get gradient g (or its row blocks, as the lists' shapes split it)."""
    for g in grads:
        for ps in params:
            for p, gp in zip(ps, g.split([p.shape[0] for p in ps]), strict=True):
                p.grad = gp.clone()
        for o in opts:
            o.step()


@pytest.mark.parametrize("shape", [(24, 16), (16, 40)])
@pytest.mark.parametrize("nesterov", [True, False])
def test_an_unsplit_matrix_steps_as_torch_muon(shape, nesterov):
    torch.manual_seed(0)
    w = torch.randn(shape)
    ours, theirs = nn.Parameter(w.clone()), nn.Parameter(w.clone())
    kw = {"lr": 0.02, "weight_decay": 0.1, "nesterov": nesterov}
    opts = [BlockMuon([ours], **kw), torch.optim.Muon([theirs], adjust_lr_fn="match_rms_adamw", **kw)]
    _steps(opts, [[ours], [theirs]], [torch.randn(shape) for _ in range(4)])
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-7)
    assert not torch.equal(ours, nn.Parameter(w))
    # the same optimiser-state layout as torch's (checkpoints store both alike)
    ours_sd, theirs_sd = opts[0].state_dict(), opts[1].state_dict()
    assert ours_sd["param_groups"][0].keys() == theirs_sd["param_groups"][0].keys()
    assert ours_sd["state"][0].keys() == theirs_sd["state"][0].keys() == {"momentum_buffer"}


@pytest.mark.parametrize("blocks", [(8, 8, 8), (2, 5, 5)])
def test_a_block_split_step_is_muon_on_each_block_separately(blocks):
    torch.manual_seed(1)
    w = torch.randn(sum(blocks), 12)
    whole = nn.Parameter(w.clone())
    parts = [nn.Parameter(b.clone()) for b in w.split(blocks)]
    opts = [BlockMuon([(whole, blocks)], lr=0.05, weight_decay=0.1), BlockMuon(parts, lr=0.05, weight_decay=0.1)]
    _steps(opts, [[whole], parts], [torch.randn_like(w) for _ in range(3)])
    assert torch.equal(whole.detach(), torch.cat([p.detach() for p in parts]))
    unsplit = nn.Parameter(w.clone())  # and it is not the same as orthogonalising the whole matrix
    _steps([BlockMuon([unsplit], lr=0.05, weight_decay=0.1)], [[unsplit]], [torch.randn_like(w) for _ in range(1)])
    assert not torch.allclose(unsplit, whole)


def test_block_sizes_must_split_the_rows():
    with pytest.raises(ValueError, match=r"row blocks \[4, 4\] .*\(9, 3\)"):
        BlockMuon([(nn.Parameter(torch.zeros(9, 3)), (4, 4))])


@pytest.mark.parametrize("arch", ["transformer", "lstm"])
def test_checkpointed_optimiser_state_continues_identically(tmp_path, arch):
    """Save after two steps, load into a fresh model and optimiser: the next steps are bitwise those of the run that
    went on (MultiOptimizer.state_dict / load_state_dict through the checkpoint files)."""
    spec = tasks.make("hmm").spec
    x = torch.randint(0, spec.vocab_size, (3, 12), generator=torch.Generator().manual_seed(0))

    def step(model: nn.Module, opt: MultiOptimizer) -> None:
        opt.zero_grad()
        model(x).logsumexp(-1).mean().backward()
        opt.step()

    model = build(arch)
    opt = make_optimizer(model, MUON)
    assert isinstance(opt, MultiOptimizer) and isinstance(opt.optimizers[0], BlockMuon)
    for _ in range(2):
        step(model, opt)
    checkpoints.save_checkpoint(tmp_path, 2, model, opt)
    again = build(arch)
    again_opt = make_optimizer(again, MUON)
    checkpoints.load_checkpoint(tmp_path, 2, again, again_opt)
    assert isinstance(again_opt, MultiOptimizer)
    for _ in range(2):
        step(model, opt)
        step(again, again_opt)
    for (n, a), b in zip(model.state_dict().items(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b), n


# --- said out loud -------------------------------------------------------------------------------------------


def test_the_header_and_trained_json_name_muon_s_groups(tmp_path):
    cfg = {
        "task": {"name": "hmm", "params": {"K": 6, "S": 3, "O": 3}},
        "model": {"arch": "lstm", "preset": "smoke"},
        "train": {"optimizer": "muon", "steps": 2, "batch_size": 2, "eval_every": 0, "eval_size": 2},
        "eval": {"n": 4},
    }
    lines: list[str] = []
    train(cfg, tmp_path / "run", progress=False, echo=lines.append)
    record = json.loads((tmp_path / "run" / TRAINED).read_text())["optimizer"]
    assert record["optimizer"] == "muon" and len(record["muon"]) == 4 and record["adamw"]["no_decay"]
    assert all(blocks == [32] * 4 for blocks in record["muon"].values())  # 2 layers x (ih, hh), 4 gates of d=32
    (line,) = lines
    assert "· muon lr 0.0003 cosine, warmup 100 · " + record["summary"] + " · seed 0 · cpu" in line
    assert record["summary"].startswith("muon: 4 matrices (16 blocks); adamw: ")
    model = build("lstm")
    assert "muon:" not in start_line(validate({"train": {"optimizer": "adamw"}}), model, torch.device("cpu"))


def test_muon_without_a_hidden_matrix_stops_before_the_run_directory(tmp_path):
    cfg = {
        "task": {"name": "hmm", "params": {"K": 6, "S": 3, "O": 3}},
        "model": {"arch": "mlp-pointwise", "preset": "smoke", "size": {"n_layers": 0}},
        "train": {"optimizer": "muon", "steps": 2, "batch_size": 2},
    }
    with pytest.raises(ValueError, match=r"train\.optimizer: muon has no hidden matrix"):
        train(cfg, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()
