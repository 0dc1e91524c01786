"""The NCCL log corpus files (`nccl.transport`), graded as analyze would: the INDEX.md conclusions."""

from __future__ import annotations

import pytest

from preflight import registry
from preflight.analyze import analyze
from tests.conftest import corpus_file
from tests.corpus import Expected, assert_statuses, cases, either, statuses

_MLX4 = "nccl/nccl_info_ib_mlx4_cx3_4nodes_using_network_ib_nccl621.log"
_GDR_DISTANCE = "nccl/nccl_info_ib_gdr_disabled_distance_ring_via_net_ib_no_gdrdma_nvpeermem56.log"
_NCCL20 = "nccl/nccl2_0_warn_call_to_connect_failed_refused_unhandled_system_error_masked_host_nccl111.log"
_H800_HEAD = ("nccl/nccl_info_1node_8xH800_nf5688m7_ib_no_device_socket_nvls_available_all_devs_broadcast_perf_head_"
              "index24836070500.log")

EXPECTED: dict[str, dict[str, Expected]] = {
    "nccl/nccl_info_cloudwatch_iso_ts_line_before_each_line_nvls_not_available_sagemaker_awsofi715.log":
        {"nccl.transport": "pass"},
    "nccl/nccl_info_ib_hca_2_of_n_oob_ipoib_ibs85f0_nvswitch_but_0_nvls_channels_nccltests228.log":
        {"nccl.transport": "warn"},
    "nccl/nccl_info_k8s_pod_hostname_single_node_h100_p2p_cumem_channels_vllm6732.log": {"nccl.transport": "pass"},
    # INDEX: FAIL/WARN. Two hosts and channels via NET/Socket: multi-node NCCL over TCP (the rule:
    # the socket transport across nodes is a FAIL; a site without RDMA sets nccl.expect_net = Socket)
    "nccl/nccl_info_mpirun_tag_output_bracket_rank_prefix_net_socket_shm_2node_nccl1232.log":
        {"nccl.transport": "fail"},
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
    # Batch 3 (INDEX section 7, second table)
    "nccl/nccl_info_channels_via_p2p_ipc_read_pytorch58155.log": {"nccl.transport": "pass"},
    # NCCL_ALGO names NVLS, "16 coll channels, 0 nvls channels": NVLS requested but not used
    "nccl/nccl_info_h800_p2p_direct_0_nvls_channels_nccl892.log": {"nccl.transport": "warn"},
    "nccl/nccl_info_nvls_heads_3node_24rank_h100_nccl1453.log": {"nccl.transport": "pass"},
    # INDEX gives no status: "NVLS multicast support is not available" and nothing else. NCCL prints
    # that line on every GPU without NVSwitch multicast (A100 included: nvls.cc ncclNvlsInit), and no
    # line here names the GPU model, so it is a note, as on the SageMaker capture above (pass); on a
    # profile whose GPUs have NVLS (h100-sxm-8x) the same lines WARN (tests/checks/test_nccl.py).
    "nccl/nccl_info_nvls_multicast_not_available_nccltests188.log": {"nccl.transport": "pass"},
    "nccl/nccl_info_p2p_direct_pointer_nvls_8heads_nccltests213.log": {"nccl.transport": "pass"},
    # a NET/Socket channel from rank 15 (another node) over a virtual eth0: multi-node over TCP
    "nccl/nccl_info_ring_via_net_socket_container_nccl367_part2.log": {"nccl.transport": "fail"},
    # NCCL uses mlx5_10 and mlx5_11 only; the names prove at least 12 RDMA devices on the node
    "nccl/nccl_info_roce_2nics_dgxh100_nccltests185.log": {"nccl.transport": "warn"},
    # libibverbs missing, sockets on eth0 172.17.0.2: Docker's default bridge network reaches no
    # other host
    "nccl/nccl_info_socket_container_eth0_172.17_no_ibverbs_nccl367.log": {"nccl.transport": "fail"},
    # one host "ai", sockets on eth0 for want of libibverbs; nothing shows several nodes: WARN
    "nccl/nccl_info_socket_eth0_libibverbs_missing_nccl857.log": {"nccl.transport": "warn"},
    # virbr0 in the socket list while the data path is NET/IB; one HCA for several GPUs
    "nccl/nccl_info_socket_includes_virbr0_mixed_ib_nccltests29.log": {"nccl.transport": "warn"},
    "nccl/nccl_info_socket_on_lo_127.0.0.1_nccl1053.log": {"nccl.transport": "fail"},
    "nccl/nccl_warn_ibv_modify_qp_network_unreachable_dgxh100_nccltests185.log": {"nccl.transport": "fail"},
    "nccl/nccl_warn_ibv_modify_qp_no_such_device_roce_nccl799.log": {"nccl.transport": "fail"},
    # Batch 4, set B
    # no IB device: sockets over eno1 and a veth, connect timeouts between the hosts
    "nccl/nccl_info_socket_eno1_plus_veth_ib_no_device_connect_timeout_oneflow3586.log": {"nccl.transport": "fail"},
    # NCCL_IB_DISABLE, sockets over ip6tnl0 and veth0 (IPv6)
    "nccl/nccl_info_socket_ib_disabled_ip6tnl0_veth0_ipv6_nccl529.log": {"nccl.transport": "fail"},
    # no IB device, sockets on enp67s0 of one host "ps-8"; nothing shows several nodes: WARN (as nccl857)
    "nccl/nccl_info_socket_enp67s0_ib_no_device_docker_hostnet_nccl1105.log": {"nccl.transport": "warn"},
    # NCCL 2.3 "Using internal Network Socket" over IPoIB ib0 on one host "gpu2": sockets, nothing shows several nodes
    "nccl/nccl_info_old_2.3_internal_network_socket_over_ib0_ipoib_nccl207.log": {"nccl.transport": "warn"},
    # IB on mlx4_0 on 4 nodes; IPoIB ib0 in the site's 172.17.0.0/16 is not Docker's bridge: healthy
    _MLX4: {"nccl.transport": "pass"},
    # 5 HCAs, one of them RoCE among IB ports (`[155] ` rank prefix): the RoCE port cannot reach IB peers: WARN
    "nccl/nccl_info_ib_5hcas_mixed_roce_rank_prefix_p2p_ipc_nccl302.log": {"nccl.transport": "warn"},
    # every GPU's network channels via NET/IB without GPUDirect RDMA (distance 3 >= 2): staged through host memory
    _GDR_DISTANCE: {"nccl.transport": "warn"},
    # IB completion status 12 (transport retry counter exceeded), vendor err 129
    "nccl/nccl_warn_net_ib_completion_status12_vendor_err129_ipv6_gid_nccl1405.log": {"nccl.transport": "fail"},
    # Batch 4, set C
    # INDEX: WARN/PASS. One node (nccl-tests -g 8: all 8 ranks of the communicator in one process on nf5688m7-1):
    # sockets over enx... and a veth carry nothing between nodes; NVLS on. The broadcast table was cut before its
    # first row: no measurement (nccl.allreduce SKIP)
    _H800_HEAD: {"nccl.transport": either("warn", "pass"), "nccl.allreduce": "skip"},
    # INDEX: PASS (SKIP tolerated). NVLS tree, 16 nvls channels, Init COMPLETE
    "nccl/nccl_info_1node_8xH800_nf5688m7_connected_nvls_tree_16_nvls_channels_init_complete_tail_index24836070500.log":
        {"nccl.transport": either("pass", "skip")},
    # no libibverbs, sockets over ens5 and a veth between 2 hosts (ANSI-coloured prefix)
    "nccl/nccl_info_ansi_prefix_no_libibverbs_socket_ens5_veth_ring_via_net_socket_2_7_8_pytorch68893.log":
        {"nccl.transport": "fail"},
    # "Call to connect returned Connection refused, retrying": the bootstrap cannot reach its root
    "nccl/nccl_info_call_to_connect_refused_retrying_bootstrap_warn_v100_espnet1940.log": {"nccl.transport": "fail"},
    # NCCL 2.0 (host masked by the author): connect refused, then 'unhandled system error'
    _NCCL20: {"nccl.transport": "fail"},
    # bootstrap connect to fe80::...%ib1 aborted
    "nccl/nccl_info_socketstartconnect_ipv6_linklocal_ib1_software_caused_connection_abort_nccl975.log":
        {"nccl.transport": "fail"},
    # socket transport connect abort; proxy connect failed
    "nccl/nccl_warn_net_socket_connect_abort_proxy_connect_failed_remote_peer_closed_nccltests166.log":
        {"nccl.transport": "fail"},
    # DGX A100 channels via NET/Socket, then a system error
    "nccl/nccl_info_dgxa100_channels_send_via_net_socket_0_to_7_include_net_h_error_nccl697.log":
        {"nccl.transport": "fail"},
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
    assert {"nccl.transport/bad-interface", "nccl.transport/socket-fallback"} <= set(r.facts["codes"])


@pytest.mark.corpus
@pytest.mark.parametrize(("rel", "codes", "words"), [
    ("nccl/nccl_info_h800_p2p_direct_0_nvls_channels_nccl892.log", ["nvls-requested-not-used"], ["NVLS"]),
    ("nccl/nccl_info_ring_via_net_socket_container_nccl367_part2.log", ["socket-transport"], ["virtual NIC eth0"]),
    ("nccl/nccl_info_roce_2nics_dgxh100_nccltests185.log", ["hcas-subset"], ["mlx5_10, mlx5_11"]),
    ("nccl/nccl_info_socket_container_eth0_172.17_no_ibverbs_nccl367.log", ["bad-interface", "socket-single-host"],
     ["eth0 (172.17.0.2 in 172.17.0.0/16)"]),
    ("nccl/nccl_info_socket_eth0_libibverbs_missing_nccl857.log", ["socket-single-host"], ["TCP sockets"]),
    ("nccl/nccl_info_socket_includes_virbr0_mixed_ib_nccltests29.log", ["bad-interface-listed"], ["virbr0"]),
    ("nccl/nccl_info_socket_on_lo_127.0.0.1_nccl1053.log", ["bad-interface"], ["NCCL bound lo"]),
    ("nccl/nccl_warn_ibv_modify_qp_network_unreachable_dgxh100_nccltests185.log", ["ib-qp-setup-failed"],
     ["Network is unreachable", "dgxh100-3 GPU0"]),
    ("nccl/nccl_warn_ibv_modify_qp_no_such_device_roce_nccl799.log", ["ib-qp-setup-failed"],
     ["mlx5_3", "No such device"]),
])
def test_batch3_codes_and_names(rel: str, codes: list[str], words: list[str]) -> None:
    r = _one(rel, "nccl.transport")
    assert {f"nccl.transport/{c}" for c in codes} <= set(r.facts["codes"]), r.facts["codes"]
    for w in words:
        assert w in r.summary, r.summary
