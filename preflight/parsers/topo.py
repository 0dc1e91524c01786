"""`nvidia-smi topo -m` as facts: the device matrix, CPU/NUMA affinity, the NIC legend.

The header names the devices (GPU0.., NIC0.. or mlx5_0.. on older drivers) and then the
affinity columns. Rows give one cell per device: X (self), NV# (# bonded NVLinks), PIX, PXB,
PHB, NODE, SYS, SOC (old name of NODE), PSB. Columns may be tab- or space-separated, or run
together where a cell fills its column; the legend below maps NICn to its device name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from preflight.framing import Doc
from preflight.parsers.base import Format, ParserSpec
from preflight.parsers.nvsmi_errors import ToolError, errors_in

_DEVICE = re.compile(r"GPU\d+|NIC\d+|mlx\d+_\d+|[a-z]+\d*_\d+")
_LEVELS = r"X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC|PSB"
_CELL = re.compile(rf"\s*({_LEVELS})(?=\s|$|{_LEVELS})")
_AFFINITY_COLS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
_ROW = re.compile(r"^\s*(GPU\d+|NIC\d+|mlx\d+_\d+|[a-z]+\d*_\d+)(?=\s)(.*)$")


@dataclass
class TopoMatrix:
    devices: list[str] = field(default_factory=list)  # column names, in order
    matrix: dict[str, dict[str, str]] = field(default_factory=dict)  # row -> column -> cell
    affinity: dict[str, dict[str, str]] = field(default_factory=dict)  # row -> "CPU Affinity" -> "0-47"
    nic_legend: dict[str, str] = field(default_factory=dict)  # NIC0 -> mlx5_0
    lines: dict[str, str] = field(default_factory=dict)  # row -> line as printed
    header: str = ""
    errors: list[ToolError] = field(default_factory=list)

    @property
    def recognised(self) -> bool:
        return bool(self.matrix)

    @property
    def gpus(self) -> list[str]:
        return [d for d in self.devices if d.startswith("GPU") and d in self.matrix]

    @property
    def nics(self) -> list[str]:
        return [d for d in self.devices if not d.startswith("GPU")]

    def nic_name(self, col: str) -> str:
        return self.nic_legend.get(col, col)


def parse(doc: Doc) -> TopoMatrix:
    lines = [ln.text for ln in doc.lines]
    out = TopoMatrix(errors=errors_in(lines))
    # the header names GPU0 as a word (a lost-GPU line above it says "GPU0000:9D:00.0")
    header_i = next((i for i, ln in enumerate(lines)
                     if re.search(r"\bGPU0\b", ln) and not re.match(r"^\s*GPU0\s+X\b", ln)), None)
    if header_i is None:
        return out
    header = lines[header_i]
    out.header = header.strip()
    cut = min([header.find(c) for c in _AFFINITY_COLS if c in header] or [len(header)])
    out.devices = _DEVICE.findall(header[:cut])
    aff_cols = [c for c in _AFFINITY_COLS if c in header]
    for ln in lines[header_i + 1:]:
        m = _ROW.match(ln)
        if not m:
            lm = _LEGEND.match(ln)
            if lm:
                out.nic_legend[lm.group(1)] = lm.group(2)
            continue
        row, rest = m.group(1), m.group(2)
        if row not in out.devices:
            continue
        cells: dict[str, str] = {}
        pos = 0
        for col in out.devices:
            cm = _CELL.match(rest, pos)
            if not cm:
                break
            cells[col] = cm.group(1)
            pos = cm.end()
        out.matrix[row] = cells
        out.lines[row] = ln.strip()
        tail = [t.strip() for t in re.split(r"\t+|\s{2,}|\s", rest[pos:].strip()) if t.strip()]
        out.affinity[row] = dict(zip(aff_cols, tail, strict=False))
    return out


def detect(doc: Doc) -> bool:
    lines = [ln.text for ln in doc.head(200)]
    row = next((i for i, t in enumerate(lines) if re.match(r"^\s*GPU0\s+X\b", t)), None)
    return row is not None and any("GPU0" in t for t in lines[:row])


FORMATS = [Format("nvidia-smi-topo", detect=detect, priority=60, description="nvidia-smi topo -m")]
PARSERS = [ParserSpec("nvidia-smi-topo", parse)]

__all__ = ["FORMATS", "PARSERS", "TopoMatrix", "detect", "parse"]
