"""GPU health as one view per GPU, from whichever source shows it (graded by checks.gpu_health).

Sources: `nvidia-smi -q` (whole, or any `-d`/`-i`/grep fragment: what a fragment does not show
is None), the `--query-gpu` CSV (every health column it carries) and the default table (volatile
ECC and ERR! cells). A view records which groups of health facts its source showed (`shown`), so
a fragment that shows none is said to have nothing to grade, never called healthy; and the field
values nvidia-smi prints instead of a reading (`Unknown Error`, `GPU requires reset`, `GPU is
lost`), so an unreadable field is said, never read as a zero.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from preflight.parsers.base import clean, to_bool, to_int
from preflight.parsers.nvsmi_q import QGpu

# clock event reasons: --query-gpu field -> the name nvidia-smi -q prints (the profile's names)
CLOCK_EVENTS = {"hw_slowdown": "HW Slowdown", "hw_thermal_slowdown": "HW Thermal Slowdown",
                "hw_power_brake_slowdown": "HW Power Brake Slowdown", "sw_thermal_slowdown": "SW Thermal Slowdown",
                "sw_power_cap": "SW Power Cap", "gpu_idle": "Idle", "sync_boost": "Sync Boost",
                "applications_clocks_setting": "Applications Clocks Setting"}
# values nvidia-smi prints in place of a reading when NVML answered with an error
FIELD_ERRORS = {"unknown error": "unknown_error", "[unknown error]": "unknown_error",
                "gpu requires reset": "needs_reset", "[gpu requires reset]": "needs_reset",
                "gpu is lost": "gpu_lost", "[gpu is lost]": "gpu_lost"}
# the -q sections whose fields gpu.health reads (an unreadable field there hides a fault)
HEALTH_SECTIONS = ("ECC Errors", "Remapped Rows", "Retired Pages", "GPU Recovery Action", "GPU Reset Status",
                   "Clocks Event Reasons", "Temperature", "ECC Mode")
# memory repair / SRAM flags (-q leaf name -> what it means, the finding's code)
REPAIR_FLAGS = (
    ("SRAM Threshold Exceeded", "SRAM uncorrectable error threshold exceeded", "gpu.health/sram-threshold-exceeded"),
    ("Unrepairable Memory", "unrepairable memory reported", "gpu.health/unrepairable-memory"),
    ("Channel Repair Pending", "memory channel repair pending", "gpu.health/channel-repair-pending"),
    ("TPC Repair Pending", "TPC repair pending", "gpu.health/tpc-repair-pending"),
)
_OUTSIDE_GPU = ("MIG Devices", "Processes", "Accounted Processes")
# Temps attribute -> the -q label under Temperature (absolute layout, then the R535+ T.Limit margins)
TEMP_LABELS = (("current", "GPU Current Temp"), ("slowdown", "GPU Slowdown Temp"), ("shutdown", "GPU Shutdown Temp"),
               ("max_operating", "GPU Max Operating Temp"), ("margin", "GPU T.Limit Temp"),
               ("slowdown_margin", "GPU Slowdown T.Limit Temp"), ("shutdown_margin", "GPU Shutdown T.Limit Temp"),
               ("max_operating_margin", "GPU Max Operating T.Limit Temp"), ("memory", "Memory Current Temp"),
               ("memory_max", "Memory Max Operating Temp"))


@dataclass
class Temps:
    """Temperatures in one of the two layouts: absolute readings and thresholds (older drivers and
    most boards), or margins to the limit (`T.Limit`, R535+ on Hopper and later)."""

    current: int | None = None
    slowdown: int | None = None
    shutdown: int | None = None
    max_operating: int | None = None
    margin: int | None = None  # `GPU T.Limit Temp`: degrees below the max operating temperature
    slowdown_margin: int | None = None  # `GPU Slowdown T.Limit Temp` (negative: past the limit)
    shutdown_margin: int | None = None
    max_operating_margin: int | None = None
    memory: int | None = None
    memory_max: int | None = None


@dataclass
class GpuHealth:
    """One GPU's health facts from whichever source; None = the source does not show it."""

    index: int
    label: str
    bus: str = ""
    index_known: bool = True
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
    ecc_mode: bool | None = None
    ecc_mode_pending: bool | None = None
    power_limit: float | None = None
    default_power_limit: float | None = None
    temps: Temps = field(default_factory=Temps)
    repairs: list[tuple[str, str]] = field(default_factory=list)  # (what, code) of the repair flags set
    clock_events: list[str] = field(default_factory=list)  # active clock event reasons, -q names
    util: int | None = None
    sensor_errors: list[str] = field(default_factory=list)  # table cells that read ERR!
    field_errors: list[tuple[str, str]] = field(default_factory=list)  # (kind, the line) of error values
    shown: set[str] = field(default_factory=set)  # the groups of health facts the source showed
    ev: dict[str, list[str]] = field(default_factory=dict)  # fact -> the lines that show it

    def lines(self, *keys: str) -> list[str]:
        return [x for k in keys for x in self.ev.get(k, [])]

    @property
    def target(self) -> str:
        """How nvidia-smi's `-i` names this GPU (its bus id when shown, else its index)."""
        return self.bus or (str(self.index) if self.index_known else "<its index or bus id>")

    def facts(self) -> dict[str, Any]:
        """JSON facts under the names reports and the history store read."""
        return {"index": self.index, "gpu": self.label, "uncorrectable_ecc": self.ecc_volatile,
                "uncorrectable_ecc_aggregate": self.ecc_aggregate, "remapped_pending": self.remap_pending,
                "remapped_failure": self.remap_failure, "remapped_rows_uncorrectable": self.remap_uncorrectable,
                "banks_without_spare_rows": self.banks_without_spares, "retired_pages_sbe": self.retired_sbe,
                "retired_pages_dbe": self.retired_dbe, "retired_pages_pending": self.retired_pending,
                "recovery_action": self.recovery_action or None, "reset_required": self.reset_required,
                "drain_and_reset_recommended": self.drain_and_reset, "ecc_mode": self.ecc_mode,
                "repairs": [what for what, _ in self.repairs], "clock_events_active": self.clock_events,
                "utilization": self.util, "temperature_c": self.temps.current, "sensor_errors": self.sensor_errors,
                "field_errors": [line for _, line in self.field_errors], "shown": sorted(self.shown)}


def field_error(value: str | None) -> str:
    """The kind of error nvidia-smi printed in place of a value ("" for a reading or N/A)."""
    return FIELD_ERRORS.get((value or "").strip().lower(), "")


# ---------------------------------------------------------------------------------------
# nvidia-smi -q


def _ev(gpu: QGpu, path: str) -> str:
    section = path.rpartition("/")[0]
    return f"{gpu.label} [{section}] {gpu.line(path)}" if section else f"{gpu.label} {gpu.line(path)}"


def _leaf(gpu: QGpu, name: str) -> str | None:
    """Path of the first field named `name` (any case) outside MIG device / process sections."""
    low = name.lower()
    return next((p for p in gpu.fields if p.rpartition("/")[2].lower() == low and not p.startswith(_OUTSIDE_GPU)),
                None)


def _uncorrectable(gpu: QGpu, scope: str) -> tuple[int | None, list[str]]:
    """Uncorrectable ECC of `scope` (Volatile / Aggregate): the SRAM/DRAM layout (Ampere and
    later, Parity and SEC-DED apart on Hopper) or the older Single/Double Bit one (its Total when
    printed); the sum and the non-zero paths."""
    total: int | None = None
    hits: list[str] = []
    double: dict[str, int] = {}
    head = f"ECC Errors/{scope}/"
    for path, value in gpu.under(head):
        rel, n = path[len(head):], to_int(value)
        if n is None:
            continue
        if rel.lower().startswith("double bit/"):
            double[path] = n
        elif "uncorrectable" in rel.lower():
            total = (total or 0) + n
            hits += [path] if n else []
    if double:
        use = {p: n for p, n in double.items() if p.lower().endswith("/total")} or double
        total = (total or 0) + sum(use.values())
        hits += [p for p, n in use.items() if n]
    return total, hits


class _QView:
    """Reads one -q GPU block into a GpuHealth."""

    def __init__(self, gpu: QGpu) -> None:
        self.gpu = gpu
        self.h = GpuHealth(gpu.index, gpu.label, gpu.bus_id, gpu.index_known)

    def path_value(self, group: str, key: str, path: str | None, conv: Callable[[Any], Any]) -> Any:
        """The converted value of `path`, its evidence kept under `key`; the group counts as shown
        when the field holds a reading."""
        if not path:
            return None
        value = conv(self.gpu.get(path))
        if value is not None:
            self.h.shown.add(group)
            self.h.ev[key] = [_ev(self.gpu, path)]
        return value

    def memory(self) -> None:
        gpu, h = self.gpu, self.h
        h.ecc_volatile, vol = _uncorrectable(gpu, "Volatile")
        h.ecc_aggregate, agg = _uncorrectable(gpu, "Aggregate")
        if h.ecc_volatile is not None or h.ecc_aggregate is not None:
            h.shown.add("ecc")
        h.ev["ecc_volatile"], h.ev["ecc_aggregate"] = [_ev(gpu, p) for p in vol], [_ev(gpu, p) for p in agg]
        h.remap_pending = self.path_value("remap", "remap_pending", "Remapped Rows/Pending", to_bool)
        h.remap_failure = self.path_value("remap", "remap_failure", "Remapped Rows/Remapping Failure Occurred",
                                          to_bool)
        h.remap_uncorrectable = self.path_value("remap", "remap_uncorrectable", "Remapped Rows/Uncorrectable Error",
                                                to_int)
        h.banks_without_spares = self.path_value(
            "remap", "banks_without_spares", "Remapped Rows/Bank Remap Availability Histogram/None", to_int)
        for key, suffix in (("retired_sbe", "single bit ecc"), ("retired_dbe", "double bit ecc")):
            path = next((p for p, v in gpu.under("Retired Pages") if p.split("/")[1].lower() == suffix
                         and to_int(v) is not None), None)
            setattr(h, key, self.path_value("retired", key, path, to_int))
        pending = next((p for p, _ in gpu.under("Retired Pages") if p.rpartition("/")[2].lower().startswith("pending")),
                       None)
        h.retired_pending = self.path_value("retired", "retired_pending", pending, to_bool)
        for leaf, what, code in REPAIR_FLAGS:
            if self.path_value("repair", what, _leaf(gpu, leaf), to_bool):
                h.repairs.append((what, code))

    def requests(self) -> None:
        gpu, h = self.gpu, self.h
        h.recovery_action = self.path_value("recovery", "recovery_action", _leaf(gpu, "GPU Recovery Action"),
                                            _text) or ""
        h.reset_required = self.path_value("reset", "reset_required", _leaf(gpu, "Reset Required"), to_bool)
        h.drain_and_reset = self.path_value("reset", "drain_and_reset", _leaf(gpu, "Drain and Reset Recommended"),
                                            to_bool)
        h.ecc_mode = self.path_value("ecc_mode", "ecc_mode", "ECC Mode/Current", to_bool)
        h.ecc_mode_pending = self.path_value("ecc_mode", "ecc_mode_pending", "ECC Mode/Pending", to_bool)

    def clocks(self) -> None:
        gpu, h = self.gpu, self.h
        for path, value in gpu.under("Clocks Event Reasons"):
            state = to_bool(value)
            if state is not None:
                h.shown.add("clocks")
            if state is True:
                name = path.partition("/")[2]
                h.clock_events.append(name)
                h.ev[name] = [_ev(gpu, path)]
        util = "Utilization/Gpu" if "Utilization/Gpu" in gpu.fields else "Utilization/GPU"
        h.util = to_int(gpu.get(util))
        h.ev["util"] = [_ev(gpu, util)] if util in gpu.fields else []

    def temperature(self) -> None:
        t = self.h.temps
        for attr, label in TEMP_LABELS:
            setattr(t, attr, self.path_value("temperature", f"temp.{attr}", f"Temperature/{label}", to_int))

    def power(self) -> None:
        h = self.h
        for section in ("GPU Power Readings", "Power Readings"):
            limit = next((f"{section}/{k}" for k in ("Current Power Limit", "Enforced Power Limit", "Power Limit")
                          if f"{section}/{k}" in self.gpu.fields), None)
            h.power_limit = self.path_value("power", "power_limit", limit, _watts)
            h.default_power_limit = self.path_value("power", "default_power_limit",
                                                    f"{section}/Default Power Limit", _watts)
            if h.power_limit is not None:
                return

    def errors(self) -> None:
        """Fields that hold an error in place of a reading: `GPU requires reset` / `GPU is lost`
        anywhere in the block, `Unknown Error` in a section gpu.health reads."""
        gpu, h = self.gpu, self.h
        for path, value in gpu.fields.items():
            kind = field_error(value)
            if not kind or path.startswith(_OUTSIDE_GPU):
                continue
            if kind == "unknown_error" and not path.startswith(HEALTH_SECTIONS):
                continue
            h.field_errors.append((kind, _ev(gpu, path)))


def _text(value: Any) -> str | None:
    """A text reading: None for N/A and for an error printed in its place."""
    v = clean(None if value is None else str(value))
    return v if v and not field_error(v) else None


def _watts(value: Any) -> float | None:
    m = re.match(r"^\s*(\d+(?:\.\d+)?)\s*W\b", clean(None if value is None else str(value)))
    return float(m.group(1)) if m else None


def from_q(gpu: QGpu) -> GpuHealth:
    view = _QView(gpu)
    view.memory()
    view.requests()
    view.clocks()
    view.temperature()
    view.power()
    view.errors()
    return view.h


# ---------------------------------------------------------------------------------------
# --query-gpu CSV, default table


def from_csv(row: dict[str, str], position: int) -> GpuHealth:
    idx = to_int(row.get("index"))
    index = position if idx is None else idx
    bus = clean(row.get("pci.bus_id"))
    h = GpuHealth(index, f"GPU {index} ({bus})" if bus else f"GPU {index}", bus)

    def get(name: str, key: str, conv: Callable[[Any], Any], group: str = "") -> Any:
        raw = row.get(name)
        value = conv(raw)
        if value is not None:
            h.ev[key] = h.ev.get(key, []) + [f"{h.label} {name}={raw}"]
            if group:
                h.shown.add(group)
        elif field_error(raw):
            h.field_errors.append((field_error(raw), f"{h.label} {name}={raw}"))
        return value

    h.ecc_volatile = get("ecc.errors.uncorrected.volatile.total", "ecc_volatile", to_int, "ecc")
    h.ecc_aggregate = get("ecc.errors.uncorrected.aggregate.total", "ecc_aggregate", to_int, "ecc")
    h.remap_pending = get("remapped_rows.pending", "remap_pending", to_bool, "remap")
    h.remap_failure = get("remapped_rows.failure", "remap_failure", to_bool, "remap")
    h.remap_uncorrectable = get("remapped_rows.uncorrectable", "remap_uncorrectable", to_int, "remap")
    h.banks_without_spares = get("remapped_rows.histogram.none", "banks_without_spares", to_int, "remap")
    h.retired_sbe = get("retired_pages.single_bit_ecc.count", "retired_sbe", to_int, "retired")
    h.retired_dbe = get("retired_pages.double_bit.count", "retired_dbe", to_int, "retired")
    h.retired_pending = get("retired_pages.pending", "retired_pending", to_bool, "retired")
    h.recovery_action = get("gpu_recovery_action", "recovery_action", _text, "recovery") or ""
    h.reset_required = get("reset_status.reset_required", "reset_required", to_bool, "reset")
    h.drain_and_reset = get("reset_status.drain_and_reset_recommended", "drain_and_reset", to_bool, "reset")
    h.ecc_mode = get("ecc.mode.current", "ecc_mode", to_bool, "ecc_mode")
    h.ecc_mode_pending = get("ecc.mode.pending", "ecc_mode_pending", to_bool, "ecc_mode")
    h.power_limit = get("enforced.power.limit", "power_limit", _watts, "power")
    h.default_power_limit = get("power.default_limit", "default_power_limit", _watts, "power")
    h.temps.current = get("temperature.gpu", "temp.current", to_int)
    what, code = REPAIR_FLAGS[0][1:]
    if get("ecc.errors.uncorrected.aggregate.sram.thresholdexceeded", what, to_bool, "repair"):
        h.repairs.append((what, code))
    for fld, name in CLOCK_EVENTS.items():
        if get(f"clocks_event_reasons.{fld}", name, to_bool, "clocks") or \
                get(f"clocks_throttle_reasons.{fld}", name, to_bool, "clocks"):
            h.clock_events.append(name)
    h.util = get("utilization.gpu", "util", to_int)
    return h


def from_table(row: dict[str, Any]) -> GpuHealth:
    bus = str(row.get("bus_id") or "")
    h = GpuHealth(row["index"], f"GPU {row['index']} ({bus or '?'})", bus)
    block = [f"{h.label} {ln}" for ln in (row.get("lines") or [])[:2]] or [h.label]
    h.sensor_errors = [k for k in ("fan", "temp", "perf", "power_usage", "power_cap", "memory_used", "util",
                                   "ecc_uncorr") if "ERR!" in str(row.get(k) or "")]
    h.ecc_volatile = to_int(row.get("ecc_uncorr"))
    h.shown = {"table"}  # the table's cells: ECC and ERR! sensors
    h.ev = {"sensor_errors": block, "ecc_volatile": block}
    return h


__all__ = ["CLOCK_EVENTS", "FIELD_ERRORS", "HEALTH_SECTIONS", "REPAIR_FLAGS", "GpuHealth", "Temps", "field_error",
           "from_csv", "from_q", "from_table"]
