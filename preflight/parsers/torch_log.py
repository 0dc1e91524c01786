"""Training logs as facts: PyTorch collective timeouts, Python tracebacks, launcher exit records.

See `hang_events` for the watchdog and gloo lines of every PyTorch era; `parse_rank_log` for
tracebacks (the exception that ends each) and torchrun's failure table; `exits` for the
"exiting process N with exit code: X" / "Process N terminated with exit code X" lines of
multiprocessing spawn. Nothing here does I/O; garbage gives empty facts, never raises.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from preflight.framing import DETECT_ENDS, Doc
from preflight.parsers.base import Format, ParserSpec

# Collective timeouts (PyTorch NCCL watchdog of every era, gloo)

_WORK = re.compile(r"WorkNCCL\(((?:[^()]|\([^()]*\))*)\)(?:\s+ran for (\d+) milliseconds)?")
_KV = re.compile(r"(\w+(?:\(ms\))?)=([^,]+)")
_RANK_TAG = re.compile(r"\[(?:PG (?:ID )?([^\s(]+)(?: PG GUID ([^\s(]+))?(?:\s*\(([^)]*)\))? )?Rank (\d+)\]")
_PREFIX_RANK = re.compile(r"^\s*(?:\(\w+ pid=\d+\)\s*)?\[(?:rank|default)(\d+)\]:")
_WATCHDOG_TIMEOUT = re.compile(r"Watchdog caught collective operation timeout")
_TIMEOUT_AT = re.compile(r"Timeout at NCCL work: (-?\d+), last enqueued NCCL work: (-?\d+), "
                         r"last completed NCCL work: (-?\d+)")
_DETECTED_AT = re.compile(r"(?:failure|Exception \(either an error or timeout\)) detected by watchdog at work"
                          r"(?: sequence id)?: (-?\d+),?(?: PG status:)? last enqueued (?:NCCL )?work: (-?\d+), "
                          r"last completed (?:NCCL )?work: (-?\d+)")
_SOME_FAILED = re.compile(r"Some NCCL operations have failed or timed out")
_NCCL_ERROR = re.compile(r"(?:NCCL watchdog thread terminated with exception|Process group watchdog thread terminated "
                         r"with exception): (?!.*Watchdog caught collective operation timeout)(.*NCCL error.*)$")
_GLOO_TIMEOUT = re.compile(r"\[([^\]]*gloo[^\]]*)\]\s*Timed out waiting (\d+)ms for (recv|send) operation to complete")
_GLOO_CLOSED = re.compile(r"\[([^\]]*gloo[^\]]*)\]\s*(Connection closed by peer|Read error|Connection reset by peer)"
                          r"\s*\[?([0-9A-Fa-f:.]+)\]?:(\d+)")


@dataclass
class HangEvent:
    kind: str  # nccl_timeout, nccl_status, nccl_error, gloo_timeout, gloo_peer_closed
    rank: int | None = None
    pg: str = ""
    op: str = ""
    seq: int | None = None
    timeout_ms: int | None = None
    ran_ms: int | None = None
    numel_in: int | None = None
    numel_out: int | None = None
    last_enqueued: int | None = None
    last_completed: int | None = None
    peer: str = ""
    message: str = ""
    line: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if v not in (None, "")}
        d["kind"] = self.kind
        return d


@dataclass
class HangLog:
    events: list[HangEvent] = field(default_factory=list)
    some_failed: list[str] = field(default_factory=list)


def _rank_pg(line: str) -> tuple[int | None, str]:
    m = _RANK_TAG.search(line)
    if m:
        pg = m.group(1) or ""
        if m.group(3):
            pg = f"{pg}({m.group(3)})" if pg else m.group(3)
        return int(m.group(4)), pg
    mp = _PREFIX_RANK.search(line)
    if mp:
        return int(mp.group(1)), ""
    return None, ""


def parse_hang_log(text: str) -> HangLog:
    """Collective timeouts and their status lines in raw text (launcher prefixes kept)."""
    return hang_events((ln, None) for ln in text.splitlines())


def hang_events(lines: Iterable[tuple[str, int | None]]) -> HangLog:
    """Collective timeouts from (line, rank the framing found for it) pairs."""
    reader = _HangReader()
    for raw, hint in lines:
        line = raw.strip()
        if line:
            reader.read(line, hint)
    return reader.log


def _rank_pg_or(line: str, hint: int | None) -> tuple[int | None, str]:
    """The rank and process group a line names; the framing's rank `hint` when it names none."""
    rank, pg = _rank_pg(line)
    return (hint if rank is None else rank), pg


@dataclass
class _HangReader:
    """Reads watchdog, status and gloo lines; a line repeated (by a rank's several loggers,
    or quoted in an exception) counts once."""

    log: HangLog = field(default_factory=HangLog)
    seen: set[tuple[Any, ...]] = field(default_factory=set)

    def read(self, line: str, hint: int | None) -> None:
        if _WATCHDOG_TIMEOUT.search(line):
            self._timeout(line, hint)
            return
        mt = _TIMEOUT_AT.search(line) or _DETECTED_AT.search(line)
        if mt:
            rank, pg = _rank_pg_or(line, hint)
            self._add(("s", rank, pg, mt.group(1)), HangEvent(
                kind="nccl_status", rank=rank, pg=pg, seq=_int(mt.group(1)), last_enqueued=_int(mt.group(2)),
                last_completed=_int(mt.group(3)), line=line))
            return
        if _SOME_FAILED.search(line):
            self.log.some_failed.append(line)
            return
        me = _NCCL_ERROR.search(line)
        if me:
            rank, pg = _rank_pg_or(line, hint)
            self._add(("e", rank, me.group(1)[:80]),
                      HangEvent(kind="nccl_error", rank=rank, pg=pg, message=me.group(1).strip(), line=line))
            return
        mg = _GLOO_TIMEOUT.search(line)
        if mg:
            rank, pg = _rank_pg_or(line, hint)
            self.log.events.append(HangEvent(kind="gloo_timeout", rank=rank, pg=pg, op=mg.group(3),
                                             timeout_ms=int(mg.group(2)), line=line))
            return
        mc = _GLOO_CLOSED.search(line)
        if mc:
            rank, pg = _rank_pg_or(line, hint)
            self.log.events.append(HangEvent(kind="gloo_peer_closed", rank=rank, pg=pg, peer=mc.group(3),
                                             message=mc.group(2), line=line))

    def _add(self, key: tuple[Any, ...], ev: HangEvent) -> None:
        if key not in self.seen:
            self.seen.add(key)
            self.log.events.append(ev)

    def _timeout(self, line: str, hint: int | None) -> None:
        """A watchdog timeout, with the WorkNCCL(...) fields when printed."""
        # "terminated with exception: [Rank 3] Watchdog caught..." repeats the event: the
        # rank tag nearest the message is the one that counts.
        idx = line.find("Watchdog caught")
        rank, pg = _rank_pg(line[:idx][-120:]) if idx >= 0 else (None, "")
        if rank is None:
            rank, pg = _rank_pg_or(line, hint)
        ev = HangEvent(kind="nccl_timeout", rank=rank, pg=pg, line=line)
        mw = _WORK.search(line)
        if mw:
            fields = dict(_KV.findall(mw.group(1)))
            ev.seq = _int(fields.get("SeqNum"))
            ev.op = fields.get("OpType", "").strip()
            ev.timeout_ms = _int(fields.get("Timeout(ms)"))
            ev.numel_in = _int(fields.get("NumelIn"))
            ev.numel_out = _int(fields.get("NumelOut"))
            ev.ran_ms = _int(mw.group(2))
        self._add(("t", ev.rank, ev.seq, ev.op, ev.timeout_ms), ev)


def _merge_status(log: HangLog) -> list[HangEvent]:
    """Timeouts, with the last enqueued/completed numbers of the matching status line folded in."""
    timeouts = [e for e in log.events if e.kind == "nccl_timeout"]
    status = [e for e in log.events if e.kind == "nccl_status"]
    for t in timeouts:
        for s in status:
            if s.rank == t.rank and s.seq == t.seq:
                t.last_enqueued, t.last_completed = s.last_enqueued, s.last_completed
                if not t.pg:
                    t.pg = s.pg
                break
    return timeouts


# Tracebacks and launcher exit records

_TB_START = "Traceback (most recent call last):"
_EXC_LINE = re.compile(r"^(?:\[[^\]]*\]:?\s*)*([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure|Warning)"
                       r"|KeyboardInterrupt|SystemExit)(?::\s*(.*))?$")
_TORCHRUN_KV = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s*(.*)$")
_SIGNAL = re.compile(r"Signal (\d+) \((SIG\w+)\) received by PID (\d+)")
_EXIT_SIGNAL = re.compile(r"\((SIG[A-Z]+)\)")
_ROOT_CAUSE = re.compile(r"^\s*Root Cause \(first observed failure\):")
_OTHER_FAILURES = re.compile(r"^\s*(?:Failures:|=====)")
_EXIT_PID = re.compile(r"(-?\d+) \(pid: (\d+)\)")
# exceptions that follow from another rank's failure, not a cause of their own
SECONDARY = re.compile(r"Connection closed by peer|Connection reset by peer|Timed out waiting|timed out|"
                       r"DistBackendError|NCCL communicator was aborted|Broken pipe|ProcessGroup.*aborted|"
                       r"Watchdog caught collective operation timeout|Socket Timeout|Read error", re.IGNORECASE)


@dataclass
class Crash:
    exception: str
    message: str
    lines: list[str]
    secondary: bool
    rank: int | None = None


@dataclass
class ChildFailure:
    rank: int | None
    host: str
    exitcode: int | None
    pid: int | None
    signal: str
    time: str
    lines: list[str]
    root_cause: bool = False  # listed under torchrun's "Root Cause (first observed failure)"


@dataclass
class RankLog:
    crashes: list[Crash] = field(default_factory=list)
    failures: list[ChildFailure] = field(default_factory=list)


def _tag_rank(line: str) -> int | None:
    m = re.match(r"^\s*\[(?:rank|default)(\d+)\]:", line)
    return int(m.group(1)) if m else None


def parse_rank_log(text: str) -> RankLog:
    """Python tracebacks (the exception ending each) and torchrun's per-rank failure records."""
    return rank_log_lines((ln, _tag_rank(ln)) for ln in text.splitlines())


def rank_log_lines(pairs: Iterable[tuple[str, int | None]]) -> RankLog:
    """`parse_rank_log` over (line, rank the framing found for it) pairs. The ranks of a launcher
    write into one stream, their lines interleaved: each rank's lines are read on their own, so
    one rank's traceback never ends with another rank's exception."""
    streams: dict[int | None, list[str]] = {}
    for line, rank in pairs:
        streams.setdefault(rank, []).append(line)
    out = RankLog()
    for rank, lines in streams.items():
        part = _rank_stream(lines)
        for c in part.crashes:
            if c.rank is None:
                c.rank = rank
        out.crashes += part.crashes
        out.failures += part.failures
    return out


def _rank_stream(lines: list[str]) -> RankLog:
    out = RankLog()
    in_root_cause = False  # inside torchrun's "Root Cause (first observed failure):" block
    i = 0
    while i < len(lines):
        line = lines[i]
        if _ROOT_CAUSE.match(line):
            in_root_cause = True
        elif _OTHER_FAILURES.match(line):
            in_root_cause = False
        if _TB_START in line:
            crash, i = _traceback(lines, i)
            if crash is not None:
                out.crashes.append(crash)
            continue
        kv = _TORCHRUN_KV.match(line)
        if kv and kv.group(1) == "time":
            failure, i = _failure_record(lines, i, kv.group(2).strip(), in_root_cause)
            if failure is not None:
                out.failures.append(failure)
            continue
        i += 1
    return out


def _traceback(lines: list[str], i: int) -> tuple[Crash | None, int]:
    """The traceback that starts at `lines[i]`: the crash its exception line says (None when
    none follows within 400 lines) and the index of the line after it."""
    prefix_rank = _tag_rank(lines[i])
    block = [lines[i].strip()]
    j = i + 1
    while j < len(lines) and j - i < 400:
        cur = lines[j]
        body = re.sub(r"^\s*\[(?:rank|default)\d+\]: ?", "", cur)
        block.append(cur.strip())
        found = _exception_of(body)
        if found is not None:
            exc, msg = found
            return Crash(exception=exc, message=msg, lines=block[-12:], secondary=bool(SECONDARY.search(body)),
                         rank=prefix_rank), j + 1
        j += 1
    return None, j + 1


def _exception_of(body: str) -> tuple[str, str] | None:
    """(exception, message) when a traceback line (rank tag removed) is the exception that ends it."""
    if not body or body.startswith((" ", "\t")) or _TB_START in body:
        return None
    m = _EXC_LINE.match(body.strip())
    if not m and (":" not in body or body.startswith("During handling")):
        return None
    if body.startswith(("During handling", "The above exception")):  # a chained traceback follows
        return None
    exc = m.group(1) if m else body.split(":", 1)[0].strip()
    msg = (m.group(2) or "") if m else body.split(":", 1)[1].strip()
    return exc, msg.strip()


def _failure_record(lines: list[str], i: int, time: str, root_cause: bool) -> tuple[ChildFailure | None, int]:
    """torchrun's record of a failed child (`time :` at `lines[i]`, then `host :`, `rank :`,
    `exitcode :` ...): the failure (None without an exit code) and the index after the record."""
    rec: dict[str, str] = {"time": time}
    block = [lines[i].strip()]
    j = i + 1
    while j < len(lines) and j - i < 12:
        m2 = _TORCHRUN_KV.match(lines[j])
        if not m2:
            break
        rec[m2.group(1)] = m2.group(2).strip()
        block.append(lines[j].strip())
        j += 1
    if "exitcode" not in rec:
        return None, j
    rk = re.match(r"(\d+)", rec.get("rank", ""))
    ex = _EXIT_PID.search(rec["exitcode"])
    sig = _SIGNAL.search(rec.get("traceback", ""))
    named = _EXIT_SIGNAL.search(rec["exitcode"])
    return ChildFailure(
        rank=int(rk.group(1)) if rk else None, host=rec.get("host", ""),
        exitcode=int(ex.group(1)) if ex else _int(rec["exitcode"]), pid=int(ex.group(2)) if ex else None,
        signal=sig.group(2) if sig else (named.group(1) if named else ""),
        time=rec["time"], lines=block, root_cause=root_cause), j


def torchrun_time(text: str) -> datetime | None:
    """torchrun's failure-table time ("2024-06-03_10:12:01")."""
    try:
        return datetime.strptime(text.strip(), "%Y-%m-%d_%H:%M:%S")
    except ValueError:
        return None

def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and re.fullmatch(r"-?\d+", v.strip()):
        return int(v.strip())
    return None


# multiprocessing spawn / torch.multiprocessing: which process exited first, with what code
_EXITING = re.compile(r"exiting process (\d+) with exit code:?\s*(-?\d+)")
_TERMINATED = re.compile(r"Process (\d+) terminated with (?:exit code (-?\d+)|signal (\w+))")
_P2P_CALL = re.compile(r"\bdist\.(recv|send|irecv|isend)\(|\bpg\.(recv|send)\(")


@dataclass
class ProcessExit:
    process: int
    code: int | None
    signal: str
    line: str
    first: bool  # "exiting process N": the process that exited on its own (the others are then terminated)


@dataclass
class TorchLog:
    hang: HangLog = field(default_factory=HangLog)
    rank_log: RankLog = field(default_factory=RankLog)
    exits: list[ProcessExit] = field(default_factory=list)
    p2p_calls: list[str] = field(default_factory=list)  # dist.recv / send frames in tracebacks

    @property
    def recognised(self) -> bool:
        return bool(self.hang.events or self.hang.some_failed or self.rank_log.crashes or self.rank_log.failures
                    or self.exits)


def parse(doc: Doc) -> TorchLog:
    pairs = [(ln.text, ln.rank) for ln in doc.lines]
    out = TorchLog(hang=hang_events(pairs), rank_log=rank_log_lines(pairs))
    for t, _ in pairs:
        m = _EXITING.search(t)
        if m:
            out.exits.append(ProcessExit(int(m.group(1)), int(m.group(2)), "", t.strip(), True))
            continue
        m = _TERMINATED.search(t)
        if m:
            out.exits.append(ProcessExit(int(m.group(1)), _int(m.group(2)), m.group(3) or "", t.strip(), False))
            continue
        if _P2P_CALL.search(t):
            out.p2p_calls.append(t.strip())
    return out


_DETECT = re.compile(
    r"Watchdog caught collective operation timeout|Some NCCL operations have failed or timed out|"
    r"Timeout at NCCL work: \d+|detected by watchdog at work|"
    r"gloo[^\]\n]*\]\s*(?:Timed out waiting \d+ms for (?:recv|send) operation|Connection closed by peer)|"
    r"watchdog thread terminated with exception")


def detect(doc: Doc) -> bool:
    return any(_DETECT.search(doc.peel_hit(h).text)
               for h in doc.scan(("Watchdog", "watchdog", "NCCL work", "gloo", "NCCL operations"), ends=DETECT_ENDS))


FORMATS = [Format("watchdog-log", detect=detect, priority=45,
                  description="training log with PyTorch NCCL watchdog / gloo timeouts")]
PARSERS = [ParserSpec("watchdog-log", parse)]
