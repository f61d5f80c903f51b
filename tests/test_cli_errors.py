"""Bad input and damaged driver files: each is one `error:` line naming the file and the field,
exit 2 for a wrong command and 1 for damaged data, or the right behaviour -- never a traceback, a hang or silence."""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cli_args import SWEEP_BASE
from windtunnel.cli import app
from windtunnel.cli.common import fail
from windtunnel.errors import CheckpointError
from windtunnel.executors import Job, run_job
from windtunnel.progress import Progress, Tracked
from windtunnel.store import rundir
from windtunnel.store.lock import read_owner
from windtunnel.store.rundir import OWNER_FILE
from windtunnel.suites import suite
from windtunnel.sweep import SWEEP_CONFIG, parse_grid

runner = CliRunner()
BASE = SWEEP_BASE
SWEEP = ["--grid", "train.lr=1e-3", "--threads", "1", "--no-progress"]
POINT = "lr=0.001"


def _one_error(result, code: int) -> str:
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in result.output and "internal error" not in result.output, result.output
    return lines[0]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A finished one-point CLI sweep: (its base config file, its --out)."""
    tmp = tmp_path_factory.mktemp("swept")
    config = tmp / "base.json"
    config.write_text(json.dumps(BASE))
    r = runner.invoke(app, ["sweep", str(config), *SWEEP, "--out", str(tmp / "out")])
    assert r.exit_code == 0, r.output
    return config, tmp / "out"


@pytest.fixture
def out(swept, tmp_path):
    """A copy of the finished sweep's --out for a test to damage."""
    return Path(shutil.copytree(swept[1], tmp_path / "out"))


def _sweep(config, out):
    return runner.invoke(app, ["sweep", str(config), *SWEEP, "--out", str(out)])


# --- damaged files of a driver's --out: exit 1, naming the file and the field ----------------------------------


@pytest.mark.parametrize(("field", "value"), [("grid", 5), ("base", []), ("overrides", "x"), ("config", 7)], ids=str)
def test_a_garbled_sweep_config_names_the_file_and_field(swept, out, field, value):
    record = json.loads((out / SWEEP_CONFIG).read_text())
    (out / SWEEP_CONFIG).write_text(json.dumps({**record, field: value}))
    line = _one_error(_sweep(swept[0], out), 1)
    assert f"{out / SWEEP_CONFIG}: {field}: expected" in line


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("[]", "expected a JSON object"),
        ("xx{", "corrupted or truncated"),
        ('{"wall_s": "x"}', "wall_s: expected a finite number"),
        ('{"host": [1]}', "host: expected a string"),
        ('{"resumed_from": -1}', "resumed_from: expected an integer >= 0"),
    ],
)
def test_a_garbled_done_json_names_the_file_and_field_in_a_sweep(swept, out, text, where):
    done = out / "runs" / POINT / rundir.DONE
    done.write_text(text)
    line = _one_error(_sweep(swept[0], out), 1)
    assert str(done) in line and where in line


def test_a_garbled_done_json_names_the_field_for_every_driver(tmp_path):
    """reproduce and time-to-bayes read a finished run back through `run_job`: the same check."""
    (entry,) = suite("smoke", only={"task": "bijection", "arch": "uniform"})
    job = Job(entry.name, entry.config, str(tmp_path), threads=1)
    run_job(job)
    (job.run_dir / rundir.DONE).write_text('{"device": 5}')
    with pytest.raises(CheckpointError, match=r"done.json: device: expected a string, got 5"):
        run_job(job)


def test_a_garbled_eval_json_names_the_file_and_field(swept, out):
    path = out / "runs" / POINT / rundir.EVAL
    data = json.loads(path.read_text())
    clean = json.loads(path.read_text())["default"]
    data["default"]["metrics"]["kl_bits"]["mean"] = "low"
    path.write_text(json.dumps(data))
    line = _one_error(_sweep(swept[0], out), 1)
    assert "default.metrics.kl_bits.mean: " in line and "number" in line  # the field and what it must be
    path.write_text(json.dumps({"K=50": clean}))  # every entry is checked: this one is sound, but there is no default
    assert f"{path}: default: expected a JSON object" in _one_error(_sweep(swept[0], out), 1)


# --- bad commands: exit 2, nothing created ------------------------------------------------------------------


@pytest.mark.parametrize("item", ["train={lr: 1}", "model.size={d_model: 8}", "task.params={V: 6}", "eval=x"])
def test_a_grid_value_may_not_replace_a_section(tmp_path, item):
    key = item.partition("=")[0]
    with pytest.raises(ValueError, match=rf"--grid {key}: ") as err:
        parse_grid([item])
    assert "leaf setting" in str(err.value)
    config = tmp_path / "base.json"
    config.write_text(json.dumps(BASE))
    line = _one_error(runner.invoke(app, ["sweep", str(config), "--grid", item, "--out", str(tmp_path / "o")]), 2)
    assert f"{key} is a section" in line and not (tmp_path / "o").exists()
    assert parse_grid(["task.V=6,8", "model.size.d_model=8", "train.lr=1e-3"])  # leaves, shortcuts included


@pytest.mark.parametrize(
    ("only", "message"),
    [
        ("task=", "only task: expected task=NAME[,NAME...] (got nothing)"),
        ("task=bijection,,hmm", "only task: expected task=NAME[,NAME...]"),
        ("arch=5", "only arch: expected arch=NAME[,NAME...] (got 5)"),
        (
            "task=nosuch",
            "only task: 'nosuch' is not in the suite (one of bijection, hmm, hmm-sticky, recall, regression)",
        ),
        ("arch=lstm,gru", "only arch: 'gru' is not in the suite"),
    ],
)
def test_reproduce_only_names_a_bad_filter(tmp_path, only, message):
    r = runner.invoke(app, ["reproduce", "--tier", "smoke", "--only", only, "--out", str(tmp_path / "o")])
    assert message in _one_error(r, 2) and not (tmp_path / "o").exists()


def test_the_number_of_seeds_is_bounded_before_the_suite_is_built(tmp_path):
    r = runner.invoke(app, ["reproduce", "--tier", "smoke", "--seeds", "1000000", "--out", str(tmp_path / "o")])
    assert "seeds: must be between 1 and 100 (got 1000000)" in _one_error(r, 2)
    cell = "task=bijection,arch=lstm,tier=smoke,steps=4,seeds=1000000"
    r = runner.invoke(app, ["time-to-bayes", "--cell", cell, "--out", str(tmp_path / "o"), "--no-progress"])
    line = _one_error(r, 2)  # pydantic's words, the field, the bound and the value
    assert "seeds: " in line and "100" in line and "(got 1000000)" in line
    assert not (tmp_path / "o").exists()
    assert len(suite("smoke", seeds=100, only={"task": "bijection", "arch": "lstm"})) == 100


def test_a_driver_out_may_not_be_or_lie_inside_a_run_directory(swept, out, tmp_path):
    run = out / "runs" / POINT
    before = sorted(p.name for p in run.iterdir())
    for target, says in ((run, "is a run directory"), (run / "sub", f"lies inside {str(run.absolute())!r}")):
        assert says in _one_error(_sweep(swept[0], target), 2)
        cell = "task=bijection,arch=lstm,tier=smoke,steps=4"
        r = runner.invoke(app, ["time-to-bayes", "--cell", cell, "--out", str(target), "--no-progress"])
        assert says in _one_error(r, 2)
        r = runner.invoke(app, ["reproduce", "--tier", "smoke", "--only", "arch=uniform", "--out", str(target)])
        assert says in _one_error(r, 2)
    assert sorted(p.name for p in run.iterdir()) == before  # no lock, no sweep-config.json, no runs/


# --- a FIFO planted in a run directory: skipped or refused, never opened blocking -------------------------------


def _fifo(path: Path) -> Path:
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return path


def test_a_fifo_in_a_run_directory_never_hangs_a_reader(out):
    run = out / "runs" / POINT
    metrics = _fifo(run / rundir.METRICS)
    _fifo(run / OWNER_FILE)
    shown: list[str] = []

    def watch() -> None:
        bar = Progress([Tracked(POINT, run, 6)], stream=_Lines(shown), interval=60).start()
        bar.stop()

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    t.join(timeout=20)
    assert not t.is_alive(), "Progress.start() blocked on a FIFO"
    assert any("1/1 runs done" in line for line in shown)  # done.json is there; the FIFO is skipped
    assert read_owner(run) is None
    with pytest.raises(CheckpointError, match=rf"{metrics} cannot be read: not a regular file"):
        rundir.read_metrics(run)
    _fifo(run / rundir.EVAL)
    with pytest.raises(CheckpointError, match=r"eval\.json .*not a regular file"):
        rundir.read_json(run / rundir.EVAL)


class _Lines:
    """A text stream that keeps what is written, line by line."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def write(self, text: str) -> None:
        self.lines += text.splitlines()

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


# --- stderr closed (`2>&-`): the command still reports -------------------------------------------------------


def test_with_stderr_closed_a_sweep_still_reports_on_stdout(swept, tmp_path):
    """Python starts with sys.stderr None when fd 2 is closed: the live progress turns itself off, each finished
    run's line and the summary go to stdout, exit 0."""
    o = tmp_path / "o"
    cli = [sys.executable, "-c", "from windtunnel.cli import main; main()"]
    cmd = [*cli, "sweep", str(swept[0]), "--grid", "train.lr=1e-3", "--threads", "1", "--out", str(o)]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, preexec_fn=lambda: os.close(2))
    assert r.returncode == 0, r.stdout
    assert f"{POINT}: finished in" in r.stdout and "best setting (validation) lr=0.001" in r.stdout
    assert (o / "sweep.md").exists()


@pytest.mark.parametrize("closed", ["none", "closed"])
def test_with_stderr_closed_an_error_goes_to_stdout(monkeypatch, capsys, closed):
    if closed == "none":
        monkeypatch.setattr(sys, "stderr", None)
    else:
        dead = io.StringIO()
        dead.close()
        monkeypatch.setattr(sys, "stderr", dead)
    with pytest.raises(typer.Exit) as err:
        fail("--grid: expected key=v1,v2,...")
    assert err.value.exit_code == 2
    assert capsys.readouterr().out == "error: --grid: expected key=v1,v2,...\n"


# --- NaN on the test stream is never ★ (the pick reads validation) --------------------------------------------


def test_a_nan_test_stream_mean_is_never_best_and_never_crashes(tmp_path):
    config = tmp_path / "base.json"
    config.write_text(json.dumps(BASE))
    o = tmp_path / "o"
    r = runner.invoke(app, ["sweep", str(config), "--grid", "train.lr=1e-3,3e-3", *SWEEP[2:], "--out", str(o)])
    assert r.exit_code == 0, r.output
    best = next(s for s in json.loads((o / "sweep.json").read_text())["settings"] if s["best"])["setting"]
    path = o / "runs" / best / rundir.EVAL
    data = json.loads(path.read_text())
    data["default"]["metrics"]["entropy_mae_bits"].update(mean=math.nan, lo=math.nan, hi=math.nan)
    path.write_text(json.dumps(data))
    r = runner.invoke(app, ["sweep", str(config), "--grid", "train.lr=1e-3,3e-3", *SWEEP[2:], "--out", str(o)])
    assert r.exit_code == 0, r.output
    table = json.loads((o / "sweep.json").read_text())
    first, last = table["settings"]
    assert last["setting"] == best and not last["best"] and last["unranked"] == "test entropy error (bits) is nan"
    assert first["best"] and f"best setting (validation) {first['setting']}" in r.output
    assert "test entropy error (bits) is nan" in (o / "sweep.md").read_text()
