"""`preflight run` across the namespace test cluster: SSH and srun, faults named per node.

Four faked 8xH100 nodes (real sshd, real Slurm, real pings over veths at MTU 9000). One node's
bridge port at 1500 makes a jumbo-frame black hole: the run must say NO-GO, name that node in
net.mtu with outcome silent_loss, and pass net.mtu on every other node, over SSH and over srun.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests import scenarios
from tests.conftest import need
from tests.netcluster import NetCluster, healthy_cluster, prerequisites, slurm_prerequisites

pytestmark = pytest.mark.real

PREFLIGHT = ["python3", "-m", "preflight.cli"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    need(not prerequisites(), f"namespace cluster prerequisites: {prerequisites()}")
    with healthy_cluster(4, tmp_path_factory.mktemp("e2e"), prefix="pe", subnet="10.81.0") as c:
        yield c


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
    ghost = by(doc, "node.reachable")["ghost"]  # one ERROR for the node, its checks depend on it
    assert ghost["status"] == "error" and "ghost" in ghost["summary"] + " ".join(ghost["evidence"])
    xid = by(doc, "gpu.xid")["ghost"]
    assert xid["status"] == "skip" and xid["summary"] == "depends on node.reachable: node not checked", xid
    assert [r for r in doc["results"] if r["status"] == "error"] == [ghost]
    assert took < 90


def test_a_node_whose_only_peer_never_answered_says_no_peer_answered(cluster: NetCluster) -> None:
    """n1 and a ghost: the ring is drawn over the nodes that answered, so n1 pings nobody. Its
    net.mtu grades the configured MTU and names why the path was not tested (the ghost sent
    nothing back), not "no peers given"."""
    cfg = cluster.workdir / "ssh_config_ghost_alone"
    cfg.write_text(cluster.ssh_config.read_text() + f"Host ghost\n  HostName {cluster.subnet}.98\n  User root\n"
                   f"  IdentityFile {cluster.key}\n  UserKnownHostsFile {cluster.known_hosts}\n")
    rc, doc, _ = run_json(cluster, ["run", "--hosts", "n1,ghost", "--ssh-config", str(cfg), *SSH_ARGS])
    mtu = by(doc, "net.mtu")["n1"]
    assert mtu["status"] == "pass" and mtu["summary"].endswith(
        "(no peer answered: ghost sent nothing back; path not tested)"), mtu
    assert mtu["facts"]["unanswered"] == ["ghost"] and mtu["evidence"][-1].startswith("ghost: "), mtu
    assert rc == 1 and doc["bad_nodes"] == ["ghost"]


def on_node(c: NetCluster, node: str, command: str) -> subprocess.CompletedProcess[str]:
    """`command` in a login shell's environment on `node`, over the cluster's real sshd."""
    return c.client("ssh", "-F", str(c.ssh_config), "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", node, command,
                    check=False, timeout=60)


def test_nodes_have_nothing_of_preflight_and_the_fleet_is_go(cluster: NetCluster) -> None:
    """The nodes' python3 has no preflight and no nvidia-ml-py (as on a real GPU node); the NVML
    probe ships with the bundle and reads each node's own driver library: GO, and not one WARN
    or ERROR from the probe itself."""
    for module in ("preflight", "pynvml"):
        p = on_node(cluster, "n1", f"python3 -c 'import {module}'")
        assert p.returncode == 1 and f"No module named '{module}'" in p.stderr, (module, p.stdout, p.stderr)
    p = on_node(cluster, "n2", "python3 -c 'import sys; print(sys.prefix)'")
    assert p.stdout.strip() == str(cluster.workdir / "nodepython"), p.stdout + p.stderr
    rc, doc, _ = run_json(cluster, ["run", "--hosts", "n[1-4]", "--ssh-config", str(cluster.ssh_config), *SSH_ARGS])
    assert rc == 0 and doc["verdict"] == "GO", [r for r in doc["results"] if r["status"] in ("fail", "error")]
    nvml_said = [r for r in doc["results"] if r["status"] in ("warn", "error", "fail")
                 and ("NVML" in r["summary"] or r["check"].startswith("gpu."))]
    assert nvml_said == []
    driver = by(doc, "gpu.driver")
    for node in cluster.nodes:
        r = driver[node.name]
        assert r["status"] == "pass" and r["facts"]["nvml"] == "12." + scenarios.DRIVER, r
        assert r["facts"]["nvml_file"] == str(node.home / "lib" / "libnvidia-ml.so.1"), r["facts"]
    assert by(doc, "gpu.inventory")["n3"]["status"] == "pass"


def test_a_node_without_the_driver_library_or_with_an_nvml_init_error_says_which(cluster: NetCluster) -> None:
    """n2 has no libnvidia-ml.so.1 at all; n3's library fails nvmlInit with a version mismatch.
    nvidia-smi works on both, so the driver is fine and it is a WARN naming the cause."""
    cluster.remove_nvml("n2")
    broken = {"ok": False, "error_type": "NVML_ERROR_LIB_RM_VERSION_MISMATCH"}
    (cluster.node("n3").home / "scenario" / "nvml.json").write_text(json.dumps(broken))
    from tests.fakes import fake_nvml

    fake_nvml.write_data(cluster.node("n3").home / "scenario")
    try:
        rc, doc, _ = run_json(cluster, ["run", "--hosts", "n[1-4]", "--ssh-config", str(cluster.ssh_config),
                                        *SSH_ARGS])
    finally:
        cluster.install_nvml("n2")
        scenarios.healthy_h100(cluster.node("n3").home / "scenario")
    driver = by(doc, "gpu.driver")
    n2, n3 = driver["n2"], driver["n3"]
    assert n2["status"] == "warn" and "libnvidia-ml.so.1 not found" in n2["summary"], n2
    assert "(LibraryNotFound)" in n2["summary"] and len(n2["summary"]) < 160 and "/usr/lib" not in n2["summary"], n2
    assert "/usr/lib64/nvidia" in n2["facts"]["nvml_searched"], n2  # where it looked: the facts, not the line
    assert n3["status"] == "warn" and "NVML_ERROR_LIB_RM_VERSION_MISMATCH" in n3["summary"], n3
    assert "Driver/library version mismatch" in n3["summary"], n3
    assert str(cluster.node("n3").home / "lib" / "libnvidia-ml.so.1") in n3["summary"], n3
    for node in ("n1", "n4"):
        assert driver[node]["status"] == "pass", driver[node]
    assert doc["verdict"] == "GO" and rc == 0  # WARNs: the driver itself works (nvidia-smi proves it)


def test_srun_tasks_ship_the_nvml_probe_to_the_nodes_python(cluster: NetCluster) -> None:
    """Over srun the bundle runs with the node's own python3 (TaskProlog's PATH) and the NVML
    probe loads the node's own library: GO, every node's library file named."""
    need(not slurm_prerequisites(), f"Slurm prerequisites: {slurm_prerequisites()}")
    import sys

    cluster.start_slurm()
    try:
        p = cluster.client("salloc", "-N4", "--time=5", sys.executable, "-m", "preflight.cli", "run",
                           "--transport", "srun", "--deadline", "60", "--json", "--no-report", "--no-sweep",
                           "--profile", "h100-sxm-8x", check=False, timeout=180, env=cluster.slurm_env())
    finally:
        cluster.stop_slurm()
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    doc = json.loads(p.stdout[p.stdout.index("{"):])
    assert doc["verdict"] == "GO", [r for r in doc["results"] if r["status"] in ("fail", "error")]
    driver = by(doc, "gpu.driver")
    for node in cluster.nodes:
        assert driver[node.name]["status"] == "pass", driver[node.name]
        assert driver[node.name]["facts"]["nvml_file"] == str(node.home / "lib" / "libnvidia-ml.so.1")


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
    assert doc["bad_nodes"] == ["n3"]  # the culprit only: never the pseudo-node "cluster"
    assert took < 90


def black_hole_run(c: NetCluster, node: str = "n3") -> tuple[int, dict, float]:
    """`preflight run` over SSH with default options while `node`'s switch port drops jumbo frames."""
    c.set_port_mtu(node, 1500)
    try:
        return run_json(c, ["run", "--hosts", "n[1-4]", "--ssh-config", str(c.ssh_config), "--transport", "ssh",
                            "--json", "--no-report"], timeout=120)
    finally:
        c.set_port_mtu(node, 9000)


def lost_output_kind(doc: dict, node: str = "n3") -> str:
    """How `node`'s output fared, asserting that what did not arrive is ERROR with the cause,
    never PASS or FAIL: "stalled" (some captures came back, the rest are ERROR "output lost:
    <cause>"), "not checked" (the session stalled before the probes ran) or "arrived" (every
    capture came back and is graded on the healthy node's real output). net.mtu on that node is
    the peers' evidence of the loss (their jumbo pings to it vanished), whatever arrived."""
    mine = {r["check"]: r for r in doc["results"] if r["node"] == node}
    assert mine["net.mtu"]["status"] == "fail" and mine["net.mtu"]["facts"]["outcome"] == "silent_loss", mine
    kinds = set()
    for c, r in mine.items():
        if c == "net.mtu":
            continue
        if r["status"] == "pass":
            kinds.add("arrived")
            continue
        if r["status"] == "skip" and r["facts"].get("depends_on") == "net.mtu":  # lost output the black hole explains
            assert r["facts"]["own_status"] == "error" and r["summary"] == (
                f"output lost: the ssh connection to {node} stalled behind the MTU black hole at {node}"), r
            kinds.add("stalled")
            continue
        if r["status"] == "skip" and r["facts"].get("depends_on"):  # the same cause, said once by its root
            assert mine[r["facts"]["depends_on"]]["status"] == "error", (r, mine[r["facts"]["depends_on"]])
            continue
        assert r["status"] == "error", r
        assert r["summary"].startswith(("output lost: ", "node not checked: ")), r
        assert "stalled" in r["summary"] and "MTU" in r["summary"], r
        kinds.add("stalled" if r["summary"].startswith("output lost: ") else "not checked")
    others = [r for r in doc["results"] if r["node"] not in (node, "cluster")]
    assert all(r["status"] in ("pass", "skip") for r in others), [r for r in others if r["status"] not in
                                                                  ("pass", "skip")]
    return "stalled" if "stalled" in kinds else "not checked" if "not checked" in kinds else "arrived"


def test_black_hole_with_default_options_loses_output_as_error_in_seconds(cluster: NetCluster) -> None:
    """Three runs (benchmarks/bench_black_hole.py makes ten and times them: 11-15 s here):
    never a FAIL or PASS on a check whose output did not arrive. The stall timer ends a stalled
    session in seconds; without it a run waits out the 60 s command timeout (66-68 s), which
    the bound below (loose, for a loaded machine) would catch."""
    took, kinds = [], []
    for _ in range(3):
        rc, doc, t = black_hole_run(cluster)
        assert rc == 1 and doc["verdict"] == "NO-GO"
        kinds.append(lost_output_kind(doc))
        took.append(t)
    print(f"black hole runs: {list(zip(kinds, [round(t, 1) for t in took], strict=True))}")
    assert max(took) < 40, (took, kinds)


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
    # srun tasks run the shipped NVML probe with the node's own python3 and driver library
    nv = by(doc, "gpu.driver")["n1"]
    assert nv["status"] == "pass" and nv["facts"]["nvml_file"] == str(cluster.node("n1").home / "lib" /
                                                                     "libnvidia-ml.so.1"), nv
    assert took < 150
