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


def test_a_tracking_report_with_values_not_in_chronys_format_is_never_a_pass() -> None:
    garbled = "Reference ID    : garbage\nSystem time     : lots of seconds\nLeap status     : ???\n"
    r = one(caps(garbled))
    assert r.status is Status.ERROR and codes(r) == ["node.clock/output-unrecognised"], r
    assert "chronyc-tracking: Reference ID    : garbage" in r.evidence


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


# ---- the words and numbers each finding carries (each pinned so a wrong one is seen) ----------


def test_a_profile_without_clock_levels_grades_no_offset() -> None:
    from preflight.checks.clock import offset_findings, thresholds
    from preflight.findings import Findings
    from preflight.profile import Profile

    fail, warn, line = thresholds(Profile(name="bare"))
    assert (fail, warn) == (0.0, 0.0) and line.startswith("profile bare: clock.max_offset_s = 0 (")
    f = Findings()
    offset_findings(3600.0, "chronyd", [], Profile(name="bare"), f)
    assert not f.items  # 0 = not graded, whatever the offset
    f = Findings()
    offset_findings(1.0, "chronyd", [], load("generic"), f)  # exactly at the level is not past it
    assert f.codes() == ["node.clock/offset-warn"]


def test_offset_remedy_and_evidence_words() -> None:
    r = one(caps(CHRONY_FAST3, SHOW))
    assert r.remedy.startswith("step the clock now (`chronyc makestep`") and r.remedy.endswith("stop lining up")
    assert r.facts["stratum"] == 3 and r.facts["clock_source"] == "chronyd"
    ok = one(caps(CHRONY4, SHOW))
    assert ok.facts["stratum"] == 3
    assert "synchronised (chronyd): Reference ID    : C0A80A01 (10.10.0.1); Leap status     : Normal" in ok.evidence


def test_ntpstat_exit_status_alone_says_each_state() -> None:
    r = one(caps(ntpstat=("", 0)))
    assert r.status is Status.PASS and r.facts["clock_source"] == "ntpstat", r
    assert "synchronised (ntpstat): ntpstat exit status 0" in r.evidence
    r = one(caps(ntpstat=("", 1)))
    assert codes(r) == ["node.clock/not-synchronised"] and "ntpstat exit status 1" in r.evidence
    r = one(caps(ntpstat=("", 2)))
    assert codes(r) == ["node.clock/no-time-daemon"] and "ntpstat exit status 2" in r.evidence, r
    assert r.summary == "no time daemon answers (ntpstat)"
    r = one(caps(ntpstat=("", 3)))  # an exit status ntpstat does not define says nothing
    assert r.status is Status.SKIP and codes(r) == ["node.clock/not-checked"], r


def test_no_daemon_summary_names_each_daemon_in_order() -> None:
    r = one(caps("506 Cannot talk to daemon\n", None, ("Unable to talk to NTP daemon. Is it running?\n", 2)))
    assert r.summary == "no time daemon answers (chronyd, ntpstat)", r
    assert r.remedy.startswith("no time synchronisation daemon runs")


def test_old_timedatectl_status_wording_is_the_evidence() -> None:
    from tests.parsers.test_clock import STATUS_OLD

    r = one(caps(None, STATUS_OLD))
    assert r.status is Status.PASS and r.facts["clock_source"] == "timedatectl", r
    assert "synchronised (timedatectl):      NTP enabled: yes; NTP synchronized: yes" in r.evidence  # lines as printed
    r = one(caps(None, STATUS_OLD.replace("NTP synchronized: yes", "NTP synchronized: no")))
    assert codes(r) == ["node.clock/not-synchronised"] and "NTP synchronized: no" in r.evidence


def test_ntpd_with_peers_but_no_system_peer_says_so() -> None:
    r = one(caps(ntpq=NTPQ.format(offset="-0.045").replace("*10.10.0.1", " 10.10.0.1")))
    assert r.evidence[0] == "ntpq -pn: 2 peer(s), none selected as system peer", r
    r = one(caps(ntpq=NTPQ.format(offset="-0.045")))
    assert r.evidence[0].startswith("synchronised (ntpd): *10.10.0.1"), r
    r = one(caps(ntpq="ntpq: read: Connection refused\n"))
    assert r.evidence == ["ntpq: read: Connection refused"], r


def test_unrecognised_output_names_three_lines_per_tool() -> None:
    r = one(caps("".join(f"garbage line {i}\n" for i in range(5))))
    assert codes(r) == ["node.clock/output-unrecognised"], r
    assert [e for e in r.evidence if e.startswith("chronyc-tracking: ")] == [
        f"chronyc-tracking: garbage line {i}" for i in range(3)]
    assert r.summary == "no time tool's output was understood"
    assert r.remedy.startswith("run `chronyc tracking` / `timedatectl status` on the node")


def test_a_tool_not_planned_is_left_out_of_the_skip_evidence_the_others_stay() -> None:
    c = caps()
    del c["chronyc-tracking"]
    r = one(c, planned=["ntpq-peers", "timedatectl", "ntpstat"])
    assert r.status is Status.SKIP and codes(r) == ["node.clock/not-checked"], r
    assert not any("chronyc" in e for e in r.evidence)
    assert any("has not been booted with systemd" in e for e in r.evidence)
    assert any("ntpstat not found on PATH" in e for e in r.evidence)


def test_a_date_that_printed_no_time_says_so() -> None:
    from preflight.findings import Findings

    for line, shown in (("garbage", "garbage"), ("", "(no output)")):
        f = Findings()
        view_findings(ControllerView(WallClock(None, 1e-9, line)), load("generic"), f)
        [item] = f.items
        assert item.summary.startswith("the node's `date +%s.%N` printed no time") and item.evidence == [shown]
        assert item.remedy == "run `date +%s.%N` on the node by hand"


def test_a_bracket_exactly_at_the_threshold_is_not_past_it() -> None:
    from preflight.findings import Findings

    f = Findings()  # offset in [1.0, 2.0]: at least 1 s, not past 1 s
    view_findings(ControllerView(WallClock(1002.0, 1e-9, "1002.0"), 1000.0, 1001.0), load("generic"), f)
    assert not f.items, f.items
    f = Findings()  # offset in [-2.5, -1.0]
    view_findings(ControllerView(WallClock(999.0, 1.0, "999.N"), 1001.0, 1001.5), load("generic"), f)
    assert not f.items, f.items
    f = Findings()  # just past it, both ways
    view_findings(ControllerView(WallClock(1002.25, 1e-9, "1002.25"), 1000.0, 1001.0), load("generic"), f)
    assert f.codes() == ["node.clock/controller-offset"]
    f = Findings()
    view_findings(ControllerView(WallClock(999.0, 0.5, "999.0"), 1001.0, 1001.5), load("generic"), f)
    assert f.codes() == ["node.clock/controller-offset"]


def test_controller_offset_words_and_rounding() -> None:
    from preflight.findings import Findings

    f = Findings()
    facts = view_findings(ControllerView(WallClock(1030.23456, 1e-9, "1030.23456"), 1000.0, 1000.5), load("generic"),
                          f)
    assert facts["controller_offset_s"] == [round(29.73456, 3), round(30.23456, 3)] == [29.735, 30.235]
    remedy = f.items[0].remedy
    assert remedy.startswith("step the clock now (`chronyc makestep`")
    assert remedy.endswith("cross-node logs stop lining up; when every node is off by about the same amount, the "
                           "controller's own clock is the one to fix")


def test_agreement_words_facts_and_rounding() -> None:
    prof = load("generic")
    r = agreement({"n1": (-0.2, 0.3), "n3": (1.81234, 2.3)}, prof)
    assert r.check == "cluster.clock" and r.status is Status.FAIL
    assert r.facts["proven_spread_s"] == 1.512 and r.facts["ahead"] == "n3" and r.facts["behind"] == "n1"
    assert r.remedy.startswith("step the clock now")
    # the one ahead is the one whose offset is surely largest (its low end), not the widest bracket
    r = agreement({"n1": (1.8, 3.5), "n2": (2.0, 2.3), "n3": (-0.2, 0.3)}, prof)
    assert (r.facts["ahead"], r.facts["behind"], r.facts["proven_spread_s"]) == ("n2", "n3", 1.7), r.facts
    r = agreement({"n1": (-0.2, 0.3), "n2": (0.81234, 0.9)}, prof)
    assert r.check == "cluster.clock" and r.status is Status.PASS and r.facts["proven_spread_s"] == 0.512
    assert r.summary == "no two of 2 nodes' clocks proven more than 1 s apart (readings bracketed within 0.5 s)"
    r = agreement({"n1": (0.0, 0.5), "n2": (1.5, 2.0)}, prof)  # proven exactly 1 s apart: not past it
    assert r.status is Status.PASS and r.facts["proven_spread_s"] == 1.0
    r = agreement({"n1": (-0.2, 0.3)}, prof)
    assert r.check == "cluster.clock" and r.evidence == ["readings from: n1"]
    assert agreement({}, prof).evidence == ["readings from: none"]


def test_a_node_without_a_reading_leaves_the_others_compared() -> None:
    graded = [one(caps(CHRONY4, SHOW)) for _ in range(2)]
    graded[0].node, graded[1].node = "n2", "n3"
    t0 = 1764129000.0
    ctx = _cluster({"n2": f"{t0 + 0.1:.9f}\n", "n3": f"{t0 + 30.3:.9f}\n"},
                   {"n2": (t0, t0 + 0.4), "n3": (t0, t0 + 0.4)}, graded)
    out = {(r.check, r.node): r for r in grade_cluster_clock(ctx)}
    assert out[("cluster.clock", "cluster")].status is Status.FAIL, out
    assert out[("node.clock", "n3")].status is Status.FAIL and ("node.clock", "n1") not in out


def test_durations_read_in_the_unit_that_fits() -> None:
    from preflight.checks.clock import seconds

    assert seconds(0.5) == "500 ms" and seconds(-0.0125) == "12.5 ms" and seconds(0.999) == "999 ms"
    assert seconds(1.0) == "1 s" and seconds(1.5) == "1.5 s" and seconds(-2.5) == "2.5 s"


def test_warn_level_is_past_not_at() -> None:
    from preflight.checks.clock import offset_findings
    from preflight.findings import Findings

    f = Findings()
    offset_findings(0.2, "chronyd", [], load("generic"), f)  # generic: WARN past 200 ms
    assert not f.items
    offset_findings(0.5, "chronyd", ["System time : 0.5 seconds fast of NTP time"], load("generic"), f)
    assert f.codes() == ["node.clock/offset-warn"] and f.items[0].summary.startswith("clock 500 ms ahead of NTP time")


def test_the_offsets_evidence_is_chronys_lines_and_the_states_are_facts() -> None:
    r = one(caps(CHRONY_FAST3, SHOW))
    assert "(chronyd)" in r.summary
    assert "Reference ID    : C0A80A01 (10.10.0.1)" in r.evidence and "Leap status     : Normal" in r.evidence
    r = one(caps(CHRONY_UNSYNC, SHOW))
    assert r.facts["clock"] == "unsynchronised" and r.facts["clock_source"] == "chronyd"
    assert r.remedy.startswith("check the time service: `chronyc sources -v`")
    r = one(caps("506 Cannot talk to daemon\n", None, ("Unable to talk to NTP daemon. Is it running?\n", 2)))
    assert r.facts["clock"] == "no-daemon" and r.facts["clock_source"] == "chronyd"


def test_timedatectl_evidence_is_its_sync_and_service_lines() -> None:
    r = one(caps(None, SHOW))
    assert r.status is Status.PASS and "synchronised (timedatectl): NTP=yes; NTPSynchronized=yes" in r.evidence, r
    r = one(caps(None, STATUS_NEW))
    assert "              NTP service: inactive" in r.evidence, r


def test_nothing_answered_words() -> None:
    r = one(caps())
    assert r.summary == ("no time tool answered (chronyc, ntpq, timedatectl, ntpstat): clock synchronisation not "
                         "checked"), r
    assert r.remedy.startswith("install chrony (`chronyc tracking`)")


def test_no_controller_time_is_a_note_saying_so() -> None:
    from preflight.findings import Findings

    f = Findings()
    view_findings(ControllerView(WallClock(1000.0), 1000.0, None), load("generic"), f)
    assert f.notes == ["offset from the controller not measured (no controller time for the date-wall capture)"]


def test_a_node_whose_clock_check_did_not_grade_leaves_the_others_regraded() -> None:
    graded = [one(caps(CHRONY4, SHOW)) for _ in range(2)]
    graded[0].node, graded[1].node = "n2", "n3"
    error = Result(check="node.clock", node="n1", status=Status.ERROR, summary="output lost")
    t0 = 1764129000.0
    ctx = _cluster({n: f"{t0 + 0.1:.9f}\n" for n in ("n1", "n2", "n3")},
                   {n: (t0, t0 + 0.4) for n in ("n1", "n2", "n3")}, [error, *graded])
    out = {(r.check, r.node): r for r in grade_cluster_clock(ctx)}
    assert ("node.clock", "n1") not in out and out[("node.clock", "n2")].status is Status.PASS, out
    assert out[("node.clock", "n3")].facts["controller_offset_s"] == [-0.3, 0.1]
