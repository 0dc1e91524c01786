"""A jumbo-frame black hole on the namespace cluster: every planned result is there, and the
output it cost is folded into the FAIL that explains it.

Four faked 8xH100 nodes (real sshd, real pings over veths at MTU 9000); n2's switch port at
1500 drops every large packet, so its SSH session stalls once the bundle's output (or the
command itself) no longer fits. Whatever stalled where, the run has exactly the results of a
healthy run, node by node and check by check (cluster.versions and cluster.nccl_env included
for n2), n2 is NO-GO on net.mtu alone, and the output lost behind the black hole is a dependent
of that FAIL, never an "output lost" ERROR next to it, in the JSON report and in the piped
console.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.conftest import need
from tests.netcluster import NetCluster, healthy_cluster, prerequisites

pytestmark = pytest.mark.real

ARGS = ["run", "--hosts", "n[1-4]", "--transport", "ssh", "--connect-timeout", "5", "--command-timeout", "20",
        "--deadline", "90", "--no-report", "--no-sweep", "--profile", "h100-sxm-8x", "--history", "off"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    need(not prerequisites(), f"namespace cluster prerequisites: {prerequisites()}")
    with healthy_cluster(4, tmp_path_factory.mktemp("blackhole"), prefix="e4b", subnet="10.97.0") as c:
        yield c


def _run(c: NetCluster, *extra: str) -> tuple[int, str]:
    p = c.client(sys.executable, "-m", "preflight.cli", *ARGS, "--ssh-config", str(c.ssh_config), *extra,
                 check=False, timeout=180)
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    return p.returncode, p.stdout


def _counts(doc: dict) -> Counter[tuple[str, str]]:
    return Counter((r["node"], r["check"]) for r in doc["results"])


def test_a_black_hole_keeps_every_result_and_folds_the_lost_output_into_the_fail(cluster: NetCluster) -> None:
    _, out = _run(cluster, "--json")
    healthy = _counts(json.loads(out))
    assert set(healthy.values()) == {1}, healthy
    assert {("n2", "cluster.versions"), ("n2", "cluster.nccl_env"), ("cluster", "cluster.mtu")} <= set(healthy)
    seen = []
    for _ in range(2):  # where the session stalls varies: before the command, or after some captures
        cluster.set_port_mtu("n2", 1500)
        try:
            rc, out = _run(cluster, "--json")
        finally:
            cluster.set_port_mtu("n2", cluster.mtu)
        doc = json.loads(out)
        got = _counts(doc)
        extra = {k: v for k, v in got.items() if k not in healthy}
        about_n2 = [(r["check"], r["status"], r["summary"][:160], r["facts"].get("depends_on")) for r in doc["results"]
                    if r["node"] == "n2"]
        assert not extra and got == {k: 1 for k in healthy}, ({k: v for k, v in got.items() if v != 1}, extra,
                                                              set(healthy) - set(got), about_n2)
        assert rc == 1 and doc["bad_nodes"] == ["n2"], doc["bad_nodes"]
        mine = {r["check"]: r for r in doc["results"] if r["node"] == "n2"}
        mtu = mine["net.mtu"]
        assert mtu["status"] == "fail" and mtu["facts"]["outcome"] == "silent_loss", mtu
        blocking = [(c, r["status"], r["summary"]) for c, r in mine.items() if r["status"] in ("fail", "error")]
        assert [b[0] for b in blocking] == ["net.mtu"], blocking  # the lost output is not a second line
        lost = [r for r in mine.values() if r["facts"].get("depends_on") == "net.mtu"]
        assert sorted(mtu["facts"].get("dependents", [])) == sorted(r["check"] for r in lost)
        assert all(r["status"] == "skip" and r["facts"]["own_status"] == "error" for r in lost), lost
        # what happened to each, not a dependency on net.mtu (no check depends on another here)
        said = "output lost: the ssh connection to n2 stalled behind the MTU black hole at n2"
        assert all(r["summary"] == said for r in lost), [r["summary"] for r in lost]
        seen.append(len(lost))
    print(f"black hole at n2: {seen} results lost and folded into net.mtu")
    # the piped console: n2 is one line, the FAIL (its dependents counted on it)
    cluster.set_port_mtu("n2", 1500)
    try:
        rc, out = _run(cluster)
    finally:
        cluster.set_port_mtu("n2", cluster.mtu)
    n2 = [ln for ln in out.splitlines() if ln.startswith(("FAIL ", "ERROR ", "WARN ")) and ln.split()[1] == "n2"]
    assert len(n2) == 1 and n2[0].startswith("FAIL n2 net.mtu: jumbo frames to and from n2"), out
    assert "output lost" not in out, out
