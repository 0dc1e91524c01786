"""preflight.parsers.torch_log: tracebacks, torchrun's failure table, spawn exits, detection."""

from __future__ import annotations

from datetime import datetime

import pytest

from preflight.framing import Doc, frame
from preflight.parsers import torch_log
from preflight.parsers.torch_log import parse_rank_log

TABLE = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
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
         "  host      : gpu-a12\n"
         "  rank      : 11 (local_rank: 3)\n"
         "  exitcode  : 1 (pid: 1805)\n"
         "  error_file: /tmp/torchelastic_x/error.json\n"
         "  traceback : Traceback (most recent call last):\n"
         "============================================================\n")


def test_torchrun_table_failures_and_root_cause() -> None:
    fails = parse_rank_log(TABLE).failures
    assert [(f.rank, f.host, f.exitcode, f.pid, f.signal, f.root_cause, f.time) for f in fails] == [
        (2, "gpu-a11", -6, 1804, "SIGABRT", False, "2025-03-05_09:32:45"),
        (11, "gpu-a12", 1, 1805, "", True, "2025-03-05_09:32:44")]
    assert fails[0].lines == ["time      : 2025-03-05_09:32:45", "host      : gpu-a11", "rank      : 2 (local_rank: 2)",
                              "exitcode  : -6 (pid: 1804)", "error_file: <N/A>",
                              "traceback : Signal 6 (SIGABRT) received by PID 1804"]


@pytest.mark.parametrize("exitcode, code, pid, signal", [
    ("-9 (pid: 77)", -9, 77, ""), ("-9", -9, None, ""), ("<N/A>", None, None, ""),
    ("-15 (SIGTERM)", None, None, "SIGTERM"),
])
def test_torchrun_exit_codes(exitcode: str, code: int | None, pid: int | None, signal: str) -> None:
    text = f"  time      : 2024-01-01_00:00:00\n  rank      : x\n  exitcode  : {exitcode}\n"
    [f] = parse_rank_log(text).failures
    assert (f.exitcode, f.pid, f.signal, f.rank, f.host, f.root_cause) == (code, pid, signal, None, "", False)


def test_a_record_without_an_exit_code_is_not_a_failure_and_records_are_bounded() -> None:
    assert parse_rank_log("  time      : 2024-01-01_00:00:00\n  host      : a\nnext\n").failures == []
    long = "  time : t\n" + "  host : h\n" * 20 + "  exitcode : 1\n"
    assert parse_rank_log(long).failures == []


def test_root_cause_block_ends_at_the_next_failures_list() -> None:
    text = ("Root Cause (first observed failure):\n  time : t1\n  exitcode : 1\n"
            "Failures:\n  time : t2\n  exitcode : 2\n"
            "=====\n  time : t3\n  exitcode : 3\n")
    assert [(f.time, f.root_cause) for f in parse_rank_log(text).failures] == [
        ("t1", True), ("t2", False), ("t3", False)]


def test_tracebacks_per_rank_and_their_exception() -> None:
    text = ("[rank0]: Traceback (most recent call last):\n"
            "[rank1]: Traceback (most recent call last):\n"
            '[rank0]:   File "a.py", line 1, in <module>\n'
            '[rank1]:   File "b.py", line 2, in <module>\n'
            "[rank1]: torch.OutOfMemoryError: CUDA out of memory.\n"
            "[rank0]: RuntimeError: NCCL communicator was aborted on rank 0.\n")
    crashes = parse_rank_log(text).crashes
    assert sorted((c.rank, c.exception, c.message, c.secondary, len(c.lines)) for c in crashes) == [
        (0, "RuntimeError", "NCCL communicator was aborted on rank 0.", True, 3),
        (1, "torch.OutOfMemoryError", "CUDA out of memory.", False, 3)]


@pytest.mark.parametrize("last, exc, msg", [
    ("KeyboardInterrupt", "KeyboardInterrupt", ""),
    ("SystemExit: 3", "SystemExit", "3"),
    ("ValueError", "ValueError", ""),
    ("my.module.CustomFailure: broke", "my.module.CustomFailure", "broke"),
    ("torch.distributed.DistBackendError: boom", "torch.distributed.DistBackendError", "boom"),
])
def test_exception_lines(last: str, exc: str, msg: str) -> None:
    [c] = parse_rank_log(f'Traceback (most recent call last):\n  File "x.py", line 1\n{last}\n').crashes
    assert (c.exception, c.message, c.rank) == (exc, msg, None)


def test_traceback_lines_that_are_not_its_end() -> None:
    text = ("Traceback (most recent call last):\n"
            "\tat something\n"
            "\n"
            "plain words without a colon\n"
            "During handling of the above exception: x\n"
            "The above exception was the direct cause: y\n"
            "Traceback (most recent call last):\n"
            "OSError: disk\n")
    crashes = parse_rank_log(text).crashes
    assert [(c.exception, c.message) for c in crashes] == [("OSError", "disk")]


def test_a_traceback_without_an_exception_is_bounded() -> None:
    text = "Traceback (most recent call last):\n" + '  File "x.py", line 1\n' * 450 + "ValueError: late\n"
    assert parse_rank_log(text).crashes == []
    short = "Traceback (most recent call last):\n" + '  File "x.py", line 1\n' * 398 + "ValueError: in time\n"
    [c] = parse_rank_log(short).crashes
    assert c.message == "in time" and len(c.lines) == 12


def test_rank_log_lines_takes_the_framing_rank() -> None:
    pairs = [("Traceback (most recent call last):", 4), ("ValueError: x", 4), ("Traceback (most recent call last):", 5),
             ("KeyError: y", 5)]
    assert [(c.rank, c.exception) for c in torch_log.rank_log_lines(pairs).crashes] == [(4, "ValueError"), (5, "KeyError")]


def test_torchrun_time_and_int() -> None:
    assert torch_log.torchrun_time(" 2024-06-03_10:12:01 ") == datetime(2024, 6, 3, 10, 12, 1)
    assert torch_log.torchrun_time("2024-06-03 10:12:01") is None
    assert [torch_log._int(v) for v in (True, 3, " -4 ", "x", None, 2.0)] == [None, 3, -4, None, None, None]


def test_spawn_exits_and_point_to_point_frames() -> None:
    text = ("exiting process 3 with exit code: 10\n"
            "Process 0 terminated with exit code 1\n"
            "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGKILL\n"
            "    dist.recv(tensor=t, src=0)\n"
            "    pg.send([t], 1, 0)\n"
            "exiting process 2 with exit code -1\n"
            "-- Process 5 terminated with the following error:\n")
    out = torch_log.parse(Doc(text))
    assert [(x.process, x.code, x.signal, x.first, x.raised) for x in out.exits] == [
        (3, 10, "", True, False), (0, 1, "", False, False), (1, None, "SIGKILL", False, False), (2, -1, "", True, False),
        (5, 1, "", True, True)]
    assert out.exits[-1].line == "-- Process 5 terminated with the following error:"
    assert out.p2p_calls == ["dist.recv(tensor=t, src=0)", "pg.send([t], 1, 0)"]
    assert out.recognised and not torch_log.parse(Doc("step 1\n")).recognised


def test_parse_reads_hang_events_with_the_raw_lines_rank_tags() -> None:
    doc = frame("[rank7]:[E1 ProcessGroupNCCL.cpp:1] [Rank 1] Watchdog caught collective operation timeout: "
                "WorkNCCL(SeqNum=4, OpType=ALLREDUCE, Timeout(ms)=60000) ran for 60001 milliseconds before timing out.\n"
                ).docs[0]
    [ev] = torch_log.parse(doc).hang.events
    assert (ev.rank, ev.group_rank, ev.seq) == (7, 1, 4)


@pytest.mark.parametrize("text", [
    "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)",
    "Some NCCL operations have failed or timed out.",
    "[PG 0 Rank 0] Timeout at NCCL work: 5, last enqueued NCCL work: 5",
    "[PG 1 Rank 0] Exception (either an error or timeout) detected by watchdog at work: 9",
    "[Rank 1] NCCL watchdog thread terminated with exception: unknown",
    "[PG 0 Rank 1] Heartbeat monitor timed out! Process will be terminated",
    "[PG 0 Rank 1] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress",
    "[Rank 1] NCCL monitor thread timeout. Basically",
    "[PG 0 Rank 1] Received a dump signal from this local rank",
    "[PG 0 Rank 1] Received a global timeout from another rank",
    "[Rank 0] Work WorkNCCL(SeqNum=9) timed out in blocking wait (NCCL_BLOCKING_WAIT=1).",
    "RuntimeError: [Rank 0] Caught collective operation timeout: WorkNCCL(SeqNum=9)",
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 5ms for recv "
    "operation to complete",
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [1.2.3.4]:5",
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:535] Read error [1.2.3.4]:5: Connection reset",
    "torch.distributed.DistBackendError: NCCL error in: x.cpp:1, unhandled system error",
    "RuntimeError: NCCL error: remote process exited or there was a network error",
    "ncclRemoteError: A call failed possibly due to a network error",
    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed",
    "RuntimeError: NCCL communicator was aborted on rank 1.",
    "\t - To our best knowledge, ranks [1] are the lagging ranks that caused this timeout.",
    "\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:",
    "\t   - [3] joined but didn't finish collective #5 (count from 1)",
    "\t     [0] finished collective #5, but didn't join collective #6 (count from 1)",
    "[PG ID 2 PG GUID 9 Rank 1]  remote error detected from rank: 4",
    "RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: x",
    "RuntimeError: Rank 1 failed to pass monitoredBarrier in 2000 ms",
    "RuntimeError: Rank 0 timed out in monitoredBarrier after 5000 ms.",
    "RuntimeError: Socket Timeout",
    "torch.distributed.DistStoreError: Wait timeout",
    "DistStoreError: Timed out after 601 seconds waiting for clients. 1/4 clients joined.",
    "[c10d] The client socket has timed out after 600000ms while trying to connect to (h, 1).",
    "RuntimeError: Timed out initializing process group in store based barrier on rank: 3, for key: k",
    "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    "Root Cause (first observed failure):",
    "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGABRT",
    "-- Process 2 terminated with the following error:",
    "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed.",
])
def test_detect_every_marker(text: str) -> None:
    assert torch_log.detect(Doc("step 1 loss 2.0\n" + text + "\n"))


@pytest.mark.parametrize("text", [
    "[rank0]:[W305 ProcessGroupNCCL.cpp:4561] using GPU 0 to perform barrier",
    "[PG ID 0 PG GUID 0 Rank 0] NCCL Work update periodically: last enqueued NCCL work: 5, last completed NCCL work: 5.",
    "gpu017:1234:1300 [0] NCCL INFO Channel 00/32 : 0 1 2 3 4 5 6 7",
    "the gloo backend is used for CPU tensors",
    "RuntimeError: CUDA error: out of memory",
    "Received a package",
])
def test_detect_ignores_healthy_lines(text: str) -> None:
    assert not torch_log.detect(Doc(text + "\n"))


@pytest.mark.parametrize("message", [
    "Connection closed by peer [1.2.3.4]:5", "Connection reset by peer", "Timed out waiting 5ms", "collective timed out",
    "DistBackendError: x", "NCCL communicator was aborted on rank 1", "Broken pipe", "ProcessGroupNCCL is aborted",
    "Watchdog caught collective operation timeout", "Socket Timeout", "Read error [1.2.3.4]:5",
])
def test_secondary_failures(message: str) -> None:
    assert torch_log.SECONDARY.search(message)
    assert not torch_log.SECONDARY.search("CUDA out of memory")


@pytest.mark.parametrize("files, found", [(399, False), (398, True)])
def test_traceback_window_is_400_lines_from_its_start(files: int, found: bool) -> None:
    text = "step\n" * 5 + "Traceback (most recent call last):\n" + '  File "x.py", line 1\n' * files + "ValueError: v\n"
    assert bool(parse_rank_log(text).crashes) is found


def test_a_traceback_cut_short_leaves_the_next_line_to_be_read() -> None:
    text = ("Traceback (most recent call last):\n" + '  File "x.py", line 1\n' * 399
            + "Traceback (most recent call last):\nKeyError: k\n")
    assert [c.exception for c in parse_rank_log(text).crashes] == ["KeyError"]


@pytest.mark.parametrize("extra, found", [(10, True), (11, False)])
def test_torchrun_record_is_at_most_twelve_lines(extra: int, found: bool) -> None:
    text = "  time : t\n" + "  host : h\n" * extra + "  exitcode : 1\n"
    assert bool(parse_rank_log(text).failures) is found


def test_indented_code_lines_and_fallback_exception_names() -> None:
    text = ("Traceback (most recent call last):\n"
            "    print('a: b')\n"
            "\tlog('c: d')\n"
            "Failure in the loader: shard 3: missing\n")
    [c] = parse_rank_log(text).crashes
    assert (c.exception, c.message) == ("Failure in the loader", "shard 3: missing")


def test_detect_gloo_enforce_and_store_losses() -> None:
    for line in ("RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:446] op.preamble.length",
                 "DistBackendError: [3] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d "
                 "key-value store by key '0'",
                 "DistNetworkError: The server socket has failed to listen on any local network address."):
        assert torch_log.detect(Doc(line + "\n")), line
    assert not torch_log.detect(Doc("[enforce fail at caffe2/core/net.cc:12] ws != nullptr\n"))
