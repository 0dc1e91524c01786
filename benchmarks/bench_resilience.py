"""Benchmark: the whole runtime layer (`Resilience`) against a bare loop, 50 ms steps, torchrun.

Each run is a real torchrun job (gloo, CPU) of N ranks. A step is a little CPU work, a sleep
standing for device time (on a GPU the host waits for the device), the gradient all_reduce and
the optimizer step: about 50 ms. "bare" runs the loop with torch.distributed only; "layer" runs
the same loop inside `Resilience` (process group, events, watchdog, crash recorder, preemption
checked collectively every `stop_check_every` steps, straggler timing of the all_reduce, loss
guard; checkpoints only at the end, outside the timed steps); "layer-every-step" checks the
preemption agreement every step (the old default). Runs alternate bare/layer/... in pairs so
that load drifts hit both; the timed span is from the start of the first step after warm-up to
the end of the last step on rank 0 (the ranks are in lock-step through the all_reduce).

    .venv/bin/python benchmarks/bench_resilience.py [--ranks 2 4] [--pairs 3] [--steps 300]
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
WARMUP = 20


def worker(mode: str, steps: int, step_ms: float, out: Path, run_dir: Path) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    marks: list[float] = []

    def body(step: int, waiting: object, rank: int, world: int) -> torch.Tensor:
        x = torch.randn(64, 64, generator=torch.Generator().manual_seed(step * world + rank))
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        time.sleep(step_ms / 1000.0)  # the device's share of the step
        flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        with waiting:  # type: ignore[attr-defined]
            dist.all_reduce(flat)
        opt.step()
        return loss

    if mode == "bare":
        from contextlib import nullcontext

        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        for step in range(steps):
            if step == WARMUP:
                marks.append(time.perf_counter())
            body(step, nullcontext(), rank, world)
        marks.append(time.perf_counter())
        dist.destroy_process_group()
    else:
        from preflight.runtime import Resilience

        every = 1 if mode == "layer-every-step" else 10
        with Resilience(run_dir, state={"model": model, "optimizer": opt}, save_every=10**9,
                        stop_check_every=every) as res:
            rank, world = res.rank, res.world_size
            for step in res.steps(steps):
                if step == WARMUP:
                    marks.append(time.perf_counter())
                with res.step():
                    loss = body(step, res.waiting(), rank, world)
                    res.check_loss(loss)
                if step == steps - 1:
                    marks.append(time.perf_counter())
    if rank == 0:
        out.write_text(json.dumps({"per_step_ms": (marks[1] - marks[0]) / (steps - WARMUP) * 1000.0}))


def one_run(mode: str, nproc: int, steps: int, step_ms: float, tmp: Path, tag: str) -> float:
    out = tmp / f"{tag}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "SLURM_", "NCCL_"))}
    env.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
                "CUDA_VISIBLE_DEVICES": ""})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           __file__, "--worker", mode, "--steps", str(steps), "--step-ms", str(step_ms), "--out", str(out),
           "--run-dir", str(tmp / f"run-{tag}")]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"{mode} run failed ({p.returncode}):\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return float(json.loads(out.read_text())["per_step_ms"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", choices=("bare", "layer", "layer-every-step"))
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--step-ms", type=float, default=45.0)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--run-dir", type=Path)
    ap.add_argument("--every-step", action="store_true", help="also measure the every-step preemption check")
    a = ap.parse_args()
    if a.worker:
        worker(a.worker, a.steps, a.step_ms, a.out, a.run_dir)
        return
    modes = ["bare", "layer"] + (["layer-every-step"] if a.every_step else [])
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} {platform.node()} {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; "
          f"{a.steps} steps ({WARMUP} warm-up untimed), sleep {a.step_ms} ms + compute + all_reduce per step")
    print("| ranks | mode | ms per step (each pair) | median | overhead vs bare (median of paired ratios) |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        for nproc in a.ranks:
            times: dict[str, list[float]] = {m: [] for m in modes}
            for i in range(a.pairs):
                order = modes if i % 2 == 0 else modes[::-1]
                for m in order:
                    times[m].append(one_run(m, nproc, a.steps, a.step_ms, tmp, f"{m}-{nproc}-{i}"))
            for m in modes:
                ratios = [t / b for t, b in zip(times[m], times["bare"], strict=True)]
                over = "" if m == "bare" else f"{(statistics.median(ratios) - 1) * 100:+.2f}%"
                print(f"| {nproc} | {m} | {', '.join(f'{t:.2f}' for t in times[m])} | "
                      f"{statistics.median(times[m]):.2f} | {over} |")


if __name__ == "__main__":
    main()
