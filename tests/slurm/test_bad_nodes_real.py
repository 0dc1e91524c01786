"""`preflight run --bad-nodes` against real sshd nodes, read back by the real Slurm.

Two namespace nodes with real sshd: n1 a healthy 8xH100, n2 with an Xid 79 in its kernel log.
Sixteen node names of three prefixes (zero-padded gpuNNN, rack1-nodeNN, loginN) are SSH
aliases of one or the other, so one run has a non-trivial set of NO-GO nodes (several ranges,
padding, a name with two numeric parts) next to healthy ones. The file `--bad-nodes` writes
must be one hostlist line that Slurm's own `scontrol show hostnames` (through the adapter,
`slurm.hostnames`) expands to exactly the NO-GO nodes: no healthy node, no excluded node, no
pseudo-node `cluster`. `scontrol show hostnames` needs a slurm.conf but no running daemon
(Slurm 22.05).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from preflight import registry, slurm
from tests import scenarios
from tests.conftest import need
from tests.netcluster import NetCluster, prerequisites

pytestmark = pytest.mark.real

GPUS = [f"gpu{i:03d}" for i in range(1, 13)]
RACK = [f"rack1-node{i:02d}" for i in range(1, 4)]
LOGIN = ["login1", "login2"]
# names answered by the node with the Xid 79 (gpu012 too, but --exclude leaves it out)
BAD = {"gpu001", "gpu002", "gpu003", "gpu007", "gpu010", "gpu011", "gpu012", "rack1-node01", "rack1-node02",
       "login2"}
EXCLUDED = {"gpu012"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    need(not prerequisites(), f"namespace cluster prerequisites: {prerequisites()}")
    need(shutil.which("scontrol") is not None, "Slurm's scontrol")
    c = NetCluster(2, tmp_path_factory.mktemp("badnodes"), prefix="bn", subnet="10.91.0")
    c.up(scenarios.TOOLS)
    try:
        scenarios.healthy_h100(c.node("n1").home / "scenario")
        scenarios.with_xid79(c.node("n2").home / "scenario")
        yield c
    finally:
        c.down()


def _aliases(c: NetCluster) -> Path:
    """An ssh config where every node name is an alias of n1 (healthy) or n2 (Xid 79)."""
    cfg = c.workdir / "ssh_config_aliases"
    lines = []
    for name in GPUS + RACK + LOGIN:
        node = c.node("n2" if name in BAD else "n1")
        lines.append(f"Host {name}\n  HostName {node.addr}\n  User root\n  IdentityFile {c.key}\n"
                     f"  UserKnownHostsFile {c.known_hosts}\n  StrictHostKeyChecking yes\n")
    cfg.write_text("\n".join(lines))
    return cfg


def _run(c: NetCluster, hosts: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """`preflight run --bad-nodes` over the aliases. Sixteen names on two sshd nodes of a 2-vCPU
    machine run some 240 probes at once: every probe gets 60 s (its own is 5-20 s), since a
    healthy node whose chronyc is descheduled past 5 s by a loaded machine would be an ERROR,
    and this test is about the file, not the timeouts."""
    config = c.workdir / "config.toml"
    reg = registry.load()
    config.write_text("[check_timeouts]\n" + "".join(f'"{cid}" = 60\n' for cid in [*reg.checks, *reg.cluster_checks]))
    return c.client(sys.executable, "-m", "preflight.cli", "run", "--hosts", hosts, *extra,
                    "--ssh-config", str(_aliases(c)), "--transport", "ssh", "--connect-timeout", "10",
                    "--command-timeout", "90", "--deadline", "200", "--no-sweep", "--profile", "h100-sxm-8x",
                    "--json", "--no-report", "--bad-nodes", str(out), check=False, timeout=300,
                    env={**os.environ, "PREFLIGHT_CONFIG": str(config)})


def _slurm_conf(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    conf = d / "slurm.conf"
    names = ",".join(GPUS + RACK + LOGIN)
    conf.write_text("ClusterName=pfbad\nSlurmctldHost=localhost\nAuthType=auth/munge\n"
                    + "".join(f"NodeName={n} CPUs=1 RealMemory=100 State=UNKNOWN\n" for n in GPUS + RACK + LOGIN)
                    + f"PartitionName=main Nodes={names} Default=YES State=UP\n")
    return conf


def test_bad_nodes_file_is_a_hostlist_slurm_expands_to_the_no_go_nodes(
        cluster: NetCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "bad.txt"
    out.write_text("stale contents from an earlier run\n")
    p = _run(cluster, "gpu[001-012],rack1-node[01-03],login[1-2]", out, "--exclude", "gpu012")
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    want = BAD - EXCLUDED
    assert p.returncode == 1 and doc["verdict"] == "NO-GO", p.stderr[-2000:]
    # every NO-GO node is one the Xid-79 node answered for, and each of those is NO-GO
    assert set(doc["bad_nodes"]) == want, [(r["node"], r["check"], r["summary"]) for r in doc["results"]
                                           if r["status"] in ("fail", "error")]
    assert "gpu012" not in doc["nodes"] and "cluster" not in doc["nodes"]
    text = out.read_text()
    assert text.endswith("\n") and text.count("\n") == 1, text
    line = text.strip()
    assert "[" in line and "," in line  # compressed, not a plain list
    assert not list(tmp_path.glob(".bad.txt.*")), "temporary file left behind"

    monkeypatch.setenv("SLURM_CONF", str(_slurm_conf(tmp_path / "slurm")))
    for var in [k for k in os.environ if k.startswith("SLURM_") and k != "SLURM_CONF"]:
        monkeypatch.delenv(var)
    expanded = slurm.hostnames(nodelist=line)
    assert sorted(expanded) == sorted(want), (line, expanded)
    assert len(expanded) == len(set(expanded))


def test_a_healthy_run_writes_an_empty_bad_nodes_file(cluster: NetCluster, tmp_path: Path) -> None:
    out = tmp_path / "bad.txt"
    out.write_text("gpu001\n")
    p = _run(cluster, "gpu[004-006],login1", out)
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["verdict"] == "GO", [(r["node"], r["check"], r["summary"])
                                                          for r in doc["results"] if r["status"] in ("fail", "error")]
    assert out.read_text() == ""
