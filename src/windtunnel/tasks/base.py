"""The wind-tunnel contract: a task's spec, the batch it samples, and the base class tasks share.

Everything downstream (models, metrics, training, report) only sees `TaskSpec` and `Batch`, so a
user's own task that fills these in runs through the whole toolkit unchanged.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, Protocol, TypeVar, cast, runtime_checkable

import torch
from pydantic import BaseModel, ConfigDict, ValidationError
from torch.distributions import Categorical, Distribution, Normal

from windtunnel.errors import error_message
from windtunnel.tasks._util import generic_controls

if TYPE_CHECKING:  # the HMMs' measure of how far belief must be carried, the type of `Task.transport_demand`
    from windtunnel.tasks.hmm import TransportDemand

InputKind = Literal["tokens", "real"]
AnswerKind = Literal["classes", "real"]


@dataclass(frozen=True)
class TaskSpec:
    """What a model needs to know about a task: input kind, answer kind, and sequence length.

    `answer_token_offset` is set when the K answer classes are the input tokens
    `offset .. offset+K-1` (bijection values), so a model may tie its head to those embeddings.
    `log10_hypotheses` is the size of the hypothesis space: the argument that nothing can be memorised.
    """

    name: str
    input_kind: InputKind
    answer_kind: AnswerKind
    seq_len: int
    vocab_size: int | None = None  # input_kind == "tokens"
    input_dim: int | None = None  # input_kind == "real"
    n_classes: int | None = None  # answer_kind == "classes"
    answer_token_offset: int | None = None
    log10_hypotheses: float = 0.0

    def __post_init__(self) -> None:
        if self.input_kind == "tokens" and not self.vocab_size:
            raise ValueError("TaskSpec: token inputs need vocab_size >= 1")
        if self.input_kind == "real" and not self.input_dim:
            raise ValueError("TaskSpec: real inputs need input_dim >= 1")
        if self.answer_kind == "classes" and not self.n_classes:
            raise ValueError("TaskSpec: class answers need n_classes >= 1")
        if self.seq_len < 1:
            raise ValueError("TaskSpec: seq_len must be >= 1")

    @property
    def output_dim(self) -> int:
        """Width of a model's head: K logits, or (mean, log-variance) for a Gaussian answer."""
        if self.answer_kind != "classes":
            return 2
        assert self.n_classes is not None  # __post_init__: class answers have n_classes
        return int(self.n_classes)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class Batch:
    """One sampled batch of a wind tunnel, with its exact posterior at every position.

    inputs:      (B,T) long token ids, or (B,T,D) float vectors
    target_mask: (B,T) bool, the scored positions
    targets:     (B,T) the realised true answer at scored positions (class id long, or real y float)
    posterior:   exact posterior predictive, batch shape (B,T): Categorical over K classes or Normal;
                 finite everywhere (arbitrary but valid at unscored positions; `check_posterior`)
    latent:      the sampled hypothesis and observations, for probes and tests
    """

    inputs: torch.Tensor
    target_mask: torch.Tensor
    targets: torch.Tensor
    posterior: Distribution
    latent: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def batch_size(self) -> int:
        return int(self.inputs.shape[0])

    @property
    def seq_len(self) -> int:
        return int(self.inputs.shape[1])

    @property
    def device(self) -> torch.device:
        return self.inputs.device


POSTERIOR_TOL = 1e-4  # how far from 1 a categorical posterior's mass may sum (float32 rounding is ~1e-6)


def _tolerance(probs: torch.Tensor) -> float:
    """How far from 1 probabilities (...,K) of `probs`' dtype may sum: POSTERIOR_TOL, or K x the dtype's epsilon if
    larger (a low-precision dtype)."""
    return max(POSTERIOR_TOL, probs.shape[-1] * torch.finfo(probs.dtype).eps)


def check_posterior(name: str, batch: Batch, where: str = "") -> None:
    """A ValueError naming task `name`, the first bad position and what is wrong there, unless `batch.posterior` is a
    distribution of batch shape (B,T) at every position: a Categorical with finite, non-negative probabilities summing
    to 1 (within POSTERIOR_TOL, wider for a low-precision dtype) or a Normal with a finite mean and a finite, positive
    scale. Training runs it on every batch it trains on, evaluation on every batch it scores (`where` says which, e.g.
    "the training batch of step 3"): a plugin's broken posterior, even in one sequence of one batch, would otherwise be
    trained on or scored as the exact one (the oracle reads 0). Cheap: a few reductions over the batch, and on a GPU
    one synchronisation where the posterior is sound."""
    post, at_batch = batch.posterior, f" in {where}" if where else ""
    what = f"task {name!r}: its posterior{at_batch}"
    shape = tuple(batch.target_mask.shape)
    if not isinstance(post, (Categorical, Normal)):
        raise ValueError(f"{what} is a {type(post).__name__}; it must be a torch Categorical or Normal")
    if tuple(post.batch_shape) != shape:
        raise ValueError(f"{what} has batch shape {tuple(post.batch_shape)}, not the batch's (B,T) = {shape}")
    checks: list[tuple[torch.Tensor, str, str, torch.Tensor]]  # (bad (B,T), what it must be, what is shown, value)
    if isinstance(post, Categorical):
        probs = post.probs.detach()  # (B,T,K)
        tol = _tolerance(probs)
        total, lowest = probs.sum(-1, dtype=torch.float64), probs.amin(-1).double()  # no float64 copy of (B,T,K)
        checks = [
            (~torch.isfinite(probs).all(-1), "must hold finite probabilities (no NaN or inf)", "sum", total),
            (lowest < 0, "must hold no negative probability", "least", lowest),
            ((total - 1).abs() > tol, f"must sum to 1 within {tol:.0e}", "sum", total),
        ]
    else:
        loc, scale = post.loc.detach().double(), post.scale.detach().double()
        checks = [
            (~torch.isfinite(loc), "must have a finite mean", "mean", loc),
            (~(torch.isfinite(scale) & (scale > 0)), "must have a positive, finite scale", "scale", scale),
        ]
    if not bool(torch.stack([bad for bad, *_ in checks]).any()):  # the one synchronisation of a sound posterior
        return
    for bad, rule, label, value in checks:
        if bool(bad.any()):
            raise ValueError(f"{what} at {_position(bad)} {rule} (its {label}: {float(value[_first(bad)]):.6g})")


def _first(bad: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in bad.nonzero()[0])


def _position(bad: torch.Tensor) -> str:
    """The first True entry of `bad` (B,T) in words: "position 3 of sequence 0"."""
    idx = _first(bad)
    return f"position {idx[1]} of sequence {idx[0]}" if len(idx) == 2 else f"index {idx}"


# --- what a task gave torch's Categorical: its probabilities before torch normalised them -------------------------
#
# `Categorical(probs=p)` keeps p / p.sum(-1), so a posterior a plugin computed wrong by a factor (a sum of 1.5) reaches
# `check_posterior` summing to 1. `Task.sample` therefore notes, while its `_sample` runs on this thread, the sums of
# the probabilities each Categorical is given (`_given_sums`), and refuses a batch whose posterior was built from
# probabilities that do not sum to 1. torch keeps no copy of them, so the note is taken in Categorical's constructor:
# installed only while some thread samples (reference-counted), a plain pass-through on every other thread.

_GIVEN = threading.local()  # .sums: {id(distribution): (distribution, sums (...) float64)} while this thread samples
_INSTALL = threading.Lock()
_INSTALLED = 0  # threads sampling now: the note is installed while this is above 0
_TORCH_INIT = Categorical.__init__


def _noting_init(
    self: Categorical,
    probs: torch.Tensor | None = None,
    logits: torch.Tensor | None = None,
    validate_args: bool | None = None,
) -> None:
    _TORCH_INIT(self, probs=probs, logits=logits, validate_args=validate_args)
    sums = getattr(_GIVEN, "sums", None)
    if sums is not None and probs is not None:
        sums[id(self)] = (self, probs.detach().sum(-1, dtype=torch.float64), _tolerance(probs))


@contextlib.contextmanager
def _given_sums() -> Iterator[dict[int, tuple[Categorical, torch.Tensor, float]]]:
    """While inside, each Categorical this thread builds from `probs` is noted with the sums of the probabilities it
    was given (and their tolerance), keyed by its id."""
    global _INSTALLED
    with _INSTALL:
        if _INSTALLED == 0:
            Categorical.__init__ = _noting_init  # type: ignore[method-assign]
        _INSTALLED += 1
    outer, _GIVEN.sums = getattr(_GIVEN, "sums", None), {}
    try:
        yield _GIVEN.sums
    finally:
        _GIVEN.sums = outer
        with _INSTALL:
            _INSTALLED -= 1
            if _INSTALLED == 0:
                Categorical.__init__ = _TORCH_INIT  # type: ignore[method-assign]


def check_given_probs(name: str, batch: Batch, given: dict[int, tuple[Categorical, torch.Tensor, float]]) -> None:
    """A ValueError naming task `name` and the first position where `batch.posterior`, a Categorical built from
    probabilities (`given`: `_given_sums`), was given probabilities that do not sum to 1: torch normalised them, so
    the posterior a plugin computed is not the one it would be scored against."""
    noted = given.get(id(batch.posterior))
    if noted is None or noted[0] is not batch.posterior:
        return
    _, sums, tol = noted
    bad = (sums - 1).abs() > tol
    if tuple(sums.shape) == tuple(batch.target_mask.shape) and bool(bad.any()):
        raise ValueError(
            f"task {name!r}: its posterior at {_position(bad)} must sum to 1 within {tol:.0e} (its sum: "
            f"{float(sums[_first(bad)]):.6g}); torch's Categorical normalises the probabilities it is given, which "
            "would hide that: give it probabilities that sum to 1 (or logits=, which need not)"
        )


def make_generator(seed: int | None, generator: torch.Generator | None, device: torch.device) -> torch.Generator:
    """The one place a task turns (seed | generator) into a torch.Generator on `device`."""
    if generator is not None:
        if seed is not None:
            raise ValueError("sample: pass either seed or generator, not both")
        return generator
    g = torch.Generator(device=device)
    if seed is None:
        g.seed()
    elif not 0 <= int(seed) < 2**64:  # what a torch generator's seed holds
        raise ValueError(f"seed: must be in [0, 2^64) (got {seed})")
    else:
        g.manual_seed(int(seed))
    return g


class TaskParams(BaseModel):
    """Base of every task's typed parameters; unknown parameters are an error, not ignored.

    `implicit_when_default` names the parameters that are off by default (an easier task for a curriculum stage, say):
    a run's config stores them only where they are set (`stored`), as it does a model size's options, so a task that
    gains one keeps every run's config, and its identity, as it was."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    implicit_when_default: ClassVar[tuple[str, ...]] = ()

    def stored(self) -> dict[str, Any]:
        """The parameters as a run's config stores them, JSON-ready: every one with its default filled in, but those
        in `implicit_when_default` left out where they are at their default."""
        out = self.model_dump(mode="json")
        for name in self.implicit_when_default:
            if getattr(self, name) == type(self).model_fields[name].default:
                out.pop(name)
        return out


@dataclass(frozen=True)
class Reference:
    """A level of a tunnel's headline metric, derived from its parameters, that the report prints beside Table 1.

    label: what it is ("chance among the 64 stored values"); value: in the headline metric's units, or None for a
    note without a number; floor: a trained model on the wrong side of it failed to optimise (the report says so);
    note: why it matters."""

    label: str
    value: float | None = None
    floor: bool = False
    note: str = ""


HEADLINE_METRICS = ("entropy_mae_bits", "accuracy")
# The exact level of the marks in bits (`marks.Thresholds.exact_bits`), here so a tunnel can size what it measures by it
# (the HMM's transport demand) without importing anything above the tasks.
EXACT_BITS = 0.01
DEFAULT_LOSSES = ("ce", "soft_ce")


@runtime_checkable
class WindTunnel(Protocol):
    """The least a wind tunnel is: `name`, `spec` and `sample`. `Task` states the whole contract (metadata and
    optional hooks, each with a default); `tasks.as_task` adapts an object that has only these three, or some hooks of
    its own, into a `Task`, so the toolkit reads every tunnel through `Task`."""

    name: str

    @property
    def spec(self) -> TaskSpec: ...

    def sample(
        self,
        batch_size: int,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
    ) -> Batch: ...


P = TypeVar("P", bound=TaskParams)
T = TypeVar("T", bound="Task[Any]")

# The members `Task.offers` answers for: a tunnel gives each itself or takes Task's default. Every Task gives those in
# _ALWAYS (a name, parameters, generic controls, its raw inputs as tokens); the others default to "not offered".
OPTIONAL = (
    "name",
    "params",
    "posterior_for",
    "approximations",
    "approximation_depths",
    "approximation_positions",
    "transport_demand",
    "controls",
    "references",
    "attention_evidence",
    "value_positions",
    "observation_slots",
    "sample_bytes",
    "prior_predictive",
    "auxiliary_targets",
    "describe",
)
_ALWAYS = ("name", "params", "controls", "describe")


class Task(Generic[P]):
    """A wind tunnel, and the one statement of what the toolkit reads from one.

    A subclass sets `name` and `Params` (a TaskParams model, named as the type argument too: `class Coin(Task[
    CoinParams])`, so a type checker knows the fields of `self.params`; a plain `class Coin(Task)` runs the same) and
    implements `spec` and `_sample`; `sample` seeds, samples and refuses a posterior built from probabilities that do
    not sum to 1. Everything else below has a default, and the toolkit calls it directly, never probing for it.

    Metadata (class attributes; `tasks.info(name)` reads them from the registered class):
        description        what it tests, in one line
        primitive          the inference primitive it isolates ("belief accumulation"); "" if none is claimed
        title              its Table 1 column title ("": the name, capitalised)
        headline_metric    "entropy_mae_bits" (default) or "accuracy": what Table 1 reports and marks
        default_loss       "ce" on sampled targets (default) or "soft_ce" on the exact posterior (real answers always
                           train with gaussian_nll)
        length_param       the integer parameter that sets the sequence length ("K" for the HMM), or None (default)
                           when no parameter lengthens a sequence without changing what a model is sized for: a model
                           with a learned position table reserves positions for 2.5x its value (`resolve`)
        capacity           (param, what it counts): the report's capacity table over that parameter; None: none
        mark_thresholds    {`marks.Thresholds` field: value} over the marks' defaults ({}: the defaults)
        approximations_note, controls_note   what its approximations and controls are, for the report
        auxiliary_targets_offered   {name: what it is, in words} of `auxiliary_targets` ({}: none)

    Optional hooks, each documented on its method; the default means "not offered" unless it says otherwise:
        posterior_for(inputs)             the exact posterior of any valid input (default: NotImplementedError)
        approximations(batch)             approximate posteriors to tell apart from the exact one ({})
        approximation_depths()            observations each approximation keeps ({})
        approximation_positions()         where each approximation is outside the exact level ({})
        transport_demand                  how far belief must be carried (`tasks.hmm.TransportDemand`; None)
        controls(batch)                   adversarial controls (default: generic ones, `controls_note`)
        references()                      levels of the headline metric for the report ([])
        attention_evidence(inputs, mask)  where a scored row should attend ({})
        value_positions(inputs)           a second position set for the manifold probe (None)
        observation_slots(inputs)         where observations sit, for the memory probe (None)
        sample_bytes(batch_size)          `sample`'s peak bytes where above its batch's (None)
        prior_predictive(batch)           a real-answer tunnel's prior predictive, the uniform baseline's (None)
        auxiliary_targets(batch)          extra exact distributions training may fit, never scored ({})
        describe(batch, i)                tokens for `windtunnel tasks show` (default: the raw inputs)

    `offers(member)` says whether a tunnel gives a member of `OPTIONAL` itself: what a consumer asks where the default
    is no answer (`posterior_for` raises) or where offering changes what is computed (an evaluation records
    `approximations` only for a tunnel that has them). A tunnel that does not subclass Task, any `WindTunnel`, is read
    through `tasks.as_task`: its own members where it has them, these defaults for the rest.
    """

    name: ClassVar[str] = "task"
    Params: ClassVar[type[TaskParams]] = TaskParams
    description: ClassVar[str] = ""
    primitive: ClassVar[str] = ""
    title: ClassVar[str] = ""
    headline_metric: ClassVar[str] = "entropy_mae_bits"
    default_loss: ClassVar[str] = "ce"
    length_param: ClassVar[str | None] = None
    capacity: ClassVar[tuple[str, str] | None] = None
    mark_thresholds: ClassVar[dict[str, float]] = {}
    approximations_note: ClassVar[str] = ""
    auxiliary_targets_offered: ClassVar[dict[str, str]] = {}
    controls_note: ClassVar[str] = (
        "Controls (predictors that do not infer, built to match the exact posterior's entropy): 'another "
        "sequence's posterior' (the exact posterior of the previous sequence of the batch at the same position; for "
        "a batch of one, of the next scored position); "
        "for class answers 'renamed classes' (the exact posterior with its class labels shifted by one: the same "
        "entropy everywhere) and 'entropy only' (a ramp exp(-beta j) over classes 0..K-1, beta set to the exact "
        "entropy: knows how uncertain to be, not about what). Class controls put at least 1e-12 on every class."
    )
    params: P

    def __init__(self, **params: Any) -> None:
        try:
            # `Params` is the class of P by the subclass contract; a ClassVar cannot name a type variable.
            self.params = cast(P, self.Params(**params))
        except ValidationError as err:
            raise ValueError(error_message(err, f"{self.name}.params", f"{self.name}.", self.Params)) from None

    @property
    def spec(self) -> TaskSpec:
        raise NotImplementedError

    def sample(
        self,
        batch_size: int,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
    ) -> Batch:
        """Sample `batch_size` fresh sequences, vectorised over the batch; deterministic for a seed. A posterior built
        as `Categorical(probs=...)` from probabilities that do not sum to 1 is a ValueError (`check_given_probs`)."""
        if int(batch_size) < 1:
            raise ValueError(f"{self.name}.batch_size: must be >= 1 (got {batch_size})")
        dev = (
            torch.device(device)
            if device is not None
            else (generator.device if generator is not None else torch.device("cpu"))
        )
        g = make_generator(seed, generator, dev)
        with _given_sums() as given:
            batch = self._sample(int(batch_size), g, dev)
        check_given_probs(self.name, batch, given)
        return batch

    def _sample(self, batch_size: int, g: torch.Generator, device: torch.device) -> Batch:
        raise NotImplementedError

    def with_params(self: T, **overrides: Any) -> T:
        """A copy of this task with some parameters changed (e.g. a longer K for length generalisation)."""
        return type(self)(**{**self.params.model_dump(), **overrides})

    def offers(self, member: str) -> bool:
        """Whether this tunnel gives `member` (one of `OPTIONAL`) itself rather than Task's default: a subclass that
        overrides it, or always for `_ALWAYS`. ValueError for a name that is not an optional member."""
        if member not in OPTIONAL:
            raise ValueError(f"offers: {member!r} is not an optional member of a wind tunnel ({', '.join(OPTIONAL)})")
        return member in _ALWAYS or getattr(type(self), member) is not getattr(Task, member)

    def posterior_for(self, inputs: torch.Tensor) -> Distribution:
        """The exact posterior of any valid input tensor, batch shape (B,T), equal to `batch.posterior` on sampled
        inputs; a ValueError for an input no sequence could be. What a memory probe, activation patching or a
        counterfactual scores against. Every built-in tunnel has it; the default raises (`offers("posterior_for")`)."""
        raise NotImplementedError(f"task {self.name!r} gives no exact posterior of an arbitrary input (posterior_for)")

    def approximations(self, batch: Batch) -> Mapping[str, Distribution]:
        """Approximate posteriors of `batch`, {name: distribution of batch shape (B,T)}, to tell apart from the exact
        one: the report's KL-nearest-reference column and the ✓ rule (`approximations_note` says what they are)."""
        return {}

    def approximation_depths(self) -> dict[str, int]:
        """How many observations each approximation keeps, {name: int}: a model's belief horizon (the HMMs list the
        windows below their `transport_demand`)."""
        return {}

    def approximation_positions(self) -> dict[str, tuple[int, ...]]:
        """Per approximation, the scored positions (0-based) where it is outside the exact level: the belief horizon
        compares a model with it there, position by position."""
        return {}

    @property
    def transport_demand(self) -> TransportDemand | None:
        """How far this tunnel needs belief carried (W and the window errors), for what ✓ certifies; None: no claim."""
        return None

    def controls(self, batch: Batch) -> dict[str, Distribution]:
        """Adversarial controls (`controls_note`): named predictors with batch shape (B,T) like `batch.posterior` that
        match its entropy without doing the inference, so a metric that marks them exact is broken."""
        return generic_controls(batch.posterior, batch.target_mask)

    def references(self) -> list[Reference]:
        """Levels of the headline metric at these parameters for the report (none by default)."""
        return []

    def attention_evidence(
        self, inputs: torch.Tensor, mask: torch.Tensor
    ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Which earlier positions a scored row of `inputs` (B,T) should attend to, per kind of row: {kind: (rows
        (B,T) bool, evidence (B,T,T) bool)}; the attention probe reports the mass there."""
        return {}

    def value_positions(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """A second set of positions of token `inputs` (B,T) for the manifold probe, with the entropy attached to
        each: (mask (B,T), entropy bits (B,T)); None: the tunnel names none."""
        return None

    def observation_slots(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Where each observation of `inputs` (B,T) sits and the tokens it may take: (positions (B,K) long, symbols
        (n,) long), what the memory probe resamples; None: the tunnel names none."""
        return None

    def sample_bytes(self, batch_size: int) -> int | None:
        """The bytes `sample(batch_size)` holds at its peak where that is more than the batch it returns, counted by
        the memory bound before anything is sampled (`budget.sampled_bytes`); None: the batch is the peak."""
        return None

    def prior_predictive(self, batch: Batch) -> Distribution | None:
        """The prior predictive of a real-answer tunnel at every position of `batch`, batch shape (B,T): what the
        uniform baseline predicts; None: the baseline pools the batch's targets instead."""
        return None

    def auxiliary_targets(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Extra exact distributions training may also fit with a head of its own (`train.aux_target`), never scored:
        {name in `auxiliary_targets_offered`: probabilities (B,T,n) summing to 1 over n at each scored position
        (valid but unused elsewhere)}, a function of the batch alone."""
        return {}

    def describe(self, batch: Batch, index: int = 0) -> list[str]:
        """Human-readable tokens of one sequence (used by `windtunnel tasks show`)."""
        x = batch.inputs[index]
        return [str(v.tolist()) for v in x]

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.model_dump().items())
        return f"{type(self).__name__}({args})"
