"""Benchmark: `preflight node` with slow tools, and CLI start-up.

Every fake GPU/IB/system tool sleeps DELAY seconds before printing its capture (a healthy
8xH100 node scenario). Probes run concurrently, so `preflight node` should take about one
DELAY, not the sum. Also times `preflight --help` and checks that the node path imports
neither torch nor pandas. With instant tools it also times a run inside its process (main()
entry to exit, and importing the CLI before it). Goals, on a VM where a 10M-iteration Python
loop takes 0.8 s (scaled by the loop timed here): slowest tool + 0.3 s; main() <= 0.3 s.
Prints a short table (results go to BENCHMARKS.md); --json prints the figures of `measure()`.

    .venv/bin/python benchmarks/bench_node.py [--delay 1.0] [--repeat 5] [--json]
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

from tests import fakes  # noqa: E402
from tests.fakes import fake_nvml  # noqa: E402
from tests.scenarios import TOOLS, healthy_h100  # noqa: E402

PREFLIGHT = [sys.executable, "-m", "preflight.cli"]
REFERENCE_LOOP_S = 0.8  # the 10M-iteration loop on the machine the goals are stated for
GOAL_OVER_DELAY_S = 0.3  # slow tools: a node run within the slowest tool + this
GOAL_MAIN_S = 0.3  # instant tools: main() entry to exit


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    return time.perf_counter() - start, p


IN_PROCESS = ("import json, sys, time\n"
              "t0 = time.perf_counter()\n"
              "from preflight.cli import main\n"
              "t1 = time.perf_counter()\n"
              "sys.argv = ['preflight', 'node', '--json']\n"
              "try:\n    main()\nexcept SystemExit:\n    pass\n"
              "t2 = time.perf_counter()\n"
              "print('INPROC ' + json.dumps({'import_cli_s': t1 - t0, 'main_s': t2 - t1}), file=sys.stderr)\n")


def _in_process(env: dict[str, str]) -> dict[str, float]:
    """One `preflight node --json` timed inside its process: importing the CLI, and main() from
    entry to exit (interpreter start-up excluded)."""
    _, p = timed([sys.executable, "-c", IN_PROCESS], env)
    line = next((x for x in p.stderr.splitlines() if x.startswith("INPROC ")), None)
    if line is None:
        raise SystemExit(f"preflight node failed in process: {p.stderr[-600:]}")
    return dict(json.loads(line[7:]))


def _probes_per_run() -> int:
    """How many tool invocations a node run makes (each costs DELAY when run in a row)."""
    from preflight import engine, registry
    from preflight.profile import load
    from preflight.registry import Options

    reg = registry.load()
    sel = engine.select(reg, node_only=True)
    plan = engine.plan_node(sel, "n", load("h100-sxm-8x"), Options())
    return len([p for p in plan.probes() if p.commands and p.commands[0][0] in TOOLS])


def measure(delay: float = 1.0, repeat: int = 5) -> dict[str, Any]:
    """The figures: `preflight node` wall with slow tools (against the slowest tool), wall and
    in-process time with instant tools, `--help`, and the heavy modules on the node path."""
    with tempfile.TemporaryDirectory() as tmp:
        bin_dir = fakes.install(Path(tmp) / "bin", TOOLS)
        sc = healthy_h100(Path(tmp) / "sc")
        env = fakes.env_for(bin_dir, sc, delay=delay)
        env.pop("PREFLIGHT_CONFIG", None)
        env["XDG_DATA_HOME"] = str(Path(tmp) / "data")
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # the first run leaves .pyc files, as an installed preflight has
        fake_nvml.with_library(env)  # the fake libnvidia-ml.so.1 the NVML probe loads
        node_cmd = [*PREFLIGHT, "node", "--json"]
        timed(node_cmd, dict(env, PREFLIGHT_FAKE_DELAY="0"))  # warm-up: page cache and .pyc files
        runs = []
        doc: dict[str, Any] = {}
        for _ in range(repeat):
            t, p = timed(node_cmd, env)
            runs.append(t)
            doc = json.loads(p.stdout)
        checks = sorted({r["check"] for r in doc["results"]})
        n_probes = _probes_per_run()
        env0 = dict(env, PREFLIGHT_FAKE_DELAY="0")
        zero = [timed(node_cmd, env0)[0] for _ in range(repeat)]
        inproc = [_in_process(env0) for _ in range(repeat)]
        help_runs = [timed([*PREFLIGHT, "--help"], env)[0] for _ in range(repeat)]
        script = ("import sys, runpy; sys.argv=['preflight','node','--json']\n"
                  "try:\n    runpy.run_module('preflight.cli', run_name='__main__')\nexcept SystemExit:\n    pass\n"
                  "print('HEAVY', sorted(m for m in ('torch','pandas','numpy','paramiko') if m in sys.modules),"
                  " file=sys.stderr)")
        _, p = timed([sys.executable, "-c", script], env)
        heavy = [line for line in p.stderr.splitlines() if line.startswith("HEAVY")]
    loop = loop_time()
    med = statistics.median(runs)
    main_s = statistics.median(x["main_s"] for x in inproc)
    import_s = statistics.median(x["import_cli_s"] for x in inproc)
    scale = loop / REFERENCE_LOOP_S
    return {
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "loadavg": list(os.getloadavg()), "loop_10m_s": round(loop, 3), "reference_loop_s": REFERENCE_LOOP_S,
        "repeat": repeat, "delay_s": delay, "probes_per_run": n_probes,
        "node_slow_median_s": round(med, 4), "node_slow_min_s": round(min(runs), 4), "node_slow_max_s": round(max(runs), 4),
        "node_slow_over_delay_s": round(med - delay, 4),
        "goal_slow_over_delay_s": GOAL_OVER_DELAY_S, "goal_slow_over_delay_here_s": round(GOAL_OVER_DELAY_S * scale, 4),
        "node_instant_median_s": round(statistics.median(zero), 4),
        "node_instant_main_s": round(main_s, 4), "node_instant_import_cli_s": round(import_s, 4),
        "node_instant_in_process_s": round(main_s + import_s, 4),
        "goal_instant_main_s": GOAL_MAIN_S, "goal_instant_main_here_s": round(GOAL_MAIN_S * scale, 4),
        "help_median_s": round(statistics.median(help_runs), 4),
        "heavy_on_node_path": heavy[0][6:] if heavy else "?",
        "checks_graded": checks,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delay", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    f = measure(args.delay, args.repeat)
    if args.json:
        print(json.dumps(f, indent=1))
        return
    rows = [
        ("machine", f"{f['machine']}, 10M-iteration loop {f['loop_10m_s']:.2f} s, "
                    f"load {', '.join(f'{x:.1f}' for x in f['loadavg'])}"),
        ("tool delay (s)", f"{args.delay:.2f}"),
        ("fake-tool probes per node run", str(f["probes_per_run"])),
        ("sum of tool delays (serial)", f"{f['probes_per_run'] * args.delay:.2f} s"),
        (f"preflight node, median of {args.repeat}",
         f"{f['node_slow_median_s']:.2f} s (min {f['node_slow_min_s']:.2f}, max {f['node_slow_max_s']:.2f})"),
        ("node time over the slowest tool", f"{f['node_slow_over_delay_s']:+.2f} s (goal {GOAL_OVER_DELAY_S:.2f} s, "
                                            f"{f['goal_slow_over_delay_here_s']:.2f} s here)"),
        ("node time / one delay", f"{f['node_slow_median_s'] / args.delay:.2f}x"),
        (f"preflight node with instant tools, median of {args.repeat}", f"{f['node_instant_median_s']:.2f} s"),
        ("  inside the process: main() entry to exit", f"{f['node_instant_main_s']:.3f} s (goal {GOAL_MAIN_S:.2f} s, "
                                                       f"{f['goal_instant_main_here_s']:.2f} s here)"),
        ("  inside the process: importing the CLI", f"{f['node_instant_import_cli_s']:.3f} s"),
        ("node time / serial sum", f"{f['node_slow_median_s'] / max(f['probes_per_run'] * args.delay, 1e-9):.2f}x"),
        (f"preflight --help, median of {args.repeat}", f"{f['help_median_s'] * 1000:.0f} ms"),
        ("heavy modules on the node path", f["heavy_on_node_path"]),
        ("checks graded", ", ".join(f["checks_graded"])),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")




if __name__ == "__main__":
    main()
