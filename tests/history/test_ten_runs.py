"""Ten runs of the real `preflight prologue` on three nodes (fake GPU/IB tools, a fake
scontrol that keeps node state): n2's HCA port comes and goes, n3 logs Xid 79 twice.

`history` names n2 as flapping and n3 as a lemon; damping (K=3, M=2) keeps n2 in service
(its failures never come three in a row), drains n3 at once on each Xid and resumes it after
two passing runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from preflight.history.store import open_store
from tests import fakes
from tests.conftest import FIXTURES, ROOT
from tests.history import FLAPPY, XID_RUNS, fake_scontrol, node_state
from tests.slurm import KMSG_CLEAN, KMSG_XID79

NODES = ("n1", "n2", "n3")
IBSTAT_OK = (FIXTURES / "ib" / "ibstat_8x400_ib_2fe_all_active.txt").read_text()
# mlx5_3's port down: the same listing with one compute port Down / Polling
_cut = IBSTAT_OK.index("CA 'mlx5_3'")
IBSTAT_DOWN = IBSTAT_OK[:_cut] + IBSTAT_OK[_cut:].replace("State: Active", "State: Down", 1).replace(
    "Physical state: LinkUp", "Physical state: Polling", 1)
MAIN = "import sys\nfrom preflight.cli import main\nsys.argv[0] = 'preflight'\nmain()\n"


def _scenario(home: Path, node: str, run: int) -> None:
    kmsg = KMSG_CLEAN
    if node == "n3" and run in XID_RUNS:
        kmsg = KMSG_CLEAN + KMSG_XID79.replace("09:13:48", f"1{run}:13:48").split("\n", 3)[3]
    ib = IBSTAT_DOWN if node == "n2" and FLAPPY[run - 1] == "F" else IBSTAT_OK
    fakes.scenario(home / "sc", {"dmesg": [{"match": ".*", "stdout": "kmsg.txt"}],
                                 "ibstat": [{"match": ".*", "stdout": "ibstat.txt"}]},
                   {"kmsg.txt": kmsg, "ibstat.txt": ib})


@pytest.mark.real
def test_ten_runs_flapping_lemon_and_damping(tmp_path: Path) -> None:
    assert "Down" in IBSTAT_DOWN and IBSTAT_DOWN != IBSTAT_OK
    sbin = fake_scontrol(tmp_path / "slurm")
    db = f"sqlite:///{tmp_path}/history.db"
    envs = {}
    for node in NODES:
        home = tmp_path / node
        bin_dir = fakes.install(home / "bin", ["dmesg", "ibstat"])
        env = fakes.env_for(bin_dir, home / "sc")
        env["PATH"] = f"{sbin}:{env['PATH']}"
        env.pop("PREFLIGHT_CONFIG", None)
        env.pop("PREFLIGHT_HISTORY", None)
        envs[node] = env
    states: dict[str, list[str]] = {n: [] for n in NODES}
    codes: dict[str, list[int]] = {n: [] for n in NODES}
    outputs: dict[str, list[str]] = {n: [] for n in NODES}
    for run in range(1, 11):
        for node in NODES:
            _scenario(tmp_path / node, node, run)
        procs = {node: subprocess.Popen(
            [sys.executable, "-c", MAIN, "prologue", "--only", "gpu.xid", "--only", "ib.hca", "--profile",
             "h100-sxm-8x", "--node", node, "--budget", "40", "--history", db, "--damp", "3,2"],
            env=envs[node], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for node in NODES}
        for node, p in procs.items():
            out, err = p.communicate(timeout=120)
            assert "Traceback" not in err, err
            codes[node].append(p.returncode)
            outputs[node].append(out)
            states[node].append("D" if "DRAIN" in node_state(tmp_path / "slurm", node)[0] else "-")

    # n1: always in service
    assert states["n1"] == ["-"] * 10 and codes["n1"] == [0] * 10
    # n2 fails 6 of 10 runs, never 3 in a row: damped, never drained, the jobs ran
    assert states["n2"] == ["-"] * 10, outputs["n2"]
    assert codes["n2"] == [0] * 10
    assert sum("damped: ib.hca fail" in o for o in outputs["n2"]) == FLAPPY.count("F")
    calls = (tmp_path / "slurm" / "calls.log").read_text()
    assert "update NodeName=n2" not in calls
    # n3: drained at once on each Xid (runs 3 and 7), resumed after two passing runs
    assert states["n3"] == list("--DD--DD--"), (states["n3"], outputs["n3"])
    assert codes["n3"] == [0, 0, 1, 0, 0, 0, 1, 0, 0, 0]
    assert calls.count("update NodeName=n3 State=DRAIN Reason=preflight: gpu.xid hard fault: ") == 2
    assert calls.count("update NodeName=n3 State=RESUME") == 2

    # the history: n2 flapping, n3 a lemon (the same Xid again), n1 neither
    p = subprocess.run([sys.executable, "-c", MAIN, "history", "--history", db, "--since", "all", "--json"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT, env=envs["n1"])
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["runs"] == 30 and doc["flapping_nodes"] == ["n2"]
    assert any(lm["node"] == "n3" and lm["kind"] == "xid" and lm["key"] == "Xid 79" and lm["count"] == 2
               for lm in doc["lemons"]), doc["lemons"]
    assert "n1" not in doc["lemon_nodes"]
    with open_store(db) as s:
        actions = {n: [d.action for d in s.decisions(n)] for n in NODES}
    assert actions["n2"].count("damped") == 6 and "drain" not in actions["n2"]
    assert actions["n3"].count("drain") == 2 and actions["n3"].count("resume") >= 2
