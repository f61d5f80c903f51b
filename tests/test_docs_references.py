"""Every code name the README and docs/ point a reader to (`tables.below_floor`, `marks.verdict`,
`time_to_bayes.Cell.seeds`) exists: a renamed or deleted function fails here rather than leave a page that sends a
reader nowhere."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import windtunnel
from windtunnel.config import RunConfig

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]  # docs/results are measurements, not guides
FILE_SUFFIXES = {"json", "jsonl", "md", "html", "png", "py", "csv", "yaml", "txt", "pt", "safetensors"}
REF = re.compile(r"`([a-z_][a-z_0-9]*(?:\.[A-Za-z_][A-Za-z_0-9]*)+)(?:\([^`]*\))?`")
HOOK_TABLE = (ROOT / "docs" / "hooks.md").read_text()


def _modules() -> dict[str, list[str]]:
    """windtunnel's modules by their last name ("tables" -> ["windtunnel.report.tables"])."""
    out: dict[str, list[str]] = {"windtunnel": ["windtunnel"]}
    for m in pkgutil.walk_packages(windtunnel.__path__, "windtunnel."):
        out.setdefault(m.name.rsplit(".", 1)[-1], []).append(m.name)
    return out


MODULES = _modules()


def _has(obj: object, name: str) -> object | None:
    """`obj.name`, also a pydantic field or an attribute a class sets in its own code (`self.name`); None if none."""
    if hasattr(obj, name):
        return getattr(obj, name)
    if inspect.ismodule(obj):
        try:
            return importlib.import_module(f"{obj.__name__}.{name}")
        except ImportError:
            return None
    if inspect.isclass(obj):
        if name in getattr(obj, "model_fields", {}):
            return name
        if re.search(rf"\bself\.{name}\b", inspect.getsource(obj)) or f'"{name}"' in inspect.getsource(obj):
            return name
    return None


def resolves(ref: str) -> bool:
    """Whether `ref` names something: a module found by its last name (or `windtunnel` itself), then submodules and
    attributes from there."""
    parts = ref.split(".")
    starts = [(m, parts[1:]) for m in MODULES[parts[0]]]
    for module, rest in starts:
        try:
            obj: object = importlib.import_module(module)
        except ImportError:
            continue
        for name in rest:
            found = _has(obj, name)
            if found is None:
                break
            obj = found
        else:
            return True
    return False


def references() -> list[tuple[str, str]]:
    """(page, name) for each backticked dotted name whose first part is a windtunnel module, less config keys
    (`train.lr`), file names (`eval.json`) and hook points (`lstm.c`: docs/hooks.md lists `blocks.{l}.lstm.c`)."""
    sections = set(RunConfig.model_fields)
    found = set()
    for page in PAGES:
        for ref in REF.findall(page.read_text()):
            first, last = ref.split(".")[0], ref.rsplit(".", 1)[-1]
            if first in sections or first not in MODULES or last in FILE_SUFFIXES:
                continue
            if f"blocks.{{l}}.{ref}" in HOOK_TABLE:
                continue
            found.add((page.relative_to(ROOT).as_posix(), ref))
    return sorted(found)


def test_there_are_references_to_check():
    assert len(references()) > 100


@pytest.mark.parametrize("page, ref", references())
def test_every_code_name_a_page_gives_exists(page, ref):
    assert resolves(ref), f"{page} names `{ref}`, which windtunnel does not have"


def test_the_checker_catches_a_missing_name():
    assert resolves("marks.verdict") and resolves("report.tables.below_floor")
    assert not resolves("tables.below_stored_chance") and not resolves("marks.no_such_function")
