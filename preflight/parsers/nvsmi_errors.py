"""The messages nvidia-smi and NVML print instead of data, wherever they appear.

A message may stand alone (`Failed to initialize NVML: Driver/library version mismatch`), sit
under the tool's own prefix (`NVIDIA GPU Details | Failed: ...`), inside a monitoring agent's
log line or a Python bytes literal (`b"NVIDIA-SMI has failed because it couldn't communicate
with the NVIDIA driver ... \\n\\n"`): they are searched for anywhere in a line.

nvidia-smi names a GPU it cannot open as `Unable to determine the device handle for GPU
<bus>: <NVML error string>`, in every spelling its releases used: `for GPU 0000:0B:00.0:`
(the default table, `-q`), `for GPU0000:0B:00.0:` (old releases), `for GPU0: 0000:0B:00.0:`
(`--query-gpu`), `for gpu 0000:0B:00.0:` (`-L`). What follows the bus id is NVML's error
string (nvmlErrorString): `Unknown Error` and `GPU is lost` (fallen off the bus), `GPU
requires reset`, `Insufficient External Power` or the longer `Unable to communicate with GPU
because it is insufficiently powered.` (with two explanation lines below it), `Insufficient
Permissions`, `Not Found`. Where the error string is on the next line (`... for gpu
0000:01:00.0:` then `GPU is lost. Reboot the system to recover this GPU`), that line is read as
the detail. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from preflight import lazyre
from preflight.framing import Doc, Line
from preflight.parsers.base import Format, pci_id

_BUS = r"[0-9A-Fa-f]{3,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]"
_BUS_DETAIL = lazyre.compile(rf"({_BUS})(?:\s*:\s*(.*))?")


@dataclass(frozen=True)
class ToolError:
    """A message nvidia-smi or NVML prints instead of data."""

    kind: str  # version_mismatch | no_driver | no_devices | library_missing | gpu_lost | nvml_init
    #            | reset_failed | needs_reset | no_permission | insufficient_power | inforom_corrupted
    line: str  # the message as printed (the line it is in)
    summary: str
    remedy: str
    bus_id: str = ""  # "0000:01:00.0" as printed, when the message names a GPU
    detail: str = ""  # what the tool said after the bus id ("Unknown Error", "In use by another client")
    more: tuple[str, ...] = ()  # the message's further lines (an explanation nvidia-smi prints below it)

    @property
    def pci(self) -> str:
        return pci_id(self.bus_id) if self.bus_id else ""

    @property
    def lines(self) -> tuple[str, ...]:
        """Every line the message spans."""
        return (self.line, *self.more)


LOST_REMEDY = ("the GPU fell off the bus or hung (Xid 79 class): drain the node and reboot it; reseat or RMA the GPU "
               "if it happens again")
# the device-handle message (group `handle`), or NVML's "GPU is lost" in any other shape
_LOST = lazyre.compile(rf"(?P<handle>Unable to (?:determine|detect) the device handle for)\s*(?:GPU\s*(?:\d+\s*:\s*)?)?"
                   rf"(?P<bus>{_BUS})?(?:\s*:\s*(?P<detail>.*))?|\bGPU is lost\b|NVMLError_GpuIsLost|NVML_ERROR_GPU_IS_LOST",
                   re.I)

# (kind, pattern, summary, remedy). Order matters: the first pattern that matches a line wins.
PATTERNS: list[tuple[str, re.Pattern[str], str, str]] = [
    ("version_mismatch",
     lazyre.compile(r"Driver/library version mismatch|NVML/RM version mismatch|LibRmVersionMismatch|"
                r"NVML_ERROR_LIB_RM_VERSION_MISMATCH", re.I),
     "the loaded NVIDIA kernel module and the user-space driver library differ",
     "a driver upgrade without a reboot leaves the old kernel module loaded: drain and reboot the node "
     "(or, with no GPU process running, unload and reload the nvidia modules); if it persists after the reboot, "
     "reinstall the driver packages so kernel module and libraries are one version"),
    ("no_driver",
     lazyre.compile(r"couldn'?t communicate with (?:the )?NVIDIA driver|NVMLError_DriverNotLoaded|\bDriver Not Loaded\b|"
                r"NVML_ERROR_DRIVER_NOT_LOADED|"
                r"Unable to load the NVIDIA kernel module|NVIDIA kernel module missing|"
                r"could not open the device file /dev/nvidiactl", re.I),
     "the NVIDIA kernel driver is not loaded",
     "load the driver (modprobe nvidia; check that its DKMS module is built for the running kernel), "
     "then check dmesg for NVRM errors"),
    ("gpu_lost", _LOST, "a GPU does not answer the driver", LOST_REMEDY),
    ("needs_reset",
     lazyre.compile(r"\[GPU requires reset\]|GPU requires reset|NVMLError_ResetRequired|NVML_ERROR_RESET_REQUIRED", re.I),
     "a GPU needs a reset before it can be used",
     "drain the node and reset the GPU (nvidia-smi -r -i <index>) once no process uses it, or reboot"),
    ("reset_failed",
     lazyre.compile(rf"could not be reset|GPU (?P<bus>{_BUS}): (?P<detail>In use by another client|.*reset.*failed.*)|"
                r"Unable to reset (?:this )?GPU", re.I),
     "a GPU reset did not happen",
     "stop every process holding the GPU (nvidia-persistenced, DCGM, the device plugin, monitoring agents: "
     "`nvidia-smi --query-compute-apps=pid --format=csv`, `lsof /dev/nvidia*`), then reset again; reboot if it "
     "still refuses. Keep the node drained until the reset has applied"),
    ("no_devices",
     lazyre.compile(r"No devices were found|^No devices found\.?$|No NVIDIA GPU found|NVML: device count is 0", re.I),
     "the driver is loaded but finds no GPU",
     "check the PCIe link (lspci -d 10de:), and dmesg for Xid 79 (GPU fell off the bus); "
     "drain, power-cycle the node, reseat or RMA the GPU if it stays missing"),
    ("library_missing",
     lazyre.compile(r"NVML Shared Library Not Found|NVMLError_LibraryNotFound|libnvidia-ml\.so\S*: cannot open|"
                r"couldn'?t find libnvidia-ml\.so|nvidia-smi: (?:command )?not found|"
                r"libnvidia-ml\.so\S* (?:not found|cannot be loaded)|NVML_ERROR_LIBRARY_NOT_FOUND", re.I),
     "the NVML library (libnvidia-ml.so) was not found",
     "install the NVIDIA driver's user-space libraries (or expose them to the container)"),
    ("inforom_corrupted",
     lazyre.compile(rf"infoROM is corrupted at gpu\s*(?P<bus>{_BUS})?", re.I),
     "a GPU's infoROM is corrupted",
     "the GPU still works but its ECC and error records are not kept reliably: plan an RMA of the board; "
     "`nvidia-smi -q -d ECC` and the InfoROM version show the state"),
    ("nvml_init",
     lazyre.compile(r"Failed to initialize NVML: .*|NVMLError_\w+|NVML_ERROR_\w+|pynvml cannot be imported.*|"
                r"NVIDIA-SMI has failed\b.*", re.I),
     "NVML could not be initialised",
     "run nvidia-smi by hand on the node; check dmesg for NVRM errors and that the user can open /dev/nvidia*"),
]

# One pattern may match messages of different causes: the message's own words name the one it says
# (kind, pattern, summary, remedy or "" for the kind's), the first that matches; else the kind's summary.
_CAUSES: list[tuple[str, re.Pattern[str], str, str]] = [
    ("library_missing", lazyre.compile(r"nvidia-smi: (?:command )?not found", re.I),
     "nvidia-smi was not found on the PATH",
     "install the NVIDIA driver's user-space tools (nvidia-smi comes with them) or put their folder on the PATH"),
    ("library_missing", lazyre.compile(r"cannot be loaded|LibraryLoadError", re.I),
     "the NVML library (libnvidia-ml.so) could not be loaded",
     "a libnvidia-ml.so.1 is there but the loader refuses it (wrong architecture, a broken or partial install): "
     "reinstall the NVIDIA driver's user-space libraries"),
]


def _cause(kind: str, line: str, summary: str, remedy: str) -> tuple[str, str]:
    """(summary, remedy) of a message of `kind`: the cause its own words name."""
    for k, pattern, said, fix in _CAUSES:
        if k == kind and pattern.search(line):
            return said, fix or remedy
    return summary, remedy


# What NVML's error string after a GPU's bus id makes of the device-handle message. The default is
# a GPU that does not answer (Unknown Error, GPU is lost, Not Found, Timeout).
_DETAIL_KINDS: list[tuple[str, re.Pattern[str], str, str]] = [
    ("needs_reset", lazyre.compile(r"requires reset", re.I), "a GPU needs a reset before it can be used",
     "drain the node and reset the GPU (nvidia-smi -r -i <index>) once no process uses it, or reboot"),
    ("insufficient_power", lazyre.compile(r"Insufficient External Power|insufficiently powered", re.I),
     "a GPU does not get enough power to start",
     "check the GPU's auxiliary power cables and the PSUs (nvidia-smi names the cables as not attached or not "
     "seated); drain the node until it is fixed"),
    ("no_permission", lazyre.compile(r"Insufficient Permissions|No Permission", re.I),
     "the user that ran nvidia-smi may not open this GPU",
     "check the permissions of /dev/nvidia* (nvidia-modprobe / udev rules) and the cgroup device rules of the "
     "job or container that ran nvidia-smi; run it as root to see the GPU itself"),
]

# Lines nvidia-smi prints under a message to explain it: part of that message.
_MORE = lazyre.compile(r"^(?:This may be because not all required external power|attached, or the attached cables|"
                   r"Reboot the system to recover)", re.I)
# NVML's error string alone on a line: the device-handle message broken after the bus id
_BARE = lazyre.compile(r"^(?:GPU is lost|Unknown Error|GPU requires reset|Insufficient|Not Found|Timeout)", re.I)


# A word that every alternative of every pattern in PATTERNS holds one of (letter case aside): a
# line without any is none of the messages, and costs a few substring searches, not one regular
# expression per pattern.
ANY_WORDS = ("mismatch", "driver", "kernel module", "nvidiactl", "device handle", "is lost", "gpuislost", "reset",
             "in use by another client", "no devices", "no nvidia gpu", "device count is 0", "librar", "libnvidia-ml",
             "nvidia-smi", "inforom", "nvml")


_ANY_WORD = lazyre.compile("|".join(map(re.escape, ANY_WORDS)))  # on the lower case: no case folding per character


def any_word(line: str) -> bool:
    """Whether the line holds one of ANY_WORDS, letter case aside."""
    return _ANY_WORD.search(line.lower()) is not None


def _classify(line: str, reset_block: bool) -> tuple[str, re.Match[str], str, str] | None:
    if not any_word(line):
        return None
    for kind, pattern, summary, remedy in PATTERNS:
        m = pattern.search(line)
        if m is None:
            continue
        if kind == "reset_failed" and m.groupdict().get("bus") and not reset_block:
            continue  # `GPU 00000000:55:00.0: ...` is only a reset failure under its header
        return kind, m, *_cause(kind, line, summary, remedy)
    return None


def _handle_error(line: str, bus: str, detail: str, more: tuple[str, ...] = ()) -> ToolError:
    """The device-handle message of a GPU: the kind NVML's error string after the bus id says."""
    for kind, pattern, summary, remedy in _DETAIL_KINDS:
        if pattern.search(detail):
            return ToolError(kind, line, summary, remedy, bus, detail, more)
    return ToolError("gpu_lost", line, "a GPU does not answer the driver", LOST_REMEDY, bus, detail, more)


def _from_handle(line: str, m: re.Match[str]) -> ToolError:
    bus, detail = m.group("bus") or "", (m.group("detail") or "").strip()
    if not bus:  # `GPU0000:A1:00.0: ...` and other spellings with the bus id further on
        bm = _BUS_DETAIL.search(line, m.start())
        if bm:
            bus, detail = bm.group(1), (bm.group(2) or detail).strip()
    return _handle_error(line, bus, detail)


def _continued(err: ToolError, line: str, as_detail: bool) -> ToolError:
    """The message with one more of its lines: the error string itself, or an explanation."""
    if as_detail:
        return _handle_error(err.line, err.bus_id, line, (*err.more, line))
    return ToolError(err.kind, err.line, err.summary, err.remedy, err.bus_id, err.detail, (*err.more, line))


def _scan(lines: list[str]) -> list[ToolError]:
    found: list[ToolError] = []
    seen: set[str] = set()
    reset_block = False
    open_handle = False  # the last line was a device-handle message whose error string is still to come
    for line in lines:
        if not line or line in seen:
            continue
        as_detail = open_handle and bool(_BARE.match(line))
        open_handle = False
        if found and (as_detail or _MORE.search(line)):
            found[-1] = _continued(found[-1], line, as_detail)
            continue
        reset_block = reset_block or "could not be reset" in line.lower()
        hit = _classify(line, reset_block)
        if hit is None:
            continue
        kind, m, summary, remedy = hit
        seen.add(line)
        if m.groupdict().get("handle"):
            found.append(_from_handle(line, m))
            open_handle = not found[-1].detail
            continue
        gd = m.groupdict()
        found.append(ToolError(kind, line, summary, remedy, gd.get("bus") or "", (gd.get("detail") or "").strip()))
    return found


def errors_in(lines: Iterable[str]) -> list[ToolError]:
    """Every tool error message in these lines (each distinct line once)."""
    found = _scan([raw.strip() for raw in lines])
    # one message per GPU and kind (an agent's log line often repeats the tool's own line), and a
    # block header ("The following GPUs could not be reset:") gives way to the GPUs under it
    kinds_named = {e.kind for e in found if e.pci}
    out: list[ToolError] = []
    taken: set[tuple[str, str]] = set()
    for e in found:
        if e.pci and (e.kind, e.pci) in taken:
            continue
        if not e.pci and e.kind in kinds_named and e.kind in ("reset_failed", "gpu_lost"):
            continue
        taken.add((e.kind, e.pci))
        out.append(e)
    return out


def find(doc: Doc) -> list[ToolError]:
    return errors_in(ln.text for ln in doc.lines)


def error_for(kind: str, line: str) -> ToolError:
    """A ToolError of `kind` for a message that came in another shape (NVML's JSON)."""
    for k, _pattern, summary, remedy in PATTERNS:
        if k == kind:
            return ToolError(kind, line, *_cause(kind, line, summary, remedy))
    return ToolError(kind, line, "GPU tooling error", "run nvidia-smi by hand on the node and check dmesg")


_OWN = lazyre.compile(r"Failed to initialize NVML:|NVIDIA-SMI has failed because|No devices were found|"
                  r"^No devices found\.?$|couldn'?t find libnvidia-ml\.so|"
                  r"Unable to (?:determine|detect) the device handle for|could not be reset|GPU requires reset", re.I)


# a listing's own parser reads its lost-GPU lines: -L, the table, --query-gpu CSV, -q, topo -m (a GPU row
# meeting itself, "GPU0  X"), nvlink (a Link line)
_LISTING = lazyre.compile(r"^GPU \d+: .*\((?:UUID|S/N):|^\|=+|^\|\s+\d+\s+.*\|\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:|"
                      r"^index,|^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$|NVSMI LOG|^\s*GPU\d+\s+X\b|^\s*Link \d+: ")


DETECT_LINES = 400  # pragma: no mutate (how far a detector reads, not a grading value)


def detect(doc: Doc) -> bool:
    """Output that is an nvidia-smi / NVML failure message (alone, or inside another program's
    log), not a GPU listing that mentions one bad GPU (the listing's own parser reads that)."""
    head = [ln.text.strip() for ln in doc.head(DETECT_LINES)]
    return any(_OWN.search(t) for t in head) and not any(_LISTING.search(t) for t in head)


# the words each alternative of `_OWN` holds, lower-cased: `detect` cannot say yes without one
_COULD = ("failed to initialize nvml:", "nvidia-smi has failed because", "no devices were found", "no devices found",
          "find libnvidia-ml.so", "the device handle for", "could not be reset", "gpu requires reset")


def could(doc: Doc) -> bool:
    """A cheap necessary condition of `detect` (one C-speed search per word of the head)."""
    head = doc.head_folded(DETECT_LINES)
    return any(w in head for w in _COULD)


FORMATS = [Format("nvidia-smi-error", detect=detect, could=could, probe="nvidia-smi-q", priority=30,
                  description="nvidia-smi / NVML failure messages (driver not loaded, version mismatch, no "
                              "devices, GPU lost, reset refused), alone or inside another log")]


def first_line(doc: Doc) -> Line | None:
    return next((ln for ln in doc.lines if ln.text.strip()), None)


__all__ = ["FORMATS", "LOST_REMEDY", "PATTERNS", "ToolError", "detect", "error_for", "errors_in", "find"]
