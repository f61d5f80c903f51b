"""HMM wind tunnels: discretisation rule, token layout, filtering posterior against a sum over all paths; window
filters as the best predictors of their memory; the transport demand of each family; the sticky family."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from reference_predictors import path_sum_posterior
from windtunnel import tasks
from windtunnel.evaluation.metrics import entropy_bits, kl_divergence_bits
from windtunnel.tasks.hmm import (
    REFERENCE_BATCH,
    REFERENCE_SEED,
    discretise_cents,
    forward_filter,
    state_marginals,
    window_filter,
    window_filters,
)


def official_discretise(row: np.ndarray, floor: int = 5) -> np.ndarray:
    """The official per-row loop (floor, renormalise, round, clamp, cyclic repair), for comparison; `floor` in cents
    (the official generator's is 5)."""
    row = np.maximum(row, floor / 100)
    row = row / row.sum()
    cents = np.maximum(np.rint(row * 100.0).astype(int), floor)
    diff = 100 - int(cents.sum())
    order = np.argsort(cents, kind="stable") if diff > 0 else np.argsort(-cents, kind="stable")
    idx = 0
    while diff != 0:
        j = order[idx % len(cents)]
        if diff > 0 and cents[j] < 100:
            cents[j] += 1
            diff -= 1
        elif diff < 0 and cents[j] > floor:
            cents[j] -= 1
            diff += 1
        idx += 1
    return cents


@pytest.mark.parametrize("floor", [5, 1, 3])
def test_discretise_matches_official_loop(floor):
    rng = np.random.default_rng(floor)
    for C in (2, 3, 5, 8, 20):
        rows = rng.dirichlet(np.full(C, 0.3), size=300)  # spiky rows exercise the floor and repair
        got = discretise_cents(torch.from_numpy(rows), floor).numpy()
        want = np.stack([official_discretise(r, floor) for r in rows])
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


def window_brute_force(T: np.ndarray, E: np.ndarray, obs: list[int], w: int) -> np.ndarray:
    """p(s_t | o_t-w+1..t) for each t by brute force: the joint of every hidden path s_1..s_t (uniform initial state)
    with the observations inside the window only (each earlier one marginalised out: its emission row sums to 1)."""
    S, K = T.shape[0], len(obs)
    out = np.zeros((K, S))
    for t in range(K):
        start = max(0, t - w + 1)
        for path in itertools.product(range(S), repeat=t + 1):
            x = 1.0 / S
            for k in range(1, t + 1):
                x *= T[path[k - 1], path[k]]
            for k in range(start, t + 1):
                x *= E[path[k], obs[k]]
            out[t, path[-1]] += x
        out[t] /= out[t].sum()
    return out


def random_hmms(n: int, S: int, O: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(T (n,S,S), E (n,S,O)) float64 continuous random row-stochastic matrices (not on the cent grid)."""
    g = torch.Generator().manual_seed(seed)
    T = torch.rand(n, S, S, generator=g, dtype=torch.float64) + 0.01
    E = torch.rand(n, S, O, generator=g, dtype=torch.float64) + 0.01
    return T / T.sum(-1, keepdim=True), E / E.sum(-1, keepdim=True)


@pytest.mark.parametrize("w", [1, 2, 3])
def test_window_filter_matches_brute_force(w):
    T, E = random_hmms(2, 3, 2, seed=w)
    obs = torch.randint(0, 2, (2, 6), generator=torch.Generator().manual_seed(w))
    got = window_filter(T.log(), E.log(), obs, w)
    for i in range(2):
        want = window_brute_force(T[i].numpy(), E[i].numpy(), obs[i].tolist(), w)
        np.testing.assert_allclose(got[i].numpy(), want, atol=1e-12)
    # a window as long as the sequence is the exact filter
    torch.testing.assert_close(window_filter(T.log(), E.log(), obs, 6), forward_filter(T.log(), E.log(), obs))
    with pytest.raises(ValueError, match="window"):
        window_filter(T.log(), E.log(), obs, 0)


def test_state_marginals_are_u_T_to_the_k():
    T, _ = random_hmms(3, 4, 2, seed=0)
    got = state_marginals(T.log(), 6).exp()  # (3,6,4)
    for i in range(3):
        u = np.full(4, 0.25)
        want = np.stack([u @ np.linalg.matrix_power(T[i].numpy(), k) for k in range(6)])
        np.testing.assert_allclose(got[i].numpy(), want, atol=1e-13)


@pytest.mark.parametrize("K", [1, 2, 5, 9])
def test_window_filters_match_the_reference(K):
    """All windows at once (`window_filters`) equal `window_filter` one window at a time, windows past K included."""
    T, E = random_hmms(4, 3, 4, seed=K)
    obs = torch.randint(0, 4, (4, K), generator=torch.Generator().manual_seed(K))
    windows = sorted({1, 2, 3, max(1, K - 1), K, K + 2})
    got = window_filters(T.log(), E.log(), obs, windows)
    assert list(got) == windows
    for w in windows:
        assert float((got[w] - window_filter(T.log(), E.log(), obs, w)).abs().max()) < 1e-10
    with pytest.raises(ValueError, match="windows"):
        window_filters(T.log(), E.log(), obs, [0, 1])


def kl_rows(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """(...) KL(p ‖ q) in nats of probability rows (...,S)."""
    return (p * (p.log() - q.log())).sum(-1)


def restarted(T: torch.Tensor, E: torch.Tensor, obs: torch.Tensor, w: int, prior: torch.Tensor) -> torch.Tensor:
    """A filter of the last w observations restarted from `prior` (n,S) (the uniform state where the window reaches
    the first observation): an independent w-observation predictor, (n,K,S)."""
    n, K = obs.shape
    out = []
    for t in range(K):
        start = max(0, t - w + 1)
        a = torch.full_like(prior, 1 / prior.shape[1]) if start == 0 else prior
        for s in range(start, t + 1):
            if s > start:
                a = torch.einsum("ns,nsr->nr", a, T)
            a = a * E[torch.arange(n), :, obs[:, s]]
            a = a / a.sum(-1, keepdim=True)
        out.append(a)
    return torch.stack(out, 1)


@pytest.mark.parametrize("w", [1, 2, 3])
def test_no_predictor_of_the_last_w_observations_beats_the_window(w):
    """An exact expectation over every observation sequence of one small HMM (weighted by its probability, no sample):
    for predictors q that read only the position, the matrices and the last w observations,
    E[KL(exact ‖ q)] = E[KL(exact ‖ window)] + E[KL(window ‖ q)]: the window is the exact filter's conditional mean
    given what q reads, so no such predictor comes closer to the exact filter -- the old window (restarted one step
    after a uniform state), a restart from uniform or from T's stationary law, a tempered window, a random table."""
    S, O, K = 3, 2, 7
    T1, E1 = random_hmms(1, S, O, seed=20 + w)
    T1 = 0.7 * torch.eye(S, dtype=torch.float64) + 0.3 * T1  # a sticky chain: older observations still matter
    obs = torch.tensor(list(itertools.product(range(O), repeat=K)))  # (n,K) every observation sequence
    n = obs.shape[0]
    T, E = T1.expand(n, S, S), E1.expand(n, S, O)
    joint = torch.full((n, S), 1 / S, dtype=torch.float64)  # (n,S)
    for t in range(K):  # p(o_1..t, s_t), unnormalised forward recursion: its total is p(o_1..K)
        joint = (joint if t == 0 else torch.einsum("ns,nsr->nr", joint, T)) * E[torch.arange(n), :, obs[:, t]]
    p_obs = joint.sum(-1)  # (n,)
    assert float(p_obs.sum()) == pytest.approx(1.0, abs=1e-12)
    exact = forward_filter(T.log(), E.log(), obs)  # (n,K,S)
    window = window_filters(T.log(), E.log(), obs, [w])[w]  # (n,K,S)

    def expected_kl(p: torch.Tensor, q: torch.Tensor) -> float:  # E over sequences of the mean KL over positions
        return float((p_obs * kl_rows(p, q).mean(1)).sum())

    u = torch.full((n, S), 1 / S, dtype=torch.float64)
    evals, evecs = torch.linalg.eig(T1[0].T)
    stationary = evecs[:, evals.real.argmax()].real.abs()[None].expand(n, S)
    pad = torch.cat([torch.full((n, w - 1), O), obs], 1)  # (n,K+w-1): O marks "before the first observation"
    code = (pad.unfold(1, w, 1) * (O + 1) ** torch.arange(w)).sum(-1)  # (n,K) the last w observations as a number
    table = torch.rand(K, (O + 1) ** w, S, generator=torch.Generator().manual_seed(w), dtype=torch.float64) + 0.05
    tempered = window**0.8
    others = {
        "old window (one step after uniform)": restarted(T, E, obs, w, torch.einsum("ns,nsr->nr", u, T)),
        "restart from uniform": restarted(T, E, obs, w, u),
        "restart from the stationary law": restarted(T, E, obs, w, stationary / stationary.sum(-1, keepdim=True)),
        "tempered window": tempered / tempered.sum(-1, keepdim=True),
        "random table": (table / table.sum(-1, keepdim=True))[torch.arange(K), code],
    }
    best = expected_kl(exact, window)
    for name, q in others.items():
        extra = expected_kl(window, q)
        assert expected_kl(exact, q) == pytest.approx(best + extra, abs=1e-12), name
        assert extra > 1e-10, name  # strictly worse than the window (the identity holds to 1e-12)
    if w < K:
        assert best > 1e-4  # and the window itself is not the exact filter


def brute_force_errors(task: object, windows: list[int]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per window, (|H(window) - H(exact)|, KL(exact ‖ window)) in bits at each scored position (K,), averaged over
    the task's reference sample: both filters by a plain float64 forward pass in probability space, one position and
    one window at a time (the window's prior is the state's marginal u T^start), independent of the task's code."""
    b = task.sample(REFERENCE_BATCH, seed=REFERENCE_SEED)
    T = np.round(b.latent["transition"].double().numpy() * 100) / 100  # (B,S,S) on the cent grid
    E = np.round(b.latent["emission"].double().numpy() * 100) / 100  # (B,S,O)
    obs = b.latent["observations"].numpy()  # (B,K)
    B, S, _ = T.shape
    K = obs.shape[1]
    rows = np.arange(B)
    emit = E[rows[:, None], :, obs]  # (B,K,S): E[s, o_t]
    marg = [np.full((B, S), 1.0 / S)]
    for _ in range(1, K):
        marg.append(np.einsum("bs,bst->bt", marg[-1], T))

    def run(start: int, t: int) -> np.ndarray:  # p(s_t | o_start..t), the chain's marginal at start as the prior
        a = marg[start] * emit[:, start]
        a /= a.sum(1, keepdims=True)
        for k in range(start + 1, t + 1):
            a = np.einsum("bs,bst->bt", a, T) * emit[:, k]
            a /= a.sum(1, keepdims=True)
        return a

    def entropy(p: np.ndarray) -> np.ndarray:
        return -(p * np.log2(p)).sum(1)

    exact = [run(0, t) for t in range(K)]
    out = {}
    for w in windows:
        ent, kl = np.zeros(K), np.zeros(K)
        for t in range(K):
            q = run(max(0, t - w + 1), t)
            ent[t] = np.abs(entropy(q) - entropy(exact[t])).mean()
            kl[t] = (exact[t] * np.log2(exact[t] / q)).sum(1).mean()
        out[w] = (ent, kl)
    return out


@pytest.mark.parametrize(("name", "expected"), [("hmm", 3), ("hmm-sticky", 19)])
def test_transport_demand_is_the_shortest_window_within_the_level_at_every_position(name, expected):
    """W is the shortest window within 0.01 bits on its own, in entropy error AND KL, at every scored position (each
    averaged over the reference sample): the paper's HMM mixes in about two steps (W = 3), the sticky one needs belief
    carried 18 observations back at its last position (W = 19; averaged over the positions 14 would pass). Checked
    against a brute-force float64 forward filter per position; the task compares a model with every window below W
    at the positions where that window is outside the level."""
    task = tasks.make(name)
    demand = task.transport_demand
    W = demand.window
    assert W == expected and demand.exact_bits == 0.01
    brute = brute_force_errors(task, list(range(1, W + 1)))
    assert max(brute[W][0].max(), brute[W][1].max()) <= 0.01  # window W within the level at every position
    for w in range(1, W):
        ent, kl = brute[w]
        where = tuple(int(k) for k in np.flatnonzero((ent > 0.01) | (kl > 0.01)))
        assert where and demand.positions(w) == where, w  # outside somewhere: the positions the rule compares at
        assert task.approximation_positions()[f"last {w} obs"] == where
    stored = {w: (e, k) for w, e, k in demand.errors}
    assert list(stored) == list(range(1, W + 1))
    for w in range(1, W + 1):
        assert stored[w] == pytest.approx((brute[w][0].max(), brute[w][1].max()), rel=1e-6, abs=1e-12)
    averaged = [w for w in range(1, W + 1) if max(brute[w][0].mean(), brute[w][1].mean()) <= 0.01]
    assert min(averaged) == (3 if name == "hmm" else 14)  # what the average over positions would have said
    assert task.windows() == tuple(range(1, W))
    assert task.approximation_positions()["context-blind"] == tuple(range(task.params.K))
    assert task.transport_demand is tasks.make(name).transport_demand  # measured once per setting (cached)
    assert f"W = {W}" in demand.text() and "every position" in demand.text()


def test_transport_demand_follows_the_exact_level_and_length():
    lenient = tasks.make("hmm")
    lenient.mark_thresholds = {"exact_bits": 0.05}
    assert lenient.transport_demand.window < tasks.make("hmm").transport_demand.window
    one = tasks.make("hmm", K=1)
    assert (
        one.transport_demand.window == 1 and one.windows() == () and one.approximation_depths() == {"context-blind": 0}
    )
    assert tasks.make("hmm", K=2).windows() in ((), (1,))


def test_approximations_ladder():
    """context-blind, then the windows 1..W-1, scattered like the posterior; longer windows are closer to Bayes."""
    task = tasks.make("hmm")
    b = task.sample(200, seed=3)
    approx = task.approximations(b)
    W = task.transport_demand.window
    names = ["context-blind", *(f"last {w} obs" for w in range(1, W))]
    assert list(approx) == names
    assert task.approximation_depths() == dict(zip(names, range(W), strict=True))
    mask = b.target_mask
    torch.testing.assert_close(approx["context-blind"].probs, torch.full_like(b.posterior.probs, 1 / task.params.S))
    kls = []
    for name, dist in approx.items():
        assert dist.probs.shape == b.posterior.probs.shape
        if name != "context-blind":
            torch.testing.assert_close(dist.probs[:, 54], b.posterior.probs[:, 54])  # first observation: exact
        kls.append(float(kl_divergence_bits(b.posterior, dist)[mask].mean()))
    assert all(x > y for x, y in zip(kls, kls[1:], strict=False)) and kls[-1] > 0
    last = approx[names[-1]]  # the longest window listed is not within the exact level on its own
    h_err = float((entropy_bits(last) - entropy_bits(b.posterior)).abs()[mask].mean())
    assert max(h_err, kls[-1]) > 0.005
    assert list(tasks.make("hmm", K=1).approximations(tasks.make("hmm", K=1).sample(2, seed=0))) == ["context-blind"]


def test_defaults_keep_the_paper_hmm():
    """The paper's HMM is unchanged by the sticky parameters: the same tokens, states and posterior for a seed as before
    they existed (golden numbers of the earlier generator), and stickiness 0 draws nothing."""
    b = tasks.make("hmm").sample(8, seed=2024)
    w = torch.arange(1, b.inputs.shape[1] + 1)
    assert int((b.inputs * w).sum()) == 2587863 and int(b.targets.sum()) == 313
    assert float(b.posterior.probs[b.target_mask].double().pow(2).sum()) == pytest.approx(49.99670614597524, rel=1e-6)
    assert b.inputs[0, :8].tolist() == [96, 0, 22, 2, 18, 33, 7, 20]
    same = tasks.make("hmm", stickiness=0.0, min_prob=0.05, emission_clarity=0.0).sample(8, seed=2024)
    assert torch.equal(same.inputs, b.inputs) and torch.equal(same.posterior.probs, b.posterior.probs)


def test_emission_clarity_is_stored_in_a_run_config_only_where_set():
    """Off by default, the parameter is absent from a resolved run config (so every HMM run's config, and its identity,
    is as it was without it); set, it is stored."""
    from windtunnel.config import build_config
    from windtunnel.resolve import resolve_config

    def params(**task_params):
        return resolve_config(build_config(overrides={"task.name": "hmm", "task.params": task_params})).task.params

    assert params() == {"S": 5, "O": 5, "K": 20, "stickiness": 0.0, "min_prob": 0.05}
    assert params(emission_clarity=0.0) == params()
    assert params(emission_clarity=0.4)["emission_clarity"] == 0.4
    assert tasks.make("hmm-sticky").params.stored()["stickiness"] == [0.85, 0.95]  # the others: always, as before


@pytest.mark.parametrize(("S", "O"), [(5, 5), (3, 6), (6, 3)])
def test_emission_clarity_peaks_each_state_on_its_own_random_symbol(S, O):
    """lambda = 1: every row of E is one symbol at 1 - (O - 1) floors, the floor elsewhere; the likeliest symbols of a
    sequence are distinct where S <= O, and which symbol belongs to which state varies over sequences (so only the
    prompt tells it). T is drawn as at lambda 0."""
    b = tasks.make("hmm", S=S, O=O, emission_clarity=1.0).sample(400, seed=3)
    cents = torch.round(b.latent["emission"].double() * 100).long()  # (B,S,O)
    assert bool((cents.max(-1).values == 100 - 5 * (O - 1)).all()) and bool((cents.min(-1).values == 5).all())
    peak = cents.argmax(-1)  # (B,S)
    if S <= O:
        assert bool((peak.sort(-1).values.diff(dim=-1) > 0).all())
    assert len({tuple(r) for r in peak.tolist()}) > 20
    plain = tasks.make("hmm", S=S, O=O).sample(400, seed=3)
    assert torch.equal(b.latent["transition"], plain.latent["transition"])
    half = tasks.make("hmm", S=S, O=O, emission_clarity=0.5).sample(400, seed=3)
    top = half.latent["emission"].double().max(-1).values  # >= lambda / (1 + (O - 1) floor): floored and renormalised
    assert float(top.min()) >= 0.5 / (1 + 0.05 * (O - 1)) - 0.005
    assert float(top.mean()) > float(plain.latent["emission"].double().max(-1).values.mean())


def test_sticky_family():
    """hmm-sticky: rho ~ U[0.85, 0.95] per sequence on a 0.01 grid (ids 0..99, markers 100..103, symbols from 104)."""
    task = tasks.make("hmm-sticky")
    assert (task.params.stickiness, task.params.min_prob) == ((0.85, 0.95), 0.01)
    assert task.primitive == "long-range belief transport" and task.markers == (100, 101, 102, 103, 104)
    spec = task.spec
    assert (spec.seq_len, spec.vocab_size, spec.n_classes) == (93, 109, 5)
    b = task.sample(500, seed=1)
    T, E = b.latent["transition"].double(), b.latent["emission"].double()
    for m in (T, E):
        cents = torch.round(m * 100)
        assert torch.allclose(m * 100, cents, atol=1e-4) and bool((cents >= 1).all() and (cents.sum(-1) == 100).all())
    diag = T.diagonal(dim1=1, dim2=2)  # (B,S)
    assert float(diag.min()) >= 0.835 and float(diag.max()) <= 0.975  # rho in [0.85, 0.95], then the cent grid
    assert 0.87 < float(diag.mean()) < 0.93  # rho + (1 - rho) / S on average
    x = b.inputs
    assert bool((x[:, 0] == 100).all() and (x[:, 26] == 101).all() and (x[:, 52] == 102).all())
    assert torch.equal(x[:, 1:26], (torch.round(T * 100) - 1).long().reshape(500, 25))
    assert torch.equal(x[:, 54::2], b.latent["observations"] + 104)
    assert task.describe(b)[:2] == ["[TRANS]", f"{float(T[0, 0, 0]):.2f}"]
    fixed = tasks.make("hmm", stickiness=0.9, min_prob=0.01).sample(200, seed=2)
    assert float(fixed.latent["transition"].double().diagonal(dim1=1, dim2=2).min()) >= 0.87  # 0.9, floor renormalised


@pytest.mark.parametrize("name", ["hmm", "hmm-sticky"])
@pytest.mark.parametrize("clarity", [0.0, 0.7])
def test_sticky_posterior_matches_path_sum(name, clarity):
    task = tasks.make(name, S=3, O=3, K=5, emission_clarity=clarity)
    b = task.sample(4, seed=9)
    for i in range(4):
        T = np.round(b.latent["transition"][i].double().numpy() * 100) / 100
        E = np.round(b.latent["emission"][i].double().numpy() * 100) / 100
        want = path_sum_posterior(T, E, b.latent["observations"][i].tolist())
        got = b.posterior.probs[i, task.header_len + 1 :: 2].double().numpy()
        np.testing.assert_allclose(got, want, atol=2e-6)


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
        (dict(S=21), r"hmm\.S: must be <= 20 so that S \* min_prob <= 1 \(got 21\)"),
        (dict(O=25), r"hmm\.O: must be <= 20 so that O \* min_prob <= 1"),
        (dict(O=101, min_prob=0.01), r"hmm\.O: must be <= 100"),
        (dict(K=0), r"hmm\.K: .*greater than or equal to 1"),
        (dict(min_prob=0.015), r"hmm\.min_prob: must be a whole number of cents"),
        (dict(min_prob=0.1), r"hmm\.min_prob: .*less than or equal to 0\.05"),
        (dict(stickiness=1.5), r"hmm\.stickiness: must be in \[0, 1\]"),
        (dict(stickiness=(0.9, 0.8)), r"hmm\.stickiness: must be in \[0, 1\], or a range"),
        (dict(emission_clarity=1.5), r"hmm\.emission_clarity: .*less than or equal to 1"),
        (dict(emission_clarity=-0.1), r"hmm\.emission_clarity: .*greater than or equal to 0"),
    ],
)
def test_bad_params(params, match):
    with pytest.raises(ValueError, match=match):
        tasks.make("hmm", **params)


def test_more_states_fit_a_finer_grid():
    assert tasks.make("hmm", S=21, min_prob=0.01).spec.n_classes == 21
    assert tasks.make("hmm-sticky", S=30, K=3).sample(2, seed=0).posterior.probs.shape[-1] == 30
