"""The sweep's node agent on this machine: it starts its ranks in process groups of their own
and, when its launcher goes away, ends them (and whatever they started) at once, says why, and
reports each rank's exit."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from preflight.sweep.spec import SweepSpec, parse_event
from tests.conftest import need

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.real


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_agent_ends_its_waiting_rank_when_the_launcher_goes_away() -> None:
    need(importlib.util.find_spec("torch") is not None, "torch is not installed")
    spec = SweepSpec(backend="gloo", min_bytes=8, max_bytes=8, iters=1, warmup=0, op_timeout_s=60, deadline_s=120,
                     heartbeat_s=0)
    # a world of 2 with one rank: rank 0 waits in init_process_group for a peer that never comes
    agent = subprocess.Popen([sys.executable, "-m", "preflight.sweep.worker", "agent", "--spec", spec.encode(),
                              "--node", "n1", "--node-rank", "0", "--nproc", "1", "--world", "2",
                              "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), "--watch-stdin"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert agent.stdin is not None and agent.stdout is not None
    events = []
    try:
        for raw in iter(agent.stdout.readline, b""):
            ev = parse_event(raw.decode())
            if ev is not None:
                events.append(ev)
                if ev.get("ev") == "hello":
                    break
        hello = next(e for e in events if e.get("ev") == "hello")
        assert hello["rank"] == 0 and _alive(hello["pid"])
        t0 = time.monotonic()
        agent.stdin.close()  # the launcher (or its SSH session) went away
        guard = threading.Timer(30, agent.kill)
        guard.start()
        rest = agent.stdout.read()
        agent.wait()
        guard.cancel()
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    took = time.monotonic() - t0
    events += [e for e in (parse_event(line) for line in rest.decode().splitlines()) if e is not None]
    kills = [e for e in events if e.get("ev") == "agent_kill"]
    assert kills == [{"ev": "agent_kill", "node": "n1", "reason": "the launcher went away (stdin closed)"}]
    (end,) = [e for e in events if e.get("ev") == "rank_exit"]
    assert end["rank"] == 0 and isinstance(end["rc"], int) and end["rc"] < 0  # ended by a signal, not by itself
    assert not _alive(hello["pid"]) and took < 15
    assert agent.returncode == 0
