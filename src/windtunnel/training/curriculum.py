"""Curriculum sampler: which task a training step draws its batch from.

`train.curriculum` is a list of stages `{until: step, params: {...}}`; step s trains on the task with the first stage
whose `until >= s` applied on top of `task.params`, and on the full task after the last stage (e.g. short HMMs, few
recall pairs or less sticky chains first). A stage may change any parameter that leaves the model's shapes alone
(vocabulary, input width, answers: lengths, pairs, stickiness, emission clarity), and each must end before
`train.steps` so the run trains on the full task (both checked by `resolve.resolve_config`). The task of a step
depends on the step alone, so a resumed run samples exactly what an uninterrupted one would.
"""

from __future__ import annotations

import bisect
from typing import Any

from windtunnel import tasks
from windtunnel.config import RunConfig


class Curriculum:
    """`task_at(step)`: the task of training step `step` (1-based); stage tasks are built once."""

    def __init__(self, cfg: RunConfig, task: Any) -> None:
        base = task.params.model_dump(mode="json") if task.offers("params") else dict(cfg.task.params)
        self.ends = [st.until for st in cfg.train.curriculum]  # strictly increasing (validated)
        self.stages = [tasks.make(cfg.task.name, **{**base, **st.params}) for st in cfg.train.curriculum]
        self.task = task

    def task_at(self, step: int) -> Any:
        i = bisect.bisect_left(self.ends, step)
        return self.stages[i] if i < len(self.stages) else self.task

    def __len__(self) -> int:
        return len(self.stages)
