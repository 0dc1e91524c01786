"""A small data-parallel training job for the in-process restart tests and benchmark.

    python -m preflight.runtime.launch --nproc 3 --spares 1 tests/runtime/_inprocess_ranks.py \
        --run-dir RUN --steps 30 --fault-rank 2 --fault-step 10 --fault KILL

Runs under `preflight.runtime.launch` (in-process restarts) or torchrun (the fallback). Every
rank draws its batch from (seed, step, rank) (a generator seeded per step), so a warm spare in
a failed rank's place reproduces an uninterrupted run; gradients and the loss are averaged
with one all_reduce per step. The fault (`--fault KILL|STOP`: the rank signals itself at the
start of `--fault-step`) happens only in the first generation of the first attempt, so neither a
spare taking the rank's number nor a restarted job repeats it.

Writes into the run directory: `pid-slot<S>` (the process id, for a fault sent from outside),
`losses.jsonl` (new rank 0: step, loss, world size, generation, wall time),
`timing-slot<S>.jsonl` (each restart: wall time of the fault's detection, of the next step
completed, and `recover`'s own detect-to-re-form seconds), `result-slot<S>.json` at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def say(line: str) -> None:
    """One line to the shared log in a single write: every rank writes into the same file, and a
    print's text and its newline are two writes another rank's line can land between."""
    os.write(1, (" ".join(line.splitlines()) + "\n").encode(errors="replace"))


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--run-dir", required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--step-s", type=float, default=0.05)
    p.add_argument("--timeout", type=float, default=3.0)
    p.add_argument("--fault", choices=("KILL", "STOP", "NONE"), default="NONE")
    p.add_argument("--fault-rank", type=int, default=2)
    p.add_argument("--fault-step", type=int, default=10)
    p.add_argument("--max-restarts", type=int, default=3)
    p.add_argument("--max-faults", type=int, default=1)
    p.add_argument("--min-world", type=int, default=1)
    p.add_argument("--ckpt-dir", default="")
    p.add_argument("--save-every", type=int, default=5)
    p.add_argument("--die-in-recovery-slot", type=int, default=-1,
                   help="this slot SIGKILLs itself while re-forming generation 1 (a second fault in recovery)")
    p.add_argument("--abort-on-fallback", action="store_true",
                   help="a rank told to take the fallback aborts instead (SIGABRT), as a crash on its way out")
    return p.parse_args(argv)


def first_attempt() -> bool:
    return os.environ.get("PREFLIGHT_ATTEMPT", "0") == "0" and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"


def train_step(model, opt, step: int, rank: int, world: int) -> float:  # type: ignore[no-untyped-def]
    import torch
    import torch.distributed as dist

    g = torch.Generator().manual_seed(1000003 * step + 7919 * rank + 17)
    x = torch.randn(16, 8, generator=g)
    y = x.sum(dim=1, keepdim=True).sin()
    opt.zero_grad(set_to_none=False)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()] + [loss.detach().reshape(1)])
    dist.all_reduce(flat)
    flat /= world
    off = 0
    for p in model.parameters():
        n = p.numel()
        p.grad.copy_(flat[off:off + n].view_as(p))
        off += n
    opt.step()
    return float(flat[-1])


def append(path: Path, rec: dict) -> None:  # type: ignore[type-arg]
    with open(path, "a") as fh:
        fh.write(json.dumps(rec) + "\n")


def main(argv: list[str]) -> int:
    a = parse(argv)
    import torch

    from preflight.runtime.inprocess import InProcessRestart, RestartFallback

    run = Path(a.run_dir)
    run.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    state = {"model": model, "opt": opt}
    rs = InProcessRestart(run, timeout_s=a.timeout, max_restarts=a.max_restarts, max_faults_per_rank=a.max_faults,
                          min_world_size=a.min_world)
    if a.die_in_recovery_slot == rs.slot:
        form = rs._form

        def dying_form(gen: int) -> None:
            if gen == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            form(gen)

        rs._form = dying_form  # type: ignore[method-assign]
    if not rs.start():
        say(f"slot {rs.slot}: spare not needed")
        return 0
    (run / f"pid-slot{rs.slot}").write_text(str(os.getpid()))  # for a fault sent from outside
    step = 0
    ck = None
    if a.ckpt_dir:
        from preflight.runtime.checkpoint import CheckpointManager

        ck = CheckpointManager(a.ckpt_dir, rank=0, world_size=1)  # replicated state: rank 0 saves it
        got = ck.load_latest()
        if got is not None:
            step = got[0]
            model.load_state_dict(got[1]["model"])
            opt.load_state_dict(got[1]["opt"])
        say(f"slot {rs.slot} rank {rs.rank}: starting at step {step}")
    step = rs.restore(state, step)
    detected: float | None = None
    while step < a.steps:
        try:
            if (a.fault != "NONE" and rs.rank == a.fault_rank and step == a.fault_step and rs.generation == 0
                    and first_attempt()):
                append(run / "fault.jsonl", {"time": time.time(), "signal": a.fault, "slot": rs.slot})
                os.kill(os.getpid(), signal.SIGKILL if a.fault == "KILL" else signal.SIGSTOP)
            loss = train_step(model, opt, step, rs.rank, rs.world_size)
        except Exception as exc:
            if not rs.is_fault(exc):
                raise
            detected = time.time()
            say(f"slot {rs.slot} rank {rs.rank}: fault at step {step}: {str(exc)[:120]}")
            try:
                step = rs.recover(exc, step, state)
            except RestartFallback:
                if a.abort_on_fallback:
                    os.abort()
                raise
            continue
        step += 1
        if rs.rank == 0:
            append(run / "losses.jsonl", {"step": step, "loss": loss, "world": rs.world_size, "gen": rs.generation,
                                              "time": time.time()})
        if detected is not None:
            append(run / f"timing-slot{rs.slot}.jsonl",
                   {"detected": detected, "next_step": time.time(), "rank": rs.rank,
                    "recover_s": (rs.last_restart or {}).get("detect_to_reform_s")})
            detected = None
        if ck is not None and rs.rank == 0 and step % a.save_every == 0:
            ck.save(step, {"model": model.state_dict(), "opt": opt.state_dict()})
        time.sleep(a.step_s)
    (run / f"result-slot{rs.slot}.json").write_text(json.dumps(
        {"slot": rs.slot, "rank": rs.rank, "world": rs.world_size, "generation": rs.generation, "step": step,
         "restarts": rs.restarts, "params": [float(p.detach().sum()) for p in model.parameters()]}))
    rs.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
