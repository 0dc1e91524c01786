"""A small 4-rank gloo training job with one injected fault, for the triage tests.

    launch("tests.triage._job:rank_main", 4, ["--run-dir", D, "--fault", "skip"], D)

Every rank runs steps of (sleep, all_reduce) under the runtime Watchdog (fixed, short step
timeout), so a hang ends every waiting rank within seconds with a hang record and a
flight-recorder dump in the run directory. Faults, on `--fault-rank` at `--fault-step`:
  skip  the rank skips that step's all_reduce and then blocks outside any collective
        (a rank that took a different code path), so its peers wait in that all_reduce;
  stop  the rank SIGSTOPs itself before that step's all_reduce (a frozen process);
  crash the rank raises an exception (a software crash);
  none  a clean run.
The process group timeout is longer than the watchdog's, so the watchdog speaks first.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from datetime import timedelta
from pathlib import Path


def rank_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--fault", choices=("skip", "stop", "crash", "none"), default="none")
    ap.add_argument("--fault-rank", type=int, default=2)
    ap.add_argument("--fault-step", type=int, default=10)
    ap.add_argument("--step-timeout", type=float, default=3.0)
    ap.add_argument("--pg-timeout", type=float, default=20.0)
    ap.add_argument("--block-s", type=float, default=40.0)
    a = ap.parse_args(argv)

    from preflight.runtime.watchdog import Watchdog

    def pickle_dump(record: dict) -> None:
        # the pickle form of the flight recorder too (the file TORCH_NCCL_DEBUG_INFO_TEMP_FILE would name)
        import torch._C._distributed_c10d as c10d

        (a.run_dir / f"nccl_trace_rank_{record['rank']}").write_bytes(c10d._dump_fr_trace())

    wd = Watchdog(a.run_dir, timeouts={"step": a.step_timeout, "setup": 60.0}, poll_s=0.1,
                  heartbeat_interval_s=0.3, exit_grace_s=1.5, on_hang=pickle_dump)
    import torch
    import torch.distributed as dist

    with wd.section("setup"):
        dist.init_process_group("gloo", timeout=timedelta(seconds=a.pg_timeout))
    rank = dist.get_rank()
    t = torch.ones(256)
    for step in range(a.steps):
        with wd.section("step", step=step):
            time.sleep(0.02)
            if rank == a.fault_rank and step == a.fault_step:
                if a.fault == "skip":
                    time.sleep(a.block_s)  # never joins this all_reduce; the watchdog ends it
                    continue
                if a.fault == "stop":
                    os.kill(os.getpid(), signal.SIGSTOP)
                if a.fault == "crash":
                    raise RuntimeError(f"injected failure in step {step} on rank {rank}")
            dist.all_reduce(t)
    wd.close()
    dist.barrier()
    dist.destroy_process_group()
