"""The cell spec and its naming: a `Cell` (task, architecture, recipe, budget), parsed from `--cell`, each seed's run
config, resolved and named (`<task>-<arch>-<recipe>-<steps>x<batch>-lr<lr>-s<seed>-<hash>`), and the cell's label."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from windtunnel.config import RunConfig, apply_overrides, parse_value, warmup_for
from windtunnel.errors import error_message
from windtunnel.resolve import resolve_config
from windtunnel.store import manifest
from windtunnel.suites.paper import MAX_SEEDS, TASKS, run_config
from windtunnel.training.recipes import RECIPES, get_recipe

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")  # what a run-name part may not contain


class Cell(BaseModel):
    """One benchmark cell: the tier's task size and model preset, trained with `recipe` for `steps` at `batch_size`
    and `lr`, evaluated every `eval_every` steps on `eval_size` validation sequences; `seeds` runs."""

    model_config = ConfigDict(extra="forbid")
    task: str
    arch: str
    recipe: str = "baseline"
    tier: str = "quick"
    steps: int = Field(ge=1)
    batch_size: int = Field(default=64, ge=1)
    lr: float = Field(default=1e-3, gt=0, allow_inf_nan=False)
    warmup_steps: int | None = Field(default=None, ge=0)  # None: 5% of the steps, as the quick tier
    eval_every: int = Field(default=100, ge=1)
    eval_size: int = Field(default=256, ge=1)
    seeds: int = Field(default=1, ge=1, le=MAX_SEEDS)  # bounded before any run is resolved
    set: dict[str, Any] = Field(default_factory=dict)  # extra dotted overrides (model.size.*, train.*, task.params.*)

    @property
    def recipe_name(self) -> str:
        """The recipe as labels show it: a registered name as given, a recipe file by its file name (`wsd.yaml`, never
        to be read as the registered `wsd`)."""
        return self.recipe if self.recipe in RECIPES else Path(self.recipe).name


@dataclass(frozen=True)
class SeedRun:
    """One seed of a cell: its run-directory `name`, the raw `config` it trains and that config `resolved`."""

    seed: int
    name: str
    config: dict[str, Any]
    resolved: RunConfig = field(repr=False, compare=False)


def cell_config(cell: Cell, seed: int) -> dict[str, Any]:
    """The run config of one seed of a cell: the tier's config of (task, arch) with the cell's budget and recipe. A
    task outside the paper suite, or a recipe that sets more than training keys, is a ValueError naming it."""
    if cell.task not in TASKS:
        raise ValueError(f"--cell task: {cell.task!r} is not a task of the paper suite ({', '.join(TASKS)})")
    recipe = get_recipe(cell.recipe)
    recipe.check_training_only(cell.task, cell.steps, f"--cell recipe {cell.recipe!r}")  # before apply reads it
    cfg = run_config(cell.task, cell.arch, cell.tier, seed)
    warmup = cell.warmup_steps if cell.warmup_steps is not None else warmup_for(cell.steps)
    cfg = apply_overrides(
        cfg,
        {
            "train.steps": cell.steps,
            "train.batch_size": cell.batch_size,
            "train.lr": cell.lr,
            "train.warmup_steps": warmup,
            "train.eval_every": cell.eval_every,
            "train.eval_size": cell.eval_size,
            "train.checkpoint_every": max(cell.eval_every, cell.steps // 10),
            "train.checkpoint_schedule": None,
            "train.keep_checkpoints": 1,
            "train.log_every": min(50, cell.eval_every),
        },
    )
    cfg = recipe.apply(cfg)
    return apply_overrides(cfg, cell.set)


def _part(text: str, limit: int = 40) -> str:
    """Run-name-safe text (the hash beside it keeps the name unique)."""
    return _UNSAFE.sub("_", text)[:limit] or "_"


def run_name(cell: Cell, cfg: RunConfig) -> str:
    """`hmm-transformer-wsd-3000x32-lr0.001-s0-3f2a9c01b7de`: a readable prefix read from the resolved config, then
    the hash of that config (`manifest.config_hash`)."""
    t = cfg.train
    prefix = f"{cfg.task.name}-{_part(cfg.model.arch)}-{_part(cell.recipe_name)}-{t.steps}x{t.batch_size}-lr{t.lr:g}"
    return f"{prefix}-s{cfg.seed}-{manifest.config_hash(cfg)}"


def cell_runs(cell: Cell) -> list[SeedRun]:
    """Every seed of a cell, resolved and named; a bad cell is a ValueError naming the field, and seeds that resolve
    to one run (`set.seed` fixes every seed's) are refused."""
    runs = []
    for seed in range(cell.seeds):
        raw = cell_config(cell, seed)
        resolved = resolve_config(raw)
        runs.append(SeedRun(seed, run_name(cell, resolved), raw, resolved))
    if len({r.name for r in runs}) < len(runs):
        raise ValueError(
            f"--cell seeds={cell.seeds}: every seed is one run (set.seed fixes the seed of all of them); use seeds=1"
        )
    return runs


def _at(data: Any, dotted: str) -> Any:
    """The value at a dotted key of a config dump (None where it is not there)."""
    for part in dotted.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data


def _short(value: Any) -> Any:
    """A label's view of a value: a list of more than four items as `[first, …, last] (n)`."""
    if isinstance(value, list) and len(value) > 4:
        return f"[{value[0]}, …, {value[-1]}] ({len(value)})"
    return value


def cell_label(cell: Cell, cfg: RunConfig) -> str:
    """`hmm/transformer/wsd (3000x32, lr 0.001, adamw, wsd, d_model=96)`, every value read from the resolved config of
    the cell's first seed (the preset is named where it is not the quick one; `set` keys by their last part, long
    lists shortened)."""
    t = cfg.train
    parts = [f"{t.steps}x{t.batch_size}", f"lr {t.lr:g}", t.optimizer, t.schedule]
    if cfg.model.preset not in (None, "quick"):
        parts.append(f"{cfg.model.preset} preset")
    dump = cfg.model_dump(mode="json")
    parts += [f"{k.split('.')[-1]}={_short(_at(dump, k))}" for k in sorted(cell.set)]
    return f"{cfg.task.name}/{cfg.model.arch}/{cell.recipe_name} ({', '.join(parts)})"


def _items(text: str) -> list[str]:
    """The key=value items of a --cell, split at its commas; a part that holds no `=` after an item whose bracket or
    brace is still open continues that item's value (`set.train.checkpoint_schedule=[100,200]`)."""
    items: list[str] = []
    for part in text.split(","):
        last = items[-1] if items else ""
        if "=" not in part and last.count("[") + last.count("{") > last.count("]") + last.count("}"):
            items[-1] = f"{last},{part}"
        else:
            items.append(part)
    return [s.strip() for s in items if s.strip()]


def parse_cell(text: str) -> Cell:
    """`task=bijection,arch=transformer,recipe=wsd,steps=3000` (plus batch_size, lr, seeds, ...; `set.KEY=V` for
    extra overrides) -> Cell; values read as `--set` values are, a list or mapping whole (`_items`). ValueError names
    a bad field or a key given twice."""
    fields: dict[str, Any] = {"set": {}}
    for item in _items(text):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--cell: expected key=value, got {item!r}")
        where, name = (fields["set"], key[4:]) if key.startswith("set.") else (fields, key)
        if name in where:
            raise ValueError(f"--cell {text!r}: {key} is given twice")
        where[name] = parse_value(value.strip())
    try:
        return Cell.model_validate(fields)
    except ValidationError as err:
        raise ValueError(f"--cell {text!r}: {error_message(err, model=Cell)}") from None
