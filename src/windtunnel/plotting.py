"""Figures without pyplot: no backend switched at import time, no global figure registry to leak, atomic PNGs.

fig, axes = subplots(1, 3, figsize=(9, 3), squeeze=False)
...
save(fig, "figures/x.png", bbox_inches="tight")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def subplots(nrows: int = 1, ncols: int = 1, figsize: tuple[float, float] | None = None, **kw: Any) -> tuple[Any, Any]:
    """A matplotlib `Figure` and its axes (`Figure.subplots` arguments), drawn by the Agg canvas when saved."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, **kw)


def save(fig: Any, path: str | Path, dpi: int = 110, **kw: Any) -> Path:
    """Write `fig` as a PNG at `path` through a temporary file, so a reader never sees half an image."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=dpi, **kw)
    tmp.replace(path)
    return path
