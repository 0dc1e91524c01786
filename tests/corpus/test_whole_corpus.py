"""`preflight analyze ../shared/corpus` reaches the corpus INDEX.md conclusion for every file.

Each family's corpus test module declares EXPECTED = {relative path: {check: status}}; this
test runs the real CLI once over the whole folder and checks every file's results, and that
every file of the corpus is covered by some expectation.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import tests.corpus as corpus_pkg
from tests.conftest import CORPUS


def expectations() -> dict[str, dict[str, str]]:
    merged: dict[str, dict[str, str]] = {}
    for mod in pkgutil.iter_modules(corpus_pkg.__path__):
        if mod.name == "test_whole_corpus":
            continue
        m = importlib.import_module(f"tests.corpus.{mod.name}")
        for rel, checks in getattr(m, "EXPECTED", {}).items():
            merged.setdefault(rel, {}).update(checks)
    return merged


@pytest.mark.corpus
def test_analyze_whole_corpus() -> None:
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus not present")
    p = subprocess.run([sys.executable, "-m", "preflight.cli", "analyze", str(CORPUS), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert "Traceback" not in p.stderr, p.stderr
    doc = json.loads(p.stdout)
    by_file: dict[str, dict[str, str]] = {}
    for r in doc["results"]:
        for src in r["source"].split(", "):
            if src:
                rel = str(Path(src).resolve().relative_to(CORPUS.resolve())) if src.startswith("/") else src
                by_file.setdefault(rel, {})[r["check"]] = r["status"]
    expected = expectations()
    files = sorted(str(f.relative_to(CORPUS)) for f in CORPUS.rglob("*") if f.is_file() and f.name != "INDEX.md")
    uncovered = [f for f in files if f not in expected]
    assert not uncovered, f"corpus files with no expectation: {uncovered}"
    wrong = []
    for rel, checks in sorted(expected.items()):
        got = by_file.get(rel, {})
        for check, status in checks.items():
            if got.get(check) != status:
                wrong.append(f"{rel}: {check} expected {status}, got {got.get(check)}")
    assert not wrong, "\n".join(wrong)
