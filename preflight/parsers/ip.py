"""Network interfaces from iproute2 (and ifconfig) as facts.

Forms: `ip -j [-d] addr|link` (JSON), `ip [-d] addr [show DEV]`, `ip link`, the one-line `ip -o
link|addr` (a `\\` where the multi-line form breaks the line), `ifconfig`. Names may carry a parent
(`bond0.3000@bond0`, `eth0@if12`); `altname` lines, `master bond0`, SLAVE/MASTER flags, linkinfo kinds
(`veth`, `bridge`, `vlan`, ...) are kept. A listing of links (`ip link`, `ip -o link`) shows no
addresses: `IpFacts.shows_addresses` says so, and graders must not read "no address" into it.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field
from typing import Any

from preflight.framing import Doc
from preflight.parsers.base import Format, ParserSpec


@dataclass
class Interface:
    name: str
    mtu: int | None = None
    state: str = ""  # operstate as printed: UP, DOWN, UNKNOWN, LOWERLAYERDOWN, ...
    flags: list[str] = field(default_factory=list)
    link_type: str = ""  # ether, loopback, infiniband, none, ...
    kind: str = ""  # linkinfo kind: veth, bridge, bond, vlan, tun, ...
    master: str = ""
    parent: str = ""  # `name@parent`
    addresses: list[str] = field(default_factory=list)
    altnames: list[str] = field(default_factory=list)
    parentbus: str = ""
    line: str = ""  # the interface's header line as printed (evidence)

    @property
    def up(self) -> bool:
        if self.state == "UP":
            return True
        if self.state in ("DOWN", "LOWERLAYERDOWN", "NOTPRESENT", "DORMANT"):
            return False
        # lo, tun and some IPoIB/virtual drivers report UNKNOWN while carrying traffic;
        # ifconfig prints no state: RUNNING is link up
        return "LOWER_UP" in self.flags or ("UP" in self.flags and "RUNNING" in self.flags)

    @property
    def slave(self) -> bool:
        return "SLAVE" in self.flags or bool(self.master)

    @property
    def global_addresses(self) -> list[str]:
        return [a for a in self.addresses if _global(a)]

    @property
    def ipv4(self) -> list[str]:
        return [a for a in self.addresses if ":" not in a.split("/")[0] and _global(a)]


def _global(addr: str) -> bool:
    try:
        a = ipaddress.ip_address(addr.split("/")[0])
    except ValueError:
        return False
    return not (a.is_loopback or a.is_link_local)


@dataclass
class IpFacts:
    interfaces: list[Interface] = field(default_factory=list)
    form: str = ""  # json | text | oneline | ifconfig
    shows_addresses: bool = False  # the listing includes addresses (an `addr` listing)
    requested: list[str] = field(default_factory=list)  # interfaces the command asked for (`ip addr show X`)
    problems: list[str] = field(default_factory=list)

    def by_name(self) -> dict[str, Interface]:
        return {i.name: i for i in self.interfaces}


def _render(i: Interface) -> str:
    flags = ",".join(i.flags)
    addrs = " ".join(i.addresses)
    extra = f" kind {i.kind}" if i.kind else ""
    master = f" master {i.master}" if i.master else ""
    return f"{i.name}: <{flags}> mtu {i.mtu} state {i.state or '?'}{master}{extra} {addrs}".rstrip()


def _from_json(text: str) -> list[Interface] | None:
    start = text.find("[")
    if start < 0:
        return None
    try:
        data: Any = json.loads(text[start:].strip())
    except (ValueError, RecursionError):
        try:
            data, _ = json.JSONDecoder().raw_decode(text[start:])
        except (ValueError, RecursionError):
            return None
    if not isinstance(data, list):
        return None
    out: list[Interface] = []
    for item in data:
        if not isinstance(item, dict) or not item.get("ifname"):
            continue  # some iproute2 versions print empty objects
        li = item.get("linkinfo")
        linkinfo: dict[str, Any] = li if isinstance(li, dict) else {}
        mtu = item.get("mtu")
        iface = Interface(
            name=str(item["ifname"]), mtu=mtu if isinstance(mtu, int) else None,
            state=str(item.get("operstate", "")),
            flags=[str(f) for f in item.get("flags", []) if isinstance(f, str)],
            link_type=str(item.get("link_type", "")), kind=str(linkinfo.get("info_kind", "")),
            master=str(item.get("master", "")), parent=str(item.get("link", "") or ""),
            parentbus=str(item.get("parentbus", "")),
            altnames=[str(a) for a in item.get("altnames", []) if isinstance(a, str)],
        )
        for a in item.get("addr_info", []) or []:
            if isinstance(a, dict) and a.get("local"):
                iface.addresses.append(f"{a['local']}/{a.get('prefixlen', '')}".rstrip("/"))
        iface.line = _render(iface)
        out.append(iface)
    return out


_HEAD = re.compile(r"^\d+:\s+(?P<name>[^:@\s]+)(?:@(?P<parent>[^:\s]+))?:\s+<(?P<flags>[^>]*)>\s*(?P<rest>.*)$")
_ONE_ADDR = re.compile(r"^\d+:\s+(?P<name>[^:@\s]+)(?:@\S+)?\s+(?P<fam>inet6?)\s+(?P<addr>\S+)")
_IFCONFIG = re.compile(r"^(?P<name>[^:\s]+):\s+flags=\d+<(?P<flags>[^>]*)>\s+mtu\s+(?P<mtu>\d+)")
_IFCONFIG_OLD = re.compile(r"^(?P<name>\S+)\s+Link encap:(?P<enc>.+?)(?:\s+HWaddr\s+\S+)?\s*$")
_KINDS = ("veth", "bridge", "bridge_slave", "bond", "bond_slave", "vlan", "tun", "tap", "dummy", "ifb", "vxlan",
          "geneve", "macvlan", "ipvlan", "wireguard", "ipoib", "team", "macvtap")


def _text_lines(doc: Doc) -> list[str]:
    """Lines, with the one-line form's `\\` separators turned back into line breaks."""
    out: list[str] = []
    for ln in doc.lines:
        t = ln.text.rstrip()
        if ("\\" in t and _HEAD.match(t.strip())) or _ONE_ADDR.match(t.strip()):
            parts = [p for p in re.split(r"\s*\\\s*", t) if p.strip()]
            out.append(parts[0].strip())
            out.extend("    " + p.strip() for p in parts[1:])
        else:
            out.append(t)
    return out


@dataclass
class _TextReader:
    """Reads `ip addr|link` (multi-line or `-o`) and `ifconfig` text: interface header lines,
    then the lines under the current interface."""

    facts: IpFacts
    out: list[Interface] = field(default_factory=list)
    by_name: dict[str, Interface] = field(default_factory=dict)
    cur: Interface | None = None

    def read(self, raw: str) -> None:
        s = raw.strip()
        if not s:
            return
        m = _HEAD.match(s) if raw[:1].isdigit() else None
        if m:
            self._header(m, s)
            return
        ma = _ONE_ADDR.match(s) if raw[:1].isdigit() else None
        if ma:  # ip -o addr: one address per line
            self.facts.shows_addresses = True
            self.cur = self._interface(ma.group("name"), s)
            self.cur.addresses.append(ma.group("addr"))
            return
        mi = _IFCONFIG.match(s) if not raw[:1].isspace() else None
        if mi:
            self.facts.form = self.facts.form or "ifconfig"
            self.facts.shows_addresses = True
            self.cur = Interface(name=mi.group("name"), flags=[f for f in mi.group("flags").split(",") if f],
                                 mtu=int(mi.group("mtu")), line=s)
            self.by_name[self.cur.name] = self.cur
            self.out.append(self.cur)
            return
        if self.cur is not None:
            self._detail(self.cur, s)

    def _interface(self, name: str, line: str) -> Interface:
        """The interface `name`, new (first named on `line`) or already listed."""
        cur = self.by_name.get(name)
        if cur is None:
            cur = Interface(name=name, line=line)
            self.by_name[name] = cur
            self.out.append(cur)
        return cur

    def _header(self, m: re.Match[str], s: str) -> None:
        """`N: name[@parent]: <FLAGS> mtu M ... state S ... master B`."""
        name = m.group("name")
        cur = self.by_name.get(name)
        if cur is None:
            cur = self._interface(name, s.split("\\")[0].strip())
            cur.flags = [f for f in m.group("flags").split(",") if f]
            cur.parent = m.group("parent") or ""
        self.cur = cur
        rest = m.group("rest")
        mm = re.search(r"\bmtu (\d+)", rest)
        cur.mtu = int(mm.group(1)) if mm else cur.mtu
        ms = re.search(r"\bstate (\S+)", rest)
        cur.state = ms.group(1) if ms else cur.state
        mb = re.search(r"\bmaster (\S+)", rest)
        cur.master = mb.group(1) if mb else cur.master

    def _detail(self, cur: Interface, s: str) -> None:
        """A line under an interface's header: link type, an address, an altname, a linkinfo kind."""
        if s.startswith("link/"):
            cur.link_type = s.split()[0][len("link/"):]
            _parentbus(cur, s)
        elif s.startswith(("inet ", "inet6 ")):
            self.facts.shows_addresses = True
            self._address(cur, s)
        elif s.startswith("altname "):
            cur.altnames.append(s.split()[1] if len(s.split()) > 1 else "")
        elif s.startswith("ether ") and self.facts.form == "ifconfig":
            cur.link_type = "ether"
        else:
            first = s.split()[0] if s else ""
            if first in _KINDS and not cur.kind:
                cur.kind = first
            _parentbus(cur, s)

    def _address(self, cur: Interface, s: str) -> None:
        """`inet ADDR/LEN ...` (ifconfig: `inet ADDR netmask M` / `inet6 ADDR prefixlen N`)."""
        parts = s.split()
        if len(parts) <= 1:
            return
        addr = parts[1]
        if self.facts.form == "ifconfig" and "/" not in addr:
            mask = re.search(r"(?:netmask|prefixlen)\s+(\S+)", s)
            if mask and mask.group(1).isdigit():
                addr = f"{addr}/{mask.group(1)}"
        cur.addresses.append(addr)

    def finish(self) -> list[Interface]:
        for i in self.out:
            if not i.kind and i.parent and "." in i.name:
                i.kind = "vlan"
            i.line = i.line or _render(i)
        return self.out


def _parentbus(cur: Interface, s: str) -> None:
    mp = re.search(r"\bparentbus (\S+)", s)
    if mp:
        cur.parentbus = mp.group(1)


def _from_text(lines: list[str], facts: IpFacts) -> list[Interface]:
    reader = _TextReader(facts)
    for raw in lines:
        reader.read(raw)
    return reader.finish()


def _requested(command: str) -> list[str]:
    m = re.search(r"\bip\b(?:\s+-\S+)*\s+(?:a|addr|address|l|link)\s+(?:show|s|list|ls)?\s*(?:dev\s+)?([\w.@-]+)\s*$",
                  command.split("|")[0].strip())
    if m and m.group(1) not in ("show", "s", "list", "ls", "up"):
        return [m.group(1).split("@")[0]]
    m = re.search(r"\bifconfig\s+([\w.-]+)\s*$", command.split("|")[0].strip())
    return [m.group(1)] if m and not m.group(1).startswith("-") else []


def parse(doc: Doc) -> IpFacts:
    facts = IpFacts(requested=_requested(doc.command))
    text = doc.clean
    if text.lstrip().startswith("["):
        parsed = _from_json(text)
        if parsed is not None:
            facts.interfaces, facts.form = parsed, "json"
            facts.shows_addresses = '"addr_info"' in text
            return facts
    lines = _text_lines(doc)
    oneline = any("\\" in ln.text for ln in doc.head(50))
    facts.form = "oneline" if oneline else "text"
    facts.interfaces = _from_text(lines, facts)
    if not facts.interfaces and text.strip():
        facts.problems = [t for t in text.strip().splitlines()[:3]]
    return facts


def detect(doc: Doc) -> bool:
    head = [ln.text for ln in doc.head(400)]
    first = "\n".join(head[:200]).lstrip()
    if first.startswith("[") and '"ifname"' in first[:8192]:
        return True
    heads = sum(1 for t in head if _HEAD.match(t.strip()) and "mtu " in t)
    if heads and (any(t.strip().startswith("link/") for t in head) or any("\\" in t for t in head) or heads >= 2):
        return True
    if sum(1 for t in head if _ONE_ADDR.match(t.strip())) >= 1 and heads == 0:
        return any(" inet" in t and "scope" in t for t in head)
    return sum(1 for t in head if _IFCONFIG.match(t)) >= 1


FORMATS = [Format("ip-addr", detect=detect, priority=60,
                  description="ip [-j] [-d] addr|link [show DEV], ip -o link|addr, ifconfig")]
PARSERS = [ParserSpec("ip-addr", parse)]

__all__ = ["FORMATS", "Interface", "IpFacts", "PARSERS", "detect", "parse"]
