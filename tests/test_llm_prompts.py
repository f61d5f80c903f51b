"""Prompts with exact posteriors for LLMs (windtunnel.llm.prompts): the posteriors against brute-force enumeration and
the tunnels' own code, and `score` against direct computation on models whose next-token distribution is known."""

import itertools
import json
import math
import re
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import transformers
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from torch import nn

from windtunnel.llm import prompts as lp
from windtunnel.llm.prompts import (
    FAMILIES,
    Prompt,
    builtin_prompts,
    latent_label_prompts,
    score,
    score_table,
    text_tunnel_prompts,
)
from windtunnel.report.document import Document
from windtunnel.tasks.bijection import Bijection
from windtunnel.tasks.hmm import HMM

LINE = re.compile(r"^item (\d+): (\S+)$")


# --- a word-level tokenizer and models built in code -------------------------------------------------------------


def words_of(prompts: list[Prompt]) -> set[str]:
    pre = Whitespace()
    return {w for p in prompts for text in (p.text, *p.choices) for w, _ in pre.pre_tokenize_str(text)}


def make_tokenizer(prompts: list[Prompt], padding_side: str = "right") -> transformers.PreTrainedTokenizerFast:
    """A whitespace word-level tokenizer holding every word of `prompts`, every number 0..100 and two-digit cents."""
    numbers = {str(i) for i in range(101)} | {f"{i:02d}" for i in range(100)}
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", *sorted(words_of(prompts) | numbers)])}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    out = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")
    out.padding_side = padding_side
    return out


def tiny_gpt2(vocab_size: int) -> nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=vocab_size, n_positions=256)
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")


class TableLM(nn.Module):
    """Next-token logits a function of the current token alone: `table[token]` (no parameters, no position_ids)."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = table

    def forward(self, input_ids, attention_mask=None):
        return SimpleNamespace(logits=self.table[input_ids])


class ExactLM(nn.Module):
    """The exact posterior as next-token logits at each prompt's last real token (looked up by its tokens)."""

    def __init__(self, tokenizer, prompts: list[Prompt]) -> None:
        super().__init__()
        self.vocab = len(tokenizer)
        self.answers = {}
        for p in prompts:
            ids = tuple(tokenizer(p.text)["input_ids"])
            cid = [tokenizer.convert_tokens_to_ids(c.strip()) for c in p.choices]
            self.answers[ids] = (cid, [math.log(x) if x > 0 else -1e4 for x in p.posterior])

    def forward(self, input_ids, attention_mask):
        logits = torch.full((*input_ids.shape, self.vocab), -1e4)
        for r in range(input_ids.shape[0]):
            real = attention_mask[r].bool()
            cid, logp = self.answers[tuple(input_ids[r][real].tolist())]
            last = int(real.nonzero().max())
            logits[r, last, cid] = torch.tensor(logp)
        return SimpleNamespace(logits=logits)


# --- the latent-label task ---------------------------------------------------------------------------------------


def parse_latent(p: Prompt) -> list[str]:
    """The shown labels of a latent-label prompt's example lines ('?' where hidden)."""
    lines = p.text.split("\n")
    assert lines[-1] == "The hidden label is" and lines[0].startswith("Each item shows")
    shown = [LINE.match(line) for line in lines[1:-1]]
    assert all(shown), p.text
    items = [int(m.group(1)) for m in shown]
    assert len(set(items)) == len(items) and all(1 <= i <= 99 for i in items)
    return [m.group(2) for m in shown]


def enumerate_posterior(shown: list[str], words: tuple[str, str], likelihood: float) -> list[float]:
    """P(z | shown labels) by enumerating z with prior 1/2 and P(label | z) = likelihood if label == z."""
    joint = []
    for z in words:
        w = 0.5
        for label in shown:
            w *= likelihood if label == z else 1 - likelihood
        joint.append(w)
    return [j / sum(joint) for j in joint]


@pytest.mark.parametrize("likelihood", [0.9, 0.7])
def test_latent_label_posteriors_are_bayes_by_enumeration(likelihood):
    ps = latent_label_prompts(20, seed=3, likelihood=likelihood)
    assert Counter(p.position for p in ps) == {k: 20 for k in (0, 1, 2, 4, 8)}
    assert {p.family for p in ps} == {"latent-label"} and all(p.choices == (" A", " B") for p in ps)
    assert f"with probability {likelihood:g}" in ps[0].text
    for p in ps:
        shown = parse_latent(p)
        assert len(shown) == p.position and set(shown) <= {"A", "B"}
        assert p.posterior == pytest.approx(enumerate_posterior(shown, ("A", "B"), likelihood), abs=1e-12)
    # the ratio 9^(#A - #B) at 0.9; and the set holds sharp posteriors, not only the prior
    sharp = [p for p in ps if p.position == 8]
    assert max(abs(p.posterior[0] - 0.5) for p in sharp) > 0.45
    if likelihood == 0.9:
        for p in ps:
            shown = parse_latent(p)
            ratio = p.posterior[0] / p.posterior[1]
            assert math.log(ratio) == pytest.approx((shown.count("A") - shown.count("B")) * math.log(9), abs=1e-9)


def test_latent_label_controls_posteriors():
    main = latent_label_prompts(16, seed=5)
    remap = latent_label_prompts(16, seed=5, control="remap")
    shuffled = latent_label_prompts(16, seed=5, control="shuffled")
    blind = latent_label_prompts(16, seed=5, control="no-evidence")
    for m, r, s, b in zip(main, remap, shuffled, blind, strict=True):
        assert m.position == r.position == s.position == b.position
        # remap: the same draws with X, Y for A, B; the same posterior, by enumeration too
        assert r.family == "latent-label/remap" and r.choices == (" X", " Y")
        assert r.text == m.text.replace("A", "X").replace("B", "Y") and "A" not in r.text.split()
        assert r.posterior == pytest.approx(enumerate_posterior(parse_latent(r), ("X", "Y"), 0.9), abs=1e-12)
        assert r.posterior == m.posterior
        # shuffled: labels independent of z, and the rule says so: the examples are no evidence (likelihood 1/2)
        assert s.family == "latent-label/shuffled" and "unrelated to the hidden label" in s.text
        assert s.posterior == pytest.approx(enumerate_posterior(parse_latent(s), ("A", "B"), 0.5), abs=1e-15)
        assert s.posterior == (0.5, 0.5)
        # no evidence: the same item lines, labels removed
        assert b.family == "latent-label/no-evidence" and parse_latent(b) == ["?"] * b.position
        assert b.posterior == (0.5, 0.5) and b.text.split("\n")[0] == m.text.split("\n")[0]
    # the shuffled labels look like evidence (lopsided counts) though they are none
    lopsided = [abs(parse_latent(s).count("A") - parse_latent(s).count("B")) for s in shuffled if s.position == 8]
    assert max(lopsided) >= 4
    with pytest.raises(ValueError, match="control"):
        latent_label_prompts(2, control="permuted")
    with pytest.raises(ValueError, match="likelihood"):
        latent_label_prompts(2, likelihood=1.0)


def test_prompt_refuses_a_posterior_that_is_not_one():
    with pytest.raises(ValueError, match="summing to 1"):
        Prompt("x", (" A", " B"), (0.5, 0.6), "latent-label", 0)
    with pytest.raises(ValueError, match="choices"):
        Prompt("x", (" A",), (1.0,), "latent-label", 0)
    read = Prompt("x", [" A", " B"], [0.25, 0.75], "latent-label", 0)  # as a JSON file gives it
    assert read.choices == (" A", " B") and read.posterior == (0.25, 0.75) and hash(read)


# --- the text tunnels ----------------------------------------------------------------------------------------------


def test_text_bijection_posteriors_are_the_tunnels_and_enumeration():
    n = 12
    ps = text_tunnel_prompts("bijection", n, seed=2)
    task = Bijection(**lp.BIJECTION_PARAMS)
    V, L = task.params.V, task.params.L
    batch = task.sample(n, seed=2)
    scored = batch.posterior.probs[:, 0::2]  # (B,L+1,V): the tunnel's posterior at its scored keys, in order
    assert len(ps) == n * (L + 1) and Counter(p.position for p in ps) == {t: n for t in range(L + 1)}
    letters, digits = "abcde", "12345"
    kinds = Counter()
    for i, p in enumerate(ps):
        s, t = divmod(i, L + 1)
        assert p.family == "text-bijection" and p.position == t and p.choices == tuple(f" {d}" for d in digits)
        lines = p.text.split("\n")
        assert lines[0] == "Each letter a to e stands for a different digit from 1 to 5."
        pairs = [re.fullmatch(r"([a-e]) -> ([1-5])", line).groups() for line in lines[1:-1]]
        query = re.fullmatch(r"([a-e]) ->", lines[-1]).group(1)
        assert len(pairs) == t
        # the text is the tunnel's sequence: its keys and values in order, then the key it scores
        keys = batch.latent["keys"][s].tolist()
        assert [letters.index(k) for k, _ in pairs] == keys[:t]
        assert [digits.index(v) for _, v in pairs] == batch.latent["perm"][s, keys[:t]].tolist()
        # brute force: every permutation of 5 digits that agrees with the revealed pairs, equally likely
        agree = [
            perm
            for perm in itertools.permutations(range(V))
            if all(perm[letters.index(k)] == digits.index(v) for k, v in pairs)
        ]
        counts = Counter(perm[letters.index(query)] for perm in agree)
        assert p.posterior == pytest.approx([counts[v] / len(agree) for v in range(V)], abs=1e-12)
        np.testing.assert_allclose(p.posterior, scored[s, t].double().numpy(), atol=1e-6)
        kinds["seen" if query in {k for k, _ in pairs} else "unseen"] += 1
    assert kinds["seen"] > n and kinds["unseen"] > n  # point masses at revealed keys and uniform elsewhere


def test_text_hmm_posteriors_are_the_tunnels_filter_and_enumeration():
    n = 8
    ps = text_tunnel_prompts("hmm", n, seed=4)
    task = HMM(**lp.HMM_PARAMS)
    S, K = task.params.S, task.params.K
    batch = task.sample(n, seed=4)
    scored = batch.posterior.probs[batch.target_mask].view(n, K, S)  # the tunnel's filter at each observation
    assert len(ps) == n * K and Counter(p.position for p in ps) == {t: n for t in range(1, K + 1)}
    states, symbols = "PQ", "uv"
    number = r"(\d\.\d\d)"
    for i, p in enumerate(ps):
        s, t = divmod(i, K)
        t += 1
        assert p.family == "text-hmm" and p.position == t and p.choices == (" P", " Q")
        lines = p.text.split("\n")
        assert lines[0] == "A hidden state, P or Q (equally likely at first), shows a symbol, then moves, at each step."
        T = np.array([float(x) for x in re.findall(number, lines[1])]).reshape(S, S)
        E = np.array([float(x) for x in re.findall(number, lines[2])]).reshape(S, 2)
        assert lines[1].startswith("Moves: P to P ") and lines[2].startswith("Shows: P gives u ")
        obs = [symbols.index(o) for o in lines[3].removeprefix("Symbols: ").split()]
        assert lines[-1] == "State at the last symbol:" and len(obs) == t
        # the text states exactly the tunnel's matrices and observations
        np.testing.assert_allclose(T, batch.latent["transition"][s].double().numpy(), atol=1e-6)
        np.testing.assert_allclose(E, batch.latent["emission"][s].double().numpy(), atol=1e-6)
        assert obs == batch.latent["observations"][s, :t].tolist()
        # brute force: every path of hidden states, weighted by its probability with the observations
        weight = np.zeros(S)
        for path in itertools.product(range(S), repeat=t):
            w = 1.0 / S * E[path[0], obs[0]]
            for j in range(1, t):
                w *= T[path[j - 1], path[j]] * E[path[j], obs[j]]
            weight[path[-1]] += w
        assert p.posterior == pytest.approx(weight / weight.sum(), abs=1e-12)
        np.testing.assert_allclose(p.posterior, scored[s, t - 1].double().numpy(), atol=1e-6)
        assert states == "".join(c.strip() for c in p.choices)
    assert max(abs(p.posterior[0] - 0.5) for p in ps) > 0.2
    with pytest.raises(ValueError, match="task"):
        text_tunnel_prompts("regression", 2)


def test_builtin_prompts_hold_every_family_n_per_position():
    ps = builtin_prompts(3, seed=1)
    assert {p.family for p in ps} == set(FAMILIES)
    assert set(Counter((p.family, p.position) for p in ps).values()) == {3}
    tok = make_tokenizer(ps)
    assert all(tok.unk_token_id not in tok(p.text)["input_ids"] for p in ps)  # the tokenizer covers every word
    assert max(len(tok(p.text)["input_ids"]) for p in ps) < 120  # short prompts


# --- score ---------------------------------------------------------------------------------------------------------


def direct(tok, table: torch.Tensor, ps: list[Prompt]) -> dict:
    """Per (family, position) the mean entropy error and KL in bits, computed directly with numpy."""
    rows: dict = {}
    for p in ps:
        last = tok(p.text)["input_ids"][-1]
        cid = [tok.convert_tokens_to_ids(c.strip()) for c in p.choices]
        z = table[last, cid].double().numpy()
        q = np.exp(z - z.max())
        q /= q.sum()
        pp = np.array(p.posterior)
        h_p = -sum(x * math.log2(x) for x in pp if x > 0)
        h_q = -float((q * np.log2(q)).sum())
        kl = sum(x * math.log2(x / y) for x, y in zip(pp, q, strict=True) if x > 0)
        rows.setdefault(p.family, {}).setdefault(p.position, []).append((abs(h_q - h_p), kl, h_p))
    return rows


def test_score_is_the_direct_computation_on_a_model_of_known_logits():
    ps = builtin_prompts(4, seed=0)
    tok = make_tokenizer(ps)
    g = torch.Generator().manual_seed(0)
    table = torch.randn(len(tok), len(tok), generator=g) * 2
    table[tok.pad_token_id] = 0.0  # reading a pad instead of the last real token changes every number
    want = direct(tok, table, ps)
    got = score(TableLM(table), tok, ps, batch_size=7)
    json.dumps(got)  # JSON-serialisable
    assert got["n_prompts"] == len(ps) and set(got["families"]) == set(FAMILIES)
    for family, by_pos in want.items():
        f = got["families"][family]
        assert set(f["positions"]) == {str(pos) for pos in by_pos}
        for pos, rows in by_pos.items():
            m = f["positions"][str(pos)]
            a = np.array(rows)
            assert m["n"] == len(rows)
            assert m["entropy_error_bits"]["mean"] == pytest.approx(a[:, 0].mean(), abs=1e-9)
            assert m["kl_bits"]["mean"] == pytest.approx(a[:, 1].mean(), abs=1e-9)
            assert m["exact_entropy_bits"] == pytest.approx(a[:, 2].mean(), abs=1e-12)
            for key in ("entropy_error_bits", "kl_bits"):
                assert m[key]["lo"] <= m[key]["mean"] + 1e-12 and m[key]["mean"] <= m[key]["hi"] + 1e-12
        every = np.concatenate([np.array(r) for r in by_pos.values()])
        assert f["overall"]["n"] == len(every)
        assert f["overall"]["kl_bits"]["mean"] == pytest.approx(every[:, 1].mean(), abs=1e-9)
        assert f["overall"]["entropy_error_bits"]["mean"] == pytest.approx(every[:, 0].mean(), abs=1e-9)
        lo, hi = f["overall"]["kl_bits"]["lo"], f["overall"]["kl_bits"]["hi"]
        if every[:, 1].std() > 1e-6:  # a real interval over prompts that differ (the prior's families: one q, one p)
            assert lo < every[:, 1].mean() < hi
        assert f["mark"] == "✗" and f["level"] == "fail" and f["reasons"]  # random logits: far from exact


def test_score_marks_the_exact_posterior_exact_and_a_blind_model_only_where_the_prior_is_exact():
    ps = builtin_prompts(3, seed=0)
    tok = make_tokenizer(ps)
    exact = score(ExactLM(tok, ps), tok, ps)
    for family, f in exact["families"].items():
        assert f["mark"] == "✓" and f["level"] == "exact", family
        assert (
            f["overall"]["kl_bits"]["hi"] < 1e-6 and f["overall"]["entropy_error_bits"]["hi"] < 1e-6
        )  # float32 logits
    blind = score(TableLM(torch.zeros(len(tok), len(tok))), tok, ps)  # uniform over the choices everywhere
    marks = {family: f["mark"] for family, f in blind["families"].items()}
    assert marks["latent-label/no-evidence"] == marks["latent-label/shuffled"] == "✓"  # the prior is the answer
    assert marks["latent-label"] == marks["latent-label/remap"] == marks["text-bijection"] == "✗"
    k0 = blind["families"]["latent-label"]["positions"]["0"]
    assert k0["kl_bits"]["mean"] == pytest.approx(0.0, abs=1e-12)  # k = 0: the prior, exact
    assert blind["thresholds"] == {"exact_bits": 0.01, "approx_bits": 0.1}
    table = Document("scores", [score_table(blind)]).markdown(Path("."))
    assert all(f"**{family}**" in table for family in FAMILIES) and "✓" in table and "✗" in table
    rows = [line for line in table.split("\n") if line.startswith("| ")]
    assert len(rows) == 1 + sum(len(f["positions"]) + 1 for f in blind["families"].values())  # header, then data


def test_a_choice_that_is_not_one_token_is_refused_by_name():
    ps = latent_label_prompts(1, ks=(2,))
    tok = make_tokenizer(ps)
    model = TableLM(torch.zeros(len(tok), len(tok)))
    two = Prompt(ps[0].text, (" A B", " B"), (0.5, 0.5), "latent-label", 2)
    with pytest.raises(ValueError, match=r"choice ' A B' .* 2 tokens") as err:
        score(model, tok, [*ps, two])
    assert "\n" not in str(err.value)
    unknown = Prompt(ps[0].text, (" A", " Zed"), (0.5, 0.5), "latent-label", 2)
    with pytest.raises(ValueError, match=r"choice ' Zed' .* unknown token"):
        score(model, tok, [unknown])
    same = Prompt(ps[0].text, (" A", "  A"), (0.5, 0.5), "latent-label", 2)
    with pytest.raises(ValueError, match="share a token"):
        score(model, tok, [same])


def test_score_on_a_random_gpt2_is_finite_and_the_same_for_left_and_right_padding():
    torch.set_num_threads(1)
    ps = builtin_prompts(2, seed=0)
    tok = make_tokenizer(ps)
    lm = tiny_gpt2(len(tok)).train()
    right = score(lm, tok, ps, batch_size=8)
    assert lm.training  # its mode restored
    tok.padding_side = "left"
    left = score(lm, tok, ps, batch_size=8)
    single = score(lm, tok, ps, batch_size=1)  # no padding at all
    assert set(right["families"]) == set(FAMILIES) and right["n_prompts"] == len(ps)
    lengths = {len(tok(p.text)["input_ids"]) for p in ps}
    assert len(lengths) > 5  # batches really are padded
    for family, f in right["families"].items():
        for pos, m in [*f["positions"].items(), ("all", f["overall"])]:
            other = left["families"][family]["positions"].get(pos, left["families"][family]["overall"])
            alone = single["families"][family]["positions"].get(pos, single["families"][family]["overall"])
            for key in ("entropy_error_bits", "kl_bits"):
                for end in ("mean", "lo", "hi"):
                    assert math.isfinite(m[key][end]), (family, pos, key)
                    assert other[key][end] == pytest.approx(m[key][end], abs=1e-5), (family, pos, key, "left")
                    assert alone[key][end] == pytest.approx(m[key][end], abs=1e-5), (family, pos, key, "single")
            assert math.isfinite(m["model_entropy_bits"]) and m["model_entropy_bits"] > 0
    assert all(f["mark"] in "✓◐✗" for f in right["families"].values())


def test_score_reads_the_choices_of_a_byte_level_bpe_as_gpt2_does():
    """GPT-2's scheme (byte-level BPE, no pad token), trained here on the prompts: the choices are its "Ġ" tokens."""
    from tokenizers import ByteLevelBPETokenizer

    torch.set_num_threads(1)
    ps = builtin_prompts(2, seed=0)
    bpe = ByteLevelBPETokenizer()
    texts = [p.text + c for p in ps for c in p.choices]
    bpe.train_from_iterator(texts, vocab_size=1000, min_frequency=1, show_progress=False, special_tokens=["<|eot|>"])
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|eot|>")
    assert tok.pad_token is None
    for p in ps:
        assert tok.convert_ids_to_tokens(lp.choice_ids(tok, p)) == [f"Ġ{c.strip()}" for c in p.choices]
    config = transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=32, vocab_size=len(tok), n_positions=256, bos_token_id=None, eos_token_id=None
    )
    torch.manual_seed(0)
    lm = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    got = score(lm, tok, ps, batch_size=8)
    assert set(got["families"]) == set(FAMILIES)
    assert all(math.isfinite(f["overall"]["kl_bits"]["hi"]) for f in got["families"].values())
    split = Prompt(ps[0].text, (" A", " Ab"), (0.5, 0.5), "latent-label", 0)  # " Ab": no merge learned for it
    with pytest.raises(ValueError, match="choice ' Ab'"):
        score(lm, tok, [split])


class _Characters:
    """A tokenizer of one token per character (no unknown token): " 1" reads as " " then "1", as digits do in
    Llama-family BPE."""

    unk_token_id = None

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": [ord(c) for c in text]}


def test_a_leading_space_the_tokenizer_reads_alone_moves_into_the_prompt_and_the_posterior_stays():
    tok = _Characters()
    p = Prompt(text="x ->", choices=(" 1", " 2"), posterior=(0.25, 0.75), family="text-bijection", position=1)
    with pytest.raises(ValueError, match="is not one token"):
        lp.choice_ids(tok, p)
    moved = lp.fitted(tok, p)
    assert (moved.text, moved.choices, moved.posterior) == ("x -> ", ("1", "2"), p.posterior)
    assert lp.choice_ids(tok, moved) == [ord("1"), ord("2")]
    single = Prompt(text="x ->", choices=("1", "2"), posterior=(0.5, 0.5), family="text-bijection", position=0)
    assert lp.fitted(tok, single) is single  # already one token each: as it is
    long = Prompt(text="x ->", choices=(" 10", " 2"), posterior=(0.5, 0.5), family="text-bijection", position=0)
    with pytest.raises(ValueError, match="choice ' 10' .*not one token"):
        lp.fitted(tok, long)  # "10" is two characters either way: refused, naming the choice as written
