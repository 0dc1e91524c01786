"""A training job on `Resilience` for tests: node-local checkpoints with a peer copy.

    worker.py RUN_DIR STEPS      (env: LOCAL_DIR, LOCAL_EVERY, CRASH_RANK, CRASH_AT,
                                  INPROCESS, FAULT_SLOT, FAULT_AT, FAULT_SIGNAL)

The data of a step is a function of (step, rank), so a resumed run ends with the parameters of
an uninterrupted one; CRASH_RANK raises at the start of step CRASH_AT (a fault to resume from).
INPROCESS=1 turns on in-process restart (under `python -m preflight.runtime.launch`): the
process of launch slot FAULT_SLOT (the rank under torchrun) sends itself FAULT_SIGNAL (KILL or STOP) at step FAULT_AT
in the first attempt only. Rank 0 appends "step loss" lines to RUN_DIR/losses.txt.
"""

from __future__ import annotations

import os
import signal
import sys

import torch

from preflight.runtime import Resilience


def main() -> int:
    run_dir, total = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    crash_rank, crash_at = int(os.environ.get("CRASH_RANK", "-1")), int(os.environ.get("CRASH_AT", "-1"))
    inprocess = os.environ.get("INPROCESS") == "1"
    fault_slot, fault_at = os.environ.get("FAULT_SLOT"), int(os.environ.get("FAULT_AT", "-1"))
    slot = os.environ.get("PREFLIGHT_SLOT", os.environ.get("RANK"))  # the launch slot, else the rank
    first_attempt = os.environ.get("PREFLIGHT_ATTEMPT", os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) == "0"
    local = {"local_dir": os.environ["LOCAL_DIR"]} if "LOCAL_DIR" in os.environ else {}
    with Resilience(run_dir, state={"model": model, "optimizer": opt}, save_every=1000,
                    local_every=int(os.environ.get("LOCAL_EVERY", "10")), step_timeout=float(
                        os.environ.get("STEP_TIMEOUT", "30")), inprocess=inprocess, **local) as res:
        for step in res.steps(total):
            with res.step():
                if res.rank == crash_rank and step == crash_at:
                    raise RuntimeError(f"injected fault at step {step}")
                if step == fault_at and first_attempt and slot == fault_slot:
                    os.kill(os.getpid(), getattr(signal, "SIG" + os.environ.get("FAULT_SIGNAL", "KILL")))
                x = torch.randn(32, 16, generator=torch.Generator().manual_seed(step * res.world_size + res.rank))
                loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                res.average_gradients(model)
                res.check_loss(loss)
                opt.step()
                if res.rank == 0:
                    with open(os.path.join(run_dir, "losses.txt"), "a") as f:
                        f.write(f"{step} {loss.item()!r}\n")
        if res.rank == 0:
            torch.save(model.state_dict(), os.path.join(run_dir, "final.pt"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
