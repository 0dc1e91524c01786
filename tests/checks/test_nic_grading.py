"""net.nic grading (checks/network.py, checks/nic_mtu.py): every finding code, its summary and
boundaries, on listings written inline in ip's real layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight import profile as profiles
from preflight.checks import network as net
from preflight.checks import nic_mtu
from preflight.model import Result, Status
from preflight.parsers.ip import Interface
from tests.conftest import capture, grade, grade_text

LO = "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN group default qlen 1000\n" \
     "    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n"


def hdr(n: int, name: str, flags: str = "BROADCAST,MULTICAST,UP,LOWER_UP", mtu: int = 9000, state: str = "UP",
        extra: str = "", link: str = "ether", addrs: tuple[str, ...] = ()) -> str:
    qdisc = "noop" if "UP" not in flags.split(",") else "mq"
    text = f"{n}: {name}: <{flags}> mtu {mtu} qdisc {qdisc} {extra}state {state} group default qlen 1000\n" \
           f"    link/{link} 0c:42:a1:3e:71:{n:02x} brd ff:ff:ff:ff:ff:ff\n"
    for a in addrs:
        fam = "inet6" if ":" in a else "inet"
        text += f"    {fam} {a} scope {'link' if a.startswith('fe80') else 'global'} {name}\n" \
                "       valid_lft forever preferred_lft forever\n"
    return text


NC = "NO-CARRIER,BROADCAST,MULTICAST,UP"
ADMIN_DOWN = "BROADCAST,MULTICAST"


def nic(text: str, profile: str = "generic", **inputs: str) -> Result:
    ins = {"ip-addr": text, **{k.replace("_", "-"): v for k, v in inputs.items()}}
    [r] = grade_text("net.nic", ins, profile=profile)
    return r


def codes(r: Result) -> list[str]:
    return list(r.facts.get("codes", []))


@pytest.fixture()
def prof() -> profiles.Profile:
    return profiles.load("generic")


def site(tmp_path: Path, net_keys: str, parent: str = "generic") -> str:
    p = tmp_path / "site.toml"
    p.write_text(f'[profile]\nname = "site"\nextends = "{parent}"\n[net]\n{net_keys}\n')
    return str(p)


# ----------------------------------------------------------------------------- classification

def test_match_any() -> None:
    assert net.match_any("docker0", ["docker"]) and net.match_any("ens9f0np0", ["ens*f0*"])
    assert net.match_any("eth0", ["eth0"]) and net.match_any("eth0", ["e?h0"]) and net.match_any("eth1", ["eth[01]"])
    assert not net.match_any("eth0", ["ens*"]) and not net.match_any("eth0", []) and not net.match_any("e", ["eth"])


@pytest.mark.parametrize(("iface", "cls"), [
    (Interface("lo"), "loopback"),
    (Interface("loop0", link_type="loopback"), "loopback"),
    (Interface("eth0", kind="veth"), "virtual"),
    (Interface("foo0", kind="bridge"), "virtual"),
    (Interface("docker0"), "virtual"),
    (Interface("wg0"), "virtual"),
    (Interface("ib0", link_type="infiniband"), "ipoib"),
    (Interface("ibx", kind="ipoib"), "ipoib"),
    (Interface("ib0"), "ipoib"),
    (Interface("ibp26s0"), "ipoib"),
    (Interface("ib0", link_type="ether"), "data"),
    (Interface("wlp2s0", link_type="ether"), "wireless"),
    (Interface("wwan0"), "wireless"),
    (Interface("t0", link_type="none"), "virtual"),
    (Interface("t0", link_type="ipip"), "virtual"),
    (Interface("t0", link_type="gre"), "virtual"),
    (Interface("t0", link_type="sit"), "virtual"),
    (Interface("t0", link_type="void"), "virtual"),
    (Interface("t0", link_type="tunnel6"), "virtual"),
    (Interface("t0", link_type="gre6"), "virtual"),
    (Interface("t0", link_type="ip6gre"), "virtual"),
    (Interface("mlx0", link_type="none", parentbus="pci"), "data"),
    (Interface("eno1", link_type="ether", kind="bond"), "data"),
    (Interface("eno1"), "data"),
])
def test_classify(iface: Interface, cls: str, prof: profiles.Profile) -> None:
    assert net.classify(iface, prof) == cls


def test_data_plane_choices(prof: profiles.Profile, tmp_path: Path) -> None:
    ifaces = [Interface("lo", link_type="loopback"), Interface("eno1"), Interface("ens1f0", master="bond0"),
              Interface("bond0"), Interface("ib0", link_type="infiniband"), Interface("docker0"),
              Interface("wlp2s0")]
    dp, how = net.data_plane(ifaces, prof, {})
    assert [i.name for i in dp] == ["eno1", "bond0", "ib0"] and how == "auto"
    dp, how = net.data_plane(ifaces, prof, {"NCCL_SOCKET_IFNAME": "=ens1f0,docker0"})
    assert [i.name for i in dp] == ["ens1f0"] and how == "env"
    dp, how = net.data_plane(ifaces, prof, {"NCCL_SOCKET_IFNAME": "^docker"})
    assert how == "auto"
    dp, how = net.data_plane(ifaces, prof, {"NCCL_SOCKET_IFNAME": "docker"})
    assert how == "auto" and [i.name for i in dp] == ["eno1", "bond0", "ib0"]
    dp, how = net.data_plane(ifaces, prof, {"NCCL_SOCKET_IFNAME": " "})
    assert how == "auto"
    declared = profiles.load(site(tmp_path, 'interfaces = { value = ["lo", "ens1*", "ib"], source = "site" }'))
    dp, how = net.data_plane(ifaces, declared, {"NCCL_SOCKET_IFNAME": "=eno1"})
    assert [i.name for i in dp] == ["ens1f0", "ib0"] and how == "profile"


def test_first_data(prof: profiles.Profile) -> None:
    up = ["UP", "LOWER_UP"]
    ifaces = [Interface("eno1", flags=up, addresses=["10.0.0.1/24"]), Interface("eno2", flags=up),
              Interface("eno3", addresses=["10.0.0.3/24"]), Interface("docker0", flags=up, addresses=["172.17.0.1/16"]),
              Interface("eno4", flags=up, addresses=["10.0.0.4/24"]), Interface("eno5", flags=up, addresses=["10.5/8"]),
              Interface("eno6", flags=up, addresses=["10.0.0.6/24"])]
    assert net._first_data(ifaces, prof) == ["eno1", "eno4"]


# ----------------------------------------------------------------------------- state

def test_healthy_listing_passes_with_its_summary() -> None:
    r = nic(LO + hdr(2, "eno1", mtu=1500, addrs=("10.10.4.21/24",)) + hdr(3, "ens9f0np0", addrs=("10.45.3.21/16",)))
    assert r.status is Status.PASS and codes(r) == []
    assert r.summary == "2 data-plane NIC(s) up: eno1 (mtu 1500), ens9f0np0 (mtu 9000)"
    assert r.evidence[0].startswith("2: eno1: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500")
    assert r.facts["data_plane"] == ["eno1", "ens9f0np0"] and r.facts["data_plane_from"] == "auto"
    assert r.facts["shown"] == "all" and r.facts["links"] == [] and r.facts["flaps"] == []
    assert r.facts["interfaces"][1] == {"name": "eno1", "mtu": 1500, "state": "UP", "up": True, "class": "data",
                                        "kind": "", "link_type": "ether", "addresses": ["10.10.4.21/24"], "master": "",
                                        "speed_mbps": None}


def test_addressed_nic_down_fails() -> None:
    r = nic(LO + hdr(2, "eno1", addrs=("10.10.4.21/24",)) + hdr(3, "ens9f0np0", NC, state="DOWN",
                                                                 addrs=("10.45.3.21/16",)))
    assert r.status is Status.FAIL and codes(r) == ["net.nic/addressed-nic-down"]
    assert r.summary == "ens9f0np0 is DOWN with address 10.45.3.21/16"
    assert r.evidence == ["3: ens9f0np0: <NO-CARRIER,BROADCAST,MULTICAST,UP> mtu 9000 qdisc mq state DOWN group "
                          "default qlen 1000"]
    assert "cable" in r.remedy and "ens9f0np0" in r.remedy


def test_no_carrier_configured_like_the_carrying_ports_warns() -> None:
    r = nic(LO + hdr(2, "ens9f0np0") + hdr(3, "ens9f1np1", NC, state="DOWN") + hdr(4, "ens10f0np0", NC, state="DOWN"))
    assert r.status is Status.WARN and codes(r) == ["net.nic/no-carrier"]
    assert r.summary == "2 ports are up but without carrier (ens9f1np1, ens10f0np0) while ens9f0np0 has one"
    assert len(r.evidence) == 2 and r.remedy.startswith("check the cable/transceiver and the switch port of each")
    r = nic(LO + hdr(2, "ens9f0np0") + hdr(5, "ens9f2", mtu=9000) + hdr(3, "ens9f1np1", NC, state="DOWN"))
    assert r.summary == "ens9f1np1 is up but has no carrier while ens9f0np0, ens9f2 have one"
    assert r.remedy.startswith("check the cable/transceiver and the switch port of ens9f1np1 (`ip link set ens9f1np1 up`")


def test_no_carrier_left_at_another_mtu_is_an_unused_port() -> None:
    r = nic(LO + hdr(2, "eno1") + hdr(3, "eno2", NC, mtu=1500, state="DOWN"))
    assert r.status is Status.PASS and codes(r) == []
    assert "eno2 down with no address (unused port?)" in r.evidence


def test_lone_no_carrier_port_is_unused() -> None:
    r = nic(LO + hdr(2, "eno1", NC, mtu=1500, state="DOWN") + hdr(3, "wlp2s0", mtu=1500))
    assert r.status is Status.PASS and r.summary == "data-plane NICs up"
    assert r.evidence == ["eno1 down with no address (unused port?)"]


def test_no_carrier_port_at_a_set_mtu_was_configured(tmp_path: Path) -> None:
    # no port carries, but someone set 9000 (or 1499) on it: configured for a network
    r = nic(LO + hdr(2, "eno1", NC, state="DOWN") + hdr(3, "wlp2s0", mtu=1500))
    assert r.status is Status.WARN and codes(r) == ["net.nic/no-carrier"] and r.summary == "eno1 is up but has no carrier"
    assert codes(nic(LO + hdr(2, "eno1", NC, mtu=1499, state="DOWN"))) == ["net.nic/no-carrier"]
    assert codes(nic(LO + hdr(2, "eno1", NC, mtu=1501, state="DOWN"))) == ["net.nic/no-carrier"]
    # ... left at the default next to carrying ports at another MTU: unused
    assert codes(nic(LO + hdr(2, "eno1", mtu=4200) + hdr(3, "eno2", NC, mtu=1500, state="DOWN"))) == []
    # a site without a default MTU compares with the carrying ports only
    p = site(tmp_path, 'default_mtu = { value = 0, source = "site" }')
    assert codes(nic(LO + hdr(2, "eno1", NC, state="DOWN") + hdr(3, "wlp2s0", mtu=1500), profile=p)) == []
    assert codes(nic(LO + hdr(2, "eno1", mtu=9000) + hdr(3, "eno2", NC, state="DOWN"), profile=p)) == [
        "net.nic/no-carrier"]


IB_NC = "NO-CARRIER,BROADCAST,MULTICAST,UP"


def ib(n: int, name: str, flags: str = IB_NC, mtu: int = 4092, state: str = "DOWN") -> str:
    return hdr(n, name, flags, mtu=mtu, state=state, link="infiniband")


def test_ipoib_port_without_carrier_warns_whatever_its_mtu(tmp_path: Path) -> None:
    # the Ethernet ports run 9000, IPoIB 4092: MTUs of two link types are not compared
    r = nic(LO + hdr(2, "int0", addrs=("10.0.5.121/21",)) + ib(3, "ibp194s0f1"))
    assert r.status is Status.WARN and codes(r) == ["net.nic/ib-port-no-carrier"]
    assert r.summary == "ibp194s0f1 is up but has no carrier (no InfiniBand link)"
    assert r.evidence == ["3: ibp194s0f1: <NO-CARRIER,BROADCAST,MULTICAST,UP> mtu 4092 qdisc mq state DOWN group "
                          "default qlen 1000"]
    assert r.remedy == ("check the cable/transceiver and the switch port of ibp194s0f1 (`ibstat`: port State Down, "
                        "Physical state Polling); if a port is unused, leave it administratively down")
    # alone on the node, at 2044 or 65520 (connected mode): the same
    assert codes(nic(LO + ib(2, "ib0", mtu=2044))) == ["net.nic/ib-port-no-carrier"]
    assert codes(nic(LO + ib(2, "ib0", mtu=65520))) == ["net.nic/ib-port-no-carrier"]
    # not by its MTU: without a default MTU and without an IPoIB port that carries, still a WARN
    p = site(tmp_path, 'default_mtu = { value = 0, source = "site" }')
    assert codes(nic(LO + hdr(2, "eno1", mtu=4092) + ib(3, "ib0", mtu=2044), profile=p)) == [
        "net.nic/ib-port-no-carrier"]
    # an IPoIB port brought down administratively is unused
    r = nic(LO + hdr(2, "eno1", mtu=1500) + ib(3, "ib0", ADMIN_DOWN))
    assert r.status is Status.PASS and r.evidence[-1] == "ib0 down with no address (unused port?)"


def test_ipoib_ports_without_carrier_name_the_ib_ports_that_carry() -> None:
    r = nic(LO + ib(2, "ib0", "BROADCAST,MULTICAST,UP,LOWER_UP", state="UP") + ib(3, "ib1") + ib(4, "ib2", mtu=2044)
            + hdr(5, "eno1", mtu=4092))
    assert codes(r) == ["net.nic/ib-port-no-carrier"]
    assert r.summary == "2 InfiniBand ports are up but without carrier (ib1, ib2) while ib0 has one"
    assert r.remedy == ("check the cable/transceiver and the switch port of each (`ibstat`); if a port is unused, "
                        "leave it administratively down")
    assert len(r.evidence) == 2


def test_ethernet_and_ipoib_ports_without_carrier_are_two_findings() -> None:
    text = LO + hdr(2, "ens9f0np0", addrs=("10.45.3.21/16",)) + hdr(3, "ens10f0np0", NC, state="DOWN") \
        + ib(4, "ibp26s0") + hdr(5, "eno2", NC, mtu=1500, state="DOWN")
    r = nic(text)
    assert codes(r) == ["net.nic/no-carrier", "net.nic/ib-port-no-carrier"]
    assert r.summary == ("ens10f0np0 is up but has no carrier while ens9f0np0 has one; "
                         "ibp26s0 is up but has no carrier (no InfiniBand link)")
    # an Ethernet port at IPoIB's MTU is not configured like an IPoIB port that carries
    r = nic(LO + ib(2, "ib0", "BROADCAST,MULTICAST,UP,LOWER_UP", state="UP") + hdr(3, "eno1", mtu=1500)
            + hdr(4, "eno2", NC, mtu=1500, state="DOWN") + hdr(5, "eno3", NC, mtu=1500, state="DOWN"))
    assert codes(r) == ["net.nic/no-carrier"] and r.summary == (
        "2 ports are up but without carrier (eno2, eno3) while eno1 has one")


def test_ifconfig_ipoib_up_not_running() -> None:
    text = ("$ /sbin/ifconfig\n"
            "enp65s0f0: flags=4099<UP,BROADCAST,MULTICAST>  mtu 1500\n"
            "        ether 3c:ec:ef:10:22:4a  txqueuelen 1000  (Ethernet)\n"
            "        RX packets 0  bytes 0 (0.0 B)\n\n"
            "ibs2: flags=4099<UP,BROADCAST,MULTICAST>  mtu 2044\n"
            "Infiniband hardware address can be incorrect! Please read BUGS section in ifconfig(8).\n"
            "        infiniband 00:00:01:07:FE:80:00:00:00:00:00:00:00:00:00:00:00:00:00:00  txqueuelen 256  "
            "(InfiniBand)\n\n"
            "eth9: flags=4163<UP,BROADCAST,RUNNING,MULTICAST>  mtu 9000\n"
            "        inet 172.20.3.14  netmask 255.255.0.0  broadcast 172.20.255.255\n"
            "        ether 3c:ec:ef:10:22:50  txqueuelen 1000  (Ethernet)\n")
    r = nic(text)
    assert codes(r) == ["net.nic/ib-port-no-carrier"]
    assert r.summary == "ibs2 is up but has no carrier (no InfiniBand link)"
    assert "enp65s0f0 down with no address (unused port?)" in r.evidence


def test_admin_down_port_is_unused_and_requested_one_warns() -> None:
    text = LO + hdr(2, "eno1", addrs=("10.0.0.1/24",)) + hdr(3, "eno2", ADMIN_DOWN, mtu=1500, state="DOWN")
    r = nic(text)
    assert r.status is Status.PASS and "eno2 down with no address (unused port?)" in r.evidence
    r = nic("$ ip addr show eno2\n" + hdr(3, "eno2", ADMIN_DOWN, mtu=1500, state="DOWN"))
    assert r.status is Status.WARN and codes(r) == ["net.nic/requested-nic-down"]
    assert r.summary == "eno2 is administratively down" and r.facts["shown"] == ["eno2"]
    r = nic("$ ip addr show eno2\n" + hdr(3, "eno2", NC, mtu=1500, state="DOWN"))
    assert codes(r) == ["net.nic/no-carrier"] and r.summary == "eno2 is up but has no carrier"


def test_declared_nic_down_fails(tmp_path: Path) -> None:
    p = site(tmp_path, 'interfaces = { value = ["ens9f1np1"], source = "site" }')
    r = nic(LO + hdr(2, "ens9f0np0") + hdr(3, "ens9f1np1", ADMIN_DOWN, state="DOWN"), profile=p)
    assert r.status is Status.FAIL and codes(r) == ["net.nic/declared-nic-down"] and r.summary == "ens9f1np1 is DOWN"
    assert "drain the node" in r.remedy
    r = nic(LO + hdr(2, "ens9f0np0") + hdr(3, "ens9f1np1", ADMIN_DOWN, state=""), profile=p)
    assert r.summary == "ens9f1np1 is down"


def test_declared_nic_missing_and_no_data_nic(tmp_path: Path) -> None:
    p = site(tmp_path, 'interfaces = { value = ["ens9f0np0", "ens10*"], source = "site: rails" }')
    r = nic(LO + hdr(2, "ens9f0np0"), profile=p)
    assert codes(r) == ["net.nic/declared-nic-missing"] and r.summary == "data-plane interface ens10* is missing"
    assert r.evidence == ["no interface matching ens10* among the 2 listed", "interfaces present: lo, ens9f0np0",
                          "net.interfaces = ['ens9f0np0', 'ens10*'] (site: rails)"]
    r = nic(LO + hdr(2, "docker0", link="ether", mtu=1500) + hdr(3, "wlp2s0", mtu=1500))
    assert codes(r) == ["net.nic/no-data-nic"] and r.status is Status.WARN
    assert r.summary == "no data-plane NIC found (only loopback/virtual/wireless interfaces)"
    assert len(r.evidence) == 3
    r = nic("$ ip addr show docker0\n" + hdr(2, "docker0"))
    assert r.status is Status.PASS


def test_bond_member_down(prof: profiles.Profile) -> None:
    bond = hdr(4, "bond0", "BROADCAST,MULTICAST,MASTER,UP,LOWER_UP")
    r = nic(LO + hdr(2, "ens1f0", "BROADCAST,MULTICAST,SLAVE,UP,LOWER_UP", extra="master bond0 ")
            + hdr(3, "ens1f1", "NO-CARRIER,BROADCAST,MULTICAST,SLAVE,UP", state="DOWN", extra="master bond0 ") + bond)
    assert codes(r) == ["net.nic/bond-member-down"] and r.status is Status.WARN
    assert r.summary == "ens1f1 (member of bond0) has no link: bond0 runs degraded"
    assert r.evidence[1].startswith("4: bond0:")
    # a bridge's ports, the master unknown, a virtual member
    r = nic(LO + hdr(2, "eno1", addrs=("10.0.0.1/24",))
            + hdr(3, "veth1", NC, state="DOWN", extra="master docker0 ") + hdr(5, "docker0")
            + hdr(6, "eno3", NC, state="DOWN", extra="master br0 ")
            + "    bridge_slave state disabled priority 32\n")
    assert codes(r) == [], r.summary
    r = nic(LO + hdr(2, "ens1f1", "NO-CARRIER,SLAVE,UP", state="DOWN", extra="master bond9 "))
    assert codes(r) == ["net.nic/bond-member-down"] and r.evidence == [r.evidence[0]]


def test_unknown_link_state_is_not_graded() -> None:
    r = nic("2: eth0    inet 10.0.0.1/24 brd 10.0.0.255 scope global eth0\\       valid_lft forever preferred_lft "
            "forever\n3: eth1    inet 10.1.0.1/24 brd 10.1.0.255 scope global eth1\\       valid_lft forever\n")
    assert r.status is Status.PASS
    assert r.summary == "2 data-plane NIC(s) listed (link state not shown): eth0, eth1"


# ----------------------------------------------------------------------------- MTU

def test_mtu_against_the_profile(tmp_path: Path) -> None:
    text = LO + hdr(2, "eno1", mtu=1500) + hdr(3, "ens9f0np0", mtu=9216) + hdr(4, "ens10f0np0", mtu=9000) \
        + hdr(5, "ib0", link="infiniband", mtu=4092)
    r = nic(text, profile="h100-sxm-8x")
    assert codes(r) == ["net.nic/mtu-below-profile", "net.nic/mtu-above-profile"]
    assert r.summary == "eno1 MTU 1500, expected 9000; ens9f0np0 MTU 9216, above the expected 9000"
    assert any(e.startswith("net.mtu = 9000 (") for e in r.evidence)
    assert "`ip link set dev eno1 mtu 9000`" in r.remedy and "set ens9f0np0 to MTU 9000" in r.remedy
    p = site(tmp_path, 'interfaces = { value = ["eno1"], source = "site" }', parent="h100-sxm-8x")
    r = nic(text, profile=p)
    assert codes(r) == ["net.nic/declared-mtu-below-profile"] and r.status is Status.FAIL


def test_bond_members_differ(prof: profiles.Profile) -> None:
    text = LO + hdr(2, "ens1f0", "SLAVE,UP,LOWER_UP", extra="master bond0 ") \
        + hdr(3, "ens1f1", "SLAVE,UP,LOWER_UP", mtu=1500, extra="master bond0 ") + hdr(4, "bond0", "MASTER,UP,LOWER_UP")
    r = nic(text)
    assert codes(r) == ["net.nic/bond-mtu-mismatch"] and r.status is Status.FAIL
    assert r.summary == "bond0 members differ in MTU: ens1f0 9000 (bond0), ens1f1 1500 (bond0), bond0 9000"
    assert "`ip link set dev bond0 mtu 9000`" in r.remedy and len(r.evidence) == 3
    same = text.replace("mtu 1500", "mtu 9000")
    assert codes(nic(same)) == []
    # the bond's own MTU differs from its members'
    r = nic(same.replace("4: bond0: <MASTER,UP,LOWER_UP> mtu 9000", "4: bond0: <MASTER,UP,LOWER_UP> mtu 1500"))
    assert codes(r) == ["net.nic/bond-mtu-mismatch"] and "bond0 1500" in r.summary


def test_bridge_ports_are_not_a_bond() -> None:
    text = LO + hdr(2, "eno1", mtu=9000, addrs=("10.0.0.1/24",)) \
        + hdr(3, "veth1", mtu=1500, extra="master docker0 ") + hdr(4, "veth2", mtu=1450, extra="master docker0 ") \
        + hdr(5, "docker0", mtu=1500)
    assert codes(nic(text)) == []
    ports = nic(LO + hdr(3, "eno3", mtu=1500, extra="master br0 ") + "    bridge_slave state forwarding x\n"
                + hdr(4, "eno4", mtu=9000, extra="master br0 ") + "    bridge_slave state forwarding x\n")
    assert "net.nic/bond-mtu-mismatch" not in codes(ports)


def test_subnet_mismatch() -> None:
    text = LO + hdr(3, "ens9f0np0", addrs=("10.45.3.21/16",)) + hdr(4, "ens10f0np0", mtu=1500, addrs=("10.45.4.21/16",))
    r = nic(text)
    assert codes(r) == ["net.nic/subnet-mtu-mismatch"] and r.status is Status.FAIL
    assert r.summary == "interfaces on 10.45.0.0/16 differ in MTU: ens9f0np0 9000, ens10f0np0 1500"
    assert "(9000 for jumbo frames)" in r.remedy
    # other subnets, one interface with two addresses in its subnet, a down interface, a virtual one
    assert codes(nic(text.replace("10.45.4.21/16", "10.46.4.21/16"))) == []
    two = LO + hdr(3, "eth0", addrs=("10.45.3.21/16", "10.45.3.22/16"))
    assert codes(nic(two)) == []
    down = LO + hdr(3, "ens9f0np0", addrs=("10.45.3.21/16",)) + hdr(4, "docker0", mtu=1500, addrs=("10.45.4.21/16",))
    assert codes(nic(down)) == []


def test_adapter_mismatch() -> None:
    text = LO + hdr(2, "ens5f0", "SLAVE,UP,LOWER_UP", mtu=1500, extra="master bond1 ") \
        + hdr(3, "ens5f1", "SLAVE,UP,LOWER_UP", extra="master bond0 ") + hdr(4, "ens6f1")
    r = nic(text)
    assert codes(r) == ["net.nic/adapter-mtu-mismatch"] and r.status is Status.WARN
    assert r.summary == "ports of adapter ens5 differ in MTU: ens5f0 1500 (bond1), ens5f1 9000 (bond0)"
    assert r.remedy == "if ens5f0 carries the same fabric as the others, set it to MTU 9000 (and its bond) and persist it"
    three = text + hdr(5, "ens5f2", mtu=1500) + hdr(6, "ens5f3", mtu=9000)
    assert nic(three).remedy.startswith("if ens5f0, ens5f2 carry the same fabric as the others, set them to MTU 9000 "
                                        "(and their bond)")
    # ports brought down, VLANs, names that say no adapter, one bond already reported
    assert codes(nic(LO + hdr(2, "ens5f0", ADMIN_DOWN, mtu=1500, state="DOWN") + hdr(3, "ens5f1"))) == []
    assert codes(nic(LO + hdr(2, "eno1", mtu=1500) + hdr(3, "eno2"))) == []
    # a port without link or address left at the default MTU is unused: its MTU is not compared
    assert codes(nic(LO + hdr(2, "enp45s0f0", addrs=("10.0.2.87/24",)) + hdr(3, "enp45s0f1", NC, mtu=1500,
                                                                              state="DOWN"))) == []
    # ... set to another MTU (configured), or with an address, it is
    r = nic(LO + hdr(2, "enp45s0f0") + hdr(3, "enp45s0f1", NC, mtu=9216, state="DOWN"))
    assert codes(r) == ["net.nic/adapter-mtu-mismatch", "net.nic/no-carrier"]
    r = nic(LO + hdr(2, "enp45s0f0") + hdr(3, "enp45s0f1", NC, mtu=1500, state="DOWN", addrs=("10.3.0.87/24",)))
    assert codes(r) == ["net.nic/addressed-nic-down", "net.nic/adapter-mtu-mismatch"]
    # a port left at the default MTU without carrier next to carrying ports at 1500 is configured like them
    r = nic(LO + hdr(2, "enp45s0f0", mtu=1500) + hdr(3, "enp45s0f1", NC, mtu=1500, state="DOWN")
            + hdr(4, "enp46s0f0", mtu=9000) + hdr(5, "enp46s0f1", mtu=9000))
    assert codes(r) == ["net.nic/no-carrier"]
    bond = LO + hdr(2, "ens5f0", "SLAVE,UP,LOWER_UP", mtu=1500, extra="master bond0 ") \
        + hdr(3, "ens5f1", "SLAVE,UP,LOWER_UP", extra="master bond0 ")
    assert codes(nic(bond)) == ["net.nic/bond-mtu-mismatch"]


@pytest.mark.parametrize(("name", "stem"), [("ens5f0", "ens5"), ("ens5f1", "ens5"), ("enp226s0f1", "enp226s0"),
                                            ("enp194s0f1np1", "enp194s0"), ("ens108np0", "ens108"),
                                            ("ens9f0np0", "ens9"), ("enP2p1s0f0", "enP2p1s0"), ("ibp26s0", "ibp26s0"),
                                            ("ens3d1", "ens3"), ("eno1", ""), ("eth0", ""), ("bond0", ""),
                                            ("ens5f0.100", ""), ("enx0c42a13e71d0", "")])
def test_adapter_of(name: str, stem: str) -> None:
    assert nic_mtu.adapter_of(name) == stem


def test_bridge_above_the_uplink() -> None:
    text = LO + hdr(2, "ens3", mtu=1400) + hdr(3, "docker0", mtu=1500) + hdr(4, "vxlan0", mtu=1350) \
        + hdr(5, "wg0", "POINTOPOINT,NOARP,UP,LOWER_UP", mtu=1320, state="UNKNOWN", link="none")
    r = nic(text)
    assert codes(r) == ["net.nic/virtual-mtu-above-uplink"] and r.status is Status.WARN
    assert r.summary == "bridge docker0: MTU 1500 exceeds the uplink MTU 1400 (ens3)"
    assert r.evidence[0].startswith("3: docker0:") and r.evidence[1].startswith("2: ens3:")
    assert r.remedy.startswith("set docker0's MTU to 1400 (Docker:")


@pytest.mark.parametrize(("name", "mtu", "warns"), [("vxlan0", 1351, True), ("vxlan0", 1350, False),
                                                    ("wg0", 1341, True), ("wg0", 1340, False),
                                                    ("flannel.1", 1351, True), ("genev_sys_6081", 1351, True),
                                                    ("tunl0", 1381, True), ("tunl0", 1380, False),
                                                    ("gre1", 1377, True), ("sit1", 1381, True),
                                                    ("br-3e86", 1401, True), ("br-3e86", 1400, False),
                                                    ("veth9", 9000, False), ("tap0", 9000, False)])
def test_overlay_encapsulation_by_name(name: str, mtu: int, warns: bool) -> None:
    r = nic(LO + hdr(2, "ens3", mtu=1400) + hdr(3, name, mtu=mtu))
    assert (codes(r) == ["net.nic/virtual-mtu-above-uplink"]) is warns


def test_overlay_kind_from_linkinfo() -> None:
    text = LO + hdr(2, "eno1", mtu=1500) + hdr(5, "vx100", mtu=1500) + "    vxlan id 100 dstport 4789\n" \
        + hdr(6, "myveth", mtu=9000) + "    veth\n"
    r = nic(text)
    assert codes(r) == ["net.nic/virtual-mtu-above-uplink"]
    assert r.summary == "vxlan vx100: MTU 1500 + 50 encapsulation bytes exceeds the uplink MTU 1500 (eno1)"
    assert r.remedy.startswith("set vx100's MTU to 1450")


def test_overlay_uplinks(prof: profiles.Profile) -> None:
    # the largest uplink counts; a bridge over a NIC is an uplink; wireless uplinks; no uplink: nothing
    text = LO + hdr(2, "eno1", mtu=1500) + hdr(3, "ens9f0np0", mtu=9000) + hdr(4, "docker0", mtu=1500)
    assert codes(nic(text)) == []
    br = LO + hdr(2, "eno1", "SLAVE,UP,LOWER_UP", mtu=9000, extra="master br0 ") + hdr(3, "br0", mtu=9000) \
        + "    bridge forward_delay 1500\n" + hdr(4, "eno2", mtu=1500)
    assert codes(nic(br)) == []
    wl = LO + hdr(2, "wlp2s0", mtu=1500) + hdr(3, "docker0", mtu=1500)
    assert codes(nic(wl)) == ["net.nic/no-data-nic"]
    assert codes(nic(LO + hdr(2, "wlp2s0", mtu=1400) + hdr(3, "docker0", mtu=1500))) == [
        "net.nic/no-data-nic", "net.nic/virtual-mtu-above-uplink"]
    assert codes(nic(LO + hdr(2, "eno1", NC, state="DOWN", mtu=1500) + hdr(3, "docker0", mtu=9000))) == []
    down = LO + hdr(2, "ens3", mtu=1400) + hdr(3, "docker0", ADMIN_DOWN, mtu=1500, state="DOWN")
    assert codes(nic(down)) == []


def test_overlay_kind(prof: profiles.Profile) -> None:
    assert nic_mtu._overlay_kind(Interface("cilium_vxlan"), prof) == "vxlan"
    assert nic_mtu._overlay_kind(Interface("cilium_geneve"), prof) == "geneve"
    assert nic_mtu._overlay_kind(Interface("cni0"), prof) == "bridge"
    assert nic_mtu._overlay_kind(Interface("x", kind="vxlan"), prof) == "vxlan"
    assert nic_mtu._overlay_kind(Interface("docker0", kind="veth"), prof) == ""
    assert nic_mtu._overlay_kind(Interface("eno1"), prof) == ""


# ----------------------------------------------------------------------------- addresses

def test_no_ipv4_next_to_one_with() -> None:
    text = LO + hdr(3, "ens108np0", addrs=("172.31.31.1/24",)) + hdr(4, "ens110np0", addrs=("fe80::1/64",)) \
        + hdr(5, "ens111np0")
    r = nic(text)
    assert codes(r) == ["net.nic/no-ipv4-address"]
    assert r.facts["problems"] == ["ens110np0 is up with only an IPv6 link-local address, unlike ens108np0 "
                                   "(172.31.31.1/24)", "ens111np0 is up with no address, unlike ens108np0 "
                                   "(172.31.31.1/24)"]
    # a link listing shows no addresses; nobody with IPv4; a VLAN parent
    assert codes(nic(text.replace("    inet 172.31.31.1/24 scope global ens108np0\n", ""))) == []
    link = LO + "2: eth0: <UP,LOWER_UP> mtu 1500 qdisc mq state UP mode DEFAULT\n    link/ether aa:bb\n"
    assert codes(nic(link)) == []
    vlan = LO + hdr(2, "bond0") + hdr(3, "bond0.210@bond0", addrs=("10.0.0.1/24",)).replace("bond0.210@bond0:",
                                                                                           "bond0.210@bond0:")
    assert codes(nic(vlan)) == []


def test_duplicate_address_detection() -> None:
    text = LO + hdr(3, "eno1", addrs=("10.0.0.1/24",)) \
        + "    inet6 fd00::21/64 scope global dadfailed tentative\n    inet6 fe80::21/64 scope link tentative dadfailed\n" \
        + "    inet6 fd00::22/64 scope global tentative\n    inet6 2001:db8::22/64 scope global dynamic deprecated\n" \
        + hdr(4, "docker0", addrs=("172.17.0.1/16",)) + "    inet6 fd01::1/64 scope global dadfailed\n"
    r = nic(text)
    assert codes(r) == ["net.nic/address-dadfailed", "net.nic/link-local-dadfailed"]
    assert r.facts["problems"] == ["eno1: address fd00::21/64 failed duplicate address detection",
                                   "eno1: link-local fe80::21/64 failed duplicate address detection"]
    assert r.evidence[:2] == ["inet6 fd00::21/64 scope global dadfailed tentative", "3: eno1: <BROADCAST,MULTICAST,UP,"
                              "LOWER_UP> mtu 9000 qdisc mq state UP group default qlen 1000"]
    assert "inet6 fe80::21/64 scope link tentative dadfailed" in r.evidence
    assert "eno1: fd00::22/64 is tentative (duplicate address detection running)" in r.evidence
    assert "eno1: 2001:db8::22/64 is deprecated (its preferred lifetime ended)" in r.evidence
    assert "eno1: fd00::21/64 is tentative (duplicate address detection running)" not in r.evidence


# ----------------------------------------------------------------------------- speed, ethtool

def test_speed_against_the_profile(tmp_path: Path) -> None:
    p = site(tmp_path, 'min_speed_mbps = { value = 200000, source = "site: 200G" }')
    text = LO + hdr(2, "eno1") + hdr(3, "ens9f0np0") + hdr(4, "ens10f0np0")
    speed = "/sys/class/net/eno1/speed:-1\n/sys/class/net/ens9f0np0/speed:100000\n/sys/class/net/ens10f0np0/speed:200000\n"
    r = nic(text, profile=p, ip_speed=speed)
    assert codes(r) == ["net.nic/link-slow"] and r.summary == "ens9f0np0 links at 100000 Mb/s, expected at least 200000"
    assert r.evidence == ["/sys/class/net/ens9f0np0/speed:100000", "net.min_speed_mbps = 200000 (site: 200G)"]
    assert r.facts["interfaces"][2]["speed_mbps"] == 100000
    p2 = site(tmp_path, 'min_speed_mbps = { value = 200000, source = "s" }\ninterfaces = { value = ["ens"], source = "s" }')
    assert codes(nic(text, profile=p2, ip_speed=speed)) == ["net.nic/declared-link-slow"]
    assert codes(nic(text, ip_speed=speed)) == []


ETH = "Settings for {dev}:\n\tSpeed: {speed}\n\tLanes: 4\n\tDuplex: {duplex}\n\tLink detected: {link}\n"


def test_ethtool_links(tmp_path: Path) -> None:
    p = site(tmp_path, 'min_speed_mbps = { value = 400000, source = "site" }\ninterfaces = { value = ["ens9"], '
                       'source = "site" }')
    text = ETH.format(dev="ens9f0np0", speed="200000Mb/s", duplex="Half", link="no") \
        + ETH.format(dev="eno1", speed="1000Mb/s", duplex="Full", link="no")
    [r] = grade_text("net.nic", {"ethtool": text}, profile=p)
    assert codes(r) == ["net.nic/declared-no-link", "net.nic/declared-link-slow", "net.nic/half-duplex",
                        "net.nic/ethtool-no-link", "net.nic/link-slow"]
    assert r.facts["links"] == [{"interface": "ens9f0np0", "speed_mbps": 200000, "duplex": "Half", "lanes": 4,
                                 "link_detected": False},
                                {"interface": "eno1", "speed_mbps": 1000, "duplex": "Full", "lanes": 4,
                                 "link_detected": False}]
    [r] = grade_text("net.nic", {"ethtool": ETH.format(dev="eno1", speed="1000Mb/s", duplex="Full", link="yes")},
                     profile="generic")
    assert r.status is Status.PASS and r.summary == "eno1: 1Gb/s, 4 lanes, Full, link up"


def test_ok_summary_parts() -> None:
    links = [{"interface": "a", "speed_mbps": 400000, "lanes": 8, "duplex": "Full", "link_detected": True},
             {"interface": "b", "speed_mbps": 100, "lanes": None, "duplex": "", "link_detected": None},
             {"interface": "c", "speed_mbps": None, "lanes": None, "duplex": "", "link_detected": False}]
    flaps = [{"interface": "eno1"}, {"interface": "eno2"}]
    summary, ev = net._ok_summary([Interface("x", mtu=1500, state="UP", line="L")], links, flaps)
    assert summary == ("1 data-plane NIC(s) up: x (mtu 1500); a: 400Gb/s, 8 lanes, Full, link up; b: 100Mb/s, link "
                       "state not shown; c: speed not shown, no link; no link flaps: eno1, eno2")
    assert ev == ["L"]
    assert net._ok_summary([], [], []) == ("data-plane NICs up", [])
    assert net._speed_text(1000) == "1Gb/s" and net._speed_text(999) == "999Mb/s" and net._speed_text(0) == "speed not shown"


# ----------------------------------------------------------------------------- variables

def test_socket_ifname_findings() -> None:
    text = LO + hdr(2, "eno1", addrs=("10.0.0.1/24",)) + hdr(3, "docker0", addrs=("172.17.0.1/16",)) \
        + hdr(4, "eth5", NC, state="DOWN", mtu=1500)
    cases = {
        "NCCL_SOCKET_IFNAME=\n": [],
        "NCCL_SOCKET_IFNAME=,\n": ["net.nic/socket-ifname-empty"],
        "NCCL_SOCKET_IFNAME=ib\n": ["net.nic/socket-ifname-no-match"],
        "NCCL_SOCKET_IFNAME=^eno,eth\n": ["net.nic/socket-ifname-allows-virtual"],
        "NCCL_SOCKET_IFNAME==eth5\n": ["net.nic/socket-ifname-all-down"],
        "NCCL_SOCKET_IFNAME==eno1\n": [],
        "GLOO_SOCKET_IFNAME=eth\n": ["net.nic/gloo-ifname-no-match"],
        "GLOO_SOCKET_IFNAME=eno1,docker0\n": ["net.nic/gloo-ifname-allows-virtual"],
        "GLOO_SOCKET_IFNAME=eth5\n": ["net.nic/gloo-ifname-all-down"],
        "GLOO_SOCKET_IFNAME= , \n": ["net.nic/gloo-ifname-empty"],
    }
    for env, want in cases.items():
        r = nic(text, env="PATH=/usr/bin\nHOME=/root\n" + env)
        assert [c for c in codes(r) if "ifname" in c] == want, env
    r = nic(text, env="PATH=/usr/bin\nHOME=/root\nNCCL_SOCKET_IFNAME=ib\n")
    assert r.summary == "NCCL_SOCKET_IFNAME entry 'ib' matches no interface on this node"
    assert r.evidence[:2] == ["NCCL_SOCKET_IFNAME=ib", "interfaces: docker0, eno1, eth5, lo"]
    r = nic(text, env="PATH=/usr/bin\nHOME=/root\nNCCL_SOCKET_IFNAME=^eth\n")
    assert r.summary == "NCCL_SOCKET_IFNAME=^eth allows lo, docker0 (loopback/container/virtual interfaces)"
    assert "'=eno1'" in r.remedy


def test_socket_ifname_remedy_without_an_addressed_nic() -> None:
    r = nic(LO + hdr(2, "eno1"), env="PATH=/usr/bin\nHOME=/root\nNCCL_SOCKET_IFNAME=lo\n")
    assert r.remedy == "narrow NCCL_SOCKET_IFNAME to the data-plane NICs, e.g. '=eth0'"


def _hca(env: str, ib: str | None, rc: int = 0) -> Result:
    caps = {"ip-addr": capture("ip-addr", LO + hdr(2, "eno1")), "env": capture("env", "PATH=/x\nHOME=/\n" + env)}
    if ib is not None:
        caps["ib-devices"] = capture("ib-devices", ib, rc=rc)
    [r] = grade("net.nic", caps, profile="generic")
    return r


def test_ib_hca_findings() -> None:
    devs = "mlx5_0\nmlx5_1\nmlx5_10\n"
    assert codes(_hca("NCCL_IB_HCA=mlx5_0\n", None)) == [] and \
        "NCCL_IB_HCA not compared: /sys/class/infiniband was not read" in _hca("NCCL_IB_HCA=mlx5_0\n", None).evidence
    assert codes(_hca("NCCL_IB_HCA=mlx5_0\n", "", rc=2)) == ["net.nic/ib-hca-no-rdma-devices"]
    assert codes(_hca("NCCL_IB_HCA=mlx5_0\n", "ls: cannot access\n")) == ["net.nic/ib-hca-no-rdma-devices"]
    assert codes(_hca("NCCL_IB_HCA=^mlx5_9\n", "", rc=2)) == []
    assert codes(_hca("NCCL_IB_HCA=^mlx5\n", devs)) == ["net.nic/ib-hca-excludes-all"]
    assert codes(_hca("NCCL_IB_HCA=^mlx5_1\n", devs)) == []
    r = _hca("NCCL_IB_HCA=mlx5_1,mlx5_7\n", devs)
    assert codes(r) == ["net.nic/ib-hca-no-match", "net.nic/ib-hca-prefix-ambiguous"]
    assert r.facts["problems"] == ["NCCL_IB_HCA entry 'mlx5_7' matches no RDMA device",
                                   "NCCL_IB_HCA prefix 'mlx5_1' also matches mlx5_10"]
    assert codes(_hca("NCCL_IB_HCA==mlx5_1\n", devs)) == []
    assert codes(_hca("NCCL_IB_HCA=mlx5\n", devs)) == []
    assert _hca("NCCL_IB_HCA=mlx5_0\n", devs).facts["ib_devices"] == ["mlx5_0", "mlx5_1", "mlx5_10"]


def test_ib_disable_on_an_ib_profile(tmp_path: Path) -> None:
    assert codes(_hca("NCCL_IB_DISABLE=1\n", None)) == []
    ib = tmp_path / "ib.toml"
    ib.write_text('[profile]\nname = "ib"\nextends = "generic"\n[nccl]\nexpect_net = { value = "ib", source = "s" }\n')
    caps = {"ip-addr": capture("ip-addr", LO + hdr(2, "eno1")), "env": capture("env", "PATH=/x\nHOME=/\nNCCL_IB_DISABLE=1\n")}
    [r] = grade("net.nic", caps, profile=str(ib))
    assert codes(r) == ["net.nic/ib-disabled-on-ib-profile"]
    assert r.evidence == ["NCCL_IB_DISABLE=1", "nccl.expect_net = ib (s)"]
    caps["env"] = capture("env", "PATH=/x\nHOME=/\nNCCL_IB_DISABLE=0\n")
    assert codes(grade("net.nic", caps, profile=str(ib))[0]) == []


# ----------------------------------------------------------------------------- inputs

def test_no_input_and_unreadable_listings() -> None:
    [r] = grade_text("net.nic", {"env": "NCCL_DEBUG=INFO\nPATH=/x\nHOME=/\n"}, profile="generic")
    assert r.status is Status.SKIP and codes(r) == ["net.nic/no-input"]
    [r] = grade("net.nic", {"ip-addr": capture("ip-addr", "garbage\n")}, profile="generic")
    assert r.status is Status.ERROR and codes(r) == ["net.nic/unparsable"] and r.evidence == ["garbage"]
    [r] = grade("net.nic", {"ip-addr": capture("ip-addr", "")}, profile="generic")
    assert r.evidence == ["(empty output)"]
    [r] = grade_text("net.nic", {"ip-addr": "garbage\n"}, profile="generic")
    assert r.status is Status.SKIP and codes(r) == ["net.nic/not-recognised"]
    assert r.summary.startswith("not recognised: an interface listing")


def test_link_events_alone_are_graded() -> None:
    log = ("[Mon Nov 23 09:00:01 2026] mlx5_core 0000:17:00.0 ens6f0np0: Link down\n"
           "[Mon Nov 23 09:00:03 2026] mlx5_core 0000:17:00.0 ens6f0np0: Link up\n")
    [r] = grade_text("net.nic", {"link-events": log}, profile="generic")
    assert r.facts["flaps"][0]["interface"] == "ens6f0np0" and r.status is Status.WARN
    ib_only = "[Mon Nov 23 09:00:01 2026] IPv6: ADDRCONF(NETDEV_CHANGE): ib0: link becomes ready\n"
    [r] = grade_text("net.nic", {"link-events": ib_only}, profile="generic")
    assert r.status is Status.SKIP


# ----------------------------------------------------------------------------- exact texts and boundaries

def test_glob_characters_and_xen_names() -> None:
    assert net.match_any("enX0", ["enX"]) and not net.match_any("enX0", ["enY"])


def test_iflist_skips_empty_parts() -> None:
    assert net.parse_iflist("a,,b").entries == ["a", "b"] and net.parse_iflist(" , a").entries == ["a"]


def test_env_chooses_ipoib(prof: profiles.Profile) -> None:
    dp, how = net.data_plane([Interface("ib0", link_type="infiniband"), Interface("eno1")], prof,
                             {"NCCL_SOCKET_IFNAME": "=ib0"})
    assert [i.name for i in dp] == ["ib0"] and how == "env"


def test_variable_texts() -> None:
    text = LO + hdr(2, "eno1", addrs=("10.0.0.1/24",)) + hdr(3, "eno2", addrs=("10.0.1.1/24",)) \
        + hdr(4, "eth5", NC, state="DOWN", mtu=1500) + hdr(5, "docker0", mtu=1500)
    r = nic(text, env="PATH=/x\nHOME=/\nNCCL_SOCKET_IFNAME=^eno\n")
    assert r.remedy == "narrow NCCL_SOCKET_IFNAME to the data-plane NICs, e.g. '=eno1,eno2'"
    r = nic(text, env="PATH=/x\nHOME=/\nNCCL_SOCKET_IFNAME==eth5\n")
    assert r.facts["problems"] == ["eth5 is DOWN", "NCCL_SOCKET_IFNAME==eth5: every interface it selects is down"]
    assert r.remedy.endswith("(2) bring the interface up or point the variable at one that is up")
    r = nic(text, env="PATH=/x\nHOME=/\nNCCL_SOCKET_IFNAME=,\n")
    assert (r.summary, r.remedy) == ("NCCL_SOCKET_IFNAME is set but empty",
                                     "unset NCCL_SOCKET_IFNAME or name the data-plane interface")


def test_ib_hca_texts() -> None:
    devs = "mlx5_0\nmlx5_1\nmlx5_10\n"
    r = _hca("NCCL_IB_HCA=mlx5_7\n", devs)
    assert r.evidence == ["NCCL_IB_HCA=mlx5_7", "ib devices: mlx5_0 mlx5_1 mlx5_10"]
    assert r.remedy == ("set NCCL_IB_HCA to devices that exist here (mlx5_0, mlx5_1, mlx5_10); NCCL will otherwise use "
                        "other HCAs or fall back to sockets")
    r = _hca("NCCL_IB_HCA=mlx5_1,mlx5_0\n", devs)
    assert codes(r) == ["net.nic/ib-hca-prefix-ambiguous"]
    assert r.remedy == "use '=mlx5_1,mlx5_0' (exact match) so only the intended HCAs are used"
    assert codes(_hca("NCCL_IB_HCA=mlx5_0\n", devs)) == []
    r = _hca("NCCL_IB_HCA=mlx5_0\n", "", rc=2)
    assert (r.summary, r.evidence, r.remedy) == (
        "NCCL_IB_HCA is set but this node has no RDMA devices", ["NCCL_IB_HCA=mlx5_0", "ib devices: none"],
        "load the RDMA drivers (mlx5_ib) or unset NCCL_IB_HCA; NCCL will fall back to sockets")
    r = _hca("NCCL_IB_HCA=^mlx5\n", devs)
    assert r.remedy == "remove the ^ exclusion or list the HCAs to use"
    assert codes(_hca("NCCL_IB_HCA=mlx5_0\n", "mlx5_0\n", rc=2)) == ["net.nic/ib-hca-no-rdma-devices"]


def test_ib_disabled_texts(tmp_path: Path) -> None:
    ib = tmp_path / "ib.toml"
    ib.write_text('[profile]\nname = "ib"\nextends = "generic"\n[nccl]\nexpect_net = { value = "IB", source = "s" }\n')
    caps = {"ip-addr": capture("ip-addr", LO + hdr(2, "eno1")), "env": capture("env", "PATH=/x\nHOME=/\nNCCL_IB_DISABLE=1\n")}
    [r] = grade("net.nic", caps, profile=str(ib))
    assert r.summary == "NCCL_IB_DISABLE=1 forces NCCL onto TCP sockets, but the profile expects IB"
    assert r.remedy == "unset NCCL_IB_DISABLE in the job environment"


def test_presence_texts() -> None:
    many = LO + "".join(hdr(n, f"veth{n}", mtu=1500) for n in range(2, 9))
    r = nic(many)
    assert len(r.evidence) == 6 and r.remedy == ("check that the NIC drivers are loaded; inside a container, run "
                                                "preflight on the host network")
    ib_member = LO + hdr(2, "ib0", "SLAVE,UP,LOWER_UP", link="infiniband", mtu=4092, extra="master bond0 ")
    assert codes(nic(ib_member)) == []


def test_mtu_evidence_names_the_profile_source() -> None:
    src = profiles.load("h100-sxm-8x").source("net.mtu")
    r = nic(LO + hdr(2, "eno1", mtu=1500), profile="h100-sxm-8x")
    assert r.evidence[1] == f"net.mtu = 9000 ({src})"


def test_speed_boundaries(tmp_path: Path) -> None:
    p = site(tmp_path, 'min_speed_mbps = { value = 200000, source = "site" }')
    text = LO + hdr(2, "eno1") + hdr(3, "eno2")
    assert codes(nic(text, profile=p, ip_speed="/sys/class/net/eno1/speed:0\n/sys/class/net/eno2/speed:200000\n")) == []
    assert codes(nic(text, profile=p, ip_speed="/sys/class/net/eno1/speed:1\n")) == ["net.nic/link-slow"]
    eth = ETH.format(dev="eno1", speed="200000Mb/s", duplex="Full", link="yes") \
        + ETH.format(dev="eno2", speed="100000Mb/s", duplex="Full", link="yes")
    [r] = grade_text("net.nic", {"ethtool": eth}, profile=p)
    assert codes(r) == ["net.nic/link-slow"] and r.evidence[-1] == "net.min_speed_mbps = 200000 (site)"
    [r] = grade_text("net.nic", {"ethtool": ETH.format(dev="eno1", speed="1000Mb/s", duplex="Half", link="no")},
                     profile="generic")
    assert codes(r) == ["net.nic/ethtool-no-link", "net.nic/half-duplex"]
    assert r.remedy == ("(1) check the cable/transceiver and the switch port of eno1 (2) fix auto-negotiation on "
                        "both ends")


def test_no_carrier_texts() -> None:
    text = LO + "".join(hdr(n, f"ens{n}f0") for n in range(2, 6)) + hdr(9, "ens9f1", NC, state="DOWN")
    r = nic(text)
    assert r.summary == "ens9f1 is up but has no carrier while ens2f0, ens3f0, ens4f0 have one"
    assert r.remedy == ("check the cable/transceiver and the switch port of ens9f1 (`ip link set ens9f1 up`, `ethtool "
                        "ens9f1`); if a port is unused, leave it administratively down")
    two = LO + hdr(2, "eno1") + hdr(3, "eno2", NC, state="DOWN") + hdr(4, "eno3", NC, state="DOWN")
    assert nic(two).remedy == ("check the cable/transceiver and the switch port of each (`ethtool <port>`); if a port "
                               "is unused, leave it administratively down")


def test_members_of_bridges_and_bonds_in_one_listing() -> None:
    text = LO + hdr(2, "eno1", addrs=("10.0.0.1/24",)) + hdr(3, "br-ab12", mtu=1500) \
        + hdr(4, "eno5", NC, state="DOWN", extra="master br-ab12 ") \
        + hdr(5, "ens1f1", NC, state="DOWN", extra="master bond0 ") \
        + hdr(6, "ib1", "NO-CARRIER,SLAVE,UP", link="infiniband", mtu=4092, state="DOWN", extra="master bond1 ")
    r = nic(text)
    assert r.facts["problems"] == ["ens1f1 (member of bond0) has no link: bond0 runs degraded",
                                   "ib1 (member of bond1) has no link: bond1 runs degraded"]


def test_loopback_dad_is_not_graded() -> None:
    text = "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN\n    link/loopback 00:00\n" \
           "    inet6 ::1/128 scope host dadfailed\n" + hdr(2, "eno1", addrs=("10.0.0.1/24",))
    assert codes(nic(text)) == []


def test_input_texts() -> None:
    [r] = grade_text("net.nic", {"env": "NCCL_DEBUG=INFO\nPATH=/x\nHOME=/\n"}, profile="generic")
    assert r.summary == ("no interface list (ip addr), ethtool output or Ethernet link events: NICs and NCCL interface "
                         "variables not graded")
    assert r.remedy == "capture `ip -j -d addr` on the node alongside the environment"
    [r] = grade("net.nic", {"ip-addr": capture("ip-addr", "garbage\n")}, profile="generic")
    assert r.summary == "ip addr output could not be parsed (empty or garbage)"
    assert r.remedy == "run `ip -j -d addr` by hand; iproute2 may be broken or too old for -j"
    [r] = grade_text("net.nic", {"ip-addr": "garbage\nmore\n"}, profile="generic")
    assert r.evidence == ["garbage", "more"] and r.remedy == "paste the whole `ip addr` output"
    [r] = grade_text("net.nic", {"ip-addr": "   \n"}, profile="generic")
    assert codes(r) == ["net.nic/no-input"]


def test_flap_summary_names_the_link() -> None:
    log = ("[Mon Nov 23 09:00:01 2026] mlx5_core 0000:17:00.0 ens6f0np0: Link down\n"
           "[Mon Nov 23 09:00:03 2026] mlx5_core 0000:17:00.0 ens6f0np0: Link up\n")
    [r] = grade_text("net.nic", {"link-events": log}, profile="generic")
    assert r.summary.startswith("link ens6f0np0 flapped 1 time")


# ----------------------------------------------------------------------------- nic_mtu: several groups

def test_every_bond_and_adapter_is_graded() -> None:
    text = LO + hdr(2, "eth0", "SLAVE,UP,LOWER_UP", extra="master br0 ") + hdr(3, "br0", mtu=1500) \
        + "    bridge forward_delay 1500\n" \
        + hdr(4, "eth1", "SLAVE,UP,LOWER_UP", extra="master bond0 ") + hdr(5, "eth2", "SLAVE,UP,LOWER_UP",
                                                                          extra="master bond0 ") \
        + hdr(6, "eth3", "SLAVE,UP,LOWER_UP", extra="master bond1 ") \
        + hdr(7, "eth4", "SLAVE,UP,LOWER_UP", mtu=1500, extra="master bond1 ")
    r = nic(text)
    assert r.facts["problems"] == ["bond1 members differ in MTU: eth3 9000 (bond1), eth4 1500 (bond1)"]
    adapters = LO + hdr(2, "ens1f0") + hdr(3, "ens1f1") + hdr(4, "ens2f0", mtu=1500) + hdr(5, "ens2f1")
    r = nic(adapters)
    assert r.facts["problems"] == ["ports of adapter ens2 differ in MTU: ens2f0 1500, ens2f1 9000"]


def test_subnet_with_ipoib_and_a_bad_prefix() -> None:
    ib = LO + hdr(2, "ib0", link="infiniband", mtu=4092, addrs=("10.9.0.1/16",)) \
        + hdr(3, "ib1", link="infiniband", mtu=2044, addrs=("10.9.0.2/16",))
    assert codes(nic(ib)) == ["net.nic/subnet-mtu-mismatch"]
    odd = LO + hdr(2, "eno1", addrs=("10.0.0.1/33", "10.1.0.1/24")) + hdr(3, "eno2", mtu=1500, addrs=("10.1.0.2/24",))
    assert nic(odd).facts["problems"] == ["interfaces on 10.1.0.0/24 differ in MTU: eno1 9000, eno2 1500"]


def test_overlays_one_after_another() -> None:
    text = LO + hdr(2, "eno1", mtu=1500) + hdr(3, "eno2", mtu=1500) + hdr(4, "vxlan0", mtu=1450) \
        + hdr(5, "docker0", mtu=9000) + hdr(6, "veth1", mtu=9000, extra="master docker0 ")
    r = nic(text)
    assert r.facts["problems"] == ["bridge docker0: MTU 9000 exceeds the uplink MTU 1500 (eno1, eno2)"]
