"""The smoke tier end to end: train every cell, evaluate, report; then resume and rebuild the report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from windtunnel.cli import app
from windtunnel.errors import CheckpointError
from windtunnel.models.baselines import BASELINES
from windtunnel.report import build_report, table_cells, tables
from windtunnel.report.collect import find_runs
from windtunnel.reproduce import reproduce
from windtunnel.suites import ARCHS, TASKS, deviations, paper, suite


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke")
    meta = reproduce("smoke", out, probe=False)
    return out, meta


def test_suite_covers_every_cell():
    names = {r.name for r in suite("smoke")}
    assert names == {f"{t}-{a}" for t in TASKS for a in (*ARCHS, *BASELINES)}
    assert len(suite("paper", seeds=3)) == len(TASKS) * (3 * len(ARCHS) + len(BASELINES))
    # the quick tier: 3 seeds for every transformer and Mamba cell, one for the controls and baselines
    quick = {r.name: r.config["seed"] for r in suite("quick")}
    for t in TASKS:
        for a in ("transformer", "mamba"):
            assert {quick[f"{t}-{a}-s{k}"] for k in range(3)} == {0, 1, 2}
        assert all(f"{t}-{a}" in quick for a in ("lstm", "mlp", "mlp-pointwise", *BASELINES))
    assert len(quick) == len(TASKS) * (2 * 3 + 3 + len(BASELINES))
    assert {r.name for r in suite("quick", only={"task": "hmm", "arch": "transformer,lstm"})} == {
        "hmm-transformer-s0",
        "hmm-transformer-s1",
        "hmm-transformer-s2",
        "hmm-lstm",
    }
    with pytest.raises(ValueError, match="only"):
        suite("quick", only={"colour": "red"})
    with pytest.raises(ValueError, match="tier"):
        suite("huge")


def test_standard_tier_trains_the_quick_sizes_for_longer():
    from windtunnel.config import validate
    from windtunnel.resolve import resolve_config

    entries = {r.name: r.config for r in suite("standard")}
    assert len(entries) == len(suite("quick"))  # same cells and seeds as the quick tier
    for cfg in entries.values():
        resolved = resolve_config(validate(cfg))  # every cell is a valid run
        if cfg["model"]["arch"] not in BASELINES:
            assert cfg["model"]["preset"] == "quick" and resolved.train.eval_every <= resolved.train.steps // 20
    assert entries["regression-transformer-s0"]["task"]["params"]["pair_tokens"] is True
    quick = {r.name: r.config for r in suite("quick")}
    for name, cfg in quick.items():
        recall = cfg["task"]["name"] == "recall"  # the standard tier stores 16 pairs of 32 keys, the quick tier 4
        if not recall:
            assert cfg["task"] == entries[name]["task"]
        if cfg["model"]["arch"] not in BASELINES:
            assert cfg["train"]["schedule"] == entries[name]["train"]["schedule"] == "wsd"
            assert cfg["train"]["steps"] < entries[name]["train"]["steps"]
            assert "curriculum" not in cfg["train"]
            # the pair curriculum for every architecture of the standard tier's recall, the stickiness curriculum for
            # every architecture of its sticky HMM, and nothing else
            stages = {
                "recall": [{"until": 600, "params": {"N": 4}}, {"until": 1_200, "params": {"N": 8}}],
                "hmm-sticky": [
                    {"until": 300, "params": {"stickiness": 0.5}},
                    {"until": 500, "params": {"stickiness": 0.7}},
                ],
            }
            assert entries[name]["train"].get("curriculum") == stages.get(cfg["task"]["name"])
    standard_recall = entries["recall-mamba-s0"]["task"]["params"]
    assert (standard_recall["N"], standard_recall["key_vocab"], standard_recall["value_vocab"]) == (16, 32, 32)
    assert [o["N"] for o in entries["recall-mamba-s0"]["eval"]["overrides"]] == [24, 32]  # at most the 32 keys
    recall = deviations("standard")[1].partition("recall: ")[2]  # the recall part of the fair-protocol line
    assert "curriculum" in recall and "N=4 to 20%" in recall and "N=8 to 40%" in recall  # the stages, their ends
    sticky = deviations("standard")[1].partition("hmm-sticky: ")[2]
    assert "stickiness=0.5 to 30%" in sticky and "stickiness=0.7 to 50%" in sticky
    lines = deviations("standard")
    assert lines[0].startswith("model sizes: the 'quick' presets")
    assert any(line.startswith("bijection / transformer training: ") and "schedule = wsd" in line for line in lines)


def test_the_transport_tier_trains_the_standard_hmm_cells_longer():
    """The two HMM columns only, each cell the standard tier's (sizes, task, recipe, curriculum, evaluation, seeds,
    learning-rate pick) trained longer, the LSTM on three seeds (its "not exact" claim needs two); a tunnel outside the
    tier is refused by name."""
    from windtunnel.config import validate
    from windtunnel.resolve import resolve_config
    from windtunnel.suites.paper import protocol_text, run_config

    transport = {r.name: r.config for r in suite("transport")}
    standard = {r.name: r.config for r in suite("standard", only={"task": "hmm,hmm-sticky"})}
    lstm = {f"{t}-lstm-s{s}" for t in ("hmm", "hmm-sticky") for s in range(3)}
    assert set(transport) == set(standard) - {"hmm-lstm", "hmm-sticky-lstm"} | lstm
    assert {c["task"]["name"] for c in transport.values()} == {"hmm", "hmm-sticky"}
    for name, cfg in transport.items():
        resolve_config(validate(cfg))  # every cell is a valid run
        theirs = run_config(cfg["task"]["name"], cfg["model"]["arch"], "standard", cfg["seed"])
        for part in ("task", "model", "eval", "seed"):
            assert cfg[part] == theirs[part], (name, part)
        if cfg["model"]["arch"] in BASELINES:
            continue
        ours, theirs = cfg["train"], theirs["train"]
        assert ours["lr"] == theirs["lr"] and ours["batch_size"] == theirs["batch_size"] == 32
        assert ours["steps"] > theirs["steps"] and ours["eval_every"] <= ours["steps"] // 20
        assert (ours["optimizer"], ours["loss"], ours["schedule"]) == ("muon", "posterior", "wsd")
        assert ours["cooldown_frac"] == theirs["cooldown_frac"]
        if cfg["task"]["name"] == "hmm-sticky":  # the stickiness curriculum at the same fractions of the longer run
            steps = ours["steps"]
            assert ours["curriculum"] == [
                {"until": round(0.3 * steps), "params": {"stickiness": 0.5}},
                {"until": round(0.5 * steps), "params": {"stickiness": 0.7}},
            ]
    line = protocol_text("transport")
    assert "hmm 8,000 x 32" in line and "the standard tier's picks" in line
    assert "bijection" not in line.partition("on the validation stream")[2].partition("(no transport")[2]
    with pytest.raises(ValueError, match="the transport tier trains hmm, hmm-sticky"):
        run_config("bijection", "transformer", "transport")


@pytest.mark.parametrize("tier", ["smoke", "quick", "standard", "transport", "paper"])
def test_every_architecture_of_a_task_gets_the_same_budget(tier):
    """The fair protocol: within a tier, steps x batch size is one number per task (the paper tier's published
    budgets excepted: they are the authors' own, listed as such)."""
    from windtunnel.suites.paper import (
        LR_PICKS,
        LR_RESWEEPS,
        LR_SWEEPS,
        PROTOCOL_OF,
        budget,
        lr_grid_reach,
        lr_source,
        picked_lr,
        protocol_text,
    )

    by_task: dict[str, set[tuple[int, int]]] = {}
    for r in suite(tier):
        if r.config["model"]["arch"] in BASELINES:
            continue
        t = r.config["train"]
        by_task.setdefault(r.config["task"]["name"], set()).add((t["steps"], t["batch_size"]))
        if tier in ("quick", "standard", "transport"):  # the learning rate is each architecture's own pick
            assert t["lr"] == picked_lr(r.config["task"]["name"], r.config["model"]["arch"], tier)
            # picked by a committed sweep, never a default: the tier's own, or for the transport tier (the standard
            # tier's cells, longer) the standard tier's; a tunnel that takes another's protocol, the sticky HMM,
            # takes that one's pick, and says so in protocol_text
            source = "standard" if tier == "transport" else tier
            assert lr_source(tier) == source and source in LR_SWEEPS
            task = r.config["task"]["name"]
            assert (PROTOCOL_OF.get(task, task), r.config["model"]["arch"]) in LR_PICKS[source]
            assert t["lr"] in lr_grid_reach()  # the grid, or an edge pick's extension
            # one recipe for all: the tier's (soft targets, Muon per block, warmup-stable-decay)
            assert (t["optimizer"], t["loss"], t["schedule"]) == ("muon", "posterior", "wsd")
            assert t.get("early_stop") == (None if tier == "quick" else 3)
    if tier == "paper":
        assert any(len(b) > 1 for b in by_task.values())  # published budgets differ by architecture
        return
    for task, budgets in by_task.items():
        assert len(budgets) == 1, (tier, task, budgets)
    if tier != "transport":  # the sticky column trains at the HMM's budget where the tier gives it none of its own
        assert by_task["hmm-sticky"] == by_task["hmm"]
    if tier in ("quick", "standard", "transport"):  # the picks' own recipe, where it is not the tier's, is stated
        assert "not re-swept under soft-muon" in protocol_text(tier)
    source = lr_source(tier)
    for task in LR_RESWEEPS.get(source, {}):  # a task re-swept under the tier's recipe at its budget says so
        if task not in by_task:
            continue
        steps, batch = budget(task, source)
        said = f"; {task} re-swept under soft-muon at {steps:,} x {batch}, a pick on the grid's edge"
        assert said in protocol_text(tier)


def test_deviations_are_computed_from_configs_and_name_their_source():
    paper = deviations("paper")  # built from the sourced table: what remains are forms our code cannot change
    assert paper and all(line.split(": ", 1)[0].endswith((" model", " training", " evaluation")) for line in paper)
    hmm_model = next(line for line in paper if line.startswith("hmm / transformer model: "))
    assert "form = pre-norm RMSNorm" in hmm_model and "dropout 0.1" in hmm_model and "init form = " in hmm_model
    assert "src/models/gpt_mini.py:GPTMini" in hmm_model  # its source in the authors' code
    hmm_train = next(line for line in paper if line.startswith("hmm / transformer training: "))
    assert "data = fresh sequences every step" in hmm_train and "10,000 pre-generated" in hmm_train
    assert "checkpoint = the final weights" in hmm_train and "best validation loss" in hmm_train
    assert not any(line.startswith("bijection / transformer model: ") for line in paper)  # G3's form and init, ours
    lines = deviations("quick")
    assert any(
        line.startswith("recall: ") and "N = " in line and "(64)" in line and "src/data/associative_recall.py" in line
        for line in lines
    )
    hmm_tf = next(line for line in lines if line.startswith("hmm / transformer model: "))
    assert "n_layers = 4 (9)" in hmm_tf and "pos = learned+rotary (learned)" in hmm_tf  # sizes at model defaults
    hmm_train = next(line for line in lines if line.startswith("hmm / transformer training: "))
    assert "warmup_steps = " in hmm_train and "(0)" in hmm_train and "dtype" not in hmm_train  # float32, as theirs
    assert "weight_decay = " not in hmm_train  # 0.01, as in the authors' HMM scripts
    assert all("[" in line and "]" in line for line in lines[1:])  # every departure names its source


def test_smoke_report_structure(smoke):
    out, meta = smoke
    for name in ("report.md", "report.html", "results.json", "reproduce.json"):
        assert (out / name).is_file(), name
    results = json.loads((out / "results.json").read_text())
    table = results["table1"]
    # The oracle is the exact posterior: every error metric reads 0 and recall is perfect.
    for task in ("bijection", "hmm", "regression"):
        assert table["oracle"][task]["mean"] == pytest.approx(0.0, abs=1e-6)
    assert table["oracle"]["recall"]["mean"] == pytest.approx(1.0)
    assert set(table) >= set(ARCHS) | set(BASELINES)
    md = (out / "report.md").read_text()
    assert "Table 1" in md and "Why memorisation is ruled out" in md and "Deviations" in md
    assert "| oracle |" in md
    # HMM runs say which approximate filter they are closest to; the oracle is closest to the exact one
    assert "Which filter does each model compute?" in md
    hmm_oracle = next(r for r in results["runs"] if r["name"] == "hmm-oracle")
    W = max(table_cells.tunnel("hmm", [r for r in find_runs([out / "runs"]) if r.task == "hmm"]).windows())
    assert list(hmm_oracle["approximations"]) == ["context-blind", *(f"last {w} obs" for w in range(1, W + 1))]
    which = md.split("## Which filter")[1].splitlines()
    oracle_row = next(line for line in which if line.startswith("| hmm | hmm-oracle |"))
    assert f"| exact | {W} of {W} obs (every window) |" in oracle_row
    uniform_row = next(line for line in which if line.startswith("| hmm | hmm-uniform |"))
    assert "| none: no better than context-blind | none (of" in uniform_row
    # the adversarial controls are scored beside the models, and none earns a mark
    assert "Adversarial controls" in md and "None of the controls earns ✓ or ◐" in md
    assert any(r[1] == "control: context-blind support" and r[-1].startswith("✗") for r in results["controls"])
    html = (out / "report.html").read_text()
    assert html.startswith("<!doctype html>") and "data:image/png;base64," not in html  # figures beside it
    assert "<img src='figures/calibration_bijection.png' loading='lazy'" in html
    # the filters' note is said once for the two HMM tunnels, and each tunnel's windows are in numeric order
    which_md = md.split("## Which filter")[1].split("\n## ")[0]
    assert which_md.count("HMM: 'context-blind' (uniform over the states") == 1
    for header in (line for line in which_md.splitlines() if line.startswith("| Task | Run |")):
        windows = [int(w) for w in re.findall(r"'last (\d+) obs'", header)]
        assert windows == sorted(windows) and windows, header
    assert (out / "figures" / "calibration_bijection.png").is_file()
    assert (out / "figures" / "length_generalisation_hmm.png").is_file()
    assert meta["tier"] == "smoke" and meta["deviations"]
    # the sentence under Table 1 lists exactly the cells whose level differs from the paper's number's level
    split = tables.disagreements(table)
    assert not any(s.startswith("oracle") for s in split)  # the oracle is exact everywhere
    assert (
        "Where this run and the paper's number fall on different levels: "
        + ("; ".join(split) if split else "nowhere")
        + "."
    ) in md
    assert table["oracle"]["hmm"]["level"] == "exact" and table["oracle"]["hmm"]["closest"] == "exact"
    assert "KL-nearest reference" in md and "Reference levels and scoring" in md
    # length generalisation prints each task's headline metric (accuracy for recall)
    lg = md.split("## Length generalisation")[1].split("##")[0]
    assert all("| accuracy |" in line for line in lg.splitlines() if line.startswith("| recall |"))


def test_disagreements_compare_levels_not_numbers():
    cell = {"metric": "entropy_mae_bits"}
    data = {
        "mamba": {
            "hmm": {**cell, "mean": 0.083, "level": "approximate", "paper": 0.024},
            "bijection": {**cell, "mean": 0.045, "level": "approximate", "paper": 0.010},
        },
        "lstm": {
            "recall": {"metric": "accuracy", "mean": 0.96, "level": "approximate", "paper": 0.005},
            "regression": {**cell, "mean": 1.2, "level": "fail", "paper": None},
        },
    }
    assert tables.disagreements(data) == [
        "mamba on bijection: 0.045 is approximate here; the paper's 0.010 is exact by its headline alone",
        "lstm on recall: 96.0% is approximate here; the paper's 0.5% is fail by its headline alone",
    ]


def test_rerun_skips_finished_runs(smoke):
    out, _ = smoke
    meta = reproduce("smoke", out, probe=False)
    assert all(v is not None for v in meta["run_wall_s"].values())
    assert meta["runs_reused"] == len(meta["run_wall_s"])  # every run was finished: this call's wall is not the tier's
    before = (out / "runs" / "bijection-transformer" / "metrics.jsonl").read_text()
    reproduce("smoke", out, probe=False, only={"task": "bijection"})
    assert (out / "runs" / "bijection-transformer" / "metrics.jsonl").read_text() == before
    assert "- runs_reused: " in (out / "report.md").read_text()


def test_report_cli_rebuilds_from_run_dirs(smoke, tmp_path):
    out, _ = smoke
    res = CliRunner().invoke(app, ["report", str(out / "runs"), "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "rep" / "report.md").is_file()
    res = CliRunner().invoke(app, ["report", str(tmp_path / "nothing-here"), "--out", str(tmp_path / "r2")])
    assert res.exit_code == 2 and "does not exist" in res.output


def test_a_tier_s_report_rebuilt_from_its_records_is_byte_identical(smoke, tmp_path):
    """`windtunnel report` over a tier's --out, into a folder of its own, writes the report reproduce wrote: the run
    metadata read back from the --out's reproduce.json (its cells and runs in name order) prints as the call that
    wrote it printed it. Over the runs alone there is no tier's record to read."""
    out, _ = smoke
    rebuilt = tmp_path / "rebuilt"
    res = CliRunner().invoke(app, ["report", str(out), "--out", str(rebuilt)])
    assert res.exit_code == 0, res.output
    for name in ("report.md", "results.json"):
        assert (rebuilt / name).read_bytes() == (out / name).read_bytes(), name
    assert not (rebuilt / "reproduce.json").exists()  # read where it is, not copied
    runs_only = build_report([out / "runs"], tmp_path / "runs-only")
    assert runs_only["meta"] == {} and json.loads((out / "results.json").read_text())["meta"]
    cells = list(json.loads((out / "reproduce.json").read_text())["seeds"])
    assert cells == sorted(cells) and len(cells) > 1


def test_reproduce_cli_rejects_bad_tier(tmp_path):
    res = CliRunner().invoke(app, ["reproduce", "--tier", "huge", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "--tier" in res.output and "transport" in res.output
    out = tmp_path / "t"  # a tunnel the tier does not train: refused before anything is created
    res = CliRunner().invoke(app, ["reproduce", "--tier", "transport", "--only", "task=bijection", "--out", str(out)])
    assert res.exit_code == 2 and "its tunnels: hmm, hmm-sticky" in res.output and not out.exists()


def test_build_report_on_a_single_run(smoke, tmp_path):
    out, _ = smoke
    results = build_report([out / "runs" / "hmm-oracle"], tmp_path)
    assert results["runs"][0]["arch"] == "oracle"


def test_config_cost_weighs_tokens_by_parameters_and_architecture():
    from windtunnel.executors.driver import config_cost

    runs = {r.name: r for r in suite("quick")}
    cost = {name: config_cost(r.config) for name, r in runs.items()}
    assert cost["hmm-oracle"] == 0.0
    # the 2x64 recall transformer trains many cheap tokens; the 4x128 HMM Mamba few expensive ones
    assert cost["hmm-mamba-s0"] > cost["hmm-transformer-s0"] > cost["recall-transformer-s0"] > 0


def _benchmark(name: str):
    """A script of benchmarks/ imported as a module (it is no package)."""
    import importlib
    import sys

    bench = Path(__file__).resolve().parents[1] / "benchmarks"
    sys.path.insert(0, str(bench))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(bench))


def test_a_published_tier_rebuilds_its_report_without_its_checkpoints(smoke, tmp_path):
    """benchmarks/publish_tier.py keeps every run's records (no weights), so a newer report can be built from the
    published copy alone, in place, with the same Table 1 numbers and the reproduce metadata."""
    out, _ = smoke
    publish_tier = _benchmark("publish_tier")
    dest = tmp_path / "published"
    publish_tier.publish(out, dest)
    assert not list(dest.rglob("*.safetensors")) and (dest / "runs" / "hmm-transformer" / "eval.json").is_file()
    before = json.loads((dest / "results.json").read_text())
    build_report([dest], dest, {})
    after = json.loads((dest / "results.json").read_text())
    assert sorted(after["runs"], key=lambda r: r["name"]) == sorted(before["runs"], key=lambda r: r["name"])
    assert after["meta"]["tier"] == "smoke" and "Table 1" in (dest / "report.md").read_text()
    assert after["meta"] == before["meta"]  # reproduce.json read back as its record: the metadata reproduce wrote
    recorded = json.loads((dest / "reproduce.json").read_text())
    (dest / "reproduce.json").write_text(json.dumps({**recorded, "run_wall_s": {"hmm-lstm": "slow"}}))
    with pytest.raises(CheckpointError, match=r"reproduce\.json: run_wall_s\.hmm-lstm: ") as err:
        build_report([dest], dest)  # a garbled record names its field, never a report built on it
    assert "number" in str(err.value)  # what the field must be


def test_a_cell_whose_seeds_disagree_gets_more_seeds_up_to_the_tier_s_limit():
    from windtunnel.suites import more_seeds
    from windtunnel.suites.paper import SEEDS_ON_DISAGREEMENT

    limit = SEEDS_ON_DISAGREEMENT["standard"]
    levels = {
        ("hmm", "transformer"): ["exact", "approximate", "exact"],  # disagree: seeds 3.. up to the limit
        ("hmm", "mamba"): ["fail", "fail", "fail"],  # agree: nothing more
        ("bijection", "transformer"): ["exact", "fail"] + ["exact"] * (limit - 2),  # already at the limit
    }
    extra = more_seeds("standard", levels)
    assert [r.name for r in extra] == [f"hmm-transformer-s{s}" for s in range(3, limit)]
    assert [r.config["seed"] for r in extra] == list(range(3, limit))
    assert extra[0].config == suite("standard", seeds=limit, only={"task": "hmm", "arch": "transformer"})[3].config
    assert more_seeds("smoke", levels) == []  # a tier without a limit never adds seeds
    # seeds that agree with each other but not with their pooled mark (each ✓, the interval over them ◐; or each ◐,
    # pooled ✗): more seeds, in either direction; seeds and pooled mark that agree: none
    pooled = {("hmm", "mamba"): "approximate", ("regression", "mamba"): "fail", ("recall", "mamba"): "exact"}
    agreeing = {("hmm", "mamba"): ["fail"] * 3, ("regression", "mamba"): ["approximate"] * 3}
    agreeing[("recall", "mamba")] = ["exact"] * 3
    extra = more_seeds("standard", agreeing, pooled)
    assert [r.name for r in extra] == [f"{t}-mamba-s{s}" for t in ("hmm", "regression") for s in range(3, limit)]


def test_reproduce_reads_each_seed_s_level_and_runs_the_disagreeing_cell_s_extra_seeds(tmp_path, monkeypatch):
    """Seeds of one cell that disagree on the mark (one edited to ✓) make reproduce's second pass train the next seed;
    the report then pools all of them."""
    import windtunnel.reproduce as rp
    from windtunnel.suites import paper

    out = tmp_path / "t"
    only = {"task": "bijection", "arch": "transformer"}
    reproduce("smoke", out, seeds=2, only=only, probe=False)
    runs = out / "runs"
    levels = rp.seed_levels(runs, suite("smoke", seeds=2, only=only))
    assert list(levels) == [("bijection", "transformer")] and len(levels[("bijection", "transformer")]) == 2
    cell = json.loads((out / "results.json").read_text())["table1"]["transformer"]["bijection"]
    assert rp.pooled_levels(runs, suite("smoke", seeds=2, only=only)) == {("bijection", "transformer"): cell["level"]}
    ev = json.loads((runs / "bijection-transformer-s1" / "eval.json").read_text())
    other = "exact" if ev["default"]["verdict"]["level"] != "exact" else "fail"
    ev["default"]["verdict"]["level"] = other
    (runs / "bijection-transformer-s1" / "eval.json").write_text(json.dumps(ev))
    monkeypatch.setitem(paper.SEEDS_ON_DISAGREEMENT, "smoke", 3)
    meta = reproduce("smoke", out, seeds=2, only=only, probe=False)
    assert (runs / "bijection-transformer-s2" / "done.json").is_file()
    assert meta["seeds"]["bijection-transformer"] == 3
    assert meta["added_seeds"] == {"bijection-transformer": [2]}  # what the report's claims read as added
    assert {r.seed for r in find_runs([out / "runs"])} == {0, 1, 2}


def test_a_drivers_wall_time_counts_every_pass_of_its_runs(tmp_path, monkeypatch):
    """reproduce's second pass (more seeds) adds to the wall time it reports; it never restarts the clock."""
    import importlib
    import time

    from windtunnel.executors import ExecutorOptions, launch

    launch_module = importlib.import_module("windtunnel.executors.launch")  # the package exports the function

    monkeypatch.setattr(launch_module, "execute", lambda *a, **k: time.sleep(0.2) or [])
    launcher = launch(tmp_path / "out", ExecutorOptions(jobs=1))
    assert launcher.wall_s() == 0.0
    for what in ("first pass", "second pass"):
        launcher.execute([], what, lambda _: None)
    assert launcher.wall_s() >= 0.4


def test_lr_picks_are_what_the_committed_sweeps_picked():
    """Every learning rate in `LR_PICKS` is the ★ setting of its committed sweep (docs/results/lr-sweep), a re-swept
    task's (`LR_RESWEEPS`) that of its re-sweep: no pick is typed in by hand or left behind by a re-sweep."""
    from windtunnel.store.records.drivers import SweepTableRecord
    from windtunnel.suites.paper import LR_PICKS, LR_RESWEEPS, LR_SWEEPS

    root = Path(__file__).resolve().parents[1]
    for tier, picks in LR_PICKS.items():
        for (task, arch), lr in picks.items():
            where = LR_RESWEEPS.get(tier, {}).get(task, LR_SWEEPS[tier]).split(" ")[0]
            table = SweepTableRecord.read(root / where / f"{task}-{arch}")
            assert [s.values["train.lr"] for s in table.settings if s.best] == [lr], (tier, task, arch, where)
    assert LR_RESWEEPS["standard"].keys() <= {task for task, _ in LR_PICKS["standard"]}


def test_a_pick_on_the_grids_edge_widens_the_grid_that_way_a_bounded_number_of_times():
    """`extend_grid`: a ★ on the top (bottom) edge adds one doubling (halving) past it, a ★ inside or no ★ adds
    nothing, and the widening stops `LR_EDGE_STEPS` steps out each way (`lr_grid_reach`)."""
    from windtunnel.suites.paper import LR_EDGE_STEPS, LR_GRID, extend_grid, lr_grid_reach

    grid = list(LR_GRID)
    assert extend_grid(grid, grid[-1]) == [*grid, grid[-1] * 2]
    assert extend_grid(grid, grid[0]) == [grid[0] / 2, *grid]
    assert extend_grid(grid, grid[1]) is None and extend_grid(grid, None) is None
    for edge in (-1, 0):  # keep picking the edge: it stops where the reach does
        wider, steps = list(LR_GRID), 0
        while (nxt := extend_grid(wider, wider[edge])) is not None:
            wider, steps = nxt, steps + 1
        assert steps == LR_EDGE_STEPS and wider[edge] == lr_grid_reach()[edge]
    assert len(lr_grid_reach()) == len(LR_GRID) + 2 * LR_EDGE_STEPS and sorted(lr_grid_reach()) == list(lr_grid_reach())


def test_the_lr_sweep_widens_a_cell_until_its_pick_is_inside(tmp_path, monkeypatch):
    """benchmarks/lr_sweep.py: a cell whose ★ sits on the grid's top edge is swept again, one doubling wider, in the
    same --out, until the ★ is inside (here the validation error is least at 0.008); one whose ★ is inside is swept
    once. The walls of every call are summed."""
    lr_sweep = _benchmark("lr_sweep")
    calls: list[list[float]] = []

    def fake_sweep(base, grid, out, options):
        lrs = grid["train.lr"]
        calls.append(lrs)
        best = min(lrs, key=lambda lr: abs(lr - best_lr))  # the validation error is least at best_lr
        settings = [{"values": {"train.lr": lr}, "best": lr == best} for lr in lrs]
        return {"settings": settings, "total_wall_s": 1.0}

    monkeypatch.setattr(lr_sweep, "sweep", fake_sweep)
    best_lr = 0.008
    result = lr_sweep.run_cell(("hmm", "transformer"), "standard", tmp_path)
    assert calls == [[0.001, 0.002, 0.004], [0.001, 0.002, 0.004, 0.008], [0.001, 0.002, 0.004, 0.008, 0.016]]
    assert result["total_wall_s"] == 3.0 and lr_sweep._best(result) == 0.008
    calls.clear()
    best_lr = 0.002
    lr_sweep.run_cell(("hmm", "mamba"), "standard", tmp_path)
    assert calls == [[0.001, 0.002, 0.004]]
    assert (tmp_path / "hmm-mamba" / "base.yaml").is_file()
    # the base carries no learning rate (the grid sets it), so applying a pick leaves a cell's sweep re-runnable
    base = lr_sweep.base_config("hmm", "mamba", "standard")
    assert "lr" not in base["train"]
    monkeypatch.setitem(paper.LR_PICKS["standard"], ("hmm", "mamba"), 0.004)
    assert lr_sweep.base_config("hmm", "mamba", "standard") == base
    # a cell swept before starts from the grid its last call widened to (those points are read, not trained again)
    from windtunnel.store.records.drivers import SweepConfigRecord

    wide = [0.001, 0.002, 0.004, 0.008, 0.016]
    SweepConfigRecord(config=None, overrides={}, base={}, grid={"train.lr": wide}).write(tmp_path / "hmm-transformer")
    calls.clear()
    best_lr = 0.008
    lr_sweep.run_cell(("hmm", "transformer"), "standard", tmp_path)
    assert calls == [wide]


def _probe_sections(report: Path) -> dict[str, list[str]]:
    """Each probe-figure section of a report.md (`probe_figure_kinds`' headings): its heading, image links and text."""
    from windtunnel.report.figures import probe_figure_kinds

    titles = {f"### {k.title}" for k in probe_figure_kinds()}
    sections: dict[str, list[str]] = {}
    current = None
    for line in report.read_text().splitlines():
        if line.startswith("#"):
            current = line if line in titles else None
            if current:
                sections[current] = []
        elif current and line:
            sections[current].append(line)
    return sections


def test_a_published_tier_rebuilds_its_probe_figures(tmp_path):
    """benchmarks/publish_tier.py carries each cell's probe figures (its lowest seed that has each) in the runs'
    figures/, so the report rebuilt from the published copy has the same probe-figure sections as the original."""
    import shutil

    publish_tier = _benchmark("publish_tier")
    quick = Path(__file__).resolve().parents[1] / "docs" / "results" / "quick" / "runs"
    src = tmp_path / "tier"
    for name in ("hmm-transformer-s0", "hmm-transformer-s1", "hmm-mamba-s0", "hmm-lstm"):
        shutil.copytree(quick / name, src / "runs" / name)
    s0, s1 = (src / "runs" / f"hmm-transformer-s{k}" / "figures" for k in (0, 1))
    shutil.copytree(s0, s1)
    (s0 / "key_cosines_layer0.png").unlink()  # so the report takes seed 1's, and the published copy must carry it
    build_report([src / "runs"], src, {})
    sections = _probe_sections(src / "report.md")
    assert any(
        "seed 1 (of seeds 0, 1 probed)" in line for line in sections["### Layer-0 key cosines, trained and at init"]
    )
    assert {"### Mamba state clusters", "### Value manifold", "### Attention entropy per layer"} <= set(sections)
    dest = tmp_path / "published"
    publish_tier.publish(src, dest)
    published = {p.relative_to(dest / "runs").as_posix() for p in (dest / "runs").rglob("*.png")}
    assert "hmm-transformer-s1/figures/key_cosines_layer0.png" in published
    assert not {p for p in published if p.startswith("hmm-transformer-s1/")} - {
        "hmm-transformer-s1/figures/key_cosines_layer0.png"
    }  # the other seeds' figures stay behind
    build_report([dest / "runs"], tmp_path / "rebuilt", {})
    assert _probe_sections(tmp_path / "rebuilt" / "report.md") == sections
