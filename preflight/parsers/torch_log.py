"""Training logs as facts: PyTorch collective failures, Python tracebacks, launcher exit records,
the torchelastic agent's worker group (`preflight.parsers.torch_elastic`).

`preflight.parsers.torch_hang` reads the watchdog, heartbeat, desync, gloo and store messages of
every PyTorch era (`hang_events`); `parse_rank_log` reads tracebacks (the exception that ends
each) and torchrun's failure table (`ChildFailedError`, "Root Cause (first observed failure)");
`exits` are the "exiting process N with exit code: X" / "process N terminated with exit code X" /
"-- Process N terminated with the following error:" lines of multiprocessing spawn. Nothing here does I/O; garbage gives empty facts, never raises.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from preflight import lazyre
from preflight.framing import DETECT_ENDS, Doc
from preflight.parsers import torch_elastic
from preflight.parsers.base import Format, ParserSpec
from preflight.parsers.torch_elastic import Elastic, parse_elastic
from preflight.parsers.torch_hang import HangEvent, HangLog, hang_events, merge_status, parse_hang_log

# Tracebacks and launcher exit records

_TB_START = "Traceback (most recent call last):"
_EXC_LINE = lazyre.compile(r"^(?:\[[^\]]*\]:?\s*)*([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure|Warning)"
                       r"|KeyboardInterrupt|SystemExit)(?::\s*(.*))?$")
# the fields of a failure record: "traceback" from 1.11, "msg" in 1.9 - 1.10 (no "host" then)
_TORCHRUN_KV = lazyre.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback|msg)\s*:\s*(.*)$")
_SIGNAL = lazyre.compile(r"Signal (\d+) \((SIG\w+)\) received by PID (\d+)")
_EXIT_SIGNAL = lazyre.compile(r"\((SIG[A-Z]+)\)")
# "Root Cause (first observed failure):" from 1.11, "Root Cause:" then "Other Failures:" in 1.9 - 1.10
_ROOT_CAUSE = lazyre.compile(r"^\s*Root Cause(?: \(first observed failure\))?:\s*$")
_OTHER_FAILURES = lazyre.compile(r"^\s*(?:(?:Other )?Failures:|=====|\*{5})")
_EXIT_PID = lazyre.compile(r"(-?\d+) \(pid: (\d+)\)")
# exceptions that follow from another rank's failure, not a cause of their own
SECONDARY = lazyre.compile(r"Connection closed by peer|Connection reset by peer|Timed out waiting|timed out|"
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
    root_cause: bool = False  # pragma: no mutate - every record is built with it; under "Root Cause (first observed failure)"


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
    return None, j  # the first line not read: a traceback cut short ends there


def _exception_of(body: str) -> tuple[str, str] | None:
    """(exception, message) when a traceback line (rank tag removed) is the exception that ends it."""
    if not body or body.startswith((" ", "\t")) or _TB_START in body:
        return None
    if body.startswith(("During handling", "The above exception")):  # a chained traceback follows
        return None
    m = _EXC_LINE.match(body.strip())
    if m:
        return m.group(1), (m.group(2) or "").strip()
    exc, colon, msg = body.partition(":")
    return (exc.strip(), msg.strip()) if colon else None


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
    sig = _SIGNAL.search(rec.get("traceback", rec.get("msg", "")))
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
_EXITING = lazyre.compile(r"exiting process (\d+) with exit code:?\s*(-?\d+)")
_TERMINATED = lazyre.compile(r"[Pp]rocess (\d+) terminated with (?:exit code (-?\d+)|signal (\w+))")
_RAISED = lazyre.compile(r"-- Process (\d+) terminated with the following error:")  # spawn's ProcessRaisedException
_P2P_CALL = lazyre.compile(r"\bdist\.(recv|send|irecv|isend)\(|\bpg\.(recv|send)\(")


@dataclass
class ProcessExit:
    process: int
    code: int | None
    signal: str
    line: str
    first: bool  # "exiting process N": the process that exited on its own (the others are then terminated)
    raised: bool = False  # "-- Process N terminated with the following error:" (an exception; spawn exits it with 1)


@dataclass
class TorchLog:
    hang: HangLog = field(default_factory=HangLog)
    rank_log: RankLog = field(default_factory=RankLog)
    exits: list[ProcessExit] = field(default_factory=list)
    p2p_calls: list[str] = field(default_factory=list)  # dist.recv / send frames in tracebacks
    elastic: Elastic = field(default_factory=Elastic)  # the torchelastic agent's worker group

    @property
    def recognised(self) -> bool:
        return bool(self.hang.events or self.hang.some_failed or self.rank_log.crashes or self.rank_log.failures
                    or self.exits or self.elastic.recognised)


def parse(doc: Doc) -> TorchLog:
    lines = doc.lines
    pairs = [(ln.text, ln.rank) for ln in lines]
    out = TorchLog(hang=hang_events((ln.text, ln.rank, ln.raw) for ln in lines), rank_log=rank_log_lines(pairs),
                   elastic=parse_elastic(t for t, _ in pairs))
    for t, _ in pairs:
        m = _EXITING.search(t)
        if m:
            out.exits.append(ProcessExit(int(m.group(1)), int(m.group(2)), "", t.strip(), True))
            continue
        m = _TERMINATED.search(t)
        if m:
            out.exits.append(ProcessExit(int(m.group(1)), _int(m.group(2)), m.group(3) or "", t.strip(), False))
            continue
        m = _RAISED.search(t)
        if m:
            out.exits.append(ProcessExit(int(m.group(1)), 1, "", t.strip(), True, raised=True))
            continue
        if _P2P_CALL.search(t):
            out.p2p_calls.append(t.strip())
    return out


_DETECT = lazyre.compile(
    r"Watchdog caught\b|Some NCCL operations have failed or timed out|Timeout at NCCL work: \d+|"
    r"detected by watchdog at work|watchdog thread terminated with exception|Heartbeat monitor timed out|"
    r"watchdog got stuck for|NCCL monitor thread timeout|Received a dump signal|Received a global timeout|"
    r"timed out in blocking wait|[Cc]aught collective operation timeout|"
    r"gloo[^\]\n]*\]\s*(?:Timed out waiting \d+ms for (?:recv|send) operation|Connection closed by peer|Read error)|"
    r"enforce fail at [^\]\n]*gloo|"
    r"NCCL error(?: in: |: )|\bnccl(?:Remote|System|Internal|UnhandledCuda)Error\b|NCCL communicator was aborted|"
    r"are the lagging ranks|the lagging/dead/mismatched ranks|joined but didn't finish collective #|"
    r"but didn't join collective #|remote error detected from rank|Detected mismatch between collectives|"
    r"failed to pass monitoredBarrier|(?:DistStoreError|DistNetworkError|RuntimeError): (?:Socket Timeout|Wait timeout)|"
    r"timed out in monitoredBarrier|clients joined|socket has timed out after|store based barrier|"
    r"retrieving ncclUniqueId from \[0\] via c10d key-value store|socket has failed to (?:listen|bind|connect)|"
    r"RendezvousTimeoutError|ChildFailedError|Root Cause \(first observed failure\)|ProcessExitedException|"
    r"The connection to the C10d store has failed|-- Process \d+ terminated with the following error:|"
    r"Failed to (?:check|get) the \"should dump\" flag on TCPStore|"
    r"\[c10d\] (?:sendBytes|recvBytes|recvValue) failed on SocketImpl\(")
_NEEDLES = ("atchdog", "NCCL work", "gloo", "NCCL operations", "eartbeat", "monitor thread", "Received a ",
            "blocking wait", "collective operation timeout", "NCCL error", "nccl", "communicator was aborted",
            "lagging", "collective #", "remote error", "Socket Timeout", "Wait timeout",
            "mismatch between collectives", "monitoredBarrier", "clients joined", "socket has timed", "ncclUniqueId",
            "socket has failed", "C10d store has failed", "terminated with the following error",
            "store based barrier", "ChildFailedError", "Root Cause", "ProcessExitedException", "RendezvousTimeout",
            "should dump", "failed on SocketImpl")


def detect(doc: Doc) -> bool:
    return any(_DETECT.search(t) or torch_elastic.DETECT.search(t)
               for t in (doc.peel_hit(h).text for h in doc.scan((*_NEEDLES, *torch_elastic.NEEDLES), ends=DETECT_ENDS)))


FORMATS = [Format("watchdog-log", detect=detect, priority=45,  # pragma: no mutate - only its order among formats counts
                  description="training log: PyTorch watchdog, heartbeat, desync, gloo and store timeouts, "
                              "NCCL errors, torchrun failure summaries")]
PARSERS = [ParserSpec("watchdog-log", parse)]

__all__ = ["SECONDARY", "ChildFailure", "Crash", "Elastic", "HangEvent", "HangLog", "ProcessExit", "RankLog", "TorchLog",
           "detect", "hang_events", "merge_status", "parse", "parse_hang_log", "parse_rank_log", "rank_log_lines",
           "torchrun_time"]
