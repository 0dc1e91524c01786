"""`Resilience` beyond the README's program: node-local checkpoints with a peer copy under
torchrun (two agents standing for two nodes), bad arguments, and the console line of each start."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from preflight.runtime.events import read_events

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("_resilience_worker.py")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _two_nodes(tmp: Path, run: Path, steps: int, **extra: str) -> list[int]:
    """Two torchrun agents on this machine, one rank each: node A (rank 0) and node B (rank 1),
    each with its own node-local folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "SLURM_", "NCCL_"))}
    env.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
                "CUDA_VISIBLE_DEVICES": "", "LOCAL_EVERY": "10", **extra})
    port = _port()
    procs = []
    for node in (0, 1):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
               "--node-rank", str(node), "--rdzv-backend", "static", "--master-addr", "127.0.0.1",
               "--master-port", str(port), "--max-restarts", "0", str(WORKER), str(run), str(steps)]
        log = open(tmp / f"node{node}-{run.name}.log", "ab")  # noqa: SIM115 - closed with the process
        procs.append(subprocess.Popen(cmd, env={**env, "LOCAL_DIR": str(tmp / f"local-{node}")}, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=300))
        except subprocess.TimeoutExpired:
            for q in procs:
                os.killpg(q.pid, signal.SIGKILL)
            raise
    return codes


def _final(run: Path) -> dict:
    import torch

    return torch.load(run / "final.pt")


@pytest.mark.real
def test_a_lost_nodes_local_checkpoints_are_restored_from_its_peer_bitwise(tmp_path: Path) -> None:
    """Rank 1 raises at step 37: the job stops with node-local checkpoints at 10, 20, 30 on both
    nodes, each copied to the other. Node B's local folder is deleted (a replacement node); the
    next run resumes at step 30 on both ranks, rank 1 from rank 0's copy, and ends with the
    parameters of an uninterrupted run."""
    whole = tmp_path / "whole"
    assert _two_nodes(tmp_path, whole, 50) == [0, 0], (tmp_path / "node0-whole.log").read_text()[-3000:]
    for node in (0, 1):
        shutil.rmtree(tmp_path / f"local-{node}")
    run = tmp_path / "run"
    codes = _two_nodes(tmp_path, run, 50, CRASH_RANK="1", CRASH_AT="37")
    assert codes != [0, 0]
    assert (tmp_path / "local-0" / "peers" / "rank1").is_dir()
    shutil.rmtree(tmp_path / "local-1")  # node B replaced: its NVMe is empty
    assert _two_nodes(tmp_path, run, 50) == [0, 0], (tmp_path / "node1-run.log").read_text()[-3000:]
    starts = [e["facts"] for e in read_events(run) if e["check"] == "runtime.train" and e["facts"].get("resumed")]
    assert sorted((f["start_step"], f["restored_from"]) for f in starts) == [(30, "local"), (30, "local")]
    restored = {e["rank"]: e["facts"]["restored_from"] for e in read_events(run)
                if e["check"] == "runtime.checkpoint" and e["summary"].startswith("resumed from local checkpoint")}
    assert restored[0] == "local" and restored[1].startswith("peer rank 0 "), restored
    a, b = _final(whole), _final(run)
    assert a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)


def test_bad_arguments_are_a_clear_error(tmp_path: Path) -> None:
    from preflight.runtime.resilience import Resilience

    for kw in ({"save_every": 0}, {"stop_check_every": 0}):
        with pytest.raises(ValueError, match="at least 1"):
            Resilience(tmp_path / "run", init_distributed=False, **kw)
    with pytest.raises(TypeError, match=r"state\['step'\] \(int\) has no state_dict"):
        Resilience(tmp_path / "run", init_distributed=False, state={"step": 3})


def _loop(run: Path, total: int, corrupt_at: int = -1, nan_at: int = -1, **kw: object) -> list[tuple[int, bool]]:
    import torch

    from preflight.runtime.resilience import Resilience

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    applied = []
    done = set()
    with Resilience(run, state={"model": model, "optimizer": opt}, **kw) as res:  # type: ignore[arg-type]
        for step in res.steps(total):
            with res.step():
                x = torch.randn(16, 8, generator=torch.Generator().manual_seed(step))
                if step == nan_at:
                    x[3, 2] = float("nan")  # the data: the same NaN on every run of this step

                def compute(x: torch.Tensor = x, step: int = step) -> torch.Tensor:
                    loss = model(x).pow(2).mean()
                    loss.backward()
                    if step == corrupt_at and step not in done:  # one flipped gradient, once
                        done.add(step)
                        model.weight.grad[0, 1] += 1e6
                    return loss

                out = res.forward_backward(compute, model)
                if out.apply:
                    opt.step()
                applied.append((step, out.apply))
    return applied


def test_replay_skips_a_step_whose_nan_repeats_and_trains_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFLIGHT_HISTORY", f"sqlite:///{tmp_path / 'h.db'}")
    applied = _loop(tmp_path / "run", 30, nan_at=20, replay="skip", save_every=1000)
    assert [s for s, ok in applied if not ok] == [20] and len(applied) == 30
    ev = [e for e in read_events(tmp_path / "run") if e["check"] == "runtime.replay"]
    assert ev and ev[0]["status"] == "warn" and ev[0]["step"] == 20, ev
    exits = [e["facts"]["how"] for e in read_events(tmp_path / "run") if e["check"] == "runtime.exit"]
    assert exits == ["clean"]


def test_replay_of_a_one_time_corruption_ends_with_76_and_names_the_node(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from preflight.runtime.replay import SuspectHardware

    monkeypatch.setenv("PREFLIGHT_HISTORY", f"sqlite:///{tmp_path / 'h.db'}")
    with pytest.raises(SuspectHardware) as caught:
        _loop(tmp_path / "run", 30, corrupt_at=20, replay="skip", save_every=1000)
    assert caught.value.code == 76
    events = list(read_events(tmp_path / "run"))
    fail = [e for e in events if e["check"] == "runtime.replay" and e["status"] == "fail"]
    assert fail and fail[0]["step"] == 20, fail
    exits = [(e["facts"]["how"], e["facts"]["exit_code"]) for e in events if e["check"] == "runtime.exit"]
    assert exits == [("exception", 76)]
    from preflight.history.store import open_store

    with open_store(f"sqlite:///{tmp_path / 'h.db'}") as store:
        rows = [r for r in store.rows() if r.check == "runtime.replay"]
    assert [r.status for r in rows] == ["fail"], rows


def _launch(tmp: Path, run: Path, steps: int, *, nproc: int = 4, spares: int = 0, max_restarts: int = 0,
            **extra: str) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "SLURM_", "NCCL_", "PREFLIGHT_"))}
    env.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
                "CUDA_VISIBLE_DEVICES": "", "INPROCESS": "1", "STEP_TIMEOUT": "3", **extra})
    cmd = [sys.executable, "-m", "preflight.runtime.launch", "--nproc", str(nproc), "--spares", str(spares),
           "--max-restarts", str(max_restarts), str(WORKER), str(run), str(steps)]
    with open(tmp / f"launch-{run.name}.log", "ab") as log:
        p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return p.wait(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            raise


def _losses(run: Path) -> dict[int, str]:
    out = {}
    for line in (run / "losses.txt").read_text().splitlines():
        step, loss = line.split()
        out[int(step)] = loss  # a step redone after a re-form: its last loss
    return out


@pytest.mark.real
def test_in_process_restart_with_a_warm_spare_keeps_the_loss_curve_of_an_uninterrupted_run(tmp_path: Path) -> None:
    """4 ranks and a spare under the in-process launcher; the process of slot 2 is SIGKILLed at
    step 10. The survivors re-form with the spare as rank 2, restore the state and redo step 10:
    every step's loss and the final parameters equal an uninterrupted run's, the processes never
    restarted, and the restart and its downtime are events."""
    whole = tmp_path / "whole"
    assert _launch(tmp_path, whole, 30) == 0, (tmp_path / "launch-whole.log").read_text()[-3000:]
    run = tmp_path / "run"
    assert _launch(tmp_path, run, 30, spares=1, FAULT_SLOT="2", FAULT_AT="10") == 0, \
        (tmp_path / "launch-run.log").read_text()[-3000:]
    events = list(read_events(run))
    restarts = [e["facts"] for e in events if e["check"] == "runtime.restart"]
    # on a differing curve, the restart's own record says which state was restored and why
    assert _losses(run) == _losses(whole) and len(_losses(run)) == 30, (restarts, _losses(run), _losses(whole))
    a, b = _final(whole), _final(run)
    assert all(bool((a[k] == b[k]).all()) for k in a)
    assert len(restarts) == 1 and restarts[0]["new_world_size"] == 4, restarts
    assert [f["rank"] for f in restarts[0]["failed"]] == [2] and "SIGKILL" in restarts[0]["failed"][0]["cause"]
    lost = [e["facts"] for e in events if e["check"] == "runtime.downtime"]
    assert len(lost) == 1 and lost[0]["cause"] == "signal" and lost[0]["ranks"] == [2], lost
    spare = [e["facts"] for e in events if e["check"] == "runtime.train" and e["facts"].get("restored_from") == "peer"]
    assert [(f["start_step"], f["world_size"]) for f in spare] == [(10, 4)]
    assert not (run / "checkpoints").exists() or not [p for p in (run / "checkpoints").glob("step-*")
                                                       if p.name != "step-00000030"]


@pytest.mark.real
def test_in_process_restart_fences_a_stopped_rank_and_trains_on_with_fewer(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert _launch(tmp_path, run, 30, FAULT_SLOT="2", FAULT_AT="10", FAULT_SIGNAL="STOP") == 0, \
        (tmp_path / "launch-run.log").read_text()[-3000:]
    assert len(_losses(run)) == 30
    events = list(read_events(run))
    restarts = [e["facts"] for e in events if e["check"] == "runtime.restart"]
    assert len(restarts) == 1 and restarts[0]["new_world_size"] == 3, restarts
    assert [f["rank"] for f in restarts[0]["failed"]] == [2] and restarts[0]["failed"][0].get("fenced"), restarts
    ends = sorted(e["facts"]["how"] for e in events if e["check"] == "runtime.exit")
    assert ends.count("clean") == 3, ends


@pytest.mark.real
def test_under_torchrun_a_killed_rank_falls_back_to_torchruns_restart(tmp_path: Path) -> None:
    """torchrun's agent ends every worker when one dies: in-process restart cannot keep them, the
    job restarts through torchrun and resumes from the node-local checkpoint."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "SLURM_", "NCCL_", "PREFLIGHT_"))}
    env.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "INPROCESS": "1",
                "CUDA_VISIBLE_DEVICES": "", "LOCAL_DIR": str(tmp_path / "local"), "FAULT_SLOT": "1",
                "FAULT_AT": "25"})
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "--max-restarts", "1", str(WORKER), str(run), "40"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    starts = sorted((e["facts"]["restart"], e["facts"]["start_step"]) for e in read_events(run)
                    if e["check"] == "runtime.train" and "start_step" in e["facts"] and "resumed" in e["facts"])
    assert starts == [(0, 0), (0, 0), (1, 20), (1, 20)], starts
    assert len(_losses(run)) == 40


def _alone(run: Path, steps: int, **extra: str) -> subprocess.CompletedProcess[str]:
    """The worker as one process without a launcher (one rank), its stderr captured."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TORCHELASTIC_", "SLURM_", "NCCL_", "PREFLIGHT_", "RANK", "WORLD_SIZE"))}
    env.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", **extra})
    return subprocess.run([sys.executable, str(WORKER), str(run), str(steps)], env=env, capture_output=True,
                          text=True, timeout=300)


def _said(p: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in p.stderr.splitlines() if line.startswith("preflight[")]


@pytest.mark.real
def test_each_start_is_one_line_what_is_on_then_the_restart_and_the_rerun_with_the_attempt_before(
        tmp_path: Path) -> None:
    """A first start says what is on; a launcher's restart (PREFLIGHT_ATTEMPT, as the in-process
    launcher numbers its attempts) says which restart, where it resumed and how the previous
    attempt ended; a new launch (a rerun) says both. One line each, nothing else."""
    run = tmp_path / "run"
    local = {"LOCAL_DIR": str(tmp_path / "local"), "LOCAL_EVERY": "10", "STEP_TIMEOUT": "30"}
    first = _alone(run, 30, CRASH_RANK="0", CRASH_AT="15", **local)
    assert first.returncode == 1 and "injected fault at step 15" in first.stderr, first.stderr[-2000:]
    assert _said(first) == [f"preflight[rank 0]: training {run} from step 0, 1 rank, checkpoint every 1000 steps, "
                            "node-local checkpoint every 10 steps, step timeout 30 s, in-process restart off"]
    again = _alone(run, 30, CRASH_RANK="0", CRASH_AT="22", PREFLIGHT_ATTEMPT="1", **local)
    assert again.returncode == 1, again.stderr[-2000:]
    said = _said(again)
    assert len(said) == 1 and re.fullmatch(
        rf"preflight\[rank 0\]: restart 1: resumed {re.escape(str(run))} at step 10 \(local checkpoint\), 1 rank; "
        r"the previous attempt ended in a crash of rank 0 on \S+ \(RuntimeError: injected fault at step 15\) at "
        r"step 15, down \d+\.\d s so far, 5 steps to redo", said[0]), said
    rerun = _alone(run, 30, **local)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    said = _said(rerun)
    assert len(said) == 1 and re.fullmatch(
        rf"preflight\[rank 0\]: resumed {re.escape(str(run))} at step 20 \(local checkpoint\), 1 rank, checkpoint "
        r"every 1000 steps, node-local checkpoint every 10 steps, step timeout 30 s, in-process restart off; the "
        r"previous attempt ended in a crash of rank 0 on \S+ \(RuntimeError: injected fault at step 22\) at step "
        r"22, down \d+\.\d s so far, 2 steps to redo", said[0]), said


def test_the_preemption_line_names_the_signal_the_step_saved_and_the_end() -> None:
    from preflight.runtime.resilience import preempted_line

    marker = Path("/r/preempted")
    assert preempted_line("SIGUSR1", 1, 60, 4, 0, marker) == \
        "preempted: SIGUSR1 on rank 1; all 4 ranks saved step 60, exiting 0 for the requeue (marker /r/preempted)"
    assert preempted_line("SIGTERM", 0, 7, 1, 85, None) == \
        "preempted: SIGTERM on rank 0; the rank saved step 7, exiting 85 (preempted): run again to resume"
    assert preempted_line("SIGTERM", 0, 7, 2, 0, None).endswith("the marker could not be written: requeue by hand")
