"""Prompts with exact posteriors for language models: does a causal LM's next token carry the Bayesian posterior?

Each `Prompt` is a short text whose next token is the answer, a tuple of candidate next tokens (`choices`) and the
exact posterior over them. The model's posterior q is its next-token distribution renormalised over the choices
(a softmax of the choices' logits); `score` compares q with the exact posterior p per family and position.

Latent-label task ("latent-label"; the companion paper's). A hidden label z in {A, B} has prior 1/2. Each of k
examples shows an item (a random number 1..99, irrelevant) with an observed label that equals z with probability
`likelihood` (0.9) and is the other label otherwise, independently. By Bayes, P(z = A | examples) / P(z = B |
examples) = r^(#A - #B), r = likelihood / (1 - likelihood) (9^(#A - #B) at 0.9). The prompt states the rule, shows the
k examples and asks for the label; position = k:

    Each item shows the hidden label (A or B, equally likely) with probability 0.9, else the other label.
    item 17: A
    item 4: B
    item 62: A
    The hidden label is                                              -> " A" / " B"

Its controls, with the same draws as the main family for a seed (prompt i of a control is prompt i of the main family
changed as said):

* "latent-label/remap" (lexical remap): the label words A and B become X and Y everywhere (rule, examples, choices);
  the same posterior. A model that reads the evidence answers alike; one leaning on the words A and B does not.
* "latent-label/shuffled": the shown labels are shuffled out of any relation to z -- each is a fair coin, independent
  of z -- and the rule line says so ("Each item shows a random label (A or B), unrelated to the hidden label (A or B,
  equally likely)."). The examples are then no evidence (likelihood 1/2 for both labels), so the exact posterior is
  the prior 1/2 at every k, however lopsided the shown labels are. The text carries that: an exact reader of the
  prompt answers 1/2; a model that counts labels without reading the rule does not.
* "latent-label/no-evidence": the same k item lines with their labels removed ("item 17: ?"), the rule unchanged;
  nothing is observed, so the exact posterior is the prior 1/2 at every k.

Text renderings of windtunnel's own tunnels, their posteriors computed by the tunnels' own code:

* "text-bijection": the bijection tunnel (`tasks.bijection`, `BIJECTION_PARAMS`: V = 5, L = 5 pairs, the paired
  format, keys drawn with replacement so that a query may repeat a revealed key), keys written as letters a..e,
  values as digits 1..5. One prompt per scored key of a sequence: the pairs revealed before it, then the key asked,
  the answer its digit; position = the number of pairs revealed (0..L; the paired format's final query, always a
  revealed key, sits at L). The posterior is `bijection_posterior` (float64): a point mass on the key's value where
  the key was revealed, else uniform over the values not revealed yet. The rule line tells the LM all it conditions
  on (a fresh uniform bijection of five letters onto five digits):

    Each letter a to e stands for a different digit from 1 to 5.
    c -> 4
    a -> 1
    c ->                                                             -> " 1" ... " 5"

* "text-hmm": the HMM tunnel (`tasks.hmm`, `HMM_PARAMS`: S = 2 states P, Q; O = 2 symbols u, v; K = 6 observations),
  a fresh random HMM per sequence drawn by the tunnel itself (Dirichlet rows on the cent grid, floor 0.05). The
  prompt states the uniform initial state, the transition and emission matrices in cents -- exactly the numbers the
  filter uses -- and the first t symbols; the answer is the state at the t-th symbol; position = t (1..K). The
  posterior is the tunnel's `forward_filter` p(s_t | o_1..t) (float64) on those matrices, so everything it
  conditions on is in the text (whether an LM can do the arithmetic is what is measured):

    A hidden state, P or Q (equally likely at first), shows a symbol, then moves, at each step.
    Moves: P to P 0.80, P to Q 0.20, Q to P 0.35, Q to Q 0.65.
    Shows: P gives u 0.90, v 0.10; Q gives u 0.25, v 0.75.
    Symbols: u v v
    State at the last symbol:                                        -> " P" / " Q"

Choices carry a leading space (" A"), what GPT-2-style BPE tokenizers need; a whitespace word-level tokenizer reads
the same strings. `score` derives each choice's token from the tokenizer in context (the tokens of text + choice
past those of text) and refuses, with a ValueError naming the choice, any choice that is not exactly one known token
there.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from windtunnel.evaluation.marks import MARK, Thresholds, verdict
from windtunnel.evaluation.metrics import ratio_intervals
from windtunnel.geometry.stats import probs_entropy_bits, probs_kl_bits
from windtunnel.report.document import Table
from windtunnel.tasks.bijection import Bijection, bijection_posterior, query_layout
from windtunnel.tasks.hmm import HMM, forward_filter
from windtunnel.text import number

LATENT = "latent-label"
CONTROLS = ("remap", "shuffled", "no-evidence")
TEXT_TASKS = ("bijection", "hmm")
FAMILIES = (LATENT, *(f"{LATENT}/{c}" for c in CONTROLS), "text-bijection", "text-hmm")

LABELS = ("A", "B")  # the latent label's words
REMAP_LABELS = ("X", "Y")  # the lexical remap's
ITEMS = 99  # items are numbered 1..ITEMS, distinct within a prompt
LATENT_QUERY = "The hidden label is"

BIJECTION_PARAMS: dict[str, Any] = {"V": 5, "L": 5, "format": "paired", "with_replacement": True}
KEY_WORDS = ("a", "b", "c", "d", "e")
VALUE_WORDS = ("1", "2", "3", "4", "5")
HMM_PARAMS: dict[str, Any] = {"S": 2, "O": 2, "K": 6}
STATE_WORDS = ("P", "Q")
SYMBOL_WORDS = ("u", "v")

N_BOOT = 1000  # bootstrap resamples of the intervals
LEVEL = 0.95


@dataclass(frozen=True)
class Prompt:
    """A text whose next token is the answer, the candidate next tokens and the exact posterior over them."""

    text: str  # what the LM reads (its next token is the answer)
    choices: tuple[str, ...]  # candidate next tokens (one token each, leading space included)
    posterior: tuple[float, ...]  # the exact posterior over `choices`, sums to 1
    family: str  # one of FAMILIES
    position: int  # latent-label: k, the examples shown; text tunnels: observations / pairs revealed before the answer

    def __post_init__(self) -> None:
        # lists (a prompt read from JSON) become tuples: a Prompt stays hashable and immutable
        object.__setattr__(self, "choices", tuple(str(c) for c in self.choices))
        object.__setattr__(self, "posterior", tuple(float(x) for x in self.posterior))
        if len(self.choices) < 2 or len(self.choices) != len(self.posterior):
            raise ValueError(f"Prompt: {len(self.choices)} choices for {len(self.posterior)} posterior probabilities")
        if len(set(self.choices)) != len(self.choices):
            raise ValueError(f"Prompt: choices repeat ({self.choices})")
        p = self.posterior
        if not all(math.isfinite(x) and x >= 0 for x in p) or abs(math.fsum(p) - 1.0) > 1e-9:
            raise ValueError(f"Prompt: the posterior must be probabilities summing to 1 (got {p})")


# --- the latent-label task ------------------------------------------------------------------------------------


def latent_label_posterior(labels: Iterable[int], likelihood: float) -> tuple[float, float]:
    """(P(z = A), P(z = B)) given shown labels (0 = A, 1 = B), each equal to z with probability `likelihood`, prior
    1/2: the odds are r^(#A - #B), r = likelihood / (1 - likelihood); a logistic, computed without overflow."""
    shown = list(labels)
    x = (shown.count(0) - shown.count(1)) * (math.log(likelihood) - math.log1p(-likelihood))  # log odds of A

    def sigmoid(v: float) -> float:
        return 1.0 / (1.0 + math.exp(-v)) if v >= 0 else math.exp(v) / (1.0 + math.exp(v))

    return sigmoid(x), sigmoid(-x)


def latent_label_prompts(
    n: int,
    seed: int = 0,
    ks: Sequence[int] = (0, 1, 2, 4, 8),
    control: str | None = None,
    likelihood: float = 0.9,
) -> list[Prompt]:
    """`n` latent-label prompts per number of examples k in `ks` (module docstring), of the main family or of a
    control ("remap", "shuffled", "no-evidence"); the same seed draws the same z, items and labels for all four."""
    if control is not None and control not in CONTROLS:
        raise ValueError(f"control: one of {', '.join(CONTROLS)} or None (got {control!r})")
    if not 0.0 < likelihood < 1.0:
        raise ValueError(f"likelihood: must be in (0, 1) (got {likelihood})")
    if int(n) < 1:
        raise ValueError(f"n: must be >= 1 (got {n})")
    if any(int(k) != k or not 0 <= k <= ITEMS for k in ks):
        raise ValueError(f"ks: whole numbers of examples in 0..{ITEMS} (got {tuple(ks)})")
    a, b = words = REMAP_LABELS if control == "remap" else LABELS
    if control == "shuffled":
        rule = (
            f"Each item shows a random label ({a} or {b}), unrelated to the hidden label ({a} or {b}, equally likely)."
        )
    else:
        rule = (
            f"Each item shows the hidden label ({a} or {b}, equally likely) with probability {likelihood:g}, "
            "else the other label."
        )
    family = LATENT if control is None else f"{LATENT}/{control}"
    rng = np.random.default_rng(seed)
    out = []
    for k in (int(k) for k in ks):
        for _ in range(int(n)):
            z = int(rng.integers(2))
            items = rng.choice(ITEMS, size=k, replace=False) + 1  # (k,)
            noisy = [z if u < likelihood else 1 - z for u in rng.random(k)]  # shown labels: z with prob. likelihood
            coins = [int(c) for c in rng.integers(0, 2, size=k)]  # the shuffled control's: independent of z
            if control == "no-evidence":
                lines, post = [f"item {i}: ?" for i in items], (0.5, 0.5)
            elif control == "shuffled":
                lines = [f"item {i}: {words[c]}" for i, c in zip(items, coins, strict=True)]
                post = latent_label_posterior(coins, 0.5)  # a flat likelihood: the prior 1/2
            else:
                lines = [f"item {i}: {words[c]}" for i, c in zip(items, noisy, strict=True)]
                post = latent_label_posterior(noisy, likelihood)
            text = "\n".join([rule, *lines, LATENT_QUERY])
            out.append(Prompt(text, (f" {a}", f" {b}"), post, family, k))
    return out


# --- text renderings of the tunnels ----------------------------------------------------------------------------


def _bijection_prompts(n: int, seed: int) -> list[Prompt]:
    """Every scored key of `n` bijection sequences (BIJECTION_PARAMS) as a prompt, sequence by sequence, positions
    0..L in order; the posterior is the tunnel's `bijection_posterior`."""
    task = Bijection(**BIJECTION_PARAMS)
    V = task.params.V
    batch = task.sample(n, seed=seed)
    keys = batch.latent["keys"]  # (B,L)
    values = batch.latent["perm"].gather(1, keys)  # (B,L)
    asked, n_before = query_layout(keys, batch.latent.get("query"))  # (B,P), (P,)
    probs = bijection_posterior(keys, values, asked, n_before, V)  # (B,P,V) float64
    rule = f"Each letter {KEY_WORDS[0]} to {KEY_WORDS[V - 1]} stands for a different digit from 1 to {V}."
    choices = tuple(f" {w}" for w in VALUE_WORDS[:V])
    out = []
    for s in range(keys.shape[0]):
        pairs = [
            f"{KEY_WORDS[k]} -> {VALUE_WORDS[v]}" for k, v in zip(keys[s].tolist(), values[s].tolist(), strict=True)
        ]
        for p, t in enumerate(n_before.tolist()):
            text = "\n".join([rule, *pairs[:t], f"{KEY_WORDS[int(asked[s, p])]} ->"])
            out.append(Prompt(text, choices, tuple(probs[s, p].tolist()), "text-bijection", t))
    return out


def _cents(c: int) -> str:
    return f"{c // 100}.{c % 100:02d}"


def _hmm_prompts(n: int, seed: int) -> list[Prompt]:
    """Every observation of `n` HMM sequences (HMM_PARAMS, the tunnel's own draws) as a prompt, sequence by sequence,
    positions 1..K in order; the posterior is the tunnel's `forward_filter` on the cent matrices the text states."""
    task = HMM(**HMM_PARAMS)
    batch = task.sample(n, seed=seed)
    t_cents, e_cents = ((batch.latent[m].double() * 100).round().long() for m in ("transition", "emission"))
    obs = batch.latent["observations"]  # (B,K)
    post = forward_filter((t_cents.double() / 100).log(), (e_cents.double() / 100).log(), obs)  # (B,K,S) float64
    S, O = t_cents.shape[-1], e_cents.shape[-1]
    states, symbols = STATE_WORDS[:S], SYMBOL_WORDS[:O]
    either = f"{', '.join(states[:-1])} or {states[-1]}"
    out = []
    for s in range(obs.shape[0]):
        T, E = t_cents[s].tolist(), e_cents[s].tolist()
        moves = ", ".join(f"{states[i]} to {states[j]} {_cents(T[i][j])}" for i in range(S) for j in range(S))
        shows = "; ".join(
            f"{states[i]} gives " + ", ".join(f"{symbols[o]} {_cents(E[i][o])}" for o in range(O)) for i in range(S)
        )
        head = [
            f"A hidden state, {either} (equally likely at first), shows a symbol, then moves, at each step.",
            f"Moves: {moves}.",
            f"Shows: {shows}.",
        ]
        seen = [symbols[o] for o in obs[s].tolist()]
        for t in range(1, len(seen) + 1):
            text = "\n".join([*head, "Symbols: " + " ".join(seen[:t]), "State at the last symbol:"])
            out.append(Prompt(text, tuple(f" {w}" for w in states), tuple(post[s, t - 1].tolist()), "text-hmm", t))
    return out


def text_tunnel_prompts(task: str, n: int, seed: int = 0) -> list[Prompt]:
    """`n` prompts per position of a tunnel rendered as text: "bijection" (positions 0..L) or "hmm" (1..K), from
    `n` sequences the tunnel samples with `seed` (module docstring)."""
    if int(n) < 1:
        raise ValueError(f"n: must be >= 1 (got {n})")
    if task == "bijection":
        return _bijection_prompts(int(n), seed)
    if task == "hmm":
        return _hmm_prompts(int(n), seed)
    raise ValueError(f"task: one of {', '.join(TEXT_TASKS)} (got {task!r})")


def builtin_prompts(n: int, seed: int = 0) -> list[Prompt]:
    """The built-in set: `n` prompts per (family, position) of the latent-label task (k = 0, 1, 2, 4, 8), each of its
    three controls, and both text tunnels."""
    out = latent_label_prompts(n, seed)
    for control in CONTROLS:
        out += latent_label_prompts(n, seed, control=control)
    for task in TEXT_TASKS:
        out += text_tunnel_prompts(task, n, seed)
    return out


# --- scoring a causal LM -------------------------------------------------------------------------------------


def _encode(tokenizer: Any, text: str, special: bool) -> list[int]:
    return [int(i) for i in tokenizer(text, add_special_tokens=special)["input_ids"]]


def choice_ids(tokenizer: Any, prompt: Prompt) -> list[int]:
    """The token id of each choice as the next token of `prompt.text`: the tokens of text + choice past those of text.
    A one-line ValueError naming the choice where that is not exactly one token (or is the unknown token), or where
    two choices share a token."""
    base = _encode(tokenizer, prompt.text, False)
    unk = getattr(tokenizer, "unk_token_id", None)
    ids = []
    for c in prompt.choices:
        full = _encode(tokenizer, prompt.text + c, False)
        extra = full[len(base) :]
        if full[: len(base)] != base or len(extra) != 1 or (unk is not None and extra[0] == unk):
            what = "the unknown token" if len(extra) == 1 and full[: len(base)] == base else f"{len(extra)} tokens"
            raise ValueError(
                f"score: choice {c!r} of a {prompt.family} prompt is not one token of this tokenizer after the prompt "
                f"(it reads as {what}); give choices the tokenizer holds as single tokens"
            )
        ids.append(extra[0])
    if len(set(ids)) != len(ids):
        raise ValueError(f"score: choices {prompt.choices} of a {prompt.family} prompt share a token of this tokenizer")
    return ids


def fitted(tokenizer: Any, prompt: Prompt) -> Prompt:
    """`prompt` as `tokenizer` reads each choice as one next token: as it is where it does, else, where every choice
    starts with a space the tokenizer reads as a token of its own (digits in Llama-family BPE: " 1" is " " then "1"),
    with that space moved to the end of the text, which is the model's own reading of the same string (the space, then
    the choice) and leaves the posterior over the choices as it is. The ValueError of `choice_ids` where neither
    reading has single-token choices."""
    try:
        choice_ids(tokenizer, prompt)
        return prompt
    except ValueError:
        if not all(c.startswith(" ") and len(c) > 1 for c in prompt.choices):
            raise
        moved = dataclasses.replace(prompt, text=prompt.text + " ", choices=tuple(c[1:] for c in prompt.choices))
        try:
            choice_ids(tokenizer, moved)
        except ValueError:
            choice_ids(tokenizer, prompt)  # the original reading's error, which names the choice as written
            raise
        return moved


def _accepts(model: Any, name: str) -> bool:
    """Whether `model`'s forward takes keyword `name` (by name or through **kwargs)."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


@torch.no_grad()
def _choice_log_probs(model: Any, tokenizer: Any, prompts: list[Prompt], batch_size: int) -> list[torch.Tensor]:
    """Per prompt the model's log-probabilities (C,) float64 over its choices (softmax of the choices' logits at the
    prompt's last real token), prompts batched by length, padded on the tokenizer's `padding_side`."""
    ids = [_encode(tokenizer, p.text, True) for p in prompts]
    if not all(ids):
        raise ValueError("score: a prompt whose text is no tokens: the model needs a token to predict from")
    choices = [choice_ids(tokenizer, p) for p in prompts]
    left = getattr(tokenizer, "padding_side", "right") == "left"
    pad = next((i for i in (tokenizer.pad_token_id, getattr(tokenizer, "eos_token_id", None)) if i is not None), 0)
    param = next(iter(model.parameters()), None)
    device = param.device if param is not None else torch.device("cpu")
    extra = {k: v for k, v in (("use_cache", False),) if _accepts(model, k)}
    positions = _accepts(model, "position_ids")
    order = sorted(range(len(prompts)), key=lambda i: len(ids[i]))
    out: list[torch.Tensor] = [torch.empty(0)] * len(prompts)
    was = model.training
    model.eval()
    try:
        for a in range(0, len(order), batch_size):
            rows = order[a : a + batch_size]
            width = max(len(ids[i]) for i in rows)
            x = torch.full((len(rows), width), int(pad), dtype=torch.long)  # (B,T)
            mask = torch.zeros((len(rows), width), dtype=torch.long)  # (B,T)
            for r, i in enumerate(rows):
                at = slice(width - len(ids[i]), width) if left else slice(0, len(ids[i]))
                x[r, at], mask[r, at] = torch.tensor(ids[i]), 1
            kwargs: dict[str, Any] = dict(extra)
            if positions:  # each prompt's own positions 0.. whatever its padding: left padding changes nothing
                kwargs["position_ids"] = (mask.cumsum(1) - 1).clamp_min(0).to(device)
            logits = model(input_ids=x.to(device), attention_mask=mask.to(device), **kwargs).logits  # (B,T,vocab)
            last = width - 1 - mask.flip(1).argmax(1)  # (B,) the last real token
            final = logits[torch.arange(len(rows), device=logits.device), last.to(logits.device)]  # (B,vocab)
            for r, i in enumerate(rows):
                chosen = final[r, torch.tensor(choices[i], device=final.device)].double().cpu()  # (C,)
                out[i] = torch.log_softmax(chosen, -1)
    finally:
        model.train(was)
    return out


def _summary(rows: torch.Tensor, seed: int) -> dict:
    """n, mean entropy error and KL with bootstrap intervals over prompts, the mean exact and model entropies, of
    per-prompt rows (N,4): entropy error, KL, exact entropy, model entropy (bits)."""
    err, kl, h_exact, h_model = rows.unbind(1)  # (N,) each
    ee, kk = ratio_intervals(torch.stack([err, kl], 1), torch.ones(len(err)), n_boot=N_BOOT, seed=seed, level=LEVEL)
    return {
        "n": len(err),
        "entropy_error_bits": ee,
        "kl_bits": kk,
        "exact_entropy_bits": float(h_exact.mean()),
        "model_entropy_bits": float(h_model.mean()),
    }


def score(model: Any, tokenizer: Any, prompts: list[Prompt], batch_size: int = 16, seed: int = 0) -> dict:
    """Score a Hugging Face causal LM on `prompts`: its posterior q over each prompt's choices (softmax of their
    logits at the prompt's next token) against the exact posterior p, per family and position.

    Per (family, position) and per family overall: n, the mean entropy error |H(q) - H(p)| and the mean KL(p ‖ q) in
    bits, each with a 95% percentile bootstrap interval over prompts (`metrics.ratio_intervals`, 1000 resamples,
    `seed`), and the mean exact and model entropies. Each family's mark is `marks.verdict`'s rule on its overall
    entropy error and KL alone (the thresholds reported under "thresholds"; no accuracy, no belief horizon, no
    sees-the-answer check). Runs under torch.no_grad in eval mode (the model's mode restored after).
    """
    if not prompts:
        raise ValueError("score: no prompts")
    if int(batch_size) < 1:
        raise ValueError(f"batch_size: must be >= 1 (got {batch_size})")
    log_q = _choice_log_probs(model, tokenizer, prompts, int(batch_size))
    rows: dict[str, dict[int, list[tuple[float, float, float, float]]]] = {}
    for prompt, lq in zip(prompts, log_q, strict=True):
        p = torch.tensor(prompt.posterior, dtype=torch.float64)
        h_p, h_q = float(probs_entropy_bits(p)), float(probs_entropy_bits(lq.exp()))
        kl = float(probs_kl_bits(p, lq))
        rows.setdefault(prompt.family, {}).setdefault(prompt.position, []).append((abs(h_q - h_p), kl, h_p, h_q))
    th = Thresholds()
    families: dict[str, Any] = {}
    for family in sorted(rows, key=lambda f: (FAMILIES.index(f) if f in FAMILIES else len(FAMILIES), f)):
        by_position = rows[family]
        table = {pos: torch.tensor(v, dtype=torch.float64) for pos, v in sorted(by_position.items())}
        overall = _summary(torch.cat(list(table.values())), seed)
        v = verdict(
            None, {"metrics": {"entropy_mae_bits": overall["entropy_error_bits"], "kl_bits": overall["kl_bits"]}}
        )
        families[family] = {
            "positions": {str(pos): _summary(t, seed) for pos, t in table.items()},
            "overall": overall,
            "mark": v.mark,
            "level": v.level,
            "reasons": list(v.reasons),
        }
    return {
        "families": families,
        "n_prompts": len(prompts),
        "thresholds": {"exact_bits": th.exact_bits, "approx_bits": th.approx_bits},
        "interval": f"{100 * LEVEL:g}% percentile bootstrap over prompts ({N_BOOT} resamples, seed {seed})",
        "mark_rule": "marks.verdict on the family's entropy error and KL(exact ‖ model), upper ends of their "
        f"intervals: {MARK['exact']} both ≤ {th.exact_bits:g} bits, {MARK['approximate']} both ≤ "
        f"{th.approx_bits:g} bits, {MARK['fail']} otherwise",
    }


def _interval(m: dict) -> str:
    return f"{number(m['mean'])} [{number(m['lo'])}, {number(m['hi'])}]"


def score_table(scores: dict) -> Table:
    """`score`'s result as a table: a row per (family, position), then the family's overall row with its mark; the
    interval and the mark's rule in the caption."""
    header = ["family", "position", "n", "H exact (bits)", "entropy error (bits)", "KL(exact ‖ model) (bits)", "mark"]
    rows = []
    for family, f in scores["families"].items():
        for pos, m in f["positions"].items():
            rows.append([family, pos, str(m["n"]), number(m["exact_entropy_bits"]), _interval(m["entropy_error_bits"]),
                         _interval(m["kl_bits"]), ""])  # fmt: skip
        o = f["overall"]
        rows.append([f"**{family}**", "all", str(o["n"]), number(o["exact_entropy_bits"]),
                     _interval(o["entropy_error_bits"]), _interval(o["kl_bits"]), f["mark"]])  # fmt: skip
    caption = f"{scores['n_prompts']} prompts; intervals: {scores['interval']}; marks: {scores['mark_rule']}."
    return Table(header, rows, caption=caption)
