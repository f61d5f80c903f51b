"""`windtunnel reproduce`, `windtunnel report` and `windtunnel demo`: the paper's table and figures in one command."""

from __future__ import annotations

from collections.abc import Callable
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
    parse_kv,
    progress_option,
    ray_address_option,
    threads_option,
)
from windtunnel.cli.root import app


def _suite_command(jobs_default: int, doc: str) -> Callable[..., None]:
    """The one definition of the suite command's options and body; `reproduce` and `demo` are two instances of it
    that differ only in defaults and help, so an option added here reaches both."""

    def command(
        tier: str = typer.Option(
            "quick",
            "--tier",
            help="smoke, quick, standard, transport or paper: the suite (docs/reproduce.md, Tiers)",
        ),
        out: Path | None = out_option(None, "output directory: runs/ and the report (default: runs/paper-<tier>)"),
        seeds: int | None = typer.Option(None, "--seeds", help="seeds per trained cell (default: the tier's)"),
        jobs: int = jobs_option(jobs_default),
        only: list[str] | None = typer.Option(
            None, "--only", metavar="K=V", help="filter, e.g. --only task=hmm --only arch=transformer,lstm"
        ),
        probe: bool = typer.Option(True, "--probe/--no-probe", help="run the geometry probes on each trained run"),
        executor: str = executor_option(),
        ray_address: str | None = ray_address_option(),
        threads: int | None = threads_option(),
        max_retries: int | None = max_retries_option(),
        progress: bool = progress_option(),
        fresh: bool = fresh_option(),
        imports: list[str] | None = import_option(),
    ) -> None:
        with loading():
            from windtunnel.executors import ExecutorOptions
            from windtunnel.reproduce import default_out
            from windtunnel.reproduce import reproduce as run
            from windtunnel.suites import TIER_CAVEATS, TIERS

        import_modules(imports)

        if tier not in TIERS:
            fail(f"--tier: must be one of {', '.join(TIERS)} (got {tier!r})")
        out = default_out(tier) if out is None else out
        meta = run(
            tier,
            out,
            seeds=seeds,
            only=parse_kv(only, "--only") or None,
            probe=probe,
            echo=typer.echo,
            options=ExecutorOptions(executor, jobs, threads, ray_address, max_retries, progress),
            fresh=fresh,
        )
        typer.echo(f"done in {meta['total_wall_s']:.0f} s; report: {out / 'report.md'} and {out / 'report.html'}")
        if tier in TIER_CAVEATS:
            typer.echo(TIER_CAVEATS[tier])

    command.__doc__ = doc
    return guarded(command)


reproduce = app.command("reproduce")(
    _suite_command(
        1,
        """Train what is missing, evaluate, probe, and write the report.

        The paper's table and figures for a tier (docs/reproduce.md): each cell trained (what --out lacks), evaluated
        with length generalisation, probed, and reported in report.md and report.html. A tier's default seeds are 3 per
        transformer and Mamba cell and 1 per control. --import modules are imported here and in the local workers;
        the paper suite itself uses the built-in tasks and architectures.""",
    )
)
demo = app.command("demo")(
    _suite_command(
        2,
        """The main job: `reproduce` with the demo's defaults.

        The quick tier into runs/paper-quick with 2 jobs: the paper's table on this machine, and where its report
        is.""",
    )
)


@app.command()
@guarded
def report(
    run_dirs: list[Path] = typer.Argument(
        ..., help="run directories, a driver's --out, or directories containing runs"
    ),
    out: Path = out_option(Path("report"), "where to write report.md, report.html, figures/, results.json"),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="replace report files in --out that a report did not write"
    ),
    imports: list[str] | None = import_option(),
) -> None:
    """Rebuild the report from existing run directories.

    The runs may come from here, a GPU box, anywhere: a driver's --out gives the runs its manifest.json lists, and a
    reproduce's --out, given alone, its reproduce.json (the tier, its added seeds, its deviations) to a report written
    elsewhere. The report reads only files, but a task of your own needs its module (--import) for its metadata:
    Table 1 title, headline metric, approximate posteriors."""
    with loading():
        from windtunnel.report import build_report
        from windtunnel.store.records.report_files import check_out

    import_modules(imports)

    check_out(out, overwrite)  # before reading anything: nothing is done for a report that may not be written there
    results = build_report(list(run_dirs), out)
    typer.echo(f"{len(results['runs'])} runs -> {out / 'report.md'}, {out / 'report.html'}")
