"""Benchmark: `preflight analyze` on a large application log of INFO/WARN lines with nothing of NCCL's.

Format detection reads every ` INFO ` / ` WARN ` line of a file it is given, so an application's
own log (a trainer's, a data loader's, Kafka's) costs each line the NCCL patterns. This writes
--lines lines in two common shapes (ISO time, host, program[pid]: WARN ... `[3]` ...; a Java
logger's `[time] WARN class [client] ...`), runs `python -m preflight.cli analyze FILE` --repeat
times and prints the median wall time. `--against DIR` times another checkout's tree too
(PYTHONPATH=DIR, the same interpreter), interleaved, for a ratio measured in one run.

    .venv/bin/python benchmarks/bench_applog.py [--lines 400000] [--repeat 3] [--against ../old]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_log(path: Path, lines: int) -> None:
    with path.open("w") as fh:
        for i in range(lines // 2):
            fh.write(f"2026-01-01T00:00:{i % 60:02d}.123456+00:00 node{i % 50:03d} trainer[{1000 + i}]: WARN request {i} "
                     f"took too long on worker pool [3] retrying: see /var/log/x.log:{i}\n")
            fh.write(f"[2026-01-01 00:00:00,123] WARN org.apache.kafka.clients.NetworkClient [Consumer clientId=c-{i}] "
                     f"Connection to node {i} could not be established\n")


def once(tree: Path, log: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "preflight.cli", "analyze", str(log)], env=env, cwd=tree,
                       capture_output=True, text=True, timeout=600)
    took = time.perf_counter() - t0
    if "Traceback" in p.stderr or "internal error" in p.stderr:  # a tree that cannot run times nothing
        raise SystemExit(f"{tree}: {p.stderr[-600:]}")
    return took


def loop_s() -> float:
    t0 = time.perf_counter()
    for _ in range(10_000_000):
        pass
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=400_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--against", type=Path, help="another checkout to time on the same file")
    a = ap.parse_args()
    trees = [ROOT, *([a.against.resolve()] if a.against else [])]
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "app.log"
        write_log(log, a.lines)
        times: dict[Path, list[float]] = {t: [] for t in trees}
        for _ in range(a.repeat):
            for t in trees:
                times[t].append(once(t, log))
    print(f"{platform.node()}, {os.cpu_count()} CPUs, 10M-iteration loop {loop_s():.2f} s; {a.lines} lines")
    for t, got in times.items():
        print(f"{t}: median {statistics.median(got):.2f} s over {len(got)} ({', '.join(f'{x:.2f}' for x in got)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
