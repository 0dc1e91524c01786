"""Triage reports: the verdict first (category, culprits, action), then the usual results.

JSON is the usual report document with the verdict's keys beside it:
`{"category", "culprits": [{"node", "ranks"}], "evidence", "action", "triage": {...}, "results": [...]}`,
and `downtime`: `{"incidents": [{cause, nodes, ranks, last_good, training_again_at, until,
from_step, resumed_step, lost_s, gpu_hours, cost, currency, notes, ...}], "total": {incidents,
lost_s, gpu_hours, cost, by_cause, by_node}}` (the `runtime.downtime` results: each interruption
of the run, from its last good step to training again, or to the job's end, the collection or
the triage when it never trained again: `until` says which).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from preflight.report import Report
from preflight.runtime import downtime as dt
from preflight.triage.attribute import Verdict
from preflight.triage.downtime import from_report


def to_dict(verdict: Verdict, report: Report) -> dict[str, Any]:
    doc = report.to_dict()
    doc.update({"category": verdict.category, "culprits": verdict.culprits, "evidence": verdict.evidence,
                "action": verdict.action, "triage": verdict.to_dict(), "downtime": from_report(report.results)})
    return doc


def to_json(verdict: Verdict, report: Report) -> str:
    return json.dumps(to_dict(verdict, report), indent=2, default=str)


def _culprits(verdict: Verdict) -> str:
    return "; ".join(f"{c['node']} (rank{'s' if len(c['ranks']) != 1 else ''} "
                     f"{', '.join(map(str, c['ranks'])) or '-'})" for c in verdict.culprits) or "none named"


def _end(r: dict[str, Any]) -> str:
    """How a rank ended, in a few words."""
    if r.get("crashed"):
        return f"raised {str(r.get('exception') or '').split(':', 1)[0]}".replace("|", "/")
    if r.get("hang_exit"):
        return "watchdog hang exit (75)"
    if r.get("ended_by"):
        return f"ended by {r['ended_by']} (victim)"
    if r.get("clean_end"):
        return "clean"
    return f"exit {r['exit_code']}" if r.get("exit_code") is not None else "-"


def markdown(verdict: Verdict, report: Report) -> str:
    lines = [f"# preflight triage: {verdict.category}", "", verdict.summary, "",
             f"- culprits: {_culprits(verdict)}"]
    if verdict.collective.get("seq") is not None:
        lines.append(f"- where the ranks parted: {verdict.collective.get('op') or '?'} seq {verdict.collective['seq']}")
    if verdict.first_failure:
        ff = verdict.first_failure
        src = f" ({ff['source']})" if ff.get("source") else ""
        lines.append(f"- first failure: rank {ff.get('rank')} on {ff.get('node') or '?'} at {ff.get('iso')}{src}")
    if verdict.job:
        lines.append(f"- job: {', '.join(f'{k}={v}' for k, v in verdict.job.items() if v)}")
    if verdict.input_errors:
        lines += ["", "## Input that could not be used", ""] + [f"- {e}" for e in verdict.input_errors[:20]]
    lines += ["", "## Action", "", verdict.action, "", "## Evidence", "", "```"]
    lines += [e.replace("```", "'''") for e in verdict.evidence[:40]]
    lines += ["```", ""]
    if verdict.ranks:
        lines += ["## Ranks", "", "| rank | node | last entered | stuck in | reported | process | end |",
                  "|---|---|---|---|---|---|---|"]
        for r in verdict.ranks:
            entered = f"{r.get('entered_op') or ''} {r['entered']}" if r.get("entered") is not None else "-"
            lines.append(f"| {r['rank']} | {r.get('node') or '?'} | {entered.strip()} | "
                         f"{r.get('stuck') if r.get('stuck') is not None else '-'} | "
                         f"{'yes' if r.get('reported') else 'no'} | {r.get('proc_state') or '-'} | {_end(r)} |")
        lines.append("")
    from preflight.report.markdown import render

    lines += _downtime_markdown(from_report(report.results))
    lines += ["## Node checks", "", render(report)]
    return "\n".join(lines) + "\n"


def console(verdict: Verdict, report: Report, per_node: bool = False) -> None:
    """The verdict, its evidence and action, then the nodes' failing findings: the first few
    in short, or (`per_node`) every one as a line naming its node, evidence and remedy."""
    from rich.console import Console

    con = Console()
    color = {"none": "bold green", "slowdown": "bold yellow", "unknown": "bold yellow"}.get(verdict.category,
                                                                                             "bold red")
    con.print(f"[{color}]TRIAGE: {verdict.category}[/]", highlight=False, soft_wrap=True)
    con.print(verdict.summary, highlight=False, markup=False, soft_wrap=True)
    con.print(f"culprits: {_culprits(verdict)}", highlight=False, markup=False, soft_wrap=True)
    if verdict.collective.get("seq") is not None:
        con.print(f"parted at: {verdict.collective.get('op') or '?'} seq {verdict.collective['seq']}",
                  highlight=False, markup=False, soft_wrap=True)
    for e in verdict.evidence[:16]:
        con.print(f"    {e}", highlight=False, markup=False, soft_wrap=True)
    con.print(f"action: {verdict.action}", highlight=False, markup=False, soft_wrap=True)
    for line in downtime_lines(from_report(report.results)):
        con.print(line, highlight=False, markup=False, soft_wrap=True)
    if per_node:
        from preflight.report.console import finding_lines

        for line in finding_lines([r for r in report.results if r.check != "triage.verdict"], failures_only=True,
                                  per_node=True):
            con.print(line, highlight=False, markup=False, soft_wrap=True)
        return
    bad = [r for r in report.results if r.check != "triage.verdict" and r.status.value in ("fail", "error")]
    for r in bad[:12]:
        con.print(f"  {r.status.value.upper()} {r.node} {r.check}: {r.summary}", highlight=False, markup=False, soft_wrap=True)


def total_text(total: dict[str, Any]) -> str:
    """"3 incidents: lost 4.2 min, 0.56 GPU-h, $1.40"."""
    money = f", {dt.money_text(total['cost'], total.get('currency'))}" if total.get("cost") is not None else ""
    n = total.get("incidents", 0)
    return (f"{n} incident{'s' if n != 1 else ''}: lost {dt.duration_text(float(total.get('lost_s') or 0.0))}, "
            f"{float(total.get('gpu_hours') or 0.0):.3g} GPU-h{money}")


def downtime_lines(doc: dict[str, Any]) -> list[str]:
    """The console's downtime lines (none when the run was never interrupted)."""
    items = doc.get("incidents") or []
    if not items:
        return []
    lines = [f"downtime: {total_text(doc['total'])}"]
    for n in items:
        lines.append(f"    {dt.describe(n)}")
        lines += [f"      note: {x}" for x in (n.get("notes") or [])[:3]]
    return lines


def _downtime_markdown(doc: dict[str, Any]) -> list[str]:
    items = doc.get("incidents") or []
    if not items:
        return []
    lines = ["## Downtime", "", total_text(doc["total"]), "",
             "| cause | ranks | nodes | last good | until | steps redone | lost | GPU-h | cost |",
             "|---|---|---|---|---|---|---|---|---|"]
    for n in items:
        again = (f"training again at step {n.get('resumed_step')}" if n.get("until") == "training again"
                 else str(n.get("until")))
        cost = dt.money_text(n.get("cost"), n.get("currency")) or "-"
        lines.append(f"| {n.get('cause')} | {', '.join(map(str, n.get('ranks') or [])) or '-'} | "
                     f"{', '.join(n.get('nodes') or []) or '-'} | step {n.get('from_step')} at {n.get('last_good_iso')} "
                     f"| {again} | {n.get('steps_redone') if n.get('steps_redone') is not None else '-'} | "
                     f"{dt.duration_text(float(n.get('lost_s') or 0.0))} | {float(n.get('gpu_hours') or 0.0):.3g} | {cost} |")
    notes = [x for n in items for x in n.get("notes") or []]
    lines += [""] + [f"- note: {x}" for x in notes[:10]] + ([""] if notes else [])
    return lines


def write(verdict: Verdict, report: Report, out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "triage.json", "md": out_dir / "triage.md"}
    paths["json"].write_text(to_json(verdict, report) + "\n", encoding="utf-8")
    paths["md"].write_text(markdown(verdict, report), encoding="utf-8")
    return paths
