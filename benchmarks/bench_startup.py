"""Benchmark: the CLI's own start-up cost and a GO prologue, each against a bare interpreter.

Paired runs: every round runs `python3 -c pass` and then each command, so machine noise hits a
pair alike; a command's figure is the median over the rounds of (command - bare python).

  preflight --help (module)    `python -m preflight.cli --help`
  preflight --help (script)    the console script `preflight --help` (its wrapper counted)
  preflight node --help        `python -m preflight.cli node --help`
  prologue GO (gpu.xid)        `preflight prologue --only gpu.xid --no-drain`, a clean kernel log
  prologue GO (node checks)    `preflight prologue --no-drain`, every node check over instant fake
                               tools of a healthy 8xH100 node (tests/scenarios.py)

Goals (on a VM where a 10M-iteration Python loop takes 0.8 s; the loop is timed here too and the
goals scaled by it): --help <= 0.1 s over bare python, a GO prologue <= 0.5 s over it.
`measure()` returns the figures as a dict (benchmarks/bench_fleet.py uses it through --json).

    .venv/bin/python benchmarks/bench_startup.py [--repeat 11] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench_fleet import loop_time  # noqa: E402  (the one yardstick; run as a script, benchmarks/ is on the path)

REFERENCE_LOOP_S = 0.8  # the 10M-iteration loop on the machine the goals are stated for
GOALS_S = {"help": 0.1, "prologue": 0.5}




def _prologue_env(work: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Environments of the two GO prologues: a clean kernel log (gpu.xid), and a healthy node's
    instant fake tools (every node check). Reports and history go under `work`."""
    from tests import fakes
    from tests.fakes import fake_nvml
    from tests.scenarios import TOOLS, healthy_h100
    from tests.slurm.test_slurm import KMSG_CLEAN

    bin_x = fakes.install(work / "bin-xid", ["dmesg", "nvidia-smi"])
    fakes.scenario(work / "sc-xid", {"dmesg": [{"match": ".*", "stdout": "kmsg.txt"}]}, {"kmsg.txt": KMSG_CLEAN})
    env_x = fakes.env_for(bin_x, work / "sc-xid")
    bin_n = fakes.install(work / "bin-node", TOOLS)
    env_n = fakes.env_for(bin_n, healthy_h100(work / "sc-node"), delay=0)
    fake_nvml.with_library(env_n)
    for env in (env_x, env_n):
        env.pop("PREFLIGHT_CONFIG", None)
        env.update(SLURMD_NODENAME="gpu017", XDG_DATA_HOME=str(work / "data"))
    return env_x, env_n


def _cacheable(env: dict[str, str] | None) -> dict[str, str]:
    """`env` (default: this one) allowing .pyc files to be written, so that the warm-up run leaves
    every module compiled as an installed preflight has it (PYTHONDONTWRITEBYTECODE would have each
    run compile every changed module from source)."""
    out = dict(os.environ if env is None else env)
    out.pop("PYTHONDONTWRITEBYTECODE", None)
    return out


def _once(argv: list[str], env: dict[str, str] | None, cwd: Path, want_go: bool = False) -> float:
    env = _cacheable(env)
    t0 = time.perf_counter()
    p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    took = time.perf_counter() - t0
    if p.returncode != 0 or (want_go and ": GO" not in p.stdout.split("\n", 1)[0]):
        raise SystemExit(f"{' '.join(argv)} failed (rc {p.returncode}): {(p.stderr or p.stdout)[-600:]}")
    return took


def measure(repeat: int = 11) -> dict[str, Any]:
    """The acceptance figures: per command its median wall and its paired median over bare python."""
    py = sys.executable
    script = Path(py).parent / "preflight"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env_x, env_n = _prologue_env(work)
        commands: dict[str, tuple[list[str], dict[str, str] | None, bool]] = {
            "preflight --help (module)": ([py, "-m", "preflight.cli", "--help"], None, False),
            "preflight node --help": ([py, "-m", "preflight.cli", "node", "--help"], None, False),
            "prologue GO (gpu.xid)": ([py, "-m", "preflight.cli", "prologue", "--only", "gpu.xid", "--no-drain"],
                                      env_x, True),
            "prologue GO (node checks)": ([py, "-m", "preflight.cli", "prologue", "--no-drain"], env_n, True),
        }
        if script.exists():
            commands["preflight --help (script)"] = ([str(script), "--help"], None, False)
        bare = [py, "-c", "pass"]
        for argv, env, go in commands.values():  # warm the page cache and the .pyc files
            _once(argv, env, work, go)
        times: dict[str, list[float]] = {name: [] for name in commands}
        over: dict[str, list[float]] = {name: [] for name in commands}
        base: list[float] = []
        for _ in range(max(1, repeat)):
            for name, (argv, env, go) in commands.items():
                b = _once(bare, None, work)
                t = _once(argv, env, work, go)
                base.append(b)
                times[name].append(t)
                over[name].append(t - b)
    loop = loop_time()
    scale = loop / REFERENCE_LOOP_S
    rows = {}
    for name in commands:
        goal = GOALS_S["prologue" if name.startswith("prologue") else "help"]
        above = statistics.median(over[name])
        rows[name] = {"median_s": round(statistics.median(times[name]), 4), "over_python_s": round(above, 4),
                      "goal_s": goal, "goal_here_s": round(goal * scale, 4), "met_here": above <= goal * scale}
    return {"machine": platform.node(), "python": platform.python_version(), "repeat": repeat,
            "loadavg": list(os.getloadavg()), "loop_10m_s": round(loop, 3), "reference_loop_s": REFERENCE_LOOP_S,
            "python_c_pass_median_s": round(statistics.median(base), 4), "results": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=11)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    doc = measure(args.repeat)
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    print(f"start-up, paired median of {doc['repeat']} (machine {doc['machine']}, Python {doc['python']}, "
          f"10M-iteration loop {doc['loop_10m_s']:.2f} s, load {', '.join(f'{x:.1f}' for x in doc['loadavg'])})")
    print(f"  {'python -c pass':28s} {doc['python_c_pass_median_s']:.3f} s")
    for name, row in doc["results"].items():
        print(f"  {name:28s} {row['median_s']:.3f} s   over bare python {row['over_python_s']:+.3f} s   "
              f"goal {row['goal_s']:.2f} s ({row['goal_here_s']:.2f} s here): {'met' if row['met_here'] else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
