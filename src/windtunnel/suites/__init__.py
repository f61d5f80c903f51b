"""Suites: plain Python lists of run configs (see `windtunnel.suites.paper`)."""

from windtunnel.suites.paper import (
    ARCHS,
    TASKS,
    TIER_CAVEATS,
    TIERS,
    SuiteRun,
    deviations,
    earlier_seeds,
    more_seeds,
    run_config,
    suite,
)

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
]
