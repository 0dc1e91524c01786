"""fabric.manager: the NVSwitch fabric manager service and the GPUs' fabric registration.

On NVSwitch systems (HGX/DGX H100) CUDA can use the GPUs only once nvidia-fabricmanager has
programmed the switches and every GPU reports `Fabric State : Completed` with `Status :
Success` in `nvidia-smi -q`. The check reads:
  - the service state (`systemctl show`, or `systemctl status` / `is-active` text in analyze);
  - the Fabric block of every GPU in `nvidia-smi -q` (and the 590 layout's Health block);
  - in analyze, /var/log/fabricmanager.log: NVSwitch fatal / non-fatal errors (SXids).
A dead service next to a stale `Completed` state is still a failure: new jobs cannot set up
NVLink multicast and the next GPU reset will not re-register. Where the profile expects no
NVSwitch (`fabric.nvswitch = false`) and the GPUs report no fabric, nothing is flagged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from preflight.checks._smi_q import PROBE_Q, QReport, clean, parse_q
from preflight.checks.gpu_health import DRIVER_ERRORS, Finding, combine
from preflight.model import CaptureState, Result, Status
from preflight.probes import Probe
from preflight.registry import Check, CheckContext, Format, register, register_format

UNIT = "nvidia-fabricmanager"
PROBE_FM_SERVICE = Probe.of(
    "fm-service",
    ["systemctl", "show", UNIT, "--property=LoadState,ActiveState,SubState,Result,ExecMainStatus", "--no-pager"],
    timeout=10,
)
LOG_EVIDENCE_MAX = 8  # log lines quoted per kind of event (display limit)
JOURNAL_MAX = 3  # fabric manager journal lines quoted from `systemctl status` (display limit)
DETAIL_MAX = 6  # continuation lines quoted with a multi-line log record (display limit)

# ---------------------------------------------------------------------------------------
# systemctl
# ---------------------------------------------------------------------------------------

_SYSTEMD_DOWN = re.compile(r"System has not been booted with systemd|Failed to connect to bus|"
                           r"Failed to get D-Bus connection|systemd.*not running", re.I)
_ACTIVE_WORDS = {"active", "inactive", "failed", "activating", "deactivating", "reloading", "maintenance"}
_SHOW_LINE = re.compile(r"^([A-Za-z][A-Za-z0-9]*)=(.*)$")


@dataclass
class FmService:
    form: str = "none"  # show | status | is-active | none
    load: str = ""  # loaded | not-found | masked | bad-setting | error
    active: str = ""  # active | inactive | failed | activating | deactivating | ...
    sub: str = ""  # running | dead | failed | exited | auto-restart ...
    result: str = ""  # success | exit-code | signal | timeout | core-dump ...
    exec_status: int | None = None
    lines: list[str] = field(default_factory=list)  # the lines that say so
    error: str = ""  # systemd could not be asked

    @property
    def installed(self) -> bool | None:
        if self.load in ("not-found",):
            return False
        if self.load:
            return True
        return None

    def describe(self) -> str:
        """'failed (result exit-code, exit status 1)', 'active (running)'."""
        bits = []
        if self.sub and self.sub != self.active:
            bits.append(self.sub)
        if self.result and self.result != "success":
            bits.append(f"result {self.result}")
        if self.exec_status:
            bits.append(f"exit status {self.exec_status}")
        return (self.active or "unknown") + (f" ({', '.join(bits)})" if bits else "")


def parse_fm_service(text: str) -> FmService:
    """`systemctl show` (Key=Value), `systemctl status` or `systemctl is-active` text. Pure."""
    svc = FmService()
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if _SYSTEMD_DOWN.search(ln):
            svc.error = ln.strip()
            svc.lines.append(ln.strip())
            return svc
    show = {}
    for ln in lines:
        m = _SHOW_LINE.match(ln.strip())
        if m:
            show[m.group(1)] = (m.group(2).strip(), ln.strip())
    if "LoadState" in show or "ActiveState" in show:
        svc.form = "show"
        svc.load = show.get("LoadState", ("", ""))[0]
        svc.active = show.get("ActiveState", ("", ""))[0]
        svc.sub = show.get("SubState", ("", ""))[0]
        svc.result = show.get("Result", ("", ""))[0]
        code = show.get("ExecMainStatus", ("", ""))[0]
        svc.exec_status = int(code) if code.lstrip("-").isdigit() else None
        svc.lines = [show[k][1] for k in ("LoadState", "ActiveState", "SubState", "Result", "ExecMainStatus")
                     if k in show]
        return svc
    for ln in lines:
        s = ln.strip()
        if re.search(r"Unit \S*fabricmanager\S* (could not be found|not found)", s, re.I):
            svc.form, svc.load, svc.active = "status", "not-found", "inactive"
            svc.lines.append(s)
            return svc
        m = re.match(r"^Loaded:\s*(\S+)", s)
        if m:
            svc.form, svc.load = "status", m.group(1)
            svc.lines.append(s)
            continue
        m = re.match(r"^Active:\s*(\S+)(?:\s+\(([^)]*)\))?", s)
        if m:
            svc.form, svc.active = "status", m.group(1)
            paren = (m.group(2) or "").strip()
            r = re.match(r"Result:\s*(\S+)", paren)
            if r:
                svc.result, svc.sub = r.group(1), svc.active
            else:
                svc.sub = paren
            svc.lines.append(s)
            continue
        m = re.search(r"\(code=(\w+), status=(\d+)", s)
        if m and svc.form == "status" and svc.exec_status is None:
            svc.exec_status = int(m.group(2))
            svc.lines.append(s)
    if svc.form == "status":
        # the daemon's own journal lines (shown below the status) often say why it stopped
        daemon = [ln.strip() for ln in lines if re.search(r"nv-fabricmanager\[\d+\]:", ln)]
        svc.lines.extend(daemon[-JOURNAL_MAX:])
        return svc
    words = [ln.strip() for ln in lines]
    if len(words) == 1 and words[0] in _ACTIVE_WORDS | {"unknown"}:
        svc.form = "is-active"
        svc.active = "" if words[0] == "unknown" else words[0]
        svc.lines = words
    return svc


def looks_like_fm_service(text: str) -> bool:
    """systemctl output about the fabric manager unit (show with its properties, or status)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return False
    if all(_SHOW_LINE.match(ln) for ln in lines) and len(lines) <= 40:
        keys = {ln.split("=", 1)[0]: ln.split("=", 1)[1] for ln in lines}
        if "LoadState" in keys and "ActiveState" in keys:
            unit = keys.get("Id", "") + keys.get("Names", "")
            return not unit or "fabricmanager" in unit
        return False
    head = "\n".join(lines[:40])
    if re.search(r"Unit nvidia-fabricmanager\S* could not be found", head):
        return True
    return bool(re.search(r"nvidia-fabricmanager(\.service)?\b", head) and re.search(r"^Loaded:", head, re.M)
                and re.search(r"^Active:", head, re.M))


# ---------------------------------------------------------------------------------------
# /var/log/fabricmanager.log
# ---------------------------------------------------------------------------------------

_FM_RECORD = re.compile(r"^\[(?P<time>[A-Z][a-z]{2} +\d{1,2} \d{4} \d{2}:\d{2}:\d{2})\] \[(?P<level>[A-Z]+)\] "
                        r"\[tid \d+\] (?P<msg>.*)$")
_FM_INIT = re.compile(r"^Fabric Manager Log initializing at:\s*(?P<time>.*)$")
_FATAL = re.compile(r"detected NVSwitch fatal error (\d+)|detected GPU NVL Fatal error", re.I)
_NONFATAL = re.compile(r"detected NVSwitch non-fatal error (\d+)|detected GPU NVL Non Fatal error", re.I)
_ABORT = re.compile(r"aborting fabric manager|fabric manager (is )?(exiting|terminating)|"
                    r"failed to (start|initialize) fabric manager", re.I)
_SWITCH = re.compile(r"pci bus id (\S+)(?: physical id (\d+))?(?: port (\d+))?", re.I)


@dataclass
class FmEvent:
    kind: str  # fatal | nonfatal | abort | error | start | configured
    time: str
    line: str
    code: int | None = None
    switch: str = ""
    port: int | None = None
    detail: list[str] = field(default_factory=list)  # continuation lines of a multi-line record

    @property
    def quote(self) -> str:
        """The record as evidence: its line, with the first details of a multi-line record."""
        line = _short(self.line)
        if self.detail:
            line += " | " + "; ".join(d for d in self.detail[:DETAIL_MAX])
        return line


def parse_fm_log(text: str) -> list[FmEvent]:
    """The events of a fabric manager log that matter for grading, in file order. Pure.

    A record is one `[time] [LEVEL] [tid N] message` line; lines that do not start a record
    (`Message payload details:...`, the NVSwitch dump, key : value details of GPU NVL errors)
    continue the previous record and are not graded on their own."""
    events: list[FmEvent] = []
    open_event: FmEvent | None = None  # the graded record whose continuation lines follow
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        m = _FM_INIT.match(line.strip())
        if m:
            events.append(FmEvent("start", m.group("time").strip(), line.strip()))
            open_event = None
            continue
        m = _FM_RECORD.match(line)
        if not m:
            if open_event is not None and line.strip():
                open_event.detail.append(re.sub(r"\s+", " ", line.strip()))
            continue
        open_event = None
        msg, level, when = m.group("msg"), m.group("level"), m.group("time")
        if re.search(r"Fabric Manager version \S+ is running", msg):
            if not events or events[-1].kind != "start":
                events.append(FmEvent("start", when, line))
            continue
        if "Successfully configured all the available NVSwitches" in msg:
            events.append(FmEvent("configured", when, line))
            continue
        for kind, pattern in (("fatal", _FATAL), ("nonfatal", _NONFATAL)):
            fm = pattern.search(msg)
            if fm:
                ev = FmEvent(kind, when, line, code=int(fm.group(1)) if fm.group(1) else None)
                sm = _SWITCH.search(msg)
                if sm:
                    ev.switch = sm.group(1) + (f" (physical id {sm.group(2)})" if sm.group(2) else "")
                    ev.port = int(sm.group(3)) if sm.group(3) else None
                events.append(ev)
                open_event = ev
                break
        else:
            if level in ("ERROR", "FATAL", "CRITICAL"):
                open_event = FmEvent("abort" if _ABORT.search(msg) else "error", when, line)
                events.append(open_event)
    return events


def looks_like_fm_log(text: str) -> bool:
    """Fabric manager log: its `[Mon DD YYYY hh:mm:ss] [LEVEL] [tid N]` records about the fabric."""
    if not any(_FM_RECORD.match(ln) or _FM_INIT.match(ln.strip()) for ln in text.splitlines()[:400]):
        return False
    return bool(re.search(r"Fabric Manager|NVSwitch|multicast|inband message|NVLink", text[:65536]))


def _short(line: str, width: int = 240) -> str:
    return line if len(line) <= width else line[: width - 3] + "..."


def grade_log(events: list[FmEvent]) -> tuple[list[Finding], dict[str, Any]]:
    findings: list[Finding] = []
    starts = [i for i, e in enumerate(events) if e.kind == "start"]
    last_start = starts[-1] if starts else -1
    configured_after = any(e.kind == "configured" for e in events[last_start + 1:]) if starts else None

    def group(kind: str, after: bool | None) -> list[FmEvent]:
        return [e for i, e in enumerate(events) if e.kind == kind
                and (after is None or (i > last_start) == after)]

    fatal_now, fatal_before = group("fatal", True), group("fatal", False)
    nonfatal = group("nonfatal", None)
    aborts = group("abort", True)
    errors = group("error", None)

    def codes(evs: list[FmEvent]) -> str:
        cs = sorted({e.code for e in evs if e.code is not None})
        return (" (SXid " + ", ".join(map(str, cs)) + ")") if cs else ""

    def where(evs: list[FmEvent]) -> str:
        sw = sorted({e.switch for e in evs if e.switch})
        return f" on {len(sw)} NVSwitch{'es' if len(sw) != 1 else ''}" if sw else ""

    def ev(evs: list[FmEvent]) -> list[str]:
        distinct = list(dict.fromkeys(e.quote for e in evs))
        lines = distinct[:LOG_EVIDENCE_MAX]
        if len(evs) > len(lines):
            lines.append(f"... {len(evs) - len(lines)} more such lines ({len(evs)} in all)")
        return lines

    if fatal_now:
        findings.append(Finding(Status.FAIL, "", f"{len(fatal_now)} NVSwitch fatal error(s){codes(fatal_now)}"
                                f"{where(fatal_now)} since the fabric manager last started", ev(fatal_now),
                                "drain the node; a fatal SXid needs the NVSwitches and GPUs reset: reboot the node "
                                "(or stop the GPU clients, reset, restart nvidia-fabricmanager); RMA the baseboard "
                                "if the same switch port fails again"))
    if fatal_before:
        findings.append(Finding(Status.WARN, "", f"{len(fatal_before)} NVSwitch fatal error(s){codes(fatal_before)}"
                                " before the fabric manager's last restart", ev(fatal_before),
                                "the fabric was restarted since; watch for the same switch/port failing again"))
    if aborts:
        findings.append(Finding(Status.FAIL, "", "the fabric manager aborted", ev(aborts),
                                "read /var/log/fabricmanager.log around these lines; fix the cause (topology, "
                                "driver/fabric manager version mismatch), then restart nvidia-fabricmanager"))
    if nonfatal:
        findings.append(Finding(Status.WARN, "", f"{len(nonfatal)} NVSwitch non-fatal error(s){codes(nonfatal)}"
                                f"{where(nonfatal)}", ev(nonfatal),
                                "non-fatal SXids are corrected by the switch: no drain needed; if they repeat on "
                                "the same port, schedule a reset/reboot and check the NVLink error counters"))
    if errors:
        findings.append(Finding(Status.WARN, "", f"{len(errors)} other fabric manager error line(s)", ev(errors),
                                "read /var/log/fabricmanager.log around these lines"))
    facts = {"log_fatal": len(fatal_now) + len(fatal_before), "log_nonfatal": len(nonfatal),
             "log_errors": len(errors) + len(aborts), "log_restarts": len(starts),
             "log_configured_after_last_start": configured_after,
             "log_sxids": sorted({e.code for e in events if e.code is not None})}
    return findings, facts


# ---------------------------------------------------------------------------------------
# Grading
# ---------------------------------------------------------------------------------------

_HEALTHY_VALUES = {"", "healthy", "full", "false", "no", "none", "not supported"}


def _fabric_findings(report: QReport) -> tuple[list[Finding], list[dict[str, Any]], bool, bool]:
    """(findings, per-GPU facts, any GPU on a fabric, every such GPU Completed/Success)."""
    findings: list[Finding] = []
    gpus: list[dict[str, Any]] = []
    on_fabric = False
    all_ok = True
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
        if sl == "completed" and status.lower() in ("", "success"):
            pass
        elif sl == "completed":
            all_ok = False
            findings.append(Finding(Status.FAIL, gpu.label, f"fabric registration finished with status {status!r}", ev,
                                    "restart nvidia-fabricmanager, then reset the GPU (or reboot); read "
                                    "/var/log/fabricmanager.log for the cause"))
        elif sl == "in progress":
            all_ok = False
            findings.append(Finding(Status.FAIL, gpu.label, "fabric registration still in progress", ev,
                                    "CUDA cannot use the GPU yet: wait a minute and re-run; if it stays In Progress, "
                                    "restart nvidia-fabricmanager and read /var/log/fabricmanager.log"))
        elif sl == "not started":
            all_ok = False
            findings.append(Finding(Status.FAIL, gpu.label, "fabric registration not started", ev,
                                    "start the fabric manager (systemctl enable --now nvidia-fabricmanager); its "
                                    "version must equal the driver's"))
        else:
            all_ok = False
            findings.append(Finding(Status.FAIL, gpu.label, f"fabric state {state!r} (status {status or 'N/A'})", ev,
                                    "restart nvidia-fabricmanager and read /var/log/fabricmanager.log"))
        for path, value in gpu.under("Fabric/Health"):
            v = clean(value)
            leaf = path.rsplit("/", 1)[-1]
            if v.lower() in _HEALTHY_VALUES:
                continue
            sev = Status.FAIL if leaf == "Summary" and v.lower() == "unhealthy" else Status.WARN
            findings.append(Finding(sev, gpu.label, f"fabric health: {leaf} = {v}",
                                    [f"{gpu.label} [Fabric/Health] {gpu.line(path)}"],
                                    "the NVLink fabric is degraded for this GPU: check `nvidia-smi nvlink -s`, "
                                    "the fabric manager log, and reset the GPU / reboot if it persists"))
    return findings, gpus, on_fabric, all_ok


def _aggregate(gpus: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    if not gpus:
        return None, None
    bad = [g for g in gpus if not (g["state"] == "Completed" and g["status"] in ("Success", "N/A"))
           and g["state"] != "N/A"]
    if bad:
        return bad[0]["state"], bad[0]["status"]
    on = [g for g in gpus if g["state"] != "N/A"]
    if on:
        return "Completed", on[0]["status"]
    return "N/A", "N/A"


def grade_fabric(ctx: CheckContext) -> Result:
    svc_cap = ctx.capture("fm-service")
    q = ctx.capture("nvidia-smi-q")
    log = ctx.capture("fm-log")
    nvswitch = bool(ctx.profile.get("fabric.nvswitch"))
    prov = f"profile {ctx.profile.name}: fabric.nvswitch = {str(nvswitch).lower()}"
    if ctx.profile.source("fabric.nvswitch"):
        prov += f" ({ctx.profile.source('fabric.nvswitch')})"

    svc = parse_fm_service(svc_cap.text) if svc_cap is not None else None
    report = parse_q(q.text) if q is not None else None
    fab_findings, gpus, on_fabric, fabric_ok = _fabric_findings(report) if report else ([], [], False, False)
    log_findings, log_facts = grade_log(parse_fm_log(log.text)) if log is not None else ([], {})
    state, status = _aggregate(gpus)
    facts: dict[str, Any] = {
        "service": (None if svc is None or not (svc.active or svc.load) else
                    "not-found" if svc.installed is False else svc.active or None),
        "service_sub": svc.sub or None if svc else None,
        "service_load": svc.load or None if svc else None,
        "fabric_state": state, "fabric_status": status, "gpus": gpus, "nvswitch_expected": nvswitch,
        **log_facts,
    }

    if svc_cap is None and q is None and log is None:
        cap = ctx.captures.get("nvidia-smi-q")
        if cap is not None and cap.state is CaptureState.MISSING:
            if nvswitch and ctx.profile.requires_tool(cap.argv[0] if cap.argv else "nvidia-smi"):
                return ctx.result(Status.FAIL, "no GPU tooling: nvidia-smi is missing, the NVSwitch fabric cannot "
                                               "be checked", evidence=[cap.reason, prov],
                                  remedy=f"install the NVIDIA driver and nvidia-fabricmanager on {ctx.node}",
                                  facts=facts)
            return ctx.result(Status.SKIP, "nvidia-smi not found; fabric.manager not checked",
                              evidence=[cap.reason], facts=facts)
        return ctx.result(Status.SKIP, "no fabric manager or nvidia-smi output to grade", facts=facts)

    smi_broken = report is not None and not report.gpus and any(e.kind in DRIVER_ERRORS for e in report.errors)
    need = nvswitch or on_fabric or log is not None
    findings: list[Finding] = list(fab_findings) + list(log_findings)
    notes: list[str] = []

    if svc is not None and svc.error:
        notes.append(f"service state unknown: {svc.error}")
    elif svc is not None and svc.form != "none":
        if need:
            dead = svc.active in ("failed", "inactive", "deactivating") or svc.sub in ("failed", "dead")
            if svc.installed is False:
                if not (on_fabric and fabric_ok):
                    findings.append(Finding(Status.FAIL, "", f"{UNIT} is not installed", [*svc.lines, prov],
                                            "install the nvidia-fabricmanager package of the driver's branch "
                                            "(same version as the driver) and `systemctl enable --now "
                                            f"{UNIT}`"))
                else:
                    notes.append(f"no local {UNIT} unit; every GPU reports fabric Completed (fabric managed outside "
                                 "this OS, e.g. by the host of a VM)")
            elif svc.load == "masked":
                findings.append(Finding(Status.FAIL, "", f"{UNIT} is masked", [*svc.lines, prov],
                                        f"systemctl unmask {UNIT} && systemctl enable --now {UNIT}"))
            elif svc.active in ("activating", "reloading"):
                findings.append(Finding(Status.FAIL, "", f"{UNIT} is still starting ({svc.describe()})",
                                        svc.lines, "wait a minute and re-run; if it keeps restarting read "
                                                   f"journalctl -u {UNIT} and /var/log/fabricmanager.log"))
            elif dead or (svc.active and svc.active != "active"):
                stale = " while the GPUs still show a stale Completed fabric state" if on_fabric and fabric_ok else ""
                findings.append(Finding(Status.FAIL, "", f"{UNIT} is {svc.describe()}{stale}", [*svc.lines, prov],
                                        f"systemctl restart {UNIT}; if it fails again read journalctl -u {UNIT} and "
                                        "/var/log/fabricmanager.log (its version must equal the driver's); new CUDA "
                                        "jobs cannot set up NVLink until it runs"))
        elif svc.installed and svc.active not in ("active", ""):
            notes.append(f"{UNIT} is {svc.describe()} (harmless without NVSwitch)")

    if smi_broken and report is not None:
        err = next(e for e in report.errors if e.kind in DRIVER_ERRORS)
        if need:
            findings.append(Finding(Status.ERROR, "", f"fabric state unknown: {err.line}", [err.line],
                                    f"{err.summary}: {err.remedy} (see gpu.driver)"))
        else:
            return ctx.result(Status.SKIP, f"fabric not checked: nvidia-smi failed ({err.line})",
                              evidence=[err.line], facts=facts)

    if not need:
        if report is not None:
            if svc is not None and svc.installed and svc.active == "active":
                return combine(ctx, findings, f"no NVSwitch fabric (Fabric State N/A); {UNIT} running",
                               facts, ok_evidence=notes)
            ev = [f"{g['bus_id']}: Fabric State {g['state']}" for g in gpus[:2]] + notes
            return ctx.result(Status.SKIP, f"no NVSwitch fabric on this node; fabric manager not required by "
                                           f"profile {ctx.profile.name}", evidence=[*ev, prov], facts=facts)
        # only the service state is known
        if svc is not None and svc.installed and svc.active == "active":
            return ctx.result(Status.PASS, f"{UNIT} running", evidence=svc.lines, facts=facts)
        if svc is not None and svc.installed and svc.active:
            return ctx.result(Status.WARN, f"{UNIT} is {svc.describe()} (profile {ctx.profile.name} expects no "
                                           "NVSwitch; ignore on a node without one)",
                              evidence=[*svc.lines, prov], facts=facts,
                              remedy=f"on an NVSwitch node: systemctl restart {UNIT}; otherwise remove or disable it")
        return ctx.result(Status.SKIP, f"{UNIT} not installed; profile {ctx.profile.name} does not require it",
                          evidence=[*(svc.lines if svc else []), prov], facts=facts)

    verified = ((on_fabric and fabric_ok) or (svc is not None and svc.active == "active")
                or bool(log_facts.get("log_configured_after_last_start")))
    if not findings and not verified:
        why = []
        if report is not None and gpus and not on_fabric:
            why.append("the GPUs report no fabric state (Fabric State N/A)")
        if svc is None or svc.error:
            why.append("the service state is unknown")
        return ctx.result(Status.WARN, "NVSwitch fabric not verified: " + ("; ".join(why) or "no fabric data"),
                          evidence=[*notes, prov], facts=facts,
                          remedy=f"check `systemctl status {UNIT}` and `nvidia-smi -q | grep -A2 Fabric` on "
                                 f"{ctx.node}")
    n_on = sum(1 for g in gpus if g["state"] != "N/A")
    parts = []
    if on_fabric:
        parts.append(f"fabric Completed/Success on {n_on} GPU(s)")
    if svc is not None and svc.active == "active":
        parts.append(f"{UNIT} {svc.describe()}")
    if log is not None and log_facts.get("log_configured_after_last_start"):
        parts.append("the fabric manager configured every NVSwitch at its last start")
    if log is not None:
        parts.append("no NVSwitch errors in the fabric manager log")
    return combine(ctx, findings, "; ".join(parts) or "fabric manager healthy", facts, ok_evidence=notes)


register_format(Format("fm-service", detect=looks_like_fm_service, priority=55,
                       description="systemctl show/status of nvidia-fabricmanager"))
register_format(Format("fm-log", detect=looks_like_fm_log, priority=55,
                       description="fabric manager log (/var/log/fabricmanager.log)"))

register(Check(
    id="fabric.manager", title="NVSwitch fabric manager", grade=grade_fabric,
    probes=(PROBE_FM_SERVICE, PROBE_Q), required=("nvidia-smi-q",),
    profile_keys={"fabric.nvswitch": bool},
    formats=("fm-service", "nvidia-smi-q", "fm-log"),
    catches="fabric manager dead/failed/not installed, GPU fabric registration not Completed, "
            "NVSwitch fatal/non-fatal SXids in the fabric manager log",
    node_local=True, in_run=True))

__all__ = ["PROBE_FM_SERVICE", "FmEvent", "FmService", "grade_fabric", "grade_log", "looks_like_fm_log",
           "looks_like_fm_service", "parse_fm_log", "parse_fm_service"]
