"""fabric.manager over the shared corpus's fabric manager logs (skipped when absent).

The `nvidia-smi -q` files also feed fabric.manager; their expectations live with the
gpu.health corpus test (tests/corpus/test_gpu_health.py), which grades those files."""

from __future__ import annotations

import pytest

from preflight import registry
from preflight.analyze import analyze
from preflight.model import Result
from tests.conftest import corpus_file
from tests.corpus import Expected, accepts, cases

_STALE = "fabricmanager/nvidia_smi_q_fabric_section_completed_but_stale_fm_dead.txt"
_A40 = "fabricmanager/journal_fm_failed_nv_warn_nothing_to_do_2xA40_nvlink_bridge_gpuop610.txt"
_NVTRUST = "fabricmanager/journalctl_xeu_fm_started_ok_then_restart_failed_8xH20_ppcie_nvtrust128.txt"
_RESTART = "fabricmanager/fabricmanager_log_restart_hgxh100_535.161.08_nvswitch_nonfatal_gpud.log"
_MULTICAST = "fabricmanager/fabricmanager_log_multicast_nvswitch_nonfatal_12028_gpud.log"
_SXID_22013 = "fabricmanager/systemctl_status_fm_active_nvswitch_nonfatal_22013_port60_truncated_lines_aihub0007.txt"
_FM_595_VS_590 = "fabricmanager/journal_fm_driver_interface_version_595_vs_loaded_590_crashloop_sprocket_index69459278002.txt"

EXPECTED: dict[str, dict[str, Expected]] = {
    # 18 non-fatal SXid 12028 before a clean restart: WARN, not FAIL
    _RESTART: {"fabric.manager": "warn"},
    # multicast team setup/release is normal; one non-fatal 12028 at the end: WARN
    _MULTICAST: {"fabric.manager": "warn"},
    # a fatal SXid on switch 3 port 33 and an NVLS multicast team setup failure: FAIL
    "fabricmanager/fabricmanager_log_lines_sxid_fatal_20034_port33_multicast_gpu_handle_not_found_gpud.log":
        {"fabric.manager": "fail"},
    # the Talos wrapper picked one of 4 NVSwitch management ports: proves no running fabric
    "fabricmanager/talosctl_logs_node_ip_prefix_fm_wrapper_4_nvswitch_lpf_candidates_hgx_b200_siderolabs893.log":
        {"fabric.manager": "warn"},
    # batch 3
    # 2x A40 with an NVLink bridge: NV_WARN_NOTHING_TO_DO, no NVSwitch: the fabric manager is not applicable
    # (the profile auto-detected from this capture is generic, which expects no NVSwitch)
    _A40: {"fabric.manager": "pass"},
    # 2x RTX 4090, "Detected Pre-NVL5 system" then NV_WARN_NOTHING_TO_DO: the same, not applicable
    "fabricmanager/journal_fm_start_sh_pre_nvl5_nothing_to_do_exit1_2x4090_cubestudio29.txt":
        {"fabric.manager": "pass"},
    # 8x H20: the first start configured the NVSwitches, the later restart failed (the "Job ... failed" header):
    # the last state counts, the fabric manager is not running
    _NVTRUST: {"fabric.manager": "fail"},
    # State Completed but Status Insufficient Resources (CliqueId 0): registration failed
    "fabricmanager/nvidia_smi_q_fabric_completed_insufficient_resources_cliqueid0_azhpc506.txt":
        {"fabric.manager": "fail"},
    # Completed/Success alone: it proves the fabric was set up once; nothing in this capture shows the fabric
    # manager dead (that is the other file of the write-up), so no FAIL from it; the PASS says that liveness
    # is not shown (a WARN would flag every healthy node's `grep -A2 Fabric`)
    _STALE: {"fabric.manager": "pass"},
    # Active: active (running), unicode glyphs and drop-in lines
    "fabricmanager/systemctl_status_fm_active_running_nvlsm_guid_bottlerocket_pr142.txt": {"fabric.manager": "pass"},
    # Active: failed (Result: signal), code=killed, signal=KILL: the fabric manager is dead
    "fabricmanager/systemctl_status_fm_failed_signal_kill_while_fabric_completed.txt": {"fabric.manager": "fail"},
    # batch 4
    # non-fatal SXid 22013 on NVSwitch port 60 in the running unit's journal lines: WARN
    _SXID_22013: {"fabric.manager": "warn"},
    # the sibling node: running, NVSwitches configured, nothing in the journal lines
    "fabricmanager/systemctl_status_fm_active_clean_pre_nvl5_aihub0008.txt": {"fabric.manager": "pass"},
    # B300: the fabric manager and NVLSM running, the partition activated (the pager's "(END)" after it)
    "fabricmanager/systemctl_status_fm_active_nvlsm_blackwell_b300_610_pager_end.txt": {"fabric.manager": "pass"},
    # `nvidia-smi -q` Fabric State "In Progress": registration stuck, the GPUs cannot use the fabric
    "fabricmanager/nvidia_smi_q_fabric_block_in_progress_580_wide_labels_gpuop2511.txt": {"fabric.manager": "fail"},
    # active (running), "TriggeredBy" the NVSwitch device path, NVSwitches configured (prompts kept)
    "fabricmanager/systemctl_status_fm_active_running_triggeredby_nvswitch_path_rhelai02_h100_vm_index66445594161.txt":
        {"fabric.manager": "pass"},
    # the fabric manager 595.71.05 refuses the loaded 590.48.01 kernel module and the unit crash-loops: FAIL
    _FM_595_VS_590: {"fabric.manager": "fail"},
}
KNOWN_GAPS: dict[str, str] = {}


def _result(rel: str) -> Result:
    res = [r for r in analyze(registry.load(), [corpus_file(rel)], profile_name="auto")
           if r.check == "fabric.manager"]
    assert len(res) == 1, res
    return res[0]


@pytest.mark.corpus
@pytest.mark.parametrize("rel", cases(EXPECTED, KNOWN_GAPS))
def test_corpus_expected(rel: str) -> None:
    r = _result(rel)
    assert accepts(EXPECTED[rel]["fabric.manager"], r.status.value), (r.summary, r.evidence)
    assert r.summary and r.evidence
    assert r.remedy or r.status.value == "pass"


@pytest.mark.corpus
def test_corpus_nothing_to_do_is_not_applicable() -> None:
    r = _result(_A40)
    assert "not applicable" in r.summary and r.facts["nvswitch_found"] is False
    assert any("NV_WARN_NOTHING_TO_DO" in e for e in r.evidence)


@pytest.mark.corpus
def test_corpus_nothing_to_do_fails_on_an_nvswitch_profile() -> None:
    [r] = [x for x in analyze(registry.load(), [corpus_file(_A40)], profile_name="h100-sxm-8x")
           if x.check == "fabric.manager"]
    assert r.status.value == "fail" and "fabric.manager/nvswitch-not-found" in r.facts["codes"]


@pytest.mark.corpus
def test_corpus_last_state_counts() -> None:
    r = _result(_NVTRUST)
    assert r.facts["codes"] == ["fabric.manager/service-not-running"] and "starting nvidia-fabricmanager failed" \
        in r.summary


@pytest.mark.corpus
def test_corpus_stale_completed_says_liveness_is_not_shown() -> None:
    r = _result(_STALE)
    assert "fabric Completed/Success on 2 GPU(s)" in r.summary and "liveness not shown" in r.summary


@pytest.mark.corpus
def test_corpus_restart_log_conclusions() -> None:
    r = _result(_RESTART)
    assert "18 x NVSwitch non-fatal error(s) (SXid 12028)" in r.summary and "00000000:83:00.0" in r.summary
    assert r.facts["log_fatal"] == 0 and r.facts["log_nonfatal"] == 18 and r.facts["log_errors"] == 0
    assert r.facts["log_restarts"] == 2 and r.facts["log_configured_after_last_start"] is True


@pytest.mark.corpus
def test_corpus_multicast_log_is_not_a_fault_apart_from_the_sxid() -> None:
    r = _result(_MULTICAST)
    assert r.facts["log_nonfatal"] == 1 and r.facts["log_errors"] == 0 and r.facts["log_fatal"] == 0
    assert any("physical id 3 port 61" in e for e in r.evidence)


@pytest.mark.corpus
def test_corpus_fatal_sxid_names_switch_and_port() -> None:
    r = _result("fabricmanager/fabricmanager_log_lines_sxid_fatal_20034_port33_multicast_gpu_handle_not_found_gpud.log")
    assert "SXid 20034" in r.summary and "00000000:86:00.0 (physical id 3) port 33" in r.summary
    assert "NVLS multicast team setup failed" in r.summary


@pytest.mark.corpus
def test_corpus_talos_wrapper_is_not_a_verified_fabric() -> None:
    r = _result("fabricmanager/talosctl_logs_node_ip_prefix_fm_wrapper_4_nvswitch_lpf_candidates_hgx_b200_"
                "siderolabs893.log")
    assert "not verified" in r.summary and "4 NVSwitch management port(s)" in r.summary
    assert "0xcc40f3030027f630" in r.summary and r.node == "10.183.30.145"


@pytest.mark.corpus
def test_corpus_sxid_in_the_units_journal_names_switch_and_port() -> None:
    r = _result(_SXID_22013)
    assert "SXid 22013" in r.summary and "port 60" in r.summary and r.facts["log_nonfatal"] == 1


@pytest.mark.corpus
def test_corpus_version_refusal_names_both_versions() -> None:
    r = _result(_FM_595_VS_590)
    assert "595.71.05" in r.summary and "590.48.01" in r.summary and "failed" in r.summary
