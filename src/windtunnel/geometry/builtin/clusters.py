"""The state-cluster probe (`clusters`, geometry/clusters.py): how well the final representation clusters by the
posterior's most probable state."""

from __future__ import annotations

from typing import Any

from windtunnel.geometry import figures
from windtunnel.geometry.clusters import state_clusters
from windtunnel.geometry.registry import Column, Probe, ProbeContext, ReportFigure, RunFigure, g4


def _compute(ctx: ProbeContext) -> dict[str, Any]:
    return state_clusters(ctx.data, seed=ctx.seed)


PROBE = Probe(
    "clusters",
    compute=_compute,
    columns=(Column("cluster ARI", ("clusters", "ari")), Column("silhouette", ("clusters", "silhouette"))),
    figures=(RunFigure("state_clusters.png", lambda ctx, result, path: figures.cluster_scatter(ctx.data, path)),),
    report_figures=(
        ReportFigure(
            "state_clusters",
            "state_clusters.png",
            "Mamba state clusters",
            "PC1/PC2 of Mamba's final-layer representation at the scored positions, each point coloured by the "
            "exact posterior's most probable state (MAP): clusters by state are the paper's Mamba figure.",
            lambda g: "final representation coloured by MAP state",
            archs=("mamba",),
            rank=4,
        ),
    ),
    terminal=lambda p: f"ARI {g4(p['ari'])}, silhouette {g4(p.get('silhouette'))}, entropy R^2 {g4(p['entropy_r2'])}",
)
