"""The records of a driver's --out (`records.drivers`): each round-trips byte for byte, each older format reads in
today's form, a garbled field is a CheckpointError naming the file and the field; the launcher's claim is the one
every driver goes through; `demo` is `reproduce` with its own defaults."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from cli_args import SWEEP_BASE
from windtunnel.cli import app
from windtunnel.config import config_to_json
from windtunnel.errors import CheckpointError
from windtunnel.executors import ExecutorOptions, holding, launch
from windtunnel.executors.launch import Launch
from windtunnel.reproduce import reproduce
from windtunnel.resolve import resolve_config
from windtunnel.store import manifest
from windtunnel.store.records.drivers import (
    MANIFEST,
    REPRODUCE,
    SWEEP_CONFIG,
    SWEEP_TABLE,
    TIME_TO_BAYES,
    ManifestRecord,
    ReproduceRecord,
    SweepBaseRecord,
    SweepConfigRecord,
    SweepTableRecord,
    TimeToBayesRecord,
)
from windtunnel.sweep import sweep
from windtunnel.time_to_bayes import parse_cell, run

DOCS = Path(__file__).resolve().parents[1] / "docs" / "results"
ONE_THREAD = ExecutorOptions(threads=1)
UNIFORM = {"task": "bijection", "arch": "uniform"}
CELL = "task=bijection,arch=lstm,tier=smoke,steps=4,batch_size=4,eval_every=2,eval_size=4"


def _written(data, sort_keys: bool) -> str:
    """What the drivers' dict-literal writers wrote (`rundir.write_json`)."""
    return json.dumps(data, indent=2, sort_keys=sort_keys, allow_nan=True) + "\n"


# --- round trips -------------------------------------------------------------------------------------------


def test_the_manifest_round_trips_and_writes_what_write_manifest_wrote(tmp_path):
    record = ManifestRecord.of("reproduce", {"hmm-lstm": "3f2a9c01b7de", "a=1-seed=0": "000000000000"}, tier="quick")
    record.write(tmp_path)
    runs = [{"name": "hmm-lstm", "config_hash": "3f2a9c01b7de"}, {"name": "a=1-seed=0", "config_hash": "000000000000"}]
    old = {"format": 1, "kind": "reproduce", "tier": "quick", "runs": runs}
    assert (tmp_path / MANIFEST).read_text() == _written(old, sort_keys=False)
    again = ManifestRecord.read(tmp_path)
    assert again == record and again.tier == "quick" and again.runs[0].name == "hmm-lstm" and not again.legacy
    ManifestRecord.of("sweep", {}).write(tmp_path)  # no tier: none written
    assert json.loads((tmp_path / MANIFEST).read_text()) == {"format": 1, "kind": "sweep", "runs": []}
    committed = DOCS / "quick"
    assert ManifestRecord.read(committed).to_json() == json.loads((committed / MANIFEST).read_text())


@pytest.mark.parametrize("tier", ["quick", "standard"])
def test_reproduce_json_round_trips_byte_for_byte(tmp_path, tier):
    committed = (DOCS / tier / REPRODUCE).read_text()
    record = ReproduceRecord.read(DOCS / tier)
    assert record.tier == tier and record.executor == "local" and isinstance(record.run_wall_s, dict)
    record.write(tmp_path)
    assert (tmp_path / REPRODUCE).read_text() == committed
    assert list(record.to_json()) == [k for k in ReproduceRecord.model_fields if k in json.loads(committed)]


def test_reproduce_json_keeps_the_key_order_the_report_writes_into_results_json():
    """build_report copies reproduce's meta into results.json unsorted: the record gives the writer's order."""
    meta = {
        "tier": "smoke",
        "machine": "cpu",
        "device": "cpu",
        "torch": "2",
        "python": "3",
        "seeds": {"hmm-lstm": 1},
        "jobs": 1,
        "executor": "local",
        "run_devices": "cpu (1 run)",
        "run_hosts": ["h"],
        "threads": 1,
        "total_wall_s": 1.5,
        "runs_reused": 0,
        "run_wall_s": {"hmm-lstm": 1.2, "hmm-uniform": None, "int": 3},
        "command": "windtunnel reproduce --tier smoke",
        "deviations": ["d"],
    }
    dumped = ReproduceRecord(**meta).to_json()
    assert json.dumps(dumped) == json.dumps(meta)  # order, ints and floats as given


@pytest.mark.parametrize("tier", ["quick", "standard"])
def test_the_report_meta_is_reproduce_json_with_the_summed_run_walls(tier):
    """results.json's meta, as the committed tiers' reports wrote it from reproduce's record (reproduce.json holds
    it with sorted keys: a cell's seeds read back in another order)."""
    meta = json.loads((DOCS / tier / "results.json").read_text())["meta"]
    record = ReproduceRecord.read(DOCS / tier)
    assert record.report_json() == meta and list(record.report_json()) == list(meta)
    assert record.sum_run_wall_s == round(sum(v or 0.0 for v in record.run_wall_s.values()), 1) > 0
    assert (
        ReproduceRecord(tier="smoke").sum_run_wall_s is None
        and "sum_run_wall_s" not in ReproduceRecord(tier="smoke").report_json()
    )


def test_the_sweep_records_round_trip(tmp_path):
    record = SweepConfigRecord(config=None, overrides={"eval.n": 32}, base=SWEEP_BASE, grid={"seed": (0, 1)})
    record.write(tmp_path)
    old = {"config": None, "overrides": {"eval.n": 32}, "base": SWEEP_BASE, "grid": {"seed": [0, 1]}}
    assert (tmp_path / SWEEP_CONFIG).read_text() == _written(old, sort_keys=False)
    assert SweepConfigRecord.read(tmp_path) == record and record.grid == {"seed": [0, 1]}
    SweepBaseRecord(SWEEP_BASE).write(tmp_path)
    assert SweepBaseRecord.load(tmp_path / "sweep-base.json").root == SWEEP_BASE
    assert (tmp_path / "sweep-base.json").read_text() == _written(SWEEP_BASE, sort_keys=False)


def test_time_to_bayes_json_round_trips_byte_for_byte(tmp_path):
    committed = DOCS / "time-to-bayes-levers"
    record = TimeToBayesRecord.read(committed)
    assert record.cells[0].key is not None and record.cells[0].machine["torch"]
    record.write(tmp_path)
    assert (tmp_path / TIME_TO_BAYES).read_text() == (committed / TIME_TO_BAYES).read_text()
    seeds = [{"curve": [{"train_s": 1.0, "entropy_mae_bits": math.nan}], "train_s": None, "dtype": "float32"}]
    cell = {"key": "k", "cell": {"task": "hmm", "set": {}}, "label": "l", "metric": "m", "marks": {}, "test": None}
    data = {"machine": {"jobs": 1}, "wall_s": 2.5, "cells": [{**cell, "machine": {"jobs": 1}, "seeds": seeds}]}
    TimeToBayesRecord.model_validate(data).write(tmp_path)
    assert (tmp_path / TIME_TO_BAYES).read_text() == _written(data, sort_keys=True)  # NaN, null and no recipe kept


# --- older formats ---------------------------------------------------------------------------------------------


def test_an_out_written_before_manifests_reads_as_its_drivers(tmp_path):
    assert ManifestRecord.find(tmp_path) is None
    (tmp_path / SWEEP_CONFIG).write_text("{}")
    found = ManifestRecord.find(tmp_path)
    assert (found.kind, found.source, found.legacy, found.runs, found.tier) == ("sweep", SWEEP_CONFIG, True, [], None)
    assert manifest.out_kind(tmp_path) == ("sweep", SWEEP_CONFIG)


def test_every_committed_sweep_table_reads_as_its_record():
    """sweep.json as every committed sweep wrote it, the lr sweeps' older form (no `pick` on a setting) included: it
    reads as its record, the pick None where the file has none."""
    tables = sorted((Path(__file__).resolve().parents[1] / "docs" / "results").rglob(SWEEP_TABLE))
    assert len(tables) >= 40
    for path in tables:
        record = SweepTableRecord.load(path)
        raw = json.loads(path.read_text())["settings"]
        assert [s.pick for s in record.settings] == [s.get("pick") for s in raw]
        assert sum(s.best for s in record.settings) == 1


def test_the_first_reproduce_json_upgrades(tmp_path):
    """reproduce.json as the first release wrote it: seeds one count for every cell, no executor (local), threads,
    devices or runs reused."""
    first = {
        "tier": "quick",
        "machine": "cpu",
        "device": "cpu",
        "torch": "2.4",
        "python": "3.10",
        "seeds": 3,
        "jobs": 2,
        "total_wall_s": 10.0,
        "run_wall_s": {"hmm-lstm": 4.0},
        "command": "windtunnel reproduce --tier quick --out runs --seeds 3 --jobs 2",
        "deviations": [],
    }
    (tmp_path / REPRODUCE).write_text(json.dumps(first))
    record = ReproduceRecord.read(tmp_path)
    assert record.seeds == 3 and record.executor == "local" and record.threads is None and record.runs_reused is None
    assert record.to_json() == {**first, "executor": "local"}  # nothing it never had, but its executor
    found = ManifestRecord.find(tmp_path)  # an --out of before manifests: the tier from its reproduce.json
    assert (found.kind, found.tier, found.source, found.legacy) == ("reproduce", "quick", REPRODUCE, True)


def test_time_to_bayes_cells_written_before_keys_and_machines_upgrade():
    committed = DOCS / "time-to-bayes"
    raw = json.loads((committed / TIME_TO_BAYES).read_text())
    assert all("key" not in c and "machine" not in c for c in raw["cells"])
    record = TimeToBayesRecord.read(committed)
    assert all(c.key is None and c.machine == raw["machine"] for c in record.cells)  # each ran on the file's
    first, second = record.cells[0], record.cells[1]
    assert first.same_setting(first.model_copy()) and not first.same_setting(second)  # by the request
    assert all("key" not in c and c["machine"] == raw["machine"] for c in record.to_json()["cells"])


# --- garbled files -------------------------------------------------------------------------------------------

RUNS = [{"name": "a", "config_hash": "x"}]
TTB_CELL = {"cell": {"task": "hmm"}, "label": "l", "metric": "m", "marks": {}, "seeds": [{}]}


def _entry(name, config_hash):
    """A manifest of one run."""
    return {"kind": "sweep", "runs": [{"name": name, "config_hash": config_hash}]}


def _cell(**over):
    """time_to_bayes.json of one cell."""
    return {"machine": {}, "cells": [{**TTB_CELL, **over}]}


@pytest.mark.parametrize(
    ("name", "data", "where"),
    [
        (MANIFEST, {"kind": "nope", "runs": RUNS}, "kind: expected 'reproduce', 'sweep' or 'time-to-bayes', got"),
        (MANIFEST, {"kind": "sweep"}, "runs: expected a value, got nothing (the key is missing)"),
        (MANIFEST, _entry("..", "x"), "runs[0].name: expected a run directory name, got a string of 2 characters"),
        (MANIFEST, _entry("a", 5), "runs[0].config_hash: expected a string, got 5"),
        (REPRODUCE, {"tier": 5}, "tier: expected a string, got 5"),
        (
            REPRODUCE,
            {"tier": "quick", "run_wall_s": {"a": "x"}},
            "run_wall_s.a: expected a number, got a string of 1 character",
        ),
        (
            REPRODUCE,
            {"tier": "quick", "seeds": {"a": "x"}},
            "seeds.a: expected an integer, got a string of 1 character",
        ),  # no union tag
        (SWEEP_CONFIG, {"grid": 5}, "grid: expected a JSON object, got 5"),
        (SWEEP_CONFIG, {"config": 7}, "config: expected a string, got 7"),
        (TIME_TO_BAYES, {"cells": []}, "machine: expected a value, got nothing (the key is missing)"),
        (
            TIME_TO_BAYES,
            {"machine": {}, "wall_s": "x", "cells": []},
            "wall_s: expected a number, got a string of 1 character",
        ),
        (TIME_TO_BAYES, _cell(cell={"task": 3}), "cells[0].cell.task: expected a string, got 3"),
        (TIME_TO_BAYES, _cell(seeds=[]), "cells[0].seeds: expected 1 or more items, got a list of 0 items"),
        (TIME_TO_BAYES, _cell(label=True), "cells[0].label: expected a string, got True"),
    ],
)
def test_a_garbled_field_names_the_file_and_the_field(tmp_path, name, data, where):
    record = {MANIFEST: ManifestRecord, REPRODUCE: ReproduceRecord, SWEEP_CONFIG: SweepConfigRecord}.get(
        name, TimeToBayesRecord
    )
    (tmp_path / name).write_text(json.dumps(data))
    with pytest.raises(CheckpointError) as err:
        record.read(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / name}: {where}"), str(err.value)


@pytest.mark.parametrize("record", [ManifestRecord, ReproduceRecord, SweepConfigRecord, TimeToBayesRecord])
def test_a_garbled_file_names_it(tmp_path, record):
    (tmp_path / record.NAME).write_text("[1, 2")
    with pytest.raises(CheckpointError, match=rf"^{tmp_path / record.NAME} is corrupted or truncated"):
        record.find(tmp_path)


# --- the launcher's claim ------------------------------------------------------------------------------------

DRIVERS = {
    "reproduce": lambda out: reproduce("smoke", out, only=UNIFORM, probe=False, options=ONE_THREAD),
    "sweep": lambda out: sweep(SWEEP_BASE, {"seed": [0]}, out, ONE_THREAD),
    "time-to-bayes": lambda out: run([parse_cell(CELL)], out, ONE_THREAD, echo=str),
}


class _Claimed(Exception):
    pass


@pytest.mark.parametrize("kind", list(DRIVERS))
def test_every_driver_claims_its_out_through_the_launcher(tmp_path, monkeypatch, kind):
    """Each driver holds --out and claims it with `Launch.claim`, under its own kind, before any run starts."""
    claims = []

    def claim(self, wanted, echo, *, fresh=False, needs=(), **fields):
        claims.append((self.kind, sorted(wanted), fields))
        raise _Claimed

    monkeypatch.setattr(Launch, "claim", claim)
    with pytest.raises(_Claimed):
        DRIVERS[kind](tmp_path / "out")
    ((claimed_kind, wanted, fields),) = claims
    assert claimed_kind == kind and wanted and fields == ({"tier": "smoke"} if kind == "reproduce" else {})
    assert not (tmp_path / "out" / manifest.RUNS).exists()


@pytest.mark.parametrize("kind", list(DRIVERS))
def test_every_driver_refuses_another_drivers_out_with_one_message(tmp_path, monkeypatch, kind):
    """The launcher refuses an --out of another kind for every driver, in one message, before anything is made."""
    refused = []
    refuse = manifest.refuse_other_kind

    def spy(out, asked):
        refused.append(asked)
        return refuse(out, asked)

    monkeypatch.setattr(manifest, "refuse_other_kind", spy)
    other = next(k for k in DRIVERS if k != kind)
    out = tmp_path / "out"
    manifest.write_manifest(out, other, {})
    before = (out / MANIFEST).read_bytes()
    message = f"--out: {str(out)!r} holds the runs of a {other} (manifest.json); a {kind} writes an --out of its own"
    with pytest.raises(ValueError, match="^" + re.escape(message + ": use another") + "$"):
        DRIVERS[kind](out)
    assert refused == [kind] and (out / MANIFEST).read_bytes() == before and not (out / manifest.RUNS).exists()
    with holding(out):  # the refusal let go of --out's lock
        pass


def _finished_run(out: Path, name: str, config: str) -> None:
    run_dir = out / manifest.RUNS / name
    run_dir.mkdir(parents=True)
    for file, text in (("config.json", config), ("done.json", "{}"), ("eval.json", "{}")):
        (run_dir / file).write_text(text)


def test_the_claim_writes_the_manifest_at_once_and_record_adds_the_finished_runs(tmp_path):
    out = tmp_path / "out"
    _finished_run(out, "kept", '{"a": 1}')
    _finished_run(out, "new", '{"a": 2}')
    manifest.write_manifest(out, "time-to-bayes", {"kept": manifest.stored_hash(out / "runs" / "kept"), "gone": "0"})
    with pytest.raises(RuntimeError, match="inside `with launch"):
        launch(out, ONE_THREAD, "time-to-bayes").claim({}, print)
    with launch(out, ONE_THREAD, "time-to-bayes") as launcher:
        assert [e.name for e in launcher.found.runs] == ["kept", "gone"]
        plan = launcher.claim({}, print)
        assert [e.name for e in plan.kept] == ["kept"]  # the entry whose run is gone is dropped
        assert [e.name for e in ManifestRecord.read(out).runs] == ["kept"]
        launcher.record(["new", "unfinished"])
        assert [e.name for e in ManifestRecord.read(out).runs] == ["kept", "new"]
        launcher.record(["new"], keep=False)  # a sweep's: its own points alone
        assert [e.name for e in ManifestRecord.read(out).runs] == ["new"]


def test_the_claim_plans_what_is_reused_resumed_and_trained(tmp_path):
    """The store's plan of a claim: a finished run is reused (only with every file the driver needs), a run
    directory with work left is resumed, a new name is trained; `todo` keeps the order asked."""
    out = tmp_path / "out"
    cfgs = {
        n: resolve_config({"task": {"name": "bijection"}, "model": {"arch": "uniform"}, "seed": s})
        for s, n in enumerate("abcd")
    }
    for name in "ab":
        _finished_run(out, name, config_to_json(cfgs[name]))
    (out / manifest.RUNS / "b" / "geometry.json").write_text("{}")
    (out / manifest.RUNS / "c").mkdir()
    (out / manifest.RUNS / "c" / "config.json").write_text(config_to_json(cfgs["c"]))
    with launch(out, ONE_THREAD, "time-to-bayes") as launcher:
        plan = launcher.claim(cfgs, print)
        assert (plan.reuse, plan.resume, plan.train, plan.todo) == (("a", "b"), ("c",), ("d",), ("c", "d"))
        probed = launcher.claim(cfgs, print, needs=("geometry.json",))
        assert (probed.reuse, probed.resume, probed.todo) == (("b",), ("a", "c"), ("a", "c", "d"))
        assert launcher.finished(["d", "b", "a"]) == ["b", "a"]


def test_a_reproduce_claim_records_its_tier(tmp_path):
    out = tmp_path / "out"
    with launch(out, ONE_THREAD, "reproduce") as launcher:
        launcher.claim({}, print, tier="smoke")
    assert ManifestRecord.read(out).tier == "smoke"
    with pytest.raises(ValueError, match=r"smoke tier's runs") as err:
        reproduce("quick", out, only=UNIFORM, probe=False, options=ONE_THREAD)
    assert "--out" in str(err.value)  # the option to change


# --- demo is reproduce --------------------------------------------------------------------------------------


def test_demo_takes_every_option_of_reproduce_with_its_own_defaults():
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    reproduce_params = {p.name: p for p in commands["reproduce"].params}
    demo_params = {p.name: p for p in commands["demo"].params}
    assert list(demo_params) == list(reproduce_params)
    for name, p in reproduce_params.items():
        d = demo_params[name]
        kind = ("opts", "secondary_opts", "help", "multiple", "is_flag", "metavar")
        assert [getattr(d, k) for k in kind] == [getattr(p, k) for k in kind], name
        assert d.type_descriptor.annotation == p.type_descriptor.annotation, name
        assert d.default == (2 if name == "jobs" else p.default), name
    assert demo_params["tier"].default == "quick" and demo_params["out"].default is None  # runs/paper-quick
    shown = CliRunner().invoke(app, ["demo", "--help"], terminal_width=200)
    assert shown.exit_code == 0
    for p in reproduce_params.values():
        assert all(opt in shown.output for opt in p.opts), p.opts
