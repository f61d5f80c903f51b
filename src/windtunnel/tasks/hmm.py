"""HMM wind tunnel (belief transport): track the hidden state of a fresh random HMM shown in the prompt.

Each sequence draws a transition matrix T (S,S) and an emission matrix E (S,O) with Dirichlet(1) rows,
floored at 0.05 and discretised to whole cents (the official generator's rule), writes them as tokens, then
shows K observations. At each observation the target is the exact filtering posterior p(s_t | o_1..t),
computed by the forward algorithm in float64 log space on exactly the matrices the model sees.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable

import torch
from pydantic import Field
from torch.distributions import Categorical, Distribution

from windtunnel.tasks._util import other_sequence, sample_rows, scatter_control, scatter_posterior, scatter_targets
from windtunnel.tasks.base import Batch, Task, TaskParams, TaskSpec
from windtunnel.tasks.registry import register

MIN_CENTS = 5  # every probability >= 0.05
TRANS, EMIT, SEP, OBS, OBS_OFFSET = 96, 97, 98, 99, 100  # ids 0..95 are probabilities 0.05..1.00
# `HMM.windows`: the window filters stop at the first whose own mean entropy error is below this many bits, measured
# on a fixed reference sample (REFERENCE_BATCH sequences from REFERENCE_SEED, a constant apart from training seeds)
WINDOW_TOLERANCE_BITS = 1e-4
REFERENCE_BATCH, REFERENCE_SEED = 512, 7_919_000


class HMMParams(TaskParams):
    """S hidden states, O observation symbols, K observations per sequence."""

    S: int = Field(5, ge=2, le=100 // MIN_CENTS, description="hidden states (S*0.05 <= 1)")
    O: int = Field(5, ge=2, le=100 // MIN_CENTS, description="observation symbols (O*0.05 <= 1)")
    K: int = Field(20, ge=1, description="observations per sequence (the paper tests 20, 30, 50)")


def dirichlet_rows(batch: int, rows: int, cols: int, g: torch.Generator, device: torch.device) -> torch.Tensor:
    """(B,rows,cols) float64: independent Dirichlet(1,...,1) rows (normalised exponential draws)."""
    u = 1.0 - torch.rand(batch, rows, cols, generator=g, device=device, dtype=torch.float64)  # (0,1]
    x = -torch.log(u)
    return x / x.sum(-1, keepdim=True)


def discretise_cents(p: torch.Tensor) -> torch.Tensor:
    """Official `discretize_and_renormalize`, vectorised: float rows (...,C) -> integer cents (...,C) long.

    Floor at 0.05 and renormalise, round to cents, clamp to >= 5, then repair each row sum to exactly 100:
    walk the row's entries in ascending order (if short) adding a cent, or descending order (if over)
    removing a cent from entries above 5, cyclically, until the sum is 100. The loop runs over the
    number of corrections (a handful), never over rows.
    """
    p = p.clamp_min(MIN_CENTS / 100.0)
    p = p / p.sum(-1, keepdim=True)
    cents = torch.round(p * 100.0).to(torch.long).clamp_min(MIN_CENTS)  # (...,C)
    C = cents.shape[-1]
    flat = cents.reshape(-1, C).clone()  # (N,C)
    diff = 100 - flat.sum(-1)  # (N,)
    # stable sort: ascending for rows that need cents, descending for rows that have too many
    key = torch.where((diff > 0)[:, None], flat, -flat)
    order = torch.sort(key, dim=-1, stable=True).indices  # (N,C)
    ptr = torch.zeros_like(diff)  # (N,) position in the cyclic walk
    rows = torch.arange(flat.shape[0], device=flat.device)
    while bool((diff != 0).any()):
        j = order[rows, ptr % C]  # (N,) entry visited now
        cur = flat[rows, j]
        add = (diff > 0) & (cur < 100)
        sub = (diff < 0) & (cur > MIN_CENTS)
        step = add.to(torch.long) - sub.to(torch.long)  # (N,) +1, -1 or 0
        flat[rows, j] = cur + step
        ptr = ptr + (diff != 0).to(torch.long)  # unfinished rows move on to the next entry
        diff = diff - step
    return flat.reshape(cents.shape)


def _emission_logs(log_E: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
    """(B,K,S) log E[s, o_t] for log_E (B,S,O) and obs (B,K)."""
    B, S, _ = log_E.shape
    return log_E.gather(2, obs[:, None, :].expand(B, S, obs.shape[1])).transpose(1, 2)


def _transport(log_a: torch.Tensor, log_T: torch.Tensor) -> torch.Tensor:
    """(B,...,S) log of (a T): one transition of the (normalised) log beliefs log_a (B,...,S) through log_T (B,S,S)."""
    lt = log_T.reshape(log_T.shape[0], *[1] * (log_a.dim() - 2), *log_T.shape[1:])  # (B,1..,S,S)
    return (log_a[..., :, None] + lt).logsumexp(-2)


def _normalise(log_a: torch.Tensor) -> torch.Tensor:
    return log_a - log_a.logsumexp(-1, keepdim=True)


def forward_filter(log_T: torch.Tensor, log_E: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
    """Filtering posteriors p(s_t | o_1..t), uniform initial state; log-space forward algorithm.

    log_T: (B,S,S), log_E: (B,S,O) float64; obs: (B,K) long. Returns (B,K,S) float64 probabilities.
    """
    B, S, _ = log_T.shape
    log_e = _emission_logs(log_E, obs)  # (B,K,S)
    log_a = _normalise(torch.full((B, S), -math.log(S), dtype=torch.float64, device=log_T.device) + log_e[:, 0])
    out = [log_a]
    for t in range(1, obs.shape[1]):
        log_a = _normalise(_transport(log_a, log_T) + log_e[:, t])  # (B,S): sum over the previous state
        out.append(log_a)
    return torch.stack(out, dim=1).exp()  # (B,K,S)


def window_filter(log_T: torch.Tensor, log_E: torch.Tensor, obs: torch.Tensor, window: int) -> torch.Tensor:
    """Approximate filter p(s_t | o_{t-w+1..t}) that forgets everything older than the last `window` observations.

    The restarted filter's prior is the state distribution one transition after a uniform state (column means of T);
    where the window reaches back to the first observation it is the exact filter. window=1 is "current observation
    with the marginal prior" -- what a model computes before it has learnt to transport belief through T.
    Same shapes as `forward_filter`; returns (B,K,S) float64 probabilities.
    """
    if window < 1:
        raise ValueError(f"window: must be >= 1 (got {window})")
    B, S, _ = log_T.shape
    log_e = _emission_logs(log_E, obs)  # (B,K,S)
    log_u = torch.full((B, S), -math.log(S), dtype=torch.float64, device=log_T.device)  # (B,S) uniform
    log_prior = _transport(log_u, log_T)  # (B,S) one step after a uniform state
    out = []
    for t in range(obs.shape[1]):
        start = max(0, t - window + 1)
        log_a = _normalise((log_u if start == 0 else log_prior) + log_e[:, start])
        for s in range(start + 1, t + 1):
            log_a = _normalise(_transport(log_a, log_T) + log_e[:, s])
        out.append(log_a)
    return torch.stack(out, dim=1).exp()  # (B,K,S)


def window_filters(
    log_T: torch.Tensor, log_E: torch.Tensor, obs: torch.Tensor, windows: Iterable[int]
) -> dict[int, torch.Tensor]:
    """`window_filter` for several windows at once, in max(windows) vectorised steps instead of sum(w) loops per t.

    A filter restarts at every position s (uniform prior at s = 0, else one transition after a uniform state) and runs
    forward; window w reads restart s = t - w + 1 at time t, or restart 0 (the exact filter) where t < w - 1.
    Same shapes as `forward_filter`; returns {w: (B,K,S) float64 probabilities}.
    """
    ws = list(windows)
    if not ws or min(ws) < 1:
        raise ValueError(f"windows: must be >= 1 (got {ws})")
    B, S, _ = log_T.shape
    K = obs.shape[1]
    log_e = _emission_logs(log_E, obs)  # (B,K,S)
    log_u = torch.full((B, S), -math.log(S), dtype=torch.float64, device=log_T.device)  # (B,S) uniform
    start = _transport(log_u, log_T)[:, None].repeat(1, K, 1)  # (B,K,S) restart prior at each s
    start[:, 0] = log_u
    log_a = _normalise(start + log_e)  # (B,K,S): restart s after o_s
    head, kept = [log_a[:, :1]], {1: log_a}  # restart 0's trajectory; per wanted window, its restarts
    for j in range(1, min(max(ws), K)):
        log_a = _normalise(_transport(log_a[:, :-1], log_T) + log_e[:, j:])  # (B,K-j,S): restart s after o_s..o_s+j
        head.append(log_a[:, :1])
        if j + 1 in ws:
            kept[j + 1] = log_a
    exact = torch.cat(head, dim=1)  # (B,min(max w,K),S): the exact filter up to there
    return {w: (exact if w >= K else torch.cat([exact[:, : w - 1], kept[w]], dim=1)).exp() for w in ws}


def _log_matrices(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(log T (B,S,S), log E (B,S,O)) float64, back on the exact cent grid the batch was sampled on."""
    cents = [(batch.latent[k].double() * 100).round() for k in ("transition", "emission")]
    return cents[0].log() - math.log(100), cents[1].log() - math.log(100)


def _entropy_bits(probs: torch.Tensor) -> torch.Tensor:
    """(...) entropy in bits of probabilities (...,S)."""
    return -torch.special.xlogy(probs, probs).sum(-1) / math.log(2.0)


@functools.cache
def belief_window(S: int, O: int, K: int) -> int:
    """W: the shortest window whose filter's mean entropy error |H(window) - H(exact)| over all K positions is below
    WINDOW_TOLERANCE_BITS, or K - 1 if none is (window K is exact); on REFERENCE_BATCH sequences of seed
    REFERENCE_SEED, so deterministic; windows are tried in doubling chunks, each one `window_filters` call."""
    if K < 2:
        return 0
    batch = HMM(S=S, O=O, K=K).sample(REFERENCE_BATCH, seed=REFERENCE_SEED)
    log_T, log_E = _log_matrices(batch)
    obs = batch.latent["observations"]  # (B,K)
    h_exact = _entropy_bits(forward_filter(log_T, log_E, obs))  # (B,K)
    hi = 0
    while hi < K - 1:
        lo, hi = hi + 1, min(K - 1, max(8, 2 * hi))
        for w, post in window_filters(log_T, log_E, obs, range(lo, hi + 1)).items():
            if float((_entropy_bits(post) - h_exact).abs().mean()) < WINDOW_TOLERANCE_BITS:
                return w
    return K - 1


def log10_rows(n_cols: int) -> float:
    """log10 of the number of discretised rows: compositions of 100 cents into n_cols parts >= 5."""
    return math.log10(math.comb(100 - MIN_CENTS * n_cols + n_cols - 1, n_cols - 1))


class HMM(Task[HMMParams]):
    """HMM filtering: predict the hidden state's filtering posterior for a fresh HMM per sequence."""

    name = "hmm"
    Params = HMMParams
    description = "belief transport: filter the hidden state of a random HMM given in the prompt"
    primitive = "belief transport"
    title = "HMM"
    length_param = "K"  # the paper trains at K = 20 and tests 20, 30, 50 (2.5x)
    approximations_note = (
        "HMM: 'context-blind' (uniform over the states: the marginal p(s_t), what a predictor that reads nothing "
        "can say), then filters that forget everything before the last w observations (restarted from one "
        "transition after a uniform state; exact at the first w positions), w = 1..W, W the shortest window whose "
        f"own mean entropy error is below {WINDOW_TOLERANCE_BITS:g} bits at these parameters: a model that has not "
        "learnt to carry its belief through T sits at 'last 1 obs'."
    )
    controls_note = Task.controls_note + (
        " HMM: 'sorted posterior' (the exact filter's probabilities in descending order on states 0..S-1: the same "
        "entropy, the wrong states); 'another HMM's filter' (the exact filter of this sequence's observations through "
        "the previous sequence's T and E: a model that ignores the matrices in the prompt)."
    )
    default_loss = "soft_ce"  # the authors' soft targets: cross-entropy against the exact filter

    @property
    def header_len(self) -> int:
        """Tokens before the first [OBS]: [TRANS] T [EMIT] E [SEP]."""
        p = self.params
        return 3 + p.S * p.S + p.S * p.O

    @property
    def spec(self) -> TaskSpec:
        p = self.params
        return TaskSpec(
            name=self.name,
            input_kind="tokens",
            answer_kind="classes",
            seq_len=self.header_len + 2 * p.K,
            vocab_size=OBS_OFFSET + p.O,
            n_classes=p.S,
            log10_hypotheses=p.S * log10_rows(p.S) + p.S * log10_rows(p.O),
        )

    def _sample(self, batch_size: int, g: torch.Generator, device: torch.device) -> Batch:
        p = self.params
        B, S, O, K = batch_size, p.S, p.O, p.K
        t_cents = discretise_cents(dirichlet_rows(B, S, S, g, device))  # (B,S,S)
        e_cents = discretise_cents(dirichlet_rows(B, S, O, g, device))  # (B,S,O)
        T_mat, E_mat = t_cents.double() / 100.0, e_cents.double() / 100.0
        state = torch.randint(0, S, (B,), generator=g, device=device)  # (B,) s_1 ~ uniform
        states, observations = [], []
        for t in range(K):
            if t > 0:
                state = sample_rows(T_mat[torch.arange(B, device=device), state], g)  # s_t ~ T[s_{t-1}]
            states.append(state)
            observations.append(sample_rows(E_mat[torch.arange(B, device=device), state], g))  # o_t ~ E[s_t]
        states_t = torch.stack(states, 1)  # (B,K)
        obs_t = torch.stack(observations, 1)  # (B,K)
        H = self.header_len
        marker = torch.tensor([TRANS, EMIT, SEP], device=device).expand(B, 3)  # (B,3)
        header = torch.cat(
            [
                marker[:, :1],
                t_cents.reshape(B, -1) - MIN_CENTS,
                marker[:, 1:2],
                e_cents.reshape(B, -1) - MIN_CENTS,
                marker[:, 2:],
            ],
            dim=1,
        )  # (B,H)
        body = torch.stack([torch.full_like(obs_t, OBS), obs_t + OBS_OFFSET], dim=2).reshape(B, 2 * K)  # (B,2K)
        inputs = torch.cat([header, body], dim=1)  # (B,T)
        mask = torch.zeros_like(inputs, dtype=torch.bool)
        mask[:, H + 1 :: 2] = True  # observation-symbol tokens
        post = forward_filter(T_mat.log(), E_mat.log(), obs_t)  # (B,K,S)
        return Batch(
            inputs=inputs,
            target_mask=mask,
            targets=scatter_targets(states_t.reshape(-1), mask),
            posterior=scatter_posterior(post.reshape(-1, S), mask, (B, inputs.shape[1], S)),
            latent={
                "transition": T_mat.float(),
                "emission": E_mat.float(),
                "states": states_t,
                "observations": obs_t,
            },
        )

    def windows(self) -> tuple[int, ...]:
        """Window lengths of the approximate filters, 1..W: W is the shortest whose own mean entropy error at these
        parameters is below WINDOW_TOLERANCE_BITS (`belief_window`), so no window filter is confusable with exact."""
        p = self.params
        return tuple(range(1, belief_window(p.S, p.O, p.K) + 1))

    def approximations(self, batch: Batch) -> dict[str, Categorical]:
        """Approximate filters to compare a model against ("which filter does it compute?"), batch shape (B,T) like
        `batch.posterior`: "context-blind" (uniform over the states: the marginal p(s_t), by the symmetry of the
        Dirichlet prior), then the filter restarted w observations back ("last w obs", `window_filters`)."""
        log_T, log_E = _log_matrices(batch)
        obs, mask = batch.latent["observations"], batch.target_mask
        B, T = mask.shape
        S = log_T.shape[-1]
        blind = torch.full((B, T, S), 1.0 / S, dtype=torch.float32, device=mask.device)  # (B,T,S)
        out = {"context-blind": Categorical(probs=blind, validate_args=False)}
        windows = self.windows()  # empty for K = 1, where the first window is already exact
        for w, post in (window_filters(log_T, log_E, obs, windows) if windows else {}).items():  # (B,K,S) each
            out[f"last {w} obs"] = scatter_posterior(post.reshape(-1, S), mask, (B, T, S))
        return out

    def approximation_depths(self) -> dict[str, int]:
        """How many observations each approximation keeps (0 for context-blind): a model's belief horizon."""
        return {"context-blind": 0, **{f"last {w} obs": w for w in self.windows()}}

    def controls(self, batch: Batch) -> dict[str, Distribution]:
        """The generic controls plus the exact filter's probabilities sorted onto states 0..S-1 (same entropy, wrong
        states) and the exact filter of this sequence's observations through another sequence's matrices."""
        mask = batch.target_mask
        assert isinstance(batch.posterior, Categorical)
        exact = batch.posterior.probs[mask]  # (N,S)
        out = {**super().controls(batch), "sorted posterior": scatter_control(exact.sort(-1, descending=True)[0], mask)}
        if mask.shape[0] > 1:
            log_T, log_E = (other_sequence(m, mask) for m in _log_matrices(batch))  # (B,S,S), (B,S,O)
            post = forward_filter(log_T, log_E, batch.latent["observations"])  # (B,K,S)
            out["another HMM's filter"] = scatter_control(post.reshape(-1, self.params.S), mask)
        return out

    def describe(self, batch: Batch, index: int = 0) -> list[str]:
        """Probabilities as `0.23`, markers `[TRANS]` `[EMIT]` `[SEP]` `[OBS]`, observations `o2`."""
        names = {TRANS: "[TRANS]", EMIT: "[EMIT]", SEP: "[SEP]", OBS: "[OBS]"}
        out = []
        for t in batch.inputs[index].tolist():
            if t < TRANS:
                out.append(f"{(t + MIN_CENTS) / 100:.2f}")
            else:
                out.append(names.get(t, f"o{t - OBS_OFFSET}"))
        return out


register("hmm", HMM)
