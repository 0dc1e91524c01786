"""hang.watchdog over the corpus training logs and flight-recorder outputs: INDEX.md's conclusions."""

from __future__ import annotations

import pytest

from preflight import registry
from preflight.analyze import analyze
from preflight.model import Result
from tests.conftest import corpus_file
from tests.corpus import Expected, accepts, cases

pytestmark = pytest.mark.corpus

_WRAPPED = "pytorch/watchdog_timeout_broadcast_seq4_1800000ms_terminal_wrapped_lines_openr1_620.log"
_TWO_PGS = "pytorch/watchdog_timeout_allreduce_two_pgs_ran_7h_progress_bar_prefix_pytorch118369.log"
_MILABENCH = "pytorch/watchdog_timeout_reduce_seq2070_600000ms_milabench_host_stderr_prefix_wrapped_pr269.log"

EXPECTED: dict[str, dict[str, Expected]] = {
    "pytorch/gloo_connection_closed_by_peer_barrier_ci_timestamp_prefix_pytorch61670.log": {"hang.watchdog": "fail"},
    "pytorch/gloo_recv_connection_closed_by_peer_traceback_pytorch78514.log": {"hang.watchdog": "fail"},
    "pytorch/watchdog_old_format_no_numel_allreduce_seq49_custom_timeout_18000000ms_instructglm3.log":
        {"hang.watchdog": "fail"},
    "pytorch/watchdog_rank_prefix_no_date_pg0_allgather_base_seq1474236_ec2_llamacookbook567.log":
        {"hang.watchdog": "fail"},
    "pytorch/watchdog_terminate_c10_distbackenderror_allgather_base_seq9141_pg3_rank5_frames_sglang1693.log":
        {"hang.watchdog": "fail"},
    "flight-recorder/fr_trace_module_cli_not_all_ranks_seq4_internal_record_id_world_size_expected_ranks_set_"
    "docexample.txt": {"hang.watchdog": "fail"},
    "flight-recorder/fr_trace_j_side_by_side_rank0_5_entries_rank1_4_docexample.txt": {"hang.watchdog": "fail"},
    # Batch 3: every file shows ranks stuck in a collective until the watchdog or the analyzer gave up: FAIL
    "pytorch/watchdog_timeout_allreduce_1800000ms_8xV100_ofa271.log": {"hang.watchdog": "fail"},
    "pytorch/watchdog_timeout_allreduce_600000ms_pg_last_enqueued_llamafactory7396.log": {"hang.watchdog": "fail"},
    "pytorch/watchdog_timeout_reduce_scatter_llamafactory6269.log": {"hang.watchdog": "fail"},
    "pytorch/watchdog_timeout_alltoall_vs_allreduce_mismatch_nccl1610.log": {"hang.watchdog": "fail"},
    "flight-recorder/fr_trace_not_all_ranks_joining_allreduce_missing_3to7_pytorch_pr140969.txt":
        {"hang.watchdog": "fail"},
    "flight-recorder/torchfrtrace_missing_rank1_allreduce_tutorial_docexample.txt": {"hang.watchdog": "fail"},
    # Batch 4: ranks stuck in a collective until the watchdog (or gloo) gave up: FAIL
    # BROADCAST SeqNum 4 at 1800000 ms, lines wrapped by the terminal
    _WRAPPED: {"hang.watchdog": "fail"},
    # ALLREDUCE timeouts on two process groups, one after running for 7 h (a progress bar before each line)
    _TWO_PGS: {"hang.watchdog": "fail"},
    "pytorch/watchdog_timeout_allreduce_seq808_default_pg_guid_basicsr737.log": {"hang.watchdog": "fail"},
    "pytorch/watchdog_terminate_distbackenderror_broadcast_seq880_stack_frames_catalyst15.log": {"hang.watchdog": "fail"},
    # gloo: a send timed out after 1800000 ms inside all_gather
    "pytorch/gloo_send_timeout_1800000ms_all_gather_traceback_detectron2_3243.log": {"hang.watchdog": "fail"},
    # REDUCE SeqNum 2070 at 600000 ms, `host [stderr] ` prefixes and wrapped lines
    _MILABENCH: {"hang.watchdog": "fail"},
    "pytorch/watchdog_terminate_allgather_base_seq34397_1800000ms_h800_nccl1609.log": {"hang.watchdog": "fail"},
    # the heartbeat monitor: the watchdog thread stuck for 480 s, no SeqNum
    "pytorch/watchdog_heartbeat_monitor_stuck_480s_no_seqnum_wrapped_vlmr1_257.log": {"hang.watchdog": "fail"},
}
KNOWN_GAPS: dict[str, str] = {}


def _hang(rel: str) -> Result:
    [r] = [x for x in analyze(registry.load(), [corpus_file(rel)], profile_name="auto") if x.check == "hang.watchdog"]
    return r


@pytest.mark.parametrize("rel", cases(EXPECTED, KNOWN_GAPS))
def test_expected(rel: str) -> None:
    r = _hang(rel)
    assert accepts(EXPECTED[rel]["hang.watchdog"], r.status.value), r.summary
    assert r.summary and r.evidence and r.remedy


def test_process_that_exited_first_is_named() -> None:
    r = _hang("pytorch/gloo_connection_closed_by_peer_barrier_ci_timestamp_prefix_pytorch61670.log")
    assert "process 3 exited first (exit code 10)" in r.summary and r.facts["first_exit"]["process"] == 3


def test_recv_whose_sender_exited_is_an_application_bug() -> None:
    r = _hang("pytorch/gloo_recv_connection_closed_by_peer_traceback_pytorch78514.log")
    assert "point-to-point receive" in r.summary and "not the network" in r.remedy


def test_early_seq_says_a_longer_timeout_cannot_help() -> None:
    r = _hang("pytorch/watchdog_old_format_no_numel_allreduce_seq49_custom_timeout_18000000ms_instructglm3.log")
    assert "SeqNum=49" in r.summary and "timeout 18000000 ms" in r.summary
    assert "a longer timeout cannot help" in r.remedy


def test_rank_prefix_and_group_size() -> None:
    r = _hang("pytorch/watchdog_terminate_c10_distbackenderror_allgather_base_seq9141_pg3_rank5_frames_sglang1693.log")
    assert r.facts["rank"] == 5 and r.facts["pg"] == "3" and r.facts["seq"] == 9141 and r.facts["group_size"] == 8
    p = _hang("pytorch/watchdog_rank_prefix_no_date_pg0_allgather_base_seq1474236_ec2_llamacookbook567.log")
    assert p.facts["rank"] == 1 and p.facts["seq"] == 1474236


def test_flight_recorder_names_the_missing_rank() -> None:
    r = _hang("flight-recorder/fr_trace_module_cli_not_all_ranks_seq4_internal_record_id_world_size_expected_ranks_set_"
              "docexample.txt")
    assert "rank 1 did not join all_reduce sequence number 4" in r.summary and r.facts["expected_ranks"] == [0, 1]
    j = _hang("flight-recorder/fr_trace_j_side_by_side_rank0_5_entries_rank1_4_docexample.txt")
    assert "rank 1 entered 4 collective(s), rank 0 5" in j.summary and j.facts["behind"] == [1]


def test_old_format_timeout_on_five_ranks() -> None:
    r = _hang("pytorch/watchdog_timeout_allreduce_1800000ms_8xV100_ofa271.log")
    f = r.facts
    assert (f["op"], f["seq"], f["timeout_ms"], f["ranks"]) == ("ALLREDUCE", 469508, 1800000, [1, 2, 3, 6, 7])
    assert "hang.watchdog/collective-timeout" in f["codes"]


def test_process_group_and_last_enqueued_from_the_status_lines() -> None:
    r = _hang("pytorch/watchdog_timeout_allreduce_600000ms_pg_last_enqueued_llamafactory7396.log")
    f = r.facts
    assert (f["op"], f["seq"], f["timeout_ms"], f["ranks"], f["pg"]) == ("ALLREDUCE", 1580, 600000, [0, 4], "1")
    t = [e for e in f["events"] if e["kind"] == "nccl_timeout" and e["rank"] == 0][0]
    assert (t["last_enqueued"], t["last_completed"]) == (1582, 1579)


def test_reduce_scatter_on_three_ranks() -> None:
    r = _hang("pytorch/watchdog_timeout_reduce_scatter_llamafactory6269.log")
    f = r.facts
    assert (f["op"], f["seq"], f["ranks"], f["group_size"]) == ("_REDUCE_SCATTER_BASE", 7753, [0, 3, 4], 8)
    t = [e for e in f["events"] if e["kind"] == "nccl_timeout" and e["rank"] == 0][0]
    assert t["last_completed"] == 7752


def test_two_process_groups_stuck_on_different_collectives() -> None:
    r = _hang("pytorch/watchdog_timeout_alltoall_vs_allreduce_mismatch_nccl1610.log")
    assert "hang.watchdog/several-groups-stuck" in r.facts["codes"]
    assert r.facts["groups"] == [
        {"group": "112", "pg": "11", "pg_guid": "112", "op": "ALLREDUCE", "seq": 57, "ranks": [15]},
        {"group": "119", "pg": "11", "pg_guid": "119", "op": "ALLTOALL_BASE", "seq": 216, "ranks": [13]}]


def test_flight_recorder_colon_sequence_number_and_entry_wordings() -> None:
    r = _hang("flight-recorder/fr_trace_not_all_ranks_joining_allreduce_missing_3to7_pytorch_pr140969.txt")
    assert (r.facts["seq"], r.facts["missing_ranks"], r.facts["group"]) == (31117, [3, 4, 5, 6, 7], "0:default_pg")
    assert "ranks 3, 4, 5, 6, 7 did not join all_reduce sequence number 31117" in r.summary
    t = _hang("flight-recorder/torchfrtrace_missing_rank1_allreduce_tutorial_docexample.txt")
    assert (t.facts["seq"], t.facts["missing_ranks"], t.facts["world_size"]) == (5, [1], 2)
    assert "rank 1 did not join all_reduce sequence number 5" in t.summary


def test_wrapped_lines_are_joined() -> None:
    r = _hang(_WRAPPED)
    assert (r.facts["op"], r.facts["seq"], r.facts["timeout_ms"]) == ("BROADCAST", 4, 1800000)
    assert r.facts["ranks"] == [1, 2, 3, 5, 6]


def test_host_stderr_prefix_names_the_ranks() -> None:
    r = _hang(_MILABENCH)
    assert (r.facts["op"], r.facts["seq"], r.facts["timeout_ms"]) == ("REDUCE", 2070, 600000)
    assert r.facts["ranks"] == [11, 12, 14, 15]


def test_two_groups_timed_out() -> None:
    r = _hang(_TWO_PGS)
    assert r.facts["op"] == "ALLREDUCE" and r.facts["seq"] == 64088 and r.facts["timeout_ms"] == 1800000
