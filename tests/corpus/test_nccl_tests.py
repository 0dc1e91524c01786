"""The nccl-tests corpus files (`nccl.allreduce`), graded as analyze would: the INDEX.md conclusions."""

from __future__ import annotations

import pytest

from preflight import registry
from preflight.analyze import analyze
from tests.conftest import corpus_file
from tests.corpus import Expected, assert_statuses, cases, either, statuses

_A3HIGH = "nccl-tests/all_reduce_perf_table_only_8xH100_a3high_gke_263GBs_wrong_NA.txt"

EXPECTED: dict[str, dict[str, Expected]] = {
    "nccl-tests/all_reduce_perf_2node_16xH100_gcp_a3mega.txt": {"nccl.allreduce": "pass"},
    # 2 ranks, 4 HCAs named, busbw plateaus near one 400G NIC; the table stops at 32 MiB
    "nccl-tests/all_reduce_perf_2node_1xH100_each_4nics_tree_40GBs_vs_200_prompt_mpirun_nccltests232.txt":
        {"nccl.allreduce": "warn"},
    # no profile matches GB200 ("NVIDIA Graphics Device") or AMD: graded on generic, clean
    "nccl-tests/all_reduce_perf_gb200_nvl72_72gpu_slurm_846GBs_avg745_healthy_coreweave43.txt":
        {"nccl.allreduce": "pass"},
    # INDEX: PASS/WARN, "grade WARN/SKIP with 'no profile', never FAIL": no table is for MI250X (SKIP)
    "nccl-tests/rccl_all_reduce_perf_srun_label_0_prefix_4node_32rank_mi250x_slingshot11_93GBs_rccl1490.txt":
        {"nccl.allreduce": either("pass", "warn", "skip")},
    # one 25 MiB size: no bandwidth verdict
    "nccl-tests/all_reduce_perf_srun_label_single_size_25M_2node_16xA100_p4de_efa_25GBs_blank_prefixed_lines.txt":
        {"nccl.allreduce": "warn"},
    # Batch 3. One node of 8 H100 at 476.53 GB/s: the NVLS figure (nccl-tests #290, #212)
    "nccl-tests/all_reduce_perf_1node_8xH100_nvls_476GBs_pass_nccltests290.txt": {"nccl.allreduce": "pass"},
    # 2 x 8 H100 at 469 GB/s (NVLSTree), Open MPI help lines inside the rank list
    "nccl-tests/all_reduce_perf_2node_16xH100_hgx_nvls_469GBs_mpi_warnings_interleaved_nccltests309.txt":
        {"nccl.allreduce": "pass"},
    # NCCL_ALGO=RING on 2 x 8 H100: ~90-102 GB/s, about two NICs' worth of the 8 x 46 GB/s: under the floor
    "nccl-tests/all_reduce_perf_2node_16xH100_ring_forced_90GBs_srun_nccltests290.txt": {"nccl.allreduce": "fail"},
    # 2 x 8 H100 over NDR, peak 167.87 GB/s (155.57 at 8 GB): under the 245 floor, a third of NVLSTree's ~470
    "nccl-tests/all_reduce_perf_2node_16xH100_srun_prefixed_155GBs_underperf_nccltests290.txt":
        {"nccl.allreduce": "fail"},
    # peak 472 GB/s is fine; 32 KB-128 KB take 0.8-2 ms while 256 KB takes 0.33 ms: mid-size latency spikes
    "nccl-tests/all_reduce_perf_2proc_x8gpu_16xH100_dgx_midsize_latency_spikes_472GBs.txt":
        {"nccl.allreduce": "warn"},
    # 2 x 8 H100, peak 220.61 GB/s: 60% of the 368 GB/s ring figure (8 NICs x 46), under the 2/3 floor (245)
    "nccl-tests/all_reduce_perf_2proc_x8gpu_16xH100_underperforming_220GBs.txt": {"nccl.allreduce": "fail"},
    # 4 x 8 H100 VMs (GPUs on one virtual PCIe bus), 365.84 GB/s: just under the ring figure 368
    "nccl-tests/all_reduce_perf_4node_32xH100_vmware_vms_366GBs_nccltests309.txt": {"nccl.allreduce": "warn"},
    # Batch 4, set B
    # 2 x 8 H200 over BlueField-3 400G RoCE: peak 485.66 GB/s (UCX warning lines around the table)
    "nccl-tests/all_reduce_perf_2node_16xH200_roce_bf3_486GBs_ucx_warn_lines.txt": {"nccl.allreduce": "pass"},
    # the same hosts, 12 data types x 3 sizes (10G-48G), float at 488.19
    "nccl-tests/all_reduce_perf_2node_16xH200_datatype_all_10G_48G_repeated_sizes.txt": {"nccl.allreduce": "pass"},
    # 2 x 8 A100-40GB on OCI RoCE: peak 237.94 (a dip at 512M)
    "nccl-tests/all_reduce_perf_2node_16xA100_40GB_oci_oke_roce_238GBs_512M_dip.txt": {"nccl.allreduce": "pass"},
    # rccl-tests, 8 MI300X on one node: 315.91 GB/s is normal for it
    "nccl-tests/rccl_tests_all_reduce_perf_1node_8xMI300X_316GBs_amd.txt": {"nccl.allreduce": "pass"},
    # the table only (no header): 16 ranks at 383-393 GB/s
    "nccl-tests/all_reduce_perf_table_only_16xH100_8x400G_ib_392GBs_no_header_wutz.txt": {"nccl.allreduce": "pass"},
    # the table only: 8 ranks of one H100 node at ~263 GB/s, below what one H100 node reaches (~360 on NVLink
    # ring, ~470 with NVLS). Without its header it names no GPU: no expected busbw (SKIP), and `#wrong` N/A
    # says the run did not check its results (WARN)
    _A3HIGH: {"nccl.allreduce": either("warn", "fail")},
    # Batch 4, set C
    "nccl-tests/all_reduce_perf_2node_16xH200_oci_slurm_machinefile_preamble_486GBs_1G_16G_index39419071200.txt":
        {"nccl.allreduce": "pass"},
    "nccl-tests/all_reduce_perf_2node_16xH200_runai_mpi_logs_ssh_warnings_479GBs_nebius_index34012719961.txt":
        {"nccl.allreduce": "pass"},
    # INDEX: PASS/WARN. The table's tail only: 96.69 GB/s is the 4 x 200G target (the maintainer: "perfect"); the
    # printed average covers rows the excerpt does not show
    "nccl-tests/all_reduce_perf_table_tail_only_4x200G_nics_96GBs_step_increment_sizes_healthy_nccltests119.txt":
        {"nccl.allreduce": either("pass", "warn")},
}
KNOWN_GAPS: dict[str, str] = {}


def _one(rel: str, check: str):  # noqa: ANN202
    [r] = [x for x in analyze(registry.load(), [corpus_file(rel)], profile_name="auto") if x.check == check]
    return r


@pytest.mark.corpus
@pytest.mark.parametrize("rel", cases(EXPECTED, KNOWN_GAPS))
def test_corpus_conclusions(rel: str) -> None:
    assert_statuses(rel, statuses(rel, EXPECTED[rel]), EXPECTED[rel])


@pytest.mark.corpus
def test_a3mega_facts_on_h100_multi_node() -> None:
    path = corpus_file("nccl-tests/all_reduce_perf_2node_16xH100_gcp_a3mega.txt")
    for profile in ("auto", "h100-sxm-8x"):
        [r] = [x for x in analyze(registry.load(), [path], profile_name=profile) if x.check == "nccl.allreduce"]
        assert r.status.value == "pass", r.summary
        assert r.facts["peak_busbw"] == 338.82
        assert r.facts["avg_busbw"] == 70.742
        assert abs(r.facts["avg_busbw_computed"] - 70.742) < 0.01
        assert r.facts["table"] == "multi_node" and len(r.facts["hosts"]) == 2 and r.facts["ranks"] == 16
        assert r.facts["rows"][0]["bytes"] == 8 and r.facts["rows"][-1]["bytes"] == 8589934592
        # nothing else in the corpus file is mistaken for another of this family's formats
        others = {x.check for x in analyze(registry.load(), [path], profile_name=profile)}
        assert not others & {"nccl.transport", "hang.watchdog", "net.nic", "net.mtu"}


@pytest.mark.corpus
def test_plateau_at_one_nic() -> None:
    r = _one("nccl-tests/all_reduce_perf_2node_1xH100_each_4nics_tree_40GBs_vs_200_prompt_mpirun_nccltests232.txt",
             "nccl.allreduce")
    assert "plateaus at 41.52 GB/s" in r.summary and "4 HCAs" in r.summary


@pytest.mark.corpus
def test_table_without_header_on_the_h100_profile_is_under_the_floor() -> None:
    [r] = [x for x in analyze(registry.load(), [corpus_file(_A3HIGH)], profile_name="h100-sxm-8x")
           if x.check == "nccl.allreduce"]
    assert r.status.value == "warn"
    assert r.facts["codes"] == ["nccl.allreduce/not-validated", "nccl.allreduce/peak-below-expected"]
    assert r.facts["ranks"] == 8 and r.facts["peak_busbw"] == 263.55 and "below the expected 330" in r.summary


@pytest.mark.corpus
def test_table_without_header_says_what_it_cannot_show() -> None:
    r = _one(_A3HIGH, "nccl.allreduce")
    assert r.status.value == "warn"
    assert r.facts["codes"] == ["nccl.allreduce/not-validated", "nccl.allreduce/no-table"]
    assert any("no expected busbw for GPUs the capture does not name" in p for p in r.facts["problems"])


@pytest.mark.corpus
def test_healthy_captures_without_a_table_pass_by_the_general_rule() -> None:
    for rel in ("nccl-tests/all_reduce_perf_gb200_nvl72_72gpu_slurm_846GBs_avg745_healthy_coreweave43.txt",
                "nccl-tests/all_reduce_perf_table_only_16xH100_8x400G_ib_392GBs_no_header_wutz.txt"):
        r = _one(rel, "nccl.allreduce")
        assert r.status.value == "pass" and r.facts["table"] == "none", (rel, r.summary)
        assert any("meets the highest applicable figure preflight holds (368" in e for e in r.evidence), r.evidence
