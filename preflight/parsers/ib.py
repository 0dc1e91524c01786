"""RDMA (InfiniBand / RoCE / Omni-Path) ports as facts, from whichever tool printed them.

`ibstat` (tab or space indentation, `mlx5_bond_N`, `hfi1_0` with an empty CA type), `ibstatus`,
`ibv_devinfo [-v]`, `ibdev2netdev` ("mlx5_0 port 1 ==> ib0 (Up)") and the per-HCA status table
some node checkers print (`PCI_addr | RDMA | Net | Numa | LnkStat | IpStat | Link | Rate |
LnkCapWidth | LnkStaWidth | HCA_Type`). A tool that fails half-way keeps the ports it printed
and its error lines (`ibpanic: ... stat of IB device 'mlx5_8' failed`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from preflight.framing import Doc
from preflight.parsers.base import Format, ParserSpec

_CA = re.compile(r"^\s*CA '(?P<ca>[^']+)'\s*$")
_PORT = re.compile(r"^\s*Port (?P<port>\d+):\s*$")
_KV = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z _]*?)\s*:\s*(?P<val>.*?)\s*$")
_IBSTATUS = re.compile(r"^\s*Infiniband device '(?P<ca>[^']+)' port (?P<port>\d+) status:\s*$", re.IGNORECASE)
_HCA_ID = re.compile(r"^\s*hca_id:\s*(?P<ca>\S+)\s*$")
_DEVINFO_PORT = re.compile(r"^\s*port:\s*(?P<port>\d+)\s*$")
_IBDEV2NETDEV = re.compile(r"^(?P<ca>[\w.-]+) port (?P<port>\d+) ==> (?P<net>\S+) \((?P<state>\w+)\)")
_ERROR = re.compile(
    r"^\s*(?:ibpanic|ibwarn|ibstat|ibstatus|ibv_devinfo|ibdev2netdev)\b.*"
    r"(?:fail|error|No such|cannot|can't|couldn't|not found|No IB devices)"
    r"|^\s*No IB devices found|^\s*Failed to get IB devices list", re.IGNORECASE)
_MISSING_DEV = re.compile(r"IB device '(?P<ca>[^']+)' failed")

_STATE = {
    "active": "Active", "port_active": "Active", "port_active_defer": "Active", "up": "Active",
    "down": "Down", "port_down": "Down",
    "init": "Initializing", "initializing": "Initializing", "initialize": "Initializing", "port_init": "Initializing",
    "armed": "Armed", "port_armed": "Armed",
    "nop": "Nop", "port_nop": "Nop",
}
_PHYS = {
    "linkup": "LinkUp", "link_up": "LinkUp",
    "disabled": "Disabled",
    "polling": "Polling",
    "sleep": "Sleep",
    "portconfigurationtraining": "PortConfigurationTraining", "port_configuration_training": "PortConfigurationTraining",
    "linkerrorrecovery": "LinkErrorRecovery", "link_error_recovery": "LinkErrorRecovery",
    "phytest": "PhyTest", "phy_test": "PhyTest", "phy test": "PhyTest",
    "nop": "Nop",
}
# ibv_devinfo -v: active_width "4X (2)", active_speed "100.0 Gbps (128)"; rate = lanes x lane speed.
_WIDTH = re.compile(r"^(?P<n>\d+)X")
_SPEED = re.compile(r"^(?P<g>\d+(?:\.\d+)?)\s*Gbps")


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
    lines: list[str] = field(default_factory=list)  # the tool's own lines for this port

    @property
    def up(self) -> bool:
        return self.state == "Active" and self.physical_state in ("LinkUp", "")

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
        return out


@dataclass
class IbReport:
    kind: str = ""  # ibstat | ibstatus | ibv_devinfo | ibdev2netdev | table
    ports: list[Port] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    missing_devices: list[str] = field(default_factory=list)
    no_devices: bool = False
    shows_rate: bool = True  # ibdev2netdev prints no rate or link layer
    nonblank: int = 0  # lines of output (0: the tool printed nothing)


def _norm_state(val: str, table: dict[str, str]) -> str:
    v = val.strip()
    v = re.sub(r"^\d+:\s*", "", v)  # ibstatus "4: ACTIVE"
    v = re.sub(r"\s*\(\d+\)$", "", v)  # ibv_devinfo "PORT_ACTIVE (4)"
    return table.get(v.lower(), table.get(v.lower().replace(" ", ""), v))


def _rate(val: str) -> float | None:
    m = re.match(r"^\s*(\d+(?:\.\d+)?)", val)
    return float(m.group(1)) if m else None


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
        if re.search(r"No IB devices|Failed to get IB devices list", line, re.IGNORECASE):
            rep.no_devices = True
        rep.missing_devices.extend(md.group("ca") for md in _MISSING_DEV.finditer(line))

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
        if key == "ca type":
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
            port.link_layer = val.strip()
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
    return rep


def detect(doc: Doc) -> bool:
    head = [ln.text for ln in doc.head(600)]
    text = "\n".join(head)
    if re.search(r"^\s*CA '[^']+'\s*$", text, re.M) and re.search(r"^\s*Port \d+:\s*$", text, re.M) \
            and "Physical state:" in text:
        return True
    if re.search(r"^\s*Infiniband device '[^']+' port \d+ status:", text, re.M | re.I) and "phys state:" in text:
        return True
    if re.search(r"^\s*hca_id:\s*\S+", text, re.M) and re.search(r"^\s+port:\s*\d+", text, re.M):
        return True
    if sum(1 for t in head if _IBDEV2NETDEV.match(t.strip())) >= 1:
        return True
    return any("|" in t and "RDMA" in t and "LnkStat" in t for t in head)


FORMATS = [Format("ibstat", detect=detect, priority=60,
                  description="ibstat, ibstatus, ibv_devinfo [-v], ibdev2netdev, HCA status tables")]
PARSERS = [ParserSpec("ibstat", parse)]

__all__ = ["FORMATS", "IbReport", "PARSERS", "Port", "detect", "parse"]
