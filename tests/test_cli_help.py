"""The command line's help: it loads no heavy library, the root listing fits a screen, every option is one short line,
and the same option is spelt the same on every command. The commands are found by walking the app, so a new one is
held to the same rules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from windtunnel.cli import app
from windtunnel.cli.common import EXECUTION

# Imported by a command that computes, never by help or --version: each takes from a quarter of a second (pandas) to
# seconds (torch, transformers) to import.
HEAVY = ("torch", "scipy", "sklearn", "matplotlib", "pandas", "transformers", "ray")
# The root listing fits a terminal 80 columns wide, in at most 30 lines: one screen of any window but the classic
# 80 x 24, which it overflows by at most six lines; that leaves room for a few more commands before they must be
# grouped. Today's twelve take 24 lines.
WIDTH, ROOT_LINES = 80, 30
# An option's help is one clause: at most 80 characters, the details in the command's own text or the docs it names.
HELP_CHARS = 80
# Commands that run no torch computation, so no --threads: each lists, prints, samples one sequence or reads files.
NO_COMPUTE = {
    "tasks": "lists the tasks",
    "tasks show": "samples one sequence",
    "recipes": "prints recipes",
    "report": "reads run files and draws figures",
}
# The options that say where and on how many threads the work runs: under one heading wherever they appear.
EXECUTION_OPTIONS = {"executor", "jobs", "threads", "ray_address", "max_retries", "device"}


def _commands() -> list[tuple[tuple[str, ...], Any]]:
    """(path, click command) of the root and of every command and subcommand under it."""
    found = []

    def walk(path: tuple[str, ...], command: Any) -> None:
        found.append((path, command))
        for name, sub in getattr(command, "commands", {}).items():
            walk((*path, name), sub)

    walk((), typer.main.get_command(app))
    return found


COMMANDS = _commands()
LEAVES = [(" ".join(path), c) for path, c in COMMANDS if not hasattr(c, "commands")]
GROUPS = [(path, c) for path, c in COMMANDS if hasattr(c, "commands")]

# In a fresh interpreter, as the console entry runs them: the help of the root and of every command, then --version;
# prints what each wrote and every module then imported.
RENDER = """
import contextlib, io, json, sys
from windtunnel.cli import main
shown = {}
for args in json.loads(sys.argv[1]):
    sys.argv = ["windtunnel", *args]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main()
        except SystemExit:
            pass
    shown[" ".join(args)] = out.getvalue()
print(json.dumps({"shown": shown, "modules": sorted(sys.modules)}))
"""


@pytest.fixture(scope="module")
def rendered() -> dict[str, Any]:
    calls = [[*path, "--help"] for path, _ in COMMANDS] + [["--version"]]
    env = {k: v for k, v in os.environ.items() if k not in ("TERMINAL_WIDTH", "FORCE_COLOR", "PY_COLORS")}
    env.pop("GITHUB_ACTIONS", None)  # typer forces colour codes there
    env["COLUMNS"] = str(WIDTH)
    done = subprocess.run(
        [sys.executable, "-c", RENDER, json.dumps(calls)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_help_and_version_import_no_heavy_library(rendered):
    assert len(rendered["shown"]) == len(COMMANDS) + 1 and all(rendered["shown"].values())
    assert [m for m in HEAVY if m in rendered["modules"]] == []


def test_version_names_windtunnel_and_torch(rendered):
    assert rendered["shown"]["--version"].strip().endswith(f"(torch {version('torch')})")


def _panel(text: str, title: str) -> list[str]:
    """The rows of the help panel headed `title`, its borders left out."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"╭─ {title} "))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("╰"))
    return lines[start + 1 : end]


def test_the_root_help_fits_a_screen(rendered):
    lines = rendered["shown"]["--help"].rstrip().splitlines()
    assert len(lines) <= ROOT_LINES and max(map(len, lines)) <= WIDTH


@pytest.mark.parametrize("path", [p for p, _ in GROUPS], ids=lambda p: " ".join(p) or "windtunnel")
def test_a_group_lists_each_command_on_one_line(rendered, path):
    """The first sentence of a command's text, its full text in its own help."""
    group = dict(GROUPS)[path]
    rows = _panel(rendered["shown"][" ".join([*path, "--help"])], "Commands")
    assert [row.split()[1] for row in rows] == list(group.commands), rows


def test_no_flag_shows_a_value_placeholder(rendered):
    assert [args for args, text in rendered["shown"].items() if "<bool>" in text] == []


@pytest.mark.parametrize("name,command", LEAVES, ids=[n for n, _ in LEAVES])
def test_every_option_is_one_short_line(name, command):
    long = [(p.name, p.help) for p in command.params if "\n" in (p.help or "") or len(p.help or "") > HELP_CHARS]
    assert long == []


@pytest.mark.parametrize("name,command", LEAVES, ids=[n for n, _ in LEAVES])
def test_one_spelling_for_one_option(name, command):
    """-o/--out wherever there is an --out, --progress/--no-progress wherever progress can be turned off."""
    options = [p for p in command.params if p.param_type_name == "option"]
    for p in options:
        if "--out" in p.opts:
            assert sorted(p.opts) == ["--out", "-o"], p.opts
        if any("progress" in o for o in [*p.opts, *p.secondary_opts]):
            assert (p.opts, p.secondary_opts) == (["--progress"], ["--no-progress"])


@pytest.mark.parametrize("name,command", LEAVES, ids=[n for n, _ in LEAVES])
def test_every_command_that_computes_takes_threads(name, command):
    opts = {o for p in command.params for o in p.opts}
    assert ("--threads" in opts) == (name not in NO_COMPUTE), NO_COMPUTE.get(name, "computes: needs --threads")


@pytest.mark.parametrize("name,command", LEAVES, ids=[n for n, _ in LEAVES])
def test_execution_options_share_one_heading(rendered, name, command):
    ours = {p.name: p.rich_help_panel for p in command.params if p.name in EXECUTION_OPTIONS}
    assert set(ours.values()) <= {EXECUTION}, ours
    if ours:
        rows = _panel(rendered["shown"][f"{name} --help"], EXECUTION)
        assert len([r for r in rows if r.startswith("│ --")]) == len(ours)


def test_threads_must_be_positive():
    r = CliRunner().invoke(app, ["eval", "no-such-run", "--threads", "0"])
    assert r.exit_code == 2 and r.output.strip() == "error: --threads: must be >= 1 (got 0)"
