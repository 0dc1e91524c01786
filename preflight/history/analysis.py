"""What the history says: failure counts, flapping nodes, lemon nodes, bandwidth trends.

Pure functions over recorded rows (`store.Row`, oldest first): the same rows from SQLite or
PostgreSQL give the same answers.

"Not checked" is kept apart from "failed". A FAIL is a graded failure; an ERROR means the
check was not graded on that node in that run (node unreachable, host key refused, output lost
in transit, probe timed out): it is neither a failure nor a pass. SKIP is neither either.

- flapping: a check whose status alternates good (pass/warn) and failed (fail) across the
  node's consecutive graded runs: at least `flap_episodes` separate failure episodes (fail,
  recover, fail again, ...); runs in which it was not checked are left out;
- lemon: a recurring fault: the same Xid again (distinct kernel-log events, not the same event
  seen by every run since boot), the same check failing in many of the runs in which it was
  graded ("failed in 7 of 35 runs": both counts are graded runs), the same port flapping;
- not checked: a node that was often not checked (some or all of its checks ERROR) is its own
  finding, with the most common cause ("n3 not checked in 9 of 42 runs: node not checked:
  ssh: ... Connection refused");
- trends: all-reduce peak busbw per node (or node group) and ping-pong bandwidth per pair, each
  latest value against the median of its own previous runs.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from preflight import facts as result_facts
from preflight import lazyre
from preflight.history.store import Row
from preflight.model import CLUSTER, LINK_SEP, Result, Status, is_node, real_nodes

BAD = (Status.FAIL,)  # a graded failure
GOOD = (Status.PASS, Status.WARN)
GRADED = (Status.PASS, Status.WARN, Status.FAIL)
NOT_CHECKED = Status.ERROR  # not graded: unreachable node, lost output, timed-out probe
_LETTER = {Status.PASS: "P", Status.WARN: "W", Status.FAIL: "F", Status.ERROR: "E", Status.SKIP: "S"}


@dataclass(frozen=True)
class Thresholds:
    """When a pattern in the history becomes a finding (flags of `preflight history`)."""

    flap_episodes: int = 3  # separate failure episodes (runs of failures between passes)
    lemon_runs: int = 3  # runs in which the same check failed
    xid_repeat: int = 2  # distinct occurrences of the same Xid on one node
    port_flaps: int = 2  # Active <-> not-Active changes of the same port
    trend_runs: int = 10  # a node's own baseline: the median of its last N runs
    trend_drop_pct: float = 5.0  # the latest value this far under that median is flagged
    unchecked_runs: int = 3  # runs in which a node was not checked (ERROR) that make a finding


@dataclass(frozen=True)
class CheckStats:
    node: str
    check: str
    runs: int  # runs with a result of this check on this node (any status)
    bad: int  # graded failures (FAIL)
    warn: int
    last_status: str
    last_time: str
    sequence: str  # one letter per run, oldest first: P W F E S (E: not checked)
    graded: int = 0  # runs in which it was graded (pass, warn or fail)
    not_checked: int = 0  # runs in which it was not checked (ERROR: unreachable, output lost)


@dataclass(frozen=True)
class Flapper:
    node: str
    check: str  # "*" when the node alternates but no single check does
    episodes: int  # separate runs of failures
    transitions: int
    runs: int
    sequence: str


@dataclass(frozen=True)
class Lemon:
    node: str
    kind: str  # xid, check, port
    key: str  # "Xid 79", "net.mtu", "mlx5_3/1"
    count: int
    summary: str


@dataclass(frozen=True)
class Unchecked:
    """A node that was often not checked: ERROR results in `count` of its `runs` runs."""

    node: str
    count: int  # runs in which some or all of its checks were not checked
    runs: int  # runs in which the node appears
    whole: int  # of `count`: runs in which none of its checks was graded
    cause: str  # the most common cause (an ERROR summary)
    cause_count: int  # runs with that cause
    summary: str
    sequence: str  # one letter per run, oldest first: G graded, P part not checked, N not checked


@dataclass(frozen=True)
class Trend:
    label: str  # node, node group (n1+n2) or pair (n1<->n2)
    kind: str  # allreduce (peak busbw) or pingpong (pair bandwidth)
    unit: str
    points: list[tuple[float, float]]  # (time, value), oldest first
    last: float
    median: float | None  # of the previous runs (up to Thresholds.trend_runs)
    previous: int
    delta_pct: float | None
    low: bool
    summary: str


@dataclass
class Summary:
    since: float | None
    runs: int
    nodes: list[str]
    stats: list[CheckStats] = field(default_factory=list)
    flapping: list[Flapper] = field(default_factory=list)
    lemons: list[Lemon] = field(default_factory=list)
    trends: list[Trend] = field(default_factory=list)
    unchecked: list[Unchecked] = field(default_factory=list)
    node_checked: dict[str, tuple[int, int]] = field(default_factory=dict)  # node -> (runs not checked, runs)

    @property
    def unchecked_nodes(self) -> list[str]:
        return sorted({u.node for u in self.unchecked})

    @property
    def flapping_nodes(self) -> list[str]:
        return sorted({f.node for f in self.flapping})

    @property
    def lemon_nodes(self) -> list[str]:
        return sorted({lm.node for lm in self.lemons})

    def to_dict(self) -> dict[str, Any]:
        return {
            "since": _iso(self.since) if self.since is not None else None,
            "runs": self.runs,
            "nodes": self.nodes,
            "flapping_nodes": self.flapping_nodes,
            "lemon_nodes": self.lemon_nodes,
            "not_checked_nodes": self.unchecked_nodes,
            "not_checked": [asdict(u) for u in self.unchecked],
            "node_not_checked_runs": {n: {"not_checked": c, "runs": k} for n, (c, k) in sorted(self.node_checked.items())},
            "flapping": [asdict(f) for f in self.flapping],
            "lemons": [asdict(lm) for lm in self.lemons],
            "trends": [{**asdict(t), "points": [[_iso(ts), v] for ts, v in t.points]} for t in self.trends],
            "stats": [asdict(s) for s in self.stats],
        }


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


def _worst(statuses: Iterable[Status]) -> Status:
    """The status a run counts as: a graded one first (FAIL > WARN > PASS); only when nothing
    was graded, ERROR (not checked) before SKIP. A FAIL beside an ERROR is still a failure."""
    seen = set(statuses)
    for s in (Status.FAIL, Status.WARN, Status.PASS, Status.ERROR, Status.SKIP):
        if s in seen:
            return s
    return Status.SKIP


def _per_run(rows: Sequence[Row]) -> tuple[list[int], dict[tuple[str, str], dict[int, Status]]]:
    """Run ids in time order, and (node, check) -> run id -> worst status in that run."""
    order: dict[int, float] = {}
    seqs: dict[tuple[str, str], dict[int, list[Status]]] = {}
    for r in rows:
        order.setdefault(r.run_id, r.ts)
        seqs.setdefault((r.node, r.check), {}).setdefault(r.run_id, []).append(r.status)
    runs = sorted(order, key=lambda i: (order[i], i))
    return runs, {k: {i: _worst(v) for i, v in per.items()} for k, per in seqs.items()}


def transitions(statuses: Sequence[Status]) -> int:
    """good <-> failed changes in a sequence (skips and not-checked runs are not evidence
    either way)."""
    marks = [s in BAD for s in statuses if s in GRADED]
    return sum(1 for a, b in zip(marks, marks[1:], strict=False) if a != b)


def episodes(statuses: Sequence[Status]) -> int:
    """Separate failure episodes: runs of consecutive failures (skips and not-checked runs
    ignored)."""
    marks = [s in BAD for s in statuses if s in GRADED]
    return sum(1 for i, bad in enumerate(marks) if bad and (i == 0 or not marks[i - 1]))


def _stats(runs: list[int], seqs: dict[tuple[str, str], dict[int, Status]], ts: dict[int, float]) -> list[CheckStats]:
    out = []
    for (node, check), per in sorted(seqs.items()):
        ordered = [per[i] for i in runs if i in per]
        last_run = [i for i in runs if i in per][-1]
        out.append(CheckStats(node=node, check=check, runs=len(ordered), bad=sum(s in BAD for s in ordered),
                              warn=sum(s is Status.WARN for s in ordered), last_status=ordered[-1].value,
                              last_time=_iso(ts[last_run]), sequence="".join(_LETTER[s] for s in ordered),
                              graded=sum(s in GRADED for s in ordered),
                              not_checked=sum(s is NOT_CHECKED for s in ordered)))
    return out


def _flapping(runs: list[int], seqs: dict[tuple[str, str], dict[int, Status]], th: Thresholds) -> list[Flapper]:
    out: list[Flapper] = []
    by_node: dict[str, dict[int, list[Status]]] = {}
    for (node, check), per in sorted(seqs.items()):
        ordered = [per[i] for i in runs if i in per]
        for i, s in per.items():
            by_node.setdefault(node, {}).setdefault(i, []).append(s)
        n = episodes(ordered)
        if n >= th.flap_episodes and transitions(ordered) > n:  # it recovered in between
            out.append(Flapper(node=node, check=check, episodes=n, transitions=transitions(ordered),
                               runs=len(ordered),
                               sequence="".join(_LETTER[s] for s in ordered)))
    named = {f.node for f in out}
    for node, per_run in sorted(by_node.items()):
        if node in named:
            continue
        ordered = [_worst(per_run[i]) for i in runs if i in per_run]
        n = episodes(ordered)
        if n >= th.flap_episodes and transitions(ordered) > n:
            out.append(Flapper(node=node, check="*", episodes=n, transitions=transitions(ordered),
                               runs=len(ordered),
                               sequence="".join(_LETTER[s] for s in ordered)))
    return out


def _xid_lemons(rows: Sequence[Row], th: Thresholds) -> list[Lemon]:
    """The same Xid as distinct events: (xid, GPU, event time) identifies an event, so the same
    line seen by every run since boot counts once."""
    events: dict[tuple[str, int], dict[tuple[Any, ...], int]] = {}
    for r in rows:
        if r.check != "gpu.xid":
            continue
        for ev in result_facts.xid_events(r):
            when = ev["time"] or ev["time_text"] or f"run {r.run_id}"
            ident = (ev["pci"], str(when))
            per = events.setdefault((r.node, ev["xid"]), {})
            per[ident] = max(per.get(ident, 0), ev["count"] or 1)
    out = []
    for (node, xid), per in sorted(events.items()):
        total = sum(per.values())
        if total >= th.xid_repeat:
            gpus = sorted({str(k[0]) for k in per if k[0]})
            out.append(Lemon(node=node, kind="xid", key=f"Xid {xid}", count=total,
                             summary=f"Xid {xid} {total} times" + (f" on GPU {', '.join(gpus)}" if gpus else "")
                             + f" in {len(per)} distinct event(s)"))
    return out


def _check_lemons(runs: list[int], seqs: dict[tuple[str, str], dict[int, Status]], th: Thresholds) -> list[Lemon]:
    out = []
    for (node, check), per in sorted(seqs.items()):
        bad = sum(1 for i in runs if per.get(i) in BAD)
        if bad >= th.lemon_runs:
            graded = sum(1 for i in runs if per.get(i) in GRADED)
            unchecked = sum(1 for i in runs if per.get(i) is NOT_CHECKED)
            out.append(Lemon(node=node, kind="check", key=check, count=bad,
                             summary=f"{check} failed in {bad} of {graded} runs in which it was checked"
                             + (f" (not checked in {unchecked} more)" if unchecked else "")))
    return out


def _port_lemons(rows: Sequence[Row], th: Thresholds) -> list[Lemon]:
    return _weighted_port_lemons(((r, 1) for r in rows), th)


def _weighted_port_lemons(items: Iterable[tuple[Row, int]], th: Thresholds) -> list[Lemon]:
    """Port lemons from rows in order, each standing for `n` runs in a row with its very facts."""
    states: dict[tuple[str, str], list[tuple[bool, int]]] = {}
    seen: dict[tuple[str, int], tuple[list[Any], list[Any]]] = {}  # rows sharing one facts object read it once
    for r, times in items:
        if r.status is NOT_CHECKED:  # what a run that did not look says about ports is nothing
            continue
        key = (r.check, id(r.facts))
        if key not in seen:
            seen[key] = (result_facts.ib_ports(r), result_facts.nic_interfaces(r))
        ib, nic = seen[key]
        for p in ib:
            if p["ca"]:
                states.setdefault((r.node, f"{p['ca']}/{p['port']}"), []).append(
                    (p["state"].lower() == "active", times))
        for itf in nic:
            if itf["name"]:
                up = itf["state"].upper() in ("UP", "UNKNOWN")
                states.setdefault((r.node, itf["name"]), []).append((up, times))
    out = []
    for (node, port), seq in sorted(states.items()):
        marks = [up for up, _ in seq]  # repeats of one state change nothing
        n = sum(1 for a, b in zip(marks, marks[1:], strict=False) if a != b)
        if n >= th.port_flaps:
            out.append(Lemon(node=node, kind="port", key=port, count=n,
                             summary=f"port {port} went down and up {n} times in {sum(k for _, k in seq)} runs"))
    return out


def _series(rows: Sequence[Row]) -> dict[tuple[str, str], list[tuple[float, float]]]:
    out: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in rows:
        if r.status is NOT_CHECKED:
            continue
        peak = result_facts.peak_busbw(r)
        if peak is not None:
            hosts = result_facts.sweep_hosts(r)
            label = "+".join(sorted(hosts)) if r.node == CLUSTER and hosts else r.node
            out.setdefault((label, "allreduce"), []).append((r.ts, peak))
        elif r.check == "nccl.pingpong" and r.node == CLUSTER:
            for p in result_facts.pingpong_pairs(r):
                bw = p.get("bw_gbps")
                if p.get("status") == "ok" and bw is not None:
                    a, b = sorted((str(p.get("a")), str(p.get("b"))))
                    out.setdefault((f"{a}<->{b}", "pingpong"), []).append((r.ts, float(bw)))
    return out


def _cause(summary: str) -> str:
    """An ERROR summary as a cause: one line, bounded."""
    line = (summary or "").strip().splitlines()[0] if (summary or "").strip() else "no reason recorded"
    return line if len(line) <= 160 else line[:157] + "..."


# what differs between two wordings of one cause: PCI ids, addresses, ids, hex, then any number
# (node names, GPU indexes, ports, counts, durations)
_VARIABLE = (
    (lazyre.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<address>"),
    (lazyre.compile(r"\b[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?\b|\b[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b"),
     "<pci>"),
    (lazyre.compile(r"(?<![\w:])[0-9a-fA-F]{0,4}(?::[0-9a-fA-F]{0,4}){2,7}(?![\w:])"), "<address>"),
    (lazyre.compile(r"\b(?:GPU|MIG)-[0-9a-fA-F-]{8,}"), "<uuid>"),
    (lazyre.compile(r"\b0x[0-9a-fA-F]+\b|\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{4,}\b"), "<hex>"),
    (lazyre.compile(r"\d+(?:\.\d+)*"), "#"),
)


def cause_template(cause: str) -> str:
    """A cause with what varies between its occurrences masked, so that one cause on many
    nodes, GPUs or ports counts once: `Xid 79 on GPU 0000:5d:00.0` and `... 0000:9b:00.0`
    have one template."""
    for pattern, mask in _VARIABLE:
        cause = pattern.sub(mask, cause)
    return cause


def _unchecked(rows: Sequence[Row], runs: list[int], th: Thresholds,
               tally: dict[str, tuple[int, int]] | None = None) -> list[Unchecked]:
    """Nodes that were not checked (some or all checks ERROR) in at least `unchecked_runs` runs;
    `tally` receives every node's (runs not checked, runs)."""
    per: dict[str, dict[int, list[Row]]] = {}
    for r in rows:
        if is_node(r.node):  # a cross-node check's ERROR is not a node left unchecked
            per.setdefault(r.node, {}).setdefault(r.run_id, []).append(r)
    out = []
    for node, by_run in sorted(per.items()):
        seq = []
        causes: dict[str, int] = {}  # cause template -> runs it was the main cause of
        example: dict[str, str] = {}  # cause template -> one wording of it
        whole = 0
        for i in runs:
            if i not in by_run:
                continue
            errors = [r for r in by_run[i] if r.status is NOT_CHECKED]
            if not errors:
                seq.append("G")
                continue
            graded = any(r.status in GRADED for r in by_run[i])
            seq.append("P" if graded else "N")
            whole += not graded
            counted: dict[str, int] = {}
            for r in errors:
                c = cause_template(_cause(r.summary))
                counted[c] = counted.get(c, 0) + 1
                example[c] = _cause(r.summary)  # the latest wording of the template, shown
            top = max(sorted(counted), key=lambda c: counted[c])  # this run's main cause
            causes[top] = causes.get(top, 0) + 1
        count = len(seq) - seq.count("G")
        if tally is not None:
            tally[node] = (count, len(seq))
        if count < th.unchecked_runs:
            continue
        top_template = max(sorted(causes), key=lambda c: causes[c])
        cause, count_of = example[top_template], causes[top_template]
        part = f"; {count - whole} of them in part (some checks graded)" if count > whole else ""
        share = f" ({count_of} of {count} runs)" if count_of != count else ""
        out.append(Unchecked(node=node, count=count, runs=len(seq), whole=whole, cause=cause,
                             cause_count=count_of, sequence="".join(seq),
                             summary=f"{node} not checked in {count} of {len(seq)} runs: {cause}{share}{part}"))
    return out


def own_baseline(points: Sequence[tuple[float, float]], label: str, kind: str, th: Thresholds) -> Trend:
    """The latest value against the median of the same node's (pair's) previous runs."""
    pts = sorted(points)
    last = pts[-1][1]
    prev = [v for _, v in pts[:-1]][-th.trend_runs:]
    what = "busbw" if kind == "allreduce" else "pair bandwidth"
    if not prev:
        return Trend(label, kind, "GB/s", pts, last, None, 0, None, False,
                     f"{what} {last:.4g} GB/s (first run of {label})")
    med = statistics.median(prev)
    delta = (last - med) / med * 100.0 if med else 0.0
    low = delta <= -th.trend_drop_pct
    where = "under" if delta < 0 else "over"
    summary = (f"{what} {abs(delta):.0f}% {where} {label}'s median of its last {len(prev)} runs "
               f"({last:.4g} vs {med:.4g} GB/s)")
    return Trend(label, kind, "GB/s", pts, last, med, len(prev), round(delta, 3), low, summary)


def summarize(rows: Sequence[Row], thresholds: Thresholds | None = None, since: float | None = None) -> Summary:
    """Everything `preflight history` shows, from rows (oldest first)."""
    th = thresholds or Thresholds()
    runs, seqs = _per_run(rows)
    ts = {r.run_id: r.ts for r in rows}
    # lemons, flappers and node listings are real nodes only (never the pseudo-node of cross-node
    # checks and the sweep, nor a link): they are what an operator drains
    lemons = [lm for lm in _xid_lemons(rows, th) + _check_lemons(runs, seqs, th) + _port_lemons(rows, th)
              if is_node(lm.node)]
    trends = [own_baseline(pts, label, kind, th) for (label, kind), pts in sorted(_series(rows).items())]
    tally: dict[str, tuple[int, int]] = {}
    unchecked = _unchecked(rows, runs, th, tally)
    return Summary(since=since, runs=len(runs), nodes=real_nodes(r.node for r in rows), stats=_stats(runs, seqs, ts),
                   flapping=[f for f in _flapping(runs, seqs, th) if is_node(f.node)],
                   lemons=sorted(lemons, key=lambda lm: (lm.node, lm.kind, lm.key)), trends=trends,
                   unchecked=unchecked, node_checked=tally)


_STATUS_OF = {v: k for k, v in _LETTER.items()}
_WORST_LETTER = {0: "F", 1: "W", 2: "P", 3: "E", 4: "S"}  # store._RANK's ranks


def _letter_flaps(letters: str, th: Thresholds) -> tuple[int, int] | None:
    """(episodes, transitions) when a letter sequence flaps, else None: `episodes` and
    `transitions` over the graded runs (P W F; E and S are no evidence either way)."""
    if "F" not in letters:
        return None
    marks = letters.replace("E", "").replace("S", "").replace("W", "P")
    n = sum(1 for part in marks.split("P") if part)  # runs of consecutive failures
    if n >= th.flap_episodes:
        t = marks.count("PF") + marks.count("FP")
        if t > n:
            return n, t
    return None


def summarize_digest(digest: Any, thresholds: Thresholds | None = None, since: float | None = None) -> Summary:
    """`summarize` from a store.Digest (the aggregation done by the store): the same Summary as
    `summarize(rows)` over the rows the digest was read from."""
    th = thresholds or Thresholds()
    stats: list[CheckStats] = []
    flapping: list[Flapper] = []
    check_lemons: list[Lemon] = []
    for node, check, seq, last_ts in sorted(digest.sequences):
        letters = seq
        bad, warn, unchecked = letters.count("F"), letters.count("W"), letters.count("E")
        graded = bad + warn + letters.count("P")
        stats.append(CheckStats(node=node, check=check, runs=len(letters), bad=bad, warn=warn,
                                last_status=_STATUS_OF[letters[-1]].value, last_time=_iso(last_ts),
                                sequence=letters, graded=graded, not_checked=unchecked))
        flap = _letter_flaps(letters, th)
        if flap is not None:
            flapping.append(Flapper(node=node, check=check, episodes=flap[0], transitions=flap[1],
                                    runs=len(letters), sequence=letters))
        if bad >= th.lemon_runs:
            check_lemons.append(Lemon(node=node, kind="check", key=check, count=bad,
                                      summary=f"{check} failed in {bad} of {graded} runs in which it was checked"
                                      + (f" (not checked in {unchecked} more)" if unchecked else "")))
    named = {f.node for f in flapping}
    for node, per in sorted(digest.node_runs.items()):
        if node in named:
            continue
        letters = "".join(_WORST_LETTER[rank] for _, _, rank, _, _ in per)
        flap = _letter_flaps(letters, th)
        if flap is not None:
            flapping.append(Flapper(node=node, check="*", episodes=flap[0], transitions=flap[1],
                                    runs=len(letters), sequence=letters))
    lemons = [lm for lm in _xid_lemons(digest.xid, th) + check_lemons + _weighted_port_lemons(digest.ports, th)
              if is_node(lm.node)]
    series = _series(digest.peaks)
    for node, ts, peak in digest.points:  # what _series makes of a node's own all-reduce result
        series.setdefault((node, "allreduce"), []).append((ts, peak))
    trends = [own_baseline(pts, label, kind, th) for (label, kind), pts in sorted(series.items())]
    tally: dict[str, tuple[int, int]] = {}
    unchecked_nodes = _digest_unchecked(digest, th, tally)
    return Summary(since=since, runs=digest.runs, nodes=real_nodes(digest.node_runs), stats=stats,
                   flapping=[f for f in flapping if is_node(f.node)],
                   lemons=sorted(lemons, key=lambda lm: (lm.node, lm.kind, lm.key)), trends=trends,
                   unchecked=unchecked_nodes, node_checked=tally)


def _digest_unchecked(digest: Any, th: Thresholds, tally: dict[str, tuple[int, int]]) -> list[Unchecked]:
    """`_unchecked` from a digest: the G/P/N sequence from the per-run flags, the causes from
    the not-checked results."""
    errors: dict[str, dict[int, list[Row]]] = {}
    for r in digest.errors:
        errors.setdefault(r.node, {}).setdefault(r.run_id, []).append(r)
    out = []
    for node, per in sorted(digest.node_runs.items()):
        if not is_node(node):
            continue
        seq = "".join(("P" if graded else "N") if err else "G" for _, _, _, err, graded in per)
        count = len(seq) - seq.count("G")
        tally[node] = (count, len(seq))
        if count < th.unchecked_runs:
            continue
        whole = seq.count("N")
        causes: dict[str, int] = {}
        example: dict[str, str] = {}
        for _, i, _, err, _ in per:
            if not err:
                continue
            counted: dict[str, int] = {}
            for r in errors.get(node, {}).get(i, []):
                c = cause_template(_cause(r.summary))
                counted[c] = counted.get(c, 0) + 1
                example[c] = _cause(r.summary)
            top = max(sorted(counted), key=lambda c: counted[c])
            causes[top] = causes.get(top, 0) + 1
        top_template = max(sorted(causes), key=lambda c: causes[c])
        cause, count_of = example[top_template], causes[top_template]
        part = f"; {count - whole} of them in part (some checks graded)" if count > whole else ""
        share = f" ({count_of} of {count} runs)" if count_of != count else ""
        out.append(Unchecked(node=node, count=count, runs=len(seq), whole=whole, cause=cause,
                             cause_count=count_of, sequence=seq,
                             summary=f"{node} not checked in {count} of {len(seq)} runs: {cause}{share}{part}"))
    return out


_PROM_HELP = {
    "preflight_history_failed_runs": "Runs in the window in which the check FAILed on the node (graded failures).",
    "preflight_history_graded_runs": "Runs in the window in which the check was graded on the node.",
    "preflight_history_not_checked_runs": "Runs in the window in which the check was not checked on the node "
                                          "(ERROR: unreachable, output lost).",
    "preflight_history_node_not_checked_runs": "Runs in the window in which the node was not checked "
                                               "(some or all of its checks ERROR).",
    "preflight_history_node_runs": "Runs in the window in which the node appears.",
}


def prometheus_text(summary: Summary) -> str:
    """The history's counts as Prometheus gauges (appended to the latest-state textfile)."""

    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    fams: dict[str, list[str]] = {name: [] for name in _PROM_HELP}
    for s in summary.stats:
        # a cross-node check (the pseudo-node cluster, a link a<->b) has no node label
        who = f'node="{esc(s.node)}"' if is_node(s.node) else f'nodes="{esc("+".join(sorted(s.node.split(LINK_SEP))))}"'
        lab = f'{{{who},check="{esc(s.check)}"}}' if s.node != CLUSTER else f'{{check="{esc(s.check)}"}}'
        fams["preflight_history_failed_runs"].append(f"preflight_history_failed_runs{lab} {s.bad}")
        fams["preflight_history_graded_runs"].append(f"preflight_history_graded_runs{lab} {s.graded}")
        fams["preflight_history_not_checked_runs"].append(f"preflight_history_not_checked_runs{lab} {s.not_checked}")
    for node, (count, runs) in sorted(summary.node_checked.items()):
        lab = f'{{node="{esc(node)}"}}'
        fams["preflight_history_node_not_checked_runs"].append(f"preflight_history_node_not_checked_runs{lab} {count}")
        fams["preflight_history_node_runs"].append(f"preflight_history_node_runs{lab} {runs}")
    out: list[str] = []
    for name, lines in fams.items():
        if lines:
            out += [f"# HELP {name} {_PROM_HELP[name]}", f"# TYPE {name} gauge", *lines]
    return "\n".join(out) + "\n" if out else ""


def latest_results(rows: Sequence[Row]) -> list[Result]:
    """The fleet's state as last seen: each node's results from that node's last run only (a
    check that run did not include is not current, whatever an older run said). The pseudo-nodes
    (`cluster`, a link) are the same: their results from the last run that had them."""
    last: dict[str, tuple[float, int]] = {}
    for r in rows:
        if r.node not in last or (r.ts, r.run_id) > last[r.node]:
            last[r.node] = (r.ts, r.run_id)
    latest: dict[tuple[str, str], Row] = {}
    for r in rows:
        if (r.ts, r.run_id) != last[r.node]:
            continue
        cur = latest.get((r.node, r.check))
        if cur is None or r.status.rank > cur.status.rank:
            latest[(r.node, r.check)] = r
    return [r.result() for _, r in sorted(latest.items())]
