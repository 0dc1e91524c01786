"""gpu.xid: NVIDIA Xid events (and Xid-less GPU faults) in the kernel log, graded.

Facts come from `preflight.parsers.kernel_log` (every kernel-log framing, Xids, faults without
an Xid, the GPU identity map). Xids are graded with the catalog in `xid_catalog`: a code whose
immediate action needs a GPU reset or a reboot FAILs (drain the node), application-level codes
WARN (report to the job owner, no drain). Sympathetic Xids are tied to their cause: by the
driver's own `caused by previous Xid N`, or (45 after another Xid, 43 after 13, 94/95/63 after
48) by time on the same GPU. Floods of the same Xid on one GPU are grouped into bursts.

What the log cannot show is not graded: a log grep-filtered for something else, or one in which
the driver never bound a GPU, says so (SKIP) instead of a PASS.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from preflight.framing import Line, filter_allows, parse_iso, syslog_year_fix
from preflight.model import Result, Status
from preflight.parsers.base import short
from preflight.parsers.kernel_log import KernelFault, KernelLog, XidEvent
from preflight.probes import Probe
from preflight.registry import Check, CheckContext, Input, register

from . import xid_catalog as cat

PROBE = Probe.of(
    "kernel-log",
    ["dmesg", "-T"],
    ["journalctl", "-k", "--no-pager", "-o", "short-iso"],
    timeout=15,
)


def _seconds_between(a: Line, b: Line) -> float | None:
    if a.time is not None and b.time is not None and (a.time.tzinfo is None) == (b.time.tzinfo is None):
        return abs((b.time - a.time).total_seconds())
    if a.mono is not None and b.mono is not None:
        return abs(b.mono - a.mono)
    return None


def _within(a: Line, b: Line, window_s: float) -> bool:
    gap = _seconds_between(a, b)
    return gap is None or gap <= window_s


def _link_sympathetic(events: list[XidEvent], window_s: float) -> dict[int, int]:
    """Cause of each sympathetic Xid (by position in `events`): the driver's own annotation,
    else the latest earlier Xid on the same GPU that can cause it, within the window."""
    caused: dict[int, int] = {}
    latest: dict[str, dict[int, tuple[int, XidEvent]]] = {}  # pci -> xid -> (position, event)
    for i, ev in enumerate(events):
        seen = latest.setdefault(ev.pci, {})
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
# Grading


@dataclass
class Group:
    """A burst of the same Xid on one GPU (a flood counts once)."""

    first: XidEvent
    last: XidEvent
    count: int = 1
    severity: str = cat.WARN
    action: str = ""
    caused_by: int | None = None

    @property
    def key(self) -> tuple[int, str]:
        return self.first.xid, self.first.pci


def _group(events: list[XidEvent], caused: dict[int, int], window_s: float) -> list[Group]:
    groups: list[Group] = []
    open_: dict[tuple[int, str, int | None, str, bool | None], Group] = {}
    for i, ev in enumerate(events):
        k = (ev.xid, ev.pci, caused.get(i), ev.unit, ev.fatal)
        g = open_.get(k)
        if g is not None and _within(g.last.line, ev.line, window_s):
            g.last = ev
            g.count += 1
            continue
        g = Group(first=ev, last=ev, caused_by=caused.get(i))
        groups.append(g)
        open_[k] = g
    return groups


def _classify(g: Group, fail_codes: set[int], ignore_codes: set[int]) -> None:
    ev = g.first
    info = cat.lookup(ev.xid)
    g.action = info.immediate if info else "UNKNOWN"
    if ev.xid in ignore_codes:
        g.severity = "ignored"
        return
    if ev.xid in fail_codes:
        g.severity = cat.FAIL
        return
    if ev.xid in cat.NVLINK5_CODES:
        g.severity = cat.WARN if ev.fatal is False else cat.FAIL
        return
    if ev.xid == 154 and ev.recovery_code is not None:
        g.action, g.severity = cat.RECOVERY_ACTIONS.get(ev.recovery_code, ("XID_154", cat.WARN))
        return
    sev = info.severity if info else cat.WARN
    if g.caused_by is not None and sev != cat.FAIL:
        sev = cat.INFO
    g.severity = sev


def _label(pci: str, gpus: dict[str, dict[str, Any]]) -> str:
    idx = gpus.get(pci, {}).get("index")
    return f"GPU {pci}" + (f" (GPU{idx})" if idx is not None else "")


def _reset_cmd(pci: str) -> str:
    return f"`nvidia-smi -r -i {pci}.0`" if pci else "`nvidia-smi -r -i <gpu>`"


def _remedy(action: str, xid: int | None, label: str, pci: str, kind: str = "") -> str:
    """What clears one drain-level event (the caller prefixes "drain node")."""
    what = f"Xid {xid}" if xid is not None else kind.replace("_", " ") or "this fault"
    if kind == "nvlink_discovery_failed":
        return ("NVLink discovery failed, so the NVLink fabric is not fully trained: check `nvidia-smi nvlink -s` "
                "and the fabric manager log, then reboot; if it recurs, open a hardware case")
    if kind == "adapter_init_failed":
        return f"the driver could not initialise {label}: reboot; if it persists, reseat or RMA the GPU"
    if kind == "wpr2_up":
        return (f"a crash left {label}'s protected memory region (WPR2) up: only a power cycle or a PCIe bus reset "
                "clears it; cold-reboot the node")
    if kind == "gsp_timeout":
        return (f"the GPU's GSP firmware stopped answering on {label}: reset the GPU with {_reset_cmd(pci)} or "
                "reboot; if it recurs, update the driver and open a case")
    if action == "RESTART_BM":
        return f"reboot clears {what} on {label}; if it returns after the reboot, reseat or RMA the GPU"
    if action == "WORKFLOW_XID_48":
        return (f"reset {label} with {_reset_cmd(pci)} (or reboot) to apply the row remap, then check "
                "`nvidia-smi -q -d ROW_REMAPPER` (Remapping Failure: Yes means RMA)")
    if action == "WORKFLOW_NVLINK_ERR":
        return (f"{what} is an NVLink fault on {label}: check `nvidia-smi nvlink -s` and the fabric manager, "
                f"reset the GPU with {_reset_cmd(pci)} or reboot; if links stay down, open a hardware case")
    if action == "WORKFLOW_NVLINK5_ERR":
        return (f"fatal NVLink5 error ({what}) on {label}: reset the GPU with {_reset_cmd(pci)} or reboot, "
                "per NVIDIA's Xid 144-150 decode; then check `nvidia-smi nvlink -s`")
    if action == "DRAIN_P2P":
        return f"{label} reports peer-to-peer unusable (Xid 154): reset the GPU with {_reset_cmd(pci)} or reboot"
    return (f"reset {label} with {_reset_cmd(pci)} (no process may hold it) or reboot, drained until then; "
            f"if {what} recurs after the reset, run `dcgmi diag -r 3` and open a case")


def _app_remedy(codes: list[int], repeated: list[str]) -> str:
    text = f"report to the job owner (application-level Xid {', '.join(map(str, codes))}); no drain"
    if repeated:
        text += f"; repeated on {', '.join(repeated)}: run `dcgmi diag -r 2` on that GPU if it recurs across jobs"
    return text


_NVLINK5_NONFATAL_REMEDY = ("non-fatal NVLink5 errors: watch `nvidia-smi nvlink -e` counters; drain if they repeat "
                            "or turn Fatal")


def _time_fact(line: Line) -> str | None:
    return line.time.isoformat() if line.time is not None else None


def _event_fact(g: Group, gpus: dict[str, dict[str, Any]]) -> dict[str, Any]:
    ev = g.first
    info = cat.lookup(ev.xid)
    fact: dict[str, Any] = {
        "xid": ev.xid,
        "pci": ev.pci,
        "gpu": ev.gpu,
        "time": _time_fact(ev.line),
        "uptime_s": ev.line.mono,
        "time_text": ev.line.time_text,
        "last_time": _time_fact(g.last.line),
        "count": g.count,
        "action": g.action,
        "severity": g.severity,
        "mnemonic": info.mnemonic if info else "",
        "text": ev.text,
        "caused_by": g.caused_by,
    }
    if ev.pid:
        fact["pid"], fact["name"] = ev.pid, ev.name
    if ev.mig:
        fact["mig"] = ev.mig
    if ev.line.host:
        fact["host"] = ev.line.host
    if ev.unit or ev.fatal is not None:
        fact.update(unit=ev.unit, fatal=ev.fatal, link=ev.link, registers=ev.registers)
    if ev.recovery:
        fact["recovery"] = ev.recovery
    uuid = gpus.get(ev.pci, {}).get("uuid")
    if uuid:
        fact["uuid"] = uuid
    return fact


def _since(ctx: CheckContext) -> datetime | None:
    since = ctx.options.xid_since or ctx.options.extra.get("xid_since")
    if isinstance(since, str):
        since = parse_iso(since if "T" in since else since.replace(" ", "T", 1))
    return since if isinstance(since, datetime) else None


def _codes(profile_value: Any) -> set[int]:
    out: set[int] = set()
    for v in profile_value or []:
        try:
            out.add(int(v))
        except (TypeError, ValueError):
            continue
    return out


_SHOWN_BY = ("NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus", "kernel: NVRM: Xid 48")


def _not_gradable(ctx: CheckContext, run: Input, log: KernelLog) -> Result | None:
    """The result for a log that cannot show Xids (unreadable, empty, filtered, not a kernel
    log, no GPU bound), None when it can be graded."""
    cmd = run.cmdline
    base = {"events": [], "source_command": cmd}
    if run.rc not in (0, None) and log.nvrm == 0 and not log.events:
        return ctx.result(Status.ERROR, f"cannot read the kernel log ({cmd} exited {run.rc})",
                          evidence=log.tool_errors[-3:] or [f"{cmd}: exit {run.rc}"],
                          remedy="run preflight as root (or with CAP_SYSLOG), or set kernel.dmesg_restrict=0 / "
                                 "add the user to the systemd-journal group", facts=base)
    if log.lines == 0:
        return ctx.result(Status.ERROR, f"the kernel log is empty ({cmd}); Xids not checked",
                          evidence=["(no output)"],
                          remedy="check that the kernel ring buffer / journald keeps kernel messages on this node",
                          facts=base)
    if log.filter and not filter_allows(log.filter, _SHOWN_BY):
        return ctx.result(Status.SKIP, f"kernel log excerpt filtered by grep {' / '.join(log.filter)}: "
                                       "NVIDIA driver lines not shown; Xids not checked",
                          evidence=[f"command: {cmd}"], facts={**base, "filter": log.filter},
                          remedy="capture the whole kernel log (`dmesg -T` or `journalctl -k`) to grade Xids")
    if not log.stamped and log.nvrm == 0 and not log.events:
        return ctx.result(Status.ERROR, f"output of {cmd} is not a kernel log (no kernel time stamps, no NVRM lines)",
                          evidence=log.tool_errors[:3] or [f"{log.lines} line(s), none from the kernel"],
                          remedy=f"run `{cmd}` by hand and check its output", facts=base)
    if log.driver_faults and not log.events and not log.faults:
        d = log.driver_faults[0]
        return ctx.result(Status.SKIP, f"the NVIDIA driver drives no GPU ({d.meaning}); no Xid can be reported "
                                       "(see gpu.driver)",
                          evidence=[short(f.line.raw) for f in log.driver_faults[:4]], facts=base,
                          remedy="fix the driver first (gpu.driver names the cause), then re-check the kernel log")
    return None


@dataclass
class _Graded:
    """The log's Xid bursts and Xid-less faults inside the window, classified."""

    log: KernelLog
    since: datetime | None
    dropped: int  # events before the window
    groups: list[Group]
    faults: list[KernelFault]
    fail_codes: set[int]
    ignore_codes: set[int]
    bursts: dict[tuple[int, str], int]  # (xid, pci) -> bursts

    def of(self, severity: str) -> list[Group]:
        return [g for g in self.groups if g.severity == severity]

    @property
    def fail_pcis(self) -> set[str]:
        return {g.first.pci for g in self.of(cat.FAIL)}

    def label(self, pci: str) -> str:
        return _label(pci, self.log.gpus)


def _graded(ctx: CheckContext, log: KernelLog) -> _Graded:
    since = _since(ctx)
    window = float(ctx.profile.get("xid.sympathetic_window_s", 60.0))
    reference = since or datetime.now()
    events = [ev for ev in log.events if not _before(_dated(ev.line, reference).time, since)]
    faults_all = [f for f in log.faults if not _before(_dated(f.line, reference).time, since)]
    fail_codes = _codes(ctx.profile.get("xid.fail"))
    ignore_codes = _codes(ctx.profile.get("xid.ignore"))
    groups = _group(events, _link_sympathetic(events, window), window)
    bursts: dict[tuple[int, str], int] = {}
    for g in groups:
        _classify(g, fail_codes, ignore_codes)
        bursts[g.key] = bursts.get(g.key, 0) + 1
    xid79 = {g.first.pci for g in groups if g.first.xid == 79}
    faults = _distinct_faults(f for f in faults_all if not (f.kind in ("fallen_off_bus", "gpu_lost")
                                                            and (f.pci in xid79 or (not f.pci and xid79))))
    return _Graded(log, since, len(log.events) - len(events), groups, faults, fail_codes, ignore_codes, bursts)


def _facts(gr: _Graded, run: Input) -> dict[str, Any]:
    log = gr.log
    counts: dict[str, dict[str, int]] = {}
    for g in gr.groups:
        per = counts.setdefault(g.first.pci, {})
        per[str(g.first.xid)] = per.get(str(g.first.xid), 0) + g.count
    facts: dict[str, Any] = {
        "events": [_event_fact(g, log.gpus) for g in gr.groups],
        "counts": counts,
        "faults": [{"kind": f.kind, "pci": f.pci, "gpu": log.gpus.get(f.pci, {}).get("index"),
                    "time": _time_fact(f.line), "time_text": f.line.time_text, "action": f.action,
                    "severity": cat.FAIL, "text": f.line.text} for f in gr.faults],
        "gpus": log.gpus,
        "since": gr.since.isoformat() if gr.since else None,
        "dropped_before_since": gr.dropped,
        "source_command": run.cmdline,
    }
    if log.hosts:
        facts["hosts"] = log.hosts
    if log.module_version:
        facts["driver_module"] = log.module_version
    if run.truncated:
        facts["truncated"] = True
    if log.excerpt or log.filter:
        facts["excerpt"] = True
        if log.filter:
            facts["filter"] = log.filter
    return facts


def _per_gpu(gs: list[Group]) -> dict[str, dict[int, int]]:
    """pci -> xid -> lines, over some bursts."""
    out: dict[str, dict[int, int]] = {}
    for g in gs:
        per = out.setdefault(g.first.pci, {})
        per[g.first.xid] = per.get(g.first.xid, 0) + g.count
    return out


def _describe(gr: _Graded, per: dict[int, int], pci: str) -> str:
    """One GPU's Xids: mnemonic, count, bursts and the Xid that caused a sympathetic one."""
    infos = gr.of(cat.INFO)
    parts = []
    for code, n in sorted(per.items()):
        info = cat.lookup(code)
        name = info.mnemonic if info else "not in catalog"
        extra = ""
        nb = gr.bursts.get((code, pci), 1)
        if n > 1:
            extra = f" x{n}" + (f" in {nb} bursts" if nb > 1 else "")
        causes = sorted(g.caused_by for g in infos
                        if g.first.pci == pci and g.first.xid == code and g.caused_by is not None)
        parts.append(f"Xid {code} {name}{extra}" + (f" (after Xid {causes[0]})" if causes else ""))
    return ", ".join(parts)


def _describe_all(gr: _Graded, per_gpu: dict[str, dict[int, int]]) -> str:
    return "; ".join(f"{gr.label(pci)}: {_describe(gr, per, pci)}" for pci, per in sorted(per_gpu.items()))


def _drain_evidence(ctx: CheckContext, gr: _Graded) -> list[str]:
    """The lines behind a drain: the failing Xids, their sympathetic ones, the driver's reset
    notes, Xid-less faults, and the profile lists that changed a grade."""
    evidence: list[str] = []
    fail_pcis = gr.fail_pcis
    fails = gr.of(cat.FAIL)
    for g in fails:
        evidence.append(short(g.first.line.raw))
        if g.count > 1:
            evidence.append(f"(Xid {g.first.xid} on {g.first.pci}: {g.count} lines, "
                            f"up to {g.last.line.time_text or 'the end of the log'})")
    evidence += [short(g.first.line.raw) for g in gr.of(cat.INFO) if g.first.pci in fail_pcis]
    evidence += [short(note.raw) for pci in sorted(fail_pcis) for note in gr.log.reset_notes.get(pci, [])[:1]]
    evidence += [short(f.line.raw) for f in gr.faults]
    if gr.fail_codes & {g.first.xid for g in fails}:
        evidence.append(f"xid.fail = {sorted(gr.fail_codes)} ({ctx.profile.source('xid.fail') or 'profile'})")
    ignored = gr.of("ignored")
    if ignored:
        evidence.append(f"xid.ignore = {sorted(gr.ignore_codes)} ({ctx.profile.source('xid.ignore') or 'profile'}): "
                        f"{sum(g.count for g in ignored)} event(s) not graded")
    return evidence


def _warn_evidence(gr: _Graded, shown: int = 6) -> list[str]:
    warns = gr.of(cat.WARN)
    evidence = [short(g.first.line.raw) for g in warns[:shown]]
    if len(warns) > shown:
        evidence.append(f"(... {len(warns) - shown} more bursts of warning-level Xids)")
    return evidence


def _drain_remedies(gr: _Graded) -> list[str]:
    """What clears each drain-level event, once each."""
    drain: list[str] = []
    for g in gr.of(cat.FAIL):
        act = g.action
        if not cat.needs_drain(act):
            act = "RESET_GPU"  # a site's xid.fail code, or Xid 154 asking for a reset
        drain.append(_remedy(act, g.first.xid, gr.label(g.first.pci), g.first.pci))
    for f in gr.faults:
        label = gr.label(f.pci) if f.pci else "the GPU named in the line"
        drain.append(_remedy(f.action, None, label, f.pci, f.kind))
    return list(dict.fromkeys(drain))


@dataclass
class _Soft:
    """The warning-level Xids: what the summary says of them and what to do."""

    bits: list[str]  # summary parts
    remedies: list[str]


def _soft(ctx: CheckContext, gr: _Graded) -> _Soft:
    warns = gr.of(cat.WARN)
    nvl_warns = [g for g in warns if g.first.xid in cat.NVLINK5_CODES]
    app_warns = [g for g in warns if g.first.xid not in cat.NVLINK5_CODES]
    app_codes = {g.first.xid for g in app_warns}
    app_pcis = {g.first.pci for g in app_warns}
    fail_pcis = gr.fail_pcis
    app_per = _per_gpu(app_warns + [g for g in gr.of(cat.INFO) if g.first.pci in app_pcis and g.first.pci not in fail_pcis])
    repeat_warn = int(ctx.profile.get("xid.repeat_warn", 0) or 0)
    repeated = [f"{gr.label(pci)} Xid {code} ({gr.bursts.get((code, pci), 1)} times)"
                for pci, per in sorted(app_per.items()) for code in sorted(per)
                if repeat_warn and cat.lookup(code) is not None and code in app_codes
                and gr.bursts.get((code, pci), 1) >= repeat_warn]
    soft = _Soft([], [])
    if app_warns:
        soft.remedies.append(_app_remedy(sorted(app_codes), repeated))
    if nvl_warns:
        soft.remedies.append(_NVLINK5_NONFATAL_REMEDY)
    if app_per:
        soft.bits.append("application-level Xids: " + _describe_all(gr, app_per))
    if nvl_warns:
        soft.bits.append("non-fatal NVLink5 Xids: " + _describe_all(gr, _per_gpu(nvl_warns)))
    return soft


def _drain_summary(gr: _Graded, soft: _Soft) -> str:
    fail_pcis = gr.fail_pcis
    fail_per = _per_gpu(gr.of(cat.FAIL) + [g for g in gr.of(cat.INFO) if g.first.pci in fail_pcis])
    bits = [f"{gr.label(pci)}: {_describe(gr, per, pci)}" for pci, per in sorted(fail_per.items())]
    bits += [f"{gr.label(f.pci) if f.pci else 'a GPU'}: {f.kind.replace('_', ' ')} (no Xid)" for f in gr.faults]
    summary = "GPU reset or reboot needed: " + "; ".join(bits)
    if soft.bits:
        summary += " (also " + "; ".join(soft.bits) + ")"
    return summary


def _quiet_summary(gr: _Graded) -> str:
    window_txt = f"since {gr.since.isoformat()}" if gr.since else "since boot"
    quiet = ""
    muted = gr.of(cat.INFO) + gr.of("ignored")
    if muted:
        quiet = f" ({sum(g.count for g in muted)} informational or ignored event(s))"
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
        return ctx.result(Status.SKIP, "no kernel log captured; Xids not checked")
    early = _not_gradable(ctx, run, log)
    if early is not None:
        return early
    gr = _graded(ctx, log)
    facts = _facts(gr, run)
    evidence = _drain_evidence(ctx, gr) + _warn_evidence(gr)
    soft = _soft(ctx, gr)
    if gr.of(cat.FAIL) or gr.faults:
        remedy = "drain node; " + "; ".join(_drain_remedies(gr) + soft.remedies)
        return ctx.result(Status.FAIL, _drain_summary(gr, soft), evidence=evidence, remedy=remedy, facts=facts)
    if gr.of(cat.WARN):
        summary = "no drain needed; " + " / ".join(soft.bits)
        return ctx.result(Status.WARN, summary, evidence=evidence, remedy="; ".join(soft.remedies), facts=facts)
    return ctx.result(Status.PASS, _quiet_summary(gr), evidence=evidence, facts=facts)


def _distinct_faults(faults: Any) -> list[KernelFault]:
    """One fault per (kind, GPU): the same init failure is often logged twice."""
    out: dict[tuple[str, str], KernelFault] = {}
    for f in faults:
        out.setdefault((f.kind, f.pci), f)
    return list(out.values())


register(Check(
    id="gpu.xid",
    title="GPU Xid events",
    grade=grade_xid,
    probes=(PROBE,),
    required=("kernel-log",),
    inputs=("kernel-log",),
    profile_keys={"xid.fail": list, "xid.ignore": list, "xid.repeat_warn": int,
                  "xid.sympathetic_window_s": (int, float)},
    catches="Xids needing a GPU reset or reboot (48, 62, 64, 74, 79, 95, 109, 119, 120, fatal NVLink5 ...), "
            "GPU fallen off the bus, lost, reset required, GSP timeouts, adapter init failures and NVLink "
            "discovery failures without an Xid; app-level Xids (13, 31, 43, 94) as warnings",
    node_local=True,
    in_run=True,
))
