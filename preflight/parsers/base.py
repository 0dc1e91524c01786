"""What every parser module shares: the content formats analyze recognises, small value helpers.

A parser module reads one tool's output: `detect(doc)` says whether a document is that output,
`parse(doc)` turns it into typed facts. Documents come from `preflight.framing` (clean lines,
framing kept as metadata). Parsers never do I/O and never raise on bad input: garbage gives
empty facts (and, where it matters, a `problems` list naming what was not understood).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from preflight.framing import Doc


@dataclass(frozen=True)
class Format:
    """A kind of captured text that analyze recognises by content.

    `detect` reads a document (its clean lines; `doc.head()` is cheap) and says whether it is
    this kind; the document then stands in for the capture of probe `probe` (default: `name`).
    A document may match several formats of different probes (a training log with NCCL INFO
    lines and a watchdog timeout feeds two checks); per probe the highest priority wins.
    `could`, where given, is a cheap necessary condition of `detect` (words its detector cannot
    do without, searched at C speed): a document it refuses is not handed to `detect`."""

    name: str
    detect: Callable[[Doc], bool]
    description: str = ""
    priority: int = 50
    probe: str = ""
    could: Callable[[Doc], bool] | None = None

    def recognises(self, doc: Doc) -> bool:
        return (self.could is None or self.could(doc)) and self.detect(doc)

    @property
    def probe_name(self) -> str:
        return self.probe or self.name


Parser = Callable[[Doc], Any]


@dataclass(frozen=True)
class ParserSpec:
    """`parse` reads the capture of probe `probe` (or of every probe whose name starts with it,
    with `prefix`: `ping-jumbo-` covers `ping-jumbo-node2`)."""

    probe: str
    parse: Parser
    prefix: bool = False


NA_VALUES = frozenset({"", "n/a", "[n/a]", "na", "not supported", "[not supported]", "unknown", "[unknown]",
                       "[unknown error]", "requested functionality has been deprecated",
                       "[requested functionality has been deprecated]", "[insufficient permissions]",
                       "insufficient permissions", "-"})


def clean(value: str | None) -> str:
    """The value, or "" when missing or one of nvidia-smi's N/A spellings."""
    if value is None:
        return ""
    v = value.strip()
    return "" if v.lower() in NA_VALUES else v


def to_int(value: Any) -> int | None:
    """Leading integer of a value ('4', '0 us', '2560 bank(s)', 'x16'); None for N/A or text."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    m = re.match(r"^\s*[xX]?(-?\d+)", clean(str(value)))
    return int(m.group(1)) if m else None


def to_float(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    m = re.match(r"^\s*(-?\d+(?:\.\d+)?)", clean(str(value)))
    return float(m.group(1)) if m else None


def to_bool(value: Any) -> bool | None:
    """Yes/No, Active/Not Active, On/Off, Enabled/Disabled, True/False; None for N/A."""
    if isinstance(value, bool):
        return value
    v = clean(None if value is None else str(value)).lower()
    if v in ("yes", "active", "true", "enabled", "on", "1"):
        return True
    if v in ("no", "not active", "false", "disabled", "off", "0", "none"):
        return False
    return None


@lru_cache(maxsize=1024)
def pci_id(text: str) -> str:
    """A PCI address as domain:bus:device, lower case ("00000000:9B:00.0" -> "0000:9b:00")."""
    parts = text.strip().lower().split(".")[0].split(":")
    if len(parts) == 2:
        parts = ["0000", *parts]
    if len(parts) != 3:
        return text.strip().lower()
    dom, bus, dev = parts
    return f"{dom[-4:].rjust(4, '0')}:{bus.rjust(2, '0')[-2:]}:{dev.rjust(2, '0')[-2:]}"


def short(line: str, limit: int = 300) -> str:
    """A line cut for quoting as evidence."""
    line = line.rstrip()
    return line if len(line) <= limit else line[: limit - 3] + "..."


# Cell values with which nvidia-smi says a GPU it lists no longer answers.
BROKEN_VALUES = frozenset({"[gpu is lost]", "[gpu requires reset]", "[unknown error]", "gpu is lost",
                           "[gpu is not accessible]"})


@dataclass
class GpuRecord:
    """One physical GPU as a listing shows it (query CSV, default table, -L, NVML, -q).

    Every field a listing does not print is None: absent, never a default."""

    index: int
    name: str | None = None
    uuid: str | None = None
    bus_id: str | None = None
    vbios: str | None = None
    persistence: bool | None = None
    pstate: str | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    mig_mode: str | None = None
    mig_pending: str | None = None
    memory_total_mib: int | None = None
    util: int | None = None
    mig_devices: int = 0  # MIG devices listed under this GPU
    broken: list[str] = field(default_factory=list)  # cells that say the GPU stopped answering
    line: str = ""  # the line(s) that list it, as printed (first line)
    cells: dict[str, str] = field(default_factory=dict)  # field -> value as printed, for evidence

    @property
    def label(self) -> str:
        return f"GPU {self.index} ({self.bus_id})" if self.bus_id else f"GPU {self.index}"

    def evidence(self, keys: tuple[str, ...] = ()) -> str:
        parts = [f"{k}={self.cells[k]}" for k in keys if k in self.cells]
        if parts:
            return f"{self.label}: " + ", ".join(parts)
        return self.line or self.label

    def as_facts(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("cells", "line", "broken")}


__all__ = ["BROKEN_VALUES", "Format", "GpuRecord", "NA_VALUES", "Parser", "ParserSpec", "clean", "pci_id", "short", "to_bool", "to_float",
           "to_int"]
