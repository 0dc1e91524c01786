"""gpu.health: per-GPU health graded from whichever source shows it.

Per GPU: uncorrectable ECC (volatile, aggregate), row remapping (pending, failed, banks without
spares), retired pages (pending, table full), the driver's recovery action and reset flags,
memory repair flags, ECC mode, hardware clock slowdowns, temperatures past the GPU's own
thresholds, a power limit below the default, unreadable sensors and fields, refused resets.
Sources (checks.gpu_health_views): `nvidia-smi -q` (whole or any `-d`/`-i`/grep fragment), the
`--query-gpu` CSV (every health column it carries) and the default table. A source that shows
no health fact at all is SKIP "nothing to grade", never PASS. A fragment is read for what it
shows: its PASS names the groups it graded, the health sections it does not show (`-d ECC` shows
no remapped rows) and what it cannot tell of the GPU count (no GPU headers, no `Attached GPUs`,
one GPU of several); those are in the facts too (`not_shown`, `gpu_count`).

Every finding has a code (checks/policy.toml gives its status); the thresholds come
from the profile (`gpu.*` keys) or from the GPU's own readings (its slowdown temperature).
The driver stack itself is graded by gpu.driver (checks.gpu_driver).
"""

from __future__ import annotations

import re
import sys
from typing import Any

from preflight import nvml_probe
from preflight.findings import Findings
from preflight.model import Result
from preflight.parsers.nvsmi_csv import QueryCsv
from preflight.parsers.nvsmi_errors import ToolError
from preflight.parsers.nvsmi_q import QReport
from preflight.parsers.nvsmi_table import SmiTable
from preflight.probes import Probe
from preflight.profile import Profile
from preflight.registry import Check, CheckContext, register
from preflight.remote import module_text

from .gpu_health_views import CLOCK_EVENTS, GpuHealth, from_csv, from_q, from_table

PROBE_Q = Probe.of("nvidia-smi-q", ["nvidia-smi", "-q"], timeout=20.0)
# the stdlib-only probe ships with the bundle, as `python3 -c <its text>` (nothing of ours is installed on a node)
PROBE_NVML = Probe.of("nvml", [sys.executable, "-c", nvml_probe.shipped(module_text(nvml_probe))], timeout=20)

# Errors that mean the driver stack itself is broken (graded by gpu.driver).
DRIVER_ERRORS = ("version_mismatch", "no_driver", "no_devices", "library_missing", "nvml_init")
_HEALTH_COLUMNS = ("ecc.errors", "remapped_rows", "retired_pages", "reset_status", "gpu_recovery", "clocks_event",
                   "clocks_throttle")
# the driver's recovery action (normalised) -> its code and what to do (NVML nvmlDeviceGetGpuRecoveryAction)
_RECOVERY = {
    "reset": ("gpu.health/recovery-reset", "drain the node and reset the GPU (nvidia-smi -r -i <gpu>) once no "
                                           "process uses it, or reboot"),
    "gpu reset": ("gpu.health/recovery-reset", ""),
    "reboot": ("gpu.health/recovery-reboot", "drain the node and reboot it (the driver asks for a node reboot)"),
    "node reboot": ("gpu.health/recovery-reboot", ""),
    "system reboot": ("gpu.health/recovery-reboot", ""),
    "drain p2p": ("gpu.health/recovery-drain-p2p", "drain the node: stop peer-to-peer traffic to this GPU, then "
                                                   "reset it (nvidia-smi -r -i <gpu>)"),
    "drain and reset": ("gpu.health/recovery-drain-and-reset", "drain the node, then reset the GPU "
                                                               "(nvidia-smi -r -i <gpu>) once no process uses it"),
    "bus reset": ("gpu.health/recovery-bus-reset", "drain the node and reset the GPU's PCIe bus (or reboot)"),
    "recover imex domain": ("gpu.health/recovery-imex-domain", "drain the node and recover its IMEX domain "
                                                               "(restart nvidia-imex on the domain's nodes)"),
}
_NO_ACTION = ("none", "no action needed")


def _prov(prof: Profile, key: str) -> str:
    src = prof.source(key)
    return f"profile {prof.name}: {key} = {prof.get(key)!r}" + (f" ({src})" if src else "")


def _num(prof: Profile, key: str) -> int | None:
    value = prof.get(key)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _reset(h: GpuHealth) -> str:
    if not h.bus and not h.index_known:
        return "reset the GPU (nvidia-smi -r -i <its index or bus id>) or reboot"
    return f"reset GPU {h.index if h.index_known else h.target} (nvidia-smi -r -i {h.target}) or reboot"


# ---------------------------------------------------------------------------------------
# Rules over one view


def _remaps(h: GpuHealth, f: Findings) -> None:
    if h.remap_failure:
        f.add("gpu.health/remap-failure", f"{h.label}: row remapping failed (no spare rows left for a bad row)",
              h.lines("remap_failure", "remap_uncorrectable"),
              "drain the node and RMA the GPU: its memory can no longer repair itself")
    if h.remap_pending:
        n = f" ({h.remap_uncorrectable} rows remapped for uncorrectable errors)" if h.remap_uncorrectable else ""
        f.add("gpu.health/remap-pending", f"{h.label}: row remap pending{n}",
              h.lines("remap_pending", "remap_uncorrectable"),
              f"drain until a GPU reset activates the remap: {_reset(h)}, then return the node to service "
              "(not an RMA)")
    if h.banks_without_spares:
        f.add("gpu.health/banks-without-spare-rows",
              f"{h.label}: {h.banks_without_spares} memory bank(s) have no spare rows left",
              h.lines("banks_without_spares"), "the next uncorrectable error in those banks cannot be remapped: "
                                               "plan an RMA")


def _ecc(h: GpuHealth, prof: Profile, f: Findings) -> None:
    max_ecc = _num(prof, "gpu.max_uncorrectable_ecc")
    if max_ecc is None:
        return
    if h.ecc_volatile is not None and h.ecc_volatile > max_ecc:
        f.add("gpu.health/volatile-uncorrectable-ecc", f"{h.label}: {h.ecc_volatile} volatile uncorrectable ECC "
              "error(s)", [*h.lines("ecc_volatile"), _prov(prof, "gpu.max_uncorrectable_ecc")],
              f"drain; {_reset(h)} to clear them; if they come back, check Remapped Rows / Retired Pages and "
              "RMA the GPU")
    elif h.ecc_aggregate is not None and h.ecc_aggregate > max_ecc:
        f.add("gpu.health/aggregate-uncorrectable-ecc", f"{h.label}: {h.ecc_aggregate} uncorrectable ECC error(s) "
              "in the GPU's lifetime (aggregate)", [*h.lines("ecc_aggregate"), _prov(prof, "gpu.max_uncorrectable_ecc")],
              "none since the last reset: check that the bad memory was retired (Remapped Rows, or Retired Pages on "
              "older GPUs), watch for new errors, RMA the GPU if they recur")
    for what, code in h.repairs:
        rma = code in ("gpu.health/sram-threshold-exceeded", "gpu.health/unrepairable-memory")
        f.add(code, f"{h.label}: {what}", h.lines(what),
              "drain the node and RMA the GPU" if rma else f"drain until a reset applies the repair: {_reset(h)}")
    if h.ecc_mode is False:
        f.add("gpu.health/ecc-disabled", f"{h.label}: ECC is disabled", h.lines("ecc_mode"),
              f"enable it (nvidia-smi -e 1 -i {h.target}) and reset the GPU or reboot: without ECC, memory errors "
              "corrupt results silently")
    if h.ecc_mode is not None and h.ecc_mode_pending is not None and h.ecc_mode_pending != h.ecc_mode:
        f.add("gpu.health/ecc-mode-change-pending", f"{h.label}: an ECC mode change waits for a GPU reset",
              h.lines("ecc_mode", "ecc_mode_pending"), f"{_reset(h)} to apply the pending ECC mode", proof="Pending")


def _retirement(h: GpuHealth, prof: Profile, f: Findings) -> None:
    """Dynamic page retirement (pre-Ampere): pending pages need a reset; a full table an RMA."""
    ev = h.lines("retired_sbe", "retired_dbe", "retired_pending")
    total = (h.retired_sbe or 0) + (h.retired_dbe or 0)
    table, full_pending = _num(prof, "gpu.retired_pages_table"), _num(prof, "gpu.retired_pages_full_pending")
    full = table is not None and total >= table
    nearly = bool(h.retired_pending) and full_pending is not None and total >= full_pending
    if full or nearly:
        key = "gpu.retired_pages_table" if full else "gpu.retired_pages_full_pending"
        f.add("gpu.health/retired-pages-table-full", f"{h.label}: page retirement table full ({total} pages retired"
              + (", more pending)" if h.retired_pending else ")"), [*ev, _prov(prof, key)],
              "the GPU's page retirement table is exhausted: drain the node and RMA the GPU "
              f"(NVIDIA retires at most {prof.get('gpu.retired_pages_table')} pages per GPU)")
        return
    if h.retired_pending:
        f.add("gpu.health/retired-pages-pending", f"{h.label}: page retirement pending", ev,
              f"drain; {_reset(h)} so the pending pages are retired", proof=h.lines("retired_pending"))
    max_pages = _num(prof, "gpu.max_retired_pages")
    if h.retired_dbe is not None and max_pages is not None and h.retired_dbe > max_pages:
        f.add("gpu.health/retired-pages-dbe", f"{h.label}: {h.retired_dbe} page(s) retired after double-bit ECC "
              "errors", [*h.lines("retired_dbe"), _prov(prof, "gpu.max_retired_pages")],
              "the GPU's memory has failed before: RMA it when past NVIDIA's page retirement limit, or raise "
              "gpu.max_retired_pages in a site profile if the site accepts it")


def _recovery(action: str) -> tuple[str, str]:
    """(code, remedy) of a recovery action; ("", "") when none is needed."""
    norm = re.sub(r"[\s_]+", " ", action.strip().lower()).removeprefix("gpu recovery action ").strip()
    if norm in _NO_ACTION:
        return "", ""
    code, remedy = _RECOVERY.get(norm, ("gpu.health/recovery-unknown", ""))
    if not remedy:
        remedy = next((r for c, r in _RECOVERY.values() if c == code and r),
                      f"the driver asks for recovery action {action!r}, which preflight does not know: read NVIDIA's "
                      "GPU memory error management guide for it, and drain the node until it is done")
    return code, remedy


def _driver_requests(h: GpuHealth, f: Findings) -> None:
    if h.recovery_action:
        code, remedy = _recovery(h.recovery_action)
        if code:
            f.add(code, f"{h.label}: driver requests recovery action {h.recovery_action!r}",
                  h.lines("recovery_action"), remedy.replace("<gpu>", h.target))
    for flag, key, code, what in (
            (h.reset_required, "reset_required", "gpu.health/reset-required", "GPU reset required"),
            (h.drain_and_reset, "drain_and_reset", "gpu.health/drain-and-reset-recommended",
             "drain and reset recommended")):
        if flag:
            f.add(code, f"{h.label}: {what}", h.lines(key),
                  f"drain the node and reset the GPU (nvidia-smi -r -i {h.target}) once no process uses it, or reboot")


def _clocks(h: GpuHealth, prof: Profile, f: Findings) -> None:
    busy_pct = _num(prof, "gpu.busy_util_pct")
    busy = h.util is None or busy_pct is None or h.util >= busy_pct
    warn_busy = set(prof.get("gpu.clock_events_warn") or [])
    warn_always = set(prof.get("gpu.clock_events_warn_idle") or [])
    flagged = [e for e in h.clock_events if e in warn_always or (busy and e in warn_busy)]
    if flagged:
        code = "gpu.health/clock-slowdown-busy" if busy else "gpu.health/clock-slowdown-idle"
        f.add(code, f"{h.label}: hardware clock slowdown active ({', '.join(flagged)})",
              [*h.lines(*flagged), *h.lines("util"),
               _prov(prof, "gpu.clock_events_warn" if busy else "gpu.clock_events_warn_idle")],
              "check cooling (inlet air, fans, heatsink) and power (PSU redundancy, the baseboard's power-brake "
              "signal); `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER` shows which")


def _past(value: int | None, limit: int | None, margin: bool) -> bool:
    """A reading at or past a threshold: a temperature at or above it, or a margin to the limit at or
    below the threshold's margin."""
    if value is None or limit is None:
        return False
    return value <= limit if margin else value >= limit


_TEMP_LINES = ("temp.current", "temp.margin", "temp.shutdown", "temp.slowdown", "temp.max_operating",
               "temp.shutdown_margin", "temp.slowdown_margin", "temp.max_operating_margin")


def _temperature(h: GpuHealth, f: Findings) -> None:
    """The GPU's temperature against its own thresholds (the worst one it reached)."""
    t = h.temps
    cool = "check cooling (inlet air temperature, fans, airflow, heatsink contact) and the GPU's clocks"
    for code, limit, limit_margin, what in (
            ("gpu.health/temperature-shutdown", t.shutdown, t.shutdown_margin, "its shutdown temperature"),
            ("gpu.health/temperature-slowdown", t.slowdown, t.slowdown_margin, "its slowdown temperature"),
            ("gpu.health/temperature-over-max-operating", t.max_operating, t.max_operating_margin,
             "its maximum operating temperature")):
        if _past(t.current, limit, False) or _past(t.margin, limit_margin, True):
            f.add(code, f"{h.label}: GPU temperature at or past {what}", h.lines(*_TEMP_LINES),
                  f"drain the GPU until it is cool; {cool}")
            break
    if _past(t.memory, t.memory_max, False):
        f.add("gpu.health/memory-temperature-over-max", f"{h.label}: memory temperature at or past its maximum "
              "operating temperature", h.lines("temp.memory", "temp.memory_max"), cool)


def _power(h: GpuHealth, f: Findings) -> None:
    if h.power_limit is not None and h.default_power_limit is not None and h.power_limit < h.default_power_limit:
        f.add("gpu.health/power-limit-below-default",
              f"{h.label}: power limit {h.power_limit:g} W is below the default {h.default_power_limit:g} W",
              h.lines("power_limit", "default_power_limit"),
              f"the GPU runs capped: restore the default limit (nvidia-smi -pl {h.default_power_limit:g} -i {h.target}) "
              "unless the site caps power on purpose")


def _field_errors(h: GpuHealth, f: Findings) -> None:
    """Fields that read an error instead of a value, one finding per kind of error."""
    kinds: dict[str, list[str]] = {}
    for kind, line in h.field_errors:
        kinds.setdefault(kind, []).append(line)
    for kind, lines in kinds.items():
        n = f" ({len(lines)} fields)" if len(lines) > 1 else ""
        if kind == "needs_reset":
            f.add("gpu.health/needs-reset", f"{h.label}: the driver says the GPU requires a reset{n}", lines,
                  f"drain the node and {_reset(h)}")
        elif kind == "gpu_lost":
            f.add("gpu.health/gpu-lost", f"{h.label}: the driver says the GPU is lost{n}", lines,
                  "the GPU fell off the bus or hung (Xid 79 class): drain the node and reboot it; reseat or RMA the "
                  "GPU if it happens again")
        else:
            f.add("gpu.health/field-unreadable", f"{h.label}: health fields read 'Unknown Error' instead of a "
                  f"value{n}", lines, f"the driver cannot read this GPU's health: run `nvidia-smi -q -i {h.target}` "
                                     "by hand and check dmesg for Xid errors; drain the node if it persists")


_POWER_CELLS = ("power_usage", "power_cap")  # the Pwr:Usage/Cap cell


def _sensors(h: GpuHealth, f: Findings) -> None:
    sensors = [k for k in h.sensor_errors if k != "fan"]
    if sensors and set(sensors) <= set(_POWER_CELLS) and "fan" not in h.sensor_errors:
        f.add("gpu.health/power-unreadable", f"{h.label}: power reading is ERR! (temperature and memory read "
              "normally)", h.lines("sensor_errors"),
              "the power sensor read failed (often transient on passthrough VMs): read it again (`nvidia-smi -q -d "
              "POWER`); if it stays ERR! or the kernel log shows Xids for this GPU, drain and reset it", proof="ERR!")
    elif sensors:
        f.add("gpu.health/telemetry-unreadable", f"{h.label}: GPU telemetry unreadable (ERR! in "
              f"{', '.join(h.sensor_errors)})", h.lines("sensor_errors"),
              f"the GPU's own sensors cannot be read: drain, {_reset(h)}; check dmesg for Xid 79 / 'fallen off "
              "the bus'", proof="ERR!")
    elif h.sensor_errors:
        f.add("gpu.health/fan-unreadable", f"{h.label}: fan reading is ERR! (fan or its tachometer failed)",
              h.lines("sensor_errors"), "the temperature still reads normally: check the fan and its connector at "
                                        "the next maintenance window and watch the GPU temperature until then", proof="ERR!")


def grade_gpu(h: GpuHealth, prof: Profile, f: Findings) -> None:
    _driver_requests(h, f)
    _remaps(h, f)
    _ecc(h, prof, f)
    _retirement(h, prof, f)
    _clocks(h, prof, f)
    _temperature(h, f)
    _power(h, f)
    _field_errors(h, f)
    _sensors(h, f)


# ---------------------------------------------------------------------------------------
# gpu.health


def _views(ctx: CheckContext) -> tuple[str, list[GpuHealth], list[ToolError], QReport | None]:
    """The richest source that shows health facts: -q, then the CSV (when it carries health
    columns), then the table; a -q that shows none is still the source when nothing else is."""
    q: QReport | None = ctx.facts("nvidia-smi-q")
    csv: QueryCsv | None = ctx.facts("nvidia-smi-query")
    table: SmiTable | None = ctx.facts("nvidia-smi-table")
    health_cols = csv is not None and any(c.startswith(_HEALTH_COLUMNS) for c in csv.fields)
    qviews = [from_q(g) for g in q.gpus] if q is not None else []
    if q is not None and (any(v.shown or v.field_errors for v in qviews) or q.errors or not (health_cols or table)):
        return "nvidia-smi -q", qviews, q.errors, q
    if csv is not None and health_cols:
        return "the --query-gpu CSV", [from_csv(r, i) for i, r in enumerate(csv.rows)], csv.errors, None
    if table is not None:
        return "the nvidia-smi table", [from_table(r) for r in table.gpus], table.errors, None
    return "", [], [], None


def _own_lines(q: QReport | None) -> set[str]:
    """The field lines of the -q blocks (an error value there is graded on its GPU)."""
    return {line for g in q.gpus for line in g.lines.values()} if q is not None else set()


def _tool_findings(errors: list[ToolError], q: QReport | None, f: Findings) -> None:
    """The messages nvidia-smi printed instead of a GPU's data."""
    own = _own_lines(q)
    for e in errors:
        if re.sub(r"\s{2,}", " ", e.line) in own:
            continue
        gpu = f"GPU {e.bus_id or '?'}"
        detail = f" ({e.detail})" if e.detail else ""
        if e.kind == "gpu_lost":
            f.add("gpu.health/gpu-lost", f"{gpu}: {e.summary}{detail}", [e.line], e.remedy)
        elif e.kind == "needs_reset":
            f.add("gpu.health/needs-reset", f"{gpu}: {e.summary}{detail}", [e.line], e.remedy)
        elif e.kind == "reset_failed":
            f.add("gpu.health/reset-refused", f"{gpu} could not be reset" + (f": {e.detail}" if e.detail else ""),
                  [e.line], e.remedy)


def _missing_gpus(q: QReport | None, f: Findings) -> None:
    """A whole listing that stops before the attached count: a GPU missing is not healthy."""
    if q is None or q.attached is None or q.excerpt or q.selection:
        return
    named = [g for g in q.gpus if g.bus_id]
    if 1 < len(named) < q.attached:
        f.add("gpu.health/gpus-missing-from-output", f"only {len(named)} of {q.attached} attached GPUs in the "
              "nvidia-smi -q output", [q.header_lines["Attached GPUs"]],
              "run `nvidia-smi -q` by hand; a GPU missing from the listing is not healthy")


def _nothing(ctx: CheckContext, source: str, errors: list[ToolError], q: QReport | None,
             facts: dict[str, Any]) -> Result | list[Result]:
    """No GPU view with health facts and no finding: why nothing was graded."""
    driver = [e for e in errors if e.kind in DRIVER_ERRORS]
    if driver:
        return ctx.finding("gpu.health/not-read-driver-error", f"GPU health not read: {driver[0].line}",
                           evidence=[e.line for e in driver], facts=facts,
                           remedy=f"{driver[0].summary}: {driver[0].remedy} (see gpu.driver)")
    if q is not None and q.gpus:
        shown = sorted({k for g in q.gpus for k in g.fields})[:8]
        return ctx.finding("gpu.health/nothing-to-grade", "not recognised: no GPU health field in this nvidia-smi -q "
                           "output (expected ECC Errors, Remapped Rows, Retired Pages, reset/recovery flags, clock "
                           "event reasons or temperatures)", evidence=[f"fields shown: {', '.join(shown)}"],
                           facts=facts, remedy="run `nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT,PERFORMANCE` "
                                               "for the health fields")
    if ctx.options.mode == "analyze" and (q is None or not q.recognised):
        return []  # nothing about GPU health in this paste
    return ctx.finding("gpu.health/no-gpu-in-output", f"no GPU found in {source} output",
                       evidence=["no GPU block, row or health field in the output"], facts=facts,
                       remedy=f"run `nvidia-smi -q` by hand on {ctx.node}; empty or garbled output means the tool or "
                              "driver is in trouble")


# the groups of health facts a source shows, as a PASS summary names them
_GROUPS = {"recovery": "recovery action", "reset": "reset status", "remap": "remapped rows", "ecc": "ECC errors",
           "repair": "repair flags", "retired": "retired pages", "ecc_mode": "ECC mode",
           "clocks": "clock event reasons", "temperature": "temperature", "power": "power limit"}


# the -q sections gpu.health reads, as a summary names them when a fragment does not show them
_Q_SECTIONS = (("GPU Recovery Action", "recovery action"), ("GPU Reset Status", "reset status"),
               ("Remapped Rows", "remapped rows"), ("ECC Errors", "ECC errors"), ("Retired Pages", "retired pages"),
               ("Clocks Event Reasons", "clock event reasons"), ("Temperature", "temperature"))


def q_fragment(q: QReport) -> bool:
    """The -q output is a part of the whole: a grep'd or elided excerpt, a block without its GPU
    header, or a `-d SECTION` block (a whole block always starts with `Product Name`)."""
    return q.excerpt or any(not g.bus_id or "Product Name" not in g.fields for g in q.gpus)


def not_shown(q: QReport | None) -> list[str]:
    """The health sections a -q fragment does not show on any GPU ([] for whole output, where a
    section missing is one the driver does not print)."""
    if q is None or not q.gpus or not q_fragment(q):
        return []
    present = {p.partition("/")[0] for g in q.gpus for p in g.fields}
    return [name for section, name in _Q_SECTIONS if section not in present]


def gpu_count_note(q: QReport | None) -> str:
    """What the -q output cannot show of the node's GPUs ("" when it is a listing of them all)."""
    if q is None or not q.gpus or q.listing:
        return ""
    if any(not g.bus_id for g in q.gpus):
        return "GPU count not shown (an excerpt without GPU headers)"
    if q.attached is None:
        return "GPU count not shown (no Attached GPUs line)"
    if len(q.gpus) < q.attached:
        return f"{len(q.gpus)} of {q.attached} attached GPU(s) shown"
    return ""


def _ok_summary(source: str, views: list[GpuHealth], q: QReport | None = None) -> str:
    if source == "the nvidia-smi table":
        what = "volatile uncorrectable ECC and sensors (the table does not show row remapping; `nvidia-smi -q` does)"
    else:
        shown = {g for v in views for g in v.shown}
        what = ", ".join(name for g, name in _GROUPS.items() if g in shown)
    out = f"{len(views)} GPU(s) healthy in {source}: {what}"
    missing, count = not_shown(q), gpu_count_note(q)
    if missing:
        out += f"; not shown by this fragment: {', '.join(missing)}"
    return out + (f"; {count}" if count else "")


def grade_health(ctx: CheckContext) -> Result | list[Result]:
    source, views, errors, q = _views(ctx)
    if not source:
        return []  # only a CSV without health columns: gpu.inventory grades it
    graded = [h for h in views if h.shown or h.field_errors]
    f = Findings()
    for h in graded:
        grade_gpu(h, ctx.profile, f)
    _tool_findings(errors, q, f)
    _missing_gpus(q, f)
    facts = {"source": source, "gpus": [h.facts() for h in graded],
             "lost": [e.bus_id or e.line for e in errors if e.kind == "gpu_lost"]}
    if q is not None and q.command:
        facts["command"] = q.command
    qshown = q if source == "nvidia-smi -q" else None
    if not_shown(qshown):
        facts["not_shown"] = not_shown(qshown)
    if gpu_count_note(qshown):
        facts["gpu_count"] = gpu_count_note(qshown)
    if not graded and not f:
        return _nothing(ctx, source, errors, q, facts)
    return f.result(ctx, _ok_summary(source, graded, qshown), facts)


register(Check(
    id="gpu.health", title="GPU health (ECC, row remapping, retired pages, recovery action)", grade=grade_health,
    probes=(PROBE_Q,), required=("nvidia-smi-q",), inputs=("nvidia-smi-q", "nvidia-smi-query", "nvidia-smi-table"),
    profile_keys={"gpu.max_uncorrectable_ecc": int, "gpu.max_retired_pages": int, "gpu.retired_pages_table": int,
                  "gpu.retired_pages_full_pending": int, "gpu.clock_events_warn": list,
                  "gpu.clock_events_warn_idle": list, "gpu.busy_util_pct": int},
    catches="uncorrectable ECC, pending/failed row remaps, retired pages pending or table full, driver recovery "
            "action / reset required, refused resets, memory repair pending, ECC disabled, HW clock slowdown, "
            "temperature past the GPU's thresholds, power capped below default, ERR! sensors, unreadable fields",
    node_local=True, in_run=True))

__all__ = ["CLOCK_EVENTS", "DRIVER_ERRORS", "PROBE_NVML", "PROBE_Q", "GpuHealth", "from_csv", "from_q", "from_table",
           "gpu_count_note", "grade_gpu", "grade_health", "not_shown", "q_fragment"]
