"""A run's predictor and task, built from its config, and `load_run`: a run directory opened for reading.

Opening a run never imports code: an import-string architecture in its config is built only with `trust_code=True`.
File names and file I/O: `windtunnel.rundir`; checkpoints: `windtunnel.checkpoints`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from torch import nn

from windtunnel import models, plugins, tasks
from windtunnel.checkpoints import latest_step, list_checkpoints, load_checkpoint
from windtunnel.config import RunConfig
from windtunnel.errors import CheckpointError
from windtunnel.models.baselines import is_baseline
from windtunnel.rundir import CONFIG, EVAL, check_run_dir, read_config, read_json_object, read_metrics
from windtunnel.tasks.base import TaskSpec


def build_task(cfg: RunConfig) -> Any:
    """The run's wind tunnel at its resolved parameters."""
    return tasks.make(cfg.task.name, **cfg.task.params)


def build_model(
    cfg: RunConfig,
    spec: TaskSpec,
    task: Any = None,
    *,
    trust_code: bool = False,
    exclude: tuple[str | Path, ...] = (),
    check: bool = True,
) -> nn.Module:
    """The run's predictor, freshly initialised (seeded by cfg.seed): an architecture or a baseline, built from its
    typed size (`model.size` with `model.max_len` and `model.reserved_positions`). check: refuse a model that sees
    the future (`models.check_causal`, CausalityError) -- before anything trains, plugins included.

    trust_code: allow `model.arch` to be an import string (importing runs code; see `models.resolve`), never from
    the current directory or the directories in `exclude`.
    """
    factory = models.resolve(cfg.model.arch, trust_code=trust_code, exclude=exclude)
    reserved = {"reserved_positions": cfg.model.reserved_positions} if cfg.model.reserved_positions else {}
    size = factory.Size.of({"max_len": cfg.model.max_len, **reserved, **cfg.model.size}, where="model.size.")
    torch.manual_seed(cfg.seed)
    model = factory(spec, size, task=task) if is_baseline(factory) else factory(spec, size)
    return models.check_causal(model, spec, name=f"model.arch: {cfg.model.arch!r}") if check else model


def check_finite_weights(model: nn.Module, where: str) -> None:
    """A CheckpointError naming `where` and the first parameter or buffer of `model` holding NaN or inf: weights that
    pass their checksums may still have been written after a run diverged, and would score a finite number."""
    for name, value in model.state_dict().items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            what = "NaN" if bool(torch.isnan(value).any()) else "inf"
            raise CheckpointError(f"{where}: weight {name!r} holds {what} values; the model cannot be evaluated")


@dataclass
class Run:
    """A run directory opened for reading: config, task, model (latest weights, eval mode), metrics, eval.

    trust_code: whether an import-string architecture in the config may be imported to build the model.
    """

    path: Path
    config: RunConfig
    trust_code: bool = False

    @cached_property
    def task(self) -> Any:
        return build_task(self.config)

    @cached_property
    def model(self) -> nn.Module:
        """The predictor with the latest checkpoint's weights (baselines need none), in eval mode."""
        step = latest_step(self.path)
        if step is None:
            m = build_model(
                self.config,
                self.task.spec,
                self.task,
                trust_code=self.trust_code,
                exclude=(self.path, self.path.parent),
            )
            if not is_baseline(m):
                raise CheckpointError(f"{self.path}: the run has no checkpoint yet")
            return m.eval()
        return self.load_checkpoint(step)

    def load_checkpoint(self, step: int) -> nn.Module:
        """A fresh model with the weights of checkpoint `step`, in eval mode."""
        m = build_model(
            self.config,
            self.task.spec,
            self.task,
            trust_code=self.trust_code,
            exclude=(self.path, self.path.parent),
            check=False,  # checked below, with the weights it is evaluated with
        )
        if not is_baseline(m):
            load_checkpoint(self.path, step, m)
            check_finite_weights(m, f"{self.path}: checkpoint of step {step}")
        where = f"{self.path}: model.arch {self.config.model.arch!r} at step {step}"
        return models.check_causal(m, self.task.spec, name=where).eval()

    def checkpoints(self) -> list[int]:
        return list_checkpoints(self.path)

    def metrics(self) -> list[dict]:
        return read_metrics(self.path)

    def eval(self) -> dict:
        p = self.path / EVAL
        return read_json_object(p) if p.exists() else {}


def load_run(run_dir: str | Path, *, trust_code: bool = False) -> Run:
    """Open a run directory for reading (error if it has no config.json). Importing nothing: an import-string
    architecture is only built when `trust_code=True`, and the modules its config records (`imports`) must be
    imported already (`--import`) or are imported from an installed package with `trust_code=True`
    (windtunnel.plugins)."""
    p = check_run_dir(run_dir)  # "does not exist" / "is a file" / "is not a run directory (no config.json)"
    cfg = read_config(p)
    # the modules it records: imported already (--import), or from an installed package with trust_code
    plugins.require(cfg.imports, trust_code=trust_code, exclude=(p, p.parent), where=str(p / CONFIG))
    return Run(path=p, config=cfg, trust_code=trust_code)
