"""Frame-precision dissociation across training checkpoints: the attention frame settles early, precision late.

On one fixed held-out batch, per checkpoint step s:
* frame similarity: layer-0 attention of checkpoint s against the final checkpoint's, as the cosine between
  paired attention rows (per head, per scored query row), averaged over rows, heads and sequences; and
  1 - JS divergence (bits) averaged the same way. Both are 1 at the final checkpoint.
* precision: entropy error (metrics.entropy_mae_bits) and the value-manifold stats of the hook point `final` (entropy
  R^2 pooled and within position; None where the task's entropy does not vary within a position).
Summary steps (the first checkpoint from which the condition holds at every later checkpoint):
* frame_step_90: frame cosine >= 0.9 (90% of its final value, 1);
* frame_step_90_progress: frame cosine has covered 90% of the way from the first checkpoint's value to 1;
* precision_step_2x: entropy error <= 2 x its final value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from windtunnel.geometry.attention import attention_maps
from windtunnel.geometry.data import collect, not_applicable
from windtunnel.geometry.manifold import point_positions, scored_points
from windtunnel.geometry.stats import first_step_where, js_bits, manifold_stats, row_cosine


def frame_similarity(attn: torch.Tensor, ref: torch.Tensor, mask: torch.Tensor) -> tuple[float, float]:
    """(mean row cosine, 1 - mean JS bits) between attention maps (B,H,T,T) at query rows `mask` (B,T)."""
    rows = mask[:, None, :].expand(attn.shape[:3])  # (B,H,T)
    cos = row_cosine(attn, ref)[rows].mean()
    js = js_bits(attn, ref)[rows].mean()
    return float(cos), float(1.0 - js)


def frame_precision(
    load: Callable[[int], nn.Module], steps: Sequence[int], task: Any, n: int = 64, max_points: int = 2000
) -> dict[str, Any]:
    """Per-checkpoint frame similarity and precision curves; `load(step)` returns the model at that step."""
    steps = sorted(int(s) for s in steps)
    if len(steps) < 2:
        return not_applicable("needs at least two checkpoints (train with a dense checkpoint_schedule)")
    rows: list[dict[str, Any]] = []
    maps: list[torch.Tensor | None] = []
    mask = None
    for step in steps:
        data = collect(load(step), task, n=n, offset=1)
        mask = data.mask
        layer_maps = attention_maps(data)
        maps.append(None if layer_maps is None else layer_maps[0].cpu())
        x, h, idx = scored_points(data, data.final, max_points)
        m = manifold_stats(x, h, positions=point_positions(data.mask, idx).cpu().numpy())
        rows.append(
            {
                "step": step,
                "entropy_error_bits": data.entropy_error,
                "pc1_var": m["pc1_var"],
                "entropy_r2": m["entropy_r2"],
                "entropy_r2_within_position": m["within_position"].get("entropy_r2"),  # None: not measurable
            }
        )
    errors = [r["entropy_error_bits"] for r in rows]
    out: dict[str, Any] = {
        "checkpoints": rows,
        "precision_step_2x": first_step_where(steps, [e <= 2 * errors[-1] for e in errors]),
    }
    final = maps[-1]
    if final is None:
        out["frame"] = not_applicable("the architecture has no attention weights in its cache")
        return out
    assert mask is not None  # set by the loop over the >= 2 steps
    for r, a in zip(rows, maps, strict=True):
        assert a is not None  # every checkpoint has the architecture of the last, which has attention maps
        r["frame_cosine"], r["frame_1mjs"] = frame_similarity(a, final, mask.cpu())
    cos = [r["frame_cosine"] for r in rows]
    span = 1.0 - cos[0]
    out["frame_step_90"] = first_step_where(steps, [c >= 0.9 for c in cos])
    out["frame_step_90_progress"] = first_step_where(
        steps, [(c - cos[0]) >= 0.9 * span if span > 0 else True for c in cos]
    )
    out["paper"] = {
        "dissociation": "frame formed by ~400 steps, plateau by 2.5k, while calibration improves "
        "~40x (0.03 -> 0.0008 bits) (authors' follow-up, dense checkpoints)"
    }
    return out
