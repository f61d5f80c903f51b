"""Copy what a `windtunnel reproduce` run made into docs/results/<tier>/: the report, its data and figures, each
probed run's geometry.json (plus the geometry figures of the transformer and Mamba cells), and every run's records
without its checkpoints (runs/NAME/: config, evaluations, training log, geometry), so that `windtunnel report
docs/results/<tier>/runs --out DIR` rebuilds the report with a newer report. Run directories do not survive a working
day; the published copy does.

    python benchmarks/publish_tier.py runs/standard docs/results/standard
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Callable
from pathlib import Path

TOP = ("report.md", "report.html", "results.json", "reproduce.json", "manifest.json")
# What a run's report reads (report/collect.py), without the weights: checkpoints and figures stay behind.
RECORDS = ("config.json", "eval.json", "trained.json", "done.json", "versions.json", "resumes.json", "metrics.jsonl")
RECORD_DIRS = ("evals",)
FIGURE_ARCHS = ("transformer", "mamba")  # the cells the paper makes geometric claims about


def tier_figures(run_name: str) -> str | None:
    """The cell name under which a reproduce run's probe figures are published (seed 0 of `FIGURE_ARCHS`), or None."""
    cell = run_name.removesuffix("-s0")
    return cell if cell.split("-", 1)[1] in FIGURE_ARCHS else None


def publish(
    src: Path, dest: Path, top: tuple[str, ...] = TOP, figures_for: Callable[[str], str | None] = tier_figures
) -> list[Path]:
    """Copy the `top` files, figures/ and geometry of `src` (a driver's --out with a report.md) into `dest`
    (replaced, where `check_dest` allows): every run's geometry.json, and the probe figures of the runs `figures_for`
    names (prefixed by it)."""
    if not (src / "report.md").is_file():
        raise SystemExit(f"{src}: no report.md (is it a finished `windtunnel reproduce --out`?)")
    check_dest(src, dest, top)
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "geometry").mkdir(parents=True)
    written = []
    for name in top:
        if (src / name).is_file():
            written.append(Path(shutil.copy2(src / name, dest / name)))
    if (src / "figures").is_dir():
        shutil.copytree(src / "figures", dest / "figures")
        written.append(dest / "figures")
    for run in sorted((src / "runs").iterdir()):
        written += publish_records(run, dest / "runs" / run.name)
        geometry = run / "geometry.json"
        if not geometry.is_file():
            continue
        written.append(Path(shutil.copy2(geometry, dest / "geometry" / f"{run.name}-geometry.json")))
        cell = figures_for(run.name)
        if cell is not None:
            for png in sorted((run / "figures").glob("*.png")):
                written.append(Path(shutil.copy2(png, dest / "geometry" / f"{cell}-{png.name}")))
    return written


def check_dest(src: Path, dest: Path, top: tuple[str, ...] = TOP) -> None:
    """Refuse (SystemExit naming it) a `dest` that `publish` must not delete and replace: one that overlaps `src`, a
    link or a file, or an existing folder that is not a published copy (its report.md, and nothing but what `publish`
    writes: `top`, figures/, geometry/, runs/)."""
    a, b = src.resolve(), dest.resolve()
    if a == b or a in b.parents or b in a.parents:
        raise SystemExit(f"{dest}: overlaps the source {src}; publish into a folder of its own")
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise SystemExit(f"{dest}: not a folder (a link or a file); refusing to replace it")
    if not dest.exists():
        return
    ours = {*top, "figures", "geometry", "runs"}
    stray = next((p.name for p in sorted(dest.iterdir()) if p.name not in ours), None)
    if stray is not None:
        raise SystemExit(f"{dest}: holds {stray!r}, which publish does not write; refusing to delete it")
    if not (dest / "report.md").is_file():
        raise SystemExit(f"{dest}: no report.md, so not a folder publish wrote; refusing to delete it")


def publish_records(run: Path, dest: Path) -> list[Path]:
    """A run directory's records (`RECORDS`, `RECORD_DIRS` and geometry.json) into `dest`, its weights left out."""
    dest.mkdir(parents=True)
    written = [Path(shutil.copy2(run / n, dest / n)) for n in (*RECORDS, "geometry.json") if (run / n).is_file()]
    for d in RECORD_DIRS:
        if (run / d).is_dir():
            written.append(Path(shutil.copytree(run / d, dest / d)))
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", type=Path, help="a `windtunnel reproduce --out` directory")
    parser.add_argument("dest", type=Path, help="where to publish, e.g. docs/results/standard")
    args = parser.parse_args()
    written = publish(args.src, args.dest)
    print(f"{len(written)} files/folders -> {args.dest}")


if __name__ == "__main__":
    main()
