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
    """srun starts one torchrun per node (through the worker's `torchrun` door, which first
    answers like an agent: node, interpreter, torch); torchrun's c10d rendezvous assigns the ranks."""
    argv = ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
            f"--time={max(1, int(spec.deadline_s // 60) + 1)}", "--unbuffered"]
    if partition:
        argv.append(f"--partition={check_name(partition)}")
    if spec.socket_ifname:
        argv.append(f"--export=ALL,GLOO_SOCKET_IFNAME={spec.socket_ifname},NCCL_SOCKET_IFNAME={spec.socket_ifname}")
    argv += [check_python(python), "-m", "preflight.sweep.worker", "torchrun", "--", f"--nnodes={nodes}",
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
class Watch:
    """How the launcher watches the node agents it started (a timer of 0 is off).

    An agent answers first thing (an `agent` line: its node, interpreter, whether torch is
    there), then beats every few seconds. A node fails its launch when its process ends
    before the agent answered (ssh refused, no python), ends with an error later (the session
    dropped), says it cannot run the ranks (`unfit`: no torch), gives no answer within
    `start_s`, or goes silent for `stall_s` (its link or session stalled). The first failure
    ends the launch: the others get `grace_s` to answer (so the report can say who was fine),
    then every process is stopped."""

    nodes: dict[str, list[str]] = field(default_factory=dict)  # process label -> the nodes it starts
    start_s: float = 0.0
    stall_s: float = 0.0
    grace_s: float = 5.0
    exit_is_failure: bool = True  # an agent's error exit is a failure (srun: torchrun's exit is the ranks')


@dataclass
class Failure:
    """A node whose agent could not start or was lost: the cause in a few words, and the
    launcher's own message (the ssh or python line) as evidence."""

    node: str
    cause: str
    message: str
    lines: list[str] = field(default_factory=list)
    rc: int | None = None
    after_s: float = 0.0
    started: bool = False  # its agent had answered before the failure

    def summary(self) -> str:
        return f"{self.cause}: {self.message}" if self.message and self.message != self.cause else self.cause


@dataclass
class Launched:
    """What came back from a launch: events in arrival order, raw lines per process."""

    events: list[dict[str, Any]] = field(default_factory=list)
    raw: dict[str, list[str]] = field(default_factory=dict)  # process label -> non-event lines
    rc: dict[str, int | None] = field(default_factory=dict)
    timed_out: bool = False
    seconds: float = 0.0
    argv: dict[str, list[str]] = field(default_factory=dict)
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> its agent's first line
    failures: list[Failure] = field(default_factory=list)  # in the order they were seen


@dataclass
class _Proc:
    label: str
    argv: list[str]
    popen: subprocess.Popen[bytes] | None = None
    error: str = ""


# The launcher's own words, mapped to a cause an operator acts on (first match wins).
_CAUSES: list[tuple[re.Pattern[str], str]] = [(re.compile(p, re.I), c) for p, c in (
    (r"host key verification failed|remote host identification has changed|host key for .* has changed|"
     r"no \S+ host key is known", "host key refused"),
    (r"connection refused", "ssh connection refused (sshd not running?)"),
    (r"connection timed out|operation timed out|timed out during banner|connection to \S+ port \d+ timed out",
     "ssh connection timed out"),
    (r"no route to host|network is unreachable", "node unreachable"),
    (r"could not resolve hostname|name or service not known|temporary failure in name resolution",
     "unknown host name"),
    (r"permission denied|too many authentication failures", "ssh login refused"),
    (r"no module named '?preflight", "preflight is not installed for this python"),
    (r"no module named '?torch", "torch is not installed for this python"),
    (r"command not found|no such file or directory|not found", "python not found"),
    (r"connection closed|connection reset|broken pipe|closed by remote host|timeout, server .* not responding",
     "connection lost"),
)]


def classify(lines: Sequence[str], rc: int | None) -> tuple[str, str]:
    """(cause, message): the cause of a failed agent from its launcher's lines and exit code."""
    text = [ln.strip().strip("@").strip() for ln in lines if ln.strip().strip("@").strip()]
    for line in text:
        for pat, cause in _CAUSES:
            if pat.search(line):
                # the last line of that kind is ssh's verdict ("Host key verification failed.")
                last = [ln for ln in text if pat.search(ln)][-1]
                return cause, last[:300]
    last = text[-1][:300] if text else "no output"
    if rc is None:
        return "no exit status", last
    if rc < 0:
        return f"ended by signal {-rc}", last
    return f"exited with code {rc}", last


def run_processes(cmds: dict[str, list[str]], deadline_s: float, env: dict[str, str] | None = None,
                  grace_s: float = 5.0, watch: Watch | None = None) -> Launched:
    """Start every command (own process group), read their lines, kill whatever is left at
    the deadline; never blocks longer than deadline_s + a few seconds. With `watch`, the first
    node that fails its launch ends the whole launch within seconds (see `Watch`)."""
    out = Launched(argv=dict(cmds))
    w = watch or Watch()
    q: queue.Queue[tuple[str, str | None]] = queue.Queue()
    procs: list[_Proc] = []
    start = time.monotonic()
    nodes_of = {label: list(w.nodes.get(label) or ([label] if watch else [])) for label in cmds}
    label_of = {n: label for label, ns in nodes_of.items() for n in ns}
    seen: dict[str, float] = {n: start for n in label_of}  # last sign of life per node
    failed: dict[str, Failure] = {}
    first_failure: float | None = None
    for label, argv in cmds.items():
        pr = _Proc(label, argv)
        try:
            pr.popen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        stdin=subprocess.PIPE, env=env, start_new_session=True)
        except OSError as exc:
            pr.error = f"cannot start {argv[0]}: {exc.strerror or exc}"
            out.raw[label] = [pr.error]
            out.rc[label] = None
            for n in nodes_of[label]:
                failed[n] = Failure(n, f"cannot start {argv[0]}", pr.error, [pr.error])
                out.failures.append(failed[n])
        procs.append(pr)
        if pr.popen is not None:
            threading.Thread(target=_reader, args=(pr, q), daemon=True).start()
    by_label = {p.label: p for p in procs}
    live = {p.label for p in procs if p.popen is not None}
    deadline = start + deadline_s

    def fail(node: str, cause: str, message: str, rc: int | None = None, lines: list[str] | None = None,
             started: bool | None = None) -> None:
        nonlocal first_failure
        if node in failed:
            return
        f = Failure(node, cause, message, list(lines or [])[-8:], rc, round(time.monotonic() - start, 2),
                    node in out.agents if started is None else started)
        failed[node] = f
        out.failures.append(f)
        if first_failure is None:
            first_failure = time.monotonic()

    def ended(label: str) -> None:
        pr = by_label[label]
        assert pr.popen is not None
        try:
            rc = pr.popen.wait(timeout=2)
        except subprocess.TimeoutExpired:
            rc = None
        lines = out.raw.get(label, [])
        for n in nodes_of[label]:
            if n in failed:
                continue
            if len(nodes_of[label]) > 1 and first_failure is not None:
                continue  # srun ended every task after one failed: the others were not checked
            if n not in out.agents:
                cause, msg = classify(lines, rc)
                fail(n, cause, msg, rc, lines)
            elif w.exit_is_failure and rc not in (0, None):
                cause, msg = classify(lines, rc)
                if cause.startswith(("exited", "ended", "no exit")):
                    cause = f"its agent's connection ended ({cause})"
                fail(n, cause, msg, rc, lines)

    while live:
        now = time.monotonic()
        try:
            label, line = q.get(timeout=max(0.05, min(0.25, deadline - now)))
        except queue.Empty:
            label, line = "", ""
        now = time.monotonic()
        if label and line is None:
            live.discard(label)
            if watch:
                ended(label)
        elif label and line is not None:
            for n in nodes_of.get(label, []) if len(nodes_of.get(label, [])) == 1 else []:
                seen[n] = now
            ev = parse_event(line)
            if ev is not None:
                ev.setdefault("_from", label)
                out.events.append(ev)
                node = str(ev.get("node", ""))
                if node in seen:
                    seen[node] = now
                if ev.get("ev") == "agent" and node:
                    out.agents.setdefault(node, ev)
                elif ev.get("ev") == "unfit" and node and watch:
                    fail(node, "torch is not installed for this python" if ev.get("missing") == "torch"
                         else "cannot run the ranks", str(ev.get("error", "")), started=False)
            elif line.strip():
                out.raw.setdefault(label, []).append(line)
        if watch:
            for n, lab in label_of.items():
                if n in failed or lab not in live:
                    continue
                if n not in out.agents and w.start_s and now - start > w.start_s:
                    lines = out.raw.get(lab, [])
                    fail(n, "no answer", f"no answer from {n}'s agent within {w.start_s:g} s"
                         + (f" (last line: {lines[-1].strip()[:200]})" if lines else " and no output at all: "
                            "the session stalled (MTU black hole?) or the node hangs"), None, lines)
                elif (n in out.agents and w.stall_s and float(out.agents[n].get("beat_s") or 0) > 0
                      and now - seen[n] > w.stall_s):  # only agents that beat can be silent
                    fail(n, "output stalled", f"no bytes from {n} for {now - seen[n]:.0f} s while its session "
                         "was open (heartbeats stopped): the link stalls (MTU black hole?) or the node hangs")
            if first_failure is not None:
                waiting = [n for n, lab in label_of.items()
                           if n not in failed and n not in out.agents and lab in live]
                if not waiting or now - first_failure >= w.grace_s:
                    break
        if now > deadline:
            out.timed_out = True
            break
    _stop_all([p.popen for p in procs if p.popen is not None and p.popen.poll() is None], grace_s)
    for pr in procs:
        if pr.popen is None:
            continue
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
            if ev.get("ev") == "agent" and ev.get("node"):
                out.agents.setdefault(str(ev["node"]), ev)
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


def _stop_all(popens: list[subprocess.Popen[bytes]], grace_s: float) -> None:
    """Stop several launches at once: close every stdin (an agent then stops its ranks), then
    SIGTERM, then SIGKILL the process groups still there; at most about grace_s + 2 s."""
    for p in popens:
        try:
            if p.stdin:
                p.stdin.close()
        except OSError:
            pass
    for sig, wait in ((None, 0.5), (signal.SIGTERM, min(grace_s, 2.0)), (signal.SIGKILL, grace_s)):
        left = [p for p in popens if p.poll() is None]
        if not left:
            return
        if sig is not None:
            for p in left:
                try:
                    os.killpg(p.pid, sig)
                except OSError:
                    pass
        end = time.monotonic() + wait
        while time.monotonic() < end and any(p.poll() is None for p in left):
            time.sleep(0.05)


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


def _with_preflight_path(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a local agent under another interpreter (--sweep-python): the
    folder this preflight is imported from goes last on PYTHONPATH, so the job's python runs
    the agent without preflight being installed in its environment (its own packages first)."""
    import preflight

    env = dict(os.environ if env is None else env)
    here = str(Path(preflight.__file__).resolve().parent.parent)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if here not in parts:
        parts.append(here)
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def launch_local(spec: SweepSpec, nproc: int, python: str, node: str = "localhost",
                 master_port: int | None = None, start_s: float = 30.0, stall_s: float = 20.0) -> Launched:
    """All ranks on this machine: one agent with nproc ranks."""
    spec.nodes = [node]
    spec.deadline_epoch = time.time() + spec.deadline_s - 2
    argv = agent_argv(python, spec, node, 0, nproc, nproc, "127.0.0.1", master_port or free_port())
    return run_processes({node: argv}, spec.deadline_s, env=_with_preflight_path(),
                         watch=Watch(nodes={node: [node]}, start_s=start_s, stall_s=stall_s))


def launch_ssh(spec: SweepSpec, nodes: list[str], nproc_per_node: int, ssh_config: Path | None,
               python: str = "python3", master_addr: str | None = None, master_port: int | None = None,
               connect_timeout: float = 10.0, accept_new: bool = False, start_s: float | None = None,
               stall_s: float = 20.0) -> Launched:
    """One agent per node over SSH; node 0 hosts the rendezvous store. A node whose agent
    cannot start (ssh refused, host key, no python or torch, a stalled session) ends the
    launch within seconds, named with ssh's own message."""
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
    watch = Watch(nodes={n: [n] for n in nodes}, start_s=start_s if start_s is not None else connect_timeout + 10,
                  stall_s=stall_s)
    return run_processes(cmds, spec.deadline_s + connect_timeout, watch=watch)


def launch_srun(spec: SweepSpec, nodes: list[str], nproc_per_node: int, python: str = "python3",
                partition: str | None = None, rdzv_port: int | None = None, start_s: float = 60.0) -> Launched:
    """Inside an allocation: srun + torchrun; the first node hosts the c10d rendezvous. Each
    node answers before torchrun starts, so a node without torch ends the step at once."""
    spec.nodes = list(nodes)
    spec.deadline_epoch = time.time() + spec.deadline_s - 2
    rid = f"pfsweep{os.environ.get('SLURM_JOB_ID', '0')}{random.randint(0, 9999)}"
    argv = srun_argv(len(nodes), nproc_per_node, spec, slurm_address(nodes[0]), rdzv_port or free_port(), rid,
                     python, partition)
    watch = Watch(nodes={"srun": list(nodes)}, start_s=start_s, exit_is_failure=False)
    return run_processes({"srun": argv}, spec.deadline_s + 10, watch=watch)
