"""The README's training program, extracted from README.md and run as written under torchrun.

Faults come from outside the program, as on a cluster: a signal to one rank (preemption), and
a `sitecustomize` module on the ranks' PYTHONPATH that makes one rank raise in its optimizer
step (a crash) or compute 1.67x slower (a straggler, as a throttled GPU would). The program's
text is never changed. What the job says on the console (one `preflight[rank R]:` line per
start, resume, restart and preemption) is read from torchrun's output.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from preflight.runtime.events import read_events

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.real

SITECUSTOMIZE = '''
import os
if os.environ.get("RANK") == os.environ.get("INJECT_RANK"):
    import time
    import torch
    _mode = os.environ["INJECT_MODE"]
    _at = int(os.environ.get("INJECT_AT", "0"))
    _calls = [0]
    _t0 = [0.0]
    if _mode == "crash":
        _step = torch.optim.SGD.step
        def step(self, *a, **k):
            _calls[0] += 1
            if _calls[0] == _at:
                raise RuntimeError("injected fault in the optimizer step")
            return _step(self, *a, **k)
        torch.optim.SGD.step = step
    elif _mode == "slow":  # this rank's compute takes FACTOR x as long: a throttled device
        _factor = float(os.environ["INJECT_FACTOR"])
        _randn = torch.randn  # the program draws its batch first: the step's compute starts here
        def randn(*a, **k):
            _t0[0] = time.perf_counter()
            return _randn(*a, **k)
        torch.randn = randn
        _backward = torch.Tensor.backward
        def backward(self, *a, **k):
            out = _backward(self, *a, **k)
            time.sleep((_factor - 1.0) * (time.perf_counter() - _t0[0]))
            return out
        torch.Tensor.backward = backward
'''


def readme_program() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Runtime resilience layer"):]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README's runtime section has no python block"
    return match.group(1)


@pytest.fixture()
def program(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(readme_program())
    (tmp_path / "inject").mkdir()
    (tmp_path / "inject" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return path


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "SLURM_", "NCCL_"))}
    env.update({"PYTHONPATH": f"{tmp_path / 'inject'}:{ROOT}", "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
                "CUDA_VISIBLE_DEVICES": "", **extra})
    return env


def _torchrun(program: Path, run: Path, steps: int, nproc: int = 2, max_restarts: int = 0,
              **extra: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           "--max-restarts", str(max_restarts), str(program), str(run), str(steps)]
    log = open(program.parent / f"torchrun-{run.name}.log", "ab")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(cmd, env=_env(program.parent, **extra), cwd=program.parent, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def _wait(proc: subprocess.Popen[bytes], timeout: float = 300) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        raise


def _log(program: Path, run: Path) -> str:
    return (program.parent / f"torchrun-{run.name}.log").read_text(errors="replace")[-3000:]


def _said(program: Path, run: Path, since: int = 0) -> list[str]:
    """The job's console lines (`preflight[rank R]: ...`) in torchrun's output, from byte `since`."""
    text = (program.parent / f"torchrun-{run.name}.log").read_bytes()[since:].decode(errors="replace")
    return [line for line in text.splitlines() if line.startswith("preflight[rank ")]


def _log_size(program: Path, run: Path) -> int:
    return (program.parent / f"torchrun-{run.name}.log").stat().st_size


def _one(lines: list[str], pattern: str) -> re.Match[str]:
    """The one line matching `pattern` (a regex, from the line's start): exactly one, said by rank 0."""
    found = [m for m in (re.match(pattern, line) for line in lines) if m]
    assert len(found) == 1, f"{len(found)} lines match {pattern!r}:\n" + "\n".join(lines)
    return found[0]


START = r"preflight\[rank 0\]: training {run} from step 0, 2 ranks, checkpoint every 50 steps, step timeout 60 s, " \
        r"in-process restart off$"


def _triage(run: Path) -> tuple[int, dict]:
    p = subprocess.run([str(Path(sys.executable).parent / "preflight"), "triage", "--run-dir", str(run), "--json"],
                       capture_output=True, text=True, timeout=120, cwd=run.parent,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "PREFLIGHT_HISTORY": "off"})
    assert p.stdout.strip(), p.stderr[-2000:]
    return p.returncode, json.loads(p.stdout)


def _final(run: Path) -> dict:
    import torch

    return torch.load(run / "final.pt")


def test_the_program_is_complete_and_a_healthy_run_triages_as_clean(program: Path, tmp_path: Path) -> None:
    run = tmp_path / "healthy"
    proc = _torchrun(program, run, 60)
    assert _wait(proc) == 0, _log(program, run)
    assert (run / "final.pt").exists()
    exits = [e for e in read_events(run) if e["check"] == "runtime.exit"]
    assert sorted((e["facts"]["rank"], e["facts"]["how"]) for e in exits) == [(0, "clean"), (1, "clean")]
    code, doc = _triage(run)
    assert code == 0 and doc["category"] == "none", doc
    said = _said(program, run)
    _one(said, START.format(run=re.escape(str(run))))  # the start, once, and nothing else happened
    assert not [line for line in said if re.search(r"resumed|restart \d|preempted|stop agreed", line)], said


def test_preemption_saves_writes_the_marker_and_the_requeued_run_resumes_bitwise(program: Path,
                                                                                 tmp_path: Path) -> None:
    """SIGUSR1 to rank 1 mid-run: every rank saves the same step, rank 0 writes the marker, torchrun
    exits 0 (nothing restarted in place). Run again (the requeue): it resumes at the marker's step
    with the saved state, removes the marker and ends with the parameters of an uninterrupted run."""
    steps = 400
    whole = tmp_path / "whole"
    assert _wait(_torchrun(program, whole, steps)) == 0, _log(program, whole)
    run = tmp_path / "preempted"
    proc = _torchrun(program, run, steps)
    pid = _pid_of(run, rank=1, proc=proc)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and not (run / "checkpoints" / "step-00000050").exists():
        time.sleep(0.05)
    os.kill(pid, signal.SIGUSR1)
    assert _wait(proc) == 0, _log(program, run)
    marker = json.loads((run / "preempted").read_text())
    said = _said(program, run)
    _one(said, START.format(run=re.escape(str(run))))
    _one(said, rf"preflight\[rank 0\]: preempted: SIGUSR1 on rank 1; all 2 ranks saved step {marker['step']}, "
               rf"exiting 0 for the requeue \(marker {re.escape(str(run / 'preempted'))}\)$")
    assert not [line for line in said if re.search(r"stop agreed|resumed|restart \d", line)], said
    assert 50 <= marker["step"] < steps and marker["signal"] == "SIGUSR1" and marker["rank"] == 1
    saved = sorted(p.name for p in (run / "checkpoints").glob("step-*"))
    assert f"step-{marker['step']:08d}" in saved
    assert not (run / "final.pt").exists()
    exits = [e["facts"] for e in read_events(run) if e["check"] == "runtime.exit"]
    assert sorted((f["rank"], f["how"], f["exit_code"]) for f in exits) == [(0, "preempted", 0), (1, "preempted", 0)]

    before = _log_size(program, run)
    assert _wait(_torchrun(program, run, steps)) == 0, _log(program, run)
    assert not (run / "preempted").exists()
    said = _said(program, run, since=before)  # the requeued run: a resume, said once
    _one(said, rf"preflight\[rank 0\]: resumed {re.escape(str(run))} at step {marker['step']} \(checkpoint\), 2 ranks, "
               r"checkpoint every 50 steps, step timeout 60 s, in-process restart off; the previous attempt was "
               r"preempted \(SIGUSR1 on rank 1\), down \d+\.\d s so far$")
    assert len(said) == 1, said
    starts = [e["facts"] for e in read_events(run) if e["check"] == "runtime.train" and "resumed" in e["facts"]]
    assert sorted(f["start_step"] for f in starts if f["resumed"]) == [marker["step"]] * 2
    lost = [e["facts"] for e in read_events(run) if e["check"] == "runtime.downtime"]
    assert len(lost) == 1 and lost[0]["cause"] == "preempted" and lost[0]["resumed_step"] == marker["step"], lost
    assert lost[0]["lost_s"] > 0 and lost[0]["gpu_hours"] == pytest.approx(2 * lost[0]["lost_s"] / 3600, rel=1e-3)
    a, b = _final(whole), _final(run)
    assert a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)


def test_a_crash_is_attributed_to_its_rank_without_a_launcher_log(program: Path, tmp_path: Path) -> None:
    run = tmp_path / "crash"
    proc = _torchrun(program, run, 200, INJECT_RANK="1", INJECT_MODE="crash", INJECT_AT="30")
    assert _wait(proc) != 0
    assert (run / "crash-rank1.json").exists()
    code, doc = _triage(run)
    assert code == 1, doc
    assert doc["category"] == "software crash", doc
    assert [c["ranks"] for c in doc["culprits"]] == [[1]], doc
    assert "injected fault" in json.dumps(doc["evidence"])


def test_a_rank_1_67x_slower_is_reported_as_a_straggler(program: Path, tmp_path: Path) -> None:
    """The slow rank must score under 0.8 in two 50-step intervals in a row. These steps are a
    few ms of CPU, so under two CPU hogs the scheduler's noise lifts about one interval in
    four over 0.8 (measured: 5 intervals missed the report in 1 of 6 runs); 16 intervals leave
    a miss about one run in a thousand, while no healthy rank scored under 0.89 in 50 intervals."""
    run = tmp_path / "slow"
    proc = _torchrun(program, run, 800, nproc=3, INJECT_RANK="2", INJECT_MODE="slow", INJECT_FACTOR="1.67")
    assert _wait(proc) == 0, _log(program, run)
    flagged = [e["facts"] for e in read_events(run) if e["check"] == "runtime.straggler" and e["status"] != "pass"]
    assert flagged, "no straggler reported"
    ranks = {r for f in flagged for r in f["stragglers"]}
    assert ranks == {2}, flagged


def _pid_of(run: Path, rank: int, proc: subprocess.Popen[bytes]) -> int:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        for e in read_events(run):
            if e["check"] == "runtime.train" and e["facts"].get("pid") and f"rank {rank} " in e["summary"]:
                return int(e["facts"]["pid"])
        time.sleep(0.05)
    raise AssertionError(f"rank {rank} never started")


def test_a_killed_worker_restarted_by_torchrun_is_said_once_as_restart_1(program: Path, tmp_path: Path) -> None:
    """SIGKILL of rank 1 after the checkpoint of step 50, under --max-restarts 2 as the README runs
    it: torchrun restarts both workers, and the job says so once: "restart 1: resumed ... at step
    S", with the attempt that ended and the time down so far; the start is said once too."""
    run = tmp_path / "killed"
    proc = _torchrun(program, run, 120, max_restarts=2)
    pid = _pid_of(run, rank=1, proc=proc)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and not (run / "checkpoints" / "step-00000050").exists():
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    assert _wait(proc) == 0, _log(program, run)
    assert (run / "final.pt").exists()
    said = _said(program, run)
    _one(said, START.format(run=re.escape(str(run))))
    m = _one(said, rf"preflight\[rank 0\]: restart 1: resumed {re.escape(str(run))} at step (\d+) \(checkpoint\), "
                   r"2 ranks; the previous attempt ended in (.*), down \d+\.\d s so far")
    starts = {e["facts"]["start_step"] for e in read_events(run) if e["check"] == "runtime.train"
              and e["facts"].get("restart") == 1}
    assert starts == {int(m.group(1))} and int(m.group(1)) >= 50, (starts, said)
    assert not [line for line in said if re.search(r"restart [02-9]|preempted|stop agreed", line)], said
    assert len(said) == 2, said


def test_sigterm_to_torchrun_is_one_preemption_line_though_every_rank_caught_it(program: Path,
                                                                                  tmp_path: Path) -> None:
    """SIGTERM to the agent (what scancel --signal=TERM does): torchrun forwards it to every worker,
    each catches it, and the job says one line, from rank 0: the signal, the step saved, the exit."""
    run = tmp_path / "term"
    proc = _torchrun(program, run, 2000)
    _pid_of(run, rank=1, proc=proc)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and not (run / "checkpoints" / "step-00000050").exists():
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGTERM)
    _wait(proc)  # torchrun's own exit code after a signal is not the job's word; the marker is
    marker = json.loads((run / "preempted").read_text())
    assert marker["signal"] == "SIGTERM" and marker["rank"] == 0, marker
    said = _said(program, run)
    _one(said, rf"preflight\[rank 0\]: preempted: SIGTERM on rank 0; all 2 ranks saved step {marker['step']}, "
               rf"exiting 0 for the requeue \(marker {re.escape(str(run / 'preempted'))}\)$")
    assert len(said) == 2, said  # the start and the preemption
