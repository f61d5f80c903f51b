"""Bounds a config must keep before anything is built: the memory its run needs, estimated from the typed sizes, must
fit this machine, `train.steps` is at most `MAX_STEPS` and `model.size.n_layers` at most `MAX_LAYERS`. A config
beyond them is one ValueError naming the fields to change, never a run that allocates until the kernel kills it or
builds and trains for ever.

The estimate is a lower bound, so a run that fits is never refused. The model's parameters and buffers are counted
exactly: it is built on torch's "meta" device (no memory, no init, the global RNG left as it was). The rest is what
a run holds at the least at its peak, training or evaluating:

  training    every parameter with its gradient and optimiser state (`OPTIMISER_FLOATS`), then the larger of a
              training step (its batch as sampled, `sampled_bytes`; activations: `ACTIVATION_FLOATS` per sequence,
              position, d_model unit and layer; outputs: `OUTPUT_FLOATS` per position and class) and a validation
              pass (below, `train.eval_size`);
  evaluation  the weights, the score tables of `eval.n` sequences (`TABLE_BYTES` per sequence and scored position:
              docs/reliability.md, "Bounded memory in evaluation"), and the larger of one forward pass (its inputs
              and outputs) and one block of held-out sequences as sampled (`seeds.DRAW_BLOCK`, `sampled_bytes`).

What a batch holds is counted from the task's spec: its inputs (`input_dim` floats, or a token id, per position),
mask, targets and the posterior's parameters; a task whose sampling holds more at its peak says so with
`sample_bytes(batch_size)` (regression's exact predictive holds (B, n, d, d) matrices), so no tensor a configuration
allocates, inputs included, goes uncounted: `task.params.d: 1e8` is refused, not sampled.

It is checked against `machine.memory`: the RAM, or for a run on CUDA the larger of the RAM and the GPU's memory.
"""

from __future__ import annotations

import copy
import functools
import json
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from windtunnel import models, tasks
from windtunnel.config import RunConfig, config_to_json, validate
from windtunnel.machine import memory
from windtunnel.seeds import DRAW_BLOCK

FLOAT = 4  # bytes of a float32 weight, gradient, optimiser state or activation
# Floats per trained parameter: the weight, its gradient and the optimiser's state (AdamW's two moments; Muon's
# momentum at the least, as AdamW's two moments on the parameters it leaves to AdamW are not counted)
OPTIMISER_FLOATS = {"adamw": 4, "muon": 3}
# Floats a training step keeps for the backward pass per sequence, position, d_model unit and layer, at the least:
# measured with torch's saved-tensor hooks on the built-ins at the smoke and quick presets, the MLPs keep 5 to 6, the
# LSTM 17 to 21, the transformer 19 to 41 and Mamba 59 to 61.
ACTIVATION_FLOATS = 4
OUTPUT_FLOATS = 3  # per sequence, position and class: the logits, their gradient (or the prediction), the posterior
# Per evaluated sequence and scored position: the float64 score table's 7 columns (56 bytes) and the copy its blocks
# are joined into (docs/reliability.md measures about 200 bytes at the peak).
TABLE_BYTES = 112
# Training steps at most: the paper tier's longest run is 50,000 steps, and a billion steps of the smallest model
# (about a millisecond each on a CPU) are weeks, so a larger number is a typo.
MAX_STEPS = 10**9
# Layers at most, for an architecture whose size has `n_layers`: the paper's deepest model has 12, the deepest
# language models about 100, and a smoke-width transformer of 1,000 layers takes seconds to build and minutes per
# training step on a CPU; 100,000 of them fit in memory at that width but would build for minutes and train for years.
MAX_LAYERS = 1000
# Deeper models are built at EXACT_LAYERS - 1 and EXACT_LAYERS layers and their count extrapolated per layer (their
# layers are alike), so that n_layers: 100000 costs no more to count than a small model.
EXACT_LAYERS = 4
# A task whose one sequence takes at most this many bytes to sample (`sampled_bytes`) is sampled to count its scored
# positions; a larger one counts one, the least it can have.
SAMPLE_LIMIT = 2**26
TOKEN_BYTES = 8  # a token id (int64), an input position of a token task; its target too


@dataclass(frozen=True)
class Part:
    """Bytes of one thing a run holds (`what` says it), and the config field that sizes it most directly."""

    what: str
    bytes: float
    field: str


@dataclass(frozen=True)
class Need:
    """The memory a run needs at the least at its peak, while it does `phase` ("train" or "evaluate")."""

    phase: str
    parts: tuple[Part, ...]

    @property
    def total(self) -> float:
        return sum(p.bytes for p in self.parts)


def _count(n: float) -> str:
    return f"{int(n):,}" if n < 1e6 else f"{n:.3g}"


def _gb(n: float) -> str:
    return f"{n / 1e9:,.1f} GB"


def on_cuda(cfg: RunConfig) -> bool:
    """Whether the run trains and evaluates on CUDA (`train.device`: cuda, or auto where this machine has it)."""
    return cfg.train.device == "cuda" or (cfg.train.device == "auto" and torch.cuda.is_available())


def _on_meta(factory: Any, spec: Any, size: Any) -> tuple[int, int]:
    """(trained parameters, bytes of every other parameter and buffer) of `factory(spec, size)`, built on the meta
    device: no memory, no init, and the global RNG left as it was."""
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        model = factory(spec, size)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    other = [*(p for p in model.parameters() if not p.requires_grad), *model.buffers()]
    return trained, sum(t.numel() * t.element_size() for t in other)


def typed_size(cfg: RunConfig) -> tuple[Any, Any] | None:
    """(architecture, typed size with max_len and reserved positions) of a resolved config's model, as the run builds
    it; None for a baseline and for an architecture not registered here (an import string, imported only when the
    run builds it)."""
    if models.is_baseline(cfg.model.arch) or cfg.model.arch not in models.names():
        return None
    factory = models.resolve(cfg.model.arch)
    reserved = {"reserved_positions": cfg.model.reserved_positions} if cfg.model.reserved_positions else {}
    return factory, factory.Size.of({"max_len": cfg.model.max_len, **reserved, **cfg.model.size}, where="model.size.")


def model_size(factory: Any, spec: Any, size: Any) -> tuple[int, int]:
    """(trained parameters, bytes of the other parameters and buffers) of `factory(spec, size)`, counted on the meta
    device; (0, 0) for a model that cannot be built there."""
    layers = getattr(size, "n_layers", None)
    try:
        if isinstance(layers, int) and layers > EXACT_LAYERS:
            below = _on_meta(factory, spec, factory.Size.of(size, {"n_layers": EXACT_LAYERS - 1}))
            at = _on_meta(factory, spec, factory.Size.of(size, {"n_layers": EXACT_LAYERS}))
            more = layers - EXACT_LAYERS
            return at[0] + more * (at[0] - below[0]), at[1] + more * (at[1] - below[1])
        return _on_meta(factory, spec, size)
    except Exception:  # noqa: BLE001 - a user's model that needs real tensors to build: counted when the run builds it
        return 0, 0


def batch_bytes(spec: Any, batch_size: int) -> float:
    """Bytes a batch of `batch_size` sequences of a task of `spec` holds: per sequence and position its inputs
    (`input_dim` floats, or a token id), mask, target and the posterior's parameters (K probabilities, or a mean and a
    scale)."""
    inputs = spec.input_dim * FLOAT if spec.input_kind == "real" and spec.input_dim else TOKEN_BYTES
    return float(batch_size) * spec.seq_len * (inputs + 1 + TOKEN_BYTES + spec.output_dim * FLOAT)


def sampled_bytes(task: Any, batch_size: int) -> float:
    """Bytes `task.sample(batch_size)` holds at its peak, at the least: its batch (`batch_bytes`), or where the task's
    own `sample_bytes(batch_size)` says its sampling holds more (regression's (B, n, d, d) statistics), that."""
    least = batch_bytes(task.spec, batch_size)
    own = task.sample_bytes(int(batch_size))
    return max(least, float(own)) if own is not None else least


def scored_positions(task: Any) -> int:
    """The scored positions of a sequence of `task`, from one sampled sequence (the global RNG left as it was); 1,
    the least there can be, for a task too large to sample here (`SAMPLE_LIMIT`) or one whose sampling fails (the
    run's own sampling reports that)."""
    if sampled_bytes(task, 1) > SAMPLE_LIMIT:
        return 1
    try:
        with torch.random.fork_rng(devices=[]):
            mask = task.sample(1, seed=0).target_mask
    except Exception:  # noqa: BLE001 - see the docstring
        return 1
    return max(int(mask.sum(1).max()), 1)


def _inputs(spec: Any, b: int) -> str:
    """`b` sequences' inputs, in words: "x 47 positions x 6 inputs" for real vectors."""
    per = f" x {_count(spec.input_dim)} inputs" if spec.input_kind == "real" and spec.input_dim else ""
    return f"{_count(b)} sequences x {_count(spec.seq_len)} positions{per}"


def _scoring(n: int, batch_size: int, scored: Sequence[tuple[Any, int]], field: str) -> tuple[Part, ...]:
    """What scoring `n` sequences of the most demanding of the tasks in `scored` (each with its scored positions per
    sequence) holds: its score tables, and the larger of one forward pass (at most `batch_size` sequences: their
    inputs as sampled and their outputs) and one block of sequences as sampled (at most `DRAW_BLOCK`)."""
    best: tuple[Part, ...] = ()
    for task, s in scored:
        spec, b, drawn = task.spec, min(batch_size, n), min(DRAW_BLOCK, n)
        forward = (
            Part(f"inputs of {_inputs(spec, b)}", batch_bytes(spec, b), "eval.batch_size"),
            Part(
                f"outputs of {_count(b)} sequences x {_count(spec.seq_len)} positions x {_count(spec.output_dim)} "
                "classes",
                b * spec.seq_len * spec.output_dim * OUTPUT_FLOATS * FLOAT,
                "eval.batch_size",
            ),
        )
        block = (Part(f"sampling a block of {_inputs(spec, drawn)}", sampled_bytes(task, drawn), field),)
        parts = (
            Part(f"score tables of {_count(n)} sequences x {_count(s)} scored positions", n * s * TABLE_BYTES, field),
            *max(forward, block, key=lambda group: sum(p.bytes for p in group)),
        )
        if sum(p.bytes for p in parts) > sum(p.bytes for p in best):
            best = parts
    return best


def estimate(cfg: RunConfig) -> Need:
    """The memory a resolved config's run needs at the least: the larger of its training and its evaluation."""
    return _estimate(config_to_json(cfg))


@functools.lru_cache(maxsize=256)
def _estimate(text: str) -> Need:
    """`estimate` of a config's JSON, once per process: a driver resolves each run's config, and `run_job` again."""
    cfg = validate(json.loads(text))
    task = tasks.make(cfg.task.name, **cfg.task.params)
    spec = task.spec
    stages = [tasks.make(cfg.task.name, **{**cfg.task.params, **s.params}) for s in cfg.train.curriculum]
    evaluated = [task, *(tasks.make(cfg.task.name, **{**cfg.task.params, **o}) for o in cfg.eval.overrides if o)]
    scored = [(t, scored_positions(t)) for t in evaluated]
    built = typed_size(cfg)
    trained, other = model_size(built[0], spec, built[1]) if built else (0, 0)
    buffers = f", {_gb(other)} of buffers" if other else ""
    weights = Part(f"{_count(trained)} parameters{buffers}", trained * FLOAT + other, "model.size")
    evaluation = Need("evaluate", (weights, *_scoring(cfg.eval.n, cfg.eval.batch_size, scored, "eval.n")))
    t = cfg.train
    if t.steps == 0 or models.is_baseline(cfg.model.arch):
        return evaluation
    floats = OPTIMISER_FLOATS[t.optimizer]
    state = Part(
        f"{_count(trained)} parameters with gradients and {t.optimizer} state{buffers}",
        trained * floats * FLOAT + other,
        "model.size",
    )
    B, T = t.batch_size, max([spec.seq_len, *(stage.spec.seq_len for stage in stages)])
    d, layers = (getattr(built[1], "d_model", 0), getattr(built[1], "n_layers", 0)) if built else (0, 0)
    step = (
        Part(
            f"a training batch of {_inputs(spec, B)}, as sampled",
            max(sampled_bytes(stage, B) for stage in [task, *stages]),
            "train.batch_size",
        ),
        Part(
            f"activations of {_count(B)} sequences x {_count(T)} positions x d_model {_count(d)} x {_count(layers)} "
            "layers",
            B * T * d * layers * ACTIVATION_FLOATS * FLOAT if type(d) is int and type(layers) is int else 0,
            "train.batch_size",
        ),
        Part(
            f"outputs of {_count(B)} sequences x {_count(T)} positions x {_count(spec.output_dim)} classes",
            B * T * spec.output_dim * OUTPUT_FLOATS * FLOAT,
            "train.batch_size",
        ),
    )
    validation = _scoring(t.eval_size, cfg.eval.batch_size, scored[:1], "train.eval_size") if t.eval_every else ()
    busiest = max(step, validation, key=lambda parts: sum(p.bytes for p in parts))
    return max(Need("train", (state, *busiest)), evaluation, key=lambda need: need.total)


# The settings a refusal may name besides the integers in model.size, task.params, the curriculum stages' params and
# the evaluation overrides: each is put back to its default in turn to see whether the run then fits.
_SETTINGS = (
    ("train", "batch_size"),
    ("train", "eval_size"),
    ("eval", "n"),
    ("eval", "batch_size"),
    ("model", "max_len"),
    ("model", "reserved_positions"),
)


_ROUNDS = 3  # fields a refusal names at most where no one field alone is to blame


def _integer_fields(data: dict[str, Any]) -> Iterator[tuple[tuple[Any, ...], str]]:
    """(path, name) of each integer field of a config's data that sizes its run: `_SETTINGS`, and the integers of
    model.size, task.params, each curriculum stage's params and each evaluation override."""
    for path in _SETTINGS:
        if data[path[0]].get(path[1]) is not None:
            yield path, ".".join(path)
    free: list[tuple[tuple[Any, ...], str]] = [(("model", "size"), "model.size"), (("task", "params"), "task.params")]
    free += [
        (("train", "curriculum", i, "params"), f"train.curriculum[{i}].params")
        for i in range(len(data["train"]["curriculum"]))
    ]
    free += [(("eval", "overrides", i), f"eval.overrides[{i}]") for i in range(len(data["eval"]["overrides"]))]
    for path, name in free:
        node = functools.reduce(operator.getitem, path, data)
        yield from (((*path, k), f"{name}.{k}") for k, v in node.items() if type(v) is int)


def culprits(cfg: RunConfig, need: Need, have: int, resolve: Callable[[dict[str, Any]], RunConfig]) -> list[str]:
    """The integer fields of `cfg` (before resolution) that make its run too large: those that alone, back at their
    default (or their preset's value), let the run fit `have` bytes. Where none does, the one whose default saves
    the most (if it halves the need at least), then again on that config, up to `_ROUNDS` fields. `resolve`
    resolves a variant without the memory check."""
    data, total = cfg.model_dump(mode="json"), need.total
    named: list[str] = []
    for _ in range(_ROUNDS):
        needs: dict[str, tuple[float, dict[str, Any]]] = {}
        for path, name in _integer_fields(data):
            variant = copy.deepcopy(data)
            del functools.reduce(operator.getitem, path[:-1], variant)[path[-1]]
            try:
                needs[name] = estimate(resolve(variant)).total, variant
            except ValueError:  # the default does not go with the rest of the config: not the one to change alone
                continue
        fits = [name for name, (n, _) in needs.items() if n <= have]
        if fits:
            return named + fits
        best = min(needs, key=lambda name: needs[name][0], default=None)
        if best is None or needs[best][0] > total / 2:
            break
        named.append(best)
        total, data = needs[best]
    return named


def _too_large(fields: Sequence[str], need: Need, have: tuple[int, str]) -> ValueError:
    """The one-line refusal: the fields to change, the estimate in GB with its largest parts, the machine's memory."""
    shown = [p for p in sorted(need.parts, key=lambda p: -p.bytes) if p.bytes >= need.total / 100]
    return ValueError(
        f"{', '.join(fields)}: this run needs at least {_gb(need.total)} of memory to {need.phase} "
        f"({'; '.join(f'{p.what}: {_gb(p.bytes)}' for p in shown)}), more than the {_gb(have[0])} this machine has "
        f"({have[1]})"
    )


def _largest(need: Need) -> str:
    return max(need.parts, key=lambda p: p.bytes).field


def check(cfg: RunConfig, resolved: RunConfig, resolve: Callable[[dict[str, Any]], RunConfig]) -> None:
    """ValueError where the run of `resolved` (the resolution of `cfg`) trains more than MAX_STEPS steps, has more than
    MAX_LAYERS layers or needs more memory than this machine has, naming the fields of `cfg` to change and, for
    memory, the estimate in GB against the machine's. `resolve` resolves a variant of `cfg` without this check."""
    if resolved.train.steps > MAX_STEPS:
        raise ValueError(
            f"train.steps: must be at most {MAX_STEPS:,} (got {resolved.train.steps:,}): a billion steps of the "
            "smallest model are weeks of training"
        )
    built = typed_size(resolved)
    if built is not None:
        check_depth(built[1])
    have, need = memory(on_cuda(resolved)), estimate(resolved)
    if have is not None and need.total > have[0]:
        raise _too_large(culprits(cfg, need, have[0], resolve) or [_largest(need)], need, have)


def check_depth(size: Any) -> None:
    """ValueError where a typed model size has more than MAX_LAYERS layers (`n_layers`)."""
    layers = getattr(size, "n_layers", None)
    if isinstance(layers, int) and layers > MAX_LAYERS:
        raise ValueError(
            f"model.size.n_layers: must be at most {MAX_LAYERS:,} (got {layers:,}): a model that deep builds for "
            "minutes and trains for years"
        )


def check_model(cfg: RunConfig) -> None:
    """ValueError where the model of the resolved config `cfg` has more than MAX_LAYERS layers or its weights alone
    need more memory than this machine has: the bounds a model built from a record passes (`runs.build_model`: eval,
    probe and compare of a shared run directory, whose config.json no training path has checked), before it is
    built. Its weights are counted on the meta device, once per config (`_weights`)."""
    built = typed_size(cfg)
    if built is None:
        return
    check_depth(built[1])
    have, weights = memory(on_cuda(cfg)), _weights(config_to_json(cfg))
    if have is not None and weights.bytes > have[0]:
        raise _too_large(["model.size"], Need("build its model", (weights,)), have)


@functools.lru_cache(maxsize=256)
def _weights(text: str) -> Part:
    """The weights of a config's model (its JSON), counted on the meta device (`model_size`)."""
    cfg = validate(json.loads(text))
    built = typed_size(cfg)
    if built is None:
        return Part("no parameters", 0.0, "model.size")
    trained, other = model_size(built[0], tasks.make(cfg.task.name, **cfg.task.params).spec, built[1])
    buffers = f", {_gb(other)} of buffers" if other else ""
    return Part(f"{_count(trained)} parameters{buffers}", trained * FLOAT + other, "model.size")


# Evaluation settings `windtunnel eval` takes as options: the field, and the option that sets it.
_EVAL_OPTIONS = {"eval.n": ("n", "--n"), "eval.batch_size": ("batch_size", "--batch-size")}


def check_evaluation(cfg: RunConfig, n: int | None = None, batch_size: int | None = None) -> None:
    """ValueError where evaluating the run of the resolved config `cfg` (a stored run's) on `n` sequences, `batch_size`
    per forward pass (None: its own eval settings), needs more memory than this machine has; it names the option
    (--n, --batch-size) or the stored field that sizes the largest part."""
    given = {k: v for k, v in (("n", n), ("batch_size", batch_size)) if v is not None}
    train = cfg.train.model_copy(update={"steps": 0, "curriculum": []})  # evaluating holds the weights alone
    need = estimate(cfg.model_copy(update={"eval": cfg.eval.model_copy(update=given), "train": train}))
    have = memory(on_cuda(cfg))
    if have is not None and need.total > have[0]:
        field = _largest(need)
        key, option = _EVAL_OPTIONS.get(field, ("", ""))
        raise _too_large([option if key in given else field], need, have)


__all__ = [
    "ACTIVATION_FLOATS",
    "MAX_LAYERS",
    "MAX_STEPS",
    "Need",
    "Part",
    "batch_bytes",
    "check",
    "check_depth",
    "check_evaluation",
    "check_model",
    "culprits",
    "estimate",
    "model_size",
    "on_cuda",
    "sampled_bytes",
    "scored_positions",
    "typed_size",
]
