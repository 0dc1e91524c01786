"""GPU health and driver checks, from `nvidia-smi -q` and the NVML probe.

gpu.health  per GPU: uncorrectable ECC (volatile, aggregate), row remapping (pending, failed),
            retired pages, the driver's recovery action / reset flags, memory repair flags,
            hardware clock slowdowns; the default `nvidia-smi` table in analyze (ERR! sensors,
            volatile uncorrectable ECC).
gpu.driver  driver / CUDA / NVML versions (optionally pinned by the profile) and the tool
            errors that mean the driver stack is broken (version mismatch, driver not loaded,
            no devices, NVML library missing).

Parsing lives in `_smi_q` (pure); grading here reads thresholds from the profile's [gpu].
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from preflight.checks._smi_q import (
    PROBE_NVML,
    PROBE_Q,
    QGpu,
    QReport,
    ToolError,
    clean,
    error_for,
    find_tool_errors,
    looks_like_q,
    parse_q,
    to_bool,
    to_int,
)
from preflight.model import CaptureState, Result, Status, worst
from preflight.registry import REGISTRY, Check, CheckContext, Format, register, register_format

EVIDENCE_MAX = 30  # evidence lines kept per result (display limit, not a grading threshold)

# Errors that mean the driver stack itself is broken (graded by gpu.driver).
DRIVER_ERRORS = ("version_mismatch", "no_driver", "no_devices", "library_missing", "nvml_init")


@dataclass
class Finding:
    status: Status
    where: str  # "GPU 3 (00000000:9B:00.0)" or "node"
    what: str
    evidence: list[str] = field(default_factory=list)
    remedy: str = ""


def combine(ctx: CheckContext, findings: list[Finding], ok_summary: str, facts: dict[str, Any],
            ok_evidence: Iterable[str] = ()) -> Result:
    """One Result from findings: the worst status, the worst findings named in the summary."""
    if not findings:
        return ctx.result(Status.PASS, ok_summary, evidence=list(ok_evidence)[:EVIDENCE_MAX], facts=facts)
    ordered = sorted(findings, key=lambda f: -f.status.rank)
    status = worst([f.status for f in ordered])
    top = [f for f in ordered if f.status is status]
    parts = [f"{f.where}: {f.what}" if f.where else f.what for f in top[:2]]
    summary = "; ".join(parts)
    if len(ordered) > len(parts):
        rest = len(ordered) - len(parts)
        summary += f" (+{rest} more finding{'s' if rest > 1 else ''})"
    evidence: list[str] = []
    for f in ordered:
        for e in f.evidence:
            if e not in evidence:
                evidence.append(e)
    if len(evidence) > EVIDENCE_MAX:
        cut = len(evidence) - EVIDENCE_MAX + 1
        evidence = evidence[: EVIDENCE_MAX - 1] + [f"... {cut} more evidence lines"]
    remedy = " | ".join(dict.fromkeys(f.remedy for f in ordered if f.remedy))
    return ctx.result(status, summary, evidence=evidence, remedy=remedy, facts=facts)


def _prov(ctx: CheckContext, key: str) -> str:
    src = ctx.profile.source(key)
    val = ctx.profile.get(key)
    return f"profile {ctx.profile.name}: {key} = {val!r}" + (f" ({src})" if src else "")


def _ev(gpu: QGpu, path: str) -> str:
    section = path.rsplit("/", 1)[0] if "/" in path else ""
    where = f"{gpu.label} [{section}]" if section else gpu.label
    return f"{where} {gpu.line(path)}"


def _leaf(gpu: QGpu, name: str) -> str | None:
    """Path of the first field named `name` outside MIG device / process sections."""
    for path in gpu.fields:
        if path.rsplit("/", 1)[-1] == name and not path.startswith(("MIG Devices", "Processes")):
            return path
    return None


# ---------------------------------------------------------------------------------------
# gpu.health: per-GPU facts from nvidia-smi -q
# ---------------------------------------------------------------------------------------


def _uncorrectable(gpu: QGpu, scope: str) -> tuple[int | None, list[str]]:
    """Sum of uncorrectable ECC counters of `scope` (Volatile / Aggregate) and the non-zero paths.

    Handles the SRAM/DRAM layout (Ampere and later: `SRAM Uncorrectable Parity`, `DRAM
    Uncorrectable`, ...) and the older Single/Double Bit layout (`Double Bit/Total`)."""
    total: int | None = None
    hits: list[str] = []
    double: dict[str, int] = {}
    for path, value in gpu.under(f"ECC Errors/{scope}"):
        rel = path[len(f"ECC Errors/{scope}/"):]
        n = to_int(value)
        if n is None:
            continue
        if rel.startswith("Double Bit/"):
            double[path] = n
        elif "uncorrectable" in rel.rsplit("/", 1)[-1].lower():
            total = (total or 0) + n
            if n:
                hits.append(path)
    if double:
        totals = {p: n for p, n in double.items() if p.endswith("/Total")}
        use = totals or double
        total = (total or 0) + sum(use.values())
        hits.extend(p for p, n in use.items() if n)
    return total, hits


def gpu_facts(gpu: QGpu) -> dict[str, Any]:
    """The health facts of one GPU (JSON-friendly)."""
    vol, _ = _uncorrectable(gpu, "Volatile")
    agg, _ = _uncorrectable(gpu, "Aggregate")
    util_path = "Utilization/Gpu" if "Utilization/Gpu" in gpu.fields else "Utilization/GPU"
    events = sorted(p.split("/", 1)[1] for p, v in gpu.under("Clocks Event Reasons") if to_bool(v) is True)
    dbe_path = _retired_dbe_path(gpu)
    pending_path = _retired_pending_path(gpu)
    reset = _leaf(gpu, "Reset Required")
    drain = _leaf(gpu, "Drain and Reset Recommended")
    return {
        "index": gpu.index,
        "bus_id": gpu.bus_id,
        "name": gpu.name,
        "uncorrectable_ecc": vol,
        "uncorrectable_ecc_aggregate": agg,
        "remapped_pending": to_bool(gpu.get("Remapped Rows/Pending")),
        "remapped_failure": to_bool(gpu.get("Remapped Rows/Remapping Failure Occurred")),
        "remapped_rows_uncorrectable": to_int(gpu.get("Remapped Rows/Uncorrectable Error")),
        "remapped_rows_correctable": to_int(gpu.get("Remapped Rows/Correctable Error")),
        "banks_without_spare_rows": to_int(gpu.get("Remapped Rows/Bank Remap Availability Histogram/None")),
        "retired_pages_dbe": to_int(gpu.get(dbe_path)) if dbe_path else None,
        "retired_pages_pending": to_bool(gpu.get(pending_path)) if pending_path else None,
        "recovery_action": clean(gpu.get("GPU Recovery Action")) or None,
        "reset_required": to_bool(gpu.get(reset)) if reset else None,
        "drain_and_reset_recommended": to_bool(gpu.get(drain)) if drain else None,
        "clock_events_active": events,
        "utilization": to_int(gpu.get(util_path)),
    }


def _retired_dbe_path(gpu: QGpu) -> str | None:
    if "Retired Pages/Double Bit ECC" in gpu.fields:
        return "Retired Pages/Double Bit ECC"
    for path, value in gpu.under("Retired Pages/Double Bit ECC"):
        if to_int(value) is not None:
            return path
    return None


def _retired_pending_path(gpu: QGpu) -> str | None:
    for path, _value in gpu.under("Retired Pages"):
        if path.rsplit("/", 1)[-1].lower().startswith("pending"):
            return path
    return None


_RECOVERY_REMEDY = (
    ("reboot", "drain the node and reboot it (the driver asks for a node reboot)"),
    ("drain and reset", "drain the node, then reset the GPU (nvidia-smi -r -i <index>) once no process uses it"),
    ("drain", "drain the node: stop peer-to-peer traffic to this GPU, then reset it (nvidia-smi -r -i <index>)"),
    ("reset", "drain the node and reset the GPU (nvidia-smi -r -i <index>) once no process uses it, or reboot"),
)


def grade_q_gpu(ctx: CheckContext, gpu: QGpu) -> list[Finding]:
    """Findings for one GPU block of nvidia-smi -q."""
    out: list[Finding] = []
    where = gpu.label
    max_ecc = ctx.profile.get("gpu.max_uncorrectable_ecc", 0)
    max_pages = ctx.profile.get("gpu.max_retired_pages", 0)

    # the driver's own verdict (590 layout), then the older reset flags
    action = clean(gpu.get("GPU Recovery Action"))
    if action and action.lower() != "none":
        remedy = next((r for k, r in _RECOVERY_REMEDY if k in action.lower()),
                      f"drain the node and carry out the driver's recovery action ({action})")
        out.append(Finding(Status.FAIL, where, f"driver requests recovery action {action!r}",
                           [_ev(gpu, "GPU Recovery Action")], remedy.replace("<index>", str(gpu.index))))
    for name, what, remedy in (
        ("Reset Required", "GPU reset required",
         "drain the node and reset the GPU (nvidia-smi -r -i <index>) once no process uses it, or reboot"),
        ("Drain and Reset Recommended", "drain and reset recommended",
         "drain the node, then reset the GPU (nvidia-smi -r -i <index>)"),
    ):
        path = _leaf(gpu, name)
        if path and to_bool(gpu.get(path)) is True:
            out.append(Finding(Status.FAIL, where, what, [_ev(gpu, path)], remedy.replace("<index>", str(gpu.index))))

    # row remapping (A100/H100 and later)
    rows_unc = to_int(gpu.get("Remapped Rows/Uncorrectable Error"))
    rows_ev = [_ev(gpu, "Remapped Rows/Uncorrectable Error")] if rows_unc else []
    if to_bool(gpu.get("Remapped Rows/Remapping Failure Occurred")) is True:
        out.append(Finding(Status.FAIL, where, "row remapping failed (no spare rows left for a bad row)",
                           [_ev(gpu, "Remapped Rows/Remapping Failure Occurred"), *rows_ev],
                           "drain the node and RMA the GPU: its memory can no longer repair itself"))
    if to_bool(gpu.get("Remapped Rows/Pending")) is True:
        n = f" ({rows_unc} rows remapped for uncorrectable errors)" if rows_unc else ""
        out.append(Finding(Status.FAIL, where, f"row remap pending{n}",
                           [_ev(gpu, "Remapped Rows/Pending"), *rows_ev],
                           f"drain until a GPU reset activates the remap: reset GPU {gpu.index} "
                           f"(nvidia-smi -r -i {gpu.index}) or reboot, then return the node to service"))
    none_banks = to_int(gpu.get("Remapped Rows/Bank Remap Availability Histogram/None"))
    if none_banks:
        path = "Remapped Rows/Bank Remap Availability Histogram/None"
        out.append(Finding(Status.WARN, where, f"{none_banks} memory bank(s) have no spare rows left",
                           [_ev(gpu, path)],
                           "the next uncorrectable error in those banks cannot be remapped: plan an RMA"))

    # uncorrectable ECC
    vol, vol_hits = _uncorrectable(gpu, "Volatile")
    agg, agg_hits = _uncorrectable(gpu, "Aggregate")
    if vol is not None and vol > max_ecc:
        out.append(Finding(Status.FAIL, where, f"{vol} volatile uncorrectable ECC error(s)",
                           [*(_ev(gpu, p) for p in vol_hits), _prov(ctx, "gpu.max_uncorrectable_ecc")],
                           f"drain; reset GPU {gpu.index} or reboot to clear them; if they come back, check "
                           "Remapped Rows / Retired Pages and RMA the GPU"))
    elif agg is not None and agg > max_ecc:
        out.append(Finding(Status.WARN, where, f"{agg} uncorrectable ECC error(s) in the GPU's lifetime (aggregate)",
                           [*(_ev(gpu, p) for p in agg_hits), _prov(ctx, "gpu.max_uncorrectable_ecc")],
                           "none since the last reset: check that the bad memory was retired (Remapped Rows, "
                           "or Retired Pages on older GPUs), watch for new errors, RMA the GPU if they recur"))
    for path, what, status, remedy in (
        ("ECC Errors/Aggregate/SRAM Threshold Exceeded", "SRAM uncorrectable error threshold exceeded", Status.FAIL,
         "drain the node and RMA the GPU (SRAM errors past the threshold)"),
        ("ECC Errors/Unrepairable Memory", "unrepairable memory reported", Status.FAIL,
         "drain the node and RMA the GPU"),
        ("ECC Errors/Channel Repair Pending", "memory channel repair pending", Status.FAIL,
         f"drain until a reset applies the repair: reset GPU {gpu.index} (nvidia-smi -r -i {gpu.index}) or reboot"),
        ("ECC Errors/TPC Repair Pending", "TPC repair pending", Status.FAIL,
         f"drain until a reset applies the repair: reset GPU {gpu.index} (nvidia-smi -r -i {gpu.index}) or reboot"),
    ):
        if to_bool(gpu.get(path)) is True:
            out.append(Finding(status, where, what, [_ev(gpu, path)], remedy))

    # dynamic page retirement (pre-Ampere)
    pending = _retired_pending_path(gpu)
    if pending and to_bool(gpu.get(pending)) is True:
        out.append(Finding(Status.FAIL, where, "page retirement pending", [_ev(gpu, pending)],
                           f"drain; reset GPU {gpu.index} or reboot so the pending page retirement takes effect"))
    dbe = _retired_dbe_path(gpu)
    dbe_n = to_int(gpu.get(dbe)) if dbe else None
    if dbe and dbe_n is not None and dbe_n > max_pages:
        out.append(Finding(Status.FAIL, where, f"{dbe_n} page(s) retired after double-bit ECC errors",
                           [_ev(gpu, dbe), _prov(ctx, "gpu.max_retired_pages")],
                           "the GPU's memory has failed before: RMA it when past NVIDIA's page retirement limit, "
                           "or raise gpu.max_retired_pages in a site profile if the site accepts it"))

    # hardware clock slowdowns: an instant reading, graded when the GPU is working
    busy_pct = ctx.profile.get("gpu.busy_util_pct", 1)
    warn_busy = set(ctx.profile.get("gpu.clock_events_warn") or [])
    warn_always = set(ctx.profile.get("gpu.clock_events_warn_idle") or [])
    util_path = "Utilization/Gpu" if "Utilization/Gpu" in gpu.fields else "Utilization/GPU"
    util = to_int(gpu.get(util_path))
    busy = util is None or util >= busy_pct
    active = [p for p, v in gpu.under("Clocks Event Reasons") if to_bool(v) is True]
    flagged = [p for p in active if p.split("/", 1)[1] in warn_always or (busy and p.split("/", 1)[1] in warn_busy)]
    if flagged:
        names = ", ".join(p.split("/", 1)[1] for p in flagged)
        ev = [_ev(gpu, p) for p in flagged]
        if util is not None:
            ev.append(_ev(gpu, util_path))
        ev.append(_prov(ctx, "gpu.clock_events_warn" if busy else "gpu.clock_events_warn_idle"))
        out.append(Finding(Status.WARN, where, f"hardware clock slowdown active ({names})", ev,
                           "check cooling (inlet air, fans, heatsink) and power (PSU redundancy, the baseboard's "
                           "power-brake signal); `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER` shows which"))
    return out


def _missing_tooling(ctx: CheckContext, probe: str, check_id: str) -> Result | None:
    """SKIP/FAIL for a probe whose tool is missing (the engine does this in run mode)."""
    cap = ctx.captures.get(probe)
    if cap is None or cap.state is not CaptureState.MISSING:
        return None
    tool = cap.argv[0] if cap.argv else probe
    if ctx.profile.requires_tool(tool):
        return ctx.result(Status.FAIL, f"no GPU tooling: {tool} is missing and profile {ctx.profile.name} requires it",
                          evidence=[cap.reason, _prov(ctx, "tools.required")],
                          remedy=f"install the NVIDIA driver (it ships {tool}) on {ctx.node}")
    return ctx.result(Status.SKIP, f"{tool} not found; {check_id} not checked", evidence=[cap.reason])


def _not_run(ctx: CheckContext, probe: str) -> Result | None:
    """ERROR for a probe that timed out or could not start (the engine does this in run mode)."""
    cap = ctx.captures.get(probe)
    if cap is None or cap.state not in (CaptureState.TIMEOUT, CaptureState.FAILED):
        return None
    return ctx.result(Status.ERROR, f"{probe} did not complete: {cap.reason}",
                      evidence=[cap.reason, *cap.stdout.splitlines()[-3:]],
                      remedy=f"run `{' '.join(cap.argv)}` by hand on {ctx.node}; a hung nvidia-smi usually means a "
                             "hung driver or GPU (check dmesg for Xids; reset the GPU or reboot)")


def _grade_q(ctx: CheckContext, text: str, truncated: bool) -> tuple[list[Finding], dict[str, Any], int]:
    report = parse_q(text)
    findings: list[Finding] = []
    for gpu in report.gpus:
        findings.extend(grade_q_gpu(ctx, gpu))
    lost = [e for e in report.errors if e.kind == "gpu_lost"]
    for e in lost:
        findings.append(Finding(Status.FAIL, f"GPU {e.bus_id}" if e.bus_id else "a GPU", "does not answer",
                                [e.line], e.remedy))
    attached = report.attached
    if attached is not None and len(report.gpus) + len(lost) < attached:
        findings.append(Finding(Status.ERROR, "node",
                                f"only {len(report.gpus)} of {attached} attached GPUs in the nvidia-smi -q output"
                                + (" (output truncated)" if truncated else ""),
                                [report.header_lines.get("Attached GPUs", f"Attached GPUs : {attached}")],
                                "run `nvidia-smi -q` by hand; a GPU missing from the listing is not healthy"))
    facts = {"source": "nvidia-smi -q", "driver": report.driver or None,
             "gpus": [gpu_facts(g) for g in report.gpus], "lost": [e.bus_id or e.line for e in lost]}
    return findings, facts, len(report.gpus)


def _grade_table(ctx: CheckContext, text: str) -> tuple[list[Finding], dict[str, Any], int]:
    from preflight.checks.gpu import parse_smi_table  # written by the GPU inventory module

    rows = parse_smi_table(text)
    max_ecc = ctx.profile.get("gpu.max_uncorrectable_ecc", 0)
    findings: list[Finding] = []
    gpus: list[dict[str, Any]] = []
    for row in rows:
        label = f"GPU {row.get('index')} ({row.get('bus_id') or '?'})"
        raw = [str(x) for x in (row.get("lines") or [])][:2] or [label]
        ev = [f"{label} {line}" for line in raw]
        errs = [k for k in ("fan", "temp", "perf", "power_usage", "power_cap", "memory_used", "util", "ecc_uncorr")
                if "ERR!" in str(row.get(k) or "")]
        sensors = [k for k in errs if k != "fan"]
        if sensors:
            findings.append(Finding(Status.FAIL, label, f"GPU telemetry unreadable (ERR! in {', '.join(errs)})", ev,
                                    f"the GPU's own sensors cannot be read: drain, reset GPU {row.get('index')} or "
                                    "reboot; check dmesg for Xid 79 / 'fallen off the bus'"))
        elif errs:
            findings.append(Finding(Status.WARN, label, "fan reading is ERR! (fan or its tachometer failed)", ev,
                                    "the temperature still reads normally: check the fan and its connector at the "
                                    "next maintenance window and watch the GPU temperature until then"))
        ecc = to_int(str(row.get("ecc_uncorr") or ""))
        if ecc is not None and ecc > max_ecc:
            findings.append(Finding(Status.FAIL, label, f"{ecc} volatile uncorrectable ECC error(s)",
                                    [*ev, _prov(ctx, "gpu.max_uncorrectable_ecc")],
                                    f"drain; reset GPU {row.get('index')} or reboot; run `nvidia-smi -q -d ECC,"
                                    "ROW_REMAPPER` and RMA the GPU if errors recur"))
        gpus.append({"index": row.get("index"), "bus_id": row.get("bus_id"), "name": row.get("name"),
                     "uncorrectable_ecc": ecc, "remapped_pending": None, "remapped_failure": None,
                     "sensor_errors": errs})
    for e in find_tool_errors(text):
        if e.kind == "gpu_lost":
            findings.append(Finding(Status.FAIL, f"GPU {e.bus_id}" if e.bus_id else "a GPU", "does not answer",
                                    [e.line], e.remedy))
    return findings, {"source": "nvidia-smi table", "gpus": gpus}, len(rows)


def grade_health(ctx: CheckContext) -> Result:
    q = ctx.capture("nvidia-smi-q")
    table = ctx.capture("nvidia-smi-table")
    if q is None and table is None:
        early = _not_run(ctx, "nvidia-smi-q") or _missing_tooling(ctx, "nvidia-smi-q", ctx.check.id)
        if early is not None:
            return early
        return ctx.result(Status.SKIP, "no nvidia-smi output to grade", evidence=[])
    cap = q if q is not None else table
    assert cap is not None
    text = cap.text
    errors = [e for e in find_tool_errors(text) if e.kind in DRIVER_ERRORS]
    try:
        if q is not None:
            findings, facts, n = _grade_q(ctx, text, cap.truncated)
        else:
            findings, facts, n = _grade_table(ctx, text)
    except ImportError as exc:
        return ctx.result(Status.ERROR, f"the nvidia-smi table parser is unavailable: {exc}",
                          evidence=[str(exc)], remedy="grade `nvidia-smi -q` output instead")
    what = "nvidia-smi -q" if q is not None else "the nvidia-smi table"
    if n == 0 and not findings:
        if errors:
            e = errors[0]
            return ctx.result(Status.ERROR, f"GPU health not read: {e.line}",
                              evidence=[x.line for x in errors], remedy=f"{e.summary}: {e.remedy} (see gpu.driver)",
                              facts={"gpus": [], "error": e.line})
        head = [line for line in text.splitlines() if line.strip()][:3]
        rc = f" (exit code {cap.rc})" if cap.rc else ""
        return ctx.result(Status.ERROR, f"no GPU found in {what} output{rc}",
                          evidence=head or ["(empty output)"],
                          remedy=f"run `nvidia-smi -q` by hand on {ctx.node}; empty or garbled output means the "
                                 "tool or driver is in trouble",
                          facts={"gpus": []})
    if q is not None:
        ok = (f"{n} GPU(s) healthy: no uncorrectable ECC, no pending or failed row remaps, "
              "no reset or recovery requested")
    else:
        ok = (f"{n} GPU(s): no volatile uncorrectable ECC, every sensor readable (the table does not show "
              "row remapping; `nvidia-smi -q` does)")
    return combine(ctx, findings, ok, facts)


# ---------------------------------------------------------------------------------------
# gpu.driver
# ---------------------------------------------------------------------------------------

_NVML_KINDS = {
    "NVMLError_LibraryNotFound": "library_missing",
    "NVMLError_DriverNotLoaded": "no_driver",
    "NVMLError_LibRmVersionMismatch": "version_mismatch",
    "NVMLError_GpuIsLost": "gpu_lost",
}


def parse_nvml(text: str) -> dict[str, Any] | None:
    """The NVML probe's JSON object (the last JSON line of the output), or None."""
    for chunk in [text.strip(), *reversed(text.strip().splitlines())]:
        chunk = chunk.strip()
        if not chunk.startswith("{"):
            continue
        try:
            data = json.loads(chunk)
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    return None


def nvml_error(data: dict[str, Any]) -> ToolError | None:
    """The NVML probe's failure as a ToolError, None when it succeeded with GPUs."""
    if data.get("ok"):
        if not data.get("gpus"):
            return error_for("no_devices", "NVML: device count is 0")
        return None
    msg = str(data.get("error") or "NVML probe failed")
    etype = str(data.get("error_type") or "")
    line = f"NVML: {msg}" + (f" ({etype})" if etype else "")
    kind = _NVML_KINDS.get(etype)
    if kind is None:
        found = find_tool_errors(f"{etype} {msg}")
        kind = found[0].kind if found else "nvml_init"
    return error_for(kind, line)


def cuda_from_int(v: Any) -> str:
    """NVML's CUDA driver version integer (12020) as nvidia-smi prints it (12.2)."""
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        return ""
    return f"{v // 1000}.{(v % 1000) // 10}"


def _pin_ok(actual: str, pin: str) -> bool:
    """A pin matches the version or a prefix of it on a dot boundary ('535' matches 535.161.08)."""
    return actual == pin or actual.startswith(pin + ".")


def grade_driver(ctx: CheckContext) -> Result:
    q = ctx.capture("nvidia-smi-q")
    nv = ctx.capture("nvml")
    report: QReport | None = parse_q(q.text) if q is not None else None
    data = parse_nvml(nv.stdout or nv.text) if nv is not None else None

    errors: list[ToolError] = []
    if report is not None:
        errors.extend(e for e in report.errors if e.kind in DRIVER_ERRORS)
    nverr = nvml_error(data) if data is not None else None

    driver = report.driver if report is not None else ""
    cuda = report.cuda if report is not None else ""
    nvml_version = str(data.get("nvml_version") or "") if data else ""
    nvml_driver = str(data.get("driver") or "") if data else ""
    nvml_cuda = cuda_from_int(data.get("cuda_driver_version")) if data else ""
    facts: dict[str, Any] = {"driver": driver or nvml_driver or None, "cuda": cuda or nvml_cuda or None,
                             "nvml": nvml_version or None, "error": None}

    if q is None and nv is None:
        early = (_not_run(ctx, "nvidia-smi-q") or _not_run(ctx, "nvml")
                 or _missing_tooling(ctx, "nvidia-smi-q", ctx.check.id))
        if early is not None:
            early.facts = facts
            return early
        return ctx.result(Status.SKIP, "no nvidia-smi or NVML output to grade", facts=facts)

    smi_missing = q is None and (c := ctx.captures.get("nvidia-smi-q")) is not None and c.state is CaptureState.MISSING
    # no GPU stack at all: nvidia-smi missing and the NVML library absent
    if smi_missing and (nv is None or (nverr is not None and nverr.kind == "library_missing")):
        cap = ctx.captures["nvidia-smi-q"]
        facts["error"] = nverr.line if nverr else cap.reason
        ev = [cap.reason] + ([nverr.line] if nverr else [])
        tool = cap.argv[0] if cap.argv else "nvidia-smi"
        if ctx.profile.requires_tool(tool):
            return ctx.result(Status.FAIL, f"no GPU tooling: {tool} not found and the NVML library is missing",
                              evidence=[*ev, _prov(ctx, "tools.required")],
                              remedy=f"install the NVIDIA driver on {ctx.node} (kernel module, libnvidia-ml, "
                                     "nvidia-smi), then reboot", facts=facts)
        return ctx.result(Status.SKIP, f"no GPU tooling on this node ({tool} not found, NVML library missing); "
                                       f"gpu.driver not checked", evidence=ev, facts=facts)

    findings: list[Finding] = []
    smi_ok = report is not None and bool(driver) and not errors
    for e in errors:
        findings.append(Finding(Status.FAIL, "", f"{e.summary}: {e.line}", [e.line], e.remedy))
    if nverr is not None and nverr.kind != "gpu_lost":
        known = {e.kind for e in errors}
        if nverr.kind not in known:
            # nvidia-smi reads the driver fine: NVML failing only inside preflight's Python is a warning
            status = Status.WARN if smi_ok else Status.FAIL
            remedy = nverr.remedy if not smi_ok else (
                "nvidia-smi works, so the driver is fine: check that preflight's Python can load libnvidia-ml "
                "(LD_LIBRARY_PATH, container mounts) and that nvidia-ml-py is installed")
            findings.append(Finding(status, "", f"{nverr.summary}: {nverr.line}", [nverr.line], remedy))
    if errors or nverr is not None:
        facts["error"] = (errors[0].line if errors else nverr.line if nverr else None)

    if q is not None and report is not None and not driver and not errors:
        head = [line for line in q.text.splitlines() if line.strip()][:3]
        if q.rc:
            findings.append(Finding(Status.FAIL, "", f"nvidia-smi -q failed with exit code {q.rc}",
                                    head or ["(no output)"],
                                    f"run `nvidia-smi -q` by hand on {ctx.node} and check dmesg for NVRM errors"))
        elif not data or not nvml_driver:
            findings.append(Finding(Status.ERROR, "", "no driver version in the nvidia-smi -q output",
                                    head or ["(empty output)"],
                                    f"run `nvidia-smi -q` by hand on {ctx.node}; garbled output is not graded"))

    if driver and nvml_driver and driver != nvml_driver:
        findings.append(Finding(Status.WARN, "", f"nvidia-smi reports driver {driver} but NVML reports {nvml_driver}",
                                [report.header_lines.get("Driver Version", driver) if report else driver,
                                 f"NVML driver: {nvml_driver}"],
                                "two driver libraries are visible (container mounts, LD_LIBRARY_PATH): keep one"))

    the_driver = driver or nvml_driver
    the_cuda = cuda or nvml_cuda
    pin_d = str(ctx.profile.get("gpu.driver_version") or "").strip()
    pin_c = str(ctx.profile.get("gpu.cuda_version") or "").strip()
    if pin_d and the_driver and not _pin_ok(the_driver, pin_d):
        src = report.header_lines.get("Driver Version") if report and driver else f"NVML driver: {the_driver}"
        findings.append(Finding(Status.FAIL, "", f"driver {the_driver} is not the pinned {pin_d}",
                                [src or the_driver, _prov(ctx, "gpu.driver_version")],
                                f"install driver {pin_d} (and the matching fabric manager), or update the profile pin"))
    if pin_c and the_cuda and not _pin_ok(the_cuda, pin_c):
        src = report.header_lines.get("CUDA Version") if report and cuda else f"NVML CUDA driver version: {the_cuda}"
        findings.append(Finding(Status.FAIL, "", f"CUDA driver version {the_cuda} is not the pinned {pin_c}",
                                [src or the_cuda, _prov(ctx, "gpu.cuda_version")],
                                f"install the driver branch that provides CUDA {pin_c}, or update the profile pin"))

    parts = [f"driver {the_driver}" if the_driver else "", f"CUDA {the_cuda}" if the_cuda else "",
             f"NVML {nvml_version}" if nvml_version else ""]
    ok = ", ".join(p for p in parts if p) or "driver stack answers"
    ok_ev = [line for line in (report.header_lines.get("Driver Version"), report.header_lines.get("CUDA Version"))
             if line] if report else []
    if not findings and not the_driver:
        return ctx.result(Status.ERROR, "no driver version found in the captures", evidence=ok_ev, facts=facts,
                          remedy=f"run `nvidia-smi -q` by hand on {ctx.node}")
    return combine(ctx, findings, ok, facts, ok_evidence=ok_ev)


# ---------------------------------------------------------------------------------------
# Formats and registration
# ---------------------------------------------------------------------------------------

_SMI_OWN_MESSAGES = re.compile(
    r"Failed to initialize NVML:|NVIDIA-SMI has failed because|^No devices were found|"
    r"Unable to determine the device handle for", re.M)
_LOG_PREFIX = re.compile(r"^\s*(\[[\d .:]+\]|\w{3} [ \d]\d \d\d:\d\d:\d\d |\d{4}-\d\d-\d\dT)", re.M)


def looks_like_smi_error(text: str) -> bool:
    """A short nvidia-smi output that is only its error message (no GPU listing, not a log)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines or len(lines) > 12 or looks_like_q(text):
        return False
    if _LOG_PREFIX.search(text):
        return False
    return bool(_SMI_OWN_MESSAGES.search(text))


def _looks_like_nvml(text: str) -> bool:
    t = text.strip()
    return t.startswith("{") and '"nvml_version"' in t and '"ok"' in t


register_format(Format("nvidia-smi-q", detect=looks_like_q, description="nvidia-smi -q", priority=60))
register_format(Format("nvidia-smi-error", detect=looks_like_smi_error, probe="nvidia-smi-q", priority=30,
                       description="nvidia-smi error message (driver not loaded, version mismatch, no devices)"))
if "nvml" not in REGISTRY.formats:  # normally declared by the GPU inventory module
    register_format(Format("nvml", detect=_looks_like_nvml, description="preflight NVML probe JSON", priority=60))

register(Check(
    id="gpu.health", title="GPU health (ECC, row remapping, recovery action)", grade=grade_health,
    probes=(PROBE_Q,), required=("nvidia-smi-q",),
    profile_keys={"gpu.max_uncorrectable_ecc": int, "gpu.max_retired_pages": int,
                  "gpu.clock_events_warn": list, "gpu.clock_events_warn_idle": list, "gpu.busy_util_pct": int},
    formats=("nvidia-smi-q", "nvidia-smi-table"),
    catches="uncorrectable ECC, pending/failed row remaps, retired pages, driver recovery action / reset "
            "required, memory repair pending, HW clock slowdown, ERR! sensors",
    node_local=True, in_run=True))

register(Check(
    id="gpu.driver", title="GPU driver, CUDA and NVML", grade=grade_driver,
    probes=(PROBE_Q, PROBE_NVML), required=(),
    profile_keys={"gpu.driver_version": str, "gpu.cuda_version": str},
    formats=("nvidia-smi-q", "nvml"),
    catches="driver/library version mismatch, driver not loaded, no devices, NVML library missing, "
            "driver or CUDA version off the profile pin",
    node_local=True, in_run=True))

__all__ = ["DRIVER_ERRORS", "Finding", "combine", "cuda_from_int", "gpu_facts", "grade_driver", "grade_health",
           "grade_q_gpu", "looks_like_smi_error", "nvml_error", "parse_nvml"]
