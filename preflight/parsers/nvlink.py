"""`nvidia-smi nvlink --status` / `nvlink -s` as facts.

One `GPU N: <name> (UUID: ...)` header per GPU, then `Link L: 26.562 GB/s` per link, or
`Link L: <inactive>`; a GPU whose links are all down prints `NVML: Unable to retrieve NVLink
information as all links are inactive` (older drivers: `all links are inActive`) instead of
links. A listing may hold one GPU (`-i 6`): it says nothing about the others.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from preflight.framing import Doc
from preflight.parsers.base import Format, ParserSpec
from preflight.parsers.nvsmi_errors import ToolError, errors_in
from preflight.parsers.nvsmi_list import GPU_LINE

_LINK = re.compile(r"^\s*Link\s+(\d+)\s*:\s*(.*?)\s*$")
_GBPS = re.compile(r"([\d.]+)\s*GB/s", re.I)
_ALL_INACTIVE = re.compile(r"all links are inactive", re.I)


@dataclass
class Link:
    n: int
    up: bool  # a speed above 0 GB/s; `<inactive>` and 0 GB/s are down
    gbps: float | None
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

    @property
    def up(self) -> list[Link]:
        return [ln for ln in self.links if ln.up]

    @property
    def down(self) -> list[Link]:
        return [ln for ln in self.links if not ln.up]


@dataclass
class NvlinkReport:
    gpus: list[NvlinkGpu] = field(default_factory=list)
    errors: list[ToolError] = field(default_factory=list)
    unparsed: list[str] = field(default_factory=list)  # lines before any GPU header (not tool errors)

    @property
    def recognised(self) -> bool:
        return bool(self.gpus)


def parse(doc: Doc) -> NvlinkReport:
    texts = [ln.text for ln in doc.lines]
    out = NvlinkReport(errors=errors_in(texts))
    for raw in texts:
        line = raw.rstrip()
        if not line.strip():
            continue
        m = GPU_LINE.match(line.strip())
        if m and not line[:1].isspace():
            out.gpus.append(NvlinkGpu(int(m.group(1)), m.group(2).strip(), (m.group(3) or "").strip(), line.strip()))
            continue
        if not out.gpus:
            if line.strip() not in {e.line for e in out.errors}:
                out.unparsed.append(line.strip())
            continue
        g = out.gpus[-1]
        lm = _LINK.match(line)
        if lm:
            sp = _GBPS.search(lm.group(2))
            gbps = float(sp.group(1)) if sp else None
            g.links.append(Link(int(lm.group(1)), gbps is not None and gbps > 0, gbps, line.strip()))
            continue
        g.notes.append(line.strip())
        if _ALL_INACTIVE.search(line):
            g.all_inactive = True
    return out


def detect(doc: Doc) -> bool:
    lines = [ln.text for ln in doc.head(400)]
    return any(GPU_LINE.match(t) for t in lines) and any(_LINK.match(t) or _ALL_INACTIVE.search(t) for t in lines)


FORMATS = [Format("nvidia-smi-nvlink", detect=detect, priority=60,
                  description="nvidia-smi nvlink --status / nvlink -s")]
PARSERS = [ParserSpec("nvidia-smi-nvlink", parse)]

__all__ = ["FORMATS", "PARSERS", "Link", "NvlinkGpu", "NvlinkReport", "detect", "parse"]
