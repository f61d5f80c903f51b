"""The run-directory records (`windtunnel.store.records.run_dir`): each writes what the dict-literal writers wrote,
byte for byte, and reads it back as it was; each reads the older forms released versions wrote in today's form; a
garbled file or a field of the wrong kind is a CheckpointError naming the file and the field; and no other module
reads or writes these files by hand."""

from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from windtunnel.config import build_config, config_to_json
from windtunnel.errors import CheckpointError
from windtunnel.resolve import resolve_config
from windtunnel.runs import resume
from windtunnel.store import rundir
from windtunnel.store.records.run_dir import (
    ConfigFile,
    Done,
    EvalFile,
    Geometry,
    Resume,
    Resumes,
    StoredConfig,
    Trained,
    Versions,
    code_versions,
    version_diff,
)

SRC = Path(__file__).resolve().parents[1] / "src" / "windtunnel"


def _old_writer(obj: Any) -> bytes:
    """What `rundir.write_json(path, obj)`, every dict-literal writer of these files, wrote."""
    return (json.dumps(obj, indent=2, sort_keys=True, allow_nan=True) + "\n").encode()


@pytest.fixture(scope="module")
def cfg():
    return resolve_config(build_config(overrides={"model.preset": "smoke"}))


def _entry(**over: Any) -> dict[str, Any]:
    """An eval.json entry as `evaluate` writes it."""
    ci = {"mean": 0.25, "lo": 0.125, "hi": 0.5}
    entry = {
        "step": 6,
        "arch": "transformer",
        "batch_size": 250,
        "n": 64,
        "stream": "test",
        "task_params": {"L": 5, "V": 6},
        "metrics": {"entropy_mae_bits": ci, "accuracy": None, "kl_bits": {**ci, "mean": math.nan}},
        "per_position": {"model_entropy_bits": [1.5, math.nan], "accuracy": None},
        "approximations": {"last 1 obs": {"kl_from_model_bits": 0.1, "entropy_mae_bits": 0.2, "depth": 1}},
        "verdict": {"level": "exact", "closest": None},
        "run": {"status": "finished", "steps": 6, "steps_trained": 6, "sequences_seen": 48, "notes": []},
    }
    return {**entry, **over}


# --- round trips: the bytes of the old writers, read back as written ------------------------------------------------


def test_done_writes_what_run_job_wrote_and_reads_it_back(tmp_path):
    info = {"wall_s": 8.8, "probe": "done", "device": "cpu", "host": "vm", "pid": 5194, "resumed_from": 0}
    Done(**info).write(tmp_path)
    assert (tmp_path / rundir.DONE).read_bytes() == _old_writer(info)
    done = Done.read(tmp_path)
    assert done.wall_s == 8.8 and done.pid == 5194 and done.to_json() == info and done == Done(**info)


def test_versions_write_this_process_code_and_read_it_back(tmp_path):
    Versions.current().write(tmp_path)
    assert (tmp_path / rundir.VERSIONS).read_bytes() == _old_writer(code_versions())
    assert Versions.read(tmp_path) == Versions.current() and version_diff(tmp_path) == []


def test_trained_writes_config_optimizer_and_exported_as_before(tmp_path, cfg):
    optimizer = {"adamw": {"decay": ["blocks.0.w"], "no_decay": ["embed.tok.weight"]}}
    exported = {"by": "windtunnel.save_run", "model": "m.Net", "steps": None}
    resume.write_trained(tmp_path, cfg, optimizer, exported)
    old = {"config": json.loads(config_to_json(cfg)), "optimizer": optimizer, "exported": exported}
    assert (tmp_path / rundir.TRAINED).read_bytes() == _old_writer(old)
    trained = Trained.read(tmp_path)
    assert trained.config == cfg and trained.optimizer == optimizer and trained.exported is not None
    assert trained.exported.model == "m.Net" and trained.exported.steps is None and trained.to_json() == old
    resume.write_trained(tmp_path, cfg)  # a run windtunnel trains: no "exported" key at all
    assert (tmp_path / rundir.TRAINED).read_bytes() == _old_writer({"config": old["config"], "optimizer": None})
    assert resume.read_trained(tmp_path) == cfg and resume.read_exported(tmp_path) is None


def test_resumes_append_as_before(tmp_path):
    Resumes.record(tmp_path, Resume(step=4, changed=["train.steps: 8 → 12"], note=None))
    Resumes.record(tmp_path, Resume(step=12, changed=["eval.n: 64 → 128"], note="a schedule note"))
    old = {
        "resumes": [
            {"step": 4, "changed": ["train.steps: 8 → 12"], "note": None},
            {"step": 12, "changed": ["eval.n: 64 → 128"], "note": "a schedule note"},
        ]
    }
    assert (tmp_path / rundir.RESUMES).read_bytes() == _old_writer(old)
    assert [(r.step, r.note) for r in Resumes.history(tmp_path)] == [(4, None), (12, "a schedule note")]


def test_eval_merge_writes_eval_json_and_extra_files_as_before_and_reads_them_back(tmp_path):
    (tmp_path / rundir.EVAL).write_bytes(_old_writer({"L=5": _entry(n=64)}))
    results = {"default": _entry(), "K=50": _entry(extra="K=50,eval.n=8", n=8)}
    EvalFile.merge(tmp_path, results)
    assert (tmp_path / rundir.EVAL).read_bytes() == _old_writer({"L=5": _entry(n=64), "default": _entry()})
    extra = rundir.eval_file(tmp_path, "K=50,eval.n=8")
    assert extra.read_bytes() == _old_writer({"K=50": results["K=50"]})
    recorded = EvalFile.read(tmp_path)
    default = recorded.entries["default"]
    assert default.n == 64 and default.run is not None and default.run.status == "finished"
    assert default.metrics["accuracy"] is None and default.metrics["entropy_mae_bits"] is not None
    assert default.metrics["entropy_mae_bits"].mean == 0.25 and math.isnan(default.metrics["kl_bits"].mean)
    assert EvalFile.read(tmp_path, "K=50,eval.n=8").entries["K=50"].extra == "K=50,eval.n=8"
    # read and written back: the same bytes
    before = (tmp_path / rundir.EVAL).read_bytes()
    recorded.write(tmp_path)
    assert (tmp_path / rundir.EVAL).read_bytes() == before


def test_geometry_writes_plain_json_of_the_probe_results_and_reads_them_back(tmp_path):
    class Number:  # e.g. a numpy number: written as a plain float
        def __float__(self) -> float:
            return 0.5

    results = {
        "run_dir": ".",
        "arch": "transformer",
        "task": "bijection",
        "step": 6,
        "seed": 0,
        "init_source": "checkpoint 0",
        "n_sequences": 256,
        "entropy_error_bits": Number(),
        "heldout_seed": "seeds.test_seed(2**29 + 0) (probes)",
        "keys": {"cos": [0.1, math.nan], "not_a_number": "x"},
        "memory": {"not_applicable": "no observation positions"},
        "figures": ["figures/key_cosines.png"],
    }
    Geometry.from_results(results, tmp_path).write(tmp_path)
    assert (tmp_path / rundir.GEOMETRY).read_bytes() == _old_writer(json.loads(json.dumps(results, default=float)))
    g = Geometry.read(tmp_path)
    assert g.step == 6 and g.figures == ["figures/key_cosines.png"] and set(g.probes) == {"keys", "memory"}
    assert g.probes["keys"]["not_a_number"] == "x"  # a probe's own payload is its own


def test_config_writes_config_to_json_and_reads_it_back(tmp_path, cfg):
    ConfigFile.write(tmp_path, cfg)
    assert (tmp_path / rundir.CONFIG).read_text() == config_to_json(cfg)
    assert ConfigFile.read(tmp_path) == cfg
    stored = ConfigFile.stored(tmp_path)
    assert stored.task.name == cfg.task.name and stored.model.arch == cfg.model.arch
    assert stored.train.steps == cfg.train.steps and stored.to_json() == json.loads(config_to_json(cfg))


def test_the_run_directory_layer_is_storage_only():
    """rundir holds paths, atomic writes and checked reads; what a file means (and its upgrades) is the records'."""
    assert not hasattr(rundir, "read_config") and not hasattr(rundir, "version_diff")
    source = (Path(rundir.__file__)).read_text()
    assert "windtunnel.resolve" not in source and "import torch" not in source


# --- older forms, as the old writers wrote them, read in today's form ----------------------------------------------


def test_a_done_json_of_reproduce_before_the_executors_reads_with_the_newer_fields_none(tmp_path):
    (tmp_path / rundir.DONE).write_bytes(_old_writer({"wall_s": 3.2, "probe": "geometry probes not installed"}))
    done = Done.read(tmp_path)
    assert (done.wall_s, done.probe) == (3.2, "geometry probes not installed")
    assert (done.device, done.host, done.pid, done.resumed_from) == (None, None, None, None)


def test_a_run_before_versions_json_has_no_versions_and_no_difference(tmp_path):
    assert Versions.find(tmp_path) is None and version_diff(tmp_path) == []


def test_a_trained_json_before_optimizer_and_exported_and_before_init_reads_in_todays_form(tmp_path):
    """Written before Muon per block (no optimizer), before save_run (no exported) and before size.init: the
    paper Mamba trained with "normal" init, which is not today's default for it."""
    cfg = resolve_config(
        build_config(overrides={"model.arch": "mamba", "model.preset": "smoke", "model.variant": "paper"})
    )
    old = json.loads(config_to_json(cfg))
    del old["model"]["size"]["init"]
    (tmp_path / rundir.TRAINED).write_bytes(_old_writer({"config": old}))
    trained = Trained.read(tmp_path)
    assert trained.optimizer is None and trained.exported is None
    assert trained.config.model.size["init"] == "normal" and cfg.model.size["init"] == "torch"
    (tmp_path / rundir.CONFIG).write_bytes(_old_writer(old))
    assert ConfigFile.read(tmp_path).model.size["init"] == "normal"
    assert StoredConfig.read(tmp_path).model.model_extra["size"]["init"] == "normal"  # the report's view too


def test_a_config_json_with_the_retired_explicit_alias_reads_as_its_attention(tmp_path, cfg):
    old = json.loads(config_to_json(cfg))
    old["model"]["size"]["explicit"] = True
    (tmp_path / rundir.CONFIG).write_bytes(_old_writer(old))
    size = ConfigFile.read(tmp_path).model.size
    assert "explicit" not in size and size["attention"] == "explicit"


def test_a_run_before_trained_json_and_resumes_json_has_neither(tmp_path):
    assert Trained.find(tmp_path) is None and resume.read_trained(tmp_path) is None
    assert Resumes.history(tmp_path) == []


def test_an_eval_json_before_run_records_reads_with_run_and_batch_size_none(tmp_path):
    """Written before trained.json existed: no "run" record (the report reads it from the step and the config), no
    batch_size."""
    old = {k: v for k, v in _entry().items() if k not in ("run", "batch_size")}
    (tmp_path / rundir.EVAL).write_bytes(_old_writer({"default": old}))
    default = EvalFile.read(tmp_path).entries["default"]
    assert default.run is None and default.batch_size is None and default.n == 64


def test_an_eval_json_entry_at_another_n_is_set_apart(tmp_path):
    """Once, `windtunnel eval --n 8` merged its evaluation into eval.json beside the recorded one."""
    (tmp_path / rundir.EVAL).write_bytes(_old_writer({"default": _entry(n=8), "L=5": _entry(n=16), "K=9": _entry()}))
    assert EvalFile.read(tmp_path).set_apart() == {"L=5", "K=9"}


def test_a_geometry_json_before_seed_and_init_source_reads_with_them_none(tmp_path):
    """geometry.json of the first probes: the run as the path given, no seed, no init_source."""
    old = {
        "run_dir": "/home/someone/runs/bijection-transformer",
        "arch": "transformer",
        "task": "bijection",
        "step": 400,
        "n_sequences": 256,
        "entropy_error_bits": 0.01,
        "heldout_seed": "10**9 + 0 (probes), + 2 (ablations)",
        "keys": {"orthogonality": 0.9},
    }
    (tmp_path / rundir.GEOMETRY).write_bytes(_old_writer(old))
    g = Geometry.read(tmp_path)
    assert g.seed is None and g.init_source is None and g.figures is None and g.probes == {"keys": old["keys"]}
    assert g.to_json() == old


# --- garbled files and fields of the wrong kind ------------------------------------------------------------------

GARBLED = {  # id -> (record, file, contents, what the error says after the file)
    "done-wall": (Done, rundir.DONE, {"wall_s": "x"}, "wall_s: expected a finite number, got a string of 1 character"),
    "done-pid": (Done, rundir.DONE, {"pid": 1.5}, "pid: expected an integer, got 1.5"),
    "versions-torch": (Versions, rundir.VERSIONS, {"windtunnel": "0.1.0", "torch": 2}, "torch: expected a string"),
    "versions-missing": (Versions, rundir.VERSIONS, {"torch": "2"}, "windtunnel: expected a string, got nothing"),
    "trained-config": (
        Trained,
        rundir.TRAINED,
        {"config": [1]},
        "config: expected a JSON object, got a list of 1 item",
    ),
    "trained-steps": (Trained, rundir.TRAINED, {"config": {}, "exported": {"steps": -1}}, "exported.steps: expected"),
    "trained-lr": (Trained, rundir.TRAINED, {"config": {"train": {"lr": "x"}}}, "config: train.lr: "),
    "resumes-list": (Resumes, rundir.RESUMES, {"resumes": 3}, "resumes: expected a list, got 3"),
    "resumes-step": (Resumes, rundir.RESUMES, {"resumes": [{"step": "4", "changed": []}]}, "resumes[0].step: expected"),
    "resumes-changed": (Resumes, rundir.RESUMES, {"resumes": [{"step": 4, "changed": [1]}]}, "resumes[0].changed[0]"),
    "eval-entry": (
        EvalFile,
        rundir.EVAL,
        {"default": "x"},
        "default: expected a JSON object, got a string of 1 character",
    ),
    "eval-mean": (
        EvalFile,
        rundir.EVAL,
        {"default": {"metrics": {"kl_bits": {"mean": None, "lo": 0, "hi": 1}}}},
        "default.metrics.kl_bits.mean: expected a number, got None",
    ),
    "eval-status": (EvalFile, rundir.EVAL, {"default": _entry(run={"status": "done"})}, "default.run.status: "),
    "eval-note": (
        EvalFile,
        rundir.EVAL,
        {"default": _entry(run={**_entry()["run"], "notes": ["a", 3]})},
        "default.run.notes[1]: expected a string, got 3",
    ),
    "eval-extra": (EvalFile, rundir.EVAL, {"default": _entry(extra="n=8")}, "default.extra: an evaluation at other"),
    "geometry-step": (Geometry, rundir.GEOMETRY, {"step": -1}, "step: expected an integer >= 0, got -1"),
    "geometry-probe": (
        Geometry,
        rundir.GEOMETRY,
        {"keys": [0.1]},
        "keys: expected a JSON object, got a list of 1 item",
    ),
    "config-task": (StoredConfig, rundir.CONFIG, {"model": {"arch": "lstm"}}, "task: expected a JSON object, got no"),
    "config-arch": (StoredConfig, rundir.CONFIG, {"task": {"name": "x"}, "model": {"arch": 3}}, "model.arch: expected"),
}


@pytest.mark.parametrize("case", list(GARBLED))
def test_a_field_of_the_wrong_kind_is_a_checkpoint_error_naming_the_file_and_the_field(tmp_path, case):
    record, name, contents, says = GARBLED[case]
    (tmp_path / name).write_text(json.dumps(contents))
    with pytest.raises(CheckpointError) as err:
        record.read(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / name}: {says}") and "\n" not in str(err.value)


@pytest.mark.parametrize("record", [Done, Versions, Trained, Resumes, EvalFile, Geometry, StoredConfig])
@pytest.mark.parametrize(("text", "says"), [("{]", "is corrupted or truncated"), ("[1]", "expected a JSON object")])
def test_a_garbled_file_is_a_checkpoint_error_naming_it(tmp_path, record, text, says):
    (tmp_path / record.NAME).write_text(text)
    with pytest.raises(CheckpointError, match=re.escape(str(tmp_path / record.NAME)) + f".*{says}"):
        record.read(tmp_path)


def test_a_garbled_config_json_is_a_checkpoint_error_naming_the_field(tmp_path, cfg):
    data = json.loads(config_to_json(cfg))
    data["train"]["steps"] = "many"
    (tmp_path / rundir.CONFIG).write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match=re.escape(f"{tmp_path / rundir.CONFIG}: train.steps: ")):
        ConfigFile.read(tmp_path)


# --- the records are the only readers and writers of these files ---------------------------------------------------

# A file-name constant of a run directory's records (or the file's own name in quotes) ...
_NAMES = re.compile(
    r"\b(DONE|VERSIONS|TRAINED|RESUMES|GEOMETRY|EVAL)\b|[\"'](done|versions|trained|resumes|geometry|eval)\.json"
)
# ... in the same function as a read or write of a file's contents.
_IO = re.compile(
    r"\b(read_json|read_json_object|write_json|atomic_write|read_regular|open_regular|open|read_text|write_text|"
    r"read_bytes|write_bytes|json\.loads?|json\.dumps?)\("
)
OWNER = SRC / "records" / "run_dir.py"
# rundir.py's copy of version_diff, kept for manifest.py's import until it imports records.run_dir's (see rundir.py)
LEGACY = {("rundir.py", "version_diff")}


def _by_hand(source: str) -> list[str]:
    """The functions of `source` that name one of the records' files and read or write a file (docstrings aside)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            text = "\n".join(ast.unparse(stmt) for stmt in body)
            if _NAMES.search(text) and _IO.search(text):
                found.append(node.name)
    return found


def test_only_the_records_read_or_write_the_run_directory_files():
    offenders = [
        f"{path.relative_to(SRC)}: {name}"
        for path in sorted(SRC.rglob("*.py"))
        if path != OWNER
        for name in _by_hand(path.read_text())
        if (path.name, name) not in LEGACY or path.parent != SRC
    ]
    assert offenders == [], "read or write these files through windtunnel.store.records.run_dir"


def test_the_scan_finds_a_file_read_by_hand():
    assert _by_hand("def f(run_dir):\n    return rundir.read_json_object(run_dir / rundir.DONE)\n") == ["f"]
    old_resume = "def g(run_dir):\n    path = run_dir / TRAINED\n    return rundir.read_json_object(path)\n"
    assert _by_hand(old_resume) == ["g"]
    assert _by_hand("def h(p):\n    write_json(p / 'geometry.json', {})\n") == ["h"]
    documented = 'def k(run_dir):\n    """Reads eval.json (`EvalFile`)."""\n    return EvalFile.read(run_dir)\n'
    assert _by_hand(documented) == []
