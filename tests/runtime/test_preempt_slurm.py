"""Preemption through real Slurm: the example sbatch template, torchrun and the example job.

The template (examples/slurm/train.sbatch, parametrised by environment for a CPU/gloo run) is
submitted to the test cluster's real Slurm. USR1 to the batch shell stands for the time-limit
or preemption warning (`--signal=B:USR1@90` sends exactly that); the template forwards SIGTERM
to the step, torchrun forwards it to its workers, the ranks agree on a step, save it and write
the `preempted` marker; the template sees the marker and requeues the job; Slurm starts it
again and the example resumes from the saved step, once, and finishes.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from preflight.runtime.events import read_events
from tests.conftest import need
from tests.netcluster import ROOT, NetCluster, prerequisites, slurm_prerequisites

pytestmark = pytest.mark.real

PREFIX, SUBNET = "rpq", "10.97.0"  # apart from the other cluster tests' namespaces and subnets
TEMPLATE = ROOT / "examples" / "slurm" / "train.sbatch"
EXAMPLE = ROOT / "examples" / "train_resilient.py"
STEPS = 400


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[NetCluster]:
    need(not prerequisites(), f"namespace cluster prerequisites: {prerequisites()}")
    need(not slurm_prerequisites(), f"Slurm prerequisites: {slurm_prerequisites()}")
    c = NetCluster(1, tmp_path / "cluster", prefix=PREFIX, subnet=SUBNET)
    c.up([])
    try:
        c.start_slurm()
        yield c
    finally:
        c.down()


def job_fields(c: NetCluster, job: str) -> dict[str, str]:
    p = c.slurm("scontrol", "show", "job", "-o", job, check=False, timeout=20)
    return dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", p.stdout))


def wait_for(pred: Any, timeout: float, what: str, detail: Any = lambda: "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}\n{detail()}")


def test_usr1_to_the_batch_script_saves_requeues_once_and_resumes_at_the_saved_step(
        cluster: NetCluster, tmp_path: Path) -> None:
    work = tmp_path / "job"
    run = work / "run"
    run.mkdir(parents=True)
    log = work / "job.out"
    args = (f"--run-dir {run} --checkpoint-dir {run / 'checkpoints'} --steps {STEPS} --save-every 1000 "
            f"--step-delay 0.03 --step-timeout 30")
    env = {**cluster.slurm_env(), "PREFLIGHT": "true", "TRAIN_SCRIPT": str(EXAMPLE), "TRAIN_ARGS": args,
           "RUN_DIR": str(run), "CKPT_DIR": str(run / "checkpoints"), "NPROC_PER_NODE": "2",
           "TORCHRUN_RESTARTS": "1", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": str(ROOT)}
    # the template's GPU-node resources do not exist here: the command line overrides them
    p = cluster.client("sbatch", "--parsable", "--nodes=1", "--gpus-per-node=0", "--cpus-per-task=2",
                       f"--chdir={work}", f"--output={log}", "--open-mode=append", str(TEMPLATE),
                       env=env, timeout=30, check=False)
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip().split(";")[0]

    def text() -> str:
        parts = [f"job fields: {job_fields(cluster, job)}", log.read_text(errors="replace")[-4000:] if log.exists()
                 else "(no job log)"]
        return "\n".join(parts)

    def train_events() -> list[dict[str, Any]]:
        return [e for e in read_events(run) if e["check"] == "runtime.train"]

    def at_step(n: int) -> bool:
        beats = [json.loads(b.read_text()) for b in run.glob("heartbeat-rank*.json")]
        return len(beats) == 2 and min(int(b.get("step") or 0) for b in beats) >= n

    wait_for(lambda: at_step(40), 120, "both ranks past step 40", text)
    t_signal = time.time()
    cluster.slurm("scancel", "--batch", "--signal=USR1", job, timeout=20)

    def finished() -> bool:
        f = job_fields(cluster, job)
        return f.get("JobState") in {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}

    wait_for(finished, 240, "the job to finish after its requeue", text)
    fields = job_fields(cluster, job)
    out = text()
    assert fields["JobState"] == "COMPLETED" and fields["ExitCode"] == "0:0", out
    assert fields["Restarts"] == "1", out  # requeued exactly once

    events = train_events()
    stopped = [e for e in events if "stopped at step" in e["summary"]]
    assert sorted(e["rank"] for e in stopped) == [0, 1], out
    stop = stopped[0]["facts"]["step"]
    assert all(e["facts"]["step"] == stop for e in stopped) and 40 <= stop < STEPS
    resumed = [e for e in events if e["summary"].split(" ", 2)[2].startswith("resumed at")]
    assert sorted(e["rank"] for e in resumed) == [0, 1], out  # one resume, by both ranks
    assert all(e["facts"]["start_step"] == stop for e in resumed)
    finished_ev = [e for e in events if "finished" in e["summary"]]
    assert sorted(e["rank"] for e in finished_ev) == [0, 1] and all(e["step"] == STEPS for e in finished_ev)
    saves = [e for e in read_events(run) if e["check"] == "runtime.checkpoint" and "saved (" in e["summary"]]
    assert [e["facts"]["step"] for e in saves].count(stop) == 1, "the stop step was not saved exactly once"
    exits = [e for e in read_events(run) if e["check"] == "runtime.exit"]
    hows = sorted((e["facts"]["how"], e["rank"]) for e in exits)
    assert hows == [("clean", 0), ("clean", 1), ("preempted", 0), ("preempted", 1)], hows
    assert "requeue" in out
    assert not (run / "preempted").exists()  # consumed by the requeued run
    marker = json.loads((run / "preempted.previous").read_text())  # set aside by the requeued run
    assert marker["step"] == stop and marker["world_size"] == 2, marker
    first_stop = min(e["time"] for e in stopped) - t_signal
    print(f"\nUSR1 to the batch shell: ranks stopped at step {stop} {first_stop:.2f} s later; requeued once "
          f"(Restarts={fields['Restarts']}), resumed at step {stop}, finished {STEPS} steps", file=sys.stderr)
