"""Attribution: from a bundle (every node's captures and run-directory files) to a verdict.

Per rank, what it last did: the last collective it entered (flight-recorder dumps, hang records,
watchdog events, `Timeout at NCCL work` status lines), the collective it timed out in (watchdog
timeout lines, the flight recorder's entry still in flight), its heartbeat, its process state
(a stopped `T` process), its traceback or exit signal. The waiting ranks' lowest stuck
sequence number is where the ranks parted; the ranks that never entered it (behind, or silent)
are the culprits, mapped to their hosts.

Node faults are graded with the registered node checks over the collected captures, and Xid
events are put on the same clock as the hang: a node fault in the window before the first
failure is the cause, and the NCCL timeouts on every other node are its consequence.

Every rank's failure time comes from its own records (its crash record or `runtime.crash`
event, its hang record or `runtime.watchdog` event, its `runtime.exit` event), never from file
modification times: the ranks of one job fail within the same second, and a tie must not go to
the lowest rank. A launcher's summary (torchrun's failure table) adds each rank's exit code and
its "Root Cause (first observed failure)", evidence that agrees with the ranks' own records or is
outweighed by them. A rank the launcher ended (SIGTERM or SIGKILL after another rank failed, a
`runtime.exit` with how=signal) is a victim, never the culprit; exit code 75 is the runtime
watchdog's hang exit, never a crash; an exception that follows from another rank's failure
(connection closed by peer, a collective timeout) is a consequence.

A rank SIGKILLed first (the launcher's first observed failure, or a pid the OOM killer named in
its node's kernel log) that recorded nothing of its own, and that no peer's watchdog ended, was
killed from outside: the first failure, the other ranks' errors and timeouts its consequences;
the kernel's OOM-killer lines for its pid (`preflight.parsers.oom_kill`) are the evidence, or
their absence near the failure is said. A job its launcher restarted is read one attempt at a
time (`preflight.triage.restarts`, through `Window`).

Categories: hardware, software crash, communication hang, slowdown, none (only with positive
evidence of a clean run: every rank ended cleanly) and unknown (not enough evidence to decide;
never "none"). Input that could not be read (no run directory, an empty one, a corrupt hang or
crash record, unreadable files) is listed in `Verdict.input_errors`; what else was there is
still used.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from preflight import lazyre, slurm, timeparse
from preflight.framing import Doc, frame, syslog_year_fix
from preflight.model import Capture, Result, Status
from preflight.parsers import flight_recorder, nccl_log, oom_kill, py_spy, ras, torch_log
from preflight.parsers.py_spy import PySpyProcess
from preflight.parsers.torch_log import ChildFailure, Crash
from preflight.runtime import story
from preflight.triage.collect import (
    LOGS_PROBE,
    PROCS_PROBE,
    RUN_DIR_PROBE,
    Bundle,
    NodeFile,
    decode_files,
    decode_procs,
    decode_skipped,
)

CHECK = "triage.verdict"
KERNEL_LOG_PROBE = "kernel-log"  # the node checks' kernel log probe (checks/xid.py): dmesg -T, else journalctl -k
# A node fault counts as the cause when it happened at most this long before the first failure
# of the job (an Xid 79 takes the GPU off the bus at once; NCCL notices at its timeout, 10-30 min
# by default in PyTorch), and no later than this after it.
FAULT_WINDOW_BEFORE_S = 3600.0
FAULT_WINDOW_AFTER_S = 120.0
# an OOM kill of another pid (a container's own pid namespace) is offered as the killed rank only
# this close to the first failure: the peers fail within seconds of a rank's SIGKILL
OOM_HINT_WINDOW_S = 30.0
HARDWARE_FAMILIES = ("gpu.", "fabric.", "ib.")
CATEGORIES = ("hardware", "software crash", "communication hang", "bad data", "slowdown", "none", "unknown")
EXIT_HANG = 75  # the runtime watchdog's exit code (EX_TEMPFAIL): a hang, never a crash
# signals a launcher (or an operator, or the node) ends a rank with from outside
OUTSIDE_SIGNALS = {"SIGTERM": 15, "SIGKILL": 9, "SIGINT": 2, "SIGHUP": 1}
_SIGNAL_BY_NUMBER = {v: k for k, v in OUTSIDE_SIGNALS.items()}
_LAUNCHER_EXCEPTIONS = ("ChildFailedError",)  # the launcher's own traceback, not a rank's


@dataclass
class RankState:
    rank: int
    host: str = ""  # as the rank's own records name it
    node: str = ""  # the bundle node it ran on
    entered: int | None = None  # last collective sequence number it entered
    entered_op: str = ""
    stuck: int | None = None  # the collective it was waiting in when it gave up
    stuck_op: str = ""
    reported: bool = False  # it wrote a hang record / timeout line / watchdog event
    hang_time: float | None = None
    step: int | None = None
    heartbeat: dict[str, Any] | None = None
    proc_state: str = ""
    pid: int | None = None
    stack: list[str] = field(default_factory=list)
    crashes: list[Crash] = field(default_factory=list)  # tracebacks read from logs
    exits: list[ChildFailure] = field(default_factory=list)  # the launcher's failure table
    evidence: list[str] = field(default_factory=list)
    first_seen: float | None = None  # earliest failure time from the rank's own records
    first_source: str = ""  # which record gave first_seen
    record: dict[str, Any] | None = None  # its crash record (crash-rank<R>.json or runtime.crash event)
    end: dict[str, Any] | None = None  # its runtime.exit event's facts (how, exit_code, signal), with time
    launcher_host: str = ""  # the host the launcher's table names (torchrun standalone: "localhost")
    suspected_by: dict[int, str] = field(default_factory=dict)  # peer rank -> "stale"/"behind" in its hang record
    stale_for: float | None = None  # the longest time without a heartbeat a peer's hang record saw
    pids: set[int] = field(default_factory=set)  # every pid its records, its peers' and the launcher's name
    ended_by_peer: int | None = None  # the peer whose watchdog SIGKILLed it (a stopped rank it ended)
    oom: list[oom_kill.OomEvent] = field(default_factory=list)  # its node's OOM-killer lines naming its pid

    @property
    def root_cause(self) -> bool:
        return any(x.root_cause for x in self.exits)

    @property
    def launcher_time(self) -> float | None:
        times = [t.timestamp() for t in (torch_log.torchrun_time(x.time) for x in self.exits) if t]
        return min(times) if times else None

    def exit_code(self) -> int | None:
        """The rank's exit code: as the launcher observed it, else as its runtime.exit event says
        (what the rank meant to exit with: a watchdog that fired still turns it into 75)."""
        codes = [x.exitcode for x in self.exits if x.exitcode is not None]
        if codes:
            return codes[0]
        if self.end and isinstance(self.end.get("exit_code"), int):
            return int(self.end["exit_code"])
        return None

    def outside_signal(self) -> str:
        """SIGTERM/SIGKILL/... when the rank was ended from outside, else ""."""
        if self.end and self.end.get("how") == "signal":
            return str(self.end.get("signal") or "a signal")
        for x in self.exits:
            if x.signal in OUTSIDE_SIGNALS:
                return x.signal
            if x.exitcode is not None and x.exitcode < 0 and -x.exitcode in _SIGNAL_BY_NUMBER:
                return _SIGNAL_BY_NUMBER[-x.exitcode]
        return ""

    def hang_exit(self) -> bool:
        return (self.end is not None and self.end.get("how") == "hang") or self.exit_code() == EXIT_HANG

    def primary(self) -> dict[str, Any] | None:
        """Its own failure (not a consequence of another rank's): the crash record, else a traceback."""
        if self.record and not self.record.get("secondary"):
            return self.record
        for c in self.crashes:
            if not c.secondary:
                return {"type": c.exception, "message": c.message, "stack": c.lines, "source": "log"}
        return None

    def secondary(self) -> dict[str, Any] | None:
        if self.record and self.record.get("secondary"):
            return self.record
        for c in self.crashes:
            if c.secondary:
                return {"type": c.exception, "message": c.message, "stack": c.lines, "source": "log"}
        return None

    def clean_end(self) -> bool:
        if self.end is not None:
            return self.end.get("how") in ("clean", "preempted")
        return bool(self.heartbeat and self.heartbeat.get("state") == "closed") and not self.exits

    def note(self, line: str) -> None:
        if line not in self.evidence and len(self.evidence) < 40:
            self.evidence.append(line)

    def saw(self, seq: int | None, op: str = "") -> None:
        if seq is not None and (self.entered is None or seq > self.entered):
            self.entered, self.entered_op = seq, op or self.entered_op

    def fail_at(self, t: float | None, source: str = "") -> None:
        if t is not None and (self.first_seen is None or t < self.first_seen):
            self.first_seen, self.first_source = t, source


@dataclass
class NodeFault:
    node: str
    check: str
    summary: str
    evidence: list[str]
    remedy: str
    time: float | None = None  # epoch seconds of the earliest event, when the log says
    xids: list[int] = field(default_factory=list)
    correlated: bool = True


@dataclass
class Verdict:
    category: str
    summary: str
    culprits: list[dict[str, Any]] = field(default_factory=list)  # [{"node", "ranks"}]
    evidence: list[str] = field(default_factory=list)
    action: str = ""
    collective: dict[str, Any] = field(default_factory=dict)  # {"op", "seq"} where the ranks parted
    first_failure: dict[str, Any] = field(default_factory=dict)
    ranks: list[dict[str, Any]] = field(default_factory=list)
    node_faults: list[dict[str, Any]] = field(default_factory=list)
    job: dict[str, Any] = field(default_factory=dict)
    input_errors: list[str] = field(default_factory=list)  # input that could not be read, and why
    # a job its launcher restarted: each attempt's incident, the latest last ({attempt, category,
    # summary, culprits, first_failure, collective, time}), and how the job went on
    # ({restarts, recovered, state: "ended cleanly" / "training again" / "failed again", ...})
    incidents: list[dict[str, Any]] = field(default_factory=list)
    recovery: dict[str, Any] = field(default_factory=dict)
    # the run read attempt by attempt (preflight.runtime.story: {attempts, state, recovered})
    story: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"category": self.category, "summary": self.summary, "culprits": self.culprits,
                "evidence": self.evidence, "action": self.action, "collective": self.collective,
                "first_failure": self.first_failure, "ranks": self.ranks, "node_faults": self.node_faults,
                "job": self.job, "input_errors": self.input_errors, "incidents": self.incidents,
                "recovery": self.recovery, "story": self.story}


@dataclass
class Window:
    """One attempt of a job that a launcher restarted (torchrun --max-restarts): only the records
    of that attempt are read. A record that names its pid belongs to the attempt in which that
    pid ended (its runtime.exit event); else its time decides: `lo` < time <= `hi`."""

    attempt: int
    lo: float | None
    hi: float | None
    pid_attempt: dict[tuple[int, int], int] = field(default_factory=dict)  # (rank, pid) -> attempt
    logs: bool = False  # logs carry no reliable time: read in the last attempt only
    live: bool = False  # the processes still running belong to this attempt

    def keeps(self, rank: int | None, t: Any, pid: Any = None) -> bool:
        if rank is not None and isinstance(pid, int) and (rank, pid) in self.pid_attempt:
            return self.pid_attempt[(rank, pid)] == self.attempt
        if not isinstance(t, (int, float)) or isinstance(t, bool):
            return True
        return (self.lo is None or t > self.lo) and (self.hi is None or t <= self.hi)


@dataclass
class Facts:
    """Everything read from a bundle, before any decision."""

    ranks: dict[int, RankState] = field(default_factory=dict)
    world: set[int] = field(default_factory=set)
    node_faults: list[NodeFault] = field(default_factory=list)
    node_results: list[Result] = field(default_factory=list)
    stragglers: list[dict[str, Any]] = field(default_factory=list)
    fr_findings: list[tuple[str, flight_recorder.FRTraceFinding]] = field(default_factory=list)
    ras: list[tuple[str, ras.RasStatus]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    input_errors: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    file_times: list[float] = field(default_factory=list)  # log mtimes: only to place node faults in time
    run_dir_files: int = 0  # files the run-directory probes brought back, all nodes
    oom: dict[str, oom_kill.OomLog] = field(default_factory=dict)  # node -> its kernel log's OOM-killer lines
    kernel_log_missing: dict[str, str] = field(default_factory=dict)  # node -> why its kernel log was not read
    ends: list[dict[str, Any]] = field(default_factory=list)  # every runtime.exit event: rank, time, how, pid, step
    sightings: list[tuple[int, int, float]] = field(default_factory=list)  # (rank, pid, time) of records with a pid
    window: Window | None = None  # read one attempt of a restarted job only

    def keeps(self, rank: int | None, t: Any, pid: Any = None) -> bool:
        """Whether a record of `rank` at time `t` (by process `pid`) belongs to what is read."""
        if isinstance(pid, int) and isinstance(t, (int, float)) and rank is not None:
            self.sightings.append((rank, pid, float(t)))
        return self.window is None or self.window.keeps(rank, t, pid)

    def rank(self, r: int) -> RankState:
        if r not in self.ranks:
            self.ranks[r] = RankState(rank=r)
        return self.ranks[r]


# ----- reading ----------------------------------------------------------------------------------


def _base(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def _src(node: str, name: str, line: str = "") -> str:
    where = f"{node}:{name}"
    return f"{where}: {line}" if line else where


def _read_hang_record(facts: Facts, node: str, f: NodeFile, doc: dict[str, Any]) -> None:
    r = doc["rank"]
    if not facts.keeps(r, doc.get("time"), doc.get("pid")):
        return
    st = facts.rank(r)
    st.reported = True
    st.host = str(doc.get("host") or st.host)
    _add_pid(st, doc.get("pid"))
    st.step = doc.get("step") if isinstance(doc.get("step"), int) else st.step
    t = doc.get("time")
    if isinstance(t, (int, float)) and not isinstance(t, bool):
        st.hang_time = float(t)
        st.fail_at(float(t), "hang record")
    fr = doc.get("flight_recorder") or {}
    last = (fr.get("last") or {}) if isinstance(fr, dict) else {}
    if isinstance(last, dict) and isinstance(last.get("seq"), int):
        st.saw(last["seq"], _op(str(last.get("op") or "")))
    stacks = doc.get("stacks") or {}
    main = next((v for k, v in stacks.items() if str(k).startswith("MainThread")), None) \
        if isinstance(stacks, dict) else None
    if isinstance(main, list) and main:
        st.stack = [str(x).strip().splitlines()[0] for x in main[-3:] if str(x).strip()]
    st.note(_src(node, f.name, f"rank {r} on {st.host or node}: watchdog fired in {doc.get('section')} at step "
                               f"{doc.get('step')} after {doc.get('elapsed_s')} s (timeout {doc.get('timeout_s')} s)"))
    for peer in doc.get("peers") or []:
        if isinstance(peer, dict) and isinstance(peer.get("rank"), int) and not isinstance(peer["rank"], bool):
            facts.world.add(peer["rank"])
            pst = facts.rank(peer["rank"])
            if peer.get("host") and not pst.host:
                pst.host = str(peer["host"])
            _add_pid(pst, peer.get("pid"))
            _peer_sighting(facts, peer, t)
            if peer["rank"] != r and (peer.get("stale") or peer.get("behind")):
                pst.suspected_by[r] = "stale" if peer.get("stale") else "behind"
                age = peer.get("age_s")
                if peer.get("stale") and isinstance(age, (int, float)):
                    pst.stale_for = max(pst.stale_for or 0.0, float(age))


def _read_crash_record(facts: Facts, node: str, name: str, doc: dict[str, Any], from_event: bool = False) -> None:
    """A crash record (crash-rank<R>.json), or a runtime.crash event standing in for a missing one."""
    r = doc["rank"]
    if not facts.keeps(r, doc.get("time"), doc.get("pid")):
        return
    st = facts.rank(r)
    facts.world.add(r)
    if st.record is not None and (from_event or st.record.get("source") != "event"):
        return  # the record file wins over the event; the first record wins
    exc: dict[str, Any] = doc["exception"] if isinstance(doc.get("exception"), dict) else {}
    etype = str(exc.get("type") or doc.get("exception_type") or "Exception")
    msg = str(exc.get("message") if exc.get("message") is not None else doc.get("message") or "")
    t = doc.get("time")
    when = float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None
    stack = [str(x) for x in doc.get("stack") or [] if isinstance(x, str)] if isinstance(doc.get("stack"), list) else []
    st.record = {"type": etype, "message": msg, "time": when, "step": doc.get("step"), "section": doc.get("section"),
                 "thread": doc.get("thread"), "stack": stack, "source": "event" if from_event else "record",
                 "file": _src(node, name), "secondary": bool(torch_log.SECONDARY.search(f"{etype}: {msg}"))}
    st.host = str(doc.get("host") or "") or st.host
    _add_pid(st, doc.get("pid"))
    if isinstance(doc.get("step"), int) and not isinstance(doc.get("step"), bool):
        st.step = doc["step"]
    st.fail_at(when, "crash record" if not from_event else "runtime.crash event")
    where = f" at step {doc.get('step')}" if doc.get("step") is not None else ""
    where += f" in section '{doc.get('section')}'" if doc.get("section") else ""
    st.note(_src(node, name, f"rank {r} raised{where}: {etype}: {msg}"[:300]))


def _peer_sighting(facts: Facts, peer: dict[str, Any], t: Any) -> None:
    """A peer's process as a hang record saw it: alive at its last heartbeat (the record's time
    less the heartbeat's age)."""
    age = peer.get("age_s")
    if isinstance(peer.get("pid"), int) and isinstance(t, (int, float)) and isinstance(age, (int, float)):
        facts.sightings.append((peer["rank"], peer["pid"], float(t) - float(age)))


def _add_pid(st: RankState, pid: Any) -> None:
    if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0:
        st.pids.add(pid)


# the watchdog's runtime.exit summary when it SIGKILLed stopped peers: "...; ended stopped rank 1 (pid 8688)"
_ENDED_PEER = lazyre.compile(r"rank (\d+) \(pid (\d+)\)")


def _op(name: str) -> str:
    return name.partition(":")[2] if ":" in name else name


def _read_fr(facts: Facts, node: str, f: NodeFile, dump: flight_recorder.FRDump) -> None:
    times = [e.time_created_ns for e in dump.entries if e.time_created_ns]
    if not facts.keeps(dump.rank, max(times) / 1e9 if times else None):
        return
    if dump.rank is None:
        facts.problems.append(_src(node, f.name, "flight-recorder dump without a rank in its name; not used"))
        return
    if dump.problem:
        facts.problems.append(_src(node, f.name, dump.problem))
    pg = "0" if dump.collectives("0") else next(iter(dump.pg_ranks), "0")
    facts.world.update(dump.world(pg))
    st = facts.rank(dump.rank)
    last = dump.last_entered(pg)
    if last is None:
        return
    st.saw(last.seq, last.op)
    coll = dump.collectives(pg)
    pending = [e for e in coll if e.retired is False or e.state in ("started",)]
    if any(e.state == "completed" for e in coll):  # NCCL: the first collective not completed
        pending = pending or [e for e in coll if e.state != "completed"]
    if pending:
        first = min(pending, key=lambda e: e.seq or 0)
        if st.stuck is None or (first.seq is not None and first.seq < st.stuck):
            st.stuck, st.stuck_op = first.seq, first.op
        st.reported = True  # a collective still in flight in its dump: this rank was waiting
    state = f"in flight ({last.state})" if last in pending else f"{last.state}, retired"
    st.note(_src(node, f.name, f"rank {dump.rank}: last collective entered {last.op} seq {last.seq} [{state}]; "
                               f"{len(coll)} entries"))


def _read_heartbeat(facts: Facts, node: str, f: NodeFile, doc: dict[str, Any]) -> None:
    r = doc.get("rank")
    if not isinstance(r, int) or not facts.keeps(r, doc.get("time"), doc.get("pid")):
        return
    facts.world.add(r)
    st = facts.rank(r)
    st.heartbeat = doc
    st.host = st.host or str(doc.get("host") or "")
    _add_pid(st, doc.get("pid"))
    if isinstance(doc.get("step"), int) and st.step is None:
        st.step = doc["step"]
    if doc.get("state") == "hang":  # its watchdog fired (even if its hang record is missing)
        st.reported = True


def _event_time(ev: dict[str, Any]) -> float | None:
    t = ev.get("time")
    return t if isinstance(t, (int, float)) and not isinstance(t, bool) else None


def _read_events(facts: Facts, node: str, f: NodeFile) -> None:
    """A rank's events-*.jsonl: stragglers, watchdog firings, crashes and ends."""
    events, _ = story.load_events(f.data)  # torn lines: the story names them
    for ev in events:
        r = ev.get("rank")
        check = str(ev.get("check", ""))
        pid = _event_facts(ev).get("pid") if check == "runtime.exit" else None
        if not facts.keeps(r if isinstance(r, int) else None, ev.get("time"), pid):
            continue
        if check == "runtime.straggler":
            _event_straggler(facts, node, f, ev)
            continue
        if not isinstance(r, int) or isinstance(r, bool) or r < 0:
            continue
        read = _RANK_EVENTS.get(check)
        if read is not None:
            read(facts, node, f, ev, r)


def _event_facts(ev: dict[str, Any]) -> dict[str, Any]:
    return ev["facts"] if isinstance(ev.get("facts"), dict) else {}


def _event_straggler(facts: Facts, node: str, f: NodeFile, ev: dict[str, Any]) -> None:
    if ev.get("status") in ("warn", "fail"):
        facts_ = _event_facts(ev)
        facts.stragglers.append({"source": _src(node, f.name), "summary": ev.get("summary", ""),
                                 "ranks": list(facts_.get("stragglers") or []),
                                 "hosts": list(facts_.get("hosts") or []), "time": ev.get("time")})


def _event_watchdog(facts: Facts, node: str, f: NodeFile, ev: dict[str, Any], r: int) -> None:
    facts_ = _event_facts(ev)
    st = facts.rank(r)
    facts.world.add(r)
    st.reported = True
    st.host = st.host or str(ev.get("node") or "")
    if isinstance(facts_.get("seq"), int):
        st.saw(facts_["seq"], _op(str(facts_.get("op") or "")))
    st.fail_at(_event_time(ev), "runtime.watchdog event")


def _event_crash(facts: Facts, node: str, f: NodeFile, ev: dict[str, Any], r: int) -> None:
    facts_ = _event_facts(ev)
    doc = {**facts_, "rank": r, "host": ev.get("node"), "time": facts_.get("time", _event_time(ev))}
    _read_crash_record(facts, node, f.name, doc, from_event=True)


def _event_exit(facts: Facts, node: str, f: NodeFile, ev: dict[str, Any], r: int) -> None:
    facts_ = _event_facts(ev)
    t = _event_time(ev)
    st = facts.rank(r)
    facts.world.add(r)
    st.host = st.host or str(ev.get("node") or "")
    facts.ends.append({"rank": r, "time": t, "how": str(facts_.get("how") or ""), "step": facts_.get("step"),
                       "pid": facts_.get("pid") if isinstance(facts_.get("pid"), int) else None})
    if st.end is None:
        st.end = {"how": str(facts_.get("how") or ""), "exit_code": facts_.get("exit_code"),
                  "signal": facts_.get("signal"), "time": t, "step": facts_.get("step")}
    _add_pid(st, facts_.get("pid"))
    summary = str(ev.get("summary") or "")
    if "ended stopped " in summary:
        for m in _ENDED_PEER.finditer(summary.split("ended stopped ", 1)[1]):
            victim = facts.rank(int(m.group(1)))
            victim.ended_by_peer = r
            _add_pid(victim, int(m.group(2)))
    how = st.end["how"]
    if how == "hang":
        st.reported = True
    if how in ("exception", "hang"):
        st.fail_at(t, "runtime.exit event")
    if how != "clean":
        st.note(_src(node, f.name, str(ev.get("summary") or f"rank {r} ended: {how}")[:300]))


_RANK_EVENTS: dict[str, Callable[[Facts, str, NodeFile, dict[str, Any], int], None]] = {
    "runtime.watchdog": _event_watchdog, "runtime.crash": _event_crash, "runtime.exit": _event_exit}


def _read_log(facts: Facts, node: str, f: NodeFile, located: dict[int, set[str]]) -> None:
    """A rank's log, read through the same parsers as `preflight analyze` (framed first)."""
    text = f.text
    file_rank = flight_recorder.rank_from_name(f.name)
    if file_rank is not None:
        facts.world.add(file_rank)
        located[file_rank].add(node)
        facts.rank(file_rank)
    docs = frame(text, origin=f"{node}:{f.name}").docs
    doc = docs[0] if len(docs) == 1 else Doc.join(docs)
    tl = torch_log.parse(doc)
    _read_hang_events(facts, node, f, tl.hang, file_rank, located)
    if f.mtime is not None and (tl.rank_log.crashes or tl.hang.events):
        facts.file_times.append(float(f.mtime))
    _read_log_crashes(facts, node, f, tl.rank_log.crashes, file_rank, located)
    for x in tl.rank_log.failures:
        _read_launcher_exit(facts, node, f, x, located)
    _read_log_diagnostics(facts, node, f, doc, file_rank, located)


def _read_log_crashes(facts: Facts, node: str, f: NodeFile, crashes: list[Crash], file_rank: int | None,
                      located: dict[int, set[str]]) -> None:
    """The tracebacks in a log, each the rank's that printed it (the launcher's own left out)."""
    for c in crashes:
        r = c.rank if c.rank is not None else file_rank
        if r is None or c.exception.endswith(_LAUNCHER_EXCEPTIONS):
            continue
        st = facts.rank(r)
        facts.world.add(r)
        st.crashes.append(c)
        located[r].add(node)
        st.note(_src(node, f.name, f"rank {r}: {c.exception}: {c.message}"[:300]))


def _read_launcher_exit(facts: Facts, node: str, f: NodeFile, x: ChildFailure,
                        located: dict[int, set[str]]) -> None:
    """One row of the launcher's failure table (torchrun's ChildFailedError summary)."""
    if x.rank is None:
        return
    st = facts.rank(x.rank)
    facts.world.add(x.rank)
    st.exits.append(x)
    _add_pid(st, x.pid)
    if x.host in ("", "localhost", "127.0.0.1"):  # a local launcher: its ranks ran where its log is
        located[x.rank].add(node)
    else:
        st.launcher_host = st.launcher_host or x.host
    if x.exitcode == EXIT_HANG:
        st.reported = True  # its watchdog fired: it was waiting, not crashing
    what = "watchdog hang exit" if x.exitcode == EXIT_HANG else (x.signal or "")
    st.note(_src(node, f.name, f"launcher: rank {x.rank} exitcode {x.exitcode}" + (f" ({what})" if what else "")
                 + (" [torchrun's root cause: first observed failure]" if x.root_cause else "")))


def _read_log_diagnostics(facts: Facts, node: str, f: NodeFile, doc: Doc, file_rank: int | None,
                          located: dict[int, set[str]]) -> None:
    """What else a log may hold: fr_trace findings, an NCCL RAS status, py-spy dumps, NCCL errors."""
    text = f.text
    if flight_recorder.detect(doc):
        for finding in flight_recorder.parse(doc).findings:
            facts.fr_findings.append((_src(node, f.name), finding))
    if ras.looks_like_ras(text):
        status = ras.parse_ras(text)
        if not status.empty:
            facts.ras.append((_src(node, f.name), status))
    if re.search(r"^Process \d+: ", text, re.M) and re.search(r"^Thread \S+ \(", text, re.M):
        for proc in py_spy.parse_py_spy(text):
            _attach_py_spy(facts, node, f.name, proc, file_rank)
    if nccl_log.detect(doc):
        _read_nccl_errors(facts, node, f, nccl_log.parse(doc), file_rank, located)


def _read_hang_events(facts: Facts, node: str, f: NodeFile, log: torch_log.HangLog, file_rank: int | None,
                      located: dict[int, set[str]]) -> None:
    for ev in log.events:
        r = ev.rank if ev.rank is not None else file_rank
        if r is None:
            continue
        st = facts.rank(r)
        if ev.rank is not None:
            located[r].add(node)
        if ev.kind == "nccl_timeout":
            st.reported = True
            if ev.seq is not None:
                st.saw(ev.seq, ev.op)
                if st.stuck is None or ev.seq < st.stuck:
                    st.stuck, st.stuck_op = ev.seq, ev.op
            st.note(_src(node, f.name, ev.line[:300]))
        elif ev.kind == "nccl_status":
            st.reported = True
            st.saw(ev.last_enqueued)
            if ev.seq is not None and (st.stuck is None or ev.seq < st.stuck):
                st.stuck = ev.seq
            st.note(_src(node, f.name, ev.line[:300]))
        elif ev.kind in ("gloo_timeout", "gloo_peer_closed", "nccl_error"):
            st.reported = True
            st.note(_src(node, f.name, ev.line[:300]))


def _read_nccl_errors(facts: Facts, node: str, f: NodeFile, log: nccl_log.NcclLog, file_rank: int | None,
                      located: dict[int, set[str]]) -> None:
    """NCCL WARN errors (CUDA OOM, IB completion, queue-pair setup, lost peers) as rank evidence."""
    for e in log.errors:
        r = e.rank if e.rank is not None else file_rank
        if r is None:
            continue
        st = facts.rank(r)
        located[r].add(node)
        st.host = st.host or e.host
        st.note(_src(node, f.name, f"NCCL {e.kind}: {e.line}"[:300]))


def _attach_py_spy(facts: Facts, node: str, name: str, proc: PySpyProcess, rank: int | None) -> None:
    if rank is None:
        m = re.search(r"--rank[= ](\d+)|RANK=(\d+)", proc.cmdline)
        rank = int(m.group(1) or m.group(2)) if m else None
    main = proc.main_thread()
    if rank is None or main is None:
        return
    st = facts.rank(rank)
    st.stack = main.frames[:4]
    st.note(_src(node, name, f"py-spy: rank {rank} pid {proc.pid} main thread in " + " <- ".join(main.frames[:3])))


def _read_procs(facts: Facts, node: str, procs: list[dict[str, Any]], located: dict[int, set[str]]) -> None:
    for p in procs:
        r = p.get("rank")
        if not isinstance(r, int):
            continue
        st = facts.rank(r)
        located[r].add(node)
        st.proc_state = str(p.get("state", ""))
        st.pid = p.get("pid") if isinstance(p.get("pid"), int) else None
        _add_pid(st, st.pid)
        what = {"T": "stopped (SIGSTOP or a debugger)", "D": "in uninterruptible sleep (I/O or driver)",
                "Z": "a zombie", "R": "running", "S": "sleeping"}.get(st.proc_state, st.proc_state)
        st.note(_src(node, PROCS_PROBE, f"rank {r} pid {p.get('pid')} still alive on {node}: state "
                                        f"{st.proc_state} = {what}"))
        if p.get("py_spy"):
            for proc in py_spy.parse_py_spy(str(p["py_spy"])):
                _attach_py_spy(facts, node, PROCS_PROBE, proc, r)


def _epoch(t: datetime | None) -> float | None:
    """Unix time of a kernel log line's time (naive: local time); None when the line has none."""
    return None if t is None else timeparse.epoch(t)


# the kernel's own reports that end a job (not the corrected-error noise beside them): they time a
# node's fault like an Xid does
TIMED_HARDWARE = frozenset({"pcie_fatal", "sxid_fatal"})


def _node_faults(facts: Facts, node: str, captures: dict[str, Capture], since: datetime | None,
                 registry: Any) -> None:
    """Grade the node's captures with the one grading function; hardware FAILs are node faults,
    timed by the earliest Xid / kernel fault the kernel log shows."""
    from preflight import engine
    from preflight import profile as profiles
    from preflight.grading import FactStore, grade_node
    from preflight.parsers.kernel_log import KernelLog
    from preflight.registry import Options

    opts = Options(mode="run", xid_since=since)
    store = FactStore(registry, captures=captures)
    prof = profiles.load(engine.detect_profile_name(store))
    checks = [c for c in engine.select(registry, node_only=True) if not callable(c.probes)]
    planned = {c.id: [p.name for p in c.probes_for(_plan_ctx(prof, opts)) if p.name in captures] for c in checks}
    checks = [c for c in checks if planned[c.id]]
    times: dict[str, float | None] = {}
    xids: list[int] = []
    klog = store.facts("kernel-log") if store.input("kernel-log") is not None else None
    if isinstance(klog, KernelLog):
        ref = since or datetime.now()
        cut = _epoch(since) if since is not None else None
        fatal_hw = [k for k in klog.hardware if k.kind in TIMED_HARDWARE and not k.resolved]
        timed = [(_epoch(syslog_year_fix(ev.line.time, ref)), x) for ev, x in
                 [(e, e.xid) for e in klog.events] + [(k, None) for k in [*klog.faults, *fatal_hw]]]
        timed = [(t, x) for t, x in timed if cut is None or t is None or t >= cut]
        known = [t for t, _ in timed if t is not None]
        times["gpu.xid"] = min(known) if known else None
        xids = sorted({x for _, x in timed if x is not None})
    for r in grade_node(checks, node, store, prof, opts, planned):
        r.source = r.source or f"bundle:{node}"
        facts.node_results.append(r)
        # a missing tool or a probe that could not run is "not checked", never a hardware fault
        measured = all(captures[p].ok for p in planned.get(r.check, []))
        if measured and r.status is Status.FAIL and r.check.startswith(HARDWARE_FAMILIES):
            facts.node_faults.append(NodeFault(node=node, check=r.check, summary=r.summary,
                                               evidence=list(r.evidence[:6]), remedy=r.remedy,
                                               time=times.get(r.check), xids=xids if r.check == "gpu.xid" else []))


def _plan_ctx(prof: Any, opts: Any) -> Any:
    from preflight.registry import PlanContext

    return PlanContext(node="node", profile=prof, options=opts)


@dataclass
class _Census:
    """What the file probes brought back, counted before any file is read."""

    where_file: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # base name -> nodes
    run_dir_probed: int = 0
    run_dir_missing: list[str] = field(default_factory=list)  # "node: why" where the run directory was not read
    log_files: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # --log probe -> files, all nodes
    log_missing: dict[str, str] = field(default_factory=dict)  # --log probe -> why it found nothing


def _file_probes(caps: dict[str, Capture]) -> Iterator[tuple[str, Capture]]:
    """The node's run-directory and --log captures, in probe order."""
    for probe in sorted(caps):
        if probe == RUN_DIR_PROBE or probe.startswith(LOGS_PROBE):
            yield probe, caps[probe]


def _count_files(facts: Facts, bundle: Bundle) -> _Census:
    census = _Census()
    for node, caps in sorted(bundle.nodes.items()):
        for probe, cap in _file_probes(caps):
            files, problem = decode_files(cap)
            if probe == RUN_DIR_PROBE:
                census.run_dir_probed += 1
                facts.run_dir_files += len(files)
                if problem:
                    census.run_dir_missing.append(f"{node}: {problem}")
            else:
                census.log_files[probe] += len(files)
                if problem:
                    census.log_missing.setdefault(probe, problem)
            if problem:
                facts.problems.append(f"{node}:{probe}: {problem}")
            for path, why in decode_skipped(cap):
                facts.input_errors.append(f"{node}:{path}: unreadable: {why}")
            for f in files:
                census.where_file[_base(f.name)].add(node)
    return census


def _missing_input(facts: Facts, census: _Census, run_dir: str) -> None:
    """A run directory that held nothing anywhere, a --log glob that matched nothing anywhere."""
    if census.run_dir_probed and not facts.run_dir_files:
        where = run_dir or "the run directory"
        if len(census.run_dir_missing) == census.run_dir_probed:
            facts.input_errors.insert(0, f"{where}: not read on any node ({'; '.join(census.run_dir_missing[:4])})")
        else:
            facts.input_errors.insert(0, f"{where}: holds no files on any node (nothing to read)")
    for probe, n in sorted(census.log_files.items()):
        if not n:
            facts.input_errors.append(f"--log {census.log_missing.get(probe) or 'a glob: no file read on any node'}")


def _read_node_files(facts: Facts, node: str, caps: dict[str, Capture], census: _Census,
                     seen_files: set[tuple[str, bytes]], located: dict[int, set[str]]) -> None:
    """Read the node's files, each once: a shared run directory shows every node the same files,
    and a file seen on several nodes does not place its ranks on this one."""
    for _, cap in _file_probes(caps):
        files, _ = decode_files(cap)
        for f in files:
            base = _base(f.name)
            key = (base, f.data[:4096] + f.data[-4096:])
            if key in seen_files:
                continue
            seen_files.add(key)
            loc = node if len(census.where_file[base]) == 1 else ""
            _read_file(facts, loc or node, f, located if loc else defaultdict(set))


def _place_ranks(facts: Facts, located: dict[int, set[str]]) -> None:
    """Where each rank ran: its own records' host, else the only node its files were found on,
    else the launcher's host name."""
    for r, st in facts.ranks.items():
        if st.host and st.host in facts.nodes:
            st.node = st.host
        elif len(located.get(r, ())) == 1:
            st.node = next(iter(located[r]))
        else:
            st.node = st.host or (st.launcher_host if st.launcher_host in facts.nodes else "")


def read_bundle_facts(bundle: Bundle, registry: Any | None = None, since: datetime | None = None,
                      window: Window | None = None) -> Facts:
    """Read every node's captures and run-directory files into per-rank facts (of one attempt
    of a restarted job with `window`)."""
    facts = Facts(nodes=sorted(set(bundle.nodes) | set(bundle.errors)), window=window)
    located: dict[int, set[str]] = defaultdict(set)
    census = _count_files(facts, bundle)
    _missing_input(facts, census, bundle.run_dir)
    seen_files: set[tuple[str, bytes]] = set()
    for node, caps in sorted(bundle.nodes.items()):
        _read_node_files(facts, node, caps, census, seen_files, located)
        if facts.window is None or facts.window.live:
            _read_procs(facts, node, decode_procs(caps.get(PROCS_PROBE)), located)
        _read_oom(facts, node, caps.get(KERNEL_LOG_PROBE))
        if registry is not None:
            _node_faults(facts, node, caps, since, registry)
    for node, err in bundle.errors.items():
        facts.problems.append(f"{node}: not collected: {err}")
    _place_ranks(facts, located)
    _match_oom(facts)
    return facts


def _read_oom(facts: Facts, node: str, cap: Capture | None) -> None:
    """The node's kernel log (the node checks' `kernel-log` probe: dmesg, else journalctl -k),
    read for the OOM killer's lines; why it could not be read, when it could not."""
    if cap is None:
        facts.kernel_log_missing[node] = "not collected"
    elif not cap.ok:
        facts.kernel_log_missing[node] = cap.reason or cap.state.value
    else:
        facts.oom[node] = oom_kill.parse(cap.stdout, origin=f"{node}:{KERNEL_LOG_PROBE}")


def _match_oom(facts: Facts) -> None:
    """A rank whose pid the OOM killer named on its node (or, node unknown, on any node)."""
    for st in facts.ranks.values():
        logs = [facts.oom[st.node]] if st.node in facts.oom else list(facts.oom.values()) if not st.node else []
        for log in logs:
            for pid in sorted(st.pids):
                st.oom += log.of(pid)


def _read_file(facts: Facts, node: str, f: NodeFile, located: dict[int, set[str]]) -> None:
    base = _base(f.name)
    kind = story.record_kind(base)
    if kind in ("hang record", "crash record", "heartbeat"):
        doc, why = story.load_record(base, f.data)  # the run directory's one reader
        if doc is not None and f.truncated:
            doc, why = None, "truncated in collection (over the per-file limit)"
        if doc is None:
            if kind == "heartbeat":
                facts.problems.append(f"{_src(node, f.name)}: unreadable heartbeat ({why}); not used")
            else:
                facts.input_errors.append(f"{_src(node, f.name)}: corrupt {kind}: {why}; not used")
            return
        {"hang record": lambda: _read_hang_record(facts, node, f, doc),
         "crash record": lambda: _read_crash_record(facts, node, f.name, doc),
         "heartbeat": lambda: _read_heartbeat(facts, node, f, doc)}[kind]()
        located[doc["rank"]].add(node)
        return
    if kind == "events":
        _read_events(facts, node, f)
        return
    head = f.data[:1]
    if base.startswith(("fr-", "nccl_trace")) or (head == b"\x80" and flight_recorder.rank_from_name(base) is not None):
        dump = flight_recorder.parse_fr_dump(f.data, base)
        _read_fr(facts, node, f, dump)
        if dump.rank is not None:
            located[dump.rank].add(node)
        return
    if b"\x00" in f.data[:4096] or base.endswith((".json", ".jsonl", ".pt", ".bin")):
        return
    _read_text(facts, node, f, located)


def _read_text(facts: Facts, node: str, f: NodeFile, located: dict[int, set[str]]) -> None:
    """A log: whole, or in an attempt of a restarted job other than the last only the launcher's
    lines that name a pid (the rest of a log has no time that places it in an attempt)."""
    if facts.window is None or facts.window.logs:
        _read_log(facts, node, f, located)
    if facts.window is not None:
        _read_agent_failures(facts, node, f)


def _read_agent_failures(facts: Facts, node: str, f: NodeFile) -> None:
    """torchrun's line for the first failed worker of an attempt (`failed (exitcode: -9)
    local_rank: 2 (pid: 4242) of binary: ...`), read in every attempt of a restarted job: its pid
    says which rank and which attempt it was (else, on one node, its order and local rank), the
    launcher's first observed failure there."""
    w = facts.window
    if w is None or b"failed (exitcode:" not in f.data:
        return
    from preflight.parsers import torch_elastic

    lines = [ln for ln in f.text.splitlines() if "failed (exitcode:" in ln]
    by_pid = {pid: r for (r, pid) in w.pid_attempt}
    for i, x in enumerate(torch_elastic.parse_elastic(lines).failures):
        r = by_pid.get(x.pid) if x.pid is not None else None
        attempt = w.pid_attempt.get((r, x.pid)) if r is not None and x.pid is not None else None
        if r is None and len(facts.nodes) == 1:
            # a pid no record names (a rank killed before its peers could see it): one agent logs
            # one such line per failed attempt, in order, and on one node its local rank is the rank
            r, attempt = x.local_rank, i
        if r is None or attempt != w.attempt:
            continue
        st = facts.rank(r)
        if any(e.pid == x.pid for e in st.exits):
            continue
        _add_pid(st, x.pid)
        st.exits.append(ChildFailure(rank=r, host="", exitcode=x.exitcode, pid=x.pid, signal=x.signal, time="",
                                     lines=[x.line], root_cause=not any(s.root_cause for s in facts.ranks.values())))
        if x.exitcode == EXIT_HANG:
            st.reported = True
        st.note(_src(node, f.name, f"launcher: rank {r} (pid {x.pid}) exitcode {x.exitcode}"
                     + (f" ({x.signal})" if x.signal else "") + ": the first failure it saw in this attempt"))


# ----- deciding ---------------------------------------------------------------------------------


def _hang(facts: Facts) -> tuple[list[int], dict[str, Any], list[str]]:
    """(culprit ranks, {op, seq}, evidence) for a collective hang; no culprit when none is clear."""
    states = facts.ranks
    waiting = [s for s in states.values() if s.reported]
    if not waiting:
        return [], {}, []
    stuck = [s for s in waiting if s.stuck is not None]
    seq: int | None = None
    op = ""
    if stuck:
        part = min(stuck, key=lambda s: (s.stuck or 0, s.rank))
        seq, op = part.stuck, part.stuck_op or next((s.stuck_op for s in stuck if s.stuck == part.stuck
                                                      and s.stuck_op), "")
    else:
        entered = [s for s in waiting if s.entered is not None]
        if entered:
            top = max(entered, key=lambda s: s.entered or 0)
            seq, op = top.entered, top.entered_op
    if seq is not None and not op:
        op = next((s.entered_op for s in states.values() if s.entered == seq and s.entered_op), "")
    everyone = set(states) | facts.world
    behind: list[int] = []
    silent: list[int] = []
    ev: list[str] = []
    for r in sorted(everyone):
        s = facts.rank(r)
        if s.entered is not None and seq is not None and s.entered < seq:
            behind.append(r)
            ev.append(f"rank {r} never entered {op or 'the collective'} seq {seq}: its last was seq {s.entered}")
        elif not s.reported and s.entered is None and not s.clean_end():
            silent.append(r)
    silent = _narrow_silent(facts, silent, ev)
    for r in silent:
        ev.append(f"rank {r} wrote no hang record and no timeout line while its peers waited")
    for r in sorted(set(behind) | set(silent)):
        st = facts.rank(r)
        if st.suspected_by:
            how = " and ".join(sorted(set(st.suspected_by.values())))
            age = f" (no heartbeat for {st.stale_for:.1f} s)" if st.stale_for is not None else ""
            ev.append(f"the hang records of {_ranks(sorted(st.suspected_by))} name rank {r} as {how}{age}")
    waiting_at = sorted(s.rank for s in stuck if s.stuck == seq)
    if waiting_at:
        ev.insert(0, f"{_ranks(waiting_at)} waited in {op or 'a collective'} seq {seq}")
    coll: dict[str, Any] = {"op": op, "seq": seq} if seq is not None else {}
    return sorted(set(behind) | set(silent)), coll, ev


def _narrow_silent(facts: Facts, silent: list[int], ev: list[str]) -> list[int]:
    """Of the ranks that reported nothing, those their peers' hang records name (stale, behind);
    else those that needed SIGKILL (did not end on SIGTERM: stopped or stuck) over those that ended
    on SIGTERM at once (victims of the launcher's clean-up)."""
    if len(silent) < 2:
        return silent
    named = [r for r in silent if facts.rank(r).suspected_by]
    if named and len(named) < len(silent):
        rest = [r for r in silent if r not in named]
        ev.append(f"{_ranks(rest)} wrote no hang record either, but no peer's hang record names them; "
                  f"{_ranks(named)} are")
        return named
    killed = [r for r in silent if facts.rank(r).outside_signal() == "SIGKILL"]
    termed = [r for r in silent if facts.rank(r).outside_signal() == "SIGTERM"]
    if killed and termed:
        ev.append(f"{_ranks(termed)} ended on the launcher's SIGTERM (victims); {_ranks(killed)} did not "
                  "and needed SIGKILL: stopped or stuck")
        return [r for r in silent if r not in termed]
    return silent


def _ranks(xs: list[int]) -> str:
    return f"rank {xs[0]}" if len(xs) == 1 else f"ranks {_list(xs)}"


def _list(xs: list[int]) -> str:
    return ", ".join(str(x) for x in xs[:16]) + (f" (+{len(xs) - 16} more)" if len(xs) > 16 else "")


def _iso(t: float | None) -> str:
    if t is None:
        return ""
    return datetime.fromtimestamp(t).astimezone().isoformat(timespec="milliseconds")


def _heartbeat_note(st: RankState, ref: float | None) -> str:
    hb = st.heartbeat or {}
    if not hb:
        return ""
    t = hb.get("time")
    age = f", {ref - float(t):.1f} s before the first hang record" if isinstance(t, (int, float)) and ref else ""
    return f"rank {st.rank} last heartbeat: step {hb.get('step')} in {hb.get('section')} state {hb.get('state')}{age}"


def _culprit_list(facts: Facts, ranks: list[int]) -> list[dict[str, Any]]:
    by_node: dict[str, list[int]] = defaultdict(list)
    for r in ranks:
        by_node[facts.rank(r).node or "unknown"].append(r)
    return [{"node": n, "ranks": sorted(rs)} for n, rs in sorted(by_node.items())]


def _first_failure(facts: Facts) -> dict[str, Any]:
    """The earliest failure by the ranks' own records; else the launcher's root cause (its clock
    has one-second resolution and says when it observed the exit, not when the rank failed)."""
    timed = [s for s in facts.ranks.values() if s.first_seen is not None]
    if timed:
        s = min(timed, key=lambda s: (s.first_seen or 0.0, s.rank))
        return {"rank": s.rank, "node": s.node, "time": s.first_seen, "iso": _iso(s.first_seen),
                "source": s.first_source}
    roots = [s for s in facts.ranks.values() if s.root_cause]
    if roots:
        s = roots[0]
        return {"rank": s.rank, "node": s.node, "time": s.launcher_time, "iso": _iso(s.launcher_time),
                "source": "launcher's root cause"}
    return {}


def _correlate(facts: Facts, ref: float | None) -> list[NodeFault]:
    out = []
    for f in facts.node_faults:
        if f.time is not None and ref is not None:
            f.correlated = ref - FAULT_WINDOW_BEFORE_S <= f.time <= ref + FAULT_WINDOW_AFTER_S
        out.append(f)
    return [f for f in out if f.correlated]


def _ranks_on(facts: Facts, node: str) -> list[int]:
    return sorted(r for r, s in facts.ranks.items() if s.node == node)


def _drain_action(nodes: list[str], reason: str, job: dict[str, Any]) -> str:
    """Drain the faulty nodes with a preflight reason (the command Slurm's adapter writes), then
    requeue the job without them."""
    names = ",".join(nodes)
    jid = job.get("job_id") or "<job>"
    return (f"drain {names}: {slurm.drain_command(nodes, slurm.drain_reason('triage', reason))}; "
            f"requeue the job without it: scontrol requeue {jid} (once {names} is drained), or resubmit with "
            f"--exclude={names}")


def _order(s: RankState) -> tuple[float, int, float, int]:
    """Who failed first: own-record time, then the launcher's root cause, then its (coarse) time."""
    return (s.first_seen if s.first_seen is not None else float("inf"), 0 if s.root_cause else 1,
            s.launcher_time if s.launcher_time is not None else float("inf"), s.rank)


def _what(rec: dict[str, Any]) -> str:
    return f"{rec.get('type')}: {rec.get('message')}".strip().rstrip(":")


def _bystanders(facts: Facts, head: int) -> list[str]:
    """One line per kind of consequence: the ranks that failed because another rank did."""
    groups: dict[str, list[int]] = defaultdict(list)
    for s in sorted(facts.ranks.values(), key=lambda s: s.rank):
        if s.rank == head:
            continue
        sec = s.secondary()
        if s.primary():
            continue
        if sec:
            groups[f"failed as a consequence ({_what(sec)[:120]})"].append(s.rank)
        elif s.hang_exit() or s.reported:
            groups[f"exit {EXIT_HANG} / hang record: their watchdog's hang exit, waiting for the failed rank"].append(
                s.rank)
        elif s.outside_signal():
            groups[f"ended by {s.outside_signal()} from outside (the launcher's clean-up): victims, not culprits"
                   ].append(s.rank)
    return [f"{_ranks(rs)} {what}" for what, rs in groups.items()]


def _launcher_opinion(facts: Facts, head: RankState) -> str:
    roots = [s for s in facts.ranks.values() if s.root_cause]
    if not roots:
        return ""
    root = roots[0]
    x = next(x for x in root.exits if x.root_cause)
    if root.rank == head.rank:
        return f"the launcher's Root Cause (first observed failure) names rank {root.rank} too (exit code {x.exitcode})"
    own = f" at {_iso(head.first_seen)}" if head.first_seen is not None else ""
    return (f"the launcher's Root Cause names rank {root.rank} (exit code {x.exitcode}): the first exit it observed; "
            f"rank {head.rank}'s own record{own} is earlier and outweighs it")


@dataclass
class _Case:
    """What every rule of `decide` starts from: the job's clock, where the ranks parted, the node
    faults in the window, and the parts every verdict carries."""

    job: dict[str, Any]
    ref: float | None  # the first failure's time (else the logs' file times): places node faults
    culprit_ranks: list[int]  # the ranks that never joined the collective the others waited in
    coll: dict[str, Any]  # {"op", "seq"} where the ranks parted (the verdict's own dict)
    hang_ev: list[str]
    faults: list[NodeFault]  # node faults in the window around the first failure
    base: dict[str, Any]  # the verdict's fields every category fills the same way
    inputs: list[str]  # "input: ..." lines for input that could not be read
    rank_ev: list[str]  # evidence of the culprit ranks: their records, heartbeats, stacks
    ranks: list[RankState]


def _rank_row(s: RankState) -> dict[str, Any]:
    prim = s.primary()
    return {"rank": s.rank, "node": s.node, "host": s.host, "entered": s.entered, "entered_op": s.entered_op,
            "stuck": s.stuck, "reported": s.reported, "proc_state": s.proc_state, "step": s.step,
            "crashed": bool(prim), "exception": _what(prim) if prim else "", "failed_at": s.first_seen,
            "failed_at_source": s.first_source, "exit_code": s.exit_code(), "ended_by": s.outside_signal(),
            "hang_exit": s.hang_exit(), "clean_end": s.clean_end(), "launcher_root_cause": s.root_cause,
            "suspected_by": sorted(s.suspected_by)}


def _culprit_evidence(facts: Facts, culprit_ranks: list[int], ref: float | None) -> list[str]:
    rank_ev: list[str] = []
    for r in culprit_ranks:
        st = facts.rank(r)
        rank_ev += st.evidence[:4]
        if st.ended_by_peer is not None:
            rank_ev.append(f"rank {r} (pid {', '.join(map(str, sorted(st.pids))) or '?'}) was ended by rank "
                           f"{st.ended_by_peer}'s watchdog (SIGKILL): it was stopped or stuck, silent")
        hb = _heartbeat_note(st, ref)
        if hb:
            rank_ev.append(hb)
        if st.stack:
            rank_ev.append(f"rank {r} stack (innermost last): " + " | ".join(st.stack[-3:]))
    return rank_ev


def _case(facts: Facts, job: dict[str, Any]) -> _Case:
    first = _first_failure(facts)
    ref = first.get("time")
    if ref is None and facts.file_times:
        ref = min(facts.file_times)  # no record of its own: the logs' file times place node faults
    culprit_ranks, coll, hang_ev = _hang(facts)
    faults = _correlate(facts, ref)
    ranks_out = [_rank_row(s) for s in sorted(facts.ranks.values(), key=lambda s: s.rank)]
    base: dict[str, Any] = {"first_failure": first, "ranks": ranks_out, "job": job, "collective": coll,
            "node_faults": [{"node": f.node, "check": f.check, "summary": f.summary, "time": f.time,
                             "correlated": f.correlated, "xids": f.xids} for f in facts.node_faults],
            "input_errors": list(facts.input_errors)}
    return _Case(job=job, ref=ref, culprit_ranks=culprit_ranks, coll=coll, hang_ev=hang_ev, faults=faults,
                 base=base, inputs=[f"input: {e}" for e in facts.input_errors[:6]],
                 rank_ev=_culprit_evidence(facts, culprit_ranks, ref), ranks=list(facts.ranks.values()))


def decide(facts: Facts, job: dict[str, Any] | None = None) -> Verdict:
    """The verdict: category, culprits (node, ranks), evidence lines with their sources, action.
    The rules are tried in order; the first that finds its evidence decides."""
    case = _case(facts, dict(job or {}))
    for rule in (_hardware, _crash, _silent_failure, _killed, _communication_hang, _slowdown, _clean):
        verdict = rule(facts, case)
        if verdict is not None:
            return verdict
    return _unknown(facts, sorted(set(facts.ranks) | facts.world), case.inputs, case.base)


def _fault_lines(faults: list[NodeFault], ref: float | None) -> list[str]:
    ev = []
    for f in faults:
        when = ""
        if f.time is not None and ref is not None:
            when = f" ({(ref - f.time) / 60:.1f} min before the first failure)" if ref >= f.time else \
                f" ({(f.time - ref):.0f} s after the first failure)"
        ev.append(f"{f.node}:{f.check}: {f.summary}{when}")
        ev += [f"{f.node}:{f.check}: {line}" for line in f.evidence[:3]]
    return ev


def _hardware(facts: Facts, case: _Case) -> Verdict | None:
    """1. hardware: a node fault in the window before the first failure is the cause."""
    if not case.faults:
        return None
    nodes = sorted({f.node for f in case.faults})
    culprits = [{"node": n, "ranks": sorted(set(_ranks_on(facts, n)) | {r for r in case.culprit_ranks
                                                                         if facts.rank(r).node == n})}
                for n in nodes]
    ev = _fault_lines(case.faults, case.ref)
    coll = case.coll
    if coll.get("seq") is not None:
        ev.append(f"the job then hung in {coll.get('op') or 'a collective'} seq {coll['seq']}; the timeouts on "
                  "the other nodes follow from it")
    ev += case.hang_ev[:4] + case.rank_ev[:6] + case.inputs
    reason = case.faults[0].summary
    return Verdict(category="hardware",
                   summary=f"hardware fault on {', '.join(nodes)}: {reason}",
                   culprits=culprits, evidence=ev, action=_drain_action(nodes, reason, case.job)
                   + (f". {case.faults[0].remedy}" if case.faults[0].remedy else ""), **case.base)


def _crash(facts: Facts, case: _Case) -> Verdict | None:
    """2. software crash: a rank raised an exception of its own (not a consequence of another
    rank's failure), first by its own records' time."""
    primaries = [s for s in case.ranks if s.primary()]
    if not primaries:
        return None
    head = min(primaries, key=_order)
    rec = head.primary() or {}
    what = _what(rec)
    where = f" at step {rec.get('step')}" if rec.get("step") is not None else ""
    where += f" in section '{rec.get('section')}'" if rec.get("section") else ""
    when = f" ({head.first_source} at {_iso(head.first_seen)})" if head.first_seen is not None else ""
    ev = [f"rank {head.rank} on {head.node or '?'} failed first{where}: {what}{when}"]
    tb = [ln.strip() for entry in rec.get("stack") or [] for ln in str(entry).splitlines() if ln.strip()]
    ev += [f"rank {head.rank} traceback: {line}" for line in tb[-4:]]
    opinion = _launcher_opinion(facts, head)
    if opinion:
        ev.append(opinion)
    ev += _later_crashes(head, primaries)
    ev += _bystanders(facts, head.rank)
    ev += head.evidence[:4] + case.inputs
    action = (f"fix the failure of rank {head.rank} on {head.node or '?'} ({what[:160]}); the errors of the other "
              "ranks follow from it; restart from the last checkpoint after the fix")
    return Verdict(category="software crash", summary=f"rank {head.rank} on {head.node or '?'} crashed{where}: "
                                                      f"{what[:200]}",
                   culprits=_culprit_list(facts, [head.rank]), evidence=ev, action=action, **case.base)


def _later_crashes(head: RankState, primaries: list[RankState]) -> list[str]:
    """The other ranks that raised on their own, after the first."""
    ev = []
    later = sorted((s for s in primaries if s is not head), key=_order)
    for s in later[:4]:
        p = s.primary() or {}
        dt = f" {s.first_seen - head.first_seen:.2f} s later" if s.first_seen is not None and \
            head.first_seen is not None else ""
        ev.append(f"rank {s.rank} also raised{dt}: {_what(p)[:160]}")
    return ev


def _silent_failure(facts: Facts, case: _Case) -> Verdict | None:
    """3. a rank that exited with a failing code of its own and left no traceback (exit 1, SIGSEGV,
    SIGABRT): not the watchdog's hang exit, not a signal from outside, not a consequence."""
    failing = [s for s in case.ranks if not s.secondary() and not s.reported and not s.hang_exit()
               and not s.outside_signal() and ((s.exit_code() or 0) != 0 or (s.end or {}).get("how") == "exception")]
    if not failing:
        return None
    head = min(failing, key=_order)
    bad = next((x for x in head.exits if (x.exitcode or 0) != 0), None)
    code = head.exit_code()
    what = f"exit code {code}" + (f" ({bad.signal})" if bad and bad.signal else "")
    ev = [f"rank {head.rank} on {head.node or '?'} failed first: {what}, without a traceback or crash record"]
    opinion = _launcher_opinion(facts, head)
    if opinion:
        ev.append(opinion)
    ev += _bystanders(facts, head.rank) + head.evidence[:4] + case.inputs
    action = (f"rank {head.rank} on {head.node or '?'} ended with {what} and left no record: read its own output "
              "(stderr, core dump); install preflight.runtime.crash in the training script so the next failure "
              "records its exception")
    return Verdict(category="software crash", summary=f"rank {head.rank} on {head.node or '?'} crashed: {what}",
                   culprits=_culprit_list(facts, [head.rank]), evidence=ev, action=action, **case.base)


def _add_fr_findings(facts: Facts, case: _Case) -> None:
    """fr_trace's analysis of the dumps: its missing ranks and culprits join the hang's culprits."""
    for src, fnd in facts.fr_findings:
        case.culprit_ranks = sorted(set(case.culprit_ranks) | set(fnd.missing_ranks) | {r for r, _ in fnd.culprits})
        case.hang_ev.append(f"{src}: fr_trace: {fnd.lines[0]} ({fnd.op}; missing ranks {fnd.missing_ranks})")
        if fnd.seq is not None and not case.coll.get("seq"):
            case.coll.update({"op": fnd.op, "seq": fnd.seq})


def _add_ras(facts: Facts, case: _Case) -> None:
    """NCCL RAS status: ranks behind the majority's launched count, or in an incomplete/dead
    communicator, join the hang's culprits on the node RAS names."""
    for src, ras_status in facts.ras:
        behind = [x["rank"] for x in ras_status.ranks if x.get("launched") is not None
                  and ras_status.majority_launched is not None and x["launched"] < ras_status.majority_launched]
        gone = [x["rank"] for x in ras_status.ranks if x.get("section") in ("INCOMPLETE", "DEAD")]
        for x in ras_status.ranks:
            if x["rank"] in behind + gone and x.get("node"):
                st = facts.rank(x["rank"])
                st.node = st.node or x["node"]
        case.culprit_ranks = sorted(set(case.culprit_ranks) | set(behind) | set(gone))
        case.hang_ev += [f"{src}: {line}" for line in ras_status.lines[:6]]


def _communication_hang(facts: Facts, case: _Case) -> Verdict | None:
    """5. communication hang: the ranks that never entered the collective the others wait in."""
    if not (any(s.reported for s in case.ranks) or facts.fr_findings or facts.ras):
        return None
    _add_fr_findings(facts, case)
    _add_ras(facts, case)
    coll = case.coll
    cul = _culprit_list(facts, case.culprit_ranks)
    where = f"{coll.get('op') or 'a collective'} seq {coll.get('seq')}" if coll.get("seq") is not None else \
        "a collective"
    exits = [s.rank for s in case.ranks if s.hang_exit()]
    if exits:
        case.hang_ev.append(f"{_ranks(sorted(exits))} ended with exit code {EXIT_HANG}: the watchdog's hang exit "
                            "(waiting, not crashed)")
    if case.culprit_ranks:
        who = "; ".join(f"rank{'s' if len(c['ranks']) > 1 else ''} {_list(c['ranks'])} on {c['node']}" for c in cul)
        summary = f"communication hang in {where}: {who} never joined"
        nodes = [c["node"] for c in cul if c["node"] != "unknown"]
        action = (f"inspect {who}: its stacks (py-spy dump, hang-rank*.json, stacks-rank*.txt) show where it is; "
                  f"restart the job from its last checkpoint without {', '.join(nodes) or 'that node'} "
                  f"(--exclude={','.join(nodes)}), and drain it if the hang repeats there")
    else:
        summary = f"communication hang in {where}; every rank reported waiting, no rank singled out"
        action = ("compare the ranks' stacks (hang-rank*.json, py-spy) for a rank in another collective or "
                  "process group; run `preflight run` on the job's nodes before restarting")
    return Verdict(category="communication hang", summary=summary, culprits=cul,
                   evidence=case.hang_ev + case.rank_ev + case.inputs, action=action, **case.base)


def _killed(facts: Facts, case: _Case) -> Verdict | None:
    """4. killed from outside first: a rank ended by SIGKILL (the launcher's first observed
    failure, or a pid its node's OOM killer named) that recorded no failure and no hang of its
    own, and that no peer's watchdog ended (a stopped rank the watchdog ends is a hang): the
    other ranks' errors and timeouts follow from it."""
    for s in case.ranks:  # a pid the OOM killer named long before or after this failure is another process
        s.oom = [e for e, _ in _oom_near(oom_kill.OomLog(events=s.oom), case.ref)] if s.oom else []
    cands = [s for s in case.ranks if s.ended_by_peer is None and not s.primary() and s.hang_time is None
             and not s.hang_exit() and (s.oom or (s.outside_signal() == "SIGKILL" and s.root_cause))]
    if not cands:
        return None
    head = min(cands, key=lambda s: (0 if s.oom else 1, 0 if s.root_cause else 1, s.rank))
    node = head.node or "?"
    how = "killed by the kernel's OOM killer (SIGKILL)" if head.oom else "killed by a signal (SIGKILL) from outside"
    first = ("the launcher's Root Cause (first observed failure): exit code -9 (SIGKILL)" if head.root_cause
             else "SIGKILL")
    ev = [f"rank {head.rank} on {node} ended first, {how}: {first}, with no exception, crash record or hang "
          "record of its own"]
    ev += _oom_evidence(facts, head, case.ref)
    if head.suspected_by:
        ev.append(f"the hang records of {_ranks(sorted(head.suspected_by))} name rank {head.rank} as "
                  f"{' and '.join(sorted(set(head.suspected_by.values())))}: its heartbeat stopped when it was killed")
    ev += _bystanders(facts, head.rank) + head.evidence[:4] + case.inputs
    return Verdict(category="software crash", summary=f"rank {head.rank} on {node} was {how}: the first failure; "
                                                      "the other ranks' errors follow from it",
                   culprits=_culprit_list(facts, [head.rank]), evidence=ev, action=_killed_action(head),
                   **case.base)


_OOM_KILLS = ("killed", "chosen", "summary", "reaped")  # the lines that name the victim's pid


def _oom_near(log: oom_kill.OomLog, ref: float | None) -> list[tuple[oom_kill.OomEvent, float]]:
    """The node's OOM kills (any pid) in the node-fault window around the first failure, with
    their offset from it in seconds; every kill when the failure's time is not known."""
    out = []
    for e in log.events:
        if e.kind not in _OOM_KILLS or e.pid is None:
            continue
        t = _epoch(syslog_year_fix(e.time, datetime.fromtimestamp(ref))) if e.time and ref else None
        if ref is None or t is None:
            out.append((e, 0.0))
        elif -FAULT_WINDOW_BEFORE_S <= t - ref <= FAULT_WINDOW_AFTER_S:
            out.append((e, t - ref))
    return out


def _oom_evidence(facts: Facts, st: RankState, ref: float | None) -> list[str]:
    """The OOM killer's lines for the rank's pid, or what its node's kernel log says instead."""
    node = st.node or "?"
    if st.oom:
        return [oom_kill.describe(st.oom)] + [f"{node}:{KERNEL_LOG_PROBE}: {e.line}"[:300] for e in st.oom[:4]]
    pids = ", ".join(map(str, sorted(st.pids))) or "unknown"
    log = facts.oom.get(st.node)
    if log is None:
        why = facts.kernel_log_missing.get(st.node, "not collected")
        return [f"{node}: kernel log not read ({why}): the OOM killer is neither confirmed nor ruled out "
                f"(rank {st.rank} pid {pids})"]
    # a kill in another pid namespace (a container) is this rank only if it came with the failure,
    # not one of an earlier job that the node-fault window still holds
    near = [(e, d) for e, d in _oom_near(log, ref) if ref is not None and abs(d) <= OOM_HINT_WINDOW_S]
    line = f"{node}:{KERNEL_LOG_PROBE}: no OOM-killer line for pid {pids}"
    if near:
        e, dt = near[-1]
        line += (f"; it killed pid {e.pid} ({e.comm}) {abs(dt):.0f} s {'before' if dt <= 0 else 'after'} the first "
                 "failure: that may be this rank if it ran in a container with a pid namespace of its own")
    else:
        line += " near the failure: the signal came from elsewhere (the scheduler, an operator, a kill -9)"
    return [line]


def _killed_action(st: RankState) -> str:
    node = st.node or "?"
    if st.oom:
        cgroup = next((e.cgroup for e in st.oom if e.memcg and e.cgroup), "")
        limit = f"the memory limit of {cgroup}" if cgroup else "the node's memory"
        return (f"rank {st.rank} on {node} ran out of host memory and the kernel's OOM killer ended it: reduce the "
                "job's host memory (data loader workers and prefetch, pinned buffers, CPU offload, checkpoint "
                f"copies) or raise {limit}; requeue from the last checkpoint")
    return (f"rank {st.rank} on {node} was killed (SIGKILL), the first failure: check {node}'s kernel log for the "
            "OOM killer (dmesg -T | grep -iE 'killed process|oom-kill'), the scheduler's record of the job "
            "(sacct -j <job> -o State,ExitCode) and who else may have sent kill -9; requeue once the cause is "
            "known")


_STORY_CATEGORY = {"crash": "software crash", "hang": "communication hang", "killed": "software crash",
                   "oom": "software crash", "suspect hardware": "hardware", "bad data": "bad data",
                   "preempted": "none", "unknown": "unknown"}


def from_story(a: story.Attempt, facts: Facts, job: dict[str, Any], rules: Verdict) -> Verdict:
    """An attempt's verdict as the story of the run tells it (`preflight.runtime.story`): the
    cause, the culprit ranks and nodes the run directory names, when the rules found less (no
    launcher log for a killed rank) or replay and the loss guard judged the stop."""
    case = _case(facts, job)
    ranks = list(a.culprits)
    for r, node in zip(ranks, a.nodes if len(a.nodes) == len(ranks) else [], strict=False):
        facts.rank(r).node = facts.rank(r).node or node
    culprits = _culprit_list(facts, ranks)
    if len(a.nodes) == 1:
        culprits = [{"node": c["node"] if c["node"] != "unknown" else a.nodes[0], "ranks": c["ranks"]}
                    for c in culprits]
    where = ", ".join(c["node"] for c in culprits) or "?"
    who = f"rank{'s' if len(ranks) > 1 else ''} {_list(ranks)} on {where}" if ranks else "no rank named"
    if a.cause == "killed":
        sig = a.signal or "a signal"
        summary = f"{who} was killed ({sig}) from outside: the first failure; the other ranks' errors follow from it"
        why = ("it left no end record while its peers recorded theirs: the runtime records every signal it can "
               "catch, so only SIGKILL (sent by someone, or the kernel's OOM killer) ends a rank this way"
               if sig == "SIGKILL" else f"its runtime.exit says {sig}")
        ev = [f"{who}: {why}"]
        action = _killed_action(facts.rank(ranks[0])) if ranks else rules.action
    elif a.cause == "suspect hardware":
        summary = f"suspect hardware: {who}: {a.detail}"
        ev = []
        action = (f"drain {where} and test its GPUs (`preflight run --hosts {where}`, DCGM diagnostics level 3, "
                  "ECC counters); requeue from the last checkpoint without it")
    elif a.cause == "bad data":
        summary = f"bad data: {who}: {a.detail}"
        ev = []
        action = (f"inspect the batch of the failed step on {who} (NaN/Inf in the inputs, labels out of range) or "
                  "lower the learning rate; restart from the last checkpoint, skipping that batch")
    else:
        summary = f"{a.cause} of {who}: {a.detail}"
        ev = []
        action = rules.action
    ev += a.evidence + case.rank_ev[:6] + case.inputs
    ev += [f"the rules alone: [{rules.category}] {rules.summary}"[:300]]
    return Verdict(category=_STORY_CATEGORY.get(a.cause, "unknown"), summary=summary, culprits=culprits,
                   evidence=ev, action=action, **case.base)


def _slowdown(facts: Facts, case: _Case) -> Verdict | None:
    """6. slowdown: stragglers reported by the runtime layer."""
    if not facts.stragglers:
        return None
    ranks_ = sorted({r for s in facts.stragglers for r in s["ranks"] if isinstance(r, int)})
    hosts = sorted({h for s in facts.stragglers for h in s["hosts"]})
    for r in ranks_:
        st = facts.rank(r)
        if not st.node and len(hosts) == 1:
            st.node = hosts[0]
    cul = _culprit_list(facts, ranks_) if ranks_ else [{"node": h, "ranks": []} for h in hosts]
    ev = [f"{s['source']}: {s['summary']}" for s in facts.stragglers[:6]] + case.inputs
    return Verdict(category="slowdown", summary=f"slowdown: stragglers {', '.join(map(str, ranks_))} on "
                                                f"{', '.join(hosts) or '?'}",
                   culprits=cul, evidence=ev,
                   action=f"check {', '.join(hosts) or 'the slow nodes'} (GPU clocks, thermals, `preflight run`); "
                          "drain a node that stays slow and restart the job without it", **case.base)


def _clean(facts: Facts, case: _Case) -> Verdict | None:
    """7. none, only on positive evidence: every rank of the job ended cleanly."""
    known = sorted(set(facts.ranks) | facts.world)
    if not (known and all(facts.rank(r).clean_end() for r in known)):
        return None
    return Verdict(category="none", summary=f"every rank ({len(known)}) ended cleanly; no hang, crash, node fault "
                                            "or slowdown found",
                   evidence=[f"{_ranks(known)}: clean end (runtime.exit or a closed heartbeat)"]
                   + case.inputs + facts.problems[:6],
                   action="nothing to do", **case.base)


def _unknown(facts: Facts, known: list[int], inputs: list[str], base: dict[str, Any]) -> Verdict:
    """Not enough evidence to name a culprit or to call the run clean."""
    ev = list(inputs)
    secondary = [r for r in known if facts.rank(r).secondary()]
    signalled = [r for r in known if facts.rank(r).outside_signal()]
    no_end = [r for r in known if not facts.rank(r).clean_end() and r not in secondary and r not in signalled]
    if secondary:
        lost = _what(facts.rank(secondary[0]).secondary() or {})[:120]
        ev.append(f"{_ranks(secondary)} failed on a lost peer ({lost}): a consequence; the rank that left "
                  "first recorded nothing")
    if signalled:
        sigs = sorted({facts.rank(r).outside_signal() for r in signalled})
        ev.append(f"{_ranks(signalled)} were ended from outside ({', '.join(sigs)}) with no failure of their own "
                  "recorded: the job was cancelled, preempted or timed out, or the rank that failed left no record")
    if no_end and known:
        ev.append(f"{_ranks(no_end)} recorded neither a failure nor a clean end (still running, or killed "
                  "without a record)")
    if not known:
        summary = "insufficient evidence: nothing from the job to attribute (no runtime records, no rank logs, no " \
                  "launcher log)"
        if facts.node_results:
            summary += "; no node fault found"
    elif secondary or signalled:
        summary = "insufficient evidence: ranks failed, but none recorded a failure of its own"
    else:
        summary = "insufficient evidence: no failure recorded, and no clean end of every rank either"
    ev += facts.problems[:6]
    action = ("give triage the job's run directory (--run-dir, written by preflight.runtime: crash records, hang "
              "records, heartbeats, events) and the launcher's log (--log); check the scheduler's record of the job "
              "(sacct -j <job> -o State,ExitCode) and the nodes' kernel logs for the OOM killer")
    return Verdict(category="unknown", summary=summary, evidence=ev, action=action, **base)
