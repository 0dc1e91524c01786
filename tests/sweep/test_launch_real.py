"""Launches that fail fast and say why, on the namespace cluster (real sshd, the SSH transport).

A node whose agent cannot start ends the sweep within seconds, named with the SSH transport's
own message (the same words the node checks use), instead of its peers waiting out the op timeout (60 s here, the default) and the
group row reporting a stall it never saw: a refused host key, a python without torch on one
node, an MTU black hole between the login node and one node (ssh connects, then its packets
vanish). A healthy 3-node ring (odd: one node sits out each ping-pong round) stays GO.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from preflight.sweep import launch
from tests.conftest import need
from tests.netcluster import ROOT, NetCluster, prerequisites, sh

HERE = Path(__file__).resolve().parent
PREFLIGHT = [sys.executable, "-c", "from preflight.cli import main; main()"]
SMALL = ["--max-bytes", "64K", "--iters", "3", "--warmup", "1", "--pp-bytes", "64K", "--pp-iters", "3",
         "--profile", str(HERE / "gloo-test.toml"), "--deadline", "120", "--json", "--no-report"]

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    need(not prerequisites(), f"namespace cluster: missing {prerequisites()}")
    need(importlib.util.find_spec("torch") is not None, "torch is not installed")
    c = NetCluster(3, tmp_path_factory.mktemp("swlaunch"), prefix="swl", subnet="10.93.0")
    c.up([])
    try:
        yield c
    finally:
        c.down()


def sweep(c: NetCluster, *extra: str, ssh_config: Path | None = None) -> tuple[int, dict, float, str]:
    t = time.monotonic()
    p = c.client(*PREFLIGHT, "sweep", "--hosts", ",".join(n.name for n in c.nodes), "--ssh-config",
                 str(ssh_config or c.ssh_config), "--ifname", "eth0", *SMALL, *extra, check=False, timeout=240)
    took = time.monotonic() - t
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    doc = json.loads(p.stdout) if p.stdout.strip().startswith("{") else {}
    return p.returncode, doc, took, p.stderr


def errors(doc: dict) -> dict[str, dict]:
    return {r["node"]: r for r in doc["results"] if r["status"] == "error"}


def test_healthy_three_node_ring_is_go(cluster: NetCluster) -> None:
    rc, doc, took, _ = sweep(cluster, "--python", sys.executable)
    bad = [(r["node"], r["check"], r["summary"]) for r in doc["results"] if r["status"] not in ("pass", "skip")]
    assert rc == 0 and doc["verdict"] == "GO", bad
    pp = next(r for r in doc["results"] if r["check"] == "nccl.pingpong")
    # the ring's three pairs, n1-n2, n2-n3, n3-n1 (a pair that measured slow on a loaded machine
    # is measured once more before it is judged, so a pair may appear twice)
    assert pp["status"] == "pass"
    assert {frozenset((p["a"], p["b"])) for p in pp["facts"]["pairs"]} == {
        frozenset(("n1", "n2")), frozenset(("n2", "n3")), frozenset(("n3", "n1"))}


def test_refused_host_key_ends_within_seconds_naming_the_node(cluster: NetCluster, tmp_path: Path) -> None:
    """n3's known_hosts entry holds another key: the SSH transport refuses it (its own message,
    the one the node checks give), and the sweep ends at once naming n3."""
    other = tmp_path / "other_key"
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other))
    wrong = " ".join(other.with_suffix(".pub").read_text().split()[:2])
    known = tmp_path / "known_hosts"
    known.write_text("".join(f"{line.split()[0]} {wrong}\n" if line.startswith("n3,") else line + "\n"
                             for line in cluster.known_hosts.read_text().splitlines()))
    cfg = tmp_path / "ssh_config"
    cfg.write_text(cluster.ssh_config.read_text().replace(str(cluster.known_hosts), str(known)))
    times = []
    for _ in range(3):
        rc, doc, took, _ = sweep(cluster, "--python", sys.executable, ssh_config=cfg)
        times.append(round(took, 1))
        assert took < 10, took
        assert rc == 1 and doc["verdict"] == "NO-GO"
        err = errors(doc)
        assert list(err) == ["n3"], err
        assert "host key" in err["n3"]["summary"].lower()
        said = err["n3"]["summary"] + " ".join(err["n3"]["evidence"])
        assert "host key for n3 does not match known_hosts" in said and "ssh-keygen -R" in said
        assert err["n3"]["facts"]["cause"] == "host key refused"
        assert "could not start on n3" in err["n3"]["summary"]
        # no stall reported ("reinstalled" in the host-key advice is not one)
        assert not any(re.search(r"\bstalled\b", r["summary"]) for r in doc["results"]), doc["results"]
        group = next(r for r in doc["results"] if r["check"] == "nccl.allreduce" and r["node"] == "cluster")
        assert group["status"] == "skip" and "n3" in group["summary"]
    print(f"refused host key: sweep ended in {times} s")


def no_torch(tmp_path: Path) -> Path:
    """The system python with preflight importable but no torch (the nodes' own python3 has no preflight)."""
    need(Path("/usr/bin/python3").is_file(), "no /usr/bin/python3")
    py = tmp_path / "python3-no-torch"
    py.write_text(f'#!/bin/sh\nPYTHONPATH={ROOT} exec /usr/bin/python3 "$@"\n')
    py.chmod(0o755)
    return py


def test_a_node_whose_python_lacks_torch_is_named_at_once(cluster: NetCluster, tmp_path: Path) -> None:
    bare = no_torch(tmp_path)
    wrapper = tmp_path / "python"  # n3 runs a python without torch, the others the test's python
    wrapper.write_text(f'#!/bin/sh\nif [ "$(hostname)" = n3 ]; then exec {bare} "$@"; fi\n'
                       f'exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    rc, doc, took, _ = sweep(cluster, "--python", str(wrapper))
    assert took < 15, took
    err = errors(doc)
    assert rc == 1 and list(err) == ["n3"], err
    assert "torch" in err["n3"]["summary"] and "/usr/bin/python3" in err["n3"]["summary"]
    # no node has torch: the environment, not a node, is at fault; `preflight sweep` cannot run (exit 2)
    rc, doc, took, stderr = sweep(cluster, "--python", str(bare))
    assert rc == 2 and "torch is not importable" in stderr and "--python PATH" in stderr, stderr
    assert took < 15, took
    print(f"python without torch on n3: named in {took:.1f} s")


def test_black_holed_node_ends_well_before_the_op_timeout(cluster: NetCluster) -> None:
    """The login node and n2 both run 9000-byte frames, n2's switch port 1500: ssh connects
    (small packets pass), then its larger packets vanish."""
    cluster.set_port_mtu("n2", 1500)
    try:
        rc, doc, took, _ = sweep(cluster, "--python", sys.executable, "--connect-timeout", "5")
    finally:
        cluster.set_port_mtu("n2", cluster.mtu)
    err = errors(doc)
    assert rc == 1 and list(err) == ["n2"], (took, [(r["node"], r["check"], r["status"], r["summary"])
                                                   for r in doc["results"]])
    assert took < 40, took  # the op timeout is 60 s
    assert err["n2"]["facts"]["cause"] in (launch.STALLED, "no answer", "output stalled")
    assert "torch" not in err["n2"]["remedy"] and "MTU" in err["n2"]["remedy"], err["n2"]["remedy"]
    assert not any("stalled at" in r["summary"] for r in doc["results"])
    print(f"black-holed n2: sweep ended in {took:.1f} s ({err['n2']['summary']})")


def test_run_over_ssh_same_rule(cluster: NetCluster, tmp_path: Path) -> None:
    """`preflight run` over SSH: no torch on any node is SKIP; with --sweep-only nothing else
    was graded, so the verdict is NO-EVIDENCE (exit 3), never GO. One node without it is that
    node's ERROR, named at once."""
    bare = no_torch(tmp_path)
    base = [*PREFLIGHT, "run", "--hosts", ",".join(n.name for n in cluster.nodes), "--ssh-config",
            str(cluster.ssh_config), "--sweep-only", "--sweep-nproc", "1", "--sweep-backend", "gloo",
            "--sweep-profile", str(HERE / "gloo-test.toml"), "--json", "--no-report"]
    p = cluster.client(*base, "--sweep-python", str(bare), check=False, timeout=120)
    doc = json.loads(p.stdout)
    ar = next(r for r in doc["results"] if r["check"] == "nccl.allreduce")
    assert p.returncode == 3 and doc["verdict"] == "NO-EVIDENCE" and ar["status"] == "skip", p.stdout[-2000:]
    assert "--sweep-python PATH" in ar["remedy"] and "/usr/bin/python3" in ar["summary"]
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nif [ "$(hostname)" = n1 ]; then exec {bare} "$@"; fi\n'
                       f'exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    t = time.monotonic()
    p = cluster.client(*base, "--sweep-python", str(wrapper), check=False, timeout=120)
    took = time.monotonic() - t
    doc = json.loads(p.stdout)
    assert p.returncode == 1 and list(errors(doc)) == ["n1"] and took < 15, (took, p.stdout[-2000:])
