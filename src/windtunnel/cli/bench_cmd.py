"""`windtunnel time-to-bayes` and `windtunnel recipes`: how long a recipe takes to reach the paper's precision."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from windtunnel.cli.common import (
    executor_option,
    fail,
    fresh_option,
    guarded,
    import_modules,
    import_option,
    max_retries_option,
    progress_option,
    ray_address_option,
)
from windtunnel.cli.root import app


@app.command("time-to-bayes")
@guarded
def time_to_bayes(
    cell: list[str] | None = typer.Option(
        None,
        help="a cell as k=v pairs: task=bijection,arch=transformer,recipe=wsd,"
        "steps=3000[,batch_size=64,lr=1e-3,seeds=3,eval_every=100,"
        "set.model.size.d_model=96] (repeatable)",
    ),
    out: Path = typer.Option(Path("runs/time-to-bayes"), help="output directory (runs/, JSON, Markdown, plot)"),
    jobs: int = typer.Option(1, help="runs trained in parallel (threads are split between them)"),
    threads: int | None = typer.Option(None, help="CPU threads per run (default: the cores split between the jobs)"),
    merge: list[Path] | None = typer.Option(
        None, help="instead of training: combine earlier result directories into a new --out"
    ),
    allow_mixed: bool = typer.Option(
        False,
        "--allow-mixed",
        help="combine results of different machines, torch versions, threads or jobs (merged, or added to --out's "
        "earlier cells) instead of an error; each cell is labelled with its own machine",
    ),
    executor: str = executor_option(),
    ray_address: str | None = ray_address_option(),
    max_retries: int | None = max_retries_option(),
    progress: bool = progress_option(),
    fresh: bool = fresh_option(),
    imports: list[str] | None = import_option(
        "recorded in every cell's config (imports), e.g. for --cell arch=NAME of an architecture of your own"
    ),
) -> None:
    """Train each cell's seeds with frequent validation and report the training seconds to each precision mark; the
    cells join those already in --out's time_to_bayes.json."""
    from windtunnel.executors import ExecutorOptions
    from windtunnel.time_to_bayes import merge as merge_results
    from windtunnel.time_to_bayes import parse_cell, run

    if merge:
        if cell:
            fail("--merge: give either --cell (train) or --merge (combine results), not both")
        merge_results(list(merge), out, allow_mixed=allow_mixed)
        typer.echo(f"merged {len(merge)} result(s) -> {out / 'time_to_bayes.md'}")
        return
    if not cell:
        fail("--cell: give at least one cell (or --merge to combine earlier results)")

    imported = import_modules(imports)
    if jobs < 1:
        fail(f"--jobs: must be >= 1 (got {jobs})")
    if threads is not None and threads < 1:
        fail(f"--threads: must be >= 1 (got {threads})")
    cells = [parse_cell(c) for c in cell]
    if imported:  # each run's config records them (the cell's `set`), so a worker finds the names again
        for c in cells:
            c.set["imports"] = imported
    run(
        cells,
        out,
        ExecutorOptions(executor, jobs, threads, ray_address, max_retries, progress),
        echo=typer.echo,
        fresh=fresh,
        allow_mixed=allow_mixed,
    )
    typer.echo(f"results: {out / 'time_to_bayes.json'}, {out / 'time_to_bayes.md'}, {out / 'time_to_bayes.png'}")


@app.command()
@guarded
def recipes(
    name: str | None = typer.Argument(None, help="show one recipe (a registered name or a YAML/JSON file)"),
) -> None:
    """List the registered training recipes, or show one."""
    from windtunnel.recipes import RECIPES, get_recipe

    if name is not None:
        typer.echo(json.dumps(get_recipe(name).model_dump(mode="json"), indent=2, sort_keys=True))
        return
    for r in RECIPES.values():
        typer.echo(f"{r.name:12s} {r.description}")
