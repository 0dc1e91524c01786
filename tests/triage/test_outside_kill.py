"""A rank killed from outside (SIGKILL, as the OOM killer does) is the first failure, not a hang.

Real: 4 gloo ranks under torchrun. The test SIGKILLs rank 2 mid-run (the pid its heartbeat
names); its peers fail on the lost connection and torchrun ends the rest. And, where this
machine allows it (root, a cgroup-v1 memory controller, a readable kernel log), rank 2 is moved
into a memory cgroup of its own with a small limit and allocates: the kernel's OOM killer ends
it, and triage reads the kernel's own line for its pid from the collected kernel log.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from preflight.triage import collect
from tests.conftest import ROOT, need
from tests.triage import _job
from tests.triage.test_torchrun_real import PREFLIGHT, _explain, _torch

HOST = socket.gethostname().split(".")[0]
VICTIM = 2


def _beat(run: Path, rank: int, min_step: int, timeout: float = 90.0) -> dict:
    """The rank's heartbeat once it reached `min_step`."""
    path = run / f"heartbeat-rank{rank}.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            beat = json.loads(path.read_text())
            if (beat.get("step") or 0) >= min_step:
                return beat
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"rank {rank} never reached step {min_step}")


def _triage(run: Path, *extra: str) -> tuple[int, dict, str]:
    p = subprocess.run([*PREFLIGHT, "triage", "--run-dir", str(run), "--json", *extra], capture_output=True,
                       text=True, timeout=90, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    return p.returncode, json.loads(p.stdout), p.stderr


def _check(run: Path, log: Path, variant: str, oom: bool, *extra: str) -> dict:
    code, doc, err = _triage(run, *extra)
    t = doc["triage"]
    why = f"{variant}: {t['summary']}\n" + "\n".join(doc["evidence"]) + "\n" + _explain(run, log) + err
    assert code == 1, why
    assert doc["category"] == "software crash", why  # not a "communication hang"
    assert doc["culprits"] == [{"node": HOST, "ranks": [VICTIM]}], why
    how = "killed by the kernel's OOM killer (SIGKILL)" if oom else "killed by a signal (SIGKILL)"
    assert t["summary"].startswith(f"rank {VICTIM} on {HOST} was {how}"), why
    assert "the first failure" in t["summary"], why
    assert "OOM killer" in t["action"], why
    return doc


@pytest.mark.real
def test_a_sigkilled_rank_is_the_first_failure_not_a_hang(tmp_path: Path) -> None:
    need(_torch(), "torch with gloo")
    run, log = tmp_path / "run", tmp_path / "torchrun.log"
    p = _job.torchrun(4, ["--run-dir", str(run), "--steps", "100000"], run, log)
    try:
        pid = _beat(run, VICTIM, 10)["pid"]
        os.kill(pid, signal.SIGKILL)  # from outside, as the OOM killer or a kill -9 would
        rc = _job.end(p, timeout=90)
    finally:
        _job.stop(p, run)
    assert rc == 1, _explain(run, log)
    assert f"exitcode  : -9 (pid: {pid})" in log.read_text(), _explain(run, log)
    shutil.copy(log, run / "launcher.log")
    doc = _check(run, log, "with torchrun's log", oom=False)
    ev = " ".join(doc["evidence"])
    assert "the launcher's Root Cause (first observed failure): exit code -9 (SIGKILL)" in ev, ev
    assert (f"no OOM-killer line for pid {pid}" in ev) or "kernel log not read" in ev, ev


def _memory_cgroup() -> Path | None:
    """This process's cgroup-v1 memory folder, when a child can be made there (root)."""
    try:
        line = next(ln for ln in Path("/proc/self/cgroup").read_text().splitlines() if ":memory:" in ln)
    except (OSError, StopIteration):
        return None
    folder = Path("/sys/fs/cgroup/memory") / line.split(":", 2)[2].lstrip("/")
    return folder if os.geteuid() == 0 and (folder / "cgroup.procs").is_file() else None


def _dmesg_readable() -> bool:
    try:
        return subprocess.run(["dmesg", "-T"], capture_output=True, timeout=15).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.real
def test_an_oom_killed_rank_is_named_with_the_kernels_line(tmp_path: Path) -> None:
    need(_torch(), "torch with gloo")
    parent = _memory_cgroup()
    need(parent is not None and _dmesg_readable(), "root, a cgroup-v1 memory controller and a readable dmesg")
    assert parent is not None
    group = parent / f"preflight-oom-{os.getpid()}"
    run, log = tmp_path / "run", tmp_path / "torchrun.log"
    group.mkdir()
    try:
        (group / "memory.limit_in_bytes").write_text(str(96 << 20))  # what the rank allocates from now on
        p = _job.torchrun(4, ["--run-dir", str(run), "--steps", "100000", "--fault", "hog", "--fault-rank",
                              str(VICTIM), "--fault-step", "60", "--hog-mb", "1024"], run, log)
        try:
            pid = _beat(run, VICTIM, 1)["pid"]
            (group / "cgroup.procs").write_text(str(pid))
            rc = _job.end(p, timeout=120)
        finally:
            _job.stop(p, run)
    finally:
        deadline = time.monotonic() + 20
        while group.exists() and time.monotonic() < deadline:
            try:
                group.rmdir()
            except OSError:
                time.sleep(0.2)
    assert rc == 1, _explain(run, log)
    for variant in ("run dir alone", "without the node checks", "with torchrun's log"):
        if variant == "with torchrun's log":
            shutil.copy(log, run / "launcher.log")
        extra = ["--no-node-checks"] if variant == "without the node checks" else []
        doc = _check(run, log, variant, True, *extra)
        ev = " ".join(doc["evidence"])
        assert f"Memory cgroup out of memory: Killed process {pid} (" in ev, ev
        assert f"memory cgroup limit of /{group.relative_to('/sys/fs/cgroup/memory')}" in ev, ev


def test_the_kernel_log_is_collected_for_triage_without_the_node_checks() -> None:
    names = [p.name for p in collect.triage_probes("/scratch/run", kernel_log=True)]
    assert names == ["triage-run-dir", "triage-procs", "kernel-log"]
    assert collect.triage_probes(None, kernel_log=True) == []  # nothing else to collect: still nothing
    assert "kernel-log" not in [p.name for p in collect.triage_probes("/scratch/run")]
