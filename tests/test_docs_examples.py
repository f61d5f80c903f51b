"""Every Python block of docs/*.md runs, in order, one namespace per page, in a fresh working directory (the docs
cannot rot). An HTML comment right above a block prepares it as a reader would: `<!-- docs test: file NAME -->`
saves the block as NAME there and imports it (the module a page tells you to write); `<!-- docs test: first
windtunnel ARGS -->` runs that command there first (the run a page reads)."""

from __future__ import annotations

import importlib
import re
import shlex
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from windtunnel import models, tasks
from windtunnel.geometry import registry as geometry_registry

DOCS = Path(__file__).resolve().parents[1] / "docs"
BLOCK = re.compile(r"(?:<!-- docs test: (?P<kind>file|first) (?P<arg>.+?) -->\n)?```python\n(?P<code>.*?)```", re.S)
PAGES = sorted(p for p in DOCS.glob("*.md") if "```python" in p.read_text())


def test_every_page_with_code_is_run():
    assert {p.name for p in PAGES} >= {"hooks.md", "models.md", "own-model.md", "tasks.md", "training.md"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_python_blocks_of_a_page_run(page, tmp_path, monkeypatch):
    from windtunnel.cli import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    known_tasks, known_models, known_modules = set(tasks.names()), set(models.names()), set(sys.modules)
    known_probes = {p.name for p in geometry_registry.probes()}
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    try:
        for block in BLOCK.finditer(page.read_text()):
            if block["kind"] == "file":  # saved and imported, as the reader does; its names join the namespace
                (tmp_path / block["arg"]).write_text(block["code"])
                namespace.update(vars(importlib.import_module(Path(block["arg"]).stem)))
                continue
            if block["kind"] == "first":
                args = shlex.split(block["arg"])
                assert args[0] == "windtunnel", block["arg"]
                done = CliRunner().invoke(app, [*args[1:], "--no-progress"])
                assert done.exit_code == 0, done.output
            exec(compile(block["code"], str(page), "exec"), namespace)  # noqa: S102 - our own documentation
    finally:  # the pages register tasks, models and probes and write modules; leave everything as it was
        for name in {p.name for p in geometry_registry.probes()} - known_probes:
            geometry_registry.unregister_probe(name)
        for name in set(tasks.names()) - known_tasks:
            tasks.registry.unregister(name)
        for name in set(models.names()) - known_models:
            models.registry.unregister(name)
        for name in set(sys.modules) - known_modules:
            if getattr(sys.modules[name], "__file__", None) and str(tmp_path) in str(sys.modules[name].__file__):
                del sys.modules[name]
