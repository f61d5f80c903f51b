"""`windtunnel sweep`: a grid of dotted overrides over one run config, every point trained and tabulated (a thin
shell over `windtunnel.sweep.sweep`)."""

from __future__ import annotations

from pathlib import Path

import typer

from windtunnel.cli import app
from windtunnel.cli.common import (
    executor_option,
    guarded,
    jobs_option,
    max_retries_option,
    parse_kv,
    progress_option,
    ray_address_option,
    threads_option,
)


@app.command()
@guarded
def sweep(
    config: Path = typer.Argument(..., metavar="CONFIG", help="base run config, a YAML/JSON RunConfig file"),
    grid: list[str] | None = typer.Option(
        None, "--grid", help="a swept key and its values, e.g. --grid train.lr=1e-3,3e-4 (repeat for a cross product)"
    ),
    set_: list[str] | None = typer.Option(None, "--set", help="dotted override k=v applied to every point"),
    out: Path = typer.Option(..., "--out", "-o", help="output directory (runs/ and sweep.md/.csv/.json)"),
    executor: str = executor_option(),
    jobs: int = jobs_option(),
    threads: int | None = threads_option(),
    ray_address: str | None = ray_address_option(),
    max_retries: int | None = max_retries_option(),
    progress: bool = progress_option(),
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
