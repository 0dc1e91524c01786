"""Framing: peel what terminals, launchers and loggers wrap around a tool's output.

Operators paste tool output with its surroundings: a shell prompt and the command above it,
`pdsh`/`clush` host prefixes, `srun -l` task labels, torchrun and mpirun rank tags, syslog,
journald, dmesg and container time stamps, grep separators, ANSI colours. This module takes
raw text and gives back documents of clean lines; what it strips is kept as metadata on each
line (host, rank, time, syslog identifier). Every parser and every format detector reads these
clean lines, so a format is recognised whatever its framing. Pure: no I/O.

Layers, outermost first:
  structure   shell prompt lines (a new command: a new document), `\\`-continued commands,
              grep `--` separators, journalctl `-- ... --` markers, Markdown code fences,
              `dshbak`/`clubak` host headers, ansible and pssh per-host headers, `...` elisions
  transport   decided per document by what most lines carry: pdsh/clush `host: `, `srun -l`
              ` 3: `, mpirun `[1,3]<stdout>:` and `[3] `, torchrun `[default3]:` / `[rank3]:`,
              kubectl `[pod/name/container] `, Ray `(pid=N, ip=A) `, `> ` quotes
  log         always recognised, in any stack: container runtime (CRI, docker json-file),
              RFC 5424 and RFC 3164 syslog (with or without host), journalctl short,
              short-iso, short-precise, short-monotonic, short-unix, dmesg raw `[secs]`,
              `-T`/`--ctime`, `--time-format=iso`, `--decode` facility:level, /dev/kmsg
              records, printk `<N>` levels, bracketed and Go-style time stamps, a bare
              `kernel: ` identifier, and time-stamp-only lines (CloudWatch exports) whose
              time goes to the next line

A line that carries none of the log framing of its neighbours (a dmesg continuation such as
`NVRM: nvidia-bug-report.sh as root ...`) inherits the previous line's time and host and is
marked as a continuation.

Large inputs: `Doc.select(needles)` peels only the lines that contain one of the needles (a
substring scan at C speed), so a parser that needs a few lines of a million reads them
without framing the rest.
"""

from __future__ import annotations

import bisect
import html
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import Any

from preflight import lazyre

MONTHS = {m: i for i, m in enumerate(
    ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], start=1)}
_MON = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_DOW = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_ISO_T = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d(?::?\d\d)?)?"

SNIFF_LINES = 2000  # lines read to decide a document's transport framing
SMALL_TEXT = 4 * 1024 * 1024  # below this, whole-text scans are cheap
# a format detector that looks past the first lines reads a bigger document's first and last
# this many characters: a format shows itself where its tool starts or where it ends (a job's
# init lines, its last error), and a detector must not cost a scan of every byte of every input
DETECT_ENDS = 2 * 1024 * 1024
_DEPTH = 6  # log-framing layers peeled from one line at most


# ---------------------------------------------------------------------------------------------
# Lines and documents


@dataclass(slots=True)
class Line:
    """One line with its framing peeled. `text` is what the tool printed; `raw` the line as it
    came (terminal escapes removed), for quoting as evidence."""

    text: str
    n: int  # 1-based line number in the input
    raw: str
    host: str = ""
    rank: int | None = None
    time: datetime | None = None  # wall time (naive: the node's local time)
    mono: float | None = None  # seconds since boot (dmesg raw, kmsg, short-monotonic)
    time_text: str = ""
    ident: str = ""  # syslog identifier: "kernel", "systemd-networkd", "nv-fabricmanager" ...
    layers: tuple[str, ...] = ()  # framing layers peeled, outermost first
    cont: bool = False  # a continuation of the previous record (no framing of its own)

    @property
    def stamped(self) -> bool:
        """The line carried a log time stamp or identifier of its own."""
        return bool(self.time_text or self.ident)


@dataclass(slots=True)
class Hit:
    """A line found by `Doc.scan`, before peeling: its raw text, line number (0 until it is
    peeled) and offset in the document's text (-1 when the document was already peeled and
    `line` is set)."""

    raw: str
    n: int
    start: int
    line: Line | None = None
    at: int = -1  # where in `raw` the first needle is (-1: not known)


@dataclass(frozen=True)
class Stack:
    """The transport layers a document's lines carry (sniffed once per document)."""

    outer: tuple[str, ...] = ()
    host_ident: bool = False  # syslog lines are `host ident: message` for any identifier
    inner: tuple[str, ...] = ()  # layers after the log framing (a logger's level word)

    def __bool__(self) -> bool:
        return bool(self.outer or self.inner)


class Doc:
    """One run of text with one framing: the output of one command on one host.

    `lines` peels every line (cached); `head(n)` only the first n; `select(needles)` only the
    lines containing one of the needles. `command` is the command typed at the prompt above the
    output (empty when there was none); `filter` the grep patterns that command piped through."""

    def __init__(self, text: str, *, command: str = "", host: str = "", origin: str = "", first_line: int = 1,
                 excerpt: bool = False, year_hint: int | None = None) -> None:
        self.text = text
        self.command = command
        self.host = host
        self.origin = origin
        self.first_line = first_line
        self.excerpt = excerpt or (len(text) < SMALL_TEXT and bool(_ELISION_TEXT.search(text)))
        self.filter = grep_patterns(command)
        self.year_hint = year_hint
        self.parts: list[tuple[int, str]] = []  # a joined document: (lines, command) of each it was made of
        self._stack: Stack | None = None
        self._lines: list[Line] | None = None
        self._head: list[Line] | None = None
        self._head_whole = False
        self._clean: str | None = None
        self._folded: str | None = None
        self._marks: list[tuple[int, int]] = [(0, first_line)]  # (offset, line number) of lines numbered
        # what a reader derived from the whole text, kept for the next one (a format's detector and
        # its parser read the same lines of a large log once): reader name -> value
        self.memo: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"Doc(command={self.command!r}, host={self.host!r}, lines={self.count()})"

    # -- framing ---------------------------------------------------------------------------

    @property
    def stack(self) -> Stack:
        if self._stack is None:
            self._stack = sniff(_head_lines(self.text, SNIFF_LINES))
        return self._stack

    @property
    def lines(self) -> list[Line]:
        """Every line, peeled (blank lines kept as empty text)."""
        if self._lines is None:
            head = self._head
            if head is not None and self._head_whole:  # the head already peeled every line
                last = [""] if not self.text or self.text.endswith("\n") else []  # what split() gives after the last newline
                self._lines = head + list(self._peel_all(last, self.first_line + len(head)))
            else:
                self._lines = list(self._peel_all(self.text.split("\n"), self.first_line))
        return self._lines

    def head(self, n: int = SNIFF_LINES) -> list[Line]:
        """The first n lines, peeled (what a format detector reads)."""
        if self._lines is not None:
            return self._lines[:n]
        if self._head is None or (len(self._head) < n and len(self._head) >= SNIFF_LINES):
            want = max(n, SNIFF_LINES)
            raws = _head_lines(self.text, want)
            self._head_whole = len(raws) < want  # the whole text: `lines` reuses it
            self._head = list(self._peel_all(raws, self.first_line))
        return self._head[:n]

    def head_folded(self, n: int = SNIFF_LINES) -> str:
        """The command above the document and its first n lines' peeled text, lower-cased, every
        run of white space one space, with a space at each end: what a format's cheap necessary
        condition searches for its words (a message cut over two lines reads as one)."""
        key = f"head_folded:{n}"
        folded = self.memo.get(key)
        if folded is None:
            words = " ".join([self.command, *(ln.text for ln in self.head(n))]).lower().split()
            folded = self.memo[key] = f" {' '.join(words)} "
        return folded

    def folded(self) -> str:
        """The whole raw text, lower-cased (kept: several readers search it)."""
        if self._folded is None:
            self._folded = self.text.lower()
        return self._folded

    @property
    def clean(self) -> str:
        """The clean text: every line's text, joined."""
        if self._clean is None:
            self._clean = "\n".join(ln.text for ln in self.lines)
        return self._clean

    def count(self) -> int:
        return self.text.count("\n") + (0 if self.text.endswith("\n") or not self.text else 1)

    def select(self, needles: Sequence[str]) -> list[Line]:
        """The peeled lines whose raw text contains one of `needles` (case-sensitive), in order.

        Scans at C speed; a selected line without framing of its own inherits time and host
        from the nearest earlier line that has them (a continuation)."""
        return [self.peel_hit(h) for h in self.scan(needles)]

    def scan(self, needles: Sequence[str], fold: bool = False, ends: int = 0) -> list[Hit]:
        """The lines whose raw text contains one of `needles`, in order, not peeled yet: a parser
        that decides from the raw line which ones it needs peels only those (`peel_hit`).
        `fold`: the needles match in any letter case. `ends`: only in the first and the last
        `ends` characters of a longer text (what a tool says about itself: its own errors come
        before or after its output, never in the middle of megabytes of it)."""
        if not needles:
            return []
        if fold:
            needles = list(dict.fromkeys(nd.lower() for nd in needles))
        needles = _covering(needles)
        if self._lines is not None:
            return self._scan_peeled(needles, fold)
        haystack, needles = self._haystack(needles, fold)
        spans = _find_spans(haystack, needles, self._scan_ranges(ends))
        text = self.text
        # a hit's line number is counted when it is peeled
        return [Hit(text[start:end], 0, start, at=at - start) for start, (end, at) in sorted(spans.items())]

    def _scan_peeled(self, needles: Sequence[str], fold: bool) -> list[Hit]:
        """`scan` over lines already peeled (folded needles are lower case)."""
        lines = self._lines or []
        if fold:
            return [Hit(ln.raw, ln.n, -1, ln) for ln in lines if any(nd in ln.raw.lower() for nd in needles)]
        return [Hit(ln.raw, ln.n, -1, ln) for ln in lines if any(nd in ln.raw for nd in needles)]

    def _scan_ranges(self, ends: int) -> list[tuple[int, int]]:
        """The (start, end) offsets `scan` searches: the whole text, or its two ends."""
        size = len(self.text)
        if ends and size > 2 * ends:
            cut = self.text.find("\n", ends)
            tail = self.text.rfind("\n", 0, size - ends)
            return [(0, cut if cut >= 0 else size), (max(tail, 0), size)]
        return [(0, size)]

    def scan_words(self, needles: Sequence[str], words: re.Pattern[str]) -> list[Hit]:
        """The lines holding one of `needles` whose text from that needle on, lower-cased, holds
        `words`, in order, not peeled. A log of 100,000 lines holding a needle and none of the
        words costs one regular-expression pass per needle, no Python work per line."""
        needles = _covering(needles)
        if self._lines is not None:
            hits = self._scan_peeled(needles, False)
            return [h for h in hits if words.search(h.raw[min(i for nd in needles if (i := h.raw.find(nd)) >= 0):].lower())]
        text = self.text
        found: dict[int, Hit] = {}
        for nd in needles:
            for m in _tail(nd).finditer(text):
                if not words.search(m.group().lower()):
                    continue
                start = text.rfind("\n", 0, m.start()) + 1
                seen = found.get(start)
                if seen is None or m.start() - start < seen.at:
                    found[start] = Hit(text[start:m.end()], 0, start, at=m.start() - start)
        return [found[k] for k in sorted(found)]

    def _haystack(self, needles: Sequence[str], fold: bool) -> tuple[str, Sequence[str]]:
        """The text to search and the needles to search it for; with `fold`, a lower-case copy
        of an ASCII text (offsets kept), or the needles in their usual letter cases."""
        if not fold:
            return self.text, needles
        if self.text.isascii():  # lower() keeps every offset: scan a folded copy once per needle
            if self._folded is None:
                self._folded = self.text.lower()
            return self._folded, needles
        return self.text, list(dict.fromkeys(v for nd in needles for v in (nd, nd.upper(), nd.capitalize(), nd.title())))

    def _line_no(self, offset: int) -> int:
        """The line number of the line starting at `offset`, counted from the nearest offset
        already numbered (hits are mostly numbered in order: each count is short)."""
        marks = self._marks
        i = bisect.bisect_right(marks, (offset, 1 << 62)) - 1
        at, n = marks[i]
        n += self.text.count("\n", at, offset)
        bisect.insort(marks, (offset, n))
        return n

    def peel_hit(self, hit: Hit) -> Line:
        """The peeled line of a `scan` hit (peeled once, then cached on the hit)."""
        if hit.line is None:
            if not hit.n:
                hit.n = self._line_no(hit.start)
            stack = self.stack
            ln = peel_line(hit.raw, hit.n, stack, self.year_hint)
            if not ln.stamped and ln.text.strip():
                prev = self._previous_stamped(hit.start, stack)
                if prev is not None:
                    _inherit(ln, prev)
            hit.line = ln
        return hit.line

    def _previous_stamped(self, start: int, stack: Stack) -> Line | None:
        """The nearest earlier line with its own framing (at most 50 lines back)."""
        text = self.text
        end = start - 1
        for _ in range(50):
            if end < 0:
                return None
            s = text.rfind("\n", 0, end) + 1
            ln = peel_line(text[s:end], 0, stack, self.year_hint)
            if ln.stamped:
                return ln
            end = s - 1
        return None

    def _peel_all(self, raws: Iterable[str], first: int) -> Iterator[Line]:
        stack = self.stack
        prev: Line | None = None
        pending_time: Line | None = None
        for i, raw in enumerate(raws):
            ln = peel_line(raw, first + i, stack, self.year_hint)
            if ln.stamped and not ln.text.strip() and ln.time_text and "time-only" in ln.layers:
                pending_time = ln  # a time stamp on a line of its own: it dates the next line
                ln.text = ""
                yield ln
                continue
            if pending_time is not None and ln.text.strip():
                if not ln.time_text:
                    ln.time, ln.mono, ln.time_text = pending_time.time, pending_time.mono, pending_time.time_text
                pending_time = None
            if not ln.stamped and prev is not None and prev.stamped and ln.text.strip():
                _inherit(ln, prev)
            if ln.text.strip():
                prev = ln if ln.stamped else prev
            yield ln

    @classmethod
    def join(cls, docs: Sequence[Doc]) -> Doc:
        """Several documents read as one (the same tool run twice in one paste); each keeps
        its own framing."""
        lines = [ln for d in docs for ln in d.lines]
        j = cls("\n".join(d.text for d in docs), command=" ; ".join(dict.fromkeys(d.command for d in docs if d.command)),
                host=docs[0].host if docs else "", origin=docs[0].origin if docs else "",
                excerpt=any(d.excerpt for d in docs), year_hint=docs[0].year_hint if docs else None)
        j.filter = list(dict.fromkeys(p for d in docs for p in d.filter))
        j.parts = [(len(d.lines), d.command) for d in docs]
        j._lines = lines
        j._stack = Stack()
        return j

    def sub(self, lines: list[Line]) -> Doc:
        """A document made of some of this document's lines (framing already peeled)."""
        d = Doc("\n".join(ln.raw for ln in lines), command=self.command, host=self.host, origin=self.origin,
                first_line=lines[0].n if lines else self.first_line, excerpt=self.excerpt, year_hint=self.year_hint)
        d._stack = self._stack
        d._lines = list(lines)
        return d


def _covering(needles: Sequence[str]) -> list[str]:
    """The needles without those that contain another (a line holding "XidCriticalError" holds
    "Xid"): the same lines, one pass less over the text for each."""
    return list(_covering_of(tuple(needles)))


@lru_cache(maxsize=256)
def _covering_of(needles: tuple[str, ...]) -> tuple[str, ...]:
    uniq = list(dict.fromkeys(needles))
    return tuple(nd for nd in uniq if not any(other != nd and other in nd for other in uniq))


@lru_cache(maxsize=64)
def _tail(needle: str) -> re.Pattern[str]:
    """A needle and the rest of its line."""
    return re.compile(re.escape(needle) + r"[^\n]*")


def _find_spans(haystack: str, needles: Sequence[str], ranges: list[tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """Line start -> (line end, offset of the first needle in it), for every line of `haystack`
    within `ranges` that holds a needle: one C-speed substring scan per needle."""
    spans: dict[int, tuple[int, int]] = {}
    for lo, hi in ranges:
        for nd in needles:
            i = haystack.find(nd, lo, hi)
            while i >= 0:
                end = haystack.find("\n", i)
                if end < 0:
                    end = len(haystack)
                start = haystack.rfind("\n", 0, i) + 1
                seen = spans.get(start)
                if seen is None or i < seen[1]:
                    spans[start] = (end, i)
                i = haystack.find(nd, end, hi)
    return spans


def _inherit(ln: Line, prev: Line) -> None:
    ln.cont = True
    ln.time, ln.mono, ln.time_text = prev.time, prev.mono, prev.time_text
    ln.host = ln.host or prev.host
    ln.ident = ln.ident or prev.ident
    if ln.rank is None:
        ln.rank = prev.rank


def _head_lines(text: str, n: int) -> list[str]:
    out = []
    pos = 0
    for _ in range(n):
        end = text.find("\n", pos)
        if end < 0:
            if pos < len(text):
                out.append(text[pos:])
            break
        out.append(text[pos:end])
        pos = end + 1
    return out


# ---------------------------------------------------------------------------------------------
# Normalising: escapes, carriage returns


_ANSI = lazyre.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][A-Za-z0-9]|\x1b[=>78]")


_HTML_ENTITY = lazyre.compile(r"&(?:lt|gt|amp|quot|#39|#x27|nbsp);")


def normalise(text: str) -> str:
    """CRLF and CR line ends to LF, terminal escapes removed, a `\\r`-overwritten line reduced to
    what the terminal showed last, a byte-order mark dropped; what copying from a web page adds
    (non-breaking and zero-width spaces, `&lt;inactive&gt;`-style entities) undone."""
    if text.startswith("\ufeff"):
        text = text[1:]
    if "\u00a0" in text or "\u200b" in text or "\u2009" in text:
        text = text.replace("\u00a0", " ").replace("\u2009", " ").replace("\u200b", "")
    if len(text) < SMALL_TEXT and "&" in text:
        hits = len(_HTML_ENTITY.findall(text))
        if hits >= 2 or (hits and "<" not in text):
            text = html.unescape(text)
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "\r" in text:
        text = text.replace("\r\n", "\n")
        if "\r" in text:
            if "\n" not in text.rstrip("\r"):
                text = text.replace("\r", "\n")  # old Mac line ends
            else:
                text = "\n".join(_overwrite(ln) for ln in text.split("\n"))
    return text


def _overwrite(line: str) -> str:
    if "\r" not in line:
        return line
    parts = [p for p in line.split("\r") if p]
    return parts[-1] if parts else ""


# ---------------------------------------------------------------------------------------------
# Log framing (always recognised)


@lru_cache(maxsize=4096)
def _mk_time(year: int | None, mon: str, day: str, hms: str, frac: str = "") -> datetime | None:
    try:
        h, mi, s = (int(x) for x in hms.split(":"))
        us = int((frac.lstrip(".,") + "000000")[:6]) if frac else 0
        return datetime(year or 1900, MONTHS[mon], int(day), h, mi, s, us)
    except (KeyError, ValueError):
        return None


@lru_cache(maxsize=4096)
def parse_iso(text: str) -> datetime | None:
    """An ISO-8601-like time stamp (`T` or space, `.`/`,` fraction, `Z`/`+hh:mm`/`+hhmm`)."""
    t = text.strip().replace(",", ".")
    m = re.match(r"^(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d(?::?\d\d)?)?$", t)
    if not m:
        return None
    frac = (m.group(3) or "")[1:]
    tz = m.group(4) or ""
    if tz == "Z":
        tz = "+00:00"
    elif tz and ":" not in tz:
        tz = tz[:3] + ":" + (tz[3:] or "00")
    try:
        return datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}" + (f".{(frac + '000000')[:6]}" if frac else "")
                                      + tz)
    except ValueError:
        return None


def _ident_known(name: str) -> bool:
    return name in _KNOWN_IDENTS or name.startswith(("systemd", "nvidia", "nv-"))


_KNOWN_IDENTS = frozenset({
    "kernel", "sshd", "sudo", "cron", "CRON", "rsyslogd", "dockerd", "containerd", "kubelet", "slurmd",
    "slurmctld", "slurmstepd", "NetworkManager", "dbus-daemon", "dcgm", "nvidia-dcgm", "nv-hostengine",
    "ofed", "opensm", "lldpd", "chronyd", "ntpd", "auditd", "smartd", "mcelog", "rasdaemon", "udevd",
    "multipathd", "snapd", "polkitd", "login", "su", "gdm", "Xorg", "python", "python3",
})

# `host ident[pid]: ` or `host kernel: ` (or, sniffed, `host anything: `) after a syslog-style time
_HOST_IDENT = lazyre.compile(
    r"(?P<host>[A-Za-z0-9][\w.-]{0,253}) (?P<ident>[A-Za-z_][\w.@/-]{0,63}?)(?:\[(?P<pid>\d+)\])?: ?")
_IDENT_ONLY = lazyre.compile(r"(?P<ident>[A-Za-z_][\w.@/-]{0,63}?)(?:\[(?P<pid>\d+)\])?: ?")


def _host_ident(rest: str, ln: Line, stack: Stack) -> str:
    """Peel `host ident[pid]: ` / `ident[pid]: ` after a syslog or ISO time when it is there."""
    m = _HOST_IDENT.match(rest)
    if m and (m.group("pid") or _ident_known(m.group("ident")) or stack.host_ident) and \
            not m.group("host").endswith(":"):
        ln.host = ln.host or m.group("host")
        ln.ident = m.group("ident")
        return rest[m.end():]
    m = _IDENT_ONLY.match(rest)
    if m and (m.group("pid") or m.group("ident") == "kernel"):
        ln.ident = m.group("ident")
        return rest[m.end():]
    return rest


_CRI = lazyre.compile(rf"({_ISO_T}) (stdout|stderr) [FP] ")
_RFC5424 = lazyre.compile(r"<(\d{1,3})>1 (\S+) (\S+) (\S+) (\S+) (\S+) (?:-|(?:\[[^\]]*\])+) ?")
_PRIO = lazyre.compile(r"<\d{1,3}>(?=\S)")
_KMSG = lazyre.compile(r"(\d{1,3}),(\d+),(\d+),[^;]{0,16};")
_DECODE = lazyre.compile(
    r"(kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7])\s*:\s*"
    r"(emerg|alert|crit|err|warn|warning|notice|info|debug)\s*:\s?")
_CTIME = lazyre.compile(rf"\[{_DOW} ({_MON}) +(\d{{1,2}}) (\d\d:\d\d:\d\d) (\d{{4}})\]\s?")
_MONO = lazyre.compile(r"\[\s*(\d+\.\d+)(?:\s*<\s*[+-]?\d+\.\d+\s*>)?\]\s?")
_DELTA = lazyre.compile(r"\[\s*(?:<\s*[+-]?\d+\.\d+\s*>|[+-]\s*\d+\.\d+)\]\s?")
_RELTIME = lazyre.compile(rf"\[({_MON}) +(\d{{1,2}}) (\d\d:\d\d)\]\s?")
# journalctl -o short-full: `Mon 2024-06-03 10:12:01 UTC host ident: `
_SHORT_FULL = lazyre.compile(r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)"
                         r"(?: (?:[A-Z]{2,5}|[+-]\d{4}))? ")
_BRACKET_ISO = lazyre.compile(rf"\[({_ISO_T})\]:?\s?")
_ISO = lazyre.compile(rf"({_ISO_T})(?=\s|$)\s?")
# journalctl/syslog under a CJK locale: `11月 15 14:15:47 host ident[pid]:` (Korean `11월`)
_SYSLOG_CJK = lazyre.compile(r"(\d{1,2})[月월] +(\d{1,2})日? (\d\d:\d\d:\d\d)(?: |$)")
_ISO_MINUTES = lazyre.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d)(?=\s)\s")  # a stamp without seconds
_GO = lazyre.compile(r"(\d{4})/(\d\d)/(\d\d) (\d\d:\d\d:\d\d)(\.\d+)?(?=\s|$)\s?")
_UNIX = lazyre.compile(r"(\d{10}\.\d{3,9}) ")
_SYSLOG = lazyre.compile(rf"({_MON}) ([ \d]\d) (\d\d:\d\d:\d\d)(\.\d{{1,9}})?(?: |$)")
_SYSLOG_YEAR = lazyre.compile(rf"({_MON}) ([ \d]\d) (\d{{4}}) (\d\d:\d\d:\d\d)(?: |$)")
# the fabric manager's own `[Jul 23 2024 07:53:55] ` record stamp
_BRACKET_MDY = lazyre.compile(rf"\[({_MON}) +(\d{{1,2}}) (\d{{4}}) (\d\d:\d\d:\d\d)\] ?")
_KERNEL_IDENT = lazyre.compile(r"kernel: ?")


# One handler per log-framing kind: it reads the match of its pattern at the start of `rest`,
# notes what the framing says on the line, and returns (rest after the framing, layer name).


def _on_mono(m: re.Match[str], rest: str, ln: Line, stack: Stack, year: int | None) -> tuple[str, str | None]:
    if ln.mono is None:
        ln.mono = float(m.group(1))
        ln.time_text = ln.time_text or m.group(1)
    return _host_ident(rest[m.end():], ln, stack), "dmesg"


def _bracket_text(m: re.Match[str], rest: str) -> str:
    """What a `[...]` time stamp says, without its brackets."""
    return rest[1:m.end()].strip().rstrip("]")


def _on_ctime(m: re.Match[str], rest: str, ln: Line, stack: Stack, year: int | None) -> tuple[str, str | None]:
    ln.time = _mk_time(int(m.group(4)), m.group(1), m.group(2), m.group(3))
    ln.time_text = _bracket_text(m, rest)
    return rest[m.end():], "dmesg-ctime"


def _on_delta(m: re.Match[str], rest: str, ln: Line, stack: Stack, year: int | None) -> tuple[str, str | None]:
    ln.time_text = ln.time_text or _bracket_text(m, rest)
    return rest[m.end():], "dmesg"


def _on_reltime(m: re.Match[str], rest: str, ln: Line, stack: Stack, year: int | None) -> tuple[str, str | None]:
    ln.time = _mk_time(year, m.group(1), m.group(2), m.group(3) + ":00")
    ln.time_text = _bracket_text(m, rest)
    return rest[m.end():], "dmesg"


def _on_bracket_iso(m: re.Match[str], rest: str, ln: Line, stack: Stack, year: int | None) -> tuple[str, str | None]:
    ln.time = parse_iso(m.group(1))
    ln.time_text = m.group(1)
    return rest[m.end():], "bracket-time"


def _on_bracket_mdy(m: re.Match[str], rest: str, ln: Line, stack: Stack, year: int | None) -> tuple[str, str | None]:
    ln.time = _mk_time(int(m.group(3)), m.group(1), m.group(2), m.group(4))
    ln.time_text = _bracket_text(m, rest)
    return rest[m.end():], "bracket-time"


def _on_cri(m: re.Match[str], rest: str, ln: Line, stack: Stack, year: int | None) -> tuple[str, str | None]:
    ln.time, ln.time_text = parse_iso(m.group(1)), m.group(1)
    return rest[m.end():], "container"


def _on_iso(m: re.Match[str], rest: str, ln: Line, stack: Stack, year: int | None) -> tuple[str, str | None]:
    ln.time, ln.time_text = parse_iso(m.group(1)), m.group(1)
    after = rest[m.end():]
    if not after.strip():
        return "", "time-only"
    return _host_ident(after, ln, stack), "iso-time"


def _on_iso_minutes(m: re.Match[str], rest: str, ln: Line, stack: Stack, year: int | None) -> tuple[str, str | None]:
    ln.time, ln.time_text = parse_iso(m.group(1) + ":00"), m.group(1)
    return _host_ident(rest[m.end():], ln, stack), "iso-time"


def _on_kmsg(m: re.Match[str], rest: str, ln: Line, stack: Stack, year: int | None) -> tuple[str, str | None]:
    ln.mono = int(m.group(3)) / 1e6
    ln.time_text = f"{ln.mono:.6f}"
    return rest[m.end():], "kmsg"


def _on_go(m: re.Match[str], rest: str, ln: Line, stack: Stack, year: int | None) -> tuple[str, str | None]:
    ln.time = parse_iso(f"{m.group(1)}-{m.group(2)}-{m.group(3)}T{m.group(4)}{m.group(5) or ''}")
    ln.time_text = m.group(0).strip()
    return rest[m.end():], "go-time"


def _on_unix(m: re.Match[str], rest: str, ln: Line, stack: Stack, year: int | None) -> tuple[str, str | None]:
    try:
        ln.time = datetime.fromtimestamp(float(m.group(1)), tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        ln.time = None
    ln.time_text = m.group(1)
    return _host_ident(rest[m.end():], ln, stack), "unix-time"


def _on_rfc5424(m: re.Match[str], rest: str, ln: Line, stack: Stack, year: int | None) -> tuple[str, str | None]:
    ln.time, ln.time_text = parse_iso(m.group(2)), m.group(2)
    if m.group(3) != "-":
        ln.host = ln.host or m.group(3)
    if m.group(4) != "-":
        ln.ident = m.group(4)
    return rest[m.end():], "rfc5424"


def _on_prio(m: re.Match[str], rest: str, ln: Line, stack: Stack, year: int | None) -> tuple[str, str | None]:
    return rest[m.end():], "printk-level"


def _on_short_full(m: re.Match[str], rest: str, ln: Line, stack: Stack, year: int | None) -> tuple[str, str | None]:
    ln.time, ln.time_text = parse_iso(m.group(1)), rest[:m.end()].strip()
    return _host_ident(rest[m.end():], ln, stack), "journal-full"


def _on_syslog_year(m: re.Match[str], rest: str, ln: Line, stack: Stack, year: int | None) -> tuple[str, str | None]:
    ln.time = _mk_time(int(m.group(3)), m.group(1), m.group(2), m.group(4))
    ln.time_text = m.group(0).strip()
    return _host_ident(rest[m.end():], ln, stack), "syslog"


def _on_syslog(m: re.Match[str], rest: str, ln: Line, stack: Stack, year: int | None) -> tuple[str, str | None]:
    ln.time = _mk_time(year, m.group(1), m.group(2), m.group(3), m.group(4) or "")
    ln.time_text = m.group(0).strip()
    return _host_ident(rest[m.end():], ln, stack), "syslog"


def _on_syslog_cjk(m: re.Match[str], rest: str, ln: Line, stack: Stack, year: int | None) -> tuple[str, str | None]:
    mon = int(m.group(1))
    name = next((k for k, v in MONTHS.items() if v == mon), "")
    ln.time = _mk_time(year, name, m.group(2), m.group(3)) if name else None
    ln.time_text = m.group(0).strip()
    return _host_ident(rest[m.end():], ln, stack), "syslog"


def _on_facility(m: re.Match[str], rest: str, ln: Line, stack: Stack, year: int | None) -> tuple[str, str | None]:
    return rest[m.end():], "facility"


def _on_kernel(m: re.Match[str], rest: str, ln: Line, stack: Stack, year: int | None) -> tuple[str, str | None]:
    ln.ident = "kernel"
    return rest[m.end():], "kernel"


_LogRule = tuple[re.Pattern[str], Callable[[re.Match[str], str, Line, Stack, int | None], tuple[str, str | None]]]
# The log framings that may start a line, tried in order, by the line's first character.
_BRACKETED: tuple[_LogRule, ...] = ((_MONO, _on_mono), (_CTIME, _on_ctime), (_DELTA, _on_delta),
                                    (_RELTIME, _on_reltime), (_BRACKET_ISO, _on_bracket_iso),
                                    (_BRACKET_MDY, _on_bracket_mdy))
_NUMERIC: tuple[_LogRule, ...] = ((_CRI, _on_cri), (_ISO, _on_iso), (_ISO_MINUTES, _on_iso_minutes),
                                  (_KMSG, _on_kmsg), (_GO, _on_go), (_UNIX, _on_unix), (_SYSLOG_CJK, _on_syslog_cjk))
_PRIORITY: tuple[_LogRule, ...] = ((_RFC5424, _on_rfc5424), (_PRIO, _on_prio))
_FACILITY: tuple[_LogRule, ...] = ((_DECODE, _on_facility),)
_WEEKDAY: tuple[_LogRule, ...] = ((_SHORT_FULL, _on_short_full),)
_MONTH: tuple[_LogRule, ...] = ((_SYSLOG_YEAR, _on_syslog_year), (_SYSLOG, _on_syslog))
_LOG_RULES: dict[str, tuple[_LogRule, ...]] = {
    "[": _BRACKETED, "<": _PRIORITY, "k": (*_FACILITY, (_KERNEL_IDENT, _on_kernel)), "": (),
    **{d: _NUMERIC for d in "0123456789"},
    **{c: _WEEKDAY for c in "TW"},  # Tue Wed Thu: a weekday only
    **{c: _MONTH for c in "JAOND"},  # Jan Apr Aug Oct Nov Dec: a month only
    **{c: _WEEKDAY + _MONTH for c in "MFS"},  # Mon Fri Sat Sun, or Mar May Feb Sep
}


def _peel_log(rest: str, ln: Line, stack: Stack, year: int | None) -> tuple[str, str | None]:
    """Peel one log-framing layer off `rest`; (rest, layer name) or (rest, None)."""
    c = rest[:1]
    rules = _LOG_RULES.get(c)
    if rules is None:
        rules = _NUMERIC if c.isdigit() else _FACILITY if c.islower() else ()
    for pattern, on_match in rules:
        m = pattern.match(rest)
        if m:
            return on_match(m, rest, ln, stack, year)
    return rest, None


# ---------------------------------------------------------------------------------------------
# Transport framing (sniffed per document)


@dataclass(frozen=True)
class _Transport:
    name: str
    pattern: re.Pattern[str]


_T_DOCKER = "docker-json"
_TRANSPORTS: dict[str, _Transport] = {t.name: t for t in (
    _Transport("quote", lazyre.compile(r"> ?")),
    # pdsh/clush print `host: ` and the line as the tool printed it (an indented line keeps its indent)
    _Transport("pdsh", lazyre.compile(r"(?P<host>[A-Za-z0-9][\w.-]{0,62}(?:\[[\d,-]+\])?): ")),
    _Transport("srun", lazyre.compile(r" *(?P<rank>\d{1,6}):(?: |$)")),
    _Transport("mpi-tag", lazyre.compile(r"\[(?P<job>\d+),(?P<rank>\d+)\]<(?:stdout|stderr|stddiag)>: ?")),
    _Transport("rank-tag", lazyre.compile(r"\[(?P<rank>\d{1,6})\] ")),  # the line after it as printed (indent kept)
    _Transport("torchrun", lazyre.compile(r"\[(?:default|rank)(?P<rank>\d{1,6})\]: ?")),
    _Transport("kubectl", lazyre.compile(r"\[pod/(?P<host>[^/\]\s]+)/[^\]\s]+\] ")),
    # Ray's task/actor prefix `(pid=N)`, `(Actor pid=N, ip=A)`; SkyPilot's `(task, pid=N)`,
    # `(worker1, rank=1, pid=N, ip=A)`; either indented by the job log's viewer
    _Transport("ray", lazyre.compile(r" *\((?:[\w.:-]+,? )?(?:rank=(?P<rank>\d{1,6}), )?pid=\d+(?:, ip=(?P<host>[\d.]+))?\) ")),
    _Transport("compose", lazyre.compile(r"(?P<host>[A-Za-z0-9][\w.-]{0,62})\s+\| ")),
    _Transport("level", lazyre.compile(r"(?:\[\s*(?:DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|ERR|CRITICAL|FATAL)\s*\]|"
                                   r"(?:DEBUG|INFO|NOTICE|WARNING|ERROR|CRITICAL|FATAL)(?::[\w.]+)?:|"
                                   r"(?:DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|CRITICAL|FATAL)(?: +-| +(?=\S)))\s?")),
)}
# Sniffed only where most lines carry them; torchrun and mpirun tags are specific enough to
# peel wherever they appear (also inside a time stamp).
_ALWAYS = ("mpi-tag", "torchrun", "kubectl")

# words that start lines as `word: ` without being host names
_NOT_HOSTS = frozenset({
    "kernel", "NVRM", "nvrm", "error", "Error", "ERROR", "warning", "Warning", "WARNING", "WARN", "info", "Info",
    "INFO", "debug", "DEBUG", "note", "Note", "NOTE", "fatal", "Fatal", "FATAL", "Traceback", "File", "Caused",
    "RuntimeError", "Exception", "Usage", "usage", "Hint", "hint", "Status", "Result", "Results", "Summary",
    "Device", "Driver", "GPU", "CA", "Port", "State", "Rate", "Name", "Command", "Output", "Input", "Warn",
    "Reason", "Tip", "Description", "Example", "Step", "Success", "Failure", "Failed", "Passed", "Link",
    "Host", "host", "Node", "node", "Job", "job", "Rank", "rank", "PING", "From", "To", "http", "https",
    "Unit", "Loaded", "Active", "Docs", "Process", "Main", "Memory", "CPU", "Tasks", "CGroup", "Mounts",
    "nvidia-smi", "dmesg", "ibstat", "ping", "ip", "sudo", "bash", "sh", "zsh", "Thread", "Python",
})


# kernel drivers that start their own messages with `name: ` (`nvidia-nvswitch3: SXid ...`,
# `nvidia-modeset: ...`, `mlx5_core: ...`): a device's name, never a host
_KERNEL_PREFIX = lazyre.compile(r"(?:nvidia(?:-[a-z]+)?|nvswitch|mlx\d_(?:core|ib)|ib_[a-z]+|rdma_[a-z]+)\d*")


# `ident[pid]: ` is a syslog/journal identifier with its process id, `name.service: ` a systemd
# unit's message: neither is a host (a host list's brackets hold a range, `node[1-4]`)
_IDENT_PID = lazyre.compile(r"[A-Za-z][\w.-]*\[\d+\]")
_UNIT_SUFFIXES = (".service", ".socket", ".mount", ".timer", ".scope", ".slice", ".target", ".device", ".path")


def _hostlike(tok: str) -> bool:
    return tok not in _NOT_HOSTS and not tok.endswith(("Error", "Exception", "Warning", *_UNIT_SUFFIXES)) \
        and not _KERNEL_PREFIX.fullmatch(tok) and not _IDENT_PID.fullmatch(tok)


def _matches(pattern: re.Pattern[str], lines: list[str], misses: int) -> list[re.Match[str] | None] | None:
    """Each line's match of `pattern`, or None as soon as more than `misses` lines do not match."""
    out: list[re.Match[str] | None] = []
    match = pattern.match
    for r in lines:
        m = match(r)
        if m is None:
            misses -= 1
            if misses < 0:
                return None
        out.append(m)
    return out


def sniff(raws: Sequence[str]) -> Stack:
    """The transport layers most of these lines carry, outermost first."""
    lines = [r for r in raws if r.strip()]
    residues = lines
    outer: list[str] = []
    for _ in range(3):
        best: tuple[int, str, list[str]] | None = None
        for name in ("quote", "pdsh", "srun", "rank-tag", "ray", "compose"):
            if name in outer:
                continue
            need = max(2, (len(residues) + 1) // 2) if len(residues) > 2 else len(residues)
            ms = _matches(_TRANSPORTS[name].pattern, residues, len(residues) - need)
            if ms is None:
                continue  # more lines without it than it may have
            hits = [m for m in ms if m]
            if not hits or len(hits) < need or not _guard(name, hits, residues):
                continue
            if best is None or len(hits) > best[0]:
                best = (len(hits), name, [r[m.end():] if m else r for r, m in zip(residues, ms, strict=True)])
        if best is None:
            break
        outer.append(best[1])
        residues = [r for r in best[2] if r.strip()] or best[2]
    host_ident = _same_host(residues[:400])
    # a logger's level word after the time stamp on most lines (a harness's own log format)
    inner: tuple[str, ...] = ()
    if _leveled(residues[:400], Stack(outer=(), host_ident=host_ident)):
        inner = ("level",)
    return Stack(outer=tuple(outer), host_ident=host_ident, inner=inner)


def _same_host(lines: list[str]) -> bool:
    """Syslog lines `host ident: ` with identifiers we do not know: the same host on most lines."""
    firsts: Counter[str] = Counter()
    n = 0
    for r in lines:
        m = _SYSLOG.match(r) or _ISO.match(r)
        if m:
            n += 1
            hm = _HOST_IDENT.match(r[m.end():])
            if hm and hm.group("host") not in _LEVEL_WORDS:
                firsts[hm.group("host")] += 1
    return n >= 3 and bool(firsts) and firsts.most_common(1)[0][1] >= 0.8 * n


def _leveled(lines: list[str], base: Stack) -> bool:
    """Most of these lines (or the one, time-stamped) carry a logger's level word after their
    log framing; stops as soon as most cannot."""
    level = _TRANSPORTS["level"].pattern
    n = len(lines)
    leveled = misses = 0
    for r in lines:
        ln = peel_line(r, 0, base)
        if level.match(ln.text):
            if n == 1:
                return bool(ln.time_text)
            leveled += 1
        else:
            misses += 1
            if misses * 2 >= n:
                return False  # no longer most lines
    return n >= 2 and leveled * 2 > n


_IP_LINK = lazyre.compile(r"[\w.@-]+: <[A-Z0-9_,-]*>")
_IFCONFIG_HEAD = lazyre.compile(r"flags=\d+<[A-Z0-9_,]*>")  # ifconfig's `name: flags=4163<UP,...>`
_IP_ADDR_ONELINE = lazyre.compile(r"[\w.@-]+\s+inet6?\s+\S+/\d+")
_LEVEL_WORDS = frozenset({"DEBUG", "INFO", "NOTICE", "WARN", "WARNING", "ERROR", "ERR", "CRITICAL", "FATAL", "TRACE"})


def _guard(name: str, hits: list[re.Match[str]], residues: list[str]) -> bool:
    if name == "srun":
        # `ip -o link` and `ip addr` number their lines `N: name: <FLAGS>`, `ip -o addr` `N: name    inet ...`
        rest = [m.string[m.end():] for m in hits]
        return sum(1 for r in rest if _IP_LINK.match(r) or _IP_ADDR_ONELINE.match(r)) < len(rest) / 4
    if name == "pdsh":
        toks = [m.group("host") for m in hits]
        if any(not _hostlike(t) for t in toks):
            bad = sum(1 for t in toks if not _hostlike(t))
            if bad > len(toks) / 10:
                return False
        distinct = set(toks)
        if all(t.isdigit() for t in distinct):
            return False  # numbers are srun labels or ip link indexes
        rest = [m.string[m.end():] for m in hits]
        if sum(1 for r in rest if _IP_LINK.match(r) or _IFCONFIG_HEAD.match(r)) >= len(rest) / 4:
            return False
        # host names carry numbers (gpu017, node-3, 10.0.0.7); `Speed: `, `State: ` keys do not
        numbered = [t for t in distinct if any(ch.isdigit() for ch in t)]
        return len(numbered) * 2 >= len(distinct)
    if name == "rank-tag":
        ranks = {m.group("rank") for m in hits}
        return len(ranks) <= max(1, len(hits) // 2) or len(hits) >= 4
    return True


def peel_line(raw: str, n: int, stack: Stack, year: int | None = None) -> Line:
    """Peel one line: the document's transport layers, then any log framing."""
    ln = Line(text=raw, n=n, raw=raw)
    rest = raw
    layers: list[str] = []
    if rest.startswith("{") and ('"log":' in rest[:12] or '"MESSAGE"' in rest or '"__REALTIME' in rest):
        rest = _json_record(rest, ln, layers)
    if stack.outer:
        rest = _peel_transports(rest, stack.outer, ln, layers)
    for _ in range(_DEPTH):
        before = rest
        if rest[:1] == "[":
            rest = _peel_tag(rest, ln, layers)
        rest, layer = _peel_log(rest, ln, stack, year)
        if layer:
            layers.append(layer)
            if layer == "time-only":
                break
        if rest == before:
            break
    ln.text = _peel_transports(rest, stack.inner, ln, layers) if stack.inner else rest
    ln.layers = tuple(layers)
    return ln


def _peel_transports(rest: str, names: Sequence[str], ln: Line, layers: list[str]) -> str:
    """Peel each of the transport layers `names` that `rest` carries, in order."""
    for name in names:
        m = _TRANSPORTS[name].pattern.match(rest)
        if m:
            _fill(name, m, ln)
            rest = rest[m.end():]
            layers.append(name)
    return rest


def _peel_tag(rest: str, ln: Line, layers: list[str]) -> str:
    """Peel the first torchrun, mpirun or kubectl tag that starts `rest` (found at any depth)."""
    for name in _ALWAYS:
        m = _TRANSPORTS[name].pattern.match(rest)
        if m:
            _fill(name, m, ln)
            layers.append(name)
            return rest[m.end():]
    return rest


def _fill(name: str, m: re.Match[str], ln: Line) -> None:
    d = m.groupdict()
    if d.get("host"):
        ln.host = d["host"]
    if d.get("rank") is not None:
        try:
            ln.rank = int(d["rank"])
        except ValueError:
            pass


def _json_record(rest: str, ln: Line, layers: list[str]) -> str:
    """A docker json-file record or a `journalctl -o json` entry -> its message, time and host."""
    try:
        rec = json.loads(rest)
    except ValueError:
        return rest
    if not isinstance(rec, dict):
        return rest
    if isinstance(rec.get("log"), str):  # docker json-file
        t = rec.get("time")
        if isinstance(t, str):
            ln.time, ln.time_text = parse_iso(t[:32]), t
        layers.append(_T_DOCKER)
        return str(rec["log"]).rstrip("\n")
    msg = rec.get("MESSAGE")
    if isinstance(msg, list) and all(isinstance(b, int) for b in msg):  # journald's bytes form
        msg = bytes(b & 0xFF for b in msg).decode("utf-8", errors="replace")
    if not isinstance(msg, str):
        return rest
    usec = rec.get("__REALTIME_TIMESTAMP")
    if isinstance(usec, str) and usec.isdigit():
        try:
            ln.time = datetime.fromtimestamp(int(usec) / 1e6, tz=timezone.utc)
            ln.time_text = ln.time.isoformat()
        except (OverflowError, OSError, ValueError):
            pass
    host = rec.get("_HOSTNAME")
    if isinstance(host, str):
        ln.host = ln.host or host
    ident = rec.get("SYSLOG_IDENTIFIER") or ("kernel" if rec.get("_TRANSPORT") == "kernel" else "")
    if isinstance(ident, str):
        ln.ident = ident
    layers.append("journal-json")
    return msg.rstrip("\n")


# ---------------------------------------------------------------------------------------------
# Structure: prompts, separators, host headers


# commands worth recognising after a bare `# ` root prompt (a `# ` line is otherwise a comment,
# and nccl-tests prints its header with `# `)
_COMMANDS = (
    "nvidia-smi", "nvidia-bug-report.sh", "dmesg", "journalctl", "ibstat", "ibstatus", "ibv_devinfo", "ibv_devices",
    "ibdev2netdev", "iblinkinfo", "ibdiagnet", "sminfo", "ip", "ifconfig", "ethtool", "ping", "ping6", "cat", "grep",
    "egrep", "zgrep", "zcat", "tail", "head", "less", "lspci", "lsmod", "modinfo", "modprobe", "systemctl", "service",
    "dpkg", "rpm", "apt", "yum", "dnf", "mpirun", "mpiexec", "srun", "sbatch", "salloc", "scontrol", "sinfo",
    "torchrun", "python", "python3", "pdsh", "clush", "dcgmi", "ls", "uname", "hostname", "sudo", "mst",
    "mlxlink", "mlxconfig", "show_gids", "ofed_info", "docker", "podman", "kubectl", "talosctl", "numactl", "lscpu",
    "env", "export", "echo", "nvidia-fabricmanager", "nv-fabricmanager", "fabricmanager", "cd", "watch", "time",
    "all_reduce_perf", "./all_reduce_perf", "ulimit", "free", "df", "top", "ps", "kill", "reboot",
)
_CMD_ALT = "|".join(re.escape(c) for c in _COMMANDS)
_PROMPTS = (
    # user@host:cwd$ cmd   (venv) root@node1:~/x# cmd   user@host ~ % cmd
    lazyre.compile(r"^(?:\([^)\s]{1,64}\)\s*)?(?P<user>[\w.-]{1,64})@(?P<host>[\w.-]{1,253})"
               r"(?::(?P<cwd>[^\s$#%>]{0,256})|\s+[^\s$#%>]{1,256})?\s*[$#%>](?:\s(?P<cmd>.*)|$)"),
    # [user@host cwd]$ cmd
    lazyre.compile(r"^(?:\([^)\s]{1,64}\)\s*)?\[(?P<user>[\w.-]{1,64})@(?P<host>[\w.-]{1,253})(?:\s[^\]]{0,256})?\]"
               r"\s*[$#](?:\s(?P<cmd>.*)|$)"),
    # host:~ # cmd (SUSE)   bash-4.2$ cmd
    lazyre.compile(rf"^(?P<host>[\w.-]{{1,253}}):~?[\w/.~-]{{0,256}}\s?[$#]\s+(?P<cmd>(?:sudo\s+)?(?:{_CMD_ALT})\b.*)$"),
    lazyre.compile(r"^(?:bash|sh|zsh)-[\d.]+[$#]\s+(?P<cmd>.*)$"),
    # $ cmd
    lazyre.compile(r"^\$\s+(?P<cmd>[\w./~-].*)$"),
    # # cmd (root), only for known commands
    lazyre.compile(rf"^#\s+(?P<cmd>(?:sudo\s+)?(?:{_CMD_ALT})(?:\s.*)?)$"),
)
_PROMPT_HINT = lazyre.compile(r"[$#%>]")


@dataclass
class Prompt:
    command: str
    host: str = ""


def prompt_of(line: str) -> Prompt | None:
    """The command of a shell prompt line (`root@node1:~# dmesg -T`), None for other lines."""
    s = line.rstrip()
    if not s or len(s) > 4096 or not _PROMPT_HINT.search(s[:300]):
        return None
    if s[0] in " \t":
        return None
    for p in _PROMPTS:
        m = p.match(s)
        if m:
            cmd = (m.groupdict().get("cmd") or "").strip()
            if cmd.startswith("#"):  # `$ # a comment`
                cmd = ""
            return Prompt(command=_strip_comment(cmd), host=m.groupdict().get("host") or "")
    return None


def _strip_comment(cmd: str) -> str:
    """`nvidia-smi -r   # reset` -> `nvidia-smi -r` (a `#` after whitespace, outside quotes)."""
    quote = ""
    for i, ch in enumerate(cmd):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and i > 0 and cmd[i - 1] in " \t":
            return cmd[:i].rstrip()
    return cmd


def _stages(command: str) -> list[str]:
    """A shell command line cut at its pipes (pipes inside quotes kept)."""
    out: list[str] = []
    cur: list[str] = []
    quote = ""
    for ch in command:
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "|":
            out.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    out.append("".join(cur))
    return [s.strip() for s in out if s.strip()]


def grep_patterns(command: str) -> list[str]:
    """The patterns a command line pipes its output through (`dmesg | grep -i xid` -> ['xid'])."""
    import shlex

    out: list[str] = []
    for stage in _stages(command or "")[1:]:
        try:
            toks = shlex.split(stage)
        except ValueError:
            toks = stage.split()
        while toks and toks[0] in ("sudo", "command"):
            toks = toks[1:]
        if not toks or toks[0] not in ("grep", "egrep", "fgrep", "zgrep", "rg"):
            continue
        if any(t in ("-v", "--invert-match") or (t.startswith("-") and not t.startswith("--") and "v" in t[1:])
               for t in toks[1:]):
            continue  # an inverted grep drops lines; what it keeps is not restricted to a pattern
        pats: list[str] = []
        i = 1
        while i < len(toks):
            t = toks[i]
            if t in ("-e", "--regexp") and i + 1 < len(toks):
                pats.append(toks[i + 1])
                i += 2
                continue
            if t.startswith("--regexp="):
                pats.append(t.split("=", 1)[1])
            elif t in ("-A", "-B", "-C", "-m", "--max-count") and i + 1 < len(toks):
                i += 2
                continue
            elif t.startswith("-"):
                pass
            elif not pats:
                pats.append(t)
                break
            i += 1
        out.extend(p for p in pats if p)
    return out


def filter_allows(patterns: Sequence[str], words: Sequence[str]) -> bool:
    """Whether lines containing any of `words` could pass grep `patterns` (case-insensitive;
    regex alternations and simple wildcards tolerated). No patterns: everything passes."""
    if not patterns:
        return True
    for pat in patterns:
        for alt in re.split(r"\\?\|", pat):
            a = alt.strip().strip("^$").lower()
            if not a:
                return True
            try:
                rx = re.compile(a, re.IGNORECASE)
            except re.error:
                rx = None
            for w in words:
                if (rx is not None and rx.search(w)) or a in w.lower():
                    return True
    return False


_ELISION = lazyre.compile(r"^\s*(?:\.{3,}|…|\[\.\.\.\]|\[?(?:output )?(?:truncated|snipped|cut)\]?|<\s*snip\s*>)\s*$",
                      re.IGNORECASE)
_ELISION_TEXT = lazyre.compile(r"(?m)^\s*(?:\.{3,}|…|\[\.\.\.\]|<\s*snip\s*>)\s*$")
_SEPARATOR = lazyre.compile(r"^-{2}$")
_JOURNAL_MARK = lazyre.compile(r"^-- (?:Logs begin|Journal begins|No entries|Boot [0-9a-f]+|Reboot|Subject|Defined-By)"
                           r".*$")
_FENCE = lazyre.compile(r"^\s*(?:```|~~~)[\w+-]*\s*$")
_DASHES = lazyre.compile(r"^-{5,}$")
_HOSTLIST = lazyre.compile(r"^(?P<hosts>[A-Za-z0-9][\w.,\[\]-]{0,1024})(?: \(\d+\))?$")
_ANSIBLE = lazyre.compile(r"^(?P<host>[\w.-]+) \| (?:CHANGED|SUCCESS|FAILED|UNREACHABLE!?) (?:\| rc=-?\d+ )?>>\s*$")
_PSSH = lazyre.compile(r"^\[\d+\] \d\d:\d\d:\d\d \[(?:SUCCESS|FAILURE)\] (?P<host>[\w.-]+)(?::\d+)?\b.*$")


@dataclass
class Part:
    """A run of raw lines between structure markers: one command's output on one host."""

    host: str
    command: str
    first: int  # 1-based line number of its first line
    chunks: list[str] = field(default_factory=list)  # pieces of the text, structure lines removed
    excerpt: bool = False
    prompt_host: str = ""

    @property
    def body(self) -> str:
        text = self.chunks[0] if len(self.chunks) == 1 else "".join(self.chunks)
        return text[:-1] if text.endswith("\n") else text

    def empty(self) -> bool:
        return all(not c or c.isspace() for c in self.chunks)


# Lines that may be structure (a superset, found at C speed); `_structure` decides.
_HINT = lazyre.compile(r"\n(?=[-`~.\u2026$#(]|\[(?:[\w.-]+@|\d+\] \d\d:|\.\.\.\]|(?:output )?(?:truncated|snipped|cut)\])"
                   r"|(?=(?P<w>[\w.-]+))(?P=w)(?:@|:[~/]| \| |\$ |# )|(?:bash|sh|zsh)-\d|<\s*snip)")


def _dedent(text: str) -> str:
    """Remove the indentation every non-blank line shares (an indented paste, a commit message)."""
    first = next((ln for ln in _head_lines(text, 50) if ln.strip()), "")
    if not first[:1].isspace():
        return text
    lines = text.split("\n")
    widths = [len(r) - len(r.lstrip(" \t")) for r in lines if r.strip()]
    cut = min(widths) if widths else 0
    if cut == 0:
        return text
    prefixes = {r[:cut] for r in lines if r.strip()}
    if len(prefixes) != 1:
        return text  # tabs and spaces mixed: leave it
    return "\n".join(r[cut:] if r.strip() else "" for r in lines)


def _line_at(text: str, off: int) -> tuple[str, int]:
    end = text.find("\n", off)
    if end < 0:
        end = len(text)
    return text[off:end], end


@dataclass(frozen=True)
class _Marker:
    """A structure line (or lines) of the input: what it is and where it ends."""

    kind: str  # "separator" (grep --), "drop" (a fence, a journal marker), "host" (a header), "prompt"
    end: int  # offset of the newline that ends its last line
    host: str = ""  # the host a header names
    command: str = ""  # the command typed at a prompt, continuation lines joined
    prompt_host: str = ""  # the host the prompt names


def _marker(text: str, line: str, end: int) -> _Marker | None:
    """What structure the line `line` (ending at offset `end` of `text`) is, None for output."""
    s = line.strip()
    if s == "--":
        return _Marker("separator", end)
    if s and s[0] in "-`~" and (_FENCE.match(line) or _JOURNAL_MARK.match(s)):
        return _Marker("drop", end)
    if s.startswith("-----") and _DASHES.match(s):
        header = _dshbak_header(text, end)
        if header is not None:
            return header
    if not s:
        return None
    m = _ANSIBLE.match(s) or _PSSH.match(s)
    if m:
        return _Marker("host", end, host=m.group("host"))
    p = prompt_of(line)
    if p is None:
        return None
    cmd, consumed_to = p.command, end
    while cmd.endswith("\\") and consumed_to < len(text):  # a `\`-continued command
        nxt, consumed_to = _line_at(text, consumed_to + 1)
        cmd = cmd[:-1].rstrip() + " " + nxt.strip()
    return _Marker("prompt", consumed_to, command=cmd, prompt_host=p.host)


def _dshbak_header(text: str, end: int) -> _Marker | None:
    """A `dshbak`/`clubak` host header: dashes, host list, dashes (the first dashes end at `end`)."""
    l1, e1 = _line_at(text, end + 1) if end < len(text) else ("", end)
    l2, e2 = _line_at(text, e1 + 1) if e1 < len(text) else ("", e1)
    hm = _HOSTLIST.match(l1.strip())
    if hm and _DASHES.match(l2.strip()):
        return _Marker("host", e2, host=hm.group("hosts"))
    return None


class _PartCutter:
    """Cuts a text into parts at its structure lines (in order of offset)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.parts: list[Part] = []
        self.cur = Part(host="", command="", first=1)
        self.host = ""  # the host named by the last host header
        self.done = 0  # text before this offset is accounted for
        self.lineno = 1  # the line number at offset `counted`
        self.counted = 0

    def cut(self, off: int, mark: _Marker) -> None:
        """Account for the text up to the structure at `off`, then for the structure itself."""
        text = self.text
        self.lineno += text.count("\n", self.counted, off)
        self.counted = off
        self.cur.chunks.append(text[self.done:off])
        self.done = min(len(text), mark.end + 1)
        if mark.kind == "separator":
            self.cur.excerpt = True
            return
        if mark.kind == "drop":
            return
        self._close()
        first = self.lineno + text.count("\n", off, self.done)
        if mark.kind == "host":
            self.host = mark.host
            self.cur = Part(host=self.host, command="", first=first)
        else:
            self.cur = Part(host=self.host, command=mark.command, first=first, prompt_host=mark.prompt_host)

    def _close(self) -> None:
        if not self.cur.empty() or self.cur.command:
            self.parts.append(self.cur)

    def finish(self) -> list[Part]:
        self.cur.chunks.append(self.text[self.done:])
        self._close()
        return self.parts


def split_parts(text: str) -> list[Part]:
    """Cut normalised text into parts at prompts and host headers; drop pure structure lines."""
    if all(ln.startswith(">") for ln in _head_lines(text, 200) if ln.strip()) and text.strip():
        text = re.sub(r"(?m)^> ?", "", text)  # a quoted paste
    cutter = _PartCutter(text)
    starts = ([0] if text else []) + [m.start() + 1 for m in _HINT.finditer(text)]
    for off in starts:
        if off < cutter.done or off >= len(text):
            continue
        line, end = _line_at(text, off)
        mark = _marker(text, line, end)
        if mark is not None:
            cutter.cut(off, mark)
        elif _ELISION.match(line):
            cutter.cur.excerpt = True
    return cutter.finish()


# ---------------------------------------------------------------------------------------------
# Whole inputs


@dataclass
class Framed:
    """A whole input cut into documents: one per command output per host, in input order."""

    docs: list[Doc]
    hosts: list[str]  # hosts named by host framing (pdsh, clush, dshbak, ansible ...), in order
    labels: list[int] = field(default_factory=list)  # srun task labels, when the input had them

    def by_host(self) -> dict[str, list[Doc]]:
        out: dict[str, list[Doc]] = {}
        for d in self.docs:
            out.setdefault(d.host, []).append(d)
        return out


def frame(text: str, origin: str = "", year_hint: int | None = None) -> Framed:
    """Raw pasted text -> documents with clean lines (see the module docstring)."""
    text = normalise(text)
    docs: list[Doc] = []
    hosts: list[str] = []
    for part in split_parts(text):
        body = _dedent(part.body)
        stack = sniff(_head_lines(body, SNIFF_LINES))
        if stack.outer[:1] in (("pdsh",), ("kubectl",)):
            for h, sub in _split_by_host(body.split("\n"), stack, part.first).items():
                d = Doc(sub[1], command=part.command, host=h or part.host, origin=origin, first_line=sub[0],
                        excerpt=part.excerpt, year_hint=year_hint)
                docs.append(d)
                if d.host and d.host not in hosts:
                    hosts.append(d.host)
            continue
        d = Doc(body, command=part.command, host=part.host, origin=origin, first_line=part.first,
                excerpt=part.excerpt, year_hint=year_hint)
        d._stack = stack
        docs.append(d)
        if part.host and part.host not in hosts:
            hosts.append(part.host)
    return Framed(docs=docs, hosts=hosts)


def _split_by_host(raws: list[str], stack: Stack, first: int) -> dict[str, tuple[int, str]]:
    """pdsh/clush output -> {host: (first line number, its lines with the host prefix removed)}."""
    t = _TRANSPORTS[stack.outer[0]] if stack.outer and stack.outer[0] in ("pdsh", "kubectl") else None
    per: dict[str, list[str]] = {}
    starts: dict[str, int] = {}
    for i, r in enumerate(raws):
        m = t.pattern.match(r) if t else None
        h = m.group("host") if m else ""
        body = r[m.end():] if m else r
        if not m and not r.strip():
            continue
        per.setdefault(h, []).append(body)
        starts.setdefault(h, first + i)
    if "" in per and len(per) > 1 and all(not x.strip() for x in per[""]):
        del per[""]
    return {h: (starts[h], _dedent("\n".join(v))) for h, v in per.items()}


def year_of(docs: Iterable[Doc], default: int | None = None) -> int | None:
    """A year for time stamps that carry none (syslog), from the first time stamp that does."""
    for d in docs:
        for ln in d.head(200):
            if ln.time is not None and ln.time.year > 1900 and "syslog" not in ln.layers:
                return ln.time.year
    return default


def syslog_year_fix(t: datetime | None, reference: datetime) -> datetime | None:
    """A syslog time parsed with year 1900 placed in the year of `reference` (or the one
    before, when it would lie more than two days after it)."""
    if t is None or t.year != 1900:
        return t
    try:
        cand = t.replace(year=reference.year)
    except ValueError:  # 29 Feb
        cand = t.replace(year=reference.year, day=28)
    ref = reference.replace(tzinfo=None)
    if cand - ref > timedelta(days=2):
        cand = cand.replace(year=reference.year - 1)
    return cand


__all__ = ["DETECT_ENDS", "Doc", "Framed", "Hit", "Line", "Part", "Prompt", "Stack", "filter_allows", "frame", "grep_patterns",
           "normalise", "parse_iso", "peel_line", "prompt_of", "sniff", "split_parts", "syslog_year_fix",
           "year_of"]
