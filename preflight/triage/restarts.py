"""A run read attempt by attempt: one incident per failed attempt, and where the job stands.

A run directory outlives the processes that wrote it. After a restart it holds the records of
every attempt at once: the events files grow, the hang and crash records of a failed attempt
stay beside the heartbeats of the next. The attempts, their causes and how each ended come from
the story of the run (`preflight.runtime.story`, the run directory's one reader: the starts the
ranks recorded, else the pids their records name). Each failed attempt is then read alone
(`attribute.Window`: a record that names its pid belongs to its process's attempt, any other to
the attempt its time falls in; logs carry no reliable time and are read with the last attempt)
and attributed by the same rules as a job that ran once (`attribute.decide`); where those rules
find less than the story (a rank killed from outside with no launcher log, replay's or the loss
guard's verdict), the story's attempt decides (`attribute.from_story`). The verdict is the
latest incident's, every incident named, with how the job went on: recovered and finished,
recovered and training again, failed, running, preempted.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from preflight.runtime.story import Attempt, Story
from preflight.triage.attribute import Facts, Verdict, Window, decide, from_story, read_bundle_facts
from preflight.triage.collect import Bundle

CLEAN = ("clean", "preempted")


def choose(v: Verdict, a: Attempt | None, facts: Facts, job: dict[str, Any]) -> Verdict:
    """The attempt's verdict: the rules' (richer: collectives, logs, node faults, the kernel's
    OOM lines), unless the story knows more: a judged cause (suspect hardware, bad data), a
    killed rank the rules did not name, or any cause where the rules found none."""
    if a is None or not a.failed() or v.category == "hardware":
        return v
    named = sorted({r for c in v.culprits for r in c["ranks"]})
    if a.cause in ("suspect hardware", "bad data"):
        return from_story(a, facts, job, v)
    # every rank ended by a signal it caught (scancel, a time limit: SIGTERM to all) names no culprit
    everyone = a.cause == "killed" and a.signal != "SIGKILL" and set(a.culprits) >= set(a.members)
    if everyone:
        return v
    if a.cause == "killed" and named and set(named) < set(a.culprits):
        return v  # several ranks left no record; the rules (the launcher's line, the OOM killer's) single one out
    if a.cause == "killed" and (v.category == "unknown" or (a.culprits and named != a.culprits)):
        return from_story(a, facts, job, v)
    if v.category == "unknown" and a.cause not in ("unknown", "none"):
        return from_story(a, facts, job, v)
    return v


def decide_attempts(bundle: Bundle, facts: Facts, story: Story, since: datetime | None = None) -> Verdict | None:
    """The verdict of a run of several attempts (None when it ran once)."""
    runs = story.attempts
    n = len(runs)
    if n < 2:
        return None

    pid_attempt = {p: i - 1 for p, i in story.pid_attempt.items()}  # the story counts from 1, a Window from 0

    def read(k: int) -> Facts:
        last = k == n - 1
        a = runs[k]
        w = Window(attempt=k, lo=None if a.lo == float("-inf") else a.lo,
                   hi=None if a.hi == float("inf") else a.hi, pid_attempt=pid_attempt, logs=last, live=last)
        fk = read_bundle_facts(bundle, None, since, window=w)
        fk.node_faults = facts.node_faults
        return fk

    known = set(facts.ranks) | facts.world
    failed = [k for k, a in enumerate(runs) if a.failed()]
    verdicts = []
    for k in failed:
        fk = read(k)
        verdicts.append((k, choose(decide(fk, bundle.job), runs[k], fk, bundle.job)))
    verdicts = [(k, v) for k, v in verdicts if v.category != "none"]
    if not verdicts:
        return None
    last = runs[-1]
    recovery = {"restarts": n - 1, "attempts": n, "recovered": story.recovered, "state": story.state,
                "last_step": None, "story": story.line()}
    if last.ended == "finished":
        steps = [e["step"] for e in facts.ends if isinstance(e.get("step"), int)]
        recovery["last_step"] = max(steps) if steps else None
    return combine(verdicts, recovery, sorted(known), story)


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
    restarted = f"it was restarted {'once' if n == 1 else f'{n} times'}"
    if recovery["state"] == "recovered, finished":
        step = f" at step {recovery['last_step']}" if recovery.get("last_step") is not None else ""
        return f"the job recovered, finished: {restarted} and every rank ({len(known)}) then ended cleanly{step}"
    if recovery["state"] == "recovered, training again":
        return f"the job recovered, training again: {restarted} (attempt {n + 1} under way, no failure recorded)"
    return f"{restarted}; the job: {recovery['state']}"


def combine(verdicts: list[tuple[int, Verdict]], recovery: dict[str, Any], known: list[int],
            story: Story) -> Verdict:
    """One verdict for a restarted job: the latest incident's, every incident named."""
    k_last, latest = verdicts[-1]
    went_on = _went_on(recovery, known)
    lines = [f"incident {i} of {len(verdicts)}, attempt {k + 1} ({_attempt_name(k)})"
             + (f" ({v.first_failure['iso']})" if v.first_failure.get("iso") else "") + f": [{v.category}] {v.summary}"
             for i, (k, v) in enumerate(verdicts, 1)]
    summary = f"{latest.summary}; {story.line()}"
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
                   incidents=[_incident(k, v) for k, v in verdicts], recovery=recovery, story=story.to_dict(), **base)
