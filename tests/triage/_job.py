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

The drills of the triage story (`kill_drill`, `replay_drill`) run the runtime layer as a job
owner does: the README's program as written (`readme_program`), or `resilient_main` (the same
program through `Resilience(replay=...)`: `python -m tests.triage._job resilient ...`), with
the fault from outside (a SIGKILL to the pid a rank's heartbeat names) or injected once.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
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
             shutdown_timeout: float = 2.0, max_restarts: int = 0, script: Path | None = None,
             env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start `rank_main` (or the program `script`, given `args`) under a real torchrun (standalone
    rendezvous on this machine); torchrun's own output, its failure summary included, goes to
    `log`. `env`: more variables for torchrun and its workers."""
    run_dir.mkdir(parents=True, exist_ok=True)
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("NCCL_", "TORCH_NCCL_", "TORCH_FR_", "TORCHELASTIC_", "RANK", "WORLD_SIZE",
                                    "LOCAL_RANK", "MASTER_"))}
    environ.update({"GLOO_SOCKET_IFNAME": "lo", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
                    "PYTHONUNBUFFERED": "1", **(env or {})})
    target = [str(script)] if script is not None else ["-m", "tests.triage._job"]
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "--monitor-interval=0.1", f"--shutdown-timeout={shutdown_timeout:g}", f"--max-restarts={max_restarts}",
            *target, *args]
    with open(log, "wb") as out:
        return subprocess.Popen(argv, env=environ, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def readme_program(dest: Path) -> Path:
    """The README's training program (its runtime section's python block, as written) in `dest`."""
    import re

    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Runtime resilience layer"):]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    if match is None:
        raise AssertionError("the README's runtime section has no python block")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(match.group(1))
    return dest


def beat(run: Path, rank: int, min_step: int, timeout: float = 120.0,
         p: subprocess.Popen[bytes] | None = None) -> dict[str, Any]:
    """The rank's heartbeat once it names `min_step` or later (AssertionError after `timeout`, or
    when the launcher `p` has ended)."""
    path = run / f"heartbeat-rank{rank}.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = json.loads(path.read_text())
            if (got.get("step") or 0) >= min_step:
                return dict(got)
        except (OSError, ValueError):
            pass
        if p is not None and p.poll() is not None:
            break
        time.sleep(0.02)
    raise AssertionError(f"rank {rank} never reached step {min_step}")


def resilient_main(argv: list[str]) -> None:
    """The README's program (one `Resilience`, the same model, batches and loop) with knobs for the
    drills: replay (`res.forward_backward`), a one-time gradient corruption or a NaN batch on one
    rank at one step, and a pause per step (so that an outside signal lands mid-run)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--save-every", type=int, default=10)
    ap.add_argument("--step-timeout", type=float, default=60.0)
    ap.add_argument("--step-sleep", type=float, default=0.0, help="seconds each step sleeps (a slower device)")
    ap.add_argument("--replay", choices=("stop", "skip", "report"), default=None)
    ap.add_argument("--corrupt", default="", help="<rank>:<step>: one element of that rank's local gradient "
                                                  "becomes NaN once (the replay of the step is clean)")
    ap.add_argument("--nan", default="", help="<rank>:<step>: that rank's batch of that step holds a NaN")
    a = ap.parse_args(argv)

    import torch

    from preflight.runtime import Resilience

    def at(spec: str) -> tuple[int, int]:
        r, s = spec.split(":") if spec else ("-1", "-1")
        return int(r), int(s)

    corrupt, nan = at(a.corrupt), at(a.nan)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    fired: list[int] = []
    with Resilience(a.run_dir, state={"model": model, "optimizer": opt}, step_timeout=a.step_timeout,
                    save_every=a.save_every, replay=a.replay) as res:
        for step in res.steps(a.steps):
            with res.step():
                data = torch.Generator().manual_seed(step * res.world_size + res.rank)
                x = torch.randn(256, 64, generator=data)
                if (res.rank, step) == nan:
                    x[3, 5] = float("nan")
                if a.step_sleep:
                    time.sleep(a.step_sleep)

                def compute(x: Any = x, step: int = step) -> Any:
                    loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
                    loss.backward()
                    if (res.rank, step) == corrupt and not fired:
                        fired.append(step)
                        next(model.parameters()).grad.view(-1)[7] = float("nan")  # type: ignore[union-attr]
                    return loss

                out = res.forward_backward(compute, model)
                if not out.apply:
                    continue
                res.average_gradients(model)
                res.check_loss(out.loss)
                opt.step()


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


# ----- the triage drills: real torchrun, 4 gloo ranks, one fault each ---------------------------

HOST = socket.gethostname().split(".")[0]
DRILL_HISTORY = "PREFLIGHT_HISTORY"


@dataclass
class Drill:
    """What a drill did: its run directory and the launcher's log beside it, torchrun's exit
    code, the faulty rank, its node and (for a kill) its pid and the step it had reached."""

    name: str
    run: Path
    log: Path
    rc: int | None
    rank: int
    node: str = HOST
    pid: int | None = None
    step: int | None = None
    command: str = ""
    took_s: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict)


def _history_env(tmp: Path) -> dict[str, str]:
    return {DRILL_HISTORY: f"sqlite:///{tmp / 'history.db'}"}


def _command(nproc: int, restarts: int, target: str, args: Sequence[str]) -> str:
    return (f"torchrun --standalone --nproc-per-node {nproc} --max-restarts {restarts} --monitor-interval 0.1 "
            f"--shutdown-timeout 2 {target} " + " ".join(args))


def kill_drill(tmp: Path, rank: int, restarts: int, rng: random.Random, steps: int = 200,
               timeout: float = 300.0) -> Drill:
    """The README's program, 4 ranks under torchrun `--max-restarts restarts`; `rank` is SIGKILLed
    from outside (the pid its heartbeat names) once it reached a random step between 60 and
    `steps` - 60, a random 0-40 ms later (anywhere in a step). With restarts the job resumes
    from the newest checkpoint (every 50 steps) and finishes (torchrun exit 0); without, it fails."""
    program = readme_program(tmp / "train.py")
    run, log = tmp / "run", tmp / "torchrun.log"
    args = [str(run), str(steps)]
    t0 = time.monotonic()
    p = torchrun(4, args, run, log, max_restarts=restarts, script=program, env=_history_env(tmp))
    try:
        at = rng.randrange(60, steps - 60)
        pid = int(beat(run, rank, at, p=p)["pid"])
        time.sleep(rng.uniform(0.0, 0.04))
        try:
            step = int(json.loads((run / f"heartbeat-rank{rank}.json").read_text()).get("step") or at)
        except (OSError, ValueError):
            step = at
        os.kill(pid, signal.SIGKILL)  # from outside, as the OOM killer or a kill -9 would
        rc = end(p, timeout=timeout)
    finally:
        stop(p, run)
    name = "recovered_kill" if restarts else "outside_kill"
    return Drill(name, run, log, rc, rank, pid=pid, step=step, took_s=time.monotonic() - t0,
                 command=_command(4, restarts, "train.py", args) + f"  # then kill -9 <rank {rank}'s pid>")


def replay_drill(tmp: Path, kind: str, rank: int, step: int, timeout: float = 240.0) -> Drill:
    """`resilient_main` with `replay="stop"`, 4 ranks under torchrun, no restart. `kind`
    "corrupt": one element of `rank`'s local gradient becomes NaN once at `step` (its replay is
    clean: every rank exits 76, suspect hardware on this node); "nan": `rank`'s batch of `step`
    holds a NaN (every run of the step sees it: the data; every rank raises ReproducibleFault)."""
    run, log = tmp / "run", tmp / "torchrun.log"
    args = ["resilient", "--run-dir", str(run), "--steps", "40", "--save-every", "10", "--replay", "stop",
            f"--{kind}", f"{rank}:{step}"]
    t0 = time.monotonic()
    p = torchrun(4, args, run, log, max_restarts=0, env=_history_env(tmp))
    try:
        rc = end(p, timeout=timeout)
    finally:
        stop(p, run)
    name = "replay76" if kind == "corrupt" else "nan_batch"
    return Drill(name, run, log, rc, rank, step=step, took_s=time.monotonic() - t0,
                 command=_command(4, 0, "-m tests.triage._job", args))


def exits(run: Path) -> dict[int, list[dict[str, Any]]]:
    """Each rank's runtime.exit facts, in the order written."""
    out: dict[int, list[dict[str, Any]]] = {}
    for path in sorted(run.glob("events-rank*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("check") == "runtime.exit":
                facts = ev.get("facts") or {}
                out.setdefault(int(facts.get("rank", ev.get("rank", -1))), []).append(facts)
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["resilient"]:
        resilient_main(sys.argv[2:])
    else:
        rank_main(sys.argv[1:])
