"""`windtunnel tasks` and `windtunnel tasks show`: output and exit codes."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from windtunnel.cli import app

runner = CliRunner()


def test_tasks_lists_all_builtins():
    res = runner.invoke(app, ["tasks"])
    assert res.exit_code == 0, res.output
    for name, length in [("bijection", 37), ("hmm", 93), ("recall", 329), ("regression", 47)]:
        assert re.search(rf"^{name}\s+T={length}\b", res.output, re.M)
    assert "10^18.4" in res.output and "10^61.8" in res.output and "continuous" in res.output
    assert "V=20 L=19" in res.output


def test_show_bijection_prints_entropy_and_truth():
    res = runner.invoke(app, ["tasks", "show", "bijection", "--param", "V=6", "-p", "L=5", "--seed", "2"])
    assert res.exit_code == 0, res.output
    ents = [float(h) for h in re.findall(r"H=([0-9.]+)", res.output)]
    assert ents == [2.585, 2.322, 2.0, 1.585, 1.0]  # log2(6 - t)
    assert res.output.count("truth=") == 5 and "k" in res.output and "v" in res.output


def test_show_regression_and_hmm():
    res = runner.invoke(app, ["tasks", "show", "regression", "-p", "n=3"])
    assert res.exit_code == 0 and res.output.count("pred=N(") == 3 and "differential" in res.output
    res = runner.invoke(app, ["tasks", "show", "hmm", "-p", "K=4"])
    assert res.exit_code == 0 and "[TRANS]" in res.output and res.output.count("H=") == 4


def test_show_bad_input_exits_2():
    res = runner.invoke(app, ["tasks", "show", "bijection", "-p", "L=30"])
    assert res.exit_code == 2 and "bijection.L: must be <= V=20" in res.output
    res = runner.invoke(app, ["tasks", "show", "nosuch"])
    assert res.exit_code == 2 and "unknown task" in res.output
    res = runner.invoke(app, ["tasks", "show", "hmm", "-p", "S"])
    assert res.exit_code == 2 and "--param" in res.output
