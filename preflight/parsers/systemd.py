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

from preflight import lazyre
from preflight.framing import Doc, Line
from preflight.parsers.base import Format, ParserSpec

_SYSTEMD_DOWN = lazyre.compile(r"System has not been booted with systemd|Failed to connect to bus|"
                           r"Failed to get D-Bus connection|systemd.*not running", re.I)
_ACTIVE_WORDS = {"active", "inactive", "failed", "activating", "deactivating", "reloading", "maintenance"}
_SHOW_LINE = lazyre.compile(r"^([A-Za-z][A-Za-z0-9]*)=(.*)$")
_NOT_FOUND = lazyre.compile(r"Unit (\S+?)(?:\.service)? (?:could not be found|not found)", re.I)
_START_OR_MISSING = lazyre.compile(r"(?:Unit|Job for) nvidia-fabricmanager\S*\s+(?:could not be found|failed)")
_JOB_FAILED = lazyre.compile(r"Job for (\S+?)(?:\.service)? failed(?: because (.*?))?\.?\s*$", re.I)
# journalctl's short format, any locale's month ("Nov", "11月", "nov."): framing peels the English one
JOURNAL = lazyre.compile(r"^(?P<time>\S{1,8} +\d{1,2} \d\d:\d\d:\d\d) (?P<host>\S+) (?P<ident>[\w.@-]+)"
                     r"(?:\[\d+\])?: (?P<msg>.*)$")
# a journal line pasted without its time and host ("nv-fabricmanager[27360]: ...", "systemd[1]: ...")
_BARE = lazyre.compile(r"^(?P<ident>nv-fabricmanager|nvidia-fabricmanager|systemd)\[\d+\]: (?P<msg>.*)$")
FM_UNIT = "nvidia-fabricmanager"
_FM_DESC = "NVIDIA fabric manager service"
# systemd's lines about a unit, the state each leaves it in: (pattern, active, sub, result)
_TRANSITIONS: tuple[tuple[re.Pattern[str], str, str, str], ...] = (
    (lazyre.compile(r"^Starting (?P<u>.+?)\.\.\.$"), "activating", "start", ""),
    (lazyre.compile(r"^Started (?P<u>.+?)\.?$"), "active", "running", "success"),
    (lazyre.compile(r"^Finished (?P<u>.+?)\.?$"), "active", "exited", "success"),  # a oneshot unit (systemd 246+)
    (lazyre.compile(r"^Stopping (?P<u>.+?)\.\.\.$"), "deactivating", "stop", ""),
    (lazyre.compile(r"^Stopped (?P<u>.+?)\.?$"), "inactive", "dead", "success"),
    (lazyre.compile(r"^Failed to start (?P<u>.+?)\.?$"), "failed", "failed", ""),
    (lazyre.compile(r"^Dependency failed for (?P<u>.+?)\.?$"), "failed", "failed", "dependency"),
    (lazyre.compile(r"^(?P<u>\S+?): (?:Succeeded|Deactivated successfully)\.?$"), "inactive", "dead", "success"),
    (lazyre.compile(r"^(?P<u>\S+?): Failed with result '(?P<r>[\w-]+)'\.?$"), "failed", "failed", ""),
    (lazyre.compile(r"^(?P<u>\S+?): Unit entered failed state\.?$"), "failed", "failed", ""),
    (lazyre.compile(r"^(?P<u>\S+?): Start request repeated too quickly\.?$"), "failed", "failed", "start-limit-hit"),
    # systemd before 236: "start request repeated too quickly for X", "Unit X entered failed state.", "X failed."
    (lazyre.compile(r"^[Ss]tart request repeated too quickly for (?P<u>\S+?)\.?$"), "failed", "failed", "start-limit-hit"),
    (lazyre.compile(r"^Unit (?P<u>\S+) entered failed state\.?$"), "failed", "failed", ""),
    (lazyre.compile(r"^(?P<u>\S+\.(?:service|socket|mount|timer|path)) failed\.?$"), "failed", "failed", ""),
    (lazyre.compile(r"^(?P<u>\S+?): Scheduled restart job, restart counter is at \d+\.?$"), "activating", "auto-restart",
     ""),
    (lazyre.compile(r"^(?P<u>\S+?): (?:[Mm]ain|[Cc]ontrol) process exited, code=(?P<c>\w+),? status=(?P<s>\d+)"), "", "",
     ""),
)
# systemd's journal lines on how the unit's process ended
_UNIT_END = lazyre.compile(rf"^{FM_UNIT}\.service: (?:Main|Control) process exited|^{FM_UNIT}\.service: Failed with result")


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


def unit_transition(message: str) -> tuple[str, State] | None:
    """(the unit or its description as the message names it, the state the message leaves it
    in) for systemd's journal messages about any unit; None when the message is not about a
    unit's state (a process that exited with status 0 does not decide it)."""
    for pattern, active, sub, result in _TRANSITIONS:
        m = pattern.match(message.strip())
        if m is None:
            continue
        if "r" in pattern.groupindex:
            result = m.group("r")
        if "c" in pattern.groupindex:
            code, status = m.group("c"), m.group("s")
            if code == "exited" and status == "0":
                return None
            return m.group("u"), State("failed", "failed", "signal" if code in ("killed", "dumped") else "exit-code")
        return m.group("u"), State(active, sub, result)
    return None


def transition(message: str) -> State | None:
    """(active, sub, result) a systemd journal message leaves the fabric manager unit in; None
    when the message is not about the unit's state."""
    for pattern, _active, _sub, _result in _TRANSITIONS:
        m = pattern.match(message.strip())
        if m is not None and _about_unit(m.group("u")):
            t = unit_transition(message)
            return t[1] if t is not None else None
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


def _fm_row(svc: UnitState, lines: list[str]) -> bool:
    """The fabric manager's row in a `list-units` table (`systemctl --failed`)."""
    for s in lines:
        r = ROW.match(s)
        if r and _base(r.group("u")) == FM_UNIT:
            svc.unit, svc.form, svc.lines = FM_UNIT, "list", [s]
            svc.load, svc.active, svc.sub = r.group("load"), r.group("active"), r.group("sub")
            return True
    return False


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
    if svc.form == "show" or _fm_row(svc, lines):
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
    if any((r := ROW.match(ln)) and _base(r.group("u")) == FM_UNIT for ln in lines):
        return True  # its row in a `list-units` table
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


# ---- units of any kind: `systemctl list-units` / `--failed`, `status` of any unit, its journal ----------------------

UNITS_PROBE = "systemd-units"
UNIT_NAME = r"[\w@:.\\-]+\.(?:service|socket|target|mount|automount|swap|timer|path|device|scope|slice)"
# src/systemctl/systemctl-list-units.c: a row is UNIT LOAD ACTIVE SUB DESCRIPTION, a failed unit's
# row led by a circle ("●", "*" without UTF-8); --plain drops the circle, --no-legend the header
ROW = lazyre.compile(rf"^(?:[●*×]\s*)?(?P<u>{UNIT_NAME})\s+(?P<load>loaded|not-found|masked|bad-setting|error|merged|stub)"
                 r"\s+(?P<active>[a-z-]+)\s+(?P<sub>[a-z-]+)(?:\s+(?P<d>.*))?$")
_TABLE_HEAD = lazyre.compile(r"^\s*UNIT\s+LOAD\s+ACTIVE\s+SUB(?:\s+(?:JOB\s+)?DESCRIPTION)?\s*$")
_LISTED = lazyre.compile(r"^(?P<n>\d+) loaded units? listed\b")
_LEGEND = lazyre.compile(r"^(?:Legend: )?(?:LOAD|ACTIVE|SUB|JOB)\s*(?:=|→|->)")
# a failed `systemctl start`, its hint on the same line (systemd < 227: 'Job for X failed because
# ... See "systemctl status X" ...') or the next (src/systemctl/systemctl-start-unit.c)
_START_FAILED = lazyre.compile(rf"^Job for ({UNIT_NAME}|[\w@:.-]+?) failed\b")
# `systemctl status`'s first line: its state's glyph, the unit, its description
_HEADER = lazyre.compile(rf"^(?:[●*○×↻]\s*)?(?P<u>{UNIT_NAME})(?: - (?P<d>.*))?$")


def _base(name: str) -> str:
    return name.removesuffix(".service")


@dataclass
class Units:
    """Every unit a capture names with its state, by unit name ("openibd.service") or, for a
    unit systemd's journal names only by description ("Failed to start NTP client/server."), by
    that description."""

    units: dict[str, UnitState] = field(default_factory=dict)
    descriptions: dict[str, str] = field(default_factory=dict)  # unit -> description
    listing: bool = False  # a `list-units` table
    listed: int | None = None  # "N loaded units listed."
    error: str = ""  # systemd could not be asked

    def unit(self, name: str) -> UnitState:
        if name not in self.units:
            self.units[name] = UnitState(unit=name)
        return self.units[name]

    def failed(self) -> list[UnitState]:
        return [u for u in self.units.values() if u.active == "failed"]

    def names(self, u: UnitState) -> list[str]:
        """What identifies the unit: its name, its base name, its description."""
        return [x for x in (u.unit, _base(u.unit), self.descriptions.get(u.unit, "")) if x]


def _subject(units: Units, named: str, doc_unit: str) -> str:
    """The unit a journal message's subject is: a unit name as is, a description of a unit seen
    above, else the unit `journalctl -u` asked for, else the description itself."""
    if re.fullmatch(UNIT_NAME, named):
        return named
    for unit, desc in units.descriptions.items():
        if desc == named:
            return unit
    return doc_unit or named


def _doc_unit(doc: Doc) -> str:
    """The unit of `journalctl -u X` / `systemctl status X`, as the prompt shows it."""
    m = re.search(r"(?:-u|--unit(?:=|\s+)|\bstatus)\s+([\w@:.-]+)", doc.command or "")
    if not m or m.group(1).startswith("-"):
        return ""
    name = m.group(1)
    return name if re.fullmatch(UNIT_NAME, name) else f"{name}.service"


def _journal_line(ln: Line) -> JournalLine | None:
    s = ln.text.strip()
    if not s:
        return None
    if ln.ident and not ln.cont:
        return JournalLine(ln.time_text, ln.ident, s, ln.raw.strip())
    j = JOURNAL.match(s)
    if j:
        return JournalLine(j.group("time"), j.group("ident"), j.group("msg"), s)
    b = re.match(r"^(?P<ident>[\w.@-]+)\[\d+\]: (?P<msg>.*)$", s)
    if b:
        return JournalLine("", b.group("ident"), b.group("msg"), s)
    if unit_transition(s) is not None:  # systemd's own message, its prefix cut off
        return JournalLine("", "systemd", s, s)
    return None


def _journal(doc: Doc) -> list[JournalLine]:
    return [j for j in map(_journal_line, doc.lines) if j is not None]


# words every failure message of _TRANSITIONS holds (found in the raw text before a line is peeled)
_FAILURE_NEEDLES = ("ailed", "process exited", "repeated too quickly")


def parse_units(doc: Doc) -> Units:
    """The units of a `list-units` table, of `systemctl status` blocks and of systemd's journal
    lines about them (the last that decides counts, as for the fabric manager's journal)."""
    out = Units()
    if not _tables_and_status(doc, out):
        return out
    journal = _journal_units(doc, out)
    _one_unit(out, {id(j): i for i, j in enumerate(journal)})
    for u in out.units.values():
        _settle(u)
    return out


def _tables_and_status(doc: Doc, out: Units) -> bool:
    """`list-units` rows and `systemctl status` blocks into `out`; False when systemd could not be asked."""
    cur: UnitState | None = None
    for ln in doc.lines:
        s = ln.text.strip()
        if not s:
            continue
        if _SYSTEMD_DOWN.search(s):
            out.error = s
            return False
        m = _LISTED.match(s)
        if m or _TABLE_HEAD.match(s):
            out.listing = True
            out.listed = int(m.group("n")) if m else out.listed
            continue
        r = ROW.match(s)
        if r:
            u = out.unit(r.group("u"))
            u.form, u.load, u.active, u.sub, u.lines = "list", r.group("load"), r.group("active"), r.group("sub"), [s]
            if r.group("d"):
                out.descriptions[u.unit] = r.group("d").strip()
            out.listing, cur = True, None
            continue
        jf = _START_FAILED.search(s)
        if jf:  # a failed `systemctl start X`: the unit exists and its start failed
            u = out.unit(jf.group(1) if re.fullmatch(UNIT_NAME, jf.group(1)) else f"{jf.group(1)}.service")
            if u.form == "none":
                u.form, u.load, u.active, u.result = "start", "loaded", "failed", "start-failed"
            u.start_failed = s
            u.lines.append(s)
            continue
        h = _HEADER.match(s)
        if h and not ln.ident:
            cur = out.unit(h.group("u"))
            if h.group("d"):
                out.descriptions[cur.unit] = h.group("d").strip()
            continue
        if cur is not None and not ln.ident and not JOURNAL.match(s):
            _status_line(cur, s)
    return True


def _journal_units(doc: Doc, out: Units) -> list[JournalLine]:
    """systemd's journal lines about units, and each daemon's own lines, to their units."""
    doc_unit = _doc_unit(doc)
    journal = _journal(doc)
    said = {id(j): unit_transition(j.message) for j in journal if j.ident == "systemd"}
    for j in journal:
        t = said.get(id(j))
        if t is not None:
            out.unit(_subject(out, t[0], doc_unit)).journal.append(j)
    for j in journal:
        own = f"{j.ident}.service"  # the daemon's own line: evidence of why its unit stopped
        if id(j) not in said and (own in out.units or own == doc_unit):
            out.unit(own).journal.append(j)
    return journal


def _one_unit(out: Units, order: dict[int, int]) -> None:
    """One unit's journal (`journalctl -u X`): systemd names the unit in some lines ("X.service:
    Failed with result ...") and by its description in others ("Failed to start <description>.");
    with one of each, the description is the unit's. A dependency that failed is another unit."""
    named = [k for k in out.units if re.fullmatch(UNIT_NAME, k)]
    described = [k for k, u in out.units.items() if k not in named
                 and not any(j.message.startswith("Dependency failed for") for j in u.journal)]
    if len(named) != 1 or len(described) != 1:
        return
    unit, desc = out.units[named[0]], out.units.pop(described[0])
    out.descriptions.setdefault(unit.unit, described[0])
    unit.journal = sorted(unit.journal + desc.journal, key=lambda j: order.get(id(j), 0))


def _settle(u: UnitState) -> None:
    """A unit's state: its status block's, else its journal's; its evidence: the state's lines,
    then systemd's last lines on how it ended and the daemon's own last lines."""
    said = [j for j in u.journal if unit_transition(j.message) is not None]
    own = [j for j in u.journal if j not in said]
    if u.form == "none" and said:
        last: State | None = None
        for j in said:
            t = unit_transition(j.message)
            state = t[1] if t is not None else None
            if state is None:
                continue
            if last is not None and last.active == state.active == "failed" and not state.result:
                state = state._replace(result=last.result)
            last = state
        if last is not None:
            u.form, u.load = "journal", u.load or "loaded"
            u.active, u.sub, u.result = last
    if u.form == "status":
        u.lines.sort(key=lambda ln: not ln.startswith("Active:"))
    if u.active != "active":
        u.lines += [j.line for j in own[-3:] + [j for j in said if j.line not in u.lines][-3:]]


def detect_units(doc: Doc) -> bool:
    """A `list-units` table (`systemctl --failed`), `systemctl status` of a unit, or systemd's
    journal lines saying a unit failed."""
    head = doc.head(80)  # pragma: no mutate (how far a detector reads)
    lines = [ln.text.strip() for ln in head if ln.text.strip()]
    if not lines:
        return False
    rows = sum(1 for s in lines if ROW.match(s))
    if rows and any(_TABLE_HEAD.match(s) or _LISTED.match(s) or _LEGEND.match(s) for s in lines):
        return True
    if "systemctl" in (doc.command or "") and rows and rows == len(lines):  # --no-legend
        return True
    if any(_START_FAILED.search(s) for s in lines):
        return True
    if any(_HEADER.match(s) for s in lines[:3]) and any(s.startswith("Loaded:") for s in lines) \
            and any(s.startswith("Active:") for s in lines):
        return True
    # systemd's failure lines anywhere in the document: only the lines holding a failure word are
    # peeled (a million-line log of other things costs a scan, not a peel)
    said = (_journal_line(doc.peel_hit(h)) for h in doc.scan(_FAILURE_NEEDLES))
    return any(t is not None and t[1].active == "failed" for t in (
        unit_transition(j.message) for j in said if j is not None and j.ident == "systemd"))


def could(doc: Doc) -> bool:
    """A cheap necessary condition of `detect`: every way it says yes names the unit (or its
    command does), its description, or is `systemctl show`'s LoadState/ActiveState."""
    head = doc.head_folded(60)  # pragma: no mutate (the lines detect reads)
    return "fabricmanager" in head or _FM_DESC.lower() in head or "loadstate" in head


FORMATS = [Format("fm-service", detect=detect, could=could,
                  priority=55,  # pragma: no mutate (the only format of its probe: its rank decides nothing)
                  description="systemctl show/status/is-active/start of nvidia-fabricmanager")]
FORMATS.append(Format(UNITS_PROBE, detect=detect_units,
                      priority=50,  # pragma: no mutate (the only format of its probe: its rank decides nothing)
                      description="systemctl list-units/--failed, systemctl status of any unit, systemd's journal "
                                  "lines saying a unit failed"))
PARSERS = [ParserSpec("fm-service", parse), ParserSpec(UNITS_PROBE, parse_units)]

__all__ = ["FM_UNIT", "FORMATS", "JOURNAL", "ROW", "UNIT_NAME", "UNITS_PROBE", "JournalLine", "PARSERS", "State", "UnitState", "Units",
           "detect", "detect_units", "journal_items", "parse", "parse_units", "transition", "unit_transition"]
