"""The memory probe (`memory`, geometry/memory.py): how far the belief moves when one earlier observation is
resampled, per lag, beside the exact filter under the same edits and the model at init."""

from __future__ import annotations

from typing import Any

from windtunnel.geometry import figures
from windtunnel.geometry.memory import memory
from windtunnel.geometry.registry import Column, Probe, ProbeContext, ReportFigure, RunFigure, default_cell, dig, f3, g4
from windtunnel.geometry.seeds import POSITIVE


def _quantities(lag: int, which: str) -> list[tuple[Any, ...]]:
    """The belief's move at the first or last lag of the memory probe, at init and beside the exact filter's."""
    return [
        (
            f"memory: belief move, {which} lag (bits)",
            ("memory", "model", lag),
            ("memory", "init", lag),
            ("exact filter, same edits", ("memory", "exact", lag)),
            POSITIVE,
        )
    ]


def _cell(v: Any, g: dict[str, Any]) -> str:
    if not (isinstance(v, dict) and v.get("lags")):
        return default_cell(v)
    lags = ((i, dig(v, "lags", i)) for i in (0, -1))
    return " / ".join(f"lag {j}: {f3(dig(v, 'model', i))} ({f3(dig(v, 'exact', i))})" for i, j in lags)


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
    columns=(Column("memory move lag 1 / last: model (exact) bits", ("memory",), _cell),),
    seed_quantities=(*_quantities(0, "first"), *_quantities(-1, "last")),
    seed_rank=3,
    figures=(RunFigure("memory_profile.png", lambda ctx, result, path: figures.memory_profile(result, path)),),
    report_figures=(
        ReportFigure(
            "memory_profile",
            "memory_profile.png",
            "Memory profile",
            "Per lag j: how far the belief moves (KL in bits, log axis; a move of 0 drawn at the axis floor) when the "
            "observation j steps back alone is resampled, for the model beside the exact filter (dashed) and the same "
            "model at init (dotted), with paired bootstrap intervals over sequences (docs/geometry.md).",
            lambda g: "belief move per lag, model beside the exact filter and init",
            draw=figures.memory_profile,
            rank=5,
        ),
    ),
    terminal=_terminal,
)
