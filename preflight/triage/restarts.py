"""A job its launcher restarted (torchrun --max-restarts): one incident per failed attempt.

A run directory outlives the processes that wrote it. After a restart it holds the records of
every attempt at once: the events files grow (one `runtime.exit` per process), the hang and
crash records of the failed attempt stay beside the heartbeats of the new one. Read as one job,
a stopped rank that the restarted job ran cleanly looks clean, and its peers' hang records
name nobody.

The attempts are told apart by the pids the records name: each process's `runtime.exit` event,
hang record, crash record and heartbeat name its own pid, a hang record its peers' pids; in
time order, a rank seen with another pid than before has started again, so a new attempt
began. A record that names its pid belongs to its process's attempt; any other record (an
event, a flight-recorder dump) to the attempt its time falls in, the border between two
attempts half-way between the last sighting of one and the first of the next. Logs carry no
reliable time and are read with the last attempt only. Each failed attempt is attributed by
the same rules as a job that was never restarted (`attribute.decide`); the verdict is the
latest incident's, with every incident named (the latest last), and says how the job went on:
ended cleanly, training again, or failed again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from preflight.triage.attribute import Facts, Verdict, Window, decide, read_bundle_facts
from preflight.triage.collect import Bundle

CLEAN = ("clean", "preempted")


@dataclass
class Attempt:
    """The processes of one attempt: (rank, pid) pairs, when they were seen, how they ended."""

    procs: set[tuple[int, int]] = field(default_factory=set)
    first: float = 0.0
    last: float = 0.0
    ends: list[dict[str, Any]] = field(default_factory=list)


def attempts(facts: Facts) -> list[Attempt]:
    """The attempts of the job, in order.

    Every record that names a rank's pid (its runtime.exit event, hang record, crash record,
    heartbeat, or a peer's hang record naming it) is a sighting of that process at a time; in
    time order, a rank seen with another pid than the one it had in the current attempt starts
    the next attempt (a launcher restarts every rank together, after all of the last attempt
    ended)."""
    sightings = sorted(set(facts.sightings), key=lambda x: x[2])
    out: list[Attempt] = []
    cur: Attempt | None = None
    pid_of: dict[int, int] = {}
    for rank, pid, t in sightings:
        if cur is None or pid_of.get(rank, pid) != pid:
            cur = Attempt(first=t, last=t)
            out.append(cur)
            pid_of = {}
        pid_of[rank] = pid
        cur.procs.add((rank, pid))
        cur.last = t
    where = {p: k for k, a in enumerate(out) for p in a.procs}
    for e in facts.ends:
        k = where.get((e["rank"], e["pid"])) if e["pid"] is not None else None
        if k is not None and all(x["pid"] != e["pid"] or x["rank"] != e["rank"] for x in out[k].ends):
            out[k].ends.append(e)
    return out


def decide_attempts(bundle: Bundle, facts: Facts, since: datetime | None = None) -> Verdict | None:
    """The verdict of a restarted job (None when the job was not restarted)."""
    runs = attempts(facts)
    n = len(runs)
    if n < 2:
        return None
    # between two attempts: half-way from the last sighting of one to the first of the next
    bounds = [(a.last + b.first) / 2 for a, b in zip(runs, runs[1:], strict=False)]
    pid_attempt = {p: k for k, a in enumerate(runs) for p in a.procs}

    def read(k: int) -> Facts:
        last = k == n - 1
        w = Window(attempt=k, lo=bounds[k - 1] if k else None, hi=None if last else bounds[k],
                   pid_attempt=pid_attempt, logs=last, live=last)
        fk = read_bundle_facts(bundle, None, since, window=w)
        fk.node_faults = facts.node_faults
        return fk

    known = set(facts.ranks) | facts.world
    final = runs[-1].ends
    state = "failed again"
    if {e["rank"] for e in final} >= known and all(e["how"] in CLEAN for e in final):
        state = "ended cleanly"
    last_facts = read(n - 1) if state != "ended cleanly" else None
    if last_facts is not None and not _failed(last_facts):
        state = "training again"
    failed = list(range(n - 1)) + ([n - 1] if state == "failed again" else [])
    verdicts = [(k, decide(last_facts if k == n - 1 and last_facts is not None else read(k), bundle.job))
                for k in failed]
    # an attempt that ended cleanly (preempted, then requeued into the same run directory) is no incident
    verdicts = [(k, v) for k, v in verdicts if v.category != "none"]
    if not verdicts:
        return None
    if len(verdicts) == 1 and verdicts[0][0] == n - 1:
        return verdicts[0][1]  # only the last attempt failed: a job attributed as if it had run once
    recovery = {"restarts": n - 1, "attempts": n, "recovered": state != "failed again", "state": state,
                "last_step": max((e["step"] for e in final if isinstance(e.get("step"), int)), default=None)
                if state == "ended cleanly" else None}
    return combine(verdicts, recovery, sorted(known))


def _failed(facts: Facts) -> bool:
    """Any failure recorded in an attempt still under way (else it is training again)."""
    return any(s.primary() or s.secondary() or s.reported or s.hang_exit() or s.outside_signal()
               or (s.end is not None and s.end.get("how") not in CLEAN) for s in facts.ranks.values())


def _incident(k: int, v: Verdict) -> dict[str, Any]:
    return {"attempt": k, "category": v.category, "summary": v.summary, "culprits": v.culprits,
            "first_failure": v.first_failure, "collective": v.collective,
            "time": v.first_failure.get("time") if v.first_failure else None}


def _attempt_name(k: int) -> str:
    return "the first run" if k == 0 else f"after restart {k}"


def _merge_culprits(verdicts: list[tuple[int, Verdict]]) -> list[dict[str, Any]]:
    """Every incident's culprits, the latest incident's last."""
    out: dict[str, list[int]] = {}
    for _, v in verdicts:
        for c in v.culprits:
            node = str(c["node"])
            ranks = out.pop(node, [])
            out[node] = sorted(set(ranks) | set(c["ranks"]))
    return [{"node": n, "ranks": rs} for n, rs in out.items()]


def _went_on(recovery: dict[str, Any], known: list[int]) -> str:
    n = recovery["restarts"]
    restarted = f"the launcher restarted it {'once' if n == 1 else f'{n} times'}"
    if recovery["state"] == "ended cleanly":
        step = f" at step {recovery['last_step']}" if recovery.get("last_step") is not None else ""
        return f"the job recovered: {restarted} and every rank ({len(known)}) then ended cleanly{step}"
    if recovery["state"] == "training again":
        return f"the job recovered: {restarted} and it is training again (restart {n} under way, no failure recorded)"
    return f"{restarted} and it failed again"


def combine(verdicts: list[tuple[int, Verdict]], recovery: dict[str, Any], known: list[int]) -> Verdict:
    """One verdict for a restarted job: the latest incident's, every incident named."""
    k_last, latest = verdicts[-1]
    went_on = _went_on(recovery, known)
    lines = [f"incident {i} of {len(verdicts)}, {_attempt_name(k)}"
             + (f" ({v.first_failure['iso']})" if v.first_failure.get("iso") else "") + f": [{v.category}] {v.summary}"
             for i, (k, v) in enumerate(verdicts, 1)]
    summary = f"{latest.summary}; {went_on}"
    if len(verdicts) > 1:
        summary += f" ({len(verdicts)} incidents, one per failed attempt, the latest last in the evidence)"
    action = latest.action
    if recovery["recovered"]:
        who = "; ".join(f"rank{'s' if len(c['ranks']) > 1 else ''} {', '.join(map(str, c['ranks']))} on {c['node']}"
                        for c in _merge_culprits(verdicts)) or "the ranks named above"
        action = (f"nothing to restart: {went_on}. Follow up on {who}: its stacks and records (hang-rank*.json, "
                  "crash-rank*.json), its node's health (`preflight run` on it, kernel log, GPU health); drain the "
                  "node if it is named again")
    base = {k: v for k, v in latest.to_dict().items()
            if k in ("first_failure", "ranks", "node_faults", "job", "input_errors", "collective")}
    return Verdict(category=latest.category, summary=summary, culprits=_merge_culprits(verdicts),
                   evidence=[went_on, *lines, *latest.evidence], action=action,
                   incidents=[_incident(k, v) for k, v in verdicts], recovery=recovery, **base)
