"""The crash recorder: real processes that raise, in the main thread and in other threads."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from preflight.runtime.crash import CrashRecorder, read_crash_records
from preflight.runtime.events import read_events

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, run_dir: Path, rank: int = 2) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "RANK": str(rank), "PYTHONPATH": str(ROOT)}
    script = run_dir.parent / f"{run_dir.name}-job.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run([sys.executable, str(script), str(run_dir)], capture_output=True,
                          text=True, timeout=60, env=env)


def test_uncaught_exception_writes_a_record_and_events(tmp_path: Path) -> None:
    p = _run("""
        import sys
        from preflight.runtime import crash
        from preflight.runtime.watchdog import Watchdog
        wd = Watchdog(sys.argv[1], flight_recorder=False)
        crash.install(sys.argv[1], watchdog=wd)
        for step in range(40):
            with wd.section("step", step=step):
                if step == 30:
                    raise ValueError("loss went sideways")
        """, tmp_path)
    assert p.returncode == 1
    assert "ValueError: loss went sideways" in p.stderr  # the previous hook still prints the traceback
    rec = read_crash_records(tmp_path)[2]
    assert rec["exception"] == {"type": "ValueError", "message": "loss went sideways", "module": "builtins"}
    assert rec["step"] == 30 and rec["section"] == "step" and rec["thread"] == "MainThread"
    assert any("raise ValueError" in ln for ln in rec["stack"])
    events = {e["check"]: e for e in read_events(tmp_path)}
    assert events["runtime.crash"]["status"] == "fail"
    assert events["runtime.crash"]["facts"]["step"] == 30
    assert "rank 2" in events["runtime.crash"]["summary"] and "ValueError" in events["runtime.crash"]["summary"]
    assert events["runtime.exit"]["facts"]["how"] == "exception"
    assert events["runtime.exit"]["facts"]["exit_code"] == 1


def test_an_exception_in_another_thread_is_recorded_and_the_main_one_wins(tmp_path: Path) -> None:
    p = _run("""
        import sys, threading
        from preflight.runtime import crash
        crash.install(sys.argv[1])
        def loader():
            raise OSError("dataset shard missing")
        t = threading.Thread(target=loader, name="loader"); t.start(); t.join()
        raise RuntimeError("NCCL error: unhandled system error")
        """, tmp_path, rank=0)
    assert p.returncode == 1
    rec = read_crash_records(tmp_path)[0]
    assert rec["thread"] == "MainThread" and rec["exception"]["type"] == "RuntimeError"
    crashes = [e for e in read_events(tmp_path) if e["check"] == "runtime.crash"]
    assert [e["facts"]["thread"] for e in crashes] == ["loader", "MainThread"]


def test_keyboard_interrupt_and_clean_exit_write_no_crash(tmp_path: Path) -> None:
    p = _run("""
        import sys
        from preflight.runtime import crash
        rec = crash.install(sys.argv[1])
        rec.exit("clean", exit_code=0)
        rec.exit("signal", signal="SIGTERM")   # only the first end counts
        """, tmp_path)
    assert p.returncode == 0
    assert read_crash_records(tmp_path) == {}
    exits = [e for e in read_events(tmp_path) if e["check"] == "runtime.exit"]
    assert len(exits) == 1 and exits[0]["facts"]["how"] == "clean" and exits[0]["status"] == "pass"


def test_install_is_idempotent_and_uninstall_restores_the_hooks(tmp_path: Path) -> None:
    from preflight.runtime import crash

    before = sys.excepthook
    a = crash.install(tmp_path, rank=5)
    try:
        assert crash.install(tmp_path, rank=6) is a and sys.excepthook != before
    finally:
        a.uninstall()
    assert sys.excepthook == before and crash.installed() is None


def test_record_from_a_try_block_and_unwritable_dir_never_raise(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    rec = CrashRecorder(blocked / "run", rank=1, node="n1")
    try:
        raise ZeroDivisionError("x")
    except ZeroDivisionError as exc:
        out = rec.record(type(exc), exc, exc.__traceback__)
    assert out["exception"]["type"] == "ZeroDivisionError"
    assert rec.events.failed_writes == 1


def test_corrupt_and_foreign_crash_records_are_named_not_raised(tmp_path: Path) -> None:
    (tmp_path / "crash-rank0.json").write_text('{"rank": 0, "exception": {"ty')
    (tmp_path / "crash-rank1.json").write_text(json.dumps([1, 2]))
    (tmp_path / "crash-rankX.json").write_text("{}")
    recs = read_crash_records(tmp_path)
    assert set(recs) == {0, 1}
    assert recs[0]["corrupt"].startswith("not JSON (") and "not a crash record" in recs[1]["corrupt"]


def test_an_exception_after_the_watchdog_fired_ends_as_a_hang(tmp_path: Path) -> None:
    """A peer's connection reset after this rank's watchdog fired: the process exits with the
    watchdog's code, and its exit event says hang with that code."""
    p = _run("""
        import sys, time
        from preflight.runtime import crash
        from preflight.runtime.watchdog import Watchdog
        wd = Watchdog(sys.argv[1], timeouts={"step": 0.5}, flight_recorder=False, exit_grace_s=1.0)
        crash.install(sys.argv[1], watchdog=wd)
        with wd.section("step", step=3):
            deadline = time.monotonic() + 20
            while wd.fired is None and time.monotonic() < deadline:
                time.sleep(0.05)
            raise ConnectionResetError("peer closed the connection")
        """, tmp_path, rank=1)
    assert p.returncode == 75, p.stderr
    exits = [e for e in read_events(tmp_path) if e["check"] == "runtime.exit"]
    assert [(e["facts"]["how"], e["facts"]["exit_code"]) for e in exits] == [("hang", 75)]
    assert read_crash_records(tmp_path)[1]["exception"]["type"] == "ConnectionResetError"
