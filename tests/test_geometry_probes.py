"""Geometry probes on smoke-sized models of every architecture, hand-built known answers, and `windtunnel probe`."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from tiny_runs import train_checkpointed
from windtunnel import models, tasks
from windtunnel.cli import app
from windtunnel.evaluation.metrics import kl_bits
from windtunnel.geometry.attention import sharpening
from windtunnel.geometry.data import collect
from windtunnel.geometry.dynamics import frame_precision
from windtunnel.geometry.keys import key_orthogonality
from windtunnel.geometry.lens import logit_lens
from windtunnel.geometry.probes import probe_model
from windtunnel.models.base import predictive

SIZES = {
    "transformer": {"n_layers": 2, "n_heads": 2, "d_model": 16},
    "mamba": {"n_layers": 2, "d_model": 16},
    "lstm": {"n_layers": 2, "d_model": 16},
    "mlp": {"n_layers": 1, "d_model": 16, "d_emb": 4},
    "mlp-pointwise": {"n_layers": 1, "d_model": 16},
}
TASKS = {"bijection": {"V": 6, "L": 5}, "hmm": {}, "regression": {}}


def small(arch: str, task, seed: int = 0):
    torch.manual_seed(seed)
    return models.make(arch, task.spec, **SIZES[arch])


def applied(r: dict) -> bool:
    return "not_applicable" not in r and "error" not in r


@pytest.mark.parametrize("task_name", list(TASKS))
@pytest.mark.parametrize("arch", list(SIZES))
def test_every_probe_runs_and_is_in_range(arch, task_name):
    task = tasks.make(task_name, **TASKS[task_name])
    r, data = probe_model(small(arch, task), task, n=16)
    T = task.spec.seq_len
    for name in ("keys", "attention", "manifold", "clusters", "lens", "ablation"):
        assert "error" not in r[name], (name, r[name])
    has_attn = arch == "transformer"
    assert applied(r["keys"]) == (has_attn and task.spec.input_kind == "tokens")
    assert applied(r["attention"]) == has_attn
    if applied(r["keys"]):
        for layer in r["keys"]["mean_abs_cos_per_head"]:
            assert all(0 <= c <= 1 for c in layer)
        assert 0 < r["keys"]["gaussian_baseline"] < 1
    if has_attn:
        for layer in r["attention"]["entropy_bits_per_head"]:
            assert all(-1e-9 <= h <= math.log2(T) + 1e-9 for h in layer)
    m = r["manifold"]["final"]
    assert 0 <= m["pc1_var"] <= m["pc12_var"] <= 1 + 1e-9
    assert m["entropy_r2"] <= 1 and -1 <= m["best_pc_spearman"] <= 1 and m["dim95"] >= 1
    within = m["within_position"]
    if task_name == "bijection":  # without replacement: the entropy is a function of position
        assert "function of the position alone" in within["not_measurable"]
    else:
        assert within["n_points"] >= 10 and -1 <= within["pc1_spearman"] <= 1 and within["entropy_r2"] <= 1
    assert applied(r["manifold"]["values"]) == has_attn
    # clusters only where the posterior has a definite most likely state (HMM)
    assert applied(r["clusters"]) == (task_name == "hmm")
    if task_name == "hmm":
        c = r["clusters"]
        assert -1 <= c["ari"] <= 1 and -1 <= c["silhouette"] <= 1 and c["entropy_r2"] <= 1 and c["k"] == 5
        assert c["within_position"]["entropy_r2"] <= 1  # the HMM's entropy varies within a position
    kl = r["lens"]["kl_bits_per_layer"]
    assert len(kl) == len(data.resid) and all(k >= -1e-9 for k in kl)
    ab = r["ablation"]
    assert len(ab["layers"]["block"]) == len(data.resid) - 1
    assert applied(ab["heads"]) == has_attn
    assert any(abs(x) > 0 for x in ab["layers"]["block"])  # the ablation hook really changes the output
    if has_attn:
        assert any(abs(x) > 0 for x in ab["heads"][0]) and ab["frame_head"]["layer"] == 0


def test_lens_last_layer_is_the_models_own_kl():
    task = tasks.make("bijection", V=6, L=5)
    model = small("transformer", task)
    data = collect(model, task, n=16)
    lens = logit_lens(model, data)
    assert lens["kl_bits_per_layer"][-1] == pytest.approx(kl_bits(predictive(task.spec, data.out), data.batch))


def test_orthogonal_and_identical_answer_keys():
    task = tasks.make("bijection", V=4, L=4)
    model = small("transformer", task)  # d_model 16, 2 heads of 8
    d = model.d_model
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight[d : 2 * d] = torch.eye(d)  # W_K = I
        emb = model.embed.tok.weight
        emb[4:8] = torch.eye(d)[[0, 1, 8, 9]] * 3  # answer tokens: distinct basis vectors
    r = key_orthogonality(model, init_model=small("transformer", task))
    assert r["n_tokens"] == 4 and r["d_head"] == 8
    assert r["mean_abs_cos_per_layer"] == pytest.approx([0.0, 0.0], abs=1e-6)
    assert len(r["init_mean_abs_cos_per_layer"]) == 2
    with torch.no_grad():
        model.embed.tok.weight[4:8] = torch.ones(d)
    assert key_orthogonality(model)["mean_abs_cos_per_layer"] == pytest.approx([1.0, 1.0])


def test_sharpening_on_hand_built_attention():
    task = tasks.make("bijection", V=6, L=5)
    data = collect(small("transformer", task), task, n=4)
    T = data.mask.shape[1]
    causal = torch.ones(T, T).tril()
    uniform = (causal / causal.sum(-1, keepdim=True)).expand(4, 2, T, T)  # (B,H,T,T)
    one_hot = torch.eye(T).expand(4, 2, T, T)  # every row attends to itself
    data.cache.update({"blocks.0.attn.pattern": uniform, "blocks.1.attn.pattern": one_hot})
    r = sharpening(data)
    rows = torch.arange(T)[data.mask[0]]
    assert r["entropy_bits_per_layer"][0] == pytest.approx(float(torch.log2(rows + 1.0).mean()))
    assert r["entropy_bits_per_layer"][1] == pytest.approx(0.0, abs=1e-12)
    assert r["drop_first_to_last_pct"] == pytest.approx(100.0)


def test_bijection_evidence_positions():
    # paired format: k0 v0 k1 v1 ?k0 -> the query row's evidence is the k0 key and its value
    inputs = torch.tensor([[0, 3, 1, 2, 0]])
    mask = torch.tensor([[True, False, True, False, True]])
    evidence = tasks.make("bijection", V=4, L=3).attention_evidence(inputs, mask)
    seen, ev = evidence["seen_key_match"]
    assert seen.tolist() == [[False, False, False, False, True]]
    unseen, _ = evidence["unseen_value"]
    assert unseen.tolist() == [[False, False, True, False, False]]  # the first key has nothing revealed before it
    assert ev[0, 4].tolist() == [True, True, False, False, False]
    assert ev[0, 2].tolist() == [False, True, False, False, False]  # unseen key: the revealed value


def test_frame_precision_identical_checkpoints():
    task = tasks.make("bijection", V=6, L=5)
    model = small("transformer", task)
    r = frame_precision(lambda step: model, [10, 20, 30], task, n=8)
    assert [c["frame_cosine"] for c in r["checkpoints"]] == pytest.approx([1.0] * 3)
    assert [c["frame_1mjs"] for c in r["checkpoints"]] == pytest.approx([1.0] * 3)
    assert [c["entropy_r2_within_position"] for c in r["checkpoints"]] == [None] * 3  # a function of position
    assert r["frame_step_90"] == 10 and r["precision_step_2x"] == 10
    other = {10: small("transformer", task, seed=1), 20: model}
    r2 = frame_precision(other.__getitem__, [10, 20], task, n=8)
    assert 0 <= r2["checkpoints"][0]["frame_cosine"] < 1
    lstm = small("lstm", task)
    r3 = frame_precision(lambda step: lstm, [1, 2], task, n=8)
    assert "not_applicable" in r3["frame"] and len(r3["checkpoints"]) == 2


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("geo") / "run"
    return train_checkpointed(d, "bijection", {"V": 6, "L": 5}, "transformer", SIZES["transformer"])


def test_probe_cli_writes_json_and_figures(run_dir, tmp_path):
    out = tmp_path / "probe"
    res = CliRunner().invoke(app, ["probe", str(run_dir), "--n", "16", "--out", str(out)])
    assert res.exit_code == 0, res.output
    r = json.loads((out / "geometry.json").read_text())
    assert r["step"] == 8 and r["arch"] == "transformer"
    assert [c["step"] for c in r["dynamics"]["checkpoints"]] == [2, 4, 8]
    assert r["dynamics"]["checkpoints"][-1]["frame_cosine"] == pytest.approx(1.0)
    names = {p.split("/")[-1] for p in r["figures"]}
    assert {
        "key_cosines.png",
        "attention_entropy.png",
        "value_manifold.png",
        "lens_kl.png",
        "ablation.png",
        "frame_precision.png",
    } <= names
    assert all((out / "figures" / n).stat().st_size > 0 for n in names)


def test_the_same_run_probed_in_two_folders_writes_the_same_geometry_json(run_dir, tmp_path):
    """geometry.json holds no timing and names its run and figures relative to itself: byte for byte the same."""
    from windtunnel.geometry.run import probe_run

    copies = [tmp_path / "a" / "run", tmp_path / "b" / "deeper" / "renamed"]
    for copy in copies:
        shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("geometry.json", "figures"))
        probe_run(copy, n=16)
    first, second = ((c / "geometry.json").read_bytes() for c in copies)
    assert first == second
    listed = json.loads(first)["figures"]
    assert listed and all(p.startswith("figures/") for p in listed)
    assert all((c / p).is_file() for c in copies for p in listed)


def test_probe_cli_bad_input(run_dir, tmp_path):
    res = CliRunner().invoke(app, ["probe", str(run_dir), "--checkpoint", "3", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "checkpoint" in res.output
    res = CliRunner().invoke(app, ["probe", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "run_dir" in res.output
    res = CliRunner().invoke(app, ["probe", str(run_dir), "--n", "1", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "n:" in res.output


def test_authors_key_statistic_is_signed_mean_of_raw_embedding_keys():
    task = tasks.make("bijection", V=4, L=4)
    model = small("transformer", task)  # 2 layers, 2 heads of 8
    d, tok = model.d_model, torch.arange(4, 8)  # the V answer tokens
    with torch.no_grad():
        for block in model.blocks:
            block.norm1.weight.uniform_(0.1, 3.0)  # changes ours, must not change the authors' (raw embeddings)
    r = key_orthogonality(model)
    emb = model.embed.tok.weight[tok].detach().double()  # (n,d)
    for l, block in enumerate(model.blocks):
        w_k = block.attn.qkv.weight[d : 2 * d].detach().double()  # (d,d)
        for h in range(2):
            k = emb @ w_k[8 * h : 8 * (h + 1)].T  # (n,dh)
            k = k / k.norm(dim=1, keepdim=True)
            off = (k @ k.T)[~torch.eye(4, dtype=torch.bool)]
            assert r["authors_signed_mean_cos_per_head"][l][h] == pytest.approx(float(off.mean()))
            assert r["authors_signed_std_cos_per_head"][l][h] == pytest.approx(float(off.std(unbiased=False)))
        assert r["authors_signed_mean_cos_per_layer"][l] == pytest.approx(
            sum(r["authors_signed_mean_cos_per_head"][l]) / 2
        )
    with torch.no_grad():
        for block in model.blocks:
            block.norm1.weight.fill_(1.0)
    again = key_orthogonality(model)

    def flat(x):  # (L,H) -> (L*H,)
        return [c for layer in x for c in layer]

    assert flat(again["authors_signed_mean_cos_per_head"]) == pytest.approx(flat(r["authors_signed_mean_cos_per_head"]))
    assert flat(again["mean_abs_cos_per_head"]) != pytest.approx(flat(r["mean_abs_cos_per_head"]))
    g = r["authors_gaussian_baseline"]
    assert g["expected_std"] == pytest.approx(math.sqrt(2 / (4 * 3 * 8))) and g["std"] > 0


def test_layer0_direction_words_follow_the_change_from_init():
    task = tasks.make("bijection", V=4, L=4)
    ortho, same = small("transformer", task), small("transformer", task)
    d = ortho.d_model
    with torch.no_grad():
        for m in (ortho, same):
            for block in m.blocks:
                block.attn.qkv.weight[d : 2 * d] = torch.eye(d)  # W_K = I
        ortho.embed.tok.weight[4:8] = torch.eye(d)[[0, 1, 8, 9]] * 3  # answer keys orthogonal in both heads
        same.embed.tok.weight[4:8] = torch.ones(d)  # answer keys identical: cos 1 in both statistics
    got = key_orthogonality(ortho, init_model=same)
    assert got["authors_signed_mean_cos_per_layer"] == pytest.approx([0.0, 0.0], abs=1e-6)
    assert got["init_authors_signed_mean_cos_per_layer"] == pytest.approx([1.0, 1.0])
    assert got["layer0_direction"] == {
        "ours_mean_abs_cos": "more orthogonal than at init",
        "authors_signed_mean_cos": "closer to 0 than at init",
    }
    assert key_orthogonality(same, init_model=ortho)["layer0_direction"] == {
        "ours_mean_abs_cos": "less orthogonal than at init",
        "authors_signed_mean_cos": "further from 0 than at init",
    }
    assert set(key_orthogonality(ortho, init_model=ortho)["layer0_direction"].values()) == {"unchanged"}
    assert "layer0_direction" not in key_orthogonality(ortho)


def test_lens_authors_direction_is_brute_force_kl_of_lens_to_floored_posterior():
    task = tasks.make("bijection", V=6, L=5)
    model = small("transformer", task)
    data = collect(model, task, n=8)
    lens = logit_lens(model, data)
    p = data.batch.posterior.probs.double()[data.mask]  # (N,K) exact posterior at scored positions
    assert (p == 0).any()  # revealed values: the unfloored authors' KL would be infinite
    for l, h in enumerate(data.resid):
        with torch.no_grad():
            q = torch.softmax(model.head(model.norm(h)).double(), -1)[data.mask]  # (N,K) lens
        brute = (q * (q.log() - (p + 1e-12).log())).sum(-1).mean() / math.log(2)
        assert lens["kl_lens_to_posterior_bits_per_layer"][l] == pytest.approx(float(brute), rel=1e-5)
        forward = torch.where(p > 0, p * (p.log() - q.log()), 0.0).sum(-1).mean() / math.log(2)
        assert lens["kl_bits_per_layer"][l] == pytest.approx(float(forward), rel=1e-5)
        assert lens["lens_mass_on_impossible_per_layer"][l] == pytest.approx(float((q * (p == 0)).sum(-1).mean()))
    assert lens["posterior_floor"] == 1e-12 and "lens" in lens["direction"]["kl_lens_to_posterior_bits_per_layer"]


def test_report_geometry_cells_show_both_statistics_and_directions():
    from windtunnel.geometry.registry import columns

    g = {
        "keys": {
            "mean_abs_cos_per_layer": [0.324],
            "authors_signed_mean_cos_per_layer": [0.25],
            "init_authors_signed_mean_cos_per_layer": [0.01],
            "authors_gaussian_baseline": {"mean": 0.0, "std": 0.02},
            "layer0_direction": {
                "ours_mean_abs_cos": "less orthogonal than at init",
                "authors_signed_mean_cos": "further from 0 than at init",
            },
        },
        "lens": {"kl_bits_per_layer": [1.5, 0.01], "kl_lens_to_posterior_bits_per_layer": [12.0, 0.4]},
    }
    cells = {c.header: c.text(g) for c in columns()}
    assert cells["authors' L0 signed key cos (trained / init / Gaussian)"] == "0.250 / 0.010 / 0.000 ± 0.020"
    ours, _, theirs = cells["L0 keys in training"].partition("; ")
    assert ours.startswith("ours: ") and "less orthogonal than at init" in ours
    assert theirs.startswith("authors': ") and "further from 0 than at init" in theirs
    assert cells["lens KL(Bayes‖lens) first→last"] == "1.500 → 0.010"
    assert cells["lens KL(lens‖Bayes) first→last"] == "12.000 → 0.400"
    assert next(c for c in columns() if c.header == "L0 keys in training").text({}) == "—"


def test_probe_run_on_the_cpu_device_equals_the_default(run_dir, tmp_path):
    """device=None (the CPU, as before the option existed), 'cpu' and torch.device('cpu') give the same numbers."""
    from windtunnel.geometry.run import probe_run

    def probed(name: str, **kw) -> str:
        r = probe_run(run_dir, out=tmp_path / name, n=16, figures=False, **kw)
        return json.dumps(r, default=float, sort_keys=True)

    default = probed("default")
    assert probed("cpu", device="cpu") == default
    assert probed("torch-cpu", device=torch.device("cpu")) == default
    if not torch.cuda.is_available():
        assert probed("auto", device="auto") == default  # auto without CUDA: the CPU
        with pytest.raises(ValueError, match="device: 'cuda'"):
            probe_run(run_dir, out=tmp_path / "cuda", n=16, figures=False, device="cuda")
    with pytest.raises(ValueError, match="device:"):
        probe_run(run_dir, out=tmp_path / "bad", n=16, figures=False, device="tpu")


def test_probe_cli_device_option(run_dir, tmp_path):
    out = tmp_path / "cli-cpu"
    res = CliRunner().invoke(
        app, ["probe", str(run_dir), "--n", "16", "--no-figures", "--device", "cpu", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert json.loads((out / "geometry.json").read_text())["step"] == 8
    res = CliRunner().invoke(app, ["probe", str(run_dir), "--device", "tpu", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "--device" in res.output
    if not torch.cuda.is_available():
        res = CliRunner().invoke(app, ["probe", str(run_dir), "--device", "cuda", "--out", str(tmp_path)])
        assert res.exit_code == 2 and "--device" in res.output and "CUDA" in res.output


@pytest.mark.parametrize("task_name", ["bijection", "regression"])
def test_heldout_batch_is_drawn_on_the_cpu_and_moved_whole(task_name):
    """Probe data is the CPU generator's sequences wherever the model is; moving copies every tensor (the 'meta'
    device stands in for CUDA here: tests/test_gpu.py moves to CUDA for real)."""
    from windtunnel.geometry.data import heldout_batch, to_device

    task = tasks.make(task_name)
    cpu = heldout_batch(task, 4, offset=1)
    assert to_device(cpu, "cpu") is cpu  # nothing moved on the CPU
    moved = to_device(cpu, "meta")
    tensors = [moved.inputs, moved.target_mask, moved.targets, *moved.latent.values()]
    tensors += [v for v in vars(moved.posterior).values() if isinstance(v, torch.Tensor)]
    assert tensors and all(t.device.type == "meta" for t in tensors)
    assert type(moved.posterior) is type(cpu.posterior) and moved.posterior.batch_shape == cpu.posterior.batch_shape
    assert cpu.inputs.device.type == "cpu"  # the original is untouched
    assert all(v.device.type == "cpu" for v in vars(cpu.posterior).values() if isinstance(v, torch.Tensor))
    again = heldout_batch(task, 4, offset=1, device="meta")
    assert again.inputs.device.type == "meta" and again.inputs.shape == cpu.inputs.shape


def test_geometry_json_names_its_run_relative_to_itself(run_dir, tmp_path):
    """geometry.json stores the probed run relative to where it is written: a published copy holds no machine path."""
    from windtunnel.geometry.run import probe_run

    out = tmp_path / "probe"
    stored = probe_run(run_dir, out=out, n=16, figures=False)["run_dir"]
    assert not Path(stored).is_absolute()
    assert (out / stored).resolve() == Path(run_dir).resolve()
