"""Bijection wind tunnel: exact posterior against brute-force enumeration, layout, reference numbers, errors."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from windtunnel import tasks
from windtunnel.evaluation.metrics import entropy_bits


def revealed_pairs(task, tokens: list[int]) -> tuple[list[tuple[int, int]], list[tuple[int, int, int]]]:
    """From the input tokens only: all (key, value) pairs in order, and (position, key, n_pairs_before)."""
    p = task.params
    off = p.V if p.format == "sep-vocab" else 0
    n_pairs = p.L - 1 if p.format == "sep-vocab" else p.L
    pairs = [(tokens[2 * i], tokens[2 * i + 1] - off) for i in range(n_pairs)]
    asks = [(2 * t, tokens[2 * t], t) for t in range(p.L)]
    if p.format == "paired":
        asks.append((2 * p.L, tokens[2 * p.L], p.L))
    return pairs, asks


def enumerate_posterior(V: int, pairs: list[tuple[int, int]], key: int) -> torch.Tensor:
    """p(perm[key] = v | pairs) by counting every permutation of V consistent with the pairs."""
    counts = torch.zeros(V, dtype=torch.float64)
    for perm in itertools.permutations(range(V)):
        if all(perm[k] == v for k, v in pairs):
            counts[perm[key]] += 1
    return counts / counts.sum()


@pytest.mark.parametrize(
    "params",
    [
        dict(V=4, L=4, format="sep-vocab"),
        dict(V=5, L=3, format="paired"),
        dict(V=4, L=7, format="sep-vocab", with_replacement=True),
        dict(V=5, L=6, format="paired", with_replacement=True),
        dict(V=6, L=5, format="paired"),
    ],
)
def test_posterior_matches_enumeration(params):
    task = tasks.make("bijection", **params)
    batch = task.sample(6, seed=11)
    probs = batch.posterior.probs.double()
    for b in range(batch.batch_size):
        toks = batch.inputs[b].tolist()
        pairs, asks = revealed_pairs(task, toks)
        scored = [pos for pos, _, _ in asks]
        assert batch.target_mask[b].nonzero().flatten().tolist() == scored
        for pos, key, n in asks:
            want = enumerate_posterior(task.params.V, pairs[:n], key)
            torch.testing.assert_close(probs[b, pos], want, atol=1e-6, rtol=0)
            assert int(batch.targets[b, pos]) == int(batch.latent["perm"][b, key])


def test_sep_vocab_layout_and_spec():
    task = tasks.make("bijection")
    spec = task.spec
    assert (spec.seq_len, spec.vocab_size, spec.n_classes, spec.answer_token_offset) == (37, 40, 20, 20)
    assert spec.log10_hypotheses == pytest.approx(math.log10(2432902008176640000), abs=1e-9)
    b = task.sample(8, seed=0)
    perm, keys = b.latent["perm"], b.latent["keys"]
    assert torch.equal(b.inputs[:, 0::2], keys)
    assert torch.equal(b.inputs[:, 1::2], perm.gather(1, keys[:, :-1]) + 20)
    assert all(len(set(row)) == 19 for row in keys.tolist())  # without replacement
    assert sorted(perm[0].tolist()) == list(range(20))


def test_paired_layout_and_query():
    task = tasks.make("bijection", V=8, L=6, format="paired")
    spec = task.spec
    assert (spec.seq_len, spec.vocab_size, spec.n_classes, spec.answer_token_offset) == (13, 8, 8, 0)
    b = task.sample(32, seed=1)
    q = b.latent["query"]
    assert torch.equal(b.inputs[:, -1], q)
    assert bool((b.latent["keys"] == q[:, None]).any(1).all())  # query drawn from the context keys
    assert torch.equal(b.targets[:, -1], b.latent["perm"].gather(1, q[:, None])[:, 0])
    assert torch.allclose(entropy_bits(b.posterior)[:, -1], torch.zeros(32, dtype=torch.float64), atol=1e-4)


def test_reference_numbers():
    """V=20, L=19 without replacement: mean Bayes entropy 3.2146 bits; uniform-over-V MAE 1.1073 bits."""
    b = tasks.make("bijection").sample(64, seed=3)
    H = entropy_bits(b.posterior)[b.target_mask].double()
    assert H.mean().item() == pytest.approx(3.2146, abs=1e-4)
    assert (math.log2(20) - H).abs().mean().item() == pytest.approx(1.1073, abs=1e-4)
    curve = entropy_bits(b.posterior)[:, 0::2].mean(0)
    want = torch.tensor([math.log2(20 - t) for t in range(19)], dtype=torch.float64)
    torch.testing.assert_close(curve, want, atol=1e-5, rtol=0)


def test_with_replacement_sawtooth():
    """A repeated key has a point-mass posterior; an unseen one is uniform over V - #distinct seen."""
    b = tasks.make("bijection", V=6, L=12, with_replacement=True).sample(16, seed=4)
    H = entropy_bits(b.posterior)[:, 0::2]
    keys = b.latent["keys"]
    for i in range(16):
        for t in range(12):
            seen = keys[i, :t].tolist()
            want = 0.0 if keys[i, t].item() in seen else math.log2(6 - len(set(seen)))
            assert H[i, t].item() == pytest.approx(want, abs=1e-4)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        (dict(V=1), r"bijection\.V: .*greater than or equal to 2"),
        (dict(L=0), r"bijection\.L: .*greater than or equal to 1"),
        (dict(L=25), r"bijection\.L: must be <= V=20 without replacement \(got 25\)"),
        (dict(format="chat"), r"bijection\.format: .*'sep-vocab' or 'paired'"),
        (dict(colour=3), r"bijection\.colour"),
    ],
)
def test_bad_params(params, match):
    with pytest.raises(ValueError, match=match):
        tasks.make("bijection", **params)


def test_long_sequences_with_replacement_allowed():
    assert tasks.make("bijection", V=5, L=30, with_replacement=True).sample(2, seed=0).inputs.shape == (2, 59)
