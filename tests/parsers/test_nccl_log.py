"""preflight.parsers.nccl_log: NCCL_DEBUG lines of every era as facts (fixtures written here in
NCCL's own formats, from the format strings of NVIDIA/nccl src/ and aws-ofi-nccl)."""

from __future__ import annotations

import pytest

from preflight.framing import Doc
from preflight.parsers import nccl_log
from preflight.parsers.nccl_log import NcclLog, NcclProc, classify


def parse(text: str) -> NcclLog:
    return nccl_log.parse(Doc(text))


def one(text: str) -> NcclProc:
    procs = list(parse(text).procs.values())
    assert len(procs) == 1, procs
    return procs[0]


# ----------------------------------------------------------------------------- WARN kinds

@pytest.mark.parametrize(("msg", "kind", "detail"), [
    # IB work completions, every wording from 2.3 to 2.28
    ("NET/IB : Got completion with error 12, opcode 1, len 0, vendor err 129", "ib_completion",
     {"code": "12", "vendor": "129"}),
    ("NET/IB : Got completion from peer 10.1.4.12<56711> with error 12, opcode 0, len 0, vendor err 129 (Send) "
     "localGid ::ffff:10.1.4.11 remoteGid ::ffff:10.1.4.12", "ib_completion",
     {"peer": "10.1.4.12", "code": "12", "vendor": "129"}),
    ("NET/IB : Got completion from peer 10.1.4.12<56711> with status=5 opcode=0 len=0 vendor err 249 (Recv)",
     "ib_completion", {"peer": "10.1.4.12", "code": "5", "vendor": "249"}),
    ("NET/IB: Got completion from peer 10.1.4.12<56711> with status=12 opcode=0 len=65536 vendor err 129 (Send) "
     "hca mlx5_4", "ib_completion", {"peer": "10.1.4.12", "code": "12", "vendor": "129", "hca": "mlx5_4"}),
    ("NET/IB: Got completion from peer 10.1.4.12<56711> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) "
     "reqSize=524288 vendor_err=129 req_type=Send localGid ::ffff:10.1.4.11 remoteGids::ffff:10.1.4.12 hca mlx5_7",
     "ib_completion", {"peer": "10.1.4.12", "status": "IBV_WC_RETRY_EXC_ERR", "code": "12", "vendor": "129",
                       "hca": "mlx5_7"}),
    # queue pair transitions
    ("Call to ibv_modify_qp failed with error Network is unreachable", "qp_setup", {"why": "Network is unreachable"}),
    ("Call to ibv_modify_qp failed with error No such device errno 19", "qp_setup", {"why": "No such device"}),
    ("Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_2:1, curr state INIT, next state RTR, "
     "local GID index 3, local GID ::ffff:10.2.0.5, remote GID ::ffff:10.3.0.9", "qp_setup",
     {"errno": "110", "why": "Connection timed out", "dev": "mlx5_2", "port": "1", "cur": "INIT", "next": "RTR",
      "gid": "3"}),
    # other verbs calls
    ("Call to ibv_create_qp failed with error Cannot allocate memory", "ib_verbs",
     {"call": "ibv_create_qp", "why": "Cannot allocate memory"}),
    ("Call to ibv_create_cq failed with error Cannot allocate memory errno 12", "ib_verbs",
     {"call": "ibv_create_cq", "why": "Cannot allocate memory"}),
    ("Call to ibv_open_device failed", "ib_verbs", {"call": "ibv_open_device"}),
    ("ibv_post_send() failed with error Cannot allocate memory, Bad WR 0x7f3a, First WR 0x7f3a", "ib_verbs",
     {"post": "ibv_post_send", "pwhy": "Cannot allocate memory"}),
    ("NET/IB : Unable to open device mlx5_1", "ib_device_skipped", {"hca": "mlx5_1"}),
    ("NET/IB : Unable to query port_num 1", "ib_device_skipped", {"hca": "1"}),
    # asynchronous events
    ("NET/IB : Got async event : port error", "ib_async", {"event": "port error"}),
    ("NET/IB : mlx5_3:1 Got async event : local catastrophic error", "ib_async",
     {"hca": "mlx5_3", "port": "1", "event": "local catastrophic error"}),
    ("NET/IB : mlx5_3:1 async fatal event: local catastrophic error", "ib_async",
     {"hca": "mlx5_3", "port": "1", "event": "local catastrophic error"}),
    ("NET/IB : mlx5_3:1 async fatal event on QP (0x55d1c2a0): QP fatal error", "ib_async",
     {"hca": "mlx5_3", "port": "1", "event": "QP fatal error"}),
    ("NET/IB : mlx5_3:1 Got async error event: port error", "ib_async", {"hca": "mlx5_3", "port": "1", "event": "port error"}),
    ("communicator encountered a fatal error (detected in ncclIbTest)", "ib_async", {}),
    ("NET/IB : Got async event : GID table change", "ib_event", {"event": "GID table change"}),
    ("NET/IB : mlx5_3:1 Got non-fatal async event: port active(9)", "ib_event",
     {"hca": "mlx5_3", "port": "1", "event": "port active(9)"}),
    ("NET/IB : mlx5_3:1 GID table changed", "benign", {}),
    ("NET/IB : Attempted to connect incompatible devices: [0]mlx5_0:1/IB and [1]mlx5_4:1/RoCE. Try selecting NICs "
     "of only one link type using NCCL_IB_HCA", "ib_config", {}),
    # sockets
    ("socketProgress: Connection closed by remote peer gpu042<39411>", "peer_lost", {"peer": "gpu042"}),
    ("Net : Connection closed by remote peer 10.0.0.3<45123>", "peer_lost", {"peer": "10.0.0.3"}),
    ("Connection closed by remote peer", "peer_lost", {}),
    ("Call to recv from 10.0.0.3<45123> failed : Connection reset by peer", "peer_lost",
     {"rpeer": "10.0.0.3", "why": "Connection reset by peer"}),
    ("socketProgressOpt: Call to recv from 10.0.0.3<45123> failed : Software caused connection abort", "peer_lost",
     {"rpeer": "10.0.0.3", "why": "Software caused connection abort"}),
    ("Call to recv failed : Connection reset by peer", "peer_lost", {"why": "Connection reset by peer"}),
    ("Socket recv failed while polling for opId=0x7f11c4002a40", "peer_lost", {}),
    ("NET/Socket : socket progress error", "peer_lost", {}),
    ("Message truncated : received 1024 bytes instead of 4096", "peer_lost", {}),
    ("Connect to 10.0.0.3<45123> failed : Connection refused", "socket_connect",
     {"peer": "10.0.0.3", "why": "Connection refused"}),
    ("socketStartConnect: Connect to 10.0.0.3<45123> failed : Connection timed out", "socket_connect",
     {"peer": "10.0.0.3", "why": "Connection timed out"}),
    ("ncclSocketConnect: connect to 10.0.0.3<45123> failed : No route to host", "socket_connect",
     {"peer": "10.0.0.3", "why": "No route to host"}),
    ("socketPollConnect: connect to 10.0.0.3<45123> returned Connection refused, exceeded error retry count after "
     "35 attempts", "socket_connect", {"peer": "10.0.0.3", "why": "Connection refused"}),
    ("socketStartConnect: exceeded retries (20000)", "socket_connect", {}),
    ("socketPollConnect poll() failed with error Interrupted system call", "socket_connect",
     {"why": "Interrupted system call"}),
    ("socketTryAccept: Accept failed: Too many open files", "socket_connect", {"awhy": "Too many open files"}),
    ("Bootstrap : no socket interface found", "no_interface", {}),
    ("NET/Socket : no interface found", "no_interface", {}),
    ("Net : No interface found in the same subnet as remote address 10.9.0.1<52000>", "no_interface", {}),
    ("no device found matching =ib9, verify NCCL_OOB_NET_IFNAME", "no_interface", {}),
    ("NET/Socket : No usable listening interface found", "no_interface", {}),
    # CUDA
    ("Cuda failure 'out of memory'", "cuda_oom", {}),
    ("Cuda failure 2 'out of memory'", "cuda_oom", {}),
    ("Failed to CUDA calloc 6291456 bytes", "cuda_oom", {}),
    ("Cuda failure 'an illegal memory access was encountered'", "cuda", {}),
    ("Cuda failure 700 'an illegal memory access was encountered'", "cuda", {}),
    ("[Proxy Service] Failed to set CUDA device 3", "cuda", {}),
    # configuration errors NCCL refuses
    ("Duplicate GPU detected : rank 1 and rank 9 both on CUDA device 1b000", "duplicate_gpu", {}),
    ("Mismatched NCCL version detected : rank 0 version 22105 rank 8 version 21903", "version_mismatch", {}),
    # the proxy reporting a failure it did not cause
    ("[Proxy Service 3] Failed to execute operation Connect from rank 3, retcode 2", "proxy", {}),
    ("Proxy Call to rank 0 failed (Setup)", "proxy", {}),
    # IB unusable: the reason for a socket fallback
    ("Failed to open libibverbs.so[.1]", "fallback", {}),
    ("NET/IB : No device found.", "fallback", {}),
    ("NET/IB : No IP interface found.", "fallback", {}),
    # WARNs that do not stop the job
    ("Could not find real path of /sys/class/net/eth0/device", "benign", {}),
    ("NET/Socket : the total number of sockets is greater than the maximum allowed, setting NCCL_NSOCKS_PERTHREAD "
     "to 2", "benign", {}),
    ("Cannot initialize CollNet, using IB instead", "benign", {}),
    # network plugins
    ("NET/OFI Request 0x7f00c8 (SEND) completed with error: err: 5, flags: 0, prov_errno: 4126, strerror: "
     "Input/output error, len: 0", "plugin_error", {}),
    ("NET/OFI Couldn't open a fabric provider. RC: -61, ERROR: No data available", "plugin_error", {}),
    ("Failed to initialize any NET plugin", "plugin_error", {}),
    # ranks that call different collectives (2.4 - 2.6 device checks; net_ib size checks 2.4 - 2.28)
    ("Mismatched collective detected, please check your collective calls at and around rank 39. You can use "
     "NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=COLL to see the collective logs", "collective_mismatch", {"rank": "39"}),
    ("Your program may be hanging, this may be caused by a collective mismatch around rank 5. Please check your "
     "collective calls at and around this rank.", "collective_hang", {"rank": "5"}),
    ("Your program may be hanging, this may be caused by a collective mismatch", "collective_hang", {}),
    ("NET/IB : collective mismatch error local size 4096 remote 2048 addr 7f3a00 rkey 1a2b seq 3/4",
     "collective_mismatch", {}),
    ("NET/IB : req 1/8 tag 7 peer 10.0.0.2<35001> collective mismatch error, local size 1048576 remote size 524288",
     "collective_mismatch", {}),
    ("Bootstrap Root : mismatch in rank count from procs 16 : 8", "rank_count_mismatch", {}),
    ("Bootstrap Root : mismatch in info from procs, nranks 16 vs 8, nroots 1 vs 1, iroot 0 vs 0",
     "rank_count_mismatch", {}),
    # aws-ofi-nccl found no provider or could not start (every wording, 0.9 - 1.21)
    ("NET/OFI OFI fi_getinfo() call failed: No data available", "ofi_unavailable", {}),
    ("NET/OFI Could not find any optimal provider", "ofi_unavailable", {}),
    ("NET/OFI Couldn't find any optimal provider", "ofi_unavailable", {}),
    ("NET/OFI No eligible providers were found", "ofi_unavailable", {}),
    ("NET/OFI Unable to find a protocol that worked.  Failing initialization.", "ofi_unavailable", {}),
    ("NET/OFI aws-ofi-nccl initialization failed", "ofi_unavailable", {}),
    ("NET/OFI Failed to initialize rdma protocol", "ofi_unavailable", {}),
    ("NET/OFI Failed to initialize sendrecv protocol", "ofi_unavailable", {}),
    ("NET/OFI No viable endpoint found for TCP provider. Try and relax the filters using OFI_NCCL_USE_IPV6_TCP",
     "ofi_unavailable", {}),
    ("NET/OFI EFA provider requires at least libfabric version 1.22.0.", "ofi_unavailable", {}),
    # /dev/shm: every wording 2.4 - 2.30 (include/shm.h, misc/shmutils.cc, os/linux.cc)
    ("Error while creating shared memory segment /dev/shm/nccl-Xb2k9q (size 9637888)", "shm",
     {"path": "/dev/shm/nccl-Xb2k9q", "size": "9637888"}),
    ("Error while attaching to shared memory segment /dev/shm/nccl-Xb2k9q (size 9637888), error: No space left on "
     "device (28)", "shm", {"path": "/dev/shm/nccl-Xb2k9q", "size": "9637888", "why": "No space left on device"}),
    ("Call to posix_fallocate failed : No space left on device", "shm", {"why3": "No space left on device"}),
    ("Error: failed to extend /dev/shm/nccl-Xb2k9q to 9637892 bytes, error: No space left on device (28)", "shm",
     {"path2": "/dev/shm/nccl-Xb2k9q", "size2": "9637892", "why2": "No space left on device"}),
    ("Error: failed to create shared memory file /dev/shm/nccl-XXXXXX, error No space left on device (28)", "shm",
     {"path2": "/dev/shm/nccl-XXXXXX"}),
    ("Error: Could not map /dev/shm/nccl-Xb2k9q size 9637892, error: Cannot allocate memory (12)", "shm",
     {"path2": "/dev/shm/nccl-Xb2k9q", "why2": "Cannot allocate memory"}),
    ("Could not map /dev/shm/nccl-Xb2k9q", "shm", {"path4": "/dev/shm/nccl-Xb2k9q"}),
    ("unlink shared memory /dev/shm/nccl-Xb2k9q failed, error: No such file or directory (2)", "other", {}),
    # GPU peer-to-peer (graph/paths.cc, transport/p2p.cc, transport/net.cc)
    ("P2P is disabled between NVLINK connected GPUs 1 and 0. This should not be the case given their connectivity, "
     "and is probably due to a hardware issue.", "p2p_nvlink_disabled", {"a": "1", "b": "0"}),
    ("failed to peer with device 3(=1b000): 217 peer access is not supported between these two devices",
     "peer_access", {"peer": "3", "bus": "1b000", "err": "217", "why": "peer access is not supported between these "
                                                                       "two devices"}),
    ("failed to peer with device 3: 704 peer access is already enabled", "peer_access",
     {"peer": "3", "err": "704", "why": "peer access is already enabled"}),
    # 2.30 net_ib: a failed completion without resiliency; a non-fatal port event
    ("NET/IB: Got CQE with error (devIndex=1, req=0x7f3a, comm=0x7f3b (recv), wr_id=12, qp_num=4711)",
     "ib_completion", {"devidx": "1", "dir": "recv"}),
    ("NET/IB : mlx5_3:1 Got non-fatal async event: GID table change(18)", "ib_event",
     {"hca": "mlx5_3", "port": "1", "event": "GID table change(18)"}),
    # none of the above
    ("AllReduce : invalid root 9 (root should be in the 0..8 range)", "other", {}),
    ("Error : ring 0 does not loop back to start (3 != 0)", "other", {}),
])
def test_classify_every_warn_wording(msg: str, kind: str, detail: dict[str, str]) -> None:
    got_kind, got = classify(msg)
    assert got_kind == kind, (msg, got_kind)
    assert got == detail


def test_fatal_kinds_are_the_job_ending_ones() -> None:
    assert {"cuda_oom", "cuda", "shm", "p2p_nvlink_disabled", "peer_access", "ib_completion", "qp_setup", "ib_verbs", "ib_config", "plugin_error", "no_interface",
            "socket_connect", "duplicate_gpu", "version_mismatch", "peer_lost", "proxy", "collective_mismatch",
            "rank_count_mismatch"} == nccl_log.FATAL


# ----------------------------------------------------------------------------- line layouts

def test_nccl_2_30_7_function_after_the_source() -> None:
    log = parse("gpu017:51200:51388 [2] misc/socket.cc:590 (socketPollConnect) NCCL WARN socketPollConnect: connect "
                "to 10.8.1.18<43117> returned No route to host, exceeded error retry count after 34 attempts\n"
                "gpu017:51200:51388 [2] transport/p2p.cc:300 (operator()) NCCL WARN a message of no known kind\n")
    assert list(log.procs) == [("gpu017", "51200")] and log.procs[("gpu017", "51200")].devs == {"2"}
    assert [(e.kind, e.host, e.dev) for e in log.errors] == [("socket_connect", "gpu017", "2"), ("other", "gpu017", "2")]


@pytest.mark.parametrize(("line", "detail"), [
    ("Call to connect returned Connection refused, retrying", {"call": "connect", "why": "Connection refused"}),
    ("socketPollConnect: connect returned No route to host, retrying (2/34) after sleep for 200 msec",
     {"call": "connect", "why": "No route to host", "n": "2", "max": "34"}),
    ("socketStartConnect: connect to fe80::966d:ae03:a2:8cf0%ib1<17943> returned Connection timed out, retrying "
     "(1/34) after sleep for 100 msec", {"call": "connect", "peer": "fe80::966d:ae03:a2:8cf0%ib1",
                                          "why": "Connection timed out", "n": "1", "max": "34"}),
    ("Call to accept returned Software caused connection abort, retrying",
     {"call": "accept", "why": "Software caused connection abort"}),
])
def test_connect_retries_every_wording(line: str, detail: dict[str, str]) -> None:
    log = parse(f"gpu017:4411:4480 [1] NCCL INFO {line}\n")
    [r] = log.connect_retries
    assert r.detail == detail and (r.host, r.pid, r.dev) == ("gpu017", "4411", "1") and not log.errors


def test_retries_that_are_not_connects() -> None:
    log = parse("g:1:2 [0] NCCL INFO fallocate: Failed to extend /dev/shm/nccl-x to 4096 bytes, error: No space left "
                "on device (28) - retrying\ng:1:2 [0] NCCL INFO Call to ibv_modify_qp failed with 110 Connection timed "
                "out, on dev mlx5_0:1, retrying 1/5 after 100 msec of sleep\n")
    assert not log.connect_retries


def test_line_layouts_of_every_era() -> None:
    log = parse(
        "gpu01:2001:2001 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>\n"  # 2.5+
        "seyun:17283:17549 [3] include/socket.h:371 WARN Connection closed by remote peer\n"  # 2.3 source first
        "seyun:17283:17549 [3] INFO transport/net_socket.cu:166 -> 2\n"  # 2.3 without NCCL
        "[2026-03-13 22:26:02] host-01.example.com:XXXXXX [5] ibvwrap.c:262 NCCL WARN Call to ibv_modify_qp failed "
        "with 110 Connection timed out, on dev mlx5_x:1\n"  # redacted pid, no tid
        "gpu01:2001:2001 [0] 1234.567 ncclIbTest:30 NCCL TRACE ignored\n"
        "not an NCCL line\n")
    assert sorted(log.procs) == [("gpu01", "2001"), ("host-01.example.com", "XXXXXX"), ("seyun", "17283")]
    assert log.lines == 5  # the TRACE line is an NCCL line, graded by nothing
    assert [e.kind for e in log.errors] == ["peer_lost", "qp_setup"]
    assert log.cascade == 1 and log.warns[1].startswith("host-01.example.com:XXXXXX [5]")


def test_identity_rank_size_env_and_version() -> None:
    p = one("gpu01:2001:2001 [3] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
            "gpu01:2001:2020 [3] NCCL INFO comm 0x55d0 rank 3 nranks 8 cudaDev 3 busId 5d000 - Init START\n"
            "gpu01:2001:2020 [3] NCCL INFO comm 0x55d0 rank 11 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0\n"
            "gpu01:2001:2020 [3] NCCL INFO comm 0x66e0 rank 1 nranks 2 cudaDev 3 busId 5d000 - Init COMPLETE\n"
            "gpu01:2001:2020 [3] NCCL INFO NCCL_IB_HCA set to mlx5_0:1,mlx5_3:1\n"
            "gpu01:2001:2020 [3] NCCL INFO NCCL_IB_DISABLE set by environment to 0.\n"
            "gpu01:2001:2020 [3] NCCL INFO NCCL version 2.19.3+cuda12.2\n")
    assert p.version == "2.21.5+cuda12.4"  # the first one printed
    assert (p.rank, p.nranks, p.nnodes, p.local_ranks) == (11, 16, 2, 8)  # the largest communicator
    assert p.env == {"NCCL_IB_HCA": "mlx5_0:1,mlx5_3:1", "NCCL_IB_DISABLE": "0"}
    assert p.ib_hca_env == "mlx5_0:1,mlx5_3:1"
    assert p.evidence["size"].endswith("MNNVL 0") and p.evidence["version"].endswith("cuda12.4")
    assert p.evidence["env:NCCL_IB_HCA"].endswith("mlx5_3:1")
    assert p.label == "gpu01 rank 11" and p.devs == {"3"}


def test_old_rank_line_and_labels() -> None:
    p = one("e53b7da88fea:2493:2753 [0] NCCL INFO rank 0 nranks 4\n")
    assert (p.rank, p.nranks, p.nnodes) == (0, 4, None) and p.label == "e53b7da88fea rank 0"
    q = one("h:7:7 [5] NCCL INFO x\nh:7:7 [2] NCCL INFO y\n")
    assert q.label == "h GPU2 pid 7"
    assert NcclProc(host="h", pid="9").label == "h pid 9"


def test_mpi_rank_from_the_launcher_tag() -> None:
    from preflight.framing import frame

    docs = frame("[1,3]<stdout>:gpu01:2001:2001 [0] NCCL INFO Using network IB\n"
                 "[1,3]<stdout>:gpu01:2001:2001 [0] NCCL INFO Using network IB\n").docs
    p = next(iter(nccl_log.parse(docs[0]).procs.values()))
    assert p.mpi_rank == 3


# ----------------------------------------------------------------------------- networks

def test_ib_with_oob_relaxed_ordering_and_plugin_names() -> None:
    p = one("gpu01:2001:2050 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/RoCE [RO]; OOB ibp26s0:10.4.0.7<0>\n"
            "gpu01:2001:2050 [0] NCCL INFO Using network IB\n")
    assert p.net == "IB" and p.hcas == ["mlx5_0:1/IB", "mlx5_3:1/RoCE"]
    assert (p.oob, p.oob_addr) == ("ibp26s0", "10.4.0.7")
    assert p.evidence["net"].endswith("<0>") and p.evidence["using_network"].endswith("Using network IB")
    q = one("a:1:1 [0] NCCL INFO NET/IB : Using [0]irdma0:1/RoCE [1]irdma3:1/RoCE [RO]; OOB eth0:172.16.1.5<0>\n"
            "a:1:1 [0] NCCL INFO Using network IBext_v8\n")
    assert q.net == "IBext_v8" and q.hcas[1] == "irdma3:1/RoCE"
    r = one("a:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:<0>\n")
    assert (r.oob, r.oob_addr, r.net) == ("ib0", "", "IB")


def test_nccl_23_ib_device_lines_and_sideband() -> None:
    p = one("h:1:2 [0] NCCL INFO NET/IB : Using interface ib0 for sideband communication\n"
            "h:1:2 [0] NCCL INFO NET/IB: [0] mlx5_0:1/IB \n"
            "h:1:2 [0] NCCL INFO NET/IB: [1] mlx5_1:1/IB \n"
            "h:1:2 [0] NCCL INFO NET/IB: [1] mlx5_1:1/IB \n"
            "h:1:2 [0] NCCL INFO Using internal Network IB\n")
    assert p.net == "IB" and p.hcas == ["mlx5_0:1/IB", "mlx5_1:1/IB"] and p.oob == "ib0"


def test_nccl_23_internal_socket_interfaces() -> None:
    p = one("h:1:2 [0] NCCL INFO Using internal Network Socket\n"
            "h:1:2 [0] NCCL INFO NET : Using interface lo:127.0.0.1<0>\n"
            "h:1:2 [0] NCCL INFO NET : Using interface eth0:3.10.11.7<0>\n"
            "h:1:2 [0] NCCL INFO NET : Using interface eth0:3.10.11.7<0>\n"
            "h:1:2 [0] NCCL INFO NET/Socket : 2 interfaces found\n")
    assert p.net == "Socket" and p.interfaces == ["lo", "eth0"] and p.addresses == ["127.0.0.1", "3.10.11.7"]
    assert p.socket_listed and p.evidence["socket"].endswith("lo:127.0.0.1<0>")
    q = one("h:1:2 [0] NCCL INFO NET/Socket : 1 interfaces found\n")
    assert q.net == "Socket" and q.socket_listed and q.evidence["socket"].endswith("found")


def test_socket_list_is_the_transport_after_the_plugin_line() -> None:
    p = one("ai:4:4 [0] NCCL INFO Bootstrap : Using eth0:162.30.2.40<0>\n"
            "ai:4:4 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation\n"
            "ai:4:4 [0] NCCL INFO NET/Socket : Using [0]eth0:162.30.2.40<0> [1]eth1:<0>\n")
    assert p.net == "Socket" and not p.socket_bootstrap_only
    assert (p.interfaces, p.addresses) == (["eth0", "eth1"], ["162.30.2.40", ""])
    assert (p.bootstrap, p.bootstrap_addr) == ("eth0", "162.30.2.40")
    assert p.evidence["net"] == p.evidence["socket"]


def test_nccl_24_lists_sockets_for_the_bootstrap_before_ib() -> None:
    text = ("s3:15:15 [7] NCCL INFO NET/Socket : Using [0]enp41s0f1:<0> [1]virbr0:<0>\n"
            "s3:15:15 [7] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so).\n")
    p = one(text)
    assert p.net == "" and p.socket_bootstrap_only and p.interfaces == ["enp41s0f1", "virbr0"]
    q = one(text + "s3:15:15 [7] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB enp41s0f1:<0>\n")
    assert q.net == "IB"
    r = one("s3:15:15 [7] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so).\n"
            "s3:15:15 [7] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB enp41s0f1:<0>\n"
            "s3:15:15 [7] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so).\n")
    assert not r.socket_bootstrap_only and r.net == "IB"


def test_socket_threads_line_is_not_an_interface_list() -> None:
    p = one("h:1:2 [0] NCCL INFO NET/Socket: Using 2 threads and 8 sockets per thread\n")
    assert not p.socket_listed and p.net == "" and p.interfaces == []


def test_fallback_makes_the_process_socket_and_is_kept() -> None:
    log = parse("h:1:2 [0] NCCL INFO NET/IB : No device found.\n"
                "h:1:2 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]\n")
    p = next(iter(log.procs.values()))
    assert p.net == "Socket" and len(p.fallback) == 2 and p.evidence["net"].endswith("No device found.")
    assert [(e.kind, e.fatal) for e in log.errors] == [("fallback", False)]


def test_ib_line_wins_over_an_earlier_socket_net() -> None:
    p = one("h:1:2 [0] NCCL INFO Using network Socket\n"
            "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>\n")
    assert p.net == "IB"
    q = one("h:1:2 [0] NCCL INFO Using network AWS Libfabric\n"
            "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>\n")
    assert q.net == "AWS Libfabric"


def test_bootstrap_layouts() -> None:
    assert one("h:1:2 [0] NCCL INFO Bootstrap : Using [0]eth0:172.17.0.2<0>\n").bootstrap_addr == "172.17.0.2"
    p = one("h:1:2 [0] NCCL INFO Bootstrap: Using bond0:10.1.1.1<0>\n")
    assert (p.bootstrap, p.bootstrap_addr) == ("bond0", "10.1.1.1") and p.evidence["bootstrap"].endswith("<0>")


def test_channels_network_and_within_the_node() -> None:
    p = one("n:5:9 [3] NCCL INFO Channel 00/0 : 3[5d000] -> 11[5d000] [send] via NET/IB/3/GDRDMA\n"
            "n:5:9 [3] NCCL INFO Channel 01/0 : 11[5d000] -> 3[5d000] [receive] via NET/IB/3(1)/GDRDMA/Shared\n"
            "n:5:9 [3] NCCL INFO Channel 02/0 : 3[3] -> 2[2] via P2P/CUMEM/read\n"
            "n:5:9 [3] NCCL INFO Channel 03 : 3[3] -> 1[1] via SHM/direct/direct\n")
    assert p.net == "IB" and p.gdr is True and p.net_channels == 2
    assert p.intra == {"P2P/CUMEM/read", "SHM/direct/direct"}
    assert p.evidence["channel_net"].endswith("NET/IB/3/GDRDMA") and p.evidence["intra"].endswith("read")
    q = one("n:5:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0/GDRDMA\n"
            "n:5:9 [0] NCCL INFO Ring 00 : 15 -> 0 [receive] via NET/Socket/0\n"
            "n:5:9 [0] NCCL INFO Ring 00 : 2[0] -> 3[0] via direct shared memory\n")
    assert q.net == "AWS Libfabric" and q.net_channels == 2 and q.gdr is None
    assert q.intra == {"direct shared memory"}
    r = one("n:5:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0\n")
    assert r.gdr is False
    s = one("n:5:9 [0] NCCL INFO CollNet 00/0 : 0 [send] via COLLNET/IBext/0/GDRDMA\n")
    assert s.net_channels == 1 and s.evidence["channel_net"].endswith("GDRDMA")
    t = one("n:5:9 [0] NCCL INFO Channel 00/16 :    0   7   6   5   4   3   2   1\n")
    assert t.net_channels == 0 and not t.intra


def test_nvls_lines() -> None:
    assert one("h:1:2 [0] NCCL INFO NVLS multicast support is available on dev 0\n").nvls is True
    p = one("h:1:2 [0] NCCL INFO 16 coll channels, 16 collnet channels, 0 nvls channels, 16 p2p channels, "
            "16 p2p channels per peer\n")
    assert p.nvls is False and p.nvls_channels == 0 and p.evidence["nvls_channels"] == p.evidence["nvls"]
    q = one("h:1:2 [0] NCCL INFO 24 coll channels, 24 collnet channels, 16 nvls channels, 32 p2p channels, "
            "32 p2p channels per peer\n")
    assert q.nvls is True and q.nvls_channels == 16
    r = one("h:1:2 [0] NCCL INFO NCCL_NVLS_ENABLE set by environment to 0.\n"
            "h:1:2 [0] NCCL INFO NVLS multicast support is not available on dev 0\n")
    assert r.nvls is False and r.evidence["nvls"].endswith("to 0.") and r.env["NCCL_NVLS_ENABLE"] == "0"
    s = one("h:1:2 [0] NCCL INFO NVLS Head  0:  0  8 16\n")
    assert s.nvls is True


def test_virtual_nic_gdr_off_and_service_thread() -> None:
    log = parse("c6:11:12 [0] NCCL INFO Could not find real path of /sys/class/net/eth0/device\n"
                "c6:11:12 [0] NCCL INFO include/net.h:19 -> 2\n"
                "c6:11:12 [0] NCCL INFO Could not get speed from /sys/class/net/lo/speed. Defaulting to 10 Gbps.\n"
                "c6:11:12 [0] NCCL WARN Could not find real path of /sys/class/net/veth9a/device\n"
                "c6:11:12 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)\n"
                "c6:11:12 [0] NCCL INFO [Service thread] Connection closed by localRank 2\n")
    p = next(iter(log.procs.values()))
    assert p.virtual_nics == {"eth0", "lo", "veth9a"} and p.evidence["virtual_nic"].endswith("eth0/device")
    assert p.gdr is False and p.gdr_off == ["mlx5_0 (no module)"] and "gdr_off" in p.evidence
    assert len(log.service_closed) == 1 and log.cascade == 1 and not log.failed
    assert [(e.kind, e.fatal) for e in log.errors] == [("benign", False)]


# ----------------------------------------------------------------------------- failures

def test_failure_cascade_marks_the_warn_fatal() -> None:
    log = parse("g:1:2 [0] misc/argcheck.cc:30 NCCL WARN AllReduce : invalid root 9\n"
                "g:1:2 [0] NCCL INFO enqueue.cc:1130 -> 4\n"
                "h:3:4 [0] misc/argcheck.cc:30 NCCL WARN something new\n"
                "h:3:4 [0] NCCL INFO graph/xml.cc:400 -> 2\n"
                "h:3:4 [0] NCCL INFO init.cc:1400 -> 7\n")
    assert [(e.host, e.kind, e.fatal) for e in log.errors] == [("g", "other", True), ("h", "other", False)]
    assert log.failed == {("g", "1"): "g:1:2 [0] NCCL INFO enqueue.cc:1130 -> 4"}
    assert log.cascade == 3


def test_thread_tagged_cascade_is_a_failure() -> None:
    log = parse("k:25:26 [0] NCCL INFO misc/socket.cc:749 -> 6 [Async thread]\n"
                "k:27:28 [0] NCCL INFO misc/socket.cc:749 -> 6\n")
    assert list(log.failed) == [("k", "25")]


def test_benign_and_fallback_never_become_fatal() -> None:
    log = parse("g:1:2 [0] NCCL WARN Could not find real path of /sys/class/net/eth0/device\n"
                "g:1:2 [0] NCCL WARN Failed to open libibverbs.so[.1]\n"
                "g:1:2 [0] NCCL WARN NET/IB : Got async event : GID table change\n"
                "g:1:2 [0] NCCL INFO init.cc:100 -> 2\n")
    assert [(e.kind, e.fatal) for e in log.errors] == [("benign", False), ("fallback", False), ("ib_event", False)]


def test_ranks_reach_the_errors() -> None:
    log = parse("g:1:2 [0] NCCL INFO comm 0x1 rank 5 nranks 8 cudaDev 0 busId 1000 - Init START\n"
                "g:1:2 [0] NCCL WARN Call to ibv_create_qp failed with error Cannot allocate memory\n")
    assert [(e.kind, e.rank, e.fatal, e.dev) for e in log.errors] == [("ib_verbs", 5, True, "0")]
    assert log.of("ib_verbs") and not log.of("cuda")


def test_bare_version_framework_error_and_last_error() -> None:
    log = parse("NCCL version 2.18.5+cuda12.2\n"
                "g:1:2 [0] NCCL INFO Using network IB\n"
                "h:3:4 [1] NCCL INFO NCCL version 2.18.5+cuda12.2\n"
                "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, unhandled system "
                "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.5\n"
                "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.\n"
                "Last error:\n"
                "Call to ibv_create_cq failed with error Cannot allocate memory\n"
                "Last error:\n"
                "\n"
                "Last error:")
    assert log.versions == ["2.18.5+cuda12.2"]
    assert log.procs[("g", "1")].version == "2.18.5+cuda12.2"
    assert len(log.job_errors) == 2 and log.job_errors[0].startswith("RuntimeError")
    assert [(e.kind, e.host, e.fatal, e.detail.get("call")) for e in log.errors] == [
        ("ib_verbs", "", True, "ibv_create_cq")]


def test_two_bare_versions_are_not_given_to_anyone() -> None:
    log = parse("NCCL version 2.18.5+cuda12.2\nNCCL version 2.19.3+cuda12.3\ng:1:2 [0] NCCL INFO Using network IB\n")
    assert log.procs[("g", "1")].version == ""


def test_remote_error_string_is_a_job_error() -> None:
    log = parse("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited "
                "or there was a network error, NCCL version 2.21.5\n")
    assert len(log.job_errors) == 1 and not log.recognised


@pytest.mark.parametrize("text", ["", "garbage\x00\x01", "h:1:2 [0] NCCL INFO", "NCCL INFOalone", "a:b [x] INFO y"])
def test_garbage_gives_empty_facts(text: str) -> None:
    log = parse(text)
    assert not log.procs and not log.errors and not log.recognised


# ----------------------------------------------------------------------------- detection

@pytest.mark.parametrize(("text", "hit"), [
    ("gpu01:2001:2001 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>\n", True),
    # 2.0 - 2.2 write no word NCCL: a WARN behind NCCL's whole `host:pid:tid [dev] file:line` prefix is NCCL's,
    # whatever its message (an unknown one is an unread NCCL error); behind a masked prefix only a known message
    ("seyun:17283:17549 [3] include/socket.h:371 WARN Connection closed by remote peer\n", True),
    ("seyun:17283:17549 [3] include/socket.h:371 WARN a message of no known kind\n", True),
    ("seyun:17283:17549 [3] include/socket.h:371 WARN Could not find real path of /sys/class/net/veth1\n", True),
    ("seyun:17283 [3] include/socket.h:371 WARN a message of no known kind\n", False),  # no tid: not the whole prefix
    ("*server name* [0] include/socket.h:185 WARN a message of no known kind\n", False),
    ("seyun:17283:17549 [3] WARN a message of no known kind\n", False),  # no source file
    # 2.30.7+: the function after the source
    ("gpu017:12345:12399 [3] misc/socket.cc:483 (ncclSocketConnect) NCCL WARN a message\n", True),
    ("*server name* [0] include/socket.h:185 WARN Call to connect failed : Connection refused\n", True),
    ("*server name* [0] include/socket.h:185 INFO Call to connect failed : Connection refused\n", False),
    ("2024-Sep-23 00:09:01.0809 1:26 [1] include/socket.h:270 CCOM WARN Call to connect failed : refused\n", False),
    ("[0] WARN Call to connect failed : Connection refused\n", False),
    ("h:1:2 [0] misc/group.cu:63 WARN a message of no known kind\n", True),  # a .cu source is NCCL's (2.3)
    ("seyun:17283:17549 [3] misc/ibvwrap.cu:63 WARN Failed to open libibverbs.so\n", True),
    ("h:XXXXXX [5] ibvwrap.c:262 NCCL WARN Call to ibv_modify_qp failed\n", True),
    ("h:1:2 [0] WARN Call to connect failed : Connection refused\n", False),  # no NCCL printed a WARN without its source
    ("h:1:2 [0]  include/socket.h:185 WARN Call to connect failed : Connection refused\n", False),  # not its layout
    ("2024-01-01 12:00:00 INFO training step 5\n", False),
    ("host:123:456 [0] INFO something else\n", False),
    ("`init.cc:1247 NCCL WARN Mismatched collective detected, please check your collective calls`\n", True),
    ("NCCL INFO Using network IB\n", True),
    ("<cluster_name>:926:1151 [7] NCCL INFO Using network IB\n", True),
    ("libfabric:85:1747438790::core:core:fi_getinfo_():1392<warn> fi_getinfo: provider efa output empty list\n",
     False),
    ("export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT\n", False),
    ("h:1:2 [0] INFO NCCL_IB_DISABLE set by environment to 1\n", True),  # 2.3: no word NCCL before INFO
])
def test_detect(text: str, hit: bool) -> None:
    assert nccl_log.detect(Doc(text)) is hit


def test_nccl_20_line_with_a_masked_host_is_one_unnamed_process() -> None:
    log = parse("*server name* [0] include/socket.h:185 WARN Call to connect failed : Connection refused\n"
                "NCCL failure *MyProgram*.cu:110 'unhandled system error'\n"
                "2017-11-02 10:00:01 [3] init.cu:95 INFO Using internal Network Socket\n")
    assert list(log.procs) == [("", "")] and log.procs[("", "")].devs == {"0", "3"}
    assert log.procs[("", "")].net == "Socket" and log.lines == 2
    [e] = log.errors
    assert (e.kind, e.host, e.dev, e.fatal, e.detail) == ("socket_connect", "", "0", True, {"why": "Connection refused"})
    assert log.job_errors == ["NCCL failure *MyProgram*.cu:110 'unhandled system error'"]


def test_a_framing_host_names_the_masked_process() -> None:
    from preflight.framing import frame

    [doc] = frame("gpu017: *server name* [0] include/socket.h:185 WARN Call to connect failed : Connection refused\n"
                  "gpu017: NCCL failure *MyProgram*.cu:110 'unhandled system error'\n").docs
    log = nccl_log.parse(doc)
    assert list(log.procs) == [("gpu017", "")] and [(e.kind, e.host) for e in log.errors] == [("socket_connect", "gpu017")]


def test_plugin_function_name_before_warn() -> None:
    text = ("ip-10-0-1-5:4411:4470 [2] int nccl_net_ofi_rdma_process_cq(nccl_net_ofi_rdma_ep_t*):1463 NCCL WARN "
            "NET/OFI Request 0x7f00c8 (SEND) completed with error: err: 5, flags: 0\n")
    log = parse(text)
    assert [(e.kind, e.dev) for e in log.errors] == [("plugin_error", "2")]
    assert nccl_log.detect(Doc(text))
    c = parse("h:1:2 [0] process_completions:1063 NCCL WARN NET/OFI Request 0x1 completed with error. RC: 5\n")
    assert [e.kind for e in c.errors] == ["plugin_error"]


def test_single_lines_set_the_network_and_its_evidence() -> None:
    a = one("h:1:2 [0] NCCL INFO NET : Using interface eth0:10.1.1.5<0>\n")
    assert a.socket_listed and a.net == "Socket" and a.evidence["socket"].endswith("<0>")
    assert a.evidence["net"] == a.evidence["socket"]
    b = one("h:1:2 [0] NCCL INFO Using network IB\n")
    assert b.net == "IB" and b.evidence["net"] == "h:1:2 [0] NCCL INFO Using network IB"
    c = one("h:1:2 [0] NCCL INFO Using network Socket\nh:1:2 [0] NCCL INFO NET/IB: [0] mlx5_0:1/IB\n")
    assert c.net == "IB" and c.evidence["net"].endswith("Using network Socket")
    d = one("h:1:2 [0] NCCL INFO NET/IB: [0] mlx5_0:1/IB\n")
    assert d.net == "IB" and d.evidence["net"].endswith("mlx5_0:1/IB")
    e = one("h:1:2 [0] NCCL INFO Using network AWS Libfabric\nh:1:2 [0] NCCL INFO NET/IB: [0] mlx5_0:1/IB\n")
    assert e.net == "AWS Libfabric"


def test_first_launcher_rank_wins() -> None:
    from preflight.framing import Line

    log = NcclLog()
    rows = [Line(text="h:1:2 [0] NCCL INFO a", n=1, raw="", rank=3), Line(text="h:1:2 [0] NCCL INFO b", n=2, raw="",
                                                                            rank=5),
            Line(text="k:1:2 [0] NCCL INFO a", n=3, raw="")]
    for i in range(len(rows)):
        nccl_log._line(log, rows, i)
    assert log.procs[("h", "1")].mpi_rank == 3 and log.procs[("k", "1")].mpi_rank is None


def test_last_error_as_the_last_two_lines() -> None:
    log = parse("g:1:2 [0] NCCL INFO Using network IB\nLast error:\nCall to ibv_reg_mr failed with error Bad address\n")
    assert [(e.kind, e.detail["call"]) for e in log.errors] == [("ib_verbs", "ibv_reg_mr")]
    assert not parse("g:1:2 [0] NCCL INFO Using network IB\nLast error:\nsomething else\n").errors


@pytest.mark.parametrize(("cascade", "failed"), [
    ("group.cc:65 -> 3", True),
    ("transport.cc:168 -> 3", True),
    ("bootstrap.cc:45 -> 2", True),
    ("proxy.cc:1306 -> 2", True),
    ("collectives.cc:12 -> 4", True),
    ("/home/conda/feedstock_root/work/src/init.cc:1079 -> 3", True),
    ("transport/net.cc:728 -> 2", False),
    ("include/net.h:19 -> 2", False),
    ("misc/socket.cc:749 -> 6 [Progress Thread]", True),
    ("init.cc:1400 -> 7", False),
])
def test_which_cascades_prove_a_failure(cascade: str, failed: bool) -> None:
    log = parse(f"g:1:2 [0] NCCL INFO {cascade}\n")
    assert bool(log.failed) is failed and log.cascade == 1


def test_nvls_on_keeps_the_line_that_shows_it() -> None:
    p = one("h:1:2 [0] NCCL INFO NVLS multicast support is available on dev 0\n"
            "h:1:2 [0] NCCL INFO NVLS comm 0x55 headRank 0 nHeads 8 buffSize 4194304\n")
    assert p.evidence["nvls"].endswith("buffSize 4194304")


def test_nccl_tests_failure_line_quotes_the_last_error() -> None:
    log = parse("gpu01:2001:2001 [0] NCCL INFO Using network IB\n"
                "gpu01: Test NCCL failure common.cu:1005 'unhandled system error (run with NCCL_DEBUG=INFO for "
                "details) / Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_2:1, curr state "
                "INIT, next state RTR'\n"
                " .. gpu01 pid 2001: Test failure common.cu:891\n"
                "gpu02: Test NCCL failure common.cu:1005 'remote process exited or there was a network error / '\n")
    assert len(log.job_errors) == 2
    assert [(e.kind, e.detail.get("dev"), e.fatal) for e in log.errors] == [("qp_setup", "mlx5_2", True)]


def test_framework_error_strings_and_last_error_layouts() -> None:
    log = parse("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1275, invalid usage (run with NCCL_DEBUG=WARN for "
                "details), NCCL version 2.21.5\n")
    assert len(log.job_errors) == 1
    one_line = parse("g:1:2 [0] NCCL INFO Using network IB\nLast error: Call to ibv_reg_mr failed with error Bad "
                     "address\nnext line")
    assert [e.detail["call"] for e in one_line.errors] == ["ibv_reg_mr"]
    at_end = parse("g:1:2 [0] NCCL INFO Using network IB\nLast error:\nCall to ibv_reg_mr failed with error Bad address")
    assert [e.kind for e in at_end.errors] == ["ib_verbs"]
    assert not parse("g:1:2 [0] NCCL INFO Using network IB\nLast error:").errors
    benign = parse("g:1:2 [0] NCCL INFO Using network IB\nLast error:\nCould not find real path of /sys/class/net/x/d\n")
    assert not benign.errors


def test_equal_communicators_keep_the_first_rank_and_channel_evidence() -> None:
    p = one("h:1:2 [0] NCCL INFO comm 0x1 rank 3 nranks 8 cudaDev 0 busId 1000 - Init START\n"
            "h:1:2 [0] NCCL INFO comm 0x2 rank 5 nranks 8 cudaDev 0 busId 1000 - Init START\n"
            "h:1:2 [0] NCCL INFO Channel 00/0 : 3[0] -> 11[0] [send] via NET/IB/0\n")
    assert p.rank == 3 and p.evidence["net"].endswith("via NET/IB/0")
    q = one("h:1:2 [0] NCCL INFO NCCL_ALGO set by environment to Ring...\n")
    assert q.env["NCCL_ALGO"] == "Ring.."


# ----------------------------------------------------------------------------- lines a paste cut or redacted

def test_lines_without_the_prefix_are_one_unnamed_process() -> None:
    log = parse("`init.cc:1247 NCCL WARN Mismatched collective detected, please check your collective calls at and "
                "around rank 39. You can use NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=COLL to see the collective logs`\n"
                "NCCL INFO comm 0x1 rank 7 nranks 64 cudaDev 7 busId 1000 - Init START\n"
                "[5] NCCL INFO Using network IB\n"
                "process_completions:1063 NCCL WARN NET/OFI Request 0x1 completed with error. RC: 5\n"
                "NCCL TRACE ignored\n")
    assert list(log.procs) == [("", "")] and log.lines == 5
    p = log.procs[("", "")]
    assert (p.rank, p.nranks, p.net, p.devs) == (7, 64, "IB", set())
    assert p.label == "a process rank 7"
    assert [(e.kind, e.host, e.pid, e.dev, e.rank, e.fatal, e.quoted) for e in log.errors] == [
        ("collective_mismatch", "", "", "", 7, True, False), ("plugin_error", "", "", "", 7, True, False)]
    assert log.errors[0].detail == {"rank": "39"}
    assert NcclProc(host="", pid="").label == "a process (lines without NCCL's host:pid prefix)"
    assert NcclProc(host="gpu7", pid="").label == "gpu7 (lines without NCCL's host:pid prefix)"


def test_a_framing_host_names_the_unnamed_process() -> None:
    from preflight.framing import frame

    docs = frame("gpu017: NCCL WARN Cuda failure 'out of memory'\ngpu018: NCCL INFO Using network IB\n").docs
    logs = [nccl_log.parse(d) for d in docs]
    assert [list(x.procs) for x in logs] == [[("gpu017", "")], [("gpu018", "")]]
    assert [(e.kind, e.host) for e in logs[0].errors] == [("cuda_oom", "gpu017")]


@pytest.mark.parametrize("line", [
    "NCCL INFOrmation", "the NCCL WARNing", "xNCCL WARN y", "NCCL INFO", "ncclx: NCCL  WARN two spaces",
])
def test_text_that_only_resembles_a_bare_line(line: str) -> None:
    assert not parse(line + "\n").procs


@pytest.mark.parametrize(("line", "host", "pid"), [
    ("<cluster_name>:926:1151 [7] NCCL INFO Channel 03/0 : 15[7] -> 6[6] [send] via NET/Socket/3", "<cluster_name>",
     "926"),
    ("[hostname]:12:13 [0] NCCL INFO Using network IB", "[hostname]", "12"),
    ("***:12:13 [0] NCCL INFO Using network IB", "***", "12"),
    ("gpu***:12:13 [0] NCCL INFO Using network IB", "gpu***", "12"),
    ("${HOSTNAME}:12:13 [0] NCCL INFO Using network IB", "${HOSTNAME}", "12"),
    ("{host}:12:13 [0] NCCL INFO Using network IB", "{host}", "12"),
    ("xxx:12:13 [0] NCCL INFO Using network IB", "xxx", "12"),
    ("...:12:13 [0] NCCL INFO Using network IB", "...", "12"),
    ("\u2026:12:13 [0] NCCL INFO Using network IB", "\u2026", "12"),
    ("(hostname):12:13 [0] NCCL INFO Using network IB", "(hostname)", "12"),
    ("node-7:<pid>:<tid> [0] NCCL INFO Using network IB", "node-7", "<pid>"),
    ("2025-05-16T16:39:51.208-07:00ip-10-36-29-253:79:79 [0] NCCL INFO Using network IB", "ip-10-36-29-253", "79"),
    ("  | 2025-05-16T16:39:51.208-07:00 | ip-10-36-29-253:79:79 [0] NCCL INFO Using network IB", "ip-10-36-29-253",
     "79"),
    ("2025-05-16T16:39:51Zgpu1:5:6 [0] NCCL INFO Using network IB", "gpu1", "5"),
    ("2025-05-16 16:39:51,5+0000gpu1:5:6 [0] NCCL INFO Using network IB", "gpu1", "5"),
])
def test_redacted_and_glued_hosts(line: str, host: str, pid: str) -> None:
    log = parse(line + "\n")
    assert list(log.procs) == [(host, pid)]
    assert nccl_log.detect(Doc(line + "\n"))


def test_cloudwatch_duplicated_columns_are_one_process() -> None:
    log = parse("  | 2025-05-16T16:39:51.208-07:00 | ip-10-36-29-253:79:79 [0] NCCL INFO cudaDriverVersion 12040\n"
                "  | 2025-05-16T16:39:51.208-07:00ip-10-36-29-253:79:79 [0] NCCL INFO Bootstrap : Using "
                "eth0:10.36.29.253<0> | ip-10-36-29-253:79:79 [0] NCCL INFO Bootstrap : Using eth0:10.36.29.253<0>\n")
    assert list(log.procs) == [("ip-10-36-29-253", "79")]
    assert log.procs[("ip-10-36-29-253", "79")].bootstrap_addr == "10.36.29.253"


# ----------------------------------------------------------------------------- GPUDirect RDMA, every wording

@pytest.mark.parametrize(("line", "gdr", "off", "distance"), [
    # 2.3
    ("NET/IB : GPU Direct RDMA Disabled for GPU 0 / HCA mlx5_0 (no module)", False, ["mlx5_0 (no module)"], False),
    ("NET/IB : GPU Direct RDMA Disabled for GPU 2 / HCA mlx5_1 (not supported by GPU)", False,
     ["mlx5_1 (not supported by GPU)"], False),
    ("NET/IB : GPU Direct RDMA Disabled for GPU 0 / HCA mlx5_0 (distance 4 >= 2)", False, [], True),
    # 2.4
    ("NET/IB : GPU Direct RDMA Disabled for GPU 0[0] / HCA 0 'mlx5_0' (no module or not supported by GPU)", False,
     ["mlx5_0 (no module or not supported by GPU)"], False),
    ("NET/IB : GPU Direct RDMA Disabled for GPU 1[1] / HCA 0 (distance 3 >= 2)", False, [], True),
    ("NET/IB : GPU Direct RDMA Enabled for GPU 0[0] / HCA 0 (distance 1 < 2), read 0", True, [], True),
    # 2.5 - 2.12
    ("NET/IB : GPU Direct RDMA Disabled for HCA 2 'mlx5_2' (no module)", False, ["mlx5_2 (no module)"], False),
    ("NET/IB : GPU Direct RDMA Disabled for GPU 1b000 / HCA 0 (distance 5 >= 4)", False, [], True),
    ("GPU Direct RDMA Disabled for GPU 1b000 / HCA 0 (distance 5 > 4)", False, [], True),
    ("GPU Direct RDMA Enabled for GPU 1b000 / HCA 0 (distance 2 <= 4), read 1", True, [], True),
    # 2.13 - 2.30
    ("NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'", False, ["mlx5_0"], False),
    ("NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'", True, [], False),
    ("GPU Direct RDMA Enabled for GPU 3 / HCA 5 (distance 3 <= 4), read 1 mode Default", True, [], True),
])
def test_gdr_every_wording(line: str, gdr: bool, off: list[str], distance: bool) -> None:
    p = one(f"h:1:2 [0] NCCL INFO {line}\n")
    assert (p.gdr, p.gdr_off, bool(p.gdr_distance)) == (gdr, off, distance)
    assert ("gdr_off" in p.evidence) is bool(off)
    assert p.net == ("IB" if line.startswith("NET/IB") else "")


def test_gdr_across_hcas_and_networks() -> None:
    p = one("h:1:2 [0] NCCL INFO Using network IB\n"
            "h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'\n"
            "h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 1 'mlx5_1'\n"
            "h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 2 'mlx5_2'\n")
    assert p.gdr is False and p.gdr_off == ["mlx5_0", "mlx5_2"] and p.evidence["gdr_off"].endswith("'mlx5_0'")
    last_on = one("h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'\n"
                  "h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 1 'mlx5_1'\n")
    assert last_on.gdr is False and last_on.gdr_off == ["mlx5_0"]
    assert p.evidence["net"].endswith("Using network IB")
    s = one("h:1:2 [0] NCCL INFO NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'\n")
    assert (s.gdr, s.gdr_off, s.net) == (None, [], "")
    a = one("h:1:2 [0] NCCL INFO NET/AWS Libfabric : GPU Direct RDMA Disabled for HCA 0 'rdmap16s27'\n")
    assert (a.net, a.gdr_off) == ("AWS Libfabric", ["rdmap16s27"]) and a.evidence["net"] == a.evidence["gdr_off"]
    k = one("h:1:2 [0] NCCL INFO Using network Socket\nh:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA "
            "0 'mlx5_0'\n")
    assert k.net == "Socket"
    e = one("h:1:2 [0] NCCL INFO GPU Direct RDMA Enabled for GPU 1b000 / HCA 0 (distance 2 <= 4), read 1\n"
            "h:1:2 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 1b000 / HCA 1 (distance 5 > 4)\n")
    assert e.gdr is True and e.gdr_distance.endswith("(distance 2 <= 4), read 1")


def test_merged_ib_devices_are_every_port() -> None:
    p = one("h:1:2 [0] NCCL INFO NET/IB : Using [0]={[0] mlx5_0:1/RoCE, [1] mlx5_1:1/RoCE} [1]={[2] mlx5_2:1/RoCE, "
            "[3] mlx5_3:1/RoCE} [RO]; OOB eth0:10.1.1.1<0>\n")
    assert p.hcas == ["mlx5_0:1/RoCE", "mlx5_1:1/RoCE", "mlx5_2:1/RoCE", "mlx5_3:1/RoCE"]


# ----------------------------------------------------------------------------- aws-ofi-nccl and libfabric

@pytest.mark.parametrize(("line", "hit"), [
    ("libfabric:85:1747438790::core:core:fi_getinfo_():1392<warn> fi_getinfo: provider efa output empty list", True),
    ("libfabric:3301:1600000000:core:core:fi_getinfo_():1002<warn> fi_getinfo: provider efa returned -61 (No data "
     "available)", True),
    ("  | 2025-05-16T16:39:51.208-07:00libfabric:85:1747438790::core:core:fi_getinfo_():1392<warn> fi_getinfo: "
     "provider efa output empty list | libfabric:85:1747438790::core:core:fi_getinfo_():1392<warn> ...", True),
    ("libfabric:85:1747438790::core:core:fi_getinfo_():1392<info> fi_getinfo: provider tcp returned -61 (No data "
     "available)", False),
    ("libfabric:85:1747438790::efa:core:efa_device_init():120<warn> Failed to open device", False),
    ("fi_getinfo: provider efa output empty list", False),
])
def test_libfabric_lines(line: str, hit: bool) -> None:
    log = parse("h:1:2 [0] NCCL INFO Using network Socket\n" + line + "\n")
    assert log.ofi_unavailable == ([line.strip()] if hit else [])
    assert not log.errors


def test_ofi_plugin_lines() -> None:
    log = parse("h:1:2 [0] NCCL INFO NET/OFI No eligible providers were found\n"
                "h:1:2 [0] NCCL WARN NET/OFI OFI fi_getinfo() call failed: No data available\n"
                "h:1:2 [0] NCCL INFO init.cc:100 -> 2\n"
                "k:1:2 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 16 nics)\n"
                "k:1:2 [0] NCCL INFO NET/OFI Selected Provider is tcp;ofi_rxm\n")
    assert [x.split("NET/OFI ")[1][:12] for x in log.ofi_unavailable] == ["No eligible ", "OFI fi_getin"]
    assert log.ofi_selected == ["efa", "tcp;ofi_rxm"]
    assert [(e.kind, e.fatal) for e in log.errors] == [("ofi_unavailable", False)]
    assert log.procs[("h", "1")].net == "" and not log.procs[("h", "1")].fallback
