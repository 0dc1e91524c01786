"""node.clock and cluster.clock graded on captures in the tools' real formats: offsets against the
profile's levels, synchronisation by the most specific tool, no daemon, no tool, lost output,
and the controller's bracket of each node's wall-clock reading."""

from __future__ import annotations

import pytest

from preflight import registry
from preflight.arrivals import KEY, Arrivals
from preflight.grading import FactStore, grade_check
from preflight.model import Capture, CaptureState, Result, Status
from preflight.parsers.clock import WallClock
from preflight.profile import load
from preflight.registry import ClusterContext, Options
from tests.conftest import capture, grade, grade_text
from tests.parsers.test_clock import CHRONY4, CHRONY_FAST3, CHRONY_UNSYNC, NTPSTAT_OK, SHOW, STATUS_NEW

from preflight.checks.clock import (  # isort: skip
    ControllerView, agreement, grade_cluster_clock, view_findings,
)

NO_SYSTEMD = "System has not been booted with systemd as init system (PID 1). Can't operate.\n" \
             "Failed to connect to bus: Host is down\n"
PROBES = ["chronyc-tracking", "ntpq-peers", "timedatectl", "ntpstat"]


def missing(probe: str, tool: str) -> Capture:
    return Capture(probe=probe, argv=[tool], state=CaptureState.MISSING, reason=f"{tool} not found on PATH")


def caps(chrony: str | Capture | None = None, timedate: str | Capture | None = None,
         ntpstat: tuple[str, int] | Capture | None = None, ntpq: str | None = None) -> dict[str, Capture]:
    out = {"chronyc-tracking": missing("chronyc-tracking", "chronyc"), "timedatectl": capture(
        "timedatectl", "", stderr=NO_SYSTEMD, rc=1), "ntpstat": missing("ntpstat", "ntpstat"),
        "ntpq-peers": missing("ntpq-peers", "ntpq") if ntpq is None else capture("ntpq-peers", ntpq)}
    if isinstance(chrony, Capture):
        out["chronyc-tracking"] = chrony
    elif chrony is not None:
        out["chronyc-tracking"] = capture("chronyc-tracking", chrony, rc=1 if chrony.startswith("50") else 0)
    if isinstance(timedate, Capture):
        out["timedatectl"] = timedate
    elif timedate is not None:
        out["timedatectl"] = capture("timedatectl", timedate)
    if isinstance(ntpstat, Capture):
        out["ntpstat"] = ntpstat
    elif ntpstat is not None:
        out["ntpstat"] = capture("ntpstat", ntpstat[0], rc=ntpstat[1])
    return out


def one(captures: dict[str, Capture], planned: list[str] | None = None) -> Result:
    r = registry.load()
    got = grade_check(r.checks["node.clock"], "node1", FactStore(r, captures=captures), load("generic"),
                      Options(), planned if planned is not None else PROBES)
    assert len(got) == 1
    return got[0]


def codes(r: Result) -> list[str]:
    return list(r.facts.get("codes", []))


def test_synchronised_chrony_passes() -> None:
    r = one(caps(CHRONY4, SHOW))
    assert r.status is Status.PASS and r.summary.startswith("clock synchronised (chronyd)"), r
    assert r.facts["clock"] == "synchronised" and r.facts["offset_s"] == pytest.approx(-0.000012345)


def test_three_seconds_fast_fails_naming_the_offset() -> None:
    r = one(caps(CHRONY_FAST3, SHOW))
    assert r.status is Status.FAIL and codes(r) == ["node.clock/offset-high"], r
    assert "3 s ahead of NTP time" in r.summary and "past 1 s" in r.summary
    assert "System time     : 3.000214000 seconds fast of NTP time" in r.evidence
    assert any("clock.max_offset_s = 1" in e and "makestep" in e for e in r.evidence)
    assert "chronyc makestep" in r.remedy


def test_half_a_second_warns() -> None:
    r = one(caps(CHRONY4.replace("0.000012345 seconds slow", "0.500000000 seconds slow")))
    assert r.status is Status.WARN and codes(r) == ["node.clock/offset-warn"] and "500 ms behind" in r.summary


def test_not_synchronised_warns() -> None:
    r = one(caps(CHRONY_UNSYNC, SHOW))  # chrony is more specific than timedatectl's yes
    assert r.status is Status.WARN and codes(r) == ["node.clock/not-synchronised"], r
    assert "(chronyd)" in r.summary and "Leap status     : Not synchronised" in r.evidence


def test_timesyncd_node_with_chrony_installed_but_stopped_passes() -> None:
    r = one(caps("506 Cannot talk to daemon\n", SHOW))
    assert r.status is Status.PASS and r.facts["clock_source"] == "timedatectl", r


def test_timedatectl_status_of_an_unsynchronised_node() -> None:
    r = one(caps(None, STATUS_NEW))
    assert r.status is Status.WARN and codes(r) == ["node.clock/not-synchronised"], r
    assert "System clock synchronized: no" in r.evidence


def test_ntpstat_exit_codes() -> None:
    assert one(caps(ntpstat=(NTPSTAT_OK, 0))).status is Status.PASS
    r = one(caps(ntpstat=("unsynchronised\n  time server re-starting\n", 1)))
    assert r.status is Status.WARN and codes(r) == ["node.clock/not-synchronised"] and "(ntpstat)" in r.summary
    r = one(caps(ntpstat=("", 1)))  # the exit status alone says it
    assert codes(r) == ["node.clock/not-synchronised"]


def test_no_daemon_anywhere_warns() -> None:
    r = one(caps("506 Cannot talk to daemon\n", None, ("Unable to talk to NTP daemon. Is it running?\n", 2)))
    assert r.status is Status.WARN and codes(r) == ["node.clock/no-time-daemon"], r
    assert "chronyd, ntpstat" in r.summary and "506 Cannot talk to daemon" in r.evidence
    r = one(caps(None, SHOW.replace("NTPSynchronized=yes", "").replace("NTP=yes", "NTP=no")))
    assert codes(r) == ["node.clock/no-time-daemon"]


def test_no_tool_at_all_is_skip_saying_what_each_said() -> None:
    r = one(caps())
    assert r.status is Status.SKIP and codes(r) == ["node.clock/not-checked"], r
    assert "chronyc not found on PATH" in " ".join(r.evidence)
    assert any("has not been booted with systemd" in e for e in r.evidence)


def test_output_not_understood_is_error() -> None:
    r = one(caps("Welcome to the cluster!\n"))
    assert r.status is Status.ERROR and codes(r) == ["node.clock/output-unrecognised"], r
    assert "chronyc-tracking: Welcome to the cluster!" in r.evidence


@pytest.mark.parametrize("state,code", [(CaptureState.TIMEOUT, "run.probe/timed-out"),
                                        (CaptureState.LOST, "run.probe/output-lost")])
def test_output_that_did_not_arrive_is_error_not_no_daemon(state: CaptureState, code: str) -> None:
    lost = Capture(probe="chronyc-tracking", argv=["chronyc", "-n", "tracking"], state=state, timeout=5,
                   reason="chronyc timed out after 5 s" if state is CaptureState.TIMEOUT else "connection stalled")
    r = one(caps(lost, SHOW))
    assert r.status is Status.ERROR and codes(r) == [code], r


def test_the_wall_clock_reading_must_arrive_where_it_was_sent() -> None:
    c = caps(CHRONY4, SHOW)
    c["date-wall"] = Capture(probe="date-wall", argv=["date", "+%s.%N"], state=CaptureState.LOST, reason="stalled")
    r = one(c)
    assert r.status is Status.ERROR and codes(r) == ["run.probe/output-lost"]
    c["date-wall"] = capture("date-wall", "1764129551.5\n")
    assert one(c).status is Status.PASS


def test_analyze_grades_a_pasted_tracking_report() -> None:
    [r] = grade_text("node.clock", {"chronyc-tracking": "[root@gpu7 ~]# chronyc tracking\n" + CHRONY_FAST3})
    assert r.status is Status.FAIL and "3 s ahead" in r.summary


def test_graded_through_the_helper_without_plan() -> None:
    [r] = grade("node.clock", caps(CHRONY4))
    assert r.status is Status.PASS


# ---- the controller's view --------------------------------------------------------------------


def _view(offset: float, began: float = 1000.0, came: float = 1000.5, res: float = 1e-9) -> ControllerView:
    return ControllerView(WallClock(1000.2 + offset, res, f"{1000.2 + offset:.9f}"), began, came)


def test_bracket_catches_thirty_seconds_not_a_tenth() -> None:
    from preflight.findings import Findings

    f = Findings()
    facts = view_findings(_view(30.0), load("generic"), f)
    assert f.codes() == ["node.clock/controller-offset"] and "at least 29.7 s ahead of the controller" in f.items[0].summary
    assert facts["controller_offset_s"] == [29.7, 30.2]
    f = Findings()
    view_findings(_view(0.1), load("generic"), f)
    assert not f.items and "offset from the controller between -0.200 s and +0.300 s" in f.notes[0]
    f = Findings()
    view_findings(_view(-30.0), load("generic"), f)
    assert "29.8 s behind the controller" in f.items[0].summary


def test_a_slow_transport_never_makes_a_skew_up() -> None:
    from preflight.findings import Findings

    f = Findings()  # the node really 1.5 s ahead, but the capture took 5 s to come back: not proven
    view_findings(_view(1.5, began=1000.0, came=1005.0), load("generic"), f)
    assert not f.items
    f = Findings()  # a date without %N: one more second of doubt
    view_findings(ControllerView(WallClock(1001.0, 1.0, "1001.N"), 1000.0, 1000.1), load("generic"), f)
    assert not f.items


def test_no_time_and_no_reading() -> None:
    from preflight.findings import Findings

    f = Findings()
    assert view_findings(ControllerView(WallClock(1000.0), None, None), load("generic"), f) == {}
    assert not f.items and "not measured" in f.notes[0]
    f = Findings()
    view_findings(ControllerView(WallClock(None, 1e-9, "garbage")), load("generic"), f)
    assert f.codes() == ["node.clock/output-unrecognised"]


def test_agreement_between_nodes() -> None:
    prof = load("generic")
    r = agreement({"n1": (-0.2, 0.3), "n2": (-0.1, 0.4), "n3": (1.8, 2.3)}, prof)
    assert r.status is Status.FAIL and r.facts["codes"] == ["cluster.clock/nodes-disagree"]
    assert r.summary.startswith("n3's clock is at least 1.5 s ahead of n1's") and r.node == "cluster"
    r = agreement({"n1": (-0.2, 0.3), "n2": (0.5, 0.9)}, prof)
    assert r.status is Status.PASS and r.facts["proven_spread_s"] == 0.2
    r = agreement({"n1": (-0.2, 0.3)}, prof)
    assert r.status is Status.SKIP and r.facts["codes"] == ["cluster.clock/no-readings"]


def _cluster(readings: dict[str, str], times: dict[str, tuple[float, float]], node_results: list[Result]
             ) -> ClusterContext:
    reg = registry.load()
    nodes = ["n1", "n2", "n3"]
    stores = {}
    for n in nodes:
        c = caps(CHRONY4, SHOW)
        if n in readings:
            c["date-wall"] = capture("date-wall", readings[n])
        stores[n] = FactStore(reg, captures=c)
    return ClusterContext(nodes=nodes, stores=stores, results=node_results,  # type: ignore[arg-type]
                          node_errors={n: "" for n in nodes}, node_detail={n: {} for n in nodes},
                          profile=load("generic"),
                          options=Options(extra={KEY: {n: {"date-wall": t} for n, t in times.items()}}))


def test_cluster_regrades_each_graded_node_once() -> None:
    graded = [one(caps(CHRONY4, SHOW)) for _ in range(2)]
    graded[0].node, graded[1].node = "n1", "n2"
    error = Result(check="node.clock", node="n3", status=Status.ERROR, summary="output lost")
    t0 = 1764129000.0
    ctx = _cluster({"n1": f"{t0 + 0.1:.9f}\n", "n2": f"{t0 + 30.3:.9f}\n", "n3": f"{t0 + 0.2:.9f}\n"},
                   {"n1": (t0, t0 + 0.4), "n2": (t0, t0 + 0.4), "n3": (t0, t0 + 0.4)},
                   [*graded, error])
    out = list(grade_cluster_clock(ctx))
    by = {(r.check, r.node): r for r in out}
    assert len(by) == len(out) == 3  # n1, n2 regraded; n3's ERROR left as it was; one cluster result
    assert by[("node.clock", "n1")].status is Status.PASS
    n2 = by[("node.clock", "n2")]
    assert n2.status is Status.FAIL and n2.facts["codes"] == ["node.clock/controller-offset"]
    assert by[("cluster.clock", "cluster")].status is Status.FAIL
    assert ("node.clock", "n3") not in by


def test_arrivals_note_each_capture_once_and_pass_it_on() -> None:
    seen: list[str] = []
    a = Arrivals(lambda node, cap: seen.append(f"{node}:{cap.probe}"))
    a.phase()
    a("n1", capture("date-wall", "1\n"))
    first = a.times["n1"]["date-wall"]
    a("n1", capture("date-wall", "2\n"))
    assert a.times["n1"]["date-wall"] == first and first[0] <= first[1]
    assert seen == ["n1:date-wall", "n1:date-wall"]
    opts = a.into(Options(extra={"x": 1}))
    assert opts.extra["x"] == 1 and opts.extra[KEY] == {"n1": {"date-wall": first}}
    Arrivals()("n2", capture("date-wall", "1\n"))  # without a display


def test_only_node_clock_selects_its_cross_node_half() -> None:
    from preflight.engine import _wanted

    assert _wanted("cluster.clock", ["node.clock"]) and _wanted("cluster.clock", ["node"])
    assert _wanted("cluster.clock", ["cluster.clock"]) and not _wanted("cluster.clock", ["gpu", "net.mtu"])
    assert _wanted("cluster.mtu", ["net.mtu"]) and not _wanted("cluster.mtu", ["node.clock"])


def test_controller_offset_remedy_points_at_the_controller_too() -> None:
    from preflight.findings import Findings

    f = Findings()
    view_findings(_view(-30.0), load("generic"), f)
    assert "the controller's own clock is the one to fix" in f.items[0].remedy


NTPQ = """\
     remote           refid      st t when poll reach   delay   offset  jitter
==============================================================================
*10.10.0.1       .GPS.            1 u   33   64  377    0.123  {offset}   0.012
+10.10.0.2       10.10.0.1        2 u   12   64  377    0.201    0.120   0.030
"""


def test_ntpd_peers() -> None:
    r = one(caps(ntpq=NTPQ.format(offset="-0.045")))
    assert r.status is Status.PASS and r.facts["clock_source"] == "ntpd", r
    assert r.facts["offset_s"] == pytest.approx(0.000045)  # the peer is behind: this clock is ahead
    r = one(caps(ntpq=NTPQ.format(offset="-2500.5")))
    assert r.status is Status.FAIL and codes(r) == ["node.clock/offset-high"] and "2.5 s ahead of NTP time (ntpd)" \
        in r.summary, r
    r = one(caps(ntpq=NTPQ.format(offset="-0.045").replace("*10.10.0.1", " 10.10.0.1")))
    assert r.status is Status.WARN and codes(r) == ["node.clock/not-synchronised"] and "(ntpd)" in r.summary
    r = one(caps(ntpq="ntpq: read: Connection refused\n"))
    assert r.status is Status.WARN and codes(r) == ["node.clock/no-time-daemon"], r
