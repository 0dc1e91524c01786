"""MTU consistency among one node's interfaces, for net.nic (no profile expectation needed).

A jumbo frame is dropped by the first interface on its path whose MTU is smaller, without an
error to the sender when that interface is a bond member, a bridge port or a switch. So on one
node, interfaces that carry the same traffic must agree:
- the members of one bond or team, and the bond itself (FAIL: frames hashed onto the smaller
  member vanish);
- interfaces with addresses in one IPv4 subnet (FAIL: peers on that subnet send frames one of
  them cannot take);
- the ports of one adapter (`ens5f0` / `ens5f1`, systemd's predictable names) that the system
  brought up (WARN: usually cabled to the same fabric; a different network by design is possible);
  an unused port (no link, no address, left at the default MTU) is not compared;
- a bridge or overlay (docker0, br-*, cni0, vxlan, geneve, WireGuard, GRE, IPIP) whose MTU plus
  its encapsulation does not fit its uplink (WARN: container traffic above the uplink's MTU is
  black-holed wherever ICMP "Frag needed" does not make it back).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from preflight import lazyre
from preflight.findings import Findings
from preflight.parsers.ip import Interface
from preflight.profile import Profile

# systemd.net-naming-scheme(7): en|ib + [P<domain>] + (s<slot> | p<bus>s<slot>) + [f<function>] + [n<port>|d<dev>]
_ADAPTER = lazyre.compile(r"^(?P<stem>(?:en|ib)(?:P\d+)?(?:p\d+s\d+|s\d+))(?:f\d+)?(?:n(?:p)?\d+|d\d+)?$")


def adapter_of(name: str) -> str:
    """The adapter part of a predictable interface name (`ens5f1` -> `ens5`, `enp226s0f1np1` ->
    `enp226s0`); "" for names that do not say (eth0, eno1, bond0)."""
    m = _ADAPTER.match(name)
    return m.group("stem") if m else ""


def _listing(ifaces: Iterable[Interface]) -> str:
    return ", ".join(f"{i.name} {i.mtu}" + (f" ({i.master})" if i.master else "") for i in ifaces)


def _bond_mismatch(ifaces: list[Interface], kinds: dict[str, str], f: Findings) -> set[str]:
    """Members of one bond/team (and the bond) with different MTUs; returns the masters reported."""
    by_name = {i.name: i for i in ifaces}
    groups: dict[str, list[Interface]] = {}
    for i in ifaces:
        if i.master and i.mtu is not None and i.slave_kind != "bridge":
            groups.setdefault(i.master, []).append(i)
    reported: set[str] = set()
    for master, members in groups.items():
        bond = by_name.get(master)
        if bond is not None and kinds.get(bond.name, "") == "virtual":
            continue  # a bridge's ports
        shown = members + ([bond] if bond is not None and bond.mtu is not None else [])
        if len({i.mtu for i in shown}) < 2:
            continue
        reported.add(master)
        top = max(i.mtu for i in shown if i.mtu is not None)
        f.add("net.nic/bond-mtu-mismatch", f"{master} members differ in MTU: {_listing(shown)}",
              [i.line for i in shown],
              f"set {master} and every member to one MTU (`ip link set dev {master} mtu {top}` sets the members too) "
              "and persist it; frames hashed onto a smaller member are dropped")
    return reported


def _subnet_mismatch(ifaces: list[Interface], kinds: dict[str, str], f: Findings) -> None:
    """Interfaces with IPv4 addresses in one subnet but different MTUs."""
    nets: dict[ipaddress.IPv4Network, list[Interface]] = {}
    for i in ifaces:
        if not i.up or i.mtu is None or kinds.get(i.name, "") not in ("data", "ipoib"):
            continue
        for a in i.ipv4:
            try:
                net = ipaddress.ip_interface(a).network
            except ValueError:
                continue
            if isinstance(net, ipaddress.IPv4Network) and i not in nets.setdefault(net, []):
                nets[net].append(i)
    for net, members in nets.items():
        if len({i.mtu for i in members}) > 1:
            top = max(i.mtu for i in members if i.mtu is not None)
            f.add("net.nic/subnet-mtu-mismatch", f"interfaces on {net} differ in MTU: {_listing(members)}",
                  [i.line for i in members],
                  f"give every interface on {net} one MTU ({top} for jumbo frames) and persist it; peers send "
                  "frames the smaller one drops")


def _adapter_mismatch(ifaces: list[Interface], kinds: dict[str, str], bonds: set[str], idle: set[str],
                      f: Findings) -> None:
    """Ports of one adapter, brought up by the system and in use, with different MTUs."""
    groups: dict[str, list[Interface]] = {}
    for i in ifaces:
        stem = adapter_of(i.name)
        if (stem and i.admin_up and i.mtu is not None and not i.parent and kinds.get(i.name, "") == "data"
                and i.name not in idle):
            groups.setdefault(stem, []).append(i)
    for stem, ports in groups.items():
        masters = {i.master for i in ports}
        if len({i.mtu for i in ports}) < 2 or (len(masters) == 1 and masters <= bonds):
            continue
        top = max(i.mtu for i in ports if i.mtu is not None)
        low = [i.name for i in ports if i.mtu != top]
        f.add("net.nic/adapter-mtu-mismatch", f"ports of adapter {stem} differ in MTU: {_listing(ports)}",
              [i.line for i in ports],
              f"if {', '.join(low)} carr{'ies' if len(low) == 1 else 'y'} the same fabric as the others, set "
              f"{'it' if len(low) == 1 else 'them'} to MTU {top} (and {'its' if len(low) == 1 else 'their'} bond) "
              "and persist it")


def _overlay_kind(i: Interface, prof: Profile) -> str:
    """A bridge/overlay's kind: linkinfo (`ip -d`, JSON), else the name's conventional prefix."""
    overhead: dict[str, int] = prof.get("net.encap_overhead") or {}
    prefixes: dict[str, str] = prof.get("net.overlay_prefixes") or {}
    hits = sorted((p for p in prefixes if i.name.startswith(p)), key=len)
    kind = i.kind or (prefixes[hits[-1]] if hits else "")
    return kind if kind in overhead else ""


def _overlay_above_uplink(ifaces: list[Interface], prof: Profile, kinds: dict[str, str], f: Findings) -> None:
    """A bridge or overlay whose MTU plus encapsulation exceeds the uplinks' largest MTU."""
    overhead: dict[str, int] = prof.get("net.encap_overhead") or {}
    bridged = {i.master for i in ifaces if i.master and kinds.get(i.name, "") == "data"}  # a bridge over a NIC is the uplink
    uplinks = [i for i in ifaces if i.up and i.mtu and not i.slave
               and (kinds.get(i.name, "") in ("data", "wireless") or i.name in bridged)]
    if not uplinks:
        return
    top = max(i.mtu for i in uplinks if i.mtu is not None)
    names = ", ".join(i.name for i in uplinks if i.mtu == top)
    for i in ifaces:
        if not i.admin_up or i.mtu is None or i.name in bridged or kinds.get(i.name, "") != "virtual":
            continue
        kind = _overlay_kind(i, prof)
        if not kind or i.mtu + int(overhead[kind]) <= top:
            continue
        extra = int(overhead[kind])
        what = f"MTU {i.mtu} + {extra} encapsulation bytes" if extra else f"MTU {i.mtu}"
        f.add("net.nic/virtual-mtu-above-uplink", f"{kind} {i.name}: {what} exceeds the uplink MTU {top} ({names})",
              [i.line, *(u.line for u in uplinks if u.mtu == top)],
              f"set {i.name}'s MTU to {top - extra} (Docker: \"mtu\" in daemon.json / the network's "
              "com.docker.network.driver.mtu; CNI: the plugin's MTU) or raise the uplink's; larger packets are "
              "dropped where ICMP Frag needed does not come back")


def mtu_consistency(ifaces: list[Interface], prof: Profile, f: Findings, kinds: dict[str, str], idle: set[str]
                    ) -> None:
    """Every MTU mismatch among one node's interfaces, as net.nic findings; `kinds`: each
    interface's class (net.nic's `classify`: data, ipoib, virtual, wireless, loopback), `idle`:
    the ports that carry nothing and were never set up (their MTU says nothing)."""
    bonds = _bond_mismatch(ifaces, kinds, f)
    _subnet_mismatch(ifaces, kinds, f)
    _adapter_mismatch(ifaces, kinds, bonds, idle, f)
    _overlay_above_uplink(ifaces, prof, kinds, f)


__all__ = ["adapter_of", "mtu_consistency"]
