"""gpu.health / gpu.driver (and, for the -q files, fabric.manager) over the shared corpus.

Graded with profile "auto", as `preflight analyze` does. A `nvidia-smi -q` file feeds all
three checks; the default table feeds gpu.health only. Skipped when the corpus is absent."""

from __future__ import annotations

import pytest

from preflight.model import Result
from tests.corpus import Expected, assert_expected, cases, either, graded

_Q_8X_161 = "nvidia-smi/q_8xH100_535.161.08_fabric_completed_gpud.txt"
_Q_8X_183 = "nvidia-smi/q_8xH100_535.183.01_fabric_completed_gpud.txt"
_Q_A10 = "nvidia-smi/q_1xA10_535.129.03_remap_pending_gpud.txt"
_Q_590 = "nvidia-smi/q_1xH100_590.48.01_idle_recovery_action_fabric_health_nvgpuexp.txt"
_T_ERR = "nvidia-smi/smi_table_1gpu_525.125.06_fan_ERR_gpud.txt"
_MISMATCH_580 = "nvml-errors/nvidia_smi_driver_library_mismatch_580.178_vs_kmod_580.173.02_truenas19.txt"
_MISMATCH_OLD = "nvml-errors/nvidia_smi_driver_library_mismatch_old_format_no_version_shine30.txt"
_NO_DEVICES_RMINIT = "nvml-errors/nvidia_smi_no_devices_found_rminitadapter_failed_rtx5090_ogkm862.txt"
_Q_4XA100 = "nvidia-smi/q_4xA100_sxm4_80gb_555.42.02_gpu1_remapped_rows_pending_gpu2_remapped_done.txt"
_Q_GPU52 = "nvidia-smi/q_d_ecc_row_remapper_gpu52_pending_yes_ecc_mode_unknown_error_550.90.07_index21335815681.txt"
_Q_EXCERPT = "nvidia-smi/q_excerpt_A100_remapped_rows_pending_yes_dram_correctable_177_mlengineering.txt"

EXPECTED: dict[str, dict[str, Expected]] = {
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
    # Batch 3 section 10: the driver stack is unusable, so no GPU health can be read (gpu.health ERROR,
    # folded into gpu.driver where the message is the same one)
    _MISMATCH_580: {"gpu.driver": "fail", "gpu.health": "error"},
    "nvml-errors/nvidia_smi_driver_library_mismatch_nvml_570.124_tinygrad_ogkm47.txt":
        {"gpu.driver": "fail", "gpu.health": "error"},
    "nvml-errors/nvidia_smi_driver_library_mismatch_nvml_550.144_ci_intel_llvm17614.txt":
        {"gpu.driver": "fail", "gpu.health": "error"},
    _MISMATCH_OLD: {"gpu.driver": "fail", "gpu.health": "error"},
    # no GPU usable: the kernel log says the GPU failed to initialise (RmInitAdapter)
    _NO_DEVICES_RMINIT: {"gpu.driver": "fail", "gpu.health": "error"},
    "nvml-errors/nvidia_smi_couldnt_communicate_with_driver_a100_gcp10.txt": {"gpu.driver": "fail", "gpu.health": "error"},
    # Batch 4
    # GPU 9E:00 Remapped Rows Pending Yes: reset to activate the remap; C2:00's remap is already applied (Pending No);
    # Fabric N/A on every GPU: a 4-GPU A100 board has no NVSwitch, the fabric manager does not apply
    _Q_4XA100: {"gpu.health": "fail", "gpu.driver": "pass", "fabric.manager": "skip"},
    "nvidia-smi/smi_table_4xA100_sxm4_80gb_555.42.02_healthy_no_procs.txt": {"gpu.health": "pass"},
    # an excerpt (`[...]`) of one GPU: Remapped Rows Pending Yes
    _Q_EXCERPT: {"gpu.health": "fail", "gpu.driver": "pass"},
    # "Unable to determine the device handle for GPU...: GPU is lost. Reboot the system": the GPU is gone (gpu.inventory
    # FAILs it; no health can be read of a GPU that does not answer, and the driver is not the fault)
    "nvidia-smi/nvidia_smi_unable_device_handle_gpu_is_lost_reboot_owod81.txt": {"gpu.driver": "skip", "gpu.health": "fail"},
    "nvidia-smi/smi_table_1xH200_570.86.15_mig_enabled_2_mig_devices_in_container_msxf.txt": {"gpu.health": "pass"},
    "nvidia-smi/q_d_ecc_2xA100_pcie_555.42.02_all_zero_enabled_healthy_index18373896745.txt":
        {"gpu.health": "pass", "gpu.driver": "pass"},
    # INDEX: FAIL/WARN. Remapped Rows Pending Yes and ECC Mode "Unknown Error"
    _Q_GPU52: {"gpu.health": either("fail", "warn"), "gpu.driver": "pass"},
    # INDEX: PASS/WARN (persistence Off is gpu.inventory's concern)
    "nvidia-smi/smi_table_2xA100_pcie_40gb_555.42.02_healthy_dl380_index18373896745.txt":
        {"gpu.health": either("pass", "warn")},
}
KNOWN_GAPS: dict[str, str] = {}

MINE = ("gpu.health", "gpu.driver")


def _results(rel: str, checks: tuple[str, ...] = MINE + ("fabric.manager",)) -> dict[str, Result]:
    return graded(rel, checks)


@pytest.mark.corpus
@pytest.mark.parametrize("rel", cases(EXPECTED, KNOWN_GAPS))
def test_corpus_expected(rel: str) -> None:
    got = _results(rel)
    assert_expected(rel, got, EXPECTED[rel])
    for check in EXPECTED[rel]:
        if got[check].status.value in ("fail", "warn"):
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


@pytest.mark.corpus
@pytest.mark.parametrize(("rel", "library", "kmod"), [
    (_MISMATCH_580, "580.178", "580.173.02"),
    ("nvml-errors/nvidia_smi_driver_library_mismatch_nvml_570.124_tinygrad_ogkm47.txt", "570.124", "unknown"),
    ("nvml-errors/nvidia_smi_driver_library_mismatch_nvml_550.144_ci_intel_llvm17614.txt", "550.144", "unknown"),
    (_MISMATCH_OLD, "unknown", "unknown"),
])
def test_corpus_mismatch_names_both_versions(rel: str, library: str, kmod: str) -> None:
    r = _results(rel)["gpu.driver"]
    assert r.facts["codes"] == ["gpu.driver/version-mismatch"]
    assert r.facts["mismatch"] == {"library": library, "kernel_module": kmod}
    if library == kmod == "unknown":
        assert "versions not shown: unknown" in r.summary
    else:
        assert f"user-space library {library}, kernel module {kmod}" in r.summary
    assert "reboot" in r.remedy


@pytest.mark.corpus
def test_corpus_no_devices_names_the_adapter_init_failure() -> None:
    got = _results(_NO_DEVICES_RMINIT)
    r = got["gpu.driver"]
    assert r.facts["codes"] == ["gpu.driver/no-devices"]
    assert "GPU 0000:01:00 failed to initialise (RmInitAdapter failed)" in r.summary
    assert any("RmInitAdapter failed! (0x22:0x56:884)" in e for e in r.evidence)
    assert "BIOS" in r.remedy
    assert got["gpu.health"].facts["codes"] == ["gpu.health/not-read-driver-error"]


@pytest.mark.corpus
def test_corpus_driver_not_loaded_code() -> None:
    r = _results("nvml-errors/nvidia_smi_couldnt_communicate_with_driver_a100_gcp10.txt")["gpu.driver"]
    assert r.facts["codes"] == ["gpu.driver/driver-not-loaded"] and "modprobe" in r.remedy


@pytest.mark.corpus
def test_corpus_remap_pending_on_one_gpu_of_four() -> None:
    r = _results(_Q_4XA100)["gpu.health"]
    assert r.summary == "GPU 1 (00000000:9E:00.0): row remap pending"
    pending = {g["gpu"]: g["remapped_pending"] for g in r.facts["gpus"]}
    assert pending == {"GPU 0 (00000000:68:00.0)": False, "GPU 1 (00000000:9E:00.0)": True,
                       "GPU 2 (00000000:C2:00.0)": False, "GPU 3 (00000000:D4:00.0)": False}


@pytest.mark.corpus
def test_corpus_unknown_error_fields_are_said() -> None:
    r = _results(_Q_GPU52)["gpu.health"]
    assert "row remap pending" in r.summary and "'Unknown Error'" in r.summary
    assert any("Unknown Error" in e for e in r.evidence)
