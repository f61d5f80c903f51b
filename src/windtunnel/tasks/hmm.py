"""HMM wind tunnel (belief transport): track the hidden state of a fresh random HMM shown in the prompt.

Each sequence draws a transition matrix T (S,S) and an emission matrix E (S,O) with Dirichlet(1) rows (T optionally
sticky: rho I + (1 - rho) Dirichlet(1), `stickiness`; E optionally peaked on a random symbol per state,
`emission_clarity`, a curriculum stage's easier task), floored at `min_prob` (0.05 by default) and discretised to whole
cents (the official generator's rule), writes them as tokens, then shows K observations. At each observation the
target is the exact filtering posterior p(s_t | o_1..t), computed by the forward algorithm in float64 log space on
exactly the matrices the model sees (`HMM.posterior_for` recomputes it from any valid prompt).

Which filter does a model compute? "last w obs" is p(s_t | o_t-w+1..t): the best predictor of all that read the
matrices and only the last w observations (its prior at the window's start is the state's exact marginal u T^s, so
in expected KL from the exact filter none of them beats it). The tunnel's transport demand W is the shortest window
within the exact level on its own at every scored position (`transport_demand`): an exact mark must beat every
shorter window at every position where that window is outside the exact level.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from pydantic import Field, model_validator
from torch.distributions import Categorical, Distribution

from windtunnel.tasks._util import (
    first_invalid,
    other_sequence,
    peak_rows,
    sample_rows,
    scatter_control,
    scatter_posterior,
    scatter_targets,
    token_inputs,
)
from windtunnel.tasks.base import EXACT_BITS, Batch, Task, TaskParams, TaskSpec
from windtunnel.tasks.registry import register

MIN_CENTS = 5  # the official grid's floor: every probability >= 0.05


def markers(floor: int) -> tuple[int, int, int, int, int]:
    """(TRANS, EMIT, SEP, OBS, first observation id) of a prompt whose probabilities are whole cents >= `floor`: ids
    0..100-floor are the probabilities floor..100 cents, the four markers follow, then the observation symbols."""
    n = 101 - floor
    return n, n + 1, n + 2, n + 3, n + 4


TRANS, EMIT, SEP, OBS, OBS_OFFSET = markers(MIN_CENTS)  # 96..100: the official vocabulary of 105
# The transport demand (`transport_demand`) is measured on this fixed reference sample (REFERENCE_BATCH sequences from
# REFERENCE_SEED, a constant apart from every training and test seed), once per parameter setting.
REFERENCE_BATCH, REFERENCE_SEED = 1000, 7_919_000


class HMMParams(TaskParams):
    """S hidden states, O observation symbols, K observations per sequence; how sticky T is; the grid's floor; how
    peaked E's rows are (a curriculum stage's easier HMM: stored in a run's config only where set)."""

    implicit_when_default = ("emission_clarity",)

    S: int = Field(5, ge=2, description="hidden states (S * min_prob <= 1)")
    O: int = Field(5, ge=2, description="observation symbols (O * min_prob <= 1)")
    K: int = Field(20, ge=1, description="observations per sequence (the paper tests 20, 30, 50)")
    stickiness: float | tuple[float, float] = Field(
        0.0,
        description="rho: T's rows are rho I + (1 - rho) Dirichlet(1) before flooring; [lo, hi] draws rho ~ U[lo, hi] "
        "per sequence; 0 is the paper's HMM",
    )
    min_prob: float = Field(0.05, ge=0.01, le=0.05, description="the floor of the cent grid (0.01..0.05)")
    emission_clarity: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="lambda: E's rows are lambda P + (1 - lambda) Dirichlet(1) before flooring, P each state's own "
        "likeliest symbol, drawn per sequence (which only the prompt tells); 0 is the paper's HMM",
    )

    @model_validator(mode="after")
    def _fits(self) -> HMMParams:
        if abs(100 * self.min_prob - self.floor_cents) > 1e-9:
            raise ValueError(f"min_prob: must be a whole number of cents (got {self.min_prob})")
        for name in ("S", "O"):
            if getattr(self, name) * self.floor_cents > 100:
                raise ValueError(
                    f"{name}: must be <= {100 // self.floor_cents} so that {name} * min_prob <= 1 "
                    f"(got {getattr(self, name)})"
                )
        lo, hi = self.rho_range
        if not 0.0 <= lo <= hi <= 1.0:
            raise ValueError(
                f"stickiness: must be in [0, 1], or a range [lo, hi] with lo <= hi (got {self.stickiness})"
            )
        return self

    @property
    def floor_cents(self) -> int:
        return round(100 * self.min_prob)

    @property
    def rho_range(self) -> tuple[float, float]:
        """(lo, hi) of the stickiness (lo = hi for a fixed one)."""
        s = self.stickiness
        return (float(s), float(s)) if isinstance(s, (int, float)) else (float(s[0]), float(s[1]))


def dirichlet_rows(batch: int, rows: int, cols: int, g: torch.Generator, device: torch.device) -> torch.Tensor:
    """(B,rows,cols) float64: independent Dirichlet(1,...,1) rows (normalised exponential draws)."""
    u = 1.0 - torch.rand(batch, rows, cols, generator=g, device=device, dtype=torch.float64)  # (0,1]
    x = -torch.log(u)
    return x / x.sum(-1, keepdim=True)


def discretise_cents(p: torch.Tensor, floor: int = MIN_CENTS) -> torch.Tensor:
    """Official `discretize_and_renormalize`, vectorised: float rows (...,C) -> integer cents (...,C) long.

    Floor at `floor` cents (0.05 officially) and renormalise, round to cents, clamp to >= floor, then repair each row
    sum to exactly 100: walk the row's entries in ascending order (if short) adding a cent, or descending order (if
    over) removing a cent from entries above the floor, cyclically, until the sum is 100. The loop runs over the
    number of corrections (a handful), never over rows.
    """
    p = p.clamp_min(floor / 100.0)
    p = p / p.sum(-1, keepdim=True)
    cents = torch.round(p * 100.0).to(torch.long).clamp_min(floor)  # (...,C)
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
        sub = (diff < 0) & (cur > floor)
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


def state_marginals(log_T: torch.Tensor, K: int) -> torch.Tensor:
    """(B,K,S) float64 log p(s_k) = log(u T^k), k = 0..K-1: the state's marginal at each position given T alone (the
    initial state uniform u), i.e. before any observation is read. log_T: (B,S,S)."""
    B, S, _ = log_T.shape
    log_m = [torch.full((B, S), -math.log(S), dtype=torch.float64, device=log_T.device)]  # (B,S) uniform
    for _ in range(1, K):
        log_m.append(_transport(log_m[-1], log_T))
    return torch.stack(log_m, dim=1)


def forward_filter(log_T: torch.Tensor, log_E: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
    """Filtering posteriors p(s_t | o_1..t), uniform initial state; log-space forward algorithm.

    log_T: (B,S,S), log_E: (B,S,O) float64; obs: (B,K) long. Returns (B,K,S) float64 probabilities.
    """
    return log_forward_filter(log_T, log_E, obs).exp()


def log_forward_filter(log_T: torch.Tensor, log_E: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
    """`forward_filter` in logs: (B,K,S) float64 log p(s_t | o_1..t)."""
    B, S, _ = log_T.shape
    log_e = _emission_logs(log_E, obs)  # (B,K,S)
    log_a = _normalise(torch.full((B, S), -math.log(S), dtype=torch.float64, device=log_T.device) + log_e[:, 0])
    out = [log_a]
    for t in range(1, obs.shape[1]):
        log_a = _normalise(_transport(log_a, log_T) + log_e[:, t])  # (B,S): sum over the previous state
        out.append(log_a)
    return torch.stack(out, dim=1)  # (B,K,S)


def next_state_prior(log_T: torch.Tensor, log_E: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
    """p(s_t+1 | o_1..t) = b_t T, b_t the exact filter after o_t: the belief carried one step through T before the
    next observation is read. Same shapes as `forward_filter`; returns (B,K,S) float64 probabilities."""
    return _transport(log_forward_filter(log_T, log_E, obs), log_T).exp()  # (B,K,S)


def window_filter(log_T: torch.Tensor, log_E: torch.Tensor, obs: torch.Tensor, window: int) -> torch.Tensor:
    """p(s_t | o_t-w+1..t): the filter that reads only the last `window` observations (the reference, one position at
    a time; `window_filters` computes several windows at once).

    The window's first state has its exact marginal u T^s given T (`state_marginals`), so this is the best predictor
    of all that read the matrices and only those observations; where the window reaches the first observation it is
    the exact filter. window=1 reads the current observation alone. Same shapes as `forward_filter`; returns (B,K,S)
    float64 probabilities.
    """
    if window < 1:
        raise ValueError(f"window: must be >= 1 (got {window})")
    log_e = _emission_logs(log_E, obs)  # (B,K,S)
    log_m = state_marginals(log_T, obs.shape[1])  # (B,K,S)
    out = []
    for t in range(obs.shape[1]):
        start = max(0, t - window + 1)
        log_a = _normalise(log_m[:, start] + log_e[:, start])
        for s in range(start + 1, t + 1):
            log_a = _normalise(_transport(log_a, log_T) + log_e[:, s])
        out.append(log_a)
    return torch.stack(out, dim=1).exp()  # (B,K,S)


def window_filters(
    log_T: torch.Tensor, log_E: torch.Tensor, obs: torch.Tensor, windows: Iterable[int]
) -> dict[int, torch.Tensor]:
    """`window_filter` for several windows at once, in max(windows) vectorised steps instead of sum(w) loops per t.

    A filter restarts at every position s (from the state's marginal u T^s) and runs forward; window w reads restart
    s = t - w + 1 at time t, or restart 0 (the exact filter) where t < w - 1.
    Same shapes as `forward_filter`; returns {w: (B,K,S) float64 probabilities}.
    """
    ws = list(windows)
    if not ws or min(ws) < 1:
        raise ValueError(f"windows: must be >= 1 (got {ws})")
    K = obs.shape[1]
    log_e = _emission_logs(log_E, obs)  # (B,K,S)
    log_a = _normalise(state_marginals(log_T, K) + log_e)  # (B,K,S): restart s after o_s
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


def _kl_bits(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """(...) KL(p ‖ q) in bits of probabilities (...,S) (q > 0 wherever p > 0)."""
    return (torch.special.xlogy(p, p) - torch.special.xlogy(p, q)).sum(-1) / math.log(2.0)


@dataclass(frozen=True)
class TransportDemand:
    """How far a tunnel needs belief carried, position by position: W, the shortest window whose filter is within
    `exact_bits` of the exact one on its own at every scored position (entropy error AND KL(exact ‖ window), each
    averaged over the reference sample's sequences at that position, both <= exact_bits at each of the K positions),
    with the errors of windows 1..W as measured at their worst position (w, entropy error bits, KL bits), and for
    each window w < W the scored positions (0-based) where it is outside the exact level (`outside`, w -> positions),
    and those of the context-blind reference (`blind_outside`). W = K where no shorter window is (window K is the
    exact filter). A predictor that reads only the last W - 1 observations cannot be exact at that level at every
    position; one measurably better than window w at each position where w is outside reads further back there."""

    window: int
    exact_bits: float
    errors: tuple[tuple[int, float, float], ...]
    outside: tuple[tuple[int, tuple[int, ...]], ...] = ()
    blind_outside: tuple[int, ...] = ()
    sequences: int = REFERENCE_BATCH
    seed: int = REFERENCE_SEED

    def positions(self, window: int) -> tuple[int, ...]:
        """The scored positions (0-based) where window `window` is outside the exact level (() for w >= W)."""
        return dict(self.outside).get(window, ())

    def text(self) -> str:
        """`W = 3: the shortest window within 0.01 bits at every position (worst position's entropy error / KL of each
        window in bits: w1 0.087 / 0.035, ...; 1,000 reference sequences)`."""
        errs = ", ".join(f"w{w} {e:.2g} / {k:.2g}" for w, e, k in self.errors)
        return (
            f"W = {self.window}: the shortest window within {self.exact_bits:g} bits at every position (worst "
            f"position's entropy error / KL of each window in bits: {errs or 'none'}; {self.sequences:,} reference "
            "sequences)"
        )


def _outside(ent: torch.Tensor, kl: torch.Tensor, exact_bits: float) -> tuple[int, ...]:
    """The positions where a per-position entropy error or KL (K,) is above `exact_bits`."""
    return tuple(int(k) for k in ((ent > exact_bits) | (kl > exact_bits)).nonzero().flatten())


@functools.cache
def transport_demand(params: HMMParams, exact_bits: float) -> TransportDemand:
    """The `TransportDemand` of an HMM tunnel at `params`, measured position by position on its fixed reference
    sample (REFERENCE_BATCH sequences of REFERENCE_SEED; deterministic, cached per setting); windows tried in doubling
    chunks, each one `window_filters` call."""
    K = params.K
    batch = HMM(**params.model_dump()).sample(REFERENCE_BATCH, seed=REFERENCE_SEED)
    log_T, log_E = _log_matrices(batch)
    obs = batch.latent["observations"]  # (B,K)
    exact = forward_filter(log_T, log_E, obs)  # (B,K,S)
    h_exact = _entropy_bits(exact)  # (B,K)
    blind = torch.full_like(exact, 1.0 / exact.shape[-1])
    blind_out = _outside((_entropy_bits(blind) - h_exact).abs().mean(0), _kl_bits(exact, blind).mean(0), exact_bits)
    errors: list[tuple[int, float, float]] = []
    outside: list[tuple[int, tuple[int, ...]]] = []
    hi = 0
    while hi < K - 1:
        lo, hi = hi + 1, min(K - 1, max(8, 2 * hi))
        for w, post in window_filters(log_T, log_E, obs, range(lo, hi + 1)).items():  # (B,K,S) each
            ent = (_entropy_bits(post) - h_exact).abs().mean(0)  # (K,) per position, over the sequences
            kl = _kl_bits(exact, post).mean(0)  # (K,)
            errors.append((w, float(ent.max()), float(kl.max())))
            where = _outside(ent, kl, exact_bits)
            if not where:
                return TransportDemand(w, exact_bits, tuple(errors), tuple(outside), blind_out)
            outside.append((w, where))
    return TransportDemand(K, exact_bits, tuple(errors), tuple(outside), blind_out)


def log10_rows(n_cols: int, floor: int = MIN_CENTS) -> float:
    """log10 of the number of discretised rows: compositions of 100 cents into n_cols parts >= floor."""
    return math.log10(math.comb(100 - floor * n_cols + n_cols - 1, n_cols - 1))


class HMM(Task[HMMParams]):
    """HMM filtering: predict the hidden state's filtering posterior for a fresh HMM per sequence."""

    name = "hmm"
    Params = HMMParams
    description = "belief transport: filter the hidden state of a random HMM given in the prompt"
    primitive = "belief transport"
    title = "HMM"
    length_param = "K"  # the paper trains at K = 20 and tests 20, 30, 50 (2.5x)
    approximations_note = (
        "HMM: 'context-blind' (uniform over the states: the marginal p(s_t) of a predictor that reads nothing, by the "
        "symmetry of the prior), then 'last w obs', p(s_t | the last w observations): the best predictor of all that "
        "read the matrices and only those w observations (its window starts from the state's exact marginal u T^s), "
        "for w = 1..W-1, W the tunnel's transport demand: the shortest window whose own entropy error and KL are both "
        "within the exact level at every scored position. A model measurably better than 'last w obs' at every "
        "position where that window is outside the exact level reads more than its last w observations there; the "
        "KL-nearest reference is a description, not a memory claim."
    )
    controls_note = Task.controls_note + (
        " HMM: 'sorted posterior' (the exact filter's probabilities in descending order on states 0..S-1: the same "
        "entropy, the wrong states); 'another HMM's filter' (the exact filter of this sequence's observations through "
        "the previous sequence's T and E: a model that ignores the matrices in the prompt)."
    )
    default_loss = "soft_ce"  # the authors' soft targets: cross-entropy against the exact filter
    # The filter's scored loss barely pays for using T (one observation explains most of b_t); b_t T pays for it fully.
    auxiliary_targets_offered = {"next_state_prior": "the exact next-state prior b_t·T"}

    @property
    def markers(self) -> tuple[int, int, int, int, int]:
        """(TRANS, EMIT, SEP, OBS, first observation id) at this grid's floor (`markers`)."""
        return markers(self.params.floor_cents)

    @property
    def header_len(self) -> int:
        """Tokens before the first [OBS]: [TRANS] T [EMIT] E [SEP]."""
        p = self.params
        return 3 + p.S * p.S + p.S * p.O

    @property
    def exact_bits(self) -> float:
        """The exact level of this tunnel's marks (its `mark_thresholds`, else the default)."""
        return float(self.mark_thresholds.get("exact_bits", EXACT_BITS))

    @property
    def transport_demand(self) -> TransportDemand:
        """W and the window errors at these parameters (`transport_demand`, cached)."""
        return transport_demand(self.params, self.exact_bits)

    @property
    def spec(self) -> TaskSpec:
        p = self.params
        f = p.floor_cents
        return TaskSpec(
            name=self.name,
            input_kind="tokens",
            answer_kind="classes",
            seq_len=self.header_len + 2 * p.K,
            vocab_size=self.markers[4] + p.O,
            n_classes=p.S,
            log10_hypotheses=p.S * log10_rows(p.S, f) + p.S * log10_rows(p.O, f),
        )

    def _stickiness(self, batch: int, g: torch.Generator, device: torch.device) -> torch.Tensor | None:
        """(B,1,1) float64 rho per sequence, or None for the paper's HMM (rho = 0: no draw, the same samples)."""
        lo, hi = self.params.rho_range
        if hi == 0.0:
            return None
        if lo == hi:
            return torch.full((batch, 1, 1), lo, dtype=torch.float64, device=device)
        u = torch.rand(batch, 1, 1, generator=g, device=device, dtype=torch.float64)
        return lo + (hi - lo) * u

    def _sample(self, batch_size: int, g: torch.Generator, device: torch.device) -> Batch:
        p = self.params
        B, S, O, K = batch_size, p.S, p.O, p.K
        t_rows = dirichlet_rows(B, S, S, g, device)  # (B,S,S)
        e_rows = dirichlet_rows(B, S, O, g, device)  # (B,S,O)
        rho = self._stickiness(B, g, device)  # (B,1,1) or None
        e_rows = peak_rows(e_rows, p.emission_clarity, g)  # (B,S,O): each state's own likeliest symbol
        if rho is not None:
            t_rows = rho * torch.eye(S, dtype=torch.float64, device=device) + (1 - rho) * t_rows
        t_cents = discretise_cents(t_rows, p.floor_cents)  # (B,S,S)
        e_cents = discretise_cents(e_rows, p.floor_cents)  # (B,S,O)
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
        inputs = self._prompt(t_cents, e_cents, obs_t)  # (B,T)
        mask = self._scored(inputs)
        return Batch(
            inputs=inputs,
            target_mask=mask,
            targets=scatter_targets(states_t.reshape(-1), mask),
            posterior=self._filter(t_cents, e_cents, obs_t, mask),
            latent={
                "transition": T_mat.float(),
                "emission": E_mat.float(),
                "states": states_t,
                "observations": obs_t,
            },
        )

    def _prompt(self, t_cents: torch.Tensor, e_cents: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """(B,T) tokens `[TRANS] T [EMIT] E [SEP] ([OBS] o_t) x K` from cents (B,S,S), (B,S,O) and obs (B,K)."""
        B, f = obs.shape[0], self.params.floor_cents
        trans, emit, sep, obs_tok, offset = self.markers
        marker = torch.tensor([trans, emit, sep], device=obs.device).expand(B, 3)  # (B,3)
        header = torch.cat(
            [marker[:, :1], t_cents.reshape(B, -1) - f, marker[:, 1:2], e_cents.reshape(B, -1) - f, marker[:, 2:]],
            dim=1,
        )  # (B,H)
        body = torch.stack([torch.full_like(obs, obs_tok), obs + offset], dim=2).reshape(B, -1)  # (B,2K)
        return torch.cat([header, body], dim=1)

    def _scored(self, inputs: torch.Tensor) -> torch.Tensor:
        """(B,T) bool: the observation-symbol tokens."""
        mask = torch.zeros(inputs.shape[:2], dtype=torch.bool, device=inputs.device)
        mask[:, self.header_len + 1 :: 2] = True
        return mask

    def _filter(
        self, t_cents: torch.Tensor, e_cents: torch.Tensor, obs: torch.Tensor, mask: torch.Tensor
    ) -> Categorical:
        """The exact filter of obs (B,K) through the cent matrices, scattered like `batch.posterior`."""
        T_mat, E_mat = t_cents.double() / 100.0, e_cents.double() / 100.0
        post = forward_filter(T_mat.log(), E_mat.log(), obs)  # (B,K,S)
        return scatter_posterior(post.reshape(-1, self.params.S), mask, (*mask.shape, self.params.S))

    def auxiliary_targets(self, batch: Batch) -> dict[str, torch.Tensor]:
        """{"next_state_prior": (B,T,S) float32}: at the scored position of o_t, p(s_t+1 | o_1..t) = b_t T with b_t
        the exact filter scored there (`next_state_prior`, float64 logs on the cent matrices of the prompt); uniform
        at unscored positions."""
        log_T, log_E = _log_matrices(batch)
        mask = batch.target_mask
        prior = next_state_prior(log_T, log_E, batch.latent["observations"])  # (B,K,S)
        S = prior.shape[-1]
        full = torch.full((*mask.shape, S), 1.0 / S, dtype=torch.float32, device=mask.device)  # (B,T,S)
        full[mask] = prior.reshape(-1, S).to(torch.float32)
        return {"next_state_prior": full}

    def parse(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(T cents (B,S,S), E cents (B,S,O), observations (B,K)) of prompts `inputs` (B,T); a ValueError naming the
        first sequence that is not a valid prompt of these parameters (layout, markers, grid, row sums, symbols)."""
        p = self.params
        S, O, H, f = p.S, p.O, self.header_len, p.floor_cents
        trans, emit, sep, obs_tok, offset = self.markers
        x = token_inputs(inputs, self.spec.seq_len)  # (B,T)
        t_cents = x[:, 1 : 1 + S * S].reshape(-1, S, S) + f  # (B,S,S)
        e_cents = x[:, 2 + S * S : H - 1].reshape(-1, S, O) + f  # (B,S,O)
        obs = x[:, H + 1 :: 2] - offset  # (B,K)
        first_invalid(
            [
                ((x[:, 0] != trans) | (x[:, 1 + S * S] != emit) | (x[:, H - 1] != sep), "markers out of place"),
                ((x[:, H::2] != obs_tok).any(1), "an [OBS] marker out of place"),
                (
                    ((t_cents < f) | (t_cents > 100)).flatten(1).any(1),
                    f"a transition entry off the grid {f}..100 cents",
                ),
                (((e_cents < f) | (e_cents > 100)).flatten(1).any(1), f"an emission entry off the grid {f}..100 cents"),
                ((t_cents.sum(-1) != 100).any(1) | (e_cents.sum(-1) != 100).any(1), "a matrix row not summing to 1.00"),
                (((obs < 0) | (obs >= O)).any(1), f"an observation symbol outside 0..{O - 1}"),
            ]
        )
        return t_cents, e_cents, obs

    def posterior_for(self, inputs: torch.Tensor) -> Categorical:
        """The exact filtering posterior of any valid prompt `inputs` (B,T), e.g. one with an observation or a matrix
        entry edited; batch shape (B,T) like `batch.posterior` (equal to it on sampled inputs)."""
        return self._filter(*self.parse(inputs), self._scored(inputs))

    def observation_slots(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(positions (B,K) long, symbols (O,) long): where prompts `inputs` (B,T) hold o_1..o_K, in order (the belief
        after o_k is scored there), and the token ids an observation may take: what the memory probe resamples."""
        H, dev = self.header_len, inputs.device
        positions = torch.arange(H + 1, H + 2 * self.params.K, 2, device=dev)  # (K,)
        symbols = torch.arange(self.params.O, device=dev) + self.markers[4]  # (O,)
        return positions.expand(inputs.shape[0], -1), symbols

    def windows(self) -> tuple[int, ...]:
        """The window filters a model is compared with: 1..W-1, W the transport demand (every window that is not
        within the exact level on its own at some scored position)."""
        return tuple(range(1, self.transport_demand.window))

    def approximations(self, batch: Batch) -> dict[str, Categorical]:
        """Approximate filters to compare a model against ("which filter does it compute?"), batch shape (B,T) like
        `batch.posterior`: "context-blind" (uniform over the states: the marginal p(s_t), by the symmetry of the
        Dirichlet prior), then the best filter of the last w observations ("last w obs", `window_filters`)."""
        log_T, log_E = _log_matrices(batch)
        obs, mask = batch.latent["observations"], batch.target_mask
        B, T = mask.shape
        S = log_T.shape[-1]
        blind = torch.full((B, T, S), 1.0 / S, dtype=torch.float32, device=mask.device)  # (B,T,S)
        out = {"context-blind": Categorical(probs=blind, validate_args=False)}
        windows = self.windows()  # empty where the first window is already within the exact level (K = 1)
        for w, post in (window_filters(log_T, log_E, obs, windows) if windows else {}).items():  # (B,K,S) each
            out[f"last {w} obs"] = scatter_posterior(post.reshape(-1, S), mask, (B, T, S))
        return out

    def approximation_depths(self) -> dict[str, int]:
        """How many observations each approximation keeps (0 for context-blind): a model's belief horizon."""
        return {"context-blind": 0, **{f"last {w} obs": w for w in self.windows()}}

    def approximation_positions(self) -> dict[str, tuple[int, ...]]:
        """Per approximation, the scored positions (0-based) where it is outside the exact level on the reference
        sample (`TransportDemand.outside`): where a model must be measurably closer to the exact filter than it."""
        demand = self.transport_demand
        return {"context-blind": demand.blind_outside, **{f"last {w} obs": demand.positions(w) for w in self.windows()}}

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
        trans, emit, sep, obs, offset = self.markers
        names = {trans: "[TRANS]", emit: "[EMIT]", sep: "[SEP]", obs: "[OBS]"}
        out = []
        for t in batch.inputs[index].tolist():
            if t < trans:
                out.append(f"{(t + self.params.floor_cents) / 100:.2f}")
            else:
                out.append(names.get(t, f"o{t - offset}"))
        return out


class StickyHMMParams(HMMParams):
    """The HMM's parameters with a sticky chain by default: rho ~ U[0.85, 0.95] per sequence, on a grid floored at
    0.01 (a 0.05 floor would cap the diagonal at 0.80 with 5 states, below rho)."""

    stickiness: float | tuple[float, float] = Field(
        (0.85, 0.95), description="rho: T's rows are rho I + (1 - rho) Dirichlet(1); [lo, hi] draws rho per sequence"
    )
    min_prob: float = Field(0.01, ge=0.01, le=0.05, description="the floor of the cent grid (0.01..0.05)")


class StickyHMM(HMM):
    """The HMM tunnel with sticky chains: the state persists for about 1 / (1 - rho) steps, so evidence from many
    observations back still matters and a filter of the last few observations is far from exact."""

    name = "hmm-sticky"
    Params = StickyHMMParams
    description = "long-range belief transport: filter the hidden state of a sticky random HMM given in the prompt"
    primitive = "long-range belief transport"
    title = "Sticky HMM"


register("hmm", HMM)
register("hmm-sticky", StickyHMM)
