"""chronyc sources / sourcestats (plain, -v, -c, chrony 1.x's `210` line), ntpq's rows with and
without a system peer (LOCAL(0) included), chronyd / ntpd log lines: text in the producers' formats."""

from __future__ import annotations

import pytest

from preflight.framing import frame
from preflight.parsers.clock import (
    ClockLog,
    Peers,
    Sources,
    SourceStats,
    Tracking,
    detect_log,
    detect_peers,
    detect_sources,
    detect_sourcestats,
    duration,
    is_local,
    proven_offset,
)
from tests.conftest import facts_of

CAPTION = """\

  .-- Source mode  '^' = server, '=' = peer, '#' = local clock.
 / .- Source state '*' = current best, '+' = combined, '-' = not combined,
| /             'x' = may be in error, '~' = too variable, '?' = unusable.
||                                                 .- xxxx [ yyyy ] +/- zzzz
||      Reachability register (octal) -.           |  xxxx = adjusted offset,
||      Log2(Polling interval) --.      |          |  yyyy = measured offset,
||                                \\     |          |  zzzz = estimated error.
||                                 |    |           \\
"""
HEADER = ("MS Name/IP address         Stratum Poll Reach LastRx Last sample" + " " * 15  # chronyc pads it
          + "\n" + "=" * 79 + "\n")
SOURCES_OK = HEADER + """\
#- GPS0                          0   4   377    11   -479ns[ -621ns] +/-  134ns
^* ntp1.example.net              2   6   377    23   -923us[ -924us] +/-   43ms
^+ ntp2.example.net              1   6   377    21  -2629us[-2619us] +/-   86ms
^? 10.0.0.3                      0   6     0     -     +0ns[   +0ns] +/-    0ns
^x 10.0.0.4                      2   6   377    19    -12ms[  -12ms] +/-   40ms
^~ 10.0.0.5                      3   7   177   110  +1234us[+1240us] +/-  120ms
"""
# chronyd that never stepped: every reachable source says the clock is 40 s ahead, none selected
SOURCES_AHEAD = HEADER + """\
^? ntp1.example.net              2   6   377    23    +40.1s[ +40.1s] +/-   43ms
^? ntp2.example.net              2   6   377    21    +40.0s[ +40.0s] +/-   86ms
^? 10.0.0.3                      0   6     0     -     +0ns[   +0ns] +/-    0ns
"""
SOURCES_NONE_SELECTED = HEADER + """\
^- ntp1.example.net              2   6   377    23   -923us[ -924us] +/-   43ms
^? 10.0.0.3                      0  10     0     -     +0ns[   +0ns] +/-    0ns
"""
SOURCES_CSV = """\
^,*,10.10.0.1,2,6,377,23,-0.000923000,-0.000924000,0.043000000
^,+,10.10.0.2,1,6,377,21,-0.002629000,-0.002619000,0.086000000
"""
SOURCES_CHRONY1 = "210 Number of sources = 1\n" + HEADER + \
    "^* ntp1.example.net              2   6   377    23   -923us[ -924us] +/-   43ms\n"
STATS_HEADER = """\
Name/IP Address            NP  NR  Span  Frequency  Freq Skew  Offset  Std Dev
==============================================================================
"""
STATS_CAPTION = """\
                             .- Number of sample points in measurement set.
                            /    .- Number of residual runs with same sign.
                           |    /    .- Length of measurement set (time).
                           |   |    /      .- Est. clock freq error (ppm).
                           |   |   |      /           .- Est. error in freq.
                           |   |   |     |           /         .- Est. offset.
                           |   |   |     |          |          |   On the -.
                           |   |   |     |          |          |   samples. \\
                           |   |   |     |          |          |             |
"""
STATS_OK = STATS_HEADER + """\
ntp1.example.net           11   5   46m     -0.001      0.045      1us    25us
ntp2.example.net           20  12   22m     -0.003      0.012   -123us    45us
10.0.0.3                    0   0     0     +0.000   2000.000     +0ns  4000ms
"""
STATS_AHEAD = STATS_HEADER + """\
ntp1.example.net           11   5   46m     -0.001      0.045    +40.1s  1234us
ntp2.example.net           20  12   22m     -0.003      0.012    +39.9s    45ms
"""
STATS_CSV = "10.10.0.1,11,5,2760,-0.001,0.045,0.000001000,0.000025000\n"
NTPQ_HEAD = """\
     remote           refid      st t when poll reach   delay   offset  jitter
==============================================================================
"""
NTPQ_NO_PEER_AHEAD = NTPQ_HEAD + """\
 10.10.0.1       .GPS.            1 u   33   64  377    0.123  40012.51   0.012
 10.10.0.2       10.10.0.1        2 u   12   64  377    0.201  40010.12   0.030
 10.10.0.3       .INIT.          16 u    -   64    0    0.000    0.000   0.000
"""
NTPQ_LOCAL = NTPQ_HEAD + """\
*LOCAL(0)        .LOCL.          10 l   40   64  377    0.000    0.000   0.000
 10.10.0.1       .INIT.          16 u    -   64    0    0.000    0.000   0.000
"""
LOG = """\
Nov 25 10:11:01 gpu017 chronyd[812]: chronyd version 4.2 starting (+CMDMON +NTP +REFCLOCK)
Nov 25 10:11:02 gpu017 chronyd[812]: Could not open NTP socket on 0.0.0.0:123 : Address already in use
Nov 25 10:11:09 gpu017 chronyd[812]: Selected source 10.10.0.1 (ntp1.example.net)
Nov 25 10:11:09 gpu017 chronyd[812]: System clock wrong by 41.203311 seconds
Nov 25 10:15:09 gpu017 chronyd[812]: Can't synchronise: no selectable sources (2 unreachable sources)
Nov 25 10:16:00 gpu017 ntpd[900]: time correction of 5000 seconds exceeds sanity limit (1000); set clock manually to the correct UTC time.
Nov 25 10:16:01 gpu017 chronyd[812]: Fatal error : Could not open PID file /run/chrony/chronyd.pid
"""


def test_durations_in_every_unit_chronyc_prints() -> None:
    cases = {"-479ns": -479e-9, "+12us": 12e-6, "-2629us": -2629e-6, "43ms": 0.043, "+40.1s": 40.1, "-1234s": -1234.0,
             "+5m": 300.0, "2h": 7200.0, "-3d": -259200.0, "1y": 365 * 86400.0, "-0.000923000": -0.000923}
    for text, want in cases.items():
        assert duration(text) == pytest.approx(want), text
    assert duration("12parsecs") is None and duration("") is None


def test_sources_rows_states_and_offsets() -> None:
    s = facts_of("chronyc-sources", SOURCES_OK)
    assert isinstance(s, Sources) and s.table and not s.verbose and s.unrecognised == []
    assert [(r.mode, r.state) for r in s.rows] == [("#", "-"), ("^", "*"), ("^", "+"), ("^", "?"), ("^", "x"),
                                                   ("^", "~")]
    sel = s.selected
    assert sel is not None and sel.name == "ntp1.example.net" and sel.stratum == 2 and sel.reach == 0o377
    assert sel.offset_s == pytest.approx(-923e-6) and sel.measured_s == pytest.approx(-924e-6)
    assert sel.error_s == pytest.approx(0.043)
    assert s.rows[3].reach == 0 and not s.rows[3].sampled and not s.rows[3].usable
    assert s.rows[5].reach == 0o177
    assert s.synced is True and s.reading() == (pytest.approx(-923e-6), [sel.line])


def test_sources_with_the_verbose_caption_read_the_same() -> None:
    s = facts_of("chronyc-sources", CAPTION + SOURCES_OK)
    assert s.verbose and s.unrecognised == [] and len(s.rows) == 6 and s.synced is True


def test_no_selected_source_is_not_synchronised_and_agreeing_sources_prove_the_offset() -> None:
    s = facts_of("chronyc-sources", SOURCES_AHEAD)
    assert s.synced is False and s.selected is None
    offset, lines = s.reading()
    assert offset == pytest.approx(40.0) and len(lines) == 2  # the unreachable one reads nothing
    s = facts_of("chronyc-sources", SOURCES_NONE_SELECTED)
    assert s.synced is False and s.reading()[0] == pytest.approx(-923e-6)
    empty = facts_of("chronyc-sources", HEADER)
    assert empty.table and empty.rows == [] and empty.synced is False


def test_sources_csv_and_chrony1_number_line() -> None:
    s = facts_of("chronyc-sources", SOURCES_CSV)
    assert s.table and len(s.rows) == 2 and s.selected is not None and s.selected.offset_s == pytest.approx(-0.000923)
    s = facts_of("chronyc-sources", SOURCES_CHRONY1)
    assert s.unrecognised == [] and s.synced is True
    s = facts_of("chronyc-sources", "506 Cannot talk to daemon\n")
    assert s.no_daemon and s.error == "506 Cannot talk to daemon" and s.synced is None


def test_sources_detection() -> None:
    for text in (SOURCES_OK, CAPTION + SOURCES_OK, SOURCES_CSV, HEADER):
        doc = frame(text).docs[0]
        assert detect_sources(doc) and not detect_sourcestats(doc) and not detect_peers(doc), text
    assert not detect_sources(frame(STATS_OK).docs[0])


def test_sourcestats_rows() -> None:
    for text in (STATS_OK, STATS_CAPTION + STATS_OK):
        s = facts_of("chronyc-sourcestats", text)
        assert isinstance(s, SourceStats) and s.table and s.unrecognised == [] and len(s.rows) == 3, s
        assert s.rows[1].samples == 20 and s.rows[1].offset_s == pytest.approx(-123e-6)
        assert s.rows[1].std_dev_s == pytest.approx(45e-6) and s.rows[2].std_dev_s == pytest.approx(4.0)
        assert s.reading()[0] == 0.0  # on both sides of zero: no offset proven (the empty one reads nothing)
    assert facts_of("chronyc-sourcestats", STATS_CAPTION + STATS_OK).verbose
    assert facts_of("chronyc-sourcestats", STATS_AHEAD).reading()[0] == pytest.approx(39.9)
    csv = facts_of("chronyc-sourcestats", STATS_CSV)
    assert csv.rows[0].offset_s == pytest.approx(1e-6) and csv.rows[0].samples == 11
    for text in (STATS_OK, STATS_CAPTION + STATS_OK, STATS_CSV):
        assert detect_sourcestats(frame(text).docs[0]), text


def test_ntpq_rows_without_a_system_peer() -> None:
    p = facts_of("ntpq-peers", NTPQ_NO_PEER_AHEAD)
    assert isinstance(p, Peers) and p.synced is False and p.offset_s is None and len(p.rows) == 3
    assert [r.tally for r in p.rows] == [" ", " ", " "] and p.rows[2].reach == 0 and p.rows[2].stratum == 16
    offset, lines = p.reading()
    assert offset == pytest.approx(-40.01012) and len(lines) == 2  # the peers are ahead: this clock is behind
    assert lines[0].strip().startswith("10.10.0.1")  # not joined onto the ==== rule


def test_ntpq_local_clock_driver_is_no_time_source() -> None:
    p = facts_of("ntpq-peers", NTPQ_LOCAL)
    assert p.system_peer == "LOCAL(0)" and p.local_peer and p.synced is False and p.reading() == (None, [])
    assert is_local("127.127.1.0") and is_local("LOCAL(0)") and is_local(".LOCL.") and is_local("7F7F0101")
    assert not is_local("10.10.0.1") and not is_local("LOCALHOST.example") and not is_local("")


def test_chrony_local_mode_and_maximum_error() -> None:
    from tests.parsers.test_clock import CHRONY4
    t = facts_of("chronyc-tracking", CHRONY4.replace("C0A80A01 (10.10.0.1)", "7F7F0101 ()"))
    assert isinstance(t, Tracking) and t.local_reference and t.synced is True  # leap Normal: chrony's own word
    t = facts_of("chronyc-tracking", CHRONY4)
    assert not t.local_reference and t.max_error_s == pytest.approx(0.001234567 / 2 + 0.000456789)
    assert facts_of("chronyc-tracking", "Reference ID    : 127.127.1.1 ()\nStratum         : 10\n").local_reference


def test_proven_offset() -> None:
    assert proven_offset([]) is None
    assert proven_offset([3.0, 5.0]) == 3.0 and proven_offset([-3.0, -5.0]) == -3.0
    assert proven_offset([-3.0, 5.0]) == 0.0 and proven_offset([0.0, 5.0]) == 0.0


def test_log_events_in_order() -> None:
    doc = frame(LOG).docs[0]
    assert detect_log(doc)
    log = facts_of("clock-log", LOG)
    assert isinstance(log, ClockLog)
    assert [(e.kind, e.ident) for e in log.events] == [
        ("error", "chronyd"), ("selected", "chronyd"), ("wrong-by", "chronyd"), ("no-sources", "chronyd"),
        ("wrong-by", "ntpd"), ("exited", "chronyd")]
    assert log.events[2].value == pytest.approx(-41.203311)  # wrong by +N: the clock is behind
    assert log.events[4].value == pytest.approx(-5000.0)
    assert log.last("selected", "no-sources") is log.events[3]
    assert not detect_log(frame("Nov 25 10:11:01 gpu017 kernel: eth0: link up\n").docs[0])


def test_ntpdate_result_lines() -> None:
    log = facts_of("clock-log", "May 11 13:20:56 gpu017 ntpdate[1725]: can't find host ntp.example.net\n"
                                "May 11 13:20:56 gpu017 ntpdate[1725]: no servers can be used, exiting\n"
                                "May 11 13:30:56 gpu017 ntpdate[1730]: adjust time server 10.0.0.1 offset -0.307928 sec\n")
    assert [(e.kind, e.ident) for e in log.events] == [("error", "ntpdate"), ("no-sources", "ntpdate"),
                                                      ("selected", "ntpdate")]


def test_a_fatal_error_exits_a_normal_stop_does_not() -> None:
    log = facts_of("clock-log", "Nov 25 10:16:00 gpu017 ntpd[900]: ntpd exiting on signal 15 (Terminated)\n"
                                "Nov 25 10:16:01 gpu017 chronyd[901]: Fatal error : Could not open NTP sockets\n")
    assert [e.kind for e in log.events] == ["exited"]
