"""Network checks: data-plane NICs (`net.nic`) and the MTU path to peers (`net.mtu`).

net.nic reads `ip -j -d addr` (or the text `ip addr` layout in analyze), the link speeds
from /sys/class/net/*/speed, the RDMA device names from /sys/class/infiniband and the
NCCL / gloo environment variables. It tells data-plane NICs from virtual ones (bridges,
veths, container and overlay interfaces), grades their state, MTU and speed, and checks
that NCCL_SOCKET_IFNAME / NCCL_IB_HCA / GLOO_SOCKET_IFNAME name interfaces that exist.

net.mtu pings every peer twice with the Don't-Fragment bit set: once at the jumbo size
(profile MTU minus the IP and ICMP headers) and once at a small size. The pair tells a
local MTU that is too small, a hop that answers "Frag needed", a silent black hole (small
pings pass, jumbo ones vanish) and a peer that is simply down.

Parsers are pure (text -> facts); graders read facts and the profile only.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from preflight.model import Capture, CaptureState, Result, Status
from preflight.probes import Probe
from preflight.profile import Profile
from preflight.registry import Check, CheckContext, Format, PlanContext, register, register_format

# ---------------------------------------------------------------------------------------
# Probes (static argv; nothing here is built from node or user input)

PROBE_IP_ADDR = Probe.of("ip-addr", ["ip", "-j", "-d", "addr"], ["ip", "-d", "addr"], timeout=10)
PROBE_IP_SPEED = Probe.of("ip-speed", ["sh", "-c", "grep -H . /sys/class/net/*/speed"], timeout=10)
PROBE_IB_DEVICES = Probe.of("ib-devices", ["ls", "-1", "/sys/class/infiniband"], timeout=10)
# Only the communication variables leave the node: a full `env` would carry secrets into captures.
PROBE_ENV = Probe.of("env", ["sh", "-c", "env | grep -E '^(NCCL_|TORCH_NCCL_|GLOO_|UCX_|CUDA_VISIBLE_DEVICES=)' || true"],
                     timeout=5)

# Environment variables that steer NCCL and gloo onto interfaces (the only ones kept).
_ENV_KEEP = re.compile(r"^(NCCL_\w*|TORCH_NCCL_\w*|GLOO_SOCKET_IFNAME|GLOO_DEVICE_TRANSPORT|UCX_NET_DEVICES)$")

# IPv4 (20) + ICMP (8) headers; IPv6 (40) + ICMPv6 (8): protocol constants, not thresholds.
IPV4_ICMP_HEADERS = 28
IPV6_ICMP_HEADERS = 48


# ---------------------------------------------------------------------------------------
# Interfaces


@dataclass
class Interface:
    name: str
    mtu: int | None = None
    state: str = ""  # operstate as ip prints it: UP, DOWN, UNKNOWN, LOWERLAYERDOWN, ...
    flags: list[str] = field(default_factory=list)
    link_type: str = ""  # ether, loopback, infiniband, none, ...
    kind: str = ""  # linkinfo kind: veth, bridge, bond, vlan, tun, ...
    master: str = ""
    addresses: list[str] = field(default_factory=list)
    parentbus: str = ""
    line: str = ""  # a one-line rendering used as evidence

    @property
    def up(self) -> bool:
        if self.state == "UP":
            return True
        # lo, tun and some IPoIB/virtual drivers report UNKNOWN while carrying traffic
        return self.state == "UNKNOWN" and "UP" in self.flags and "LOWER_UP" in self.flags

    @property
    def global_addresses(self) -> list[str]:
        out = []
        for a in self.addresses:
            ip = a.split("/")[0]
            try:
                addr = ipaddress.ip_address(ip)
            except ValueError:
                continue
            if not (addr.is_loopback or addr.is_link_local):
                out.append(a)
        return out


def _render(i: Interface) -> str:
    flags = ",".join(i.flags)
    addrs = " ".join(i.addresses)
    extra = f" kind {i.kind}" if i.kind else ""
    master = f" master {i.master}" if i.master else ""
    return f"{i.name}: <{flags}> mtu {i.mtu} state {i.state or '?'}{master}{extra} {addrs}".rstrip()


def parse_ip_json(text: str) -> list[Interface] | None:
    """`ip -j [-d] addr` -> interfaces; None when the text is not that JSON."""
    start = text.find("[")
    if start < 0:
        return None
    try:
        data = json.loads(text[start:].strip())
    except (ValueError, RecursionError):
        # tolerate trailing noise after the JSON array
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
            name=str(item["ifname"]),
            mtu=int(mtu) if isinstance(mtu, int) else None,
            state=str(item.get("operstate", "")),
            flags=[str(f) for f in item.get("flags", []) if isinstance(f, str)],
            link_type=str(item.get("link_type", "")),
            kind=str(linkinfo.get("info_kind", "")),
            master=str(item.get("master", "")),
            parentbus=str(item.get("parentbus", "")),
        )
        for a in item.get("addr_info", []) or []:
            if isinstance(a, dict) and a.get("local"):
                iface.addresses.append(f"{a['local']}/{a.get('prefixlen', '')}".rstrip("/"))
        iface.line = _render(iface)
        out.append(iface)
    return out


_TEXT_HEAD = re.compile(r"^\d+:\s+([^:@\s]+)(?:@\S+)?:\s+<([^>]*)>\s*(.*)$")
_TEXT_KINDS = ("veth", "bridge", "bridge_slave", "bond", "bond_slave", "vlan", "tun", "tap", "dummy", "ifb",
               "vxlan", "geneve", "macvlan", "ipvlan", "wireguard", "ipoib", "team")


def parse_ip_text(text: str) -> list[Interface]:
    """The text layout of `ip [-d] addr` -> interfaces."""
    out: list[Interface] = []
    cur: Interface | None = None
    for raw in text.splitlines():
        m = _TEXT_HEAD.match(raw.strip()) if raw[:1].isdigit() else None
        if m:
            cur = Interface(name=m.group(1), flags=[f for f in m.group(2).split(",") if f], line=raw.strip())
            rest = m.group(3)
            mm = re.search(r"\bmtu (\d+)", rest)
            cur.mtu = int(mm.group(1)) if mm else None
            ms = re.search(r"\bstate (\S+)", rest)
            cur.state = ms.group(1) if ms else ""
            mb = re.search(r"\bmaster (\S+)", rest)
            cur.master = mb.group(1) if mb else ""
            out.append(cur)
            continue
        if cur is None:
            continue
        s = raw.strip()
        if s.startswith("link/"):
            cur.link_type = s.split()[0][len("link/"):]
            mp = re.search(r"\bparentbus (\S+)", s)
            if mp:
                cur.parentbus = mp.group(1)
        elif s.startswith(("inet ", "inet6 ")):
            parts = s.split()
            if len(parts) > 1:
                cur.addresses.append(parts[1])
        else:
            first = s.split()[0] if s else ""
            if first in _TEXT_KINDS and not cur.kind:
                cur.kind = first
            mp = re.search(r"\bparentbus (\S+)", s)
            if mp:
                cur.parentbus = mp.group(1)
    return out


def parse_interfaces(text: str) -> list[Interface]:
    """JSON first, then the text layout; garbage gives an empty list."""
    parsed = parse_ip_json(text)
    if parsed is not None:
        return parsed
    return parse_ip_text(text)


_SPEED = re.compile(r"^/sys/class/net/([^/\s]+)/speed:(-?\d+)\s*$")


def parse_speeds(text: str) -> dict[str, int]:
    """`grep -H . /sys/class/net/*/speed` -> {name: Mb/s}; -1 (unknown) is kept as -1."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = _SPEED.match(line.strip())
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


_ENV_LINE = re.compile(r"^(?:export\s+|declare -x\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def parse_env(text: str) -> dict[str, str]:
    """`env` output -> only the NCCL/gloo variables (nothing else is kept: no secrets)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _ENV_LINE.match(line.strip())
        if m and _ENV_KEEP.match(m.group(1)):
            out[m.group(1)] = m.group(2).strip().strip('"').strip("'")
    return out


def parse_ib_devices(text: str) -> list[str]:
    """`ls -1 /sys/class/infiniband` -> device names (an error message gives [])."""
    names = []
    for line in text.splitlines():
        s = line.strip()
        if re.fullmatch(r"[A-Za-z0-9_.-]+", s):
            names.append(s)
    return names


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


# ---------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------
# net.nic grading


@dataclass
class _Findings:
    fails: list[str] = field(default_factory=list)
    warns: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    remedies: list[str] = field(default_factory=list)

    def add(self, status: Status, msg: str, evidence: Sequence[str] = (), remedy: str = "") -> None:
        (self.fails if status is Status.FAIL else self.warns if status is Status.WARN else self.notes).append(msg)
        for e in evidence if status in (Status.FAIL, Status.WARN) else ():
            if e and e not in self.evidence:
                self.evidence.append(e)
        if remedy and remedy not in self.remedies:
            self.remedies.append(remedy)

    def status(self) -> Status:
        return Status.FAIL if self.fails else Status.WARN if self.warns else Status.PASS


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
    return [i for i in ifaces if classify(i, profile) in ("data", "ipoib")], "auto"


def _grade_iflist_env(var: str, value: str, ifaces: list[Interface], profile: Profile, f: _Findings,
                      exact_only: bool = False) -> None:
    """NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME against the interfaces that exist."""
    by_name = {i.name: i for i in ifaces}
    lst = parse_iflist(value)
    if exact_only:  # gloo takes plain, exact names
        lst = IfList(raw=value, exclude=False, exact=True, entries=[e for e in value.split(",") if e.strip()])
        lst.entries = [e.strip() for e in lst.entries]
    line = f"{var}={value}"
    if not lst.entries:
        f.add(Status.WARN, f"{var} is set but empty", [line], f"unset {var} or name the data-plane interface")
        return
    if not lst.exclude:
        for e in lst.entries:
            hits = [n for n in by_name if lst.matches(e, n)]
            if not hits:
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
              [line] + [by_name[n].line for n in allowed],
              "bring the interface up or point the variable at one that is up")


def _first_data(ifaces: list[Interface], profile: Profile) -> list[str]:
    return [i.name for i in ifaces if classify(i, profile) == "data" and i.up and i.global_addresses][:2]


def _grade_ib_hca(value: str, hcas: list[str] | None, f: _Findings) -> None:
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


def grade_nic(ctx: CheckContext) -> Result:
    cap = ctx.capture("ip-addr")
    if cap is None:
        return ctx.result(Status.SKIP, "no interface list (ip addr): NICs and NCCL interface variables not graded",
                          remedy="capture `ip -j -d addr` on the node alongside the environment")
    ifaces = parse_interfaces(cap.stdout)
    if not ifaces:
        return ctx.result(Status.ERROR, "ip addr output could not be parsed (empty or garbage)",
                          evidence=cap.text.splitlines()[:3] or ["(empty output)"],
                          remedy="run `ip -j -d addr` by hand; iproute2 may be broken or too old for -j")
    prof = ctx.profile
    env_cap = ctx.capture("env")
    env = parse_env(env_cap.stdout) if env_cap is not None else {}
    speed_cap = ctx.capture("ip-speed")
    speeds = parse_speeds(speed_cap.text) if speed_cap is not None else {}
    ib_cap = ctx.capture("ib-devices")
    hcas: list[str] | None = None
    if ib_cap is not None:
        hcas = parse_ib_devices(ib_cap.stdout) if ib_cap.rc == 0 else []
    f = _Findings()
    want_mtu = int(prof.get("net.mtu") or 0)
    min_speed = int(prof.get("net.min_speed_mbps") or 0)
    dp, how = data_plane(ifaces, prof, env)
    strict = how in ("profile", "env")
    sev = Status.FAIL if strict else Status.WARN

    # explicit data-plane patterns must each exist
    for p in prof.get("net.interfaces") or []:
        if not any(_match_any(i.name, [p]) for i in ifaces):
            f.add(Status.FAIL, f"data-plane interface {p} is missing",
                  [f"interfaces present: {', '.join(i.name for i in ifaces)}",
                   f"net.interfaces = {prof.get('net.interfaces')} ({prof.source('net.interfaces')})"],
                  f"check the NIC/driver for {p} (lspci, dmesg | grep -i mlx5/ice/bnxt); reseat or replace it")
    if not dp:
        f.add(Status.WARN, "no data-plane NIC found (only loopback/virtual interfaces)",
              [i.line for i in ifaces][:6],
              "check that the NIC drivers are loaded; inside a container, run preflight on the host network")
    graded: list[Interface] = []
    for i in dp:
        if not i.up:
            if strict or i.global_addresses:
                f.add(Status.FAIL, f"{i.name} is {i.state or 'down'}", [i.line],
                      f"check the cable/switch port of {i.name} (`ip link set {i.name} up`, ethtool {i.name}); "
                      "drain the node until the link is up")
            else:
                f.add(Status.PASS, f"{i.name} down with no address (unused port?)", [])
            continue
        graded.append(i)
        if want_mtu and i.mtu is not None and classify(i, prof) == "data":
            if i.mtu < want_mtu:
                f.add(sev, f"{i.name} MTU {i.mtu}, expected {want_mtu}",
                      [i.line, f"net.mtu = {want_mtu} ({prof.source('net.mtu')})"],
                      f"`ip link set dev {i.name} mtu {want_mtu}` and persist it (netplan/NetworkManager/ifcfg); "
                      "the switch ports must allow it too")
            elif i.mtu > want_mtu:
                f.add(Status.WARN, f"{i.name} MTU {i.mtu}, above the expected {want_mtu}",
                      [i.line, f"net.mtu = {want_mtu} ({prof.source('net.mtu')})"],
                      f"set {i.name} to MTU {want_mtu} like its peers; larger frames are dropped by peers at {want_mtu}")
        if min_speed:
            sp = speeds.get(i.name)
            if sp is not None and 0 < sp < min_speed:
                f.add(sev, f"{i.name} links at {sp} Mb/s, expected at least {min_speed}",
                      [f"/sys/class/net/{i.name}/speed:{sp}",
                       f"net.min_speed_mbps = {min_speed} ({prof.source('net.min_speed_mbps')})"],
                      f"the link of {i.name} negotiated a lower speed: check the cable/transceiver and the switch port")
    # environment
    for var in ("NCCL_SOCKET_IFNAME",):
        if env.get(var):
            _grade_iflist_env(var, env[var], ifaces, prof, f)
    if env.get("GLOO_SOCKET_IFNAME"):
        _grade_iflist_env("GLOO_SOCKET_IFNAME", env["GLOO_SOCKET_IFNAME"], ifaces, prof, f, exact_only=True)
    if env.get("NCCL_IB_HCA"):
        _grade_ib_hca(env["NCCL_IB_HCA"], hcas, f)
    expect_net = str(prof.get("nccl.expect_net") or "any")
    if env.get("NCCL_IB_DISABLE", "").strip() == "1" and expect_net.upper() == "IB":
        f.add(Status.FAIL, "NCCL_IB_DISABLE=1 forces NCCL onto TCP sockets, but the profile expects IB",
              ["NCCL_IB_DISABLE=1", f"nccl.expect_net = {expect_net} ({prof.source('nccl.expect_net')})"],
              "unset NCCL_IB_DISABLE in the job environment")

    facts: dict[str, Any] = {
        "interfaces": [
            {"name": i.name, "mtu": i.mtu, "state": i.state, "up": i.up, "class": classify(i, prof),
             "kind": i.kind, "link_type": i.link_type, "addresses": i.addresses, "master": i.master,
             "speed_mbps": speeds.get(i.name)}
            for i in ifaces
        ],
        "data_plane": [i.name for i in dp],
        "data_plane_from": how,
        "env": env,
        "ib_devices": hcas,
    }
    status = f.status()
    if status is Status.PASS:
        names = ", ".join(f"{i.name} (mtu {i.mtu})" for i in graded) or "none"
        return ctx.result(Status.PASS, f"{len(graded)} data-plane NIC(s) up: {names}",
                          evidence=[i.line for i in graded][:8], facts=facts)
    msgs = f.fails if status is Status.FAIL else f.warns
    summary = msgs[0] if len(msgs) == 1 else f"{msgs[0]} (+{len(msgs) - 1} more)"
    return ctx.result(status, summary, evidence=[*msgs[1:], *f.evidence] if len(msgs) > 1 else f.evidence,
                      remedy="; ".join(f.remedies), facts={**facts, "problems": f.fails + f.warns})


# ---------------------------------------------------------------------------------------
# Ping transcripts


@dataclass
class PingRun:
    target: str = ""
    address: str = ""
    size: int | None = None  # payload bytes (-s)
    transmitted: int | None = None
    received: int | None = None
    errors: int = 0
    loss: float | None = None  # percent
    local_too_long_mtu: int | None = None  # "local error: message too long, mtu=N"
    local_too_long: bool = False
    frag_needed_mtu: int | None = None
    frag_from: str = ""
    unreachable: bool = False
    unresolved: bool = False
    lines: list[str] = field(default_factory=list)

    @property
    def ok_replies(self) -> int:
        return self.received or 0


_PING_HEAD = re.compile(r"^PING\s+(\S+?)\s*\(([^)]*)\)\s*(?:(\d+)\((\d+)\) bytes of data|(\d+) data bytes)")
_PING_STATS = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received(?:, \+(\d+) errors)?"
                         r"(?:, \+\d+ duplicates)?(?:, \+\d+ corrupted)?, ([\d.]+)% packet loss")
_LOCAL_TOO_LONG = re.compile(r"local error: [Mm]essage too long(?:, mtu[ =]+(\d+))?|sendmsg: Message too long")
_FRAG = re.compile(r"From (\S+).*Frag(?:mentation)? needed(?: and DF set)?(?: \(mtu = (\d+)\))?", re.I)
_PKT_TOO_BIG = re.compile(r"From (\S+).*Packet too big: mtu=(\d+)", re.I)
_UNREACH = re.compile(r"Destination (?:Host|Net|Network) Unreachable|Network is unreachable|No route to host", re.I)
_UNRESOLVED = re.compile(r"Name or service not known|unknown host|Temporary failure in name resolution|"
                         r"No address associated with hostname", re.I)


def parse_ping(text: str) -> list[PingRun]:
    """One or more iputils ping runs (a saved transcript may hold several)."""
    runs: list[PingRun] = []
    cur: PingRun | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        m = _PING_HEAD.match(line)
        if m:
            cur = PingRun(target=m.group(1), address=m.group(2).strip(),
                          size=int(m.group(3) or m.group(5)) if (m.group(3) or m.group(5)) else None)
            cur.lines.append(line)
            runs.append(cur)
            continue
        if cur is None:
            # errors printed before any PING header (unresolvable name, no route)
            if _UNRESOLVED.search(line) or _UNREACH.search(line):
                cur = PingRun()
                runs.append(cur)
            else:
                continue
        ml = _LOCAL_TOO_LONG.search(line)
        if ml:
            cur.local_too_long = True
            if ml.group(1):
                cur.local_too_long_mtu = int(ml.group(1))
            cur.lines.append(line)
            continue
        mf = _FRAG.search(line) or _PKT_TOO_BIG.search(line)
        if mf:
            cur.frag_from = mf.group(1)
            if mf.group(2):
                cur.frag_needed_mtu = int(mf.group(2))
            cur.lines.append(line)
            continue
        if _UNRESOLVED.search(line):
            cur.unresolved = True
            cur.lines.append(line)
            continue
        if _UNREACH.search(line):
            cur.unreachable = True
            cur.lines.append(line)
            continue
        ms = _PING_STATS.search(line)
        if ms:
            cur.transmitted = int(ms.group(1))
            cur.received = int(ms.group(2))
            cur.errors = int(ms.group(3) or 0)
            cur.loss = float(ms.group(4))
            cur.lines.append(line)
    return runs


def _run_loss(run: PingRun | None) -> float | None:
    if run is None:
        return None
    if run.loss is not None:
        return run.loss
    if run.unresolved or run.unreachable or run.local_too_long:
        return 100.0
    return None


def jumbo_outcome(jumbo: PingRun | None, small: PingRun | None) -> tuple[str, str]:
    """(outcome, one-line reason) for one peer."""
    small_loss = _run_loss(small)
    jumbo_loss = _run_loss(jumbo)
    if small is not None and (small.unresolved or (small_loss is not None and small_loss >= 100.0)):
        if small.unresolved:
            return "unresolved", "the peer name does not resolve"
        return "unreachable", "small pings fail too: the peer is down or unreachable (not an MTU problem)"
    if jumbo is None:
        return "unknown", "no jumbo ping result"
    if jumbo.frag_from or jumbo.frag_needed_mtu:
        return "frag_needed", f"a hop ({jumbo.frag_from or '?'}) answered Frag needed, mtu {jumbo.frag_needed_mtu or '?'}"
    if jumbo.local_too_long:
        return "local_too_small", f"this node cannot send the frame: local MTU {jumbo.local_too_long_mtu or '?'}"
    if jumbo.unresolved:
        return "unresolved", "the peer name does not resolve"
    if jumbo.unreachable and (small is None or small_loss is None):
        return "unreachable", "destination unreachable"
    if jumbo_loss is None:
        return "unknown", "the jumbo ping printed no statistics (killed or truncated)"
    if jumbo_loss >= 100.0:
        if small is None:
            return "no_reply", "jumbo pings got no reply and no small ping ran to rule out a down peer"
        return "silent_loss", "small pings pass, jumbo pings vanish without an error: an MTU black hole on the path"
    if jumbo_loss > 0:
        return "lossy", f"{jumbo_loss:g}% of jumbo pings lost"
    return "ok", "jumbo frames pass"


# ---------------------------------------------------------------------------------------
# net.mtu


_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_HOST_LABEL}(?:\.{_HOST_LABEL})*$")


def valid_peer(peer: str) -> bool:
    """A hostname or an IP address, nothing else (it becomes an argv element of ping)."""
    if not peer or peer.startswith("-"):
        return False
    try:
        ipaddress.ip_address(peer)
        return "%" not in peer
    except ValueError:
        pass
    return bool(_HOSTNAME.match(peer))


def _payload(peer: str, mtu: int) -> int:
    try:
        v6 = ipaddress.ip_address(peer).version == 6
    except ValueError:
        v6 = False
    return mtu - (IPV6_ICMP_HEADERS if v6 else IPV4_ICMP_HEADERS)


def _ping_argv(size: int, profile: Profile, peer: str) -> list[str]:
    count = int(profile.get("net.ping_count") or 3)
    wait = int(profile.get("net.ping_timeout_s") or 3)
    interval = float(profile.get("net.ping_interval_s") or 0.2)
    return ["ping", "-n", "-M", "do", "-s", str(size), "-c", str(count), "-i", f"{interval:g}", "-W", str(wait), peer]


def _ping_timeout(profile: Profile) -> float:
    count = int(profile.get("net.ping_count") or 3)
    wait = int(profile.get("net.ping_timeout_s") or 3)
    interval = float(profile.get("net.ping_interval_s") or 0.2)
    return wait + count * interval + 2.0  # ping exits on its own before this


def mtu_probes(ctx: PlanContext) -> list[Probe]:
    probes = [PROBE_IP_ADDR]
    mtu = int(ctx.profile.get("net.mtu") or 0)
    if not mtu:
        return probes
    small = int(ctx.profile.get("net.small_ping_size") or 56)
    limit = _ping_timeout(ctx.profile)
    for peer in ctx.options.peers:
        if not valid_peer(peer):
            continue  # graded as ERROR; never put into argv
        probes.append(Probe.of(f"ping-jumbo-{peer}", _ping_argv(_payload(peer, mtu), ctx.profile, peer), timeout=limit))
        probes.append(Probe.of(f"ping-small-{peer}", _ping_argv(small, ctx.profile, peer), timeout=limit))
    return probes


_STATUS_OF = {"ok": Status.PASS, "local_too_small": Status.FAIL, "frag_needed": Status.FAIL,
              "silent_loss": Status.FAIL, "lossy": Status.WARN, "no_reply": Status.WARN,
              "unreachable": Status.ERROR, "unresolved": Status.ERROR, "unknown": Status.ERROR}
_ORDER = ["local_too_small", "frag_needed", "silent_loss", "lossy", "no_reply", "unreachable", "unresolved",
          "unknown", "ok"]


def _remedy(outcome: str, peer: str, run: PingRun | None, mtu: int) -> str:
    if outcome == "local_too_small":
        return (f"raise this node's interface MTU to {mtu} (`ip link set dev <iface> mtu {mtu}`, persist it), "
                "or clear a stale cached path MTU (`ip route flush cache`)")
    if outcome == "frag_needed":
        hop = run.frag_from if run and run.frag_from else "the reporting hop"
        return f"raise the MTU of {hop} (switch/router port or tunnel on the path to {peer}) to {mtu}"
    if outcome == "silent_loss":
        return (f"a device on the path to {peer} drops jumbo frames silently: check the switch port MTU, "
                f"the peer's interface MTU and any bridge/veth in between; all must be >= {mtu}")
    if outcome == "lossy":
        return f"jumbo frames to {peer} are partly lost: check errors/drops on the link (ethtool -S, switch counters)"
    if outcome in ("unreachable", "unresolved"):
        return f"{peer} is down or unreachable from here: check the peer and the route; the MTU was not tested"
    return f"run the ping pair to {peer} by hand"


def _peer_facts(peer: str, outcome: str, jumbo: PingRun | None, small: PingRun | None) -> dict[str, Any]:
    return {"peer": peer, "outcome": outcome, "jumbo_loss": _run_loss(jumbo), "small_loss": _run_loss(small),
            "jumbo_size": jumbo.size if jumbo else None, "small_size": small.size if small else None,
            "local_mtu": jumbo.local_too_long_mtu if jumbo else None,
            "hop": jumbo.frag_from if jumbo else "", "hop_mtu": jumbo.frag_needed_mtu if jumbo else None}


def _grade_peers(ctx: CheckContext, pairs: list[tuple[str, PingRun | None, PingRun | None, str]],
                 size: int | None, extra_evidence: list[str], mtu: int) -> Result:
    """pairs: (peer, jumbo run, small run, note) -> one aggregated Result."""
    peers = []
    evidence: list[str] = []
    remedies: list[str] = []
    worst_outcome = "ok"
    for peer, jumbo, small, note in pairs:
        outcome, why = jumbo_outcome(jumbo, small)
        if note:
            why = f"{why} ({note})"
        peers.append({**_peer_facts(peer, outcome, jumbo, small), "reason": why})
        if _ORDER.index(outcome) < _ORDER.index(worst_outcome):
            worst_outcome = outcome
        if outcome != "ok":
            evidence.append(f"{peer}: {outcome}: {why}")
            for r in (jumbo, small):
                if r is not None:
                    evidence.extend(r.lines[:4])
            rem = _remedy(outcome, peer, jumbo, mtu)
            if rem not in remedies:
                remedies.append(rem)
    facts = {"outcome": worst_outcome, "size": size, "mtu": mtu or None, "peers": peers}
    status = _STATUS_OF.get(worst_outcome, Status.ERROR)
    bad = [p for p in peers if p["outcome"] == worst_outcome]
    if status is Status.PASS:
        return ctx.result(Status.PASS, f"{size}-byte DF pings pass to {len(peers)} peer(s)",
                          evidence=[f"{p['peer']}: ok" for p in peers][:8], facts=facts)
    names = ", ".join(p["peer"] for p in bad[:5]) + (f" (+{len(bad) - 5})" if len(bad) > 5 else "")
    head = {
        "local_too_small": f"local MTU too small for {size}-byte DF pings (to {names})",
        "frag_needed": f"a hop needs fragmentation for {size}-byte DF pings to {names}",
        "silent_loss": f"jumbo frames vanish silently on the path to {names} (MTU black hole)",
        "lossy": f"jumbo pings partly lost to {names}",
        "no_reply": f"no reply to jumbo pings from {names}",
        "unreachable": f"{names} unreachable even with small pings: not an MTU problem",
        "unresolved": f"{names} does not resolve: MTU not tested",
        "unknown": f"no usable ping result for {names}",
    }[worst_outcome]
    return ctx.result(status, head, evidence=[*evidence, *extra_evidence], remedy="; ".join(remedies), facts=facts)


def _peer_runs(cap: Capture | None) -> tuple[PingRun | None, str]:
    if cap is None:
        return None, "not run"
    if cap.state is CaptureState.TIMEOUT:
        run = PingRun(lines=[cap.reason], loss=100.0)
        return run, "ping was killed at its time limit"
    if not cap.ok:
        return None, cap.reason or cap.state.value
    runs = parse_ping(cap.text)
    return (runs[0] if runs else None), ""


def grade_mtu(ctx: CheckContext) -> Result:
    prof = ctx.profile
    mtu = int(prof.get("net.mtu") or 0)
    src = f"net.mtu = {mtu} ({prof.source('net.mtu')})"
    # analyze: a saved ping transcript
    transcript = ctx.capture("ping")
    if transcript is not None:
        runs = [r for r in parse_ping(transcript.text) if r.target or r.lines]
        if not runs:
            return ctx.result(Status.ERROR, "ping transcript holds no ping run", evidence=transcript.text.splitlines()[:3])
        by_peer: dict[str, list[PingRun]] = {}
        for r in runs:
            by_peer.setdefault(r.target or "?", []).append(r)
        pairs: list[tuple[str, PingRun | None, PingRun | None, str]] = []
        size = None
        for peer, rs in by_peer.items():
            sized = sorted(rs, key=lambda r: r.size or 0)
            jumbo = sized[-1]
            small = sized[0] if len(sized) > 1 and (sized[0].size or 0) < (jumbo.size or 0) else None
            size = max(size or 0, jumbo.size or 0) or None
            pairs.append((peer, jumbo, small, ""))
        target = mtu or ((size or 0) + IPV4_ICMP_HEADERS)  # the frame size the transcript tried
        return _grade_peers(ctx, pairs, size, [src] if mtu else [], target)

    peers = list(ctx.options.peers)
    invalid = [p for p in peers if not valid_peer(p)]
    if invalid:
        return ctx.result(Status.ERROR, f"invalid peer name(s): {', '.join(repr(p) for p in invalid)}",
                          evidence=[f"peer {p!r} is neither a hostname nor an IP address" for p in invalid],
                          remedy="give peers as plain hostnames or IP addresses")
    if peers and mtu:
        pairs = []
        missing: list[str] = []
        for peer in peers:
            jcap = ctx.captures.get(f"ping-jumbo-{peer}")
            scap = ctx.captures.get(f"ping-small-{peer}")
            for c in (jcap, scap):
                if c is not None and c.state is CaptureState.MISSING:
                    missing.append(c.reason)
            jrun, jnote = _peer_runs(jcap)
            srun, _ = _peer_runs(scap)
            pairs.append((peer, jrun, srun, jnote))
        if missing:
            tool = "ping"
            if prof.requires_tool(tool):
                return ctx.result(Status.FAIL, f"{tool} is missing and profile {prof.name} requires it",
                                  evidence=missing[:1], remedy="install iputils-ping")
            return ctx.result(Status.SKIP, "ping not found; net.mtu not checked", evidence=missing[:1],
                              remedy="install iputils-ping")
        first = peers[0]
        return _grade_peers(ctx, pairs, _payload(first, mtu), [src], mtu)

    # no peers: the configured MTU of the data-plane interfaces
    if not mtu:
        why = "peers not pinged" if peers else "no peers"
        return ctx.result(Status.SKIP, f"no MTU expectation (net.mtu = 0), {why}: MTU not graded",
                          evidence=[src], remedy="set net.mtu in a site profile to test jumbo frames")
    cap = ctx.capture("ip-addr")
    if cap is None:
        return ctx.result(Status.SKIP, "no peers and no interface list: MTU not graded",
                          remedy="give --peers to test the path, or run `ip -j -d addr`")
    ifaces = parse_interfaces(cap.stdout)
    if not ifaces:
        return ctx.result(Status.ERROR, "ip addr output could not be parsed", evidence=cap.text.splitlines()[:3])
    dp, how = data_plane(ifaces, prof, {})
    eth = [i for i in dp if classify(i, prof) == "data" and i.up and i.mtu is not None]
    if not eth:
        return ctx.result(Status.SKIP, "no Ethernet data-plane interface up: MTU not graded",
                          evidence=[i.line for i in ifaces][:5])
    low = [i for i in eth if (i.mtu or 0) < mtu]
    facts = {"outcome": "local_too_small" if low else "ok", "size": _payload("0.0.0.0", mtu), "mtu": mtu,
             "peers": [], "interfaces": [{"name": i.name, "mtu": i.mtu} for i in eth]}
    if low:
        # auto-detected interfaces may include a management NIC: WARN; declared ones: FAIL
        status = Status.FAIL if how == "profile" else Status.WARN
        return ctx.result(status, f"MTU below {mtu} on {', '.join(f'{i.name} ({i.mtu})' for i in low)}",
                          evidence=[i.line for i in low] + [src],
                          remedy=f"`ip link set dev <iface> mtu {mtu}` and persist it; test the path with --peers",
                          facts=facts)
    return ctx.result(Status.PASS, f"data-plane MTU {mtu} on {', '.join(i.name for i in eth)} (no peers given: "
                      "path not tested)", evidence=[i.line for i in eth][:8], facts=facts)


# ---------------------------------------------------------------------------------------
# Formats (analyze)


def _looks_like_ip_json(text: str) -> bool:
    s = text.lstrip()
    return s.startswith("[") and '"ifname"' in s[:4096] and ('"operstate"' in s[:8192] or '"mtu"' in s[:8192])


_IP_TEXT_HEAD = re.compile(r"(?m)^\d+:\s+[^:\s]+(?:@\S+)?:\s+<[A-Z_,-]*>\s+mtu \d+")


def _looks_like_ip_text(text: str) -> bool:
    return bool(_IP_TEXT_HEAD.search(text)) and bool(re.search(r"(?m)^\s+link/\w+", text))


def _looks_like_speed(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip()]
    return bool(lines) and sum(1 for line in lines if _SPEED.match(line.strip())) >= max(1, len(lines) // 2)


def _looks_like_env(text: str) -> bool:
    lines = [line for line in text.splitlines()[:400] if line.strip()]
    if len(lines) < 3:
        return False
    hits = sum(1 for line in lines if _ENV_LINE.match(line.strip()))
    return hits >= 0.9 * len(lines) and bool(re.search(r"(?m)^(?:export\s+)?(NCCL_\w+|PATH|HOME)=", text))


def _looks_like_ping(text: str) -> bool:
    return bool(re.search(r"(?m)^PING \S+\s*\([^)]*\)\s*\d+", text)) and (
        "ping statistics ---" in text or "packets transmitted" in text)


register_format(Format("ip-addr", detect=_looks_like_ip_json, description="ip -j -d addr (JSON)", priority=70))
register_format(Format("ip-addr-text", detect=_looks_like_ip_text, description="ip addr (text)", priority=60,
                       probe="ip-addr"))
register_format(Format("ip-speed", detect=_looks_like_speed, description="grep -H . /sys/class/net/*/speed",
                       priority=55))
register_format(Format("env", detect=_looks_like_env, description="env (NCCL/gloo variables)", priority=20))
register_format(Format("ping", detect=_looks_like_ping, description="ping -M do transcript", priority=55))

_NET_KEYS: dict[str, Any] = {
    "net.mtu": int,
    "net.min_speed_mbps": int,
    "net.interfaces": list,
    "net.virtual_prefixes": list,
    "net.virtual_kinds": list,
    "nccl.expect_net": str,
}

register(Check(
    id="net.nic",
    title="Data-plane NICs",
    grade=grade_nic,
    probes=(PROBE_IP_ADDR, PROBE_IP_SPEED, PROBE_IB_DEVICES, PROBE_ENV),
    required=("ip-addr",),
    profile_keys=_NET_KEYS,
    formats=("ip-addr", "ip-speed", "env"),
    catches="data-plane NIC missing/down, wrong MTU or speed, NCCL_SOCKET_IFNAME/NCCL_IB_HCA/GLOO_SOCKET_IFNAME "
            "naming no interface or allowing lo/docker0",
))

register(Check(
    id="net.mtu",
    title="MTU path to peers",
    grade=grade_mtu,
    probes=mtu_probes,
    required=("ip-addr",),
    profile_keys={"net.mtu": int, "net.small_ping_size": int, "net.ping_count": int, "net.ping_timeout_s": int,
                  "net.ping_interval_s": (int, float), "net.interfaces": list, "net.virtual_prefixes": list,
                  "net.virtual_kinds": list},
    formats=("ping", "ip-addr"),
    catches="local MTU too small, a hop needing fragmentation, silent jumbo-frame black holes to peers",
))
