"""Hostile files in and around a run directory: `--overwrite` on a folder that is not only a run, symbolic
links planted in a run, a checkpoint without its checksum, a damaged latest.json on a finished run, a write cut off
by the file-size limit. Each test reproduces the attack and asserts the new behaviour."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from cli_args import train_args
from cli_checks import error_line, snapshot
from windtunnel import plotting
from windtunnel.cli import app
from windtunnel.runs import checkpoints
from windtunnel.store import rundir
from windtunnel.training import tracking

runner = CliRunner()
SECRET = "TOPSECRET-4d1f-credentials"


CLI = "from windtunnel.cli import main; main()"


def _cli(*args: str) -> subprocess.CompletedProcess:
    """The installed CLI in a child process: warnings as the user sees them (`warning: ...` lines on stderr)."""
    return subprocess.run([sys.executable, "-c", CLI, *args], capture_output=True, text=True, check=False)


# --- 1. --overwrite deletes only what windtunnel wrote -----------------------------------------------------------


def test_overwrite_of_a_project_folder_deletes_nothing_and_names_the_first_stray_entry(tmp_path):
    proj = tmp_path / "proj"
    (proj / "src").mkdir(parents=True)
    (proj / ".git").mkdir()
    (proj / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (proj / "src" / "app.py").write_text("print('app')\n")
    (proj / "thesis.tex").write_text("\\chapter{Four years}\n")
    (proj / "config.json").write_text('{"name": "app"}')
    before = snapshot(proj)
    line = error_line(runner.invoke(app, train_args(proj, "--overwrite")), 2)
    assert f"overwrite: {str(proj)!r} " in line and "not a run directory" in line and "'.git'" in line
    assert "refusing to delete anything" in line
    assert snapshot(proj) == before


@pytest.mark.parametrize(
    ("plant", "named"),
    [
        (lambda run: (run / "checkpoints" / "notes.txt").write_text("mine"), "checkpoints/notes.txt"),
        (lambda run: (run / "figures" / "draft").mkdir(), "figures/draft"),
        (lambda run: (run / "wandb").mkdir(), "wandb"),  # a wandb folder without windtunnel's run id in it
        (lambda run: (run / "eval.json").unlink() or (run / "eval.json").mkdir(), "eval.json"),  # the wrong kind
    ],
)
def test_overwrite_refuses_a_run_directory_holding_anything_else(trained, plant, named):
    plant(trained)
    before = snapshot(trained)
    line = error_line(runner.invoke(app, train_args(trained, "--overwrite")), 2)
    assert f"{named!r}" in line and "windtunnel did not write" in line
    assert snapshot(trained) == before


def test_overwrite_refuses_a_link_even_at_a_name_of_the_layout(trained, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.png").write_bytes(b"png")
    (trained / "figures").rmdir()
    (trained / "figures").symlink_to(elsewhere)
    line = error_line(runner.invoke(app, train_args(trained, "--overwrite")), 2)
    assert "it holds 'figures'" in line
    assert (elsewhere / "keep.png").read_bytes() == b"png" and (trained / "checkpoints").is_dir()


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ('{"name": "app"}', "name: Extra inputs are not permitted (got 'app')"),
        ("{}", "no 'eval', so not the config a run writes"),
    ],
)
def test_overwrite_recognises_a_run_by_its_config_not_by_the_file_name(tmp_path, config, why):
    out = tmp_path / "app"
    out.mkdir()
    (out / "config.json").write_text(config)
    line = error_line(runner.invoke(app, train_args(out, "--overwrite")), 2)
    assert f"is not a run directory ({out / 'config.json'}: {why})" in line
    assert (out / "config.json").read_text() == config


def test_overwrite_of_a_run_with_everything_windtunnel_writes_clears_it(tmp_path):
    run = tmp_path / "run"
    assert runner.invoke(app, train_args(run, "--set", "train.loggers=[tensorboard]")).exit_code == 0
    assert runner.invoke(app, train_args(run, "--resume", "--steps", "3")).exit_code == 0  # resumes.json
    r = runner.invoke(app, ["probe", str(run), "--n", "4"])  # geometry.json, figures/*.png
    assert r.exit_code == 0, r.output
    (run / ".eval.json.abc12345.tmp").write_text("half")  # writes a kill cut off
    (run / "checkpoints" / ".latest.json.x1.tmp").write_text("half")
    (run / tracking.WANDB_DIR / "offline-run-1").mkdir(parents=True)  # what wandb keeps beside windtunnel's run id
    (run / tracking.WANDB_DIR / tracking._WANDB_ID).write_text("abc\n")
    for name in (rundir.RESUMES, rundir.TRAINED, rundir.GEOMETRY, tracking.TENSORBOARD_DIR):
        assert (run / name).exists(), name
    assert any((run / rundir.FIGURES).glob("*.png"))
    assert rundir.first_stray(run) is None  # the layout names everything windtunnel writes
    assert (rundir.TENSORBOARD, rundir.WANDB, rundir.WANDB_ID) == (
        tracking.TENSORBOARD_DIR,
        tracking.WANDB_DIR,
        tracking._WANDB_ID,
    )
    r = runner.invoke(app, train_args(run, "--overwrite"))
    assert r.exit_code == 0, r.output
    left = {p.name for p in run.iterdir()}
    assert not left & {rundir.RESUMES, rundir.GEOMETRY, tracking.TENSORBOARD_DIR, tracking.WANDB_DIR}
    assert json.loads((run / "checkpoints" / "latest.json").read_text()) == {"step": 2}
    assert not any((run / rundir.FIGURES).iterdir())


# --- 2. no symbolic link is followed in a run directory -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "command"),
    [
        ("eval.json", ["eval"]),
        ("config.json", ["eval"]),
        ("checkpoints/latest.json", ["eval"]),
        ("checkpoints/step_00000002.state.json", ["eval"]),
        ("checkpoints/step_00000002.safetensors", ["eval"]),
        ("metrics.jsonl", ["report"]),
    ],
)
def test_a_link_planted_in_a_run_directory_never_leaks_what_it_points_at(trained, tmp_path, name, command):
    secret = tmp_path / "credentials"
    secret.write_text(json.dumps({"step": 2, "token": SECRET}) + "\n")
    link = trained / name
    link.unlink()
    link.symlink_to(secret)
    args = [*command, str(trained)] + (["--out", str(tmp_path / "report")] if command == ["report"] else [])
    p = _cli(*args)
    assert SECRET not in p.stdout + p.stderr
    named = [ln for ln in p.stderr.splitlines() if f"{link}" in ln and "is a symbolic link" in ln]
    assert len(named) == 1, p.stderr  # an error (exit 1), or for latest.json the fallback's warning (exit 0)
    assert p.returncode == (0 if name.endswith("latest.json") else 1), p.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink() and p != secret]
    assert not [p for p in written if SECRET.encode() in p.read_bytes()]


def test_no_writer_writes_through_a_planted_link(trained, tmp_path):
    victim = tmp_path / "bashrc"
    victim.write_text("alias ls=ls\n")
    (trained / "metrics.jsonl").unlink()
    (trained / "metrics.jsonl").symlink_to(victim)
    with pytest.raises(OSError, match="is a symbolic link"):
        rundir.MetricsLog(trained)
    r = runner.invoke(app, train_args(trained, "--resume", "--steps", "3"))
    assert "metrics.jsonl" in error_line(r, 1)
    figure = tmp_path / "fig.png"
    (tmp_path / "fig.tmp.png").symlink_to(victim)
    fig, _ = plotting.subplots()
    with pytest.raises(OSError):
        plotting.save(fig, figure)
    rundir.atomic_write(trained / "eval.json", "{}")  # replaces a link, never writes through it
    assert victim.read_text() == "alias ls=ls\n"


@pytest.mark.parametrize(
    ("folder", "command"),
    [
        ("evals", ["eval", "--n", "4"]),
        ("figures", ["probe", "--n", "4"]),
        ("checkpoints", ["train", "--resume", "--steps", "3", "--no-progress"]),
        ("checkpoints", ["eval"]),
        ("tensorboard", ["train", "--resume", "--steps", "3", "--no-progress", "--logger", "tensorboard"]),
    ],
)
def test_no_folder_of_a_run_directory_is_followed_through_a_link(trained, tmp_path, folder, command):
    """A folder of the run directory that is a link (`evals -> /elsewhere`) neither receives the run's files nor
    feeds it what lies there: one line naming it, exit 1, and the folder it points at is as it was."""
    if folder == "tensorboard":
        pytest.importorskip("torch.utils.tensorboard")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "eval.n=4.json").write_text(json.dumps({"default": SECRET}))  # what an extra evaluation would merge
    (elsewhere / "latest.json").write_text(json.dumps({"step": 2, "token": SECRET}))
    link = trained / folder
    if link.exists():
        os.rename(link, tmp_path / f"{folder}.kept")
    link.symlink_to(elsewhere, target_is_directory=True)
    before, run = snapshot(elsewhere), {name: (trained / name).read_bytes() for name in ("metrics.jsonl", "eval.json")}
    r = runner.invoke(app, [command[0], str(trained), *command[1:]])
    line = error_line(r, 1)
    assert f"{link}: " in line and "symbolic link" in line
    assert SECRET not in r.output and snapshot(elsewhere) == before
    assert run == {name: (trained / name).read_bytes() for name in run}  # refused before anything was touched


def test_a_value_read_from_a_run_file_is_never_echoed(trained):
    """A field of the wrong kind is named with the kind and size of what is there, never its text."""
    (trained / "evals").mkdir(exist_ok=True)
    (trained / "evals" / "eval.n=4.json").write_text(json.dumps({"default": SECRET}))
    line = error_line(runner.invoke(app, ["eval", str(trained), "--n", "4"]), 1)
    assert SECRET not in line
    assert line.endswith(f"eval.n=4.json: default: expected a JSON object, got a string of {len(SECRET)} characters")
    (trained / "metrics.jsonl").write_text(json.dumps({"step": SECRET}) + "\n")
    line = error_line(runner.invoke(app, ["train", "--resume", str(trained), "--no-progress"]), 1)
    assert SECRET not in line and "step" in line and "non-negative integer" in line  # the field, what it must be
    assert f"a string of {len(SECRET)}" in line  # and what it is, by its length only


# --- 3. a checkpoint without its checksum is refused -------------------------------------------------------------


@pytest.mark.parametrize("drop", ["sha256", "sha256.state"])
def test_a_checkpoint_without_its_checksum_is_refused_naming_the_file(trained, drop):
    meta_path = trained / "checkpoints" / "step_00000002.state.json"
    meta = json.loads(meta_path.read_text())
    if drop == "sha256":
        del meta["sha256"]
    else:
        del meta["sha256"]["state"]
    meta_path.write_text(json.dumps(meta))
    key = "sha256.weights" if drop == "sha256" else "sha256.state"
    for args in (["eval", str(trained)], train_args(trained, "--resume", "--steps", "3")):
        line = error_line(runner.invoke(app, args), 1)
        assert f"{meta_path} is corrupted: no checksum {key}" in line


# --- 4. a damaged latest.json on a finished run --------------------------------------------------------------


@pytest.mark.parametrize("content", ["garbage", '{"step": -1}', "[]", '{"step": 99999999}'])
def test_a_finished_run_with_a_damaged_latest_json_evaluates_and_resumes_from_the_newest_good_checkpoint(
    trained, content
):
    before = json.loads((trained / "eval.json").read_text())["default"]
    (trained / "eval.json").unlink()
    latest = trained / "checkpoints" / "latest.json"
    latest.write_text(content)
    for args in (["eval", str(trained)], train_args(trained, "--resume")):
        p = _cli(*args)
        assert p.returncode == 0, p.stderr
        warns = [ln for ln in p.stderr.splitlines() if ln.startswith("warning:")]
        assert len(warns) == 1 and f"step 2, the newest good checkpoint: {latest}" in warns[0], p.stderr
        after = json.loads((trained / "eval.json").read_text())["default"]
        assert after["step"] == 2 and after["metrics"] == before["metrics"]


def test_latest_step_falls_back_only_past_latest_json_never_past_the_checkpoint_it_names(trained):
    (trained / "checkpoints" / "latest.json").unlink()
    assert checkpoints.latest_step(trained) == 2  # a crash before latest.json: the checkpoint is still found
    (trained / "checkpoints" / "latest.json").write_text('{"step": 2}')
    (trained / "checkpoints" / "step_00000002.safetensors").write_bytes(b"x")
    assert checkpoints.latest_step(trained) == 2  # its damage is the loader's to name (eval: exit 1)
    assert "step_00000002.safetensors" in error_line(runner.invoke(app, ["eval", str(trained)]), 1)


# --- 5. a write cut off by the file-size limit names the file ------------------------------------------------------


LIMITED = """
import resource, signal, sys
from windtunnel.cli import main
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing the process
limit = int(sys.argv.pop(1))
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
main()
"""


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_write_past_the_file_size_limit_is_one_line_naming_the_file(tmp_path):
    run = tmp_path / "run"
    cmd = [sys.executable, "-c", LIMITED, "16384", *train_args(run)]  # the weights (~70 kB) pass the limit
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert p.returncode == 1, p.stderr
    weights = run / "checkpoints" / "step_00000002.safetensors"
    assert p.stderr.strip().splitlines() == [f"error: {weights}: File too large"]
    assert not list((run / "checkpoints").iterdir())  # nothing half-written, no temp file


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_metrics_line_past_the_file_size_limit_names_metrics_jsonl(tmp_path):
    script = LIMITED.replace(
        "main()", "from windtunnel.store import rundir\nrundir.MetricsLog(sys.argv[1]).write({'x': 'y' * 9000})"
    )
    p = subprocess.run(
        [sys.executable, "-c", script, "4096", str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert p.returncode == 1
    assert f"OSError: [Errno 27] File too large: '{tmp_path / 'metrics.jsonl'}'" in p.stderr
