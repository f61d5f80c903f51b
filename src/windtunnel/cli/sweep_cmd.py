"""`windtunnel sweep`: a grid of dotted overrides over one run config, every point trained and tabulated (a thin
shell over `windtunnel.sweep.sweep`)."""

from __future__ import annotations

from pathlib import Path

import typer

from windtunnel.cli.common import (
    executor_option,
    fresh_option,
    guarded,
    import_modules,
    import_option,
    jobs_option,
    loading,
    max_retries_option,
    out_option,
    parse_kv,
    progress_option,
    ray_address_option,
    threads_option,
)
from windtunnel.cli.root import app

# How to go on after a driver is interrupted (`run_job`: a finished run is read back, an unfinished one resumes).
INTERRUPTED = (
    "run the same command again to continue: the runs that finished are read back, an unfinished one resumes from "
    "its last checkpoint"
)


@app.command()
@guarded
def sweep(
    config: Path = typer.Argument(..., metavar="CONFIG", help="base run config, a YAML/JSON RunConfig file"),
    grid: list[str] | None = typer.Option(
        None,
        "--grid",
        metavar="K=V,V",
        help="a swept key and its values, e.g. train.lr=1e-3,3e-4 (repeat: a cross product)",
    ),
    set_: list[str] | None = typer.Option(
        None, "--set", metavar="K=V", help="dotted override k=v applied to every point"
    ),
    out: Path = out_option(..., "output directory (runs/ and sweep.md/.csv/.json)"),
    executor: str = executor_option(),
    jobs: int = jobs_option(),
    threads: int | None = threads_option(),
    ray_address: str | None = ray_address_option(),
    max_retries: int | None = max_retries_option(),
    progress: bool = progress_option(),
    fresh: bool = fresh_option(),
    imports: list[str] | None = import_option(),
) -> None:
    """Train a grid of overrides over one config and tabulate it.

    Every combination of the --grid values over CONFIG is trained (what is missing only) and tabulated: settings
    (grid values but seed) best first by their mean validation score, test scores reported beside them. The --import
    modules are recorded in every point's config and in the sweep's Command: line."""
    with loading():
        from windtunnel.executors import ExecutorOptions
        from windtunnel.report.sweep_table import TABLE_CSV, TABLE_JSON, TABLE_MD
        from windtunnel.sweep import parse_grid
        from windtunnel.sweep import sweep as run

    imported = import_modules(imports)
    try:
        table = run(
            config,
            parse_grid(grid or []),  # none: the sweep says --grid is required
            out,
            options=ExecutorOptions(executor, jobs, threads, ray_address, max_retries, progress),
            overrides=parse_kv(set_, "--set"),
            echo=typer.echo,
            fresh=fresh,
            imports=imported,
        )
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the sweep wrote the table of what finished
        table_so_far = f" (the table of what finished: {out / TABLE_MD})" if (out / TABLE_MD).is_file() else ""
        typer.echo(f"interrupted: {INTERRUPTED}{table_so_far}", err=True)
        raise typer.Exit(130) from None
    best = [_best(s, table["headline"][s["task"]]) for s in table["settings"] if s["best"]]
    typer.echo(
        f"{len(table['rows'])} runs in {table['total_wall_s']:.0f} s"
        + (f"; best setting (validation) {', '.join(best)}" if best else "; no setting ranked (see the table)")
        + f"; table: {out / TABLE_MD}, {out / TABLE_CSV}, {out / TABLE_JSON}"
    )


def _best(setting: dict, metric: str) -> str:
    """`lr=0.001 (2 seeds, validation entropy error (bits) 0.012)`: a ★ setting for the closing line, and whether it is
    separated from the runner-up (`sweep_table.pick`) where there is one."""
    from windtunnel.evaluation.metric_specs import METRICS

    n = setting["n_seeds"]
    score = METRICS[metric].fmt(setting["validation"][metric]["mean"])
    pick = f"; {setting['pick']['text']}" if setting.get("pick") else ""
    title = METRICS[metric].short_title
    return f"{setting['setting']} ({n} seed{'s' if n != 1 else ''}, validation {title} {score}{pick})"
