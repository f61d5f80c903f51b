"""`windtunnel sweep`: a grid of dotted overrides over one run config, every point trained and tabulated (a thin
shell over `windtunnel.sweep.sweep`)."""

from __future__ import annotations

from pathlib import Path

import typer

from windtunnel.cli import app
from windtunnel.cli.common import guarded, parse_kv


@app.command()
@guarded
def sweep(
    config: Path = typer.Argument(..., metavar="CONFIG", help="base run config, a YAML/JSON RunConfig file"),
    grid: list[str] | None = typer.Option(
        None, "--grid", help="a swept key and its values, e.g. --grid train.lr=1e-3,3e-4 (repeat for a cross product)"
    ),
    set_: list[str] | None = typer.Option(None, "--set", help="dotted override k=v applied to every point"),
    out: Path = typer.Option(..., "--out", "-o", help="output directory (runs/ and sweep.md/.csv/.json)"),
    executor: str = typer.Option("local", help="where runs execute: local (this machine) or ray (a Ray cluster)"),
    jobs: int = typer.Option(1, help="with --executor local: runs trained in parallel (threads are split)"),
    threads: int | None = typer.Option(
        None, help="CPU threads per run (default: the cores split between --jobs locally, 1 on Ray)"
    ),
    ray_address: str | None = typer.Option(
        None, help="with --executor ray: auto (an existing cluster) or HOST:PORT of its head (default: Ray's own)"
    ),
    max_retries: int | None = typer.Option(
        None, help="with --executor ray: retries of a run whose worker or node died (default 3)"
    ),
    progress: bool = typer.Option(True, help="live progress on stderr (in place on a terminal, periodic lines else)"),
) -> None:
    """Train every combination of the --grid values over CONFIG (what is missing only) and tabulate them, best first."""
    from windtunnel.sweep import TABLE_CSV, TABLE_JSON, TABLE_MD, parse_grid
    from windtunnel.sweep import sweep as run

    table = run(
        config,
        parse_grid(grid or []),  # none: the sweep says --grid is required
        out,
        executor=executor,
        jobs=jobs,
        threads=threads,
        ray_address=ray_address,
        max_retries=max_retries,
        overrides=parse_kv(set_, "--set"),
        echo=typer.echo,
        progress=progress,
    )
    best = next((r["run"] for r in table["rows"] if r["best"]), None)
    typer.echo(
        f"{len(table['rows'])} runs in {table['total_wall_s']:.0f} s"
        + (f"; best {best}" if best else "")
        + f"; table: {out / TABLE_MD}, {out / TABLE_CSV}, {out / TABLE_JSON}"
    )
