"""`nvidia-smi topo -m` as facts: the device matrix, CPU/NUMA affinity, the NIC legend.

The header names the devices (GPU0.., then NIC0.. on R470 and later, or the RDMA devices'
own names, `mlx5_0` .. `mlx5_bond_0`, on older drivers) and then the affinity columns: `CPU
Affinity`, `NUMA Affinity` (R450 and later), `GPU NUMA ID` (R535 and later). Rows give one
cell per device: X (self), NV# (# bonded NVLinks), PIX, PXB, PHB, NODE, SYS, and SOC (the name
R3xx drivers gave the path across CPU sockets); PSB is read too. Columns are tab- or
space-separated, or run together where a copy lost the tabs; a row may end in empty tab
columns, and the affinity cells of a row may be merged (`0-45,92-1370`). The `NIC Legend:`
below maps NICn to its device name. A GPU row whose cells cannot all be read is kept as short
(`short`), never filled in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from preflight import lazyre
from preflight.framing import Doc
from preflight.parsers.base import Format, ParserSpec
from preflight.parsers.nvsmi_errors import ToolError, errors_in

_LEVELS = r"X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC|PSB"
_CELL = lazyre.compile(rf"\s*({_LEVELS})(?=\s|$|{_LEVELS}|\d)")
_AFFINITY_COLS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_LEGEND = lazyre.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
# device names run together in a header that lost its tabs
_RUN_TOGETHER = lazyre.compile(r"GPU\d+|NIC\d+|[a-z][a-z0-9]*(?:_[a-z]+)*_\d+")
_SELF_ROW = lazyre.compile(rf"^\s*GPU0\s*X(?=\s|$|{_LEVELS})")


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

    @property
    def short(self) -> list[str]:
        """GPU rows with fewer cells than the header has devices (a cell not read)."""
        return [g for g in self.gpus if len(self.matrix[g]) < len(self.devices)]

    def nic_name(self, col: str) -> str:
        return self.nic_legend.get(col, col)


def header_devices(header: str) -> list[str]:
    """The device columns of a header line (the names before the affinity columns)."""
    cut = min([header.find(c) for c in _AFFINITY_COLS if c in header] or [len(header)])
    part = header[:cut].strip()
    names = part.split()
    if len(names) == 1:  # one word: names that ran together (`GPU0GPU1NIC0`), or one device
        names = _RUN_TOGETHER.findall(part) or names
    return names


def _header_index(lines: list[str]) -> int | None:
    # the header names GPU0 as a word (a lost-GPU line above it says "GPU0000:9D:00.0"); the GPU0 row
    # (GPU0 then its own X cell) is not the header
    return next((i for i, ln in enumerate(lines)
                 if re.search(r"(?:^|\s)GPU0(?=\s|GPU1|NIC|CPU|mlx|$)", ln) and not _SELF_ROW.match(ln)), None)


def _row_regex(devices: list[str]) -> re.Pattern[str]:
    names = "|".join(re.escape(d) for d in sorted(devices, key=len, reverse=True))
    return re.compile(rf"^\s*({names})(?=\s|{_LEVELS})(.*)$")


def parse(doc: Doc) -> TopoMatrix:
    lines = [ln.text for ln in doc.lines]
    out = TopoMatrix(errors=errors_in(lines))
    header_i = _header_index(lines)
    if header_i is None:
        return out
    header = lines[header_i]
    out.header = header.strip()
    out.devices = header_devices(header)
    if not out.devices:
        return out
    aff_cols = [c for c in _AFFINITY_COLS if c in header]
    row_rx = _row_regex(out.devices)
    for ln in lines[header_i + 1:]:
        m = row_rx.match(ln)
        if not m:
            lm = _LEGEND.match(ln)
            if lm:
                out.nic_legend[lm.group(1)] = lm.group(2)
            continue
        row, rest = m.group(1), m.group(2)
        cells: dict[str, str] = {}
        pos = 0
        for col in out.devices:
            cm = _CELL.match(rest, pos)
            if not cm:
                break  # pragma: no mutate (continue is equivalent: the next column starts at the same place)
            cells[col] = cm.group(1)
            pos = cm.end()
        out.matrix[row] = cells
        out.lines[row] = ln.strip()
        tail = [t for t in re.split(r"\s+", rest[pos:].strip()) if t]
        out.affinity[row] = dict(zip(aff_cols, tail, strict=False))
    return out


DETECT_LINES = 200  # pragma: no mutate (how far a detector reads, not a grading value)


def detect(doc: Doc) -> bool:
    """The GPU0 row meeting itself (`GPU0  X`) below a header that names GPU0."""
    lines = [ln.text for ln in doc.head(DETECT_LINES)]
    row = next((i for i, t in enumerate(lines) if _SELF_ROW.match(t)), None)
    return row is not None and any("GPU0" in t for t in lines[:row])


FORMATS = [Format("nvidia-smi-topo", detect=detect, priority=60, description="nvidia-smi topo -m")]
PARSERS = [ParserSpec("nvidia-smi-topo", parse)]

__all__ = ["FORMATS", "PARSERS", "TopoMatrix", "detect", "header_devices", "parse"]
