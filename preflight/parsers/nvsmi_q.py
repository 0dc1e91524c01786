"""`nvidia-smi -q` as data: the header, one block per GPU, every field by its section path.

`nvidia-smi -q` prints a header (driver and CUDA versions, attached GPU count) and one indented
block per GPU under `GPU <bus id>`. Sections are lines without a value; fields are `label : value`
with the label padded to a column whose width changes between driver branches (R450-R550: 38,
R570 and later: 47 and more). A field may carry deeper-indented children (`HW Slowdown : Active`
over `HW Thermal Slowdown`); they belong to the enclosing section. Older drivers name some
sections differently (`Clocks Throttle Reasons`, renamed `Clocks Event Reasons` in R535;
`Power Readings`, later `GPU Power Readings`); section names are matched without regard to case
and kept under one spelling. The parser keeps every field by its section path
(`Remapped Rows/Pending`) with the line as printed, so graders can quote it.

Any part of the output parses, at any indentation (a notebook or a mail quote indents the whole
block): `-d ECC,ROW_REMAPPER,...` subsets, `-i <index or bus>` for one GPU (the command line, when
the capture shows it, gives the GPU's index), and `grep` excerpts. A section shown without its GPU
header (`nvidia-smi -q | grep -A 12 "Remapped Rows"`) opens a block for a GPU whose bus id is not
shown; the same section again opens the next GPU's block. A line whose label belongs to one
section only (`Remapping Failure Occurred`, `Pending Page Blacklist`, `Reset Required`) is read
under that section even when the excerpt dropped the section's own line; an excerpt that starts at
`Volatile` or `Aggregate` is read under `ECC Errors`. The same GPU shown by
two runs in one paste (`-d ECC` then `-d ROW_REMAPPER`) is one GPU; the later reading wins. What
a fragment does not show is absent from the facts, never filled in.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from preflight import lazyre
from preflight.framing import Doc
from preflight.parsers import nvsmi_qreport as qr
from preflight.parsers import nvsmi_xml
from preflight.parsers.base import Format, ParserSpec, clean, to_bool, to_int
from preflight.parsers.nvsmi_errors import ToolError, errors_in
from preflight.parsers.nvsmi_qreport import BUS, GPU_LEVEL, HEADER_KEYS, QGpu, QReport

_GPU_HEADER = lazyre.compile(rf"^GPU\s+({BUS})$")
_FIELD = lazyre.compile(r"^(?P<key>[^:]*?\S)\s*:(?:\s*(?P<value>.*?))?\s*$")
# `nvidia-smi -r` refusing a reset: read with the GPU's other messages (gpu.health grades it)
# a reader's mark after a value, pasted with it: `Pending : Yes   <===`, `<-- here`, `<<<`
_ANNOTATION = lazyre.compile(r"\s+(?:<[=-]+|<<+|\u2190|[=-]+>)(?:\s.*)?$")
_RESET_REFUSED = lazyre.compile(r"following GPUs could not be reset|Unable to reset GPU", re.IGNORECASE)
_NVML_LIB = lazyre.compile(r"NVML library version:?\s*(?P<v>\d+\.\d+(?:\.\d+)?)", re.IGNORECASE)


# Labels that belong to one section only: a grep excerpt that dropped the section's line still
# places them (lower case label -> section path).
IMPLIED: dict[str, str] = {
    "reset required": "GPU Reset Status", "drain and reset recommended": "GPU Reset Status",
    "pending page blacklist": "Retired Pages",
    "remapping failure occurred": "Remapped Rows", "bank remap availability histogram": "Remapped Rows",
    "correctable error": "Remapped Rows", "uncorrectable error": "Remapped Rows",
    "sram threshold exceeded": "ECC Errors/Aggregate", "channel repair pending": "ECC Errors",
    "tpc repair pending": "ECC Errors", "unrepairable memory": "ECC Errors",
    "replays since reset": "PCI", "replay number rollovers": "PCI", "tx throughput": "PCI", "rx throughput": "PCI",
    "atomic caps inbound": "PCI", "atomic caps outbound": "PCI",
}

# Sections that at a GPU's level only `ECC Errors` holds: an excerpt that starts at one (`nvidia-smi
# -q | grep -A6 Volatile`) is read under ECC Errors, each repeat of it as the next GPU. Not in
# IMPLIED: inside a block a MIG device's own `ECC Errors/Volatile` keeps its place.
EXCERPT_IMPLIED: dict[str, str] = {"volatile": "ECC Errors", "aggregate": "ECC Errors"}

# Sections within sections (lower case), for a paste whose indentation was lost: a flattened block
# is read by this schema instead of by its indentation.
SUBSECTIONS: dict[str, frozenset[str]] = {
    "ecc errors": frozenset({"volatile", "aggregate", "aggregate uncorrectable sram sources"}),
    "volatile": frozenset({"single bit", "double bit"}), "aggregate": frozenset({"single bit", "double bit"}),
    "remapped rows": frozenset({"bank remap availability histogram"}),
    "pci": frozenset({"gpu link info", "bridge chip"}), "gpu link info": frozenset({"pcie generation", "link width"}),
    "mig devices": frozenset({"mig device"}),
    "mig device": frozenset({"device attributes", "ecc errors", "fb memory usage", "bar1 memory usage"}),
    "device attributes": frozenset({"shared"}), "fabric": frozenset({"health"}),
}

# Sections whose names make a fragment recognisably `nvidia-smi -q` (no other tool prints them).
DISTINCTIVE = frozenset({
    "remapped rows", "retired pages", "ecc errors", "clocks event reasons", "clocks throttle reasons",
    "gpu reset status", "gpu recovery action", "bank remap availability histogram", "pending page blacklist",
    "remapping failure occurred", "drain and reset recommended", "fb memory usage", "bar1 memory usage",
    "inforom version", "gpu power readings", "clocks event reasons counters", "max customer boost clocks"})


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def selected_gpu(command: str) -> str:
    """What a command line selects with `-i`/`--id` ("" when nothing): an index, a bus id or a
    UUID, or several of them comma-separated."""
    try:
        toks = shlex.split(command)
    except ValueError:
        toks = command.split()
    for i, tok in enumerate(toks):
        if tok in ("-i", "--id"):
            return toks[i + 1] if i + 1 < len(toks) else ""
        if tok.startswith("--id="):
            return tok.partition("=")[2]
        if tok.startswith("-i"):
            return tok[2:]
    return ""


# An ECC counter of the SRAM/DRAM layout (R470+): printed under both Volatile and Aggregate
_ECC_COUNTER = lazyre.compile(r"^\s*(?P<key>(?:SRAM|DRAM) (?:Correctable|Uncorrectable(?: Parity| SEC-DED)?))\s*:\s*"
                          r"(?P<value>\d+)\s*$", re.IGNORECASE)
_Q_COMMAND = lazyre.compile(r"\bnvidia-smi(?:\.exe)?\s+(?:[^|;]*\s)?(?:-q|--query)(?:\s|$|\|)")


def _grepped_counters(rep: QReport, lines: list[str]) -> None:
    """ECC counter lines grep'd out of `nvidia-smi -q` with their sections dropped (`nvidia-smi
    -q | grep -i correctable`). -q prints each counter under Volatile, then Aggregate: a counter
    seen twice is read in that order; seen once (or from several GPUs) it is only known to be part
    of the lifetime count, Aggregate (which is never below Volatile)."""
    hits = [(m.group("key"), m.group("value"), ln.strip()) for ln in lines if (m := _ECC_COUNTER.match(ln))]
    if not hits:
        return
    seen: dict[str, int] = {}
    for key, _, _ in hits:
        seen[key.lower()] = seen.get(key.lower(), 0) + 1
    gpu = QGpu(index=0, bus_id="", index_known=False)
    nth: dict[str, int] = {}
    for key, value, line in hits:
        n = nth[key.lower()] = nth.get(key.lower(), 0) + 1
        scope = ("Volatile" if n == 1 else "Aggregate") if seen[key.lower()] == 2 else "Aggregate"
        path = f"ECC Errors/{scope}/{key}" + (f"#{n}" if seen[key.lower()] > 2 else "")
        gpu.fields[path], gpu.lines[path] = value, _SPACES.sub(" ", line)
    rep.gpus.append(gpu)
    rep.recognised = True


def _q_command(command: str) -> bool:
    return bool(_Q_COMMAND.search(command))


def parse(doc: Doc) -> QReport:
    """`nvidia-smi -q` (whole, `-d SECTION`, `-i N`, or a grep'd section) -> QReport; its XML form
    (`-q -x`) -> the same QReport (parsers.nvsmi_xml). Never raises; unknown lines are ignored."""

    lines = [ln.text for ln in doc.lines]
    rep = nvsmi_xml.parse(doc) if nvsmi_xml.detect(doc) else parse_lines(lines)
    rep.command = doc.command or ""
    rep.excerpt = rep.excerpt or bool(doc.excerpt or doc.filter)
    if not rep.gpus and _q_command(rep.command):
        _grepped_counters(rep, lines)
    _apply_selection(rep)
    return rep


def parse_lines(lines: list[str]) -> QReport:
    reader = _Reader(QReport(errors=errors_in(lines)))
    for raw in lines:
        reader.read(raw)
    return reader.report


def _apply_selection(rep: QReport) -> None:
    """`-i N` with one GPU shown: that GPU is index N. A GPU shown alone out of several attached,
    without `-i N` in view, has no known index."""
    rep.selection = selected_gpu(rep.command) if "nvidia-smi" in rep.command else ""
    if len(rep.gpus) != 1:
        return
    g = rep.gpus[0]
    if rep.selection.isdigit():
        g.index, g.index_known = int(rep.selection), True
    elif g.bus_id and (rep.selection or rep.attached is not None and rep.attached > 1):
        g.index_known = False


_ANY_INDENT = -1  # pragma: no mutate (below every indentation: any negative value)
_STEP = 4  # pragma: no mutate (the indentation per section level: any positive step places lines alike)
# sections whose entries repeat within one GPU block (one per MIG device, process, clock pair)
REPEATING = ("MIG Devices", "Processes", "Accounted Processes", "Supported Clocks")


@dataclass
class _Reader:
    """Reads `-q` lines: the header's fields, then each GPU's fields by their section path."""

    report: QReport
    current: QGpu | None = None  # the GPU whose block this is
    base: int = 0  # pragma: no mutate (set when a block opens) the indentation of the block's GPU header
    stack: list[tuple[int, str]] = field(default_factory=list)  # (indent, path) of the open sections
    top: int | None = None  # the indentation of the current block's top-level lines
    seen: dict[str, int] = field(default_factory=dict)  # path -> times shown in this block
    anon: int = 0  # blocks opened without a GPU header
    flat: bool = False  # pragma: no mutate (set when a block opens) indentation lost: read by the schema
    fpath: list[str] = field(default_factory=list)  # the open sections of a flattened block
    last_section: tuple[int, str] | None = None  # (indent, path) of the line before, when a known section

    def read(self, raw: str) -> None:
        line = raw.replace("\t", "    ").rstrip()
        body = line.strip()
        if not body:
            return
        if "NVSMI LOG" in body:
            self.report.recognised = True
            self.current = None
            return
        lib = _NVML_LIB.search(body) if "library version" in body.lower() else None
        if lib:
            self.report.nvml_library, self.report.nvml_library_line = lib.group("v"), body
            return
        ind = _indent(line)
        m = _GPU_HEADER.match(body)
        if m:
            self._open(m.group(1), ind)
        elif self.current is not None and (self.flat or self._flattened(ind, body)):
            self._flat_line(body)
        elif self.current is not None and ind > self.base:
            self._nested(self.current, ind, body)
        else:
            self._outside(ind, body)

    def _flattened(self, ind: int, body: str) -> bool:
        """Whether this line shows that the block lost its indentation: a header's first field not
        deeper than the header, or a known section's first field or subsection not deeper than the
        section (a sibling section after it, `Aggregate` then `Volatile`, is no sign)."""
        fm = _FIELD.match(body)
        low = (fm.group("key").strip() if fm else body).lower()
        gpu, last = self.current, self.last_section
        if gpu is not None and gpu.bus_id and self.top is None and ind <= self.base and low in qr.GPU_LEVEL:
            self.flat, self.fpath = True, []
        elif last is not None and ind <= last[0] and low not in qr.GPU_LEVEL and (
                fm is not None or low in SUBSECTIONS.get(last[1].rpartition("/")[2].lower(), ())):
            self.flat, self.fpath = True, last[1].split("/")
        return self.flat

    def _flat_line(self, body: str) -> None:
        """A line of a flattened block, placed by the section schema at the indentation it had."""
        fm = _FIELD.match(body)
        key = fm.group("key").strip() if fm else body
        low = key.lower()
        depth = next((i + 1 for i in range(len(self.fpath) - 1, -1, -1)
                      if low in SUBSECTIONS.get(self.fpath[i].lower(), ())), None)
        if depth is None and low in IMPLIED:
            self.fpath = IMPLIED[low].split("/")
        if depth is None:
            depth = 0 if low in qr.GPU_LEVEL else len(self.fpath)
        section = fm is None or not (fm.group("value") or "").strip()
        self.fpath = [*self.fpath[:depth], key] if section else self.fpath[:depth]
        top = self.top if self.top is not None else self.base + _STEP  # pragma: no mutate (any start works)
        if self.current is not None:
            self._nested(self.current, top + _STEP * depth, body)

    def _reset(self, gpu: QGpu, base: int, top: int | None, flat: bool = False) -> None:
        self.current, self.base, self.top, self.stack, self.seen = gpu, base, top, [], {}
        self.flat, self.last_section = flat, None
        self.report.recognised = True

    def _open(self, bus: str, ind: int) -> None:
        """A GPU header: a new block, or the same GPU shown again by a second run."""
        report = self.report
        gpu = next((g for g in report.gpus if g.bus_id.lower() == bus.lower()), None)
        if gpu is None:
            gpu = QGpu(index=len(report.gpus), bus_id=bus)
            report.gpus.append(gpu)
        self._reset(gpu, ind, None)

    def _open_anonymous(self, ind: int, flat: bool = False) -> QGpu:
        """A block whose GPU header the excerpt does not show, its top level at `ind` or above."""
        gpu = QGpu(index=self.anon, bus_id="", index_known=False)
        self.anon += 1
        self.report.gpus.append(gpu)
        self._reset(gpu, _ANY_INDENT, ind, flat)
        return gpu

    def _outside(self, ind: int, body: str) -> None:
        """A line outside any GPU block: a header field, a section shown without its GPU header,
        or text that ends the block."""
        fm = _FIELD.match(body)
        key = (fm.group("key").strip() if fm else body).lower()
        if fm and key in qr.HEADER_KEYS:
            name = qr.HEADER_KEYS[key]
            self.report.header[name] = (fm.group("value") or "").strip()
            self.report.header_lines[name] = _SPACES.sub(" ", body)
            self.report.recognised = self.report.recognised or name == "Driver Version"
            self.current = None
        elif key in qr.GPU_LEVEL or key in IMPLIED:
            self._nested(self._open_anonymous(ind), ind, body)
        elif key in EXCERPT_IMPLIED and fm is None:
            gpu = self._open_anonymous(ind)
            self._excerpt_parent(key, ind)
            self._nested(gpu, ind, body)
        else:
            self.current = None

    def _nested(self, gpu: QGpu, ind: int, body: str) -> None:
        """An indented line of a GPU's block: a section name or a field within the open sections."""
        while self.stack and self.stack[-1][0] >= ind:
            self.stack.pop()
        fm = _FIELD.match(body)
        key = fm.group("key").strip() if fm else body
        low = key.lower()
        if self.top is None or ind <= self.top:
            if fm is None and not gpu.bus_id and low not in qr.GPU_LEVEL and low not in IMPLIED \
                    and not (low in EXCERPT_IMPLIED and self.stack):
                self.current = None  # text that is no -q line ends an excerpt's block
                return
            self.top = ind
            key = qr.GPU_LEVEL.get(low, key)
        parent = self.stack[-1][1] if self.stack else ""
        implied = IMPLIED.get(low)
        if implied and parent != implied:  # the excerpt dropped the section's own line, or it is flattened
            parent = implied
            self.stack.clear()
        path = f"{parent}/{key}" if parent else key
        if self.seen.get(path) and not gpu.bus_id and not path.startswith(REPEATING):
            gpu = self._open_anonymous(ind, self.flat)  # the same section again: the next GPU of the excerpt
            parent = implied or self._excerpt_parent(low, ind)
            path = f"{parent}/{key}" if parent else key
        value = _ANNOTATION.sub("", (fm.group("value") or "").strip()) if fm else None
        n = self.seen.get(path, 0) + 1
        self.seen[path] = n
        known = low in qr.GPU_LEVEL or _subsection(low)
        self.last_section = (ind, path) if fm is None and known else None
        if value is None or not value:  # a section (`Processes :` is one written with a colon)
            self.stack.append((ind, path))
            if value is None:
                return
        stored = path if n == 1 else f"{path}#{n}"
        gpu.fields[stored] = value
        gpu.lines[stored] = _SPACES.sub(" ", body)


    def _excerpt_parent(self, low: str, ind: int) -> str:
        """The section an excerpt's first line belongs to (EXCERPT_IMPLIED), opened above it ("" when none)."""
        parent = EXCERPT_IMPLIED.get(low, "")
        if parent:
            self.stack.append((ind - 1, parent))
        return parent


_SPACES = lazyre.compile(r"\s{2,}")  # a field line's runs of spaces, one in the evidence


def _subsection(low: str) -> bool:
    return low in _ALL_SUBSECTIONS


_ALL_SUBSECTIONS = frozenset(k for subs in SUBSECTIONS.values() for k in subs)


def _distinctive(text: str) -> bool:
    fm = _FIELD.match(text.strip())
    key = (fm.group("key").strip() if fm else text.strip()).lower()
    return key in DISTINCTIVE


_HEAD = 600  # pragma: no mutate (lines a detector reads: the first GPU block's start is in them)


def detect(doc: Doc) -> bool:
    """`nvidia-smi -q` output, whole or any part of it (a GPU header with indented fields, or
    sections only `-q` prints), or its XML form (`-q -x`)."""

    lines = [ln.text for ln in doc.head(_HEAD)]
    if nvsmi_xml.detect_lines(lines):
        return True
    if any("HL-SMI" in t for t in lines):  # Habana's hl-smi mimics the layout
        return False
    if any("NVSMI LOG" in t for t in lines):
        return True
    for i, t in enumerate(lines):
        if _GPU_HEADER.match(t.strip()):
            nxt = next((x for x in lines[i + 1:] if x.strip()), "")
            if _indent(nxt) > _indent(t) and (_FIELD.match(nxt.strip()) or nxt.strip().lower() in qr.GPU_LEVEL):
                return True
    if any(_distinctive(t) or _RESET_REFUSED.search(t) for t in lines):
        return True
    if _q_command(doc.command or "") and any(_ECC_COUNTER.match(t) for t in lines):
        return True  # counters grep'd out of -q, the command shown
    if any(t.strip().lower() in EXCERPT_IMPLIED and _ECC_COUNTER.match(nxt)
           for t, nxt in zip(lines, lines[1:], strict=False)):
        return True  # `Volatile` / `Aggregate` over an SRAM/DRAM counter: ECC Errors grep'd out of -q
    return bool(any(re.match(r"^\s*Driver Version\s+:", t) for t in lines)
                and any(re.match(r"^\s*Attached GPUs\s+:", t) for t in lines))


_PRIORITY = 60  # pragma: no mutate (any value above nvidia-smi-error's 30 picks this format for the probe)
# What `detect` cannot say yes without (lower-cased): the XML root, DTD or GPU element; the
# report's title; a GPU header (`GPU <bus id>`); a distinctive section or field; a refused reset;
# an ECC counter; the header's "Attached GPUs".
_COULD_WORDS = ("nvidia_smi_log", "nvsmi_device_v", "<gpu", "nvsmi log", *DISTINCTIVE, "could not be reset",
                "unable to reset gpu", "sram correctable", "sram uncorrectable", "dram correctable",
                "dram uncorrectable", "attached gpus")
_COULD_HEADER = lazyre.compile(r"gpu\s+[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]")


def could(doc: Doc) -> bool:
    """A cheap necessary condition of `detect` (C-speed searches of the head)."""
    head = doc.head_folded(_HEAD)  # pragma: no mutate (the lines detect reads)
    return any(w in head for w in _COULD_WORDS) or _COULD_HEADER.search(head) is not None


FORMATS = [Format("nvidia-smi-q", detect=detect, could=could, priority=_PRIORITY,
                  description="nvidia-smi -q (whole, -d SECTION, -i N, or a section; -q -x XML)")]
PARSERS = [ParserSpec("nvidia-smi-q", parse)]

__all__ = ["BUS", "DISTINCTIVE", "FORMATS", "GPU_LEVEL", "HEADER_KEYS", "IMPLIED", "PARSERS", "QGpu", "QReport",
           "ToolError", "clean", "detect", "parse", "parse_lines", "selected_gpu", "to_bool", "to_int"]
