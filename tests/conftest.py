"""Shared test helpers: the registry, fixtures folder, corpus folder, fake tools."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
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


# ---- processes a test leaves behind ---------------------------------------------------------
# Every process this session starts inherits PREFLIGHT_TEST_SESSION=<id> (what sshd starts in a
# test node is tied by the node's namespace or the session's temporary folder instead, see
# tests/leaks.py). After each test module and at the end of the session, a process of this
# session that is still alive fails the run, named with the test that likely started it, and
# is ended so that it cannot disturb what follows.
from tests import leaks  # noqa: E402

SESSION = uuid.uuid4().hex
os.environ[leaks.MARK] = SESSION
_STARTED: list[tuple[float, int, str]] = []  # (boot ticks, last pid, test id) as each test starts
_SESSION_BEFORE: set[tuple[int, int]] = set()
_SESSION_LEAKS: list[str] = []


def _session_tmp(config: pytest.Config) -> str | None:
    factory = getattr(config, "_tmp_path_factory", None)
    try:
        return str(factory.getbasetemp()) if factory is not None else None
    except OSError:
        return None


def _report_and_end(found: list[leaks.Leak], where: str) -> str:
    text = (f"{len(found)} process(es) started by the tests outlived {where}:\n"
            f"{leaks.describe(found, _STARTED)}")
    left = leaks.end([lk.pid for lk in found], grace=1.0)
    if left:
        text += f"\n  still alive after SIGKILL: {left}"
    return text


def pytest_sessionstart(session: pytest.Session) -> None:
    _SESSION_BEFORE.update(leaks.snapshot())


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    _STARTED.append((leaks.boot_ticks(), leaks.last_pid(), nodeid))


@pytest.fixture(scope="module", autouse=True)
def _no_process_outlives_its_module(request: pytest.FixtureRequest) -> Iterator[None]:
    before = leaks.snapshot()
    yield
    found = leaks.settle(before, SESSION, _session_tmp(request.config))
    if found:
        pytest.fail(_report_and_end(found, f"their module {request.node.nodeid}"), pytrace=False)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    found = leaks.settle(_SESSION_BEFORE, SESSION, _session_tmp(session.config))
    if found:
        _SESSION_LEAKS.append(_report_and_end(found, "the test session"))
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for text in _SESSION_LEAKS:
        terminalreporter.write_sep("=", "processes left behind", red=True)
        terminalreporter.write_line(text)


@pytest.fixture(autouse=True)
def _builtin_policy() -> object:
    """Each test starts and ends with the built-in severity table: a command run in-process
    installs its config's policy for the rest of the process, as a CLI process would."""
    from preflight import policy

    policy.use(None)
    yield
    policy.use(None)


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
    """Grade one check on captures, through the one grading function (as run would)."""
    from preflight.grading import FactStore, grade_check

    r = reg.load()
    check = r.checks[check_id]
    opts = Options(mode=mode, extra=dict(extra))
    if "peers" in extra:
        opts.peers = [str(p) for p in extra["peers"]]  # type: ignore[attr-defined]
    prof = load_profile(profile)
    return grade_check(check, "node1", FactStore(r, captures=captures), prof, opts, None)


def grade_text(check_id: str, inputs: dict[str, str], profile: str = "generic", **extra: object) -> list:
    """Grade one check on pasted text per probe, framed as analyze frames it (prompts, prefixes)."""
    from preflight.framing import frame
    from preflight.grading import FactStore, grade_check

    r = reg.load()
    docs = {probe: frame(text, origin=f"fixture:{probe}").docs for probe, text in inputs.items()}
    opts = Options(mode="analyze", extra=dict(extra))
    return grade_check(r.checks[check_id], "node1", FactStore(r, docs=docs), load_profile(profile), opts, None)


def facts_of(probe: str, text: str) -> object:
    """The facts the registered parser of `probe` reads from `text` (framed as analyze does)."""
    from preflight.framing import Doc, frame

    docs = frame(text).docs
    doc = docs[0] if len(docs) == 1 else Doc.join(docs)
    parse = reg.load().parser_for(probe)
    assert parse is not None, f"no parser registered for {probe}"
    return parse(doc)


def analyze_text(text: str, name: str = "capture.txt", profile: str = "auto", tmp: Path | None = None) -> list:
    """`preflight analyze` over one pasted file (written to a temporary folder)."""
    import tempfile

    from preflight.analyze import analyze

    with tempfile.TemporaryDirectory() as d:
        p = Path(tmp or d) / name
        p.write_text(text, encoding="utf-8")
        return analyze(reg.load(), [p], profile_name=profile)


__all__ = ["CheckContext", "capture", "corpus_file", "facts_of", "fixture_text", "grade", "grade_text",
           "analyze_text", "need", "CORPUS", "FIXTURES"]
