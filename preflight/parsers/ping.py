"""ping transcripts as facts: iputils ping/ping6 (s20121221 - 20250605), BusyBox, BSD/macOS, Windows.

A transcript may hold several runs (a saved session), may stop before the statistics (interrupted,
or elided by the one who pasted it), and errors may come before any header (a name that does not
resolve). A paste may also hold only the end of a run: the statistics and round-trip lines, or
the error lines of a `-M do` probe (`ping: local error: message too long, mtu=1500`, `ping:
sendmsg: Message too long`, `From <hop> icmp_seq=N Frag needed and DF set (mtu = M)`), without
the header: such a run has no target and no size (`headed` False) unless the command line above
it gives them, and each further statistics line starts the next headerless run. Each run keeps the replies it saw by sequence number, the errors by kind (local
"message too long" with the MTU, a hop's "Frag needed" / "Packet too big" with its MTU, host or
net unreachable, unresolved name), the probes that went unanswered ("no answer yet", "Request
timeout") and the statistics when printed. Whether a run forbade fragmenting (`-M do`, BSD `-D`,
Windows `-f`) comes from its command line when the paste shows it. Lines are found anywhere in a
line, so a log prefix the framing layer does not know does not hide them.

A transcript flattened and re-wrapped by a wiki or a mail reader is read as well: Markdown
escapes (`icmp\\_seq`) are undone, a line that joins several messages (replies, a header after
its command line, the statistics) is cut where each message starts, and a message cut at the end
of a line (`... bytes of data. From` / `host (addr) icmp_seq=1 Frag needed ...`) is joined with
the next line.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from preflight import lazyre
from preflight.framing import Doc
from preflight.parsers.base import Format, ParserSpec

# IPv4 (20) + ICMP (8) headers; IPv6 (40) + ICMPv6 (8): protocol constants, not thresholds.
IPV4_ICMP_HEADERS = 28
IPV6_ICMP_HEADERS = 48

_P = r"(?:^|(?<=[\s:\]>|)]))"  # a message starts a line or follows a prefix the framing left
_HEAD = lazyre.compile(_P + r"PING\s+(?P<target>[^\s(]+)\s*\((?P<addr>[^)]*)\)\s*(?:,\s*flow\s+0x[0-9a-f]+,\s*)?"
                   r"(?:from\s+\S+?(?:\s+[^\s:]+)?\s*:\s*)?:?\s*"
                   r"(?:(?P<size>\d+)\((?P<frame>\d+)\) bytes\b|(?P<size2>\d+) data bytes)", re.I)
_HEAD_BSD6 = lazyre.compile(_P + r"PING6\((?P<frame>\d+)=\d+\+\d+\+(?P<size>\d+) bytes\)\s+\S+\s+-->\s+(?P<target>\S+)")
_HEAD_WIN = lazyre.compile(_P + r"Pinging\s+(?P<target>\S+)\s+(?:\[(?P<addr>[^\]]+)\]\s+)?with\s+(?P<size>\d+)\s+bytes of data",
                       re.I)
_REPLY = lazyre.compile(r"(?<![\w.])(?P<bytes>\d+) bytes from (?P<src>.+?)[:,]\s+(?:icmp_)?seq=(?P<seq>\d+)", re.I)
_REPLY_WIN = lazyre.compile(_P + r"Reply from (?P<src>[^:]+):\s+bytes[=<](?P<bytes>\d+)", re.I)
# iputils: `N packets transmitted, M received[, +D duplicates][, +C corrupted][, +E errors][, L% packet loss,
# time Tms]` (no loss and time when nothing was sent); BSD/macOS `M packets received, +D duplicates, L% packet
# loss`; BusyBox `M packets received, [D duplicates, ]L% packet loss` (no `+`)
_STATS = lazyre.compile(r"(?P<tx>\d+) packets transmitted, (?P<rx>\d+) (?:packets )?received(?P<extra>(?:, \+?\d+ \w+)*)"
                    r"(?:, (?P<loss>[\d.]+)% packet loss)?", re.I)
# the round-trip line after the statistics (printed only when a reply came back): iputils `rtt
# min/avg/max/mdev = a/b/c/d ms[, pipe N][, ipg/ewma x/y ms]`, BSD `round-trip min/avg/max/stddev =`,
# BusyBox `round-trip min/avg/max =`
_RTT = lazyre.compile(r"(?:rtt|round-trip) min/avg/max(?:/(?:mdev|stddev|std-dev|jitter))? = "
                  r"(?P<min>[\d.]+)/(?P<avg>[\d.]+)/(?P<max>[\d.]+)", re.I)
_STATS_WIN = lazyre.compile(r"Packets: Sent = (?P<tx>\d+), Received = (?P<rx>\d+), Lost = \d+ \((?P<loss>[\d.]+)% loss\)",
                        re.I)
_LOCAL_TOO_LONG = lazyre.compile(r"local error: message too long(?:,\s*mtu\s*[=:]\s*(\d+))?|"
                             r"send(?:msg|to)(?:\(\))?: message too long|"
                             r"Packet needs to be fragmented but DF set", re.I)
_FROM = r"(?:From\s+(?P<src>\S+?(?:\s+\([^)]*\))?):?\s+|(?P<bsd>\d+) bytes from (?P<bsdsrc>\S+?):\s+)"
_FRAG = lazyre.compile(_FROM + r"(?:icmp_seq=(?P<seq>\d+)\s+)?Frag(?:mentation)? needed(?: and DF set)?"
                   r"(?:\s*\((?:mtu|MTU)\s*=?\s*(?P<mtu>\d+)\))?", re.I)
_PKT_TOO_BIG = lazyre.compile(_FROM + r"(?:icmp_seq=(?P<seq>\d+)\s+)?Packet too big:?\s*mtu\s*[=:]?\s*(?P<mtu>\d+)", re.I)
_UNREACH = lazyre.compile(r"Destination (?:Host|Net|Network|Port|Protocol) (?:Unreachable|Unknown|Prohibited)|"
                      r"Destination unreachable|Network is unreachable|No route to host|Host is down|"
                      r"Time to live exceeded|Time exceeded|Communication prohibited|Packet filtered|"
                      r"General failure", re.I)
_UNRESOLVED = lazyre.compile(r"Name or service not known|unknown host|Temporary failure in name resolution|"
                         r"No address associated with hostname|cannot resolve|Name does not resolve|bad address|"
                         r"nodename nor servname provided|could not find host", re.I)
# errors a ping prints before any header (its own invocation): a name that does not resolve, no route
_BEFORE_HEADER = lazyre.compile(r"connect: (?:Network is unreachable|No route to host)", re.I)
_UNRESOLVED_NAME = lazyre.compile(r"(?:unknown host|cannot resolve|bad address)\s+'?(?P<n1>[^\s:']+)|"
                              r"ping6?: (?P<n2>[^\s:]+): ", re.I)
_TIMEOUT = lazyre.compile(r"no answer yet for icmp_seq=(?P<seq>\d+)|Request timeout for icmp_seq (?P<seq2>\d+)|"
                      r"(?P<win>Request timed out)", re.I)
_CMD = lazyre.compile(r"(?:^|[\s/;|&(])(?:ping6?|PING|ping\.exe)(?=\s|$)(?P<args>.*)$")
_INLINE_CMD = lazyre.compile(r"^(?:sudo\s+)?(?:ping6?|ping\.exe)\s+(?P<args>.+)$")
# where a message starts inside a line (a flattened paste joins several on one line): a header, a
# reply, an error, the statistics, ping's own `ping: ...` messages, a ping command with options
_STARTS = lazyre.compile(r"\s+(?=PING6?(?:[\s(]|$)|Pinging\s|\d+ bytes from\s|From(?:\s|$)|Reply from\s|Request time|"
                     r"no answer yet|---\s+\S+\s+ping statistics|\d+ packets transmitted|Packets: Sent|ping6?:\s|(?:sudo\s+)?ping6?\s+-)")
_OPENING = lazyre.compile(r"^(?:PING6?(?:[\s(]|$)|Pinging\s|\d+ bytes from\s|From(?:\s|$)|Reply from\s|---\s+\S+\s+ping statistics|"
                      r"(?:sudo\s+)?ping6?\s+-)")
# Markdown escapes a wiki or a rendered page puts before punctuation (`icmp\_seq`, `\-M`)
_ESCAPE = lazyre.compile(r"\\([\\`*_{}\[\]()#+\-.!~$|<>])")


@dataclass
class PingRun:
    target: str = ""
    address: str = ""
    size: int | None = None  # payload bytes (-s)
    frame: int | None = None  # IP packet size (as ping prints it, else size + headers)
    transmitted: int | None = None
    received: int | None = None
    errors: int = 0
    loss: float | None = None  # percent, from the statistics
    replies: list[int] = field(default_factory=list)  # sequence numbers that got a reply
    error_seqs: list[int] = field(default_factory=list)  # sequence numbers that got an ICMP error
    timeouts: list[int] = field(default_factory=list)  # probes reported unanswered (no answer yet, Request timeout)
    local_too_long_mtu: int | None = None
    local_too_long: bool = False
    frag_needed_mtu: int | None = None
    frag_from: str = ""
    unreachable: bool = False
    unresolved: bool = False
    df: bool | None = None  # fragmenting forbidden (`-M do`); None: command not shown
    flavor: str = "iputils"  # iputils | bsd | windows (the header's layout)
    stats: bool = False  # the statistics lines were printed
    rtt_avg_ms: float | None = None  # the round-trip line's average (a reply came back)
    headed: bool = False  # the run's PING header was shown (without it: target and size only from a command line)
    lines: list[str] = field(default_factory=list)

    @property
    def ok_replies(self) -> int:
        return self.received if self.received is not None else len(set(self.replies))

    @property
    def reported_mtu(self) -> int | None:
        """The MTU an error reported: the local one (message too long), else the hop's."""
        return self.local_too_long_mtu or self.frag_needed_mtu


@dataclass
class PingFacts:
    runs: list[PingRun] = field(default_factory=list)
    excerpt: bool = False
    unread: list[str] = field(default_factory=list)  # ping's own error lines no rule reads


# ping's own messages on stderr (iputils error(): `ping: <text>`; older perror()/fprintf: the same
# prefix), other than its warnings (`ping: Warning: ...`) and the texts the run lines read
_OWN_ERROR = lazyre.compile(r"(?:^|\s)ping6?: (?!warning\b)\S", re.I)


def unread_errors(lines: list[str]) -> list[str]:
    """ping's own error lines that no rule of this parser reads (`ping: socket: Operation not
    permitted`, `ping: sendmsg: No buffer space available`, `ping: local error: <errno text>`)."""
    return [t for t in segments(lines) if _OWN_ERROR.search(t) and not _BEFORE_HEADER.search(t)
            and not any(find(t) for find, _ in _RUN_LINES)]


# the program names of a ping (a path before them is dropped); commands that only show a ping
# command line as text (`echo 'ping -M do ...'`, a grep for it), never run it
_PING_NAMES = frozenset({"ping", "ping6", "ping.exe", "PING", "PING.EXE"})
_SHOWS_TEXT = frozenset({"echo", "printf", "grep", "egrep", "fgrep", "zgrep", "rg", "cat", "less", "man", "which",
                         "type", "history", "tee"})
# a redirection (`2>&1`, `>/dev/null`, `< in`): not an argument of the command
_REDIRECT = lazyre.compile(r"(?:^|(?<=\s))\d*(?:>>?|<)&?\s*[^\s'\"]+")
_DEPTH = 4  # quoted commands inside quoted commands read at most (pdsh 'ssh h "ping ..."')


def _simple_commands(command: str) -> list[list[str]] | None:
    """The words of each simple command of a shell line (cut at `;`, `|`, `&&`, `||`, `&`,
    parentheses), quotes removed, redirections dropped; None when the line does not split
    (an unbalanced quote)."""
    lex = shlex.shlex(_REDIRECT.sub(" ", command), posix=True, punctuation_chars=";|&()")
    lex.whitespace_split = True
    lex.commenters = ""
    try:
        words = list(lex)
    except ValueError:
        return None
    out: list[list[str]] = [[]]
    for w in words:
        if w and not w.strip(";|&()"):
            out.append([])
        else:
            out[-1].append(w)
    return [c for c in out if c]


@functools.lru_cache(maxsize=4096)  # pragma: no mutate (a cache: a paste of many runs asks for its commands once per run)
def command_args(command: str, depth: int = 0) -> str | None:
    """The arguments of the ping a command line runs, read through what runs it: `sudo`,
    `timeout 5`, `srun -l -N1`, `env`, and a command in quotes given to pdsh, clush, ssh or
    `sh -c` (`pdsh -w h 'ping -M do -s 8972 h2'` gives `-M do -s 8972 h2`); None when the line
    runs no ping (`echo 'ping ...'` only prints one)."""
    if not command or depth > _DEPTH:
        return None
    simple = _simple_commands(command)
    if simple is None:  # not a shell line: the words after the first `ping`, as written
        cm = _CMD.search(command)
        return cm.group("args").strip() if cm else None
    for words in simple:
        names = [re.split(r"[/\\]", w)[-1] for w in words]
        if names[0] in _SHOWS_TEXT:
            continue
        for i, name in enumerate(names):
            if name in _PING_NAMES:
                return " ".join(words[i + 1:])
        for w in words[1:]:
            if any(c.isspace() for c in w):  # a quoted command handed to a launcher
                args = command_args(w, depth + 1)
                if args is not None:
                    return args
    return None


def df_of(command: str, flavor: str = "iputils") -> bool | None:  # pragma: no mutate (any other default reads as iputils)
    """Whether a ping command line forbids fragmenting: iputils `-M do|probe` (another `-M`, or
    none: the kernel may fragment locally), BSD/macOS `-D`, Windows `-f`; None when `command` is
    not a ping command line. (iputils' own -D prints time stamps and -f floods.)"""
    args = command_args(command)
    if args is None:
        return None
    if flavor == "bsd":
        return bool(re.search(r"(?:^|\s)-[a-zA-Z]*D", args))
    if flavor == "windows":
        return bool(re.search(r"(?:^|\s)[-/]f\b", args))
    pm = re.search(r"(?:^|\s)-M\s*(\w+)", args)
    return pm is not None and pm.group(1) in ("do", "probe")


def _frame(size: int | None, address: str) -> int | None:
    """The IP packet a payload makes: an IPv6 address (it has colons) adds 48 bytes, IPv4 28."""
    if size is None:
        return None
    return size + (IPV6_ICMP_HEADERS if ":" in address else IPV4_ICMP_HEADERS)


# iputils/BSD options that take a value (the payload size is -s; Windows' is -l)
_VALUED = frozenset("cWwisIltQpSmMTFhNbgzV")


def _from_command(command: str) -> PingRun | None:
    """The run a ping command line starts, for a transcript that does not show its header (the
    poster cut it): its target and payload size from the options; None when it is no ping."""
    args = command_args(command)
    if args is None:
        return None
    toks = args.split()
    run, i = PingRun(), 0
    while i < len(toks):
        t = toks[i]
        if t[:1] in "-/" and len(t) > 1 and not t[1].isdigit():
            value = t[2:] or (toks[i + 1] if t[1] in _VALUED and i + 1 < len(toks) else "")
            i += 1 if t[2:] or t[1] not in _VALUED else 2
            if t[1] in "sl" and value.isdigit():
                run.size = int(value)
            continue
        run.target = run.address = t
        i += 1
    run.frame = _frame(run.size, run.address)
    return run


def _new_run(line: str) -> PingRun | None:
    """A run from its header: `PING target (address) size(frame) bytes of data` (iputils),
    `PING target (address): size data bytes` (BSD, BusyBox), `PING6(frame=40+8+size bytes) src --> dst`,
    `Pinging target [address] with size bytes of data:` (Windows)."""
    m = _HEAD.search(line)
    if m:
        size_text = m.group("size") or m.group("size2")
        size = int(size_text) if size_text else None
        run = PingRun(target=m.group("target"), address=m.group("addr").strip(), size=size,
                      frame=int(m.group("frame")) if m.group("frame") else None,
                      flavor="bsd" if re.search(r"\)\s*:\s*\d+ data bytes", line) else "iputils")
    else:
        m6 = _HEAD_BSD6.search(line)
        mw = _HEAD_WIN.search(line) if m6 is None else None
        if m6:
            run = PingRun(target=m6.group("target"), address=m6.group("target"), size=int(m6.group("size")),
                          frame=int(m6.group("frame")), flavor="bsd")
        elif mw:
            run = PingRun(target=mw.group("target"), address=mw.group("addr") or mw.group("target"),
                          size=int(mw.group("size")), flavor="windows")
        else:
            return None
    run.frame = run.frame or _frame(run.size, run.address)
    run.headed = True
    run.lines.append(line)
    return run


def _orphan(line: str) -> PingRun:
    """The run of a ping that failed before its header; its target when the message names it."""
    m = _UNRESOLVED_NAME.search(line)
    name = (m.group("n1") or m.group("n2")) if m else ""
    return PingRun(target="" if name == "connect" else name)


def _seq(m: re.Match[str], *names: str) -> int | None:
    for name in names:
        if m.group(name):
            return int(m.group(name))
    return None


def _on_reply(run: PingRun, m: re.Match[str], line: str) -> None:
    run.replies.append(int(m.group("seq")))


def _on_reply_win(run: PingRun, m: re.Match[str], line: str) -> None:
    """Windows prints no sequence number: replies are numbered in order."""
    run.replies.append(len(run.replies) + len(run.timeouts) + 1)


def _on_timeout(run: PingRun, m: re.Match[str], line: str) -> None:
    seq = _seq(m, "seq", "seq2")
    run.timeouts.append(seq if seq is not None else len(run.replies) + len(run.timeouts) + 1)
    run.lines.append(line)


def _on_local_too_long(run: PingRun, m: re.Match[str], line: str) -> None:
    run.local_too_long = True
    if m.group(1):
        run.local_too_long_mtu = int(m.group(1))
    run.lines.append(line)


def _on_frag_needed(run: PingRun, m: re.Match[str], line: str) -> None:
    """A hop's `Frag needed` / `Packet too big`, with the MTU it allows."""
    run.frag_from = m.group("src") or m.group("bsdsrc")
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
    run.transmitted = int(m.group("tx"))
    run.received = int(m.group("rx"))
    em = re.search(r"\+(\d+) errors", m.groupdict().get("extra") or "")
    run.errors = int(em.group(1)) if em else 0
    run.loss = float(m.group("loss")) if m.group("loss") else None
    run.stats = True
    run.lines.append(line)


def _on_rtt(run: PingRun, m: re.Match[str], line: str) -> None:
    run.rtt_avg_ms = float(m.group("avg"))
    run.lines.append(line)


Finder = Callable[[str], "re.Match[str] | None"]  # pragma: no mutate (a type alias: its text is not run)
Handler = Callable[[PingRun, "re.Match[str]", str], None]  # pragma: no mutate (a type alias: its text is not run)
# The lines of a run by kind, tried in order: (finder, handler)
_RUN_LINES: tuple[tuple[Finder, Handler], ...] = (
    (_REPLY.search, _on_reply), (_REPLY_WIN.search, _on_reply_win), (_LOCAL_TOO_LONG.search, _on_local_too_long),
    (_FRAG.search, _on_frag_needed), (_PKT_TOO_BIG.search, _on_frag_needed), (_UNRESOLVED.search, _on_unresolved),
    (_UNREACH.search, _on_unreachable), (_TIMEOUT.search, _on_timeout), (_STATS.search, _on_stats),
    (_STATS_WIN.search, _on_stats), (_RTT.search, _on_rtt),
)
_ORPHAN = (_UNRESOLVED, _UNREACH, _LOCAL_TOO_LONG)  # lines that make a run even before any header


# what a terminal shows of a command stopped before it printed anything: the shell's report of
# the signal (`Killed`, `Terminated`, `[1]+  Killed  ping ...`), the echo of an interrupt (`^C`),
# the launcher's (`srun: error: node: task 0: Killed`, slurmstepd's `*** STEP ... CANCELLED ...`,
# pdsh's `ssh exited with exit code 137`: 128 + the signal)
_STOPPED = lazyre.compile(r"^(?:\[\d+\][+-]?\s+)?(?:Killed|Terminated|Hangup|Interrupt|Quit(?: \(core dumped\))?|"
                          r"Stopped|\^[C\\Z])\b.*$|^\^[C\\Z]$|"
                          r"^srun: (?:error: \S+: tasks? [\d,-]+: (?:Killed|Terminated|Exited with exit code \d+)|"
                          r"(?:error: )?\*+ STEP \S+ .*CANCELLED\b.*|Job step aborted.*|forcing job termination)$|"
                          r"^slurmstepd(?:-\S+)?: error: \*+ (?:STEP|JOB) \S+ .*CANCELLED\b.*$|"
                          r"^pdsh@\S+: \S+: ssh exited with exit code 1(?:2[89]|[3-5]\d)$")


def _commands(command: str) -> list[str]:
    """The ping command lines among the paste's commands (prompts joined by " ; ")."""
    return [c for c in command.split(" ; ") if command_args(c) is not None]


def _assign_df(runs: list[PingRun], headed: list[PingRun], command: str, inline: dict[int, str]) -> None:
    """Each run's `df` from the command lines: its own line inside the text, else one per run
    when the paste shows as many commands as headers (several prompts), else the one setting
    they all share."""
    cmds = _commands(command)
    for run in runs:
        if id(run) in inline:
            run.df = df_of(inline[id(run)], run.flavor)
        elif len(cmds) == len(headed) and run in headed:
            run.df = df_of(cmds[headed.index(run)], run.flavor)
        else:
            dfs = {df_of(c, run.flavor) for c in cmds}
            run.df = dfs.pop() if len(dfs) == 1 else None


def _complete(seg: str) -> bool:
    """A segment that is a whole message: a header, a line of a run, a command line that does not
    end with an option (waiting for its value), or not a message's opening at all."""
    if not _OPENING.match(seg):
        return True
    if _INLINE_CMD.match(seg):
        return not seg.split()[-1].startswith("-")
    return _is_header(seg) or any(find(seg) for find, _ in _RUN_LINES) or bool(_BEFORE_HEADER.search(seg))


def _cut(text: str, carry_ok: bool) -> tuple[list[str], str]:
    """`text` cut where each message starts, and the last message when it is cut off at the end of
    the line (`carry_ok`) and must wait for the next line. Text before the first message stays
    with it (a prefix the framing left: `[node3] PING ...`), unless that message is a command line."""
    starts = [m.end() for m in _STARTS.finditer(text)]
    end = len(text)
    tail = ""
    last = starts[-1] if starts else 0
    if carry_ok and not _complete(text[last:]):
        tail, end = text[last:].strip(), last
        starts = starts[:-1]
    if starts and not _OPENING.match(text) and not _INLINE_CMD.match(text[starts[0]:end]):
        starts = starts[1:]
    bounds = [0, *starts, end]
    return [p for p in (text[a:b].strip() for a, b in zip(bounds, bounds[1:], strict=False)) if p], tail


def segments(lines: list[str]) -> list[str]:
    """The messages of a transcript in order: each line with its Markdown escapes undone and cut
    where a message starts; a message opening cut at the end of a line (not yet a whole message)
    joined with the next line (a blank line ends it). Only a message that starts after the text a
    line carried in can be carried on, so each character is read a bounded number of times."""
    out: list[str] = []
    carry = ""
    for raw in lines:
        line = _ESCAPE.sub(r"\1", raw.strip())
        if not line:
            out.extend([carry] if carry else [])
            carry = ""
            continue
        text = f"{carry} {line}" if carry else line
        parts, tail = _cut(text, not carry or _STARTS.search(text) is not None)
        out.extend(parts)
        carry = tail
    out.extend([carry] if carry else [])
    return out


def parse_runs(lines: list[str], command: str = "") -> list[PingRun]:
    """The runs of a ping transcript, in order; `command` (the ping command line(s) of the paste)
    says whether the runs forbade fragmenting."""
    runs: list[PingRun] = []
    headed: list[PingRun] = []
    inline: dict[int, str] = {}  # runs whose command line is inside the text (no prompt)
    pending = ""
    cur: PingRun | None = None
    for line in segments(lines):
        run = _new_run(line) if "PING" in line.upper() else None
        if run is not None:
            cur = run
            runs.append(run)
            headed.append(run)
            if pending:
                inline[id(run)] = pending
                pending = ""
            continue
        if _INLINE_CMD.match(line):  # a ping command line inside the text (an indented transcript, no prompt)
            pending = line
            continue
        if _UNRESOLVED.search(line) or _BEFORE_HEADER.search(line):
            cur = _orphan(line)  # a ping of its own that stopped before its header
            runs.append(cur)
        elif cur is None or (not cur.headed and cur.stats and _is_result(line)):
            # no run yet, or a headerless run's statistics already read: this result starts the next one
            started = _from_command(command) if len(_commands(command)) == 1 and not runs else None
            if not (_is_result(line) or _RTT.search(line) or any(rx.search(line) for rx in _ORPHAN)):
                continue
            # the command's run, its header cut from the paste; else results or errors without any header
            cur = started or PingRun()
            runs.append(cur)
        for find, on_match in _RUN_LINES:  # the first kind that matches says what the line is
            mm = find(line)
            if mm:
                on_match(cur, mm, line)
                break
    cmds = _commands(command)
    if not runs and len(cmds) == 1 and all(_STOPPED.match(t) for t in segments(lines)):
        # the ping ran and printed no result (killed, interrupted, or its output not shown): a run with none
        started = _from_command(cmds[0])
        if started is not None:
            started.lines = [cmds[0], *(t for t in segments(lines))]
            runs.append(started)
    _assign_df(runs, headed, command, inline)
    return runs


def parse(doc: Doc) -> PingFacts:
    texts = [ln.text for ln in doc.lines]
    if len(doc.parts) > 1 and sum(n for n, _ in doc.parts) == len(texts):  # several pastes, each under its command
        runs: list[PingRun] = []
        at = 0
        for n, command in doc.parts:
            runs += parse_runs(texts[at:at + n], command)
            at += n
        return PingFacts(runs=runs, excerpt=doc.excerpt, unread=unread_errors(texts))
    return PingFacts(runs=parse_runs(texts, doc.command), excerpt=doc.excerpt, unread=unread_errors(texts))


def _is_header(t: str) -> bool:
    return bool(_HEAD.search(t) or _HEAD_BSD6.search(t) or _HEAD_WIN.search(t))


def _is_result(t: str) -> bool:
    return any(rx.search(t) for rx in (_STATS, _STATS_WIN, _REPLY, _REPLY_WIN, _FRAG, _PKT_TOO_BIG, _LOCAL_TOO_LONG,
                                       _UNREACH, _TIMEOUT))


def _headless(t: str) -> bool:
    """A line only ping prints, recognisable without the header above it: the statistics, the
    round-trip line, a reply or a hop's error naming its icmp_seq."""
    return bool(_STATS.search(t) or _RTT.search(t) or _FRAG.search(t) or _PKT_TOO_BIG.search(t)
                or (_REPLY.search(t) and re.search(r"\bicmp_seq=\d", t)))


def detect(doc: Doc) -> bool:
    head = segments([ln.text for ln in doc.head(400)])  # pragma: no mutate (how far detection reads)
    if not any(_is_header(t) for t in head):
        # errors of a ping that stopped before its header (the name did not resolve, no route):
        # under a ping command line, or in ping's own `ping: ...` wording; the statistics or a
        # reply / hop error pasted without the header
        own = [t for t in head if re.search(r"(?:^|\s)ping6?: ", t)]
        if command_args(doc.command) is not None:  # under its command: its errors, or results whose header was cut
            if all(_STOPPED.match(t) for t in head):  # it printed nothing (or only the shell's `Killed`, `^C`)
                return True
            return any(rx.search(t) for t in head for rx in (*_ORPHAN, _OWN_ERROR)) or any(_is_result(t) for t in head)
        return any(rx.search(t) for t in own for rx in _ORPHAN) or any(_headless(t) for t in head)
    return any(_is_result(t) for t in head) or doc.excerpt


# Words without which `detect` cannot say yes: a header (PING, PING6, Pinging), ping's own
# `ping:` errors or a ping command line (the folded head holds the command), and the headless
# lines `_headless` reads (statistics, round-trip line, replies, fragmentation errors).
# The word ping starts a message, follows a prefix (`_P`), starts a command (`_CMD`) or a quoted one (pdsh, ssh).
_COULD_PING = lazyre.compile(r"""(?<![^\s:\]>|)/;&('"])ping""")
_COULD = ("packets transmitted", "min/avg/max", "frag", "packet too big", "bytes from")


def could(doc: Doc) -> bool:
    """A cheap necessary condition of `detect` (C-speed searches of the head)."""
    head = doc.head_folded(400)  # pragma: no mutate (the same lines detect reads)
    return any(w in head for w in _COULD) or ("ping" in head and _COULD_PING.search(head) is not None)


FORMATS = [Format("ping", detect=detect, could=could, priority=55,
                  description="ping transcript (iputils ping/ping6, BusyBox, BSD/macOS, Windows), any size")]
PARSERS = [ParserSpec("ping", parse), ParserSpec("ping-jumbo-", parse, prefix=True),
           ParserSpec("ping-small-", parse, prefix=True)]

__all__ = ["FORMATS", "IPV4_ICMP_HEADERS", "IPV6_ICMP_HEADERS", "PARSERS", "PingFacts", "PingRun", "detect", "df_of",
           "parse", "parse_runs", "segments", "unread_errors"]
