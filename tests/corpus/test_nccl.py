"""The NCCL log corpus files (`nccl.transport`), graded as analyze would: the INDEX.md conclusions."""

from __future__ import annotations

import pytest

from preflight import registry
from preflight.analyze import analyze
from tests.conftest import corpus_file

EXPECTED = {
    "nccl/nccl_info_cloudwatch_iso_ts_line_before_each_line_nvls_not_available_sagemaker_awsofi715.log":
        {"nccl.transport": "pass"},
    "nccl/nccl_info_ib_hca_2_of_n_oob_ipoib_ibs85f0_nvswitch_but_0_nvls_channels_nccltests228.log":
        {"nccl.transport": "warn"},
    "nccl/nccl_info_k8s_pod_hostname_single_node_h100_p2p_cumem_channels_vllm6732.log": {"nccl.transport": "pass"},
    "nccl/nccl_info_mpirun_tag_output_bracket_rank_prefix_net_socket_shm_2node_nccl1232.log":
        {"nccl.transport": "warn"},
    "nccl/nccl_info_nccltests_header_interleaved_irdma_roce_ibext_plugin_l40_2node_nccltests227.log":
        {"nccl.transport": "warn"},
    "nccl/nccl_info_single_node_4gpu_p2p_direct_pointer_rings_trees_no_net_healthy_tinygrad_p2p_pr22.log":
        {"nccl.transport": "pass"},
    "nccl/nccl_old_2.3_docker_no_libibverbs_socket_on_lo_and_eth0_2_interfaces_horovod789.log":
        {"nccl.transport": "fail"},
    "nccl/nccl_old_2.3_warn_closed_by_remote_peer_mixed_eth0_eno2_socket_ifname_two_hosts_horovod666.log":
        {"nccl.transport": "fail"},
    "nccl/nccl_warn_net_ib_got_completion_error4_vendor_err81_service_thread_closed_nccltests252.log":
        {"nccl.transport": "fail"},
    "nccl/nccl_warn_socketprogress_closed_by_remote_peer_proxy_cuda_oom_narval_nccl1235.log":
        {"nccl.transport": "fail"},
    "nccl/nccl_warn_ts_prefix_ibv_modify_qp_110_timed_out_init_rtr_gid3_cross_nic_7nodes_nccl2013.log":
        {"nccl.transport": "fail"},
}


def _one(rel: str, check: str):  # noqa: ANN202
    [r] = [x for x in analyze(registry.load(), [corpus_file(rel)], profile_name="auto") if x.check == check]
    return r


@pytest.mark.corpus
@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_corpus_conclusions(rel: str) -> None:
    res = analyze(registry.load(), [corpus_file(rel)], profile_name="auto")
    got = {r.check: r.status.value for r in res if r.check in EXPECTED[rel]}
    assert got == EXPECTED[rel], [(r.check, r.status.value, r.summary) for r in res]


@pytest.mark.corpus
def test_oom_is_the_root_cause_not_the_socket() -> None:
    r = _one("nccl/nccl_warn_socketprogress_closed_by_remote_peer_proxy_cuda_oom_narval_nccl1235.log", "nccl.transport")
    assert r.summary.startswith("CUDA out of memory in NCCL on ng30903 GPU3") and "follow from it" in r.summary
    assert "not a network fault" in r.remedy


@pytest.mark.corpus
def test_ib_completion_error_4_is_named() -> None:
    r = _one("nccl/nccl_warn_net_ib_got_completion_error4_vendor_err81_service_thread_closed_nccltests252.log",
             "nccl.transport")
    assert "completion error 4 from peer 10.0.35.1 on kolyoz2 GPU0" in r.summary and "local protection" in r.summary
    assert any("Service thread" in e for e in r.evidence) and "peermem" in r.remedy


@pytest.mark.corpus
def test_qp_setup_with_redacted_pid_and_time_stamp() -> None:
    r = _one("nccl/nccl_warn_ts_prefix_ibv_modify_qp_110_timed_out_init_rtr_gid3_cross_nic_7nodes_nccl2013.log",
             "nccl.transport")
    assert "(INIT -> RTR) on dev mlx_x:1: 110 Connection timed out, GID index 3" in r.summary
    assert "NCCL_CROSS_NIC" in r.remedy


@pytest.mark.corpus
def test_old_nccl_bound_loopback() -> None:
    r = _one("nccl/nccl_old_2.3_docker_no_libibverbs_socket_on_lo_and_eth0_2_interfaces_horovod789.log",
             "nccl.transport")
    assert "NCCL bound lo" in r.summary and any("libibverbs" in e for e in r.evidence)
