"""The example's ends: a torchrun restart after a preemption does not train, and bad options
are a clear error, not a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from preflight.runtime.events import read_events
from preflight.runtime.watchdog import read_heartbeats

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "train_resilient.py"


def _run(run: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "SLURM_"))}
    base.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "RANK": "0",
                 "WORLD_SIZE": "1", **(env or {})})
    return subprocess.run([sys.executable, str(EXAMPLE), "--run-dir", str(run), "--steps", "5", *args],
                          env=base, capture_output=True, text=True, timeout=120)


def test_a_torchrun_restart_that_finds_the_marker_does_not_train(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "preempted").write_text(json.dumps({"step": 40, "time": 0, "world_size": 1}))
    p = _run(run, env={"TORCHELASTIC_RESTART_COUNT": "1", "TORCHELASTIC_RUN_ID": "job"})
    assert p.returncode == 0, p.stderr[-2000:]  # 0: torchrun must not count it as a failure
    events = list(read_events(run))
    assert not [e for e in events if e["check"] == "runtime.train" and "start_step" in e["facts"]]
    exits = [e for e in events if e["check"] == "runtime.exit"]
    assert [(e["facts"]["how"], e["facts"]["exit_code"]) for e in exits] == [("preempted", 0)]
    assert (run / "preempted").exists()  # left for the batch script to requeue on
    assert not (run / "checkpoints").exists() or not list((run / "checkpoints").glob("step-*"))


def test_the_first_run_trains_and_a_clean_end_is_recorded(tmp_path: Path) -> None:
    run = tmp_path / "run"
    p = _run(run, "--step-timeout", "30")
    assert p.returncode == 0, p.stderr[-2000:]
    exits = [e for e in read_events(run) if e["check"] == "runtime.exit"]
    assert [(e["facts"]["how"], e["facts"]["exit_code"]) for e in exits] == [("clean", 0)]


def test_a_bad_step_timeout_is_an_error_message(tmp_path: Path) -> None:
    for bad in ("soon", "0", "-5"):
        p = _run(tmp_path / "run", "--step-timeout", bad)
        assert p.returncode == 2 and "--step-timeout" in p.stderr and "Traceback" not in p.stderr, p.stderr


@pytest.mark.real
def test_a_rank_stopped_before_warmup_under_torchrun_is_ended_and_the_job_restarts(tmp_path: Path) -> None:
    """torchrun, 2 gloo ranks, `--max-restarts 1 --step-timeout 5`: rank 1 SIGSTOPped at step 5
    (before warm-up). Rank 0 writes its hang record naming rank 1, SIGKILLs it (same node, pid,
    start time and RANK checked), records its end as a hang (75); torchrun restarts the group at
    once and the restarted ranks resume and finish."""
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "SLURM_", "NCCL_"))}
    env.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
                "CUDA_VISIBLE_DEVICES": ""})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "--max-restarts", "1", str(EXAMPLE), "--run-dir", str(run), "--steps", "60", "--save-every", "1000",
           "--step-delay", "0.1", "--step-timeout", "5"]
    with open(tmp_path / "torchrun.log", "wb") as log:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        pid = None
        while time.monotonic() < deadline and proc.poll() is None:
            beat = read_heartbeats(run).get(1)
            if beat and int(beat.get("step") or 0) >= 5:
                pid = int(beat["pid"])
                break
            time.sleep(0.02)
        assert pid is not None, (tmp_path / "torchrun.log").read_text(errors="replace")[-3000:]
        os.kill(pid, signal.SIGSTOP)
        rc = proc.wait(timeout=150)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    text = (tmp_path / "torchrun.log").read_text(errors="replace")
    assert rc == 0, text[-3000:]
    hang = json.loads((run / "hang-rank0.json").read_text())
    assert hang["suspects"] == [1] and hang["timeout_kind"] == "peer-stale" and hang["step"] < 20
    exits = [e for e in read_events(run) if e["check"] == "runtime.exit"]
    first = [e for e in exits if e["facts"]["how"] == "hang"]
    assert [(e["rank"], e["facts"]["exit_code"]) for e in first] == [(0, 75)], exits
    assert f"ended stopped rank 1 (pid {pid})" in first[0]["summary"]
    assert sorted(e["rank"] for e in exits if e["facts"]["how"] == "clean") == [0, 1]
    restarted = [e for e in read_events(run) if e["check"] == "runtime.train"
                 and e["facts"].get("restart") == 1 and "start_step" in e["facts"]]
    assert sorted(e["rank"] for e in restarted) == [0, 1]
    assert f"watchdog ended stuck rank 1 (pid {pid}" in text, text[-3000:]
    # torchrun restarted on the first failure it saw: rank 0's 75 or rank 1's SIGKILL
    assert "failed (exitcode: 75) local_rank: 0" in text or "failed (exitcode: -9) local_rank: 1" in text
