"""Kernel log (`dmesg`, `journalctl -k`, syslog, /dev/kmsg): NVIDIA driver events and the
kernel's reports about GPUs and NICs, as facts.

The framing layer has already peeled every time stamp style (dmesg raw, -T, --ctime, iso,
--decode, kmsg records, journald short/iso/precise/monotonic, RFC 3164/5424 syslog, container
prefixes) and kept the time, host and identifier of each line; this module reads messages:

- NVRM Xid reports in every layout the driver has printed (`Xid (PCI:dddd:bb:dd): N, pid=...,
  name=..., msg`, without pid/name, with a MIG GPU-I/GPU-CI attribution, the pre-r3xx `Xid
  (dddd:bb:dd): N, ...`, a masked address such as `PCI:0000:xx:00`), with the NVLink5 unit /
  Fatal-Nonfatal word / link / registers, the Xid 154 recovery action, and the driver's own
  `caused by previous Xid N` annotation; an NVRM line that names an Xid in a layout not known
  is kept as not understood (`unparsed`), never guessed;
- GPU faults the driver reports without an Xid number: fallen off the bus, adapter
  initialisation failed, GPU lost (NV_ERR_GPU_IS_LOST), reset required, GSP heartbeat / RPC
  timeouts, GSP crash reports, memory subsystem errors, PMU halt, WPR2 left up, NVLink
  discovery failures, driver assertions and NV_ERR_* statuses;
- driver faults that leave no GPU usable: no adapter probed, probe routine not called,
  kernel module / client API mismatch, unsupported GPU, module symbols missing;
- the kernel's own hardware reports (PCIe AER, DPC, hot-plug link down, machine checks,
  NVSwitch SXids), read by `kernel_hw`;
- the PCI address -> GPU UUID / board serial / index map, the loaded kernel module version;
- the NVIDIA Kubernetes device plugin's health-check lines (`k8s_device_plugin`): the Xids it
  saw (`XidCriticalError: Xid=69 on Device=GPU-<uuid> ...`, `Processing event {... EventData:
  79 ...}`), read as Xid events of the GPU of that UUID (no PCI address), the double-bit ECC
  events it skipped and the devices it marked unhealthy for reasons that are no Xid.

Only lines that hold one of the needles are framed (`Doc.scan`), so a million-line log is read
at the speed of a substring scan. Message formats: NVIDIA/open-gpu-kernel-modules
src/nvidia/src/kernel/gpu/rc/kernel_rc.c (`krcReportXid`, `_krcLogUuidOnce`),
src/nvidia/arch/nvalloc/unix/src/osinit.c and osapi.c, kernel-open/nvidia/nv.c,
src/nvidia/src/kernel/gpu/gsp/kernel_gsp.c, src/nvidia/src/kernel/gpu/gpu.c
(`gpuRefreshRecoveryAction`, `_gpuRecoveryActionName`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from preflight import lazyre
from preflight.framing import DETECT_ENDS, Doc, Hit, Line
from preflight.parsers import k8s_device_plugin as plugin
from preflight.parsers import kernel_hw
from preflight.parsers.base import Format, ParserSpec, pci_id
from preflight.parsers.kernel_hw import KernelFault

NEEDLES = ("NVRM", "Xid", "fallen off the bus", "nvidia: Unknown symbol", "nvidia: probe of", *kernel_hw.NEEDLES,
           *plugin.SCAN_NEEDLES)
# the reading tool's own complaints: at the start or the end of what it printed
TOOL_NEEDLES = ("dmesg: ", "journalctl: ", "Operation not permitted", "Permission denied", "No journal files")
TOOL_ENDS = 256 * 1024  # pragma: no mutate (a scan window: a byte more or less reads the same lines)
_TOOL_ERROR = lazyre.compile(r"^(?:dmesg|journalctl): |Operation not permitted|Permission denied|No journal files were found")

_PCI = r"[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?"
# an address as printed or as masked by whoever pasted it (`0000:xx:00`, `0000:**:00.0`)
_PCI_MASKED = r"[0-9A-Za-z*?#_]{1,8}:[0-9A-Za-z*?#_]{2}:[0-9A-Za-z*?#_]{2}(?:\.[0-7xX*])?"
_XID = lazyre.compile(r"(?<![\w])Xid\s*\((?P<attr>[^()]*)\)\s*:\s*(?P<code>\d+)\b\s*(?:[,:]\s*(?P<rest>.*))?$")
_XID_BARE = lazyre.compile(r"NVRM: Xid:?\s+(?P<code>\d+)\b\s*(?:[,:]\s*(?P<rest>.*))?$")
_XID_WORD = lazyre.compile(r"(?<![\w])Xid(?![\w])")
_ATTR_PCI = lazyre.compile(rf"(?:PCI:)?\s*(?P<pci>{_PCI_MASKED})")
_ATTR_GI = lazyre.compile(r"GPU-I:\s*(?P<gi>\d+)")
_ATTR_CI = lazyre.compile(r"GPU-CI:\s*(?P<ci>\d+)")
_PID_NAME = lazyre.compile(r"^pid=(?P<pid>[^,]*),\s*(?:name=(?P<name>[^,]*),\s*)?(?P<msg>.*)$")
_CAUSED = lazyre.compile(r"\s*caused by previous Xid (?P<xid>\d+)\s*\.?\s*$")
_NVLINK5 = lazyre.compile(r"^(?P<unit>[A-Z][A-Z0-9_]*)\s+(?P<sev>Fatal|Non-?fatal|NonFatal)\b(?P<after>.*)$",
                      re.IGNORECASE)
_LINK = lazyre.compile(r"\blink\s+(?P<link>-?\d+)", re.IGNORECASE)
_HEX = lazyre.compile(r"0x[0-9A-Fa-f]+")
_GPU_N = lazyre.compile(r"\bGPU(?P<n>\d{1,2})\b")
_RECOVERY = lazyre.compile(r"\bto\s+(?P<code>0x[0-9A-Fa-f]+|\d+)?\s*\((?P<what>[^)]*)\)")
# the names the driver prints for each recovery action (gpu.c `_gpuRecoveryActionName`)
RECOVERY_NAMES = {"none": 0, "gpu reset required": 1, "node reboot required": 2, "drain p2p": 3,
                  "drain and reset": 4, "recover imex domain": 5}
_PCI_ANY = lazyre.compile(r"(?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?")
_GPU_AT = lazyre.compile(rf"NVRM: GPU at (?:PCI:)?(?P<pci>{_PCI_MASKED}): (?P<uuid>GPU-[0-9a-zA-Z.*-]+)")
_NAMED_GPU = lazyre.compile(rf"NVRM: The NVIDIA GPU (?P<pci>{_PCI})")
_SERIAL = lazyre.compile(r"NVRM: GPU Board Serial Number: (?P<serial>\S+)")
_MODULE = lazyre.compile(r"NVRM: loading NVIDIA UNIX (?:Open Kernel Module for )?\S+ Kernel Module\s+(?P<v>\d+\.\d+(?:\.\d+)?)"
                     r"|NVRM: loading NVIDIA UNIX Open Kernel Module for \S+\s+(?P<v2>\d+\.\d+(?:\.\d+)?)")
# lines of the NVIDIA driver (or about it) that are not Xid reports
_DRIVER_LINE = lazyre.compile(r"NVRM|fallen off the bus|Unknown symbol|nvidia: probe of", re.IGNORECASE)
_NEEDS_RESET = lazyre.compile(r"needs to be reset|reset (?:the )?gpu|reboot", re.IGNORECASE)
NAMED_GPU_REACH = 3  # lines after `The NVIDIA GPU <pci>` that continue its message

# The driver's error level, told by the shape of an NVRM line that no rule above reads.
# RM prints (`NV_PRINTF`) reach the kernel log in a release build only at LEVEL_ERROR and above
# (nvlog_printf.c `nvDbg_PrintMsg`), with the prefix `NVRM: [GPU<n> ]<function>: `
# (`RmMsgPrefix`); some captures show it without the colon after NVRM. So an NVRM line that
# starts with a function name is an error. The kernel interface (`nv_printf`,
# `NV_DEV_PRINTF`: `NVRM: ...`, `NVRM: GPU dddd:bb:dd.f: ...`) prints warnings and errors
# alike: any such line is taken as an error unless it is one of its informational messages.
_NVRM_REST = lazyre.compile(r"NVRM(?::\s*|\s+)(?P<rest>.*)$")
_RM_FUNCTION = lazyre.compile(r"^(?:GPU\d+\s+)?[A-Za-z_]\w*(?:\(\))?:\s")
_RM_FUNCTION_NO_COLON = lazyre.compile(r"^NVRM\s+(?:GPU\d+\s+)?[A-Za-z_]\w*(?:\(\))?:\s")
_NVRM_VERSION = lazyre.compile(r"^NVRM version:")  # /proc/driver/nvidia/version, pasted with a log
_DEV_PREFIX = lazyre.compile(rf"^GPU (?:PCI:)?{_PCI}:\s*")
# kernel-interface lines that say nothing is wrong: the module banner and the GPU identity lines
# (read above), the notice that legacy persistence mode is deprecated (nv.c, printed at
# NV_DBG_ERRORS all the same), nvidia-modeset's load note, banner rules. (The crash-dump notice
# of osapi.c is no such line: a dump was taken because something crashed.)
_NVRM_INFORMATIONAL = lazyre.compile(
    r"^(?:version: NVIDIA|loading NVIDIA UNIX|GPU at (?:PCI:)?|GPU Board Serial Number|"
    r"Persistence mode is deprecated|will be removed in a future release|"
    r"nvidia-modeset: Loading|Open nvidia\.ko is only ready for use|"
    r"\**\s*$|[-=]+\s*$)")

# GPU faults without an Xid number: (kind, pattern, what clears it). First match wins: a line
# that names a lost GPU or a reset inside an assertion is that fault, not an assertion.
GPU_FAULTS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("fallen_off_bus", lazyre.compile(r"fallen off the bus", re.IGNORECASE), "RESTART_BM"),
    ("gpu_lost", lazyre.compile(r"NV_ERR_GPU_IS_LOST|GPU lost from the bus|\bGPU is lost\b|"
                            r"API_GPU_ATTACHED_SANITY_CHECK failed", re.IGNORECASE), "RESTART_BM"),
    ("power_cables", lazyre.compile(r"does not have the necessary power cables connected", re.IGNORECASE),
     "CHECK_MECHANICALS"),
    ("adapter_init_failed", lazyre.compile(r"RmInitAdapter failed|rm_init_adapter failed|"
                                       r"RmInitAdapter: .*(?:fail|[Cc]annot|bailing)|RM cannot boot|"
                                       r"FSP boot cmds failed|VBIOS boot failed|GSP boot failed|"
                                       r"GSP-RM proxy boot command failed|"
                                       r"Cannot initialize GSP firmware RM|GPU Initialization Error|"
                                       r"probe routine failed for \d+ device|nvidia: probe of \S+ failed|"
                                       r"I/O region assigned to your NVIDIA device is invalid|request_mem_region failed|"
                                       r"Failed to re-allocate BAR1|attempting to resize PCIe BARs|"
                                       r"No interrupts of any type are available|Failed to copy vbios",
                                       re.IGNORECASE), "RESTART_BM"),
    ("wpr2_up", lazyre.compile(r"WPR2 already up|WPR2 is still up", re.IGNORECASE), "RESTART_BM"),
    ("reset_required", lazyre.compile(r"NV_ERR_RESET_REQUIRED|\bReset required\b|GPU marked for reset",
                                  re.IGNORECASE), "RESET_GPU"),
    ("gsp_timeout", lazyre.compile(r"Heartbeat timed out|GSP task watchdog timeout|"
                               r"waiting for RPC (?:response )?from (?:GPU\d+ )?GSP|GSP core unresponsive|"
                               r"GSP-RM unresponsive|_kgspLogRpcTimeout|_kgspLogXid119|"
                               r"_issueRpc\w*: rpc\w+ (?:failed|timedout)", re.IGNORECASE), "RESET_GPU"),
    ("gsp_crash", lazyre.compile(r"GSP-CrashCat Report|kgspHealthCheck|GSP crashed|IRQSTAT_FATAL_ERROR", re.IGNORECASE),
     "RESET_GPU"),
    ("memsys_error", lazyre.compile(r"Memory Subsystem Error detected|memory subsystem timeout", re.IGNORECASE),
     "RESET_GPU"),
    ("pmu_halted", lazyre.compile(r"PMU has halted", re.IGNORECASE), "RESET_GPU"),
    # an uncorrected ECC error in a GPU engine's own memory (GSP falcon IMEM/DMEM/caches), reported
    # without an Xid line (kernel_gsp_ecc_gb100.c kgspEccServiceUncorrError: `..._UNCORRECTED_ERR_<RAM>
    # PENDING`), and the driver's other wordings of one
    ("ecc_uncorrected", lazyre.compile(r"ECC_STATUS_UNCORRECTED|EccServiceUncorrError|\bUNCORRECTED[ _]ECC\b|"
                                   r"\buncorrect(?:ed|able) ECC error", re.IGNORECASE), "RESET_GPU"),
    ("nvlink_discovery_failed",
     lazyre.compile(r"NVRM: (?:GPU\d+ )?knvlink\w*.*\bfail(?:ed)?\b|NVRM: .*NVLink.*(?:training|discovery).*fail", re.IGNORECASE),
     "WORKFLOW_NVLINK_ERR"),
    ("driver_assert", lazyre.compile(r"Assertion failed|nvAssert\w*Failed", re.IGNORECASE), ""),
    ("rm_error", lazyre.compile(r"\bNV_ERR_[A-Z_]+"), ""),
)

# Driver faults: the driver stack itself is broken (graded by gpu.driver)
DRIVER_FAULTS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("no_adapter", lazyre.compile(r"No NVIDIA (?:graphics adapter|GPU|devices?|PCI devices) (?:probed|found)",
                              re.IGNORECASE),
     "the nvidia kernel module found no GPU to drive"),
    ("probe_not_called", lazyre.compile(r"probe routine was not called for (?P<n>\d+) device", re.IGNORECASE),
     "another driver (nouveau, vfio) owns the GPUs, so the nvidia module did not bind them"),
    ("api_mismatch", lazyre.compile(r"API mismatch: the client has the version (?P<client>\S+?),? but"
                                r"(?:\s+this kernel module has the version)?\s*(?P<kernel>\d+(?:\.\d+)+)?", re.IGNORECASE),
     "the user-space driver and the loaded kernel module are different versions"),
    ("unsupported_gpu", lazyre.compile(r"installed in this system is not supported by the|"
                                   r"is not supported by the NVIDIA \S+ driver release", re.IGNORECASE),
     "the installed driver branch does not support this GPU"),
    ("module_symbols", lazyre.compile(r"nvidia\S*: Unknown symbol", re.IGNORECASE),
     "the nvidia kernel module does not match the running kernel (unknown symbols)"),
    ("firmware_missing", lazyre.compile(r"No firmware image found|GSP firmware image version mismatch|"
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
    implied: bool = False  # not printed: the cause a later Xid names (`caused by previous Xid N`)
    uuid: str = ""  # the GPU (or MIG) UUID a reporter other than the driver names it by
    reporter: str = ""  # "" for the driver; REPORTER for the device plugin (which names no PCI address)

    @property
    def device(self) -> str:
        """The GPU the event is about: its PCI address, else its UUID ("" when neither is known)."""
        return self.pci or self.uuid


@dataclass
class DriverFault:
    kind: str
    line: Line
    meaning: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class KernelLog:
    lines: int = 0  # lines in the log  # pragma: no mutate (parse always sets it)
    nvrm: int = 0  # lines from the NVIDIA driver
    stamped: bool = False  # pragma: no mutate (parse always sets it): lines carry kernel-log time stamps
    events: list[XidEvent] = field(default_factory=list)
    faults: list[KernelFault] = field(default_factory=list)  # GPU faults the driver reports without an Xid
    hardware: list[KernelFault] = field(default_factory=list)  # the kernel's PCIe, machine-check and SXid reports
    driver_faults: list[DriverFault] = field(default_factory=list)
    unparsed: list[Line] = field(default_factory=list)  # NVRM lines naming an Xid in a layout not known
    unread: list[Line] = field(default_factory=list)  # NVRM lines at the driver's error level no rule reads
    gpus: dict[str, dict[str, Any]] = field(default_factory=dict)  # pci -> {uuid, serial, index}
    reset_notes: dict[str, list[Line]] = field(default_factory=dict)  # pci -> "needs to be reset" lines
    module_version: str = ""
    module_line: str = ""  # the NVRM line that names it
    tool_errors: list[str] = field(default_factory=list)  # dmesg/journalctl's own complaints
    hosts: list[str] = field(default_factory=list)
    excerpt: bool = False  # pragma: no mutate (parse always sets it): elided or grep-filtered
    filter: list[str] = field(default_factory=list)
    plugin_lines: int = 0  # health-check lines of the Kubernetes device plugin
    plugin_notes: list[str] = field(default_factory=list)  # its configuration and health-check state
    plugin_marked: dict[str, Line] = field(default_factory=dict)  # device -> `device marked unhealthy` line


def _attribution(attr: str) -> tuple[str, str]:
    """The PCI address and MIG attribution inside `Xid (...)`: a masked address is kept as
    printed (lower case), an attribution with no address at all as its text."""
    am = _ATTR_PCI.search(attr)
    pci = pci_id(am.group("pci")) if am else attr.strip().lower()
    gi, ci = _ATTR_GI.search(attr), _ATTR_CI.search(attr)
    mig = (f"GPU-I:{gi.group('gi')}" + (f" GPU-CI:{ci.group('ci')}" if ci else "")) if gi else ""
    return pci, mig


def parse_xid(msg: str, line: Line) -> XidEvent | None:
    """One NVRM Xid message -> XidEvent (None when the message is not an Xid report)."""
    m = _XID.search(msg)
    if m is not None:
        pci, mig = _attribution(m.group("attr"))
    else:
        m = _XID_BARE.search(msg)
        if m is None:
            return None
        pci, mig = "", ""
    ev = XidEvent(xid=int(m.group("code")), pci=pci, line=line, text=(m.group("rest") or "").strip(), mig=mig)
    cm = _CAUSED.search(ev.text)
    if cm:
        ev.caused_by = int(cm.group("xid"))
        ev.text = ev.text[:cm.start()].rstrip(" ,")
    pm = _PID_NAME.match(ev.text)
    if pm:
        ev.pid = pm.group("pid").strip("'")  # pragma: no mutate (a pid is digits or <unknown>: no other char to strip)
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
    """Xid 154: the recovery action the driver asks for (`... to 0x2 (Node Reboot Required)`);
    the code is read from the number, else from the action's name."""
    rm = _RECOVERY.search(ev.text)
    if rm:
        ev.recovery = rm.group("what").strip()
        code = rm.group("code")
        ev.recovery_code = int(code, 0) if code else RECOVERY_NAMES.get(ev.recovery.lower())


@dataclass
class _Reader:
    """Reads the driver's and the kernel's lines of one kernel log, in order, into `log`."""

    doc: Doc
    log: KernelLog
    last_gpu_at: str = ""  # the PCI address of the last `NVRM: GPU at ...` line (its serial follows)
    named: tuple[str, int] = ("", 0)  # pragma: no mutate (no address: never used): GPU a multi-line message names
    hosts: dict[str, None] = field(default_factory=dict)
    hw: kernel_hw.HwReader = field(default_factory=kernel_hw.HwReader)
    plugin: PluginReader = field(default_factory=lambda: PluginReader())
    block: int = 0  # runs of NVRM lines one right after the other, counted
    block_end: int = -2  # pragma: no mutate (any below -1: no run yet): the number of the run's last line
    read_blocks: set[int] = field(default_factory=set)  # runs holding a line a rule read
    candidates: list[tuple[int, Line, bool]] = field(default_factory=list)  # (run, unread error line, RM shape)

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
        if "NVRM" in raw:
            self._track_run(line.n)
        msg = line.text.strip()
        if not msg:
            return
        if line.host:
            self.hosts.setdefault(line.host)
        if "Xid" in msg and self._xid(msg, line):
            self.read_blocks.add(self.block)
            return
        if self.plugin.read(msg, line, log):
            return
        if not _DRIVER_LINE.search(msg):
            if not self.hw.read(msg, line) and _TOOL_ERROR.search(msg) and len(log.tool_errors) < 5:
                log.tool_errors.append(msg)
            return
        self._driver_line(msg, line, "NVRM" in raw)

    def _driver_line(self, msg: str, line: Line, nvrm: bool) -> None:
        """A driver line that is no Xid: a fault, or (an NVRM line at error level) a candidate
        unread error."""
        nm = _NAMED_GPU.search(msg)
        if nm:
            self.named = (pci_id(nm.group("pci")), line.n)
        if _fault(self.log, msg, line, self._named(line)):
            self.read_blocks.add(self.block)
            return
        shape = error_shape(msg)
        if shape is not None and nvrm:
            self.candidates.append((self.block, line, shape))

    def _track_run(self, n: int) -> None:
        """Count runs of driver lines: a line that does not follow the last one directly (another
        line, a blank line or an identity line between) starts a new run."""
        if n != self.block_end + 1:
            self.block += 1
        self.block_end = n

    def unread(self) -> list[Line]:
        """The error lines no rule read, less the lines of a multi-line kernel-interface message
        (a run of NVRM lines, one after the other, without a function prefix) of which another
        line was read: `The NVIDIA GPU ...` / `(PCI ID: ...) installed in this system has` /
        `fallen off the bus ...` is one message."""
        return [line for block, line, rm in self.candidates if rm or block not in self.read_blocks]

    def _xid(self, msg: str, line: Line) -> bool:
        """An Xid report (True), an NVRM line naming an Xid in a layout not known (kept, True),
        or another line (False)."""
        ev = parse_xid(msg, line)
        if ev is not None:
            self.log.events.append(ev)
            if ev.gpu is not None and ev.pci:
                self.log.gpus.setdefault(ev.pci, {}).setdefault("index", ev.gpu)
            return True
        if "NVRM" in msg and _XID_WORD.search(msg):
            self.log.unparsed.append(line)
            return True
        return False

    def _named(self, line: Line) -> str:
        """The GPU a continuation of a multi-line driver message is about ("" when none)."""
        pci, n = self.named
        return pci if pci and 0 <= line.n - n <= NAMED_GPU_REACH else ""  # pragma: no mutate (0: the naming line has its address)

    def _identity(self, raw: str) -> bool:
        """A GPU's UUID, its board serial or the module version; False for any other line."""
        log = self.log
        gm = _GPU_AT.search(raw) if "GPU at" in raw else None
        # (read on, an identity line would match no fault pattern: its True only saves the peeling)
        if gm:
            self.last_gpu_at = pci_id(gm.group("pci"))
            log.gpus.setdefault(self.last_gpu_at, {})["uuid"] = gm.group("uuid")
            return True  # pragma: no mutate (equivalent, see above)
        sm = _SERIAL.search(raw) if "Serial Number" in raw else None
        if sm:
            if self.last_gpu_at:
                log.gpus.setdefault(self.last_gpu_at, {})["serial"] = sm.group("serial")
            return True  # pragma: no mutate (equivalent, see above)
        mm = _MODULE.search(raw) if "Kernel Module" in raw else None
        if mm:
            log.module_version = mm.group("v") or mm.group("v2") or log.module_version
            log.module_line = raw.strip()
            return True  # pragma: no mutate (equivalent, see above)
        return False


REPORTER = "k8s-device-plugin"
PLUGIN_DETECT = ("XidCriticalError", "device marked unhealthy", "Processing event")
# NVML event types the device plugin skips that are a GPU fault: event type -> fault kind
PLUGIN_EVENT_FAULTS = {plugin.EVENT_DBE: "nvml_dbe_event", plugin.EVENT_SBE: "nvml_sbe_event"}


@dataclass
class PluginReader:
    """Reads the Kubernetes device plugin's health-check lines into Xid events and faults. An
    Xid event it is processing is held until the line that acts on it (`XidCriticalError`)
    replaces it, so one Xid is one event."""

    pending: XidEvent | None = None
    marked: dict[str, Line] = field(default_factory=dict)  # device -> `device marked unhealthy` line
    named: set[str] = field(default_factory=set)  # devices an Xid or an unhealthy reason names ("": all or any)

    def read(self, msg: str, line: Line, log: KernelLog) -> bool:
        rec = plugin.read(msg)
        if rec is None:
            return False
        log.plugin_lines += 1
        if rec.kind in ("xid", "event"):
            self._xid(rec, line, log)
        elif rec.kind == "nvml_event":
            kind = PLUGIN_EVENT_FAULTS.get(rec.event_type or 0)
            if kind:
                log.faults.append(KernelFault(kind, "", line, detail=rec.text, device=REPORTER))
        elif rec.kind == "unhealthy":
            dev = rec.uuid or rec.device or ("all devices" if rec.all_devices else "")
            self.named.add("" if rec.all_devices else rec.device)
            log.faults.append(KernelFault("plugin_unhealthy", "", line, detail=rec.detail, device=dev))
        elif rec.kind == "marked":
            self.marked.setdefault(rec.device, line)
        else:
            log.plugin_notes.append(rec.text)
        return True

    def _xid(self, rec: plugin.PluginRecord, line: Line, log: KernelLog) -> None:
        if not rec.xid:
            log.plugin_notes.append(rec.text)  # Xid=0: a wait that returned no event
            return
        ev = XidEvent(xid=rec.xid, pci="", line=line, text=rec.text, uuid=rec.uuid, reporter=REPORTER,
                      gpu=int(rec.device) if rec.device.isdigit() else None)
        if rec.kind == "event":
            if rec.skipped:
                log.events.append(ev)  # an Xid the plugin is told to skip: it happened all the same
                return
            self.flush(log)
            self.pending = ev
            return
        if self.pending is not None and self.pending.xid == ev.xid:
            self.pending = None  # the line that acts on the event it was processing
        self.named.add(rec.device)  # ("": all devices)
        log.events.append(ev)

    def flush(self, log: KernelLog) -> None:
        """An event processed and never acted on (the next event came, or the log ended) is an
        Xid event still."""
        if self.pending is not None:
            log.events.append(self.pending)
            self.named.add("")
            self.pending = None

    def finish(self, log: KernelLog) -> None:
        """The end of the log: the pending event; a device marked unhealthy that no Xid or reason
        in the log names (nor one about any device) is a fault of its own."""
        self.flush(log)
        log.plugin_marked = dict(self.marked)
        for dev, line in self.marked.items():
            if dev not in self.named and "" not in self.named:
                log.faults.append(KernelFault("plugin_unhealthy", "", line, detail="the reason is not in the log",
                                              device=dev))


def _fault(log: KernelLog, msg: str, line: Line, named: str = "") -> bool:
    """A driver message that is no Xid: a driver fault, a GPU fault, or a note that a GPU needs
    a reset (True), or none of them (False). `named`: the GPU an earlier line of the same
    multi-line message named."""
    for kind, pat, meaning in DRIVER_FAULTS:
        dm = pat.search(msg)
        if dm:
            detail = {k: v for k, v in dm.groupdict().items() if v}
            log.driver_faults.append(DriverFault(kind, line, meaning, detail))
            return True
    pm = _PCI_ANY.search(msg)
    pci = pci_id(pm.group("pci")) if pm else named
    for kind, pat, action in GPU_FAULTS:
        if pat.search(msg):
            gm = _GPU_N.search(msg)
            log.faults.append(KernelFault(kind, pci, line, action, gpu=int(gm.group("n")) if gm else None))
            return True
    if _NEEDS_RESET.search(msg) and pci:
        log.reset_notes.setdefault(pci, []).append(line)
        return True
    return False


def error_shape(msg: str) -> bool | None:
    """Whether an NVRM line is at the driver's error level by its shape: True for an RM print
    (a function-name prefix), False for a kernel-interface line that is not one of the
    informational ones, None for a line that is no error (informational, or no NVRM line)."""
    if _RM_FUNCTION_NO_COLON.match(msg) and not _NVRM_VERSION.match(msg):
        return True
    m = _NVRM_REST.search(msg)
    if m is None:
        return None
    rest = m.group("rest")
    if not rest.strip() or _NVRM_INFORMATIONAL.match(rest):
        return None
    if _RM_FUNCTION.match(rest):
        return True
    dev = _DEV_PREFIX.match(rest)
    if dev and _NVRM_INFORMATIONAL.match(rest[dev.end():]):
        return None
    return False


def _resolve_indexes(log: KernelLog) -> None:
    """GPU indexes learned from the log ("GPU5" in an Xid 119) name the PCI address of events
    and faults that only gave an index, and the index of events that only gave an address."""
    by_index = {g["index"]: pci for pci, g in log.gpus.items() if "index" in g}
    by_uuid = {g["uuid"]: pci for pci, g in log.gpus.items() if "uuid" in g}
    for ev in log.events:
        if not ev.pci and ev.uuid:
            ev.pci = by_uuid.get(ev.uuid, "")
        if ev.gpu is None:
            ev.gpu = log.gpus.get(ev.pci, {}).get("index")
    for f in log.faults:
        if not f.pci and f.gpu is not None:
            f.pci = by_index.get(f.gpu, "")


def parse(doc: Doc) -> KernelLog:
    """Kernel log document -> Xid events, Xid-less GPU faults, kernel hardware reports, driver
    faults, GPU identities."""
    log = KernelLog(lines=doc.count(), excerpt=doc.excerpt, filter=list(doc.filter))
    head = [ln for ln in doc.head(400) if ln.text.strip()]  # pragma: no mutate (a sample size for a half-share)
    log.stamped = bool(head) and sum(1 for ln in head if ln.stamped) * 2 >= len(head)
    hits = {(h.start, h.n): h for h in doc.scan(TOOL_NEEDLES, ends=TOOL_ENDS)}
    hits.update(((h.start, h.n), h) for h in doc.scan(NEEDLES))
    reader = _Reader(doc, log)
    for k in sorted(hits):
        reader.read(hits[k])
    reader.plugin.finish(log)
    log.unread = reader.unread()
    log.hardware = reader.hw.faults
    _resolve_indexes(log)
    log.hosts = list(reader.hosts)
    return log


# ---------------------------------------------------------------------------------------------
# Recognising a kernel log

_KERNEL_LAYERS = frozenset({"dmesg", "dmesg-ctime", "kmsg", "facility", "printk-level"})  # `kernel: ` sets ident
_KERNEL_MSG = lazyre.compile(r"^(?:NVRM: |nvidia(?:-\w+)?: |pcieport |mlx5_core |ACPI|PCI: |pci \d|mce: |EDAC |"
                         r"(?:\{\d+\})?\[Hardware Error\]|Memory failure: |"
                         r"[\w-]+ \d{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d(?::pcie\d+)?: )")
# one line of these is a kernel log by itself: a report no other tool prints
_KERNEL_REPORT = lazyre.compile(r"SXid \(PCI:|mce: Uncorrected hardware memory error|Memory failure: 0x|PCIe Bus Error: severity=|error (?:message )?received(?: from|:) |"
                            r"mce: \[Hardware Error\]|\[Hardware Error\]:\s+event severity: |pciehp: Slot\(|"
                            r"DPC: containment event|EDAC \w*\s*MC\d+: \d+ [UC]E ")


def detect(doc: Doc) -> bool:
    """A kernel log: NVRM lines, or mostly lines framed as kernel messages."""
    total = kernel = 0
    for ln in doc.head(2000):  # pragma: no mutate (a bound on blank lines; 400 text lines end the loop first)
        msg = ln.text.strip()
        if not msg:
            continue
        rm_no_colon = _RM_FUNCTION_NO_COLON.match(msg) and not _NVRM_VERSION.match(msg)
        if msg.startswith("NVRM:") or rm_no_colon or _XID.search(msg) or _KERNEL_REPORT.search(msg) or plugin.shows_plugin(msg):
            return True
        total += 1
        if ln.ident == "kernel" or set(ln.layers) & _KERNEL_LAYERS:
            kernel += 1
        elif ln.layers and _KERNEL_MSG.match(msg):
            kernel += 1
        if total >= 400:
            break
    return (kernel >= 3 and kernel * 2 >= total) or _plugin_health_lines(doc)


def _plugin_health_lines(doc: Doc) -> bool:
    """A device plugin's log whose health-check lines come after its first lines (start-up)."""
    return any(plugin.shows_plugin(doc.peel_hit(h).text) for h in doc.scan(PLUGIN_DETECT, ends=DETECT_ENDS))


# Words `detect` cannot say yes without when no line of the head is framed as a log line: NVRM,
# an Xid, a report of `_KERNEL_REPORT`, the device plugin's lines (`plugin.NEEDLES`), lower-cased.
_COULD = ("nvrm", "xid", "mce: ", "memory failure: ", "pcie bus error: ", "received", "[hardware error]", "pciehp: ",
          "dpc: containment", "edac ", "unhealthy", "processing event", "skipping event", "healthcheck", "health check",
          "ignoring event for unexpected device")


def could(doc: Doc) -> bool:
    """A cheap necessary condition of `detect`: a head line framed as a log line (which may be
    a kernel one), one of its words in the head, or a device plugin's line where it scans."""
    head = doc.head(2000)  # pragma: no mutate (the lines detect reads)
    folded = doc.head_folded(2000)
    return (any(ln.layers or ln.ident for ln in head) or any(w in folded for w in _COULD)
            or bool(doc.scan(PLUGIN_DETECT, ends=DETECT_ENDS)))


FORMATS = [
    Format("kernel-log", detect=detect, could=could, priority=40,
           description="kernel log: dmesg (raw, -T, --ctime, iso, --decode), journalctl -k (any short "
                       "format), syslog / kern.log, /dev/kmsg, with any host, srun or container framing"),
]
PARSERS = [ParserSpec("kernel-log", parse)]

__all__ = ["DRIVER_FAULTS", "DriverFault", "FORMATS", "GPU_FAULTS", "KernelFault", "KernelLog", "NEEDLES",
           "PARSERS", "RECOVERY_NAMES", "XidEvent", "detect", "parse", "parse_xid"]
