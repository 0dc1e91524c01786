"""hang.watchdog: collective timeouts in training logs (PyTorch NCCL watchdog, gloo) and the
flight recorder's verdict (`fr_trace` text).

Graders over `preflight.parsers.torch_log` (watchdog lines of every PyTorch era, status
lines, gloo errors, tracebacks, multiprocessing exit lines) and `preflight.parsers.flight_recorder`.
The lowest sequence number among the ranks that timed out is where they parted: the rank(s)
missing from that collective hung or died first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from preflight.model import Result, Status
from preflight.parsers.flight_recorder import FrText
from preflight.parsers.torch_log import HangEvent, HangLog, TorchLog
from preflight.registry import Check, CheckContext, register

EARLY_SEQ = 100  # a collective this early in a job is start-up, not a slow step
_GATHER = ("ALLGATHER", "_ALLGATHER_BASE", "ALLGATHER_COALESCED", "ALLGATHER_INTO_TENSOR_COALESCED")
_SCATTER = ("REDUCE_SCATTER", "_REDUCE_SCATTER_BASE", "REDUCESCATTER")


def group_size(ev: HangEvent) -> int | None:
    """Ranks in the process group, from an all-gather's NumelOut/NumelIn (or a reduce-scatter's inverse)."""
    if not ev.numel_in or not ev.numel_out:
        return None
    op = ev.op.upper()
    big, small = (ev.numel_out, ev.numel_in) if op in _GATHER else (ev.numel_in, ev.numel_out) if op in _SCATTER \
        else (0, 1)
    return big // small if big and big % small == 0 and big // small > 1 else None


def _merge_status(log: HangLog) -> list[HangEvent]:
    """Timeouts, with the last enqueued/completed numbers of the matching status line folded in."""
    timeouts = [e for e in log.events if e.kind == "nccl_timeout"]
    status = [e for e in log.events if e.kind == "nccl_status"]
    for t in timeouts:
        for s in status:
            if s.rank == t.rank and s.seq == t.seq:
                t.last_enqueued, t.last_completed = s.last_enqueued, s.last_completed
                t.pg = t.pg or s.pg
                break
    return timeouts


def grade_fr_text(ctx: CheckContext, fr: FrText) -> Result:
    """fr_trace's verdict: the ranks that did not join a collective, or fell behind the others."""
    facts: dict[str, Any] = {}
    remedy = ("the named rank(s) never entered that collective: read their logs and py-spy stacks (hung in a data "
              "loader, a host-side deadlock, a crashed process) and check their node (Xid, NIC); `preflight triage` "
              "collects both")
    missing = [x for x in fr.findings if x.missing_ranks]
    if missing:
        x = missing[0]
        facts.update(seq=x.seq, op=x.op or None, group=x.group or None, missing_ranks=x.missing_ranks,
                     expected_ranks=x.expected_ranks, world_size=x.world_size)
        ranks = ", ".join(map(str, x.missing_ranks))
        return ctx.result(Status.FAIL, f"flight recorder: rank{'s' if len(x.missing_ranks) > 1 else ''} {ranks} did not "
                                       f"join {x.op or 'the collective'} sequence number {x.seq}"
                                       + (f" (expected ranks {x.expected_ranks})" if x.expected_ranks else ""),
                          evidence=x.lines[:10], remedy=remedy, facts=facts)
    culprits = [(r, t, x) for x in fr.findings for r, t in x.culprits]
    if culprits:
        r, t, x = culprits[0]
        facts.update(seq=x.seq, culprit=r)
        return ctx.result(Status.FAIL, f"flight recorder: rank {r} is the culprit of sequence number {x.seq} ({t})",
                          evidence=x.lines[:10], remedy=remedy, facts=facts)
    if fr.findings:
        x = fr.findings[0]
        return ctx.result(Status.FAIL, f"flight recorder: collective sequence number {x.seq} has errors ({x.kind})",
                          evidence=x.lines[:10], remedy=remedy, facts={"seq": x.seq})
    sbs = fr.side_by_side
    if sbs is not None and sbs.behind:
        counts = {r: len(sbs.entries[r]) for r in sbs.ranks}
        most = max(counts.values())
        lead = next(r for r in sbs.ranks if counts[r] == most)
        nxt = sbs.entries[lead][len(sbs.entries[sbs.behind[0]])]
        facts.update(entries=counts, behind=sbs.behind)
        return ctx.result(Status.FAIL, f"flight recorder: rank{'s' if len(sbs.behind) > 1 else ''} "
                                       f"{', '.join(map(str, sbs.behind))} entered {counts[sbs.behind[0]]} collective(s), "
                                       f"rank {lead} {most}: the next one ({nxt}) was never joined",
                          evidence=[sbs.header, *[f"rank {r}: {n} entries" for r, n in counts.items()]],
                          remedy=remedy, facts=facts)
    n = len(sbs.ranks) if sbs is not None else 0
    return ctx.result(Status.PASS, f"flight recorder: all {n} rank(s) entered the same collectives",
                      facts={"ranks": sbs.ranks if sbs else []})


def _ranks(events: list[HangEvent]) -> str:
    rs = sorted({e.rank for e in events if e.rank is not None})
    if not rs:
        return "unknown rank"
    shown = ", ".join(str(r) for r in rs[:12]) + (f" (+{len(rs) - 12} more)" if len(rs) > 12 else "")
    return f"rank{'s' if len(rs) > 1 else ''} {shown}"


_REMEDY_HANG = ("the ranks listed waited for a peer that never joined that collective: find the rank NOT in "
                "this list (it hung or died first: its log, py-spy dump, Xid/dmesg on its node) and drain its "
                "node if it is a hardware fault; set TORCH_NCCL_TRACE_BUFFER_SIZE to get flight-recorder dumps; "
                "`preflight triage` collects both")


@dataclass
class _Events:
    """The log's hang events by kind."""

    timeouts: list[HangEvent]  # NCCL watchdog timeouts, merged with their status lines
    status_only: list[HangEvent]
    errors: list[HangEvent]
    gloo_t: list[HangEvent]
    gloo_c: list[HangEvent]  # gloo: a peer closed the connection

    @classmethod
    def of(cls, log: HangLog) -> _Events:
        def kind(k: str) -> list[HangEvent]:
            return [e for e in log.events if e.kind == k]

        return cls(_merge_status(log), kind("nccl_status"), kind("nccl_error"), kind("gloo_timeout"),
                   kind("gloo_peer_closed"))


def _nccl_timeout(ctx: CheckContext, log: HangLog, ev_: _Events, facts: dict[str, Any]) -> Result:
    """The first NCCL collective that timed out: op, SeqNum, the ranks stuck in it."""
    pool = ev_.timeouts or ev_.status_only
    with_seq = [e for e in pool if e.seq is not None]
    first = min(with_seq, key=lambda e: (e.seq, e.rank if e.rank is not None else 1 << 30)) if with_seq else pool[0]
    facts.update({"op": first.op or None, "seq": first.seq, "timeout_ms": first.timeout_ms,
                  "ran_ms": first.ran_ms, "rank": first.rank, "pg": first.pg or None,
                  "group_size": group_size(first),
                  "ranks": sorted({e.rank for e in pool if e.rank is not None}),
                  "seqs": sorted({e.seq for e in with_seq if e.seq is not None})})
    at_first = [e for e in pool if e.seq == first.seq]
    desc = f"{first.op or 'collective'}"
    if first.seq is not None:
        desc += f" SeqNum={first.seq}"
    if first.timeout_ms is not None:
        desc += f" (timeout {first.timeout_ms} ms"
        desc += f", ran {first.ran_ms} ms)" if first.ran_ms is not None else ")"
    where = f" of process group {first.pg}" if first.pg else ""
    remedy = _REMEDY_HANG
    if first.seq is not None and first.seq <= EARLY_SEQ:
        remedy = (f"SeqNum {first.seq}: the job had barely started, so a longer timeout cannot help: a rank "
                  "never joined (crashed, hung at start-up, or cannot reach the others); " + remedy)
    size = group_size(first)
    summary = f"NCCL watchdog timeout: {desc} on {_ranks(at_first)}{where}" + (
        f" ({size} ranks in the group)" if size else "")
    ev = [e.line for e in at_first[:6]]
    others = [e for e in pool if e not in at_first]
    if others:
        seqs = sorted({e.seq for e in others if e.seq is not None})
        summary += f"; {len(others)} more timeout line(s) at later/other SeqNum {', '.join(map(str, seqs[:5]))}"
        ev += [e.line for e in others[:3]]
    ev += [e.line for e in ev_.status_only if e.seq == first.seq][:2] + log.some_failed[:1]
    ev += [e.line for e in ev_.errors[:2]] + [e.line for e in ev_.gloo_c[:2]]
    return ctx.result(Status.FAIL, summary, evidence=list(dict.fromkeys(ev)), remedy=remedy, facts=facts)


def _gloo_failure(ctx: CheckContext, tl: TorchLog, ev_: _Events, facts: dict[str, Any]) -> Result:
    """A gloo timeout or a peer that closed its connection, and the process that exited first."""
    gloo_t, gloo_c = ev_.gloo_t, ev_.gloo_c
    first_t = gloo_t[0] if gloo_t else None
    facts.update({"op": first_t.op if first_t else None, "timeout_ms": first_t.timeout_ms if first_t else None,
                  "rank": (first_t or gloo_c[0]).rank,
                  "peers_closed": sorted({e.peer for e in gloo_c})})
    parts = []
    if first_t is not None:
        parts.append(f"gloo {first_t.op} timed out after {first_t.timeout_ms} ms on {_ranks(gloo_t)}")
    rem = _REMEDY_HANG
    if gloo_c:
        parts.append(f"peer(s) {', '.join(sorted({e.peer for e in gloo_c}))} closed the connection")
        rem = (f"the process at {gloo_c[0].peer} exited or crashed first: read its log (OOM, exception, "
               "node failure); the timeouts on other ranks follow from it")
    ev = [e.line for e in (gloo_c + gloo_t)][:8]
    first_exit = next((x for x in tl.exits if x.first), None)
    if first_exit is not None:
        parts.append(f"process {first_exit.process} exited first (exit code {first_exit.code})")
        ev += [x.line for x in tl.exits[:3]]
        facts["first_exit"] = {"process": first_exit.process, "code": first_exit.code}
        rem = (f"process {first_exit.process} exited on its own with code {first_exit.code}; the others lost their "
               "connection to it: read its log for the error that ended it")
    elif tl.p2p_calls and gloo_c and not gloo_t:
        parts.append("inside a point-to-point receive: the sending process exited before the receive completed")
        ev += tl.p2p_calls[:2]
        rem = ("an application bug in point-to-point communication, not the network: the sender returned (or "
               "crashed) before its matching send completed; keep both processes alive until every send/recv "
               "pair has completed (wait on the requests, add a barrier before exit)")
    return ctx.result(Status.FAIL, "; ".join(parts), evidence=ev, remedy=rem, facts=facts)


def grade_watchdog(ctx: CheckContext) -> Result:
    tl: TorchLog | None = ctx.facts("watchdog-log")
    fr: FrText | None = ctx.facts("fr-trace")
    if tl is None and fr is None:
        return ctx.result(Status.SKIP, "no training log or flight-recorder output to grade")
    if tl is None:
        return grade_fr_text(ctx, fr) if fr is not None else ctx.result(Status.SKIP, "nothing to grade")
    log = tl.hang
    ev_ = _Events.of(log)
    facts: dict[str, Any] = {"op": None, "seq": None, "timeout_ms": None, "ran_ms": None, "rank": None,
                             "events": [e.to_dict() for e in log.events]}
    if ev_.timeouts or ev_.status_only:
        return _nccl_timeout(ctx, log, ev_, facts)
    if ev_.gloo_t or ev_.gloo_c:
        return _gloo_failure(ctx, tl, ev_, facts)
    if ev_.errors:
        errors = ev_.errors
        facts["rank"] = errors[0].rank
        return ctx.result(Status.FAIL, f"NCCL error in the watchdog on {_ranks(errors)}: {errors[0].message[:160]}",
                          evidence=[e.line for e in errors[:6]],
                          remedy="a peer exited or the network failed: check the other ranks' logs for the first "
                                 "failure, and the IB ports (ibstat) and Xids of their nodes", facts=facts)
    if log.some_failed:
        return ctx.result(Status.FAIL, "NCCL operations failed or timed out (no detail line in the log)",
                          evidence=log.some_failed[:4], remedy=_REMEDY_HANG, facts=facts)
    if fr is not None and fr.recognised:
        return grade_fr_text(ctx, fr)
    return ctx.result(Status.PASS, "no collective timeout in the log", facts=facts)


register(Check(
    id="hang.watchdog",
    title="Collective timeouts",
    grade=grade_watchdog,
    probes=(),
    inputs=("watchdog-log", "fr-trace"),
    catches="NCCL watchdog and gloo collective timeouts (op, SeqNum, timeout, ranks, group size), the process that "
            "exited first, point-to-point receives whose sender exited, ranks the flight recorder shows missing",
    node_local=False,
    in_run=False,
))

__all__ = ["grade_fr_text", "grade_watchdog", "group_size"]
