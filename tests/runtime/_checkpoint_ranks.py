"""Forked ranks for checkpoint and preemption tests: N processes forked from the test process
(torch is already imported there, so a rank starts in milliseconds instead of seconds), gloo
over loopback, one function per rank.

    results = run_ranks(fn, 4, args=(tmp_path,))      # {rank: return value}

Each child gets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT as torchrun sets
them, and (unless init=False) an initialized default group. A rank's exception comes back as
its traceback text. Every wait is bounded; a rank still running at the deadline is killed by
its own pid and the call fails.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import signal
import socket
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any


class RankFailure(AssertionError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _child(fn: Callable[..., Any], rank: int, world: int, port: int, init: bool, args: Sequence[Any],
           queue: Any) -> None:
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo"})
    try:
        import torch

        torch.set_num_threads(1)
        if init:
            import torch.distributed as dist

            dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
        out = fn(rank, *args)
        queue.put((rank, True, out))
    except BaseException:
        queue.put((rank, False, traceback.format_exc()))
    finally:
        try:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:
            pass
    queue.close()
    queue.join_thread()  # the result is in the pipe before the process ends
    os._exit(0)  # no atexit/pytest teardown in a forked child


def run_ranks(fn: Callable[..., Any], world: int, args: Sequence[Any] = (), timeout: float = 90.0,
              init: bool = True) -> dict[int, Any]:
    """Run fn(rank, *args) in `world` forked ranks; {rank: result}; raises RankFailure on any error."""
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_child, args=(fn, r, world, port, init, tuple(args), queue), daemon=True)
             for r in range(world)]
    # Process groups and stores of earlier tests left in reference cycles are collected here, in
    # the parent: a forked child that garbage-collected them hung in their destructors (joining
    # threads that exist only in the parent). What is left is frozen out of the children's GC.
    gc.collect()
    gc.freeze()
    try:
        for p in procs:
            p.start()
    finally:
        gc.unfreeze()
    results: dict[int, Any] = {}
    errors: dict[int, str] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) + len(errors) < world:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RankFailure(f"ranks {sorted(set(range(world)) - set(results) - set(errors))} "
                                  f"gave no result within {timeout} s")
            try:
                rank, ok, out = queue.get(timeout=min(left, 1.0))
            except Exception:
                if all(not p.is_alive() for p in procs) and queue.empty():
                    raise RankFailure(f"ranks died without a result: {[p.exitcode for p in procs]}") from None
                continue
            (results if ok else errors)[rank] = out
    finally:
        for p in procs:
            p.join(timeout=max(0.1, min(10.0, deadline - time.monotonic())))
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, signal.SIGKILL)
                p.join(timeout=5)
    if errors:
        raise RankFailure("\n".join(f"rank {r}:\n{t}" for r, t in sorted(errors.items())))
    return results
