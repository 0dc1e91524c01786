"""node.clock and cluster.clock across the namespace test cluster, over real sshd.

Four faked 8xH100 nodes (SSH, and srun under a real Slurm), each with a fake `chronyc` printing its own tracking report: n2's
chronyd says the clock is 3 s fast (FAIL naming n2), n3's says "Not synchronised" (WARN), n1 and
n4 are synchronised (PASS). The nodes share one kernel clock, so a skew the controller can see is
made with a fake `date` (the tool, not our code): 30 s on one node is caught by the controller's
bracket, 0.1 s on another is not (a bracket is never narrower than the transport's round trip).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest

from tests import fakes, scenarios
from tests.conftest import need
from tests.netcluster import NetCluster, prerequisites, slurm_prerequisites

pytestmark = pytest.mark.real

FAKE_DATE = fakes.FAKE_TOOL.with_name("fake_date.py")
ARGS = ["--transport", "ssh", "--connect-timeout", "10", "--command-timeout", "30", "--deadline", "120",
        "--json", "--no-report", "--no-sweep", "--profile", "h100-sxm-8x", "--only", "node.clock"]
CHRONY = {"n1": "tracking_4x_synced.txt", "n2": "tracking_4x_3s_fast.txt", "n3": "tracking_4x_not_synchronised.txt",
          "n4": "tracking_4x_synced.txt"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    need(not prerequisites(), f"namespace cluster prerequisites: {prerequisites()}")
    c = NetCluster(4, tmp_path_factory.mktemp("clock"), prefix="clk", subnet="10.74.0")
    c.up(scenarios.TOOLS)
    try:
        for node in c.nodes:
            folder = scenarios.healthy_h100(node.home / "scenario")
            (folder / "chrony.txt").write_text((fakes.FIXTURES / "chrony" / CHRONY[node.name]).read_text())
            date = node.home / "bin" / "date"
            date.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_DATE} \"$@\"\n")
            date.chmod(0o755)
        yield c
    finally:
        c.down()


def skew(c: NetCluster, seconds: dict[str, float]) -> None:
    for node in c.nodes:
        (node.home / "scenario" / "date-skew").write_text(f"{seconds.get(node.name, 0.0)}\n")


def run(c: NetCluster) -> tuple[int, dict[tuple[str, str], dict]]:
    p = c.client(sys.executable, "-m", "preflight.cli", "run", "--hosts", "n[1-4]", "--ssh-config",
                 str(c.ssh_config), *ARGS, check=False, timeout=240)
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    got = [(r["check"], r["node"]) for r in doc["results"]]
    assert len(got) == len(set(got)), got  # one result per (check, node)
    return p.returncode, {(r["check"], r["node"]): r for r in doc["results"]}


def test_chrony_offset_and_sync_state_per_node(cluster: NetCluster) -> None:
    skew(cluster, {})
    rc, by = run(cluster)
    assert rc == 1
    assert sorted(n for (check, n) in by if check == "node.clock") == ["n1", "n2", "n3", "n4"]
    n2 = by[("node.clock", "n2")]
    assert n2["status"] == "fail" and n2["facts"]["codes"] == ["node.clock/offset-high"], n2
    assert "3 s ahead of NTP time" in n2["summary"]
    n3 = by[("node.clock", "n3")]
    assert n3["status"] == "warn" and n3["facts"]["codes"] == ["node.clock/not-synchronised"], n3
    for n in ("n1", "n4"):
        r = by[("node.clock", n)]
        assert r["status"] == "pass" and r["facts"]["clock"] == "synchronised", r
        low, high = r["facts"]["controller_offset_s"]  # one kernel clock: the bracket holds 0
        assert low <= 0.0 <= high, r
    assert by[("cluster.clock", "cluster")]["status"] == "pass"


def test_the_controller_catches_thirty_seconds_not_a_tenth(cluster: NetCluster) -> None:
    skew(cluster, {"n1": 30.0, "n4": 0.1})
    try:
        rc, by = run(cluster)
    finally:
        skew(cluster, {})
    n1 = by[("node.clock", "n1")]  # chronyd's own report says fine; the controller's view does not
    assert n1["status"] == "fail" and n1["facts"]["codes"] == ["node.clock/controller-offset"], n1
    assert "ahead of the controller's" in n1["summary"]
    low, high = n1["facts"]["controller_offset_s"]
    assert 1.0 < low <= 30.0 <= high + 0.001, n1
    n4 = by[("node.clock", "n4")]
    assert n4["status"] == "pass", n4
    low, high = n4["facts"]["controller_offset_s"]
    assert low <= 0.1 <= high + 0.001, n4
    agree = by[("cluster.clock", "cluster")]
    assert agree["status"] == "fail" and agree["facts"]["ahead"] == "n1", agree
    assert rc == 1


def test_over_srun_the_bracket_and_the_chrony_report_both_hold(cluster: NetCluster) -> None:
    need(not slurm_prerequisites(), f"Slurm prerequisites: {slurm_prerequisites()}")
    cluster.start_slurm()
    skew(cluster, {"n4": 30.0})
    try:
        p = cluster.client("salloc", "-N4", "--time=5", sys.executable, "-m", "preflight.cli", "run",
                           "--transport", "srun", "--deadline", "60", "--json", "--no-report", "--no-sweep",
                           "--profile", "h100-sxm-8x", "--only", "node.clock", check=False, timeout=240,
                           env=cluster.slurm_env())
    finally:
        skew(cluster, {})
        cluster.stop_slurm()
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    doc = json.loads(p.stdout[p.stdout.index("{"):])
    by = {(r["check"], r["node"]): r for r in doc["results"]}
    assert by[("node.clock", "n2")]["facts"]["codes"] == ["node.clock/offset-high"]
    assert by[("node.clock", "n3")]["status"] == "warn"
    assert by[("node.clock", "n1")]["status"] == "pass", by[("node.clock", "n1")]
    n4 = by[("node.clock", "n4")]
    assert n4["status"] == "fail" and n4["facts"]["codes"] == ["node.clock/controller-offset"], n4
