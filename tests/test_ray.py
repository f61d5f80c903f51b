"""The Ray executor on a real multi-node cluster on this machine: a head and a worker node, each a `ray start --block`
subprocess, stopped by their PIDs (never `ray stop`, which would end every Ray process on the machine).

The nodes listen on 127.0.0.1 only (executors/ray_local.py) and admit only drivers with the cluster's own token. The
whole module runs with HOME in a temporary folder that holds a world-readable `~/.ray/auth_token` of someone else's,
as Ray leaves one behind: it must change nothing. Same seeds and threads => the same eval.json on Ray as on the local
executor; a worker killed mid-training is retried and resumes from its checkpoint to the numbers of an uninterrupted
run; a node that cannot see --out fails at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from readme_commands import check_ran, readme_commands, run_cli, shrink
from windtunnel.cli import app
from windtunnel.errors import StorageError
from windtunnel.executors import ExecutorOptions, Job, LocalExecutor, make_executor, run_job, write_storage_token
from windtunnel.executors.ray_cluster import (
    AUTH_VARS,
    CLUSTER_VAR,
    check_reachable,
    driver_auth,
    import_ray,
    with_auth,
)
from windtunnel.executors.ray_local import LocalCluster
from windtunnel.reproduce import reproduce
from windtunnel.runs import checkpoints
from windtunnel.store import rundir
from windtunnel.store.lock import read_owner
from windtunnel.suites import suite

pytestmark = pytest.mark.slow  # a real two-node Ray cluster

FOREIGN_TOKEN = "f" * 64  # another cluster's token, as `ray` leaves it in ~/.ray/auth_token (mode 0644)


@pytest.fixture(scope="module")
def foreign_home(tmp_path_factory):
    """HOME, for the whole module, in a temporary folder whose `.ray/auth_token` (0644) is not the test cluster's:
    the tests pass with it there, and never read or change the real HOME."""
    home = tmp_path_factory.mktemp("home")
    (home / ".ray").mkdir()
    token = home / ".ray" / "auth_token"
    token.write_text(FOREIGN_TOKEN)
    token.chmod(0o644)
    saved = {k: os.environ.get(k) for k in ("HOME", "RAY_DISABLE_USAGE_STATS", *AUTH_VARS)}
    os.environ.update(HOME=str(home), RAY_DISABLE_USAGE_STATS="1")
    for key in AUTH_VARS:  # the user's own Ray settings do not reach the tests either
        os.environ.pop(key, None)
    try:
        yield home
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def cluster(foreign_home, tmp_path_factory):
    """A two-node Ray cluster (head + one worker node, one CPU each) on this machine, with its own token."""
    with LocalCluster(nodes=2, cpus=1, log_dir=tmp_path_factory.mktemp("ray-logs")) as c:
        yield c


def _evals(out: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in sorted((out / "runs").glob("*/eval.json"))}


def test_smoke_suite_on_ray_equals_local(cluster, tmp_path):
    local = reproduce("smoke", tmp_path / "local", probe=False, options=ExecutorOptions(threads=1))
    ray = ExecutorOptions("ray", threads=1, ray_address=cluster.address)
    on_ray = reproduce("smoke", tmp_path / "ray", probe=False, options=ray)
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
    assert f"run_devices: cpu ({len(a)} runs)" in (tmp_path / "ray" / "report.md").read_text()
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
    local = sweep(base, grid, tmp_path / "local", ExecutorOptions(threads=1))
    on_ray = sweep(base, grid, tmp_path / "ray", ExecutorOptions("ray", threads=1, ray_address=cluster.address))
    assert on_ray["executor"] == "ray" and len(on_ray["rows"]) == 4
    assert [(r["run"], r["metrics"]) for r in on_ray["rows"]] == [(r["run"], r["metrics"]) for r in local["rows"]]


def test_the_readme_ray_command_through_the_entry_point(cluster, tmp_path):
    """The README's `reproduce --executor ray --ray-address auto` line, as a user runs it beside a cluster (RAY_ADDRESS
    and its token in the environment), at the smoke size (tests/readme_commands.py)."""
    (line,) = [a for a in readme_commands() if "--executor" in a and a[a.index("--executor") + 1] == "ray"]
    args = shrink(line, tmp_path)
    env = with_auth({**os.environ, "RAY_ADDRESS": cluster.address}, cluster.env)
    done = run_cli(args, tmp_path, env=env)
    check_ran(args, done)
    out = Path(args[args.index("--out") + 1])
    assert out.is_relative_to(tmp_path)
    meta = rundir.read_json(out / "reproduce.json")
    assert meta["executor"] == "ray" and "--executor ray" in meta["command"] and "--jobs" not in meta["command"]
    assert (out / "report.md").is_file() and "bijection-oracle: finished in" in done.stdout


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
    local = run([cell], tmp_path / "local", ExecutorOptions(threads=1), echo=lambda _: None)
    ray = ExecutorOptions("ray", threads=1, ray_address=cluster.address)
    on_ray = run([cell], tmp_path / "ray", ray, echo=lambda _: None)
    assert on_ray["machine"]["executor"] == "ray"
    drop = ("run_dir", "train_s", "tokens_per_s", "curve", "crossings", "final_validation")  # seconds, paths differ
    for a, b in zip(local["cells"][0]["seeds"], on_ray["cells"][0]["seeds"], strict=True):
        assert {k: v for k, v in a.items() if k not in drop} == {k: v for k, v in b.items() if k not in drop}
        assert a["test"] == b["test"] and a["final_validation"]["kl_bits"] == b["final_validation"]["kl_bits"]
        assert [(e["step"], e["entropy_mae_bits"]) for e in a["curve"]] == [
            (e["step"], e["entropy_mae_bits"]) for e in b["curve"]
        ]


def test_a_dead_node_s_run_is_retried_on_another_node_and_resumes(foreign_home, tmp_path):
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


WINDTUNNEL = str(Path(sys.executable).parent / "windtunnel")


def test_the_cluster_has_a_token_of_its_own(cluster, foreign_home):
    """The token is a 0600 file in the cluster's own folder; every node process runs with it and with HOME there;
    this process drives with it while the cluster runs; the token in HOME is neither used nor changed."""

    assert cluster.token_path.parent == Path(cluster.temp_dir)
    assert cluster.token_path.stat().st_mode & 0o777 == 0o600 and Path(cluster.temp_dir).stat().st_mode & 0o077 == 0
    assert cluster.token_path.read_text() != FOREIGN_TOKEN
    for i in range(len(cluster.procs)):
        for p in cluster.node_processes(i)[:1] + [p for p in cluster.node_processes(i) if "raylet" in p.name()]:
            env = p.environ()
            assert env.get("RAY_AUTH_MODE") == "token" and env.get("RAY_AUTH_TOKEN_PATH") == str(cluster.token_path)
            assert env.get("HOME") == str(cluster.home) and "RAY_AUTH_TOKEN" not in env
    assert os.environ["RAY_AUTH_TOKEN_PATH"] == str(cluster.token_path)
    token = foreign_home / ".ray" / "auth_token"
    assert token.read_text() == FOREIGN_TOKEN and token.stat().st_mode & 0o777 == 0o644
    assert Path.home() == foreign_home


def test_a_driver_without_the_cluster_s_token_is_refused(cluster, tmp_path):
    """The cluster itself refuses a Ray driver with no token (HOME's foreign token does not let it in), and the
    windtunnel driver says so in one line, exit 2, before --out is made, for no token and for a wrong one."""
    check_reachable(cluster.address)  # with the cluster's token: admitted
    no_token = dict.fromkeys(AUTH_VARS)
    wrong = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": FOREIGN_TOKEN, "RAY_AUTH_TOKEN_PATH": None}
    for env, who in ((no_token, "a driver without a token"), (wrong, "this driver's token")):
        with driver_auth(env):
            with pytest.raises(ValueError, match=f"refuses {who}"):
                check_reachable(cluster.address)
            out = tmp_path / "out"
            args = ["reproduce", "--tier", "smoke", "--only", "arch=oracle", "--out", str(out), "--no-progress"]
            r = CliRunner().invoke(app, [*args, "--executor", "ray", "--ray-address", cluster.address])
            assert r.exit_code == 2 and "refuses" in r.output and r.output.count("\n") == 1 and not out.exists()
    code = "import ray, sys; ray.init(address=sys.argv[1]); print(ray.get(ray.remote(lambda: 'admitted').remote()))"
    try:
        raw = subprocess.run(
            [sys.executable, "-c", code, cluster.address],
            env=with_auth(os.environ, no_token),
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert raw.returncode != 0 and "admitted" not in raw.stdout
    except subprocess.TimeoutExpired as err:  # still knocking: it never got in either
        assert "admitted" not in (err.stdout or b"").decode()


def test_an_impossible_resource_request_fails_at_once(cluster, tmp_path):
    """A run that asks for more CPUs than any node has would wait for ever: it fails at once naming the largest."""
    cfg = next(e.config for e in suite("smoke", only={"task": "bijection", "arch": "oracle"}))
    job = Job("big", cfg, str(tmp_path / "runs"), threads=8)
    with pytest.raises(ValueError, match=r"--threads 8: .*8 CPUs.* largest has 1\b"):
        make_executor("ray", ray_address=cluster.address).run([job])
    assert not job.run_dir.exists()


LOOPBACK_IPS = {"127.0.0.1", "::ffff:127.0.0.1"}


def _psutil():
    import_ray()  # Ray ships psutil and puts it on the path
    import psutil

    return psutil


def _listening(root: int) -> set[tuple[str, str, int]]:
    """(process name, address, port) of each listening TCP socket of process `root` and its descendants now."""
    psutil = _psutil()
    found = set()
    with contextlib.suppress(psutil.NoSuchProcess):
        top = psutil.Process(root)
        for p in [top, *top.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                name = p.name()
                found |= {(name, c.laddr.ip, c.laddr.port) for c in p.net_connections("inet") if c.status == "LISTEN"}
    return found


@pytest.fixture(scope="module")
def no_address(foreign_home):
    """`windtunnel reproduce --executor ray` without an address (Ray starts a cluster of its own) of one oracle run,
    run once for the module, with HOME and Ray's folders in a temporary root; every listening socket of the driver's
    processes is recorded while it runs. Yields (the completed process, root, home, out, the sockets)."""
    root = Path(tempfile.mkdtemp(prefix="wt-"))  # short: Ray's socket paths live under it
    home, out = root / "home", root / "out"
    home.mkdir()
    env = with_auth({k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", CLUSTER_VAR)}, {})
    env.update(HOME=str(home), RAY_TMPDIR=str(root), TMPDIR=str(root), OMP_NUM_THREADS="1", RAY_DISABLE_USAGE_STATS="1")
    args = ["reproduce", "--tier", "smoke", "--only", "task=bijection", "--only", "arch=oracle", "--out", str(out)]
    cmd = [WINDTUNNEL, *args, "--executor", "ray", "--threads", "1", "--no-probe", "--no-progress"]
    driver = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        sockets: set[tuple[str, str, int]] = set()
        deadline = time.time() + 540
        while driver.poll() is None and time.time() < deadline:
            sockets |= _listening(driver.pid)
            time.sleep(0.2)
        stdout, stderr = driver.communicate(timeout=max(1.0, deadline - time.time()))
        yield subprocess.CompletedProcess(cmd, driver.returncode, stdout, stderr), root, home, out, sockets
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        shutil.rmtree(root, ignore_errors=True)


def test_ray_without_an_address_leaves_no_world_readable_token(no_address):
    """`--executor ray` with no address starts Ray's own local cluster, with a private token (0600, removed after):
    no `~/.ray/auth_token` is written, and no token file is left anywhere under its temporary folder."""
    done, root, home, out, _ = no_address
    assert done.returncode == 0, done.stderr[-3000:]
    assert rundir.read_json(out / "reproduce.json")["executor"] == "ray"
    assert not (home / ".ray").exists()
    assert not list(root.glob("windtunnel-ray-auth-*"))  # the private token's folder is gone
    readable = [p for p in root.rglob("*token*") if p.is_file() and p.stat().st_mode & 0o044]
    assert not readable, readable


def test_ray_without_an_address_listens_on_loopback_only(no_address):
    """The cluster `--executor ray` starts without an address (Ray would listen on every interface, and two agents on
    the host's network address) listens on 127.0.0.1 alone: every listening socket of the driver, its GCS, raylet,
    agents and workers, seen while it ran; RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER is not in the driver's environment."""
    done, *_, sockets = no_address
    assert done.returncode == 0, done.stderr[-3000:]
    names = {name for name, _, _ in sockets}
    assert {"gcs_server", "raylet"} <= names, sockets  # the cluster's own servers were seen
    assert {ip for _, ip, _ in sockets} <= LOOPBACK_IPS, sorted(sockets)


LIVE_CLUSTER = """
import sys, time
from windtunnel.executors.ray_local import LocalCluster
cluster = LocalCluster(nodes=2, cpus=1, log_dir=sys.argv[1]).start()
print(cluster.temp_dir, flush=True)
time.sleep(600)
"""


def _cluster_processes(folder: str) -> list:
    """Every process whose command line names the cluster's folder: `ray start`, gcs_server, raylet, agents, workers."""
    psutil = _psutil()

    found = []
    for p in psutil.process_iter(["cmdline"]):
        if any(folder in part for part in p.info["cmdline"] or []):
            found.append(p)
    return found


def test_a_local_cluster_dies_with_the_process_that_started_it(foreign_home, tmp_path):
    """A LocalCluster started by a child Python process that is then SIGKILLed (a test run killed by a timeout):
    every process of both nodes -- `ray start`, gcs_server, raylet and what they started -- is gone within a bounded
    wait, not left running for an hour. Anything left is killed by its PID (never `ray stop`)."""
    psutil = _psutil()

    starter = subprocess.Popen(
        [sys.executable, "-c", LIVE_CLUSTER, str(tmp_path / "logs")], stdout=subprocess.PIPE, text=True
    )
    folder = ""
    try:
        folder = starter.stdout.readline().strip()
        assert folder, "the cluster did not start"
        nodes = _cluster_processes(folder)
        assert {"gcs_server", "raylet"} <= {p.name() for p in nodes}, nodes
        assert len([p for p in nodes if {"start", "--block"} <= set(p.cmdline())]) == 2  # both nodes' `ray start`
        starter.kill()
        starter.wait()
        _, alive = psutil.wait_procs(nodes, timeout=60)
        assert not alive, [(p.pid, p.name()) for p in alive]
        assert not _cluster_processes(folder)  # nor any the nodes started after the list was taken
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait()
        for p in _cluster_processes(folder) if folder else []:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
