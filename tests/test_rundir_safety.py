"""Run directories that are safe to share, to run twice and to find corrupted: the trust rule for import
strings, the write lock, validation before creation, one-line errors with exit 1/2, resume fallback, temp files,
file modes. Each case reproduces a report from the issue."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from cli_args import train_args
from windtunnel import runs
from windtunnel.cli import app
from windtunnel.errors import CheckpointError, RunInUseError, UntrustedCodeError
from windtunnel.store import rundir
from windtunnel.store.lock import DirLock, is_locked
from windtunnel.store.rundir import OWNER_FILE
from windtunnel.training.train import train

runner = CliRunner()
SMOKE_CFG = {
    "task": {"name": "bijection", "params": {"V": 5, "L": 4}},
    "model": {"arch": "transformer", "preset": "smoke"},
    "train": {"steps": 4, "batch_size": 4, "checkpoint_every": 2, "eval_every": 0, "device": "cpu", "warmup_steps": 1},
    "eval": {"n": 8},
}


def _one_line_error(r, code: int) -> str:
    """Assert a CLI result failed with `code` and a single `error: ...` line, no traceback; return the line."""
    assert r.exit_code == code, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert "Traceback" not in r.output and "internal error" not in r.output
    return lines[0]


# --- 1. import strings are code: trust is explicit -------------------------------------------------------------


PAYLOAD = "from pathlib import Path\nPath({marker!r}).write_text('ran')\nModel = None\n"


def _evil_run(trained: Path, tmp_path: Path, arch: str) -> Path:
    """A downloaded run directory whose config names a payload module shipped inside it and beside it."""
    evil = tmp_path / "evilrun"
    evil.mkdir()
    for p in trained.iterdir():
        if p.is_file():
            (evil / p.name).write_bytes(p.read_bytes())
    (evil / "checkpoints").mkdir()
    for p in (trained / "checkpoints").iterdir():
        (evil / "checkpoints" / p.name).write_bytes(p.read_bytes())
    cfg = json.loads((evil / "config.json").read_text())
    cfg["model"]["arch"], cfg["model"]["preset"] = arch, None  # sizes stay expanded in model.size
    (evil / "config.json").write_text(json.dumps(cfg))
    marker = tmp_path / "PAYLOAD_RAN"
    (evil / "payload_mod_xyz.py").write_text(PAYLOAD.format(marker=str(marker)))
    (evil / "__init__.py").write_text(PAYLOAD.format(marker=str(marker)))
    (tmp_path / "payload_mod_xyz.py").write_text(PAYLOAD.format(marker=str(marker)))
    return evil


@pytest.mark.parametrize("arch", ["evilrun.payload_mod_xyz:Model", "payload_mod_xyz:Model", "this:x"])
def test_a_payload_in_a_run_directory_never_runs_without_the_flag(trained, tmp_path, monkeypatch, capsys, arch):
    evil = _evil_run(trained, tmp_path, arch)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # as PYTHONPATH=. would
    monkeypatch.setattr(sys, "path", ["", *sys.path])
    for name in ("evilrun", "evilrun.payload_mod_xyz", "payload_mod_xyz"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    for command in (
        ["eval", "evilrun"],
        ["probe", "evilrun", "--n", "4", "--no-figures"],
        ["train", "--config", "evilrun/config.json", "--out", "again"],
    ):
        line = _one_line_error(runner.invoke(app, command), 2)
        assert arch in line and "--trust-code" in line
    with pytest.raises(UntrustedCodeError, match="trust_code=True"):
        _ = runs.load_run(evil).model
    # Even trusted, nothing is imported from the current directory or the run directory.
    if arch != "this:x":
        r = runner.invoke(app, ["eval", "evilrun", "--trust-code"])
        assert "cannot import" in _one_line_error(r, 2)
    assert not (tmp_path / "PAYLOAD_RAN").exists()
    assert "Beautiful is better than ugly" not in capsys.readouterr().out
    assert not (tmp_path / "again").exists()


def test_trusted_import_string_from_an_installed_module_builds(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    (site / "my_arch_pkg_xyz.py").write_text(
        textwrap.dedent("""
        from windtunnel.models.lstm import LSTM
        class Model(LSTM):
            pass
    """)
    )
    monkeypatch.syspath_prepend(str(site))  # an installed location, not the current or the run directory
    cfg = {
        **SMOKE_CFG,
        "model": {"arch": "my_arch_pkg_xyz:Model", "size": {"d_model": 8, "n_layers": 1}},
        "train": {**SMOKE_CFG["train"], "steps": 2},
    }
    with pytest.raises(UntrustedCodeError):
        train(cfg, tmp_path / "r", progress=False)
    assert not (tmp_path / "r").exists()
    train(cfg, tmp_path / "r", progress=False, trust_code=True)
    assert runs.load_run(tmp_path / "r", trust_code=True).model is not None
    with pytest.raises(UntrustedCodeError):
        _ = runs.load_run(tmp_path / "r").model


# --- 2. one writer per run directory ---------------------------------------------------------------------------


def test_a_second_writer_fails_at_once_naming_the_holder(trained, holder):
    before = {p: p.read_bytes() for p in trained.rglob("*") if p.is_file() and p.name != OWNER_FILE}
    proc = holder(trained)
    assert is_locked(trained)
    for extra in (["--resume"], ["--overwrite"]):
        r = runner.invoke(app, train_args(trained, *extra))
        line = _one_line_error(r, 1)
        assert f"in use by pid {proc.pid} on {socket.gethostname()}" in line
    after = {p: p.read_bytes() for p in trained.rglob("*") if p.is_file() and p.name != OWNER_FILE}
    assert after == before  # --overwrite deleted nothing, --resume wrote nothing
    # readers do not need the lock
    assert runner.invoke(app, ["eval", str(trained), "--n", "4"]).exit_code == 0


def test_a_stale_lock_of_a_dead_process_is_taken_over(trained, holder):
    proc = holder(trained)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert json.loads((trained / OWNER_FILE).read_text())["pid"] == proc.pid  # its record stayed
    with pytest.warns(RuntimeWarning, match=f"took over the lock of pid {proc.pid}"):
        lock = DirLock(trained).acquire()
    assert lock.took_over["pid"] == proc.pid
    lock.release()
    assert not is_locked(trained)
    r = runner.invoke(app, train_args(trained, "--resume"))
    assert r.exit_code == 0, r.output


def test_two_reproduce_into_one_out_cannot_both_train(tmp_path, holder):
    from windtunnel.reproduce import reproduce

    proc = holder(tmp_path / "out")
    with pytest.raises(RunInUseError, match=f"output directory is in use by pid {proc.pid}"):
        reproduce("smoke", tmp_path / "out", only={"task": "bijection", "arch": "oracle"})
    assert not (tmp_path / "out" / "runs").exists()


# --- validate everything before creating anything --------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--set", "model.zzz=3"], "zzz"),
        (["--set", "train.lr=.inf"], "train.lr"),
        (["--set", "train.grad_clip=.nan"], "train.grad_clip"),
        (["--set", "model.init_std=.inf"], "model.size"),
        (["--set", "task.V=.inf"], "V"),
    ],
)
def test_a_refused_train_leaves_nothing_behind(tmp_path, args, field):
    out = tmp_path / "deep" / "run"
    r = runner.invoke(app, train_args(out, *args))
    assert field in _one_line_error(r, 2)
    assert not (tmp_path / "deep").exists()


def test_out_that_is_a_file_or_below_one(tmp_path):
    (tmp_path / "f").write_text("x")
    for out in (tmp_path / "f", tmp_path / "f" / "run"):
        for command in (
            ["train", "--arch", "uniform", "--out", str(out)],
            ["report", str(tmp_path), "--out", str(out)],
        ):
            assert "is a file" in _one_line_error(runner.invoke(app, command), 2)
    assert (tmp_path / "f").read_text() == "x"


def test_unwritable_out_fails_before_the_work(tmp_path, trained, monkeypatch):
    real = os.access
    ro = {str(trained), str(tmp_path / "ro")}
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) in ro and mode & os.W_OK else real(p, mode))
    (tmp_path / "ro").mkdir()
    assert "is read-only" in _one_line_error(runner.invoke(app, ["eval", str(trained)]), 2)
    r = runner.invoke(app, ["train", "--arch", "uniform", "--out", str(tmp_path / "ro" / "r")])
    assert "not writable" in _one_line_error(r, 2)


def test_diverged_run_without_checkpoint_says_so(tmp_path):
    cfg = {**SMOKE_CFG, "train": {**SMOKE_CFG["train"], "lr": 1e30, "grad_clip": None, "checkpoint_every": 0}}
    from windtunnel.errors import TrainingDiverged

    with pytest.raises(TrainingDiverged) as info:
        train(cfg, tmp_path / "r", progress=False)
    assert info.value.kept is None and "no checkpoint had been written yet" in str(info.value)
    assert "last good checkpoint" not in str(info.value)


# --- 3. one-line errors for corrupt or mismatched inputs -------------------------------------------------------


def test_corrupt_checkpoint_under_probe_is_exit_1(trained):
    ck = trained / "checkpoints" / "step_00000002.safetensors"
    ck.write_bytes(ck.read_bytes()[:100])
    line = _one_line_error(runner.invoke(app, ["probe", str(trained), "--n", "4", "--no-figures"]), 1)
    assert "step_00000002.safetensors" in line


@pytest.mark.parametrize(
    "content", [b'{"task": {"name": "bij', b"\x00\xff\xfe binary", b"[1, 2]", b'{"model": {"arch": 3}}']
)
def test_corrupt_config_under_eval_probe_report(trained, tmp_path, content):
    (trained / "config.json").write_bytes(content)
    for command in (
        ["eval", str(trained)],
        ["probe", str(trained), "--n", "4", "--no-figures"],
        ["report", str(trained), "--out", str(tmp_path / "rep")],
    ):
        assert "config.json" in _one_line_error(runner.invoke(app, command), 1)
    assert not (tmp_path / "rep").exists()  # the report validates its inputs before creating --out


@pytest.mark.parametrize(
    ("sets", "words"),
    [
        (["task.V=10"], "vocab_size"),
        (["task.V=5", "task.L=4", "task.V=7"], "vocab_size"),
        (["task.name=hmm"], "task.name"),
    ],
)
def test_eval_override_that_changes_the_model_shape_is_refused(trained, sets, words):
    args = [a for s in sets for a in ("--set", s)]
    assert words in _one_line_error(runner.invoke(app, ["eval", str(trained), *args]), 2)


def test_eval_override_longer_than_the_positions_is_refused(trained):
    assert "max_len" in _one_line_error(runner.invoke(app, ["eval", str(trained), "--set", "task.L=5"]), 2)


@pytest.mark.parametrize("line", ["[1, 2]", '{"step": null}', '{"loss": 1.0}', "garbage", '{"step": -1}'])
def test_bad_metrics_line_in_the_middle_is_an_error_naming_it(trained, tmp_path, line):
    p = trained / "metrics.jsonl"
    good = p.read_text().splitlines()
    p.write_text("\n".join([good[0], line, *good[1:]]) + "\n")
    with pytest.raises(CheckpointError, match="line 2"):
        rundir.read_metrics(trained)
    r = runner.invoke(
        app,
        train_args(trained, "--resume", "--steps", "3"),
    )
    assert "line 2" in _one_line_error(r, 1)
    assert p.read_text().splitlines()[1] == line  # nothing rewritten, nothing lost
    assert "line 2" in _one_line_error(runner.invoke(app, ["report", str(trained), "--out", str(tmp_path / "x")]), 1)


def test_partial_last_line_from_a_crash_is_ignored(trained):
    with open(trained / "metrics.jsonl", "a") as f:
        f.write('{"step": 9, "lo')
    assert all(r["step"] <= 2 for r in rundir.read_metrics(trained))


@pytest.mark.parametrize("content", ["{}", '{"step": "x"}', "[]", ""])
def test_corrupt_latest_json(trained, content):
    (trained / "checkpoints" / "latest.json").write_text(content)  # eval: tests/test_hostile_files.py
    with pytest.warns(RuntimeWarning, match=r"resuming from step 2\b.*latest\.json"):
        r = runner.invoke(
            app,
            train_args(trained, "--resume", "--steps", "3"),
        )
    assert r.exit_code == 0, r.output


def test_tasks_show_huge_seed():
    r = runner.invoke(app, ["tasks", "show", "bijection", "--seed", "99999999999999999999"])
    assert "seed" in _one_line_error(r, 2)


# --- resume falls back to the newest good checkpoint, and equals an uninterrupted run --------------------------


def test_resume_from_the_newest_good_checkpoint_equals_an_uninterrupted_run(tmp_path):
    cfg6 = {**SMOKE_CFG, "train": {**SMOKE_CFG["train"], "steps": 6}}
    train(cfg6, tmp_path / "full", progress=False)
    train(cfg6, tmp_path / "r", progress=False)  # checkpoints at 2, 4 and 6; then the last one is damaged
    ck = tmp_path / "r" / "checkpoints" / "step_00000006.safetensors"
    raw = bytearray(ck.read_bytes())
    raw[-5] ^= 0x10
    ck.write_bytes(bytes(raw))
    with pytest.warns(RuntimeWarning, match="resuming from step 4.*step_00000006.safetensors"):
        train(cfg6, tmp_path / "r", resume=True, progress=False)
    a = runs.load_run(tmp_path / "full").model.state_dict()
    b = runs.load_run(tmp_path / "r").model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


# --- 6. temp files, file modes ---------------------------------------------------------------------------------


def test_stray_temp_files_are_cleaned_on_the_next_open(tmp_path):
    train(SMOKE_CFG, tmp_path / "r", progress=False)
    stray = [tmp_path / "r" / ".eval.json.abc.tmp", tmp_path / "r" / "checkpoints" / ".latest.json.x.tmp"]
    for p in stray:
        p.write_text("half")
    train({**SMOKE_CFG, "train": {**SMOKE_CFG["train"], "steps": 5}}, tmp_path / "r", resume=True, progress=False)
    assert not any(p.exists() for p in stray)


def test_results_are_readable_by_others(tmp_path):
    old = os.umask(0o022)
    try:
        rundir.atomic_write(tmp_path / "a.json", "{}")
        assert (tmp_path / "a.json").stat().st_mode & 0o777 == rundir.FILE_MODE
    finally:
        os.umask(old)
    train(SMOKE_CFG, tmp_path / "r", progress=False)
    for p in (tmp_path / "r").rglob("*"):
        if p.is_file() and not p.name.startswith("."):
            assert p.stat().st_mode & 0o044 == 0o044 & rundir.FILE_MODE, p


def test_lock_is_released_after_a_run_and_after_an_error(tmp_path):
    train(SMOKE_CFG, tmp_path / "r", progress=False)
    assert not is_locked(tmp_path / "r")
    with pytest.raises(FileExistsError):
        train(SMOKE_CFG, tmp_path / "r", progress=False)
    assert not is_locked(tmp_path / "r")
    with DirLock(tmp_path / "r"), pytest.raises(RunInUseError, match=f"pid {os.getpid()}"):
        train(SMOKE_CFG, tmp_path / "r", overwrite=True, progress=False)
    assert (tmp_path / "r" / "eval.json").exists()
