"""Probes: node-local commands with a timeout, an output cap and fallbacks.

A probe is data (a name and argv lists), so a bundle of probes can travel to a remote node
and run there the same way. The running itself is `preflight.probe_runner`, the standard-library
module that also runs on the nodes; here its results become `Capture`s. Every wait is bounded
and a hung tool is killed with its whole process group.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from preflight import probe_runner as _runner
from preflight.model import Capture, CaptureState
from preflight.probe_runner import DEFAULT_CAP, DEFAULT_TIMEOUT, Probe, Result, kill_live

__all__ = ["DEFAULT_CAP", "DEFAULT_TIMEOUT", "Probe", "capture_of", "kill_live", "run_bundle", "run_command",
           "run_probe"]


def capture_of(result: Result, source: str = "") -> Capture:
    """The Capture a runner's Result stands for (`source` defaults to "probe:<name>")."""
    return Capture(probe=result.probe, argv=list(result.argv), state=CaptureState(result.state),
                   stdout=result.stdout, stderr=result.stderr, rc=result.rc, duration=result.duration,
                   truncated=result.truncated, timeout=result.timeout, reason=result.reason,
                   source=source or f"probe:{result.probe}")


def run_command(
    argv: Sequence[str],
    timeout: float = DEFAULT_TIMEOUT,
    cap: int = DEFAULT_CAP,
    env: dict[str, str] | None = None,
    probe: str = "",
) -> Capture:
    """Run one command; never raises, never waits longer than `timeout` (plus a short grace)."""
    return capture_of(_runner.run_command(argv, timeout=timeout, cap=cap, env=env, probe=probe))


def run_probe(probe: Probe, cap: int = DEFAULT_CAP, timeout: float | None = None) -> Capture:
    """Run a probe, trying its alternative commands in order."""
    return capture_of(_runner.run_probe(probe, cap=cap, timeout=timeout))


def run_bundle(
    probes: Sequence[Probe],
    cap: int = DEFAULT_CAP,
    max_workers: int = 32,
    on_done: Callable[[Capture], None] | None = None,
) -> dict[str, Capture]:
    """Run all probes of a node concurrently; the wall time is the slowest probe, not the sum.
    `on_done` sees each capture as its probe ends."""

    captures: dict[str, Capture] = {}

    def done(result: Result) -> None:
        capture = captures[result.probe] = capture_of(result)
        if on_done is not None:
            on_done(capture)

    results = _runner.run_bundle(probes, cap=cap, max_workers=max_workers, on_done=done)
    return {name: captures.get(name) or capture_of(r) for name, r in results.items()}
