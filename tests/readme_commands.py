"""The README's `windtunnel` command lines, and each shrunk to the smallest size that still runs its real path, for
the tests that run them through the installed entry point (tests/test_readme_commands.py, tests/test_ray.py)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
# The installed console script, beside the interpreter that runs the tests (.venv/bin/windtunnel under `make test`).
ENTRY_POINT = Path(sys.executable).parent / "windtunnel"

# The sizes a README command shrinks to. A tier, preset or budget the README names is replaced; everything else
# (paths, flags, the order of the commands) runs as written.
SMALL_TIER = "smoke"
SMALL_EVAL_N = "64"
SMALL_CELL = {"tier": "smoke", "steps": "4", "batch_size": "4", "eval_every": "2", "eval_size": "16"}
# reproduce: one task of the smoke tier (its probes and report included); the whole tier runs in the demo test.
SMALL_SUITE = ["--only", "task=bijection"]
# The sweep's base config, written where the README's `base.yaml` is read: a point trains in well under a second.
SWEEP_BASE_YAML = """\
task: {name: bijection, params: {V: 5, L: 4}}
model: {arch: transformer, preset: smoke}
train: {steps: 4, batch_size: 4, device: cpu}
eval: {n: 16}
"""
# Every subcommand the README shows; a new one fails `shrink` until this file knows how to shrink it.
KNOWN = {
    "tasks",
    "train",
    "eval",
    "probe",
    "reproduce",
    "demo",
    "report",
    "recipes",
    "time-to-bayes",
    "sweep",
    "compare",
    "--help",  # the root help: nothing to shrink
}


def readme_commands() -> list[list[str]]:
    """Every `windtunnel` command the README shows, in order, once each, as arguments after `windtunnel`: each line
    of its bash blocks (continuations joined, comments dropped), then each inline command with an option."""
    text = README.read_text()
    lines: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        lines += [line.split("  #")[0].strip() for line in joined.splitlines()]
    lines += re.findall(r"`(windtunnel [^`]*--[^`]*)`", text)
    out: list[list[str]] = []
    for line in lines:
        if line.startswith("windtunnel "):
            args = shlex.split(line)[1:]
            if args not in out:
                out.append(args)
    return out


def _option(args: list[str], name: str, value: str) -> None:
    if name in args:
        args[args.index(name) + 1] = value


def shrink(args: list[str], tmp: Path) -> list[str]:
    """A README command at its smallest size: the smoke tier and preset, a few steps and sequences, absolute paths
    under `tmp`. Raises for a subcommand this file does not know (add a rule for it)."""
    args = list(args)
    command = args[0]
    assert command in KNOWN, (
        f"the README shows `windtunnel {command}`: add how to shrink it to tests/readme_commands.py"
    )
    _option(args, "--tier", SMALL_TIER)
    if "--preset" in args:
        i = args.index("--preset")
        args[i : i + 2] = ["--preset", "smoke", "--steps", "2"]
    _option(args, "--n", SMALL_EVAL_N)
    for i, a in enumerate(args):
        if a.startswith("/"):  # an absolute path (a cluster's shared storage): under tmp instead
            args[i] = str(tmp / a.lstrip("/"))
    if command == "time-to-bayes" and "--cell" in args:  # a cell to train (compare's --cell selects, as written)
        i = args.index("--cell") + 1
        cell = dict(kv.split("=", 1) for kv in args[i].split(","))
        args[i] = ",".join(f"{k}={v}" for k, v in {**cell, **SMALL_CELL}.items())
    if command in ("reproduce", "demo") and "--only" not in args:
        args += SMALL_SUITE
    if command in ("train", "reproduce", "demo", "time-to-bayes", "sweep"):
        args.append("--no-progress")
    if command == "sweep":
        (tmp / args[1]).write_text(SWEEP_BASE_YAML)
    return args


def run_cli(
    args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """`windtunnel ARGS` through the installed entry point, in `cwd`, with one thread per process."""
    assert ENTRY_POINT.is_file(), f"no installed entry point at {ENTRY_POINT} (pip install -e . first)"
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    full_env.pop("WINDTUNNEL_DEBUG", None)
    return subprocess.run(
        [str(ENTRY_POINT), *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout
    )


def check_ran(args: list[str], done: subprocess.CompletedProcess) -> None:
    """Exit 0 with no internal error or traceback: a CLI option that reached a function as a typer object (or any
    other bug) fails here."""
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"`windtunnel {shlex.join(args)}` exited {done.returncode}:\n{output[-3000:]}"
    assert "internal error" not in output and "Traceback" not in output, output[-3000:]
