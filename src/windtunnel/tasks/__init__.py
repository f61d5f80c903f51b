"""Bayesian wind tunnels: tasks whose exact posterior is known at every position.

>>> from windtunnel import tasks
>>> task = tasks.make("bijection", V=20, L=19)
>>> batch = task.sample(64, seed=0)
"""

# Built-in tunnels register themselves on import.
from windtunnel.tasks import bijection, hmm, recall, regression  # noqa: E402, F401, I001
from windtunnel.tasks.adapter import TunnelAdapter, as_task
from windtunnel.tasks.base import Batch, Reference, Task, TaskParams, TaskSpec, WindTunnel, check_posterior
from windtunnel.tasks.registry import TunnelInfo, info, make, names, register

__all__ = [
    "Batch",
    "Reference",
    "Task",
    "TaskParams",
    "TaskSpec",
    "TunnelAdapter",
    "TunnelInfo",
    "WindTunnel",
    "as_task",
    "check_posterior",
    "info",
    "make",
    "names",
    "register",
]
