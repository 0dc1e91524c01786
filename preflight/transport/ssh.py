"""The SSH transport: one round trip per node, many nodes at once, every wait bounded.

Each node gets the probe bundle of `preflight.remote` as one `python3 -c PROGRAM` command
over an SSH session and sends back one delimited line per capture as soon as it is done.
Connections follow the OpenSSH client configuration (Host patterns, HostName, User, Port,
IdentityFile, IdentitiesOnly, ProxyJump, UserKnownHostsFile, GlobalKnownHostsFile,
StrictHostKeyChecking, HostKeyAlias), authenticate with keys and the ssh-agent only, and
verify host keys against known_hosts. They stay open for the transport's lifetime, so the
second phase of a run reuses them; `close()` (or leaving a `with` block) closes them.

Bounds: a per-stage budget (connect, banner, kex, auth: `connect_timeout` each; command:
`command_timeout`), and an optional `deadline` for the whole collection. A supervisor in the
calling thread enforces them: a node over its budget is ended with an error at once and its
sockets are closed from a daemon thread, so no worker ever keeps the caller waiting.

Every node-level fault is an outcome, never an exception: `NodeOutcome.error` is one
sentence and `NodeOutcome.detail` says `kind` (dns, refused, unreachable, timeout, deadline,
hostkey-unknown, hostkey-changed, auth, python-missing, remote-error, garbage, disconnected,
config, ssh) and `stage` (queued, connect, banner, kex, auth, command).
"""

from __future__ import annotations

import base64
import errno
import getpass
import hashlib
import logging
import os
import re
import shlex
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import paramiko

from preflight.model import Capture
from preflight.probes import DEFAULT_CAP, Probe
from preflight.remote import build_script, parse_output
from preflight.transport.base import NodeOutcome, ProgressFn, Transport

STAGES = ("queued", "connect", "banner", "kex", "auth", "command")
DEFAULT_IDENTITIES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")
DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
MTU_HINT = "large packets are probably dropped on the path (MTU black hole: check the MTU of every hop)"
_POLL = 0.1  # seconds between checks of a worker's abort flag
_BACKSTOP = 5.0
_LIVENESS = 3.0  # seconds a stalled command's connection gets to answer a new session
_TICK = 1.0  # the bundle's tick interval on the node: a live session is never silent longer
_STALL_LIVENESS = 2.0  # after the stall timer: seconds a new session gets to answer (a live one: milliseconds)
_MAX_HOPS = 8
_GARBAGE_SHOWN = 3
_STDERR_KEPT = 16384
_NAME_OK = re.compile(r"^[A-Za-z0-9_.:\[\]-]+$")

log = logging.getLogger("preflight.transport.ssh")


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
    )


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


def _close_quietly(fns: list[Callable[[], None]]) -> None:
    for fn in fns:
        try:
            fn()
        except Exception:
            pass


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


# ---- the transport -------------------------------------------------------------------------


class SSHTransport(Transport):
    name = "ssh"

    def __init__(
        self,
        ssh_config: Path | None = None,
        concurrency: int = 64,
        connect_timeout: float = 10,
        command_timeout: float = 60,
        deadline: float | None = None,
        accept_new_host_keys: bool = False,
        remote_python: str = "python3",
        cap: int = DEFAULT_CAP,
        user: str | None = None,
        stall_timeout: float = 4.0,
    ) -> None:
        self.config = paramiko.SSHConfig()
        path = ssh_config if ssh_config is not None else Path("~/.ssh/config").expanduser()
        if ssh_config is not None and not ssh_config.is_file():
            raise ValueError(f"SSH configuration {ssh_config} does not exist")
        if path.is_file():
            self.config = paramiko.SSHConfig.from_path(str(path))
        self.config_path = path if path.is_file() else None
        self.concurrency = max(1, int(concurrency))
        self.connect_timeout = float(connect_timeout)
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
        self._agent: paramiko.Agent | None = None
        self._closed = False

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
        start = time.monotonic()
        end = None if self.deadline is None else start + float(self.deadline)
        rnd = _Round(cond=threading.Condition(), pending=deque(), progress=progress)
        jobs = [_Job(node=n, probes=list(ps), round=rnd, target=n) for n, ps in bundles.items()]
        rnd.pending.extend(jobs)
        for i in range(min(self.concurrency, len(jobs))):
            threading.Thread(target=self._worker, args=(rnd,), name=f"preflight-ssh-{i}", daemon=True).start()
        with rnd.cond:
            while True:
                now = time.monotonic()
                open_jobs = [j for j in jobs if not j.done()]
                if not open_jobs:
                    break
                if end is not None and now >= end:
                    rnd.closed = True
                    for job in open_jobs:
                        self._abort(job, self._deadline_fault(job, float(self.deadline or 0)))
                    break
                wake = now + 1.0 if end is None else min(end, now + 1.0)
                aborted = False
                for job in open_jobs:
                    with job.lock:
                        ends = job.stage_ends
                    if ends is None:
                        continue
                    if now >= ends:
                        self._abort(job, self._timeout_fault(job))
                        aborted = True
                    else:
                        wake = min(wake, ends)
                if not aborted:
                    rnd.cond.wait(timeout=max(0.005, wake - time.monotonic()))
        return {j.node: j.outcome or NodeOutcome(node=j.node, error="lost by the SSH transport") for j in jobs}

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
            if job.stage == "queued":
                msg = (f"the {deadline:g} s deadline of the whole collection passed before {job.node} was contacted "
                       f"(concurrency {self.concurrency})")
            else:
                waited = round(time.monotonic() - job.stage_started, 1)
                msg = f"the {deadline:g} s deadline of the whole collection passed: " + self._stage_sentence(job, waited)
            return NodeFault("deadline", job.stage, msg)

    # ---- connections ---------------------------------------------------------------------
    def _spec(self, name: str) -> HostSpec:
        return resolve_host(self.config, name, self.user)

    def resolve_hostname(self, name: str) -> str:
        """The address the OpenSSH config gives for `name` (HostName), for peer pings."""
        return self._spec(name).hostname or name

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
        # as long as its whole handshake may take, then take a fresh connect budget
        job.enter("connect", 4 * self.connect_timeout + 1)
        while not lock.acquire(timeout=_POLL):
            job.check()
        try:
            job.enter("connect", self.connect_timeout)
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
            conn = self._open(job, spec, via, key)
            with self._lock:
                self._conns[key] = conn
            return conn
        finally:
            lock.release()

    def _open_socket(self, job: _Job, spec: HostSpec, via: _Conn | None) -> Any:
        t = job.target
        if via is not None:
            try:
                chan = via.transport.open_channel(
                    "direct-tcpip", (spec.hostname, spec.port), ("127.0.0.1", 0), timeout=self.connect_timeout)
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
                                f"{spec.address} for {t} within {self.connect_timeout:g} s ({exc})",
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
                left = (job.stage_ends or time.monotonic() + self.connect_timeout) - time.monotonic()
            sock.settimeout(max(0.05, left))
            try:
                sock.connect(addr)
            except TimeoutError:
                sock.close()
                job.check()
                last = NodeFault("timeout", "connect", self._stage_sentence(job, self.connect_timeout))
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
        try:
            t.banner_timeout = self.connect_timeout + _BACKSTOP
            t.handshake_timeout = self.connect_timeout + _BACKSTOP
            t.auth_timeout = self.connect_timeout + _BACKSTOP
            known = self._known_keys(spec)
            if known:
                families = {_key_family(k.get_name()) for _, k in known}
                opts = t.get_security_options()
                types = list(opts.key_types)
                opts.key_types = tuple([k for k in types if _key_family(k) in families]
                                       + [k for k in types if _key_family(k) not in families])
            job.enter("banner", self.connect_timeout)
            event = threading.Event()
            t.start_client(event=event)
            while not event.is_set():
                event.wait(_POLL)
                job.check()
                if job.stage == "banner" and t.remote_version:
                    job.enter("kex", self.connect_timeout)
                if not t.is_active():
                    break
            job.check()
            if not t.is_active() or not t.remote_version or t.host_key is None:
                exc = t.get_exception()
                stage = job.stage
                if stage == "banner":
                    raise NodeFault("ssh", "banner", f"{job.target} did not speak SSH: {exc or 'connection closed'}")
                raise NodeFault("ssh", stage, f"SSH key exchange with {job.target} failed: {exc or 'connection closed'}")
            self._verify_host_key(job, spec, t.get_remote_server_key(), known)
            job.enter("auth", self.connect_timeout)
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
            if not path.is_file():
                continue
            hk = paramiko.HostKeys()
            try:
                hk.load(str(path))
            except (OSError, UnicodeDecodeError):
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

    def _authenticate(self, job: _Job, spec: HostSpec, t: paramiko.Transport) -> None:
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
        if not keys:
            raise NodeFault("auth", "auth", f"no usable SSH key for {job.target}: "
                            f"{'; '.join(notes) or 'no IdentityFile, no default key, no ssh-agent'}")
        tried: list[str] = []
        for label, pkey in keys:
            job.check()
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
                tried.append(label)
                continue
            except (paramiko.SSHException, OSError, EOFError) as exc:
                job.check()
                raise NodeFault("disconnected", "auth", f"{job.target} dropped the connection during "
                                f"authentication ({exc})") from exc
            if remaining:
                raise NodeFault("auth", "auth", f"{job.target} wants more than a key for {spec.user[:64]} "
                                f"({', '.join(remaining)}); preflight uses keys and ssh-agent only")
            if t.is_authenticated():
                return
        extra = f"; also: {'; '.join(notes)}" if notes else ""
        raise NodeFault("auth", "auth", f"{job.target} rejected every key for user {spec.user[:64]} (tried "
                        f"{', '.join(tried)}): add the public key to that user's authorized_keys there{extra}")

    # ---- the bundle ----------------------------------------------------------------------
    def _run_bundle(self, job: _Job, conn: _Conn) -> None:
        script, nonce = build_script(job.probes, self.cap, watch_stdin=True, tick_s=_TICK)
        command = f"{self.remote_python} -c {shlex.quote(script)}"
        t = conn.transport
        job.target = f"{job.node} ({conn.spec.address})" + (f" through jump host {conn.via}" if conn.via else "")
        job.via = conn.via
        job.enter("command", self.command_timeout)
        try:
            chan = t.open_session(timeout=self.connect_timeout)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            job.check()
            _close_quietly([t.close])
            raise NodeFault("disconnected", "command", f"{job.target} refused a new SSH session ({exc})") from exc
        job.set_closers(chan.close, t.close)
        with job.lock:
            job.command_bytes = len(command)
        try:
            chan.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            job.check()
            raise NodeFault("disconnected", "command", f"{job.target} did not run the command ({exc})") from exc
        # From here the worker enforces the command timeout itself (it polls every _POLL s) so
        # that it can tell hung probes from a stalled connection; the supervisor keeps a backstop.
        check_wait = min(_LIVENESS, self.connect_timeout)
        with job.lock:
            job.acked = True
            until = job.stage_ends or time.monotonic() + self.command_timeout
            job.stage_ends = until + check_wait + 1.0
        chan.settimeout(_POLL)
        buf = b""
        stderr = b""
        limit = 8 * self.cap + 1_048_576
        heard = time.monotonic()  # the last time any byte came back on this session
        while True:
            job.check()
            while chan.recv_stderr_ready():
                stderr = (stderr + chan.recv_stderr(65536))[-_STDERR_KEPT:]
                heard = time.monotonic()
            if time.monotonic() >= until:
                raise self._command_timeout(job, t, chan, check_wait)
            try:
                data = chan.recv(65536)
            except TimeoutError:
                silent = time.monotonic() - heard
                if silent >= self.stall_timeout:
                    fault = self._stalled(job, t, chan, silent, min(check_wait, _STALL_LIVENESS))
                    if fault is not None:
                        raise fault from None
                    heard = time.monotonic()  # the connection answers: the node is merely slow to write
                continue
            except (OSError, EOFError) as exc:
                job.check()
                raise NodeFault("disconnected", "command", f"{job.target} dropped the connection while running the "
                                f"probes ({exc})") from exc
            if not data:
                break
            heard = time.monotonic()
            with job.lock:
                job.received += len(data)
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                self._take_line(job, line.decode("utf-8", errors="replace"), nonce)
            if len(buf) > limit:
                self._take_line(job, buf[:300].decode("utf-8", errors="replace"), nonce)
                buf = b""
        if buf:
            self._take_line(job, buf.decode("utf-8", errors="replace"), nonce)
        while not chan.status_event.wait(_POLL):
            job.check()
            if chan.closed and not chan.exit_status_ready():
                break
        while chan.recv_stderr_ready():
            stderr = (stderr + chan.recv_stderr(65536))[-_STDERR_KEPT:]
        rc = chan.exit_status if chan.exit_status_ready() else None
        _close_quietly([chan.close])
        job.set_closers()
        self._conclude(job, rc, stderr.decode("utf-8", errors="replace"))

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
