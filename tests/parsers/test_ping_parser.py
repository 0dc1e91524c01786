"""preflight.parsers.ping: every layout and message, exact facts per run."""

from __future__ import annotations

import pytest

from preflight.framing import Doc, frame
from preflight.parsers import ping
from preflight.parsers.ping import PingRun, df_of, parse_runs


def doc(text: str) -> Doc:
    docs = frame(text).docs
    return docs[0] if len(docs) == 1 else Doc.join(docs)


def one(text: str, command: str = "") -> PingRun:
    [r] = parse_runs(text.strip("\n").split("\n"), command)
    return r


def facts(r: PingRun) -> dict:
    return {k: v for k, v in vars(r).items() if k != "lines"}


OK = """\
PING 10.45.3.22 (10.45.3.22) 8972(9000) bytes of data.
8980 bytes from 10.45.3.22: icmp_seq=1 ttl=64 time=0.211 ms
8980 bytes from 10.45.3.22: icmp_seq=2 ttl=64 time=0.188 ms
8980 bytes from 10.45.3.22: icmp_seq=3 ttl=64 time=0.192 ms

--- 10.45.3.22 ping statistics ---
3 packets transmitted, 3 received, 0% packet loss, time 2043ms
rtt min/avg/max/mdev = 0.188/0.197/0.211/0.010 ms
"""


# ----------------------------------------------------------------------------- df_of

@pytest.mark.parametrize(("command", "flavor", "want"), [
    ("ping -M do -s 8972 10.0.0.2", "iputils", True),
    ("ping -Mdo -s 8972 10.0.0.2", "iputils", True),
    ("ping -M probe -s 8972 10.0.0.2", "iputils", True),
    ("ping -M want -s 8972 10.0.0.2", "iputils", False),
    ("ping -M dont -s 8972 10.0.0.2", "iputils", False),
    ("ping -s 8972 10.0.0.2", "iputils", False),
    ("ping -D -s 8972 10.0.0.2", "iputils", False),  # iputils -D: time stamps
    ("ping -f -s 8972 10.0.0.2", "iputils", False),  # iputils -f: flood
    ("sudo ping6 -M do -s 8952 fd00::2", "iputils", True),
    ("ping -D -s 8972 10.0.0.2", "bsd", True),
    ("ping -nD -s 8972 10.0.0.2", "bsd", True),
    ("ping -s 8972 10.0.0.2", "bsd", False),
    ("ping -f -l 8972 10.0.0.2", "windows", True),
    ("ping /f /l 8972 10.0.0.2", "windows", True),
    ("ping -l 8972 10.0.0.2", "windows", False),
    ("ping.exe -f -l 8972 10.0.0.2", "windows", True),
    ("ls -l", "iputils", None),
    ("ping-jumbo-p1", "iputils", None),
    ("", "iputils", None),
    ("cat log | ping -M do -s 1472 x", "iputils", True),
])
def test_df_of(command: str, flavor: str, want: bool | None) -> None:
    assert df_of(command, flavor) is want


# ----------------------------------------------------------------------------- headers

def test_iputils_ipv4_run_facts() -> None:
    r = one(OK, "ping -M do -s 8972 -c 3 10.45.3.22")
    assert facts(r) == {
        "target": "10.45.3.22", "address": "10.45.3.22", "size": 8972, "frame": 9000, "transmitted": 3,
        "received": 3, "errors": 0, "loss": 0.0, "replies": [1, 2, 3], "error_seqs": [], "timeouts": [],
        "local_too_long_mtu": None, "local_too_long": False, "frag_needed_mtu": None, "frag_from": "",
        "unreachable": False, "unresolved": False, "df": True, "flavor": "iputils", "stats": True,
        "rtt_avg_ms": 0.197, "headed": True}
    assert r.lines == ["PING 10.45.3.22 (10.45.3.22) 8972(9000) bytes of data.",
                       "3 packets transmitted, 3 received, 0% packet loss, time 2043ms",
                       "rtt min/avg/max/mdev = 0.188/0.197/0.211/0.010 ms"]
    assert r.ok_replies == 3 and r.reported_mtu is None


@pytest.mark.parametrize(("header", "target", "address", "size", "frame", "flavor"), [
    ("PING 10.0.0.2 (10.0.0.2) 56(84) bytes of data.", "10.0.0.2", "10.0.0.2", 56, 84, "iputils"),
    ("PING gpu-c032 (10.45.3.32) from 10.45.3.21 ens9f0np0: 8972(9000) bytes of data.", "gpu-c032", "10.45.3.32",
     8972, 9000, "iputils"),
    ("PING 10.0.0.2 (10.0.0.2) from 10.0.0.1 : 56(84) bytes of data.", "10.0.0.2", "10.0.0.2", 56, 84, "iputils"),
    ("PING fd00::2(fd00::2) 8952 data bytes", "fd00::2", "fd00::2", 8952, 9000, "iputils"),
    ("PING fd00::2 (fd00::2) 8952 data bytes", "fd00::2", "fd00::2", 8952, 9000, "iputils"),
    ("PING fd00::2(fd00::2) from fd00::1 eth0: 56 data bytes", "fd00::2", "fd00::2", 56, 104, "iputils"),
    ("PING fd00::2 (fd00::2) , flow 0x12345, 56 data bytes", "fd00::2", "fd00::2", 56, 104, "iputils"),
    ("PING host6 (fe80::1%eth0) 56 data bytes", "host6", "fe80::1%eth0", 56, 104, "iputils"),
    ("PING 10.0.0.2 (10.0.0.2): 8972 data bytes", "10.0.0.2", "10.0.0.2", 8972, 9000, "bsd"),
    ("PING6(9000=40+8+8952 bytes) fd00::1 --> fd00::2", "fd00::2", "fd00::2", 8952, 9000, "bsd"),
    ("Pinging 10.0.0.2 with 8972 bytes of data:", "10.0.0.2", "10.0.0.2", 8972, 9000, "windows"),
    ("Pinging gpu-c032 [10.45.3.32] with 1472 bytes of data:", "gpu-c032", "10.45.3.32", 1472, 1500, "windows"),
    ("mtu-check INFO PING 10.0.0.2 (10.0.0.2) 56(84) bytes of data.", "10.0.0.2", "10.0.0.2", 56, 84, "iputils"),
    ("[node3] PING 10.0.0.2 (10.0.0.2) 56(84) bytes of data.", "10.0.0.2", "10.0.0.2", 56, 84, "iputils"),
])
def test_headers(header: str, target: str, address: str, size: int, frame: int, flavor: str) -> None:
    r = one(header)
    assert (r.target, r.address, r.size, r.frame, r.flavor) == (target, address, size, frame, flavor)
    assert r.lines == [header]


@pytest.mark.parametrize("line", ["PINGING 10.0.0.2 (10.0.0.2) 56(84) bytes of data.", "xPING 10.0.0.2 (10.0.0.2) 56(84)",
                                  "--- 10.0.0.2 ping statistics ---", "Ping statistics for 10.0.0.2:",
                                  "PING 10.0.0.2 (10.0.0.2) lots of data"])
def test_not_headers(line: str) -> None:
    assert parse_runs([line]) == []


# ----------------------------------------------------------------------------- replies, statistics

def test_reply_forms() -> None:
    text = """PING x (10.0.0.2): 56 data bytes
64 bytes from 10.0.0.2: seq=0 ttl=64 time=0.1 ms
64 bytes from 10.0.0.2: icmp_seq=1 ttl=64 time=0.1 ms
[1764065460.123456] 64 bytes from 10.0.0.2: icmp_seq=2 ttl=64 time=0.1 ms
64 bytes from gpu (10.0.0.2): icmp_seq=3 ttl=64 time=0.1 ms (DUP!)
16 bytes from fd00::2, icmp_seq=4 hlim=64 time=0.050 ms
64 bytes from fe80::1%eth0: icmp_seq=5 ttl=64 time=0.1 ms
"""
    r = one(text)
    assert r.replies == [0, 1, 2, 3, 4, 5] and r.ok_replies == 6 and r.stats is False


def test_windows_replies_and_timeouts_are_numbered_in_order() -> None:
    text = """Pinging 10.0.0.2 with 8972 bytes of data:
Reply from 10.0.0.2: bytes=8972 time<1ms TTL=64
Request timed out.
Reply from 10.0.0.2: bytes=8972 time=1ms TTL=64

Ping statistics for 10.0.0.2:
    Packets: Sent = 3, Received = 2, Lost = 1 (33% loss),
"""
    r = one(text, "ping -f -l 8972 10.0.0.2")
    assert (r.replies, r.timeouts, r.transmitted, r.received, r.loss, r.stats, r.df) == (
        [1, 3], [2], 3, 2, 33.0, True, True)


@pytest.mark.parametrize(("line", "tx", "rx", "errors", "loss"), [
    ("3 packets transmitted, 3 received, 0% packet loss, time 2043ms", 3, 3, 0, 0.0),
    ("4 packets transmitted, 0 received, +4 errors, 100% packet loss, time 3054ms", 4, 0, 4, 100.0),
    ("3 packets transmitted, 2 received, +1 duplicates, +1 corrupted, +1 errors, 33.3333% packet loss, time 2ms",
     3, 2, 1, 33.3333),
    ("2 packets transmitted, 2 received, +1 duplicates, 0% packet loss, time 1001ms", 2, 2, 0, 0.0),
    ("0 packets transmitted, 0 received, +1 errors", 0, 0, 1, None),
    ("3 packets transmitted, 2 packets received, 33.3% packet loss", 3, 2, 0, 33.3),
    ("3 packets transmitted, 3 packets received, +1 duplicates, 0.0% packet loss", 3, 3, 0, 0.0),
    ("    Packets: Sent = 4, Received = 0, Lost = 4 (100% loss),", 4, 0, 0, 100.0),
])
def test_statistics(line: str, tx: int, rx: int, errors: int, loss: float | None) -> None:
    r = one("PING 10.0.0.2 (10.0.0.2) 56(84) bytes of data.\n" + line)
    assert (r.transmitted, r.received, r.errors, r.loss, r.stats) == (tx, rx, errors, loss, True)
    assert r.lines[-1] == line.strip()
    assert r.ok_replies == rx


# ----------------------------------------------------------------------------- errors

@pytest.mark.parametrize(("line", "mtu"), [
    ("ping: local error: Message too long, mtu=1500", 1500),
    ("ping: local error: message too long, mtu=9000", 9000),
    ("ping: local error: message too long, mtu: 1500", 1500),
    ("ping6: local error: Message too long, mtu=1280", 1280),
    ("ping: local error: message too long", None),
    ("ping: sendmsg: Message too long", None),
    ("ping: sendto: Message too long", None),
    ("Packet needs to be fragmented but DF set.", None),
])
def test_local_too_long(line: str, mtu: int | None) -> None:
    r = one("PING 10.0.0.2 (10.0.0.2) 8972(9000) bytes of data.\n" + line)
    assert r.local_too_long and r.local_too_long_mtu == mtu and r.lines[-1] == line
    assert r.reported_mtu == mtu and not r.frag_from


@pytest.mark.parametrize(("line", "src", "seq", "mtu"), [
    ("From 10.45.0.1 icmp_seq=1 Frag needed and DF set (mtu = 1500)", "10.45.0.1", 1, 1500),
    ("From 10.45.0.1: icmp_seq=2 Frag needed and DF set (mtu = 1500)", "10.45.0.1", 2, 1500),
    ("From rt-1.example.net (10.0.0.1) icmp_seq=3 Frag needed and DF set (mtu = 1400)",
     "rt-1.example.net (10.0.0.1)", 3, 1400),
    ("From fd00::1 icmp_seq=1 Packet too big: mtu=1280", "fd00::1", 1, 1280),
    ("From fe80::1%eth0 icmp_seq=4 Packet too big: mtu=1500, code=1", "fe80::1%eth0", 4, 1500),
    ("36 bytes from 10.45.0.1: frag needed and DF set (MTU 1500)", "10.45.0.1", None, 1500),
    ("36 bytes from 10.45.0.1: frag needed and DF set", "10.45.0.1", None, None),
])
def test_frag_needed(line: str, src: str, seq: int | None, mtu: int | None) -> None:
    r = one("PING 10.0.0.9 (10.0.0.9) 8972(9000) bytes of data.\n" + line)
    assert (r.frag_from, r.frag_needed_mtu, r.error_seqs) == (src, mtu, [seq] if seq else [])
    assert r.reported_mtu == mtu and not r.local_too_long and r.lines[-1] == line and r.replies == []


@pytest.mark.parametrize("line", [
    "From 10.0.0.1 icmp_seq=1 Destination Host Unreachable",
    "From 10.0.0.1 icmp_seq=1 Destination Net Unreachable",
    "From 10.0.0.1 icmp_seq=1 Destination Port Unreachable",
    "From 10.0.0.1 icmp_seq=1 Destination Protocol Unreachable",
    "From 10.0.0.1 icmp_seq=1 Destination Host Unknown",
    "From 10.0.0.1 icmp_seq=1 Destination Host Prohibited",
    "From fd00::1 icmp_seq=1 Destination unreachable: Address unreachable",
    "From 10.0.0.1 icmp_seq=1 Time to live exceeded",
    "From fd00::1 icmp_seq=1 Time exceeded: Hop limit",
    "ping: sendmsg: Network is unreachable",
    "ping: sendto: No route to host",
    "ping: sendto: Host is down",
    "From 10.0.0.1 icmp_seq=1 Packet filtered",
    "Destination host unreachable.",
    "General failure.",
])
def test_unreachable(line: str) -> None:
    r = one("PING 10.0.0.9 (10.0.0.9) 56(84) bytes of data.\n" + line)
    assert r.unreachable and not r.unresolved and r.lines[-1] == line
    assert r.error_seqs == ([1] if "icmp_seq=1" in line else [])


@pytest.mark.parametrize(("line", "target"), [
    ("ping: gpu-c099: Name or service not known", "gpu-c099"),
    ("ping: gpu-c099.local: Temporary failure in name resolution", "gpu-c099.local"),
    ("ping: gpu-c099: No address associated with hostname", "gpu-c099"),
    ("ping6: gpu-c099: Name or service not known", "gpu-c099"),
    ("ping: unknown host gpu-c099", "gpu-c099"),
    ("ping: cannot resolve gpu-c099: Unknown host", "gpu-c099"),
    ("ping: bad address 'gpu-c099'", "gpu-c099"),
    ("ping: gpu-c099: nodename nor servname provided, or not known", "gpu-c099"),
    ("Ping request could not find host gpu-c099. Please check the name and try again.", ""),
])
def test_unresolved_is_a_run_of_its_own(line: str, target: str) -> None:
    runs = parse_runs([*OK.splitlines(), line])
    assert [r.target for r in runs] == ["10.45.3.22", target]
    assert runs[1].unresolved and not runs[0].unresolved and runs[1].lines == [line]


def test_connect_error_is_a_run_of_its_own() -> None:
    runs = parse_runs([*OK.splitlines(), "ping: connect: Network is unreachable"])
    assert len(runs) == 2 and runs[1].unreachable and runs[1].target == "" and not runs[0].unreachable


def test_orphan_errors_before_any_header() -> None:
    [r] = parse_runs(["ping: local error: message too long, mtu=1500", "ping: local error: message too long, mtu=1500"])
    assert r.local_too_long and r.local_too_long_mtu == 1500 and r.target == "" and len(r.lines) == 2
    # a reply pasted without its header: a run of its own, its target and size not shown
    [reply] = parse_runs(["some other line", "64 bytes from 10.0.0.2: icmp_seq=1 ttl=64"])
    assert (reply.replies, reply.target, reply.size, reply.headed) == ([1], "", None, False)
    assert parse_runs(["some other line", "64 bytes of data"]) == []


@pytest.mark.parametrize(("line", "seq"), [
    ("no answer yet for icmp_seq=7", 7),
    ("Request timeout for icmp_seq 3", 3),
    ("[1764065460.123456] no answer yet for icmp_seq=2", 2),
    ("Request timed out.", 1),
])
def test_unanswered(line: str, seq: int) -> None:
    r = one("PING 10.0.0.9 (10.0.0.9) 8972(9000) bytes of data.\n" + line)
    assert r.timeouts == [seq] and r.replies == [] and r.lines[-1] == line


# ----------------------------------------------------------------------------- command lines

def test_df_per_command_when_prompts_match_headers() -> None:
    text = ("$ ping -s 1472 -c1 10.0.0.2\nPING 10.0.0.2 (10.0.0.2) 1472(1500) bytes of data.\n"
            "1480 bytes from 10.0.0.2: icmp_seq=1 ttl=64 time=0.1 ms\n"
            "$ ping -M do -s 8972 -c1 10.0.0.2\nPING 10.0.0.2 (10.0.0.2) 8972(9000) bytes of data.\n"
            "8980 bytes from 10.0.0.2: icmp_seq=1 ttl=64 time=0.1 ms\n")
    runs = ping.parse(doc(text)).runs
    assert [(r.size, r.df) for r in runs] == [(1472, False), (8972, True)]


def test_df_shared_or_unknown() -> None:
    two = OK + OK
    assert [r.df for r in parse_runs(two.splitlines(), "ping -M do -s 8972 a ; ping -M do -s 8972 b ; ping x")] == [
        None, None]
    assert [r.df for r in parse_runs(two.splitlines(), "ping -M do a ; ls ; ping -M do b ; ping -M do c")] == [
        True, True]
    assert [r.df for r in parse_runs(two.splitlines(), "ping -M do -s 8972 a")] == [True, True]
    assert [r.df for r in parse_runs(two.splitlines(), "ping -M do a ; ping -M want b ; ping c")] == [None, None]
    assert [r.df for r in parse_runs(two.splitlines(), "")] == [None, None]


def test_inline_command_line_sets_the_next_run() -> None:
    text = ("  ping 21.0.0.3 -M do -s 1300 -c2\n  PING 21.0.0.3 (21.0.0.3) 1300(1328) bytes of data.\n"
            "sudo ping -s 1300 21.0.0.3\nPING 21.0.0.3 (21.0.0.3) 1300(1328) bytes of data.\n"
            "PING 21.0.0.4 (21.0.0.4) 1300(1328) bytes of data.\n")
    runs = parse_runs(text.splitlines(), "ping -M do x")
    assert [r.df for r in runs] == [True, False, True]


# ----------------------------------------------------------------------------- documents

def test_parse_keeps_excerpt_and_command() -> None:
    d = doc("[root@n1 ~]# ping -M do -s 8972 -c 3 10.45.3.22\n" + OK)
    f = ping.parse(d)
    assert d.command == "ping -M do -s 8972 -c 3 10.45.3.22" and f.runs[0].df is True and f.excerpt is d.excerpt


@pytest.mark.parametrize(("text", "want"), [
    (OK, True),
    ("PING 10.0.0.2 (10.0.0.2) 56(84) bytes of data.\n", False),
    ("PING 10.0.0.2 (10.0.0.2) 56(84) bytes of data.\nno answer yet for icmp_seq=1\n", True),
    ("PING 10.0.0.2 (10.0.0.2) 8972(9000) bytes of data.\nping: local error: message too long, mtu=1500\n", True),
    ("PING 10.0.0.2 (10.0.0.2) 8972(9000) bytes of data.\nFrom 10.0.0.1 icmp_seq=1 Destination Host Unreachable\n",
     True),
    ("PING x (10.0.0.2) 8972(9000) bytes of data.\nFrom fd00::1 icmp_seq=1 Packet too big: mtu=1280\n", True),
    ("PING x (10.0.0.2) 8972(9000) bytes of data.\nFrom 10.0.0.1 icmp_seq=1 Frag needed and DF set (mtu = 1500)\n",
     True),
    ("Pinging 10.0.0.2 with 32 bytes of data:\nReply from 10.0.0.2: bytes=32 time<1ms TTL=64\n", True),
    ("Pinging 10.0.0.2 with 32 bytes of data:\n    Packets: Sent = 4, Received = 4, Lost = 0 (0% loss),\n", True),
    ("PING6(104=40+8+56 bytes) fd00::1 --> fd00::2\n16 bytes from fd00::2, icmp_seq=0 hlim=64 time=0.05 ms\n", True),
    ("ping: gpu-c099: Name or service not known\n", True),
    ("ping: connect: Network is unreachable\n", True),
    ("ping: local error: message too long, mtu=1500\n", True),
    ("curl: (6) Could not resolve host: x; Name or service not known\n", False),
    ("3 packets transmitted, 3 received, 0% packet loss\n", True),
    ("rtt min/avg/max/mdev = 0.190/0.205/0.223/0.013 ms\n", True),
    ("round-trip min/avg/max = 0.190/0.205/0.223 ms\n", True),
    ("From 10.0.0.1 icmp_seq=1 Frag needed and DF set (mtu = 1500)\n", True),
    ("64 bytes from 10.0.0.2: icmp_seq=1 ttl=64 time=0.2 ms\n", True),
    ("64 bytes from 10.0.0.2: seq=1 ttl=64 time=0.2 ms\n", False),
    ("3 packets transmitted\n", False),
    ("garbage\n", False),
    ("", False),
])
def test_detect(text: str, want: bool) -> None:
    assert ping.detect(doc(text)) is want


def test_detect_errors_under_a_ping_command_line() -> None:
    d = doc("$ ping -M do -s 8972 gpu-c099\nName or service not known\n")
    assert d.command.startswith("ping") and ping.detect(d)
    assert not ping.detect(doc("$ curl gpu-c099\nName or service not known\n"))


def test_detect_excerpt_header_only() -> None:
    d = doc("PING 10.0.0.2 (10.0.0.2) 56(84) bytes of data.\n")
    d.excerpt = True
    assert ping.detect(d)


def test_defaults_and_registration() -> None:
    r = PingRun()
    assert (r.errors, r.flavor, r.df, r.stats, r.loss, r.size, r.frame) == (0, "iputils", None, False, None, None, None)
    assert ping.PingFacts().excerpt is False and ping.PingFacts().runs == []
    assert df_of("ping -M do -s 8972 x") is True and df_of("ping -D -s 8972 x") is False
    [fmt] = ping.FORMATS
    assert (fmt.name, fmt.priority, fmt.probe) == ("ping", 55, "")
    assert [(p.probe, p.prefix) for p in ping.PARSERS] == [("ping", False), ("ping-jumbo-", True),
                                                          ("ping-small-", True)]


def test_several_unanswered_windows_probes_are_numbered_in_order() -> None:
    text = "Pinging 10.0.0.2 with 8972 bytes of data:\nRequest timed out.\nRequest timed out.\nRequest timed out.\n"
    assert one(text).timeouts == [1, 2, 3]


def test_lines_before_the_first_header_are_skipped_not_the_rest() -> None:
    runs = parse_runs(["some other line", *OK.splitlines()])
    assert len(runs) == 1 and runs[0].replies == [1, 2, 3]


def test_the_first_kind_that_matches_says_what_a_line_is() -> None:
    r = one("PING gw (10.0.0.1) 56(84) bytes of data.\n"
            "64 bytes from no-route-to-host.gw (10.0.0.1): icmp_seq=1 ttl=64 time=0.1 ms Destination Host Unreachable")
    assert r.replies == [1] and not r.unreachable and r.lines == ["PING gw (10.0.0.1) 56(84) bytes of data."]


# ----------------------------------------------------------------------------- flattened and re-wrapped pastes

def test_segments_cut_joined_messages_and_keep_a_prefix_with_its_message() -> None:
    assert ping.segments(["[node3] PING 10.0.0.2 (10.0.0.2) 56(84) bytes of data. 64 bytes from 10.0.0.2: icmp_seq=1 "
                          "ttl=64 time=0.1 ms 64 bytes from 10.0.0.2: icmp_seq=2 ttl=64 time=0.1 ms"]) == [
        "[node3] PING 10.0.0.2 (10.0.0.2) 56(84) bytes of data.", "64 bytes from 10.0.0.2: icmp_seq=1 ttl=64 time=0.1 ms",
        "64 bytes from 10.0.0.2: icmp_seq=2 ttl=64 time=0.1 ms"]
    assert ping.segments(["--- 10.0.0.2 ping statistics --- 2 packets transmitted, 2 received, 0% packet loss"]) == [
        "--- 10.0.0.2 ping statistics ---", "2 packets transmitted, 2 received, 0% packet loss"]
    # a command line after prose is its own segment; prose alone is kept as it is
    assert ping.segments(["Test it: ping -M do -s 8972 gpu-c032"]) == ["Test it:", "ping -M do -s 8972 gpu-c032"]
    assert ping.segments(["  ping the host first  ", "", "   "]) == ["ping the host first"]
    assert ping.segments([]) == []


def test_segments_undo_markdown_escapes() -> None:
    assert ping.segments([r"8980 bytes from h (10.0.0.2): icmp\_seq=1 ttl=64", r"ping \-M do \-s 8972 h \\ x\#y"]) == [
        "8980 bytes from h (10.0.0.2): icmp_seq=1 ttl=64", r"ping -M do -s 8972 h \ x#y"]
    assert ping.segments([r"a\qb \_\*\`\{\}\[\]\(\)\+\.\!\~\$\|\<\>"]) == [r"a\qb _*`{}[]()+.!~$|<>"]


def test_segments_join_a_message_cut_at_the_end_of_a_line() -> None:
    assert ping.segments(["PING h (10.0.0.2) 8972(9000) bytes of data. From",
                          "gw.local (10.0.2.1) icmp_seq=1 Frag needed and DF set (mtu = 1500)"]) == [
        "PING h (10.0.0.2) 8972(9000) bytes of data.", "From gw.local (10.0.2.1) icmp_seq=1 Frag needed and DF set "
        "(mtu = 1500)"]
    # a command cut after an option, a header cut before its size, a reply cut before its sequence number
    assert ping.segments(["see: ping -M do -s", "8972 h PING h (10.0.0.2) 8972(9000)", "bytes of data."]) == [
        "see:", "ping -M do -s 8972 h", "PING h (10.0.0.2) 8972(9000) bytes of data."]
    assert ping.segments(["8980 bytes from h (10.0.0.2):", "icmp_seq=1 ttl=64"]) == [
        "8980 bytes from h (10.0.0.2): icmp_seq=1 ttl=64"]
    # whole messages at the end of a line stay where they are
    assert ping.segments(["ping -M do -s 8972 h", "PING h (10.0.0.2) 8972(9000) bytes of data."]) == [
        "ping -M do -s 8972 h", "PING h (10.0.0.2) 8972(9000) bytes of data."]
    assert ping.segments(["ping: connect: Network is unreachable", "x"]) == ["ping: connect: Network is unreachable",
                                                                              "x"]


def test_segments_a_blank_line_ends_a_cut_message_and_a_carried_one_is_not_carried_again() -> None:
    assert ping.segments(["data. From", "", "gw icmp_seq=1 Frag needed"]) == ["data.", "From",
                                                                              "gw icmp_seq=1 Frag needed"]
    assert ping.segments(["x From"]) == ["x", "From"]
    # the carried text joined with a line that does not complete it is not carried on
    assert ping.segments(["x From", "nowhere", "icmp_seq=1 Frag needed"]) == ["x", "From nowhere",
                                                                              "icmp_seq=1 Frag needed"]
    # ... but a new cut opening after it is
    assert ping.segments(["x From", "a From", "gw icmp_seq=1 Frag needed"]) == [
        "x", "From a", "From gw icmp_seq=1 Frag needed"]


def test_flattened_wiki_transcript() -> None:
    lines = ["Check the path (9000 MTU): ping -M do -s", "8972 gpu-c032.example.org PING gpu-c032.example.org "
             "(10.4.0.32) 8972(9000) bytes of", r"data. 8980 bytes from gpu-c032.example.org (10.4.0.32): icmp\_seq=1 "
             r"ttl=64 time=0.2 ms 8980 bytes from gpu-c032.example.org (10.4.0.32): icmp\_seq=2 ttl=64", "time=0.19 ms",
             "", r"Another one: ops@gpu-c001:\~\$ ping -M do -s 8972 gpu-c040.example.org",
             "PING gpu-c040.example.org (10.4.0.40) 8972(9000) bytes of data. From",
             r"gpu-c001.local (10.4.0.1) icmp\_seq=1 Frag needed and DF set (mtu = 1500) From gpu-c001.local "
             r"(10.4.0.1) icmp\_seq=2 Frag needed and DF set (mtu = 1500)"]
    ok, bad = parse_runs(lines)
    assert (ok.target, ok.size, ok.frame, ok.replies, ok.df, ok.stats) == ("gpu-c032.example.org", 8972, 9000, [1, 2],
                                                                          True, False)
    assert (bad.target, bad.address, bad.frag_needed_mtu, bad.frag_from, bad.error_seqs, bad.df) == (
        "gpu-c040.example.org", "10.4.0.40", 1500, "gpu-c001.local (10.4.0.1)", [1, 2], True)
    assert bad.lines[0] == "PING gpu-c040.example.org (10.4.0.40) 8972(9000) bytes of data."
    assert ping.detect(doc("\n".join(lines)))
    # the markdown-escaped reply alone under a header
    assert ping.detect(doc("PING h (10.0.0.2) 8972(9000) bytes of data.\n" r"8980 bytes from h: icmp\_seq=1 ttl=64"))


def test_header_cut_after_bytes_and_not_before() -> None:
    assert one("PING h (10.0.0.2) 8972(9000) bytes").size == 8972
    assert parse_runs(["PING h (10.0.0.2) 8972(9000)"]) == []
    assert parse_runs(["PING h (10.0.0.2) 8972(9000) bytesx"]) == []


def test_segments_a_whole_command_is_not_carried_and_a_cut_message_leaves_the_others() -> None:
    assert ping.segments(["ping -M do -s 8972 h", "x"]) == ["ping -M do -s 8972 h", "x"]
    assert ping.segments(["x PING h (10.0.0.2) 56(84) bytes of data. 64 bytes from h: icmp_seq=1 ttl=64 "
                          "64 bytes from h: icmp_seq=2 ttl=64 From", "gw icmp_seq=3 Frag needed"]) == [
        "x PING h (10.0.0.2) 56(84) bytes of data.", "64 bytes from h: icmp_seq=1 ttl=64",
        "64 bytes from h: icmp_seq=2 ttl=64", "From gw icmp_seq=3 Frag needed"]


# ------------------------------------------------------------------ headers cut: the command says what ran

CUT = ("$ sudo nslab exec --node h1 -- ping -c 2 -W 2 -M do -s 1472 10.71.0.2\n...\n"
       "2 packets transmitted, 2 received, 0% packet loss\n"
       "$ sudo nslab exec --node h1 -- ping -c 1 -W 2 -M do -s 1473 10.71.0.2\n"
       "ping: local error: message too long, mtu=1500\n...\n")


def test_runs_whose_headers_were_cut_take_size_and_target_from_their_commands() -> None:
    docs = [d for d in frame(CUT).docs if ping.detect(d)]
    assert len(docs) == 2
    joined = Doc.join(docs)
    assert joined.parts == [(2, docs[0].command), (2, docs[1].command)]
    a, b = ping.parse(joined).runs
    assert (a.target, a.size, a.frame, a.df, a.transmitted, a.received) == ("10.71.0.2", 1472, 1500, True, 2, 2)
    assert (b.target, b.size, b.frame, b.df, b.local_too_long_mtu) == ("10.71.0.2", 1473, 1501, True, 1500)


@pytest.mark.parametrize(("command", "target", "size"), [
    ("ping -M do -s 8972 -c 3 10.0.0.2", "10.0.0.2", 8972), ("ping -s8972 -Mdo peer7", "peer7", 8972),
    ("ping -c 3 -I eth1 fe80::1", "fe80::1", None), ("ping.exe -f -l 8972 10.0.0.9", "10.0.0.9", 8972),
    ("ping -c", "", None), ("ping -s x 10.0.0.1", "10.0.0.1", None), ("ping 10.0.0.4 -c 3 -I eth1", "10.0.0.4", None),
    ("ping -s 100 - 10.0.0.3", "10.0.0.3", 100), ("ping -s 64 -1", "-1", 64)])
def test_the_run_a_command_starts(command: str, target: str, size: int | None) -> None:
    run = ping._from_command(command)
    assert run is not None and (run.target, run.address, run.size) == (target, target, size)
    assert run.frame == (None if size is None else size + (48 if ":" in target else 28))
    assert ping._from_command("ls -l /tmp") is None


def test_statistics_alone_take_size_and_target_only_from_one_ping_command() -> None:
    stats = ["2 packets transmitted, 2 received, 0% packet loss"]
    [r] = parse_runs(stats, "ping -M do -s 8972 10.0.0.2")
    assert (r.size, r.received, r.df, r.target, r.headed) == (8972, 2, True, "10.0.0.2", False)
    [bare] = parse_runs(stats, "")
    assert (bare.size, bare.target, bare.transmitted, bare.received, bare.loss, bare.df) == (None, "", 2, 2, 0.0, None)
    [two] = parse_runs(stats, "ping -s 1 a ; ping -s 2 b")  # which of the two: not shown
    assert (two.size, two.target) == (None, "")
    assert ping.detect(Doc(stats[0] + "\n", command="ping -M do -s 8972 10.0.0.2"))
    assert ping.detect(Doc(stats[0] + "\n", command="ls"))
