"""nccl.transport: NCCL_DEBUG=INFO/WARN logs graded (the all-reduce tables: test_nccl_tests.py).

The logs are written here in NCCL's own formats (NVIDIA/nccl src/, aws-ofi-nccl), odd cases
included; each finding is asserted by its code, its summary and its remedy."""

from __future__ import annotations

import pytest

from preflight import registry as reg
from preflight.framing import Doc
from preflight.grading import FactStore, grade_check
from preflight.model import Result, Status
from preflight.profile import load as load_profile
from preflight.registry import Options
from tests.conftest import capture, facts_of, fixture_text

H100 = "h100-sxm-8x"
C = "nccl.transport/"


def transport(rel: str, profile: str = H100, text: str | None = None, **values: object) -> list[Result]:
    body = text if text is not None else fixture_text(f"nccl/{rel}")
    prof = load_profile(profile)
    prof.values.update(values)
    r = reg.load()
    store = FactStore(r, captures={"nccl-log": capture("nccl-log", body)})
    return grade_check(r.checks["nccl.transport"], "node1", store, prof, Options(mode="analyze"), None)


def one(text: str, profile: str = "generic", **values: object) -> Result:
    [r] = transport("", profile=profile, text=text, **values)
    return r


def codes(r: Result) -> list[str]:
    return [c.removeprefix(C) for c in r.facts.get("codes", [])]


def lines(*rows: str) -> str:
    return "\n".join(rows) + "\n"


# ----------------------------------------------------------------------------- fixtures of whole jobs

def test_parse_log_maps_processes_to_ranks() -> None:
    log = facts_of("nccl-log", fixture_text("nccl/nccl_info_2node_ib_nvls.log"))
    assert len(log.procs) == 16
    ranks = sorted(p.rank for p in log.procs.values() if p.rank is not None)
    assert ranks == list(range(16))
    p7 = next(p for p in log.procs.values() if p.rank == 7)
    assert p7.host == "trn-b07" and p7.net == "IB" and p7.gdr is True
    assert p7.hcas[0] == "mlx5_0:1/IB" and len(p7.hcas) == 8
    assert p7.oob == "ens9f0np0" and p7.bootstrap == "ens9f0np0"
    assert p7.nvls is True and p7.version == "2.21.5+cuda12.4"


def test_transport_ib_passes_with_facts() -> None:
    [r] = transport("nccl_info_2node_ib_nvls.log")
    assert r.status is Status.PASS, r.summary
    assert r.summary.startswith("NET/IB on 16 process(es) via mlx5_0:1/IB") and r.summary.endswith("; NVLS on")
    assert r.facts["net"] == "IB" and r.facts["nvls"] is True and "codes" not in r.facts
    assert "ens9f0np0" in r.facts["interfaces"]
    assert r.facts["hosts"] == ["trn-b07", "trn-b08"] and r.facts["multi_node"] is True
    assert len(r.facts["ranks"]) == 16 and r.facts["version"] == "2.21.5+cuda12.4"
    assert any("NET/IB : Using" in e for e in r.evidence)


def test_transport_socket_fallback_across_nodes_fails_on_every_profile() -> None:
    for profile in (H100, "generic"):
        [r] = transport("nccl_info_2node_socket_fallback_one_host.log", profile=profile)
        assert r.status is Status.FAIL and codes(r) == ["socket-fallback"]
        assert r.summary.startswith("NCCL runs across nodes over TCP sockets on trn-b08")
        assert r.summary.endswith("; IB could not be used") and "trn-b07" not in r.summary
        assert any("NET/Socket : Using" in e for e in r.evidence)
        assert any("No device found" in e for e in r.evidence)
        assert "ibstat" in r.remedy and "/dev/infiniband" in r.remedy
        by_rank = {x["rank"]: x["net"] for x in r.facts["ranks"]}
        assert by_rank[0] == "IB" and by_rank[8] == "Socket"


def test_transport_lo_on_a_single_node_log_is_a_note() -> None:
    """Two ranks on one host, every channel P2P: the socket network (lo) carries nothing."""
    [r] = transport("nccl_info_lo_bound_srun_prefix.log", profile="generic")
    assert r.status is Status.PASS, r.summary
    assert r.facts["net"] == "Socket" and r.facts["nvls"] is False and r.facts["multi_node"] is False
    assert any("NCCL lists lo on dev-box3" in e for e in r.evidence)
    assert any("no traffic crosses it" in e for e in r.evidence)


def test_transport_lo_without_single_node_proof_fails() -> None:
    # rank 1's communicator lines are cut: only rank 0 of the 2-rank communicator is in view
    text = "".join(ln + "\n" for ln in fixture_text("nccl/nccl_info_lo_bound_srun_prefix.log").splitlines()
                   if "Channel" not in ln and "rank 1 n" not in ln.lower())
    [r] = transport("", profile="generic", text=text)
    assert r.status is Status.FAIL and codes(r) == ["bad-interface", "socket-single-host"]
    assert r.summary.startswith("NCCL bound lo on dev-box3 rank 0, dev-box3 GPU1 pid 9901")
    assert "NCCL_SOCKET_IFNAME" in r.remedy and r.facts["multi_node"] is None


def test_every_rank_of_the_world_on_one_host_proves_one_node() -> None:
    text = "".join(ln + "\n" for ln in fixture_text("nccl/nccl_info_lo_bound_srun_prefix.log").splitlines()
                   if "Channel" not in ln)
    [r] = transport("", profile="generic", text=text)
    assert r.status is Status.PASS and not codes(r)
    assert any(e.startswith("NCCL lists lo on dev-box3 rank 0, dev-box3 rank 1; the log shows one node") for e in
               r.evidence)
    assert r.facts["multi_node"] is False
    assert r.facts["scope_evidence"][0] == "all 2 ranks of the 2-rank communicator are on dev-box3"
    assert r.facts["scope_evidence"][1].endswith("rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId "
                                                 "0x4c1f9e03a7d2b816 - Init START")


@pytest.mark.parametrize(("text", "one_node"), [
    # nccl-tests -g 4: one process prints every rank of the 4-rank communicator
    ("".join(f"g1:7:{8 + r} [{r}] NCCL INFO comm 0x{r} rank {r} nranks 4 cudaDev {r} - Init START\n" for r in range(4)),
     True),
    # rank 3 not in view
    ("".join(f"g1:7:{8 + r} [{r}] NCCL INFO comm 0x{r} rank {r} nranks 4 cudaDev {r} - Init START\n" for r in range(3)),
     False),
    # two hosts share the ranks
    ("g1:7:8 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 - Init START\n"
     "g2:7:8 [0] NCCL INFO comm 0x1 rank 1 nranks 2 cudaDev 0 - Init START\n", False),
    # every rank of a 2-rank group on g1, but the world is 4 ranks: its other ranks are out of view
    ("g1:7:8 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 - Init START\n"
     "g1:7:9 [1] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 1 - Init START\n"
     "g1:7:8 [0] NCCL INFO comm 0x3 rank 0 nranks 4 cudaDev 0 - Init START\n"
     "g1:7:9 [1] NCCL INFO comm 0x4 rank 1 nranks 4 cudaDev 1 - Init START\n", False),
    # a 1-rank communicator proves nothing of the job
    ("g1:7:8 [0] NCCL INFO comm 0x1 rank 0 nranks 1 cudaDev 0 - Init START\n", False),
    # lines without a host name
    ("NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 - Init START\nNCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 1 - "
     "Init START\n", False),
])
def test_world_on_one_host(text: str, one_node: bool) -> None:
    from preflight.checks.nccl import job_scope
    from preflight.parsers.nccl_log import parse as parse_nccl

    procs = list(parse_nccl(Doc(text)).procs.values())
    assert job_scope(procs, load_profile("generic")).one_node is one_node


# ----------------------------------------------------------------------------- errors that end the job

OOM = lines(
    "ng1:30:48 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer ng1-ib<51159>",
    "ng1:30:48 [0] NCCL INFO misc/socket.cc:749 -> 6",
    "ng1:31:52 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'",
    "ng1:31:52 [3] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 6291456 bytes",
    "ng1:31:52 [3] NCCL INFO transport/p2p.cc:204 -> 1",
    "ng1:31:40 [3] NCCL INFO [Service thread] Connection closed by localRank 0",
)


def test_cuda_oom_is_the_root_cause() -> None:
    r = one(OOM)
    assert r.status is Status.FAIL and codes(r) == ["cuda-oom"]
    assert r.summary == "CUDA out of memory in NCCL on ng1 GPU3; the socket errors on other ranks follow from it"
    assert r.evidence[:3] == [OOM.splitlines()[2], OOM.splitlines()[3], OOM.splitlines()[0]]
    assert "2 '-> N' return-code line(s) are the error unwinding, not new errors" in r.evidence
    assert "1 '[Service thread] Connection closed by localRank N' line(s) follow from the abort" in r.evidence
    assert "not a network fault" in r.remedy and "NCCL_BUFFSIZE" in r.remedy


def test_cuda_oom_alone_names_no_socket_errors() -> None:
    r = one("ng1:31:52 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'\n")
    assert r.summary == "CUDA out of memory in NCCL on ng1 GPU3" and r.evidence == [
        "ng1:31:52 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'"]


def test_cuda_error() -> None:
    r = one(lines("g:1:2 [4] NCCL INFO comm 0x1 rank 12 nranks 16 cudaDev 4 busId 9a000 - Init START",
                  "g:1:2 [4] enqueue.cc:1480 NCCL WARN Cuda failure 700 'an illegal memory access was encountered'"))
    assert codes(r) == ["cuda-error"] and r.status is Status.FAIL
    assert r.summary == "CUDA error in NCCL on g GPU4 (rank 12): an illegal memory access was encountered"
    assert "Xid" in r.remedy
    s = one("g:1:2 [4] proxy.cc:900 NCCL WARN [Proxy Service] Failed to set CUDA device 4\n")
    assert s.summary == "CUDA error in NCCL on g GPU4"


def test_ib_completion_error_names_peer_hca_and_meaning() -> None:
    r = one(lines(
        "k2:25:58 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.35.2<0>",
        "k2:25:58 [0] net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.35.1<49189> with error 12, "
        "opcode 0, len 0, vendor err 129 (Send)",
        "k2:25:58 [0] NCCL INFO transport/net.cc:1137 -> 6",
        "k2:25:52 [0] proxy.cc:1143 NCCL WARN Socket recv failed while polling for opId=0x7fa0"))
    assert codes(r) == ["ib-completion-error"]
    assert r.summary == ("NET/IB completion error 12 from peer 10.0.35.1 on k2 GPU0 via mlx5_0, mlx5_1, vendor err "
                         "129: transport retry counter exceeded: the peer stopped answering (link down, peer crashed, "
                         "or a fabric/routing problem)")
    assert "1 lost-peer / proxy error line(s) follow from it" in r.evidence
    assert "switch port counters" in r.remedy


def test_ib_completion_error_4_remedy_and_unknown_status() -> None:
    r = one("k2:25:58 [0] NCCL WARN NET/IB: Got completion from peer 10.0.35.1<49189> with status=4 opcode=0 len=0 "
            "vendor err 81 (Send) hca mlx5_3\n")
    assert "error 4 from peer 10.0.35.1 on k2 GPU0 via mlx5_3, vendor err 81: local protection" in r.summary
    assert "nvidia-peermem" in r.remedy
    s = one("k2:25:58 [0] NCCL WARN NET/IB : Got completion with error 10, opcode 1, len 0, vendor err 0\n")
    assert "peer ? on k2 GPU0, vendor err 0: remote access error" in s.summary and "peermem" in s.remedy
    t = one("k2:25:58 [0] NCCL WARN NET/IB : Got completion with error 9, opcode 1, len 0\n")
    assert t.summary == "NET/IB completion error 9 from peer ? on k2 GPU0: the RDMA operation failed"


def test_qp_setup_with_and_without_the_device() -> None:
    r = one("h:X [5] ibvwrap.c:262 NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, on dev "
            "mlx5_2:1, curr state INIT, next state RTR, local GID index 3, local GID ::ffff:10.2.0.5\n")
    assert codes(r) == ["ib-qp-setup-failed"]
    assert r.summary == "queue pair setup failed (INIT -> RTR) on dev mlx5_2:1: 110 Connection timed out, GID index 3 " \
                        "on h GPU5"
    assert "NCCL_CROSS_NIC=0" in r.remedy and "NCCL_IB_GID_INDEX" in r.remedy
    s = one(lines("d:7:8 [3] NCCL INFO NET/IB : Using [0]mlx5_1:1/RoCE ; OOB eth1:9.7.1.8<0>",
                  "d:7:9 [3] misc/ibvwrap.cc:284 NCCL WARN Call to ibv_modify_qp failed with error No such device"))
    assert s.summary == ("queue pair setup failed on dev mlx5_1 (the NET/IB devices of that process): No such "
                         "device on d GPU3")
    t = one("d:7:9 [3] misc/ibvwrap.cc:284 NCCL WARN Call to ibv_modify_qp failed with error Network is unreachable\n")
    assert t.summary == "queue pair setup failed on dev (not named in the log): Network is unreachable on d GPU3"


def test_qp_setup_and_lost_peers_of_the_same_failure() -> None:
    r = one(fixture_text("nccl/nccl_warn_qp_unreachable_then_proxy_and_socket.log"))
    assert r.status is Status.FAIL and codes(r) == ["ib-qp-setup-failed"]
    assert "Network is unreachable" in r.summary and "dgx3 GPU0" in r.summary
    assert "2 lost-peer / proxy error line(s) follow from it" in r.evidence


def test_ib_verbs_call() -> None:
    r = one(lines("g:1:2 [2] NCCL INFO NET/IB : Using [0]mlx5_1:1/IB ; OOB ib0:10.0.0.3<0>",
                  "g:1:9 [2] misc/ibvwrap.cc:110 NCCL WARN Call to ibv_create_qp failed with error Cannot allocate "
                  "memory errno 12"))
    assert codes(r) == ["ib-verbs-call-failed"]
    assert r.summary == "ibv_create_qp failed (Cannot allocate memory) on g GPU2, HCA mlx5_1"
    assert "ulimit -l" in r.remedy
    s = one("g:1:9 [2] NCCL WARN ibv_post_send() failed with error Invalid argument, Bad WR 0x1, First WR 0x1\n")
    assert s.summary == "ibv_post_send failed (Invalid argument) on g GPU2"
    t = one("g:1:9 [2] NCCL WARN Call to ibv_alloc_pd failed\n")
    assert t.summary == "ibv_alloc_pd failed (failed) on g GPU2"


def test_ib_async_fatal_event() -> None:
    r = one("g:1:3 [1] net_ib.cc:219 NCCL WARN NET/IB : mlx5_4:1 async fatal event: local catastrophic error\n")
    assert codes(r) == ["ib-async-fatal"]
    assert r.summary == "IB fatal async event on mlx5_4:1 (local catastrophic error) on g GPU1"
    assert "drain the node" in r.remedy
    s = one(lines("g:1:2 [1] NCCL INFO NET/IB : Using [0]mlx5_1:1/IB ; OOB ib0:10.0.0.3<0>",
                  "g:1:3 [1] NCCL WARN NET/IB : Got async event : port error"))
    assert s.summary == "IB fatal async event on mlx5_1 (port error) on g GPU1"
    t = one("g:1:3 [1] NCCL WARN communicator encountered a fatal error (detected in ncclIbTest)\n")
    assert t.summary == "IB fatal async event on its HCA (fatal error) on g GPU1"


def test_connect_failure_names_peer_and_interfaces() -> None:
    r = one(lines("g:1:2 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.3<0>",
                  "g:1:2 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.9<45123> failed : "
                  "Connection refused"))
    assert codes(r) == ["connect-failed"]
    assert r.summary == "NCCL could not connect to 10.0.0.9 from g GPU0 (Connection refused) over eth0"
    assert "NCCL_SOCKET_IFNAME" in r.remedy
    s = one("g:1:2 [0] NCCL WARN socketStartConnect: exceeded retries (20000)\n")
    assert s.summary == "NCCL could not connect to a peer from g GPU0 (socketStartConnect: exceeded retries (20000))"
    t = one("g:1:2 [0] NCCL WARN socketTryAccept: Accept failed: Too many open files\n")
    assert t.summary == "NCCL could not connect to a peer from g GPU0 (Too many open files)"


def test_peer_lost_alone() -> None:
    r = one(lines("s:17:49 [3] NCCL INFO NET/Socket : Using [0]eth0:10.1.0.4<0>",
                  "s:17:49 [3] include/socket.h:371 WARN Connection closed by remote peer",
                  "s:17:49 [3] INFO bootstrap.cu:45 -> 2 [Net]"))
    assert codes(r)[0] == "peer-connection-lost" and r.status is Status.FAIL
    assert r.summary.startswith("connection to a peer lost on s GPU3 over eth0: a peer process exited")
    s = one("s:17:49 [3] NCCL WARN Call to recv from 10.1.0.5<3321> failed : Software caused connection abort\n")
    assert s.summary.startswith("connection to a peer lost on s GPU3 (peer 10.1.0.5): a peer process")
    assert "NCCL_SOCKET_IFNAME" in s.remedy
    t = one("s:17:49 [3] NCCL WARN socketProgress: Connection closed by remote peer gpu9<3321>\n")
    assert "(peer gpu9)" in t.summary


@pytest.mark.parametrize(("warn", "code", "start", "remedy"), [
    ("NET/IB : Attempted to connect incompatible devices: [0]mlx5_0:1/IB and [1]mlx5_4:1/RoCE. Try selecting NICs "
     "of only one link type using NCCL_IB_HCA", "ib-incompatible-nics",
     "NCCL was asked to join NICs of different link layers on g GPU0: NET/IB : Attempted", "one link type"),
    ("NET/OFI Request 0x7f00c8 (SEND) completed with error: err: 5, flags: 0", "net-plugin-error",
     "the network plugin failed on g GPU0: NET/OFI Request", "aws-ofi-nccl"),
    ("Bootstrap : no socket interface found", "no-usable-interface",
     "NCCL found no usable socket interface on g GPU0: Bootstrap : no socket", "NCCL_SOCKET_IFNAME"),
    ("Duplicate GPU detected : rank 1 and rank 9 both on CUDA device 1b000", "duplicate-gpu",
     "two ranks were given the same GPU on g GPU0: Duplicate GPU", "CUDA_VISIBLE_DEVICES"),
    ("Mismatched NCCL version detected : rank 0 version 22105 rank 8 version 21903", "version-mismatch",
     "ranks run different NCCL versions on g GPU0: Mismatched", "same container"),
])
def test_job_ending_configuration_errors(warn: str, code: str, start: str, remedy: str) -> None:
    r = one(f"g:1:2 [0] init.cc:99 NCCL WARN {warn}\n")
    assert codes(r) == [code] and r.status is Status.FAIL
    assert r.summary.startswith(start) and remedy in r.remedy


def test_two_roots_are_both_reported() -> None:
    r = one(lines("a:1:2 [0] NCCL WARN Call to ibv_modify_qp failed with error Network is unreachable",
                  "b:3:4 [1] NCCL WARN NET/IB : Got completion from peer 10.0.0.1<1> with error 12, opcode 0, len 0, "
                  "vendor err 129",
                  "b:3:4 [1] NCCL WARN Net : Connection closed by remote peer 10.0.0.1<1>"))
    assert codes(r) == ["ib-completion-error", "ib-qp-setup-failed"]
    assert r.summary.startswith("NET/IB completion error 12")
    assert not any("follow from it" in e for e in r.evidence[r.evidence.index(r.evidence[-1]):])


def test_unknown_warn_with_a_failure_cascade_is_nccl_error() -> None:
    r = one(lines("g:1:2 [0] misc/argcheck.cc:30 NCCL WARN AllReduce : invalid root 9 (root should be in 0..8)",
                  "g:1:2 [0] NCCL INFO enqueue.cc:1130 -> 4"))
    assert codes(r) == ["nccl-error"] and r.status is Status.FAIL
    assert r.summary == "NCCL call failed on g GPU0: AllReduce : invalid root 9 (root should be in 0..8)"
    assert r.evidence[:2] == r.evidence[:1] + ["g:1:2 [0] NCCL INFO enqueue.cc:1130 -> 4"]
    assert "NCCL_DEBUG=INFO" in r.remedy


def test_unknown_warn_alone_is_unread_error() -> None:
    r = one("g:1:2 [0] NCCL WARN something NCCL 2.31 prints\ng:1:2 [0] NCCL WARN another\n")
    assert codes(r) == ["unread-error"] and r.status is Status.WARN
    assert r.summary == ("NCCL error line not in preflight's inventory of NCCL messages: g:1:2 [0] NCCL WARN something "
                         "NCCL 2.31 prints (+1 more)")
    assert r.evidence == ["g:1:2 [0] NCCL WARN something NCCL 2.31 prints", "g:1:2 [0] NCCL WARN another"]
    assert "host, device and call" in r.remedy


def test_unknown_warn_beside_a_root_cause_is_still_said() -> None:
    r = one(lines("g:1:2 [0] NCCL WARN Cuda failure 'unspecified launch failure'",
                  "g:1:2 [0] NCCL WARN something NCCL 2.31 prints"))
    assert codes(r) == ["cuda-error", "unread-error"] and r.status is Status.FAIL
    assert "g:1:2 [0] NCCL WARN something NCCL 2.31 prints" in r.evidence
    oom = one(lines("g:1:2 [0] NCCL WARN Cuda failure 'out of memory'", "g:1:2 [0] NCCL WARN another new line"))
    assert codes(oom) == ["cuda-oom", "unread-error"]


def test_unknown_warn_quoted_as_the_failed_call_is_not_said_twice() -> None:
    r = one(lines("g:1:2 [0] misc/x.cc:3 NCCL WARN something NCCL 2.31 prints", "g:1:2 [0] NCCL INFO init.cc:1 -> 3"))
    assert codes(r) == ["nccl-error"]


def test_proxy_failure_alone_and_a_cascade_alone() -> None:
    r = one("g:1:2 [0] proxy.cc:1519 NCCL WARN [Proxy Service 1] Failed to execute operation Connect from rank 1, "
            "retcode 2\n")
    assert codes(r) == ["nccl-error"]
    assert r.summary.startswith("NCCL call failed on g GPU0: [Proxy Service 1] Failed to execute operation")
    s = one(lines("g:1:2 [0] NCCL INFO Using network IB", "g:1:2 [0] NCCL INFO init.cc:1358 -> 3",
                  "g:1:2 [0] NCCL INFO group.cc:65 -> 3 [Async thread]"))
    assert codes(s) == ["nccl-error"]
    assert s.summary == "NCCL call failed on a rank: an NCCL call returned an error"
    assert "g:1:2 [0] NCCL INFO init.cc:1358 -> 3" in s.evidence


def test_framework_report_proves_the_failure() -> None:
    text = lines("g:1:2 [0] NCCL INFO Using network IB",
                 "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, unhandled system "
                 "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.5")
    r = one(text)
    assert codes(r) == ["nccl-error"] and r.summary.startswith("NCCL call failed on a rank: RuntimeError: NCCL error")
    s = one(text + "Last error:\nCall to ibv_create_cq failed with error Cannot allocate memory\n")
    assert codes(s) == ["ib-verbs-call-failed"]
    assert s.summary == "ibv_create_cq failed (Cannot allocate memory) on the framework's last NCCL error"


def test_warns_that_do_not_end_the_job() -> None:
    r = one(lines("g:1:2 [0] NCCL INFO Using network IB",
                  "g:1:2 [0] NCCL WARN NET/IB : Unable to open device mlx5_5",
                  "g:1:2 [0] NCCL WARN NET/IB : Got async event : SM change",
                  "g:1:2 [0] NCCL WARN NET/Socket : the total number of sockets is greater than the maximum allowed, "
                  "setting NCCL_NSOCKS_PERTHREAD to 2"))
    assert r.status is Status.WARN and codes(r) == ["ib-device-unusable", "ib-async-event", "nonfatal-warn"]
    assert r.summary.startswith("NCCL could not open mlx5_5 on g GPU0 and runs without it; IB async event on g GPU0: "
                                "SM change")
    assert "g:1:2 [0] NCCL WARN NET/Socket : the total number of sockets is greater than the maximum allowed, " \
           "setting NCCL_NSOCKS_PERTHREAD to 2" in r.evidence
    assert "ibv_devinfo" in r.remedy and "subnet manager" in r.remedy


def test_many_ranks_are_counted_not_listed() -> None:
    text = "".join(f"h{i}:1:2 [0] NCCL WARN Call to ibv_create_qp failed with error Cannot allocate memory\n"
                   for i in range(6))
    r = one(text)
    assert "on h0 GPU0, h1 GPU0, h2 GPU0, h3 GPU0 (+2)" in r.summary


# ----------------------------------------------------------------------------- sockets and interfaces

SOCKET_2HOSTS = lines(
    "[0] node0:13:13 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0",
    "[1] node2:22:22 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/Socket/0")


def test_socket_across_nodes_without_a_reason_fails() -> None:
    r = one(SOCKET_2HOSTS)
    assert r.status is Status.FAIL and codes(r) == ["socket-transport"]
    assert r.summary == "NCCL runs across nodes over TCP sockets on node0 GPU0 pid 13, node2 GPU0 pid 22"
    assert "2 hosts in the log: node0, node2" in r.evidence and r.facts["multi_node"] is True
    assert r.facts["scope_evidence"][0] == "2 hosts in the log: node0, node2"


def test_socket_expected_by_the_profile_is_a_note() -> None:
    r = one(SOCKET_2HOSTS, **{"nccl.expect_net": "Socket"})
    assert r.status is Status.PASS
    assert "NCCL's network is TCP sockets on node0 GPU0 pid 13, node2 GPU0 pid 22 (nccl.expect_net = SOCKET)" \
        in r.evidence


def test_socket_on_one_host_without_proof_of_size_warns() -> None:
    r = one(lines("ai:4:4 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
                  "ai:4:4 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]",
                  "ai:4:4 [0] NCCL INFO NET/Socket : Using [0]eth0:162.30.2.40<0>",
                  "ai:4:4 [0] NCCL INFO Using network Socket"))
    assert r.status is Status.WARN and codes(r) == ["socket-single-host"]
    assert r.summary == ("NCCL uses TCP sockets, not IB/RoCE, on ai GPU0 pid 4; nothing in the log shows whether the "
                         "job spans nodes")
    assert any("libibverbs" in e for e in r.evidence) and r.facts["multi_node"] is None


def test_socket_over_a_virtual_nic_is_named() -> None:
    r = one(lines("c6:1:2 [0] NCCL INFO Could not find real path of /sys/class/net/eth0/device",
                  "c6:1:2 [0] NCCL INFO Ring 00 : 15 -> 0 [receive] via NET/Socket/0"))
    assert codes(r) == ["socket-transport"]
    assert r.summary == "NCCL runs across nodes over TCP sockets on c6 GPU0 pid 1 (virtual NIC eth0: no PCI device)"
    assert "c6:1:2 [0] NCCL INFO Could not find real path of /sys/class/net/eth0/device" in r.evidence


@pytest.mark.parametrize(("size", "multi"), [
    ("comm 0x1 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0", True),
    ("comm 0x1 rank 0 nRanks 16 nNodes 0 localRanks 8 localRank 0 MNNVL 0", True),  # nranks > localRanks
    ("comm 0x1 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0", False),
    ("comm 0x1 rank 0 nRanks 8 nNodes 0 localRanks 8 localRank 0 MNNVL 0", False),  # nranks == localRanks
    ("comm 0x1 rank 0 nranks 8 cudaDev 0 busId 1000 - Init START", None),
])
def test_job_size_from_the_comm_line(size: str, multi: bool | None) -> None:
    r = one(lines(f"h:1:2 [0] NCCL INFO {size}", "h:1:2 [0] NCCL INFO Using network Socket"))
    assert r.facts["multi_node"] is multi
    want = {True: ["socket-transport"], False: [], None: ["socket-single-host"]}[multi]
    assert codes(r) == want


def test_ranks_beyond_a_node_prove_several_nodes_on_a_profile_with_a_gpu_count() -> None:
    text = lines("h:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 16 cudaDev 0 busId 1000 - Init START",
                 "h:1:2 [0] NCCL INFO Using network Socket")
    r = one(text, profile=H100)
    assert r.facts["multi_node"] is True and codes(r) == ["socket-transport"]
    assert "h rank 0: nranks 16 > 8 GPUs per node" in r.evidence
    assert one(text).facts["multi_node"] is None  # generic: no node has more than 16 GPUs
    assert one(text.replace("nranks 16", "nranks 17")).facts["multi_node"] is True
    assert one(text.replace("nranks 16", "nranks 8"), profile=H100).facts["multi_node"] is None


def test_intra_channels_prove_one_node_only_on_one_host() -> None:
    text = lines("h:1:2 [0] NCCL INFO Using network Socket", "h:1:2 [0] NCCL INFO NET/Socket : Using [0]docker0:"
                 "172.17.0.1<0>", "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC")
    r = one(text)
    assert r.status is Status.PASS and r.facts["multi_node"] is False
    assert r.facts["scope_evidence"] == ["every channel in the log is within the node: h:1:2 [0] NCCL INFO Channel "
                                         "00/0 : 0[0] -> 1[1] via P2P/IPC"]
    two = one(text + "k:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n")
    assert two.facts["multi_node"] is True and "bad-interface" in codes(two)


def test_bad_interface_carried_listed_and_single_node() -> None:
    r = one(lines("g:1:2 [0] NCCL INFO Bootstrap : Using docker0:172.18.0.1<0>",
                  "g:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>",
                  "k:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.2<0>"))
    assert codes(r) == ["bad-interface"] and r.summary == "NCCL bound docker0 on g GPU0 pid 1"
    assert "'^lo,docker,virbr'" in r.remedy
    s = one(lines("s3:15:15 [7] NCCL INFO NET/Socket : Using [0]enp41s0f1:<0> [1]virbr0:<0>",
                  "s3:15:15 [7] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so).",
                  "s3:15:15 [7] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB enp41s0f1:<0>"))
    assert codes(s) == ["bad-interface-listed"] and s.status is Status.WARN
    assert s.summary == "NCCL's socket interface list includes virbr0 on s3 GPU7 pid 15 (not its data path now)"
    t = one(lines("s3:15:15 [7] NCCL INFO NET/Socket : Using [0]virbr0:<0> [1]eth0:<0>",
                  "s3:15:15 [7] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so).",
                  "s3:15:15 [7] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:<0>"))
    assert codes(t) == ["bad-interface"]  # NCCL 2.4 bootstraps over the first socket interface
    u = one(lines("s3:15:15 [7] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>",
                  "s3:15:15 [7] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0> [1]veth77:<0>",
                  "s3:15:15 [7] NCCL INFO comm 0x1 rank 0 nRanks 1 nNodes 1 localRanks 1 localRank 0 MNNVL 0"))
    assert u.status is Status.PASS
    assert any(e.startswith("NCCL lists veth77 on s3 rank 0; the log shows one node") for e in u.evidence)


def test_the_same_bad_interface_carried_by_one_process_and_listed_by_another() -> None:
    r = one(lines("a:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0> [1]virbr0:192.168.122.1<0>",
                  "a:1:1 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so).",
                  "a:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>",
                  "b:2:2 [0] NCCL INFO Using network Socket",
                  "b:2:2 [0] NCCL INFO NET/Socket : Using [0]virbr0:192.168.122.1<0>"))
    assert codes(r) == ["socket-transport", "bad-interface"]  # a lists it, b carries it: one finding
    assert r.summary.endswith("; NCCL bound virbr0 on b GPU0 pid 2")


@pytest.mark.parametrize(("name", "addr", "why"), [
    ("lo", "", "lo"),
    ("docker0", "172.17.0.1", "docker0"),
    ("veth3a", "", "veth3a"),
    ("br-5e1", "", "br-5e1"),
    ("eth0", "172.17.0.2", "eth0 (172.17.0.2 in 172.17.0.0/16)"),
    ("net1", "172.17.0.3", "net1 (172.17.0.3 in 172.17.0.0/16)"),
    # the host's own ports: a site subnet that happens to be 172.17.0.0/16
    ("ib0", "172.17.120.71", ""),
    ("ibp26s0", "172.17.1.1", ""),
    ("enp67s0", "172.17.2.2", ""),
    ("ens5f0", "172.17.2.2", ""),
    ("eno1", "172.17.2.2", ""),
    ("enx785ee8a015a1", "172.17.2.2", ""),
    ("bond0", "172.17.2.2", ""),
    ("ib0", "127.0.0.1", "ib0 (127.0.0.1)"),
    ("eth0", "127.0.1.1", "eth0 (127.0.1.1)"),
    ("eth0", "::1", "eth0 (::1)"),
    ("eth0", "172.18.0.2", ""),
    ("eth0", "fe80::1", ""),
    ("eth0", "", ""),
    ("eth0", "not-an-ip", ""),
    ("", "", ""),
])
def test_bad_interface(name: str, addr: str, why: str) -> None:
    from preflight.checks.nccl import bad_interface

    prof = load_profile("generic")
    prof.values["nccl.bad_networks"] = ["172.17.0.0/16", "garbage", "fd00::/8"]
    assert bad_interface(name, addr, prof) == why
    prof.values["nccl.bad_networks"] = []
    prof.values["nccl.bad_interfaces"] = ["docker", 5]
    assert bad_interface("eth0", "172.17.0.2", prof) == "" and bad_interface("veth3a", "", prof) == ""
    assert bad_interface("docker0", "", prof) == ("docker0" if name else "docker0")
    assert bad_interface("eth1", "fd00::5", load_profile("generic")) == ""


# ----------------------------------------------------------------------------- HCAs, plugins, subnets, versions

def ib_line(host: str, dev: int, hcas: str, oob: str = "ib0:10.0.0.1") -> str:
    return f"{host}:{100 + dev}:{200 + dev} [{dev}] NCCL INFO NET/IB : Using {hcas} ; OOB {oob}<0>"


def test_fewer_hcas_than_gpus() -> None:
    text = lines(*[ib_line("user", d, "[0]mlx5_0:1/IB [1]mlx5_2:1/IB [RO]") for d in range(1, 8)],
                 "user:101:201 [1] NCCL INFO NCCL_IB_HCA set to mlx5_2:1,mlx5_0:1")
    r = one(text)
    assert codes(r) == ["fewer-hcas-than-gpus"] and r.status is Status.WARN
    assert r.summary == ("2 HCA(s) (mlx5_0, mlx5_2) for 7 GPUs on user: fewer NICs than GPUs, inter-node bandwidth "
                         "is capped by the NICs")
    assert "NCCL_IB_HCA=mlx5_2:1,mlx5_0:1" in r.evidence and "every HCA is Active" in r.remedy


def test_local_ranks_count_the_gpus() -> None:
    r = one(lines(ib_line("a", 0, "[0]mlx5_0:1/IB [1]mlx5_1:1/IB"),
                  "a:100:200 [0] NCCL INFO comm 0x1 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0"))
    assert "2 HCA(s) (mlx5_0, mlx5_1) for 8 GPUs on a" in r.summary
    assert one(ib_line("a", 0, "[0]mlx5_0:1/IB")).status is Status.PASS  # one GPU, one HCA


def test_hca_subset_from_the_device_names_and_from_the_profile() -> None:
    text = lines(ib_line("dgx4", 0, "[0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]"))
    r = one(text)
    assert codes(r) == ["hcas-subset"]
    assert r.summary == "NCCL uses 2 HCA(s) (mlx5_10, mlx5_11) on dgx4, fewer than the 6 expected"
    assert any(e.startswith("the device names reach mlx5_11: the node has at least 12 RDMA devices "
                            "(nccl.min_hca_share = 0.5") for e in r.evidence)
    assert "NCCL_IB_HCA" in r.remedy
    h = one(text, profile=H100)
    assert h.summary.endswith("fewer than the 8 expected") and any(e.startswith("ib.hca_count = 8") for e in h.evidence)
    assert one(text, **{"nccl.min_hca_share": 0}).status is Status.PASS
    eight = "".join(f"[{i}]mlx5_{n}:1/IB " for i, n in enumerate((0, 3, 4, 5, 6, 9, 10, 11)))
    assert one(ib_line("dgx4", 0, eight), profile=H100).status is Status.PASS
    assert one(ib_line("dgx4", 0, "[0]mlx5_0:1/IB [1]mlx5_3:1/IB")).status is Status.PASS  # 2 of >= 4
    assert one(ib_line("dgx4", 0, "[0]mlx5_0:1/IB [1]mlx5_4:1/IB")).status is Status.WARN  # 2 of >= 5
    assert one(ib_line("w", 0, "[0]irdma0:1/RoCE [1]mlx5_9:1/RoCE")).status is Status.PASS  # not all mlx5_N


def test_plugin_on_an_ib_profile() -> None:
    text = "h1:1:2 [0] NCCL INFO Using network AWS Libfabric\n"
    r = one(text, profile=H100)
    assert r.status is Status.WARN and codes(r) == ["plugin-not-ib"]
    assert r.summary == "NCCL uses network plugin 'AWS Libfabric', not IB verbs"
    assert any(e.startswith("nccl.expect_net = IB") for e in r.evidence) and "site profile" in r.remedy
    assert one(text).status is Status.PASS
    assert one("h1:1:2 [0] NCCL INFO Using network IBext_v8\n", profile=H100).status is Status.PASS


def test_roce_hosts_on_different_subnets() -> None:
    a = ib_line("w1", 0, "[0]irdma0:1/RoCE", "eth0:172.16.121.86")
    b = ib_line("w3", 0, "[0]irdma0:1/RoCE", "eth0:172.16.207.69")
    r = one(lines(a, b))
    assert codes(r) == ["roce-cross-subnet"]
    assert r.summary == ("RoCE hosts bootstrap from different subnets (w1 172.16.121.0/24, w3 172.16.207.0/24): RDMA "
                         "between them must be routed")
    assert "RoCEv2" in r.remedy
    assert one(lines(a, b.replace("207.69", "121.70"))).status is Status.PASS
    # an IB host beside a RoCE host is not RoCE routing; it is two link layers in one job
    assert codes(one(lines(a, b.replace("/RoCE", "/IB")))) == ["mixed-link-layers"]
    assert one(lines(a, b.replace("172.16.207.69", "fe80::2"))).status is Status.PASS


def test_mixed_versions() -> None:
    r = one(lines("hostA:100:100 [0] NCCL INFO NCCL version 2.19.3+cuda12.3",
                  "hostB:200:200 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
                  "hostC:300:300 [0] NCCL INFO NCCL version 2.21.5+cuda12.4"))
    assert codes(r) == ["mixed-versions"] and r.facts["version"] == ["2.19.3+cuda12.3", "2.21.5+cuda12.4"]
    assert r.summary == "mixed NCCL versions: 2.19.3+cuda12.3, 2.21.5+cuda12.4"
    assert r.evidence[:2] == ["2.19.3+cuda12.3: 1 process(es)", "2.21.5+cuda12.4: 2 process(es)"]
    assert "same container" in r.remedy


def test_docker0_and_mixed_versions() -> None:
    text = lines(
        "hostA:100:100 [0] NCCL INFO NCCL version 2.19.3+cuda12.3",
        "hostA:100:100 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.1<0>",
        "hostA:100:120 [0] NCCL INFO NET/Socket : Using [0]docker0:172.17.0.1<0>",
        "hostA:100:120 [0] NCCL INFO Using network Socket",
        "hostB:200:200 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
        "hostB:200:220 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.2<0>",
        "hostB:200:220 [0] NCCL INFO Using network IB")
    r = one(text)
    assert r.status is Status.FAIL
    assert codes(r) == ["socket-transport", "bad-interface", "mixed-versions"]
    host_b = next(x for x in r.facts["ranks"] if x["host"] == "hostB")
    assert host_b["hcas"] == ["mlx5_0:1/RoCE"] and host_b["oob"] == "eth0"


# ----------------------------------------------------------------------------- NVLS and GDR

NVLS_OFF = "h:1:2 [0] NCCL INFO NVLS multicast support is not available on dev 0\n" \
           "h:1:3 [1] NCCL INFO NVLS multicast support is not available on dev 1\n"


def test_nvls_unavailable_is_a_note_without_an_nvls_profile() -> None:
    r = one(NVLS_OFF)
    assert r.status is Status.PASS and r.summary.endswith("; NVLS off")
    assert any(e.startswith("NVLS (NVLink SHARP) not available on device(s) 0, 1: NCCL uses ring/tree") for e in
               r.evidence)


def test_nvls_unavailable_on_h100() -> None:
    r = one(NVLS_OFF, profile=H100)
    assert r.status is Status.WARN and codes(r) == ["nvls-unavailable"]
    assert r.summary == "NVLS (NVLink SHARP) not available on device(s) 0, 1"
    assert any(e.startswith("nccl.expect_nvls (") for e in r.evidence) and "fabricmanager" in r.remedy


def test_nvls_requested_but_not_used() -> None:
    r = one(lines("h8:33:60 [6] NCCL INFO NCCL_ALGO set by environment to Tree,Ring,,CollnetDirect,CollnetChain,NVLS",
                  "h8:33:60 [6] NCCL INFO 16 coll channels, 0 nvls channels, 16 p2p channels, 16 p2p channels per peer",
                  "h8:33:61 [7] NCCL INFO Channel 00/0 : 7[7] -> 4[4] via P2P/direct pointer"))
    assert codes(r) == ["nvls-requested-not-used"] and r.status is Status.WARN
    assert r.summary == "NVLS was requested but NCCL built no NVLS channels on h8 GPU6 pid 33"
    assert r.evidence[0].endswith("CollnetChain,NVLS") and r.evidence[1].endswith("per peer")
    assert "IMEX" in r.remedy
    s = one(lines("h:1:2 [0] NCCL INFO NCCL_NVLS_ENABLE set by environment to 1.", NVLS_OFF))
    assert codes(s) == ["nvls-requested-not-used"] and s.evidence[0].endswith("to 1.")


def test_nvls_disabled_or_in_use() -> None:
    r = one(lines("h1:1:1 [0] NCCL INFO NCCL_NVLS_ENABLE set by environment to 0.",
                  "h1:1:2 [0] NCCL INFO Using network IB",
                  "h1:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>"), profile=H100,
            **{"ib.hca_count": 1})
    assert r.status is Status.PASS and r.facts["nvls"] is False
    assert "NVLS disabled by NCCL_NVLS_ENABLE=0 on h1 GPU0 pid 1" in r.evidence
    s = one(NVLS_OFF + "h:1:2 [0] NCCL INFO NVLS comm 0x55 headRank 0 nHeads 8 buffSize 4194304\n", profile=H100)
    assert s.status is Status.PASS and s.facts["nvls"] is True


def test_gdr_disabled_for_want_of_the_module() -> None:
    text = lines("g:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>",
                 "g:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)")
    r = one(text)
    assert codes(r) == ["gdr-disabled"] and r.status is Status.WARN
    assert r.summary == ("GPUDirect RDMA is off for HCA mlx5_0 (no module) on g GPU0 pid 1: NCCL stages network "
                         "traffic through host memory")
    assert r.evidence[0].endswith("(no module)") and "nvidia-peermem" in r.remedy
    assert one(text.replace("NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>", "Using network Socket")
               ).status is Status.WARN  # socket-single-host only
    assert "gdr-disabled" not in codes(one(text.replace("NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>",
                                                        "Using network Socket")))


# ----------------------------------------------------------------------------- summaries and bad input

def test_ok_summaries() -> None:
    assert one("n:5:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n").summary == \
        "single node: P2P/IPC between 1 process(es) (no network transport)"
    assert one("n:5:9 [0] NCCL INFO Setting affinity for GPU 0 to ffff\n").summary == \
        "1 NCCL process(es), no network transport in the log (single node, or the log starts late)"
    many = "".join(f"[{i}]mlx5_{i}:1/IB " for i in range(9))
    r = one(ib_line("g", 0, many), **{"nccl.min_hca_share": 0})
    assert r.summary == "NET/IB on 1 process(es) via " + ", ".join(f"mlx5_{i}:1/IB" for i in range(8)) + " ..."


def test_net_from_channel_lines_only() -> None:
    text = lines(
        "[1,0]<stdout>:nodeA:5:9 [3] NCCL INFO comm 0x1 rank 3 nranks 16 cudaDev 3 busId 5d000 - Init START",
        "[1,0]<stdout>:nodeA:5:9 [3] NCCL INFO Channel 00/0 : 3[5d000] -> 11[5d000] [send] via NET/IB/3/GDRDMA",
        "[1,0]<stdout>:nodeA:5:9 [3] NCCL INFO Channel 01/0 : 3[5d000] -> 11[5d000] [send] via NET/IB/3/GDRDMA")
    r = one(text, profile=H100)
    assert r.status is Status.PASS
    assert r.facts["ranks"][0]["rank"] == 3 and r.facts["ranks"][0]["gdr"] is True


def test_facts_of_errors_and_processes() -> None:
    r = one(lines("g:1:2 [0] NCCL INFO comm 0x1 rank 5 nranks 8 cudaDev 0 busId 1000 - Init START",
                  "g:1:2 [0] NCCL WARN Call to ibv_create_qp failed with error Cannot allocate memory"))
    assert r.facts["errors"] == [{"kind": "ib_verbs", "host": "g", "dev": "0", "rank": 5, "fatal": True,
                                  "line": "g:1:2 [0] NCCL WARN Call to ibv_create_qp failed with error Cannot allocate "
                                          "memory"}]
    assert r.facts["ranks"] == [{"host": "g", "pid": "1", "rank": 5, "nranks": 8, "mpi_rank": None, "devices": ["0"],
                                 "net": None, "intra": [], "interfaces": [], "hcas": [], "oob": None,
                                 "bootstrap": None, "gdr": None, "nvls": None, "version": None}]
    assert r.facts["net"] is None and r.facts["version"] == [] and r.facts["nvls"] is None


def test_processes_sort_by_rank_then_host() -> None:
    r = one(lines("b:2:2 [0] NCCL INFO rank 1 nranks 2", "a:1:1 [0] NCCL INFO rank 0 nranks 2",
                  "c:3:3 [0] NCCL INFO Using network IB"))
    assert [x["host"] for x in r.facts["ranks"]] == ["a", "b", "c"]


@pytest.mark.parametrize("text", ["", "nothing here\n", "\x00\x01garbage", "h:1:2 [0] NCCL INFO"])
def test_garbage_is_not_recognised(text: str) -> None:
    r = one(text)
    assert r.status is Status.SKIP and codes(r) == ["not-recognised"]
    assert r.summary.startswith("not recognised: NCCL_DEBUG lines") and "NCCL_DEBUG=INFO" in r.remedy


def test_no_log_is_an_error() -> None:
    r = reg.load()
    [res] = grade_check(r.checks["nccl.transport"], "node1", FactStore(r, captures={}), load_profile("generic"),
                        Options(mode="analyze"), None)
    assert res.status in (Status.ERROR, Status.SKIP)


def test_detectors_are_specific(registry) -> None:  # noqa: ANN001
    from preflight.analyze import classify
    from preflight.framing import Doc

    def kinds(rel: str) -> set[str]:
        return {f.name for f in classify(Doc(fixture_text(rel)), registry)}

    assert "nccl-log" in kinds("nccl/nccl_info_2node_ib_nvls.log")
    assert "nccl-tests" not in kinds("nccl/nccl_info_2node_ib_nvls.log")
    assert "watchdog-log" not in kinds("nccl/nccl_info_2node_ib_nvls.log")
    assert "nccl-tests" in kinds("nccl-tests/all_reduce_perf_1node_8xH100_nvls.txt")
    assert "nccl-log" not in kinds("nccl-tests/all_reduce_perf_1node_8xH100_nvls.txt")
    assert not kinds("watchdog/torch25_allreduce_timeout_rank3_missing.log") & {"nccl-log", "nccl-tests"}
    # a training log with NCCL INFO lines and a watchdog timeout feeds both checks
    both = fixture_text("nccl/nccl_info_2node_ib_nvls.log") + fixture_text(
        "watchdog/torch25_allreduce_timeout_rank3_missing.log")
    names = {f.name for f in classify(Doc(both), registry)}
    assert {"nccl-log", "watchdog-log"} <= names


def test_completion_status_meanings() -> None:
    def summary(num: int) -> str:
        return one(f"k:1:2 [0] NCCL WARN NET/IB : Got completion with error {num}, opcode 0, len 0, vendor err 0\n"
                   ).summary

    assert summary(13).endswith("RNR retry counter exceeded: the receiver was not ready (peer stalled or crashed)")
    assert summary(5).endswith("work request flushed: the queue pair had already failed (a consequence of an earlier "
                               "error)")
    assert "remote access error" in summary(10) and "local protection error" in summary(4)


# ----------------------------------------------------------------------------- remedies and evidence, exactly

def test_remedies_start_with_what_to_do() -> None:
    def remedy(text: str, profile: str = "generic") -> str:
        return one(text, profile=profile).remedy

    w = "g:1:2 [0] NCCL WARN "
    assert remedy(w + "Cuda failure 'unspecified launch failure'\n").startswith("read the CUDA error; check the GPU")
    assert remedy(w + "Call to ibv_create_qp failed with error Cannot allocate memory\n").startswith(
        "'Cannot allocate memory' on ibv_create_qp/create_cq/reg_mr")
    assert remedy(w + "something new\n").startswith("read the NCCL WARN lines and the lines before them")
    assert remedy(w + "NET/IB : Unable to open device mlx5_1\n").startswith("check the HCA (ibv_devinfo")
    assert remedy(w + "NET/IB : Got async event : LID change\n").startswith("check the port (ibstat)")
    assert remedy(w + "NET/IB : Got async event : port error\n").startswith("the HCA, its port or a queue")
    assert remedy(w + "NET/IB : Got completion with error 12, opcode 0, len 0\n").startswith("check the HCA and link")
    assert remedy(w + "NET/IB : Got completion with error 4, opcode 0, len 0\n").startswith("error 4: check nvidia")
    assert remedy(w + "Call to ibv_modify_qp failed with error No such device\n").startswith(
        "the two NICs cannot reach each other")
    assert remedy(w + "Connect to 10.0.0.9<1> failed : Connection refused\n").startswith(
        "the peer's address is not reachable")
    assert remedy(w + "Net : Connection closed by remote peer\n").startswith("find the peer that exited first")
    assert remedy(w + "Cuda failure 'out of memory'\n").startswith("the process ran out of GPU memory")
    assert remedy(w + "[Proxy Service 1] Failed to execute operation Connect from rank 1, retcode 2\n").startswith(
        "read the NCCL WARN line and the lines before it")
    assert remedy("h1:1:2 [0] NCCL INFO Using network AWS Libfabric\n", H100).startswith("if this plugin is intended")
    assert remedy(lines(*[ib_line("u", d, "[0]mlx5_0:1/IB") for d in range(2)])).startswith(
        "if the node has more rails, list them all")
    assert remedy(ib_line("u", 0, "[0]mlx5_10:1/IB")).startswith("the other HCAs are excluded by NCCL_IB_HCA")
    assert remedy(lines(ib_line("w1", 0, "[0]irdma0:1/RoCE", "eth0:172.16.1.2"),
                        ib_line("w3", 0, "[0]irdma0:1/RoCE", "eth0:172.16.9.2"))).startswith(
        "check that the hosts reach each other")
    assert remedy("h:1:2 [0] NCCL INFO Using network Socket\n").startswith("NCCL found no usable IB/RoCE device")
    assert remedy("h:1:2 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>\n").startswith(
        "(1) set NCCL_SOCKET_IFNAME to the data-plane interface")
    assert remedy(NVLS_OFF, H100).startswith("check the fabric manager")
    assert remedy(lines("h:1:2 [0] NCCL INFO NCCL_NVLS_ENABLE set by environment to 1.", NVLS_OFF)).startswith(
        "NVLS needs NVSwitch multicast")
    assert remedy(lines("g:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>",
                        "g:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)")
                  ).startswith("load nvidia-peermem")
    assert remedy("g:1:2 [0] NCCL WARN Bootstrap : no socket interface found\n").startswith("NCCL_SOCKET_IFNAME (or")
    assert remedy("g:1:2 [0] NCCL WARN Failed to initialize any NET plugin\n").startswith("read the plugin's WARN")


def test_oom_names_a_connect_failure_as_following_from_it() -> None:
    r = one(lines("a:1:2 [0] NCCL WARN Connect to 10.0.0.9<1> failed : Connection refused",
                  "b:3:4 [1] NCCL WARN Cuda failure 'out of memory'"))
    assert r.summary.endswith("; the socket errors on other ranks follow from it")


def test_bad_interface_rules_of_the_profile() -> None:
    from preflight.checks.nccl import bad_interface

    prof = load_profile("generic")
    prof.values["nccl.bad_networks"] = ["garbage", "fd00::/8"]
    assert bad_interface("eth1", "fd00::5", prof) == "eth1 (fd00::5 in fd00::/8)"
    prof.values["nccl.bad_interfaces"] = []
    assert bad_interface("lo", "", prof) == "lo" and bad_interface("docker0", "", prof) == ""


def test_evidence_of_bad_interfaces_and_sockets() -> None:
    r = one(lines("g:1:2 [0] NCCL INFO Bootstrap : Using docker0:172.18.0.1<0>",
                  "g:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>",
                  "k:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.2<0>"))
    assert r.evidence[:2] == ["g:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>",
                              "g:1:2 [0] NCCL INFO Bootstrap : Using docker0:172.18.0.1<0>"]
    s = one(lines("a:1:2 [0] NCCL INFO Using network Socket", "b:1:2 [0] NCCL INFO Using network Socket"))
    assert s.evidence[:2] == ["a:1:2 [0] NCCL INFO Using network Socket", "b:1:2 [0] NCCL INFO Using network Socket"]
    t = one(lines("a:1:2 [0] NCCL INFO Using network Socket", "b:1:2 [0] NCCL INFO Using network Socket",
                  "b:1:2 [0] NCCL INFO Could not find real path of /sys/class/net/eth0/device"))
    assert "(virtual NIC eth0: no PCI device)" in t.summary
    assert "b:1:2 [0] NCCL INFO Could not find real path of /sys/class/net/eth0/device" in t.evidence


def test_hca_evidence_skips_processes_without_a_network_and_every_host_is_graded() -> None:
    text = lines("u:99:99 [5] NCCL INFO rank 0 nranks 16",
                 *[ib_line("u", d, "[0]mlx5_0:1/IB") for d in range(2)],
                 ib_line("v", 0, "[0]mlx5_10:1/IB [1]mlx5_11:1/IB"))
    r = one(text)
    assert codes(r) == ["fewer-hcas-than-gpus", "hcas-subset"]
    assert r.evidence[0] == ib_line("u", 0, "[0]mlx5_0:1/IB")
    h = one(ib_line("dgx4", 0, "[0]mlx5_10:1/IB [1]mlx5_11:1/IB"), profile=H100)
    src = load_profile(H100).source("ib.hca_count")
    assert f"ib.hca_count = 8 ({src})" in h.evidence and src


def test_roce_evidence_is_the_bootstrap_or_the_net_line() -> None:
    a = ib_line("w1", 0, "[0]irdma0:1/RoCE", "eth0:172.16.121.86")
    r = one(lines(a, ib_line("w3", 0, "[0]irdma0:1/RoCE", "eth0:172.16.207.69"),
                  "w3:100:200 [0] NCCL INFO Bootstrap : Using eth0:172.16.207.69<0>"))
    assert r.evidence[:2] == [a, "w3:100:200 [0] NCCL INFO Bootstrap : Using eth0:172.16.207.69<0>"]


def test_pass_summaries_at_their_limits() -> None:
    eight = "".join(f"[{i}]mlx5_{i}:1/IB " for i in range(8))
    r = one(ib_line("g", 0, eight))
    assert r.summary == "NET/IB on 1 process(es) via " + ", ".join(f"mlx5_{i}:1/IB" for i in range(8))
    s = one(lines("n:5:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
                  "n:5:9 [0] NCCL INFO Channel 01 : 0[0] -> 2[2] via SHM/direct/direct"))
    assert s.summary == "single node: P2P/IPC, SHM/direct/direct between 1 process(es) (no network transport)"
    assert s.evidence[0] == "n:5:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"


def test_grade_without_a_log_is_an_error() -> None:
    from preflight.checks.nccl import grade_transport
    from preflight.registry import CheckContext

    r = reg.load()
    ctx = CheckContext(r.checks["nccl.transport"], "node1", FactStore(r, captures={}), load_profile("generic"),
                       Options(mode="analyze"))
    res = grade_transport(ctx)
    assert res.status is Status.ERROR and res.facts["codes"] == ["nccl.transport/no-log"]
    assert res.summary == "no NCCL log was captured" and res.evidence == ["the nccl-log input is missing"]
    assert res.remedy.startswith("rerun the job with NCCL_DEBUG=INFO")


def test_not_recognised_quotes_what_it_saw() -> None:
    r = one("NCCL version 2.21.5+cuda12.4\n")
    assert r.status is Status.SKIP and r.evidence == ["2.21.5+cuda12.4"]
    assert r.remedy.startswith("rerun the job with NCCL_DEBUG=INFO and capture the lines")


# ----------------------------------------------------------------------------- boundaries and joins

def test_names_are_counted_past_four() -> None:
    four = "".join(f"h{i}:1:2 [0] NCCL WARN Call to ibv_create_qp failed with error Cannot allocate memory\n"
                   for i in range(4))
    assert one(four).summary == "ibv_create_qp failed (Cannot allocate memory) on h0 GPU0, h1 GPU0, h2 GPU0, h3 GPU0"
    six = "".join(f"h{i}:1:2 [0] NCCL INFO Using network Socket\n" for i in range(6))
    assert one(six).summary == ("NCCL runs across nodes over TCP sockets on h0 GPU0 pid 1, h1 GPU0 pid 1, h2 GPU0 pid 1, "
                                "h3 GPU0 pid 1 (+2)")
    assert one("".join(f"h{i}:1:2 [0] NCCL INFO Using network Socket\n" for i in range(4))).summary.endswith(
        "h3 GPU0 pid 1")


def test_connect_failure_names_every_interface_and_warn_text_without_a_prefix() -> None:
    r = one(lines("g:1:2 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.3<0>",
                  "g:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.1.0.3<0>",
                  "g:1:2 [0] NCCL WARN socketStartConnect: exceeded timeouts (20)"))
    assert r.summary.startswith("NCCL could not connect to a peer from g GPU0 (socketStartConnect: exceeded timeouts "
                                "(20)) over eth0, ib0")
    s = one(lines("g:1:2 [0] NCCL INFO Using network IB", "Last error:",
                  "Bootstrap : no socket interface found"))
    assert s.summary == ("NCCL found no usable socket interface on the framework's last NCCL error: Bootstrap : no "
                         "socket interface found")
    t = one("g:1:2 [0] misc/x.cc:1 NCCL WARN WARN twice: WARN\ng:1:2 [0] NCCL INFO init.cc:1 -> 3\n")
    assert t.summary == "NCCL call failed on g GPU0: WARN twice: WARN"


def test_qp_setup_without_a_reason() -> None:
    r = one("d:7:9 [3] NCCL WARN Call to ibv_modify_qp failed with , on dev mlx5_1:1\n")
    assert r.summary == "queue pair setup failed on dev mlx5_1:1: error on d GPU3"


def test_remedies_of_configuration_errors() -> None:
    def remedy(warn: str) -> str:
        return one(f"g:1:2 [0] NCCL WARN {warn}\n").remedy

    assert remedy("NET/IB : Attempted to connect incompatible devices: [0]mlx5_0:1/IB and [1]mlx5_4:1/RoCE."
                  ).startswith("select NICs of one link type")
    assert remedy("Duplicate GPU detected : rank 1 and rank 9 both on CUDA device 1b000").startswith(
        "give each rank its own GPU")
    assert remedy("Mismatched NCCL version detected : rank 0 version 1 rank 8 version 2").startswith(
        "run the same container/NCCL build")
    assert one(lines("a:1:1 [0] NCCL INFO NCCL version 2.19.3+cuda12.3",
                     "b:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4")).remedy.startswith("run the same container")


def test_oom_names_an_ib_completion_error_as_following_from_it() -> None:
    r = one(lines("a:1:2 [0] NCCL WARN NET/IB : Got completion with error 5, opcode 0, len 0, vendor err 249",
                  "b:3:4 [1] NCCL WARN Cuda failure 'out of memory'"))
    assert r.summary.endswith("; the socket errors on other ranks follow from it") and codes(r) == ["cuda-oom"]


def test_lesser_warn_joins() -> None:
    r = one(lines("g:1:2 [0] NCCL WARN NET/IB : Unable to open device mlx5_5",
                  "g:1:2 [0] NCCL WARN NET/IB : Unable to open device mlx5_2"))
    assert r.summary == "NCCL could not open mlx5_2, mlx5_5 on g GPU0 and runs without it"


def test_bad_network_with_host_bits() -> None:
    from preflight.checks.nccl import bad_interface

    prof = load_profile("generic")
    prof.values["nccl.bad_networks"] = ["172.17.0.1/16"]
    assert bad_interface("eth0", "172.17.5.5", prof) == "eth0 (172.17.5.5 in 172.17.0.0/16)"


def test_a_socket_list_before_ib_without_a_plugin_line_is_only_listed() -> None:
    r = one(lines("s3:15:15 [7] NCCL INFO NET/Socket : Using [0]virbr0:192.168.122.1<0> [1]eth0:10.0.0.3<0>",
                  "s3:15:15 [7] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.3<0>"))
    assert codes(r) == ["bad-interface-listed"]
    assert r.evidence[0] == "s3:15:15 [7] NCCL INFO NET/Socket : Using [0]virbr0:192.168.122.1<0> [1]eth0:10.0.0.3<0>"


def test_socket_notes_and_evidence_exactly() -> None:
    r = one(lines("h:1:2 [0] NCCL INFO Using network Socket",
                  "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"))
    assert "NCCL's network is TCP sockets on h GPU0 pid 1; the log shows one node, so no traffic crosses it" \
        in r.evidence
    s = one(lines("h:1:2 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.3<0>",
                  "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 9[0] [send] via NET/Socket/0"))
    assert s.evidence[0] == "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 9[0] [send] via NET/Socket/0"
    t = one(lines("h:1:2 [0] NCCL INFO Using network Socket",
                  "h:1:2 [0] NCCL INFO Could not find real path of /sys/class/net/eth0/device",
                  "h:1:2 [0] NCCL INFO Could not get speed from /sys/class/net/eth1/speed. Defaulting to 10 Gbps."))
    assert "(virtual NIC eth0, eth1: no PCI device)" in t.summary


def test_job_size_evidence_is_the_comm_line() -> None:
    size = "h:1:2 [0] NCCL INFO comm 0x1 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0"
    r = one(lines(size, "h:1:2 [0] NCCL INFO Using network Socket"))
    assert r.facts["scope_evidence"] == [size]
    big = "h:1:2 [0] NCCL INFO comm 0x1 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0"
    assert one(big + "\n").facts["scope_evidence"] == [big]


def test_a_profile_without_a_node_size_proves_nothing_from_ranks() -> None:
    text = "h:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 17 cudaDev 0 busId 1000 - Init START\n"
    prof = load_profile("generic")
    values = {k: v for k, v in prof.values.items() if k not in ("gpu.count", "nccl.max_gpus_per_node")}
    r = reg.load()
    prof.values = values
    store = FactStore(r, captures={"nccl-log": capture("nccl-log", text)})
    [res] = grade_check(r.checks["nccl.transport"], "node1", store, prof, Options(mode="analyze"), None)
    assert res.facts["multi_node"] is None


def test_hosts_without_hcas_are_skipped_and_equal_counts_pass() -> None:
    r = one(lines("a:1:1 [0] NCCL INFO Using network Socket",
                  *[ib_line("b", d, "[0]mlx5_0:1/IB") for d in range(2)]))
    assert "fewer-hcas-than-gpus" in codes(r)
    two = one(lines(*[ib_line("b", d, "[0]mlx5_0:1/IB [1]mlx5_1:1/IB") for d in range(2)]))
    assert two.status is Status.PASS
    mixed = one(lines("b:7:7 [5] NCCL INFO rank 0 nranks 16", "b:7:7 [5] NCCL INFO Using network Socket",
                      *[ib_line("b", d, "[0]mlx5_0:1/IB") for d in range(2)]))
    fewer = next(e for e in mixed.evidence if "NET/IB" in e)
    assert fewer == ib_line("b", 0, "[0]mlx5_0:1/IB")


def test_subset_evidence_exactly() -> None:
    line = ib_line("dgx4", 0, "[0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE")
    r = one(line)
    src = load_profile("generic").source("nccl.min_hca_share")
    assert r.evidence[:2] == [line, f"the device names reach mlx5_11: the node has at least 12 RDMA devices "
                                    f"(nccl.min_hca_share = 0.5, {src})"]


def test_roce_subnets_from_the_bootstrap_when_the_oob_has_no_address() -> None:
    r = one(lines("w1:1:1 [0] NCCL INFO NET/IB : Using [0]irdma0:1/RoCE ; OOB eth0:<0>",
                  "w1:1:1 [0] NCCL INFO Bootstrap : Using eth0:172.16.1.2<0>",
                  "w3:1:1 [0] NCCL INFO NET/IB : Using [0]irdma0:1/RoCE ; OOB eth0:<0>",
                  "w3:1:1 [0] NCCL INFO Bootstrap : Using eth0:172.16.9.2<0>"))
    assert codes(r) == ["roce-cross-subnet"]
    s = one(lines(ib_line("w1", 0, "[0]irdma0:1/RoCE", "eth0:172.16.1.2"),
                  "w1:100:200 [0] NCCL INFO Bootstrap : Using eth1:10.9.1.2<0>",
                  ib_line("w3", 0, "[0]irdma0:1/RoCE", "eth0:172.16.9.2")))
    assert "w1 10.9.1.0/24/172.16.1.0/24" in s.summary


def test_plugin_evidence_exactly() -> None:
    r = one("h1:1:2 [0] NCCL INFO Using network AWS Libfabric\n", profile=H100)
    src = load_profile(H100).source("nccl.expect_net")
    assert r.evidence[:2] == ["h1:1:2 [0] NCCL INFO Using network AWS Libfabric", f"nccl.expect_net = IB ({src})"]


def test_nvls_evidence_exactly_and_pass_proof() -> None:
    r = one(NVLS_OFF, profile=H100)
    src = load_profile(H100).source("nccl.expect_nvls")
    assert r.evidence[:2] == [NVLS_OFF.splitlines()[0], f"nccl.expect_nvls ({src})"]
    s = one("h:1:2 [0] NCCL INFO NVLS multicast support is available on dev 0\n")
    assert s.evidence == ["h:1:2 [0] NCCL INFO NVLS multicast support is available on dev 0"]


def test_pass_summary_with_two_networks() -> None:
    r = one(lines("a:1:1 [0] NCCL INFO Using network IB", "b:1:1 [0] NCCL INFO Using network AWS Libfabric"))
    assert r.summary == "NET/AWS Libfabric/IB on 2 process(es)"


# ----------------------------------------------------------------------------- collectives called differently

MISMATCH = ("init.cc:1247 NCCL WARN Mismatched collective detected, please check your collective calls at and around "
            "rank 39. You can use NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=COLL to see the collective logs")


def test_mismatched_collective_without_the_prefix_fails() -> None:
    r = one(f"`{MISMATCH}`\n")
    assert r.status is Status.FAIL and codes(r) == ["collective-mismatch"]
    assert r.summary == "ranks called different collectives (or sizes) around rank 39 on a process the log does not name"
    assert r.evidence == [f"`{MISMATCH}`"]
    assert r.remedy.startswith("every rank must call the same collectives in the same order")
    assert r.facts["hosts"] == [] and r.facts["multi_node"] is None
    named = one(f"g7:11:12 [3] {MISMATCH}\ng7:11:12 [3] NCCL INFO comm 0x1 rank 39 nranks 64\n")
    assert named.summary.endswith("around rank 39 on g7 GPU3 (rank 39)")


def test_suspected_mismatch_and_size_mismatch() -> None:
    hang = one("g:1:2 [0] init.cc:1256 NCCL WARN Your program may be hanging, this may be caused by a collective "
               "mismatch around rank 5. Please check your collective calls at and around this rank.\n")
    assert hang.status is Status.FAIL and codes(hang) == ["collective-mismatch-suspected"]
    assert hang.summary == ("NCCL suspects the ranks called different collectives: the job is stalled around rank 5 on "
                            "g GPU0")
    size = one("g:1:2 [0] transport/net_ib.cc:1119 NCCL WARN NET/IB : req 1/8 tag 7 peer 10.0.0.2<35001> collective "
               "mismatch error, local size 1048576 remote size 524288\n"
               "h:1:2 [1] transport/net_ib.cc:1119 NCCL WARN NET/IB : req 1/8 tag 7 peer 10.0.0.3<35001> collective "
               "mismatch error, local size 1048576 remote size 524288\n")
    assert codes(size) == ["collective-mismatch"] and size.summary == (
        "ranks called different collectives (or sizes) on g GPU0, h GPU1")
    assert len(size.evidence) == 2


def test_rank_count_mismatch() -> None:
    r = one("g:1:2 [0] bootstrap.cc:205 NCCL WARN Bootstrap Root : mismatch in rank count from procs 16 : 8\n")
    assert r.status is Status.FAIL and codes(r) == ["rank-count-mismatch"]
    assert r.summary.startswith("the processes disagree on the number of ranks of the communicator on g GPU0: "
                                "Bootstrap Root")
    assert "world size" in r.remedy


# ----------------------------------------------------------------------------- GPUDirect RDMA off, every wording

@pytest.mark.parametrize(("line", "named"), [
    ("NET/IB : GPU Direct RDMA Disabled for GPU 0 / HCA mlx5_0 (no module)", "mlx5_0 (no module)"),
    ("NET/IB : GPU Direct RDMA Disabled for GPU 0[0] / HCA 0 'mlx5_0' (no module or not supported by GPU)",
     "mlx5_0 (no module or not supported by GPU)"),
    ("NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)", "mlx5_0 (no module)"),
    ("NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'", "mlx5_0"),
    ("NET/IBext_v8 : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'", "mlx5_0"),
    ("NET/AWS Libfabric : GPU Direct RDMA Disabled for HCA 0 'rdmap16s27'", "rdmap16s27"),
])
def test_gdr_off_for_an_hca_warns(line: str, named: str) -> None:
    r = one(f"g:1:2 [0] NCCL INFO {line}\n")
    assert r.status is Status.WARN and codes(r) == ["gdr-disabled"]
    assert r.summary == (f"GPUDirect RDMA is off for HCA {named} on g GPU0 pid 1: NCCL stages network traffic through "
                         "host memory")
    assert r.evidence[0].endswith(line)


def test_gdr_off_on_many_processes_and_by_distance() -> None:
    text = "".join(f"learn01:{pid}:9 [{dev}] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA {h} 'mlx5_{h}'\n"
                   for pid, dev, h in ((7, 3, 0), (7, 3, 1), (8, 4, 0), (7, 3, 2)))
    r = one(text)
    assert r.summary.startswith("GPUDirect RDMA is off for HCA mlx5_0, mlx5_1, mlx5_2 on learn01 GPU3 pid 7, learn01 "
                                "GPU4 pid 8:")
    assert len(r.evidence) == 2 and r.facts["net"] == "IB"
    far = one("g:1:2 [0] NCCL INFO Using network IB\n"
              "g:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 0[0] / HCA 0 (distance 3 >= 2)\n")
    assert far.status is Status.PASS and not codes(far)
    assert any(e.startswith("GPUDirect RDMA not used for some GPU/NIC pairs by topology distance") for e in far.evidence)
    sock = one("g:1:2 [0] NCCL INFO Using network Socket\n"
               "g:1:2 [0] NCCL INFO NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'\n")
    assert codes(sock) == ["socket-single-host"]


@pytest.mark.parametrize(("extra", "staged"), [
    ("g:1:2 [0] NCCL INFO Ring 00 : 1 -> 0 [receive] via NET/IB/0\n", True),
    ("g:1:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA\n", False),
    # another pair of the process has GDR: NCCL chose which pairs use it
    ("g:1:2 [0] NCCL INFO GPU Direct RDMA Enabled for GPU 1b000 / HCA 1 (distance 2 <= 4), read 1\n"
     "g:1:2 [0] NCCL INFO Ring 00 : 1 -> 0 [receive] via NET/IB/1\n", False),
    ("", False),  # no network channel in view
])
def test_gdr_off_by_distance_on_every_network_channel_warns(extra: str, staged: bool) -> None:
    r = one("g:1:2 [0] NCCL INFO Using network IB\n"
            "g:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 0[0] / HCA 0 (distance 3 >= 2)\n" + extra)
    if staged:
        assert r.status is Status.WARN and codes(r) == ["gdr-off-by-distance"]
        assert r.summary == ("GPUDirect RDMA is not used on g GPU0 pid 1: NCCL finds the GPU and its NIC too far apart, "
                             "and its network channels stage traffic through host memory")
        assert r.evidence == ["g:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 0[0] / HCA 0 (distance 3 >= 2)",
                              "g:1:2 [0] NCCL INFO Ring 00 : 1 -> 0 [receive] via NET/IB/0"]
        assert r.remedy.startswith("the GPU and the HCA are not under one PCIe switch")
        assert "NCCL_NET_GDR_LEVEL" in r.remedy and "PIX/PXB" in r.remedy
    else:
        assert r.status is Status.PASS and not codes(r)
        assert any(e.startswith("GPUDirect RDMA not used for some GPU/NIC pairs by topology distance") for e in r.evidence)


# ----------------------------------------------------------------------------- link layers

def test_roce_port_among_ib_ports_warns() -> None:
    r = one(ib_line("crow19", 3, "[0]mlx5_1:1/IB [1]mlx5_3:1/IB [2]mlx5_0:1/IB [3]mlx5_2:1/RoCE [4]mlx5_4:1/IB",
                    "eth0:10.100.62.64") + "\n", **{"nccl.min_hca_share": 0})
    assert r.status is Status.WARN and codes(r) == ["mixed-link-layers"]
    assert r.summary == ("NCCL's NET/IB ports mix link layers (IB: mlx5_1:1, mlx5_3:1, mlx5_0:1, mlx5_4:1; RoCE: "
                         "mlx5_2:1) on crow19 GPU3 pid 103: the RoCE port(s) cannot reach the other layer's peers")
    assert r.evidence == [ib_line("crow19", 3, "[0]mlx5_1:1/IB [1]mlx5_3:1/IB [2]mlx5_0:1/IB [3]mlx5_2:1/RoCE "
                                  "[4]mlx5_4:1/IB", "eth0:10.100.62.64")]
    assert "exclude mlx5_2 with NCCL_IB_HCA" in r.remedy and "RoCE port" in r.remedy
    two = one(ib_line("c", 0, "[0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/RoCE [3]mlx5_3:1/IB [4]mlx5_5:1/RoCE") + "\n",
              **{"nccl.min_hca_share": 0})
    assert "exclude mlx5_2, mlx5_5 with NCCL_IB_HCA=^...), and check why a RoCE port" in two.remedy


def test_link_layers_across_hosts_and_one_layer() -> None:
    a, b = ib_line("a", 0, "[0]mlx5_0:1/IB [1]mlx5_1:1/IB"), ib_line("b", 0, "[0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE")
    r = one(lines(a, b), **{"nccl.min_hca_share": 0})
    assert codes(r) == ["mixed-link-layers"]
    assert "(IB: mlx5_0:1, mlx5_1:1; RoCE: mlx5_0:1, mlx5_1:1) on b GPU0 pid 100: the RoCE port(s)" in r.summary
    assert one(lines(a, a.replace("a:", "c:")), **{"nccl.min_hca_share": 0}).status is Status.PASS
    assert one(ib_line("a", 0, "[0]={[0] mlx5_0:1/RoCE, [1] mlx5_1:1/RoCE}") + "\n",
               **{"nccl.min_hca_share": 0}).status is Status.PASS


# ----------------------------------------------------------------------------- aws-ofi-nccl without a provider

EMPTY = "libfabric:85:1747438790::core:core:fi_getinfo_():1392<warn> fi_getinfo: provider efa output empty list"


def test_no_efa_provider_warns() -> None:
    r = one(lines("ip-10-36-29-253:79:79 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0", EMPTY))
    assert r.status is Status.WARN and codes(r) == ["ofi-no-provider"]
    assert r.summary == ("libfabric provider 'efa' found no device on ip-10-36-29-253: no RDMA (EFA) network for NCCL; "
                         "the log does not show what NCCL used instead")
    assert r.evidence == [EMPTY] and r.remedy.startswith("check that the job sees its EFA devices")
    plugin = one(lines("g:1:2 [0] NCCL INFO NET/OFI No eligible providers were found"))
    assert plugin.summary.startswith("the OFI plugin found no usable provider on g: ")
    anon = one(lines("NCCL INFO NET/OFI No eligible providers were found"))
    assert anon.summary.startswith("the OFI plugin found no usable provider: no RDMA")


def test_no_efa_provider_then_sockets_or_a_failure_fails() -> None:
    sockets = one(lines("a:1:2 [0] NCCL INFO Using network Socket", "b:1:2 [0] NCCL INFO Using network Socket", EMPTY))
    assert sockets.status is Status.FAIL and codes(sockets) == ["ofi-no-provider-fallback", "socket-transport"]
    assert ("libfabric provider 'efa' found no device on a, b: no RDMA network for NCCL, and the job ran over TCP "
            "sockets (a GPU0 pid 1, b GPU0 pid 1)") in sockets.summary
    failed = one(lines("a:1:2 [0] NCCL WARN NET/OFI OFI fi_getinfo() call failed: No data available",
                       "a:1:2 [0] NCCL INFO init.cc:100 -> 2"))
    assert codes(failed) == ["ofi-no-provider-fallback", "nccl-error"]  # the cause first: its line is the one shown
    assert failed.evidence[0] == "a:1:2 [0] NCCL WARN NET/OFI OFI fi_getinfo() call failed: No data available"
    assert "found no usable provider on a: no RDMA network for NCCL, and the job failed" in failed.summary
    framework = one(lines(EMPTY, "g:1:2 [0] NCCL INFO cudaDriverVersion 12040",
                          "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1275, unhandled system error, NCCL "
                          "version 2.21.5"))
    assert "ofi-no-provider-fallback" in codes(framework)
    one_node = one(lines("a:1:2 [0] NCCL INFO Using network Socket",
                         "a:1:2 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0",
                         EMPTY))
    assert "ofi-no-provider" in codes(one_node)


def test_no_provider_is_a_note_when_a_network_runs() -> None:
    for running in ("g:1:2 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 16 nics)",
                    "g:1:2 [0] NCCL INFO Using network IB"):
        r = one(lines(EMPTY, running))
        assert r.status is Status.PASS and not codes(r)
        assert any(e.startswith("libfabric provider 'efa' found no device, but NCCL runs over ") for e in r.evidence)


def test_hosts_never_include_the_unnamed_process() -> None:
    r = one(lines("a:1:2 [0] NCCL INFO Using network IB", "NCCL INFO Using network IB"))
    assert r.facts["hosts"] == ["a"] and r.facts["multi_node"] is None
    assert one("<cluster_name>:926:1151 [7] NCCL INFO Channel 03/0 : 15[7] -> 6[6] [send] via NET/Socket/3\n"
               ).summary.startswith("NCCL runs across nodes over TCP sockets on <cluster_name> GPU7 pid 926")
    anon_hcas = one("NCCL INFO NET/IB : Using [0]mlx5_10:1/IB ; OOB ib0:10.0.0.1<0>\n")
    assert anon_hcas.summary.startswith("NCCL uses 1 HCA(s) (mlx5_10) on a process the log does not name, fewer than")


def test_gdr_distance_lines_on_the_socket_transport_are_not_a_gdr_finding() -> None:
    r = one("g:1:2 [0] NCCL INFO Using network Socket\n"
            "g:1:2 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 1b000 / HCA 0 (distance 5 > 4)\n"
            "g:1:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0\n")
    assert codes(r) == ["socket-transport"]  # the socket finding says it all: sockets never have GPUDirect RDMA


def test_nccl_20_connect_refused_with_a_masked_host_fails() -> None:
    r = one(lines("*server name* [0] include/socket.h:185 WARN Call to connect failed : Connection refused",
                  "NCCL failure *MyProgram*.cu:110 'unhandled system error'"))
    assert r.status is Status.FAIL and codes(r) == ["connect-failed"]
    assert r.summary == "NCCL could not connect to a peer from a process the log does not name GPU0 (Connection refused)"
    assert r.evidence[0] == "*server name* [0] include/socket.h:185 WARN Call to connect failed : Connection refused"


def test_ipoib_in_dockers_default_range_is_the_sites_subnet() -> None:
    text = "".join(f"dlv0{n}:{n}0:{n}0 [0] NCCL INFO Bootstrap : Using ib0:172.17.120.7{n}<0>\n"
                   f"dlv0{n}:{n}0:{n}0 [0] NCCL INFO NET/IB : Using [0]mlx4_0:1/IB ; OOB ib0:172.17.120.7{n}<0>\n"
                   f"dlv0{n}:{n}0:{n}0 [0] NCCL INFO Using network IB\n" for n in range(1, 5))
    r = one(text)
    assert r.status is Status.PASS and not codes(r), r.summary
    assert r.summary == "NET/IB on 4 process(es) via mlx4_0:1/IB"
    docker = one(text.replace("ib0:", "eth0:"))
    assert codes(docker) == ["bad-interface"] and "eth0 (172.17.120.71 in 172.17.0.0/16)" in docker.summary


# ----------------------------------------------------------------------------- connect retries, /dev/shm, GPU P2P

RETRY = ("gpu017:4411:4480 [0] NCCL INFO socketPollConnect: connect to 10.8.1.18<43117> returned No route to host, "
         "retrying ({n}/34) after sleep for {ms} msec")


def test_connect_retries_alone_warn() -> None:
    r = one(lines("gpu017:4411:4480 [0] NCCL INFO comm 0x5583 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 18000",
                  *[RETRY.format(n=n, ms=100 * n) for n in (1, 2, 3, 4)]))
    assert codes(r) == ["connect-retrying"] and r.status is Status.WARN
    assert r.summary == ("NCCL retried 4 connect(s) to 10.8.1.18 on gpu017 GPU0 (rank 0): No route to host "
                         "(last: 4/34)")
    assert r.evidence == [RETRY.format(n=n, ms=100 * n) for n in (1, 2, 3)] + ["4 retry line(s) in all"]
    assert r.remedy.startswith("NCCL could not reach a peer") and "NCCL_SOCKET_IFNAME" in r.remedy


def test_connect_retries_all_quoted_need_no_count() -> None:
    r = one(lines(*[RETRY.format(n=n, ms=100 * n) for n in (1, 2, 3)]))
    assert codes(r) == ["connect-retrying"] and r.summary.startswith("NCCL retried 3 connect(s) to 10.8.1.18 ")
    assert r.evidence == [RETRY.format(n=n, ms=100 * n) for n in (1, 2, 3)]


def test_old_connect_retries_warn() -> None:
    r = one("h:1:2 [0] NCCL INFO Call to connect returned Connection refused, retrying\n")
    assert codes(r) == ["connect-retrying"] and r.summary == "NCCL retried 1 connect(s) on h GPU0: Connection refused"


@pytest.mark.parametrize("after", [
    "gpu017:4411:4480 [0] NCCL INFO bootstrap.cc:181 -> 2",  # the call failed (the cascade)
    "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, unhandled system error",
    "gpu017:4411:4480 [0] misc/x.cc:3 NCCL WARN a message of no known kind\ngpu017:4411:4480 [0] NCCL INFO "
    "init.cc:1 -> 2",
])
def test_connect_retries_then_a_failure_fail(after: str) -> None:
    r = one(lines(RETRY.format(n=1, ms=100), after))
    assert codes(r) == ["connect-failed"] and r.status is Status.FAIL
    assert r.summary == "NCCL could not connect to 10.8.1.18 from gpu017 GPU0 (No route to host)"
    assert r.evidence[0] == RETRY.format(n=1, ms=100)


def test_connect_retries_exhausted_fail() -> None:
    r = one(lines(RETRY.format(n=33, ms=3300),
                  "gpu017:4411:4480 [0] misc/socket.cc:590 NCCL WARN socketPollConnect: connect to 10.8.1.18<43117> "
                  "returned No route to host, exceeded error retry count after 34 attempts"))
    assert codes(r) == ["connect-failed"] and r.status is Status.FAIL


def test_connect_retries_beside_another_root_cause_are_said() -> None:
    r = one(lines(RETRY.format(n=1, ms=100), "gpu017:4411:4480 [0] NCCL WARN Cuda failure 'unspecified launch failure'"))
    assert codes(r) == ["cuda-error", "connect-retrying"] and r.status is Status.FAIL


SHM = ["gpu017:7310:7388 [1] NCCL INFO Channel 00 : 1[1] -> 0[0] via SHM/direct/direct",
       "gpu017:7310:7388 [1] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device",
       "gpu017:7310:7388 [1] include/shm.h:48 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-Xb2k9q "
       "(size 9637888)",
       "gpu017:7310:7388 [1] NCCL INFO transport/shm.cc:100 -> 2",
       "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1331, unhandled system error, "
       "NCCL version 2.10.3"]


def test_dev_shm_full_fails_with_the_shm_size_remedy() -> None:
    r = one(lines(*SHM))
    assert codes(r) == ["shm-failed"] and r.status is Status.FAIL
    assert r.summary == ("NCCL could not create its shared-memory segment of 9,637,888 bytes /dev/shm/nccl-Xb2k9q on "
                         "gpu017 GPU1 (No space left on device): the communicator was not created")
    assert r.evidence[:2] == SHM[1:3]
    assert r.remedy.startswith("/dev/shm is too small or full") and "--shm-size" in r.remedy and "emptyDir" in r.remedy


def test_dev_shm_2_30_wording_names_the_errno() -> None:
    r = one("g:1:2 [0] os/linux.cc:795 (ncclShmOpen) NCCL WARN Error: failed to extend /dev/shm/nccl-Ab to 4096 bytes, "
            "error: No space left on device (28)\n")
    assert codes(r) == ["shm-failed"]
    assert r.summary == ("NCCL could not create its shared-memory segment of 4,096 bytes /dev/shm/nccl-Ab on g GPU0 "
                         "(No space left on device): the communicator was not created")


def test_p2p_disabled_between_nvlink_gpus_fails() -> None:
    line = ("gpu017:7310:7388 [1] graph/paths.cc:396 NCCL WARN P2P is disabled between NVLINK connected GPUs 1 and 0. "
            "This should not be the case given their connectivity, and is probably due to a hardware issue. If you "
            "still want to proceed, you can set NCCL_IGNORE_DISABLED_P2P=1.")
    r = one(line + "\n")
    assert codes(r) == ["p2p-disabled-nvlink"] and r.status is Status.FAIL
    assert r.summary == ("P2P is disabled between NVLink-connected GPUs (GPU1-GPU0) on gpu017 GPU1: NCCL refuses to "
                         "create the communicator")
    assert r.evidence == [line] and "topo -p2p" in r.remedy and "host memory" in r.remedy


def test_peer_access_failure_fails() -> None:
    r = one("g:1:2 [0] NCCL WARN failed to peer with device 3(=1b000): 217 peer access is not supported between "
            "these two devices\n")
    assert codes(r) == ["peer-access-failed"] and r.status is Status.FAIL
    assert r.summary == "CUDA peer access to GPU3 could not be enabled on g GPU0: peer access is not supported " \
                        "between these two devices"
    assert r.remedy.startswith("cudaDeviceEnablePeerAccess failed")


def test_ib_cqe_with_error_fails_and_takes_the_status_line() -> None:
    cqe = ("g:1:2 [0] NCCL WARN NET/IB: Got CQE with error (devIndex=0, req=0x7f3a, comm=0x7f3b (send), wr_id=12, "
           "qp_num=4711)")
    r = one(cqe + "\n")
    assert codes(r) == ["ib-completion-error"] and r.status is Status.FAIL
    assert r.summary == ("NET/IB work completion with error (send, status not in the log) on g GPU0: the RDMA operation "
                         "failed")
    assert "Got completion" in r.remedy
    s = one(lines(cqe, "g:1:2 [0] NCCL WARN NET/IB: Got completion from peer 10.0.0.2<5001> with status=12 opcode=0 "
                       "len=0 vendor err 129 (Send) hca mlx5_0"))
    assert s.summary.startswith("NET/IB completion error 12 from peer 10.0.0.2 on g GPU0 via mlx5_0")


def test_nonfatal_ib_event_and_clamped_settings_warn() -> None:
    r = one(lines("g:1:2 [0] NCCL INFO Using network IB",
                  "g:1:2 [0] NCCL WARN NET/IB : mlx5_3:1 Got non-fatal async event: port active(9)",
                  "g:1:2 [0] NCCL WARN Cannot initialize CollNet, using point-to-point network instead"))
    assert codes(r) == ["ib-async-event", "nonfatal-warn"] and r.status is Status.WARN
    assert "IB async event on g GPU0: port active(9)" in r.summary
    assert "NCCL warned and carried on on g GPU0: Cannot initialize CollNet" in r.summary
