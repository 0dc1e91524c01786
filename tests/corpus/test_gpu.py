"""gpu.inventory / gpu.nvlink / gpu.topology over the shared corpus (skipped when absent).

Graded with profile "auto": the GPU listing picks the profile (8 x H100 80GB HBM3 ->
h100-sxm-8x; a single GPU or another model -> generic)."""

from __future__ import annotations

import pytest

from preflight.model import Result
from tests.corpus import assert_expected, graded

EXPECTED: dict[str, dict[str, str]] = {
    "nvidia-smi/query_gpu_csv_allfields_1xH100_590.48.01_idle_nvgpuexp.csv": {"gpu.inventory": "pass"},
    "nvidia-smi/query_gpu_csv_allfields_1xH100_590.48.01_load_nvgpuexp.csv": {"gpu.inventory": "pass"},
    "nvidia-smi/query_gpu_csv_allfields_1xH200_mig_enabled_590.48.01_idle_nvgpuexp.csv": {"gpu.inventory": "pass"},
    "nvidia-smi/nvidia_smi_L_1xH200_mig_5_instances_nvgpuexp.txt": {"gpu.inventory": "pass"},
    "nvidia-smi/smi_table_8xH100_550.90.07_healthy_gpud.txt": {"gpu.inventory": "pass"},
    "nvidia-smi/smi_table_1xH100_590.48.01_load_nvgpuexp.txt": {"gpu.inventory": "pass"},
    "nvidia-smi/smi_table_1gpu_525.125.06_fan_ERR_gpud.txt": {"gpu.inventory": "pass"},
    "nvidia-smi/nvlink_status_8xA100_sxm4_80gb_gpud.txt": {"gpu.nvlink": "pass"},
    "nvidia-smi/nvlink_s_1xH100_vm_18links_26.562GBs_nvgpuexp.txt": {"gpu.nvlink": "pass"},
    "topo/topo_m_1xH100_vm_ansi_underline_header_nvgpuexp.txt": {"gpu.topology": "pass"},
}

MINE = ("gpu.inventory", "gpu.nvlink", "gpu.topology")


def _results(rel: str) -> dict[str, Result]:
    return graded(rel, MINE)


@pytest.mark.corpus
@pytest.mark.parametrize("rel", sorted(EXPECTED))
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
