"""Pure parsers: flight-recorder dumps (JSON, pickle, gloo quirks), fr_trace, RAS, py-spy, rank logs, Slurm."""

from __future__ import annotations

import json
import pickle

from preflight.parsers import flight_recorder, py_spy, ras, slurm_job, torch_log
from tests.triage._bundles import TRIAGE


def _as_pickle(doc: dict) -> bytes:
    """The pickle form of a dump as torch writes it: tuples, None for unset times, int status values."""
    doc = json.loads(json.dumps(doc))
    for e in doc["entries"]:
        e["process_group"] = tuple(e["process_group"])
        for k in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            e[k] = e[k] or None
        e["frames"] = [{"name": "all_reduce", "filename": "distributed_c10d.py", "line": 3245}]
    doc["pg_status"] = {k: {kk: int(vv) for kk, vv in v.items()} for k, v in doc["pg_status"].items()}
    return pickle.dumps(doc)


def test_fr_json_gloo_quirks() -> None:
    d = flight_recorder.parse_fr_dump((TRIAGE / "fr_gloo_rank1.json").read_text(), "fr-rank1.json")
    assert d.rank == 1 and not d.problem and d.backend == "gloo"
    assert d.world("0") == [0, 1, 2]  # pg_config keyed by "" in gloo dumps
    last = d.last_entered()
    assert last is not None and (last.seq, last.op, last.retired) == (3, "all_reduce", False)
    assert d.pg_status["0"] == {"last_completed_collective": 2, "last_enqueued_collective": 3,
                                "last_started_collective": -1}
    assert d.at(2) is not None and d.at(2).op == "barrier"  # type: ignore[union-attr]


def test_fr_pickle_same_facts_as_json() -> None:
    doc = json.loads((TRIAGE / "fr_gloo_rank1.json").read_text())
    d = flight_recorder.parse_fr_dump(_as_pickle(doc), "nccl_trace_rank_1")
    assert d.rank == 1 and not d.problem
    assert [(e.seq, e.op) for e in d.entries] == [(1, "all_reduce"), (2, "barrier"), (3, "all_reduce")]
    assert d.entries[0].frames and "distributed_c10d.py:3245" in d.entries[0].frames[0]
    assert d.pg_status["0"]["last_enqueued_collective"] == 3


def test_fr_pickle_with_code_is_refused_not_run() -> None:
    class Evil:
        def __reduce__(self) -> tuple:
            return (print, ("owned",))

    d = flight_recorder.parse_fr_dump(pickle.dumps({"entries": [Evil()]}), "fr-rank0.pkl")
    assert d.problem and "refusing" in d.problem and not d.entries


def test_fr_garbage_and_truncated() -> None:
    assert "neither" in flight_recorder.parse_fr_dump(b"hello", "fr-rank0").problem
    text = (TRIAGE / "fr_gloo_rank1.json").read_text()
    assert "JSON" in flight_recorder.parse_fr_dump(text[: len(text) // 2], "fr-rank1.json").problem
    assert flight_recorder.parse_fr_dump(b"\x80\x04garbage", "x").problem
    assert "no entries" in flight_recorder.parse_fr_dump('{"entries": [], "version": "2.10"}', "fr-rank0.json").problem


def test_rank_from_name() -> None:
    assert flight_recorder.rank_from_name("fr-rank12.json") == 12
    assert flight_recorder.rank_from_name("nccl_trace_rank_7") == 7
    assert flight_recorder.rank_from_name("/x/rank3.log") == 3
    assert flight_recorder.rank_from_name("trace_5") == 5
    assert flight_recorder.rank_from_name("notes.txt") is None


def test_fr_trace_text() -> None:
    found = flight_recorder.parse_fr_trace_text((TRIAGE / "fr_trace_missing_rank.txt").read_text())
    assert [f.kind for f in found] == ["missing", "errors"]
    miss, err = found
    assert (miss.seq, miss.op, miss.missing_ranks, miss.world_size) == (4127, "all_reduce", [13], 16)
    assert miss.group == "0:default_pg" and miss.state == "scheduled"
    assert err.seq == 4130 and err.culprits and err.culprits[0][0] == 13
    assert "COLLECTIVE_STATE_MISMATCH" in err.culprits[0][1]
    assert flight_recorder.parse_fr_trace_text("garbage\nmore") == []


def test_ras_text() -> None:
    text = (TRIAGE / "ncclras_rank_behind.txt").read_text()
    assert ras.looks_like_ras(text)
    st = ras.parse_ras(text)
    assert st.missing_processes == [{"pid": 48211, "node": "10.41.7.23", "gpus": "5"}]
    by = {r["rank"]: r for r in st.ranks}
    assert by[21]["section"] == "INCOMPLETE" and by[21]["node"] == "10.41.7.23"
    assert by[6]["launched"] == 9183 and st.majority_launched == 9184
    assert st.mismatched_ops == ["AllReduce"]
    assert ras.parse_ras("nothing here").empty and not ras.looks_like_ras("step 1 loss 2.0")


def test_py_spy() -> None:
    procs = py_spy.parse_py_spy((TRIAGE / "py_spy_two_ranks.txt").read_text())
    assert [p.pid for p in procs] == [48003, 48004]
    main = procs[0].main_thread()
    assert main is not None and main.state == "idle" and main.frames[0].startswith("wait (")
    assert "save_checkpoint (ckpt.py:91)" in main.frames
    m2 = procs[1].main_thread()
    assert m2 is not None and m2.state == "active+gil" and m2.tid == "0x7F3A11C2B740"
    assert m2.frames == ["_next_batch (data.py:57)", "train (train.py:219)", "<module> (train.py:301)"]
    assert py_spy.parse_py_spy("") == [] and py_spy.parse_py_spy("Thread 1 (idle)\n  x (y:1)") == []


def test_rank_log_crash_secondary_and_signal() -> None:
    log = torch_log.parse_rank_log((TRIAGE / "rank3_crash.log").read_text())
    assert len(log.crashes) == 1
    c = log.crashes[0]
    assert (c.exception, c.rank, c.secondary) == ("RuntimeError", 3, False)
    assert "invalid for input of size" in c.message
    assert log.failures and (log.failures[0].rank, log.failures[0].exitcode, log.failures[0].host) == (3, 1, "gpu017")
    peer = torch_log.parse_rank_log((TRIAGE / "rank1_peer_closed.log").read_text())
    assert peer.crashes[0].secondary and peer.crashes[0].rank == 1
    kill = torch_log.parse_rank_log((TRIAGE / "rank5_sigkill.log").read_text())
    f = kill.failures[0]
    assert (f.rank, f.exitcode, f.signal, f.pid) == (5, -9, "SIGKILL", 7013)
    assert torch_log.torchrun_time(f.time) is not None
    assert torch_log.parse_rank_log("Traceback (most recent call last):\n").crashes == []


def test_slurm_records() -> None:
    job = slurm_job.parse_scontrol_job("JobId=4242 JobName=exp7 UserId=ana(1001) JobState=RUNNING Reason=None "
                               "StartTime=2026-11-23T09:02:11 EndTime=2026-11-24T09:02:11 NodeList=gpu[017-018] "
                               "ExitCode=0:0")
    assert (job.job_id, job.nodelist, job.start, job.state) == ("4242", "gpu[017-018]", "2026-11-23T09:02:11",
                                                               "RUNNING")
    assert slurm_job.parse_scontrol_job("slurm_load_jobs error: Invalid job id specified").problem
    acct = slurm_job.parse_sacct("4242|gpu[017-018]|2026-11-23T09:02:11|2026-11-23T10:00:00|FAILED|1:0\n")
    assert acct.nodelist == "gpu[017-018]" and acct.state == "FAILED" and acct.end.startswith("2026")
    assert slurm_job.parse_sacct("").problem
    assert slurm_job.parse_scontrol_job("JobId=1 NodeList=(null) StartTime=Unknown").nodelist == ""
