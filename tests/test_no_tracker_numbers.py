"""The code, tests and docs speak for themselves: no number of a tracker that is not in the repository (the word
for an issue followed by its number) in src/, tests/, docs/, benchmarks/ or the README."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACKER = re.compile(r"\b" + "issue" + r"s? #?\d+", re.IGNORECASE)
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".html"}


def _files() -> list[Path]:
    roots = [ROOT / "src" / "windtunnel", ROOT / "tests", ROOT / "docs", ROOT / "benchmarks"]
    found = [p for r in roots if r.is_dir() for p in r.rglob("*") if p.suffix in SUFFIXES and p.is_file()]
    return [*found, ROOT / "README.md"]


def test_no_tracker_numbers_in_code_tests_or_docs():
    hits = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()[:100]}"
        for p in _files()
        if "/runs/" not in p.as_posix()  # recorded run files say what their tools printed
        for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if TRACKER.search(line)
    ]
    assert hits == [], "\n".join(hits)


def test_the_check_finds_a_tracker_number():
    word = "is" + "sue"  # spelt apart, so this file passes its own check
    assert TRACKER.search(f"fixed in {word.title()} 38") and TRACKER.search(f"{word}s 3 and 4")
    assert TRACKER.search(f"{word} #7")
    assert not TRACKER.search("an issue with 3 seeds") and not TRACKER.search("tissue 5")
