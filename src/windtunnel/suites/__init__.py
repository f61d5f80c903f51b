"""Suites: plain Python lists of run configs (see `windtunnel.suites.paper`)."""

from windtunnel.suites.paper import (
    ARCHS,
    TASKS,
    TIER_CAVEATS,
    TIERS,
    SuiteRun,
    earlier_seeds,
    more_seeds,
    run_config,
    suite,
    tier_tasks,
)
from windtunnel.suites.paper_diff import deviations

__all__ = [
    "ARCHS",
    "TASKS",
    "TIER_CAVEATS",
    "TIERS",
    "SuiteRun",
    "deviations",
    "earlier_seeds",
    "more_seeds",
    "run_config",
    "suite",
    "tier_tasks",
]
