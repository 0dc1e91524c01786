"""net.nic and net.mtu over the corpus ip / ethtool / ping pastes: the conclusions of INDEX.md."""

from __future__ import annotations

import pytest

from tests.corpus import assert_expected, graded, graded_one

pytestmark = pytest.mark.corpus

EXPECTED = {
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
}


@pytest.mark.parametrize("rel", sorted(EXPECTED))
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
