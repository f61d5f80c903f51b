"""The probes measured as the authors measured them: key statistics on both token sets (key tokens 0..V-1, the
authors' set, and value tokens), the manifold at both position sets (value and scored positions) for the value
vectors and the final representation, attention mass on the evidence beside the Bayes-implied spread, each with
init and baseline numbers, and the across-seed summary."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from tiny_runs import train_checkpointed
from windtunnel import models, tasks
from windtunnel.evaluation.metrics import seed_interval
from windtunnel.geometry.attention import evidence_stats
from windtunnel.geometry.data import collect
from windtunnel.geometry.keys import key_orthogonality, token_sets
from windtunnel.geometry.registry import seed_quantities
from windtunnel.geometry.seeds import across_seeds, dig
from windtunnel.tasks.bijection import value_positions

SIZE = {"n_layers": 2, "n_heads": 2, "d_model": 16}
STATS = ("pc1_var", "pc12_var", "participation_ratio", "pc1_spearman")


def small(task, seed: int = 0):
    torch.manual_seed(seed)
    return models.make("transformer", task.spec, **SIZE)


def finite(x) -> bool:
    return isinstance(x, float) and math.isfinite(x)


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """A tiny trained sep-vocab bijection transformer (8 steps, seed 0), probed: its geometry.json."""
    from windtunnel.geometry.run import probe_run

    run = train_checkpointed(
        tmp_path_factory.mktemp("proto") / "run", "bijection", {"V": 6, "L": 5}, "transformer", SIZE
    )
    probe_run(run, n=32, figures=False)
    return run, json.loads((run / "geometry.json").read_text())


def test_token_sets_are_the_authors_key_tokens_and_the_value_tokens():
    sep, paired = tasks.make("bijection", V=6, L=5).spec, tasks.make("bijection", V=6, L=5, format="paired").spec
    assert {k: v.tolist() for k, v in token_sets(sep).items()} == {
        "key_tokens": list(range(6)),  # qkv_analysis.py: tok_emb(arange(V))
        "value_tokens": list(range(6, 12)),
    }
    assert token_sets(paired)["key_tokens"].tolist() == token_sets(paired)["value_tokens"].tolist() == list(range(6))
    assert list(token_sets(tasks.make("hmm").spec)) == ["all_tokens"]


def test_key_statistics_follow_the_token_set_they_are_computed_on():
    task = tasks.make("bijection", V=4, L=4)
    model = small(task)  # 2 layers, 2 heads of 8
    d = model.d_model
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight[d : 2 * d] = torch.eye(d)  # W_K = I
        model.embed.tok.weight[0:4] = torch.ones(d)  # key tokens: identical keys, cos 1
        model.embed.tok.weight[4:8] = torch.eye(d)[[0, 1, 8, 9]] * 3  # value tokens: orthogonal in both heads
    r = key_orthogonality(model, init_model=small(task, seed=1))
    keys, values = r["by_token_set"]["key_tokens"], r["by_token_set"]["value_tokens"]
    assert keys["tokens"] == [0, 3] and values["tokens"] == [4, 7]
    assert keys["authors_signed_mean_cos_per_layer"] == pytest.approx([1.0, 1.0])
    assert keys["mean_abs_cos_per_layer"] == pytest.approx([1.0, 1.0])
    assert values["authors_signed_mean_cos_per_layer"] == pytest.approx([0.0, 0.0], abs=1e-6)
    # the old top-level names stay, labelled with the set they measure (value tokens: not the authors' set)
    assert r["token_set"] == "value_tokens"
    assert r["authors_signed_mean_cos_per_layer"] == values["authors_signed_mean_cos_per_layer"]
    for s in (keys, values):
        assert s["n_tokens"] == 4 and s["d_head"] == 8
        assert all(finite(s[k][0]) for k in ("init_mean_abs_cos_per_layer", "init_authors_signed_mean_cos_per_layer"))
        assert finite(s["gaussian_baseline"]) and finite(s["authors_gaussian_baseline"]["mean"])


def test_value_positions_carry_the_authors_entropy():
    # sep-vocab V=4: k2 v1 k0 v3 k1 v0 k3 (values are tokens 4..7); 3 values revealed before the last key
    inputs = torch.tensor([[2, 5, 0, 7, 1, 4, 3]])
    mask, bits = value_positions(inputs, V=4, L=4, offset=4)
    assert mask[0].tolist() == [False, True, False, True, False, True, False]
    assert bits[0, mask[0]].tolist() == pytest.approx([2.0, math.log2(3), 1.0])  # log2(V - #values before)
    # with replacement a repeated value is counted once; paired format: the query at 2L is not a value position
    inputs = torch.tensor([[1, 2, 1, 2, 0, 3, 1]])
    mask, bits = value_positions(inputs, V=4, L=3, offset=0)
    assert mask[0].tolist() == [False, True, False, True, False, True, False]
    assert bits[0, mask[0]].tolist() == pytest.approx([2.0, math.log2(3), math.log2(3)])
    task = tasks.make("bijection", V=6, L=5)
    batch = task.sample(8, seed=0)
    m, h = task.value_positions(batch.inputs)
    # without replacement the value at 2t+1 has the entropy of its own key at 2t
    from windtunnel.evaluation.metrics import entropy_bits

    key_h = entropy_bits(batch.posterior).double()[:, 0:-1:2]  # (B,L-1)
    assert torch.allclose(h[:, 1::2], key_h) and bool(m[:, 1::2].all())


def test_evidence_stats_against_uniform_and_exact_attention():
    task = tasks.make("bijection", V=6, L=5)
    data = collect(small(task), task, n=4)
    rows, evidence = task.attention_evidence(data.batch.inputs, data.mask)["unseen_value"]
    T = data.mask.shape[1]
    causal = torch.ones(T, T).tril()
    uniform = (causal / causal.sum(-1, keepdim=True)).expand(4, 2, T, T)  # (B,H,T,T)
    ev = evidence.double()
    exact = ev / ev.sum(-1, keepdim=True).clamp_min(1)  # (B,T,T) even over the revealed values
    r = evidence_stats([uniform, exact[:, None].expand(4, 2, T, T)], rows, evidence)
    assert r["mass_per_layer"][0] == pytest.approx(r["uniform_mass"])  # uniform attention: the chance level
    assert r["entropy_bits_per_layer"][0] == pytest.approx(r["uniform_entropy_bits"])
    assert r["mass_per_layer"][1] == pytest.approx(r["bayes_mass"]) and r["bayes_mass"] == 1.0
    assert r["spread_bits_per_layer"][1] == pytest.approx(r["bayes_entropy_bits"])
    assert r["entropy_bits_per_layer"][1] == pytest.approx(r["bayes_entropy_bits"])
    assert 0 < r["uniform_mass"] < 1 and r["bayes_entropy_bits"] < r["uniform_entropy_bits"]


def test_trained_probe_measures_both_token_sets_and_both_position_sets(probed):
    _, g = probed
    assert g["seed"] == 0 and g["init_source"].startswith("runs.build_model")
    by_set = g["keys"]["by_token_set"]
    assert set(by_set) == {"key_tokens", "value_tokens"}
    for s in by_set.values():
        for k in (
            "mean_abs_cos_per_layer",
            "authors_signed_mean_cos_per_layer",
            "init_mean_abs_cos_per_layer",
            "init_authors_signed_mean_cos_per_layer",
        ):
            assert all(finite(x) for x in s[k])
        assert finite(s["gaussian_baseline"]) and finite(s["authors_gaussian_baseline"]["mean"])
    # sep-vocab: key and value tokens have different embeddings, so their statistics differ
    key0 = by_set["key_tokens"]["authors_signed_mean_cos_per_layer"][0]
    value0 = by_set["value_tokens"]["authors_signed_mean_cos_per_layer"][0]
    assert key0 != pytest.approx(value0, abs=1e-6)
    assert g["keys"]["authors_signed_mean_cos_per_layer"][0] == value0
    sets = g["manifold"]["by_position_set"]
    for pos in ("value_positions", "scored_positions"):
        for rep in ("values", "final"):
            m = sets[pos][rep]
            assert all(finite(m[k]) and finite(m["init"][k]) and finite(m["gaussian"][k]) for k in STATS), (pos, rep)
            assert 1 <= m["participation_ratio"] <= 16 + 1e-9 and m["pc1_var"] <= m["pc12_var"] <= 1 + 1e-9
            assert m["gaussian"]["n_points"] == m["n_points"] == m["context_blind"]["n_points"]
            # sep-vocab without replacement: the entropy is a function of position, so within position there is
            # nothing to measure -- for the model, at init and for every reference alike
            for part in (m, m["init"], m["gaussian"], m["context_blind"]):
                assert "function of the position alone" in part["within_position"]["not_measurable"]
            # ... and the pooled statistics are position's: the context-blind reference reaches R^2 1, |rho| ~1
            assert m["context_blind"]["entropy_r2"] == pytest.approx(1.0, abs=1e-6)
            assert abs(m["context_blind"]["pc1_spearman"]) > 0.95
    assert sets["value_positions"]["final"]["n_points"] != sets["scored_positions"]["final"]["n_points"]
    # the top level still is the scored positions, without the baselines
    assert g["manifold"]["final"] == {
        k: v for k, v in sets["scored_positions"]["final"].items() if k not in ("init", "gaussian", "context_blind")
    }
    ev = g["attention"]["unseen_value_evidence"]
    assert ev["mass_per_layer"] == g["attention"]["unseen_value_mass_per_layer"] and len(ev["mass_per_layer"]) == 2
    assert all(finite(x) for x in ev["init_mass_per_layer"] + ev["spread_bits_per_layer"])
    assert ev["bayes_mass"] == 1.0 and 0 < ev["uniform_mass"] < 1
    assert g["attention"]["seen_key_match_evidence"] is None  # sep-vocab without replacement: no key repeats


def test_across_seed_intervals(probed):
    _, g = probed
    other = copy.deepcopy(g)
    other["seed"] = 1
    other["keys"]["by_token_set"]["key_tokens"]["authors_signed_mean_cos_per_layer"][0] += 0.1
    name = "authors' L0 signed key cos, key tokens"
    one = across_seeds([g])[name]
    assert one["trained"]["n_seeds"] == 1 and one["trained"]["interval"] is None
    two = across_seeds([g, other])
    vals = [dig(x, "keys", "by_token_set", "key_tokens", "authors_signed_mean_cos_per_layer", 0) for x in (g, other)]
    assert two[name]["trained"]["values"] == vals
    z = [math.atanh(v) for v in vals]  # a signed mean cosine: its interval on Fisher's z, back-transformed
    assert two[name]["trained"]["interval"] == pytest.approx([math.tanh(t) for t in seed_interval(z)])
    assert two[name]["trained"]["mean"] == pytest.approx(math.tanh(sum(z) / 2)) and two[name]["trained"]["scale"]
    assert two[name]["init"]["n_seeds"] == 2
    assert two[name]["baseline"]["interval"] == pytest.approx([two[name]["baseline"]["mean"]] * 2)  # one draw, twice
    quantities = {q[0] for q in seed_quantities()}
    assert (
        {"PC1 var, values at value positions", "|Spearman(PC1, H)|, final at scored positions"}
        <= set(two)
        <= quantities
    )
    within = two["|Spearman(PC1, H)| within position, final at scored positions"]
    assert "function of the position alone" in within["trained"]["not_measurable"]
    assert "not_measurable" in within["init"] and "not_measurable" in within["baseline"]
    assert within["baseline_label"] == "position + own input (context-blind)"
    assert "L0 key mean |cos|, all tokens" not in two  # no seed has the number: left out


def test_report_geometry_across_seeds_table(probed):
    from windtunnel.report.build import geometry_across_seeds
    from windtunnel.report.collect import read_run

    run, g = probed
    first = read_run(run)
    second = copy.deepcopy(first)
    second.seed, second.config = 1, {**first.config, "seed": 1}
    assert second.geometry is not None
    second.geometry["manifold"]["by_position_set"]["value_positions"]["values"]["pc1_var"] = 0.5
    rows, data = geometry_across_seeds([first, second])
    assert len(data) == 1 and data[0]["seeds"] == [0, 1]
    row = next(r for r in rows if r[2] == "PC1 var, values at value positions")
    vals = [g["manifold"]["by_position_set"]["value_positions"]["values"]["pc1_var"], 0.5]
    logit = [math.log(v / (1 - v)) for v in vals]  # a share of variance: its interval on the logit scale
    mean, lo, hi = (1 / (1 + math.exp(-t)) for t in (sum(logit) / 2, *seed_interval(logit)))
    assert row[3] == f"{mean:.3f} [{lo:.3f}, {hi:.3f}]" and row[-1] == "2"
    assert 0 <= lo <= mean <= hi <= 1
    assert row[5].startswith("Gaussian points: ")
    within = next(r for r in rows if r[2] == "entropy R² within position, final at scored positions")
    assert within[3:6] == ["not measurable", "not measurable", "position + own input (context-blind): not measurable"]


def test_finished_run_without_geometry_is_probed_by_its_job(tmp_path):
    from windtunnel.executors.base import Job, run_job
    from windtunnel.reproduce import suite_jobs
    from windtunnel.suites.paper import SuiteRun

    run = train_checkpointed(tmp_path / "runs" / "r", "bijection", {"V": 6, "L": 5}, "transformer", SIZE)
    (run / "done.json").write_text(json.dumps({"wall_s": 1.0, "probe": "skipped"}))
    config = json.loads((run / "config.json").read_text())
    assert run_job(Job("r", config, str(tmp_path / "runs"), probe=False))["skipped"]
    assert not (run / "geometry.json").exists()
    assert run_job(Job("r", config, str(tmp_path / "runs"), probe=True))["skipped"]
    assert (run / "geometry.json").exists()
    entries = [SuiteRun(f"r-s{s}", {**config, "seed": s}) for s in (0, 1, 2)]
    assert [j.probe for j in suite_jobs(entries, tmp_path, True)] == [True, True, True]
