"""Multi-rank test launcher: N local processes, gloo over loopback, one function per rank.

    procs = launch("tests.runtime.test_watchdog:rank_train", 4, ["--steps", "200"], run_dir)
    rcs = wait_all(procs, timeout=60)

Each rank runs `python tests/runtime/_wd_ranks.py module:function args...` with RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set, the same contract torchrun gives
its workers; the function calls `init_process_group("gloo")` itself. Output goes to
`<run_dir>/rank<R>.log`. Every wait is bounded; leftovers are killed by their own pid.
"""

from __future__ import annotations

import importlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(target: str, nproc: int, args: Sequence[str], run_dir: Path,
           env: Mapping[str, str] | None = None,
           rank_env: Mapping[int, Mapping[str, str]] | None = None) -> list[subprocess.Popen[bytes]]:
    """Start `nproc` ranks of `target` ("module:function"); returns the processes by rank."""
    run_dir.mkdir(parents=True, exist_ok=True)
    port = str(free_port())
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("NCCL_", "TORCH_NCCL_", "TORCH_FR_", "TORCHELASTIC_"))}
    base.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": str(nproc),
                 "GLOO_SOCKET_IFNAME": "lo", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
                 "PYTHONUNBUFFERED": "1"})
    base.update(env or {})
    procs = []
    for rank in range(nproc):
        e = dict(base, RANK=str(rank), LOCAL_RANK=str(rank))
        e.update((rank_env or {}).get(rank, {}))
        with open(run_dir / f"rank{rank}.log", "wb") as log:
            procs.append(subprocess.Popen([sys.executable, __file__, target, *args], env=e, cwd=ROOT,
                                          stdout=log, stderr=subprocess.STDOUT))
    return procs


def wait_all(procs: Sequence[subprocess.Popen[bytes]], timeout: float) -> list[int | None]:
    """Exit codes by rank; a rank still running after `timeout` is killed and reads None."""
    deadline = time.monotonic() + timeout
    rcs: list[int | None] = []
    for p in procs:
        try:
            rcs.append(p.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            rcs.append(None)
    kill_all(procs)
    return rcs


def kill_all(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass


def logs(run_dir: Path) -> str:
    """Every rank's output and hang record, for assertion messages."""
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                     for p in sorted(run_dir.glob("rank*.log")) + sorted(run_dir.glob("hang-rank*.json")))


def init_gloo(timeout_s: float = 60.0) -> None:
    """init_process_group for a rank started by `launch` (bounded collectives)."""
    from datetime import timedelta

    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=timedelta(seconds=timeout_s))


if __name__ == "__main__":
    module, _, func = sys.argv[1].partition(":")
    getattr(importlib.import_module(module), func)(sys.argv[2:])
