"""net.mtu: the MTU path to the peers, from Don't-Fragment pings (and the configured MTU).

In a run every peer gets two DF pings: one at the jumbo size (profile MTU minus the IP and
ICMP headers) and one at a small size. The pair tells a local MTU that is too small, a hop that
answers "Frag needed", a silent black hole (small pings pass, jumbo ones vanish) and a peer that
is simply down. In analyze, a saved transcript is graded the same way: the largest size per
peer is the jumbo run, a smaller one (if any) its small partner; a transcript without statistics
is graded on the replies and errors it shows. Without peers, the data-plane interfaces' MTU is
compared with the profile.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from preflight.model import CaptureState, Result, Status
from preflight.parsers.ip import IpFacts
from preflight.parsers.ping import PingFacts, PingRun
from preflight.probes import Probe
from preflight.profile import Profile
from preflight.registry import Check, CheckContext, Input, PlanContext, register

from .network import PROBE_IP_ADDR, classify, data_plane

# IPv4 (20) + ICMP (8) headers; IPv6 (40) + ICMPv6 (8): protocol constants, not thresholds.
IPV4_ICMP_HEADERS = 28
IPV6_ICMP_HEADERS = 48

_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_HOST_LABEL}(?:\.{_HOST_LABEL})*$")


def valid_peer(peer: str) -> bool:
    """A hostname or an IP address, nothing else (it becomes an argv element of ping)."""
    if not peer or peer.startswith("-"):
        return False
    try:
        ipaddress.ip_address(peer)
        return "%" not in peer
    except ValueError:
        pass
    return bool(_HOSTNAME.match(peer))


def _payload(peer: str, mtu: int) -> int:
    try:
        v6 = ipaddress.ip_address(peer).version == 6
    except ValueError:
        v6 = False
    return mtu - (IPV6_ICMP_HEADERS if v6 else IPV4_ICMP_HEADERS)


def _ping_argv(size: int, profile: Profile, peer: str) -> list[str]:
    count = int(profile.get("net.ping_count") or 3)
    wait = int(profile.get("net.ping_timeout_s") or 3)
    interval = float(profile.get("net.ping_interval_s") or 0.2)
    return ["ping", "-n", "-M", "do", "-s", str(size), "-c", str(count), "-i", f"{interval:g}", "-W", str(wait), peer]


def _ping_timeout(profile: Profile) -> float:
    count = int(profile.get("net.ping_count") or 3)
    wait = int(profile.get("net.ping_timeout_s") or 3)
    interval = float(profile.get("net.ping_interval_s") or 0.2)
    return wait + count * interval + 2.0  # ping exits on its own before this


def mtu_probes(ctx: PlanContext) -> list[Probe]:
    probes = [PROBE_IP_ADDR]
    mtu = int(ctx.profile.get("net.mtu") or 0)
    if not mtu:
        return probes
    small = int(ctx.profile.get("net.small_ping_size") or 56)
    limit = _ping_timeout(ctx.profile)
    for peer in ctx.options.peers:
        if not valid_peer(peer):
            continue  # graded as ERROR; never put into argv
        probes.append(Probe.of(f"ping-jumbo-{peer}", _ping_argv(_payload(peer, mtu), ctx.profile, peer), timeout=limit))
        probes.append(Probe.of(f"ping-small-{peer}", _ping_argv(small, ctx.profile, peer), timeout=limit))
    return probes


# ---------------------------------------------------------------------------------------
# one peer's outcome


def _run_loss(run: PingRun | None) -> float | None:
    if run is None:
        return None
    if run.loss is not None:
        return run.loss
    if run.unresolved or run.unreachable or run.local_too_long:
        return 100.0
    return None


def jumbo_outcome(jumbo: PingRun | None, small: PingRun | None) -> tuple[str, str]:
    """(outcome, one-line reason) for one peer."""
    small_loss = _run_loss(small)
    jumbo_loss = _run_loss(jumbo)
    if small is not None and (small.unresolved or (small_loss is not None and small_loss >= 100.0)):
        if small.unresolved:
            return "unresolved", "the peer name does not resolve"
        return "unreachable", "small pings fail too: the peer is down or unreachable (not an MTU problem)"
    if jumbo is None:
        return "unknown", "no jumbo ping result"
    if jumbo.frag_from or jumbo.frag_needed_mtu:
        silent = sorted(set(range(1, max(jumbo.error_seqs or [0]))) - set(jumbo.replies) - set(jumbo.error_seqs))
        extra = f"; icmp_seq {', '.join(map(str, silent))} vanished without an answer" if silent and jumbo.error_seqs else ""
        return "frag_needed", (f"a hop ({jumbo.frag_from or '?'}) answered Frag needed, mtu "
                               f"{jumbo.frag_needed_mtu or '?'}{extra}")
    if jumbo.local_too_long:
        return "local_too_small", f"this node cannot send the frame: local MTU {jumbo.local_too_long_mtu or '?'}"
    if jumbo.unresolved:
        return "unresolved", "the peer name does not resolve"
    if jumbo.unreachable and (small is None or small_loss is None):
        return "unreachable", "destination unreachable"
    return _loss_outcome(jumbo, small, jumbo_loss)


def _loss_outcome(jumbo: PingRun, small: PingRun | None, jumbo_loss: float | None) -> tuple[str, str]:
    """(outcome, reason) of a jumbo ping that reached the peer's path: by the loss it measured."""
    if jumbo_loss is None:
        if jumbo.replies:
            return "ok", (f"{len(set(jumbo.replies))} jumbo repl{'y' if len(set(jumbo.replies)) == 1 else 'ies'} seen "
                          "(no statistics shown: loss not measured)")
        return "unknown", "the jumbo ping printed no statistics (killed or truncated)"
    if jumbo_loss >= 100.0:
        if small is None:
            return "no_reply", "jumbo pings got no reply and no small ping ran to rule out a down peer"
        return "silent_loss", "small pings pass, jumbo pings vanish without an error: an MTU black hole on the path"
    if jumbo_loss > 0:
        return "lossy", f"{jumbo_loss:g}% of jumbo pings lost"
    return "ok", "jumbo frames pass"


_STATUS_OF = {"ok": Status.PASS, "local_too_small": Status.FAIL, "frag_needed": Status.FAIL,
              "silent_loss": Status.FAIL, "lossy": Status.WARN, "no_reply": Status.WARN,
              "unreachable": Status.ERROR, "unresolved": Status.ERROR, "unknown": Status.ERROR}
_ORDER = ["local_too_small", "frag_needed", "silent_loss", "lossy", "no_reply", "unreachable", "unresolved",
          "unknown", "ok"]


def _remedy(outcome: str, peer: str, run: PingRun | None, mtu: int) -> str:
    if outcome == "local_too_small":
        return (f"raise this node's interface MTU to {mtu} (`ip link set dev <iface> mtu {mtu}`, persist it), "
                "or clear a stale cached path MTU (`ip route flush cache`)")
    if outcome == "frag_needed":
        hop = run.frag_from if run and run.frag_from else "the reporting hop"
        return f"raise the MTU of {hop} (switch/router port or tunnel on the path to {peer}) to {mtu}"
    if outcome == "silent_loss":
        return (f"a device on the path to {peer} drops jumbo frames silently: check the switch port MTU, "
                f"the peer's interface MTU and any bridge/veth in between; all must be >= {mtu}")
    if outcome == "lossy":
        return f"jumbo frames to {peer} are partly lost: check errors/drops on the link (ethtool -S, switch counters)"
    if outcome in ("unreachable", "unresolved"):
        return f"{peer} is down or unreachable from here: check the peer and the route; the MTU was not tested"
    return f"run the ping pair to {peer} by hand"


def _peer_facts(peer: str, outcome: str, jumbo: PingRun | None, small: PingRun | None) -> dict[str, Any]:
    return {"peer": peer, "outcome": outcome, "jumbo_loss": _run_loss(jumbo), "small_loss": _run_loss(small),
            "jumbo_size": jumbo.size if jumbo else None, "small_size": small.size if small else None,
            "local_mtu": jumbo.local_too_long_mtu if jumbo else None,
            "hop": jumbo.frag_from if jumbo else "", "hop_mtu": jumbo.frag_needed_mtu if jumbo else None,
            "replies": len(set(jumbo.replies)) if jumbo else None,
            "statistics": jumbo.stats if jumbo else None}


def _grade_peers(ctx: CheckContext, pairs: list[tuple[str, PingRun | None, PingRun | None, str]],
                 size: int | None, extra_evidence: list[str], mtu: int) -> Result:
    """pairs: (peer, jumbo run, small run, note) -> one aggregated Result."""
    peers = []
    evidence: list[str] = []
    remedies: list[str] = []
    worst_outcome = "ok"
    notes = []
    for peer, jumbo, small, note in pairs:
        outcome, why = jumbo_outcome(jumbo, small)
        if note:
            why = f"{why} ({note})"
        peers.append({**_peer_facts(peer, outcome, jumbo, small), "reason": why})
        if _ORDER.index(outcome) < _ORDER.index(worst_outcome):
            worst_outcome = outcome
        if outcome != "ok":
            evidence.append(f"{peer}: {outcome}: {why}")
            for r in (jumbo, small):
                if r is not None:
                    evidence.extend(r.lines[:4])
            rem = _remedy(outcome, peer, jumbo, mtu)
            if rem not in remedies:
                remedies.append(rem)
        elif jumbo is not None and not jumbo.stats:
            notes.append(f"{peer}: {why}")
    facts = {"outcome": worst_outcome, "size": size, "mtu": mtu or None, "peers": peers}
    status = _STATUS_OF.get(worst_outcome, Status.ERROR)
    bad = [p for p in peers if p["outcome"] == worst_outcome]
    if status is Status.PASS:
        weak = " (replies seen, no loss statistics shown)" if notes else ""
        return ctx.result(Status.PASS, f"{size}-byte DF pings pass to {len(peers)} peer(s){weak}",
                          evidence=[f"{p['peer']}: ok" for p in peers][:8] + notes[:4], facts=facts)
    names = ", ".join(p["peer"] for p in bad[:5]) + (f" (+{len(bad) - 5})" if len(bad) > 5 else "")
    head = {
        "local_too_small": f"local MTU too small for {size}-byte DF pings (to {names})",
        "frag_needed": f"a hop needs fragmentation for {size}-byte DF pings to {names}",
        "silent_loss": f"jumbo frames vanish silently on the path to {names} (MTU black hole)",
        "lossy": f"jumbo pings partly lost to {names}",
        "no_reply": f"no reply to jumbo pings from {names}",
        "unreachable": f"{names} unreachable even with small pings: not an MTU problem",
        "unresolved": f"{names} does not resolve: MTU not tested",
        "unknown": f"no usable ping result for {names}",
    }[worst_outcome]
    return ctx.result(status, head, evidence=[*evidence, *extra_evidence], remedy="; ".join(remedies), facts=facts)


def _peer_run(run: Input | None, facts: PingFacts | None) -> tuple[PingRun | None, str]:
    if run is None:
        return None, "not run"
    if run.state is CaptureState.TIMEOUT:
        return PingRun(lines=[run.reason], loss=100.0), "ping was killed at its time limit"
    if not run.ok:
        return None, run.reason or run.state.value
    runs = facts.runs if facts else []
    return (runs[0] if runs else None), ""


def _grade_transcript(ctx: CheckContext, transcript: PingFacts, mtu: int, src: str) -> Result:
    runs = [r for r in transcript.runs if r.target or r.lines]
    if not runs:
        return ctx.result(Status.ERROR, "ping transcript holds no ping run", evidence=["(no PING line or result)"])
    by_peer: dict[str, list[PingRun]] = {}
    for r in runs:
        by_peer.setdefault(r.target or "?", []).append(r)
    pairs: list[tuple[str, PingRun | None, PingRun | None, str]] = []
    size = None
    for peer, rs in by_peer.items():
        sized = sorted(rs, key=lambda r: r.size or 0)
        jumbo = sized[-1]
        small = sized[0] if len(sized) > 1 and (sized[0].size or 0) < (jumbo.size or 0) else None
        size = max(size or 0, jumbo.size or 0) or None
        pairs.append((peer, jumbo, small, ""))
    frame = max((r.frame or 0) for r in runs) or ((size or 0) + IPV4_ICMP_HEADERS)
    return _grade_peers(ctx, pairs, size, [src] if mtu else [], mtu or frame)


def _grade_configured(ctx: CheckContext, ip: IpFacts, mtu: int, src: str) -> Result:
    prof = ctx.profile
    if not ip.interfaces:
        return ctx.result(Status.ERROR, "ip addr output could not be parsed", evidence=ip.problems[:3] or ["(empty)"])
    dp, how = data_plane(ip.interfaces, prof, {})
    eth = [i for i in dp if classify(i, prof) == "data" and i.up and i.mtu is not None]
    if not eth:
        return ctx.result(Status.SKIP, "no Ethernet data-plane interface up: MTU not graded",
                          evidence=[i.line for i in ip.interfaces][:5])
    low = [i for i in eth if (i.mtu or 0) < mtu]
    facts = {"outcome": "local_too_small" if low else "ok", "size": _payload("0.0.0.0", mtu), "mtu": mtu,
             "peers": [], "interfaces": [{"name": i.name, "mtu": i.mtu} for i in eth]}
    if low:
        # auto-detected interfaces may include a management NIC: WARN; declared ones: FAIL
        status = Status.FAIL if how == "profile" else Status.WARN
        return ctx.result(status, f"MTU below {mtu} on {', '.join(f'{i.name} ({i.mtu})' for i in low)}",
                          evidence=[i.line for i in low] + [src],
                          remedy=f"`ip link set dev <iface> mtu {mtu}` and persist it; test the path with --peers",
                          facts=facts)
    return ctx.result(Status.PASS, f"data-plane MTU {mtu} on {', '.join(i.name for i in eth)} (no peers given: "
                      "path not tested)", evidence=[i.line for i in eth][:8], facts=facts)


def grade_mtu(ctx: CheckContext) -> Result:
    prof = ctx.profile
    mtu = int(prof.get("net.mtu") or 0)
    src = f"net.mtu = {mtu} ({prof.source('net.mtu')})"
    transcript: PingFacts | None = ctx.facts("ping")
    if transcript is not None:  # analyze: a saved ping transcript
        return _grade_transcript(ctx, transcript, mtu, src)
    peers = list(ctx.options.peers)
    invalid = [p for p in peers if not valid_peer(p)]
    if invalid:
        return ctx.result(Status.ERROR, f"invalid peer name(s): {', '.join(repr(p) for p in invalid)}",
                          evidence=[f"peer {p!r} is neither a hostname nor an IP address" for p in invalid],
                          remedy="give peers as plain hostnames or IP addresses")
    if peers and mtu:
        pairs = []
        missing: list[str] = []
        for peer in peers:
            jrun, srun_ = ctx.attempt(f"ping-jumbo-{peer}"), ctx.attempt(f"ping-small-{peer}")
            missing += [r.reason for r in (jrun, srun_) if r is not None and r.state is CaptureState.MISSING]
            jumbo, jnote = _peer_run(jrun, ctx.facts(f"ping-jumbo-{peer}"))
            small, _ = _peer_run(srun_, ctx.facts(f"ping-small-{peer}"))
            pairs.append((peer, jumbo, small, jnote))
        if missing:
            if prof.requires_tool("ping"):
                return ctx.result(Status.FAIL, f"ping is missing and profile {prof.name} requires it",
                                  evidence=missing[:1], remedy="install iputils-ping")
            return ctx.result(Status.SKIP, "ping not found; net.mtu not checked", evidence=missing[:1],
                              remedy="install iputils-ping")
        return _grade_peers(ctx, pairs, _payload(peers[0], mtu), [src], mtu)
    if not mtu:  # no peers: the configured MTU of the data-plane interfaces
        why = "peers not pinged" if peers else "no peers"
        return ctx.result(Status.SKIP, f"no MTU expectation (net.mtu = 0), {why}: MTU not graded",
                          evidence=[src], remedy="set net.mtu in a site profile to test jumbo frames")
    ip: IpFacts | None = ctx.facts("ip-addr")
    if ip is None:
        return ctx.result(Status.SKIP, "no peers and no interface list: MTU not graded",
                          remedy="give --peers to test the path, or run `ip -j -d addr`")
    return _grade_configured(ctx, ip, mtu, src)


register(Check(
    id="net.mtu",
    title="MTU path to peers",
    grade=grade_mtu,
    probes=mtu_probes,
    required=("ip-addr",),
    inputs=("ping", "ip-addr"),
    profile_keys={"net.mtu": int, "net.small_ping_size": int, "net.ping_count": int, "net.ping_timeout_s": int,
                  "net.ping_interval_s": (int, float), "net.interfaces": list, "net.virtual_prefixes": list,
                  "net.virtual_kinds": list},
    catches="local MTU too small, a hop needing fragmentation, silent jumbo-frame black holes to peers",
))

__all__ = ["IPV4_ICMP_HEADERS", "IPV6_ICMP_HEADERS", "grade_mtu", "jumbo_outcome", "mtu_probes", "valid_peer"]
