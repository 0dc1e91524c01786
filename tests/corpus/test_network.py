"""net.nic and net.mtu over the corpus ip / ethtool / ping pastes: the conclusions of INDEX.md."""

from __future__ import annotations

import pytest

from tests.corpus import Expected, assert_expected, cases, either, graded, graded_one

pytestmark = pytest.mark.corpus

_FRAG_1440 = "netif/ping_M_do_s1472_frag_needed_from_router_mtu1440_sendmsg_too_long_incus2405.txt"

EXPECTED: dict[str, dict[str, Expected]] = {
    "netif/ip_addr_show_prompt_roce_ens108np0_ens110np0_mtu1500_one_without_ipv4_h20_stepmesh15.txt":
        {"net.nic": "warn"},
    "netif/ip_o_link_show_bond0_slaves_eth0_eth1_vlans_bond0.3000_mtu1500_fusioninventory640.txt":
        {"net.nic": "pass"},
    "netif/ethtool_bond0_1000Mbs_plus_dmesg_grep_bond0_enslaving_backup_down_link_systeminformation187.txt":
        {"net.nic": "pass", "gpu.xid": "skip"},
    "netif/ethtool_grep_A3_speed_400000_lanes8_switch_port_prompt_netdev.txt": {"net.nic": "pass"},
    "netif/ping_M_do_s1300_first_probe_silent_then_frag_needed_mtu1142_ovs_tunnel_indented_kernel_commit.txt":
        {"net.mtu": "fail"},
    "netif/ping_M_do_s1500_prompt_frag_needed_from_named_router_Message_too_long_capital_M_x3.txt":
        {"net.mtu": "fail"},
    "netif/ping_M_do_s8972_c3_jumbo_3of3_0pct_loss_healthy_betacloud_docs.txt": {"net.mtu": "pass"},
    "netif/ping_M_do_s8972_c3_prompt_dgx_spark_gb10_200g_link_first_reply_only.txt": {"net.mtu": "pass"},
    # Batch 3 (INDEX section 6)
    # WARN, not FAIL: ens5f0 (bond1) at 1500 next to ens5f1 (bond0) and every other port at 9000 is a
    # misconfiguration an expert fixes, but the two ports sit in different bonds and bond1 may be a 1500
    # network by design; nothing in the listing proves jumbo traffic crosses ens5f0. Seven ports the system
    # brought up have no carrier (WARN as well).
    "netif/ip_link_grep_mtu_bond_members_1500_vs_9000_kubeovn4254.txt": {"net.nic": "warn"},
    # PASS from the capture alone: eno1 carries at 1500, the Ethernet default; nothing in the listing says
    # the site expects jumbo frames (the "9000 expected" is not in the capture), and eno2-4 and
    # the IPoIB ib0 are administratively down (no UP flag, qdisc noop) with nothing naming them: unused
    # ports, not failed ones. With a jumbo profile (h100-sxm-8x, net.mtu 9000) eno1 is a WARN (below).
    "netif/ip_a_grep_mtu_eno1_1500_ib0_4092_down_trinity187_before.txt": {"net.nic": "pass"},
    # PASS: eno1 carries at 9000; ib0 is still administratively down and unconfigured (an unused port,
    # as in the "before" listing); the reporter verified this state as fixed.
    "netif/ip_a_grep_mtu_eno1_9000_ib0_4092_down_trinity187_after.txt": {"net.nic": "pass"},
    # WARN (confirmed): enp226s0f1 was brought up but has no carrier while its sibling enp226s0f0 and the
    # bond carry traffic. bond0 without an address is not a finding: its VLAN bond0.529 carries it.
    "netif/ip_a_ib0_ipoib_4092_bond0_vlan_1500_hpc_gpu_node.txt": {"net.nic": "warn"},
    # PASS: docker0, br-* and the veth are virtual (never the NCCL interface); the unplugged wired port
    # of a laptop whose link is its wireless NIC is not a data-plane fault.
    "netif/ip_j_link_show_docker0_bridge_veth_laptop_trimmed.json": {"net.nic": "pass"},
    # WARN, not FAIL: the Docker bridge at 1500 above the 1400 uplink black-holes container packets above
    # 1400 wherever ICMP Frag needed does not come back; the host's own traffic (and NCCL on the host
    # network) is not affected, and wg0 (1320 + 60) and vxlan0 (1350 + 50) fit the uplink.
    "netif/ip_o_link_show_mtu1400_wg0_vxlan_docker_bridges_osism912.txt": {"net.nic": "warn"},
    "netif/ping_M_do_s50000_frag_needed_local_mtu1500_ubuntuforums.txt": {"net.mtu": "fail"},
    "netif/ping_M_do_s8972_jumbo_success_edpm_compute.txt": {"net.mtu": "pass"},
    "netif/ping_M_do_s8972_jumbo_success_weka_docs_example.txt": {"net.mtu": "pass"},
    "netif/ping_M_do_s8992_local_error_msg_too_long_mtu1500.txt": {"net.mtu": "fail"},
    # FAIL: without -M do the later probes pass fragmented; the first one proves a 1500 hop on the path.
    "netif/ping_s1700_frag_needed_from_gateway_then_ok_ecmp_netdev.txt": {"net.mtu": "fail"},
    # Batch 4
    # "Frag needed and DF set (mtu = 1440)" from a router: a hop below the path's MTU
    _FRAG_1440: {"net.mtu": "fail"},
    # the same path after lowering the size to fit: 3/3 at 1412(1440)
    "netif/ping_M_do_s1412_ok_after_pmtu_1440_incus2405.txt": {"net.mtu": "pass"},
    # a DF reply at 4578(4606) inside a test log's prefixed lines
    "netif/ping_M_do_s4578_ok_autotest_log_prefixed_tpqemu755.txt": {"net.mtu": "pass"},
    # Junos `ping ... size 2000`: 57 sent, 0 received, no ICMP. The expert reads a silent black hole (a fault); the
    # capture has no small ping to prove the peer answers at all, so WARN (net.mtu/no-reply) is the most it shows and
    # a FAIL is as right
    "netif/ping_junos_size2000_100pct_loss_silent_blackhole_vqfx42.txt": {"net.mtu": either("warn", "fail")},
    # INDEX: FAIL/WARN. Frag needed from 192.168.0.80 (mtu = 1390), then the local error at mtu=1390
    "netif/ping_M_do_s1400_frag_needed_from_gateway_mtu1390_then_local_error_index67132523228.txt":
        {"net.mtu": either("fail", "warn")},
}
KNOWN_GAPS: dict[str, str] = {}


@pytest.mark.parametrize("rel", cases(EXPECTED, KNOWN_GAPS))
def test_expected_status(rel: str) -> None:
    got = graded(rel, tuple(EXPECTED[rel]))
    assert_expected(rel, got, EXPECTED[rel])


def test_roce_port_without_ipv4_is_named_next_to_its_sibling() -> None:
    r = graded_one("netif/ip_addr_show_prompt_roce_ens108np0_ens110np0_mtu1500_one_without_ipv4_h20_stepmesh15.txt",
                   "net.nic")
    assert "ens110np0" in r.summary and "ens108np0" in r.summary


def test_bond_is_graded_not_its_slaves() -> None:
    r = graded_one("netif/ip_o_link_show_bond0_slaves_eth0_eth1_vlans_bond0.3000_mtu1500_fusioninventory640.txt",
                   "net.nic")
    assert "bond0" in r.summary and "eth0" not in r.summary


def test_path_mtu_named_from_frag_needed() -> None:
    r = graded_one("netif/ping_M_do_s1300_first_probe_silent_then_frag_needed_mtu1142_ovs_tunnel_indented_kernel_commit.txt",
                   "net.mtu")
    assert "1300" in r.summary and any("1142" in e for e in r.evidence + [r.remedy])


def test_400g_eight_lanes_from_grep_excerpt() -> None:
    r = graded_one("netif/ethtool_grep_A3_speed_400000_lanes8_switch_port_prompt_netdev.txt", "net.nic")
    assert "400Gb/s" in r.summary and "8 lanes" in r.summary


def _codes(rel: str, check: str, profile: str = "auto") -> list[str]:
    return graded_one(rel, check, profile).facts.get("codes", [])


def test_bond_member_at_1500_among_9000_is_named() -> None:
    r = graded_one("netif/ip_link_grep_mtu_bond_members_1500_vs_9000_kubeovn4254.txt", "net.nic")
    assert r.facts["codes"] == ["net.nic/adapter-mtu-mismatch", "net.nic/no-carrier"]
    assert r.summary.startswith("ports of adapter ens5 differ in MTU: ens5f0 1500 (bond1), ens5f1 9000 (bond0)")
    assert "7 ports are up but without carrier" in r.summary


def test_trinity_before_warns_against_a_jumbo_profile() -> None:
    rel = "netif/ip_a_grep_mtu_eno1_1500_ib0_4092_down_trinity187_before.txt"
    r = graded_one(rel, "net.nic", "h100-sxm-8x")
    assert r.status.value == "warn" and r.facts["codes"] == ["net.nic/mtu-below-profile"]
    assert r.summary == "eno1 MTU 1500, expected 9000"
    assert graded_one(rel.replace("1500", "9000").replace("before", "after"), "net.nic", "h100-sxm-8x"
                      ).status.value == "pass"


def test_vlan_parent_without_address_is_not_flagged() -> None:
    r = graded_one("netif/ip_a_ib0_ipoib_4092_bond0_vlan_1500_hpc_gpu_node.txt", "net.nic")
    assert r.facts["codes"] == ["net.nic/no-carrier"] and "bond0 is up" not in r.summary
    assert r.summary == "enp226s0f1 is up but has no carrier while enp226s0f0, bond0, bond0.529 have one"


def test_docker_bridge_above_the_uplink() -> None:
    r = graded_one("netif/ip_o_link_show_mtu1400_wg0_vxlan_docker_bridges_osism912.txt", "net.nic")
    assert r.facts["codes"] == ["net.nic/virtual-mtu-above-uplink"]
    assert r.summary == "bridge br-3e86ee0c2536: MTU 1500 exceeds the uplink MTU 1400 (ens3)"
    assert "wg0" not in r.summary and "vxlan0" not in r.summary


def test_laptop_virtual_interfaces_are_never_data_plane() -> None:
    r = graded_one("netif/ip_j_link_show_docker0_bridge_veth_laptop_trimmed.json", "net.nic")
    classes = {i["name"]: i["class"] for i in r.facts["interfaces"]}
    assert classes == {"lo": "loopback", "enp0s31f6": "data", "wlp2s0": "wireless", "docker0": "virtual",
                       "br-0e84d61d9869": "virtual", "veth593fc8d": "virtual"}
    assert r.facts["data_plane"] == ["enp0s31f6"]


@pytest.mark.parametrize(("rel", "code"), [
    ("netif/ping_M_do_s50000_frag_needed_local_mtu1500_ubuntuforums.txt", "net.mtu/frag-needed"),
    ("netif/ping_M_do_s8992_local_error_msg_too_long_mtu1500.txt", "net.mtu/local-mtu-too-small"),
    ("netif/ping_s1700_frag_needed_from_gateway_then_ok_ecmp_netdev.txt", "net.mtu/frag-needed"),
    ("netif/ping_M_do_s1500_prompt_frag_needed_from_named_router_Message_too_long_capital_M_x3.txt",
     "net.mtu/frag-needed"),
])
def test_ping_failures_carry_their_code(rel: str, code: str) -> None:
    assert _codes(rel, "net.mtu") == [code]


def test_local_mtu_named_from_message_too_long() -> None:
    r = graded_one("netif/ping_M_do_s8992_local_error_msg_too_long_mtu1500.txt", "net.mtu")
    assert r.facts["peers"][0]["local_mtu"] == 1500 and r.facts["size"] == 8992
    assert r.summary == "local MTU too small for 8992-byte DF pings (to 172.29.4.104)"


def test_router_frag_needed_names_the_hop_mtu() -> None:
    r = graded_one(_FRAG_1440, "net.mtu")
    assert r.facts["codes"] == ["net.mtu/frag-needed"] and any("1440" in e for e in r.evidence)
