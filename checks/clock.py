"""node.clock: the node's clock is synchronised and close to true time; cluster.clock: the
nodes' clocks agree with each other, as the controller sees them.

Why it matters: Slurm's munge credentials are refused past their time-to-live (300 s by
default), TLS certificates look not-yet-valid or expired, and cross-node log correlation
(triage orders events by time) needs clocks within a fraction of a second.

Node side (the node's own tools, each optional):
  - `chronyc -n tracking`: the daemon's offset from NTP time (`System time : X seconds fast|slow`)
    and its leap status (`Not synchronised`), or `506 Cannot talk to daemon`;
  - `timedatectl show` (or `status` on systemd < 239): NTPSynchronized / System clock
    synchronized, and whether an NTP service is enabled;
  - `ntpq -pn` (ntpd): the system peer (`*`) and this host's offset from it;
  - `ntpstat`: synchronised (exit 0), unsynchronised (1), no daemon (2).
The most specific source says whether the clock is synchronised: chrony, ntpd's peers, ntpstat,
then timedatectl. FAIL when the daemon's offset is past `clock.max_offset_s`, WARN past
`clock.warn_offset_s`; WARN when the clock is not synchronised or no time daemon runs; SKIP when
no tool answered (a node without systemd, chrony or ntpstat: nothing says how its clock is kept).
A tool whose output did not come back (timed out, lost) is ERROR, never read as "no daemon".

Controller side (multi-node runs): each node prints its wall clock (`date +%s.%N`, probe
`date-wall`); the controller knows when the collect began and when that capture came back
(`preflight.arrivals`), so the node's offset from the controller lies in `[reading - came back,
reading - began]`. node.clock FAILs only when that whole interval is past `clock.max_offset_s`
(a slow transport widens the interval, it never makes a skew up); the interval is shown either
way. cluster.clock compares the nodes' intervals pairwise: FAIL when two nodes are proven more
than `clock.max_offset_s` apart. Every finding has a code (`checks/policy.toml`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from preflight.arrivals import KEY as TIMES
from preflight.findings import Findings, coded_result
from preflight.model import CLUSTER, Result, Status
from preflight.parsers.clock import (
    PROBE_CHRONY,
    PROBE_LOG,
    PROBE_NTPQ,
    PROBE_NTPSTAT,
    PROBE_SOURCES,
    PROBE_SOURCESTATS,
    PROBE_TIMEDATE,
    PROBE_WALL,
    UNSYNCED_LEAP,
    ClockLog,
    NtpStat,
    Peers,
    Sources,
    SourceStats,
    Timedate,
    Tracking,
    WallClock,
)
from preflight.probes import Probe
from preflight.profile import Profile
from preflight.registry import Check, CheckContext, ClusterCheck, ClusterContext, register, register_cluster

from .units import owns

CHECK_ID = "node.clock"
PROBES = (
    Probe.of(PROBE_CHRONY, ["chronyc", "-n", "tracking"], timeout=5),
    Probe.of(PROBE_TIMEDATE, ["timedatectl", "show"], ["timedatectl", "status"], timeout=5),
    Probe.of(PROBE_NTPSTAT, ["ntpstat"], timeout=5),
    Probe.of(PROBE_NTPQ, ["ntpq", "-pn"], timeout=5),
)
WALL = Probe.of(PROBE_WALL, ["date", "+%s.%N"], timeout=5)
STEP = ("step the clock now (`chronyc makestep`, or restart the time service), then find why it drifted "
        "(`chronyc sources -v`: unreachable servers, UDP 123 blocked, a bad RTC); Slurm/munge authentication fails "
        "past munge's 300 s credential TTL and cross-node logs stop lining up")
SYNC = ("check the time service: `chronyc sources -v` or `timedatectl timesync-status` (an NTP server reachable on "
        "UDP 123, the service enabled: `systemctl enable --now chronyd` or `timedatectl set-ntp true`)")
LOCAL = ("the time daemon runs on its own clock (ntpd's LOCAL(0) driver 127.127.1.0, chrony's `local` directive): "
         "configure reachable NTP servers (chrony.conf `server`/`pool`, ntp.conf `server`) and check they answer "
         "(`chronyc sources -v`, `ntpq -pn`); the local clock is a fallback for serving others, not a time source")
BOUND = ("chronyd cannot vouch for the clock: its sources are far (root delay) or it has not heard from them for long "
         "(root dispersion grows between updates); check `chronyc sources -v` and the path to the servers")
# timedatectl's synchronised flag in each systemd's spelling: the line that proves "not synchronised"
# (`NTP=yes` / `NTP enabled: yes`, the service's flag, is printed above it)
SYNC_FLAGS = ("NTPSynchronized=", "System clock synchronized:", "NTP synchronized:", "NTP synchronised:")
DAEMON = ("no time synchronisation daemon runs: enable one (`systemctl enable --now chronyd`, or `timedatectl set-ntp "
          "true` for systemd-timesyncd); a free-running clock drifts seconds per day")


@dataclass
class ControllerView:
    """A node's wall-clock reading and the controller's times around it (time.time() seconds)."""

    reading: WallClock
    began: float | None = None
    came_back: float | None = None

    def interval(self) -> tuple[float, float] | None:
        """The node's offset from the controller lies in (low, high); None without times or reading."""
        if self.reading.epoch is None or self.began is None or self.came_back is None:
            return None
        return self.reading.epoch - self.came_back, self.reading.epoch + self.reading.resolution - self.began


def thresholds(profile: Profile) -> tuple[float, float, str]:
    """(fail past, warn past, the evidence line naming both and their provenance); 0 = not graded."""
    fail, warn = float(profile.get("clock.max_offset_s") or 0), float(profile.get("clock.warn_offset_s") or 0)
    line = (f"profile {profile.name}: clock.max_offset_s = {fail:g} ({profile.source('clock.max_offset_s')}); "
            f"clock.warn_offset_s = {warn:g}")
    return fail, warn, line


def seconds(value: float) -> str:
    """A duration for a summary: milliseconds under a second."""
    v = abs(value)
    return f"{v * 1000:.3g} ms" if v < 1 else f"{v:.3g} s"


def _ahead(offset: float) -> str:
    return f"{seconds(offset)} {'ahead of' if offset > 0 else 'behind'}"


def _chrony_offset(t: Tracking | None, src: Sources | None, stats: SourceStats | None
                   ) -> tuple[float | None, list[str]]:
    """chronyd's view: tracking's System time is the system clock minus chronyd's NTP clock, and
    sources / sourcestats give the NTP clock minus each source; together, the system clock minus
    the sources'. Either alone is what it shows."""
    base = t.offset_s if t is not None else None
    base_ev = t.evidence("system time", "reference id", "leap status") if base is not None and t else []
    rel: float | None = None
    rel_ev: list[str] = []
    if src is not None and src.rows:
        rel, rel_ev = src.reading()
    if rel is None and stats is not None and stats.rows:
        rel, rel_ev = stats.reading()
    if base is None and rel is None:
        return None, []
    return (base or 0.0) + (rel or 0.0), [*base_ev, *(rel_ev if rel is not None else [])]


def daemon_offset(t: Tracking | None, peers: Peers | None, src: Sources | None = None,
                  stats: SourceStats | None = None, log: ClockLog | None = None
                  ) -> tuple[float | None, str, list[str]]:
    """(the clock minus NTP time, by which daemon, the lines that say it): chronyd's (tracking's
    System time, its sources' offsets), else ntpd's (the system peer, or what every reachable
    peer proves when none is selected), else the last offset a daemon logged and did not step
    away; (None, "", []) when none reports one."""
    offset, lines = _chrony_offset(t, src, stats)
    if offset is not None:
        return offset, "chronyd", lines
    if peers is not None:
        offset, lines = peers.reading()
        if offset is not None:
            return offset, "ntpd" if peers.system_peer and not peers.local_peer else \
                f"ntpd, no system peer: {len(lines)} reachable peer(s) agree", lines
    if log is not None:
        wrong = log.last("wrong-by", "stepped")
        if wrong is not None and wrong.kind == "wrong-by":
            return wrong.value, "logged by the time daemon", [wrong.line]
    return None, "", []


def offset_findings(offset: float | None, daemon: str, lines: list[str], profile: Profile, f: Findings) -> None:
    """The time daemon's offset against the profile's levels."""
    if offset is None:
        return
    fail, warn, prov = thresholds(profile)
    ev = [*lines, prov]
    if fail and abs(offset) > fail:
        f.add("node.clock/offset-high", f"clock {_ahead(offset)} NTP time ({daemon}), past {fail:g} s", ev, STEP)
    elif warn and abs(offset) > warn:
        f.add("node.clock/offset-warn", f"clock {_ahead(offset)} NTP time ({daemon}), past {warn:g} s", ev,
              f"{daemon} is slewing the clock back; if the offset stays, check its sources (`chronyc sources -v`, "
              "`ntpq -pn`)")


State = tuple[str, bool | None, bool, list[str], bool]


def _states(t: Tracking | None, peers: Peers | None, td: Timedate | None, ns: NtpStat | None, ns_rc: int | None,
            src: Sources | None = None, log: ClockLog | None = None) -> list[State]:
    """(source, synchronised or None, its daemon is down, evidence, its reference is the local
    clock) per tool that answered, most specific first."""
    out: list[State] = []
    if t is not None and (t.report or t.error):
        local = t.report and t.local_reference
        # the line that decides comes first: the leap status where it says so, the reference id where
        # that is what is unset (or local)
        said = ("leap status", "reference id") if t.leap.lower() in UNSYNCED_LEAP and not local else \
            ("reference id", "leap status")
        out.append(("chronyd", False if local else (t.synced if t.report else None), t.no_daemon,
                    t.evidence(*said) or [t.error], local))
    if src is not None and (src.table or src.error):
        sel = src.selected
        ev = [sel.line] if sel is not None else ([r.line for r in src.rows] or [src.header or src.error])
        if src.table and sel is None:
            ev = [f"chronyc sources: {len(src.rows)} source(s), none selected ('*')", *ev]
        out.append(("chronyd sources", src.synced, src.no_daemon, ev, src.local_reference))
    if peers is not None and (peers.table or peers.error):
        out.append(("ntpd", peers.synced, peers.no_daemon,
                    [peers.line or peers.error or f"ntpq -pn: {peers.peers} peer(s), none selected as system peer"],
                    peers.local_peer))
    if ns is not None and (ns.state or ns_rc in (0, 1, 2)):
        state = ns.state or {0: "synchronised", 1: "unsynchronised", 2: "no-daemon"}.get(ns_rc or 0, "")
        synced = {"synchronised": True, "unsynchronised": False}.get(state)
        out.append(("ntpstat", synced, state == "no-daemon", [ns.line or f"ntpstat exit status {ns_rc}"], False))
    if td is not None and td.available:
        ev = [td.lines[k] for k in td.lines if k in ("ntpsynchronized", "ntp", "system clock synchronized",
                                                     "ntp synchronized", "ntp service", "ntp enabled")]
        out.append(("timedatectl", td.synced, td.service is False, ev, False))
    last = log.last("selected", "no-sources") if log is not None else None
    if last is not None:
        out.append((f"{last.ident} log", last.kind == "selected", False, [last.line], False))
    return out


def sync_findings(ctx: CheckContext, f: Findings) -> tuple[str, str]:
    """Whether the clock is synchronised, by the most specific tool that says so: (state, source)
    with state synchronised, unsynchronised, no-daemon or unknown."""
    t, td, ns = ctx.facts(PROBE_CHRONY), ctx.facts(PROBE_TIMEDATE), ctx.facts(PROBE_NTPSTAT)
    ns_in = ctx.input(PROBE_NTPSTAT)
    states = _states(t, ctx.facts(PROBE_NTPQ), td, ns, ns_in.rc if ns_in is not None else None,
                     ctx.facts(PROBE_SOURCES), ctx.facts(PROBE_LOG))
    for source, synced, _down, ev, local in states:
        if local:
            f.add("node.clock/local-reference", f"clock synchronised only to its own local clock ({source}), not to "
                  "a time source", ev, LOCAL)
            return "unsynchronised", source
        if synced is True:
            f.note(f"synchronised ({source}): {'; '.join(ev)}")
            return "synchronised", source
        if synced is False:
            f.add("node.clock/not-synchronised", f"clock not synchronised ({source})", ev, SYNC, proof=SYNC_FLAGS)
            return "unsynchronised", source
    down = [(s, ev) for s, _synced, d, ev, _local in states if d]
    if down:
        f.add("node.clock/no-time-daemon", "no time daemon answers (" + ", ".join(s for s, _ in down) + ")",
              [e for _, ev in down for e in ev], DAEMON)
        return "no-daemon", down[0][0]
    return "unknown", ""


def view_findings(view: ControllerView | None, profile: Profile, f: Findings) -> dict[str, Any]:
    """The controller's bracket on the node's offset; FAIL only when all of it is past the threshold."""
    if view is None:
        return {}
    if view.reading.epoch is None:
        f.add("node.clock/output-unrecognised", "the node's `date +%s.%N` printed no time: offset from the "
              "controller not known", [view.reading.line or "(no output)"], "run `date +%s.%N` on the node by hand")
        return {}
    span = view.interval()
    if span is None:
        f.note("offset from the controller not measured (no controller time for the date-wall capture)")
        return {}
    low, high = span
    fail, _warn, prov = thresholds(profile)
    bound = f"offset from the controller between {low:+.3f} s and {high:+.3f} s (node read {view.reading.line})"
    if fail and (low > fail or high < -fail):
        least = low if low > fail else high  # pragma: no mutate (low == fail cannot FAIL: then high >= low > -fail)
        f.add("node.clock/controller-offset", f"clock at least {_ahead(least)} the controller's, past {fail:g} s",
              [bound, prov], STEP + "; when every node is off by about the same amount, the controller's own clock "
              "is the one to fix")
    else:
        f.note(bound)
    return {"controller_offset_s": [round(low, 3), round(high, 3)]}


def _unrecognised(ctx: CheckContext) -> list[str]:
    out: list[str] = []
    for name in (PROBE_CHRONY, PROBE_SOURCES, PROBE_SOURCESTATS, PROBE_NTPQ, PROBE_TIMEDATE, PROBE_NTPSTAT):
        facts = ctx.facts(name)
        out += [f"{name}: {line}" for line in (getattr(facts, "unrecognised", None) or [])[:3]]
    return out


def _tried(ctx: CheckContext) -> list[str]:
    """What each tool said when none told the clock's state (evidence of the SKIP)."""
    out = []
    for name in (PROBE_CHRONY, PROBE_NTPQ, PROBE_TIMEDATE, PROBE_NTPSTAT):
        inp = ctx.attempt(name)
        if inp is None:
            continue
        facts = ctx.facts(name)
        said = getattr(facts, "error", "") or (inp.reason if not inp.ok else f"exit status {inp.rc}")
        out.append(f"{inp.cmdline}: {said}")
    return out


def bound_findings(t: Tracking | None, profile: Profile, f: Findings) -> None:
    """chronyd's own bound on the error (root delay / 2 + root dispersion) while it says synchronised:
    past clock.max_offset_s it cannot vouch for the clock within the limit (WARN: a bound, not a
    measured offset); past clock.warn_offset_s, a note."""
    if t is None or not t.report or t.synced is not True or t.local_reference:
        return
    bound = t.max_error_s
    if bound is None:
        return
    fail, warn, prov = thresholds(profile)
    ev = [*t.evidence("root delay", "root dispersion", "leap status"), prov]
    what = f"chronyd's maximum error (root delay / 2 + root dispersion) {seconds(bound)}"
    if fail and bound > fail:
        f.add("node.clock/error-bound-high", f"{what}, past {fail:g} s: the clock is not known to be within it",
              ev, BOUND)
    elif warn and bound > warn:
        f.note(f"{what}, past {warn:g} s")


def log_findings(log: ClockLog | None, f: Findings) -> None:
    """The daemons' logged faults: a daemon that exited and did not come back; error-level lines
    no rule reads (unread-error)."""
    if log is None:
        return
    for i, ev in enumerate(log.events):
        if ev.kind == "exited" and not any(e.kind == "selected" for e in log.events[i + 1:]):
            f.add("node.clock/daemon-exited", f"{ev.ident or 'the time daemon'} stopped: {ev.text[:120]}", [ev.line],
                  DAEMON)
    for ident in dict.fromkeys(e.ident for e in log.events if e.kind == "error"):
        f.unread(CHECK_ID, ident, [e.line for e in log.events if e.kind == "error" and e.ident == ident])


def grade_clock(ctx: CheckContext, view: ControllerView | None = None) -> Result:
    f = Findings()
    t = ctx.facts(PROBE_CHRONY)
    log = ctx.facts(PROBE_LOG)
    offset, daemon, lines = daemon_offset(t, ctx.facts(PROBE_NTPQ), ctx.facts(PROBE_SOURCES),
                                          ctx.facts(PROBE_SOURCESTATS), log)
    offset_findings(offset, daemon, lines, ctx.profile, f)
    bound_findings(t, ctx.profile, f)
    log_findings(log, f)
    state, source = sync_findings(ctx, f)
    facts: dict[str, Any] = {"clock": state, "clock_source": source or None, "offset_s": offset,
                             "stratum": t.stratum if t is not None else None}
    facts.update(view_findings(view, ctx.profile, f))
    if state == "unknown" and offset is not None:
        f.note(f"clock {_ahead(offset)} NTP time ({daemon}): {'; '.join(lines)}")
    elif state == "unknown" and not f.items:
        bad = _unrecognised(ctx)
        if bad:
            f.add("node.clock/output-unrecognised", "no time tool's output was understood", bad,
                  "run `chronyc tracking` / `timedatectl status` on the node and report the output")
        elif log is not None and log.lines:
            f.add("node.clock/not-checked", f"{log.lines} time daemon log line(s) read, none says whether the clock "
                  "is synchronised or how far off it is", [], "run `chronyc tracking` (or `ntpq -pn`) on the node")
        else:
            f.add("node.clock/not-checked", "no time tool answered (chronyc, ntpq, timedatectl, ntpstat): clock "
                  "synchronisation not checked", _tried(ctx),
                  "install chrony (`chronyc tracking`) or run systemd-timesyncd so the clock's state can be read")
    ok = f"clock synchronised ({source})" + (f", {seconds(offset)} from NTP time" if offset is not None else "")
    if state == "unknown" and offset is not None:
        ok = (f"clock at least {seconds(offset)} from NTP time by its sources ({daemon}); whether it is "
              "synchronised is not shown")
    return f.result(ctx, ok, facts)


def grade(ctx: CheckContext) -> Result:
    return grade_clock(ctx)


NODE_CHECK = register(owns(Check(
    id=CHECK_ID, title="Clock synchronised", grade=grade, probes=PROBES,
    # Each time tool is optional (a missing one is skipped, the others grade); what must come back
    # is the wall-clock reading where the cross-node half planned it (multi-node runs).
    required=(PROBE_WALL,),
    inputs=(PROBE_CHRONY, PROBE_NTPQ, PROBE_TIMEDATE, PROBE_NTPSTAT, PROBE_SOURCES, PROBE_SOURCESTATS, PROBE_LOG),
    profile_keys={"clock.max_offset_s": (int, float), "clock.warn_offset_s": (int, float)},
    catches="a clock off NTP time (chrony offset, or proven by the controller's view), unsynchronised, or no time daemon",
)))


# ---- the controller's view, across nodes ------------------------------------------------------


def views(ctx: ClusterContext) -> dict[str, ControllerView]:
    """Each node's wall-clock reading with the controller's times around it (nodes with a reading)."""
    times = ctx.options.extra.get(TIMES) or {}
    out = {}
    for n in ctx.nodes:
        reading = ctx.facts(n, PROBE_WALL)
        if not isinstance(reading, WallClock):
            continue
        began, came = times.get(n, {}).get(PROBE_WALL, (None, None))
        out[n] = ControllerView(reading, began, came)
    return out


def agreement(spans: dict[str, tuple[float, float]], profile: Profile) -> Result:
    """cluster.clock: the largest difference between two nodes' clocks that the intervals prove."""
    fail, _warn, prov = thresholds(profile)
    if len(spans) < 2:
        return coded_result("cluster.clock/no-readings", "cluster.clock", CLUSTER,
                            f"clocks not compared: {len(spans)} node(s) sent a wall-clock reading with controller "
                            "times", [f"readings from: {', '.join(sorted(spans)) or 'none'}"])
    ahead = max(spans, key=lambda n: spans[n][0])
    behind = min(spans, key=lambda n: spans[n][1])
    proven = spans[ahead][0] - spans[behind][1]
    ev = [f"{n}: offset from the controller {lo:+.3f} s .. {hi:+.3f} s" for n, (lo, hi) in sorted(spans.items())]
    if fail and proven > fail:
        # the pair's readings prove it: first the node further from the controller's clock (the
        # one that is off, when the other agrees with the controller), then the other, then the rest
        pair = sorted((ahead, behind), key=lambda n: -min(abs(spans[n][0]), abs(spans[n][1])))
        shown = [ev[sorted(spans).index(n)] for n in pair]
        return coded_result("cluster.clock/nodes-disagree", "cluster.clock", CLUSTER,
                            f"{ahead}'s clock is at least {proven:.3g} s ahead of {behind}'s, past {fail:g} s",
                            [*shown, *(e for e in ev if e not in shown), prov], STEP,
                            facts={"proven_spread_s": round(proven, 3), "ahead": ahead, "behind": behind})
    width = max(hi - lo for lo, hi in spans.values())
    return Result(check="cluster.clock", node=CLUSTER, status=Status.PASS,
                  summary=f"no two of {len(spans)} nodes' clocks proven more than {fail:g} s apart "
                          f"(readings bracketed within {width:.3g} s)", evidence=[*ev, prov],
                  facts={"proven_spread_s": round(max(proven, 0.0), 3)})


def grade_cluster_clock(ctx: ClusterContext) -> Iterable[Result]:
    """node.clock again with the controller's view for every node it graded; cluster.clock."""
    seen = views(ctx)
    out: list[Result] = []
    for n, view in seen.items():
        old = ctx.result_of(CHECK_ID, n)
        store = ctx.stores.get(n)
        if old is None or store is None or "clock" not in old.facts:
            continue  # not graded on this node (ERROR, a dependency SKIP, node.clock not selected)
        out.append(grade_clock(CheckContext(check=NODE_CHECK, node=n, store=store, profile=ctx.profile,
                                            options=ctx.options), view))
    spans = {n: s for n, v in seen.items() if (s := v.interval()) is not None}
    out.append(agreement(spans, ctx.profile))
    return out


register_cluster(ClusterCheck(
    id="cluster.clock", title="Clocks agree across nodes", grade=grade_cluster_clock, probes=(WALL,),
    catches="a node whose clock the controller proves off (date read between two controller times), "
            "two nodes' clocks apart",
))

__all__ = ["CHECK_ID", "ControllerView", "agreement", "bound_findings", "log_findings", "grade_clock", "offset_findings", "sync_findings",
           "thresholds", "view_findings", "views"]
