"""Query-key sharpening: attention entropy per layer and head at the scored positions, first layer to last, and
the attention mass on the positions the task says carry the evidence, beside what an exact computation implies.

Entropy is taken per attention row and per head, then averaged over rows, then over heads; attention weights are
never averaged before the entropy (that would under-state it by Jensen's inequality).

The Bayes-implied spread (per kind of row the task names, `attention_evidence`): an exact computation that reads
the evidence puts all its mass there (`_bayes_mass` = 1), and one that must weigh every evidence position alike
(bijection, unrevealed key: the posterior is uniform over the values NOT among the revealed ones, so every revealed
value counts) spreads it evenly: entropy log2(#evidence positions) (`_bayes_entropy_bits`). Uniform causal
attention over the row's visible positions gives the chance levels (`_uniform_mass`, `_uniform_entropy_bits`). Exact
at layer 0, where a position holds only its own token; a later layer may read the same evidence from elsewhere.
"""

from __future__ import annotations

from typing import Any

import torch

from windtunnel.geometry.data import ProbeData, max_entropy_bits, not_applicable
from windtunnel.geometry.stats import probs_entropy_bits


def attention_maps(data: ProbeData) -> list[torch.Tensor] | None:
    """Per-layer attention weights (B,H,T,T) (hook points `blocks.{l}.attn.pattern`), or None without attention."""
    return data.per_layer("attn.pattern")


def head_entropies(attn: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(H,) mean attention entropy in bits of each head over the query rows where `mask` (B,T) holds."""
    h = probs_entropy_bits(attn)  # (B,H,T)
    m = mask.unsqueeze(1).to(h.dtype)  # (B,1,T)
    return (h * m).sum((0, 2)) / m.sum((0, 2)).clamp_min(1)


def evidence_mass(maps: list[torch.Tensor], rows: torch.Tensor, evidence: torch.Tensor) -> list[float] | None:
    """Per layer, the attention mass on `evidence` (B,T,T) keys at `rows` (B,T), averaged over heads and rows."""
    if not bool(rows.any()):
        return None
    out = []
    for a in maps:
        m = (a.double() * evidence[:, None].double()).sum(-1)  # (B,H,T)
        out.append(float(m.mean(1)[rows].mean()))
    return out


def evidence_stats(maps: list[torch.Tensor], rows: torch.Tensor, evidence: torch.Tensor) -> dict[str, Any] | None:
    """The attention on `evidence` (B,T,T) keys at query `rows` (B,T), per layer (mean over heads and rows), beside
    the Bayes-implied spread and uniform attention (module docstring); None where no row is selected."""
    if not bool(rows.any()):
        return None
    ev = evidence[:, None].double()  # (B,1,T,T)
    n_ev = evidence.sum(-1).double()[rows]  # (N,) evidence positions per row
    visible = (torch.arange(rows.shape[1], device=rows.device) + 1.0).double().expand_as(rows)[rows]  # (N,)
    entropy, spread = [], []
    for a in maps:
        on = a.double() * ev  # (B,H,T,T)
        mass = on.sum(-1, keepdim=True)  # (B,H,T,1)
        entropy.append(float(probs_entropy_bits(a).mean(1)[rows].mean()))
        within = probs_entropy_bits(on / mass.clamp_min(1e-30))  # (B,H,T): entropy of the mass inside the evidence
        spread.append(float(within.mean(1)[rows].mean()))
    return {
        "mass_per_layer": evidence_mass(maps, rows, evidence),
        "bayes_mass": 1.0,
        "uniform_mass": float((n_ev / visible).mean()),
        "entropy_bits_per_layer": entropy,
        "spread_bits_per_layer": spread,
        "bayes_entropy_bits": float(n_ev.clamp_min(1).log2().mean()),
        "uniform_entropy_bits": float(visible.log2().mean()),
    }


def sharpening(data: ProbeData, task: Any = None, init_data: ProbeData | None = None) -> dict[str, Any]:
    """Attention entropy per layer and head at scored positions, and the first->last layer drop in %.

    Beside each entropy: the same rows' uniform-attention bound (mean log2 of the number of visible keys),
    so a reader can tell a sharp head from a short prefix. Where `task` says which earlier positions a scored row
    should read (`Task.attention_evidence`), per kind of row it names: the attention mass there
    per layer (`{kind}_mass_per_layer`), and `{kind}_evidence` (`evidence_stats`: the mass beside the Bayes-implied
    and uniform levels, the rows' attention entropy and the entropy inside the evidence; with `init_data`, the
    init model's mass on the same sequences as `init_mass_per_layer`).
    """
    maps = attention_maps(data)
    if maps is None:
        return not_applicable("the architecture has no attention weights in its cache")
    mask = data.mask
    T = mask.shape[1]
    visible = torch.arange(1, T + 1, dtype=torch.float64, device=mask.device).log2()  # (T,) uniform bound per row
    uniform = float(visible.expand_as(mask)[mask].mean())
    per_head = [head_entropies(a, mask) for a in maps]  # L x (H,)
    per_layer = [float(h.mean()) for h in per_head]
    first, last = per_layer[0], per_layer[-1]
    extra: dict[str, Any] = {}
    init_maps = attention_maps(init_data) if init_data is not None else None
    named = task.attention_evidence(data.batch.inputs, mask) if task is not None else {}
    for kind, (rows, evidence) in named.items():
        extra[f"{kind}_mass_per_layer"] = evidence_mass(maps, rows, evidence)
        extra[f"n_{kind}_rows"] = int(rows.sum())
        stats = evidence_stats(maps, rows, evidence)
        if stats is not None and init_maps is not None:
            stats["init_mass_per_layer"] = evidence_mass(init_maps, rows, evidence)
        extra[f"{kind}_evidence"] = stats
    return {
        **extra,
        "entropy_bits_per_layer": per_layer,
        "entropy_bits_per_head": [[float(x) for x in h] for h in per_head],
        "uniform_bound_bits": uniform,
        "max_bits": max_entropy_bits(T),
        "drop_first_to_last_pct": 100.0 * (first - last) / first if first > 0 else 0.0,
        "paper": {"drop_first_to_last_pct": "85-90 (Paper III on Paper I's wind tunnel)"},
    }
