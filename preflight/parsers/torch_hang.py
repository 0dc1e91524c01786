"""PyTorch's hang and collective-failure messages as events.

What ProcessGroupNCCL, ProcessGroupGloo, ProcessGroupWrapper, the c10d store and the
desync debugger print when a collective hangs or fails, in every wording from PyTorch 1.8 to
2.x (see `preflight/parsers/pytorch.inventory.toml` for each message and its source):

- watchdog timeouts: `Watchdog caught collective operation timeout: WorkNCCL(SeqNum=N,
  OpType=OP, NumelIn=, NumelOut=, Timeout(ms)=T) ran for M milliseconds before timing out`
  (SeqNum from 1.9, Numel from 2.1), the blocking-wait forms, and the status lines that follow
  them (`Timeout at NCCL work: N, last enqueued ...`, `Exception (either an error or timeout)
  detected by watchdog at work: N, ...`, `failure detected by watchdog at work sequence id: N
  PG status: ...`);
- the heartbeat monitor (the watchdog thread itself stuck), dump signals from this or another
  rank, the desync report, collective fingerprint mismatches, monitored barriers;
- NCCL errors surfaced by PyTorch (`NCCL error: remote process exited ...`, ncclRemoteError,
  aborted communicators), other exceptions that ended the watchdog thread;
- gloo timeouts and closed pairs, c10d store and rendezvous timeouts.

Each event keeps the rank the launcher tag names (`[rank13]:`, the global rank) apart from the
rank inside the process group (`[PG ID 11 PG GUID 119 Rank 1]`). A message a terminal wrapped
onto several lines (the continuation without any prefix) is joined before it is read. Pure:
no I/O; garbage gives no events, never raises; one pass over the lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from preflight import lazyre

# The process group and rank a message names: "[Rank 3]", "[PG 3 Rank 5]", "[PG 0 (default_pg) Rank 5]",
# "[PG ID 2 PG GUID 7(tp) Rank 1]"
_TAG = lazyre.compile(r"\[(?:PG (?:ID )?(?P<pg>[^\s()\]]+)(?: PG GUID (?P<guid>[^\s()\]]+))?\s*(?:\((?P<desc>[^)]*)\))?\s*)?"
                  r"Rank (?P<rank>\d+)\]")
_GLOBAL_TAG = lazyre.compile(r"\[rank(\d+)\]:")  # torchrun / PyTorch's global-rank line prefix
# a per-line prefix the framing left on a continuation: an elapsed time and the global-rank tag
_LINE_TAG = lazyre.compile(r"^(?:\d+(?:\.\d+)?s\s+)?\[rank(\d+)\]:\s?")
# the rank tags a launcher puts before a line: srun -l "3: ", torchrun "[default3]:" / "[rank3]:", mpirun "[1,3]<stdout>:"
_LAUNCHER_TAGS = lazyre.compile(r"^\s*(\d+): |\[(?:rank|default)(\d+)\]:|\[\d+,(\d+)\]<std\w+>:")

# a line that starts a record of its own (never the continuation of a wrapped message)
_HEAD = lazyre.compile(r"^(?:\[|[IWEF]\d{4} \d|[A-Z]{4,}[: ]|\d+(?:\.\d+)?s \[|\S+:\d+:\d+ \[\d+\] |Traceback|File \"|"
                   r"terminate called|Exception raised from|frame #\d|#\d+ |[A-Za-z_][\w.]*(?:Error|Exception)\b|"
                   r"torch\.|what\(\):)")
_MAX_JOIN = 6  # continuation lines joined to one message at most (a wrapped message is a few lines)
_WRAP_WIDTH = 60  # a line at least this long may have been cut by a terminal: the next line may continue it


@dataclass
class HangEvent:
    # nccl_timeout, nccl_status, dump_signal, heartbeat, desync, mismatch, monitored_barrier, nccl_error,
    # comm_aborted, remote_error, watchdog_exception, gloo_timeout, gloo_peer_closed, gloo_enforce, store_failure,
    # store_gone
    kind: str
    rank: int | None = None  # the global rank when a launcher tag names it, else the rank the message names
    group_rank: int | None = None  # the rank inside its process group ("[PG ... Rank N]")
    pg: str = ""  # process group id, with its description: "0(default_pg)"
    pg_guid: str = ""
    op: str = ""
    seq: int | None = None
    timeout_ms: int | None = None
    ran_ms: int | None = None
    numel_in: int | None = None
    numel_out: int | None = None
    last_enqueued: int | None = None
    last_completed: int | None = None
    peer: str = ""  # gloo peer address; the rank a signal or error came from
    ranks: list[int] = field(default_factory=list)  # ranks the message names (lagging, missing, failed)
    message: str = ""
    line: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if v not in (None, "", [])}
        d["kind"] = self.kind
        return d

    @property
    def group_key(self) -> str:
        """The process group, as one key across ranks: its GUID where printed, else its id."""
        return self.pg_guid or self.pg.split("(", 1)[0]


@dataclass
class HangLog:
    events: list[HangEvent] = field(default_factory=list)
    some_failed: list[str] = field(default_factory=list)  # "Some NCCL operations have failed or timed out"


def _int(v: Any) -> int | None:
    if isinstance(v, str) and re.fullmatch(r"-?\d+", v.strip()):
        return int(v.strip())
    return None


def _rank_list(text: str) -> list[int]:
    return sorted({int(x) for x in re.findall(r"\d+", text)})


# ---------------------------------------------------------------------------------------------
# Message patterns, each with the kind it gives and, for a message that wraps, when it is whole

_WORK_FIELDS = (("seq", lazyre.compile(r"SeqNum=(\d+)")), ("numel_in", lazyre.compile(r"NumelIn=(\d+)")),
                ("numel_out", lazyre.compile(r"NumelOut=(\d+)")), ("timeout_ms", lazyre.compile(r"Timeout\(ms\)=(\d+)")))
_OPTYPE = lazyre.compile(r"OpType=(\w+)")
_RAN = lazyre.compile(r"ran\s*for\s*(\d+)\s*(?:milliseconds|ms)\b")
_LAST = lazyre.compile(r"[Ll]ast\s*enqueued\s*(?:\w+\s*)?work:\s*(-?\d+),?\s*[Ll]ast\s*completed\s*(?:\w+\s*)?work:\s*(-?\d+)")

_TIMEOUT = lazyre.compile(r"Watchdog caught|[Cc]aught collective operation timeout|timed out in blocking wait|"
                      r"timed out in call to wait\(\)")
_STATUS = lazyre.compile(r"(?:Timeout at NCCL work|detected by watchdog at work(?: sequence id)?):?\s*(-?\d+)")
_DUMP = lazyre.compile(r"Received a (?:dump signal(?: due to a collective timeout)? from\s+(?:(this local rank)|rank\s*(-?\d+))|"
                   r"(global timeout) from another rank)")
_HEARTBEAT = lazyre.compile(r"Heartbeat monitor timed out|watchdog got stuck for\s*(\d+)\s*seconds|"
                        r"NCCL monitor thread timeout|monitoring thread detects no heartbeat|"
                        r"No PGNCCL's watchdog heartbeat detected|due to ProcessGroupNCCL watchdog hang")
_WD_EXCEPTION = lazyre.compile(r"(?:NCCL|Process group) watchdog thread terminated with exception:\s*(.*)$")
_NCCL_ERROR = lazyre.compile(r"NCCL error(?: in: [^,]*,|:)\s*(.+?)(?:,\s*NCCL version\s*([\w.+-]+))?$|"
                         r"\b(ncclRemoteError|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|"
                         r"ncclInvalidUsage|ncclInvalidArgument):\s*(.*)$")
_ABORTED = lazyre.compile(r"NCCL communicator was aborted on rank (\d+)\.?\s*(?:Original reason for (?:failure|the abort|"
                      r"aborting) was:?\s*(.*))?")
_REMOTE = lazyre.compile(r"remote error detected from rank:\s*(\d+)")
_DESYNC_AT = lazyre.compile(r"\[(\d+)\] Timeout at collective: (\w+), #(\d+)")
_DESYNC_MISSING = lazyre.compile(r"ranks \[([\d, ]*)\] are the lagging ranks that caused this timeout")
_DESYNC_STARTED = lazyre.compile(r"\[([\d, ]+)\] joined but didn't finish collective #(\d+)")
_DESYNC_FINISHED = lazyre.compile(r"\[([\d, ]+)\] finished collective #(\d+), but didn't join collective #(\d+)")
_MISMATCH = lazyre.compile(r"Detected mismatch between collectives on ranks")
_RUNNING = lazyre.compile(r"Rank (\d+) is running collective:")
_BARRIER = lazyre.compile(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier in (\d+) ms|"
                      r"Rank (\d+) timed out in monitoredBarrier after (\d+) ms")
_GLOO_TIMEOUT = lazyre.compile(r"\[([^\]]*gloo[^\]]*)\]\s*(?:Timed out waiting (\d+)ms for (recv|send) operation to complete|"
                           r"(Application timeout caused pair closure))")
_GLOO_CLOSED = lazyre.compile(r"\[([^\]]*gloo[^\]]*)\]\s*(Connection closed by peer|Read error|Read timeout|Write timeout|"
                          r"Socket unexpectedly closed|Socket closed|writev)\s*\[?([0-9A-Fa-f:.]+)\]?:(\d+)")
_GLOO_ENFORCE = lazyre.compile(r"\[enforce fail at ([^\]]*gloo[^\]]*)\]\s*(.*)$")
_STORE = lazyre.compile(r"Timed out after (\d+) seconds waiting for clients\. (\d+)/(\d+) clients joined|"
                    r"The client socket has timed out after (\d+)\s*(\w*) while trying to connect to \(([^,)]+),\s*(\d+)\)|"
                    r"Timed out initializing process group in store based barrier on rank:? (\d+), for key: (\S+) "
                    r"\(world_size=(\d+), (?:worker_count|num_workers_joined)=(\d+), timeout=([^)]*)\)|"
                    r"(?:DistStoreError|DistNetworkError|RuntimeError): (?:Socket Timeout|Wait timeout)|"
                    r"(RendezvousTimeoutError)")
_STORE_LOST = lazyre.compile(r"\[(\d+)\] is setting up NCCL communicator and retrieving ncclUniqueId from \[0\] via c10d "
                         r"key-value store|The server socket has failed to (?:listen on any local network address|bind)|"
                         r"The client socket has failed to connect to any network address of \(([^,)]+),\s*(\d+)\)|"
                         r"The connection to the C10d store has failed")
_SOME_FAILED = lazyre.compile(r"Some NCCL operations have failed or timed out")
# the store's server went away while this rank ran (ProcessGroupNCCL's heartbeat monitor, 2.2+;
# the TCPStore client's socket calls, c10d/Utils.hpp)
_STORE_GONE = lazyre.compile(r"Failed to (?:check|get) the \"should dump\" flag on TCPStore.*?(?:with error: (.+))?$|"
                         r"\b(?:sendBytes|recvBytes|recvValue) failed on SocketImpl\([^)]*\):\s*(.+)$")

# a cheap gate: a line that names none of these is not read further
_ANY = lazyre.compile(r"atchdog|NCCL work|[Dd]ump signal|global timeout|[Hh]eartbeat|monitor thread timeout|NCCL error|nccl[A-Z]\w+Error|"
                  r"communicator was aborted|remote error detected|Timeout at collective|lagging|collective #|"
                  r"mismatch between collectives|monitoredBarrier|gloo|clients joined|socket has timed out|"
                  r"store based barrier|Socket Timeout|Wait timeout|RendezvousTimeoutError|NCCL operations|"
                  r"ncclUniqueId from \[0\]|socket has failed to|C10d store has failed|"
                  r"timed out in blocking wait|timed out in call to wait|[Cc]aught collective operation timeout|"
                  r"should dump\" flag|failed on SocketImpl")


# a message of its own begins on the line (so it continues no other)
_STARTS = lazyre.compile(r"Watchdog caught|detected by watchdog|Timeout at NCCL work|Received a |Heartbeat monitor|"
                     r"terminated with exception|Some NCCL operations|To avoid data inconsistency|NCCL error|"
                     r"communicator was aborted|Detected mismatch|monitoredBarrier|Timed out|timed out in|"
                     r"watchdog got stuck|Terminating the process")


def _timeout_whole(text: str) -> bool:
    return bool(re.search(r"timing\s*out", text) or _RAN.search(text))


def _status_whole(text: str) -> bool:
    return bool(re.search(r"[Ll]ast\s*completed\s*(?:\w+\s*)?work:\s*-?\d+", text))


def _heartbeat_whole(text: str) -> bool:
    return "got stuck" not in text or bool(re.search(r"stuck\s*for\s*\d+\s*seconds", text))


def _fingerprints(text: str) -> list[tuple[int, str]]:
    """(rank, its collective fingerprint) of each "Rank N is running collective: ..." in `text`."""
    hits = list(_RUNNING.finditer(text))
    ends = [h.start() for h in hits[1:]] + [len(text)] if hits else []
    return [(int(h.group(1)), text[h.end():end]) for h, end in zip(hits, ends, strict=True)]


def _mismatch_whole(text: str) -> bool:
    return len(_fingerprints(text)) >= 2 and text.rstrip().endswith((")", "."))


# (start pattern, is the message whole): the messages that wrap and are joined before they are read
_WRAPPING: tuple[tuple[re.Pattern[str], Callable[[str], bool]], ...] = (
    (_TIMEOUT, _timeout_whole), (_STATUS, _status_whole), (_DUMP, _status_whole),
    (lazyre.compile(r"watchdog got stuck|Heartbeat monitor timed out"), _heartbeat_whole),
    (_MISMATCH, _mismatch_whole),
)


# ---------------------------------------------------------------------------------------------
# Reading


@dataclass
class _Line:
    text: str  # the message as printed (wrapped continuations joined)
    hint: int | None  # the rank the framing found for the line
    global_rank: int | None  # the rank a "[rankN]:" tag names
    tags: frozenset[int | None] = frozenset()  # every rank tag before the line (its stream), with the hint


def _stream(raw: str, hint: int | None) -> frozenset[int | None]:
    found = {int(next(g for g in m.groups() if g is not None)) for m in _LAUNCHER_TAGS.finditer(raw[:120])}
    return frozenset({hint, *found})


@dataclass
class _Pending:
    """A message that may continue on the next lines (a terminal wrapped it)."""

    line: _Line
    whole: Callable[[str], bool] | None  # None: no message begins on it yet (a terminal may have cut one)
    last_width: int = 0  # the length of the last piece (a terminal fills every piece but the last)
    joined: int = 0


def _start_of_wrapping(text: str) -> Callable[[str], bool] | None:
    for start, whole in _WRAPPING:
        if start.search(text):
            return whole
    return None


def _own_piece(pending: _Pending, text: str) -> str:
    """`text` without the rank tag it repeats from the message it continues ("[rank1]: last enqueued ...")."""
    m = _LINE_TAG.match(text.strip())
    if m and pending.line.global_rank is not None and int(m.group(1)) == pending.line.global_rank:
        return text.strip()[m.end():]
    return text


def _continues(pending: _Pending, text: str, hint: int | None) -> bool:
    """Whether `text` continues the wrapped message `pending`: no prefix of its own, no message of
    its own (a piece cut from a longer line may hold the rest of the message's first words)."""
    body = text.strip()
    if not body or pending.joined >= _MAX_JOIN or _HEAD.match(body):
        return False
    if hint is not None and pending.line.hint is not None and hint not in pending.line.tags:
        return False
    if pending.whole is None:
        return pending.last_width >= _WRAP_WIDTH and not _STARTS.match(body)
    return not pending.whole(pending.line.text) and not _STARTS.search(body)


def _join(head: str, text: str) -> str:
    """A continuation joined to its message: a formatter's indented continuation after a space, a
    terminal's hard wrap (which splits anywhere, even inside a number) directly."""
    if text[:1].isspace() or head[-1:].isspace():
        return head.rstrip() + " " + text.strip()
    return head + text.strip()


@dataclass
class _HangReader:
    """Reads the lines once; a message repeated (by a rank's several loggers, or quoted again in
    the exception that ends the process) counts once."""

    log: HangLog = field(default_factory=HangLog)
    seen: set[tuple[Any, ...]] = field(default_factory=set)
    pending: _Pending | None = None

    def feed(self, text: str, hint: int | None, raw: str) -> None:
        p = self.pending
        piece = _own_piece(p, text) if p is not None else text
        if p is not None and _continues(p, piece, hint):
            text = piece
            p.line.text = _join(p.line.text, text)
            p.joined += 1
            p.last_width = len(text.rstrip())
            p.whole = p.whole or _start_of_wrapping(p.line.text)
            return
        self.flush()
        body = text.strip()
        if not body:
            return
        marked = bool(_ANY.search(body))
        if not marked and len(text.rstrip()) < _WRAP_WIDTH:
            return
        g = _GLOBAL_TAG.search(raw[:240]) or _GLOBAL_TAG.search(body[:240])
        line = _Line(body, hint, int(g.group(1)) if g else None, _stream(raw, hint))
        whole = _start_of_wrapping(body)
        if not marked or (whole is not None and not whole(body)):
            self.pending = _Pending(line, whole, len(text.rstrip()))
            return
        self.read(line)

    def flush(self) -> None:
        if self.pending is not None:
            line, self.pending = self.pending.line, None
            if _ANY.search(line.text):
                self.read(line)

    def read(self, ln: _Line) -> None:
        for reader in _READERS:
            if reader(self, ln):
                return

    def add(self, ev: HangEvent, ln: _Line, *key: Any) -> None:
        """`ev` unless already seen. A copy of an event quoted without its launcher tag (the
        exception text) carries no global rank: it matches the original by the rank inside the group."""
        full = (ev.kind, ev.rank, *key)
        loose = (ev.kind, "in group", ev.group_rank, *key)
        tagged = ln.global_rank is not None
        if full in self.seen or (not tagged and loose in self.seen):
            return
        self.seen.add(full)
        if tagged:
            self.seen.add(loose)
        self.log.events.append(ev)


def _who(ln: _Line, text: str) -> dict[str, Any]:
    """rank, group_rank, pg, pg_guid for a message: the process-group tag nearest before `text`'s
    message wins (an exception quoting another's message names the inner one)."""
    tags = list(_TAG.finditer(text))
    out: dict[str, Any] = {"pg": "", "pg_guid": ""}
    group_rank = int(tags[-1].group("rank")) if tags else None
    for t in tags:
        if t.group("pg") and not out["pg"]:
            desc = t.group("desc")
            out["pg"] = f"{t.group('pg')}({desc})" if desc else t.group("pg")
            out["pg_guid"] = t.group("guid") or ""
    out["group_rank"] = group_rank
    out["rank"] = ln.global_rank if ln.global_rank is not None else group_rank if group_rank is not None else ln.hint
    return out


def _read_timeout(r: _HangReader, ln: _Line) -> bool:
    m = _TIMEOUT.search(ln.text)
    if not m:
        return False
    work = ln.text.find("WorkNCCL(", 0, m.start())  # "Work WorkNCCL(...) timed out in blocking wait"
    at = work if work >= 0 else m.start()
    head, body = ln.text[:at], ln.text[at:]
    ev = HangEvent(kind="nccl_timeout", line=ln.text, **_who(ln, head[-160:] or ln.text))
    if ev.group_rank is None:  # the tag can follow the message in a paraphrase
        ev = HangEvent(kind="nccl_timeout", line=ln.text, **_who(ln, ln.text))
    for name, rx in _WORK_FIELDS:
        f = rx.search(body)
        setattr(ev, name, int(f.group(1)) if f else None)
    op = _OPTYPE.search(body)
    ev.op = op.group(1) if op else ""
    ran = _RAN.search(body)
    ev.ran_ms = int(ran.group(1)) if ran else None
    r.add(ev, ln, ev.seq, ev.op, ev.timeout_ms)
    return True


def _read_status(r: _HangReader, ln: _Line) -> bool:
    m = _STATUS.search(ln.text)
    if not m:
        return False
    ev = HangEvent(kind="nccl_status", seq=int(m.group(1)), line=ln.text, **_who(ln, ln.text[:m.start()] or ln.text))
    last = _LAST.search(ln.text)
    if last:
        ev.last_enqueued, ev.last_completed = int(last.group(1)), int(last.group(2))
    r.add(ev, ln, ev.group_key, ev.seq)
    return True


def _read_dump(r: _HangReader, ln: _Line) -> bool:
    m = _DUMP.search(ln.text)
    if not m:
        return False
    ev = HangEvent(kind="dump_signal", line=ln.text, **_who(ln, ln.text[:m.start()] or ln.text))
    ev.peer = "local" if m.group(1) else m.group(2) if m.group(2) is not None else "another rank"
    last = _LAST.search(ln.text)
    if last:
        ev.last_enqueued, ev.last_completed = int(last.group(1)), int(last.group(2))
    r.add(ev, ln, ev.group_key, ev.peer)
    return True


def _read_heartbeat(r: _HangReader, ln: _Line) -> bool:
    m = _HEARTBEAT.search(ln.text)
    if not m:
        return False
    ev = HangEvent(kind="heartbeat", line=ln.text, message=m.group(0), **_who(ln, ln.text[:m.start()] or ln.text))
    if m.group(1):
        ev.timeout_ms = int(m.group(1)) * 1000
    r.add(ev, ln, ev.timeout_ms if ev.timeout_ms is not None else m.group(0))
    return True


def _read_watchdog_exception(r: _HangReader, ln: _Line) -> bool:
    m = _WD_EXCEPTION.search(ln.text)
    if not m:
        return False
    rest = m.group(1).strip()
    if _TIMEOUT.search(rest) or _NCCL_ERROR.search(rest) or _ABORTED.search(rest):
        return _read_timeout(r, ln) or _read_nccl_error(r, ln) or _read_aborted(r, ln)
    ev = HangEvent(kind="watchdog_exception", message=rest or "unknown", line=ln.text,
                   **_who(ln, ln.text[:m.start()] or ln.text))
    r.add(ev, ln, ev.message[:80])
    return True


def _read_nccl_error(r: _HangReader, ln: _Line) -> bool:
    m = _NCCL_ERROR.search(ln.text)
    if not m:
        return False
    reason = (m.group(1) or f"{m.group(3)}: {m.group(4)}").strip()
    ev = HangEvent(kind="nccl_error", message=reason, line=ln.text, **_who(ln, ln.text[:m.start()] or ln.text))
    if m.group(2):
        ev.message = f"{reason} (NCCL {m.group(2)})"
    r.add(ev, ln, reason[:60])
    return True


def _read_aborted(r: _HangReader, ln: _Line) -> bool:
    m = _ABORTED.search(ln.text)
    if not m:
        return False
    ev = HangEvent(kind="comm_aborted", message=(m.group(2) or "").strip(), line=ln.text, **_who(ln, ln.text))
    ev.group_rank = int(m.group(1))
    if ln.global_rank is None:
        ev.rank = int(m.group(1))
    r.add(ev, ln)
    return True


def _read_remote(r: _HangReader, ln: _Line) -> bool:
    m = _REMOTE.search(ln.text)
    if not m:
        return False
    ev = HangEvent(kind="remote_error", peer=m.group(1), line=ln.text, **_who(ln, ln.text[:m.start()]))
    r.add(ev, ln, ev.group_key, ev.peer)
    return True


def _read_desync(r: _HangReader, ln: _Line) -> bool:
    t = ln.text
    at = _DESYNC_AT.search(t)
    if at:
        r.add(HangEvent(kind="desync", rank=int(at.group(1)), group_rank=int(at.group(1)), op=at.group(2),
                        seq=int(at.group(3)), message="timeout at", line=t), ln, "at", at.group(3))
        return True
    missing = _DESYNC_MISSING.search(t)
    started = _DESYNC_STARTED.search(t)
    finished = _DESYNC_FINISHED.search(t)
    if missing:
        ev = HangEvent(kind="desync", ranks=_rank_list(missing.group(1)), message="never joined", line=t)
    elif started:
        ev = HangEvent(kind="desync", ranks=_rank_list(started.group(1)), seq=int(started.group(2)),
                       message="joined but did not finish", line=t)
    elif finished:
        ev = HangEvent(kind="desync", ranks=_rank_list(finished.group(1)), seq=int(finished.group(3)),
                       message="did not join", line=t)
    else:
        return False
    r.add(ev, ln, ev.message, tuple(ev.ranks), ev.seq)
    return True


def _fingerprint(fp: str) -> tuple[str, int | None]:
    op = _OPTYPE.search(fp)
    seq = re.search(r"SequenceNumber=(\d+)", fp)
    return (op.group(1) if op else ""), (int(seq.group(1)) if seq else None)


def _read_mismatch(r: _HangReader, ln: _Line) -> bool:
    if not _MISMATCH.search(ln.text):
        return False
    fps = _fingerprints(ln.text)
    ev = HangEvent(kind="mismatch", line=ln.text)
    if fps:
        ev.rank = ev.group_rank = fps[0][0]
        ev.op, ev.seq = _fingerprint(fps[0][1])
        ev.ranks = [fps[0][0]]
    if len(fps) > 1:
        other_op, other_seq = _fingerprint(fps[1][1])
        ev.ranks.append(fps[1][0])
        ev.peer = str(fps[1][0])
        ev.message = f"rank {fps[1][0]} runs {other_op or 'another collective'}" + (
            f" SequenceNumber={other_seq}" if other_seq is not None else "")
    r.add(ev, ln, tuple(ev.ranks), ev.op, ev.seq)
    return True


def _read_barrier(r: _HangReader, ln: _Line) -> bool:
    m = _BARRIER.search(ln.text)
    if not m:
        return False
    if m.group(1) is not None:
        ev = HangEvent(kind="monitored_barrier", ranks=_rank_list(m.group(1)), timeout_ms=int(m.group(2)),
                       message="failed to pass", line=ln.text)
    else:
        ev = HangEvent(kind="monitored_barrier", rank=int(m.group(3)), timeout_ms=int(m.group(4)),
                       message="timed out", line=ln.text)
    r.add(ev, ln, tuple(ev.ranks), ev.message)
    return True


def _read_gloo(r: _HangReader, ln: _Line) -> bool:
    e = _GLOO_ENFORCE.search(ln.text)
    if e:
        ev = HangEvent(kind="gloo_enforce", message=e.group(2).strip(), line=ln.text, **_who(ln, ln.text[:e.start()]))
        r.add(ev, ln, ev.message[:80])
        return True
    m = _GLOO_TIMEOUT.search(ln.text)
    if m:
        ev = HangEvent(kind="gloo_timeout", op=m.group(3) or "", timeout_ms=_int(m.group(2) or ""),
                       message=m.group(4) or "", line=ln.text, **_who(ln, ln.text[:m.start()]))
        r.log.events.append(ev)
        return True
    c = _GLOO_CLOSED.search(ln.text)
    if c:
        r.log.events.append(HangEvent(kind="gloo_peer_closed", peer=c.group(3), message=c.group(2), line=ln.text,
                                      **_who(ln, ln.text[:c.start()])))
        return True
    return False


def _read_store_lost(r: _HangReader, ln: _Line) -> bool:
    """The store went away or could not be opened (its host crashed, its port is taken or unreachable)."""
    m = _STORE_LOST.search(ln.text)
    if not m:
        return False
    ev = HangEvent(kind="store_failure", message=ln.text[m.start():], line=ln.text, **_who(ln, ln.text[:m.start()]))
    if m.group(1) is not None:
        ev.rank = int(m.group(1)) if ln.global_rank is None else ev.rank
    if m.group(2) is not None:
        ev.peer = f"{m.group(2).strip()}:{m.group(3)}"
    r.add(ev, ln, ev.message[:80])
    return True


def _read_store(r: _HangReader, ln: _Line) -> bool:
    m = _STORE.search(ln.text)
    if not m:
        return _read_store_lost(r, ln)
    g = m.groups()
    ev = HangEvent(kind="store_failure", message=m.group(0), line=ln.text, **_who(ln, ln.text[:m.start()]))
    if g[0] is not None:  # TCPStore server: N of M clients joined
        ev.timeout_ms, ev.ranks = int(g[0]) * 1000, [int(g[1]), int(g[2])]
    elif g[3] is not None:  # a client could not reach the store
        ev.peer = f"{g[5].strip()}:{g[6]}"
    elif g[7] is not None:  # store-based barrier: joined of world size
        ev.rank, ev.ranks = int(g[7]), [int(g[10]), int(g[9])]
    r.add(ev, ln, ev.message[:80])
    return True


def _read_store_gone(r: _HangReader, ln: _Line) -> bool:
    m = _STORE_GONE.search(ln.text)
    if not m:
        return False
    ev = HangEvent(kind="store_gone", message=(m.group(1) or m.group(2) or "").strip(), line=ln.text,
                   **_who(ln, ln.text[:m.start()]))
    r.log.events.append(ev)
    return True


def _read_some_failed(r: _HangReader, ln: _Line) -> bool:
    if not _SOME_FAILED.search(ln.text):
        return False
    r.log.some_failed.append(ln.text)
    return True


_READERS: tuple[Callable[[_HangReader, _Line], bool], ...] = (
    _read_watchdog_exception, _read_timeout, _read_status, _read_dump, _read_heartbeat, _read_desync,
    _read_mismatch, _read_barrier, _read_aborted, _read_nccl_error, _read_remote, _read_gloo, _read_store,
    _read_some_failed, _read_store_gone,
)


def hang_events(lines: Iterable[tuple[str, int | None] | tuple[str, int | None, str]]) -> HangLog:
    """The hang events of (line, rank the framing found for it[, the raw line]) tuples."""
    reader = _HangReader()
    for item in lines:
        text, hint = item[0], item[1]
        raw = item[2] if len(item) > 2 else text
        reader.feed(text.rstrip("\r"), hint, raw)
    reader.flush()
    return reader.log


def parse_hang_log(text: str) -> HangLog:
    """The hang events of raw text (launcher prefixes kept in the lines)."""
    return hang_events((ln, None, ln) for ln in text.splitlines())


def merge_status(log: HangLog) -> list[HangEvent]:
    """The timeouts, each with the process group and last enqueued/completed numbers of its rank's
    status line for the same work folded in."""
    timeouts = [e for e in log.events if e.kind == "nccl_timeout"]
    status = {(e.rank, e.seq): e for e in reversed(log.events) if e.kind == "nccl_status"}
    for t in timeouts:
        s = status.get((t.rank, t.seq))
        if s is None:
            continue
        t.last_enqueued, t.last_completed = s.last_enqueued, s.last_completed
        t.pg = t.pg or s.pg
        t.pg_guid = t.pg_guid or s.pg_guid
    return timeouts


__all__ = ["HangEvent", "HangLog", "hang_events", "merge_status", "parse_hang_log"]
