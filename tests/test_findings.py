"""Findings folded into one Result: worst status first, codes and their statuses from the
active policy, the evidence cap, remedies numbered, notes kept, a site's override said."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from preflight import policy
from preflight.findings import EVIDENCE_MAX, Findings, cap_evidence
from preflight.grading import FactStore
from preflight.model import Status
from preflight.profile import load as load_profile
from preflight.registry import CheckContext, Options, load


@pytest.fixture(autouse=True)
def table() -> Iterator[policy.Policy]:
    codes = {c: policy.Code(c, s, "m", "r", "s", "t.toml") for c, s in (
        ("t.x/warn-a", Status.WARN), ("t.x/warn-b", Status.WARN), ("t.x/fail-a", Status.FAIL),
        ("t.x/error-a", Status.ERROR), ("t.x/skip-a", Status.SKIP), ("t.x/note", Status.PASS))}
    pol = policy.Policy(codes)
    token = policy.use(pol)
    yield pol
    policy.reset(token)


def _ctx() -> CheckContext:
    reg = load()
    return CheckContext(check=reg.checks["gpu.xid"], node="n1", store=FactStore(reg), profile=load_profile("generic"),
                        options=Options())


def test_nothing_found_is_pass_with_the_ok_summary_and_the_notes() -> None:
    f = Findings()
    f.note("a note")
    f.note("a note")
    f.note("")
    f.add("t.x/note", "a finding whose status is pass")
    r = f.result(_ctx(), "all good", {"k": 1}, ok_evidence=["line 1", "a note"])
    assert r.status is Status.PASS and r.summary == "all good" and not f
    assert r.evidence == ["line 1", "a note", "a finding whose status is pass"]
    assert r.facts == {"k": 1} and r.remedy == ""
    assert f.status is Status.PASS and f.codes() == [] and f.passed == []


def test_the_worst_finding_leads_and_codes_are_worst_first() -> None:
    f = Findings()
    f.add("t.x/warn-a", "w1", ["ev w1", ""], "fix w1")
    f.add("t.x/fail-a", "f1", ["ev f1"], "fix f1")
    f.add("t.x/error-a", "e1", ["ev e1"], "")
    f.add("t.x/warn-b", "w2", ["ev w2"], "fix w1")
    f.add("t.x/skip-a", "s1", [], "")
    assert bool(f) and f.status is Status.FAIL
    assert f.codes() == ["t.x/fail-a", "t.x/error-a", "t.x/warn-a", "t.x/warn-b", "t.x/skip-a"]
    assert f.summaries(Status.WARN) == ["w1", "w2"] and f.summaries(Status.FAIL) == ["f1"]
    r = f.result(_ctx(), "ok")
    assert r.status is Status.FAIL
    assert r.summary == "f1; e1; w1 (+2 more)"
    assert r.evidence == ["ev f1", "ev e1", "ev w1", "ev w2"]
    assert r.remedy == "(1) fix f1 (2) fix w1"
    assert r.facts["problems"] == ["f1", "e1", "w1", "w2", "s1"]
    assert r.facts["codes"] == ["t.x/fail-a", "t.x/error-a", "t.x/warn-a", "t.x/warn-b", "t.x/skip-a"]
    assert "overrides" not in r.facts


def test_named_bounds_the_summary_and_one_remedy_is_not_numbered() -> None:
    f = Findings()
    f.add("t.x/warn-a", "w1", [], "fix it")
    f.add("t.x/warn-b", "w2", [], "fix it")
    r = f.result(_ctx(), "ok", named=2)
    assert r.status is Status.WARN and r.summary == "w1; w2" and r.remedy == "fix it"
    f.add("t.x/warn-b", "w3", [], "")
    r = f.result(_ctx(), "ok", named=2)
    assert r.summary == "w1; w2 (+1 more)"
    r = f.result(_ctx(), "ok", {"problems": ["given"]}, named=3)
    assert r.summary == "w1; w2; w3" and r.facts["problems"] == ["given"]


def test_the_legacy_status_form_has_no_code() -> None:
    f = Findings()
    f.add(Status.WARN, "old style")
    f.add(Status.PASS, "old note")
    assert [(x.status, x.code) for x in f.items] == [(Status.WARN, "")] and f.notes == ["old note"]
    assert f.codes() == [] and "codes" not in f.result(_ctx(), "ok").facts


def test_a_site_override_changes_the_status_and_says_so(table: policy.Policy) -> None:
    token = policy.use(table.with_overrides({"t.x/fail-a": "warn", "t.x/warn-a": "pass"}, "config file s.toml"))
    try:
        f = Findings()
        f.add("t.x/fail-a", "f1", ["ev"], "")
        f.add("t.x/warn-a", "w1 tolerated here", ["ev w"], "")
        r = f.result(_ctx(), "ok")
        assert r.status is Status.WARN and r.summary == "f1"
        assert f.passed == ["t.x/warn-a"] and "w1 tolerated here" in r.evidence
        assert r.facts["codes"] == ["t.x/fail-a"]
        assert r.facts["overrides"] == {"t.x/fail-a": "fail -> warn (config file s.toml)",
                                        "t.x/warn-a": "warn -> pass (config file s.toml)"}
        assert "site policy: t.x/fail-a is WARN here (table: FAIL; config file s.toml)" in r.evidence
        g = Findings()
        g.add("t.x/warn-a", "only a tolerated one")
        ok = g.result(_ctx(), "fine")
        assert ok.status is Status.PASS and ok.facts["overrides"] == {"t.x/warn-a": "warn -> pass (config file s.toml)"}
        assert ok.evidence == ["only a tolerated one",
                               "site policy: t.x/warn-a is PASS here (table: WARN; config file s.toml)"]
    finally:
        policy.reset(token)


def test_a_finding_result_takes_its_status_from_the_code(table: policy.Policy) -> None:
    ctx = _ctx()
    r = ctx.finding("t.x/error-a", "it broke", ["e1"], "do this", {"k": 2})
    assert (r.status, r.summary, r.evidence, r.remedy) == (Status.ERROR, "it broke", ["e1"], "do this")
    assert r.facts == {"k": 2, "codes": ["t.x/error-a"]} and r.check == "gpu.xid"
    token = policy.use(table.with_overrides({"t.x/error-a": "pass"}, "cfg"))
    try:
        r = ctx.finding("t.x/error-a", "it broke", ["e1"])
        assert r.status is Status.PASS and "codes" not in r.facts
        assert r.facts["overrides"] == {"t.x/error-a": "error -> pass (cfg)"}
        assert r.evidence == ["e1", "site policy: t.x/error-a is PASS here (table: ERROR; cfg)"]
    finally:
        policy.reset(token)


def test_evidence_is_capped_once_each_with_a_count() -> None:
    lines = [f"l{i}" for i in range(30)]
    assert cap_evidence(lines[:EVIDENCE_MAX]) == lines[:EVIDENCE_MAX]
    capped = cap_evidence(lines + ["l0", ""])
    assert len(capped) == EVIDENCE_MAX and capped[-1] == f"... {30 - EVIDENCE_MAX + 1} more evidence lines"
    assert capped[:-1] == lines[:EVIDENCE_MAX - 1]
    assert cap_evidence(["a", "b", "c"], limit=2) == ["a", "... 2 more evidence lines"]
    assert cap_evidence(["a", "a", "b"], limit=2) == ["a", "b"]
    f = Findings()
    f.add("t.x/warn-a", "w", lines)
    assert len(f.result(_ctx(), "ok").evidence) == EVIDENCE_MAX
    g = Findings()
    for ln in lines:
        g.note(ln)
    assert g.result(_ctx(), "ok").evidence == lines[:EVIDENCE_MAX]
