"""Attribution from hand-written per-rank records (the formats preflight.runtime writes) and
torchrun summaries, through `preflight triage --run-dir`: who failed first by the ranks' own
clocks, launcher-ended ranks as victims, exit 75 as a hang, and bad input as exit code 2."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from preflight.model import Capture, CaptureState
from preflight.triage import judge
from preflight.triage.collect import RUN_DIR_PROBE
from tests.conftest import ROOT
from tests.triage._bundles import make_bundle

HOST = socket.gethostname().split(".")[0]
T0 = 1795574282.25  # the crash; every launcher time below is this second
STAMP = "2026-11-25_02:38:02"
LOST = ("RuntimeError", "[../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
        "[127.0.0.1]:6807. This is typically caused by a remote worker crashing.")


def triage(run: Path) -> tuple[int, dict, str]:
    p = subprocess.run([sys.executable, "-c", "from preflight.cli import main; main()", "triage", "--run-dir",
                        str(run), "--json", "--no-node-checks"], capture_output=True, text=True, timeout=60,
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, (json.loads(p.stdout) if p.stdout.strip() else {}), p.stderr


def crash(run: Path, rank: int, t: float, etype: str, msg: str, step: int = 30) -> None:
    rec = {"rank": rank, "host": HOST, "pid": 4000 + rank, "time": t,
           "exception": {"type": etype, "message": msg, "module": "builtins"},
           "stack": ["Traceback (most recent call last):\n", '  File "train.py", line 80, in main\n', f"{etype}: {msg}\n"],
           "thread": "MainThread", "step": step, "section": "step"}
    (run / f"crash-rank{rank}.json").write_text(json.dumps(rec))


def event(run: Path, rank: int, check: str, t: float, status: str, facts: dict) -> None:
    ev = {"check": check, "node": HOST, "status": status, "summary": f"rank {rank} {check}", "evidence": [],
          "remedy": "", "facts": facts, "source": "runtime", "time": t, "rank": rank, "step": facts.get("step")}
    with open(run / f"events-rank{rank}.jsonl", "a") as fh:
        fh.write(json.dumps(ev) + "\n")


def ended(run: Path, rank: int, how: str, code: int | None, t: float = T0 + 1, sig: str | None = None) -> None:
    status = {"clean": "pass", "signal": "warn"}.get(how, "fail")
    event(run, rank, "runtime.exit", t, status, {"how": how, "exit_code": code, "signal": sig, "rank": rank})


def beat(run: Path, rank: int, t: float, state: str = "running", step: int = 10) -> None:
    (run / f"heartbeat-rank{rank}.json").write_text(json.dumps(
        {"rank": rank, "host": HOST, "pid": 4000 + rank, "step": step, "section": "step", "time": t, "state": state}))


def hang(run: Path, rank: int, t: float, stale: list[int]) -> None:
    peers = [{"rank": r, "host": HOST, "step": 10, "section": "step", "state": "running",
              "age_s": 3.2 if r in stale else 0.1, "behind": False, "stale": r in stale} for r in range(4)]
    rec = {"rank": rank, "host": HOST, "pid": 4000 + rank, "section": "step", "step": 10, "elapsed_s": 3.1,
           "timeout_s": 3.0, "timeout_kind": "fixed", "time": t, "exit_code": 75, "stacks": {},
           "flight_recorder": {"last": {"op": "gloo:all_reduce", "seq": 11, "state": "scheduled"}},
           "max_step": 10, "behind": [], "stale": stale, "suspects": stale, "peers": peers}
    (run / f"hang-rank{rank}.json").write_text(json.dumps(rec))


def torchrun_summary(exits: dict[int, int], root: int) -> str:
    """torchrun's error summary: every rank at the same second, the root cause last."""
    def entry(i: int, rank: int, code: int) -> str:
        sig = {-15: "SIGTERM", -9: "SIGKILL"}.get(code)
        tb = (f"Signal {-code} ({sig}) received by PID {4000 + rank}" if sig else
              "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html")
        return (f"[{i}]:\n  time      : {STAMP}\n  host      : localhost\n  rank      : {rank} (local_rank: {rank})\n"
                f"  exitcode  : {code} (pid: {4000 + rank})" + (f"  ({sig})" if sig else " ") +
                f"\n  error_file: <N/A>\n  traceback : {tb}\n")
    others = [r for r in sorted(exits) if r != root]
    return ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n" + "=" * 60 +
            "\ntrain.py FAILED\n" + "-" * 60 + "\nFailures:\n" +
            "".join(entry(i + 1, r, exits[r]) for i, r in enumerate(others)) + "-" * 60 +
            "\nRoot Cause (first observed failure):\n" + entry(0, root, exits[root]) + "=" * 60 + "\n")


def traceback(rank: int, etype: str, msg: str) -> str:
    return "".join(f"[rank{rank}]: {ln}\n" for ln in ["Traceback (most recent call last):",
                                                     '  File "train.py", line 80, in main',
                                                     "    dist.all_reduce(t)", f"{etype}: {msg}"])


def names(doc: dict) -> list[dict]:
    return doc["culprits"]


# ----- who failed first ------------------------------------------------------------------------


def test_crash_records_order_the_ranks_not_the_launchers_second(tmp_path: Path) -> None:
    """Rank 2 raised first (by its own record); torchrun saw rank 1's exit first and gives every
    rank the same second; ranks 0 and 3 failed on the lost connection; its own record wins."""
    run = tmp_path / "run"
    run.mkdir()
    crash(run, 2, T0, "ValueError", "loss is NaN")
    crash(run, 1, T0 + 0.3, "KeyError", "'labels'")  # a second, later failure of its own
    crash(run, 0, T0 + 0.4, *LOST)
    crash(run, 3, T0 + 0.4, *LOST)
    code, doc, _ = triage(run)
    assert (code, doc["category"]) == (1, "software crash")
    assert names(doc) == [{"node": HOST, "ranks": [2]}]
    assert doc["triage"]["summary"] == f"rank 2 on {HOST} crashed at step 30 in section 'step': ValueError: loss is NaN"
    assert doc["triage"]["first_failure"]["source"] == "crash record"
    assert any(e.startswith("rank 1 also raised 0.30 s later: KeyError") for e in doc["evidence"])
    assert any(e.startswith("ranks 0, 3 failed as a consequence") for e in doc["evidence"])

    (run / "launcher.log").write_text(torchrun_summary({0: 1, 1: 1, 2: 1, 3: 1}, root=1))
    code, doc, _ = triage(run)
    assert names(doc) == [{"node": HOST, "ranks": [2]}]
    assert any("Root Cause names rank 1" in e and "rank 2's own record" in e and "outweighs" in e
               for e in doc["evidence"])


def test_launcher_log_alone_names_the_root_cause_never_a_sigtermed_rank(tmp_path: Path) -> None:
    """The old failure: every rank at the same second, rank 0 SIGTERMed by torchrun was named."""
    for culprit in (1, 2, 3):
        run = tmp_path / f"run{culprit}"
        run.mkdir()
        log = "".join(traceback(r, *LOST) for r in (0, 2) if r != culprit)
        log += traceback(culprit, "RuntimeError", f"injected failure in step 30 on rank {culprit}")
        exits = {r: (1 if r in (culprit, 0, 2) else -15) for r in range(4)}
        (run / "launcher.log").write_text(log + torchrun_summary(exits, root=culprit))
        code, doc, _ = triage(run)
        assert (code, doc["category"]) == (1, "software crash"), doc["triage"]["summary"]
        assert names(doc) == [{"node": HOST, "ranks": [culprit]}]
        assert f"injected failure in step 30 on rank {culprit}" in doc["triage"]["summary"]


def test_exit_code_without_traceback_and_sigterm_victims(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "launcher.log").write_text(torchrun_summary({0: -15, 1: -15, 2: 1, 3: -15}, root=2))
    code, doc, _ = triage(run)
    assert (code, doc["category"]) == (1, "software crash")
    assert names(doc) == [{"node": HOST, "ranks": [2]}] and "exit code 1" in doc["triage"]["summary"]
    assert any("ranks 0, 1, 3 ended by SIGTERM from outside" in e and "victims" in e for e in doc["evidence"])


def test_sigterm_of_every_rank_is_not_a_crash(tmp_path: Path) -> None:
    """scancel / time limit: torchrun SIGTERMs everyone; no rank failed on its own."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "launcher.log").write_text(torchrun_summary({0: -15, 1: -15, 2: -15, 3: -15}, root=0))
    for r in range(4):
        ended(run, r, "signal", -15, sig="SIGTERM")
    code, doc, err = triage(run)
    assert (code, doc["category"]) == (2, "unknown")
    assert names(doc) == []
    assert "insufficient evidence" in err


def test_a_crash_that_hangs_its_peers_is_a_crash(tmp_path: Path) -> None:
    """NCCL-like: the peers do not fail on the lost rank, their watchdogs fire (exit 75) and
    name it as stale; its own crash record makes it a crash, not a hang."""
    run = tmp_path / "run"
    run.mkdir()
    crash(run, 2, T0, "torch.OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB")
    for r in (0, 1, 3):
        hang(run, r, T0 + 3, stale=[2])
    (run / "launcher.log").write_text(torchrun_summary({0: 75, 1: 75, 2: 1, 3: -15}, root=0))
    code, doc, _ = triage(run)
    assert (code, doc["category"]) == (1, "software crash")
    assert names(doc) == [{"node": HOST, "ranks": [2]}] and "CUDA out of memory" in doc["triage"]["summary"]
    assert any("Root Cause names rank 0" in e and "outweighs" in e for e in doc["evidence"])


# ----- hangs ------------------------------------------------------------------------------------


def test_exit_75_is_the_watchdogs_hang_exit_never_a_crash(tmp_path: Path) -> None:
    """The old failure: with torchrun's log in the run directory, exit 75 was a software crash."""
    run = tmp_path / "run"
    run.mkdir()
    for r in (0, 2, 3):
        hang(run, r, T0 + 3 + r * 0.01, stale=[1])
        beat(run, r, T0 + 3, state="hang")
    beat(run, 1, T0 - 0.2)  # stopped: its heartbeat went stale
    (run / "launcher.log").write_text(torchrun_summary({0: 75, 1: -9, 2: 75, 3: -15}, root=0))
    code, doc, _ = triage(run)
    assert (code, doc["category"]) == (1, "communication hang")
    assert names(doc) == [{"node": HOST, "ranks": [1]}]
    assert doc["triage"]["collective"] == {"op": "all_reduce", "seq": 11}
    ev = "\n".join(doc["evidence"])
    assert "rank 1 wrote no hang record" in ev and "name rank 1 as stale (no heartbeat for 3.2 s)" in ev
    assert "ranks 0, 2 ended with exit code 75: the watchdog's hang exit" in ev


def test_launcher_log_alone_names_the_rank_that_needed_sigkill(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "launcher.log").write_text(torchrun_summary({0: 75, 1: -15, 2: -9, 3: 75}, root=0))
    code, doc, _ = triage(run)
    assert (code, doc["category"]) == (1, "communication hang")
    assert names(doc) == [{"node": HOST, "ranks": [2]}]
    assert any("rank 1 ended on the launcher's SIGTERM (victims); rank 2 did not and needed SIGKILL" in e
               for e in doc["evidence"])


# ----- none only on positive evidence -----------------------------------------------------------


def test_none_needs_every_rank_to_end_cleanly(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for r in range(4):
        beat(run, r, T0, state="closed")
        ended(run, r, "clean", 0)
    code, doc, _ = triage(run)
    assert (code, doc["category"]) == (0, "none")
    for r in range(4):
        beat(run, r, T0)  # heartbeats only, still "running": nothing says the run was clean
    for f in run.glob("events-*"):
        f.unlink()
    code, doc, err = triage(run)
    assert (code, doc["category"]) == (2, "unknown")
    assert "ranks 0, 1, 2, 3 recorded neither a failure nor a clean end" in " ".join(doc["evidence"])


# ----- bad input --------------------------------------------------------------------------------


def test_missing_run_dir_is_exit_2(tmp_path: Path) -> None:
    code, _, err = triage(tmp_path / "nowhere")
    assert code == 2 and f"--run-dir {tmp_path / 'nowhere'}: no such directory" in err
    (tmp_path / "file").write_text("x")
    code, _, err = triage(tmp_path / "file")
    assert code == 2 and "not a directory" in err


def test_a_log_glob_that_matches_nothing_is_said_and_the_named_culprit_is_exit_1(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    crash(run, 1, T0, "ValueError", "loss is NaN")
    p = subprocess.run([sys.executable, "-c", "from preflight.cli import main; main()", "triage", "--run-dir", str(run),
                        "--log", str(tmp_path / "nope-*.log"), "--json", "--no-node-checks"], capture_output=True,
                       text=True, timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 1 and f"--log {tmp_path / 'nope-*.log'}: no such folder or no file matched" in p.stderr
    assert json.loads(p.stdout)["culprits"] == [{"node": HOST, "ranks": [1]}]  # the rest is still used


def test_empty_run_dir_is_exit_2(tmp_path: Path) -> None:
    code, doc, err = triage(tmp_path)
    assert code == 2 and doc["category"] == "unknown"
    assert f"{tmp_path}: holds no files on any node (nothing to read)" in err


def test_corrupt_hang_record_is_named_and_the_rest_still_used(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for r in (0, 3):
        hang(run, r, T0 + 3, stale=[2])
    (run / "hang-rank1.json").write_text('{"rank": 1, "host": "vm", "sect')  # torn
    beat(run, 1, T0 + 3, state="hang")  # its watchdog did fire
    beat(run, 2, T0 - 0.2)
    code, doc, err = triage(run)
    assert code == 1  # a culprit is named; the input that could not be read is said beside it
    assert "input: " in err and "hang-rank1.json: corrupt hang record: not JSON (Unterminated string" in err
    assert doc["category"] == "communication hang" and names(doc) == [{"node": HOST, "ranks": [2]}]
    assert any("hang-rank1.json: corrupt hang record" in e for e in doc["triage"]["input_errors"])


def test_corrupt_crash_record_is_named_and_the_event_stands_in(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "crash-rank3.json").write_text("[]")
    (run / "crash-rank0.json").write_text("")
    event(run, 3, "runtime.crash", T0, "fail", {"rank": 3, "step": 30, "section": "step", "exception_type": "OSError",
                                                "message": "shard 17 missing", "time": T0})
    crash(run, 1, T0 + 0.5, *LOST)
    code, doc, err = triage(run)
    assert code == 1  # a culprit is named; the input that could not be read is said beside it
    assert "crash-rank3.json: corrupt crash record: not a crash record (a JSON list, not an object)" in err
    assert "crash-rank0.json: corrupt crash record: empty file" in err
    assert doc["category"] == "software crash" and names(doc) == [{"node": HOST, "ranks": [3]}]
    assert doc["triage"]["first_failure"]["source"] == "runtime.crash event"


def test_unreadable_files_are_input_errors() -> None:
    doc = {"mode": "dir", "target": "/runs/exp", "exists": True, "files": [],
           "skipped": [{"path": "/runs/exp/hang-rank0.json", "reason": "Permission denied", "error": True},
                       {"path": "/runs/exp/big.log", "reason": "over the total size limit"}]}
    cap = Capture(probe=RUN_DIR_PROBE, argv=["python3"], state=CaptureState.OK, stdout=json.dumps(doc), rc=0)
    verdict, _ = judge.triage(make_bundle({"gpu1": {RUN_DIR_PROBE: cap}}))
    assert verdict.category == "unknown"
    assert "gpu1:/runs/exp/hang-rank0.json: unreadable: Permission denied" in verdict.input_errors
    assert not any("big.log" in e for e in verdict.input_errors)  # a size limit is not an error
    lost = Capture(probe=RUN_DIR_PROBE, argv=["python3"], state=CaptureState.LOST, reason="connection lost")
    verdict, _ = judge.triage(make_bundle({"gpu1": {RUN_DIR_PROBE: lost}}))
    assert verdict.input_errors == ["/runs/exp: not read on any node (gpu1: connection lost)"]
