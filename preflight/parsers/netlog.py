"""Link up/down events in system logs (syslog, journal, dmesg) as facts.

systemd-networkd ("ib6: lost carrier", "ib6: Gained carrier"), NetworkManager ("device (ib0):
carrier ... off/on"), network drivers in the kernel log (mlx5 "Link down" / "Link up", the Intel
and Broadcom "NIC Link is Down/Up", "ib0: link down"), IPoIB "link becomes ready". Times and hosts
come from the framing. A flap is a down followed by an up of the same interface.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from preflight.framing import Doc, Line
from preflight.parsers.base import Format, ParserSpec

NEEDLES = ("carrier", "Carrier", "Link down", "Link up", "link down", "link up", "Link is Down", "Link is Up",
           "Link Down", "Link Up", "link becomes ready", "LINK DOWN", "LINK UP")
_EVENTS: tuple[tuple[re.Pattern[str], bool], ...] = (
    (re.compile(r"(?P<if>[\w.@-]+): lost carrier", re.I), False),
    (re.compile(r"(?P<if>[\w.@-]+): gained carrier", re.I), True),
    (re.compile(r"device \((?P<if>[\w.@-]+)\): carrier: link connected", re.I), True),
    (re.compile(r"device \((?P<if>[\w.@-]+)\): carrier: link disconnected", re.I), False),
    (re.compile(r"(?:\d{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d )?(?P<if>[\w.@-]+): (?:NIC )?Link (?:is )?down\b", re.I), False),
    (re.compile(r"(?:\d{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d )?(?P<if>[\w.@-]+): (?:NIC )?Link (?:is )?up\b", re.I), True),
    (re.compile(r"ADDRCONF\(NETDEV_CHANGE\): (?P<if>[\w.@-]+): link becomes ready", re.I), True),
)


@dataclass
class LinkEvent:
    iface: str
    up: bool
    line: Line

    @property
    def time(self) -> datetime | None:
        return self.line.time


@dataclass
class LinkEvents:
    events: list[LinkEvent] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)

    def interfaces(self) -> list[str]:
        return list(dict.fromkeys(e.iface for e in self.events))

    def downs(self, iface: str) -> list[LinkEvent]:
        return [e for e in self.events if e.iface == iface and not e.up]

    def flaps(self, iface: str) -> int:
        """Times `iface` lost its link and got it back (a last loss it did not recover from is a
        link down, not a flap)."""
        downs = len(self.downs(iface))
        return downs - 1 if downs and self.last_up(iface) is False else downs

    def last_up(self, iface: str) -> bool | None:
        mine = [e for e in self.events if e.iface == iface]
        return mine[-1].up if mine else None


def _match(text: str) -> tuple[str, bool] | None:
    for pat, up in _EVENTS:
        m = pat.search(text)
        if m:
            iface = m.group("if")
            if iface.lower() in ("the", "nic", "link", "port"):
                return None
            return iface, up
    return None


def parse(doc: Doc) -> LinkEvents:
    out = LinkEvents()
    hosts: dict[str, None] = {}
    for ln in doc.select(NEEDLES):
        got = _match(ln.text)
        if got is None:
            continue
        out.events.append(LinkEvent(iface=got[0], up=got[1], line=ln))
        if ln.host:
            hosts.setdefault(ln.host)
    out.hosts = list(hosts)
    return out


def detect(doc: Doc) -> bool:
    return sum(1 for ln in doc.head(2000) if _match(ln.text)) >= 2


FORMATS = [Format("link-events", detect=detect, priority=35,
                  description="link up/down and carrier events in syslog, the journal or the kernel log")]
PARSERS = [ParserSpec("link-events", parse)]

__all__ = ["FORMATS", "LinkEvent", "LinkEvents", "PARSERS", "detect", "parse"]
