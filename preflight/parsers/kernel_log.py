"""Kernel log (`dmesg`, `journalctl -k`, syslog, /dev/kmsg): NVIDIA driver events as facts.

The framing layer has already peeled every time stamp style (dmesg raw, -T, --ctime, iso,
--decode, kmsg records, journald short/iso/precise/monotonic, RFC 3164/5424 syslog, container
prefixes) and kept the time, host and identifier of each line; this module reads messages:

- NVRM Xid reports, with the PCI address (and MIG GPU-I/GPU-CI attribution), the code, the
  process, the NVLink5 unit / Fatal-Nonfatal word / link / registers, the Xid 154 recovery
  action, and the driver's own `caused by previous Xid N` annotation;
- GPU faults the driver reports without an Xid number: fallen off the bus, adapter
  initialisation failed, GPU lost (NV_ERR_GPU_IS_LOST), reset required
  (NV_ERR_RESET_REQUIRED), GSP heartbeat / RPC timeouts, WPR2 left up, NVLink discovery
  failures;
- driver faults that leave no GPU usable: no adapter probed, probe routine not called,
  kernel module / client API mismatch, unsupported GPU, module symbols missing;
- the PCI address -> GPU UUID / board serial map, the loaded kernel module version.

Only lines that mention the driver are framed (`Doc.select`), so a million-line log is read at
the speed of a substring scan.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from preflight.framing import Doc, Hit, Line
from preflight.parsers.base import Format, ParserSpec, pci_id

NEEDLES = ("NVRM", "Xid (", "fallen off the bus", "nvidia: Unknown symbol")
# the reading tool's own complaints: at the start or the end of what it printed
TOOL_NEEDLES = ("dmesg: ", "journalctl: ", "Operation not permitted", "Permission denied", "No journal files")
TOOL_ENDS = 256 * 1024
_TOOL_ERROR = re.compile(r"^(?:dmesg|journalctl): |Operation not permitted|Permission denied|No journal files were found")

_PCI = r"[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?"
_XID = re.compile(
    rf"\bXid \((?:PCI:)?(?P<pci>{_PCI})(?:\s+GPU-I:(?P<gi>\d+))?(?:\s+GPU-CI:(?P<ci>\d+))?\):\s*"
    r"(?P<code>\d+)(?:,\s*(?P<rest>.*))?$")
_PID_NAME = re.compile(r"^pid=(?P<pid>[^,]*),\s*(?:name=(?P<name>[^,]*),\s*)?(?P<msg>.*)$")
_CAUSED = re.compile(r"\s*caused by previous Xid (?P<xid>\d+)\s*\.?\s*$")
_NVLINK5 = re.compile(r"^(?P<unit>[A-Z][A-Z0-9_]*)\s+(?P<sev>Fatal|Non-?fatal|NonFatal)\b(?P<after>.*)$",
                      re.IGNORECASE)
_LINK = re.compile(r"\blink\s+(?P<link>-?\d+)", re.IGNORECASE)
_HEX = re.compile(r"0x[0-9A-Fa-f]+")
_GPU_N = re.compile(r"\bGPU(?P<n>\d{1,2})\b")
_RECOVERY = re.compile(r"\bto (?P<code>0x[0-9A-Fa-f]+)\s*\((?P<what>[^)]*)\)")
_PCI_ANY = re.compile(r"(?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?")
_GPU_AT = re.compile(rf"NVRM: GPU at (?:PCI:)?(?P<pci>{_PCI}): (?P<uuid>GPU-[0-9a-fA-F.-]+)")
_SERIAL = re.compile(r"NVRM: GPU Board Serial Number: (?P<serial>\S+)")
_MODULE = re.compile(r"NVRM: loading NVIDIA UNIX (?:Open Kernel Module for )?\S+ Kernel Module\s+(?P<v>\d+\.\d+(?:\.\d+)?)"
                     r"|NVRM: loading NVIDIA UNIX Open Kernel Module for \S+\s+(?P<v2>\d+\.\d+(?:\.\d+)?)")
_NEEDS_RESET = re.compile(r"needs to be reset|reset (?:the )?gpu|reboot", re.IGNORECASE)

# GPU faults without an Xid number: (kind, pattern, what clears it)
GPU_FAULTS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("fallen_off_bus", re.compile(r"fallen off the bus", re.IGNORECASE), "RESTART_BM"),
    ("gpu_lost", re.compile(r"NV_ERR_GPU_IS_LOST|GPU lost from the bus|\bGPU is lost\b", re.IGNORECASE), "RESTART_BM"),
    ("adapter_init_failed", re.compile(r"RmInitAdapter failed|rm_init_adapter failed|"
                                       r"Cannot initialize GSP firmware RM|GPU Initialization Error", re.IGNORECASE),
     "RESTART_BM"),
    ("wpr2_up", re.compile(r"WPR2 already up", re.IGNORECASE), "RESTART_BM"),
    ("reset_required", re.compile(r"NV_ERR_RESET_REQUIRED|\bReset required\b", re.IGNORECASE), "RESET_GPU"),
    ("gsp_timeout", re.compile(r"Heartbeat timed out|GSP task watchdog timeout|"
                               r"waiting for RPC (?:response )?from (?:GPU\d+ )?GSP", re.IGNORECASE), "RESET_GPU"),
    ("nvlink_discovery_failed",
     re.compile(r"NVRM: knvlink\w*.*\bfail(?:ed)?\b|NVRM: .*NVLink.*(?:training|discovery).*fail", re.IGNORECASE),
     "WORKFLOW_NVLINK_ERR"),
)

# Driver faults: the driver stack itself is broken (graded by gpu.driver)
DRIVER_FAULTS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("no_adapter", re.compile(r"No NVIDIA (?:graphics adapter|GPU) (?:probed|found)", re.IGNORECASE),
     "the nvidia kernel module found no GPU to drive"),
    ("probe_not_called", re.compile(r"probe routine was not called for (?P<n>\d+) device", re.IGNORECASE),
     "another driver (nouveau, vfio) owns the GPUs, so the nvidia module did not bind them"),
    ("api_mismatch", re.compile(r"API mismatch: the client has the version (?P<client>\S+?),? but"
                                r"(?:\s+this kernel module has the version)?\s*(?P<kernel>[\d.]+)?", re.IGNORECASE),
     "the user-space driver and the loaded kernel module are different versions"),
    ("unsupported_gpu", re.compile(r"installed in this system is not supported by the|"
                                   r"is not supported by the NVIDIA \S+ driver release", re.IGNORECASE),
     "the installed driver branch does not support this GPU"),
    ("module_symbols", re.compile(r"nvidia\S*: Unknown symbol", re.IGNORECASE),
     "the nvidia kernel module does not match the running kernel (unknown symbols)"),
    ("firmware_missing", re.compile(r"No firmware image found|GSP firmware image version mismatch|"
                                    r"loading /lib/firmware/nvidia/\S+ failed", re.IGNORECASE),
     "the GSP firmware files do not match the kernel module"),
)


@dataclass
class XidEvent:
    xid: int
    pci: str
    line: Line
    text: str  # the message after "Xid (PCI:...): N, " without pid/name and annotation
    pid: str = ""
    name: str = ""
    gpu: int | None = None  # GPU index named in the message ("GPU3") or learned from the log
    mig: str = ""  # "GPU-I:02 GPU-CI:01" when the driver attributed it to a MIG instance
    unit: str = ""
    fatal: bool | None = None
    link: int | None = None
    registers: list[str] = field(default_factory=list)
    recovery: str = ""  # Xid 154: the recovery action printed
    recovery_code: int | None = None
    caused_by: int | None = None  # the driver's "caused by previous Xid N" (graders add window links)


@dataclass
class KernelFault:
    kind: str
    pci: str
    line: Line
    action: str


@dataclass
class DriverFault:
    kind: str
    line: Line
    meaning: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class KernelLog:
    lines: int = 0  # lines in the log
    nvrm: int = 0  # lines from the NVIDIA driver
    stamped: bool = False  # the log lines carry kernel-log time stamps (not a bare message list)
    events: list[XidEvent] = field(default_factory=list)
    faults: list[KernelFault] = field(default_factory=list)
    driver_faults: list[DriverFault] = field(default_factory=list)
    gpus: dict[str, dict[str, Any]] = field(default_factory=dict)  # pci -> {uuid, serial, index}
    reset_notes: dict[str, list[Line]] = field(default_factory=dict)  # pci -> "needs to be reset" lines
    module_version: str = ""
    tool_errors: list[str] = field(default_factory=list)  # dmesg/journalctl's own complaints
    hosts: list[str] = field(default_factory=list)
    excerpt: bool = False  # elided or grep-filtered by whoever pasted it
    filter: list[str] = field(default_factory=list)


def parse_xid(msg: str, line: Line) -> XidEvent | None:
    """One NVRM Xid message -> XidEvent (None when the message is not an Xid report)."""
    m = _XID.search(msg)
    if not m:
        return None
    rest = (m.group("rest") or "").strip()
    ev = XidEvent(xid=int(m.group("code")), pci=pci_id(m.group("pci")), line=line, text=rest)
    if m.group("gi"):
        ev.mig = f"GPU-I:{m.group('gi')}" + (f" GPU-CI:{m.group('ci')}" if m.group("ci") else "")
    cm = _CAUSED.search(ev.text)
    if cm:
        ev.caused_by = int(cm.group("xid"))
        ev.text = ev.text[:cm.start()].rstrip(" ,")
    pm = _PID_NAME.match(ev.text)
    if pm:
        ev.pid = pm.group("pid").strip("'")
        ev.name = (pm.group("name") or "").strip()
        ev.text = pm.group("msg").strip()
    g = _GPU_N.search(ev.text)
    if g:
        ev.gpu = int(g.group("n"))
    if 144 <= ev.xid <= 150 or ev.xid == 74:
        _nvlink_details(ev)
    if ev.xid == 154:
        _recovery_action(ev)
    return ev


def _nvlink_details(ev: XidEvent) -> None:
    """An NVLink Xid's unit, Fatal/Nonfatal word, link number and registers."""
    nm = _NVLINK5.match(ev.text)
    if nm:
        ev.unit = nm.group("unit")
        ev.fatal = nm.group("sev").lower() == "fatal"
    elif "fatal" in ev.text.lower():
        ev.fatal = "nonfatal" not in ev.text.lower().replace("-", "").replace(" ", "")
    lk = _LINK.search(ev.text)
    if lk:
        ev.link = int(lk.group("link"))
    ev.registers = _HEX.findall(ev.text)


def _recovery_action(ev: XidEvent) -> None:
    """Xid 154: the recovery action the driver asks for (`... to 0x2 (Node Reboot Required)`)."""
    rm = _RECOVERY.search(ev.text)
    if rm:
        ev.recovery = rm.group("what").strip()
        try:
            ev.recovery_code = int(rm.group("code"), 16)
        except ValueError:
            ev.recovery_code = None


@dataclass
class _Reader:
    """Reads the driver's lines of one kernel log, in order, into `log`."""

    doc: Doc
    log: KernelLog
    last_gpu_at: str = ""  # the PCI address of the last `NVRM: GPU at ...` line (its serial follows)
    hosts: dict[str, None] = field(default_factory=dict)

    def read(self, hit: Hit) -> None:
        doc, log = self.doc, self.log
        # GPU identity lines (one per GPU per boot, thousands in a long log) are read from the raw
        # line: framing is a prefix and cannot hold `NVRM: GPU at ...`; every other line is peeled
        raw = doc.peel_hit(hit).text if hit.raw.startswith("{") else hit.raw  # a JSON record: its message
        if "NVRM" in raw:
            log.nvrm += 1
        if self._identity(raw):
            return
        line = doc.peel_hit(hit)
        msg = line.text.strip()
        if not msg:
            return
        if line.host:
            self.hosts.setdefault(line.host)
        ev = parse_xid(msg, line) if "Xid" in msg else None
        if ev is not None:
            log.events.append(ev)
            if ev.gpu is not None:
                log.gpus.setdefault(ev.pci, {}).setdefault("index", ev.gpu)
            return
        if "NVRM" not in msg and "fallen off the bus" not in msg.lower() and "Unknown symbol" not in msg:
            if _TOOL_ERROR.search(msg) and len(log.tool_errors) < 5:
                log.tool_errors.append(msg)
            return
        _fault(log, msg, line)

    def _identity(self, raw: str) -> bool:
        """A GPU's UUID, its board serial or the module version; False for any other line."""
        log = self.log
        gm = _GPU_AT.search(raw) if "GPU at" in raw else None
        if gm:
            self.last_gpu_at = pci_id(gm.group("pci"))
            log.gpus.setdefault(self.last_gpu_at, {})["uuid"] = gm.group("uuid")
            return True
        sm = _SERIAL.search(raw) if "Serial Number" in raw else None
        if sm:
            if self.last_gpu_at:
                log.gpus.setdefault(self.last_gpu_at, {})["serial"] = sm.group("serial")
            return True
        mm = _MODULE.search(raw) if "Kernel Module" in raw else None
        if mm:
            log.module_version = mm.group("v") or mm.group("v2") or log.module_version
            return True
        return False


def _fault(log: KernelLog, msg: str, line: Line) -> None:
    """A driver message that is no Xid: a driver fault, a GPU fault, or a note that a GPU needs a reset."""
    for kind, pat, meaning in DRIVER_FAULTS:
        dm = pat.search(msg)
        if dm:
            detail = {k: v for k, v in dm.groupdict().items() if v}
            log.driver_faults.append(DriverFault(kind, line, meaning, detail))
            return
    for kind, pat, action in GPU_FAULTS:
        if pat.search(msg):
            pm = _PCI_ANY.search(msg)
            log.faults.append(KernelFault(kind, pci_id(pm.group("pci")) if pm else "", line, action))
            return
    if _NEEDS_RESET.search(msg):
        pm = _PCI_ANY.search(msg)
        if pm:
            log.reset_notes.setdefault(pci_id(pm.group("pci")), []).append(line)


def parse(doc: Doc) -> KernelLog:
    """Kernel log document -> Xid events, Xid-less GPU faults, driver faults, GPU identities."""
    log = KernelLog(lines=doc.count(), excerpt=doc.excerpt, filter=list(doc.filter))
    head = [ln for ln in doc.head(400) if ln.text.strip()]
    log.stamped = bool(head) and sum(1 for ln in head if ln.stamped) * 2 >= len(head)
    hits = {(h.start, h.n): h for h in doc.scan(TOOL_NEEDLES, ends=TOOL_ENDS)}
    hits.update(((h.start, h.n), h) for h in doc.scan(NEEDLES))
    reader = _Reader(doc, log)
    for k in sorted(hits):
        reader.read(hits[k])
    for ev in log.events:
        if ev.gpu is None:
            ev.gpu = log.gpus.get(ev.pci, {}).get("index")
    log.hosts = list(reader.hosts)
    return log


# ---------------------------------------------------------------------------------------------
# Recognising a kernel log

_KERNEL_LAYERS = frozenset({"dmesg", "dmesg-ctime", "kmsg", "facility", "kernel", "printk-level"})
_KERNEL_MSG = re.compile(r"^(?:NVRM: |nvidia(?:-\w+)?: |pcieport |mlx5_core |ACPI|PCI: |pci \d|"
                         r"\w+ \d{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d: )")


def detect(doc: Doc) -> bool:
    """A kernel log: NVRM lines, or mostly lines framed as kernel messages."""
    total = kernel = 0
    for ln in doc.head(2000):
        msg = ln.text.strip()
        if not msg:
            continue
        if msg.startswith("NVRM: ") or _XID.search(msg):
            return True
        total += 1
        if ln.ident == "kernel" or set(ln.layers) & _KERNEL_LAYERS:
            kernel += 1
        elif ln.layers and _KERNEL_MSG.match(msg):
            kernel += 1
        if total >= 400:
            break
    return kernel >= 3 and kernel * 2 >= total


FORMATS = [
    Format("kernel-log", detect=detect, priority=40,
           description="kernel log: dmesg (raw, -T, --ctime, iso, --decode), journalctl -k (any short "
                       "format), syslog / kern.log, /dev/kmsg, with any host, srun or container framing"),
]
PARSERS = [ParserSpec("kernel-log", parse)]

__all__ = ["DRIVER_FAULTS", "DriverFault", "FORMATS", "GPU_FAULTS", "KernelFault", "KernelLog", "NEEDLES",
           "PARSERS", "XidEvent", "detect", "parse", "parse_xid"]
