"""The frame-precision probe (`dynamics`, geometry/dynamics.py): every checkpoint up to the probed one, the layer-0
attention frame's similarity to the last and the entropy error (probe_run only: it reads the run's history)."""

from __future__ import annotations

from typing import Any

from windtunnel.geometry import figures
from windtunnel.geometry.dynamics import frame_precision
from windtunnel.geometry.registry import Column, Probe, ProbeContext, ReportFigure, RunFigure, default_cell


def _applies(ctx: ProbeContext) -> str | None:
    if len(ctx.steps) >= 2 and ctx.load is not None:
        return None
    return "needs at least two checkpoints (train with a dense checkpoint_schedule)"


def _compute(ctx: ProbeContext) -> dict[str, Any]:
    assert ctx.load is not None  # _applies
    return frame_precision(ctx.load, ctx.steps, ctx.task, n=ctx.dynamics_n)


def _cell(v: Any, g: dict[str, Any]) -> str:
    if not isinstance(v, dict):
        return default_cell(v)
    frame, precision = v.get("frame_step_90_progress"), v.get("precision_step_2x")
    return f"{frame if frame is not None else '—'} / {precision if precision is not None else '—'}"


def _terminal(p: dict[str, Any]) -> str:
    """When the frame and the precision settled, or that they had not by the last checkpoint probed."""
    last = p["checkpoints"][-1]["step"] if p.get("checkpoints") else None

    def when(what: str, step: Any) -> str:
        if step is not None:
            return f"{what} at step {step}"
        return f"{what} not reached by the last checkpoint" + (f" (step {last})" if last is not None else "")

    frame = p.get("frame")
    if isinstance(frame, dict) and "not_applicable" in frame:
        head = f"frame n/a ({frame['not_applicable']})"
    else:
        head = when("frame 90%", p.get("frame_step_90"))
    return f"{head}, {when('error within 2x', p.get('precision_step_2x'))}"


PROBE = Probe(
    "dynamics",
    compute=_compute,
    applies=_applies,
    history=True,
    columns=(Column("frame step / precision step", ("dynamics",), _cell),),
    figures=(RunFigure("frame_precision.png", lambda ctx, result, path: figures.frame_precision_curves(result, path)),),
    report_figures=(
        ReportFigure(
            "frame_precision",
            "frame_precision.png",
            "Frame–precision dissociation over training",
            "At each checkpoint of training: the entropy error (red, log axis) and the cosine between its layer-0 "
            "attention and the final checkpoint's (blue): the frame settling early while precision improves late is "
            "the dissociation.",
            lambda g: "entropy error and layer-0 attention frame against step",
            rank=3,
        ),
    ),
    terminal=_terminal,
)
