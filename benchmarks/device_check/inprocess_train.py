"""The training program of step 3: the README's program on the GPUs, with in-process restart.

    python -m preflight.runtime.launch --nproc N inprocess_train.py RUN_DIR STEPS

Each rank trains on GPU LOCAL_RANK with NCCL (DEVICE_CHECK_BACKEND=gloo: on the CPU, to try the
plumbing where there is no GPU); each step lasts at least DEVICE_CHECK_STEP_S (0.05 s, a GPU
step's length). Rank 0 writes RUN_DIR/done.json at the end: {"steps", "world", "last_step"}.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

from preflight.runtime import Resilience

run_dir, total = sys.argv[1], int(sys.argv[2])
backend = os.environ.get("DEVICE_CHECK_BACKEND", "nccl")
step_s = float(os.environ.get("DEVICE_CHECK_STEP_S", "0.05"))
timeout_s = float(os.environ.get("DEVICE_CHECK_RESTART_TIMEOUT_S", "10"))
if backend == "nccl":
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
else:
    dev = torch.device("cpu")
torch.manual_seed(0)  # the same initial weights on every rank
model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
last = -1
with Resilience(run_dir, state={"model": model, "optimizer": opt}, step_timeout=60, save_every=1000,
                backend=backend, inprocess=True, restart_timeout_s=timeout_s) as res:
    for step in res.steps(total):
        began = time.monotonic()
        with res.step():
            data = torch.Generator(device=dev).manual_seed(step * res.world_size + res.rank)
            x = torch.randn(256, 64, generator=data, device=dev)
            loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            res.average_gradients(model)
            res.check_loss(loss)
            opt.step()
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            left = step_s - (time.monotonic() - began)
            if left > 0:
                time.sleep(left)
        last = step
    if res.rank == 0:
        with open(os.path.join(run_dir, "done.json"), "w") as fh:
            json.dump({"steps": total, "world": res.world_size, "last_step": last}, fh)
