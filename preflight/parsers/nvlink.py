"""`nvidia-smi nvlink --status` / `-s` and `nvlink --errorcounters` / `-e` / `-ec` as facts.

One `GPU N: <name> (UUID: ...)` header per GPU, then one line per link.

`--status`: `Link L: 26.562 GB/s` (the speed the link trained at: 20 GB/s NVLink1 .. 25.781
V100, 25 A100, 26.562 H100, 50 / 53.125 Blackwell), or `Link L: <inactive>`. A GPU whose links
are all down prints `NVML: Unable to retrieve NVLink information as all links are inactive`
(older drivers: `inActive`) instead of links; a GPU without NVLink prints nothing under its
header. A listing may hold one GPU (`-i 6`) or one link (`-l 3`): it says nothing about the others.

`--errorcounters` (`-e`): one line per counter, `Link L: <counter>: <value>`. Pascal to Hopper
drivers print `Replay Errors`, `Recovery Errors`, `CRC Errors`; the NVLink5 drivers (R570 and
later, Blackwell) print the port counters instead: `Malformed packet Errors`, `Buffer overrun
Errors`, `Rx Errors`, `Rx remote Errors`, `Rx General Errors`, `Local link integrity Errors`,
`Tx discards`, `Link recovery successful events`, `Link recovery failed events`, `Total link
recovery events` (the sum of the two before it, kind `recovery_total`), `Effective Errors`, `Symbol Errors`, the rates `Effective BER` / `Symbol BER`
(`15e-255` is the floor: no error), the FEC histogram `FEC Errors - N` (bucket 0 counts the
clean codewords) and the pre-FEC `Raw BER ...` / `Raw Errors Lane N`, and the traffic
counters `Tx packets` / `Tx bytes` / `Rx packets` / `Rx bytes`. `-ec` prints per-lane CRC
counters. A `Link L: <name>: <value>` line is a counter when its name is of a known kind
(`COUNTER_KINDS`) or its value is a count; one of no known kind is kept as such (graded by
nobody, said by the grader). Other sub-commands' Link lines are traffic counters (`-gt d`:
`Link 0: Data Tx: 1 KiB`) or kept apart (`-p`: `Link 0: Remote PCI Bus ID: ...`,
`NvlinkGpu.other`): they are never link states.

Pastes are often cut by the poster (`...`, `...<snip>...`, `[...]`, `(truncated)`): a GPU
whose listing holds such a line is marked `cut` (its links not shown prove nothing), and a
listing filtered by its command (`| grep`, `| head`, `-l 3`) is marked `partial`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from preflight import lazyre
from preflight.framing import Doc
from preflight.parsers.base import Format, ParserSpec
from preflight.parsers.nvsmi_errors import ToolError, errors_in
from preflight.parsers.nvsmi_list import GPU_LINE

_LINK = lazyre.compile(r"^\s*Link\s+(\d+)\s*:\s*(.*?)\s*$")
_STATE = lazyre.compile(r"^(?:<\s*inactive\s*>|inactive|(\d+(?:\.\d+)?)\s*GB/s)$", re.I)
_ALL_INACTIVE = lazyre.compile(r"all links are inactive", re.I)
_COUNTER = lazyre.compile(r"^(?P<name>[A-Za-z][^:]*?)\s*:\s*(?P<value>\S.*?)?\s*$")
_NUMBER = lazyre.compile(r"^\d+$")
# a line the poster put in place of lines cut out of the paste
_CUT = lazyre.compile(r"\.{3}|…|\bsnip(?:ped)?\b|\btruncated\b|\bomitted\b|\belided\b|\bmore (?:lines|links)\b|^\W*cut\W*$",
                  re.I)
# a command whose output is a subset of the listing: piped through a filter or a pager that cuts,
# or restricted to one link (`-l N` / `--link N`)
_PIPED = lazyre.compile(r"\|\s*(?:sudo\s+)?(?:[efz]?grep|rg|head|tail|sed|awk)\b")
_ONE_LINK = lazyre.compile(r"(?:^|\s)(?:-l|--link)(?:\s+|=)\d+\b")

# counter name (lower case) -> kind, first match wins: traffic (`-gt`: Data Tx, Raw Rx) before the
# pre-FEC raw counters, those before the BER and CRC words they contain, a failed recovery and the
# total of recoveries before the other recovery counters
COUNTER_KINDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (lazyre.compile(r"^(?:tx|rx) (?:packets|bytes)$|^(?:data|raw) (?:tx|rx)\b"), "traffic"),
    (lazyre.compile(r"^raw\b"), "raw"),
    (lazyre.compile(r"\bber\b"), "ber"),
    (lazyre.compile(r"^fec\b"), "fec"),
    (lazyre.compile(r"\breplay"), "replay"),
    (lazyre.compile(r"recovery failed|failed recovery"), "recovery_failed"),
    (lazyre.compile(r"^total\b.*\brecover"), "recovery_total"),
    (lazyre.compile(r"\brecovery\b"), "recovery"),
    (lazyre.compile(r"\bcrc\b|\becc\b|^lane \d+$"), "crc"),
    (lazyre.compile(r"malformed|overrun|^rx (?:remote |general )?errors$|integrity|discard"), "packet"),
    (lazyre.compile(r"^(?:effective|symbol) errors$"), "symbol"),
)
# the kinds that count errors (graded); the others are rates, histograms and traffic
ERROR_KINDS = ("replay", "recovery", "recovery_failed", "crc", "packet", "symbol")
# `Total link recovery events` is the sum of the successful and the failed recoveries of its link:
# graded as recoveries only on a link that shows no such split (never added to it)
TOTAL_KINDS = {"recovery_total": ("recovery", ("recovery", "recovery_failed"))}


@dataclass
class Link:
    n: int
    up: bool  # a speed above 0 GB/s; `<inactive>` and 0 GB/s are down
    gbps: float | None
    line: str


@dataclass
class Counter:
    link: int
    name: str  # as printed: "Replay Errors", "FEC Errors - 3"
    value: int | None  # None: not a count (N/A, a rate, a size)
    text: str  # the value as printed
    kind: str  # COUNTER_KINDS' kind, "" for a counter of no known kind
    line: str


@dataclass
class NvlinkGpu:
    index: int
    name: str
    uuid: str
    line: str
    links: list[Link] = field(default_factory=list)
    all_inactive: bool = False  # NVML said every link is inactive (no per-link lines)
    notes: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)  # Link lines that are neither a state nor a counter
    counters: list[Counter] = field(default_factory=list)
    cut: list[str] = field(default_factory=list)  # lines the poster put where lines were cut

    @property
    def up(self) -> list[Link]:
        return [ln for ln in self.links if ln.up]

    @property
    def down(self) -> list[Link]:
        return [ln for ln in self.links if not ln.up]

    @property
    def numbered_from_zero(self) -> bool:
        """The links shown are 0..n-1, none skipped (what a listing cut at its end shows)."""
        return sorted(ln.n for ln in self.links) == list(range(len(self.links)))


@dataclass
class NvlinkReport:
    gpus: list[NvlinkGpu] = field(default_factory=list)
    errors: list[ToolError] = field(default_factory=list)
    unparsed: list[str] = field(default_factory=list)  # lines before any GPU header (not tool errors)
    excerpt: bool = False  # the paste holds lines cut by the poster (anywhere), or grep separators
    partial: str = ""  # why the command shows a subset of the links ("" when it shows all)

    @property
    def recognised(self) -> bool:
        return bool(self.gpus)

    @property
    def other(self) -> list[str]:
        """Link lines of another nvlink sub-command (capabilities, remote ids, throughput)."""
        return [t for g in self.gpus for t in g.other]

    @property
    def state_gpus(self) -> list[NvlinkGpu]:
        """The GPUs of a link-state listing: with link states, with the all-inactive message, or
        with nothing under the header in a listing that is not one of counters."""
        counters_only = not any(g.links for g in self.gpus) and any(g.counters or g.other for g in self.gpus)
        return [g for g in self.gpus
                if g.links or g.all_inactive or not (counters_only or g.counters or g.other)]

    @property
    def counter_gpus(self) -> list[NvlinkGpu]:
        return [g for g in self.gpus if g.counters]


def counter_kind(name: str) -> str:
    """The kind of an error counter by its name ("" when no kind fits)."""
    low = " ".join(name.lower().split())
    return next((kind for pat, kind in COUNTER_KINDS if pat.search(low)), "")


def _counters(link: int, rest: str, line: str) -> list[Counter]:
    """`Replay Errors: 0` (or several, comma-separated) -> counters; [] when the text is no
    `name: value` pair."""
    out = []
    for part in rest.split(","):
        m = _COUNTER.match(part.strip())
        if m is None:
            return []
        text = (m.group("value") or "").strip()
        value = int(text) if _NUMBER.match(text) else None
        out.append(Counter(link, m.group("name").strip(), value, text, counter_kind(m.group("name")), line))
    return out


def _link_line(g: NvlinkGpu, line: str, m: re.Match[str]) -> None:
    st = _STATE.match(m.group(2))
    if st is not None:
        gbps = float(st.group(1)) if st.group(1) else None
        g.links.append(Link(int(m.group(1)), gbps is not None and gbps > 0, gbps, line.strip()))
        return
    counters = _counters(int(m.group(1)), m.group(2), line.strip())
    if counters and any(c.kind or c.value is not None for c in counters):  # a known name, or a count
        g.counters.extend(counters)
    else:
        g.other.append(line.strip())


def partial_reason(command: str) -> str:
    """Why the command shows only some of the links ("" when it shows them all)."""
    if _ONE_LINK.search(command.split("|")[0]):
        return f"the command lists one link (`{command.strip()}`)"
    if _PIPED.search(command):
        return f"the command filters the listing (`{command.strip()}`)"
    return ""


def _gpu_line(g: NvlinkGpu, line: str) -> None:
    """A line under a GPU header: a link, a counter, NVML's all-inactive message, a cut, a note."""
    lm = _LINK.match(line)
    if lm:
        _link_line(g, line, lm)
        return
    text = line.strip()
    if _ALL_INACTIVE.search(text):
        g.all_inactive = True
    elif _CUT.search(text):
        g.cut.append(text)
        return
    g.notes.append(text)


def parse(doc: Doc) -> NvlinkReport:
    texts = [ln.text for ln in doc.lines]
    out = NvlinkReport(errors=errors_in(texts), excerpt=doc.excerpt, partial=partial_reason(doc.command))
    error_lines = {t for e in out.errors for t in e.lines}
    for raw in texts:
        line = raw.rstrip()
        if not line.strip():
            continue
        m = GPU_LINE.match(line)
        if m:
            out.gpus.append(NvlinkGpu(int(m.group(1)), m.group(2).strip(), (m.group(3) or "").strip(), line.strip()))
        elif out.gpus:
            _gpu_line(out.gpus[-1], line)
        elif _CUT.search(line):
            out.excerpt = True  # GPUs cut from the top of the paste
        elif line.strip() not in error_lines:
            out.unparsed.append(line.strip())
    out.excerpt = out.excerpt or any(g.cut for g in out.gpus)
    return out


DETECT_LINES = 400  # pragma: no mutate (how far a detector reads, not a grading value)


def detect(doc: Doc) -> bool:
    """A GPU header line with link lines (a state or a counter) or the all-inactive message."""
    lines = [ln.text for ln in doc.head(DETECT_LINES)]
    return any(GPU_LINE.match(t) for t in lines) and any(_LINK.match(t) or _ALL_INACTIVE.search(t) for t in lines)


FORMATS = [Format("nvidia-smi-nvlink", detect=detect, priority=60,
                  description="nvidia-smi nvlink --status / -s, nvlink --errorcounters / -e / -ec")]
PARSERS = [ParserSpec("nvidia-smi-nvlink", parse)]

__all__ = ["COUNTER_KINDS", "Counter", "ERROR_KINDS", "TOTAL_KINDS", "FORMATS", "PARSERS", "Link", "NvlinkGpu", "NvlinkReport",
           "counter_kind", "detect", "parse", "partial_reason"]
