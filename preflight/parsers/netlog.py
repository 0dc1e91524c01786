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

from preflight.framing import Doc, Hit, Line
from preflight.parsers.base import Format, ParserSpec

# found in any letter case
NEEDLES = ("carrier", "link down", "link up", "link is down", "link is up", "link becomes ready")
# (a word the line must hold, lower-cased: a C-speed test before the pattern; pattern; link up?)
_EVENTS: tuple[tuple[str, re.Pattern[str], bool], ...] = (
    ("lost carrier", re.compile(r"(?P<if>[\w.@-]+): lost carrier", re.I), False),
    ("gained carrier", re.compile(r"(?P<if>[\w.@-]+): gained carrier", re.I), True),
    ("carrier: link connected", re.compile(r"device \((?P<if>[\w.@-]+)\): carrier: link connected", re.I), True),
    ("carrier: link disconnected",
     re.compile(r"device \((?P<if>[\w.@-]+)\): carrier: link disconnected", re.I), False),
    ("down", re.compile(r"(?:\d{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d )?(?P<if>[\w.@-]+): (?:NIC )?Link (?:is )?down\b", re.I),
     False),
    ("up", re.compile(r"(?:\d{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d )?(?P<if>[\w.@-]+): (?:NIC )?Link (?:is )?up\b", re.I),
     True),
    ("link becomes ready", re.compile(r"ADDRCONF\(NETDEV_CHANGE\): (?P<if>[\w.@-]+): link becomes ready", re.I), True),
)


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


@dataclass
class LinkEvents:
    events: list[LinkEvent] = field(default_factory=list)

    @property
    def hosts(self) -> list[str]:
        return list(dict.fromkeys(e.line.host for e in self.events if e.line.host))

    def of(self, iface: str) -> list[LinkEvent]:
        return [e for e in self.events if e.iface == iface]

    def window(self, iface: str) -> tuple[str, str]:
        """The time stamps of the first and the last event of `iface` that carry one."""
        mine = self.of(iface)
        first = next((e.line.time_text for e in mine if e.line.time_text), "")
        last = next((e.line.time_text for e in reversed(mine) if e.line.time_text), "")
        return first, last

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
        mine = self.of(iface)
        return mine[-1].up if mine else None


def _match(text: str) -> tuple[str, bool] | None:
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
            return iface, up
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


def parse(doc: Doc) -> LinkEvents:
    out = LinkEvents()
    seen: dict[str, tuple[str, bool] | None] = {}
    for hit in doc.scan(NEEDLES, fold=True):
        if hit.raw.startswith("{"):  # a JSON record: its message is inside, peel it first
            got = _match(doc.peel_hit(hit).text)
        elif hit.at < 0:
            got = _match(hit.raw)
        else:
            # framing is a prefix and cannot hold `ifname: Link down`: the event is read from the
            # raw line's tail, once per distinct tail (a log repeats the same event many times)
            key = _tail(hit.raw, hit.at)
            if key in seen:
                got = seen[key]
            else:
                got = seen[key] = _match(key)
        if got is not None:
            out.events.append(LinkEvent(got[0], got[1], doc, hit))
    return out


def detect(doc: Doc) -> bool:
    return sum(1 for ln in doc.head(2000) if _match(ln.text)) >= 2


FORMATS = [Format("link-events", detect=detect, priority=35,
                  description="link up/down and carrier events in syslog, the journal or the kernel log")]
PARSERS = [ParserSpec("link-events", parse)]

__all__ = ["FORMATS", "LinkEvent", "LinkEvents", "PARSERS", "detect", "parse"]
