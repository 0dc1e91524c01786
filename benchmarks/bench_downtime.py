"""Benchmark: the downtime measure (preflight.runtime.downtime) against the truth, and its cost.

  (a) accuracy: the example (examples/train_resilient.py) under real torchrun, 2 gloo ranks,
      `--max-restarts 1 --save-every 20 --step-delay 0.05 --step-timeout 3`; rank 1 gets SIGKILL
      (as the OOM killer would) or SIGSTOP (the watchdog of rank 0 fires, names it and ends it)
      a little after the step-20 checkpoint. The truth: from the signal to the restarted ranks'
      "resumed at step 20" events (the last of them). The measure: `preflight triage --run-dir`
      (the run directory alone), its `downtime` incident: cause, ranks, lost_s. "error" is
      measured minus true: the measure starts at the last good moment the ranks recorded (at
      or before the signal), so it is never shorter than the truth by more than the clocks allow.
  (b) cost at a restart: `last_good(run_dir)` over a run directory of R ranks with N events each
      (straggler and checkpoint events, a hang record, heartbeats), as a restarting rank calls it
      before training (each events file read from its last 512 KB; events of kinds it does not
      need are skipped unparsed); and `incidents()` over the same files.

    .venv/bin/python benchmarks/bench_downtime.py [--runs 2] [--events 20000,100000]

About 1.5 minutes with the defaults on a 2-core VM.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from preflight.runtime import downtime as dt  # noqa: E402
from preflight.runtime.events import read_events  # noqa: E402

EXAMPLE = ROOT / "examples" / "train_resilient.py"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "SLURM_", "NCCL_", "RANK",
                                                                    "WORLD_SIZE", "MASTER_"))}
    env.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
                "CUDA_VISIBLE_DEVICES": "", "PREFLIGHT_HISTORY": "off"})
    return env


def _signal_rank1(run: Path, proc: subprocess.Popen[bytes], sig: int) -> float | None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        evs = list(read_events(run)) if run.is_dir() else []
        saved = any(e["check"] == "runtime.checkpoint" and e.get("step") == 20 and "saved" in e["summary"]
                    for e in evs)
        pid = next((e["facts"].get("pid") for e in evs if e["check"] == "runtime.train" and e["rank"] == 1
                    and "start_step" in e["facts"]), None)
        if saved and pid:
            time.sleep(0.3)
            os.kill(int(pid), sig)
            return time.time()
        time.sleep(0.05)
    return None


def accuracy_run(sig: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "--max-restarts", "1", "--monitor-interval", "0.1", str(EXAMPLE), "--run-dir", str(run),
               "--steps", "60", "--save-every", "20", "--step-delay", "0.05", "--step-timeout", "3"]
        with open(Path(tmp) / "torchrun.log", "wb") as log:
            proc = subprocess.Popen(cmd, env=_env(), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        try:
            sent = _signal_rank1(run, proc, sig)
            proc.wait(timeout=150)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        if sent is None:
            return {"error": "the signal was not sent"}
        resumed = [e["time"] for e in read_events(run) if e["check"] == "runtime.train"
                   and e["facts"].get("restart") == 1 and "start_step" in e["facts"]]
        p = subprocess.run([sys.executable, "-m", "preflight.cli", "triage", "--run-dir", str(run),
                            "--no-node-checks", "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT,
                           env=_env())
        items = json.loads(p.stdout)["downtime"]["incidents"] if p.stdout.strip().startswith("{") else []
        if not resumed or len(items) != 1:
            return {"error": f"resumed events {len(resumed)}, incidents {len(items)}"}
        n = items[0]
        true = max(resumed) - sent
        return {"cause": n["cause"], "ranks": n["ranks"], "true_s": true, "lost_s": n["lost_s"],
                "error_s": n["lost_s"] - true}


def _big_run_dir(root: Path, per_rank: int, ranks: int, needed_every: int) -> None:
    root.mkdir(parents=True)
    t0 = time.time() - per_rank * 0.2 - 100
    for r in range(ranks):
        with (root / f"events-rank{r}.jsonl").open("w") as fh:
            for i in range(per_rank):
                check = "runtime.checkpoint" if i % needed_every == 0 else "runtime.straggler"
                fh.write(json.dumps({"check": check, "node": f"n{r + 1}", "status": "pass", "summary": "x" * 60,
                                     "evidence": ["e" * 40], "remedy": "", "facts": {"score": 1.0, "step": i},
                                     "source": "runtime", "time": t0 + i * 0.2, "rank": r, "step": i}) + "\n")
        (root / f"heartbeat-rank{r}.json").write_text(json.dumps({
            "rank": r, "host": f"n{r + 1}", "pid": 1, "step": per_rank, "section": "step",
            "section_elapsed_s": 4.0, "time": t0 + per_rank * 0.2 + 4, "state": "running"}))
    (root / "hang-rank0.json").write_text(json.dumps({
        "rank": 0, "host": "n1", "section": "step", "step": per_rank, "elapsed_s": 3.5, "time": t0 + per_rank * 0.2 + 3.5,
        "suspects": [2]}))


def cost(per_rank: int, ranks: int = 4, needed_every: int = 10, reps: int = 3) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "run"
        _big_run_dir(root, per_rank, ranks, needed_every)
        size = sum(p.stat().st_size for p in root.iterdir())
        lg, inc = [], []
        for _ in range(reps):
            t = time.perf_counter()
            got = dt.last_good(root)
            lg.append(time.perf_counter() - t)
            assert got is not None and got.cause == "hang"
            t = time.perf_counter()
            dt.incidents(dt.read_run_dir(root))
            inc.append(time.perf_counter() - t)
        return {"mb": size / 1e6, "last_good_s": statistics.median(lg), "incidents_s": statistics.median(inc)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--events", default="20000,100000")
    a = ap.parse_args()
    print("(a) accuracy: torchrun, 2 gloo ranks, rank 1 signalled after the step-20 checkpoint")
    print(f"{'signal':8} {'run':>3} {'cause':8} {'ranks':6} {'true s':>7} {'measured s':>10} {'error s':>8}")
    for sig in (signal.SIGKILL, signal.SIGSTOP):
        for i in range(a.runs):
            r = accuracy_run(sig)
            if "error" in r:
                print(f"{sig.name:8} {i + 1:>3} {r['error']}")
                continue
            print(f"{sig.name:8} {i + 1:>3} {r['cause']!s:8} {r['ranks']!s:6} {r['true_s']:7.2f} "
                  f"{r['lost_s']:10.2f} {r['error_s']:8.2f}")
    print("\n(b) cost: R ranks, N events each; 'needed' = the share of checkpoint/exit/... events among the "
          "stragglers' (median of 3)")
    print(f"{'ranks':>5} {'events/rank':>11} {'needed':>6} {'files MB':>8} {'last_good ms':>12} {'incidents ms':>12}")
    cases = [(4, int(x), 10) for x in a.events.split(",")] + [(4, 100000, 1), (64, 20000, 10), (64, 20000, 1)]
    for ranks, n, every in cases:
        c = cost(n, ranks, every)
        print(f"{ranks:>5} {n:>11} {f'1/{every}':>6} {c['mb']:8.1f} {1e3 * c['last_good_s']:12.1f} "
              f"{1e3 * c['incidents_s']:12.1f}")


if __name__ == "__main__":
    main()
