"""Training recipes as data: a named set of optimiser / schedule / batch / size / curriculum settings.

A recipe is dotted config overrides (`train.schedule`, `train.optimizer`, `model.size.d_model`, ...) plus an
optional per-task curriculum written in fractions of the run, so one recipe applies at any budget:

    wsd = Recipe(name="wsd", description="...", overrides={"train.schedule": "wsd", "train.cooldown_frac": 0.2})
    cfg = get_recipe("wsd").apply(run_config("hmm", "transformer", "quick"))

Honesty rule: a recipe changes how a model is trained, never what it is trained and scored on. Task parameters and
evaluation settings cannot be set by a recipe. The loss may be set to `posterior` (soft targets: cross-entropy against
the exact posterior, or the closed-form Gaussian KL for real answers; the sampled losses' minimiser, without their
sampling noise, and the authors' own HMM loss); any other change of the loss (the paper's cross-entropy on sampled
targets, Gaussian NLL for regression) is allowed only in a recipe marked `ablation`.
Recipes load from YAML/JSON files too (`get_recipe("my-recipe.yaml")`); `RECIPES` holds the registered ones
(`RECIPES.register(name, recipe)` adds one); what each was measured to do is in docs/results/time-to-bayes.md.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from windtunnel.config import apply_overrides, read_file
from windtunnel.errors import error_message
from windtunnel.registry import Registry
from windtunnel.text import did_you_mean

# The loss a recipe may set without being an ablation: soft targets, the exact posterior (train.loss "posterior").
SOFT_LOSSES = ("posterior",)
_ALLOWED_PREFIXES = ("train.", "model.")
_FORBIDDEN = ("model.arch",)  # a recipe trains a given architecture; it does not swap it
# What a recipe compared at a fixed budget (time-to-Bayes) may set: the optimiser, the schedule and the curriculum
# (and, in an ablation, the loss); the budget, the evaluation and the model are the benchmark cell's.
TRAINING_KEYS = (
    "train.optimizer",
    "train.weight_decay",
    "train.betas",
    "train.grad_clip",
    "train.schedule",
    "train.cooldown_frac",
    "train.min_lr_ratio",
    "train.curriculum",
    "train.loss",
)


class Stage(BaseModel):
    """A curriculum stage in fractions of the run: train with `params` until `frac` of the steps."""

    model_config = ConfigDict(extra="forbid")
    frac: float = Field(gt=0, lt=1)
    params: dict[str, Any] = Field(default_factory=dict)


def curriculum_steps(stages: list[Stage], steps: int) -> list[dict[str, Any]]:
    """Stages in fractions of a run as `train.curriculum` of a run of `steps` steps: [{"until": step, "params"}]."""
    return [{"until": max(1, round(s.frac * steps)), "params": dict(s.params)} for s in stages]


class Recipe(BaseModel):
    """A named training recipe (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    description: str = ""
    overrides: dict[str, Any] = Field(default_factory=dict)
    by_task: dict[str, dict[str, Any]] = Field(default_factory=dict)  # extra overrides for one task
    curriculum: dict[str, list[Stage]] = Field(default_factory=dict)  # task name -> stages, fractions increasing
    ablation: bool = False  # True when the recipe changes the training loss (never a headline result)

    @field_validator("overrides")
    @classmethod
    def _keys(cls, v: dict[str, Any]) -> dict[str, Any]:
        _check_keys(v)
        return v

    @field_validator("by_task")
    @classmethod
    def _task_keys(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for over in v.values():
            _check_keys(over)
        return v

    @field_validator("curriculum")
    @classmethod
    def _increasing(cls, v: dict[str, list[Stage]]) -> dict[str, list[Stage]]:
        for task, stages in v.items():
            fr = [s.frac for s in stages]
            if fr != sorted(set(fr)):
                raise ValueError(f"{task}: stage fractions must be strictly increasing (got {fr})")
        return v

    @model_validator(mode="after")
    def _loss_is_ablation(self) -> Recipe:
        losses = [o["train.loss"] for o in (self.overrides, *self.by_task.values()) if "train.loss" in o]
        if any(loss not in SOFT_LOSSES for loss in losses) and not self.ablation:
            raise ValueError(
                "train.loss: a recipe that changes the paper's loss must be marked ablation: true (only "
                f"{', '.join(map(repr, SOFT_LOSSES))}, the exact posterior as target, is a recipe's own choice)"
            )
        return self

    def overrides_for(self, task: str, steps: int) -> dict[str, Any]:
        """The dotted overrides this recipe makes to a run of `task` with `steps` training steps."""
        out = {**self.overrides, **self.by_task.get(task, {})}
        stages = self.curriculum.get(task)
        if stages:
            out["train.curriculum"] = curriculum_steps(stages, steps)
        return out

    def check_training_only(self, task: str, steps: int, where: str) -> None:
        """A ValueError naming the first key this recipe sets for `task` beyond `TRAINING_KEYS` (`where` names the
        recipe in the message): a benchmark at a fixed budget must not have its budget or evaluation moved."""
        for key in self.overrides_for(task, steps):
            if key not in TRAINING_KEYS:
                raise ValueError(
                    f"{where}: {key}: a recipe here may set only the optimiser, schedule and curriculum "
                    f"({', '.join(TRAINING_KEYS)}); the budget, evaluation and model are the cell's own fields "
                    "(steps, batch_size, lr, warmup_steps, eval_every, eval_size, set.KEY=V)"
                )

    def apply(self, config: dict[str, Any]) -> dict[str, Any]:
        """A copy of a plain config dict (`suites.paper.run_config`) with this recipe applied."""
        task = config.get("task", {}).get("name", "bijection")
        steps = config.get("train", {}).get("steps", 1000)
        over = {**self.overrides, **self.by_task.get(task, {})}
        where = f"recipe {self.name!r}: train.steps" if "train.steps" in over else "config: train.steps"
        steps = _steps(over.get("train.steps", steps), where)
        return apply_overrides(config, self.overrides_for(task, steps))


def _check_keys(over: dict[str, Any]) -> None:
    for key in over:
        if not key.startswith(_ALLOWED_PREFIXES) or key in _FORBIDDEN:
            raise ValueError(
                f"{key}: a recipe may set train.* and model.* (size) keys only, not the task, the "
                "evaluation or the architecture"
            )
    if "train.steps" in over:
        _steps(over["train.steps"], "train.steps")


def _steps(value: Any, where: str) -> int:
    """A step count as an int: a whole number >= 0 (`.inf`, `1.5`, `"x"` are a ValueError naming `where`), read before
    the curriculum's fractions are turned into steps."""
    whole = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value) and value.is_integer())
    if isinstance(value, bool) or not whole or value < 0:
        raise ValueError(f"{where}: expected a whole number of steps >= 0, got {value!r}")
    return int(value)


def parse_recipe(data: dict[str, Any]) -> Recipe:
    """Validate a recipe mapping; ValueError names each bad field."""
    try:
        return Recipe.model_validate(data)
    except ValidationError as err:
        raise ValueError(f"recipe: {error_message(err, model=Recipe)}") from None


# The registered recipes. "baseline" is each tier's own settings; the others change one thing at a time on top of
# it, so the time-to-Bayes benchmark compares them cell by cell.
RECIPES = Registry("recipe", holds=Recipe)
for _recipe in (
    Recipe(name="baseline", description="the tier's settings: AdamW, linear warmup then cosine to 0"),
    Recipe(
        name="wsd",
        description="warmup-stable-decay: constant lr, linear cooldown over the last 20% of steps",
        overrides={"train.schedule": "wsd", "train.cooldown_frac": 0.2},
    ),
    Recipe(
        name="muon",
        description="wsd with Muon on the hidden matrices, block by block (AdamW for the rest)",
        overrides={"train.schedule": "wsd", "train.cooldown_frac": 0.2, "train.optimizer": "muon"},
    ),
    Recipe(
        name="soft",
        description="wsd with soft targets: the exact posterior as the training target (cross-entropy against it; "
        "for regression the closed-form Gaussian KL)",
        overrides={"train.schedule": "wsd", "train.cooldown_frac": 0.2, "train.loss": "posterior"},
    ),
    Recipe(
        name="soft-muon",
        description="soft targets and Muon on the hidden matrices together: the quick and standard tiers' recipe "
        "(each lever measured alone: docs/results/time-to-bayes.md)",
        overrides={
            "train.schedule": "wsd",
            "train.cooldown_frac": 0.2,
            "train.loss": "posterior",
            "train.optimizer": "muon",
        },
    ),
    Recipe(
        name="curriculum",
        description="wsd with a length curriculum: short HMMs / few points first (not yet measured)",
        overrides={"train.schedule": "wsd", "train.cooldown_frac": 0.2},
        curriculum={
            "hmm": [Stage(frac=0.1, params={"K": 5}), Stage(frac=0.25, params={"K": 10})],
            "regression": [Stage(frac=0.1, params={"n": 8}), Stage(frac=0.25, params={"n": 16})],
        },
    ),
):
    RECIPES.register(_recipe.name, _recipe)


def get_recipe(name_or_path: str | Path) -> Recipe:
    """A registered recipe by name, or one read from a YAML/JSON file (its `name` defaults to the file stem)."""
    key = str(name_or_path)
    if key in RECIPES:
        return RECIPES.get(key)
    p = Path(key)
    if p.suffix in (".yaml", ".yml", ".json") and p.is_file():
        try:
            return parse_recipe({"name": p.stem, **read_file(p)})
        except ValueError as err:
            raise ValueError(f"{p}: {err}") from None  # name the file as well as the field
    names = RECIPES.names()
    raise ValueError(
        f"recipe: {key!r} is neither a registered recipe ({', '.join(names)}) nor a YAML/JSON file"
        f"{did_you_mean(key, names)}"
    )


__all__ = ["RECIPES", "SOFT_LOSSES", "TRAINING_KEYS", "Recipe", "Stage", "get_recipe", "parse_recipe"]
