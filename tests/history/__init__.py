"""Helpers for the history tests: synthetic runs, a stateful fake scontrol, a private
PostgreSQL server."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from preflight.model import Result, Status

T0 = 1_790_000_000.0  # a fixed start time for synthetic runs (2026-09)
HOUR = 3600.0


def res(check: str, node: str, status: str, summary: str = "", **facts: Any) -> Result:
    return Result(check=check, node=node, status=Status(status), summary=summary or f"{check} {status}",
                  facts=dict(facts))


def xid_event(xid: int, when: str, pci: str = "0000:5d:00", count: int = 1) -> dict[str, Any]:
    return {"xid": xid, "pci": pci, "time": when, "count": count, "action": "RESTART_BM", "severity": "fail"}


def ports(down: bool) -> list[dict[str, Any]]:
    return [{"ca": f"mlx5_{i}", "port": 1, "state": "Down" if (down and i == 3) else "Active",
             "physical_state": "Polling" if (down and i == 3) else "LinkUp", "rate": 400,
             "link_layer": "InfiniBand"} for i in range(8)]


def sweep_rows(peak: float) -> list[dict[str, Any]]:
    rows = []
    for i, b in enumerate([1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28, 1 << 30]):
        bw = peak * (0.25 + 0.75 * i / 5)
        rows.append({"bytes": b, "time_us": b / (bw * 1e3) if bw else 0.0, "algbw": bw * 0.57, "busbw": bw,
                     "status": "pass"})
    return rows


FLAPPY = "PFFPFPFFPF"  # n2's ib.hca over ten runs: never three failures in a row
XID_RUNS = (3, 7)  # n3 logs a fresh Xid 79 in these runs (1-based)


def ten_runs() -> list[dict[str, Any]]:
    """Ten prologue-like runs on n1..n4 plus a sweep after each: n2's HCA port flaps, n3 logs
    Xid 79 twice (distinct events), n4's busbw sinks in the last run."""
    docs = []
    for i in range(10):
        t = T0 + i * HOUR
        results = []
        for node in ("n1", "n2", "n3", "n4"):
            down = node == "n2" and FLAPPY[i] == "F"
            results.append(res("ib.hca", node, "fail" if down else "pass",
                               "mlx5_3 port 1 Down" if down else "8/8 ports Active", ports=ports(down)))
            if node == "n3" and (i + 1) in XID_RUNS:
                results.append(res("gpu.xid", node, "fail", "GPU reset or reboot needed: Xid 79",
                                   events=[xid_event(79, f"2026-09-21T0{i}:00:00")]))
            else:
                results.append(res("gpu.xid", node, "pass", "no Xid", events=[]))
            peak = 360.0 - (60.0 if node == "n4" and i == 9 else 0.0) + i * 0.5
            results.append(res("nccl.allreduce", node, "pass", f"peak {peak}", avg_busbw=peak * 0.6,
                               peak_busbw=peak, rows=sweep_rows(peak), table="single_node", hosts=[node],
                               gpu_models=["NVIDIA H100 80GB HBM3"]))
        results.append(res("nccl.pingpong", "cluster", "pass", "pairs ok",
                           pairs=[{"a": "n1", "b": "n2", "status": "ok", "bw_gbps": 40.0 + i * 0.1, "lat_us": 3.0},
                                  {"a": "n3", "b": "n4", "status": "ok", "bw_gbps": 41.0, "lat_us": 3.1}]))
        docs.append({"command": "prologue", "started": _iso(t), "nodes": ["n1", "n2", "n3", "n4"],
                     "profiles": {n: "h100-sxm-8x" for n in ("n1", "n2", "n3", "n4")},
                     "duration_s": 1.5, "results": [r.to_dict() for r in results]})
    return docs


def _iso(ts: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


# ---- a fake scontrol that keeps node state ---------------------------------------------------

FAKE_SCONTROL = r'''#!{python}
"""scontrol show node -o NODE / update NodeName=N State=DRAIN|RESUME Reason=...: state in files."""
import os, sys
state_dir = {state!r}
args = sys.argv[1:]
with open(os.path.join(state_dir, "calls.log"), "a") as log:
    log.write(" ".join(args) + "\n")
def path(n):
    return os.path.join(state_dir, n + ".state")
if args[:2] == ["show", "node"]:
    for n in args[3].split(","):
        st, reason = "IDLE", ""
        if os.path.exists(path(n)):
            st, reason = open(path(n)).read().split("|", 1)
        line = f"NodeName={{n}} Arch=x86_64 CoresPerSocket=1 State={{st}} Partitions=batch"
        if reason:
            line += f" Reason={{reason}} [root@2026-09-21T10:00:00]"
        print(line)
    sys.exit(0)
if args[:1] == ["update"]:
    kv = dict(a.split("=", 1) for a in args[1:])
    n = kv["NodeName"]
    if kv.get("State") == "DRAIN":
        open(path(n), "w").write("IDLE+DRAIN|" + kv.get("Reason", ""))
    elif kv.get("State") == "RESUME":
        open(path(n), "w").write("IDLE|")
    sys.exit(0)
sys.exit(1)
'''


def fake_scontrol(folder: Path) -> Path:
    """A bin folder holding a stateful fake scontrol (state and call log in `folder`)."""
    bin_dir = folder / "sbin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "scontrol"
    script.write_text(FAKE_SCONTROL.format(python=sys.executable, state=str(folder)))
    script.chmod(0o755)
    return bin_dir


def node_state(folder: Path, node: str) -> tuple[str, str]:
    p = folder / f"{node}.state"
    if not p.exists():
        return "IDLE", ""
    st, reason = p.read_text().split("|", 1)
    return st, reason


# ---- a private PostgreSQL server ---------------------------------------------------------------


def pg_bin() -> Path | None:
    for base in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (base / "initdb").is_file() and (base / "pg_ctl").is_file():
            return base
    found = shutil.which("initdb")
    return Path(found).resolve().parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def postgres_server() -> Iterator[str]:
    """initdb + pg_ctl start in a temp folder as the `postgres` user (unix socket only);
    yields a postgresql:// URL; stops and removes everything after."""
    bindir = pg_bin()
    assert bindir is not None
    work = Path(tempfile.mkdtemp(prefix="hs-pg-", dir="/tmp"))
    os.chmod(work, 0o755)
    data, sock = work / "data", work / "sock"
    sock.mkdir()
    run_as: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(work, "postgres")
        shutil.chown(sock, "postgres")
        run_as = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    env = {**os.environ, "LC_ALL": "C"}
    try:
        subprocess.run([*run_as, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "preflight",
                        "--no-sync", "-E", "UTF8"], check=True, capture_output=True, timeout=120, env=env)
        opts = f"-k {sock} -c listen_addresses='' -p {port} -c fsync=off -c max_connections=40"
        subprocess.run([*run_as, str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(work / "log"),
                        "-w", "-t", "60", "start"], check=True, capture_output=True, timeout=90, env=env)
        subprocess.run([*run_as, str(bindir / "createdb"), "-h", str(sock), "-p", str(port), "-U", "preflight",
                        "history"], check=True, capture_output=True, timeout=60, env=env)
        yield f"postgresql://preflight@/history?host={sock}&port={port}"
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run([*run_as, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                           capture_output=True, timeout=60)
        shutil.rmtree(work, ignore_errors=True)
