"""The SSH transport: one round trip per node, many nodes at once, every wait bounded.

Each node gets the probe bundle of `preflight.remote` as one `python3 -c PROGRAM` command
over an SSH session and sends back one delimited line per capture as soon as it is done.
Connections follow the OpenSSH client configuration (Host patterns, HostName, User, Port,
IdentityFile, IdentitiesOnly, ProxyJump, UserKnownHostsFile, GlobalKnownHostsFile,
StrictHostKeyChecking, HostKeyAlias, ConnectTimeout: a host's own value, unless the caller
gives one for every host, as --connect-timeout does), authenticate with keys and the ssh-agent only, and
verify host keys against known_hosts. They stay open for the transport's lifetime, so the
second phase of a run reuses them; `close()` (or leaving a `with` block) closes them.

`spawn` runs long-lived commands (the sweep's node agents) over the same connections, with
the same host-key policy, budgets and fault texts, streaming their lines back as they come
(`RemoteProcess`: stdin, exit status, stop). This is the only SSH client preflight uses.

Bounds: a per-stage budget (connect, banner, kex, auth: `connect_timeout` each; command:
`command_timeout`), and an optional `deadline` for the whole collection. A supervisor in the
calling thread enforces them: a node over its budget is ended with an error at once and its
sockets are closed from a daemon thread, so no worker ever keeps the caller waiting.

sshd's start-up limit: sshd closes new connections, before its banner, while too many others
are not yet authenticated (MaxStartups, 10:30:100 by default). Many host names on one server
(aliases, a bastion) would meet it, so at most `handshakes_per_server` handshakes run at once
per server address (the others wait, with no stage clock running); a connection the server
still closes before or during key exchange is tried again, with growing pauses and jitter,
for the handshake's budget (4 stages of `connect_timeout`) and within the deadline, and then
is an error that names the limit. Handshakes with distinct servers are not held back.

Every node-level fault is an outcome, never an exception: `NodeOutcome.error` is one
sentence and `NodeOutcome.detail` says `kind` (dns, refused, unreachable, timeout, deadline,
hostkey-unknown, hostkey-changed, auth, python-missing, remote-error, garbage, disconnected,
config, ssh) and `stage` (queued, connect, banner, kex, auth, command; running for a
long-running command started with `spawn`); a node whose connections the server kept closing
during its start-up also says `tries`.
"""

from __future__ import annotations

import base64
import errno
import getpass
import hashlib
import logging
import os
import queue
import random
import shlex
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import paramiko

from preflight import lazyre
from preflight.model import Capture
from preflight.probes import DEFAULT_CAP, Probe
from preflight.remote import build_script, parse_output
from preflight.transport.base import NodeOutcome, ProgressFn, Transport

STAGES = ("queued", "connect", "banner", "kex", "auth", "command", "running")
DEFAULT_IDENTITIES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")
DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
MTU_HINT = "large packets are probably dropped on the path (MTU black hole: check the MTU of every hop)"
DEFAULT_CONNECT_TIMEOUT = 10.0  # seconds per handshake stage when neither the caller nor ssh_config gives one
_POLL = 0.1  # seconds between checks of a worker's abort flag
_RECV_WAIT = 0.5  # a bundle's read wakes this often without data (an aborted node's closed channel wakes it at once)
_BACKSTOP = 5.0
_LIVENESS = 3.0  # seconds a stalled command's connection gets to answer a new session
_TICK = 1.0  # the bundle's tick interval on the node: a live session is never silent longer
_STALL_LIVENESS = 2.0  # after the stall timer: seconds a new session gets to answer (a live one: milliseconds)
_MAX_HOPS = 8
DEFAULT_HANDSHAKES_PER_SERVER = 8  # under sshd's default MaxStartups (drops begin past 10 unauthenticated)
_RETRY_FIRST = 0.1  # seconds before the first new try of a connection the server closed during its start-up
_RETRY_MAX = 2.0  # the longest pause between tries (each pause doubles, then jitter of +-50 %)
_GARBAGE_SHOWN = 3
_STDERR_KEPT = 16384
_LINE_MAX = 1_048_576  # a longer line of a spawned command comes back cut
_NAME_OK = lazyre.compile(r"^[A-Za-z0-9_.:\[\]-]+$")

log = logging.getLogger("preflight.transport.ssh")
# paramiko logs a connection closed during its handshake with a traceback at ERROR; the
# transport reports every such fault itself, so without a handler of the caller's they go nowhere
logging.getLogger("paramiko").addHandler(logging.NullHandler())

LineFn = Callable[[str, "str | None"], None]  # (node, line); line None: the command has ended


class NodeFault(Exception):
    """A node-level fault: `kind` and `stage` go into `NodeOutcome.detail`."""

    def __init__(self, kind: str, stage: str, message: str, **extra: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.stage = stage
        self.message = message
        self.extra = extra


class _Aborted(Exception):
    """The supervisor already ended this node; the worker only unwinds."""


class _Dropped(NodeFault):
    """The server closed a new connection before or during key exchange: what sshd does
    with connections past its MaxStartups. Worth another try."""


# ---- configuration -------------------------------------------------------------------------


@dataclass(frozen=True)
class HostSpec:
    """How to reach one host, resolved from the OpenSSH client configuration."""

    alias: str
    hostname: str
    port: int = 22
    user: str = ""
    identity_files: tuple[Path, ...] = ()
    identities_explicit: bool = False
    identities_only: bool = False
    known_hosts: tuple[Path, ...] = ()
    global_known_hosts: tuple[Path, ...] = ()
    strict: str = "ask"
    proxy_jump: tuple[str, ...] = ()
    host_key_alias: str = ""
    connect_timeout: float | None = None  # the configuration's ConnectTimeout (seconds), None: not set

    @property
    def address(self) -> str:
        return f"{self.hostname}:{self.port}"

    def host_key_names(self) -> list[str]:
        """The names known_hosts is searched under (as OpenSSH does: HostKeyAlias or HostName)."""
        if self.host_key_alias:
            return [self.host_key_alias]
        name = self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"
        return [name]


def _split_files(value: object) -> list[str]:
    items = value if isinstance(value, list) else [value]
    out: list[str] = []
    for item in items:
        out.extend(shlex.split(str(item)))
    return out


def _expand(path: str) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(path)))


def parse_jump(hop: str) -> tuple[str, str, int | None]:
    """`[ssh://][user@]host[:port]` -> (user, host, port)."""
    rest = hop.strip()
    if rest.startswith("ssh://"):
        rest = rest[len("ssh://"):]
    user, _, hostport = rest.rpartition("@")
    port: int | None = None
    if hostport.startswith("["):
        host, _, tail = hostport[1:].partition("]")
        if tail.startswith(":") and tail[1:].isdigit():
            port = int(tail[1:])
    elif hostport.count(":") == 1:
        host, _, p = hostport.partition(":")
        port = int(p) if p.isdigit() else None
    else:
        host = hostport
    return user, host, port


def resolve_host(config: paramiko.SSHConfig, name: str, user: str | None = None) -> HostSpec:
    """The settings for `name`; `user` (like `ssh -l`) wins over the configuration."""
    if not name or not _NAME_OK.match(name):
        raise NodeFault("config", "connect", f"refusing the host name {name!r}: it holds characters a host name cannot")
    try:
        cfg = config.lookup(name)
    except Exception as exc:  # Match exec and friends
        raise NodeFault("config", "connect", f"the SSH configuration for {name} cannot be read: {exc}") from exc
    try:
        port = int(cfg.get("port", 22))
    except ValueError as exc:
        raise NodeFault("config", "connect", f"Port {cfg.get('port')!r} for {name} is not a number") from exc
    identities = tuple(_expand(p) for p in _split_files(cfg.get("identityfile", [])))
    explicit = bool(identities)
    if not identities:
        identities = tuple(_expand(p) for p in DEFAULT_IDENTITIES)
    known = tuple(_expand(p) for p in _split_files(cfg.get("userknownhostsfile", "")))
    if not known:
        known = tuple(_expand(p) for p in DEFAULT_KNOWN_HOSTS)
    global_known = tuple(_expand(p) for p in _split_files(cfg.get("globalknownhostsfile", "")))
    if not global_known:
        global_known = tuple(_expand(p) for p in DEFAULT_GLOBAL_KNOWN_HOSTS)
    command = str(cfg.get("proxycommand", "") or "")
    if command and command.lower() != "none":
        raise NodeFault("config", "connect", f"the SSH configuration gives {name} a ProxyCommand, which preflight does "
                        "not run; use ProxyJump instead")
    connect_timeout = _connect_timeout(cfg.get("connecttimeout"), name)
    jump = str(cfg.get("proxyjump", "") or "")
    hops = () if jump.lower() in ("", "none") else tuple(h.strip() for h in jump.split(",") if h.strip())
    return HostSpec(
        alias=name,
        hostname=str(cfg.get("hostname", name)),
        port=port,
        user=user or str(cfg.get("user", "") or "") or getpass.getuser(),
        identity_files=identities,
        identities_explicit=explicit,
        identities_only=str(cfg.get("identitiesonly", "no")).lower() == "yes",
        known_hosts=known,
        global_known_hosts=global_known,
        strict=str(cfg.get("stricthostkeychecking", "ask")).lower(),
        proxy_jump=hops,
        host_key_alias=str(cfg.get("hostkeyalias", "") or ""),
        connect_timeout=connect_timeout,
    )


def _connect_timeout(value: object, name: str) -> float | None:
    """The configuration's ConnectTimeout (whole seconds, as OpenSSH reads it); None when not
    set or "none"; a fault naming the host for anything else."""
    text = str(value if value is not None else "").strip()
    if not text or text.lower() == "none":
        return None
    if not text.isdigit() or int(text) <= 0:
        raise NodeFault("config", "connect", f"ConnectTimeout {text!r} for {name} is not a positive number of seconds")
    return float(text)


AEAD_CIPHERS = ("aes256-gcm@openssh.com", "aes128-gcm@openssh.com")


def _prefer_aead(t: paramiko.Transport) -> None:
    """Offer AES-GCM first (OpenSSH's servers accept it by default): an AEAD cipher needs no
    separate MAC, which paramiko computes and compares in Python for every packet. The other
    ciphers stay offered, after it, for servers without it."""
    opts = t.get_security_options()
    ciphers = list(opts.ciphers)
    opts.ciphers = tuple([c for c in AEAD_CIPHERS if c in ciphers] + [c for c in ciphers if c not in AEAD_CIPHERS])


def fingerprint(key: paramiko.PKey) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _key_family(name: str) -> str:
    if name in ("ssh-rsa", "rsa-sha2-256", "rsa-sha2-512"):
        return "ssh-rsa"
    return name


# ---- per-node bookkeeping ------------------------------------------------------------------


@dataclass
class _Round:
    """One `collect` call: the queue, the supervisor's condition, the deadline."""

    cond: threading.Condition
    pending: deque[_Job]
    progress: ProgressFn | None
    closed: bool = False


@dataclass
class _Job:
    node: str
    probes: list[Probe]
    round: _Round
    lock: threading.Lock = field(default_factory=threading.Lock)
    stage: str = "queued"
    stage_budget: float | None = None
    stage_ends: float | None = None
    stage_started: float = 0.0
    started: float = 0.0
    target: str = ""  # what is being reached now: the node or "jump host X"
    via: str = ""
    captures: dict[str, Capture] = field(default_factory=dict)
    garbage: list[str] = field(default_factory=list)
    command_bytes: int = 0
    acked: bool = False
    received: int = 0
    finished: bool = False  # the bundle's closing line arrived
    closers: list[Callable[[], None]] = field(default_factory=list)
    outcome: NodeOutcome | None = None
    waiting: str = ""  # the server whose handshake slot the node waits for
    dropped: str = ""  # how the server closed the node's last connection during its start-up

    def enter(self, stage: str, budget: float | None) -> None:
        with self.lock:
            if self.outcome is not None:
                raise _Aborted()
            self.stage = stage
            self.stage_started = time.monotonic()
            self.stage_budget = budget
            self.stage_ends = None if budget is None else time.monotonic() + budget

    def check(self) -> None:
        if self.outcome is not None:
            raise _Aborted()

    def set_closers(self, *fns: Callable[[], None]) -> None:
        with self.lock:
            self.closers = list(fns)

    def done(self) -> bool:
        return self.outcome is not None


@dataclass
class _BundleRead:
    """The state of reading one bundle's output: the partial line, stderr's tail, the clocks."""

    nonce: str
    until: float  # the command timeout, as a monotonic time
    check_wait: float  # how long a new session gets to answer when the output stops
    limit: int  # the longest line kept whole
    heard: float = field(default_factory=time.monotonic)  # the last time any byte came back
    buf: bytes = b""
    stderr: bytes = b""

    def keep_stderr(self, chan: paramiko.Channel) -> None:
        while chan.recv_stderr_ready():
            self.stderr = (self.stderr + chan.recv_stderr(65536))[-_STDERR_KEPT:]
            self.heard = time.monotonic()


def _exit_code(chan: paramiko.Channel) -> int | None:
    """The command's exit status; None when the session closed without one (paramiko marks
    a closed channel's status ready too, with -1: no status is negative)."""
    rc = int(chan.exit_status)
    return rc if rc >= 0 else None


def _close_quietly(fns: list[Callable[[], None]]) -> None:
    for fn in fns:
        try:
            fn()
        except Exception:
            pass


def _closed_by_peer(exc: BaseException | None) -> bool:
    """Whether a handshake ended because the other side closed the connection (an end of
    file or a reset, as paramiko saw it or wrapped it), or ended with no error at all."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, (EOFError, ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return seen == 0


def _shutdown(sock: Any) -> Callable[[], None]:
    def fn() -> None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except (OSError, AttributeError):
            pass
        sock.close()

    return fn


@dataclass
class _Conn:
    key: str
    spec: HostSpec
    transport: paramiko.Transport
    level: int = 0  # hops beneath it: 0 for a direct connection
    via: str = ""  # the jump host it goes through

    def alive(self) -> bool:
        return self.transport.is_active() and self.transport.is_authenticated()


def _started_or_done(job: _Job) -> bool:
    """A spawned command needs no supervisor once it runs: the caller watches its output."""
    return job.done() or job.stage == "running"


# ---- the transport -------------------------------------------------------------------------


class SSHTransport(Transport):
    name = "ssh"

    def __init__(
        self,
        ssh_config: Path | None = None,
        concurrency: int = 64,
        connect_timeout: float | None = None,
        command_timeout: float = 60,
        deadline: float | None = None,
        accept_new_host_keys: bool = False,
        remote_python: str = "python3",
        cap: int = DEFAULT_CAP,
        user: str | None = None,
        stall_timeout: float = 4.0,
        handshakes_per_server: int = DEFAULT_HANDSHAKES_PER_SERVER,
    ) -> None:
        self.config = paramiko.SSHConfig()
        path = ssh_config if ssh_config is not None else Path("~/.ssh/config").expanduser()
        if ssh_config is not None and not ssh_config.is_file():
            raise ValueError(f"SSH configuration {ssh_config} does not exist")
        if path.is_file():
            self.config = paramiko.SSHConfig.from_path(str(path))
        self.config_path = path if path.is_file() else None
        self.concurrency = max(1, int(concurrency))
        # the caller's value wins for every host; None: each host's ConnectTimeout, else the default
        self.connect_timeout_given = None if connect_timeout is None else float(connect_timeout)
        self.connect_timeout = self.connect_timeout_given or DEFAULT_CONNECT_TIMEOUT
        self.command_timeout = float(command_timeout)
        # no bytes for this long while the session is open (the node ticks every _TICK s):
        # ask the connection for a new session; no answer means the output is stuck on the way
        self.stall_timeout = max(float(stall_timeout), 2 * _TICK)
        self.deadline = deadline
        self.accept_new_host_keys = accept_new_host_keys
        self.remote_python = remote_python
        self.cap = cap
        self.user = user
        self._lock = threading.Lock()
        self._conns: dict[str, _Conn] = {}
        self._key_locks: dict[str, threading.Lock] = {}
        self._keys: dict[Path, paramiko.PKey | str] = {}
        self._accepted: dict[str, paramiko.PKey] = {}
        self._specs: dict[str, HostSpec | NodeFault] = {}  # a name's settings, resolved once per transport
        self._known_files: dict[Path, tuple[tuple[int, ...], paramiko.HostKeys]] = {}  # file -> (its stat, parsed)
        self._agent: paramiko.Agent | None = None
        self._closed = False
        # handshakes at once per server address (TCP connect to authenticated), see the module's text
        self.handshakes_per_server = max(1, int(handshakes_per_server))
        self._handshakes: dict[str, threading.BoundedSemaphore] = {}
        self._jitter = random.Random()

    # ---- lifetime ------------------------------------------------------------------------
    def __enter__(self) -> SSHTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every connection (nodes before the jump hosts they go through)."""
        with self._lock:
            conns = sorted(self._conns.values(), key=lambda c: -c.level)
            self._conns.clear()
            agent, self._agent = self._agent, None
        for conn in conns:
            _close_quietly([conn.transport.close])
        if agent is not None:
            _close_quietly([agent.close])

    # ---- collect -------------------------------------------------------------------------
    def collect(
        self,
        bundles: Mapping[str, Sequence[Probe]],
        progress: ProgressFn | None = None,
    ) -> dict[str, NodeOutcome]:
        self._load_keys(list(bundles))
        end = self.collect_end()  # the run's one deadline, shared by its collects
        if end is not None and time.monotonic() >= end:  # a later phase of a run out of time: no node is contacted
            said = f"the {float(self.deadline or 0):g} s deadline of the whole collection passed before"
            return {n: NodeOutcome(node=n, error=f"{said} {n} was contacted", detail={"kind": "deadline",
                                                                                    "stage": "queued"})
                    for n in bundles}
        rnd = _Round(cond=threading.Condition(), pending=deque(), progress=progress)
        jobs = [_Job(node=n, probes=list(ps), round=rnd, target=n) for n, ps in bundles.items()]
        rnd.pending.extend(jobs)
        for i in range(min(self.concurrency, len(jobs))):
            threading.Thread(target=self._worker, args=(rnd,), name=f"preflight-ssh-{i}", daemon=True).start()
        self._supervise(rnd, jobs, end)
        return {j.node: j.outcome or NodeOutcome(node=j.node, error="lost by the SSH transport") for j in jobs}

    def _supervise(self, rnd: _Round, jobs: list[_Job], end: float | None,
                   settled: Callable[[_Job], bool] = _Job.done) -> None:
        """End every job that overruns its stage budget (or the deadline `end`) with its fault,
        until every job is settled; runs in the calling thread (collect) or a daemon (spawn)."""
        with rnd.cond:
            while True:
                now = time.monotonic()
                open_jobs = [j for j in jobs if not settled(j)]
                if not open_jobs:
                    return
                if end is not None and now >= end:
                    rnd.closed = True
                    for job in open_jobs:
                        self._abort(job, self._deadline_fault(job, float(self.deadline or 0)))
                    return
                aborted, wake = self._expire(open_jobs, now, now + 1.0 if end is None else min(end, now + 1.0))
                if not aborted:
                    rnd.cond.wait(timeout=max(0.005, wake - time.monotonic()))

    def _expire(self, jobs: list[_Job], now: float, wake: float) -> tuple[bool, float]:
        """Abort the jobs past their stage budget: (whether any was, the next stage end)."""
        aborted = False
        for job in jobs:
            with job.lock:
                ends = job.stage_ends
            if ends is None:
                continue
            if now >= ends:
                self._abort(job, self._timeout_fault(job))
                aborted = True
            else:
                wake = min(wake, ends)
        return aborted, wake

    # ---- long-running commands ----------------------------------------------------------
    def spawn(self, commands: Mapping[str, Sequence[str]], on_line: LineFn | None = None) -> dict[str, RemoteProcess]:
        """Start a long-running command (an argv, quoted here) on each node and return at once.

        The commands go over the connections `collect` uses, with the same configuration,
        host-key policy, authentication, stage budgets and fault texts; the node's answer to
        the exec request is bounded by `connect_timeout`. Their stdout and stderr lines go to
        `on_line(node, line)` as they arrive and `on_line(node, None)` once a command has
        ended (without `on_line`: `RemoteProcess.lines()`). A node that cannot be reached
        ends at once, its fault in `RemoteProcess.failure`."""
        nodes = list(commands)
        self._load_keys(nodes)
        rnd = _Round(cond=threading.Condition(), pending=deque(), progress=None)
        slots = threading.BoundedSemaphore(self.concurrency)
        procs = {n: RemoteProcess(self, _Job(node=n, probes=[], round=rnd, target=n), commands[n], slots, on_line)
                 for n in nodes}
        for proc in procs.values():
            proc.start()
        jobs = [proc.job for proc in procs.values()]
        threading.Thread(target=self._supervise, args=(rnd, jobs, None, _started_or_done), name="preflight-ssh-spawn",
                         daemon=True).start()
        return procs

    def _load_keys(self, names: list[str]) -> None:
        """Load every identity file before any clock starts: reading a large RSA key checks it
        and can hold the interpreter for seconds, which would stall every other connection."""
        seen: set[str] = set()
        targets = set(names)
        todo = list(names)
        while todo and len(seen) < 10_000:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            try:
                spec = self._spec(name) if name in targets else self._hop_spec(name)
            except (NodeFault, ValueError):
                continue
            for path in spec.identity_files:
                self._load_key(path)
            todo.extend(spec.proxy_jump)

    def _worker(self, rnd: _Round) -> None:
        while True:
            with rnd.cond:
                if rnd.closed or not rnd.pending:
                    return
                job = rnd.pending.popleft()
            if job.done():
                continue
            job.started = time.monotonic()
            try:
                conn = self._connect(job, job.node)
                self._run_bundle(job, conn)
            except _Aborted:
                pass
            except NodeFault as fault:
                self._finish(job, fault)
            except Exception as exc:  # never let a worker die silently
                self._finish(job, NodeFault("ssh", job.stage, f"SSH to {job.node} failed during {job.stage}: {exc}"))

    def _finish(self, job: _Job, fault: NodeFault | None = None) -> bool:
        """Record the outcome once; True when this call recorded it."""
        with job.lock:
            if job.outcome is not None:
                return False
            duration = round(time.monotonic() - job.started, 3) if job.started else 0.0
            out = NodeOutcome(node=job.node, captures=dict(job.captures), duration=duration)
            if fault is not None:
                out.error = fault.message
                out.detail = {"kind": fault.kind, "stage": fault.stage, **fault.extra}
                if job.via:
                    out.detail.setdefault("via", job.via)
            elif job.garbage:
                out.detail = {"garbage": " | ".join(job.garbage[:_GARBAGE_SHOWN])}
            job.outcome = out
        with job.round.cond:
            job.round.cond.notify_all()
        return True

    def _abort(self, job: _Job, fault: NodeFault) -> None:
        if self._finish(job, fault):
            with job.lock:
                closers, job.closers = job.closers, []
            if closers:
                threading.Thread(target=_close_quietly, args=(closers,), daemon=True).start()

    # ---- fault texts ---------------------------------------------------------------------
    def _stage_sentence(self, job: _Job, seconds: float) -> str:
        t = job.target
        if job.stage == "connect" and job.dropped:
            return job.dropped
        if job.stage == "connect":
            return f"no answer from {t} within {seconds:g} s (TCP connect timed out: host down or packets to it dropped)"
        if job.stage == "banner":
            return f"{t} accepted the TCP connection but sent no SSH banner within {seconds:g} s (sshd hung or overloaded)"
        if job.stage == "kex":
            return f"SSH key exchange with {t} did not finish within {seconds:g} s; {MTU_HINT}"
        if job.stage == "auth":
            return (f"SSH stalled after key exchange with {t}: no answer to authentication within {seconds:g} s "
                    f"while the small handshake packets got through; {MTU_HINT}")
        if job.stage == "command" and not job.acked:
            return (f"SSH stalled after authentication with {t}: the command ({job.command_bytes} bytes) was never "
                    f"acknowledged within {seconds:g} s while the small handshake packets got through; {MTU_HINT}")
        if job.stage == "command":
            names = [p.name for p in job.probes]
            late = [n for n in names if n not in job.captures]
            return (f"{t} did not finish its probes within {seconds:g} s: {len(names) - len(late)} of {len(names)} "
                    f"came back, still running: {', '.join(late) or 'none (the bundle did not exit)'}")
        return f"{t} was not contacted in time"

    def _timeout_fault(self, job: _Job) -> NodeFault:
        with job.lock:
            budget = job.stage_budget or 0.0
            return NodeFault("timeout", job.stage, self._stage_sentence(job, budget))

    def _deadline_fault(self, job: _Job, deadline: float) -> NodeFault:
        with job.lock:
            if job.stage == "queued" and job.waiting:
                msg = (f"the {deadline:g} s deadline of the whole collection passed while {job.node} waited to "
                       f"connect to {job.waiting} ({self.handshakes_per_server} handshakes at once per server)")
            elif job.stage == "queued":
                msg = (f"the {deadline:g} s deadline of the whole collection passed before {job.node} was contacted "
                       f"(concurrency {self.concurrency})")
            else:
                waited = round(time.monotonic() - job.stage_started, 1)
                msg = f"the {deadline:g} s deadline of the whole collection passed: " + self._stage_sentence(job, waited)
            return NodeFault("deadline", job.stage, msg)

    # ---- connections ---------------------------------------------------------------------
    def connect_timeout_for(self, spec: HostSpec) -> float:
        """The seconds each handshake stage with this host gets: the caller's value (the
        --connect-timeout flag), else the host's ConnectTimeout in ssh_config, else the default."""
        if self.connect_timeout_given is not None:
            return self.connect_timeout_given
        return spec.connect_timeout or DEFAULT_CONNECT_TIMEOUT

    def _spec(self, name: str) -> HostSpec:
        """The settings for `name`, read from the configuration once per transport (a node is
        resolved by every phase and by the address map; the lookup expands tokens each time)."""
        with self._lock:
            got = self._specs.get(name)
        if got is None:
            try:
                got = resolve_host(self.config, name, self.user)
            except NodeFault as fault:
                got = fault
            with self._lock:
                self._specs[name] = got
        if isinstance(got, NodeFault):
            raise NodeFault(got.kind, got.stage, got.message, **got.extra)
        return got

    def resolve_addresses(self, nodes: Sequence[str]) -> dict[str, str]:
        """node -> the address its peers reach it at: the HostName the SSH configuration gives
        it (the node's own name where it gives none or cannot be read). Never raises."""
        out: dict[str, str] = {}
        for node in nodes:
            try:
                out[node] = self._spec(node).hostname or node
            except (NodeFault, ValueError, KeyError, OSError):
                out[node] = node
        return out

    def _hop_spec(self, hop: str) -> HostSpec:
        user, host, port = parse_jump(hop)
        spec = resolve_host(self.config, host)
        changes: dict[str, Any] = {}
        if user:
            changes["user"] = user
        if port is not None:
            changes["port"] = port
        return replace(spec, **changes) if changes else spec

    def _key_lock(self, key: str) -> threading.Lock:
        with self._lock:
            return self._key_locks.setdefault(key, threading.Lock())

    def _connect(self, job: _Job, name: str) -> _Conn:
        spec = self._spec(name)
        return self._reach(job, spec, depth=0)

    def _reach(self, job: _Job, spec: HostSpec, depth: int) -> _Conn:
        if depth > _MAX_HOPS:
            raise NodeFault("config", "connect", f"ProxyJump chain to {spec.alias} is longer than {_MAX_HOPS} hops (a loop?)")
        via: _Conn | None = None
        if spec.proxy_jump:
            hops = list(spec.proxy_jump)
            first = self._hop_spec(hops[0])
            via = self._reach_as_jump(job, first, depth + 1)
            for hop in hops[1:]:
                hs = self._hop_spec(hop)
                via = self._reach_as_jump(job, replace(hs, proxy_jump=()), depth + 1, via)
        return self._ensure(job, spec, via)

    def _reach_as_jump(self, job: _Job, spec: HostSpec, depth: int, via: _Conn | None = None) -> _Conn:
        saved_target, saved_via = job.target, job.via
        job.target = f"jump host {spec.alias} ({spec.address}) on the way to {job.node}"
        job.via = spec.alias
        try:
            if via is None:
                conn = self._reach(job, spec, depth)
            else:
                conn = self._ensure(job, spec, via)
        except NodeFault as fault:
            fault.extra.setdefault("via", spec.alias)
            if not fault.message.startswith("cannot reach"):
                fault.message = f"cannot reach {job.node} through jump host {spec.alias}: {fault.message}"
            raise
        job.target, job.via = saved_target, saved_via
        return conn

    def _ensure(self, job: _Job, spec: HostSpec, via: _Conn | None) -> _Conn:
        # one connection per configured name: two aliases of one address may use other keys
        key = f"{spec.alias}={spec.user}@{spec.hostname}:{spec.port}" + (f" via {via.key}" if via else "")
        lock = self._key_lock(key)
        # another node may be building this very connection (a shared jump host): wait for it
        # as long as its whole handshake may take (with its new tries: 8 stages), then take a
        # fresh connect budget
        ct = self.connect_timeout_for(spec)
        job.enter("connect", 8 * ct + 1)
        while not lock.acquire(timeout=_POLL):
            job.check()
        try:
            job.enter("connect", ct)
            with self._lock:
                conn = self._conns.get(key)
            if conn is not None and conn.alive():
                return conn
            if conn is not None:
                _close_quietly([conn.transport.close])
            if job.target == job.node:
                job.target = f"{job.node} ({spec.address})"
                if via is not None:
                    job.target += f" through jump host {via.spec.alias}"
                    job.via = via.spec.alias
            conn = self._open_retrying(job, spec, via, key)
            with self._lock:
                self._conns[key] = conn
            return conn
        finally:
            lock.release()

    def _handshake_slots(self, spec: HostSpec, via: _Conn | None) -> threading.BoundedSemaphore:
        where = spec.address + (f" via {via.key}" if via else "")
        with self._lock:
            return self._handshakes.setdefault(where, threading.BoundedSemaphore(self.handshakes_per_server))

    def _open_retrying(self, job: _Job, spec: HostSpec, via: _Conn | None, key: str) -> _Conn:
        """`_open` within a handshake slot of the server; again, after a pause, while the server
        closes the new connection during its start-up and the handshake's budget lasts."""
        ct = self.connect_timeout_for(spec)
        slots = self._handshake_slots(spec, via)
        tries = 0
        began = time.monotonic()
        while True:
            tries += 1
            if not slots.acquire(blocking=False):
                with job.lock:
                    job.waiting = spec.address
                job.enter("queued", None)  # no stage clock while other handshakes with this server run
                while not slots.acquire(timeout=_POLL):
                    job.check()
                with job.lock:
                    job.waiting = ""
            try:
                if tries == 1:
                    began = time.monotonic()
                with job.lock:
                    job.dropped = ""
                job.enter("connect", ct)
                return self._open(job, spec, via, key)
            except _Dropped as drop:
                fault: _Dropped = drop
            finally:
                slots.release()
            pause = min(_RETRY_MAX, _RETRY_FIRST * 2 ** (tries - 1)) * self._jitter.uniform(0.5, 1.5)
            spent = time.monotonic() - began
            said = (f"{fault.message}, {tries} {'time' if tries == 1 else 'times'} in {spent:.1f} s "
                    f"(the server's MaxStartups limit? sshd drops new connections while too many others are "
                    f"not yet authenticated)")
            left = 4 * ct - spent
            if pause >= left:
                raise NodeFault(fault.kind, fault.stage, said, tries=str(tries), **fault.extra)
            log.debug("preflight: %s; trying again in %.2f s", said, pause)
            with job.lock:
                job.dropped = said
            job.enter("connect", left)
            until = time.monotonic() + pause
            while (wait := until - time.monotonic()) > 0:
                time.sleep(min(_POLL, wait))
                job.check()

    def _open_socket(self, job: _Job, spec: HostSpec, via: _Conn | None) -> Any:
        t = job.target
        ct = self.connect_timeout_for(spec)
        if via is not None:
            try:
                chan = via.transport.open_channel(
                    "direct-tcpip", (spec.hostname, spec.port), ("127.0.0.1", 0), timeout=ct)
            except paramiko.ChannelException as exc:
                text = str(exc.text or "")
                low = text.lower()
                kind = ("refused" if "refused" in low else "timeout" if "timed out" in low
                        else "dns" if ("resolve" in low or "name" in low) else "unreachable")
                raise NodeFault(kind, "connect", f"jump host {via.spec.alias} could not open a TCP connection to "
                                f"{spec.address} for {t} ({text or 'code ' + str(exc.code)})",
                                via=via.spec.alias) from exc
            except paramiko.SSHException as exc:
                job.check()
                raise NodeFault("timeout", "connect", f"jump host {via.spec.alias} did not open a TCP connection to "
                                f"{spec.address} for {t} within {ct:g} s ({exc})",
                                via=via.spec.alias) from exc
            return chan
        try:
            infos = socket.getaddrinfo(spec.hostname, spec.port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise NodeFault("dns", "connect", f"cannot resolve the host name {spec.hostname!r} of {job.node}: "
                            f"{exc.strerror or exc}") from exc
        job.check()
        last: NodeFault | None = None
        for family, stype, proto, _, addr in infos:
            sock = socket.socket(family, stype, proto)
            job.set_closers(_shutdown(sock))
            with job.lock:
                left = (job.stage_ends or time.monotonic() + ct) - time.monotonic()
            sock.settimeout(max(0.05, left))
            try:
                sock.connect(addr)
            except TimeoutError:
                sock.close()
                job.check()
                last = NodeFault("timeout", "connect", self._stage_sentence(job, ct))
                continue
            except ConnectionRefusedError as exc:
                sock.close()
                last = NodeFault("refused", "connect", f"{t} refused the connection: no SSH server listening "
                                 f"({exc.strerror})")
                continue
            except OSError as exc:
                sock.close()
                job.check()
                why = exc.strerror or str(exc)
                if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN):
                    last = NodeFault("unreachable", "connect", f"{t} is unreachable: {why}")
                else:
                    last = NodeFault("unreachable", "connect", f"cannot connect to {t}: {why}")
                continue
            sock.settimeout(None)
            return sock
        raise last or NodeFault("dns", "connect", f"no address for {spec.hostname!r} of {job.node}")

    def _open(self, job: _Job, spec: HostSpec, via: _Conn | None, key: str) -> _Conn:
        sock = self._open_socket(job, spec, via)
        t = paramiko.Transport(sock)
        job.set_closers(t.close, _shutdown(sock))
        ct = self.connect_timeout_for(spec)
        try:
            t.banner_timeout = ct + _BACKSTOP
            t.handshake_timeout = ct + _BACKSTOP
            t.auth_timeout = ct + _BACKSTOP
            known = self._known_keys(spec)
            if known:
                families = {_key_family(k.get_name()) for _, k in known}
                opts = t.get_security_options()
                types = list(opts.key_types)
                opts.key_types = tuple([k for k in types if _key_family(k) in families]
                                       + [k for k in types if _key_family(k) not in families])
            _prefer_aead(t)
            job.enter("banner", ct)
            event = threading.Event()
            t.start_client(event=event)
            while not event.is_set():
                event.wait(_POLL)
                job.check()
                if job.stage == "banner" and t.remote_version:
                    job.enter("kex", ct)
                if not t.is_active():
                    break
            job.check()
            if not t.is_active() or not t.remote_version or t.host_key is None:
                exc = t.get_exception()
                stage = job.stage
                if _closed_by_peer(exc):
                    where = "during key exchange" if t.remote_version else "before sending its SSH banner"
                    raise _Dropped("disconnected", "kex" if t.remote_version else "banner",
                                   f"{job.target} closed the connection {where}")
                if stage == "banner":
                    raise NodeFault("ssh", "banner", f"{job.target} did not speak SSH: {exc or 'connection closed'}")
                raise NodeFault("ssh", stage, f"SSH key exchange with {job.target} failed: {exc or 'connection closed'}")
            self._verify_host_key(job, spec, t.get_remote_server_key(), known)
            job.enter("auth", ct)
            self._authenticate(job, spec, t)
        except BaseException:
            _close_quietly([t.close, _shutdown(sock)])
            raise
        job.set_closers()
        return _Conn(key=key, spec=spec, transport=t, level=via.level + 1 if via else 0,
                     via=via.spec.alias if via else "")

    # ---- host keys -----------------------------------------------------------------------
    def _known_keys(self, spec: HostSpec) -> list[tuple[Path, paramiko.PKey]]:
        """(file, key) for every known key of this host, in file order."""
        found: list[tuple[Path, paramiko.PKey]] = []
        names = spec.host_key_names()
        for path in (*spec.known_hosts, *spec.global_known_hosts):
            hk = self._host_keys(path)
            if hk is None:
                continue
            for name in names:
                entry = hk.lookup(name)
                if entry is None:
                    continue
                for ktype in entry.keys():
                    found.append((path, entry[ktype]))
        with self._lock:
            for name in names:
                accepted = self._accepted.get(name)
                if accepted is not None:
                    found.append((Path("(accepted this run)"), accepted))
        return found

    def _host_keys(self, path: Path) -> paramiko.HostKeys | None:
        """A known-hosts file parsed once while it stays the same (inode, times, size): every node
        looks its keys up in the same files. None when the file is missing or unreadable."""
        try:
            st = path.stat()
        except OSError:
            return None
        if not path.is_file():
            return None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
        with self._lock:
            cached = self._known_files.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        hk = paramiko.HostKeys()
        try:
            hk.load(str(path))
        except (OSError, UnicodeDecodeError):
            return None
        with self._lock:
            self._known_files[path] = (stamp, hk)
        return hk

    def _verify_host_key(self, job: _Job, spec: HostSpec, key: paramiko.PKey,
                         known: list[tuple[Path, paramiko.PKey]]) -> None:
        fp = f"{key.get_name()} {fingerprint(key)}"
        name = spec.alias
        if any(k == key for _, k in known):
            return
        same = [(p, k) for p, k in known if _key_family(k.get_name()) == _key_family(key.get_name())]
        if same or known:
            where = ", ".join(dict.fromkeys(str(p) for p, _ in (same or known)))
            raise NodeFault("hostkey-changed", "kex",
                            f"host key for {name} does not match known_hosts ({where}): it now presents {fp}; "
                            f"if {name} was reinstalled remove the old entry (ssh-keygen -R {spec.host_key_names()[0]}), "
                            "otherwise suspect an impostor", fingerprint=fp)
        if not (self.accept_new_host_keys or spec.strict in ("accept-new", "no", "off")):
            files = [str(p) for p in spec.known_hosts] + [str(p) for p in spec.global_known_hosts if p.is_file()]
            raise NodeFault("hostkey-unknown", "kex",
                            f"unknown host key for {name} (not in {', '.join(files)}); add it with ssh-keyscan "
                            "or pass --ssh-accept-new", fingerprint=fp)
        self._remember(spec, key)

    def _remember(self, spec: HostSpec, key: paramiko.PKey) -> None:
        """Accept a new host key: trusted from now on, and appended to the first known_hosts file."""
        names = spec.host_key_names()
        with self._lock:
            for n in names:
                self._accepted[n] = key
            if not spec.known_hosts:
                return
            target = spec.known_hosts[0]
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                with target.open("a", encoding="utf-8") as fh:
                    fh.write(f"{','.join(names)} {key.get_name()} {key.get_base64()}\n")
            except OSError as exc:
                # the key stays trusted for this run; say why it will be asked about again
                log.warning("preflight: accepted the host key of %s for this run only: cannot append to %s: %s",
                            spec.alias, target, exc.strerror or exc)

    # ---- authentication ------------------------------------------------------------------
    def _load_key(self, path: Path) -> paramiko.PKey | str:
        """The key, or why it cannot be used."""
        with self._lock:
            cached = self._keys.get(path)
        if cached is not None:
            return cached
        with self._key_lock(f"key:{path}"):
            with self._lock:
                cached = self._keys.get(path)
            if cached is not None:
                return cached
            return self._read_key(path)

    def _read_key(self, path: Path) -> paramiko.PKey | str:
        result: paramiko.PKey | str
        try:
            result = paramiko.PKey.from_path(str(path))
        except paramiko.PasswordRequiredException:
            result = f"{path} is encrypted (load it into ssh-agent)"
        except FileNotFoundError:
            result = f"{path} does not exist"
        except (OSError, paramiko.SSHException, ValueError, TypeError) as exc:
            result = f"{path} cannot be read ({exc})"
        with self._lock:
            self._keys[path] = result
        return result

    def _agent_keys(self) -> list[paramiko.PKey]:
        if not os.environ.get("SSH_AUTH_SOCK"):
            return []
        with self._lock:
            if self._agent is None:
                try:
                    self._agent = paramiko.Agent()
                except Exception:
                    return []
            agent = self._agent
        try:
            return list(agent.get_keys())
        except Exception:
            return []

    def _auth_keys(self, spec: HostSpec) -> tuple[list[tuple[str, paramiko.PKey]], list[str]]:
        """The keys to offer, in order (agent first unless IdentitiesOnly), and why others cannot be."""
        keys: list[tuple[str, paramiko.PKey]] = []
        notes: list[str] = []
        if not spec.identities_only:
            keys.extend((f"agent key {fingerprint(k)}", k) for k in self._agent_keys())
        for path in spec.identity_files:
            loaded = self._load_key(path)
            if isinstance(loaded, str):
                if spec.identities_explicit or "does not exist" not in loaded:
                    notes.append(loaded)
            else:
                keys.append((str(path), loaded))
        return keys, notes

    def _offer_key(self, job: _Job, spec: HostSpec, t: paramiko.Transport, pkey: paramiko.PKey) -> bool:
        """True when the server accepts this key; False when it rejects it (try the next);
        a NodeFault when no key can help (keys not accepted, more wanted, connection gone)."""
        try:
            remaining = t.auth_publickey(spec.user, pkey)
        except paramiko.BadAuthenticationType as exc:
            raise NodeFault("auth", "auth", f"{job.target} does not accept keys for {spec.user[:64]} "
                            f"(it offers {', '.join(exc.allowed_types) or 'nothing'}); preflight uses keys and "
                            "ssh-agent only") from exc
        except paramiko.AuthenticationException as exc:
            job.check()
            if not t.is_active():
                raise NodeFault("disconnected", "auth", f"{job.target} closed the connection during "
                                f"authentication ({exc})") from exc
            return False
        except (paramiko.SSHException, OSError, EOFError) as exc:
            job.check()
            raise NodeFault("disconnected", "auth", f"{job.target} dropped the connection during "
                            f"authentication ({exc})") from exc
        if remaining:
            raise NodeFault("auth", "auth", f"{job.target} wants more than a key for {spec.user[:64]} "
                            f"({', '.join(remaining)}); preflight uses keys and ssh-agent only")
        return bool(t.is_authenticated())

    def _authenticate(self, job: _Job, spec: HostSpec, t: paramiko.Transport) -> None:
        keys, notes = self._auth_keys(spec)
        if not keys:
            raise NodeFault("auth", "auth", f"no usable SSH key for {job.target}: "
                            f"{'; '.join(notes) or 'no IdentityFile, no default key, no ssh-agent'}")
        tried: list[str] = []
        for label, pkey in keys:
            job.check()
            if self._offer_key(job, spec, t, pkey):
                return
            tried.append(label)
        extra = f"; also: {'; '.join(notes)}" if notes else ""
        raise NodeFault("auth", "auth", f"{job.target} rejected every key for user {spec.user[:64]} (tried "
                        f"{', '.join(tried)}): add the public key to that user's authorized_keys there{extra}")

    # ---- the bundle ----------------------------------------------------------------------
    def _start_command(self, job: _Job, conn: _Conn, command: str, budget: float | None,
                       combine_stderr: bool = False) -> paramiko.Channel:
        """Open a session on the node's connection and run `command` there; the stage budget
        covers the new session and the server's answer to the exec request."""
        t = conn.transport
        job.target = f"{job.node} ({conn.spec.address})" + (f" through jump host {conn.via}" if conn.via else "")
        job.via = conn.via
        job.enter("command", budget)
        try:
            chan = t.open_session(timeout=self.connect_timeout_for(conn.spec))
        except (paramiko.SSHException, OSError, EOFError) as exc:
            job.check()
            _close_quietly([t.close])
            raise NodeFault("disconnected", "command", f"{job.target} refused a new SSH session ({exc})") from exc
        job.set_closers(chan.close, t.close)
        with job.lock:
            job.command_bytes = len(command)
        try:
            chan.set_combine_stderr(combine_stderr)
            chan.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            job.check()
            raise NodeFault("disconnected", "command", f"{job.target} did not run the command ({exc})") from exc
        return chan

    def _run_bundle(self, job: _Job, conn: _Conn) -> None:
        script, nonce = build_script(job.probes, self.cap, watch_stdin=True, tick_s=_TICK)
        chan = self._start_command(job, conn, f"{self.remote_python} -c {shlex.quote(script)}", self.command_timeout)
        # From here the worker enforces the command timeout itself (it polls every _RECV_WAIT s) so
        # that it can tell hung probes from a stalled connection; the supervisor keeps a backstop.
        check_wait = min(_LIVENESS, self.connect_timeout_for(conn.spec))
        with job.lock:
            job.acked = True
            until = job.stage_ends or time.monotonic() + self.command_timeout
            job.stage_ends = until + check_wait + 1.0
        chan.settimeout(_RECV_WAIT)
        read = _BundleRead(nonce=nonce, until=until, check_wait=check_wait, limit=8 * self.cap + 1_048_576)
        while (data := self._next_data(job, conn.transport, chan, read)) != b"":
            self._take_data(job, read, data)
        if read.buf:
            self._take_line(job, read.buf.decode("utf-8", errors="replace"), nonce)
        while not chan.status_event.wait(_POLL):
            job.check()
            if chan.closed:
                break
        read.keep_stderr(chan)
        rc = _exit_code(chan)
        _close_quietly([chan.close])
        job.set_closers()
        self._conclude(job, rc, read.stderr.decode("utf-8", errors="replace"))

    def _next_data(self, job: _Job, t: paramiko.Transport, chan: paramiko.Channel, read: _BundleRead) -> bytes:
        """The next bytes of the bundle's output (b"" at its end), watching the command timeout
        and the stall timer while it waits; a NodeFault when either runs out."""
        while True:
            job.check()
            read.keep_stderr(chan)
            if time.monotonic() >= read.until:
                raise self._command_timeout(job, t, chan, read.check_wait)
            try:
                data = chan.recv(65536)
            except TimeoutError:
                silent = time.monotonic() - read.heard
                if silent >= self.stall_timeout:
                    fault = self._stalled(job, t, chan, silent, min(read.check_wait, _STALL_LIVENESS))
                    if fault is not None:
                        raise fault from None
                    read.heard = time.monotonic()  # the connection answers: the node is merely slow to write
                continue
            except (OSError, EOFError) as exc:
                job.check()
                raise NodeFault("disconnected", "command", f"{job.target} dropped the connection while running the "
                                f"probes ({exc})") from exc
            read.heard = time.monotonic()
            return bytes(data)

    def _take_data(self, job: _Job, read: _BundleRead, data: bytes) -> None:
        with job.lock:
            job.received += len(data)
        read.buf += data
        *lines, read.buf = read.buf.split(b"\n")
        for line in lines:
            self._take_line(job, line.decode("utf-8", errors="replace"), read.nonce)
        if len(read.buf) > read.limit:
            self._take_line(job, read.buf[:300].decode("utf-8", errors="replace"), read.nonce)
            read.buf = b""

    def _command_timeout(self, job: _Job, t: paramiko.Transport, chan: paramiko.Channel, wait: float) -> NodeFault:
        """The probes ran past the command timeout: is it the probes, or the connection?

        A new session on the same connection answers at once when the node is merely busy
        with a hung probe. When even that gets no answer, the node's packets are lost on the
        way back (TCP delivers in order, so one lost segment holds everything behind it)."""
        _close_quietly([chan.close])
        alive = False
        why = f"a new session got no reply within {wait:g} s"
        try:
            extra = t.open_session(timeout=wait)
            alive = True
            _close_quietly([extra.close])
        except (paramiko.SSHException, OSError, EOFError) as exc:
            if "timeout" not in str(exc).lower():
                why = f"a new session failed: {exc}"
        job.check()
        with job.lock:
            names = [p.name for p in job.probes]
            late = [n for n in names if n not in job.captures]
            got, received = len(names) - len(late), job.received
        seconds = self.command_timeout
        if alive:
            job.set_closers()
            return NodeFault("timeout", "command", f"{job.target} did not finish its probes within {seconds:g} s: "
                             f"{got} of {len(names)} came back, still running: "
                             f"{', '.join(late) or 'none (the bundle did not exit)'}; the connection still answers, "
                             "so the probes hang on the node", connection="alive")
        _close_quietly([t.close])
        return NodeFault("timeout", "command", f"SSH to {job.target} stalled while the probes ran: {got} of "
                         f"{len(names)} came back ({received} bytes) within {seconds:g} s, then the connection stopped "
                         f"answering ({why}) while the small handshake packets "
                         f"got through; {MTU_HINT}", connection="stalled")

    def _stalled(self, job: _Job, t: paramiko.Transport, chan: paramiko.Channel, silent: float,
                 wait: float) -> NodeFault | None:
        """The session has been silent past the stall timer although the node ticks every
        second. A new session on the same connection answers at once when the connection is
        fine (the node is too loaded to write): None, go on waiting. No answer: the output is
        stuck on the way back, the node's output is lost."""
        try:
            extra = t.open_session(timeout=wait)
            _close_quietly([extra.close])
            return None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            why = (f"a new session got no reply within {wait:g} s" if "timeout" in str(exc).lower()
                   else f"a new session failed: {exc}")
        job.check()
        _close_quietly([chan.close, t.close])
        with job.lock:
            names = [p.name for p in job.probes]
            got, received = sum(1 for n in names if n in job.captures), job.received
        return NodeFault("timeout", "command", f"SSH to {job.target} stalled while the probes ran: {got} of "
                         f"{len(names)} came back ({received} bytes), then nothing for {silent:.0f} s although the "
                         f"node writes every {_TICK:g} s ({why}) while the small handshake packets got through; "
                         f"{MTU_HINT}", connection="stalled")

    def _take_line(self, job: _Job, line: str, nonce: str) -> None:
        parsed = parse_output(line, nonce, source_prefix="ssh:")
        progress = job.round.progress
        for caps in parsed.captures.values():
            for cap in caps.values():
                with job.lock:
                    if job.outcome is not None:
                        return
                    job.captures[cap.probe] = cap
                if progress is not None:
                    try:
                        progress(job.node, cap)
                    except Exception:  # a display fault never loses a capture
                        pass
        if parsed.finished:
            with job.lock:
                job.finished = True
        for g in parsed.garbage:
            with job.lock:
                if len(job.garbage) < 20:
                    job.garbage.append(g)

    def _conclude(self, job: _Job, rc: int | None, stderr: str) -> None:
        finished = job.finished
        tail = [ln.strip() for ln in stderr.splitlines() if ln.strip()][-3:]
        why = " / ".join(tail)
        if finished:
            self._finish(job)
            return
        if rc == 127 and not job.captures:
            raise NodeFault("python-missing", "command", f"{self.remote_python} was not found on {job.node} (exit 127"
                            f"{': ' + why if why else ''}); install Python 3 there or point preflight at its interpreter")
        if job.garbage:
            shown = "; ".join(repr(g[:120]) for g in job.garbage[:_GARBAGE_SHOWN])
            raise NodeFault("garbage", "command", f"{job.node} answered with output that is not preflight's probe "
                            f"bundle (exit {rc}): {shown}", sample=" | ".join(job.garbage[:_GARBAGE_SHOWN]))
        if rc is None:
            raise NodeFault("disconnected", "command", f"the SSH session to {job.node} closed before the probes "
                            f"finished ({len(job.captures)} of {len(job.probes)} came back)")
        raise NodeFault("remote-error", "command", f"the probe bundle failed on {job.node} (exit {rc}"
                        f"{': ' + why if why else ''}); {len(job.captures)} of {len(job.probes)} probes came back")


# ---- a long-running command ----------------------------------------------------------------


class RemoteProcess:
    """A command running on one node over SSH, used like a child process: its stdout and
    stderr lines stream back over the session, `write` and `close_stdin` feed its stdin,
    `running`/`wait`/`returncode` give its end, `stop` ends it (stdin closed first, so an agent
    that watches its stdin ends its own children, then the session). Made by `SSHTransport.spawn`."""

    def __init__(self, ssh: SSHTransport, job: _Job, argv: Sequence[str], slots: threading.BoundedSemaphore,
                 on_line: LineFn | None = None) -> None:
        self.node = job.node
        self.argv = list(argv)
        self.command = shlex.join(self.argv)
        self.job = job
        self.returncode: int | None = None  # the command's exit status; None while it runs or when it gave none
        self._ssh = ssh
        self._slots = slots
        self._on_line = on_line
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._chan: paramiko.Channel | None = None
        self._pending = b""  # stdin written before the command started
        self._eof = False  # stdin closed (or to be closed once the command starts)
        self._stopped = False  # `stop` ended it: no fault of its own
        self._ended = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"preflight-ssh-{self.node}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # ---- what the caller sees ------------------------------------------------------------
    @property
    def failure(self) -> NodeOutcome | None:
        """Why the command could not start or was lost (`error` and `detail` as `collect`
        gives them); None while it runs, when it ran to its end, or when `stop` ended it."""
        out = self.job.outcome
        if out is None or not out.error or self._stopped:
            return None
        return out

    def running(self) -> bool:
        return not self._ended.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """True once the command has ended (within `timeout` seconds)."""
        return self._ended.wait(timeout)

    def lines(self) -> Iterator[str]:
        """Its output lines until it ends (only when `spawn` was given no `on_line`)."""
        if self._on_line is not None:
            return
        while (line := self._queue.get()) is not None:
            yield line

    def write(self, data: bytes) -> bool:
        """Send bytes to its stdin (kept until the command starts); False once stdin is closed,
        the command has ended or the session refuses them."""
        with self._lock:
            if self._eof or self._ended.is_set():
                return False
            if self._chan is None:
                self._pending += data
                return True
            chan = self._chan
        try:
            chan.sendall(data)
        except (OSError, EOFError, paramiko.SSHException):
            return False
        return True

    def close_stdin(self) -> None:
        """End its stdin (the remote command reads EOF); at once, or as soon as it starts."""
        with self._lock:
            self._eof = True
            chan = self._chan
        if chan is not None:
            _close_quietly([chan.shutdown_write])

    def stop(self, grace_s: float = 2.0) -> None:
        """Close its stdin, give it `grace_s` to exit, then close the session (a command still
        connecting is abandoned). Bounded, never raises."""
        self.close_stdin()
        if self._ended.wait(max(0.0, grace_s)):
            return
        self._stopped = True
        with self._lock:
            chan = self._chan
        if chan is None:
            self._ssh._abort(self.job, NodeFault("stopped", self.job.stage, f"{self.node}: stopped before its "
                                                 "command started"))
        else:
            _close_quietly([chan.close])
        self._ended.wait(2.0)

    # ---- the session ---------------------------------------------------------------------
    def _run(self) -> None:
        job = self.job
        try:
            chan = self._begin()
            self._pump(chan)
            self.returncode = self._exit_status(chan)
            self._ssh._finish(job)
        except _Aborted:
            pass
        except NodeFault as fault:
            self._ssh._finish(job, fault)
        except Exception as exc:  # never let the thread die silently
            self._ssh._finish(job, NodeFault("ssh", job.stage, f"SSH to {job.node} failed during {job.stage}: {exc}"))
        finally:
            job.set_closers()
            self._ended.set()
            self._emit(None)

    def _begin(self) -> paramiko.Channel:
        """Connect (or reuse the connection), run the command, hand it what stdin holds."""
        job, ssh = self.job, self._ssh
        while not self._slots.acquire(timeout=_POLL):
            job.check()
        try:
            job.started = time.monotonic()
            conn = ssh._connect(job, job.node)
            chan = ssh._start_command(job, conn, self.command, ssh.connect_timeout_for(conn.spec), combine_stderr=True)
        finally:
            self._slots.release()
        with job.lock:
            job.acked = True
        job.enter("running", None)
        job.set_closers(chan.close)
        with job.round.cond:
            job.round.cond.notify_all()
        with self._lock:
            self._chan = chan
            pending, self._pending = self._pending, b""
            try:
                if pending:
                    chan.sendall(pending)
                if self._eof:
                    chan.shutdown_write()
            except (OSError, EOFError, paramiko.SSHException):
                # The session refused the stdin kept for it: stdin counts as closed (later
                # writes say False, as `write` does), and the read that follows names the fault.
                self._eof = True
        return chan

    def _pump(self, chan: paramiko.Channel) -> None:
        chan.settimeout(None)
        buf = b""
        while True:
            try:
                data = chan.recv(65536)
            except (OSError, EOFError) as exc:
                if self._stopped:
                    return
                raise NodeFault("disconnected", "running", f"{self.job.target} dropped the connection while the "
                                f"command ran ({exc})") from exc
            if not data:
                break
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                self._emit(line.decode("utf-8", errors="replace"))
            if len(buf) > _LINE_MAX:
                self._emit(buf[:_LINE_MAX].decode("utf-8", errors="replace"))
                buf = b""
        if buf:
            self._emit(buf.decode("utf-8", errors="replace"))

    def _exit_status(self, chan: paramiko.Channel) -> int | None:
        """The command's exit status once its output has ended; a NodeFault when the session
        ended without one (the connection was lost, or the command was killed by a signal)."""
        until = time.monotonic() + self._ssh.connect_timeout
        while not chan.status_event.wait(_POLL):
            if chan.closed or self._stopped or time.monotonic() >= until:
                break
        _close_quietly([chan.close])
        rc = _exit_code(chan)
        if rc is not None or self._stopped:
            return rc
        t = chan.get_transport()
        if t is None or not t.is_active():
            raise NodeFault("disconnected", "running", f"the connection to {self.job.target} was lost while the "
                            "command ran")
        raise NodeFault("remote-error", "running", f"the command on {self.job.target} ended without an exit status "
                        "(killed by a signal?)")

    def _emit(self, line: str | None) -> None:
        if self._on_line is None:
            self._queue.put(line)
            return
        try:
            self._on_line(self.node, line)
        except Exception:  # a consumer's fault never stops the session
            log.debug("preflight: the line consumer of %s failed", self.node, exc_info=True)
