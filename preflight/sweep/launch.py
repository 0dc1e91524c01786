"""Starting the ranks: locally, over SSH (one agent per node), or inside a Slurm allocation
(srun + torchrun with c10d rendezvous); and the outer watchdog that ends every launch by its
deadline, whatever the ranks do.

Command lines are built from validated names and quoted (no shell string is made from raw
input). The launcher only reads event lines; what they mean is decided in `outcome`.
"""

from __future__ import annotations

import os
import queue
import random
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from preflight.sweep.spec import SweepSpec, parse_event

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}$")
_SAFE_IFNAME = re.compile(r"^[A-Za-z0-9^_.:,=-]{1,200}$")
_SAFE_PY = re.compile(r"^[A-Za-z0-9_./+-]{1,400}$")


class LaunchError(ValueError):
    """A launch that cannot be built (bad node name, interface, python path)."""


def check_name(node: str) -> str:
    if not _SAFE_NAME.match(node):
        raise LaunchError(f"node name {node!r} is not a plain host name")
    return node


def check_ifname(name: str) -> str:
    if name and not _SAFE_IFNAME.match(name):
        raise LaunchError(f"interface {name!r} is not a plain interface list")
    return name


def check_python(python: str) -> str:
    if not _SAFE_PY.match(python):
        raise LaunchError(f"remote python {python!r} is not a plain path")
    return python


def free_port() -> int:
    """A port for the rendezvous store (random, so parallel runs rarely meet)."""
    return random.randint(20000, 39999)


def agent_argv(python: str, spec: SweepSpec, node: str, node_rank: int, nproc: int, world: int,
               master_addr: str, master_port: int) -> list[str]:
    return [check_python(python), "-m", "preflight.sweep.worker", "agent", "--spec", spec.encode(),
            "--node", check_name(node), "--node-rank", str(node_rank), "--nproc", str(nproc),
            "--world", str(world), "--master-addr", check_name(master_addr), "--master-port", str(master_port),
            "--watch-stdin"]


def ssh_argv(node: str, remote: Sequence[str], ssh_config: Path | None = None, connect_timeout: float = 10.0,
             accept_new: bool = False) -> list[str]:
    """The system ssh client, non-interactive; the remote command is one quoted string."""
    argv = ["ssh"]
    if ssh_config is not None:
        argv += ["-F", str(ssh_config)]
    argv += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(connect_timeout))}",
             "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]
    if accept_new:
        argv += ["-o", "StrictHostKeyChecking=accept-new"]
    return [*argv, "--", check_name(node), shlex.join(list(remote))]


def srun_argv(nodes: int, nproc_per_node: int, spec: SweepSpec, rdzv_host: str, rdzv_port: int, rdzv_id: str,
              python: str = "python3", partition: str | None = None) -> list[str]:
    """srun starts one torchrun per node; torchrun's c10d rendezvous assigns the ranks."""
    argv = ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
            f"--time={max(1, int(spec.deadline_s // 60) + 1)}", "--unbuffered"]
    if partition:
        argv.append(f"--partition={check_name(partition)}")
    if spec.socket_ifname:
        argv.append(f"--export=ALL,GLOO_SOCKET_IFNAME={spec.socket_ifname},NCCL_SOCKET_IFNAME={spec.socket_ifname}")
    argv += [check_python(python), "-m", "torch.distributed.run", f"--nnodes={nodes}",
             f"--nproc-per-node={nproc_per_node}", "--rdzv-backend=c10d",
             f"--rdzv-endpoint={check_name(rdzv_host)}:{rdzv_port}", f"--rdzv-id={check_name(rdzv_id)}",
             "--max-restarts=0", "-m", "preflight.sweep.worker", "rank", "--spec", spec.encode()]
    return argv


def slurm_address(node: str) -> str:
    """The address Slurm knows `node` by (NodeAddr), where the other nodes reach its rendezvous."""
    from preflight.slurm import SlurmError, show_nodes

    try:
        info = show_nodes([node]).get(node)
    except (SlurmError, OSError):
        return node
    addr = (info.fields.get("NodeAddr") or "").split() if info else []
    return addr[0] if addr else node


def resolve_address(node: str, ssh_config: Path | None) -> str:
    """The address the other nodes reach `node` at: the ssh config's HostName (ssh -G)."""
    argv = ["ssh"] + (["-F", str(ssh_config)] if ssh_config else []) + ["-G", "--", check_name(node)]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return node
    for line in p.stdout.splitlines():
        k, _, v = line.partition(" ")
        if k == "hostname" and v.strip():
            return v.strip()
    return node


@dataclass
class Launched:
    """What came back from a launch: events in arrival order, raw lines per process."""

    events: list[dict[str, Any]] = field(default_factory=list)
    raw: dict[str, list[str]] = field(default_factory=dict)  # process label -> non-event lines
    rc: dict[str, int | None] = field(default_factory=dict)
    timed_out: bool = False
    seconds: float = 0.0
    argv: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class _Proc:
    label: str
    argv: list[str]
    popen: subprocess.Popen[bytes] | None = None
    error: str = ""


def run_processes(cmds: dict[str, list[str]], deadline_s: float, env: dict[str, str] | None = None,
                  grace_s: float = 5.0) -> Launched:
    """Start every command (own process group), read their lines, kill whatever is left at
    the deadline; never blocks longer than deadline_s + a few seconds."""
    out = Launched(argv=dict(cmds))
    q: queue.Queue[tuple[str, str | None]] = queue.Queue()
    procs: list[_Proc] = []
    start = time.monotonic()
    for label, argv in cmds.items():
        pr = _Proc(label, argv)
        try:
            pr.popen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        stdin=subprocess.PIPE, env=env, start_new_session=True)
        except OSError as exc:
            pr.error = f"cannot start {argv[0]}: {exc.strerror or exc}"
            out.raw[label] = [pr.error]
            out.rc[label] = None
        procs.append(pr)
        if pr.popen is not None:
            threading.Thread(target=_reader, args=(pr, q), daemon=True).start()
    live = {p.label for p in procs if p.popen is not None}
    deadline = start + deadline_s
    while live:
        try:
            label, line = q.get(timeout=max(0.05, min(0.5, deadline - time.monotonic())))
        except queue.Empty:
            if time.monotonic() > deadline:
                out.timed_out = True
                break
            continue
        if line is None:
            live.discard(label)
            continue
        ev = parse_event(line)
        if ev is not None:
            ev.setdefault("_from", label)
            out.events.append(ev)
        elif line.strip():
            out.raw.setdefault(label, []).append(line)
    for pr in procs:
        if pr.popen is None:
            continue
        if out.timed_out and pr.popen.poll() is None:
            _stop(pr.popen, grace_s)
        try:
            if pr.popen.stdin:
                pr.popen.stdin.close()
        except OSError:
            pass
        try:
            pr.popen.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            _stop(pr.popen, 1.0)
        out.rc[pr.label] = pr.popen.poll()
    # lines still queued after the processes ended
    while True:
        try:
            label, line = q.get_nowait()
        except queue.Empty:
            break
        if line is None:
            continue
        ev = parse_event(line)
        if ev is not None:
            ev.setdefault("_from", label)
            out.events.append(ev)
        elif line.strip():
            out.raw.setdefault(label, []).append(line)
    out.seconds = time.monotonic() - start
    return out


def _reader(pr: _Proc, q: queue.Queue[tuple[str, str | None]]) -> None:
    assert pr.popen is not None and pr.popen.stdout is not None
    try:
        for raw in iter(pr.popen.stdout.readline, b""):
            q.put((pr.label, raw.decode("utf-8", "replace").rstrip("\n")))
    except (OSError, ValueError):
        pass
    q.put((pr.label, None))


def _stop(p: subprocess.Popen[bytes], grace_s: float) -> None:
    """Closing stdin tells an agent to stop its ranks; then SIGTERM, then SIGKILL the group."""
    try:
        if p.stdin:
            p.stdin.close()
    except OSError:
        pass
    for sig, wait in ((signal.SIGTERM, min(grace_s, 2.0)), (signal.SIGKILL, grace_s)):
        try:
            os.killpg(p.pid, sig)
        except OSError:
            return
        try:
            p.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def launch_local(spec: SweepSpec, nproc: int, python: str, node: str = "localhost",
                 master_port: int | None = None) -> Launched:
    """All ranks on this machine: one agent with nproc ranks."""
    spec.nodes = [node]
    spec.deadline_epoch = time.time() + spec.deadline_s - 2
    argv = agent_argv(python, spec, node, 0, nproc, nproc, "127.0.0.1", master_port or free_port())
    return run_processes({node: argv}, spec.deadline_s)


def launch_ssh(spec: SweepSpec, nodes: list[str], nproc_per_node: int, ssh_config: Path | None,
               python: str = "python3", master_addr: str | None = None, master_port: int | None = None,
               connect_timeout: float = 10.0, accept_new: bool = False) -> Launched:
    """One agent per node over SSH; node 0 hosts the rendezvous store."""
    for n in nodes:
        check_name(n)
    spec.nodes = list(nodes)
    addr = master_addr or resolve_address(nodes[0], ssh_config)
    port = master_port or free_port()
    spec.deadline_epoch = time.time() + spec.deadline_s - 2
    world = len(nodes) * nproc_per_node
    cmds = {n: ssh_argv(n, agent_argv(python, spec, n, i, nproc_per_node, world, addr, port), ssh_config,
                        connect_timeout, accept_new)
            for i, n in enumerate(nodes)}
    return run_processes(cmds, spec.deadline_s + connect_timeout)


def launch_srun(spec: SweepSpec, nodes: list[str], nproc_per_node: int, python: str = "python3",
                partition: str | None = None, rdzv_port: int | None = None) -> Launched:
    """Inside an allocation: srun + torchrun; the first node hosts the c10d rendezvous."""
    spec.nodes = list(nodes)
    spec.deadline_epoch = time.time() + spec.deadline_s - 2
    rid = f"pfsweep{os.environ.get('SLURM_JOB_ID', '0')}{random.randint(0, 9999)}"
    argv = srun_argv(len(nodes), nproc_per_node, spec, slurm_address(nodes[0]), rdzv_port or free_port(), rid,
                     python, partition)
    return run_processes({"srun": argv}, spec.deadline_s + 10)
