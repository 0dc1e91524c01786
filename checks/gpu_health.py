"""GPU health and driver checks: graders over parsed facts.

gpu.health  per GPU: uncorrectable ECC (volatile, aggregate), row remapping (pending, failed,
            banks without spares), retired pages (pending, table full), the driver's recovery
            action / reset flags, memory repair flags, hardware clock slowdowns, unreadable
            sensors, refused resets. Sources: `nvidia-smi -q` (whole or any `-d`/`-i`/grep
            fragment: what a fragment does not show is absent), the `--query-gpu` CSV (every
            health column it carries) and the default table.
gpu.driver  the driver stack: tool errors (version mismatch, driver not loaded, NVML missing),
            kernel-log driver faults, loaded kernel module vs installed packages, versions
            pinned by the profile.

Each source is read into one `GpuHealth` view per GPU, and one set of rules grades the views.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from preflight.findings import Findings
from preflight.model import Result, Status
from preflight.parsers.base import clean, to_bool, to_int
from preflight.parsers.driver_version import DriverVersions
from preflight.parsers.kernel_log import KernelLog
from preflight.parsers.nvml import NvmlReport
from preflight.parsers.nvsmi_csv import QueryCsv
from preflight.parsers.nvsmi_errors import ToolError
from preflight.parsers.nvsmi_q import QGpu, QReport
from preflight.parsers.nvsmi_table import SmiTable
from preflight.probes import Probe
from preflight.profile import Profile
from preflight.registry import Check, CheckContext, register

PROBE_Q = Probe.of("nvidia-smi-q", ["nvidia-smi", "-q"], timeout=20.0)
PROBE_NVML = Probe.of("nvml", [sys.executable, "-m", "preflight.nvml_probe"], timeout=20)

# Errors that mean the driver stack itself is broken (graded by gpu.driver).
DRIVER_ERRORS = ("version_mismatch", "no_driver", "no_devices", "library_missing", "nvml_init")
# clock event reasons: --query-gpu field -> the name nvidia-smi -q prints (the profile's names)
CLOCK_EVENTS = {"hw_slowdown": "HW Slowdown", "hw_thermal_slowdown": "HW Thermal Slowdown",
                "hw_power_brake_slowdown": "HW Power Brake Slowdown", "sw_thermal_slowdown": "SW Thermal Slowdown",
                "sw_power_cap": "SW Power Cap", "gpu_idle": "Idle", "sync_boost": "Sync Boost",
                "applications_clocks_setting": "Applications Clocks Setting"}
_RECOVERY_REMEDY = (
    ("reboot", "drain the node and reboot it (the driver asks for a node reboot)"),
    ("drain and reset", "drain the node, then reset the GPU (nvidia-smi -r -i <index>) once no process uses it"),
    ("drain", "drain the node: stop peer-to-peer traffic to this GPU, then reset it (nvidia-smi -r -i <index>)"),
    ("reset", "drain the node and reset the GPU (nvidia-smi -r -i <index>) once no process uses it, or reboot"),
)


@dataclass
class GpuHealth:
    """One GPU's health facts from whichever source; None = the source does not show it."""

    index: int
    label: str
    ecc_volatile: int | None = None
    ecc_aggregate: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    remap_uncorrectable: int | None = None
    banks_without_spares: int | None = None
    retired_sbe: int | None = None
    retired_dbe: int | None = None
    retired_pending: bool | None = None
    recovery_action: str = ""
    reset_required: bool | None = None
    drain_and_reset: bool | None = None
    repairs: list[str] = field(default_factory=list)  # memory repair / SRAM threshold flags that are set
    clock_events: list[str] = field(default_factory=list)  # active clock event reasons, -q names
    util: int | None = None
    sensor_errors: list[str] = field(default_factory=list)  # table cells that read ERR!
    ev: dict[str, list[str]] = field(default_factory=dict)  # fact -> the lines that show it

    def lines(self, *keys: str) -> list[str]:
        return [x for k in keys for x in self.ev.get(k, [])]

    def facts(self) -> dict[str, Any]:
        """JSON facts under the names reports and the history store read."""
        return {"index": self.index, "gpu": self.label, "uncorrectable_ecc": self.ecc_volatile,
                "uncorrectable_ecc_aggregate": self.ecc_aggregate, "remapped_pending": self.remap_pending,
                "remapped_failure": self.remap_failure, "remapped_rows_uncorrectable": self.remap_uncorrectable,
                "banks_without_spare_rows": self.banks_without_spares, "retired_pages_sbe": self.retired_sbe,
                "retired_pages_dbe": self.retired_dbe, "retired_pages_pending": self.retired_pending,
                "recovery_action": self.recovery_action or None, "reset_required": self.reset_required,
                "drain_and_reset_recommended": self.drain_and_reset, "repairs": self.repairs,
                "clock_events_active": self.clock_events, "utilization": self.util, "sensor_errors": self.sensor_errors}


# ---------------------------------------------------------------------------------------
# Sources -> views


def _q_ev(gpu: QGpu, path: str) -> str:
    section = path.rsplit("/", 1)[0] if "/" in path else ""
    return f"{gpu.label} [{section}] {gpu.line(path)}" if section else f"{gpu.label} {gpu.line(path)}"


def _q_leaf(gpu: QGpu, name: str) -> str | None:
    """Path of the first field named `name` outside MIG device / process sections."""
    return next((p for p in gpu.fields if p.rsplit("/", 1)[-1] == name
                 and not p.startswith(("MIG Devices", "Processes"))), None)


def _q_uncorrectable(gpu: QGpu, scope: str) -> tuple[int | None, list[str]]:
    """Uncorrectable ECC of `scope` (Volatile / Aggregate): the SRAM/DRAM layout (Ampere and
    later) or the older Single/Double Bit one; the sum and the non-zero paths."""
    total: int | None = None
    hits: list[str] = []
    double: dict[str, int] = {}
    for path, value in gpu.under(f"ECC Errors/{scope}"):
        rel, n = path[len(f"ECC Errors/{scope}/"):], to_int(value)
        if n is None:
            continue
        if rel.startswith("Double Bit/"):
            double[path] = n
        elif "uncorrectable" in rel.rsplit("/", 1)[-1].lower():
            total = (total or 0) + n
            hits += [path] if n else []
    if double:
        use = {p: n for p, n in double.items() if p.endswith("/Total")} or double
        total = (total or 0) + sum(use.values())
        hits += [p for p, n in use.items() if n]
    return total, hits


def from_q(gpu: QGpu) -> GpuHealth:
    h = GpuHealth(gpu.index, gpu.label)

    def flag(name: str, path: str | None) -> bool | None:
        if path is None or path not in gpu.fields:
            return None
        h.ev[name] = [_q_ev(gpu, path)]
        return to_bool(gpu.get(path))

    h.ecc_volatile, vol = _q_uncorrectable(gpu, "Volatile")
    h.ecc_aggregate, agg = _q_uncorrectable(gpu, "Aggregate")
    h.ev["ecc_volatile"], h.ev["ecc_aggregate"] = [_q_ev(gpu, p) for p in vol], [_q_ev(gpu, p) for p in agg]
    h.remap_pending = flag("remap_pending", "Remapped Rows/Pending")
    h.remap_failure = flag("remap_failure", "Remapped Rows/Remapping Failure Occurred")
    h.remap_uncorrectable = to_int(gpu.get("Remapped Rows/Uncorrectable Error"))
    if h.remap_uncorrectable:
        h.ev["remap_uncorrectable"] = [_q_ev(gpu, "Remapped Rows/Uncorrectable Error")]
    none_path = "Remapped Rows/Bank Remap Availability Histogram/None"
    h.banks_without_spares = to_int(gpu.get(none_path))
    h.ev["banks_without_spares"] = [_q_ev(gpu, none_path)] if none_path in gpu.fields else []
    for key, suffix in (("retired_sbe", "Single Bit ECC"), ("retired_dbe", "Double Bit ECC")):
        path = next((p for p, v in gpu.under("Retired Pages") if p.split("/")[1] == suffix and to_int(v) is not None),
                    None)
        if path:
            setattr(h, key, to_int(gpu.get(path)))
            h.ev[key] = [_q_ev(gpu, path)]
    pending = next((p for p, _ in gpu.under("Retired Pages") if p.rsplit("/", 1)[-1].lower().startswith("pending")),
                   None)
    h.retired_pending = flag("retired_pending", pending)
    action = clean(gpu.get("GPU Recovery Action"))
    if action:
        h.recovery_action, h.ev["recovery_action"] = action, [_q_ev(gpu, "GPU Recovery Action")]
    h.reset_required = flag("reset_required", _q_leaf(gpu, "Reset Required"))
    h.drain_and_reset = flag("drain_and_reset", _q_leaf(gpu, "Drain and Reset Recommended"))
    for path, what in (("ECC Errors/Aggregate/SRAM Threshold Exceeded", "SRAM uncorrectable error threshold exceeded"),
                       ("ECC Errors/Unrepairable Memory", "unrepairable memory reported"),
                       ("ECC Errors/Channel Repair Pending", "memory channel repair pending"),
                       ("ECC Errors/TPC Repair Pending", "TPC repair pending")):
        if to_bool(gpu.get(path)) is True:
            h.repairs.append(what)
            h.ev[what] = [_q_ev(gpu, path)]
    for path, value in gpu.under("Clocks Event Reasons"):
        if to_bool(value) is True:
            name = path.split("/", 1)[1]
            h.clock_events.append(name)
            h.ev[name] = [_q_ev(gpu, path)]
    util_path = "Utilization/Gpu" if "Utilization/Gpu" in gpu.fields else "Utilization/GPU"
    h.util = to_int(gpu.get(util_path))
    h.ev["util"] = [_q_ev(gpu, util_path)] if util_path in gpu.fields else []
    return h


def from_csv(row: dict[str, str], position: int) -> GpuHealth:
    idx = to_int(row.get("index"))
    index = position if idx is None else idx
    bus = clean(row.get("pci.bus_id"))
    h = GpuHealth(index, f"GPU {index} ({bus})" if bus else f"GPU {index}")

    def get(name: str, key: str, conv: Callable[[Any], Any]) -> Any:
        value = conv(row.get(name))
        if value is not None:
            h.ev[key] = h.ev.get(key, []) + [f"{h.label} {name}={row[name]}"]
        return value

    h.ecc_volatile = get("ecc.errors.uncorrected.volatile.total", "ecc_volatile", to_int)
    h.ecc_aggregate = get("ecc.errors.uncorrected.aggregate.total", "ecc_aggregate", to_int)
    h.remap_pending = get("remapped_rows.pending", "remap_pending", to_bool)
    h.remap_failure = get("remapped_rows.failure", "remap_failure", to_bool)
    h.remap_uncorrectable = get("remapped_rows.uncorrectable", "remap_uncorrectable", to_int)
    h.banks_without_spares = get("remapped_rows.histogram.none", "banks_without_spares", to_int)
    h.retired_sbe = get("retired_pages.single_bit_ecc.count", "retired_sbe", to_int)
    h.retired_dbe = get("retired_pages.double_bit.count", "retired_dbe", to_int)
    h.retired_pending = get("retired_pages.pending", "retired_pending", to_bool)
    h.recovery_action = get("gpu_recovery_action", "recovery_action", lambda v: clean(v) or None) or ""
    h.reset_required = get("reset_status.reset_required", "reset_required", to_bool)
    h.drain_and_reset = get("reset_status.drain_and_reset_recommended", "drain_and_reset", to_bool)
    if get("ecc.errors.uncorrected.aggregate.sram.thresholdexceeded", "sram", to_bool):
        h.repairs.append("SRAM uncorrectable error threshold exceeded")
        h.ev["SRAM uncorrectable error threshold exceeded"] = h.ev["sram"]
    for fld, name in CLOCK_EVENTS.items():
        if get(f"clocks_event_reasons.{fld}", name, to_bool) or get(f"clocks_throttle_reasons.{fld}", name, to_bool):
            h.clock_events.append(name)
    h.util = get("utilization.gpu", "util", to_int)
    return h


def from_table(row: dict[str, Any]) -> GpuHealth:
    h = GpuHealth(row["index"], f"GPU {row['index']} ({row.get('bus_id') or '?'})")
    block = [f"{h.label} {ln}" for ln in (row.get("lines") or [])[:2]] or [h.label]
    h.sensor_errors = [k for k in ("fan", "temp", "perf", "power_usage", "power_cap", "memory_used", "util",
                                   "ecc_uncorr") if "ERR!" in str(row.get(k) or "")]
    h.ecc_volatile = to_int(row.get("ecc_uncorr"))
    h.ev = {"sensor_errors": block, "ecc_volatile": block}
    return h


# ---------------------------------------------------------------------------------------
# Rules over one view


def _prov(prof: Profile, key: str) -> str:
    src = prof.source(key)
    return f"profile {prof.name}: {key} = {prof.get(key)!r}" + (f" ({src})" if src else "")


def _memory(h: GpuHealth, prof: Profile, f: Findings) -> None:
    i, where = h.index, h.label
    reset = f"reset GPU {i} (nvidia-smi -r -i {i}) or reboot"
    if h.remap_failure:
        f.add(Status.FAIL, f"{where}: row remapping failed (no spare rows left for a bad row)",
              h.lines("remap_failure", "remap_uncorrectable"),
              "drain the node and RMA the GPU: its memory can no longer repair itself")
    if h.remap_pending:
        n = f" ({h.remap_uncorrectable} rows remapped for uncorrectable errors)" if h.remap_uncorrectable else ""
        f.add(Status.FAIL, f"{where}: row remap pending{n}", h.lines("remap_pending", "remap_uncorrectable"),
              f"drain until a GPU reset activates the remap: {reset}, then return the node to service (not an RMA)")
    if h.banks_without_spares:
        f.add(Status.WARN, f"{where}: {h.banks_without_spares} memory bank(s) have no spare rows left",
              h.lines("banks_without_spares"), "the next uncorrectable error in those banks cannot be remapped: "
                                               "plan an RMA")
    max_ecc = int(prof.get("gpu.max_uncorrectable_ecc", 0) or 0)
    if h.ecc_volatile is not None and h.ecc_volatile > max_ecc:
        f.add(Status.FAIL, f"{where}: {h.ecc_volatile} volatile uncorrectable ECC error(s)",
              [*h.lines("ecc_volatile"), _prov(prof, "gpu.max_uncorrectable_ecc")],
              f"drain; {reset} to clear them; if they come back, check Remapped Rows / Retired Pages and RMA the GPU")
    elif h.ecc_aggregate is not None and h.ecc_aggregate > max_ecc:
        f.add(Status.WARN, f"{where}: {h.ecc_aggregate} uncorrectable ECC error(s) in the GPU's lifetime (aggregate)",
              [*h.lines("ecc_aggregate"), _prov(prof, "gpu.max_uncorrectable_ecc")],
              "none since the last reset: check that the bad memory was retired (Remapped Rows, or Retired Pages on "
              "older GPUs), watch for new errors, RMA the GPU if they recur")
    for what in h.repairs:
        rma = "threshold" in what or "unrepairable" in what
        f.add(Status.FAIL, f"{where}: {what}", h.lines(what),
              "drain the node and RMA the GPU" if rma else f"drain until a reset applies the repair: {reset}")


def _retirement(h: GpuHealth, prof: Profile, f: Findings) -> None:
    """Dynamic page retirement (pre-Ampere): pending pages need a reset; a full table an RMA."""
    where, ev = h.label, h.lines("retired_sbe", "retired_dbe", "retired_pending")
    total = (h.retired_sbe or 0) + (h.retired_dbe or 0) if h.retired_sbe is not None or h.retired_dbe is not None \
        else None
    table = int(prof.get("gpu.retired_pages_table", 64) or 64)
    full_pending = int(prof.get("gpu.retired_pages_full_pending", 62) or table)
    rma = ("the GPU's page retirement table is exhausted: drain the node and RMA the GPU "
           f"(NVIDIA retires at most {table} pages per GPU)")
    if total is not None and (total >= table or (h.retired_pending and total >= full_pending)):
        f.add(Status.FAIL, f"{where}: page retirement table full ({total} pages retired"
              + (", more pending)" if h.retired_pending else ")"),
              [*ev, _prov(prof, "gpu.retired_pages_table" if total >= table else "gpu.retired_pages_full_pending")], rma)
        return
    if h.retired_pending:
        f.add(Status.FAIL, f"{where}: page retirement pending", ev,
              f"drain; reset GPU {h.index} (nvidia-smi -r -i {h.index}) or reboot so the pending pages are retired")
    max_pages = int(prof.get("gpu.max_retired_pages", 0) or 0)
    if h.retired_dbe is not None and h.retired_dbe > max_pages:
        f.add(Status.FAIL, f"{where}: {h.retired_dbe} page(s) retired after double-bit ECC errors",
              [*h.lines("retired_dbe"), _prov(prof, "gpu.max_retired_pages")],
              "the GPU's memory has failed before: RMA it when past NVIDIA's page retirement limit, or raise "
              "gpu.max_retired_pages in a site profile if the site accepts it")


def _driver_requests(h: GpuHealth, f: Findings) -> None:
    action = h.recovery_action
    if action and action.lower() != "none":
        remedy = next((r for k, r in _RECOVERY_REMEDY if k in action.lower()),
                      f"drain the node and carry out the driver's recovery action ({action})")
        f.add(Status.FAIL, f"{h.label}: driver requests recovery action {action!r}", h.lines("recovery_action"),
              remedy.replace("<index>", str(h.index)))
    for flag, key, what in ((h.reset_required, "reset_required", "GPU reset required"),
                            (h.drain_and_reset, "drain_and_reset", "drain and reset recommended")):
        if flag:
            f.add(Status.FAIL, f"{h.label}: {what}", h.lines(key),
                  f"drain the node and reset the GPU (nvidia-smi -r -i {h.index}) once no process uses it, or reboot")


def _clocks_and_sensors(h: GpuHealth, prof: Profile, f: Findings) -> None:
    busy = h.util is None or h.util >= int(prof.get("gpu.busy_util_pct", 1) or 1)
    warn_busy = set(prof.get("gpu.clock_events_warn") or [])
    warn_always = set(prof.get("gpu.clock_events_warn_idle") or [])
    flagged = [e for e in h.clock_events if e in warn_always or (busy and e in warn_busy)]
    if flagged:
        f.add(Status.WARN, f"{h.label}: hardware clock slowdown active ({', '.join(flagged)})",
              [*h.lines(*flagged), *h.lines("util"),
               _prov(prof, "gpu.clock_events_warn" if busy else "gpu.clock_events_warn_idle")],
              "check cooling (inlet air, fans, heatsink) and power (PSU redundancy, the baseboard's power-brake "
              "signal); `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER` shows which")
    sensors = [k for k in h.sensor_errors if k != "fan"]
    if sensors:
        f.add(Status.FAIL, f"{h.label}: GPU telemetry unreadable (ERR! in {', '.join(h.sensor_errors)})",
              h.lines("sensor_errors"), f"the GPU's own sensors cannot be read: drain, reset GPU {h.index} or reboot; "
                                        "check dmesg for Xid 79 / 'fallen off the bus'")
    elif h.sensor_errors:
        f.add(Status.WARN, f"{h.label}: fan reading is ERR! (fan or its tachometer failed)", h.lines("sensor_errors"),
              "the temperature still reads normally: check the fan and its connector at the next maintenance window "
              "and watch the GPU temperature until then")


def grade_gpu(h: GpuHealth, prof: Profile, f: Findings) -> None:
    _driver_requests(h, f)
    _memory(h, prof, f)
    _retirement(h, prof, f)
    _clocks_and_sensors(h, prof, f)


# ---------------------------------------------------------------------------------------
# gpu.health


def _views(ctx: CheckContext) -> tuple[str, list[GpuHealth], list[ToolError], QReport | None]:
    """The richest source present: -q, then the CSV (when it carries health columns), then the table."""
    q: QReport | None = ctx.facts("nvidia-smi-q")
    csv: QueryCsv | None = ctx.facts("nvidia-smi-query")
    table: SmiTable | None = ctx.facts("nvidia-smi-table")
    health_cols = csv is not None and any(f.startswith(("ecc.errors", "remapped_rows", "retired_pages", "reset_status",
                                                        "gpu_recovery", "clocks_event", "clocks_throttle"))
                                          for f in csv.fields)
    if q is not None and (q.gpus or q.errors or not (health_cols or table)):
        return "nvidia-smi -q", [from_q(g) for g in q.gpus], q.errors, q
    if csv is not None and health_cols:
        return "the --query-gpu CSV", [from_csv(r, i) for i, r in enumerate(csv.rows)], csv.errors, None
    if table is not None:
        return "the nvidia-smi table", [from_table(r) for r in table.gpus], table.errors, None
    return "", [], [], None


def grade_health(ctx: CheckContext) -> Result | list[Result]:
    source, views, errors, q = _views(ctx)
    if not source:
        return []  # only a CSV without health columns: gpu.inventory grades it
    f = Findings()
    for h in views:
        grade_gpu(h, ctx.profile, f)
    for e in errors:
        if e.kind in ("gpu_lost", "needs_reset"):
            f.add(Status.FAIL, f"GPU {e.bus_id or '?'}: {e.summary}" + (f" ({e.detail})" if e.detail else ""),
                  [e.line], e.remedy)
        elif e.kind == "reset_failed":
            f.add(Status.FAIL, f"GPU {e.bus_id or '?'} could not be reset" + (f": {e.detail}" if e.detail else ""),
                  [e.line], e.remedy)
    if q is not None and q.attached is not None and q.gpus and len(q.gpus) < q.attached and len(q.gpus) > 1:
        f.add(Status.ERROR, f"only {len(q.gpus)} of {q.attached} attached GPUs in the nvidia-smi -q output",
              [q.header_lines.get("Attached GPUs", f"Attached GPUs : {q.attached}")],
              "run `nvidia-smi -q` by hand; a GPU missing from the listing is not healthy")
    facts = {"source": source, "gpus": [h.facts() for h in views],
             "lost": [e.bus_id or e.line for e in errors if e.kind == "gpu_lost"]}
    if not views and not f:
        driver = [e for e in errors if e.kind in DRIVER_ERRORS]
        if driver:
            return ctx.result(Status.ERROR, f"GPU health not read: {driver[0].line}", evidence=[e.line for e in driver],
                              remedy=f"{driver[0].summary}: {driver[0].remedy} (see gpu.driver)", facts=facts)
        if ctx.options.mode == "analyze" and q is not None and not q.recognised:
            return []  # nothing about GPU health in this paste
        return ctx.result(Status.ERROR, f"no GPU found in {source} output",
                          evidence=["no GPU block, row or health field in the output"],
                          remedy=f"run `nvidia-smi -q` by hand on {ctx.node}; empty or garbled output means the tool "
                                 "or driver is in trouble", facts=facts)
    shown = "ECC, row remapping, page retirement, reset and recovery flags" if q is not None else (
        "the health columns it carries" if source.startswith("the --query") else
        "volatile uncorrectable ECC and sensors (the table does not show row remapping; `nvidia-smi -q` does)")
    return f.result(ctx, f"{len(views)} GPU(s) healthy in {source}: {shown}", facts)


# ---------------------------------------------------------------------------------------
# gpu.driver


def _pin_ok(actual: str, pin: str) -> bool:
    """A pin matches the version or a prefix of it on a dot boundary ('535' matches 535.161.08)."""
    return actual == pin or actual.startswith(pin + ".")


def _version_findings(dv: DriverVersions | None, userspace: str, f: Findings) -> None:
    """The loaded kernel module against what is installed and what user space reports."""
    if dv is None or not dv.loaded:
        return
    reboot = ("the driver was upgraded without a reboot: drain the node and reboot so the kernel module and the "
              "user-space libraries are one version again")
    other = [(v, p.line) for p in dv.packages for v in [p.version] if v != dv.loaded]
    if other:
        f.add(Status.FAIL, f"kernel module {dv.loaded} is loaded but packages of {other[0][0]} are installed",
              [dv.loaded_line, *dict.fromkeys(line for _, line in other)], reboot)
    elif dv.on_disk and dv.on_disk != dv.loaded:
        f.add(Status.FAIL, f"kernel module {dv.loaded} is loaded but the module on disk is {dv.on_disk}",
              [dv.loaded_line, dv.on_disk_line], reboot)
    elif userspace and userspace != dv.loaded:
        f.add(Status.FAIL, f"kernel module {dv.loaded} is loaded but the user-space driver reports {userspace}",
              [dv.loaded_line, f"driver version reported by nvidia-smi/NVML: {userspace}"], reboot)


def _no_tooling(ctx: CheckContext, nverr: ToolError | None, facts: dict[str, Any]) -> Result | None:
    """nvidia-smi not installed and no NVML library: no GPU stack on this node (SKIP), or a
    missing one (FAIL where the profile requires nvidia-smi)."""
    smi = ctx.attempt("nvidia-smi-q")
    if smi is None or smi.state.value != "missing" or (ctx.input("nvml") is not None and (
            nverr is None or nverr.kind != "library_missing")):
        return None
    facts["error"] = nverr.line if nverr else smi.reason
    ev = [smi.reason] + ([nverr.line] if nverr else [])
    tool = smi.tool
    if ctx.profile.requires_tool(tool):
        return ctx.result(Status.FAIL, f"no GPU tooling: {tool} not found and the NVML library is missing",
                          evidence=[*ev, _prov(ctx.profile, "tools.required")], facts=facts,
                          remedy=f"install the NVIDIA driver on {ctx.node} (kernel module, libnvidia-ml, nvidia-smi), "
                                 "then reboot")
    return ctx.result(Status.SKIP, f"no GPU tooling on this node ({tool} not found, NVML library missing); gpu.driver "
                                   "not checked", evidence=ev, facts=facts)


@dataclass
class _DriverView:
    """What the captures say of the driver: nvidia-smi -q, NVML, the kernel log, the versions."""

    q: QReport | None
    nv: NvmlReport | None
    klog: KernelLog | None
    dv: DriverVersions | None
    errors: list[ToolError]  # nvidia-smi's driver errors
    lost: list[ToolError]  # GPUs that do not answer
    nverr: ToolError | None  # NVML's tool error, None when NVML answered

    @classmethod
    def of(cls, ctx: CheckContext) -> _DriverView:
        q: QReport | None = ctx.facts("nvidia-smi-q")
        nv: NvmlReport | None = ctx.facts("nvml")
        errors = [e for e in (q.errors if q else []) if e.kind in DRIVER_ERRORS]
        lost = [e for e in (q.errors if q else []) if e.kind == "gpu_lost"]
        if lost:  # "No devices were found" after a device-handle error: the GPU is gone, not the driver
            errors = [e for e in errors if e.kind != "no_devices"]
        return cls(q, nv, ctx.facts("kernel-log"), ctx.facts("driver-version"), errors, lost,
                   nv.tool_error() if nv is not None else None)

    @property
    def smi_driver(self) -> str:
        return self.q.driver if self.q else ""

    @property
    def nvml_driver(self) -> str:
        return self.nv.driver if self.nv is not None else ""

    @property
    def driver(self) -> str:
        dv = self.dv
        return self.smi_driver or self.nvml_driver or (dv.loaded if dv else "") or (dv.on_disk if dv else "")

    @property
    def cuda(self) -> str:
        return (self.q.cuda if self.q else "") or (self.nv.cuda if self.nv is not None else "")

    def facts(self) -> dict[str, Any]:
        nv, dv = self.nv, self.dv
        return {"driver": self.driver or None, "cuda": self.cuda or None,
                "nvml": (nv.nvml_version or None) if nv is not None else None, "error": None,
                "kernel_module": (dv.loaded or None) if dv else None, "installed": dv.installed if dv else []}


def _fault_findings(v: _DriverView, f: Findings) -> None:
    """Driver errors nvidia-smi printed, and driver faults in the kernel log."""
    for e in v.errors:
        f.add(Status.FAIL, f"{e.summary}: {e.line}", [e.line], e.remedy)
    for k in (v.klog.driver_faults if v.klog is not None else []):
        f.add(Status.FAIL, f"kernel log: {k.meaning}", [k.line.raw.strip() or k.line.text],
              "unload the module that owns the GPUs (nouveau: blacklist it and rebuild the initramfs) or fix the "
              "driver install (DKMS build for the running kernel), then reboot; check `dmesg | grep NVRM`")


def _nvml_findings(v: _DriverView, f: Findings) -> None:
    """NVML failing where nvidia-smi works, and the two disagreeing on the driver."""
    nverr, driver, nvml_driver = v.nverr, v.smi_driver, v.nvml_driver
    smi_ok = bool(driver) and not v.errors
    if nverr is not None and nverr.kind != "gpu_lost" and nverr.kind not in {e.kind for e in v.errors}:
        # nvidia-smi reads the driver fine: NVML failing only inside preflight's Python is a warning
        f.add(Status.WARN if smi_ok else Status.FAIL, f"{nverr.summary}: {nverr.line}", [nverr.line],
              "nvidia-smi works, so the driver is fine: check that preflight's Python can load libnvidia-ml "
              "(LD_LIBRARY_PATH, container mounts) and that nvidia-ml-py is installed" if smi_ok else nverr.remedy)
    if driver and nvml_driver and driver != nvml_driver:
        f.add(Status.WARN, f"nvidia-smi reports driver {driver} but NVML reports {nvml_driver}",
              [v.q.header_lines.get("Driver Version", driver) if v.q else driver, f"NVML driver: {nvml_driver}"],
              "two driver libraries are visible (container mounts, LD_LIBRARY_PATH): keep one")


def _pin_findings(ctx: CheckContext, v: _DriverView, f: Findings) -> None:
    """The driver and CUDA versions against the profile's pins."""
    for key, actual, what in (("gpu.driver_version", v.driver, "driver"),
                              ("gpu.cuda_version", v.cuda, "CUDA driver version")):
        pin = str(ctx.profile.get(key) or "").strip()
        if pin and actual and not _pin_ok(actual, pin):
            shown = v.q.header_lines.get("Driver Version" if what == "driver" else "CUDA Version") if v.q else None
            f.add(Status.FAIL, f"{what} {actual} is not the pinned {pin}",
                  [shown or f"{what}: {actual}", _prov(ctx.profile, key)],
                  f"install the driver branch that provides {what} {pin}, or update the profile pin")


def _no_version(ctx: CheckContext, v: _DriverView, facts: dict[str, Any]) -> Result | list[Result]:
    """No driver version anywhere and nothing wrong found: why not."""
    if v.lost and not v.errors:
        return ctx.result(Status.SKIP, "driver not graded: the only message is a GPU that does not answer "
                                       "(a GPU fault: gpu.inventory FAILs it)", evidence=[e.line for e in v.lost],
                          facts=facts)
    if ctx.options.mode == "analyze":
        return []  # this paste says nothing about the driver
    inp = ctx.input("nvidia-smi-q")
    if inp is not None and inp.rc:
        return ctx.result(Status.FAIL, f"nvidia-smi -q failed with exit code {inp.rc}", facts=facts,
                          evidence=[f"`{inp.cmdline}` exited {inp.rc} without a driver version"],
                          remedy=f"run `nvidia-smi -q` by hand on {ctx.node} and check dmesg for NVRM errors")
    return ctx.result(Status.ERROR, "no driver version found in the captures", facts=facts,
                      evidence=[f"{name}: no driver version" for name in ("nvidia-smi-q", "nvml")
                                if ctx.input(name) is not None],
                      remedy=f"run `nvidia-smi -q` by hand on {ctx.node}")


def grade_driver(ctx: CheckContext) -> Result | list[Result]:
    v = _DriverView.of(ctx)
    facts = v.facts()
    early = _no_tooling(ctx, v.nverr, facts)
    if early is not None:
        return early
    f = Findings()
    _fault_findings(v, f)
    _version_findings(v.dv, v.smi_driver or v.nvml_driver, f)
    _nvml_findings(v, f)
    _pin_findings(ctx, v, f)
    facts["error"] = v.errors[0].line if v.errors else v.nverr.line if v.nverr else None
    if f:
        return f.result(ctx, "", facts)
    if not v.driver:
        return _no_version(ctx, v, facts)
    q, nv, dv = v.q, v.nv, v.dv
    parts = [f"driver {v.driver}", f"CUDA {v.cuda}" if v.cuda else "",
             f"NVML {nv.nvml_version}" if nv is not None and nv.nvml_version else ""]
    ok_ev = [x for x in ((q.header_lines.get("Driver Version"), q.header_lines.get("CUDA Version")) if q else ()) if x]
    ok_ev += [dv.loaded_line] if dv and dv.loaded else []
    return f.result(ctx, ", ".join(p for p in parts if p), facts, ok_ev)


register(Check(
    id="gpu.health", title="GPU health (ECC, row remapping, retired pages, recovery action)", grade=grade_health,
    probes=(PROBE_Q,), required=("nvidia-smi-q",), inputs=("nvidia-smi-q", "nvidia-smi-query", "nvidia-smi-table"),
    profile_keys={"gpu.max_uncorrectable_ecc": int, "gpu.max_retired_pages": int, "gpu.retired_pages_table": int,
                  "gpu.retired_pages_full_pending": int, "gpu.clock_events_warn": list,
                  "gpu.clock_events_warn_idle": list, "gpu.busy_util_pct": int},
    catches="uncorrectable ECC, pending/failed row remaps, retired pages pending or table full, driver recovery "
            "action / reset required, refused resets, memory repair pending, HW clock slowdown, ERR! sensors",
    node_local=True, in_run=True))

register(Check(
    id="gpu.driver", title="GPU driver, CUDA and NVML", grade=grade_driver,
    probes=(PROBE_Q, PROBE_NVML), required=(), inputs=("nvidia-smi-q", "nvml", "kernel-log", "driver-version"),
    profile_keys={"gpu.driver_version": str, "gpu.cuda_version": str},
    catches="driver/library version mismatch, driver not loaded, no devices, NVML library missing, kernel-log driver "
            "faults (probe not called, no adapter), loaded module older than the installed packages, version pins",
    node_local=True, in_run=True))

__all__ = ["CLOCK_EVENTS", "DRIVER_ERRORS", "PROBE_NVML", "PROBE_Q", "GpuHealth", "from_csv", "from_q", "from_table",
           "grade_driver", "grade_gpu", "grade_health"]
