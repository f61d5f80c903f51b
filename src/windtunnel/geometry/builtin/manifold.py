"""The value-manifold probe (`manifold`, geometry/manifold.py): PCA of the value vectors and the final
representation against the posterior entropy, pooled and within position, beside init, Gaussian points and the
context-blind reference."""

from __future__ import annotations

from typing import Any

from windtunnel.geometry import figures
from windtunnel.geometry.manifold import value_manifold
from windtunnel.geometry.registry import Column, KeyPath, Probe, ProbeContext, ReportFigure, RunFigure, dig, g4
from windtunnel.geometry.seeds import BLIND, FRACTION, PARTICIPATION, PC_CORRELATION, R2


def _quantities(positions: str, rep: str) -> list[tuple[Any, ...]]:
    base: KeyPath = ("manifold", "by_position_set", positions, rep)
    where = f"{rep} at {positions.replace('_', ' ')}"
    gaussian = [
        ("PC1 var", ("pc1_var",), FRACTION),
        ("PC1+2 var", ("pc12_var",), FRACTION),
        ("participation ratio", ("participation_ratio",), PARTICIPATION),
    ]
    # entropy statistics: beside the context-blind reference, which position (and the own input) can fake them to
    blind = [
        ("|Spearman(PC1, H)|", ("pc1_spearman",), PC_CORRELATION),
        ("entropy R²", ("entropy_r2",), R2),
        ("|Spearman(PC1, H)| within position", ("within_position", "pc1_spearman"), PC_CORRELATION),
        ("entropy R² within position", ("within_position", "entropy_r2"), R2),
    ]
    return [
        (f"{label}, {where}", (*base, *key), (*base, "init", *key), (ref, (*base, part, *key)), scale)
        for group, ref, part in ((gaussian, "Gaussian points", "gaussian"), (blind, BLIND, "context_blind"))
        for label, key, scale in group
    ]


def _what(g: dict[str, Any]) -> str:
    values = dig(g, "manifold", "values")
    applies = isinstance(values, dict) and "not_applicable" not in values
    rep = "last layer's value vectors" if applies else "final representation"
    return f"PC1/PC2 of the {rep} coloured by posterior entropy, pooled (left) and within position (right)"


def _within(m: dict[str, Any]) -> str:
    """The manifold's entropy R^2 within position (position cannot fake it), or that the task leaves none to measure."""
    w = m.get("within_position") or {}
    if "entropy_r2" not in w:
        return "within position not measurable on this task" if "not_measurable" in w else "within position n/a"
    return f"within position {g4(w['entropy_r2'])}"


def _compute(ctx: ProbeContext) -> dict[str, Any]:
    return value_manifold(ctx.data, seed=ctx.seed, task=ctx.task, init_data=ctx.init_data)


PROBE = Probe(
    "manifold",
    compute=_compute,
    init_data=True,
    columns=(
        Column("PC1 var", ("manifold", "final", "pc1_var")),
        Column("entropy R²", ("manifold", "final", "entropy_r2")),
    ),
    seed_quantities=tuple(
        q
        for pos in ("value_positions", "scored_positions")
        for rep in ("values", "final")
        for q in _quantities(pos, rep)
    ),
    seed_rank=1,
    figures=(
        RunFigure("value_manifold.png", lambda ctx, result, path: figures.manifold_scatter(ctx.data, path)),
        RunFigure(
            "value_manifold_within_position.png",
            lambda ctx, result, path: figures.manifold_within_position(ctx.data, path),
        ),
    ),
    report_figures=(
        ReportFigure(
            "value_manifold",
            "value_manifold_within_position.png",
            "Value manifold",
            "PCA of the last layer's attention value vectors (the final-layer representation for an architecture "
            "without attention) at the scored positions, coloured by the exact posterior entropy: pooled over "
            "positions (left), and within position (right: PC scores and entropies each minus their position's mean, "
            "at the positions where the entropy varies), the part position cannot fake; 'not measurable' where the "
            "entropy is a function of position alone.",
            _what,
            rank=2,
        ),
    ),
    terminal=lambda p: (
        f"final PC1 {g4(p['final']['pc1_var'])}, entropy R^2 {g4(p['final']['entropy_r2'])} pooled "
        f"(position alone can give it), {_within(p['final'])}"
    ),
)
