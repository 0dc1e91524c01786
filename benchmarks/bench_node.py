"""Benchmark: `preflight node` with slow tools, and CLI start-up.

Every fake GPU/IB/system tool sleeps DELAY seconds before printing its capture (a healthy
8xH100 node scenario). Probes run concurrently, so `preflight node` should take about one
DELAY, not the sum. Also times `preflight --help` and checks that the node path imports
neither torch nor pandas. Prints a short table; results go to BENCHMARKS.md.

    .venv/bin/python benchmarks/bench_node.py [--delay 1.0] [--repeat 5]
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import fakes  # noqa: E402
from tests.fakes import fake_nvml  # noqa: E402
from tests.scenarios import TOOLS, healthy_h100  # noqa: E402

PREFLIGHT = [sys.executable, "-m", "preflight.cli"]


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    return time.perf_counter() - start, p


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--delay", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bin_dir = fakes.install(Path(tmp) / "bin", TOOLS)
        sc = healthy_h100(Path(tmp) / "sc")
        env = fakes.env_for(bin_dir, sc, delay=args.delay)
        env.pop("PREFLIGHT_CONFIG", None)
        fake_nvml.with_library(env)  # the fake libnvidia-ml.so.1 the NVML probe loads
        node_cmd = [*PREFLIGHT, "node", "--json"]
        runs = []
        n_probes = 0
        for _ in range(args.repeat):
            t, p = timed(node_cmd, env)
            runs.append(t)
            doc = json.loads(p.stdout)
        checks = sorted({r["check"] for r in doc["results"]})
        # how many tool invocations a node run makes (each costs DELAY when run in a row)
        from preflight import engine, registry
        from preflight.profile import load
        from preflight.registry import Options

        reg = registry.load()
        sel = engine.select(reg, node_only=True)
        plan = engine.plan_node(sel, "n", load("h100-sxm-8x"), Options())
        n_probes = len([p for p in plan.probes() if p.commands and p.commands[0][0] in TOOLS])
        env0 = dict(env, PREFLIGHT_FAKE_DELAY="0")
        zero = [timed(node_cmd, env0)[0] for _ in range(args.repeat)]
        help_runs = [timed([*PREFLIGHT, "--help"], env)[0] for _ in range(args.repeat)]
        script = ("import sys, runpy; sys.argv=['preflight','node','--json']\n"
                  "try:\n    runpy.run_module('preflight.cli', run_name='__main__')\nexcept SystemExit:\n    pass\n"
                  "print('HEAVY', sorted(m for m in ('torch','pandas','numpy','paramiko') if m in sys.modules),"
                  " file=sys.stderr)")
        _, p = timed([sys.executable, "-c", script], env)
        heavy = [line for line in p.stderr.splitlines() if line.startswith("HEAVY")]
    med = statistics.median(runs)
    rows = [
        ("machine", f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}"),
        ("tool delay (s)", f"{args.delay:.2f}"),
        ("fake-tool probes per node run", str(n_probes)),
        ("sum of tool delays (serial)", f"{n_probes * args.delay:.2f} s"),
        (f"preflight node, median of {args.repeat}", f"{med:.2f} s (min {min(runs):.2f}, max {max(runs):.2f})"),
        ("node time / one delay", f"{med / args.delay:.2f}x"),
        (f"preflight node with instant tools, median of {args.repeat}", f"{statistics.median(zero):.2f} s"),
        ("node time / serial sum", f"{med / max(n_probes * args.delay, 1e-9):.2f}x"),
        (f"preflight --help, median of {args.repeat}", f"{statistics.median(help_runs) * 1000:.0f} ms"),
        ("heavy modules on the node path", heavy[0][6:] if heavy else "?"),
        ("checks graded", ", ".join(checks)),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


if __name__ == "__main__":
    main()
