"""The console report: one screen for a fleet, on a terminal and in a pipe alike.

Identical outcomes are grouped across nodes (clubak style): a (status, check, summary, remedy)
group names its nodes as one Slurm hostlist (`gpu[001-015,017-064]`), with its evidence and
remedy once; a node's own name and addresses in the texts are abstracted (`<node>`,
`<address>`) so that the same words on many nodes are one group. Failures come first (FAIL,
ERROR, WARN; within each, a node's findings together, nodes in natural order), then SKIP
groups, then how many checks passed on which nodes, then the verdict
with its counts and, when real nodes block, the line to paste into sbatch
(`--exclude=gpu[016,020]`). Nodes are in natural order (node2 before node10). A result that
only depends on another one's cause (SKIP "depends on gpu.driver: ...", see
`preflight.rootcause`) is a count on its root's line, not a line.

The evidence shown is a result's first line: graders put the line that proves a finding first
(`preflight.findings`).

On a terminal the groups are drawn with colour, wrapped lines keeping their indent; anywhere
else (a pipe, a file, a log) every line is plain text, never wrapped, without colour codes or
trailing spaces: one line per group (`FAIL gpu[003,016] gpu.xid: ... | evidence: ... | remedy:
...`). `per_node` (`--per-node`) writes one line per node and finding instead
(`FAIL gpu016 gpu.xid: ...`, NHC style, so `grep gpu016` finds it). `failures_only` (`-q`)
keeps only FAIL and ERROR (and WARN under --warn-as-fail, where it blocks), the verdict and the
exclude line.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from preflight import lazyre
from preflight.grading import NO_EVIDENCE
from preflight.inventory import compress, valid_node_name
from preflight.model import Result, Status
from preflight.report.base import Report, natural
from preflight.rootcause import is_dependent

if TYPE_CHECKING:  # rich is imported where a terminal view is drawn: the plain lines need none of it
    from rich.console import Console
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim", "error": "bold magenta"}
ORDER = {Status.FAIL: 0, Status.ERROR: 1, Status.WARN: 2, Status.SKIP: 3}
FAILURES = (Status.FAIL, Status.ERROR, Status.WARN)
QUIET = (Status.FAIL, Status.ERROR)  # what -q shows (and the verdict)
INDENT = 6  # evidence and remedy lines under a group's line
HOSTS_WIDTH = 24  # the hostlist column on a terminal at most
BLOCKING_WIDTH = 60  # a longer hostlist of blocking nodes is a count on the verdict line
PSEUDO = ("cluster", "job")
_HOST = lazyre.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_ANSI = lazyre.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_HERE = "\x00"  # where a group's node names go in its texts
_ADDR = "\x01"  # where each node wrote its own address
_IPV4 = lazyre.compile(r"(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?(?![\w.])")


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
    """Nodes as one compressed hostlist in natural order (names a hostlist cannot hold are
    listed as they are, after it)."""
    names = sorted(dict.fromkeys(nodes), key=natural)
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
    """The non-passing results grouped across nodes, failures first; dependents left out.
    Groups are in order of status, then first node (natural order: a node's findings
    together, a group of several nodes at its first one), then check; the nodes and results
    of each group are in natural order."""
    groups: dict[tuple[Status, str, str, str, int], Group] = {}
    for r in sorted(results, key=lambda r: natural(r.node)):
        if r.status is Status.PASS or is_dependent(r):
            continue
        summary, remedy = _own_name(r.summary, r.node), _own_name(r.remedy, r.node)
        key = (r.status, r.check, summary, remedy, _dependents(r))
        g = groups.setdefault(key, Group(r.status, r.check, summary, remedy, _dependents(r), r))
        g.nodes.append(r.node)
        g.results.append(r)
    return sorted(groups.values(), key=lambda g: (ORDER[g.status], natural(g.nodes[0]), g.check))


def passing(results: Sequence[Result]) -> list[tuple[str, int]]:
    """(hostlist, checks passed on each) for the nodes grouped by how many of their checks passed."""
    per: dict[str, int] = {}
    for r in results:
        if r.status is Status.PASS:
            per[r.node] = per.get(r.node, 0) + 1
    by_count: dict[int, list[str]] = {}
    for node, n in per.items():
        by_count.setdefault(n, []).append(node)
    return [(hostlist(nodes), n) for n, nodes in sorted(by_count.items(), key=lambda kv: (-kv[0], natural(kv[1][0])))]


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
    return f"--exclude={compress(sorted(bad, key=natural))}" if bad else ""


def _clean(text: str) -> str:
    """One line of plain text: no colour codes, no line breaks or tabs, no trailing spaces."""
    return " ".join(_ANSI.sub("", text).split())


def shown(status: Status, failures_only: bool, warn_as_fail: bool = False) -> bool:
    """Whether a group of this status has a line (-q: FAIL and ERROR only, and WARN where it
    blocks the verdict: --warn-as-fail)."""
    return status in QUIET or (warn_as_fail and status is Status.WARN) if failures_only else True


def proof(r: Result) -> str:
    """The evidence line a result shows: its first (graders put the line that proves it first)."""
    return next((e for e in r.evidence if e.strip()), "")


def _finding_line(g: Group, r: Result | None) -> str:
    """One plain line: the group's (r None) or one node's (r) finding."""
    one = r or g.first
    hosts = one.node if r is not None else g.hosts
    summary = one.summary if r is not None else g.text("summary")
    remedy = one.remedy if r is not None else g.text("remedy")
    text = f"{one.status.value.upper()} {hosts} {one.check}: {summary}{g.tail(one_node=r is not None)}"
    ev = proof(one) if one.status in FAILURES else ""
    if ev and _clean(ev) not in _clean(one.summary):
        where = f" ({one.node})" if r is None and len(g.nodes) > 1 and one.node not in ev else ""
        text += f" | evidence: {ev}{where}"
    text += f" | remedy: {remedy}" if remedy and one.status in FAILURES else ""
    return _clean(text)


def finding_lines(results: Sequence[Result], failures_only: bool = False, per_node: bool = False,
                  warn_as_fail: bool = False) -> list[str]:
    """The plain finding lines of `lines`: one per group of identical findings, or with
    `per_node` one per node and finding (`FAIL gpu016 gpu.xid: ... | evidence: ... | remedy:
    ...`), a node's lines together. Other commands' consoles (prologue, triage) print these for
    their `--per-node`."""
    groups = [g for g in group(results) if shown(g.status, failures_only, warn_as_fail)]
    if not per_node:
        return [_finding_line(g, None) for g in groups]
    pairs = sorted(((g, r) for g in groups for r in g.results),
                   key=lambda gr: (ORDER[gr[1].status], natural(gr[1].node), gr[1].check))
    return [_finding_line(g, r) for g, r in pairs]


def lines(report: Report, failures_only: bool = False, per_node: bool = False) -> list[str]:
    """The plain report: one line per group of identical findings (`per_node`: per node and
    finding), then the groups of passing nodes, the verdict and the exclude line."""
    out = finding_lines(report.results, failures_only, per_node, report.warn_as_fail)
    if not failures_only:
        out += [f"PASS {hosts}: {_pass_text(n)}" for hosts, n in passing(report.results)]
    out.append(_clean(verdict_line(report)))
    if exclude_line(report):
        out.append(exclude_line(report))
    return out


def _row(status: Status, hosts: str, width: int, *rest: Text) -> Table:
    """A line of the terminal view as a grid, so that wrapped text keeps its column: status,
    hostlist, then the `rest` cells (the last one wraps); a hostlist longer than its column has
    a line of its own (wrapped under itself), the `rest` cells under it."""
    from rich.table import Table
    from rich.text import Text

    head = Text(f"{status.value.upper():5s} ", STYLE[status.value])
    cells = Table.grid()
    for _ in rest[:-1]:
        cells.add_column(no_wrap=True)
    cells.add_column(overflow="fold")
    cells.add_row(*rest)
    grid = Table.grid()
    grid.add_column(no_wrap=True)
    if len(hosts) <= width:
        grid.add_column(no_wrap=True)
        grid.add_column()
        grid.add_row(head, Text(f"{hosts:{width}s}  ", "bold"), cells)
        return grid
    grid.add_column(overflow="fold")
    grid.add_row(head, Text(hosts, "bold"))
    grid.add_row(Text(""), cells)
    return grid


def _head(g: Group, width: int) -> Table:
    """A group's first line: status, hostlist, check, summary (and its dependents)."""
    from rich.text import Text

    return _row(g.status, g.hosts, width, Text(f"{g.check}  ", "cyan"),
                Text.assemble(_clean(g.text("summary")), (g.tail(), "dim")))


def _under(text: str, style: str = "") -> Padding:
    """A line under a group's line, indented, its wrapped parts indented alike."""
    from rich.padding import Padding
    from rich.text import Text

    return Padding(Text(text, style=style), (0, 0, 0, INDENT))


def _tty(report: Report, console: Console, verbose: bool, failures_only: bool) -> None:
    """The grouped view with colour, for a terminal."""
    from rich.text import Text

    groups = [g for g in group(report.results) if shown(g.status, failures_only, report.warn_as_fail)]
    hostlists = [g.hosts for g in groups] + [h for h, _ in passing(report.results)]
    width = max([len(h) for h in hostlists if len(h) <= HOSTS_WIDTH] + [4])  # a longer one has its own line
    for g in groups:
        console.print(_head(g, width), highlight=False)
        if g.status not in FAILURES:
            continue
        evidence = [] if failures_only else [e for e in g.first.evidence if e.strip()][: (20 if verbose else 4)]
        for i, e in enumerate(evidence):
            where = f" ({g.first.node})" if i == 0 and len(g.nodes) > 1 and g.first.node not in e else ""
            e = _ANSI.sub("", e).expandtabs(4).rstrip()
            console.print(_under(f"{e}{where}", "dim" if where else ""), highlight=False)
        if g.remedy:
            console.print(_under(f"remedy: {_clean(g.text('remedy'))}", "italic"), highlight=False)
    if not failures_only:
        for hosts, n in passing(report.results):
            console.print(_row(Status.PASS, hosts, width, Text(_pass_text(n))), highlight=False)
    color = "bold green" if report.verdict.verdict == "GO" else "bold red"
    console.print(Text(verdict_line(report), style=color), highlight=False)
    if exclude_line(report):
        console.print(Text(exclude_line(report)), highlight=False)


def render(report: Report, console: Console | None = None, verbose: bool = False,
           failures_only: bool = False, per_node: bool = False) -> None:
    """The report on `console` (default: standard output): grouped with colour on a terminal,
    grouped plain lines anywhere else (`per_node`: one plain line per node and finding, on a
    terminal too)."""
    if console is None:  # standard output: a terminal by isatty, whatever FORCE_COLOR says
        from rich.console import Console

        console = Console(force_terminal=sys.stdout.isatty())
    if console.is_terminal and not per_node:
        _tty(report, console, verbose, failures_only)
        return
    console.file.write("".join(line + "\n" for line in lines(report, failures_only, per_node)))
    console.file.flush()


def render_checks(rows: list[dict[str, object]], console: Console | None = None) -> None:
    """`preflight list`: the registered checks as a table (site checks name their file)."""
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    table = Table(title="preflight checks")
    for col in ("id", "scope", "probes", "catches"):
        table.add_column(col)
    for r in rows:
        origin = "" if r["origin"] == "builtin" else f" (site: {Path(str(r['origin'])).name})"
        table.add_row(f"{r['id']}{origin}", str(r["scope"]), str(r["probes"]), str(r["catches"] or r["title"]))
    (console or Console()).print(table)
