"""The Ray executor on a real multi-node cluster on this machine: a head and a worker node, each a `ray start --block`
subprocess, stopped by their PIDs (never `ray stop`, which would end every Ray process on the machine).

The nodes listen on 127.0.0.1 only (executors/ray_local.py). Same seeds and threads => the same eval.json on Ray as on
the local executor; a worker killed mid-training is retried
and resumes from its checkpoint to the numbers of an uninterrupted run; a node that cannot see --out fails at once.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from windtunnel import checkpoints, rundir
from windtunnel.errors import StorageError
from windtunnel.executors import Job, LocalExecutor, make_executor, run_job, write_storage_token
from windtunnel.executors.ray_local import LocalCluster
from windtunnel.lock import read_owner
from windtunnel.reproduce import reproduce
from windtunnel.suites import suite


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A two-node Ray cluster (head + one worker node, one CPU each) on this machine."""
    saved = os.environ.get("RAY_DISABLE_USAGE_STATS")
    os.environ["RAY_DISABLE_USAGE_STATS"] = "1"
    try:
        with LocalCluster(nodes=2, cpus=1, log_dir=tmp_path_factory.mktemp("ray-logs")) as c:
            yield c
    finally:
        if saved is None:
            os.environ.pop("RAY_DISABLE_USAGE_STATS", None)
        else:
            os.environ["RAY_DISABLE_USAGE_STATS"] = saved


def _evals(out: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in sorted((out / "runs").glob("*/eval.json"))}


def test_smoke_suite_on_ray_equals_local(cluster, tmp_path):
    local = reproduce("smoke", tmp_path / "local", threads=1, probe=False)
    on_ray = reproduce("smoke", tmp_path / "ray", executor="ray", ray_address=cluster.address, threads=1, probe=False)
    assert local["executor"] == "local" and on_ray["executor"] == "ray"
    a, b = _evals(tmp_path / "local"), _evals(tmp_path / "ray")
    assert set(a) == set(b) == {r.name for r in suite("smoke")}
    assert a == b  # same seeds, same threads: the same numbers wherever the runs were made
    done = [rundir.read_json(p) for p in (tmp_path / "ray" / "runs").glob("*/done.json")]
    assert len(done) == len(a) and all(d["device"] == "cpu" for d in done)
    assert len({d["pid"] for d in done}) >= 2  # Ray workers, not this process, trained them
    assert os.getpid() not in {d["pid"] for d in done}
    assert (
        on_ray["run_devices"] == f"cpu ({len(a)} runs)" and on_ray["run_hosts"]
    )  # where the runs, not the driver, ran
    assert "run_devices: cpu (28 runs)" in (tmp_path / "ray" / "report.md").read_text()
    results = json.loads((tmp_path / "ray" / "results.json").read_text())
    assert results["table1"]["oracle"]["bijection"]["mean"] == pytest.approx(0.0, abs=1e-6)


def test_runs_are_placed_on_both_nodes(cluster, tmp_path):
    storage = write_storage_token(tmp_path)
    jobs = [
        Job(e.name, e.config, str(tmp_path / "runs"), storage=storage) for e in suite("smoke", only={"arch": "lstm"})
    ]
    results = make_executor("ray", ray_address=cluster.address).run(jobs)
    assert {r["name"] for r in results} == {j.name for j in jobs}
    assert len({r["node"] for r in results}) == 2


def _long_smoke_config() -> dict:
    """The smoke bijection transformer trained long enough to be killed in the middle, checkpointing often."""
    cfg = next(e.config for e in suite("smoke", only={"task": "bijection", "arch": "transformer"}))
    cfg = json.loads(json.dumps(cfg))
    cfg["train"].update(steps=600, checkpoint_every=50, log_every=10, eval_every=200, device="cpu")
    return cfg


def test_killed_worker_is_retried_and_resumes_to_the_same_numbers(cluster, tmp_path):
    cfg = _long_smoke_config()
    fresh = run_job(Job("fresh", cfg, str(tmp_path / "local"), threads=1))
    assert fresh["resumed_from"] == 0

    job = Job("killed", cfg, str(tmp_path / "ray"), threads=1, storage=write_storage_token(tmp_path))
    outcome: dict = {}

    def drive() -> None:
        try:
            outcome["results"] = make_executor("ray", ray_address=cluster.address, max_retries=2).run([job])
        except BaseException as err:  # noqa: BLE001 - reported by the assertion below
            outcome["error"] = err

    driver = threading.Thread(target=drive)
    driver.start()
    deadline, victim = time.time() + 120, None
    while time.time() < deadline and victim is None:
        owner = read_owner(job.run_dir)
        steps = checkpoints.list_checkpoints(job.run_dir) if job.run_dir.exists() else []
        if owner and steps and 0 < max(steps) < cfg["train"]["steps"]:
            victim = owner["pid"]
        else:
            assert driver.is_alive(), f"the run ended before it could be killed: {outcome}"
            time.sleep(0.01)
    assert victim is not None and victim != os.getpid()
    os.kill(victim, signal.SIGKILL)  # the Ray worker process training the run
    driver.join(timeout=300)
    assert not driver.is_alive() and "error" not in outcome, outcome.get("error")
    (result,) = outcome["results"]
    assert result["pid"] != victim and 0 < result["resumed_from"] < cfg["train"]["steps"]

    a = rundir.read_json(job.run_dir / rundir.EVAL)
    b = rundir.read_json(tmp_path / "local" / "fresh" / rundir.EVAL)
    assert a == b  # the retried, resumed run ends with the uninterrupted run's numbers

    def key_lines(path: Path) -> list:
        return [
            (r["step"], r.get("split"), r.get("loss"), r.get("entropy_mae_bits")) for r in rundir.read_metrics(path)
        ]

    assert key_lines(job.run_dir) == key_lines(tmp_path / "local" / "fresh")


def test_a_node_that_cannot_see_out_fails_at_once(cluster, tmp_path):
    write_storage_token(tmp_path)  # the token a driver wrote on its own disk ...
    elsewhere = (str(tmp_path / "not-shared" / ".windtunnel-storage"), "0123")  # ... is not where this job looks
    cfg = _long_smoke_config()
    job = Job("bijection", cfg, str(tmp_path / "runs"), storage=elsewhere)
    t0 = time.time()
    with pytest.raises(StorageError, match="storage every node sees"):
        make_executor("ray", ray_address=cluster.address).run([job])
    assert time.time() - t0 < 60 and not job.run_dir.exists()  # before any training, not retried
    with pytest.raises(StorageError, match="not-shared"):
        LocalExecutor().run([job])


def test_sweep_on_ray_gives_the_local_table(cluster, tmp_path):
    from windtunnel.sweep import sweep

    base = {
        "task": {"name": "bijection", "params": {"V": 6, "L": 5}},
        "model": {"arch": "transformer", "preset": "smoke"},
        "train": {"steps": 6, "batch_size": 8, "device": "cpu"},
        "eval": {"n": 64},
    }
    grid = {"train.lr": [1e-3, 3e-3], "seed": [0, 1]}
    local = sweep(base, grid, tmp_path / "local", threads=1)
    on_ray = sweep(base, grid, tmp_path / "ray", executor="ray", ray_address=cluster.address, threads=1)
    assert on_ray["executor"] == "ray" and len(on_ray["rows"]) == 4
    assert [(r["run"], r["metrics"]) for r in on_ray["rows"]] == [(r["run"], r["metrics"]) for r in local["rows"]]


def test_reproduce_cli_on_ray(cluster, tmp_path):
    from typer.testing import CliRunner

    from windtunnel.cli import app

    out = tmp_path / "cli"
    args = ["reproduce", "--tier", "smoke", "--out", str(out), "--only", "arch=oracle", "--no-probe"]
    r = CliRunner().invoke(app, [*args, "--executor", "ray", "--ray-address", cluster.address, "--no-progress"])
    assert r.exit_code == 0, r.output
    meta = rundir.read_json(out / "reproduce.json")
    assert meta["executor"] == "ray" and "--executor ray" in meta["command"] and "--jobs" not in meta["command"]
    assert (out / "report.md").is_file() and "bijection-oracle: finished in" in r.output


def test_the_cluster_listens_on_loopback_only(cluster):
    """Every listening socket of every process of both nodes is on 127.0.0.1 (where this machine has a name that
    resolves to 127.0.0.1 alone: executors/ray_local.py)."""
    import psutil  # Ray ships it and puts it on the path (the cluster fixture imported Ray)

    if not cluster.loopback_only:
        pytest.skip("no name of this machine resolves to 127.0.0.1 alone; the test cluster listens on every interface")
    pids = {p.pid for i in range(len(cluster.procs)) for p in cluster.node_processes(i)}
    listening = [c for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN and c.pid in pids]
    assert listening, "found none of the cluster's listening sockets"
    assert {c.laddr.ip for c in listening} <= {"127.0.0.1", "::ffff:127.0.0.1"}, listening


def test_time_to_bayes_on_ray_gives_the_local_curves(cluster, tmp_path):
    from windtunnel.time_to_bayes import parse_cell, run

    cell = parse_cell("task=hmm,arch=transformer,tier=smoke,recipe=wsd,steps=6,batch_size=4,eval_every=2,seeds=2")
    local = run([cell], tmp_path / "local", threads=1, echo=lambda _: None)
    on_ray = run([cell], tmp_path / "ray", threads=1, echo=lambda _: None, executor="ray", ray_address=cluster.address)
    assert on_ray["machine"]["executor"] == "ray"
    drop = ("run_dir", "train_s", "tokens_per_s", "curve", "crossings", "final_validation")  # seconds, paths differ
    for a, b in zip(local["cells"][0]["seeds"], on_ray["cells"][0]["seeds"], strict=True):
        assert {k: v for k, v in a.items() if k not in drop} == {k: v for k, v in b.items() if k not in drop}
        assert a["test"] == b["test"] and a["final_validation"]["kl_bits"] == b["final_validation"]["kl_bits"]
        assert [(e["step"], e["entropy_mae_bits"]) for e in a["curve"]] == [
            (e["step"], e["entropy_mae_bits"]) for e in b["curve"]
        ]


def test_a_dead_node_s_run_is_retried_on_another_node_and_resumes(tmp_path):
    """A worker node SIGKILLed whole (raylet, workers: as when its machine dies) while it trains a run: Ray marks
    the node dead, retries the task on the head, and the run resumes from its checkpoint to the numbers of an
    uninterrupted run. A cluster of its own, since this one loses a node."""
    cfg = _long_smoke_config()
    with LocalCluster(nodes=2, cpus=1, log_dir=tmp_path / "logs") as c:
        storage = write_storage_token(tmp_path)
        jobs = [Job(f"run{i}", {**cfg, "seed": i}, str(tmp_path / "ray"), threads=1, storage=storage) for i in (0, 1)]
        outcome: dict = {}

        def drive() -> None:
            try:
                outcome["results"] = make_executor("ray", ray_address=c.address, max_retries=2).run(jobs)
            except BaseException as err:  # noqa: BLE001 - reported by the assertion below
                outcome["error"] = err

        driver = threading.Thread(target=drive)
        driver.start()
        deadline, victim = time.time() + 120, None
        while victim is None:  # the run the worker node (node 1) is training, once it has a checkpoint
            node = {p.pid for p in c.node_processes(1)}
            for job in jobs:
                owner = read_owner(job.run_dir)
                if owner and owner["pid"] in node and checkpoints.list_checkpoints(job.run_dir):
                    victim = job
            assert driver.is_alive() and time.time() < deadline, f"no run was caught on the worker node: {outcome}"
            time.sleep(0.01)
        c.kill_node(1)
        driver.join(timeout=300)
    assert not driver.is_alive() and "error" not in outcome, outcome.get("error")
    results = {r["name"]: r for r in outcome["results"]}
    assert results[victim.name]["resumed_from"] > 0  # retried: it started again from a checkpoint
    assert len({r["node"] for r in results.values()}) == 1  # both finished on the head, the only node left
    fresh = Job("fresh", victim.config, str(tmp_path / "local"), threads=1)
    run_job(fresh)
    assert rundir.read_json(victim.run_dir / rundir.EVAL) == rundir.read_json(fresh.run_dir / rundir.EVAL)
