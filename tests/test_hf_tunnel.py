"""A Hugging Face causal LM of one's own on a wind tunnel (`windtunnel.hf.from_hf(lm, task)`): probed, saved as a run,
evaluated and reported with the numbers of the HF model's own forward read at the answer tokens. Tiny random-init
GPT-2 and Llama built from their configs, offline."""

from __future__ import annotations

import json
import os

import pytest
import torch
from torch.distributions import Categorical

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here downloads; make sure nothing tries
transformers = pytest.importorskip("transformers")

from typer.testing import CliRunner  # noqa: E402

import windtunnel  # noqa: E402
from windtunnel import runs, tasks  # noqa: E402
from windtunnel.cli import app  # noqa: E402
from windtunnel.evaluation.evaluate import evaluate, evaluate_model, score_predictor  # noqa: E402
from windtunnel.evaluation.metrics import entropy_mae_bits, kl_divergence_bits  # noqa: E402
from windtunnel.geometry.data import heldout_batch  # noqa: E402
from windtunnel.geometry.probes import probe_model  # noqa: E402
from windtunnel.hf import HFCausalLM, from_hf  # noqa: E402
from windtunnel.report import build_report  # noqa: E402
from windtunnel.runs.resume import run_record  # noqa: E402

TASK = tasks.make("bijection", V=6, L=5)  # 12 input tokens; the 6 answers are tokens 6..11
ANSWERS = list(range(6, 12))
FAMILIES = ["gpt2", "llama"]


def lm_of(family: str, vocab: int = 16):
    """A tiny random-init causal LM of `family`, in eval mode, whose vocabulary holds the task's tokens and more."""
    torch.manual_seed(0)
    if family == "gpt2":
        config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=vocab, n_positions=12)
    else:
        config = transformers.LlamaConfig(
            vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=64, max_position_embeddings=16,
        )  # fmt: skip
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def own_logits(lm, inputs: torch.Tensor) -> torch.Tensor:
    """The HF model's own forward read at the answer tokens: (B,T,K)."""
    with torch.no_grad():
        return lm(input_ids=inputs, use_cache=False).logits[..., ANSWERS]


@pytest.fixture(scope="module", params=FAMILIES)
def probed(request):
    lm = lm_of(request.param)
    results, data = probe_model(from_hf(lm, TASK), TASK, n=32, probes=("lens", "ablation", "attention"))
    return lm, results, data


def test_the_probes_entropy_error_is_the_hf_models_own_on_the_same_sequences(probed):
    lm, results, data = probed
    direct = entropy_mae_bits(Categorical(logits=own_logits(lm, data.batch.inputs)), data.batch)
    assert results["entropy_error_bits"] == pytest.approx(direct, abs=1e-6)
    assert "not eval.json's test sequences" in results["entropy_error_sample"]


def test_lens_and_ablation_give_numbers_and_the_lens_last_layer_is_the_model(probed):
    lm, results, data = probed
    for name in ("lens", "ablation", "attention"):
        assert "error" not in results[name] and "not_applicable" not in results[name], results[name]
    kl = kl_divergence_bits(data.batch.posterior, Categorical(logits=own_logits(lm, data.batch.inputs)))
    assert results["lens"]["kl_bits_per_layer"][-1] == pytest.approx(float(kl[data.mask].mean()), abs=1e-5)
    assert len(results["lens"]["kl_bits_per_layer"]) == 3  # the embedding and 2 layers
    ablation, batch = results["ablation"], heldout_batch(TASK, 32, offset=2)  # the ablations' own sequences
    direct = entropy_mae_bits(Categorical(logits=own_logits(lm, batch.inputs)), batch)
    assert ablation["baseline_entropy_error_bits"] == pytest.approx(direct, abs=1e-6)
    assert len(ablation["layers"]["block"]) == 2 and all(isinstance(x, float) for x in ablation["layers"]["block"])


def test_an_lm_not_put_on_the_task_is_refused_not_misread():
    lm = from_hf(lm_of("gpt2"))  # its outputs: all 16 token logits, not the task's 6 answers
    with pytest.raises(ValueError, match=r"from_hf\(lm, task\)"):
        probe_model(lm, TASK, n=8, probes=("lens",))


@pytest.fixture(scope="module", params=FAMILIES)
def saved(request, tmp_path_factory):
    lm = lm_of(request.param)
    out = tmp_path_factory.mktemp(request.param) / "run"
    given = {"train": {"lr": 1e-3, "batch_size": 16, "optimizer": "adamw"}, "seed": 7, "eval": {"n": 48}}
    windtunnel.save_run(from_hf(lm, TASK), TASK, out, given, steps=40)
    return lm, out


def test_eval_of_a_saved_hf_run_is_the_hf_models_own(saved):
    lm, out = saved
    run = runs.load_run(out)
    assert run.config.model.arch == "hf-causal-lm" and run.config.model.size["answers"] == ANSWERS
    assert isinstance(run.model, HFCausalLM) and run.model.model is not lm  # rebuilt from config.json and weights
    got = evaluate(out)["default"]
    direct = evaluate_model(from_hf(lm, TASK), TASK, run.config)  # never saved
    own = score_predictor(TASK, lambda b: Categorical(logits=own_logits(lm, b.inputs)), n=48, seed=7)
    for name, value in got["metrics"].items():
        assert value["mean"] == pytest.approx(direct["metrics"][name]["mean"], abs=1e-6), name
        assert value["mean"] == pytest.approx(own["metrics"][name]["mean"], abs=1e-5), name


def test_probe_and_report_read_a_saved_hf_run(saved, tmp_path):
    lm, out = saved
    if not (out / "eval.json").exists():
        evaluate(out)
    r = CliRunner().invoke(app, ["probe", str(out), "--n", "16", "--no-figures"])
    assert r.exit_code == 0, r.output
    geometry = json.loads((out / "geometry.json").read_text())
    assert geometry["arch"] == "hf-causal-lm" and "not eval.json's" in geometry["entropy_error_sample"]
    assert "kl_bits_per_layer" in geometry["lens"] and "layers" in geometry["ablation"]
    (entry,) = build_report([out], tmp_path / "report")["runs"]
    assert entry["status"] == "exported" and entry["steps_trained"] == 40


def test_the_exported_config_records_what_was_passed_and_marks_the_rest_unknown(saved):
    _, out = saved
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["train"]["lr"] == 1e-3 and cfg["train"]["batch_size"] == 16 and cfg["train"]["steps"] == 40
    assert cfg["seed"] == 7
    unknown = json.loads((out / "trained.json").read_text())["exported"]["unknown"]
    assert "train.warmup_steps" in unknown and "train.schedule" in unknown
    assert not {"train.lr", "train.batch_size", "train.optimizer", "train.steps", "seed"} & set(unknown)
    note = run_record(out, 40)["notes"][0]
    assert "not known" in note and "train.warmup_steps" in note and "train.lr" not in note


def test_without_a_batch_size_the_sequences_seen_are_not_known(tmp_path):
    out = windtunnel.save_run(from_hf(lm_of("gpt2"), TASK), TASK, tmp_path / "r", {"train": {"lr": 1e-3}}, steps=5)
    unknown = json.loads((out / "trained.json").read_text())["exported"]["unknown"]
    assert "train.batch_size" in unknown and "seed" in unknown and "train.lr" not in unknown
    note = run_record(out, 5)["notes"][0]
    assert "sequences seen not known" in note and "train.batch_size" in note


def test_save_run_of_an_lm_not_put_on_the_task_says_how(tmp_path):
    with pytest.raises(ValueError, match=r"from_hf\(lm, task\)"):
        windtunnel.save_run(from_hf(lm_of("gpt2")), TASK, tmp_path / "r")


def test_a_task_whose_answers_are_not_tokens_needs_them_named():
    hmm = tasks.make("hmm", S=3, O=3, K=4)  # 103 input tokens, 3 hidden-state answers
    lm = lm_of("llama", vocab=128)
    with pytest.raises(ValueError, match="answers="):
        from_hf(lm, hmm)
    wrapped = from_hf(lm, hmm, answers=[120, 121, 122])
    x = hmm.sample(2, seed=0).inputs
    with torch.no_grad():
        own = lm(input_ids=x, use_cache=False).logits[..., [120, 121, 122]]  # (B,T,3)
    assert wrapped.spec == hmm.spec and torch.allclose(wrapped(x), own, atol=1e-5)
    results, _ = probe_model(wrapped, hmm, n=8, probes=("lens",))
    assert "kl_bits_per_layer" in results["lens"]
