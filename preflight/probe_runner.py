"""The probe runner: the part of preflight that runs on a node.

Standard library only, and no import of the rest of preflight: a node needs nothing but a stock
`python3`. `preflight.remote.build_script` ships this file's own text, verbatim, followed by
one fixed line that calls `serve(PAYLOAD)`; where preflight is installed on the node,
`python -m preflight.probe_runner [PAYLOAD | -]` does the same with the payload from its
argument or from the first line of stdin. Locally, `preflight.probes` runs probes through
the same functions.

The payload (JSON, built by `encode_payload`) names the protocol, a nonce, the output cap, the
probes, and whether to tick and watch stdin. Output, one whole, flushed line each:

    @@preflight <nonce> hello <node> <protocol>            first: the handshake
    @@preflight <nonce> capture <json>                      one per probe, as soon as it ends
    @@preflight <nonce> tick <node> <seconds>                every tick_s while probes run
    @@preflight <nonce> done <node> <seconds> <protocol>    last

A capture's JSON is a `Result` record plus "node" and "protocol". A payload of another protocol
gets the hello line (so the controller learns what this runner speaks), a sentence on stderr
and exit status 2, and no probe runs.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import IO, Any

PROTOCOL = 2  # the payload and output format above; both sides must speak the same one
MARK = "@@preflight"
SRUN_FRAME = "@@pfsrun"  # the head of each framed line a node sends back through srun
PYTHON_TOKEN = "{python}"  # an argv[0] the node replaces by the Python running the bundle
_TEXT_TOKEN = "\0text:"  # + an index into the payload's texts
_SHARED_MIN = 512  # characters from which a command argument is sent once, in texts
DEFAULT_TIMEOUT = 10.0
DEFAULT_CAP = 8 * 1024 * 1024  # bytes kept per stream
_CHUNK = 65536
OK, MISSING, TIMEOUT, FAILED = "ok", "missing", "timeout", "failed"
STATES = (OK, MISSING, TIMEOUT, FAILED)
BAD_PAYLOAD = 2  # exit status: a payload this runner cannot run
STDIN_GONE = 3  # exit status: the caller's session went away (stdin reached EOF)

# processes of probes still running (so a bundle whose caller went away can end them)
LIVE: set[subprocess.Popen[bytes]] = set()
_LIVE_LOCK = threading.Lock()
_ENDED = threading.Event()  # set by end_live: a probe started afterwards is ended at once, none is started
END_GRACE_S = 1.0  # end_live: how long the probes' groups have after SIGTERM before SIGKILL
STOP_GRACE_S = 0.5  # the same on a node whose caller went away or cancelled the step


@dataclass(frozen=True)
class Probe:
    """A node-local command. `commands` are alternatives tried in order: the next one runs
    when a tool is missing or exits non-zero (e.g. `dmesg -T`, then `journalctl -k`)."""

    name: str
    commands: tuple[tuple[str, ...], ...]
    timeout: float = DEFAULT_TIMEOUT
    env: tuple[tuple[str, str], ...] = field(default=())

    @property
    def tool(self) -> str:
        return self.commands[0][0] if self.commands else self.name

    @classmethod
    def of(cls, name: str, *commands: Sequence[str], timeout: float = DEFAULT_TIMEOUT) -> Probe:
        return cls(name=name, commands=tuple(tuple(c) for c in commands), timeout=timeout)


@dataclass
class Result:
    """What one command or probe produced: the record a node sends back. `state` is one of
    STATES; `reason` is a human sentence for every state but OK."""

    probe: str
    argv: list[str]
    state: str
    stdout: str = ""
    stderr: str = ""
    rc: int | None = None
    duration: float = 0.0
    truncated: bool = False
    timeout: float = 0.0
    reason: str = ""

    def record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, rec: Any) -> Result:
        """The Result a record describes; ValueError, KeyError or TypeError when it is not one."""
        if not isinstance(rec, dict) or not isinstance(rec["argv"], list):
            raise ValueError("not a capture record")
        state = str(rec["state"])
        if state not in STATES:
            raise ValueError(f"unknown capture state {state!r}")
        return cls(probe=str(rec["probe"]), argv=[str(a) for a in rec["argv"]], state=state,
                   stdout=str(rec["stdout"]), stderr=str(rec["stderr"]),
                   rc=None if rec["rc"] is None else int(rec["rc"]), duration=float(rec["duration"]),
                   truncated=bool(rec["truncated"]), timeout=float(rec["timeout"]), reason=str(rec["reason"]))


# ----- one command ----------------------------------------------------------------------------


class _CappedReader(threading.Thread):
    """Drains a pipe, keeping the head and the tail within `cap` bytes."""

    def __init__(self, stream: IO[bytes] | None, cap: int) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.head_cap = cap // 4
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def run(self) -> None:
        stream = self.stream
        if stream is None:
            return
        try:
            chunk = stream.read(_CHUNK)
            while chunk:
                self._keep(chunk)
                chunk = stream.read(_CHUNK)
        except (OSError, ValueError):
            pass

    def _keep(self, chunk: bytes) -> None:
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.tail_cap:
                cut = len(self.tail) - self.tail_cap
                self.dropped += cut
                del self.tail[:cut]

    def text(self) -> str:
        data = bytes(self.head)
        if self.dropped:
            data += f"\n[preflight: {self.dropped} bytes of output dropped here]\n".encode()
        data += bytes(self.tail)
        return data.decode("utf-8", errors="replace")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        try:
            proc.kill()
        except OSError:
            pass


@dataclass
class _Running:
    """A started command, its two pipe readers, and its place in LIVE until it is reaped."""

    proc: subprocess.Popen[bytes]
    out: _CappedReader
    err: _CappedReader

    @classmethod
    def watch(cls, proc: subprocess.Popen[bytes], cap: int) -> _Running:
        with _LIVE_LOCK:
            LIVE.add(proc)
            ended = _ENDED.is_set()
        if ended:  # started as end_live took its list: not left behind
            _kill_group(proc)
        run = cls(proc, _CappedReader(proc.stdout, cap), _CappedReader(proc.stderr, cap))
        run.out.start()
        run.err.start()
        return run

    def wait(self, timeout: float) -> bool:
        """Wait for the command's exit; at `timeout` kill its group. True when it timed out."""
        try:
            self.proc.wait(timeout=timeout)
            return False
        except subprocess.TimeoutExpired:
            _kill_group(self.proc)
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        return True

    def finish(self) -> None:
        """Drain the pipes (bounded: a child that inherited them may keep them open), close them."""
        self.out.join(timeout=2)
        self.err.join(timeout=2)
        if self.out.is_alive() or self.err.is_alive():
            _kill_group(self.proc)
            self.out.join(timeout=1)
            self.err.join(timeout=1)
        for stream in (self.proc.stdout, self.proc.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        with _LIVE_LOCK:
            LIVE.discard(self.proc)


def _start(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, start_new_session=True)


def run_command(
    argv: Sequence[str],
    timeout: float = DEFAULT_TIMEOUT,
    cap: int = DEFAULT_CAP,
    env: dict[str, str] | None = None,
    probe: str = "",
) -> Result:
    """Run one command; never raises, never waits longer than `timeout` (plus a short grace)."""
    argv = list(argv)
    name = probe or (argv[0] if argv else "?")
    if not argv:
        return Result(name, argv, FAILED, reason="empty command")
    full_env = {**os.environ, **(env or {})}
    if shutil.which(argv[0], path=full_env.get("PATH")) is None:
        return Result(name, argv, MISSING, reason=f"{argv[0]} not found on PATH", timeout=timeout)
    if _ENDED.is_set():
        return Result(name, argv, FAILED, reason=f"{argv[0]} not started: the run was ended", timeout=timeout)
    start = time.monotonic()
    try:
        proc = _start(argv, full_env)
    except OSError as exc:
        state = MISSING if isinstance(exc, FileNotFoundError) else FAILED
        return Result(name, argv, state, reason=f"{argv[0]}: {exc.strerror or exc}", timeout=timeout)
    running = _Running.watch(proc, cap)
    timed_out = running.wait(timeout)
    running.finish()
    result = Result(name, argv, TIMEOUT if timed_out else OK, stdout=running.out.text(), stderr=running.err.text(),
                    rc=None if timed_out else proc.returncode, duration=round(time.monotonic() - start, 4),
                    truncated=bool(running.out.dropped or running.err.dropped), timeout=timeout)
    if timed_out:
        result.reason = f"{' '.join(argv)} did not finish within {timeout:g} s and was killed"
    return result


def kill_live() -> None:
    """End every probe still running, with its process group."""
    with _LIVE_LOCK:
        procs = list(LIVE)
    for proc in procs:
        _kill_group(proc)


def _group_running(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def end_live(grace: float = END_GRACE_S) -> int:
    """End every probe this process started and start no more (until `reopen`): SIGTERM to
    each probe's process group, up to `grace` seconds for them to leave, then SIGKILL to the
    groups still there. Never raises; the number of probes that were running."""
    with _LIVE_LOCK:
        _ENDED.set()
        procs = list(LIVE)
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except OSError:
            pass
    until = time.monotonic() + max(0.0, grace)
    while time.monotonic() < until and any(proc.poll() is None for proc in procs):
        time.sleep(0.02)
    for proc in procs:
        if proc.poll() is None or _group_running(proc.pid):
            _kill_group(proc)
    return len(procs)


def reopen() -> None:
    """Probes may start again (a new run in the same process, after `end_live`)."""
    _ENDED.clear()


# ----- probes and bundles ---------------------------------------------------------------------


def run_probe(probe: Probe, cap: int = DEFAULT_CAP, timeout: float | None = None) -> Result:
    """Run a probe, trying its alternative commands in order."""
    limit = probe.timeout if timeout is None else timeout
    env = dict(probe.env) if probe.env else None
    deadline = time.monotonic() + limit
    last: Result | None = None
    missing: list[str] = []
    for argv in probe.commands:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        result = run_command(argv, timeout=left, cap=cap, env=env, probe=probe.name)
        result.timeout = limit
        if result.state == MISSING:
            missing.append(argv[0])
            continue
        if result.state == TIMEOUT:
            result.reason = f"probe {probe.name} ({' '.join(argv)}) timed out after {limit:g} s"
            return result
        last = result
        if result.rc == 0:
            return result
    if last is not None:
        return last
    tools = ", ".join(dict.fromkeys(missing)) or probe.tool
    return Result(probe.name, list(probe.commands[0]) if probe.commands else [], MISSING,
                  reason=f"{tools} not found on PATH", timeout=limit)


def run_bundle(
    probes: Sequence[Probe],
    cap: int = DEFAULT_CAP,
    max_workers: int = 32,
    on_done: Callable[[Result], None] | None = None,
) -> dict[str, Result]:
    """Run all probes of a node concurrently; the wall time is the slowest probe, not the sum."""
    unique = list({p.name: p for p in probes}.values())
    if not unique:
        return {}

    def one(p: Probe) -> Result:
        result = run_probe(p, cap)
        if on_done is not None:
            try:
                on_done(result)
            except Exception:  # a display fault never loses a capture
                pass
        return result

    with ThreadPoolExecutor(max_workers=min(max_workers, len(unique))) as pool:
        futures = {p.name: pool.submit(one, p) for p in unique}
        return {name: fut.result() for name, fut in futures.items()}


# ----- the payload ----------------------------------------------------------------------------


@dataclass
class _Texts:
    """Long command arguments (a program run with `python -c`), each sent once however many
    probes use it; a command names one by a token that no real argument can be (it has a NUL)."""

    python: str
    texts: list[str] = field(default_factory=list)

    def token(self, index: int, arg: str) -> str:
        if index == 0 and arg == self.python:
            return PYTHON_TOKEN
        if len(arg) < _SHARED_MIN:
            return arg
        if arg not in self.texts:
            self.texts.append(arg)
        return f"{_TEXT_TOKEN}{self.texts.index(arg)}"


def encode_payload(probes: Sequence[Probe], nonce: str, cap: int = DEFAULT_CAP, watch_stdin: bool = False,
                   tick_s: float = 0.0, python: str = sys.executable) -> str:
    """The payload (one line of JSON) that makes `serve` run `probes`. A command whose argv[0]
    is `python` runs with the node's own Python."""
    shared = _Texts(python)
    specs = [{"name": p.name, "timeout": p.timeout, "env": [list(kv) for kv in p.env],
              "commands": [[shared.token(i, a) for i, a in enumerate(c)] for c in p.commands]}
             for p in probes]
    return json.dumps({"protocol": PROTOCOL, "nonce": nonce, "cap": cap, "watch_stdin": watch_stdin,
                       "tick_s": tick_s, "texts": shared.texts, "probes": specs})


@dataclass
class Payload:
    """A decoded payload."""

    nonce: str
    protocol: int
    cap: int = DEFAULT_CAP
    watch_stdin: bool = False
    tick_s: float = 0.0
    probes: list[Probe] = field(default_factory=list)

    @classmethod
    def head(cls, text: str) -> Payload:
        """Nonce and protocol only (the rest may be of another protocol): ValueError, KeyError
        or TypeError when the text is not a payload at all."""
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError("the payload is not a JSON object")
        return cls(nonce=str(doc["nonce"]), protocol=int(doc.get("protocol") or 1))

    def body(self, text: str) -> None:
        """Read the rest of a payload of this protocol."""
        doc = json.loads(text)
        self.cap = int(doc["cap"])
        self.watch_stdin = bool(doc.get("watch_stdin"))
        self.tick_s = float(doc.get("tick_s") or 0)
        texts = [str(t) for t in doc.get("texts") or []]
        self.probes = [_probe_of(spec, texts) for spec in doc["probes"]]


def _argument(token: Any, texts: list[str]) -> str:
    """A command argument from its payload form (IndexError or ValueError for a bad token)."""
    arg = str(token)
    if arg == PYTHON_TOKEN:
        return sys.executable
    if arg.startswith(_TEXT_TOKEN):
        return texts[int(arg[len(_TEXT_TOKEN):])]
    return arg


def _probe_of(spec: dict[str, Any], texts: list[str]) -> Probe:
    commands = tuple(tuple(_argument(a, texts) for a in c) for c in spec["commands"])
    env = tuple((str(k), str(v)) for k, v in spec["env"])
    return Probe(name=str(spec["name"]), commands=commands, timeout=float(spec["timeout"]), env=env)


# ----- serving a bundle on the node -----------------------------------------------------------


def node_name() -> str:
    """This node's name as the controller knows it (Slurm's, else the short host name)."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


@dataclass
class _Session:
    """One bundle's run on the node: its output lines, and its way out when told to stop."""

    nonce: str
    node: str
    start: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: list[int] = field(default_factory=list)
    finished: threading.Event = field(default_factory=threading.Event)

    def emit(self, kind: str, body: str) -> None:
        """One whole output line; none once the session is stopping (a probe killed on the
        way out is not a result)."""
        with self.lock:
            if self.stopping:
                return
            sys.stdout.write(f"{MARK} {self.nonce} {kind} {body}\n")
            sys.stdout.flush()

    def elapsed(self) -> str:
        return f"{time.monotonic() - self.start:.3f}"

    def report(self, result: Result) -> None:
        self.emit("capture", json.dumps({"node": self.node, "protocol": PROTOCOL, **result.record()}))

    def stop(self, status: int) -> None:
        """End the probes (they run in their own sessions, out of reach of our signals) and
        leave at once, without a traceback."""
        self.stopping.append(status)
        end_live(STOP_GRACE_S)
        os._exit(status)


def _stop_on_signals(session: _Session) -> None:
    """srun cancelling the step, or the session going away, ends the probes with the bundle."""

    def handler(signum: int, frame: object) -> None:
        session.stop(128 + signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(sig, handler)
        except (ValueError, OSError):
            pass


def _stop_at_stdin_eof(session: _Session) -> None:
    """The caller keeps our stdin open; EOF means its session is gone (SSH dropped, preflight
    killed): end the probes and leave nothing running on the node."""

    def watch() -> None:
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except Exception:
            pass
        session.stop(STDIN_GONE)

    threading.Thread(target=watch, daemon=True).start()


def _tick_every(session: _Session, tick_s: float) -> None:
    """A tick line every `tick_s` seconds until the probes are done: never silent for long."""

    def ticker() -> None:
        while not session.finished.wait(tick_s):
            session.emit("tick", f"{session.node} {session.elapsed()}")

    threading.Thread(target=ticker, daemon=True).start()


def serve(text: str) -> int:
    """Run the bundle a payload describes, writing its output lines; the exit status."""
    try:
        payload = Payload.head(text)
    except (ValueError, KeyError, TypeError) as exc:
        sys.stderr.write(f"preflight probe runner: not a bundle payload ({exc})\n")
        return BAD_PAYLOAD
    session = _Session(payload.nonce, node_name())
    session.emit("hello", f"{session.node} {PROTOCOL}")
    if payload.protocol != PROTOCOL:
        sys.stderr.write(f"preflight probe runner on {session.node}: the bundle is for protocol "
                         f"{payload.protocol}, this runner speaks protocol {PROTOCOL}; run the same "
                         f"preflight version on the node and the controller\n")
        return BAD_PAYLOAD
    try:
        payload.body(text)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        sys.stderr.write(f"preflight probe runner on {session.node}: unreadable bundle payload ({exc!r})\n")
        return BAD_PAYLOAD
    _stop_on_signals(session)
    if payload.watch_stdin:
        _stop_at_stdin_eof(session)
    if payload.tick_s > 0:
        _tick_every(session, payload.tick_s)
    try:
        run_bundle(payload.probes, cap=payload.cap, on_done=session.report)
    finally:
        session.finished.set()
    if session.stopping:  # a stop under way in another thread ends the probes' groups, then the process
        time.sleep(STOP_GRACE_S + 2.0)
        return session.stopping[0]
    session.emit("done", f"{session.node} {session.elapsed()} {PROTOCOL}")
    return 0


# ----- one program for every node of an srun step --------------------------------------------


class FramedWriter:
    """Standard output for a node under srun: each whole line goes out as pieces no wider than
    srun forwards intact (`<tag> + piece` for a line that goes on, `<tag> . piece` for its end)."""

    def __init__(self, out: IO[str], tag: str, width: int) -> None:
        self.out, self.tag, self.width, self.buf = out, tag, width, ""

    def write(self, text: str) -> int:
        self.buf += text
        while "\n" in self.buf:
            line, self.buf = self.buf.split("\n", 1)
            self._pieces(line)
        self.out.flush()
        return len(text)

    def _pieces(self, line: str) -> None:
        pos = 0
        while True:
            piece = line[pos:pos + self.width]
            pos += self.width
            more = pos < len(line)
            self.out.write(f"{self.tag} {'+' if more else '.'} {piece}\n")
            if not more:
                return

    def flush(self) -> None:
        self.out.flush()


def dispatch(table: str, nonce: str, limit: int) -> None:
    """Run this node's call out of an srun step's packed table (base64 of zlib of JSON
    `{"nodes": {node: index}, "calls": [program line, ...]}`): one program serves every node,
    each picks its own bundle by its Slurm node name. Output lines are framed (`FramedWriter`)
    and tagged with the nonce and the node; a node the table does not name says `nobundle`."""
    node = node_name()
    tag = f"{SRUN_FRAME} {nonce} {node}"
    real = sys.stdout
    real.write(f"{tag} hello\n")
    real.flush()
    sys.stdout = FramedWriter(real, tag, max(64, limit - len(tag) - 8))  # type: ignore[assignment]
    data = json.loads(zlib.decompress(base64.b64decode(table)).decode())
    index = data["nodes"].get(node)
    if index is None:
        real.write(f"{tag} nobundle\n")
        real.flush()
        return
    exec(data["calls"][index], globals())  # one line this module's build_script made: serve(...)
    sys.stdout.flush()


def main(argv: Sequence[str]) -> int:
    """`python -m preflight.probe_runner [PAYLOAD | -]`: the payload from the argument, or from
    the first line of stdin (the rest of stdin stays open for `watch_stdin`)."""
    if argv and argv[0] != "-":
        return serve(argv[0])
    return serve(sys.stdin.buffer.readline().decode("utf-8", errors="replace"))


# Run as a module only: shipped as `python3 -c <this text>`, __spec__ is None and the line the
# controller appends calls `serve` itself.
if __name__ == "__main__" and __spec__ is not None:
    sys.exit(main(sys.argv[1:]))
