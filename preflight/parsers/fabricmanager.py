"""The fabric manager's log as facts: NVSwitch errors (SXids), multicast (NVLS) team failures,
aborts, restarts, a version that differs from the driver's, "nothing to do" where the driver
sees no NVSwitch, and the end of a successful configuration; and the `nvidia-smi -q` Fabric
block pasted on its own (format `nvidia-smi-fabric`).

Sources: `/var/log/fabricmanager.log` (records `[Mon DD YYYY HH:MM:SS] [LEVEL] [tid N] message`;
framing peels the time and the level; lines without a record header continue the previous
record, such as `Message payload details: ...`), the daemon's journal (`journalctl -u
nvidia-fabricmanager`, ident nv-fabricmanager), and the `nvidia-fabricmanager-wrapper:` lines of
the Talos/container extension, which name the NVSwitch management ports (LPF) it found and
the one it picked; the start script (`nvidia-fabricmanager-start.sh`, 550+) and its
"Detected Pre-NVL5 system" line.

The Fabric block (`nvidia-smi -q`, 535+: `State`, `Status`; 550+: `CliqueId`, `ClusterUUID`;
570+: a `Health` sub-block with `Bandwidth`, `Route Recovery in progress`, `Route Unhealthy`,
`Access Timeout Recovery`; 575+: `Summary`, `Incorrect Configuration`; 580+: `Partition
Assigned`) is read here when it comes alone or grep'd (`nvidia-smi -q | grep -A 12 Fabric`);
inside a whole `nvidia-smi -q` it is read by `parsers.nvsmi_q`, and `blocks_from_q` turns those
GPUs' fields into the same blocks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import cast

from preflight import lazyre
from preflight.framing import Doc
from preflight.parsers import nvsmi_q, systemd
from preflight.parsers.base import Format, ParserSpec, short

_INIT = lazyre.compile(r"^Fabric Manager Log initializing at:\s*(?P<time>.*)$")
_LEVEL = lazyre.compile(r"\[(INFO|WARNING|WARN|ERROR|FATAL|CRITICAL|DEBUG)\]")
_TID = lazyre.compile(r"^(?:\[(?:INFO|WARNING|WARN|ERROR|FATAL|CRITICAL|DEBUG)\]\s*)?\[tid \d+\]\s*")
_FATAL = lazyre.compile(r"detected NVSwitch fatal error (\d+)|detected GPU NVL Fatal error", re.I)
_NONFATAL = lazyre.compile(r"detected NVSwitch non-fatal error (\d+)|detected GPU NVL Non Fatal error", re.I)
_ABORT = lazyre.compile(r"aborting fabric manager|fabric manager (is )?(exiting|terminating)|"
                    r"failed to (start|initialize) fabric manager", re.I)
_MULTICAST_FAIL = lazyre.compile(r"(?:fail\w*|error)\b.*\bmulticast team|multicast team.*\b(?:fail\w*|error)", re.I)
_SWITCH = lazyre.compile(r"pci bus id (\S+)(?: physical id (\d+))?(?: port (\d+))?", re.I)
_LPF = lazyre.compile(r"found NVSwitch LPF:\s*device=(?P<dev>\S+)\s+guid=(?P<guid>\S+)", re.I)
_LPF_USED = lazyre.compile(r"using NVSwitch management port GUID:\s*(?P<guid>\S+)", re.I)
# a journal message's own prefix: the log's bracketed time, its level, its thread
_PREFIX = lazyre.compile(r"^(?:\[[^\]]*\d\d:\d\d:\d\d\]\s*)?(?:\[(?P<level>INFO|WARNING|WARN|ERROR|FATAL|CRITICAL|DEBUG)\]\s*)?"
                     r"(?:\[tid \d+\]\s*)?")
# the driver interface check at start-up; "don't" (470-535), "doesn't" (545+), a typographic quote in some
_VERSION_MISMATCH = lazyre.compile(r"fabric manager NVIDIA GPU driver interface version (?P<fm>\S+) "
                               r"(?:don't|doesn't|don’t|doesn’t|do not|does not) match(?: with driver version "
                               r"(?P<driver>\d[\w.-]*\d))?", re.I)
# the NVSwitch driver has no switch for the fabric manager to manage (no NVSwitch, or not passed through)
_NOTHING_TO_DO = lazyre.compile(r"NV_WARN_NOTHING_TO_DO|WARNING Nothing to do", re.I)
_IDENTS = ("nv-fabricmanager", "nvidia-fabricmanager", "fabricmanager", "nvidia-fabricmanager-start.sh")
# a journal message pasted without its time and host: "nv-fabricmanager[27360]: ..."
_BARE_IDENT = lazyre.compile(r"^(?P<ident>nv-fabricmanager|nvidia-fabricmanager(?:-start\.sh)?)\[\d+\]:\s*(?P<msg>.*)$")
# the daemon's usage text (`nv-fabricmanager -h`, or after a command line it cannot read): its
# title, "Usage: nv-fabricmanager [options]", "Options include:" and one line per option
# ("[-c | --config]: Provides Fabric Manager config file path/name ...")
_USAGE = lazyre.compile(r"^(?:Usage: nv-fabricmanager\b|Options include:\s*$|\[-\w \| --[\w-]+\]:)")
# what a command-line parser prints before the usage text about an option it refuses
_BAD_OPTION = lazyre.compile(r"(?:unrecognized|unrecognised|unknown|invalid|illegal) (?:command[- ]line )?(?:option|argument)|"
                         r"option (?:'[^']*' )?requires an argument|missing (?:value|argument) for|"
                         r"(?:error|failed) (?:while )?parsing (?:the )?command[- ]line", re.I)
# the 550+ start script: the daemon it ran exited non-zero
_SCRIPT_FAILED = lazyre.compile(r'"[^"]*nv-fabricmanager[^"]*" failed! Exit code: (?P<rc>-?\d+)')
# the daemon writes to the journal without its level: the words of its error messages
_ERROR_WORDS = lazyre.compile(r"\b(?:fail(?:ed|ure|s)?|error|unable|abort\w*|cannot|can't|could not|timed? ?out|"
                          r"mismatch|not supported|invalid|exception|fatal)\b", re.I)
_OWN_LINE = lazyre.compile(r"\b(?:nv-fabricmanager|nvidia-fabricmanager-start\.sh)\[\d+\]:")
_CONFIG_DUMP = lazyre.compile(r"^[A-Za-z][\w .()/-]*\s=\s")  # "Logging level = 4": the start-up configuration dump
_WRAPPER = "nvidia-fabricmanager-wrapper:"
DETAIL_MAX = 6  # pragma: no mutate (continuation lines kept per event: a display limit)


@dataclass
class FmEvent:
    kind: str  # fatal | nonfatal | multicast | abort | error | start | configured | version-mismatch | nothing-to-do
    line: str  # the record as printed
    time: datetime | None = None
    time_text: str = ""
    code: int | None = None  # the SXid
    switch: str = ""  # "00000000:86:00.0 (physical id 3)"
    port: int | None = None
    detail: list[str] = field(default_factory=list)  # continuation lines of a multi-line record
    values: dict[str, str] = field(default_factory=dict)  # what the message names (versions)

    @property
    def quote(self) -> str:
        text = short(self.line, 240)  # pragma: no mutate (a display limit)
        return text + (" | " + "; ".join(self.detail[:DETAIL_MAX]) if self.detail else "")


@dataclass
class FmLog:
    events: list[FmEvent] = field(default_factory=list)
    records: int = 0  # fabric manager records read (any level)
    lpf_found: list[tuple[str, str]] = field(default_factory=list)  # (device, guid) the wrapper found
    lpf_used: str = ""  # the management port GUID the wrapper picked
    wrapper_lines: list[str] = field(default_factory=list)
    usage: bool = False  # the daemon's usage text after a command line it refused

    @property
    def recognised(self) -> bool:
        return bool(self.records or self.wrapper_lines or self.usage)

    def of(self, kind: str) -> list[FmEvent]:
        return [e for e in self.events if e.kind == kind]


def classify(msg: str, level: str, line: str, time: datetime | None = None, time_text: str = "") -> FmEvent | None:
    """The event one fabric manager message is, or None for routine INFO."""
    m = _INIT.match(msg)
    if m or re.search(r"Fabric Manager version \S+ is running", msg):
        return FmEvent("start", line, time, time_text or (m.group("time").strip() if m else ""))
    if "Successfully configured all the available NVSwitches" in msg or "Successfully configured all the available GPUs" \
            in msg:
        return FmEvent("configured", line, time, time_text)
    vm = _VERSION_MISMATCH.search(msg)
    if vm:
        return FmEvent("version-mismatch", line, time, time_text,
                       values={"fabric_manager": vm.group("fm"), "driver": vm.group("driver")})
    if _NOTHING_TO_DO.search(msg):
        return FmEvent("nothing-to-do", line, time, time_text)
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
    sf = _SCRIPT_FAILED.search(msg)
    if sf:
        return FmEvent("start-failed", line, time, time_text, values={"exit_code": sf.group("rc")})
    if _BAD_OPTION.search(msg):
        return FmEvent("bad-option", line, time, time_text)
    if level in ("ERROR", "FATAL", "CRITICAL") or (level == "" and error_words(msg)):
        return FmEvent("abort" if _ABORT.search(msg) else "error", line, time, time_text)
    return None


def error_words(msg: str) -> bool:
    """A message without its level (the journal prints none) that reads as one of the daemon's error
    messages ("failed to ...", "... error ...", "unable to ..."); not a line of its configuration dump."""
    return bool(_ERROR_WORDS.search(msg)) and not _CONFIG_DUMP.match(msg) and not msg.lower().startswith("success")


def _add_wrapper(log: FmLog, msg: str, line: str) -> None:
    log.wrapper_lines.append(line)
    m = _LPF.search(msg)
    if m:
        log.lpf_found.append((m.group("dev"), m.group("guid")))
    m = _LPF_USED.search(msg)
    if m:
        log.lpf_used = m.group("guid")


def _split_prefix(msg: str) -> tuple[str, str]:
    """(level, message) of a journal message that carries the log's own prefix."""
    m = cast("re.Match[str]", _PREFIX.match(msg))  # every part of the pattern is optional: it always matches
    return m.group("level") or "", msg[m.end():]


def from_journal(items: Iterable[tuple[str, str, str]]) -> FmLog:
    """Events from journal messages (time text, message, line as printed) of the daemon; systemd's
    "Starting <the unit>..." among them marks a start (what came before it is history)."""
    log = FmLog()
    usage: list[str] = []
    for time_text, msg, line in items:
        t = systemd.transition(msg)
        if t is not None:
            if t.sub == "start":
                log.events.append(FmEvent("start", line, time_text=time_text))
            continue
        if _WRAPPER in msg:
            _add_wrapper(log, msg, line)
            continue
        if _USAGE.match(msg.strip()):
            usage.append(line)
            continue
        log.records += 1
        level, body = _split_prefix(msg.strip())
        if not level and not _OWN_LINE.search(line):
            level = "?"  # another program's line about the unit: systemd's own are read by parsers.systemd
        ev = classify(body, level, line, time_text=time_text)
        if ev is not None:
            log.events.append(ev)
    if len(usage) >= 2:  # pragma: no mutate (the usage text in the unit's journal: it did not start)
        bad = [e for e in log.events if e.kind == "bad-option"]
        ev = bad[-1] if bad else FmEvent("bad-option", usage[0])
        ev.detail.extend(usage[:DETAIL_MAX])
        if not bad:
            log.events.append(ev)
        log.usage, log.records = True, log.records + len(usage)
    return log


def _unpeeled_journal(text: str) -> str | None:
    """The message of a fabric manager journal line framing did not peel (a month in another
    locale, "11月 15 14:15:47 host nv-fabricmanager[4177]: ..."), else None."""
    j = systemd.JOURNAL.match(text)
    return j.group("msg") if j and j.group("ident") in _IDENTS else None


def _bare(text: str) -> str | None:
    """The message of a daemon line pasted with its `nv-fabricmanager[pid]:` but without time and host."""
    m = _BARE_IDENT.match(text)
    return m.group("msg") if m else None


def _known(text: str) -> bool:
    """A message of the daemon's that says what it is without any framing (pasted bare)."""
    return bool(_VERSION_MISMATCH.search(text) or _NOTHING_TO_DO.search(text) or _SCRIPT_FAILED.search(text))


def _help_asked(lines: list[str]) -> bool:
    """The usage text follows a command line that asked for it (`nv-fabricmanager -h`)."""
    return any(re.search(r"nv-fabricmanager\S*\s+(?:.*\s)?(?:-h|--help)(?:\s|$)", t) for t in lines[-3:])


def _usage(log: FmLog, doc: Doc) -> None:
    """The daemon's usage text: printed after an option it refused (it did not start), unless it was asked for."""
    texts = [ln.text.strip() for ln in doc.lines]
    idx = [i for i, t in enumerate(texts) if _USAGE.match(_bare(t) or t)]
    if len(idx) < 2:  # pragma: no mutate (a title or one option line alone is not the usage text)
        return
    first = idx[0]
    bad = [e for e in log.events if e.kind == "bad-option"]
    journal = any(doc.lines[i].ident in _IDENTS or _bare(texts[i]) is not None for i in idx)
    if bad or (journal and not _help_asked(texts[:first])):
        if not bad:
            log.events.append(FmEvent("bad-option", doc.lines[first].raw.strip()))
        ev = bad[-1] if bad else log.events[-1]
        ev.detail.extend(re.sub(r"\s+", " ", _bare(texts[i]) or texts[i]) for i in idx[:DETAIL_MAX])
        log.usage, log.records = True, log.records + len(idx)


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
        msg = None if ln.ident else (_unpeeled_journal(text) or _bare(text))
        text = msg if msg is not None else text
        own = ln.ident in _IDENTS or msg is not None  # the daemon's message, as the journal prints it
        if _USAGE.match(text):
            open_event = None
            continue
        is_record = ((not ln.cont and ln.time is not None) or _INIT.match(text) or own or _known(text)
                     or (_BAD_OPTION.search(text) and "fabricmanager" in text))
        if not is_record:
            if open_event is not None:
                open_event.detail.append(re.sub(r"\s+", " ", text))
            continue
        log.records += 1
        lm = _LEVEL.search(ln.raw)
        level = lm.group(1) if lm else ("" if own else "?")  # "?": a line of another program in the same log
        open_event = classify(_TID.sub("", text), level, ln.raw.strip(), ln.time, ln.time_text)
        if open_event is not None and open_event.kind == "start" and log.events and log.events[-1].kind == "start":
            open_event = None  # "Log initializing" then "version X is running": one start
        if open_event is not None:
            log.events.append(open_event)
    _usage(log, doc)
    return log


def detect(doc: Doc) -> bool:
    """Fabric manager log records, its journal, or the wrapper's lines."""
    head = doc.head(400)  # pragma: no mutate (how far a detector reads)
    if systemd.detect(doc):
        return False  # `systemctl status`, a failed start, the unit's journal: the fm-service parser reads its lines
    if any(_WRAPPER in ln.text for ln in head):
        return True
    records = [ln.text for ln in head if (ln.time is not None and _TID.match(ln.text))
               or _INIT.match(ln.text.strip()) or ln.ident in _IDENTS]
    records += [m for m in (_unpeeled_journal(ln.text.strip()) or _bare(ln.text.strip()) for ln in head
                            if not ln.ident) if m]
    texts = [ln.text.strip() for ln in head]
    if any(_known(t) for t in texts):
        return True
    usage = [t for t in texts if _USAGE.match(_bare(t) or t)]
    if len(usage) >= 2 and (any(_BAD_OPTION.search(t) for t in texts) or any(_bare(t) for t in usage)  # pragma: no mutate
                            or any(ln.ident in _IDENTS for ln in head)):
        return True
    return any(re.search(r"Fabric Manager|NVSwitch|multicast|inband message|NVLink|fabric|NV_WARN_NOTHING_TO_DO",
                         t, re.I) for t in records)


# ---------------------------------------------------------------------------------------------
# The nvidia-smi -q Fabric block, alone or grep'd

_FIELD = lazyre.compile(r"^(?P<key>[^:]*?\S)\s*:(?:\s+(?P<value>.*?))?\s*$")


@dataclass
class FabricBlock:
    """One GPU's Fabric block: its fields by path ("Fabric/State", "Fabric/Health/Summary")."""

    index: int
    label: str
    bus_id: str = ""
    fields: dict[str, str] = field(default_factory=dict)
    lines: dict[str, str] = field(default_factory=dict)  # path -> the line as printed (padding collapsed)

    def get(self, path: str) -> str | None:
        return self.fields.get(path)

    def line(self, path: str) -> str:
        return self.lines.get(path, path)

    def under(self, prefix: str) -> list[tuple[str, str]]:
        p = prefix.rstrip("/") + "/"
        return [(k, v) for k, v in self.fields.items() if k.startswith(p)]


@dataclass
class FabricReport:
    blocks: list[FabricBlock] = field(default_factory=list)


def blocks_from_q(report: nvsmi_q.QReport) -> list[FabricBlock]:
    """The Fabric blocks of a whole `nvidia-smi -q` (GPUs that print one)."""
    out = []
    for gpu in report.gpus:
        if "Fabric/State" not in gpu.fields:
            continue
        mine = {k: v for k, v in gpu.fields.items() if k.startswith("Fabric/")}
        out.append(FabricBlock(gpu.index, gpu.label, gpu.bus_id, mine,
                               {k: gpu.line(k) for k in mine}))
    return out


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip())


def parse_fabric(doc: Doc) -> FabricReport:
    """Every `Fabric` section of the text: its fields, by their path under it."""
    rep = FabricReport()
    cur: FabricBlock | None = None
    stack: list[tuple[int, str]] = []  # (indent, name) of the open sections
    for ln in doc.lines:
        text = ln.text.replace("\t", "    ").rstrip()
        body = text.strip()
        if not body:
            continue
        ind = _indent(text)
        if body == "Fabric":
            cur = FabricBlock(len(rep.blocks), f"Fabric block {len(rep.blocks) + 1}")
            rep.blocks.append(cur)
            stack = [(ind, "Fabric")]
            continue
        if cur is None or ind <= stack[0][0]:
            cur = None
            continue
        while len(stack) > 1 and stack[-1][0] >= ind:
            stack.pop()
        fm = _FIELD.match(body)
        if fm is None or not (fm.group("value") or "").strip():
            stack.append((ind, fm.group("key").strip() if fm else body))
            continue
        path = "/".join([name for _, name in stack] + [fm.group("key").strip()])
        cur.fields.setdefault(path, (fm.group("value") or "").strip())
        cur.lines.setdefault(path, re.sub(r"\s{2,}", " ", body))
    return rep


def detect_fabric(doc: Doc) -> bool:
    """A Fabric section of `nvidia-smi -q` without the rest (a whole -q is `nvidia-smi-q`'s)."""
    head = [ln.text.replace("\t", "    ").rstrip() for ln in doc.head(400)]  # pragma: no mutate (how far it reads)
    for i, t in enumerate(head):
        if t.strip() != "Fabric":
            continue
        after = next((x for x in head[i + 1:] if x.strip()), "")
        if _indent(after) > _indent(t) and re.match(r"^\s*State\s*:", after):
            return not nvsmi_q.detect(doc)
    return False


# Words without which `detect` cannot say yes (lower-cased): the daemon's name (the wrapper's
# prefix, `nv-fabricmanager[pid]:`, the start script's failure, the usage title), a record's
# `[tid N]`, "Fabric Manager Log initializing" and the version-mismatch message, "nothing to do",
# and the usage text's other lines ("Options include:", a "[-x | --xx]:" option line).
_COULD = ("fabricmanager", "[tid ", "fabric manager", "nothing to do", "options include:", " | --")


def could(doc: Doc) -> bool:
    """A cheap necessary condition of `detect`: one of its words in the head, or a head line
    the framing named as the daemon's."""
    head = doc.head_folded(400)  # pragma: no mutate (the same lines detect reads)
    return any(w in head for w in _COULD) or any(ln.ident in _IDENTS for ln in doc.head(400))


FORMATS = [Format("fm-log", detect=detect, could=could,
                  priority=55,  # pragma: no mutate (the only format of its probe: its rank decides nothing)
                  description="fabric manager log (/var/log/fabricmanager.log, its journal, the Talos wrapper)"),
           Format("nvidia-smi-fabric", detect=detect_fabric,
                  priority=55,  # pragma: no mutate (the only format of its probe: its rank decides nothing)
                  description="the Fabric block of nvidia-smi -q, alone or grep'd (State, Status, CliqueId, Health)")]
PARSERS = [ParserSpec("fm-log", parse), ParserSpec("nvidia-smi-fabric", parse_fabric)]

__all__ = ["FORMATS", "PARSERS", "FabricBlock", "FabricReport", "FmEvent", "FmLog", "blocks_from_q", "classify",
           "detect", "detect_fabric", "from_journal", "parse", "parse_fabric"]
