"""Benchmark: how soon the watchdog catches a stopped rank before warm-up, and how soon a
torchrun restart follows.

  (a) detection: 4 gloo ranks (tests/runtime/test_watchdog.py:rank_train; 100 ms steps, a
      20-step warm-up with a 600 s warm-up timeout, the given step timeout as the floor);
      rank 3 is SIGSTOPped at step 5; latency = each waiting rank's hang record time minus the
      SIGSTOP time; N runs per step timeout (2, 3 and 5 s by default); "open" = how long the
      waiting rank's step had been open when it fired (never under the step timeout).
  (b) restart: the example (examples/train_resilient.py) under real torchrun, 2 gloo ranks,
      `--max-restarts 1 --step-timeout 5`; rank 1 SIGSTOPped at step 5 (before warm-up);
      times from the SIGSTOP to the first hang record, to the stopped rank's end, and to the
      restarted ranks' "resumed/started" events, with the stopped rank SIGKILLed by its peer's
      watchdog (the default) and with `--no-kill-stuck-peers` (torchrun's own SIGTERM, 30 s
      wait, SIGKILL).

    .venv/bin/python benchmarks/bench_watchdog.py [--runs 3] [--step-timeouts 2,3,5] [--restart-runs 1]
        [--with-no-kill]       (b) also without the peer's kill (adds ~45 s per run)

About 2.5 minutes with the defaults on a 2-core VM.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from preflight.runtime.events import read_events  # noqa: E402
from preflight.runtime.watchdog import read_heartbeats  # noqa: E402
from tests.runtime.test_watchdog import sigstop_before_warmup  # noqa: E402

EXAMPLE = ROOT / "examples" / "train_resilient.py"


def detection(runs: int, step_timeout: float) -> dict[str, Any]:
    lat: list[float] = []
    opened: list[float] = []
    ok_runs = 0
    for i in range(runs):
        with tempfile.TemporaryDirectory(prefix="bench-wd-") as tmp:
            got = sigstop_before_warmup(Path(tmp) / "run", step_timeout=step_timeout)
            ok = got["rcs"] == [75, 75, 75] and all(r.get("suspects") == [3] for r in got["records"].values())
            ok_runs += ok
            print(f"  {step_timeout:g} s, run {i + 1}: exit codes {got['rcs']}, stopped rank {got['stopped_rc']}, "
                  f"latency {', '.join(f'{t:.2f}' for t in got['latency'])} s{'' if ok else '  (FAILED)'}")
            lat.extend(got["latency"])
            opened.extend(float(r["elapsed_s"]) for r in got["records"].values())
    return {"latency": lat, "opened": opened, "ok_runs": ok_runs, "runs": runs}


def restart(kill: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-wd-restart-") as tmp:
        run = Path(tmp) / "run"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "SLURM_", "NCCL_"))}
        env.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
                    "CUDA_VISIBLE_DEVICES": ""})
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "--max-restarts", "1", str(EXAMPLE), "--run-dir", str(run), "--steps", "60",
               "--save-every", "1000", "--step-delay", "0.1", "--step-timeout", "5"]
        if not kill:
            cmd.append("--no-kill-stuck-peers")
        log = open(Path(tmp) / "torchrun.log", "wb")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        res: dict[str, Any] = {}
        try:
            deadline = time.monotonic() + 120
            pid = None
            while time.monotonic() < deadline:
                beat = read_heartbeats(run).get(1)
                if beat and int(beat.get("step") or 0) >= 5:
                    pid = int(beat["pid"])
                    break
                time.sleep(0.02)
            if pid is None:
                raise RuntimeError("rank 1 did not reach step 5")
            os.kill(pid, signal.SIGSTOP)
            t0 = time.time()
            while time.monotonic() < deadline and "gone" not in res:
                if "hang" not in res and list(run.glob("hang-rank*.json")):
                    res["hang"] = time.time() - t0
                if not Path(f"/proc/{pid}").exists() or _zombie(pid):
                    res["gone"] = time.time() - t0
                time.sleep(0.02)
            while time.monotonic() < deadline:
                again = [e for e in read_events(run) if e["check"] == "runtime.train"
                         and e["facts"].get("restart") == 1 and "start_step" in e["facts"]]
                if len(again) == 2:
                    res["restarted"] = max(e["time"] for e in again) - t0
                    break
                time.sleep(0.05)
            res["rc"] = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
            log.close()
        return res


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--restart-runs", type=int, default=1)
    ap.add_argument("--step-timeouts", default="2,3,5", help="comma-separated step timeouts (s) for (a)")
    ap.add_argument("--with-no-kill", action="store_true", help="(b) also with --no-kill-stuck-peers")
    a = ap.parse_args()
    t0 = time.monotonic()
    print(f"load average {os.getloadavg()[0]:.2f}")
    timeouts = [float(x) for x in a.step_timeouts.split(",") if x.strip()]
    print(f"(a) SIGSTOP at step 5 of warm-up, {a.runs} runs x 3 waiting ranks per step timeout")
    rows = {st: detection(a.runs, st) for st in timeouts}
    print("| step timeout | detection: min | median | max | step open when fired: min | runs right |")
    print("|---|---|---|---|---|---|")
    for st, r in rows.items():
        lat = r["latency"] or [float("nan")]
        print(f"| {st:g} s | {min(lat):.2f} s | {statistics.median(lat):.2f} s | {max(lat):.2f} s | "
              f"{min(r['opened'] or [float('nan')]):.2f} s | {r['ok_runs']}/{r['runs']} |")
    print(f"load average {os.getloadavg()[0]:.2f}")
    print("(b) restart after a hang under torchrun (2 ranks, --max-restarts 1, --step-timeout 5)")
    for kill in (True, False) if a.with_no_kill else (True,):
        for i in range(a.restart_runs):
            r = restart(kill)
            print(f"| {'peer SIGKILLs the stopped rank' if kill else '--no-kill-stuck-peers'} | run {i + 1} | "
                  f"hang record {r.get('hang', float('nan')):.1f} s | stopped rank gone {r.get('gone', float('nan')):.1f} s"
                  f" | restarted ranks up {r.get('restarted', float('nan')):.1f} s | torchrun rc {r.get('rc')} |")
    print(f"{time.monotonic() - t0:.0f} s, load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
