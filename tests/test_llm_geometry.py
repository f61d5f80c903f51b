"""`windtunnel llm-geometry` (windtunnel.llm.geometry, windtunnel.llm.study) on toy causal LMs of the four families
(GPT-2, GPT-NeoX, Llama with grouped-query attention, Phi), each built from a config with random weights, saved with
`save_pretrained` beside a word-level tokenizer built in code, and read back from disk, offline.

Every statistic comes with its null for each family (through the installed entry point for GPT-NeoX, the Python API
for the others); attention entropy is the mean of per-prompt entropies, computed again here from the cached pattern
of each prompt alone; value PCA matches numpy; a random-init model's W_K columns are at E|cos| of random vectors
(~sqrt(2/(pi d)), far from the 0.35-0.45 the authors give as their random baseline); bad input is one line and exit 2;
the folder has json, md and png; an existing folder is refused without --overwrite, and --overwrite deletes nothing
llm-geometry did not write."""

from __future__ import annotations

import json
import math
import os
import shutil

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here downloads; make sure nothing tries
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from typer.testing import CliRunner  # noqa: E402

from readme_commands import check_ran, run_cli  # noqa: E402
from windtunnel.cli import app  # noqa: E402
from windtunnel.geometry.stats import expected_abs_cosine_random, probs_entropy_bits  # noqa: E402
from windtunnel.hf import from_hf  # noqa: E402
from windtunnel.llm import geometry as geo  # noqa: E402
from windtunnel.llm import prompt_sources, study, study_output  # noqa: E402

runner = CliRunner()
SPECIALS = ("[UNK]", "[PAD]", "[EOS]")
WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    "and",
    "dog",
    "ran",
    "to",
    "red",
    "blue",
    "urn",
    "ball",
    "is",
    "drawn",
    "from",
    "it",
]
TOY = dict(d=32, heads=4, layers=2, ff=64, positions=256)
FAMILIES = ["gpt2", "gpt_neox", "llama", "phi"]  # llama: grouped-query attention, 2 key/value heads for 4 heads
N_PROMPTS = 24


def has_prompts() -> bool:
    return prompt_sources._prompts_module() is not None


def vocabulary() -> dict[str, int]:
    """Special tokens, fixed words, numbers and, where windtunnel.llm.prompts is there, every word of its built-in
    prompts and choices as the Whitespace pre-tokenizer splits them; anything else reads as [UNK]."""
    from tokenizers import pre_tokenizers

    words = [*WORDS, *(str(i) for i in range(100))]
    mod = prompt_sources._prompts_module()
    if mod is not None:
        split = pre_tokenizers.Whitespace()
        for p in mod.builtin_prompts(4, 0):
            for text in (p.text, *p.choices):
                words += [w for w, _ in split.pre_tokenize_str(text)]
    return {w: i for i, w in enumerate(dict.fromkeys([*SPECIALS, *words]))}


def config(family: str, vocab: int, d: int = TOY["d"], heads: int = TOY["heads"], kv: int | None = None):
    """A toy config of `family` (kv: key/value heads, Llama only; default 2 there, grouped-query attention)."""
    lib, t = transformers, TOY
    ids = dict(pad_token_id=1, bos_token_id=2, eos_token_id=2, tie_word_embeddings=False)
    if family == "gpt2":
        return lib.GPT2Config(
            vocab_size=vocab, n_positions=t["positions"], n_embd=d, n_layer=t["layers"], n_head=heads,
            n_inner=t["ff"], **ids,
        )  # fmt: skip
    common = dict(
        vocab_size=vocab, hidden_size=d, num_hidden_layers=t["layers"], num_attention_heads=heads,
        intermediate_size=t["ff"], max_position_embeddings=t["positions"], **ids,
    )  # fmt: skip
    if family == "gpt_neox":
        return lib.GPTNeoXConfig(**common)
    if family == "llama":
        return lib.LlamaConfig(num_key_value_heads=kv or 2, **common)
    return lib.PhiConfig(**common)


def save_toy(path, family: str, seed: int = 1234, kv: int | None = None):
    """A toy causal LM of `family` with random weights (seed `seed`, not the null's 0) and its tokenizer, saved."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = vocabulary()
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]"
    )
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config(family, len(vocab), kv=kv))
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return path


def prompts_file(path, n: int = N_PROMPTS, seed: int = 0):
    """n plain-text prompts of 1..12 words, one a line (one of a single word: tokens_at_layer leaves it out)."""
    rng = np.random.default_rng(seed)
    lines = ["cat"] + [" ".join(rng.choice(WORDS, int(rng.integers(2, 13)))) for _ in range(n - 1)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def toys(tmp_path_factory):
    """{family: its saved model directory}."""
    root = tmp_path_factory.mktemp("llm-toys")
    return {f: save_toy(root / f, f) for f in FAMILIES}


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    return prompts_file(tmp_path_factory.mktemp("prompts") / "prompts.txt")


@pytest.fixture(scope="module")
def results(toys, prompts, tmp_path_factory):
    """{family: (llm_geometry's result, its folder)} through the Python API, for every family but GPT-NeoX (the
    CLI's)."""
    root = tmp_path_factory.mktemp("llm-out")
    return {
        f: (study.llm_geometry(toys[f], root / f, prompts=prompts, seed=0, n_boot=50), root / f)
        for f in FAMILIES
        if f != "gpt_neox"
    }


def check_complete(r: dict, n: int, kv_heads: int) -> None:
    """Every statistic of every layer is there with its null (a random-init model's; random vectors' for cosines)
    and the difference, every number finite."""
    g = r["geometry"]
    L = g["shape"]["n_layers"]
    assert r["kind"] == study_output.KIND and r["n"] == g["n_prompts"] == n and r["seed"] == 0
    assert r["null_seeds"] == study.null_seeds(0, study.N_NULLS) and r["null_seed"] == r["null_seeds"][0]
    assert g["null_draws"] == study.N_NULLS
    assert set(r["definitions"]) == set(geo.DEFINITIONS) and {"transformers", "torch"} <= set(r["versions"])
    assert r["config"]["n_kv_heads"] == kv_heads and os.path.isdir(r["model_dir"])
    for e in g["value_pca"]["layers"]:
        for who in ("model", "null_model"):
            for k in geo.PCA_KEYS:
                lo, hi = e[who][f"{k}_ci"]
                assert math.isfinite(e[who][k]) and lo <= hi
            assert e[who]["n"] == n and e[who]["d"] == kv_heads * g["shape"]["d_head"]
        assert e["diff"]["pc1"] == pytest.approx(e["model"]["pc1"] - e["null_model"]["pc1"])
    a = g["attention_entropy"]
    assert len(a["layers"]) == L and a["uniform_bits"] > 0
    for e in a["layers"]:
        for who in ("model", "null_model", "diff"):
            assert len(e[who]["per_head"]) == g["shape"]["n_heads"] and math.isfinite(e[who]["mean"])
        assert e["diff"]["mean"] == pytest.approx(e["model"]["mean"] - e["null_model"]["mean"])
    for name in geo.KEY_DEFINITIONS:
        k = g["key_orthogonality"][name]
        assert k["definition"] == geo.DEFINITIONS[name] and len(k["layers"]) == L
        assert k["null_analytic"] == pytest.approx(expected_abs_cosine_random(k["d"]))
        for e in k["layers"]:
            assert 0 <= e["model"]["mean"] <= 1 and 0 <= e["null_model"]["mean"] <= 1
            assert e["diff_vs_analytic"] == pytest.approx(e["model"]["mean"] - k["null_analytic"])
            assert e["diff"]["mean"] == pytest.approx(e["model"]["mean"] - e["null_model"]["mean"])
    wk = g["key_orthogonality"]["wk_columns"]
    assert wk["d"] == g["shape"]["d_model"] and len(wk["layers"][0]["model"]["per_head"]) == kv_heads
    assert wk["layers"][0]["model"]["mean"] != wk["layers"][0]["null_model"]["mean"]  # seed 1234 is not the null's 0
    tokens = g["key_orthogonality"]["tokens_at_layer"]["layers"][0]["model"]
    assert tokens["n"] == n - 1  # the one-token prompt has no pair of positions


def check_folder(out) -> None:
    assert (out / study_output.JSON_NAME).is_file() and (out / study_output.MD_NAME).is_file()
    for name in study_output.FIGURE_NAMES:
        assert (out / study_output.FIGURES / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / study_output.MD_NAME).read_text()
    assert "## Value PCA" in md and "## Attention entropy" in md and "`wk_columns`" in md and "random-init" in md


# --- every statistic with its null, for each family ------------------------------------------------------------


def test_cli_writes_every_statistic_with_its_null_for_gpt_neox(toys, prompts, tmp_path):
    out = tmp_path / "out"
    args = ["llm-geometry", "--model", str(toys["gpt_neox"]), "--prompts", str(prompts), "--out", str(out)]
    done = run_cli(args, tmp_path, env={"HF_HUB_OFFLINE": "1"}, timeout=300)
    check_ran(args, done)
    assert "wk_columns" in done.stdout and f"wrote {out / study_output.JSON_NAME}" in done.stdout
    assert "llm-geometry: loading" in done.stderr  # progress lines on stderr
    check_folder(out)
    r = json.loads((out / study_output.JSON_NAME).read_text())
    check_complete(r, N_PROMPTS, kv_heads=4)
    assert r["config"]["family"] == "hf-gpt-neox" and "not_available" in r["scores"]  # plain text: nothing to score


@pytest.mark.parametrize("family", ["gpt2", "llama", "phi"])
def test_the_api_gives_every_statistic_with_its_null(results, family):
    r, out = results[family]
    check_complete(r, N_PROMPTS, kv_heads=2 if family == "llama" else 4)
    check_folder(out)
    assert json.loads((out / study_output.JSON_NAME).read_text()) == json.loads(json.dumps(r))


def test_the_built_in_prompts_are_read_round_robin_and_scored_for_the_model_and_its_null(toys, tmp_path):
    prompts_mod = pytest.importorskip("windtunnel.llm.prompts")
    cells = {(p.family, p.position) for p in prompts_mod.builtin_prompts(1, 0)}
    picked = prompt_sources.builtin_subset(prompts_mod, len(cells) + 3, 0)
    assert len(picked) == len(cells) + 3 and {(p.family, p.position) for p in picked[: len(cells)]} == cells
    r = study.llm_geometry(toys["llama"], tmp_path / "out", n=len(cells), seed=0, n_boot=20)
    assert r["prompts"] == {"source": "builtin", "n": len(cells), "seed": 0}
    for who in ("model", "null_model"):
        assert r["scores"][who]["n_prompts"] == len(cells) and r["scores"][who]["families"]
    drawn = r["scores"]["null_models"]  # every random-init draw scored, the first the paired one
    assert len(drawn) == study.N_NULLS and drawn[0] == r["scores"]["null_model"] and drawn[1] != drawn[0]
    md = (tmp_path / "out" / study_output.MD_NAME).read_text()
    assert "### Random-init model" in md and "latent-label" in md


def test_prompts_whose_choices_are_not_single_tokens_are_left_out_and_said_so_not_an_error():
    """A tokenizer that lacks one family's choice words: that family's prompts are left out of the scores, counted
    and explained; the rest are scored (the default scoring never stops a run on a tokenizer's vocabulary)."""
    prompts_mod = pytest.importorskip("windtunnel.llm.prompts")
    from tokenizers import Tokenizer, models, pre_tokenizers

    items = prompts_mod.builtin_prompts(1, 0)
    split = pre_tokenizers.Whitespace()
    lost = next(p for p in items if p.family == "text-bijection")
    gone = {w for c in lost.choices for w, _ in split.pre_tokenize_str(c)}
    vocab = {w: i for i, w in enumerate(x for x in vocabulary() if x not in gone)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = split
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")
    kept, left = study._single_token_choices(prompts_mod, fast, items)
    families = {p.family for p in kept}
    assert "text-bijection" not in families and "latent-label" in families
    assert left["families"] == {"text-bijection": sum(p.family == "text-bijection" for p in items)}
    assert left["n"] == len(items) - len(kept) and "is not one token of this tokenizer" in left["why"]


def test_heads_at_token_is_not_applicable_with_one_key_head_and_the_rest_is_there(prompts, tmp_path):
    from windtunnel.cli.llm_cmd import summary

    model = save_toy(tmp_path / "mqa", "llama", kv=1)
    r = study.llm_geometry(model, tmp_path / "out", prompts=prompts, n=8, n_boot=10, null_seed=7)
    assert r["null_seeds"] == [7] and "1 draw, torch seeds 7" in r["null_model"]
    assert "null_draws" not in r["geometry"]  # one draw: no range to give
    keys = r["geometry"]["key_orthogonality"]
    assert "one key/value head" in keys["heads_at_token"]["not_applicable"]
    assert len(keys["wk_columns"]["layers"][0]["model"]["per_head"]) == 1 and keys["tokens_at_layer"]["layers"]
    check_folder(tmp_path / "out")
    assert "Not applicable" in (tmp_path / "out" / study_output.MD_NAME).read_text()
    lines = summary(r)
    assert "tokens_at_layer" in lines[2] and "heads_at_token" not in lines[2]


def test_the_null_draws_differ_from_the_model_and_from_each_other(results):
    """Three random-init draws: every statistic holds each draw's value, distinct from one another and from the
    model's, their range, the model's place against them and one paired difference per draw."""
    r, _ = results["llama"]
    assert len(set(r["null_seeds"])) == 3 and all(s > 1000 for s in r["null_seeds"])
    for stat in ("value_pca", "attention_entropy"):
        for e in r["geometry"][stat]["layers"]:
            assert len(e["null_draws"]) == 3 and len(set(e["null_draws"])) == 3 and len(e["diff_draws"]) == 3
            assert e["null_range"] == [min(e["null_draws"]), max(e["null_draws"])]
            assert e["null_draws"][0] == geo._headline(e["null_model"])  # the paired intervals' draw is the first
            model = geo._headline(e["model"])
            assert model not in e["null_draws"]
            lo, hi = e["null_range"]
            expected = "above every draw" if model > hi else "below every draw" if model < lo else "within the draws"
            assert e["model_vs_nulls"] == expected
            assert e["null_rank_p"] == (0.25 if expected != "within the draws" else e["null_rank_p"]) >= 0.25
    wk = r["geometry"]["key_orthogonality"]["wk_columns"]
    for e in wk["layers"]:
        assert e["ratio_to_analytic"] == pytest.approx(e["model"]["mean"] / wk["null_analytic"])
        assert e["ratio_to_nulls"] == pytest.approx(e["model"]["mean"] / np.mean(e["null_draws"]))


def test_a_null_with_the_model_s_own_weights_is_refused(prompts, tmp_path):
    """A model built from its config under torch seed 1234 and a null drawn under 1234 are the same weights: the
    statistic would be the model against itself, which is refused naming the seed; so are repeated seeds."""
    model = save_toy(tmp_path / "toy", "gpt2", seed=1234)
    with pytest.raises(ValueError, match="seed 1234 .*exactly the model's weights"):
        study.llm_geometry(model, tmp_path / "out", prompts=prompts, n=8, n_boot=10, null_seed=[5, 1234])
    with pytest.raises(ValueError, match=r"--null-seed: .*5 is given twice"):
        study.llm_geometry(model, tmp_path / "out", prompts=prompts, n=8, n_boot=10, null_seed=[5, 5])
    with pytest.raises(ValueError, match="--nulls: must be between 1 and 16"):
        study.llm_geometry(model, tmp_path / "out", prompts=prompts, n=8, n_boot=10, n_nulls=0)
    assert not (tmp_path / "out" / study_output.JSON_NAME).exists()
    from typer.testing import CliRunner

    from windtunnel.cli import app

    args = ["llm-geometry", "--model", str(model), "--prompts", str(prompts), "--n", "8", "--out", str(tmp_path / "o")]
    done = CliRunner().invoke(app, [*args, "--null-seed", "5", "--null-seed", "1234"])  # the option repeats
    assert done.exit_code == 2 and "seed 1234 " in done.output and "exactly the model's weights" in done.output


# --- each definition against a direct computation ---------------------------------------------------------------


def test_per_prompt_statistics_are_each_prompt_s_own_then_averaged(results, toys, prompts):
    """Attention entropy is the mean over prompts of each prompt's entropy (never the entropy of a mean pattern), and
    heads_at_token, tokens_at_layer and the values are what each prompt's own cache holds: every prompt run alone
    here, with no padding, against the batched, padded run of llm_geometry."""
    r, _ = results["llama"]
    g = r["geometry"]
    model = transformers.AutoModelForCausalLM.from_pretrained(toys["llama"], local_files_only=True).eval()
    tok = transformers.AutoTokenizer.from_pretrained(toys["llama"], local_files_only=True)
    lm = from_hf(model)
    texts = prompts.read_text().splitlines()
    L = lm.n_layers
    ent, heads, tokens, values = ([[] for _ in range(L)] for _ in range(4))
    for text in texts:
        ids = torch.tensor([tok(text)["input_ids"]])
        _, cache = lm.run_with_cache(ids, names_filter=lambda n: n.endswith(("attn.pattern", "attn.k", "attn.v")))
        for l in range(L):
            ent[l].append(probs_entropy_bits(cache[f"blocks.{l}.attn.pattern"][0, :, -1]).numpy())  # (H,)
            k = torch.nn.functional.normalize(cache[f"blocks.{l}.attn.k"][0].double(), dim=-1)  # (Hkv,T,dh)
            c = (k[:, -1] @ k[:, -1].T).abs()  # (Hkv,Hkv) at the last token
            heads[l].append(float(c[0, 1]))  # two key heads: one pair
            T = k.shape[1]
            if T > 1:
                cc = (k @ k.transpose(1, 2)).abs()  # (Hkv,T,T)
                tokens[l].append(((cc.sum((1, 2)) - T) / (T * (T - 1))).numpy())
            values[l].append(cache[f"blocks.{l}.attn.v"][0, :, -1].flatten().double().numpy())
    for l in range(L):
        e = g["attention_entropy"]["layers"][l]["model"]
        np.testing.assert_allclose(e["per_head"], np.mean(ent[l], 0), rtol=1e-5)
        assert e["mean"] == pytest.approx(np.mean(ent[l]), rel=1e-5)
        k = g["key_orthogonality"]
        assert k["heads_at_token"]["layers"][l]["model"]["mean"] == pytest.approx(np.mean(heads[l]), rel=1e-5)
        np.testing.assert_allclose(
            k["tokens_at_layer"]["layers"][l]["model"]["per_head"], np.mean(tokens[l], 0), rtol=1e-5
        )
        direct = geo.value_pca(np.stack(values[l]), n_boot=0)
        assert g["value_pca"]["layers"][l]["model"]["pc1"] == pytest.approx(direct["pc1"], rel=1e-5)


def test_value_pca_is_numpy_s_pca_of_the_standardised_values():
    rng = np.random.default_rng(0)
    z = rng.standard_normal((40, 3))
    x = np.concatenate([z @ rng.standard_normal((3, 12)) * rng.uniform(0.1, 10, 12), np.full((40, 1), 7.0)], 1)
    x[:, :12] += rng.standard_normal((40, 12)) * 0.1
    r = geo.value_pca(x, n_boot=200, seed=3)
    s = (x - x.mean(0)) / np.where(x.std(0) > 0, x.std(0), 1.0)  # the constant column stays 0
    lam = np.linalg.svd(s - s.mean(0), compute_uv=False) ** 2
    ratios = lam / lam.sum()
    assert r["pc1"] == pytest.approx(ratios[0], rel=1e-9)
    assert r["pc12"] == pytest.approx(ratios[:2].sum(), rel=1e-9)
    assert r["participation_ratio"] == pytest.approx(lam.sum() ** 2 / (lam**2).sum(), rel=1e-9)
    assert r["n"] == 40 and r["d"] == 13
    for k in geo.PCA_KEYS:
        lo, hi = r[f"{k}_ci"]
        assert lo <= hi and lo > 0
    assert geo.value_pca(x, n_boot=200, seed=3) == r  # seeded
    paired = geo.paired_value_pca(x, x[:, ::-1], n_boot=50, seed=1)  # a permutation of features: the same PCA
    assert paired["diff"]["pc1"] == pytest.approx(0, abs=1e-12) and paired["diff"]["pc1_ci"] == pytest.approx([0, 0])


@pytest.mark.parametrize("family", FAMILIES)
def test_wk_columns_of_a_random_init_model_is_random_vectors_e_abs_cos_not_0_4(family):
    """The columns of W_K of a random-init model are d_model-dimensional random directions: their mean |cos| is
    E|cos| = Gamma(d/2) / (sqrt(pi) Gamma((d+1)/2)) ~ sqrt(2/(pi d)), 0.035 at Pythia-70m's d_model 512 -- not the
    0.40-0.45 the authors give as their random-Gaussian baseline. (d_model 128 here: 0.0705.)"""
    cfg = config(family, 50, d=128, heads=2, kv=1)  # two heads of 64 (one key/value head for Llama)
    torch.manual_seed(0)
    lm = from_hf(transformers.AutoModelForCausalLM.from_config(cfg))
    w = geo.wk_columns(lm)
    assert w.shape == (cfg.num_hidden_layers, lm.adapter.n_kv_heads)
    assert w.mean() == pytest.approx(expected_abs_cosine_random(128), rel=0.05)
    assert expected_abs_cosine_random(128) == pytest.approx(math.sqrt(2 / (math.pi * 128)), rel=0.01)
    assert expected_abs_cosine_random(512) == pytest.approx(0.035, abs=0.001)


def test_read_prompts_takes_text_lines_and_jsonl(tmp_path):
    (tmp_path / "p.txt").write_text("a b\n\n  \nc d\n")
    assert prompt_sources.read_prompts(tmp_path / "p.txt") == ["a b", "c d"]
    (tmp_path / "p.jsonl").write_text('"a b"\n{"text": "c d", "note": 1}\n')
    assert prompt_sources.read_prompts(tmp_path / "p.jsonl") == ["a b", {"text": "c d", "note": 1}]
    (tmp_path / "bad.jsonl").write_text('"a"\n{"txt": 1}\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        prompt_sources.read_prompts(tmp_path / "bad.jsonl")


# --- the command line and the folder ------------------------------------------------------------------------------


def _one_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--model", "{tmp}/missing"], "--model"),
        (["--model", "{tmp}"], "--model"),  # a folder without config.json
        (["--model", "{model}", "--n", "2"], "--n"),
        (["--model", "{model}", "--n", "1000000"], "--n"),
        (["--model", "{model}", "--prompts", "{tmp}/missing.txt"], "--prompts"),
        (["--model", "{model}", "--device", "tpu"], "--device"),
        (["--model", "{model}", "--dtype", "int8", "--prompts", "{prompts}"], "--dtype"),
    ],
    ids=["missing-dir", "no-config", "n-small", "n-large", "prompts-missing", "device", "dtype"],
)
def test_bad_input_is_one_error_line_naming_the_option_and_exit_2(toys, prompts, tmp_path, args, names):
    fill = {"tmp": str(tmp_path), "model": str(toys["llama"]), "prompts": str(prompts)}
    out = tmp_path / "out"
    result = runner.invoke(app, ["llm-geometry", *(a.format(**fill) for a in args), "--out", str(out)])
    assert names in _one_error(result)
    assert not out.exists()  # refused before anything was written


def damage(path, how: str) -> None:
    """Damage the saved model in `path` as `how` says."""
    from safetensors.torch import load_file, save_file

    weights, config = path / "model.safetensors", path / "config.json"
    if how == "truncated":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif how == "n_layer":
        config.write_text(json.dumps({**json.loads(config.read_text()), "n_layer": -1}))
    elif how == "n_embd":  # weights of another width than the config's
        config.write_text(json.dumps({**json.loads(config.read_text()), "n_embd": 64}))
    elif how == "pickle":  # a real state dict, pickled: never to be loaded
        torch.save(load_file(weights), path / "pytorch_model.bin")
        weights.unlink()
    elif how == "missing":
        tensors = load_file(weights)
        tensors.pop("transformer.wpe.weight")
        save_file(tensors, weights)
    elif how == "tokenizer":
        for f in path.iterdir():
            if f.name.startswith(("tokenizer", "special_tokens")):
                f.unlink()


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("truncated", "model.safetensors: not a readable safetensors file, truncated or damaged"),
        ("n_layer", "config.json: n_layer must be a whole number >= 1 (got -1)"),
        ("n_embd", "model.safetensors: transformers cannot load the model"),
        ("pickle", "pytorch_model.bin holds pickled weights"),
        ("missing", "model.safetensors holds no weight for 1 of the model's parameters"),
        ("tokenizer", "holds no tokenizer"),
    ],
)
def test_a_damaged_model_folder_is_one_line_naming_the_file_and_a_pickle_is_never_loaded(
    toys, prompts, tmp_path, monkeypatch, how, said
):
    """Before: "internal error (SafetensorError ...)", "need at least one array to stack" (a model of no layers),
    and a pickled pytorch_model.bin loaded (a dict of other keys: every weight at a random init, exit 0)."""
    model = tmp_path / "model"
    shutil.copytree(toys["gpt2"], model)
    damage(model, how)

    def no_unpickling(*args, **kwargs):
        raise AssertionError("torch.load called")

    monkeypatch.setattr(torch, "load", no_unpickling)
    out = tmp_path / "out"
    args = ["llm-geometry", "--model", str(model), "--prompts", str(prompts), "--out", str(out), "--no-progress"]
    line = _one_error(runner.invoke(app, args))
    assert said in line and str(model) in line and "internal error" not in line, line
    assert not out.exists()


def test_an_existing_folder_is_refused_without_overwrite_and_overwrite_deletes_only_its_own(results, toys, prompts):
    _, out = results["gpt2"]
    before = (out / study_output.JSON_NAME).read_bytes()
    base = ["llm-geometry", "--model", str(toys["gpt2"]), "--prompts", str(prompts), "--out", str(out), "--n", "6"]
    assert "--overwrite" in _one_error(runner.invoke(app, base))
    assert (out / study_output.JSON_NAME).read_bytes() == before  # untouched
    (out / study_output.FIGURES / "old.png.tmp.png").write_bytes(b"x")  # not a figure llm-geometry writes
    assert "old.png.tmp.png" in _one_error(runner.invoke(app, [*base, "--overwrite"]))
    (out / study_output.FIGURES / "old.png.tmp.png").unlink()
    (out / study_output.FIGURES / "value_pc1.tmp.png").write_bytes(b"x")  # a temp file of one it writes: its own
    result = runner.invoke(app, [*base, "--overwrite", "--no-progress"])
    assert result.exit_code == 0, result.output
    r = json.loads((out / study_output.JSON_NAME).read_text())
    assert r["n"] == 6 and not (out / study_output.FIGURES / "value_pc1.tmp.png").exists()
    check_folder(out)
    (out / "notes.txt").write_text("mine")  # a user's file: overwrite deletes nothing at all
    assert "notes.txt" in _one_error(runner.invoke(app, [*base, "--overwrite"]))
    assert (out / "notes.txt").read_text() == "mine" and (out / study_output.JSON_NAME).is_file()
    (out / "notes.txt").unlink()
    (out / study_output.JSON_NAME).write_text('{"kind": "something else"}')  # not this command's json
    assert "not one llm-geometry wrote" in _one_error(runner.invoke(app, [*base, "--overwrite"]))
    assert (out / study_output.MD_NAME).is_file()
