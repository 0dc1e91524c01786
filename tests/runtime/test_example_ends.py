"""The example's ends: a torchrun restart after a preemption does not train, and bad options
are a clear error, not a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from preflight.runtime.events import read_events

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
