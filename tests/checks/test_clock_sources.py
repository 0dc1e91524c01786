"""node.clock on ntpq's peers with and without a system peer, chrony's maximum error, a local
clock as reference, chronyc sources / sourcestats, and chronyd / ntpd log lines."""

from __future__ import annotations

import pytest

from preflight.model import Result, Status
from tests.conftest import grade_text
from tests.parsers.test_clock import CHRONY4, CHRONY_UNSYNC
from tests.parsers.test_clock_sources import (
    CAPTION,
    HEADER,
    LOG,
    NTPQ_HEAD,
    NTPQ_LOCAL,
    NTPQ_NO_PEER_AHEAD,
    SOURCES_AHEAD,
    SOURCES_CSV,
    SOURCES_NONE_SELECTED,
    SOURCES_OK,
    STATS_AHEAD,
    STATS_CAPTION,
    STATS_OK,
)


def one(**inputs: str) -> Result:
    got = grade_text("node.clock", {k.replace("_", "-"): v for k, v in inputs.items()})
    assert len(got) == 1
    return got[0]


def codes(r: Result) -> list[str]:
    return list(r.facts.get("codes", []))


NTPQ_SELECTED_FAR = NTPQ_HEAD + """\
*10.10.0.1       .GPS.            1 u   33   64  377    0.123  40012.51   0.012
+10.10.0.2       10.10.0.1        2 u   12   64  377    0.201  40010.12   0.030
"""


def test_ntpq_offset_past_the_limit_fails_with_a_system_peer() -> None:
    r = one(ntpq_peers=NTPQ_SELECTED_FAR)
    assert r.status is Status.FAIL and codes(r) == ["node.clock/offset-high"], r
    assert "40 s behind NTP time (ntpd)" in r.summary and r.facts["offset_s"] == pytest.approx(-40.01251)


def test_ntpq_offset_past_the_limit_fails_without_a_system_peer() -> None:
    r = one(ntpq_peers=NTPQ_NO_PEER_AHEAD)
    assert r.status is Status.FAIL, r
    assert codes(r) == ["node.clock/offset-high", "node.clock/not-synchronised"], r
    assert "40 s behind NTP time (ntpd, no system peer: 2 reachable peer(s) agree)" in r.summary
    assert r.facts["offset_s"] == pytest.approx(-40.01012)  # the peer nearest this clock: at least that far


def test_ntpq_peers_on_both_sides_prove_no_offset() -> None:
    text = NTPQ_NO_PEER_AHEAD.replace("40012.51", "-40012.51")
    r = one(ntpq_peers=text)
    assert r.status is Status.WARN and codes(r) == ["node.clock/not-synchronised"], r


def test_ntpq_local_clock_driver_selected_is_not_a_time_source() -> None:
    r = one(ntpq_peers=NTPQ_LOCAL)
    assert r.status is Status.WARN and codes(r) == ["node.clock/local-reference"], r
    assert "own local clock (ntpd)" in r.summary and r.facts["clock"] == "unsynchronised"
    assert r.evidence[0].startswith("*LOCAL(0)")


def test_ntpq_local_clock_selected_with_real_peers_far_off_fails() -> None:
    text = NTPQ_LOCAL + " 10.10.0.2       .GPS.            1 u   33   64  377    0.123  -5000.0   0.012\n"
    r = one(ntpq_peers=text)
    assert r.status is Status.FAIL, r
    assert codes(r) == ["node.clock/offset-high", "node.clock/local-reference"] and "5 s ahead" in r.summary


def test_chrony_maximum_error_past_the_limit_with_leap_normal_is_not_a_pass() -> None:
    text = CHRONY4.replace("Root dispersion : 0.000456789", "Root dispersion : 3600.000456789")
    r = one(chronyc_tracking=text)
    assert r.status is Status.WARN and codes(r) == ["node.clock/error-bound-high"], r
    assert "maximum error (root delay / 2 + root dispersion) 3.6e+03 s, past 1 s" in r.summary
    assert "Root dispersion : 3600.000456789 seconds" in r.evidence
    # root delay counts half: 1.8 s of delay alone is a 0.9 s bound (a note), 2.2 s is past 1 s
    r = one(chronyc_tracking=CHRONY4.replace("Root delay      : 0.001234567", "Root delay      : 1.800000000"))
    assert r.status is Status.PASS and any("past 0.2 s" in e for e in r.evidence), r
    r = one(chronyc_tracking=CHRONY4.replace("Root delay      : 0.001234567", "Root delay      : 2.200000000"))
    assert codes(r) == ["node.clock/error-bound-high"], r


def test_an_unsynchronised_chrony_is_not_graded_on_its_bound() -> None:
    r = one(chronyc_tracking=CHRONY_UNSYNC)  # root delay and dispersion 1 s each: the not-synchronised defaults
    assert codes(r) == ["node.clock/not-synchronised"], r


def test_chrony_local_mode_is_not_a_time_source() -> None:
    r = one(chronyc_tracking=CHRONY4.replace("C0A80A01 (10.10.0.1)", "7F7F0101 ()"))
    assert r.status is Status.WARN and codes(r) == ["node.clock/local-reference"], r
    assert "Reference ID    : 7F7F0101 ()" in r.evidence


@pytest.mark.parametrize("caption", ["", CAPTION])
def test_chronyc_sources_healthy_passes(caption: str) -> None:
    r = one(chronyc_sources=caption + SOURCES_OK)
    assert r.status is Status.PASS and r.facts["clock_source"] == "chronyd sources", r
    assert r.facts["offset_s"] == pytest.approx(-923e-6)
    assert r.summary == "clock synchronised (chronyd sources), 0.923 ms from NTP time"


@pytest.mark.parametrize("caption", ["", CAPTION])
def test_chronyc_sources_none_selected_is_not_a_pass(caption: str) -> None:
    r = one(chronyc_sources=caption + SOURCES_NONE_SELECTED)
    assert r.status is Status.WARN and codes(r) == ["node.clock/not-synchronised"], r
    assert r.evidence[0] == "chronyc sources: 2 source(s), none selected ('*')"
    r = one(chronyc_sources=caption + SOURCES_AHEAD)
    assert r.status is Status.FAIL and codes(r) == ["node.clock/offset-high", "node.clock/not-synchronised"], r
    assert "40 s ahead of NTP time (chronyd)" in r.summary
    r = one(chronyc_sources=caption + HEADER)  # no source at all
    assert codes(r) == ["node.clock/not-synchronised"], r


def test_sources_add_to_trackings_system_time() -> None:
    # tracking: the system clock 0.5 s fast of chronyd's NTP clock; sources: the NTP clock 0.6 s fast of the source
    tracking = CHRONY4.replace("0.000012345 seconds slow", "0.500000000 seconds fast")
    sources = SOURCES_OK.replace("-923us[ -924us]", " +600ms[ +600ms]")
    r = one(chronyc_tracking=tracking, chronyc_sources=sources)
    assert r.status is Status.FAIL and r.facts["offset_s"] == pytest.approx(1.1), r
    r = one(chronyc_tracking=tracking)
    assert r.status is Status.WARN and r.facts["offset_s"] == pytest.approx(0.5), r


def test_sources_csv_passes() -> None:
    assert one(chronyc_sources=SOURCES_CSV).status is Status.PASS


@pytest.mark.parametrize("caption", ["", STATS_CAPTION])
def test_sourcestats(caption: str) -> None:
    r = one(chronyc_sourcestats=caption + STATS_OK)
    assert r.status is Status.PASS and "whether it is synchronised is not shown" in r.summary, r
    r = one(chronyc_sourcestats=caption + STATS_AHEAD)
    assert r.status is Status.FAIL and codes(r) == ["node.clock/offset-high"] and "39.9 s ahead" in r.summary, r
    # with sources present, sourcestats is not needed: the selected source's offset wins
    r = one(chronyc_sources=SOURCES_OK, chronyc_sourcestats=caption + STATS_AHEAD)
    assert r.status is Status.PASS, r


def test_log_lines() -> None:
    r = one(clock_log=LOG)
    assert r.status is Status.FAIL, r
    assert codes(r) == ["node.clock/offset-high", "node.clock/daemon-exited", "node.clock/unread-error",
                        "node.clock/not-synchronised"], r
    assert "5e+03 s behind NTP time (logged by the time daemon)" in r.summary  # ntpd's sanity limit, the last one
    assert any("Could not open NTP socket on 0.0.0.0:123" in e for e in r.evidence)


def test_a_healthy_chronyd_log_passes_and_a_step_clears_the_offset() -> None:
    healthy = ("Nov 25 10:11:01 gpu017 chronyd[812]: chronyd version 4.2 starting (+CMDMON +NTP)\n"
               "Nov 25 10:11:09 gpu017 chronyd[812]: Selected source 10.10.0.1 (ntp1.example.net)\n"
               "Nov 25 10:11:09 gpu017 chronyd[812]: System clock wrong by 41.203311 seconds\n"
               "Nov 25 10:11:09 gpu017 chronyd[812]: System clock was stepped by 41.203311 seconds\n")
    r = one(clock_log=healthy)
    assert r.status is Status.PASS and r.facts["clock_source"] == "chronyd log", r
    r = one(clock_log=healthy.rsplit("Nov 25", 1)[0])
    assert codes(r) == ["node.clock/offset-high"] and "41.2 s behind" in r.summary, r


def test_a_live_offset_outranks_the_log() -> None:
    r = one(chronyc_tracking=CHRONY4, clock_log=LOG.split("Nov 25 10:16:00")[0])
    assert "node.clock/offset-high" not in codes(r) and r.facts["offset_s"] == pytest.approx(-0.000012345), r


def test_a_log_of_info_lines_only_is_a_skip_saying_so() -> None:
    info = ("Nov 25 10:11:01 gpu017 chronyd[812]: chronyd version 4.2 starting (+CMDMON +NTP)\n"
            "Nov 25 10:11:01 gpu017 chronyd[812]: Frequency -12.345 +/- 0.100 ppm read from /var/lib/chrony/drift\n")
    r = one(clock_log=info)
    assert r.status is Status.SKIP and codes(r) == ["node.clock/not-checked"], r
    assert r.summary.startswith("2 time daemon log line(s) read, none says whether the clock is synchronised")


def test_chrony_maximum_error_exactly_at_the_limit_is_not_past_it() -> None:
    at = CHRONY4.replace("Root delay      : 0.001234567", "Root delay      : 0.000000000").replace(
        "Root dispersion : 0.000456789", "Root dispersion : 1.000000000")
    r = one(chronyc_tracking=at)
    assert r.status is Status.PASS and codes(r) == [] and any("1 s, past 0.2 s" in e for e in r.evidence), r
    r = one(chronyc_tracking=at.replace("Root dispersion : 1.000000000", "Root dispersion : 1.000001000"))
    assert codes(r) == ["node.clock/error-bound-high"], r
    assert r.remedy.startswith("chronyd cannot vouch for the clock: its sources are far (root delay)"), r.remedy


def test_chronyc_sources_with_a_selected_source_or_no_table_does_not_say_none_selected() -> None:
    r = one(chronyc_sources=SOURCES_OK)
    assert not any("none selected" in e for e in r.evidence), r
    r = one(chronyc_sources="506 Cannot talk to daemon\n")
    assert codes(r) == ["node.clock/no-time-daemon"] and r.evidence == ["506 Cannot talk to daemon"], r


def test_a_daemon_exit_counts_only_when_no_source_is_selected_after_it() -> None:
    selected = "Nov 25 10:11:09 gpu017 chronyd[812]: Selected source 10.10.0.1 (ntp1.example.net)\n"
    fatal = "Nov 25 10:16:01 gpu017 chronyd[812]: Fatal error : Could not open PID file /run/chrony/chronyd.pid\n"
    r = one(clock_log=selected + fatal)  # selected before the exit: the daemon is gone
    assert "node.clock/daemon-exited" in codes(r), r
    restarted = "Nov 25 10:17:09 gpu017 chronyd[830]: Selected source 10.10.0.1 (ntp1.example.net)\n"
    r = one(clock_log=fatal + restarted)  # a source selected after the exit: it came back
    assert r.status is Status.PASS and codes(r) == [], r
