"""Triage against real drills: does it name the right rank, in the right category?

Real torchrun, 4 gloo ranks (`tests/triage/_job.py`), 3 s step timeout:
- restart: `--max-restarts 1`, checkpoints every 5 steps; in the first attempt rank R SIGSTOPs
  itself before step 10's all_reduce; the peers' watchdogs fire, end it, exit 75; torchrun
  restarts the job, which resumes at step 10 and ends cleanly (torchrun exit 0). Right: a
  communication hang, culprit rank R, "the job recovered".
- sigkill: the bench SIGKILLs rank R at step 10 (the pid its heartbeat names); torchrun's log
  is copied into the run directory. Right: rank R killed by a signal (SIGKILL), first failure.
- oom (root with a cgroup-v1 memory controller only): rank R is moved into a memory cgroup
  limited to 96 MiB of new allocations and allocates 1 GiB at step 60: the kernel's OOM
  killer ends it. Right: rank R killed by the OOM killer, its kernel-log line quoted; judged on
  the run directory alone (no launcher log).

The story drills (`tests/triage/test_story_drills.py`, whose judges decide right or wrong here:
triage's `story`, culprits and exit code), the fault at a random moment:
- recovered kill: the README's program, `--max-restarts 2`; the bench SIGKILLs rank R at a
  random step mid-run; torchrun restarts, the job finishes. Right: attempt 1 killed (SIGKILL),
  rank R and node, restarted; the job "recovered, finished", exit code 3; judged on the run
  directory alone and again with `--log torchrun.log` (two rows, one drill);
- replay 76: replay="stop", rank R's local gradient NaN once at step 17: every rank exits 76.
  Right: suspect hardware, rank R and node, category hardware, exit code 1;
- NaN batch: replay="stop", rank R's batch of step 19 holds a NaN. Right: bad data, rank R;
- outside kill: the README's program, `--max-restarts 0`, rank R SIGKILLed mid-run; the run
  directory alone. Right: attempt 1 killed, rank R, the job failed, exit code 1.

    python benchmarks/bench_triage_drills.py [--runs 3] [--drills restart,sigkill,oom,recovered_kill,...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.triage import _job  # noqa: E402

PREFLIGHT = [sys.executable, "-c", "from preflight.cli import main; main()"]


def _triage(run: Path) -> tuple[dict[str, Any], float]:
    t0 = time.monotonic()
    p = subprocess.run([*PREFLIGHT, "triage", "--run-dir", str(run), "--json"], capture_output=True, text=True,
                       timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return json.loads(p.stdout or "{}"), time.monotonic() - t0


def _beat(run: Path, rank: int, step: int, timeout: float = 90.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            b = json.loads((run / f"heartbeat-rank{rank}.json").read_text())
            if (b.get("step") or 0) >= step:
                return dict(b)
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"rank {rank} never reached step {step}")


def restart(tmp: Path, rank: int) -> tuple[bool, str, float]:
    run, log = tmp / "run", tmp / "torchrun.log"
    p = _job.torchrun(4, ["--run-dir", str(run), "--fault", "stop", "--fault-rank", str(rank), "--fault-restart",
                          "0", "--fault-step", "10", "--steps", "24", "--ckpt-every", "5"], run, log, max_restarts=1)
    rc = _job.end(p, timeout=240)
    doc, took = _triage(run)
    t = doc.get("triage") or {}
    ok = (rc == 0 and doc.get("category") == "communication hang" and [c["ranks"] for c in doc["culprits"]] == [[rank]]
          and (t.get("recovery") or {}).get("state") == "ended cleanly")
    return ok, str(t.get("summary", doc))[:110], took


def sigkill(tmp: Path, rank: int) -> tuple[bool, str, float]:
    run, log = tmp / "run", tmp / "torchrun.log"
    p = _job.torchrun(4, ["--run-dir", str(run), "--steps", "100000"], run, log)
    try:
        os.kill(_beat(run, rank, 10)["pid"], signal.SIGKILL)
        _job.end(p, timeout=90)
    finally:
        _job.stop(p, run)
    shutil.copy(log, run / "launcher.log")
    doc, took = _triage(run)
    t = doc.get("triage") or {}
    ok = (doc.get("category") == "software crash" and [c["ranks"] for c in doc["culprits"]] == [[rank]]
          and "killed by a signal (SIGKILL)" in t.get("summary", ""))
    return ok, str(t.get("summary", doc))[:110], took


def _memcg() -> Path | None:
    try:
        line = next(ln for ln in Path("/proc/self/cgroup").read_text().splitlines() if ":memory:" in ln)
    except (OSError, StopIteration):
        return None
    folder = Path("/sys/fs/cgroup/memory") / line.split(":", 2)[2].lstrip("/")
    return folder if os.geteuid() == 0 and (folder / "cgroup.procs").is_file() else None


def oom(tmp: Path, rank: int) -> tuple[bool, str, float]:
    parent = _memcg()
    assert parent is not None
    group = parent / f"preflight-bench-oom-{os.getpid()}-{rank}"
    run, log = tmp / "run", tmp / "torchrun.log"
    group.mkdir()
    try:
        (group / "memory.limit_in_bytes").write_text(str(96 << 20))
        p = _job.torchrun(4, ["--run-dir", str(run), "--steps", "100000", "--fault", "hog", "--fault-rank",
                              str(rank), "--fault-step", "60"], run, log)
        try:
            (group / "cgroup.procs").write_text(str(_beat(run, rank, 1)["pid"]))
            _job.end(p, timeout=120)
        finally:
            _job.stop(p, run)
    finally:
        for _ in range(100):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.2)
    doc, took = _triage(run)
    t = doc.get("triage") or {}
    ok = (doc.get("category") == "software crash" and [c["ranks"] for c in doc["culprits"]] == [[rank]]
          and "OOM killer" in t.get("summary", "") and any("Killed process" in e for e in doc.get("evidence", [])))
    return ok, str(t.get("summary", doc))[:110], took


def _judged(judge: Any, *args: Any) -> tuple[bool, str, float]:
    """A story judge's verdict: right, or the first line of what it found wrong."""
    t0 = time.monotonic()
    try:
        return True, str(judge(*args))[:110], time.monotonic() - t0
    except AssertionError as exc:
        return False, (str(exc).strip().splitlines() or ["wrong"])[0][:160], time.monotonic() - t0


def story_drill(name: str, tmp: Path, rank: int) -> list[tuple[str, bool, str, float]]:
    """One story drill; a row (name, right, what triage said or what was wrong, triage seconds)
    per judgement. A drill that did not happen as described is a row "drill failed"."""
    import random

    from tests.triage import test_story_drills as sd

    if name in ("recovered_kill", "outside_kill"):
        dr = _job.kill_drill(tmp, rank, 2 if name == "recovered_kill" else 0, random.Random())
    else:
        dr = _job.replay_drill(tmp, "corrupt" if name == "replay76" else "nan", rank, 17 if name == "replay76" else 19)
    happened = {"recovered_kill": sd.recovered_kill_happened, "outside_kill": sd.outside_kill_happened,
                "replay76": sd.replay76_happened, "nan_batch": sd.nan_batch_happened}[name]
    try:
        happened(dr)
    except AssertionError as exc:
        return [(name, False, "drill failed: " + (str(exc).splitlines() or [""])[0][:140], 0.0)]
    if name == "recovered_kill":
        return [("recovered_kill (run dir)", *_judged(sd.judge_recovered_kill, dr, False)),
                ("recovered_kill (--log)", *_judged(sd.judge_recovered_kill, dr, True))]
    judge = {"outside_kill": sd.judge_outside_kill, "replay76": sd.judge_replay76, "nan_batch": sd.judge_nan_batch}
    return [(name, *_judged(judge[name], dr))]


STORY = ("recovered_kill", "replay76", "nan_batch", "outside_kill")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3, help="runs per drill (the faulty rank cycles 1, 2, 3, 0)")
    ap.add_argument("--drills", default="", help="comma-separated drills to run (default all): restart, sigkill, oom, "
                                                 + ", ".join(STORY))
    a = ap.parse_args()
    drills: list[tuple[str, Any]] = [("restart", restart), ("sigkill", sigkill)] + ([("oom", oom)] if _memcg() else [])
    drills += [(name, None) for name in STORY]
    if a.drills:
        chosen = [x.strip() for x in a.drills.split(",") if x.strip()]
        drills = [d for d in drills if d[0] in chosen]
    print(f"load average at the start: {Path('/proc/loadavg').read_text().strip()}", flush=True)
    rows = []
    start = time.monotonic()
    for name, drill in drills:
        tally: dict[str, tuple[int, list[float]]] = {}
        for i in range(a.runs if name != "oom" else max(1, a.runs // 2)):
            rank = (i % 4 + 1) % 4
            with tempfile.TemporaryDirectory(prefix=f"bench-triage-{name}-") as d:
                if drill is None:
                    judged = story_drill(name, Path(d), rank)
                else:
                    judged = [(name, *drill(Path(d), rank))]
            for row, ok, last, took in judged:
                right, times = tally.setdefault(row, (0, []))
                tally[row] = (right + ok, times + [took])
                print(f"{row} rank {rank}: {'right' if ok else 'WRONG'}: {last}", flush=True)
        rows += [(row, len(times), right, statistics.median(times)) for row, (right, times) in tally.items()]
    print(f"load average at the end: {Path('/proc/loadavg').read_text().strip()}", flush=True)
    print(f"\n{time.monotonic() - start:.0f} s in all\n")
    print("| drill | runs | culprit and category right | triage (median) |")
    print("|---|---|---|---|")
    for name, n, right, med in rows:
        print(f"| {name} | {n} | {right}/{n} | {med:.2f} s |")


if __name__ == "__main__":
    main()
