"""The ablation probe (`ablation`, geometry/ablation.py): the entropy error's change when each layer part, and each
layer-0 head, is ablated, on its own held-out sequences."""

from __future__ import annotations

from typing import Any

from windtunnel.geometry import figures
from windtunnel.geometry.ablation import ablations
from windtunnel.geometry.data import heldout_batch
from windtunnel.geometry.registry import Probe, ProbeContext, RunFigure, g4
from windtunnel.text import number


def _compute(ctx: ProbeContext) -> dict[str, Any]:
    batch = heldout_batch(ctx.task, ctx.n_ablation or ctx.n, offset=2, device=ctx.data.batch.device)
    return ablations(ctx.model, batch)


def _terminal(p: dict[str, Any]) -> str:
    frame = ""
    if "frame_head" in p:
        head = p["frame_head"]
        frame = f", frame head L0H{head['head']} {number(head['delta_bits'], '+.4g')} bits"
    return f"baseline {g4(p['baseline_entropy_error_bits'])} bits{frame}"


PROBE = Probe(
    "ablation",
    compute=_compute,
    figures=(RunFigure("ablation.png", lambda ctx, result, path: figures.ablation_bars(result, path)),),
    terminal=_terminal,
)
