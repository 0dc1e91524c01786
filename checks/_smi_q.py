"""`nvidia-smi -q` as data: the probe, a pure parser, and the tool errors it may print.

`nvidia-smi -q` prints a header (driver and CUDA versions, attached GPU count) and one
indented block per GPU. Sections are lines without a value; fields are `label : value`
with the label padded to a column whose width changes between driver branches (the 590
layout is wider). A section may itself carry a value (`HW Slowdown : Active` has deeper
indented children). The parser keeps every field by its section path
(`Remapped Rows/Pending`) together with the line as printed, so graders can quote it.

Used by gpu.health, gpu.driver and fabric.manager; the probes are declared once here so
the engine runs `nvidia-smi -q` once per node whichever of them is selected.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

from preflight.probes import Probe

PROBE_Q = Probe.of("nvidia-smi-q", ["nvidia-smi", "-q"], timeout=20.0)
PROBE_NVML = Probe.of("nvml", [sys.executable, "-m", "preflight.nvml_probe"], timeout=20)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_GPU_HEADER = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_FIELD = re.compile(r"^(?P<key>[^:]*?\S)\s*:(?:\s+(?P<value>.*?))?\s*$")
# older drivers call the clock event reasons "throttle reasons"
_SECTION_ALIASES = {"Clocks Throttle Reasons": "Clocks Event Reasons"}

NA_VALUES = frozenset({"", "n/a", "[n/a]", "not supported", "[not supported]", "unknown", "[unknown error]",
                       "requested functionality has been deprecated"})


@dataclass(frozen=True)
class ToolError:
    """A message nvidia-smi or NVML prints instead of data."""

    kind: str  # version_mismatch | no_driver | no_devices | library_missing | nvml_init | gpu_lost
    line: str  # the message as printed
    summary: str
    remedy: str
    bus_id: str = ""


# (kind, pattern, summary, remedy). Order matters: the first pattern that matches a line wins.
_ERROR_PATTERNS: list[tuple[str, re.Pattern[str], str, str]] = [
    ("version_mismatch",
     re.compile(r"Driver/library version mismatch|NVML/RM version mismatch|LibRmVersionMismatch", re.I),
     "the loaded NVIDIA kernel module and the user-space driver library differ",
     "a driver upgrade without a reboot leaves the old kernel module loaded: drain and reboot the node "
     "(or, with no GPU process running, unload and reload the nvidia modules)"),
    ("no_driver",
     re.compile(r"couldn't communicate with the NVIDIA driver|NVMLError_DriverNotLoaded|\bDriver Not Loaded\b", re.I),
     "the NVIDIA kernel driver is not loaded",
     "load the driver (modprobe nvidia; check that its DKMS module is built for the running kernel), "
     "then check dmesg for NVRM errors"),
    ("no_devices",
     re.compile(r"No devices were found", re.I),
     "the driver is loaded but finds no GPU",
     "check the PCIe link (lspci -d 10de:), and dmesg for Xid 79 (GPU fell off the bus); "
     "drain, power-cycle the node, reseat or RMA the GPU if it stays missing"),
    ("library_missing",
     re.compile(r"NVML Shared Library Not Found|NVMLError_LibraryNotFound|libnvidia-ml\.so\S*: cannot open", re.I),
     "the NVML library (libnvidia-ml.so) is not installed or not visible",
     "install the NVIDIA driver's user-space libraries (or expose them to the container)"),
    ("gpu_lost",
     re.compile(r"Unable to determine the device handle for\s*(?:GPU)?\s*(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
                r"[0-9A-Fa-f]{2}\.[0-9A-Fa-f])?|\bGPU is lost\b|NVMLError_GpuIsLost", re.I),
     "a GPU does not answer the driver",
     "the GPU fell off the bus or hung (Xid 79 class): drain the node and reboot it; reseat or RMA the GPU "
     "if it happens again"),
    ("nvml_init",
     re.compile(r"Failed to initialize NVML: .*|NVMLError_\w+|pynvml cannot be imported.*", re.I),
     "NVML could not be initialised",
     "run nvidia-smi by hand on the node; check dmesg for NVRM errors and that the user can open /dev/nvidia*"),
]


def find_tool_errors(text: str) -> list[ToolError]:
    """Every tool error message in `text` (each distinct line once)."""
    found: list[ToolError] = []
    seen: set[str] = set()
    for raw in text.splitlines():
        line = _ANSI.sub("", raw).strip()
        if not line or line in seen:
            continue
        for kind, pattern, summary, remedy in _ERROR_PATTERNS:
            m = pattern.search(line)
            if m:
                seen.add(line)
                bus = (m.groupdict().get("bus") or "") if kind == "gpu_lost" else ""
                found.append(ToolError(kind, line, summary, remedy, bus))
                break
    return found


def error_for(kind: str, line: str) -> ToolError:
    """A ToolError of `kind` for a message that came in another shape (e.g. NVML's JSON)."""
    for k, _pattern, summary, remedy in _ERROR_PATTERNS:
        if k == kind:
            return ToolError(kind, line, summary, remedy)
    return ToolError(kind, line, "GPU tooling error", "run nvidia-smi by hand on the node and check dmesg")


@dataclass
class QGpu:
    """One GPU block of `nvidia-smi -q`."""

    index: int  # position in the output (nvidia-smi lists GPUs in index order)
    bus_id: str
    fields: dict[str, str] = field(default_factory=dict)  # "Remapped Rows/Pending" -> "Yes"
    lines: dict[str, str] = field(default_factory=dict)  # path -> the line as printed (padding collapsed)

    def get(self, path: str) -> str | None:
        return self.fields.get(path)

    def line(self, path: str) -> str:
        return self.lines.get(path, path)

    def under(self, prefix: str) -> Iterator[tuple[str, str]]:
        """(path, value) of every field below section `prefix` (direct and nested)."""
        p = prefix.rstrip("/") + "/"
        for k, v in self.fields.items():
            if k.startswith(p):
                yield k, v

    @property
    def label(self) -> str:
        return f"GPU {self.index} ({self.bus_id})"

    @property
    def name(self) -> str:
        return self.fields.get("Product Name", "")


@dataclass
class QReport:
    header: dict[str, str] = field(default_factory=dict)
    header_lines: dict[str, str] = field(default_factory=dict)
    gpus: list[QGpu] = field(default_factory=list)
    errors: list[ToolError] = field(default_factory=list)
    recognised: bool = False  # the text looked like nvidia-smi -q output

    @property
    def driver(self) -> str:
        return clean(self.header.get("Driver Version"))

    @property
    def cuda(self) -> str:
        return clean(self.header.get("CUDA Version"))

    @property
    def attached(self) -> int | None:
        return to_int(self.header.get("Attached GPUs"))


def clean(value: str | None) -> str:
    """The value, or '' when it is missing or N/A-like."""
    if value is None:
        return ""
    v = value.strip()
    return "" if v.lower() in NA_VALUES else v


def to_int(value: str | None) -> int | None:
    """Leading integer of a value ('4', '0 us', '2560 bank(s)'); None for N/A or text."""
    v = clean(value)
    m = re.match(r"^-?\d+", v)
    return int(m.group(0)) if m else None


def to_bool(value: str | None) -> bool | None:
    """Yes/No, Active/Not Active, True/False, Enabled/Disabled; None for N/A."""
    v = clean(value).lower()
    if v in ("yes", "active", "true", "enabled"):
        return True
    if v in ("no", "not active", "false", "disabled", "none"):
        return False
    return None


def looks_like_q(text: str) -> bool:
    """Content detector for `nvidia-smi -q` output."""
    if "NVSMI LOG" in text:
        return True
    return bool(re.search(r"^Driver Version\s+:", text, re.M) and re.search(
        r"^GPU\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]\s*$", text, re.M))


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def parse_q(text: str) -> QReport:
    """Parse `nvidia-smi -q` text. Never raises; unknown lines are ignored."""
    report = QReport(errors=find_tool_errors(text))
    current: QGpu | None = None
    stack: list[tuple[int, str]] = []
    for raw in text.splitlines():
        line = _ANSI.sub("", raw).replace("\t", "    ").rstrip("\r").rstrip()
        if not line.strip() or set(line.strip()) <= {"="}:
            continue
        if "NVSMI LOG" in line:
            report.recognised = True
            continue
        ind = _indent(line)
        body = line.strip()
        if ind == 0:
            m = _GPU_HEADER.match(body)
            if m:
                current = QGpu(index=len(report.gpus), bus_id=m.group(1))
                report.gpus.append(current)
                stack = []
                report.recognised = True
                continue
            fm = _FIELD.match(body)
            if fm and current is None:
                key = fm.group("key").strip()
                report.header[key] = (fm.group("value") or "").strip()
                report.header_lines[key] = re.sub(r"\s{2,}", " ", body)
                if key == "Driver Version":
                    report.recognised = True
            continue
        if current is None:
            continue
        while stack and stack[-1][0] >= ind:
            stack.pop()
        fm = _FIELD.match(body)
        if fm is None:
            name = _SECTION_ALIASES.get(body, body)
            stack.append((ind, name))
            continue
        key = fm.group("key").strip()
        value = (fm.group("value") or "").strip()
        path = "/".join([s for _, s in stack] + [key])
        if path in current.fields:  # repeated entries (several processes, MIG devices)
            n = 2
            while f"{path}#{n}" in current.fields:
                n += 1
            path = f"{path}#{n}"
        current.fields[path] = value
        current.lines[path] = re.sub(r"\s{2,}", " ", body)
        if not value:  # `Processes :` style: a section written with a colon
            stack.append((ind, key))
    return report
