"""A small 4-rank gloo training job with one injected fault, for the triage tests.

    launch("tests.triage._job:rank_main", 4, ["--run-dir", D, "--fault", "skip"], D)   # plain processes
    p = torchrun(4, ["--run-dir", D, "--fault", "crash", "--fault-rank", "1"], D, log)    # under torchrun

Every rank runs steps of (sleep, all_reduce) under the runtime Watchdog (fixed, short step
timeout), so a hang ends every waiting rank within seconds with a hang record and a
flight-recorder dump in the run directory, and under the crash recorder
(`preflight.runtime.crash.install`), so an exception leaves `crash-rank<R>.json` and a
`runtime.crash` event. Faults, on `--fault-rank` at `--fault-step`:
  skip  the rank skips that step's all_reduce and then blocks outside any collective
        (a rank that took a different code path), so its peers wait in that all_reduce;
  stop  the rank SIGSTOPs itself before that step's all_reduce (a frozen process);
  crash the rank raises an exception (a software crash); with --consequence-first it closes
        its connections after the crash record and waits 3 s before it exits, and its peers exit
        at once on the lost connection, so the launcher sees a consequence end first;
  none  a clean run.
  kill  the rank SIGKILLs itself before that step's all_reduce (as the OOM killer would);
  hog   the rank allocates `--hog-mb` MiB of host memory (touched) before that step's all_reduce,
        then goes on (under a memory limit the kernel's OOM killer ends it);
With `--ckpt-every N` the ranks save a checkpoint (preflight.runtime.CheckpointManager, under
`<run_dir>/ckpt`) every N steps and resume from the newest one; `--fault-restart K` injects the
fault only in torchrun's K-th attempt (TORCHELASTIC_RESTART_COUNT), so a restart can recover.
The process group timeout is longer than the watchdog's, so the watchdog speaks first.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def rank_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--fault", choices=("skip", "stop", "crash", "kill", "hog", "none"), default="none")
    ap.add_argument("--fault-rank", type=int, default=2)
    ap.add_argument("--fault-step", type=int, default=10)
    ap.add_argument("--step-timeout", type=float, default=3.0)
    ap.add_argument("--pg-timeout", type=float, default=20.0)
    ap.add_argument("--block-s", type=float, default=40.0)
    ap.add_argument("--ckpt-every", type=int, default=0, help="save a checkpoint every N steps and resume from it")
    ap.add_argument("--fault-restart", type=int, default=None,
                    help="inject the fault only in this torchrun attempt (TORCHELASTIC_RESTART_COUNT)")
    ap.add_argument("--fault-ranks", default="",
                    help="comma-separated: the faulty rank of each torchrun attempt (over --fault-rank)")
    ap.add_argument("--hog-mb", type=int, default=1024)
    ap.add_argument("--keep-stuck-peers", action="store_true",
                    help="the watchdog leaves a stopped peer alone (as for a rank on another node)")
    ap.add_argument("--consequence-first", action="store_true",
                    help="crash: the raising rank closes its connections, then waits before it raises, and a "
                         "peer exits at once on the connection loss, so the launcher sees a peer end first")
    a = ap.parse_args(argv)

    from preflight.runtime import crash
    from preflight.runtime.watchdog import Watchdog

    def pickle_dump(record: dict) -> None:
        # the pickle form of the flight recorder too (the file TORCH_NCCL_DEBUG_INFO_TEMP_FILE would name)
        import torch._C._distributed_c10d as c10d

        (a.run_dir / f"nccl_trace_rank_{record['rank']}").write_bytes(c10d._dump_fr_trace())  # type: ignore[attr-defined]

    wd = Watchdog(a.run_dir, timeouts={"step": a.step_timeout, "setup": 60.0}, poll_s=0.1,
                  heartbeat_interval_s=0.3, exit_grace_s=1.5, on_hang=pickle_dump,
                  kill_stuck_peers=not a.keep_stuck_peers)
    rec = crash.install(a.run_dir, watchdog=wd)
    import torch
    import torch.distributed as dist

    with wd.section("setup"):
        _init(timedelta(seconds=a.pg_timeout))
    rank = dist.get_rank()
    t = torch.ones(256)
    ckpt, start = _resume(a, t)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0)
    faulty = a.fault_restart is None or a.fault_restart == attempt
    by_attempt = [int(x) for x in a.fault_ranks.split(",") if x.strip()]
    if by_attempt:
        a.fault_rank = by_attempt[attempt] if attempt < len(by_attempt) else -1
    for step in range(start, a.steps):
        with wd.section("step", step=step):
            time.sleep(0.02)
            if faulty and rank == a.fault_rank and step == a.fault_step:
                if a.fault == "skip":
                    time.sleep(a.block_s)  # never joins this all_reduce; the watchdog ends it
                    continue
                if a.fault == "stop":
                    os.kill(os.getpid(), signal.SIGSTOP)
                if a.fault == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                if a.fault == "hog":
                    hog = [bytearray(8 << 20) for _ in range(max(1, a.hog_mb // 8))]  # zero-filled: touched
                    del hog
                if a.fault == "crash" and a.consequence_first:
                    _raise_late(step, rank)
                if a.fault == "crash":
                    raise RuntimeError(f"injected failure in step {step} on rank {rank}")
            try:
                dist.all_reduce(t)
            except RuntimeError:
                if a.consequence_first:
                    os._exit(1)  # a peer that leaves at once on the lost connection, with no record
                raise
        if ckpt is not None and (step + 1) % a.ckpt_every == 0:
            with wd.section("checkpoint"):
                ckpt.save(step + 1, {"t": t})  # the step to resume at
    wd.close()
    dist.barrier()
    dist.destroy_process_group()
    rec.exit("clean", exit_code=0)


def _init(timeout: timedelta) -> None:
    """init_process_group; after a torchrun restart in a store namespace of that attempt (the
    agent's store keeps the previous attempt's gloo addresses, which a restarted rank would dial)."""
    import torch.distributed as dist

    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if attempt in (None, "0") or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        dist.init_process_group("gloo", timeout=timeout)
        return
    world = int(os.environ["WORLD_SIZE"])
    agent = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False,
                          timeout=timeout)
    store = dist.PrefixStore(f"/triage_job/attempt_{attempt}", agent)
    dist.init_process_group("gloo", store=store, rank=int(os.environ["RANK"]), world_size=world, timeout=timeout)


def _resume(a: argparse.Namespace, t: object) -> tuple[Any, int]:
    """(the checkpoint manager or None, the step to start at), the state restored into `t`."""
    if a.ckpt_every <= 0:
        return None, 0
    from preflight.runtime.checkpoint import CheckpointManager

    ckpt = CheckpointManager(a.run_dir / "ckpt", keep_last=2)
    got = ckpt.load_latest()
    if got is None:
        return ckpt, 0
    step, state = got
    t.copy_(state["t"])  # type: ignore[attr-defined]
    return ckpt, int(step)


def _raise_late(step: int, rank: int) -> None:
    """Raise (the crash recorder writes its record), close this rank's connections so that its
    peers see the loss at once, and only then leave: the launcher sees a peer end first."""
    import torch.distributed as dist

    try:
        raise RuntimeError(f"injected failure in step {step} on rank {rank}")
    except RuntimeError as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)
    dist.destroy_process_group()
    time.sleep(3.0)
    os._exit(1)


def torchrun(nproc: int, args: Sequence[str], run_dir: Path, log: Path,
             shutdown_timeout: float = 2.0, max_restarts: int = 0) -> subprocess.Popen[bytes]:
    """Start `rank_main` under a real torchrun (standalone rendezvous on this machine); torchrun's
    own output, its failure summary included, goes to `log`."""
    run_dir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NCCL_", "TORCH_NCCL_", "TORCH_FR_", "TORCHELASTIC_", "RANK", "WORLD_SIZE",
                                "LOCAL_RANK", "MASTER_"))}
    env.update({"GLOO_SOCKET_IFNAME": "lo", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "--monitor-interval=0.1", f"--shutdown-timeout={shutdown_timeout:g}", f"--max-restarts={max_restarts}", "-m", "tests.triage._job",
            *args]
    with open(log, "wb") as out:
        return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def end(p: subprocess.Popen[bytes], timeout: float) -> int | None:
    """torchrun's exit code; after `timeout` its whole session (torchrun and its ranks) is killed."""
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    for sig in (signal.SIGCONT, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except OSError:
            pass
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    return None


def stop(p: subprocess.Popen[bytes], run: Path) -> None:
    """End a job that would train on: torchrun shuts its workers down on SIGTERM (its workers run
    in sessions of their own: killing torchrun's would leave them); then whatever worker the
    heartbeats name that is still torchrun's child is killed."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    for beat in run.glob("heartbeat-rank*.json"):
        try:
            pid = int(json.loads(beat.read_text())["pid"])
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1] == str(p.pid):
                os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError, KeyError, IndexError):
            pass
    end(p, timeout=10)


if __name__ == "__main__":
    rank_main(sys.argv[1:])
