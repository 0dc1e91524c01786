"""Benchmark: cost of the runtime layer's per-step bookkeeping against a 50 ms training step.

Measures, in one process (gloo, world size 1, CPU):
  * the training thread's cost per step of `Watchdog.section("step")` + `heartbeat`,
    `StragglerDetector.step_start/step_end` with a `waiting()` block, and `LossGuard.check`
    (tight loop, median of several repeats);
  * the straggler interval (one all_gather + host names once), amortised over its steps;
  * the watchdog monitor thread's own CPU time per second of wall time (polls every
    0.25 s, heartbeat file every 0.5 s), which it takes from the training thread at worst;
  * an end-to-end A/B: steps of fixed CPU work (about 50 ms) with and without the layer,
    training-thread CPU time per step, interleaved (its noise is larger than the effect).
Prints a short table; results go to BENCHMARKS.md.

    .venv/bin/python benchmarks/bench_runtime_overhead.py [--step-ms 50] [--steps 100]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from preflight.runtime.events import EventWriter  # noqa: E402
from preflight.runtime.lossguard import LossGuard  # noqa: E402
from preflight.runtime.straggler import StragglerDetector  # noqa: E402
from preflight.runtime.watchdog import Watchdog  # noqa: E402


def bookkeeping_us(wd: Watchdog, det: StragglerDetector, guard: LossGuard, n: int) -> float:
    """Median per-step cost in microseconds of the calls a training step makes."""
    det.interval_steps = 10**9  # no collective in this loop: measured separately
    per = []
    step = 0
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            det.step_start()
            with wd.section("step", step=step):
                with det.waiting():
                    pass
            guard.check(step, 1.0)
            det.step_end()
            step += 1
        per.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(per)


def interval_ms(det: StragglerDetector, repeat: int = 20) -> float:
    det.interval_steps = 1
    det.record(0.05)  # host names gathered once, outside the timing
    t0 = time.perf_counter()
    for _ in range(repeat):
        det.record(0.05)
    return (time.perf_counter() - t0) / repeat * 1e3


def calibrate(step_ms: float) -> int:
    n = 20000
    while True:
        t0 = time.perf_counter()
        work(n)
        dt = time.perf_counter() - t0
        if dt > 0.02:
            return max(1, int(n * step_ms / 1000 / dt))
        n *= 2


def work(n: int) -> float:
    acc = 0.0
    for i in range(n):
        acc += i * 0.5
    return acc


def run_steps(n_work: int, steps: int, layer: tuple[Watchdog, StragglerDetector, LossGuard] | None) -> float:
    """Training-thread CPU milliseconds per step (CPU time: other processes' load does not count)."""
    t0 = time.thread_time()
    for step in range(steps):
        if layer is None:
            work(n_work)
            continue
        wd, det, guard = layer
        det.step_start()
        with wd.section("step", step=step):
            work(n_work)
        guard.check(step, 1.0)
        det.step_end()
    return (time.thread_time() - t0) / steps * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--step-ms", type=float, default=50.0)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--interval", type=int, default=50)
    args = ap.parse_args()
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29533", "RANK": "0", "WORLD_SIZE": "1"})
    import torch
    import torch.distributed as dist

    with tempfile.TemporaryDirectory() as tmp:
        events = EventWriter(tmp, rank=0)
        wd = Watchdog(tmp, events=events, rank=0, exit_on_hang=False)
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
        det = StragglerDetector(interval_steps=args.interval, events=events)
        guard = LossGuard(events=events)

        per_step_us = bookkeeping_us(wd, det, guard, 20000)
        tensor_guard = LossGuard()
        loss = torch.tensor(1.0)
        t0 = time.perf_counter()
        for i in range(5000):
            tensor_guard.check(i, loss)
        tensor_check_us = (time.perf_counter() - t0) / 5000 * 1e6
        sync_ms = interval_ms(det)
        det.interval_steps = args.interval

        mon = wd._thread.ident
        assert mon is not None
        clock = time.pthread_getcpuclockid(mon)
        c0, w0 = time.clock_gettime(clock), time.perf_counter()
        n_work = calibrate(args.step_ms)
        base_runs, layer_runs = [], []
        for _ in range(3):  # interleaved, the fastest of each kept
            base_runs.append(run_steps(n_work, args.steps // 3, None))
            layer_runs.append(run_steps(n_work, args.steps // 3, (wd, det, guard)))
        base, with_layer = min(base_runs), min(layer_runs)
        monitor_frac = (time.clock_gettime(clock) - c0) / (time.perf_counter() - w0)
        wd.close()
        dist.destroy_process_group()

    step_s = args.step_ms / 1000
    book = per_step_us * 1e-6 / step_s
    amort = sync_ms * 1e-3 / args.interval / step_s
    total = book + amort + monitor_frac
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {cpu}; Python {platform.python_version()}, "
          f"torch {torch.__version__}; load average {os.getloadavg()[0]:.1f}")
    rows = [
        ("per-step bookkeeping (section + straggler + waiting + loss check, float)", f"{per_step_us:.2f} us",
         f"{book * 100:.4f} %"),
        ("LossGuard.check on a CPU tensor (one .item())", f"{tensor_check_us:.2f} us",
         f"{tensor_check_us * 1e-6 / step_s * 100:.4f} %"),
        (f"straggler interval (gloo all_gather, world 1) / {args.interval} steps", f"{sync_ms:.3f} ms",
         f"{amort * 100:.4f} %"),
        ("watchdog monitor thread CPU per wall second", f"{monitor_frac * 1e3:.3f} ms/s", f"{monitor_frac * 100:.4f} %"),
        ("total (bookkeeping + interval + monitor)", "", f"{total * 100:.4f} %"),
        (f"end-to-end {args.step_ms:g} ms step, training-thread CPU without / with",
         f"{base:.2f} / {with_layer:.2f} ms", f"{(with_layer / base - 1) * 100:+.2f} % (noise-bound)"),
    ]
    w = max(len(r[0]) for r in rows)
    print(f"{'measure':<{w}}  {'cost':>18}  {'of a ' + format(args.step_ms, 'g') + ' ms step':>22}")
    for name, cost, pct in rows:
        print(f"{name:<{w}}  {cost:>18}  {pct:>22}")
    print(f"target < 1 %: {'met' if total < 0.01 else 'NOT met'}")


if __name__ == "__main__":
    main()
