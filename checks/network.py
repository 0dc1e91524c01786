"""net.nic: the data-plane NICs, their links and the interfaces NCCL and gloo are told to use.

Facts: interfaces (`ip` / `ifconfig`, `preflight.parsers.ip`), link speeds, RDMA device names and
the job's NCCL/gloo variables (`parsers.sysfs`), `ethtool` links (`parsers.ethtool`) and link
up/down events from system logs (`parsers.netlog`). The grader tells data-plane NICs from virtual
ones (bridges, veths, container and overlay interfaces) with the profile's patterns, grades their
state, MTU, addresses and speed, Ethernet link flaps, and checks that NCCL_SOCKET_IFNAME /
NCCL_IB_HCA / GLOO_SOCKET_IFNAME name interfaces that exist. A paste that shows some interfaces
on purpose (`ip addr show DEV`, `ip link`, an ethtool grep) is graded on what it shows.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from preflight.findings import Findings
from preflight.model import Result, Status
from preflight.parsers.ethtool import EthtoolFacts
from preflight.parsers.ip import Interface, IpFacts
from preflight.parsers.netlog import LinkEvents
from preflight.parsers.sysfs import Env, IbDevices, Speeds
from preflight.probes import Probe
from preflight.profile import Profile
from preflight.registry import Check, CheckContext, register

from .flaps import grade_flaps, is_ib_name

PROBE_IP_ADDR = Probe.of("ip-addr", ["ip", "-j", "-d", "addr"], ["ip", "-d", "addr"], timeout=10)
PROBE_IP_SPEED = Probe.of("ip-speed", ["sh", "-c", "grep -H . /sys/class/net/*/speed"], timeout=10)
PROBE_IB_DEVICES = Probe.of("ib-devices", ["ls", "-1", "/sys/class/infiniband"], timeout=10)
# Only the communication variables leave the node: a full `env` would carry secrets into captures.
PROBE_ENV = Probe.of("env", ["sh", "-c", "env | grep -E '^(NCCL_|TORCH_NCCL_|GLOO_|UCX_|CUDA_VISIBLE_DEVICES=)' || true"],
                     timeout=5)


# ---------------------------------------------------------------------------------------
# Data-plane classification (the patterns come from the profile)


def _match_any(name: str, patterns: Sequence[str]) -> bool:
    for p in patterns:
        if any(ch in p for ch in "*?["):
            if fnmatch.fnmatchcase(name, p):
                return True
        elif name == p or name.startswith(p):
            return True
    return False


def classify(iface: Interface, profile: Profile) -> str:
    """'loopback', 'virtual', 'ipoib' or 'data'."""
    if iface.link_type == "loopback" or iface.name == "lo":
        return "loopback"
    if iface.kind and iface.kind in (profile.get("net.virtual_kinds") or []):
        return "virtual"
    if _match_any(iface.name, profile.get("net.virtual_prefixes") or []):
        return "virtual"
    if iface.link_type == "infiniband" or iface.kind == "ipoib":
        return "ipoib"
    if iface.link_type in ("none", "void", "ipip", "gre", "sit") and not iface.parentbus:
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
        return [i for i in ifaces if _match_any(i.name, patterns) and classify(i, profile) != "loopback"], "profile"
    sock = env.get("NCCL_SOCKET_IFNAME", "").strip()
    if sock and not sock.startswith("^"):  # an include list names the data plane; an exclude list does not
        allowed = set(parse_iflist(sock).allowed(names))
        chosen = [i for i in ifaces if i.name in allowed and classify(i, profile) in ("data", "ipoib")]
        if chosen:
            return chosen, "env"
    return [i for i in ifaces if classify(i, profile) in ("data", "ipoib") and not i.slave], "auto"


def _first_data(ifaces: list[Interface], profile: Profile) -> list[str]:
    return [i.name for i in ifaces if classify(i, profile) == "data" and i.up and i.global_addresses][:2]


def _grade_iflist_env(var: str, value: str, ifaces: list[Interface], profile: Profile, f: Findings,
                      exact_only: bool = False) -> None:
    """NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME against the interfaces that exist."""
    by_name = {i.name: i for i in ifaces}
    lst = parse_iflist(value)
    if exact_only:  # gloo takes plain, exact names
        lst = IfList(raw=value, exclude=False, exact=True, entries=[e.strip() for e in value.split(",") if e.strip()])
    line = f"{var}={value}"
    if not lst.entries:
        f.add(Status.WARN, f"{var} is set but empty", [line], f"unset {var} or name the data-plane interface")
        return
    if not lst.exclude:
        for e in lst.entries:
            if not [n for n in by_name if lst.matches(e, n)]:
                known = ", ".join(sorted(by_name)) or "none"
                f.add(Status.FAIL, f"{var} entry '{e}' matches no interface on this node",
                      [line, f"interfaces: {known}"],
                      f"set {var} to this node's data-plane interface (one of: {known}); "
                      "NCCL/gloo will fail to find it or bind another one")
    allowed = lst.allowed(list(by_name))
    bad = [n for n in allowed if classify(by_name[n], profile) in ("loopback", "virtual")]
    if bad:
        f.add(Status.WARN, f"{var}={value} allows {', '.join(bad)} (loopback/container/virtual interfaces)",
              [line] + [by_name[n].line for n in bad],
              f"narrow {var} to the data-plane NICs, e.g. '={','.join(_first_data(ifaces, profile)) or 'eth0'}'")
    usable = [n for n in allowed if by_name[n].up and n not in bad]
    if allowed and not usable and not bad:
        f.add(Status.FAIL, f"{var}={value}: every interface it selects is down",
              [line] + [by_name[n].line for n in allowed], "bring the interface up or point the variable at one that is up")


def _grade_ib_hca(value: str, hcas: list[str] | None, f: Findings) -> None:
    line = f"NCCL_IB_HCA={value}"
    lst = parse_iflist(value)
    if hcas is None:
        f.add(Status.PASS, "NCCL_IB_HCA not compared: /sys/class/infiniband was not read", [line])
        return
    if not hcas:
        if not lst.exclude:
            f.add(Status.FAIL, "NCCL_IB_HCA is set but this node has no RDMA devices", [line, "ib devices: none"],
                  "load the RDMA drivers (mlx5_ib) or unset NCCL_IB_HCA; NCCL will fall back to sockets")
        return
    if lst.exclude:
        if not lst.allowed(hcas):
            f.add(Status.FAIL, f"NCCL_IB_HCA={value} excludes every RDMA device", [line, "ib devices: " + " ".join(hcas)],
                  "remove the ^ exclusion or list the HCAs to use")
        return
    for e in lst.entries:
        hits = [h for h in hcas if lst.matches(e, h)]
        if not hits:
            f.add(Status.FAIL, f"NCCL_IB_HCA entry '{e}' matches no RDMA device", [line, "ib devices: " + " ".join(hcas)],
                  f"set NCCL_IB_HCA to devices that exist here ({', '.join(hcas)}); NCCL will otherwise use "
                  "other HCAs or fall back to sockets")
        elif not lst.exact and len(hits) > 1 and e in hits:
            f.add(Status.WARN, f"NCCL_IB_HCA prefix '{e}' also matches {', '.join(h for h in hits if h != e)}",
                  [line], f"use '={','.join(lst.entries)}' (exact match) so only the intended HCAs are used")


# ---------------------------------------------------------------------------------------
# net.nic


def _presence_findings(ip: IpFacts, prof: Profile, dp: list[Interface], f: Findings) -> None:
    """The profile's data-plane interfaces that are missing; no data-plane NIC at all."""
    ifaces = ip.interfaces
    for p in prof.get("net.interfaces") or []:
        if not any(_match_any(i.name, [p]) for i in ifaces):
            f.add(Status.FAIL, f"data-plane interface {p} is missing",
                  [f"interfaces present: {', '.join(i.name for i in ifaces)}",
                   f"net.interfaces = {prof.get('net.interfaces')} ({prof.source('net.interfaces')})"],
                  f"check the NIC/driver for {p} (lspci, dmesg | grep -i mlx5/ice/bnxt); reseat or replace it")
    if not dp:
        f.add(Status.WARN, "no data-plane NIC found (only loopback/virtual interfaces)", [i.line for i in ifaces][:6],
              "check that the NIC drivers are loaded; inside a container, run preflight on the host network")


def _link_findings(i: Interface, prof: Profile, sev: Status, speeds: dict[str, int], f: Findings) -> None:
    """An up interface's MTU and negotiated speed against the profile."""
    want_mtu = int(prof.get("net.mtu") or 0)
    min_speed = int(prof.get("net.min_speed_mbps") or 0)
    if want_mtu and i.mtu is not None and classify(i, prof) == "data":
        src = f"net.mtu = {want_mtu} ({prof.source('net.mtu')})"
        if i.mtu < want_mtu:
            f.add(sev, f"{i.name} MTU {i.mtu}, expected {want_mtu}", [i.line, src],
                  f"`ip link set dev {i.name} mtu {want_mtu}` and persist it (netplan/NetworkManager/ifcfg); "
                  "the switch ports must allow it too")
        elif i.mtu > want_mtu:
            f.add(Status.WARN, f"{i.name} MTU {i.mtu}, above the expected {want_mtu}", [i.line, src],
                  f"set {i.name} to MTU {want_mtu} like its peers; larger frames are dropped by peers at {want_mtu}")
    sp = speeds.get(i.name)
    if min_speed and sp is not None and 0 < sp < min_speed:
        f.add(sev, f"{i.name} links at {sp} Mb/s, expected at least {min_speed}",
              [f"/sys/class/net/{i.name}/speed:{sp}",
               f"net.min_speed_mbps = {min_speed} ({prof.source('net.min_speed_mbps')})"],
              f"the link of {i.name} negotiated a lower speed: check the cable/transceiver and the switch port")


def _address_findings(ip: IpFacts, graded: list[Interface], prof: Profile, f: Findings) -> None:
    """An UP data NIC without an IPv4 address next to ones that have one cannot carry IP
    sockets or RoCEv2 with IPv4 GIDs."""
    if not ip.shows_addresses:
        return
    eth = [i for i in graded if classify(i, prof) == "data"]
    with_v4 = [i for i in eth if i.ipv4]
    for i in eth:
        if with_v4 and not i.ipv4 and i not in with_v4:
            only = "only an IPv6 link-local address" if i.addresses else "no address"
            f.add(Status.WARN, f"{i.name} is up with {only}, unlike {with_v4[0].name} ({with_v4[0].ipv4[0]})",
                  [i.line, with_v4[0].line],
                  f"give {i.name} its IPv4 address (RoCEv2 with IPv4 GIDs and NCCL/gloo sockets need one), or "
                  "leave it out of NCCL_IB_HCA / NCCL_SOCKET_IFNAME")


def _grade_interfaces(ip: IpFacts, prof: Profile, env: dict[str, str], speeds: dict[str, int], f: Findings
                      ) -> tuple[list[Interface], list[Interface], str]:
    dp, how = data_plane(ip.interfaces, prof, env)
    strict = how in ("profile", "env")
    sev = Status.FAIL if strict else Status.WARN
    shown_on_purpose = bool(ip.requested)
    if not shown_on_purpose:
        _presence_findings(ip, prof, dp, f)
    graded: list[Interface] = []
    for i in dp:
        if i.up:
            graded.append(i)
            _link_findings(i, prof, sev, speeds, f)
        elif strict or i.global_addresses or shown_on_purpose:
            f.add(Status.FAIL, f"{i.name} is {i.state or 'down'}", [i.line],
                  f"check the cable/switch port of {i.name} (`ip link set {i.name} up`, ethtool {i.name}); "
                  "drain the node until the link is up")
        else:
            f.add(Status.PASS, f"{i.name} down with no address (unused port?)")
    _address_findings(ip, graded, prof, f)
    return dp, graded, how


def _grade_ethtool(eth: EthtoolFacts, prof: Profile, f: Findings) -> list[dict[str, Any]]:
    min_speed = int(prof.get("net.min_speed_mbps") or 0)
    declared = list(prof.get("net.interfaces") or [])
    out = []
    for link in eth.links:
        out.append({"interface": link.name, "speed_mbps": link.speed_mbps, "duplex": link.duplex, "lanes": link.lanes,
                    "link_detected": link.link_detected})
        strict = _match_any(link.name, declared) if declared else False
        if link.link_detected is False:
            f.add(Status.FAIL if strict else Status.WARN, f"{link.name}: no link detected", link.lines,
                  f"check the cable/transceiver and the switch port of {link.name}")
        if min_speed and link.speed_mbps and link.speed_mbps < min_speed:
            f.add(Status.FAIL if strict else Status.WARN,
                  f"{link.name} links at {link.speed_mbps} Mb/s, expected at least {min_speed}",
                  [*link.lines, f"net.min_speed_mbps = {min_speed} ({prof.source('net.min_speed_mbps')})"],
                  f"the link of {link.name} negotiated a lower speed: check the cable/transceiver and the switch port")
        if link.duplex.lower() == "half":
            f.add(Status.WARN, f"{link.name} runs half duplex", link.lines, "fix auto-negotiation on both ends")
    return out


def _ok_summary(graded: list[Interface], links: list[dict[str, Any]], flaps: list[dict[str, Any]]) -> tuple[str, list[str]]:
    parts: list[str] = []
    ev: list[str] = []
    if graded:
        parts.append(f"{len(graded)} data-plane NIC(s) up: " + ", ".join(f"{i.name} (mtu {i.mtu})" for i in graded))
        ev.extend(i.line for i in graded)
    for link in links:
        speed = f"{link['speed_mbps'] // 1000 if link['speed_mbps'] >= 1000 else link['speed_mbps']}" \
                f"{'G' if link['speed_mbps'] >= 1000 else 'M'}b/s" if link["speed_mbps"] else "speed not shown"
        state = {True: "link up", False: "no link", None: "link state not shown"}[link["link_detected"]]
        parts.append(f"{link['interface']}: {speed}" + (f", {link['lanes']} lanes" if link["lanes"] else "")
                     + (f", {link['duplex']}" if link["duplex"] else "") + f", {state}")
    if flaps:
        parts.append("no link flaps: " + ", ".join(x["interface"] for x in flaps))
    return "; ".join(parts) or "data-plane NICs up", ev


def grade_nic(ctx: CheckContext) -> Result:
    ip: IpFacts | None = ctx.facts("ip-addr")
    eth: EthtoolFacts | None = ctx.facts("ethtool")
    events: LinkEvents | None = ctx.facts("link-events")
    eth_flap_names = [n for n in events.interfaces() if not is_ib_name(n)] if events else []
    if ip is None and eth is None and not eth_flap_names:
        return ctx.result(Status.SKIP, "no interface list (ip addr), ethtool output or Ethernet link events: "
                                       "NICs and NCCL interface variables not graded",
                          remedy="capture `ip -j -d addr` on the node alongside the environment")
    prof = ctx.profile
    envf: Env | None = ctx.facts("env")
    env = envf.vars if envf else {}
    speedf: Speeds | None = ctx.facts("ip-speed")
    speeds = speedf.mbps if speedf else {}
    ibrun, ibdev = ctx.input("ib-devices"), ctx.facts("ib-devices")
    hcas: list[str] | None = None
    if ibrun is not None and isinstance(ibdev, IbDevices):
        hcas = ibdev.names if ibrun.rc == 0 and ibdev.listed else []
    f = Findings()
    facts: dict[str, Any] = {"env": env, "ib_devices": hcas}
    graded: list[Interface] = []
    if ip is not None:
        if not ip.interfaces:
            return ctx.result(Status.ERROR, "ip addr output could not be parsed (empty or garbage)",
                              evidence=ip.problems or ["(empty output)"],
                              remedy="run `ip -j -d addr` by hand; iproute2 may be broken or too old for -j")
        dp, graded, how = _grade_interfaces(ip, prof, env, speeds, f)
        ifaces = ip.interfaces
        for var in ("NCCL_SOCKET_IFNAME",):
            if env.get(var):
                _grade_iflist_env(var, env[var], ifaces, prof, f)
        if env.get("GLOO_SOCKET_IFNAME"):
            _grade_iflist_env("GLOO_SOCKET_IFNAME", env["GLOO_SOCKET_IFNAME"], ifaces, prof, f, exact_only=True)
        facts.update(interfaces=[
            {"name": i.name, "mtu": i.mtu, "state": i.state, "up": i.up, "class": classify(i, prof), "kind": i.kind,
             "link_type": i.link_type, "addresses": i.addresses, "master": i.master, "speed_mbps": speeds.get(i.name)}
            for i in ifaces], data_plane=[i.name for i in dp], data_plane_from=how, shown=ip.requested or "all")
    if env.get("NCCL_IB_HCA"):
        _grade_ib_hca(env["NCCL_IB_HCA"], hcas, f)
    expect_net = str(prof.get("nccl.expect_net") or "any")
    if env.get("NCCL_IB_DISABLE", "").strip() == "1" and expect_net.upper() == "IB":
        f.add(Status.FAIL, "NCCL_IB_DISABLE=1 forces NCCL onto TCP sockets, but the profile expects IB",
              ["NCCL_IB_DISABLE=1", f"nccl.expect_net = {expect_net} ({prof.source('nccl.expect_net')})"],
              "unset NCCL_IB_DISABLE in the job environment")
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
    profile_keys={"net.mtu": int, "net.min_speed_mbps": int, "net.interfaces": list, "net.virtual_prefixes": list,
                  "net.virtual_kinds": list, "nccl.expect_net": str, "net.link_flaps_fail": int},
    catches="data-plane NIC missing/down, no IPv4 where its peers have one, wrong MTU or speed, Ethernet link "
            "flaps, NCCL_SOCKET_IFNAME/NCCL_IB_HCA/GLOO_SOCKET_IFNAME naming no interface or allowing lo/docker0",
))

__all__ = ["IfList", "classify", "data_plane", "grade_nic", "parse_iflist"]
