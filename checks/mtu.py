"""net.mtu: the MTU path to the peers, from Don't-Fragment pings (and the configured MTU).

In a run every peer gets two DF pings: one at the jumbo size (profile MTU minus the IP and
ICMP headers) and one at a small size. The pair tells a local MTU that is too small, a hop that
answers "Frag needed", a silent black hole (small pings pass, jumbo ones vanish) and a peer that
is simply down. In analyze, a saved transcript is graded the same way: per peer, the largest
size is the jumbo run and a smaller one (if any) its small partner. A probe above the largest
frame that passed is not a fault when it only shows where the path ends: refused at the MTU
the passing frames reached with a payload at most that MTU (a boundary probe: 8972 passes,
8973 "message too long, mtu=9000"), or larger than the profile's MTU when frames of that size
passed. A transcript without statistics is graded on the replies and errors it shows; a
passing ping that did not forbid fragmenting proves no MTU. A paste without the PING header
(only the statistics, or only the error lines of a `-M do` probe) is graded as the same lines
under a header: loss and errors are findings; its summary says the size and the target it
does not show, and pings that came back with no size shown are SKIP (no MTU proven). ping's own
error lines that no rule reads (`ping: socket: Operation not permitted`) are said: WARN
net.mtu/unread-error with the lines. Without peers, the data-plane
interfaces' MTU is compared with the profile.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from preflight import lazyre
from preflight.findings import Findings
from preflight.model import CaptureState, Result
from preflight.parsers.ip import IpFacts
from preflight.parsers.ping import IPV4_ICMP_HEADERS, IPV6_ICMP_HEADERS, PingFacts, PingRun
from preflight.probes import Probe
from preflight.profile import Profile
from preflight.registry import Check, CheckContext, Input, PlanContext, register

from .network import PROBE_IP_ADDR, classify, data_plane

_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = lazyre.compile(rf"^(?=.{{1,253}}$){_HOST_LABEL}(?:\.{_HOST_LABEL})*$")


def valid_peer(peer: str) -> bool:
    """A hostname or an IP address, nothing else (it becomes an argv element of ping)."""
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


def _ping_settings(profile: Profile) -> tuple[int, int, float]:
    """(count, per-reply wait in s, interval in s) from the profile."""
    return (int(profile.get("net.ping_count") or 3),  # pragma: no mutate (the generic profile sets every one)
            int(profile.get("net.ping_timeout_s") or 3),  # pragma: no mutate (the generic profile sets every one)
            float(profile.get("net.ping_interval_s") or 0.2))  # pragma: no mutate (the generic profile sets every one)


def _ping_argv(size: int, profile: Profile, peer: str) -> list[str]:
    count, wait, interval = _ping_settings(profile)
    return ["ping", "-n", "-M", "do", "-s", str(size), "-c", str(count), "-i", f"{interval:g}", "-W", str(wait), peer]


def _ping_timeout(profile: Profile) -> float:
    count, wait, interval = _ping_settings(profile)
    return wait + count * interval + 2.0  # ping exits on its own before this


def mtu_probes(ctx: PlanContext) -> list[Probe]:
    probes = [PROBE_IP_ADDR]
    mtu = int(ctx.profile.get("net.mtu") or 0)
    if not mtu:
        return probes
    small = int(ctx.profile.get("net.small_ping_size") or 56)  # pragma: no mutate (the generic profile sets it)
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
    if small is not None and (small.unresolved or (small_loss is not None and small_loss >= 100.0)):
        if small.unresolved:
            return "unresolved", "the peer name does not resolve"
        return "unreachable", "small pings fail too: the peer is down or unreachable (not an MTU problem)"
    if jumbo is None:
        return "unknown", "no jumbo ping result"
    if jumbo.frag_from or jumbo.frag_needed_mtu:
        seqs = jumbo.error_seqs
        silent = sorted(set(range(1, max(seqs))) - set(jumbo.replies) - set(seqs)) if seqs else []
        extra = f"; icmp_seq {', '.join(map(str, silent))} vanished without an answer" if silent else ""
        return "frag_needed", (f"a hop ({jumbo.frag_from or '?'}) answered Frag needed, mtu "
                               f"{jumbo.frag_needed_mtu or '?'}{extra}")
    if jumbo.local_too_long:
        return "local_too_small", f"this node cannot send the frame: local MTU {jumbo.local_too_long_mtu or '?'}"
    if jumbo.unresolved:
        return "unresolved", "the peer name does not resolve"
    if jumbo.unreachable and small_loss is None:
        return "unreachable", "destination unreachable"
    return _loss_outcome(jumbo, small, _run_loss(jumbo))


def _loss_outcome(jumbo: PingRun, small: PingRun | None, jumbo_loss: float | None) -> tuple[str, str]:
    """(outcome, reason) of a jumbo ping that reached the peer's path: by the loss it measured."""
    if jumbo_loss is None:
        seen = len(set(jumbo.replies))
        if seen:
            return "ok", f"{seen} jumbo repl{'y' if seen == 1 else 'ies'} seen (no statistics shown: loss not measured)"
        if jumbo.rtt_avg_ms is not None:
            return "ok", (f"round-trip times shown (avg {jumbo.rtt_avg_ms:g} ms): replies came back (no loss "
                          "statistics shown)")
        if jumbo.timeouts:
            return _silent(small)
        return "unknown", "the jumbo ping printed no statistics (killed or truncated)"
    if jumbo_loss >= 100.0:
        return _silent(small)
    if jumbo_loss > 0:
        return "lossy", f"{jumbo_loss:g}% of jumbo pings lost"
    return "ok", "jumbo frames pass"


def _silent(small: PingRun | None) -> tuple[str, str]:
    if small is None:
        return "no_reply", "jumbo pings got no reply and no small ping ran to rule out a down peer"
    return "silent_loss", "small pings pass, jumbo pings vanish without an error: an MTU black hole on the path"


CODES = {"local_too_small": "net.mtu/local-mtu-too-small", "frag_needed": "net.mtu/frag-needed",
         "silent_loss": "net.mtu/silent-loss", "lossy": "net.mtu/jumbo-lossy", "no_reply": "net.mtu/no-reply",
         "unreachable": "net.mtu/peer-unreachable", "unresolved": "net.mtu/peer-unresolved",
         "unknown": "net.mtu/no-result", "not_df": "net.mtu/not-df-probe"}
_ORDER = ["local_too_small", "frag_needed", "silent_loss", "lossy", "no_reply", "unreachable", "unresolved",
          "unknown", "not_df", "ok"]


def _remedy(outcome: str, peer: str, run: PingRun | None, size: int) -> str:
    """What to do about one peer's outcome; `size` is the MTU the path needs (0: not known)."""
    mtu = str(size) if size else "the fabric's MTU"
    if outcome == "local_too_small":
        return (f"raise this node's interface MTU to {mtu} (`ip link set dev <iface> mtu {size or '<MTU>'}`, persist it), "
                "or clear a stale cached path MTU (`ip route flush cache`)")
    if outcome == "frag_needed":
        hop = run.frag_from if run and run.frag_from else "the reporting hop"
        allows = f" allows {run.frag_needed_mtu} bytes" if run and run.frag_needed_mtu else ""
        return f"{hop}{allows}: raise the MTU of that hop (switch/router port or tunnel on the path to {peer}) to {mtu}"
    if outcome == "silent_loss":
        return (f"a device on the path to {peer} drops jumbo frames silently: check the switch port MTU, "
                f"the peer's interface MTU and any bridge/veth in between; all must be >= {mtu}")
    if outcome == "lossy":
        return f"jumbo frames to {peer} are partly lost: check errors/drops on the link (ethtool -S, switch counters)"
    if outcome in ("unreachable", "unresolved"):
        return f"{peer} is down or unreachable from here: check the peer and the route; the MTU was not tested"
    if outcome == "not_df":
        return f"ping {peer} with `-M do -s <MTU - 28>` so that no fragment hides a smaller MTU"
    return f"run the ping pair to {peer} by hand"


_HEADS = {
    "local_too_small": "local MTU too small for {pings} (to {names})",
    "frag_needed": "a hop needs fragmentation for {pings} to {names}",
    "silent_loss": "jumbo frames vanish silently on the path to {names} (MTU black hole)",
    "lossy": "{jumbo} partly lost to {names}",
    "no_reply": "no reply to {jumbo} from {names}",
    "unreachable": "{names} unreachable even with small pings: not an MTU problem",
    "unresolved": "{names} does not resolve: MTU not tested",
    "unknown": "no usable ping result for {names}",
    "not_df": "not recognised as an MTU test: pings to {names} did not forbid fragmenting (no -M do)",
}


def _peer_facts(peer: str, outcome: str, jumbo: PingRun | None, small: PingRun | None) -> dict[str, Any]:
    return {"peer": peer, "outcome": outcome, "jumbo_loss": _run_loss(jumbo), "small_loss": _run_loss(small),
            "jumbo_size": jumbo.size if jumbo else None, "small_size": small.size if small else None,
            "local_mtu": jumbo.local_too_long_mtu if jumbo else None,
            "hop": jumbo.frag_from if jumbo else "", "hop_mtu": jumbo.frag_needed_mtu if jumbo else None,
            "replies": len(set(jumbo.replies)) if jumbo else None,
            "statistics": jumbo.stats if jumbo else None}


Pair = tuple[str, "PingRun | None", "PingRun | None", str]  # pragma: no mutate (a type alias: its text is not run)


NO_TARGET = "?"  # the peer of a run whose header and command line are not shown
_NO_TARGET_TEXT = "a target not shown"


def _names(peers: list[dict[str, Any]]) -> str:
    shown = [_NO_TARGET_TEXT if p["peer"] == NO_TARGET else p["peer"] for p in peers[:5]]
    return ", ".join(shown) + (f" (+{len(peers) - 5})" if len(peers) > 5 else "")


def _heads(size: int | None) -> dict[str, str]:
    """How a summary names the pings: by their size, or as of a size the paste does not show."""
    if size is None:
        return {"pings": "DF pings of a size not shown", "jumbo": "pings of a size not shown"}
    return {"pings": f"{size}-byte DF pings", "jumbo": "jumbo pings"}


UNREAD_REMEDY = ("read the line with the ping around it: ping printed it as an error (it could not open its socket, "
                 "send or receive), so the probe it belongs to proves nothing until it is understood")


def _grade_peers(ctx: CheckContext, pairs: list[Pair], size: int | None, extra_evidence: list[str], mtu: int,
                 notes: list[str] | None = None, unread: list[str] | None = None) -> Result:
    """pairs: (peer, jumbo run, small run, note) -> one aggregated Result, a finding per outcome."""
    peers: list[dict[str, Any]] = []
    runs: dict[str, tuple[PingRun | None, PingRun | None]] = {}
    f = Findings()
    f.unread("net.mtu", "ping", unread or [], UNREAD_REMEDY)
    for peer, jumbo, small, note in pairs:
        outcome, why = jumbo_outcome(jumbo, small)
        if outcome == "ok" and jumbo is not None and jumbo.df is False:
            outcome, why = "not_df", "the ping may have been fragmented: no MTU is proven"
        peers.append({**_peer_facts(peer, outcome, jumbo, small), "reason": f"{why} ({note})" if note else why})
        runs[peer] = (jumbo, small)
        if outcome == "ok" and jumbo is not None and not jumbo.stats:
            f.note(f"{peer}: {why}")
    for note in notes or []:
        f.add("net.mtu/boundary-probe", note)
    worst = min((p["outcome"] for p in peers), key=_ORDER.index)
    for outcome in sorted({p["outcome"] for p in peers} - {"ok"}, key=_ORDER.index):
        bad = [p for p in peers if p["outcome"] == outcome]
        evidence: list[str] = []
        for p in bad:
            evidence.append(f"{p['peer']}: {outcome}: {p['reason']}")
            evidence.extend(line for r in runs[p["peer"]] if r is not None
                            for line in r.lines[:4])  # pragma: no mutate (lines quoted per run: a display limit)
        remedies = dict.fromkeys(_remedy(outcome, p["peer"], runs[p["peer"]][0], mtu) for p in bad)
        f.add(CODES[outcome], _HEADS[outcome].format(**_heads(size), names=_names(bad)),
              [*evidence, *extra_evidence], "; ".join(remedies))
    facts = {"outcome": worst, "size": size, "mtu": mtu or None, "peers": peers}
    weak = " (replies seen, no loss statistics shown)" if any(p["statistics"] is False for p in peers) else ""
    ok = f"{size}-byte DF pings pass to {len(peers)} peer(s){weak}"
    return f.result(ctx, ok, facts,
                    ok_evidence=[f"{p['peer']}: ok" for p in peers][:8])  # pragma: no mutate (a display limit)


def _peer_run(run: Input | None, facts: PingFacts | None) -> tuple[PingRun | None, str]:
    if run is None:
        return None, "not run"
    if run.state is CaptureState.TIMEOUT:
        return PingRun(lines=[run.reason], loss=100.0), "ping was killed at its time limit"
    if not run.ok:
        return None, run.reason or run.state.value
    runs = facts.runs if facts else []
    return (runs[0] if runs else None), ""


# ---------------------------------------------------------------------------------------
# a saved transcript


def _passed_frame(runs: list[PingRun]) -> int:
    """The largest frame a DF probe carried to the peer and back (0: none)."""
    return max((r.frame or 0 for r in runs if r.ok_replies > 0 and r.df is not False and not r.reported_mtu
                and not r.local_too_long), default=0)


def _beyond(run: PingRun, top: int, expected: int) -> bool:
    """A probe above the largest frame that passed that only shows where the path ends: beyond
    the profile's MTU when frames of that size passed, or refused at the MTU the passing frames
    reached with a payload at most that MTU (a boundary probe)."""
    if not top or run.frame is None or run.frame <= top:
        return False
    if expected and top >= expected:
        return True
    mtu = run.reported_mtu
    return mtu is not None and run.size is not None and top >= mtu and run.size <= mtu


def _size(run: PingRun) -> int:
    return run.size or 0  # pragma: no mutate (a run without a size sorts before every sized one)


def _transcript_pair(peer: str, rs: list[PingRun], expected: int) -> tuple[Pair, list[str]]:
    """One peer's runs -> (its pair, notes on the probes above the passing frames)."""
    top = _passed_frame(rs)
    beyond = [r for r in rs if _beyond(r, top, expected)]
    graded = [r for r in rs if r not in beyond]
    sized = sorted(graded, key=_size)
    jumbo = sized[-1]
    small = sized[0] if _size(sized[0]) < _size(jumbo) else None
    notes = [f"{peer}: {r.size}-byte probe refused or lost above the {top}-byte frames that passed"
             + (f" (mtu {r.reported_mtu} reported)" if r.reported_mtu else "") + ": the end of the path, not a fault"
             for r in beyond]
    return (peer, jumbo, small, ""), notes


def _default_only(runs: list[PingRun], prof: Profile) -> bool:
    """Every run is a plain ping (ping's default payload, the command line not shown): no MTU test."""
    default = int(prof.get("net.small_ping_size") or 56)  # pragma: no mutate (the generic profile sets it)
    return all(r.size == default and r.df is None for r in runs)


def _skip(ctx: CheckContext, unread: list[str], code: str, summary: str, evidence: list[str], remedy: str,
          facts: dict[str, Any] | None = None) -> Result:
    """A transcript that grades no MTU: its code alone, or with ping's unread error lines (WARN)."""
    if not unread:
        return ctx.finding(code, summary, evidence=evidence, remedy=remedy, facts=facts)
    f = Findings()
    f.unread("net.mtu", "ping", unread, UNREAD_REMEDY)
    f.add(code, summary, evidence, remedy)
    return f.result(ctx, summary, facts)


def _grade_transcript(ctx: CheckContext, transcript: PingFacts, mtu: int, src: str) -> Result:
    runs = [r for r in transcript.runs if r.target or r.lines or r.replies]
    unread = transcript.unread
    if not runs:
        return _skip(ctx, unread, "net.mtu/not-recognised", "not recognised: a ping transcript with a PING header, "
                     "replies, errors or statistics", ["(no PING line or result)"],
                     "paste the whole `ping -M do -s <size> <peer>` output")
    if _default_only(runs, ctx.profile) and not any(r.reported_mtu or r.local_too_long for r in runs):
        quoted = [ln for r in runs for ln in r.lines[:2]][:6]  # pragma: no mutate (a display limit)
        return _skip(ctx, unread, "net.mtu/not-mtu-test", f"not an MTU test: {runs[0].size}-byte pings (ping's "
                     "default size, no -M do shown)", quoted, "test the MTU with `ping -M do -s <MTU - 28> <peer>`")
    by_peer: dict[str, list[PingRun]] = {}
    for r in runs:
        by_peer.setdefault(r.target or NO_TARGET, []).append(r)
    pairs: list[Pair] = []
    notes: list[str] = []
    for peer, rs in by_peer.items():
        pair, more = _transcript_pair(peer, rs, mtu)
        pairs.append(pair)
        notes.extend(more)
    jumbos = [p[1] for p in pairs if p[1] is not None]
    size = max((r.size for r in jumbos if r.size is not None), default=None)
    frame = max((r.frame for r in jumbos if r.frame is not None), default=None)
    if size is None and all(jumbo_outcome(j, s)[0] == "ok" for _, j, s, _ in pairs):
        return _size_not_shown(ctx, runs, unread)
    return _grade_peers(ctx, pairs, size, [src] if mtu else [], mtu or frame or 0, notes, unread)


def _read(run: PingRun) -> str:
    """What a run without its header shows: its counts, loss and round-trip average."""
    parts = []
    if run.stats:
        parts.append(f"{run.transmitted} transmitted, {run.received} received"
                     + (f", +{run.errors} errors" if run.errors else "")
                     + (f", {run.loss:g}% loss" if run.loss is not None else ""))
    elif run.replies:
        parts.append(f"{len(set(run.replies))} repl{'y' if len(set(run.replies)) == 1 else 'ies'}")
    if run.rtt_avg_ms is not None:
        parts.append(f"rtt avg {run.rtt_avg_ms:g} ms")
    return ", ".join(parts) or "replies"


def _size_not_shown(ctx: CheckContext, runs: list[PingRun], unread: list[str]) -> Result:
    """Pings that came back, pasted without the header and the command line: the size sent (and
    often the target) is not shown, so no MTU is proven; what the paste shows is said."""
    targets = sorted({r.target for r in runs if r.target})
    what = "; ".join(_read(r) for r in runs[:3])  # pragma: no mutate (a display limit)
    unknown = "the size sent is" if targets else "the size sent and the target are"
    to = f" to {', '.join(targets)}" if targets else ""
    return _skip(ctx, unread, "net.mtu/size-not-shown", f"pings{to} answered ({what}); {unknown} not shown (no PING "
                 "header or command line): MTU not graded", [ln for r in runs for ln in r.lines[:3]][:6],
                 "paste the whole `ping -M do -s <MTU - 28> <peer>` output, its PING line and command included",
                 facts={"outcome": "size_not_shown", "size": None, "runs": len(runs),
                        "loss": [r.loss for r in runs], "targets": targets})


# ---------------------------------------------------------------------------------------
# the configured MTU (no peers)


def _grade_configured(ctx: CheckContext, ip: IpFacts, mtu: int, src: str) -> Result:
    prof = ctx.profile
    if not ip.interfaces:
        code = "net.mtu/not-recognised" if ctx.options.mode == "analyze" else "net.mtu/unparsable"
        return ctx.finding(code, "not recognised: an interface listing (ip addr / ip link / ifconfig)"
                           if code.endswith("recognised") else "ip addr output could not be parsed",
                           evidence=ip.problems or ["(empty)"], remedy="run `ip -j -d addr` by hand")
    dp, how = data_plane(ip.interfaces, prof, {})
    eth = [i for i in dp if classify(i, prof) == "data" and i.up and i.mtu is not None]
    if not eth:
        shown = [i.line for i in ip.interfaces][:5]  # pragma: no mutate (a display limit)
        return ctx.finding("net.mtu/no-data-nic", "no Ethernet data-plane interface up: MTU not graded", evidence=shown)
    low = [i for i in eth if i.mtu is not None and i.mtu < mtu]
    facts = {"outcome": "local_too_small" if low else "ok", "size": mtu - IPV4_ICMP_HEADERS, "mtu": mtu,
             "peers": [], "interfaces": [{"name": i.name, "mtu": i.mtu} for i in eth]}
    if low:
        # auto-detected interfaces may include a management NIC: WARN; declared ones: FAIL
        code = "net.mtu/configured-mtu-below-profile" if how == "profile" else "net.mtu/configured-mtu-low"
        return ctx.finding(code, f"MTU below {mtu} on {', '.join(f'{i.name} ({i.mtu})' for i in low)}",
                           evidence=[i.line for i in low] + [src],
                           remedy=f"`ip link set dev <iface> mtu {mtu}` and persist it; test the path with --peers",
                           facts=facts)
    shown = [i.line for i in eth][:8]  # pragma: no mutate (a display limit)
    return Findings().result(ctx, f"data-plane MTU {mtu} on {', '.join(i.name for i in eth)} (no peers given: "
                             "path not tested)", facts, ok_evidence=shown)


# ---------------------------------------------------------------------------------------
# net.mtu


def _grade_live(ctx: CheckContext, peers: list[str], mtu: int, src: str) -> Result:
    """The ping pair each peer got in this run."""
    pairs: list[Pair] = []
    missing: list[str] = []
    for peer in peers:
        jrun, srun_ = ctx.attempt(f"ping-jumbo-{peer}"), ctx.attempt(f"ping-small-{peer}")
        missing += [r.reason for r in (jrun, srun_) if r is not None and r.state is CaptureState.MISSING]
        jumbo, jnote = _peer_run(jrun, ctx.facts(f"ping-jumbo-{peer}"))
        small, _ = _peer_run(srun_, ctx.facts(f"ping-small-{peer}"))
        pairs.append((peer, jumbo, small, jnote))
    if missing:
        if ctx.profile.requires_tool("ping"):
            return ctx.finding("net.mtu/ping-missing-required",
                               f"ping is missing and profile {ctx.profile.name} requires it",
                               evidence=missing[:1], remedy="install iputils-ping")
        return ctx.finding("net.mtu/ping-missing", "ping not found; net.mtu not checked", evidence=missing[:1],
                           remedy="install iputils-ping")
    return _grade_peers(ctx, pairs, _payload(peers[0], mtu), [src], mtu)


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
        return ctx.finding("net.mtu/invalid-peer", f"invalid peer name(s): {', '.join(repr(p) for p in invalid)}",
                           evidence=[f"peer {p!r} is neither a hostname nor an IP address" for p in invalid],
                           remedy="give peers as plain hostnames or IP addresses")
    if peers and mtu:
        return _grade_live(ctx, peers, mtu, src)
    if not mtu:  # no peers: the configured MTU of the data-plane interfaces
        why = "peers not pinged" if peers else "no peers"
        return ctx.finding("net.mtu/no-expectation", f"no MTU expectation (net.mtu = 0), {why}: MTU not graded",
                           evidence=[src], remedy="set net.mtu in a site profile to test jumbo frames")
    ip: IpFacts | None = ctx.facts("ip-addr")
    if ip is None:
        return ctx.finding("net.mtu/no-input", "no peers and no interface list: MTU not graded",
                           evidence=[src], remedy="give --peers to test the path, or run `ip -j -d addr`")
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

__all__ = ["CODES", "IPV4_ICMP_HEADERS", "NO_TARGET", "IPV6_ICMP_HEADERS", "grade_mtu", "jumbo_outcome", "mtu_probes",
           "valid_peer"]
