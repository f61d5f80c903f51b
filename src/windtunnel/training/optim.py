"""Optimisers and learning-rate schedules of the training loop (`train.optimizer`, `train.schedule`).

`make_optimizer(model, cfg)` builds AdamW, or Muon (`BlockMuon`) for the hidden weight matrices beside AdamW for
everything else; `describe(model, cfg)` says which parameter goes where (the run header and trained.json print it);
`lr_at(step, cfg)` is the learning rate of update `step` (1-based) under warmup + cosine / constant / warmup-stable-
decay. All are pure functions of the model and the config, so a resumed run continues the same optimiser and schedule.

Muon's hidden matrices, per architecture (`muon_blocks`): every `nn.Linear` and Hugging Face-style `Conv1D` weight
outside the input embedding and output head, and the weights of `nn.LSTM`/`nn.GRU`/`nn.RNN` and
`nn.MultiheadAttention`. A matrix that stacks separate maps along its rows is orthogonalised block by block: the
gates of a recurrent layer (i, f, g, o of an LSTM), the built-in attention's q, k and v, `MultiheadAttention`'s
in_proj, Mamba's in_proj [u; z] and x_proj [dt; B; C]. AdamW keeps the embeddings, heads, norms, biases, every
parameter marked `no_weight_decay` (Mamba's A_log and D), Mamba's depthwise conv and its rank-dt_rank `dt_proj`.
A module may state the layout of its own matrices: `module.muon_layout()` -> {parameter name under it: row block
sizes, a `Split` (blocks by columns, or interleaved: GPT-2's Conv1D c_attn, GPT-NeoX's per-head fused QKV), or None
(AdamW)}; the Hugging Face architectures do (`models.hf`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import torch
from torch import nn

from windtunnel.config import RunConfig
from windtunnel.models.common import InputEmbedding, OutputHead, Split, decays
from windtunnel.models.mamba import MambaBlock
from windtunnel.models.transformer import CausalSelfAttention
from windtunnel.resolve import aux_text

# Newton-Schulz quintic of torch.optim.Muon (torch 2.13, torch/optim/_muon.py; Keller Jordan's Muon constants)
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
NS_STEPS = 5
NS_EPS = 1e-7
GATES = {"LSTM": 4, "GRU": 3}  # nn.RNNBase stacks its gates along the rows of weight_ih_l*/weight_hh_l*


class MultiOptimizer:
    """Several optimisers stepped as one, with one `param_groups` list (the schedule sets every group's lr) and one
    state dict in the single-optimiser layout the checkpoint files store (parameter ids numbered across them)."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]) -> None:
        self.optimizers = optimizers

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [g for o in self.optimizers for g in o.param_groups]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for o in self.optimizers:
            o.step()

    def state_dict(self) -> dict[str, Any]:
        state, groups, offset = {}, [], 0
        for o in self.optimizers:
            sd = o.state_dict()
            state.update({pid + offset: st for pid, st in sd["state"].items()})
            groups += [{**g, "params": [p + offset for p in g["params"]]} for g in sd["param_groups"]]
            offset += sum(len(g["params"]) for g in sd["param_groups"])
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        groups, offset = list(sd["param_groups"]), 0
        for o in self.optimizers:
            mine, groups = groups[: len(o.param_groups)], groups[len(o.param_groups) :]
            n = sum(len(g["params"]) for g in mine)
            o.load_state_dict(
                {
                    "state": {pid - offset: st for pid, st in sd["state"].items() if offset <= int(pid) < offset + n},
                    "param_groups": [{**g, "params": [p - offset for p in g["params"]]} for g in mine],
                }
            )
            offset += n


# ---------------------------------------------------------------------------------------------- Muon


def orthogonalise(
    g: torch.Tensor, coefficients: Sequence[float] = NS_COEFFICIENTS, steps: int = NS_STEPS
) -> torch.Tensor:
    """torch.optim.Muon's Newton-Schulz quintic in bfloat16: g = U S V^T (r,c) -> about U S' V^T, S' in ~[0.5, 1.5].
    Transpose-equivariant, so a matrix stored (in, out) is orthogonalised as its (out, in) transpose would be."""
    a, b, c = coefficients
    tall = g.shape[0] > g.shape[1]
    x = g.bfloat16().T if tall else g.bfloat16()  # (m,n), m <= n
    x = x / x.norm().clamp(min=NS_EPS)  # spectral norm <= 1 (out of place: g may be a bfloat16 momentum buffer)
    for _ in range(steps):
        gram = x @ x.T  # (m,m)
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)  # (a + b X X^T + c (X X^T)^2) X
    return x.T if tall else x


Layout = tuple[int, ...] | Split  # a hidden matrix's blocks: row block sizes, or a Split


def block_sizes(layout: Layout) -> tuple[int, ...]:
    """The sizes of a layout's blocks (row block sizes as they are)."""
    return layout.block_sizes() if isinstance(layout, Split) else tuple(layout)


class BlockMuon(torch.optim.Optimizer):
    """Muon whose matrices may stack separate maps along their rows: each row block (an LSTM gate, attention's q, k or
    v) is orthogonalised on its own, at its own lr 0.2 sqrt(max(rows, cols)) * lr. An unsplit matrix steps exactly as
    `torch.optim.Muon(adjust_lr_fn="match_rms_adamw")`: nesterov momentum, the same Newton-Schulz, decoupled weight
    decay lr*wd, the same param_groups keys and "momentum_buffer" state, so checkpoints keep torch's layout.

    `params`: 2-D parameters, or (parameter, row block sizes summing to its rows, or a `Split`) pairs: a Split's
    blocks (columns, or rows interleaved per head) are gathered, orthogonalised and written back in place the same
    way. The split is the model's, not the optimiser state's, so it is not in `state_dict` (the caller builds it
    again from the model).
    """

    def __init__(
        self,
        params: Iterable[nn.Parameter | tuple[nn.Parameter, Sequence[int] | Split]],
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_coefficients: tuple[float, float, float] = NS_COEFFICIENTS,
        eps: float = NS_EPS,
        ns_steps: int = NS_STEPS,
    ) -> None:
        pairs = [(p, Split((p.shape[0],))) if isinstance(p, torch.Tensor) else (p[0], _as_split(p[1])) for p in params]
        for p, split in pairs:
            if not split.fits(p):
                what = list(split.sizes) if split == Split(split.sizes) else split
                raise ValueError(f"BlockMuon: row blocks {what} do not split a matrix of shape {tuple(p.shape)}")
        self.blocks = {p: split for p, split in pairs}  # keyed by the parameter object, as Optimizer.state is
        defaults = dict(
            lr=lr,
            weight_decay=weight_decay,
            momentum=momentum,
            nesterov=nesterov,
            ns_coefficients=ns_coefficients,
            eps=eps,
            ns_steps=ns_steps,
            adjust_lr_fn="match_rms_adamw",  # torch.optim.Muon's key, fixed: the same group layout in checkpoints
        )
        super().__init__([p for p, _ in pairs], defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One update of every parameter that has a gradient; `closure` as in torch.optim.Optimizer.step."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, mu = group["lr"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - mu)
                update = p.grad.lerp(buf, mu) if group["nesterov"] else buf  # (rows, cols)
                p.mul_(1 - lr * group["weight_decay"])
                split = self.blocks[p]
                for block, u in zip(split.views(p), split.views(update), strict=True):  # views of p: stepped in place
                    u = u.flatten(split.dim, split.dim + 1)  # the block as a matrix (a copy where interleaved)
                    ortho = orthogonalise(u, group["ns_coefficients"], group["ns_steps"])
                    ortho = ortho.unflatten(split.dim, (split.repeat, -1))
                    block.add_(ortho, alpha=-(lr * (0.2 * math.sqrt(max(u.shape)))))  # match_rms_adamw, per block
        return loss


def _as_split(layout: Sequence[int] | Split) -> Split:
    return layout if isinstance(layout, Split) else Split(tuple(int(s) for s in layout))


# ---------------------------------------------------------------------------------------------- who trains where


def is_conv1d(module: nn.Module) -> bool:
    """A Hugging Face-style `Conv1D` (transformers.pytorch_utils), a Linear stored transposed: x @ W + b with W
    (in, out). Detected by its class name, or duck-typed by its int attributes `nx`, `nf` and a weight of (nx, nf)."""
    w = getattr(module, "weight", None)
    if not isinstance(w, torch.Tensor) or w.ndim != 2:
        return False
    duck = tuple(w.shape) == (getattr(module, "nx", None), getattr(module, "nf", None))
    return type(module).__name__ == "Conv1D" or duck


def _own_blocks(module: nn.Module, name: str, p: torch.Tensor) -> tuple[int, ...] | None:
    """Row blocks of `module`'s own parameter `name` where it is a hidden matrix by the module's kind, else None."""
    if p.ndim != 2:
        return None
    if isinstance(module, nn.RNNBase) and name.startswith("weight_"):  # weight_ih/hh stack gates, weight_hr does not
        return _equal(p, GATES.get(module.mode, 1) if name.startswith(("weight_ih", "weight_hh")) else 1)
    if isinstance(module, nn.MultiheadAttention) and name.endswith("proj_weight"):
        return _equal(p, 3 if name == "in_proj_weight" else 1)  # in_proj_weight is [q; k; v]
    if name == "weight" and (isinstance(module, nn.Linear) or is_conv1d(module)):
        return (p.shape[0],)
    return None


def _child_blocks(module: nn.Module) -> dict[str, tuple[int, ...] | None]:
    """The row blocks of Linear children that stack separate maps, by child name; None: a child kept on AdamW (any
    `dt_proj`, Mamba's rank-dt_rank step-size map, in state-spaces' naming)."""
    out: dict[str, tuple[int, ...] | None] = {"dt_proj": None}
    if isinstance(module, CausalSelfAttention):
        out["qkv"] = _equal(module.qkv.weight, 3)  # [q; k; v], (3d, d)
    if isinstance(module, MambaBlock):
        out["in_proj"] = (module.d_inner, module.d_inner)  # [u; z], (2 Di, d)
        out["x_proj"] = (module.dt_rank, module.d_state, module.d_state)  # [dt; B; C], (r + 2N, Di)
    return out


def _equal(p: torch.Tensor, n: int) -> tuple[int, ...]:
    return (p.shape[0] // n,) * n


def muon_blocks(model: nn.Module) -> dict[str, Layout]:
    """The hidden matrices Muon orthogonalises, by parameter name, each with its row block sizes or `Split` (module
    docstring): trainable, outside the input embedding and output head, not marked `no_weight_decay` (Muon decays
    all it holds). A module's own `muon_layout()` overrides what its parameters' kinds say."""
    edge = {id(p) for m in model.modules() if isinstance(m, (InputEmbedding, OutputHead)) for p in m.parameters()}
    chosen: dict[int, Layout | None] = {}
    for m in model.modules():
        for name, p in m.named_parameters(recurse=False):
            chosen.setdefault(id(p), _own_blocks(m, name, p))
    for m in model.modules():  # an architecture's layout of a child overrides the child's own kind
        for child, sizes in _child_blocks(m).items():
            w = getattr(getattr(m, child, None), "weight", None)
            if isinstance(w, nn.Parameter):
                chosen[id(w)] = sizes
    for m in model.modules():  # a model's statement of its own layout overrides both
        layout = getattr(m, "muon_layout", None)
        if callable(layout):
            for name, stated in layout().items():
                chosen[id(m.get_parameter(name))] = stated
    return {
        n: blocks
        for n, p in model.named_parameters()
        if (blocks := chosen.get(id(p))) is not None and p.requires_grad and id(p) not in edge and decays(p)
    }


class _Groups(NamedTuple):
    """Parameters by optimiser, by name, in `model.named_parameters()` order: Muon's with their row blocks, AdamW's
    decayed and not decayed."""

    muon: dict[str, tuple[nn.Parameter, Layout]]
    decay: dict[str, nn.Parameter]
    no_decay: dict[str, nn.Parameter]


def _groups(model: nn.Module, cfg: RunConfig, aux: nn.Module | None = None) -> _Groups:
    """Where each trainable parameter trains under `cfg.train`: AdamW decays matrices only (not norms, biases,
    embeddings, or parameters marked `common.no_weight_decay`), or every parameter with `weight_decay_on="all"` (the
    authors' `AdamW(model.parameters())`); optimizer="muon" moves `muon_blocks` to Muon, and is a ValueError naming
    train.optimizer for a model with no hidden matrix (it would silently train AdamW). The auxiliary head `aux`
    (`train.aux_target`), if any, trains with AdamW after the model's parameters, as `aux_head.<name>`."""
    t = cfg.train
    muon = muon_blocks(model) if t.optimizer == "muon" else {}
    if t.optimizer == "muon" and not muon:
        raise ValueError(
            f"train.optimizer: muon has no hidden matrix to orthogonalise in this {type(model).__name__} (every "
            "parameter would train with AdamW); set train.optimizer=adamw"
        )
    no_decay = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    out = _Groups({}, {}, {})
    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if n in muon:
            out.muon[n] = (p, muon[n])
        elif t.weight_decay_on == "all" or (p.ndim >= 2 and id(p) not in no_decay and decays(p)):
            out.decay[n] = p
        else:
            out.no_decay[n] = p
    for n, p in aux.named_parameters() if aux is not None else ():
        if t.weight_decay_on == "all" or p.ndim >= 2:
            out.decay[f"aux_head.{n}"] = p
        else:
            out.no_decay[f"aux_head.{n}"] = p
    return out


def describe(model: nn.Module, cfg: RunConfig, aux: nn.Module | None = None) -> dict[str, Any]:
    """The optimiser a run trains with, said out loud (run header, trained.json): Muon's matrices by name with their
    row block sizes, AdamW's parameters decayed and not (the auxiliary head's `aux_head.*` among them), a one-line
    `summary`, and where the run has an auxiliary target, `auxiliary`: it in words (`resolve.aux_text`)."""
    g = _groups(model, cfg, aux)
    n_adamw = len(g.decay) + len(g.no_decay)
    n_blocks = sum(len(block_sizes(layout)) for _, layout in g.muon.values())
    muon = f"muon: {len(g.muon)} matrices ({n_blocks} blocks); " if g.muon else ""
    out: dict[str, Any] = {
        "optimizer": cfg.train.optimizer,
        "muon": {n: list(block_sizes(layout)) for n, (_, layout) in g.muon.items()},
        "adamw": {"decay": list(g.decay), "no_decay": list(g.no_decay)},
        "summary": f"{muon}adamw: {n_adamw} tensors ({len(g.decay)} decayed)",
    }
    if cfg.train.aux_target is not None:
        out["auxiliary"] = aux_text(cfg)
    return out


def make_optimizer(
    model: nn.Module, cfg: RunConfig, aux: nn.Module | None = None
) -> torch.optim.Optimizer | MultiOptimizer:
    """AdamW in two groups (decayed, not decayed: one optimiser-state layout either way), and with optimizer="muon"
    a `BlockMuon` before it on the hidden matrices (same lr and weight decay, update RMS matched to AdamW's); the
    auxiliary head `aux`, if any, on AdamW after the model's parameters of each group."""
    t = cfg.train
    g = _groups(model, cfg, aux)
    adamw = torch.optim.AdamW(
        [
            {"params": list(g.decay.values()), "weight_decay": t.weight_decay},
            {"params": list(g.no_decay.values()), "weight_decay": 0.0},
        ],
        lr=t.lr,
        betas=t.betas,
    )
    if not g.muon:
        return adamw
    return MultiOptimizer([BlockMuon(g.muon.values(), lr=t.lr, weight_decay=t.weight_decay), adamw])
