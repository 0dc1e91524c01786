"""hang.watchdog: collective hangs and job failures in training logs (PyTorch's NCCL watchdog,
heartbeat monitor, desync report, gloo, c10d store, torchrun) and the flight recorder's verdict.

Graders over `preflight.parsers.torch_log` / `torch_hang` events and `preflight.parsers.flight_recorder`
(`checks.hang_fr`). Every finding has a code in `checks/policy.toml`. A process group's
sequence numbers count its own collectives: the lowest one the ranks of a group timed out at is
where they parted, and the rank(s) missing from it hung or died first. Groups are told apart by
their GUID (or id): ranks of different groups stuck on different collectives are a finding of
their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from preflight.findings import Findings
from preflight.model import Result
from preflight.parsers.flight_recorder import FrText
from preflight.parsers.ras import RasStatus
from preflight.parsers.torch_hang import HangEvent, HangLog, merge_status
from preflight.parsers.torch_log import TorchLog
from preflight.registry import Check, CheckContext, register

from .hang_elastic import elastic_ok_summary, grade_workers
from .hang_fr import fr_ok_summary, grade_fr
from .hang_ras import grade_ras, ras_ok_summary

_GATHER = ("ALLGATHER", "_ALLGATHER_BASE", "ALLGATHER_COALESCED", "ALLGATHER_INTO_TENSOR_COALESCED")
_SCATTER = ("REDUCE_SCATTER", "_REDUCE_SCATTER_BASE", "REDUCESCATTER", "REDUCE_SCATTER_TENSOR_COALESCED")
_SHOWN = 12  # ranks named in a summary before "+N more" (a display limit)
# how much one finding quotes (display limits, not grading thresholds)
_QUOTE = 6  # pragma: no mutate - lines quoted per finding, a display limit
_FEW = 3  # pragma: no mutate - lines quoted for a secondary part of a finding, a display limit
_LINE = 400  # pragma: no mutate - characters of one quoted line, a display limit
_MSG = 160  # pragma: no mutate - characters of a message quoted in a summary, a display limit

REMEDY_HANG = ("the ranks listed waited for a peer that never joined that collective: find the rank NOT in "
               "this list (it hung or died first: its log, py-spy dump, Xid/dmesg on its node) and drain its "
               "node if it is a hardware fault; set TORCH_NCCL_TRACE_BUFFER_SIZE to get flight-recorder dumps; "
               "`preflight triage` collects both")
_REMEDY_GROUPS = ("each process group waits for its own missing peer: find the rank(s) missing from each group; a "
                  "rank stuck in one group blocks every other group it belongs to (pipeline, expert or tensor "
                  "parallel), and ranks that issue the groups' collectives in a different order deadlock the same "
                  "way; " + REMEDY_HANG)
_REMEDY_HEARTBEAT = ("the watchdog thread itself was blocked (a CUDA or NCCL call that never returned: a hung GPU, "
                     "a driver fault, or another thread holding the GIL inside a CUDA call): check the node's kernel "
                     "log for Xids and whether nvidia-smi answers, py-spy dump the process for a GIL deadlock; raise "
                     "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC only if the watchdog is merely slow")


def group_size(ev: HangEvent) -> int | None:
    """Ranks in the process group, from an all-gather's NumelOut/NumelIn (or a reduce-scatter's inverse)."""
    if not ev.numel_in or not ev.numel_out:
        return None
    op = ev.op.upper()
    if op in _GATHER:
        big, small = ev.numel_out, ev.numel_in
    elif op in _SCATTER:
        big, small = ev.numel_in, ev.numel_out
    else:
        return None
    return big // small if big % small == 0 and big // small > 1 else None


def _ranks(events: list[HangEvent]) -> str:
    rs = sorted({e.rank for e in events if e.rank is not None})
    if not rs:
        return "unknown rank"
    shown = ", ".join(str(r) for r in rs[:_SHOWN]) + (f" (+{len(rs) - _SHOWN} more)" if len(rs) > _SHOWN else "")
    return f"rank{'s' if len(rs) > 1 else ''} {shown}"


def _pg_text(ev: HangEvent) -> str:
    """ "process group 2 (dp_shard, GUID 5)" """
    pg_id, _, desc = ev.pg.partition("(")
    extra = [x for x in (desc.rstrip(")"), f"GUID {ev.pg_guid}" if ev.pg_guid else "") if x]
    if not pg_id and not extra:
        return ""
    return "process group" + (f" {pg_id}" if pg_id else "") + (f" ({', '.join(extra)})" if extra else "")


def _desc(ev: HangEvent, mixed: bool = False) -> str:
    desc = "collectives" if mixed else ev.op or "collective"
    if ev.seq is not None:
        desc += f" SeqNum={ev.seq}"
    if ev.timeout_ms is not None:
        desc += f" (timeout {ev.timeout_ms} ms" + (f", ran {ev.ran_ms} ms)" if ev.ran_ms is not None else ")")
    return desc


def _first(pool: list[HangEvent]) -> HangEvent:
    """The lowest sequence number (then the lowest rank): where the ranks parted."""
    with_seq = [e for e in pool if e.seq is not None]
    if not with_seq:
        return pool[0]
    return min(with_seq, key=lambda e: (cast(int, e.seq), e.rank is None, e.rank or 0))


@dataclass
class _Log:
    """The log's events by kind, and the facts the findings fill in."""

    tl: TorchLog
    timeouts: list[HangEvent]  # watchdog timeouts, their status lines folded in
    facts: dict[str, Any]

    def kind(self, k: str) -> list[HangEvent]:
        return [e for e in self.tl.hang.events if e.kind == k]

    @property
    def log(self) -> HangLog:
        return self.tl.hang


def _rank_fact(lg: _Log, events: list[HangEvent]) -> None:
    """The rank of a finding's first event, unless a collective timeout named one already."""
    if lg.facts.get("rank") is None:
        lg.facts["rank"] = events[0].rank


def _never_entered(lg: _Log, first: HangEvent) -> list[HangEvent]:
    """Ranks whose dump signal shows every collective they enqueued completed, below the stuck one:
    they never entered it (the dump signal reports the default group, so only that group compares)."""
    if first.seq is None or first.group_key not in ("", "0"):
        return []
    stuck = {e.rank for e in lg.timeouts}
    return [d for d in lg.kind("dump_signal") if d.last_enqueued is not None and d.rank not in stuck
            and d.last_enqueued == d.last_completed and d.last_enqueued < first.seq]


def _early_remedy(ctx: CheckContext, first: HangEvent) -> str:
    early = ctx.profile.get("hang.early_seq")
    if first.seq is not None and isinstance(early, int) and first.seq <= early:
        return (f"SeqNum {first.seq}: the job had barely started, so a longer timeout cannot help: a rank never "
                "joined (crashed, hung at start-up, or cannot reach the others); " + REMEDY_HANG)
    return REMEDY_HANG


def _timeout_facts(lg: _Log, pool: list[HangEvent], first: HangEvent) -> None:
    with_seq = sorted({e.seq for e in pool if e.seq is not None})
    lg.facts.update({"op": first.op or None, "seq": first.seq, "timeout_ms": first.timeout_ms,
                     "ran_ms": first.ran_ms, "rank": first.rank, "pg": first.pg or None,
                     "pg_guid": first.pg_guid or None, "group_size": group_size(first),
                     "ranks": sorted({e.rank for e in pool if e.rank is not None}), "seqs": with_seq})


def _one_group(ctx: CheckContext, lg: _Log, pool: list[HangEvent], f: Findings) -> None:
    first = _first(pool)
    _timeout_facts(lg, pool, first)
    at_first = [e for e in pool if e.seq == first.seq]
    named = next((e for e in at_first if e.group_key), first)
    lg.facts.update(pg=named.pg or None, pg_guid=named.pg_guid or None)
    where = f" of {_pg_text(named)}" if _pg_text(named) else ""
    size = group_size(first)
    label = "NCCL watchdog timeout" if lg.timeouts else "NCCL watchdog failure (error or timeout)"
    mixed = len({e.op.upper() for e in at_first if e.op}) > 1
    summary = f"{label}: {_desc(first, mixed)} on {_ranks(at_first)}{where}" + (f" ({size} ranks in the group)"
                                                                                  if size else "")
    ev = [e.line for e in at_first[:_QUOTE]]
    others = [e for e in pool if e.seq != first.seq]
    if others:
        seqs = sorted({e.seq for e in others if e.seq is not None})
        summary += f"; {len(others)} more timeout line(s) at later/other SeqNum {', '.join(map(str, seqs[:_FEW]))}"
        ev += [e.line for e in others[:_FEW]]
    absent = _never_entered(lg, first)
    if absent:
        summary += (f"; {_ranks(absent)} completed every collective it enqueued (last "
                    f"{absent[0].last_enqueued}) and never entered it")
        lg.facts["never_entered"] = sorted({e.rank for e in absent if e.rank is not None})
        ev += [e.line for e in absent[:_FEW]]
    ev += [e.line for e in lg.kind("nccl_status") if e.seq == first.seq][:_FEW] + lg.log.some_failed[:_FEW]
    code = "hang.watchdog/collective-timeout" if lg.timeouts else "hang.watchdog/watchdog-failure"
    f.add(code, summary, ev, _early_remedy(ctx, first))
    _ops_differ(lg, at_first, f)


def _ops_differ(lg: _Log, at_seq: list[HangEvent], f: Findings) -> None:
    """Ranks of one process group stuck at the same SeqNum in different collectives: they called
    different collectives at the same point (NCCL matches them by order only)."""
    by_op: dict[str, list[HangEvent]] = {}
    for e in at_seq:
        if e.op:
            by_op.setdefault(e.op.upper(), []).append(e)
    if len(by_op) < 2:
        return
    lg.facts["ops_at_seq"] = {op: sorted({e.rank for e in evs if e.rank is not None}) for op, evs in by_op.items()}
    seq = at_seq[0].seq
    f.add("hang.watchdog/timeouts-differ-in-collective",
          f"ranks at SeqNum {seq} wait in different collectives: "
          + "; ".join(f"{_ranks(evs)} in {op}" for op, evs in sorted(by_op.items())),
          [evs[0].line for _, evs in sorted(by_op.items())],
          "an application bug, not the hardware: the ranks issued different collectives at the same point (a "
          "rank-dependent code path, a collective inside a condition, uneven data); NCCL pairs collectives by order, "
          "so the job hangs there on any cluster")


def _groups(pool: list[HangEvent]) -> dict[str, list[HangEvent]]:
    """The events by process group. A line that names no group (its rank printed no status line)
    joins the one named group stuck on the same collective (SeqNum and op)."""
    out: dict[str, list[HangEvent]] = {}
    for e in pool:
        out.setdefault(e.group_key, []).append(e)
    for e in out.pop("", []):
        same = [k for k, evs in out.items() if any(x.seq == e.seq and x.op == e.op for x in evs)]
        out.setdefault(same[0] if len(same) == 1 else "", []).append(e)
    return out


def _several_groups(lg: _Log, groups: dict[str, list[HangEvent]], f: Findings) -> None:
    parts, ev, listing = [], [], []
    for key in sorted(groups, key=lambda k: (not k, len(k), k)):
        first = _first(groups[key])
        parts.append(f"{_desc(first)} on {_ranks([e for e in groups[key] if e.seq == first.seq])} "
                     f"({_pg_text(first) or 'unnamed group'})")
        ev += [e.line for e in groups[key][:_FEW]]
        listing.append({"group": key, "pg": first.pg or None, "pg_guid": first.pg_guid or None, "op": first.op or None,
                        "seq": first.seq, "ranks": sorted({e.rank for e in groups[key] if e.rank is not None})})
    lg.facts["groups"] = listing
    f.add("hang.watchdog/several-groups-stuck",
          f"NCCL watchdog timeouts in {len([k for k in groups if k])} process groups: " + "; ".join(parts), ev,
          _REMEDY_GROUPS)


def _timeouts(ctx: CheckContext, lg: _Log, f: Findings) -> None:
    pool = lg.timeouts or lg.kind("nccl_status")
    if not pool:
        return
    groups = _groups(pool)
    named = {k: v for k, v in groups.items() if k}
    if len(named) > 1:
        _timeout_facts(lg, pool, _first(pool))
        _several_groups(lg, groups, f)
    else:
        _one_group(ctx, lg, pool, f)


def _dump_signals(lg: _Log, f: Findings) -> None:
    """Dump signals, when no timeout line says more: a collective timed out here or on another rank."""
    dumps = lg.kind("dump_signal")
    if not dumps or lg.timeouts or lg.kind("nccl_status"):
        return
    local = [d for d in dumps if d.peer == "local"]
    d = (local or dumps)[0]
    state = (f" (last enqueued work {d.last_enqueued}, last completed {d.last_completed})"
             if d.last_enqueued is not None else "")
    lg.facts.update(rank=d.rank, last_enqueued=d.last_enqueued, last_completed=d.last_completed)
    if local:
        f.add("hang.watchdog/collective-timeout", f"NCCL watchdog: a collective timed out on {_ranks(local)}{state}",
              [x.line for x in local[:_FEW]], REMEDY_HANG)
        return
    source = d.peer if d.peer.isdigit() else ""
    lg.facts["timed_out_rank"] = int(source) if source else None
    f.add("hang.watchdog/remote-timeout",
          f"NCCL watchdog: {_ranks(dumps)} stopped on a collective timeout reported by "
          f"{'rank ' + source if source else 'another rank'}{state}",
          [x.line for x in dumps[:_FEW]],
          "this rank was taken down because another rank's collective timed out: read the log of the rank named "
          "(and of any rank whose last completed work is behind the others'); " + REMEDY_HANG)


def _heartbeat(lg: _Log, f: Findings) -> None:
    beats = lg.kind("heartbeat")
    if not beats:
        return
    # a line that names its rank says more than a launcher's tag on a line that names none
    beats = [e for e in beats if e.group_rank is not None] or beats
    _rank_fact(lg, beats)
    stuck = next((e.timeout_ms for e in beats if e.timeout_ms is not None), None)
    lg.facts["heartbeat_timeout_ms"] = stuck
    f.add("hang.watchdog/heartbeat-timeout",
          f"the NCCL watchdog thread of {_ranks(beats)} was stuck"
          + (f" for {stuck // 1000} s" if stuck is not None else "")
          + " (heartbeat monitor): a CUDA/NCCL call blocked it and the process was terminated",
          [e.line for e in beats[:_FEW]], _REMEDY_HEARTBEAT)


def _desync(lg: _Log, f: Findings) -> None:
    events = lg.kind("desync")
    lagging = [e for e in events if e.ranks]
    if not lagging:
        return
    parts = []
    for e in lagging:
        ranks = ", ".join(map(str, e.ranks))
        if e.message == "never joined":
            parts.append(f"rank(s) {ranks} never joined any collective")
        elif e.message == "did not join":
            parts.append(f"rank(s) {ranks} did not join collective #{e.seq}")
        else:
            parts.append(f"rank(s) {ranks} joined but did not finish collective #{e.seq}")
    lg.facts["lagging_ranks"] = sorted({r for e in lagging for r in e.ranks})
    f.add("hang.watchdog/desync-report", "desync report: " + "; ".join(parts), [e.line for e in events[:_QUOTE]],
          "the desync report names the lagging ranks: read their logs and py-spy stacks first (a rank that never "
          "joined crashed or hung before the collective; one that joined but did not finish is stuck in NCCL: "
          "check its GPU and NIC)")


def _mismatch(lg: _Log, f: Findings) -> None:
    events = lg.kind("mismatch")
    if not events:
        return
    e = events[0]
    lg.facts["mismatch_ranks"] = e.ranks
    f.add("hang.watchdog/collective-mismatch",
          f"ranks run different collectives: rank {e.rank} runs {e.op or 'a collective'}"
          + (f" SequenceNumber={e.seq}" if e.seq is not None else "") + (f", {e.message}" if e.message else ""),
          [x.line[:_LINE] for x in events[:_FEW]],
          "an application bug, not the hardware: the ranks issued different collectives (or sizes) at the same "
          "point (a rank-dependent code path, uneven data, a collective inside a condition); the job hangs or "
          "fails there on any cluster")


def _barrier(lg: _Log, f: Findings) -> None:
    events = lg.kind("monitored_barrier")
    if not events:
        return
    failed = sorted({r for e in events for r in e.ranks})
    lg.facts["barrier_failed_ranks"] = failed
    what = (f"rank(s) {', '.join(map(str, failed))} failed to pass monitoredBarrier in {events[0].timeout_ms} ms"
            if failed else f"rank {events[0].rank} timed out in monitoredBarrier after {events[0].timeout_ms} ms")
    f.add("hang.watchdog/monitored-barrier", what, [e.line for e in events[:_FEW]],
          "the named ranks never reached the barrier: they crashed or hang elsewhere; read their logs and stacks")


def _nccl_errors(lg: _Log, f: Findings) -> None:
    errors = lg.kind("nccl_error")
    if not errors:
        return
    _rank_fact(lg, errors)
    lg.facts["nccl_errors"] = sorted({e.message for e in errors})[:_QUOTE]
    f.add("hang.watchdog/nccl-error", f"NCCL error on {_ranks(errors)}: {errors[0].message[:_MSG]}",
          [e.line[:_LINE] for e in errors[:_QUOTE]],
          "a peer exited or the network failed: check the other ranks' logs for the first failure, and the IB "
          "ports (ibstat) and Xids of their nodes; run with NCCL_DEBUG=INFO for the failing call")


def _secondary(lg: _Log, f: Findings) -> None:
    """An aborted communicator or a remote error only: the failure happened elsewhere."""
    aborted, remote = lg.kind("comm_aborted"), lg.kind("remote_error")
    if f or not (aborted or remote):
        return
    if aborted:
        reason = next((e.message for e in aborted if e.message), "")
        _rank_fact(lg, aborted)
        f.add("hang.watchdog/communicator-aborted", f"NCCL communicator aborted on {_ranks(aborted)}"
              + (f": {reason[:_MSG]}" if reason else ""), [e.line[:_LINE] for e in aborted[:_FEW]],
              "a consequence of a failure elsewhere (another rank's timeout or error): find the first failure in "
              "the other ranks' logs")
        return
    f.add("hang.watchdog/remote-error", f"{_ranks(remote)} saw an error reported by rank {remote[0].peer}",
          [e.line for e in remote[:_FEW]], f"read rank {remote[0].peer}'s log for the error it reported")


def _watchdog_exception(lg: _Log, f: Findings) -> None:
    events = lg.kind("watchdog_exception")
    if not events:
        return
    _rank_fact(lg, events)
    f.add("hang.watchdog/watchdog-exception",
          f"the NCCL watchdog of {_ranks(events)} ended on an exception: {events[0].message[:_MSG]}",
          [e.line[:_LINE] for e in events[:_FEW]],
          "the watchdog stopped the process on this error: a CUDA error here is this GPU's fault (check the "
          "node's kernel log for Xids) or a kernel bug; read the first exception in the rank's log")


def _gloo(lg: _Log, f: Findings) -> None:
    gloo_t = [e for e in lg.kind("gloo_timeout") if e.op]
    gloo_c = lg.kind("gloo_peer_closed")
    if not (gloo_t or gloo_c):
        return
    first_t = gloo_t[0] if gloo_t else None
    if first_t is not None:
        lg.facts.update(op=first_t.op, timeout_ms=first_t.timeout_ms)
    lg.facts.update(rank=(first_t or gloo_c[0]).rank, peers_closed=sorted({e.peer for e in gloo_c}))
    parts = []
    if first_t is not None:
        parts.append(f"gloo {first_t.op} timed out after {first_t.timeout_ms} ms on {_ranks(gloo_t)}")
    code, rem = "hang.watchdog/gloo-timeout", REMEDY_HANG
    if gloo_c:
        parts.append(f"peer(s) {', '.join(sorted({e.peer for e in gloo_c}))} closed the connection")
        code = "hang.watchdog/gloo-peer-closed"
        rem = (f"the process at {gloo_c[0].peer} exited or crashed first: read its log (OOM, exception, "
               "node failure); the timeouts on other ranks follow from it")
    ev = [e.line for e in (gloo_c + gloo_t)][:_QUOTE]
    first_exit = next((x for x in lg.tl.exits if x.first), None)
    if first_exit is not None:
        parts.append(f"process {first_exit.process} exited first (exit code {first_exit.code})")
        ev += [x.line for x in lg.tl.exits[:_FEW]]
        lg.facts["first_exit"] = {"process": first_exit.process, "code": first_exit.code}
        rem = (f"process {first_exit.process} exited on its own with code {first_exit.code}; the others lost their "
               "connection to it: read its log for the error that ended it")
    elif lg.tl.p2p_calls and gloo_c and not gloo_t:
        parts.append("inside a point-to-point receive: the sending process exited before the receive completed")
        ev += lg.tl.p2p_calls[:_FEW]
        code = "hang.watchdog/p2p-sender-exited"
        rem = ("an application bug in point-to-point communication, not the network: the sender returned (or "
               "crashed) before its matching send completed; keep both processes alive until every send/recv "
               "pair has completed (wait on the requests, add a barrier before exit)")
    f.add(code, "; ".join(parts), ev, rem)


def _gloo_enforce(lg: _Log, f: Findings) -> None:
    events = lg.kind("gloo_enforce")
    if not events:
        return
    e = events[0]
    _rank_fact(lg, events)
    sizes = "preamble.length" in e.message
    f.add("hang.watchdog/gloo-error", f"gloo check failed on {_ranks(events)}: {e.message[:_MSG]}",
          [x.line[:_LINE] for x in events[:_FEW]],
          "the ranks passed tensors of different sizes to the same collective or send/recv pair: an application "
          "bug, compare the shapes each rank sends" if sizes else
          "gloo's own consistency check failed: read the message; most often the ranks disagree on a collective's "
          "tensors or one rank's process is in a bad state")


def _store(lg: _Log, f: Findings) -> None:
    events = lg.kind("store_failure")
    if not events:
        return
    e = next((x for x in events if "Error: " in x.line), events[0])  # the error raised says most
    lg.facts["store"] = e.message
    f.add("hang.watchdog/store-failure", f"c10d store / rendezvous failure on {_ranks(events)}: {e.message[:_MSG]}",
          [x.line[:_LINE] for x in events[:_FEW]],
          "the ranks never all met at start-up: a rank crashed or hung before init_process_group (read every "
          "rank's log; a GPU that hangs in torch.cuda.set_device blocks its rank), or cannot reach the store "
          "(MASTER_ADDR/MASTER_PORT, a firewall, the interface the address resolves to, a port another job holds)")


def _store_gone(lg: _Log, f: Findings) -> None:
    """The store's server went away while ranks ran, and nothing else failed."""
    events = lg.kind("store_gone")
    if not events or f:
        return
    why = next((e.message for e in events if e.message), "")
    f.add("hang.watchdog/store-gone", f"{_ranks(events)} lost the c10d store (its server process went away)"
          + (f": {why[:_MSG]}" if why else ""), [x.line[:_LINE] for x in events[:_FEW]],
          "the process that hosts the store (rank 0's, or the launcher's) exited while these ranks still ran: read "
          "its log for why it ended first; at the end of a job that finished this is only shutdown order (call "
          "destroy_process_group() on every rank before exiting)")


def _some_failed(lg: _Log, f: Findings) -> None:
    if lg.log.some_failed and not f:
        f.add("hang.watchdog/some-failed", "NCCL operations failed or timed out (no detail line in the log)",
              lg.log.some_failed[:_FEW], REMEDY_HANG)


def _worker_failed(lg: _Log, f: Findings) -> None:
    """torchrun's failure table, the elastic agent's lines, multiprocessing's exits (checks.hang_elastic)."""
    grade_workers(lg.tl, f, lg.facts)


_LOG_GRADERS = (_heartbeat, _desync, _mismatch, _barrier, _nccl_errors, _watchdog_exception, _gloo, _gloo_enforce, _store,
                _dump_signals, _secondary, _some_failed, _worker_failed, _store_gone)


def grade_log(ctx: CheckContext, tl: TorchLog, f: Findings, facts: dict[str, Any]) -> None:
    """The findings of a training log added to `f`, its facts to `facts`."""
    lg = _Log(tl, merge_status(tl.hang), facts)
    _timeouts(ctx, lg, f)
    for grader in _LOG_GRADERS:
        grader(lg, f)
    facts["events"] = [e.to_dict() for e in tl.hang.events]


def _ok_summary(tl: TorchLog | None, fr: FrText | None, ras: RasStatus | None) -> str:
    """What the inputs that were read say when nothing was found."""
    parts = []
    if tl is not None and tl.recognised:
        parts.append(elastic_ok_summary(tl.elastic) or "no collective timeout or job failure in the log")
    if fr is not None and fr.recognised:
        parts.append(fr_ok_summary(fr))
    if ras is not None and ras.recognised:
        parts.append(ras_ok_summary(ras))
    return "; ".join(parts) or "no collective timeout or job failure in the log"


def grade_watchdog(ctx: CheckContext) -> Result:
    tl: TorchLog | None = ctx.facts("watchdog-log")
    fr: FrText | None = ctx.facts("fr-trace")
    ras: RasStatus | None = ctx.facts("nccl-ras")
    if tl is None and fr is None and ras is None:
        return ctx.finding("hang.watchdog/no-input", "no training log, flight-recorder output or NCCL RAS status "
                                                     "to grade")
    f = Findings()
    facts: dict[str, Any] = {"op": None, "seq": None, "timeout_ms": None, "ran_ms": None, "rank": None}
    if tl is not None:
        grade_log(ctx, tl, f, facts)
    if fr is not None:
        grade_fr(fr, f, facts)
    if ras is not None:
        grade_ras(ras, f, facts)
    recognised = any(x is not None and x.recognised for x in (tl, fr, ras))
    if not f and not recognised:
        return ctx.finding("hang.watchdog/not-recognised",
                           "not recognised: expected PyTorch watchdog, gloo, store or torchrun failure lines, "
                           "fr_trace findings, or an NCCL RAS status (ncclras)", facts=facts)
    return f.result(ctx, _ok_summary(tl, fr, ras), facts)


register(Check(
    id="hang.watchdog",
    title="Collective timeouts and job failures",
    grade=grade_watchdog,
    probes=(),
    inputs=("watchdog-log", "fr-trace", "nccl-ras"),
    catches="NCCL watchdog and gloo collective timeouts (op, SeqNum, timeout, ranks, process group, group size), "
            "process groups stuck on different collectives, ranks timed out at one SeqNum in different collectives, "
            "the watchdog's heartbeat monitor, desync reports, collective mismatches, monitored barriers, NCCL errors, "
            "c10d store timeouts, a rank that lost the store while it ran, torchrun failures, the "
            "process that exited first, point-to-point receives whose sender exited, ranks the flight recorder "
            "shows missing or mismatched, processes NCCL RAS finds dead or silent and ranks whose operation "
            "counts differ",
    node_local=False,
    in_run=False,
))

__all__ = ["grade_log", "grade_watchdog", "group_size"]
