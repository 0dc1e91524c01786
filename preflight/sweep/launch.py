"""Starting the ranks: locally, over SSH (one agent per node, through the SSH transport's
sessions), or inside a Slurm allocation (srun + torchrun with c10d rendezvous); and the outer
watchdog that ends every launch by its deadline, whatever the ranks do.

Command lines are built from validated names and quoted (no shell string is made from raw
input). The launcher only reads event lines; what they mean is decided in `outcome`.
"""

from __future__ import annotations

import os
import queue
import random
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from preflight import inventory, lazyre, procs
from preflight.slurm import node_addresses
from preflight.sweep.spec import SweepSpec, event_line, parse_event
from preflight.transport.base import NodeOutcome, stalled

_SAFE_IFNAME = lazyre.compile(r"^[A-Za-z0-9^_.:,=-]{1,200}$")
_SAFE_PY = lazyre.compile(r"^[A-Za-z0-9_./+-]{1,400}$")


class LaunchError(ValueError):
    """A launch that cannot be built (bad node name, interface, python path)."""


def check_name(node: str) -> str:
    """The node name itself when it is a plain host name or address (preflight.inventory's rule)."""
    try:
        return inventory.check_name(node)
    except ValueError as exc:
        raise LaunchError(str(exc)) from None


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


# What an ssh fault (its kind, see preflight.transport.ssh) means for the launch.
_SSH_CAUSES = {
    "hostkey-unknown": "host key refused",
    "hostkey-changed": "host key refused",
    "refused": "ssh connection refused (sshd not running?)",
    "timeout": "ssh connection timed out",
    "deadline": "ssh connection timed out",
    "unreachable": "node unreachable",
    "dns": "unknown host name",
    "auth": "ssh login refused",
    "disconnected": "connection lost",
    "config": "ssh configuration unusable",
    "remote-error": "its agent ended without an exit status",
}


# The launcher's own words, mapped to a cause an operator acts on (first match wins).
_CAUSES: list[tuple[re.Pattern[str], str]] = [(lazyre.compile(p, re.I), c) for p, c in (
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


STALLED = "ssh session stalled (MTU black hole?)"


def ssh_cause(failure: NodeOutcome) -> tuple[str, str]:
    """(cause, message) for an agent the SSH transport could not start or lost: the
    transport's own sentence, under the cause its fault kind means. A session that timed out
    after the TCP connect and the banner (key exchange, authentication, the command's start) or
    that stalled while open is `STALLED`: large packets are dropped on the path."""
    if stalled(failure.detail):
        return STALLED, failure.error[:600]
    kind = failure.detail.get("kind", "")
    return _SSH_CAUSES.get(kind, f"ssh failed ({kind or 'unknown fault'})"), failure.error[:600]


class Agent(Protocol):
    """What the launcher watches: a local process group or a command on a node over SSH
    (`preflight.transport.ssh.RemoteProcess`). Lines arrive on the launch's queue."""

    argv: list[str]

    @property
    def returncode(self) -> int | None: ...

    @property
    def failure(self) -> NodeOutcome | None: ...

    def running(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...

    def close_stdin(self) -> None: ...

    def stop(self, grace_s: float = 2.0) -> None: ...


_Lines = queue.Queue[tuple[str, str | None]]  # (process label, line); line None: its output ended


class LocalAgent:
    """A local child in its own process group, its stdout and stderr lines read by a thread."""

    failure: NodeOutcome | None = None  # a local child's faults are in its lines and exit code

    def __init__(self, label: str, argv: list[str], lines: _Lines, env: dict[str, str] | None = None) -> None:
        """Start it; OSError when the program cannot be started."""
        self.argv = argv
        self.popen = procs.spawn(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT)
        threading.Thread(target=self._read, args=(label, lines), daemon=True).start()

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def _read(self, label: str, lines: _Lines) -> None:
        assert self.popen.stdout is not None
        try:
            for raw in iter(self.popen.stdout.readline, b""):
                lines.put((label, raw.decode("utf-8", "replace").rstrip("\n")))
        except (OSError, ValueError):
            pass
        lines.put((label, None))

    def running(self) -> bool:
        return self.popen.poll() is None

    def wait(self, timeout: float | None = None) -> bool:
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def close_stdin(self) -> None:
        """Closing stdin tells an agent to stop its ranks."""
        try:
            if self.popen.stdin:
                self.popen.stdin.close()
        except OSError:
            pass

    def stop(self, grace_s: float = 2.0) -> None:
        self.close_stdin()
        procs.stop_group(self.popen, grace_s)


@dataclass
class _Board:
    """One watched launch: what came back so far and each node's state, shared by the steps
    of `watch_agents`."""

    out: Launched
    w: Watch
    watching: bool  # a Watch was given: node failures end the launch
    nodes_of: dict[str, list[str]]  # process label -> the nodes it starts
    start: float = field(default_factory=time.monotonic)
    failed: dict[str, Failure] = field(default_factory=dict)
    first_failure: float | None = None
    label_of: dict[str, str] = field(init=False)
    seen: dict[str, float] = field(init=False)  # last sign of life per node

    def __post_init__(self) -> None:
        self.label_of = {n: label for label, ns in self.nodes_of.items() for n in ns}
        self.seen = dict.fromkeys(self.label_of, self.start)

    def fail(self, node: str, cause: str, message: str, rc: int | None = None, lines: list[str] | None = None,
             started: bool | None = None) -> None:
        if node in self.failed:
            return
        f = Failure(node, cause, message, list(lines or [])[-8:], rc, round(time.monotonic() - self.start, 2),
                    node in self.out.agents if started is None else started)
        self.failed[node] = f
        self.out.failures.append(f)
        if self.first_failure is None:
            self.first_failure = time.monotonic()

    def cannot_start(self, label: str, program: str, error: str) -> None:
        self.out.raw[label] = [error]
        self.out.rc[label] = None
        for n in self.nodes_of[label]:
            self.failed[n] = Failure(n, f"cannot start {program}", error, [error])
            self.out.failures.append(self.failed[n])

    def take(self, label: str, line: str, now: float, judge: bool = True) -> None:
        """One line from a process: an event (an agent's answer, beat, unfit) or raw text."""
        nodes = self.nodes_of.get(label, [])
        if len(nodes) == 1:
            self.seen[nodes[0]] = now
        ev = parse_event(line)
        if ev is None:
            if line.strip():
                self.out.raw.setdefault(label, []).append(line)
            return
        if ev.get("ev") == "path":
            return  # the launch's path check (see path_checked): it arrived, nothing to keep
        ev.setdefault("_from", label)
        self.out.events.append(ev)
        node = str(ev.get("node", ""))
        if node in self.seen:
            self.seen[node] = now
        if ev.get("ev") == "agent" and node:
            self.out.agents.setdefault(node, ev)
        elif ev.get("ev") == "unfit" and node and judge and self.watching:
            self.fail(node, "torch is not installed for this python" if ev.get("missing") == "torch"
                      else "cannot run the ranks", str(ev.get("error", "")), started=False)

    def ended(self, label: str, agent: Agent) -> None:
        """A process's output ended: a node whose agent never answered, or that ended badly, fails."""
        rc = agent.returncode if agent.wait(2) else None
        lines = self.out.raw.get(label, [])
        nodes = self.nodes_of[label]
        fault = ssh_cause(agent.failure) if agent.failure is not None else None
        for n in nodes:
            if n in self.failed or (len(nodes) > 1 and self.first_failure is not None):
                continue  # (srun ended every task after one failed: the others were not checked)
            if fault is not None:
                self.fail(n, *fault, rc, lines)
            elif n not in self.out.agents:
                self.fail(n, *classify(lines, rc), rc, lines)
            elif self.w.exit_is_failure and rc not in (0, None):
                cause, msg = classify(lines, rc)
                if cause.startswith(("exited", "ended", "no exit")):
                    cause = f"its agent's connection ended ({cause})"
                self.fail(n, cause, msg, rc, lines)

    def check_timers(self, now: float, live: set[str]) -> None:
        """Fail the nodes whose agent did not answer within start_s or went silent for stall_s."""
        w = self.w
        for n, lab in self.label_of.items():
            if n in self.failed or lab not in live:
                continue
            if n not in self.out.agents and w.start_s and now - self.start > w.start_s:
                lines = self.out.raw.get(lab, [])
                self.fail(n, "no answer", f"no answer from {n}'s agent within {w.start_s:g} s"
                          + (f" (last line: {lines[-1].strip()[:200]})" if lines else " and no output at all: "
                             "the session stalled (MTU black hole?) or the node hangs"), None, lines)
            elif (n in self.out.agents and w.stall_s and float(self.out.agents[n].get("beat_s") or 0) > 0
                  and now - self.seen[n] > w.stall_s):  # only agents that beat can be silent
                self.fail(n, "output stalled", f"no bytes from {n} for {now - self.seen[n]:.0f} s while its session "
                          "was open (heartbeats stopped): the link stalls (MTU black hole?) or the node hangs")

    def settled(self, now: float, live: set[str]) -> bool:
        """After the first failure: every other node has answered, or had grace_s to."""
        if self.first_failure is None:
            return False
        waiting = [n for n, lab in self.label_of.items()
                   if n not in self.failed and n not in self.out.agents and lab in live]
        return not waiting or now - self.first_failure >= self.w.grace_s


def run_processes(cmds: dict[str, list[str]], deadline_s: float, env: dict[str, str] | None = None,
                  grace_s: float = 5.0, watch: Watch | None = None) -> Launched:
    """Start every command (own process group), read their lines, kill whatever is left at
    the deadline; never blocks longer than deadline_s + a few seconds. With `watch`, the first
    node that fails its launch ends the whole launch within seconds (see `Watch`)."""
    lines: _Lines = queue.Queue()
    board = _board(cmds, watch)
    agents: dict[str, Agent] = {}
    for label, argv in cmds.items():
        try:
            agents[label] = LocalAgent(label, argv, lines, env)
        except OSError as exc:
            board.cannot_start(label, argv[0], f"cannot start {argv[0]}: {exc.strerror or exc}")
    return watch_agents(board, agents, lines, deadline_s, grace_s)


def _board(cmds: dict[str, list[str]], watch: Watch | None) -> _Board:
    w = watch or Watch()
    nodes_of = {label: list(w.nodes.get(label) or ([label] if watch else [])) for label in cmds}
    return _Board(out=Launched(argv=dict(cmds)), w=w, watching=watch is not None, nodes_of=nodes_of)


def watch_agents(board: _Board, agents: dict[str, Agent], lines: _Lines, deadline_s: float,
                 grace_s: float) -> Launched:
    """Read the agents' lines until they end, a node failure ends the launch, or the
    deadline; then stop whatever is left and gather the late lines."""
    _follow(board, agents, lines, board.start + deadline_s)
    _stop_all([a for a in agents.values() if a.running()], grace_s)
    for label, agent in agents.items():
        if not agent.wait(grace_s):
            agent.stop(1.0)
        board.out.rc[label] = agent.returncode
    while True:  # lines still queued after the processes ended
        try:
            label, line = lines.get_nowait()
        except queue.Empty:
            break
        if line is not None:
            board.take(label, line, time.monotonic(), judge=False)
    board.out.seconds = time.monotonic() - board.start
    return board.out


def _follow(board: _Board, agents: dict[str, Agent], lines: _Lines, deadline: float) -> None:
    """Take lines as they come until every agent's output ended, the watch ends the launch,
    or the deadline passes (then the launch is marked timed out)."""
    live = set(agents)
    while live:
        try:
            label, line = lines.get(timeout=max(0.05, min(0.25, deadline - time.monotonic())))
        except queue.Empty:
            label, line = "", ""
        now = time.monotonic()
        if label and line is None:
            live.discard(label)
            if board.watching:
                board.ended(label, agents[label])
        elif label and line is not None:
            board.take(label, line, now)
        if board.watching:
            board.check_timers(now, live)
            if board.settled(now, live):
                return
        if now > deadline:
            board.out.timed_out = True
            return


def _stop_all(agents: list[Agent], grace_s: float) -> None:
    """Stop several launches at once: close every stdin (an agent then stops its ranks), then
    stop what is still there (a process group: SIGTERM, then SIGKILL; an SSH session: closed);
    at most about grace_s + 2.5 s."""
    for a in agents:
        a.close_stdin()
    end = time.monotonic() + 0.5
    while time.monotonic() < end and any(a.running() for a in agents):
        time.sleep(0.05)
    stoppers = [threading.Thread(target=a.stop, args=(min(grace_s, 2.0),), daemon=True)
                for a in agents if a.running()]
    for t in stoppers:
        t.start()
    end = time.monotonic() + min(grace_s, 2.0) + grace_s
    for t in stoppers:
        t.join(timeout=max(0.0, end - time.monotonic()))


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


PATH_CHECK_BYTES = 4000  # more than a 1500-byte frame holds, less than one jumbo segment


def path_checked(agent: list[str]) -> list[str]:
    """The agent's command behind one jumbo-sized line it prints first: the command on its
    way to the node and the node's first bytes back are each one full-size segment, so a path
    that drops jumbo frames between this machine and the node (an MTU black hole: the
    handshake's small packets pass) stalls the start (the SSH transport's "command never
    acknowledged" within the connect timeout, or no answer by the start deadline), not the
    ranks' op timeout later. The line is an event the launcher drops."""
    line = event_line("path", pad="0" * PATH_CHECK_BYTES)
    return ["sh", "-c", f"printf '%s\\n' {shlex.quote(line)}; exec {shlex.join(agent)}"]


def launch_ssh(spec: SweepSpec, nodes: list[str], nproc_per_node: int, ssh_config: Path | None,
               python: str = "python3", master_addr: str | None = None, master_port: int | None = None,
               connect_timeout: float | None = None, accept_new: bool = False, start_s: float | None = None,
               stall_s: float = 20.0) -> Launched:
    """One agent per node over the SSH transport; node 0 hosts the rendezvous store (at the
    address its ssh configuration gives it). A node whose agent cannot start (host key, refused,
    unreachable, login refused, no python or torch, a stalled session) ends the launch within
    seconds, named with the transport's own message. `connect_timeout` None: each host's
    ConnectTimeout in the ssh configuration (else 10 s); the agents' start deadline counts
    from the longest of them."""
    from preflight.transport.ssh import SSHTransport  # paramiko loads only for an SSH launch

    for n in nodes:
        check_name(n)
    spec.nodes = list(nodes)
    port = master_port or free_port()
    spec.deadline_epoch = time.time() + spec.deadline_s - 2
    world = len(nodes) * nproc_per_node
    lines: _Lines = queue.Queue()
    with SSHTransport(ssh_config, connect_timeout=connect_timeout, accept_new_host_keys=accept_new) as ssh:
        connect_s = _longest_connect(ssh, nodes)
        watch = Watch(nodes={n: [n] for n in nodes}, start_s=start_s if start_s is not None else connect_s + 10,
                      stall_s=stall_s)
        addr = master_addr or ssh.resolve_addresses(nodes[:1]).get(nodes[0], nodes[0])
        cmds = {n: path_checked(agent_argv(python, spec, n, i, nproc_per_node, world, addr, port))
                for i, n in enumerate(nodes)}
        board = _board(cmds, watch)
        started = ssh.spawn(cmds, on_line=lambda node, line: lines.put((node, line)))
        return watch_agents(board, dict(started), lines, spec.deadline_s + connect_s, 5.0)


def _longest_connect(ssh: Any, nodes: Sequence[str]) -> float:
    """The longest connect timeout any of the nodes gets (a node whose configuration does not
    read gets the transport's own: its fault is the spawn's)."""
    from preflight.transport.ssh import NodeFault

    each = []
    for n in nodes:
        try:
            each.append(ssh.connect_timeout_for(ssh._spec(n)))
        except NodeFault:
            each.append(float(ssh.connect_timeout))
    return max(each, default=float(ssh.connect_timeout))


def launch_srun(spec: SweepSpec, nodes: list[str], nproc_per_node: int, python: str = "python3",
                partition: str | None = None, rdzv_port: int | None = None, start_s: float = 60.0) -> Launched:
    """Inside an allocation: srun + torchrun; the first node hosts the c10d rendezvous. Each
    node answers before torchrun starts, so a node without torch ends the step at once."""
    spec.nodes = list(nodes)
    spec.deadline_epoch = time.time() + spec.deadline_s - 2
    rid = f"pfsweep{os.environ.get('SLURM_JOB_ID', '0')}{random.randint(0, 9999)}"
    argv = srun_argv(len(nodes), nproc_per_node, spec, node_addresses(nodes[:1]).get(nodes[0], nodes[0]), rdzv_port or free_port(), rid,
                     python, partition)
    watch = Watch(nodes={"srun": list(nodes)}, start_s=start_s, exit_is_failure=False)
    return run_processes({"srun": argv}, spec.deadline_s + 10, watch=watch)
