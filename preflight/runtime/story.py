"""The story of a run, read once: what a run directory says happened, attempt by attempt.

A run directory holds what every rank of every attempt wrote (`preflight.runtime`): events
(`events-rank<R>.jsonl`), heartbeats, hang records, crash records and the preemption marker.
This module is their one reader. `parse` turns the files into records (what cannot be read is
named, never taken as nothing); `tell` turns the records into the story of the run:

- its attempts, in order: an attempt starts where the ranks record a start (`runtime.train`
  with `start_step`, a checkpoint resume, a measured `runtime.downtime`, an in-process
  `runtime.restart`), or, for jobs that record no start, where a rank is seen with another pid
  than before (its exit events, heartbeats, hang and crash records name their pids);
- for each attempt: its ranks and nodes; why it stopped (a crash, a hang, a rank killed from
  outside and by which signal, a preemption, suspect hardware or bad data as replay and the loss
  guard judged, or unknown), the culprit ranks and their nodes, the evidence, when it was last
  good, and how it ended (restarted, in-process restart, finished, failed, running, preempted);
- for the job: where it stands now (finished, recovered and finished, recovered and training
  again, failed, running, preempted) and the downtime of each interruption
  (`preflight.runtime.downtime` measures it).

A killed rank is named from the run directory alone: SIGTERM, SIGINT and SIGUSR1 are caught by
the runtime and recorded (`runtime.exit` how=signal); a rank that left no end record while its
peers recorded theirs (the launcher ended them, or they lost the connection to it) ended by a
signal that cannot be caught: SIGKILL (sent by someone, or by the kernel's OOM killer).

Triage (`preflight.triage`), the runtime's downtime event, `preflight record --run-dir` and the
history read runs through this module. Standard library only; reading never raises on bad
input (torn lines, corrupt records, a clock that runs backwards are named in `problems`).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from preflight import lazyre

log = logging.getLogger("preflight.runtime")

DOWNTIME_CHECK = "runtime.downtime"
RESTART_CHECK = "runtime.restart"  # preflight.runtime.inprocess: the group re-formed without a process restart
CHECK = DOWNTIME_CHECK
DEFAULT_CURRENCY = "$"
# what is read of the events files at a restart: a rank's last events (its end, its crash, the
# attempt's start) are at the end of its file, and a restart must not wait for a long run's history.
# Each file's tail: TAIL_TOTAL shared by the files, at least TAIL_MIN and at most TAIL_BYTES.
TAIL_BYTES = 512 * 1024
TAIL_MIN = 64 * 1024
TAIL_TOTAL = 8 * 1024 * 1024
# the events that tell of attempts, stops and progress; others (stragglers, loss) are skipped unparsed
_NEEDED = frozenset({"runtime.train", "runtime.checkpoint", "runtime.crash", "runtime.watchdog", "runtime.exit",
                     "runtime.preemption", "runtime.restart", "runtime.replay", "runtime.loss", CHECK})
_HEAD = lazyre.compile(r'\{"check": "([^"\\]+)"')
# a crash whose exception says the connection to a peer was lost is a consequence of that peer's end
_CONSEQUENCE = ("connection reset", "connection closed", "broken pipe", "connection refused", "socket closed",
                "end of file", "timed out", "timeout")


# ----- the run directory's files ---------------------------------------------------------------


@dataclass
class RunFile:
    """One file of a run directory: its name, its bytes, the node it came from ("" when local)."""

    name: str
    data: bytes
    node: str = ""


def read_run_dir(run_dir: str | os.PathLike[str], tail_bytes: int | None = None) -> list[RunFile]:
    """The run directory's files that tell about its attempts (events, heartbeats, hang and crash
    records, the preemption marker); an events file longer than `tail_bytes` (default: TAIL_TOTAL
    shared by the events files, within TAIL_MIN..TAIL_BYTES) is read from its tail."""
    root = Path(run_dir)
    out: list[RunFile] = []
    if tail_bytes is None:
        n = max(1, len(list(root.glob("events-rank*.jsonl"))))
        tail_bytes = min(TAIL_BYTES, max(TAIL_MIN, TAIL_TOTAL // n))
    for pattern in ("events-rank*.jsonl", "heartbeat-rank*.json", "hang-rank*.json", "crash-rank*.json",
                    "preempted"):
        for path in sorted(root.glob(pattern)):
            try:
                with path.open("rb") as fh:
                    size = fh.seek(0, os.SEEK_END)
                    fh.seek(max(0, size - tail_bytes))
                    data = fh.read()
            except OSError as exc:
                out.append(RunFile(path.name, b"", f"!{type(exc).__name__}: {exc}"))
                continue
            out.append(RunFile(path.name, data))
    return out


@dataclass
class Records:
    """The parsed files: events (time order), per-rank records, and what could not be read."""

    events: list[dict[str, Any]] = field(default_factory=list)
    heartbeats: dict[int, dict[str, Any]] = field(default_factory=dict)
    hangs: dict[int, dict[str, Any]] = field(default_factory=dict)
    crashes: dict[int, dict[str, Any]] = field(default_factory=dict)
    marker: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)
    sightings: list[tuple[int, int, float]] = field(default_factory=list)  # (rank, pid, time) a record names

    def hosts(self) -> dict[int, str]:
        """Each rank's host, from its own records."""
        out: dict[int, str] = {}
        for e in self.events:
            if isinstance(e.get("rank"), int) and e.get("node"):
                out.setdefault(e["rank"], str(e["node"]))
        for recs in (self.heartbeats, self.hangs, self.crashes):
            for r, doc in recs.items():
                if doc.get("host"):
                    out[r] = str(doc["host"])
        return out


def _rank_of(name: str, prefix: str) -> int | None:
    digits = name[len(prefix):].split(".", 1)[0]
    return int(digits) if name.startswith(prefix) and digits.isdigit() else None


def load_events(data: bytes | str, needed: frozenset[str] | None = None) -> tuple[list[dict[str, Any]], int]:
    """The events of one events file (JSON lines: objects with a `check` and a numeric `time`),
    and how many lines could not be read (torn, not JSON, not an event). With `needed`, a whole
    line of another check is skipped unparsed (what a restart does not need, it does not wait for)."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    out: list[dict[str, Any]] = []
    torn = 0
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if needed is not None:
            head = _HEAD.match(line)
            if head and head.group(1) not in needed and line.endswith("}"):
                continue
        try:
            ev = json.loads(line)
        except ValueError:
            torn += 1
            continue
        if isinstance(ev, dict) and "check" in ev and _num(ev.get("time")) is not None:
            out.append(ev)
        else:
            torn += 1
    return out, torn


# the per-rank record files: name prefix -> (kind, a key the record must hold)
RECORD_FILES = {"heartbeat-rank": ("heartbeat", "rank"), "hang-rank": ("hang record", "rank"),
                "crash-rank": ("crash record", "exception")}


def record_kind(name: str) -> str:
    """What a run directory's file is by its name: "events", "heartbeat", "hang record", "crash
    record", "marker", or "" (not a record of the runtime)."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    if base.startswith("events-") and base.endswith(".jsonl"):
        return "events"
    if base == "preempted":
        return "marker"
    for prefix, (kind, _) in RECORD_FILES.items():
        if base.startswith(prefix) and base.endswith(".json"):
            return kind
    return ""


def load_record(name: str, data: bytes) -> tuple[dict[str, Any] | None, str]:
    """One per-rank record (heartbeat, hang or crash record): (the record, "") or (None, why it
    cannot be used). Its rank is its own `rank`, else the one its file name gives."""
    kind = record_kind(name)
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    if not data.strip():
        return None, "empty file"
    try:
        doc = json.loads(data.decode("utf-8", errors="replace"))
    except ValueError as exc:
        return None, f"not JSON ({exc})"
    if not isinstance(doc, dict):
        return None, f"not a {kind} (a JSON {type(doc).__name__}, not an object)"
    rank = doc.get("rank")
    if not (isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0):
        named = next((_rank_of(base, prefix) for prefix in RECORD_FILES if base.startswith(prefix)), None)
        if named is None or "rank" in doc:
            return None, f"not a {kind} (no integer 'rank')"
        doc = {**doc, "rank": named}
    if kind == "crash record" and not isinstance(doc.get("exception"), dict):
        return None, "not a crash record (no 'exception' object)"
    return doc, ""


def load_marker(data: bytes) -> dict[str, Any]:
    """The preemption marker's content ({} when it cannot be read: present, its time unknown)."""
    try:
        doc = json.loads(data.decode("utf-8", errors="replace"))
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _events_of(f: RunFile, recs: Records, needed: frozenset[str] | None) -> None:
    events, torn = load_events(f.data, needed)
    recs.events += events
    if torn:
        recs.problems.append(f"{_where(f)}: {torn} unreadable line{'s' if torn > 1 else ''} (torn or not an "
                             "event), left out")


def _record_of(f: RunFile, recs: Records) -> None:
    kind = record_kind(f.name)
    into = {"heartbeat": recs.heartbeats, "hang record": recs.hangs, "crash record": recs.crashes}.get(kind)
    if into is None:
        return
    doc, why = load_record(f.name, f.data)
    if doc is None:
        recs.problems.append(f"{_where(f)}: {why}, left out")
        return
    if kind != "crash record" and _num(doc.get("time")) is None:
        recs.problems.append(f"{_where(f)}: not a {kind} (no 'time'), left out")
        return
    rank = int(doc["rank"])
    pid = _int(doc.get("pid"))
    t = _num(doc.get("time"))
    if pid is not None and t is not None:
        recs.sightings.append((rank, pid, t))
    if kind == "hang record":
        for peer in doc.get("peers") or []:
            if isinstance(peer, dict) and _int(peer.get("rank")) is not None and _int(peer.get("pid")) is not None \
                    and t is not None and _num(peer.get("age_s")) is not None:
                recs.sightings.append((int(peer["rank"]), int(peer["pid"]), t - float(peer["age_s"])))
    if rank in into and _num(into[rank].get("time")) is not None and (t or 0.0) <= (_num(into[rank].get("time")) or 0.0):
        return  # the same rank's file on several nodes: the newest
    into[rank] = doc


def parse(files: Iterable[RunFile], every_event: bool = False) -> Records:
    """Read the files into records; what cannot be read is named in `problems`. Events of other
    checks than those that tell of attempts and stops are skipped unless `every_event`."""
    recs = Records()
    seen: set[tuple[str, bytes]] = set()
    for f in files:
        if f.node.startswith("!"):
            recs.problems.append(f"{f.name}: unreadable ({f.node[1:]}), left out")
            continue
        key = (f.name, f.data)
        if key in seen:  # a shared run directory seen from several nodes
            continue
        seen.add(key)
        if f.name.startswith("events-") and f.name.endswith(".jsonl"):
            _events_of(f, recs, None if every_event else _NEEDED)
        elif f.name == "preempted":
            recs.marker = load_marker(f.data)
            if not recs.marker:
                recs.problems.append(f"{_where(f)}: preemption marker is not JSON (its time is unknown)")
        elif f.name.endswith(".json"):
            _record_of(f, recs)
    recs.events.sort(key=lambda e: float(e["time"]))
    for ev in recs.events:
        pid = _int(_facts(ev).get("pid"))
        if ev.get("check") == "runtime.exit" and pid is not None and _int(ev.get("rank")) is not None:
            recs.sightings.append((int(ev["rank"]), pid, float(ev["time"])))
    return recs


def _where(f: RunFile) -> str:
    return f"{f.node}:{f.name}" if f.node else f.name


def _facts(ev: Mapping[str, Any]) -> dict[str, Any]:
    facts = ev.get("facts")
    return facts if isinstance(facts, dict) else {}


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


# ----- incidents -------------------------------------------------------------------------------


@dataclass
class Incident:
    """One interruption of training: when it was last good, at which step, and why it stopped."""

    cause: str  # one of CAUSES
    last_good: float | None  # epoch seconds; None when nothing recorded progress
    step: int | None  # the steps completed at last_good (the step that was running)
    stopped_at: float | None = None  # when the stop was first recorded
    ranks: list[int] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    detail: str = ""  # the cause in a few words ("RuntimeError: ...", "SIGUSR1 on rank 0")
    evidence: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what is uncertain, and the input left out
    attempt_started: float | None = None  # when the attempt that stopped had started
    world_size: int | None = None
    signal: str | None = None  # a kill: by which signal (SIGKILL when the rank left no record)

    @property
    def start(self) -> float | None:
        """The start of the lost time: the last good moment, else the stop."""
        return self.last_good if self.last_good is not None else self.stopped_at

    def key(self, run_dir: str = "") -> str:
        """Identifies the incident (run directory + its start) to count it once in history."""
        return f"{run_dir}@{self.start:.3f}" if self.start is not None else f"{run_dir}@unknown"

    def to_dict(self) -> dict[str, Any]:
        return {"cause": self.cause, "last_good": self.last_good, "step": self.step, "stopped_at": self.stopped_at,
                "ranks": list(self.ranks), "nodes": list(self.nodes), "detail": self.detail,
                "evidence": list(self.evidence), "notes": list(self.notes), "world_size": self.world_size,
                "signal": self.signal}


def _is_start(ev: Mapping[str, Any]) -> bool:
    """An event a starting attempt writes: resumed or started at a step, or a measured downtime."""
    facts = _facts(ev)
    check = ev.get("check")
    if check == "runtime.train" and "start_step" in facts and "restart" in facts:
        return True  # "started from / resumed at step N" (a finished event carries start_step too, not restart)
    if check == "runtime.checkpoint" and str(ev.get("summary", "")).startswith("resumed from checkpoint"):
        return True
    if check == RESTART_CHECK and ev.get("status") == "warn":
        return True  # an in-process restart re-formed the group: training goes on from here
    return check == CHECK or bool(facts.get("attempt_start"))


def _failure_events(events: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    out = []
    for ev in events:
        check, facts = ev.get("check"), ev.get("facts") or {}
        how = facts.get("how") if isinstance(facts, dict) else None
        if (check in ("runtime.crash", "runtime.watchdog") and ev.get("status") == "fail") or (
                check == "runtime.exit" and how not in (None, "clean")) or (
                check == "runtime.preemption" and str(ev.get("summary", "")).startswith("stop agreed")):
            out.append(ev)
    return out


def attempts(recs: Records) -> list[tuple[float, float, list[dict[str, Any]]]]:
    """The attempts of the run: (start, the last of its start events, its start events), oldest
    first. Start events with no failure between them belong to one attempt (its ranks)."""
    out: list[tuple[float, float, list[dict[str, Any]]]] = []
    failures = [float(e["time"]) for e in _failure_events(recs.events)]
    for ev in recs.events:
        if not _is_start(ev):
            continue
        t = float(ev["time"])
        if (out and not any(out[-1][1] <= f < t for f in failures) and not _same_rank_again(out[-1][2], ev)
                and ev.get("check") != RESTART_CHECK):
            first, _, evs = out[-1]
            out[-1] = (first, t, [*evs, ev])
            continue
        out.append((t, t, [ev]))
    return out


def _same_rank_again(evs: Sequence[Mapping[str, Any]], ev: Mapping[str, Any]) -> bool:
    """A rank's second start event of the same kind: a new attempt (an in-process restart)."""
    return any(e.get("rank") == ev.get("rank") and e.get("check") == ev.get("check") for e in evs)


def _within(t: float | None, lo: float, hi: float) -> bool:
    return t is not None and lo <= t < hi


def _progress(recs: Records, lo: float, hi: float) -> list[tuple[float, int | None, str]]:
    """(time, steps completed, source) of every sign of progress between lo and hi."""
    out: list[tuple[float, int | None, str]] = []
    for r, hb in recs.heartbeats.items():
        t, el = _num(hb.get("time")), _num(hb.get("section_elapsed_s"))
        if _within(t, lo, hi) and t is not None:
            start = t - el if el is not None else t
            out.append((start, _int(hb.get("step")), f"heartbeat of rank {r}"))
    for r, hr in recs.hangs.items():
        t, el = _num(hr.get("time")), _num(hr.get("elapsed_s"))
        if _within(t, lo, hi) and t is not None:
            out.append((t - (el or 0.0), _int(hr.get("step")), f"hang record of rank {r} (its section's start)"))
    for r, cr in recs.crashes.items():
        t = _num(cr.get("time"))
        if _within(t, lo, hi) and t is not None:
            out.append((t, _int(cr.get("step")), f"crash record of rank {r}"))
    for ev in recs.events:
        t = float(ev["time"])
        if not _within(t, lo, hi):
            continue
        facts = _facts(ev)
        if ev.get("check") == "runtime.watchdog":
            ran = _num(facts.get("ran_ms"))
            out.append((t - (ran or 0.0) / 1000.0, _int(ev.get("step")), f"hang event of rank {ev.get('rank')}"))
        elif ev.get("check") == "runtime.crash":
            out.append((t, _int(ev.get("step")), f"crash event of rank {ev.get('rank')}"))
        elif ev.get("check") != "runtime.exit" and _int(ev.get("step")) is not None:
            out.append((t, _int(ev.get("step")), f"{ev.get('check')} event of rank {ev.get('rank')}"))
    return out


def _attempt_ranks(recs: Records, lo: float, hi: float) -> set[int]:
    ranks = {int(e["rank"]) for e in recs.events if _int(e.get("rank")) is not None and lo <= float(e["time"]) < hi}
    ranks |= {r for r, hb in recs.heartbeats.items() if _within(_num(hb.get("time")), lo, hi)}
    return ranks


def _ended(recs: Records, lo: float, hi: float) -> dict[int, str]:
    """How each rank of the attempt ended, by its runtime.exit event (a closed heartbeat: clean)."""
    out: dict[int, str] = {}
    for ev in recs.events:
        facts = _facts(ev)
        if ev.get("check") == "runtime.exit" and lo <= float(ev["time"]) < hi and _int(ev.get("rank")) is not None:
            out.setdefault(int(ev["rank"]), str(facts.get("how") or "?"))
    for r, hb in recs.heartbeats.items():
        if hb.get("state") == "closed" and _within(_num(hb.get("time")), lo, hi):
            out.setdefault(r, "clean")
    return out


def _hang_cause(recs: Records, lo: float, hi: float) -> tuple[float, list[int], list[str]] | None:
    """(first hang time, suspects, evidence) from hang records and watchdog events in the window."""
    times: list[float] = []
    suspects: set[int] = set()
    ev_lines: list[str] = []
    for r, hr in sorted(recs.hangs.items()):
        t = _num(hr.get("time"))
        if _within(t, lo, hi) and t is not None:
            times.append(t)
            suspects |= {int(s) for s in hr.get("suspects") or [] if _int(s) is not None}
            ev_lines.append(f"hang record of rank {r}: section {hr.get('section')} at step {hr.get('step')}, "
                            f"suspects {hr.get('suspects')}")
    for ev in recs.events:
        facts = _facts(ev)
        if ev.get("check") == "runtime.watchdog" and ev.get("status") == "fail" and lo <= float(ev["time"]) < hi:
            times.append(float(ev["time"]))
            suspects |= {int(s) for s in facts.get("suspects") or [] if _int(s) is not None}
            ev_lines.append(str(ev.get("summary", ""))[:200])
    if not times:
        return None
    return min(times), sorted(suspects), ev_lines[:6]


def _crashes(recs: Records, lo: float, hi: float) -> list[tuple[float, int, str]]:
    """(time, rank, "Type: message") of each crash in the window, first first."""
    out: dict[int, tuple[float, int, str]] = {}
    for r, cr in recs.crashes.items():
        t = _num(cr.get("time"))
        exc = _facts({"facts": cr.get("exception")})
        if _within(t, lo, hi) and t is not None:
            out[r] = (t, r, f"{exc.get('type', '?')}: {str(exc.get('message', ''))[:200]}")
    for ev in recs.events:
        facts = _facts(ev)
        rk = _int(ev.get("rank"))
        if ev.get("check") == "runtime.crash" and rk is not None and lo <= float(ev["time"]) < hi and rk not in out:
            out[rk] = (float(ev["time"]), rk,
                       f"{facts.get('exception_type', '?')}: {str(facts.get('message', ''))[:200]}")
    return sorted(out.values())


def _preempted(recs: Records, lo: float, hi: float) -> tuple[float, list[int], str] | None:
    m = recs.marker
    if m is not None and (_within(_num(m.get("time")), lo, hi) or (_num(m.get("time")) is None and hi == float("inf"))):
        rank = _int(m.get("rank"))
        return (_num(m.get("time")) or hi, [rank] if rank is not None else [],
                f"{m.get('signal') or 'a stop request'} on rank {rank if rank is not None else '?'}")
    for ev in recs.events:
        facts = _facts(ev)
        agreed = ev.get("check") == "runtime.preemption" and str(ev.get("summary", "")).startswith("stop agreed")
        preempt_exit = ev.get("check") == "runtime.exit" and facts.get("how") == "preempted"
        if (agreed or preempt_exit) and lo <= float(ev["time"]) < hi:
            first = _int(facts.get("first_rank"))
            return (float(ev["time"]), [first] if first is not None else [],
                    f"{facts.get('signal') or 'a stop request'} on rank {first if first is not None else '?'}")
    return None


def _cause(recs: Records, lo: float, hi: float) -> tuple[str, float | None, list[int], str, list[str]]:
    """(cause, stop time, ranks, detail, evidence) of the stop of the attempt in [lo, hi)."""
    pre = _preempted(recs, lo, hi)
    if pre is not None:
        return "preempted", pre[0], pre[1], pre[2], [f"preemption: {pre[2]}"]
    ended = _ended(recs, lo, hi)
    hang = _hang_cause(recs, lo, hi)
    crashes = _crashes(recs, lo, hi)
    silent = sorted(_attempt_ranks(recs, lo, hi) - set(ended) - {c[1] for c in crashes})
    primary = [c for c in crashes if not any(k in c[2].lower() for k in _CONSEQUENCE)]
    if primary and (hang is None or primary[0][0] <= hang[0]):
        t, r, what = primary[0]
        return "crash", t, [r], what, [f"crash of rank {r}: {what}"]
    if hang is not None:
        return "hang", hang[0], hang[1], "stopped progressing", hang[2]
    if silent and (crashes or "signal" in ended.values()):
        t = min([c[0] for c in crashes] + [float(e["time"]) for e in _failure_events(recs.events)
                                             if lo <= float(e["time"]) < hi] or [hi])
        return ("signal", t, silent, "ended without a record (killed by a signal: SIGKILL, the OOM killer?)",
                [f"rank {r} left no end record while its peers lost it" for r in silent]
                + [f"crash of rank {c[1]} (a consequence): {c[2]}" for c in crashes][:4])
    if crashes and primary:
        t, r, what = crashes[0]
        return "crash", t, [r], what, [f"crash of rank {r}: {what}"]
    if crashes:  # every crash followed from a lost peer, and no rank of the attempt is known silent
        t, r, what = crashes[0]
        lost = sorted({c[1] for c in crashes})
        return ("unknown", t, [], f"rank{'s' if len(lost) > 1 else ''} {_list(lost)} failed on a lost peer; the rank "
                "that left first recorded nothing the run directory shows", [f"crash of rank {c[1]} (a consequence): "
                                                                            f"{c[2]}" for c in crashes][:4])
    signalled = sorted(r for r, how in ended.items() if how == "signal")
    if signalled:
        stops = [float(e["time"]) for e in _failure_events(recs.events) if lo <= float(e["time"]) < hi]
        return "signal", min(stops or [hi]), signalled, "ended by a signal from outside", []
    return "unknown", None, [], "nothing recorded why training stopped", []


def _world(recs: Records, lo: float, hi: float) -> int | None:
    for ev in recs.events:
        facts = _facts(ev)
        w = _int(facts.get("world_size"))
        if w and lo <= float(ev["time"]) < hi:
            return w
    w = _int((recs.marker or {}).get("world_size"))
    return w or None


def _clean_end(recs: Records, lo: float, hi: float) -> bool:
    """Every rank of the attempt ended cleanly (no incident)."""
    ranks = _attempt_ranks(recs, lo, hi)
    ended = _ended(recs, lo, hi)
    return bool(ranks) and all(ended.get(r) == "clean" for r in ranks)


def _anything_in(recs: Records, lo: float, hi: float) -> bool:
    """Whether the window holds any record of a rank (an attempt ran in it)."""
    return bool(_attempt_ranks(recs, lo, hi)) or any(
        _within(_num(doc.get("time")), lo, hi) for doc in [*recs.hangs.values(), *recs.crashes.values()])


def incident_in(recs: Records, lo: float, hi: float) -> Incident | None:
    """The incident that ended the attempt running in [lo, hi), or None when it ended cleanly or
    left nothing in that window."""
    if _clean_end(recs, lo, hi):
        return None
    if not _anything_in(recs, lo, hi):
        return None
    cause, stopped, ranks, detail, evidence = _cause(recs, lo, hi)
    bound = stopped if stopped is not None else hi
    progress = [p for p in _progress(recs, lo, hi) if p[0] <= bound + 1e-6]
    notes: list[str] = []
    last, step = None, None
    if progress:
        last, step, source = max(progress, key=lambda p: (p[0], p[1] if p[1] is not None else -1))
        evidence = [*evidence, f"last good: {source}, step {step} at {iso(last)}"]
    elif stopped is not None:
        notes.append(f"no progress recorded before the stop: lost time counted from the stop at {iso(stopped)}")
    else:
        notes.append("nothing recorded when training was last good")
    hosts = recs.hosts()
    nodes = [] if cause == "preempted" else sorted({hosts[r] for r in ranks if r in hosts})
    if ranks and not nodes and cause != "preempted":
        notes.append(f"the node of rank{'s' if len(ranks) > 1 else ''} {_list(ranks)} is not recorded")
    return Incident(cause=cause, last_good=last, step=step, stopped_at=stopped, ranks=ranks, nodes=nodes,
                    detail=detail, evidence=evidence, notes=notes + list(recs.problems), attempt_started=lo,
                    world_size=_world(recs, lo, hi))


def last_good(run_dir: str | os.PathLike[str], *, before: float | None = None) -> Incident | None:
    """The incident that ended the previous attempt of the run in `run_dir` (see the module
    docstring), from what was written before `before` (default: now; give this attempt's start,
    so that what its ranks already wrote is not taken for the previous attempt's). None when there
    was no previous attempt, or it ended cleanly. Never raises (a fault is logged: None)."""
    try:
        recs = parse(read_run_dir(run_dir))
        hi = time.time() if before is None else float(before)
        starts = [a for a in attempts(recs) if a[0] < hi]
        lo = starts[-1][0] if starts else float("-inf")
        return _incident(recs, lo, hi)
    except Exception as exc:  # noqa: BLE001 - the runtime never raises into training
        log.warning("preflight: cannot read the previous attempt of %s: %s", run_dir, exc)
        return None



# ----- after the fact: every incident of a run ---------------------------------------------------


def _measured(ev: Mapping[str, Any]) -> dict[str, Any] | None:
    facts = ev.get("facts")
    if ev.get("check") != CHECK or not isinstance(facts, dict) or _num(facts.get("lost_s")) is None:
        return None
    cause = "killed" if facts.get("cause") == "signal" else facts.get("cause")  # the older runtime's word
    return {**facts, "cause": cause, "source": "runtime"}


def incidents(files: Iterable[RunFile] | Records, *, run_dir: str = "", end: float | None = None, end_label: str = "",
              cost_per_gpu_hour: float | None = None, currency: str = DEFAULT_CURRENCY) -> dict[str, Any]:
    """Every interruption of a run, measured: {"incidents": [numbers...], "total": {...}, "notes"}.

    Between two attempts: to the next attempt's start (its last rank's start event), or the
    runtime's own `runtime.downtime` event when there is one. After the last attempt, when it
    stopped: to `end` (named by `end_label`: "job end", "collect time", ...)."""
    recs = files if isinstance(files, Records) else parse(files, every_event=True)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    wins = _windows(recs)
    for k, (lo, hi, _) in enumerate(wins[:-1]):
        nxt = wins[k + 1][2]
        measured = [m for ev in nxt if (m := _measured(ev)) is not None]
        if measured:
            if str(measured[0].get("incident")) not in seen:  # written twice: counted once
                seen.add(str(measured[0].get("incident")))
                out.append(measured[0])
            continue
        restart = next((e for e in nxt if e.get("check") == RESTART_CHECK), None)
        inc = _restart_incident(recs, lo, restart) if restart is not None else _incident(recs, lo, hi)
        if inc is None or inc.key(run_dir) in seen:
            continue
        seen.add(inc.key(run_dir))
        start_step = next((_int(_facts(e).get("start_step")) for e in nxt
                           if _int(_facts(e).get("start_step")) is not None), None)
        if start_step is None:
            start_step = next((_int(e.get("step")) for e in nxt if _int(e.get("step")) is not None), None)
        again = max((float(e["time"]) for e in nxt), default=hi)
        out.append({**measure(inc, training_again_at=again, world_size=_world_or_ranks(recs, inc),
                              step=start_step, cost_per_gpu_hour=cost_per_gpu_hour, currency=currency,
                              run_dir=run_dir, passed_at=_passed(recs, inc, again, wins[k + 1][1], start_step)),
                    "source": "run directory"})
    out += _open_incident(recs, wins[-1][0] if wins else float("-inf"), end, end_label, run_dir, cost_per_gpu_hour, currency)
    return {"incidents": out, "total": totals(out), "notes": list(recs.problems)}


def _restart_cause(text: str) -> str:
    low = text.lower()
    for words, cause in ((("exception", "error", "crash", "raised"), "crash"),
                         (("stopped", "stuck", "did not rejoin", "hang", "timeout", "timed out"), "hang"),
                         (("gone", "killed", "signal", "exited", "dead"), "killed")):
        if any(w in low for w in words):
            return cause
    return "unknown"


def _restart_incident(recs: Records, lo: float, ev: Mapping[str, Any]) -> Incident:
    """An in-process restart that measured no downtime itself: its event names the failed ranks
    and their hosts; the last good moment is the latest progress before the fault's detection."""
    facts = _facts(ev)
    failed = [f for f in facts.get("failed") or [] if isinstance(f, dict)]
    reform = _num(facts.get("detect_to_reform_s"))
    detected = float(ev["time"]) - (reform or 0.0)
    progress = [p for p in _progress(recs, lo, detected + 1e-6)]
    texts = "; ".join(str(f.get("cause") or "") for f in failed) or str(facts.get("cause") or "")
    notes = []
    last, step = None, _int(facts.get("step"))
    if progress:
        last, step, _ = max(progress, key=lambda p: (p[0], p[1] if p[1] is not None else -1))
    else:
        last = detected
        notes.append(f"no progress recorded before the fault: lost time counted from its detection at {iso(detected)}")
    return Incident(cause=_restart_cause(texts), last_good=last, step=step, stopped_at=detected,
                    ranks=sorted(int(f["rank"]) for f in failed if _int(f.get("rank")) is not None),
                    nodes=sorted({str(f["host"]) for f in failed if f.get("host")}), detail=texts[:300],
                    evidence=[f"in-process restart: {str(ev.get('summary', ''))[:300]}"], notes=notes,
                    attempt_started=lo, world_size=_int(facts.get("old_world_size")) or _world(recs, lo, detected))


def _open_incident(recs: Records, lo: float, end: float | None, end_label: str, run_dir: str,
                   price: float | None, currency: str) -> list[dict[str, Any]]:
    """The last attempt's stop, when nothing trained after it: the lost time runs to `end`."""
    inc = _incident(recs, lo, float("inf"))
    if inc is None or (inc.cause == "unknown" and not inc.ranks and not _failure_events(
            [e for e in recs.events if float(e["time"]) >= lo]) and recs.marker is None):
        return []  # a run still going, or one that left no sign of a stop
    until = end if end is not None else time.time()
    label = end_label or ("given end" if end is not None else "triage time")
    n = measure(inc, training_again_at=until, world_size=_world_or_ranks(recs, inc), step=None,
                cost_per_gpu_hour=price, currency=currency, run_dir=run_dir, until=label)
    n["open"] = True
    n["source"] = "run directory"
    return [n]


def _world_or_ranks(recs: Records, inc: Incident) -> int:
    if inc.world_size:
        return inc.world_size
    ranks = {int(e["rank"]) for e in recs.events if _int(e.get("rank")) is not None}
    ranks |= set(recs.heartbeats) | set(recs.hangs) | set(recs.crashes)
    inc.notes.append(f"world size not recorded: {len(ranks) or 1} rank(s) seen in the run directory")
    return len(ranks) or 1


# ----- measuring: the numbers of an incident (preflight.runtime.downtime re-exports them) -------


def measure(incident: Incident | None, *, training_again_at: float, world_size: int, step: int | None,
            cost_per_gpu_hour: float | None = None, currency: str = DEFAULT_CURRENCY, cause: str | None = None,
            nodes: Sequence[str] | None = None, ranks: Sequence[int] | None = None, run_dir: str = "",
            until: str = "training again", last_good_at: float | None = None,
            passed_at: float | None = None) -> dict[str, Any]:
    """The numbers of one incident: lost_s, gpu_hours (world_size x lost_s / 3600), cost (with a
    price), cause, nodes, ranks, from_step, resumed_step (`step`), steps_redone, redo_s.

    The lost time runs from the last good moment to `passed_at`, when training passed the failed
    step again (so the steps redone from the checkpoint count: they were lost work), else to
    `training_again_at` with a note that the redone steps are not in it; clamped at 0.
    `cause`/`nodes`/`ranks`/`last_good_at` override the incident's (an in-process restart knows
    them); `until` says what ended the lost time."""
    inc = incident or Incident(cause="unknown", last_good=None, step=None)
    start = last_good_at if last_good_at is not None else inc.start
    notes = list(inc.notes)
    lost = 0.0
    if start is None:
        notes.append("the start of the lost time is unknown: nothing recorded when training was last good or "
                     "stopped; counted as 0")
    else:
        lost = float(passed_at if passed_at is not None else training_again_at) - start
        if lost < 0:
            notes.append(f"clock: {until} at {iso(training_again_at)} is {-lost:.1f} s before the last good "
                         f"moment {iso(start)} (clocks of different nodes, or a clock step); clamped to 0")
            lost = 0.0
    if passed_at is None and inc.step is not None and step is not None and inc.step > step \
            and until == "training again":
        notes.append(f"the {inc.step - step} redone step(s) ({step} to {inc.step}) are not in the lost time: nothing "
                     "recorded when training passed the failed step again")
    world = max(1, int(world_size))
    gpu_h = world * lost / 3600.0
    price = cost_per_gpu_hour if cost_per_gpu_hour is not None and cost_per_gpu_hour >= 0 else None
    from_step = inc.step
    return {
        "incident": inc.key(run_dir) if last_good_at is None else f"{run_dir}@{start:.3f}",
        "cause": cause or inc.cause, "detail": inc.detail, "signal": inc.signal,
        "nodes": list(nodes) if nodes is not None else list(inc.nodes),
        "ranks": list(ranks) if ranks is not None else list(inc.ranks),
        "last_good": start, "last_good_iso": iso(start), "stopped_at": inc.stopped_at,
        "training_again_at": float(training_again_at), "until": until,
        "from_step": from_step, "resumed_step": step,
        "steps_redone": max(0, from_step - step) if from_step is not None and step is not None else None,
        "passed_failed_step_at": passed_at,
        "redo_s": round(max(0.0, passed_at - float(training_again_at)), 3) if passed_at is not None else None,
        "lost_s": round(lost, 3), "world_size": world, "gpu_hours": round(gpu_h, 6),
        "cost": round(gpu_h * price, 4) if price is not None else None,
        "cost_per_gpu_hour": price, "currency": currency if price is not None else None,
        "notes": notes, "evidence": list(inc.evidence),
    }


def totals(items: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Sum of lost time, GPU-hours and cost, and per cause and per node (an incident with several
    nodes counts on each; its cost is not split)."""
    tot: dict[str, Any] = {"incidents": 0, "lost_s": 0.0, "gpu_hours": 0.0, "cost": None, "currency": None,
                           "by_cause": {}, "by_node": {}}
    for n in items:
        tot["incidents"] += 1
        lost, gh = float(n.get("lost_s") or 0.0), float(n.get("gpu_hours") or 0.0)
        tot["lost_s"] += lost
        tot["gpu_hours"] += gh
        if n.get("cost") is not None:
            tot["cost"] = (tot["cost"] or 0.0) + float(n["cost"])
            tot["currency"] = tot["currency"] or n.get("currency")
        keys = [("by_cause", str(n.get("cause") or "unknown"))] + [("by_node", str(x)) for x in n.get("nodes") or []]
        for table, key in keys:
            row = tot[table].setdefault(key, {"incidents": 0, "lost_s": 0.0, "gpu_hours": 0.0, "cost": None})
            row["incidents"] += 1
            row["lost_s"] = round(row["lost_s"] + lost, 3)
            row["gpu_hours"] = round(row["gpu_hours"] + gh, 6)
            if n.get("cost") is not None:
                row["cost"] = round((row["cost"] or 0.0) + float(n["cost"]), 4)
    tot["lost_s"] = round(tot["lost_s"], 3)
    tot["gpu_hours"] = round(tot["gpu_hours"], 6)
    if tot["cost"] is not None:
        tot["cost"] = round(tot["cost"], 4)
    return tot


# ----- words ----------------------------------------------------------------------------------------


def iso(t: float | None) -> str:
    if t is None:
        return "?"
    try:
        return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return "?"


def _list(xs: Sequence[int]) -> str:
    return ", ".join(str(x) for x in xs)


# ----- the story: attempt by attempt ---------------------------------------------------------------

STORY_CAUSES = ("crash", "hang", "killed", "oom", "suspect hardware", "bad data", "preempted", "unknown", "none")
ENDINGS = ("restarted", "in-process restart", "finished", "failed", "running", "preempted")
STATES = ("finished", "recovered, finished", "recovered, training again", "failed", "running", "preempted")
# what the runtime writes when replay or the loss guard stopped training, as a cause
_REPLAY_CAUSES = {"hardware": "suspect hardware", "data": "bad data"}


@dataclass
class Attempt:
    """One attempt of a run (a launch, a launcher's restart, an in-process re-form)."""

    index: int  # 1, 2, ...
    lo: float  # its window in time: the records of [lo, hi) are its
    hi: float
    members: list[int] = field(default_factory=list)  # the ranks that recorded anything in it
    hosts: list[str] = field(default_factory=list)
    cause: str = "none"  # one of STORY_CAUSES: why it stopped ("none": it did not fail)
    signal: str | None = None  # a rank killed from outside: by which signal
    culprits: list[int] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)  # the culprits' nodes
    detail: str = ""
    evidence: list[str] = field(default_factory=list)
    ended: str = "running"  # one of ENDINGS
    incident: Incident | None = None
    start_step: int | None = None

    def to_dict(self) -> dict[str, Any]:
        inc = self.incident
        return {"attempt": self.index, "start": None if self.lo == float("-inf") else self.lo,
                "cause": self.cause, "signal": self.signal, "ranks": list(self.culprits), "nodes": list(self.nodes),
                "detail": self.detail, "evidence": list(self.evidence), "ended": self.ended,
                "members": list(self.members), "hosts": list(self.hosts), "start_step": self.start_step,
                "last_good": inc.last_good if inc else None, "failed_step": inc.step if inc else None,
                "stopped_at": inc.stopped_at if inc else None, "world_size": inc.world_size if inc else None}

    def failed(self) -> bool:
        return self.cause not in ("none", "preempted")

    def words(self) -> str:
        """"killed (SIGKILL): rank 1 on n2" and the like."""
        what = f"{self.cause} ({self.signal})" if self.signal else self.cause
        if self.culprits:
            what += f": rank{'s' if len(self.culprits) > 1 else ''} {_list(self.culprits)}"
            what += f" on {', '.join(self.nodes)}" if self.nodes else ""
        return what


@dataclass
class Story:
    """A run, read once: its attempts (oldest first), where it stands now, and its downtime."""

    attempts: list[Attempt] = field(default_factory=list)
    state: str = "running"  # one of STATES
    downtime: dict[str, Any] = field(default_factory=dict)  # {"incidents", "total", "notes"}
    problems: list[str] = field(default_factory=list)
    pid_attempt: dict[tuple[int, int], int] = field(default_factory=dict)  # (rank, pid) -> attempt index

    @property
    def recovered(self) -> bool:
        return self.state.startswith("recovered")

    def incidents(self) -> list[Attempt]:
        """The attempts that failed (a crash, a hang, a kill, ...), oldest first."""
        return [a for a in self.attempts if a.failed()]

    def to_dict(self) -> dict[str, Any]:
        return {"attempts": [a.to_dict() for a in self.attempts], "state": self.state, "recovered": self.recovered,
                "problems": list(self.problems)}

    def line(self) -> str:
        """One line: "attempt 1: killed (SIGKILL): rank 1 on n2, restarted; attempt 2: finished;
        the job: recovered, finished"."""
        parts = [f"attempt {a.index}: " + (f"{a.words()}, {a.ended}" if a.failed() or a.cause == "preempted"
                                           else a.ended) for a in self.attempts]
        return "; ".join([*parts, f"the job: {self.state}"])


def _windows(recs: Records) -> list[tuple[float, float, list[dict[str, Any]]]]:
    """The attempts' windows [lo, hi) with their start events: by the starts the ranks recorded,
    else (a job that records no start) by the pids its records name: a rank seen with another pid
    than before has started again, the border half-way between the two sightings."""
    inf = float("inf")
    starts = attempts(recs)
    if starts:
        out = [(a[0], starts[k + 1][0] if k + 1 < len(starts) else inf, a[2]) for k, a in enumerate(starts)]
        if _anything_in(recs, -inf, starts[0][0]):
            out.insert(0, (-inf, starts[0][0], []))
        return out
    bounds: list[float] = []
    pid_of: dict[int, int] = {}
    last = None
    for rank, pid, t in sorted(set(recs.sightings), key=lambda x: x[2]):
        if rank in pid_of and pid_of[rank] != pid and last is not None:
            bounds.append((last + t) / 2)
            pid_of = {}
        pid_of[rank] = pid
        last = t
    edges = [-inf, *bounds, inf]
    return [(lo, hi, []) for lo, hi in zip(edges, edges[1:], strict=False)]


def _judged(recs: Records, lo: float, hi: float) -> tuple[str, list[int], list[str], str, list[str]] | None:
    """A stop replay or the loss guard judged: (cause, ranks, nodes, detail, evidence). Replay's
    verdict (it ran the step again) outweighs the loss guard's (it saw a non-finite loss)."""
    evs = [e for e in recs.events if lo <= float(e["time"]) < hi and e.get("status") == "fail"]
    for ev in evs:
        facts = _facts(ev)
        if ev.get("check") == "runtime.replay" and facts.get("cause") in _REPLAY_CAUSES:
            summary = str(ev.get("summary") or "")[:300]
            cause = _REPLAY_CAUSES[str(facts["cause"])]
            ranks = facts.get("suspect_ranks") if cause == "suspect hardware" else facts.get("trigger_ranks")
            nodes = facts.get("suspect_nodes") if cause == "suspect hardware" else []
            ranks_ = sorted({int(r) for r in ranks or [] if _int(r) is not None})
            return (cause, ranks_, sorted({str(n) for n in nodes or []}), summary,
                    [f"replay (rank {ev.get('rank')}): {summary}"])
    for ev in evs:
        facts = _facts(ev)
        if ev.get("check") == "runtime.loss" and facts.get("nonfinite"):
            summary = str(ev.get("summary") or "")[:300]
            ranks_ = sorted({int(r) for r in facts.get("ranks") or [] if _int(r) is not None})
            return ("bad data", ranks_, [], f"{summary} (not replayed: the batch or the model most likely; a GPU "
                    "fault is not ruled out)", [f"loss guard (rank {ev.get('rank')}): {summary}"])
    return None


def _signal_of(recs: Records, lo: float, hi: float, ranks: Sequence[int], detail: str) -> str | None:
    """The signal that ended the killed ranks: as their runtime.exit says, else SIGKILL (a rank
    that left no end record: the runtime records every signal it can catch)."""
    if "without a record" in detail:
        return "SIGKILL"
    for ev in recs.events:
        facts = _facts(ev)
        if (ev.get("check") == "runtime.exit" and facts.get("how") == "signal" and lo <= float(ev["time"]) < hi
                and _int(ev.get("rank")) in ranks):
            if facts.get("signal"):
                return str(facts["signal"])
            code = _int(facts.get("exit_code"))
            if code is not None and code < 0:
                try:
                    return signal.Signals(-code).name
                except ValueError:
                    return f"signal {-code}"
    return None


def _attempt(recs: Records, k: int, lo: float, hi: float, starts: list[dict[str, Any]]) -> Attempt:
    hosts = recs.hosts()
    members = sorted(_attempt_ranks(recs, lo, hi))
    a = Attempt(index=k, lo=lo, hi=hi, members=members, hosts=sorted({hosts[r] for r in members if r in hosts}))
    a.start_step = next((_int(_facts(e).get("start_step")) for e in starts
                         if _int(_facts(e).get("start_step")) is not None), None)
    inc = _incident(recs, lo, hi)
    a.incident = inc
    if inc is None:
        return a
    a.cause, a.signal = inc.cause, inc.signal
    a.culprits, a.nodes, a.detail, a.evidence = list(inc.ranks), list(inc.nodes), inc.detail, list(inc.evidence)
    return a


def _incident(recs: Records, lo: float, hi: float) -> Incident | None:
    """The incident that ended the attempt in [lo, hi) (`incident_in`), its cause as the story
    names it: a kill with its signal, or what replay and the loss guard judged."""
    inc = incident_in(recs, lo, hi)
    if inc is None:
        return None
    judged = _judged(recs, lo, hi)
    if judged is not None:
        hosts = recs.hosts()
        inc.cause, inc.ranks, nodes, inc.detail, ev = judged
        inc.nodes = nodes or sorted({hosts[r] for r in inc.ranks if r in hosts})
        inc.evidence = ev + [e for e in inc.evidence if e.startswith("last good")]
    elif inc.cause == "signal":
        inc.cause = "killed"
        inc.signal = _signal_of(recs, lo, hi, inc.ranks, inc.detail)
    return inc


def _passed(recs: Records, inc: Incident, again: float, until: float, resumed: int | None) -> float | None:
    """When training passed the failed step again, in the next attempt (from `again`, at step
    `resumed`, to its end `until`): interpolated at that attempt's pace between training again
    and the first record of a later step (records are sparse; a heartbeat is overwritten), at the
    end of the failed step itself, as the runtime measures it live."""
    if inc.step is None:
        return None
    later = [(float(e["time"]), int(e["step"])) for e in recs.events if again <= float(e["time"]) < until
             and _int(e.get("step")) is not None and int(e["step"]) > inc.step]
    later += [(t, int(hb["step"])) for hb in recs.heartbeats.values() if (t := _num(hb.get("time"))) is not None
              and again <= t < until and _int(hb.get("step")) is not None and int(hb["step"]) > inc.step]
    if not later:
        return None
    t1, s1 = min(later)
    if resumed is None or resumed >= inc.step or s1 <= resumed:
        return again if resumed is not None and resumed >= inc.step else t1
    return again + (inc.step + 1 - resumed) * (t1 - again) / (s1 - resumed)  # the end of the failed step


def _ending(recs: Records, a: Attempt, nxt: tuple[float, float, list[dict[str, Any]]] | None) -> str:
    if nxt is not None:
        return "in-process restart" if any(e.get("check") == RESTART_CHECK for e in nxt[2]) else "restarted"
    if a.cause == "preempted":
        return "preempted"
    if a.incident is None:
        return "finished" if _clean_end(recs, a.lo, a.hi) else "running"
    stopped = _failure_events([e for e in recs.events if float(e["time"]) >= a.lo])
    if a.cause == "unknown" and not a.culprits and not stopped and recs.marker is None:
        return "running"  # nothing says it stopped: still going, or it left no sign
    return "failed"


def tell(files: Iterable[RunFile] | Records, *, run_dir: str = "", end: float | None = None, end_label: str = "",
         cost_per_gpu_hour: float | None = None, currency: str = DEFAULT_CURRENCY) -> Story:
    """The story of a run from its files (or their records): attempts, causes, culprits, how each
    ended, where the job stands, and the downtime of each interruption (see `incidents`)."""
    recs = files if isinstance(files, Records) else parse(files, every_event=True)
    wins = _windows(recs)
    story = Story(problems=list(recs.problems))
    for k, (lo, hi, starts) in enumerate(wins):
        a = _attempt(recs, k + 1, lo, hi, starts)
        if a.incident is None and not a.members and not _anything_in(recs, lo, hi) and len(wins) > 1 \
                and not any(lo <= t < hi for _, _, t in recs.sightings):
            continue
        a.ended = _ending(recs, a, wins[k + 1] if k + 1 < len(wins) else None)
        if a.ended == "running" and a.incident is not None and a.cause == "unknown":
            a.cause, a.incident = "none", None  # still training: no stop to explain
        story.attempts.append(a)
    for n, a in enumerate(story.attempts, 1):
        a.index = n
    for rank, pid, t in recs.sightings:
        for a in story.attempts:
            if a.lo <= t < a.hi:
                story.pid_attempt.setdefault((rank, pid), a.index)
    last = story.attempts[-1] if story.attempts else None
    earlier = any(a.failed() for a in story.attempts[:-1])
    if last is None:
        story.state = "running"
    elif last.ended == "finished":
        story.state = "recovered, finished" if earlier else "finished"
    elif last.ended == "running":
        story.state = "recovered, training again" if earlier else "running"
    else:
        story.state = last.ended if last.ended in ("failed", "preempted") else "failed"
    story.downtime = incidents(recs, run_dir=run_dir, end=end, end_label=end_label,
                               cost_per_gpu_hour=cost_per_gpu_hour, currency=currency)
    return story
