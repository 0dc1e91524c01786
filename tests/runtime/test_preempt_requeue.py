"""Preemption under torchrun, through the real batch script: requeue on the marker, resume once.

`examples/slurm/train.sbatch` runs as Slurm would run it (bash, SLURM_JOB_ID and the node list
set) with the real torchrun starting 2 gloo ranks of `examples/train_resilient.py`. What
Slurm itself would do stands in as two small executables: `srun` runs its command here, and
`scontrol` answers `show hostnames` and records `requeue`, `scancel --signal=TERM` signals the
step. USR1 to the batch shell is Slurm's
`--signal=B:USR1@90`. Then the script runs a second time, as Slurm runs a requeued job.
"""

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
from tests.runtime._wd_ranks import free_port

ROOT = Path(__file__).resolve().parents[2]
SBATCH = ROOT / "examples" / "slurm" / "train.sbatch"
pytestmark = pytest.mark.real


def _env(tmp: Path) -> dict[str, str]:
    fake = tmp / "fakebin"
    fake.mkdir()
    (fake / "srun").write_text('#!/bin/bash\nwhile [[ $# -gt 0 && "$1" == -* ]]; do shift; done\n'
                               f'echo $$ > {tmp / "step.pid"}\nexec "$@"\n')
    # `scancel --signal=TERM JOB` signals the job's steps (here: the command srun exec'd)
    (fake / "scancel").write_text(f'#!/bin/bash\necho "$*" >> {tmp / "scancel.log"}\n'
                                  f'kill -TERM "$(cat {tmp / "step.pid"})"\n')
    (fake / "scontrol").write_text(f'#!/bin/bash\necho "$*" >> {tmp / "scontrol.log"}\n'
                                   'if [ "$1 $2" = "show hostnames" ]; then echo localhost; fi\n')
    for f in fake.iterdir():
        f.chmod(0o755)
    run, ckpt = tmp / "run", tmp / "ckpt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC_"))}
    env.update({
        "PATH": f"{fake}:{Path(sys.executable).parent}:/usr/bin:/bin", "PYTHONPATH": str(ROOT),
        "SLURM_JOB_ID": "777", "SLURM_JOB_NODELIST": "localhost", "SLURM_JOB_NUM_NODES": "1",
        "PREFLIGHT": "true", "TRAIN_SCRIPT": str(ROOT / "examples" / "train_resilient.py"),
        "NPROC_PER_NODE": "2", "RDZV_PORT": str(free_port()), "CKPT_DIR": str(ckpt), "RUN_DIR": str(run),
        "TRAIN_ARGS": f"--run-dir {run} --checkpoint-dir {ckpt} --steps 160 --save-every 50 --step-delay 0.05",
        "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
    })
    return env


def _sbatch(env: dict[str, str], tmp: Path, preempt_after_s: float | None) -> tuple[int, str]:
    out = open(tmp / "job.out", "ab")  # noqa: SIM115 - closed below; --open-mode=append
    p = subprocess.Popen(["bash", str(SBATCH)], env=env, cwd=tmp, stdout=out, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        if preempt_after_s is not None:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and p.poll() is None:  # training has started
                if any(e["check"] == "runtime.train" for e in read_events(tmp / "run")):
                    break
                time.sleep(0.1)
            time.sleep(preempt_after_s)
            assert p.poll() is None, (tmp / "job.out").read_text()[-3000:]
            os.kill(p.pid, signal.SIGUSR1)  # Slurm's --signal=B:USR1 to the batch shell
        rc = p.wait(timeout=150)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
        out.close()
    return rc, (tmp / "job.out").read_text()


def test_preempted_job_is_requeued_on_the_marker_and_resumes_once_at_the_saved_step(tmp_path: Path) -> None:
    env = _env(tmp_path)
    rc, log = _sbatch(env, tmp_path, preempt_after_s=1.5)
    assert rc == 0, log[-3000:]
    requeues = (tmp_path / "scontrol.log").read_text().splitlines()
    assert requeues.count("requeue 777") == 1, requeues
    marker = json.loads((tmp_path / "run" / "preempted").read_text())
    saved = marker["step"]
    assert 0 < saved < 160 and marker["world_size"] == 2 and marker["signal"] == "SIGTERM", marker
    ends = [e for e in read_events(tmp_path / "run") if e["check"] == "runtime.exit"]
    assert sorted((e["rank"], e["facts"]["how"], e["facts"]["exit_code"]) for e in ends) == \
        [(0, "preempted", 0), (1, "preempted", 0)], ends

    # Slurm starts the requeued job: the same script, the same run directory
    rc, log = _sbatch(env, tmp_path, preempt_after_s=None)
    assert rc == 0, log[-3000:]
    assert (tmp_path / "scontrol.log").read_text().splitlines().count("requeue 777") == 1  # no second requeue
    assert not (tmp_path / "run" / "preempted").exists()
    events = list(read_events(tmp_path / "run"))
    starts = [e for e in events if e["check"] == "runtime.train" and "start_step" in e["facts"]]
    assert sorted((e["rank"], e["facts"]["start_step"]) for e in starts) == \
        [(0, 0), (0, saved), (1, 0), (1, saved)], starts
    finished = [e for e in events if e["check"] == "runtime.train" and e["summary"].endswith("finished 160 steps")]
    assert sorted(e["rank"] for e in finished) == [0, 1]
    print(f"preempted at step {saved}; requeued once; resumed at step {saved} and finished")
