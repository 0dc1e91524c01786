"""Console report with rich: verdict banner, a table with failures first, remedies."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from preflight.model import Status
from preflight.report.base import Report

STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim", "error": "bold magenta"}


def render(report: Report, console: Console | None = None, verbose: bool = False) -> None:
    console = console or Console()
    table = Table(title=f"preflight {report.command}", show_lines=False, expand=False)
    table.add_column("node", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("summary")
    for r in report.results:
        st = r.status.value
        table.add_row(Text(r.node), Text(r.check), Text(st.upper(), style=STYLE[st]), Text(r.summary))
    console.print(table)
    bad = [r for r in report.results if r.status in (Status.FAIL, Status.ERROR, Status.WARN)]
    for r in bad:
        console.print(f"[{STYLE[r.status.value]}]{r.status.value.upper()}[/] {escape(r.node)} {escape(r.check)}: "
                      f"{escape(r.summary)}", highlight=False)
        for e in r.evidence[: (20 if verbose else 4)]:
            console.print(f"    {e}", highlight=False, markup=False)
        if r.remedy:
            console.print(f"    remedy: {r.remedy}", highlight=False, markup=False)
    v = report.verdict
    counts = ", ".join(f"{k} {n}" for k, n in v.counts.items() if n)
    color = "bold green" if v.verdict == "GO" else "bold red"
    tail = f" (blocking: {escape(', '.join(v.bad_nodes))})" if v.bad_nodes else ""
    console.print(f"[{color}]{v.verdict}[/] {counts}{tail}", highlight=False)


def render_checks(rows: list[dict[str, object]], console: Console | None = None) -> None:
    """`preflight list`: the registered checks as a table (site checks name their file)."""
    from pathlib import Path

    table = Table(title="preflight checks")
    for col in ("id", "scope", "probes", "catches"):
        table.add_column(col)
    for r in rows:
        origin = "" if r["origin"] == "builtin" else f" (site: {Path(str(r['origin'])).name})"
        table.add_row(f"{r['id']}{origin}", str(r["scope"]), str(r["probes"]), str(r["catches"] or r["title"]))
    (console or Console()).print(table)
