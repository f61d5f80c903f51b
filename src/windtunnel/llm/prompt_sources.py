"""The prompts `llm-geometry` reads: the built-in exact-posterior prompts (`windtunnel.llm.prompts`), taken
round-robin over their cells, or a prompts file (one prompt a line, or .jsonl)."""

from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path
from typing import Any

N_DEFAULT, N_MIN, N_MAX = 128, 4, 100_000
PROMPT_FIELDS = ("text", "choices", "posterior", "family", "position")


def check_n(n: int | None) -> None:
    if n is not None and not N_MIN <= int(n) <= N_MAX:
        raise ValueError(f"--n: the number of prompts must be in [{N_MIN}, {N_MAX}] (got {n})")


def read_prompts(path: str | Path) -> list[Any]:
    """The prompts of a file: a `.jsonl` or `.json` file has one JSON value a line (a string, or an object with a
    string "text"; an object with "choices" and "posterior" too is an exact-posterior prompt, scored); any other
    file has one prompt a line. Blank lines are skipped. Returns strings and dicts, in order."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"--prompts: {str(p)!r} " + ("is not a file" if p.exists() else "does not exist"))
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise ValueError(f"--prompts: {str(p)!r} is not UTF-8 text ({err.reason} at byte {err.start})") from None
    jsonl = p.suffix.lower() in (".jsonl", ".json")
    out: list[Any] = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if not jsonl:
            out.append(line)
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(
                f"--prompts: {p}:{i}: not JSON ({err.msg}); a .jsonl file has one JSON value a line"
            ) from None
        if isinstance(rec, str) or (isinstance(rec, dict) and isinstance(rec.get("text"), str)):
            out.append(rec)
        else:
            raise ValueError(f"--prompts: {p}:{i}: expected a string or an object with a string 'text'")
    if not out:
        raise ValueError(f"--prompts: {str(p)!r} holds no prompt")
    return out


def _prompts_module() -> Any | None:
    """windtunnel.llm.prompts, or None where this installation has none."""
    try:
        return importlib.import_module("windtunnel.llm.prompts")
    except ModuleNotFoundError as err:
        if err.name in ("windtunnel.llm.prompts",):
            return None
        raise


def _as_prompt(mod: Any, rec: dict[str, Any], where: str) -> Any:
    """An exact-posterior `Prompt` from a JSONL object that has choices and a posterior; a plain dict else."""
    if mod is None or "choices" not in rec or "posterior" not in rec:
        return rec
    cls = mod.Prompt
    names = [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else list(PROMPT_FIELDS)
    try:
        return cls(**{k: rec[k] for k in names if k in rec})
    except (TypeError, ValueError) as err:
        raise ValueError(f"--prompts: {where}: not an exact-posterior prompt ({err})") from None


def builtin_subset(mod: Any, n: int, seed: int) -> list[Any]:
    """`n` of the built-in prompts, taken round-robin over their (family, position) cells (the first prompt of each
    cell, then the second of each, ...), so that every cell is read once before any is read twice."""
    cells = len({(x.family, x.position) for x in mod.builtin_prompts(1, seed)})
    by_cell: dict[tuple[str, int], list[Any]] = {}
    for x in mod.builtin_prompts(-(-int(n) // cells), seed):  # ceil(n / cells) per cell
        by_cell.setdefault((x.family, x.position), []).append(x)
    rounds = max(len(v) for v in by_cell.values())
    picked = [v[i] for i in range(rounds) for v in by_cell.values() if i < len(v)]
    return picked[: int(n)]


def resolve_prompts(prompts: str | Path | None, n: int | None, seed: int) -> tuple[list[Any], dict[str, Any]]:
    """The prompts to read (strings, dicts or `Prompt`s) and where they come from: the built-in exact-posterior
    prompts (`builtin_prompts(n, seed)`), or a file's (`read_prompts`; its first n where n is given)."""
    mod = _prompts_module()
    if prompts is None:
        if mod is None:
            raise ValueError(
                "--prompts: the built-in prompts (windtunnel.llm.prompts) are not in this installation; give --prompts"
                " FILE (one prompt a line, or .jsonl)"
            )
        count = N_DEFAULT if n is None else int(n)
        return builtin_subset(mod, count, seed), {"source": "builtin", "n": count, "seed": int(seed)}
    path = Path(prompts)
    recs = read_prompts(path)
    if n is not None:
        recs = recs[: int(n)]
    if len(recs) < N_MIN:
        raise ValueError(f"--prompts: {str(path)!r} holds {len(recs)} prompt(s); need at least {N_MIN}")
    items = [_as_prompt(mod, r, f"{path} prompt {i + 1}") if isinstance(r, dict) else r for i, r in enumerate(recs)]
    return items, {"source": str(path.resolve()), "n": len(items), "n_in_file": len(read_prompts(path))}


def _text(item: Any) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, dict):
        return str(item["text"])
    return str(item.text)


def _is_scorable(item: Any) -> bool:
    return not isinstance(item, (str, dict))
