"""Probes as objects: a `Probe` declares everything the package does with it, and the registry drives the rest.

A probe says its name (its key in geometry.json), when it applies, what it computes from a trained model and its
held-out data (`ProbeContext`), its columns of the report's per-run Geometry table, its quantities across seeds, the
figures it draws into a run's figures/ and those the report shows, and its line in `windtunnel probe`'s output.
`probe_model` / `probe_run` (geometry.json), `write_figures`, the report (Geometry table, Geometry across seeds,
figures) and the CLI all iterate `probes()`, so a new probe is one file that calls `register_probe`; a user's module
comes in through `--import` (docs/geometry.md, "Adding a probe"):

    >>> from windtunnel.geometry.registry import Column, Probe, register_probe
    >>> register_probe(Probe("norms", compute=lambda ctx: {"final_norm": float(ctx.data.final.norm(dim=-1).mean())},
    ...                      columns=(Column("final norm", ("norms", "final_norm")),)))

The built-in probes (geometry/builtin/, one file each) are registered first, in `BUILTIN` order, by import string: each
module is imported the first time its probe is looked up or the probes are listed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from windtunnel.registry import Registry
from windtunnel.text import number

KeyPath = tuple[Any, ...]  # a path into geometry.json, e.g. ("keys", "by_token_set", "key_tokens")

# The built-in probes, in the order they run and appear (geometry.json's figures, the report's columns, the CLI):
# each module's `PROBE`, registered under the module's name by import string (so that this module imports none).
BUILTIN = tuple(
    f"windtunnel.geometry.builtin.{name}"
    for name in ("keys", "attention", "manifold", "clusters", "lens", "ablation", "dynamics", "memory")
)
# Keys of geometry.json that are not probes: a probe may not take one of these names.
RESERVED = frozenset(
    {"run_dir", "arch", "task", "step", "seed", "init_source", "n_sequences", "entropy_error_bits", "heldout_seed"}
    | {"entropy_error_sample", "figures"}
)


@dataclass
class ProbeContext:
    """What a probe computes from: the trained `model` and `task`; `data`, the model's pass over the held-out
    sequences (`geometry.data.collect`); `init_model`, the same architecture at init, and `init_data`, its pass over the
    same sequences (only where a chosen probe has `init_data=True`); the run's `seed`; `n` held-out sequences and
    `n_ablation` for the ablation sweep. A probe with `history=True` also gets `steps`, the checkpoints up to the probed
    one, `load(step)`, which loads one on the probe's device, and `dynamics_n` sequences to read each with (probe_run
    only)."""

    model: Any
    task: Any = None
    data: Any = None
    init_model: Any = None
    init_data: Any = None
    seed: int = 0
    n: int = 256
    n_ablation: int | None = None
    steps: list[int] = field(default_factory=list)
    load: Callable[[int], Any] | None = None
    dynamics_n: int = 64


@dataclass(frozen=True)
class Column:
    """One column of the report's per-run Geometry table: `header`, the number at `path` in geometry.json, shown by
    `cell(value, geometry)` (None: `default_cell`, a number to 3 decimals, an int as it is, "—" for anything else)."""

    header: str
    path: KeyPath
    cell: Callable[[Any, dict[str, Any]], str] | None = None

    def text(self, geometry: dict[str, Any]) -> str:
        v = dig(geometry, *self.path)
        return default_cell(v) if self.cell is None else self.cell(v, geometry)


@dataclass(frozen=True)
class RunFigure:
    """A PNG the probe draws into a run's figures/ where it applied: `draw(context, result, path)` -> the path written,
    or None (nothing drawn)."""

    filename: str
    draw: Callable[[ProbeContext, Any, Path], Path | None]


@dataclass(frozen=True)
class ReportFigure:
    """One kind of figure in the report (`report.figures.ProbeFigure`, whose fields these are): the run's PNG `source`,
    copied as `<kind>_<cell>.png` under the heading `title` and the paragraph `text`; `what(geometry)`: its caption;
    `archs`: the architectures it is shown for (None: all); `draw(result, path)`: draws it from geometry.json where the
    run has no PNG; `rank`: its place among the report's probe figures (lower first; ties in registration order);
    `draw_seeds(results, path)`: where given, the figure is drawn from every probed seed's result ([(seed, result)],
    in seed order), overlaid, in place of one seed's PNG."""

    kind: str
    source: str
    title: str
    text: str
    what: Callable[[dict[str, Any]], str]
    archs: tuple[str, ...] | None = None
    draw: Callable[[Any, Path], Path | None] | None = None
    rank: float = math.inf
    draw_seeds: Callable[[list[tuple[int, Any]], Path], Path | None] | None = None


@dataclass(frozen=True)
class Probe:
    """A geometry probe.

    name: its key in geometry.json. compute(context) -> its result (a JSON-able dict of plain numbers).
    applies(context) -> None where it applies, else the reason it does not ({"not_applicable": reason} in
    geometry.json; a probe may also return `geometry.data.not_applicable(reason)` from `compute`). history: it reads
    earlier checkpoints (`context.steps`, `context.load`): run by `probe_run` after the single-checkpoint probes, never
    by `probe_model`. init_data: it reads `context.init_data`. columns: its columns of the report's Geometry table.
    seed_quantities: its rows of "Geometry across seeds", each (quantity, trained path, init path (() = none),
    (baseline label, baseline path), `geometry.seeds.Scale`): the mean and interval over seeds of each;
    seed_rank: where those rows go (lower first; ties in registration order). figures: the PNGs it draws into a run;
    report_figures: those the report shows. terminal(result) -> its line in `windtunnel probe`'s output.
    """

    name: str
    compute: Callable[[ProbeContext], dict[str, Any]]
    applies: Callable[[ProbeContext], str | None] | None = None
    history: bool = False
    init_data: bool = False
    columns: tuple[Column, ...] = ()
    seed_quantities: tuple[tuple[Any, ...], ...] = ()
    seed_rank: float = math.inf
    figures: tuple[RunFigure, ...] = ()
    report_figures: tuple[ReportFigure, ...] = ()
    terminal: Callable[[dict[str, Any]], str] | None = None


_PROBES = Registry(
    "probe", holds=Probe, reserved=RESERVED, name_rule="empty, or a key geometry.json uses", caller="register_probe"
)
for _module in BUILTIN:
    _PROBES.register_lazy(_module.rpartition(".")[2], f"{_module}:PROBE")


def register_probe(probe: Probe, *, overwrite: bool = False) -> Probe:
    """Add `probe` to the registry (after the built-ins and every probe registered before it); returns it. A name
    already registered is a ValueError unless `overwrite` (then it keeps its place)."""
    _PROBES.register(probe.name if isinstance(probe, Probe) else "", probe, overwrite=overwrite)
    return probe


def unregister_probe(name: str) -> None:
    """Remove the probe `name` (no error if absent): for tests and notebooks that register temporary probes."""
    _PROBES.unregister(name)


def probes() -> list[Probe]:
    """Every registered probe, built-ins first, in registration order."""
    return _PROBES.values()


def get_probe(name: str) -> Probe:
    """The registered probe `name`; a ValueError naming the closest and every registered one otherwise."""
    return _PROBES.get(name)


_FAILURES = (RuntimeError, ValueError, KeyError, AttributeError, TypeError, IndexError)


def run_probe(probe: Probe, context: ProbeContext) -> dict[str, Any]:
    """`probe`'s result on `context`: {"not_applicable": reason} where it does not apply, {"error": message} where it
    raised on an unexpected model (the other probes still run), else what `compute` returns."""
    try:
        reason = probe.applies(context) if probe.applies is not None else None
        if reason is not None:
            return {"not_applicable": reason}
        return probe.compute(context)
    except _FAILURES as err:
        return {"error": f"{type(err).__name__}: {err}"}


def applied(result: Any) -> bool:
    """A probe result with numbers: neither not applicable nor an error."""
    return isinstance(result, dict) and "not_applicable" not in result and "error" not in result


def dig(d: Any, *path: Any) -> Any:
    """d[path0][path1]... or None where any step is missing (probes that do not apply have no numbers)."""
    for p in path:
        try:
            d = d[p]
        except (KeyError, IndexError, TypeError):
            return None
    return d


def f3(x: Any) -> str:
    """A geometry number to 3 decimals; "—" for anything else (a probe that does not apply, or a garbled value)."""
    return number(x, ".3f") if isinstance(x, (int, float)) and not isinstance(x, bool) else "—"


def g4(x: Any) -> str:
    """A number in a probe's terminal line: a float to 4 significant digits, anything else as it is."""
    return number(x, ".4g") if isinstance(x, float) else str(x)


def default_cell(v: Any) -> str:
    """A Geometry table cell: an int as it is, a number to 3 decimals, "—" for anything else."""
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    return f3(v)


def columns() -> list[Column]:
    """Every registered probe's columns of the report's Geometry table, in registration order."""
    return [c for p in probes() for c in p.columns]


def seed_quantities() -> list[tuple[Any, ...]]:
    """Every registered probe's quantities across seeds, by `seed_rank` (then registration order)."""
    ranked = sorted(probes(), key=lambda p: p.seed_rank)  # stable: ties keep registration order
    return [q for p in ranked for q in p.seed_quantities]


def report_figures() -> list[tuple[Probe, ReportFigure]]:
    """(probe, figure) for every registered probe's report figures, by `rank` (then registration order)."""
    pairs = [(p, f) for p in probes() for f in p.report_figures]
    return sorted(pairs, key=lambda pf: pf[1].rank)


__all__ = [
    "BUILTIN",
    "Column",
    "KeyPath",
    "Probe",
    "ProbeContext",
    "ReportFigure",
    "RunFigure",
    "applied",
    "columns",
    "default_cell",
    "dig",
    "f3",
    "g4",
    "get_probe",
    "probes",
    "register_probe",
    "report_figures",
    "run_probe",
    "seed_quantities",
    "unregister_probe",
]
