"""preflight.parsers.ras: every layout the `ncclras` client prints (NCCL 2.24 - 2.29), its monitor
mode, its JSON form and its own errors. Inline captures written in the client's formats
(NVIDIA/nccl src/ras/client_support.cc, client.cc), odd cases included."""

from __future__ import annotations

import json

import pytest

from preflight.framing import Doc
from preflight.parsers import ras

HEALTHY = """\
NCCL version 2.27.5+cuda12.9 compiled with CUDA 12.9
CUDA runtime version 12090, driver version 12080

Job summary
===========

  Nodes  Processes         GPUs  Processes     GPUs
(total)   per node  per process    (total)  (total)
      2          8            1         16       16

Communicators... (0.004s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         2         8        16        16   RUNNING      OK
    1         8         2         1         2        16   RUNNING      OK

Errors
======

Warnings
========

"""

BROKEN = """\
NCCL version 2.26.5 compiled with CUDA 12.8
CUDA runtime version 12080, driver version 12080

Communicators... (5.012s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         4       7-8        32        32   RUNNING  INCOMPLETE,ERROR,MISMATCH

Errors
======

INCOMPLETE
  Missing communicator data from 3 job processes
  Process 71234 on node 10.20.0.13 managing GPU 5
  [could not find information on 2 processes]

DEAD
  2 job processes are considered dead (unreachable via the RAS network)
  Process 71301 on node 10.20.0.14 managing GPUs 0,1 (NVML 2,3)

#0-0 (3c9e0b7a51d24f68) INCOMPLETE
  Missing communicator data from 2 ranks
  Rank 21 -- GPU 5 managed by process 71234 on node 10.20.0.13
  Rank 30 -- [process information not found]

#0-0 (3c9e0b7a51d24f68) ERROR
  Initialization error on 1 rank
  Rank 9 reported Remote process error -- GPU 1 (NVML 3) managed by process 71105 on node 10.20.0.12
  Asynchronous errors on 3 ranks
  3 ranks reported System error
  Rank 2 -- GPU 2 managed by process 71002 on node 10.20.0.11
  Rank 3 -- GPU 3 managed by process 71003 on node 10.20.0.11
  Rank 11 -- [process information not found]

Warnings
========

TIMEOUT
  Encountered 2 communication timeouts while gathering communicator data

#0-0 (3c9e0b7a51d24f68) MISMATCH
  Communicator ranks have different status
  26 ranks have status RUNNING
  2 ranks have status NOCOMM
  Rank 21 -- GPU 5 managed by process 71234 on node 10.20.0.13
  Rank 30 -- [process information not found]
  Rank 17 has status ABORT -- GPU 1 managed by process 71201 on node 10.20.0.13
  Communicator ranks have different AllReduce operation counts
  27 ranks have launched up to operation 5310
  Rank 6 has launched up to operation 5309 -- GPU 6 managed by process 71006 on node 10.20.0.11
  Rank 7 has not launched any operations -- GPU 7 managed by process 71007 on node 10.20.0.11

  Communicator ranks have different Broadcast operation counts
  20 ranks have launched up to operation 3
  8 ranks have not launched any operations
  Rank 24 -- GPU 0 managed by process 71300 on node 10.20.0.14
  Rank 25 has launched up to operation 2 -- [process information not found]

"""


def test_a_healthy_status_names_the_job_and_its_groups_and_singles_nothing_out() -> None:
    st = ras.parse_ras(HEALTHY)
    assert st.version == "2.27.5+cuda12.9"
    assert st.job == {"nodes": 2, "processes_per_node": 8, "gpus_per_process": 1, "processes": 16, "gpus": 16}
    assert [(g["group"], g["comms"], g["nodes"], g["ranks_per_node"], g["ranks_per_comm"], g["ranks_in_group"],
             g["status"], g["errors"]) for g in st.groups] == [(0, 1, 2, "8", 16, 16, "RUNNING", "OK"),
                                                               (1, 8, 2, "1", 2, 16, "RUNNING", "OK")]
    assert st.groups[0]["line"] == "0         1         2         8        16        16   RUNNING      OK"
    assert st.empty and st.recognised and not st.uneven and st.lines == [] and not st.json_form
    assert (st.missing_count, st.dead_count, st.unknown_processes, st.timeouts, st.majority_launched) == (0, 0, 0, 0, None)


def test_every_section_of_a_broken_job() -> None:
    st = ras.parse_ras(BROKEN)
    assert st.job == {} and st.groups[0]["ranks_per_node"] == "7-8"
    assert st.groups[0]["errors"] == "INCOMPLETE,ERROR,MISMATCH"
    assert (st.missing_count, st.unknown_processes, st.dead_count, st.timeouts) == (3, 2, 2, 2)
    assert st.missing_processes == [{"pid": 71234, "node": "10.20.0.13", "gpus": "5"}]
    assert st.dead_processes == [{"pid": 71301, "node": "10.20.0.14", "gpus": "0,1 (NVML 2,3)"}]
    assert st.incomplete == [{"comm": "#0-0", "missing": 2}]
    assert st.errors == [{"comm": "#0-0", "kind": "Initialization", "count": 1, "error": ""},
                         {"comm": "#0-0", "kind": "Asynchronous", "count": 3, "error": ""},
                         {"comm": "#0-0", "kind": "reported", "count": 3, "error": "System error"}]
    assert st.statuses == [{"comm": "#0-0", "count": 26, "status": "RUNNING"},
                           {"comm": "#0-0", "count": 2, "status": "NOCOMM"}]
    assert st.mismatched_ops == ["AllReduce", "Broadcast"]
    assert [(c["op"], c["count"], c["launched"]) for c in st.counts] == [
        ("AllReduce", 27, 5310), ("AllReduce", 1, 5309), ("AllReduce", 1, 0), ("Broadcast", 20, 3), ("Broadcast", 8, 0),
        ("Broadcast", 1, 2)]
    assert [c["where"] for c in st.counts] == ["#0-0 MISMATCH AllReduce"] * 3 + ["#0-0 MISMATCH Broadcast"] * 3
    assert {c["comm"] for c in st.counts} == {"#0-0"}
    assert st.majority_launched == 5310
    got = [(r["rank"], r["section"], r["launched"], r["status"], r["error"], r["node"], r["pid"], r["gpu"], r["op"])
           for r in st.ranks]
    assert got == [
        (21, "INCOMPLETE", None, "", "", "10.20.0.13", 71234, "5", ""),
        (30, "INCOMPLETE", None, "", "", "", None, "", ""),
        (9, "ERROR", None, "", "Remote process error", "10.20.0.12", 71105, "1 (NVML 3)", ""),
        (2, "ERROR", None, "", "System error", "10.20.0.11", 71002, "2", ""),
        (3, "ERROR", None, "", "System error", "10.20.0.11", 71003, "3", ""),
        (11, "ERROR", None, "", "System error", "", None, "", ""),
        (21, "MISMATCH", None, "NOCOMM", "", "10.20.0.13", 71234, "5", ""),
        (30, "MISMATCH", None, "NOCOMM", "", "", None, "", ""),
        (17, "MISMATCH", None, "ABORT", "", "10.20.0.13", 71201, "1", ""),
        (6, "MISMATCH", 5309, "", "", "10.20.0.11", 71006, "6", "AllReduce"),
        (7, "MISMATCH", 0, "", "", "10.20.0.11", 71007, "7", "AllReduce"),
        (24, "MISMATCH", 0, "", "", "10.20.0.14", 71300, "0", "Broadcast"),
        (25, "MISMATCH", 2, "", "", "", None, "", "Broadcast")]
    assert {r["comm"] for r in st.ranks} == {"#0-0"}
    assert not st.empty and st.recognised


def test_evidence_lines_keep_sections_and_counts() -> None:
    st = ras.parse_ras(BROKEN)
    assert st.lines[:6] == ["INCOMPLETE", "Missing communicator data from 3 job processes",
                            "Process 71234 on node 10.20.0.13 managing GPU 5",
                            "[could not find information on 2 processes]", "DEAD",
                            "2 job processes are considered dead (unreachable via the RAS network)"]
    assert "27 ranks have launched up to operation 5310" in st.lines
    assert "20 ranks have launched up to operation 3" in st.lines and "8 ranks have not launched any operations" in st.lines
    assert "Errors" not in st.lines and "Warnings" not in st.lines
    assert "TIMEOUT" in st.lines and "26 ranks have status RUNNING" in st.lines
    assert "3 ranks reported System error" in st.lines and "Initialization error on 1 rank" in st.lines


def test_a_section_header_resets_the_values_ranks_inherit() -> None:
    text = ("#0-1 (00ff) MISMATCH\n  Communicator ranks have different AllGather operation counts\n"
            "  5 ranks have launched up to operation 40\n  Rank 1 -- GPU 1 managed by process 9 on node n1\n"
            "#0-1 (00ff) INCOMPLETE\n  Missing communicator data from 1 rank\n"
            "  Rank 3 -- GPU 3 managed by process 11 on node n1\n"
            "Warnings\n========\n  Rank 4 -- GPU 4 managed by process 12 on node n1\n")
    st = ras.parse_ras(text)
    assert [(r["rank"], r["section"], r["comm"], r["launched"], r["op"]) for r in st.ranks] == [
        (1, "MISMATCH", "#0-1", 40, "AllGather"), (3, "INCOMPLETE", "#0-1", None, ""), (4, "Warnings", "", None, "")]


def test_nccl_2_24_layouts() -> None:
    text = ("#0-0 (27a079b828ff1a75) INCOMPLETE\n  Missing communicator data from 2 ranks\n  The missing ranks: 21,22\n\n"
            "#0-0 (27a079b828ff1a75) MISMATCH\n  Communicator ranks have different status\n"
            "  26 ranks have status UNKNOWN\n  The unknown ranks: 3,4,5\n  Rank 6 has status INIT\n"
            "  Communicator ranks have different collective operation counts\n"
            "  26 ranks have launched up to operation 6650\n  6 ranks have launched up to operation 6649\n"
            "  Rank 0 -- GPU 0 managed by process 483072 on node 172.16.64.210\n"
            "#1-0 (9e17999afaa87dbb) INCOMPLETE\n  Missing communicator data from 1 rank\n  The missing rank: 2\n")
    st = ras.parse_ras(text)
    assert [(r["rank"], r["section"], r["comm"], r["status"], r["launched"], r["op"]) for r in st.ranks] == [
        (21, "INCOMPLETE", "#0-0", "", None, ""), (22, "INCOMPLETE", "#0-0", "", None, ""),
        (3, "MISMATCH", "#0-0", "UNKNOWN", None, ""), (4, "MISMATCH", "#0-0", "UNKNOWN", None, ""),
        (5, "MISMATCH", "#0-0", "UNKNOWN", None, ""), (6, "MISMATCH", "#0-0", "INIT", None, ""),
        (0, "MISMATCH", "#0-0", "", 6649, "collective"), (2, "INCOMPLETE", "#1-0", "", None, "")]
    assert st.mismatched_ops == ["collective"] and st.majority_launched == 6650
    assert st.incomplete == [{"comm": "#0-0", "missing": 2}, {"comm": "#1-0", "missing": 1}]
    assert st.statuses == [{"comm": "#0-0", "count": 26, "status": "UNKNOWN"}]
    assert "The missing rank: 2" in st.lines and "Rank 6 has status INIT" in st.lines
    assert {r["error"] for r in st.ranks} == {""} and {r["node"] for r in st.ranks[:6]} == {""}
    assert "Missing communicator data from 1 rank" in st.lines


def test_2_24_rank_lists_stand_on_their_own() -> None:
    st = ras.parse_ras("  The unknown ranks: 7,9\n  Rank 5,6 has status FINALIZE\n  The missing rank: 4\n")
    assert [(r["rank"], r["status"], r["error"], r["pid"], r["gpu"]) for r in st.ranks] == [
        (7, "UNKNOWN", "", None, ""), (9, "UNKNOWN", "", None, ""), (5, "FINALIZE", "", None, ""),
        (6, "FINALIZE", "", None, ""), (4, "", "", None, "")]


def test_an_uneven_job_summary_and_its_outlier_node() -> None:
    text = ("Job summary\n===========\n\n  Nodes  Processes         GPUs\n          per node  per process\n"
            "      3          8            1\n      1          7            1\n\n"
            "  Nodes  Processes         GPUs\n(total)    (total)      (total)\n      4         31           31\n\n"
            "The outlier node:\n  Node 10.20.0.14 running processes 71300,71301,71302,71303,71304,71305,71306\n")
    st = ras.parse_ras(text)
    assert st.uneven and st.job == {"nodes": 4, "processes": 31, "gpus": 31}
    assert st.outlier_nodes == [{"node": "10.20.0.14", "pids": [71300, 71301, 71302, 71303, 71304, 71305, 71306]}]
    assert st.lines == ["Node 10.20.0.14 running processes 71300,71301,71302,71303,71304,71305,71306"]
    gpus = ras.parse_ras("  Nodes  Processes\n          per node\n      4          8\n\n         Processes         GPUs\n"
                         "                    per process\n                30            1\n                 2            2\n")
    assert gpus.uneven and gpus.job == {}


def test_numbers_without_a_table_header_are_not_a_job() -> None:
    st = ras.parse_ras("      4          8            1         32       32\n")
    assert st.job == {} and not st.uneven and not st.recognised
    odd = ras.parse_ras("(total)   per node  per process    (total)  (total)\n      4          8\n")
    assert odd.job == {} and not odd.uneven


def test_no_communicators_and_a_single_process() -> None:
    st = ras.parse_ras("Communicators... (0.001s)\n=============\n\nNo communicator data collected!\n\n"
                       "INCOMPLETE\n  Missing communicator data from 1 job process\n"
                       "  [could not find information on 1 process]\n\nDEAD\n"
                       "  1 job process is considered dead (unreachable via the RAS network)\n")
    assert st.no_comms and st.missing_count == 1 and st.unknown_processes == 1 and st.dead_count == 1
    assert st.lines[0] == "No communicator data collected!"
    assert st.missing_processes == [] and st.recognised and not st.empty


def test_monitor_mode_text_events() -> None:
    text = ("RAS Monitor Mode - watching for peer changes (Ctrl+C to exit)...\n"
            "================================================================\n"
            "[2026-02-03 09:14:07] PEER_NEW: Process 88120 on node 10.20.0.15 managing GPUs 0,1 \n"
            "[2026-02-03 09:15:40] PEER_DEAD: Process 88121 on node 10.20.0.15 managing GPU 2 \n"
            "[2026-02-03 09:15:41] PEER_DEAD: 10.20.0.16<28028> connection lost\n")
    st = ras.parse_ras(text)
    assert st.monitor and st.recognised and st.lines == []
    assert [(e["event"], e["pid"], e["node"], e["gpus"]) for e in st.events] == [
        ("PEER_NEW", 88120, "10.20.0.15", "0,1"), ("PEER_DEAD", 88121, "10.20.0.15", "2"),
        ("PEER_DEAD", None, "10.20.0.16<28028>", "")]
    assert st.events[1]["text"].endswith("PEER_DEAD: Process 88121 on node 10.20.0.15 managing GPU 2")
    assert ras.parse_ras("RAS Monitor Mode - watching for peer changes (Ctrl+C to exit)...\n").recognised


@pytest.mark.parametrize("line, error", [
    ("Connecting to 127.0.0.1:28028: Connection refused", "Connection refused"),
    ("Resolving gpu-x:28028: Name or service not known", "Name or service not known"),
    ("Failed to connect to the NCCL RAS service!", "Failed to connect to the NCCL RAS service!"),
    ("NCCL unexpectedly closed the connection", "NCCL unexpectedly closed the connection"),
    ("Connection timed out; retrying...", "Connection timed out"),
    ("Connection timed out", "Connection timed out"),
    ("Connection closed by the NCCL job.", "Connection closed by the NCCL job."),
    ("Unexpected response from NCCL: ERROR: Unknown command X", "ERROR: Unknown command X"),
])
def test_client_errors(line: str, error: str) -> None:
    st = ras.parse_ras(line + "\n")
    assert st.client_error == error and st.recognised and st.lines == [line]


def test_a_successful_connection_is_not_an_error() -> None:
    assert ras.parse_ras("Connecting to 127.0.0.1:28028: success\n").client_error == ""


def _json_rank(rank: int, counts: dict[str, int], **status: object) -> dict:
    st = {"init_state": 0, "async_error": 0, "finalize_called": False, "destroy_flag": False, "abort_flag": False}
    st.update(status)
    return {"rank": rank, "host": f"10.20.0.{11 + rank // 8}", "pid": 7000 + rank, "cuda_dev": rank % 8,
            "nvml_dev": rank % 8, "status": st, "collective_counts": counts}


def _json_status(ranks: list[dict], missing: list[dict] | None = None, timeouts: int = 0) -> str:
    doc = {"nccl_version": "2.29.2", "cuda_runtime_version": 13000, "cuda_driver_version": 13000,
           "timestamp": "2026-02-03 09:20:11", "communicators_count": 1,
           "communicators": [{"hash": "0x5d1e", "secondary_hash": "0x1:0x2", "size": len(ranks) + len(missing or []),
                              "ranks_count": len(ranks), "missing_ranks_count": len(missing or []), "ranks": ranks,
                              "missing_ranks": missing or []}],
           "ras": {"collection_time_sec": 0.012, "timeouts_count": timeouts}}
    return json.dumps(doc, indent=2)


def test_json_status_counts_aborts_errors_and_missing_ranks() -> None:
    ops = {"Broadcast": 0, "Reduce": 0, "AllGather": 40, "ReduceScatter": 0, "AllReduce": 900}
    ranks = [_json_rank(r, dict(ops)) for r in range(6)]
    ranks[4]["collective_counts"]["AllReduce"] = 899
    ranks[5] = _json_rank(5, dict(ops), abort_flag=True, async_error=6)
    ranks[3] = _json_rank(3, dict(ops), init_state=2)
    missing = [{"rank": 6, "host": "10.20.0.11", "pid": 7006, "cuda_dev": 6, "nvml_dev": 6,
                "status": {"unresponsive": True, "considered_dead": False}},
               {"rank": 7, "host": "10.20.0.11", "pid": 7007, "cuda_dev": 7, "nvml_dev": 7,
                "status": {"unresponsive": True, "considered_dead": True}}]
    st = ras.parse_ras(_json_status(ranks, missing, timeouts=3))
    assert st.json_form and st.version == "2.29.2" and st.timeouts == 3 and not st.no_comms
    assert st.mismatched_ops == ["AllReduce"] and st.majority_launched == 900
    assert st.counts == [{"comm": "#0 (0x5d1e)", "op": "AllReduce", "count": 5, "launched": 900,
                          "where": "#0 (0x5d1e) MISMATCH AllReduce"},
                         {"comm": "#0 (0x5d1e)", "op": "AllReduce", "count": 1, "launched": 899,
                          "where": "#0 (0x5d1e) MISMATCH AllReduce"}]
    assert st.incomplete == [{"comm": "#0 (0x5d1e)", "missing": 2}]
    assert st.errors == [{"comm": "#0 (0x5d1e)", "kind": "Initialization", "count": 1, "error": "NCCL error 2"},
                         {"comm": "#0 (0x5d1e)", "kind": "Asynchronous", "count": 1, "error": "NCCL error 6"}]
    assert {r["comm"] for r in st.ranks} == {"#0 (0x5d1e)"}
    got = [(r["rank"], r["section"], r["status"], r["error"], r["launched"], r["op"], r["node"], r["pid"], r["gpu"])
           for r in st.ranks]
    assert got == [
        (3, "ERROR", "", "NCCL error 2", None, "", "10.20.0.11", 7003, "3"),
        (5, "MISMATCH", "ABORT", "", None, "", "10.20.0.11", 7005, "5"),
        (5, "ERROR", "", "NCCL error 6", None, "", "10.20.0.11", 7005, "5"),
        (4, "MISMATCH", "", "", 899, "AllReduce", "10.20.0.11", 7004, "4"),
        (6, "INCOMPLETE", "", "", None, "", "10.20.0.11", 7006, "6"),
        (7, "DEAD", "", "", None, "", "10.20.0.11", 7007, "7")]
    assert st.dead_processes == [{"pid": 7007, "node": "10.20.0.11", "gpus": "7"}]
    assert st.quoted["DEAD"] == ['{"rank": 7, "host": "10.20.0.11", "pid": 7007, "cuda_dev": 7, "nvml_dev": 7, '
                                 '"status": {"unresponsive": true, "considered_dead": true}}']
    assert [k for k in st.quoted] == ["#0 (0x5d1e) ERROR", "#0 (0x5d1e) MISMATCH", "#0 (0x5d1e) MISMATCH AllReduce",
                                      "#0 (0x5d1e) INCOMPLETE", "DEAD"]


def test_json_status_healthy_in_progress_and_without_communicators() -> None:
    ops = {"AllReduce": 12, "AllGather": 3}
    st = ras.parse_ras(_json_status([_json_rank(0, ops), _json_rank(1, ops, init_state=7, async_error=7)]))
    assert st.json_form and st.empty and st.recognised and st.counts == [] and st.majority_launched is None
    empty = ras.parse_ras(json.dumps({"nccl_version": "2.28.7", "communicators_count": 0, "communicators": [],
                                      "ras": {"collection_time_sec": 0.0, "timeouts_count": 0}}))
    assert empty.no_comms and empty.empty and empty.timeouts == 0


def test_json_communicator_without_a_hash() -> None:
    doc = {"communicators": [{"ranks": [], "missing_ranks": [{"rank": 1, "status": {"unresponsive": True}}]}]}
    st = ras.parse_ras(json.dumps(doc))
    assert st.incomplete == [{"comm": "#0 (?)", "missing": 1}] and st.ranks[0]["comm"] == "#0 (?)"
    assert st.ranks[0]["node"] == "" and st.ranks[0]["section"] == "INCOMPLETE"


def test_json_counts_ties_and_odd_values() -> None:
    st = ras.parse_ras(_json_status([_json_rank(0, {"Reduce": 5}), _json_rank(1, {"Reduce": 6}),
                                     _json_rank(2, {"Reduce": None}), {"rank": 3, "collective_counts": "x"}]))
    assert [(c["op"], c["count"], c["launched"]) for c in st.counts] == [("Reduce", 1, 5), ("Reduce", 1, 6)]
    assert [(r["rank"], r["launched"]) for r in st.ranks] == [(1, 6)]  # the lower of equal groups is the common one


def test_json_monitor_events() -> None:
    events = [{"timestamp": "2026-02-03 09:15:40", "group": "LIFECYCLE", "event": "PEER_DEAD",
               "peer": {"host": "10.20.0.15", "pid": 88121, "cuda_devs": [2, 3], "nvml_devs": [2, 3]}, "details": ""},
              {"timestamp": "2026-02-03 09:15:41", "group": "TRACE", "event": "PEER_CONNECTING",
               "peer": {"addr": "10.20.0.16<28028>"}, "details": ""},
              {"timestamp": "2026-02-03 09:15:42", "group": "LIFECYCLE", "event": "PEER_NEW", "details": ""}]
    text = "\n".join(json.dumps(e, indent=2) for e in events)
    st = ras.parse_ras(text)
    assert [(e["event"], e["pid"], e["node"], e["gpus"]) for e in st.events] == [
        ("PEER_DEAD", 88121, "10.20.0.15", "2,3"), ("PEER_CONNECTING", None, "10.20.0.16<28028>", ""),
        ("PEER_NEW", None, "", "")]
    assert st.events[0]["text"] == ('{"timestamp": "2026-02-03 09:15:40", "group": "LIFECYCLE", "event": "PEER_DEAD", '
                                    '"peer": {"host": "10.20.0.15", "pid": 88121, "cuda_devs": [2, 3], '
                                    '"nvml_devs": [2, 3]}, "details": ""}')
    assert st.json_form and st.recognised


@pytest.mark.parametrize("text", ["{", "{\"communicators\": [1, {\"ranks\": [2, {\"rank\": \"x\"}]}]}",
                                  "[1, 2]", "{\"a\": 1} {\"event\": 3}", "{\"communicators\": null}"])
def test_odd_json_never_raises(text: str) -> None:
    st = ras.parse_ras(text)
    assert isinstance(st, ras.RasStatus)


def test_json_that_is_not_ras_is_read_as_text() -> None:
    assert ras.parse_ras_json('{"a": 1}') is None and ras.parse_ras_json("no json") is None
    odd = ras.parse_ras('{"name": "x", "communicators": 2}')
    assert odd.json_form and odd.no_comms and odd.empty
    st = ras.parse_ras('{"communicators": [], "nccl_version": "2.28.7"} trailing\nNo communicator data collected!\n')
    assert st.json_form and st.no_comms


@pytest.mark.parametrize("text", [HEALTHY, BROKEN, "Communicators... (0.01s)\n",
                                  "Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors\n",
                                  "#2-0 (00aa) MISMATCH\n", "#0-1 (bb) INCOMPLETE\n", "#3-0 (cc) ERROR\n",
                                  "RAS Monitor Mode - watching for peer changes (Ctrl+C to exit)...\n",
                                  "  Missing communicator data from 4 job processes\n",
                                  "  1 job process is considered dead (unreachable via the RAS network)\n",
                                  "[2026-02-03 09:15:40] PEER_DEAD: Process 1 on node n managing GPU 0\n",
                                  "Failed to connect to the NCCL RAS service!\n",
                                  '{\n  "communicators_count": 0,\n  "communicators": []\n}\n',
                                  '{\n  "event": "PEER_DEAD",\n  "peer": {}\n}\n',
                                  "NCCL unexpectedly closed the connection\n", "Connection closed by the NCCL job.\n",
                                  "Unexpected response from NCCL: ERROR: Invalid timeout value x\n",
                                  "(total)   per node  per process    (total)  (total)\n",
                                  "(total)    (total)      (total)\n", "  Node 10.0.0.7 running processes 11,12\n",
                                  "  Node 10.0.0.7 running process 11\n",
                                  "  Encountered 2 communication timeouts while gathering communicator data\n"])
def test_detected(text: str) -> None:
    assert ras.detect(Doc(text))
    assert ras.detect(Doc("".join(f"3: {ln}\n" for ln in text.splitlines())))  # srun -l labels peeled


@pytest.mark.parametrize("text", ["step 1 loss 2.0\n", "Errors\n======\n", "call (x) ERROR\n", "#0-0 (zz) MISMATCH\n",
                                  "RuntimeError: Communicators... not ready\n", "Missing communicator data from many\n",
                                  "PEER_DEAD: maybe\n", '"communicators_count": x\n', "Failed to connect\n",
                                  "(total) per day\n", "Node x running processes fast\n",
                                  "Encountered timeouts while gathering communicator data\n"])
def test_not_detected(text: str) -> None:
    assert not ras.detect(Doc(text))


def test_looks_like_ras_on_raw_text() -> None:
    assert ras.looks_like_ras("x\nErrors\n======\n") and ras.looks_like_ras("Communicators... (0.1s)")
    assert ras.looks_like_ras("Group  Comms  Nodes  Ranks\n") and ras.looks_like_ras("#0-3 (a1) ERROR\n")
    assert ras.looks_like_ras('{"nccl_version": "2.28.7", "communicators_count": 0}')
    assert ras.looks_like_ras('{"event": "PEER_DEAD"}')
    assert not ras.looks_like_ras('{"nccl_version": "2.28.7"}') and not ras.looks_like_ras("#0-3 (a1) ERROR x\n")
    assert not ras.looks_like_ras("Errors\n------\n") and not ras.looks_like_ras("step 1 loss 2.0")


def test_parse_reads_the_peeled_lines_of_a_doc() -> None:
    doc = Doc("".join(f"gpu017: {ln}\n" for ln in BROKEN.splitlines()))
    st = ras.parse(doc)
    assert st.dead_count == 2 and [r["rank"] for r in st.ranks][:2] == [21, 30]


@pytest.mark.parametrize("text", ["", "\n\n", "Rank x -- GPU", "#0-0 (ab) MISMATCH\nRank 1 -- [process information not found]",
                                  "Node  running processes", "\x00\x01garbage", "12 ranks have status BOGUS"])
def test_garbage_never_raises(text: str) -> None:
    st = ras.parse_ras(text)
    assert isinstance(st.empty, bool) and isinstance(st.recognised, bool)
