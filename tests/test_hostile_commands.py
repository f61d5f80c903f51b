"""Hostile use of the commands that read a run or drive many: a run on read-only storage evaluated and probed with
the results written elsewhere, eval's --set given keys that are no task parameter, and sweep and time-to-bayes given
bad values and files. Each test reproduces the attack and asserts the behaviour now."""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli_checks import error_line
from windtunnel.cli import app

runner = CliRunner()


def _snapshot(root: Path) -> dict[str, bytes | str]:
    return {str(p.relative_to(root)): "dir" if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


# --- 1. a run on read-only storage --------------------------------------------------------------------------------

_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


@pytest.fixture
def read_only(monkeypatch):
    """`read_only(path, access=True)`: every write under `path` fails as on a read-only mount (EROFS): a file opened
    for writing, a folder made, a rename; with `access` os.access says so too (as it does on a read-only mount), else
    it lies (root on a share that refuses writes)."""

    def make(path: Path, access: bool = True) -> None:
        root = os.path.realpath(path)

        def inside(p) -> bool:
            return isinstance(p, (str, bytes, os.PathLike)) and os.path.realpath(os.fsdecode(p)).startswith(root)

        def refuse(p) -> None:
            raise OSError(errno.EROFS, "Read-only file system", os.fsdecode(p))

        real_open, real_mkdir, real_replace, real_access = os.open, os.mkdir, os.replace, os.access
        real_builtin_open = builtins.open

        def os_open(p, flags, *a, **k):
            if flags & _WRITE and inside(p):
                refuse(p)
            return real_open(p, flags, *a, **k)

        def py_open(p, mode="r", *a, **k):
            if any(c in mode for c in "wax+") and inside(p):
                refuse(p)
            return real_builtin_open(p, mode, *a, **k)

        def mkdir(p, *a, **k):
            if inside(p):
                refuse(p)
            return real_mkdir(p, *a, **k)

        def replace(src, dst, *a, **k):
            if inside(dst):
                refuse(dst)
            return real_replace(src, dst, *a, **k)

        def os_access(p, mode, *a, **k):
            return False if access and mode & os.W_OK and inside(p) else real_access(p, mode, *a, **k)

        monkeypatch.setattr(os, "open", os_open)
        monkeypatch.setattr(os, "mkdir", mkdir)
        monkeypatch.setattr(os, "replace", replace)
        monkeypatch.setattr(os, "access", os_access)
        monkeypatch.setattr(builtins, "open", py_open)
        monkeypatch.setattr(io, "open", py_open)

    return make


@pytest.mark.parametrize("access", [True, False], ids=["access-says-so", "access-lies"])
def test_eval_of_a_run_on_read_only_storage_says_so_in_one_line_and_how_to_write_elsewhere(trained, read_only, access):
    before = _snapshot(trained)
    read_only(trained, access=access)
    line = error_line(runner.invoke(app, ["eval", str(trained)]), 2)
    assert "is read-only" in line and str(trained) in line and "--out FILE" in line, line
    assert _snapshot(trained) == before


def test_eval_out_writes_the_results_elsewhere_and_only_reads_a_run_on_read_only_storage(trained, read_only, tmp_path):
    before = _snapshot(trained)
    read_only(trained)
    out = tmp_path / "scores.json"
    r = runner.invoke(app, ["eval", str(trained), "--out", str(out), "--set", "task.L=3"])
    assert r.exit_code == 0, r.output
    assert f"wrote {out}" in r.output
    written = json.loads(out.read_text())
    assert list(written) == ["L=3"] and written["L=3"]["task_params"]["L"] == 3
    assert _snapshot(trained) == before  # no eval.json merged, no evals/ made


def test_eval_out_refuses_a_file_inside_the_run_before_any_work(trained):
    before = _snapshot(trained)
    line = error_line(runner.invoke(app, ["eval", str(trained), "--out", str(trained / "mine.json")]), 2)
    assert "--out" in line and "run directory" in line, line
    assert _snapshot(trained) == before


@pytest.mark.parametrize("access", [True, False], ids=["access-says-so", "access-lies"])
def test_probe_of_a_run_on_read_only_storage_says_so_in_one_line_and_out_only_reads_it(
    trained, read_only, tmp_path, access
):
    before = _snapshot(trained)
    read_only(trained, access=access)
    line = error_line(runner.invoke(app, ["probe", str(trained), "--n", "8", "--no-figures"]), 2)
    assert "is read-only" in line and "--out DIR" in line and "geometry.json" in line, line
    out = tmp_path / "geo"
    r = runner.invoke(app, ["probe", str(trained), "--n", "8", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert (out / "geometry.json").is_file() and any((out / "figures").glob("*.png"))
    assert _snapshot(trained) == before


# --- 2. eval --set keys that are no task parameter ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ("eval.n=100", "--n 100"),
        ("eval.batch_size=4", "--batch-size 4"),
        ("eval.dtype=bf16", "--dtype bf16"),
        ("train.device=cpu", "--device cpu"),
        ("eval.overrides=x", "--n, --batch-size, --dtype, or a task parameter"),
        ("seed=5", "eval takes no seed"),
        ("model.arch=lstm", "the run's own model as trained"),
        ("model.d_model=8", "the run's own model as trained"),
        ("train.steps=3", "a training setting"),
        ("task.name=hmm", "the task it trained on"),
        ("task.params=3", "task.NAME=value or task.params.NAME=value"),
        ("task.=3", "task.NAME=value or task.params.NAME=value"),
        ("task.params.L.x=3", "task.NAME=value or task.params.NAME=value"),
        ("colour=red", "not a setting eval takes"),
    ],
)
def test_eval_set_of_a_key_that_is_no_task_parameter_says_what_sets_it(trained, item, says):
    line = error_line(runner.invoke(app, ["eval", str(trained), "--set", item]), 2)
    assert says in line, line
    assert "not task.name" not in line, line


def test_eval_set_takes_a_task_parameter_as_train_s_set_does_task_params_name(trained):
    short = runner.invoke(app, ["eval", str(trained), "--set", "task.L=3", "--json"])
    long = runner.invoke(app, ["eval", str(trained), "--set", "task.params.L=3", "--json"])
    assert short.exit_code == 0 and long.exit_code == 0, long.output
    assert json.loads(short.stdout)["L=3"]["metrics"] == json.loads(long.stdout)["L=3"]["metrics"]
    line = error_line(runner.invoke(app, ["eval", str(trained), "--set", "task.L=3", "--set", "task.params.L=4"]), 2)
    assert "given twice" in line, line


# --- 3. sweep and time-to-bayes: bad values and files --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("{bad\n", "line 2, column 1: expected ',' or '}'"),
        ("a: [1\n", "line 2, column 1: expected ',' or ']'"),
        ("model:\n  arch: SECRET-TEXT: here\n", "line 2, column 20: mapping values are not allowed here"),
    ],
)
def test_a_config_that_is_no_yaml_is_one_line_naming_line_and_column_never_its_text(tmp_path, text, where):
    f = tmp_path / "base.yaml"
    f.write_text(text)
    for args in (["sweep", str(f), "--grid", "train.lr=1e-3"], ["train", "--config", str(f)]):
        line = error_line(runner.invoke(app, [*args, "--out", str(tmp_path / "o")]), 2)
        assert f"cannot parse {str(f)!r}: {where}" in line, line
        assert "SECRET" not in line and "^" not in line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("path", "kind"), [("/dev/null", "a device, FIFO or socket"), (".", "a directory")])
def test_a_config_that_is_no_file_is_named_so_not_missing(tmp_path, path, kind):
    line = error_line(runner.invoke(app, ["sweep", path, "--grid", "train.lr=1e-3", "--out", str(tmp_path / "o")]), 2)
    assert f"is {kind}, not a config file" in line and "no such file" not in line, line


def test_sweep_set_of_a_whole_section_is_named_as_the_set_key_it_is(tmp_path):
    from cli_args import SWEEP_BASE

    base = tmp_path / "base.json"
    base.write_text(json.dumps(SWEEP_BASE))
    args = ["sweep", str(base), "--grid", "train.lr=1e-3", "--out", str(tmp_path / "o")]
    line = error_line(runner.invoke(app, [*args, "--set", "train=1"]), 2)
    assert line.startswith("error: --set train: ") and "train is a section" in line and "train.lr" not in line, line
    assert not (tmp_path / "o").exists()


def test_a_cell_s_set_value_that_is_a_list_is_one_value():
    from windtunnel.time_to_bayes import parse_cell

    cell = parse_cell("task=hmm,arch=lstm,steps=40,set.train.checkpoint_schedule=[10,20],set.model.size={a: 1, b: 2}")
    assert cell.set == {"train.checkpoint_schedule": [10, 20], "model.size": {"a": 1, "b": 2}} and cell.steps == 40
    assert parse_cell("task=[,arch=lstm,steps=4").task == "["  # a bracket alone stays a value of its own


def test_of_several_cells_the_one_at_fault_is_named(tmp_path):
    good = "task=bijection,arch=transformer,tier=smoke,steps=4,batch_size=4"
    args = ["time-to-bayes", "--out", str(tmp_path / "o"), "--cell", good]
    line = error_line(runner.invoke(app, [*args, "--cell", good + ",set.model.size.d_model=1e9"]), 2)
    assert line.startswith("error: --cell 2 (bijection/transformer/baseline, 4 steps): model.size.d_model"), line
    assert not (tmp_path / "o").exists()


def _results(label: str, key: str, test: object = 0.2) -> dict:
    """A time_to_bayes.json of one cell, as the driver writes it."""
    seeds = [{"crossings": {"0.1": None}, "dtype": "float32", "curve": []}]
    cell = {"key": key, "label": label, "metric": "entropy_mae_bits", "cell": {"task": "bijection"}}
    cell |= {"marks": {}, "seeds": seeds, "test": {"mean": test, "min": 0.2, "max": 0.2}}
    return {"machine": {"machine": "cpu A", "torch": "2.13", "threads_per_run": 1, "jobs": 1}, "cells": [cell]}


def _out(tmp_path: Path) -> list[str]:
    return ["--out", str(tmp_path / "o")]


def test_merge_refuses_a_file_that_holds_one_setting_twice(tmp_path):
    data = _results("cell a", "abc123")
    data["cells"] *= 2  # a hand-edited or concatenated file: the table listed the setting twice
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "time_to_bayes.json").write_text(json.dumps(data))
    line = error_line(runner.invoke(app, ["time-to-bayes", "--merge", str(tmp_path / "a"), *_out(tmp_path)]), 1)
    assert "time_to_bayes.json: cells: " in line and "0 and 1" in line and "one setting" in line, line
    assert not (tmp_path / "o").exists()


def test_merge_of_a_test_value_that_is_no_number_names_the_field(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "time_to_bayes.json").write_text(json.dumps(_results("cell a", "abc123", test="TOPSECRET")))
    line = error_line(runner.invoke(app, ["time-to-bayes", "--merge", str(tmp_path / "a"), *_out(tmp_path)]), 1)
    assert "cells[0].test.mean: " in line and "number" in line and "a string of 9 characters" in line, line
    assert "TOPSECRET" not in line and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("args", "target"),
    [
        (["sweep", "base.json", "--grid", "train.lr=1e-3"], "windtunnel.sweep.sweep"),
        (["time-to-bayes", "--cell", "task=bijection,arch=transformer,steps=4"], "windtunnel.time_to_bayes.run"),
    ],
    ids=["sweep", "time-to-bayes"],
)
def test_a_driver_interrupted_says_so_and_how_to_go_on(tmp_path, monkeypatch, args, target):
    """Ctrl-C (or SIGTERM, which a driver takes as one) while the runs train: exit 130 with one line, not silence."""

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(target, interrupted)
    r = runner.invoke(app, [*args, "--out", str(tmp_path / "o")])
    assert r.exit_code == 130, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("interrupted: "), r.output
    assert "run the same command again to continue" in lines[0], r.output
