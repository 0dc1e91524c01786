"""`preflight triage JOBID` against the real test Slurm: the job's nodes and start time come
from scontrol, collection goes over SSH, and an Xid 79 logged on one node after the job
started makes that node the culprit (category hardware, action drain). An Xid from before
the job started is not blamed."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import scenarios
from tests.conftest import need
from tests.netcluster import NetCluster, prerequisites, slurm_prerequisites

pytestmark = pytest.mark.real


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[NetCluster]:
    need(not prerequisites(), f"namespace cluster prerequisites: {prerequisites()}")
    need(not slurm_prerequisites(), f"Slurm prerequisites: {slurm_prerequisites()}")
    c = NetCluster(2, tmp_path / "cluster", prefix="tq", subnet="10.89.0")
    c.up(scenarios.TOOLS)
    try:
        for node in c.nodes:
            scenarios.healthy_h100(node.home / "scenario")
        c.start_slurm()
        yield c
    finally:
        c.down()


def triage(c: NetCluster, job: str) -> dict:
    p = c.client(sys.executable, "-m", "preflight.cli", "triage", job, "--transport", "ssh", "--ssh-config",
                 str(c.ssh_config), "--json", check=False, timeout=200, env=c.slurm_env())
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    return json.loads(p.stdout)


def test_triage_by_job_id_names_the_node_with_a_fresh_xid(cluster: NetCluster) -> None:
    # an old Xid 79 (before the job) on n2: not the job's problem
    scenarios.with_xid79(cluster.node("n2").home / "scenario")
    job = cluster.slurm("sbatch", "-N2", "--parsable", "--output=/dev/null", "--wrap",
                        "sleep 120").stdout.strip().split(";")[0]
    deadline = time.monotonic() + 30
    while "R" not in cluster.slurm("squeue", "-h", "-j", job, "-o", "%t").stdout and time.monotonic() < deadline:
        time.sleep(0.5)
    doc = triage(cluster, job)
    # the old Xid is not blamed; with no run directory there is nothing from the job itself, and
    # healthy nodes are no evidence of a clean run: insufficient evidence, not "none"
    assert doc["category"] == "unknown" and doc["culprits"] == [], doc["triage"]["summary"]
    assert "no node fault found" in doc["triage"]["summary"]
    # the GPU falls off the bus while the job runs
    stamp = time.strftime("[%a %b %e %H:%M:%S %Y]")
    fresh = scenarios.XID79.replace("[Mon Nov 23 09:12:44 2026]", stamp)
    scenarios.healthy_h100(cluster.node("n2").home / "scenario", scenarios.CLEAN_DMESG + fresh)
    doc = triage(cluster, job)
    assert doc["category"] == "hardware"
    assert [c["node"] for c in doc["culprits"]] == ["n2"]
    assert doc["action"].startswith("drain n2") and "'Reason=preflight: triage" in doc["action"]
    assert f"scontrol requeue {job}" in doc["action"]
