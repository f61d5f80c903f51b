"""The memory probe (geometry/memory.py): the exact posterior as the model reproduces the exact moves, a predictor
that reads only the current observation moves 0 at every lag while the exact filter moves, a sticky chain needs more
carried than the paper's HMM, and `windtunnel probe` writes `memory` for a smoke-trained run."""

from __future__ import annotations

import json
import re

import pytest
import torch
from torch.distributions import Categorical
from typer.testing import CliRunner

from tiny_runs import train_checkpointed
from windtunnel import tasks
from windtunnel.cli import app
from windtunnel.cli.probe_cmd import _summary
from windtunnel.geometry import figures
from windtunnel.geometry import memory as memory_module
from windtunnel.geometry.data import heldout_batch
from windtunnel.geometry.memory import make_edits, memory_probe, reach_ratios, window_predictors
from windtunnel.geometry.probes import single_checkpoint_probes
from windtunnel.geometry.seeds import across_seeds, seed_text
from windtunnel.geometry.stats import bootstrap_ratios
from windtunnel.tasks._util import scatter_posterior
from windtunnel.tasks.hmm import window_filters

SMALL_HMM = {"S": 3, "O": 3, "K": 8}
# The standard tier's HMM transformer at lag 1, seeds 0..4: one seed carries nothing, four carry the exact filter's move
LAG1 = [4e-6, 0.070, 0.067, 0.067, 0.063]


def current_only(task):
    """The filter of the current observation alone (window 1): reads the matrices and o_t, nothing before it."""

    def predict(x: torch.Tensor) -> Categorical:
        t_cents, e_cents, obs = task.parse(x)
        log_t, log_e = ((c.double() / 100).log() for c in (t_cents, e_cents))  # (B,S,S), (B,S,O)
        post = window_filters(log_t, log_e, obs, [1])[1]  # (B,K,S)
        mask = task._scored(x)
        S = task.params.S
        return scatter_posterior(post.reshape(-1, S), mask, (*mask.shape, S))

    return predict


def probe(task, predictors, n=48, **kw):
    b = heldout_batch(task, n)
    return memory_probe(task, b.inputs, b.target_mask, predictors, **kw)


def test_edits_resample_exactly_one_observation_to_another_symbol_and_read_it_lags_later():
    task = tasks.make("hmm", **SMALL_HMM)
    b = heldout_batch(task, 16)
    e = make_edits(task, b.inputs, b.target_mask, max_lag=3, edits=4, seed=1)
    B, E, J = e.reads.shape
    assert (B, E, J) == (16, 4, 3)
    edited = e.inputs.view(B, E, -1)  # (B,E,T)
    diff = edited != b.inputs[:, None]  # (B,E,T)
    assert (diff.sum(-1) == 1).all()  # one token changed per copy
    positions, symbols = task.observation_slots(b.inputs)  # (B,K), (O,)
    where = diff.float().argmax(-1)  # (B,E) the changed position
    i = (positions[:, None, :] == where[..., None]).float().argmax(-1)  # (B,E) which observation it is
    assert (positions.gather(1, i) == where).all()  # an observation, never a matrix entry or a marker
    assert torch.isin(edited.gather(2, where[..., None]), symbols).all()  # still a valid symbol
    assert (i <= task.params.K - 1 - J).all()  # every lag is read for every edit
    assert all(len(set(r.tolist())) == E for r in i)  # distinct observations per sequence
    want = positions.gather(1, (i[..., None] + torch.arange(1, J + 1)).flatten(1)).view(B, E, J)
    assert torch.equal(e.reads, want)  # lag j read at o_{i+j}, where its belief is scored
    task.posterior_for(e.inputs)  # every edited prompt is a valid prompt (raises otherwise)
    again = make_edits(task, b.inputs, b.target_mask, max_lag=3, edits=4, seed=1)
    assert torch.equal(again.inputs, e.inputs)  # deterministic under the seed


def test_exact_posterior_as_the_model_reproduces_the_exact_moves():
    task = tasks.make("hmm", **SMALL_HMM)
    r = probe(task, {"model": task.posterior_for})
    assert r["lags"] == list(range(1, 8))  # J = min(8, K - 1)
    assert r["model"] == pytest.approx(r["exact"], rel=1e-12)
    assert r["model_ratio"] == pytest.approx([1.0] * 7, abs=1e-12)
    assert all(lo == pytest.approx(1.0) and hi == pytest.approx(1.0) for lo, hi in r["ci"]["model_ratio"])
    assert all(lo <= m <= hi for m, (lo, hi) in zip(r["exact"], r["ci"]["exact"], strict=True))
    assert r["exact"][0] > 0.02 and r["exact"][0] > r["exact"][1] > r["exact"][-1] > 0  # fades with the lag
    assert (r["n_sequences"], r["edits_per_sequence"]) == (48, 1)  # K - J = 1 observation each lag reaches


def test_a_predictor_of_the_current_observation_alone_has_no_memory_while_the_exact_filter_has():
    task = tasks.make("hmm")
    r = probe(task, {"model": current_only(task)})
    assert r["lags"] == list(range(1, 9))
    assert max(r["model"]) < 1e-6  # float rounding only: it reads nothing before o_t
    assert max(r["model_ratio"]) < 1e-4
    assert all(e > 0 for e in r["exact"]) and r["exact"][0] > 0.03
    assert r["ci"]["exact"][0][0] > 0.03  # measurably above 0 at lag 1


def test_a_sticky_chain_carries_evidence_further_than_the_papers_hmm():
    lag8 = {}
    for name in ("hmm", "hmm-sticky"):
        task = tasks.make(name)
        lag8[name] = probe(task, {}, n=64)
        assert set(lag8[name]) >= {"lags", "exact", "ci"} and "model" not in lag8[name]
    hmm, sticky = lag8["hmm"], lag8["hmm-sticky"]
    assert sticky["exact"][-1] > 0.01 > 100 * hmm["exact"][-1]  # measured: 0.028 vs 1e-6 bits at lag 8
    assert sticky["ci"]["exact"][-1][0] > hmm["ci"]["exact"][-1][1]
    assert sticky["exact"][0] > hmm["exact"][0]


@pytest.mark.parametrize(("name", "params"), [("bijection", {"V": 5, "L": 4}), ("recall", {}), ("regression", {})])
def test_not_applicable_where_the_task_names_no_observations_to_resample(name, params):
    task = tasks.make(name, **params)
    r = probe(task, {"model": task.posterior_for}, n=4)
    assert "observation_slots" in r["not_applicable"]


def test_too_short_a_sequence_has_no_lag():
    r = probe(tasks.make("hmm", K=1), {}, n=4)
    assert "two observations" in r["not_applicable"]


def test_bootstrap_ratios_are_paired_ratios_of_sums():
    num = torch.tensor([[1.0, 2.0], [3.0, 0.0], [2.0, 4.0]])  # (N=3,M=2)
    den = torch.tensor([[1.0, 1.0], [1.0, 4.0], [1.0, 0.0]])
    est, ci = bootstrap_ratios(num, den, n_boot=500, seed=0)
    assert est.tolist() == pytest.approx([2.0, 6.0 / 5.0])
    assert ci.shape == (2, 2) and ci[0, 0] <= 2.0 <= ci[0, 1]
    assert ci[0, 0] >= 1.0 and ci[0, 1] <= 3.0  # a mean of 1, 3 and 2 resampled stays in [1, 3]
    same, same_ci = bootstrap_ratios(num, num, n_boot=200, seed=3)
    assert same.tolist() == [1.0, 1.0] and same_ci.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert torch.equal(bootstrap_ratios(num, den, n_boot=50, seed=5)[1], bootstrap_ratios(num, den, 50, 5)[1])
    assert bootstrap_ratios(num, torch.zeros_like(num), n_boot=10)[0].isnan().all()  # no denominator: nan
    with pytest.raises(ValueError, match="same"):
        bootstrap_ratios(num, den[:2])


def test_probe_of_a_smoke_trained_run_writes_memory(tmp_path):
    run = train_checkpointed(
        tmp_path / "run", "hmm", {"S": 3, "O": 3, "K": 6}, "transformer", {"n_layers": 1, "n_heads": 2, "d_model": 16}
    )
    res = CliRunner().invoke(app, ["probe", str(run), "--n", "24", "--no-figures"])
    assert res.exit_code == 0, res.output
    m = json.loads((run / "geometry.json").read_text())["memory"]
    J = 5
    assert m["lags"] == list(range(1, J + 1))
    for key in ("model", "exact", "init", "model_ratio", "init_ratio"):
        assert len(m[key]) == J and len(m["ci"][key]) == J, key
        assert all(lo <= v <= hi for v, (lo, hi) in zip(m[key], m["ci"][key], strict=True)), key
    assert all(v >= 0 for v in m["model"] + m["exact"] + m["init"])
    assert m["model"] != m["init"]  # trained and init are different predictors
    line = next(ln for ln in res.output.splitlines() if ln.strip().startswith("memory:"))
    assert f"lag 1 model {m['model'][0]:.4g} / exact {m['exact'][0]:.4g}" in line and f"lag {J} " in line
    assert "lag 3 " not in line  # lags 1, 2, 4 and the last


def test_summary_line_reads_each_lag_beside_the_exact_move():
    mem = {"lags": [1, 2, 3], "model": [0.081, 0.0, 0.002], "exact": [0.085, 0.03, 0.013]}
    others = {name: {"not_applicable": "not probed"} for name in (*single_checkpoint_probes(), "dynamics")}
    r = {"arch": "a", "task": "hmm", "step": 1, "entropy_error_bits": 0.1, **others, "memory": mem}
    (line,) = [ln for ln in _summary(r) if "memory" in ln]
    assert line.startswith("  memory: ") and line.endswith(" bits")
    lags = re.findall(r"lag (\d+) model ([\d.e-]+) / exact ([\d.e-]+)", line)  # each lag beside the exact move
    assert [(int(lag), float(m), float(e)) for lag, m, e in lags] == [
        (1, 0.081, 0.085),
        (2, 0.0, 0.03),
        (3, 0.002, 0.013),
    ]


def test_a_window_filter_moves_as_much_as_the_exact_filter_below_its_window_and_not_at_all_from_it():
    """A ratio of 1 to the exact filter's move is not exactness: "last 2 obs" scores about 1 at lag 1 too, and the
    probe reports that ratio (the shortest window reading each lag, "reach_ratio") beside the model's."""
    task = tasks.make("hmm")
    windows = window_predictors(task, 3)
    assert list(windows) == ["last 1 obs", "last 2 obs", "last 3 obs"]
    assert window_predictors(tasks.make("bijection", V=5, L=4), 3) == {}  # only an HMM has window filters
    r = probe(task, {"model": task.posterior_for, **windows}, n=64)
    assert max(r["last 1 obs_ratio"]) < 1e-4  # reads o_t alone: no move at any lag
    two = r["last 2 obs_ratio"]
    assert two[0] > 0.8 and max(two[1:]) < 1e-4  # as much as the exact filter at lag 1, nothing from lag 2
    assert r["last 3 obs_ratio"][1] > 0.8 and max(r["last 3 obs_ratio"][2:]) < 1e-4
    reach, ci = reach_ratios(r)
    assert reach[:2] == [two[0], r["last 3 obs_ratio"][1]] and reach[3:] == [None] * (len(reach) - 3)
    assert ci[0] == r["ci"]["last 2 obs_ratio"][0]


def test_the_probe_of_a_model_reports_the_window_filters_beside_it(monkeypatch):
    task = tasks.make("hmm", **SMALL_HMM)
    monkeypatch.setattr(memory_module, "model_predictor", lambda m: task.posterior_for)  # the exact filter as model
    r = memory_module.memory(torch.nn.Linear(1, 1), task, heldout_batch(task, 16))
    J = len(r["lags"])
    assert [w for w in range(1, J + 3) if f"last {w} obs" in r] == list(range(1, min(J + 1, SMALL_HMM["K"]) + 1))
    assert r["model_ratio"] == pytest.approx([1.0] * J)
    assert len(r["reach_ratio"]) == J and len(r["ci"]["reach_ratio"]) == J
    assert r["reach_ratio"][0] == r["last 2 obs_ratio"][0]


def test_memory_across_seeds_is_the_per_seed_median_with_its_range_never_a_mean():
    """The standard tier's HMM transformer: a geometric mean over seeds gave 0.010 [0.000, 2.087], like no seed."""
    geos = [{"memory": {"lags": [1], "model": [v], "exact": [0.069], "model_ratio": [v / 0.069]}} for v in LAG1]
    q = across_seeds(geos)["memory: belief move, first lag (bits)"]
    trained = q["trained"]
    assert trained["median"] == 0.067 and trained["range"] == [4e-6, 0.070] and trained["values"] == LAG1
    assert "mean" not in trained and trained["interval"] is None
    assert seed_text(trained) == "median 0.067, range 4.0e-06–0.070 (seeds 4.0e-06, 0.070, 0.067, 0.067, 0.063)"
    assert seed_text(q["baseline"]) == "median 0.069, range 0.069–0.069 (seeds 0.069, 0.069, 0.069, 0.069, 0.069)"
    ratio = across_seeds(geos)["memory: move / exact filter's, first lag"]["trained"]
    assert ratio["median"] == pytest.approx(0.067 / 0.069)
    even = across_seeds(geos[:4])["memory: belief move, first lag (bits)"]["trained"]
    assert even["median"] == pytest.approx((0.067 + 0.067) / 2) and even["range"] == [4e-6, 0.070]


def test_the_memory_figure_overlays_every_seed_beside_the_window_filters(monkeypatch, tmp_path):
    drawn = {}
    monkeypatch.setattr(figures, "_save", lambda fig, path: drawn.setdefault("fig", fig) and path)
    results = [
        (
            seed,
            {
                "lags": [1, 2],
                "model": [v, 0.0],
                "exact": [0.069, 0.01],
                "model_ratio": [v / 0.069, 0.0],
                "last 1 obs_ratio": [0.0, 0.0],
                "last 2 obs_ratio": [0.99, 0.0],
            },
        )
        for seed, v in enumerate(LAG1)
    ]
    assert figures.memory_seeds(results, tmp_path / "m.png") == tmp_path / "m.png"
    move, ratio = drawn["fig"].axes
    seeds = [f"model, seed {s}" for s in range(5)]
    assert move.get_legend_handles_labels()[1] == ["exact filter", *seeds]
    assert ratio.get_legend_handles_labels()[1] == [*seeds, "last 1 obs", "last 2 obs"]
    assert figures.memory_seeds([(0, {"lags": "garbled"})], tmp_path / "n.png") is None
