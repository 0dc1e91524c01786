"""Local checkpoints across a real network link: two nodes of the namespace test cluster (network
namespaces on a bridge), one rank process per node inside its namespace (own hostname), a
TCPStore hosted by rank 0 and a gloo process group over the bridge. Each rank saves to its
node's folder and copies its shard to the other node; node n1's folder is then deleted (a
replacement node), both ranks start again, and rank 0 restores from n2's copy, bitwise."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from preflight.runtime.events import read_events
from tests.conftest import need
from tests.netcluster import ROOT, NetCluster, prerequisites

pytestmark = pytest.mark.real

PREFIX, SUBNET = "lcp", "10.66.24"  # apart from the other cluster tests' namespaces and subnets

RANK_PROGRAM = textwrap.dedent('''
    import hashlib, json, sys, time
    from datetime import timedelta
    from pathlib import Path

    import torch
    import torch.distributed as dist

    from preflight.runtime.events import EventWriter
    from preflight.runtime.localckpt import LocalCheckpointer

    rank, phase, local_dir, run_dir, master, port, out = sys.argv[1:8]
    rank, port = int(rank), int(port)

    def make_state(rank, step):
        g = torch.Generator().manual_seed(rank * 1000 + step)
        w = torch.randn(1 << 18, generator=g)
        w[:3] = torch.tensor([float("nan"), -0.0, 1e-45])
        return {"w": w, "b": torch.randn(33, generator=g).to(torch.bfloat16), "step": step, "rank": rank}

    def same_bits(a, b):
        return all(torch.equal(a[k].view(torch.uint8), b[k].view(torch.uint8)) for k in ("w", "b")) \\
            and a["step"] == b["step"] and a["rank"] == b["rank"]

    store = dist.TCPStore(master, port, 2, rank == 0, timeout=timedelta(seconds=30))
    dist.init_process_group("gloo", store=dist.PrefixStore("pg", store), rank=rank, world_size=2,
                            timeout=timedelta(seconds=30))
    lc = LocalCheckpointer(local_dir, store=dist.PrefixStore("ckpt", store), local_world_size=1,
                           events=EventWriter(run_dir, rank=rank), timeout_s=10, lookup_s=20)
    res = {"address": lc.address, "targets": lc.targets}
    if phase == "save":
        for step in (1, 2, 3):
            lc.save(step, make_state(rank, step))
        res["copied"] = lc.wait_copies(60)
        shard = Path(local_dir) / f"rank{rank}" / "step-00000003" / f"rank{rank}.pt"
        res["sha256"] = hashlib.sha256(shard.read_bytes()).hexdigest()
    else:
        res["restorable"] = {str(k): v for k, v in lc.restorable().items()}
        got = lc.load_latest()
        res["step"] = got and got[0]
        res["bitwise"] = bool(got) and same_bits(got[1], make_state(rank, 3))
        shard = Path(local_dir) / f"rank{rank}" / "step-00000003" / f"rank{rank}.pt"
        res["sha256"] = hashlib.sha256(shard.read_bytes()).hexdigest()
    dist.barrier()
    lc.close()
    dist.destroy_process_group()
    Path(out).write_text(json.dumps(res))
''')


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[NetCluster]:
    need(not prerequisites(), f"namespace cluster prerequisites: {prerequisites()}")
    c = NetCluster(2, tmp_path / "cluster", prefix=PREFIX, subnet=SUBNET)
    c.up([])
    try:
        yield c
    finally:
        c.down()


def run_both(c: NetCluster, work: Path, phase: str, port: int) -> dict[int, dict[str, Any]]:
    """Both ranks, each in its node's namespace under its node's hostname; bounded in time."""
    prog = work / "rank.py"
    prog.write_text(RANK_PROGRAM)
    master = c.nodes[0].addr
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GLOO_SOCKET_IFNAME": "eth0", "MASTER_ADDR": master,
           "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    procs = []
    for rank, node in enumerate(c.nodes):
        out = work / f"{phase}-rank{rank}.json"
        argv = [sys.executable, str(prog), str(rank), phase, str(work / node.name / "local"), str(work / "run"),
                master, str(port), str(out)]
        cmd = ["ip", "netns", "exec", node.ns, "unshare", "--uts", "sh", "-c",
               f'hostname {node.name} && exec "$@"', "sh", *argv]
        log = (work / f"{phase}-rank{rank}.log").open("w")
        procs.append((rank, out, log, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                                       start_new_session=True)))
    results = {}
    for rank, out, log, p in procs:
        try:
            p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
        log.close()
        text = (work / f"{phase}-rank{rank}.log").read_text()
        assert p.returncode == 0 and out.exists(), f"rank {rank} {phase} failed ({p.returncode}):\n{text[-3000:]}"
        results[rank] = json.loads(out.read_text())
    return results


def test_a_replacement_node_restores_its_shard_from_the_peer_node_bitwise(cluster: NetCluster, tmp_path: Path) -> None:
    work = tmp_path / "job"
    work.mkdir()
    n1, n2 = cluster.nodes
    saved = run_both(cluster, work, "save", 29511)
    assert saved[0]["targets"] == [1] and saved[1]["targets"] == [0]
    assert saved[0]["address"].startswith(f"{n1.addr}:") and saved[1]["address"].startswith(f"{n2.addr}:")
    assert saved[0]["copied"] and saved[1]["copied"]
    copy = work / "n2" / "local" / "peers" / "rank0" / "step-00000003" / "rank0.pt"
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == saved[0]["sha256"]
    events = [e for e in read_events(work / "run") if e["check"] == "runtime.checkpoint"]
    sent = [e for e in events if e["rank"] == 0 and "copied to rank 1" in e["summary"]]
    assert sent and all(e["facts"]["peer"].startswith(f"{n2.addr}:") for e in sent)  # over the bridge
    assert {e["node"] for e in events} == {"n1", "n2"}
    assert not [e for e in events if e["status"] != "pass"], [e["summary"] for e in events if e["status"] != "pass"]

    shutil.rmtree(work / "n1" / "local")  # node n1 is replaced: its local disk is empty
    restored = run_both(cluster, work, "restore", 29512)
    # only n2's copies (a copy still pending when a newer save comes is skipped: 3 is always there)
    assert restored[0]["restorable"]["3"] == [1] and all(v == [1] for v in restored[0]["restorable"].values())
    assert restored[1]["restorable"]["3"] == [None]  # its own; its copy on n1 was lost with the node
    assert restored[0]["step"] == restored[1]["step"] == 3
    assert restored[0]["bitwise"] and restored[1]["bitwise"]
    assert restored[0]["sha256"] == saved[0]["sha256"]  # the file itself is back, byte for byte
    resumed = {e["rank"]: e["facts"] for e in read_events(work / "run")
               if e["check"] == "runtime.checkpoint" and "resumed" in e["summary"]}
    assert resumed[0]["restored_from"].startswith(f"peer rank 1 ({n2.addr}:")
    assert resumed[1]["restored_from"] == "local"
