"""The prologue's use of the history: record this run and, with damping on, decide whether
the node drains (soft failures only after K failing runs in a row) or resumes (after M passing
runs). Any store problem leaves the prologue's plain behaviour (drain on NO-GO) in place."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from preflight.grading import NO_EVIDENCE
from preflight.history.damping import Damping, Decision, decide
from preflight.history.store import describe, open_store, resolve_url

DAMPED_COMMANDS = ("prologue", "node")  # the node-local runs a damping decision looks back on


@dataclass
class Gate:
    decision: Decision | None = None  # None: not damped (plain drain on NO-GO)
    lines: list[str] = field(default_factory=list)
    run_id: int | None = None


def parse_damp(spec: str | None, profile: Any = None) -> Damping | None:
    """--damp value -> Damping (None when not given). Raises ValueError for a bad value."""
    if spec is None or not spec.strip() or spec.strip().lower() in ("off", "no", "false"):
        return None
    return Damping.parse(spec, profile)


def prologue_gate(report: Any, node: str, history_url: str | None, damp: str | None, profile: Any = None,
                  timeout: float = 5.0) -> Gate:
    """Record the prologue's report; with `damp`, decide from the node's earlier runs."""
    gate = Gate()
    try:
        damping = parse_damp(damp, profile)
    except ValueError as exc:
        gate.lines.append(f"  history: {exc}; not damped")
        damping = None
    try:
        url = resolve_url(history_url)
    except Exception as exc:
        gate.lines.append(f"  history: {exc}; not recorded" + ("; not damped" if damping else ""))
        return gate
    if url is None:
        if damping:
            gate.lines.append("  history: off; damping needs it: not damped")
        return gate
    try:
        with open_store(url, timeout=timeout, indexes=False) as store:  # the views build them, not the gate
            past = store.node_runs(node, DAMPED_COMMANDS, limit=max(damping.fail_runs, damping.pass_runs) + 1) \
                if damping else []
            gate.run_id = store.record(report, "prologue")
            if damping:
                d = decide(node, [r for r in report.results if r.node == node], past, damping)
                store.record_decision(gate.run_id, node, d.action, d.reason, d.to_dict())
                gate.decision = d
                gate.lines.append(f"  history: {d.reason}")
    except Exception as exc:
        gate.lines.append(f"  history ({describe(url)}): {exc}; " + ("not damped" if gate.run_id is not None else
                                                                      "not recorded" + ("; not damped" if damping else "")))
        gate.decision = None
    return gate


def drain_summary(blocking: Sequence[Any]) -> tuple[str, str]:
    """(check, summary) for the drain reason: the worst result, with a count of the others."""
    first = blocking[0]
    more = len(blocking) - 1
    return first.check, first.summary + (f" (+{more} more)" if more else "")


@dataclass
class Settled:
    """What the prologue does: its exit code, the drain reason (None: no drain), and whether
    the node is resumed (damping saw enough passing runs)."""

    code: int
    drain: tuple[str, str] | None = None
    resume: bool = False


def settle(report: Any, gate: Gate) -> Settled:
    """The drain/damping decision: NO-GO drains with the worst result's reason; with damping,
    a soft failure below K failing runs in a row neither drains nor fails the job, and a drain
    names the failure damping counted."""
    code = report.verdict.exit_code
    if report.verdict.verdict == NO_EVIDENCE:
        code = 0  # nothing graded proved the node bad: no drain, the job runs (the verdict line says so)
    d = gate.decision
    if d is not None and code != 0 and not d.drain:
        code = 0
    drain = None
    if code != 0:
        drain = (d.check, d.summary) if d is not None and d.drain else drain_summary(report.verdict.blocking)
    return Settled(code=code, drain=drain, resume=d is not None and d.resume)
