"""The default `nvidia-smi` table as facts, whole or a fragment, in every release's layout.

Layouts: the 2013 "NVIDIA-SMI 5.325.15" banner with no CUDA version and two rows per GPU;
R3xx-R440 (two rows); R450-R525 (79 columns, a third row with `MIG M.`); R535-R590 (the wider
91-column layout, the Windows `TCC/WDDM` or `Driver-Model` column in place of persistence).
The banner gives the nvidia-smi, driver and CUDA versions; each GPU is a block of two or three
table rows between `+---+` rules, its first row `| <index>  <name>  <On|Off|N/A|TCC|WDDM> |
<bus id> <Disp.A> | <ECC> |`. Cells are kept as printed ("N/A", "ERR!"). Below the GPUs, the
`MIG devices:` section lists one row per MIG device (`| GPU GI CI MIG | memory | ...`), or
`No MIG devices found`; the `Processes:` section lists processes: neither are GPUs.

A fragment (the rows of a few GPUs, or the MIG devices section alone, pasted without the banner
and the header) is read as far as it goes and marked `partial`: it shows GPUs, not how many
the node has.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from preflight import lazyre
from preflight.framing import Doc
from preflight.parsers.base import Format, GpuRecord, ParserSpec, clean, to_bool, to_int
from preflight.parsers.nvsmi_errors import ToolError, errors_in

_TABLE_VERSION = lazyre.compile(r"NVIDIA-SMI\s+(\S+)\s+Driver Version:\s*(\S+)(?:\s+CUDA Version:\s*(\S+))?")
_BUS = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]"
# the first row of a GPU's block: index and name, then the bus id cell
GPU_ROW = lazyre.compile(rf"^\|\s*(\d+)\s+(\S.*?)\s*\|\s*({_BUS})(?:\s+(\S+))?\s*\|")
_FIRST_CELL = lazyre.compile(r"^(\d+)\s+(.*?)(?:\s+(On|Off|N/A|TCC|WDDM|MCDM))?$")
MIG_ROW = lazyre.compile(r"^\|\s*(\d+)\s+(\d+|N/A)\s+(\d+|N/A)\s+(\d+)\s*\|")
ROWS_PER_GPU = 3  # the most rows a GPU's block has (R450 and later: the third holds MIG M.)
_RULE = lazyre.compile(r"^[+|][-=+|]+[+|]?$")
_SECTION = lazyre.compile(r"\bBus-Id\b|\bProcesses:|(MIG devices:)")  # a section's header (group 1: the MIG one)


@dataclass
class SmiTable:
    smi_version: str = ""
    driver: str = ""
    cuda: str = ""
    gpus: list[dict[str, Any]] = field(default_factory=list)  # see `gpu_rows`
    mig: list[dict[str, Any]] = field(default_factory=list)  # MIG device rows: gpu, gi, ci, dev, line
    mig_section: bool = False  # the MIG devices section is there (possibly "No MIG devices found")
    errors: list[ToolError] = field(default_factory=list)
    recognised: bool = False  # a banner, a GPU row or a MIG device row was found
    partial: bool = False  # a fragment: no banner and no header above the rows

    @property
    def mig_devices(self) -> int:
        return len(self.mig)

    @property
    def records(self) -> list[GpuRecord]:
        """The GPUs as listing records (the table truncates long names with "..."); a GPU that
        only the MIG devices section names (a fragment) is a record with MIG enabled."""
        out = [_record(g, self.mig) for g in self.gpus]
        listed = {g["index"] for g in self.gpus}
        for gi in dict.fromkeys(m["gpu"] for m in self.mig if m["gpu"] not in listed):
            rows = [m for m in self.mig if m["gpu"] == gi]
            out.append(GpuRecord(index=gi, mig_mode="Enabled", mig_devices=len(rows), line=rows[0]["line"],
                                 cells={"mig": "Enabled (MIG devices section)"}))
        return out


def _record(g: dict[str, Any], mig: list[dict[str, Any]]) -> GpuRecord:
    devices = sum(1 for m in mig if m["gpu"] == g["index"])
    mode = clean(g.get("mig")) or ("Enabled" if devices else "")
    return GpuRecord(index=g["index"], name=g.get("name") or None, bus_id=g.get("bus_id") or None,
                     persistence=to_bool(g.get("persistence")), pstate=clean(g.get("perf")) or None,
                     mig_mode=mode or None, memory_total_mib=to_int(g.get("memory_total")),
                     util=to_int(g.get("util")), mig_devices=devices, line=g["lines"][0] if g.get("lines") else "",
                     cells={k: str(v) for k, v in g.items() if k != "lines"})


def _cells(line: str) -> list[str]:
    parts = line.strip().split("|")
    if parts and parts[0] == "":
        parts = parts[1:]
    if parts and parts[-1].strip() == "":
        parts = parts[:-1]
    return [p.strip() for p in parts]


def _blocks(lines: list[str]) -> tuple[list[list[str]], list[dict[str, Any]], bool]:
    """The GPU blocks (raw rows of each GPU), the MIG device rows, and whether the MIG devices
    section is there. One pass; the section a line is in decides what it is."""
    blocks: list[list[str]] = []
    mig: list[dict[str, Any]] = []
    in_mig = seen_mig = False
    current: list[str] | None = None
    for raw in lines:
        s = raw.strip()
        sm = _SECTION.search(s)
        if sm:
            in_mig, current = bool(sm.group(1)), None
            seen_mig = seen_mig or in_mig
            continue
        if not s.startswith("|") or _RULE.match(s):
            current = None
        elif in_mig:
            m = MIG_ROW.match(s)
            if m:
                mig.append({"gpu": int(m.group(1)), "gi": m.group(2), "ci": m.group(3), "dev": int(m.group(4)),
                            "line": s})
        elif GPU_ROW.match(s):
            current = [s]
            blocks.append(current)
        elif current is not None and len(current) < ROWS_PER_GPU:
            current.append(s)
    return blocks, mig, seen_mig


def gpu_rows(lines: list[str]) -> list[dict[str, Any]]:
    """The GPU rows of the default `nvidia-smi` table, one dict per GPU.

    Keys: index (int), name, persistence, bus_id, disp_a, fan, temp, perf, power_usage,
    power_cap, memory_used, memory_total, util, ecc_uncorr, compute_mode, mig (all str as
    printed; "" where the layout has no such cell) and lines (the block's raw lines). The
    process list and the MIG device table below the GPU table are not GPUs."""
    return [g for g in (_table_block(b) for b in _blocks(lines)[0]) if g is not None]


_KEYS = ("persistence", "bus_id", "disp_a", "fan", "temp", "perf", "power_usage", "power_cap", "memory_used",
         "memory_total", "util", "ecc_uncorr", "compute_mode", "mig")


def _table_block(block: list[str]) -> dict[str, Any] | None:
    rows = [_cells(b) + ["", "", ""] for b in block]
    m = _FIRST_CELL.match(rows[0][0])
    if not m:
        return None
    g: dict[str, Any] = {"index": int(m.group(1)), "name": m.group(2).strip(), **dict.fromkeys(_KEYS, ""),
                         "lines": list(block)}
    g["persistence"] = m.group(3) or ""
    bus = rows[0][1].split()
    g["bus_id"] = bus[0]
    g["disp_a"] = bus[1] if len(bus) > 1 else ""
    g["ecc_uncorr"] = rows[0][2]
    if len(rows) > 1:
        _second_row(rows[1], g)
    if len(rows) > 2:
        g["mig"] = rows[2][2]
    return g


def _second_row(cells: list[str], g: dict[str, Any]) -> None:
    # usage and cap are split on a slash between spaces: "N/A /  N/A" holds slashes of its own
    m = re.match(r"^(\S+)\s+(\S+)\s+(\S+)\s+(.*?)\s+/\s+(.*?)$", cells[0])
    if m:
        g.update(fan=m.group(1), temp=m.group(2), perf=m.group(3), power_usage=m.group(4).strip(),
                 power_cap=m.group(5).strip())
    else:
        g.update(dict(zip(("fan", "temp", "perf"), cells[0].split(), strict=False)))
    mm = re.match(r"^(.*?)\s*/\s*(.*?)$", cells[1])
    if mm:
        g["memory_used"], g["memory_total"] = mm.group(1).strip(), mm.group(2).strip()
    um = re.match(r"^(\S+)\s*(.*)$", cells[2])
    if um:
        g["util"], g["compute_mode"] = um.group(1), um.group(2).strip()


def parse(doc: Doc) -> SmiTable:
    lines = [ln.text for ln in doc.lines]
    out = SmiTable(errors=errors_in(lines))
    header = False
    for t in lines:
        m = _TABLE_VERSION.search(t)
        if m and not out.driver:
            out.smi_version, out.driver, out.cuda = m.group(1), m.group(2), (m.group(3) or "").strip()
        header = header or "Bus-Id" in t
    blocks, out.mig, out.mig_section = _blocks(lines)
    out.gpus = [g for g in (_table_block(b) for b in blocks) if g is not None]
    out.recognised = bool(out.driver or out.gpus or out.mig)
    out.partial = not out.driver and not header
    return out


DETECT_LINES = 200  # pragma: no mutate (how far a detector reads, not a grading value)


def detect(doc: Doc) -> bool:
    """The banner with the header or a rule below it; or, for a fragment, a GPU row (index,
    name, bus id cells) or the MIG devices section with a device row."""
    head = [ln.text.strip() for ln in doc.head(DETECT_LINES)]
    if any(_TABLE_VERSION.search(t) for t in head) and any(t.startswith("|=") or "Bus-Id" in t for t in head):
        return True
    if any(GPU_ROW.match(t) for t in head):
        return True
    return any("MIG devices:" in t for t in head) and any(MIG_ROW.match(t) for t in head)


FORMATS = [Format("nvidia-smi-table", detect=detect, priority=55, description="nvidia-smi (default table)")]
PARSERS = [ParserSpec("nvidia-smi-table", parse)]

__all__ = ["FORMATS", "GPU_ROW", "MIG_ROW", "PARSERS", "SmiTable", "detect", "gpu_rows", "parse"]
