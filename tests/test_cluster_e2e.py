"""`preflight run` across the namespace test cluster: SSH and srun, faults named per node.

Four faked 8xH100 nodes (real sshd, real Slurm, real pings over veths at MTU 9000). One node's
bridge port at 1500 makes a jumbo-frame black hole: the run must say NO-GO, name that node in
net.mtu with outcome silent_loss, and pass net.mtu on every other node, over SSH and over srun.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from tests import scenarios
from tests.conftest import need
from tests.netcluster import NetCluster, prerequisites, slurm_prerequisites

pytestmark = pytest.mark.real

PREFLIGHT = ["python3", "-m", "preflight.cli"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    need(not prerequisites(), f"namespace cluster prerequisites: {prerequisites()}")
    c = NetCluster(4, tmp_path_factory.mktemp("e2e"), prefix="pe", subnet="10.81.0")
    c.up(scenarios.TOOLS)
    try:
        for node in c.nodes:
            scenarios.healthy_h100(node.home / "scenario")
        yield c
    finally:
        c.down()


def run_json(c: NetCluster, args: list[str], env: dict[str, str] | None = None,
             timeout: float = 180) -> tuple[int, dict, float]:
    import sys

    start = time.monotonic()
    p = c.client(sys.executable, "-m", "preflight.cli", *args, check=False, timeout=timeout, env=env)
    took = time.monotonic() - start
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    return p.returncode, json.loads(p.stdout), took


def by(doc: dict, check: str) -> dict[str, dict]:
    return {r["node"]: r for r in doc["results"] if r["check"] == check}


SSH_ARGS = ["--transport", "ssh", "--connect-timeout", "5", "--command-timeout", "20", "--deadline", "90",
            "--json", "--no-report", "--no-sweep", "--profile", "h100-sxm-8x"]


def test_ssh_healthy_cluster_is_go_and_a_ghost_node_is_error_only(cluster: NetCluster) -> None:
    cfg = cluster.workdir / "ssh_config_ghost"
    cfg.write_text(cluster.ssh_config.read_text() + f"Host ghost\n  HostName {cluster.subnet}.99\n  User root\n"
                   f"  IdentityFile {cluster.key}\n  UserKnownHostsFile {cluster.known_hosts}\n")
    rc, doc, took = run_json(cluster, ["run", "--hosts", "n[1-4]", "--ssh-config", str(cluster.ssh_config), *SSH_ARGS])
    assert rc == 0 and doc["verdict"] == "GO", [r for r in doc["results"] if r["status"] in ("fail", "error")]
    mtu = by(doc, "net.mtu")
    assert all(mtu[n]["status"] == "pass" for n in ("n1", "n2", "n3", "n4"))
    assert by(doc, "cluster.versions")["n1"]["facts"]["versions"]["ofed"].startswith("MLNX_OFED")
    rc, doc, took = run_json(cluster, ["run", "--hosts", "n[1-4],ghost", "--ssh-config", str(cfg), *SSH_ARGS])
    assert rc == 1 and doc["verdict"] == "NO-GO"
    assert set(doc["bad_nodes"]) == {"ghost"}
    ghost = by(doc, "gpu.xid")["ghost"]
    assert ghost["status"] == "error" and "ghost" in ghost["summary"] + " ".join(ghost["evidence"])
    assert took < 90


def test_ssh_jumbo_black_hole_named(cluster: NetCluster) -> None:
    cluster.set_port_mtu("n3", 1500)
    try:
        rc, doc, took = run_json(cluster, ["run", "--hosts", "n[1-4]", "--ssh-config", str(cluster.ssh_config),
                                           *SSH_ARGS])
    finally:
        cluster.set_port_mtu("n3", 9000)
    assert rc == 1 and doc["verdict"] == "NO-GO"
    mtu = by(doc, "net.mtu")
    assert mtu["n3"]["status"] == "fail" and mtu["n3"]["facts"]["outcome"] == "silent_loss", mtu["n3"]
    for n in ("n1", "n2", "n4"):
        assert mtu[n]["status"] == "pass", mtu[n]
    assert set(doc["bad_nodes"]) <= {"n3", "cluster"}
    assert took < 90


def test_srun_jumbo_black_hole_named(cluster: NetCluster) -> None:
    need(not slurm_prerequisites(), f"Slurm prerequisites: {slurm_prerequisites()}")
    cluster.start_slurm()
    try:
        cluster.set_port_mtu("n3", 1500)
        env = cluster.slurm_env()
        import sys

        start = time.monotonic()
        p = cluster.client("salloc", "-N4", "--time=5", sys.executable, "-m", "preflight.cli", "run",
                           "--transport", "srun", "--deadline", "30", "--json", "--no-report", "--no-sweep",
                           "--profile", "h100-sxm-8x", check=False, timeout=180, env=env)
        took = time.monotonic() - start
    finally:
        cluster.set_port_mtu("n3", 9000)
        cluster.stop_slurm()
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    doc = json.loads(p.stdout[p.stdout.index("{"):])
    assert doc["verdict"] == "NO-GO"
    mtu = by(doc, "net.mtu")
    assert mtu["n3"]["status"] == "fail" and mtu["n3"]["facts"]["outcome"] == "silent_loss", mtu["n3"]
    for n in ("n1", "n2", "n4"):
        assert mtu[n]["status"] == "pass", mtu[n]
    assert took < 150
