"""Executors without a cluster: the choice of executor, Ray's resource requests, the storage check, run_job's
contract, the local pool against inline runs, and the driver's progress output."""

from __future__ import annotations

import io
import json

import pytest
from typer.testing import CliRunner

from windtunnel import rundir
from windtunnel.cli import app
from windtunnel.errors import StorageError
from windtunnel.executors import (
    Job,
    LocalExecutor,
    check_storage,
    default_threads,
    make_executor,
    run_job,
    write_storage_token,
)
from windtunnel.executors.driver import config_cost, execute
from windtunnel.executors.ray_cluster import task_resources
from windtunnel.suites import suite


def smoke_jobs(runs_dir, only: dict[str, str], **kwargs) -> list[Job]:
    return [Job(e.name, e.config, str(runs_dir), threads=1, **kwargs) for e in suite("smoke", only=only)]


def test_make_executor_checks_its_options():
    assert make_executor("local", jobs=2).name == "local"
    assert make_executor("ray").name == "ray"  # Ray is imported only when it runs
    with pytest.raises(ValueError, match="--executor: must be one of local, ray"):
        make_executor("slurm")
    with pytest.raises(ValueError, match="--jobs: only with --executor local"):
        make_executor("ray", jobs=2)
    with pytest.raises(ValueError, match="only with --executor ray"):
        make_executor("local", ray_address="auto")
    with pytest.raises(ValueError, match="jobs: must be >= 1"):
        make_executor("local", jobs=0)
    assert default_threads(1) >= 1 and default_threads(10_000) == 1


def test_ray_tasks_ask_for_a_gpu_on_a_gpu_cluster_else_their_threads():
    auto = Job("a", {"train": {"device": "auto"}}, "runs", threads=3)
    pinned = Job("b", {"train": {"device": "cpu"}}, "runs", threads=2)
    assert task_resources(auto, cluster_gpus=8) == {"num_gpus": 1, "num_cpus": 1}
    assert task_resources(pinned, cluster_gpus=8) == {"num_cpus": 2}
    assert task_resources(auto, cluster_gpus=0) == {"num_cpus": 3}


def test_storage_check(tmp_path):
    path, token = write_storage_token(tmp_path)
    check_storage((path, token))
    check_storage(None)
    with pytest.raises(StorageError, match="holds another driver's token"):
        check_storage((path, "someone-else"))
    with pytest.raises(StorageError, match=r"does not exist.*storage every node sees"):
        check_storage((str(tmp_path / "elsewhere" / ".windtunnel-storage"), token))


def test_run_job_marks_done_and_skips_a_finished_run(tmp_path):
    (job,) = smoke_jobs(tmp_path, {"task": "bijection", "arch": "lstm"})
    first = run_job(job)
    done = rundir.read_json(job.run_dir / rundir.DONE)
    assert not first["skipped"] and done["device"] == "cpu" and done["resumed_from"] == 0 and done["probe"] == "skipped"
    before = (job.run_dir / "metrics.jsonl").read_text()
    again = run_job(job)
    assert again["skipped"] and again["wall_s"] == done["wall_s"]
    assert (job.run_dir / "metrics.jsonl").read_text() == before


def test_local_pool_gives_the_numbers_of_inline_runs(tmp_path):
    only = {"task": "hmm", "arch": "transformer,lstm,oracle"}
    inline = LocalExecutor(1).run(smoke_jobs(tmp_path / "inline", only))
    pooled = LocalExecutor(2).run(smoke_jobs(tmp_path / "pool", only))
    assert {r["name"] for r in inline} == {r["name"] for r in pooled} == {"hmm-transformer", "hmm-lstm", "hmm-oracle"}
    assert len({r["pid"] for r in pooled}) >= 1 and all(r["pid"] != inline[0]["pid"] for r in pooled)
    for r in inline:
        a = json.loads((tmp_path / "inline" / r["name"] / "eval.json").read_text())
        b = json.loads((tmp_path / "pool" / r["name"] / "eval.json").read_text())
        assert a == b


def test_execute_orders_longest_first_and_shows_progress(tmp_path):
    jobs = smoke_jobs(tmp_path, {"task": "regression", "arch": "mamba,lstm,uniform"})
    costs = {j.name: config_cost(j.config) for j in jobs}
    assert costs["regression-uniform"] == 0 and costs["regression-mamba"] > costs["regression-lstm"] > 0
    order: list[str] = []
    stream = io.StringIO()

    class Recording(LocalExecutor):
        def run(self, jobs, on_result=None):
            order.extend(j.name for j in jobs)
            return super().run(jobs, on_result)

    results = execute(jobs, Recording(1), progress=True, stream=stream)
    assert order == sorted(costs, key=costs.__getitem__, reverse=True)
    assert [r["name"] for r in results] == [j.name for j in jobs]  # results in the jobs' order
    text = stream.getvalue()
    assert text.startswith("progress: ") and "\x1b" not in text  # not a terminal: plain lines, no redraw codes
    assert "0/3 runs done" in text and "3/3 runs done" in text
    assert "regression-mamba: finished in" in text


def test_cli_rejects_a_bad_executor_before_any_work(tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["reproduce", "--tier", "smoke", "--out", str(tmp_path / "x"), "--executor", "slurm"])
    assert r.exit_code == 2 and "--executor" in r.output and not (tmp_path / "x").exists()
    r = runner.invoke(
        app, ["reproduce", "--tier", "smoke", "--out", str(tmp_path / "y"), "--executor", "ray", "--jobs", "2"]
    )
    assert r.exit_code == 2 and "--jobs" in r.output and not (tmp_path / "y").exists()
    r = runner.invoke(app, ["reproduce", "--tier", "smoke", "--out", str(tmp_path / "z"), "--threads", "0"])
    assert r.exit_code == 2 and "threads" in r.output
