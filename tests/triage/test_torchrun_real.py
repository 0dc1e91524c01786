"""Real 4-rank torchrun + gloo jobs: triage names the rank that failed, from the run directory
alone and with torchrun's own log copied into it.

- crash: rank r raises at step 30 (for each r of 0..3). Its crash recorder writes
  `crash-rank<r>.json`; the other ranks fail on the lost connection (a consequence) or are
  SIGTERMed by torchrun (victims). torchrun's summary gives every rank the same second, and its
  Root Cause is whichever end it saw first; with --consequence-first that is a peer's, always.
- hang: rank 1 (or 3) SIGSTOPs itself before step 10's all_reduce; the other ranks' watchdogs write hang
  records (naming rank 1 as stale) and exit 75; rank 1 writes nothing and is ended by the test.
- clean: no fault; every rank records a clean end, and only then is the verdict "none".
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, need
from tests.triage import _job

pytestmark = pytest.mark.real

PREFLIGHT = [sys.executable, "-c", "from preflight.cli import main; main()"]
HOST = socket.gethostname().split(".")[0]
CRASH_STEP = 30
STOP_STEP = 10


def _torch() -> bool:
    try:
        import torch.distributed as dist

        return dist.is_available() and dist.is_gloo_available()
    except ImportError:
        return False


def triage(run: Path) -> tuple[int, dict, str, float]:
    start = time.monotonic()
    p = subprocess.run([*PREFLIGHT, "triage", "--run-dir", str(run), "--json"], capture_output=True, text=True,
                       timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    took = time.monotonic() - start
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    return p.returncode, json.loads(p.stdout), p.stderr, took


def _log(tmp: Path) -> Path:
    return tmp / "torchrun.log"


def _explain(run: Path, log: Path) -> str:
    files = sorted(p.name for p in run.iterdir()) if run.is_dir() else []
    return f"run dir: {files}\n--- torchrun log\n{log.read_text(errors='replace')[-4000:] if log.exists() else ''}"


@pytest.mark.parametrize("rank", [0, 1, 2, 3])
def test_the_rank_that_raised_is_named(tmp_path: Path, rank: int) -> None:
    # The launcher's Root Cause is whichever end torchrun observed first: the raiser's exit, or
    # a peer's on the lost connection when that reaches torchrun first (a loaded machine). It is
    # evidence; the test holds for either.
    _crash_named(tmp_path, rank, ["--step-timeout", "10"])


@pytest.mark.parametrize("rank", [0, 2])
def test_the_raiser_is_named_when_torchrun_names_a_consequence_first(tmp_path: Path, rank: int) -> None:
    """The raiser records its crash, closes its connections and leaves 3 s later; a peer exits at
    once on the lost connection. torchrun's Root Cause names that peer; triage names the raiser
    and says why the launcher's word is outweighed."""
    named = _crash_named(tmp_path, rank, ["--step-timeout", "10", "--consequence-first"])
    assert named != rank


def _crash_named(tmp_path: Path, rank: int, extra: list[str]) -> int:
    """Run the crash drill on `rank`; assert triage names it, with and without torchrun's log.
    Returns the rank torchrun's Root Cause named."""
    need(_torch(), "torch with gloo")
    run, log = tmp_path / "run", _log(tmp_path)
    t0 = time.monotonic()
    p = _job.torchrun(4, ["--run-dir", str(run), "--fault", "crash", "--fault-rank", str(rank),
                          "--fault-step", str(CRASH_STEP), "--steps", str(CRASH_STEP + 10), *extra], run, log)
    rc = _job.end(p, timeout=120)
    job_s = time.monotonic() - t0
    assert rc == 1, _explain(run, log)
    assert (run / f"crash-rank{rank}.json").is_file(), _explain(run, log)
    assert "Root Cause (first observed failure)" in log.read_text()

    times, named = [], -1
    for variant in ("run dir alone", "with torchrun's log"):
        if variant != "run dir alone":
            shutil.copy(log, run / "launcher.log")
        code, doc, err, took = triage(run)
        times.append(took)
        why = f"{variant}: {doc['triage']['summary']}\n" + "\n".join(doc["evidence"]) + "\n" + _explain(run, log)
        assert code == 1, why + err
        assert doc["category"] == "software crash", why
        assert doc["culprits"] == [{"node": HOST, "ranks": [rank]}], why
        assert f"RuntimeError: injected failure in step {CRASH_STEP} on rank {rank}" in doc["triage"]["summary"]
        assert f"at step {CRASH_STEP}" in doc["triage"]["summary"]
        first = doc["triage"]["first_failure"]
        assert first["rank"] == rank and first["source"] == "crash record", why
        ranks = {r["rank"]: r for r in doc["triage"]["ranks"]}
        assert [r for r in ranks if ranks[r]["crashed"]] == [rank], why  # the others are consequences or victims
        if variant != "run dir alone":
            roots = [r for r in ranks if ranks[r]["launcher_root_cause"]]
            assert len(roots) == 1, why
            named = roots[0]
            assert any("launcher's Root Cause" in e for e in doc["evidence"]), why
            if named == rank:
                assert ranks[rank]["exit_code"] == 1, why
            else:  # a consequence reached torchrun first: said, and outweighed by the crash record
                assert ranks[named]["exit_code"] == 1 and not ranks[named]["crashed"], why
                assert any(f"the launcher's Root Cause names rank {named}" in e and f"rank {rank}'s own record" in e
                           for e in doc["evidence"]), why
    print(f"\ncrash on rank {rank}: job {job_s:.1f} s, triage {times[0]:.2f} s / {times[1]:.2f} s (without / with "
          f"torchrun's log), torchrun named rank {named}")
    return named


@pytest.mark.parametrize("stopped", [1, 3])
def test_a_sigstopped_rank_is_the_hang_culprit(tmp_path: Path, stopped: int) -> None:
    """The stopped rank is one its peers cannot end (as on another node: --keep-stuck-peers) and
    torchrun waits its default 30 s for it after the peers' exit 75, so the live triage sees it
    stopped and the test ends it, as an operator would, only once every peer has exited: no
    step of the drill races another. (Peers ending a stopped rank on their own node under
    torchrun: tests/runtime/test_example_ends.py.)"""
    need(_torch(), "torch with gloo")
    run, log = tmp_path / "run", _log(tmp_path)
    t0 = time.monotonic()
    p = _job.torchrun(4, ["--run-dir", str(run), "--fault", "stop", "--fault-rank", str(stopped),
                          "--fault-step", str(STOP_STEP), "--keep-stuck-peers"], run, log, shutdown_timeout=30)
    try:
        peers = [r for r in range(4) if r != stopped]
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not all((run / f"hang-rank{r}.json").is_file() for r in peers):
            assert p.poll() is None or all((run / f"hang-rank{r}.json").is_file() for r in peers), _explain(run, log)
            time.sleep(0.2)
        assert all((run / f"hang-rank{r}.json").is_file() for r in peers), _explain(run, log)
        detected_s = time.monotonic() - t0

        live_code, live, _, live_took = triage(run)  # the stopped rank is still there
        pid = json.loads((run / f"heartbeat-rank{stopped}.json").read_text())["pid"]
        assert pid in _children(p.pid)  # never anything but the job's own rank
        # the peers exit 75 after their grace; torchrun then waits for the stopped rank
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _children(p.pid) != [pid]:
            time.sleep(0.2)
        assert _children(p.pid) == [pid], _explain(run, log)
        os.kill(pid, signal.SIGKILL)
        rc = _job.end(p, timeout=60)
    finally:
        _job.end(p, timeout=0.1)
    job_s = time.monotonic() - t0
    assert rc == 1, _explain(run, log)
    assert not (run / f"hang-rank{stopped}.json").exists()

    results = [("while stopped, run dir alone", live_code, live, live_took)]
    code, doc, _, took = triage(run)
    results.append(("after the end, run dir alone", code, doc, took))
    shutil.copy(log, run / "launcher.log")
    code, doc, _, took = triage(run)
    results.append(("after the end, with torchrun's log", code, doc, took))
    for variant, code, doc, _took in results:
        why = f"{variant}: {doc['triage']['summary']}\n" + "\n".join(doc["evidence"]) + "\n" + _explain(run, log)
        assert code == 1, why
        assert doc["category"] == "communication hang", why
        assert doc["culprits"] == [{"node": HOST, "ranks": [stopped]}], why
        assert doc["triage"]["collective"] == {"op": "all_reduce", "seq": STOP_STEP + 1}, why
        ev = " ".join(doc["evidence"])
        assert f"rank {stopped} wrote no hang record" in ev and f"name rank {stopped} as stale" in ev, why
        ranks = {r["rank"]: r for r in doc["triage"]["ranks"]}
        assert not any(r["crashed"] for r in ranks.values()), why
    assert "state T" in " ".join(results[0][2]["evidence"])  # seen stopped by the live collection
    last = {r["rank"]: r for r in results[2][2]["triage"]["ranks"]}
    why = json.dumps(last) + _explain(run, log)
    # the first end torchrun sees is a peer's own exit 75 (nothing else ends a rank before it);
    # the peers that exit after it may be SIGTERMed by torchrun first
    hang_exits = [r for r in last if last[r]["hang_exit"]]
    assert hang_exits and set(hang_exits) <= set(peers), why
    assert last[stopped]["exit_code"] == -signal.SIGKILL, why
    assert "exit code 75: the watchdog's hang exit" in " ".join(results[2][2]["evidence"]), why
    print(f"\nSIGSTOP on rank {stopped}: peers' records after {detected_s:.1f} s, job {job_s:.1f} s, triage "
          + ", ".join(f"{v} {t:.2f} s" for v, _, _, t in results))


def _children(pid: int) -> list[int]:
    """The live child processes of `pid` (an exited rank torchrun has not reaped yet is not one)."""
    out = subprocess.run(["ps", "-o", "pid=,stat=", "--ppid", str(pid)], capture_output=True, text=True,
                         timeout=10).stdout
    return [int(f[0]) for f in (ln.split() for ln in out.splitlines()) if len(f) == 2 and not f[1].startswith("Z")]


def test_a_clean_run_is_none_only_with_every_rank_ended_cleanly(tmp_path: Path) -> None:
    need(_torch(), "torch with gloo")
    run, log = tmp_path / "run", _log(tmp_path)
    p = _job.torchrun(4, ["--run-dir", str(run), "--fault", "none", "--steps", "8"], run, log)
    assert _job.end(p, timeout=120) == 0, _explain(run, log)
    code, doc, _, _ = triage(run)
    assert (code, doc["category"]) == (0, "none"), doc["triage"]["summary"]
    assert doc["culprits"] == []
    # the same records, less one rank's end: no longer positive evidence of a clean run
    events = run / "events-rank3.jsonl"
    events.write_text("".join(ln for ln in events.read_text().splitlines(keepends=True) if "runtime.exit" not in ln))
    beat = json.loads((run / "heartbeat-rank3.json").read_text())
    (run / "heartbeat-rank3.json").write_text(json.dumps({**beat, "state": "running"}))
    code, doc, err, _ = triage(run)
    assert (code, doc["category"]) == (2, "unknown"), doc["triage"]["summary"]
    assert "rank 3 recorded neither a failure nor a clean end" in " ".join(doc["evidence"])
    assert "insufficient evidence" in err
