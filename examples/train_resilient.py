"""A small training job that survives preemption and restarts, with preflight's runtime layer.

    torchrun --standalone --nproc-per-node 4 --max-restarts 2 \\
        examples/train_resilient.py --run-dir /tmp/run1 --steps 300 --step-timeout 60

A tiny MLP on synthetic data; gloo on CPU, or NCCL with one GPU per rank when CUDA is there.

- On start every rank calls `CheckpointManager.load_latest()`: when a checkpoint exists it
  restores the model, optimizer, LR scheduler, RNG states and the data position, and goes on
  from that step.
- `Preemption` catches SIGUSR1/SIGTERM on any rank; `should_stop()` makes every rank agree on
  the same step, all save that step once, and rank 0 writes `<run-dir>/preempted` (step,
  time, world size, signal): "checkpoint complete, run again to resume". Under torchrun the
  ranks then exit 0 (a non-zero exit would make torchrun SIGTERM the others and count toward
  --max-restarts), elsewhere 85; a torchrun restart that finds the marker does not train, so a
  preempted job is never restarted inside its dying allocation: the batch script requeues on
  the marker (examples/slurm/train.sbatch), and the requeued run resumes and clears it. A rank
  SIGTERMed by torchrun after another rank failed is a victim, not preempted: its end is
  recorded as "signal" and it ends by that signal.
- Every way a rank ends is recorded (`preflight.runtime.crash`): `crash-rank<R>.json` and a
  `runtime.crash` event for an uncaught exception, and one `runtime.exit` event per rank
  (clean, exception, hang, preempted, signal).
- The data order is derived from (seed, step, rank) and every RNG is checkpointed, so a run
  interrupted and resumed ends with the same parameters as one never interrupted (bitwise on
  CPU).
- Watchdog, StragglerDetector and LossGuard are used when preflight.runtime provides them
  (`--no-monitors` leaves them out); a failure to set one up is logged and training goes on.
  `--step-timeout` is the watchdog's step floor: a step open that long while a peer went
  silent (stopped, dead) is a hang even during warm-up; the healthy ranks write hang records
  naming it, SIGKILL it when it runs on their node, and exit 75 for torchrun to restart.

Exit codes: 0 trained to --steps (or, under torchrun, stopped after saving: see the marker);
85 stopped on a signal after saving, not under torchrun (resume by running again);
75 a hang caught by the watchdog; 1 an error (a non-finite loss included).
Outputs in --run-dir: events-rank<R>.jsonl, checkpoints/ (unless --checkpoint-dir), and
--final (rank 0's parameters at the end, torch.save of the state_dict).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from preflight.runtime import crash
from preflight.runtime.checkpoint import CheckpointManager, capture_rng_state, restore_rng_state
from preflight.runtime.events import EventWriter
from preflight.runtime.preemption import EXIT_PREEMPTED, Preemption, clear_marker, read_marker, write_marker

log = logging.getLogger("train_resilient")
FEATURES = 16


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run-dir", required=True, type=Path)
    p.add_argument("--checkpoint-dir", type=Path, default=None, help="default: <run-dir>/checkpoints")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--save-every", type=int, default=50)
    p.add_argument("--keep-last", type=int, default=3)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--step-delay", type=float, default=0.0, help="sleep per step (seconds), to stand for compute")
    p.add_argument("--check-every", type=int, default=1, help="Preemption.should_stop collective every N steps")
    p.add_argument("--async-save", action="store_true")
    p.add_argument("--no-monitors", action="store_true", help="leave out Watchdog/StragglerDetector/LossGuard")
    p.add_argument("--final", type=Path, default=None, help="rank 0 writes the final parameters here")
    p.add_argument("--step-timeout", type=_seconds, default=60.0, metavar="SECONDS",
                   help="a step open this long while a peer went silent (stopped, dead) is a hang, warm-up "
                        "or not; with every rank alive, a step is a hang after max(SECONDS, 5x the longest "
                        "step) once warmed up (default 60)")
    p.add_argument("--warmup-timeout", type=_seconds, default=1800.0, metavar="SECONDS",
                   help="step timeout during the first 20 steps when every rank is alive (compilation, "
                        "first batches; default 1800)")
    p.add_argument("--no-kill-stuck-peers", action="store_true",
                   help="after a hang, leave a stopped rank on this node to the launcher instead of "
                        "SIGKILLing it (the watchdog checks its pid, start time and RANK first)")
    return p.parse_args(argv)


def _seconds(text: str) -> float:
    if text == "auto":  # the watchdog's own default floor
        return 60.0
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds: {text!r}")
    return value


def build_model(seed: int, hidden: int) -> nn.Module:
    torch.manual_seed(seed)  # the same initial weights on every rank
    return nn.Sequential(nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Dropout(0.1), nn.Linear(hidden, 1))


def batch_for(step: int, rank: int, seed: int, size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch of `step` on `rank`: a function of (seed, step, rank) only, so resuming at any
    step sees exactly the data an uninterrupted run sees."""
    truth = torch.Generator().manual_seed(seed)
    w = torch.randn(FEATURES, 1, generator=truth)
    g = torch.Generator().manual_seed((seed * 1_000_003 + step) * 1_009 + rank)
    x = torch.randn(size, FEATURES, generator=g)
    y = x @ w + 0.1 * torch.randn(size, 1, generator=g)
    return x.to(device), y.to(device)


def average_gradients(model: nn.Module, world: int) -> None:
    """One all_reduce of every gradient, flattened in parameter order, then divided by `world`.

    Not DistributedDataParallel: DDP regroups its gradient buckets after the first iteration
    of every process, so the first step after a resume reduces with another grouping than the
    uninterrupted run did at that step, and the sums differ in their last bits. A fixed layout
    keeps a resumed run bitwise equal to an uninterrupted one (the point of this example).
    """
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat.div_(world)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def _optional(name: str, factory: Callable[[Any], Any]) -> Any:
    """Build a runtime monitor when preflight.runtime has it; a failure only disables it."""
    try:
        import preflight.runtime as rt

        cls = getattr(rt, name)
    except (ImportError, AttributeError):
        return None
    try:
        return factory(cls)
    except Exception as exc:
        log.warning("%s disabled: %s", name, exc)
        return None


class Monitors:
    """Watchdog, StragglerDetector and LossGuard when present; every call guarded."""

    def __init__(self, enabled: bool, run_dir: Path, events: EventWriter, rank: int,
                 args: argparse.Namespace | None = None) -> None:
        self.wd = self.strag = self.guard = None
        if not enabled:
            return
        a = args or parse_args(["--run-dir", str(run_dir)])
        self.wd = _optional("Watchdog", lambda c: c(run_dir, timeouts={"step": "auto", "checkpoint": 600},
                                                     auto_floor_s=a.step_timeout, auto_initial_s=a.warmup_timeout,
                                                     kill_stuck_peers=not a.no_kill_stuck_peers,
                                                     events=events, rank=rank))
        self.strag = _optional("StragglerDetector", lambda c: c(interval_steps=50, events=events))
        self.guard = _optional("LossGuard", lambda c: c(events=events))

    def _call(self, obj: Any, method: str, *args: Any) -> Any:
        if obj is None:
            return None
        try:
            return getattr(obj, method)(*args)
        except FloatingPointError:  # the loss guard's verdict: let it end the step
            raise
        except Exception as exc:
            log.warning("monitor %s.%s failed: %s", type(obj).__name__, method, exc)
            return None

    def step_start(self, step: int) -> None:
        self._call(self.wd, "heartbeat", step)
        self._call(self.strag, "step_start")

    def loss(self, step: int, loss: torch.Tensor) -> None:
        self._call(self.guard, "check", step, loss)

    def step_end(self) -> None:
        self._call(self.strag, "step_end")

    def waiting(self) -> Any:
        return self._call(self.strag, "waiting") or nullcontext()

    @contextmanager
    def checkpoint(self) -> Iterator[None]:
        cm = self._call(self.wd, "section", "checkpoint") or nullcontext()
        with cm:
            yield

    def close(self) -> None:
        self._call(self.wd, "close")


def init_distributed(backend: str, rank: int, world: int) -> None:
    """init_process_group; under torchrun, in a store namespace of its own per restart.

    torchrun's workers share the agent's store across restarts, and the keys a process group
    publishes there (gloo's peer addresses, NCCL's unique id) carry no restart number: a
    restarted worker can read the previous attempt's stale entries and fail to connect or hang
    (seen with torch 2.13, gloo, `--standalone --max-restarts`). A prefix per restart avoids it.
    """
    timeout = timedelta(seconds=120)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if attempt is None or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        dist.init_process_group(backend, timeout=timeout)
        return
    agent = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                          is_master=False, timeout=timeout)
    store = dist.PrefixStore(f"/train_resilient/attempt_{attempt}", agent)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s rank" + os.environ.get("RANK", "0")
                        + " %(levelname)s %(message)s")
    torch.set_num_threads(1)  # small model; and the same reduction order in every run
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    use_cuda = torch.cuda.is_available()
    device = torch.device("cpu")
    if use_cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if world > 1:
        init_distributed("nccl" if use_cuda else "gloo", rank, world)

    events = EventWriter(args.run_dir, rank=rank)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    under_torchrun = "TORCHELASTIC_RUN_ID" in os.environ
    if restart > 0 and read_marker(args.run_dir) is not None:
        # torchrun restarting a preempted job inside its dying allocation: do not train here;
        # the batch script requeues the job on the marker
        events.emit("runtime.train", "warn", f"rank {rank}: preempted job not restarted in place "
                    f"(restart {restart}); waiting for the requeue", facts={"restart": restart})
        code = 0 if under_torchrun else EXIT_PREEMPTED
        crash.install(args.run_dir, rank=rank, events=events).exit(
            "preempted", exit_code=code, summary=f"torchrun restart {restart} after a preemption: not trained")
        return code
    ckpt_dir = args.checkpoint_dir or args.run_dir / "checkpoints"
    pre = Preemption(events=events, every=args.check_every)
    ckpt = CheckpointManager(ckpt_dir, keep_last=args.keep_last, events=events, async_save=args.async_save)
    mon = Monitors(not args.no_monitors, args.run_dir, events, rank, args)
    ends = crash.install(args.run_dir, rank=rank, watchdog=mon.wd, events=events)

    model = build_model(args.seed, args.hidden).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=100, gamma=0.5)
    torch.manual_seed(args.seed + 7919 * (rank + 1))  # dropout masks differ per rank, reproducibly
    start = 0
    loaded = ckpt.load_latest(map_location=device)
    if loaded is not None:
        start, saved = loaded
        if saved["data"]["seed"] != args.seed:
            raise SystemExit(f"checkpoint was written with seed {saved['data']['seed']}, not {args.seed}")
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        sched.load_state_dict(saved["scheduler"])
        restore_rng_state(saved["rng"])
    if rank == 0:
        clear_marker(args.run_dir)  # resumed: a later end is judged afresh
    events.emit("runtime.train", "pass", f"rank {rank} {'resumed at' if start else 'started from'} step {start}",
                step=start, facts={"pid": os.getpid(), "start_step": start, "world_size": world,
                                   "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))})

    def state() -> dict[str, Any]:
        return {"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                "rng": capture_rng_state(), "data": {"step": done, "seed": args.seed}}

    code = 0
    done = start
    loss_fn = nn.MSELoss()
    t_start = time.perf_counter()
    for step in range(start, args.steps):
        mon.step_start(step)
        x, y = batch_for(step, rank, args.seed, args.batch, device)
        model.train()
        loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if world > 1:
            with mon.waiting():  # time at the collective: what tells a straggler apart
                average_gradients(model, world)
        mon.loss(step, loss)
        opt.step()
        sched.step()
        if args.step_delay:
            time.sleep(args.step_delay)
        mon.step_end()
        done = step + 1
        stop = pre.should_stop(done)  # collective: every rank, every step
        if stop or done % args.save_every == 0 or done == args.steps:
            with mon.checkpoint():
                ckpt.save(done, state())
            if rank == 0:
                log.info("step %d loss %.5f checkpoint saved", done, loss.item())
        if stop:
            code = EXIT_PREEMPTED
            break
    ckpt.close()  # waits for an async save: the checkpoint is complete before we exit
    mon.close()
    elapsed = time.perf_counter() - t_start
    facts = {"step": done, "exit_code": code, "seconds": round(elapsed, 3),
             "stop_checks": pre.checks, "stop_check_us": round(1e6 * pre.check_seconds / max(1, pre.checks), 1)}
    if code == EXIT_PREEMPTED:
        if world > 1:
            dist.barrier()  # every rank's checkpoint is complete before the marker says so
        if rank == 0:
            write_marker(args.run_dir, done, world_size=world, signum=pre.signum, stop_rank=pre.stop_rank)
        events.emit("runtime.train", "warn", f"rank {rank} stopped at step {done} (checkpoint saved)",
                    step=done, facts=facts, remedy="run again (requeue/restart) to resume")
        if under_torchrun:
            # exit 0 on every rank: a non-zero exit makes torchrun SIGTERM the others (and count a
            # failure toward --max-restarts); the marker tells the batch script to requeue
            code = 0
        ends.exit("preempted", exit_code=code, signal=_signame(pre.signum) if pre.signum else None)
    else:
        events.emit("runtime.train", "pass", f"rank {rank} finished {done} steps", step=done, facts=facts)
        if rank == 0 and args.final is not None:
            torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, args.final)
        ends.exit("clean", exit_code=0)
    # the handlers stay until the end is recorded: a SIGTERM meanwhile (torchrun shutting the
    # workers down after a preemption) only sets the flag again instead of ending an unrecorded rank
    pre.close()
    if world > 1:
        dist.destroy_process_group()
    return code


def _signame(signum: int) -> str:
    import signal

    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


if __name__ == "__main__":
    sys.exit(main())
