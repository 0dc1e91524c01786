"""Step 3 of the device check: the runtime's NCCL abort in in-process restart, one rank killed.

Runs inprocess_train.py under `python -m preflight.runtime.launch --nproc N` (N = the GPUs, at
most 4), waits for rank 0's heartbeat to pass step FAULT_AFTER, SIGKILLs the worker of slot 1,
and reads what the run wrote: the restart event (detection, re-form, cause), the downtime event
(`training_again_at`: the first step completed after the re-form) and done.json (the job went on
to its last step). Figures: seconds from the kill to detection, to re-form, to the next
completed step. It fails when the job did not finish (rc != 0, no done.json, not at the last
step) or wrote no restart/downtime event. One GPU: skipped, needs 2 GPUs (NCCL runs one rank
per GPU, and a restart needs a survivor).

    python benchmarks/device_check/restart.py --dir OUT      # --plan: the command
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[2]))  # after a shim (shim.py)

from benchmarks.bench_inprocess import worker_of  # noqa: E402 - the same launcher and its slots
from benchmarks.device_check.common import FAIL, NEEDS_TWO, PASS, SKIPPED, Step, child_env, cuda_state, tail  # noqa: E402

HERE = Path(__file__).resolve().parent
STEPS, FAULT_AFTER, SLOT = 120, 30, 1
WAIT_S = 50.0  # for the fault point, then for the job's end


def command(nproc: int, run: Path) -> list[str]:
    return [sys.executable, "-m", "preflight.runtime.launch", "--nproc", str(nproc),
            str(HERE / "inprocess_train.py"), str(run), str(STEPS)]


def heartbeat_step(run: Path) -> int:
    try:
        return int(json.loads((run / "heartbeat-rank0.json").read_text()).get("step") or 0)
    except (OSError, ValueError, TypeError, AttributeError):
        return 0


def events(run: Path, check: str) -> list[dict[str, Any]]:
    out = []
    for path in sorted(run.glob("events-rank*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("check") == check:
                out.append(rec)
    return out


def trial(step: Step, nproc: int, run: Path, backend: str) -> list[str]:
    argv = command(nproc, run)
    step.commands.append(shlex.join(argv))
    env = child_env(DEVICE_CHECK_BACKEND=backend, OMP_NUM_THREADS="1")
    if backend == "gloo":
        env.update(CUDA_VISIBLE_DEVICES="", GLOO_SOCKET_IFNAME="lo")
    log = run.parent / "restart.log"
    with open(log, "wb") as fh:
        proc = step.popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT)
    fault_at = 0.0
    try:
        deadline = time.monotonic() + WAIT_S
        while heartbeat_step(run) < FAULT_AFTER and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        pid = worker_of(proc.pid, SLOT)
        if pid is None or proc.poll() is not None or heartbeat_step(run) < FAULT_AFTER:
            return [f"the job did not reach step {FAULT_AFTER} in {WAIT_S:g} s (rc {proc.poll()}): "
                    f"{tail(log.read_text(errors='replace'), 6)}"]
        fault_at = time.time()
        os.kill(pid, signal.SIGKILL)
        step.figures["killed"] = {"slot": SLOT, "pid": pid, "at_step": heartbeat_step(run)}
        rc = proc.wait(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        return [f"the job did not end within {WAIT_S:g} s of the kill: {tail(log.read_text(errors='replace'), 6)}"]
    finally:
        step.kill_live()
        proc.wait(10)
    problems = []
    restart = [e for e in events(run, "runtime.restart") if e.get("status") == "warn"]
    down = [e for e in events(run, "runtime.downtime") if (e.get("facts") or {}).get("training_again_at")]
    try:
        done = json.loads((run / "done.json").read_text())
    except (OSError, ValueError):
        done = {}
    step.figures.update({"rc": rc, "done": done, "restart_events": len(restart), "downtime_events": len(down)})
    if rc != 0:
        problems.append(f"the launcher exited {rc}: {tail(log.read_text(errors='replace'), 6)}")
    if done.get("last_step") != STEPS - 1:
        problems.append(f"the job did not go on to its last step {STEPS - 1}: done.json {done or 'missing'}")
    if not restart:
        problems.append("no runtime.restart event: the survivors did not re-form")
    if not down:
        problems.append("no runtime.downtime event with training_again_at: no step completed after the re-form")
    if restart:
        facts = restart[0].get("facts") or {}
        reform = float(restart[0]["time"])
        step.figures.update({"cause": str(facts.get("cause") or "")[:300],
                             "kill_to_detect_s": round(reform - float(facts.get("detect_to_reform_s") or 0)
                                                       - fault_at, 3),
                             "kill_to_reform_s": round(reform - fault_at, 3)})
    if down:
        again = min(float(e["facts"]["training_again_at"]) for e in down)
        step.figures["kill_to_next_step_s"] = round(again - fault_at, 3)
    return problems


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--plan", action="store_true")
    ap.add_argument("--backend", default="nccl", help="gloo: CPU ranks, to try the plumbing without a GPU")
    a = ap.parse_args()
    if a.plan or a.dir is None:
        print("    " + shlex.join(command(4, Path("OUT/restart-run"))) + f"    (SIGKILL slot {SLOT} after step "
              f"{FAULT_AFTER}; --nproc: the GPUs, at most 4)")
        return 0
    step = Step("restart", a.dir)
    if a.backend == "gloo":
        nproc = 3
    else:
        gpus, why = cuda_state()
        step.figures["gpus"] = gpus
        if not gpus:
            return step.done(FAIL, why or "torch sees no GPU")
        if gpus < 2:
            return step.done(SKIPPED, f"{NEEDS_TWO}: NCCL runs one rank per GPU and a restart needs a survivor")
        nproc = min(gpus, 4)
    step.figures.update({"world": nproc, "backend": a.backend})
    problems = trial(step, nproc, a.dir / "restart-run", a.backend)
    return step.done(FAIL if problems else PASS, "; ".join(problems[:4]))


if __name__ == "__main__":
    sys.exit(main())
