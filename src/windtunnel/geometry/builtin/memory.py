"""The memory probe (`memory`, geometry/memory.py): how far the belief moves when one earlier observation is
resampled, per lag, beside the exact filter under the same edits, the model at init and, on an HMM, the filters of the
last w observations. Across seeds it is reported per seed, with the median and the range (`seeds.PER_SEED`): seeds of
one cell can differ by orders of magnitude (one that carries nothing beside four that carry the exact filter's move),
and a mean of them describes no seed."""

from __future__ import annotations

from typing import Any

from windtunnel.geometry import figures
from windtunnel.geometry.memory import memory
from windtunnel.geometry.registry import Column, Probe, ProbeContext, ReportFigure, RunFigure, default_cell, dig, f3, g4
from windtunnel.geometry.seeds import PER_SEED

REACH = "shortest window reading that lag (last j+1 obs), same ratio"


def _quantities(lag: int, which: str) -> list[tuple[Any, ...]]:
    """The belief's move at the first or last lag of the memory probe, at init and beside the exact filter's; and
    its ratio to the exact filter's move beside the same ratio of the shortest window filter that reads that lag
    (which scores about 1 without being exact). Per seed, with the median and the range."""
    return [
        (
            f"memory: belief move, {which} lag (bits)",
            ("memory", "model", lag),
            ("memory", "init", lag),
            ("exact filter, same edits", ("memory", "exact", lag)),
            PER_SEED,
        ),
        (
            f"memory: move / exact filter's, {which} lag",
            ("memory", "model_ratio", lag),
            ("memory", "init_ratio", lag),
            (REACH, ("memory", "reach_ratio", lag)),
            PER_SEED,
        ),
    ]


def _cell(v: Any, g: dict[str, Any]) -> str:
    """`lag 1: 0.070 (0.071), 0.99× exact; last 2 obs 1.00×` at the first and the last lag: the model's move (the exact
    filter's), its ratio to the exact filter's and the same ratio of the shortest window that reads that lag."""
    if not (isinstance(v, dict) and v.get("lags")):
        return default_cell(v)
    out = []
    for i in (0, -1):
        j = dig(v, "lags", i)
        text = f"lag {j}: {f3(dig(v, 'model', i))} ({f3(dig(v, 'exact', i))})"
        if (ratio := dig(v, "model_ratio", i)) is not None:
            text += f", {f2(ratio)}× exact"
        if (reach := dig(v, "reach_ratio", i)) is not None:
            text += f"; last {j + 1} obs {f2(reach)}×"
        out.append(text)
    return " / ".join(out)


def f2(v: Any) -> str:
    return f"{v:.2f}" if isinstance(v, (int, float)) and not isinstance(v, bool) else "—"


def _terminal(p: dict[str, Any]) -> str:
    """`lag 1 model 0.081 / exact 0.085 bits; ...` at lags 1, 2, 4, 8, ... and the last: the belief's move when one
    earlier observation is resampled, beside the exact filter's (no verdict)."""
    lags = p["lags"]
    shown = sorted({j for j in lags if j & (j - 1) == 0} | {lags[-1]})
    moves = "; ".join(f"lag {j} model {g4(p['model'][j - 1])} / exact {g4(p['exact'][j - 1])}" for j in shown)
    return f"{moves} bits"


def _compute(ctx: ProbeContext) -> dict[str, Any]:
    return memory(ctx.model, ctx.task, ctx.data.batch, ctx.init_model, seed=ctx.seed)


PROBE = Probe(
    "memory",
    compute=_compute,
    columns=(
        Column(
            "memory move lag 1 / last: model (exact) bits, × exact; the shortest window reading that lag",
            ("memory",),
            _cell,
        ),
    ),
    seed_quantities=(*_quantities(0, "first"), *_quantities(-1, "last")),
    seed_rank=3,
    figures=(RunFigure("memory_profile.png", lambda ctx, result, path: figures.memory_profile(result, path)),),
    report_figures=(
        ReportFigure(
            "memory_profile",
            "memory_profile.png",
            "Memory profile",
            "Every probed seed overlaid, one line style each. Left, per lag j: how far the belief moves (KL in bits, "
            "log axis; a move of 0 drawn at the axis floor) when the observation j steps back alone is resampled, "
            "for each seed beside the exact filter (dashed). Right: each seed's move as a share of the exact "
            "filter's, beside the same share for the filters of the last w observations (grey): a window of w "
            "observations scores about 1 below lag w and 0 from it on, so a share of 1 is not exactness "
            "(docs/geometry.md).",
            lambda g: "belief move per lag and its share of the exact filter's, beside the window filters",
            draw=figures.memory_profile,
            rank=5,
            draw_seeds=figures.memory_seeds,
        ),
    ),
    terminal=_terminal,
)
