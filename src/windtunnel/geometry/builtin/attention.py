"""The query-key sharpening probe (`attention`, geometry/attention.py): attention entropy per layer and the mass on
the revealed values, beside the model at init."""

from __future__ import annotations

from typing import Any

from windtunnel.geometry import figures
from windtunnel.geometry.attention import sharpening
from windtunnel.geometry.registry import Column, KeyPath, Probe, ProbeContext, ReportFigure, RunFigure, g4
from windtunnel.geometry.seeds import FRACTION, POSITIVE


def _quantities(layer: int, which: str) -> list[tuple[Any, ...]]:
    base: KeyPath = ("attention", "unseen_value_evidence")
    return [
        (
            f"mass on revealed values, {which} layer (unrevealed keys)",
            (*base, "mass_per_layer", layer),
            (*base, "init_mass_per_layer", layer),
            ("uniform attention (exact eliminator: 1)", (*base, "uniform_mass")),
            FRACTION,
        ),
        (
            f"entropy inside revealed values, {which} layer (bits)",
            (*base, "spread_bits_per_layer", layer),
            (),
            ("even over revealed values (Bayes-implied)", (*base, "bayes_entropy_bits")),
            POSITIVE,
        ),
    ]


def change_cell(drop_pct: Any, geometry: dict[str, Any] | None = None) -> str:
    """The Geometry table's cell of the attention entropy's change from the first layer to the last, signed so that it
    reads as a change: "-13%" where it fell by 13%, "+574%" where it rose 6.7-fold; "—" where there is no number."""
    if not isinstance(drop_pct, (int, float)) or isinstance(drop_pct, bool) or drop_pct != drop_pct:
        return "—"
    change = -float(drop_pct)
    return f"{'+' if change > 0 else '−' if change < 0 else ''}{abs(change):.0f}%"


def _compute(ctx: ProbeContext) -> dict[str, Any]:
    return sharpening(ctx.data, ctx.task, ctx.init_data)


PROBE = Probe(
    "attention",
    compute=_compute,
    init_data=True,
    columns=(Column("attn entropy change first → last layer", ("attention", "drop_first_to_last_pct"), change_cell),),
    seed_quantities=(*_quantities(0, "first"), *_quantities(-1, "last")),
    seed_rank=2,
    figures=(RunFigure("attention_entropy.png", lambda ctx, result, path: figures.attention_entropy(result, path)),),
    report_figures=(
        ReportFigure(
            "attention_entropy",
            "attention_entropy.png",
            "Attention entropy per layer",
            "Attention entropy in bits at the scored positions, per layer: each head a dot, the mean over heads a "
            "line, uniform causal attention dashed; the title gives the drop from the first layer to the last.",
            lambda g: "attention entropy per layer",
            rank=1,
        ),
    ),
    terminal=lambda p: f"entropy drop first->last layer {g4(p['drop_first_to_last_pct'])}%",
)
