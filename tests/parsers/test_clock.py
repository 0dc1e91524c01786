"""The clock parsers on text in the producers' real formats: chronyc tracking (chrony 1.x, 3.x,
4.x, -c CSV, errors), timedatectl show / status (old and new wording, no systemd), ntpstat, date."""

from __future__ import annotations

import pytest

from preflight.parsers.clock import (
    NtpStat,
    Timedate,
    Tracking,
    WallClock,
    detect_ntpstat,
    detect_timedate,
    detect_tracking,
)
from tests.conftest import facts_of

CHRONY4 = """\
Reference ID    : C0A80A01 (10.10.0.1)
Stratum         : 3
Ref time (UTC)  : Thu Nov 26 03:50:12 2026
System time     : 0.000012345 seconds slow of NTP time
Last offset     : -0.000004567 seconds
RMS offset      : 0.000023456 seconds
Frequency       : 12.345 ppm slow
Residual freq   : +0.001 ppm
Skew            : 0.012 ppm
Root delay      : 0.001234567 seconds
Root dispersion : 0.000456789 seconds
Update interval : 64.2 seconds
Leap status     : Normal
"""
CHRONY_FAST3 = CHRONY4.replace("0.000012345 seconds slow", "3.000214000 seconds fast")
CHRONY_UNSYNC = """\
Reference ID    : 00000000 ()
Stratum         : 0
Ref time (UTC)  : Thu Jan 01 00:00:00 1970
System time     : 0.000000000 seconds fast of NTP time
Last offset     : +0.000000000 seconds
RMS offset      : 0.000000000 seconds
Frequency       : 0.000 ppm slow
Residual freq   : +0.000 ppm
Skew            : 0.000 ppm
Root delay      : 1.000000000 seconds
Root dispersion : 1.000000000 seconds
Update interval : 0.0 seconds
Leap status     : Not synchronised
"""
# chrony 1.2x: a dotted reference, no leap line, no root fields
CHRONY1 = """\
Reference ID    : 10.10.0.1 (ntp1.example.com)
Stratum         : 2
Ref time (UTC)  : Mon Mar  3 10:11:12 2014
System time     : 1.500000000 seconds slow of NTP time
Last offset     : 0.000004 seconds
RMS offset      : 0.000023 seconds
Frequency       : 12.345 ppm slow
Residual freq   : 0.001 ppm
Skew            : 0.012 ppm
"""
CSV = "C0A80A01,10.10.0.1,3,1764129012.123456789,-2.500000000,+0.000004567,0.000023456,-12.345,+0.001,0.012,0.001234567,0.000456789,64.2,Normal\n"


def test_chrony4_report() -> None:
    t = facts_of("chronyc-tracking", CHRONY4)
    assert isinstance(t, Tracking) and t.report and not t.no_daemon
    assert t.ref_id == "C0A80A01" and t.ref_name == "10.10.0.1" and t.stratum == 3
    assert t.offset_s == pytest.approx(-0.000012345)  # slow: behind NTP time
    assert t.root_dispersion_s == pytest.approx(0.000456789) and t.update_interval_s == pytest.approx(64.2)
    assert t.leap == "Normal" and t.synced is True and t.unrecognised == []
    assert t.evidence("system time") == ["System time     : 0.000012345 seconds slow of NTP time"]


def test_fast_is_ahead() -> None:
    assert facts_of("chronyc-tracking", CHRONY_FAST3).offset_s == pytest.approx(3.000214)


def test_unsynchronised_and_zero_reference() -> None:
    t = facts_of("chronyc-tracking", CHRONY_UNSYNC)
    assert t.synced is False and t.no_reference
    t = facts_of("chronyc-tracking", CHRONY_UNSYNC.replace("Not synchronised", "Normal"))
    assert t.synced is False  # refid 0: no source selected, whatever the leap line says


def test_chrony1_without_leap_line() -> None:
    t = facts_of("chronyc-tracking", CHRONY1)
    assert t.synced is True and t.leap == "" and t.offset_s == pytest.approx(-1.5) and t.ref_id == "10.10.0.1"


def test_csv_sign_is_the_correction() -> None:
    t = facts_of("chronyc-tracking", CSV)
    assert t.report and t.offset_s == pytest.approx(2.5)  # correction -2.5: the clock is 2.5 s fast
    assert t.stratum == 3 and t.leap == "Normal" and t.synced is True
    assert facts_of("chronyc-tracking", CSV.replace("Normal", "Not synchronised")).synced is False


@pytest.mark.parametrize("text,daemon", [("506 Cannot talk to daemon\n", True), ("501 Not authorised\n", False)])
def test_chronyc_errors(text: str, daemon: bool) -> None:
    t = facts_of("chronyc-tracking", text)
    assert not t.report and t.no_daemon is daemon and t.error == text.strip() and t.synced is None


def test_chrony_framed_and_garbage() -> None:
    framed = "".join(f"0: {ln}\n" for ln in CHRONY_FAST3.splitlines())  # srun -l
    assert facts_of("chronyc-tracking", framed).offset_s == pytest.approx(3.000214)
    t = facts_of("chronyc-tracking", "bash: syntax error\n")
    assert not t.report and t.unrecognised == ["bash: syntax error"]
    t = facts_of("chronyc-tracking", "System time     : garbage\n")
    assert t.offset_s is None
    assert facts_of("chronyc-tracking", "").report is False


SHOW = "Timezone=Etc/UTC\nLocalRTC=no\nCanNTP=yes\nNTP=yes\nNTPSynchronized=yes\nTimeUSec=Thu 2026-11-26 03:59:11 UTC\n" \
       "RTCTimeUSec=Thu 2026-11-26 03:59:11 UTC\n"
STATUS_NEW = """\
               Local time: Thu 2026-11-26 03:59:11 UTC
           Universal time: Thu 2026-11-26 03:59:11 UTC
                 RTC time: Thu 2026-11-26 03:59:11
                Time zone: Etc/UTC (UTC, +0000)
System clock synchronized: no
              NTP service: inactive
          RTC in local TZ: no
"""
STATUS_239 = STATUS_NEW.replace("              NTP service: inactive", "systemd-timesyncd.service active: yes")
STATUS_OLD = """\
      Local time: Thu 2026-11-26 03:59:11 UTC
  Universal time: Thu 2026-11-26 03:59:11 UTC
        RTC time: Thu 2026-11-26 03:59:11
       Time zone: Etc/UTC (UTC, +0000)
     NTP enabled: yes
NTP synchronized: yes
 RTC in local TZ: no
      DST active: n/a
"""
STATUS_XENIAL = STATUS_OLD.replace("     NTP enabled: yes", " Network time on: yes")


@pytest.mark.parametrize("text,synced,service", [
    (SHOW, True, True), (SHOW.replace("NTPSynchronized=yes", "NTPSynchronized=no").replace("NTP=yes", "NTP=no"),
                         False, False),
    (STATUS_NEW, False, False), (STATUS_239, False, True), (STATUS_OLD, True, True), (STATUS_XENIAL, True, True),
])
def test_timedatectl_wordings(text: str, synced: bool, service: bool) -> None:
    td = facts_of("timedatectl", text)
    assert isinstance(td, Timedate) and td.available and td.synced is synced and td.service is service
    assert td.unrecognised == []


@pytest.mark.parametrize("text", [
    "System has not been booted with systemd as init system (PID 1). Can't operate.\nFailed to connect to bus: Host is down\n",
    "Failed to create bus connection: No such file or directory\n",
])
def test_timedatectl_without_systemd(text: str) -> None:
    td = facts_of("timedatectl", text)
    assert not td.available and td.synced is None and td.error


NTPSTAT_OK = "synchronised to NTP server (10.10.0.1) at stratum 3\n   time correct to within 42 ms\n" \
             "   polling server every 1024 s\n"


def test_ntpstat_outputs() -> None:
    s = facts_of("ntpstat", NTPSTAT_OK)
    assert isinstance(s, NtpStat) and s.state == "synchronised" and s.stratum == 3 and s.within_ms == 42.0
    assert s.source == "NTP server (10.10.0.1)" and s.unrecognised == []
    assert facts_of("ntpstat", "synchronised to local net at stratum 11\n").state == "synchronised"
    s = facts_of("ntpstat", "synchronised to reference clock, stratum unknown\naccuracy unknown\npoll interval unknown\n")
    assert s.state == "synchronised" and s.source == "reference clock" and s.stratum is None and s.unrecognised == []
    assert facts_of("ntpstat", "unsynchronised\n  time server re-starting\n   polling server every 8 s\n").state \
        == "unsynchronised"
    assert facts_of("ntpstat", "Unable to talk to NTP daemon. Is it running?\n").state == "no-daemon"
    s = facts_of("ntpstat", "something else\n")
    assert s.state == "" and s.unrecognised == ["something else"]


def test_wall_clock() -> None:
    w = facts_of("date-wall", "1764129551.123456789\n")
    assert isinstance(w, WallClock) and w.epoch == pytest.approx(1764129551.123456789) and w.resolution == 1e-9
    w = facts_of("date-wall", "1764129551.N\n")  # a date without %N
    assert w.epoch == 1764129551.0 and w.resolution == 1.0
    assert facts_of("date-wall", "0: 1764129551.5\n").epoch == pytest.approx(1764129551.5)
    assert facts_of("date-wall", "date: invalid option\n").epoch is None


def test_detectors() -> None:
    from preflight.framing import Doc

    assert detect_tracking(Doc(CHRONY4)) and not detect_tracking(Doc(SHOW))
    assert detect_timedate(Doc(SHOW)) and detect_timedate(Doc(STATUS_NEW)) and detect_timedate(Doc(STATUS_OLD))
    assert not detect_timedate(Doc(CHRONY4))
    assert detect_ntpstat(Doc(NTPSTAT_OK)) and detect_ntpstat(Doc("unsynchronised\n   polling server every 8 s\n"))
    assert not detect_ntpstat(Doc("unsynchronised\n"))


def test_ntpq_peers() -> None:
    from preflight.parsers.clock import Peers

    text = ("     remote           refid      st t when poll reach   delay   offset  jitter\n"
            "==============================================================================\n"
            "*2001:db8:100:200:300:400:500:600\n"
            "                 .PPS.            1 u   33   64  377    0.123   12.500   0.012\n"
            "+10.10.0.2       10.10.0.1        2 u   12   64  377    0.201    0.120   0.030\n")
    p = facts_of("ntpq-peers", text)
    assert isinstance(p, Peers) and p.table and p.peers == 2 and p.synced is True
    assert p.system_peer == "2001:db8:100:200:300:400:500:600" and p.offset_s == pytest.approx(-0.0125)
    assert p.unrecognised == []
    p = facts_of("ntpq-peers", "ntpq: read: Connection refused\n")
    assert p.no_daemon and p.synced is None and not p.table
    assert facts_of("ntpq-peers", "No association ID's returned\n").synced is False
    assert facts_of("ntpq-peers", "localhost: timed out, nothing received\n***Request timed out\n").error


def test_detect_ntpq_peers_by_its_header_only() -> None:
    from preflight.framing import Doc
    from preflight.parsers.clock import detect_peers

    header = "     remote           refid      st t when poll reach   delay   offset  jitter\n"
    assert detect_peers(Doc(header + "=" * 78 + "\n"))
    assert detect_peers(Doc("\n" * 9 + header))  # the header within the first ten lines
    assert not detect_peers(Doc("\n" * 10 + header))
    assert not detect_peers(Doc(header.replace("refid", "ref")))
    assert not detect_peers(Doc(header.replace("offset", "offs")))
    assert not detect_peers(Doc(header.replace("remote", "peer  ")))
    assert not detect_peers(Doc("ntpq: read: Connection refused\n"))


def test_ntpstat_of_a_server_still_starting_leaves_nothing_unrecognised() -> None:
    text = "unsynchronised\n  time server re-starting\n   poll interval unknown\n   accuracy unknown\n"
    s = facts_of("ntpstat", text)
    assert isinstance(s, NtpStat) and s.state == "unsynchronised" and s.unrecognised == []


@pytest.mark.parametrize("leap, ref, synced", [
    ("Normal", "C0A80A01 (10.10.0.1)", True),
    ("Insert second", "C0A80A01 (10.10.0.1)", True),
    ("Delete second", "10.10.0.1 (ntp1)", True),
    ("Normal", "00000000 ()", False),
    ("Not synchronised", "C0A80A01 (10.10.0.1)", False),
    ("Leap pending?", "C0A80A01 (10.10.0.1)", None),  # a status this reader does not know says nothing
])
def test_the_leap_status_decides_only_when_it_is_one_chrony_prints(leap: str, ref: str, synced: bool | None) -> None:
    text = CHRONY4.replace("Normal", leap).replace("C0A80A01 (10.10.0.1)", ref)
    assert facts_of("chronyc-tracking", text).synced is synced


def test_tracking_values_not_in_chronys_format_are_unrecognised_not_read() -> None:
    text = (CHRONY4.replace("C0A80A01 (10.10.0.1)", "garbage").replace("3\n", "three\n", 1)
            .replace("0.000012345 seconds slow of NTP time", "lots of seconds"))
    t = facts_of("chronyc-tracking", text)
    assert (t.ref_id, t.stratum, t.offset_s) == ("", None, None)
    assert [u.split(":")[0].strip() for u in t.unrecognised] == ["Reference ID", "Stratum", "System time"]
    assert t.synced is True  # chrony says Normal only while synchronised: its own word stands
