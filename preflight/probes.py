"""Probes: node-local commands with a timeout, an output cap and fallbacks.

A probe is data (a name and argv lists), so a bundle of probes can travel to a remote node
and run there the same way. `run_probe` and `run_bundle` use only the standard library;
every wait is bounded and a hung tool is killed with its whole process group.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from preflight.model import Capture, CaptureState

DEFAULT_TIMEOUT = 10.0
# processes of probes still running (so a bundle whose caller went away can end them)
LIVE: set[subprocess.Popen[bytes]] = set()
_LIVE_LOCK = threading.Lock()
DEFAULT_CAP = 8 * 1024 * 1024  # bytes kept per stream
_CHUNK = 65536


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


class _CappedReader(threading.Thread):
    """Drains a pipe, keeping the head and the tail within `cap` bytes."""

    def __init__(self, stream: object, cap: int) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.cap = cap
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def run(self) -> None:
        head_cap = self.cap // 4
        tail_cap = self.cap - head_cap
        read = self.stream.read  # type: ignore[attr-defined]
        try:
            while True:
                chunk = read(_CHUNK)
                if not chunk:
                    break
                room = head_cap - len(self.head)
                if room > 0:
                    self.head += chunk[:room]
                    chunk = chunk[room:]
                if chunk:
                    self.tail += chunk
                    if len(self.tail) > tail_cap:
                        cut = len(self.tail) - tail_cap
                        self.dropped += cut
                        del self.tail[:cut]
        except (OSError, ValueError):
            pass

    def text(self) -> str:
        data = bytes(self.head)
        if self.dropped:
            marker = f"\n[preflight: {self.dropped} bytes of output dropped here]\n".encode()
            data += marker
        data += bytes(self.tail)
        return data.decode("utf-8", errors="replace")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        try:
            proc.kill()
        except OSError:
            pass


def run_command(
    argv: Sequence[str],
    timeout: float = DEFAULT_TIMEOUT,
    cap: int = DEFAULT_CAP,
    env: dict[str, str] | None = None,
    probe: str = "",
) -> Capture:
    """Run one command; never raises, never waits longer than `timeout` (plus a short grace)."""
    argv = list(argv)
    name = probe or (argv[0] if argv else "?")
    if not argv:
        return Capture(name, argv, CaptureState.FAILED, reason="empty command")
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    if shutil.which(argv[0], path=full_env.get("PATH")) is None:
        return Capture(name, argv, CaptureState.MISSING, reason=f"{argv[0]} not found on PATH", timeout=timeout)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=full_env,
            start_new_session=True,
        )
    except OSError as exc:
        state = CaptureState.MISSING if isinstance(exc, FileNotFoundError) else CaptureState.FAILED
        return Capture(name, argv, state, reason=f"{argv[0]}: {exc.strerror or exc}", timeout=timeout)
    with _LIVE_LOCK:
        LIVE.add(proc)
    out = _CappedReader(proc.stdout, cap)
    err = _CappedReader(proc.stderr, cap)
    out.start()
    err.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
    # A child that inherited the pipes may keep them open: bound the drain too.
    out.join(timeout=2)
    err.join(timeout=2)
    if out.is_alive() or err.is_alive():
        _kill_group(proc)
        out.join(timeout=1)
        err.join(timeout=1)
    for stream in (proc.stdout, proc.stderr):
        try:
            stream.close()  # type: ignore[union-attr]
        except OSError:
            pass
    with _LIVE_LOCK:
        LIVE.discard(proc)
    duration = time.monotonic() - start
    cap_ = Capture(
        probe=name,
        argv=argv,
        state=CaptureState.TIMEOUT if timed_out else CaptureState.OK,
        stdout=out.text(),
        stderr=err.text(),
        rc=None if timed_out else proc.returncode,
        duration=round(duration, 4),
        truncated=bool(out.dropped or err.dropped),
        timeout=timeout,
        source=f"probe:{name}",
    )
    if timed_out:
        cap_.reason = f"{' '.join(argv)} did not finish within {timeout:g} s and was killed"
    return cap_


def kill_live() -> None:
    """End every probe still running, with its process group."""
    with _LIVE_LOCK:
        procs = list(LIVE)
    for proc in procs:
        _kill_group(proc)


def run_probe(probe: Probe, cap: int = DEFAULT_CAP, timeout: float | None = None) -> Capture:
    """Run a probe, trying its alternative commands in order."""
    limit = probe.timeout if timeout is None else timeout
    env = dict(probe.env) if probe.env else None
    deadline = time.monotonic() + limit
    last: Capture | None = None
    missing: list[str] = []
    for argv in probe.commands:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        capture = run_command(argv, timeout=left, cap=cap, env=env, probe=probe.name)
        capture.timeout = limit
        if capture.state is CaptureState.MISSING:
            missing.append(argv[0])
            continue
        if capture.state is CaptureState.TIMEOUT:
            capture.reason = f"probe {probe.name} ({' '.join(argv)}) timed out after {limit:g} s"
            return capture
        last = capture
        if capture.rc == 0:
            return capture
    if last is not None:
        return last
    tools = ", ".join(dict.fromkeys(missing)) or probe.tool
    return Capture(
        probe.name,
        list(probe.commands[0]) if probe.commands else [],
        CaptureState.MISSING,
        reason=f"{tools} not found on PATH",
        timeout=limit,
        source=f"probe:{probe.name}",
    )


def run_bundle(
    probes: Sequence[Probe],
    cap: int = DEFAULT_CAP,
    max_workers: int = 32,
    on_done: Callable[[Capture], None] | None = None,
) -> dict[str, Capture]:
    """Run all probes of a node concurrently; the wall time is the slowest probe, not the sum."""
    unique = list({p.name: p for p in probes}.values())
    if not unique:
        return {}

    def one(p: Probe) -> Capture:
        capture = run_probe(p, cap)
        if on_done is not None:
            try:
                on_done(capture)
            except Exception:  # a display fault never loses a capture
                pass
        return capture

    with ThreadPoolExecutor(max_workers=min(max_workers, len(unique))) as pool:
        futures = {p.name: pool.submit(one, p) for p in unique}
        return {name: fut.result() for name, fut in futures.items()}
