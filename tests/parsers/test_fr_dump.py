"""preflight.parsers.flight_recorder: per-rank dumps (JSON and pickle), their odd shapes, the -j view."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest

from preflight.parsers import flight_recorder as fr


def entry(seq: int, op: str = "nccl:all_reduce", **kw: Any) -> dict[str, Any]:
    e = {"record_id": seq - 1, "pg_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": seq,
         "p2p_seq_id": 0, "op_id": seq, "profiling_name": op, "time_created_ns": 1_700_000_000_000_000_000 + seq,
         "input_sizes": [[1024]], "output_sizes": [[1024]], "state": "completed", "retired": True,
         "timeout_ms": 600000, "is_p2p": False,
         "frames": [{"name": "all_reduce", "filename": "distributed_c10d.py", "line": 2707}]}
    e.update(kw)
    return e


def dump(entries: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"version": "2.7", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
                         "pg_status": {"0": {"last_enqueued_collective": 3, "last_started_collective": 3,
                                             "last_completed_collective": 2}}, "entries": entries}
    d.update(kw)
    return d


def test_json_dump_entries_groups_and_status() -> None:
    d = fr.parse_fr_dump(json.dumps(dump([entry(1), entry(2), entry(3, state="scheduled", retired=False)])),
                         "fr-rank2.json")
    assert (d.rank, d.version, d.backend, d.problem) == (2, "2.7", "nccl", "")
    e = d.entries[2]
    assert (e.seq, e.op, e.profiling_name, e.state, e.retired, e.pg, e.pg_desc) == (
        3, "all_reduce", "nccl:all_reduce", "scheduled", False, "0", "default_pg")
    assert (e.is_p2p, e.p2p_seq, e.time_created_ns, e.timeout_ms, e.input_sizes) == (
        False, 0, 1_700_000_000_000_000_003, 600000, [[1024]])
    assert e.frames == ["all_reduce (distributed_c10d.py:2707)"]
    assert e.to_dict() == {"seq": 3, "op": "all_reduce", "state": "scheduled", "retired": False, "pg": "0",
                           "pg_desc": "default_pg", "time_created_ns": 1_700_000_000_000_000_003, "timeout_ms": 600000,
                           "input_sizes": [[1024]]}
    assert d.pg_ranks == {"0": [0, 1, 2, 3]} and d.world() == [0, 1, 2, 3] and d.world("9") == []
    assert d.pg_status == {"0": {"last_enqueued_collective": 3, "last_started_collective": 3,
                                 "last_completed_collective": 2}}
    assert [x.seq for x in d.collectives()] == [1, 2, 3] and d.collectives("1") == []
    assert d.last_entered().seq == 3 and d.last_entered("1") is None  # type: ignore[union-attr]
    assert d.at(2).seq == 2 and d.at(9) is None  # type: ignore[union-attr]


def test_pickle_dump_with_integer_status_and_p2p_entries() -> None:
    doc = dump([entry(1), entry(1, "nccl:send 0->1", is_p2p=True, p2p_seq_id=1, collective_seq_id=0),
                entry(2, "all_gather")], pg_status={0: {"last_enqueued_collective": 2, "x": None}})
    d = fr.parse_fr_dump(pickle.dumps(doc), "nccl_trace_rank_3")
    assert d.rank == 3 and [x.seq for x in d.collectives()] == [1, 2]
    assert (d.entries[1].is_p2p, d.entries[1].p2p_seq, d.entries[1].op) == (True, 1, "send 0->1")
    assert (d.entries[2].op, d.entries[2].profiling_name, d.backend) == ("all_gather", "all_gather", "nccl")
    assert d.pg_status == {"0": {"last_enqueued_collective": 2}}


def test_gloo_quirks_group_keyed_by_empty_name_and_string_ranks() -> None:
    doc = dump([entry(1, "gloo:all_reduce", process_group=["0", ""])],
               pg_config={"": {"name": "", "desc": "", "ranks": "[0, 1]"}})
    d = fr.parse_fr_dump(json.dumps(doc))
    assert d.rank is None and d.backend == "gloo" and d.pg_ranks == {"0": [0, 1]}
    named = dump([entry(1, process_group=["7", "tp"])], pg_config={"tp_group": {"desc": "tp", "ranks": [4, 5]}})
    assert fr.parse_fr_dump(json.dumps(named)).pg_ranks == {"7": [4, 5]}
    unknown = dump([entry(1, process_group=["7", "tp"])], pg_config={"3": {"desc": "dp", "ranks": [0, 2]}})
    assert fr.parse_fr_dump(json.dumps(unknown)).pg_ranks == {"3": [0, 2]}


@pytest.mark.parametrize("pg, pg_id, want_id, want_desc", [
    (None, 4, "4", ""), (["5"], None, "5", ""), ("oops", 2, "2", ""), ([], 3, "3", ""), (None, None, "", ""),
])
def test_entries_name_their_group_every_way(pg: Any, pg_id: Any, want_id: str, want_desc: str) -> None:
    e = entry(1)
    del e["process_group"], e["pg_id"]
    if pg is not None:
        e["process_group"] = pg
    if pg_id is not None:
        e["pg_id"] = pg_id
    [x] = fr.parse_fr_dump(json.dumps(dump([e]))).entries
    assert (x.pg, x.pg_desc) == (want_id, want_desc)


def test_odd_values_are_dropped_not_raised() -> None:
    e = entry(1, collective_seq_id="x", time_created_ns=0, retired="yes", input_sizes=None, frames=["bad", {}],
              timeout_ms=True)
    [x] = fr.parse_fr_dump(json.dumps(dump([e, "junk", 3]))).entries
    assert (x.seq, x.time_created_ns, x.retired, x.input_sizes, x.timeout_ms) == (None, None, None, [], None)
    assert x.frames == ["? (?:?)"]
    d = fr.parse_fr_dump(json.dumps(dump([entry(1)], pg_config={"0": "x", "1": {"ranks": "0, 1"}}, pg_status=[1])))
    assert d.pg_ranks == {"1": [0, 1]} and d.pg_status == {}
    assert fr.parse_fr_dump(json.dumps(dump([entry(1)], pg_config=[1, 2]))).pg_ranks == {}


@pytest.mark.parametrize("data, problem", [
    (b"[1, 2]", "neither a JSON nor a pickle flight-recorder dump"),
    (b"  {not json", "not valid JSON"),
    ("{\"entries\": [], \"version\": \"2.7\"}", "the dump holds no entries (flight recorder off: set TORCH_FR_BUFFER_SIZE)"),
    (b"\x80\x04\x95garbage", "not a readable pickle"),
    (pickle.dumps([1, 2]), "dump is not a mapping"),
    (json.dumps({"entries": {"a": 1}}).encode(), "the dump holds no entries"),
])
def test_unreadable_dumps_say_why(data: bytes | str, problem: str) -> None:
    d = fr.parse_fr_dump(data, "fr-rank0.json")
    assert d.problem.startswith(problem) and d.entries == []


def test_a_dump_whose_entries_are_all_junk_is_not_called_empty() -> None:
    d = fr.parse_fr_dump(json.dumps(dump(["junk"])))
    assert d.entries == [] and d.problem == ""


def test_pickle_never_loads_code() -> None:
    class Evil:
        def __reduce__(self) -> tuple[Any, ...]:
            return (print, ("x",))

    d = fr.parse_fr_dump(pickle.dumps({"entries": [Evil()]}))
    assert "refusing to load builtins.print" in d.problem


def test_text_dumps_with_odd_bytes_decode_with_replacement() -> None:
    raw = json.dumps(dump([entry(1, profiling_name="nccl:all_reduce")])).encode() + b"\n"
    bad = raw.replace(b"default_pg", b"default\xffpg")
    d = fr.parse_fr_dump(bad)
    assert d.entries[0].pg_desc == "default\ufffdpg"


@pytest.mark.parametrize("name, rank", [
    ("fr-rank12.json", 12), ("nccl_trace_rank_7", 7), ("/x/y/rank3.log", 3), ("trace_5", 5), ("C:\\dumps\\rank_4", 4),
    ("rank1/fr-rank9.pkl", 9), ("notes.txt", None), ("dump-11.bin", 11), ("RANK-2", 2), ("", None),
])
def test_rank_from_file_names(name: str, rank: int | None) -> None:
    assert fr.rank_from_name(name) == rank


def test_ranks_list_every_shape() -> None:
    assert fr._ranks_list("[0, 1, 2]") == [0, 1, 2]
    assert fr._ranks_list("0,1,-2") == [0, 1, -2]
    assert fr._ranks_list((3, "4", "x", True)) == [3, 4]
    assert fr._ranks_list(None) == [] and fr._ranks_list("") == []


def test_side_by_side_columns() -> None:
    a = "all_reduce(input_sizes=[[4]], state=completed)"
    b = "broadcast(input_sizes=[[4]], state=scheduled)"
    w = 51
    lines = ["noise before", f"{'Rank 0':<{w}}{'Rank 1':<{w}}Rank 2", "-" * 48 + "   " + "-" * 48,
             f"{a:<{w}}{a:<{w}}{a}", "", f"{b:<{w}}{b}", f"{'not an entry':<{w}}{b}"]
    sbs = fr.parse_side_by_side(lines)
    assert sbs is not None and sbs.ranks == [0, 1, 2] and sbs.header.startswith("Rank 0")
    assert sbs.entries == {0: [a, b], 1: [a, b, b], 2: [a]}
    assert sbs.behind == [0, 2]
    assert fr.parse_side_by_side(["Rank 0 only"]) is None
    assert fr.SideBySide().behind == []


def test_side_by_side_with_a_column_header_only() -> None:
    sbs = fr.parse_side_by_side(["  Rank 3    Rank 10  "])
    assert sbs is not None and sbs.ranks == [3, 10] and sbs.entries == {3: [], 10: []} and sbs.behind == []
