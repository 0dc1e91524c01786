"""A rank ended by the launcher after another rank failed is a victim, not a preemption.

Real torchrun, 2 gloo ranks running a loop with `Preemption` (which catches SIGTERM) and the
crash recorder: rank 1 raises at step 10; torchrun SIGTERMs rank 0. Rank 0's agreement check
then fails (its peer is gone), so it records `runtime.exit` how "signal" and ends by SIGTERM
(the launcher sees -15) instead of trying to save a checkpoint no peer will join.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from preflight.runtime.events import read_events

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.real

WORKER = textwrap.dedent("""
    import os, sys, time
    from datetime import timedelta
    import torch.distributed as dist
    from preflight.runtime import crash
    from preflight.runtime.events import EventWriter
    from preflight.runtime.preemption import Preemption

    run = sys.argv[1]
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    events = EventWriter(run, rank=rank)
    rec = crash.install(run, rank=rank, events=events)
    pre = Preemption(events=events)
    for step in range(1, 2000):
        time.sleep(0.02)
        if rank == 1 and step == 10:
            raise ValueError("bad batch")
        if pre.should_stop(step):
            rec.exit("preempted", exit_code=0)
            sys.exit(0)
    rec.exit("clean", exit_code=0)
""")


def test_sigterm_from_torchrun_after_a_peer_failed_is_recorded_as_a_victim(tmp_path: Path) -> None:
    run = tmp_path / "run"
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "SLURM_"))}
    env.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"})
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        "--max-restarts", "0", str(script), str(run)], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    exits = {e["rank"]: e for e in read_events(run) if e["check"] == "runtime.exit"}
    assert sorted(exits) == [0, 1], p.stderr[-3000:]
    assert exits[1]["facts"]["how"] == "exception" and exits[1]["status"] == "fail"
    victim = exits[0]
    assert victim["facts"]["how"] == "signal" and victim["facts"]["signal"] == "SIGTERM", victim
    assert victim["status"] == "warn" and victim["facts"]["exit_code"] == -15
    assert not (run / "crash-rank0.json").exists()  # the victim raised nothing
    assert (run / "crash-rank1.json").exists()
    assert "exitcode  : -15" in p.stderr, p.stderr[-3000:]  # what the launcher saw: ended by SIGTERM
