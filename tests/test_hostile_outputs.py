"""Hostile output paths: an --out or --plot that names a run's own file, a device, a FIFO, a link, a folder that does
not exist, a report or table of one's own, another run directory, or a run compared with itself. Each test
reproduces the attack and asserts that nothing outside windtunnel's own outputs is replaced (`rundir.check_output_file`,
`rundir.check_output_dir`, `records.report_files.check_out`)."""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli_args import SWEEP_BASE, train_args
from cli_checks import error_line, snapshot
from windtunnel.cli import app
from windtunnel.store import rundir
from windtunnel.training import tracking

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    """Two finished two-step smoke runs (seeds 0 and 1), trained through the CLI once for the module."""
    root = tmp_path_factory.mktemp("pair")
    for seed in (0, 1):
        r = runner.invoke(app, train_args(root / f"s{seed}", "--seed", str(seed)))
        assert r.exit_code == 0, r.output
    return root / "s0", root / "s1"


def _compare(pair, *extra: str):
    return runner.invoke(app, ["compare", str(pair[0]), str(pair[1]), "--no-paired", *extra])


# --- 1. a run's own files --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["checkpoints/step_00000002.safetensors", "eval.json", "config.json", "figures/c.md", "compare.md"]
)
def test_compare_out_never_replaces_a_file_of_a_run_directory(pair, name):
    a = pair[0]
    before = snapshot(a)
    line = error_line(_compare(pair, "--out", str(a / name)), 2)
    assert line.startswith(f"error: --out: {str(a / name)!r} is inside the run directory {str(a)!r}"), line
    assert snapshot(a) == before


def test_compare_plot_never_lands_in_a_run_directory_even_through_a_link(pair, tmp_path):
    a = pair[0]
    (tmp_path / "figs").symlink_to(a / "figures")
    path = tmp_path / "figs" / "curves.png"
    before = snapshot(a)
    line = error_line(_compare(pair, "--plot", str(path)), 2)
    assert line.startswith(f"error: --plot: {str(path)!r} is inside the run directory {str(a)!r}"), line
    assert snapshot(a) == before


# --- 2. what is not a regular file, and folders that do not exist -------------------------------------------------


def _fifo(p: Path) -> Path:
    os.mkfifo(p)
    return p


def _link(p: Path) -> Path:
    (p.parent / "target.txt").write_text("mine")
    p.symlink_to(p.parent / "target.txt")
    return p


def _folder(p: Path) -> Path:
    p.mkdir()
    (p / "keep.txt").write_text("mine")
    return p


@pytest.mark.parametrize("option", ["--out", "--plot"])
@pytest.mark.parametrize(
    ("make", "kind", "still"),
    [
        (_fifo, "a FIFO", lambda p: stat.S_ISFIFO(os.lstat(p).st_mode)),
        (_link, "a symbolic link", lambda p: p.is_symlink() and (p.parent / "target.txt").read_text() == "mine"),
        (_folder, "a directory", lambda p: (p / "keep.txt").read_text() == "mine"),
    ],
)
def test_an_output_that_is_not_a_regular_file_is_refused_and_left_as_it_is(pair, tmp_path, option, make, kind, still):
    path = make(tmp_path / "result.png")
    line = error_line(_compare(pair, option, str(path)), 2)
    assert line.startswith(f"error: {option}: {str(path)!r} is {kind}") and "not a regular file" in line
    assert still(path)


def test_dev_null_is_refused_and_stays_a_device(pair):
    line = error_line(_compare(pair, "--out", "/dev/null"), 2)
    assert "--out: '/dev/null' " in line and "character device" in line and "not a regular file" in line
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)


@pytest.mark.parametrize("option", ["--out", "--plot"])
def test_an_output_in_a_folder_that_does_not_exist_is_refused_and_nothing_is_created(pair, tmp_path, option):
    path = tmp_path / "nonexist" / "deeper" / "x.png"
    line = error_line(_compare(pair, option, str(path)), 2)
    assert line == f"error: {option}: {str(path)!r}: its folder {str(path.parent)!r} does not exist"
    assert not (tmp_path / "nonexist").exists()


def test_out_and_plot_naming_one_file_and_a_plot_beside_a_file_of_its_temp_name_are_refused(pair, tmp_path):
    same = tmp_path / "c.png"
    line = error_line(_compare(pair, "--out", str(same), "--plot", str(same)), 2)
    assert "--out and --plot: both name" in line and not same.exists()
    (tmp_path / "curves.tmp.png").write_bytes(b"mine")
    line = error_line(_compare(pair, "--plot", str(tmp_path / "curves.png")), 2)
    assert "curves.tmp.png" in line and (tmp_path / "curves.tmp.png").read_bytes() == b"mine"


# --- 4. a run compared with itself ---------------------------------------------------------------------------------


def test_a_run_compared_with_itself_is_refused_naming_both(pair, tmp_path, monkeypatch):
    a = pair[0]
    monkeypatch.chdir(a.parent)
    (tmp_path / "alias").symlink_to(a)
    for second in ("./s0", str(a), str(tmp_path / "alias")):
        line = error_line(runner.invoke(app, ["compare", "s0", second, "--no-paired"]), 2)
        label = str(Path(second))
        same = f"'s0' and {label!r} name the same run, {str(a)!r}; compare needs different runs or cells"
        assert line == f"error: RUN_OR_REPORT: {same}"
    r = runner.invoke(app, ["compare", "s0", "s1", "--no-paired"])  # two runs: compared as before
    assert r.exit_code == 0, r.output


# --- 3. a report never replaces one's own files; train --overwrite names wandb/ ------------------------------------


@pytest.mark.parametrize(
    ("plant", "named"),
    [
        (lambda d: (d / "report.md").write_text("# my notes\n"), "report.md"),
        (lambda d: (d / "results.json").write_text('{"mine": 1}'), "results.json"),
        (lambda d: (d / "report.html").write_text("<p>mine</p>"), "report.html"),
        (lambda d: (d / "figures").mkdir() or (d / "figures" / "plot.png").write_bytes(b"mine"), "figures"),
    ],
)
def test_a_report_replaces_only_a_report_it_wrote_unless_overwrite(trained, tmp_path, plant, named):
    from windtunnel.store.records.report_files import is_report_results

    out = tmp_path / "mine"
    out.mkdir()
    plant(out)
    before = snapshot(out)
    line = error_line(runner.invoke(app, ["report", str(trained), "--out", str(out)]), 2)
    assert line.startswith(f"error: --out: {str(out / named)!r} is not a report's"), line
    assert "--overwrite" in line and snapshot(out) == before
    r = runner.invoke(app, ["report", str(trained), "--out", str(out), "--overwrite"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["report", str(trained), "--out", str(out)])  # now its own: rebuilt in place, as before
    assert r.exit_code == 0, r.output
    assert is_report_results(out / "results.json")


@pytest.mark.parametrize("make", [_fifo, _link])
def test_a_report_file_that_is_not_a_regular_file_is_refused_even_with_overwrite(trained, tmp_path, make):
    out = tmp_path / "rep"
    out.mkdir()
    path = make(out / "report.md")
    line = error_line(runner.invoke(app, ["report", str(trained), "--out", str(out), "--overwrite"]), 2)
    assert f"--out: {str(path)!r} is " in line and "not a regular file" in line
    assert path.is_symlink() or stat.S_ISFIFO(os.lstat(path).st_mode)


def test_a_report_is_never_written_into_a_run_directory(pair):
    a, b = pair
    before = snapshot(b)
    line = error_line(runner.invoke(app, ["report", str(a), "--out", str(b)]), 2)
    assert line.startswith(f"error: --out: {str(b)!r} ") and "is a run directory" in line
    line = error_line(runner.invoke(app, ["report", str(a), "--out", str(b / "figures")]), 2)
    assert f"lies inside {str(b)!r}" in line
    assert snapshot(b) == before


def test_train_overwrite_says_that_it_deletes_the_runs_wandb_folder_too(trained):
    (trained / tracking.WANDB_DIR / "offline-run-1").mkdir(parents=True)
    (trained / tracking.WANDB_DIR / tracking._WANDB_ID).write_text("abc\n")
    r = runner.invoke(app, train_args(trained, "--overwrite"))
    assert r.exit_code == 0, r.output
    assert f"overwrite: deleted {str(trained / 'wandb')!r}" in r.output
    assert not (trained / "wandb").exists()
    r = runner.invoke(app, train_args(trained, "--overwrite"))  # no wandb/ now: nothing said of it
    assert r.exit_code == 0 and "wandb" not in r.output


# --- beyond: other runs, drivers' folders, publishing --------------------------------------------------------------


def test_no_run_directory_is_made_or_probed_into_inside_another(pair, tmp_path):
    from windtunnel import runs
    from windtunnel.geometry.run import probe_run

    a, b = pair
    before = snapshot(a), snapshot(b)
    line = error_line(runner.invoke(app, train_args(a / "checkpoints" / "inner")), 2)
    assert f"inside the run directory {str(a)!r}" in line
    run = runs.load_run(b)
    with pytest.raises(ValueError, match="lies inside the run directory"):
        runs.save_run(run.load_checkpoint(2), run.task, a / "evals" / "exported", run.config)
    with pytest.raises(ValueError, match=r"--out: .*inside the run directory"):
        probe_run(b, out=a, n=4)  # would replace a's geometry.json and figures with b's
    assert (snapshot(a), snapshot(b)) == before


def test_llm_geometry_never_writes_into_a_run_directory(pair, tmp_path):
    from windtunnel.llm import study

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("one two\nthree four\nfive six\nseven eight\n")
    before = snapshot(pair[0])
    with pytest.raises(ValueError, match=r"--out: .* inside .*run directory"):
        study.llm_geometry(model, pair[0] / "evals" / "llm", prompts=prompts, n=4)
    assert snapshot(pair[0]) == before


def test_a_driver_never_replaces_files_of_a_folder_no_driver_owns(tmp_path):
    base = tmp_path / "base.json"
    base.write_text(json.dumps(SWEEP_BASE))
    sweep_out = tmp_path / "notes"
    sweep_out.mkdir()
    (sweep_out / "sweep.md").write_text("# my sweep notes\n")
    line = error_line(runner.invoke(app, ["sweep", str(base), "--grid", "seed=0", "--out", str(sweep_out)]), 2)
    assert f"--out: {str(sweep_out / 'sweep.md')!r} " in line and "already there" in line and "no sweep" in line
    assert (sweep_out / "sweep.md").read_text() == "# my sweep notes\n" and not (sweep_out / "runs").exists()
    ttb_out = tmp_path / "ttb"
    ttb_out.mkdir()
    (ttb_out / "time_to_bayes.md").write_text("mine\n")
    source = ROOT / "docs" / "results" / "time-to-bayes-recall16"
    line = error_line(runner.invoke(app, ["time-to-bayes", "--merge", str(source), "--out", str(ttb_out)]), 2)
    assert "time_to_bayes.md" in line and (ttb_out / "time_to_bayes.md").read_text() == "mine\n"


def _publish_tier():
    spec = importlib.util.spec_from_file_location("publish_tier", ROOT / "benchmarks" / "publish_tier.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("publish_tier", module)
    spec.loader.exec_module(module)
    return module


def test_publish_never_deletes_a_folder_it_did_not_write(tmp_path):
    publish = _publish_tier().publish
    src = tmp_path / "src"
    (src / "runs").mkdir(parents=True)
    (src / "report.md").write_text("# report\n")
    mine = tmp_path / "thesis"
    mine.mkdir()
    (mine / "chapter1.tex").write_text("mine")
    (mine / "report.md").write_text("mine")
    for dest, why in ((mine, "which publish does not write"), (src, "overlaps the source"), (src / "runs", "overlaps")):
        with pytest.raises(SystemExit, match=why):
            publish(src, dest)
    assert (mine / "chapter1.tex").read_text() == "mine" and (src / "report.md").is_file()
    (tmp_path / "link").symlink_to(mine)
    with pytest.raises(SystemExit, match="not a folder"):
        publish(src, tmp_path / "link")
    publish(src, tmp_path / "published")  # a new folder, then the published copy itself: replaced
    publish(src, tmp_path / "published")
    assert (tmp_path / "published" / "report.md").read_text() == "# report\n"


def test_the_output_checks_say_why_in_one_line(tmp_path):
    with pytest.raises(ValueError, match=r"^--x: '/dev/null' ") as err:
        rundir.check_output_file("/dev/null", "--x")
    assert "character device" in str(err.value) and "not a regular file" in str(err.value)
    assert rundir.check_output_file(tmp_path / "new.md", "--x") == tmp_path / "new.md"
    (tmp_path / "old.md").write_text("old")
    assert rundir.check_output_file(tmp_path / "old.md", "--x") == tmp_path / "old.md"  # a regular file: replaceable
    with pytest.raises(ValueError, match=r"is a character device, not a directory"):
        rundir.check_output_dir("/dev/null", "--x")
