"""The default `nvidia-smi` table (the 325-era, 510/525, 550 and 590 layouts) as facts.

The banner gives the nvidia-smi, driver and CUDA versions (CUDA absent on old drivers); each
GPU is a block of two or three table rows between `+---+` rules. Cells are kept as printed
("N/A", "ERR!"); the process list and the MIG device table below are not GPUs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from preflight.framing import Doc
from preflight.parsers.base import Format, GpuRecord, ParserSpec, clean, to_bool, to_int
from preflight.parsers.nvsmi_errors import ToolError, errors_in

_TABLE_VERSION = re.compile(r"NVIDIA-SMI\s+(\S+)\s+Driver Version:\s*(\S+)(?:\s+CUDA Version:\s*(\S+))?")
_TABLE_RULE = re.compile(r"^\|=+[=+|]*\|?\s*$")


@dataclass
class SmiTable:
    smi_version: str = ""
    driver: str = ""
    cuda: str = ""
    gpus: list[dict[str, Any]] = field(default_factory=list)  # see `gpu_rows`
    errors: list[ToolError] = field(default_factory=list)
    recognised: bool = False  # a banner or a GPU row was found

    @property
    def records(self) -> list[GpuRecord]:
        """The GPUs as listing records (the table truncates long names with "...")."""
        return [GpuRecord(index=g["index"], name=g.get("name") or None, bus_id=g.get("bus_id") or None,
                          persistence=to_bool(g.get("persistence")), pstate=clean(g.get("perf")) or None,
                          mig_mode=clean(g.get("mig")) or None, memory_total_mib=to_int(g.get("memory_total")),
                          util=to_int(g.get("util")), line=g["lines"][0] if g.get("lines") else "",
                          cells={k: str(v) for k, v in g.items() if k != "lines"})
                for g in self.gpus]


def _cells(line: str) -> list[str]:
    parts = line.strip().split("|")
    if parts and parts[0] == "":
        parts = parts[1:]
    if parts and parts[-1].strip() == "":
        parts = parts[:-1]
    return [p.strip() for p in parts]


def gpu_rows(lines: list[str]) -> list[dict[str, Any]]:
    """The GPU rows of the default `nvidia-smi` table, one dict per GPU.

    Keys: index (int), name, persistence, bus_id, disp_a, fan, temp, perf, power_usage,
    power_cap, memory_used, memory_total, util, ecc_uncorr, compute_mode, mig (all str as
    printed; "" where the layout has no such cell) and lines (the block's raw lines). The
    process list and the MIG device table below the GPU table are ignored."""
    try:
        start = next(i for i, ln in enumerate(lines) if _TABLE_RULE.match(ln.strip()))
    except StopIteration:
        return []
    blocks: list[list[str]] = []
    current: list[str] = []
    for ln in lines[start + 1:]:
        s = ln.strip()
        if not s or re.search(r"Processes:|MIG devices:", s):
            break  # the process list / MIG devices table below the GPU table
        if s.startswith("+") or s.startswith("|-") and set(s) <= set("|+-"):
            if current:
                blocks.append(current)
                current = []
            continue
        if not s.startswith("|"):
            break
        cells = _cells(s)
        if re.match(r"^\d+\s+\S", cells[0] if cells else "") and current:
            blocks.append(current)  # a new GPU without a separator line in between
            current = []
        current.append(s)
    if current:
        blocks.append(current)
    gpus = []
    for block in blocks:
        g = _table_block(block)
        if g is not None:
            gpus.append(g)
    return gpus


def _table_block(block: list[str]) -> dict[str, Any] | None:
    rows = [_cells(b) for b in block]
    if len(rows[0]) < 3:
        return None  # not a GPU row of the three-column table
    first = rows[0] + ["", "", ""]
    m = re.match(r"^(\d+)\s+(.*?)\s+(On|Off|N/A)$", first[0])
    if not m:
        m2 = re.match(r"^(\d+)\s+(.*)$", first[0])
        if not m2:
            return None
        index, name, pers = int(m2.group(1)), m2.group(2).strip(), ""
    else:
        index, name, pers = int(m.group(1)), m.group(2).strip(), m.group(3)
    g: dict[str, Any] = {"index": index, "name": name, "persistence": pers, "bus_id": "", "disp_a": "",
                         "fan": "", "temp": "", "perf": "", "power_usage": "", "power_cap": "",
                         "memory_used": "", "memory_total": "", "util": "", "ecc_uncorr": "",
                         "compute_mode": "", "mig": "", "lines": list(block)}
    bus = first[1].split()
    if bus:
        g["bus_id"] = bus[0]
        g["disp_a"] = bus[1] if len(bus) > 1 else ""
    g["ecc_uncorr"] = first[2]
    if len(rows) > 1:
        second = rows[1] + ["", "", ""]
        # usage and cap are split on a slash between spaces: "N/A /  N/A" holds slashes of its own
        m = re.match(r"^(\S+)\s+(\S+)\s+(\S+)\s+(.*?)\s+/\s+(.*?)$", second[0])
        if m:
            g.update(fan=m.group(1), temp=m.group(2), perf=m.group(3), power_usage=m.group(4).strip(),
                     power_cap=m.group(5).strip())
        else:
            toks = second[0].split()
            g.update(dict(zip(("fan", "temp", "perf"), toks, strict=False)))
        mm = re.match(r"^(.*?)\s+/\s+(.*?)$", second[1]) or re.match(r"^(.*?)/(.*?)$", second[1])
        if mm:
            g["memory_used"], g["memory_total"] = mm.group(1).strip(), mm.group(2).strip()
        um = re.match(r"^(\S+)\s*(.*)$", second[2])
        if um:
            g["util"], g["compute_mode"] = um.group(1), um.group(2).strip()
    if len(rows) > 2:
        third = rows[2] + ["", "", ""]
        g["mig"] = third[2]
    return g


def parse(doc: Doc) -> SmiTable:
    lines = [ln.text for ln in doc.lines]
    out = SmiTable(errors=errors_in(lines))
    for t in lines:
        m = _TABLE_VERSION.search(t)
        if m:
            out.smi_version, out.driver, out.cuda = m.group(1), m.group(2), (m.group(3) or "").strip()
            out.recognised = True
            break
    out.gpus = gpu_rows(lines)
    out.recognised = out.recognised or bool(out.gpus)
    return out


def detect(doc: Doc) -> bool:
    head = [ln.text for ln in doc.head(200)]
    return (any(_TABLE_VERSION.search(t) for t in head) and any(t.strip().startswith("|=") for t in head)
            and any("Bus-Id" in t for t in head))


FORMATS = [Format("nvidia-smi-table", detect=detect, priority=55, description="nvidia-smi (default table)")]
PARSERS = [ParserSpec("nvidia-smi-table", parse)]

__all__ = ["FORMATS", "PARSERS", "SmiTable", "detect", "gpu_rows", "parse"]
