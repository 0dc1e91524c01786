"""Findings: what a grader found, folded into one Result per check.

A grader adds findings (a status, a one-line summary, the lines that prove it, a remedy) and
notes (facts worth showing that are not problems). The Result takes the worst status, names
the worst findings in its summary, and keeps every finding's evidence and remedy.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from preflight.model import Result, Status, worst

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


@dataclass
class Findings:
    items: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, status: Status, summary: str, evidence: Iterable[str] = (), remedy: str = "") -> None:
        """A finding; one with status PASS is not a problem and is kept as a note."""
        if status is Status.PASS:
            self.note(summary)
            return
        self.items.append(Finding(status, summary, [e for e in evidence if e], remedy))

    def note(self, text: str) -> None:
        if text and text not in self.notes:
            self.notes.append(text)

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
            ev = list(dict.fromkeys([*ok_evidence, *self.notes]))
            return ctx.result(Status.PASS, ok_summary, evidence=ev[:EVIDENCE_MAX], facts=facts)
        ordered = sorted(self.items, key=lambda f: -f.status.rank)
        summary = "; ".join(f.summary for f in ordered[:named])
        if len(ordered) > named:
            summary += f" (+{len(ordered) - named} more)"
        evidence = cap_evidence([*(e for f in ordered for e in f.evidence), *self.notes])
        remedies = list(dict.fromkeys(f.remedy for f in ordered if f.remedy))
        remedy = remedies[0] if len(remedies) == 1 else " ".join(f"({i}) {r}" for i, r in enumerate(remedies, 1))
        facts.setdefault("problems", [f.summary for f in ordered])
        return ctx.result(ordered[0].status, summary, evidence=evidence, remedy=remedy, facts=facts)


__all__ = ["EVIDENCE_MAX", "Finding", "Findings", "cap_evidence"]
