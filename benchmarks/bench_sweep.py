"""The sweep's per-size time against a bare timed loop of torch.distributed.all_reduce, in the
same run (same ranks, same buffers, interleaved per size): local gloo, 4 processes.

    .venv/bin/python benchmarks/bench_sweep.py [--nproc 4] [--max-bytes 4194304] [--iters 40] [--reps 3]

Prints one row per size: the sweep's median (slowest rank per iteration) and mean, the bare
loop's time per iteration, and the differences. Per size the ranks alternate --reps blocks of
sweep measurement and bare loop in one process group; the medians over the blocks are compared.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from preflight.sweep.launch import launch_local  # noqa: E402
from preflight.sweep.spec import SweepSpec  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--min-bytes", type=int, default=1024)
    ap.add_argument("--max-bytes", type=int, default=4 << 20)
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    sweep: dict[int, list[tuple[float, float]]] = {}
    bare: dict[int, list[float]] = {}
    spec = SweepSpec(backend="gloo", min_bytes=a.min_bytes, max_bytes=a.max_bytes, factor=4, warmup=3,
                     iters=a.iters, op_timeout_s=60, deadline_s=600, pingpong="none", isolate=False,
                     calibrate=a.reps)
    got = launch_local(spec, a.nproc, sys.executable)
    for ev in got.events:
        if ev.get("ev") == "calib":
            sweep.setdefault(ev["bytes"], []).append((ev["median_us"], ev["mean_us"]))
            bare.setdefault(ev["bytes"], []).append(ev["bare_us"])
    print(f"local gloo, {a.nproc} ranks, {a.iters} iterations per block, median of {a.reps} alternating blocks")
    print(f"{'size':>10} {'sweep med us':>13} {'sweep mean us':>14} {'bare loop us':>13} {'med vs bare':>12} "
          f"{'mean vs bare':>13}")
    worst = 0.0
    for size in sorted(sweep):
        if size not in bare:
            continue
        med = statistics.median(m for m, _ in sweep[size])
        mean = statistics.median(m for _, m in sweep[size])
        b = statistics.median(bare[size])
        d1, d2 = (med - b) / b * 100, (mean - b) / b * 100
        worst = max(worst, abs(d1))
        print(f"{size:>10} {med:>13.1f} {mean:>14.1f} {b:>13.1f} {d1:>+11.1f}% {d2:>+12.1f}%")
    print(f"largest |median - bare| difference: {worst:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
