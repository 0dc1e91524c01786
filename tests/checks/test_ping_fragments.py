"""net.mtu on ping fragments: the statistics without the PING header (iputils, BusyBox, BSD), and
the error lines of a `ping -M do -s 8972` probe pasted alone. Loss and errors are graded as under
a header; what the fragment cannot show (the size sent, the target) is said; pings that came back
with no size shown prove no MTU (SKIP). Fixtures are written here in ping's own formats (iputils
ping/ping_output.c ping_print_finish(), BusyBox networking/ping.c print_stats_and_exit()) and
classified by content as `preflight analyze` does."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight import registry
from preflight.analyze import analyze
from preflight.model import Result, Status
from preflight.parsers.ping import parse_runs

HEADER = "PING 10.0.0.2 (10.0.0.2) 8972(9000) bytes of data.\n"
STATS_TAIL = "\n--- 10.0.0.2 ping statistics ---\n"
RTT = "rtt min/avg/max/mdev = 0.190/0.205/0.223/0.013 ms\n"


def mtu(tmp_path: Path, text: str, name: str = "paste.txt") -> Result:
    f = tmp_path / name
    f.write_text(text)
    res = [r for r in analyze(registry.load(), [f]) if r.check == "net.mtu"]
    assert len(res) == 1, [(r.check, r.summary) for r in analyze(registry.load(), [f])]
    return res[0]


def codes(r: Result) -> list[str]:
    return list(r.facts.get("codes", []))


def test_clean_statistics_without_header_are_read_not_passed(tmp_path: Path) -> None:
    r = mtu(tmp_path, "3 packets transmitted, 3 received, 0% packet loss, time 2003ms\n" + RTT)
    assert r.status is Status.SKIP and codes(r) == ["net.mtu/size-not-shown"]
    assert r.summary == ("pings answered (3 transmitted, 3 received, 0% loss, rtt avg 0.205 ms); the size sent and the "
                         "target are not shown (no PING header or command line): MTU not graded")
    assert r.evidence == ["3 packets transmitted, 3 received, 0% packet loss, time 2003ms", RTT.strip()]
    assert r.facts["loss"] == [0.0] and r.facts["targets"] == []


def test_the_same_statistics_under_their_header_pass(tmp_path: Path) -> None:
    text = "$ ping -M do -s 8972 -c 3 10.0.0.2\n" + HEADER + STATS_TAIL + \
        "3 packets transmitted, 3 received, 0% packet loss, time 2003ms\n" + RTT
    r = mtu(tmp_path, text)
    assert r.status is Status.PASS and r.summary == "8972-byte DF pings pass to 1 peer(s)"


def test_statistics_under_the_command_line_take_its_size(tmp_path: Path) -> None:
    r = mtu(tmp_path, "$ ping -M do -s 8972 -c 3 10.0.0.2\n3 packets transmitted, 3 received, 0% packet loss, "
                      "time 2003ms\n" + RTT)
    assert r.status is Status.PASS and r.summary == "8972-byte DF pings pass to 1 peer(s)"


@pytest.mark.parametrize(("stats", "code", "status", "summary"), [
    ("5 packets transmitted, 0 received, 100% packet loss, time 4099ms\n", "net.mtu/no-reply", Status.WARN,
     "no reply to pings of a size not shown from a target not shown"),
    ("4 packets transmitted, 0 received, +4 errors, 100% packet loss, time 3062ms\npipe 4\n", "net.mtu/no-reply",
     Status.WARN, "no reply to pings of a size not shown from a target not shown"),
    ("10 packets transmitted, 8 received, 20% packet loss, time 9013ms\n" + RTT, "net.mtu/jumbo-lossy", Status.WARN,
     "pings of a size not shown partly lost to a target not shown"),
])
def test_loss_without_header_is_graded_as_with_it(tmp_path: Path, stats: str, code: str, status: Status,
                                                  summary: str) -> None:
    r = mtu(tmp_path, stats)
    assert r.status is status and codes(r) == [code] and r.summary == summary
    headed = mtu(tmp_path, HEADER + STATS_TAIL + stats, "headed.txt")
    assert headed.status is status and codes(headed) == [code]  # the same grade the header gives


def test_errors_in_statistics_without_header_are_read() -> None:
    [run] = parse_runs(["4 packets transmitted, 0 received, +4 errors, 100% packet loss, time 3062ms"])
    assert (run.transmitted, run.received, run.errors, run.loss, run.headed) == (4, 0, 4, 100.0, False)


def test_local_error_lines_without_header(tmp_path: Path) -> None:
    r = mtu(tmp_path, "ping: local error: message too long, mtu=1500\n" * 3)
    assert r.status is Status.FAIL and codes(r) == ["net.mtu/local-mtu-too-small"]
    assert r.summary == "local MTU too small for DF pings of a size not shown (to a target not shown)"
    assert r.evidence[0] == "?: local_too_small: this node cannot send the frame: local MTU 1500"
    assert r.facts["peers"][0]["local_mtu"] == 1500 and r.facts["peers"][0]["jumbo_size"] is None


def test_sendmsg_without_header(tmp_path: Path) -> None:
    r = mtu(tmp_path, "ping: sendmsg: Message too long\nping: sendmsg: Message too long\n")
    assert r.status is Status.FAIL and codes(r) == ["net.mtu/local-mtu-too-small"]
    assert r.evidence[0] == "?: local_too_small: this node cannot send the frame: local MTU ?"


def test_frag_needed_without_header(tmp_path: Path) -> None:
    r = mtu(tmp_path, "From 10.0.0.1 icmp_seq=1 Frag needed and DF set (mtu = 1500)\n")
    assert r.status is Status.FAIL and codes(r) == ["net.mtu/frag-needed"]
    assert r.summary == "a hop needs fragmentation for DF pings of a size not shown to a target not shown"
    assert r.facts["peers"][0]["hop"] == "10.0.0.1" and r.facts["peers"][0]["hop_mtu"] == 1500


@pytest.mark.parametrize(("line", "tx", "rx", "loss"), [
    ("3 packets transmitted, 3 packets received, 1 duplicates, 0% packet loss", 3, 3, 0.0),  # BusyBox
    ("3 packets transmitted, 3 packets received, +1 duplicates, 0.0% packet loss", 3, 3, 0.0),  # BSD/macOS
    ("3 packets transmitted, 2 received, +1 duplicates, +1 corrupted, 33.3333% packet loss, time 2002ms", 3, 2,
     33.3333),  # iputils, every extra
    ("0 packets transmitted, 0 received", 0, 0, None),  # iputils: nothing sent, no loss printed
])
def test_statistics_layouts(line: str, tx: int, rx: int, loss: float | None) -> None:
    [run] = parse_runs([line])
    assert (run.transmitted, run.received, run.loss, run.stats) == (tx, rx, loss, True)


def test_rtt_line_alone(tmp_path: Path) -> None:
    [run] = parse_runs(["round-trip min/avg/max = 0.190/0.205/0.223 ms"])
    assert run.rtt_avg_ms == 0.205 and not run.stats
    r = mtu(tmp_path, RTT)
    assert r.status is Status.SKIP and codes(r) == ["net.mtu/size-not-shown"]
    assert r.summary.startswith("pings answered (rtt avg 0.205 ms); the size sent and the target are not shown")


def test_each_statistics_line_without_header_is_a_run() -> None:
    runs = parse_runs(["3 packets transmitted, 3 received, 0% packet loss, time 2003ms", RTT.strip(),
                       "3 packets transmitted, 0 received, 100% packet loss, time 2040ms"])
    assert [(r.received, r.loss, r.rtt_avg_ms) for r in runs] == [(3, 0.0, 0.205), (0, 100.0, None)]


def test_two_headerless_runs_grade_the_worst(tmp_path: Path) -> None:
    r = mtu(tmp_path, "3 packets transmitted, 3 received, 0% packet loss, time 2003ms\n" + RTT
            + "3 packets transmitted, 0 received, 100% packet loss, time 2040ms\n")
    assert r.status is Status.WARN and codes(r) == ["net.mtu/no-reply"]


def test_replies_without_header_or_statistics(tmp_path: Path) -> None:
    r = mtu(tmp_path, "8980 bytes from 10.0.0.2: icmp_seq=1 ttl=64 time=0.512 ms\n"
                      "8980 bytes from 10.0.0.2: icmp_seq=2 ttl=64 time=0.498 ms\n")
    assert r.status is Status.SKIP and codes(r) == ["net.mtu/size-not-shown"]
    assert r.summary.startswith("pings answered (2 replies); the size sent and the target are not shown")


# --------------------------------------------------------------------------- ping's own error lines no rule reads


def test_unread_error_line_is_said_beside_the_grade(tmp_path: Path) -> None:
    text = (HEADER + "8980 bytes from 10.0.0.2: icmp_seq=1 ttl=64 time=0.5 ms\n"
            "ping: sendmsg: No buffer space available\n"
            "ping: Warning: time of day goes back (-12us), taking countermeasures\n" + STATS_TAIL
            + "3 packets transmitted, 1 received, +1 errors, 66.6667% packet loss, time 2003ms\n")
    r = mtu(tmp_path, text)
    assert r.status is Status.WARN and codes(r) == ["net.mtu/unread-error", "net.mtu/jumbo-lossy"]
    assert r.summary == ("ping error line not in preflight's inventory of ping messages: ping: sendmsg: No buffer "
                         "space available; jumbo pings partly lost to 10.0.0.2")
    assert "ping: sendmsg: No buffer space available" in r.evidence
    assert not any("Warning" in e for e in r.evidence)  # a warning is not an error line


def test_unread_error_under_its_command_alone(tmp_path: Path) -> None:
    r = mtu(tmp_path, "$ ping -M do -s 8972 10.0.0.2\nping: socket: Operation not permitted\n")
    assert r.status is Status.WARN and codes(r) == ["net.mtu/unread-error", "net.mtu/not-recognised"]
    assert r.evidence[0] == "ping: socket: Operation not permitted"


def test_unread_error_beside_pings_of_no_size_shown(tmp_path: Path) -> None:
    r = mtu(tmp_path, "ping: recvmsg: Connection refused\n3 packets transmitted, 3 received, 0% packet loss\n")
    assert r.status is Status.WARN and codes(r) == ["net.mtu/unread-error", "net.mtu/size-not-shown"]


def test_read_error_lines_are_not_unread() -> None:
    from preflight.parsers.ping import unread_errors
    assert unread_errors(["ping: local error: message too long, mtu=1500", "ping: sendmsg: Message too long",
                          "ping: gpu-c099: Name or service not known", "ping: connect: Network is unreachable",
                          "ping: Warning: time of day goes back (-12us), taking countermeasures",
                          "pinging: nothing"]) == []
    assert unread_errors(["ping: local error: Operation not permitted", "ping6: socket: Address family not supported"
                          " by protocol"]) == ["ping: local error: Operation not permitted",
                                               "ping6: socket: Address family not supported by protocol"]
