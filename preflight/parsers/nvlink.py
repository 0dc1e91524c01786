"""`nvidia-smi nvlink --status` / `nvlink -s` as facts.

One `GPU N: <name> (UUID: ...)` header per GPU, then one line per link: `Link L: 26.562 GB/s`
(the speed the link trained at: 20 GB/s NVLink1 .. 25.781 V100, 25 A100, 26.562 H100, 50
Blackwell), or `Link L: <inactive>`. A GPU whose links are all down prints `NVML: Unable to
retrieve NVLink information as all links are inactive` (older drivers: `inActive`) instead of
links; a GPU without NVLink prints nothing under its header. A listing may hold one GPU (`-i
6`): it says nothing about the others.

Other `nvlink` sub-commands print Link lines too (`-e`: `Link 0: Replay Errors: 0`, `-gt d`:
`Link 0: Data Tx: 1 KiB`, `-c`: `Link 0, P2P is supported: true`): those are not link states
and are kept apart (`GpuLinks.other`), never read as links that are down.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from preflight.framing import Doc
from preflight.parsers.base import Format, ParserSpec
from preflight.parsers.nvsmi_errors import ToolError, errors_in
from preflight.parsers.nvsmi_list import GPU_LINE

_LINK = re.compile(r"^\s*Link\s+(\d+)\s*:\s*(.*?)\s*$")
_STATE = re.compile(r"^(?:<\s*inactive\s*>|inactive|(\d+(?:\.\d+)?)\s*GB/s)$", re.I)
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
    other: list[str] = field(default_factory=list)  # Link lines that are not a link state

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

    @property
    def other(self) -> list[str]:
        """Link lines of another nvlink sub-command (counters, capabilities)."""
        return [t for g in self.gpus for t in g.other]


def _link_line(g: NvlinkGpu, line: str, m: re.Match[str]) -> None:
    st = _STATE.match(m.group(2))
    if st is None:
        g.other.append(line.strip())
        return
    gbps = float(st.group(1)) if st.group(1) else None
    g.links.append(Link(int(m.group(1)), gbps is not None and gbps > 0, gbps, line.strip()))


def parse(doc: Doc) -> NvlinkReport:
    texts = [ln.text for ln in doc.lines]
    out = NvlinkReport(errors=errors_in(texts))
    error_lines = {t for e in out.errors for t in e.lines}
    for raw in texts:
        line = raw.rstrip()
        if not line.strip():
            continue
        m = GPU_LINE.match(line)
        if m:
            out.gpus.append(NvlinkGpu(int(m.group(1)), m.group(2).strip(), (m.group(3) or "").strip(), line.strip()))
            continue
        if not out.gpus:
            if line.strip() not in error_lines:
                out.unparsed.append(line.strip())
            continue
        g = out.gpus[-1]
        lm = _LINK.match(line)
        if lm:
            _link_line(g, line, lm)
            continue
        g.notes.append(line.strip())
        if _ALL_INACTIVE.search(line):
            g.all_inactive = True
    return out


DETECT_LINES = 400  # pragma: no mutate (how far a detector reads, not a grading value)


def detect(doc: Doc) -> bool:
    """A GPU header line with link lines (a state or a counter) or the all-inactive message."""
    lines = [ln.text for ln in doc.head(DETECT_LINES)]
    return any(GPU_LINE.match(t) for t in lines) and any(_LINK.match(t) or _ALL_INACTIVE.search(t) for t in lines)


FORMATS = [Format("nvidia-smi-nvlink", detect=detect, priority=60,
                  description="nvidia-smi nvlink --status / nvlink -s")]
PARSERS = [ParserSpec("nvidia-smi-nvlink", parse)]

__all__ = ["FORMATS", "PARSERS", "Link", "NvlinkGpu", "NvlinkReport", "detect", "parse"]
