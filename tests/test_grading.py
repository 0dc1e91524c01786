"""The one grading function, in-process: the verdict (GO, NO-GO, NO-EVIDENCE), the fact store,
a check over captures that arrived, did not arrive, timed out, could not start or whose tool is
missing, faults inside a check, analyze mode, and the cross-node checks."""

from __future__ import annotations

from typing import Any

import pytest

from preflight import grading
from preflight.framing import Doc
from preflight.grading import (
    EXIT_GO,
    EXIT_NO_EVIDENCE,
    EXIT_NO_GO,
    FactStore,
    decide,
    grade_check,
    grade_cluster,
    grade_node,
    majority_profile,
    ordered,
    tool_package,
)
from preflight.model import Capture, CaptureState, Result, Status
from preflight.probes import Probe
from preflight.profile import load as load_profile
from preflight.registry import Check, CheckContext, ClusterCheck, ClusterContext, Options, Registry


def R(status: Status, node: str = "n1", check: str = "c.x") -> Result:  # noqa: N802
    return Result(check=check, node=node, status=status, summary=status.value)


# ---------------------------------------------------------------------------------------------
# The verdict


def test_no_go_go_and_no_evidence() -> None:
    v = decide([R(Status.PASS), R(Status.FAIL, "n2"), R(Status.ERROR, "n3", "c.y"), R(Status.WARN, "n4")])
    assert v.verdict == "NO-GO" and v.exit_code == EXIT_NO_GO == 1
    assert [(r.node, r.status) for r in v.blocking] == [("n2", Status.FAIL), ("n3", Status.ERROR)]
    assert v.bad_nodes == ["n2", "n3"]
    assert v.counts == {"pass": 1, "warn": 1, "fail": 1, "skip": 0, "error": 1}
    v = decide([R(Status.PASS), R(Status.SKIP)])
    assert v.verdict == "GO" and v.exit_code == EXIT_GO == 0 and not v.blocking and v.bad_nodes == []
    assert decide([R(Status.WARN), R(Status.SKIP)]).verdict == "GO"
    for nothing in ([], [R(Status.SKIP)], [R(Status.SKIP), R(Status.SKIP, "n2")]):
        v = decide(nothing)
        assert v.verdict == "NO-EVIDENCE" and v.exit_code == EXIT_NO_EVIDENCE == 3 and not v.blocking


def test_warn_as_fail_makes_a_warning_block() -> None:
    v = decide([R(Status.PASS), R(Status.WARN, "n2")], warn_as_fail=True)
    assert v.verdict == "NO-GO" and v.bad_nodes == ["n2"] and v.exit_code == 1
    assert decide([R(Status.WARN, "n2")], warn_as_fail=False).verdict == "GO"
    assert grading.EXIT_USAGE == 2


def test_blocking_is_worst_first_then_node_then_check_and_pseudo_nodes_are_not_bad() -> None:
    rs = [R(Status.ERROR, "b", "z"), R(Status.FAIL, "c", "a"), R(Status.FAIL, "a", "b"), R(Status.FAIL, "a", "a"),
          R(Status.FAIL, "cluster", "x")]
    v = decide(rs)
    assert [(r.node, r.check) for r in v.blocking] == [("a", "a"), ("a", "b"), ("c", "a"), ("cluster", "x"),
                                                       ("b", "z")]
    assert v.bad_nodes == ["a", "b", "c"]
    assert [(r.status, r.node) for r in ordered([R(Status.PASS, "a"), R(Status.SKIP, "a"), R(Status.WARN, "b"),
                                                 R(Status.FAIL, "z")])] == [
        (Status.FAIL, "z"), (Status.WARN, "b"), (Status.SKIP, "a"), (Status.PASS, "a")]


# ---------------------------------------------------------------------------------------------
# The fact store


def _registry(parse: Any = None) -> Registry:
    reg = Registry()
    if parse is not None:
        reg.register_parser("tool", parse)
    return reg


def test_a_probes_text_is_framed_and_parsed_once() -> None:
    calls: list[str] = []

    def parse(doc: Doc) -> list[str]:
        calls.append(doc.clean)
        return [ln.text for ln in doc.lines if ln.text]

    cap = Capture(probe="tool", argv=["tool", "-v"], state=CaptureState.OK, stdout="a\x1b[31mb\x1b[0m\n", rc=0,
                  source="probe:tool")
    store = FactStore(_registry(parse), captures={"tool": cap})
    assert store.names() == ["tool"]
    assert store.facts("tool") == ["ab"] and store.facts("tool") == ["ab"] and len(calls) == 1
    inp = store.input("tool")
    assert inp is not None and inp.ok and inp.argv == ("tool", "-v") and inp.rc == 0 and inp.command == "tool -v"
    doc = store.doc("tool")
    assert inp.source == "probe:tool" and doc is not None and doc.command == "tool -v"
    assert store.input("other") is None and store.facts("other") is None and store.doc("other") is None


def test_a_capture_that_did_not_run_has_no_document_and_no_facts() -> None:
    cap = Capture(probe="tool", argv=["tool"], state=CaptureState.TIMEOUT, stdout="partial", timeout=5,
                  reason="killed after 5 s")
    store = FactStore(_registry(lambda d: "parsed"), captures={"tool": cap})
    assert store.doc("tool") is None and store.facts("tool") is None
    inp = store.input("tool")
    assert inp is not None and not inp.ok and inp.timeout == 5 and inp.reason == "killed after 5 s"
    assert inp.source == "probe:tool"


def test_documents_keep_their_command_filter_and_excerpt() -> None:
    d1 = Doc("x\n", command="nvidia-smi -q | grep -A3 Fabric", origin="f1")
    d2 = Doc("y\n", command="nvidia-smi -q | grep -A3 Fabric", origin="f2")
    store = FactStore(_registry(lambda d: d.clean.split()), docs={"tool": [d1, d2]})
    inp = store.input("tool")
    assert inp is not None and inp.command == "nvidia-smi -q | grep -A3 Fabric" and inp.source == "f1, f2"
    assert inp.filter == ("Fabric",) and inp.excerpt and inp.argv == ("nvidia-smi",) and inp.rc == 0
    assert store.facts("tool") == ["x", "y"]
    two = FactStore(_registry(), docs={"tool": [Doc("a\n", command="dmesg -T"), Doc("b\n", command="dmesg")]})
    inp2 = two.input("tool")
    assert inp2 is not None and inp2.command == "dmesg -T ; dmesg" and inp2.argv == ("dmesg",)
    plain = FactStore(_registry(), docs={"tool": [Doc("z\n", origin="f3")]}).input("tool")
    assert plain is not None and not plain.excerpt and plain.filter == () and plain.argv == () and plain.command == ""
    facts = FactStore(_registry(), facts={"m": {"rows": 1}})
    assert facts.facts("m") == {"rows": 1} and facts.input("m") is not None
    unparsed = FactStore(_registry(), docs={"raw": [Doc("w\n")]})
    assert isinstance(unparsed.facts("raw"), Doc)


# ---------------------------------------------------------------------------------------------
# One check over captures


def _check(grade: Any, required: tuple[str, ...] = ("tool",), probes: tuple[str, ...] = ("tool",)) -> Check:
    return Check(id="site.t", title="t", grade=grade, probes=tuple(Probe.of(p, [p]) for p in probes),
                 required=required)


def _grade(check: Check, captures: dict[str, Capture], mode: str = "run", profile: str = "generic",
           planned: list[str] | None = None) -> list[Result]:
    store = FactStore(_registry(lambda d: d.clean.strip()), captures=captures)
    return grade_check(check, "n1", store, load_profile(profile), Options(mode=mode),
                       planned if planned is not None else [p.name for p in check.probes_for_safe()])


def _ok(ctx: CheckContext) -> Result:
    return ctx.result(Status.PASS, f"facts: {ctx.facts('tool')}")


def _cap(state: CaptureState, **kw: Any) -> Capture:
    return Capture(probe="tool", argv=["tool"], state=state, **kw)


def test_a_capture_that_arrived_is_graded() -> None:
    [r] = _grade(_check(_ok), {"tool": _cap(CaptureState.OK, stdout="hello\n", rc=0)})
    assert (r.status, r.summary, r.check, r.node) == (Status.PASS, "facts: hello", "site.t", "n1")


def test_output_that_never_came_back_is_error_output_lost() -> None:
    [r] = _grade(_check(_ok), {})
    assert r.status is Status.ERROR and r.summary == "output lost: no capture of probe tool came back"
    assert r.facts["codes"] == ["run.probe/output-lost"] and r.evidence == ["probe tool: planned, never received"]
    assert "preflight run --hosts n1 --only site.t" in r.remedy
    [r] = _grade(_check(_ok), {"tool": _cap(CaptureState.LOST, reason="connection closed mid-bundle",
                                            source="ssh:n1")})
    assert r.status is Status.ERROR and r.summary == "output lost: connection closed mid-bundle"
    assert r.evidence == ["probe tool: sent, its output never came back", "connection closed mid-bundle"]
    assert r.source == "ssh:n1" and r.facts["codes"] == ["run.probe/output-lost"]


def test_a_probe_that_timed_out_is_error_with_its_last_lines() -> None:
    cap = _cap(CaptureState.TIMEOUT, stdout="1\n2\n3\n4\n", timeout=7.5, reason="killed after 7.5 s")
    [r] = _grade(_check(_ok), {"tool": cap})
    assert r.status is Status.ERROR and r.summary == "probe tool timed out after 7.5 s"
    assert r.evidence == ["killed after 7.5 s", "2", "3", "4"] and r.facts["codes"] == ["run.probe/timed-out"]
    assert "run `tool` by hand on n1" in r.remedy


def test_a_probe_that_could_not_start_is_error() -> None:
    [r] = _grade(_check(_ok), {"tool": _cap(CaptureState.FAILED, reason="exec format error")})
    assert r.status is Status.ERROR and r.summary == "probe tool could not run: exec format error"
    assert r.facts["codes"] == ["run.probe/not-started"]


def test_a_missing_tool_is_skip_or_fail_where_the_profile_requires_it(tmp_path: Any) -> None:
    cap = _cap(CaptureState.MISSING, reason="tool not found on PATH", source="probe:tool")
    [r] = _grade(_check(_ok), {"tool": cap})
    assert r.status is Status.SKIP and r.summary == "tool not found; site.t not checked"
    assert r.facts["codes"] == ["run.tool/missing"] and r.evidence == ["tool not found on PATH"]
    prof = tmp_path / "strict.toml"
    prof.write_text('[profile]\nname = "strict"\nextends = "generic"\n[tools]\nrequired = ["tool"]\n')
    [r] = _grade(_check(_ok), {"tool": cap}, profile=str(prof))
    assert r.status is Status.FAIL and r.summary == "tool is missing and profile strict requires it"
    assert r.facts["codes"] == ["run.tool/missing-required"] and r.remedy.startswith("install tool on n1: ")


def test_an_optional_missing_tool_lets_the_check_grade_from_the_others() -> None:
    check = _check(_ok, required=("tool",), probes=("tool", "extra"))
    caps = {"tool": _cap(CaptureState.OK, stdout="x\n", rc=0),
            "extra": Capture(probe="extra", argv=["extra"], state=CaptureState.MISSING, reason="no extra")}
    [r] = _grade(check, caps)
    assert r.status is Status.PASS
    # without a declaration of what it needs, every probe it ran is needed
    [r] = _grade(_check(_ok, required=(), probes=("tool", "extra")), caps)
    assert r.status is Status.SKIP and r.summary == "extra not found; site.t not checked"
    # a probe not planned and not received is no loss
    [r] = _grade(check, {"tool": _cap(CaptureState.OK, stdout="x\n", rc=0)}, planned=["tool"])
    assert r.status is Status.PASS
    # an optional tool missing does not end the look at the probes after it
    later = _check(_ok, required=("tool",), probes=("tool", "extra", "late"))
    caps2 = {**caps, "late": Capture(probe="late", argv=["late"], state=CaptureState.LOST, reason="stalled")}
    [r] = _grade(later, caps2)
    assert r.status is Status.ERROR and r.summary == "output lost: stalled"
    # a required probe nobody planned does not end the look either
    [r] = _grade(_check(_ok, required=("gone", "late"), probes=("late",)), caps2, planned=["late"])
    assert r.status is Status.ERROR and r.summary == "output lost: stalled"


def test_a_fault_inside_a_check_is_error_naming_it() -> None:
    def boom(ctx: CheckContext) -> Result:
        raise KeyError("nope")

    [r] = _grade(_check(boom), {"tool": _cap(CaptureState.OK, stdout="x", rc=0)})
    assert r.status is Status.ERROR and r.summary == "check site.t failed internally: KeyError: 'nope'"
    assert r.evidence == ["KeyError: 'nope'"] and r.facts["codes"] == ["run.check/internal-fault"]
    assert r.remedy.startswith("report this as a preflight bug")


def test_several_results_get_the_check_and_node_they_lack() -> None:
    def two(ctx: CheckContext) -> list[Result]:
        return [Result(check="", node="", status=Status.PASS, summary="a"),
                Result(check="site.other", node="n9", status=Status.WARN, summary="b")]

    rs = _grade(_check(two), {"tool": _cap(CaptureState.OK, stdout="x", rc=0)})
    assert [(r.check, r.node) for r in rs] == [("site.t", "n1"), ("site.other", "n9")]


def test_analyze_mode_grades_what_it_has_and_never_reports_a_loss() -> None:
    [r] = _grade(_check(_ok), {}, mode="analyze")
    assert r.status is Status.PASS and r.summary == "facts: None"
    store = FactStore(_registry(lambda d: d.clean.strip()), docs={"tool": [Doc("y\n")]})
    other = Check(id="site.u", title="u", grade=_ok, probes=(Probe.of("else", ["else"]),))
    rs = grade_node([other, _check(_ok)], "n1", store, load_profile("generic"), Options(mode="analyze"))
    assert [(r.check, r.summary) for r in rs] == [("site.t", "facts: y")]
    rs = grade_node([_check(_ok), other], "n1", store, load_profile("generic"), Options(mode="run"),
                    planned={"site.u": ["else"]})
    assert [(r.check, r.status) for r in rs] == [("site.t", Status.PASS), ("site.u", Status.ERROR)]


@pytest.mark.parametrize(("tool", "words"), [
    ("nvidia-smi", "it comes with the NVIDIA driver (nvidia-driver-<version> or cuda-drivers; nvidia-utils-<version> "
                   "on Debian/Ubuntu, nvidia-driver-cuda on RHEL)"),
    ("ibstat", "package infiniband-diags (rdma-core's diagnostics; part of MLNX_OFED / DOCA-OFED)"),
    ("ibv_devinfo", "package ibverbs-utils (libibverbs-utils on RHEL; part of MLNX_OFED / DOCA-OFED)"),
    ("ofed_info", "it comes with MLNX_OFED / DOCA-OFED (the distribution's rdma-core has none)"),
    ("ip", "package iproute2 (iproute on RHEL)"), ("ping", "package iputils-ping (iputils on RHEL)"),
    ("ethtool", "package ethtool"), ("dmesg", "package util-linux"), ("journalctl", "systemd"),
    ("systemctl", "systemd"), ("dcgmi", "package datacenter-gpu-manager"),
])
def test_each_tool_names_its_package(tool: str, words: str) -> None:
    assert tool_package(tool) == words == tool_package(f"/usr/bin/{tool}")


def test_tool_packages_name_where_a_tool_comes_from() -> None:
    assert "infiniband-diags" in tool_package("/usr/sbin/ibstat")
    assert tool_package("nvidia-smi").startswith("it comes with the NVIDIA driver")
    assert tool_package("frobnicate") == "the package that provides it (see the check's documentation)"
    assert set(grading.TOOL_PACKAGES) >= {"nvidia-smi", "ibstat", "ip", "ping", "dmesg"}


# ---------------------------------------------------------------------------------------------
# Cross-node checks


def test_the_profile_most_nodes_used_grades_the_cluster() -> None:
    g, h = load_profile("generic"), load_profile("h100-sxm-8x")
    assert majority_profile({}) is None
    assert majority_profile({"a": g, "b": h, "c": h}) is h
    assert majority_profile({"a": g}) is g


def test_a_cluster_result_replaces_the_node_result_and_a_fault_is_error() -> None:
    node_results = [R(Status.WARN, "n1", "net.mtu"), R(Status.PASS, "n2", "net.mtu")]

    def explain(ctx: ClusterContext) -> list[Result]:
        assert ctx.nodes == ["n1", "n2"] and ctx.node_errors == {"n1": "", "n2": "down"}
        assert ctx.peers == {"n1": ["n2"]} and ctx.addresses == {"10.0.0.2": "n2"}
        assert ctx.node_detail == {"n1": {}, "n2": {"stage": "auth"}}
        return [R(Status.FAIL, "n1", "net.mtu"), R(Status.PASS, "cluster", "site.matrix")]

    def broken(ctx: ClusterContext) -> list[Result]:
        raise RuntimeError("bad matrix")

    checks = [ClusterCheck(id="site.matrix", title="m", grade=explain),
              ClusterCheck(id="site.broken", title="b", grade=broken)]
    out = grade_cluster(checks, ["n1", "n2"], {}, node_results, {"n1": load_profile("generic")}, Options(),
                        peers={"n1": ["n2"]}, addresses={"10.0.0.2": "n2"}, node_errors={"n2": "down"},
                        node_detail={"n2": {"stage": "auth"}})
    assert [(r.check, r.node, r.status) for r in out] == [
        ("net.mtu", "n1", Status.FAIL), ("net.mtu", "n2", Status.PASS), ("site.matrix", "cluster", Status.PASS),
        ("site.broken", "cluster", Status.ERROR)]
    assert out[-1].summary == "cluster check site.broken failed internally: RuntimeError: bad matrix"
    assert out[-1].evidence == ["site.broken (builtin): RuntimeError: bad matrix"]
    assert out[-1].remedy == "report this as a preflight bug, with the node captures"
    seen: list[str] = []
    grade_cluster([ClusterCheck(id="site.p", title="p", grade=lambda ctx: seen.append(ctx.profile.name) or [])],
                  ["n1"], {}, [], {}, Options(), peers={}, addresses={})
    assert seen == ["generic"]


@pytest.mark.parametrize("status", list(Status))
def test_every_status_has_a_verdict(status: Status) -> None:
    want = {Status.PASS: "GO", Status.WARN: "GO", Status.SKIP: "NO-EVIDENCE"}.get(status, "NO-GO")
    assert decide([R(status)]).verdict == want


def test_a_store_for_more_captures_keeps_what_was_parsed_from_the_same_ones():
    """Phase 2 adds captures to a node: the listings parsed for its profile are not parsed again,
    a capture that changed is."""
    from preflight.engine import Config, load_registry
    from preflight.grading import FactStore
    from preflight.model import Capture, CaptureState

    reg = load_registry([], Config())
    calls: list[str] = []
    real = reg.parser_for

    def counting(probe):
        parse = real(probe)
        return None if parse is None else (lambda doc: (calls.append(probe), parse(doc))[1])

    reg.parser_for = counting  # type: ignore[method-assign]
    smi = Capture(probe="nvidia-smi-L", argv=["nvidia-smi", "-L"], state=CaptureState.OK, rc=0,
                  stdout="GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0b0a6b8f-0000-0000-0000-000000000000)\n")
    first = FactStore(reg, captures={"nvidia-smi-L": smi})
    facts = first.facts("nvidia-smi-L")
    assert calls == ["nvidia-smi-L"]
    ver = Capture(probe="driver-version", argv=["cat", "/proc/driver/nvidia/version"], state=CaptureState.OK, rc=0,
                  stdout="x\n")
    second = first.with_captures({"nvidia-smi-L": smi, "driver-version": ver})
    assert second.facts("nvidia-smi-L") is facts and calls == ["nvidia-smi-L"]
    assert second.input("driver-version") is not None and second.input("nvidia-smi-L") == first.input("nvidia-smi-L")
    changed = Capture(probe="nvidia-smi-L", argv=["nvidia-smi", "-L"], state=CaptureState.OK, rc=0, stdout=smi.stdout)
    third = first.with_captures({"nvidia-smi-L": changed})
    assert third.facts("nvidia-smi-L") is not facts and calls == ["nvidia-smi-L", "nvidia-smi-L"]
