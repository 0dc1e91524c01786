"""Benchmark: the whole runtime layer (`Resilience`) against a bare loop, 50 ms steps, torchrun.

Each run is a real torchrun job (gloo, CPU) of N ranks running the README block's step: the
block's model and batch, forward and backward with a sleep standing for the device's share of
the step (on a GPU the host waits for the device), the gradient all-reduce (one flat buffer),
SGD: about 50 ms. "bare" runs it with torch.distributed only; "layer" inside `Resilience`
as the README does (process group, events, watchdog, crash recorder, preemption agreed every
`stop_check_every` steps, `res.step()`, `res.forward_backward(compute, model, average=True)`:
forward, backward and the gradient all-reduce timed for the straggler detector,
`res.check_loss`; checkpoints only at the end, outside the timed
steps); "replay" the same with `replay="skip"` (nothing triggers: the cost of watching);
"layer-every-step" agrees on preemption every step (the old default). Each pair runs the modes
in order and the next pair in reverse (ABBA), so that load drifts hit every mode alike; the
timed span is from the start of the first step after warm-up to the end of the last step on
rank 0 (the ranks are in lock-step through the all-reduce); the overhead is the median of the
paired ratios against the first mode.

    .venv/bin/python benchmarks/bench_resilience.py [--ranks 2 4] [--pairs 8] [--steps 300] \
        [--modes bare layer replay]
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
WARMUP = 20
BLOCK = 30  # steps per block of the in-job replay comparison


def worker(mode: str, steps: int, step_ms: float, out: Path, run_dir: Path) -> None:
    """One rank. Every mode runs the README block's step: this rank's batch, forward and
    backward with a sleep standing for the device's share of the step, the gradient all-reduce
    (one flat buffer), the optimizer step. "bare": torch.distributed only; "layer": inside
    `Resilience` (`res.step()`, `res.forward_backward(..., average=True)`, `res.check_loss`); "replay": the same with `replay="skip"`; "layer-every-step": "layer"
    with the preemption agreement every step. Rank 0 writes the timed span's per-step time and
    what `forward_backward` cost besides `compute()` (median per step: the all-reduce's wait
    for the slower rank included)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    marks: list[float] = []
    inside: list[float] = []  # seconds in compute(), this step

    def batch(step: int, rank: int, world: int) -> torch.Tensor:
        return torch.randn(256, 64, generator=torch.Generator().manual_seed(step * world + rank))

    def compute_of(x: torch.Tensor) -> Any:
        def compute() -> torch.Tensor:
            t0 = time.perf_counter()
            loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
            loss.backward()
            time.sleep(step_ms / 1000.0)  # the device's share of the step
            inside.append(time.perf_counter() - t0)
            return loss
        return compute

    if mode == "bare":
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        for step in range(steps):
            if step == WARMUP:
                marks.append(time.perf_counter())
            opt.zero_grad(set_to_none=True)
            compute_of(batch(step, rank, world))()
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat)
            flat.div_(world)
            offset = 0
            for g in grads:
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()
            opt.step()
        marks.append(time.perf_counter())
        dist.destroy_process_group()
        extra: dict[str, float] = {}
    elif mode == "replay-blocks":
        replay_blocks(model, opt, compute_of, batch, steps, run_dir, out)
        return
    else:
        from preflight.runtime import Resilience

        every = 1 if mode == "layer-every-step" else 10
        fb: list[float] = []  # forward_backward's own cost: its wall time less compute()'s
        with Resilience(run_dir, state={"model": model, "optimizer": opt}, save_every=10**9,
                        stop_check_every=every, replay="skip" if mode == "replay" else None) as res:
            rank, world = res.rank, res.world_size
            for step in res.steps(steps):
                if step == WARMUP:
                    marks.append(time.perf_counter())
                with res.step():
                    inside.clear()
                    t0 = time.perf_counter()
                    outcome = res.forward_backward(compute_of(batch(step, rank, world)), model, average=True)
                    fb.append(time.perf_counter() - t0 - sum(inside))
                    if outcome.apply:
                        res.check_loss(outcome.loss)
                        opt.step()
                if step == steps - 1:
                    marks.append(time.perf_counter())
        extra = {"fb_us": statistics.median(fb[WARMUP:]) * 1e6}
    if rank == 0:
        out.write_text(json.dumps({"per_step_ms": (marks[1] - marks[0]) / (steps - WARMUP) * 1000.0, **extra}))


def replay_blocks(model: Any, opt: Any, compute_of: Any, batch: Any, pairs: int, run_dir: Path, out: Path) -> None:
    """Replay's cost inside one job: `Resilience(replay="skip")` running the README block's step
    with `res.forward_backward(compute, model, average=True)`, in blocks of BLOCK steps with
    replay watching (`res.replay` set) or not (None: the same call without it), ABBA: pair i runs
    on/off when i is even, off/on when odd (the same schedule on every rank). Rank 0 writes the
    per-step time of each block. With $BENCH_REPLAY_SEPARATE=1 the job averages after
    `forward_backward` (`res.average_gradients`): replay then agrees in an all-reduce of its own."""
    from preflight.runtime import Resilience

    total = WARMUP + pairs * 2 * BLOCK
    separate = os.environ.get("BENCH_REPLAY_SEPARATE") == "1"  # the call before: average after forward_backward
    marks: dict[int, float] = {}
    with Resilience(run_dir, state={"model": model, "optimizer": opt}, save_every=10**9, replay="skip") as res:
        watching, rank, world = res.replay, res.rank, res.world_size
        for step in res.steps(total):
            if step >= WARMUP and (step - WARMUP) % BLOCK == 0:
                marks[step] = time.perf_counter()
                b = (step - WARMUP) // BLOCK
                on = (b % 2 == 0) == ((b // 2) % 2 == 0)  # on, off | off, on | on, off ...
                res.replay = watching if on else None
            with res.step():
                outcome = res.forward_backward(compute_of(batch(step, rank, world)), model, average=not separate)
                if outcome.apply:
                    if separate:
                        res.average_gradients(model)
                    res.check_loss(outcome.loss)
                    opt.step()
        marks[total] = time.perf_counter()
        res.replay = watching
    if rank == 0:
        starts = sorted(marks)
        per = [(marks[b] - marks[a]) / BLOCK * 1000.0 for a, b in zip(starts, starts[1:], strict=False)]
        on_ms = [per[2 * i] if i % 2 == 0 else per[2 * i + 1] for i in range(pairs)]
        off_ms = [per[2 * i + 1] if i % 2 == 0 else per[2 * i] for i in range(pairs)]
        out.write_text(json.dumps({"on": on_ms, "off": off_ms, "replays": len(watching.replays)}))


def one_run(mode: str, nproc: int, steps: int, step_ms: float, tmp: Path, tag: str) -> dict[str, Any]:
    out = tmp / f"{tag}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "SLURM_", "NCCL_"))}
    env.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
                "CUDA_VISIBLE_DEVICES": "", "PREFLIGHT_HISTORY": "off"})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           __file__, "--worker", mode, "--steps", str(steps), "--step-ms", str(step_ms), "--out", str(out),
           "--run-dir", str(tmp / f"run-{tag}")]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"{mode} run failed ({p.returncode}):\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    res = json.loads(out.read_text())
    res["load"] = os.getloadavg()[0]
    return {k: v if isinstance(v, list) else float(v) for k, v in res.items()}


MODES = ("bare", "layer", "replay", "layer-every-step", "replay-blocks")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", choices=MODES)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--step-ms", type=float, default=45.0)
    ap.add_argument("--modes", nargs="+", choices=MODES, default=["bare", "layer", "replay"],
                    help="the first is the baseline; each pair runs them in order, then reversed (ABBA)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--run-dir", type=Path)
    ap.add_argument("--separate", action="store_true", help="with --replay-in-job: average after forward_backward")
    ap.add_argument("--replay-in-job", type=int, default=0, metavar="PAIRS",
                    help=f"instead: replay's cost inside one job, PAIRS ABBA pairs of blocks of {BLOCK} steps")
    a = ap.parse_args()
    if a.worker:
        worker(a.worker, a.steps, a.step_ms, a.out, a.run_dir)
        return
    if a.replay_in_job:
        if a.separate:
            os.environ["BENCH_REPLAY_SEPARATE"] = "1"
        in_job(a)
        return
    modes = list(dict.fromkeys(a.modes))
    base = modes[0]
    print(f"# {time.strftime('%Y-%m-%d %H:%M %Z')} {platform.node()} {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}; {a.steps} steps ({WARMUP} warm-up untimed), the README block's model and "
          f"batch, sleep {a.step_ms} ms + forward/backward + all_reduce + SGD per step; {a.pairs} pairs, ABBA")
    print(f"| ranks | mode | ms per step (each pair) | median | vs {base}: each pair | median of paired ratios "
          "| forward_backward besides compute(), median us | load during its runs |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        for nproc in a.ranks:
            runs: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
            for i in range(a.pairs):
                order = modes if i % 2 == 0 else modes[::-1]
                for m in order:
                    runs[m].append(one_run(m, nproc, a.steps, a.step_ms, tmp, f"{m}-{nproc}-{i}"))
            times = {m: [r["per_step_ms"] for r in runs[m]] for m in modes}
            for m in modes:
                ratios = [t / b - 1 for t, b in zip(times[m], times[base], strict=True)]
                each = "" if m == base else ", ".join(f"{r * 100:+.1f}" for r in ratios)
                over = "" if m == base else f"{statistics.median(ratios) * 100:+.2f}%"
                fb = [r["fb_us"] for r in runs[m] if "fb_us" in r]
                loads = [r["load"] for r in runs[m]]
                print(f"| {nproc} | {m} | {', '.join(f'{t:.2f}' for t in times[m])} | "
                      f"{statistics.median(times[m]):.2f} | {each} | {over} | "
                      f"{f'{statistics.median(fb):.0f}' if fb else '-'} | {min(loads):.1f}-{max(loads):.1f} |",
                      flush=True)


def in_job(a: argparse.Namespace) -> None:
    print(f"# {time.strftime('%Y-%m-%d %H:%M %Z')} {platform.node()} {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}; replay watching or not inside one torchrun job, blocks of {BLOCK} steps, "
          f"{a.replay_in_job} ABBA pairs, sleep {a.step_ms} ms + forward/backward + all_reduce + SGD per step; "
          + ("res.average_gradients after forward_backward (replay agrees on its own)" if a.separate else
             "forward_backward(..., average=True) (the agreement rides on the gradient all-reduce)"))
    print("| ranks | without replay, ms per step (each pair) | with replay | each pair | median of paired ratios "
          "| replays | load |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        for nproc in a.ranks:
            r = one_run("replay-blocks", nproc, a.replay_in_job, a.step_ms, tmp, f"blocks-{nproc}")
            on, off = r["on"], r["off"]
            ratios = [x / y - 1 for x, y in zip(on, off, strict=True)]  # type: ignore[arg-type]
            print(f"| {nproc} | {', '.join(f'{t:.2f}' for t in off)} | {', '.join(f'{t:.2f}' for t in on)} | "  # type: ignore[attr-defined]
                  f"{', '.join(f'{x * 100:+.1f}' for x in ratios)} | {statistics.median(ratios) * 100:+.2f}% | "
                  f"{r['replays']:.0f} | {r['load']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
