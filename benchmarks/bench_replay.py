"""Benchmark: replay tells a one-time gradient corruption from a deterministic fault, and its cost.

1. Classification, one process and 2 gloo ranks: `--trials` seeded one-time corruptions of one
   element of one rank's local gradient (NaN, Inf, or bit 30 flipped: the exponent jumps by
   128; a seeded step, rank, parameter and element) against `--trials` batches with a NaN and
   `--trials` batches with a x20 target (a loss spike), each at a seeded step from 25 (the
   loss guard judges no spike before it has its warm-up and noise residuals): right verdicts
   (hardware for the corruption, at its step and rank; data for the others).
2. Cost when nothing triggers: `Replay.step` around a `compute()` that only sets the same
   gradients a real step would (the bookkeeping alone: RNG state, one fused norm, the loss
   guard; training-thread CPU time), in 2 ranks the agreement (one one-element all-reduce,
   wall time), and end to end: an MLP step of about `--step-ms` (forward, backward, gradient
   all-reduce, SGD) without and with `Replay.step`, in alternating blocks, paired (median of
   the per-pair ratios of training-thread CPU time: other processes' load does not count, but
   its noise is larger than the effect on a shared machine).
3. Cost of one replay: a triggered step against a plain one.

    .venv/bin/python benchmarks/bench_replay.py [--trials 10] [--step-ms 50] [--pairs 10] [--block 6]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STEPS = 60  # per classification trial
FIRST_JUDGED = 25  # the loss guard judges spikes once it has its warm-up and enough noise residuals
WIDTH = 512


# ----- classification ----------------------------------------------------------------------------


def classify(trials: int, rank: int, world: int) -> dict[str, list[bool]]:
    """Right verdicts per class over seeded trials (every rank runs the same trials)."""
    from preflight.runtime.replay import Replay, ReproducibleFault, SuspectHardware
    from tests.runtime._replay_job import Corruption, Job

    out: dict[str, list[bool]] = {"one-time gradient corruption": [], "NaN in the batch": [],
                                  "loss spike (x20 targets)": []}
    for t in range(trials):
        c = Corruption.seeded(1000 + t, STEPS, world, kind=("nan", "inf", "bitflip")[t % 3])
        try:
            Job(seed=t, rank=rank, corruption=c).train(STEPS, Replay(history="off"), _reducer(world))
            out["one-time gradient corruption"].append(False)
        except SuspectHardware as exc:
            out["one-time gradient corruption"].append(exc.step == c.step and exc.ranks == [c.rank])
        except ReproducibleFault:
            out["one-time gradient corruption"].append(False)
        at, bad = FIRST_JUDGED + (t * 7) % (STEPS - FIRST_JUDGED - 2), t % world
        for name, kw in (("NaN in the batch", {"nan_at": at}), ("loss spike (x20 targets)", {"spike_at": at})):
            job = Job(seed=t, rank=rank, **(kw if rank == bad else {}))  # type: ignore[arg-type]
            try:
                job.train(STEPS, Replay(history="off", on_spike="stop"), _reducer(world))
                out[name].append(False)
            except ReproducibleFault as exc:
                out[name].append(exc.step == at and exc.ranks == [bad])
            except SuspectHardware:
                out[name].append(False)
    return out


def _reducer(world: int) -> Any:
    if world < 2:
        return None
    import torch.distributed as dist

    def reduce(model: Any) -> None:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        for g in grads:
            dist.all_reduce(g)
            g /= world
    return reduce


# ----- cost ------------------------------------------------------------------------------------------


class Bench:
    """An MLP of `layers` x WIDTH, a batch sized so that a step takes about `step_ms`."""

    def __init__(self, step_ms: float, world: int) -> None:
        import torch
        from torch import nn

        torch.manual_seed(0)
        self.torch, self.world = torch, world
        self.model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(WIDTH, WIDTH), nn.Tanh())],
                                   nn.Linear(WIDTH, 1))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-4)
        self.reduce = _reducer(world)
        self.batch = 64
        self.x = self.y = torch.zeros(0)
        for _ in range(8):  # calibrate the batch to the step time
            self._data()
            ms = statistics.median(self.plain(s) for s in range(3)) * 1e3
            self.batch = max(16, int(self.batch * step_ms / ms))
        self._data()
        self.params = sum(p.numel() for p in self.model.parameters())

    def _data(self) -> None:
        g = self.torch.Generator().manual_seed(1)
        self.x = self.torch.randn(self.batch, WIDTH, generator=g)
        self.y = self.torch.randn(self.batch, 1, generator=g)

    def compute(self) -> Any:
        loss = self.torch.nn.functional.mse_loss(self.model(self.x), self.y)
        loss.backward()
        return loss

    def _finish(self) -> None:
        if self.reduce is not None:
            self.reduce(self.model)
        self.opt.step()

    def plain(self, step: int) -> float:
        t0 = time.thread_time()
        self.opt.zero_grad(set_to_none=True)
        self.compute()
        self._finish()
        return time.thread_time() - t0

    def replayed(self, replay: Any, step: int) -> float:
        t0 = time.thread_time()
        out = replay.step(step, self.compute, self.model)
        if out.apply:
            self._finish()
        return time.thread_time() - t0


def bookkeeping_us(bench: Bench, replay: Any, n: int) -> tuple[float, float]:
    """Per-step microseconds of Replay.step around a compute that only sets real-sized
    gradients (no forward or backward), and of that compute alone (the difference is the
    bookkeeping)."""
    torch = bench.torch
    params = [p for p in bench.model.parameters()]
    grads = [torch.randn_like(p) for p in params]
    loss = torch.tensor(0.5)

    def set_grads() -> Any:
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        return loss

    with_replay, alone = [], []
    for rep in range(5):
        t0 = time.thread_time()
        for i in range(n):
            replay.step(rep * n + i, set_grads, bench.model)
        with_replay.append((time.thread_time() - t0) / n * 1e6)
        t0 = time.thread_time()
        for _ in range(n):
            set_grads()
        alone.append((time.thread_time() - t0) / n * 1e6)
    return statistics.median(with_replay), statistics.median(alone)


def fused_bookkeeping_us(model: Any, n: int) -> tuple[float, float]:
    """Training-thread CPU microseconds per step of what `Resilience.forward_backward(...,
    average=True)` does around `compute()` and the all-reduce, without replay and with it
    (nothing triggering), in one process: a compute that only sets real-sized gradients;
    without: zero the gradients, the flat copy, the loss read and the loss guard (check_loss);
    with: `Replay.begin(flat_extra=5)` (RNG state, flat copy, one norm, one host copy, the
    loss guard, the trigger), reading the trigger counts, `settle`. Medians of 5 passes."""
    import torch

    from preflight.runtime.lossguard import LossGuard
    from preflight.runtime.replay import TRIGGERS, Replay

    params = list(model.parameters())
    grads = [torch.randn_like(p) for p in params]
    loss = torch.tensor(0.5)

    def set_grads() -> Any:
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        return loss

    replay, guard = Replay(history="off", grad_spike_factor=100.0), LossGuard()
    off, on = [], []
    for rep in range(5):
        t0 = time.thread_time()
        for i in range(n):
            for p in params:
                p.grad = None
            set_grads()
            torch.cat([p.grad.reshape(-1) for p in params])
            guard.check(rep * n + i, loss)
        off.append((time.thread_time() - t0) / n * 1e6)
        t0 = time.thread_time()
        for i in range(n):
            pending = replay.begin(rep * n + i, set_grads, model, flat_extra=len(TRIGGERS) - 1)
            assert pending.flat is not None
            pending.flat.flat[pending.flat.size:].tolist()
            replay.settle(pending, "")
            del pending  # as at the end of forward_backward: the flat copy is freed before the next one
        on.append((time.thread_time() - t0) / n * 1e6)
    return statistics.median(off), statistics.median(on)


def agreement_us(replay: Any, n: int) -> float:
    """Wall microseconds of the ranks' agreement (one one-element all-reduce); 0 alone."""
    if bench_world() < 2:
        return 0.0
    per = []
    for _ in range(n):
        t0 = time.perf_counter()
        replay._agree("")
        per.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(per)


def bench_world() -> int:
    dist = sys.modules.get("torch.distributed")
    return int(dist.get_world_size()) if dist is not None and dist.is_initialized() else 1


def cost(step_ms: float, pairs: int, block: int, world: int) -> dict[str, Any]:
    from preflight.runtime.replay import Replay

    bench = Bench(step_ms, world)
    replay = Replay(history="off", grad_spike_factor=None)  # a constant batch: no spike rule wanted here
    book, grads_only = bookkeeping_us(bench, Replay(history="off", grad_spike_factor=None), 200)
    agree = agreement_us(replay, 300)
    for s in range(5):  # warm both paths
        bench.plain(s)
        bench.replayed(replay, s)
    ratios, plain_ms, rep_ms = [], [], []
    step = 10
    for i in range(pairs):  # alternating blocks, the order flipped every pair
        order = ("plain", "replay") if i % 2 == 0 else ("replay", "plain")
        times: dict[str, float] = {}
        for kind in order:
            ts = [bench.plain(step + k) if kind == "plain" else bench.replayed(replay, step + k) for k in range(block)]
            step += block
            times[kind] = statistics.median(ts)
        ratios.append(times["replay"] / times["plain"])
        plain_ms.append(times["plain"] * 1e3)
        rep_ms.append(times["replay"] * 1e3)
    audit = Replay(history="off", audit_every=1, grad_spike_factor=None)
    trig = statistics.median(bench.replayed(audit, 10_000 + k) for k in range(max(3, block)))
    return {"params": bench.params, "batch": bench.batch, "book_us": book - grads_only, "agree_us": agree,
            "plain_ms": statistics.median(plain_ms),
            "replay_ms": statistics.median(rep_ms), "overhead": statistics.median(ratios) - 1,
            "overhead_q": _quartiles(ratios), "triggered_ms": trig * 1e3}


def _quartiles(ratios: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
    return q[0] - 1, q[2] - 1


# ----- the runs --------------------------------------------------------------------------------------


def work(trials: int, step_ms: float, pairs: int, block: int, rank: int, world: int) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    return {"classes": classify(trials, rank, world), "cost": cost(step_ms, pairs, block, world)}


def rank_main(argv: list[str]) -> None:
    """One of 2 gloo ranks (started by tests.runtime._wd_ranks.launch)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--trials", type=int)
    ap.add_argument("--step-ms", type=float)
    ap.add_argument("--pairs", type=int)
    ap.add_argument("--block", type=int)
    a = ap.parse_args(argv)
    import torch.distributed as dist

    from tests.runtime._wd_ranks import init_gloo

    init_gloo(120)
    rank, world = dist.get_rank(), dist.get_world_size()
    res = work(a.trials, a.step_ms, a.pairs, a.block, rank, world)
    (a.out / f"bench-rank{rank}.json").write_text(json.dumps(res))
    dist.destroy_process_group()


def gloo(args: argparse.Namespace) -> dict[str, Any] | str:
    from tests.runtime._wd_ranks import launch, logs, wait_all

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        procs = launch("benchmarks.bench_replay:rank_main", 2,
                       ["--out", str(out), "--trials", str(args.trials), "--step-ms", str(args.step_ms),
                        "--pairs", str(args.pairs), "--block", str(args.block)], out)
        rcs = wait_all(procs, timeout=240)
        if rcs != [0, 0]:
            return f"2 gloo ranks ended {rcs}:\n{logs(out)}"
        res = [json.loads((out / f"bench-rank{r}.json").read_text()) for r in (0, 1)]
        res[0]["agree"] = res[0]["classes"] == res[1]["classes"]
        return res[0]


def _print(label: str, res: dict[str, Any], step_ms: float) -> None:
    print(f"\n{label}")
    for name, ok in res["classes"].items():
        print(f"  {name:<32} {sum(ok)}/{len(ok)} told right")
    c = res["cost"]
    lo, hi = c["overhead_q"]
    print(f"  model {c['params'] / 1e6:.2f} M parameters, batch {c['batch']}")
    print(f"  {'bookkeeping per step (no trigger)':<44} {c['book_us']:8.1f} us  {c['book_us'] / 10 / step_ms:.3f} % "
          f"of {step_ms:g} ms")
    if c["agree_us"]:
        total = c["book_us"] + c["agree_us"]
        print(f"  {'agreement per step (1-element all-reduce)':<44} {c['agree_us']:8.1f} us  "
              f"{c['agree_us'] / 10 / step_ms:.3f} %")
        print(f"  {'total per step':<44} {total:8.1f} us  {total / 10 / step_ms:.3f} %")
    print(f"  {'step CPU without / with Replay.step':<44} {c['plain_ms']:.2f} / {c['replay_ms']:.2f} ms")
    print(f"  {'overhead, paired median (quartiles)':<44} {c['overhead'] * 100:+.2f} % ({lo * 100:+.2f} .. "
          f"{hi * 100:+.2f})")
    print(f"  {'a replayed step (audit of every step)':<44} {c['triggered_ms']:.2f} ms = "
          f"{c['triggered_ms'] / c['plain_ms']:.2f} x a plain step")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--step-ms", type=float, default=50.0)
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--block", type=int, default=6)
    ap.add_argument("--bookkeeping", action="store_true",
                    help="only the per-step CPU of replay through Resilience(average=True), one process")
    args = ap.parse_args()
    import torch

    if args.bookkeeping:
        torch.set_num_threads(1)
        torch.manual_seed(0)
        readme = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
        big = Bench(args.step_ms, 1).model
        print(f"load average {os.getloadavg()[0]:.1f}; training-thread CPU per step, without replay / with replay "
              f"(nothing triggers) / the difference, against a {args.step_ms:g} ms step")
        for name, model in (("the README block's model", readme), ("MLP 4 x 512", big)):
            n_params = sum(p.numel() for p in model.parameters())
            off, on = fused_bookkeeping_us(model, 400)
            print(f"  {name} ({n_params / 1e6:.3f} M parameters): {off:.1f} / {on:.1f} / {on - off:+.1f} us "
                  f"({(on - off) / 10 / args.step_ms:+.3f} %)")
        return

    t0 = time.monotonic()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; Python {platform.python_version()}, torch "
          f"{torch.__version__}; load average {os.getloadavg()[0]:.1f}")
    _print("one process", work(args.trials, args.step_ms, args.pairs, args.block, 0, 1), args.step_ms)
    res = gloo(args)
    if isinstance(res, str):
        print(res)
        sys.exit(1)
    same = "the same on rank 1" if res["agree"] else "rank 1 DIFFERS"
    _print(f"2 gloo ranks (rank 0's verdicts; {same})", res, args.step_ms)
    print(f"\nload average after {os.getloadavg()[0]:.1f}; {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
