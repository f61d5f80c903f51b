"""Checks on what a CLI command leaves: its single `error: ...` line (`error_line`) and every entry of a folder, to
compare before and after (`snapshot`)."""

from __future__ import annotations

import os
from pathlib import Path


def error_line(r, code: int) -> str:
    """The single `error: ...` line of a CLI result that exited with `code` (no traceback)."""
    assert r.exit_code == code, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    return lines[0]


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every entry under `root`: a file's bytes, a link's target, a folder as "dir"."""
    out: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        key = str(p.relative_to(root))
        out[key] = f"-> {os.readlink(p)}" if p.is_symlink() else "dir" if p.is_dir() else p.read_bytes()
    return out
