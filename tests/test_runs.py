"""Run directories: atomic writes, safetensors checkpoints (weights + optimiser + RNG), corruption, load_run."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from windtunnel import errors, runs, seeds
from windtunnel.config import build_config
from windtunnel.models import baselines
from windtunnel.resolve import resolve_config
from windtunnel.runs import checkpoints
from windtunnel.store import rundir
from windtunnel.store.records.run_dir import ConfigFile


class Tied(nn.Module):
    """Tiny model with tied weights (safetensors refuses shared storage unless we clone)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(5, 3)
        self.head = nn.Linear(3, 5, bias=False)
        self.head.weight = self.emb.weight
        self.norm = nn.LayerNorm(3)


def _trained_pair():
    torch.manual_seed(0)
    m = Tied()
    opt = torch.optim.AdamW(m.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        m.head(m.norm(m.emb(torch.tensor([1, 2, 3])))).sum().backward()
        opt.step()
    return m, opt


def test_checkpoint_round_trip_restores_weights_optimizer_and_rng(tmp_path):
    m, opt = _trained_pair()
    torch.manual_seed(123)
    checkpoints.save_checkpoint(tmp_path, 3, m, opt)
    expected_draw = torch.rand(4)
    m2 = Tied()
    opt2 = torch.optim.AdamW(m2.parameters(), lr=0.1)
    meta = checkpoints.load_checkpoint(tmp_path, 3, m2, opt2, restore_rng=True)
    assert meta["step"] == 3 and checkpoints.latest_step(tmp_path) == 3
    assert checkpoints.list_checkpoints(tmp_path) == [3]
    assert torch.equal(torch.rand(4), expected_draw)
    for a, b in zip(m.state_dict().values(), m2.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert m2.head.weight is m2.emb.weight  # tying survives loading
    s1, s2 = opt.state_dict(), opt2.state_dict()
    for pid in s1["state"]:
        for k in s1["state"][pid]:
            assert torch.equal(torch.as_tensor(s1["state"][pid][k]), torch.as_tensor(s2["state"][pid][k]))
    assert [g["lr"] for g in s1["param_groups"]] == [g["lr"] for g in s2["param_groups"]]


@pytest.mark.parametrize("which", ["safetensors", "state.safetensors"])
def test_truncated_checkpoint_is_a_clear_error(tmp_path, which):
    m, opt = _trained_pair()
    checkpoints.save_checkpoint(tmp_path, 3, m, opt)
    p = tmp_path / "checkpoints" / f"step_00000003.{which}"
    p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])
    with pytest.raises(errors.CheckpointError, match=r"step_00000003\..*is corrupted or truncated"):
        checkpoints.load_checkpoint(tmp_path, 3, Tied(), torch.optim.AdamW(Tied().parameters()), restore_rng=True)


def test_bitflip_and_missing_checkpoint_detected(tmp_path):
    m, _ = _trained_pair()
    checkpoints.save_checkpoint(tmp_path, 1, m)
    p = tmp_path / "checkpoints" / "step_00000001.safetensors"
    raw = bytearray(p.read_bytes())
    raw[-1] ^= 0xFF
    p.write_bytes(bytes(raw))
    with pytest.raises(errors.CheckpointError, match="corrupted or truncated: checksum"):
        checkpoints.load_checkpoint(tmp_path, 1, Tied())
    with pytest.raises(errors.CheckpointError, match="missing"):
        checkpoints.load_checkpoint(tmp_path, 7, Tied())
    (tmp_path / "checkpoints" / "step_00000001.state.json").write_text('{"step": 1, "sha')
    with pytest.raises(errors.CheckpointError, match="corrupted or truncated"):
        checkpoints.load_checkpoint(tmp_path, 1, Tied())


def test_atomic_write_and_metrics_truncation(tmp_path):
    rundir.atomic_write(tmp_path / "a.txt", "one")
    rundir.atomic_write(tmp_path / "a.txt", "two")
    assert (tmp_path / "a.txt").read_text() == "two"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]  # no temp files left
    log = rundir.MetricsLog(tmp_path)
    for s in (1, 2, 3, 4):
        log.write({"step": s, "loss": float(s)})
    log.close()
    with open(tmp_path / rundir.METRICS, "a") as f:
        f.write('{"step": 5, "lo')  # partial line from a crash
    assert [r["step"] for r in rundir.read_metrics(tmp_path)] == [1, 2, 3, 4]
    rundir.truncate_metrics(tmp_path, 2)
    assert [r["step"] for r in rundir.read_metrics(tmp_path)] == [1, 2]


def test_load_run_of_baseline_and_missing_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        runs.load_run(tmp_path)
    cfg = resolve_config(build_config(overrides={"model.arch": "uniform"}))
    ConfigFile.write(tmp_path, cfg)
    run = runs.load_run(tmp_path)
    assert run.config == cfg and run.checkpoints() == [] and run.metrics() == [] and run.eval().entries == {}
    assert isinstance(run.model, baselines.Uniform)
    assert json.loads((tmp_path / "config.json").read_text())["model"]["arch"] == "uniform"


def test_run_without_checkpoint_has_no_model(tmp_path):
    cfg = resolve_config(build_config(overrides={"model.preset": "smoke"}))
    ConfigFile.write(tmp_path, cfg)
    with pytest.raises(errors.CheckpointError, match="no checkpoint"):
        _ = runs.load_run(tmp_path).model


def test_data_streams_are_disjoint_and_32_bit():
    """Training, validation and test seeds never meet, across run seeds too; test is the same for every run."""
    train = {seeds.train_seed(s, step) for s in (0, 1, 7) for step in (0, 1, 2**20, 2**31 - 1, 2**31 + 5)}
    val = {seeds.val_seed(s, i) for s in (0, 1, 7) for i in (0, 1, 2**29, 2**30 + 3)}
    test = {seeds.test_seed(i) for i in (0, 1, 2**29, 2**30 - 1, 2**30 + 2)}
    for drawn, (lo, hi) in ((train, seeds.TRAIN_RANGE), (val, seeds.VALIDATION_RANGE), (test, seeds.TEST_RANGE)):
        assert all(lo <= x < hi for x in drawn)
    assert seeds.TRAIN_RANGE[1] <= seeds.VALIDATION_RANGE[0] and seeds.VALIDATION_RANGE[1] <= seeds.TEST_RANGE[0]
    assert seeds.TEST_RANGE[1] <= 2**32
    assert not train & val and not train & test and not val & test
    assert seeds.train_seed(0, 1) != seeds.train_seed(1, 1) and seeds.val_seed(0, 0) != seeds.val_seed(1, 0)
    assert seeds.stream_seed("test", 3, 5) == seeds.stream_seed("test", 4, 5) == seeds.test_seed(5)
    with pytest.raises(ValueError, match="stream"):
        seeds.stream_seed("train", 0, 0)


def test_training_reads_validation_and_evaluation_reads_test(monkeypatch, tmp_path):
    """Which seeds each stage samples: training steps from train_seed, periodic evaluation from val_seed, the
    final (reported) evaluation from test_seed."""
    from windtunnel.tasks.bijection import Bijection
    from windtunnel.training import train

    seen: list[int] = []
    sample = Bijection.sample

    def spy(self, batch_size, seed=None, generator=None, device=None):
        seen.append(seed)
        return sample(self, batch_size, seed=seed, generator=generator, device=device)

    monkeypatch.setattr(Bijection, "sample", spy)
    cfg = build_config(
        overrides={
            "model.preset": "smoke",
            "train.steps": 4,
            "train.eval_every": 2,
            "train.eval_size": 8,
            "eval.n": 8,
            "eval.batch_size": 8,
            "seed": 3,
        }
    )
    train.train(cfg, tmp_path / "run", progress=False)
    steps = [seeds.train_seed(3, s) for s in range(1, 5)]
    assert [s for s in seen if s in steps][-4:] == steps  # the steps in order (after a check of the first batch)
    assert seeds.val_seed(3, 0) in seen
    assert seen[-1] == seeds.test_seed(0)
    assert not any(seeds.TEST_RANGE[0] <= s < seeds.TEST_RANGE[1] for s in seen[:-1])
