"""Runs that are what they say they are: a driver reuses a run directory only when it holds the resolved
config asked for, records its own runs in a manifest and reports from it; one --out per reproduce tier; time-to-Bayes
names runs by their config hash and labels them from it, admits training-only recipes, holds a lock on --out,
accumulates cells and refuses merges that mix what does not compare."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli_args import SWEEP_BASE
from windtunnel.cli import app
from windtunnel.config import apply_overrides
from windtunnel.errors import CheckpointError, RunInUseError, RunMismatchError
from windtunnel.executors import ExecutorOptions, Job, holding, run_job
from windtunnel.reproduce import default_out, reproduce
from windtunnel.resolve import resolve_config
from windtunnel.store import manifest, rundir
from windtunnel.store.records.run_dir import Versions, code_versions, read_config
from windtunnel.suites import paper, suite
from windtunnel.sweep import sweep
from windtunnel.time_to_bayes import cell_label, cell_runs, merge, parse_cell, run
from windtunnel.training.train import train

runner = CliRunner()
SMOKE_ARGS = ["--tier", "smoke", "--only", "task=bijection", "--only", "arch=lstm,uniform", "--no-probe"]
UNIFORM = {"task": "bijection", "arch": "uniform"}  # a baseline: evaluated, never trained (cheap at any tier)
CELL = "task=bijection,arch=lstm,tier=smoke,steps=4,batch_size=4,eval_every=2,eval_size=4"
ONE_THREAD = ExecutorOptions(threads=1)


def _one_error(result, code: int) -> str:
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.fixture(scope="module")
def smoke_out(tmp_path_factory):
    """`windtunnel reproduce --tier smoke --only task=bijection --only arch=lstm,uniform` (the issue's first step)."""
    out = tmp_path_factory.mktemp("rq") / "rq"
    r = runner.invoke(app, ["reproduce", *SMOKE_ARGS, "--out", str(out), "--no-progress", "--threads", "1"])
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture
def rq(smoke_out, tmp_path):
    """A copy of the smoke --out for a test to change."""
    return Path(shutil.copytree(smoke_out, tmp_path / "rq"))


def _reported(out: Path) -> list[str]:
    return sorted(r["name"] for r in json.loads((out / "results.json").read_text())["runs"])


# --- the same run ------------------------------------------------------------------------------------------


def test_config_diff_names_dotted_keys_old_to_new():
    old = {"train": {"steps": 6, "lr": 0.001}, "seed": 0}
    new = {"train": {"steps": 400, "lr": 0.001}, "seed": 0, "x": [1, 2]}
    assert manifest.config_diff(old, new) == ["train.steps: 6 → 400", "x: (absent) → [1, 2]"]


def test_smoke_then_quick_into_one_out_is_refused(rq):
    """The issue's reproduction: the quick tier never reports the smoke LSTM."""
    before = (rq / manifest.MANIFEST).read_text()
    r = runner.invoke(app, ["reproduce", *SMOKE_ARGS, "--tier", "quick", "--out", str(rq), "--no-progress"])
    line = _one_error(r, 2)
    assert "holds the smoke tier's runs" in line and "runs/paper-quick" in line and "--fresh" in line
    assert (rq / manifest.MANIFEST).read_text() == before and not (rq / manifest.SUPERSEDED).exists()


def test_fresh_sets_another_tiers_runs_aside_and_reports_only_the_new_tier(rq):
    meta = reproduce("quick", rq, only=UNIFORM, probe=False, options=ONE_THREAD, fresh=True)
    assert meta["tier"] == "quick" and _reported(rq) == ["bijection-uniform"]
    assert read_config(rq / "runs" / "bijection-uniform").eval.n == 300  # the quick tier's, not smoke's 64
    assert sorted(p.name.rsplit("-", 1)[0] for p in (rq / manifest.SUPERSEDED).iterdir()) == [
        "bijection-lstm",
        "bijection-uniform",
    ]
    recorded = manifest.read_manifest(rq)
    assert recorded.tier == "quick" and [e.name for e in manifest.listed(rq)] == ["bijection-uniform"]


def test_a_run_of_another_config_is_refused_naming_the_keys_then_fresh_reruns_it(rq):
    """An --out written before manifests (no tier recorded): each run directory is checked against its request."""
    (rq / manifest.MANIFEST).unlink()
    (rq / "reproduce.json").unlink()
    stored = (rq / "runs" / "bijection-uniform" / "eval.json").read_bytes()
    with pytest.raises(RunMismatchError) as err:
        reproduce("quick", rq, only=UNIFORM, probe=False, options=ONE_THREAD)
    message = str(err.value)
    assert "bijection-uniform" in message and "another config" in message and "eval.n: 64 → 300" in message
    assert "task.params.V: 6 → " in message and "--fresh" in message
    assert (rq / "runs" / "bijection-uniform" / "eval.json").read_bytes() == stored  # neither reused nor touched
    reproduce("quick", rq, only=UNIFORM, probe=False, options=ONE_THREAD, fresh=True)
    assert _reported(rq) == ["bijection-uniform"]  # the smoke LSTM left in runs/ is not the quick tier's
    assert read_config(rq / "runs" / "bijection-uniform").eval.n == 300


def test_further_seeds_of_a_cell_are_dropped_once_its_config_changed(rq, monkeypatch):
    """A second pass's seeds (or an earlier --seeds) of a cell are checked like the cell's own runs: kept while the
    tier would train them as they are, refused, or with --fresh set aside, once the cell's config has changed (a new
    learning-rate pick), so a report never pools seeds of two configs."""
    lstm = {"task": "bijection", "arch": "lstm"}
    reproduce("smoke", rq, seeds=2, only=lstm, probe=False, options=ONE_THREAD)
    reproduce("smoke", rq, only=lstm, probe=False, options=ONE_THREAD)  # unchanged: its further seeds stay
    assert "bijection-lstm-s1" in _reported(rq)
    monkeypatch.setattr(paper, "SMOKE", (6, 8, 2e-3))
    with pytest.raises(RunMismatchError, match="bijection-lstm-s1"):
        reproduce("smoke", rq, only=lstm, probe=False, options=ONE_THREAD)
    reproduce("smoke", rq, only=lstm, probe=False, options=ONE_THREAD, fresh=True)
    assert _reported(rq) == ["bijection-lstm", "bijection-uniform"]
    assert read_config(rq / "runs" / "bijection-lstm").train.lr == 2e-3
    aside = sorted(p.name.rsplit("-", 1)[0] for p in (rq / manifest.SUPERSEDED).iterdir())
    assert aside == ["bijection-lstm", "bijection-lstm-s1"]  # s0 is seed 0 again, listed once (as bijection-lstm)


def test_run_job_never_skips_or_resumes_a_run_of_another_config(tmp_path):
    (entry,) = suite("smoke", only={"task": "bijection", "arch": "lstm"})
    job = Job(entry.name, entry.config, str(tmp_path), threads=1)
    run_job(job)
    other = Job(job.name, apply_overrides(entry.config, {"train.lr": 0.01}), job.runs_dir, threads=1)
    with pytest.raises(RunMismatchError, match="train.lr: 0.001 → 0.01"):
        run_job(other)
    (job.run_dir / rundir.DONE).unlink()  # interrupted: resuming it as another config is refused too
    with pytest.raises(RunMismatchError, match="train.lr"):
        run_job(other)


def test_a_run_trained_by_other_code_is_neither_reused_nor_resumed(tmp_path):
    """versions.json records windtunnel's and torch's versions; another torch is a mismatch naming it."""
    (entry,) = suite("smoke", only={"task": "bijection", "arch": "lstm"})
    job = Job(entry.name, entry.config, str(tmp_path), threads=1)
    run_job(job)
    cfg = resolve_config(entry.config)
    assert Versions.read(job.run_dir).to_json() == code_versions()
    assert manifest.check_same_run(job.run_dir, cfg)
    rundir.write_json(job.run_dir / rundir.VERSIONS, {**code_versions(), "torch": "1.0.0"})
    with pytest.raises(RunMismatchError, match=r"versions.torch: '1.0.0' → '2\."):
        manifest.check_same_run(job.run_dir, cfg)
    with pytest.raises(RunMismatchError, match="versions.torch"):
        run_job(job)
    with pytest.raises(ValueError, match="trained by other code"):  # nor does `train --resume` continue it
        train(cfg, job.run_dir, resume=True, progress=False)
    (job.run_dir / rundir.VERSIONS).unlink()  # a run from before versions were recorded is judged by config alone
    assert manifest.check_same_run(job.run_dir, cfg)


def test_a_done_run_without_eval_json_is_evaluated_again_and_a_bad_done_json_is_named(tmp_path):
    (entry,) = suite("smoke", only={"task": "bijection", "arch": "lstm"})
    job = Job(entry.name, entry.config, str(tmp_path), threads=1)
    run_job(job)
    evaluation, metrics = (job.run_dir / "eval.json").read_bytes(), (job.run_dir / "metrics.jsonl").read_bytes()
    (job.run_dir / "eval.json").unlink()
    again = run_job(job)
    assert not again["skipped"] and again["resumed_from"] == entry.config["train"]["steps"]
    assert (job.run_dir / "eval.json").read_bytes() == evaluation
    assert (job.run_dir / "metrics.jsonl").read_bytes() == metrics
    (job.run_dir / rundir.DONE).write_text("[]")
    with pytest.raises(CheckpointError, match=r"done\.json is corrupted"):
        run_job(job)


def test_a_sweep_point_of_another_config_is_refused_and_fresh_sets_it_aside(tmp_path):
    out = tmp_path / "s"
    sweep(SWEEP_BASE, {"seed": [0]}, out, ONE_THREAD)
    point = out / "runs" / "seed=0"
    cfg = json.loads((point / "config.json").read_text())
    cfg["eval"]["n"] = 32
    (point / "config.json").write_text(json.dumps(cfg))
    (point / rundir.DONE).unlink()  # an interrupted run of another config
    with pytest.raises(RunMismatchError, match="eval.n: 32 → 64"):
        sweep(SWEEP_BASE, {"seed": [0]}, out, ONE_THREAD)
    table = sweep(SWEEP_BASE, {"seed": [0]}, out, ONE_THREAD, fresh=True)
    assert [r["run"] for r in table["rows"]] == ["seed=0"] and len(list((out / manifest.SUPERSEDED).iterdir())) == 1
    assert read_config(point).eval.n == 64
    (entry,) = manifest.read_manifest(out).runs
    assert (entry.name, entry.config_hash) == ("seed=0", manifest.stored_hash(point))


# --- manifests ---------------------------------------------------------------------------------------------


def test_reproduce_into_a_sweeps_out_never_reads_its_runs(tmp_path, rq):
    out = tmp_path / "s"
    sweep(SWEEP_BASE, {"seed": [0]}, out, ONE_THREAD)
    with pytest.raises(ValueError, match=r"^--out: .* a sweep \(manifest\.json\)"):
        reproduce("smoke", out, only=UNIFORM, probe=False)
    assert [p.name for p in (out / "runs").iterdir()] == ["seed=0"] and not (out / "results.json").exists()
    (out / manifest.MANIFEST).unlink()  # a sweep's --out written before manifests: its sweep-config.json says so
    with pytest.raises(ValueError, match=r"^--out: .* a sweep \(sweep-config\.json\)"):
        reproduce("smoke", out, only=UNIFORM, probe=False)
    with pytest.raises(ValueError, match=r"^--out: .* a reproduce \(manifest\.json\)"):
        sweep(SWEEP_BASE, {"seed": [0]}, rq, ONE_THREAD)  # and the other way round


def test_the_report_reads_the_manifest_not_everything_under_runs(rq, tmp_path):
    shutil.copytree(rq / "runs" / "bijection-lstm", rq / "runs" / "stray")  # a run put there by hand
    reproduce("smoke", rq, only=UNIFORM, probe=False, options=ONE_THREAD)  # earlier runs of the tier stay in its report
    assert _reported(rq) == ["bijection-lstm", "bijection-uniform"]
    r = runner.invoke(app, ["report", str(rq), "--out", str(tmp_path / "a")])
    assert r.exit_code == 0 and r.output.startswith("2 runs")  # an --out: its manifest's runs
    r = runner.invoke(app, ["report", str(rq / "runs"), "--out", str(tmp_path / "b")])
    assert r.exit_code == 0 and r.output.startswith("3 runs")  # any other directory: what is below it
    cfg = json.loads((rq / "runs" / "bijection-lstm" / "config.json").read_text())
    (rq / "runs" / "bijection-lstm" / "config.json").write_text(json.dumps({**cfg, "seed": 5}))
    line = _one_error(runner.invoke(app, ["report", str(rq), "--out", str(tmp_path / "c")]), 1)
    assert "bijection-lstm" in line and "config.json changed" in line


def test_reproduce_writes_to_one_out_per_tier_by_default(tmp_path, monkeypatch):
    assert default_out("smoke") == Path("runs/paper-smoke") and default_out("paper") == Path("runs/paper-paper")
    assert default_out("quick") == Path("runs/paper-quick")  # `windtunnel demo`'s folder: the quick tier's
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["reproduce", "--tier", "smoke", "--only", "task=bijection", "--only", "arch=uniform"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "runs" / "paper-smoke" / "report.md").is_file()
    assert manifest.read_manifest(tmp_path / "runs" / "paper-smoke").tier == "smoke"


# --- time-to-Bayes -----------------------------------------------------------------------------------------


def test_a_recipe_file_and_a_named_recipe_with_one_stem_are_different_runs(tmp_path):
    f = tmp_path / "wsd.yaml"
    f.write_text("overrides:\n  train.optimizer: muon\n  train.schedule: wsd\n")
    out = tmp_path / "out"
    data = run([parse_cell(CELL + ",recipe=wsd"), parse_cell(CELL + f",recipe={f}")], out, ONE_THREAD, echo=str)
    named, filed = data["cells"]
    assert named["seeds"][0]["run_dir"] != filed["seeds"][0]["run_dir"]
    assert named["label"] == "bijection/lstm/wsd (4x4, lr 0.001, adamw, wsd, smoke preset)"
    assert filed["label"] == "bijection/lstm/wsd.yaml (4x4, lr 0.001, muon, wsd, smoke preset)"
    for c in (named, filed):  # the label is what the run directory trained
        stored = read_config(out / c["seeds"][0]["run_dir"])
        assert (
            f", {stored.train.optimizer}, " in c["label"] and c["seeds"][0]["config_hash"] in c["seeds"][0]["run_dir"]
        )


def test_run_names_carry_the_config_hash_and_labels_read_the_resolved_config():
    (base,) = cell_runs(parse_cell(CELL))
    assert base.name.startswith("bijection-lstm-baseline-4x4-lr0.001-s0-")
    assert base.name.endswith(manifest.config_hash(base.resolved))
    cell = parse_cell(CELL)
    for change in ({"tier": "quick"}, {"eval_size": 8}, {"eval_every": 4}, {"warmup_steps": 2}, {"lr": 0.0010001}):
        (other,) = cell_runs(cell.model_copy(update=change))
        assert other.name != base.name, change
    cell = parse_cell(CELL + ",set.train.lr=0.004")
    (r,) = cell_runs(cell)
    assert (
        cell_label(cell, r.resolved) == "bijection/lstm/baseline (4x4, lr 0.004, adamw, cosine, smoke preset, lr=0.004)"
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("train.eval_size", 1),
        ("train.steps", 50),
        ("train.lr", 0.05),
        ("model.size.hidden", 8),
    ],
)
def test_a_recipe_may_set_only_training_keys(tmp_path, key, value):
    f = tmp_path / "r.yaml"
    f.write_text(f"overrides:\n  train.optimizer: muon\n  {key}: {value}\n")
    out = tmp_path / "out"
    line = _one_error(runner.invoke(app, ["time-to-bayes", "--out", str(out), "--cell", f"{CELL},recipe={f}"]), 2)
    assert f"{key}: " in line and all(allowed in line for allowed in ("optimiser", "schedule", "curriculum"))
    assert not out.exists()


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        (CELL + ",steps=7", "steps is given twice"),
        (CELL + ",set.train.lr=0.1,set.train.lr=0.2", "set.train.lr is given twice"),
        (CELL + ",seeds=3,set.seed=7", "every seed is one run"),
        ("task=[,arch=lstm,steps=4", "--cell task: '[' is not a task of the paper suite"),
        ("task=nosuch,arch=lstm,steps=4", "--cell task: 'nosuch' is not a task"),
    ],
)
def test_bad_cells_are_one_line_errors(tmp_path, cell, message):
    line = _one_error(runner.invoke(app, ["time-to-bayes", "--out", str(tmp_path / "o"), "--cell", cell]), 2)
    assert message in line and not (tmp_path / "o").exists()


def test_two_cells_that_are_one_setting_are_refused():
    with pytest.raises(ValueError, match="cells 1 and 2 are the same runs"):
        run([parse_cell(CELL), parse_cell(CELL + ",recipe=baseline")], "unused", echo=str)


def test_two_time_to_bayes_drivers_on_one_out(tmp_path, holder):
    out = tmp_path / "ttb"
    proc = holder(out)
    r = runner.invoke(app, ["time-to-bayes", "--out", str(out), "--cell", CELL, "--threads", "1", "--no-progress"])
    assert f"output directory is in use by pid {proc.pid}" in _one_error(r, 1)
    assert not (out / "runs").exists()


@pytest.mark.parametrize("driver", ["time-to-bayes", "sweep", "reproduce"])
def test_every_driver_takes_the_one_out_lock(tmp_path, driver):
    """reproduce, sweep and time-to-bayes launch through one launcher: while --out is held as a driver holds it
    (`executors.holding`, here by this process, as by a driver of another kind), each is refused before any run."""
    out = tmp_path / "out"
    start = {
        "time-to-bayes": lambda: run([parse_cell(CELL)], out, ONE_THREAD, echo=str),
        "sweep": lambda: sweep(SWEEP_BASE, {"seed": [0]}, out, ONE_THREAD),
        "reproduce": lambda: reproduce("smoke", out, only=UNIFORM, probe=False, options=ONE_THREAD),
    }[driver]
    with holding(out), pytest.raises(RunInUseError, match="output directory is in use by pid"):
        start()
    assert not (out / "runs").exists() and not (out / manifest.MANIFEST).exists()


def test_a_time_to_bayes_seed_with_eval_json_but_no_done_json_is_not_done(tmp_path):
    """Done means done.json, for time-to-bayes as for every driver (`manifest.is_finished`): a seed whose eval.json
    is there but whose done.json is not (cut off before it was marked done) is run again, not read back as done."""
    out, lines = tmp_path / "ttb", []
    cell = parse_cell(CELL)
    run([cell], out, ONE_THREAD, echo=lines.append)
    (seed,) = cell_runs(cell)
    run_dir = out / manifest.RUNS / seed.name
    assert any(line.startswith(f"  {seed.name}: finished in") for line in lines)
    lines.clear()
    run([cell], out, ONE_THREAD, echo=lines.append)  # finished: read back, nothing run
    assert not any(seed.name in line for line in lines[1:])
    (run_dir / rundir.DONE).unlink()
    assert (run_dir / rundir.EVAL).exists() and not manifest.is_finished(run_dir)
    data = run([cell], out, ONE_THREAD, echo=lines.append)
    assert any(line.startswith(f"  {seed.name}: finished in") for line in lines)  # run again (resumed, evaluated)
    assert manifest.is_finished(run_dir) and data["cells"][0]["seeds"][0]["run_dir"].endswith(seed.name)


def test_results_accumulate_and_refuse_another_setup(tmp_path):
    out = tmp_path / "ttb"
    wsd, baseline = parse_cell(CELL + ",recipe=wsd"), parse_cell(CELL + ",recipe=baseline")
    run([wsd], out, ONE_THREAD, echo=str)
    first_run = out / json.loads((out / "time_to_bayes.json").read_text())["cells"][0]["seeds"][0]["run_dir"]
    metrics = (first_run / "metrics.jsonl").read_bytes()
    run([baseline], out, ONE_THREAD, echo=str)  # a second call keeps the first call's cell
    data = run([wsd.model_copy(update={"seeds": 2})], out, ONE_THREAD, echo=str)  # the same setting: replaced
    assert [(c["cell"]["recipe"], len(c["seeds"])) for c in data["cells"]] == [("wsd", 2), ("baseline", 1)]
    assert (first_run / "metrics.jsonl").read_bytes() == metrics  # its seed 0 was read back, not retrained
    assert len(manifest.listed(out)) == 3
    assert "wsd" in (out / "time_to_bayes.md").read_text() and "baseline" in (out / "time_to_bayes.md").read_text()
    with pytest.raises(ValueError, match=r"\(jobs: 1 in .*, 2 in "):
        run([baseline], out, ExecutorOptions(jobs=2, threads=1), echo=str)  # refused before any training
    with pytest.raises(ValueError, match=r"\(threads_per_run: 1 in .*, 2 in "):
        run([baseline], out, ExecutorOptions(threads=2), echo=str)


def _result(tmp_path: Path, name: str, **machine) -> Path:
    """A minimal time_to_bayes.json in tmp_path/name with one cell."""
    seeds = [{"crossings": {"0.1": None}, "dtype": "float32", "curve": [{"train_s": 1.0, "entropy_mae_bits": 0.2}]}]
    data = {
        "machine": {"machine": "cpu A", "torch": "2.13", "threads_per_run": 1, "jobs": 2, **machine},
        "wall_s": 5,
        "cells": [
            {
                "key": name,
                "label": f"cell {name}",
                "metric": "entropy_mae_bits",
                "cell": {"task": "bijection"},
                "marks": {},
                "seeds": seeds,
                "test": None,
            }
        ],
    }
    rundir.write_json(tmp_path / name / "time_to_bayes.json", data)
    return tmp_path / name


def test_merge_refuses_duplicates_its_own_out_and_mixed_setups_unless_told(tmp_path):
    a, b = _result(tmp_path, "a"), _result(tmp_path, "b")
    c, d = _result(tmp_path, "c", torch="2.14"), _result(tmp_path, "d", threads_per_run=4)
    with pytest.raises(ValueError, match="is given twice"):
        merge([a, a / "time_to_bayes.json"], tmp_path / "m1")
    with pytest.raises(ValueError, match="is one of the sources"):
        merge([a, b], a)
    with pytest.raises(ValueError, match=r"\(torch: '2\.13' in .*, '2\.14' in "):
        merge([a, c], tmp_path / "m2")
    with pytest.raises(ValueError, match=r"\(threads_per_run: 1 in"):
        merge([a, d], tmp_path / "m3")
    shutil.copytree(a, tmp_path / "a2")
    with pytest.raises(ValueError, match="the cell 'cell a' is in both"):
        merge([a, tmp_path / "a2"], tmp_path / "m4")
    data = merge([a, c, d], tmp_path / "mixed", allow_mixed=True)
    assert [cell["machine"]["torch"] for cell in data["cells"]] == ["2.13", "2.14", "2.13"]
    md = (tmp_path / "mixed" / "time_to_bayes.md").read_text()
    assert "| cell a [m1] |" in md and "| cell c [m2] |" in md and "| cell d [m3] |" in md
    with pytest.raises(ValueError, match="already holds time-to-Bayes results"):
        merge([a, b], tmp_path / "mixed")
    empty = tmp_path / "e" / "time_to_bayes.json"
    empty.parent.mkdir()
    empty.write_text("[]")
    line = _one_error(runner.invoke(app, ["time-to-bayes", "--merge", str(empty), "--out", str(tmp_path / "m5")]), 1)
    assert str(empty) in line and "expected a JSON object" in line


def test_the_committed_results_still_merge(tmp_path):
    committed = Path(__file__).resolve().parents[1] / "docs" / "results" / "time-to-bayes"
    data = json.loads((committed / "time_to_bayes.json").read_text())
    assert all("key" not in c for c in data["cells"])  # written before run names carried a config hash
    merged = merge([committed], tmp_path / "m")
    assert len(merged["cells"]) == len(data["cells"]) and (tmp_path / "m" / "time_to_bayes.md").is_file()
