"""`reproduce`: train what is missing, evaluate, probe, and write the report, for one tier of the paper suite.

Interruptible: a finished run has `done.json` and is skipped; an unfinished one resumes from its last checkpoint; either
only when its stored config is the one asked for (the launcher's claim, `executors.Launch.claim`; `fresh` sets a
mismatched one aside). One --out holds one tier (default `runs/paper-<tier>`); its manifest lists the runs the report
reads, and reproduce.json (`records.drivers.ReproduceRecord`) what ran where.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from windtunnel.evaluation.metric_specs import headline_metric
from windtunnel.executors import ExecutorOptions, Job, Launch, launch
from windtunnel.models import is_baseline
from windtunnel.report import build_report, table_cells
from windtunnel.report.collect import finished_levels, read_run
from windtunnel.resolve import resolve_config
from windtunnel.store import manifest
from windtunnel.store.records.drivers import ReproduceRecord
from windtunnel.store.records.report_files import FIGURES as REPORT_FIGURES
from windtunnel.store.records.report_files import REPORT_FILES, written_by_report
from windtunnel.suites import SuiteRun, deviations, earlier_seeds, more_seeds, suite, tier_tasks

KIND = "reproduce"  # the manifest kind of a reproduce's --out


def where_runs_ran(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The devices and hosts the runs trained on, from their done.json (`machine` and `device` describe the driver,
    which on a cluster is not where the runs ran): {"run_devices": "cuda (40 runs), cpu (4 runs)", "run_hosts": [...]}.
    """
    devices = Counter(r["device"] for r in results if r.get("device"))
    hosts = sorted({r["host"] for r in results if r.get("host")})
    out: dict[str, Any] = {}
    if devices:
        out["run_devices"] = ", ".join(f"{d} ({n} run{'s' if n > 1 else ''})" for d, n in devices.most_common())
    if hosts:
        out["run_hosts"] = hosts
    return out


def suite_jobs(entries: list[SuiteRun], runs_dir: Path, probe: bool) -> list[Job]:
    """One job per suite run; the geometry probes run on every seed of each trained cell (the report gives
    across-seed intervals). `launch` gives each its threads and storage token."""
    return [
        Job(e.name, e.config, str(runs_dir), probe=probe and not is_baseline(e.config["model"]["arch"]))
        for e in entries
    ]


def _finished_seeds(runs_dir: Path, entries: list[SuiteRun]) -> dict[tuple[str, str], dict[str, str]]:
    """Each trained cell (task, arch) of `entries`: its finished seeds' run names with their verdict levels, in seed
    order (a run without a recorded verdict, or unfinished, is left out; `collect.finished_levels`)."""
    ordered = sorted((e for e in entries if not is_baseline(e.config["model"]["arch"])), key=lambda e: e.config["seed"])
    found = finished_levels(runs_dir, [e.name for e in ordered])
    cells: dict[tuple[str, str], dict[str, str]] = {}
    for e in ordered:
        if e.name in found:
            cells.setdefault((e.config["task"]["name"], e.config["model"]["arch"]), {})[e.name] = found[e.name]
    return cells


def seed_levels(
    runs_dir: Path, entries: list[SuiteRun], finished: dict[tuple[str, str], dict[str, str]] | None = None
) -> dict[tuple[str, str], list[str]]:
    """The verdict level of each finished seed of every trained cell (task, arch) of `entries`, in seed order, as the
    report reads them (`finished`: `_finished_seeds` of them, where the caller has it)."""
    finished = _finished_seeds(runs_dir, entries) if finished is None else finished
    return {cell: list(seen.values()) for cell, seen in finished.items()}


def pooled_levels(
    runs_dir: Path, entries: list[SuiteRun], finished: dict[tuple[str, str], dict[str, str]] | None = None
) -> dict[tuple[str, str], str]:
    """The level of each trained cell of `entries` with two finished seeds or more, those seeds pooled as Table 1
    marks the cell (`table_cells.cell_value`: a Student-t interval over the seeds' means; `finished` as for
    `seed_levels`)."""
    finished = _finished_seeds(runs_dir, entries) if finished is None else finished
    out = {}
    for (task, arch), seen in finished.items():
        if len(seen) > 1 and (
            cell := table_cells.cell_value([read_run(runs_dir / n) for n in seen], headline_metric(task))
        ):
            out[task, arch] = cell["level"]
    return out


def default_out(tier: str) -> Path:
    """Where `reproduce --tier TIER` writes without --out: one directory per tier, so tiers never share runs."""
    return Path(f"runs/paper-{tier}")


def reproduce(
    tier: str,
    out: str | Path | None = None,
    seeds: int | None = None,
    only: dict[str, str] | None = None,
    probe: bool = True,
    echo: Callable[[str], None] = lambda _: None,
    *,
    options: ExecutorOptions = ExecutorOptions(),
    fresh: bool = False,
) -> dict[str, Any]:
    """Run the paper suite at `tier` into `out/runs/` (default `default_out(tier)`) on the executor of `options`
    (`executors.launch`: threads per run, local jobs or a Ray cluster, progress), then write the report into `out/`;
    holds `out`'s lock. Runs with equal seeds and threads give equal numbers on every executor. A run directory of
    another config, or an --out of another tier, is refused unless `fresh`, which moves it to `out/superseded/`."""
    out = default_out(tier) if out is None else Path(out)
    # a report of one's own in a folder no reproduce owns is never replaced; a report's own is rebuilt
    launcher = launch(out, options, KIND, () if written_by_report(out) else (*REPORT_FILES, REPORT_FIGURES))
    entries = suite(tier, seeds=seeds, only=only)  # validated before anything is created
    if not entries:
        raise ValueError(
            f"only: no run of the {tier} suite matches {only} (its tunnels: {', '.join(tier_tasks(tier))})"
        )
    wanted = {e.name: resolve_config(e.config) for e in entries}
    with launcher:  # one reproduce per output directory, never another driver's
        _one_tier(launcher, tier, fresh, echo)
        # further seeds of these cells from an earlier call are checked too: kept where the tier would train them
        # as they are, refused (or with `fresh` set aside) where the cell's config has changed since
        listed = [e.name for e in launcher.found.runs] if launcher.found is not None else []
        earlier = {e.name: resolve_config(e.config) for e in earlier_seeds(tier, entries, listed)}
        launcher.claim({**wanted, **earlier}, echo, fresh=fresh, tier=tier)
        return _reproduce_locked(tier, launcher, entries, seeds, only, probe, echo, fresh)


def _one_tier(launcher: Launch, tier: str, fresh: bool, echo: Callable[[str], None]) -> None:
    """One --out holds one tier: an --out of another tier's runs is refused, or with `fresh` its runs are set aside
    (those its manifest lists; for an --out written before manifests, everything under its runs/)."""
    out, found = launcher.out, launcher.found
    if found is None or found.tier in (None, tier):
        return
    if not fresh:
        raise ValueError(
            f"--out: {str(out)!r} holds the {found.tier} tier's runs; use another --out (the default is "
            f"{default_out(tier)}), or --fresh to set them aside (to {out / manifest.SUPERSEDED})"
        )
    for name, moved in manifest.set_aside_listed(out, found):
        echo(f"  {name}: a {found.tier}-tier run, set aside -> {moved}")


def _reproduce_locked(
    tier: str,
    launcher: Launch,
    entries: list[SuiteRun],
    seeds: int | None,
    only: dict[str, str] | None,
    probe: bool,
    echo: Callable[[str], None],
    fresh: bool = False,
) -> dict[str, Any]:
    out, runner, jobs, threads = launcher.out, launcher.executor, launcher.options.jobs, launcher.threads
    runs_dir = out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    results = launcher.execute(suite_jobs(entries, runs_dir, probe), f"{len(entries)} runs, tier {tier}", echo)
    finished = _finished_seeds(runs_dir, entries)  # each seed's eval.json read once for both
    extra = more_seeds(tier, seed_levels(runs_dir, entries, finished), pooled_levels(runs_dir, entries, finished))
    if extra:  # cells whose seeds disagree on the mark, or with their pooled mark: more seeds, up to the tier's limit
        cells = sorted(set(map(_cell_of, extra)))
        echo(f"seeds disagree on the mark (or with their pooled mark) in {', '.join(cells)}: {len(extra)} more run(s)")
        launcher.claim_runs({e.name: resolve_config(e.config) for e in extra}, echo, fresh=fresh)
        results += launcher.execute(suite_jobs(extra, runs_dir, probe), f"{len(extra)} more seeds, tier {tier}", echo)
        entries = [*entries, *extra]
    record = ReproduceRecord(
        tier=tier,
        **launcher.machine(),
        # cells in name order, as reproduce.json stores them (the report built now and one rebuilt from the file
        # agree); each cell's count is its highest seed + 1, its last entry in this order
        seeds={
            _cell_of(e): e.config["seed"] + 1 for e in sorted(entries, key=lambda e: (_cell_of(e), e.config["seed"]))
        },
        added_seeds={c: [e.config["seed"] for e in extra if _cell_of(e) == c] for c in sorted(map(_cell_of, extra))},
        jobs=jobs,
        executor=runner.name,
        **where_runs_ran(results),
        threads=threads,
        total_wall_s=launcher.wall_s(),
        # runs this call found finished and did not run again: total_wall_s is this call's alone, and where every run
        # was reused (a report rebuilt from finished runs) it says nothing of the tier's cost; run_wall_s does
        runs_reused=sum(1 for r in results if r.get("skipped")),
        run_wall_s={r["name"]: r.get("wall_s") for r in sorted(results, key=lambda r: r["name"])},  # name order too
        command=f"windtunnel reproduce --tier {tier} --out {out} --executor {runner.name}"
        + (f" --jobs {jobs}" if runner.name == "local" else "")
        + f" --threads {threads}"
        + (f" --seeds {seeds}" if seeds is not None else "")
        + "".join(f" --only {k}={v}" for k, v in (only or {}).items()),
        deviations=deviations(tier),
    )
    record.write(out)
    launcher.record([e.name for e in entries])
    listed: list[str | Path] = [*manifest.run_dirs(out)]  # this tier's runs, never whatever else lies under runs/
    build_report(listed, out, record)
    return record.to_json()


def _cell_of(entry: SuiteRun) -> str:
    """The cell a tier's run belongs to, as reproduce.json names it: `task-arch`."""
    return f"{entry.config['task']['name']}-{entry.config['model']['arch']}"
