"""ib.hca: RDMA (InfiniBand / RoCE) HCA ports: state, physical state, rate and link layer.

The probe runs `ibstat` (fallback `ibv_devinfo -v`); analyze also takes `ibstatus` output.
The three formats are parsed by content into one list of ports.

Which ports are the compute fabric: the ports of the profile's link layer (with "any", the
InfiniBand ports when the node has any, else every port), narrowed to the adapter types (CA
type) that reach the expected rate (or the top rate seen) so that 100G front-end NICs next to
400G compute NICs are told apart even when a compute port is down (a down port reports a
meaningless rate). A compute port that is not Active/LinkUp is a FAIL; fewer Active compute
ports than the profile's count is a FAIL; an Active compute port below the expected rate is a
FAIL (a ring all-reduce runs at the slowest rail). Other ports down are a WARN.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from preflight.model import Result, Status
from preflight.probes import Probe
from preflight.registry import Check, CheckContext, Format, register, register_format

PROBE = Probe.of("ibstat", ["ibstat"], ["ibv_devinfo", "-v"], timeout=10)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_CA = re.compile(r"^\s*CA '(?P<ca>[^']+)'\s*$")
_PORT = re.compile(r"^\s*Port (?P<port>\d+):\s*$")
_KV = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z _]*?)\s*:\s*(?P<val>.*?)\s*$")
_IBSTATUS = re.compile(r"^\s*Infiniband device '(?P<ca>[^']+)' port (?P<port>\d+) status:\s*$", re.IGNORECASE)
_HCA_ID = re.compile(r"^\s*hca_id:\s*(?P<ca>\S+)\s*$")
_DEVINFO_PORT = re.compile(r"^\s*port:\s*(?P<port>\d+)\s*$")
_ERROR = re.compile(
    r"^\s*(?:ibpanic|ibwarn|ibstat|ibstatus|ibv_devinfo)\b.*"
    r"(?:fail|error|No such|cannot|can't|couldn't|not found|No IB devices)"
    r"|^\s*No IB devices found", re.IGNORECASE)
_MISSING_DEV = re.compile(r"IB device '(?P<ca>[^']+)' failed")

_STATE = {
    "active": "Active", "port_active": "Active", "port_active_defer": "Active",
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
    lines: list[str] = field(default_factory=list)  # the tool's own lines for this port

    @property
    def up(self) -> bool:
        return self.state == "Active" and self.physical_state in ("LinkUp", "")

    def fact(self) -> dict[str, Any]:
        rate: float | int | None = self.rate
        if rate is not None and float(rate).is_integer():
            rate = int(rate)
        return {"ca": self.ca, "port": self.port, "state": self.state, "physical_state": self.physical_state,
                "rate": rate, "link_layer": self.link_layer, "ca_type": self.ca_type, "firmware": self.firmware}


@dataclass
class IbReport:
    kind: str = ""  # ibstat | ibstatus | ibv_devinfo
    ports: list[Port] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    missing_devices: list[str] = field(default_factory=list)
    no_devices: bool = False


def _norm_state(val: str, table: dict[str, str]) -> str:
    v = val.strip()
    v = re.sub(r"^\d+:\s*", "", v)  # ibstatus "4: ACTIVE"
    v = re.sub(r"\s*\(\d+\)$", "", v)  # ibv_devinfo "PORT_ACTIVE (4)"
    return table.get(v.lower(), table.get(v.lower().replace(" ", ""), v))


def _rate(val: str) -> float | None:
    m = re.match(r"^\s*(\d+(?:\.\d+)?)", val)
    return float(m.group(1)) if m else None


def parse_ib(text: str) -> IbReport:
    """ibstat / ibstatus / ibv_devinfo(-v) text -> ports, tool errors, missing devices. Never raises."""
    rep = IbReport()
    ca = ca_type = firmware = ""
    cur: Port | None = None
    width: int | None = None
    for raw in text.splitlines():
        line = _ANSI.sub("", raw).rstrip()
        if not line.strip():
            continue
        if _ERROR.search(line):
            rep.errors.append(line.strip())
            if re.search(r"No IB devices", line, re.IGNORECASE):
                rep.no_devices = True
            rep.missing_devices.extend(md.group("ca") for md in _MISSING_DEV.finditer(line))
            continue
        m = _CA.match(line)
        if m:
            rep.kind = rep.kind or "ibstat"
            ca, ca_type, firmware, cur = m.group("ca"), "", "", None
            continue
        m = _IBSTATUS.match(line)
        if m:
            rep.kind = rep.kind or "ibstatus"
            ca, ca_type, firmware = m.group("ca"), "", ""
            cur = Port(ca=ca, port=int(m.group("port")), lines=[line.strip()])
            rep.ports.append(cur)
            continue
        m = _HCA_ID.match(line)
        if m:
            rep.kind = rep.kind or "ibv_devinfo"
            ca, ca_type, firmware, cur = m.group("ca"), "", "", None
            continue
        pm = _PORT.match(line) or _DEVINFO_PORT.match(line)
        if pm and ca:
            cur = Port(ca=ca, port=int(pm.group("port")), ca_type=ca_type, firmware=firmware)
            width = None
            rep.ports.append(cur)
            continue
        m = _KV.match(line)
        if not m or not ca:
            continue
        key, val = m.group("key").strip().lower(), m.group("val")
        if cur is None:
            if key == "ca type":
                ca_type = val
            elif key in ("firmware version", "fw_ver"):
                firmware = val
            elif key == "vendor_part_id" and val.isdigit():
                ca_type = f"MT{val}"
            continue
        if key in ("state",):
            cur.state = _norm_state(val, _STATE)
        elif key in ("physical state", "phys state", "phys_state"):
            cur.physical_state = _norm_state(val, _PHYS)
        elif key == "rate":
            cur.rate = _rate(val)
        elif key in ("link layer", "link_layer"):
            cur.link_layer = val.strip()
        elif key == "active_width":
            w = _WIDTH.match(val.strip())
            width = int(w.group("n")) if w else None
        elif key == "active_speed":
            s = _SPEED.match(val.strip())
            if s and width:
                cur.rate = round(float(s.group("g")) * width, 1)
        else:
            continue
        cur.lines.append(line.strip())
    return rep


def looks_like_ibstat(text: str) -> bool:
    return bool(re.search(r"^CA '[^']+'\s*$", text, re.M)) and bool(re.search(r"^\s+Port \d+:\s*$", text, re.M)) \
        and "Physical state:" in text


def looks_like_ibstatus(text: str) -> bool:
    return bool(re.search(r"^Infiniband device '[^']+' port \d+ status:", text, re.M | re.I)) \
        and "phys state:" in text


def looks_like_ibv_devinfo(text: str) -> bool:
    return bool(re.search(r"^hca_id:\s*\S+", text, re.M)) and bool(re.search(r"^\s+port:\s*\d+", text, re.M))


# ---------------------------------------------------------------------------------------------
# Grading


def _is_ib(p: Port) -> bool:
    return p.link_layer.lower() == "infiniband"


def compute_ports(ports: list[Port], link_layer: str, rate: float) -> list[Port]:
    """The ports that carry the compute fabric (see the module docstring)."""
    want = (link_layer or "any").strip().lower()
    if want == "infiniband":
        cand = [p for p in ports if _is_ib(p)]
    elif want == "ethernet":
        cand = [p for p in ports if p.link_layer.lower() == "ethernet"]
    else:
        ib = [p for p in ports if _is_ib(p)]
        cand = ib or list(ports)
    active = [p for p in cand if p.up and p.rate is not None]
    if not active:
        return cand
    top = max(p.rate or 0.0 for p in active)
    target = rate if rate and any((p.rate or 0.0) >= rate for p in active) else top
    fast_types = {p.ca_type for p in active if (p.rate or 0.0) >= target}
    return [p for p in cand if p.ca_type in fast_types]


def _natural(name: str) -> tuple[Any, ...]:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def _port_line(p: Port) -> str:
    """The tool's own lines for a port, on one line."""
    if p.lines:
        return f"{p.ca} port {p.port}: " + " | ".join(re.sub(r"\s+", " ", ln) for ln in p.lines
                                                      if not _IBSTATUS.match(ln))
    rate = p.fact()["rate"]
    return (f"{p.ca} port {p.port}: State: {p.state or '?'}, Physical state: {p.physical_state or '?'}, "
            f"Rate: {rate if rate is not None else '?'}, Link layer: {p.link_layer or '?'}"
            + (f", CA type: {p.ca_type}" if p.ca_type else ""))


def _why_down(p: Port) -> str:
    ph = p.physical_state
    if ph == "Polling":
        return (f"{p.ca} port {p.port} is Polling: the port is trying to train but sees no peer (cable, transceiver "
                "or switch side): reseat/replace the cable or transceiver, check the switch port")
    if ph == "Disabled":
        return (f"{p.ca} port {p.port} is Disabled: administratively down or faulted: check `mlxlink -d {p.ca}` and "
                "the switch port; re-enable (ibportstate / ip link set up) or replace the HCA/cable")
    if ph == "LinkUp" and p.state in ("Initializing", "Armed"):
        return (f"{p.ca} port {p.port} has link but is {p.state}: no subnet manager has configured it: "
                "check the subnet manager (sminfo) and the switch partition")
    if ph in ("PortConfigurationTraining", "LinkErrorRecovery"):
        return f"{p.ca} port {p.port} is {ph}: an unstable link: reseat/replace the cable, check `mlxlink -d {p.ca}`"
    return f"{p.ca} port {p.port} is {p.state or 'not Active'}/{ph or '?'}: check the cable and the switch port"


def grade_ib(ctx: CheckContext) -> Result:
    cap = ctx.capture("ibstat")
    if cap is None:
        return ctx.result(Status.SKIP, "no ibstat output; RDMA ports not checked")
    cmd = " ".join(cap.argv)
    text = cap.stdout if cap.stdout.strip() else ""
    rep = parse_ib(text + ("\n" + cap.stderr if cap.stderr else ""))
    expect_count = int(ctx.profile.get("ib.hca_count", 0) or 0)
    expect_rate = float(ctx.profile.get("ib.rate", 0) or 0)
    link_layer = str(ctx.profile.get("ib.link_layer", "any") or "any")
    require_all = bool(ctx.profile.get("ib.require_all_ports", False))
    facts: dict[str, Any] = {
        "ports": [p.fact() for p in rep.ports],
        "format": rep.kind,
        "source_command": cmd,
        "tool_errors": rep.errors,
        "missing_devices": rep.missing_devices,
    }
    tool_failed = bool(rep.errors) or cap.rc not in (0, None)
    err_lines = rep.errors or [ln for ln in (cap.stderr or "").strip().splitlines()[-3:]] \
        or [f"{cmd} exited {cap.rc}"]

    if not rep.ports:
        if expect_count == 0 and (rep.no_devices or not text.strip()):
            return ctx.result(Status.SKIP, "no RDMA devices on this node; profile expects none",
                              evidence=err_lines if tool_failed else [f"{cmd}: no CA listed"], facts=facts)
        if rep.no_devices or not text.strip() or tool_failed:
            return ctx.result(Status.FAIL, f"no RDMA ports found ({cmd} failed or listed none)"
                              + (f"; profile expects {expect_count}" if expect_count else ""),
                              evidence=err_lines + ([f"ib.hca_count = {expect_count} ({ctx.profile.source('ib.hca_count')})"]
                                                    if expect_count else []),
                              remedy="check the HCAs are visible (`lspci | grep -i mellanox`, `ls /sys/class/infiniband`), "
                                     "load mlx5_core/mlx5_ib (or reinstall the OFED/DOCA driver), reboot",
                              facts=facts)
        return ctx.result(Status.ERROR, f"output of {cmd} not recognised (no CA or port found)",
                          evidence=text.strip().splitlines()[:3], remedy=f"run `{cmd}` by hand and check its output",
                          facts=facts)

    compute = compute_ports(rep.ports, link_layer, expect_rate)
    others = [p for p in rep.ports if p not in compute]
    facts["compute_ports"] = [f"{p.ca}/{p.port}" for p in compute]
    compute.sort(key=lambda p: (_natural(p.ca), p.port))
    others.sort(key=lambda p: (_natural(p.ca), p.port))
    up = [p for p in compute if p.up]
    down = [p for p in compute if not p.up]
    slow = [p for p in up if expect_rate and p.rate is not None and p.rate < expect_rate]
    others_down = [p for p in others if not p.up]
    facts.update(compute_total=len(compute), compute_active=len(up))

    fails: list[str] = []
    warns: list[str] = []
    evidence: list[str] = []
    remedies: list[str] = []
    if tool_failed:
        missing = f" (device {', '.join(rep.missing_devices)} listed but unreadable)" if rep.missing_devices else ""
        fails.append(f"{cmd} failed after {len({p.ca for p in rep.ports})} CA(s){missing}: {err_lines[0]}")
        evidence.extend(err_lines)
        dev = rep.missing_devices[0] if rep.missing_devices else "the device"
        remedies.append(f"{dev} is in the device list but cannot be read: check `ls /sys/class/infiniband` and "
                        "`dmesg | grep mlx5`, reload mlx5_ib or reboot; on a VM the virtual function may be gone "
                        "(ask the provider to repair the host)")
    if link_layer.lower() == "infiniband" and not compute:
        fails.append("no InfiniBand port found; profile expects an InfiniBand compute fabric")
        evidence.append(f"ib.link_layer = {link_layer} ({ctx.profile.source('ib.link_layer')})")
        remedies.append("check the HCA link type (`mlxconfig -d <dev> q LINK_TYPE_P1`) and the cabling")
    if down:
        fails.append("compute port(s) down: "
                     + ", ".join(f"{p.ca} {p.state or '?'}/{p.physical_state or '?'}" for p in down))
        evidence.extend(_port_line(p) for p in down)
        remedies.extend(_why_down(p) for p in down)
    if expect_count and len(up) < expect_count:
        fails.append(f"only {len(up)} of {expect_count} compute NICs up")
        evidence.append(f"ib.hca_count = {expect_count} ({ctx.profile.source('ib.hca_count')})")
        if len(compute) < expect_count:
            remedies.append(f"only {len(compute)} compute ports are listed: check that every HCA is seen "
                            "(`lspci | grep -i mellanox`) and its driver loaded")
    if slow:
        by_rate: dict[str, list[str]] = {}
        for p in slow:
            by_rate.setdefault(str(p.fact()["rate"]), []).append(p.ca)
        fails.append(f"{len(slow)} compute port(s) below the expected rate {expect_rate:g}: "
                     + "; ".join(f"{', '.join(cas)} at {r}" for r, cas in by_rate.items()))
        evidence.extend(_port_line(p) for p in slow)
        evidence.append(f"ib.rate = {expect_rate:g} ({ctx.profile.source('ib.rate')})")
        remedies.extend(f"{p.ca} trained at {p.fact()['rate']} Gb/s: reseat/replace the cable or transceiver, "
                        f"check `mlxlink -d {p.ca}` for the negotiated speed/width" for p in slow)
    if not expect_rate:
        top_by_type: dict[str, float] = {}
        for p in up:
            top_by_type[p.ca_type] = max(top_by_type.get(p.ca_type, 0.0), p.rate or 0.0)
        lagging = [p for p in up if p.rate is not None and p.rate < top_by_type.get(p.ca_type, 0.0)]
        if lagging:
            warns.append("compute port(s) slower than their siblings: " + ", ".join(
                f"{p.ca} at {p.fact()['rate']} (others {top_by_type[p.ca_type]:g})" for p in lagging))
            evidence.extend(_port_line(p) for p in lagging)
            remedies.extend(f"{p.ca} trained below its siblings: reseat/replace the cable or transceiver, check "
                            f"`mlxlink -d {p.ca}`; set ib.rate in the site profile to make this a FAIL" for p in lagging)
    if others_down:
        msg = ("non-compute port(s) down: " + ", ".join(f"{p.ca} ({p.link_layer or '?'} "
                                                          f"{p.state}/{p.physical_state})" for p in others_down))
        (fails if require_all else warns).append(msg)
        evidence.extend(_port_line(p) for p in others_down)
        remedies.append("front-end/storage port(s) down: " + "; ".join(_why_down(p) for p in others_down)
                        + ("" if require_all else " (the compute fabric is not affected)"))

    layers = sorted({p.link_layer for p in compute if p.link_layer})
    rates = sorted({p.fact()["rate"] for p in up if p.rate is not None})
    shape = f"{len(up)}/{len(compute)} compute ports Active ({'/'.join(layers) or '?'}, rate {'/'.join(map(str, rates)) or '?'})"
    if fails:
        summary = "; ".join(fails) + f" [{shape}]"
        return ctx.result(Status.FAIL, summary, evidence=evidence, remedy="drain node; " + "; ".join(remedies),
                          facts=facts)
    if warns:
        return ctx.result(Status.WARN, f"{shape}; " + "; ".join(warns), evidence=evidence,
                          remedy="; ".join(remedies), facts=facts)
    extra = f"; {len(others)} other port(s) Active" if others else ""
    return ctx.result(Status.PASS, shape + extra, facts=facts)


register_format(Format("ibstat", detect=looks_like_ibstat, description="ibstat", priority=60))
register_format(Format("ibstatus", detect=looks_like_ibstatus, probe="ibstat", description="ibstatus", priority=58))
register_format(Format("ibv_devinfo", detect=looks_like_ibv_devinfo, probe="ibstat",
                       description="ibv_devinfo [-v]", priority=56))

register(Check(
    id="ib.hca",
    title="InfiniBand / RoCE HCA ports",
    grade=grade_ib,
    probes=(PROBE,),
    required=("ibstat",),
    profile_keys={"ib.hca_count": int, "ib.rate": (int, float), "ib.link_layer": str, "ib.require_all_ports": bool},
    formats=("ibstat",),
    catches="compute HCA ports Down/Polling/Disabled, fewer compute NICs than expected, links trained below "
            "the expected rate, a crashing ibstat; front-end ports down as warnings",
    node_local=True,
    in_run=True,
))
