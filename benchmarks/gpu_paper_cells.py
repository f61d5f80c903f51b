"""The paper tier's cells on one GPU, many runs at once, under a wall-clock deadline (the GPU check).

Every run of `suite("paper")` that the `--wave`s select trains at the authors' recipe and budget
(`suites.settings.PAPER_SETTINGS`), each in its own `windtunnel train` process, all at once on the one GPU: these
models are small, so one run leaves the GPU mostly idle and many together use it. With `--stack` the seeds of each
cell train instead as one stacked model in one process (`training.stacked.train_stacked`, into the same run
directories), which on a GPU launches the kernels of one seed for all of them. At `--train-seconds` every process
still training gets SIGTERM, which writes a checkpoint at its current step (every seed's, stacked); such a run is
then evaluated at that checkpoint (`windtunnel eval`), and the report marks it as not the finished run of its config
(it is never pooled with a finished one). Nothing is scaled down to fit unless `--set` says so (for a try of the
path): a run either reaches the authors' budget or says how far it got. Then the geometry probes (within
`--probe-seconds`) and the report.

    python benchmarks/gpu_paper_cells.py --out runs/gpu-paper                  # on the GPU machine
    python benchmarks/gpu_paper_cells.py --out runs/gpu-paper --stack          # each cell's seeds stacked
    python benchmarks/gpu_paper_cells.py --out runs/gpu-paper --stack --compile reduce-overhead   # and CUDA graphs
    python benchmarks/gpu_paper_cells.py --out runs/x --train-seconds 20 --wave hmm/transformer/1   # a CPU try

Writes OUT/runs/NAME (run directories), OUT/report.md|html|results.json, and OUT/gpu_paper_cells.json: per run the
steps reached of the budget, training seconds, seconds per step (of its process: a stacked step trains every seed),
whether it finished, the exit status of each phase and, with `--stack`, `stacked`: the seeds of its process; the
machine (GPU name, torch, CUDA) and the command. `python benchmarks/gpu_paper_cells.py train-stacked CONFIG DIR
[CONFIG DIR ...]` is the process of one stack (exit 143 after SIGTERM, as `windtunnel train`)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_WAVES = ["hmm,hmm-sticky/transformer/3", "bijection/transformer/1+bijection,hmm,hmm-sticky/mamba/1"]
WT = [sys.executable, "-c", "import sys; from windtunnel.cli import main; sys.argv[0] = 'windtunnel'; main()"]
STACK = [sys.executable, str(Path(__file__).resolve()), "train-stacked"]


def machine() -> dict[str, Any]:
    """The device the runs train on: torch, CUDA, the GPU's name and memory (or the CPU)."""
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "python": sys.version.split()[0], "cuda": torch.version.cuda}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2**30, 1), sms=p.multi_processor_count)
    info["cpus"] = os.cpu_count()
    return info


def latest_step(run_dir: Path) -> int | None:
    """The step of the run's latest checkpoint, None before the first."""
    from windtunnel.runs.checkpoints import list_checkpoints

    return max(list_checkpoints(run_dir), default=None) if run_dir.exists() else None


def train_stack(args: list[str]) -> int:
    """`train-stacked CONFIG DIR [CONFIG DIR ...]`: the seeds' configs (JSON files) trained stacked into their run
    directories, SIGTERM writing every seed's checkpoint at the current step. 0 when every run finished, 1 when one
    failed, 128 + the signal when one stopped it."""
    from windtunnel.training.stacked import StackInterrupted, train_stacked

    configs = [json.loads(Path(c).read_text()) for c in args[0::2]]
    dirs = [Path(d) for d in args[1::2]]
    try:
        results = train_stacked(configs, dirs, handle_signals=True, echo=lambda line: print(line, flush=True))
    except StackInterrupted as err:
        print(f"interrupted: {err}", flush=True)
        return err.exit_code
    for d, r in zip(dirs, results, strict=True):
        print(f"run: {d}: " + (f"error: {r}" if isinstance(r, BaseException) else "finished"), flush=True)
    return 1 if any(isinstance(r, BaseException) for r in results) else 0


def stacks(entries: list[Any]) -> dict[str, list[Any]]:
    """The entries grouped into stacks: one per config up to the seed (a cell's seeds), named TASK-ARCH-stacked."""
    groups: dict[str, list[Any]] = {}
    for e in entries:
        key = json.dumps({k: v for k, v in e.config.items() if k != "seed"}, sort_keys=True)
        groups.setdefault(key, []).append(e)
    named: dict[str, list[Any]] = {}
    for group in groups.values():
        cfg = group[0].config
        name = base = f"{cfg['task']['name']}-{cfg['model']['arch']}-stacked"
        i = 1
        while name in named:
            i += 1
            name = f"{base}{i}"
        named[name] = group
    return named


def run_all(commands: dict[str, list[str]], logs: Path, limit_s: float, grace_s: float = 60.0) -> dict[str, Any]:
    """Start every command at once; at `limit_s` send SIGTERM to those still running and wait up to `grace_s` for
    them (a training run writes its checkpoint and exits). {name: {"rc", "wall_s", "stopped": bool}}."""
    return run_waves([commands], logs, limit_s, grace_s)


def run_waves(waves: list[dict[str, list[str]]], logs: Path, limit_s: float, grace_s: float = 60.0) -> dict[str, Any]:
    """`run_all` in waves: each wave's commands start together once every command of the one before has ended (a
    wave not started by `limit_s` never starts, and is absent from the result)."""
    logs.mkdir(parents=True, exist_ok=True)
    start = time.time()
    procs: dict[str, subprocess.Popen[bytes]] = {}
    began: dict[str, float] = {}
    pending = [w for w in waves if w]
    ended: dict[str, Any] = {}
    stopped: set[str] = set()
    while pending or len(ended) < len(procs):
        now = time.time() - start
        if pending and len(ended) == len(procs) and now < limit_s:
            for name, cmd in pending.pop(0).items():
                with open(logs / f"{name}.log", "w") as log:
                    procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                began[name] = now
        elif pending and now >= limit_s and len(ended) == len(procs):
            break
        for name, p in procs.items():
            if name not in ended and p.poll() is not None:
                wall = round(now - began[name], 1)
                ended[name] = {
                    "rc": p.returncode,
                    "wall_s": wall,
                    "started_s": round(began[name], 1),
                    "stopped": name in stopped,
                }
        if now > limit_s and not stopped:
            for name, p in procs.items():
                if name not in ended:
                    p.send_signal(signal.SIGTERM)
                    stopped.add(name)
        if now > limit_s + grace_s:
            for name, p in procs.items():
                if name not in ended:
                    p.kill()
                    ended[name] = {"rc": "killed", "wall_s": round(now - began[name], 1), "stopped": True}
        time.sleep(0.5)
    return ended


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--wave",
        action="append",
        help="TASKS/ARCHS/SEEDS[+...], e.g. hmm,hmm-sticky/transformer/3 (repeatable): the runs of a wave start "
        "together once the previous wave's have all ended; default: the HMM transformers (3 seeds), then one "
        "seed of each bijection transformer, Mamba cell",
    )
    ap.add_argument("--train-seconds", type=float, default=270.0)
    ap.add_argument("--probe-seconds", type=float, default=90.0)
    ap.add_argument("--device", default="auto", help="train.device of every run (auto: CUDA when present)")
    ap.add_argument(
        "--compile",
        nargs="?",
        const=True,
        default=False,
        choices=["reduce-overhead", "max-autotune"],
        metavar="MODE",
        help="train.compile for every run: torch.compile of the training forward (with --stack: of the seeds' "
        "stacked forward), in torch's default mode, or MODE (reduce-overhead: CUDA graphs, the kernels of a step "
        "launched as one); the same model and recipe, the run's config records it",
    )
    ap.add_argument(
        "--stack",
        action="store_true",
        help="train each cell's seeds as one stacked model in one process (training.stacked), into the same run "
        "directories",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="K=V",
        help="dotted override of every run's config (e.g. train.steps=50): for a try of the path, not the paper's "
        "budget",
    )
    args = ap.parse_args()
    from windtunnel.config import apply_overrides, parse_value

    overrides = {}
    for item in args.set:
        key, eq, value = item.partition("=")
        if not eq or not key:
            ap.error(f"--set {item!r}: expected K=V, e.g. train.steps=50")
        overrides[key] = parse_value(value)

    from windtunnel.suites.paper import suite

    t0 = time.time()
    out: Path = args.out
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    configs = out / "configs"
    configs.mkdir(exist_ok=True)
    waves: list[dict[str, list[str]]] = []
    entries = []
    budgets: dict[str, int] = {}  # each run's train.steps
    members: dict[str, list[str]] = {}  # with --stack: each stacked process's runs
    for spec in args.wave or DEFAULT_WAVES:
        wave = []
        for part in spec.split("+"):
            tasks, archs, seeds = part.split("/")
            wave += suite("paper", seeds=int(seeds), only={"task": tasks, "arch": archs})
        entries += wave
        waves.append({})
        for e in wave:
            cfg = {**e.config, "train": {**e.config["train"], "device": args.device, "compile": args.compile}}
            cfg = apply_overrides(cfg, overrides) if overrides else cfg
            budgets[e.name] = cfg["train"]["steps"]
            path = configs / f"{e.name}.json"
            path.write_text(json.dumps(cfg, indent=1))
            waves[-1][e.name] = [*WT, "train", "--config", str(path), "--out", str(runs / e.name), "--no-progress"]
        if args.stack:  # one process per cell instead: its seeds' configs and run directories
            waves[-1] = {}
            for name, group in stacks(wave).items():
                members[name] = [e.name for e in group]
                pairs = [str(p) for e in group for p in (configs / f"{e.name}.json", runs / e.name)]
                waves[-1][name] = [*STACK, *pairs]
    record: dict[str, Any] = {
        "command": "python benchmarks/gpu_paper_cells.py " + shlex.join(sys.argv[1:]),
        "machine": machine(),
        "stack": args.stack,
        "runs": {e.name: {"steps_budget": budgets[e.name]} for e in entries},
    }
    for runs_of in members.values():  # with --stack: the seeds each run trains with (itself included)
        for name in runs_of:
            record["runs"][name]["stacked"] = len(runs_of)
    stacked = f" as {sum(len(w) for w in waves)} stacked processes" if args.stack else ""
    print(f"{len(entries)} runs{stacked} in {len(waves)} waves, deadline {args.train_seconds:.0f} s", flush=True)
    trained = run_waves(waves, out / "logs" / "train", args.train_seconds, grace_s=30.0)
    for process, r in trained.items():
        for name in members.get(process, [process]):
            rec = record["runs"][name]
            step = latest_step(runs / name)
            rec.update(train=r, steps_reached=step, finished=(runs / name / "eval.json").exists() and not r["stopped"])
            if step:  # wall time of the process (start-up and the final evaluation included) over its steps
                rec["s_per_step"] = round(r["wall_s"] / step, 5)
    for rec in record["runs"].values():
        rec.setdefault("finished", False)
        rec.setdefault("steps_reached", None)
    print(f"trained in {time.time() - t0:.0f} s", flush=True)
    # a run stopped by the deadline: evaluated at its checkpoint (its record says which step)
    evals = {
        n: [*WT, "eval", str(runs / n)] for n, r in record["runs"].items() if not r["finished"] and r["steps_reached"]
    }
    for name, r in run_all(evals, out / "logs" / "eval", 60.0, grace_s=5.0).items():
        record["runs"][name]["eval"] = r
    print(f"evaluated at {time.time() - t0:.0f} s", flush=True)
    reached = [n for n, r in record["runs"].items() if r["steps_reached"]]
    probes = {n: [*WT, "probe", str(runs / n), "--device", "auto"] for n in reached}
    for name, r in run_all(probes, out / "logs" / "probe", args.probe_seconds, grace_s=5.0).items():
        record["runs"][name]["probe"] = r
    print(f"probed at {time.time() - t0:.0f} s", flush=True)
    record["total_wall_s"] = round(time.time() - t0, 1)
    (out / "gpu_paper_cells.json").write_text(json.dumps(record, indent=1))
    rc = subprocess.run([*WT, "report", str(runs), "--out", str(out)], capture_output=True, text=True)
    (out / "logs" / "report.log").write_text(rc.stdout + rc.stderr)
    print(f"report rc {rc.returncode} at {time.time() - t0:.0f} s", flush=True)
    for name, r in record["runs"].items():
        print(f"  {name}: {r.get('steps_reached')} / {r['steps_budget']} steps, {r.get('train', 'not started')}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["train-stacked"]:
        sys.exit(train_stack(sys.argv[2:]))
    main()
