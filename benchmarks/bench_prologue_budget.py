"""Benchmark: the prologue against its time budget when the kernel-log tool hangs.

`preflight prologue --only gpu.xid --budget B` on this machine, wall time from before the
process starts to its exit, in three cases:

  hang     dmesg sleeps forever: its shrunk timeout kills it, the verdict names it timed out
  stuck    dmesg's helper leaves the process group holding its output (like a tool stuck in the
           driver, a kill does not end the probe at once): the watchdog prints the verdict,
           the probe named still running at the budget (--no-drain)
  drain    as stuck, with a fake scontrol: the watchdog also drains with that reason

`--hogs N` starts N CPU hogs (busy loops) for the duration, as on a loaded node.

    .venv/bin/python benchmarks/bench_prologue_budget.py [--runs 5] [--budget 4] [--hogs 2]
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import fakes  # noqa: E402
from tests.conftest import fixture_text  # noqa: E402

STUCK = "#!/bin/sh\nsetsid sleep 120 &\necho $! >> \"{pids}\"\nexec sleep 120\n"
SCONTROL = "#!/bin/sh\n[ \"$1\" = show ] && cat \"{show}\"\nexit 0\n"


def _setup(work: Path) -> dict[str, dict[str, str]]:
    """The environment of each case."""
    hang_bin = fakes.install(work / "hang-bin", ["dmesg"])
    sc = fakes.scenario(work / "sc", {"dmesg": [{"match": ".*", "hang": True}]})
    stuck_bin = work / "stuck-bin"
    stuck_bin.mkdir()
    (stuck_bin / "dmesg").write_text(STUCK.format(pids=work / "pids"))
    (work / "show.txt").write_text(fixture_text("scontrol/show_node_o_mixed.txt"))
    (stuck_bin / "scontrol").write_text(SCONTROL.format(show=work / "show.txt"))
    for tool in ("dmesg", "scontrol"):
        (stuck_bin / tool).chmod(0o755)
    (work / "config.toml").write_text("")
    base = dict(os.environ, SLURMD_NODENAME="gpu017", PREFLIGHT_CONFIG=str(work / "config.toml"))
    return {"hang": {**fakes.env_for(hang_bin, sc), **{k: base[k] for k in ("SLURMD_NODENAME", "PREFLIGHT_CONFIG")}},
            "stuck": {**base, "PATH": f"{stuck_bin}:{base['PATH']}"},
            "drain": {**base, "PATH": f"{stuck_bin}:{base['PATH']}"}}


def _one(case: str, env: dict[str, str], budget: float, work: Path) -> tuple[float, int, str]:
    args = [sys.executable, "-m", "preflight.cli", "prologue", "--only", "gpu.xid", "--budget", f"{budget:g}"]
    if case != "drain":
        args.append("--no-drain")
    start = time.monotonic()
    p = subprocess.run(args, capture_output=True, text=True, env=env, cwd=work, timeout=120)
    took = time.monotonic() - start
    pids = work / "pids"
    if pids.exists():
        for pid in pids.read_text().split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                continue
        pids.unlink()
    line = next((ln.strip() for ln in p.stdout.splitlines() if ln.strip().startswith("ERROR")), p.stdout[:60])
    path = "timed out" if "timed out" in line else ("still running" if "still running" in line else line)
    if case == "drain":
        path += ", drained" if "drain reason=" in p.stdout else ", not drained"
    return took, p.returncode, path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--budget", type=float, default=4.0)
    ap.add_argument("--hogs", type=int, default=0)
    a = ap.parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.hogs)]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            envs = _setup(work)
            print(f"budget {a.budget:g} s, {a.hogs} CPU hog(s), {os.cpu_count()} CPU(s)")
            print(f"{'case':<7} {'runs':>4} {'min s':>6} {'median s':>8} {'max s':>6}  exit  verdict line")
            for case, env in envs.items():
                got = [_one(case, env, a.budget, work) for _ in range(a.runs)]
                walls = [t for t, _, _ in got]
                codes = ",".join(sorted({str(c) for _, c, _ in got}))
                paths = "; ".join(sorted({p for _, _, p in got}))
                print(f"{case:<7} {len(got):>4} {min(walls):>6.2f} {statistics.median(walls):>8.2f} "
                      f"{max(walls):>6.2f}  {codes:>4}  {paths}")
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
