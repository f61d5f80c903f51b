"""`reproduce`: train what is missing, evaluate, probe, and write the report, for one tier of the paper suite.

Interruptible: a finished run has `done.json` and is skipped; an unfinished one resumes from its last checkpoint.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import torch

from windtunnel.lock import DirLock
from windtunnel.rundir import DONE, check_writable, write_json
from windtunnel.suites import BASELINES, SuiteRun, deviations, suite


def machine_description() -> dict[str, Any]:
    """Where the runs were made: CPU model and cores, accelerator, torch version."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return {
        "machine": f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.machine()}",
        "device": device,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


# Relative float32 training cost per token and per parameter of each architecture on a CPU (measured at the quick
# presets: ~1.4e-7 ms per token-parameter for the transformer; docs/reproduce.md).
ARCH_COST = {"transformer": 1.0, "mamba": 3.4, "lstm": 0.55, "mlp": 0.6, "mlp-pointwise": 0.55}


def estimated_cost(entry: SuiteRun) -> float:
    """Training tokens x parameters, weighted by architecture: orders runs so the longest start first."""
    from windtunnel import tasks
    from windtunnel.models.common import count_params
    from windtunnel.models.presets import preset
    from windtunnel.models.registry import resolve

    cfg = entry.config
    arch, train = cfg["model"]["arch"], cfg["train"]
    if arch in BASELINES or not train.get("steps"):
        return 0.0
    spec = tasks.make(cfg["task"]["name"], **cfg["task"]["params"]).spec
    size = preset(cfg["task"]["name"], arch, cfg["model"]["preset"], spec)
    n_params = count_params(resolve(arch), spec, size, **cfg["model"].get("size", {}))
    return train["steps"] * train["batch_size"] * spec.seq_len * n_params * ARCH_COST.get(arch, 1.0)


def run_one(entry: SuiteRun, runs_dir: Path, threads: int, probe: bool = True) -> dict[str, Any]:
    """Train (or resume), evaluate at every length, probe; mark done. Runs in a worker process."""
    from windtunnel import train as training
    from windtunnel.config import validate

    torch.set_num_threads(max(1, threads))
    run_dir = runs_dir / entry.name
    if (run_dir / DONE).exists():
        return {"name": entry.name, "skipped": True, **json.loads((run_dir / DONE).read_text())}
    start = time.time()
    config = validate(entry.config)
    training.train(config, run_dir, resume=run_dir.exists(), progress=False)  # ends with the final evaluation
    probed = probe and config.model.arch not in BASELINES and config.seed == 0  # geometry of each cell's first seed
    if probed:
        from windtunnel.geometry.run import probe_run

        probe_run(run_dir)
    info = {"wall_s": round(time.time() - start, 1), "probe": "done" if probed else "skipped"}
    write_json(run_dir / DONE, info)
    return {"name": entry.name, "skipped": False, **info}


def reproduce(
    tier: str,
    out: str | Path,
    seeds: int | None = None,
    jobs: int = 1,
    only: dict[str, str] | None = None,
    probe: bool = True,
    echo: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Run the paper suite at `tier` into `out/runs/`, then write the report into `out/`; holds `out`'s lock."""
    if jobs < 1:
        raise ValueError(f"jobs: must be >= 1 (got {jobs})")
    out = Path(out)
    entries = suite(tier, seeds=seeds, only=only)  # validated before anything is created
    if not entries:
        raise ValueError(f"only: no run of the {tier} suite matches {only}")
    check_writable(out)
    with DirLock(out, "output directory"):  # one reproduce per output directory; each run also locks itself
        return _reproduce_locked(tier, out, entries, seeds, jobs, only, probe, echo)


def _reproduce_locked(
    tier: str,
    out: Path,
    entries: list[SuiteRun],
    seeds: int | None,
    jobs: int,
    only: dict[str, str] | None,
    probe: bool,
    echo: Callable[[str], None],
) -> dict[str, Any]:
    from windtunnel.report import build_report

    runs_dir = out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    entries.sort(key=estimated_cost, reverse=True)  # longest first: parallel jobs finish close together
    threads = max(1, (os.cpu_count() or 1) // jobs)
    start = time.time()
    results = []
    echo(f"{len(entries)} runs, tier {tier}, {jobs} job(s) x {threads} thread(s) -> {out}")
    if jobs == 1:
        for e in entries:
            results.append(run_one(e, runs_dir, threads, probe))
            echo(_line(results[-1]))
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(run_one, e, runs_dir, threads, probe) for e in entries]
            for f in as_completed(futures):
                results.append(f.result())
                echo(_line(results[-1]))
    meta = {
        "tier": tier,
        **machine_description(),
        "seeds": {
            f"{e.config['task']['name']}-{e.config['model']['arch']}": e.config["seed"] + 1
            for e in sorted(entries, key=lambda e: e.config["seed"])
        },
        "jobs": jobs,
        "total_wall_s": round(time.time() - start, 1),
        "run_wall_s": {r["name"]: r.get("wall_s") for r in results},
        "command": f"windtunnel reproduce --tier {tier} --out {out} --jobs {jobs}"
        + (f" --seeds {seeds}" if seeds is not None else "")
        + "".join(f" --only {k}={v}" for k, v in (only or {}).items()),
        "deviations": deviations(tier),
    }
    write_json(out / "reproduce.json", meta)
    build_report([runs_dir], out, meta)
    return meta


def _line(r: dict[str, Any]) -> str:
    state = "skipped (done)" if r.get("skipped") else "finished"
    return f"  {r['name']}: {state} in {r.get('wall_s', '?')} s"
