"""The sweep launched inside a real Slurm allocation: srun starts torchrun on every node, the
c10d rendezvous assigns the ranks, gloo runs over the namespace cluster's veths."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, need
from tests.netcluster import NetCluster, prerequisites, slurm_prerequisites

pytestmark = pytest.mark.real
PROFILE = str(ROOT / "tests" / "sweep" / "gloo-test.toml")


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[NetCluster]:
    need(not prerequisites(), f"namespace cluster prerequisites: {prerequisites()}")
    need(not slurm_prerequisites(), f"Slurm prerequisites: {slurm_prerequisites()}")
    c = NetCluster(2, tmp_path / "cluster", prefix="ss", subnet="10.87.0")
    c.up([])
    try:
        c.start_slurm()
        yield c
    finally:
        c.down()


def test_sweep_over_srun_and_torchrun_in_an_allocation(cluster: NetCluster) -> None:
    p = cluster.client("salloc", "-N2", "--time=5", sys.executable, "-m", "preflight.cli", "sweep",
                       "--transport", "srun", "--python", sys.executable, "--backend", "gloo", "--max-bytes", "64K",
                       "--iters", "3", "--ifname", "eth0", "--deadline", "90", "--json", "--no-report",
                       "--profile", PROFILE, check=False, timeout=200, env=cluster.slurm_env())
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    doc = json.loads(p.stdout[p.stdout.index("{"):])
    res = {r["check"]: r for r in doc["results"]}
    assert res["nccl.allreduce"]["status"] == "pass", res["nccl.allreduce"]
    assert res["nccl.allreduce"]["facts"]["world"] == 2
    assert res["nccl.pingpong"]["status"] == "pass" and "n1<->n2" in res["nccl.pingpong"]["evidence"][0]
    assert doc["verdict"] == "GO" and p.returncode == 0


def test_a_node_without_torch_ends_the_srun_step_at_once(cluster: NetCluster, tmp_path: Path) -> None:
    """n2's python has no torch: it answers so before torchrun starts; the step ends in
    seconds naming n2. With no torch anywhere, `preflight sweep` cannot run (exit 2)."""
    import time

    need(Path("/usr/bin/python3").is_file(), "no /usr/bin/python3")
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nif [ "$(hostname)" = n2 ]; then exec /usr/bin/python3 "$@"; fi\n'
                       f'exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    args = ["--transport", "srun", "--backend", "gloo", "--max-bytes", "64K", "--iters", "3", "--ifname", "eth0",
            "--deadline", "90", "--json", "--no-report", "--profile", PROFILE]
    t = time.monotonic()
    p = cluster.client("salloc", "-N2", "--time=5", sys.executable, "-m", "preflight.cli", "sweep", "--python",
                       str(wrapper), *args, check=False, timeout=200, env=cluster.slurm_env())
    took = time.monotonic() - t
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    doc = json.loads(p.stdout[p.stdout.index("{"):])
    err = [r for r in doc["results"] if r["status"] == "error"]
    assert [r["node"] for r in err] == ["n2"] and "torch" in err[0]["summary"], doc["results"]
    assert p.returncode == 1 and took < 30, took
    p = cluster.client("salloc", "-N2", "--time=5", sys.executable, "-m", "preflight.cli", "sweep", "--python",
                       "/usr/bin/python3", *args, check=False, timeout=200, env=cluster.slurm_env())
    assert p.returncode == 2 and "torch is not importable" in p.stderr, p.stderr[-2000:]
