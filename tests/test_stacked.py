"""Seeds trained stacked (`training.stacked.train_stacked`) against the same seeds trained alone by `train`: equal
weights, evaluations and run directories; resume; a diverging seed; refused groups."""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from windtunnel.errors import TrainingDiverged
from windtunnel.runs import checkpoints
from windtunnel.store import rundir
from windtunnel.suites.paper import run_config
from windtunnel.training import stacked
from windtunnel.training.stacked import StackInterrupted, train_stacked
from windtunnel.training.train import train

# The forward each architecture takes, and how close its stacked weights are to the solo ones after a few steps:
# exact where the stacked forward computes what the solo one does (the transformer's batched matmuls; the LSTM's loop
# fallback), else float32 rounding of batched against unbatched kernels (measured up to 5e-7 after 4 steps).
FORWARD = {"transformer": "vmap", "mamba": "vmap", "lstm": "loop", "mlp": "vmap"}
EXACT = {"transformer", "lstm"}
TOL = {"rtol": 1e-5, "atol": 1e-6}


def _cfgs(arch: str, seeds: list[int], steps: int = 3, **train_keys: Any) -> list[dict[str, Any]]:
    """The smoke tier's HMM cell at `seeds`, shortened: `steps` steps, validation every 2, a small final evaluation."""
    cfgs = []
    for s in seeds:
        cfg = run_config("hmm", arch, "smoke", seed=s)
        cfg["train"].update(steps=steps, eval_every=2, log_every=1, device="cpu", **train_keys)
        cfg["eval"].update(n=32, overrides=[])
        cfgs.append(cfg)
    return cfgs


def _weights(run_dir: Path, step: int | None = None) -> dict[str, torch.Tensor]:
    step = checkpoints.latest_step(run_dir) if step is None else step
    return load_file(str(run_dir / "checkpoints" / f"step_{step:08d}.safetensors"))


def _same_weights(a: Path, b: Path, exact: bool) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        if exact:
            assert torch.equal(wa[k], wb[k]), k
        else:
            torch.testing.assert_close(wa[k], wb[k], **TOL, msg=k)


def _close(a: Any, b: Any, where: str = "eval.json") -> None:
    """Two JSON values equal, numbers to a relative 1e-4 (absolute 1e-6); every string (verdicts) identical."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float) and not (math.isnan(a) and math.isnan(b)):
        assert math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6), f"{where}: {a} != {b}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def _losses(run_dir: Path) -> list[float]:
    return [r["loss"] for r in rundir.read_metrics(run_dir) if "loss" in r]


@pytest.mark.parametrize("arch", list(FORWARD))
def test_stacked_seeds_equal_each_seed_trained_alone(tmp_path, arch):
    cfgs = _cfgs(arch, [0, 1])
    results = train_stacked(cfgs, [tmp_path / f"stacked{i}" for i in range(2)])
    for i, cfg in enumerate(cfgs):
        solo = train(cfg, tmp_path / f"solo{i}", progress=False)
        st, so = tmp_path / f"stacked{i}", tmp_path / f"solo{i}"
        assert isinstance(results[i], dict)
        assert sorted(p.name for p in st.iterdir()) == sorted(p.name for p in so.iterdir())
        assert checkpoints.list_checkpoints(st) == checkpoints.list_checkpoints(so) == [3]
        _same_weights(st, so, exact=arch in EXACT)
        _close(json.loads((st / "eval.json").read_text()), json.loads((so / "eval.json").read_text()))
        _close(results[i], solo)
        assert results[i]["default"]["verdict"] == solo["default"]["verdict"]
        torch.testing.assert_close(_losses(st), _losses(so), rtol=1e-5, atol=0)
        lines = [r for r in rundir.read_metrics(st) if "loss" in r]
        assert {(r["stacked"], r["stacked_forward"]) for r in lines} == {(2, FORWARD[arch])}
        assert all(r["train_s"] > 0 and r["tokens_per_s"] > 0 for r in lines)
        if arch in EXACT:  # the optimiser state and the saved RNG state too: byte for byte
            name = "checkpoints/step_00000003.state.safetensors"
            assert (st / name).read_bytes() == (so / name).read_bytes()
    # the seeds trained on streams of their own: their losses and weights differ
    assert _losses(tmp_path / "stacked0") != _losses(tmp_path / "stacked1")
    w0, w1 = _weights(tmp_path / "stacked0"), _weights(tmp_path / "stacked1")
    assert any(not torch.equal(w0[k], w1[k]) for k in w0)


def test_compiled_stacked_seeds_equal_the_eager_stack(tmp_path):
    """`train.compile: reduce-overhead` (the GPU check's CUDA graphs; on a CPU the compiled code without them) runs the
    stacked forward and backward as one compiled graph: the weights, losses and verdicts of the eager stack, to float
    rounding (inductor's fused kernels against eager ones, which Muon's orthogonalised updates carry into the
    weights)."""
    torch._dynamo.reset()
    eager = [tmp_path / f"eager{i}" for i in range(2)]
    fast = [tmp_path / f"compiled{i}" for i in range(2)]
    train_stacked(_cfgs("transformer", [0, 1]), eager)
    results = train_stacked(_cfgs("transformer", [0, 1], compile="reduce-overhead"), fast)
    for e, c, result in zip(eager, fast, results, strict=True):
        assert isinstance(result, dict), result
        assert json.loads((c / "config.json").read_text())["train"]["compile"] == "reduce-overhead"
        wc, we = _weights(c), _weights(e)
        assert wc.keys() == we.keys()
        for k in wc:  # measured: at most 2e-6 apart after 3 steps, on weights of about 0.07
            torch.testing.assert_close(wc[k], we[k], rtol=1e-4, atol=1e-5, msg=k)
        torch.testing.assert_close(_losses(c), _losses(e), rtol=1e-5, atol=0)
        _close(json.loads((c / "eval.json").read_text()), json.loads((e / "eval.json").read_text()))
        assert {r["stacked_forward"] for r in rundir.read_metrics(c) if "loss" in r} == {"vmap"}


def _interrupt_at(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    """The next stacked loop stops at the start of `step` as a Ctrl-C would (KeyboardInterrupt)."""
    real = stacked._losses

    def losses(alive, at, forward):
        if at == step:
            raise KeyboardInterrupt
        return real(alive, at, forward)

    monkeypatch.setattr(stacked, "_losses", losses)


def test_an_interrupted_stack_resumes_exactly_with_its_seeds_at_different_steps(tmp_path, monkeypatch):
    cfgs = _cfgs("transformer", [0, 1], steps=5, checkpoint_every=1)
    whole = [tmp_path / f"whole{i}" for i in range(2)]
    train_stacked(cfgs, whole)
    parts = [tmp_path / f"part{i}" for i in range(2)]
    with monkeypatch.context() as m:
        _interrupt_at(m, 3)
        with pytest.raises(KeyboardInterrupt):
            train_stacked(cfgs, parts)
    assert [checkpoints.latest_step(d) for d in parts] == [2, 2]
    with monkeypatch.context() as m:  # seed 0 alone goes one step further: the two now resume from steps 3 and 2
        _interrupt_at(m, 4)
        with pytest.raises(KeyboardInterrupt):
            train_stacked(cfgs[:1], parts[:1], resume=True)
    assert [checkpoints.latest_step(d) for d in parts] == [3, 2]
    results = train_stacked(cfgs, parts, resume=True)
    assert all(isinstance(r, dict) for r in results)
    for a, b in zip(parts, whole, strict=True):
        _same_weights(a, b, exact=True)
        assert _losses(a) == _losses(b)  # metrics.jsonl: each step once, as in the uninterrupted run
        _close(json.loads((a / "eval.json").read_text()), json.loads((b / "eval.json").read_text()))
    stacks = [r["stacked"] for r in rundir.read_metrics(parts[1]) if "loss" in r]
    assert stacks == [2, 2, 1, 2, 2]  # step 3: seed 1 trained alone until seed 0 joined at step 4


def test_sigterm_checkpoints_every_seed_at_the_current_step_and_a_resume_continues_exactly(tmp_path, monkeypatch):
    cfgs = _cfgs("transformer", [0, 1], steps=5, checkpoint_every=0)  # checkpoints only at the last step
    whole = [tmp_path / f"whole{i}" for i in range(2)]
    train_stacked(cfgs, whole)
    parts = [tmp_path / f"part{i}" for i in range(2)]
    real = stacked._losses

    def losses(alive, at, forward):
        if at == 3:  # SIGTERM arrives during step 3
            os.kill(os.getpid(), signal.SIGTERM)
        return real(alive, at, forward)

    before = signal.getsignal(signal.SIGTERM)
    with monkeypatch.context() as m:
        m.setattr(stacked, "_losses", losses)
        with pytest.raises(StackInterrupted) as err:
            train_stacked(cfgs, parts, handle_signals=True)
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is restored
    assert (err.value.step, err.value.saved, err.value.exit_code) == (3, True, 128 + signal.SIGTERM)
    assert [checkpoints.list_checkpoints(d) for d in parts] == [[3], [3]]
    assert all(not (d / "eval.json").exists() for d in parts)
    results = train_stacked(cfgs, parts, resume=True)
    assert all(isinstance(r, dict) for r in results)
    for a, b in zip(parts, whole, strict=True):
        _same_weights(a, b, exact=True)
        assert _losses(a) == _losses(b)
        _close(json.loads((a / "eval.json").read_text()), json.loads((b / "eval.json").read_text()))


@pytest.mark.parametrize("arch", ["transformer", "lstm"])
def test_a_diverging_seed_fails_alone_and_leaves_the_others_as_without_it(tmp_path, monkeypatch, arch):
    cfgs = _cfgs(arch, [0, 1, 2], steps=4)
    real = stacked._after_step

    def after_step(s, step, *args):
        real(s, step, *args)
        if s.cfg.seed == 1 and step == 1:  # seed 1's weights turn NaN after its first step
            with torch.no_grad():
                for p in s.model.parameters():
                    p.fill_(float("nan"))

    with monkeypatch.context() as m:
        m.setattr(stacked, "_after_step", after_step)
        results = train_stacked(cfgs, [tmp_path / f"with{i}" for i in range(3)])
    assert isinstance(results[1], TrainingDiverged) and results[1].step == 2
    assert isinstance(results[0], dict) and isinstance(results[2], dict)
    diverged = tmp_path / "with1"
    assert not (diverged / "eval.json").exists() and checkpoints.list_checkpoints(diverged) == []
    assert [r["step"] for r in rundir.read_metrics(diverged) if "loss" in r] == [1]
    without = train_stacked([cfgs[0], cfgs[2]], [tmp_path / "without0", tmp_path / "without2"])
    assert all(isinstance(r, dict) for r in without)
    for i in (0, 2):
        _same_weights(tmp_path / f"with{i}", tmp_path / f"without{i}", exact=True)
        stacks = [r["stacked"] for r in rundir.read_metrics(tmp_path / f"with{i}") if "loss" in r]
        assert stacks == [3, 3, 2, 2]  # seed 1 was in the forward of step 2 (its loss NaN), then left the stack
    w0, w2 = _weights(tmp_path / "with0"), _weights(tmp_path / "with2")
    assert any(not torch.equal(w0[k], w2[k]) for k in w0)


def test_groups_that_are_not_one_config_at_distinct_seeds_are_refused(tmp_path):
    a, b = _cfgs("transformer", [0, 1])
    b["train"]["lr"] = 0.01
    dirs = [tmp_path / "a", tmp_path / "b"]
    with pytest.raises(ValueError, match=r"share one config except `seed`; seed 1 differs from seed 0 in train\.lr"):
        train_stacked([a, b], dirs)
    with pytest.raises(ValueError, match=r"seed: each stacked run needs a seed of its own; \[0\]"):
        train_stacked(_cfgs("transformer", [0, 0]), dirs)
    with pytest.raises(ValueError, match="train.aux_target"):
        train_stacked(_cfgs("transformer", [0, 1], aux_target="next_state_prior", aux_weight=0.5), dirs)
    with pytest.raises(ValueError, match="run_dirs: each run needs a directory of its own"):
        train_stacked(_cfgs("transformer", [0, 1]), [tmp_path / "a", tmp_path / "a"])
    assert not any(d.exists() for d in dirs)  # refused before anything is created


@pytest.mark.parametrize("arch", ["transformer", "oracle"])
def test_baselines_and_untrained_runs_are_evaluated_as_train_does(tmp_path, arch):
    cfgs = _cfgs(arch, [0, 1], steps=0)
    results = train_stacked(cfgs, [tmp_path / "s0", tmp_path / "s1"])
    solo = train(cfgs[1], tmp_path / "solo", progress=False)
    assert all(isinstance(r, dict) for r in results)
    _close(results[1], solo)
    assert checkpoints.list_checkpoints(tmp_path / "s0") == ([0] if arch == "transformer" else [])


def test_dropout_draws_each_seeds_own_random_numbers_as_alone(tmp_path):
    """An LSTM with dropout (the loop forward, each seed under its own RNG state) ends bit for bit as trained alone."""
    cfgs = _cfgs("lstm", [0, 1])
    for cfg in cfgs:
        cfg["model"]["size"] = {"n_layers": 2, "dropout": 0.3}
    train_stacked(cfgs, [tmp_path / "stacked0", tmp_path / "stacked1"])
    for i, cfg in enumerate(cfgs):
        train(cfg, tmp_path / f"solo{i}", progress=False)
        _same_weights(tmp_path / f"stacked{i}", tmp_path / f"solo{i}", exact=True)
        name = "checkpoints/step_00000003.state.safetensors"  # the saved RNG state too
        assert (tmp_path / f"stacked{i}" / name).read_bytes() == (tmp_path / f"solo{i}" / name).read_bytes()


def test_a_finished_stack_resumed_is_only_evaluated_again(tmp_path):
    cfgs = _cfgs("transformer", [0, 1], steps=2)
    dirs = [tmp_path / "s0", tmp_path / "s1"]
    first = train_stacked(cfgs, dirs)
    again = train_stacked(cfgs, dirs, resume=True)
    assert all(isinstance(r, dict) for r in again)
    _close(again, first)
    assert [len(_losses(d)) for d in dirs] == [2, 2]  # no step trained again
