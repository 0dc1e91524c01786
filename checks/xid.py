"""gpu.xid: NVIDIA Xid events, GPU faults without an Xid and the kernel's hardware reports in the
kernel log, graded by finding codes.

Facts come from `preflight.parsers.kernel_log` (every kernel-log framing, Xids, Xid-less GPU
faults, PCIe / machine-check / SXid reports, the GPU identity map). Each Xid burst gets the code
of its catalog bucket (`xid_catalog.BUCKET_CODES`, Xid 144-150 by their Fatal / Non-fatal word,
Xid 154 by the recovery action it prints); each fault the code of its kind (`FAULT_CODES`); a
code's status is the policy's (`checks/policy.toml`). Sympathetic Xids are tied to their
cause: by the driver's own `caused by previous Xid N` (a cause the log does not show is taken
from that annotation), or (45 after another Xid, 43 after 13, 94/95/63 after 48) by time on the
same GPU; they are graded with it. An Xid 154 that sets the recovery action back to None
clears the faults before it on that GPU. Floods of the same Xid on one GPU are grouped into
bursts.

What the log cannot show is not graded: a log grep-filtered for something else, or one in which
the driver never bound a GPU, says so (SKIP) instead of a PASS.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from preflight import policy
from preflight.findings import Findings
from preflight.framing import Line, filter_allows, parse_iso, syslog_year_fix
from preflight.model import Result, Status
from preflight.parsers.base import short
from preflight.parsers.kernel_log import REPORTER, KernelFault, KernelLog, XidEvent
from preflight.probes import Probe
from preflight.registry import Check, CheckContext, Input, register

from . import xid_catalog as cat

PROBE = Probe.of(
    "kernel-log",
    ["dmesg", "-T"],
    ["journalctl", "-k", "--no-pager", "-o", "short-iso"],
    timeout=15,
)

FAIL = Status.FAIL.value
INFO = cat.INFO
IGNORED = "ignored"

# Fault kind (kernel_log / kernel_hw) -> its policy code
FAULT_CODES: dict[str, str] = {
    "fallen_off_bus": "gpu.xid/fallen-off-bus",
    "gpu_lost": "gpu.xid/gpu-lost",
    "adapter_init_failed": "gpu.xid/adapter-init-failed",
    "power_cables": "gpu.xid/check-mechanicals",
    "wpr2_up": "gpu.xid/wpr2-up",
    "reset_required": "gpu.xid/reset-required",
    "gsp_timeout": "gpu.xid/gsp-timeout",
    "gsp_crash": "gpu.xid/gsp-crash",
    "memsys_error": "gpu.xid/memory-subsystem-error",
    "pmu_halted": "gpu.xid/pmu-halted",
    "ecc_uncorrected": "gpu.xid/uncorrected-ecc",
    "nvlink_discovery_failed": "gpu.xid/nvlink-training-failed",
    "driver_assert": "gpu.xid/driver-assert",
    "rm_error": "gpu.xid/driver-error-status",
    "pcie_fatal": "gpu.xid/pcie-fatal",
    "pcie_nonfatal": "gpu.xid/pcie-nonfatal",
    "pcie_corrected": "gpu.xid/pcie-corrected",
    "pcie_recovery_failed": "gpu.xid/pcie-recovery-failed",
    "pcie_link_down": "gpu.xid/pcie-link-down",
    "mce_uncorrected": "gpu.xid/machine-check-uncorrected",
    "mce_corrected": "gpu.xid/machine-check-corrected",
    "sxid_fatal": "gpu.xid/sxid-fatal",
    "sxid_nonfatal": "gpu.xid/sxid-nonfatal",
    "sxid_correctable": "gpu.xid/sxid-correctable",
    "sxid_other": "gpu.xid/sxid-unclassified",
    "plugin_unhealthy": "gpu.xid/device-marked-unhealthy",
    "nvml_dbe_event": "gpu.xid/nvml-dbe-event",
    "nvml_sbe_event": "gpu.xid/nvml-sbe-event",
}
# faults the Kubernetes device plugin reports (kernel_log.REPORTER): the GPU by UUID, or no GPU named
PLUGIN_KINDS = frozenset({"plugin_unhealthy", "nvml_dbe_event", "nvml_sbe_event"})
PLUGIN_REMEDY = ("the device plugin never marks a GPU healthy again by itself: once the GPU is checked (or reset), "
                 "restart the device plugin pod so the node offers it again")
# the fault a resolved report becomes (the kernel recovered the device, the link came back)
RESOLVED_CODES = {"pcie_fatal": "gpu.xid/pcie-recovered", "pcie_nonfatal": "gpu.xid/pcie-recovered",
                  "pcie_link_down": "gpu.xid/pcie-link-bounced"}
CORRECTED_OTHER = "gpu.xid/pcie-corrected-other"
# Faults the NVIDIA driver reports about one GPU: an Xid needing a reset or reboot on that GPU
# already covers them (they are its symptoms: the fallen-off line of an Xid 79, the GSP banner
# of an Xid 119); one without an address is covered by any such finding.
GPU_KINDS = frozenset({"fallen_off_bus", "gpu_lost", "adapter_init_failed", "power_cables", "wpr2_up", "reset_required",
                       "gsp_timeout", "gsp_crash", "memsys_error", "pmu_halted", "nvlink_discovery_failed",
                       "driver_assert", "rm_error", "ecc_uncorrected"})
# what a GPU that fell off the bus also makes the driver print about it
GONE_SYMPTOMS = frozenset({"gpu_lost", "adapter_init_failed", "reset_required", "gsp_timeout", "driver_assert",
                           "rm_error"})
# PCIe devices on the training data path: NVIDIA (GPUs, NVSwitches) and Mellanox (RDMA NICs),
# by PCI-SIG vendor id and by the Linux driver that printed the line
DATA_PATH_VENDORS = ("10de", "15b3")
DATA_PATH_DRIVERS = frozenset({"nvidia", "nvidia-nvswitch", "mlx5_core", "mlx4_core"})
UNPARSED_CODE = "gpu.xid/xid-layout-unknown"
PRODUCER = "NVIDIA driver"
DRIVER_NOT_BOUND = "gpu.xid/driver-not-bound"
LOG_FILTERED = "gpu.xid/log-filtered"


def _seconds_between(a: Line, b: Line) -> float | None:
    if a.time is not None and b.time is not None and (a.time.tzinfo is None) == (b.time.tzinfo is None):
        return abs((b.time - a.time).total_seconds())
    if a.mono is not None and b.mono is not None:
        return abs(b.mono - a.mono)
    return None


def _within(a: Line, b: Line, window_s: float) -> bool:
    gap = _seconds_between(a, b)
    return gap is None or gap <= window_s


def _with_implied_causes(events: list[XidEvent]) -> list[XidEvent]:
    """The events, with the cause an Xid names (`caused by previous Xid N`) added just before it
    where the log does not show that Xid earlier on the same GPU (an excerpt, a rotated log)."""
    out: list[XidEvent] = []
    seen: set[tuple[str, int]] = set()
    for ev in events:
        n = ev.caused_by
        if n is not None and (ev.device, n) not in seen:
            out.append(XidEvent(xid=n, pci=ev.pci, line=ev.line, gpu=ev.gpu, implied=True, uuid=ev.uuid,
                                reporter=ev.reporter,
                                text=f"named by a later Xid {ev.xid}: caused by previous Xid {n}"))
            seen.add((ev.device, n))
        out.append(ev)
        seen.add((ev.device, ev.xid))
    return out


def _link_sympathetic(events: list[XidEvent], window_s: float) -> dict[int, int]:
    """Cause of each sympathetic Xid (by position in `events`): the driver's own annotation,
    else the latest earlier Xid on the same GPU that can cause it, within the window."""
    caused: dict[int, int] = {}
    latest: dict[str, dict[int, tuple[int, XidEvent]]] = {}  # pci -> xid -> (position, event)
    for i, ev in enumerate(events):
        seen = latest.setdefault(ev.device, {})
        if ev.caused_by is not None:
            caused[i] = ev.caused_by
        elif ev.xid in cat.SYMPATHETIC:
            causes = cat.SYMPATHETIC[ev.xid]
            cands = [(p, e) for x, (p, e) in seen.items() if x != ev.xid and (causes is None or x in causes)]
            if cands:
                pos, prev = max(cands, key=lambda pe: pe[0])
                if _within(prev.line, ev.line, window_s):
                    caused[i] = caused.get(pos, prev.xid)
        seen[ev.xid] = (i, ev)
    return caused


def _before(t: datetime | None, since: datetime | None) -> bool:
    """True when the event time is known and earlier than `since`."""
    if t is None or since is None:
        return False
    if (t.tzinfo is None) != (since.tzinfo is None):
        if t.tzinfo is None:
            t = t.astimezone()  # a naive kernel time is the node's local time
        else:
            t = t.astimezone().replace(tzinfo=None)
    return t < since


def _dated(line: Line, reference: datetime) -> Line:
    """A syslog time without a year put into the year of the reference."""
    if line.time is not None and line.time.year == 1900:
        line.time = syslog_year_fix(line.time, reference)
    return line


# ---------------------------------------------------------------------------------------------
# Classification


@dataclass
class Group:
    """A burst of the same Xid on one GPU (a flood counts once)."""

    first: XidEvent
    last: XidEvent
    count: int = 1
    severity: str = ""  # the code's status, INFO (sympathetic, cleared) or IGNORED
    action: str = ""
    caused_by: int | None = None
    code: str = ""
    end: int = 0  # pragma: no mutate (always given): position of the last event in the event list
    cleared: bool = False  # an Xid 154 later set the GPU's recovery action back to None

    @property
    def key(self) -> tuple[int, str]:
        return self.first.xid, self.first.device


def _group(events: list[XidEvent], caused: dict[int, int], window_s: float) -> list[Group]:
    groups: list[Group] = []
    open_: dict[tuple[int, str, int | None, str, bool | None, int | None], Group] = {}
    for i, ev in enumerate(events):
        k = (ev.xid, ev.device, caused.get(i), ev.unit, ev.fatal, ev.recovery_code)
        g = open_.get(k)
        if g is not None and _within(g.last.line, ev.line, window_s):
            g.last, g.end = ev, i
            g.count += 1
            continue
        g = Group(first=ev, last=ev, caused_by=caused.get(i), end=i)
        groups.append(g)
        open_[k] = g
    return groups


def code_of(ev: XidEvent, fail_codes: set[int]) -> tuple[str, str]:
    """(action, policy code) of one Xid event: a site's xid.fail list, the NVLink5 word, the
    Xid 154 recovery action, else the catalog bucket; an Xid no catalog lists is not recognised."""
    if ev.xid in fail_codes:
        return "RESET_GPU", cat.SITE_FAIL
    if ev.xid in cat.NVLINK5_CODES:
        return "WORKFLOW_NVLINK5_ERR", cat.NVLINK5_CODES_BY_WORD[ev.fatal]
    if ev.xid == 154:
        return cat.recovery(ev.recovery_code)
    info = cat.lookup(ev.xid)
    if info is None:
        return "UNKNOWN", cat.NOT_IN_CATALOG
    return info.bucket, cat.BUCKET_CODES.get(info.bucket, cat.NOT_IN_CATALOG)


def _classify(g: Group, fail_codes: set[int], ignore_codes: set[int]) -> None:
    g.action, g.code = code_of(g.first, fail_codes)
    if g.first.xid in ignore_codes:
        g.severity = IGNORED
        return
    g.severity = policy.status(g.code).value
    if g.caused_by is not None and g.severity != FAIL and g.first.xid != 154:
        g.severity = INFO  # graded with the Xid that caused it


def _clear_recovered(groups: list[Group]) -> None:
    """An Xid 154 that sets a GPU's recovery action back to None says the GPU needs nothing any
    more: the failing bursts before it on that GPU are cleared (kept as context)."""
    for back in groups:
        if back.first.xid != 154 or back.first.recovery_code != cat.RECOVERY_NONE:
            continue
        for g in groups:
            # (`<`: only the Xid 154 itself ends where it does, and it is not a failure)
            if g.first.device == back.first.device and g.end < back.end and g.severity == FAIL:  # pragma: no mutate
                g.severity, g.cleared = INFO, True


# ---------------------------------------------------------------------------------------------
# The graded log


@dataclass
class FaultGroup:
    """The reports of one fault kind about one device (or GPU index)."""

    kind: str
    code: str
    first: KernelFault
    severity: str
    count: int = 0
    details: list[str] = field(default_factory=list)


@dataclass
class _Graded:
    """The log's Xid bursts and faults inside the window, classified."""

    log: KernelLog
    since: datetime | None
    dropped: int  # events before the window
    groups: list[Group]
    faults: list[FaultGroup]
    covered: list[KernelFault]  # GPU faults an Xid on their GPU already stands for
    fail_codes: set[int]
    ignore_codes: set[int]
    bursts: dict[tuple[int, str], int]  # (xid, pci) -> bursts

    def of(self, severity: str) -> list[Group]:
        return [g for g in self.groups if g.severity == severity]

    @property
    def fail_pcis(self) -> set[str]:
        return {g.first.device for g in self.of(FAIL)}

    def label(self, pci: str, gpu: int | None = None) -> str:
        """A GPU by its PCI address, or its UUID where a reporter named it so, and its index."""
        idx = self.log.gpus.get(pci, {}).get("index", gpu)
        if not pci:
            return f"GPU{gpu}" if gpu is not None else "a GPU"
        return (pci if _is_uuid(pci) else f"GPU {pci}") + (f" (GPU{idx})" if idx is not None else "")


def _since(ctx: CheckContext) -> datetime | None:
    since = ctx.options.xid_since or ctx.options.extra.get("xid_since")
    if isinstance(since, str):
        since = parse_iso(since)
    return since if isinstance(since, datetime) else None


def _codes(profile_value: Any) -> set[int]:
    out: set[int] = set()
    for v in profile_value or []:
        try:
            out.add(int(v))
        except (TypeError, ValueError):
            continue
    return out


def _data_path(f: KernelFault, gpus: dict[str, dict[str, Any]]) -> bool:
    """The device a PCIe report names is a GPU, NVSwitch or RDMA NIC."""
    return f.device in DATA_PATH_DRIVERS or f.vendor.startswith(DATA_PATH_VENDORS) or f.pci in gpus


def fault_code(f: KernelFault, gpus: dict[str, dict[str, Any]]) -> str:
    """The policy code of one fault report."""
    if f.resolved and f.kind in RESOLVED_CODES:
        return RESOLVED_CODES[f.kind]
    if f.kind == "pcie_corrected" and not _data_path(f, gpus):
        return CORRECTED_OTHER
    return FAULT_CODES[f.kind]


def _covered(f: KernelFault, fail_pcis: set[str], gpu_faults: bool, gone: set[str]) -> bool:
    """A GPU fault an Xid (or, without an address, another finding) already stands for, or a
    symptom of its GPU having left the bus (`gone`: the GPUs that fell off it)."""
    if f.kind not in GPU_KINDS:
        return False
    if f.pci:
        return f.pci in fail_pcis or (f.pci in gone and f.kind in GONE_SYMPTOMS)
    return bool(fail_pcis) or gpu_faults


def _fault_groups(faults: Iterable[KernelFault], gpus: dict[str, dict[str, Any]]) -> list[FaultGroup]:
    """Reports grouped by (code, device), in the order first seen."""
    out: dict[tuple[str, str, int | None], FaultGroup] = {}
    for f in faults:
        code = fault_code(f, gpus)
        key = (code, f.pci, None if f.pci else f.gpu)
        g = out.get(key)
        if g is None:
            g = out[key] = FaultGroup(f.kind, code, f, policy.status(code).value)
        g.count += 1
        detail = f"SXid {f.number}" + (f" ({f.detail})" if f.detail else "") if f.number is not None else f.detail
        if detail and detail not in g.details:
            g.details.append(detail)
    return list(out.values())


def _graded(ctx: CheckContext, log: KernelLog) -> _Graded:
    since = _since(ctx)
    window = float(ctx.profile.get("xid.sympathetic_window_s", 60.0))  # pragma: no mutate (generic sets it)
    reference = since or datetime.now()
    events = _with_implied_causes([ev for ev in log.events if not _before(_dated(ev.line, reference).time, since)])
    faults_in = [f for f in [*log.faults, *log.hardware] if not _before(_dated(f.line, reference).time, since)]
    fail_codes = _codes(ctx.profile.get("xid.fail"))
    ignore_codes = _codes(ctx.profile.get("xid.ignore"))
    groups = _group(events, _link_sympathetic(events, window), window)
    bursts: dict[tuple[int, str], int] = {}
    for g in groups:
        _classify(g, fail_codes, ignore_codes)
        bursts[g.key] = bursts.get(g.key, 0) + 1
    _clear_recovered(groups)
    fail_pcis = {g.first.device for g in groups if g.severity == FAIL}
    gpu_faults = any(f.kind in GPU_KINDS and f.pci for f in faults_in)
    gone = {f.pci for f in faults_in if f.kind == "fallen_off_bus"}
    covered = [f for f in faults_in if _covered(f, fail_pcis, gpu_faults, gone)]
    kept = [f for f in faults_in if not _covered(f, fail_pcis, gpu_faults, gone)]
    dropped = len(log.events) - sum(1 for ev in events if not ev.implied)
    return _Graded(log, since, dropped, groups, _fault_groups(kept, log.gpus), covered, fail_codes,
                   ignore_codes, bursts)


# ---------------------------------------------------------------------------------------------
# Facts


def _time_fact(line: Line) -> str | None:
    return line.time.isoformat() if line.time is not None else None


def _mnemonic(code: int) -> str:
    info = cat.lookup(code)
    return info.mnemonic.split("/")[0].strip() if info else ""


def _event_fact(g: Group, gpus: dict[str, dict[str, Any]]) -> dict[str, Any]:
    ev = g.first
    fact: dict[str, Any] = {
        "xid": ev.xid, "pci": ev.pci, "gpu": ev.gpu, "time": _time_fact(ev.line), "uptime_s": ev.line.mono,
        "time_text": ev.line.time_text, "last_time": _time_fact(g.last.line), "count": g.count,
        "action": g.action, "severity": g.severity, "code": g.code, "mnemonic": _mnemonic(ev.xid),
        "text": ev.text, "caused_by": g.caused_by,
    }
    optional = {"pid": ev.pid, "name": ev.name, "mig": ev.mig, "host": ev.line.host, "recovery": ev.recovery,
                "uuid": ev.uuid or gpus.get(ev.pci, {}).get("uuid"), "implied": ev.implied, "cleared": g.cleared,
                "reporter": ev.reporter}
    fact.update({k: v for k, v in optional.items() if v})
    if ev.unit or ev.fatal is not None:
        fact.update(unit=ev.unit, fatal=ev.fatal, link=ev.link, registers=ev.registers)
    return fact


def _fault_fact(g: FaultGroup, gpus: dict[str, dict[str, Any]]) -> dict[str, Any]:
    f = g.first
    return {"kind": g.kind, "pci": f.pci, "gpu": gpus.get(f.pci, {}).get("index", f.gpu), "time": _time_fact(f.line),
            "time_text": f.line.time_text, "action": f.action, "severity": g.severity, "code": g.code,
            "count": g.count, "device": f.device, "detail": "; ".join(g.details), "text": f.line.text}


def _facts(gr: _Graded, run: Input) -> dict[str, Any]:
    log = gr.log
    counts: dict[str, dict[str, int]] = {}
    for g in gr.groups:
        if not g.first.implied:
            per = counts.setdefault(g.first.device, {})
            per[str(g.first.xid)] = per.get(str(g.first.xid), 0) + g.count
    optional: dict[str, Any] = {
        "hosts": log.hosts, "driver_module": log.module_version, "truncated": run.truncated,
        "excerpt": log.excerpt or bool(log.filter), "filter": log.filter,
        "unparsed": [ln.text for ln in log.unparsed[:5]],
        "unread": [ln.text for ln in log.unread[:20]], "unread_count": len(log.unread),
    }
    facts: dict[str, Any] = {
        "events": [_event_fact(g, log.gpus) for g in gr.groups],
        "counts": counts,
        "faults": [_fault_fact(g, log.gpus) for g in gr.faults],
        "gpus": log.gpus,
        "since": gr.since.isoformat() if gr.since else None,
        "dropped_before_since": gr.dropped,
        "source_command": run.cmdline,
    }
    facts.update({k: v for k, v in optional.items() if v})
    return facts


# ---------------------------------------------------------------------------------------------
# What the log cannot show

_SHOWN_BY = ("NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus", "kernel: NVRM: Xid 48")


def _not_gradable(ctx: CheckContext, run: Input, log: KernelLog) -> Result | None:
    """The result for a log that cannot show Xids (unreadable, empty, filtered with nothing
    else in it, not a kernel log), None when it can be graded."""
    cmd = run.cmdline
    base = {"events": [], "source_command": cmd}
    found = bool(log.events or log.faults or log.hardware)
    if run.rc not in (0, None) and log.nvrm == 0 and not found:
        return ctx.finding("gpu.xid/log-unreadable", f"cannot read the kernel log ({cmd} exited {run.rc})",
                           evidence=log.tool_errors[-3:] or [f"{cmd}: exit {run.rc}"],
                           remedy="run preflight as root (or with CAP_SYSLOG), or set kernel.dmesg_restrict=0 / "
                                  "add the user to the systemd-journal group", facts=base)
    if log.lines == 0:
        return ctx.finding("gpu.xid/log-empty", f"the kernel log is empty ({cmd}); Xids not checked",
                           evidence=["(no output)"],
                           remedy="check that the kernel ring buffer / journald keeps kernel messages on this node",
                           facts=base)
    if _filtered(log) and not found:
        return ctx.finding(LOG_FILTERED, _filtered_text(log), evidence=[f"command: {cmd}"],
                           facts={**base, "filter": log.filter},
                           remedy="capture the whole kernel log (`dmesg -T` or `journalctl -k`) to grade Xids")
    if not log.stamped and log.nvrm == 0 and not found:
        return ctx.finding("gpu.xid/not-a-kernel-log",
                           f"output of {cmd} is not a kernel log (no kernel time stamps, no NVRM lines)",
                           evidence=log.tool_errors[:3] or [f"{log.lines} line(s), none from the kernel"],
                           remedy=f"run `{cmd}` by hand and check its output", facts=base)
    return None


def _filtered(log: KernelLog) -> bool:
    return bool(log.filter) and not filter_allows(log.filter, _SHOWN_BY)


def _filtered_text(log: KernelLog) -> str:
    return f"kernel log excerpt filtered by grep {' / '.join(log.filter)}: NVIDIA driver lines not shown; " \
           "Xids not checked"


# ---------------------------------------------------------------------------------------------
# Remedies


def _is_uuid(device: str) -> bool:
    return device.startswith(("GPU-", "MIG-"))


def _reset_cmd(pci: str) -> str:
    if _is_uuid(pci):
        return f"`nvidia-smi -r -i {pci}`"
    return f"`nvidia-smi -r -i {pci}.0`" if pci else "`nvidia-smi -r -i <gpu>`"


_ACTION_REMEDIES: dict[str, str] = {
    "RESTART_BM": "reboot clears {what} on {label}; if it returns after the reboot, reseat or RMA the GPU",
    "WORKFLOW_XID_48": "reset {label} with {reset} (or reboot) to apply the row remap, then check "
                       "`nvidia-smi -q -d ROW_REMAPPER` (Remapping Failure: Yes means RMA)",
    "WORKFLOW_NVLINK_ERR": "{what} is an NVLink fault on {label}: check `nvidia-smi nvlink -s` and the fabric "
                           "manager, reset the GPU with {reset} or reboot; if links stay down, open a hardware case",
    "WORKFLOW_NVLINK5_ERR": "NVLink5 error ({what}) on {label}: reset the GPU with {reset} or reboot, per NVIDIA's "
                            "Xid 144-150 decode; then check `nvidia-smi nvlink -s`",
    "DRAIN_P2P": "{label} reports peer-to-peer unusable (Xid 154): reset the GPU with {reset} or reboot",
    "DRAIN_AND_RESET": "{label} asks to be drained and reset (Xid 154): reset it with {reset} once idle, then check "
                       "`nvidia-smi -q -d ROW_REMAPPER`",
    "RECOVER_IMEX_DOMAIN": "{label} cannot allocate fabric memory (Xid 154, Recover IMEX Domain): restart the IMEX "
                           "daemons of the NVLink domain, or reboot",
    "CHECK_MECHANICALS": "{label} runs without its auxiliary power (Xid 54): power off and connect the board's power "
                         "cables",
    "RESTART_VM": "restart the VM (or the node) to restore {label}'s secure session ({what})",
}
_DEFAULT_REMEDY = ("reset {label} with {reset} (no process may hold it) or reboot, drained until then; "
                   "if {what} recurs after the reset, run `dcgmi diag -r 3` and open a case")

_FAULT_REMEDIES: dict[str, str] = {
    "nvlink_discovery_failed": "NVLink discovery failed, so the NVLink fabric is not fully trained: check "
                               "`nvidia-smi nvlink -s` and the fabric manager log, then reboot; if it recurs, open a "
                               "hardware case",
    "adapter_init_failed": "the driver could not initialise {label}: reboot; if it persists, check the BIOS "
                           "(Above 4G decoding, Resizable BAR), reseat or RMA the GPU",
    "power_cables": "{label} runs without its auxiliary power: power off and connect the board's power cables",
    "wpr2_up": "a crash left {label}'s protected memory region (WPR2) up: only a power cycle or a PCIe bus reset "
               "clears it; cold-reboot the node",
    "gsp_timeout": "the GPU's GSP firmware stopped answering on {label}: reset the GPU with {reset} or reboot; if it "
                   "recurs, update the driver and open a case",
    "gsp_crash": "the GSP firmware of {label} crashed: reset the GPU with {reset} or reboot; collect "
                 "nvidia-bug-report.sh and open a case",
    "memsys_error": "{label}'s memory subsystem failed: reset the GPU with {reset} or reboot, then run "
                    "`dcgmi diag -r 3`",
    "pmu_halted": "{label}'s PMU halted: reset the GPU with {reset} or reboot",
    "ecc_uncorrected": "{label} reported an uncorrected ECC error in its own engine memory: reset the GPU with "
                       "{reset} or reboot, then run `dcgmi diag -r 3`; drain it if the error comes back",
    "reset_required": "the driver asks for a reset of {label}: reset it with {reset} or reboot",
    "fallen_off_bus": "reboot clears the fallen-off-the-bus GPU {label}; if it returns after the reboot, reseat or "
                      "RMA the GPU",
    "gpu_lost": "{label} is lost to the driver: reboot; if it returns, reseat or RMA the GPU",
    "driver_assert": "an NVIDIA driver assertion failed: collect nvidia-bug-report.sh; if GPU errors follow, update "
                     "the driver",
    "pcie_fatal": "a fatal PCIe error took {device}'s link down: reboot the node; if it recurs, reseat the device "
                  "and check its slot, riser and retimer",
    "pcie_nonfatal": "uncorrectable PCIe errors on {device}: the job using it may have failed; check the slot and "
                     "riser, drain if they repeat",
    "pcie_recovery_failed": "the kernel could not recover {device} after a PCIe error: reboot the node; if it "
                            "recurs, reseat the device",
    "pcie_corrected": "corrected PCIe errors on {device}: reseat it and check the riser/retimer and the link "
                      "(`lspci -vv` LnkSta); drain if they turn uncorrectable",
    "pcie_link_down": "the PCIe link of {device} went down: reseat the device or reboot the node",
    "mce_uncorrected": "an uncorrected machine check: drain the node and find the DIMM or CPU with "
                       "`mcelog --client` / `ras-mc-ctl --errors`; replace it",
    "mce_corrected": "corrected machine checks: watch the trend with `ras-mc-ctl --summary`; replace the DIMM if "
                     "they keep coming",
    "sxid_fatal": "a fatal NVSwitch error on {device}: drain the node, reset the NVSwitches and GPUs (reboot); check "
                  "the fabric manager log and the link named",
    "sxid_nonfatal": "non-fatal NVSwitch errors on {device}: no drain; check the port named if they repeat",
    "sxid_other": "an NVSwitch error on {device}: read the fabric manager log for its severity",
    "plugin_unhealthy": "the Kubernetes device plugin withdrew {device} from the node's allocatable GPUs: check the "
                        "GPU (`nvidia-smi -q`, the kernel log's Xids) and the reason quoted; " + PLUGIN_REMEDY,
    "nvml_dbe_event": "an uncorrectable (double-bit) ECC error on a GPU of the node: the kernel log's Xid 48 / 94 / "
                      "95 names the GPU and whether it needs a reset; check `nvidia-smi -q -d ECC,ROW_REMAPPER`",
}
_RESOLVED_REMEDIES = {
    "gpu.xid/pcie-recovered": "the kernel recovered {device} after an uncorrectable PCIe error: the job using it may "
                              "have failed; watch for repeats, reseat if they come back",
    "gpu.xid/pcie-link-bounced": "the PCIe link of {device} went down and came back: reseat the device if it "
                                 "happens again",
}


def _remedy(action: str, xid: int, label: str, pci: str) -> str:
    """What clears one drain-level Xid burst."""
    template = _ACTION_REMEDIES.get(action, _DEFAULT_REMEDY)
    return "drain node; " + template.format(what=f"Xid {xid}", label=label, reset=_reset_cmd(pci))


def _device(g: FaultGroup, gr: _Graded) -> str:
    f = g.first
    if f.kind.startswith("sxid"):
        return f"NVSwitch {f.device} ({f.pci})" if f.device else f"NVSwitch {f.pci}"
    if f.kind.startswith("mce"):
        return "host CPU/memory"
    if f.kind in PLUGIN_KINDS:
        return "a GPU" if f.device in ("", REPORTER) else f.device
    if f.kind in ("driver_assert", "rm_error") and not f.pci and f.gpu is None:
        return "NVIDIA driver"
    if f.kind in GPU_KINDS or f.pci in gr.log.gpus or f.device == "nvidia" or f.vendor.startswith("10de"):
        return gr.label(f.pci, f.gpu)
    name = f.device or (f"device [{f.vendor}]" if f.vendor else "device")
    return f"{name} {f.pci}" if f.pci else name


def _fault_remedy(g: FaultGroup, gr: _Graded) -> str:
    template = _RESOLVED_REMEDIES.get(g.code) or _FAULT_REMEDIES.get(g.kind, "look at the line quoted")
    text = template.format(label=gr.label(g.first.pci, g.first.gpu), reset=_reset_cmd(g.first.pci),
                           device=_device(g, gr))
    return ("drain node; " + text) if g.severity == FAIL else text


def _app_remedy(codes: list[int], repeated: list[str]) -> str:
    text = f"report to the job owner (application-level Xid {', '.join(map(str, codes))}); no drain"
    if repeated:
        text += f"; repeated on {', '.join(repeated)}: run `dcgmi diag -r 2` on that GPU if it recurs across jobs"
    return text


_SOFT_REMEDIES = {
    "gpu.xid/workflow-nvlink5-err-nonfatal": "non-fatal NVLink5 errors: watch `nvidia-smi nvlink -e` counters; drain "
                                             "if they repeat or turn Fatal",
    "gpu.xid/ignore": "no action by NVIDIA's catalog: watch the GPU for repeats (a pending row remap is applied at the "
                      "next GPU reset)",
    "gpu.xid/contact-support": "collect nvidia-bug-report.sh and report the Xid to NVIDIA; watch the GPU",
    "gpu.xid/update-swfw": "update the vGPU guest or host driver so they match",
    "gpu.xid/check-uvm": "check the UVM / coherent-memory setup of the job; look for the Xid it accompanies",
    "gpu.xid/workflow-xid-45": "the driver cleaned up a job's channels with no other Xid shown: check the job "
                               "(killed, out of memory); no drain",
    cat.NOT_IN_CATALOG: "look the Xid up in NVIDIA's current Xid catalog (docs.nvidia.com/deploy/xid-errors)",
    "gpu.xid/recovery-unknown": "read the recovery action in the Xid 154 line and act on it; update preflight",
}


# ---------------------------------------------------------------------------------------------
# Findings


def _describe(gr: _Graded, gs: list[Group]) -> str:
    """Xids of one GPU: mnemonic, count, bursts and the Xid that caused a sympathetic one."""
    per: dict[int, list[Group]] = {}
    for g in gs:
        per.setdefault(g.first.xid, []).append(g)
    parts = []
    for code, groups in sorted(per.items()):
        n = sum(g.count for g in groups)
        name = _mnemonic(code) or "not in catalog"
        nb = gr.bursts[(code, groups[0].first.device)]
        extra = (f" x{n}" + (f" in {nb} bursts" if nb > 1 else "")) if n > 1 else ""
        causes = sorted(g.caused_by for g in groups if g.caused_by is not None and g.severity == INFO)
        implied = " (named by a later Xid 45)" if any(g.first.implied for g in groups) else ""
        parts.append(f"Xid {code} {name}{extra}{implied}" + (f" (after Xid {causes[0]})" if causes else ""))
    return ", ".join(parts)


def _evidence(gr: _Graded, gs: list[Group], pci: str) -> list[str]:
    """The lines behind one finding: its bursts, their sympathetic Xids and the driver's notes."""
    ev: list[str] = []
    for g in gs:
        ev.append(short(g.first.line.raw))
        if g.count > 1:
            ev.append(f"(Xid {g.first.xid} on {g.first.device}: {g.count} lines, "
                      f"up to {g.last.line.time_text or 'the end of the log'})")
    xids = {g.first.xid for g in gs}
    ev += [short(g.first.line.raw) for g in gr.of(INFO)
           if g.first.device == pci and g.caused_by in xids and not g.cleared]
    ev += [short(note.raw) for note in gr.log.reset_notes.get(pci, [])[:1]]
    ev += [short(f.line.raw) for f in gr.covered if f.pci == pci][:3]
    return ev


def _by_code_and_gpu(groups: list[Group]) -> dict[tuple[str, str], list[Group]]:
    out: dict[tuple[str, str], list[Group]] = {}
    for g in groups:
        out.setdefault((g.code, g.first.device), []).append(g)
    return out


def _repeated(ctx: CheckContext, gr: _Graded, gs: list[Group]) -> list[str]:
    repeat = int(ctx.profile.get("xid.repeat_warn", 0) or 0)  # pragma: no mutate (generic sets it)
    seen = sorted({g.key for g in gs})
    return [f"{gr.label(pci)} Xid {x} ({gr.bursts[(x, pci)]} times)" for x, pci in seen
            if repeat and gr.bursts[(x, pci)] >= repeat]


def _sympathetic_of(gr: _Graded, gs: list[Group]) -> str:
    """The sympathetic Xids a finding's Xids caused on its GPU, for its summary."""
    xids, pci = {g.first.xid for g in gs}, gs[0].first.device
    sym = [g for g in gr.of(INFO) if g.first.device == pci and g.caused_by in xids and not g.cleared]
    return f" (with {_describe(gr, sym)})" if sym else ""


def _plugin_part(gr: _Graded, gs: list[Group], device: str) -> tuple[str, list[str], str]:
    """What the Kubernetes device plugin adds to a finding on Xids it reported: a summary
    suffix, the line where it withdrew the GPU, the remedy's tail."""
    if not any(g.first.reporter for g in gs):
        return "", [], ""
    marked = gr.log.plugin_marked.get(device)
    if marked is None and not any("unhealthy" in g.first.text for g in gs):
        return " (Kubernetes device plugin)", [], ""
    return (" (Kubernetes device plugin: GPU marked unhealthy)", [short(marked.raw)] if marked else [],
            "; " + PLUGIN_REMEDY)


def _xid_findings(ctx: CheckContext, gr: _Graded, f: Findings) -> None:
    graded = [g for g in gr.groups if g.severity not in (INFO, IGNORED)]
    for (code, pci), gs in _by_code_and_gpu(graded).items():
        label = gr.label(pci, gs[0].first.gpu)
        suffix, plugin_ev, plugin_remedy = _plugin_part(gr, gs, pci)
        summary = f"{label}: {_describe(gr, gs)}{_sympathetic_of(gr, gs)}{suffix}"
        if policy.status(code) is Status.FAIL:
            g = gs[0]
            remedy = _remedy(g.action, g.first.xid, label, pci)  # an action without its own text: reset
        elif code == "gpu.xid/restart-app":
            remedy = _app_remedy(sorted({g.first.xid for g in gs}), _repeated(ctx, gr, gs))
        else:
            remedy = _SOFT_REMEDIES.get(code, "look at the lines quoted")
        f.add(code, summary, _evidence(gr, gs, pci) + plugin_ev, remedy + plugin_remedy)


KIND_WORDS = {
    "fallen_off_bus": "fallen off the bus", "gpu_lost": "lost to the driver", "adapter_init_failed": "failed to "
    "initialise", "power_cables": "auxiliary power cables not connected", "wpr2_up": "WPR2 left up, GSP cannot boot", "reset_required": "the driver asks for a reset",
    "gsp_timeout": "GSP firmware not answering", "gsp_crash": "GSP firmware crashed", "memsys_error": "memory "
    "subsystem error", "pmu_halted": "PMU halted", "ecc_uncorrected": "uncorrected ECC error", "nvlink_discovery_failed": "NVLink discovery or training failed",
    "driver_assert": "driver assertion failed", "rm_error": "driver error status", "pcie_fatal": "uncorrectable "
    "fatal PCIe error", "pcie_nonfatal": "uncorrectable non-fatal PCIe error", "pcie_corrected": "corrected PCIe "
    "errors", "pcie_recovery_failed": "not recovered after a PCIe error", "pcie_link_down": "PCIe link down",
    "mce_uncorrected": "uncorrected machine check", "mce_corrected": "corrected machine checks", "sxid_fatal":
    "fatal NVSwitch error", "sxid_nonfatal": "non-fatal NVSwitch error", "sxid_correctable": "correctable NVSwitch "
    "error", "sxid_other": "NVSwitch error of unstated severity", "plugin_unhealthy": "marked unhealthy by the "
    "Kubernetes device plugin", "nvml_dbe_event": "double-bit ECC error event (the device plugin's NVML event "
    "type 2)", "nvml_sbe_event": "single-bit ECC error event (the device plugin's NVML event type 1)",
}


def _fault_summary(g: FaultGroup, gr: _Graded) -> str:
    what = KIND_WORDS.get(g.kind, g.kind.replace("_", " "))
    if g.code in RESOLVED_CODES.values():
        what += " (recovered)" if g.kind != "pcie_link_down" else " (link came back)"
    detail = f": {'; '.join(g.details[:3])}" if g.details else ""
    times = f" ({g.count} reports)" if g.count > 1 else ""
    no_xid = " (no Xid)" if g.kind in GPU_KINDS else ""
    return f"{_device(g, gr)}: {what}{times}{no_xid}{detail}"


def _fault_findings(gr: _Graded, f: Findings) -> None:
    for g in gr.faults:
        f.add(g.code, _fault_summary(g, gr), [short(g.first.line.raw)], _fault_remedy(g, gr))


def _notes(ctx: CheckContext, gr: _Graded, f: Findings) -> None:
    """What is worth showing and is no problem: cleared faults, ignored Xids, the window."""
    for g in gr.groups:
        if g.cleared:
            f.note(f"cleared: Xid {g.first.xid} on {gr.label(g.first.device)} (a later Xid 154 set the recovery "
                   "action back to None)")
    ignored = gr.of(IGNORED)
    if ignored:
        f.note(f"xid.ignore = {sorted(gr.ignore_codes)} ({ctx.profile.source('xid.ignore') or 'profile'}): "
               f"{sum(g.count for g in ignored)} event(s) not graded")
    if gr.fail_codes & {g.first.xid for g in gr.of(FAIL)}:
        f.note(f"xid.fail = {sorted(gr.fail_codes)} ({ctx.profile.source('xid.fail') or 'profile'})")
    if gr.dropped:
        f.note(f"{gr.dropped} older event(s) before the window")


def _special_findings(gr: _Graded, f: Findings) -> None:
    """Lines that could not be read, a driver that binds no GPU, a filter that hides Xids."""
    log = gr.log
    if log.unparsed:
        f.add(UNPARSED_CODE, f"not recognised: {len(log.unparsed)} NVRM line(s) name an Xid in a layout not known "
                             "(expected `NVRM: Xid (PCI:dddd:bb:dd): N, ...`)",
              [short(ln.raw) for ln in log.unparsed[:3]], _SOFT_REMEDIES[cat.NOT_IN_CATALOG])
    _unread(log, f)
    gpu_found = any(g.kind in GPU_KINDS for g in gr.faults) or bool(gr.groups)
    if log.driver_faults and not gpu_found:
        d = log.driver_faults[0]
        f.add(DRIVER_NOT_BOUND, f"the NVIDIA driver drives no GPU ({d.meaning}); no Xid can be reported "
                                "(see gpu.driver)", [short(x.line.raw) for x in log.driver_faults[:4]],
              "fix the driver first (gpu.driver names the cause), then re-check the kernel log")
    if _filtered(log):
        f.add(LOG_FILTERED, _filtered_text(log), [f"command: {log.filter}"],
              "capture the whole kernel log (`dmesg -T` or `journalctl -k`) to grade Xids")


def _unread(log: KernelLog, f: Findings) -> None:
    """NVRM lines at the driver's error level that no rule reads (No silent PASS): their own
    WARN finding; beside a failure already found (a GPU to drain), the lines are shown with it
    as a note, since they are most often that failure's trail (register dumps, RPC history)."""
    lines = [short(ln.raw) for ln in log.unread]
    if not lines:
        return
    if any(x.status is Status.FAIL for x in f.items):
        f.note(f"{len(lines)} more {PRODUCER} error line(s) no rule reads, e.g. {lines[0]}")
        return
    f.unread("gpu.xid", PRODUCER, lines)


def _quiet_summary(gr: _Graded) -> str:
    window_txt = f"since {gr.since.isoformat()}" if gr.since else "since boot"
    if not gr.since and gr.log.plugin_lines and not gr.log.nvrm:
        window_txt = "in the Kubernetes device plugin's log"
    muted = gr.of(INFO) + gr.of(IGNORED) + [g for g in gr.groups if g.severity == Status.PASS.value]
    quiet = f" ({sum(g.count for g in muted)} informational or ignored event(s))" if muted else ""
    older = f"; {gr.dropped} older event(s) before the window" if gr.dropped else ""
    scope = ""
    if gr.log.filter:
        scope = f" (excerpt filtered by grep {' / '.join(gr.log.filter)})"
    elif gr.log.excerpt:
        scope = " (excerpt)"
    return f"no Xid needing action {window_txt}{quiet}{older}{scope}"


def grade_xid(ctx: CheckContext) -> Result:
    run = ctx.input("kernel-log")
    log: KernelLog | None = ctx.facts("kernel-log")
    if run is None or log is None:
        return ctx.finding("gpu.xid/no-kernel-log", "no kernel log captured; Xids not checked")
    early = _not_gradable(ctx, run, log)
    if early is not None:
        return early
    gr = _graded(ctx, log)
    f = Findings()
    _xid_findings(ctx, gr, f)
    _fault_findings(gr, f)
    _special_findings(gr, f)
    _notes(ctx, gr, f)
    return f.result(ctx, _quiet_summary(gr), _facts(gr, run))


register(Check(
    id="gpu.xid",
    title="GPU Xid events",
    grade=grade_xid,
    probes=(PROBE,),
    required=("kernel-log",),
    inputs=("kernel-log",),
    profile_keys={"xid.fail": list, "xid.ignore": list, "xid.repeat_warn": int,
                  "xid.sympathetic_window_s": (int, float)},
    catches="Xids needing a GPU reset or reboot (48, 62, 64, 74, 79, 95, 109, 119, 120, fatal NVLink5 ...), the "
            "action an Xid 154 names, GPU fallen off the bus, lost, reset required, GSP timeouts and crashes, "
            "adapter init failures and NVLink discovery failures without an Xid; PCIe AER / DPC / hot-plug link "
            "loss, machine checks and NVSwitch SXids in the kernel log; app-level Xids (13, 31, 43, 94) as warnings",
    node_local=True,
    in_run=True,
))
