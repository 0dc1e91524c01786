"""ib.hca over the corpus ibstat / ibstatus files: the conclusions of corpus INDEX.md section 5."""

from __future__ import annotations

import pytest

from preflight.model import Result
from tests.corpus import Expected, accepts, cases, either, graded_one

pytestmark = pytest.mark.corpus

_B300 = "ib/ibstat_b300_7x_cx8_down_disabled_4x_cx7_nvswitch_mgmt_active_100_dell.txt"
_EVANS = "ib/ibv_devinfo_evans_2x_cx6_ib_both_port_init_lid65535_sm_lid0_index9171543546.txt"
_TMUX = "ib/ibstatus_h20_mlx5_bond_roce_200_active_tmux_scroll_marker_deepep150.txt"

EXPECTED: dict[str, dict[str, Expected]] = {
    "ib/ibstat_h100_roce400_all_active_gpud.txt": {"ib.hca": "pass"},
    "ib/ibstat_h100_roce_2ports_down_disabled_gpud.txt": {"ib.hca": "fail"},
    "ib/ibstat_h100_roce_some_down_polling_gpud.txt": {"ib.hca": "fail"},
    "ib/ibstat_h100_ib_3ports_down_disabled_gpud.txt": {"ib.hca": "warn"},
    "ib/ibstat_h100_ndr400_ib_plus_bond_all_active_gpud.txt": {"ib.hca": "pass"},
    "ib/ibstat_a100_hdr200_all_active_gpud.txt": {"ib.hca": "pass"},
    "ib/ibstat_a100_azure_ibpanic_mlx5_8_missing_exit255_gpud.txt": {"ib.hca": "fail"},
    "ib/ibstatus_a100_azure_hdr200_all_active_gpud.txt": {"ib.hca": "pass"},
    "ib/hca_status_table_mlx5_0_down_rate10_mlx5_1_init_pcie_x8_of_x16_cx5_ucx5970.txt": {"ib.hca": "fail"},
    "ib/ibstat_prompt_bluefield3_mlx5_bond_roce_200_active_healthy_pplxgarden2.txt": {"ib.hca": "pass"},
    "ib/ibstat_prompt_intel_opa_hfi1_0_empty_ca_type_fw_rate100_active_4space_opaff4.txt": {"ib.hca": "pass"},
    "ib/syslog_systemd_networkd_ib6_lost_gained_carrier_flaps_azure_vm_aznhc.log": {"ib.hca": "fail"},
    # batch 3
    # mlx5_1 Down/Disabled, base lid 65535, next to an Active HDR port of the same model: a compute port is down
    "ib/ibstat_cx6_hdr_mlx5_1_down_disabled_rate10_nccltests128.txt": {"ib.hca": "fail"},
    # both RoCE ports Active at 200 on ConnectX-7 (MT4129, a 400G adapter): below what the adapter can, and a
    # 200GbE fabric may be the design: a WARN (the generic profile names no rate; with ib.rate = 400 it FAILs)
    "ib/ibstat_cx7_roce_rate200_mooncake1999.txt": {"ib.hca": "warn"},
    # the only port is PORT_DOWN (RoCE); its active_mtu 1024 of 4096 is the netdev's 1500 MTU
    "ib/ibv_devinfo_cx6dx_eth_port_down_active_mtu1024_deepep60.txt": {"ib.hca": "fail"},
    # the only port is PORT_DOWN with port_lid 65535 (no subnet manager assigned a LID)
    "ib/ibv_devinfo_h100_cx7_ib_port_down_lid65535_deepep38.txt": {"ib.hca": "fail"},
    # PORT_ACTIVE, active_mtu 4096 = max_mtu, RoCE (LID 0 is normal on Ethernet)
    "ib/ibv_devinfo_h100_cx7_roce_port_active_mtu4096_deepep38.txt": {"ib.hca": "pass"},
    # Batch 4, set B
    # B300: all 7 compute CX-8 ports Down/Disabled (the 4 CX-7 NVSwitch management ports Active)
    _B300: {"ib.hca": "fail"},
    "ib/ibstat_cx7_mlx5_10_down_polling_rate10_guids_redacted_gpud482.txt": {"ib.hca": "fail"},
    # Active at 400, the excerpt cut inside a CA block: nothing down
    "ib/ibstat_h20_cx7_ndr400_active_truncated_mid_ca_deepep303.txt": {"ib.hca": "pass"},
    "ib/ibstat_2x_cx6dx_roce_100_active_healthy_l2fwdnv6.txt": {"ib.hca": "pass"},
    # Batch 4, set C (INDEX gives two statuses for most rows)
    "ib/ibstat_cx7_mt4129_eth_down_disabled_rate40_truncated_mcnode28_index8905082393.txt":
        {"ib.hca": either("fail", "warn")},
    # mlx5_0 PORT_DOWN, the IB ports mlx5_2/3 PORT_INIT with LID 65535: no subnet manager
    "ib/ibv_devinfo_neil_cx5_eth_down_active_cx6_ib_port_init_lid65535_no_sm_index9171543546.txt": {"ib.hca": "fail"},
    _EVANS: {"ib.hca": "fail"},
    # WARN (FAIL tolerated): the IB HCA is ACTIVE; an Ethernet port DOWN, RoCE MTU 1024
    "ib/ibv_devinfo_tabs_cx6dx_eth_active_mtu1024_second_port_down_cx6_ib_active_lid7_deepep223.txt":
        {"ib.hca": either("warn", "fail")},
    # all ACTIVE; mlx5_0 at 200 HDR next to 400 NDR siblings: PASS/WARN
    "ib/ibstatus_h20_bf3_roce_mlx5_0_hdr200_others_ndr400_active_deepep17.txt": {"ib.hca": either("pass", "warn")},
    # all ACTIVE 200 (the last block cut after its sm lid line, a tmux scroll marker inside): PASS/WARN
    _TMUX: {"ib.hca": either("pass", "warn")},
    # one CA shown (the author's `...` before it): Active 400 IB
    "ib/ibstat_ellipsis_then_cx7_mlx5_5_ndr400_active_ib_h100_gh3714u06_nccl1591.txt": {"ib.hca": either("pass", "warn")},
}
KNOWN_GAPS: dict[str, str] = {}

# the whole-node H100 ibstat files, graded against the 8 x 400G profile as well (not the one-HCA ibv_devinfo
# excerpts nor the one-CA ibstat excerpt: they cannot show the 8 compute NICs the profile counts)
H100 = {rel: EXPECTED[rel] for rel in (
    "ib/ibstat_h100_roce400_all_active_gpud.txt", "ib/ibstat_h100_roce_2ports_down_disabled_gpud.txt",
    "ib/ibstat_h100_roce_some_down_polling_gpud.txt", "ib/ibstat_h100_ib_3ports_down_disabled_gpud.txt",
    "ib/ibstat_h100_ndr400_ib_plus_bond_all_active_gpud.txt")}


def _ib(rel: str, profile: str = "auto") -> Result:
    return graded_one(rel, "ib.hca", profile)


@pytest.mark.parametrize("rel", cases(EXPECTED, KNOWN_GAPS))
def test_expected_status(rel: str) -> None:
    r = _ib(rel)
    assert accepts(EXPECTED[rel]["ib.hca"], r.status.value), r.summary
    if r.status.value != "pass":
        assert r.summary and r.evidence and r.remedy


@pytest.mark.parametrize("rel", sorted(H100))
def test_expected_status_h100_profile(rel: str) -> None:
    assert accepts(H100[rel]["ib.hca"], _ib(rel, "h100-sxm-8x").status.value)


def test_roce_all_active_12_ports() -> None:
    r = _ib("ib/ibstat_h100_roce400_all_active_gpud.txt")
    assert len(r.facts["ports"]) == 12 and r.facts["compute_total"] == 8 and r.facts["compute_active"] == 8
    assert sorted({p["rate"] for p in r.facts["ports"]}) == [100, 400]


def test_two_compute_nics_down() -> None:
    r = _ib("ib/ibstat_h100_roce_2ports_down_disabled_gpud.txt", "h100-sxm-8x")
    assert "only 6 of 8 compute NICs up" in r.summary
    assert "mlx5_5" in r.summary and "mlx5_11" in r.summary
    down = {p["ca"]: p for p in r.facts["ports"] if p["state"] == "Down"}
    assert set(down) == {"mlx5_5", "mlx5_11"} and down["mlx5_5"]["physical_state"] == "Disabled"
    assert down["mlx5_5"]["rate"] == 40


def test_polling_told_apart_from_disabled() -> None:
    r = _ib("ib/ibstat_h100_roce_some_down_polling_gpud.txt")
    phys = {p["ca"]: p["physical_state"] for p in r.facts["ports"] if p["state"] == "Down"}
    assert phys == {"mlx5_5": "Disabled", "mlx5_11": "Polling"}
    assert "mlx5_11 Down/Polling" in r.summary and "mlx5_5 Down/Disabled" in r.summary
    assert "mlx5_11 port 1 is Polling" in r.remedy and "mlx5_5 port 1 is Disabled" in r.remedy


def test_ethernet_front_end_down_is_only_a_warning() -> None:
    r = _ib("ib/ibstat_h100_ib_3ports_down_disabled_gpud.txt", "h100-sxm-8x")
    assert r.status.value == "warn"
    assert r.facts["compute_active"] == 8
    for ca in ("mlx5_2", "mlx5_7", "mlx5_8"):
        assert ca in r.summary
    assert "drain" not in r.remedy


def test_space_indented_bond() -> None:
    r = _ib("ib/ibstat_h100_ndr400_ib_plus_bond_all_active_gpud.txt")
    assert len(r.facts["ports"]) == 9 and r.facts["ports"][-1]["ca"] == "mlx5_bond_0"
    assert r.facts["compute_active"] == 8


def test_ibpanic_keeps_cas_and_reports_error() -> None:
    r = _ib("ib/ibstat_a100_azure_ibpanic_mlx5_8_missing_exit255_gpud.txt")
    assert len(r.facts["ports"]) == 8
    assert r.facts["missing_devices"] == ["mlx5_8"]
    assert "ibpanic" in r.summary and "mlx5_8" in r.summary
    assert any("stat of IB device 'mlx5_8' failed" in e for e in r.evidence)


def test_ibstatus_file() -> None:
    r = _ib("ib/ibstatus_a100_azure_hdr200_all_active_gpud.txt")
    assert r.facts["format"] == "ibstatus" and len(r.facts["ports"]) == 9
    assert r.facts["compute_active"] == 8
    eth = [p for p in r.facts["ports"] if p["link_layer"] == "Ethernet"]
    assert [p["ca"] for p in eth] == ["mlx5_8"] and eth[0]["rate"] == 40


def test_hca_table_names_down_init_and_narrow_pcie() -> None:
    r = _ib("ib/hca_status_table_mlx5_0_down_rate10_mlx5_1_init_pcie_x8_of_x16_cx5_ucx5970.txt")
    assert "mlx5_0 Down" in r.summary and "mlx5_1 Initializing" in r.summary
    assert "x8 of x16" in r.summary


def test_opa_hca_with_empty_ca_type_is_a_compute_port() -> None:
    r = _ib("ib/ibstat_prompt_intel_opa_hfi1_0_empty_ca_type_fw_rate100_active_4space_opaff4.txt")
    assert [p["ca"] for p in r.facts["ports"]] == ["hfi1_0"] and r.facts["compute_active"] == 1


def test_cx6_down_port_with_unassigned_lid() -> None:
    r = _ib("ib/ibstat_cx6_hdr_mlx5_1_down_disabled_rate10_nccltests128.txt")
    assert r.facts["codes"] == ["ib.hca/compute-port-down"] and "mlx5_1 Down/Disabled" in r.summary
    down = [p for p in r.facts["ports"] if p["ca"] == "mlx5_1"][0]
    assert down["lid"] == 65535 and down["rate"] == 10


def test_cx7_roce_at_200_is_below_the_adapter() -> None:
    r = _ib("ib/ibstat_cx7_roce_rate200_mooncake1999.txt")
    assert r.facts["codes"] == ["ib.hca/rate-below-adapter"]
    assert "mlx5_0 (MT4129) at 200 of 400" in r.summary and "by design" in r.remedy


def test_ibv_devinfo_down_ports() -> None:
    r = _ib("ib/ibv_devinfo_cx6dx_eth_port_down_active_mtu1024_deepep60.txt")
    assert r.facts["codes"] == ["ib.hca/compute-port-down", "ib.hca/mtu-reduced"]
    assert "mlx5_12 1024 of 4096" in " ".join(r.facts["problems"]) and "4200" in r.remedy
    r = _ib("ib/ibv_devinfo_h100_cx7_ib_port_down_lid65535_deepep38.txt")
    assert r.facts["codes"] == ["ib.hca/compute-port-down"] and "no LID from a subnet manager" in r.remedy
    assert r.facts["ports"][0]["lid"] == 65535 and r.facts["ports"][0]["ca_type"] == "MT4129"


def test_ibv_devinfo_roce_active() -> None:
    r = _ib("ib/ibv_devinfo_h100_cx7_roce_port_active_mtu4096_deepep38.txt")
    assert r.status.value == "pass" and r.facts["ports"][0]["active_mtu"] == 4096
    assert "1/1 compute ports Active (Ethernet" in r.summary


def test_carrier_flaps_in_networkd_journal() -> None:
    r = _ib("ib/syslog_systemd_networkd_ib6_lost_gained_carrier_flaps_azure_vm_aznhc.log")
    assert "ib6" in r.summary and "6 times" in r.summary
    assert any("lost carrier" in e.lower() for e in r.evidence)


def test_b300_compute_ports_down_and_management_ports_apart() -> None:
    r = _ib(_B300)
    assert r.facts["compute_total"] == 7 and r.facts["compute_active"] == 0
    assert "mlx5_0 Down/Disabled" in r.summary and "4 other port(s) Active" in r.summary


def test_devinfo_front_end_port_down_without_a_physical_state() -> None:
    r = _ib("ib/ibv_devinfo_tabs_cx6dx_eth_active_mtu1024_second_port_down_cx6_ib_active_lid7_deepep223.txt")
    assert "non-compute port(s) down: mlx5_1 (Ethernet Down)" in r.summary


def test_ports_stuck_in_init_without_a_subnet_manager() -> None:
    r = _ib(_EVANS)
    assert "mlx5_0 Initializing" in r.summary and "mlx5_1 Initializing" in r.summary
    assert "subnet manager" in r.remedy
