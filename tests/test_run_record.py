"""A run's record says what it is: an unfinished, extended or resumed run is marked in eval.json and in
every report row, never presented as its config's finished run; a resume refuses an edit of config.json outside the
resumable keys, naming it; and evaluation draws the same test sequences whatever its forward batch size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli_args import train_args
from interrupts import SignalAt, signal_cfg
from windtunnel import models, seeds, tasks
from windtunnel.cli import app
from windtunnel.errors import TrainingInterrupted
from windtunnel.evaluation.evaluate import DRAW_BLOCK
from windtunnel.runs import save_run
from windtunnel.runs.resume import TRAINED
from windtunnel.tasks.bijection import Bijection
from windtunnel.training.train import train

runner = CliRunner()


def _ok(r) -> str:
    assert r.exit_code == 0, r.output
    return r.output


def _record(run: Path, setting: str = "default") -> dict:
    return json.loads((run / "eval.json").read_text())[setting]["run"]


def _report(tmp_path: Path, *runs: Path) -> tuple[str, dict]:
    out = tmp_path / "report"
    _ok(runner.invoke(app, ["report", *map(str, runs), "--out", str(out)]))
    return (out / "report.md").read_text(), json.loads((out / "results.json").read_text())


def _rows(md: str, first: str, *having: str) -> list[str]:
    """The Markdown table rows whose first cell starts with `first` and that hold each of `having`, outside the
    at-a-glance grid (whose cells are links to the rows these are)."""
    rows = [line for line in md.splitlines() if line.startswith(f"| {first}") and "](#cell-" not in line]
    return [line for line in rows if all(h in line for h in having)]


def _interrupted(run: Path, at: int = 3) -> None:
    """An 8-step run (batch 4) stopped by Ctrl-C at step `at`, its checkpoint written there."""
    with pytest.raises(TrainingInterrupted):
        train(signal_cfg(), run, progress=False, handle_signals=True, callbacks=[SignalAt(at)])


# --- 1. unfinished, extended and resumed runs are marked --------------------------------------------------------


def test_an_unfinished_run_is_marked_in_eval_json_and_every_report_row_and_never_pooled(tmp_path):
    cut, full = tmp_path / "cut", tmp_path / "full"
    _interrupted(cut)
    train(signal_cfg(), full, progress=False)  # the same config, finished
    r = runner.invoke(app, ["eval", str(cut)])
    _ok(r)
    (warning,) = [line for line in r.stderr.splitlines() if line.startswith(f"warning: {cut}: unfinished")]
    assert "step 3 of 8" in warning and "12 of 32 sequences" in warning
    assert _record(cut) == {
        "status": "unfinished",
        "steps": 8,
        "steps_trained": 3,
        "sequences_seen": 12,
        "notes": ["unfinished: stopped at step 3 of 8 (12 of 32 sequences seen), not the run its config trains"],
    }
    assert _record(full)["status"] == "finished" and _record(full)["steps_trained"] == 8

    md, results = _report(tmp_path, cut, full)
    # Table 1: the finished run is the config's row; the unfinished one a row of its own, marked, never pooled
    (finished,) = _rows(md, "transformer |")
    (unfinished,) = _rows(md, "transformer (unfinished at step 3 of 8) |")
    assert "† unfinished" in unfinished and "seeds" not in unfinished and "†" not in finished  # one seed, unpooled
    (said,) = [line for line in md.splitlines() if "cut: unfinished" in line]
    assert "step 3 of 8" in said and "12 of 32 sequences" in said
    # what was run: the steps and sequences actually trained, not the config's
    (row,) = _rows(md, "cut |")
    assert "| † unfinished | 3 of 8 | 4 |" in row
    assert "| 32 |" in _rows(md, "bijection")[-1]  # memorisation: the most any run saw, the finished one's 8 x 4
    assert {e["name"]: e["status"] for e in results["runs"]} == {"cut": "unfinished", "full": "finished"}
    assert results["table1"]["transformer (unfinished at step 3 of 8)"]["bijection"]["statuses"] == ["unfinished"]

    alone, _ = _report(tmp_path, cut)
    assert "| 12 |" in _rows(alone, "bijection")[-1]  # 3 steps x 4 sequences, not 8 x 4


def test_an_eval_json_without_the_record_is_still_marked_by_its_step(tmp_path):
    cut = tmp_path / "cut"
    _interrupted(cut)
    _ok(runner.invoke(app, ["eval", str(cut)]))
    data = json.loads((cut / "eval.json").read_text())
    del data["default"]["run"]  # as an eval.json written before the record existed
    (cut / "eval.json").write_text(json.dumps(data))
    md, results = _report(tmp_path, cut)
    assert _rows(md, "transformer (unfinished at step 3 of 8) |") and results["runs"][0]["steps_trained"] == 3


def test_a_garbled_record_names_the_file_and_field(tmp_path):
    cut = tmp_path / "cut"
    _interrupted(cut)
    _ok(runner.invoke(app, ["eval", str(cut)]))
    data = json.loads((cut / "eval.json").read_text())
    data["default"]["run"]["status"] = "done"
    (cut / "eval.json").write_text(json.dumps(data))
    r = runner.invoke(app, ["report", str(cut), "--out", str(tmp_path / "report")])
    assert r.exit_code == 1 and r.output.startswith("error: ") and "default.run.status: expected one of" in r.output


@pytest.mark.filterwarnings("ignore:resume. train.steps:RuntimeWarning")
def test_a_cosine_run_extended_by_resume_is_marked_extended_and_a_constant_one_resumed(tmp_path):
    cosine, constant = tmp_path / "cosine", tmp_path / "constant"
    _ok(runner.invoke(app, train_args(cosine, "--steps", "4", "--set", "train.warmup_steps=1")))
    _ok(runner.invoke(app, ["train", "--resume", str(cosine), "--steps", "8", "--no-progress"]))
    const = ["--set", "train.schedule=constant", "--set", "train.warmup_steps=1"]
    _ok(runner.invoke(app, train_args(constant, "--steps", "3", *const)))
    _ok(runner.invoke(app, ["train", "--resume", str(constant), "--steps", "5", "--no-progress"]))

    ext = _record(cosine)
    assert ext["status"] == "extended" and ext["steps_trained"] == 8
    assert ext["notes"][0].startswith("extended: resumed at step 4 with train.steps: 4 → 8: train.steps 4 → 8 changes")
    same = _record(constant)
    assert same["status"] == "resumed" and same["notes"] == ["resumed: resumed at step 3 with train.steps: 3 → 5"]

    md, results = _report(tmp_path, cosine, constant)
    (row,) = _rows(md, "transformer (", "extended by a resume) |")  # not the config's run: a row of its own
    assert "† extended" in row and "† resumed" not in row
    (row,) = _rows(md, "transformer (", '"constant"')  # the run its config trains: not set apart, but marked
    assert "† resumed" in row and "extended by" not in row
    assert "cosine: extended: resumed at step 4" in md and "constant: resumed: resumed at step 3" in md
    assert {e["name"]: e["status"] for e in results["runs"]} == {"cosine": "extended", "constant": "resumed"}


# --- 2. an edited config.json cannot silently change a resumed run ------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "change"),
    [("lr", 3e-3, "train.lr: 0.0003 → 0.003"), ("weight_decay", 0.5, "train.weight_decay: 0.01 → 0.5")],
)
def test_an_edit_of_config_json_outside_the_resumable_keys_is_refused_naming_it(tmp_path, key, value, change):
    cut = tmp_path / "cut"
    _interrupted(cut)
    cfg = json.loads((cut / "config.json").read_text())
    cfg["train"][key] = value
    (cut / "config.json").write_text(json.dumps(cfg))
    before = {p.name: p.read_bytes() for p in cut.iterdir() if p.is_file() and not p.name.startswith(".")}
    r = runner.invoke(app, ["train", "--resume", str(cut), "--no-progress"])
    assert r.exit_code == 2, r.output
    line = r.output.strip()
    assert line.startswith("error: resume: 1 key differs from the config the run trained with") and "\n" not in line
    assert f"{change} (edited in config.json)" in line and str(cut / TRAINED) in line
    assert "put back" in line  # the way out
    assert {p.name: p.read_bytes() for p in cut.iterdir() if p.is_file() and not p.name.startswith(".")} == before
    # evaluated as it is, the run says its config.json is not what trained it
    _ok(runner.invoke(app, ["eval", str(cut)]))
    rec = _record(cut)
    assert rec["status"] == "unfinished" and any(n.startswith("edited: config.json differs") for n in rec["notes"])
    assert change in " ".join(rec["notes"])


@pytest.mark.parametrize("made_by", ["train", "save_run"])
def test_a_resume_without_the_record_it_compares_against_is_refused_naming_it(tmp_path, made_by):
    """trained.json deleted (and weight_decay edited in config.json): the edit cannot be told from the run's own
    setting, so the resume is refused, exit 1, naming the file; before, it went on with 0.5 recorded and the
    optimiser's 0.01 used. A save_run export without it was trained from step 0 as "resumed", its marking lost."""
    run = tmp_path / "run"
    if made_by == "train":
        _interrupted(run)
        cfg = json.loads((run / "config.json").read_text())
        cfg["train"]["weight_decay"] = 0.5
        (run / "config.json").write_text(json.dumps(cfg))
    else:
        task = tasks.make("bijection", V=5, L=4)
        model = models.make("transformer", task.spec, {"n_layers": 1, "d_model": 16, "n_heads": 2, "d_ff": 32})
        save_run(model, task, run, {"eval": {"n": 8}, "train": {"steps": 4}}, steps=4)
    (run / TRAINED).unlink()
    before = {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file() and not p.name.startswith(".")}
    r = runner.invoke(app, ["train", "--resume", str(run), "--no-progress", "--steps", "8"])
    assert r.exit_code == 1, r.output
    line = r.output.strip()
    assert "\n" not in line and line.startswith(f"error: resume: {str(run / TRAINED)!r} is missing")
    assert "--overwrite" in line and "--out" in line  # the ways to train it anew
    assert {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file() and not p.name.startswith(".")} == before


def test_an_edit_of_a_resumable_key_is_a_recorded_change_like_set(tmp_path):
    cut = tmp_path / "cut"
    _interrupted(cut)
    cfg = json.loads((cut / "config.json").read_text())
    cfg["eval"]["n"] = 6
    (cut / "config.json").write_text(json.dumps(cfg))
    out = _ok(runner.invoke(app, ["train", "--resume", str(cut), "--no-progress"]))
    assert "changed: eval.n: 8 → 6" in out
    assert json.loads((cut / "resumes.json").read_text())["resumes"] == [
        {"step": 3, "changed": ["eval.n: 8 → 6"], "note": None}
    ]
    assert json.loads((cut / TRAINED).read_text())["config"]["eval"]["n"] == 6  # what trains from here on
    assert _record(cut)["status"] == "resumed" and json.loads((cut / "eval.json").read_text())["default"]["n"] == 6


# --- 3. the test sequences do not depend on the forward batch size -----------------------------------------------


def test_evaluation_draws_the_same_sequences_whatever_the_batch_size(tmp_path, monkeypatch):
    run, n = tmp_path / "run", DRAW_BLOCK + 10  # two draw blocks
    _ok(runner.invoke(app, train_args(run)))
    drawn: list[tuple[int, int]] = []
    sample = Bijection.sample

    def spy(self, batch_size, seed=None, generator=None, device=None):
        if seed is not None and seeds.TEST_RANGE[0] <= seed < seeds.TEST_RANGE[1]:  # the test stream's draws
            drawn.append((batch_size, seed))
        return sample(self, batch_size, seed=seed, generator=generator, device=device)

    monkeypatch.setattr(Bijection, "sample", spy)
    results = {}
    for bs in (1, 7, 64, n, 2 * n):
        drawn.clear()
        r = runner.invoke(app, ["eval", str(run), "--n", str(n), "--batch-size", str(bs), "--json"])
        _ok(r)
        results[bs] = json.loads(r.stdout)["default"]
        # what eval.batch_size's default (250) drew before draws were separated from forward passes
        assert drawn == [(DRAW_BLOCK, seeds.test_seed(0)), (10, seeds.test_seed(1))], bs
        extra = f"eval.batch_size={bs},eval.n={n}"  # settings that differ from the run's: beside eval.json
        assert json.loads((run / "evals" / f"{extra}.json").read_text())["default"]["batch_size"] == bs

    ref = results[n]
    for bs, res in results.items():
        for data_only in ("bayes_accuracy", "bayes_entropy_bits"):  # the sequences alone: identical
            assert res["metrics"][data_only] == ref["metrics"][data_only], (bs, data_only)
        assert res["per_position"]["bayes_entropy_bits"] == ref["per_position"]["bayes_entropy_bits"]
        for m, v in ref["metrics"].items():  # the model's forward: equal within float rounding
            if v is not None:
                assert res["metrics"][m]["mean"] == pytest.approx(v["mean"], rel=1e-5, abs=1e-7), (bs, m)
        assert res["verdict"]["level"] == ref["verdict"]["level"]
