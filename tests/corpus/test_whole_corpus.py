"""`preflight analyze` over the whole corpus, with opaque file names, reaches INDEX.md's conclusions.

Each family's corpus module declares EXPECTED = {relative path: {check: status}} (what an expert
concludes from the capture, per ../shared/corpus/INDEX.md; a status, or the set `either(...)` of the
statuses a row accepts) and may declare KNOWN_GAPS =
{relative path: reason} for an expectation the tool does not meet yet: such a file is a strict
xfail (it must keep failing until fixed, then the gap must be removed), never a weakened
expectation. Every file is copied as `cNN/cNN.<ext>` so that names give nothing away, and one
run of the real CLI grades them all.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tests.corpus as corpus_pkg
from tests.conftest import CORPUS
from tests.corpus import Expected, accepts, shown


def _modules() -> list:
    return [importlib.import_module(f"tests.corpus.{m.name}") for m in pkgutil.iter_modules(corpus_pkg.__path__)
            if m.name != "test_whole_corpus"]


def expectations() -> dict[str, dict[str, Expected]]:
    merged: dict[str, dict[str, Expected]] = {}
    for m in _modules():
        for rel, checks in getattr(m, "EXPECTED", {}).items():
            merged.setdefault(rel, {}).update(checks)
    return merged


def known_gaps() -> dict[str, str]:
    gaps: dict[str, str] = {}
    for m in _modules():
        gaps.update(getattr(m, "KNOWN_GAPS", {}))
    return gaps


def corpus_files() -> list[str]:
    if not CORPUS.is_dir():
        return []
    return sorted(str(f.relative_to(CORPUS)) for f in CORPUS.rglob("*") if f.is_file() and f.name != "INDEX.md")


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """{corpus rel path: {check: status}} from one analyze run over opaque copies."""
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus not present")
    root = tmp_path_factory.mktemp("opaque")
    names: dict[str, str] = {}
    for i, rel in enumerate(corpus_files()):
        ext = Path(rel).suffix or ".txt"
        opaque = root / f"c{i:02d}" / f"c{i:02d}{ext}"
        opaque.parent.mkdir()
        shutil.copyfile(CORPUS / rel, opaque)
        names[str(opaque)] = rel
    p = subprocess.run([sys.executable, "-m", "preflight.cli", "analyze", str(root), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert "Traceback" not in p.stderr, p.stderr
    doc = json.loads(p.stdout)
    by_file: dict[str, dict[str, str]] = {}
    for r in doc["results"]:
        for src in r["source"].split(", "):
            rel = names.get(src.split("!")[0])
            if rel:
                # a check whose finding only repeats another's cause is folded into it
                # (preflight.rootcause); its own conclusion is kept as own_status
                by_file.setdefault(rel, {})[r["check"]] = r["facts"].get("own_status", r["status"])
    return by_file


@pytest.mark.corpus
def test_every_corpus_file_has_an_expectation() -> None:
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus not present")
    expected = expectations()
    uncovered = [f for f in corpus_files() if f not in expected]
    assert not uncovered, f"corpus files with no expectation: {uncovered}"
    stale = [f for f in expected if f not in corpus_files()]
    assert not stale, f"expectations for files not in the corpus: {stale}"


def test_known_gaps_are_expected_files_with_a_reason() -> None:
    expected = expectations()
    for rel, why in known_gaps().items():
        assert rel in expected, f"known gap for a file with no expectation: {rel}"
        assert len(why.split()) >= 5, f"{rel}: a known gap says why the tool misses it ({why!r})"


@pytest.mark.corpus
@pytest.mark.parametrize("rel", sorted(expectations()) or ["(no corpus)"])
def test_corpus_file_conclusion(rel: str, graded: dict[str, dict[str, str]], request: pytest.FixtureRequest) -> None:
    gaps = known_gaps()
    if rel in gaps:
        request.applymarker(pytest.mark.xfail(reason=f"known gap: {gaps[rel]}", strict=True))
    got = graded.get(rel, {})
    wrong = [f"{check}: expected {shown(status)}, got {got.get(check)}" for check, status in expectations()[rel].items()
             if not accepts(status, got.get(check))]
    assert not wrong, f"{rel}: " + "; ".join(wrong) + f" (all results: {got})"
