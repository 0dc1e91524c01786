"""Slurm tests: scontrol parsing and drain rules, the srun transport and the prologue, on a
real Slurm in the namespace test cluster (tests/netcluster.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.conftest import need
from tests.netcluster import ROOT, NetCluster, prerequisites, slurm_prerequisites

# A synthetic dmesg -T kernel log: boot noise, then a GPU that fell off the bus (Xid 79).
KMSG_XID79 = (
    "[Wed Mar 12 07:41:02 2025] Linux version 6.8.0-49-generic (buildd@lcy02-amd64-103) #49-Ubuntu SMP\n"
    "[Wed Mar 12 07:41:19 2025] nvidia-nvlink: Nvlink Core is being initialized, major device number 234\n"
    "[Wed Mar 12 07:41:20 2025] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.05\n"
    "[Wed Mar 12 09:13:48 2025] NVRM: GPU at PCI:0000:9a:00: GPU-5e2c81f4-77a0-3b1d-c0de-4a1f0b9e2d13\n"
    "[Wed Mar 12 09:13:48 2025] NVRM: Xid (PCI:0000:9a:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus.\n"
    "[Wed Mar 12 09:13:48 2025] NVRM: GPU 0000:9a:00.0: GPU has fallen off the bus.\n"
)
KMSG_CLEAN = (
    "[Wed Mar 12 07:41:02 2025] Linux version 6.8.0-49-generic (buildd@lcy02-amd64-103) #49-Ubuntu SMP\n"
    "[Wed Mar 12 07:41:20 2025] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.05\n"
)


def clean_kernel_logs(cluster: NetCluster) -> None:
    for node in cluster.nodes:
        cluster.scenario(node.name, {"dmesg": [{"match": ".*", "stdout": "kmsg.txt"}]}, {"kmsg.txt": KMSG_CLEAN})


@contextmanager
def slurm_cluster(workdir: Path, prefix: str, subnet: str, n: int = 4,
                  prolog: Path | None = None) -> Iterator[NetCluster]:
    """A namespace cluster with fake `dmesg` on every node and a running Slurm."""
    missing = prerequisites() + slurm_prerequisites()
    need(not missing, f"Slurm test cluster prerequisites missing: {', '.join(missing)}")
    c = NetCluster(n, workdir, prefix=prefix, subnet=subnet)
    try:
        c.up(["dmesg"])
        clean_kernel_logs(c)
        c.start_slurm(prolog=prolog)
        yield c
    finally:
        c.down()


def in_client(cluster: NetCluster, code: str, spec: dict[str, Any], limit: float = 120,
              env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run `code` (reads the JSON spec from argv[1], prints JSON) in the client namespace."""
    full = {**cluster.slurm_env(), "PYTHONPATH": str(ROOT), **(env or {})}
    p = cluster.client(sys.executable, "-c", code, json.dumps(spec), check=False, timeout=limit, env=full)
    assert p.returncode == 0, p.stderr[-3000:]
    out: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return out
