"""gpu.xid over the corpus kernel logs: the conclusions of corpus INDEX.md section 3."""

from __future__ import annotations

import pytest

from preflight.model import Result
from tests.corpus import Expected, accepts, cases, either, graded_one

pytestmark = pytest.mark.corpus

_RESET_SICHEK = "xid/dmesg_T_nv_err_reset_required_gsprmalloc_failed_no_xid_sichek51.log"
_OLD_XID32 = "xid/dmesg_raw_old_format_xid32_channel_id_intr_xid31_engmask_optimus_bumblebee677.log"
_CMP40HX = "xid/dmesg_cmp40hx_rminitadapter_failed_0x22_0x56_894_repeated_cannot_attach_gpu_cmpunlocker4.log"


EXPECTED: dict[str, dict[str, Expected]] = {
    "xid/xid119_gsp_rpc_timeout_xe9680.log": {"gpu.xid": "fail"},
    "xid/dmesg_iso_xid48_63_94_dbe_rowremap_peermem_gpud.log": {"gpu.xid": "fail"},
    "xid/dmesg_decode_xid13_43_app_fault_flood_gpud.log": {"gpu.xid": "warn"},
    "xid/dmesg_ctime_xid13_109_ctx_switch_timeout_peermem_gpud_pr46.log": {"gpu.xid": "fail"},
    "xid/kmsg_lines_xid149_145_144_nvlink_gpud_pr1160_pr1174.log": {"gpu.xid": "fail"},
    "xid/journal_k_nvlink_postRxDetLinkMask_failed_gh100_gpud_pr1271.log": {"gpu.xid": "fail"},
    "xid/dmesg_T_grep_nvrm_prompt_xid43_31_94_three_vm_gpus_535_akash244.log": {"gpu.xid": "warn"},
    "xid/journal_short_hostname_rminitadapter_failed_0x26_0x56_kernel_oops_vmware_cudasamples104.log":
        {"gpu.xid": "fail"},
    "xid/journalctl_k_since_until_multiline_cmd_grep_xid48_171_63_154_drain_reset_rtxpro6000_blog.log":
        {"gpu.xid": "fail"},
    "xid/kernel_prefix_no_timestamp_xid79_kgsp_rc_all_channels_sanity_check_rtx4060_laptop.log": {"gpu.xid": "fail"},
    "xid/syslog_rfc3339_usec_xid79_154_node_reboot_required_rtx4080_595.log": {"gpu.xid": "fail"},
    "nvml-errors/nvidia_smi_unable_device_handle_A1_unknown_error_plus_dmesg_T_grep_nvrm_xid79_prompts_akash209.txt":
        {"gpu.xid": "fail"},
    "nvml-errors/dmesg_raw_nvidia_probe_not_called_3_devices_nouveau_conflict_lsmod_empty_bigdata133.txt":
        {"gpu.xid": "skip"},
    # Batch 3
    "xid/dmesg_T_xid119_gsp_timeout_45s_8xA100_vllm40652.log": {"gpu.xid": "fail"},
    "xid/dmesg_T_xid119_timeout_waiting_rpc_gsp_old_format_ogkm446.log": {"gpu.xid": "fail"},
    "xid/dmesg_fallen_off_bus_no_xid_570.158.01_nvsentinel155.log": {"gpu.xid": "fail"},
    "xid/dmesg_gsp_heartbeat_timeout_gh100_memsys_error_595_ogkm1230.log": {"gpu.xid": "fail"},
    # 62 (PMU halt) needs a reset; the 45s after it are its sympathetic cleanup
    "xid/dmesg_xid31_62_45_mmu_fault_pmu_halt_chia301.log": {"gpu.xid": "fail"},
    # only application-level 31s (FAULT_PDE from one process): the job's fault, the GPU stays usable
    "xid/dmesg_xid31_fault_pde_rtx4090_535_tinygrad6947.log": {"gpu.xid": "warn"},
    "xid/journal_k_xid120_154_gsp_exception_rtxpro6000_595_forum364958.log": {"gpu.xid": "fail"},
    # every line is an Xid 45 naming its cause: the NVLink5 Xid 149/145 that tore the channels down
    "xid/journal_k_xid45_caused_by_previous_xid149_145_nvlink_ogkm1150.log": {"gpu.xid": "fail"},
    "xid/journal_k_xid62_pmu_halted_154_45_rtxpro6000_595_forum364958.log": {"gpu.xid": "fail"},
    "xid/journal_k_xid79_fallen_off_bus_rtx5080_ogkm1151.log": {"gpu.xid": "fail"},
    "xid/kmsg_xid62_154_gsp_watchdog_rtx5080_595_forum371272.log": {"gpu.xid": "fail"},
    # Batch 4, set B
    # Xid 48 (DBE) and 64 on 07:00; RmInitAdapter failed on 0a:00
    "xid/syslog_xid48_dbe_xid64_blacklisting_failed_rminitadapter_gpuop1146.log": {"gpu.xid": "fail"},
    # back-to-back GSP RPC timeouts, then Xid 154 "GPU Reset Required"
    "xid/talos_kern_iso_ts_back_to_back_gsp_rpc_timeout_xid154_reset_required_ogkm446.log": {"gpu.xid": "fail"},
    "xid/journal_xid120_gsp_task_exception_at_driver_init_crashcat_ogkm829.log": {"gpu.xid": "fail"},
    # NV_ERR_RESET_REQUIRED from the driver, no Xid line: the GPU needs a reset
    _RESET_SICHEK: {"gpu.xid": "fail"},
    # application-level Xids only (13; 43 + 31): the job's fault, the GPUs stay usable
    "xid/dmesg_T_xid13_mmu_fault_no_pid_field_b200_trtllm15610.log": {"gpu.xid": "warn"},
    "xid/dmesg_xid13_graphics_exception_esr_8xA800_535_vllm5901.log": {"gpu.xid": "warn"},
    "xid/dmesg_T_xid43_xid31_two_gpus_fault_pde_pytorch51382.log": {"gpu.xid": "warn"},
    "xid/syslog_xid13_illegal_instruction_encoding_relion436.log": {"gpu.xid": "warn"},
    # only a non-fatal NVSwitch SXid 22013 (Link 60), no GPU Xid
    "xid/dmesg_nvswitch_sxid_22013_nonfatal_link60_no_gpu_xid_aihub0007.log": {"gpu.xid": "warn"},
    # Batch 4, set C
    "xid/dmesg_grep_xid48_dbe_63_row_remap_94_contained_52_00_550_index21335815681.log": {"gpu.xid": "fail"},
    # the 2015 wording (`Channel ID ... intr`, `engmask`) of Xid 32 and 31: application-level
    _OLD_XID32: {"gpu.xid": "warn"},
    # no Xid, RmInitAdapter failed over and over: the GPU cannot be used
    _CMP40HX: {"gpu.xid": "fail"},
    "xid/dmesg_gb200_nv_err_reset_required_kernel_channel_single_line_no_xid_dradriver982.log": {"gpu.xid": "fail"},
    # INDEX: WARN/PASS. Only non-fatal SXid 11004 (ingress invalid ACL) on 4 switches of a Service VM
    "xid/dmesg_nvswitch_sxid_11004_nonfatal_ingress_invalid_acl_4_switches_service_vm_no_gpu_xid_index53190491635.log":
        {"gpu.xid": either("warn", "pass")},
    "xid/journal_fedora_nv_err_reset_required_fullchip_reset_asserts_pager_truncated_no_xid_ogkm1045.log":
        {"gpu.xid": "fail"},
    "xid/journal_mixed_app_lines_llama_swap_xid31_fault_pde_virt_read_illegal_memory_access_index17367881429.log":
        {"gpu.xid": "warn"},
    # INDEX: FAIL (WARN tolerated). GSP heartbeat timed out, no Xid
    "xid/journalctl_k_no_hostname_gsp_heartbeat_timed_out_kgsp_1446_bazzite4449.log": {"gpu.xid": either("fail", "warn")},
    # Xid 13 and 31 on one channel of one process (a deliberate bad access)
    "xid/syslog_phx8_2fa_xid13_xid31_same_channel_fault_injection_python_index70602421390.log": {"gpu.xid": "warn"},
}
KNOWN_GAPS: dict[str, str] = {}


def _xid(rel: str) -> Result:
    return graded_one(rel, "gpu.xid", "auto")


@pytest.mark.parametrize("rel", cases(EXPECTED, KNOWN_GAPS))
def test_expected_status(rel: str) -> None:
    r = _xid(rel)
    assert accepts(EXPECTED[rel]["gpu.xid"], r.status.value), r.summary
    if r.status.value != "pass":
        assert r.summary and r.evidence and r.remedy


def test_xid119_gpu4_needs_reset() -> None:
    r = _xid("xid/xid119_gsp_rpc_timeout_xe9680.log")
    assert "Xid 119" in r.summary and "0000:9b:00" in r.summary and "GPU4" in r.summary
    assert "drain node" in r.remedy and "nvidia-smi -r -i 0000:9b:00.0" in r.remedy
    assert {e["xid"] for e in r.facts["events"]} == {119}
    assert sum(e["count"] for e in r.facts["events"]) == 5  # the stack dump adds nothing
    assert r.facts["gpus"]["0000:9b:00"]["serial"] == "1650124014249"
    assert any("likely needs to be reset" in e for e in r.evidence)


def test_dbe_rowremap_contained() -> None:
    r = _xid("xid/dmesg_iso_xid48_63_94_dbe_rowremap_peermem_gpud.log")
    codes = {e["xid"]: e for e in r.facts["events"]}
    assert set(codes) == {48, 63, 94}
    assert codes[48]["action"] == "WORKFLOW_XID_48" and codes[94]["caused_by"] == 48
    assert "ROW_REMAPPER" in r.remedy and "reset" in r.remedy
    assert not any("peermem" in e for e in r.evidence)


def test_app_flood_not_a_drain() -> None:
    r = _xid("xid/dmesg_decode_xid13_43_app_fault_flood_gpud.log")
    assert r.facts["counts"] == {"0000:38:00": {"13": 629, "43": 7}}
    assert "x629" in r.summary
    assert "drain node" not in r.remedy and "job owner" in r.remedy
    assert len(r.facts["events"]) < 30  # grouped into bursts
    assert all(e["caused_by"] == 13 for e in r.facts["events"] if e["xid"] == 43)


def test_ctx_switch_timeout_reset_gpu() -> None:
    r = _xid("xid/dmesg_ctime_xid13_109_ctx_switch_timeout_peermem_gpud_pr46.log")
    ev = {e["xid"]: e for e in r.facts["events"]}
    assert ev[109]["action"] == "RESET_GPU" and ev[109]["severity"] == "fail"
    assert ev[13]["severity"] == "warn"
    assert "Xid 109" in r.summary and "nvidia-smi -r" in r.remedy


def test_nvlink5_decode() -> None:
    r = _xid("xid/kmsg_lines_xid149_145_144_nvlink_gpud_pr1160_pr1174.log")
    ev = {(e["xid"], e["pci"]): e for e in r.facts["events"]}
    netir = ev[(149, "0019:01:00")]
    assert netir["unit"] == "NETIR" and netir["fatal"] is True and netir["severity"] == "fail"
    assert netir["registers"][0] == "0x000fe406" and netir["link"] == -1
    rlw = ev[(145, "0018:01:00")]
    assert rlw["unit"] == "RLW_RXPIPE" and rlw["fatal"] is False and rlw["registers"][1] == "0x00000008"
    assert rlw["severity"] == "warn" and rlw["link"] == 13
    saw = ev[(144, "0000:01:00")]
    assert saw["unit"] == "SAW_MVB" and saw["severity"] == "warn"
    assert ev[(149, "0000:00:00")]["count"] == 2


def test_nvlink_discovery_failure_is_a_fabric_fault() -> None:
    r = _xid("xid/journal_k_nvlink_postRxDetLinkMask_failed_gh100_gpud_pr1271.log")
    assert r.facts["events"] == []
    assert r.facts["faults"][0]["kind"] == "nvlink_discovery_failed"
    assert "NVLink" in r.remedy and "fabric" in r.remedy


def test_xid45_is_attributed_to_the_nvlink_xid_it_names() -> None:
    r = _xid("xid/journal_k_xid45_caused_by_previous_xid149_145_nvlink_ogkm1150.log")
    assert r.facts["codes"] == ["gpu.xid/workflow-nvlink5-err-unstated"]
    causes = {(e["pci"], e["xid"]) for e in r.facts["events"] if e.get("implied")}
    assert causes == {("0000:dc:00", 149), ("0000:ed:00", 145), ("0000:ba:00", 145), ("0000:97:00", 145)}
    assert all(e["severity"] == "info" for e in r.facts["events"] if e["xid"] == 45)
    assert "Xid 149 NVLINK_NETIR_ERROR" in r.summary and "NVLink5" in r.remedy
    assert r.facts["counts"]["0000:dc:00"] == {"45": 2}  # implied causes are not counted as lines


def test_xid154_names_the_action_with_its_cause() -> None:
    r = _xid("xid/journal_k_xid120_154_gsp_exception_rtxpro6000_595_forum364958.log")
    assert set(r.facts["codes"]) == {"gpu.xid/reset-gpu", "gpu.xid/recovery-gpu-reset"}
    r = _xid("xid/journal_k_xid62_pmu_halted_154_45_rtxpro6000_595_forum364958.log")
    ev = {e["xid"]: e for e in r.facts["events"]}
    assert ev[45]["caused_by"] == 62 and ev[45]["severity"] == "info" and ev[45]["text"] == "channel 0x00000002"
    assert ev[154]["action"] == "RESET_GPU" and ev[154]["recovery"] == "GPU Reset Required"
    assert not r.facts["faults"]  # the PMU-halted line is the Xid 62's own message


def test_gpu_faults_without_an_xid_name_their_gpu() -> None:
    r = _xid("xid/dmesg_fallen_off_bus_no_xid_570.158.01_nvsentinel155.log")
    assert r.facts["codes"] == ["gpu.xid/fallen-off-bus"] and "GPU 0000:b3:00" in r.summary
    r = _xid("xid/dmesg_gsp_heartbeat_timeout_gh100_memsys_error_595_ogkm1230.log")
    assert set(r.facts["codes"]) == {"gpu.xid/gsp-timeout", "gpu.xid/memory-subsystem-error"}
    assert "GPU6" in r.summary and "nvidia-smi -r" in r.remedy


def test_gsp_banners_are_part_of_their_xid119() -> None:
    r = _xid("xid/dmesg_T_xid119_gsp_timeout_45s_8xA100_vllm40652.log")
    assert r.facts["codes"] == ["gpu.xid/reset-gpu"] and not r.facts["faults"]
    assert "0001:6c:00 (GPU5)" in r.summary and "0001:96:00 (GPU6)" in r.summary


def test_old_xid_wording_is_read() -> None:
    r = _xid(_OLD_XID32)
    assert r.facts["counts"] == {"0000:01:00": {"31": 1, "32": 2}}
    assert "drain node" not in r.remedy


def test_repeated_adapter_init_failure_without_an_xid() -> None:
    r = _xid(_CMP40HX)
    assert "GPU 0000:01:00: failed to initialise" in r.summary and not r.facts["events"]
