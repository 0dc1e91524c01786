"""gpu.health / gpu.driver (and, for the -q files, fabric.manager) over the shared corpus.

Graded with profile "auto", as `preflight analyze` does. A `nvidia-smi -q` file feeds all
three checks; the default table feeds gpu.health only. Skipped when the corpus is absent."""

from __future__ import annotations

import pytest

from preflight.model import Result
from tests.corpus import assert_expected, graded

_Q_8X_161 = "nvidia-smi/q_8xH100_535.161.08_fabric_completed_gpud.txt"
_Q_8X_183 = "nvidia-smi/q_8xH100_535.183.01_fabric_completed_gpud.txt"
_Q_A10 = "nvidia-smi/q_1xA10_535.129.03_remap_pending_gpud.txt"
_Q_590 = "nvidia-smi/q_1xH100_590.48.01_idle_recovery_action_fabric_health_nvgpuexp.txt"
_T_ERR = "nvidia-smi/smi_table_1gpu_525.125.06_fan_ERR_gpud.txt"

EXPECTED: dict[str, dict[str, str]] = {
    # healthy HGX H100: ECC 0, remaps 0/0, fabric Completed/Success (power brake at idle is not a fault)
    _Q_8X_161: {"gpu.health": "pass", "gpu.driver": "pass", "fabric.manager": "pass"},
    _Q_8X_183: {"gpu.health": "pass", "gpu.driver": "pass", "fabric.manager": "pass"},
    # remap pending on the A10 (Reset Required still says No); Fabric N/A = no NVSwitch: not flagged
    _Q_A10: {"gpu.health": "fail", "gpu.driver": "pass", "fabric.manager": "skip"},
    # 590 layout: Recovery Action None, Health block all N/A, fabric Completed/Success
    _Q_590: {"gpu.health": "pass", "gpu.driver": "pass", "fabric.manager": "pass"},
    "nvidia-smi/smi_table_8xH100_550.90.07_healthy_gpud.txt": {"gpu.health": "pass"},
    "nvidia-smi/smi_table_1xH100_590.48.01_load_nvgpuexp.txt": {"gpu.health": "pass"},
    # fan ERR! with a normal temperature: WARN (see the grader for the reasoning)
    _T_ERR: {"gpu.health": "warn"},
    "nvidia-smi/q_d_page_retirement_8gpu_azure_535.86.10_pending_blacklist_yes_table_full_EDITED_aznhc.txt":
        {"gpu.health": "fail", "gpu.driver": "pass"},
    "nvidia-smi/q_d_page_retirement_8gpu_azure_domains_0001_0008_535.86.10_all_zero_healthy_aznhc.txt":
        {"gpu.health": "pass", "gpu.driver": "pass"},
    "nvidia-smi/q_d_row_remapper_i1_prompt_uncorrectable1_pending_yes_511max_1high_rtxpro6000_blog.txt":
        {"gpu.health": "fail"},
    "nvidia-smi/query_gpu_csv_allfields_1xH100_590.48.01_idle_nvgpuexp.csv": {"gpu.health": "pass"},
    "nvidia-smi/query_gpu_csv_allfields_1xH100_590.48.01_load_nvgpuexp.csv": {"gpu.health": "pass"},
    "nvidia-smi/query_gpu_csv_allfields_1xH200_mig_enabled_590.48.01_idle_nvgpuexp.csv": {"gpu.health": "pass"},
    "nvidia-smi/smi_table_old_325.15_prompt_3_of_4_gtx_titan_node_lost_a_gpu_cbio39.txt": {"gpu.health": "pass"},
    "nvidia-smi/smi_table_prompt_above_510.47.03_geforce_4gb_kvm_fm_start_failed_gpuop356.txt":
        {"gpu.health": "pass", "gpu.driver": "pass", "fabric.manager": "warn"},
    "nvml-errors/nvidia_smi_r_i1_could_not_be_reset_in_use_by_another_client_after_pm0_blog.txt": {"gpu.health": "fail"},
    "nvml-errors/dmesg_raw_nvidia_probe_not_called_3_devices_nouveau_conflict_lsmod_empty_bigdata133.txt":
        {"gpu.driver": "fail"},
    "nvml-errors/k8s_job_exporter_log_nvidia_smi_q_x_exit9_couldnt_communicate_embedded_python_error_pai3537.txt":
        {"gpu.driver": "fail", "gpu.health": "error"},
    "nvml-errors/nvidia_smi_mismatch_prompt_proc_version_520.56.06_vs_dpkg_nvidia_smi_525.85.12_illinois70.txt":
        {"gpu.driver": "fail", "gpu.health": "error"},
    "nvml-errors/proc_driver_version_520.56.06_dpkg_nvidia_smi_525.85.12_mismatch_evidence_illinois70.txt":
        {"gpu.driver": "fail"},
    "nvml-errors/nvidia_smi_unable_device_handle_A1_unknown_error_plus_dmesg_T_grep_nvrm_xid79_prompts_akash209.txt":
        {"gpu.driver": "skip", "gpu.health": "fail"},
    "nvml-errors/nvidia_smi_unable_device_handle_GPU0_colon_space_then_no_devices_found_rtx4080_595.txt":
        {"gpu.driver": "skip", "gpu.health": "fail"},
}

MINE = ("gpu.health", "gpu.driver")


def _results(rel: str, checks: tuple[str, ...] = MINE + ("fabric.manager",)) -> dict[str, Result]:
    return graded(rel, checks)


@pytest.mark.corpus
@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_corpus_expected(rel: str) -> None:
    got = _results(rel)
    assert_expected(rel, got, EXPECTED[rel])
    for check, status in EXPECTED[rel].items():
        if status in ("fail", "warn"):
            assert got[check].remedy, got[check]
    assert set(got) == set(EXPECTED[rel]), f"{rel}: unexpected checks {sorted(set(got) - set(EXPECTED[rel]))}"


@pytest.mark.corpus
def test_corpus_page_retirement_table_full() -> None:
    r = _results("nvidia-smi/q_d_page_retirement_8gpu_azure_535.86.10_pending_blacklist_yes_table_full_EDITED_"
                 "aznhc.txt")["gpu.health"]
    summary_and_problems = " ".join([r.summary, *r.facts["problems"]])
    for bus, total in (("00000002", 63), ("00000006", 65), ("00000008", 64), ("00000001", 65)):
        assert f"{bus}:00:00.0): page retirement table full ({total} pages retired" in summary_and_problems, bus
    assert "00000004:00:00.0): page retirement pending" in summary_and_problems
    assert not any(b in summary_and_problems for b in ("00000003", "00000005", "00000007"))
    assert "RMA" in r.remedy


@pytest.mark.corpus
def test_corpus_reset_refused_names_the_gpu() -> None:
    r = _results("nvml-errors/nvidia_smi_r_i1_could_not_be_reset_in_use_by_another_client_after_pm0_blog.txt")
    assert r["gpu.health"].summary == "GPU 00000000:55:00.0 could not be reset: In use by another client"
    assert "gpu.driver" not in r  # the persistence-mode reply is not a driver fault


@pytest.mark.corpus
def test_corpus_loaded_module_older_than_packages() -> None:
    r = _results("nvml-errors/proc_driver_version_520.56.06_dpkg_nvidia_smi_525.85.12_mismatch_evidence_"
                 "illinois70.txt")["gpu.driver"]
    assert "kernel module 520.56.06" in r.summary and "525.85.12" in r.summary and "reboot" in r.remedy


@pytest.mark.corpus
def test_corpus_probe_not_called_is_a_driver_fault() -> None:
    r = _results("nvml-errors/dmesg_raw_nvidia_probe_not_called_3_devices_nouveau_conflict_lsmod_empty_"
                 "bigdata133.txt")["gpu.driver"]
    assert "another driver" in r.summary and "nouveau" in r.remedy


@pytest.mark.corpus
def test_corpus_a10_remap_pending_conclusion() -> None:
    r = _results(_Q_A10)["gpu.health"]
    assert "remap pending" in r.summary and "4 rows" in r.summary
    assert "drain until a GPU reset activates the remap" in r.remedy
    g = r.facts["gpus"][0]
    assert g["remapped_pending"] is True and g["remapped_failure"] is False
    assert g["uncorrectable_ecc"] == 0 and g["remapped_rows_uncorrectable"] == 4
    assert g["reset_required"] is False  # the file says No: the grade keys on Remapped Rows


@pytest.mark.corpus
def test_corpus_8xh100_facts() -> None:
    got = _results(_Q_8X_161)
    gpus = got["gpu.health"].facts["gpus"]
    assert len(gpus) == 8
    assert all(g["uncorrectable_ecc"] == 0 and g["uncorrectable_ecc_aggregate"] == 0 for g in gpus)
    assert all(g["remapped_pending"] is False and g["remapped_failure"] is False for g in gpus)
    assert got["gpu.driver"].facts["driver"] == "535.161.08" and got["gpu.driver"].facts["cuda"] == "12.2"


@pytest.mark.corpus
def test_corpus_590_recovery_action_read() -> None:
    got = _results(_Q_590)
    assert got["gpu.health"].facts["gpus"][0]["recovery_action"] == "None"
    assert got["gpu.driver"].facts["driver"] == "590.48.01" and got["gpu.driver"].facts["cuda"] == "13.1"


@pytest.mark.corpus
def test_corpus_fan_err_names_gpu0() -> None:
    r = _results(_T_ERR)["gpu.health"]
    assert "GPU 0" in r.summary and any("ERR!" in e for e in r.evidence)
    assert r.facts["gpus"][0]["sensor_errors"] == ["fan"]
