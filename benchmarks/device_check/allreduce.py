"""A bare torch.distributed all-reduce loop over message sizes, for comparison with the sweep.

Started by torchrun (`python -m torch.distributed.run --standalone --nproc-per-node N
allreduce.py OUT.json SIZES WARMUP ITERS`, SIZES a comma list of bytes), one rank per GPU on NCCL. Per size, as
nccl-tests times it: warm-up, barrier, ITERS all-reduces with no synchronisation in between,
one synchronisation, the slowest rank's time / ITERS. Rank 0 writes
{"world", "rows": [{"bytes", "time_us", "algbw", "busbw"}]} (GB/s; busbw = algbw x 2(n-1)/n).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist


def main() -> int:
    out, sizes = sys.argv[1], [int(x) for x in sys.argv[2].split(",")]
    warmup, iters = int(sys.argv[3]), int(sys.argv[4])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    backend = os.environ.get("DEVICE_CHECK_BACKEND", "nccl")  # gloo: CPU ranks, the plumbing without a GPU
    if backend == "nccl":
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    dist.init_process_group(backend)
    world, rank = dist.get_world_size(), dist.get_rank()

    def sync() -> None:
        if dev.type == "cuda":
            sync()
    rows = []
    for size in sizes:
        count = max(1, size // 4)
        buf = torch.zeros(count, dtype=torch.float32, device=dev)
        for _ in range(warmup):
            dist.all_reduce(buf)
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        sync()
        took = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=dev)
        dist.all_reduce(took, op=dist.ReduceOp.MAX)
        per = float(took.item()) / iters
        nbytes = count * 4
        algbw = nbytes / per / 1e9 if per > 0 else 0.0
        rows.append({"bytes": nbytes, "time_us": per * 1e6, "algbw": algbw,
                     "busbw": algbw * (2.0 * (world - 1) / world)})
    if rank == 0:
        Path(out).write_text(json.dumps({"world": world, "rows": rows}, indent=1))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
