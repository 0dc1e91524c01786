"""Findings: what a grader found, folded into one Result per check.

A grader adds findings (a code from the policy table, a one-line summary, the lines that prove
it, a remedy) and notes. A finding's first evidence line is the one that proves it (the console
shows that one): where the lines come in the tool's order (`LoadState=loaded` before
`ActiveState=failed`), `proof=` names what the telling line holds and `prove` puts it first.
Notes are facts worth showing that are not problems. A finding's status is its
code's in the active policy (`preflight.policy`): the table's, or the site's override. The
Result takes the worst status, names the worst findings in its summary, keeps every finding's
evidence and remedy, and carries the codes (`facts["codes"]`, worst first) and any override
(`facts["overrides"]`, and an evidence line saying so).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from preflight import policy
from preflight.model import Result, Status, prove, worst

if TYPE_CHECKING:
    from preflight.registry import CheckContext

EVIDENCE_MAX = 24  # evidence lines kept per result (a display limit, not a grading threshold)


def cap_evidence(lines: Iterable[str], limit: int = EVIDENCE_MAX) -> list[str]:
    """Evidence lines once each, at most `limit` of them; the last kept line says how many
    more there were. The one evidence cap of a Result built from findings."""
    kept = [line for line in dict.fromkeys(lines) if line]
    if len(kept) <= limit:
        return kept
    cut = len(kept) - limit + 1
    return kept[:limit - 1] + [f"... {cut} more evidence lines"]


@dataclass
class Finding:
    status: Status
    summary: str
    evidence: list[str] = field(default_factory=list)
    remedy: str = ""
    code: str = ""


@dataclass
class Findings:
    items: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)  # codes a site's policy turned into PASS

    def add(self, code: str | Status, summary: str, evidence: Iterable[str] = (), remedy: str = "",
            proof: str | Sequence[str] = "") -> None:
        """A finding of policy code `code` (its status is the policy's); one whose status is
        PASS (a note by design, or by a site's override) is not a problem and is kept as a note.
        `proof`: what the line that proves it holds, put first (see `prove`).
        (A bare Status instead of a code is the form from before codes: a finding without one.)"""
        if isinstance(code, Status):
            status, code = code, ""
        else:
            status = policy.status(code)
        if status is Status.PASS:
            self.note(summary)
            if code and policy.active().override(code) is not None:
                self.passed.append(code)
            return
        self.items.append(Finding(status, summary, [e for e in prove(evidence, proof) if e], remedy, code))

    def unread(self, check: str, producer: str, lines: Sequence[str], remedy: str = "") -> None:
        """Lines `producer` printed at its error level that no rule of `check` reads: one finding
        `<check>/unread-error` (WARN in the table; a site may change it) with every line as
        evidence, never dropped (No silent PASS). `lines` are the lines as printed, in order."""
        lines = list(dict.fromkeys(ln.strip() for ln in lines if ln.strip()))
        if not lines:
            return
        more = f" (+{len(lines) - 1} more)" if len(lines) > 1 else ""
        self.add(f"{check}/unread-error",
                 f"{producer} error line not in preflight's inventory of {producer} messages: "
                 f"{lines[0][:160]}{more}",
                 lines, remedy or f"Read the line in the node's context; {producer} prints it at error level, "
                 "so it is a fault until shown otherwise. Report it to preflight so that a rule reads it.")

    def note(self, text: str) -> None:
        if text and text not in self.notes:
            self.notes.append(text)

    def codes(self) -> list[str]:
        """The codes found, worst first."""
        return list(dict.fromkeys(f.code for f in sorted(self.items, key=lambda f: -f.status.rank) if f.code))

    def summaries(self, status: Status) -> list[str]:
        """The summaries of the findings of one status, in the order they were found."""
        return [f.summary for f in self.items if f.status is status]

    def __bool__(self) -> bool:
        return bool(self.items)

    @property
    def status(self) -> Status:
        return worst([f.status for f in self.items]) if self.items else Status.PASS

    def result(self, ctx: CheckContext, ok_summary: str, facts: dict[str, Any] | None = None,
               ok_evidence: Sequence[str] = (), named: int = 3) -> Result:
        """One Result: PASS with `ok_summary` when nothing was found, else the worst status with
        up to `named` findings in the summary (worst first)."""
        facts = dict(facts or {})
        if not self.items:
            ev = list(dict.fromkeys([*ok_evidence, *self.notes]))[:EVIDENCE_MAX]
            policy.code_facts((), facts, ev, passed=self.passed)
            return ctx.result(Status.PASS, ok_summary, evidence=ev, facts=facts)
        ordered = sorted(self.items, key=lambda f: -f.status.rank)
        summary = "; ".join(f.summary for f in ordered[:named])
        if len(ordered) > named:
            summary += f" (+{len(ordered) - named} more)"
        evidence = cap_evidence([*(e for f in ordered for e in f.evidence), *self.notes])
        remedies = list(dict.fromkeys(f.remedy for f in ordered if f.remedy))
        remedy = remedies[0] if len(remedies) == 1 else " ".join(f"({i}) {r}" for i, r in enumerate(remedies, 1))
        facts.setdefault("problems", [f.summary for f in ordered])
        policy.code_facts(self.codes(), facts, evidence, passed=self.passed)
        return ctx.result(ordered[0].status, summary, evidence=evidence, remedy=remedy, facts=facts)


def coded_result(code: str, check: str, node: str, summary: str, evidence: Iterable[str] = (), remedy: str = "",
                 facts: dict[str, Any] | None = None, source: str = "") -> Result:
    """A result outside a CheckContext (a cross-node check, analyze's own): its status from policy
    code `code`, which it carries (a PASS by the site's override carries it as an override)."""
    ev = [str(e) for e in evidence]
    facts = dict(facts or {})
    status = policy.status(code)
    passing = status is Status.PASS
    policy.code_facts([] if passing else [code], facts, ev, passed=[code] if passing else [])
    return Result(check=check, node=node, status=status, summary=summary, evidence=ev, remedy=remedy, facts=facts,
                  source=source)


__all__ = ["EVIDENCE_MAX", "Finding", "Findings", "cap_evidence", "coded_result", "prove"]
