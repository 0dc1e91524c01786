"""net.nic: the data-plane NICs, their links and the interfaces NCCL and gloo are told to use.

Facts: interfaces (`ip` / `ifconfig`, `preflight.parsers.ip`), link speeds, RDMA device names and
the job's NCCL/gloo variables (`parsers.sysfs`), `ethtool` links (`parsers.ethtool`) and link
up/down events from system logs (`parsers.netlog`). The grader tells data-plane NICs from virtual
ones (bridges, veths, container and overlay interfaces) and wireless ones with the profile's
patterns, and grades:
- state: a declared or addressed NIC down (FAIL); a port the system brought up without carrier
  (WARN) when it is an InfiniBand (IPoIB) port, an Ethernet port at the MTU of the Ethernet ports
  that carry traffic or at an MTU someone set, or asked for by name (MTUs are compared only
  within one link type); a bond member without link (WARN); an unused port (administratively
  down, or without carrier left at the Ethernet default) is a note;
- MTU: against the profile, and on the node itself (`checks.nic_mtu`): bond members that differ,
  interfaces of one subnet that differ, ports of one adapter that differ, a bridge or overlay
  whose MTU does not fit its uplink;
- addresses: a data NIC without IPv4 next to ones that have it, addresses that failed duplicate
  address detection;
- speed (sysfs, ethtool), Ethernet link flaps, and NCCL_SOCKET_IFNAME / NCCL_IB_HCA /
  GLOO_SOCKET_IFNAME against the interfaces and RDMA devices that exist.
A paste that shows some interfaces on purpose (`ip addr show DEV`, `ip link`, an ethtool grep) is
graded on what it shows. Every finding is a code of `checks/policy.toml`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from preflight.findings import Findings
from preflight.model import Result
from preflight.parsers.ethtool import EthLink, EthtoolFacts
from preflight.parsers.ip import Interface, IpFacts
from preflight.parsers.netlog import LinkEvents
from preflight.parsers.sysfs import Env, IbDevices, Speeds
from preflight.probes import Probe
from preflight.profile import Profile
from preflight.registry import Check, CheckContext, register

from .flaps import grade_flaps, is_ib_name
from .nic_mtu import mtu_consistency

PROBE_IP_ADDR = Probe.of("ip-addr", ["ip", "-j", "-d", "addr"], ["ip", "-d", "addr"], timeout=10)
PROBE_IP_SPEED = Probe.of("ip-speed", ["sh", "-c", "grep -H . /sys/class/net/*/speed"], timeout=10)
PROBE_IB_DEVICES = Probe.of("ib-devices", ["ls", "-1", "/sys/class/infiniband"], timeout=10)
# Only the communication variables leave the node: a full `env` would carry secrets into captures.
PROBE_ENV = Probe.of("env", ["sh", "-c", "env | grep -E '^(NCCL_|TORCH_NCCL_|GLOO_|UCX_|CUDA_VISIBLE_DEVICES=)' || true"],
                     timeout=5)

# link types of tunnels and other interfaces without a device of their own (`link/none`, ...)
_TUNNEL_LINKS = ("none", "void", "ipip", "gre", "sit", "tunnel6", "gre6", "ip6gre")


# ---------------------------------------------------------------------------------------
# Data-plane classification (the patterns come from the profile)


def match_any(name: str, patterns: Sequence[str]) -> bool:
    """`name` matches a glob (`ens*f0`) or starts with a prefix (`docker`) of `patterns`."""
    for p in patterns:
        if any(ch in p for ch in "*?["):
            if fnmatch.fnmatchcase(name, p):
                return True
        elif name == p or name.startswith(p):
            return True
    return False


def classify(iface: Interface, profile: Profile) -> str:
    """'loopback', 'virtual', 'ipoib', 'wireless' or 'data'."""
    if iface.link_type == "loopback" or iface.name == "lo":
        return "loopback"
    if iface.kind and iface.kind in (profile.get("net.virtual_kinds") or []):
        return "virtual"
    if match_any(iface.name, profile.get("net.virtual_prefixes") or []):
        return "virtual"
    if iface.link_type == "infiniband" or iface.kind == "ipoib" or (not iface.link_type and is_ib_name(iface.name)):
        return "ipoib"
    if match_any(iface.name, profile.get("net.wireless_prefixes") or []):
        return "wireless"
    if iface.link_type in _TUNNEL_LINKS and not iface.parentbus:
        return "virtual"
    return "data"


# NCCL-style interface lists: "eth", "=eth0,eth1", "^docker,lo", "mlx5_0:1,mlx5_1:1"


@dataclass
class IfList:
    raw: str
    exclude: bool
    exact: bool
    entries: list[str]  # names (ports stripped)
    ports: dict[str, str] = field(default_factory=dict)

    def matches(self, entry: str, name: str) -> bool:
        return name == entry if self.exact else name.startswith(entry)

    def allowed(self, names: Sequence[str]) -> list[str]:
        if self.exclude:
            return [n for n in names if not any(self.matches(e, n) for e in self.entries)]
        return [n for n in names if any(self.matches(e, n) for e in self.entries)]


def parse_iflist(value: str) -> IfList:
    s = value.strip()
    exclude = s.startswith("^")
    if exclude:
        s = s[1:]
    exact = s.startswith("=")
    if exact:
        s = s[1:]
    entries: list[str] = []
    ports: dict[str, str] = {}
    for part in s.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, port = part.partition(":")
        entries.append(name)
        if port:
            ports[name] = port
    return IfList(raw=value, exclude=exclude, exact=exact, entries=entries, ports=ports)


def data_plane(ifaces: list[Interface], profile: Profile, env: dict[str, str]) -> tuple[list[Interface], str]:
    """The interfaces to grade as data plane and how they were chosen ('profile', 'env', 'auto')."""
    names = [i.name for i in ifaces]
    patterns = list(profile.get("net.interfaces") or [])
    if patterns:
        return [i for i in ifaces if match_any(i.name, patterns) and classify(i, profile) != "loopback"], "profile"
    sock = env.get("NCCL_SOCKET_IFNAME", "").strip()
    if sock and not sock.startswith("^"):  # an include list names the data plane; an exclude list does not
        allowed = set(parse_iflist(sock).allowed(names))
        chosen = [i for i in ifaces if i.name in allowed and classify(i, profile) in ("data", "ipoib")]
        if chosen:
            return chosen, "env"
    return [i for i in ifaces if classify(i, profile) in ("data", "ipoib") and not i.slave], "auto"


def _first_data(ifaces: list[Interface], profile: Profile) -> list[str]:
    return [i.name for i in ifaces if classify(i, profile) == "data" and i.up and i.global_addresses][:2]


# ---------------------------------------------------------------------------------------
# NCCL / gloo variables


_SOCKET_CODES = {"empty": "net.nic/socket-ifname-empty", "no-match": "net.nic/socket-ifname-no-match",
                 "allows-virtual": "net.nic/socket-ifname-allows-virtual", "all-down": "net.nic/socket-ifname-all-down"}
_GLOO_CODES = {"empty": "net.nic/gloo-ifname-empty", "no-match": "net.nic/gloo-ifname-no-match",
               "allows-virtual": "net.nic/gloo-ifname-allows-virtual", "all-down": "net.nic/gloo-ifname-all-down"}


def _grade_iflist_env(var: str, value: str, ifaces: list[Interface], profile: Profile, f: Findings,
                      exact_only: bool = False) -> None:
    """NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME against the interfaces that exist."""
    code = _GLOO_CODES if exact_only else _SOCKET_CODES
    by_name = {i.name: i for i in ifaces}
    lst = parse_iflist(value)
    if exact_only:  # gloo takes plain, exact names
        lst = IfList(raw=value, exclude=False, exact=True, entries=[e.strip() for e in value.split(",") if e.strip()])
    line = f"{var}={value}"
    if not lst.entries:
        f.add(code["empty"], f"{var} is set but empty", [line], f"unset {var} or name the data-plane interface")
        return
    if not lst.exclude:
        for e in lst.entries:
            if not [n for n in by_name if lst.matches(e, n)]:
                known = ", ".join(sorted(by_name))
                f.add(code["no-match"], f"{var} entry '{e}' matches no interface on this node",
                      [line, f"interfaces: {known}"],
                      f"set {var} to this node's data-plane interface (one of: {known}); "
                      "NCCL/gloo will fail to find it or bind another one")
    allowed = lst.allowed(list(by_name))
    bad = [n for n in allowed if classify(by_name[n], profile) in ("loopback", "virtual")]
    if bad:
        f.add(code["allows-virtual"], f"{var}={value} allows {', '.join(bad)} (loopback/container/virtual interfaces)",
              [line] + [by_name[n].line for n in bad],
              f"narrow {var} to the data-plane NICs, e.g. '={','.join(_first_data(ifaces, profile)) or 'eth0'}'")
    usable = [n for n in allowed if by_name[n].up and n not in bad]
    if allowed and not usable and not bad:
        f.add(code["all-down"], f"{var}={value}: every interface it selects is down",
              [line] + [by_name[n].line for n in allowed], "bring the interface up or point the variable at one that is up")


def _grade_ib_hca(value: str, hcas: list[str] | None, f: Findings) -> None:
    line = f"NCCL_IB_HCA={value}"
    lst = parse_iflist(value)
    if hcas is None:
        f.add("net.nic/ib-hca-not-compared", "NCCL_IB_HCA not compared: /sys/class/infiniband was not read", [line])
        return
    if not hcas:
        if not lst.exclude:
            f.add("net.nic/ib-hca-no-rdma-devices", "NCCL_IB_HCA is set but this node has no RDMA devices",
                  [line, "ib devices: none"],
                  "load the RDMA drivers (mlx5_ib) or unset NCCL_IB_HCA; NCCL will fall back to sockets")
        return
    devices = "ib devices: " + " ".join(hcas)
    if lst.exclude:
        if not lst.allowed(hcas):
            f.add("net.nic/ib-hca-excludes-all", f"NCCL_IB_HCA={value} excludes every RDMA device", [line, devices],
                  "remove the ^ exclusion or list the HCAs to use")
        return
    for e in lst.entries:
        hits = [h for h in hcas if lst.matches(e, h)]
        if not hits:
            f.add("net.nic/ib-hca-no-match", f"NCCL_IB_HCA entry '{e}' matches no RDMA device", [line, devices],
                  f"set NCCL_IB_HCA to devices that exist here ({', '.join(hcas)}); NCCL will otherwise use "
                  "other HCAs or fall back to sockets")
        elif not lst.exact and len(hits) > 1 and e in hits:
            f.add("net.nic/ib-hca-prefix-ambiguous",
                  f"NCCL_IB_HCA prefix '{e}' also matches {', '.join(h for h in hits if h != e)}",
                  [line], f"use '={','.join(lst.entries)}' (exact match) so only the intended HCAs are used")


def _grade_env(env: dict[str, str], ip: IpFacts | None, hcas: list[str] | None, prof: Profile, f: Findings) -> None:
    if ip is not None:
        if env.get("NCCL_SOCKET_IFNAME"):
            _grade_iflist_env("NCCL_SOCKET_IFNAME", env["NCCL_SOCKET_IFNAME"], ip.interfaces, prof, f)
        if env.get("GLOO_SOCKET_IFNAME"):
            _grade_iflist_env("GLOO_SOCKET_IFNAME", env["GLOO_SOCKET_IFNAME"], ip.interfaces, prof, f, exact_only=True)
    if env.get("NCCL_IB_HCA"):
        _grade_ib_hca(env["NCCL_IB_HCA"], hcas, f)
    expect_net = str(prof.get("nccl.expect_net"))
    if env.get("NCCL_IB_DISABLE", "").strip() == "1" and expect_net.upper() == "IB":
        f.add("net.nic/ib-disabled-on-ib-profile", "NCCL_IB_DISABLE=1 forces NCCL onto TCP sockets, but the profile "
              "expects IB", ["NCCL_IB_DISABLE=1", f"nccl.expect_net = {expect_net} ({prof.source('nccl.expect_net')})"],
              "unset NCCL_IB_DISABLE in the job environment")


# ---------------------------------------------------------------------------------------
# interfaces


def _presence_findings(ip: IpFacts, prof: Profile, dp: list[Interface], f: Findings) -> None:
    """The profile's data-plane interfaces that are missing; no data-plane NIC at all."""
    ifaces = ip.interfaces
    for p in prof.get("net.interfaces") or []:
        if not any(match_any(i.name, [p]) for i in ifaces):
            f.add("net.nic/declared-nic-missing", f"data-plane interface {p} is missing",
                  [f"no interface matching {p} among the {len(ifaces)} listed",
                   f"interfaces present: {', '.join(i.name for i in ifaces)}",
                   f"net.interfaces = {prof.get('net.interfaces')} ({prof.source('net.interfaces')})"],
                  f"check the NIC/driver for {p} (lspci, dmesg | grep -i mlx5/ice/bnxt); reseat or replace it")
    if not dp and not any(classify(i, prof) in ("data", "ipoib") for i in ifaces):  # bond members are NICs too
        f.add("net.nic/no-data-nic", "no data-plane NIC found (only loopback/virtual/wireless interfaces)",
              [i.line for i in ifaces][:6],
              "check that the NIC drivers are loaded; inside a container, run preflight on the host network")


def _link_findings(i: Interface, prof: Profile, declared: bool, speeds: dict[str, int], f: Findings) -> None:
    """An up interface's MTU and negotiated speed against the profile."""
    want_mtu = int(prof.get("net.mtu") or 0)
    min_speed = int(prof.get("net.min_speed_mbps") or 0)  # pragma: no mutate (0 and 1 Mb/s both grade nothing)
    if want_mtu and i.mtu is not None and classify(i, prof) == "data":
        src = f"net.mtu = {want_mtu} ({prof.source('net.mtu')})"
        if i.mtu < want_mtu:
            f.add("net.nic/declared-mtu-below-profile" if declared else "net.nic/mtu-below-profile",
                  f"{i.name} MTU {i.mtu}, expected {want_mtu}", [i.line, src],
                  f"`ip link set dev {i.name} mtu {want_mtu}` and persist it (netplan/NetworkManager/ifcfg); "
                  "the switch ports must allow it too")
        elif i.mtu > want_mtu:
            f.add("net.nic/mtu-above-profile", f"{i.name} MTU {i.mtu}, above the expected {want_mtu}", [i.line, src],
                  f"set {i.name} to MTU {want_mtu} like its peers; larger frames are dropped by peers at {want_mtu}")
    sp = speeds.get(i.name)
    if min_speed and sp is not None and 0 < sp < min_speed:
        f.add("net.nic/declared-link-slow" if declared else "net.nic/link-slow",
              f"{i.name} links at {sp} Mb/s, expected at least {min_speed}",
              [f"/sys/class/net/{i.name}/speed:{sp}",
               f"net.min_speed_mbps = {min_speed} ({prof.source('net.min_speed_mbps')})"],
              f"the link of {i.name} negotiated a lower speed: check the cable/transceiver and the switch port")


_CABLE = "check the cable/transceiver and the switch port of {name} (`ip link set {name} up`, `ethtool {name}`)"
_IB_CABLE = "check the cable/transceiver and the switch port of {name} (`ibstat`: port State Down, Physical state Polling)"
# the code of an up port without carrier, by its link type (IPoIB: an InfiniBand port)
_NO_CARRIER_CODES = {"data": "net.nic/no-carrier", "ipoib": "net.nic/ib-port-no-carrier"}


def _same_type(i: Interface, ports: list[Interface], prof: Profile) -> list[Interface]:
    """The ports of `i`'s link type (Ethernet or IPoIB): MTUs are compared only within one."""
    kind = classify(i, prof)
    return [p for p in ports if classify(p, prof) == kind]


def _set_up(i: Interface, carrying: list[Interface], prof: Profile) -> bool:
    """A port without carrier that was set up for traffic: an IPoIB port (the system brought an
    InfiniBand port up), or an Ethernet port at the MTU of the Ethernet ports that carry traffic, or
    at an MTU someone set (not the Ethernet default)."""
    if classify(i, prof) == "ipoib":
        return True
    default = int(prof.get("net.default_mtu") or 0)  # pragma: no mutate (the generic profile sets it)
    return any(c.mtu == i.mtu for c in _same_type(i, carrying, prof)) or (bool(default) and i.mtu != default)


def unused(i: Interface, carrying: list[Interface], prof: Profile) -> bool:
    """A port that carries nothing and was never set up: no link, no address, not an up port
    without carrier that `_set_up` says was configured (its MTU says nothing about the fabric)."""
    if i.up or i.global_addresses or not i.state_known:
        return False
    return not (i.no_carrier and _set_up(i, carrying, prof))


def _down_finding(i: Interface, declared: bool, requested: bool, carrying: list[Interface], prof: Profile,
                  f: Findings) -> bool:
    """A data-plane interface without link, graded by what says it should carry traffic; True for
    a port without carrier that is reported with the others of its link type (`_no_carrier`)."""
    state = i.state or "down"
    cable = _CABLE.format(name=i.name)
    if declared:
        f.add("net.nic/declared-nic-down", f"{i.name} is {state}", [i.line], f"{cable}; drain the node until the "
              "link is up")
    elif i.global_addresses:
        f.add("net.nic/addressed-nic-down", f"{i.name} is {state} with address {i.global_addresses[0]}", [i.line],
              f"{cable}; traffic to its network has no path until the link is up")
    elif i.no_carrier and (requested or _set_up(i, carrying, prof)):
        return True  # brought up and configured for traffic, or asked for
    elif requested:
        f.add("net.nic/requested-nic-down", f"{i.name} is administratively down", [i.line],
              f"bring {i.name} up (`ip link set {i.name} up`) and configure it, or leave it out of the data plane")
    else:
        f.add("net.nic/port-unused", f"{i.name} down with no address (unused port?)")
    return False


def _no_carrier(ports: list[Interface], carrying: list[Interface], prof: Profile, f: Findings) -> None:
    """Ports the system brought up that have no carrier, in one finding per link type."""
    for kind, code in _NO_CARRIER_CODES.items():
        group = [i for i in ports if classify(i, prof) == kind]
        if group:
            _no_carrier_group(code, group, _same_type(group[0], carrying, prof), f)


def _no_carrier_group(code: str, ports: list[Interface], carrying: list[Interface], f: Findings) -> None:
    names = ", ".join(i.name for i in ports)
    ib = code.endswith("ib-port-no-carrier")
    noun = "InfiniBand port" if ib else "port"
    what = f"{ports[0].name} is" if len(ports) == 1 else f"{len(ports)} {noun}s are"
    mtus = {i.mtu for i in ports}
    others = [c.name for c in carrying if ib or c.mtu in mtus][:3]
    peers = f" while {', '.join(others)} {'has' if len(others) == 1 else 'have'} one" if others else ""
    lone = " (no InfiniBand link)" if ib else ""
    cable = (_IB_CABLE if ib else _CABLE).format(name=ports[0].name)
    f.add(code, f"{what} up but without carrier ({names}){peers}" if len(ports) > 1
          else f"{what} up but has no carrier{lone}{peers}", [i.line for i in ports],
          (cable if len(ports) == 1 else "check the cable/transceiver and the switch port "
           f"of each (`{'ibstat' if ib else 'ethtool <port>'}`)") + "; if a port is unused, leave it administratively down")


def _member_findings(ifaces: list[Interface], prof: Profile, f: Findings) -> None:
    """Bond/team members without link: the bond runs degraded (a bridge's ports are not graded)."""
    by_name = {i.name: i for i in ifaces}
    for i in ifaces:
        master = by_name.get(i.master)
        if not i.master or i.up or classify(i, prof) not in ("data", "ipoib"):
            continue
        if (master is not None and classify(master, prof) == "virtual") or i.slave_kind == "bridge":
            continue
        f.add("net.nic/bond-member-down", f"{i.name} (member of {i.master}) has no link: {i.master} runs degraded",
              [i.line] + ([master.line] if master else []), _CABLE.format(name=i.name))


def _address_findings(ip: IpFacts, graded: list[Interface], prof: Profile, f: Findings) -> None:
    """An UP data NIC without an IPv4 address next to ones that have one cannot carry IP
    sockets or RoCEv2 with IPv4 GIDs (a bond or NIC whose VLANs carry the addresses is fine)."""
    if not ip.shows_addresses:
        return
    parents = {i.parent for i in ip.interfaces if i.parent}
    eth = [i for i in graded if classify(i, prof) == "data" and i.name not in parents]
    with_v4 = [i for i in eth if i.ipv4]
    if not with_v4:
        return
    for i in eth:
        if not i.ipv4:
            only = "only an IPv6 link-local address" if i.addresses else "no address"
            f.add("net.nic/no-ipv4-address", f"{i.name} is up with {only}, unlike {with_v4[0].name} "
                  f"({with_v4[0].ipv4[0]})", [i.line, with_v4[0].line],
                  f"give {i.name} its IPv4 address (RoCEv2 with IPv4 GIDs and NCCL/gloo sockets need one), or "
                  "leave it out of NCCL_IB_HCA / NCCL_SOCKET_IFNAME")


def _dad_findings(ifaces: list[Interface], prof: Profile, f: Findings) -> None:
    """IPv6 duplicate address detection: a failed address is not used by the kernel."""
    for i in ifaces:
        if classify(i, prof) in ("loopback", "virtual"):
            continue
        for a in i.flagged("dadfailed"):
            if a in i.global_addresses:
                f.add("net.nic/address-dadfailed", f"{i.name}: address {a} failed duplicate address detection",
                      [i.addr_lines.get(a, ""), i.line],
                      f"another host answers for {a}: find it (`ndisc6`/switch tables) and give one of "
                      "them another address; the kernel does not use this one")
            else:
                f.add("net.nic/link-local-dadfailed", f"{i.name}: link-local {a} failed duplicate address detection",
                      [i.addr_lines.get(a, ""), i.line],
                      f"another port on the segment has the same MAC-derived address as {i.name} (a "
                      "duplicate MAC: cloned VM, misconfigured bond); fix the MAC")
        for a in i.flagged("tentative"):
            if a not in i.flagged("dadfailed"):
                f.add("net.nic/address-tentative", f"{i.name}: {a} is tentative (duplicate address detection "
                      "running)")
        for a in i.flagged("deprecated"):
            f.add("net.nic/address-deprecated", f"{i.name}: {a} is deprecated (its preferred lifetime ended)")


def _grade_interfaces(ip: IpFacts, prof: Profile, env: dict[str, str], speeds: dict[str, int], f: Findings
                      ) -> tuple[list[Interface], list[Interface], str]:
    dp, how = data_plane(ip.interfaces, prof, env)
    declared = how in ("profile", "env")
    if not ip.requested:
        _presence_findings(ip, prof, dp, f)
    carrying = [i for i in dp if i.up]
    mtu_consistency(ip.interfaces, prof, f, {i.name: classify(i, prof) for i in ip.interfaces},
                    {i.name for i in ip.interfaces if unused(i, carrying, prof)})
    graded: list[Interface] = []
    unplugged: list[Interface] = []
    for i in dp:
        if i.up or not i.state_known:  # a listing of addresses alone (`ip -o addr`) shows no link state
            graded.append(i)
            _link_findings(i, prof, declared, speeds, f)
        elif _down_finding(i, declared, i.name in ip.requested, carrying, prof, f):
            unplugged.append(i)
    _no_carrier(unplugged, carrying, prof, f)
    _member_findings(ip.interfaces, prof, f)
    _address_findings(ip, graded, prof, f)
    _dad_findings(ip.interfaces, prof, f)
    return dp, graded, how


# ---------------------------------------------------------------------------------------
# ethtool and the result


def _ethtool_link(link: EthLink, prof: Profile, strict: bool, f: Findings) -> None:
    min_speed = int(prof.get("net.min_speed_mbps") or 0)  # pragma: no mutate (0 and 1 Mb/s both grade nothing)
    if link.link_detected is False:
        f.add("net.nic/declared-no-link" if strict else "net.nic/ethtool-no-link", f"{link.name}: no link detected",
              link.lines, f"check the cable/transceiver and the switch port of {link.name}", proof="Link detected")
    if min_speed and link.speed_mbps and link.speed_mbps < min_speed:
        f.add("net.nic/declared-link-slow" if strict else "net.nic/link-slow",
              f"{link.name} links at {link.speed_mbps} Mb/s, expected at least {min_speed}",
              [*link.lines, f"net.min_speed_mbps = {min_speed} ({prof.source('net.min_speed_mbps')})"],
              f"the link of {link.name} negotiated a lower speed: check the cable/transceiver and the switch port",
              proof="Speed:")
    if link.duplex.lower() == "half":
        f.add("net.nic/half-duplex", f"{link.name} runs half duplex", link.lines, "fix auto-negotiation on both ends",
              proof="Duplex:")


def _grade_ethtool(eth: EthtoolFacts, prof: Profile, f: Findings) -> list[dict[str, Any]]:
    declared = list(prof.get("net.interfaces") or [])
    out = []
    for link in eth.links:
        out.append({"interface": link.name, "speed_mbps": link.speed_mbps, "duplex": link.duplex, "lanes": link.lanes,
                    "link_detected": link.link_detected})
        _ethtool_link(link, prof, match_any(link.name, declared) if declared else False, f)
    return out


def _speed_text(mbps: int | None) -> str:
    if not mbps:
        return "speed not shown"
    return f"{mbps // 1000}Gb/s" if mbps >= 1000 else f"{mbps}Mb/s"


def _ok_summary(graded: list[Interface], links: list[dict[str, Any]], flaps: list[dict[str, Any]]) -> tuple[str, list[str]]:
    parts: list[str] = []
    ev: list[str] = []
    if graded:
        what = "up" if all(i.state_known for i in graded) else "listed (link state not shown)"
        parts.append(f"{len(graded)} data-plane NIC(s) {what}: "
                     + ", ".join(f"{i.name} (mtu {i.mtu})" if i.mtu else i.name for i in graded))
        ev.extend(i.line for i in graded)
    for link in links:
        state = {True: "link up", False: "no link", None: "link state not shown"}[link["link_detected"]]
        parts.append(f"{link['interface']}: {_speed_text(link['speed_mbps'])}"
                     + (f", {link['lanes']} lanes" if link["lanes"] else "")
                     + (f", {link['duplex']}" if link["duplex"] else "") + f", {state}")
    if flaps:
        parts.append("no link flaps: " + ", ".join(x["interface"] for x in flaps))
    return "; ".join(parts) or "data-plane NICs up", ev


def _interface_facts(ip: IpFacts, prof: Profile, speeds: dict[str, int]) -> list[dict[str, Any]]:
    return [{"name": i.name, "mtu": i.mtu, "state": i.state, "up": i.up, "class": classify(i, prof), "kind": i.kind,
             "link_type": i.link_type, "addresses": i.addresses, "master": i.master, "speed_mbps": speeds.get(i.name)}
            for i in ip.interfaces]


def _hcas(ctx: CheckContext) -> list[str] | None:
    """The RDMA devices of /sys/class/infiniband; [] when the listing failed; None when not read."""
    ibrun = ctx.input("ib-devices")
    if ibrun is None:
        return None
    ibdev = ctx.facts("ib-devices")
    return ibdev.names if ibrun.rc == 0 and isinstance(ibdev, IbDevices) and ibdev.listed else []


def grade_nic(ctx: CheckContext) -> Result:
    ip: IpFacts | None = ctx.facts("ip-addr")
    eth: EthtoolFacts | None = ctx.facts("ethtool")
    events: LinkEvents | None = ctx.facts("link-events")
    eth_flap_names = [n for n in events.interfaces() if not is_ib_name(n)] if events else []
    if ip is None and eth is None and not eth_flap_names:
        return ctx.finding("net.nic/no-input", "no interface list (ip addr), ethtool output or Ethernet link events: "
                           "NICs and NCCL interface variables not graded",
                           remedy="capture `ip -j -d addr` on the node alongside the environment")
    if ip is not None and not ip.interfaces:
        shown = ip.problems or ["(empty output)"]
        if ctx.options.mode == "analyze":
            return ctx.finding("net.nic/not-recognised", "not recognised: an interface listing (`N: name: <FLAGS> "
                               "mtu M ...`, `ip -j` JSON or ifconfig blocks)", evidence=shown,
                               remedy="paste the whole `ip addr` output")
        return ctx.finding("net.nic/unparsable", "ip addr output could not be parsed (empty or garbage)", evidence=shown,
                           remedy="run `ip -j -d addr` by hand; iproute2 may be broken or too old for -j")
    prof = ctx.profile
    envf: Env | None = ctx.facts("env")
    env = envf.vars if envf else {}
    speedf: Speeds | None = ctx.facts("ip-speed")
    speeds = speedf.mbps if speedf else {}
    hcas = _hcas(ctx)
    f = Findings()
    facts: dict[str, Any] = {"env": env, "ib_devices": hcas}
    graded: list[Interface] = []
    if ip is not None:
        dp, graded, how = _grade_interfaces(ip, prof, env, speeds, f)
        facts.update(interfaces=_interface_facts(ip, prof, speeds), data_plane=[i.name for i in dp],
                     data_plane_from=how, shown=ip.requested or "all")
    _grade_env(env, ip, hcas, prof, f)
    links = _grade_ethtool(eth, prof, f) if eth is not None else []
    flaps = grade_flaps(events, eth_flap_names, prof, f, "link") if events is not None else []
    facts.update(links=links, flaps=flaps)
    ok, ok_ev = _ok_summary(graded, links, flaps)
    return f.result(ctx, ok, facts, ok_evidence=ok_ev)


register(Check(
    id="net.nic",
    title="Data-plane NICs",
    grade=grade_nic,
    probes=(PROBE_IP_ADDR, PROBE_IP_SPEED, PROBE_IB_DEVICES, PROBE_ENV),
    required=("ip-addr",),
    inputs=("ip-addr", "ip-speed", "env", "ethtool", "link-events"),
    profile_keys={"net.mtu": int, "net.default_mtu": int, "net.min_speed_mbps": int, "net.interfaces": list, "net.virtual_prefixes": list,
                  "net.virtual_kinds": list, "net.wireless_prefixes": list, "net.encap_overhead": dict,
                  "net.overlay_prefixes": dict, "nccl.expect_net": str, "net.link_flaps_fail": int},
    catches="data-plane NIC missing/down or without carrier, no IPv4 where its peers have one, wrong MTU or speed, "
            "MTU mismatches (bond members, one subnet, one adapter, a bridge/overlay above its uplink), duplicate "
            "addresses, Ethernet link flaps, NCCL_SOCKET_IFNAME/NCCL_IB_HCA/GLOO_SOCKET_IFNAME naming no interface "
            "or allowing lo/docker0",
))

__all__ = ["IfList", "classify", "data_plane", "grade_nic", "match_any", "parse_iflist", "unused"]
