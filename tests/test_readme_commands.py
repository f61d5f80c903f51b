"""The README's commands as a new user runs them: through the installed `windtunnel` entry point in a subprocess, in
the README's order, each at the smallest size that exercises its real path (tests/readme_commands.py). `make demo`
is `windtunnel demo`: its test runs the whole smoke tier and reads the report it writes."""

from __future__ import annotations

import json

import pytest

from readme_commands import check_ran, readme_commands, run_cli, shrink


def test_the_readme_shows_the_commands_a_user_needs():
    shown = {args[0] for args in readme_commands()}
    assert {"train", "eval", "probe", "reproduce", "report", "sweep", "time-to-bayes", "tasks"} <= shown


@pytest.mark.slow
def test_every_readme_command_runs_through_the_entry_point(tmp_path):
    """Each command line of the README, in order, in one working directory (train writes the run eval and probe
    read; reproduce writes the folder report reads). The Ray line runs on a real cluster in tests/test_ray.py."""
    ran: dict[str, str] = {}
    for args in readme_commands():
        if "--executor" in args and args[args.index("--executor") + 1] == "ray":
            continue
        small = shrink(args, tmp_path)
        done = run_cli(small, tmp_path)
        check_ran(small, done)
        ran[small[0]] = done.stdout
    assert {"train", "eval", "probe", "reproduce", "report"} <= set(ran)
    assert "K=50" in ran["eval"]  # the README's length generalisation: the HMM trained at K = 20, evaluated at 50
    assert (tmp_path / "runs" / "hmm-tf" / "eval.json").is_file() and (tmp_path / "report" / "report.md").is_file()


@pytest.mark.slow
def test_demo_runs_the_smoke_tier_to_its_report(tmp_path):
    """`make demo` runs `windtunnel demo`; `--tier smoke --out DIR` is the same command at its smallest size: every
    cell of the smoke tier is trained, evaluated, probed and reported."""
    from windtunnel.suites import TIER_CAVEATS, suite

    args = ["demo", "--tier", "smoke", "--out", "d", "--no-progress"]
    done = run_cli(args, tmp_path)
    check_ran(args, done)
    assert "report: d/report.md" in done.stdout
    report = (tmp_path / "d" / "report.md").read_text()
    assert "Table 1" in report and "| transformer |" in report
    results = json.loads((tmp_path / "d" / "results.json").read_text())
    assert {r["name"] if isinstance(r, dict) else r for r in results["runs"]} >= {e.name for e in suite("smoke")}
    assert json.loads((tmp_path / "d" / "manifest.json").read_text())["tier"] == "smoke"
    # the tier says what it is first in its report and last on the terminal; no library's warning reaches the log
    caveat = TIER_CAVEATS["smoke"]
    assert report.splitlines()[2] == f"> **{caveat}**" and done.stdout.rstrip().endswith(caveat)
    assert "class='banner'>Smoke tier: a plumbing test" in (tmp_path / "d" / "report.html").read_text()
    assert "warning" not in done.stderr.lower() and "sklearn" not in done.stderr, done.stderr


def test_demo_and_reproduce_share_every_option():
    """One definition serves both commands: the same options, only the defaults of the demo's own may differ."""
    import typer.main

    from windtunnel.cli import app

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    demo, reproduce = commands["demo"], commands["reproduce"]
    options = {p.name: p.default for p in demo.params}
    assert options.keys() == {p.name: p for p in reproduce.params}.keys()
    assert options["tier"] == "quick" and options["jobs"] == 2 and options["out"] is None  # -> runs/paper-quick


@pytest.mark.parametrize("command", ["reproduce", "demo"])
def test_a_command_called_without_its_options_is_a_named_bug(command, capsys):
    """Calling a command function from Python without an option hands it typer's OptionInfo (the defect that broke
    `make demo`): `guarded` names the options instead of failing deep inside, before anything runs."""
    import typer

    from windtunnel.cli import reproduce_cmd

    with pytest.raises(typer.Exit) as exit_:
        getattr(reproduce_cmd, command)(tier="smoke")
    assert exit_.value.exit_code == 1
    err = capsys.readouterr().err
    assert "without" in err and "out, seeds, jobs" in err and "imports" in err  # the options it was not given
