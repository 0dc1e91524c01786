"""RDMA (InfiniBand / RoCE / Omni-Path) ports as facts, from whichever tool printed them.

`ibstat` (tab or space indentation, `mlx5_bond_N`, `hfi1_0` with an empty CA type), `ibstatus`,
`ibv_devinfo [-v]`, `ibdev2netdev` ("mlx5_0 port 1 ==> ib0 (Up)") and the per-HCA status table
some node checkers print (`PCI_addr | RDMA | Net | Numa | LnkStat | IpStat | Link | Rate |
LnkCapWidth | LnkStaWidth | HCA_Type`). A tool that fails half-way keeps the ports it printed
and its error lines (`ibpanic: ... stat of IB device 'mlx5_8' failed`). Output that ends inside the
last port's block before its state line (a paste cut short) keeps that port apart (`cut`): it is not
shown, rather than a port in a state nobody printed. A fragment of their field lines without the
device header (`ibstatus | grep -A1 rate`, `ibstat | grep -E 'State|Rate'`, pdsh-prefixed, grep `--`
separators peeled by the framing) is read group by group: a field the current group already has
starts the next port, unnamed (`(unnamed #N)`); a field grep dropped is not shown, never bad. The
trained width comes from ibstatus's rate ("(2X HDR)") and ibv_devinfo -v's active_width. A line at
error level that is none of the tools' known error lines is kept (`unread`).

A second format reads the RDMA drivers' own error lines in a kernel log (mlx5_core, mlx5_ib,
ib_core; see the section below): those that say the adapter stopped (`HCA_FATAL`) and the others.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from preflight import lazyre
from preflight.framing import Doc
from preflight.parsers.base import Format, ParserSpec

# ibstat prints "<node type> '<name>'" (CA, Switch, Router, iWARP RNIC, ??? for an unknown type);
# `ibstat <ca> <port>` prints "CA: '<name>'" and the port's lines without indentation
_CA = lazyre.compile(r"^\s*(?:CA|Switch|Router|iWARP RNIC|\?\?\?):? '(?P<ca>[^']+)'\s*$")
_PORT = lazyre.compile(r"^\s*Port (?P<port>\d+):\s*$")
_KV = lazyre.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z _]*?)\s*:\s*(?P<val>.*?)\s*$")
_IBSTATUS = lazyre.compile(r"^\s*Infiniband device '(?P<ca>[^']+)' port (?P<port>\d+) status:\s*$", re.IGNORECASE)
_HCA_ID = lazyre.compile(r"^\s*hca_id:\s*(?P<ca>\S+)\s*$")
_DEVINFO_PORT = lazyre.compile(r"^\s*port:\s*(?P<port>\d+)\s*$")
_IBDEV2NETDEV = lazyre.compile(r"^(?P<ca>[\w.-]+) port (?P<port>\d+) ==> (?P<net>\S+) \((?P<state>\w+)\)")
# the tools' own error lines: libibmad's ibpanic/ibwarn (ibstat), ibstatus's `fatal`, devinfo.c's
# fprintf(stderr, ...) and perror(...), and a tool name followed by a failure
_ERROR = lazyre.compile(
    r"^\s*(?:ibpanic|ibwarn):"
    r"|^\s*(?:ibstat|ibstatus|ibv_devinfo|ibdev2netdev)\b.*"
    r"(?:fail|error|No such|cannot|can't|couldn't|not found|No IB devices)"
    r"|^\s*Fatal error:\s"
    r"|^\s*No IB devices found"
    r"|^\s*Failed to (?:get IB devices list|open device|query device props|query port \d+ props|query gid)"
    r"|^\s*IB device '[^']+' wasn't found"
    r"|^\s*Invalid port requested for device"
    r"|^\s*0 HCAs found", re.IGNORECASE)
_MISSING_DEV = lazyre.compile(r"IB device '(?P<a>[^']+)' (?:failed|wasn't found)|'(?P<b>[^']+)' IB device can't be found"
                          r"|device '(?P<c>[^']+)': sys files not found")
_NO_DEVICES = lazyre.compile(r"No IB devices|Failed to get IB devices list|Fatal error:\s+No devices|^\s*0 HCAs found"
                         r"|can't list IB device names", re.IGNORECASE)
_NO_UMAD = lazyre.compile(r"can't init UMAD library", re.IGNORECASE)

# Port states as ibstat (port_state_str), ibstatus (sysfs "4: ACTIVE"), ibv_devinfo (port_state_str
# "PORT_ACTIVE"), ibdev2netdev ("Up") and status tables ("active") print them, keyed by the value in
# lower case without spaces and underscores; ACTIVE_DEFER (sysfs 5, devinfo 5) is an Active port.
_STATE = {
    "active": "Active", "portactive": "Active", "portactivedefer": "Active", "activedefer": "Active", "up": "Active",
    "down": "Down", "portdown": "Down",
    "init": "Initializing", "portinit": "Initializing",  # ibstat's own "Initializing" is kept as printed
    "armed": "Armed", "portarmed": "Armed",
}
# Physical states: ibstat port_phy_state_str ("No state change" for 0), sysfs phys_state ("5: LinkUp",
# "7: Phy Test"), devinfo's port_phy_state_str ("LINK_UP", "PORT_CONFIGURATION TRAINNING" as spelled there)
_PHYS = {
    "linkup": "LinkUp", "disabled": "Disabled", "polling": "Polling", "sleep": "Sleep",
    "portconfigurationtraining": "PortConfigurationTraining", "portconfigurationtrainning": "PortConfigurationTraining",
    "linkerrorrecovery": "LinkErrorRecovery", "phytest": "PhyTest", "nostatechange": "NoStateChange",
}
STATES = frozenset(_STATE.values())
PHYS_STATES = frozenset(_PHYS.values())
# ibv_devinfo -v: active_width "4X (2)", active_speed "100.0 Gbps (128)"; rate = lanes x lane speed.
_WIDTH = lazyre.compile(r"^(?P<n>\d+)X")
# ibstatus prints sysfs `rate` as the kernel formats it (drivers/infiniband/core/sysfs.c rate_show,
# "%d%s Gb/sec (%dX%s)"): "200 Gb/sec (4X HDR)", "2.5 Gb/sec (1X)" (SDR has no name), "100 Gb/sec (2X HDR)"
_RATE_WIDTH = lazyre.compile(r"Gb/sec\s*\((?P<n>\d+)X\b")
_SPEED = lazyre.compile(r"^(?P<g>\d+(?:\.\d+)?)\s*Gbps")
LID_UNASSIGNED = 65535  # 0xFFFF: the permissive LID a port reports before a subnet manager assigns one


@dataclass
class Port:
    ca: str
    port: int
    state: str = ""
    physical_state: str = ""
    rate: float | None = None
    link_layer: str = ""
    ca_type: str = ""
    firmware: str = ""
    netdev: str = ""
    pcie_width: int | None = None  # trained PCIe width of the adapter (the status table)
    pcie_width_cap: int | None = None
    lid: int | None = None  # base LID (0 on RoCE; 65535 before a subnet manager assigned one)
    sm_lid: int | None = None
    max_mtu: int | None = None  # ibv_devinfo: the port's largest and its active IB MTU
    active_mtu: int | None = None
    width: int | None = None  # lanes the link trained at (ibstatus "(4X HDR)", ibv_devinfo -v active_width)
    unnamed: int = 0  # N for the Nth port of a fragment that names no device (grep'd field lines); 0: named
    lines: list[str] = field(default_factory=list)  # the tool's own lines for this port

    @property
    def label(self) -> str:
        """The port as a finding names it: `mlx5_0 port 1`, or `(unnamed #2)` in a fragment."""
        return self.ca if self.unnamed else f"{self.ca} port {self.port}"

    @property
    def shows_link(self) -> bool:
        """A state or physical state was printed (a fragment may show neither: `grep rate`)."""
        return bool(self.state or self.physical_state)

    @property
    def up(self) -> bool:
        if self.unnamed:  # a fragment shows what grep kept: a field it dropped is not shown, not bad
            return self.shows_link and self.state in ("Active", "") and self.physical_state in ("LinkUp", "")
        return self.state == "Active" and self.physical_state in ("LinkUp", "")

    @property
    def known(self) -> bool:
        """The tool printed a port state (and physical state) this parser knows; in a fragment,
        a state it does not show is not unknown."""
        states = STATES | {""} if self.unnamed else STATES
        return self.state in states and self.physical_state in PHYS_STATES | {""}

    @property
    def down(self) -> bool:
        """Shown in a state other than Active/LinkUp (one this parser knows)."""
        return self.known and self.shows_link and not self.up

    @property
    def gradeable(self) -> bool:
        """Shows a link state, a rate or a width: something ib.hca grades."""
        return self.shows_link or self.rate is not None or self.width is not None

    def fact(self) -> dict[str, Any]:
        rate: float | int | None = self.rate
        if rate is not None and float(rate).is_integer():
            rate = int(rate)
        out = {"ca": self.ca, "port": self.port, "state": self.state, "physical_state": self.physical_state,
               "rate": rate, "link_layer": self.link_layer, "ca_type": self.ca_type, "firmware": self.firmware}
        if self.netdev:
            out["netdev"] = self.netdev
        if self.pcie_width is not None:
            out.update(pcie_width=self.pcie_width, pcie_width_cap=self.pcie_width_cap)
        if self.unnamed:
            out["unnamed"] = True
        for key in ("lid", "sm_lid", "max_mtu", "active_mtu", "width"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


@dataclass
class IbReport:
    kind: str = ""  # ibstat | ibstatus | ibv_devinfo | ibdev2netdev | table | fragment
    ports: list[Port] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    missing_devices: list[str] = field(default_factory=list)
    no_devices: bool = False
    no_umad: bool = False  # ibstat could not open the umad interface (ib_umad not loaded): ports not read
    cut: Port | None = None  # the last port, whose block the output ends in before its state line (not in ports)
    shows_rate: bool = True  # ibdev2netdev prints no rate or link layer
    nonblank: int = 0  # lines of output (0: the tool printed nothing)
    unread: list[str] = field(default_factory=list)  # error-level lines no rule of ib.hca reads

    @property
    def fragment(self) -> bool:
        """Field lines without the device header (`ibstatus | grep -A1 rate`): the ports are unnamed."""
        return any(p.unnamed for p in self.ports)


def _norm_state(val: str, table: dict[str, str]) -> str:
    """The state's name in ibstat's spelling; an unknown value as printed (without sysfs's number)."""
    v = re.sub(r"^\d+:\s*", "", val.strip())  # ibstatus "4: ACTIVE"
    v = re.sub(r"\s*\(\d+\)$", "", v)  # ibv_devinfo "PORT_ACTIVE (4)"
    return table.get(re.sub(r"[\s_]+", "", v.lower()), v)


def _rate(val: str) -> float | None:
    m = re.match(r"^\s*(\d+(?:\.\d+)?)", val)
    return float(m.group(1)) if m else None


def _int(val: str) -> int | None:
    """A decimal or 0x-hex integer (sysfs prints LIDs in hex), the first word of the value."""
    word = val.strip().split(" ")[0] if val.strip() else ""
    try:
        return int(word, 0)
    except ValueError:
        return None


def _table(lines: list[str], rep: IbReport) -> bool:
    """The per-HCA status table (`|`-separated with an RDMA and a LnkStat column)."""
    header: list[str] | None = None
    for t in lines:
        if "|" not in t:
            continue
        cells = [c.strip() for c in t.strip().strip("|").split("|")]
        low = [c.lower() for c in cells]
        if header is None:
            if "rdma" in low and any(c.startswith("lnkstat") or c == "state" for c in low):
                header = low
            continue
        if len(cells) != len(header):
            continue
        row = dict(zip(header, cells, strict=True))
        ca = row.get("rdma", "")
        if not re.fullmatch(r"[\w.-]+", ca):
            continue
        port = Port(ca=ca, port=1, lines=[re.sub(r"\s+", " ", t.strip())])
        port.state = _norm_state(row.get("lnkstat", row.get("state", "")), _STATE)
        port.rate = _rate(row.get("rate", ""))
        link = row.get("link", "").lower()
        port.link_layer = "InfiniBand" if link in ("ib", "infiniband") else "Ethernet" if link.startswith("eth") else link
        port.ca_type = row.get("hca_type", "")
        port.netdev = row.get("net", "")
        cap = re.match(r"x(\d+)", row.get("lnkcapwidth", ""))
        sta = re.match(r"x(\d+)", row.get("lnkstawidth", ""))
        port.pcie_width_cap = int(cap.group(1)) if cap else None
        port.pcie_width = int(sta.group(1)) if sta else None
        rep.ports.append(port)
    if header is not None:
        rep.kind = "table"
    return header is not None


# the fields of a port / of a CA as ibstat, ibstatus and ibv_devinfo name them (see _field): a
# fragment of their output without the device header is read by these names
_PORT_FIELDS = frozenset({"state", "phys state", "rate", "link layer", "base lid", "sm lid", "lmc", "capability mask",
                          "port guid", "default gid", "port lid", "port lmc", "max mtu", "active mtu",
                          "active width", "active speed", "max msg sz", "port cap flags", "gid"})
_CA_FIELDS = frozenset({"ca type", "number of ports", "firmware version", "hardware version", "node guid",
                        "system image guid", "fw ver", "vendor part id", "hca id"})
# a line at error level, in output of the tools that is not one of their known error lines
_ERRORISH = lazyre.compile(r"\b(?:error|failed|failure|fatal|cannot|can't|couldn't|unable to)\b", re.IGNORECASE)


def _field(key: str) -> str:
    """A field's name in one spelling: `phys_state` / `Physical state` -> `phys state`."""
    k = key.strip().lower().replace("_", " ")
    return "phys state" if k == "physical state" else k


NO_CA = "(CA not shown)"  # the CA of a port block pasted without its `CA '...'` line

# the lines that start a CA's block, and the tool each one says printed it
_CA_HEADERS = ((_CA, "ibstat"), (_IBSTATUS, "ibstatus"), (_HCA_ID, "ibv_devinfo"))


@dataclass
class _Reader:
    """Reads the per-CA, per-port blocks of ibstat, ibstatus and ibv_devinfo line by line."""

    rep: IbReport
    ca: str = ""  # the CA whose block this is
    ca_type: str = ""
    firmware: str = ""
    cur: Port | None = None  # the port whose block this is (None: the CA's own lines)
    width: int | None = None  # the current port's lanes (ibv_devinfo -v `active_width`)
    seen: set[str] = field(default_factory=set)  # the fields of the current fragment port

    def read(self, line: str) -> None:
        if _ERROR.search(line):
            self._error(line)
            return
        m = _IBDEV2NETDEV.match(line.strip())
        if m:
            self._netdev_port(m, line)
            return
        for pattern, kind in _CA_HEADERS:
            m = pattern.match(line)
            if m:
                self._start_ca(m, kind, line)
                return
        pm = _PORT.match(line) or _DEVINFO_PORT.match(line)
        if pm and not self.ca and _PORT.match(line):
            self.ca = NO_CA  # an excerpt of ibstat that starts at a port's block
        if pm and self.ca:
            self.cur = Port(ca=self.ca, port=int(pm.group("port")), ca_type=self.ca_type, firmware=self.firmware)
            self.width = None
            self.rep.ports.append(self.cur)
            return
        m = _KV.match(line)
        if not m:
            self._other(line)
            return
        key, val = m.group("key").strip().lower(), m.group("val")
        if not self.ca:
            self._fragment_value(key, val, line)
            return
        if self.cur is None:
            self._ca_value(key, val)
        elif self._port_value(self.cur, key, val):
            self.cur.lines.append(line.strip())

    def _other(self, line: str) -> None:
        """A line that is neither a header nor a field: an error-level line no rule reads is kept."""
        if _ERRORISH.search(line):
            self.rep.unread.append(line.strip())

    def _fragment_value(self, key: str, val: str, line: str) -> None:
        """A field line before any device header: grep'd ibstatus / ibstat / ibv_devinfo output.
        Each group of fields is a port; a field the current group already has starts the next."""
        name = _field(key)
        if name in _CA_FIELDS:
            if self.cur is not None:
                self.cur = None  # `ibstat | grep -E 'CA type|State'`: a CA's line opens the next group
            self._ca_value(key, val)
            return
        if name not in _PORT_FIELDS:
            if _ERRORISH.search(line):
                self.rep.unread.append(line.strip())
            return
        if self.cur is None or name in self.seen:
            n = sum(1 for p in self.rep.ports if p.unnamed) + 1
            self.cur = Port(ca=f"(unnamed #{n})", port=0, unnamed=n, ca_type=self.ca_type, firmware=self.firmware)
            self.ca_type = self.firmware = ""
            self.seen, self.width = set(), None
            self.rep.kind = self.rep.kind or "fragment"
            self.rep.ports.append(self.cur)
        self.seen.add(name)
        self._port_value(self.cur, key, val)
        self.cur.lines.append(line.strip())

    def _error(self, line: str) -> None:
        rep = self.rep
        rep.errors.append(line.strip())
        rep.no_devices = rep.no_devices or bool(_NO_DEVICES.search(line))
        rep.no_umad = rep.no_umad or bool(_NO_UMAD.search(line))
        rep.missing_devices.extend(md.group("a") or md.group("b") or md.group("c")
                                   for md in _MISSING_DEV.finditer(line))

    def _netdev_port(self, m: re.Match[str], line: str) -> None:
        """An ibdev2netdev line: a whole port on one line, without rate or link layer."""
        rep = self.rep
        rep.kind = rep.kind or "ibdev2netdev"
        rep.shows_rate = False
        rep.ports.append(Port(ca=m.group("ca"), port=int(m.group("port")), netdev=m.group("net"),
                              state=_norm_state(m.group("state"), _STATE), lines=[line.strip()]))

    def _start_ca(self, m: re.Match[str], kind: str, line: str) -> None:
        """A CA's first line; ibstatus names the port on it too."""
        self.rep.kind = self.rep.kind or kind
        self.ca, self.ca_type, self.firmware, self.cur = m.group("ca"), "", "", None
        if kind == "ibstatus":
            self.cur = Port(ca=self.ca, port=int(m.group("port")), lines=[line.strip()])
            self.rep.ports.append(self.cur)

    def _ca_value(self, key: str, val: str) -> None:
        if key in ("ca type", "switch type", "router type"):
            self.ca_type = val
        elif key in ("firmware version", "fw_ver"):
            self.firmware = val
        elif key == "vendor_part_id" and val.isdigit():
            self.ca_type = f"MT{val}"

    def _port_value(self, port: Port, key: str, val: str) -> bool:
        """Note a port's `key: val` line; False for a key that says nothing about the port."""
        if key == "state":
            port.state = _norm_state(val, _STATE)
        elif key in ("physical state", "phys state", "phys_state"):
            port.physical_state = _norm_state(val, _PHYS)
        elif key == "rate":
            port.rate = _rate(val)
            w = _RATE_WIDTH.search(val)
            port.width = int(w.group("n")) if w else port.width
        elif key in ("link layer", "link_layer"):
            port.link_layer = "InfiniBand" if val.strip() == "IB" else val.strip()  # ibstatus's default
        elif key in ("base lid", "port_lid"):
            port.lid = _int(val)
        elif key in ("sm lid", "sm_lid"):
            port.sm_lid = _int(val)
        elif key in ("max_mtu", "active_mtu"):
            setattr(port, key, _int(val))
        elif key == "active_width":
            w = _WIDTH.match(val.strip())
            self.width = int(w.group("n")) if w else None
            port.width = self.width
        elif key == "active_speed":
            s = _SPEED.match(val.strip())
            if s and self.width:
                port.rate = round(float(s.group("g")) * self.width, 1)
        else:
            return False
        return True


def parse(doc: Doc) -> IbReport:
    """ibstat / ibstatus / ibv_devinfo(-v) / ibdev2netdev / status-table text -> ports, tool errors."""
    rep = IbReport()
    texts = [ln.text.rstrip() for ln in doc.lines]
    rep.nonblank = sum(1 for t in texts if t.strip())
    if _table(texts, rep):
        return rep
    reader = _Reader(rep)
    for line in texts:
        if line.strip():
            reader.read(line)
    if len(rep.ports) > 1 and not rep.ports[-1].state and not rep.ports[-1].unnamed:
        rep.cut = rep.ports.pop()  # a paste cut short: that port is not shown, not a port of unknown state
    return rep


_LIBIBMAD = lazyre.compile(r"^\s*(?:ibpanic|ibwarn): \[\d+\] \w+: ")
_TOOLS = lazyre.compile(r"\b(?:ibstat|ibstatus|ibv_devinfo)\b")
_DEVINFO_OWN = lazyre.compile(r"^\s*(?:No IB devices found|Failed to get IB devices list)")


def _tool_error_only(doc: Doc, head: list[str]) -> bool:
    """The tool's own error and nothing else: libibmad's ibpanic/ibwarn (distinctive anywhere),
    or devinfo/ibstatus errors under a prompt that ran one of the tools."""
    lines = [t for t in head if t.strip()]
    if any(_LIBIBMAD.match(t) for t in lines):
        return True
    if not lines or len(lines) > 3 or not all(_ERROR.search(t) or _ERRORISH.search(t) for t in lines):
        return False
    if bool(_TOOLS.search(doc.command or "")):
        return True  # the tools' own errors, or error lines no rule reads yet (said as unread)
    return all(_ERROR.search(t) for t in lines) and any(_DEVINFO_OWN.match(t) for t in lines)


# field lines only ibstatus (sysfs values), ibstat or ibv_devinfo print: one of them makes a
# headerless run of field lines a fragment of their output
_FRAGMENT_SIGNS = lazyre.compile(
    r"^\s*state:\s+\d:\s+(?:ACTIVE|DOWN|INIT|ARMED|ACTIVE_DEFER|NOP)\s*$"
    r"|^\s*phys state:\s+\d+:\s+[A-Za-z]"
    r"|^\s*rate:\s+\d+(?:\.\d+)?\s+Gb/sec\s+\(\d+X"
    r"|^\s*link_layer:\s+(?:InfiniBand|Ethernet|IB)\s*$"
    r"|^\s*(?:base|sm) lid:\s+0x[0-9a-fA-F]+\s*$"
    r"|^\s*default gid:\s+[0-9a-fA-F]{4}(?::[0-9a-fA-F]{4}){7}\s*$"
    r"|^\s*Physical state:\s+(?:LinkUp|Polling|Disabled|Sleep|PortConfigurationTraining|LinkErrorRecovery|PhyTest"
    r"|No state change)\s*$"
    r"|^\s*Link layer:\s+(?:InfiniBand|Ethernet)\s*$"
    r"|^\s*state:\s+PORT_[A-Z_]+\s+\(\d\)\s*$"
    r"|^\s*phys_state:\s+[A-Z_ ]+\(\d+\)\s*$"
    r"|^\s*active_width:\s+\d+X\b")
_FRAGMENT_SHARE = 0.7  # pragma: no mutate (share of a headerless paste's lines that must be the tools' fields)


def _fragment(doc: Doc, head: list[str]) -> bool:
    """Field lines of ibstatus / ibstat / ibv_devinfo without a device header (`ibstatus | grep
    -A1 rate`): mostly their port fields, one of them a line only these tools print (or the
    command above it ran one of them)."""
    lines = [t for t in head if t.strip()]
    fields = [t for t in lines if (m := _KV.match(t)) and _field(m.group("key")) in _PORT_FIELDS | _CA_FIELDS]
    if not fields or len(fields) < _FRAGMENT_SHARE * len(lines):
        return False
    return any(_FRAGMENT_SIGNS.match(t) for t in fields) or bool(_TOOLS.search(doc.command or ""))


def detect(doc: Doc) -> bool:
    head = [ln.text for ln in doc.head(600)]  # pragma: no mutate (how far a detector reads, not a grading value)
    text = "\n".join(head)
    if any(_CA.match(t) for t in head) and re.search(r"^\s*Port \d+:\s*$", text, re.M) \
            and "Physical state:" in text:
        return True
    if re.search(r"^\s*Port \d+:\s*$\n\s*State:\s*(?:Active|Down|Initializing|Armed|Init)\s*$\n\s*Physical state:",
                 text, re.M):
        return True  # a port's block cut out of ibstat, its CA line not shown
    if re.search(r"^\s*Infiniband device '[^']+' port \d+ status:", text, re.M) and "phys state:" in text:
        return True
    if re.search(r"^\s*hca_id:\s*\S+", text, re.M) and re.search(r"^\s+port:\s*\d+", text, re.M):
        return True
    if any(_IBDEV2NETDEV.match(t.strip()) for t in head):
        return True
    if any("|" in t and "RDMA" in t and "LnkStat" in t for t in head):
        return True
    return _tool_error_only(doc, head) or _fragment(doc, head)


# ---------------------------------------------------------------------------------------------
# The RDMA drivers' own error lines in a kernel log (dmesg, journal, syslog)
#
# mlx5_core_err / mlx5_core_warn (include/linux/mlx5/driver.h, drivers/net/ethernet/mellanox/mlx5/
# core/mlx5_core.h) print `mlx5_core <pci>: <function>:<line>:(pid <n>): <message>` (before Linux 4.x
# `<name>:<function>:...`); mlx5_core_info prints without the function (an informational line).
# mlx5_ib_err / ibdev_err print `infiniband mlx5_<n>: ...`. Link up/down and transceiver faults are
# read by parsers.netlog, PCIe AER reports naming the HCA by parsers.kernel_hw: not here.

_KDEV = lazyre.compile(r"(?:^|\s)(?:(?P<drv>mlx5_core|mlx4_core) (?P<pci>(?:[0-9a-fA-F]{4,8}:)?"
                   r"[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])|infiniband (?P<ibdev>[\w.-]+)): (?P<msg>.*)$")
# Linux 3.x pr_err form without the driver: `<pci>:<function>:<line>:(pid N): ...`
_KDEV_OLD = lazyre.compile(r"(?:^|\s)(?P<pci>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]):"
                       r"(?P<msg>\w+:\d+:\(pid \d+\): .*)$")
_KFUNC = lazyre.compile(r"^(?:[\w.-]+:)?(?P<func>\w+):\d+:\(pid \d+\): ")
# health.c (poll_health, print_health_info, mlx5_health_try_recover), cmd.c (wait_func), main.c
# (probe_one, mlx5_load_one): the device stopped answering its driver; its ports are gone until a reset
HCA_FATAL = lazyre.compile(r"device's health compromised|Fatal error \d+ detected|\bsynd 0x[0-9a-fA-F]+: "
                       r"|health recovery (?:flow aborted|failed)|FW is unable to respond to initialization segment"
                       r"|timeout\. Will cause a leak of a command resource"
                       r"|\b(?:mlx5_)?(?:init|load)_one failed with error code")
# lines other parsers read: parsers.netlog (links, transceivers), parsers.kernel_hw (PCIe AER)
_KOTHERS = lazyre.compile(r"Port module event|\bLink (?:is )?(?:down|up)\b|PCIe Bus Error|error status/mask="
                      r"|\bAER: |^\s*\[\s*\d+\] [A-Za-z]+", re.IGNORECASE)
_KERROR = lazyre.compile(r"\b(?:fail(?:ed|s|ure)?|errors?|err\(-?\d+\)|timeout|timed out|fatal|unrecoverable|abort(?:ed)?"
                     r"|not responding|unable to|can't|cannot|couldn't|compromised)\b", re.IGNORECASE)
# the drivers' prefixes (mlx5_ib_err and the Linux 3.x form print `:(pid N): ` after the function)
KERNEL_NEEDLES = ("mlx5_core ", "mlx4_core ", ":(pid ", "infiniband ")
# the words one of the patterns above needs, found in the lower-cased raw line before any regex
_KWORDS = ("fail", "err", "timeout", "timed out", "fatal", "unrecoverable", "abort", "not responding", "unable",
           "can't", "cannot", "couldn't", "compromised", "synd 0x", "health recovery")
_KWORDS_RX = lazyre.compile("|".join(map(re.escape, _KWORDS)))


@dataclass
class HcaKernelLine:
    device: str  # the PCI function (mlx5_core) or RDMA device (infiniband mlx5_0) the line names
    fatal: bool  # one of HCA_FATAL: the adapter stopped
    text: str  # the line as the driver printed it (framing peeled)
    message: str = ""  # what it says, without the device and the `function:line:(pid N): ` prefix


@dataclass
class RdmaKernelLog:
    lines: list[HcaKernelLine] = field(default_factory=list)

    @property
    def fatal(self) -> list[HcaKernelLine]:
        return [x for x in self.lines if x.fatal]

    @property
    def unread(self) -> list[HcaKernelLine]:
        return [x for x in self.lines if not x.fatal]


def kernel_line(text: str) -> HcaKernelLine | None:
    """One kernel-log line of an RDMA driver at error level, or None (other lines, info lines,
    lines another parser reads)."""
    m = _KDEV.search(text) or _KDEV_OLD.search(text)
    if m is None:
        return None
    got = m.groupdict()
    msg = got["msg"]
    fn = _KFUNC.match(msg)
    body = msg[fn.end():] if fn else msg
    device = got.get("pci") or got.get("ibdev") or ""
    if HCA_FATAL.search(body):
        return HcaKernelLine(device, True, text.strip(), body.strip())
    if _KOTHERS.search(body) or not _KERROR.search(body):
        return None
    return HcaKernelLine(device, False, text.strip(), body.strip())


def _kernel_lines(doc: Doc) -> list[HcaKernelLine]:
    """The drivers' error lines, in order, read once per document (detection and parsing share
    them). A line is peeled only when its raw text holds an error word (framing is a prefix: it
    cannot add one to a driver's message): a log of 100,000 mlx5 link lines peels none of them."""
    got: list[HcaKernelLine] | None = doc.memo.get("rdma-kernel")
    if got is None:
        got = []
        for hit in doc.scan_words(KERNEL_NEEDLES, _KWORDS_RX):
            line = kernel_line(doc.peel_hit(hit).text)
            if line is not None:
                got.append(line)
        doc.memo["rdma-kernel"] = got
    return got


def parse_kernel(doc: Doc) -> RdmaKernelLog:
    """The RDMA drivers' error lines of a kernel log (see the section comment)."""
    return RdmaKernelLog(list(_kernel_lines(doc)))


def detect_kernel(doc: Doc) -> bool:
    return bool(_kernel_lines(doc))


# Words `detect` cannot say yes without (lower-cased): a port's state line of each tool, a device
# header, ibdev2netdev's arrow, a status table's column, libibmad's errors, a fragment's signs
# (`_FRAGMENT_SIGNS`) or a command that ran one of the tools.
_COULD = ("state:", "hca_id:", "==>", "lnkstat", "ibpanic", "ibwarn", "rate:", "link_layer:", " lid:",
          "default gid:", "link layer:", "active_width:", "ibstat", "ibv_devinfo")


def could(doc: Doc) -> bool:
    """A cheap necessary condition of `detect`: one of its words in the head, or a head of at
    most three lines (a tool's error alone)."""
    head = doc.head_folded(600)  # pragma: no mutate (the lines detect reads)
    if any(w in head for w in _COULD):
        return True
    return next(itertools.islice((ln for ln in doc.head(600) if ln.text.strip()), 3, None), None) is None


FORMATS = [Format("ibstat", detect=detect, could=could,
                  priority=60,  # pragma: no mutate (the only format of its probe: its rank decides nothing)
                  description="ibstat, ibstatus, ibv_devinfo [-v], ibdev2netdev, HCA status tables"),
           Format("rdma-kernel", detect=detect_kernel,
                  priority=35,  # pragma: no mutate (the only format of its probe: its rank decides nothing)
                  description="mlx5_core / mlx5_ib / ib_core error lines in a kernel log")]

PARSERS = [ParserSpec("ibstat", parse), ParserSpec("rdma-kernel", parse_kernel)]

__all__ = ["FORMATS", "HCA_FATAL", "NO_CA", "HcaKernelLine", "IbReport", "PARSERS", "Port", "RdmaKernelLog", "detect",
           "detect_kernel", "kernel_line", "parse", "parse_kernel"]
