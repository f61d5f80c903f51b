"""bf16 autocast only where the CPU computes bf16 natively; emulated bf16 falls back to float32 with a warning; a run's
thread count holds for every CPU thread pool of its process."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys

import pytest
import torch

from windtunnel import devices


@pytest.mark.parametrize(
    ("flags", "native"),
    [
        ({"avx512f", "avx512bw"}, False),
        ({"avx512f", "avx512_bf16"}, True),
        ({"amx_bf16", "amx_tile"}, True),
        (set(), False),
    ],
)
def test_native_bf16_is_read_from_the_cpu_flags(monkeypatch, flags, native):
    monkeypatch.setattr(devices, "_cpu_flags", lambda: frozenset(flags))
    assert devices.cpu_has_native_bf16() is native


def test_emulated_bf16_falls_back_to_float32(monkeypatch):
    monkeypatch.setattr(devices, "_cpu_flags", lambda: frozenset({"avx512f"}))
    with pytest.warns(UserWarning, match="no native bf16"):
        ctx = devices.autocast("cpu", "bf16")
    assert isinstance(ctx, contextlib.nullcontext)
    monkeypatch.setattr(devices, "_cpu_flags", lambda: frozenset({"avx512_bf16"}))
    with devices.autocast("cpu", "bf16"):
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16 and torch.is_autocast_enabled("cpu")
    assert isinstance(devices.autocast("cpu", "float32"), contextlib.nullcontext)


@pytest.mark.parametrize("task", ["bijection", "regression"])
@pytest.mark.parametrize("arch", ["transformer", "mamba", "lstm", "mlp", "mlp-pointwise"])
def test_bf16_autocast_keeps_norms_fused(task, arch):
    """Under bf16 autocast the residual stream stays float32, so no norm meets a bf16 input with a float32 weight
    (rms_norm's unfused fallback, which warns "Mismatch dtype between input and weight")."""
    import warnings

    from windtunnel import runs
    from windtunnel.config import build_config
    from windtunnel.resolve import resolve_config

    cfg = resolve_config(build_config(overrides={"model.arch": arch, "model.preset": "smoke", "task.name": task}))
    t = runs.build_task(cfg)
    model = runs.build_model(cfg, t.spec, t)
    batch = t.sample(2, seed=0)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*Mismatch dtype")
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(batch.inputs)
        out.float().sum().backward()


def _smoke_lstm(task: str = "bijection"):
    from windtunnel import runs
    from windtunnel.config import build_config
    from windtunnel.resolve import resolve_config

    cfg = resolve_config(build_config(overrides={"model.arch": "lstm", "model.preset": "smoke", "task.name": task}))
    t = runs.build_task(cfg)
    return runs.build_model(cfg, t.spec, t).eval(), t.sample(4, seed=0)


def test_lstm_probe_says_what_the_fused_kernel_does():
    """The one probe of a bf16 LSTM kernel agrees with `nn.LSTM` itself under CPU bf16 autocast on this machine."""
    layer = torch.nn.LSTM(8, 8, batch_first=True)
    try:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            layer(torch.randn(2, 3, 8))
        runs = True
    except RuntimeError as err:
        assert "LSTM" in str(err)
        runs = False
    assert devices.cpu_bf16_lstm() is runs


@pytest.mark.parametrize("task", ["bijection", "regression"])
def test_lstm_without_a_bf16_kernel_runs_its_recurrence_in_float32(monkeypatch, task):
    """On a CPU whose oneDNN has no bf16 LSTM (AVX2 only) the model under bf16 autocast runs the recurrence in float32:
    the float32 model's numbers, not oneDNN's "could not create a primitive descriptor"."""
    monkeypatch.setattr(devices, "cpu_bf16_lstm", lambda: False)
    model, batch = _smoke_lstm(task)
    with torch.no_grad():
        ref = model(batch.inputs)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert devices.lstm_needs_float32(torch.zeros(1))
            out = model(batch.inputs)
    for a, b in zip(torch.utils._pytree.tree_leaves(out), torch.utils._pytree.tree_leaves(ref), strict=True):
        assert a.dtype == torch.float32 and torch.allclose(a, b, atol=1e-6)
    assert not devices.lstm_needs_float32(torch.zeros(1))  # outside autocast: the fused kernel as usual


@pytest.mark.skipif(not devices.cpu_bf16_lstm(), reason="this CPU's oneDNN has no bf16 LSTM kernel (AVX2 only)")
def test_lstm_with_a_bf16_kernel_uses_it():
    """Where the kernel exists the LSTM layers run in bf16 under autocast (the speed bf16 is asked for)."""
    model, batch = _smoke_lstm()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        _, cache = model.run_with_cache(batch.inputs, names=["blocks.0.lstm.h"])
    assert cache["blocks.0.lstm.h"].dtype == torch.bfloat16


AVX2_ONLY = frozenset({"fma", "avx2"})  # an AMD EPYC without AVX-512 or native bf16


def _train_lstm(out, *extra: str):
    from typer.testing import CliRunner

    from cli_args import SMOKE
    from windtunnel.cli import app

    args = ["train", "--task", "bijection", "--arch", "lstm", "--out", str(out), *SMOKE, *extra]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    return json.loads((out / "eval.json").read_text())


def test_train_bf16_on_a_cpu_without_native_bf16_is_the_float32_run(monkeypatch, tmp_path):
    """`train.dtype: bf16` where the CPU would emulate bf16 (10-18x slower): a warning naming the missing feature, and
    exactly the float32 run's numbers."""
    monkeypatch.setattr(devices, "_cpu_flags", lambda: AVX2_ONLY)
    monkeypatch.setattr(devices, "cpu_bf16_lstm", lambda: False)
    f32 = _train_lstm(tmp_path / "f32")
    with pytest.warns(UserWarning, match=r"no native bf16 .*avx512_bf16, amx_bf16"):
        bf16 = _train_lstm(tmp_path / "bf16", "--set", "train.dtype=bf16")
    assert bf16["default"]["metrics"] == f32["default"]["metrics"]


def test_train_bf16_lstm_through_the_entry_point(tmp_path):
    """The issue's command on this machine, whatever its CPU: it trains (bf16 where the CPU has it natively, float32
    with a one-line warning elsewhere), never a traceback."""
    from readme_commands import check_ran, run_cli

    args = ["train", "--task", "bijection", "--arch", "lstm", "--preset", "smoke", "--steps", "3", "--no-progress"]
    args += ["--set", "train.dtype=bf16", "--set", "eval.n=32", "--out", "run"]
    done = run_cli(args, tmp_path)
    check_ran(args, done)
    assert (tmp_path / "run" / "eval.json").is_file()
    if not devices.cpu_has_native_bf16():
        assert "warning: dtype bf16: " in done.stderr and "no native bf16" in done.stderr


AVX2_LSTM = """
import torch
from windtunnel import devices, runs
from windtunnel.config import build_config
from windtunnel.resolve import resolve_config

cfg = resolve_config(build_config(overrides={"model.arch": "lstm", "model.preset": "smoke", "task.name": "bijection"}))
t = runs.build_task(cfg)
model = runs.build_model(cfg, t.spec, t).eval()
x = t.sample(4, seed=0).inputs
with torch.no_grad():
    ref = model(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
diff = 0.0 if devices.cpu_bf16_lstm() else float((out - ref).abs().max())
print("kernel", devices.cpu_bf16_lstm(), "max_diff", diff)
"""


def test_lstm_under_bf16_autocast_runs_with_onednn_capped_at_avx2():
    """oneDNN capped at AVX2 (`ONEDNN_MAX_CPU_ISA=AVX2`, what an AVX2-only EPYC has) has no bf16 LSTM: the model
    still runs under CPU bf16 autocast, with the float32 numbers."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", AVX2_LSTM], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    words = done.stdout.split()
    assert words[0] == "kernel" and float(words[3]) <= 1e-6


LIMITED = """
import numpy, scipy.linalg, sklearn.cluster, torch
from threadpoolctl import threadpool_info
from windtunnel.devices import limit_threads
limit_threads(1)
pools = threadpool_info()
assert torch.get_num_threads() == 1, torch.get_num_threads()
assert any(p["user_api"] == "blas" for p in pools), pools
assert all(p["num_threads"] == 1 for p in pools), pools
print(len(pools))
"""


def test_limit_threads_holds_torch_and_every_blas_and_openmp_pool_at_the_count():
    """Numpy's, scipy's and scikit-learn's pools (the probes' PCA and clustering) take the run's count, not the
    machine's; in a process of its own, so this one keeps its pools."""
    done = subprocess.run([sys.executable, "-c", LIMITED], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) >= 1


def test_run_job_limits_its_process_to_the_job_s_threads(tmp_path, monkeypatch):
    from windtunnel.executors import base
    from windtunnel.suites.paper import suite

    asked: list[int] = []
    monkeypatch.setattr(base, "limit_threads", asked.append)
    (entry,) = suite("smoke", only={"task": "bijection", "arch": "lstm"})
    base.run_job(base.Job(entry.name, entry.config, str(tmp_path), threads=3))
    assert asked == [3]
