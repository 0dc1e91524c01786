"""Triage across the namespace test cluster: a job hangs after one node's GPU falls off the bus.

Three faked 8xH100 nodes (real sshd). A small script writes each node's private run directory
(/run/job, in the node's own mount namespace) as the job left it: on n1 and n2, and for rank 4
on n3, PyTorch watchdog timeout lines for ALLREDUCE SeqNum 4410; rank 5 on n3 silent. n3's
kernel log gained an Xid 79 four minutes before. `preflight collect` over SSH, then `preflight
triage` (live and offline from the bundle in another folder) must name n3, category hardware,
action drain.
"""

from __future__ import annotations

import base64
import json
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import scenarios
from tests.conftest import need
from tests.netcluster import NetCluster, prerequisites, sh

pytestmark = pytest.mark.real

PREFLIGHT = [sys.executable, "-c", "from preflight.cli import main; main()"]
RUN_DIR = "/run/job"
SEQ = 4410
WRITE = ("import base64, json, os, sys\n"
         "files = json.loads(base64.b64decode(sys.argv[1]))\n"
         "os.makedirs(sys.argv[2], exist_ok=True)\n"
         "for name, text in files.items():\n"
         "    open(os.path.join(sys.argv[2], name), \"w\").write(text)\n")


def _timeout_line(rank: int) -> str:
    return (f"[rank{rank}]:[E1123 12:00:0{rank}.4{rank}1002 9{rank}11 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID "
            f"0(default_pg) Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={SEQ}, "
            f"OpType=ALLREDUCE, NumelIn=8388608, NumelOut=8388608, Timeout(ms)=600000) ran for 60001{rank} "
            "milliseconds before timing out.\n")


def _xid79(epoch: float) -> str:
    stamp = time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(epoch))
    return (f"[{stamp}] NVRM: GPU at PCI:0000:bb:00: GPU-5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9\n"
            f"[{stamp}] NVRM: Xid (PCI:0000:bb:00): 79, pid=0, GPU has fallen off the bus.\n")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    need(not prerequisites(), f"namespace cluster prerequisites: {prerequisites()}")
    c = NetCluster(3, tmp_path_factory.mktemp("triage"), prefix="tr", subnet="10.83.0")
    c.up(scenarios.TOOLS)
    try:
        for node in c.nodes[:2]:
            scenarios.healthy_h100(node.home / "scenario")
        scenarios.healthy_h100(c.node("n3").home / "scenario", scenarios.CLEAN_DMESG + _xid79(time.time() - 240))
        layout = {"n1": {0: True, 1: True}, "n2": {2: True, 3: True}, "n3": {4: True, 5: False}}
        for name, ranks in layout.items():
            files = {f"rank{r}.log": f"step {SEQ - 1} loss 1.9{r}\n" + (_timeout_line(r) if waits else "")
                     for r, waits in ranks.items()}
            arg = base64.b64encode(json.dumps(files).encode()).decode()
            ssh(c, name, "python3", "-c", f"'{WRITE}'", arg, RUN_DIR)
        yield c
    finally:
        c.down()


def ssh(c: NetCluster, node: str, *cmd: str) -> str:
    p = sh("ip", "netns", "exec", c.client_ns, "ssh", "-F", str(c.ssh_config), "-o", "BatchMode=yes",
           "-o", "ConnectTimeout=5", node, *cmd, timeout=30)
    return p.stdout


def run(c: NetCluster, *args: str, timeout: float = 120) -> tuple[int, str, float]:
    start = time.monotonic()
    p = c.client(*PREFLIGHT, *args, check=False, timeout=timeout)
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    return p.returncode, p.stdout, time.monotonic() - start


def _hardware_on_n3(doc: dict) -> None:
    assert doc["category"] == "hardware", doc["triage"]["summary"]
    assert [c["node"] for c in doc["culprits"]] == ["n3"], doc["culprits"]
    assert set(doc["culprits"][0]["ranks"]) == {4, 5}
    assert doc["action"].startswith("drain n3") and "--exclude=n3" in doc["action"]
    assert any("Xid" in e and "n3" in e for e in doc["evidence"])
    assert doc["triage"]["collective"] == {"op": "ALLREDUCE", "seq": SEQ}
    xid = {r["node"]: r["status"] for r in doc["results"] if r["check"] == "gpu.xid"}
    assert xid == {"n1": "pass", "n2": "pass", "n3": "fail"}


def test_collect_over_ssh_then_triage_offline_elsewhere(cluster: NetCluster, tmp_path: Path) -> None:
    bundle = cluster.workdir / "job.tar.gz"
    rc, _, took = run(cluster, "collect", "--hosts", "n[1-3]", "--run-dir", RUN_DIR, "--transport", "ssh",
                      "--ssh-config", str(cluster.ssh_config), "--connect-timeout", "5", "--command-timeout", "60",
                      "--deadline", "90", "-o", str(bundle))
    assert rc == 0 and bundle.is_file() and took < 90
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(bundle, elsewhere / "copy.tar.gz")
    rc, out, _ = run(cluster, "triage", str(elsewhere / "copy.tar.gz"), "--json", "-o", str(elsewhere / "rep"))
    assert rc == 1
    offline = json.loads(out)
    _hardware_on_n3(offline)
    assert (elsewhere / "rep" / "triage.md").read_text().startswith("# preflight triage: hardware")
    # live: collect and triage in one command gives the same verdict
    rc, out, took = run(cluster, "triage", "--hosts", "n[1-3]", "--run-dir", RUN_DIR, "--transport", "ssh",
                        "--ssh-config", str(cluster.ssh_config), "--json")
    live = json.loads(out)
    _hardware_on_n3(live)
    assert (live["category"], live["culprits"], live["action"]) == \
        (offline["category"], offline["culprits"], offline["action"])
