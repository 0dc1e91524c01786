"""ping transcripts (iputils, old and new wording; ping6; BusyBox/BSD headers) as facts.

A transcript may hold several runs (a saved session), may stop before the statistics (interrupted,
or elided by the one who pasted it), and errors may come before any header (a name that does not
resolve). Each run keeps the replies it saw by sequence number, the errors by kind (local
"message too long" with the MTU, a hop's "Frag needed" / "Packet too big" with its MTU, host or
net unreachable, unresolved name) and the statistics when printed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from preflight.framing import Doc
from preflight.parsers.base import Format, ParserSpec

_HEAD = re.compile(r"^PING\s+(?P<target>\S+?)\s*\((?P<addr>[^)]*)\)\s*:?\s*"
                   r"(?:(?P<size>\d+)\((?P<frame>\d+)\) bytes of data|(?P<size2>\d+) data bytes)", re.I)
_REPLY = re.compile(r"^(?P<bytes>\d+) bytes from (?P<src>.+?):\s+(?:icmp_)?seq=(?P<seq>\d+)", re.I)
_STATS = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received(?:, \+(\d+) errors)?"
                    r"(?:, \+\d+ duplicates)?(?:, \+\d+ corrupted)?, ([\d.]+)% packet loss", re.I)
_LOCAL_TOO_LONG = re.compile(r"local error: message too long(?:, mtu[ =]+(\d+))?|sendmsg: message too long|"
                             r"sendto: message too long", re.I)
_FRAG = re.compile(r"From (?P<src>\S+(?: \([^)]*\))?).*?(?:icmp_seq=(?P<seq>\d+) )?Frag(?:mentation)? needed"
                   r"(?: and DF set)?(?: \(mtu = (?P<mtu>\d+)\))?", re.I)
_PKT_TOO_BIG = re.compile(r"From (?P<src>\S+(?: \([^)]*\))?).*?(?:icmp_seq=(?P<seq>\d+) )?Packet too big: mtu=(?P<mtu>\d+)",
                          re.I)
_UNREACH = re.compile(r"Destination (?:Host|Net|Network|Port) Unreachable|Network is unreachable|No route to host",
                      re.I)
_UNRESOLVED = re.compile(r"Name or service not known|unknown host|Temporary failure in name resolution|"
                         r"No address associated with hostname|cannot resolve", re.I)
_CMD = re.compile(r"\bping6?\b(?P<args>.*)$")


@dataclass
class PingRun:
    target: str = ""
    address: str = ""
    size: int | None = None  # payload bytes (-s)
    frame: int | None = None  # IP packet size as ping prints it (size + headers)
    transmitted: int | None = None
    received: int | None = None
    errors: int = 0
    loss: float | None = None  # percent, from the statistics
    replies: list[int] = field(default_factory=list)  # sequence numbers that got a reply
    error_seqs: list[int] = field(default_factory=list)  # sequence numbers that got an ICMP error
    local_too_long_mtu: int | None = None
    local_too_long: bool = False
    frag_needed_mtu: int | None = None
    frag_from: str = ""
    unreachable: bool = False
    unresolved: bool = False
    df: bool | None = None  # `-M do` on the command line (None: command not shown)
    stats: bool = False  # the statistics lines were printed
    lines: list[str] = field(default_factory=list)

    @property
    def ok_replies(self) -> int:
        return self.received if self.received is not None else len(set(self.replies))


@dataclass
class PingFacts:
    runs: list[PingRun] = field(default_factory=list)
    excerpt: bool = False


def parse_runs(lines: list[str], command: str = "") -> list[PingRun]:
    """The runs of a ping transcript, in order; `command` (the ping command line) says whether
    the runs forbade fragmenting (`-M do`)."""
    runs: list[PingRun] = []
    cur: PingRun | None = None
    df = None
    cm = _CMD.search(command or "")
    if cm:
        df = bool(re.search(r"-M\s*do\b|-D\b", cm.group("args")))
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        m = _HEAD.match(line)
        if m:
            cur = _new_run(m, line, df)
            runs.append(cur)
            continue
        if cur is None:
            # errors printed before any PING header (unresolvable name, no route)
            if _UNRESOLVED.search(line) or _UNREACH.search(line) or _LOCAL_TOO_LONG.search(line):
                cur = PingRun(df=df)
                runs.append(cur)
            else:
                # a ping command line without a prompt (an indented transcript) names the target
                pm = re.match(r"^(?:sudo\s+)?ping6?\s+(?P<args>.+)$", line)
                if pm:
                    df = bool(re.search(r"-M\s*do\b", pm.group("args")))
                continue
        for find, on_match in _RUN_LINES:  # the first kind that matches says what the line is
            mm = find(line)
            if mm:
                on_match(cur, mm, line)
                break
    return runs


def _new_run(m: re.Match[str], line: str, df: bool | None) -> PingRun:
    """A run from its `PING target (address) size(frame) bytes of data` header."""
    size = m.group("size") or m.group("size2")
    run = PingRun(target=m.group("target"), address=m.group("addr").strip(), size=int(size) if size else None,
                  frame=int(m.group("frame")) if m.group("frame") else None, df=df)
    run.lines.append(line)
    return run


def _on_reply(run: PingRun, m: re.Match[str], line: str) -> None:
    run.replies.append(int(m.group("seq")))


def _on_local_too_long(run: PingRun, m: re.Match[str], line: str) -> None:
    run.local_too_long = True
    if m.group(1):
        run.local_too_long_mtu = int(m.group(1))
    run.lines.append(line)


def _on_frag_needed(run: PingRun, m: re.Match[str], line: str) -> None:
    """A hop's `Frag needed` / `Packet too big`, with the MTU it allows."""
    run.frag_from = m.group("src")
    if m.group("mtu"):
        run.frag_needed_mtu = int(m.group("mtu"))
    if m.group("seq"):
        run.error_seqs.append(int(m.group("seq")))
    run.lines.append(line)


def _on_unresolved(run: PingRun, m: re.Match[str], line: str) -> None:
    run.unresolved = True
    run.lines.append(line)


def _on_unreachable(run: PingRun, m: re.Match[str], line: str) -> None:
    run.unreachable = True
    sm = re.search(r"icmp_seq=(\d+)", line)
    if sm:
        run.error_seqs.append(int(sm.group(1)))
    run.lines.append(line)


def _on_stats(run: PingRun, m: re.Match[str], line: str) -> None:
    run.transmitted = int(m.group(1))
    run.received = int(m.group(2))
    run.errors = int(m.group(3) or 0)
    run.loss = float(m.group(4))
    run.stats = True
    run.lines.append(line)


# The lines of a run by kind, tried in order: (finder, handler)
_RUN_LINES: tuple[tuple[Callable[[str], re.Match[str] | None], Callable[[PingRun, re.Match[str], str], None]], ...] = (
    (_REPLY.match, _on_reply), (_LOCAL_TOO_LONG.search, _on_local_too_long), (_FRAG.search, _on_frag_needed),
    (_PKT_TOO_BIG.search, _on_frag_needed), (_UNRESOLVED.search, _on_unresolved), (_UNREACH.search, _on_unreachable),
    (_STATS.search, _on_stats),
)


def parse(doc: Doc) -> PingFacts:
    return PingFacts(runs=parse_runs([ln.text for ln in doc.lines], doc.command), excerpt=doc.excerpt)


def detect(doc: Doc) -> bool:
    head = [ln.text.strip() for ln in doc.head(400)]
    if not any(_HEAD.match(t) for t in head):
        return False
    return any(_STATS.search(t) or _REPLY.match(t) or _FRAG.search(t) or _PKT_TOO_BIG.search(t)
               or _LOCAL_TOO_LONG.search(t) or _UNREACH.search(t) for t in head) or doc.excerpt


FORMATS = [Format("ping", detect=detect, priority=55, description="ping transcript (iputils, ping6), any -M do size")]
PARSERS = [ParserSpec("ping", parse), ParserSpec("ping-jumbo-", parse, prefix=True),
           ParserSpec("ping-small-", parse, prefix=True)]

__all__ = ["FORMATS", "PARSERS", "PingFacts", "PingRun", "detect", "parse", "parse_runs"]
