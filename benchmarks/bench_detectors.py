"""Benchmark: how often the straggler detector and the loss guard are right, and wrong.

Straggler detector (`preflight.runtime.straggler`):
  (a) synthetic: interval statistics of N ranks whose step times carry scheduling noise
      (log-normal jitter plus occasional long delays), one rank 1.2x to 1.5x slower or none;
      detection rate of the slow rank and false-positive rate (intervals in which a healthy
      rank is reported) for several thresholds and windows (interval_steps);
  (b) real: 4-rank gloo runs on this machine (a step = a little CPU work + a sleep standing for
      device time + a gradient all_reduce), healthy and with one rank 1.2x to 1.5x slower, idle
      and with two CPU hogs (`yes > /dev/null`) running; each rank's step and wait times are
      recorded and the same grid is evaluated over them, and the detector with its defaults
      runs live inside the ranks (its reports are counted too).
Loss guard (`preflight.runtime.lossguard`):
  (c) synthetic loss curves (seeded): five shapes (a classic fast drop then slow decay, a fast
      exponential, a power law, plateaus with sudden drops, a learning-rate warm-up bump) times
      log-noise models (normal 2-20%, Student-t with 2 to 5 degrees of freedom at 1-5% scale):
      the healthy curves with a warning; spikes of 3x, 5x and 10x the true loss injected early
      (steps 15-120) and late (300-2000): detection at that step; for the default rule and the
      rule before (3x the median of the last 100 losses and 6 robust sigmas); and the per-call
      cost of LossGuard.check. `--parts c` runs this part alone (about 70 s on an idle 2-core
      VM; 4 minutes at load 10);
  (d) 10x spikes at fixed steps 60, 250 (just after the noise's tail is first measured) and
      1000 in every Student-t cell of (c)'s healthy table, 30 curves per cell and step, and
      false alarms on clean curves of the same cells, for the default guard and the rule
      before `catch_factor` (`--parts d`).

    .venv/bin/python benchmarks/bench_detectors.py [--quick] [--skip-real]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from preflight.runtime.lossguard import LossGuard  # noqa: E402
from preflight.runtime.straggler import StragglerDetector, interval_stats, score_ranks  # noqa: E402

THRESHOLDS = (0.7, 0.75, 0.8, 0.85)
FACTORS = (1.2, 1.3, 1.4, 1.5)  # slow ranks measured
WINDOWS = (20, 50, 100)

# ---- (a) synthetic step times ----------------------------------------------------------------


def noisy_step(rng: random.Random, base: float, jitter: float, p_delay: float, delay: float) -> float:
    """One step: log-normal jitter, and with probability p_delay a scheduler delay (exponential)."""
    t = base * math.exp(rng.gauss(0.0, jitter))
    if rng.random() < p_delay:
        t += rng.expovariate(1.0 / delay)
    return t


def synthetic(world: int, window: int, slow: float, intervals: int, rng: random.Random,
              jitter: float = 0.20, p_delay: float = 0.05, delay: float = 0.5, p_burst: float = 0.2,
              burst: float = 0.4) -> list[list[list[float]]]:
    """Interval statistics of `intervals` intervals; rank world-1 is `slow` times slower (1: none).
    Noise: 20% log-normal jitter per step, 5% of steps delayed (exponential, mean half a step),
    and in each interval a rank has a noisy neighbour with probability p_burst: a stretch of up
    to `burst` of the interval in which its steps take twice as long.
    Synchronous steps: every rank's step is the slowest rank's busy time; wait = step - busy."""
    out = []
    for _ in range(intervals):
        steps: list[list[float]] = [[] for _ in range(world)]
        waits: list[list[float]] = [[] for _ in range(world)]
        bursts = {}
        for r in range(world):
            if rng.random() < p_burst:
                length = int(window * rng.uniform(0.0, burst))
                start = rng.randrange(0, window - length + 1)
                bursts[r] = range(start, start + length)
        for k in range(window):
            busy = [noisy_step(rng, 1.0 * (slow if r == world - 1 else 1.0), jitter, p_delay, delay)
                    * (2.0 if r in bursts and k in bursts[r] else 1.0) for r in range(world)]
            step = max(busy) + 0.02
            for r in range(world):
                steps[r].append(step)
                waits[r].append(step - busy[r])
        out.append([interval_stats(steps[r], waits[r]) for r in range(world)])
    return out


def rates(intervals: Sequence[Sequence[Sequence[float]]], threshold: float, slow_rank: int | None,
          confirm: int = 1) -> tuple[float, float]:
    """(detection rate of slow_rank, false-positive rate) per interval; with `confirm` > 1 a
    rank is reported when under the threshold in that many intervals in a row."""
    under: dict[int, int] = {}
    hit = fp = 0
    for stats in intervals:
        flagged = []
        for s in score_ranks(stats, threshold):
            r = s["rank"]
            under[r] = under.get(r, 0) + 1 if s["straggler"] else 0
            if under[r] >= confirm:
                flagged.append(r)
        hit += slow_rank in flagged
        fp += any(r != slow_rank for r in flagged)
    n = max(1, len(intervals))
    return hit / n, fp / n


def part_a(quick: bool) -> list[dict[str, Any]]:
    rng = random.Random(11)
    rows = []
    n = 40 if quick else 150
    for world in (4, 32):
        for window in WINDOWS:
            healthy = synthetic(world, window, 1.0, n, rng)
            slow = {f: synthetic(world, window, f, n, rng) for f in FACTORS}
            for th in THRESHOLDS:
                for confirm in (1, 2):
                    row: dict[str, Any] = {"world": world, "window": window, "threshold": th, "confirm": confirm,
                                           "fp": rates(healthy, th, None, confirm)[1]}
                    for f in FACTORS:
                        det, fp = rates(slow[f], th, world - 1, confirm)
                        row[f"det{f}"] = det
                        row[f"fp{f}"] = fp
                    rows.append(row)
    return rows


# ---- (b) real gloo runs ----------------------------------------------------------------------


def worker(argv: list[str]) -> None:
    """One rank: CPU work + sleep (device time) + all_reduce; records step and wait times."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--sleep-ms", type=float, default=20.0)
    ap.add_argument("--cpu-iters", type=int, default=2000)
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--factor", type=float, default=1.4)
    a = ap.parse_args(argv)
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    f = a.factor if rank == a.slow_rank else 1.0
    det = StragglerDetector()  # the defaults, live
    grad = torch.ones(16384)
    steps: list[float] = []
    waits: list[float] = []
    reports: list[list[int]] = []
    iters = int(a.cpu_iters * f)
    for _ in range(a.steps):
        det.step_start()
        t0 = time.perf_counter()
        x = 0
        for i in range(iters):  # host-side work (kernel launches, data loading): contended under load
            x += i * i
        time.sleep(a.sleep_ms / 1000 * f)  # device time: not contended
        w0 = time.perf_counter()
        with det.waiting():
            dist.all_reduce(grad)
        t1 = time.perf_counter()
        steps.append(t1 - t0)
        waits.append(t1 - w0)
        out = det.step_end()
        if out is not None:
            reports.append([s["rank"] for s in out])
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"rank{rank}.json").write_text(json.dumps({"steps": steps, "waits": waits, "reports": reports,
                                                        "interval": det.interval_steps,
                                                        "threshold": det.threshold}))
    dist.barrier()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def calibrate(cpu_ms: float) -> int:
    """Loop iterations that take about cpu_ms on an idle core (median of 5)."""
    per = []
    for _ in range(5):
        t0 = time.perf_counter()
        x = 0
        for i in range(200_000):
            x += i * i
        per.append((time.perf_counter() - t0) / 200_000)
    return max(1, int(cpu_ms / 1000 / statistics.median(per)))


class Hogs:
    """`yes > /dev/null` processes: CPU load for as long as the context lasts."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Hogs:
        self.procs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(self.n)]
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.kill()
            p.wait(timeout=10)


def real_run(world: int, steps: int, sleep_ms: float, cpu_iters: int, slow_rank: int, factor: float,
             timeout: float = 300.0) -> list[dict[str, Any]]:
    """One gloo job of `world` local ranks; each rank's record."""
    out = Path(tempfile.mkdtemp(prefix="bench-det-"))
    port = str(_free_port())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "TORCH_NCCL_", "TORCHELASTIC_"))}
    env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": str(world), "OMP_NUM_THREADS": "1",
                "GLOO_SOCKET_IFNAME": "lo", "PYTHONPATH": str(ROOT)})
    args = ["--out", str(out), "--steps", str(steps), "--sleep-ms", str(sleep_ms), "--cpu-iters", str(cpu_iters),
            "--slow-rank", str(slow_rank), "--factor", str(factor)]
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", *args], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for r in range(world)]
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)
    bad = [p.returncode for p in procs if p.returncode != 0]
    if bad:
        raise RuntimeError(f"a rank failed: {bad}: {procs[0].stderr.read().decode()[-2000:] if procs[0].stderr else ''}")
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def intervals_of(records: list[dict[str, Any]], window: int, skip: int = 10) -> list[list[list[float]]]:
    """A run's recorded steps cut into intervals of `window` steps (the first `skip` left out)."""
    n = min(len(r["steps"]) for r in records)
    out = []
    for start in range(skip, n - window + 1, window):
        out.append([interval_stats(r["steps"][start:start + window], r["waits"][start:start + window])
                    for r in records])
    return out


def part_b(quick: bool) -> dict[str, Any]:
    world = 4
    steps = 260 if quick else 560
    iters = calibrate(4.0)
    runs: dict[str, list[list[dict[str, Any]]]] = {}
    plan = [("healthy, idle", 0, -1, 1.0, 2 if not quick else 1),
            ("healthy, 2 CPU hogs", 2, -1, 1.0, 5 if not quick else 2),
            ("rank 2 1.4x slower, idle", 0, 2, 1.4, 1)]
    plan += [(f"rank 2 {f}x slower, 2 CPU hogs", 2, 2, f, 2 if not quick else 1) for f in FACTORS]
    loads = {}
    for name, hogs, slow, factor, repeat in plan:
        for _ in range(repeat):
            with Hogs(hogs):
                time.sleep(0.5)
                runs.setdefault(name, []).append(real_run(world, steps, 16.0, iters, slow, factor))
                loads[name] = os.getloadavg()[0]
    grid = []
    for name, recs in runs.items():
        slow = 2 if "slower" in name else None
        for window in WINDOWS:
            ivs = [iv for rec in recs for iv in intervals_of(rec, window)]
            for th in THRESHOLDS:
                for confirm in (1, 2):
                    det, fp = rates(ivs, th, slow, confirm)
                    grid.append({"run": name, "window": window, "threshold": th, "confirm": confirm,
                                 "intervals": len(ivs), "det": det, "fp": fp})
    live = {}
    jitter = {}
    for name, recs in runs.items():
        slow = 2 if "slower" in name else None
        reports = [rep for rec in recs for rep in rec[0]["reports"]]
        live[name] = {"runs": len(recs), "intervals": len(reports),
                      "slow_reported": sum(slow in rep for rep in reports) if slow is not None else None,
                      "healthy_reported": sum(any(r != slow for r in rep) for rep in reports),
                      "interval": recs[0][0]["interval"], "threshold": recs[0][0]["threshold"]}
        busy = [max(s - w, 0.0) for rec in recs for r in rec
                for s, w in zip(r["steps"], r["waits"], strict=True)]
        med = statistics.median(busy)
        jitter[name] = {"busy_median_ms": med * 1e3,
                        "p99_ms": sorted(busy)[int(0.99 * (len(busy) - 1))] * 1e3,
                        "mad_pct": statistics.median(abs(b - med) for b in busy) / med * 100}
    return {"grid": grid, "live": live, "jitter": jitter, "loads": loads, "steps": steps, "cpu_iters": iters}


# ---- (c) loss curves ---------------------------------------------------------------------------

HEALTHY_NOISE = (("normal", 0.02), ("normal", 0.05), ("normal", 0.10), ("normal", 0.20),
                 ("t2", 0.005), ("t2", 0.01), ("t2", 0.02), ("t2", 0.05), ("t3", 0.02), ("t3", 0.05),
                 ("t3", 0.10), ("t4", 0.02), ("t4", 0.05), ("t5", 0.05), ("t5", 0.10))
DETECT_NOISE = (("normal", 0.02), ("normal", 0.10), ("t3", 0.02), ("t5", 0.05))
DETECT_CURVES = ("classic", "fast-exp", "power-law")
SPIKES = (3.0, 5.0, 10.0)
WHERE = (("early", 20, 120), ("late", 300, 2000))


class OldRule:
    """The rule before (kept here to compare): a spike is >= 3x the median of the last 100
    losses and >= 6 robust sigmas above it, sigma from the MAD of successive log-differences."""

    def __init__(self) -> None:
        self.window: list[float] = []
        self.seen = 0

    def check(self, step: int, value: float) -> str:
        d = "ok"
        w = self.window
        if self.seen >= 10 and len(w) >= 2 and min(w) > 0 and value > 0:
            logs = [math.log(v) for v in w]
            diffs = [b - a for a, b in zip(logs, logs[1:], strict=False)]
            med = statistics.median(diffs)
            sigma = 1.4826 * statistics.median(abs(x - med) for x in diffs) / math.sqrt(2.0)
            if math.log(value) - math.log(statistics.median(w)) >= max(math.log(3.0), 6.0 * sigma):
                d = "spike"
        self.window = (w + [value])[-100:]
        self.seen += 1
        return d


def _rules(with_25: bool = False) -> list[tuple[str, Any]]:
    extra = [("new2.5", LossGuard(spike_factor=2.5))] if with_25 else []
    return [("new", LossGuard()), *extra, ("old", OldRule())]


def part_c(quick: bool) -> dict[str, Any]:
    from tests.runtime.test_lossguard import CURVES, noisy_curve, trend

    rng = random.Random(24)
    n_healthy = 4 if quick else 10
    n_detect = 6 if quick else 12
    healthy = []
    for model, scale in HEALTHY_NOISE:
        for kind in CURVES:
            row = {"noise": model, "scale": scale, "curve": kind, "curves": n_healthy, "natural10": 0,
                   "new": 0, "old": 0, "new_below": 0, "old_below": 0, "new_late": 0, "old_late": 0}
            for _ in range(n_healthy):
                c = noisy_curve(rng, kind, model, scale)
                mult = [v / trend(kind, t) for t, v in enumerate(c)]
                row["natural10"] += max(mult) >= 10.0
                for rule, guard in _rules():
                    flagged = [t for t, v in enumerate(c) if guard.check(t, v) == "spike"]
                    row[rule] += bool(flagged)
                    # a warning at a step whose loss is under 2.5x its curve: wrong by any definition
                    row[f"{rule}_below"] += any(mult[t] < 2.5 for t in flagged)
                    # once the tail is measured (step 300 on), a warning under 10x its curve
                    row[f"{rule}_late"] += any(t >= 300 and mult[t] < 10.0 for t in flagged)
            healthy.append(row)
    detect = []
    for model, scale in DETECT_NOISE:
        for kind in DETECT_CURVES:
            for where, lo, hi in WHERE:
                for factor in SPIKES:
                    cell = {"noise": model, "scale": scale, "curve": kind, "where": where, "factor": factor,
                            "trials": n_detect, "new": 0, "new2.5": 0, "old": 0}
                    for _ in range(n_detect):
                        at = rng.randrange(lo, hi)
                        c = noisy_curve(rng, kind, model, scale, steps=at + 1)
                        c[at] = factor * trend(kind, at)  # factor x the true loss at that step
                        for rule, guard in _rules(with_25=True):
                            got = [guard.check(t, v) for t, v in enumerate(c)]
                            cell[rule] += got[at] == "spike"
                    detect.append(cell)
    return {"healthy": healthy, "detect": detect, "cost": check_cost()}


STUDENT_NOISE = tuple(n for n in HEALTHY_NOISE if n[0] != "normal")
FIXED_AT = (60, 250, 1000)  # before the tail is measured, just after (from about step 215), late


def part_d(trials: int, healthy_per_shape: int) -> dict[str, Any]:
    """10x spikes at fixed steps (60, 250, 1000) in every Student-t cell of the healthy table,
    `trials` seeded curves per cell and step (the shapes in turn), detected at that step; and,
    on `healthy_per_shape` clean 2000-step curves per shape and cell, the curves with any
    warning, warned at a loss under 2.5x its curve, and warned after step 300 under 10x. The
    default guard against `catch_factor=None` (the rule before: no loss is a spike by its size
    alone once the tail bar is higher)."""
    from tests.runtime.test_lossguard import CURVES, noisy_curve, trend

    rules = (("default", lambda: LossGuard()), ("before", lambda: LossGuard(catch_factor=None)))
    rows = []
    for model, scale in STUDENT_NOISE:
        row: dict[str, Any] = {"noise": model, "scale": scale, "trials": trials}
        for at in FIXED_AT:
            rng = random.Random(f"d-{model}-{scale}-{at}")
            for rule, _ in rules:
                row[f"{rule}@{at}"] = 0
            for t in range(trials):
                kind = CURVES[t % len(CURVES)]
                c = noisy_curve(rng, kind, model, scale, steps=at + 1)
                c[at] = 10.0 * trend(kind, at)
                for rule, make in rules:
                    guard = make()
                    got = [guard.check(i, v) for i, v in enumerate(c)]
                    row[f"{rule}@{at}"] += got[at] == "spike"
        rng = random.Random(f"d-clean-{model}-{scale}")
        row["clean"] = 0
        for rule, _ in rules:
            row.update({f"{rule}_warned": 0, f"{rule}_below": 0, f"{rule}_late": 0})
        for kind in CURVES:
            for _ in range(healthy_per_shape):
                c = noisy_curve(rng, kind, model, scale)
                mult = [v / trend(kind, t) for t, v in enumerate(c)]
                row["clean"] += 1
                for rule, make in rules:
                    guard = make()
                    flagged = [t for t, v in enumerate(c) if guard.check(t, v) == "spike"]
                    row[f"{rule}_warned"] += bool(flagged)
                    row[f"{rule}_below"] += any(mult[t] < 2.5 for t in flagged)
                    row[f"{rule}_late"] += any(t >= 300 and mult[t] < 10.0 for t in flagged)
        rows.append(row)
    return {"rows": rows}


def report_d(d: dict[str, Any]) -> None:
    rows = d["rows"]
    print(f"\n(d) 10x spikes at fixed steps, {rows[0]['trials']} curves per cell and step (the five shapes in "
          f"turn), caught at that step, default / before (catch_factor=None); clean curves ({rows[0]['clean']} "
          "per cell): warned at all, warned under 2.5x its curve, warned after step 300 under 10x, default / before")
    print("| noise | " + " | ".join(f"10x at {at}" for at in FIXED_AT)
          + " | clean: warned | clean: under 2.5x | clean: after 300 under 10x |")
    print("|---|" + "---|" * (len(FIXED_AT) + 3))
    for r in rows:
        n = r["trials"]
        cells = [f"{r[f'default@{at}']}/{n} / {r[f'before@{at}']}/{n}" for at in FIXED_AT]
        clean = [f"{r[f'default_{k}']} / {r[f'before_{k}']}" for k in ("warned", "below", "late")]
        print(f"| {r['noise']} {r['scale'] * 100:g}% | " + " | ".join(cells + clean) + " |")


def check_cost() -> dict[str, float]:
    """Per-call cost of LossGuard.check over 2000-step curves (floats), in microseconds: the
    mean (best of 5 passes, the least disturbed by other load), the per-call median, p99 and
    max of one pass, and one recomputation of the bar over 1000 residuals (best of 20)."""
    from preflight.runtime.lossguard import spike_bar
    from tests.runtime.test_lossguard import log_noise, noisy_curve

    rng = random.Random(3)
    c = noisy_curve(rng, "classic", "t3", 0.05)
    means = []
    for _ in range(5):
        guard = LossGuard()
        t0 = time.perf_counter()
        for t, v in enumerate(c):
            guard.check(t, v)
        means.append((time.perf_counter() - t0) / len(c))
    per: list[float] = []
    guard = LossGuard()
    for t, v in enumerate(c):
        t0 = time.perf_counter()
        guard.check(t, v)
        per.append(time.perf_counter() - t0)
    per.sort()
    resid = [log_noise(rng, "t3", 0.05) for _ in range(1000)]
    bars = []
    for _ in range(20):
        t0 = time.perf_counter()
        spike_bar(resid, 3.0, 6.0)
        bars.append(time.perf_counter() - t0)
    return {"mean_us": min(means) * 1e6, "median_us": per[len(per) // 2] * 1e6,
            "p99_us": per[int(0.99 * len(per))] * 1e6, "max_us": per[-1] * 1e6, "calls": len(per),
            "bar_us": min(bars) * 1e6}


def report_c(c: dict[str, Any]) -> None:
    h = c["healthy"]
    shapes = list(dict.fromkeys(r["curve"] for r in h))
    print(f"\n(c) loss guard, healthy curves of 2000 steps ({h[0]['curves']} per shape and noise): curves with "
          "a warning, default rule / old rule, per shape; then over all shapes: curves warned at a loss under "
          "2.5x its true curve, curves warned after step 300 at a loss under 10x its curve, and curves whose "
          "noise alone reaches 10x somewhere")
    print("| noise | " + " | ".join(shapes) + " | under 2.5x, new / old | after step 300 under 10x, new / old "
          "| 10x in the noise |")
    print("|---|" + "---|" * (len(shapes) + 3))
    for noise in dict.fromkeys((r["noise"], r["scale"]) for r in h):
        rows = [r for r in h if (r["noise"], r["scale"]) == noise]
        cells = [f"{r['new']} / {r['old']}" for r in rows]
        total = sum(r["curves"] for r in rows)

        def tot(key: str, rows: list[dict[str, Any]] = rows) -> int:
            return sum(r[key] for r in rows)

        print(f"| {noise[0]} {noise[1] * 100:g}% | " + " | ".join(cells)
              + f" | {tot('new_below')} / {tot('old_below')} | {tot('new_late')} / {tot('old_late')} "
              f"| {tot('natural10')} of {total} |")
    d = c["detect"]
    print(f"\n(c) spikes of 3x, 5x, 10x the true loss, detected at that step: default rule / with "
          f"spike_factor=2.5 / old rule ({d[0]['trials']} trials per cell; early: steps 20-120, late: 300-2000)")
    print("| noise | curve | where | " + " | ".join(f"{f:g}x" for f in SPIKES) + " |")
    print("|---|---|---|" + "---|" * len(SPIKES))
    for key in dict.fromkeys((r["noise"], r["scale"], r["curve"], r["where"]) for r in d):
        rows = [r for r in d if (r["noise"], r["scale"], r["curve"], r["where"]) == key]
        cells = [f"{r['new'] / r['trials']:.0%} / {r['new2.5'] / r['trials']:.0%} / {r['old'] / r['trials']:.0%}"
                 for r in rows]
        print(f"| {key[0]} {key[1] * 100:g}% | {key[2]} | {key[3]} | " + " | ".join(cells) + " |")
    k = c["cost"]
    print(f"\nLossGuard.check per call ({k['calls']} calls, floats): mean {k['mean_us']:.1f} us (best of 5), "
          f"median {k['median_us']:.1f} us, p99 {k['p99_us']:.1f} us, max {k['max_us']:.1f} us; the bar's "
          f"recomputation over 1000 residuals (every 50th call) {k['bar_us']:.0f} us")


# ---- report ----------------------------------------------------------------------------------


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer trials and shorter real runs")
    ap.add_argument("--skip-real", action="store_true", help="leave out the real gloo runs")
    ap.add_argument("--parts", default="abcd", help="which parts to run (a, b, c, d; default abcd)")
    ap.add_argument("--json", type=Path, help="also write every number as JSON here")
    a = ap.parse_args()
    print(f"# {platform.node()} {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    det = StragglerDetector()
    print(f"defaults: StragglerDetector(interval_steps={det.interval_steps}, threshold={det.threshold}), "
          f"LossGuard(spike_factor={LossGuard().spike_factor}, spike_sigmas={LossGuard().spike_sigmas}, "
          f"window={LossGuard().window.maxlen})")
    result: dict[str, Any] = {}
    t0 = time.monotonic()
    a_rows = part_a(a.quick) if "a" in a.parts else []
    result["synthetic"] = a_rows
    print("\n(a) synthetic: 20% jitter, 5% of steps delayed (mean half a step), 20% of intervals a rank "
          "has up to 40% of its steps 2x slower; per interval")
    print("| ranks | window | threshold | in a row | healthy: false positives | "
          + " | ".join(f"{f}x detected" for f in FACTORS) + " | 1.4x: other rank reported |")
    print("|---|---|---|---|---|" + "---|" * len(FACTORS) + "---|")
    for r in a_rows:
        print(f"| {r['world']} | {r['window']} | {r['threshold']} | {r['confirm']} | {r['fp']:.1%} | "
              + " | ".join(f"{r[f'det{f}']:.1%}" for f in FACTORS) + f" | {r['fp1.4']:.1%} |")
    if not a.skip_real and "b" in a.parts:
        b = part_b(a.quick)
        result["real"] = b
        print(f"\n(b) real: 4 gloo ranks, {b['steps']} steps of ~4 ms CPU + 16 ms sleep + all_reduce; "
              "intervals cut from recorded step times")
        print("| run | busy median | busy p99 | busy MAD | load |")
        print("|---|---|---|---|---|")
        for name, j in b["jitter"].items():
            print(f"| {name} | {j['busy_median_ms']:.1f} ms | {j['p99_ms']:.1f} ms | {j['mad_pct']:.1f}% | "
                  f"{b['loads'][name]:.1f} |")
        names = list(b["jitter"])
        print("healthy rank reported (false positives) / slow rank detected, per interval:")
        print("| window | threshold | in a row | " + " | ".join(names) + " |")
        print("|---|---|---|" + "---|" * len(names))
        cell = {(g["run"], g["window"], g["threshold"], g["confirm"]): g for g in b["grid"]}
        for window in WINDOWS:
            for th in THRESHOLDS:
                for confirm in (1, 2):
                    cols = []
                    for name in names:
                        g = cell[(name, window, th, confirm)]
                        cols.append(f"FP {g['fp']:.0%}" + (f", det {g['det']:.0%}" if "slower" in name else "")
                                    + f" (n={g['intervals']})")
                    print(f"| {window} | {th} | {confirm} | " + " | ".join(cols) + " |")
        print("live detector (defaults) inside the ranks:")
        print("| run | runs | intervals | slow rank reported | healthy rank reported |")
        print("|---|---|---|---|---|")
        for name, lv in b["live"].items():
            print(f"| {name} | {lv['runs']} | {lv['intervals']} | "
                  f"{'-' if lv['slow_reported'] is None else lv['slow_reported']} | {lv['healthy_reported']} |")
    if "d" in a.parts:
        d = part_d(6 if a.quick else 30, 2 if a.quick else 10)
        result["fixed"] = d
        report_d(d)
    if "c" not in a.parts:
        print(f"\n{time.monotonic() - t0:.0f} s")
        if a.json:
            a.json.write_text(json.dumps(result, indent=1, default=str))
        return
    c = part_c(a.quick)
    result["loss"] = c
    report_c(c)
    print(f"\n{time.monotonic() - t0:.0f} s")
    if a.json:
        a.json.write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
