"""Benchmark: in-process restart, from a fault's detection to the next training step.

4 gloo ranks of tests/runtime/_inprocess_ranks.py (a small data-parallel model, one
all_reduce per step, 50 ms steps) under `python -m preflight.runtime.launch`, the process-group
timeout 3 s. At step 6 rank 2 SIGKILLs or SIGSTOPs itself. Each survivor writes the wall time
at which its collective raised (detection) and the time its next training step completed.
Per run: fault -> detection (the first survivor), detection -> next step (the slowest
survivor, measured from its own detection), fault -> next step, and `recover`'s own time
(agreement, fencing, re-forming, restoring). SIGKILL and SIGSTOP without a spare (the world
shrinks to 3), SIGKILL with one warm spare (the world stays 4).

    .venv/bin/python benchmarks/bench_inprocess.py [--runs 5] [--spare-runs 2]

About 2 minutes with the defaults on a 2-core VM (5 under a load average of 9).
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "tests" / "runtime" / "_inprocess_ranks.py"


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("TORCHELASTIC_", "SLURM_", "NCCL_", "PREFLIGHT_", "TORCH_FR_"))}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        e.pop(k, None)
    e.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "CUDA_VISIBLE_DEVICES": ""})
    return e


def one(tmp: Path, fault: str, spares: int, i: int) -> dict[str, Any]:
    run = tmp / f"{fault}-{spares}-{i}"
    cmd = [sys.executable, "-m", "preflight.runtime.launch", "--nproc", "4", "--spares", str(spares), str(WORKER),
           "--run-dir", str(run), "--steps", "14", "--fault", fault, "--fault-rank", "2", "--fault-step", "6",
           "--timeout", "3"]
    proc = subprocess.Popen(cmd, env=env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        rc = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        return {"error": "timed out"}
    timings = [json.loads(line) for p in run.glob("timing-slot*.jsonl") for line in p.read_text().splitlines()]
    faults = [json.loads(line) for line in (run / "fault.jsonl").read_text().splitlines()] if (run / "fault.jsonl").exists() else []
    if rc != 0 or not timings or not faults:
        return {"error": f"rc {rc}, {len(timings)} timing records"}
    t0 = faults[0]["time"]
    return {"detect": min(t["detected"] for t in timings) - t0,
            "to_step": max(t["next_step"] - t["detected"] for t in timings),
            "total": max(t["next_step"] for t in timings) - t0,
            "recover": max(float(t["recover_s"] or 0) for t in timings), "survivors": len(timings)}


def row(name: str, runs: list[dict[str, Any]]) -> str:
    ok = [r for r in runs if "error" not in r]
    bad = [r["error"] for r in runs if "error" in r]
    if not ok:
        return f"| {name} | 0/{len(runs)} | - | - | - | - | {'; '.join(bad)} |"

    def cell(key: str) -> str:
        v = [r[key] for r in ok]
        return f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"

    return (f"| {name} | {len(ok)}/{len(runs)} | {cell('detect')} | {cell('recover')} | {cell('to_step')} | "
            f"{cell('total')} | {'; '.join(bad) or '-'} |")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--spare-runs", type=int, default=2)
    a = ap.parse_args()
    print("4 gloo ranks, 50 ms steps, process-group timeout 3 s, rank 2 faulted at step 6; seconds, "
          "median (min-max) over the runs")
    print("| fault | runs ok | fault -> detection | recover() | detection -> next step (slowest survivor) | "
          "fault -> next step | failures |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="bench-inprocess-") as d:
        tmp = Path(d)
        for fault, spares, n in (("KILL", 0, a.runs), ("STOP", 0, a.runs), ("KILL", 1, a.spare_runs)):
            if n <= 0:
                continue
            runs = [one(tmp, fault, spares, i) for i in range(n)]
            name = f"SIG{fault}" + (", 1 warm spare" if spares else ", world 4 -> 3")
            print(row(name, runs), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
