"""preflight.runtime.story: a run directory read once into the story of the run, on run
directories written in the runtime's real formats (tests/runtime/test_downtime.py's Run writes
events, heartbeats, hang and crash records the way the runtime layer does)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from preflight.runtime import story
from tests.runtime.test_downtime import T0, Run, _hang_then_restart


def _told(run: Run) -> story.Story:
    return story.tell(story.read_run_dir(run.root), run_dir="R")


def _killed_then_restarted(run: Run) -> None:
    """2 ranks; rank 1 SIGKILLed at t=10 (no record); rank 0 fails on the lost connection;
    the launcher restarts both at step 20 (t=15); both end cleanly at t=30, step 60."""
    run.start(0, 2, 0)
    run.event(9, 0, "runtime.checkpoint", "pass", "checkpoint step 20 saved", 20, world_size=2)
    run.crash(0, 10.3, 32, "RuntimeError", "[pair.cc:537] Read error [127.0.0.1]:1450: Connection reset by peer")
    run.start(15, 2, 20, restart=1)
    run.clean(30, 2, 60)


def test_a_rank_killed_and_a_restart_that_finished_is_recovered_finished(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    _killed_then_restarted(run)
    told = _told(run)
    first, second = told.attempts
    assert (first.index, first.cause, first.signal, first.culprits, first.nodes, first.ended) == \
        (1, "killed", "SIGKILL", [1], ["n2"], "restarted")
    assert (second.index, second.cause, second.culprits, second.ended, second.start_step) == \
        (2, "none", [], "finished", 20)
    assert (told.state, told.recovered) == ("recovered, finished", True)
    assert told.line() == "attempt 1: killed (SIGKILL): rank 1 on n2, restarted; attempt 2: finished; " \
                          "the job: recovered, finished"
    assert [i.index for i in told.incidents()] == [1]
    d = told.to_dict()
    assert d["attempts"][0]["ranks"] == [1] and d["attempts"][0]["failed_step"] == 32 and d["recovered"] is True
    assert [(n["cause"], n["ranks"], n["signal"]) for n in told.downtime["incidents"]] == [("killed", [1], "SIGKILL")]


def test_a_failure_with_no_restart_is_failed_and_a_later_attempt_still_training_is_training_again(
        tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    run.start(0, 2, 0)
    run.crash(1, 10.0, 30, "ValueError", "bad batch")
    told = _told(run)
    assert [(a.cause, a.culprits, a.ended) for a in told.attempts] == [("crash", [1], "failed")]
    assert (told.state, told.recovered) == ("failed", False)
    run.start(20, 2, 20, restart=1)
    run.heartbeat(0, 25.0, 24, 0.1)
    told = _told(run)
    assert [(a.cause, a.ended) for a in told.attempts] == [("crash", "restarted"), ("none", "running")]
    assert told.state == "recovered, training again"


def test_a_run_still_going_is_running_and_a_clean_one_finished(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    run.start(0, 2, 0)
    run.heartbeat(0, 5.0, 10, 0.1)
    told = _told(run)
    assert [(a.cause, a.ended) for a in told.attempts] == [("none", "running")] and told.state == "running"
    run.clean(10, 2, 50)
    told = _told(run)
    assert [(a.cause, a.ended) for a in told.attempts] == [("none", "finished")] and told.state == "finished"
    assert told.downtime["incidents"] == []


def test_replays_verdicts_name_suspect_hardware_and_bad_data_over_the_crashes_they_cause(tmp_path: Path) -> None:
    hw = Run(tmp_path / "hw")
    hw.start(0, 4, 0)
    hw.event(5.0, 0, "runtime.replay", "fail", "suspect hardware on n2: step 17 replayed ...", 17, cause="hardware",
             suspect_ranks=[1], suspect_nodes=["n2"], exit_code=76)
    hw.crash(0, 5.1, 17, "SuspectHardware", "suspect hardware on n2")
    [a] = _told(hw).attempts
    assert (a.cause, a.culprits, a.nodes, a.ended) == ("suspect hardware", [1], ["n2"], "failed")
    assert a.evidence[0].startswith("replay (rank 0): suspect hardware on n2")
    data = Run(tmp_path / "data")
    data.start(0, 4, 0)
    data.event(4.0, 2, "runtime.loss", "fail", "non-finite loss (nan) at step 19 on rank 2", 19, nonfinite=True,
               ranks=[2])
    [b] = _told(data).attempts
    assert (b.cause, b.culprits, b.nodes) == ("bad data", [2], ["n3"]) and "not replayed" in b.detail
    data.event(4.5, 0, "runtime.replay", "fail", "nonfinite-loss at step 19 on rank(s) 2 repeated bit for bit",
               19, cause="data", trigger_ranks=[2], action="stop")
    [c] = _told(data).attempts
    assert (c.cause, c.culprits) == ("bad data", [2]) and "not replayed" not in c.detail  # replay outweighs
    assert c.evidence[0].startswith("replay (rank 0):")


def test_every_rank_ended_by_sigterm_is_a_kill_by_sigterm_and_a_consequence_alone_is_unknown(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    run.start(0, 2, 0)
    for r in (0, 1):
        run.event(10.0, r, "runtime.exit", "warn", f"rank {r} was terminated by SIGTERM", 30, how="signal",
                  exit_code=-15)
    [a] = _told(run).attempts
    assert (a.cause, a.signal, a.culprits, a.members) == ("killed", "SIGTERM", [0, 1], [0, 1])
    lost = Run(tmp_path / "lost")
    lost.start(0, 2, 0)
    lost.crash(0, 10.3, 32, "RuntimeError", "Connection closed by peer")
    lost.event(10.4, 1, "runtime.exit", "fail", "rank 1 ended on an exception", 32, how="exception", exit_code=1)
    lost.crash(1, 10.4, 32, "RuntimeError", "Connection reset by peer")
    [b] = _told(lost).attempts
    assert (b.cause, b.culprits) == ("unknown", []) and "failed on a lost peer" in b.detail


def test_a_preemption_and_an_in_process_restart_end_their_attempts_so(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    run.start(0, 2, 0)
    (run.root / "preempted").write_text(json.dumps({"time": T0 + 20, "signal": "SIGUSR1", "rank": 1,
                                                    "world_size": 2}))
    told = _told(run)
    assert [(a.cause, a.ended) for a in told.attempts] == [("preempted", "preempted")] and told.state == "preempted"
    ip = Run(tmp_path / "ip")
    ip.start(0, 4, 0)
    ip.heartbeat(0, 39.0, 30, 2.0)
    ip.event(41.0, 0, "runtime.restart", "warn", "in-process restart 1 (generation 1): rank 3 ...", 30,
             failed=[{"rank": 3, "host": "n4", "pid": 7, "cause": "process gone"}], detect_to_reform_s=1.5,
             old_world_size=4, new_world_size=4, more={"step": 30})
    ip.clean(90, 4, 100)
    assert [a.ended for a in _told(ip).attempts] == ["in-process restart", "finished"]


def test_a_hang_then_restart_is_a_hang_of_the_stopped_rank(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    _hang_then_restart(run)
    run.clean(130, 4, 200)
    told = _told(run)
    assert [(a.cause, a.culprits, a.nodes, a.ended) for a in told.attempts] == \
        [("hang", [2], ["n3"], "restarted"), ("none", [], [], "finished")]
    assert told.attempts[0].to_dict()["last_good"] == pytest.approx(T0 + 60.0)


@pytest.mark.parametrize(("name", "data", "why"), [
    ("hang-rank1.json", b"", "empty file"),
    ("hang-rank1.json", b"{not json", "not JSON ("),
    ("crash-rank3.json", b"[1, 2]", "not a crash record (a JSON list, not an object)"),
    ("heartbeat-rank2.json", b'{"rank": "two", "time": 1}', "not a heartbeat (no integer 'rank')"),
    ("crash-rank0.json", b'{"rank": 0, "time": 1}', "not a crash record (no 'exception' object)"),
])
def test_a_record_that_cannot_be_used_says_why(name: str, data: bytes, why: str) -> None:
    doc, reason = story.load_record(name, data)
    assert doc is None and reason.startswith(why)


def test_a_record_without_its_rank_takes_the_file_names_and_events_count_torn_lines() -> None:
    doc, why = story.load_record("run/heartbeat-rank5.json", b'{"time": 1.5, "step": 3}')
    assert why == "" and doc is not None and doc["rank"] == 5
    assert story.record_kind("x/events-rank0.jsonl") == "events" and story.record_kind("preempted") == "marker"
    assert story.record_kind("hang-rank2.json") == "hang record" and story.record_kind("notes.txt") == ""
    text = '{"check": "runtime.train", "time": 1}\n{"check": "runtime.straggler", "time": 2}\n{"chec\n[]\n'
    events, torn = story.load_events(text)
    assert [e["check"] for e in events] == ["runtime.train", "runtime.straggler"] and torn == 2
    events, torn = story.load_events(text, frozenset({"runtime.train"}))
    assert [e["check"] for e in events] == ["runtime.train"] and torn == 2
    assert story.load_marker(b"not json") == {} and story.load_marker(b'{"rank": 1}') == {"rank": 1}


def test_the_older_runtimes_signal_reads_as_killed_and_a_rank_seen_again_with_its_pid_is_one_attempt(
        tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    _killed_then_restarted(run)
    run.event(15.5, 0, "runtime.downtime", "warn", "lost 5 s to a kill by a signal of rank 1", 20,
              cause="signal", ranks=[1], nodes=["n2"], lost_s=5.0, incident="R@1.000")
    [n] = _told(run).downtime["incidents"]
    assert (n["cause"], n["source"], n["lost_s"]) == ("killed", "runtime", 5.0)
    recs = story.Records()
    recs.sightings = [(0, 100, 5.0), (1, 101, 6.0), (0, 100, 9.0), (1, 101, 9.5), (1, 101, 12.0)]
    told = story.tell(recs)
    assert len(told.attempts) == 1 and told.pid_attempt == {(0, 100): 1, (1, 101): 1}
    d = told.attempts[0].to_dict()
    assert (d["attempt"], d["start"], d["start_step"], d["members"]) == (1, None, None, [])
    inc = story.Incident(cause="hang", last_good=1.0, step=3, ranks=[2], nodes=["n3"]).to_dict()
    assert (inc["ranks"], inc["nodes"], inc["step"]) == ([2], ["n3"], 3)
