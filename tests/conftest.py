"""Shared test helpers: the registry, fixtures folder, corpus folder, fake tools."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from preflight import registry as reg
from preflight.model import Capture, CaptureState
from preflight.profile import load as load_profile
from preflight.registry import CheckContext, Options

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
CORPUS = ROOT.parent / "shared" / "corpus"
IN_CI = os.environ.get("CI") == "true"
# Runs made by the tests are not recorded in the user's history store (tests that exercise
# the store pass their own --history URL or set the variable themselves).
os.environ.setdefault("PREFLIGHT_HISTORY", "off")


@pytest.fixture(scope="session")
def registry() -> reg.Registry:
    return reg.load()


def need(condition: bool, why: str) -> None:
    """Skip when a prerequisite is missing; in CI (CI=true) fail instead."""
    if not condition:
        if IN_CI:
            pytest.fail(f"prerequisite missing in CI: {why}")
        pytest.skip(why)


def corpus_file(rel: str) -> Path:
    """A file of ../shared/corpus; skips (even in CI) when the corpus is absent."""
    p = CORPUS / rel
    if not p.is_file():
        pytest.skip(f"corpus file {rel} not present")
    return p


def fixture_text(rel: str) -> str:
    return (FIXTURES / rel).read_text(encoding="utf-8")


def capture(probe: str, text: str, rc: int = 0, stderr: str = "", argv: list[str] | None = None) -> Capture:
    return Capture(probe=probe, argv=argv or [probe], state=CaptureState.OK, stdout=text, stderr=stderr, rc=rc,
                   source=f"fixture:{probe}")


def grade(check_id: str, captures: dict[str, Capture], profile: str = "generic", mode: str = "run",
          **extra: object) -> list:
    """Grade one check on captures, through the engine (as run/analyze would)."""
    from preflight import engine

    r = reg.load()
    check = r.checks[check_id]
    opts = Options(mode=mode, extra=dict(extra))
    if "peers" in extra:
        opts.peers = [str(p) for p in extra["peers"]]  # type: ignore[attr-defined]
    prof = load_profile(profile)
    return engine.grade_check(check, "node1", captures, prof, opts, None)


__all__ = ["CheckContext", "capture", "corpus_file", "fixture_text", "grade", "need", "CORPUS", "FIXTURES"]
