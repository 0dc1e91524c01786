"""`nvidia-smi -L` as facts: one line per physical GPU, its MIG devices indented below.

`GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)`; old drivers print `(S/N: ...)` or nothing in
the parentheses. MIG devices (`  MIG 3g.40gb Device 0: (UUID: MIG-...)`) belong to the GPU above
them and are not GPUs. A GPU that does not answer is a line `Unable to determine the device
handle for GPU... : Unknown Error` (a tool error, kind gpu_lost).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from preflight.framing import Doc
from preflight.parsers.base import Format, GpuRecord, ParserSpec
from preflight.parsers.nvsmi_errors import ToolError, errors_in

GPU_LINE = re.compile(r"^GPU\s+(\d+):\s+(.*?)\s*(?:\((?:UUID|S/N):\s*([^)]*)\))?\s*$")
MIG_LINE = re.compile(r"^\s*MIG\s+(\S+)\s+Device\s+(\d+):\s*\(UUID:\s*([^)]*)\)\s*$")
_LINK_LINE = re.compile(r"^\s*Link\s+\d+\s*:|all links are inactive", re.I)


@dataclass
class SmiList:
    gpus: list[GpuRecord] = field(default_factory=list)
    mig_devices: int = 0
    errors: list[ToolError] = field(default_factory=list)
    other: list[str] = field(default_factory=list)  # lines that are none of the above

    @property
    def recognised(self) -> bool:
        return bool(self.gpus)


def parse(doc: Doc) -> SmiList:
    texts = [ln.text for ln in doc.lines]
    out = SmiList(errors=errors_in(texts))
    error_lines = {e.line for e in out.errors}
    for raw in texts:
        line = raw.rstrip()
        if not line.strip():
            continue
        m = MIG_LINE.match(line)
        if m and out.gpus:
            out.gpus[-1].mig_devices += 1
            out.gpus[-1].mig_mode = "Enabled"
            out.mig_devices += 1
            continue
        m = GPU_LINE.match(line.strip())
        if m and not line[:1].isspace():
            out.gpus.append(GpuRecord(index=int(m.group(1)), name=m.group(2).strip() or None,
                                      uuid=(m.group(3) or "").strip() or None, line=line.strip()))
            continue
        if line.strip() not in error_lines:
            out.other.append(line.strip())
    return out


def detect(doc: Doc) -> bool:
    """Lines of `-L` only (GPU, MIG and lost-GPU lines), not an NVLink listing."""
    lines = [ln.text for ln in doc.head(300) if ln.text.strip()]
    if not any(GPU_LINE.match(t) for t in lines) or any(_LINK_LINE.search(t) for t in lines):
        return False
    errs = {e.line for e in errors_in(lines)}
    return all(GPU_LINE.match(t) or MIG_LINE.match(t) or t.strip() in errs for t in lines)


FORMATS = [Format("nvidia-smi-L", detect=detect, priority=55, description="nvidia-smi -L")]
PARSERS = [ParserSpec("nvidia-smi-L", parse)]

__all__ = ["FORMATS", "GPU_LINE", "MIG_LINE", "PARSERS", "SmiList", "detect", "parse"]
