"""`task.posterior_for(inputs)`: the exact posterior of any valid input tensor -- equal to `batch.posterior` on sampled
inputs, and on edited inputs (what a memory probe, activation patching or a counterfactual feeds a model) equal to a
brute-force computation from the tokens; inputs no sequence of the tunnel could be are a one-line ValueError."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from torch.distributions import Categorical

from reference_predictors import path_sum_posterior
from windtunnel import tasks

SAMPLED = [
    ("bijection", {}),
    ("bijection", {"format": "paired"}),
    ("bijection", {"V": 5, "L": 8, "with_replacement": True}),
    ("hmm", {}),
    ("hmm-sticky", {}),
    ("recall", {}),
    ("recall", {"N": 4, "key_vocab": 16, "value_vocab": 16, "n_filler": 4, "M": 4, "score_at": "key"}),
    ("regression", {}),
    ("regression", {"pair_tokens": True}),
]


@pytest.mark.parametrize(("name", "params"), SAMPLED, ids=lambda v: str(v))
def test_posterior_for_sampled_inputs_is_the_batch_posterior(name, params):
    task = tasks.make(name, **params)
    b = task.sample(64, seed=3)
    got = task.posterior_for(b.inputs)
    assert got.batch_shape == b.posterior.batch_shape
    if isinstance(got, Categorical):
        assert torch.equal(got.probs, b.posterior.probs)
    else:
        assert torch.equal(got.loc, b.posterior.loc) and torch.equal(got.scale, b.posterior.scale)


def test_every_builtin_tunnel_has_it():
    for name in tasks.names():
        if name in ("bijection", "hmm", "hmm-sticky", "recall", "regression"):
            assert callable(getattr(tasks.make(name), "posterior_for", None)), name


# --- HMM: edited observations and matrices against a sum over every hidden path ------------------------------------


@pytest.mark.parametrize("name", ["hmm", "hmm-sticky"])
def test_hmm_edited_inputs_against_path_sums(name):
    task = tasks.make(name, S=3, O=3, K=5)
    x = task.sample(3, seed=4).inputs.clone()
    H, f = task.header_len, task.params.floor_cents
    x[0, H + 1 + 2 * 2] = task.markers[4] + (x[0, H + 1 + 2 * 2] - task.markers[4] + 1) % 3  # observation 3 changed
    row = x[1, 1:4]  # T's first row: move a cent from its largest entry to its smallest
    hi, lo = int(row.argmax()), int(row.argmin())
    x[1, 1 + hi] -= 1
    x[1, 1 + lo] += 1
    x[2, H + 1 :: 2] = task.markers[4] + torch.tensor([2, 2, 0, 1, 2])  # every observation rewritten
    got = task.posterior_for(x)
    for i in range(3):
        T = (x[i, 1:10].double().numpy() + f).reshape(3, 3) / 100
        E = (x[i, 11:20].double().numpy() + f).reshape(3, 3) / 100
        obs = (x[i, H + 1 :: 2] - task.markers[4]).tolist()
        np.testing.assert_allclose(got.probs[i, H + 1 :: 2].double().numpy(), path_sum_posterior(T, E, obs), atol=2e-6)


def test_hmm_invalid_inputs():
    task = tasks.make("hmm", S=3, O=3, K=4)
    x = task.sample(2, seed=0).inputs
    H = task.header_len
    cases = []
    bad = x.clone()
    bad[1, 1] += 1  # a transition row summing to 1.01
    cases.append((bad, r"inputs: a matrix row not summing to 1\.00 \(sequence 1\)"))
    bad = x.clone()
    bad[0, H + 1] = 100 + 3  # observation symbol 3 of 0..2
    cases.append((bad, r"inputs: an observation symbol outside 0\.\.2 \(sequence 0\)"))
    bad = x.clone()
    bad[0, H] = 98
    cases.append((bad, r"\[OBS\] marker out of place"))
    cases.append((x.float(), r"inputs: expected integer tokens of shape \(B, 29\)"))
    cases.append((x[:, :-2], r"inputs: expected integer tokens of shape"))
    for inputs, match in cases:
        with pytest.raises(ValueError, match=match):
            task.posterior_for(inputs)


# --- bijection: edited pairs and queries against every permutation ------------------------------------------------


def permutation_posterior(V: int, pairs: list[tuple[int, int]], query: int) -> np.ndarray:
    """p(perm[query] | revealed pairs) by counting every permutation of V values that has the pairs."""
    counts = np.zeros(V)
    for perm in itertools.permutations(range(V)):
        if all(perm[k] == v for k, v in pairs):
            counts[perm[query]] += 1
    return counts / counts.sum()


@pytest.mark.parametrize("fmt", ["sep-vocab", "paired"])
def test_bijection_edited_inputs_against_every_permutation(fmt):
    V, L = 5, 5
    task = tasks.make("bijection", V=V, L=L, format=fmt)
    off = V if fmt == "sep-vocab" else 0
    x = task.sample(2, seed=6).inputs.clone()
    x[0, [1, 3]] = x[0, [3, 1]]  # the first two revealed values swapped: another consistent permutation
    x[1, 2 * (L - 1)] = x[1, 0]  # the last key asks for the first one again
    if fmt == "paired":
        x[0, 2 * L] = x[0, 2]  # the final query asks for the second key
        x[1, 2 * L - 1] = x[1, 1]  # (its revealed value too, so the pairs stay consistent)
    got = task.posterior_for(x)
    shown = L - 1 if fmt == "sep-vocab" else L
    for i in range(2):
        toks = x[i].tolist()
        keys, values = toks[0 : 2 * L : 2], [v - off for v in toks[1 : 2 * shown : 2]]
        asked = keys + ([toks[2 * L]] if fmt == "paired" else [])
        for p, q in enumerate(asked):
            before = list(zip(keys[: min(p, shown)], values[: min(p, shown)], strict=True))
            want = permutation_posterior(V, before, q)
            np.testing.assert_allclose(got.probs[i, 2 * p].double().numpy(), want, atol=1e-6)


def test_bijection_invalid_inputs():
    task = tasks.make("bijection", V=5, L=5)
    x = task.sample(2, seed=6).inputs.clone()
    x[1, 3] = x[1, 1]  # two keys revealed with one value
    with pytest.raises(ValueError, match=r"inputs: .*permutation.*\(sequence 1\)"):
        task.posterior_for(x)
    x = task.sample(2, seed=6).inputs.clone()
    x[0, 0] = 7
    with pytest.raises(ValueError, match=r"inputs: .*outside 0\.\.4 \(sequence 0\)"):
        task.posterior_for(x)


# --- recall: edited bindings and queries against a lookup in the token list ----------------------------------------


def test_recall_edited_inputs_against_a_lookup():
    task = tasks.make("recall", N=4, key_vocab=16, value_vocab=16, n_filler=4, M=3)
    b = task.sample(2, seed=8)
    x = b.inputs.clone()
    voff = task.value_offset
    x[0, 3] = voff + (int(x[0, 3]) - voff + 5) % 16  # the first stored value changed
    starts = [4 * 4 + 4 + j * (3 + 2) for j in range(3)]
    x[1, starts[0] + 1] = x[1, 1]  # the first query asks for the first stored key
    got = task.posterior_for(x)
    for i in range(2):
        toks = x[i].tolist()
        stored = {toks[4 * j + 1]: toks[4 * j + 3] - voff for j in range(4)}
        for j, s in enumerate(starts):
            want = stored[toks[s + 1]]
            assert int(got.probs[i, s + 2].argmax()) == want and float(got.probs[i, s + 2, want]) == 1.0, (i, j)
    unstored = x.clone()
    unstored[0, starts[1] + 1] = 10 + next(k for k in range(16) if 10 + k not in x[0, 1:16:4].tolist())
    with pytest.raises(ValueError, match=r"inputs: .*not stored \(sequence 0\)"):
        task.posterior_for(unstored)
    twice = x.clone()
    twice[1, 5] = twice[1, 1]
    with pytest.raises(ValueError, match=r"a key stored twice \(sequence 1\)"):
        task.posterior_for(twice)


# --- regression: edited pairs against Gaussian conditioning on the joint --------------------------------------------


def joint_predictive(xs: np.ndarray, ys: np.ndarray, tau: float, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """Predictive mean and variance of y_i given y_1..i-1, by conditioning the joint N(0, tau^2 X X^T + sigma^2 I)."""
    n = len(ys)
    C = tau**2 * xs @ xs.T + sigma**2 * np.eye(n)
    mean, var = np.zeros(n), np.zeros(n)
    for i in range(n):
        if i == 0:
            mean[i], var[i] = 0.0, C[0, 0]
            continue
        k = np.linalg.solve(C[:i, :i], C[:i, i])
        mean[i], var[i] = k @ ys[:i], C[i, i] - C[i, :i] @ k
    return mean, var


@pytest.mark.parametrize("pair_tokens", [False, True])
def test_regression_edited_inputs_against_the_joint(pair_tokens):
    task = tasks.make("regression", d=3, n=6, pair_tokens=pair_tokens)
    x = task.sample(2, seed=2).inputs.clone()
    x[0, 3, 3] += 2.5  # the second revealed y moved
    x[1, 2, :3] = torch.tensor([1.0, -2.0, 0.5])  # the second x replaced ...
    if pair_tokens:
        x[1, 3, :3] = x[1, 2, :3]  # ... in its y-token too
    got = task.posterior_for(x)
    for i in range(2):
        xs = x[i, 0::2, :3].double().numpy()
        ys = np.append(x[i, 1::2, 3].double().numpy(), 0.0)
        mean, var = joint_predictive(xs, ys, 1.0, 0.5)
        np.testing.assert_allclose(got.loc[i, 0::2].double().numpy(), mean, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got.scale[i, 0::2].double().numpy() ** 2, var, rtol=1e-5)
    if pair_tokens:
        bad = x.clone()
        bad[0, 2, 0] += 1.0  # an x edited without its y-token
        with pytest.raises(ValueError, match=r"y-token.* x .*\(sequence 0\)"):
            task.posterior_for(bad)
    with pytest.raises(ValueError, match=r"inputs: .*shape \(B, 11, 5\)"):
        task.posterior_for(x[:, :-2])
