"""gpu.inventory / gpu.nvlink / gpu.topology over the shared corpus (skipped when absent).

Graded with profile "auto": the GPU listing picks the profile (8 x H100 80GB HBM3 ->
h100-sxm-8x; a single GPU or another model -> generic)."""

from __future__ import annotations

import pytest

from preflight.model import Result
from tests.corpus import Expected, assert_expected, cases, either, graded

_Q_EXCERPT = "nvidia-smi/q_excerpt_A100_remapped_rows_pending_yes_dram_correctable_177_mlengineering.txt"
_Q_GPU52 = "nvidia-smi/q_d_ecc_row_remapper_gpu52_pending_yes_ecc_mode_unknown_error_550.90.07_index21335815681.txt"
_L_8XH200_MIG = "nvidia-smi/nvidia_smi_L_8xH200_gpu0_mig_6_instances_rest_full_msxf.txt"
_NVLINK_7XB300 = "nvidia-smi/nvlink_status_7xB300_18links_53.125GBs_dell.txt"
_TOPO_634 = "topo/topo_m_4gpu_nv4_mlx5_columns_gpu2_3_sys_only_nccl634.txt"
_TOPO_7XB300 = "topo/topo_m_7xB300_nv18_no_nics_one_gpu_missing_dell.txt"

EXPECTED: dict[str, dict[str, Expected]] = {
    "nvidia-smi/query_gpu_csv_allfields_1xH100_590.48.01_idle_nvgpuexp.csv": {"gpu.inventory": "pass"},
    "nvidia-smi/query_gpu_csv_allfields_1xH100_590.48.01_load_nvgpuexp.csv": {"gpu.inventory": "pass"},
    # MIG on (mig.mode.current Enabled / 5 MIG devices under the GPU): the GPU is healthy, but a job asking
    # for whole GPUs does not get one; WARN by policy (gpu.inventory/mig-enabled), a MIG site sets it to pass
    "nvidia-smi/query_gpu_csv_allfields_1xH200_mig_enabled_590.48.01_idle_nvgpuexp.csv": {"gpu.inventory": "warn"},
    "nvidia-smi/nvidia_smi_L_1xH200_mig_5_instances_nvgpuexp.txt": {"gpu.inventory": "warn"},
    "nvidia-smi/smi_table_8xH100_550.90.07_healthy_gpud.txt": {"gpu.inventory": "pass"},
    "nvidia-smi/smi_table_1xH100_590.48.01_load_nvgpuexp.txt": {"gpu.inventory": "pass"},
    "nvidia-smi/smi_table_1gpu_525.125.06_fan_ERR_gpud.txt": {"gpu.inventory": "pass"},
    "nvidia-smi/nvlink_status_8xA100_sxm4_80gb_gpud.txt": {"gpu.nvlink": "pass"},
    "nvidia-smi/nvlink_s_1xH100_vm_18links_26.562GBs_nvgpuexp.txt": {"gpu.nvlink": "pass"},
    "topo/topo_m_1xH100_vm_ansi_underline_header_nvgpuexp.txt": {"gpu.topology": "pass"},
    # Batch 3: every GPU has a PIX/PXB NIC (the NICs with no GPU are storage/management) -> pass
    "topo/topo_m_8xH100_580.126.20_12nics_pix_pxb_pairs_tabs.txt": {"gpu.topology": "pass"},
    "topo/topo_m_8xH20_535.161.08_8nics_pix_tabs_sglang24966.txt": {"gpu.topology": "pass"},
    "topo/topo_m_8xH800_580.105.08_mlx5_gdr_nics_merged_affinity_col_sglang21210.txt": {"gpu.topology": "pass"},
    "topo/topo_m_dgxA100_mlx5_columns_no_nic_legend.txt": {"gpu.topology": "pass"},
    # GPU4-7 see every NIC as SYS: their inter-node traffic crosses the CPU interconnect -> warn
    "topo/topo_m_8xA100_4nics_gpus4to7_no_local_nic.txt": {"gpu.topology": "warn"},
    "nvidia-smi/nvlink_status_gpu6_a100_nvml_unable_all_links_inactive_aznhc.txt": {"gpu.nvlink": "fail"},
    "nvidia-smi/smi_table_prompt_above_510.47.03_geforce_4gb_kvm_fm_start_failed_gpuop356.txt":
        {"gpu.inventory": "pass"},
    "nvidia-smi/smi_table_old_325.15_prompt_3_of_4_gtx_titan_node_lost_a_gpu_cbio39.txt": {"gpu.inventory": "fail"},
    "nvidia-smi/q_8xH100_535.161.08_fabric_completed_gpud.txt": {"gpu.inventory": "pass"},
    "nvidia-smi/q_8xH100_535.183.01_fabric_completed_gpud.txt": {"gpu.inventory": "pass"},
    "nvidia-smi/q_1xH100_590.48.01_idle_recovery_action_fabric_health_nvgpuexp.txt": {"gpu.inventory": "pass"},
    "nvidia-smi/q_1xA10_535.129.03_remap_pending_gpud.txt": {"gpu.inventory": "pass"},
    "nvidia-smi/q_d_page_retirement_8gpu_azure_535.86.10_pending_blacklist_yes_table_full_EDITED_aznhc.txt":
        {"gpu.inventory": "pass"},
    "nvidia-smi/q_d_page_retirement_8gpu_azure_domains_0001_0008_535.86.10_all_zero_healthy_aznhc.txt":
        {"gpu.inventory": "pass"},
    "nvml-errors/nvidia_smi_unable_device_handle_A1_unknown_error_plus_dmesg_T_grep_nvrm_xid79_prompts_akash209.txt":
        {"gpu.inventory": "fail"},
    "nvml-errors/nvidia_smi_unable_device_handle_GPU0_colon_space_then_no_devices_found_rtx4080_595.txt":
        {"gpu.inventory": "fail"},
    "nvml-errors/k8s_job_exporter_log_nvidia_smi_q_x_exit9_couldnt_communicate_embedded_python_error_pai3537.txt":
        {"gpu.inventory": "fail"},
    "nvml-errors/nvidia_smi_mismatch_prompt_proc_version_520.56.06_vs_dpkg_nvidia_smi_525.85.12_illinois70.txt":
        {"gpu.inventory": "fail"},
    # Batch 3: `Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error` alone -> that GPU is lost
    "nvml-errors/nvidia_smi_unable_to_determine_device_handle_unknown_error.txt": {"gpu.inventory": "fail"},
    # Batch 4
    "nvidia-smi/q_4xA100_sxm4_80gb_555.42.02_gpu1_remapped_rows_pending_gpu2_remapped_done.txt": {"gpu.inventory": "pass"},
    "nvidia-smi/smi_table_4xA100_sxm4_80gb_555.42.02_healthy_no_procs.txt": {"gpu.inventory": "pass"},
    # one GPU block of 8 attached (an excerpt; `-i 52:00.0`): the count cannot be graded from it
    _Q_EXCERPT: {"gpu.inventory": "skip"},
    _Q_GPU52: {"gpu.inventory": "skip"},
    # 8 physical GPUs, GPU 0 in MIG mode with 6 instances: MIG on (WARN by policy, as for the H200 above)
    _L_8XH200_MIG: {"gpu.inventory": "warn"},
    # one H200 in a container, MIG Enabled, 2 MIG devices (not GPUs)
    "nvidia-smi/smi_table_1xH200_570.86.15_mig_enabled_2_mig_devices_in_container_msxf.txt": {"gpu.inventory": "warn"},
    _NVLINK_7XB300: {"gpu.nvlink": "pass"},
    "nvidia-smi/nvidia_smi_unable_device_handle_gpu_is_lost_reboot_owod81.txt": {"gpu.inventory": "fail"},
    # NV6 between all 4 GPUs is the HGX-4 design (direct links, no NVSwitch); each GPU has a PIX NIC
    "topo/topo_m_4xH100_hgx4_nv6_all_pairs_pix_nic_each_nccl1617.txt": {"gpu.topology": "pass"},
    "topo/topo_m_8xH100_hgx_nv18_10nics_tabs_truncated_after_nic2_nccl1264.txt": {"gpu.topology": "pass"},
    # PCIe GPUs (no NVLink), every GPU PIX to a NIC
    "topo/topo_m_8gpu_pcie_switch_no_nvlink_8nics_pix_truncated_no_legend_nccl1405.txt": {"gpu.topology": "pass"},
    # GPU2/3 reach the NICs only across the CPU interconnect (SYS), GPU0/1 within the socket (NODE): WARN
    _TOPO_634: {"gpu.topology": "warn"},
    # 7 GPUs on NVSwitch (NV18 all pairs), 3 on one NUMA node and 4 on the other: a GPU is missing
    _TOPO_7XB300: {"gpu.topology": either("warn", "fail")},
    # INDEX: PASS/SKIP. PCIe A100s without an NVLink bridge: "all links are inActive" is the design
    "nvidia-smi/nvlink_s_2xA100_pcie_no_bridge_all_links_inactive_not_a_fault_index18373896745.txt":
        {"gpu.nvlink": either("pass", "skip")},
    # INDEX: PASS/WARN (persistence Off)
    "nvidia-smi/smi_table_2xA100_pcie_40gb_555.42.02_healthy_dl380_index18373896745.txt":
        {"gpu.inventory": either("pass", "warn")},
    "nvidia-smi/q_d_ecc_2xA100_pcie_555.42.02_all_zero_enabled_healthy_index18373896745.txt": {"gpu.inventory": "pass"},
    "nvidia-smi/nvidia_smi_list_gpus_8xH100_80gb_hbm3_vm_prompt_rhelai02_index66445594161.txt":
        {"gpu.inventory": "pass"},
    # INDEX: PASS/WARN. NV18 all pairs, no NIC in a VM's matrix
    "topo/topo_matrix_8xH100_vm_nv18_all_no_nics_tabs_rhelai02_index66445594161.txt":
        {"gpu.topology": either("pass", "warn")},
    # 2 NICs per GPU pair, every GPU PIX to a NIC
    "topo/topo_m_8xB200_gke_a4_8nics_2_per_gpu_pair_pix_nic_legend_dranet_index27764580911.txt":
        {"gpu.topology": "pass"},
}
KNOWN_GAPS: dict[str, str] = {}

MINE = ("gpu.inventory", "gpu.nvlink", "gpu.topology")


def _results(rel: str) -> dict[str, Result]:
    return graded(rel, MINE)


@pytest.mark.corpus
@pytest.mark.parametrize("rel", cases(EXPECTED, KNOWN_GAPS))
def test_corpus_expected(rel: str) -> None:
    got = _results(rel)
    assert_expected(rel, got, EXPECTED[rel])
    assert set(got) == set(EXPECTED[rel]), f"{rel}: unexpected checks {sorted(set(got) - set(EXPECTED[rel]))}"


@pytest.mark.corpus
def test_corpus_8xh100_table_conclusions() -> None:
    r = _results("nvidia-smi/smi_table_8xH100_550.90.07_healthy_gpud.txt")["gpu.inventory"]
    facts = r.facts
    assert facts["count"] == 8 and facts["models"] == ["NVIDIA H100 80GB HBM3"] and facts["driver"] == "550.90.07"
    assert all(g["persistence"] is True and g["mig_mode"] == "Disabled" for g in facts["gpus"])
    assert "h100-sxm-8x" in r.summary


@pytest.mark.corpus
def test_corpus_mig_listing_counts_one_gpu() -> None:
    facts = _results("nvidia-smi/nvidia_smi_L_1xH200_mig_5_instances_nvgpuexp.txt")["gpu.inventory"].facts
    assert facts["count"] == 1 and facts["mig_devices"] == 5


@pytest.mark.corpus
def test_corpus_allfields_csv() -> None:
    facts = _results("nvidia-smi/query_gpu_csv_allfields_1xH100_590.48.01_idle_nvgpuexp.csv")["gpu.inventory"].facts
    g = facts["gpus"][0]
    assert (g["pcie_gen"], g["pcie_width"], g["persistence"], g["mig_mode"]) == (5, 16, True, "Disabled")
    assert g["vbios"] and facts["driver"] == "590.48.01"
    mig = _results("nvidia-smi/query_gpu_csv_allfields_1xH200_mig_enabled_590.48.01_idle_nvgpuexp.csv")
    assert mig["gpu.inventory"].facts["gpus"][0]["mig_mode"] == "Enabled"


@pytest.mark.corpus
def test_corpus_nvlink_facts() -> None:
    a100 = _results("nvidia-smi/nvlink_status_8xA100_sxm4_80gb_gpud.txt")["gpu.nvlink"].facts
    assert a100["links_total"] == 96 and a100["links_down"] == 0
    h100 = _results("nvidia-smi/nvlink_s_1xH100_vm_18links_26.562GBs_nvgpuexp.txt")["gpu.nvlink"].facts
    assert h100["links_total"] == 18 and h100["gpus"][0]["speeds_gbps"] == [26.562]


@pytest.mark.corpus
def test_corpus_topo_single_gpu() -> None:
    facts = _results("topo/topo_m_1xH100_vm_ansi_underline_header_nvgpuexp.txt")["gpu.topology"].facts
    assert facts["gpu_count"] == 1 and facts["gpus_without_local_nic"] == []
    assert facts["gpus"][0]["cpu_affinity"] == "0-19"


@pytest.mark.corpus
def test_corpus_old_table_missing_gpu_named_by_socket_layout() -> None:
    r = _results("nvidia-smi/smi_table_old_325.15_prompt_3_of_4_gtx_titan_node_lost_a_gpu_cbio39.txt")["gpu.inventory"]
    assert "a GPU is probably missing (2 on one CPU socket, 1 on the other)" in r.summary
    assert [g["bus_id"] for g in r.facts["gpus"]] == ["0000:03:00.0", "0000:04:00.0", "0000:84:00.0"]


@pytest.mark.corpus
def test_corpus_lost_gpu_pastes_name_the_bus() -> None:
    a1 = _results("nvml-errors/nvidia_smi_unable_device_handle_A1_unknown_error_plus_dmesg_T_grep_nvrm_xid79_"
                  "prompts_akash209.txt")["gpu.inventory"]
    assert "0000:A1:00.0" in a1.summary and a1.facts["count"] == 0
    gpu0 = _results("nvml-errors/nvidia_smi_unable_device_handle_GPU0_colon_space_then_no_devices_found_"
                    "rtx4080_595.txt")["gpu.inventory"]
    assert "0000:01:00.0" in gpu0.summary


@pytest.mark.corpus
def test_corpus_sxm_gpu_with_all_links_inactive() -> None:
    r = _results("nvidia-smi/nvlink_status_gpu6_a100_nvml_unable_all_links_inactive_aznhc.txt")["gpu.nvlink"]
    assert "GPU 6 (12 missing)" in r.summary
    assert any("all links are inactive" in e for e in r.evidence)


@pytest.mark.corpus
def test_corpus_topology_nic_affinity() -> None:
    r = _results("topo/topo_m_8xA100_4nics_gpus4to7_no_local_nic.txt")["gpu.topology"]
    assert r.facts["codes"] == ["gpu.topology/gpu-without-local-nic"]
    assert r.facts["gpus_without_local_nic"] == ["GPU4", "GPU5", "GPU6", "GPU7"]
    h800 = _results("topo/topo_m_8xH800_580.105.08_mlx5_gdr_nics_merged_affinity_col_sglang21210.txt")["gpu.topology"]
    assert "mlx5_gdr_0" in h800.facts["gpus"][0]["local_nics"] and "mlx5_0" not in h800.facts["gpus"][0]["local_nics"]
    assert "mlx5_gdr_7" in h800.facts["gpus"][7]["local_nics"]
    dgx = _results("topo/topo_m_dgxA100_mlx5_columns_no_nic_legend.txt")["gpu.topology"]
    assert dgx.facts["gpus"][4]["local_nics"] == ["mlx5_6", "mlx5_7"] and dgx.facts["gpus"][4]["numa_affinity"] == "7"


@pytest.mark.corpus
def test_corpus_lost_gpu_alone() -> None:
    r = _results("nvml-errors/nvidia_smi_unable_to_determine_device_handle_unknown_error.txt")["gpu.inventory"]
    assert "0000:0B:00.0" in r.summary and r.facts["codes"] == ["gpu.inventory/gpu-lost"]


@pytest.mark.corpus
def test_corpus_mig_on_one_gpu_of_eight() -> None:
    r = _results(_L_8XH200_MIG)["gpu.inventory"]
    assert r.facts["count"] == 8 and r.facts["mig_devices"] == 6 and r.summary == "MIG enabled on GPU 0"


@pytest.mark.corpus
def test_corpus_b300_nvlinks() -> None:
    f = _results(_NVLINK_7XB300)["gpu.nvlink"].facts
    assert f["links_total"] == 126 and f["links_down"] == 0 and len(f["gpus"]) == 7
