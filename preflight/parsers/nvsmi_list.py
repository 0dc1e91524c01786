"""`nvidia-smi -L` (`--list-gpus`) as facts: one line per physical GPU, its MIG devices below.

`GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)`; drivers before R270 print `(S/N: ...)`, and a
listing cut by the operator may carry no parentheses at all. MIG devices belong to the GPU
above them and are not GPUs: `  MIG 3g.40gb     Device  0: (UUID: MIG-<uuid>)` (R470 and
later), `  MIG 3g.20gb Device 0: (UUID: MIG-GPU-<uuid>/1/0)` (R450/R460), `  MIG 1c.3g.71gb
Device  0: ...` (a compute instance smaller than its GPU instance). A GPU the driver cannot
open is an error line in the GPU's place (`Unable to determine the device handle for gpu
0000:23:00.0: Unknown Error`), between the GPUs that still list; `No devices found.` when
there is none. Lines of other programs around the listing (an environment dump, a banner) are
kept as `other`, never read as GPUs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from preflight import lazyre
from preflight.framing import Doc
from preflight.parsers.base import Format, GpuRecord, ParserSpec
from preflight.parsers.nvsmi_errors import ToolError, errors_in

GPU_LINE = lazyre.compile(r"^GPU\s+(\d+):\s+(.*?)\s*(?:\((?:UUID|S/N):\s*([^)]*)\))?\s*$")
# a GPU line as -L prints it: the name, then the UUID or the serial number in parentheses
LISTED = lazyre.compile(r"^GPU\s+\d+:\s+\S.*\((?:UUID:\s*GPU-|S/N:)")
MIG_LINE = lazyre.compile(r"^\s*MIG\s+(\S+)\s+Device\s+(\d+):\s*\(UUID:\s*([^)]*)\)\s*$")
_LINK_LINE = lazyre.compile(r"^\s*Link\s+\d+\s*:|all links are inactive", re.I)
_COMMAND = lazyre.compile(r"nvidia-smi(?:\.exe)?\b.*(?:\s-L\b|--list-gpus)")


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
    error_lines = {t for e in out.errors for t in e.lines}
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
        m = GPU_LINE.match(line)
        if m:
            out.gpus.append(GpuRecord(index=int(m.group(1)), name=m.group(2).strip() or None,
                                      uuid=(m.group(3) or "").strip() or None, line=line.strip()))
            continue
        if line.strip() not in error_lines:
            out.other.append(line.strip())
    return out


DETECT_LINES = 300  # pragma: no mutate (how far a detector reads, not a grading value)


def detect(doc: Doc) -> bool:
    """Lines of `-L`: GPU lines with their UUID (or serial), MIG lines and nvidia-smi's error
    lines, not an NVLink listing (GPU lines with Link lines under them). A few lines of other
    programs around them (an environment line, a banner) are allowed where the listing's own
    lines are at least as many, or the prompt above says the command was `nvidia-smi -L`."""
    lines = [ln.text.strip() for ln in doc.head(DETECT_LINES) if ln.text.strip()]
    listed = [t for t in lines if LISTED.match(t)]
    if not listed or any(_LINK_LINE.search(t) for t in lines):
        return False
    errs = {t for e in errors_in(lines) for t in e.lines}
    own = [t for t in lines if GPU_LINE.match(t) or MIG_LINE.match(t) or t in errs]
    others = len(lines) - len(own)
    return others <= len(own) or bool(_COMMAND.search(doc.command))


FORMATS = [Format("nvidia-smi-L", detect=detect, priority=55, description="nvidia-smi -L")]
PARSERS = [ParserSpec("nvidia-smi-L", parse)]

__all__ = ["FORMATS", "GPU_LINE", "LISTED", "MIG_LINE", "PARSERS", "SmiList", "detect", "parse"]
