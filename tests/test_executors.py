"""Executors without a cluster: the choice of executor, Ray's resource requests, the storage check, run_job's
contract, the local pool against inline runs, and the driver's progress output."""

from __future__ import annotations

import contextlib
import io
import json
import pickle
from pathlib import Path

import pytest
from typer.testing import CliRunner

from windtunnel.cli import app
from windtunnel.errors import StorageError, TrainingDiverged, TrainingInterrupted
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
from windtunnel.report.compare import CompareInputError
from windtunnel.store import rundir
from windtunnel.suites import suite
from windtunnel.training.stacked import StackInterrupted


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


def test_run_job_records_the_seconds_of_its_probes(tmp_path):
    """done.json says how much of the attempt's wall time the geometry probes took; a run not probed has none."""
    (job,) = smoke_jobs(tmp_path, {"task": "bijection", "arch": "transformer"}, probe=True)
    (plain,) = smoke_jobs(tmp_path / "plain", {"task": "bijection", "arch": "transformer"})
    probed, unprobed = run_job(job), run_job(plain)
    assert probed["probe"] == "done" and 0 < probed["probe_s"] <= probed["wall_s"]
    assert (job.run_dir / "geometry.json").exists()
    assert unprobed["probe"] == "skipped" and unprobed["probe_s"] is None
    assert rundir.read_json(job.run_dir / rundir.DONE)["probe_s"] == probed["probe_s"]


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


INTERRUPTED = """
import json, sys
from windtunnel.executors import Job, LocalExecutor
cfg, runs = json.loads(sys.argv[1]), sys.argv[2]
LocalExecutor(2).run([Job(f"run{i}", {**cfg, "seed": i}, runs, threads=1) for i in range(4)])
"""


def test_ctrl_c_stops_the_local_pool_at_once_and_the_runs_resume(tmp_path):
    """SIGINT to the driver's process group (Ctrl-C) ends the pool's workers now, not after every queued run; a
    re-run resumes the interrupted runs from their checkpoints."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from windtunnel.runs import checkpoints

    cfg = next(e.config for e in suite("smoke", only={"task": "bijection", "arch": "transformer"}))
    cfg = json.loads(json.dumps(cfg))
    cfg["train"].update(steps=300, checkpoint_every=20, log_every=10, eval_every=0, device="cpu")
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED, json.dumps(cfg), str(runs)],
        start_new_session=True,  # its own process group, as a terminal's foreground job
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    deadline = time.time() + 120
    while not all(
        (runs / f"run{i}" / "checkpoints").is_dir() and checkpoints.list_checkpoints(runs / f"run{i}") for i in range(2)
    ):
        assert proc.poll() is None and time.time() < deadline, "the runs never checkpointed"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    start = time.time()
    proc.wait(timeout=60)
    assert time.time() - start < 30 and proc.returncode != 0
    assert not any((runs / f"run{i}" / rundir.DONE).exists() for i in range(4))
    with pytest.raises(ProcessLookupError):  # no worker of the pool is left behind
        os.killpg(proc.pid, 0)
    jobs = [Job(f"run{i}", {**cfg, "seed": i}, str(runs), threads=1) for i in range(4)]
    results = {r["name"]: r for r in LocalExecutor(2).run(jobs)}  # the same command again
    assert all((runs / j.name / rundir.DONE).exists() for j in jobs)
    assert results["run0"]["resumed_from"] > 0 and results["run1"]["resumed_from"] > 0


DRIVER = """
import json, sys
from windtunnel.executors import Job, LocalExecutor
from windtunnel.executors.driver import execute
cfg, runs, jobs = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
execute([Job(f"run{i}", {**cfg, "seed": i}, runs, threads=1) for i in range(4)], LocalExecutor(jobs), progress=False)
"""


@pytest.mark.parametrize(("how", "jobs"), [("ctrl-c", 2), ("sigterm", 2), ("sigterm", 1)])
def test_an_interrupted_driver_checkpoints_each_run_at_its_current_step(tmp_path, how, jobs):
    """Ctrl-C to a driver's process group, or SIGTERM to the driver alone, with a pool of workers or the runs inline:
    each run in training writes a checkpoint at the step it is on (no periodic checkpoint could be it: none is due
    before step 10,000), the queued runs never start, no worker is left, and the same command resumes each run from
    that step to an uninterrupted run's end."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    from windtunnel.runs import checkpoints

    cfg = next(e.config for e in suite("smoke", only={"task": "bijection", "arch": "transformer"}))
    cfg = json.loads(json.dumps(cfg))
    cfg["train"].update(
        steps=3_000, checkpoint_every=10_000, checkpoint_schedule=None, log_every=1, eval_every=0, device="cpu"
    )
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, json.dumps(cfg), str(runs), str(jobs)],
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )

    def logged(i: int) -> int:
        metrics = runs / f"run{i}" / "metrics.jsonl"
        return len(metrics.read_text().splitlines()) if metrics.is_file() else 0

    deadline = time.time() + 120
    while min(logged(i) for i in range(jobs)) < 5:
        assert proc.poll() is None and time.time() < deadline, "the runs never trained"
        time.sleep(0.05)
    workers = psutil.Process(proc.pid).children() if jobs > 1 else []
    assert len(workers) == (jobs if jobs > 1 else 0)
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.kill(proc.pid, signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode != 0
    assert not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)
    steps = [checkpoints.list_checkpoints(runs / f"run{i}") for i in range(jobs)]
    assert all(len(s) == 1 and 5 <= s[0] < 3_000 for s in steps), steps  # the step each was on, not a periodic one
    assert not any((runs / f"run{i}").exists() for i in range(jobs, 4))  # queued: never started
    assert not any((runs / f"run{i}" / rundir.DONE).exists() for i in range(jobs))

    again = [Job(f"run{i}", {**cfg, "seed": i}, str(runs), threads=1) for i in range(jobs)]
    results = {r["name"]: r for r in LocalExecutor(jobs).run(again)}  # the same command again
    assert [results[f"run{i}"]["resumed_from"] for i in range(jobs)] == [s[0] for s in steps]
    whole = run_job(Job("run0", {**cfg, "seed": 0}, str(tmp_path / "whole"), threads=1))
    assert not whole["skipped"]
    resumed = json.loads((runs / "run0" / "eval.json").read_text())
    assert resumed == json.loads((tmp_path / "whole" / "run0" / "eval.json").read_text())


def test_a_run_that_diverges_in_a_worker_is_reported_as_diverged_and_the_other_run_finishes(tmp_path):
    """An error a run raises in a pool worker comes back to the driver as itself (it survives pickling with its
    fields), not as a broken pool, and the runs beside it finish."""
    cfg = next(e.config for e in suite("smoke", only={"task": "bijection", "arch": "transformer"}))
    cfg = json.loads(json.dumps(cfg))
    cfg["train"].update(steps=20, eval_every=0, device="cpu")
    bad = {**cfg, "train": {**cfg["train"], "lr": 1e30}}
    jobs = [Job("good", cfg, str(tmp_path), threads=1), Job("bad", bad, str(tmp_path), threads=1)]
    with pytest.raises(TrainingDiverged) as err:
        LocalExecutor(2).run(jobs)
    assert err.value.step >= 1 and err.value.what in str(err.value) and "diverged at step" in str(err.value)
    assert (tmp_path / "good" / rundir.DONE).exists() and not (tmp_path / "bad" / rundir.DONE).exists()


@pytest.mark.parametrize(
    "error",
    [
        TrainingDiverged(7, "gradients", kept=5),
        TrainingInterrupted(15, "/runs/a", 12, saved=True),
        StackInterrupted(2, [Path("/runs/s0"), Path("/runs/s1")], None, saved=False),
        CompareInputError("cells", "--cell 2: no run matches"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_with_fields_survive_the_trip_back_from_a_worker(error):
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and str(back) == str(error) and vars(back) == vars(error)


def test_an_address_where_no_cluster_answers_fails_in_seconds(tmp_path, monkeypatch):
    from ray._private import services

    from windtunnel.executors.ray_cluster import check_reachable
    from windtunnel.executors.ray_local import free_port

    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "ray-tmp"))  # no "current cluster" of this machine's Ray ...
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(services, "find_gcs_addresses", lambda: [])  # ... and no other Ray running here
    check_reachable(None)  # Ray would start a local cluster: nothing to check
    check_reachable("local")
    with pytest.raises(ValueError, match="--ray-address auto: ") as err:  # then Ray's own words
        check_reachable("auto")
    assert "Ray" in str(err.value)
    with pytest.raises(ValueError, match="expected auto or HOST:PORT"):
        check_reachable("nowhere")
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(ValueError, match="no Ray cluster answers at"):
        check_reachable(address)
    out = tmp_path / "x"
    args = ["reproduce", "--tier", "smoke", "--only", "arch=oracle", "--out", str(out), "--no-progress"]
    r = CliRunner().invoke(app, [*args, "--executor", "ray", "--ray-address", address])
    assert r.exit_code == 2 and "no Ray cluster answers" in r.output and not out.exists()  # nothing made


def test_ray_address_checks_the_gcs_not_just_a_tcp_listener(tmp_path, monkeypatch):
    """A listener on 127.0.0.1 that is not a Ray GCS fails in seconds with one clear line, before --out exists:
    both where Ray dials 127.0.0.1 as this host's network address and through a loopback name Ray dials as is
    (where a TCP connection succeeds, so only a real GCS handshake tells)."""
    import socket
    import threading

    from windtunnel.executors.ray_cluster import check_reachable
    from windtunnel.executors.ray_local import loopback_name

    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "ray-tmp"))  # no "current cluster" of this machine's Ray
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer() -> None:  # an HTTP server's reply to whatever connects
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                with conn:
                    conn.sendall(b"HTTP/1.0 200 OK\r\n\r\nnot ray\r\n")

    base = tmp_path / "base.yaml"
    base.write_text(json.dumps({"task": {"name": "bijection"}, "model": {"arch": "transformer", "preset": "smoke"}}))
    threading.Thread(target=answer, daemon=True).start()
    try:
        addresses = [f"127.0.0.1:{port}"] + ([f"{loopback_name()}:{port}"] if loopback_name() else [])
        for address in addresses:
            with pytest.raises(ValueError, match=f"no Ray cluster answers at '{address}'"):
                check_reachable(address, timeout=5)
            out = tmp_path / "out"
            args = ["sweep", str(base), "--grid", "seed=0", "--out", str(out), "--no-progress"]
            r = CliRunner().invoke(app, [*args, "--executor", "ray", "--ray-address", address])
            assert r.exit_code == 2 and not out.exists(), r.output
            assert r.output.count("\n") == 1 and "no Ray cluster answers" in r.output
    finally:
        server.close()
