"""The history summary: failures per node and check, nodes not checked, flapping and lemon
nodes, bandwidth against each node's own past.

On a terminal these are tables; anywhere else (a pipe, a file) plain lines, one per row, never
cut at any width, each starting with its kind and naming its node and check
(`failed gpu007 fabric.manager: 3 of 40 checked runs ...`), so that
`preflight history | grep fabric.manager` finds the row."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> Table:
    t = Table(title=title)
    for col in columns:
        t.add_column(col)
    for row in rows:
        t.add_row(*row)
    return t


def _failures(summary: Any) -> Table | str:
    bad = [s for s in summary.stats if s.bad or s.warn]  # runs not checked alone: the table after
    if not bad:
        return "no failures in this window"
    rows = [(s.node, s.check, str(s.bad), str(s.warn), str(s.graded), str(s.not_checked), s.last_status,
             s.sequence[-40:]) for s in sorted(bad, key=lambda s: (-s.bad, -s.warn, s.node, s.check))]
    return _table("failures per node and check (failed: of the runs in which it was checked; not checked: "
                  "unreachable node or lost output)",
                  ("node", "check", "failed", "warn", "checked runs", "not checked", "last", "runs (oldest first)"),
                  rows)


def _others(summary: Any) -> list[Table]:
    tables = []
    if summary.unchecked:
        tables.append(_table(
            "nodes not checked (unreachable, or output lost; not counted as failures)",
            ("node", "not checked", "runs", "wholly", "most common cause", "runs (oldest first)"),
            [(u.node, str(u.count), str(u.runs), str(u.whole), f"{u.cause} ({u.cause_count} runs)", u.sequence[-40:])
             for u in summary.unchecked]))
    if summary.flapping:
        tables.append(_table("flapping", ("node", "check", "failure episodes", "runs (oldest first)"),
                             [(f.node, f.check, str(f.episodes), f.sequence[-40:]) for f in summary.flapping]))
    if summary.lemons:
        tables.append(_table("lemon nodes", ("node", "kind", "what", "finding"),
                             [(lm.node, lm.kind, lm.key, lm.summary) for lm in summary.lemons]))
    if summary.trends:
        tables.append(_table("bandwidth against each node's own past",
                             ("node / pair", "kind", "latest GB/s", "against its past"),
                             [(tr.label, tr.kind, f"{tr.last:.4g}", ("[red]" if tr.low else "") + tr.summary)
                              for tr in summary.trends]))
    return tables


def _head(summary: Any, url: str) -> str:
    since = summary.to_dict()["since"] or "the beginning"
    return f"preflight history: {summary.runs} run(s), {len(summary.nodes)} node(s) since {since} ({url})"


def lines(summary: Any, url: str) -> list[str]:
    """The summary as plain lines, one per row of the tables (see the module's docstring)."""
    out = [_head(summary, url)]
    bad = sorted((s for s in summary.stats if s.bad or s.warn), key=lambda s: (-s.bad, -s.warn, s.node, s.check))
    out += [f"failed {s.node} {s.check}: {s.bad} failed, {s.warn} warn of {s.graded} checked runs; "
            f"{s.not_checked} not checked; last {s.last_status}; runs {s.sequence[-40:]}" for s in bad]
    if not bad:
        out.append("no failures in this window")
    out += [f"not-checked {u.node}: {u.count} of {u.runs} runs ({u.whole} wholly); most common cause: {u.cause} "
            f"({u.cause_count} runs); runs {u.sequence[-40:]}" for u in summary.unchecked]
    out += [f"flapping {f.node} {f.check}: {f.episodes} failure episodes; runs {f.sequence[-40:]}"
            for f in summary.flapping]
    out += [f"lemon {lm.node} {lm.kind} {lm.key}: {lm.summary}" for lm in summary.lemons]
    out += [f"trend {tr.label} {tr.kind}: latest {tr.last:.4g} GB/s; {tr.summary}" for tr in summary.trends]
    return [" ".join(line.split()) for line in out]


def render(summary: Any, url: str, console: Console | None = None) -> None:
    """The history summary: tables on a terminal, plain lines anywhere else."""
    con = console or Console(force_terminal=sys.stdout.isatty())
    if not con.is_terminal:
        con.file.write("".join(line + "\n" for line in lines(summary, url)))
        con.file.flush()
        return
    con.print(_head(summary, url).replace("preflight history", "[bold]preflight history[/bold]", 1), highlight=False)
    con.print(_failures(summary))
    for t in _others(summary):
        con.print(t)
