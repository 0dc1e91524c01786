"""Benchmark: the CLI's own start-up cost, against a bare interpreter.

Runs `python -c pass`, `preflight --help` and `preflight node --help` (as `python -m
preflight.cli ...`, so no console-script wrapper is counted) --repeat times each, interleaved
so that machine noise hits all three alike, and prints the median wall time of each and the
CLI's cost above bare Python. The goal is <= 0.15 s above bare Python for both.

    .venv/bin/python benchmarks/bench_startup.py [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "preflight --help": [sys.executable, "-m", "preflight.cli", "--help"],
    "preflight node --help": [sys.executable, "-m", "preflight.cli", "node", "--help"],
}


def once(argv: list[str]) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, timeout=60)
    took = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed (rc {p.returncode}): {p.stderr.decode()[-400:]}")
    return took


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    for argv in COMMANDS.values():  # warm the page cache and the .pyc files
        once(argv)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(max(1, args.repeat)):
        for name, argv in COMMANDS.items():
            times[name].append(once(argv))
    med = {name: statistics.median(t) for name, t in times.items()}
    bare = med["python -c pass"]
    rows = {name: {"median_s": round(m, 4), "above_python_s": round(m - bare, 4)} for name, m in med.items()}
    if args.json:
        print(json.dumps({"machine": platform.node(), "repeat": args.repeat, "results": rows}, indent=1))
        return 0
    print(f"start-up, median of {args.repeat} (machine {platform.node()}, {platform.python_version()})")
    for name, row in rows.items():
        print(f"  {name:24s} {row['median_s']:.3f} s   above bare python {row['above_python_s']:+.3f} s")
    worst = max(rows["preflight --help"]["above_python_s"], rows["preflight node --help"]["above_python_s"])
    print(f"goal <= 0.150 s above bare python: {'met' if worst <= 0.15 else 'NOT met'} ({worst:.3f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
