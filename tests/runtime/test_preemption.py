"""Preemption: handlers, chaining and restore, the collective stop on 4 gloo ranks, and the
example training job stopped by SIGUSR1 under torchrun and resumed bitwise-identically."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import pytest
import torch

from preflight.runtime.events import EventWriter, read_events
from preflight.runtime.preemption import EXIT_PREEMPTED, Preemption
from tests.runtime._checkpoint_ranks import run_ranks

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "train_resilient.py"


def events_of(run: Path, check: str) -> list[dict[str, Any]]:
    return [e for e in read_events(run) if e["check"] == check]


# ------------------------------------------------------------------ one process


def test_signal_sets_flag_and_local_stop_with_events(tmp_path: Path) -> None:
    ev = EventWriter(tmp_path, rank=0)
    with Preemption(events=ev) as pre:
        assert not pre.requested and not pre.should_stop(1)
        os.kill(os.getpid(), signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while not pre.requested:  # the handler runs in the main thread, between bytecodes
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert pre.signum == signal.SIGUSR1
        assert pre.should_stop(2) and pre.should_stop(3)  # sticky
        assert pre.stop_step == 2
    evs = events_of(tmp_path, "runtime.preemption")
    assert [e["summary"].split(" ")[0] for e in evs] == ["SIGUSR1", "stop"]
    assert evs[0]["facts"]["pid"] == os.getpid() and evs[0]["status"] == "warn"
    assert evs[1]["facts"]["step"] == 2 and evs[1]["facts"]["signal"] == "SIGUSR1"


@pytest.mark.parametrize("announce", [True, False])
def test_the_agreement_is_one_console_line_unless_the_caller_says_it(
        tmp_path: Path, announce: bool, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    """Standalone, the stop is said once (rank 0) and the caught signal logged by its rank; with
    announce=False (Resilience, which says the preemption once it has saved) neither reaches the
    console, and the events are written either way."""
    ev = EventWriter(tmp_path, rank=0)
    with Preemption(events=ev, announce=announce) as pre:
        os.kill(os.getpid(), signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while not pre.requested:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert pre.should_stop(5) and pre.should_stop(6)
    assert pre.stop_what == "SIGUSR1"
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("preflight")]
    assert said == (["preflight[rank 0]: stop agreed at step 5: SIGUSR1 on rank 0 (every rank stops there)"]
                    if announce else [])
    logged = [r.getMessage() for r in caplog.records if r.name == "preflight.runtime"]
    assert [m for m in logged if "caught" in m or "agreed" in m] == (
        [f"preflight: SIGUSR1 caught on rank 0 (pid {os.getpid()})"] if announce else [])
    assert [e["summary"].split(" ")[0] for e in events_of(tmp_path, "runtime.preemption")] == ["SIGUSR1", "stop"]


def test_previous_handlers_chained_and_restored() -> None:
    calls: list[int] = []

    def mine(signum: int, frame: FrameType | None) -> None:
        calls.append(signum)

    old_usr1 = signal.signal(signal.SIGUSR1, mine)
    old_usr2 = signal.getsignal(signal.SIGUSR2)
    old_term = signal.getsignal(signal.SIGTERM)
    try:
        pre = Preemption()
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.01)
        assert pre.requested and calls == [signal.SIGUSR1]  # flag set, and the old handler ran
        pre.close()
        assert signal.getsignal(signal.SIGUSR1) is mine
        assert signal.getsignal(signal.SIGTERM) == old_term
        # a handler installed after ours is left in place by close()
        pre2 = Preemption(signals=(signal.SIGUSR2,))
        signal.signal(signal.SIGUSR2, mine)
        pre2.close()
        assert signal.getsignal(signal.SIGUSR2) is mine
    finally:
        signal.signal(signal.SIGUSR1, old_usr1)
        signal.signal(signal.SIGUSR2, old_usr2)


def test_outside_main_thread_warns_and_never_raises(tmp_path: Path) -> None:
    ev = EventWriter(tmp_path, rank=0)
    box: list[Any] = []
    th = threading.Thread(target=lambda: box.append(Preemption(events=ev)))
    th.start()
    th.join(10)
    pre = box[0]
    assert not pre.should_stop(1)
    pre.request("operator file")
    assert pre.should_stop(2)
    pre.close()
    summaries = [e["summary"] for e in events_of(tmp_path, "runtime.preemption")]
    assert any("not in the main thread" in s for s in summaries)
    assert any(s.startswith("operator file caught") for s in summaries)


# ------------------------------------------------------------------ 4 gloo ranks


def _rank_loop(rank: int, every: int, signal_step: int) -> dict[str, Any]:
    pre = Preemption(every=every)
    stop = None
    for step in range(1, 200):
        if rank == 2 and step == signal_step:
            os.kill(os.getpid(), signal.SIGUSR1)
        if pre.should_stop(step):
            stop = step
            break
    pre.close()
    return {"stop": stop, "first": pre.stop_rank, "checks": pre.checks,
            "us": 1e6 * pre.check_seconds / max(1, pre.checks)}


@pytest.mark.real
@pytest.mark.parametrize("every,expect", [(1, 7), (4, 8)])
def test_all_ranks_agree_on_the_stop_step(every: int, expect: int) -> None:
    res = run_ranks(_rank_loop, 4, args=(every, 7), timeout=60)
    assert [res[r]["stop"] for r in range(4)] == [expect] * 4
    assert [res[r]["first"] for r in range(4)] == [2] * 4
    assert res[0]["checks"] == expect // every
    print(f"\nshould_stop on 4 gloo ranks, every={every}: {res[0]['us']:.0f} us per collective check")


# ------------------------------------------------------------------ the example under torchrun


def _load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_resilient", EXAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _example_rank(rank: int, argv: list[str]) -> int:
    return int(_load_example().main(argv))


def _wait_for(pred: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.real
def test_sigusr1_to_one_rank_stops_all_and_resume_equals_uninterrupted(tmp_path: Path) -> None:
    steps = 150
    common = ["--steps", str(steps), "--save-every", "40", "--step-delay", "0.015"]
    run = tmp_path / "interrupted"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "NCCL_", "TORCH_NCCL_"))}
    env.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
                "CUDA_VISIBLE_DEVICES": ""})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
           "--max-restarts", "1", "--monitor-interval", "0.1", str(EXAMPLE), "--run-dir", str(run),
           "--final", str(tmp_path / "interrupted.pt"), *common]
    with open(tmp_path / "torchrun.log", "wb") as log:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        def started() -> dict[int, int]:
            got = {e["rank"]: e["facts"]["pid"] for e in events_of(run, "runtime.train")
                   if e["facts"].get("restart") == 0 and "pid" in e["facts"]}
            return got if len(got) == 4 else {}

        pids = _wait_for(started, 120, "4 ranks to start")
        time.sleep(0.6)
        assert proc.poll() is None
        t_signal = time.time()
        os.kill(pids[2], signal.SIGUSR1)
        rc = proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    log_text = (tmp_path / "torchrun.log").read_text(errors="replace")
    assert rc == 0, log_text[-3000:]
    said = [line for line in log_text.splitlines() if "stop agreed" in line]  # 4 ranks agreed, one said it
    assert len(said) == 1 and re.fullmatch(r"preflight\[rank 0\]: stop agreed at step \d+: SIGUSR1 on rank 2 "
                                           r"\(every rank stops there\)", said[0]), said

    agreed = [e for e in events_of(run, "runtime.preemption") if e["summary"].startswith("stop agreed")]
    assert len(agreed) == 4 and {e["rank"] for e in agreed} == {0, 1, 2, 3}
    stop = agreed[0]["facts"]["step"]
    assert all(e["facts"]["step"] == stop and e["facts"]["first_rank"] == 2 for e in agreed)
    assert 0 < stop < steps
    caught = [e for e in events_of(run, "runtime.preemption") if "caught" in e["summary"]]
    assert [e["rank"] for e in caught] == [2]
    saves = [e for e in events_of(run, "runtime.checkpoint") if "saved (" in e["summary"]]
    assert [e["facts"]["step"] for e in saves].count(stop) == 1, "the stop step was not saved exactly once"
    train = events_of(run, "runtime.train")
    stopped = [e for e in train if "stopped" in e["summary"]]
    assert sorted(e["rank"] for e in stopped) == [0, 1, 2, 3]
    assert all(e["facts"]["step"] == stop and e["facts"]["exit_code"] == EXIT_PREEMPTED for e in stopped)
    exit_delay = max(e["time"] for e in stopped) - t_signal
    assert exit_delay < 10, f"ranks took {exit_delay:.1f} s to save and exit"
    # under torchrun the ranks exit 0 with the marker (no SIGTERM of the others, no restart in
    # place); the job runs again, as a requeue runs it, and resumes
    assert json.loads((run / "preempted").read_text())["step"] == stop
    assert not [e for e in train if e["facts"].get("restart") == 1]
    with open(tmp_path / "torchrun2.log", "wb") as log:
        rc = subprocess.run(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=180).returncode
    assert rc == 0, (tmp_path / "torchrun2.log").read_text(errors="replace")[-3000:]
    assert not (run / "preempted").exists()
    train = events_of(run, "runtime.train")
    resumed = [e for e in train if e["facts"].get("start_step") == stop]
    assert sorted(e["rank"] for e in resumed) == [0, 1, 2, 3]
    finished = [e for e in train if "finished" in e["summary"]]
    assert sorted(e["rank"] for e in finished) == [0, 1, 2, 3] and all(e["step"] == steps for e in finished)
    man = json.loads((run / "checkpoints" / f"step-{steps:08d}" / "manifest.json").read_text())
    assert man["world_size"] == 4

    # the same job never interrupted (4 forked ranks, same code path, gloo)
    ref = tmp_path / "reference"
    argv = ["--run-dir", str(ref), "--final", str(tmp_path / "reference.pt"), *common[:-2], "--step-delay", "0"]
    codes = run_ranks(_example_rank, 4, args=(argv,), timeout=120, init=False)
    assert codes == {r: 0 for r in range(4)}
    a = torch.load(tmp_path / "interrupted.pt", weights_only=True)
    b = torch.load(tmp_path / "reference.pt", weights_only=True)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"{k} differs after resuming at step {stop}"
    us = [e["facts"]["stop_check_us"] for e in finished]
    print(f"\nSIGUSR1 at step {stop}: 4 ranks saved and exited {exit_delay:.2f} s after the signal; resumed, "
          f"{steps - stop} more steps, parameters equal to the uninterrupted run; should_stop "
          f"{min(us):.0f}-{max(us):.0f} us per step")
