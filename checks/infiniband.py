"""ib.hca: RDMA (InfiniBand / RoCE) HCA ports: state, physical state, rate, MTU, link layer, flaps.

Facts: ports from ibstat / ibstatus / ibv_devinfo / ibdev2netdev / HCA status tables
(`preflight.parsers.ib`) and IB link up/down events and transceiver faults from system logs
(`parsers.netlog`). Every finding has a code (`checks/policy.toml`).

Which ports are the compute fabric: the ports of the profile's link layer (with "any", the
InfiniBand ports when the node has any, else every port), grouped by adapter model (CA type);
the group(s) that reach the profile's `ib.rate`, else the fastest group, are the compute rails.
A group's speed is the rate of its Active ports, or, when every port of it is down (a down port
reports a meaningless rate), the model's nominal rate from the profile's `ib.ca_type_rates`: so
Active 100G front-end ports are never taken for the compute fabric while the 400G compute ports
are Down. Second ports that are down on every dual-port adapter while the first ports are up
are uncabled, not compute rails; so are second PCI functions (rocep1s0f1 beside an Active
rocep1s0f0) down on every adapter that has one. A compute port that is not Active/LinkUp FAILs; fewer Active
compute ports than `ib.hca_count` FAILs; an Active compute port below `ib.rate` FAILs (a ring
runs at the slowest rail); without an `ib.rate`, one below its adapter model's nominal rate or below its siblings
WARNs (it may be a slower fabric by design); an adapter trained at a narrower PCIe width than it
can FAILs; an active MTU below the port's maximum WARNs; other ports down WARN. A port state the
parser does not know is said ("not recognised"), never taken for down or up. A port trained at fewer
lanes than its siblings (2X among 4X) FAILs; ports below 4X with no wider sibling WARN unless they
meet the profile's ib.rate (split cables).

A fragment (grep'd field lines without device headers) is graded for what it shows: its ports are
unnamed, a state or link layer it does not show is not graded, the port count is not graded, and
a fragment that shows no state, rate or width is SKIP. Error lines of the tools or of the RDMA
kernel drivers that no rule reads are `ib.hca/unread-error`; the mlx5 driver's lines saying an
adapter stopped (health compromised, fatal error, health syndrome, command timeout) FAIL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from preflight import lazyre
from preflight.findings import Findings
from preflight.model import Result, Status
from preflight.parsers.ib import LID_UNASSIGNED, IbReport, Port, RdmaKernelLog
from preflight.parsers.netlog import LinkEvents
from preflight.probes import Probe
from preflight.profile import Profile
from preflight.registry import Check, CheckContext, register

from .flaps import grade_flaps, is_ib_name
from .units import owns

PROBE = Probe.of("ibstat", ["ibstat"], ["ibv_devinfo", "-v"], timeout=10)


def _is_ib(p: Port) -> bool:
    return p.link_layer.lower() == "infiniband"


def _group_rate(ports: list[Port], nominal: dict[str, Any]) -> float | None:
    active = [p.rate for p in ports if p.up and p.rate is not None]
    if active:
        return max(active)
    rate = nominal.get(ports[0].ca_type) if ports and ports[0].ca_type else None
    return float(rate) if isinstance(rate, (int, float)) else None


# a device named after its PCI function (rdma-core's predictable names, rocep1s0f1 / ibp12s0f1)
_FUNCTION_NAME = lazyre.compile(r"^(?P<stem>(?:roce|ib)[pP]\w*?)f(?P<fn>\d+)$")


def _uncabled(groups: dict[str, list[tuple[int, Port]]]) -> set[tuple[str, int]]:
    """The ports at positions past the first that are down on every group that has them, while
    the first ones are up."""
    by_pos: dict[int, list[Port]] = {}
    for members in groups.values():
        for pos, p in members:
            by_pos.setdefault(pos, []).append(p)
    if not any(p.up for p in by_pos.get(min(by_pos, default=0), [])):
        return set()
    first = min(by_pos)
    return {(p.ca, p.port) for pos, group in by_pos.items() if pos > first and not any(q.up for q in group)
            for p in group}


def _unused_ports(ports: list[Port]) -> set[tuple[str, int]]:
    """Second ports of dual-port adapters, or second PCI functions of one adapter (a ConnectX
    shows each port as a device, rocep1s0f0 / rocep1s0f1), that are down on every adapter that
    has them while the first ones are up: uncabled, not a failed rail."""
    by_ca: dict[str, list[tuple[int, Port]]] = {}
    by_stem: dict[str, list[tuple[int, Port]]] = {}
    for p in ports:
        by_ca.setdefault(p.ca, []).append((p.port, p))
        m = _FUNCTION_NAME.match(p.ca)
        if m:
            by_stem.setdefault(m.group("stem").lower(), []).append((int(m.group("fn")), p))
    multi = {k: v for k, v in by_stem.items() if len(v) > 1}
    return _uncabled(by_ca) | (_uncabled(multi) if multi else set())


def compute_ports(ports: list[Port], link_layer: str, rate: float, nominal: dict[str, Any] | None = None) -> list[Port]:
    """The ports that carry the compute fabric (see the module docstring)."""
    unused = _unused_ports(ports)
    ports = [p for p in ports if (p.ca, p.port) not in unused]
    want = (link_layer or "any").strip().lower()
    unseen = [p for p in ports if p.unnamed and not p.link_layer]  # a fragment that does not show the link layer
    if want == "infiniband":
        cand = [p for p in ports if _is_ib(p)] + unseen
    elif want == "ethernet":
        cand = [p for p in ports if p.link_layer.lower() == "ethernet"] + unseen
    else:
        cand = [p for p in ports if _is_ib(p)] + unseen or list(ports)
    groups: dict[str, list[Port]] = {}
    for p in cand:
        groups.setdefault(p.ca_type, []).append(p)
    if len(groups) <= 1:  # pragma: no mutate (one group: the speed test below keeps it anyway)
        return cand
    speed = {t: _group_rate(g, nominal or {}) for t, g in groups.items()}
    known = {t: s for t, s in speed.items() if s is not None}
    if not known:
        return cand
    if rate and any(s >= rate for s in known.values()):
        chosen = {t for t, s in known.items() if s >= rate}
    else:
        top = max(known.values())
        chosen = {t for t, s in known.items() if s == top}
    return [p for p in cand if p.ca_type in chosen]


def _dev(p: Port) -> str:
    """The device name for a command line (a fragment's unnamed port has none)."""
    return "<device>" if p.unnamed else p.ca


def _natural(name: str) -> tuple[Any, ...]:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def _port_line(p: Port) -> str:
    """The tool's own lines for a port, on one line."""
    if p.lines:
        return f"{p.label}: " + " | ".join(re.sub(r"\s+", " ", ln) for ln in p.lines
                                                      if not ln.lower().startswith("infiniband device"))
    rate = p.fact()["rate"]
    return (f"{p.label}: State: {p.state or '?'}, Physical state: {p.physical_state or '?'}, "
            f"Rate: {rate if rate is not None else '?'}, Link layer: {p.link_layer or '?'}"
            + (f", CA type: {p.ca_type}" if p.ca_type else ""))


def _why_down(p: Port) -> str:
    ph = p.physical_state
    nolid = " (no LID from a subnet manager: 65535)" if p.lid == LID_UNASSIGNED else ""
    if ph == "Polling":
        return (f"{p.label} is Polling: the port is trying to train but sees no peer (cable, transceiver "
                "or switch side): reseat/replace the cable or transceiver, check the switch port")
    if ph == "Disabled":
        return (f"{p.label} is Disabled: administratively down or faulted: check `mlxlink -d {_dev(p)}` and "
                "the switch port; re-enable (ibportstate / ip link set up) or replace the HCA/cable")
    if p.state in ("Initializing", "Armed") and ph in ("LinkUp", ""):
        return (f"{p.label} has link but is {p.state}{nolid}: no subnet manager has configured it: "
                "check the subnet manager (sminfo) and the switch partition")
    if ph in ("PortConfigurationTraining", "LinkErrorRecovery", "PhyTest", "Sleep"):
        return f"{p.label} is {ph}: the link is not up: reseat/replace the cable, check `mlxlink -d {_dev(p)}`"
    return (f"{p.label} is {p.state or 'not Active'}/{ph or '?'}{nolid}: check the cable and the switch "
            "port")


@dataclass(frozen=True)
class _Expect:
    """What the profile expects of the node's IB ports."""

    count: int
    rate: float
    link_layer: str
    require_all: bool
    nominal: Any  # ca type -> nominal rate

    @classmethod
    def of(cls, prof: Profile) -> _Expect:
        return cls(int(prof.get("ib.hca_count", 0) or 0), float(prof.get("ib.rate", 0) or 0),
                   str(prof.get("ib.link_layer", "any") or "any"), bool(prof.get("ib.require_all_ports", False)),
                   prof.get("ib.ca_type_rates") or {})


def _tool_failure(ctx: CheckContext, rep: IbReport, f: Findings) -> None:
    """ibstat that failed part-way (a device listed but unreadable)."""
    run = ctx.input("ibstat")
    cmd = run.cmdline if run is not None else "ibstat"
    if not rep.errors and (run is None or run.rc in (0, None)):
        return
    missing = f" (device {', '.join(rep.missing_devices)} listed but unreadable)" if rep.missing_devices else ""
    err = rep.errors[:3] or [f"{cmd} exited {run.rc if run else '?'}"]
    dev = rep.missing_devices[0] if rep.missing_devices else "the device"
    f.add("ib.hca/tool-failed", f"{cmd} failed after {len({p.ca for p in rep.ports})} CA(s){missing}: {err[0]}", err,
          f"{dev} is in the device list but cannot be read: check `ls /sys/class/infiniband` and "
          "`dmesg | grep mlx5`, reload mlx5_ib or reboot; on a VM the virtual function may be gone "
          "(ask the provider to repair the host)")


def _unknown_states(ports: list[Port], f: Findings) -> None:
    for p in ports:
        if not p.known:
            f.add("ib.hca/port-state-unknown",
                  f"not recognised: {p.label} state {p.state or '?'}/{p.physical_state or '?'} (expected "
                  "Down, Initializing, Armed or Active, and a physical state such as LinkUp, Polling or Disabled)",
                  [_port_line(p)], f"read `ibstat {_dev(p)}` by hand; this port was not graded")


def _compute_findings(prof: Profile, exp: _Expect, compute: list[Port], f: Findings) -> None:
    """No compute fabric, compute ports down, fewer compute NICs up than expected."""
    up = [p for p in compute if p.up]
    down = [p for p in compute if p.down]
    unknown = [p for p in compute if not p.known]
    if exp.link_layer.lower() == "infiniband" and not compute:
        f.add("ib.hca/no-infiniband-port", "no InfiniBand port found; profile expects an InfiniBand compute fabric",
              [f"ib.link_layer = {exp.link_layer} ({prof.source('ib.link_layer')})"],
              "check the HCA link type (`mlxconfig -d <dev> q LINK_TYPE_P1`) and the cabling")
    if down:
        f.add("ib.hca/compute-port-down", "compute port(s) down: " + ", ".join(
            f"{p.ca} {p.state}" + (f"/{p.physical_state}" if p.physical_state else "") for p in down),
            [_port_line(p) for p in down], "; ".join(_why_down(p) for p in down))
    if exp.count and len(up) + len(unknown) < exp.count and not any(p.unnamed for p in compute):
        f.add("ib.hca/compute-ports-missing", f"only {len(up)} of {exp.count} compute NICs up",
              [f"ib.hca_count = {exp.count} ({prof.source('ib.hca_count')})"],
              f"only {len(compute)} compute ports are listed: check that every HCA is seen (`lspci | grep -i "
              "mellanox`) and its driver loaded" if len(compute) < exp.count else "")


def _nominal(exp: _Expect, p: Port) -> float | None:
    rate = exp.nominal.get(p.ca_type) if p.ca_type else None
    return float(rate) if isinstance(rate, (int, float)) and not isinstance(rate, bool) else None


def _below(nominal: float | None, rate: float) -> bool:
    return nominal is not None and rate < nominal


def _below_adapter(prof: Profile, exp: _Expect, up: list[Port], f: Findings) -> list[Port]:
    """Active ports below their adapter model's nominal rate (no ib.rate in the profile)."""
    slow = [p for p in up if p.rate is not None and _below(_nominal(exp, p), p.rate)]
    if slow:
        f.add("ib.hca/rate-below-adapter", "compute port(s) below their adapter's rate: " + ", ".join(
            f"{p.ca} ({p.ca_type}) at {p.fact()['rate']} of {_nominal(exp, p):g}" for p in slow),
            [_port_line(p) for p in slow] + [f"ib.ca_type_rates ({prof.source('ib.ca_type_rates')})"],
            "; ".join(f"{p.ca} runs below what a {p.ca_type} can: if the fabric is {p.fact()['rate']}G by design set "
                      f"ib.rate in the site profile; else check the cable/transceiver and `mlxlink -d {_dev(p)}`"
                      for p in slow))
    return slow


# An HCA port is a 4X link: the InfiniBand Architecture Specification vol. 2 defines 1X, 2X, 4X, 8X and
# 12X links, and ConnectX / BlueField ports are 4X; 2X is the split-cable port (HDR100, NDR200), 1X a
# link that lost lanes. ibstatus prints the trained width in its rate ("(2X HDR)"), ibv_devinfo -v as
# active_width.
IB_PORT_WIDTH = 4


def _width_findings(exp: _Expect, rated: list[Port], f: Findings) -> list[Port]:
    """Ports trained at fewer lanes than the widest port of their adapter model (a lane that did not
    train: FAIL), and ports below 4X with no wider sibling and no ib.rate that they meet (WARN: a
    split cable by design, or every port lost lanes). Returns the ports of the first kind."""
    widest: dict[str, int] = {}
    for p in rated:
        if p.width:
            widest[p.ca_type] = max(widest.get(p.ca_type, p.width), p.width)
    reduced = [p for p in rated if p.width and p.width < widest[p.ca_type]]
    if reduced:
        f.add("ib.hca/width-reduced", "port(s) trained at fewer lanes than their siblings: " + ", ".join(
            f"{p.ca} at {p.width}X (others {widest[p.ca_type]}X)" for p in reduced),
            [_port_line(p) for p in reduced],
            "; ".join(f"{p.ca} trained at {p.width}X: a lane did not come up: reseat/replace the cable or transceiver, "
                      f"check `mlxlink -d {_dev(p)}` (width, lanes, errors) and the switch port" for p in reduced))
    narrow = [p for p in rated if p.width and p.width < IB_PORT_WIDTH and p not in reduced
              and not (exp.rate and p.rate is not None and p.rate >= exp.rate)]
    if narrow:
        f.add("ib.hca/width-narrow", "port(s) trained below 4X: " + ", ".join(f"{p.ca} at {p.width}X" for p in narrow),
              [_port_line(p) for p in narrow],
              "a split cable (HDR100 / NDR200) runs ports at 2X by design: set ib.rate in the site profile to the "
              "fabric's rate; otherwise lanes are missing: check the cable/transceiver and `mlxlink -d <device>`")
    return reduced


def _rate_findings(prof: Profile, exp: _Expect, rep: IbReport, up: list[Port], f: Findings,
                   narrowed: list[Port]) -> None:
    """Ports under the profile's rate, or (no rate in the profile) under their adapter's or their
    siblings' (a port already found narrower than its siblings is not said twice)."""
    slow = [p for p in up if exp.rate and p.rate is not None and p.rate < exp.rate]
    if slow:
        f.add("ib.hca/rate-below-profile", f"{len(slow)} compute port(s) below the expected rate {exp.rate:g}: "
              + "; ".join(f"{p.ca} at {p.fact()['rate']}" for p in slow),
              [_port_line(p) for p in slow] + [f"ib.rate = {exp.rate:g} ({prof.source('ib.rate')})"],
              "; ".join(f"{p.ca} trained at {p.fact()['rate']} Gb/s: reseat/replace the cable or transceiver, check "
                        f"`mlxlink -d {_dev(p)}` for the negotiated speed/width" for p in slow))
    if exp.rate or not rep.shows_rate:
        return
    flagged = _below_adapter(prof, exp, up, f)
    rated = [(p, p.rate) for p in up if p.rate is not None]
    top: dict[str, float] = {}
    for p, r in rated:
        top[p.ca_type] = max(top.get(p.ca_type, r), r)
    lagging = [p for p, r in rated if r < top[p.ca_type] and p not in flagged and p not in narrowed]
    if lagging:
        f.add("ib.hca/rate-below-siblings", "compute port(s) slower than their siblings: " + ", ".join(
            f"{p.ca} at {p.fact()['rate']} (others {top[p.ca_type]:g})" for p in lagging),
            [_port_line(p) for p in lagging],
            "; ".join(f"{p.ca} trained below its siblings: reseat/replace the cable or transceiver, check "
                      f"`mlxlink -d {_dev(p)}`; set ib.rate in the site profile to make this a FAIL" for p in lagging))


def _mtu_findings(compute: list[Port], f: Findings) -> None:
    """Compute ports whose active MTU is below the largest they support (ibv_devinfo); a front-end
    port's MTU is its network's business (an Azure accelerated-networking port runs at 1024)."""
    low = [p for p in compute if p.max_mtu and p.active_mtu and p.active_mtu < p.max_mtu]
    if not low:
        return
    why = []
    for p in low:
        if p.link_layer.lower() == "ethernet":
            why.append(f"{p.ca}: RoCE uses the largest IB MTU that fits the netdev's MTU: set the interface MTU to "
                       f"4200 (or 9000) to get {p.max_mtu}")
        else:
            why.append(f"{p.ca}: the subnet manager's partition (or the switch port) limits the MTU: check the "
                       f"partition's mtu in the SM configuration")
    f.add("ib.hca/mtu-reduced", "active MTU below the port's maximum: " + ", ".join(
        f"{p.ca} {p.active_mtu} of {p.max_mtu}" for p in low), [_port_line(p) for p in low], "; ".join(why))


def _adapter_findings(exp: _Expect, rep: IbReport, others_down: list[Port], f: Findings) -> None:
    """Narrow PCIe links, non-compute ports down, adapters of unknown type."""
    narrow = [p for p in rep.ports if p.pcie_width and p.pcie_width_cap and p.pcie_width < p.pcie_width_cap]
    if narrow:
        f.add("ib.hca/pcie-narrow", "HCA PCIe link trained narrower than it can: " + ", ".join(
            f"{p.ca} x{p.pcie_width} of x{p.pcie_width_cap}" for p in narrow), [_port_line(p) for p in narrow],
            "reseat the HCA (or its riser), check the slot in the BIOS; `lspci -vv` LnkSta shows the trained width")
    if others_down:
        f.add("ib.hca/other-port-down-required" if exp.require_all else "ib.hca/other-port-down",
              "non-compute port(s) down: " + ", ".join(
                  f"{p.ca} ({p.link_layer or '?'} {p.state}" + (f"/{p.physical_state})" if p.physical_state else ")")
                  for p in others_down),
              [_port_line(p) for p in others_down],
              "front-end/storage port(s) down: " + "; ".join(_why_down(p) for p in others_down)
              + ("" if exp.require_all else " (the compute fabric is not affected)"))
    unknown = sorted({p.ca for p in rep.ports if not p.ca_type and rep.kind in ("ibstat", "ibv_devinfo")})
    if unknown:
        f.add("ib.hca/adapter-type-unknown",
              f"adapter type not reported for {', '.join(unknown)} (unknown type, not a port fault)")


def _fragment_shape(rep: IbReport, up: list[Port], rated: list[Port], rates: list[Any],
                    widths: list[int]) -> str:
    """What a headerless fragment showed, and what it did not."""
    n = len(rep.ports)
    shown = [f"{len(up)} Active"] if any(p.shows_link for p in rep.ports) else ["port state not shown"]
    if rates:
        shown.append(f"rate {'/'.join(map(str, rates))}" + (f" {'/'.join(f'{w}X' for w in widths)}" if widths else ""))
    elif not any(p.rate is not None for p in rated):
        shown.append("rate not shown")
    return (f"{n} port(s) in a fragment without device names (ports unnamed; the port count is not graded): "
            + ", ".join(shown))


def _grade_ports(ctx: CheckContext, rep: IbReport, f: Findings, facts: dict[str, Any]) -> str:
    exp = _Expect.of(ctx.profile)
    compute = sorted(compute_ports(rep.ports, exp.link_layer, exp.rate, exp.nominal),
                     key=lambda p: (_natural(p.ca), p.port))
    others = sorted((p for p in rep.ports if p not in compute), key=lambda p: (_natural(p.ca), p.port))
    up = [p for p in compute if p.up]
    # a fragment's port whose state grep dropped is graded for the rate and width it shows
    rated = [p for p in compute if p.up or (p.unnamed and not p.shows_link)]
    others_down = [p for p in others if p.down]
    facts.update(compute_ports=[f"{p.ca}/{p.port}" for p in compute], compute_total=len(compute),
                 compute_active=len(up))
    if rep.cut is not None:
        facts["cut_port"] = f"{rep.cut.ca}/{rep.cut.port}"
        f.note(f"{rep.cut.ca} port {rep.cut.port}: the capture ends inside its block, before its state line: "
               "not graded")
    _tool_failure(ctx, rep, f)
    f.unread("ib.hca", "rdma-core", rep.unread)
    _unknown_states(rep.ports, f)
    _compute_findings(ctx.profile, exp, compute, f)
    _rate_findings(ctx.profile, exp, rep, rated, f, _width_findings(exp, rated, f))
    _mtu_findings(compute, f)
    _adapter_findings(exp, rep, others_down, f)
    layers = sorted({p.link_layer for p in compute if p.link_layer})
    rates = sorted({p.fact()["rate"] for p in rated if p.rate is not None})
    widths = sorted({p.width for p in rated if p.width})
    shape = f"{len(up)}/{len(compute)} compute ports Active ({'/'.join(layers) or '?'}, " \
            f"rate {'/'.join(map(str, rates)) or '?'})"
    if rep.fragment:
        shape = _fragment_shape(rep, up, rated, rates, widths)
    return shape + (f"; {len(others)} other port(s) Active" if others and not others_down else "") + (
        f"; {rep.cut.ca} port {rep.cut.port} cut before its state" if rep.cut is not None else "")


_DRIVER_REMEDY = ("check the HCAs are visible (`lspci | grep -i mellanox`, `ls /sys/class/infiniband`), load "
                  "mlx5_core/mlx5_ib (or reinstall the OFED/DOCA driver), reboot")


def _no_ports(ctx: CheckContext, rep: IbReport, cmd: str, facts: dict[str, Any]) -> Result:
    """The tool listed no port: no devices, a tool that could not read them, or output not understood."""
    run = ctx.input("ibstat")
    expect_count = int(ctx.profile.get("ib.hca_count", 0) or 0)
    errs = rep.errors[:3] + rep.unread[:3] or [f"{cmd}: no CA listed"]
    want = [f"ib.hca_count = {expect_count} ({ctx.profile.source('ib.hca_count')})"] if expect_count else []
    if rep.no_umad:
        return ctx.finding("ib.hca/umad-unavailable", f"{cmd} could not read the ports: the umad interface is not "
                           "available (ib_umad not loaded)", evidence=errs, facts=facts,
                           remedy="`modprobe ib_umad` and re-run ibstat, or run `ibv_devinfo -v` (it needs no umad)")
    if expect_count == 0 and (rep.no_devices or rep.nonblank == 0):
        return ctx.finding("ib.hca/no-devices-none-expected", "no RDMA devices on this node; profile expects none",
                           evidence=errs, facts=facts)
    failed = bool(rep.errors) or rep.no_devices or (run is not None and run.rc not in (0, None))
    if failed or rep.nonblank == 0:
        return ctx.finding("ib.hca/no-devices", f"no RDMA ports found ({cmd} failed or listed none)"
                           + (f"; profile expects {expect_count}" if expect_count else ""),
                           evidence=errs + want, remedy=_DRIVER_REMEDY, facts=facts)
    if rep.unread:
        f = Findings()
        f.unread("ib.hca", "rdma-core", rep.unread)
        return f.result(ctx, "", facts)
    return ctx.finding("ib.hca/not-recognised", f"not recognised: {cmd} output without a port (expected ibstat "
                       "`CA '<name>'` / `Port N:` blocks, ibstatus, ibv_devinfo or ibdev2netdev lines)",
                       evidence=errs, remedy=f"run `{cmd}` by hand and check its output", facts=facts)


def _kernel_findings(kern: RdmaKernelLog, f: Findings, facts: dict[str, Any]) -> str:
    """The RDMA drivers' error lines of a kernel log: an adapter that stopped (FAIL), other
    error lines no rule reads (WARN unread-error)."""
    fatal = kern.fatal
    devices = list(dict.fromkeys(x.device for x in fatal))
    if fatal:
        f.add("ib.hca/hca-fatal", f"RDMA adapter stopped: {', '.join(devices)}: " + fatal[0].message[:160],
              [x.text for x in fatal],
              f"the adapter at {', '.join(devices)} is in an error state and its ports are gone: keep `devlink health show` and "
              "`dmesg | grep mlx5` for the vendor, then reset the adapter (`mlxfwreset -d <device> reset`) or reboot; "
              "a repeat means a failing HCA: replace it")
    f.unread("ib.hca", "mlx5/ib_core kernel driver", [x.text for x in kern.unread])
    facts["kernel_fatal"] = devices
    facts["kernel_unread"] = len(kern.unread)
    return (f"kernel log: {len(fatal)} fatal RDMA adapter line(s)" if fatal else "kernel log: no fatal RDMA adapter line") \
        + (f", {len(kern.unread)} other error line(s)" if kern.unread else "")


def grade_ib(ctx: CheckContext) -> Result:
    rep: IbReport | None = ctx.facts("ibstat")
    kern: RdmaKernelLog | None = ctx.facts("rdma-kernel")
    events: LinkEvents | None = ctx.facts("link-events")
    ib_names = [n for n in events.interfaces() if is_ib_name(n)] if events else []
    # transceiver faults on a function no Ethernet link line names belong to the HCA check
    eth = {n for n in events.interfaces() if not is_ib_name(n)} if events else set()
    mod_names = [n for n in events.module_devices() if n not in eth and n not in ib_names] if events else []
    if rep is None and not ib_names and not mod_names and not (kern and kern.lines):
        return ctx.finding("ib.hca/no-input", "no ibstat output or IB link events; RDMA ports not checked")
    f = Findings()
    facts: dict[str, Any] = {}
    shape = ""
    if rep is not None:
        run = ctx.input("ibstat")
        cmd = run.cmdline if run is not None else "ibstat"
        facts.update(ports=[p.fact() for p in rep.ports], format=rep.kind, source_command=cmd, tool_errors=rep.errors,
                     missing_devices=rep.missing_devices)
        if not rep.ports:
            return _no_ports(ctx, rep, cmd, facts)
        if rep.fragment and not any(p.gradeable for p in rep.ports) and not rep.errors and not rep.unread:
            return ctx.finding("ib.hca/fragment-nothing-to-grade",
                               f"nothing to grade: a fragment of {len(rep.ports)} unnamed port(s) without a state, "
                               "physical state, rate or width (only " + ", ".join(sorted(
                                   {ln.split(":")[0].strip() for p in rep.ports for ln in p.lines})) + " shown)",
                               evidence=[_port_line(p) for p in rep.ports][:8], facts=facts,
                               remedy="run `ibstatus` (or `ibstat`) whole, or grep it for state, phys state and rate")
        shape = _grade_ports(ctx, rep, f, facts)
    if events is not None and (ib_names or mod_names):
        facts["flaps"] = grade_flaps(events, ib_names + mod_names, ctx.profile, f, "IB port", check="ib.hca")
        if not shape:
            shape = "IB link events: " + (", ".join(
                f"{x['interface']} {x['flaps']} flap(s)" for x in facts["flaps"]) or "none")
    if kern is not None and kern.lines:
        said = _kernel_findings(kern, f, facts)
        shape = f"{shape}; {said}" if shape else said
    res = f.result(ctx, shape, facts)
    if res.status is Status.FAIL:
        res.summary = "; ".join(f.summaries(Status.FAIL)) + (f" [{shape}]" if rep is not None else "")
        res.remedy = "drain node; " + res.remedy
    elif res.status is Status.WARN and rep is not None:
        res.summary = f"{shape}; " + "; ".join(f.summaries(Status.WARN))
    return res


CHECK = Check(
    id="ib.hca",
    title="InfiniBand / RoCE HCA ports",
    grade=grade_ib,
    probes=(PROBE,),
    required=("ibstat",),
    inputs=("ibstat", "link-events", "rdma-kernel"),
    profile_keys={"ib.hca_count": int, "ib.rate": (int, float), "ib.link_layer": str, "ib.require_all_ports": bool,
                  "ib.ca_type_rates": dict, "net.link_flaps_fail": int},
    catches="compute HCA ports Down/Polling/Disabled/Init, fewer compute NICs than expected, links below the "
            "expected or the adapter's rate, a reduced active MTU, HCAs at a narrow PCIe width, IB link flaps and "
            "transceiver faults, a crashing ibstat; front-end ports as warnings",
    node_local=True,
    in_run=True,
)
CHECK = register(owns(CHECK))  # a failed openibd/rdma unit is the HCA stack's

__all__ = ["CHECK", "PROBE", "compute_ports", "grade_ib"]
