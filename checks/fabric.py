"""fabric.manager: the NVSwitch fabric manager service and the GPUs' fabric registration.

On NVSwitch systems (HGX/DGX) CUDA can use the GPUs only once nvidia-fabricmanager has
programmed the switches and every GPU reports `Fabric State : Completed` with `Status :
Success` in `nvidia-smi -q`. The grader reads the facts of:
  - the service (`systemctl show`, or a pasted `systemctl status` / `is-active` / failed
    `systemctl start`, with the daemon's journal lines under it);
  - the Fabric block of every GPU in `nvidia-smi -q` (and the 590 layout's Health block);
  - the fabric manager's log or journal: NVSwitch fatal / non-fatal SXids, NVLS multicast
    team failures, aborts, restarts; the Talos wrapper's NVSwitch management-port choice.
A dead service next to a stale `Completed` state is still a failure: new jobs cannot set up
NVLink multicast and the next GPU reset will not re-register. Where the profile expects no
NVSwitch (`fabric.nvswitch = false`) and the GPUs report no fabric, nothing is required.
"""

from __future__ import annotations

from typing import Any

from preflight.findings import Findings
from preflight.model import Result, Status
from preflight.parsers.base import clean
from preflight.parsers.fabricmanager import FmEvent, FmLog, from_journal
from preflight.parsers.nvsmi_q import QReport
from preflight.parsers.systemd import UnitState
from preflight.probes import Probe
from preflight.profile import Profile
from preflight.registry import Check, CheckContext, register

from .gpu_health import DRIVER_ERRORS, PROBE_Q

UNIT = "nvidia-fabricmanager"
PROBE_FM_SERVICE = Probe.of(
    "fm-service",
    ["systemctl", "show", UNIT, "--property=LoadState,ActiveState,SubState,Result,ExecMainStatus", "--no-pager"],
    timeout=10,
)
LOG_EVIDENCE_MAX = 8  # log lines quoted per kind of event (display limit)
_HEALTHY_VALUES = {"", "healthy", "full", "false", "no", "none", "not supported"}
RESTART = (f"systemctl restart {UNIT}; if it fails again read journalctl -u {UNIT} and /var/log/fabricmanager.log "
           "(its version must equal the driver's); new CUDA jobs cannot set up NVLink until it runs")


def _quote(evs: list[FmEvent]) -> list[str]:
    lines = list(dict.fromkeys(e.quote for e in evs))[:LOG_EVIDENCE_MAX]
    if len(evs) > len(lines):
        lines.append(f"... {len(evs) - len(lines)} more such lines ({len(evs)} in all)")
    return lines


def _sxids(evs: list[FmEvent]) -> str:
    codes = sorted({e.code for e in evs if e.code is not None})
    switches = sorted({e.switch + (f" port {e.port}" if e.port is not None else "") for e in evs if e.switch})
    out = (" (SXid " + ", ".join(map(str, codes)) + ")") if codes else ""
    return out + (f" on NVSwitch {', '.join(switches[:4])}" if switches else "")


def log_findings(log: FmLog, f: Findings) -> dict[str, Any]:
    """SXids, multicast failures and aborts; a fatal error before the last restart is history."""
    starts = [i for i, e in enumerate(log.events) if e.kind == "start"]
    last = starts[-1] if starts else -1
    after = [e for e in log.events[last + 1:]]
    fatal_now, fatal_before = [e for e in after if e.kind == "fatal"], [e for e in log.events[:last + 1]
                                                                          if e.kind == "fatal"]
    if fatal_now:
        f.add(Status.FAIL, f"{len(fatal_now)} NVSwitch fatal error(s){_sxids(fatal_now)}"
              + (" since the fabric manager last started" if starts else ""), _quote(fatal_now),
              "drain the node; a fatal SXid needs the NVSwitches and GPUs reset: reboot the node (or stop the GPU "
              "clients, reset, restart nvidia-fabricmanager); RMA the baseboard if the same switch port fails again")
    if fatal_before:
        f.add(Status.WARN, f"{len(fatal_before)} NVSwitch fatal error(s){_sxids(fatal_before)} before the fabric "
              "manager's last restart", _quote(fatal_before),
              "the fabric was restarted since; watch for the same switch/port failing again")
    for kind, status, what, remedy in (
            ("multicast", Status.FAIL, "NVLS multicast team setup failed",
             "jobs using NVLink SHARP (NCCL NVLS) fail on this node: drain, restart nvidia-fabricmanager and reset "
             "the GPUs (or reboot); check that the fabric manager and driver versions match"),
            ("abort", Status.FAIL, "the fabric manager aborted",
             "read /var/log/fabricmanager.log around these lines; fix the cause (topology, driver/fabric manager "
             "version mismatch), then restart nvidia-fabricmanager"),
            ("nonfatal", Status.WARN, "NVSwitch non-fatal error(s)",
             "non-fatal SXids are corrected by the switch: no drain needed; if they repeat on the same port, "
             "schedule a reset/reboot and check the NVLink error counters"),
            ("error", Status.WARN, "other fabric manager error line(s)",
             "read /var/log/fabricmanager.log around these lines")):
        evs = log.of(kind)
        if evs:
            f.add(status, f"{len(evs)} x {what}{_sxids(evs) if kind == 'nonfatal' else ''}", _quote(evs), remedy)
    return {"log_fatal": len(fatal_now) + len(fatal_before), "log_nonfatal": len(log.of("nonfatal")),
            "log_multicast_failures": len(log.of("multicast")), "log_errors": len(log.of("error") + log.of("abort")),
            "log_restarts": len(starts), "log_configured_after_last_start":
                any(e.kind == "configured" for e in after) if log.records else None,
            "log_sxids": sorted({e.code for e in log.events if e.code is not None})}


def fabric_findings(report: QReport, f: Findings) -> tuple[list[dict[str, Any]], bool, bool]:
    """(per-GPU facts, any GPU on a fabric, every such GPU Completed/Success)."""
    gpus: list[dict[str, Any]] = []
    on_fabric, all_ok = False, True
    for gpu in report.gpus:
        if "Fabric/State" not in gpu.fields:
            continue
        state, status = clean(gpu.get("Fabric/State")), clean(gpu.get("Fabric/Status"))
        gpus.append({"index": gpu.index, "bus_id": gpu.bus_id, "state": state or "N/A", "status": status or "N/A"})
        if not state:
            continue
        on_fabric = True
        ev = [f"{gpu.label} [Fabric] {gpu.line('Fabric/State')}", f"{gpu.label} [Fabric] {gpu.line('Fabric/Status')}"]
        sl = state.lower()
        if not (sl == "completed" and status.lower() in ("", "success")):
            all_ok = False
            what, remedy = {
                "completed": (f"fabric registration finished with status {status!r}",
                              "restart nvidia-fabricmanager, then reset the GPU (or reboot); read "
                              "/var/log/fabricmanager.log for the cause"),
                "in progress": ("fabric registration still in progress",
                                "CUDA cannot use the GPU yet: wait a minute and re-run; if it stays In Progress, "
                                "restart nvidia-fabricmanager and read /var/log/fabricmanager.log"),
                "not started": ("fabric registration not started",
                                "start the fabric manager (systemctl enable --now nvidia-fabricmanager); its version "
                                "must equal the driver's"),
            }.get(sl, (f"fabric state {state!r} (status {status or 'N/A'})",
                       "restart nvidia-fabricmanager and read /var/log/fabricmanager.log"))
            f.add(Status.FAIL, f"{gpu.label}: {what}", ev, remedy)
        for path, value in gpu.under("Fabric/Health"):
            v, leaf = clean(value), path.rsplit("/", 1)[-1]
            if v.lower() not in _HEALTHY_VALUES:
                f.add(Status.FAIL if leaf == "Summary" and v.lower() == "unhealthy" else Status.WARN,
                      f"{gpu.label}: fabric health: {leaf} = {v}", [f"{gpu.label} [Fabric/Health] {gpu.line(path)}"],
                      "the NVLink fabric is degraded for this GPU: check `nvidia-smi nvlink -s`, the fabric manager "
                      "log, and reset the GPU / reboot if it persists")
    return gpus, on_fabric, all_ok


def service_findings(svc: UnitState, on_fabric_ok: bool, prov: str, f: Findings) -> None:
    """The service where the node needs a fabric manager."""
    if svc.installed is False:
        if on_fabric_ok:
            f.note(f"no local {UNIT} unit; every GPU reports fabric Completed (fabric managed outside this OS, "
                   "e.g. by the host of a VM)")
        else:
            f.add(Status.FAIL, f"{UNIT} is not installed", [*svc.lines, prov],
                  f"install the nvidia-fabricmanager package of the driver's branch (same version as the driver) "
                  f"and `systemctl enable --now {UNIT}`")
    elif svc.load == "masked":
        f.add(Status.FAIL, f"{UNIT} is masked", [*svc.lines, prov],
              f"systemctl unmask {UNIT} && systemctl enable --now {UNIT}")
    elif svc.active in ("activating", "reloading"):
        f.add(Status.FAIL, f"{UNIT} is still starting ({svc.describe()})", svc.lines,
              f"wait a minute and re-run; if it keeps restarting read journalctl -u {UNIT} and "
              "/var/log/fabricmanager.log")
    elif svc.active and svc.active != "active" or svc.sub in ("failed", "dead"):
        stale = " while the GPUs still show a stale Completed fabric state" if on_fabric_ok else ""
        what = f"starting {UNIT} failed" if svc.start_failed else f"{UNIT} is {svc.describe()}"
        f.add(Status.FAIL, what + stale, [*svc.lines, prov], RESTART)


def _not_needed(ctx: CheckContext, svc: UnitState | None, report: QReport | None, gpus: list[dict[str, Any]],
                f: Findings, prov: str, facts: dict[str, Any]) -> Result:
    """No NVSwitch expected and none reported: the fabric manager is not required here."""
    names = sorted({str(g.name) for g in (ctx.facts("nvidia-smi-table") or _NoTable()).records if g.name})
    where = f" ({', '.join(names)}: no NVSwitch)" if names else ""
    if svc is not None and svc.installed and svc.active == "active":
        return f.result(ctx, f"{UNIT} running" + (" (no NVSwitch fabric: Fabric State N/A)" if report else ""), facts,
                        svc.lines)
    if report is not None and gpus:  # nvidia-smi -q shows the GPUs on no fabric: the unit's state does not matter
        ev = [f"{g['bus_id']}: Fabric State {g['state']}" for g in gpus[:2]]
        if svc is not None and svc.active:
            f.note(f"{UNIT} is {svc.describe()} (harmless without NVSwitch)")
        return ctx.result(Status.SKIP, f"no NVSwitch fabric on this node; fabric manager not required by profile "
                                       f"{ctx.profile.name}", evidence=[*ev, *f.notes, prov], facts=facts)
    if svc is not None and svc.installed and svc.active:
        what = f"starting {UNIT} failed" if svc.start_failed else f"{UNIT} is {svc.describe()}"
        return ctx.result(Status.WARN, f"{what}; not applicable where there is no NVSwitch{where} (profile "
                                       f"{ctx.profile.name} expects none)", evidence=[*svc.lines, prov], facts=facts,
                          remedy=f"on a node without NVSwitch: disable the unit (systemctl disable {UNIT}); on an "
                                 f"NVSwitch node: {RESTART}")
    ev = [f"{g['bus_id']}: Fabric State {g['state']}" for g in gpus[:2]] + (svc.lines if svc else [])
    return ctx.result(Status.SKIP, f"no NVSwitch fabric on this node; fabric manager not required by profile "
                                   f"{ctx.profile.name}", evidence=[*ev, *f.notes, prov], facts=facts)


class _NoTable:
    records: list[Any] = []


def _prov(prof: Profile) -> str:
    nvswitch = bool(prof.get("fabric.nvswitch"))
    src = prof.source("fabric.nvswitch")
    return f"profile {prof.name}: fabric.nvswitch = {str(nvswitch).lower()}" + (f" ({src})" if src else "")


def _with_journal(svc: UnitState | None, log: FmLog | None) -> tuple[FmLog | None, bool]:
    """The fabric manager log with the daemon's lines under `systemctl status` folded in, and
    whether a fabric manager log exists at all (then the node is an NVSwitch node)."""
    fabric_log = log is not None and log.recognised
    if svc is None or not svc.journal:
        return log, fabric_log
    jlog = from_journal((j.time_text, j.message, j.line) for j in svc.journal
                        if "fabricmanager" in j.ident or "fabricmanager" in j.message)
    fabric_log = fabric_log or any(e.kind in ("fatal", "nonfatal", "multicast", "configured")
                                   for e in jlog.events) or bool(jlog.lpf_found)
    if jlog.records or jlog.wrapper_lines:
        log = jlog if log is None else FmLog(log.events + jlog.events, log.records + jlog.records,
                                             log.lpf_found + jlog.lpf_found, log.lpf_used or jlog.lpf_used,
                                             log.wrapper_lines + jlog.wrapper_lines)
    return log, fabric_log


def _fabric_facts(svc: UnitState | None, log: FmLog | None, gpus: list[dict[str, Any]], on_fabric: bool,
                  nvswitch: bool, log_facts: dict[str, Any]) -> dict[str, Any]:
    bad = [g for g in gpus if g["state"] != "N/A" and not (g["state"] == "Completed" and g["status"] in ("Success", "N/A"))]
    facts: dict[str, Any] = {
        "service": None if svc is None or not (svc.active or svc.load) else
        "not-found" if svc.installed is False else svc.active or None,
        "service_sub": (svc.sub or None) if svc else None, "service_load": (svc.load or None) if svc else None,
        "fabric_state": (bad[0]["state"] if bad else "Completed" if on_fabric else "N/A") if gpus else None,
        "fabric_status": (bad[0]["status"] if bad else next((g["status"] for g in gpus if g["state"] != "N/A"), "N/A"))
        if gpus else None,
        "gpus": gpus, "nvswitch_expected": nvswitch, **log_facts,
    }
    if log is not None and log.lpf_found:
        facts.update(lpf_candidates=[f"{d} {g}" for d, g in log.lpf_found], lpf_used=log.lpf_used or None)
    return facts


def _unverified(ctx: CheckContext, svc: UnitState | None, report: QReport | None, log: FmLog | None,
                gpus: list[dict[str, Any]], on_fabric: bool, f: Findings, facts: dict[str, Any]) -> Result:
    """An NVSwitch node on which nothing proves the fabric up (nor shows it down)."""
    why = []
    if log is not None and log.lpf_found:
        why.append(f"the fabric manager wrapper found {len(log.lpf_found)} NVSwitch management port(s) ("
                   + ", ".join(f"{d} {g}" for d, g in log.lpf_found) + ")"
                   + (f" and picked GUID {log.lpf_used}" if log.lpf_used else "")
                   + ", which proves neither a running NVLink subnet manager nor a Completed fabric")
    if report is not None and gpus and not on_fabric:
        why.append("the GPUs report no fabric state (Fabric State N/A)")
    if svc is None or svc.error:
        why.append("the service state is unknown")
    return ctx.result(Status.WARN, "NVSwitch fabric not verified: " + ("; ".join(why) or "no fabric data"),
                      evidence=[*(log.wrapper_lines[:8] if log else []), *f.notes, _prov(ctx.profile)], facts=facts,
                      remedy=f"check `systemctl status {UNIT}` (and nvlsm on NVLink-5 systems) and "
                             f"`nvidia-smi -q | grep -A2 Fabric` on {ctx.node}")


def grade_fabric(ctx: CheckContext) -> Result | list[Result]:
    svc: UnitState | None = ctx.facts("fm-service")
    report: QReport | None = ctx.facts("nvidia-smi-q")
    log, fabric_log = _with_journal(svc, ctx.facts("fm-log"))
    if svc is None and report is None and log is None:
        return ctx.result(Status.SKIP, "no fabric manager or nvidia-smi output to grade")
    nvswitch = bool(ctx.profile.get("fabric.nvswitch"))
    prov = _prov(ctx.profile)
    f = Findings()
    gpus, on_fabric, fabric_ok = fabric_findings(report, f) if report is not None else ([], False, False)
    log_facts = log_findings(log, f) if log is not None and log.records else {}
    facts = _fabric_facts(svc, log, gpus, on_fabric, nvswitch, log_facts)
    smi_err = next((e for e in (report.errors if report else []) if e.kind in DRIVER_ERRORS), None)
    need = nvswitch or on_fabric or fabric_log
    if not need and svc is None and not gpus and ctx.options.mode == "analyze":
        return []  # a paste without fabric data (an -q fragment, an error message): nothing to say
    if svc is not None and svc.error:
        f.note(f"service state unknown: {svc.error}")
    elif svc is not None and svc.recognised and need:
        service_findings(svc, on_fabric and fabric_ok, prov, f)
    if smi_err is not None and report is not None and not report.gpus:
        if not need:
            return ctx.result(Status.SKIP, f"fabric not checked: nvidia-smi failed ({smi_err.line})",
                              evidence=[smi_err.line], facts=facts)
        f.add(Status.ERROR, f"fabric state unknown: {smi_err.line}", [smi_err.line],
              f"{smi_err.summary}: {smi_err.remedy} (see gpu.driver)")
    if not need:
        return _not_needed(ctx, svc, report, gpus, f, prov, facts)
    running = svc is not None and svc.active == "active"
    configured = bool(log_facts.get("log_configured_after_last_start"))
    if not f and not ((on_fabric and fabric_ok) or running or configured):
        return _unverified(ctx, svc, report, log, gpus, on_fabric, f, facts)
    parts = [f"fabric Completed/Success on {sum(1 for g in gpus if g['state'] != 'N/A')} GPU(s)"] if on_fabric else []
    parts += [f"{UNIT} {svc.describe()}"] if running and svc is not None else []
    parts += ["the fabric manager configured every NVSwitch at its last start"] if configured else []
    parts += ["no NVSwitch errors in the fabric manager log"] if log is not None and log.records else []
    return f.result(ctx, "; ".join(parts) or "fabric manager healthy", facts)


register(Check(
    id="fabric.manager", title="NVSwitch fabric manager", grade=grade_fabric,
    probes=(PROBE_FM_SERVICE, PROBE_Q), required=("nvidia-smi-q",),
    inputs=("fm-service", "nvidia-smi-q", "fm-log"),
    profile_keys={"fabric.nvswitch": bool},
    catches="fabric manager dead/failed/not installed, GPU fabric registration not Completed, NVSwitch fatal/"
            "non-fatal SXids and NVLS multicast failures in its log or journal, an unverified fabric",
    node_local=True, in_run=True))

__all__ = ["PROBE_FM_SERVICE", "UNIT", "fabric_findings", "grade_fabric", "log_findings", "service_findings"]
