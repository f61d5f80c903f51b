"""The key-orthogonality probe (`keys`, geometry/keys.py): layer-0 key cosines beside init and Gaussian keys."""

from __future__ import annotations

from typing import Any

from windtunnel.geometry import figures
from windtunnel.geometry.keys import key_orthogonality
from windtunnel.geometry.registry import Column, KeyPath, Probe, ProbeContext, ReportFigure, RunFigure, dig, f3, g4
from windtunnel.geometry.registry import default_cell as _default
from windtunnel.geometry.seeds import CORRELATION, FRACTION


def _quantities(token_set: str) -> list[tuple[Any, ...]]:
    base: KeyPath = ("keys", "by_token_set", token_set)
    return [
        (
            f"L0 key mean |cos|, {token_set.replace('_', ' ')}",
            (*base, "mean_abs_cos_per_layer", 0),
            (*base, "init_mean_abs_cos_per_layer", 0),
            ("Gaussian keys", (*base, "gaussian_baseline")),
            FRACTION,
        ),
        (
            f"authors' L0 signed key cos, {token_set.replace('_', ' ')}",
            (*base, "authors_signed_mean_cos_per_layer", 0),
            (*base, "init_authors_signed_mean_cos_per_layer", 0),
            ("Gaussian keys", (*base, "authors_gaussian_baseline", "mean")),
            CORRELATION,
        ),
    ]


def _authors_cell(v: Any, g: dict[str, Any]) -> str:
    if not isinstance(v, float):
        return _default(v)
    init = dig(g, "keys", "init_authors_signed_mean_cos_per_layer", 0)
    gauss = dig(g, "keys", "authors_gaussian_baseline")
    gauss_s = f"{f3(dig(gauss, 'mean'))} ± {f3(dig(gauss, 'std'))}" if isinstance(gauss, dict) else "—"
    return f"{f3(v)} / {f3(init)} / {gauss_s}"


def _direction_cell(v: Any, g: dict[str, Any]) -> str:
    if not isinstance(v, dict):
        return _default(v)
    return f"ours: {v.get('ours_mean_abs_cos', '—')}; authors': {v.get('authors_signed_mean_cos', '—')}"


def _what(g: dict[str, Any]) -> str:
    tokens = {"value_tokens": "value tokens", "all_tokens": "input tokens"}.get(
        str(dig(g, "keys", "token_set")), "probe tokens"
    )
    return f"layer-0 key |cos| of the {tokens}, trained (left) and at init (right)"


def _compute(ctx: ProbeContext) -> dict[str, Any]:
    return key_orthogonality(ctx.model, ctx.init_model, seed=ctx.seed)


PROBE = Probe(
    "keys",
    compute=_compute,
    columns=(
        Column("L0 key mean abs cos (ours)", ("keys", "mean_abs_cos_per_layer", 0)),
        Column("same at init", ("keys", "init_mean_abs_cos_per_layer", 0)),
        Column("Gaussian keys", ("keys", "gaussian_baseline")),
        Column(
            "authors' L0 signed key cos (trained / init / Gaussian)",
            ("keys", "authors_signed_mean_cos_per_layer", 0),
            _authors_cell,
        ),
        Column("L0 keys in training", ("keys", "layer0_direction"), _direction_cell),
    ),
    seed_quantities=(*_quantities("key_tokens"), *_quantities("value_tokens"), *_quantities("all_tokens")),
    seed_rank=0,
    figures=(
        RunFigure("key_cosines.png", lambda ctx, result, path: figures.key_heatmaps(ctx.model, path)),
        RunFigure(
            "key_cosines_layer0.png",
            lambda ctx, result, path: figures.key_layer0_vs_init(ctx.model, ctx.init_model, path),
        ),
    ),
    report_figures=(
        ReportFigure(
            "key_cosines_layer0",
            "key_cosines_layer0.png",
            "Layer-0 key cosines, trained and at init",
            "|cosine| between the layer-0 keys of the tokens of the per-run Geometry table (the value tokens where "
            "answers are input tokens, else every input token; RMSNorm(E)·W_K, mean of |cos| over heads): the trained "
            "model beside the same architecture at init, each panel titled with its mean off-diagonal |cos| (0 = "
            "orthogonal keys).",
            _what,
            rank=0,
        ),
    ),
    terminal=lambda p: (
        f"layer-0 mean |cos| {g4(p['mean_abs_cos_per_layer'][0])} (gaussian {g4(p['gaussian_baseline'])})"
    ),
)
