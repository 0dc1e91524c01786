"""net.mtu grading (checks/mtu.py): the ping pair of a run, saved transcripts (boundary probes,
non-DF pings, several peers) and the configured MTU; every code with its summary and remedy."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight import profile as profiles
from preflight.checks import mtu
from preflight.model import Capture, CaptureState, Result, Status
from preflight.parsers.ping import PingRun
from preflight.registry import Options, PlanContext
from tests.conftest import capture, grade, grade_text

H100 = "h100-sxm-8x"


def transcript(text: str, profile: str = "generic") -> Result:
    [r] = grade_text("net.mtu", {"ping": text}, profile=profile)
    return r


def codes(r: Result) -> list[str]:
    return list(r.facts.get("codes", []))


def run(size: int, peer: str = "10.45.3.22", frame: int | None = None, replies: int = 0, tx: int | None = None,
        rx: int | None = None, lines: list[str] | None = None, v6: bool = False) -> str:
    """A ping transcript in iputils' layout."""
    frame = frame or size + (48 if v6 else 28)
    head = f"PING {peer} ({peer}) {size} data bytes" if v6 else f"PING {peer} ({peer}) {size}({frame}) bytes of data."
    body = [f"{size + 8} bytes from {peer}: icmp_seq={n} ttl=64 time=0.2 ms" for n in range(1, replies + 1)]
    body += lines or []
    if tx is not None:
        got = replies if rx is None else rx
        errs = f", +{tx - got} errors" if lines and tx > got else ""
        loss = (tx - got) * 100 / tx if tx else 0
        body += ["", f"--- {peer} ping statistics ---", f"{tx} packets transmitted, {got} received{errs}, {loss:g}% "
                 "packet loss, time 2003ms"]
    return "\n".join([head, *body]) + "\n"


LOCAL = "ping: local error: message too long, mtu={}"
FRAG = "From {} icmp_seq={} Frag needed and DF set (mtu = {})"


# ----------------------------------------------------------------------------- peers and probes

@pytest.mark.parametrize("peer", ["gpu-c032", "gpu-c032.cluster.local", "10.45.3.22", "fd00::2", "a", "a-b.c-d"])
def test_valid_peers(peer: str) -> None:
    assert mtu.valid_peer(peer)


@pytest.mark.parametrize("peer", ["-oProxyCommand=x", "a b", "host;rm", "", "x" * 254, "fe80::1%eth0", "$(id)", "-c1",
                                  "a..b", "-", "a-", "_a"])
def test_invalid_peers(peer: str) -> None:
    assert not mtu.valid_peer(peer)


def test_payloads() -> None:
    assert mtu._payload("10.0.0.2", 9000) == 8972 and mtu._payload("fd00::2", 9000) == 8952
    assert mtu._payload("gpu-c032", 1500) == 1472


def test_probes(tmp_path: Path) -> None:
    p = tmp_path / "s.toml"
    p.write_text('[profile]\nname = "s"\nextends = "h100-sxm-8x"\n[net]\nping_count = { value = 5, source = "s" }\n'
                 'ping_timeout_s = { value = 2, source = "s" }\nping_interval_s = { value = 0.5, source = "s" }\n'
                 'small_ping_size = { value = 100, source = "s" }\n')
    prof = profiles.load(str(p))
    ctx = PlanContext(node="n1", profile=prof, options=Options(peers=["10.0.0.2", "bad peer"]))
    probes = {x.name: x for x in mtu.mtu_probes(ctx)}
    assert list(probes) == ["ip-addr", "ping-jumbo-10.0.0.2", "ping-small-10.0.0.2"]
    assert list(probes["ping-jumbo-10.0.0.2"].commands[0]) == ["ping", "-n", "-M", "do", "-s", "8972", "-c", "5", "-i", "0.5",
                                                          "-W", "2", "10.0.0.2"]
    assert probes["ping-small-10.0.0.2"].commands[0][5] == "100"
    assert probes["ping-jumbo-10.0.0.2"].timeout == 2 + 5 * 0.5 + 2.0
    generic = PlanContext(node="n1", profile=profiles.load("generic"), options=Options(peers=["10.0.0.2"]))
    assert [x.name for x in mtu.mtu_probes(generic)] == ["ip-addr"]
    assert mtu._ping_settings(profiles.load(H100)) == (3, 3, 0.2)


# ----------------------------------------------------------------------------- outcomes

def R(**kw: object) -> PingRun:  # noqa: N802
    return PingRun(target="p", **kw)  # type: ignore[arg-type]


OK_SMALL = R(size=56, loss=0.0, stats=True, replies=[1, 2, 3])


@pytest.mark.parametrize(("jumbo", "small", "outcome", "why"), [
    (R(loss=0.0, stats=True), OK_SMALL, "ok", "jumbo frames pass"),
    (R(loss=0.0, stats=True), R(unresolved=True), "unresolved", "the peer name does not resolve"),
    (R(loss=0.0), R(loss=100.0), "unreachable", "small pings fail too: the peer is down or unreachable (not an MTU "
                                                "problem)"),
    (R(loss=0.0), R(unreachable=True), "unreachable", "small pings fail too: the peer is down or unreachable (not an "
                                                      "MTU problem)"),
    (None, OK_SMALL, "unknown", "no jumbo ping result"),
    (R(frag_from="10.0.0.1", frag_needed_mtu=1500), OK_SMALL, "frag_needed", "a hop (10.0.0.1) answered Frag needed, "
                                                                            "mtu 1500"),
    (R(frag_needed_mtu=1500), OK_SMALL, "frag_needed", "a hop (?) answered Frag needed, mtu 1500"),
    (R(frag_from="h"), OK_SMALL, "frag_needed", "a hop (h) answered Frag needed, mtu ?"),
    (R(frag_from="h", frag_needed_mtu=1142, error_seqs=[3], replies=[2]), OK_SMALL, "frag_needed",
     "a hop (h) answered Frag needed, mtu 1142; icmp_seq 1 vanished without an answer"),
    (R(frag_from="h", frag_needed_mtu=1142, error_seqs=[4, 2]), OK_SMALL, "frag_needed",
     "a hop (h) answered Frag needed, mtu 1142; icmp_seq 1, 3 vanished without an answer"),
    (R(local_too_long=True, local_too_long_mtu=1500), OK_SMALL, "local_too_small",
     "this node cannot send the frame: local MTU 1500"),
    (R(local_too_long=True), None, "local_too_small", "this node cannot send the frame: local MTU ?"),
    (R(unresolved=True), None, "unresolved", "the peer name does not resolve"),
    (R(unreachable=True), None, "unreachable", "destination unreachable"),
    (R(unreachable=True, loss=100.0), OK_SMALL, "silent_loss", "small pings pass, jumbo pings vanish without an "
                                                               "error: an MTU black hole on the path"),
    (R(loss=100.0), None, "no_reply", "jumbo pings got no reply and no small ping ran to rule out a down peer"),
    (R(loss=33.3), OK_SMALL, "lossy", "33.3% of jumbo pings lost"),
    (R(replies=[1]), OK_SMALL, "ok", "1 jumbo reply seen (no statistics shown: loss not measured)"),
    (R(replies=[1, 2, 2]), OK_SMALL, "ok", "2 jumbo replies seen (no statistics shown: loss not measured)"),
    (R(timeouts=[1, 2]), OK_SMALL, "silent_loss", "small pings pass, jumbo pings vanish without an error: an MTU "
                                                  "black hole on the path"),
    (R(timeouts=[1]), None, "no_reply", "jumbo pings got no reply and no small ping ran to rule out a down peer"),
    (R(), OK_SMALL, "unknown", "the jumbo ping printed no statistics (killed or truncated)"),
    (R(loss=0.0), R(loss=99.0), "ok", "jumbo frames pass"),
])
def test_jumbo_outcome(jumbo: PingRun | None, small: PingRun | None, outcome: str, why: str) -> None:
    assert mtu.jumbo_outcome(jumbo, small) == (outcome, why)


def test_run_loss() -> None:
    assert mtu._run_loss(None) is None and mtu._run_loss(R()) is None and mtu._run_loss(R(loss=5.0)) == 5.0
    for kw in ({"unresolved": True}, {"unreachable": True}, {"local_too_long": True}):
        assert mtu._run_loss(R(**kw)) == 100.0


@pytest.mark.parametrize(("outcome", "run_", "remedy"), [
    ("local_too_small", None, "raise this node's interface MTU to 9000 (`ip link set dev <iface> mtu 9000`, persist "
                              "it), or clear a stale cached path MTU (`ip route flush cache`)"),
    ("frag_needed", R(frag_from="rt1 (10.0.0.1)", frag_needed_mtu=1500),
     "rt1 (10.0.0.1) allows 1500 bytes: raise the MTU of that hop (switch/router port or tunnel on the path to p2) "
     "to 9000"),
    ("frag_needed", None, "the reporting hop: raise the MTU of that hop (switch/router port or tunnel on the path to "
                          "p2) to 9000"),
    ("silent_loss", None, "a device on the path to p2 drops jumbo frames silently: check the switch port MTU, the "
                          "peer's interface MTU and any bridge/veth in between; all must be >= 9000"),
    ("lossy", None, "jumbo frames to p2 are partly lost: check errors/drops on the link (ethtool -S, switch counters)"),
    ("unreachable", None, "p2 is down or unreachable from here: check the peer and the route; the MTU was not tested"),
    ("unresolved", None, "p2 is down or unreachable from here: check the peer and the route; the MTU was not tested"),
    ("not_df", None, "ping p2 with `-M do -s <MTU - 28>` so that no fragment hides a smaller MTU"),
    ("no_reply", None, "run the ping pair to p2 by hand"),
    ("unknown", None, "run the ping pair to p2 by hand"),
])
def test_remedies(outcome: str, run_: PingRun | None, remedy: str) -> None:
    assert mtu._remedy(outcome, "p2", run_, 9000) == remedy


def test_codes_and_order() -> None:
    assert set(mtu.CODES) == set(mtu._ORDER) - {"ok"}
    assert mtu._ORDER.index("local_too_small") < mtu._ORDER.index("frag_needed") < mtu._ORDER.index("silent_loss") \
        < mtu._ORDER.index("lossy") < mtu._ORDER.index("no_reply") < mtu._ORDER.index("unreachable") \
        < mtu._ORDER.index("unresolved") < mtu._ORDER.index("unknown") < mtu._ORDER.index("not_df") \
        < mtu._ORDER.index("ok")


def test_names() -> None:
    peers = [{"peer": f"n{i}"} for i in range(7)]
    assert mtu._names(peers[:5]) == "n0, n1, n2, n3, n4"
    assert mtu._names(peers) == "n0, n1, n2, n3, n4 (+2)"


# ----------------------------------------------------------------------------- the live ping pair

def _live(jumbo: Capture | str, small: Capture | str, profile: str = H100, peers: tuple[str, ...] = ("p1",)) -> Result:
    caps: dict[str, Capture] = {}
    for peer in peers:
        for kind, c in (("jumbo", jumbo), ("small", small)):
            name = f"ping-{kind}-{peer}"
            caps[name] = c if isinstance(c, Capture) else capture(name, c, argv=["ping", "-M", "do", "-s", "8972", peer])
    [r] = grade("net.mtu", caps, profile=profile, peers=list(peers))
    return r


def test_live_pair_outcomes() -> None:
    r = _live(run(8972, "p1", replies=3, tx=3), run(56, "p1", replies=3, tx=3))
    assert r.status is Status.PASS and codes(r) == [] and r.summary == "8972-byte DF pings pass to 1 peer(s)"
    assert r.evidence == ["p1: ok"]
    assert r.facts["peers"] == [{"peer": "p1", "outcome": "ok", "jumbo_loss": 0.0, "small_loss": 0.0,
                                 "jumbo_size": 8972, "small_size": 56, "local_mtu": None, "hop": "", "hop_mtu": None,
                                 "replies": 3, "statistics": True, "reason": "jumbo frames pass"}]
    assert (r.facts["outcome"], r.facts["size"], r.facts["mtu"]) == ("ok", 8972, 9000)
    r = _live(run(8972, "p1", tx=3), run(56, "p1", replies=3, tx=3), peers=("p1", "p2"))
    assert codes(r) == ["net.mtu/silent-loss"] and r.status is Status.FAIL
    assert r.summary == "jumbo frames vanish silently on the path to p1, p2 (MTU black hole)"
    assert r.evidence[0] == ("p1: silent_loss: small pings pass, jumbo pings vanish without an error: an MTU black hole "
                             "on the path")
    assert r.evidence[-1].startswith("net.mtu = 9000 (")
    assert r.remedy.count("drops jumbo frames silently") == 2


def test_live_pair_mixed_outcomes_name_each() -> None:
    caps = {
        "ping-jumbo-a": capture("ping-jumbo-a", run(8972, "a", tx=1, lines=[LOCAL.format(1500)])),
        "ping-small-a": capture("ping-small-a", run(56, "a", replies=1, tx=1)),
        "ping-jumbo-b": capture("ping-jumbo-b", run(8972, "b", replies=2, rx=2, tx=3)),
        "ping-small-b": capture("ping-small-b", run(56, "b", replies=3, tx=3)),
    }
    [r] = grade("net.mtu", caps, profile=H100, peers=["a", "b"])
    assert codes(r) == ["net.mtu/local-mtu-too-small", "net.mtu/jumbo-lossy"]
    assert r.summary == "local MTU too small for 8972-byte DF pings (to a); jumbo pings partly lost to b"
    assert r.facts["outcome"] == "local_too_small"
    assert "ping: local error: message too long, mtu=1500" in r.evidence


def test_live_timeout_and_failures() -> None:
    timeout = Capture("ping-jumbo-p1", ["ping"], CaptureState.TIMEOUT, reason="killed after 5.6 s")
    r = _live(timeout, run(56, "p1", replies=3, tx=3))
    assert codes(r) == ["net.mtu/silent-loss"]
    assert r.facts["peers"][0]["reason"].endswith("(ping was killed at its time limit)")
    assert "killed after 5.6 s" in r.evidence
    failed = Capture("ping-jumbo-p1", ["ping"], CaptureState.FAILED, reason="Permission denied")
    r = _live(failed, run(56, "p1", replies=3, tx=3))
    assert codes(r) == ["net.mtu/no-result"] and r.facts["peers"][0]["reason"] == "no jumbo ping result (Permission denied)"
    empty = capture("ping-jumbo-p1", "")
    r = _live(empty, run(56, "p1", replies=3, tx=3))
    assert codes(r) == ["net.mtu/no-result"] and r.facts["peers"][0]["reason"] == "no jumbo ping result"


def test_peer_run() -> None:
    assert mtu._peer_run(None, None) == (None, "not run")


def test_live_ping_missing(tmp_path: Path) -> None:
    miss = Capture("ping-jumbo-p1", ["ping"], CaptureState.MISSING, reason="ping not found on PATH")
    r = _live(miss, miss)
    assert r.status is Status.SKIP and codes(r) == ["net.mtu/ping-missing"]
    assert (r.summary, r.evidence, r.remedy) == ("ping not found; net.mtu not checked", ["ping not found on PATH"],
                                                 "install iputils-ping")
    p = tmp_path / "req.toml"
    p.write_text('[profile]\nname = "req"\nextends = "h100-sxm-8x"\n[tools]\nrequired = ["nvidia-smi", "ping"]\n')
    r = _live(miss, miss, profile=str(p))
    assert r.status is Status.FAIL and codes(r) == ["net.mtu/ping-missing-required"]
    assert r.summary == "ping is missing and profile req requires it"


def test_invalid_peer_and_no_expectation() -> None:
    ip = {"ip-addr": capture("ip-addr", "2: eth0: <UP,LOWER_UP> mtu 9000 state UP\n    link/ether aa:bb\n")}
    [r] = grade("net.mtu", ip, profile=H100, peers=["ok-peer", "-x", "a b"])
    assert codes(r) == ["net.mtu/invalid-peer"] and r.summary == "invalid peer name(s): '-x', 'a b'"
    assert r.evidence == ["peer '-x' is neither a hostname nor an IP address",
                          "peer 'a b' is neither a hostname nor an IP address"]
    [r] = grade("net.mtu", ip, profile="generic", peers=["p1"])
    assert codes(r) == ["net.mtu/no-expectation"]
    assert r.summary == "no MTU expectation (net.mtu = 0), peers not pinged: MTU not graded"
    [r] = grade("net.mtu", ip, profile="generic")
    assert r.summary == "no MTU expectation (net.mtu = 0), no peers: MTU not graded"
    assert r.evidence == ["net.mtu = 0 (0 = MTU not graded)"]
    [r] = grade("net.mtu", {"env": capture("env", "NCCL_DEBUG=INFO\nPATH=/x\nHOME=/\n")}, profile=H100)
    assert codes(r) == ["net.mtu/no-input"] and r.summary == "no peers and no interface list: MTU not graded"


# ----------------------------------------------------------------------------- the configured MTU

def test_configured_mtu(tmp_path: Path) -> None:
    text = "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 state UNKNOWN\n    link/loopback 00:00\n" \
           "2: eno1: <UP,LOWER_UP> mtu 1500 state UP\n    link/ether aa:bb\n" \
           "3: ens9f0np0: <UP,LOWER_UP> mtu 9000 state UP\n    link/ether aa:bc\n" \
           "4: ib0: <UP,LOWER_UP> mtu 4092 state UP\n    link/infiniband 80:00\n" \
           "5: eno2: <BROADCAST> mtu 1500 state DOWN\n    link/ether aa:bd\n"
    [r] = grade("net.mtu", {"ip-addr": capture("ip-addr", text)}, profile=H100)
    assert codes(r) == ["net.mtu/configured-mtu-low"] and r.status is Status.WARN
    assert r.summary == "MTU below 9000 on eno1 (1500)"
    assert r.facts == {"outcome": "local_too_small", "size": 8972, "mtu": 9000, "peers": [],
                       "interfaces": [{"name": "eno1", "mtu": 1500}, {"name": "ens9f0np0", "mtu": 9000}],
                       "codes": ["net.mtu/configured-mtu-low"]}
    assert r.remedy == "`ip link set dev <iface> mtu 9000` and persist it; test the path with --peers"
    p = tmp_path / "s.toml"
    p.write_text('[profile]\nname = "s"\nextends = "h100-sxm-8x"\n[net]\ninterfaces = { value = ["eno1"], source = "s" }\n')
    [r] = grade("net.mtu", {"ip-addr": capture("ip-addr", text)}, profile=str(p))
    assert codes(r) == ["net.mtu/configured-mtu-below-profile"] and r.status is Status.FAIL
    ok = text.replace("mtu 1500 state UP", "mtu 9000 state UP")
    [r] = grade("net.mtu", {"ip-addr": capture("ip-addr", ok)}, profile=H100)
    assert r.status is Status.PASS
    assert r.summary == "data-plane MTU 9000 on eno1, ens9f0np0 (no peers given: path not tested)"
    assert r.evidence[0].startswith("2: eno1:")


def test_configured_mtu_without_an_ethernet_nic_or_readable_listing() -> None:
    ib = "4: ib0: <UP,LOWER_UP> mtu 4092 state UP\n    link/infiniband 80:00\n5: eno2: <BROADCAST> mtu 1500 state DOWN\n"
    [r] = grade("net.mtu", {"ip-addr": capture("ip-addr", ib)}, profile=H100)
    assert codes(r) == ["net.mtu/no-data-nic"] and r.status is Status.SKIP
    assert r.summary == "no Ethernet data-plane interface up: MTU not graded" and len(r.evidence) == 2
    [r] = grade("net.mtu", {"ip-addr": capture("ip-addr", "garbage\n")}, profile=H100)
    assert codes(r) == ["net.mtu/unparsable"] and r.summary == "ip addr output could not be parsed"
    assert r.evidence == ["garbage"] and r.remedy == "run `ip -j -d addr` by hand"
    [r] = grade("net.mtu", {"ip-addr": capture("ip-addr", "")}, profile=H100)
    assert r.evidence == ["(empty)"]
    [r] = grade_text("net.mtu", {"ip-addr": "garbage\n"}, profile=H100)
    assert codes(r) == ["net.mtu/not-recognised"]
    assert r.summary == "not recognised: an interface listing (ip addr / ip link / ifconfig)"


# ----------------------------------------------------------------------------- transcripts

def test_transcript_ok_and_weak() -> None:
    r = transcript(run(8972, replies=3, tx=3))
    assert r.status is Status.PASS and r.summary == "8972-byte DF pings pass to 1 peer(s)"
    assert r.facts["mtu"] == 9000 and r.facts["size"] == 8972
    r = transcript(run(8972, replies=1))
    assert r.summary == "8972-byte DF pings pass to 1 peer(s) (replies seen, no loss statistics shown)"
    assert r.evidence == ["10.45.3.22: ok", "10.45.3.22: 1 jumbo reply seen (no statistics shown: loss not measured)"]
    r = transcript(run(8972, replies=3, tx=3), profile=H100)
    assert r.status is Status.PASS and r.facts["mtu"] == 9000


def test_transcript_pair_per_peer() -> None:
    text = run(56, "gpu-c032", replies=2, tx=2) + run(8972, "gpu-c032", tx=3) + run(8972, "gpu-c033", replies=3, tx=3)
    r = transcript(text)
    assert codes(r) == ["net.mtu/silent-loss"]
    assert [(p["peer"], p["outcome"], p["small_size"]) for p in r.facts["peers"]] == [
        ("gpu-c032", "silent_loss", 56), ("gpu-c033", "ok", None)]
    assert r.summary == "jumbo frames vanish silently on the path to gpu-c032 (MTU black hole)"
    assert r.facts["size"] == 8972


def test_transcript_sizes_of_several_peers() -> None:
    text = run(1472, "a", replies=1, tx=1) + run(8972, "b", replies=1, tx=1)
    r = transcript(text)
    assert r.facts["size"] == 8972 and r.facts["mtu"] == 9000 and r.summary.startswith("8972-byte")
    r = transcript(run(8952, "fd00::2", replies=1, tx=1, v6=True))
    assert r.facts["mtu"] == 9000 and r.facts["size"] == 8952


def test_boundary_probe_passes() -> None:
    text = run(8972, replies=2, tx=2) + run(8973, tx=2, lines=[LOCAL.format(9000)] * 2)
    r = transcript(text)
    assert r.status is Status.PASS and codes(r) == [] and r.summary == "8972-byte DF pings pass to 1 peer(s)"
    assert ("10.45.3.22: 8973-byte probe refused or lost above the 9000-byte frames that passed (mtu 9000 reported): "
            "the end of the path, not a fault") in r.evidence
    # payload = MTU, the classic off-by-28 probe
    text = run(1472, replies=1, tx=1) + run(1500, tx=1, lines=[LOCAL.format(1500)])
    assert transcript(text).status is Status.PASS
    # a probe far above what passed is a jumbo test, not a boundary
    text = run(1472, replies=1, tx=1) + run(8972, tx=1, lines=[LOCAL.format(1500)])
    r = transcript(text)
    assert codes(r) == ["net.mtu/local-mtu-too-small"] and r.facts["peers"][0]["small_size"] == 1472


def test_boundary_against_the_profile() -> None:
    text = run(8972, replies=2, tx=2) + run(9972, tx=1, lines=[LOCAL.format(9000)])
    assert transcript(text).status is Status.FAIL
    r = transcript(text, profile=H100)
    assert r.status is Status.PASS and "9972-byte probe refused or lost above the 9000-byte frames" in " ".join(r.evidence)
    silent = run(8972, replies=2, tx=2) + run(9500, tx=2)
    assert codes(transcript(silent)) == ["net.mtu/silent-loss"]
    assert transcript(silent, profile=H100).status is Status.PASS
    low = run(1472, replies=1, tx=1) + run(8972, tx=1, lines=[LOCAL.format(1500)])
    assert codes(transcript(low, profile=H100)) == ["net.mtu/local-mtu-too-small"]


def test_beyond_rules() -> None:
    r = R(size=8973, frame=9001, local_too_long=True, local_too_long_mtu=9000)
    assert mtu._beyond(r, 9000, 0) and not mtu._beyond(r, 0, 0) and not mtu._beyond(r, 8999, 0)
    assert not mtu._beyond(R(size=8972, frame=9000), 9000, 0)
    assert not mtu._beyond(R(size=9100, frame=9128, local_too_long_mtu=9000), 9000, 0)
    assert mtu._beyond(R(size=9000, frame=9028, local_too_long_mtu=9000), 9000, 0)
    assert mtu._beyond(R(size=9100, frame=9128), 9000, 9000) and not mtu._beyond(R(size=9100, frame=9128), 8000, 9000)
    assert not mtu._beyond(R(size=9100, frame=9128), 9000, 0)
    assert mtu._beyond(R(size=1500, frame=1528, frag_needed_mtu=1500), 1500, 0)


def test_passed_frame() -> None:
    runs = [R(frame=9000, loss=0.0, received=3), R(frame=9500, received=1, df=False), R(frame=9400, replies=[1],
                                                                                         local_too_long=True),
            R(frame=9300, replies=[1], frag_needed_mtu=9000), R(frame=9200, received=0), R(frame=None, replies=[1])]
    assert mtu._passed_frame(runs) == 9000 and mtu._passed_frame([]) == 0
    assert mtu._passed_frame([R(frame=1500, replies=[1], df=None)]) == 1500


def test_frag_needed_transcripts() -> None:
    text = run(1500, "jasonmurray.org", lines=[FRAG.format("rt (10.0.0.1)", 1, 1500), LOCAL.format(1500)])
    r = transcript(text)
    assert codes(r) == ["net.mtu/frag-needed"] and r.summary == "a hop needs fragmentation for 1500-byte DF pings to " \
                                                                "jasonmurray.org"
    assert r.remedy == ("rt (10.0.0.1) allows 1500 bytes: raise the MTU of that hop (switch/router port or tunnel on "
                        "the path to jasonmurray.org) to 1528")
    assert r.facts["peers"][0]["hop"] == "rt (10.0.0.1)" and r.facts["peers"][0]["hop_mtu"] == 1500
    assert transcript(text, profile=H100).remedy.endswith("to 9000")


def test_not_df_and_default_size() -> None:
    r = transcript("$ ping -s 8972 -c 2 10.0.0.2\n" + run(8972, "10.0.0.2", replies=2, tx=2))
    assert r.status is Status.SKIP and codes(r) == ["net.mtu/not-df-probe"]
    assert r.summary == ("not recognised as an MTU test: pings to 10.0.0.2 did not forbid fragmenting (no -M do)")
    assert r.facts["peers"][0]["reason"] == "the ping may have been fragmented: no MTU is proven"
    r = transcript(run(56, replies=2, tx=2))
    assert codes(r) == ["net.mtu/not-mtu-test"] and r.status is Status.SKIP
    assert r.summary == "not an MTU test: 56-byte pings (ping's default size, no -M do shown)"
    assert r.remedy == "test the MTU with `ping -M do -s <MTU - 28> <peer>`" and r.evidence[0].startswith("PING")
    r = transcript("$ ping -M do -s 56 -c 2 10.0.0.2\n" + run(56, "10.0.0.2", replies=2, tx=2))
    assert r.status is Status.PASS
    r = transcript(run(56, tx=1, lines=[LOCAL.format(0)]))
    assert codes(r) == ["net.mtu/local-mtu-too-small"]
    r = transcript(run(56, tx=1, lines=["From 10.0.0.1 icmp_seq=1 Destination Host Unreachable"]))
    assert codes(r) == ["net.mtu/not-mtu-test"]


def test_default_only() -> None:
    prof = profiles.load("generic")
    assert mtu._default_only([R(size=56)], prof) and not mtu._default_only([R(size=56), R(size=1472)], prof)
    assert not mtu._default_only([R(size=56, df=True)], prof) and not mtu._default_only([R(size=57)], prof)


def test_transcript_of_errors_without_a_header() -> None:
    [res] = grade_text("net.mtu", {"ping": "ping: local error: message too long, mtu=1500\n"}, profile="generic")
    assert codes(res) == ["net.mtu/local-mtu-too-small"] and res.facts["peers"][0]["peer"] == "?"


def test_transcript_not_recognised() -> None:
    from preflight.grading import FactStore, grade_check
    from preflight.parsers.ping import PingFacts
    from preflight.registry import load

    reg = load()
    store = FactStore(reg, facts={"ping": PingFacts(runs=[PingRun()])})
    [r] = grade_check(reg.checks["net.mtu"], "n1", store, profiles.load("generic"), Options(mode="analyze"), None)
    assert codes(r) == ["net.mtu/not-recognised"] and r.status is Status.SKIP
    assert r.summary == "not recognised: a ping transcript with a PING header, replies, errors or statistics"
    assert r.evidence == ["(no PING line or result)"] and r.remedy == "paste the whole `ping -M do -s <size> <peer>` output"


def test_unreachable_and_unresolved_transcripts() -> None:
    text = run(56, "10.45.3.99", tx=1, lines=["From 10.45.3.21 icmp_seq=1 Destination Host Unreachable"]) \
        + run(8972, "10.45.3.99", tx=1, lines=["From 10.45.3.21 icmp_seq=1 Destination Host Unreachable"])
    r = transcript(text)
    assert codes(r) == ["net.mtu/peer-unreachable"] and r.status is Status.ERROR
    assert r.summary == "10.45.3.99 unreachable even with small pings: not an MTU problem"
    r = transcript(run(8972, replies=1, tx=1) + "ping: gpu-c099: Name or service not known\n")
    assert codes(r) == ["net.mtu/peer-unresolved"] and r.summary == "gpu-c099 does not resolve: MTU not tested"
    assert [p["peer"] for p in r.facts["peers"]] == ["10.45.3.22", "gpu-c099"]


# ----------------------------------------------------------------------------- exact texts and boundaries

def test_small_loss_is_lossy() -> None:
    assert mtu.jumbo_outcome(R(loss=0.5), OK_SMALL) == ("lossy", "0.5% of jumbo pings lost")


def test_no_reply_and_no_result_texts() -> None:
    r = transcript(run(8972, tx=3))
    assert codes(r) == ["net.mtu/no-reply"] and r.summary == "no reply to jumbo pings from 10.45.3.22"
    assert r.remedy == "run the ping pair to 10.45.3.22 by hand"
    r = _live(capture("ping-jumbo-p1", ""), run(56, "p1", replies=3, tx=3))
    assert r.summary == "no usable ping result for p1"


def test_many_peers_are_counted() -> None:
    peers = tuple(f"p{i}" for i in range(9))
    r = _live(run(8972, "x", tx=3), run(56, "x", replies=3, tx=3), peers=peers)
    assert r.summary == "jumbo frames vanish silently on the path to p0, p1, p2, p3, p4 (+4) (MTU black hole)"
    r = _live(run(8972, "x", replies=3, tx=3), run(56, "x", replies=3, tx=3), peers=peers[:6])
    assert r.evidence == [f"p{i}: ok" for i in range(6)]
    r = _live(run(8972, "x", tx=3), run(56, "x", replies=3, tx=3), peers=peers[:6])
    assert r.summary == "jumbo frames vanish silently on the path to p0, p1, p2, p3, p4 (+1) (MTU black hole)"


def test_remedies_of_one_outcome_are_joined() -> None:
    text = run(8972, "a", lines=[FRAG.format("rt1", 1, 1500)]) + run(8972, "b", lines=[FRAG.format("rt2", 1, 4000)])
    r = transcript(text)
    assert r.remedy == ("rt1 allows 1500 bytes: raise the MTU of that hop (switch/router port or tunnel on the path to "
                        "a) to 9000; rt2 allows 4000 bytes: raise the MTU of that hop (switch/router port or tunnel "
                        "on the path to b) to 9000")


def test_timeout_loss_is_exactly_total() -> None:
    timeout = Capture("ping-jumbo-p1", ["ping"], CaptureState.TIMEOUT, reason="killed after 5.6 s")
    assert _live(timeout, run(56, "p1", replies=3, tx=3)).facts["peers"][0]["jumbo_loss"] == 100.0


def test_passed_frame_of_a_run_without_a_size() -> None:
    assert mtu._passed_frame([R(frame=None, replies=[1])]) == 0
    assert not mtu._beyond(R(frame=None, local_too_long_mtu=1500), 1500, 0)
    assert not mtu._beyond(R(size=None, frame=9100, local_too_long_mtu=9000), 9000, 0)


def test_same_size_twice_has_no_small_partner() -> None:
    r = transcript(run(8972, replies=3, tx=3) + run(8972, tx=3))
    assert codes(r) == ["net.mtu/no-reply"] and r.facts["peers"][0]["small_size"] is None


def test_default_size_comes_from_the_profile(tmp_path: Path) -> None:
    p = tmp_path / "s.toml"
    p.write_text('[profile]\nname = "s"\nextends = "generic"\n[net]\nsmall_ping_size = { value = 100, source = "s" }\n')
    assert codes(transcript(run(100, replies=1, tx=1), profile=str(p))) == ["net.mtu/not-mtu-test"]
    assert transcript(run(56, replies=1, tx=1), profile=str(p)).status is Status.PASS


def test_errors_without_any_size_name_no_mtu() -> None:
    [r] = grade_text("net.mtu", {"ping": "ping: local error: message too long\n"}, profile="generic")
    assert codes(r) == ["net.mtu/local-mtu-too-small"]
    assert r.remedy == ("raise this node's interface MTU to the fabric's MTU (`ip link set dev <iface> mtu <MTU>`, "
                        "persist it), or clear a stale cached path MTU (`ip route flush cache`)")
    assert r.facts["size"] is None and r.facts["mtu"] is None


def test_input_texts() -> None:
    ip = {"ip-addr": capture("ip-addr", "2: eth0: <UP,LOWER_UP> mtu 9000 state UP\n    link/ether aa:bb\n")}
    [r] = grade("net.mtu", ip, profile=H100, peers=["-x"])
    assert r.remedy == "give peers as plain hostnames or IP addresses"
    [r] = grade("net.mtu", ip, profile="generic")
    assert r.remedy == "set net.mtu in a site profile to test jumbo frames"
    [r] = grade("net.mtu", {"env": capture("env", "NCCL_DEBUG=INFO\nPATH=/x\nHOME=/\n")}, profile=H100)
    assert r.remedy == "give --peers to test the path, or run `ip -j -d addr`"
    assert r.evidence[0].startswith("net.mtu = 9000 (")


def test_missing_required_ping_texts(tmp_path: Path) -> None:
    miss = Capture("ping-jumbo-p1", ["ping"], CaptureState.MISSING, reason="ping not found on PATH")
    p = tmp_path / "req.toml"
    p.write_text('[profile]\nname = "req"\nextends = "h100-sxm-8x"\n[tools]\nrequired = ["nvidia-smi", "ping"]\n')
    r = _live(miss, miss, profile=str(p))
    assert r.evidence == ["ping not found on PATH"] and r.remedy == "install iputils-ping"
    r = _live(miss, miss)
    assert r.evidence == ["ping not found on PATH"]


def test_configured_texts() -> None:
    text = "2: eno1: <UP,LOWER_UP> mtu 1500 state UP\n    link/ether aa:bb\n" \
           "3: eno2: <UP,LOWER_UP> mtu 1500 state UP\n    link/ether aa:bc\n"
    [r] = grade("net.mtu", {"ip-addr": capture("ip-addr", text)}, profile=H100)
    assert r.summary == "MTU below 9000 on eno1 (1500), eno2 (1500)"
    assert r.evidence[:2] == ["2: eno1: <UP,LOWER_UP> mtu 1500 state UP", "3: eno2: <UP,LOWER_UP> mtu 1500 state UP"]
