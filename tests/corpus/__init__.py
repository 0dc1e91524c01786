"""Corpus tests: each module's EXPECTED maps a corpus file to the statuses its checks reach."""

from __future__ import annotations

from preflight import registry
from preflight.analyze import analyze
from preflight.model import Result
from tests.conftest import corpus_file


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


def assert_expected(rel: str, got: dict[str, Result], expected: dict[str, str]) -> None:
    """Every expected check graded with the expected status; non-pass ones explain themselves."""
    for check, status in expected.items():
        assert check in got, f"{rel}: {check} did not grade (got {sorted(got)})"
        r = got[check]
        assert r.status.value == status, f"{rel}: {check} {r.status.value}: {r.summary} {r.evidence}"
        if status != "pass":
            assert r.summary and r.evidence, r
