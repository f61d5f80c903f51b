"""The logit-lens probe (`lens`, geometry/lens.py): KL between the posterior and the lens at every layer, both
directions."""

from __future__ import annotations

from typing import Any

from windtunnel.geometry import figures
from windtunnel.geometry.lens import logit_lens
from windtunnel.geometry.registry import Column, Probe, ProbeContext, RunFigure, default_cell, f3, g4


def _first_to_last(v: Any, g: dict[str, Any]) -> str:
    return f"{f3(v[0])} → {f3(v[-1])}" if isinstance(v, list) and v else default_cell(v)


def _compute(ctx: ProbeContext) -> dict[str, Any]:
    return logit_lens(ctx.model, ctx.data)


PROBE = Probe(
    "lens",
    compute=_compute,
    columns=(
        Column("lens KL(Bayes‖lens) first→last", ("lens", "kl_bits_per_layer"), _first_to_last),
        Column("lens KL(lens‖Bayes) first→last", ("lens", "kl_lens_to_posterior_bits_per_layer"), _first_to_last),
    ),
    figures=(RunFigure("lens_kl.png", lambda ctx, result, path: figures.lens_kl(result, path)),),
    terminal=lambda p: "KL per layer " + " ".join(g4(k) for k in p["kl_bits_per_layer"]),
)
