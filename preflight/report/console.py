"""The console report: one screen for a fleet, one line per finding when piped.

Identical outcomes are grouped across nodes: a (status, check, summary) group names its nodes
as one Slurm hostlist (`gpu[001-015,017-064]`), with its evidence and remedy once. Failures
come first (FAIL, ERROR, WARN), then SKIP groups, then how many checks passed on which nodes,
then the verdict with its counts and, when real nodes block, the line to paste into sbatch
(`--exclude=gpu[016,020]`). A result that only depends on another one's cause (SKIP "depends
on gpu.driver: ...", see `preflight.rootcause`) is a count on its root's line, not a line.

On a terminal the groups are drawn with colour; anywhere else (a pipe, a file, a log) every
line is plain text, never wrapped, without colour codes or trailing spaces: one line per
failing node and finding (`FAIL gpu016 gpu.xid: Xid 79 ... | remedy: ...`, NHC style, so
`grep gpu016` finds it), one per SKIP group and per group of passing nodes, the verdict and the
exclude line. `failures_only` (`-q`) keeps the failures and the verdict.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table
from rich.text import Text

from preflight.grading import NO_EVIDENCE
from preflight.inventory import compress, valid_node_name
from preflight.model import Result, Status
from preflight.report.base import Report
from preflight.rootcause import is_dependent

STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim", "error": "bold magenta"}
ORDER = {Status.FAIL: 0, Status.ERROR: 1, Status.WARN: 2, Status.SKIP: 3}
FAILURES = (Status.FAIL, Status.ERROR, Status.WARN)
BLOCKING_WIDTH = 60  # a longer hostlist of blocking nodes is a count on the verdict line
PSEUDO = ("cluster", "job")
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_HERE = "\x00"  # where a group's node names go in its texts
_ADDR = "\x01"  # where each node wrote its own address
_IPV4 = re.compile(r"(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?(?![\w.])")


@dataclass
class Group:
    """Results with the same status, check and text on several nodes."""

    status: Status
    check: str
    summary: str  # with _HERE where each node wrote its own name
    remedy: str
    dependents: int  # checks skipped on each node because of this one's cause
    first: Result
    nodes: list[str] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)

    @property
    def hosts(self) -> str:
        return hostlist(self.nodes)

    def text(self, name: str) -> str:
        """The group's summary or remedy for display: the node's own words when it is alone,
        else <node> for each node's name (the hostlist is in the line already) and <address>
        for its addresses."""
        if len(self.nodes) == 1:
            return str(getattr(self.first, name))
        return str(getattr(self, name)).replace(_HERE, "<node>").replace(_ADDR, "<address>")

    def tail(self, one_node: bool = False) -> str:
        if not self.dependents:
            return ""
        each = " on each" if len(self.nodes) > 1 and not one_node else ""
        return f" ({self.dependents} dependent check{'s' if self.dependents != 1 else ''} skipped{each})"


def hostlist(nodes: Iterable[str]) -> str:
    """Nodes as one compressed hostlist (names a hostlist cannot hold are listed as they are)."""
    names = list(dict.fromkeys(nodes))
    plain = [n for n in names if _HOST.fullmatch(n)]
    return ",".join(([compress(plain)] if plain else []) + [n for n in names if n not in plain])


def _own_name(text: str, node: str) -> str:
    """`text` with the node's own name and IPv4 addresses marked, so that the same words on two
    nodes group (`gpu007 (10.1.0.7:22) refused the connection` on every node of a rack)."""
    if not node or node in PSEUDO:
        return text
    return _IPV4.sub(_ADDR, re.sub(rf"(?<![\w.-]){re.escape(node)}(?![\w-])", _HERE, text))



def _dependents(r: Result) -> int:
    deps = r.facts.get("dependents")
    return len(deps) if isinstance(deps, list) else 0


def group(results: Sequence[Result]) -> list[Group]:
    """The non-passing results grouped across nodes, failures first; dependents left out."""
    groups: dict[tuple[Status, str, str, str, int], Group] = {}
    for r in results:
        if r.status is Status.PASS or is_dependent(r):
            continue
        summary, remedy = _own_name(r.summary, r.node), _own_name(r.remedy, r.node)
        key = (r.status, r.check, summary, remedy, _dependents(r))
        g = groups.setdefault(key, Group(r.status, r.check, summary, remedy, _dependents(r), r))
        g.nodes.append(r.node)
        g.results.append(r)
    return sorted(groups.values(), key=lambda g: (ORDER[g.status], g.check, g.nodes[0]))


def passing(results: Sequence[Result]) -> list[tuple[str, int]]:
    """(hostlist, checks passed on each) for the nodes grouped by how many of their checks passed."""
    per: dict[str, int] = {}
    for r in results:
        if r.status is Status.PASS:
            per[r.node] = per.get(r.node, 0) + 1
    by_count: dict[int, list[str]] = {}
    for node, n in per.items():
        by_count.setdefault(n, []).append(node)
    return [(hostlist(nodes), n) for n, nodes in sorted(by_count.items(), reverse=True)]


def _pass_text(n: int) -> str:
    return f"{n} check{'s' if n != 1 else ''} pass"


def verdict_line(report: Report) -> str:
    v = report.verdict
    counts = ", ".join(f"{k} {n}" for k, n in v.counts.items() if n)
    hosts = hostlist(v.bad_nodes)
    if len(hosts) > BLOCKING_WIDTH:  # the exclude line below names them all
        hosts = f"{len(v.bad_nodes)} nodes"
    tail = f" (blocking: {hosts})" if v.bad_nodes else ""
    if v.verdict == NO_EVIDENCE:
        tail = " (nothing was graded: no input was recognised or every check skipped; not GO)"
    return f"{v.verdict} {counts}{tail}"


def exclude_line(report: Report) -> str:
    """`--exclude=<hostlist>` of the real nodes that block the verdict ('' when none, and for
    analyze, whose node names are the captured files' names)."""
    if report.command == "analyze":
        return ""
    bad = [n for n in report.verdict.bad_nodes if n not in PSEUDO and valid_node_name(n)]
    return f"--exclude={compress(bad)}" if bad else ""


def _clean(text: str) -> str:
    """One line of plain text: no colour codes, no line breaks or tabs, no trailing spaces."""
    return " ".join(_ANSI.sub("", text).split())


def lines(report: Report, failures_only: bool = False) -> list[str]:
    """The plain report: one line per failing (node, finding), one per SKIP group and per group
    of passing nodes, the verdict and the exclude line."""
    out: list[str] = []
    for g in group(report.results):
        if g.status in FAILURES:
            for r in g.results:
                ev = next((e for e in r.evidence if e.strip()), "")
                text = f"{r.status.value.upper()} {r.node} {r.check}: {r.summary}{g.tail(one_node=True)}"
                text += f" | evidence: {ev}" if ev and _clean(ev) not in _clean(r.summary) else ""
                text += f" | remedy: {r.remedy}" if r.remedy else ""
                out.append(_clean(text))
        elif not failures_only:
            out.append(_clean(f"SKIP {g.hosts} {g.check}: {g.text('summary')}{g.tail()}"))
    if not failures_only:
        out += [f"PASS {hosts}: {_pass_text(n)}" for hosts, n in passing(report.results)]
    out.append(_clean(verdict_line(report)))
    if exclude_line(report):
        out.append(exclude_line(report))
    return out


def _tty(report: Report, console: Console, verbose: bool, failures_only: bool) -> None:
    """The grouped view with colour, for a terminal."""
    width = max([len(g.hosts) for g in group(report.results)] + [len(h) for h, _ in passing(report.results)] + [4])
    width = min(width, 24)  # a longer hostlist runs past the column
    for g in group(report.results):
        if failures_only and g.status not in FAILURES:
            continue
        st = g.status.value
        line = Text.assemble((f"{st.upper():5s} ", STYLE[st]), (f"{g.hosts:{width}s}  ", "bold"), (g.check, "cyan"),
                             f"  {_clean(g.text('summary'))}", (g.tail(), "dim"))
        console.print(line, highlight=False)
        if g.status not in FAILURES:
            continue
        shown = [] if failures_only else g.first.evidence[: (20 if verbose else 4)]
        for i, e in enumerate(shown):
            where = f" ({g.first.node})" if i == 0 and len(g.nodes) > 1 and g.first.node not in e else ""
            e = _ANSI.sub("", e).expandtabs(4).rstrip()
            console.print(Text(f"      {e}{where}", style="dim" if where else ""), highlight=False)
        if g.remedy:
            console.print(Text(f"      remedy: {_clean(g.text('remedy'))}", style="italic"), highlight=False)
    if not failures_only:
        for hosts, n in passing(report.results):
            console.print(Text.assemble(("PASS  ", STYLE["pass"]), (f"{hosts:{width}s}  ", "bold"), _pass_text(n)),
                          highlight=False)
    color = "bold green" if report.verdict.verdict == "GO" else "bold red"
    console.print(Text(verdict_line(report), style=color), highlight=False)
    if exclude_line(report):
        console.print(Text(exclude_line(report)), highlight=False)


def render(report: Report, console: Console | None = None, verbose: bool = False,
           failures_only: bool = False) -> None:
    """The report on `console` (default: standard output): grouped with colour on a terminal,
    one plain line per finding anywhere else."""
    if console is None:  # standard output: a terminal by isatty, whatever FORCE_COLOR says
        console = Console(force_terminal=sys.stdout.isatty())
    if console.is_terminal:
        _tty(report, console, verbose, failures_only)
        return
    console.file.write("".join(line + "\n" for line in lines(report, failures_only)))
    console.file.flush()


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
