"""fabric.manager: the NVSwitch fabric manager service and the GPUs' fabric registration.

On NVSwitch systems (HGX/DGX) CUDA can use the GPUs only once nvidia-fabricmanager has
programmed the switches and every GPU reports `Fabric State : Completed` with `Status :
Success` in `nvidia-smi -q`. The grader reads the facts of:
  - the service (`systemctl show`, a pasted `systemctl status` / `is-active` / failed
    `systemctl start`, or the unit's journal, with the daemon's lines in it): the last state counts;
  - the Fabric block of every GPU, from a whole `nvidia-smi -q` or from the block pasted or grep'd
    on its own (State, Status, and the Health sub-block of 570+ drivers);
  - the fabric manager's log or journal: NVSwitch fatal / non-fatal SXids, NVLS multicast
    team failures, aborts, restarts, a version that differs from the driver's, "nothing to do"
    (the driver sees no NVSwitch); the Talos wrapper's NVSwitch management-port choice.
Without a running fabric manager an NVSwitch node cannot train: a failed or dead unit FAILs
wherever the node shows that it has NVSwitches (the profile says so, the GPUs report a fabric, the
unit was installed and started). "Nothing to do" on a board without NVSwitch (PCIe cards, NVLink
bridges) means the fabric manager is not applicable; on an NVSwitch profile it FAILs. A Completed
fabric state alone proves the fabric was set up once, not that the fabric manager is alive (a
stale state survives its death): the PASS says so. Every finding has a code
(`checks/policy.toml`).
"""

from __future__ import annotations

import re
from typing import Any

from preflight.findings import Findings
from preflight.model import Result
from preflight.parsers.base import clean
from preflight.parsers.fabricmanager import (
    FabricBlock,
    FabricReport,
    FmEvent,
    FmLog,
    blocks_from_q,
    from_journal,
)
from preflight.parsers.nvsmi_q import QReport
from preflight.parsers.systemd import UnitState, transition
from preflight.probes import Probe
from preflight.profile import Profile
from preflight.registry import Check, CheckContext, register

from .gpu_health import DRIVER_ERRORS, PROBE_Q

UNIT = "nvidia-fabricmanager"
GPU_LISTINGS = ("nvidia-smi-table", "nvidia-smi-q", "nvidia-smi-query", "nvidia-smi-L", "nvml")  # GPU names
PROBE_FM_SERVICE = Probe.of(
    "fm-service",
    ["systemctl", "show", UNIT, "--property=LoadState,ActiveState,SubState,Result,ExecMainStatus", "--no-pager"],
    timeout=10,
)
LOG_EVIDENCE_MAX = 8  # pragma: no mutate (log lines quoted per kind of event: a display limit)
RESTART = (f"systemctl restart {UNIT}; if it fails again read journalctl -u {UNIT} and /var/log/fabricmanager.log "
           "(its version must equal the driver's); new CUDA jobs cannot set up NVLink until it runs")
LIVENESS = (f"fabric manager liveness not shown (a Completed state outlives a dead fabric manager: check "
            f"`systemctl is-active {UNIT}`)")
# The Health sub-block (570+): field -> {value: code, or "" when healthy}; a value not listed is
# said to be not recognised. "Incorrect Configuration" names what is wrong: any value but None.
_HEALTH: dict[str, dict[str, str]] = {
    "summary": {"healthy": "", "unhealthy": "fabric.manager/health-unhealthy",
                "limited capacity": "fabric.manager/health-limited-capacity"},
    "bandwidth": {"full": "", "degraded": "fabric.manager/bandwidth-degraded"},
    "route recovery in progress": {"false": "", "true": "fabric.manager/route-recovery"},
    "route unhealthy": {"false": "", "true": "fabric.manager/route-unhealthy"},
    "access timeout recovery": {"false": "", "true": "fabric.manager/access-timeout-recovery"},
    "incorrect configuration": {"none": ""},
}


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


_LOG_KINDS = (
    ("multicast", "fabric.manager/multicast-failed", "NVLS multicast team setup failed",
     "jobs using NVLink SHARP (NCCL NVLS) fail on this node: drain, restart nvidia-fabricmanager and reset "
     "the GPUs (or reboot); check that the fabric manager and driver versions match"),
    ("abort", "fabric.manager/aborted", "the fabric manager aborted",
     "read /var/log/fabricmanager.log around these lines; fix the cause (topology, driver/fabric manager "
     "version mismatch), then restart nvidia-fabricmanager"),
    ("nonfatal", "fabric.manager/nvswitch-nonfatal", "NVSwitch non-fatal error(s)",
     "non-fatal SXids are corrected by the switch: no drain needed; if they repeat on the same port, "
     "schedule a reset/reboot and check the NVLink error counters"),
)


def _version_findings(mismatch: list[FmEvent], f: Findings) -> None:
    v = mismatch[-1].values
    drv = v.get("driver") or ""
    f.add("fabric.manager/version-mismatch",
          f"the fabric manager ({v.get('fabric_manager') or '?'}) refuses to run with "
          + (f"driver {drv}" if drv else "the loaded driver (its version cut off)") + ": their versions differ",
          _quote(mismatch),
          "install the nvidia-fabricmanager package of exactly the driver's version ("
          + (drv or "`cat /proc/driver/nvidia/version` shows it") + f"), hold both packages, then `systemctl restart "
          f"{UNIT}`; until then CUDA cannot use the NVSwitch fabric")


def log_findings(log: FmLog, f: Findings) -> dict[str, Any]:
    """SXids, multicast failures, aborts, a version mismatch; what came before the last restart is history."""
    starts = [i for i, e in enumerate(log.events) if e.kind == "start"]
    last = starts[-1] if starts else -1
    after = log.events[last + 1:]
    fatal_now = [e for e in after if e.kind == "fatal"]
    fatal_before = [e for e in log.events[:last + 1] if e.kind == "fatal"]
    if fatal_now:
        f.add("fabric.manager/nvswitch-fatal", f"{len(fatal_now)} NVSwitch fatal error(s){_sxids(fatal_now)}"
              + (" since the fabric manager last started" if starts else ""), _quote(fatal_now),
              "drain the node; a fatal SXid needs the NVSwitches and GPUs reset: reboot the node (or stop the GPU "
              "clients, reset, restart nvidia-fabricmanager); RMA the baseboard if the same switch port fails again")
    if fatal_before:
        f.add("fabric.manager/nvswitch-fatal-before-restart", f"{len(fatal_before)} NVSwitch fatal error(s)"
              f"{_sxids(fatal_before)} before the fabric manager's last restart", _quote(fatal_before),
              "the fabric was restarted since; watch for the same switch/port failing again")
    mismatch = [e for e in after if e.kind == "version-mismatch"]
    if mismatch:
        _version_findings(mismatch, f)
    bad_option = [e for e in after if e.kind == "bad-option"]
    if bad_option:
        f.add("fabric.manager/bad-command-line", "the fabric manager refused its command line and printed its usage "
              "text: it did not start", _quote(bad_option),
              f"fix the options in the unit (`systemctl cat {UNIT}`: ExecStart, or the start script's arguments) to "
              "those `nv-fabricmanager -h` lists, then `systemctl restart " + UNIT + "`")
    explained = mismatch or bad_option or log.of("nothing-to-do") or log.of("abort")
    script_failed = [e for e in after if e.kind == "start-failed"]
    if script_failed and not explained:
        f.add("fabric.manager/start-failed", "the fabric manager start script reports that nv-fabricmanager exited "
              f"with code {script_failed[-1].values.get('exit_code')}: it is not running", _quote(script_failed),
              RESTART)
    for kind, code, what, remedy in _LOG_KINDS:
        evs = log.of(kind)
        if evs:
            f.add(code, f"{len(evs)} x {what}{_sxids(evs) if kind == 'nonfatal' else ''}", _quote(evs), remedy)
    f.unread("fabric.manager", "fabric manager", [e.quote for e in log.of("error")],
             "read /var/log/fabricmanager.log around these lines (`journalctl -u " + UNIT + "` where it logs to the "
             "journal); the fabric manager printed them as errors")
    return {"log_fatal": len(fatal_now) + len(fatal_before), "log_nonfatal": len(log.of("nonfatal")),
            "log_multicast_failures": len(log.of("multicast")), "log_errors": len(log.of("error") + log.of("abort")),
            "log_restarts": len(starts), "log_configured_after_last_start":
                any(e.kind == "configured" for e in after) if log.records else None,
            "log_sxids": sorted({e.code for e in log.events if e.code is not None}),
            "log_version_mismatch": mismatch[-1].values if mismatch else None}


def _state_finding(b: FabricBlock, state: str, status: str, f: Findings) -> bool:
    """The registration state of one GPU; False when it is not Completed/Success."""
    ev = [f"{b.label} [Fabric] {b.line('Fabric/State')}", f"{b.label} [Fabric] {b.line('Fabric/Status')}"]
    sl = state.lower()
    if sl == "completed" and status.lower() in ("", "success"):
        return True
    if sl == "completed":
        f.add("fabric.manager/fabric-status-error", f"{b.label}: fabric registration finished with status {status!r}",
              ev, "restart nvidia-fabricmanager, then reset the GPU (or reboot); read /var/log/fabricmanager.log for "
                  "the cause (on a multi-node NVLink system: the IMEX/NVLink domain's resources and partition)",
              proof="[Fabric] Status")
    elif sl == "in progress":
        f.add("fabric.manager/fabric-in-progress", f"{b.label}: fabric registration still in progress", ev,
              "CUDA cannot use the GPU yet: wait a minute and re-run; if it stays In Progress, restart "
              "nvidia-fabricmanager and read /var/log/fabricmanager.log")
    elif sl == "not started":
        f.add("fabric.manager/fabric-not-started", f"{b.label}: fabric registration not started", ev,
              "start the fabric manager (systemctl enable --now nvidia-fabricmanager); its version must equal the "
              "driver's")
    else:
        f.add("fabric.manager/fabric-state-unknown", f"not recognised: {b.label} fabric state {state!r} (expected "
              "Completed, In Progress or Not Started)", ev, "read `nvidia-smi -q` by hand")
    return False


def _health_findings(b: FabricBlock, f: Findings) -> None:
    for path, value in b.under("Fabric/Health"):
        v, leaf = clean(value), path.rsplit("/", 1)[-1]
        if not v:  # N/A, Not Supported: not reported
            continue
        table = _HEALTH.get(leaf.lower())
        code = (table or {}).get(v.lower(), "fabric.manager/incorrect-configuration" if leaf.lower() ==
                                 "incorrect configuration" else "fabric.manager/health-value-unknown")
        if not code:
            continue
        what = f"not recognised: fabric health {leaf} = {v}" if code == "fabric.manager/health-value-unknown" else \
            f"fabric health: {leaf} = {v}"
        f.add(code, f"{b.label}: {what}", [f"{b.label} [Fabric/Health] {b.line(path)}"],
              "the NVLink fabric is degraded for this GPU: check `nvidia-smi nvlink -s`, the fabric manager "
              "log, and reset the GPU / reboot if it persists")


def fabric_findings(blocks: list[FabricBlock], f: Findings) -> tuple[list[dict[str, Any]], bool, bool]:
    """(per-GPU facts, any GPU on a fabric, every such GPU Completed/Success)."""
    gpus: list[dict[str, Any]] = []
    on_fabric, all_ok = False, True
    for b in blocks:
        state, status = clean(b.get("Fabric/State")), clean(b.get("Fabric/Status"))
        gpus.append({"index": b.index, "bus_id": b.bus_id or None, "state": state or "N/A", "status": status or "N/A",
                     "clique_id": clean(b.get("Fabric/CliqueId")) or None,
                     "cluster_uuid": clean(b.get("Fabric/ClusterUUID")) or None})
        if not state:
            continue
        on_fabric = True
        all_ok = _state_finding(b, state, status, f) and all_ok
        _health_findings(b, f)
    return gpus, on_fabric, all_ok


_ACTIVE = ("ActiveState=", "Active:")  # the line that says a unit is not running (show / status)
_NOT_FOUND = ("LoadState=not-found", "could not be found", "not-found")


def service_findings(svc: UnitState, on_fabric_ok: bool, prov: str, f: Findings) -> None:
    """The service where the node needs a fabric manager."""
    if svc.installed is False:
        if on_fabric_ok:
            f.note(f"no local {UNIT} unit; every GPU reports fabric Completed (fabric managed outside this OS, "
                   "e.g. by the host of a VM)")
        else:
            f.add("fabric.manager/not-installed", f"{UNIT} is not installed", [*svc.lines, prov],
                  f"install the nvidia-fabricmanager package of the driver's branch (same version as the driver) "
                  f"and `systemctl enable --now {UNIT}`", proof=_NOT_FOUND)
    elif svc.load == "masked":
        f.add("fabric.manager/masked", f"{UNIT} is masked", [*svc.lines, prov],
              f"systemctl unmask {UNIT} && systemctl enable --now {UNIT}", proof="masked")
    elif svc.active in ("activating", "reloading"):
        f.add("fabric.manager/service-starting", f"{UNIT} is still starting ({svc.describe()})", svc.lines,
              f"wait a minute and re-run; if it keeps restarting read journalctl -u {UNIT} and "
              "/var/log/fabricmanager.log", proof=_ACTIVE)
    elif svc.active and svc.active != "active" or svc.sub in ("failed", "dead"):
        stale = " while the GPUs still show a stale Completed fabric state" if on_fabric_ok else ""
        what = f"starting {UNIT} failed" if svc.start_failed else f"{UNIT} is {svc.describe()}"
        f.add("fabric.manager/service-not-running", what + stale, [*svc.lines, prov], RESTART,
              proof=_ACTIVE if svc.active and svc.active != "active" else ("SubState=", "Active:"))


def _prov(prof: Profile) -> str:
    nvswitch = bool(prof.get("fabric.nvswitch"))
    src = prof.source("fabric.nvswitch")
    return f"profile {prof.name}: fabric.nvswitch = {str(nvswitch).lower()}" + (f" ({src})" if src else "")


def _with_journal(svc: UnitState | None, log: FmLog | None) -> tuple[FmLog | None, bool]:
    """The fabric manager log with the daemon's lines under `systemctl status` folded in, and
    whether a fabric manager log shows an NVSwitch node (switches configured, SXids, LPF ports)."""
    fabric_log = log is not None and log.recognised and not log.of("nothing-to-do")
    if svc is None or not svc.journal:
        return log, fabric_log
    jlog = from_journal((j.time_text, j.message, j.line) for j in svc.journal
                        if "fabricmanager" in j.ident or "fabricmanager" in j.message or transition(j.message))
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


def _unverified(ctx: CheckContext, svc: UnitState | None, log: FmLog | None, na_fabric: bool, f: Findings,
                facts: dict[str, Any]) -> Result:
    """An NVSwitch node on which nothing proves the fabric up (nor shows it down)."""
    why = []
    if log is not None and log.lpf_found:
        why.append(f"the fabric manager wrapper found {len(log.lpf_found)} NVSwitch management port(s) ("
                   + ", ".join(f"{d} {g}" for d, g in log.lpf_found) + ")"
                   + (f" and picked GUID {log.lpf_used}" if log.lpf_used else "")
                   + ", which proves neither a running NVLink subnet manager nor a Completed fabric")
    if na_fabric:
        why.append("the GPUs report no fabric state (Fabric State N/A)")
    if svc is None or svc.error:
        why.append("the service state is unknown")
    return ctx.finding("fabric.manager/unverified", "NVSwitch fabric not verified: " + ("; ".join(why) or
                                                                                       "no fabric data"),
                       evidence=[*(log.wrapper_lines[:8] if log else []), *f.notes, _prov(ctx.profile)], facts=facts,
                       remedy=f"check `systemctl status {UNIT}` (and nvlsm on NVLink-5 systems) and "
                              f"`nvidia-smi -q | grep -A2 Fabric` on {ctx.node}")


def _no_switch(ctx: CheckContext, nothing: list[FmEvent], svc: UnitState | None, f: Findings,
               facts: dict[str, Any]) -> Result:
    """"Nothing to do" where the profile expects no NVSwitch: the fabric manager is not applicable."""
    f.add("fabric.manager/no-nvswitch", f"the fabric manager found no NVSwitch to manage (NV_WARN_NOTHING_TO_DO); "
          f"not needed on a board without NVSwitch (profile {ctx.profile.name} expects none)")
    if svc is not None and svc.active and svc.active != "active":
        f.note(f"{UNIT} is {svc.describe()} because of it: harmless here (`systemctl disable {UNIT}` silences it)")
    facts["nvswitch_found"] = False
    return f.result(ctx, "fabric manager not applicable: no NVSwitch on this node (NV_WARN_NOTHING_TO_DO)", facts,
                    ok_evidence=_quote(nothing))


def _not_needed(ctx: CheckContext, svc: UnitState | None, report: bool, gpus: list[dict[str, Any]],
                switchless: list[str], f: Findings, prov: str, facts: dict[str, Any]) -> Result:
    """No NVSwitch expected and none shown: the fabric manager is not required here; a unit that
    failed on such a node is a misconfiguration worth a look."""
    ev = [f"{g['bus_id'] or 'GPU ' + str(g['index'])}: Fabric State {g['state']}" for g in gpus[:2]]
    where = f" ({', '.join(switchless)}: no NVSwitch)" if switchless else ""
    if svc is not None and (svc.active == "failed" or svc.start_failed):
        what = f"starting {UNIT} failed" if svc.start_failed else f"{UNIT} is {svc.describe()}"
        return ctx.finding("fabric.manager/failed-without-nvswitch",
                           f"{what}; not applicable where there is no NVSwitch{where} (profile {ctx.profile.name} "
                           "expects none)", evidence=[*svc.lines, *ev, prov], facts=facts, proof=("ActiveState=", "Active:"),
                           remedy=f"on a node without NVSwitch: disable the unit (systemctl disable {UNIT}); on an "
                                  f"NVSwitch node: {RESTART}")
    if svc is not None and svc.active:
        f.note(f"{UNIT} is {svc.describe()} (harmless without NVSwitch)")
    ev += svc.lines if svc is not None and not gpus else []
    return ctx.finding("fabric.manager/not-required", f"no NVSwitch fabric on this node{where}; fabric manager not "
                       f"required by profile {ctx.profile.name}" + ("" if report or where else " (nothing shows one)"),
                       evidence=[*ev, *f.notes, prov], facts=facts)


def _switchless(ctx: CheckContext) -> list[str]:
    """The GPU models the node's listings name, when every one is a model that never sits on an
    NVSwitch (profile `fabric.no_nvswitch_gpus`: GeForce, RTX, PCIe cards ...); else []."""
    names: list[str] = []
    for probe in GPU_LISTINGS:
        facts = ctx.facts(probe)
        for g in getattr(facts, "records", None) or []:
            if getattr(g, "name", None):
                names.append(str(g.name))
    tokens = [str(t) for t in ctx.profile.get("fabric.no_nvswitch_gpus") or []]
    pattern = re.compile("|".join(rf"\b{re.escape(t)}\b" for t in tokens), re.I) if tokens else None
    names = list(dict.fromkeys(names))
    return names if names and pattern is not None and all(pattern.search(n) for n in names) else []


def _unit_started(svc: UnitState | None) -> bool:
    """The unit exists and was started (running, failed, restarting): the node meant to run it."""
    return svc is not None and svc.installed is not False and not svc.error and (
        svc.active in ("active", "failed", "activating", "reloading", "deactivating") or bool(svc.start_failed))


def _ok_summary(svc: UnitState | None, log: FmLog | None, gpus: list[dict[str, Any]], on_fabric: bool,
                configured: bool) -> str:
    running = svc is not None and svc.active == "active"
    parts = [f"fabric Completed/Success on {sum(1 for g in gpus if g['state'] != 'N/A')} GPU(s)"] if on_fabric else []
    parts += [f"{UNIT} {svc.describe()}"] if running and svc is not None else []
    parts += ["the fabric manager configured every NVSwitch at its last start"] if configured else []
    parts += ["no NVSwitch errors in the fabric manager log"] if log is not None and log.records else []
    if on_fabric and not running and not configured:
        parts.append(LIVENESS)
    return "; ".join(parts) or "fabric manager healthy"


def _inputs(ctx: CheckContext) -> tuple[UnitState | None, QReport | None, list[FabricBlock], FmLog | None, bool]:
    svc: UnitState | None = ctx.facts("fm-service")
    report: QReport | None = ctx.facts("nvidia-smi-q")
    fab: FabricReport | None = ctx.facts("nvidia-smi-fabric")
    blocks = (blocks_from_q(report) if report is not None else []) + (fab.blocks if fab is not None else [])
    log, fabric_log = _with_journal(svc, ctx.facts("fm-log"))
    return svc, report, blocks, log, fabric_log


def grade_fabric(ctx: CheckContext) -> Result | list[Result]:
    svc, report, blocks, log, fabric_log = _inputs(ctx)
    if svc is None and report is None and not blocks and log is None:
        return ctx.finding("fabric.manager/no-input", "no fabric manager or nvidia-smi output to grade")
    nvswitch = bool(ctx.profile.get("fabric.nvswitch"))
    prov = _prov(ctx.profile)
    f = Findings()
    gpus, on_fabric, fabric_ok = fabric_findings(blocks, f)
    log_facts = log_findings(log, f) if log is not None and log.records else {}
    facts = _fabric_facts(svc, log, gpus, on_fabric, nvswitch, log_facts)
    nothing = log.of("nothing-to-do") if log is not None else []
    if nothing and not nvswitch and not on_fabric:
        return _no_switch(ctx, nothing, svc, f, facts)
    if nothing:
        f.add("fabric.manager/nvswitch-not-found", "the fabric manager found no NVSwitch (NV_WARN_NOTHING_TO_DO) on a "
              "node that has them: the NVSwitch driver sees no switch", [*_quote(nothing), prov],
              "on a VM the NVSwitches are not passed through to the guest (the GPUs stay In Progress, CUDA error "
              "802): fix the VM's device assignment; on bare metal check `ls /dev/nvidia-nvswitch*` and the "
              "nvidia-nvswitch driver in dmesg, then reboot")
    na_fabric = report is not None and bool(gpus) and not on_fabric
    switchless = [] if on_fabric else _switchless(ctx)
    smi_err = next((e for e in (report.errors if report else []) if e.kind in DRIVER_ERRORS), None)
    need = nvswitch or on_fabric or fabric_log or (_unit_started(svc) and not na_fabric and not switchless)
    if not need and svc is None and not gpus and ctx.options.mode == "analyze":
        return []  # a paste without fabric data (an -q fragment, an error message): nothing to say
    if svc is not None and svc.error:
        f.note(f"service state unknown: {svc.error}")
    elif svc is not None and svc.recognised and need:
        service_findings(svc, on_fabric and fabric_ok, prov, f)
    if smi_err is not None and report is not None and not report.gpus:
        if not need:
            return ctx.finding("fabric.manager/no-fabric-data", f"fabric not checked: nvidia-smi failed "
                               f"({smi_err.line})", evidence=[smi_err.line], facts=facts)
        f.add("fabric.manager/nvidia-smi-failed", f"fabric state unknown: {smi_err.line}", [smi_err.line],
              f"{smi_err.summary}: {smi_err.remedy} (see gpu.driver)")
    if not need:
        return _not_needed(ctx, svc, report is not None, gpus, switchless, f, prov, facts)
    running = svc is not None and svc.active == "active"
    configured = bool(log_facts.get("log_configured_after_last_start"))
    if not f and not ((on_fabric and fabric_ok) or running or configured):
        return _unverified(ctx, svc, log, na_fabric, f, facts)
    ok_ev = [*(svc.lines if svc is not None else []),
             *(f"{g['bus_id'] or 'GPU block ' + str(g['index'] + 1)}: Fabric State {g['state']}, Status {g['status']}"
               for g in gpus[:4])]
    return f.result(ctx, _ok_summary(svc, log, gpus, on_fabric, configured), facts, ok_evidence=ok_ev)


CHECK = Check(
    id="fabric.manager", title="NVSwitch fabric manager", grade=grade_fabric,
    probes=(PROBE_FM_SERVICE, PROBE_Q), required=("nvidia-smi-q",),
    inputs=("fm-service", "nvidia-smi-q", "nvidia-smi-fabric", "fm-log"),
    profile_keys={"fabric.nvswitch": bool, "fabric.no_nvswitch_gpus": list},
    catches="fabric manager dead/failed/not installed or refusing a driver of another version, GPU fabric "
            "registration not Completed, fabric health degraded, NVSwitch fatal/non-fatal SXids and NVLS multicast "
            "failures in its log or journal, no NVSwitch where one is expected, an unverified fabric",
    node_local=True, in_run=True)
register(CHECK)

__all__ = ["CHECK", "PROBE_FM_SERVICE", "UNIT", "fabric_findings", "grade_fabric", "log_findings", "service_findings"]
