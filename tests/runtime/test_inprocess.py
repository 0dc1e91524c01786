"""In-process restart: agreement, fencing, re-forming and restoring with real gloo processes,
the launcher that keeps survivors alive, warm spares, the limits and torchrun's fallback."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from preflight.runtime import inprocess as ip
from preflight.runtime.events import read_events
from preflight.runtime.launch import verdict
from tests.conftest import need

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "runtime" / "_inprocess_ranks.py"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TORCHELASTIC_", "SLURM_", "NCCL_", "PREFLIGHT_", "TORCH_FR_"))}
    env.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
                "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": ""})
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return env


def _run(cmd: list[str], log: Path, timeout: float = 150) -> int | None:
    """Run a launcher command in its own session; on timeout its whole group is killed (None)."""
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, env=_env(), cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def launch(tmp: Path, nproc: int, *args: str, spares: int = 0, restarts: int = 0, name: str = "run",
           timeout: float = 150) -> tuple[int | None, Path, str]:
    run = tmp / name
    cmd = [sys.executable, "-m", "preflight.runtime.launch", "--nproc", str(nproc), "--spares", str(spares),
           "--max-restarts", str(restarts), str(WORKER), "--run-dir", str(run), *args]
    rc = _run(cmd, tmp / f"{name}.log", timeout)
    return rc, run, (tmp / f"{name}.log").read_text(errors="replace")


def losses(run: Path) -> dict[int, dict[str, Any]]:
    """The last record of every step (a redone step's second record wins)."""
    out: dict[int, dict[str, Any]] = {}
    for line in (run / "losses.jsonl").read_text().splitlines():
        rec = json.loads(line)
        out[int(rec["step"])] = rec
    return out


def restarts(run: Path, status: str = "warn") -> list[dict[str, Any]]:
    return [e for e in read_events(run) if e["check"] == ip.CHECK and e["status"] == status]


# ----- units ----------------------------------------------------------------------------------


def test_state_structure_splits_and_joins_back_with_optimizer_state() -> None:
    import torch

    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    states = {"model": model.state_dict(), "opt": opt.state_dict()}
    tensors: list[Any] = []
    skeleton = ip._split(states, tensors)
    specs: list[tuple[list[int], str]] = []
    ip._specs(skeleton, specs)
    assert len(specs) == len(tensors) >= 6 and ("float32" in {d for _, d in specs})
    assert [list(t.shape) for t in tensors] == [s for s, _ in specs]
    back = ip._join(skeleton, [t.clone() for t in tensors])
    fresh = torch.optim.Adam(torch.nn.Linear(3, 2).parameters())
    fresh.load_state_dict(back["opt"])  # the structure an optimizer that never stepped accepts
    assert torch.equal(back["model"]["weight"], model.weight)
    assert back["opt"]["param_groups"] == states["opt"]["param_groups"]


def test_collective_faults_are_told_from_training_errors(tmp_path: Path) -> None:
    rs = ip.InProcessRestart(tmp_path)
    assert rs.is_fault(RuntimeError("[gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer"))
    assert rs.is_fault(RuntimeError("Timed out waiting 3000ms for recv operation to complete"))
    assert not rs.is_fault(RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"))
    assert not rs.is_fault(ValueError("bad batch"))
    assert not rs.is_fault(KeyboardInterrupt())  # type: ignore[arg-type]
    rs.abort("watchdog fired")  # just aborted: whatever runtime error the collective raises is the fault
    assert rs.is_fault(RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"))
    assert not rs.is_fault(ValueError("bad batch"))
    assert rs._detected_at is not None
    rs._detected_at -= 2 * rs.timeout_s + rs.join_timeout_s + 1  # an old alarm whose step completed
    assert not rs.is_fault(RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"))


def test_bad_limits_are_refused(tmp_path: Path) -> None:
    for kw in ({"timeout_s": 0}, {"max_restarts": -1}, {"min_world_size": 0}):
        with pytest.raises(ValueError):
            ip.InProcessRestart(tmp_path, **kw)  # type: ignore[arg-type]


def test_exit_codes_read_as_words() -> None:
    assert ip.exit_words(3) == "exited (code 3)"
    assert ip.exit_words(-9).startswith("killed by SIGKILL (an outside kill or the OOM killer")
    assert ip.exit_words(-15) == "killed by SIGTERM"
    assert ip.exit_words(-99) == "killed by signal 99"


def test_the_verdict_is_taken_over_the_last_generation() -> None:
    # slot 2 died (-9) and spare slot 3 took its rank: the members finished
    assert verdict({0: 0, 1: 0, 2: -9, 3: 0}, [0, 1, 3]) == 0
    assert verdict({0: 75, 1: 75, 2: -9}, [0, 1]) == ip.EXIT_FALLBACK
    assert verdict({0: 0, 1: -9}, [0, 1]) == 128 + 9
    assert verdict({0: 0, 1: 3}, [0, 1]) == 3
    assert verdict({0: 0}, [0, 1]) == 1  # a member with no exit recorded is not a success
    # the last plan decided the fallback: a member's crash on its way out counts as it
    assert verdict({0: -6, 1: -9}, [0], {"decision": "fallback"}) == ip.EXIT_FALLBACK
    assert verdict({0: 1}, [0], {"decision": "fallback"}) == ip.EXIT_FALLBACK
    assert verdict({0: 0, 1: 0}, [0, 1], {"decision": "fallback"}) == 0
    assert verdict({0: -6, 1: -9}, [0], {"decision": "go"}) == 128 + 6  # a crash after a re-form that held is one
    assert verdict({0: -6}, [0], {}) == 128 + 6


def test_fencing_kills_only_the_registered_process_of_this_host() -> None:
    victim = subprocess.Popen(["sleep", "30"])
    try:
        st = ip.proc_state(victim.pid)
        assert st is not None
        info = {"slot": 2, "host": ip._host(), "pid": victim.pid, "start_ticks": st[1]}
        assert not ip.fence(dict(info, start_ticks=st[1] + 1))  # a reused pid: another process
        assert not ip.fence(dict(info, host="elsewhere"))
        assert not ip.fence(dict(info, pid=os.getpid()))
        assert ip._same_process(info) == "running"
        os.kill(victim.pid, signal.SIGSTOP)
        time.sleep(0.1)
        assert ip._same_process(info) == "stopped"
        assert ip.fence(info)
        assert victim.wait(10) == -signal.SIGKILL
        assert ip._zombie_cause(info) is None  # reaped: gone
        assert ip._same_process(info) == "gone"
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait(10)


def test_an_unreaped_member_reads_as_killed_by_its_signal() -> None:
    victim = subprocess.Popen(["sleep", "30"])
    try:
        st = ip.proc_state(victim.pid)
        assert st is not None
        info = {"slot": 1, "host": ip._host(), "pid": victim.pid, "start_ticks": st[1]}
        os.kill(victim.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while (ip.proc_state(victim.pid) or ("",))[0] != "Z" and time.monotonic() < deadline:
            time.sleep(0.02)
        cause = ip._zombie_cause(info)
        assert cause is not None and cause.startswith("killed by SIGKILL") and "OOM killer" in cause
    finally:
        victim.kill()
        victim.wait(10)


def _one_rank(tmp_path: Path, **kw: Any) -> ip.InProcessRestart:
    import torch.distributed as dist

    os.environ.pop("MASTER_ADDR", None)
    rs = ip.InProcessRestart(tmp_path, store=dist.HashStore(), **kw)
    rs.nproc = rs.world_size = 1
    rs.slot, rs.rank, rs.members, rs.is_spare = 0, 0, [0], False
    return rs


def test_a_transient_fault_with_every_rank_alive_re_forms_the_same_group(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.delenv("MASTER_ADDR", raising=False)
    rs = _one_rank(tmp_path, max_restarts=1)
    assert rs.start()
    model = torch.nn.Linear(2, 1)
    try:
        step = rs.recover(RuntimeError("Timed out waiting 3000ms for recv"), 7, {"model": model})
        assert (step, rs.generation, rs.world_size, rs.restarts) == (7, 1, 1, 1)
        ev = restarts(tmp_path)
        assert len(ev) == 1 and ev[0]["facts"]["failed_ranks"] == [] and ev[0]["facts"]["new_world_size"] == 1
        # over max_restarts: the fallback, exit 75, and the leader's FAIL event says why
        with pytest.raises(ip.RestartFallback) as err:
            rs.recover(RuntimeError("Connection reset by peer"), 8, {"model": model})
        assert err.value.code == ip.EXIT_FALLBACK and "max_restarts=1" in err.value.reason
        fail = restarts(tmp_path, "fail")
        assert len(fail) == 1 and fail[0]["facts"]["exit_code"] == 75
    finally:
        rs.close()


# ----- the launcher's bad input ---------------------------------------------------------------


@pytest.mark.parametrize(("args", "words"), [
    ([], "no training script given"),
    (["--nproc", "0", str(WORKER)], "must be between 1 and 1024"),
    (["--nproc", "x", str(WORKER)], "not a whole number"),
    (["--nproc", "2", "/nonexistent/train.py"], "training script not found"),
    (["--nproc", "2", "--spares", "-1", str(WORKER)], "between 0 and 1000"),
    (["--nproc", "2", "--master-port", "70000", str(WORKER)], "between 0 and 65535"),
])
def test_launcher_bad_input_is_a_clear_message(tmp_path: Path, args: list[str], words: str) -> None:
    cmd = [sys.executable, "-m", "preflight.runtime.launch", *(["--nproc", "2"] if not args else []), *args]
    p = subprocess.run(cmd, env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert words in p.stderr and "Traceback" not in p.stderr, p.stderr


# ----- real processes -------------------------------------------------------------------------


@pytest.mark.real
def test_sigkill_of_one_rank_survivors_re_form_and_finish(tmp_path: Path) -> None:
    """4 ranks, rank 2 SIGKILLed at step 10. Every survivor's collective fails on a closed
    connection, none waits for its timeout: a survivor not connected to rank 2 in the ring learns
    of the fault when a peer tears its group down (which needs the failed collective's traceback
    let go of), so no healthy rank is left blocked, let alone fenced."""
    rc, run, log = launch(tmp_path, 4, "--steps", "25", "--fault", "KILL", "--fault-rank", "2")
    assert rc == 0, log[-3000:]
    faults = re.findall(r"slot \d+ rank \d+: fault at step 10: [^\n]*", log)
    assert len(faults) == 3 and not [x for x in faults if "Timed out" in x], log[-3000:]
    ev = restarts(run)
    assert len(ev) == 1, log[-3000:]
    f = ev[0]["facts"]
    assert f["failed_ranks"] == [2] and f["generation"] == 1 and f["old_world_size"] == 4
    assert f["new_world_size"] == 3 and f["step"] == 10
    assert f["failed"][0]["cause"].startswith("killed by SIGKILL") and "OOM killer" in f["failed"][0]["cause"], f
    assert "rank 2" in ev[0]["summary"]
    curve = losses(run)
    assert sorted(curve) == list(range(1, 26)) and curve[25]["world"] == 3 and curve[10]["world"] == 4
    results = [json.loads((run / f"result-slot{s}.json").read_text()) for s in (0, 1, 3)]
    assert results[0]["params"] == results[1]["params"] == results[2]["params"] and results[0]["step"] == 25
    assert not (run / "result-slot2.json").exists()


@pytest.mark.real
def test_a_stopped_rank_is_fenced_and_the_group_re_forms(tmp_path: Path) -> None:
    rc, run, log = launch(tmp_path, 3, "--steps", "22", "--fault", "STOP", "--fault-rank", "1")
    assert rc == 0, log[-3000:]
    ev = restarts(run)
    assert len(ev) == 1, log[-3000:]
    failed = ev[0]["facts"]["failed"]
    assert [x["rank"] for x in failed] == [1] and failed[0]["fenced"] is True
    assert "stopped" in failed[0]["cause"]
    assert ip.proc_state(int(failed[0]["pid"])) is None  # the stopped process is gone
    assert "in-process restart fenced" in log
    assert losses(run)[22]["world"] == 2
    timing = [json.loads(x) for x in (run / "timing-slot0.jsonl").read_text().splitlines()]
    assert len(timing) == 1 and timing[0]["next_step"] > timing[0]["detected"]


@pytest.mark.real
def test_a_warm_spare_reproduces_the_uninterrupted_loss_curve(tmp_path: Path) -> None:
    rc, run, log = launch(tmp_path, 3, "--steps", "25", "--fault", "KILL", "--fault-rank", "2", "--fault-step",
                          "10", spares=1, name="spare")
    assert rc == 0, log[-3000:]
    rc0, base, log0 = launch(tmp_path, 3, "--steps", "25", name="base")
    assert rc0 == 0, log0[-3000:]
    ev = restarts(run)
    assert len(ev) == 1 and ev[0]["facts"]["spares_used"] == [3] and ev[0]["facts"]["new_world_size"] == 3
    got, want = losses(run), losses(base)
    assert sorted(got) == sorted(want) == list(range(1, 26))
    assert all(got[s]["world"] == 3 for s in got)
    assert max(abs(got[s]["loss"] - want[s]["loss"]) for s in want) <= 1e-6, (got, want)
    spare = json.loads((run / "result-slot3.json").read_text())
    assert spare["rank"] == 2 and spare["step"] == 25
    assert spare["params"] == json.loads((base / "result-slot2.json").read_text())["params"]


@pytest.mark.real
def test_over_the_limit_the_workers_take_the_fallback_and_the_launcher_restarts_from_the_checkpoint(
        tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    args = ["--steps", "20", "--fault", "KILL", "--fault-rank", "1", "--max-restarts", "0", "--ckpt-dir", str(ckpt)]
    rc, run, log = launch(tmp_path, 2, *args, name="spent")
    assert rc == ip.EXIT_FALLBACK, log[-3000:]  # no launcher restart left: 75 for the next level up
    fail = restarts(run, "fail")
    assert len(fail) == 1 and "max_restarts=0" in fail[0]["facts"]["reason"], log[-3000:]
    shutil.rmtree(ckpt)
    rc, run, log = launch(tmp_path, 2, *args, restarts=1, name="restarted")
    assert rc == 0, log[-3000:]
    assert "workers took the fallback (exit 75); restart 1 of 1" in log
    assert "starting at step 10" in log  # the restarted set resumed from the step-10 checkpoint
    assert max(losses(run)) == 20 and losses(run)[20]["world"] == 2


@pytest.mark.real
def test_a_rank_that_crashes_after_the_fallback_was_decided_still_counts_as_the_fallback(tmp_path: Path) -> None:
    """The survivor is told to take the fallback and aborts (SIGABRT) instead of exiting 75, as
    a destructor aborting in the broken group's teardown does: the launcher reads the decision
    from the store, counts the attempt as the fallback and restarts from the checkpoint."""
    ckpt = tmp_path / "ckpt"
    rc, run, log = launch(tmp_path, 2, "--steps", "20", "--fault", "KILL", "--fault-rank", "1", "--max-restarts", "0",
                          "--ckpt-dir", str(ckpt), "--abort-on-fallback", restarts=1, name="aborted")
    assert rc == 0, log[-3000:]
    said = re.search(r"generation 1 decided the fallback \(restart 1 is over max_restarts=0\), then slot 0 "
                     r"killed by SIGABRT[^\n]* on its way out: counted as the fallback \(exit 75\)", log)
    assert said, log[-3000:]
    assert "workers took the fallback (exit 75); restart 1 of 1" in log
    assert "starting at step 10" in log and max(losses(run)) == 20


@pytest.mark.parametrize(("env", "code"), [({"PREFLIGHT_INPROCESS": "1"}, 75), ({"TORCHELASTIC_RUN_ID": "j1"}, 75),
                                           ({}, -signal.SIGABRT)])
def test_a_worker_taking_the_fallback_exits_75_even_when_a_destructor_aborts_in_the_teardown(
        tmp_path: Path, env: dict[str, str], code: int) -> None:
    """A launched worker that raised the fallback ends with 75 before the interpreter's teardown
    (where a broken group's C++ destructor can abort); a process no launcher started (a test)
    keeps its normal ending, so the abort shows."""
    script = tmp_path / "w.py"
    script.write_text(
        "import os\nfrom preflight.runtime import inprocess as ip\n"
        "class Bomb:\n    def __del__(self):\n        os.abort()\n"
        "bomb = Bomb()\nprint('leaving', flush=False)\nraise ip.RestartFallback('restart 1 is over max_restarts=0')\n")
    base = {k: v for k, v in _env().items() if k not in ("PREFLIGHT_INPROCESS", "TORCHELASTIC_RUN_ID")}
    proc = subprocess.run([sys.executable, str(script)], env={**base, "PYTHONUNBUFFERED": "", **env},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == code, proc.stderr
    if code == ip.EXIT_FALLBACK:
        assert proc.stdout == "leaving\n"  # the buffered output was flushed before the hard exit


@pytest.mark.real
def test_under_torchrun_a_killed_rank_falls_back_to_torchruns_restart_from_the_checkpoint(tmp_path: Path) -> None:
    need(shutil.which("torchrun") is not None or (Path(sys.executable).parent / "torchrun").exists(),
         "torchrun not installed")
    run, ckpt = tmp_path / "run", tmp_path / "ckpt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "--max-restarts", "1", str(WORKER), "--run-dir", str(run), "--steps", "20", "--fault", "KILL",
           "--fault-rank", "1", "--ckpt-dir", str(ckpt)]
    rc = _run(cmd, tmp_path / "torchrun.log")
    text = (tmp_path / "torchrun.log").read_text(errors="replace")
    assert rc == 0, text[-3000:]
    assert "starting at step 10" in text, text[-3000:]  # torchrun's restart resumed from the checkpoint
    assert max(losses(run)) == 20
    assert not restarts(run)  # no in-process re-form: torchrun restarts every worker when one dies


@pytest.mark.real
def test_a_second_fault_during_recovery_moves_to_the_next_generation(tmp_path: Path) -> None:
    """Rank 2 is SIGKILLed at step 10; while the survivors re-form, rank 1 dies too (before its
    process group joins generation 1): rank 0's re-form fails within the timeout, it agrees on
    generation 2 alone and finishes, never hanging. The two faults are folded into one restart
    (restart 1, the first that held; two re-forms tried), naming both ranks by their numbers
    in the world before it."""
    rc, run, log = launch(tmp_path, 3, "--steps", "16", "--fault", "KILL", "--fault-rank", "2",
                          "--die-in-recovery-slot", "1", timeout=120)
    assert rc == 0, log[-3000:]
    ev = restarts(run)
    assert len(ev) == 1, log[-3000:]
    f = ev[0]["facts"]
    assert (f["generation"], f["restarts"], f["failed_ranks"], f["new_world_size"]) == (2, 1, [2, 1], 1), f
    assert f["old_world_size"] == 3 and f["attempts"] == 2
    assert [x["generation"] for x in f["failed"]] == [0, 1]  # the generation each rank failed in
    lines = [x for x in log.splitlines() if x.startswith("preflight[rank 0]: in-process restart")]
    assert len(lines) == 1 and "restart 1: rank 2 on" in lines[0] and "; rank 1 on" in lines[0], lines
    assert "world 3 -> 1 (no spare)" in lines[0], lines
    assert losses(run)[16]["world"] == 1 and losses(run)[10]["world"] == 3


@pytest.mark.real
def test_the_launcher_forwards_sigterm_and_does_not_restart_after_it(tmp_path: Path) -> None:
    """A preemption's SIGTERM reaches every worker; they exit 0 on it and the launcher exits 0
    with no restart, though --max-restarts allows one."""
    script = tmp_path / "waits.py"
    script.write_text(
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0 if os.environ['PREFLIGHT_SLOT'] else 3))\n"
        "open(sys.argv[1] + os.environ['PREFLIGHT_SLOT'], 'w').close()\n"
        "time.sleep(60)\n"
        "sys.exit(5)\n")
    with open(tmp_path / "launch.log", "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "preflight.runtime.launch", "--nproc", "2", "--max-restarts",
                                 "1", str(script), str(tmp_path / "ready")], env=_env(), cwd=ROOT, stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready{s}").exists() for s in (0, 1)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all((tmp_path / f"ready{s}").exists() for s in (0, 1)), (tmp_path / "launch.log").read_text()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    text = (tmp_path / "launch.log").read_text(errors="replace")
    assert rc == 0, text
    assert "restart" not in text


def _three_and_a_spare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> ip.InProcessRestart:
    """The leader (slot 0) of a 3-rank launch with one spare, over an in-memory store: slots 0
    and 1 joined generation 1, slot 2's exit (SIGKILL) is recorded, spare slot 3 waits."""
    import torch.distributed as dist

    monkeypatch.setenv(ip.ENV_INPROCESS, "1")
    rs = ip.InProcessRestart(tmp_path, store=dist.HashStore(), join_timeout_s=1.0, **kw)
    rs.slot, rs.rank, rs.nproc, rs.nspares, rs.members = 0, 0, 3, 1, [0, 1, 2]
    st = rs._store
    me = {"host": ip._host(), "pid": os.getpid(), "start_ticks": (ip.proc_state(os.getpid()) or ("", 0))[1]}
    for slot in (0, 1, 3):
        st.set(f"{rs.ns}/member/{slot}", json.dumps(dict(me, slot=slot)))
    st.set(f"{rs.ns}/member/2", json.dumps({"slot": 2, "host": "elsewhere", "pid": 1}))
    st.set(f"{rs.ns}/spare/3", "1")
    for slot in (0, 1):
        st.set(f"{rs.ns}/g1/join/{slot}", json.dumps({"step": 10 + slot, "cause": "RuntimeError: reset"}))
    st.set(ip.exit_key(rs.ns, 2), "-9")
    return rs


def test_the_leader_fills_the_failed_rank_with_a_spare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _three_and_a_spare(tmp_path, monkeypatch)._decide(1)
    assert plan["decision"] == "go" and plan["members"] == [0, 1, 3] and plan["spares_used"] == [3]
    assert plan["failed"][0]["rank"] == 2 and plan["failed"][0]["cause"].startswith("killed by SIGKILL")
    assert plan["failed"][0]["fenced"] is False  # on another host: not ours to kill
    assert (plan["source"], plan["step"]) == (1, 11)  # the survivor that applied the most steps


def test_a_rank_over_max_faults_is_not_refilled_and_the_world_shrinks(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _three_and_a_spare(tmp_path, monkeypatch, max_faults_per_rank=0)._decide(1)
    assert plan["decision"] == "go" and plan["members"] == [0, 1] and plan["spares_used"] == []
    plan = _three_and_a_spare(tmp_path / "b", monkeypatch, max_faults_per_rank=0, min_world_size=3)._decide(1)
    assert plan["decision"] == "fallback"
    assert "under min_world_size=3" in plan["reason"] and "rank 2 over max_faults_per_rank=0" in plan["reason"]
    assert restarts(tmp_path / "b", "fail")[0]["facts"]["failed_ranks"] == [2]


def test_a_leader_gone_before_its_plan_costs_one_generation_not_a_hang(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.delenv("MASTER_ADDR", raising=False)
    rs = _one_rank(tmp_path, timeout_s=0.2, join_timeout_s=0.2)
    assert rs.start()
    rs._store.add(f"{rs.ns}/g1/leader", 1)  # another process won generation 1 and died
    t0 = time.monotonic()
    try:
        step = rs.recover(RuntimeError("Connection reset by peer"), 4, {"m": torch.nn.Linear(1, 1)})
    finally:
        rs.close()
    assert (step, rs.generation) == (4, 2)
    assert time.monotonic() - t0 < 30


def test_a_watchdog_abort_is_the_cause_and_the_start_of_the_recovery(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.delenv("MASTER_ADDR", raising=False)
    rs = _one_rank(tmp_path)
    assert rs.start()
    try:
        rs.abort("watchdog: a peer stopped")  # gloo: marks the detection, aborts nothing
        time.sleep(0.2)
        exc = RuntimeError("Timed out waiting 3000ms for recv operation to complete")
        assert rs.is_fault(exc)
        assert rs.recover(exc, 3, {"m": torch.nn.Linear(1, 1)}) == 3
    finally:
        rs.close()
    f = restarts(tmp_path)[0]["facts"]
    assert f["cause"].startswith("watchdog: a peer stopped; then RuntimeError: Timed out")
    assert f["detect_to_reform_s"] >= 0.2  # counted from the watchdog's alarm, not from the exception
    assert rs._aborted_at() is None  # spent by this recovery


def test_the_launcher_takes_a_usual_master_port() -> None:
    from preflight.runtime import launch

    assert launch.parse_args(["--nproc", "2", "--master-port", "29500", str(WORKER)]).master_port == 29500


# ----- a dead rank seen when its process ends -------------------------------------------------


def _start(tmp: Path, nproc: int, *args: str, spares: int = 0, name: str = "run") -> tuple[subprocess.Popen[bytes], Path, Path]:
    run, log = tmp / name, tmp / f"{name}.log"
    cmd = [sys.executable, "-m", "preflight.runtime.launch", "--nproc", str(nproc), "--spares", str(spares),
           str(WORKER), "--run-dir", str(run), *args]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, env=_env(), cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, run, log


def _wait_for(what: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if what():
            return True
        time.sleep(0.02)
    return bool(what())


def _steps_done(run: Path) -> int:
    try:
        return len((run / "losses.jsonl").read_text().splitlines())
    except OSError:
        return 0


def _finish(proc: subprocess.Popen[bytes], log: Path, timeout: float = 120) -> tuple[int | None, str]:
    try:
        rc: int | None = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        rc = None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return rc, log.read_text(errors="replace")


def _kill_slot_at_random(run: Path, slot: int, after_steps: int, rng: Any) -> float:
    """SIGKILL one worker from outside once `after_steps` steps are done, at a random moment of
    a 50 ms step; the wall time of the kill."""
    assert _wait_for(lambda: (run / f"pid-slot{slot}").exists() and _steps_done(run) >= after_steps, 90), \
        "the job did not start training"
    pid = int((run / f"pid-slot{slot}").read_text())
    time.sleep(rng.uniform(0.0, 0.05))
    t = time.time()
    os.kill(pid, signal.SIGKILL)
    return t


@pytest.mark.real
def test_an_outside_sigkill_is_seen_at_once_under_a_long_restart_timeout(tmp_path: Path) -> None:
    """4 ranks with a 60 s process-group timeout: rank 2 SIGKILLed from outside at a random
    moment of a step. The survivors learn of the death from the launcher's exit record (not
    from a collective's timeout), re-form with 3 and go on within seconds; the restart's cause
    names rank 2 and SIGKILL, and rank 0 prints one console line saying so."""
    import random

    proc, run, log = _start(tmp_path, 4, "--steps", "400", "--timeout", "60")
    killed_at = _kill_slot_at_random(run, 2, 5, random.Random())
    rc, text = _finish(proc, log)
    assert rc == 0, text[-3000:]
    ev = restarts(run)
    assert len(ev) == 1, text[-3000:]
    f = ev[0]["facts"]
    assert f["failed_ranks"] == [2] and (f["old_world_size"], f["new_world_size"]) == (4, 3), f
    assert f["cause"].startswith("rank 2 (slot 2") and "died: killed by SIGKILL" in f["cause"], f
    assert "Timed out" not in f["cause"], f
    again = min(r["time"] for r in losses(run).values() if r["gen"] >= 1)
    assert again - killed_at < 20, f"training again {again - killed_at:.2f} s after the kill"
    assert f["detect_to_reform_s"] < 15, f
    lines = [x for x in text.splitlines() if "in-process restart" in x and x.startswith("preflight[rank 0]:")]
    assert len(lines) == 1, text[-3000:]
    assert re.search(r"in-process restart 1: rank 2 on \S+ killed by SIGKILL; world 4 -> 3 \(no spare\); "
                     r"down \d+\.\d\d s; redoing step \d+", lines[0]), lines


@pytest.mark.real
def test_two_outside_kills_give_restart_events_numbered_without_gaps(tmp_path: Path) -> None:
    """Rank 2 SIGKILLed from outside, then, once the job trains again, rank 1: two restarts,
    events 1 and 2, each naming its own rank, each with its console line."""
    import random

    rng = random.Random()
    proc, run, log = _start(tmp_path, 4, "--steps", "400", "--timeout", "60")
    _kill_slot_at_random(run, 2, 5, rng)
    assert _wait_for(lambda: any(r["gen"] >= 1 for r in losses(run).values()) if _steps_done(run) else False, 60)
    time.sleep(rng.uniform(0.0, 0.05))
    os.kill(int((run / "pid-slot1").read_text()), signal.SIGKILL)
    rc, text = _finish(proc, log)
    assert rc == 0, text[-3000:]
    ev = sorted(restarts(run), key=lambda e: e["facts"]["restarts"])
    assert [e["facts"]["restarts"] for e in ev] == [1, 2], text[-3000:]
    assert [e["facts"]["failed_ranks"] for e in ev] == [[2], [1]]
    assert [(e["facts"]["old_world_size"], e["facts"]["new_world_size"]) for e in ev] == [(4, 3), (3, 2)]
    assert all("SIGKILL" in e["facts"]["cause"] for e in ev), [e["facts"]["cause"] for e in ev]
    lines = [x for x in text.splitlines() if "in-process restart" in x and x.startswith("preflight[rank 0]:")]
    assert [re.search(r"restart (\d+): rank (\d+)", x).groups() for x in lines] == [("1", "2"), ("2", "1")], lines  # type: ignore[union-attr]


def test_shutting_the_groups_connections_ends_a_blocked_receive_at_once() -> None:
    """A thread blocked in a receive on one of the named connections returns at once; a
    listening socket and a connection to the kept port (the store's) stay as they were."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    store = socket.create_server(("127.0.0.1", 0))
    group = socket.create_connection(listener.getsockname())
    peer, _ = listener.accept()
    kept = socket.create_connection(store.getsockname())
    kept_peer, _ = store.accept()
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(group.recv(10)), daemon=True)
    try:
        reader.start()
        time.sleep(0.1)
        assert reader.is_alive()  # blocked: nothing was sent
        inodes = {os.fstat(s.fileno()).st_ino for s in (listener, group, kept)}
        t0 = time.monotonic()
        assert ip.shut_connections(inodes, keep_port=store.getsockname()[1]) == 1
        reader.join(10)
        assert not reader.is_alive() and got == [b""] and time.monotonic() - t0 < 5
        assert peer.recv(10) == b""  # the other end sees the connection closed
        kept_peer.sendall(b"x")
        assert kept.recv(10) == b"x"  # the store's connection still works
        listener.settimeout(5)
        extra = socket.create_connection(listener.getsockname())  # still listening
        listener.accept()[0].close()
        extra.close()
        assert ip.shut_connections(set()) == 0 and ip.shut_connections({1}) == 0
    finally:
        for s in (listener, store, group, peer, kept, kept_peer):
            s.close()
