"""Re-evaluation never rewrites a run's record: an evaluation at other settings than the run's own goes to
evals/NAME.json beside eval.json, which stays byte-identical; the report reads eval.json only, and labels each
number with the n that made it."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from tiny_runs import smoke_config
from windtunnel import runs
from windtunnel.cli import app
from windtunnel.errors import CheckpointError
from windtunnel.evaluation.evaluate import evaluate, extra_name
from windtunnel.report import build_report, read_run
from windtunnel.report.table_cells import configurations
from windtunnel.store import rundir
from windtunnel.training.train import train

runner = CliRunner()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A 4-step smoke transformer on a small bijection (checkpoints at 2 and 4), eval.n 16, one eval override."""
    out = tmp_path_factory.mktemp("reeval") / "run"
    cfg = smoke_config(**{"task.V": 5, "task.L": 4, "eval.overrides": [{"L": 5}]})
    train(cfg, out, progress=False)
    return out


def _evals(run_dir):
    return {p.name for p in (run_dir / rundir.EVALS).glob("*.json")} if (run_dir / rundir.EVALS).is_dir() else set()


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (["--n", "8"], "eval.n=8"),
        (["--batch-size", "4"], "eval.batch_size=4"),
        (["--checkpoint", "2"], "checkpoint=2"),
        (["--dtype", "bf16", "--n", "4"], "eval.dtype=bf16,eval.n=4"),
        (["--set", "task.L=3"], "L=3"),
        (["--set", "task.L=3", "--n", "8"], "L=3,eval.n=8"),
    ],
)
def test_eval_at_other_settings_leaves_eval_json_byte_identical(run_dir, args, name):
    before = (run_dir / "eval.json").read_bytes()
    r = runner.invoke(app, ["eval", str(run_dir), *args])
    assert r.exit_code == 0, r.output
    assert (run_dir / "eval.json").read_bytes() == before
    where = run_dir / "evals" / f"{name}.json"
    said = f"wrote {where}: settings that differ from the run's ({name}); eval.json, its recorded evaluation, is left"
    assert said in r.output
    written = json.loads(where.read_text())
    assert all(e["extra"] == name for e in written.values())
    # the whole evaluation moves: at another n, every setting the run evaluates (here default and L=5) goes there
    assert set(written) == ({"L=3"} if "L=" in name else {"default", "L=5"})


def test_the_extra_file_says_what_made_its_numbers(run_dir):
    got = evaluate(run_dir, n=8, step=2)
    assert got["default"]["extra"] == "checkpoint=2,eval.n=8"
    assert got["default"]["n"] == 8 and got["default"]["step"] == 2
    assert got["default"]["run"]["status"] == "unfinished"  # the record of those weights: step 2 of 4
    stored = json.loads((run_dir / "evals" / "checkpoint=2,eval.n=8.json").read_text())
    assert stored == json.loads(json.dumps(got))


def test_eval_at_the_run_s_own_settings_reproduces_eval_json(run_dir):
    before = (run_dir / "eval.json").read_bytes()
    files = _evals(run_dir)
    r = runner.invoke(app, ["eval", str(run_dir)])
    assert r.exit_code == 0, r.output
    assert f"wrote {run_dir / 'eval.json'}" in r.output and "recorded evaluation" in r.output
    assert (run_dir / "eval.json").read_bytes() == before  # the same numbers, rewritten
    assert _evals(run_dir) == files
    # a setting the config evaluates (L=5) at the run's n is part of the recorded evaluation too
    assert "extra" not in evaluate(run_dir, overrides=[{"L": 5}], write=False)["L=5"]


def test_a_model_that_is_not_the_run_s_checkpoint_is_never_recorded(run_dir):
    run = runs.load_run(run_dir)
    other = run.load_checkpoint(2)
    with pytest.raises(ValueError, match="not those of .* at step 4"):
        evaluate(run, model=other)
    assert evaluate(run, model=other, write=False)["default"]["step"] == 4  # scored, never written
    before = (run_dir / "eval.json").read_bytes()
    evaluate(run, model=run.load_checkpoint(4), n=16)  # the run's own weights: its recorded evaluation
    assert (run_dir / "eval.json").read_bytes() == before


def test_bad_settings_name_the_option(run_dir):
    r = runner.invoke(app, ["eval", str(run_dir), "--checkpoint", "3"])
    assert r.exit_code == 2 and "step: 3 is not a checkpoint" in r.output and "[2, 4]" in r.output
    r = runner.invoke(app, ["eval", str(run_dir), "--dtype", "fp8"])
    assert r.exit_code == 2 and "dtype: must be one of float32, bf16" in r.output


def test_the_names_keep_eval_settings_apart_from_task_parameters():
    cfg = smoke_config(**{"task.name": "regression", "task.d": 2, "task.n": 6})
    common = {"batch_size": cfg.eval.batch_size, "dtype": cfg.eval.dtype, "step": 4, "final_step": 4}
    assert extra_name(cfg, {}, n=cfg.eval.n, **common) is None
    assert extra_name(cfg, {"n": 30}, n=cfg.eval.n, **common) == "n=30"  # regression's own n, a task parameter
    assert extra_name(cfg, {"n": 30}, n=100, **common) == "eval.n=100,n=30"
    assert extra_name(cfg, {}, n=cfg.eval.n, **common, n_boot=0) == "n_boot=0"
    # a name that is no safe file name is kept apart by a hash of it
    odd = rundir.eval_file("r", "format=a/b")
    assert odd.parent.name == "evals" and "/" not in odd.name and odd.name.startswith("format=a_b-")


def test_evals_is_part_of_a_run_directory(run_dir, tmp_path):
    evaluate(run_dir, n=8)
    assert rundir.first_stray(run_dir) is None  # --overwrite may clear it: windtunnel's own files
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    rundir.clear(copy)
    assert rundir.contents(copy) == []  # the lock stays (clear keeps it)


def test_the_report_reads_only_eval_json(run_dir, tmp_path):
    recorded = json.loads((run_dir / "eval.json").read_text())
    extra = evaluate(run_dir, n=8)  # an extra evaluation beside it
    r = read_run(run_dir)
    assert r.evals == recorded and r.other_evals == {}
    results = build_report([run_dir], tmp_path / "report")
    (entry,) = results["runs"]
    assert entry["evals"] == {k: v["metrics"] for k, v in recorded.items()}
    # an extra evaluation can never be read as the recorded one, even put into eval.json by hand
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("config.json", "eval.json"):
        (bad / name).write_bytes((run_dir / name).read_bytes())
    rundir.write_json(bad / "eval.json", {**recorded, "default": extra["default"]})
    with pytest.raises(CheckpointError, match=r"default\.extra: .*other settings.* evals/"):
        read_run(bad)


def test_a_number_is_labelled_with_the_n_that_made_it(run_dir, tmp_path):
    """An eval.json rewritten at n = 8 by `eval --n 8` before this issue: its run is labelled eval.n=8, not its
    config's 16, and a setting left at another n than its default is set aside."""
    old = tmp_path / "old"
    old.mkdir()
    (old / "config.json").write_bytes((run_dir / "config.json").read_bytes())
    (old / "config.json").write_text((old / "config.json").read_text().replace('"seed": 0', '"seed": 1'))
    extra = evaluate(run_dir, n=8, write=False)
    legacy = {k: {key: v for key, v in e.items() if key != "extra"} for k, e in extra.items()}
    legacy["L=5"] = json.loads((run_dir / "eval.json").read_text())["L=5"]  # still at n = 16
    rundir.write_json(old / "eval.json", legacy)
    r = read_run(old)
    assert r.config["eval"]["n"] == 8 and json.loads((old / "config.json").read_text())["eval"]["n"] == 16
    assert set(r.evals) == {"default"} and set(r.other_evals) == {"L=5"}
    labels = set(configurations([read_run(run_dir), r])[("transformer", "bijection")])
    assert labels == {"eval.n=16", "eval.n=8"}


def test_eval_runs_where_the_run_trained_and_names_a_bad_device(run_dir, monkeypatch):
    """`windtunnel eval` evaluates on the run's train.device (auto: CUDA when present), as reproduce does, or on
    --device; a bad name, or cuda without a GPU, is one line naming --device (exit 2)."""
    import windtunnel.evaluation.evaluate as ev

    seen = []
    real = ev.evaluate

    def spy(*args, **kwargs):
        seen.append(str(kwargs.get("device")))
        return real(*args, **kwargs)

    monkeypatch.setattr(ev, "evaluate", spy)
    before = (run_dir / "eval.json").read_bytes()
    assert runner.invoke(app, ["eval", str(run_dir), "--n", "8"]).exit_code == 0
    assert runner.invoke(app, ["eval", str(run_dir), "--n", "8", "--device", "cpu"]).exit_code == 0
    import torch

    assert seen == ["cuda" if torch.cuda.is_available() else "cpu", "cpu"]
    assert (run_dir / "eval.json").read_bytes() == before
    r = runner.invoke(app, ["eval", str(run_dir), "--device", "tpu"])
    assert r.exit_code == 2 and "--device: must be one of auto, cpu, cuda (got 'tpu')" in r.output
    if not torch.cuda.is_available():
        r = runner.invoke(app, ["eval", str(run_dir), "--device", "cuda"])
        assert r.exit_code == 2 and "--device: 'cuda' " in r.output and "no CUDA device" in r.output
