"""Link up/down events in system logs (syslog, journal, dmesg) as facts.

systemd-networkd ("ib6: lost carrier", "ib6: Gained carrier"), NetworkManager ("device (ib0):
carrier ... off/on"), network drivers in the kernel log (mlx5 "Link down" / "Link up", the Intel
and Broadcom "NIC Link is Down/Up", "ib0: link down"), IPoIB "link becomes ready", and the mlx5
driver's transceiver faults ("Port module event[error]: module 0, Cable error, High
Temperature"). Times and hosts come from the framing. A flap is a down followed by an up of the
same interface.

Linear in the log: the lines are found by a substring scan, each distinct event text is matched
once, lines are peeled only when quoted, and the events are indexed by interface once, so a
grader asking about each of hundreds of interfaces reads each event once in all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from preflight import lazyre
from preflight.framing import Doc, Hit, Line
from preflight.parsers.base import Format, ParserSpec

# found in any letter case
NEEDLES = ("carrier", "link down", "link up", "link is down", "link is up", "link becomes ready",
           "port module event[error]")
_PCI = r"(?:(?P<pci>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d) )?"
# (a word the line must hold, lower-cased: a C-speed test before the pattern; pattern; link up?)
_EVENTS: tuple[tuple[str, re.Pattern[str], bool], ...] = (
    ("lost carrier", lazyre.compile(r"(?P<if>[\w.@-]+): lost carrier", re.I), False),
    ("gained carrier", lazyre.compile(r"(?P<if>[\w.@-]+): gained carrier", re.I), True),
    ("carrier: link connected", lazyre.compile(r"device \((?P<if>[\w.@-]+)\): carrier: link connected", re.I), True),
    ("carrier: link disconnected",
     lazyre.compile(r"device \((?P<if>[\w.@-]+)\): carrier: link disconnected", re.I), False),
    ("down", lazyre.compile(_PCI + r"(?P<if>[\w.@-]+): (?:NIC )?Link (?:is )?down\b", re.I), False),
    ("up", lazyre.compile(_PCI + r"(?P<if>[\w.@-]+): (?:NIC )?Link (?:is )?up\b", re.I), True),
    ("link becomes ready", lazyre.compile(r"ADDRCONF\(NETDEV_CHANGE\): (?P<if>[\w.@-]+): link becomes ready", re.I), True),
)
# mlx5 core, drivers/net/ethernet/mellanox/mlx5/core/events.c: mlx5_port_module_event()
_MODULE_ERROR = lazyre.compile(r"(?P<pci>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d)\b.*?Port module event\[error\]: "
                           r"module (?P<module>\d+), (?P<what>[^\r\n]*?)\s*$", re.I)


class LinkEvent:
    """One link up/down event. The line is peeled when first asked for: a log with 100,000 link
    events peels the few a report quotes, not all of them."""

    __slots__ = ("iface", "up", "_doc", "_hit")

    def __init__(self, iface: str, up: bool, doc: Doc, hit: Hit) -> None:
        self.iface = iface
        self.up = up
        self._doc = doc
        self._hit = hit

    def __repr__(self) -> str:
        return f"LinkEvent({self.iface!r}, up={self.up}, line={self.line.n})"

    @property
    def line(self) -> Line:
        return self._doc.peel_hit(self._hit)

    @property
    def time(self) -> datetime | None:
        return self.line.time


class ModuleError:
    """A transceiver (port module) fault the mlx5 driver reported, on the PCI function `pci`."""

    __slots__ = ("pci", "module", "what", "_doc", "_hit")

    def __init__(self, pci: str, module: int, what: str, doc: Doc, hit: Hit) -> None:
        self.pci = pci
        self.module = module
        self.what = what  # "Cable error, High Temperature"
        self._doc = doc
        self._hit = hit

    @property
    def line(self) -> Line:
        return self._doc.peel_hit(self._hit)


@dataclass
class LinkEvents:
    events: list[LinkEvent] = field(default_factory=list)
    module_errors: list[ModuleError] = field(default_factory=list)
    pci_netdev: dict[str, str] = field(default_factory=dict)  # PCI function -> the netdev its link lines name
    _by: dict[str, list[LinkEvent]] | None = field(default=None, repr=False)
    _mods: dict[str, list[ModuleError]] | None = field(default=None, repr=False)

    @property
    def hosts(self) -> list[str]:
        return list(dict.fromkeys(e.line.host for e in self.events if e.line.host))

    def _index(self) -> dict[str, list[LinkEvent]]:
        """The events of each interface, in order (built once, on first use)."""
        if self._by is None:
            by: dict[str, list[LinkEvent]] = {}
            for e in self.events:
                by.setdefault(e.iface, []).append(e)
            self._by = by
        return self._by

    def of(self, iface: str) -> list[LinkEvent]:
        return self._index().get(iface, [])

    def window(self, iface: str) -> tuple[str, str]:
        """The time stamps of the first and the last event of `iface` that carry one."""
        mine = self.of(iface)
        first = next((e.line.time_text for e in mine if e.line.time_text), "")
        last = next((e.line.time_text for e in reversed(mine) if e.line.time_text), "")
        return first, last

    def interfaces(self) -> list[str]:
        return list(self._index())

    def downs(self, iface: str) -> list[LinkEvent]:
        return [e for e in self.of(iface) if not e.up]

    def flaps(self, iface: str) -> int:
        """Times `iface` lost its link and got it back (a last loss it did not recover from is a
        link down, not a flap)."""
        downs = len(self.downs(iface))
        return downs - 1 if downs and self.last_up(iface) is False else downs

    def last_up(self, iface: str) -> bool | None:
        mine = self.of(iface)
        return mine[-1].up if mine else None

    def device(self, err: ModuleError) -> str:
        """The netdev a module fault is on (from the same function's link lines), else its PCI address."""
        return self.pci_netdev.get(err.pci, err.pci)

    def _module_index(self) -> dict[str, list[ModuleError]]:
        if self._mods is None:
            mods: dict[str, list[ModuleError]] = {}
            for m in self.module_errors:
                mods.setdefault(self.device(m), []).append(m)
            self._mods = mods
        return self._mods

    def modules_of(self, name: str) -> list[ModuleError]:
        return self._module_index().get(name, [])

    def module_devices(self) -> list[str]:
        """The devices with a module fault, in order (netdev names, or PCI addresses)."""
        return list(self._module_index())


Match = tuple[str, bool, str]  # (interface, link up?, PCI function or "")


def _match(text: str) -> Match | None:
    low = text.lower()
    if "link" not in low and "carrier" not in low:
        return None
    for word, pat, up in _EVENTS:
        if word not in low:
            continue
        m = pat.search(text)
        if m:
            iface = m.group("if")
            if len(iface) <= 4 and iface.lower() in ("the", "nic", "link", "port"):
                return None
            pci = m.groupdict().get("pci") or ""
            return iface, up, pci.lower()
    return None


def _tail(raw: str, at: int) -> str:
    """The line from three words before its first link phrase (at `at`) to its end. Every event
    pattern puts its interface at most three single spaces before its phrase, so the tail holds
    the whole event, and lines that differ only in their time stamp share one tail."""
    s = at
    for _ in range(3):
        s = raw.rfind(" ", 0, s)
        if s < 0:
            return raw
    return raw[s + 1:]


def _module_error(doc: Doc, hit: Hit) -> ModuleError | None:
    m = _MODULE_ERROR.search(doc.peel_hit(hit).text)
    if m is None:
        return None
    return ModuleError(m.group("pci").lower(), int(m.group("module")), m.group("what"), doc, hit)


def _read(doc: Doc, hit: Hit, seen: dict[str, Match | None]) -> Match | None:
    if hit.raw.startswith("{"):  # a JSON record: its message is inside, peel it first
        return _match(doc.peel_hit(hit).text)
    if hit.at < 0:
        return _match(hit.raw)
    # framing is a prefix and cannot hold `ifname: Link down`: the event is read from the raw
    # line's tail, once per distinct tail (a log repeats the same event many times)
    key = _tail(hit.raw, hit.at)
    if key not in seen:
        seen[key] = _match(key)
    return seen[key]


def parse(doc: Doc) -> LinkEvents:
    out = LinkEvents()
    seen: dict[str, Match | None] = {}
    for hit in doc.scan(NEEDLES, fold=True):
        if "odule event[" in hit.raw:  # mlx5 prints "Port module event[error]" (no lower-casing per hit)
            err = _module_error(doc, hit)
            if err is not None:
                out.module_errors.append(err)
            continue
        got = _read(doc, hit, seen)
        if got is not None:
            out.events.append(LinkEvent(got[0], got[1], doc, hit))
            if got[2]:
                out.pci_netdev.setdefault(got[2], got[0])
    return out


def detect(doc: Doc) -> bool:
    head = doc.head(2000)
    if sum(1 for ln in head if _match(ln.text)) >= 2:
        return True
    return any("module event[" in ln.text.lower() and _MODULE_ERROR.search(ln.text) for ln in head)


FORMATS = [Format("link-events", detect=detect, priority=35,
                  description="link up/down and carrier events, mlx5 transceiver faults, in syslog, the journal "
                              "or the kernel log")]
PARSERS = [ParserSpec("link-events", parse)]

__all__ = ["FORMATS", "LinkEvent", "LinkEvents", "ModuleError", "PARSERS", "detect", "parse"]
