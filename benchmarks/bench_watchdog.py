"""Benchmark: how soon the watchdog catches a stopped rank before warm-up, and how soon a
torchrun restart follows.

  (a) detection: 4 gloo ranks (tests/runtime/test_watchdog.py:rank_train; 100 ms steps, a
      20-step warm-up with a 600 s warm-up timeout, the given step timeout as the floor);
      rank 3 is SIGSTOPped at step 5; latency = each waiting rank's hang record time minus the
      SIGSTOP time; N runs.
  (b) restart: the example (examples/train_resilient.py) under real torchrun, 2 gloo ranks,
      `--max-restarts 1 --step-timeout 5`; rank 1 SIGSTOPped at step 5 (before warm-up);
      times from the SIGSTOP to the first hang record, to the stopped rank's end, and to the
      restarted ranks' "resumed/started" events, with the stopped rank SIGKILLed by its peer's
      watchdog (the default) and with `--no-kill-stuck-peers` (torchrun's own SIGTERM, 30 s
      wait, SIGKILL).

    .venv/bin/python benchmarks/bench_watchdog.py [--runs 5] [--restart-runs 2]
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


def detection(runs: int, step_timeout: float) -> list[float]:
    out: list[float] = []
    for i in range(runs):
        with tempfile.TemporaryDirectory(prefix="bench-wd-") as tmp:
            got = sigstop_before_warmup(Path(tmp) / "run", step_timeout=step_timeout)
            ok = got["rcs"] == [75, 75, 75]
            print(f"  run {i + 1}: exit codes {got['rcs']}, stopped rank {got['stopped_rc']}, "
                  f"latency {', '.join(f'{t:.2f}' for t in got['latency'])} s{'' if ok else '  (FAILED)'}")
            out.extend(got["latency"])
    return out


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
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--restart-runs", type=int, default=2)
    ap.add_argument("--step-timeout", type=float, default=5.0)
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    print(f"(a) SIGSTOP at step 5 of warm-up, step timeout {a.step_timeout:g} s, {a.runs} runs x 3 waiting ranks")
    lat = detection(a.runs, a.step_timeout)
    print(f"| detection latency | min {min(lat):.2f} s | median {statistics.median(lat):.2f} s | "
          f"max {max(lat):.2f} s | bound {a.step_timeout + 2:.0f} s |")
    print("(b) restart after a hang under torchrun (2 ranks, --max-restarts 1, --step-timeout 5)")
    for kill in (True, False):
        for i in range(a.restart_runs):
            r = restart(kill)
            print(f"| {'peer SIGKILLs the stopped rank' if kill else '--no-kill-stuck-peers'} | run {i + 1} | "
                  f"hang record {r.get('hang', float('nan')):.1f} s | stopped rank gone {r.get('gone', float('nan')):.1f} s"
                  f" | restarted ranks up {r.get('restarted', float('nan')):.1f} s | torchrun rc {r.get('rc')} |")


if __name__ == "__main__":
    main()
