"""Ray's overhead per run: `reproduce --tier smoke` through the local executor and through Ray on this machine.

    python benchmarks/bench_executors.py                     # -> docs/results/scale-out/executors.{json,md}
    python benchmarks/bench_executors.py --out bench/        # elsewhere

Four ways, each into a fresh output directory, one thread per run, no probes, so every way trains the same 28 runs
to the same numbers (checked):
    local x1      one run at a time in this process
    local x2      two worker processes
    ray 1 node    a one-node Ray cluster with 2 CPUs (started here, `ray start --block`)
    ray 2 nodes   a head and a worker node with 1 CPU each (started here)
Cluster start-up is timed apart from the suite. Overhead per run = (Ray wall - local x2 wall) / runs.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def suite_wall(out: Path, **kwargs: object) -> tuple[float, dict[str, dict]]:
    """Wall seconds of the smoke suite into `out` (`kwargs`: its `ExecutorOptions` but threads), and every run's
    eval.json."""
    from windtunnel.executors import ExecutorOptions
    from windtunnel.reproduce import reproduce

    t0 = time.perf_counter()
    reproduce("smoke", out, probe=False, options=ExecutorOptions(threads=1, **kwargs))  # type: ignore[arg-type]
    wall = time.perf_counter() - t0
    evals = {p.parent.name: json.loads(p.read_text()) for p in sorted((out / "runs").glob("*/eval.json"))}
    return wall, evals


def main() -> None:
    from windtunnel.executors.ray_local import LocalCluster
    from windtunnel.machine import machine_description

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/results/scale-out"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-executors-"))
    rows, reference = [], None
    ways: list[tuple[str, dict, tuple[int, int] | None]] = [
        ("local x1", {"jobs": 1}, None),
        ("local x2", {"jobs": 2}, None),
        ("ray 1 node x 2 CPUs", {"executor": "ray"}, (1, 2)),
        ("ray 2 nodes x 1 CPU", {"executor": "ray"}, (2, 1)),
    ]
    for i, (label, kwargs, cluster) in enumerate(ways):
        out = work / f"way{i}"
        if cluster is None:
            wall, evals = suite_wall(out, **kwargs)
            start_s = None
        else:
            t0 = time.perf_counter()
            with LocalCluster(nodes=cluster[0], cpus=cluster[1], log_dir=work / f"logs{i}") as c:
                start_s = time.perf_counter() - t0
                wall, evals = suite_wall(out, ray_address=c.address, **kwargs)
        reference = reference or evals
        rows.append(
            {
                "way": label,
                "runs": len(evals),
                "suite_wall_s": round(wall, 1),
                "cluster_start_s": None if start_s is None else round(start_s, 1),
                "same_numbers_as_local_x1": evals == reference,
            }
        )
        print(rows[-1], flush=True)
    base = next(r for r in rows if r["way"] == "local x2")["suite_wall_s"]
    for r in rows:
        r["overhead_per_run_s_vs_local_x2"] = round((r["suite_wall_s"] - base) / r["runs"], 2)
    data = {"machine": machine_description(), "tier": "smoke", "threads_per_run": 1, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "executors.json").write_text(json.dumps(data, indent=2) + "\n")
    lines = [
        f"`python benchmarks/bench_executors.py` on {data['machine']['machine']}, torch {data['machine']['torch']}: "
        f"`reproduce --tier smoke` ({rows[0]['runs']} runs, 1 thread each, no probes).",
        "",
        "| executor | suite wall (s) | cluster start (s) | overhead per run vs local x2 (s) | eval.json = local x1 |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        start = "—" if r["cluster_start_s"] is None else f"{r['cluster_start_s']:.1f}"
        lines.append(
            f"| {r['way']} | {r['suite_wall_s']:.1f} | {start} | {r['overhead_per_run_s_vs_local_x2']:+.2f} | "
            f"{'yes' if r['same_numbers_as_local_x1'] else 'NO'} |"
        )
    (args.out / "executors.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
