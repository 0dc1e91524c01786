"""Watchdog: section timing, auto timeouts, hang records, and real 4-rank gloo faults."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from preflight.runtime.events import EventWriter, read_events
from preflight.runtime.watchdog import EXIT_HANG, Watchdog, peer_progress, read_heartbeats
from tests.runtime._wd_ranks import init_gloo, kill_all, launch, logs, wait_all

# ----- unit tests (one process) -------------------------------------------------------------


def test_auto_timeout_generous_before_warmup_then_factor_of_longest(tmp_path: Path) -> None:
    wd = Watchdog(tmp_path, warmup_steps=3, auto_factor=5.0, auto_floor_s=0.0, auto_initial_s=900.0, start=False)
    assert wd.timeout_for("step") == (900.0, "warmup")
    for i in range(3):
        with wd.section("step", step=i):
            time.sleep(0.05 if i == 0 else 0.001)  # a slow first step is warm-up, not the baseline
    assert wd.timeout_for("step") == (900.0, "warmup")
    with wd.section("step", step=3):
        time.sleep(0.01)
    timeout, kind = wd.timeout_for("step")
    assert kind == "auto" and timeout is not None
    assert 0.05 <= timeout < 0.2  # 5 x ~10 ms, the 50 ms warm-up step excluded
    wd.auto_floor_s = 30.0
    assert wd.timeout_for("step") == (30.0, "auto")
    assert wd.timeout_for("setup") == (600.0, "fixed")
    assert wd.timeout_for("unknown-section") == (1800.0, "fixed")
    wd.timeouts["eval"] = None
    assert wd.timeout_for("eval") == (None, "off")
    assert wd.step == 3
    wd.close()


def test_nested_section_pauses_parent_clock(tmp_path: Path) -> None:
    wd = Watchdog(tmp_path, start=False)
    with wd.section("step"):
        with wd.section("checkpoint"):
            assert wd._current is not None and wd._current.name == "checkpoint"
            time.sleep(0.2)
        cur = wd._current
        assert cur is not None and cur.name == "step"
        assert time.monotonic() - cur.start < 0.1  # the checkpoint is not charged to the step
    assert wd._current is None
    assert wd._steps_done == 1
    wd.close()


def _fake_beat(run_dir: Path, rank: int, step: int, age: float, state: str = "running") -> None:
    rec = {"rank": rank, "host": f"node{rank}", "step": step, "section": "step", "time": time.time() - age,
           "state": state}
    (run_dir / f"heartbeat-rank{rank}.json").write_text(json.dumps(rec))


def test_peer_progress_names_behind_and_stale() -> None:
    now = 1000.0
    beats: dict[int, dict[str, Any]] = {0: {"rank": 0, "step": 10, "time": now - 0.2, "state": "hang"},
             1: {"rank": 1, "step": 10, "time": now - 9.0},
             2: {"rank": 2, "step": 8, "time": now - 0.1},
             3: {"rank": 3, "step": 4, "time": now - 50, "state": "closed"}}
    p = peer_progress(beats, now, stale_after_s=1.5, self_rank=0)
    assert p["stale"] == [1]
    assert p["behind"] == [2]
    assert p["suspects"] == [1]  # a stale rank outranks one a step behind
    assert p["max_step"] == 10
    del beats[1]
    assert peer_progress(beats, now, stale_after_s=1.5, self_rank=0)["suspects"] == [2]


def test_hang_fires_writes_record_and_event(tmp_path: Path) -> None:
    fired = threading.Event()
    records: list[dict[str, Any]] = []

    def on_hang(rec: dict[str, Any]) -> None:
        records.append(rec)
        fired.set()

    _fake_beat(tmp_path, 1, 7, age=30.0)  # stale peer
    _fake_beat(tmp_path, 2, 5, age=0.0)  # live peer, behind
    wd = Watchdog(tmp_path, timeouts={"step": 0.3}, rank=0, poll_s=0.05, heartbeat_interval_s=0.1, stale_after_s=2.0,
                  exit_on_hang=False, on_hang=on_hang)
    start = time.monotonic()
    with wd.section("step", step=7):
        assert fired.wait(5.0), "watchdog did not fire"
    took = time.monotonic() - start
    wd.close()
    assert 0.3 <= took < 1.5
    rec = json.loads((tmp_path / "hang-rank0.json").read_text())
    assert rec["section"] == "step" and rec["step"] == 7 and rec["rank"] == 0
    assert rec["elapsed_s"] >= 0.3 and rec["timeout_s"] == 0.3  # fired past 0.3 s, recorded to the ms
    assert rec["stale"] == [1] and rec["behind"] == [2] and rec["suspects"] == [1]
    main = next(v for k, v in rec["stacks"].items() if k.startswith("MainThread"))
    assert any("test_hang_fires_writes_record_and_event" in line for line in main)
    assert "flight_recorder" in rec
    ev = [e for e in read_events(tmp_path) if e["check"] == "runtime.watchdog"]
    assert len(ev) == 1 and ev[0]["status"] == "fail"
    assert ev[0]["facts"]["suspects"] == [1] and ev[0]["facts"]["timeout_ms"] == 300
    assert "rank 1" in ev[0]["summary"] and ev[0]["remedy"]
    assert records and records[0]["section"] == "step"


def test_heartbeat_mode_checkpoint_between_steps_is_no_false_alarm(tmp_path: Path) -> None:
    wd = Watchdog(tmp_path, timeouts={"step": 0.3, "checkpoint": 5.0}, poll_s=0.05, exit_on_hang=False)
    for step in range(10):
        time.sleep(0.01)
        wd.heartbeat(step)
        if step == 4:
            with wd.section("checkpoint"):
                time.sleep(0.6)
    time.sleep(0.1)
    wd.close()
    assert wd.fired is None
    assert wd.step == 9
    beat = read_heartbeats(tmp_path)[wd.rank]
    assert beat["state"] == "closed" and beat["step"] == 9


def test_heartbeat_mode_fires_when_steps_stop(tmp_path: Path) -> None:
    wd = Watchdog(tmp_path, timeouts={"step": 0.2}, poll_s=0.05, exit_on_hang=False)
    wd.heartbeat(0)
    deadline = time.monotonic() + 5
    while wd.fired is None and time.monotonic() < deadline:
        time.sleep(0.05)
    wd.close()
    assert wd.fired is not None and wd.fired["section"] == "step"


def test_monitor_fault_is_logged_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    wd = Watchdog(tmp_path, timeouts={"step": 0.2}, poll_s=0.02, heartbeat_interval_s=0.0, exit_on_hang=False,
                  start=False)

    def broken(state: str = "running") -> None:
        raise RuntimeError("disk on fire")

    wd._write_heartbeat = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="preflight.runtime"):
        wd._thread.start()
        with wd.section("step"):
            time.sleep(0.2)
        wd._stop.set()
        wd._thread.join(2)
    assert wd.monitor_faults >= 1
    assert "monitor fault" in caplog.text


def test_unwritable_run_dir_never_raises(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    wd = Watchdog(blocker / "sub", timeouts={"step": 5}, poll_s=0.02, exit_on_hang=False,
                  events=EventWriter(blocker / "sub", rank=0))
    with wd.section("step"):
        time.sleep(0.1)
    wd.close()
    assert wd.fired is None


# ----- real: 4 gloo ranks -------------------------------------------------------------------


def rank_train(argv: list[str]) -> None:
    """One rank: steps of sleep + all_reduce under a Watchdog with an auto step timeout."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--step-ms", type=float, default=10.0)
    ap.add_argument("--floor", type=float, default=1.0)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--ckpt-at", type=int, default=-1)
    ap.add_argument("--ckpt-s", type=float, default=0.0)
    ap.add_argument("--max-s", type=float, default=60.0)
    ap.add_argument("--initial", type=float, default=20.0, help="the step timeout before warm-up")
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-step", type=int, default=-1)
    ap.add_argument("--slow-s", type=float, default=0.0)
    ap.add_argument("--slow-busy", action="store_true", help="the slow step spins the CPU in Python, not sleeps")
    a = ap.parse_args(argv)
    wd = Watchdog(a.run_dir, timeouts={"step": "auto", "checkpoint": 10.0}, warmup_steps=a.warmup,
                  auto_factor=5.0, auto_floor_s=a.floor, auto_initial_s=a.initial, exit_grace_s=1.0)
    from preflight.runtime import crash

    crash.install(a.run_dir, watchdog=wd)
    import torch
    import torch.distributed as dist

    with wd.section("setup"):
        init_gloo()
    rank = dist.get_rank()
    t = torch.ones(1024)
    deadline = time.monotonic() + a.max_s
    for step in range(a.steps):
        if time.monotonic() > deadline:
            break
        with wd.section("step", step=step):
            time.sleep(a.step_ms / 1000)
            if rank == a.slow_rank and step == a.slow_step:  # a slow step of a live rank (compiling)
                _busy(a.slow_s) if a.slow_busy else time.sleep(a.slow_s)
            dist.all_reduce(t)
            if step == a.ckpt_at:  # nested in the step: every rank, rank 0 writes slowly
                with wd.section("checkpoint"):
                    if rank == 0:
                        time.sleep(a.ckpt_s)
                    dist.barrier()
        if step == a.ckpt_at + 50:  # between steps
            with wd.section("checkpoint"):
                if rank == 0:
                    time.sleep(a.ckpt_s)
                dist.barrier()
    timeout, kind = wd.timeout_for("step")
    wd.close()
    (a.run_dir / f"done-rank{rank}.json").write_text(json.dumps({"timeout": timeout, "kind": kind,
                                                                "steps": wd.step}))
    dist.barrier()
    dist.destroy_process_group()


def _busy(seconds: float) -> None:
    """Spin the CPU in Python (the GIL taken and given back as a training step's Python does)."""
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += sum(i * i for i in range(200))


def stop_rank_3_at(run: Path, procs: list[subprocess.Popen[bytes]], step: int, rank: int = 3) -> float:
    """SIGSTOP `rank` as soon as its heartbeat reaches `step` (bounded: 60 s); the time of the stop."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        beat = read_heartbeats(run).get(rank)
        if beat and int(beat.get("step") or 0) >= step:
            break
        assert all(p.poll() is None for p in procs), logs(run)
        time.sleep(0.02)
    else:
        pytest.fail("ranks did not start\n" + logs(run))
    os.kill(procs[rank].pid, signal.SIGSTOP)
    return time.time()


@pytest.mark.real
def test_sigstopped_rank_is_named_by_every_other_rank(tmp_path: Path) -> None:
    run = tmp_path / "run"
    procs = launch("tests.runtime.test_watchdog:rank_train", 4,
                   ["--run-dir", str(run), "--steps", "100000", "--floor", "2.0", "--max-s", "40"], run)
    try:
        stopped_at = stop_rank_3_at(run, procs, 30)  # past warm-up
        rcs = wait_all(procs[:3], timeout=30)
    finally:
        kill_all(procs)
    assert rcs == [EXIT_HANG] * 3, logs(run)
    for rank in range(3):
        rec = json.loads((run / f"hang-rank{rank}.json").read_text())
        assert rec["section"] == "step" and rec["timeout_kind"] == "auto", rec
        assert rec["timeout_s"] >= 2.0
        assert rec["time"] - stopped_at <= rec["timeout_s"] + 2.0, (rec["time"] - stopped_at, rec["timeout_s"])
        assert 3 in rec["stale"] and rec["suspects"] == [3], rec["peers"]
        fr = rec["flight_recorder"]
        assert fr.get("entries", 0) > 0, fr
        assert "all_reduce" in str(fr["last"]["op"])
        assert (run / f"fr-rank{rank}.json").is_file()
    assert not (run / "hang-rank3.json").exists()
    events = [e for e in read_events(run) if e["check"] == "runtime.watchdog"]
    assert sorted(e["rank"] for e in events) == [0, 1, 2]
    assert all(e["facts"]["suspects"] == [3] for e in events)


def sigstop_before_warmup(run: Path, step_timeout: float = 5.0, at_step: int = 5, world: int = 4) -> dict[str, Any]:
    """`world` gloo ranks, a 20-step warm-up with a 600 s warm-up timeout and `step_timeout` as
    the step's floor; the last rank is SIGSTOPped at `at_step`. Returns the ranks' exit codes,
    the hang records and the detection latency of each waiting rank (hang record time - SIGSTOP
    time)."""
    last = world - 1
    procs = launch("tests.runtime.test_watchdog:rank_train", world,
                   ["--run-dir", str(run), "--steps", "100000", "--step-ms", "100", "--max-s", "60",
                    "--floor", str(step_timeout), "--warmup", "20", "--initial", "600"], run)
    try:
        stopped_at = stop_rank_3_at(run, procs, at_step, rank=last)
        rcs = wait_all(procs[:last], timeout=step_timeout + 30)
        try:
            stopped_rc: int | None = procs[last].wait(timeout=10)
        except subprocess.TimeoutExpired:  # still stopped: reported as None
            stopped_rc = None
    finally:
        kill_all(procs)
    recs = {r: json.loads(p.read_text()) for r, p in ((r, run / f"hang-rank{r}.json") for r in range(world))
            if p.exists()}
    return {"rcs": rcs, "stopped_rc": stopped_rc, "pid": procs[last].pid, "records": recs,
            "latency": [recs[r]["time"] - stopped_at for r in sorted(recs)]}


@pytest.mark.real
def test_sigstop_before_warmup_is_detected_within_the_step_timeout(tmp_path: Path) -> None:
    """SIGSTOP at step 5 of a 20-step warm-up (warm-up timeout 600 s, step timeout 5 s): the
    peers see the stopped rank's heartbeat go stale while they wait in the step and fire within
    the step timeout + 2 s, naming it with its pid and host; one of them ends it (same host, its
    start time and RANK checked) so that no launcher waits for it; every rank's end is recorded."""
    run = tmp_path / "run"
    got = sigstop_before_warmup(run, step_timeout=5.0)
    assert got["rcs"] == [EXIT_HANG] * 3, logs(run)
    assert got["stopped_rc"] == -signal.SIGKILL, logs(run)  # ended by a peer's watchdog, not left stopped
    assert sorted(got["records"]) == [0, 1, 2]
    for rec in got["records"].values():
        assert rec["section"] == "step" and rec["timeout_kind"] == "peer-stale", rec
        assert rec["timeout_s"] == 5.0 and rec["step"] < 20  # still in warm-up
        assert rec["suspects"] == [3], rec["peers"]
        stuck = next(p for p in rec["peers"] if p["rank"] == 3)
        assert stuck["pid"] == got["pid"] and stuck["host"] == rec["host"]
    # the waiting ranks entered that step a moment before the SIGSTOP: a little under 5 s is possible
    assert all(4.0 <= t <= 5.0 + 2.0 for t in got["latency"]), got["latency"]
    exits = {e["rank"]: e for e in read_events(run) if e["check"] == "runtime.exit"}
    assert sorted(exits) == [0, 1, 2]
    assert all(e["facts"]["how"] == "hang" and e["facts"]["exit_code"] == EXIT_HANG for e in exits.values())
    assert any("ended stopped rank 3" in e["summary"] for e in exits.values()), exits
    print(f"\nSIGSTOP at step 5 of warm-up, step timeout 5 s: detected after "
          f"{', '.join(f'{t:.2f}' for t in got['latency'])} s")


@pytest.mark.real
@pytest.mark.parametrize("step_timeout", [2.0, 3.0])
def test_sigstop_before_warmup_honours_a_step_timeout_under_5s(tmp_path: Path, step_timeout: float) -> None:
    """A step timeout under 5 s is the detection time before warm-up too: SIGSTOP one of 3
    ranks at step 5 of the warm-up; the two others write their hang records once their step has
    been open for the step timeout (never before), not after a fixed 5 s of silence (before the
    fix: timeout 5.0 s in the record, latency >= 4.9 s)."""
    run = tmp_path / "run"
    got = sigstop_before_warmup(run, step_timeout=step_timeout, world=3)
    assert got["rcs"] == [EXIT_HANG] * 2, logs(run)
    assert got["stopped_rc"] == -signal.SIGKILL, logs(run)
    assert sorted(got["records"]) == [0, 1]
    for rec in got["records"].values():
        assert rec["timeout_kind"] == "peer-stale" and rec["step"] < 20, rec
        assert rec["timeout_s"] == step_timeout, rec  # the step timeout, not a 5 s minimum
        assert rec["elapsed_s"] >= step_timeout, rec  # never before it
        assert rec["suspects"] == [2], rec["peers"]
    # the waiting ranks may have entered that step a moment before the SIGSTOP (100 ms steps);
    # the upper bound leaves a loaded machine slack and still fails the old 5 s minimum
    assert all(step_timeout - 0.5 <= t <= step_timeout + 1.5 for t in got["latency"]), got["latency"]
    print(f"\nSIGSTOP at step 5 of warm-up, step timeout {step_timeout:g} s: detected after "
          f"{', '.join(f'{t:.2f}' for t in got['latency'])} s")


@pytest.mark.real
def test_busy_live_rank_at_a_2s_step_timeout_is_no_false_alarm(tmp_path: Path) -> None:
    """Before warm-up, with a 2 s step timeout (a 1.5 s staleness), rank 0 spins the CPU in
    Python for 6 s in step 3 while 2 peers wait for it: its monitor thread beats beside the
    training thread, so nobody fires."""
    run = tmp_path / "run"
    procs = launch("tests.runtime.test_watchdog:rank_train", 3,
                   ["--run-dir", str(run), "--steps", "30", "--floor", "2.0", "--warmup", "20",
                    "--initial", "600", "--slow-rank", "0", "--slow-step", "3", "--slow-s", "6", "--slow-busy"], run)
    rcs = wait_all(procs, timeout=90)
    assert rcs == [0, 0, 0], logs(run)
    assert not list(run.glob("hang-rank*.json"))
    assert not [e for e in read_events(run) if e["check"] == "runtime.watchdog"]


@pytest.mark.real
def test_slow_first_step_of_a_live_rank_is_no_false_alarm(tmp_path: Path) -> None:
    """Before warm-up, rank 0 spends 8 s in step 3 (compiling, say) while the others wait for it
    in the all_reduce with a 2 s step floor: its heartbeat stays fresh, so nobody fires."""
    run = tmp_path / "run"
    procs = launch("tests.runtime.test_watchdog:rank_train", 4,
                   ["--run-dir", str(run), "--steps", "40", "--floor", "2.0", "--warmup", "20",
                    "--initial", "600", "--slow-rank", "0", "--slow-step", "3", "--slow-s", "8"], run)
    rcs = wait_all(procs, timeout=90)
    assert rcs == [0, 0, 0, 0], logs(run)
    assert not list(run.glob("hang-rank*.json"))
    assert not [e for e in read_events(run) if e["check"] == "runtime.watchdog"]


@pytest.mark.real
def test_a_pause_of_the_whole_job_is_no_false_alarm(tmp_path: Path) -> None:
    """Every rank SIGSTOPped for 4 s in its warm-up and continued (what `scontrol suspend` and
    `resume` do to a job), with a 2 s step floor: on resume each rank's monitor finds its peers'
    beats 4 s old, but it was paused as long itself, so nobody fires and the job finishes.
    Before the fix every rank that resumed first took the others for stopped (exit 75)."""
    run = tmp_path / "run"
    procs = launch("tests.runtime.test_watchdog:rank_train", 4,
                   ["--run-dir", str(run), "--steps", "300", "--step-ms", "20", "--floor", "2.0",
                    "--warmup", "1000", "--initial", "600", "--max-s", "80"], run)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # every rank past step 10 (bounded)
            beats = read_heartbeats(run)
            if len(beats) == 4 and all(int(b.get("step") or 0) >= 10 for b in beats.values()):
                break
            assert all(p.poll() is None for p in procs), logs(run)
            time.sleep(0.02)
        else:
            pytest.fail("ranks did not start\n" + logs(run))
        for p in procs:
            os.kill(p.pid, signal.SIGSTOP)
        time.sleep(4.0)
        for p in procs:
            os.kill(p.pid, signal.SIGCONT)
        rcs = wait_all(procs, timeout=90)
    finally:
        kill_all(procs)
    assert rcs == [0, 0, 0, 0], logs(run)
    assert not list(run.glob("hang-rank*.json"))
    assert not [e for e in read_events(run) if e["check"] == "runtime.watchdog"]


def test_time_this_monitor_lost_is_not_a_peers_silence(tmp_path: Path) -> None:
    """A gap in the monitor's own polls (less the one poll it waits) and a forward step of the
    wall clock are taken off a peer's silence; a normal poll, a late one under two polls and a
    backward step are not; a peer silent since long before the pause is still stopped."""
    wd = Watchdog(tmp_path, rank=0, start=False, flight_recorder=False, auto_floor_s=2.0, poll_s=0.25)
    assert wd.peer_stale_s == 1.5
    wd._started_wall = time.time() - 100
    wd._step = 10
    now = time.time()
    wd._note_pause(50.0, now - 4.4)
    wd._note_pause(50.25, now - 4.15)  # a normal poll
    wd._note_pause(50.7, now - 3.7)  # late by 0.2 s: under two polls, nothing lost
    assert not wd.pauses
    wd._note_pause(50.7 + 3.7, now)  # paused: 3.7 s since the last poll, one poll of it waited anyway
    assert len(wd.pauses) == 1 and wd.pauses[0][1] == pytest.approx(3.45)
    assert wd.paused_since(now - 3.0) == pytest.approx(3.0)  # a pause that began before: from then on
    assert wd.paused_since(now - 10.0) == pytest.approx(3.45)
    assert wd.paused_since(now) == 0.0  # after the resume, nothing

    def beat(rank: int, age: float) -> None:
        (tmp_path / f"heartbeat-rank{rank}.json").write_text(json.dumps(
            {"rank": rank, "host": "n", "pid": 1, "step": 10, "section": "step", "time": now - age,
             "state": "running"}))

    beat(1, 3.9)  # beat just before the pause: 3.9 s old, 0.45 s of it while this rank ran
    beat(2, 6.0)  # silent 2.55 s while this rank ran: stopped
    beat(3, 1.0)  # beating
    assert wd._stopped_peers() == [2]

    clock = Watchdog(tmp_path / "c", rank=0, start=False, flight_recorder=False, auto_floor_s=2.0)
    clock._note_pause(10.0, now - 3.25)
    clock._note_pause(10.25, now)  # the wall clock stepped 3 s ahead in a normal poll
    assert [lost for _, lost in clock.pauses] == [pytest.approx(3.0)]
    clock._note_pause(10.5, now - 2.0)  # a backward step makes beats look younger: nothing lost
    clock._note_pause(10.75, now - 1.75 + 0.05)  # a slew under CLOCK_STEP_S
    assert len(clock.pauses) == 1
    wd.close()
    clock.close()


@pytest.mark.real
def test_auto_timeout_clean_run_with_slow_checkpoint_has_no_false_alarm(tmp_path: Path) -> None:
    run = tmp_path / "run"
    procs = launch("tests.runtime.test_watchdog:rank_train", 4,
                   ["--run-dir", str(run), "--steps", "200", "--floor", "2.0", "--ckpt-at", "100",
                    "--ckpt-s", "2.5"], run)
    rcs = wait_all(procs, timeout=90)
    assert rcs == [0, 0, 0, 0], logs(run)
    assert not list(run.glob("hang-rank*.json"))
    assert not [e for e in read_events(run) if e["check"] == "runtime.watchdog"]
    for rank in range(4):
        done = json.loads((run / f"done-rank{rank}.json").read_text())
        assert done["kind"] == "auto" and done["steps"] == 199
        assert done["timeout"] < 20.0  # auto, not the warm-up timeout; 2.5 s checkpoints never fired
    beats = read_heartbeats(run)
    assert sorted(beats) == [0, 1, 2, 3] and all(b["state"] == "closed" for b in beats.values())


_GIL_HOG = """
import re, sys, time
from preflight.runtime.watchdog import Watchdog
wd = Watchdog(sys.argv[1], timeouts={"step": 60}, rank=0, poll_s=0.05, heartbeat_interval_s=0.05,
              gil_backstop_s=1.0, flight_recorder=False)
time.sleep(0.3)
with wd.section("step", step=1):
    re.match(r"(a+)+$", "a" * 64 + "b")  # the regex engine holds the GIL: no thread of ours runs
"""


def test_gil_backstop_dumps_stacks_when_the_monitor_cannot_run(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.runtime._wd_ranks import ROOT

    start = time.monotonic()
    p = subprocess.run([sys.executable, "-c", _GIL_HOG, str(tmp_path)], cwd=ROOT, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True)
    assert p.returncode == 1, p.stderr
    assert time.monotonic() - start < 30
    text = (tmp_path / "stacks-rank0.txt").read_text()
    assert "Timeout" in text and "<string>" in text, text


def test_stopped_peers_are_silent_ranks_in_a_step_at_or_below_ours(tmp_path: Path) -> None:
    wd = Watchdog(tmp_path, rank=0, start=False, flight_recorder=False)
    wd._started_wall = time.time() - 100
    wd._step = 10
    now = time.time()

    def beat(rank: int, step: int, age: float, section: str = "step", state: str = "running") -> None:
        (tmp_path / f"heartbeat-rank{rank}.json").write_text(json.dumps(
            {"rank": rank, "host": "n", "pid": 1, "step": step, "section": section, "time": now - age,
             "state": state}))

    beat(1, 10, 20)  # silent at our step: stopped
    beat(2, 9, 20)  # silent a step behind: stopped
    beat(3, 11, 20)  # silent but ahead of us: moved on, not the one we wait for
    beat(4, 10, 20, section="checkpoint")  # silent in a checkpoint: the checkpoint timeout's business
    beat(5, 10, 1.0)  # beating
    beat(6, 10, 20, state="hang")  # its own watchdog fired: waiting like us
    beat(7, 10, 200)  # from before this run started (a previous attempt)
    assert wd._stopped_peers() == [1, 2]
    wd.auto_floor_s = 30.0  # a silent peer fires only once the step has been open for its floor
    with wd.section("step", step=10):
        assert wd._current is not None and wd.peer_timeout_s(wd._current) == 30.0
    wd.timeouts["step"] = 3.0
    with wd.section("step", step=11):  # the staleness was derived from the 60 s floor at construction
        assert wd._current is not None and wd.peer_timeout_s(wd._current) == wd.peer_stale_s == 5.0
    wd.close()


def test_liveness_timing_scales_under_a_5s_step_floor() -> None:
    from preflight.runtime.watchdog import liveness_timing

    # 5 s and more: a beat every 0.5 s, a record lists a peer stale after 1.5 s, a silent peer
    # stops the step after at most 5 s
    assert liveness_timing(None, 0.25) == (0.5, 1.5, 5.0)
    assert liveness_timing(60.0, 0.25) == (0.5, 1.5, 5.0)
    assert liveness_timing(5.0, 0.25) == (0.5, 1.5, 3.75)
    # under it: the floor decides, with several beats of slack for a live peer
    for floor in (1.0, 2.0, 3.0, 4.0):
        hb, listed, peer = liveness_timing(floor, 0.25)
        period = max(hb, 0.25)
        assert peer <= floor and peer >= 4 * period and peer >= 1.0, (floor, hb, peer)
        assert listed <= peer and hb <= floor / 8 + 1e-9
    assert liveness_timing(2.0, 0.25) == (0.25, 1.5, 1.5)
    assert liveness_timing(3.0, 0.25) == (0.375, 1.5, 2.25)
    # given values are kept; a given stale_after_s is never beyond the peer staleness
    assert liveness_timing(3.0, 0.1, heartbeat_interval_s=0.3) == (0.3, 1.5, 2.25)
    assert liveness_timing(2.0, 0.25, stale_after_s=2.0) == (0.25, 2.0, 2.0)
    assert liveness_timing(2.0, 0.25, peer_stale_s=7.0)[2] == 7.0


@pytest.mark.parametrize("floor", [2.0, 3.0])
def test_step_timeout_under_5s_is_the_peer_timeout(tmp_path: Path, floor: float) -> None:
    """Before the fix the silent-peer rule waited for max(5 s, floor) whatever the floor."""
    wd = Watchdog(tmp_path, auto_floor_s=floor, rank=0, start=False, flight_recorder=False)
    with wd.section("step", step=1):
        assert wd._current is not None and wd._current.timeout_kind == "warmup"
        assert wd.peer_timeout_s(wd._current) == floor
    assert wd.peer_stale_s < floor
    fixed = Watchdog(tmp_path, timeouts={"step": floor}, rank=0, start=False, flight_recorder=False)
    assert fixed.peer_stale_s < floor and fixed.heartbeat_interval_s < 0.5
    wd.close()
    fixed.close()


def test_stuck_peer_kill_checks_host_pid_start_time_and_rank(tmp_path: Path) -> None:
    import subprocess
    import sys

    from preflight.runtime.watchdog import _proc_stat

    wd = Watchdog(tmp_path, rank=0, start=False, flight_recorder=False, stale_after_s=1.0)
    procs = {r: subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                 env=dict(os.environ, RANK=str(r))) for r in (1, 2, 3)}
    try:
        for p in procs.values():
            os.kill(p.pid, signal.SIGSTOP)
        old = time.time() - 30

        def beat(rank: int, pid: int, ticks: Any, host: str | None = None) -> dict[str, Any]:
            rec = {"rank": rank, "host": host or wd.host, "pid": pid, "start_ticks": ticks, "step": 5,
                   "section": "step", "time": old, "state": "running"}
            (tmp_path / f"heartbeat-rank{rank}.json").write_text(json.dumps(rec))
            return {"rank": rank, "host": rec["host"], "pid": pid, "stale": True}

        ticks = {r: (_proc_stat(p.pid) or ("", -1))[1] for r, p in procs.items()}
        peers = [beat(1, procs[1].pid, ticks[1]),  # the stopped rank itself: killed
                 beat(2, procs[2].pid, ticks[2] + 1),  # the pid belongs to a newer process: spared
                 beat(3, procs[2].pid, ticks[2]),  # that process says RANK=2, not 3: spared
                 beat(4, os.getpid(), (_proc_stat(os.getpid()) or ("", -1))[1]),  # ourselves: never
                 beat(5, procs[3].pid, ticks[3], host="elsewhere")]  # another node: named, not killed
        wd._kill_stuck_peers({"peers": peers})
        assert [k["rank"] for k in wd.killed_peers] == [1]
        assert procs[1].wait(timeout=10) == -signal.SIGKILL
        assert procs[2].poll() is None and procs[3].poll() is None
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait(10)
    wd.close()
