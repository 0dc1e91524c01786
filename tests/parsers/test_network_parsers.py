"""Network and RDMA parsers: ip, ifconfig, ping, ethtool, link events, ibstat family, versions."""

from __future__ import annotations

import pytest

from preflight.framing import Doc, frame
from preflight.parsers import ethtool, ib, ip, netlog, ping
from tests.conftest import facts_of, fixture_text


def doc(text: str) -> Doc:
    docs = frame(text).docs
    return docs[0] if len(docs) == 1 else Doc.join(docs)


# ----------------------------------------------------------------------------- ip

def test_ip_addr_show_under_two_prompts_is_one_listing_of_the_requested_interfaces():
    f = facts_of("ip-addr", fixture_text("ip/ip_addr_show_two_prompts_one_without_ipv4.txt"))
    by = f.by_name()  # type: ignore[attr-defined]
    assert set(by) == {"enp13s0np0", "enp12s0np0"}
    assert by["enp13s0np0"].ipv4 == [] and by["enp13s0np0"].addresses == ["fe80::ba3f:d2ff:fe10:aa01/64"]
    assert by["enp12s0np0"].ipv4 == ["10.32.7.19/24"] and by["enp12s0np0"].altnames == ["enp12s0f0np0"]
    assert f.shows_addresses  # type: ignore[attr-defined]


def test_ip_o_link_one_line_form_bond_slaves_vlans():
    d = doc(fixture_text("ip/ip_o_link_bond_two_slaves_vlans.txt"))
    assert d.command == "ip -o link show"
    f = ip.parse(d)
    by = f.by_name()
    assert f.form == "oneline" and not f.shows_addresses
    assert by["ens1f0"].slave and by["ens1f0"].master == "bond0" and by["ens1f0"].link_type == "ether"
    assert not by["ens1f1"].up and by["bond0"].up and "MASTER" in by["bond0"].flags
    assert by["bond0.210"].parent == "bond0" and by["bond0.210"].kind == "vlan" and by["bond0.210"].mtu == 9000
    assert by["lo"].link_type == "loopback"


def test_ifconfig():
    f = facts_of("ip-addr", fixture_text("ip/ifconfig_two_nics.txt"))
    by = f.by_name()  # type: ignore[attr-defined]
    assert by["eno1"].up and by["eno1"].mtu == 1500 and by["eno1"].ipv4 == ["10.10.4.21/24"]
    assert not by["ens3f0np0"].up and by["ens3f0np0"].mtu == 9000  # UP but not RUNNING: no carrier


def test_ip_requested_interface_from_the_command():
    assert ip.parse(doc("$ ip addr show dev ens108np0\n2: ens108np0: <UP> mtu 1500 state UP\n")).requested == [
        "ens108np0"]
    assert ip.parse(doc("$ ip -d addr\n2: eth0: <UP> mtu 1500 state UP\n")).requested == []


@pytest.mark.parametrize("text", ["garbage\n", "[1, 2\n", '{"ifname": 1}\n', "1: \n"])
def test_ip_garbage(text):
    assert ip.parse(doc(text)).interfaces == []


# ----------------------------------------------------------------------------- ping

def test_ping_frag_needed_without_statistics_and_a_silent_first_probe():
    text = ("  podman exec ovn-chassis-2 ip netns exec ns1 \\\n         ping 30.0.0.9 -M do -s 1400 -c2\n"
            "  PING 30.0.0.9 (30.0.0.9) 1400(1428) bytes of data.\n"
            "  From 30.0.0.9 icmp_seq=2 Frag needed and DF set (mtu = 1200)\n\n"
            "  --- 30.0.0.9 ping statistics ---\n  ...\n")
    [r] = facts_of("ping", text).runs  # type: ignore[attr-defined]
    assert (r.size, r.frame, r.frag_needed_mtu, r.error_seqs, r.replies, r.stats) == (1400, 1428, 1200, [2], [], False)
    assert r.df is True


def test_ping_named_router_then_local_errors():
    text = ("[ops@login3 ~]$ ping -M do -s 1500 files.example.org\n"
            "PING files.example.org (192.0.2.40) 1500(1528) bytes of data.\n"
            "From core-rt-2.example.net (198.51.100.1) icmp_seq=1 Frag needed and DF set (mtu = 1500)\n"
            "ping: local error: Message too long, mtu=1500\nping: local error: Message too long, mtu=1500\n")
    [r] = ping.parse(doc(text)).runs
    assert r.frag_from == "core-rt-2.example.net (198.51.100.1)" and r.local_too_long_mtu == 1500


def test_ping_first_reply_only():
    [r] = facts_of("ping", "user@n1:~$ ping -M do -s 8972 -c3 10.1.1.2\nPING 10.1.1.2 (10.1.1.2) 8972(9000) bytes "
                           "of data.\n8980 bytes from 10.1.1.2: icmp_seq=1 ttl=64 time=0.512 ms\n").runs  # type: ignore
    assert r.replies == [1] and r.loss is None and not r.stats and r.ok_replies == 1


# ----------------------------------------------------------------------------- ethtool

def test_ethtool_full_and_bond():
    [a] = ethtool.parse(doc(fixture_text("ethtool/ethtool_ens3f0np0_400g_link_up.txt"))).links
    assert (a.name, a.speed_mbps, a.lanes, a.duplex, a.link_detected) == ("ens3f0np0", 400000, 4, "Full", True)
    [b] = ethtool.parse(doc(fixture_text("ethtool/ethtool_bond1_unknown_speed_no_link.txt"))).links
    assert (b.name, b.speed_mbps, b.link_detected) == ("bond1", None, False)


def test_ethtool_grep_fragment_takes_the_name_from_the_command():
    d = doc("# ethtool eth4 | grep -A 2 'Speed: '\n\tSpeed: 200000Mb/s\n\tLanes: 4\n\tDuplex: Full\n")
    assert ethtool.detect(d)
    f = ethtool.parse(d)
    assert f.excerpt and [(x.name, x.speed_mbps, x.lanes, x.link_detected) for x in f.links] == [
        ("eth4", 200000, 4, None)]


# ----------------------------------------------------------------------------- link events

def test_link_flaps_in_a_journal():
    d = doc(fixture_text("netlog/journal_networkd_ib0_flapping_then_up.log"))
    assert netlog.detect(d)
    ev = netlog.parse(d)
    assert ev.interfaces() == ["ib0"] and ev.flaps("ib0") == 3 and ev.last_up("ib0") is True
    assert ev.hosts == ["gpu-c114"] and ev.events[0].line.time_text == "Mar 02 11:41:10"


def test_repeated_link_events_are_read_per_line_whatever_their_time_stamps():
    lines = []
    for i in range(200):
        lines.append(f"[{i}.0] mlx5_core 0000:17:00.0 ens6f0np0: Link down")
        lines.append(f"[{i}.5] mlx5_core 0000:18:00.0 ens6f1np1: Link up")
        lines.append(f"[{i}.7] IPv6: ADDRCONF(NETDEV_CHANGE): ib{i % 2}: link becomes ready")
        lines.append(f"[{i}.8] systemd-networkd[7]: ib{i % 2}: Lost Carrier")
    lines.append("[999.0] mlx5_core 0000:17:00.0 ens6f0np0: Link up")
    ev = netlog.parse(doc("\n".join(lines) + "\n"))
    assert ev.interfaces() == ["ens6f0np0", "ens6f1np1", "ib0", "ib1"]
    assert len(ev.downs("ens6f0np0")) == 200 and ev.last_up("ens6f0np0") is True
    assert ev.downs("ens6f1np1") == [] and ev.last_up("ens6f1np1") is True
    assert len(ev.downs("ib1")) == 100 and ev.last_up("ib1") is False
    assert ev.events[2].line.text == "IPv6: ADDRCONF(NETDEV_CHANGE): ib0: link becomes ready"
    assert ev.events[2].line.mono == 0.7 and ev.window("ens6f0np0") == ("0.0", "999.0")


def test_link_down_that_stays_down_is_not_a_flap():
    ev = netlog.parse(doc(fixture_text("netlog/dmesg_mlx5_link_down_stays_down.log")))
    assert [(e.iface, e.up) for e in ev.events] == [("ens6f0np0", True), ("ens6f0np0", False)]
    assert ev.flaps("ens6f0np0") == 0 and ev.last_up("ens6f0np0") is False


# ----------------------------------------------------------------------------- RDMA ports

def test_hca_status_table():
    rep = ib.parse(doc(fixture_text("ib/hca_table_cx7_one_down_one_init_pcie_x8.txt")))
    assert rep.kind == "table"
    a, b, c = rep.ports
    assert (a.ca, a.state, a.rate, a.link_layer, a.ca_type, a.netdev) == ("mlx5_0", "Active", 400, "InfiniBand",
                                                                          "MT4129", "ibp26s0")
    assert (b.state, b.rate) == ("Down", 10.0)
    assert (c.state, c.pcie_width, c.pcie_width_cap) == ("Initializing", 8, 16)


def test_ibdev2netdev():
    rep = ib.parse(doc(fixture_text("ib/ibdev2netdev_mlx5_3_down.txt")))
    assert rep.kind == "ibdev2netdev" and not rep.shows_rate
    assert [(p.ca, p.state, p.netdev) for p in rep.ports][3] == ("mlx5_3", "Down", "ibp97s0")


def test_ibstat_with_prompt_space_indent_and_empty_ca_type():
    text = ("[root@qe-3 ~]$ ibstat\nCA 'hfi1_0'\n    CA type: \n    Number of ports: 1\n    Firmware version: \n"
            "    Port 1:\n        State: Active\n        Physical state: LinkUp\n        Rate: 100\n"
            "        Base lid: 7\n        Link layer: InfiniBand\n[root@qe-3 ~]$ \n")
    d = doc(text)
    assert ib.detect(d)
    [p] = ib.parse(d).ports
    assert (p.ca, p.ca_type, p.firmware, p.up, p.rate) == ("hfi1_0", "", "", True, 100.0)
