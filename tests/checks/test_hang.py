"""hang.watchdog: PyTorch NCCL watchdog and gloo timeouts across log layouts."""

from __future__ import annotations

import pytest

from preflight.model import Status
from preflight.parsers import torch_log
from tests.conftest import capture, fixture_text, grade


def watchdog(rel: str = "", text: str | None = None) -> list:
    body = text if text is not None else fixture_text(f"watchdog/{rel}")
    return grade("hang.watchdog", {"watchdog-log": capture("watchdog-log", body)}, mode="analyze")


def test_modern_layout_lists_all_ranks_and_the_missing_one_is_absent() -> None:
    [r] = watchdog("torch25_allreduce_timeout_rank3_missing.log")
    assert r.status is Status.FAIL
    f = r.facts
    assert (f["op"], f["seq"], f["timeout_ms"], f["rank"]) == ("ALLREDUCE", 4117, 600000, 0)
    assert 600000 < f["ran_ms"] < 601000
    assert f["ranks"] == [0, 1, 2, 4, 5, 6, 7]
    assert "ranks 0, 1, 2, 4, 5, 6, 7" in r.summary and "SeqNum=4117" in r.summary
    assert all("Watchdog caught" in e or "failure detected" in e or "Some NCCL" in e for e in r.evidence)
    assert "NOT in" in r.remedy
    # the repeated "terminate called ... what():" line is not a second event
    timeouts = [e for e in f["events"] if e["kind"] == "nccl_timeout"]
    assert len(timeouts) == 7
    status = [e for e in f["events"] if e["kind"] == "nccl_status"]
    assert status and status[0]["last_completed"] == 4116 and status[0]["pg"] == "0(default_pg)"


def test_old_layouts_and_lowest_seq_wins() -> None:
    [r] = watchdog("torch_1x_2x_mixed_seq.log")
    assert r.status is Status.FAIL
    f = r.facts
    assert (f["op"], f["seq"], f["rank"], f["timeout_ms"]) == ("BROADCAST", 88231, 0, 1800000)
    assert f["seqs"] == [88231, 88232]
    assert f["ranks"] == [0, 1, 5, 6]  # rank 6's pre-SeqNum line still counts
    assert "later/other SeqNum 88232" in r.summary


def test_gloo_peer_closed_points_at_the_dead_peer() -> None:
    [r] = watchdog("gloo_peer_closed_and_recv_timeout.log")
    assert r.status is Status.FAIL
    assert r.facts["op"] == "recv" and r.facts["timeout_ms"] == 1800000 and r.facts["rank"] == 1
    assert r.facts["peers_closed"] == ["10.52.7.31"]
    assert "10.52.7.31" in r.remedy
    assert r.evidence[0].endswith("Connection closed by peer [10.52.7.31]:40277")


@pytest.mark.parametrize("line, rank, pg", [
    ("[rank3]:[E1105 10:00:00.1 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: "
     "WorkNCCL(SeqNum=12, OpType=ALLGATHER, NumelIn=8, NumelOut=64, Timeout(ms)=60000) ran for 60011 milliseconds "
     "before timing out.", 3, ""),
    ("[PG 0 (default_pg) Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, "
     "OpType=ALLGATHER, NumelIn=8, NumelOut=64, Timeout(ms)=60000) ran for 60011 milliseconds before timing out.",
     5, "0(default_pg)"),
    ("[rank9]:[E1105 10:00:00.1 ProcessGroupNCCL.cpp:632] [PG ID 2 PG GUID 7(tp) Rank 1] Watchdog caught collective "
     "operation timeout: WorkNCCL(SeqNum=12, OpType=ALLGATHER, NumelIn=8, NumelOut=64, Timeout(ms)=60000) ran for "
     "60011 milliseconds before timing out.", 9, "2(tp)"),
])
def test_rank_and_pg_prefixes(line: str, rank: int, pg: str) -> None:
    [ev] = torch_log.parse_hang_log(line).events
    assert (ev.rank, ev.pg, ev.op, ev.seq, ev.timeout_ms, ev.ran_ms) == (rank, pg, "ALLGATHER", 12, 60000, 60011)
    assert (ev.numel_in, ev.numel_out) == (8, 64)


def test_status_lines_only() -> None:
    text = ("[rank4]:[E1016 03:31:38.929234295 ProcessGroupNCCL.cpp:1709] [PG 3 Rank 4] Timeout at NCCL work: 9141, "
            "last enqueued NCCL work: 9141, last completed NCCL work: 9140.\n")
    [r] = watchdog(text=text)
    assert r.status is Status.FAIL and r.facts["seq"] == 9141 and r.facts["rank"] == 4


def test_nccl_error_without_timeout() -> None:
    text = ("[E ProcessGroupNCCL.cpp:414] [Rank 2] NCCL watchdog thread terminated with exception: NCCL error in: "
            "../torch/csrc/distributed/c10d/NCCLUtils.hpp:121, remote process exited or there was a network error, "
            "NCCL version 2.14.3\n")
    [r] = watchdog(text=text)
    assert r.status is Status.FAIL and "remote process exited" in r.summary and r.facts["rank"] == 2


def test_some_failed_without_detail() -> None:
    [r] = watchdog(text="[E ProcessGroupNCCL.cpp:489] Some NCCL operations have failed or timed out. Due to ...\n")
    assert r.status is Status.FAIL and r.evidence


@pytest.mark.parametrize("text", ["", "step 1 loss 2.0\n", "\x00\x01", "Watchdog caught collective operation timeout",
                                  "WorkNCCL(SeqNum=abc, OpType=, Timeout(ms)=x"])
def test_garbage_never_raises(text: str) -> None:
    [r] = watchdog(text=text)
    assert r.status in (Status.PASS, Status.FAIL)


def test_detector_is_specific(registry) -> None:  # noqa: ANN001
    from preflight.analyze import classify
    from preflight.framing import Doc

    names = {f.name for f in classify(Doc(fixture_text("watchdog/gloo_peer_closed_and_recv_timeout.log")), registry)}
    assert "watchdog-log" in names
    plain = "[rank0]:[W305 ProcessGroupNCCL.cpp:4561] using GPU 0 to perform barrier\nstep 1 loss 3.2\n"
    assert "watchdog-log" not in {f.name for f in classify(Doc(plain), registry)}
