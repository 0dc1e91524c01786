"""`nvidia-smi -q -x` (the query's XML form) read into the same QReport as the text `-q`.

The XML (root `<nvidia_smi_log>`, DTD `nvsmi_device_v*.dtd`) carries the fields of the text form
under tag names: `<remapped_rows><remapped_row_pending>` is `Remapped Rows / Pending`. Each GPU
(`<gpu id="BUS">`) becomes one QGpu whose fields are keyed by the text form's section paths, so
the graders read both forms alike; each field keeps its XML line as printed for evidence. Tags are
named by the text form's label where the two differ (tables below) and otherwise by their words
(`sram_uncorrectable_parity` -> `SRAM Uncorrectable Parity`). Every DTD release is read: v10's
`clocks_throttle_reasons` and Single/Double Bit ECC counters, v12's SRAM/DRAM counters, T.Limit
temperatures, fabric state and health.

The document is read element by element as it comes, never as a whole: the DOCTYPE and anything
above the root are not read (no entity or DTD is ever loaded), a paste cut off mid-document keeps
every element it completed (and is marked an excerpt: GPUs may be missing), and an unreadable
stretch ends reading until the next `<gpu id=...>` or `<nvidia_smi_log>` line. Never raises.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import cast
from xml.etree.ElementTree import Element, ParseError, XMLPullParser

from preflight import lazyre
from preflight.framing import Doc
from preflight.parsers import nvsmi_qreport as qr
from preflight.parsers.nvsmi_errors import errors_in
from preflight.parsers.nvsmi_qreport import BUS, QGpu, QReport

ROOT = "nvidia_smi_log"
_ROOT_OPEN = lazyre.compile(rf"<{ROOT}\s*>")
_GPU_OPEN = lazyre.compile(rf"<gpu\s+id\s*=\s*[\"']{BUS}[\"']\s*>")
_NEW_DOC = lazyre.compile(rf"<\?xml\b|<!DOCTYPE\b|<{ROOT}\s*>")
_DTD = lazyre.compile(r"<!DOCTYPE\s+nvidia_smi_log\b|nvsmi_device_v\d+\.dtd")
_TAG = lazyre.compile(r"<([A-Za-z_][\w.-]*)")

# words spelt as the text form spells them
_WORDS = {"gpu": "GPU", "mig": "MIG", "ecc": "ECC", "sram": "SRAM", "dram": "DRAM", "fb": "FB", "bar1": "BAR1",
          "pci": "PCI", "pcie": "PCIE", "uuid": "UUID", "sw": "SW", "hw": "HW", "sm": "SM", "cbu": "CBU", "secded": "SEC-DED", "tpc": "TPC"}

# GPU-level tags whose text label is not their words (the rest: their words, spelt as GPU_LEVEL has them)
TOP: dict[str, str] = {
    "serial": "Serial Number", "uuid": "GPU UUID", "pdi": "GPU PDI", "gpu_fru_part_number": "FRU Part Number",
    "gpu_module_id": "Module ID", "inforom_bbx_flush": "Inforom BBX Object Flush", "c2c_mode": "GPU C2C Mode",
    "cc_protected_memory_usage": "Conf Compute Protected Memory Usage", "power_profiles": "Workload Power Profiles",
}

# tags below the GPU level whose text label is not their words; "" = the parent's own value
# (`<multiple_single_bit_retirement><retired_count>2` is `Retired Pages / Single Bit ECC : 2`)
NESTED: dict[str, str] = {
    # PCI (its `pci_` prefix dropped first)
    "pcie_gen": "PCIe Generation",
    "max_link_gen": "Max", "current_link_gen": "Current", "link_widths": "Link Width", "max_link_width": "Max",
    "current_link_width": "Current", "replay_counter": "Replays Since Reset",
    "replay_rollover_counter": "Replay Number Rollovers",
    # utilization
    "gpu_util": "Gpu", "memory_util": "Memory",
    # reset status
    "drain_and_reset_recommended": "Drain and Reset Recommended",
    # ECC (MIG devices name their counters apart)
    "texture_shm": "Texture Shared", "ecc_error_count": "ECC Errors", "volatile_count": "Volatile", "aggregate_count": "Aggregate",
    # retired pages
    "multiple_single_bit_retirement": "Single Bit ECC", "double_bit_retirement": "Double Bit ECC",
    "retired_count": "", "pending_blacklist": "Pending Page Blacklist",
    # remapped rows
    "remapped_row_corr": "Correctable Error", "remapped_row_unc": "Uncorrectable Error",
    "remapped_row_pending": "Pending", "remapped_row_failure": "Remapping Failure Occurred",
    "row_remapper_histogram": "Bank Remap Availability Histogram",
    # temperature: absolute readings and thresholds, then the T.Limit margins (R535+)
    "gpu_temp": "GPU Current Temp", "gpu_temp_max_threshold": "GPU Shutdown Temp",
    "gpu_temp_slow_threshold": "GPU Slowdown Temp", "gpu_temp_max_gpu_threshold": "GPU Max Operating Temp",
    "memory_temp": "Memory Current Temp", "gpu_temp_max_mem_threshold": "Memory Max Operating Temp",
    "gpu_temp_tlimit": "GPU T.Limit Temp", "gpu_temp_max_tlimit_threshold": "GPU Shutdown T.Limit Temp",
    "gpu_temp_slow_tlimit_threshold": "GPU Slowdown T.Limit Temp",
    "gpu_temp_max_gpu_tlimit_threshold": "GPU Max Operating T.Limit Temp",
    "gpu_temp_max_mem_tlimit_threshold": "Memory Max Operating T.Limit Temp",
    # fabric
    "cliqueId": "CliqueId", "clusterUuid": "ClusterUUID",
}
# clock event reasons (`clocks_event_reason_` or, before R535, `clocks_throttle_reason_` + this)
REASONS = {"gpu_idle": "Idle", "display_clocks_setting": "Display Clock Setting"}
_REASON = lazyre.compile(r"^clocks_(?:event|throttle)_reason_(?P<name>\w+)$")
_HISTOGRAM = lazyre.compile(r"^row_remapper_histogram_(?P<name>\w+)$")
# lists the text form does not print field by field (a retired page's address and time)
SKIPPED = frozenset({"retired_pagelist"})


def words(tag: str) -> str:
    """A tag in the text form's words: `sram_uncorrectable_secded` -> `SRAM Uncorrectable SEC-DED`."""
    parts = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", tag).split("_")
    return " ".join(_WORDS.get(w.lower(), w[:1].upper() + w[1:]) for w in parts if w)


def label(tag: str, parent: str, top: bool) -> str | None:
    """The text form's label of `tag` under `parent` ("" = the parent's value, None = not read)."""
    if tag in SKIPPED:
        return None
    if top:
        name = TOP.get(tag) or words(tag)
        return qr.GPU_LEVEL.get(name.lower(), name)
    if parent == "pci":  # <pci><pci_bus_id>: PCI / Bus Id
        tag = tag.removeprefix("pci_")
    if tag in NESTED:
        return NESTED[tag]
    m = _REASON.match(tag) or _HISTOGRAM.match(tag)
    if m:
        return REASONS.get(m.group("name")) or words(m.group("name"))
    mode = re.match(r"^(current|pending)_", tag)
    if mode and parent.endswith(("_mode", "_model")):  # <ecc_mode><current_ecc>: ECC Mode / Current
        return mode.group(1).capitalize()
    return words(tag)


def _line(tag: str, value: str, raw: str) -> str:
    """The element's line as printed (padding collapsed), else the element written out."""
    body = raw.strip()
    shown = body if body.startswith(f"<{tag}") and body.endswith(f"</{tag}>") else f"<{tag}>{value}</{tag}>"
    return re.sub(r"\s{2,}", " ", shown)


@dataclass
class _Reader:
    """Reads the elements as the pull parser completes them."""

    report: QReport
    gpu: QGpu | None = None
    stack: list[tuple[str, str | None]] = field(default_factory=list)  # (tag, path) of the open elements
    seen: dict[str, int] = field(default_factory=dict)  # path -> times shown in this GPU's element
    raw: str = ""  # the line being read
    done: bool = False  # pragma: no mutate (reset for each parser) the root element ended

    def opened(self) -> list[str]:
        """The open elements' start tags (to reopen them in a new parser)."""
        return [f"<{tag}>" for tag, _ in self.stack]

    def start(self, elem: Element) -> None:
        depth = len(self.stack)
        if elem.tag == ROOT and depth:
            raise ParseError(f"<{ROOT}> inside a document")  # read as the next document
        if depth == 1 and elem.tag == "gpu":
            self._open(elem.get("id", "").strip())
            self.stack.append((elem.tag, ""))
            return
        path: str | None = ""
        if depth >= 2 and self.gpu is not None:
            parent_tag, parent = self.stack[-1]
            name = None if parent is None else label(elem.tag, parent_tag, depth == 2)
            path = None if name is None else (f"{parent}/{name}" if parent and name else parent or name)
        self.stack.append((elem.tag, path))

    def end(self, elem: Element) -> None:
        _, path = self.stack.pop()
        depth = len(self.stack)
        self.done = not depth
        if elem.tag == "gpu" and depth == 1:
            self.gpu = None
            elem.clear()
            return
        if len(elem) or path is None:
            return
        value = (elem.text or "").strip()
        if depth == 1:
            name = qr.HEADER_KEYS.get(words(elem.tag).lower())
            if name:
                self.report.header[name] = value
                self.report.header_lines[name] = _line(elem.tag, value, self.raw)
            return
        if self.gpu is None or not path or not value:  # an empty element is an empty section
            return
        n = self.seen[path] = self.seen.get(path, 0) + 1
        stored = path if n == 1 else f"{path}#{n}"
        self.gpu.fields[stored] = value
        self.gpu.lines[stored] = _line(elem.tag, value, self.raw)
        if path == "PCI/Bus Id" and not self.gpu.bus_id:
            self.gpu.bus_id = value

    def _open(self, bus: str) -> None:
        """A GPU's element: a new GPU, or the same GPU shown again by a second run."""
        if self.gpu is not None:  # reopened after a line that did not read: the same GPU goes on
            return
        gpus = self.report.gpus
        gpu = next((g for g in gpus if bus and g.bus_id.lower() == bus.lower()), None)
        if gpu is None:
            gpu = QGpu(index=len(gpus), bus_id=bus)
            gpus.append(gpu)
        self.gpu, self.seen = gpu, {}


def _resume(lines: Sequence[str], start: int) -> tuple[int, int, bool]:
    """(line, column, is the root) of the next `<nvidia_smi_log>` or `<gpu id=...>` from `start`;
    line -1 when none."""
    for i in range(start, len(lines)):
        m = _ROOT_OPEN.search(lines[i]) or _GPU_OPEN.search(lines[i])
        if m:
            return i, m.start(), m.group().startswith(f"<{ROOT}")
    return -1, 0, False  # pragma: no mutate (line -1 ends reading: the column and kind are not read)


def read(lines: Sequence[str], report: QReport) -> None:
    """Every element of the document(s) into `report`. A line that does not read is skipped and
    reading goes on in the elements open before it (an excerpt: fields may be missing); text after
    a document's end is skipped to the next document."""
    reader = _Reader(report)
    i, col, is_root = _resume(lines, 0)
    context = [] if is_root else [f"<{ROOT}>"]  # a GPU's element without the root: read as under it
    while 0 <= i < len(lines):
        report.recognised = True
        parser: XMLPullParser[Element] = XMLPullParser(events=("start", "end"))
        reader.stack, reader.done = [], False
        text = "".join(context) + lines[i][col:]
        first = i
        try:
            while True:
                before = [] if reader.done else reader.opened() or context
                reader.raw = lines[i]
                parser.feed(text + "\n")
                events = cast("Iterator[tuple[str, Element]]", parser.read_events())  # pragma: no mutate (a type)
                for event, elem in events:
                    (reader.start if event == "start" else reader.end)(elem)
                i += 1
                if i >= len(lines):
                    break
                text = lines[i]
        except ParseError:
            new = i > first and bool(_NEW_DOC.search(lines[i]))  # a document that starts inside a cut one
            report.excerpt = report.excerpt or bool(before)
            if before and not new:  # inside a document: the line skipped, the elements open before it reopened
                context, i, col = before, i + 1, 0
                continue
            reader.gpu = None
            i, col, is_root = _resume(lines, i if new else i + 1)
            context = [] if is_root else [f"<{ROOT}>"]
            continue
        if reader.stack:  # cut off before the root's end
            report.excerpt = True
        return


_HEAD = 600  # pragma: no mutate (lines a detector reads, as the text form's)


def detect_lines(lines: Sequence[str]) -> bool:
    """The XML form: its root or DTD, or a `<gpu id="BUS">` element whose first child is a tag of
    the GPU level (any other XML with a `gpu` element is not taken)."""
    for i, t in enumerate(lines[:_HEAD]):
        if _ROOT_OPEN.search(t) or _DTD.search(t):
            return True
        m = _GPU_OPEN.search(t)
        if not m:
            continue
        after = t[m.end():].strip() or next((x for x in lines[i + 1:] if x.strip()), "")
        child = _TAG.search(after)
        if child and (child.group(1) in TOP or words(child.group(1)).lower() in qr.GPU_LEVEL):
            return True
    return False


def detect(doc: Doc) -> bool:
    return detect_lines([ln.text for ln in doc.head(_HEAD)])


def parse(doc: Doc) -> QReport:
    """`nvidia-smi -q -x` (whole, `-d`, `-i`, cut off) -> QReport, the fields by their text paths."""
    lines = [ln.text for ln in doc.lines]
    report = QReport(errors=errors_in(lines))
    read(lines, report)
    return report


__all__ = ["NESTED", "REASONS", "ROOT", "SKIPPED", "TOP", "detect", "detect_lines", "label", "parse", "read", "words"]
