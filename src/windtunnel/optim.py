"""Optimisers and learning-rate schedules of the training loop (`train.optimizer`, `train.schedule`).

`make_optimizer(model, cfg)` builds AdamW, or Muon for the hidden weight matrices beside AdamW for everything else;
`lr_at(step, cfg)` is the learning rate of update `step` (1-based) under warmup + cosine / constant / warmup-stable-
decay. Both are pure functions of the config, so a resumed run continues the same schedule.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from windtunnel.config import RunConfig
from windtunnel.models.common import InputEmbedding, OutputHead, decays


def lr_at(step: int, cfg: RunConfig) -> float:
    """Learning rate for update number `step` (1-based): linear warmup to `lr`, then

    cosine   half-cosine from lr at the end of warmup to min_lr_ratio*lr at `steps`;
    constant lr;
    wsd      lr until the last `cooldown_frac` of the steps, then linear to min_lr_ratio*lr at `steps`.
    """
    t = cfg.train
    if t.warmup_steps and step <= t.warmup_steps:
        return t.lr * step / t.warmup_steps
    floor = t.min_lr_ratio * t.lr
    if t.schedule == "constant":
        return t.lr
    if t.schedule == "wsd":
        start = max(t.warmup_steps, t.steps - round(t.cooldown_frac * t.steps))  # last step at full lr
        if step <= start:
            return t.lr
        frac = min(1.0, (step - start) / max(1, t.steps - start))
        return t.lr - (t.lr - floor) * frac
    span = max(1, t.steps - t.warmup_steps)
    frac = min(1.0, (step - t.warmup_steps) / span)
    return floor + (t.lr - floor) * 0.5 * (1 + math.cos(math.pi * frac))


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


def _hidden_matrices(model: nn.Module) -> set[int]:
    """ids of the weights of Linear layers outside the input embedding and output head, and not marked
    `no_weight_decay` (Muon decays all it holds): what Muon orthogonalises."""
    edge = {id(p) for m in model.modules() if isinstance(m, (InputEmbedding, OutputHead)) for p in m.parameters()}
    return {
        id(m.weight)
        for m in model.modules()
        if isinstance(m, nn.Linear) and m.weight.requires_grad and id(m.weight) not in edge and decays(m.weight)
    }


def make_optimizer(model: nn.Module, cfg: RunConfig) -> torch.optim.Optimizer | MultiOptimizer:
    """AdamW with weight decay only on matrices (not norms, biases, embeddings, or parameters marked
    `common.no_weight_decay`, Mamba's A_log and D), or on every parameter with `train.weight_decay_on="all"` (the
    authors' `AdamW(model.parameters())`); with optimizer="muon", the hidden Linear matrices go to
    `torch.optim.Muon` (same lr and weight decay, update RMS matched to AdamW's). Two AdamW groups either way
    (decayed, not decayed), so checkpoints keep one optimiser-state layout."""
    t = cfg.train
    decay_all = t.weight_decay_on == "all"
    no_decay = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    muon = _hidden_matrices(model) if t.optimizer == "muon" else set()
    decay: list[nn.Parameter] = []
    rest: list[nn.Parameter] = []
    ortho: list[nn.Parameter] = []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        if id(p) in muon:
            ortho.append(p)
        else:
            (decay if decay_all or (p.ndim >= 2 and id(p) not in no_decay and decays(p)) else rest).append(p)
    groups = [{"params": decay, "weight_decay": t.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    adamw = torch.optim.AdamW(groups, lr=t.lr, betas=t.betas)
    if not ortho:
        return adamw
    muon_opt = torch.optim.Muon(ortho, lr=t.lr, weight_decay=t.weight_decay, adjust_lr_fn="match_rms_adamw")
    return MultiOptimizer([muon_opt, adamw])
