"""The srun transport: one job step runs the probe bundle on every node at once.

    srun -N<n> --ntasks-per-node=1 -w <nodes> --label --kill-on-bad-exit=0 python3 -c <program>

Inside an allocation (SLURM_JOB_ID set) the step runs in it (`--overlap`, so it can sit next
to a running training step); otherwise srun allocates, in `partition` when given.

Different nodes may need different probes (MTU pings name each node's peers), so the step
carries every distinct bundle once, compressed, with a table node -> bundle; each task picks
its own by SLURMD_NODENAME. One step per run, whatever the number of distinct bundles.

srun forwards task output in pieces of at most 1024 bytes and labels each piece as if it were
a line, so a long capture line would come back cut and interleaved with other nodes'. The
program therefore frames its output: every line is sent as pieces shorter than that limit,

    @@pfsrun <nonce> <node> + <piece>      (more pieces follow)
    @@pfsrun <nonce> <node> . <piece>      (last piece of the line)
    @@pfsrun <nonce> <node> hello          (the task started on that node)

and the reader puts each node's lines back together before `preflight.remote.parse_output`.

Bounded: a deadline (by default the slowest probe's timeout plus a start-up allowance)
aborts the step; a node that gave no output gets an error quoting srun's stderr lines about
it, and the captures that did come back count. Each node's bundle writes a tick every second
while its probes run, so a node whose output stops arriving (an MTU black hole holding its
I/O connection) is known within `stall_timeout` seconds: once every other node has finished,
the step is ended at once instead of at the deadline.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from preflight import lazyre
from preflight.inventory import compress, valid_node_name
from preflight.model import Capture
from preflight.probe_runner import SRUN_FRAME
from preflight.probes import DEFAULT_CAP, Probe
from preflight.procs import spawn, stop_group
from preflight.remote import MARK, ParsedOutput, build_script, parse_output
from preflight.slurm import node_addresses
from preflight.transport.base import NodeOutcome, ProgressFn, Transport

FRAME = SRUN_FRAME
FRAME_BYTES = 1000  # srun cuts task output at 1024 bytes; a frame line stays below that
ARGV_LIMIT = 96 * 1024  # one argv string may not exceed 128 KiB; above this the program goes on stdin
STARTUP_S = 30.0  # time allowed for the allocation and the step launch, on top of the probes
TICK_S = 1.0  # each node's bundle writes a tick this often while its probes run
STALL_S = 8.0  # a started node silent this long (8 ticks missed) has stalled
MTU_HINT = "large packets are probably dropped on the path (MTU black hole: check the MTU of every hop)"
# srun's words for a task launch whose connection to the node's slurmd opened and then carried
# nothing (slurm_strerror of SLURM_PROTOCOL_SOCKET_ZERO_BYTES_SENT and of a send/recv timeout): the
# node's slurmd is alive (its allocation came up), the launch message was too large for the path
_LAUNCH_STALL = lazyre.compile(r"Task launch for \S+ failed on node (\S+?):\s*"
                           r"(Zero Bytes were transmitted or received|Socket timed out on send/recv operation)")

class _Reader(threading.Thread):
    """Reads srun's stdout, puts each node's framed lines back together as they arrive."""

    def __init__(self, stream: object, nonce: str, progress: ProgressFn | None) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.nonce = nonce
        self.progress = progress
        self.head = f"{FRAME} {nonce} "
        self.partial: dict[str, list[str]] = {}
        self.lines: list[str] = []
        self.started: dict[str, str] = {}  # node -> srun task label
        self.heard: dict[str, float] = {}  # node -> monotonic time of its last output
        self.done: set[str] = set()  # nodes whose bundle said it finished
        self.nobundle: set[str] = set()
        self.other: list[str] = []
        self.lock = threading.Lock()
        self.past_deadline = False  # set when the step is being cancelled: no more progress

    def run(self) -> None:
        try:
            for raw in iter(self.stream.readline, b""):  # type: ignore[attr-defined]
                self.feed(raw.decode("utf-8", errors="replace").rstrip("\n"))
        except (OSError, ValueError):
            pass

    def feed(self, line: str) -> None:
        pos = line.find(self.head)
        if pos < 0:
            if line.strip() and len(self.other) < 50:
                self.other.append(line[:300])
            return
        label = line[:pos].strip().rstrip(":")
        node, _, rest = line[pos + len(self.head):].partition(" ")
        self.heard[node] = time.monotonic()
        if rest == "hello":
            self.started[node] = label
        elif rest == "nobundle":
            self.nobundle.add(node)
        else:
            whole = self._piece(node, rest)
            if whole is not None and f"{MARK} {self.nonce} tick " not in whole:
                self._line(node, whole)

    def _piece(self, node: str, rest: str) -> str | None:
        """Add one framed piece of `node`'s output; the whole line once its last piece came."""
        kind, _, piece = rest.partition(" ")
        if kind == "+":
            self.partial.setdefault(node, []).append(piece)
            return None
        if kind != ".":
            return None
        return "".join(self.partial.pop(node, [])) + piece

    def _line(self, node: str, whole: str) -> None:
        """One whole line of a node's bundle output: keep it, note the end, report captures."""
        with self.lock:
            self.lines.append(whole)
            if f"{MARK} {self.nonce} done " in whole:
                self.done.add(node)
        if self.progress is None or self.past_deadline:
            return
        for n, caps in parse_output(whole, self.nonce).captures.items():
            for cap in caps.values():
                try:
                    self.progress(n, cap)
                except Exception:  # a display fault never loses a capture
                    pass


class _Drain(threading.Thread):
    def __init__(self, stream: object, keep: int = 500) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.keep = keep
        self.lines: list[str] = []

    def run(self) -> None:
        try:
            for raw in iter(self.stream.readline, b""):  # type: ignore[attr-defined]
                if len(self.lines) < self.keep:
                    self.lines.append(raw.decode("utf-8", errors="replace").rstrip("\n")[:400])
        except (OSError, ValueError):
            pass


def build_program(bundles: Mapping[str, Sequence[Probe]], cap: int = DEFAULT_CAP,
                  nonce: str | None = None, frame_bytes: int = FRAME_BYTES) -> tuple[str, str]:
    """(program, nonce): the runner once, every distinct bundle once, and the node table."""
    calls: list[str] = []
    index: dict[tuple[Probe, ...], int] = {}
    table: dict[str, int] = {}
    common = ""
    for node, probes in bundles.items():
        key = tuple(probes)
        if key not in index:
            script, nonce = build_script(list(probes), cap=cap, nonce=nonce, tick_s=TICK_S)
            common, _, call = script.rpartition("\n")
            index[key] = len(calls)
            calls.append(call)
        table[node] = index[key]
    if not calls:
        script, nonce = build_script([], cap=cap, nonce=nonce)
        common = script.rpartition("\n")[0]
    assert nonce is not None
    packed = base64.b64encode(zlib.compress(json.dumps({"nodes": table, "calls": calls}).encode(), 9)).decode()
    program = "\n".join([common, f"dispatch({packed!r}, {nonce!r}, {int(frame_bytes)})", ""])
    return program, nonce


def _about(node: str, label: str, lines: Sequence[str]) -> list[str]:
    """srun's stderr lines that concern one node (its name, or its task label)."""
    word = re.compile(rf"(?<![\w.-]){re.escape(node)}(?![\w-])")
    out = [ln for ln in lines if word.search(ln)]
    if label:
        out += [ln for ln in lines if ln.startswith(f"{label}: ") and ln not in out]
    return out[:5]


@dataclass
class _Step:
    """One srun step: what went in, and how it ended (the grounds for each node's outcome)."""

    good: dict[str, Sequence[Probe]]
    nonce: str
    limit: float
    reader: _Reader
    deadline: float | None = None  # the run's --deadline in seconds, as the faults name it
    parsed: ParsedOutput = field(default_factory=ParsedOutput)
    stderr: list[str] = field(default_factory=list)
    stalled: dict[str, float] = field(default_factory=dict)
    timed_out: bool = False
    rc: int | None = None
    elapsed: float = 0.0

    @property
    def said(self) -> float:
        return self.deadline if self.deadline is not None else self.limit

    def outcome(self, node: str) -> NodeOutcome:
        caps: dict[str, Capture] = self.parsed.captures.get(node, {})
        outcome = NodeOutcome(node=node, captures=dict(caps), duration=self.parsed.finished.get(node, self.elapsed))
        if node not in self.parsed.finished:
            outcome.error, outcome.detail = self._fault(node, caps)
        return outcome

    def _fault(self, node: str, caps: Mapping[str, Capture]) -> tuple[str, dict[str, str]]:
        """Why a node that did not finish gave no (complete) result, quoting srun about it."""
        started = node in self.reader.started
        about = _about(node, self.reader.started.get(node, ""), self.stderr)
        quoted = ("; srun: " + " | ".join(about)) if about else ""
        if node in self.reader.nobundle:
            return "the step ran on the node but found no bundle for it (node name mismatch?)", {}
        stall = next((m for m in map(_LAUNCH_STALL.search, about) if m and m.group(1) == node), None)
        if stall is not None and not started:
            return (f"srun's task launch to {node} was never acknowledged: the connection to its slurmd opened, "
                    f"then carried nothing ({stall.group(2)}); {MTU_HINT}{quoted}",
                    {"kind": "timeout", "stage": "command", "connection": "stalled"})
        if node in self.stalled:
            return (f"the output of {node} stalled while the probes ran: {len(caps)} of {len(self.good[node])} "
                    f"came back, then nothing for {self.stalled[node]:.0f} s although the bundle writes "
                    f"every {TICK_S:g} s, while the other nodes finished; {MTU_HINT}{quoted}",
                    {"kind": "timeout", "stage": "command", "connection": "stalled"})
        if self.timed_out and started:
            missing = [p.name for p in self.good[node] if p.name not in caps]
            return (f"probe bundle did not finish within the {self.said:g} s deadline "
                    f"(no result for: {', '.join(missing) or '-'}){quoted}", {"kind": "timeout", "stage": "command"})
        if self.timed_out:
            return (f"no output from the node within the {self.said:g} s deadline{quoted}",
                    {"kind": "timeout", "stage": "launch"})
        generic = (f"the probe bundle stopped before finishing (srun exited {self.rc})" if started
                   else f"no output from the node (srun exited {self.rc})")
        tail = quoted or (f"; srun: {' | '.join(self.stderr[-3:])}" if self.stderr else "")
        return generic + tail, {"kind": "lost", "stage": "command" if started else "launch"}


class SrunTransport(Transport):
    name = "srun"

    def __init__(
        self,
        partition: str | None = None,
        deadline: float | None = None,
        cap: int = DEFAULT_CAP,
        python: str = "python3",
        srun: str = "srun",
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        argv_limit: int = ARGV_LIMIT,
        stall_timeout: float = STALL_S,
    ) -> None:
        self.partition = partition
        self._addresses: dict[str, str] = {}  # node -> NodeAddr, from earlier resolve_addresses calls
        self.deadline = deadline
        self.cap = cap
        self.python = python
        self.srun = srun
        self.extra_args = list(extra_args)
        self.env = dict(env) if env is not None else None
        self.argv_limit = argv_limit
        self.stall_timeout = max(float(stall_timeout), 2 * TICK_S)
        self._live: subprocess.Popen[bytes] | None = None  # the srun step in flight
        self.last_argv: list[str] = []  # for reports and tests

    def _environ(self) -> dict[str, str]:
        return dict(self.env) if self.env is not None else dict(os.environ)

    def command(self, nodes: Sequence[str], program: str, env: Mapping[str, str]) -> tuple[list[str], bool]:
        """(argv, program-on-stdin) for one step over `nodes`."""
        argv = [self.srun, f"-N{len(nodes)}", "--ntasks-per-node=1", f"--ntasks={len(nodes)}",
                "-w", compress(nodes), "--label", "--kill-on-bad-exit=0", "--job-name=preflight"]
        if env.get("SLURM_JOB_ID"):
            argv.append("--overlap")
        elif self.partition:
            argv.append(f"--partition={self.partition}")
        argv += self.extra_args
        if len(program.encode()) > self.argv_limit:
            return argv + [self.python, "-"], True
        return argv + [self.python, "-c", program], False

    def resolve_addresses(self, nodes: Sequence[str]) -> dict[str, str]:
        """node -> its NodeAddr from Slurm (what its peers ping), else its own name: one
        batched scontrol call for the nodes not asked about before. Never raises."""
        todo = [n for n in dict.fromkeys(nodes) if n not in self._addresses]
        if todo:
            self._addresses.update(node_addresses(todo))
        return {n: self._addresses[n] for n in nodes}

    def resolve_hostname(self, name: str) -> str:
        """One node's address (see `resolve_addresses`)."""
        return self.resolve_addresses([name])[name]

    def collect(
        self,
        bundles: Mapping[str, Sequence[Probe]],
        progress: ProgressFn | None = None,
    ) -> dict[str, NodeOutcome]:
        out = {n: NodeOutcome(node=n, error=f"invalid node name {n!r}") for n in bundles if not valid_node_name(n)}
        good = {n: probes for n, probes in bundles.items() if n not in out}
        if not good:
            return out
        slowest = max((p.timeout for ps in good.values() for p in ps), default=0.0)
        end = self.collect_end()  # the run's one deadline, shared by its collects
        limit = slowest + STARTUP_S if end is None else end - time.monotonic()
        if limit <= 0:
            why = f"the {self.deadline:g} s deadline of the run passed before the srun step could start"
            out.update({n: NodeOutcome(node=n, error=why, detail={"kind": "deadline", "stage": "launch"}) for n in good})
            return out
        program, nonce = build_program(good, cap=self.cap)
        env = self._environ()
        argv, on_stdin = self.command(list(good), program, env)
        self.last_argv = argv
        try:
            proc = spawn(argv, env=env, stdin=subprocess.PIPE if on_stdin else subprocess.DEVNULL)
        except OSError as exc:
            why = f"cannot run {self.srun}: {exc.strerror or exc}"
            out.update({n: NodeOutcome(node=n, error=why) for n in good})
            return out
        self._live = proc
        try:
            step = self._run_step(proc, program if on_stdin else None, _Step(good, nonce, limit, _Reader(
                proc.stdout, nonce, progress), deadline=self.deadline))
        finally:
            self._live = None
        out.update({node: step.outcome(node) for node in good})
        return out

    def _run_step(self, proc: subprocess.Popen[bytes], stdin_program: str | None, step: _Step) -> _Step:
        """Follow the step to its end, or cancel it at the deadline or once its nodes stalled."""
        reader = step.reader
        errs = _Drain(proc.stderr)
        reader.start()
        errs.start()
        if stdin_program is not None and proc.stdin is not None:
            try:
                proc.stdin.write(stdin_program.encode())
                proc.stdin.close()
            except OSError:
                pass
        start = time.monotonic()
        cutoff: int | None = None
        try:
            step.stalled = self._wait(proc, reader, list(step.good), start + max(0.1, step.limit))
        except subprocess.TimeoutExpired:
            step.timed_out = True
        if step.timed_out or step.stalled:
            with reader.lock:
                # what arrives after the deadline comes from cancelling the step (a probe killed
                # with it reports in on the way out): it did not finish in time
                cutoff = len(reader.lines)
                reader.past_deadline = True
            self._abort(proc)
        reader.join(timeout=5)
        errs.join(timeout=2)
        step.elapsed = time.monotonic() - start
        step.rc = proc.returncode
        step.stderr = errs.lines + [ln for ln in reader.other if ln not in errs.lines]
        with reader.lock:
            step.parsed = parse_output("\n".join(reader.lines[:cutoff]), step.nonce, source_prefix="srun:")
        return step

    def _wait(self, proc: subprocess.Popen[bytes], reader: _Reader, nodes: list[str],
              until: float) -> dict[str, float]:
        """Wait for the step; raise TimeoutExpired at `until`. Returns early, with the silent
        nodes and their silence, when every node has finished or stalled (at least one)."""
        while True:
            left = until - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, 0)
            try:
                proc.wait(timeout=min(0.25, left))
                return {}
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            with reader.lock:
                done = set(reader.done)
            silent = {n: now - reader.heard[n] for n in nodes
                      if n not in done and n in reader.heard and n in reader.started}
            stalled = {n: s for n, s in silent.items() if s >= self.stall_timeout}
            if stalled and all(n in done or n in stalled for n in nodes):
                return stalled

    def abort(self) -> None:
        """Cancel the step in flight (its nodes' runners end their probes as srun signals them)."""
        proc = self._live
        if proc is not None and proc.poll() is None:
            self._abort(proc)
        self.close()

    @staticmethod
    def _abort(proc: subprocess.Popen[bytes]) -> None:
        """Two SIGINTs within a second make srun cancel the step; then make sure it is gone."""
        for _ in range(2):
            try:
                proc.send_signal(signal.SIGINT)
            except OSError:
                pass
            time.sleep(0.3)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            stop_group(proc, grace_s=0.0)
