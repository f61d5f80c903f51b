"""HMM wind tunnel: discretisation rule, token layout, filtering posterior against a sum over all paths."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from torch.distributions import Categorical

from windtunnel import tasks
from windtunnel.metrics import entropy_bits, kl_divergence_bits
from windtunnel.tasks.hmm import (
    REFERENCE_BATCH,
    REFERENCE_SEED,
    WINDOW_TOLERANCE_BITS,
    _log_matrices,
    discretise_cents,
    forward_filter,
    window_filter,
    window_filters,
)


def official_discretise(row: np.ndarray) -> np.ndarray:
    """The official per-row loop (floor, renormalise, round, clamp, cyclic repair), for comparison."""
    row = np.maximum(row, 0.05)
    row = row / row.sum()
    cents = np.maximum(np.rint(row * 100.0).astype(int), 5)
    diff = 100 - int(cents.sum())
    order = np.argsort(cents, kind="stable") if diff > 0 else np.argsort(-cents, kind="stable")
    idx = 0
    while diff != 0:
        j = order[idx % len(cents)]
        if diff > 0 and cents[j] < 100:
            cents[j] += 1
            diff -= 1
        elif diff < 0 and cents[j] > 5:
            cents[j] -= 1
            diff += 1
        idx += 1
    return cents


def test_discretise_matches_official_loop():
    rng = np.random.default_rng(0)
    for C in (2, 3, 5, 8, 20):
        rows = rng.dirichlet(np.full(C, 0.3), size=300)  # spiky rows exercise the floor and repair
        got = discretise_cents(torch.from_numpy(rows)).numpy()
        want = np.stack([official_discretise(r) for r in rows])
        np.testing.assert_array_equal(got, want)


def test_matrices_on_the_cent_grid():
    b = tasks.make("hmm").sample(256, seed=0)
    for name in ("transition", "emission"):
        m = b.latent[name].double()  # (B,S,S|O)
        cents = torch.round(m * 100)
        assert torch.allclose(m * 100, cents, atol=1e-4)  # multiples of 0.01
        assert bool((cents >= 5).all())
        assert bool((cents.sum(-1) == 100).all())  # rows sum to exactly 1


def test_layout_and_spec():
    task = tasks.make("hmm")
    spec = task.spec
    assert (spec.seq_len, spec.vocab_size, spec.n_classes, spec.answer_token_offset) == (93, 105, 5, None)
    assert spec.log10_hypotheses == pytest.approx(10 * math.log10(1502501), abs=1e-9)
    assert task.with_params(K=50).spec.seq_len == 153
    b = task.sample(4, seed=2)
    x = b.inputs
    assert bool((x[:, 0] == 96).all() and (x[:, 26] == 97).all() and (x[:, 52] == 98).all())
    T, E = b.latent["transition"].double(), b.latent["emission"].double()
    assert torch.equal(x[:, 1:26], (torch.round(T * 100) - 5).long().reshape(4, 25))
    assert torch.equal(x[:, 27:52], (torch.round(E * 100) - 5).long().reshape(4, 25))
    assert bool((x[:, 53::2] == 99).all())
    assert torch.equal(x[:, 54::2], b.latent["observations"] + 100)
    assert b.target_mask[0].nonzero().flatten().tolist() == list(range(54, 93, 2))
    assert torch.equal(b.targets[:, 54::2], b.latent["states"])
    assert task.describe(b)[:3][0] == "[TRANS]" and task.describe(b)[54].startswith("o")


def path_sum_posterior(T: np.ndarray, E: np.ndarray, obs: list[int]) -> np.ndarray:
    """p(s_t | o_1..t) for each t by summing the joint over every hidden path (uniform initial state)."""
    S, K = T.shape[0], len(obs)
    out = np.zeros((K, S))
    for t in range(K):
        for path in itertools.product(range(S), repeat=t + 1):
            w = 1.0 / S * E[path[0], obs[0]]
            for k in range(1, t + 1):
                w *= T[path[k - 1], path[k]] * E[path[k], obs[k]]
            out[t, path[-1]] += w
        out[t] /= out[t].sum()
    return out


@pytest.mark.parametrize(("S", "O", "K", "seed"), [(2, 2, 6, 0), (3, 2, 5, 1), (3, 3, 6, 2), (2, 4, 4, 3)])
def test_posterior_matches_path_sum(S, O, K, seed):
    task = tasks.make("hmm", S=S, O=O, K=K)
    b = task.sample(5, seed=seed)
    H = task.header_len
    for i in range(5):
        T = np.round(b.latent["transition"][i].double().numpy() * 100) / 100
        E = np.round(b.latent["emission"][i].double().numpy() * 100) / 100
        want = path_sum_posterior(T, E, b.latent["observations"][i].tolist())
        got = b.posterior.probs[i, H + 1 :: 2].double().numpy()
        np.testing.assert_allclose(got, want, atol=2e-6)


def test_forward_filter_on_arbitrary_matrices():
    """The recursion itself, on fresh continuous (not discretised) random matrices."""
    g = torch.Generator().manual_seed(5)
    T = torch.rand(3, 3, 3, generator=g, dtype=torch.float64) + 0.01
    E = torch.rand(3, 3, 2, generator=g, dtype=torch.float64) + 0.01
    T, E = T / T.sum(-1, keepdim=True), E / E.sum(-1, keepdim=True)
    obs = torch.randint(0, 2, (3, 5), generator=g)
    got = forward_filter(T.log(), E.log(), obs)
    for i in range(3):
        want = path_sum_posterior(T[i].numpy(), E[i].numpy(), obs[i].tolist())
        np.testing.assert_allclose(got[i].numpy(), want, atol=1e-12)


def window_path_sum(T: np.ndarray, E: np.ndarray, obs: list[int], w: int) -> np.ndarray:
    """The windowed filter by brute force: p(s_t | o_{t-w+1..t}) over every path through the window, the first
    state drawn from uniform (window at the start) or from one transition after a uniform state."""
    S, K = T.shape[0], len(obs)
    prior = np.full(S, 1.0 / S) @ T
    out = np.zeros((K, S))
    for t in range(K):
        start = max(0, t - w + 1)
        p0 = np.full(S, 1.0 / S) if start == 0 else prior
        for path in itertools.product(range(S), repeat=t - start + 1):
            x = p0[path[0]] * E[path[0], obs[start]]
            for k in range(1, len(path)):
                x *= T[path[k - 1], path[k]] * E[path[k], obs[start + k]]
            out[t, path[-1]] += x
        out[t] /= out[t].sum()
    return out


@pytest.mark.parametrize("w", [1, 2, 3])
def test_window_filter_matches_path_sum(w):
    g = torch.Generator().manual_seed(w)
    T = torch.rand(2, 3, 3, generator=g, dtype=torch.float64) + 0.01
    E = torch.rand(2, 3, 2, generator=g, dtype=torch.float64) + 0.01
    T, E = T / T.sum(-1, keepdim=True), E / E.sum(-1, keepdim=True)
    obs = torch.randint(0, 2, (2, 6), generator=g)
    got = window_filter(T.log(), E.log(), obs, w)
    for i in range(2):
        want = window_path_sum(T[i].numpy(), E[i].numpy(), obs[i].tolist(), w)
        np.testing.assert_allclose(got[i].numpy(), want, atol=1e-12)
    # a window as long as the sequence is the exact filter
    torch.testing.assert_close(window_filter(T.log(), E.log(), obs, 6), forward_filter(T.log(), E.log(), obs))
    with pytest.raises(ValueError, match="window"):
        window_filter(T.log(), E.log(), obs, 0)


@pytest.mark.parametrize("K", [1, 2, 5, 9])
def test_window_filters_match_the_reference(K):
    """All windows at once (`window_filters`) equal `window_filter` one window at a time, windows past K included."""
    g = torch.Generator().manual_seed(K)
    T = torch.rand(4, 3, 3, generator=g, dtype=torch.float64) + 0.01
    E = torch.rand(4, 3, 4, generator=g, dtype=torch.float64) + 0.01
    T, E = T / T.sum(-1, keepdim=True), E / E.sum(-1, keepdim=True)
    obs = torch.randint(0, 4, (4, K), generator=g)
    windows = sorted({1, 2, 3, max(1, K - 1), K, K + 2})
    got = window_filters(T.log(), E.log(), obs, windows)
    assert list(got) == windows
    for w in windows:
        assert float((got[w] - window_filter(T.log(), E.log(), obs, w)).abs().max()) < 1e-10
    with pytest.raises(ValueError, match="windows"):
        window_filters(T.log(), E.log(), obs, [0, 1])


def reference_entropy_errors(task, windows):
    """Mean |H(window) - H(exact)| in bits over all positions of the task's reference sample, per window."""
    b = task.sample(REFERENCE_BATCH, seed=REFERENCE_SEED)
    log_T, log_E = _log_matrices(b)
    obs = b.latent["observations"]
    h_exact = entropy_bits(Categorical(probs=forward_filter(log_T, log_E, obs)))
    filters = window_filters(log_T, log_E, obs, windows)
    return {w: float((entropy_bits(Categorical(probs=p)) - h_exact).abs().mean()) for w, p in filters.items()}


def test_windows_stop_where_entropy_can_no_longer_tell():
    """W: window W's own entropy error is below the tolerance and window W-1's is not, at the default parameters."""
    task = tasks.make("hmm")
    windows = task.windows()
    W = windows[-1]
    assert windows == tuple(range(1, W + 1)) and 1 < W <= task.params.K - 1
    errs = reference_entropy_errors(task, [W - 1, W])
    assert errs[W] < WINDOW_TOLERANCE_BITS <= errs[W - 1]
    assert task.windows() == windows == tasks.make("hmm").windows()  # deterministic (and cached)
    assert tasks.make("hmm", K=1).windows() == () and tasks.make("hmm", K=2).windows() == (1,)


def test_approximations_ladder():
    """context-blind, then the window filters 1..W, scattered like the posterior; longer windows are closer to Bayes."""
    task = tasks.make("hmm")
    b = task.sample(200, seed=3)
    approx = task.approximations(b)
    W = task.windows()[-1]
    names = ["context-blind", *(f"last {w} obs" for w in range(1, W + 1))]
    assert list(approx) == names
    assert task.approximation_depths() == dict(zip(names, range(W + 1), strict=True))
    mask = b.target_mask
    torch.testing.assert_close(approx["context-blind"].probs, torch.full_like(b.posterior.probs, 1 / task.params.S))
    kls = []
    for name, dist in approx.items():
        assert dist.probs.shape == b.posterior.probs.shape
        if name != "context-blind":
            torch.testing.assert_close(dist.probs[:, 54], b.posterior.probs[:, 54])  # first observation: exact
        kls.append(float(kl_divergence_bits(b.posterior, dist)[mask].mean()))
    assert all(x > y for x, y in zip(kls, kls[1:], strict=False)) and kls[-1] > 0
    assert kls[-1] < 1e-5  # the last window filter is all but exact ...
    h_err = (entropy_bits(approx[names[-1]]) - entropy_bits(b.posterior)).abs()[mask].mean()
    assert float(h_err) < 2 * WINDOW_TOLERANCE_BITS  # ... and its entropy error is at the tolerance
    assert list(tasks.make("hmm", K=1).approximations(tasks.make("hmm", K=1).sample(2, seed=0))) == ["context-blind"]


def test_context_blind_is_the_state_marginal():
    """Uniform over the states is p(s_t) at every t (symmetry of the prior): empirical frequencies within 5 SE."""
    S, n = 5, 4000
    b = tasks.make("hmm", S=S, K=20).sample(n, seed=17)
    freq = torch.nn.functional.one_hot(b.latent["states"], S).double().mean(0)  # (K,S)
    se = math.sqrt((1 / S) * (1 - 1 / S) / n)
    assert float((freq - 1 / S).abs().max()) < 5 * se


def test_state_sampling_follows_the_matrices():
    """Empirical first-observation frequencies match the uniform-prior emission marginal."""
    b = tasks.make("hmm", S=2, O=2, K=2).sample(20000, seed=7)
    E = b.latent["emission"].double()
    p_o1 = E[:, :, 1].mean(1)  # (B,) p(o_1 = 1) under the uniform initial state
    frac = b.latent["observations"][:, 0].double()
    se = (p_o1 * (1 - p_o1)).mean().sqrt() / math.sqrt(20000)
    assert abs((frac - p_o1).mean().item()) < 5 * se.item()


@pytest.mark.parametrize(
    ("params", "match"),
    [
        (dict(S=1), r"hmm\.S: .*greater than or equal to 2"),
        (dict(S=21), r"hmm\.S: .*less than or equal to 20"),
        (dict(O=25), r"hmm\.O: .*less than or equal to 20"),
        (dict(K=0), r"hmm\.K: .*greater than or equal to 1"),
    ],
)
def test_bad_params(params, match):
    with pytest.raises(ValueError, match=match):
        tasks.make("hmm", **params)
