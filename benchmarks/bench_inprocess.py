"""Benchmark: in-process restart from the user's path, a fault sent from outside.

The README's training program (its python block, extracted from README.md) with only
`inprocess=True, restart_timeout_s=T` added to its `Resilience(...)` call, run by
`python -m preflight.runtime.launch --nproc 4 [--spares 1] train.py RUN STEPS` (gloo, CPU).
A `sitecustomize` module on the ranks' path pads each step to 50 ms after the optimizer step (a
GPU step's length; the program's own text is unchanged). Once rank 0's heartbeat shows step 40,
the benchmark waits a random 0-50 ms and sends SIGKILL or SIGSTOP to the worker of slot 2 (its
pid found from the launcher's children and their PREFLIGHT_SLOT). Everything else is read from
what the run writes: the `runtime.restart` event (its time is the re-form, its
`detect_to_reform_s` the time since detection, its cause) and the `runtime.downtime` event that
rank 0 writes once the first step after the re-form is complete (`training_again_at`).

Per run: fault -> detection, fault -> re-form, fault -> next completed step; whether the
cause names the rank and the signal; how many console lines rank 0 printed for the restart.
Cases: SIGKILL at 3 s and 60 s restart timeouts (the world shrinks 4 -> 3), SIGKILL with a
warm spare (the world stays 4), SIGSTOP at 3 s (the timeout is the bound); `--stop-60` adds
SIGSTOP at 60 s.

    .venv/bin/python benchmarks/bench_inprocess.py [--runs 5] [--spare-runs 3] [--stop-runs N] [--stop-60]

About 8 minutes with the defaults on a loaded 2-core VM (each run starts 4-5 processes that
import torch).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STEPS = 140
FAULT_AFTER = 40  # steps rank 0's heartbeat shows before the fault
SLOT = 2

PAD = '''
import os, time
import torch
_step = torch.optim.SGD.step
_last = [0.0]
def step(self, *a, **k):  # every step takes at least STEP_S, as a GPU step would
    out = _step(self, *a, **k)
    left = float(os.environ.get("BENCH_STEP_S", "0.05")) - (time.monotonic() - _last[0])
    if 0 < left < 1:
        time.sleep(left)
    _last[0] = time.monotonic()
    return out
torch.optim.SGD.step = step
'''


def readme_program() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Runtime resilience layer"):]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    if not match:
        raise SystemExit("the README's runtime section has no python block")
    return match.group(1)


def program(folder: Path, timeout_s: float) -> Path:
    """The README's block with in-process restart turned on at the given restart timeout."""
    text = readme_program()
    call = re.search(r"Resilience\((.*?)\) as res:", text)
    if not call:
        raise SystemExit("the README's block has no `with Resilience(...) as res:`")
    text = text.replace(call.group(0), f"Resilience({call.group(1)}, inprocess=True, restart_timeout_s={timeout_s:g})"
                                       " as res:")
    path = folder / f"train-{timeout_s:g}.py"
    path.write_text(text)
    (folder / "inject").mkdir(exist_ok=True)
    (folder / "inject" / "sitecustomize.py").write_text(PAD)
    return path


def env(folder: Path) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("TORCHELASTIC_", "SLURM_", "NCCL_", "PREFLIGHT_", "TORCH_FR_"))}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        e.pop(k, None)
    e.update({"PYTHONPATH": f"{folder / 'inject'}:{ROOT}", "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
              "CUDA_VISIBLE_DEVICES": "", "PREFLIGHT_HISTORY": "off"})
    return e


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def worker_of(launcher: int, slot: int) -> int | None:
    for pid in children(launcher):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"PREFLIGHT_SLOT={slot}".encode() in environ:
            return pid
    return None


def heartbeat_step(run: Path, rank: int = 0) -> int:
    try:
        return int(json.loads((run / f"heartbeat-rank{rank}.json").read_text()).get("step") or 0)
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


def one(folder: Path, train: Path, fault: str, spares: int, i: int, rng: random.Random) -> dict[str, Any]:
    run = folder / f"{train.stem}-{fault}-{spares}-{i}"
    log = folder / f"{run.name}.log"
    cmd = [sys.executable, "-m", "preflight.runtime.launch", "--nproc", "4", "--spares", str(spares), str(train),
           str(run), str(STEPS)]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, env=env(folder), cwd=folder, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while heartbeat_step(run) < FAULT_AFTER and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        pid = worker_of(proc.pid, SLOT)
        if pid is None or proc.poll() is not None or heartbeat_step(run) < FAULT_AFTER:
            return {"error": "the job did not reach the fault"}
        time.sleep(rng.uniform(0.0, 0.05))
        fault_at = time.time()
        os.kill(pid, signal.SIGKILL if fault == "KILL" else signal.SIGSTOP)
        rc = proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        return {"error": "timed out"}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    restart = [e for e in events(run, "runtime.restart") if e.get("status") == "warn"]
    down = [e for e in events(run, "runtime.downtime") if (e.get("facts") or {}).get("training_again_at")]
    if rc != 0 or len(restart) != 1 or not down:
        return {"error": f"rc {rc}, {len(restart)} restart events, {len(down)} downtime events"}
    facts = restart[0]["facts"]
    reform = float(restart[0]["time"])
    again = min(float(e["facts"]["training_again_at"]) for e in down)
    text = log.read_text(errors="replace")
    lines = [x for x in text.splitlines() if x.startswith("preflight[rank 0]: in-process restart")]
    cause = str(facts.get("cause") or "")
    named = cause.startswith(f"rank {SLOT} ") and ("SIGKILL" in cause if fault == "KILL" else "stopped" in cause)
    return {"detect": reform - float(facts.get("detect_to_reform_s") or 0) - fault_at, "reform": reform - fault_at,
            "total": again - fault_at, "named": named, "lines": len(lines), "line": lines[0] if lines else "",
            "cause": cause[:160]}


def row(name: str, runs: list[dict[str, Any]]) -> str:
    ok = [r for r in runs if "error" not in r]
    bad = [r["error"] for r in runs if "error" in r]
    if not ok:
        return f"| {name} | 0/{len(runs)} | - | - | - | - | - | {'; '.join(bad)} |"

    def cell(key: str) -> str:
        v = [r[key] for r in ok]
        return f"{statistics.median(v):.2f} / {max(v):.2f}"

    named = sum(1 for r in ok if r["named"])
    once = sum(1 for r in ok if r["lines"] == 1)
    return (f"| {name} | {len(ok)}/{len(runs)} | {cell('detect')} | {cell('reform')} | {cell('total')} | "
            f"{named}/{len(ok)} | {once}/{len(ok)} | {'; '.join(bad) or '-'} |")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--spare-runs", type=int, default=3)
    ap.add_argument("--stop-runs", type=int, default=None, help="SIGSTOP runs (default: --runs)")
    ap.add_argument("--stop-60", action="store_true", help="also SIGSTOP at a 60 s restart timeout (slow)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--json", default="", help="write every run's numbers to this file")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    stops = a.runs if a.stop_runs is None else a.stop_runs
    cases = [("KILL", 3.0, 0, a.runs), ("KILL", 60.0, 0, a.runs), ("KILL", 3.0, 1, a.spare_runs),
             ("STOP", 3.0, 0, stops)] + ([("STOP", 60.0, 0, stops)] if a.stop_60 else [])
    print(f"README program under preflight.runtime.launch, 4 gloo ranks, 50 ms steps, slot {SLOT} faulted from "
          f"outside at a random moment after step {FAULT_AFTER}; seconds, median / max; load average at start "
          f"{os.getloadavg()[0]:.1f}")
    print("| fault | runs ok | fault -> detection | fault -> re-form | fault -> next step | cause names rank and "
          "signal | one console line | failures |")
    print("|---|---|---|---|---|---|---|---|")
    every: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-inprocess-") as d:
        folder = Path(d)
        for fault, timeout_s, spares, n in cases:
            if n <= 0:
                continue
            train = program(folder, timeout_s)
            name = (f"SIG{fault}, timeout {timeout_s:g} s, " + ("1 warm spare (world 4)" if spares else "world 4 -> 3"))
            runs = [one(folder, train, fault, spares, i, rng) for i in range(n)]
            every[name] = runs
            print(row(name, runs), flush=True)
        example = next((r["line"] for runs in every.values() for r in runs if r.get("line")), "")
        print(f"load average at the end {os.getloadavg()[0]:.1f}; a console line: {example}")
    if a.json:
        Path(a.json).write_text(json.dumps(every, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
