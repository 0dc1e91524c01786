"""The fabric manager's log as facts: NVSwitch errors (SXids), multicast (NVLS) team failures,
aborts, restarts, and the end of a successful configuration.

Sources: `/var/log/fabricmanager.log` (records `[Mon DD YYYY HH:MM:SS] [LEVEL] [tid N] message`;
framing peels the time and the level; lines without a record header continue the previous
record, such as `Message payload details: ...`), the daemon's journal (`journalctl -u
nvidia-fabricmanager`, ident nv-fabricmanager), and the `nvidia-fabricmanager-wrapper:` lines of
the Talos/container extension, which name the NVSwitch management ports (LPF) it found and
the one it picked.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from preflight.framing import Doc
from preflight.parsers.base import Format, ParserSpec, short

_INIT = re.compile(r"^Fabric Manager Log initializing at:\s*(?P<time>.*)$")
_LEVEL = re.compile(r"\[(INFO|WARNING|WARN|ERROR|FATAL|CRITICAL|DEBUG)\]")
_TID = re.compile(r"^(?:\[(?:INFO|WARNING|WARN|ERROR|FATAL|CRITICAL|DEBUG)\]\s*)?\[tid \d+\]\s*")
_FATAL = re.compile(r"detected NVSwitch fatal error (\d+)|detected GPU NVL Fatal error", re.I)
_NONFATAL = re.compile(r"detected NVSwitch non-fatal error (\d+)|detected GPU NVL Non Fatal error", re.I)
_ABORT = re.compile(r"aborting fabric manager|fabric manager (is )?(exiting|terminating)|"
                    r"failed to (start|initialize) fabric manager", re.I)
_MULTICAST_FAIL = re.compile(r"(?:fail\w*|error)\b.*\bmulticast team|multicast team.*\b(?:fail\w*|error)", re.I)
_SWITCH = re.compile(r"pci bus id (\S+)(?: physical id (\d+))?(?: port (\d+))?", re.I)
_LPF = re.compile(r"found NVSwitch LPF:\s*device=(\S+)\s+guid=(\S+)", re.I)
_LPF_USED = re.compile(r"using NVSwitch management port GUID:\s*(\S+)", re.I)
_IDENTS = ("nv-fabricmanager", "nvidia-fabricmanager", "fabricmanager")
_WRAPPER = "nvidia-fabricmanager-wrapper:"
DETAIL_MAX = 6  # continuation lines kept per event (display limit)


@dataclass
class FmEvent:
    kind: str  # fatal | nonfatal | multicast | abort | error | start | configured
    line: str  # the record as printed
    time: datetime | None = None
    time_text: str = ""
    code: int | None = None  # the SXid
    switch: str = ""  # "00000000:86:00.0 (physical id 3)"
    port: int | None = None
    detail: list[str] = field(default_factory=list)  # continuation lines of a multi-line record

    @property
    def quote(self) -> str:
        text = short(self.line, 240)
        return text + (" | " + "; ".join(self.detail[:DETAIL_MAX]) if self.detail else "")


@dataclass
class FmLog:
    events: list[FmEvent] = field(default_factory=list)
    records: int = 0  # fabric manager records read (any level)
    lpf_found: list[tuple[str, str]] = field(default_factory=list)  # (device, guid) the wrapper found
    lpf_used: str = ""  # the management port GUID the wrapper picked
    wrapper_lines: list[str] = field(default_factory=list)

    @property
    def recognised(self) -> bool:
        return bool(self.records or self.wrapper_lines)

    def of(self, kind: str) -> list[FmEvent]:
        return [e for e in self.events if e.kind == kind]


def classify(msg: str, level: str, line: str, time: datetime | None = None, time_text: str = "") -> FmEvent | None:
    """The event one fabric manager message is, or None for routine INFO."""
    m = _INIT.match(msg)
    if m or re.search(r"Fabric Manager version \S+ is running", msg):
        return FmEvent("start", line, time, time_text or (m.group("time").strip() if m else ""))
    if "Successfully configured all the available NVSwitches" in msg:
        return FmEvent("configured", line, time, time_text)
    for kind, pattern in (("fatal", _FATAL), ("nonfatal", _NONFATAL)):
        fm = pattern.search(msg)
        if fm:
            ev = FmEvent(kind, line, time, time_text, code=int(fm.group(1)) if fm.group(1) else None)
            sm = _SWITCH.search(msg)
            if sm:
                ev.switch = sm.group(1) + (f" (physical id {sm.group(2)})" if sm.group(2) else "")
                ev.port = int(sm.group(3)) if sm.group(3) else None
            return ev
    if _MULTICAST_FAIL.search(msg):
        return FmEvent("multicast", line, time, time_text)
    if level in ("ERROR", "FATAL", "CRITICAL"):
        return FmEvent("abort" if _ABORT.search(msg) else "error", line, time, time_text)
    return None


def _add_wrapper(log: FmLog, msg: str, line: str) -> None:
    log.wrapper_lines.append(line)
    m = _LPF.search(msg)
    if m:
        log.lpf_found.append((m.group(1), m.group(2)))
    m = _LPF_USED.search(msg)
    if m:
        log.lpf_used = m.group(1)


def from_journal(items: Iterable[tuple[str, str, str]]) -> FmLog:
    """Events from journal messages (time text, message, line as printed) of the daemon."""
    log = FmLog()
    for time_text, msg, line in items:
        if _WRAPPER in msg:
            _add_wrapper(log, msg, line)
            continue
        log.records += 1
        lm = _LEVEL.search(msg)
        ev = classify(_TID.sub("", _LEVEL.sub("", msg, 1).strip()), lm.group(1) if lm else "", line,
                      time_text=time_text)
        if ev is not None:
            log.events.append(ev)
    return log


def parse(doc: Doc) -> FmLog:
    log = FmLog()
    open_event: FmEvent | None = None  # the graded record whose continuation lines follow
    for ln in doc.lines:
        text = ln.text.strip()
        if not text:
            open_event = None  # a blank line ends a multi-line record
            continue
        if _WRAPPER in text:
            _add_wrapper(log, text, ln.raw.strip())
            open_event = None
            continue
        is_record = (not ln.cont and ln.time is not None) or _INIT.match(text) or ln.ident in _IDENTS
        if not is_record:
            if open_event is not None:
                open_event.detail.append(re.sub(r"\s+", " ", text))
            continue
        log.records += 1
        lm = _LEVEL.search(ln.raw)
        open_event = classify(_TID.sub("", text), lm.group(1) if lm else "", ln.raw.strip(), ln.time, ln.time_text)
        if open_event is not None and open_event.kind == "start" and log.events and log.events[-1].kind == "start":
            open_event = None  # "Log initializing" then "version X is running": one start
        if open_event is not None:
            log.events.append(open_event)
    return log


def detect(doc: Doc) -> bool:
    """Fabric manager log records, its journal, or the wrapper's lines."""
    head = doc.head(400)
    if any(ln.text.lstrip().startswith("Loaded:") for ln in head) and any(
            ln.text.lstrip().startswith("Active:") for ln in head):
        return False  # `systemctl status`: the fm-service parser reads its journal lines
    if any(_WRAPPER in ln.text for ln in head):
        return True
    records = [ln for ln in head if (ln.time is not None and _TID.match(ln.text)) or _INIT.match(ln.text.strip())
               or ln.ident in _IDENTS]
    if not records:
        return False
    return any(re.search(r"Fabric Manager|NVSwitch|multicast|inband message|NVLink|fabric", ln.text, re.I)
               for ln in records)


FORMATS = [Format("fm-log", detect=detect, priority=55,
                  description="fabric manager log (/var/log/fabricmanager.log, its journal, the Talos wrapper)")]
PARSERS = [ParserSpec("fm-log", parse)]

__all__ = ["FORMATS", "PARSERS", "FmEvent", "FmLog", "classify", "detect", "from_journal", "parse"]
