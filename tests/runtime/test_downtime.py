"""preflight.runtime.downtime on run directories written in the runtime's real formats (events,
heartbeats, hang and crash records, the preemption marker, as a torchrun restart of
examples/train_resilient.py leaves them): the last good step, the cause, the lost time, and
the odd cases (a torn line, no heartbeats, a clock that runs backwards, several restarts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from preflight.runtime import downtime as dt
from preflight.runtime.events import EventWriter, read_events

T0 = 1_795_675_500.0  # an epoch second; every time below is T0 + offset


class Run:
    """Writes a run directory the way the runtime layer does (the same keys, one JSON line per event)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def event(self, t: float, rank: int, check: str, status: str, summary: str, step: int | None = None,
              node: str | None = None, more: dict[str, Any] | None = None, **facts: Any) -> None:
        rec = {"check": check, "node": node or f"n{rank + 1}", "status": status, "summary": summary,
               "evidence": [], "remedy": "", "facts": {**facts, **(more or {})}, "source": "runtime", "time": T0 + t, "rank": rank,
               "step": step}
        with (self.root / f"events-rank{rank}.jsonl").open("a") as fh:
            fh.write(json.dumps(rec) + "\n")

    def start(self, t: float, ranks: int, step: int, restart: int = 0) -> None:
        for r in range(ranks):
            self.event(t, r, "runtime.train", "pass", f"rank {r} resumed at step {step}", step, start_step=step,
                       world_size=ranks, restart=restart)

    def heartbeat(self, rank: int, t: float, step: int, elapsed: float | None, state: str = "running") -> None:
        (self.root / f"heartbeat-rank{rank}.json").write_text(json.dumps({
            "rank": rank, "host": f"n{rank + 1}", "pid": 100 + rank, "start_ticks": 1, "step": step,
            "section": "step" if elapsed is not None else None, "section_elapsed_s": elapsed, "time": T0 + t,
            "state": state}))

    def hang(self, rank: int, t: float, step: int, elapsed: float, suspects: list[int]) -> None:
        (self.root / f"hang-rank{rank}.json").write_text(json.dumps({
            "rank": rank, "host": f"n{rank + 1}", "pid": 100 + rank, "section": "step", "step": step,
            "elapsed_s": elapsed, "timeout_s": 3.0, "timeout_kind": "auto", "time": T0 + t, "exit_code": 75,
            "suspects": suspects, "stale": suspects, "behind": suspects,
            "peers": [{"rank": s, "host": f"n{s + 1}", "stale": True} for s in suspects]}))
        self.event(t, rank, "runtime.watchdog", "fail", f"rank {rank} hung in section 'step' at step {step}",
                   step, suspects=suspects, ran_ms=int(elapsed * 1000))
        self.event(t + 2, rank, "runtime.exit", "fail", f"rank {rank} ended on a hang (exit code 75)", step,
                   how="hang", exit_code=75)

    def crash(self, rank: int, t: float, step: int, etype: str, message: str) -> None:
        (self.root / f"crash-rank{rank}.json").write_text(json.dumps({
            "rank": rank, "host": f"n{rank + 1}", "pid": 100 + rank, "time": T0 + t,
            "exception": {"type": etype, "message": message, "module": "builtins"}, "stack": [],
            "thread": "MainThread", "step": step, "section": "step"}))
        self.event(t, rank, "runtime.crash", "fail", f"rank {rank} crashed at step {step}", step,
                   exception_type=etype, message=message)
        self.event(t, rank, "runtime.exit", "fail", f"rank {rank} ended on an exception", step, how="exception",
                   exit_code=1)

    def clean(self, t: float, ranks: int, step: int) -> None:
        for r in range(ranks):  # as preflight.runtime.resilience ends: "finished" (start_step in it), then the exit
            self.event(t, r, "runtime.train", "pass", f"rank {r} finished {step} steps", step, more={"step": step},
                       start_step=0, world_size=ranks, stop_checks=1)
            self.event(t, r, "runtime.exit", "pass", f"rank {r} ended cleanly", step, how="clean", exit_code=0)


def _hang_then_restart(run: Run) -> None:
    """4 ranks; rank 2 (on n3) stops in step 120; rank 0 and 1's watchdogs fire 3.5 s into step 120
    (started at t=60); torchrun restarts and the ranks resume at step 100 at t=75."""
    run.start(0, 4, 0)
    run.event(50, 0, "runtime.checkpoint", "pass", "checkpoint step 100 saved", 100, world_size=4)
    run.hang(0, 63.5, 120, 3.5, [2])
    run.hang(1, 63.6, 120, 3.6, [2])
    run.start(75, 4, 100, restart=1)


def test_a_hang_then_restart_is_measured_from_the_stuck_steps_start_to_the_resume(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    _hang_then_restart(run)
    inc = dt.last_good(run.root, before=T0 + 74)
    assert inc is not None and inc.cause == "hang" and inc.ranks == [2] and inc.nodes == ["n3"]
    assert inc.last_good == pytest.approx(T0 + 60.0) and inc.step == 120 and inc.world_size == 4
    n = dt.measure(inc, training_again_at=T0 + 101.0, world_size=4, step=100, cost_per_gpu_hour=2.5)
    assert n["lost_s"] == pytest.approx(41.0) and n["gpu_hours"] == pytest.approx(4 * 41.0 / 3600, abs=1e-6)
    assert n["cost"] == pytest.approx(4 * 41.0 / 3600 * 2.5, abs=1e-3) and n["currency"] == "$"
    assert (n["from_step"], n["resumed_step"], n["steps_redone"]) == (120, 100, 20)
    text = dt.describe(n)
    assert text.startswith("lost 41.0 s (0.0456 GPU-h, $0.11) to a hang of rank 2 on n3: last good step 120")
    assert text.endswith("training again at step 100")


def test_after_the_fact_the_incident_runs_to_the_next_attempts_start(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    _hang_then_restart(run)
    run.clean(130, 4, 200)
    doc = dt.incidents(dt.read_run_dir(run.root), run_dir="R")
    [n] = doc["incidents"]
    # training again at t=75 (step 100); the first record past the failed step 120 is the clean end
    # (step 200 at t=130): at that pace step 120 ended at t=86.55; the redone steps are lost work too
    assert n["cause"] == "hang" and n["lost_s"] == pytest.approx(26.55) and n["until"] == "training again"
    assert n["redo_s"] == pytest.approx(11.55) and n["steps_redone"] == 20
    assert n["incident"] == f"R@{T0 + 60.0:.3f}" and not n.get("open")
    assert doc["total"]["by_cause"]["hang"]["incidents"] == 1 and doc["total"]["by_node"]["n3"]["lost_s"] == 26.55


def test_the_redone_steps_count_when_a_record_shows_training_passed_the_failed_step(tmp_path: Path) -> None:
    """A fault between checkpoints: checkpoint at step 100 (t=50), rank 2 stops in step 120 (t=60),
    training again at step 100 (t=75); an event at step 125 (t=100) is the first record past step
    120: at that pace (25 steps in 25 s) step 120 ended at t=96: lost = 96 - 60 = 36 s (the 15 s
    gap and the 21 s of the steps redone, the failed one included), not 15 s."""
    run = Run(tmp_path / "run")
    _hang_then_restart(run)
    run.event(86, 0, "runtime.checkpoint", "pass", "checkpoint step 120 saved", 120, world_size=4)
    run.event(100, 0, "runtime.straggler", "pass", "no straggler", 125)
    [n] = dt.incidents(dt.read_run_dir(run.root), run_dir="R")["incidents"]
    assert n["lost_s"] == pytest.approx(36.0) and n["redo_s"] == pytest.approx(21.0)
    assert n["passed_failed_step_at"] == pytest.approx(T0 + 96.0) and n["steps_redone"] == 20
    assert "past step 120 again 21.0 s later (redone steps counted)" in dt.describe(n)
    # nothing past the failed step yet: the gap only, and the note says the redone steps are not in it
    run2 = Run(tmp_path / "run2")
    _hang_then_restart(run2)
    [m] = dt.incidents(dt.read_run_dir(run2.root), run_dir="R")["incidents"]
    assert m["lost_s"] == pytest.approx(15.0) and m["redo_s"] is None
    assert any("redone step(s) (100 to 120) are not in the lost time" in x for x in m["notes"])


def test_the_loops_call_after_each_step_measures_once_past_the_failed_step(tmp_path: Path) -> None:
    """Downtime.training_again after every step: nothing until the failed step (120) is passed."""
    run = Run(tmp_path / "run")
    _hang_then_restart(run)
    written: list[dict[str, Any]] = []

    class Events:
        def emit(self, check: str, status: str, summary: str, **kw: Any) -> dict[str, Any]:
            written.append({"check": check, "summary": summary, **kw})
            return written[-1]

    down = dt.Downtime(run.root, events=Events(), world_size=4, rank=0, cost_per_gpu_hour=0.0, started=T0 + 74)
    assert down.training_again(100, at=T0 + 76) is None  # the first step: training again, not yet past
    assert down.training_again(119, at=T0 + 90) is None and not written
    n = down.training_again(120, at=T0 + 91)
    assert n is not None and n["lost_s"] == pytest.approx(31.0) and n["redo_s"] == pytest.approx(15.0)
    assert n["training_again_at"] == pytest.approx(T0 + 76) and n["resumed_step"] == 100
    assert down.training_again(121, at=T0 + 92) is None and len(written) == 1


def test_a_killed_rank_is_the_cause_not_the_peer_that_lost_its_connection(tmp_path: Path) -> None:
    """SIGKILL (the OOM killer) leaves no record; the peer's exception is a consequence."""
    run = Run(tmp_path / "run")
    run.start(0, 2, 0)
    run.event(9, 0, "runtime.checkpoint", "pass", "checkpoint step 20 saved", 20, world_size=2)
    run.crash(0, 10.3, 32, "RuntimeError", "[pair.cc:537] Read error [127.0.0.1]:1450: Connection reset by peer")
    inc = dt.last_good(run.root, before=T0 + 12)
    assert inc is not None and inc.cause == "killed" and inc.signal == "SIGKILL" and inc.ranks == [1]
    assert inc.nodes == ["n2"] and "killed by a signal" in inc.detail and inc.last_good == pytest.approx(T0 + 10.3) and inc.step == 32


def test_a_real_crash_names_the_first_raiser(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    run.start(0, 3, 0)
    run.crash(1, 20.0, 30, "ValueError", "bad batch")
    run.crash(2, 20.5, 30, "RuntimeError", "Connection closed by peer")
    run.event(21, 0, "runtime.exit", "warn", "rank 0 was terminated by SIGTERM", 30, how="signal", exit_code=-15)
    inc = dt.last_good(run.root)
    assert inc is not None and (inc.cause, inc.ranks, inc.nodes) == ("crash", [1], ["n2"])
    assert inc.detail == "ValueError: bad batch" and inc.stopped_at == pytest.approx(T0 + 20.0)


def test_a_preemption_names_no_node(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    run.start(0, 2, 0)
    run.heartbeat(0, 30.0, 40, 0.2)
    (run.root / "preempted").write_text(json.dumps({"step": 41, "time": T0 + 31, "world_size": 2,
                                                    "signal": "SIGUSR1", "rank": 1}))
    inc = dt.last_good(run.root, before=T0 + 600)
    assert inc is not None and inc.cause == "preempted" and inc.nodes == [] and inc.ranks == [1]
    assert inc.detail == "SIGUSR1 on rank 1" and inc.last_good == pytest.approx(T0 + 29.8) and inc.step == 40
    n = dt.measure(inc, training_again_at=T0 + 629.8, world_size=2, step=41)
    assert n["lost_s"] == pytest.approx(600.0) and n["cost"] is None and "$" not in dt.describe(n)


def test_no_previous_attempt_and_a_clean_one_are_no_incident(tmp_path: Path) -> None:
    assert dt.last_good(tmp_path / "absent") is None
    run = Run(tmp_path / "run")
    assert dt.last_good(run.root) is None
    run.start(0, 2, 0)
    run.clean(10, 2, 50)
    assert dt.last_good(run.root) is None
    assert dt.incidents(dt.read_run_dir(run.root))["incidents"] == []


def test_heartbeats_say_when_the_stopped_step_began_and_this_attempts_files_are_ignored(tmp_path: Path) -> None:
    """No hang record (the ranks were ended from outside): the heartbeats of the previous attempt
    give the step start; a heartbeat this attempt already wrote (after `before`) is not taken."""
    run = Run(tmp_path / "run")
    run.start(0, 2, 0)
    run.heartbeat(0, 40.0, 70, 5.0)  # in step 70 since t=35
    run.heartbeat(1, 41.0, 70, 6.5)  # since t=34.5
    run.event(41.5, 0, "runtime.exit", "warn", "rank 0 was terminated by SIGTERM", 70, how="signal",
              exit_code=-15)
    run.event(41.5, 1, "runtime.exit", "warn", "rank 1 was terminated by SIGTERM", 70, how="signal",
              exit_code=-15)
    inc = dt.last_good(run.root, before=T0 + 50)
    assert inc is not None and inc.cause == "killed" and inc.signal == "SIGTERM" and inc.ranks == [0, 1]
    assert inc.last_good == pytest.approx(T0 + 35.0) and inc.step == 70
    run.heartbeat(0, 60.0, 0, 0.1)  # the new attempt's rank 0 beat before rank 1 looked
    inc = dt.last_good(run.root, before=T0 + 50)
    assert inc is not None and inc.last_good == pytest.approx(T0 + 34.5)


def test_no_heartbeats_the_last_event_with_a_step_is_the_last_good(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    run.start(0, 2, 0)
    run.event(30, 0, "runtime.checkpoint", "pass", "checkpoint step 50 saved", 50, world_size=2)
    run.event(80, 0, "runtime.exit", "warn", "rank 0 was terminated by SIGTERM", 90, how="signal", exit_code=-15)
    inc = dt.last_good(run.root, before=T0 + 100)
    assert inc is not None and inc.last_good == pytest.approx(T0 + 30) and inc.step == 50
    assert inc.cause == "killed" and inc.ranks == [1]  # rank 1 left no end: the one killed from outside
    assert inc.signal == "SIGKILL"


def test_a_torn_line_and_a_corrupt_record_are_named_and_the_rest_is_used(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    _hang_then_restart(run)
    with (run.root / "events-rank3.jsonl").open("a") as fh:
        fh.write('{"check": "runtime.straggler", "node": "n4", "sta')  # a line cut by a kill
    (run.root / "crash-rank3.json").write_text("{not json")
    inc = dt.last_good(run.root, before=T0 + 74)
    assert inc is not None and inc.cause == "hang" and inc.ranks == [2]
    assert "events-rank3.jsonl: 1 unreadable line (torn or not an event), left out" in inc.notes
    assert any(x.startswith("crash-rank3.json: not JSON") for x in inc.notes)


def test_a_clock_that_runs_backwards_is_clamped_and_said(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    _hang_then_restart(run)
    inc = dt.last_good(run.root, before=T0 + 74)
    assert inc is not None
    n = dt.measure(inc, training_again_at=T0 + 50.0, world_size=4, step=100)
    assert n["lost_s"] == 0.0 and n["gpu_hours"] == 0.0
    assert any(x.startswith("clock: training again at") and "clamped to 0" in x for x in n["notes"])


def test_several_restarts_are_several_incidents_and_their_total(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    _hang_then_restart(run)  # incident 1: t=60 -> 75 (15 s)
    run.crash(3, 200.0, 400, "ValueError", "nan in batch")  # incident 2: t=200 -> 230 (30 s)
    run.start(230, 4, 300, restart=2)
    run.crash(1, 400.0, 500, "ValueError", "nan again")  # incident 3: never trained again, to the job's end
    doc = dt.incidents(dt.read_run_dir(run.root), run_dir="R", end=T0 + 460.0, end_label="job end",
                       cost_per_gpu_hour=3.6)
    got = [(n["cause"], n["ranks"], n["lost_s"], n["until"]) for n in doc["incidents"]]
    # the redone steps at each attempt's pace: attempt 2 ran steps 100 -> 400 in t=75 -> 200, so
    # step 120 ended at t=83.75; attempt 3 ran 300 -> 500 in t=230 -> 400: step 400 ended at 315.85
    assert got == [("hang", [2], 23.75, "training again"), ("crash", [3], 115.85, "training again"),
                   ("crash", [1], 60.0, "job end")]
    assert doc["incidents"][-1]["open"] is True
    tot = doc["total"]
    assert tot["incidents"] == 3 and tot["lost_s"] == 199.6
    assert tot["gpu_hours"] == pytest.approx(4 * 199.6 / 3600, abs=1e-5)
    assert tot["cost"] == pytest.approx(4 * 199.6 / 3600 * 3.6, abs=1e-3)
    assert tot["by_cause"]["crash"]["incidents"] == 2 and set(tot["by_node"]) == {"n2", "n3", "n4"}


def test_the_runtimes_own_measure_is_taken_as_is_and_counted_once(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    _hang_then_restart(run)
    inc = dt.last_good(run.root, before=T0 + 74)
    n = dt.measure(inc, training_again_at=T0 + 76.0, world_size=4, step=100, run_dir="R")
    ev = dt.emit(EventWriter(run.root, rank=0, node="n1"), n)
    assert ev is not None and ev["check"] == "runtime.downtime" and ev["status"] == "warn"
    [written] = [e for e in read_events(run.root) if e["check"] == "runtime.downtime"]
    assert written["facts"]["lost_s"] == 16.0 and written["summary"].startswith("lost 16.0 s")
    doc = dt.incidents(dt.read_run_dir(run.root), run_dir="R")
    assert [(n["lost_s"], n["source"]) for n in doc["incidents"]] == [(16.0, "runtime")]
    dt.emit(EventWriter(run.root, rank=0, node="n1"), n)  # the same measure written twice
    doc = dt.incidents(dt.read_run_dir(run.root), run_dir="R")
    assert [(n["lost_s"], n["source"]) for n in doc["incidents"]] == [(16.0, "runtime")]


def test_an_in_process_restart_gives_the_cause_it_knows() -> None:
    n = dt.measure(None, training_again_at=T0 + 3.0, world_size=4, step=10, cause="crash", nodes=["n2"],
                   ranks=[1], last_good_at=T0, run_dir="R")
    assert (n["cause"], n["nodes"], n["ranks"], n["lost_s"], n["incident"]) == ("crash", ["n2"], [1], 3.0,
                                                                              f"R@{T0:.3f}")


def test_emit_never_raises() -> None:
    class Broken:
        def emit(self, *a: Any, **k: Any) -> None:
            raise OSError("disk full")

    assert dt.emit(Broken(), dt.measure(None, training_again_at=T0, world_size=1, step=0)) is None


def test_the_price_comes_from_the_environment_or_the_config_file(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text('gpu_hour_cost = 2.5\ncurrency = "EUR"\n')
    monkeypatch.delenv(dt.PRICE_ENV, raising=False)
    monkeypatch.setenv("PREFLIGHT_CONFIG", str(cfg))
    assert dt.price_from_config() == (2.5, "EUR")
    monkeypatch.setenv(dt.PRICE_ENV, "4")
    assert dt.price_from_config() == (4.0, "$")
    monkeypatch.setenv(dt.PRICE_ENV, "cheap")
    assert dt.price_from_config() == (None, "$")
    monkeypatch.delenv(dt.PRICE_ENV)
    cfg.write_text('gpu_hour_cost = -1\n')
    assert dt.price_from_config() == (None, "$")
    assert dt.check_price(-1)[2].startswith("gpu_hour_cost must be a number")
    assert dt.money_text(12.5, "EUR") == "12.50 EUR" and dt.money_text(0.14, "$") == "$0.14"


def test_an_in_process_restart_event_is_an_incident_when_the_runtime_measured_none(tmp_path: Path) -> None:
    """preflight.runtime.inprocess writes runtime.restart (the failed ranks, their hosts, the time from
    the detection to the re-formed group); the processes go on, so no exit or crash record."""
    run = Run(tmp_path / "run")
    run.start(0, 4, 0)
    run.heartbeat(0, 39.0, 30, 2.0)  # step 30 began at t=37; rank 3 killed meanwhile
    run.event(41.0, 0, "runtime.restart", "warn", "in-process restart 1 (generation 1): rank 3 ...", 30,
              failed=[{"rank": 3, "host": "n4", "pid": 7, "cause": "process gone"}], detect_to_reform_s=1.5,
              old_world_size=4, new_world_size=4, more={"step": 30})
    run.clean(90, 4, 100)
    [n] = dt.incidents(dt.read_run_dir(run.root), run_dir="R")["incidents"]
    assert (n["cause"], n["ranks"], n["nodes"], n["resumed_step"], n["world_size"]) == ("killed", [3], ["n4"], 30, 4)
    assert n["lost_s"] == pytest.approx(4.0) and n["detail"] == "process gone"


def test_a_long_events_file_is_read_from_its_tail_only(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    run.start(0, 1, 0)
    with (run.root / "events-rank0.jsonl").open("a") as fh:
        for i in range(20000):
            fh.write(json.dumps({"check": "runtime.straggler", "node": "n1", "status": "pass", "summary": "x" * 40,
                                 "facts": {}, "time": T0 + 1 + i * 0.001, "rank": 0, "step": i}) + "\n")
    size = (run.root / "events-rank0.jsonl").stat().st_size
    [f] = [f for f in dt.read_run_dir(run.root) if f.name == "events-rank0.jsonl"]
    assert size > dt.TAIL_BYTES and len(f.data) == dt.TAIL_BYTES
    recs = dt.parse([f])
    assert recs.problems == [] or recs.problems[0].endswith("left out")  # the cut first line at most


def test_the_loops_two_calls_measure_the_previous_stop_once_on_rank_0(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(dt.PRICE_ENV, raising=False)
    monkeypatch.setenv("PREFLIGHT_CONFIG", str(tmp_path / "absent.toml"))
    run = Run(tmp_path / "run")
    _hang_then_restart(run)  # its restart at t=75 is the attempt starting now
    ev = EventWriter(run.root, rank=0, node="n1")
    down = dt.Downtime(run.root, events=ev, world_size=4, rank=0, started=T0 + 74.0, cost_per_gpu_hour=1.0)
    assert down.incident is not None and down.incident.cause == "hang"
    assert down.training_again(100, at=T0 + 80.0) is None  # training again; the failed step 120 not yet passed
    n = down.training_again(120, at=T0 + 95.0)
    assert n is not None and n["lost_s"] == 35.0 and n["cost"] == pytest.approx(4 * 35 / 3600, abs=1e-4)
    assert n["training_again_at"] == T0 + 80.0 and n["redo_s"] == 15.0
    assert down.training_again(121, at=T0 + 96.0) is None  # once
    assert [e["facts"]["lost_s"] for e in read_events(run.root) if e["check"] == "runtime.downtime"] == [35.0]
    other = dt.Downtime(run.root, events=EventWriter(run.root, rank=1), world_size=4, rank=1, started=T0 + 74.0)
    assert other.incident is None and other.training_again(100) is None
    fresh = dt.Downtime(tmp_path / "new", events=None, world_size=4, rank=0)
    assert fresh.incident is None and fresh.training_again(0) is None and fresh.price is None
    n = fresh.restarted(last_good_at=T0, step=7, cause="signal", nodes=["n2"], ranks=[1], at=T0 + 2.5)
    assert n is not None and (n["cause"], n["lost_s"], n["resumed_step"]) == ("signal", 2.5, 7)
