"""benchmarks/geometry_control.py at smoke size: both experiments' JSON, report, reuse and publishing."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
MARKS = ("0.05", "0.02", "0.01")


@pytest.fixture(scope="module")
def gc():
    """The benchmark script as a module (it imports publish_tier, its neighbour in benchmarks/)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("geometry_control")
    finally:
        sys.path.remove(str(BENCHMARKS))


def check_header(report: str, command: str, loss_form: str = "authors") -> None:
    assert f"Command: `{command}`" in report and "SIMD flags:" in report and "native bf16:" in report
    assert "1 thread(s) per run" in report and "Dtype: float32" in report
    assert "2V-way" in report and gc_note(loss_form) in report  # the stated loss form


def gc_note(loss_form: str) -> str:
    return {
        "authors": "the authors arm trains with it (train.loss ce_vocab",
        "v-way": "with --loss-form v-way both arms train with our V-way loss",
    }[loss_form]


@pytest.mark.parametrize("loss_form", ["authors", "v-way"])
def test_geometry_control_smoke(gc, tmp_path, loss_form):
    out, command = (
        tmp_path / "gc",
        f"python benchmarks/geometry_control.py control --tier smoke --loss-form {loss_form}",
    )
    kw = {"tier": "smoke", "steps": 12, "batch_size": 8, "eval_every": 4, "eval_size": 8, "jobs": 1, "command": command}
    kw["loss_form"] = loss_form
    data = gc.control(out, echo=lambda *_: None, **kw)
    assert json.loads((out / "geometry_control.json").read_text()) == json.loads(json.dumps(data))
    arms = data["tasks"]["bijection"]["arms"]
    assert set(arms) == {"authors", "ours"}
    assert (
        arms["authors"]["settings"] | {"init": "torch", "weight_decay_on": "all", "betas": [0.9, 0.999]}
        == (arms["authors"]["settings"])
    )
    assert arms["authors"]["settings"]["weight_decay"] == 0.1 and arms["authors"]["settings"]["schedule"] == "cosine"
    assert arms["ours"]["settings"]["init"] == "normal" and arms["ours"]["settings"]["optimizer"] == "muon"
    authors_loss = "ce_vocab" if loss_form == "authors" else "auto"  # the authors' 2V-way loss, or our V-way one
    assert (arms["authors"]["settings"]["loss"], arms["ours"]["settings"]["loss"]) == (authors_loss, "auto")
    assert data["loss_form"] == gc.LOSS_NOTES[loss_form]
    for name, arm in arms.items():
        v_way = name == "ours" or loss_form == "v-way"  # config_deviations sees ce_vocab as the authors' loss form
        assert any("loss = V-way" in line for line in arm["stated_differences"]["training"]) == v_way
        assert not any("loss = 2V-way" in line for line in arm["stated_differences"]["training"])
        assert set(MARKS) <= set(arm["marks"]) and all({"reached", "of"} <= set(arm["marks"][m]) for m in MARKS)
        assert len(arm["seeds"]) == 2
        for seed in arm["seeds"]:
            assert set(MARKS) <= set(seed["crossings"])  # None where not reached at this size
            g = seed["geometry"]
            assert {"key_tokens", "value_tokens"} <= set(g["token_sets"])
            assert {"value_positions", "scored_positions"} <= set(g["position_sets"])
            assert len(g["dynamics"]["checkpoints"]) >= 2  # the dense schedule's step 10 and the final 12
        for name in ("L0 key mean |cos|, key tokens", "PC1 var, values at value positions"):
            q = arm["across_seeds"][name]["trained"]
            assert q["n_seeds"] == 2 and len(q["interval"]) == 2
    comparison = data["tasks"]["bijection"]["comparison"]
    assert comparison["authors' L0 signed key cos, value tokens"]["ours"]["trained"]["n_seeds"] == 2
    assert all((out / f).is_file() for f in data["figures"]) and "figures/geometry-bijection.png" in data["figures"]
    report = (out / "report.md").read_text()
    check_header(report, command, loss_form)
    assert "authors trained" in report and "Frame–precision" in report and "≤ 0.02 bits" in report

    trained = {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/metrics.jsonl")}
    unprobed = out / arms["ours"]["seeds"][1]["run_dir"] / "geometry.json"
    unprobed.unlink()
    again = gc.control(out, echo=lambda *_: None, **kw)  # resumable: finished runs are read back, not trained again
    assert {p: p.stat().st_mtime_ns for p in trained} == trained and unprobed.is_file()  # ... and probed if unprobed
    assert again["tasks"]["bijection"]["comparison"] == comparison
    published = tmp_path / "published"
    gc.publish(out, published)
    assert {"report.md", "geometry_control.json", "time_to_bayes.json"} <= {p.name for p in published.iterdir()}
    assert (published / "figures" / "geometry-bijection.png").is_file()
    assert len(list((published / "geometry").glob("*-geometry.json"))) == 4
    assert (published / "geometry" / "bijection-authors-key_cosines.png").is_file()


@pytest.mark.parametrize("loss_form", ["authors", "v-way"])
def test_side_by_side_smoke(gc, tmp_path, loss_form):
    out, command = tmp_path / "sbs", "python benchmarks/geometry_control.py side-by-side --tier smoke"
    data = gc.side_by_side(
        out,
        tier="smoke",
        cap_steps=6,
        cap_seconds=1000.0,
        batch_size=8,
        eval_every=2,
        eval_size=8,
        jobs=1,
        command=command,
        loss_form=loss_form,
        echo=lambda *_: None,
    )
    assert json.loads((out / "side_by_side.json").read_text()) == json.loads(json.dumps(data))
    assert set(data["arms"]) == {"authors", "ours"} and data["cap"] == {"steps": 6, "seconds": 1000.0}
    assert data["arms"]["authors"]["settings"]["lr"] == 3e-4  # the authors' own lr by default
    assert all(len(a["seeds"]) == 2 and a["settings"]["steps"] == 6 for a in data["arms"].values())
    assert set(data["ratio_authors_over_ours"]) == set(MARKS) and data["headline_mark"] == "0.02"
    assert all("text" in r and "ratio" in r for r in data["ratio_authors_over_ours"].values())
    assert data["arms"]["authors"]["settings"]["loss"] == ("ce_vocab" if loss_form == "authors" else "auto")
    report = (out / "report.md").read_text()
    check_header(report, command, loss_form)
    assert "authors / ours" in report and "laid over the 6 capped steps" in report


def test_ratio_is_a_bound_where_one_arm_never_reaches_the_mark(gc):
    hit = {"reached": 2, "of": 2, "median_s": 50.0}
    miss = {"reached": 0, "of": 2}
    trained = {"authors": 400.0, "ours": 300.0}
    assert gc.ratio_text({**hit, "median_s": 100.0}, hit, trained) == (2.0, "2.00×")
    assert gc.ratio_text(miss, hit, trained)[1].startswith("> 8.00×")
    assert gc.ratio_text(hit, miss, trained)[1].startswith("< 0.17×")
    assert gc.ratio_text({"reached": 1, "of": 2, "median_s": 9.0}, hit, trained) == (None, "—")


def test_loss_form_v_way_trains_the_committed_runs(gc):
    """--loss-form v-way gives the very runs (config hashes, run names) of the committed results, measured with both
    arms on the V-way loss: their quoted commands re-run as measured."""
    from windtunnel.time_to_bayes import cell_runs

    results = Path(__file__).resolve().parents[1] / "docs" / "results"
    control = json.loads((results / "geometry-control" / "geometry_control.json").read_text())
    sbs = json.loads((results / "time-to-bayes-side-by-side" / "side_by_side.json").read_text())
    assert "--loss-form v-way" in control["command"] and "--loss-form v-way" in sbs["command"]
    common = {"eval_every": 100, "eval_size": 256, "loss_form": "v-way"}
    for arms, kw in (
        (control["tasks"]["bijection"]["arms"], {"tier": "quick", "steps": 3000, "batch_size": 64, "authors_lr": 1e-3}),
        (sbs["arms"], {"tier": "paper", "steps": 600, "batch_size": 256, "authors_lr": 3e-4}),
    ):
        seeds, dense = len(arms["ours"]["seeds"]), kw["tier"] == "quick"  # the control has dense checkpoints
        cells = gc.arm_cells("bijection", seeds=seeds, dense=dense, **common, **kw)
        for name, cell in cells.items():
            assert [f"runs/{r.name}" for r in cell_runs(cell)] == [s["run_dir"] for s in arms[name]["seeds"]], name
    with pytest.raises(ValueError, match="--loss-form"):
        gc.check_loss_form("2v")
