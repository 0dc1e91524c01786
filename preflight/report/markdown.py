"""Markdown report: verdict, per-node matrix, then every non-pass result with its evidence."""

from __future__ import annotations

from preflight.model import Status, is_node, real_nodes
from preflight.report.base import Report

_MARK = {"pass": "pass", "warn": "**WARN**", "fail": "**FAIL**", "skip": "skip", "error": "**ERROR**"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _matrix(report: Report, nodes: list[str], checks: list[str]) -> list[list[str]]:
    """One row per node: its worst status in each check ("" where the check has no result there)."""
    worst: dict[tuple[str, str], Status] = {}
    for r in report.results:
        if is_node(r.node):
            seen = worst.get((r.node, r.check))
            if seen is None or r.status.rank > seen.rank:
                worst[(r.node, r.check)] = r.status
    return [[node, *[_MARK[worst[(node, c)].value] if (node, c) in worst else "" for c in checks]] for node in nodes]


def render(report: Report) -> str:
    from tabulate import tabulate  # loaded only when a Markdown report is written

    v = report.verdict
    lines = [f"# preflight {report.command}: {v.verdict}", ""]
    lines.append(f"- started: {report.started}, took {report.duration_s:.2f} s")
    lines.append(f"- nodes: {', '.join(report.nodes)}")
    if report.profiles:
        profs = sorted(set(report.profiles.values()))
        lines.append(f"- profile: {', '.join(profs)}")
    lines.append("- results: " + ", ".join(f"{k} {n}" for k, n in v.counts.items() if n))
    if v.bad_nodes:
        lines.append(f"- nodes blocking the job: {report.bad_hostlist() or ', '.join(v.bad_nodes)}")
    lines.append("")
    # the matrix is per real node; results about the nodes together are under Findings / Passed
    checks = sorted({r.check for r in report.results if is_node(r.node)})
    nodes = real_nodes(r.node for r in report.results)
    if checks and nodes:
        rows = _matrix(report, nodes, checks)
        lines += ["## Matrix", "", tabulate(rows, headers=["node", *checks], tablefmt="github"), ""]
    bad = [r for r in report.results if r.status is not Status.PASS]
    if bad:
        lines += ["## Findings", ""]
        for r in bad:
            lines.append(f"### {r.status.value.upper()} {r.check} on {r.node}")
            lines.append("")
            lines.append(_cell(r.summary))
            lines.append("")
            if r.evidence:
                lines.append("```")
                lines.extend(e.replace("```", "'''") for e in r.evidence[:20])
                if len(r.evidence) > 20:
                    lines.append(f"... {len(r.evidence) - 20} more lines in report.json")
                lines.append("```")
                lines.append("")
            if r.remedy:
                lines.append(f"Remedy: {_cell(r.remedy)}")
                lines.append("")
            if r.source:
                lines.append(f"Source: `{r.source}`")
                lines.append("")
    rows = [[r.node, r.check, _MARK[r.status.value], _cell(r.summary)] for r in report.results
            if r.status is Status.PASS]
    if rows:
        lines += ["## Passed", "", tabulate(rows, headers=["node", "check", "status", "summary"], tablefmt="github"), ""]
    return "\n".join(lines) + "\n"
