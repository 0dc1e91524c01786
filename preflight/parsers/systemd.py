"""systemd's view of a unit as facts: `systemctl show` (Key=Value), `systemctl status`,
`systemctl is-active`, a failed `systemctl start` ("Job for X.service failed because ..."),
"Unit X could not be found", the unit's journal lines that `status` prints below, and the
unit's journal on its own (`journalctl -u`, `journalctl -xeu`): systemd's own lines about the
unit ("Starting ...", "Started ...", "Stopped ...", "Failed with result ...", "Scheduled restart
job ...") give its state, the last one counting.

Used for the fabric manager (probe `fm-service`); the parser reads any unit. The messages are
systemd's (src/core/job.c job_emit_start_message / job_emit_done_message, src/core/service.c
service_sigchld_event and service_enter_dead, src/core/unit.c unit_log_failure / unit_log_success).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

from preflight.framing import Doc, Line
from preflight.parsers.base import Format, ParserSpec

_SYSTEMD_DOWN = re.compile(r"System has not been booted with systemd|Failed to connect to bus|"
                           r"Failed to get D-Bus connection|systemd.*not running", re.I)
_ACTIVE_WORDS = {"active", "inactive", "failed", "activating", "deactivating", "reloading", "maintenance"}
_SHOW_LINE = re.compile(r"^([A-Za-z][A-Za-z0-9]*)=(.*)$")
_NOT_FOUND = re.compile(r"Unit (\S+?)(?:\.service)? (?:could not be found|not found)", re.I)
_START_OR_MISSING = re.compile(r"(?:Unit|Job for) nvidia-fabricmanager\S*\s+(?:could not be found|failed)")
_JOB_FAILED = re.compile(r"Job for (\S+?)(?:\.service)? failed(?: because (.*?))?\.?\s*$", re.I)
# journalctl's short format, any locale's month ("Nov", "11月", "nov."): framing peels the English one
JOURNAL = re.compile(r"^(?P<time>\S{1,8} +\d{1,2} \d\d:\d\d:\d\d) (?P<host>\S+) (?P<ident>[\w.@-]+)"
                     r"(?:\[\d+\])?: (?P<msg>.*)$")
# a journal line pasted without its time and host ("nv-fabricmanager[27360]: ...", "systemd[1]: ...")
_BARE = re.compile(r"^(?P<ident>nv-fabricmanager|nvidia-fabricmanager|systemd)\[\d+\]: (?P<msg>.*)$")
FM_UNIT = "nvidia-fabricmanager"
_FM_DESC = "NVIDIA fabric manager service"
# systemd's lines about a unit, the state each leaves it in: (pattern, active, sub, result)
_TRANSITIONS: tuple[tuple[re.Pattern[str], str, str, str], ...] = (
    (re.compile(r"^Starting (?P<u>.+?)\.\.\.$"), "activating", "start", ""),
    (re.compile(r"^Started (?P<u>.+?)\.?$"), "active", "running", "success"),
    (re.compile(r"^Stopping (?P<u>.+?)\.\.\.$"), "deactivating", "stop", ""),
    (re.compile(r"^Stopped (?P<u>.+?)\.?$"), "inactive", "dead", "success"),
    (re.compile(r"^Failed to start (?P<u>.+?)\.?$"), "failed", "failed", ""),
    (re.compile(r"^Dependency failed for (?P<u>.+?)\.?$"), "failed", "failed", "dependency"),
    (re.compile(r"^(?P<u>\S+?): (?:Succeeded|Deactivated successfully)\.?$"), "inactive", "dead", "success"),
    (re.compile(r"^(?P<u>\S+?): Failed with result '(?P<r>[\w-]+)'\.?$"), "failed", "failed", ""),
    (re.compile(r"^(?P<u>\S+?): Unit entered failed state\.?$"), "failed", "failed", ""),
    (re.compile(r"^(?P<u>\S+?): Start request repeated too quickly\.?$"), "failed", "failed", "start-limit-hit"),
    (re.compile(r"^(?P<u>\S+?): Scheduled restart job, restart counter is at \d+\.?$"), "activating", "auto-restart",
     ""),
    (re.compile(r"^(?P<u>\S+?): (?:[Mm]ain|Control) process exited, code=(?P<c>\w+), status=(?P<s>\d+)"), "", "", ""),
)
# systemd's journal lines on how the unit's process ended
_UNIT_END = re.compile(rf"^{FM_UNIT}\.service: (?:Main|Control) process exited|^{FM_UNIT}\.service: Failed with result")


@dataclass
class JournalLine:
    time_text: str
    ident: str
    message: str
    line: str


@dataclass
class UnitState:
    unit: str = ""
    form: str = "none"  # show | status | is-active | start | none
    load: str = ""  # loaded | not-found | masked | bad-setting | error
    active: str = ""  # active | inactive | failed | activating | deactivating | ...
    sub: str = ""  # running | dead | failed | exited | auto-restart ...
    result: str = ""  # success | exit-code | signal | timeout | core-dump ...
    exec_status: int | None = None
    lines: list[str] = field(default_factory=list)  # the lines that say so
    error: str = ""  # systemd could not be asked
    start_failed: str = ""  # the "Job for ... failed" line of a failed `systemctl start`
    journal: list[JournalLine] = field(default_factory=list)  # the unit's log lines under `status`

    @property
    def recognised(self) -> bool:
        return self.form != "none" or bool(self.error)

    @property
    def installed(self) -> bool | None:
        if self.load == "not-found":
            return False
        return True if self.load else None

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


def _show(svc: UnitState, lines: list[str]) -> None:
    """`systemctl show` Key=Value lines (a unit's state needs LoadState or ActiveState)."""
    show = {}
    for ln in lines:
        m = _SHOW_LINE.match(ln)
        if m:
            show[m.group(1)] = (m.group(2).strip(), ln)
    if "LoadState" not in show and "ActiveState" not in show:
        return
    svc.form = "show"
    svc.unit = show.get("Id", ("", ""))[0]
    svc.load, svc.active = show.get("LoadState", ("", ""))[0], show.get("ActiveState", ("", ""))[0]
    svc.sub, svc.result = show.get("SubState", ("", ""))[0], show.get("Result", ("", ""))[0]
    code = show.get("ExecMainStatus", ("", ""))[0]
    svc.exec_status = int(code) if code.lstrip("-").isdigit() else None
    svc.lines = [show[k][1] for k in ("LoadState", "ActiveState", "SubState", "Result", "ExecMainStatus") if k in show]


def _status_line(svc: UnitState, s: str) -> None:
    m = re.match(r"^[●*○×\s]*(\S+?)\.service\b", s)
    if m and not svc.unit and svc.form == "none":
        svc.unit = m.group(1)
    m = re.match(r"^Loaded:\s*(\S+)", s)
    if m:
        svc.form, svc.load = "status", m.group(1)
        svc.lines.append(s)
        return
    m = re.match(r"^Active:\s*(\S+)(?:\s+\(([^)]*)\))?", s)
    if m:
        svc.form, svc.active = "status", m.group(1)
        paren = (m.group(2) or "").strip()
        r = re.match(r"Result:\s*(\S+)", paren)
        svc.result, svc.sub = (r.group(1), svc.active) if r else (svc.result, paren)
        svc.lines.append(s)
        return
    m = re.search(r"\(code=(\w+), status=(\d+)", s)
    # a forking daemon (the fabric manager) has two: its start command's `Process:` (0) and the
    # daemon's `Main PID:`, whose status is how the service ended
    if m and svc.form == "status" and (svc.exec_status is None or s.startswith("Main PID:")):
        svc.exec_status = int(m.group(2))
        svc.lines.append(s)


def journal_items(lines: list[Line]) -> list[tuple[str, str]]:
    """(identifier, message) of the journal lines among `lines` (peeled by framing, or in a
    locale framing does not know)."""
    out = []
    for ln in lines:
        text = ln.text.strip()
        if ln.ident and not ln.cont:
            out.append((ln.ident, text))
            continue
        j = JOURNAL.match(text)
        if j:
            out.append((j.group("ident"), j.group("msg")))
    return out


def _about_unit(u: str) -> bool:
    return u.startswith(FM_UNIT) or _FM_DESC.lower() in u.lower()


class State(NamedTuple):
    """The state a journal line leaves the unit in."""

    active: str
    sub: str
    result: str


def transition(message: str) -> State | None:
    """(active, sub, result) a systemd journal message leaves the fabric manager unit in; None
    when the message is not about the unit's state (a process that exited with status 0 does
    not decide it)."""
    for pattern, active, sub, result in _TRANSITIONS:
        m = pattern.match(message.strip())
        if m is None or not _about_unit(m.group("u")):
            continue
        if "r" in pattern.groupindex:
            result = m.group("r")
        if "c" in pattern.groupindex:
            code, status = m.group("c"), m.group("s")
            if code == "exited" and status == "0":
                return None
            return State("failed", "failed", "signal" if code in ("killed", "dumped") else "exit-code")
        return State(active, sub, result)
    return None


def _journal_state(svc: UnitState) -> None:
    """The unit's state from systemd's journal lines about it: the last one that decides counts
    (a failure keeps the result an earlier line of the same failure named)."""
    last: State | None = None
    lines: list[str] = []
    for j in svc.journal:
        t = transition(j.message)
        if t is None:
            continue
        lines.append(j.line)
        if last is not None and last.active == t.active == "failed" and not t.result:
            t = t._replace(result=last.result)
        last = t
    if last is None:
        return
    svc.form, svc.load = "journal", svc.load or "loaded"
    svc.active, svc.sub, svc.result = last
    svc.lines = lines[-3:]


def parse(doc: Doc) -> UnitState:
    svc = UnitState()
    items = [ln for ln in doc.lines if ln.text.strip()]
    lines = [ln.text.strip() for ln in items]
    for s in lines:
        if _SYSTEMD_DOWN.search(s):
            svc.error = s
            svc.lines.append(s)
            return svc
    _show(svc, lines)
    if svc.form == "show":
        return svc
    for ln in items:
        s = ln.text.strip()
        m = _NOT_FOUND.search(s)
        if m:
            svc.unit, svc.form, svc.load, svc.active = m.group(1), "status", "not-found", "inactive"
            svc.lines.append(s)
            return svc
        m = _JOB_FAILED.search(s)
        if m:  # a unit that could be started exists: it is loaded, and its start failed
            svc.unit, svc.start_failed = m.group(1), s
            if svc.form == "none":
                svc.form, svc.load, svc.active, svc.result = "start", "loaded", "failed", "start-failed"
            svc.lines.append(s)
            continue
        if ln.ident and not ln.cont:  # framing peeled the journal's time, host and identifier
            svc.journal.append(JournalLine(ln.time_text, ln.ident, s, ln.raw.strip()))
            continue
        j = JOURNAL.match(s)
        if j:
            svc.journal.append(JournalLine(j.group("time"), j.group("ident"), j.group("msg"), s))
            continue
        b = _BARE.match(s)
        if b:
            svc.journal.append(JournalLine("", b.group("ident"), b.group("msg"), s))
            continue
        if transition(s) is not None:  # systemd's own message about the unit, its prefix cut off
            svc.journal.append(JournalLine("", "systemd", s, s))
            continue
        _status_line(svc, s)
    _finish(svc, lines)
    return svc


def _finish(svc: UnitState, lines: list[str]) -> None:
    """The evidence lines of a status or a failed start; the state of a bare journal or `is-active`."""
    if svc.form in ("status", "start"):  # the state first; the daemon's own last lines say why it stopped, systemd's how
        svc.lines.sort(key=lambda ln: not ln.startswith("Active:"))
        own = [j for j in svc.journal if "fabricmanager" in j.ident][-3:]
        ended = [j for j in svc.journal if "fabricmanager" not in j.ident and _UNIT_END.search(j.message)][-2:]
        svc.lines += [j.line for j in svc.journal if j in own or j in ended]
    if svc.form == "none" and svc.journal:
        _journal_state(svc)
    if svc.form == "none" and len(lines) == 1 and lines[0] in _ACTIVE_WORDS | {"unknown"}:
        svc.form, svc.active, svc.lines = "is-active", "" if lines[0] == "unknown" else lines[0], lines


def detect(doc: Doc) -> bool:
    """systemctl output about the fabric manager unit (show, status, is-active under its
    prompt, a failed start, "could not be found"), or its journal with systemd's lines about it."""
    lines = [ln.text.strip() for ln in doc.head(60) if ln.text.strip()]  # pragma: no mutate (how far it reads)
    if not lines:
        return False
    cmd = doc.command or ""
    if "systemctl" in cmd and FM_UNIT not in cmd and "fabricmanager" not in cmd:
        return False
    if all(_SHOW_LINE.match(ln) for ln in lines):
        keys = dict(ln.partition("=")[::2] for ln in lines)
        unit = keys.get("Id", "") + keys.get("Names", "")
        return "LoadState" in keys and "ActiveState" in keys and (not unit or "fabricmanager" in unit)
    if any(_START_OR_MISSING.search(ln) for ln in lines):
        return True
    if "systemctl" in cmd and len(lines) == 1 and lines[0] in _ACTIVE_WORDS:
        return True
    head = doc.head(60)  # pragma: no mutate (how far a detector reads)
    if any(transition(msg) is not None for ident, msg in journal_items(head) if ident == "systemd"):
        return True
    if any(transition(ln) is not None or (_BARE.match(ln) and transition(_BARE.sub(r"\g<msg>", ln))) for ln in lines):
        return True  # systemd's lines about the unit pasted without the journal's prefix
    return any("nvidia-fabricmanager" in ln for ln in lines) and any(ln.startswith("Loaded:") for ln in lines) \
        and any(ln.startswith("Active:") for ln in lines)


FORMATS = [Format("fm-service", detect=detect,
                  priority=55,  # pragma: no mutate (the only format of its probe: its rank decides nothing)
                  description="systemctl show/status/is-active/start of nvidia-fabricmanager")]
PARSERS = [ParserSpec("fm-service", parse)]

__all__ = ["FM_UNIT", "FORMATS", "JOURNAL", "JournalLine", "PARSERS", "State", "UnitState", "detect", "journal_items",
           "parse", "transition"]
