"""RDMA (InfiniBand / RoCE / Omni-Path) ports as facts, from whichever tool printed them.

`ibstat` (tab or space indentation, `mlx5_bond_N`, `hfi1_0` with an empty CA type), `ibstatus`,
`ibv_devinfo [-v]`, `ibdev2netdev` ("mlx5_0 port 1 ==> ib0 (Up)") and the per-HCA status table
some node checkers print (`PCI_addr | RDMA | Net | Numa | LnkStat | IpStat | Link | Rate |
LnkCapWidth | LnkStaWidth | HCA_Type`). A tool that fails half-way keeps the ports it printed
and its error lines (`ibpanic: ... stat of IB device 'mlx5_8' failed`). Output that ends inside the
last port's block before its state line (a paste cut short) keeps that port apart (`cut`): it is not
shown, rather than a port in a state nobody printed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from preflight.framing import Doc
from preflight.parsers.base import Format, ParserSpec

# ibstat prints "<node type> '<name>'" (CA, Switch, Router, iWARP RNIC, ??? for an unknown type);
# `ibstat <ca> <port>` prints "CA: '<name>'" and the port's lines without indentation
_CA = re.compile(r"^\s*(?:CA|Switch|Router|iWARP RNIC|\?\?\?):? '(?P<ca>[^']+)'\s*$")
_PORT = re.compile(r"^\s*Port (?P<port>\d+):\s*$")
_KV = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z _]*?)\s*:\s*(?P<val>.*?)\s*$")
_IBSTATUS = re.compile(r"^\s*Infiniband device '(?P<ca>[^']+)' port (?P<port>\d+) status:\s*$", re.IGNORECASE)
_HCA_ID = re.compile(r"^\s*hca_id:\s*(?P<ca>\S+)\s*$")
_DEVINFO_PORT = re.compile(r"^\s*port:\s*(?P<port>\d+)\s*$")
_IBDEV2NETDEV = re.compile(r"^(?P<ca>[\w.-]+) port (?P<port>\d+) ==> (?P<net>\S+) \((?P<state>\w+)\)")
# the tools' own error lines: libibmad's ibpanic/ibwarn (ibstat), ibstatus's `fatal`, devinfo.c's
# fprintf(stderr, ...) and perror(...), and a tool name followed by a failure
_ERROR = re.compile(
    r"^\s*(?:ibpanic|ibwarn):"
    r"|^\s*(?:ibstat|ibstatus|ibv_devinfo|ibdev2netdev)\b.*"
    r"(?:fail|error|No such|cannot|can't|couldn't|not found|No IB devices)"
    r"|^\s*Fatal error:\s"
    r"|^\s*No IB devices found"
    r"|^\s*Failed to (?:get IB devices list|open device|query device props|query port \d+ props|query gid)"
    r"|^\s*IB device '[^']+' wasn't found"
    r"|^\s*Invalid port requested for device"
    r"|^\s*0 HCAs found", re.IGNORECASE)
_MISSING_DEV = re.compile(r"IB device '(?P<a>[^']+)' (?:failed|wasn't found)|'(?P<b>[^']+)' IB device can't be found"
                          r"|device '(?P<c>[^']+)': sys files not found")
_NO_DEVICES = re.compile(r"No IB devices|Failed to get IB devices list|Fatal error:\s+No devices|^\s*0 HCAs found"
                         r"|can't list IB device names", re.IGNORECASE)
_NO_UMAD = re.compile(r"can't init UMAD library", re.IGNORECASE)

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
_WIDTH = re.compile(r"^(?P<n>\d+)X")
_SPEED = re.compile(r"^(?P<g>\d+(?:\.\d+)?)\s*Gbps")
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
    lines: list[str] = field(default_factory=list)  # the tool's own lines for this port

    @property
    def up(self) -> bool:
        return self.state == "Active" and self.physical_state in ("LinkUp", "")

    @property
    def known(self) -> bool:
        """The tool printed a port state (and physical state) this parser knows."""
        return self.state in STATES and self.physical_state in PHYS_STATES | {""}

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
        for key in ("lid", "sm_lid", "max_mtu", "active_mtu"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


@dataclass
class IbReport:
    kind: str = ""  # ibstat | ibstatus | ibv_devinfo | ibdev2netdev | table
    ports: list[Port] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    missing_devices: list[str] = field(default_factory=list)
    no_devices: bool = False
    no_umad: bool = False  # ibstat could not open the umad interface (ib_umad not loaded): ports not read
    cut: Port | None = None  # the last port, whose block the output ends in before its state line (not in ports)
    shows_rate: bool = True  # ibdev2netdev prints no rate or link layer
    nonblank: int = 0  # lines of output (0: the tool printed nothing)


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
        if not m or not self.ca:
            return
        key, val = m.group("key").strip().lower(), m.group("val")
        if self.cur is None:
            self._ca_value(key, val)
        elif self._port_value(self.cur, key, val):
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
    if len(rep.ports) > 1 and not rep.ports[-1].state:
        rep.cut = rep.ports.pop()  # a paste cut short: that port is not shown, not a port of unknown state
    return rep


_LIBIBMAD = re.compile(r"^\s*(?:ibpanic|ibwarn): \[\d+\] \w+: ")
_TOOLS = re.compile(r"\b(?:ibstat|ibstatus|ibv_devinfo)\b")
_DEVINFO_OWN = re.compile(r"^\s*(?:No IB devices found|Failed to get IB devices list)")


def _tool_error_only(doc: Doc, head: list[str]) -> bool:
    """The tool's own error and nothing else: libibmad's ibpanic/ibwarn (distinctive anywhere),
    or devinfo/ibstatus errors under a prompt that ran one of the tools."""
    lines = [t for t in head if t.strip()]
    if any(_LIBIBMAD.match(t) for t in lines):
        return True
    if not lines or len(lines) > 3 or not all(_ERROR.search(t) for t in lines):
        return False
    return bool(_TOOLS.search(doc.command or "")) or any(_DEVINFO_OWN.match(t) for t in lines)


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
    return _tool_error_only(doc, head)


FORMATS = [Format("ibstat", detect=detect,
                  priority=60,  # pragma: no mutate (the only format of its probe: its rank decides nothing)
                  description="ibstat, ibstatus, ibv_devinfo [-v], ibdev2netdev, HCA status tables")]

PARSERS = [ParserSpec("ibstat", parse)]

__all__ = ["FORMATS", "NO_CA", "IbReport", "PARSERS", "Port", "detect", "parse"]
