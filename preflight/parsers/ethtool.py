"""`ethtool DEV` as facts: speed, duplex, lanes, link detected, port, auto-negotiation.

Bonds and virtual devices print "Not reported" / "Unknown!" where a NIC prints modes; a grep
fragment (`ethtool swp1 | grep -A 3 'Speed: '`) has no `Settings for` header, so the device name
comes from the command line; several devices may be printed in one paste.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from preflight import lazyre
from preflight.framing import Doc
from preflight.parsers.base import Format, ParserSpec

_HEADER = lazyre.compile(r"^Settings for (?P<dev>[^:\s]+):\s*$")
_FIELD = lazyre.compile(r"^(?P<key>[A-Za-z][A-Za-z -]*?)\s*:\s*(?P<val>.*?)\s*$")
_SPEED = lazyre.compile(r"^(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>[MG])b/s$", re.I)
_KEYS = ("speed", "duplex", "lanes", "link detected", "port", "auto-negotiation")  # the fields the facts keep


@dataclass
class EthLink:
    name: str
    speed_mbps: int | None = None  # None: "Unknown!" or not shown
    duplex: str = ""
    lanes: int | None = None
    link_detected: bool | None = None  # None: not shown
    port: str = ""
    autoneg: str = ""
    lines: list[str] = field(default_factory=list)


@dataclass
class EthtoolFacts:
    links: list[EthLink] = field(default_factory=list)
    excerpt: bool = False


def _device_from_command(command: str) -> str:
    m = re.search(r"\bethtool\s+(?:-\w+\s+)*([\w.@-]+)", command)
    return m.group(1) if m else ""


def parse(doc: Doc) -> EthtoolFacts:
    facts = EthtoolFacts(excerpt=doc.excerpt or bool(doc.filter))
    cur: EthLink | None = None
    for ln in doc.lines:
        t = ln.text.strip()
        if not t:
            continue
        h = _HEADER.match(t)
        if h:
            cur = EthLink(name=h.group("dev"), lines=[t])
            facts.links.append(cur)
            continue
        m = _FIELD.match(t)
        if not m or m.group("key").lower() not in _KEYS:
            continue
        if cur is None:  # a grep'd excerpt without the `Settings for DEV:` header
            cur = EthLink(name=_device_from_command(doc.command) or "?")
            facts.links.append(cur)
        _set_field(cur, m.group("key").lower(), m.group("val"))
        cur.lines.append(t)
    return facts


def _set_field(link: EthLink, key: str, val: str) -> None:
    """Note one `Key: value` of a link (a key of `_KEYS`)."""
    if key == "speed":
        sm = _SPEED.match(val)
        if sm:
            n = float(sm.group("n"))
            link.speed_mbps = int(n * (1000 if sm.group("unit").upper() == "G" else 1))
    elif key == "duplex":
        link.duplex = val
    elif key == "lanes":
        link.lanes = int(val) if val.isdigit() else None
    elif key == "link detected":
        link.link_detected = {"yes": True, "no": False}.get(val.lower())
    elif key == "port":
        link.port = val
    else:
        link.autoneg = val


def detect(doc: Doc) -> bool:
    head = [ln.text.strip() for ln in doc.head(200)]  # pragma: no mutate (how far detection reads)
    if any(_HEADER.match(t) for t in head) and any(t.startswith(("Speed:", "Link detected:")) for t in head):
        return True
    return "ethtool" in doc.command and any(t.startswith("Speed:") and _SPEED.match(t.partition(":")[2].strip())
                                            for t in head)


FORMATS = [Format("ethtool", detect=detect, priority=55, description="ethtool DEV (or a grep of it)")]
PARSERS = [ParserSpec("ethtool", parse)]

__all__ = ["EthLink", "EthtoolFacts", "FORMATS", "PARSERS", "detect", "parse"]
