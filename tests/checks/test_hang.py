"""hang.watchdog: PyTorch hang and failure messages and fr_trace findings, graded with codes."""

from __future__ import annotations

import re
import sys

import pytest

from preflight.model import Result, Status
from preflight.parsers import torch_log
from preflight.parsers.torch_hang import HangEvent
from tests.conftest import ROOT, capture, fixture_text, grade

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

WD = ("Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
      "Timeout(ms)=600000) ran for 600011 milliseconds before timing out.")


def watchdog(rel: str = "", text: str | None = None, profile: str = "generic") -> Result:
    body = text if text is not None else fixture_text(f"watchdog/{rel}")
    [r] = grade("hang.watchdog", {"watchdog-log": capture("watchdog-log", body)}, profile=profile, mode="analyze")
    return r


def flight(rel: str = "", text: str | None = None) -> Result:
    body = text if text is not None else fixture_text(f"flight-recorder/{rel}")
    [r] = grade("hang.watchdog", {"fr-trace": capture("fr-trace", body)}, mode="analyze")
    return r


def codes(r: Result) -> list[str]:
    return list(r.facts.get("codes", []))


# ----------------------------------------------------------------------------- NCCL watchdog timeouts

def test_modern_layout_lists_all_ranks_and_the_missing_one_is_absent() -> None:
    r = watchdog("torch25_allreduce_timeout_rank3_missing.log")
    assert r.status is Status.FAIL and codes(r) == ["hang.watchdog/collective-timeout"]
    f = r.facts
    assert (f["op"], f["seq"], f["timeout_ms"], f["rank"]) == ("ALLREDUCE", 4117, 600000, 0)
    assert 600000 < f["ran_ms"] < 601000
    assert f["ranks"] == [0, 1, 2, 4, 5, 6, 7] and (f["pg"], f["pg_guid"]) == ("0(default_pg)", "0")
    assert r.summary == ("NCCL watchdog timeout: ALLREDUCE SeqNum=4117 (timeout 600000 ms, ran 600084 ms) on ranks 0, "
                         "1, 2, 4, 5, 6, 7 of process group 0 (default_pg, GUID 0)")
    assert all("Watchdog caught" in e or "failure detected" in e or "Some NCCL" in e for e in r.evidence)
    assert "NOT in" in r.remedy and "cannot help" not in r.remedy
    timeouts = [e for e in f["events"] if e["kind"] == "nccl_timeout"]
    assert len(timeouts) == 7  # the repeated "terminate called ... what():" line is not a second event
    status = [e for e in f["events"] if e["kind"] == "nccl_status"]
    assert status and status[0]["last_completed"] == 4116 and status[0]["pg"] == "0(default_pg)"


def test_old_layouts_and_lowest_seq_wins() -> None:
    r = watchdog("torch_1x_2x_mixed_seq.log")
    f = r.facts
    assert (f["op"], f["seq"], f["rank"], f["timeout_ms"]) == ("BROADCAST", 88231, 0, 1800000)
    assert f["seqs"] == [88231, 88232] and f["ranks"] == [0, 1, 5, 6]  # rank 6's pre-SeqNum line still counts
    assert r.summary.endswith("on ranks 0, 1 of process group 0; 2 more timeout line(s) at later/other SeqNum 88232")


def test_old_format_without_numel_five_ranks() -> None:
    r = watchdog("torch13_no_numel_five_ranks.log")
    f = r.facts
    assert codes(r) == ["hang.watchdog/collective-timeout"]
    assert (f["op"], f["seq"], f["timeout_ms"], f["ran_ms"], f["rank"], f["ranks"], f["group_size"]) == (
        "ALLREDUCE", 120044, 1800000, 1805530, 0, [0, 2, 4, 5, 7], None)
    assert (f["pg"], f["pg_guid"]) == (None, None) and "process group" not in r.summary


def test_pid_prefixed_launcher_lines_and_process_group_from_the_status_line() -> None:
    r = watchdog("torch24_pid_prefix_pg1_last_enqueued.log")
    f = r.facts
    assert (f["op"], f["seq"], f["timeout_ms"], f["ranks"], f["pg"]) == ("ALLREDUCE", 2291, 600000, [2, 6], "1")
    t = [e for e in f["events"] if e["kind"] == "nccl_timeout"][0]
    assert (t["rank"], t["last_enqueued"], t["last_completed"]) == (2, 2293, 2290)
    assert r.summary.endswith("on ranks 2, 6 of process group 1")


def test_reduce_scatter_group_size() -> None:
    r = watchdog("torch25_reduce_scatter_three_ranks.log")
    f = r.facts
    assert (f["op"], f["seq"], f["ranks"], f["pg"], f["group_size"]) == ("_REDUCE_SCATTER_BASE", 15310, [1, 2, 6], "1", 8)
    assert r.summary.endswith("of process group 1 (8 ranks in the group)")


def test_groups_stuck_on_different_collectives() -> None:
    r = watchdog("torch26_two_groups_alltoall_allreduce.log")
    assert r.status is Status.FAIL and codes(r) == ["hang.watchdog/several-groups-stuck"]
    assert r.facts["groups"] == [
        {"group": "57", "pg": "9", "pg_guid": "57", "op": "ALLTOALL_BASE", "seq": 388, "ranks": [21, 22]},
        {"group": "61", "pg": "9", "pg_guid": "61", "op": "ALLREDUCE", "seq": 91, "ranks": [30]}]
    assert r.summary.startswith("NCCL watchdog timeouts in 2 process groups: ALLTOALL_BASE SeqNum=388")
    assert "on rank 30 (process group 9 (GUID 61))" in r.summary
    assert r.facts["ranks"] == [21, 22, 30] and r.facts["seqs"] == [91, 388]
    assert "each process group waits" in r.remedy


def test_a_line_without_its_group_joins_the_group_stuck_on_the_same_collective() -> None:
    r = watchdog("wrapped_terminal_100col.log")
    f = r.facts
    assert codes(r) == ["hang.watchdog/collective-timeout"]
    assert (f["op"], f["seq"], f["ranks"], f["pg"], f["pg_guid"], f["group_size"], f["ran_ms"]) == (
        "ALLGATHER", 7077, [0, 3], "2(dp_shard)", "5", 8, 1800101)
    assert "of process group 2 (dp_shard, GUID 5) (8 ranks in the group)" in r.summary


def test_unnamed_lines_at_another_collective_stay_apart() -> None:
    text = ("[rank0]:[E1] [PG ID 1 PG GUID 3 Rank 0] " + WD.format(seq=7) + "\n"
            "[rank0]:[E1] [PG ID 1 PG GUID 3 Rank 0] Exception (either an error or timeout) detected by watchdog at "
            "work: 7, last enqueued NCCL work: 7, last completed NCCL work: 6.\n"
            "[rank1]:[E1] [PG ID 2 PG GUID 4 Rank 0] " + WD.format(seq=9) + "\n"
            "[rank1]:[E1] [PG ID 2 PG GUID 4 Rank 0] Exception (either an error or timeout) detected by watchdog at "
            "work: 9, last enqueued NCCL work: 9, last completed NCCL work: 8.\n"
            "[rank2]:[E1] [Rank 2] " + WD.format(seq=11) + "\n")
    r = watchdog(text=text)
    assert codes(r) == ["hang.watchdog/several-groups-stuck"]
    assert [g["group"] for g in r.facts["groups"]] == ["3", "4", ""]
    assert r.summary.endswith("ALLREDUCE SeqNum=11 (timeout 600000 ms, ran 600011 ms) on rank 2 (unnamed group)")
    assert "in 2 process groups" in r.summary


def test_same_sequence_numbers_in_one_group_are_one_finding() -> None:
    text = "".join(f"[rank{r}]:[E1] [PG ID 0 PG GUID 0(default_pg) Rank {r}] " + WD.format(seq=700) + "\n"
                   for r in range(3))
    r = watchdog(text=text)
    assert codes(r) == ["hang.watchdog/collective-timeout"] and r.facts["ranks"] == [0, 1, 2]
    assert "groups" not in r.facts


def test_status_lines_only() -> None:
    text = ("[rank4]:[E1016 03:31:38.929234295 ProcessGroupNCCL.cpp:1709] [PG 3 Rank 4] Timeout at NCCL work: 9141, "
            "last enqueued NCCL work: 9141, last completed NCCL work: 9140.\n")
    r = watchdog(text=text)
    assert codes(r) == ["hang.watchdog/watchdog-failure"]
    assert r.facts["seq"] == 9141 and r.facts["rank"] == 4 and r.facts["pg"] == "3"
    assert r.summary == "NCCL watchdog failure (error or timeout): collective SeqNum=9141 on rank 4 of process group 3"


@pytest.mark.parametrize("seq, early", [(1, True), (100, True), (101, False), (4117, False)])
def test_early_sequence_numbers_say_a_longer_timeout_cannot_help(seq: int, early: bool) -> None:
    r = watchdog(text="[Rank 0] " + WD.format(seq=seq))
    assert ("a longer timeout cannot help" in r.remedy) is early
    assert r.remedy.startswith(f"SeqNum {seq}: the job had barely started") is early


def test_a_rank_that_never_entered_the_collective_is_named_from_its_dump_signal() -> None:
    text = ("[rank0]:[E1] [Rank 0] " + WD.format(seq=4411) + "\n"
            "[rank1]:[E1] [Rank 1] " + WD.format(seq=4411) + "\n"
            + fixture_text("watchdog/dump_signal_from_rank6.log")
            + "[rank3]:[E1] [PG ID 0 PG GUID 0(default_pg) Rank 3] Received a dump signal due to a collective timeout "
              "from  rank 0 and we will try our best to dump the debug info. Last enqueued NCCL work: 4411, last "
              "completed NCCL work: 4409.\n")
    r = watchdog(text=text)
    assert codes(r) == ["hang.watchdog/collective-timeout"]
    assert r.facts["never_entered"] == [2]
    assert r.summary.endswith("; rank 2 completed every collective it enqueued (last 4410) and never entered it")


def test_dump_signals_of_another_group_are_not_compared() -> None:
    text = ("[rank0]:[E1] [PG ID 3 PG GUID 7 Rank 0] " + WD.format(seq=50) + "\n"
            + fixture_text("watchdog/dump_signal_from_rank6.log").replace("4410", "40"))
    r = watchdog(text=text)
    assert "never_entered" not in r.facts


# ----------------------------------------------------------------------------- dump signals, heartbeat

def test_dump_signal_from_another_rank() -> None:
    r = watchdog("dump_signal_from_rank6.log")
    assert codes(r) == ["hang.watchdog/remote-timeout"]
    assert (r.facts["rank"], r.facts["timed_out_rank"], r.facts["last_enqueued"], r.facts["last_completed"]) == (
        2, 6, 4410, 4410)
    assert r.summary == ("NCCL watchdog: rank 2 stopped on a collective timeout reported by rank 6 (last enqueued work "
                         "4410, last completed 4410)")
    assert "read the log of the rank named" in r.remedy


def test_global_timeout_from_an_unnamed_rank() -> None:
    r = watchdog(text="[PG 0 Rank 3] Received a global timeout from another rank and will start to dump the debug "
                      "info.\n")
    assert codes(r) == ["hang.watchdog/remote-timeout"] and r.facts["timed_out_rank"] is None
    assert r.summary == "NCCL watchdog: rank 3 stopped on a collective timeout reported by another rank"


def test_dump_signal_from_this_rank_is_a_timeout_here() -> None:
    r = watchdog(text="[PG ID 0 PG GUID 0(default_pg) Rank 1] Received a dump signal due to a collective timeout from "
                      "this local rank and we will try our best to dump the debug info. Last enqueued NCCL work: 12, "
                      "last completed NCCL work: 11.\n")
    assert codes(r) == ["hang.watchdog/collective-timeout"]
    assert r.summary == ("NCCL watchdog: a collective timed out on rank 1 (last enqueued work 12, last completed 11)")


@pytest.mark.parametrize("rel, seconds, rank", [("heartbeat_torch23.log", 600, 12), ("heartbeat_torch27.log", 480, 4)])
def test_heartbeat_monitor(rel: str, seconds: int, rank: int) -> None:
    r = watchdog(rel)
    assert codes(r) == ["hang.watchdog/heartbeat-timeout"]
    assert r.facts["heartbeat_timeout_ms"] == seconds * 1000 and r.facts["rank"] == rank
    assert r.summary == (f"the NCCL watchdog thread of rank {rank} was stuck for {seconds} s (heartbeat monitor): a "
                         "CUDA/NCCL call blocked it and the process was terminated")
    assert "GIL" in r.remedy and "Xid" in r.remedy


def test_heartbeat_without_a_duration_and_with_a_timeout() -> None:
    r = watchdog(text="[PG 0 Rank 2] Heartbeat monitor timed out! Process will be terminated after dumping debug info. "
                      "workMetaList_.size()=1\n[Rank 2] " + WD.format(seq=300) + "\n")
    assert codes(r) == ["hang.watchdog/collective-timeout", "hang.watchdog/heartbeat-timeout"]
    assert r.facts["heartbeat_timeout_ms"] is None and r.facts["rank"] == 2
    assert "was stuck (heartbeat monitor)" in r.summary


# ----------------------------------------------------------------------------- desync, mismatch, barrier

def test_desync_report_names_the_lagging_ranks() -> None:
    text = ("[PG 0 Rank 3] \n\t - [3] Timeout at collective: ALLREDUCE, #41207\n"
            "\t   - [47] joined but didn't finish collective #41207 (count from 1)\n"
            "\t     [0, 1, 2] finished collective #41207, but didn't join collective #41208 (count from 1)\n"
            "\t - To our best knowledge, ranks [5] are the lagging ranks that caused this timeout. They never joined "
            "any collectives\n")
    r = watchdog(text=text)
    assert codes(r) == ["hang.watchdog/desync-report"] and r.facts["lagging_ranks"] == [0, 1, 2, 5, 47]
    assert r.summary == ("desync report: rank(s) 47 joined but did not finish collective #41207; rank(s) 0, 1, 2 did "
                         "not join collective #41208; rank(s) 5 never joined any collective")


def test_desync_report_without_lagging_ranks_is_not_a_finding() -> None:
    r = watchdog(text="[Rank 3]\n\t - [3] Timeout at collective: ALLREDUCE, #12\n")
    assert r.status is Status.PASS and codes(r) == []


def test_collective_mismatch_is_an_application_bug() -> None:
    text = ("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: "
            "CollectiveFingerPrint(SequenceNumber=73, OpType=BARRIER), but Rank 1 is running collective: "
            "CollectiveFingerPrint(SequenceNumber=74, OpType=ALLREDUCE).\n")
    r = watchdog(text=text)
    assert codes(r) == ["hang.watchdog/collective-mismatch"] and r.facts["mismatch_ranks"] == [0, 1]
    assert r.summary == ("ranks run different collectives: rank 0 runs BARRIER SequenceNumber=73, rank 1 runs ALLREDUCE "
                         "SequenceNumber=74")
    assert "application bug" in r.remedy
    bare = watchdog(text="RuntimeError: Detected mismatch between collectives on ranks.\n")
    assert bare.summary == "ranks run different collectives: rank None runs a collective"


@pytest.mark.parametrize("text, failed, summary", [
    ("RuntimeError: [Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 30000 ms\n", [1, 3],
     "rank(s) 1, 3 failed to pass monitoredBarrier in 30000 ms"),
    ("RuntimeError: Rank 0 timed out in monitoredBarrier after 5000 ms.\n", [],
     "rank 0 timed out in monitoredBarrier after 5000 ms"),
])
def test_monitored_barrier(text: str, failed: list[int], summary: str) -> None:
    r = watchdog(text=text)
    assert codes(r) == ["hang.watchdog/monitored-barrier"] and r.facts["barrier_failed_ranks"] == failed
    assert r.summary == summary


# ----------------------------------------------------------------------------- errors

def test_nccl_error_without_timeout() -> None:
    text = ("[E ProcessGroupNCCL.cpp:414] [Rank 2] NCCL watchdog thread terminated with exception: NCCL error in: "
            "../torch/csrc/distributed/c10d/NCCLUtils.hpp:121, remote process exited or there was a network error, "
            "NCCL version 2.14.3\n")
    r = watchdog(text=text)
    assert codes(r) == ["hang.watchdog/nccl-error"] and r.facts["rank"] == 2
    assert r.summary == ("NCCL error on rank 2: remote process exited or there was a network error (NCCL 2.14.3)")
    assert r.facts["nccl_errors"] == ["remote process exited or there was a network error (NCCL 2.14.3)"]


def test_nccl_error_and_timeout_are_both_findings() -> None:
    text = ("[Rank 1] " + WD.format(seq=500) + "\n"
            "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n")
    r = watchdog(text=text)
    assert codes(r) == ["hang.watchdog/collective-timeout", "hang.watchdog/nccl-error"] and r.facts["rank"] == 1


def test_aborted_communicator_alone_and_behind_another_failure() -> None:
    alone = watchdog(text="torch.distributed.DistBackendError: NCCL communicator was aborted on rank 6. Original reason "
                          "for failure was: watchdog timeout\n")
    assert codes(alone) == ["hang.watchdog/communicator-aborted"] and alone.facts["rank"] == 6
    assert alone.summary == "NCCL communicator aborted on rank 6: watchdog timeout"
    bare = watchdog(text="RuntimeError: NCCL communicator was aborted on rank 2.\n")
    assert bare.summary == "NCCL communicator aborted on rank 2"
    behind = watchdog(text="[Rank 6] " + WD.format(seq=800) + "\nRuntimeError: NCCL communicator was aborted on rank "
                                                               "6.\n")
    assert codes(behind) == ["hang.watchdog/collective-timeout"]


def test_remote_error_alone() -> None:
    r = watchdog(text="[PG ID 2 PG GUID 9 Rank 1]  remote error detected from rank: 4\n")
    assert codes(r) == ["hang.watchdog/remote-error"]
    assert r.summary == "rank 1 saw an error reported by rank 4" and "rank 4" in r.remedy


def test_watchdog_ended_on_a_cuda_error() -> None:
    r = watchdog(text="[rank4]:[E1] [PG 0 Rank 4] Process group watchdog thread terminated with exception: CUDA error: "
                      "an illegal memory access was encountered\n")
    assert codes(r) == ["hang.watchdog/watchdog-exception"] and r.facts["rank"] == 4
    assert r.summary == ("the NCCL watchdog of rank 4 ended on an exception: CUDA error: an illegal memory access was "
                         "encountered")


def test_some_failed_without_detail() -> None:
    r = watchdog(text="[E ProcessGroupNCCL.cpp:489] Some NCCL operations have failed or timed out. Due to ...\n")
    assert codes(r) == ["hang.watchdog/some-failed"] and r.evidence
    r2 = watchdog(text="[E ProcessGroupNCCL.cpp:489] Some NCCL operations have failed or timed out.\n[Rank 0] "
                       + WD.format(seq=900) + "\n")
    assert codes(r2) == ["hang.watchdog/collective-timeout"]


# ----------------------------------------------------------------------------- gloo, store

def test_gloo_peer_closed_points_at_the_dead_peer() -> None:
    r = watchdog("gloo_peer_closed_and_recv_timeout.log")
    assert codes(r) == ["hang.watchdog/gloo-peer-closed"]
    assert r.facts["op"] == "recv" and r.facts["timeout_ms"] == 1800000 and r.facts["rank"] == 1
    assert r.facts["peers_closed"] == ["10.52.7.31"]
    assert "10.52.7.31" in r.remedy
    assert r.evidence[0].endswith("Connection closed by peer [10.52.7.31]:40277")
    assert r.summary == "gloo recv timed out after 1800000 ms on ranks 1, 2; peer(s) 10.52.7.31 closed the connection"


def test_gloo_timeout_alone() -> None:
    r = watchdog(text="[rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out "
                      "waiting 60000ms for recv operation to complete\n"
                      "[rank1]: [../third_party/gloo/gloo/transport/tcp/pair.cc:575] Application timeout caused pair "
                      "closure\n")
    assert codes(r) == ["hang.watchdog/gloo-timeout"] and r.facts["peers_closed"] == []
    assert r.summary == "gloo recv timed out after 60000 ms on rank 1"


def test_gloo_recv_whose_sender_exited() -> None:
    text = ("Traceback (most recent call last):\n"
            '  File "p2p.py", line 20, in run\n'
            "    dist.recv(tensor=t, src=0)\n"
            "RuntimeError: [/opt/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.5]:29500\n")
    r = watchdog(text=text)
    assert codes(r) == ["hang.watchdog/p2p-sender-exited"] and "not the network" in r.remedy


def test_gloo_with_the_process_that_exited_first() -> None:
    text = ("RuntimeError: [/opt/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.5]:29500\n"
            "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with exit code 1\n"
            "exiting process 3 with exit code: 10\n")
    r = watchdog(text=text)
    assert codes(r) == ["hang.watchdog/gloo-peer-closed"] and r.facts["first_exit"] == {"process": 3, "code": 10}
    assert r.summary.endswith("; process 3 exited first (exit code 10)")


@pytest.mark.parametrize("line", [
    "torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 1/4 clients joined.",
    "[E728 socket.cpp:1028] [c10d] The client socket has timed out after 600000ms while trying to connect to "
    "(10.1.0.7, 29500).",
    "RuntimeError: Timed out initializing process group in store based barrier on rank: 3, for key: "
    "store_based_barrier_key:1 (world_size=8, worker_count=4, timeout=0:30:00)",
])
def test_store_failures(line: str) -> None:
    r = watchdog(text=line + "\n")
    assert codes(r) == ["hang.watchdog/store-failure"]
    assert r.summary.startswith("c10d store / rendezvous failure on ") and "MASTER_ADDR" in r.remedy


# ----------------------------------------------------------------------------- launcher failures

TORCHRUN = ("Traceback (most recent call last):\n"
            '  File "/usr/local/bin/torchrun", line 8, in <module>\n'
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
            "============================================================\n"
            "train.py FAILED\n"
            "------------------------------------------------------------\n"
            "Failures:\n"
            "[1]:\n"
            "  time      : 2025-03-05_09:32:45\n"
            "  host      : gpu-a11\n"
            "  rank      : 2 (local_rank: 2)\n"
            "  exitcode  : -6 (pid: 1804)\n"
            "  error_file: <N/A>\n"
            "  traceback : Signal 6 (SIGABRT) received by PID 1804\n"
            "------------------------------------------------------------\n"
            "Root Cause (first observed failure):\n"
            "[0]:\n"
            "  time      : 2025-03-05_09:32:44\n"
            "  host      : gpu-a11\n"
            "  rank      : 3 (local_rank: 3)\n"
            "  exitcode  : -9 (pid: 1805)\n"
            "  error_file: <N/A>\n"
            "  traceback : Signal 9 (SIGKILL) received by PID 1805\n"
            "============================================================\n")


def test_torchrun_failure_alone_names_the_root_cause() -> None:
    r = watchdog(text=TORCHRUN)
    assert codes(r) == ["hang.watchdog/worker-failed"]
    assert r.facts["torchrun"] == {"rank": 3, "host": "gpu-a11", "exitcode": -9, "signal": "SIGKILL"}
    assert r.summary == ("torchrun: rank 3 on gpu-a11 failed with exitcode -9 (SIGKILL), the OOM killer's signature "
                         "(host memory ran out), or a kill -9 from the scheduler")
    assert "-9 SIGKILL" in r.remedy


def test_torchrun_failure_behind_a_timeout_is_a_fact_only() -> None:
    r = watchdog(text="[rank3]:[E1] [Rank 3] " + WD.format(seq=1200) + "\n" + TORCHRUN)
    assert codes(r) == ["hang.watchdog/collective-timeout"] and r.facts["torchrun"]["rank"] == 3


def test_torchrun_failure_with_the_exception_of_the_rank() -> None:
    text = ("[rank0]: Traceback (most recent call last):\n"
            '[rank0]:   File "train.py", line 9, in <module>\n'
            "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
            + TORCHRUN.replace("  host      : gpu-a11\n  rank      : 3", "  host      : \n  rank      : 3"))
    r = watchdog(text=text)
    assert r.summary == ("torchrun: rank 3 on its host failed with exitcode -9 (SIGKILL): torch.OutOfMemoryError: CUDA "
                         "out of memory. Tried to allocate 2.00 GiB")


def test_spawn_process_that_ended_on_a_signal() -> None:
    r = watchdog(text="torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGABRT\n")
    assert codes(r) == ["hang.watchdog/worker-failed"] and r.summary == "process 1 terminated with signal SIGABRT"
    ok = watchdog(text="torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with exit code 0\n")
    assert ok.status is Status.PASS


def test_recognised_marker_without_a_message_is_not_recognised() -> None:
    r = watchdog(text="torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n(output cut)\n")
    assert r.status is Status.SKIP and codes(r) == ["hang.watchdog/not-recognised"]
    assert r.summary.startswith("not recognised: expected PyTorch watchdog")


# ----------------------------------------------------------------------------- flight recorder

def test_flight_recorder_missing_ranks_colon_wording() -> None:
    r = flight("fr_trace_colon_sequence_missing_4to7.txt")
    assert codes(r) == ["hang.watchdog/fr-missing-ranks"]
    f = r.facts
    assert (f["seq"], f["op"], f["group"], f["missing_ranks"], f["expected_ranks"], f["world_size"]) == (
        20488, "all_reduce", "0:default_pg", [4, 5, 6, 7], list(range(8)), 8)
    assert r.summary == ("flight recorder: ranks 4, 5, 6, 7 did not join all_reduce sequence number 20488 of group "
                         "0:default_pg (expected ranks [0, 1, 2, 3, 4, 5, 6, 7])")


def test_flight_recorder_missing_rank_entry_wording() -> None:
    r = flight("torchfrtrace_at_entry_missing_rank2.txt")
    assert (r.facts["seq"], r.facts["missing_ranks"], r.facts["world_size"]) == (7, [2], 4)
    assert r.summary == ("flight recorder: rank 2 did not join broadcast sequence number 7 of group 0:default_pg "
                         "(world size 4)")


def test_flight_recorder_missing_without_sizes_or_group() -> None:
    r = flight(text="Not all ranks joining collective, sequence number: 3\nmissing ranks: {1}\n")
    assert r.summary == "flight recorder: rank 1 did not join the collective sequence number 3"
    r2 = flight(text="Not all ranks joining collective for group 0:pg collective nccl:barrier  Missing ranks are {2}")
    assert r2.summary == "flight recorder: rank 2 did not join barrier of group 0:pg"


def test_flight_recorder_state_mismatch_names_the_culprit() -> None:
    r = flight("fr_trace_has_errors_state_mismatch.txt")
    assert codes(r) == ["hang.watchdog/fr-state-mismatch"] and (r.facts["seq"], r.facts["culprit"]) == (12, 3)
    assert r.summary.startswith("flight recorder: all_gather sequence number 12 of group 1:tp has errors (rank 3: "
                                "COLLECTIVE_STATE_MISMATCH")
    assert "never entered" in r.remedy


def test_flight_recorder_type_mismatch_is_an_application_bug() -> None:
    r = flight("fr_trace_has_errors_type_and_size.txt")
    assert codes(r) == ["hang.watchdog/fr-collective-mismatch"] and r.facts["culprits"] == [1, 1]
    assert "application bug" in r.remedy
    old = flight("fr_trace_old_entry_errors.txt")
    assert codes(old) == ["hang.watchdog/fr-collective-mismatch"] and old.facts["culprit"] == 1


def test_flight_recorder_size_mismatch_and_errors_without_culprits() -> None:
    r = flight(text="Input/output mismatch in the collective sequence number: 31\ncollective: nccl:all_to_all\n")
    assert codes(r) == ["hang.watchdog/fr-collective-mismatch"]
    assert r.summary == ("flight recorder: all_to_all sequence number 31 has errors (input/output sizes do not add up "
                         "across ranks)")
    bare = flight(text="Collective sequence number: 5 has errors\n")
    assert bare.summary == "flight recorder: the collective sequence number 5 has errors (errors)"
    assert bare.facts["culprit"] is None


def test_flight_recorder_undecided_is_a_warning() -> None:
    r = flight("fr_trace_undecided_missing_dumps.txt")
    assert r.status is Status.WARN and codes(r) == ["hang.watchdog/fr-dumps-missing"]
    assert r.facts["no_dump_ranks"] == [6, 7]
    assert r.summary == "flight recorder: no dump from ranks 6, 7, fr_trace could not decide"
    assert "flight recorder: fr_trace found no mismatch in a collective" in r.evidence
    none = flight(text="AssertionError: Missing dump files from ranks set()\n")
    assert none.summary == "flight recorder: dumps are missing, fr_trace could not decide"


def test_flight_recorder_no_errors_alone_passes() -> None:
    r = flight(text="No errors found for this collective entry, There could be some other reasons why we see "
                    "collective timeout.\n")
    assert r.status is Status.PASS and r.summary == "flight recorder: fr_trace found no mismatch"


def test_side_by_side_rank_behind_and_all_equal() -> None:
    rows = "all_reduce(input_sizes=[[8]], state=scheduled)"
    text = (f"Rank 0{' ' * 44}Rank 1\n{'-' * 48}  {'-' * 48}\n" + f"{rows}   {rows}\n" * 2 + f"{rows}\n")
    r = flight(text=text)
    assert codes(r) == ["hang.watchdog/fr-rank-behind"]
    assert (r.facts["entries"], r.facts["behind"]) == ({0: 3, 1: 2}, [1])
    assert r.summary == f"flight recorder: rank 1 entered 2 collective(s), rank 0 3: the next one ({rows}) was never joined"
    equal = flight(text=f"Rank 0{' ' * 44}Rank 1\n" + f"{rows}   {rows}\n" * 2)
    assert equal.status is Status.PASS and equal.summary == "flight recorder: all 2 rank(s) entered the same collectives"
    assert equal.facts["ranks"] == [0, 1]


def test_log_and_flight_recorder_together() -> None:
    [r] = grade("hang.watchdog", {"watchdog-log": capture("watchdog-log", "[Rank 0] " + WD.format(seq=4000)),
                                  "fr-trace": capture("fr-trace", fixture_text(
                                      "flight-recorder/torchfrtrace_at_entry_missing_rank2.txt"))}, mode="analyze")
    assert codes(r) == ["hang.watchdog/collective-timeout", "hang.watchdog/fr-missing-ranks"]
    assert r.facts["seq"] == 4000 and r.facts["missing_ranks"] == [2]


def test_no_input_is_skipped() -> None:
    [r] = grade("hang.watchdog", {}, mode="analyze")
    assert r.status is Status.SKIP


# ----------------------------------------------------------------------------- helpers, robustness

@pytest.mark.parametrize("op, numel_in, numel_out, size", [
    ("_ALLGATHER_BASE", 19008, 152064, 8), ("ALLGATHER", 8, 64, 8), ("ALLGATHER_INTO_TENSOR_COALESCED", 2, 8, 4),
    ("_REDUCE_SCATTER_BASE", 544997376, 68124672, 8), ("REDUCE_SCATTER", 64, 8, 8),
    ("ALLREDUCE", 4, 4, None), ("ALLGATHER", 8, 8, None), ("ALLGATHER", 3, 8, None), ("ALLGATHER", 0, 8, None),
    ("ALLGATHER", 8, None, None), ("allgather", 2, 4, 2),
])
def test_group_size(op: str, numel_in: int, numel_out: int | None, size: int | None) -> None:
    from preflight.checks.hang import group_size

    assert group_size(HangEvent("nccl_timeout", op=op, numel_in=numel_in, numel_out=numel_out)) == size


def test_many_ranks_are_counted_not_listed() -> None:
    text = "".join(f"[rank{r}]:[E1] [Rank {r}] " + WD.format(seq=5000) + "\n" for r in range(16))
    r = watchdog(text=text)
    assert "ranks 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 (+4 more)" in r.summary


def test_unknown_rank_is_said() -> None:
    r = watchdog(text=WD.format(seq=5000))
    assert r.summary.endswith("on unknown rank") and r.facts["ranks"] == []


@pytest.mark.parametrize("text", ["", "step 1 loss 2.0\n", "\x00\x01", "Watchdog caught collective operation timeout",
                                  "WorkNCCL(SeqNum=abc, OpType=, Timeout(ms)=x"])
def test_garbage_never_raises(text: str) -> None:
    r = watchdog(text=text)
    assert r.status in (Status.PASS, Status.FAIL, Status.SKIP) and r.summary


def test_detector_is_specific(registry) -> None:  # noqa: ANN001
    from preflight.analyze import classify
    from preflight.framing import Doc

    names = {f.name for f in classify(Doc(fixture_text("watchdog/gloo_peer_closed_and_recv_timeout.log")), registry)}
    assert "watchdog-log" in names
    for rel in ("heartbeat_torch23.log", "dump_signal_from_rank6.log", "wrapped_terminal_100col.log"):
        assert "watchdog-log" in {f.name for f in classify(Doc(fixture_text(f"watchdog/{rel}")), registry)}, rel
    plain = ("[rank0]:[W305 ProcessGroupNCCL.cpp:4561] using GPU 0 to perform barrier\nstep 1 loss 3.2\n"
             "[PG ID 0 PG GUID 0 Rank 0] NCCL Work update periodically: last enqueued NCCL work: 5, last completed "
             "NCCL work: 5.\n")
    assert "watchdog-log" not in {f.name for f in classify(Doc(plain), registry)}


def test_torch_log_reexports_the_hang_reader() -> None:
    assert torch_log.parse_hang_log("[Rank 1] " + WD.format(seq=3)).events[0].seq == 3


# ----------------------------------------------------------------------------- the policy table

def _table() -> dict:
    table = tomllib.loads((ROOT / "checks" / "policy.toml").read_text(encoding="utf-8"))
    return {k: v for k, v in table.items() if k.startswith("hang.watchdog/")}


def test_every_code_the_grader_names_is_in_the_table_and_every_entry_is_used() -> None:
    source = "".join((ROOT / "checks" / n).read_text(encoding="utf-8")
                     for n in ("hang.py", "hang_fr.py", "hang_elastic.py", "hang_ras.py"))
    named = {"hang.watchdog/" + c for c in re.findall(r'C \+ "([a-z0-9-]+)"', source)}
    named |= set(re.findall(r'"(hang\.watchdog/[a-z0-9-]+)"', source))
    # Findings.unread("hang.watchdog", ...) names hang.watchdog/unread-error
    named |= {f"{c}/unread-error" for c in re.findall(r'\.unread\(\s*"(hang\.watchdog)"', source)}
    table = set(_table())
    assert named == table


def test_table_entries_are_complete() -> None:
    for code, entry in _table().items():
        assert set(entry) == {"status", "means", "reason", "source"}, code
        assert entry["status"] in ("pass", "warn", "fail", "skip", "error"), code


# ----------------------------------------------------------------------------- details the summaries rely on

def test_collective_ops_with_coalesced_names() -> None:
    from preflight.checks.hang import group_size

    assert group_size(HangEvent("t", op="ALLGATHER_COALESCED", numel_in=4, numel_out=16)) == 4
    assert group_size(HangEvent("t", op="REDUCE_SCATTER_TENSOR_COALESCED", numel_in=16, numel_out=4)) == 4


def test_facts_keys_and_evidence_of_the_first_collective() -> None:
    r = watchdog("torch25_allreduce_timeout_rank3_missing.log")
    assert any("failure detected by watchdog at work sequence id: 4117" in e for e in r.evidence)
    beat = watchdog("heartbeat_torch23.log")
    assert {k: beat.facts[k] for k in ("op", "seq", "timeout_ms", "ran_ms")} == dict.fromkeys(
        ("op", "seq", "timeout_ms", "ran_ms"))
    groups = watchdog("torch26_two_groups_alltoall_allreduce.log")
    assert (groups.facts["pg"], groups.facts["pg_guid"], groups.facts["rank"]) == ("9", "61", 30)


def test_lowest_rank_first_and_a_rank_less_line_last() -> None:
    text = (WD.format(seq=70) + "\n" + "[rank1]:[E1] [Rank 1] " + WD.format(seq=70) + "\n"
            + "[rank0]:[E1] [Rank 0] " + WD.format(seq=70) + "\n")
    r = watchdog(text=text)
    assert r.facts["rank"] == 0 and r.facts["ranks"] == [0, 1]


@pytest.mark.parametrize("dump, named", [
    ("Last enqueued NCCL work: 4410, last completed NCCL work: 4410.", True),
    ("Last enqueued NCCL work: 4411, last completed NCCL work: 4410.", False),
    ("Last enqueued NCCL work: 4411, last completed NCCL work: 4411.", False),
    ("", False),
])
def test_never_entered_needs_an_idle_rank_below_the_stuck_work(dump: str, named: bool) -> None:
    text = ("[rank0]:[E1] [Rank 0] " + WD.format(seq=4411) + "\n"
            "[rank2]:[E1] [PG 0 Rank 2] Received a dump signal due to a collective timeout from  rank 0 and we will "
            "try our best to dump the debug info. " + dump + "\n")
    r = watchdog(text=text)
    assert ("never_entered" in r.facts) is named


def test_a_stuck_rank_is_never_named_as_one_that_never_entered() -> None:
    text = ("[rank0]:[E1] [Rank 0] " + WD.format(seq=4411) + "\n"
            "[rank0]:[E1] [PG 0 Rank 0] Received a dump signal due to a collective timeout from this local rank and we "
            "will try our best to dump the debug info. Last enqueued NCCL work: 4400, last completed NCCL work: 4400.\n")
    assert "never_entered" not in watchdog(text=text).facts


def test_remedies_name_the_kind_of_fault() -> None:
    mismatch = watchdog(text="Detected mismatch between collectives on ranks. Rank 0 is running collective: "
                             "CollectiveFingerPrint(OpType=BARRIER), but Rank 1 is running collective: "
                             "CollectiveFingerPrint(OpType=ALLREDUCE).\n")
    assert mismatch.remedy.startswith("an application bug, not the hardware: the ranks issued different collectives")
    err = watchdog(text="NCCL error in: x.cpp:1, unhandled system error, NCCL version 2.21.5\n")
    assert err.remedy.startswith("a peer exited or the network failed: check the other ranks' logs")
    assert err.summary == "NCCL error on unknown rank: unhandled system error (NCCL 2.21.5)"
    spawn = watchdog(text="torch.multiprocessing.spawn.ProcessExitedException: process 2 terminated with exit code 1\n")
    assert spawn.summary == "process 2 terminated with exit code 1"
    assert spawn.remedy == "read that process's log for the error that ended it"
    some = watchdog(text="Some NCCL operations have failed or timed out.\n")
    assert some.summary == "NCCL operations failed or timed out (no detail line in the log)"
    [none] = grade("hang.watchdog", {}, mode="analyze")
    assert none.summary == "no training log, flight-recorder output or NCCL RAS status to grade"
    ok = watchdog(text="torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with exit code 0\n")
    assert ok.summary == "no collective timeout or job failure in the log"


def test_gloo_closed_keeps_the_nccl_timeouts_facts_and_lists_every_peer() -> None:
    text = ("[Rank 0] " + WD.format(seq=600) + "\n"
            "RuntimeError: [/opt/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.5]:29500\n"
            "RuntimeError: [/opt/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.7]:29500\n")
    r = watchdog(text=text)
    assert (r.facts["op"], r.facts["timeout_ms"], r.facts["peers_closed"]) == ("ALLREDUCE", 600000,
                                                                                ["10.0.0.5", "10.0.0.7"])
    assert "peer(s) 10.0.0.5, 10.0.0.7 closed the connection" in r.summary


def test_p2p_remedy_and_torchrun_evidence() -> None:
    text = ("Traceback (most recent call last):\n"
            "    dist.recv(tensor=t, src=0)\n"
            "RuntimeError: [/opt/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.5]:29500\n")
    assert watchdog(text=text).remedy.startswith("an application bug in point-to-point communication, not the network")
    oom = ("[rank0]: Traceback (most recent call last):\n"
           '[rank0]:   File "train.py", line 9, in <module>\n'
           "[rank0]: torch.OutOfMemoryError: CUDA out of memory.\n" + TORCHRUN)
    r = watchdog(text=oom)
    assert r.evidence[0] == "torch.OutOfMemoryError: CUDA out of memory."  # the error first: it proves the failure
    assert r.evidence[1] == "time      : 2025-03-05_09:32:44"


def test_flight_recorder_remedies_and_several_culprits() -> None:
    r = flight("fr_trace_has_errors_type_and_size.txt")
    assert r.remedy.startswith("the ranks called different collectives (type, sizes or dtypes)")
    assert "; rank 1: SIZE_OR_SYNTAX_MISMATCH (Expected input sizes" in r.summary
    assert flight("fr_trace_colon_sequence_missing_4to7.txt").remedy.startswith(
        "the named rank(s) never entered that collective")
    assert flight("fr_trace_undecided_missing_dumps.txt").remedy.startswith("ranks without a dump died or hung")


def test_more_remedies_and_summaries_pinned() -> None:
    assert watchdog("torch26_two_groups_alltoall_allreduce.log").remedy.startswith("each process group waits for its "
                                                                                   "own missing peer")
    two = watchdog("torch26_two_groups_alltoall_allreduce.log").summary
    assert "(process group 9 (GUID 57)); ALLREDUCE SeqNum=91" in two
    desync = watchdog(text="\t - To our best knowledge, ranks [5] are the lagging ranks that caused this timeout.\n")
    assert desync.remedy.startswith("the desync report names the lagging ranks: read their logs")
    barrier = watchdog(text="RuntimeError: Rank 1 failed to pass monitoredBarrier in 2000 ms\n")
    assert barrier.remedy.startswith("the named ranks never reached the barrier")
    exc = watchdog(text="[Rank 4] NCCL watchdog thread terminated with exception: unknown\n")
    assert exc.remedy.startswith("the watchdog stopped the process on this error")
    store = watchdog(text="RuntimeError: Socket Timeout\n")
    assert store.remedy.startswith("the ranks never all met at start-up") and store.facts["store"] == (
        "RuntimeError: Socket Timeout")
    remote = watchdog("dump_signal_from_rank6.log")
    assert remote.remedy.startswith("this rank was taken down because another rank's collective timed out")
    aborted = watchdog(text="RuntimeError: NCCL communicator was aborted on rank 2.\n")
    assert aborted.remedy.startswith("a consequence of a failure elsewhere")
    assert watchdog(text=TORCHRUN).remedy.startswith("the job failed on this rank first")
    p2p = watchdog(text="    dist.recv(tensor=t, src=0)\nRuntimeError: [/g/gloo/tcp/pair.cc:1] Connection closed by peer "
                        "[10.0.0.5]:29500\n")
    assert p2p.summary.endswith("; inside a point-to-point receive: the sending process exited before the receive "
                                "completed")


def test_a_timeout_without_ran_for_and_the_other_seqs_listed() -> None:
    r = watchdog(text="[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5000, OpType=ALLREDUCE, "
                      "Timeout(ms)=600000)\n[Rank 1] " + WD.format(seq=5001) + "\n[Rank 2] " + WD.format(seq=5002))
    assert r.summary.startswith("NCCL watchdog timeout: ALLREDUCE SeqNum=5000 (timeout 600000 ms) on rank 0")
    assert r.summary.endswith("2 more timeout line(s) at later/other SeqNum 5001, 5002")


def test_twelve_ranks_are_all_named() -> None:
    text = "".join(f"[rank{r}]:[E1] [Rank {r}] " + WD.format(seq=5000) + "\n" for r in range(12))
    assert watchdog(text=text).summary.endswith("on ranks 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11")


def test_group_size_is_an_integer() -> None:
    from preflight.checks.hang import group_size

    size = group_size(HangEvent("t", op="ALLGATHER", numel_in=8, numel_out=64))
    assert size == 8 and isinstance(size, int)


def test_heartbeat_rank_from_the_line_that_names_it() -> None:
    text = ("[default0]:[E ProcessGroupNCCL.cpp:1181] No PGNCCL's watchdog heartbeat detected, so we are dumping debug "
            "info.\n[default0]:[F ProcessGroupNCCL.cpp:1196] [Rank 6] NCCL monitor thread timeout. Basically\n")
    r = watchdog(text=text)
    assert r.facts["rank"] == 6 and "of rank 6 was stuck" in r.summary
    only = watchdog(text="[default3]:[E ProcessGroupNCCL.cpp:1181] No PGNCCL's watchdog heartbeat detected, so we are "
                         "dumping debug info.\n")
    assert only.facts["rank"] == 3


def test_a_status_line_makes_a_dump_signal_a_detail() -> None:
    text = ("[PG 3 Rank 4] Timeout at NCCL work: 9141, last enqueued NCCL work: 9141, last completed NCCL work: 9140.\n"
            + fixture_text("watchdog/dump_signal_from_rank6.log"))
    assert codes(watchdog(text=text)) == ["hang.watchdog/watchdog-failure"]


def test_default_group_by_guid_compares_dump_signals() -> None:
    text = ("[rank0]:[E1] [PG ID 0 PG GUID 0(default_pg) Rank 0] " + WD.format(seq=4411) + "\n"
            + fixture_text("watchdog/dump_signal_from_rank6.log"))
    assert watchdog(text=text).facts["never_entered"] == [2]


@pytest.mark.parametrize("extra, groups", [
    ("[rank5]:[E1] [Rank 5] " + WD.format(seq=7) + "\n", ["3", "4"]),  # joins group 3 (SeqNum 7, ALLREDUCE)
    ("[rank5]:[E1] [Rank 5] " + WD.format(seq=7).replace("ALLREDUCE", "BROADCAST") + "\n", ["3", "4", ""]),
])
def test_a_line_without_a_group_joins_only_a_group_stuck_on_the_same_op(extra: str, groups: list[str]) -> None:
    text = ("[rank0]:[E1] [PG ID 1 PG GUID 3 Rank 0] " + WD.format(seq=7) + "\n"
            "[rank1]:[E1] [PG ID 2 PG GUID 4 Rank 0] " + WD.format(seq=9) + "\n" + extra)
    assert [g["group"] for g in watchdog(text=text).facts["groups"]] == groups


def test_a_line_matching_two_groups_stays_unnamed() -> None:
    text = ("[rank0]:[E1] [PG ID 1 PG GUID 3 Rank 0] " + WD.format(seq=7) + "\n"
            "[rank1]:[E1] [PG ID 2 PG GUID 4 Rank 0] " + WD.format(seq=7) + "\n"
            "[rank5]:[E1] [Rank 5] " + WD.format(seq=7) + "\n")
    assert [g["group"] for g in watchdog(text=text).facts["groups"]] == ["3", "4", ""]


def test_log_without_findings_and_an_equal_side_by_side() -> None:
    rows = "all_reduce(input_sizes=[[8]], state=scheduled)"
    [r] = grade("hang.watchdog", {"watchdog-log": capture("watchdog-log", "process 1 terminated with exit code 0\n"),
                                  "fr-trace": capture("fr-trace", f"Rank 0{' ' * 44}Rank 1\n{rows}   {rows}\n")},
                mode="analyze")
    assert r.status is Status.PASS and r.summary == ("no collective timeout or job failure in the log; flight "
                                                     "recorder: all 2 rank(s) entered the same collectives")
    assert r.facts["rank"] is None


def test_store_opened_nowhere_is_a_store_failure() -> None:
    r = watchdog(text="torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
                      "address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use\n")
    assert codes(r) == ["hang.watchdog/store-failure"] and "a port another job holds" in r.remedy


def test_store_failure_summary_quotes_the_raised_error() -> None:
    r = watchdog(text="[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98).\n"
                      "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
                      "address. port: 29500, code: -98, name: EADDRINUSE\n")
    assert r.summary.endswith("name: EADDRINUSE") and r.facts["store"].startswith("The server socket has failed to listen")


def test_gloo_enforce_fail_names_the_size_mismatch() -> None:
    r = watchdog(text="[rank1]: RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:446] "
                      "op.preamble.length <= op.nbytes. 8773632 vs 8386560\n")
    assert codes(r) == ["hang.watchdog/gloo-error"] and r.facts["rank"] == 1
    assert r.summary == "gloo check failed on rank 1: op.preamble.length <= op.nbytes. 8773632 vs 8386560"
    assert r.remedy.startswith("the ranks passed tensors of different sizes")
    other = watchdog(text="RuntimeError: [enforce fail at /g/gloo/allreduce.cc:9] context->size > 1\n")
    assert other.remedy.startswith("gloo's own consistency check failed")


# ----------------------------------------------------------------------------- the store's server gone

GONE = ('[rank1]:[W1229 22:06:38.480071392 ProcessGroupNCCL.cpp:1662] [PG ID 0 PG GUID 0 Rank 1] Failed to check the '
        '"should dump" flag on TCPStore, (maybe TCPStore server has shut down too early), with error: Broken pipe\n'
        '[rank1]:[W1229 22:06:38.558655037 TCPStore.cpp:106] [c10d] sendBytes failed on SocketImpl(fd=67, '
        'addr=[bogon]:36214, remote=[bogon]:43145): Broken pipe\n')


def test_a_rank_that_lost_the_store_warns_and_names_where_to_look() -> None:
    r = watchdog(text=GONE)
    assert r.status is Status.WARN and codes(r) == ["hang.watchdog/store-gone"]
    assert r.summary == "rank 1 lost the c10d store (its server process went away): Broken pipe"
    assert r.evidence[0].endswith("with error: Broken pipe") and len(r.evidence) == 2
    assert r.remedy.startswith("the process that hosts the store (rank 0's, or the launcher's) exited")


@pytest.mark.parametrize(("line", "why"), [
    ("[rank3]:[W ProcessGroupNCCL.cpp:1251] [PG 0 Rank 3] Failed to get the \"should dump\" flag on TCPStore, "
     "(maybe TCPStore server has shut down too early), with error: Connection reset by peer", "Connection reset by peer"),
    ("[rank3]:[W socket.cpp:470] [c10d] recvBytes failed on SocketImpl(fd=5, addr=[n1]:1, remote=[n0]:29500): "
     "Connection reset by peer", "Connection reset by peer"),
    ("[rank3]:[W ProcessGroupNCCL.cpp:1251] [PG 0 Rank 3] Failed to check the \"should dump\" flag on TCPStore, "
     "(maybe TCPStore server has shut down too early)", ""),
])
def test_store_gone_variants(line: str, why: str) -> None:
    r = watchdog(text=line + "\n")
    assert codes(r) == ["hang.watchdog/store-gone"] and "rank 3 lost the c10d store" in r.summary
    assert r.summary.endswith(f": {why}" if why else "(its server process went away)")


def test_a_lost_store_beside_a_real_failure_is_only_its_evidence() -> None:
    timeout = ("[rank1]:[E ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation timeout: "
               "WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600004 "
               "milliseconds before timing out.\n")
    r = watchdog(text=timeout + GONE)
    assert "hang.watchdog/store-gone" not in codes(r) and r.status is Status.FAIL


def test_ranks_at_one_seqnum_in_different_collectives_are_a_mismatch() -> None:
    t = ("[rank7]:[E816 01:45:40.183009389 ProcessGroupNCCL.cpp:607] [Rank 7] Watchdog caught collective operation "
         "timeout: WorkNCCL(SeqNum=80078, OpType=BROADCAST, NumelIn=5056, NumelOut=5056, Timeout(ms)=600000) ran for "
         "600026 milliseconds before timing out.\n"
         "[rank3]:[E816 01:45:40.212150935 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation "
         "timeout: WorkNCCL(SeqNum=80078, OpType=ALLREDUCE, NumelIn=2106881, NumelOut=2106881, Timeout(ms)=600000) "
         "ran for 600013 milliseconds before timing out.\n")
    r = watchdog(text=t)
    assert codes(r) == ["hang.watchdog/collective-timeout", "hang.watchdog/timeouts-differ-in-collective"]
    assert r.summary.startswith("NCCL watchdog timeout: collectives SeqNum=80078 (timeout 600000 ms, ran 600013 ms) "
                                "on ranks 3, 7")
    assert "ranks at SeqNum 80078 wait in different collectives: rank 3 in ALLREDUCE; rank 7 in BROADCAST" in r.summary
    assert r.facts["ops_at_seq"] == {"BROADCAST": [7], "ALLREDUCE": [3]}
    same = t.replace("OpType=BROADCAST", "OpType=ALLREDUCE")
    r = watchdog(text=same)
    assert codes(r) == ["hang.watchdog/collective-timeout"] and r.summary.startswith("NCCL watchdog timeout: ALLREDUCE")
