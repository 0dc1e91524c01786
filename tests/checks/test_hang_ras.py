"""hang.watchdog over NCCL RAS status (`ncclras`): which processes and ranks it singles out, and
with which code. Inline captures in the client's formats (NVIDIA/nccl src/ras/client_support.cc)."""

from __future__ import annotations

import json

import pytest

from preflight.checks.hang_ras import REMEDY_GONE, grade_ras, ras_ok_summary
from preflight.findings import Findings
from preflight.model import Result, Status
from preflight.parsers import ras
from tests.conftest import capture, grade
from tests.parsers.test_ras import BROKEN, HEALTHY, _json_rank, _json_status

HEAD = ("NCCL version 2.26.2 compiled with CUDA 12.8\nCUDA runtime version 12080, driver version 12080\n\n"
        "Communicators... (0.02s)\n=============\n\n"
        "Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors\n"
        "    #  in group  per comm  per node  per comm  in group\n")
AHEAD = (HEAD + "    0         1         4         8        32        32   RUNNING  MISMATCH\n\nErrors\n======\n\n"
         "Warnings\n========\n\n#0-0 (8d41c2e07f3a9b15) MISMATCH\n"
         "  Communicator ranks have different ReduceScatter operation counts\n"
         "  29 ranks have launched up to operation 1208\n  3 ranks have launched up to operation 1209\n"
         "  Rank 16 -- GPU 0 managed by process 5500 on node 10.30.1.7\n"
         "  Rank 17 -- GPU 1 managed by process 5501 on node 10.30.1.7\n"
         "  Rank 24 -- GPU 0 managed by process 6100 on node 10.30.1.8\n")


def ras_result(text: str) -> Result:
    [r] = grade("hang.watchdog", {"nccl-ras": capture("nccl-ras", text)}, mode="analyze")
    return r


def codes(r: Result) -> list[str]:
    return list(r.facts.get("codes", []))


def test_ranks_ahead_wait_in_a_collective_the_others_never_launched() -> None:
    r = ras_result(AHEAD)
    assert r.status is Status.FAIL and codes(r) == ["hang.watchdog/ras-count-mismatch"]
    assert r.summary == ("NCCL RAS: communicator #0-0's ReduceScatter operation counts differ: 29 ranks at operation "
                         "1208, ranks 16, 17 on node 10.30.1.7; rank 24 on node 10.30.1.8 at operation 1209: the ranks "
                         "ahead launched a collective the others never joined and wait in it")
    assert r.facts["ras"]["mismatched"] == [{"comm": "#0-0", "op": "ReduceScatter", "majority": 1208,
                                             "ranks": [16, 17, 24], "side": "ahead"}]
    assert r.evidence[:4] == ["#0-0 (8d41c2e07f3a9b15) MISMATCH",
                              "Communicator ranks have different ReduceScatter operation counts",
                              "29 ranks have launched up to operation 1208", "3 ranks have launched up to operation 1209"]
    assert "Rank 24 -- GPU 0 managed by process 6100 on node 10.30.1.8" in r.evidence
    assert r.remedy.startswith("the ranks parted at that collective: the ranks ahead wait in it")
    assert "Query ncclras again" in r.remedy


def test_ranks_behind_never_launched_it() -> None:
    text = ("#0-0 (27a0) MISMATCH\n  Communicator ranks have different AllReduce operation counts\n"
            "  26 ranks have launched up to operation 6650\n  6 ranks have launched up to operation 6649\n"
            "  Rank 0 -- GPU 0 managed by process 483072 on node 172.16.64.210\n"
            "  Rank 2 -- GPU 2 managed by process 483074 on node 172.16.64.210\n")
    r = ras_result(text)
    assert r.summary == ("NCCL RAS: communicator #0-0's AllReduce operation counts differ: 26 ranks at operation 6650, "
                         "ranks 0, 2 on node 172.16.64.210 at operation 6649: the ranks behind never launched the "
                         "collective the others wait in")
    assert r.facts["ras"]["mismatched"][0]["side"] == "behind" and r.facts["ras"]["mismatched"][0]["ranks"] == [0, 2]


def test_two_ranks_at_different_counts_parted() -> None:
    text = ("#0-0 (aa) MISMATCH\n  Communicator ranks have different AllGather operation counts\n"
            "  Rank 0 has launched up to operation 12 -- GPU 0 managed by process 10 on node n1\n"
            "  Rank 1 has launched up to operation 13 -- GPU 1 managed by process 11 on node n1\n")
    r = ras_result(text)
    assert r.summary == ("NCCL RAS: communicator #0-0's AllGather operation counts differ: rank 0 on node n1 at "
                         "operation 12, rank 1 on node n1 at operation 13: the ranks parted there")
    assert r.facts["ras"]["mismatched"] == [{"comm": "#0-0", "op": "AllGather", "majority": None, "ranks": [0, 1],
                                             "side": "split"}]


def test_ranks_before_any_operation_and_a_mixed_split() -> None:
    none_yet = ("#1-3 (bb) MISMATCH\n  Communicator ranks have different Broadcast operation counts\n"
                "  8 ranks have not launched any operations\n  2 ranks have launched up to operation 5\n"
                "  Rank 4 -- GPU 4 managed by process 14 on node n2\n  Rank 5 -- GPU 5 managed by process 15 on node n2\n")
    r = ras_result(none_yet)
    assert r.summary == ("NCCL RAS: communicator #1-3's Broadcast operation counts differ: 8 ranks before any "
                         "operation, ranks 4, 5 on node n2 at operation 5: the ranks ahead launched a collective the "
                         "others never joined and wait in it")
    mixed = ("#0-0 (cc) MISMATCH\n  Communicator ranks have different AllReduce operation counts\n"
             "  20 ranks have launched up to operation 9\n"
             "  Rank 1 has launched up to operation 8 -- GPU 1 managed by process 21 on node n3\n"
             "  Rank 2 has launched up to operation 10 -- GPU 2 managed by process 22 on node n3\n")
    m = ras_result(mixed)
    assert m.summary.endswith("20 ranks at operation 9, rank 1 on node n3 at operation 8, rank 2 on node n3 at "
                              "operation 10: the ranks parted there")
    assert m.facts["ras"]["mismatched"][0] == {"comm": "#0-0", "op": "AllReduce", "majority": 9, "ranks": [1, 2],
                                               "side": "split"}


def test_equal_groups_have_no_majority() -> None:
    text = ("#0-0 (dd) MISMATCH\n  Communicator ranks have different AllReduce operation counts\n"
            "  4 ranks have launched up to operation 7\n  4 ranks have launched up to operation 8\n")
    r = ras_result(text)
    assert r.summary.endswith("4 ranks at operation 7, 4 ranks at operation 8: the ranks parted there")
    assert r.facts["ras"]["mismatched"][0]["majority"] is None and r.facts["ras"]["mismatched"][0]["ranks"] == []


def test_nccl_2_24_collective_counts_and_missing_ranks() -> None:
    text = ("#0-0 (27a079b828ff1a75) INCOMPLETE\n  Missing communicator data from 1 rank\n  The missing rank: 21\n\n"
            "#0-0 (27a079b828ff1a75) MISMATCH\n  Communicator ranks have different collective operation counts\n"
            "  30 ranks have launched up to operation 800\n  Rank 3 has launched up to operation 799 -- GPU 3 managed "
            "by process 90 on node h1\n")
    r = ras_result(text)
    assert codes(r) == ["hang.watchdog/ras-incomplete", "hang.watchdog/ras-count-mismatch"]
    assert r.facts["problems"] == [
        "NCCL RAS: communicator #0-0 misses 1 rank (rank 21)",
        "NCCL RAS: communicator #0-0's collective operation counts differ: 30 ranks at operation 800, rank 3 on node "
        "h1 at operation 799: the ranks behind never launched the collective the others wait in"]
    assert "The missing rank: 21" in r.evidence and r.facts["ras"]["missing_ranks"] == [21]


def test_every_finding_of_a_broken_job() -> None:
    r = ras_result(BROKEN)
    assert r.status is Status.FAIL
    assert codes(r) == ["hang.watchdog/ras-dead", "hang.watchdog/ras-incomplete", "hang.watchdog/ras-comm-error",
                        "hang.watchdog/ras-aborted", "hang.watchdog/ras-count-mismatch",
                        "hang.watchdog/ras-status-mismatch", "hang.watchdog/ras-gather-timeout"]
    assert r.facts["problems"] == [
        "NCCL RAS: 2 job processes considered dead (unreachable via the RAS network): process 71301 on node "
        "10.20.0.14 (GPUs 0,1 (NVML 2,3))",
        "NCCL RAS: no answer from 3 job processes: process 71234 on node 10.20.0.13 (GPU 5); communicator #0-0 misses "
        "2 ranks (rank 21 on node 10.20.0.13; rank 30)",
        "NCCL RAS: communicator errors (initialization error on 1 rank; asynchronous errors on 3 ranks): rank 9 on "
        "node 10.20.0.12: Remote process error; ranks 2, 3 on node 10.20.0.11; rank 11: System error",
        "NCCL RAS: communicator aborted on rank 17 on node 10.20.0.13",
        "NCCL RAS: communicator #0-0's AllReduce operation counts differ: 27 ranks at operation 5310, rank 7 on node "
        "10.20.0.11 before any operation, rank 6 on node 10.20.0.11 at operation 5309: the ranks behind never "
        "launched the collective the others wait in; communicator #0-0's Broadcast operation counts differ: 20 ranks "
        "at operation 3, rank 24 on node 10.20.0.14 before any operation, rank 25 at operation 2: the ranks behind "
        "never launched the collective the others wait in",
        "NCCL RAS: ranks of a communicator differ in state (26 RUNNING, 2 NOCOMM): a communicator being created or "
        "torn down",
        "NCCL RAS: 2 communication timeouts while gathering communicator data"]
    f = r.facts["ras"]
    assert f["dead_processes"] == [{"pid": 71301, "node": "10.20.0.14", "gpus": "0,1 (NVML 2,3)"}]
    assert (f["missing_ranks"], f["error_ranks"], f["aborted_ranks"], f["status_ranks"]) == (
        [21, 30], [2, 3, 9, 11], [17], [21, 30])
    assert f["missing_processes"] == [{"pid": 71234, "node": "10.20.0.13", "gpus": "5"}]
    assert f["version"] == "2.26.5" and f["job"] is None
    assert f["groups"] == [{"group": 0, "comms": 1, "ranks_per_comm": 32, "status": "RUNNING",
                            "errors": "INCOMPLETE,ERROR,MISMATCH"}]


def _findings(text: str) -> dict[str, tuple[str, list[str]]]:
    f = Findings()
    grade_ras(ras.parse_ras(text), f, {})
    return {x.code: (x.summary, x.evidence) for x in f.items}


def test_evidence_of_each_finding_is_its_own() -> None:
    found = {code: ev for code, (_, ev) in _findings(BROKEN).items()}
    row = "0         1         4       7-8        32        32   RUNNING  INCOMPLETE,ERROR,MISMATCH"
    assert found["hang.watchdog/ras-dead"] == [
        "DEAD", "2 job processes are considered dead (unreachable via the RAS network)",
        "Process 71301 on node 10.20.0.14 managing GPUs 0,1 (NVML 2,3)"]
    assert found["hang.watchdog/ras-incomplete"] == [
        "INCOMPLETE", "Missing communicator data from 3 job processes", "Process 71234 on node 10.20.0.13 managing GPU 5",
        "[could not find information on 2 processes]", "#0-0 (3c9e0b7a51d24f68) INCOMPLETE",
        "Missing communicator data from 2 ranks", "Rank 21 -- GPU 5 managed by process 71234 on node 10.20.0.13",
        "Rank 30 -- [process information not found]", row]
    assert found["hang.watchdog/ras-comm-error"] == [
        "#0-0 (3c9e0b7a51d24f68) ERROR", "Initialization error on 1 rank",
        "Rank 9 reported Remote process error -- GPU 1 (NVML 3) managed by process 71105 on node 10.20.0.12",
        "Asynchronous errors on 3 ranks", "3 ranks reported System error",
        "Rank 2 -- GPU 2 managed by process 71002 on node 10.20.0.11",
        "Rank 3 -- GPU 3 managed by process 71003 on node 10.20.0.11", "Rank 11 -- [process information not found]", row]
    assert found["hang.watchdog/ras-aborted"] == [
        "Rank 17 has status ABORT -- GPU 1 managed by process 71201 on node 10.20.0.13"]
    assert found["hang.watchdog/ras-count-mismatch"] == [
        "#0-0 (3c9e0b7a51d24f68) MISMATCH", "Communicator ranks have different AllReduce operation counts",
        "27 ranks have launched up to operation 5310",
        "Rank 6 has launched up to operation 5309 -- GPU 6 managed by process 71006 on node 10.20.0.11",
        "Rank 7 has not launched any operations -- GPU 7 managed by process 71007 on node 10.20.0.11",
        "Communicator ranks have different Broadcast operation counts", "20 ranks have launched up to operation 3",
        "8 ranks have not launched any operations", "Rank 24 -- GPU 0 managed by process 71300 on node 10.20.0.14",
        "Rank 25 has launched up to operation 2 -- [process information not found]"]
    assert found["hang.watchdog/ras-status-mismatch"] == [
        "#0-0 (3c9e0b7a51d24f68) MISMATCH", "Communicator ranks have different status", "26 ranks have status RUNNING",
        "2 ranks have status NOCOMM", "Rank 21 -- GPU 5 managed by process 71234 on node 10.20.0.13",
        "Rank 30 -- [process information not found]",
        "Rank 17 has status ABORT -- GPU 1 managed by process 71201 on node 10.20.0.13"]
    assert found["hang.watchdog/ras-gather-timeout"] == [
        "TIMEOUT", "Encountered 2 communication timeouts while gathering communicator data"]


def test_evidence_of_a_json_status() -> None:
    ops = {"AllReduce": 400}
    ranks = [_json_rank(i, dict(ops)) for i in range(4)]
    ranks[3]["collective_counts"]["AllReduce"] = 399
    ranks[1] = _json_rank(1, dict(ops), abort_flag=True)
    ranks[2] = _json_rank(2, dict(ops), async_error=6)
    missing = [{"rank": 4, "host": "10.20.0.11", "pid": 7004, "status": {"unresponsive": True, "considered_dead": False}}]
    found = {code: ev for code, (_, ev) in _findings(_json_status(ranks, missing)).items()}
    status = '"init_state": 0, "finalize_called": false, "destroy_flag": false'
    assert found["hang.watchdog/ras-incomplete"] == [
        '{"rank": 4, "host": "10.20.0.11", "pid": 7004, "status": {"unresponsive": true, "considered_dead": false}}']
    assert found["hang.watchdog/ras-count-mismatch"] == [
        '{"rank": 3, "host": "10.20.0.11", "collective_counts": {"AllReduce": 399}}']
    assert found["hang.watchdog/ras-aborted"] == [
        '{"rank": 1, "host": "10.20.0.11", "pid": 7001, "status": {"init_state": 0, "async_error": 0, '
        '"finalize_called": false, "destroy_flag": false, "abort_flag": true}}']
    assert found["hang.watchdog/ras-comm-error"][0].startswith('{"rank": 2, "host": "10.20.0.11", "pid": 7002')
    assert status.split(", ")[0] in found["hang.watchdog/ras-comm-error"][0]


def test_a_healthy_status_passes_and_says_what_it_saw() -> None:
    r = ras_result(HEALTHY)
    assert r.status is Status.PASS and codes(r) == []
    assert r.summary == ("NCCL RAS (2.27.5+cuda12.9): 2 nodes, 16 processes, 16 GPUs; 9 communicators, RUNNING OK; no "
                         "missing process, error or mismatch")
    assert r.facts["ras"]["job"]["gpus"] == 16 and len(r.facts["ras"]["groups"]) == 2
    one = ras_result(HEAD + "    0         1         1         1         1         1      INIT      OK\n")
    assert one.summary == "NCCL RAS (2.26.2): 1 communicator, INIT OK; no missing process, error or mismatch"


def test_groups_table_flags_without_their_sections() -> None:
    cut = ras_result(HEAD + "    0         1         4         8        32        32   RUNNING  INCOMPLETE,ERROR\n"
                            "    1         2         2         8        16        32     ABORT      OK\n")
    assert codes(cut) == ["hang.watchdog/ras-incomplete", "hang.watchdog/ras-comm-error", "hang.watchdog/ras-aborted"]
    assert cut.facts["problems"] == [
        "NCCL RAS: communicator group(s) 0 INCOMPLETE (the details are not in the capture)",
        "NCCL RAS: communicator errors (group(s) 0 in ERROR)",
        "NCCL RAS: communicator aborted on communicator group(s) 1"]
    mism = ras_result(HEAD + "    0         1         4         8        32        32   RUNNING  MISMATCH\n")
    assert mism.status is Status.WARN and codes(mism) == ["hang.watchdog/ras-mismatch-cut"]
    assert mism.summary == ("NCCL RAS: communicator group(s) 0 report MISMATCH; the details (Warnings section) are not "
                            "in the capture")
    assert mism.evidence == ["0         1         4         8        32        32   RUNNING  MISMATCH"]
    assert mism.remedy.startswith("capture the whole ncclras output")


def test_status_differences_while_a_communicator_is_torn_down_are_a_warning() -> None:
    text = (HEAD + "    0         1         4       1-2        32        32  FINALIZE  MISMATCH\n\n"
            "Warnings\n========\n\n#0-0 (9e17999afaa87dbb) MISMATCH\n  Communicator ranks have different status\n"
            "  26 ranks have status NOCOMM\n  4 ranks have status RUNNING\n"
            "  Rank 0 -- GPU 0 managed by process 507285 on node 172.16.64.210\n"
            "  Rank 8 -- GPU 0 managed by process 1598388 on node 172.16.64.212\n"
            "  Rank 4 has status FINALIZE -- GPU 4 managed by process 507289 on node 172.16.64.210\n")
    r = ras_result(text)
    assert r.status is Status.WARN and codes(r) == ["hang.watchdog/ras-status-mismatch"]
    assert r.summary == ("NCCL RAS: ranks of a communicator differ in state (26 NOCOMM, 4 RUNNING; rank 4 FINALIZE): a "
                         "communicator being created or torn down")
    assert r.facts["ras"]["status_ranks"] == [0, 4, 8]
    assert r.remedy.startswith("ranks disagree on a communicator's state")


def test_aborted_ranks_counted_but_not_listed() -> None:
    r = ras_result("#0-0 (ee) MISMATCH\n  Communicator ranks have different status\n  20 ranks have status RUNNING\n"
                   "  12 ranks have status ABORT\n")
    assert codes(r) == ["hang.watchdog/ras-aborted", "hang.watchdog/ras-status-mismatch"]
    assert r.facts["problems"] == ["NCCL RAS: communicator aborted on 12 ranks",
                                   "NCCL RAS: ranks of a communicator differ in state (20 RUNNING): a communicator being "
                                   "created or torn down"]
    assert "12 ranks have status ABORT" in r.evidence and r.facts["ras"]["aborted_ranks"] == []


def test_dead_processes_from_the_monitor() -> None:
    text = ("RAS Monitor Mode - watching for peer changes (Ctrl+C to exit)...\n"
            "[2026-02-03 09:14:07] PEER_NEW: Process 88120 on node 10.20.0.15 managing GPU 0 \n"
            "[2026-02-03 09:15:40] PEER_DEAD: Process 88121 on node 10.20.0.15 managing GPU 1 \n"
            "[2026-02-03 09:15:41] PEER_DEAD: 10.20.0.16<28028> \n")
    r = ras_result(text)
    assert codes(r) == ["hang.watchdog/ras-dead"]
    assert r.summary == ("NCCL RAS: 2 job processes considered dead (unreachable via the RAS network): process 88121 "
                         "on node 10.20.0.15 (GPU 1), the process at 10.20.0.16<28028>")
    assert r.evidence == ["PEER_DEAD: Process 88121 on node 10.20.0.15 managing GPU 1",  # time stamps peeled
                          "PEER_DEAD: 10.20.0.16<28028>"]
    assert r.facts["ras"]["dead_processes"] == [{"pid": 88121, "node": "10.20.0.15", "gpus": "1"}]
    assert r.remedy == REMEDY_GONE


def test_a_dead_process_listed_twice_counts_once() -> None:
    text = ("DEAD\n  1 job process is considered dead (unreachable via the RAS network)\n"
            "  Process 9 on node n1 managing GPU 3\n[2026-02-03 09:15:40] PEER_DEAD: Process 9 on node n1 managing GPU 3\n")
    r = ras_result(text)
    assert r.summary == ("NCCL RAS: 1 job process considered dead (unreachable via the RAS network): process 9 on "
                         "node n1 (GPU 3)")


def test_counted_only_processes() -> None:
    r = ras_result("DEAD\n  3 job processes are considered dead (unreachable via the RAS network)\n\n"
                   "INCOMPLETE\n  Missing communicator data from 12 job processes\n")
    assert r.facts["problems"] == ["NCCL RAS: 3 job processes considered dead (unreachable via the RAS network)",
                                   "NCCL RAS: no answer from 12 job processes"]


def test_a_quiet_monitor_passes() -> None:
    r = ras_result("RAS Monitor Mode - watching for peer changes (Ctrl+C to exit)...\n"
                   "[2026-02-03 09:14:07] PEER_NEW: Process 88120 on node 10.20.0.15 managing GPU 0 \n")
    assert r.status is Status.PASS and r.summary == "NCCL RAS monitor: 1 event, no process declared dead"
    quiet = ras_result("RAS Monitor Mode - watching for peer changes (Ctrl+C to exit)...\n")
    assert quiet.status is Status.PASS and quiet.summary == "NCCL RAS monitor: 0 events, no process declared dead"


def test_warnings_alone() -> None:
    t = ras_result("Warnings\n========\n\nTIMEOUT\n  Encountered 1 communication timeout while gathering communicator data\n")
    assert t.status is Status.WARN and codes(t) == ["hang.watchdog/ras-gather-timeout"]
    assert t.summary == "NCCL RAS: 1 communication timeout while gathering communicator data"
    assert t.remedy.startswith("some process answered RAS late or not at all")
    uneven = ("Job summary\n===========\n\n  Nodes  Processes         GPUs\n          per node  per process\n"
              "      3          8            1\n      1          7            1\n\n"
              "  Nodes  Processes         GPUs\n(total)    (total)      (total)\n      4         31           31\n\n"
              "The outlier node:\n  Node 10.20.0.14 running processes 71300,71301\n")
    u = ras_result(uneven)
    assert u.status is Status.WARN and codes(u) == ["hang.watchdog/ras-uneven-job"]
    assert u.summary == ("NCCL RAS: the job's nodes run different numbers of processes or GPUs; outlier node(s): "
                         "10.20.0.14 (processes 71300, 71301)")
    assert u.evidence == ["Node 10.20.0.14 running processes 71300,71301"]
    bare = ras_result("Job summary\n===========\n\n  Nodes  Processes\n          per node\n      3          8\n"
                      "      1          7\n")
    assert bare.summary == "NCCL RAS: the job's nodes run different numbers of processes or GPUs"
    assert bare.evidence == ["job summary: processes per node / GPUs per process differ"]


def test_no_communicators_is_nothing_to_grade_unless_something_else_is_found() -> None:
    r = ras_result(HEAD.replace("Group     Comms", "x").replace("    #  in group", "x")
                   + "No communicator data collected!\n")
    assert r.status is Status.SKIP and codes(r) == ["hang.watchdog/ras-no-communicators"]
    assert r.summary == ("NCCL RAS: no communicator data collected (no NCCL communicator exists yet, or any more)")
    assert r.evidence == ["No communicator data collected!"]
    assert r.remedy == "query ncclras while the job's communicators exist (after init, before the job ends)"
    dead = ras_result("No communicator data collected!\n\nDEAD\n"
                      "  1 job process is considered dead (unreachable via the RAS network)\n")
    assert codes(dead) == ["hang.watchdog/ras-dead"]


@pytest.mark.parametrize("line, error", [
    ("Connecting to 127.0.0.1:28028: Connection refused", "Connection refused"),
    ("Failed to connect to the NCCL RAS service!", "Failed to connect to the NCCL RAS service!"),
])
def test_no_answer_from_the_client_is_unknown(line: str, error: str) -> None:
    r = ras_result(line + "\nPlease make sure that the NCCL job has the RAS service enabled and that\n")
    assert r.status is Status.SKIP and codes(r) == ["hang.watchdog/ras-no-answer"]
    assert r.summary == f"ncclras got no status: {error}" and line in r.evidence
    assert "NCCL_RAS_ENABLE=0" in r.remedy


def test_json_status_is_graded_like_the_text() -> None:
    ops = {"AllReduce": 400}
    ranks = [_json_rank(i, dict(ops)) for i in range(8)]
    ranks[6]["collective_counts"]["AllReduce"] = 401
    missing = [{"rank": 8, "host": "10.20.0.12", "pid": 7008, "cuda_dev": 0, "nvml_dev": 0,
                "status": {"unresponsive": True, "considered_dead": True}}]
    r = ras_result(_json_status(ranks, missing))
    assert codes(r) == ["hang.watchdog/ras-dead", "hang.watchdog/ras-incomplete", "hang.watchdog/ras-count-mismatch"]
    assert r.facts["problems"][0] == ("NCCL RAS: 1 job process considered dead (unreachable via the RAS network): "
                                      "process 7008 on node 10.20.0.12 (GPU 0)")
    assert r.facts["problems"][2] == ("NCCL RAS: communicator #0 (0x5d1e)'s AllReduce operation counts differ: 7 ranks "
                                      "at operation 400, rank 6 on node 10.20.0.11 at operation 401: the ranks ahead "
                                      "launched a collective the others never joined and wait in it")
    ok = ras_result(_json_status([_json_rank(0, dict(ops)), _json_rank(1, dict(ops))]))
    assert ok.status is Status.PASS
    assert ok.summary == "NCCL RAS (2.29.2): 0 communicators, no state; no missing process, error or mismatch"
    ev = json.dumps({"timestamp": "t", "group": "LIFECYCLE", "event": "PEER_DEAD",
                     "peer": {"host": "10.20.0.15", "pid": 3, "cuda_devs": [1], "nvml_devs": [1]}, "details": ""})
    assert codes(ras_result(ev)) == ["hang.watchdog/ras-dead"]


def test_many_ranks_are_counted_not_listed() -> None:
    lines = "".join(f"  Rank {i} -- GPU {i % 8} managed by process {100 + i} on node n1\n" for i in range(12))
    r = ras_result("#0-0 (ab) INCOMPLETE\n  Missing communicator data from 12 ranks\n" + lines)
    assert r.summary == ("NCCL RAS: communicator #0-0 misses 12 ranks (ranks 0, 1, 2, 3, 4, 5, 6, 7 (+4 more) on "
                         "node n1)")


def test_ras_and_a_training_log_together() -> None:
    [r] = grade("hang.watchdog", {"nccl-ras": capture("nccl-ras", HEALTHY),
                                  "watchdog-log": capture("watchdog-log", "[default] Starting worker group\n")},
                mode="analyze")
    assert r.status is Status.PASS
    assert r.summary == ("torchelastic: workers started, no failure in the log; NCCL RAS (2.27.5+cuda12.9): 2 nodes, "
                         "16 processes, 16 GPUs; 9 communicators, RUNNING OK; no missing process, error or mismatch")


def test_unreadable_ras_is_not_recognised() -> None:
    r = ras_result("Communicators...\n=============\n")
    assert r.status is Status.SKIP and codes(r) == ["hang.watchdog/not-recognised"]
    assert r.summary == ("not recognised: expected PyTorch watchdog, gloo, store or torchrun failure lines, fr_trace "
                         "findings, or an NCCL RAS status (ncclras)")


def test_ok_summary_without_a_job_table() -> None:
    st = ras.parse_ras(HEAD + "    0         2         1         8         8        16   RUNNING      OK\n")
    assert ras_ok_summary(st) == ("NCCL RAS (2.26.2): 2 communicators, RUNNING OK; no missing process, error or "
                                  "mismatch")
    st.version = ""
    assert ras_ok_summary(st).startswith("NCCL RAS: 2 communicators")


def test_facts_of_a_clean_answer() -> None:
    facts: dict = {}
    grade_ras(ras.parse_ras(HEALTHY), Findings(), facts)
    assert facts == {"ras": {"version": "2.27.5+cuda12.9",
                             "job": {"nodes": 2, "processes_per_node": 8, "gpus_per_process": 1, "processes": 16,
                                     "gpus": 16},
                             "groups": [{"group": 0, "comms": 1, "ranks_per_comm": 16, "status": "RUNNING",
                                         "errors": "OK"},
                                        {"group": 1, "comms": 8, "ranks_per_comm": 2, "status": "RUNNING",
                                         "errors": "OK"}]}}


def test_counts_cut_from_their_communicator() -> None:
    r = ras_result("  30 ranks have launched up to operation 640\n  2 ranks have launched up to operation 641\n")
    assert codes(r) == ["hang.watchdog/ras-count-mismatch"]
    assert r.summary == ("NCCL RAS: a communicator's operation counts differ: 30 ranks at operation 640, 2 ranks at "
                         "operation 641: the ranks ahead launched a collective the others never joined and wait in it")
    assert r.evidence == ["30 ranks have launched up to operation 640", "2 ranks have launched up to operation 641"]


def test_several_groups_and_plural_wordings() -> None:
    rows = ("    0         1         4         8        32        32   RUNNING  INCOMPLETE,ERROR,MISMATCH\n"
            "    1         8         4         1         4        32     ABORT  INCOMPLETE,ERROR,MISMATCH\n"
            "    2         1         4         1         4         4      INIT      OK\n")
    r = ras_result(HEAD + rows)
    assert r.facts["problems"] == [
        "NCCL RAS: communicator group(s) 0, 1 INCOMPLETE (the details are not in the capture)",
        "NCCL RAS: communicator errors (group(s) 0, 1 in ERROR)",
        "NCCL RAS: communicator aborted on communicator group(s) 1",
        "NCCL RAS: communicator group(s) 0, 1 report MISMATCH; the details (Warnings section) are not in the capture"]
    errs = ras_result("#0-0 (aa) ERROR\n  Asynchronous errors on 2 ranks\n  2 ranks reported Internal error\n"
                      "  Rank 4 -- GPU 4 managed by process 44 on node n4\n  Rank 5 -- GPU 5 managed by process 45 on node n4\n")
    assert errs.summary == ("NCCL RAS: communicator errors (asynchronous errors on 2 ranks): ranks 4, 5 on node n4: "
                            "Internal error")
    assert errs.remedy.startswith("the ranks named hold an NCCL error")


def test_a_rank_status_line_is_a_detail_of_the_mismatch() -> None:
    r = ras_result(HEAD + "    0         1         4         8        32        32      INIT  MISMATCH\n\n"
                   "#0-0 (ab) MISMATCH\n  Communicator ranks have different status\n  Rank 6 has status INIT\n")
    assert codes(r) == ["hang.watchdog/ras-status-mismatch"]
    assert r.summary == ("NCCL RAS: ranks of a communicator differ in state (rank 6 INIT): a communicator being "
                         "created or torn down")


def test_states_of_the_groups_in_the_pass_summary() -> None:
    r = ras_result(HEAD + "    0         1         4         8        32        32   RUNNING      OK\n"
                   "    1         1         4         1         4         4      INIT      OK\n")
    assert r.summary == ("NCCL RAS (2.26.2): 2 communicators, INIT OK / RUNNING OK; no missing process, error or "
                         "mismatch")


def test_eight_ranks_are_all_named() -> None:
    lines = "".join(f"  Rank {i} -- GPU {i} managed by process {100 + i} on node n1\n" for i in range(8))
    r = ras_result("#0-0 (ab) INCOMPLETE\n  Missing communicator data from 8 ranks\n" + lines)
    assert r.summary == "NCCL RAS: communicator #0-0 misses 8 ranks (ranks 0, 1, 2, 3, 4, 5, 6, 7 on node n1)"


def test_remedies_of_the_ras_findings() -> None:
    aborted = ras_result(HEAD + "    0         1         4         8        32        32     ABORT      OK\n"
                         "    1         1         4         8        32        32     ABORT      OK\n")
    assert aborted.summary == "NCCL RAS: communicator aborted on communicator group(s) 0, 1"
    assert aborted.remedy == ("a communicator was aborted (the application's error handling or PyTorch's watchdog after "
                              "a timeout or an NCCL error): the job cannot continue on it; find the first failure in "
                              "the ranks' logs")
    uneven = ras_result("  Nodes  Processes\n          per node\n      3          8\n      1          7\n")
    assert uneven.remedy == ("compare with the job's launch: a node with fewer processes lost some before RAS saw them, "
                             "or the launcher placed them unevenly (a GPU missing on that node, a wrong "
                             "--nproc_per_node)")
    refused = ras_result("Failed to connect to the NCCL RAS service!\n")
    assert refused.remedy == ("run ncclras on a node where the job runs (it connects to localhost:28028, or "
                              "NCCL_RAS_ADDR), while the job runs; NCCL_RAS_ENABLE=0 turns RAS off; NCCL 2.24 or later "
                              "is needed")
    assert refused.evidence == ["Failed to connect to the NCCL RAS service!"]


def test_ranks_alone_in_their_state_are_each_named() -> None:
    r = ras_result("#0-0 (ab) MISMATCH\n  Communicator ranks have different status\n  30 ranks have status RUNNING\n"
                   "  Rank 4 has status FINALIZE -- GPU 4 managed by process 14 on node n1\n"
                   "  Rank 6 has status INIT -- GPU 6 managed by process 16 on node n1\n")
    assert r.summary == ("NCCL RAS: ranks of a communicator differ in state (30 RUNNING; rank 4 FINALIZE; rank 6 INIT): "
                         "a communicator being created or torn down")


def test_ok_summary_of_an_uneven_job_total() -> None:
    st = ras.parse_ras("  Nodes  Processes         GPUs\n(total)    (total)      (total)\n      4         31           31\n")
    assert st.job == {"nodes": 4, "processes": 31, "gpus": 31}
    assert ras_ok_summary(st) == "NCCL RAS: 4 nodes, 31 processes, 31 GPUs; 0 communicators, no state; no missing " \
                                 "process, error or mismatch"
