"""The local transport: probes run on this machine, all at once.

It knows which probes are running at any moment (`running()`, for the prologue's watchdog),
and it keeps the run's one deadline (`Transport.start_clock`): a probe is given no more time
than is left of it, and what has not finished when it passes comes back as a LOST capture
whose reason names the probe and the deadline, so its check is ERROR (never graded on no
output). A probe still hung a moment after the deadline (a tool stuck in the driver that a
kill does not end at once) is left to its own thread; the collection returns without it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Mapping, Sequence

from preflight.model import Capture, CaptureState
from preflight.probes import DEFAULT_CAP, Probe, run_probe
from preflight.transport.base import NodeOutcome, ProgressFn, Transport

MAX_WORKERS = 32  # probes of one node running at once
LATE_S = 0.5  # after the deadline: how long a killed probe may take to report before it is LOST


def local_node_name() -> str:
    return socket.gethostname().split(".")[0] or "localhost"


class _Bundle:
    """One node's probes in flight: their captures as they end, and which are running."""

    def __init__(self, transport: LocalTransport, node: str, end: float | None, progress: ProgressFn | None) -> None:
        self.transport = transport
        self.node = node
        self.end = end
        self.progress = progress
        self.cond = threading.Condition()
        self.captures: dict[str, Capture] = {}
        self.closed = False  # the collection returned: later captures are dropped
        self.slots = threading.BoundedSemaphore(MAX_WORKERS)

    def start(self, probes: Sequence[Probe]) -> None:
        for p in probes:
            threading.Thread(target=self._one, args=(p,), name=f"preflight-probe-{p.name}", daemon=True).start()

    def _one(self, probe: Probe) -> None:
        with self.slots:
            limit = probe.timeout
            if self.end is not None:
                limit = min(limit, self.end - time.monotonic())
                if limit <= 0:
                    self._done(self.transport.deadline_capture(probe, started=None))
                    return
            started = self.transport.started(self.node, probe.name)
            try:
                try:
                    cap = run_probe(probe, self.transport.cap, timeout=limit)
                except Exception as exc:  # the runner never raises; a thread that dies loses no capture
                    cap = Capture(probe=probe.name, argv=list(probe.commands[0]) if probe.commands else [],
                                  state=CaptureState.FAILED, reason=f"{type(exc).__name__}: {exc}",
                                  timeout=probe.timeout, source=f"probe:{probe.name}")
                if cap.state is CaptureState.TIMEOUT and limit < probe.timeout:
                    cap = self.transport.deadline_capture(probe, started=started, stdout=cap.stdout,
                                                          stderr=cap.stderr)
                self._done(cap)
            finally:  # running until its capture is in: never both absent at once
                self.transport.stopped(self.node, probe.name)

    def _done(self, cap: Capture) -> None:
        with self.cond:
            if self.closed or cap.probe in self.captures:
                return
            self.captures[cap.probe] = cap
            self.cond.notify_all()
        if self.progress is not None:
            try:
                self.progress(self.node, cap)
            except Exception:  # a display fault never loses a capture
                return

    def wait(self, probes: Sequence[Probe]) -> dict[str, Capture]:
        """Every probe's capture: as it ended, or LOST at the deadline (plus `LATE_S` for the
        killed ones to report)."""
        stop = None if self.end is None else self.end + LATE_S
        with self.cond:
            while len(self.captures) < len(probes):
                left = None if stop is None else stop - time.monotonic()
                if left is not None and left <= 0:
                    break
                self.cond.wait(timeout=left)
            late = [p for p in probes if p.name not in self.captures]
        running = self.transport.running(self.node)
        for p in late:
            self._done(self.transport.deadline_capture(p, started=running.get(p.name)))
        with self.cond:
            self.closed = True
            return dict(self.captures)


class LocalTransport(Transport):
    name = "local"

    def __init__(self, cap: int = DEFAULT_CAP, deadline: float | None = None) -> None:
        self.cap = cap
        self.deadline = deadline
        self._lock = threading.Lock()
        self._running: dict[tuple[str, str], float] = {}  # (node, probe) -> when it started

    def abort(self) -> None:
        """End every probe still running with its whole process group (SIGTERM, a short grace,
        SIGKILL), and start none after."""
        from preflight.probe_runner import end_live

        end_live()

    def fit(self, probes: Sequence[Probe]) -> list[Probe]:
        """The probes as they will run (a subclass may shrink their timeouts)."""
        return list(probes)

    def started(self, node: str, probe: str) -> float:
        now = time.monotonic()
        with self._lock:
            self._running[(node, probe)] = now
        return now

    def stopped(self, node: str, probe: str) -> None:
        with self._lock:
            self._running.pop((node, probe), None)

    def running(self, node: str | None = None) -> dict[str, float]:
        """The probes running now (of `node`, or of every node) and when each started."""
        with self._lock:
            return {p: t for (n, p), t in self._running.items() if node is None or n == node}

    def limit_words(self) -> str:
        """What ends the collection, as the faults name it."""
        return f"the {self.deadline:g} s deadline of the run" if self.deadline is not None else "the run's deadline"

    def deadline_capture(self, probe: Probe, started: float | None, stdout: str = "", stderr: str = "") -> Capture:
        """The capture of a probe the run's deadline cut off (still running, or never started)."""
        total = self.limit_words()
        if started is None:
            why = f"{total} passed before probe {probe.name} could start"
        else:
            why = (f"{total} passed while probe {probe.name} was still running "
                   f"(after {time.monotonic() - started:.1f} s); it was killed")
        return Capture(probe=probe.name, argv=list(probe.commands[0]) if probe.commands else [],
                       state=CaptureState.LOST, stdout=stdout, stderr=stderr, reason=why, timeout=probe.timeout,
                       source=f"probe:{probe.name}")

    def collect(
        self,
        bundles: Mapping[str, Sequence[Probe]],
        progress: ProgressFn | None = None,
    ) -> dict[str, NodeOutcome]:
        end = self.collect_end()
        runs: dict[str, tuple[_Bundle, list[Probe], float]] = {}
        for node, probes in bundles.items():
            unique = list({p.name: p for p in self.fit(probes)}.values())
            bundle = _Bundle(self, node, end, progress)
            runs[node] = (bundle, unique, time.monotonic())
            bundle.start(unique)
        out: dict[str, NodeOutcome] = {}
        for node, (bundle, unique, start) in runs.items():
            captures = bundle.wait(unique)
            out[node] = NodeOutcome(node=node, captures=captures, duration=time.monotonic() - start)
        return out
