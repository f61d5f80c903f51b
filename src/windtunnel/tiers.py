"""Size tiers: the model sizes a preset names (`model.preset`: smoke, quick, paper; models/presets.py holds the
sizes). A suite tier (`reproduce --tier`, suites/paper.py) is a budget and a recipe as well as a size; the smoke,
quick and paper suites train at the size tier of the same name, the standard and transport suites at quick's."""

from __future__ import annotations

from typing import Literal, get_args

SizeTier = Literal["smoke", "quick", "paper"]
SIZE_TIERS: tuple[str, ...] = get_args(SizeTier)  # smallest first
