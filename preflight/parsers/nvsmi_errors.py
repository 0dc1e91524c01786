"""The messages nvidia-smi and NVML print instead of data, wherever they appear.

A message may stand alone (`Failed to initialize NVML: Driver/library version mismatch`), sit
under the tool's own prefix (`NVIDIA GPU Details | Failed: ...`), inside a monitoring agent's
log line or a Python bytes literal (`b"NVIDIA-SMI has failed because it couldn't communicate
with the NVIDIA driver ... \\n\\n"`): they are searched for anywhere in a line. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from preflight.framing import Doc, Line
from preflight.parsers.base import Format, pci_id

_BUS = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]"
_BUS_DETAIL = re.compile(rf"({_BUS})(?:\s*:\s*(.*))?")


@dataclass(frozen=True)
class ToolError:
    """A message nvidia-smi or NVML prints instead of data."""

    kind: str  # version_mismatch | no_driver | no_devices | library_missing | gpu_lost | nvml_init
    #            | reset_failed | needs_reset
    line: str  # the message as printed (the line it is in)
    summary: str
    remedy: str
    bus_id: str = ""  # "0000:01:00.0" as printed, when the message names a GPU
    detail: str = ""  # what the tool said after the bus id ("Unknown Error", "In use by another client")

    @property
    def pci(self) -> str:
        return pci_id(self.bus_id) if self.bus_id else ""


# (kind, pattern, summary, remedy). Order matters: the first pattern that matches a line wins.
PATTERNS: list[tuple[str, re.Pattern[str], str, str]] = [
    ("version_mismatch",
     re.compile(r"Driver/library version mismatch|NVML/RM version mismatch|LibRmVersionMismatch", re.I),
     "the loaded NVIDIA kernel module and the user-space driver library differ",
     "a driver upgrade without a reboot leaves the old kernel module loaded: drain and reboot the node "
     "(or, with no GPU process running, unload and reload the nvidia modules); if it persists after the reboot, "
     "reinstall the driver packages so kernel module and libraries are one version"),
    ("no_driver",
     re.compile(r"couldn'?t communicate with the NVIDIA driver|NVMLError_DriverNotLoaded|\bDriver Not Loaded\b|"
                r"Unable to load the NVIDIA kernel module|NVIDIA kernel module missing", re.I),
     "the NVIDIA kernel driver is not loaded",
     "load the driver (modprobe nvidia; check that its DKMS module is built for the running kernel), "
     "then check dmesg for NVRM errors"),
    ("gpu_lost",
     re.compile(rf"Unable to determine the device handle for\s*(?:GPU\s*(?:\d+\s*:\s*)?)?(?P<bus>{_BUS})?"
                r"(?:\s*:\s*(?P<detail>.*))?|\bGPU is lost\b|NVMLError_GpuIsLost|\[GPU is lost\]", re.I),
     "a GPU does not answer the driver",
     "the GPU fell off the bus or hung (Xid 79 class): drain the node and reboot it; reseat or RMA the GPU "
     "if it happens again"),
    ("needs_reset",
     re.compile(r"\[GPU requires reset\]|GPU requires reset|NVMLError_ResetRequired", re.I),
     "a GPU needs a reset before it can be used",
     "drain the node and reset the GPU (nvidia-smi -r -i <index>) once no process uses it, or reboot"),
    ("reset_failed",
     re.compile(rf"could not be reset|GPU (?P<bus>{_BUS}): (?P<detail>In use by another client|.*reset.*failed.*)|"
                r"Unable to reset GPU", re.I),
     "a GPU reset did not happen",
     "stop every process holding the GPU (nvidia-persistenced, DCGM, the device plugin, monitoring agents: "
     "`nvidia-smi --query-compute-apps=pid --format=csv`, `lsof /dev/nvidia*`), then reset again; reboot if it "
     "still refuses. Keep the node drained until the reset has applied"),
    ("no_devices",
     re.compile(r"No devices were found|No NVIDIA GPU found|NVML: device count is 0", re.I),
     "the driver is loaded but finds no GPU",
     "check the PCIe link (lspci -d 10de:), and dmesg for Xid 79 (GPU fell off the bus); "
     "drain, power-cycle the node, reseat or RMA the GPU if it stays missing"),
    ("library_missing",
     re.compile(r"NVML Shared Library Not Found|NVMLError_LibraryNotFound|libnvidia-ml\.so\S*: cannot open|"
                r"nvidia-smi: (?:command )?not found", re.I),
     "the NVML library (libnvidia-ml.so) or nvidia-smi is not installed or not visible",
     "install the NVIDIA driver's user-space libraries (or expose them to the container)"),
    ("nvml_init",
     re.compile(r"Failed to initialize NVML: .*|NVMLError_\w+|pynvml cannot be imported.*|"
                r"NVIDIA-SMI has failed\b.*", re.I),
     "NVML could not be initialised",
     "run nvidia-smi by hand on the node; check dmesg for NVRM errors and that the user can open /dev/nvidia*"),
]

# Lines that look alarming and are not: nvidia-smi's own informational replies.
_BENIGN = re.compile(r"^(?:Disabled|Enabled) persistence mode for GPU|^All done\.?$|^GPU \S+ was successfully reset",
                     re.I)


def errors_in(lines: Iterable[str]) -> list[ToolError]:
    """Every tool error message in these lines (each distinct line once)."""
    found: list[ToolError] = []
    seen: set[str] = set()
    reset_block = False
    for raw in lines:
        line = raw.strip()
        if not line or line in seen or _BENIGN.search(line):
            continue
        if re.search(r"could not be reset", line, re.I):
            reset_block = True
        for kind, pattern, summary, remedy in PATTERNS:
            m = pattern.search(line)
            if not m:
                continue
            if kind == "reset_failed" and m.groupdict().get("bus") and not reset_block:
                continue  # `GPU 00000000:55:00.0: ...` is only a reset failure under its header
            seen.add(line)
            gd = m.groupdict()
            bus = gd.get("bus") or ""
            detail = (gd.get("detail") or "").strip()
            if kind == "gpu_lost" and not bus:  # `GPU0000:A1:00.0: ...`: the index-less old wording
                bm = _BUS_DETAIL.search(line, m.start())
                if bm:
                    bus, detail = bm.group(1), (bm.group(2) or detail).strip()
            found.append(ToolError(kind, line, summary, remedy, bus, detail))
            break
    # one message per GPU and kind (an agent's log line often repeats the tool's own line), and a
    # block header ("The following GPUs could not be reset:") gives way to the GPUs under it
    named = {(e.kind, e.pci) for e in found if e.pci}
    kinds_named = {k for k, _ in named}
    out: list[ToolError] = []
    for e in found:
        if (e.pci and (e.kind, e.pci) in {(x.kind, x.pci) for x in out}) or (not e.pci and e.kind in kinds_named
                                                                               and e.kind in ("reset_failed", "gpu_lost")):
            continue
        out.append(e)
    return out


def find(doc: Doc) -> list[ToolError]:
    return errors_in(ln.text for ln in doc.lines)


def error_for(kind: str, line: str) -> ToolError:
    """A ToolError of `kind` for a message that came in another shape (NVML's JSON)."""
    for k, _pattern, summary, remedy in PATTERNS:
        if k == kind:
            return ToolError(kind, line, summary, remedy)
    return ToolError(kind, line, "GPU tooling error", "run nvidia-smi by hand on the node and check dmesg")


_OWN = re.compile(r"Failed to initialize NVML:|NVIDIA-SMI has failed because|No devices were found|"
                  r"Unable to determine the device handle for|could not be reset|GPU requires reset", re.I)


# a listing's own parser reads its lost-GPU lines: -L, the table, --query-gpu CSV, -q, topo -m (a GPU row
# meeting itself, "GPU0  X")
_LISTING = re.compile(r"^GPU \d+: .*\(UUID:|^\|=+|^index,|^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:|NVSMI LOG|"
                      r"^\s*GPU\d+\s+X\b")


def detect(doc: Doc) -> bool:
    """Output that is an nvidia-smi / NVML failure message (alone, or inside another program's
    log), not a GPU listing that mentions one bad GPU (the listing's own parser reads that)."""
    head = [ln.text for ln in doc.head(400)]
    return any(_OWN.search(t) for t in head) and not any(_LISTING.search(t) for t in head)


FORMATS = [Format("nvidia-smi-error", detect=detect, probe="nvidia-smi-q", priority=30,
                  description="nvidia-smi / NVML failure messages (driver not loaded, version mismatch, no "
                              "devices, GPU lost, reset refused), alone or inside another log")]


def first_line(doc: Doc) -> Line | None:
    return next((ln for ln in doc.lines if ln.text.strip()), None)


__all__ = ["FORMATS", "PATTERNS", "ToolError", "detect", "error_for", "errors_in", "find"]
