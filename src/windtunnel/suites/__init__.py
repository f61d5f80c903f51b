"""Suites: plain Python lists of run configs (see `windtunnel.suites.paper`)."""

from windtunnel.suites.paper import ARCHS, TASKS, TIERS, SuiteRun, deviations, more_seeds, run_config, suite

__all__ = ["ARCHS", "TASKS", "TIERS", "SuiteRun", "deviations", "more_seeds", "run_config", "suite"]
