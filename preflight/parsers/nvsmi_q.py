"""`nvidia-smi -q` as data: the header, one block per GPU, every field by its section path.

`nvidia-smi -q` prints a header (driver and CUDA versions, attached GPU count) and one
indented block per GPU. Sections are lines without a value; fields are `label : value`
with the label padded to a column whose width changes between driver branches (the 590
layout is wider). A section may itself carry a value (`HW Slowdown : Active` has deeper
indented children). The parser keeps every field by its section path
(`Remapped Rows/Pending`) together with the line as printed, so graders can quote it.

Fragments parse too: `-d ROW_REMAPPER` / `-d PAGE_RETIREMENT` (one section per GPU, maybe no
header), `-i N` (one GPU), and `grep -A N` excerpts (a section without its GPU header); what a
fragment does not show is absent from the facts, never filled in.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from preflight.framing import Doc
from preflight.parsers.base import Format, GpuRecord, ParserSpec, clean, to_bool, to_int
from preflight.parsers.nvsmi_errors import ToolError, errors_in

_GPU_HEADER = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_FIELD = re.compile(r"^(?P<key>[^:]*?\S)\s*:(?:\s+(?P<value>.*?))?\s*$")
# older drivers call the clock event reasons "throttle reasons"
_SECTION_ALIASES = {"Clocks Throttle Reasons": "Clocks Event Reasons"}


@dataclass
class QGpu:
    """One GPU block of `nvidia-smi -q`."""

    index: int  # position in the output (nvidia-smi lists GPUs in index order)
    bus_id: str
    fields: dict[str, str] = field(default_factory=dict)  # "Remapped Rows/Pending" -> "Yes"
    lines: dict[str, str] = field(default_factory=dict)  # path -> the line as printed (padding collapsed)

    def get(self, path: str) -> str | None:
        return self.fields.get(path)

    def line(self, path: str) -> str:
        return self.lines.get(path, path)

    def under(self, prefix: str) -> Iterator[tuple[str, str]]:
        """(path, value) of every field below section `prefix` (direct and nested)."""
        p = prefix.rstrip("/") + "/"
        for k, v in self.fields.items():
            if k.startswith(p):
                yield k, v

    @property
    def label(self) -> str:
        return f"GPU {self.index} ({self.bus_id})"

    @property
    def name(self) -> str:
        return self.fields.get("Product Name", "")

    def find(self, *suffixes: str) -> str:
        """The value of the first field whose path ends with one of `suffixes` ("" when none)."""
        for suf in suffixes:
            for k, v in self.fields.items():
                if k == suf or k.endswith("/" + suf):
                    return clean(v)
        return ""

    def record(self) -> GpuRecord:
        f = self.find
        return GpuRecord(
            index=self.index, name=f("Product Name") or None, uuid=f("GPU UUID") or None, bus_id=self.bus_id,
            vbios=f("VBIOS Version") or None, persistence=to_bool(f("Persistence Mode")),
            pstate=f("Performance State") or None,
            pcie_gen=to_int(f("PCIe Generation/Current")), pcie_gen_max=to_int(f("PCIe Generation/Max")),
            pcie_width=to_int(f("Link Width/Current")), pcie_width_max=to_int(f("Link Width/Max")),
            mig_mode=f("MIG Mode/Current") or None, mig_pending=f("MIG Mode/Pending") or None,
            memory_total_mib=to_int(f("FB Memory Usage/Total")), util=to_int(f("Utilization/Gpu")),
            line=f"GPU {self.bus_id}" + (f" {self.name}" if self.name else ""),
            cells={k.split("/")[-1]: v for k, v in self.fields.items()})


@dataclass
class QReport:
    header: dict[str, str] = field(default_factory=dict)
    header_lines: dict[str, str] = field(default_factory=dict)
    gpus: list[QGpu] = field(default_factory=list)
    errors: list[ToolError] = field(default_factory=list)
    recognised: bool = False  # the text looked like nvidia-smi -q output

    @property
    def driver(self) -> str:
        return clean(self.header.get("Driver Version"))

    @property
    def cuda(self) -> str:
        return clean(self.header.get("CUDA Version"))

    @property
    def attached(self) -> int | None:
        return to_int(self.header.get("Attached GPUs"))

    @property
    def listing(self) -> bool:
        """The GPU blocks are a listing of the node's GPUs (not a grep'd section or one `-i N`)."""
        return bool(self.gpus) and self.attached == len(self.gpus)

    @property
    def records(self) -> list[GpuRecord]:
        return [g.record() for g in self.gpus]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def parse(doc: Doc) -> QReport:
    """`nvidia-smi -q` (whole, `-d SECTION`, `-i N`, or a grep'd section) -> QReport. Never raises;
    unknown lines are ignored."""
    return parse_lines([ln.text for ln in doc.lines])


def parse_lines(lines: list[str]) -> QReport:
    reader = _Reader(QReport(errors=errors_in(lines)))
    for raw in lines:
        reader.read(raw)
    return reader.report


@dataclass
class _Reader:
    """Reads `-q` lines: the header's fields, then each GPU's fields by their section path."""

    report: QReport
    current: QGpu | None = None  # the GPU whose block this is
    stack: list[tuple[int, str]] = field(default_factory=list)  # (indent, name) of the open sections

    def read(self, raw: str) -> None:
        line = raw.replace("\t", "    ").rstrip()
        if not line.strip() or set(line.strip()) <= {"="}:
            return
        if "NVSMI LOG" in line:
            self.report.recognised = True
            return
        ind = _indent(line)
        body = line.strip()
        if ind == 0:
            self._top_level(body)
        elif self.current is not None:
            self._nested(self.current, ind, body)

    def _top_level(self, body: str) -> None:
        """A GPU's header line, or (before the first GPU) a header field."""
        report = self.report
        m = _GPU_HEADER.match(body)
        if m:
            self.current = QGpu(index=len(report.gpus), bus_id=m.group(1))
            report.gpus.append(self.current)
            self.stack = []
            report.recognised = True
            return
        fm = _FIELD.match(body)
        if fm and self.current is None:
            key = fm.group("key").strip()
            report.header[key] = (fm.group("value") or "").strip()
            report.header_lines[key] = re.sub(r"\s{2,}", " ", body)
            if key == "Driver Version":
                report.recognised = True

    def _nested(self, gpu: QGpu, ind: int, body: str) -> None:
        """An indented line of a GPU's block: a section name or a field within the open sections."""
        stack = self.stack
        while stack and stack[-1][0] >= ind:
            stack.pop()
        fm = _FIELD.match(body)
        if fm is None:
            stack.append((ind, _SECTION_ALIASES.get(body, body)))
            return
        key = fm.group("key").strip()
        value = (fm.group("value") or "").strip()
        path = "/".join([s for _, s in stack] + [key])
        if path in gpu.fields:  # repeated entries (several processes, MIG devices)
            n = 2
            while f"{path}#{n}" in gpu.fields:
                n += 1
            path = f"{path}#{n}"
        gpu.fields[path] = value
        gpu.lines[path] = re.sub(r"\s{2,}", " ", body)
        if not value:  # `Processes :` style: a section written with a colon
            stack.append((ind, key))


def detect(doc: Doc) -> bool:
    """`nvidia-smi -q` output, whole or a section of it (a GPU header with indented fields)."""
    lines = [ln.text for ln in doc.head(600)]
    if any("NVSMI LOG" in t for t in lines):
        return True
    for i, t in enumerate(lines):
        if _GPU_HEADER.match(t.strip()) and not t[:1].isspace():
            after = [x for x in lines[i + 1:i + 8] if x.strip()]
            if after and after[0][:1].isspace() and any(_FIELD.match(x.strip()) for x in after):
                return True
    return bool(any(re.match(r"^Driver Version\s+:", t) for t in lines)
                and any(re.match(r"^Attached GPUs\s+:", t) for t in lines))


FORMATS = [Format("nvidia-smi-q", detect=detect, priority=60,
                  description="nvidia-smi -q (whole, -d SECTION, -i N, or a section)")]
PARSERS = [ParserSpec("nvidia-smi-q", parse)]

__all__ = ["FORMATS", "PARSERS", "QGpu", "QReport", "ToolError", "clean", "detect", "parse", "parse_lines",
           "to_bool", "to_int"]
