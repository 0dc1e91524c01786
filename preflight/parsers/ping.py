"""ping transcripts (iputils, old and new wording; ping6; BusyBox/BSD headers) as facts.

A transcript may hold several runs (a saved session), may stop before the statistics (interrupted,
or elided by the one who pasted it), and errors may come before any header (a name that does not
resolve). Each run keeps the replies it saw by sequence number, the errors by kind (local
"message too long" with the MTU, a hop's "Frag needed" / "Packet too big" with its MTU, host or
net unreachable, unresolved name) and the statistics when printed.
"""

from __future__ import annotations

import re
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
            size = m.group("size") or m.group("size2")
            cur = PingRun(target=m.group("target"), address=m.group("addr").strip(),
                          size=int(size) if size else None,
                          frame=int(m.group("frame")) if m.group("frame") else None, df=df)
            cur.lines.append(line)
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
        mr = _REPLY.match(line)
        if mr:
            cur.replies.append(int(mr.group("seq")))
            continue
        ml = _LOCAL_TOO_LONG.search(line)
        if ml:
            cur.local_too_long = True
            if ml.group(1):
                cur.local_too_long_mtu = int(ml.group(1))
            cur.lines.append(line)
            continue
        mf = _FRAG.search(line) or _PKT_TOO_BIG.search(line)
        if mf:
            cur.frag_from = mf.group("src")
            if mf.group("mtu"):
                cur.frag_needed_mtu = int(mf.group("mtu"))
            if mf.group("seq"):
                cur.error_seqs.append(int(mf.group("seq")))
            cur.lines.append(line)
            continue
        if _UNRESOLVED.search(line):
            cur.unresolved = True
            cur.lines.append(line)
            continue
        if _UNREACH.search(line):
            cur.unreachable = True
            sm = re.search(r"icmp_seq=(\d+)", line)
            if sm:
                cur.error_seqs.append(int(sm.group(1)))
            cur.lines.append(line)
            continue
        ms = _STATS.search(line)
        if ms:
            cur.transmitted = int(ms.group(1))
            cur.received = int(ms.group(2))
            cur.errors = int(ms.group(3) or 0)
            cur.loss = float(ms.group(4))
            cur.stats = True
            cur.lines.append(line)
    return runs


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
