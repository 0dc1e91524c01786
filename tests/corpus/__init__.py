"""Corpus tests: each module's EXPECTED maps a corpus file to the statuses its checks reach.

An expectation is one status ("fail"), or the set of statuses INDEX.md accepts for a row that
names two ("WARN, FAIL tolerated", "PASS or SKIP"): `either("warn", "fail")`. A module's
KNOWN_GAPS maps a file to the reason the tool does not reach the expected conclusion yet: its
tests are strict xfails (they must keep failing until the gap is fixed, then the gap goes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from preflight import registry
from preflight.analyze import analyze
from preflight.model import Result
from tests.conftest import corpus_file

Expected = str | frozenset[str]


def either(*statuses: str) -> frozenset[str]:
    """The statuses a row accepts ("WARN, FAIL tolerated" -> either("warn", "fail"))."""
    assert len(statuses) > 1 and set(statuses) <= {"pass", "warn", "fail", "skip", "error"}, statuses
    return frozenset(statuses)


def accepts(expected: Expected, status: str | None) -> bool:
    return status in expected if isinstance(expected, frozenset) else status == expected


def shown(expected: Expected) -> str:
    return "|".join(sorted(expected)) if isinstance(expected, frozenset) else expected


def cases(expected: Mapping[str, Any], gaps: Mapping[str, str] | None = None) -> list[Any]:
    """The parameters of a module's per-file test: every expected file, a known gap as a strict xfail."""
    gaps = gaps or {}
    return [pytest.param(rel, marks=pytest.mark.xfail(reason=f"known gap: {gaps[rel]}", strict=True))
            if rel in gaps else rel for rel in sorted(expected)]


def graded(rel: str, checks: tuple[str, ...], profile: str = "auto") -> dict[str, Result]:
    """analyze one corpus file; the results of `checks`, by check id (one result per check)."""
    res = analyze(registry.load(), [corpus_file(rel)], profile_name=profile)
    mine = [r for r in res if r.check in checks]
    assert len(mine) == len({r.check for r in mine}), [(r.check, r.summary) for r in res]
    return {r.check: r for r in mine}


def graded_one(rel: str, check: str, profile: str = "auto") -> Result:
    """The one result `check` gives for a corpus file."""
    got = graded(rel, (check,), profile)
    assert check in got, f"{rel}: {check} did not grade"
    return got[check]


def statuses(rel: str, checks: Mapping[str, Expected]) -> dict[str, str]:
    """{check: status} of the checks named, from analyze over one corpus file."""
    res = analyze(registry.load(), [corpus_file(rel)], profile_name="auto")
    return {r.check: r.status.value for r in res if r.check in checks}


def assert_statuses(rel: str, got: Mapping[str, str], expected: Mapping[str, Expected]) -> None:
    """Every expected check graded, each with a status its expectation accepts."""
    wrong = [f"{c}: expected {shown(s)}, got {got.get(c)}" for c, s in expected.items() if not accepts(s, got.get(c))]
    assert not wrong, f"{rel}: " + "; ".join(wrong) + f" (all: {dict(got)})"


def assert_expected(rel: str, got: dict[str, Result], expected: Mapping[str, Expected]) -> None:
    """Every expected check graded with an accepted status; non-pass ones explain themselves."""
    for check, status in expected.items():
        assert check in got, f"{rel}: {check} did not grade (got {sorted(got)})"
        r = got[check]
        assert accepts(status, r.status.value), f"{rel}: {check} {r.status.value}: {r.summary} {r.evidence}"
        if r.status.value != "pass":
            assert r.summary and r.evidence, r
