"""Figures without pyplot: no backend switched at import time, no global figure registry to leak, atomic PNGs.

fig, axes = subplots(1, 3, figsize=(9, 3), squeeze=False)
...
save(fig, "figures/x.png", bbox_inches="tight")
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def subplots(nrows: int = 1, ncols: int = 1, figsize: tuple[float, float] | None = None, **kw: Any) -> tuple[Any, Any]:
    """A matplotlib `Figure` and its axes (`Figure.subplots` arguments), drawn by the Agg canvas when saved."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, **kw)


def save(fig: Any, path: str | Path, dpi: int = 110, **kw: Any) -> Path:
    """Write `fig` as a PNG at `path` through a temporary file, so a reader never sees half an image; a symbolic link
    planted at either name is never written through (O_NOFOLLOW: an OSError naming it; the rename replaces a link)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.png")
    with os.fdopen(
        os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o666), "wb"
    ) as f:
        fig.savefig(f, dpi=dpi, format="png", **kw)
    tmp.replace(path)
    return path
