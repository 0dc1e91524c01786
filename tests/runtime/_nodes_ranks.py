"""A small data-parallel job for the multi-node in-process restart tests, one process per launch
slot under `python -m preflight.runtime.launch --nnodes N --node-rank K ...`.

    _nodes_ranks.py --run-dir RUN --steps 40 [--step-s 0.05] [--timeout 3]

Every rank draws its batch from (seed, step, rank) (a generator seeded per step), so a spare in
a failed rank's place reproduces an uninterrupted run; gradients and the loss are averaged with
one all_reduce per step. Nothing here makes a fault: the test kills a process from outside.

Writes into the run directory (shared by the nodes): `pid-slot<S>.json` once started (slot, pid,
host, attempt), `losses.jsonl` (rank 0 of each generation: step, loss, world size, generation,
slot), `result-slot<S>.json` at the end (rank, world, generation, restarts, pid, host, attempt).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--run-dir", required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--step-s", type=float, default=0.05)
    p.add_argument("--timeout", type=float, default=3.0)
    p.add_argument("--ip-max-restarts", type=int, default=3, help="InProcessRestart's max_restarts (0: every fault "
                                                                   "takes the fallback, exit 75)")
    return p.parse_args(argv)


def train_step(model, opt, step: int, rank: int, world: int) -> float:  # type: ignore[no-untyped-def]
    import torch
    import torch.distributed as dist

    g = torch.Generator().manual_seed(7_000_003 * step + 101 * rank + 5)
    x = torch.randn(16, 8, generator=g)
    y = (x[:, :4].sum(dim=1, keepdim=True) - x[:, 4:].prod(dim=1, keepdim=True)).tanh()
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


def write(path: Path, rec: dict) -> None:  # type: ignore[type-arg]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec))
    tmp.replace(path)


def main(argv: list[str]) -> int:
    a = parse(argv)
    import torch

    from preflight.runtime.inprocess import InProcessRestart

    run = Path(a.run_dir)
    run.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    state = {"model": model, "opt": opt}
    rs = InProcessRestart(run, timeout_s=a.timeout, max_restarts=a.ip_max_restarts)
    me = {"slot": rs.slot, "pid": os.getpid(), "host": socket.gethostname(),
          "attempt": os.environ.get("PREFLIGHT_ATTEMPT", "")}
    write(run / f"pid-slot{rs.slot}.json", me)
    if not rs.start():
        write(run / f"result-slot{rs.slot}.json", dict(me, rank=-1, spare_not_needed=True))
        return 0
    step = rs.restore(state, 0)
    while step < a.steps:
        try:
            loss = train_step(model, opt, step, rs.rank, rs.world_size)
        except Exception as exc:
            if not rs.is_fault(exc):
                raise
            step = rs.recover(exc, step, state)
            continue
        step += 1
        if rs.rank == 0:
            with open(run / "losses.jsonl", "a") as fh:
                fh.write(json.dumps({"step": step, "loss": loss, "world": rs.world_size, "gen": rs.generation,
                                     "slot": rs.slot}) + "\n")
        time.sleep(a.step_s)
    write(run / f"result-slot{rs.slot}.json",
          dict(me, rank=rs.rank, world=rs.world_size, generation=rs.generation, restarts=rs.restarts, step=step,
               params=[float(p.detach().sum()) for p in model.parameters()]))
    rs.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
