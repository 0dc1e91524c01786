"""Real sweeps: gloo ranks on this machine, and on the namespace test cluster over SSH
(ranks started in the node namespaces). Small sizes and iteration counts: the machine is
shared; every run is bounded by the sweep's own deadline."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import need
from tests.netcluster import NetCluster, prerequisites, sh

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PROFILE = str(HERE / "gloo-test.toml")
PREFLIGHT = [sys.executable, "-c", "from preflight.cli import main; main()"]
SMALL = ["--max-bytes", "1M", "--iters", "3", "--warmup", "1", "--pp-bytes", "256K", "--pp-iters", "5",
         "--profile", PROFILE]

pytestmark = pytest.mark.real


def _torch() -> None:
    need(importlib.util.find_spec("torch") is not None, "torch is not installed")


def test_local_gloo_sweep_with_4_processes(tmp_path: Path) -> None:
    _torch()
    t = time.monotonic()
    p = subprocess.run([*PREFLIGHT, "sweep", "--nproc", "4", *SMALL, "--op-timeout", "20", "--deadline", "120",
                        "--out", str(tmp_path), "--json"], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert time.monotonic() - t < 130
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    rep = json.loads(p.stdout)
    assert rep["verdict"] == "GO"
    ar = next(r for r in rep["results"] if r["check"] == "nccl.allreduce")
    rows = ar["facts"]["rows"]
    assert [r["bytes"] for r in rows] == [8, 32, 128, 512, 2048, 8192, 32768, 131072, 524288, 1048576]
    assert all(r["wrong"] == 0 and r["time_us"] > 0 and r["busbw"] == pytest.approx(r["algbw"] * 1.5) for r in rows)
    assert ar["facts"]["peak_busbw"] > 0 and ar["facts"]["world"] == 4
    assert next(r for r in rep["results"] if r["check"] == "nccl.transport")["status"] == "skip"
    md = (tmp_path / "report.md").read_text()
    assert "## Collective sweep" in md and "sweep-busbw.svg" in md
    assert (tmp_path / "sweep-busbw.svg").read_text().startswith("<svg")


def test_local_deadline_ends_a_long_sweep_in_bounded_time(tmp_path: Path) -> None:
    _torch()
    t = time.monotonic()
    p = subprocess.run([*PREFLIGHT, "sweep", "--nproc", "2", "--max-bytes", "64M", "--iters", "2000",
                        "--deadline", "6", "--profile", PROFILE, "--no-report", "--json"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    took = time.monotonic() - t
    assert took < 25, took
    rep = json.loads(p.stdout)
    assert p.returncode == 1 and rep["verdict"] == "NO-GO"
    ar = next(r for r in rep["results"] if r["check"] == "nccl.allreduce" and r["status"] != "pass")
    assert "deadline" in ar["summary"] or "measured nothing" in ar["summary"]


# ------------------------------------------------------------------------------------------
# namespace cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    need(not prerequisites(), f"namespace cluster: missing {prerequisites()}")
    _torch()
    c = NetCluster(4, tmp_path_factory.mktemp("swcluster"), prefix="sw", subnet="10.78.0")
    c.up([])
    # the login node reaches the nodes over a 1500-byte path (MSS clamped), as a management
    # network would: SSH keeps working when a node's data path drops jumbo frames
    sh("ip", "-n", c.client_ns, "link", "set", "eth0", "mtu", "1500")
    try:
        yield c
    finally:
        c.down()


def _heal(c: NetCluster) -> None:
    for n in c.nodes:
        c.set_port_mtu(n.name, c.mtu)
        for ns, dev in ((c.sw_ns, n.veth_sw), (n.ns, "eth0")):
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root", check=False)


def _sweep(c: NetCluster, out: Path, deadline: int = 150) -> tuple[dict, float]:
    t = time.monotonic()
    p = c.client(*PREFLIGHT, "sweep", "--hosts", ",".join(n.name for n in c.nodes), "--ssh-config",
                 str(c.ssh_config), "--ifname", "eth0", "--python", sys.executable, *SMALL, "--op-timeout", "8",
                 "--deadline", str(deadline), "--out", str(out), "--json", check=False, timeout=deadline + 60)
    took = time.monotonic() - t
    assert p.returncode in (0, 1), p.stderr[-2000:]
    return json.loads(p.stdout), took


def _named(rep: dict) -> list[str]:
    return sorted(r["node"] for r in rep["results"] if r["check"] == "nccl.pingpong" and r["node"] != "cluster"
                  and r["status"] == "fail")


def test_cluster_healthy_gives_go(cluster: NetCluster, tmp_path: Path) -> None:
    _heal(cluster)
    rep, took = _sweep(cluster, tmp_path)
    bad = [(r["node"], r["check"], r["summary"]) for r in rep["results"] if r["status"] in ("fail", "error")]
    assert rep["verdict"] == "GO", bad
    pp = next(r for r in rep["results"] if r["check"] == "nccl.pingpong")
    assert len(pp["facts"]["pairs"]) >= 4 and pp["facts"]["matrix_bw_gbps"][0][0] == "n1"
    assert "### Node pairs" in (tmp_path / "report.md").read_text()


def test_cluster_rate_limited_node_is_named(cluster: NetCluster, tmp_path: Path) -> None:
    _heal(cluster)
    cluster.rate_limit("n3", "20mbit")
    try:
        rep, took = _sweep(cluster, tmp_path)
    finally:
        _heal(cluster)
    assert rep["verdict"] == "NO-GO"
    assert _named(rep) == ["n3"], [(r["node"], r["summary"]) for r in rep["results"]]
    assert took < 150 + 30


def test_cluster_jumbo_black_hole_stalls_within_deadline_and_names_node(cluster: NetCluster, tmp_path: Path) -> None:
    _heal(cluster)
    cluster.set_port_mtu("n2", 1500)
    try:
        rep, took = _sweep(cluster, tmp_path, deadline=120)
    finally:
        _heal(cluster)
    assert took < 120 + 30
    assert rep["verdict"] == "NO-GO"
    ar = next(r for r in rep["results"] if r["check"] == "nccl.allreduce" and r["node"] == "cluster")
    assert ar["status"] == "fail" and "stalled at" in ar["summary"] and "n2" in ar["summary"]
    assert ar["facts"]["stalled_bytes"] > 1500  # small messages pass, large ones vanish
    assert _named(rep) == ["n2"]
