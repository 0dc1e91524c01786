"""hang.watchdog, the NCCL RAS part: what `ncclras` (NCCL 2.24+) says about a running job, from
the facts of `preflight.parsers.ras`.

RAS answers from every process of the job: a process that no longer answers (INCOMPLETE) or that
RAS gave up on (DEAD) is stopped, hung or gone; a communicator whose ranks report errors or an
abort failed; ranks whose operation counts of one collective differ have parted: the ones ahead
wait in a collective the others never launched. Status differences while a communicator is being
created or torn down are transient (NCCL's RAS guide says so): a warning to query again.
"""

from __future__ import annotations

from typing import Any

from preflight.findings import Findings
from preflight.parsers.ras import RasStatus

_SHOWN = 8  # pragma: no mutate - ranks or processes named in a summary before "+N more", a display limit
_FEW = 6  # pragma: no mutate - evidence lines quoted per finding, a display limit

REMEDY_GONE = ("the processes named stopped answering (crashed, hung in a system call, stopped, or their node is "
               "down): read their logs and their node's kernel log (Xid, OOM killer), py-spy dump them if they "
               "still run; restart the job without that node if it is at fault")
REMEDY_COUNTS = ("the ranks parted at that collective: the ranks ahead wait in it for ranks that never launched it. "
                 "Query ncclras again: counts that still differ mean the job is stuck (counts that moved on were a "
                 "snapshot of a busy job). Find where the ranks behind are (py-spy dump, their logs: a data loader, "
                 "another communicator, a crash) and whether the application issues this collective on every rank")
REMEDY_ERRORS = ("the ranks named hold an NCCL error (a peer that died, a network error, a CUDA error): read those "
                 "ranks' logs (NCCL_DEBUG=INFO) and their node's kernel log; the first rank to fail is the cause")
REMEDY_STATUS = ("ranks disagree on a communicator's state while it is being created or torn down: query ncclras "
                 "again; a state that does not change means a rank is stuck in init or finalize (read its stack)")
_EXPLAIN = {"ahead": "the ranks ahead launched a collective the others never joined and wait in it",
            "behind": "the ranks behind never launched the collective the others wait in",
            "split": "the ranks parted there"}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 'es' if word.endswith('s') else 's'}"


def _names(items: list[str]) -> str:
    return ", ".join(items[:_SHOWN]) + (f" (+{len(items) - _SHOWN} more)" if len(items) > _SHOWN else "")


def _by_node(ranks: list[dict[str, Any]]) -> str:
    """ "ranks 12, 13 on node 10.1.7.22; rank 40 on node 10.1.7.23" """
    nodes: dict[str, list[int]] = {}
    for r in ranks:
        if r.get("rank") is not None:
            nodes.setdefault(r.get("node") or "", []).append(r["rank"])
    parts = []
    for node, rs in nodes.items():
        rs = sorted(set(rs))
        where = f" on node {node}" if node else ""
        parts.append(f"rank{'s' if len(rs) > 1 else ''} {_names([str(x) for x in rs])}{where}")
    return "; ".join(parts)


def _process(p: dict[str, Any]) -> str:
    gpus = str(p["gpus"])
    return f"process {p['pid']} on node {p['node']} (GPU{'s' if ',' in gpus else ''} {gpus})"


def _quoted(ras: RasStatus, *keys: str, kind: str = "") -> list[str]:
    """The evidence lines of the sections `keys` ("DEAD", "#0-1 MISMATCH AllReduce") and of every
    communicator's section of `kind` ("ERROR" takes "#0-1 ERROR", "#1-0 ERROR" ...)."""
    picked = [k for k in ras.quoted if k in keys or (kind and k.startswith("#") and k.endswith(" " + kind))]
    return [ln for k in picked for ln in ras.quoted[k]]


def _table_rows(ras: RasStatus, error: str) -> list[dict[str, Any]]:
    return [g for g in ras.groups if error in g["errors"].split(",")]


def _dead(ras: RasStatus, f: Findings, facts: dict[str, Any]) -> None:
    dead = list(ras.dead_processes)
    dead += [{"pid": e["pid"], "node": e["node"], "gpus": e["gpus"]} for e in ras.events if e["event"] == "PEER_DEAD"
             and e["pid"] is not None and not any(d["pid"] == e["pid"] for d in dead)]
    unnamed = [e for e in ras.events if e["event"] == "PEER_DEAD" and e["pid"] is None]
    n = max(ras.dead_count, len(dead) + len(unnamed))
    if not n:
        return
    facts["dead_processes"] = dead
    named = [_process(d) for d in dead] + [f"the process at {e['node']}" for e in unnamed]
    f.add("hang.watchdog/ras-dead",
          f"NCCL RAS: {_plural(n, 'job process')} considered dead (unreachable via the RAS network)"
          + (f": {_names(named)}" if named else ""),
          _quoted(ras, "DEAD") + [e["text"] for e in ras.events if e["event"] == "PEER_DEAD"],
          REMEDY_GONE)


def _incomplete(ras: RasStatus, f: Findings, facts: dict[str, Any]) -> None:
    ranks = [r for r in ras.ranks if r["section"] == "INCOMPLETE"]
    rows = _table_rows(ras, "INCOMPLETE")
    if not (ras.missing_count or ras.missing_processes or ras.incomplete or ranks or rows):
        return
    parts = []
    if ras.missing_count or ras.missing_processes:
        n = max(ras.missing_count, len(ras.missing_processes))
        listed = [_process(p) for p in ras.missing_processes]
        parts.append(f"no answer from {_plural(n, 'job process')}" + (f": {_names(listed)}" if listed else ""))
    for inc in ras.incomplete:
        mine = [r for r in ranks if r["comm"] == inc["comm"]]
        parts.append(f"communicator {inc['comm']} misses {_plural(inc['missing'], 'rank')}"
                     + (f" ({_by_node(mine)})" if mine else ""))
    if not parts:
        parts.append(f"communicator group(s) {', '.join(str(g['group']) for g in rows)} INCOMPLETE (the details are "
                     "not in the capture)")
    facts["missing_ranks"] = sorted({r["rank"] for r in ranks if r["rank"] is not None})
    facts["missing_processes"] = ras.missing_processes
    f.add("hang.watchdog/ras-incomplete", "NCCL RAS: " + "; ".join(parts),
          _quoted(ras, "INCOMPLETE", kind="INCOMPLETE") + [g["line"] for g in rows], REMEDY_GONE)


def _errors(ras: RasStatus, f: Findings, facts: dict[str, Any]) -> None:
    ranks = [r for r in ras.ranks if r["section"] == "ERROR"]
    rows = _table_rows(ras, "ERROR")
    if not (ras.errors or ranks or rows):
        return
    kinds = [f"{e['kind'].lower()} error{'s' if e['count'] > 1 else ''} on {_plural(e['count'], 'rank')}"
             for e in ras.errors if e["kind"] != "reported"]
    what = "; ".join(kinds) or f"group(s) {', '.join(str(g['group']) for g in rows)} in ERROR"
    by_error = {e: [r for r in ranks if r["error"] == e] for e in dict.fromkeys(r["error"] for r in ranks)}
    who = "; ".join(f"{_by_node(rs)}" + (f": {e}" if e else "") for e, rs in by_error.items())
    facts["error_ranks"] = sorted({r["rank"] for r in ranks if r["rank"] is not None})
    f.add("hang.watchdog/ras-comm-error", f"NCCL RAS: communicator errors ({what})" + (f": {who}" if who else ""),
          _quoted(ras, kind="ERROR") + [g["line"] for g in rows], REMEDY_ERRORS)


def _aborted(ras: RasStatus, f: Findings, facts: dict[str, Any]) -> None:
    ranks = [r for r in ras.ranks if r["status"] == "ABORT"]
    rows = [g for g in ras.groups if g["status"] == "ABORT"]
    counted = [s for s in ras.statuses if s["status"] == "ABORT"]
    if not (ranks or rows or counted):
        return
    n = max(len(ranks), sum(s["count"] for s in counted))
    who = _by_node(ranks) if ranks else (f"{_plural(n, 'rank')}" if n else
                                         f"communicator group(s) {', '.join(str(g['group']) for g in rows)}")
    facts["aborted_ranks"] = sorted({r["rank"] for r in ranks if r["rank"] is not None})
    f.add("hang.watchdog/ras-aborted", f"NCCL RAS: communicator aborted on {who}",
          [ln for ln in _quoted(ras, kind="MISMATCH") if "ABORT" in ln or '"abort_flag": true' in ln]
          + [g["line"] for g in rows],
          "a communicator was aborted (the application's error handling or PyTorch's watchdog after a timeout or "
          "an NCCL error): the job cannot continue on it; find the first failure in the ranks' logs")


def _at(launched: int) -> str:
    return f"at operation {launched}" if launched else "before any operation"


def _side(groups: list[dict[str, Any]], top: dict[str, Any] | None) -> str:
    """Where the other groups of ranks stand against the largest one: ahead, behind, or split."""
    others = [g["launched"] for g in groups if g is not top]
    if top is None or not others:
        return "split"
    if all(n > top["launched"] for n in others):  # pragma: no mutate - the groups' counts differ from the top's
        return "ahead"
    return "behind" if all(n < top["launched"] for n in others) else "split"  # pragma: no mutate - as above


def _mismatch_part(ras: RasStatus, comm: str, op: str) -> tuple[str, dict[str, Any]]:
    groups = sorted((c for c in ras.counts if c["comm"] == comm and c["op"] == op),
                    key=lambda c: (-c["count"], c["launched"]))
    listed = [r for r in ras.ranks if r["comm"] == comm and r["op"] == op and r["launched"] is not None]
    top = groups[0] if groups and (len(groups) == 1 or groups[0]["count"] > groups[1]["count"]) else None
    parts = []
    for g in groups:
        rs = [r for r in listed if r["launched"] == g["launched"]]
        parts.append(f"{_by_node(rs) if rs else _plural(g['count'], 'rank')} {_at(g['launched'])}")
    label = f"{op} operation counts" if op else "operation counts"  # op "collective" before 2.26
    side = _side(groups, top)
    odd = sorted({r["rank"] for r in listed if top is None or r["launched"] != top["launched"]})
    name = f"communicator {comm}" if comm else "a communicator"  # a capture cut above its header
    text = f"{name}'s {label} differ: " + ", ".join(parts) + f": {_EXPLAIN[side]}"
    return text, {"comm": comm, "op": op, "majority": top["launched"] if top else None, "ranks": odd, "side": side}


def _counts(ras: RasStatus, f: Findings, facts: dict[str, Any]) -> None:
    keys = list(dict.fromkeys((c["comm"], c["op"]) for c in ras.counts))
    if not keys:
        return
    parts, detail = [], []
    for comm, op in keys:
        text, d = _mismatch_part(ras, comm, op)
        parts.append(text)
        detail.append(d)
    facts["mismatched"] = detail
    heads = [ln for c in dict.fromkeys(c for c, _ in keys) for ln in ras.quoted.get(f"{c} MISMATCH", [])
             if ln.startswith("#")]  # the communicator's header (the JSON form has none)
    f.add("hang.watchdog/ras-count-mismatch", "NCCL RAS: " + "; ".join(parts),
          heads + _quoted(ras, *(c["where"] for c in ras.counts)), REMEDY_COUNTS)


def _status(ras: RasStatus, f: Findings, facts: dict[str, Any]) -> None:
    ranks = [r for r in ras.ranks if r["status"] and r["status"] != "ABORT"]
    counted = [s for s in ras.statuses if s["status"] != "ABORT"]
    if not (ranks or counted):
        return
    tally = ", ".join(f"{s['count']} {s['status']}" for s in counted)
    singles = "; ".join(f"rank {r['rank']} {r['status']}" for r in ranks if not any(
        s["status"] == r["status"] and s["comm"] == r["comm"] for s in counted))
    facts["status_ranks"] = sorted({r["rank"] for r in ranks if r["rank"] is not None})
    f.add("hang.watchdog/ras-status-mismatch",
          "NCCL RAS: ranks of a communicator differ in state (" + "; ".join(x for x in (tally, singles) if x)
          + "): a communicator being created or torn down",
          _quoted(ras, kind="MISMATCH"), REMEDY_STATUS)


def _mismatch_unread(ras: RasStatus, f: Findings) -> None:
    rows = _table_rows(ras, "MISMATCH")
    if not rows or ras.counts or ras.statuses or any(r["status"] for r in ras.ranks):
        return
    f.add("hang.watchdog/ras-mismatch-cut",
          f"NCCL RAS: communicator group(s) {', '.join(str(g['group']) for g in rows)} report MISMATCH; the details "
          "(Warnings section) are not in the capture", [g["line"] for g in rows],
          "capture the whole ncclras output (the Warnings section names the ranks and the collective), twice a few "
          "seconds apart: counts that do not move mean the job is stuck")


def _warnings(ras: RasStatus, f: Findings) -> None:
    if ras.timeouts:
        f.add("hang.watchdog/ras-gather-timeout",
              f"NCCL RAS: {_plural(ras.timeouts, 'communication timeout')} while gathering communicator data",
              _quoted(ras, "TIMEOUT"),
              "some process answered RAS late or not at all: query again; a process that stays silent is listed "
              "as missing (INCOMPLETE) and after 60 s as DEAD")
    if ras.outlier_nodes or ras.uneven:
        nodes = [f"{o['node']} (processes {', '.join(map(str, o['pids']))})" for o in ras.outlier_nodes]
        f.add("hang.watchdog/ras-uneven-job",
              "NCCL RAS: the job's nodes run different numbers of processes or GPUs"
              + (f"; outlier node(s): {_names(nodes)}" if nodes else ""),
              [ln for ln in ras.lines if ln.startswith("Node ")]
              or ["job summary: processes per node / GPUs per process differ"],
              "compare with the job's launch: a node with fewer processes lost some before RAS saw them, or the "
              "launcher placed them unevenly (a GPU missing on that node, a wrong --nproc_per_node)")


def grade_ras(ras: RasStatus, f: Findings, facts: dict[str, Any]) -> None:
    """The findings of an `ncclras` answer added to `f`, its facts to `facts["ras"]`."""
    sub: dict[str, Any] = {"version": ras.version or None, "job": ras.job or None,
                           "groups": [{k: g[k] for k in ("group", "comms", "ranks_per_comm", "status", "errors")}
                                      for g in ras.groups]}
    for grader in (_dead, _incomplete, _errors, _aborted, _counts, _status):
        grader(ras, f, sub)
    _mismatch_unread(ras, f)
    _warnings(ras, f)
    if ras.client_error:
        f.add("hang.watchdog/ras-no-answer", f"ncclras got no status: {ras.client_error}",
              ras.lines[-_FEW:],
              "run ncclras on a node where the job runs (it connects to localhost:28028, or NCCL_RAS_ADDR), while "
              "the job runs; NCCL_RAS_ENABLE=0 turns RAS off; NCCL 2.24 or later is needed")
    elif ras.no_comms and not f:
        f.add("hang.watchdog/ras-no-communicators", "NCCL RAS: no communicator data collected (no NCCL communicator "
              "exists yet, or any more)", ["No communicator data collected!"],
              "query ncclras while the job's communicators exist (after init, before the job ends)")
    facts["ras"] = sub


def ras_ok_summary(ras: RasStatus) -> str:
    """What a clean RAS answer says."""
    if (ras.events or ras.monitor) and not ras.groups:
        return f"NCCL RAS monitor: {_plural(len(ras.events), 'event')}, no process declared dead"
    job = ras.job
    size = (f"{_plural(job['nodes'], 'node')}, {_plural(job['processes'], 'process')}, {job['gpus']} GPUs; "
            if {"nodes", "processes", "gpus"} <= set(job) else "")
    states = sorted({f"{g['status']} {g['errors']}" for g in ras.groups})
    version = f" ({ras.version})" if ras.version else ""
    return (f"NCCL RAS{version}: {size}{_plural(sum(g['comms'] for g in ras.groups), 'communicator')}, "
            f"{' / '.join(states) or 'no state'}; no missing process, error or mismatch")


__all__ = ["grade_ras", "ras_ok_summary"]
