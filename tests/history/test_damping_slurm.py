"""Flap damping against the real test Slurm: ten prologue runs per node, node state read back
from slurmctld after each. n2's HCA port comes and goes (never three failures in a row): it is
never drained. n3 logs Xid 79 twice: drained at once each time, resumed after two passes."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from preflight.slurm import parse_show_nodes
from tests import fakes
from tests.conftest import need
from tests.history import FLAPPY, XID_RUNS
from tests.history.test_ten_runs import IBSTAT_DOWN, IBSTAT_OK, MAIN
from tests.netcluster import NetCluster, prerequisites, slurm_prerequisites
from tests.slurm import KMSG_CLEAN, KMSG_XID79

pytestmark = pytest.mark.real
NODES = ("n1", "n2", "n3")


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[NetCluster]:
    need(not prerequisites(), f"namespace cluster prerequisites: {prerequisites()}")
    need(not slurm_prerequisites(), f"Slurm prerequisites: {slurm_prerequisites()}")
    c = NetCluster(3, tmp_path / "cluster", prefix="hd", subnet="10.84.0")
    c.up(["dmesg", "ibstat"])
    try:
        c.start_slurm()
        yield c
    finally:
        c.down()


def _scenario(c: NetCluster, node: str, run: int) -> None:
    kmsg = KMSG_CLEAN
    if node == "n3" and run in XID_RUNS:
        kmsg = KMSG_CLEAN + KMSG_XID79.replace("09:13:48", f"1{run}:13:48").split("\n", 3)[3]
    ib = IBSTAT_DOWN if node == "n2" and FLAPPY[run - 1] == "F" else IBSTAT_OK
    c.scenario(node, {"dmesg": [{"match": ".*", "stdout": "kmsg.out"}],
                      "ibstat": [{"match": ".*", "stdout": "ibstat.out"}]},
               {"kmsg.out": kmsg, "ibstat.out": ib})


def test_damping_keeps_a_flapping_node_in_service_under_slurm(cluster: NetCluster, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/history.db"
    states: dict[str, str] = {n: "" for n in NODES}
    for run in range(1, 11):
        for node in NODES:
            _scenario(cluster, node, run)
            home = cluster.node(node).home
            env = {**cluster.slurm_env(), **fakes.env_for(home / "bin", home / "scenario")}
            env["SLURM_CONF"] = str(cluster.slurm_conf)
            env.pop("PREFLIGHT_HISTORY", None)
            p = cluster.client(sys.executable, "-c", MAIN, "prologue", "--only", "gpu.xid", "--only", "ib.hca",
                               "--profile", "h100-sxm-8x", "--node", node, "--budget", "40", "--history", db,
                               "--damp", "3,2", check=False, env=env, timeout=120)
            assert "Traceback" not in p.stderr, p.stderr
        shown = parse_show_nodes(cluster.slurm("scontrol", "show", "node", "-o").stdout)
        for node in NODES:
            states[node] += "D" if shown[node].drained else "-"
            if shown[node].drained:
                assert shown[node].reason.startswith("preflight: gpu.xid"), shown[node].reason
    assert states["n1"] == "-" * 10
    assert states["n2"] == "-" * 10  # six soft failures, never three in a row: never drained
    assert states["n3"] == "--DD--DD--", states["n3"]  # hard fault: at once; resumed after 2 passes
    p = cluster.client(sys.executable, "-c", MAIN, "history", "--history", db, "--since", "all", "--json",
                       check=False, timeout=120)
    doc = json.loads(p.stdout)
    assert doc["flapping_nodes"] == ["n2"]
    assert "n3" in doc["lemon_nodes"]
