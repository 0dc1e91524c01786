"""The downtime in triage's reports: `preflight triage --run-dir` (console, --json key `downtime`,
triage.md) says each interruption's lost time, GPU-hours and money; an attempt that never
trained again runs to the collection (a bundle) or the triage; the history counts an incident
once however often its run is triaged. One real torchrun job: a rank SIGKILLed, torchrun
restarts the job, and triage shows what the restart cost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from preflight.runtime import downtime as dt
from preflight.runtime.events import read_events
from tests.conftest import ROOT, need
from tests.runtime.test_downtime import T0, Run, _hang_then_restart

EXAMPLE = ROOT / "examples" / "train_resilient.py"


def _cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("PREFLIGHT_CONFIG", dt.PRICE_ENV, "FORCE_COLOR",
                                                             "SLURM_JOB_ID")}
    base.setdefault("PREFLIGHT_HISTORY", "off")
    return subprocess.run([sys.executable, "-m", "preflight.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**base, "PYTHONPATH": str(ROOT), **(env or {})})


def _triage_json(run: Path, env: dict[str, str] | None = None) -> dict:
    p = _cli("triage", "--run-dir", str(run), "--no-node-checks", "--json", env=env)
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    return json.loads(p.stdout)


def test_a_recovered_hang_is_reported_with_its_time_gpu_hours_and_money(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    _hang_then_restart(run)  # 4 ranks, step 120 began at t=60, resumed at step 100 at t=75
    run.clean(130, 4, 200)
    doc = _triage_json(run.root, env={dt.PRICE_ENV: "2.5"})
    [n] = doc["downtime"]["incidents"]
    # lost: from t=60 to when training passed step 120 again (the clean end at t=130 had step 200:
    # at that pace, step 120 ended at t=86.55): the gap and the redone steps
    assert (n["cause"], n["ranks"], n["nodes"], n["lost_s"], n["until"]) == ("hang", [2], ["n3"], 26.55,
                                                                           "training again")
    assert (n["from_step"], n["resumed_step"], n["steps_redone"], n["world_size"]) == (120, 100, 20, 4)
    assert n["gpu_hours"] == pytest.approx(4 * 26.55 / 3600, abs=1e-5) and n["cost"] == pytest.approx(0.0737, abs=1e-4)
    assert doc["downtime"]["total"]["by_node"]["n3"]["incidents"] == 1
    [res] = [r for r in doc["results"] if r["check"] == "runtime.downtime"]
    assert res["node"] == "n3" and res["status"] == "warn"
    assert res["summary"].startswith("lost 26.6 s (0.0295 GPU-h, $0.07) to a hang of rank 2 on n3: last good step 120")
    p = _cli("triage", "--run-dir", str(run.root), "--no-node-checks", "--out", str(tmp_path / "out"),
             env={dt.PRICE_ENV: "2.5"})
    assert "downtime: 1 incident: lost 26.6 s, 0.0295 GPU-h, $0.07" in p.stdout, p.stdout
    md = (tmp_path / "out" / "triage.md").read_text()
    assert "## Downtime" in md and "| hang | 2 | n3 | step 120 at " in md and "| training again at step 100 | 20 |" in md


def test_a_run_never_interrupted_has_no_downtime(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    run.start(0, 2, 0)
    run.clean(30, 2, 60)
    doc = _triage_json(run.root)
    assert doc["downtime"] == {"incidents": [], "total": dt.totals([])} and doc["category"] == "none"


def test_a_run_that_never_trained_again_is_counted_to_the_collection(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    run.start(time.time() - T0 - 100, 2, 0)  # started 100 s ago
    run.crash(1, time.time() - T0 - 40, 30, "ValueError", "bad batch")  # crashed 40 s ago, not restarted
    bundle = tmp_path / "job.tar.gz"
    p = _cli("collect", "--run-dir", str(run.root), "--no-node-checks", "-o", str(bundle))
    assert p.returncode == 0, p.stderr
    doc = json.loads(_cli("triage", str(bundle), "--json").stdout)
    [n] = doc["downtime"]["incidents"]
    assert (n["cause"], n["ranks"], n["until"], n["open"]) == ("crash", [1], "collect time", True)
    assert 35 <= n["lost_s"] <= 100, n
    live = _triage_json(run.root)["downtime"]["incidents"][0]
    assert live["until"] == "triage time" and live["lost_s"] >= n["lost_s"]


def test_triaging_a_run_twice_counts_its_downtime_once_in_history(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    _hang_then_restart(run)
    run.clean(130, 4, 200)
    url = f"sqlite:///{tmp_path / 'h.db'}"
    for _ in range(2):
        _triage_json(run.root, env={"PREFLIGHT_HISTORY": url})
    doc = json.loads(_cli("history", "--history", url, "--since", "all", "--json").stdout)["downtime"]
    assert doc["incidents"] == 1 and doc["records"] == 2 and doc["total"]["by_cause"]["hang"]["lost_s"] == 26.55


def _torch() -> bool:
    try:
        import torch.distributed as dist

        return dist.is_available() and dist.is_gloo_available()
    except ImportError:
        return False


@pytest.mark.real
def test_torchrun_restart_after_a_sigkill_shows_its_downtime_in_triage(tmp_path: Path) -> None:
    """torchrun, 2 gloo ranks, `--max-restarts 1`: rank 1 SIGKILLed (as the OOM killer would) after
    the step-20 checkpoint; torchrun restarts both, they resume at step 20 and finish. Triage of the
    run directory alone: one incident, a kill by a signal of rank 1, from the last good moment to
    the restarted ranks' resume, with 2 GPUs' worth of GPU-hours."""
    need(_torch(), "torch with gloo")
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "SLURM_", "NCCL_", "RANK",
                                                                    "WORLD_SIZE", "MASTER_"))}
    env.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
                "CUDA_VISIBLE_DEVICES": ""})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "--max-restarts", "1", "--monitor-interval", "0.1", str(EXAMPLE), "--run-dir", str(run),
           "--steps", "60", "--save-every", "20", "--step-delay", "0.05", "--step-timeout", "10"]
    with open(tmp_path / "torchrun.log", "wb") as log:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    killed_at = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and killed_at is None:
            evs = list(read_events(run)) if run.is_dir() else []
            saved = [e for e in evs if e["check"] == "runtime.checkpoint" and e.get("step") == 20
                     and "saved" in e["summary"]]
            pid = next((e["facts"].get("pid") for e in evs if e["check"] == "runtime.train" and e["rank"] == 1
                        and "start_step" in e["facts"]), None)
            if saved and pid:
                time.sleep(0.3)  # a few steps past the checkpoint
                os.kill(int(pid), signal.SIGKILL)
                killed_at = time.time()
            time.sleep(0.05)
        rc = proc.wait(timeout=150)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    text = (tmp_path / "torchrun.log").read_text(errors="replace")
    assert killed_at is not None and rc == 0, text[-3000:]
    doc = _triage_json(run)
    why = json.dumps(doc["downtime"], indent=1) + "\n" + text[-2000:]
    [n] = doc["downtime"]["incidents"]
    assert (n["cause"], n["ranks"], n["until"], n["resumed_step"], n["world_size"]) == (
        "killed", [1], "training again", 20, 2), why
    resumed = min(e["time"] for e in read_events(run) if e["check"] == "runtime.train"
                  and e["facts"].get("restart") == 1 and "start_step" in e["facts"])
    assert n["last_good"] <= killed_at + 5 and n["training_again_at"] == pytest.approx(
        max(e["time"] for e in read_events(run) if e["check"] == "runtime.train" and e["facts"].get("restart") == 1
            and "start_step" in e["facts"]), abs=1e-3), why
    assert n["signal"] == "SIGKILL" and n["redo_s"] is not None, why
    assert 0 < n["lost_s"] <= n["passed_failed_step_at"] - killed_at + 10 and resumed <= n["passed_failed_step_at"], why
    assert n["gpu_hours"] == pytest.approx(2 * n["lost_s"] / 3600, abs=1e-5) and n["from_step"] >= 20, why
