"""gpu.xid: NVIDIA Xid events (and Xid-less GPU faults) in the kernel log.

The kernel log comes from `dmesg -T` or, where dmesg is not readable, `journalctl -k`. A line
is split into its kernel prefix (any of the timestamp styles below) and the message; the
message is then searched for NVRM Xid reports and for the few GPU faults the driver reports
without an Xid number (GPU fallen off the bus, adapter init failure, NVLink discovery failure).

Timestamp styles: `dmesg -T`/`--ctime` `[Mon Jun  3 10:12:01 2024]`, `dmesg --time-format=iso`
`2024-06-03T10:12:01,123456+00:00`, raw `[12345.678901]` (seconds since boot, kept as such),
`journalctl -k` short / short-precise (`Jun 03 10:12:01 host kernel: ...`, no year), short-iso,
syslog files (`... kernel: [12345.678] ...`), `/dev/kmsg` records (`6,1234,5678901,-;...`),
and the `dmesg --decode` facility/level prefix (`kern  :warn  : `).

Xids are graded with the catalog in `xid_catalog`: a code whose immediate action needs a GPU
reset or a reboot FAILs (drain the node), application-level codes WARN (report to the job
owner, no drain). Sympathetic Xids (45 after another Xid, 43 after 13, 94/95/63 after 48) are
tied to their cause. Floods of the same Xid on one GPU are grouped into bursts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from preflight.checks import xid_catalog as cat
from preflight.model import Result, Status
from preflight.probes import Probe
from preflight.registry import Check, CheckContext, Format, register, register_format

PROBE = Probe.of(
    "kernel-log",
    ["dmesg", "-T"],
    ["journalctl", "-k", "--no-pager", "-o", "short-iso"],
    timeout=15,
)

_MONTHS = {m: i for i, m in enumerate(
    ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], start=1)}
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_DECODE = re.compile(
    r"^(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7])\s*:"
    r"\s*(?:emerg|alert|crit|err|warn|notice|info|debug)\s*:\s?")
_PRIO = re.compile(r"^<\d{1,3}>")
_KMSG = re.compile(r"^\d{1,3},\d+,(?P<usec>\d+),[^;]*;")
_CTIME = re.compile(
    r"^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<mon>[A-Z][a-z]{2}) +(?P<day>\d{1,2}) "
    r"(?P<hms>\d{2}:\d{2}:\d{2}) (?P<year>\d{4})\]\s?")
_MONO = re.compile(r"^\[\s*(?P<mono>\d+\.\d+)\]\s?")
_ISO = re.compile(
    r"^(?P<iso>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)"
    r"(?:\s+(?P<host>\S+) kernel:)?\s+")
_SYSLOG = re.compile(
    r"^(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(?P<day>\d{1,2}) "
    r"(?P<hms>\d{2}:\d{2}:\d{2})(?P<frac>\.\d+)? (?P<host>\S+) kernel: ?")

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\):\s*"
    r"(?P<code>\d+)(?:,\s*(?P<rest>.*))?$")
_PID_NAME = re.compile(r"^pid=(?P<pid>[^,]*),\s*(?:name=(?P<name>[^,]*),\s*)?(?P<msg>.*)$")
_NVLINK5 = re.compile(r"^(?P<unit>[A-Z][A-Z0-9_]*)\s+(?P<sev>Fatal|Non-?fatal|NonFatal)\b(?P<after>.*)$",
                      re.IGNORECASE)
_LINK = re.compile(r"\blink\s+(?P<link>-?\d+)", re.IGNORECASE)
_HEX = re.compile(r"0x[0-9A-Fa-f]+")
_GPU_N = re.compile(r"\bGPU(?P<n>\d{1,2})\b")
_RECOVERY = re.compile(r"\bto (?P<code>0x[0-9A-Fa-f]+)\s*\((?P<what>[^)]*)\)")
_PCI_ANY = re.compile(r"(?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?")
_GPU_AT = re.compile(r"NVRM: GPU at PCI:(?P<pci>[0-9A-Fa-f:]+): (?P<uuid>GPU-[0-9a-fA-F-]+)")
_SERIAL = re.compile(r"NVRM: GPU Board Serial Number: (?P<serial>\S+)")
_NEEDS_RESET = re.compile(r"needs to be reset|reset (?:the )?gpu|reboot", re.IGNORECASE)

# Xid-less faults: (kind, pattern, action). The action names what clears it.
_FAULTS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("fallen_off_bus", re.compile(r"fallen off the bus", re.IGNORECASE), "RESTART_BM"),
    ("adapter_init_failed", re.compile(r"RmInitAdapter failed", re.IGNORECASE), "RESTART_BM"),
    ("nvlink_discovery_failed",
     re.compile(r"NVRM: knvlink\w*.*\bfail(?:ed)?\b|NVRM: .*NVLink.*(?:training|discovery).*fail", re.IGNORECASE),
     "WORKFLOW_NVLINK_ERR"),
)


# ---------------------------------------------------------------------------------------------
# Line splitting


@dataclass
class LogLine:
    lineno: int
    raw: str
    message: str
    time: datetime | None = None  # wall time (naive = the node's local time)
    mono: float | None = None  # seconds since boot
    time_text: str = ""
    prefixed: bool = False  # a kernel-log prefix was recognised


def pci_id(text: str) -> str:
    """Normalise a PCI id to domain:bus:device ("00000000:9B:00.0" -> "0000:9b:00")."""
    parts = text.strip().lower().split(".")[0].split(":")
    if len(parts) == 2:
        parts = ["0000", *parts]
    if len(parts) != 3:
        return text.strip().lower()
    dom, bus, dev = parts
    return f"{dom[-4:].rjust(4, '0')}:{bus.rjust(2, '0')}:{dev.rjust(2, '0')}"


def _iso(text: str) -> datetime | None:
    t = text.replace(",", ".")
    m = re.match(r"^(.*T\d{2}:\d{2}:\d{2})(\.\d+)?(Z|[+-]\d{2}:?\d{2})?$", t)
    if not m:
        return None
    base, frac, tz = m.group(1), m.group(2) or "", m.group(3) or ""
    if frac:
        frac = "." + (frac[1:] + "000000")[:6]
    if tz == "Z":
        tz = "+00:00"
    elif tz and ":" not in tz:
        tz = tz[:3] + ":" + tz[3:]
    try:
        return datetime.fromisoformat(base + frac + tz)
    except ValueError:
        return None


def _clock(year: int, mon: str, day: str, hms: str) -> datetime | None:
    try:
        h, mi, s = (int(x) for x in hms.split(":"))
        return datetime(year, _MONTHS[mon], int(day), h, mi, s)
    except (KeyError, ValueError):
        return None


def split_line(lineno: int, raw: str, year_hint: datetime | None = None) -> LogLine:
    """Strip the kernel-log prefix of one line; parse its time when it carries one."""
    line = _ANSI.sub("", raw).rstrip("\r\n")
    out = LogLine(lineno=lineno, raw=line.strip(), message=line.strip())
    rest = line.lstrip()
    m = _DECODE.match(rest)
    if m:
        rest, out.prefixed = rest[m.end():], True
    m = _PRIO.match(rest)
    if m:
        rest = rest[m.end():]
    m = _KMSG.match(rest)
    if m:
        out.mono = int(m.group("usec")) / 1e6
        out.time_text = f"{out.mono:.6f}"
        out.prefixed = True
        rest = rest[m.end():]
    else:
        m = _CTIME.match(rest)
        if m:
            out.time = _clock(int(m.group("year")), m.group("mon"), m.group("day"), m.group("hms"))
            out.time_text = m.group(0).strip().strip("[]")
            out.prefixed = True
            rest = rest[m.end():]
        else:
            m = _ISO.match(rest)
            if m and ("," in m.group("iso") or m.group("host") or re.search(r"[+-]\d{2}:?\d{2}$|Z$", m.group("iso"))):
                out.time = _iso(m.group("iso"))
                out.time_text = m.group("iso")
                out.prefixed = True
                rest = rest[m.end():]
            else:
                m = _SYSLOG.match(rest)
                if m:
                    out.time_text = f"{m.group('mon')} {m.group('day')} {m.group('hms')}"
                    out.prefixed = True
                    if year_hint is not None:
                        t = _clock(year_hint.year, m.group("mon"), m.group("day"), m.group("hms"))
                        hint = year_hint.replace(tzinfo=None)
                        if t is not None and hint - t > timedelta(days=180):
                            t = t.replace(year=t.year + 1)
                        out.time = t
                    rest = rest[m.end():]
        m = _MONO.match(rest)
        if m:
            out.mono = float(m.group("mono"))
            if not out.time_text:
                out.time_text = m.group("mono")
            out.prefixed = True
            rest = rest[m.end():]
    out.message = rest.strip()
    return out


# ---------------------------------------------------------------------------------------------
# Parsing


@dataclass
class XidEvent:
    xid: int
    pci: str
    line: LogLine
    text: str  # the message after "Xid (PCI:...): N, " without pid/name
    pid: str = ""
    name: str = ""
    gpu: int | None = None
    unit: str = ""
    fatal: bool | None = None
    link: int | None = None
    registers: list[str] = field(default_factory=list)
    recovery: str = ""  # Xid 154: the printed recovery action
    recovery_code: int | None = None
    caused_by: int | None = None


@dataclass
class KernelFault:
    kind: str
    pci: str
    line: LogLine
    action: str


@dataclass
class KernelLog:
    lines: int = 0
    prefixed: int = 0
    nvrm: int = 0
    events: list[XidEvent] = field(default_factory=list)
    faults: list[KernelFault] = field(default_factory=list)
    gpus: dict[str, dict[str, Any]] = field(default_factory=dict)
    reset_notes: dict[str, list[LogLine]] = field(default_factory=dict)
    dropped_before_since: int = 0


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


def _parse_xid(m: re.Match[str], line: LogLine) -> XidEvent:
    rest = (m.group("rest") or "").strip()
    ev = XidEvent(xid=int(m.group("code")), pci=pci_id(m.group("pci")), line=line, text=rest)
    pm = _PID_NAME.match(rest)
    if pm:
        ev.pid = pm.group("pid").strip("'")
        ev.name = (pm.group("name") or "").strip()
        ev.text = pm.group("msg").strip()
    g = _GPU_N.search(ev.text)
    if g:
        ev.gpu = int(g.group("n"))
    if ev.xid in cat.NVLINK5_CODES or ev.xid == 74:
        nm = _NVLINK5.match(ev.text)
        if nm:
            ev.unit = nm.group("unit")
            ev.fatal = nm.group("sev").lower() == "fatal"
        elif "fatal" in ev.text.lower():
            ev.fatal = "nonfatal" not in ev.text.lower().replace("-", "")
        lk = _LINK.search(ev.text)
        if lk:
            ev.link = int(lk.group("link"))
        ev.registers = _HEX.findall(ev.text)
    if ev.xid == 154:
        rm = _RECOVERY.search(ev.text)
        if rm:
            ev.recovery = rm.group("what").strip()
            try:
                ev.recovery_code = int(rm.group("code"), 16)
            except ValueError:
                ev.recovery_code = None
    return ev


def _seconds_between(a: LogLine, b: LogLine) -> float | None:
    if a.time is not None and b.time is not None and (a.time.tzinfo is None) == (b.time.tzinfo is None):
        return abs((b.time - a.time).total_seconds())
    if a.mono is not None and b.mono is not None:
        return abs(b.mono - a.mono)
    return None


def _within(a: LogLine, b: LogLine, window_s: float) -> bool:
    gap = _seconds_between(a, b)
    return gap is None or gap <= window_s


def _link_sympathetic(events: list[XidEvent], window_s: float) -> None:
    """Tie each sympathetic Xid to the latest earlier Xid on the same GPU that can cause it."""
    latest: dict[str, dict[int, XidEvent]] = {}  # pci -> xid -> its latest event so far
    for ev in events:
        seen = latest.setdefault(ev.pci, {})
        if ev.xid in cat.SYMPATHETIC:
            causes = cat.SYMPATHETIC[ev.xid]
            cands = [p for x, p in seen.items() if x != ev.xid and (causes is None or x in causes)]
            if cands:
                prev = max(cands, key=lambda p: p.line.lineno)
                if _within(prev.line, ev.line, window_s):
                    ev.caused_by = prev.caused_by if prev.caused_by is not None else prev.xid
        seen[ev.xid] = ev


def parse_kernel_log(text: str, since: datetime | None = None, window_s: float = 60.0) -> KernelLog:
    """Kernel log text -> Xid events, Xid-less GPU faults and the PCI -> GPU identity map."""
    log = KernelLog()
    last_gpu_at = ""
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        log.lines += 1
        line = split_line(n, raw, since)
        log.prefixed += line.prefixed
        msg = line.message
        if "NVRM" not in msg:
            if "fallen off the bus" in msg.lower() and not _before(line.time, since):
                pm = _PCI_ANY.search(msg)
                log.faults.append(KernelFault("fallen_off_bus", pci_id(pm.group("pci")) if pm else "", line,
                                              "RESTART_BM"))
            continue
        log.nvrm += 1
        gm = _GPU_AT.search(msg)
        if gm:
            last_gpu_at = pci_id(gm.group("pci"))
            log.gpus.setdefault(last_gpu_at, {})["uuid"] = gm.group("uuid")
            continue
        sm = _SERIAL.search(msg)
        if sm:
            if last_gpu_at:
                log.gpus.setdefault(last_gpu_at, {})["serial"] = sm.group("serial")
            continue
        xm = _XID.search(msg)
        if xm:
            if _before(line.time, since):
                log.dropped_before_since += 1
                continue
            ev = _parse_xid(xm, line)
            log.events.append(ev)
            if ev.gpu is not None:
                log.gpus.setdefault(ev.pci, {}).setdefault("index", ev.gpu)
            continue
        if _before(line.time, since):
            continue
        for kind, pat, action in _FAULTS:
            if pat.search(msg):
                pm = _PCI_ANY.search(msg)
                log.faults.append(KernelFault(kind, pci_id(pm.group("pci")) if pm else "", line, action))
                break
        else:
            if _NEEDS_RESET.search(msg):
                pm = _PCI_ANY.search(msg)
                if pm:
                    log.reset_notes.setdefault(pci_id(pm.group("pci")), []).append(line)
    for ev in log.events:
        if ev.gpu is None:
            ev.gpu = log.gpus.get(ev.pci, {}).get("index")
    _link_sympathetic(log.events, window_s)
    return log


def looks_like_kernel_log(text: str) -> bool:
    """A kernel log: NVRM lines, or mostly lines with a kernel timestamp prefix."""
    total = prefixed = 0
    for n, raw in enumerate(text.splitlines()[:2000], start=1):
        if not raw.strip():
            continue
        line = split_line(n, raw)
        if line.message.startswith("NVRM: "):
            return True
        total += 1
        prefixed += line.prefixed
        if total >= 200:
            break
    return prefixed >= 3 and prefixed * 2 >= total


def _looks_like_journal(text: str) -> bool:
    head = [ln for ln in text.splitlines()[:200] if ln.strip() and not ln.startswith("-- ")]
    return bool(head) and sum(bool(_SYSLOG.match(ln) or (_ISO.match(ln) and " kernel:" in ln)) for ln in head) * 2 >= len(head)


def _looks_like_kmsg(text: str) -> bool:
    head = [ln for ln in text.splitlines()[:200] if ln.strip() and not ln.startswith(" ")]
    return bool(head) and sum(bool(_KMSG.match(ln)) for ln in head) * 2 >= len(head)


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

    @property
    def key(self) -> tuple[int, str]:
        return self.first.xid, self.first.pci


def _group(events: list[XidEvent], window_s: float) -> list[Group]:
    groups: list[Group] = []
    open_: dict[tuple[int, str, int | None, str, bool | None], Group] = {}
    for ev in events:
        k = (ev.xid, ev.pci, ev.caused_by, ev.unit, ev.fatal)
        g = open_.get(k)
        if g is not None and _within(g.last.line, ev.line, window_s):
            g.last = ev
            g.count += 1
            continue
        g = Group(first=ev, last=ev)
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
    if ev.caused_by is not None and sev != cat.FAIL:
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


def _time_fact(line: LogLine) -> str | None:
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
        "caused_by": ev.caused_by,
    }
    if ev.pid:
        fact["pid"], fact["name"] = ev.pid, ev.name
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
        since = _iso(since) if "T" in since else _iso(since.replace(" ", "T", 1))
    return since if isinstance(since, datetime) else None


def _short(line: str, limit: int = 300) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _codes(profile_value: Any) -> set[int]:
    out: set[int] = set()
    for v in profile_value or []:
        try:
            out.add(int(v))
        except (TypeError, ValueError):
            continue
    return out


def grade_xid(ctx: CheckContext) -> Result:
    cap = ctx.capture("kernel-log")
    if cap is None:
        return ctx.result(Status.SKIP, "no kernel log captured; Xids not checked")
    cmd = " ".join(cap.argv)
    text = cap.stdout
    if cap.rc not in (0, None) and not text.strip():
        err = (cap.stderr or "").strip().splitlines()
        return ctx.result(Status.ERROR, f"cannot read the kernel log ({cmd} exited {cap.rc})",
                          evidence=err[-3:] or [f"{cmd}: exit {cap.rc}"],
                          remedy="run preflight as root (or with CAP_SYSLOG), or set kernel.dmesg_restrict=0 / "
                                 "add the user to the systemd-journal group",
                          facts={"events": [], "source_command": cmd})
    body = [ln for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("-- ")]
    if not body:
        return ctx.result(Status.ERROR, f"the kernel log is empty ({cmd}); Xids not checked",
                          evidence=text.strip().splitlines()[:2] or ["(no output)"],
                          remedy="check that the kernel ring buffer / journald keeps kernel messages on this node",
                          facts={"events": [], "source_command": cmd})
    since = _since(ctx)
    window = float(ctx.profile.get("xid.sympathetic_window_s", 60.0))
    log = parse_kernel_log(text, since=since, window_s=window)
    if log.prefixed == 0 and log.nvrm == 0:
        return ctx.result(Status.ERROR, f"output of {cmd} is not a kernel log (no kernel timestamps, no NVRM lines)",
                          evidence=[_short(ln) for ln in body[:3]],
                          remedy=f"run `{cmd}` by hand and check its output",
                          facts={"events": [], "source_command": cmd})

    fail_codes = _codes(ctx.profile.get("xid.fail"))
    ignore_codes = _codes(ctx.profile.get("xid.ignore"))
    repeat_warn = int(ctx.profile.get("xid.repeat_warn", 0) or 0)
    groups = _group(log.events, window)
    for g in groups:
        _classify(g, fail_codes, ignore_codes)

    counts: dict[str, dict[str, int]] = {}
    bursts: dict[tuple[int, str], int] = {}
    for g in groups:
        per = counts.setdefault(g.first.pci, {})
        per[str(g.first.xid)] = per.get(str(g.first.xid), 0) + g.count
        bursts[g.key] = bursts.get(g.key, 0) + 1

    fails = [g for g in groups if g.severity == cat.FAIL]
    warns = [g for g in groups if g.severity == cat.WARN]
    infos = [g for g in groups if g.severity == cat.INFO]
    xid79 = {g.first.pci for g in groups if g.first.xid == 79}
    faults = [f for f in log.faults if not (f.kind == "fallen_off_bus" and f.pci in xid79)]

    facts: dict[str, Any] = {
        "events": [_event_fact(g, log.gpus) for g in groups],
        "counts": counts,
        "faults": [{"kind": f.kind, "pci": f.pci, "gpu": log.gpus.get(f.pci, {}).get("index"),
                    "time": _time_fact(f.line), "time_text": f.line.time_text, "action": f.action,
                    "severity": cat.FAIL, "text": f.line.message} for f in faults],
        "gpus": log.gpus,
        "since": since.isoformat() if since else None,
        "dropped_before_since": log.dropped_before_since,
        "source_command": cmd,
    }
    if cap.truncated:
        facts["truncated"] = True

    def agg(gs: list[Group]) -> dict[str, dict[int, int]]:
        out: dict[str, dict[int, int]] = {}
        for g in gs:
            per = out.setdefault(g.first.pci, {})
            per[g.first.xid] = per.get(g.first.xid, 0) + g.count
        return out

    def describe(per: dict[int, int], pci: str) -> str:
        parts = []
        for code, n in sorted(per.items()):
            info = cat.lookup(code)
            name = info.mnemonic if info else "not in catalog"
            extra = ""
            nb = bursts.get((code, pci), 1)
            if n > 1:
                extra = f" x{n}" + (f" in {nb} bursts" if nb > 1 else "")
            caused = sorted(g.first.caused_by for g in infos
                            if g.first.pci == pci and g.first.xid == code and g.first.caused_by is not None)
            parts.append(f"Xid {code} {name}{extra}" + (f" (after Xid {caused[0]})" if caused else ""))
        return ", ".join(parts)

    evidence: list[str] = []
    fail_pcis = {g.first.pci for g in fails}
    for g in fails:
        evidence.append(_short(g.first.line.raw))
        if g.count > 1:
            evidence.append(f"(Xid {g.first.xid} on {g.first.pci}: {g.count} lines, "
                            f"up to {g.last.line.time_text or 'the end of the log'})")
    for g in infos:
        if g.first.pci in fail_pcis:
            evidence.append(_short(g.first.line.raw))
    for pci in sorted(fail_pcis):
        for note in log.reset_notes.get(pci, [])[:1]:
            evidence.append(_short(note.raw))
    for f in faults:
        evidence.append(_short(f.line.raw))
    if fail_codes & {g.first.xid for g in fails}:
        evidence.append(f"xid.fail = {sorted(fail_codes)} ({ctx.profile.source('xid.fail') or 'profile'})")
    ignored = [g for g in groups if g.severity == "ignored"]
    if ignored:
        evidence.append(f"xid.ignore = {sorted(ignore_codes)} ({ctx.profile.source('xid.ignore') or 'profile'}): "
                        f"{sum(g.count for g in ignored)} event(s) not graded")

    drain: list[str] = []
    for g in fails:
        act = g.action
        if act not in cat.DRAIN_BUCKETS and act not in ("WORKFLOW_NVLINK5_ERR", "DRAIN_P2P"):
            act = "RESET_GPU"  # a site's xid.fail code, or Xid 154 asking for a reset
        drain.append(_remedy(act, g.first.xid, _label(g.first.pci, log.gpus), g.first.pci))
    for f in faults:
        label = _label(f.pci, log.gpus) if f.pci else "the GPU named in the line"
        drain.append(_remedy(f.action, None, label, f.pci, f.kind))
    drain = list(dict.fromkeys(drain))

    nvl_warns = [g for g in warns if g.first.xid in cat.NVLINK5_CODES]
    app_warns = [g for g in warns if g.first.xid not in cat.NVLINK5_CODES]
    app_pcis = {g.first.pci for g in app_warns}
    app_per = agg(app_warns + [g for g in infos if g.first.pci in app_pcis and g.first.pci not in fail_pcis])
    repeated = [f"{_label(pci, log.gpus)} Xid {code} ({bursts.get((code, pci), 1)} times)"
                for pci, per in sorted(app_per.items()) for code in sorted(per)
                if repeat_warn and cat.lookup(code) is not None and code in {g.first.xid for g in app_warns}
                and bursts.get((code, pci), 1) >= repeat_warn]
    soft: list[str] = []
    if app_warns:
        soft.append(_app_remedy(sorted({g.first.xid for g in app_warns}), repeated))
    if nvl_warns:
        soft.append(_NVLINK5_NONFATAL_REMEDY)
    shown = 0
    for g in warns:
        if shown >= 6:
            evidence.append(f"(... {len(warns) - shown} more bursts of warning-level Xids)")
            break
        evidence.append(_short(g.first.line.raw))
        shown += 1

    window_txt = f"since {since.isoformat()}" if since else "since boot"
    soft_bits = []
    if app_per:
        soft_bits.append("application-level Xids: " + "; ".join(
            f"{_label(pci, log.gpus)}: {describe(per, pci)}" for pci, per in sorted(app_per.items())))
    if nvl_warns:
        soft_bits.append("non-fatal NVLink5 Xids: " + "; ".join(
            f"{_label(pci, log.gpus)}: {describe(per, pci)}" for pci, per in sorted(agg(nvl_warns).items())))
    if fails or faults:
        fail_per = agg(fails + [g for g in infos if g.first.pci in fail_pcis])
        bits = [f"{_label(pci, log.gpus)}: {describe(per, pci)}" for pci, per in sorted(fail_per.items())]
        bits += [f"{_label(f.pci, log.gpus) if f.pci else 'a GPU'}: {f.kind.replace('_', ' ')} (no Xid)"
                 for f in faults]
        summary = "GPU reset or reboot needed: " + "; ".join(bits)
        if soft_bits:
            summary += " (also " + "; ".join(soft_bits) + ")"
        remedy = "drain node; " + "; ".join(drain + soft)
        return ctx.result(Status.FAIL, summary, evidence=evidence, remedy=remedy, facts=facts)
    if warns:
        summary = "no drain needed; " + " / ".join(soft_bits)
        return ctx.result(Status.WARN, summary, evidence=evidence, remedy="; ".join(soft), facts=facts)
    quiet = ""
    if infos or ignored:
        quiet = f" ({sum(g.count for g in infos + ignored)} informational or ignored event(s))"
    dropped = f"; {log.dropped_before_since} older event(s) before the window" if log.dropped_before_since else ""
    return ctx.result(Status.PASS, f"no Xid needing action {window_txt}{quiet}{dropped}", evidence=evidence,
                      facts=facts)


register_format(Format("kernel-log", detect=looks_like_kernel_log,
                       description="kernel log: dmesg -T / --ctime / --time-format=iso / --decode, raw dmesg",
                       priority=40))
register_format(Format("journal-kernel", detect=_looks_like_journal, probe="kernel-log",
                       description="journalctl -k (short, short-iso, short-precise) or a syslog kern.log",
                       priority=42))
register_format(Format("kmsg", detect=_looks_like_kmsg, probe="kernel-log",
                       description="/dev/kmsg records (prio,seq,usec,flags;message)", priority=44))

register(Check(
    id="gpu.xid",
    title="GPU Xid events",
    grade=grade_xid,
    probes=(PROBE,),
    required=("kernel-log",),
    profile_keys={"xid.fail": list, "xid.ignore": list, "xid.repeat_warn": int,
                  "xid.sympathetic_window_s": (int, float)},
    formats=("kernel-log",),
    catches="Xids needing a GPU reset or reboot (48, 62, 64, 74, 79, 95, 109, 119, 120, fatal NVLink5 ...), "
            "GPU fallen off the bus, NVLink discovery failures; app-level Xids (13, 31, 43, 94) as warnings",
    node_local=True,
    in_run=True,
))
