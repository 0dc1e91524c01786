"""SIGINT (Ctrl-C) and SIGTERM (scancel, a timeout, slurmd) during a command that runs probes.

The command (`run`, `node`, `prologue`) installs the handlers (`guard`). While the engine
collects captures (`armed`), a signal raises `Interrupted` in the main thread: the engine has
the transport end every probe process this run started (local process groups, the srun step,
the SSH sessions whose runners end their probes), keeps what came back, and grades it. The nodes
that had not answered are ERROR "interrupted before it answered"; the verdict is INTERRUPTED
(not GO, not NO-GO), the exit status 128 + the signal, and one line on stderr names the nodes
still pending. A signal outside the collection is noted and acted on at the next one (or in the
verdict); a second signal is ignored while the report of the first is written (bounded work).
"""

from __future__ import annotations

import functools
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

WHY = "interrupted before it answered"
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):  # noqa: N818 - like KeyboardInterrupt: not an Exception, never swallowed
    """Raised in the main thread by a signal while the engine collects."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal_name(signum)}")
        self.signum = signum


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


@dataclass
class _State:
    signum: int = 0  # the first signal received (0: none)
    armed: int = 0  # > 0 while the engine collects: a signal raises Interrupted
    installed: dict[signal.Signals, Any] = field(default_factory=dict)  # signal -> the handler it had before
    nodes: list[str] = field(default_factory=list)  # the nodes of the interrupted run
    answered: list[str] = field(default_factory=list)  # those that had answered
    pending: list[str] = field(default_factory=list)  # those that had not when the signal came
    noted: bool = False  # the run took the signal into account (`note`)


_state = _State()


def _handler(signum: int, frame: object) -> None:
    if _state.signum:
        return
    _state.signum = signum
    if _state.armed:
        raise Interrupted(signum)


@contextmanager
def guard() -> Iterator[None]:
    """Handle SIGINT and SIGTERM as interrupts for the duration (main thread only; elsewhere a
    no-op). Restores the previous handlers and forgets the interrupt on the way out."""
    global _state
    if threading.current_thread() is not threading.main_thread() or _state.installed:
        yield
        return
    _state = _State()
    from preflight import probe_runner

    probe_runner.reopen()
    try:
        for sig in SIGNALS:
            _state.installed[sig] = signal.signal(sig, _handler)
        yield
    finally:
        for sig, old in _state.installed.items():
            try:
                signal.signal(sig, old)
            except (OSError, ValueError, TypeError):
                pass
        _state = _State()


def guarded(command: Callable[..., Any]) -> Callable[..., Any]:
    """A command run under `guard`; when a signal interrupted it, `line()` on stderr as it ends."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        with guard():
            try:
                return command(*args, **kwargs)
            finally:
                if signum() and _state.noted:  # (a signal after the report was built changes nothing)
                    sys.stderr.write(line() + "\n")
                    sys.stderr.flush()

    return run


@contextmanager
def armed() -> Iterator[None]:
    """A collection: a signal (or one noted before) raises Interrupted in it."""
    _state.armed += 1
    try:
        if _state.signum and _state.installed:
            raise Interrupted(_state.signum)
        yield
    finally:
        _state.armed -= 1


def signum() -> int:
    """The signal that interrupted this command (0: none)."""
    return _state.signum if _state.installed else 0


def note(nodes: Sequence[str], answered: Sequence[str], pending: Sequence[str]) -> None:
    """The interrupted run's nodes, those that had answered, and those still pending (a node
    that failed otherwise, unreachable say, is neither)."""
    _state.nodes = list(nodes)
    _state.answered = list(answered)
    _state.pending = list(pending)
    _state.noted = True


def exit_code(default: int) -> int:
    """128 + the signal when interrupted, else `default`."""
    return 128 + _state.signum if signum() else default


def line() -> str:
    """`interrupted: N of M nodes answered; pending: <hostlist>`."""
    from preflight.inventory import compress

    pending = _state.pending
    return (f"interrupted: {len(_state.answered)} of {len(_state.nodes)} nodes answered; "
            f"pending: {compress(pending) if pending else 'none'}")


__all__ = ["SIGNALS", "WHY", "Interrupted", "armed", "exit_code", "guard", "guarded", "line", "note", "signal_name", "signum"]
