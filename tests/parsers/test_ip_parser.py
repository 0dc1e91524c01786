"""preflight.parsers.ip: every layout iproute2 and ifconfig print, exact facts per interface."""

from __future__ import annotations

import json

import pytest

from preflight.framing import Doc, frame
from preflight.parsers import ip
from preflight.parsers.ip import Interface, IpFacts


def doc(text: str) -> Doc:
    docs = frame(text).docs
    return docs[0] if len(docs) == 1 else Doc.join(docs)


def parse(text: str) -> IpFacts:
    return ip.parse(doc(text))


def by(text: str) -> dict[str, Interface]:
    return parse(text).by_name()


ADDR = """\
1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN group default qlen 1000
    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00
    inet 127.0.0.1/8 scope host lo
       valid_lft forever preferred_lft forever
2: eno1: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc mq master bond0 state UP group default qlen 1000
    link/ether 3c:ec:ef:21:1a:2b brd ff:ff:ff:ff:ff:ff promiscuity 0 parentbus pci parentdev 0000:03:00.0
    altname enp3s0f0
    inet 10.10.4.21/24 brd 10.10.4.255 scope global dynamic noprefixroute eno1
       valid_lft 84000sec preferred_lft 84000sec
    inet6 fd00::21/64 scope global dadfailed tentative
       valid_lft forever preferred_lft forever
    inet6 fe80::3eec:efff:fe21:1a2b/64 scope link
       valid_lft forever preferred_lft forever
3: bond0.210@bond0: <NO-CARRIER,BROADCAST,MULTICAST,UP,M-DOWN> mtu 9000 qdisc noqueue state LOWERLAYERDOWN group default
    link/ether 04:3f:72:aa:10:20 brd ff:ff:ff:ff:ff:ff
"""


# ----------------------------------------------------------------------------- Interface

@pytest.mark.parametrize(("state", "flags", "up", "admin_up", "no_carrier", "known"), [
    ("UP", [], True, True, False, True),
    ("UNKNOWN", ["LOOPBACK", "UP", "LOWER_UP"], True, True, False, True),
    ("UNKNOWN", ["POINTOPOINT", "NOARP", "UP"], False, True, True, True),
    ("DOWN", ["NO-CARRIER", "BROADCAST", "UP"], False, True, True, True),
    ("DOWN", ["BROADCAST", "MULTICAST"], False, False, False, True),
    ("LOWERLAYERDOWN", ["UP", "LOWER_UP"], False, True, True, True),
    ("NOTPRESENT", ["UP"], False, True, True, True),
    ("DORMANT", ["UP", "LOWER_UP", "DORMANT"], False, True, True, True),
    ("TESTING", ["UP", "LOWER_UP"], False, True, True, True),
    ("", ["UP", "BROADCAST", "RUNNING", "MULTICAST"], True, True, False, True),
    ("", ["UP", "BROADCAST", "MULTICAST"], False, True, True, True),
    ("", ["BROADCAST", "RUNNING"], False, False, False, True),
    ("", [], False, False, False, False),
    ("", ["NO-CARRIER", "UP", "LOWER_UP"], False, True, True, True),
])
def test_link_state(state: str, flags: list[str], up: bool, admin_up: bool, no_carrier: bool, known: bool) -> None:
    i = Interface("x", state=state, flags=flags)
    assert (i.up, i.admin_up, i.no_carrier, i.state_known) == (up, admin_up, no_carrier, known)


def test_addresses() -> None:
    i = Interface("x", addresses=["127.0.0.1/8", "10.0.0.1/24", "fe80::1/64", "fd00::1/64", "fe80::2%eth0", "bogus",
                                  "169.254.3.4/16", "::1/128"],
                  addr_flags={"fd00::1/64": ["dadfailed", "tentative"], "fe80::1/64": ["tentative"]})
    assert i.global_addresses == ["10.0.0.1/24", "fd00::1/64"]
    assert i.ipv4 == ["10.0.0.1/24"]
    assert i.flagged("tentative") == ["fe80::1/64", "fd00::1/64"] and i.flagged("dadfailed") == ["fd00::1/64"]
    assert i.flagged("deprecated") == []


def test_slave() -> None:
    assert Interface("a", flags=["SLAVE"]).slave and Interface("a", master="bond0").slave
    assert not Interface("a", flags=["MASTER"]).slave


def test_render() -> None:
    i = Interface("eth0", mtu=9000, state="UP", flags=["UP", "LOWER_UP"], kind="vlan", master="br0",
                  addresses=["10.0.0.1/24"])
    assert ip._render(i) == "eth0: <UP,LOWER_UP> mtu 9000 state UP master br0 kind vlan 10.0.0.1/24"
    assert ip._render(Interface("eth1")) == "eth1: <> mtu None state ?"


# ----------------------------------------------------------------------------- text

def test_addr_text_facts() -> None:
    f = parse(ADDR)
    assert f.form == "text" and f.shows_addresses and f.requested == [] and f.problems == []
    lo, eno1, vlan = f.interfaces
    assert (lo.name, lo.mtu, lo.state, lo.link_type, lo.addresses) == ("lo", 65536, "UNKNOWN", "loopback",
                                                                      ["127.0.0.1/8"])
    assert lo.line == "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN group default qlen 1000"
    assert (eno1.mtu, eno1.master, eno1.link_type, eno1.parentbus, eno1.altnames) == (
        1500, "bond0", "ether", "pci", ["enp3s0f0"])
    assert eno1.addresses == ["10.10.4.21/24", "fd00::21/64", "fe80::3eec:efff:fe21:1a2b/64"]
    assert eno1.addr_flags == {"10.10.4.21/24": ["dynamic", "noprefixroute"], "fd00::21/64": ["dadfailed", "tentative"],
                               "fe80::3eec:efff:fe21:1a2b/64": []}
    assert eno1.addr_lines["fd00::21/64"] == "inet6 fd00::21/64 scope global dadfailed tentative"
    assert (vlan.name, vlan.parent, vlan.kind, vlan.state, vlan.mtu) == ("bond0.210", "bond0", "vlan",
                                                                         "LOWERLAYERDOWN", 9000)
    assert vlan.flags == ["NO-CARRIER", "BROADCAST", "MULTICAST", "UP", "M-DOWN"] and not vlan.up


def test_header_without_mtu_or_state() -> None:
    [i] = parse("7: tun0: <POINTOPOINT,UP,LOWER_UP> qlen 500\n    link/none\n").interfaces
    assert (i.mtu, i.state, i.link_type, i.up) == (None, "", "none", True)


def test_an_interface_listed_twice_keeps_its_first_facts() -> None:
    text = ("2: eth0: <BROADCAST,UP,LOWER_UP> mtu 9000 qdisc mq state UP\n    link/ether aa:bb:cc:dd:ee:ff\n"
            "2: eth0: <BROADCAST> mtu 1500 qdisc mq\n    inet 10.0.0.1/24 scope global eth0\n")
    [i] = parse(text).interfaces
    assert i.flags == ["BROADCAST", "UP", "LOWER_UP"] and i.mtu == 1500 and i.state == "UP"
    assert i.addresses == ["10.0.0.1/24"]


def test_details_kinds_and_slaves() -> None:
    text = """\
2: ens1f0: <BROADCAST,MULTICAST,SLAVE,UP,LOWER_UP> mtu 9000 qdisc mq master bond0 state UP
    link/ether 04:3f:72:aa:10:20 brd ff:ff:ff:ff:ff:ff promiscuity 0
    bond_slave state BACKUP mii_status UP link_failure_count 0
3: vethab@if4: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue master docker0 state UP
    link/ether 6e:21:5c:00:aa:01 brd ff:ff:ff:ff:ff:ff link-netnsid 0
    veth
    bridge_slave state forwarding priority 32 cost 2
4: bond0: <BROADCAST,MULTICAST,MASTER,UP,LOWER_UP> mtu 9000 qdisc noqueue state UP
    link/ether 04:3f:72:aa:10:20 brd ff:ff:ff:ff:ff:ff
    bond mode 802.3ad miimon 100
    vlan protocol 802.1Q id 5
5: team0p1: <UP,LOWER_UP> mtu 9000 master team0 state UP
    team_slave
"""
    d = by(text)
    assert (d["ens1f0"].kind, d["ens1f0"].slave_kind, d["ens1f0"].slave_state) == ("", "bond", "BACKUP")
    assert (d["vethab"].kind, d["vethab"].slave_kind, d["vethab"].slave_state, d["vethab"].parent) == (
        "veth", "bridge", "forwarding", "if4")
    assert d["bond0"].kind == "bond"  # the first kind line wins
    assert (d["team0p1"].slave_kind, d["team0p1"].slave_state) == ("team", "")


def test_stats_old_and_new_layouts() -> None:
    text = """\
2: eth0: <UP,LOWER_UP> mtu 9000 state UP
    link/ether aa:bb:cc:dd:ee:ff
    RX: bytes  packets  errors  dropped overrun mcast
    918273645  1203345  3       4       0       10
    TX: bytes  packets  errors  dropped carrier collsns
    771234567  1100342  5       6       7       0
3: eth1: <UP,LOWER_UP> mtu 9000 state UP
    RX:  bytes packets errors dropped  missed   mcast
     918273645 1203345      1       2       9      10
    TX:  bytes packets errors dropped carrier collsns
         1.2G   1100342      0       0       0       0
    altname enp3s0
"""
    d = by(text)
    assert d["eth0"].stats == {"rx_errors": 3, "rx_dropped": 4, "tx_errors": 5, "tx_dropped": 6, "tx_carrier": 7}
    assert d["eth1"].stats == {"rx_errors": 1, "rx_dropped": 2}
    assert d["eth1"].altnames == ["enp3s0"]


def test_stats_header_without_values_is_forgotten() -> None:
    text = "2: eth0: <UP,LOWER_UP> mtu 9000 state UP\n    RX: bytes packets errors\n    bond mode 1\n    5 6 7\n"
    [i] = parse(text).interfaces
    assert i.stats == {} and i.kind == "bond"


def test_odd_detail_lines() -> None:
    text = ("2: eth0: <UP,LOWER_UP> mtu 9000 state UP\n    altname\n    inet\n    inet6 \n"
            "    RX bytes weird\n    vf 0 link/ether aa:bb spoof checking off\n")
    [i] = parse(text).interfaces
    assert i.altnames == [] and i.addresses == [] and i.stats == {} and i.link_type == ""


def test_oneline_link_and_addr() -> None:
    link = ("1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN\\    link/loopback 00:00:00:00:00:00\n"
            "2: eth0@if9: <BROADCAST,UP,LOWER_UP> mtu 9000 qdisc mq master bond0 state UP\\    link/ether aa:bb\n")
    f = parse(link)
    assert f.form == "oneline" and not f.shows_addresses
    lo, eth0 = f.interfaces
    assert lo.link_type == "loopback" and eth0.link_type == "ether" and eth0.parent == "if9"
    assert eth0.line == "2: eth0@if9: <BROADCAST,UP,LOWER_UP> mtu 9000 qdisc mq master bond0 state UP"
    addr = ("2: eth0    inet 10.0.0.1/24 brd 10.0.0.255 scope global dynamic eth0\\       valid_lft 10sec preferred_lft 0sec\n"
            "2: eth0    inet6 fe80::1/64 scope link tentative \\       valid_lft forever preferred_lft forever\n"
            "eth1    inet 10.1.0.1/24 scope global eth1\\       valid_lft forever preferred_lft forever\n")
    f = parse(addr)
    assert f.form == "oneline" and f.shows_addresses
    eth0, eth1 = f.interfaces
    assert eth0.addresses == ["10.0.0.1/24", "fe80::1/64"] and eth1.addresses == ["10.1.0.1/24"]
    assert eth0.addr_flags == {"10.0.0.1/24": ["dynamic"], "fe80::1/64": ["tentative"]}
    assert eth0.addr_lines["fe80::1/64"].startswith("2: eth0    inet6 fe80::1/64 scope link tentative")
    assert not eth0.state_known and "eth0    inet 10.0.0.1/24" in eth0.line


def test_grep_fragment() -> None:
    text = "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN\n2: eno1: <BROADCAST,MULTICAST> mtu 1500 qdisc noop state DOWN\n"
    f = parse(text)
    assert [(i.name, i.mtu, i.state) for i in f.interfaces] == [("lo", 65536, "UNKNOWN"), ("eno1", 1500, "DOWN")]
    assert f.form == "text" and not f.shows_addresses


# ----------------------------------------------------------------------------- brief

def test_brief_link_and_addr() -> None:
    link = ("lo               UNKNOWN        00:00:00:00:00:00 <LOOPBACK,UP,LOWER_UP>\n"
            "eth0@if12        UP             aa:bb:cc:dd:ee:ff <BROADCAST,MULTICAST,UP,LOWER_UP>\n"
            "eth1             DOWN           aa:bb:cc:dd:ee:fe <NO-CARRIER,BROADCAST,MULTICAST,UP>\n")
    f = parse(link)
    assert f.form == "brief" and not f.shows_addresses
    lo, eth0, eth1 = f.interfaces
    assert (eth0.name, eth0.parent, eth0.state, eth0.flags) == ("eth0", "if12", "UP",
                                                                ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"])
    assert eth1.no_carrier and eth0.line == "eth0@if12        UP             aa:bb:cc:dd:ee:ff <BROADCAST,MULTICAST,UP,LOWER_UP>"
    addr = "lo               UNKNOWN        127.0.0.1/8 ::1/128\neth0             UP             10.0.0.1/24 fe80::1/64\neth1 DOWN\n"
    f = parse(addr)
    assert f.form == "brief" and f.shows_addresses
    assert [(i.name, i.state, i.addresses, i.flags) for i in f.interfaces] == [
        ("lo", "UNKNOWN", ["127.0.0.1/8", "::1/128"], []), ("eth0", "UP", ["10.0.0.1/24", "fe80::1/64"], []),
        ("eth1", "DOWN", [], [])]
    assert f.interfaces[1].up and f.interfaces[1].admin_up and not f.interfaces[2].admin_up


@pytest.mark.parametrize(("text", "command", "brief"), [
    ("lo UNKNOWN 127.0.0.1/8\neth0 UP 10.0.0.1/24\n", "", True),
    ("eth0 UP 10.0.0.1/24\n", "", False),
    ("eth0 UP 10.0.0.1/24\n", "ip -br a", True),
    ("eth0 UP 10.0.0.1/24\n", "ip -4 -brief addr", True),
    ("eth0 UP hello\neth1 UP world\n", "", False),
    ("eth0 UP 10.0.0.1/24\nsomething else\n", "", False),
    ("eth0 UP <BROADCAST,UP>\neth1 DOWN\n", "", True),
    ("eth0 UP\neth1 DOWN\n", "", True),
])
def test_is_brief(text: str, command: str, brief: bool) -> None:
    d = Doc(text, command=command)
    assert ip._is_brief(d, text.splitlines()) is brief


# ----------------------------------------------------------------------------- ifconfig

IFCONFIG = """\
eno1: flags=4163<UP,BROADCAST,RUNNING,MULTICAST>  mtu 9000
        inet 10.10.4.21  netmask 255.255.255.0  broadcast 10.10.4.255
        inet6 fe80::1  prefixlen 64  scopeid 0x20<link>
        ether 3c:ec:ef:21:1a:2b  txqueuelen 1000  (Ethernet)
ib0: flags=4099<UP,BROADCAST,MULTICAST>  mtu 2044
        infiniband 80:00:00:48:fe:80  txqueuelen 256  (InfiniBand)
lo: flags=73<UP,LOOPBACK,RUNNING>  mtu 65536
        inet 127.0.0.1  netmask 255.0.0.0
        loop  txqueuelen 1000  (Local Loopback)
eth0:1: flags=4163<UP,BROADCAST,RUNNING,MULTICAST>  mtu 1500
        inet 10.0.0.9  netmask 0xffffff00
mlxen0: flags=8843<UP,BROADCAST,RUNNING,SIMPLEX,MULTICAST> metric 0 mtu 9000
	inet 10.45.3.21 netmask 0xffff0000 broadcast 10.45.255.255
	status: no carrier
mlxen1: flags=8843<UP,BROADCAST,RUNNING,SIMPLEX,MULTICAST> metric 0 mtu 9000
	status: active
	unspec 00-00
"""


def test_ifconfig_new_and_bsd() -> None:
    f = parse(IFCONFIG)
    assert f.form == "ifconfig" and f.shows_addresses
    d = f.by_name()
    assert (d["eno1"].mtu, d["eno1"].link_type, d["eno1"].addresses, d["eno1"].up) == (
        9000, "ether", ["10.10.4.21/24", "fe80::1/64"], True)
    assert (d["ib0"].link_type, d["ib0"].up, d["ib0"].no_carrier) == ("infiniband", False, True)
    assert (d["lo"].link_type, d["lo"].addresses) == ("loopback", ["127.0.0.1/8"])
    assert d["eth0:1"].addresses == ["10.0.0.9/24"]
    assert (d["mlxen0"].state, d["mlxen0"].up, d["mlxen0"].addresses) == ("DOWN", False, ["10.45.3.21/16"])
    assert (d["mlxen1"].state, d["mlxen1"].up, d["mlxen1"].link_type) == ("UP", True, "none")


def test_ifconfig_old() -> None:
    text = """\
eth0      Link encap:Ethernet  HWaddr 00:0C:29:3B:2A:1C
          inet addr:10.10.4.21  Bcast:10.10.4.255  Mask:255.255.255.0
          inet6 addr: fe80::20c:29ff:fe3b:2a1c/64 Scope:Link
          UP BROADCAST RUNNING MULTICAST  MTU:9000  Metric:1
          RX packets:1203345 errors:0 dropped:0 overruns:0 frame:0
ib0       Link encap:UNSPEC  HWaddr 80-00-00-48-FE-80-00-00-00-00-00-00-00-00-00-00
          UP BROADCAST MULTICAST  MTU:2044  Metric:1
ppp0      Link encap:Point-to-Point Protocol
          POINTOPOINT NOARP  MTU:1500  Metric:1
tun9      Link encap:UNSPEC  HWaddr 00-00
lo        Link encap:Local Loopback
          inet addr:127.0.0.1  Mask:bogus
          UP LOOPBACK RUNNING  MTU:65536  Metric:1
x25       Link encap:X.25
"""
    f = parse(text)
    assert f.form == "ifconfig" and f.shows_addresses
    d = f.by_name()
    assert (d["eth0"].link_type, d["eth0"].mtu, d["eth0"].flags, d["eth0"].addresses, d["eth0"].up) == (
        "ether", 9000, ["UP", "BROADCAST", "RUNNING", "MULTICAST"], ["10.10.4.21/24", "fe80::20c:29ff:fe3b:2a1c/64"],
        True)
    assert (d["ib0"].link_type, d["ib0"].no_carrier, d["ib0"].mtu) == ("infiniband", True, 2044)
    assert (d["ppp0"].link_type, d["ppp0"].admin_up) == ("ppp", False)
    assert d["tun9"].link_type == "none"
    assert (d["lo"].link_type, d["lo"].addresses) == ("loopback", ["127.0.0.1"])
    assert d["x25"].link_type == "x.25"


@pytest.mark.parametrize(("mask", "plen"), [("255.255.255.0", "24"), ("0xffff0000", "16"), ("64", "64"),
                                            ("255.255.255.255", "32"), ("0x0", "0"), ("bogus", ""), ("0xzz", "")])
def test_prefix_len(mask: str, plen: str) -> None:
    assert ip._prefix_len(mask) == plen


# ----------------------------------------------------------------------------- JSON

def test_json_interface_facts() -> None:
    item = {"ifname": "ens1f1", "flags": ["NO-CARRIER", "SLAVE", "UP", 5], "mtu": 9000, "master": "bond0",
            "operstate": "DOWN", "link_type": "ether", "link": None, "parentbus": "pci", "altnames": ["enp1", 2],
            "linkinfo": {"info_kind": "", "info_slave_kind": "bond", "info_slave_data": {"state": "BACKUP"}},
            "stats64": {"rx": {"bytes": 10, "errors": 2, "dropped": 3}, "tx": {"errors": 4, "carrier_errors": 5,
                                                                            "dropped": "x"}},
            "addr_info": [{}, {"local": "fd00::2", "prefixlen": 64, "dadfailed": True, "tentative": True,
                               "deprecated": False}, {"local": "10.0.0.2"}, "junk"]}
    i = ip._json_interface(item)
    assert (i.name, i.mtu, i.state, i.master, i.parent, i.link_type, i.parentbus) == (
        "ens1f1", 9000, "DOWN", "bond0", "", "ether", "pci")
    assert i.flags == ["NO-CARRIER", "SLAVE", "UP"] and i.altnames == ["enp1"]
    assert (i.kind, i.slave_kind, i.slave_state) == ("", "bond", "BACKUP")
    assert i.stats == {"rx_errors": 2, "rx_dropped": 3, "tx_errors": 4, "tx_carrier_errors": 5}
    assert i.addresses == ["fd00::2/64", "10.0.0.2"]
    assert i.addr_flags == {"fd00::2/64": ["dadfailed", "tentative"], "10.0.0.2": []}
    assert i.addr_lines == {"fd00::2/64": "inet6 fd00::2/64 dadfailed tentative", "10.0.0.2": "inet 10.0.0.2"}
    assert i.line == "ens1f1: <NO-CARRIER,SLAVE,UP> mtu 9000 state DOWN master bond0 fd00::2/64 10.0.0.2"


def test_json_odd_values() -> None:
    i = ip._json_interface({"ifname": 7, "mtu": "9000", "linkinfo": "x", "link": "bond0", "stats": {"rx": "y"}})
    assert (i.name, i.mtu, i.kind, i.parent, i.stats, i.addresses) == ("7", None, "", "bond0", {}, [])
    assert ip._json_interface({"ifname": "a", "stats": "z", "linkinfo": {"info_slave_data": "q"}}).stats == {}
    old = ip._json_interface({"ifname": "a", "stats": {"rx": {"errors": 1}}})
    assert old.stats == {"rx_errors": 1}


def test_json_documents() -> None:
    items = [{}, {"ifname": "lo", "link_type": "loopback"}, {"ifindex": 3}, "x",
             {"ifname": "eth0", "addr_info": [{"local": "10.0.0.1", "prefixlen": 8}]}]
    f = parse(json.dumps(items))
    assert f.form == "json" and f.shows_addresses and [i.name for i in f.interfaces] == ["lo", "eth0"]
    f = parse(json.dumps([{"ifname": "eth0", "flags": ["UP"]}]))
    assert f.form == "json" and not f.shows_addresses
    trailing = json.dumps([{"ifname": "eth0"}]) + "\n[root@n1 ~]# \n"
    assert [i.name for i in parse(trailing).interfaces] == ["eth0"]
    assert ip._from_json('{"ifname": "x"}') is None and ip._from_json("[1, 2") is None
    assert ip._from_json("[" * 5000) is None
    assert ip._json_list("xx [1, 2] yy") == [1, 2]


# ----------------------------------------------------------------------------- command, garbage, detect

@pytest.mark.parametrize(("command", "want"), [
    ("ip addr show dev ens108np0", ["ens108np0"]),
    ("ip a s eth0", ["eth0"]),
    ("ip -4 addr show bond0.210@bond0", ["bond0.210"]),
    ("ip -d link show ens9f0np0", ["ens9f0np0"]),
    ("ip link ls eth1", ["eth1"]),
    ("ip addr show ens108np0 ; ip addr show ens110np0", ["ens108np0", "ens110np0"]),
    ("ip a show eth0 | grep mtu", ["eth0"]),
    ("ifconfig eth0:1", ["eth0:1"]),
    ("ip -o link show", []),
    ("ip addr show up", []),
    ("ip addr", []),
    ("ip -j -d addr", []),
    ("ifconfig -a", []),
    ("ip addr show dynamic", []),
    ("ip route show 10.0.0.0/8", []),
    ("", []),
])
def test_requested(command: str, want: list[str]) -> None:
    assert ip._requested(command) == want


@pytest.mark.parametrize("text", ["garbage\n", "[1, 2\n", '{"ifname": 1}\n', "1: \n", "\x00\x01\n", "[]\n"])
def test_garbage(text: str) -> None:
    f = parse(text)
    assert f.interfaces == []
    assert f.problems == ([text.strip()] if text.strip() not in ("[]", "1:") else [])


@pytest.mark.parametrize(("text", "want"), [
    (ADDR, True),
    (json.dumps([{"ifname": "eth0", "mtu": 1500}]), True),
    ("2: eno1: <BROADCAST,UP> mtu 1500 qdisc mq state UP\n", True),  # one grep'd link line (`ip link | grep eno1`)
    ("2: eno1: <BROADCAST,UP> mtu 1500\n", False),  # no qdisc / state after the MTU: not iproute2's whole line
    ("2: eno1: <BROADCAST,UP> mtu 1500 qdisc mq state UP\n3: eno2: <BROADCAST> mtu 1500 state DOWN\n", True),
    ("2: eno1: <BROADCAST,UP> mtu 1500 qdisc mq state UP\\    link/ether aa:bb\n", True),
    ("2: eno1: <BROADCAST,UP> mtu 1500 state UP\n    link/ether aa:bb\n", True),
    ("2: eth0    inet 10.0.0.1/24 brd 10.0.0.255 scope global eth0\n", True),
    (IFCONFIG, True),
    ("eth0      Link encap:Ethernet  HWaddr 00:0C:29:3B:2A:1C\n          UP BROADCAST RUNNING  MTU:1500  Metric:1\n",
     True),
    ("eth0      Link encap:Ethernet  HWaddr 00:0C:29:3B:2A:1C\n", False),
    ("lo UNKNOWN 127.0.0.1/8\neth0 UP 10.0.0.1/24\n", True),
    ("[1, 2, 3]\n", False),
    ("0: rank zero says hello\n1: rank one says hello\n", False),
    ("garbage\n", False),
])
def test_detect(text: str, want: bool) -> None:
    assert ip.detect(doc(text)) is want


def test_detect_brief_from_command() -> None:
    assert ip.detect(Doc("eth0 UP 10.0.0.1/24\n", command="ip -br addr"))
    assert not ip.detect(Doc("eth0 UP 10.0.0.1/24\n"))


def test_registration() -> None:
    [fmt] = ip.FORMATS
    assert (fmt.name, fmt.priority) == ("ip-addr", 60)
    assert [(p.probe, p.prefix) for p in ip.PARSERS] == [("ip-addr", False)]
    assert IpFacts().form == "" and not IpFacts().shows_addresses


# ----------------------------------------------------------------------------- every table entry

KINDS = ("veth", "bridge", "bond", "vlan", "tun", "tap", "dummy", "ifb", "vxlan", "geneve", "macvlan", "macvtap",
         "ipvlan", "ipvtap", "wireguard", "ipoib", "team", "gre", "gretap", "ip6gre", "ip6gretap", "ipip", "ip6tnl",
         "sit", "vti", "vti6", "vrf", "macsec", "openvswitch", "nlmon", "hsr", "bareudp", "xfrm", "erspan", "vcan")


@pytest.mark.parametrize("kind", KINDS)
def test_every_linkinfo_kind(kind: str) -> None:
    [i] = parse(f"5: x0: <UP,LOWER_UP> mtu 1500 state UNKNOWN\n    link/ether aa:bb\n    {kind} some options\n"
                ).interfaces
    assert i.kind == kind


@pytest.mark.parametrize(("line", "kind"), [("bond_slave", "bond"), ("team_slave", "team"),
                                            ("bridge_slave", "bridge"), ("vrf_slave", "vrf"),
                                            ("openvswitch_slave", "openvswitch"), ("bond_port", "bond")])
def test_every_slave_kind(line: str, kind: str) -> None:
    [i] = parse(f"5: x0: <UP,LOWER_UP> mtu 1500 master m0 state UP\n    {line} state ACTIVE\n").interfaces
    assert (i.slave_kind, i.slave_state, i.kind) == (kind, "ACTIVE", "")


def test_slave_state_needs_a_value() -> None:
    [i] = parse("5: x0: <UP,LOWER_UP> mtu 1500 master m0 state UP\n    bond_slave queue_id 0 state\n").interfaces
    assert (i.slave_kind, i.slave_state) == ("bond", "")


def test_every_address_flag() -> None:
    flags = list(ip.ADDR_FLAGS)
    text = f"5: x0: <UP,LOWER_UP> mtu 1500 state UP\n    inet6 fd00::1/64 scope global {' '.join(flags)} x0\n"
    [i] = parse(text).interfaces
    assert i.addr_flags == {"fd00::1/64": flags}
    item = {"ifname": "x0", "addr_info": [{"local": "fd00::1", "prefixlen": 64, **{f: True for f in flags}}]}
    assert ip._json_interface(item).addr_flags == {"fd00::1/64": flags}
    assert ip.ADDR_FLAGS == ("secondary", "temporary", "nodad", "optimistic", "dadfailed", "home", "deprecated",
                             "tentative", "dynamic", "mngtmpaddr", "noprefixroute", "autojoin", "stable-privacy")


def test_a_flag_right_after_the_address() -> None:
    [i] = parse("5: x0: <UP,LOWER_UP> mtu 1500 state UP\n    inet6 fd00::1/64 dadfailed\n").interfaces
    assert i.addr_flags == {"fd00::1/64": ["dadfailed"]}


@pytest.mark.parametrize("state", ip.OPER_STATES)
def test_every_operstate_in_brief(state: str) -> None:
    f = parse(f"lo UNKNOWN 127.0.0.1/8\nx0 {state} 10.0.0.1/24\n")
    assert f.form == "brief" and f.by_name()["x0"].state == state
    assert ip.OPER_STATES == ("UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP")


@pytest.mark.parametrize("state", ["DOWN", "LOWERLAYERDOWN", "NOTPRESENT", "DORMANT", "TESTING"])
def test_down_states_win_over_lower_up(state: str) -> None:
    assert not Interface("x", state=state, flags=["UP", "LOWER_UP"]).up


@pytest.mark.parametrize("word", ["show", "sh", "s", "list", "ls", "lst", "up", "dynamic", "permanent", "primary",
                                  "secondary"])
def test_requested_skips_listing_words(word: str) -> None:
    assert ip._requested(f"ip addr {word}") == [] and ip._requested(f"ip addr show {word}") == []


@pytest.mark.parametrize(("enc", "link_type"), [("Ethernet", "ether"), ("Local Loopback", "loopback"),
                                                ("InfiniBand", "infiniband"), ("Point-to-Point Protocol", "ppp"),
                                                ("UNSPEC", "none")])
def test_every_old_ifconfig_encapsulation(enc: str, link_type: str) -> None:
    [i] = parse(f"eth9      Link encap:{enc}  HWaddr 00:0C:29:3B:2A:1C\n          UP RUNNING  MTU:1500  Metric:1\n"
                ).interfaces
    assert i.link_type == link_type


def test_global_v6_with_a_zone() -> None:
    assert Interface("x", addresses=["fd00::1%eth0"]).global_addresses == ["fd00::1%eth0"]


def test_json_kind() -> None:
    assert ip._json_interface({"ifname": "br0", "linkinfo": {"info_kind": "bridge"}}).kind == "bridge"


def test_address_with_its_prefix_keeps_it() -> None:
    [i] = parse("eth0: flags=4163<UP,RUNNING>  mtu 1500\n        inet 10.0.0.1/24  netmask 255.255.0.0\n").interfaces
    assert i.addresses == ["10.0.0.1/24"]


def test_an_indented_header_belongs_to_the_interface_above() -> None:
    f = parse("1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 state UNKNOWN\n 2: eth0: <UP,LOWER_UP> mtu 1500 state UP\n")
    assert [i.name for i in f.interfaces] == ["lo"]


def test_detail_lines_that_lost_their_indentation() -> None:
    [i] = parse("2: eth0: <UP,LOWER_UP> mtu 1500 state UP\nlink/ether aa:bb\ninet 10.0.0.1/24 scope global eth0\n"
                "altname enp1s0\n").interfaces
    assert (i.link_type, i.addresses, i.altnames) == ("ether", ["10.0.0.1/24"], ["enp1s0"])


def test_brief_lines_only_in_a_brief_document() -> None:
    f = parse("2: eth0: <UP,LOWER_UP> mtu 1500 state UP\n    link/ether aa:bb\neth1 UP 10.0.0.1/24\n")
    assert [i.name for i in f.interfaces] == ["eth0"] and f.form == "text"


def test_stats_with_more_values_than_names() -> None:
    text = "2: eth0: <UP,LOWER_UP> mtu 9000 state UP\n    RX: bytes packets errors\n    1 2 3 4 5\n"
    assert parse(text).interfaces[0].stats == {"rx_errors": 3}


def test_problems_keep_the_first_three_lines() -> None:
    assert parse("a\nb\nc\nd\n").problems == ["a", "b", "c"]


@pytest.mark.parametrize("text", ["the mtu is 1500\nset mtu 9000 on the switch\n",
                                  "eth0 inet 10.0.0.1/24 brd 10.0.0.255 scope global eth0\n"
                                  "2: eno1: <BROADCAST,UP> mtu 1500\n"])
def test_detect_needs_real_headers(text: str) -> None:
    assert not ip.detect(doc(text))


# ---------------------------------------------------------------------------------------------
# grep'd fragments: lines of `ip link` / `ip -o link` / `ip addr` kept by grep, read for what they show


def test_one_grepped_link_line_is_read_for_mtu_and_state() -> None:
    text = "6: ib0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 2044 qdisc mq state UP mode DEFAULT group default qlen 256\n"
    assert ip.detect(doc(text))
    i = by(text)["ib0"]
    assert (i.mtu, i.state, i.up, i.link_type) == (2044, "UP", True, "")


@pytest.mark.parametrize("tail", ["qdisc noop state DOWN qlen 1000", "qdisc mq master bond0 state UP",
                                  "state UNKNOWN mode DEFAULT"])
def test_link_tails_that_make_one_line_enough(tail: str) -> None:
    assert ip.detect(doc(f"3: ens5f0: <BROADCAST,MULTICAST,UP> mtu 9000 {tail}\n"))


def test_pdsh_prefixed_link_lines_are_one_document_per_host() -> None:
    text = ("gpu001: 6: ib0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 2044 qdisc mq state UP group default qlen 256\n"
            "gpu002: 6: ib0: <NO-CARRIER,BROADCAST,MULTICAST,UP> mtu 4092 qdisc mq state DOWN group default qlen 256\n")
    docs = frame(text).docs
    assert [d.host for d in docs] == ["gpu001", "gpu002"]
    assert all(ip.detect(d) for d in docs)
    got = [ip.parse(d).by_name()["ib0"] for d in docs]
    assert [(i.mtu, i.state, i.up) for i in got] == [(2044, "UP", True), (4092, "DOWN", False)]


def test_grep_A1_of_ip_a_with_separators() -> None:
    text = ("4: ib0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 2044 qdisc mq state UP group default qlen 256\n"
            "    link/infiniband 00:00:10:49:fe:80:00:00:00:00:00:00:b8:59:9f:03:00:c4:2f:f0 brd "
            "00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff\n"
            "--\n"
            "5: ib1: <BROADCAST,MULTICAST> mtu 4092 qdisc noop state DOWN group default qlen 256\n"
            "    inet 10.1.0.6/16 brd 10.1.255.255 scope global ib1\n")
    got = by(text)
    assert (got["ib0"].mtu, got["ib0"].up, got["ib0"].link_type) == (2044, True, "infiniband")
    assert (got["ib1"].mtu, got["ib1"].up, got["ib1"].admin_up) == (4092, False, False)
    assert got["ib1"].addresses == ["10.1.0.6/16"]
