"""Training cut off by a signal: a tiny run's config (`signal_cfg`) and a callback that sends this process a signal at
a given step (`SignalAt`)."""

from __future__ import annotations

import os
import signal

from tiny_runs import smoke_config
from windtunnel.training import tracking


def signal_cfg(**extra):
    """A smoke bijection run of 8 steps without periodic evaluations or checkpoints; `extra` (dotted keys) on top."""
    o = {"task.name": "bijection", "task.V": 5, "task.L": 4, "train.steps": 8, "train.batch_size": 4}
    o |= {"train.eval_every": 0, "train.checkpoint_every": 0, "train.warmup_steps": 2, "eval.n": 8}
    return smoke_config(**{**o, **extra})


class SignalAt(tracking.Callback):
    """Sends this process `sig` (`times` times) when the training line of `step` is written."""

    def __init__(self, step: int, sig: int = signal.SIGINT, times: int = 1) -> None:
        self.step, self.sig, self.times = step, sig, times

    def on_step(self, step: int, record: dict) -> None:
        if step == self.step:
            for _ in range(self.times):
                os.kill(os.getpid(), self.sig)
