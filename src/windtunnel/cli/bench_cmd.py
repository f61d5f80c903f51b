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
    jobs_option,
    loading,
    max_retries_option,
    out_option,
    progress_option,
    ray_address_option,
    threads_option,
)
from windtunnel.cli.root import app
from windtunnel.cli.sweep_cmd import INTERRUPTED


@app.command("time-to-bayes")
@guarded
def time_to_bayes(
    cell: list[str] | None = typer.Option(
        None,
        "--cell",
        metavar="K=V,K=V",
        help="a cell, e.g. task=hmm,arch=transformer,recipe=wsd,steps=3000 (repeatable)",
    ),
    out: Path = out_option(Path("runs/time-to-bayes"), "output directory (runs/, JSON, Markdown, plot)"),
    jobs: int = jobs_option(),
    threads: int | None = threads_option(),
    merge: list[Path] | None = typer.Option(
        None, "--merge", metavar="DIR", help="instead of training: combine earlier result directories into a new --out"
    ),
    allow_mixed: bool = typer.Option(
        False, "--allow-mixed", help="combine results of different machines, torch, threads or jobs, each labelled"
    ),
    executor: str = executor_option(),
    ray_address: str | None = ray_address_option(),
    max_retries: int | None = max_retries_option(),
    progress: bool = progress_option(),
    fresh: bool = fresh_option(),
    imports: list[str] | None = import_option(),
) -> None:
    """Training seconds until a recipe reaches each precision mark.

    Each --cell's seeds are trained with frequent validation (docs/results/time-to-bayes.md); the cells join those
    already in --out's time_to_bayes.json. A cell's keys: task, arch, recipe and steps, and optionally batch_size,
    lr, seeds, eval_every and set.KEY (a dotted config override, e.g. set.model.size.d_model=96). --import modules
    are recorded in every cell's config, e.g. for --cell arch=NAME of an architecture of your own. Results of other
    machines, torch versions, threads or jobs (merged, or added to --out's earlier cells) are an error unless
    --allow-mixed, which labels each cell with its own machine."""
    with loading():
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
    try:
        run(
            cells,
            out,
            ExecutorOptions(executor, jobs, threads, ray_address, max_retries, progress),
            echo=typer.echo,
            fresh=fresh,
            allow_mixed=allow_mixed,
        )
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: no result is written for a call cut short
        typer.echo(f"interrupted: nothing added to {out / 'time_to_bayes.json'}; {INTERRUPTED}", err=True)
        raise typer.Exit(130) from None
    typer.echo(f"results: {out / 'time_to_bayes.json'}, {out / 'time_to_bayes.md'}, {out / 'time_to_bayes.png'}")


@app.command()
@guarded
def recipes(
    name: str | None = typer.Argument(None, help="show one recipe (a registered name or a YAML/JSON file)"),
) -> None:
    """List the registered training recipes, or show one."""
    with loading():
        from windtunnel.training.recipes import RECIPES, get_recipe

    if name is not None:
        typer.echo(json.dumps(get_recipe(name).model_dump(mode="json"), indent=2, sort_keys=True))
        return
    for r in RECIPES.values():
        typer.echo(f"{r.name:12s} {r.description}")
