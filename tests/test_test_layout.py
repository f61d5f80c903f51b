"""The tests' own layout: no test file is imported by another; what several test files share lives in a helper
module of tests/ without the test_ prefix (cli_args.py, report_runs.py, ...) or, for a fixture, in conftest.py."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_test_modules(source: str) -> list[str]:
    """The test_* modules that `source` imports, every import included (those inside functions too)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [name for name in names if name.split(".")[0].startswith("test_")]
    return found


def test_no_file_of_tests_imports_a_test_module():
    offenders = {
        str(path.relative_to(TESTS)): imported
        for path in sorted(TESTS.rglob("*.py"))
        if (imported := imported_test_modules(path.read_text(encoding="utf-8")))
    }
    assert not offenders, f"move what these import into a helper module of tests/: {offenders}"


def test_the_checker_finds_every_form_of_import():
    source = "import test_a\nimport os, test_b.sub as b\nfrom test_c import x\n\ndef f():\n    from test_d import y\n"
    assert imported_test_modules(source) == ["test_a", "test_b.sub", "test_c", "test_d"]
    assert imported_test_modules("import os\nfrom tiny_runs import smoke_config\nfrom . import test_e\n") == []


def test_the_fast_lane_leaves_out_exactly_the_slow_marker():
    """`make test-fast` deselects the `slow` marker that pyproject declares; every `make X` the README names exists."""
    root = Path(__file__).resolve().parents[1]
    makefile = (root / "Makefile").read_text()
    fast = makefile.split("\ntest-fast:", 1)[1].split("\n\n", 1)[0]
    assert '-m "not slow"' in fast
    assert '"slow: ' in (root / "pyproject.toml").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, flags=re.M))
    named = set(re.findall(r"`make ([a-z-]+)`", (root / "README.md").read_text()))
    assert named and named <= targets, named - targets
