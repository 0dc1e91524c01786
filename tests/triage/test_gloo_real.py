"""Real 4-rank gloo jobs with one faulty rank; `preflight triage --run-dir` must name it.

rank 2 skips one all_reduce (and blocks elsewhere), or SIGSTOPs itself before it. The other
ranks' runtime Watchdog fires after 3 s and writes hang records and flight-recorder dumps;
triage must name rank 2, its host, the collective and its sequence number within 30 s.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from preflight.parsers import flight_recorder
from tests.conftest import ROOT, need
from tests.runtime._wd_ranks import kill_all, launch, logs, wait_all

pytestmark = pytest.mark.real

FAULT_STEP = 10
PREFLIGHT = [sys.executable, "-c", "from preflight.cli import main; main()"]


def _torch() -> bool:
    try:
        import torch.distributed as dist

        return dist.is_available() and dist.is_gloo_available()
    except ImportError:
        return False


def _triage(run: Path) -> tuple[dict, float]:
    start = time.monotonic()
    p = subprocess.run([*PREFLIGHT, "triage", "--run-dir", str(run), "--json"], capture_output=True, text=True,
                       timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    took = time.monotonic() - start
    assert p.returncode == 1, p.stderr[-2000:]
    return json.loads(p.stdout), took


def _check_named(doc: dict, took: float) -> None:
    host = socket.gethostname().split(".")[0]
    assert doc["category"] == "communication hang", doc["triage"]["summary"]
    assert doc["culprits"] == [{"node": host, "ranks": [2]}], doc["evidence"]
    assert doc["triage"]["collective"] == {"op": "all_reduce", "seq": FAULT_STEP + 1}
    assert took < 30, took


def test_rank_skips_an_all_reduce(tmp_path: Path) -> None:
    need(_torch(), "torch with gloo")
    run = tmp_path / "run"
    procs = launch("tests.triage._job:rank_main", 4, ["--run-dir", str(run), "--fault", "skip",
                                                      "--fault-step", str(FAULT_STEP)], run)
    try:
        rcs = wait_all(procs, timeout=120)
    finally:
        kill_all(procs)
    assert rcs == [75, 75, 75, 75], logs(run)
    doc, took = _triage(run)
    _check_named(doc, took)
    assert any("rank 2 never entered all_reduce seq 11: its last was seq 10" in e for e in doc["evidence"])
    # the real dumps, both forms: the pickle holds the same entries as the JSON (gloo quirks included)
    for rank in range(4):
        js = flight_recorder.parse_fr_dump((run / f"fr-rank{rank}.json").read_bytes(), f"fr-rank{rank}.json")
        pk = flight_recorder.parse_fr_dump((run / f"nccl_trace_rank_{rank}").read_bytes(), f"nccl_trace_rank_{rank}")
        assert not js.problem and not pk.problem and js.rank == pk.rank == rank
        assert [(e.seq, e.op, e.retired) for e in js.entries] == [(e.seq, e.op, e.retired) for e in pk.entries]
        assert js.world() == pk.world() == [0, 1, 2, 3]
        raw = json.loads((run / f"fr-rank{rank}.json").read_text())
        assert "" in raw["pg_config"] and raw["entries"][0]["state"] == "scheduled"
        assert isinstance(pickle.loads((run / f"nccl_trace_rank_{rank}").read_bytes())["pg_status"]["0"]
                          ["last_enqueued_collective"], int)


def test_sigstopped_rank_is_named_while_still_stopped(tmp_path: Path) -> None:
    need(_torch(), "torch with gloo")
    run = tmp_path / "run"
    # a stopped rank its peers cannot end (as on another node): triage reads it live
    procs = launch("tests.triage._job:rank_main", 4, ["--run-dir", str(run), "--fault", "stop",
                                                      "--fault-step", str(FAULT_STEP), "--keep-stuck-peers"], run)
    try:
        rcs = wait_all(procs[:2] + procs[3:], timeout=120)
        assert rcs == [75, 75, 75], logs(run)
        assert procs[2].poll() is None  # still there, stopped
        doc, took = _triage(run)
    finally:
        kill_all(procs)
    _check_named(doc, took)
    assert not (run / "hang-rank2.json").exists()
    ev = " ".join(doc["evidence"])
    assert "rank 2 wrote no hang record" in ev and "state T" in ev
