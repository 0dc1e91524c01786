"""A torchrun restart that recovered the job: triage names the incident's culprit from the
failed attempt's records, and says the job went on.

Real: torchrun --max-restarts, 4 gloo ranks, checkpoints every 5 steps. In the first attempt
rank 1 SIGSTOPs itself before step 10's all_reduce; the others' watchdogs (3 s step timeout)
write hang records naming it stale, SIGKILL it and exit 75; torchrun restarts the job, which
resumes from the step-10 checkpoint and ends cleanly. The run directory then holds both
attempts at once: the old hang records, the new heartbeats, two runtime.exit per rank.
"""

from __future__ import annotations

import json
import shutil
import socket
import time
from pathlib import Path

import pytest

from preflight.runtime import story
from preflight.triage import attribute as at
from preflight.triage import restarts
from tests.conftest import need
from tests.triage import _job
from tests.triage.test_torchrun_real import _explain, _torch, triage

HOST = socket.gethostname().split(".")[0]
STOP_STEP = 10


def _run(tmp: Path, fault_ranks: str, restarts_: int) -> tuple[Path, Path]:
    need(_torch(), "torch with gloo")
    run, log = tmp / "run", tmp / "torchrun.log"
    p = _job.torchrun(4, ["--run-dir", str(run), "--fault", "stop", "--fault-ranks", fault_ranks,
                          "--fault-step", str(STOP_STEP), "--steps", "24", "--ckpt-every", "5"], run, log,
                      max_restarts=restarts_)
    rc = _job.end(p, timeout=240)
    assert rc == 0, _explain(run, log)
    return run, log


def _ends(run: Path) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for r in range(4):
        for line in (run / f"events-rank{r}.jsonl").read_text().splitlines():
            ev = json.loads(line)
            if ev["check"] == "runtime.exit":
                out.setdefault(r, []).append(ev["facts"])
    return out


@pytest.mark.real
def ev0(doc: dict) -> str:
    return str(doc["evidence"][0])


def test_a_restart_that_recovered_names_the_stopped_rank(tmp_path: Path) -> None:
    t0 = time.monotonic()
    run, log = _run(tmp_path, "1", 1)
    job_s = time.monotonic() - t0
    ends = _ends(run)
    # the drill happened as described: ranks 0, 2, 3 hung then ended cleanly; rank 1 (SIGKILLed
    # while stopped) ended cleanly once; the restart resumed at the checkpoint, not at step 0
    # (a rank torchrun SIGTERMs before its own end is written leaves no runtime.exit for that attempt)
    assert any(e["how"] == "hang" for r in (0, 2, 3) for e in ends.get(r, [])), _explain(run, log)
    assert [e["how"] for e in ends[1]] == ["clean"] and all(ends[r][-1]["how"] == "clean" for r in range(4))
    assert sorted(p.name for p in (run / "ckpt").iterdir() if p.name.startswith("step-"))[-1] == "step-00000020"
    assert all((run / f"hang-rank{r}.json").is_file() for r in (0, 2, 3))
    for variant in ("run dir alone", "with torchrun's log"):
        if variant != "run dir alone":
            shutil.copy(log, run / "launcher.log")
        code, doc, _, took = triage(run)
        t = doc["triage"]
        why = f"{variant}: {t['summary']}\n" + "\n".join(doc["evidence"]) + "\n" + _explain(run, log)
        assert code == 3, why  # a culprit named, and the job recovered
        assert doc["category"] == "communication hang", why
        assert doc["culprits"] == [{"node": HOST, "ranks": [1]}], why
        assert t["collective"] == {"op": "all_reduce", "seq": STOP_STEP + 1}, why
        assert "the job: recovered, finished" in t["summary"], why
        assert "the job recovered, finished: it was restarted once and every rank (4) then ended cleanly" in ev0(doc)
        rec = {k: v for k, v in t["recovery"].items() if k != "story"}
        assert rec == {"restarts": 1, "attempts": 2, "recovered": True, "state": "recovered, finished",
                       "last_step": 23}, why
        assert [(a["cause"], a["ranks"], a["ended"]) for a in t["story"]["attempts"]] == \
            [("hang", [1], "restarted"), ("none", [], "finished")], why
        assert [(i["attempt"], i["category"], i["culprits"]) for i in t["incidents"]] == \
            [(0, "communication hang", [{"node": HOST, "ranks": [1]}])], why
        ev = " ".join(doc["evidence"])
        assert "name rank 1 as stale" in ev and "was ended by rank" in ev, why
        assert t["action"].startswith("nothing to restart"), why
        print(f"\n{variant}: triage {took:.2f} s")
    print(f"job with one restart: {job_s:.1f} s")


@pytest.mark.real
def test_two_incidents_across_restarts_are_each_named_the_latest_last(tmp_path: Path) -> None:
    run, log = _run(tmp_path, "1,2", 2)
    assert all(_ends(run)[r][-1]["how"] == "clean" for r in range(4)), _explain(run, log)
    code, doc, _, _ = triage(run)
    t = doc["triage"]
    why = t["summary"] + "\n" + "\n".join(doc["evidence"]) + "\n" + _explain(run, log)
    assert code == 3 and doc["category"] == "communication hang", why
    assert [(i["attempt"], i["culprits"]) for i in t["incidents"]] == \
        [(0, [{"node": HOST, "ranks": [1]}]), (1, [{"node": HOST, "ranks": [2]}])], why
    assert t["summary"].startswith("communication hang in all_reduce seq 1: rank 2 on"), why
    assert doc["culprits"] == [{"node": HOST, "ranks": [1, 2]}], why
    assert t["recovery"]["restarts"] == 2 and t["recovery"]["state"] == "recovered, finished", why
    lines = [e for e in doc["evidence"] if e.startswith("incident ")]
    assert len(lines) == 2 and "the first run" in lines[0] and "rank 1 on" in lines[0], why
    assert "after restart 1" in lines[1] and "rank 2 on" in lines[1], why


@pytest.mark.real
def test_a_restart_after_a_sigkill_names_the_killed_rank_from_the_launchers_line(tmp_path: Path) -> None:
    """Rank 2 is SIGKILLed in the first attempt (as by the OOM killer) before any peer could
    name it; torchrun's `failed (exitcode: -9) local_rank: 2 (pid: P)` line is the evidence."""
    need(_torch(), "torch with gloo")
    run, log = tmp_path / "run", tmp_path / "torchrun.log"
    p = _job.torchrun(4, ["--run-dir", str(run), "--fault", "kill", "--fault-rank", "2", "--fault-restart", "0",
                          "--fault-step", str(STOP_STEP), "--steps", "24", "--ckpt-every", "5"], run, log,
                      max_restarts=1)
    assert _job.end(p, timeout=240) == 0, _explain(run, log)
    assert "failed (exitcode: -9) local_rank: 2" in log.read_text(), _explain(run, log)
    # the run directory alone: ranks 1 and 3 failed on the lost peer; ranks 0 and 2 left nothing of the
    # first attempt (this job records no start and no world size), so nothing tells which one died
    code, doc, _, _ = triage(run)
    assert (code, doc["category"], doc["culprits"]) == (2, "unknown", []), doc["triage"]["summary"]
    assert doc["triage"]["recovery"]["state"] == "recovered, finished"
    assert doc["triage"]["story"]["attempts"][0]["cause"] == "unknown"
    shutil.copy(log, run / "launcher.log")
    code, doc, _, _ = triage(run)
    t = doc["triage"]
    why = t["summary"] + "\n" + "\n".join(doc["evidence"]) + "\n" + _explain(run, log)
    assert code == 3 and doc["category"] == "software crash", why
    assert doc["culprits"] == [{"node": HOST, "ranks": [2]}], why
    assert t["summary"].startswith(f"rank 2 on {HOST} was killed by a signal (SIGKILL)"), why
    assert "the job: recovered, finished" in t["summary"], why


@pytest.mark.real
def test_a_restarted_job_still_training_is_training_again(tmp_path: Path) -> None:
    """Triage while the restarted job trains: the incident named, the job training again."""
    need(_torch(), "torch with gloo")
    run, log = tmp_path / "run", tmp_path / "torchrun.log"
    p = _job.torchrun(4, ["--run-dir", str(run), "--fault", "stop", "--fault-rank", "1", "--fault-restart", "0",
                          "--fault-step", str(STOP_STEP), "--steps", "100000", "--ckpt-every", "5"], run, log,
                      max_restarts=1)
    try:
        deadline = time.monotonic() + 120
        old = None
        while time.monotonic() < deadline:
            try:
                old = old or {x["rank"]: x["pid"] for x in json.loads((run / "hang-rank0.json").read_text())["peers"]}
                beats = [json.loads((run / f"heartbeat-rank{r}.json").read_text()) for r in range(4)]
                if all(b["pid"] != old[b["rank"]] and (b.get("step") or 0) > STOP_STEP for b in beats):
                    break
            except (OSError, ValueError, KeyError):
                pass
            assert p.poll() is None, _explain(run, log)
            time.sleep(0.2)
        else:
            raise AssertionError("the restarted job did not train again\n" + _explain(run, log))
        code, doc, _, _ = triage(run)
    finally:
        _job.stop(p, run)
    t = doc["triage"]
    why = t["summary"] + "\n" + "\n".join(doc["evidence"]) + "\n" + _explain(run, log)
    assert code == 3 and doc["category"] == "communication hang", why
    assert doc["culprits"] == [{"node": HOST, "ranks": [1]}], why
    assert t["recovery"]["state"] == "recovered, training again" and t["recovery"]["restarts"] == 1, why
    assert "the job: recovered, training again" in t["summary"], why


# ----- the attempts, over hand-made ends (pure) ---------------------------------------------------


def test_attempts_are_told_apart_by_a_rank_seen_with_another_pid() -> None:
    """A job that records no start: a rank seen with another pid has started again; the border is
    half-way between the last sighting of one attempt and the first of the next."""
    recs = story.Records()
    # attempt 1: rank 1 stopped (seen only in a peer's hang record); rank 3 never wrote its end
    recs.sightings = [(0, 100, 5.0), (1, 101, 6.0), (2, 102, 5.5), (3, 103, 9.0), (0, 100, 10.0),
                      (2, 102, 10.5),
                      # attempt 2: new pids; rank 3's first record comes before rank 0's
                      (3, 203, 20.0), (1, 201, 20.5), (0, 200, 21.0), (2, 202, 30.0), (0, 200, 30.1)]
    wins = story._windows(recs)
    assert [(lo, hi) for lo, hi, _ in wins] == [(float("-inf"), 15.25), (15.25, float("inf"))]
    told = story.tell(recs)
    assert [a.index for a in told.attempts] == [1, 2]
    assert {k: v for k, v in told.pid_attempt.items() if k[0] == 3} == {(3, 103): 1, (3, 203): 2}


def test_one_pid_per_rank_is_one_attempt_and_no_restart() -> None:
    recs = story.Records()
    recs.sightings = [(0, 100, 5.0), (1, 101, 6.0), (0, 100, 9.0), (1, 101, 9.5)]
    assert len(story._windows(recs)) == 1
    assert restarts.decide_attempts(None, at.Facts(), story.tell(recs)) is None  # type: ignore[arg-type]


def test_a_window_keeps_a_record_by_its_pid_else_by_its_time() -> None:
    w = at.Window(attempt=1, lo=10.0, hi=30.0, pid_attempt={(0, 100): 0, (0, 200): 1})
    assert w.keeps(0, 35.0, 200) and not w.keeps(0, 20.0, 100)  # the pid decides over the time
    assert w.keeps(1, 20.0) and not w.keeps(1, 10.0) and not w.keeps(1, 31.0)
    assert w.keeps(1, None)  # no time: kept
