"""hang.watchdog: collective timeouts in training logs (PyTorch NCCL watchdog, gloo).

The NCCL watchdog of PyTorch prints, per rank, the collective it gave up on:

    [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1234, OpType=ALLREDUCE,
    NumelIn=..., NumelOut=..., Timeout(ms)=600000) ran for 600047 milliseconds before timing out.

Over versions the prefix changed (`[E ProcessGroupNCCL.cpp:NNN]`, `[rankN]:[E... ProcessGroupNCCL.cpp:NNN]`,
`[PG 0 Rank 3]`, `[PG ID 0 PG GUID 0(default_pg) Rank 3]`), the fields inside WorkNCCL(...) grew
(no SeqNum before 1.10, NumelIn/NumelOut from 2.1), and status lines were added
(`Timeout at NCCL work: N, last enqueued NCCL work: N, last completed NCCL work: N.`,
`failure detected by watchdog at work sequence id: N PG status: last enqueued work: N, last
completed work: N`). gloo raises `Timed out waiting Nms for recv operation to complete` and
`Connection closed by peer [addr]:port` from its transport sources.

The lowest sequence number among the ranks that timed out is where they parted: the rank(s)
missing from that collective hung or died first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from preflight.model import Result, Status
from preflight.registry import Check, CheckContext, Format, register, register_format

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


def _int(v: str | None) -> int | None:
    if v is None:
        return None
    v = v.strip()
    return int(v) if re.fullmatch(r"-?\d+", v) else None


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
    log = HangLog()
    seen: set[tuple[Any, ...]] = set()
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if _WATCHDOG_TIMEOUT.search(line):
            # "terminated with exception: [Rank 3] Watchdog caught..." repeats the event: the
            # rank tag nearest the message is the one that counts.
            idx = line.find("Watchdog caught")
            rank, pg = _rank_pg(line[:idx][-120:]) if idx >= 0 else (None, "")
            if rank is None:
                rank, pg = _rank_pg(line)
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
            key: tuple[Any, ...] = ("t", ev.rank, ev.seq, ev.op, ev.timeout_ms)
            if key not in seen:
                seen.add(key)
                log.events.append(ev)
            continue
        mt = _TIMEOUT_AT.search(line) or _DETECTED_AT.search(line)
        if mt:
            rank, pg = _rank_pg(line)
            key = ("s", rank, pg, mt.group(1))
            if key not in seen:
                seen.add(key)
                log.events.append(HangEvent(kind="nccl_status", rank=rank, pg=pg, seq=_int(mt.group(1)),
                                            last_enqueued=_int(mt.group(2)), last_completed=_int(mt.group(3)),
                                            line=line))
            continue
        if _SOME_FAILED.search(line):
            log.some_failed.append(line)
            continue
        me = _NCCL_ERROR.search(line)
        if me:
            rank, pg = _rank_pg(line)
            key = ("e", rank, me.group(1)[:80])
            if key not in seen:
                seen.add(key)
                log.events.append(HangEvent(kind="nccl_error", rank=rank, pg=pg, message=me.group(1).strip(),
                                            line=line))
            continue
        mg = _GLOO_TIMEOUT.search(line)
        if mg:
            rank, pg = _rank_pg(line)
            log.events.append(HangEvent(kind="gloo_timeout", rank=rank, pg=pg, op=mg.group(3),
                                        timeout_ms=int(mg.group(2)), line=line))
            continue
        mc = _GLOO_CLOSED.search(line)
        if mc:
            rank, pg = _rank_pg(line)
            log.events.append(HangEvent(kind="gloo_peer_closed", rank=rank, pg=pg, peer=mc.group(3),
                                        message=mc.group(2), line=line))
    return log


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


def _ranks(events: list[HangEvent]) -> str:
    rs = sorted({e.rank for e in events if e.rank is not None})
    if not rs:
        return "unknown rank"
    shown = ", ".join(str(r) for r in rs[:12]) + (f" (+{len(rs) - 12} more)" if len(rs) > 12 else "")
    return f"rank{'s' if len(rs) > 1 else ''} {shown}"


def grade_watchdog(ctx: CheckContext) -> Result:
    cap = ctx.capture("watchdog-log")
    if cap is None:
        return ctx.result(Status.SKIP, "no training log to grade")
    log = parse_hang_log(cap.text)
    timeouts = _merge_status(log)
    status_only = [e for e in log.events if e.kind == "nccl_status"]
    errors = [e for e in log.events if e.kind == "nccl_error"]
    gloo_t = [e for e in log.events if e.kind == "gloo_timeout"]
    gloo_c = [e for e in log.events if e.kind == "gloo_peer_closed"]
    facts: dict[str, Any] = {"op": None, "seq": None, "timeout_ms": None, "ran_ms": None, "rank": None,
                             "events": [e.to_dict() for e in log.events]}
    remedy_hang = ("the ranks listed waited for a peer that never joined that collective: find the rank NOT in "
                   "this list (it hung or died first: its log, py-spy dump, Xid/dmesg on its node) and drain its "
                   "node if it is a hardware fault; set TORCH_NCCL_TRACE_BUFFER_SIZE to get flight-recorder dumps; "
                   "`preflight triage` collects both")
    if timeouts or status_only:
        pool = timeouts or status_only
        with_seq = [e for e in pool if e.seq is not None]
        first = min(with_seq, key=lambda e: (e.seq, e.rank if e.rank is not None else 1 << 30)) if with_seq else pool[0]
        facts.update({"op": first.op or None, "seq": first.seq, "timeout_ms": first.timeout_ms,
                      "ran_ms": first.ran_ms, "rank": first.rank, "pg": first.pg or None,
                      "ranks": sorted({e.rank for e in pool if e.rank is not None}),
                      "seqs": sorted({e.seq for e in with_seq if e.seq is not None})})
        at_first = [e for e in pool if e.seq == first.seq]
        desc = f"{first.op or 'collective'}"
        if first.seq is not None:
            desc += f" SeqNum={first.seq}"
        if first.timeout_ms is not None:
            desc += f" (timeout {first.timeout_ms} ms"
            desc += f", ran {first.ran_ms} ms)" if first.ran_ms is not None else ")"
        summary = f"NCCL watchdog timeout: {desc} on {_ranks(at_first)}"
        ev = [e.line for e in at_first[:6]]
        others = [e for e in pool if e not in at_first]
        if others:
            seqs = sorted({e.seq for e in others if e.seq is not None})
            summary += f"; {len(others)} more timeout line(s) at later/other SeqNum {', '.join(map(str, seqs[:5]))}"
            ev += [e.line for e in others[:3]]
        ev += [e.line for e in status_only if e.seq == first.seq][:2] + log.some_failed[:1]
        ev += [e.line for e in errors[:2]] + [e.line for e in gloo_c[:2]]
        return ctx.result(Status.FAIL, summary, evidence=list(dict.fromkeys(ev)), remedy=remedy_hang, facts=facts)
    if gloo_t or gloo_c:
        first_t = gloo_t[0] if gloo_t else None
        facts.update({"op": first_t.op if first_t else None, "timeout_ms": first_t.timeout_ms if first_t else None,
                      "rank": (first_t or gloo_c[0]).rank,
                      "peers_closed": sorted({e.peer for e in gloo_c})})
        parts = []
        if gloo_t:
            parts.append(f"gloo {first_t.op if first_t else ''} timed out after {first_t.timeout_ms if first_t else '?'} ms "
                         f"on {_ranks(gloo_t)}")
        if gloo_c:
            parts.append(f"peer(s) {', '.join(sorted({e.peer for e in gloo_c}))} closed the connection")
        rem = remedy_hang
        if gloo_c:
            rem = (f"the process at {gloo_c[0].peer} exited or crashed first: read its log (OOM, exception, "
                   "node failure); the timeouts on other ranks follow from it")
        return ctx.result(Status.FAIL, "; ".join(parts), evidence=[e.line for e in (gloo_c + gloo_t)][:8],
                          remedy=rem, facts=facts)
    if errors:
        facts["rank"] = errors[0].rank
        return ctx.result(Status.FAIL, f"NCCL error in the watchdog on {_ranks(errors)}: {errors[0].message[:160]}",
                          evidence=[e.line for e in errors[:6]],
                          remedy="a peer exited or the network failed: check the other ranks' logs for the first "
                                 "failure, and the IB ports (ibstat) and Xids of their nodes", facts=facts)
    if log.some_failed:
        return ctx.result(Status.FAIL, "NCCL operations failed or timed out (no detail line in the log)",
                          evidence=log.some_failed[:4], remedy=remedy_hang, facts=facts)
    return ctx.result(Status.PASS, "no collective timeout in the log", facts=facts)


_DETECT = re.compile(
    r"Watchdog caught collective operation timeout|Some NCCL operations have failed or timed out|"
    r"Timeout at NCCL work: \d+|detected by watchdog at work|"
    r"gloo[^\]\n]*\]\s*(?:Timed out waiting \d+ms for (?:recv|send) operation|Connection closed by peer)|"
    r"watchdog thread terminated with exception")


def _looks_like_watchdog(text: str) -> bool:
    return bool(_DETECT.search(text))


register_format(Format("watchdog-log", detect=_looks_like_watchdog,
                       description="training log with PyTorch NCCL watchdog / gloo timeouts", priority=45))

register(Check(
    id="hang.watchdog",
    title="Collective timeouts",
    grade=grade_watchdog,
    probes=(),
    formats=("watchdog-log",),
    catches="NCCL watchdog and gloo collective timeouts: op, SeqNum, timeout and ranks; the lowest SeqNum is where "
            "the ranks parted",
    node_local=False,
    in_run=False,
))
