"""preflight.parsers.torch_hang: every PyTorch hang message, wrapped lines, ranks and groups."""

from __future__ import annotations

import pytest

from preflight.framing import frame
from preflight.parsers import torch_hang, torch_log
from preflight.parsers.torch_hang import HangEvent, parse_hang_log
from tests.conftest import fixture_text

WD = ("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLGATHER, NumelIn=8, NumelOut=64, "
      "Timeout(ms)=60000) ran for 60011 milliseconds before timing out.")


def events(text: str) -> list[HangEvent]:
    return parse_hang_log(text).events


def framed(text: str) -> list[HangEvent]:
    """Through the framing layer, as analyze reads it (launcher tags peeled into the rank hint)."""
    doc = frame(text).docs[0]
    return torch_log.parse(doc).hang.events


def one(text: str) -> HangEvent:
    [ev] = events(text)
    return ev


# ----------------------------------------------------------------------------- watchdog timeouts

@pytest.mark.parametrize("line, rank, group_rank, pg, guid", [
    ("[E ProcessGroupNCCL.cpp:475] [Rank 5] " + WD, 5, 5, "", ""),
    ("[rank3]:[E1105 10:00:00.1 ProcessGroupNCCL.cpp:616] [Rank 3] " + WD, 3, 3, "", ""),
    ("[PG 0 (default_pg) Rank 5] " + WD, 5, 5, "0(default_pg)", ""),
    ("[PG 3 Rank 5] " + WD, 5, 5, "3", ""),
    ("[rank9]:[E1105 10:00:00.1 ProcessGroupNCCL.cpp:632] [PG ID 2 PG GUID 7(tp) Rank 1] " + WD, 9, 1, "2(tp)", "7"),
    ("[rank21]:[E1 ProcessGroupNCCL.cpp:1] [PG ID 11 PG GUID 119 Rank 1] " + WD, 21, 1, "11", "119"),
    (" 2025-02-18 12:54 [rank13]:[E218 04:54:22.864467604 ProcessGroupNCCL.cpp:616] [Rank 1] " + WD, 13, 1, "", ""),
    ("[80746] [rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] " + WD, 0, 0, "", ""),
    (WD + " [Rank 4]", 4, 4, "", ""),
])
def test_timeout_ranks_and_groups(line: str, rank: int, group_rank: int, pg: str, guid: str) -> None:
    ev = one(line)
    assert (ev.kind, ev.rank, ev.group_rank, ev.pg, ev.pg_guid) == ("nccl_timeout", rank, group_rank, pg, guid)
    assert (ev.op, ev.seq, ev.numel_in, ev.numel_out, ev.timeout_ms, ev.ran_ms) == ("ALLGATHER", 12, 8, 64, 60000, 60011)
    assert ev.line == line.strip()


@pytest.mark.parametrize("work, op, seq, numel, timeout, ran", [
    ("WorkNCCL(SeqNum=469508, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802212 milliseconds", "ALLREDUCE",
     469508, None, 1800000, 1802212),
    ("WorkNCCL(OpType=BROADCAST, TensorShape=[3, 4], Timeout(ms)=1800000) ran for 1804406 milliseconds", "BROADCAST",
     None, None, 1800000, 1804406),
    ("WorkNCCL(OpType=_ALLGATHER_BASE) ran for 600069 ms", "_ALLGATHER_BASE", None, None, None, 600069),
    ("WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000)", "ALLREDUCE", 5, 1, 600000,
     None),
    ("WorkNCCL(SeqNum=abc, OpType=, Timeout(ms)=x", "", None, None, None, None),
])
def test_timeout_every_work_layout(work: str, op: str, seq: int | None, numel: int | None, timeout: int | None,
                                   ran: int | None) -> None:
    ev = one(f"[Rank 2] Watchdog caught collective operation timeout: {work} before timing out.")
    assert (ev.op, ev.seq, ev.numel_in, ev.timeout_ms, ev.ran_ms, ev.rank) == (op, seq, numel, timeout, ran, 2)


@pytest.mark.parametrize("line", [
    "[Rank 0] Caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=BARRIER, Timeout(ms)=10000) ran for "
    "10013 milliseconds before timing out.",
    "[Rank 0] Work WorkNCCL(SeqNum=9, OpType=BARRIER, Timeout(ms)=10000) timed out in blocking wait "
    "(TORCH_NCCL_BLOCKING_WAIT=1).",
    "[Rank 0] Work WorkNCCL(SeqNum=9, OpType=BARRIER, Timeout(ms)=10000) timed out in call to wait().",
])
def test_blocking_wait_timeouts(line: str) -> None:
    ev = one(line)
    assert (ev.kind, ev.rank, ev.op, ev.seq, ev.timeout_ms) == ("nccl_timeout", 0, "BARRIER", 9, 10000)


def test_the_exception_quoting_the_timeout_is_not_a_second_event() -> None:
    text = ("[rank2]:[E305 ProcessGroupNCCL.cpp:632] [Rank 2] " + WD + "\n"
            "terminate called after throwing an instance of 'c10::DistBackendError'\n"
            "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 2] Process group watchdog thread terminated with "
            "exception: [Rank 2] " + WD + "\n")
    [ev] = events(text)
    assert ev.rank == 2
    sub = ("[rank13]:[E1 ProcessGroupNCCL.cpp:616] [Rank 1] " + WD + "\n"
           "  what():  [PG ID 4 PG GUID 40 Rank 1] Process group watchdog thread terminated with exception: [Rank 1] "
           + WD + "\n")
    assert [(e.rank, e.group_rank) for e in events(sub)] == [(13, 1)]


def test_the_same_group_rank_of_two_global_ranks_is_two_events() -> None:
    text = ("[rank9]:[E1 ProcessGroupNCCL.cpp:616] [Rank 1] " + WD + "\n"
            "[rank1]:[E1 ProcessGroupNCCL.cpp:616] [Rank 1] " + WD + "\n")
    assert [(e.rank, e.group_rank) for e in events(text)] == [(9, 1), (1, 1)]


def test_the_exception_names_the_group_of_its_outer_tag() -> None:
    line = ("terminate called: [PG 3 Rank 5] Process group watchdog thread terminated with exception: [Rank 5] " + WD)
    ev = one(line)
    assert (ev.rank, ev.group_rank, ev.pg) == (5, 5, "3")


# ----------------------------------------------------------------------------- status lines

@pytest.mark.parametrize("line, seq, enq, done, pg, guid", [
    ("[PG 0 Rank 5] Timeout at NCCL work: 88232, last enqueued NCCL work: 88232, last completed NCCL work: 88231.",
     88232, 88232, 88231, "0", ""),
    ("[PG 1 Rank 0] Exception (either an error or timeout) detected by watchdog at work: 1580, last enqueued NCCL "
     "work: 1582, last completed NCCL work: 1579.", 1580, 1582, 1579, "1", ""),
    ("[PG ID 0 PG GUID 0(default_pg) Rank 3]  failure detected by watchdog at work sequence id: 7731 PG status: last "
     "enqueued work: 7731, last completed work: 7730", 7731, 7731, 7730, "0(default_pg)", "0"),
    ("[PG ID 1 PG GUID 1 Rank 0] failure detected by watchdog at work sequence id: 57 PG status: last enqueued work: "
     "57, last completed work: 56", 57, 57, 56, "1", "1"),
    ("[PG 2 Rank 0] Exception (either an error or timeout) detected by watchdog at work: 9", 9, None, None, "2", ""),
])
def test_status_lines(line: str, seq: int, enq: int | None, done: int | None, pg: str, guid: str) -> None:
    ev = one(line)
    assert (ev.kind, ev.seq, ev.last_enqueued, ev.last_completed, ev.pg, ev.pg_guid, ev.group_rank) == (
        "nccl_status", seq, enq, done, pg, guid, int(line.split("Rank ")[1].split("]")[0]))


def test_progress_lines_are_not_failures() -> None:
    text = ("[PG ID 0 PG GUID 0(default_pg) Rank 0] NCCL Work update periodically: last enqueued NCCL work: 500, "
            "last completed NCCL work: 500.\n"
            "[rank0]:[W305 ProcessGroupNCCL.cpp:4561] [PG ID 0 PG GUID 0 Rank 0] using GPU 0 to perform barrier\n")
    assert parse_hang_log(text).events == [] and parse_hang_log(text).some_failed == []


def test_status_merged_into_the_timeout_of_the_same_rank_and_work() -> None:
    text = fixture_text("watchdog/torch26_two_groups_alltoall_allreduce.log")
    log = parse_hang_log(text)
    merged = torch_hang.merge_status(log)
    assert [(t.rank, t.group_rank, t.seq, t.op, t.pg, t.pg_guid, t.last_enqueued, t.last_completed) for t in merged] == [
        (21, 5, 388, "ALLTOALL_BASE", "9", "57", 391, 387), (22, 6, 388, "ALLTOALL_BASE", "9", "57", 391, 387),
        (30, 3, 91, "ALLREDUCE", "9", "61", 91, 90)]


def test_merge_keeps_a_timeout_without_its_status_line() -> None:
    log = parse_hang_log("[PG 4 Rank 1] " + WD + "\n[PG 5 Rank 2] Timeout at NCCL work: 13, last enqueued NCCL work: "
                         "13, last completed NCCL work: 12.\n")
    [t] = torch_hang.merge_status(log)
    assert (t.pg, t.last_enqueued, t.last_completed) == ("4", None, None)


# ----------------------------------------------------------------------------- wrapped lines

def test_terminal_wrap_splits_anywhere_and_is_joined() -> None:
    evs = events(fixture_text("watchdog/wrapped_terminal_100col.log"))
    assert [(e.kind, e.rank, e.seq, e.op, e.numel_out, e.timeout_ms, e.ran_ms) for e in evs if e.kind == "nccl_timeout"] \
        == [("nccl_timeout", 3, 7077, "ALLGATHER", 40960, 1800000, 1800093),
            ("nccl_timeout", 0, 7077, "ALLGATHER", 40960, 1800000, 1800101)]
    [s] = [e for e in evs if e.kind == "nccl_status"]
    assert (s.rank, s.pg, s.pg_guid, s.seq, s.last_enqueued, s.last_completed) == (3, "2(dp_shard)", "5", 7077, 7079, 7076)


def test_formatter_wrap_with_indented_continuations() -> None:
    evs = events(fixture_text("watchdog/wrapped_indented_summary.log"))
    assert [(e.kind, e.rank, e.seq, e.op, e.timeout_ms, e.ran_ms, e.last_enqueued, e.last_completed) for e in evs] == [
        ("nccl_timeout", 1, 58, "BROADCAST", 300000, 300041, None, None),
        ("nccl_status", 1, 58, "", None, None, 58, 57)]


def test_wrapped_lines_under_launcher_tags_join_per_rank() -> None:
    text = ("[rank1]: Watchdog caught collective operation timeout:\n"
            "[rank1]:   WorkNCCL(SeqNum=306, OpType=ALLREDUCE, NumelIn=1, NumelOut=1,\n"
            "[rank1]:   Timeout(ms)=600000) ran for 600032 milliseconds before timing out.\n")
    [ev] = framed(text)
    assert (ev.rank, ev.seq, ev.op, ev.timeout_ms, ev.ran_ms) == (1, 306, "ALLREDUCE", 600000, 600032)


def test_another_ranks_line_never_continues_a_message() -> None:
    text = ("[rank1]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE,\n"
            "[rank2]: Timeout(ms)=600000) ran for 600032 milliseconds before timing out.\n")
    [ev] = framed(text)
    assert (ev.rank, ev.seq, ev.timeout_ms, ev.ran_ms) == (1, 3, None, None)


def test_a_new_message_or_a_log_header_ends_a_wrapped_one() -> None:
    text = ("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, Timeout(ms)=600000)\n"
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4, OpType=ALLREDUCE, Timeout(ms)=600000)\n"
            "[E ProcessGroupNCCL.cpp:1] ran for 7 milliseconds before timing out.\n")
    assert [(e.seq, e.ran_ms) for e in events(text)] == [(3, None), (4, None)]


def test_joining_is_bounded() -> None:
    text = "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3,\n" + "x\n" * 20 + "OpType=ALLREDUCE)\n"
    ev = one(text)
    assert ev.seq == 3 and ev.op == "" and ev.line.count("x") == 6


def test_a_short_line_is_not_taken_for_a_cut_one() -> None:
    text = "short line fa\nilure detected by watchdog at work sequence id: 5 PG status: last enqueued work: 5, " \
           "last completed work: 4\n"
    ev = one(text)
    assert ev.line.startswith("ilure") and ev.seq == 5


def test_a_cut_line_without_a_message_is_dropped() -> None:
    text = "x" * 70 + "\n" + "y" * 10 + "\n"
    assert events(text) == []


# ----------------------------------------------------------------------------- heartbeat, dump signals

@pytest.mark.parametrize("line, timeout_ms", [
    ("[PG 0 Rank 12] Heartbeat monitor timed out! Process will be terminated after dumping debug info. "
     "workMetaList_.size()=3", None),
    ("[PG 0 Rank 12] ProcessGroupNCCL's watchdog got stuck for 600 seconds without making progress in monitoring "
     "enqueued collectives.", 600000),
    ("[Rank 12] NCCL monitor thread timeout. Basically, this could be due to CUDA or NCCL calls being unexpectedly "
     "blocking", None),
    ("[Rank 12] monitoring thread detects no heartbeat and will finally kill the process! terminateProcessGroup_0", None),
    ("No PGNCCL's watchdog heartbeat detected, so we are dumping debug info. [Rank 12]", None),
    ("[PG ID 0 PG GUID 0(default_pg) Rank 12] Terminating the process after attempting to dump debug info, due to "
     "ProcessGroupNCCL watchdog hang.", None),
])
def test_heartbeat_monitor_every_wording(line: str, timeout_ms: int | None) -> None:
    ev = one(line)
    assert (ev.kind, ev.rank, ev.timeout_ms) == ("heartbeat", 12, timeout_ms)


def test_heartbeat_stuck_seconds_wrapped() -> None:
    text = ("[PG 0 Rank 1] ProcessGroupNCCL's watchdog got stuck for 4\n80 seconds without making progress\n")
    assert one(text).timeout_ms == 480000


@pytest.mark.parametrize("line, peer, enq, done", [
    ("[PG ID 0 PG GUID 0(default_pg) Rank 0] Received a dump signal due to a collective timeout from this local rank "
     "and we will try our best to dump the debug info. Last enqueued NCCL work: 39892, last completed NCCL work: "
     "39891.This is most likely caused by incorrect usages", "local", 39892, 39891),
    ("[PG ID 0 PG GUID 0(default_pg) Rank 0] Received a dump signal due to a collective timeout from  rank 7 and we "
     "will try our best to dump the debug info. Last enqueued NCCL work: 56116, last completed NCCL work: 56116.", "7",
     56116, 56116),
    ("[PG 0 Rank 0] Received a dump signal from this local rank and will start to dump the debug info. Last enqueued "
     "NCCL work: 3, last completed NCCL work: 2.", "local", 3, 2),
    ("[PG 0 Rank 0] Received a global timeout from another rank and will start to dump the debug info. Last enqueued "
     "NCCL work: 3, last completed NCCL work: 3.", "another rank", 3, 3),
    ("[PG 0 Rank 0] Received a global timeout from another rank and will start to dump the debug info.",
     "another rank", None, None),
    ("[PG ID 0 PG GUID 0 Rank 0] Received a dump signal due to a collective timeout from this local rank and we will "
     "try our best to dump the debug info. Last enqueued XCCL work: 5, last completed XCCL work: 4.", "local", 5, 4),
])
def test_dump_signals(line: str, peer: str, enq: int | None, done: int | None) -> None:
    ev = one(line)
    assert (ev.kind, ev.rank, ev.peer, ev.last_enqueued, ev.last_completed) == ("dump_signal", 0, peer, enq, done)


# ----------------------------------------------------------------------------- desync, mismatch, barrier

def test_desync_report_lines() -> None:
    text = ("[PG 0 Rank 3] \n\t - [3] Timeout at collective: ALLREDUCE, #41207\n"
            "\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:\n"
            "\t   - [47] joined but didn't finish collective #41207 (count from 1)\n"
            "\t     [0, 1, 2] finished collective #41207, but didn't join collective #41208 (count from 1)\n"
            "\t - To our best knowledge, ranks [5, 6] are the lagging ranks that caused this timeout. They never "
            "joined any collectives\n")
    got = [(e.kind, e.rank, e.op, e.seq, e.ranks, e.message) for e in events(text)]
    assert got == [("desync", 3, "ALLREDUCE", 41207, [], "timeout at"),
                   ("desync", None, "", 41207, [47], "joined but did not finish"),
                   ("desync", None, "", 41208, [0, 1, 2], "did not join"),
                   ("desync", None, "", None, [5, 6], "never joined")]


@pytest.mark.parametrize("text, ranks, op, seq, message", [
    ("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: "
     "CollectiveFingerPrint(SequenceNumber=73, OpType=BARRIER), but Rank 1 is running collective: "
     "CollectiveFingerPrint(SequenceNumber=74, OpType=ALLREDUCE, TensorShape=[4], TensorDtypes=Float, "
     "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda)).", [0, 1], "BARRIER", 73,
     "rank 1 runs ALLREDUCE SequenceNumber=74"),
    ("Detected mismatch between collectives on ranks. Rank 3 is running collective: CollectiveFingerPrint(OpType=BARRIER)"
     ", but Rank 0 is running collective: CollectiveFingerPrint(OpType=ALLGATHER_COALESCED).", [3, 0], "BARRIER", None,
     "rank 0 runs ALLGATHER_COALESCED"),
    ("Detected mismatch between collectives on ranks.", [], "", None, ""),
])
def test_collective_mismatch(text: str, ranks: list[int], op: str, seq: int | None, message: str) -> None:
    ev = one(text)
    assert (ev.kind, ev.ranks, ev.op, ev.seq, ev.message) == ("mismatch", ranks, op, seq, message)


def test_mismatch_wrapped_over_lines() -> None:
    text = ("RuntimeError: Detected mismatch between collectives on ranks. Rank 2 is running collective: Collective\n"
            "FingerPrint(SequenceNumber=9, OpType=ALLREDUCE), but Rank 0 is running collective: CollectiveFingerPrint(\n"
            "SequenceNumber=10, OpType=BROADCAST).\n")
    ev = one(text)
    assert (ev.ranks, ev.op, ev.seq, ev.message) == ([2, 0], "ALLREDUCE", 9, "rank 0 runs BROADCAST SequenceNumber=10")


@pytest.mark.parametrize("line, rank, ranks, timeout, message", [
    ("RuntimeError: Rank 1 failed to pass monitoredBarrier in 2000 ms", None, [1], 2000, "failed to pass"),
    ("[Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 30000 ms", None, [1, 3], 30000, "failed to pass"),
    ("Rank 0 timed out in monitoredBarrier after 5000 ms.", 0, [], 5000, "timed out"),
])
def test_monitored_barrier(line: str, rank: int | None, ranks: list[int], timeout: int, message: str) -> None:
    ev = one(line)
    assert (ev.kind, ev.rank, ev.ranks, ev.timeout_ms, ev.message) == ("monitored_barrier", rank, ranks, timeout, message)


# ----------------------------------------------------------------------------- errors

@pytest.mark.parametrize("line, kind, message, rank", [
    ("[Rank 2] NCCL watchdog thread terminated with exception: NCCL error: remote process exited or there was a "
     "network error, NCCL version 2.18.1", "nccl_error", "remote process exited or there was a network error "
     "(NCCL 2.18.1)", 2),
    ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled "
     "system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3", "nccl_error",
     "unhandled system error (run with NCCL_DEBUG=INFO for details) (NCCL 2.19.3)", None),
    ("ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
     "nccl_error", "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
     "prematurely.", None),
    ("[PG 0 Rank 4] Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was "
     "encountered", "watchdog_exception", "CUDA error: an illegal memory access was encountered", 4),
    ("[Rank 4] NCCL watchdog thread terminated with exception: unknown", "watchdog_exception", "unknown", 4),
    ("[Rank 4] NCCL watchdog thread terminated with exception:", "watchdog_exception", "unknown", 4),
    ("RuntimeError: NCCL communicator was aborted on rank 6. Original reason for failure was: NCCL error: unhandled "
     "cuda error", "comm_aborted", "NCCL error: unhandled cuda error", 6),
    ("torch.distributed.DistBackendError: NCCL communicator was aborted on rank 6.", "comm_aborted", "", 6),
    ("[PG ID 2 PG GUID 9 Rank 1]  remote error detected from rank: 4", "remote_error", "", 1),
])
def test_errors(line: str, kind: str, message: str, rank: int | None) -> None:
    ev = one(line)
    assert (ev.kind, ev.message, ev.rank) == (kind, message, rank)


def test_aborted_with_its_reason_and_remote_peer() -> None:
    ev = one("RuntimeError: NCCL communicator was aborted on rank 6. Original reason for failure was: watchdog timeout")
    assert (ev.kind, ev.rank, ev.group_rank, ev.message) == ("comm_aborted", 6, 6, "watchdog timeout")
    assert one("[rank14]: NCCL communicator was aborted on rank 6.").rank == 14
    assert one("[PG ID 2 PG GUID 9 Rank 1]  remote error detected from rank: 4").peer == "4"


def test_an_error_repeated_by_loggers_counts_once() -> None:
    line = "[Rank 2] NCCL watchdog thread terminated with exception: NCCL error: remote process exited, NCCL version 2\n"
    assert len(events(line * 3)) == 1


# ----------------------------------------------------------------------------- gloo and store

@pytest.mark.parametrize("line, kind, op, timeout, peer, message", [
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv "
     "operation to complete", "gloo_timeout", "recv", 1800000, "", ""),
    ("RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting 60000ms for "
     "send operation to complete", "gloo_timeout", "send", 60000, "", ""),
    ("[../third_party/gloo/gloo/transport/tcp/pair.cc:575] Application timeout caused pair closure", "gloo_timeout", "",
     None, "", "Application timeout caused pair closure"),
    ("RuntimeError: [gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.52.7.31]:40277", "gloo_peer_closed",
     "", None, "10.52.7.31", "Connection closed by peer"),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:535] Read error [172.17.0.4]:19345: Connection "
     "reset by peer", "gloo_peer_closed", "", None, "172.17.0.4", "Read error"),
    ("[../third_party/gloo/gloo/transport/tcp/pair.cc:201] Socket unexpectedly closed [fe80::1]:4411",
     "gloo_peer_closed", "", None, "fe80::1", "Socket unexpectedly closed"),
])
def test_gloo(line: str, kind: str, op: str, timeout: int | None, peer: str, message: str) -> None:
    ev = one(line)
    assert (ev.kind, ev.op, ev.timeout_ms, ev.peer, ev.message) == (kind, op, timeout, peer, message)


@pytest.mark.parametrize("line, rank, ranks, timeout, peer", [
    ("torch.distributed.DistStoreError: Timed out after 1201 seconds waiting for clients. 511/512 clients joined.",
     None, [511, 512], 1201000, ""),
    ("[E728 15:01:59.561275187 socket.cpp:1028] [c10d] The client socket has timed out after 600000ms while trying to "
     "connect to (127.0.0.1, 48315).", None, [], None, "127.0.0.1:48315"),
    ("RuntimeError: Timed out initializing process group in store based barrier on rank: 3, for key: "
     "store_based_barrier_key:1 (world_size=8, worker_count=4, timeout=0:30:00)", 3, [4, 8], None, ""),
    ("RuntimeError: Timed out initializing process group in store based barrier on rank 5, for key: "
     "store_based_barrier_key:2 (world_size=16, num_workers_joined=15, timeout=0:30:00)", 5, [15, 16], None, ""),
    ("RuntimeError: Socket Timeout", None, [], None, ""),
    ("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError", None, [], None, ""),
])
def test_store_failures(line: str, rank: int | None, ranks: list[int], timeout: int | None, peer: str) -> None:
    ev = one(line)
    assert (ev.kind, ev.rank, ev.ranks, ev.timeout_ms, ev.peer) == ("store_failure", rank, ranks, timeout, peer)


def test_some_failed_is_kept_apart() -> None:
    log = parse_hang_log("[E ProcessGroupNCCL.cpp:489] Some NCCL operations have failed or timed out. Due to the "
                         "asynchronous nature of CUDA kernels\n")
    assert log.events == [] and len(log.some_failed) == 1


# ----------------------------------------------------------------------------- robustness

@pytest.mark.parametrize("text", ["", "\n\n", "\x00\x01", "[Rank x] Watchdog", "Watchdog caught", "]]][[[",
                                  "WorkNCCL(" * 50, "detected by watchdog at work: x"])
def test_garbage_never_raises(text: str) -> None:
    log = parse_hang_log(text)
    assert all(isinstance(e, HangEvent) for e in log.events)


def test_hang_events_accepts_pairs_and_triples() -> None:
    a = torch_hang.hang_events([("[Rank 1] " + WD, None)])
    b = torch_hang.hang_events([("[Rank 1] " + WD, None, "[rank7]:[Rank 1] " + WD)])
    assert [e.rank for e in a.events] == [1] and [e.rank for e in b.events] == [7]
    assert torch_hang.hang_events([("[Rank 1] " + WD + "\r", 3)]).events[0].line.endswith("timing out.")


def test_event_dict_drops_empty_fields() -> None:
    d = one("[Rank 1] " + WD).to_dict()
    assert d == {"kind": "nccl_timeout", "rank": 1, "group_rank": 1, "op": "ALLGATHER", "seq": 12, "timeout_ms": 60000,
                 "ran_ms": 60011, "numel_in": 8, "numel_out": 64, "line": "[Rank 1] " + WD}
    assert HangEvent("x", pg="3(tp)").group_key == "3" and HangEvent("x", pg="3", pg_guid="9").group_key == "9"


def test_a_continuation_repeating_its_rank_tag() -> None:
    text = ("1066.6s [rank1]: failure detected by watchdog at work sequence id: 306\n"
            "1066.6s [rank1]: last enqueued work: 306, last completed work: 305\n"
            "1066.7s [rank2]: last enqueued work: 9, last completed work: 8\n")
    [ev] = events(text)
    assert (ev.rank, ev.seq, ev.last_enqueued, ev.last_completed) == (1, 306, 306, 305)
    other = events("[rank1]: failure detected by watchdog at work sequence id: 306\n"
                   "[rank2]: last enqueued work: 9, last completed work: 8\n")
    assert [(e.seq, e.last_enqueued) for e in other] == [(306, None)]


@pytest.mark.parametrize("line, rank, peer", [
    ("torch.distributed.DistBackendError: [3] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via "
     "c10d key-value store by key '0', but store->get('0') got error: Connection reset by peer", 3, ""),
    ("[rank5]: torch.distributed.DistBackendError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from "
     "[0] via c10d key-value store by key '0:1', but store->get('0:1') got error: Socket Timeout", 5, ""),
    ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: "
     "29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use", None, ""),
    ("RuntimeError: The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).", None, ""),
    ("torch.distributed.DistNetworkError: The client socket has failed to connect to any network address of "
     "(node-17, 29400).", None, "node-17:29400"),
    ("torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed. "
     "See inner exception for details.", None, ""),
])
def test_store_lost_or_not_opened(line: str, rank: int | None, peer: str) -> None:
    ev = one(line)
    assert (ev.kind, ev.rank, ev.peer) == ("store_failure", rank, peer)
    assert ev.message.startswith(("[", "The "))


def test_gloo_connection_info_is_not_a_failure() -> None:
    assert events("[Gloo] Rank 1 is connected to 3 peer ranks. Expected number of connected peer ranks is : 3\n") == []


def test_gloo_enforce_fail() -> None:
    ev = one("RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:446] op.preamble.length <= "
             "op.nbytes. 8773632 vs 8386560")
    assert (ev.kind, ev.message) == ("gloo_enforce", "op.preamble.length <= op.nbytes. 8773632 vs 8386560")
    assert events("[enforce fail at caffe2/core/net.cc:12] ws != nullptr") == []
