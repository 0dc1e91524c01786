"""A record for every way a rank ends: uncaught exceptions and the rank's exit.

    wd = Watchdog(run_dir)
    crash.install(run_dir, watchdog=wd)      # sys.excepthook and threading.excepthook

An uncaught exception, in the main thread or any other, writes `crash-rank<R>.json` into the
run directory (atomically) and emits a `runtime.crash` event through the same event writer as
every other runtime component:

    {"rank": 2, "host": "gpu017", "pid": 4711, "time": 1764000000.5,
     "exception": {"type": "ValueError", "message": "...", "module": "builtins"},
     "stack": ["  File \"train.py\", line 80, in main\n    loss = step(batch)\n", ...],
     "thread": "MainThread", "step": 30, "section": "step"}

`time` is when the exception reached the hook (epoch seconds), so triage orders the ranks' own
failures, not file modification times. `step` and `section` come from the watchdog when one is
given. `CrashRecorder.exit(how, ...)` emits the rank's one `runtime.exit` event (how: clean,
exception, hang, preempted, signal) so that every rank's end is accounted for in the events.

Nothing here raises into the training job: a failed write is logged; the previous hooks still
run (the traceback is still printed).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from types import TracebackType
from typing import Any

from preflight.model import Status
from preflight.runtime.events import EventWriter, env_rank
from preflight.runtime.story import load_record

log = logging.getLogger("preflight.runtime")

CRASH_CHECK = "runtime.crash"
EXIT_CHECK = "runtime.exit"
EXIT_HOWS = ("clean", "exception", "hang", "preempted", "signal")
_STATUS_OF_HOW = {"clean": Status.PASS, "preempted": Status.PASS, "exception": Status.FAIL, "hang": Status.FAIL,
                  "signal": Status.WARN}
STACK_LIMIT = 200  # frames kept from the innermost end; a runaway recursion stays readable
MESSAGE_LIMIT = 4000

_installed: CrashRecorder | None = None
_install_lock = threading.Lock()


class CrashRecorder:
    """Writes crash records and exit events for one rank; see the module docstring."""

    def __init__(self, run_dir: str | os.PathLike[str], *, rank: int | None = None, node: str | None = None,
                 watchdog: Any = None, events: EventWriter | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.rank = env_rank() if rank is None else int(rank)
        self.host = node or socket.gethostname().split(".")[0]
        self.watchdog = watchdog
        self.events = events if events is not None else EventWriter(self.run_dir, rank=self.rank, node=self.host)
        self.path = self.run_dir / f"crash-rank{self.rank}.json"
        self.recorded: dict[str, Any] | None = None
        self._last_exc: BaseException | None = None
        self.exited: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._prev_sys: Any = None
        self._prev_thread: Any = None
        self._hooked = False

    # ----- hooks -------------------------------------------------------------------------
    def hook(self) -> CrashRecorder:
        if self._hooked:
            return self
        self._prev_sys = sys.excepthook
        self._prev_thread = threading.excepthook
        sys.excepthook = self._sys_hook
        threading.excepthook = self._thread_hook
        self._hooked = True
        return self

    def uninstall(self) -> None:
        global _installed
        if not self._hooked:
            return
        if sys.excepthook == self._sys_hook:
            sys.excepthook = self._prev_sys
        if threading.excepthook == self._thread_hook:
            threading.excepthook = self._prev_thread
        self._hooked = False
        with _install_lock:
            if _installed is self:
                _installed = None

    def _sys_hook(self, et: type[BaseException], ev: BaseException, tb: TracebackType | None) -> None:
        try:
            if not issubclass(et, KeyboardInterrupt):
                self.record(et, ev, tb, thread="MainThread")
                fired = getattr(self.watchdog, "fired", None)
                if fired and fired.get("exit_code") is not None:
                    # the watchdog fired first and ends the process with its hang code: the
                    # exception (a peer's connection reset) is a consequence of the hang
                    self.exit("hang", exit_code=int(fired["exit_code"]),
                              summary=f"after the watchdog fired: {et.__name__}: {_message(ev)}")
                else:
                    self.exit("exception", exit_code=1, summary=f"{et.__name__}: {_message(ev)}")
        finally:
            (self._prev_sys or sys.__excepthook__)(et, ev, tb)

    def _thread_hook(self, args: threading.ExceptHookArgs) -> None:
        try:
            if args.exc_type is not SystemExit:
                name = args.thread.name if args.thread is not None else "thread"
                self.record(args.exc_type, args.exc_value, args.exc_traceback, thread=name)
        finally:
            (self._prev_thread or threading.__excepthook__)(args)

    # ----- records -----------------------------------------------------------------------
    def _where(self) -> tuple[int | None, str | None]:
        wd = self.watchdog
        if wd is None:
            return None, None
        try:
            frame = getattr(wd, "_current", None)
            return wd.step, (frame.name if frame is not None else None)
        except Exception:  # noqa: BLE001
            return None, None

    def record(self, exc_type: type[BaseException] | None, exc: BaseException | None,
               tb: TracebackType | None, thread: str = "MainThread") -> dict[str, Any]:
        """Write `crash-rank<R>.json` and a `runtime.crash` event; the first exception of the
        main thread wins (a later one from another thread does not overwrite it)."""
        if exc is not None and self.recorded is not None and self._last_exc is exc:
            return self.recorded  # the same exception again (recorded in the loop, then by the hook)
        self._last_exc = exc
        now = time.time()
        step, section = self._where()
        section = getattr(exc, "__preflight_section__", None) or section
        etype = exc_type or (type(exc) if exc is not None else BaseException)
        try:
            stack = traceback.format_exception(etype, exc, tb, limit=-STACK_LIMIT) if exc is not None else []
        except Exception:  # noqa: BLE001
            stack = []
        rec: dict[str, Any] = {
            "rank": self.rank, "host": self.host, "pid": os.getpid(), "time": now,
            "exception": {"type": etype.__name__, "message": _message(exc),
                          "module": getattr(etype, "__module__", "")},
            "stack": stack, "thread": thread, "step": step, "section": section,
        }
        with self._lock:
            first = self.recorded is None
            if first or (thread == "MainThread" and self.recorded and self.recorded.get("thread") != "MainThread"):
                self.recorded = rec
                _write_atomic(self.path, rec)
        where = f" at step {step}" if step is not None else ""
        where += f" in section '{section}'" if section else ""
        self.events.emit(
            CRASH_CHECK, Status.FAIL,
            f"rank {self.rank} on {self.host} crashed{where}: {etype.__name__}: {_message(exc)[:300]}",
            evidence=[ln.rstrip() for ln in stack[-6:]] + [f"crash record: {self.path}"],
            remedy=f"fix the exception (its stack is in {self.path.name}); if it comes from CUDA or NCCL, check "
                   f"the node: preflight run --hosts {self.host}",
            facts={"rank": self.rank, "step": step, "section": section, "exception_type": etype.__name__,
                   "message": _message(exc), "record": str(self.path), "time": now, "thread": thread},
            step=step)
        return rec

    def exit(self, how: str, exit_code: int | None = None, signal: str | None = None,
             summary: str = "") -> dict[str, Any] | None:
        """Emit this rank's `runtime.exit` event (once; a later call is ignored)."""
        if how not in EXIT_HOWS:
            how = "exception"
        with self._lock:
            if self.exited is not None:
                return None
            self.exited = {"how": how, "exit_code": exit_code, "signal": signal}
        step, section = self._where()
        text = {"clean": "ended cleanly", "exception": "ended on an exception", "hang": "ended on a hang",
                "preempted": "ended for preemption", "signal": f"was terminated by {signal or 'a signal'}"}[how]
        code = f" (exit code {exit_code})" if exit_code is not None else ""
        return self.events.emit(
            EXIT_CHECK, _STATUS_OF_HOW[how], f"rank {self.rank} on {self.host} {text}{code}"
            + (f": {summary}" if summary else ""),
            facts={"how": how, "exit_code": exit_code, "signal": signal, "rank": self.rank, "step": step,
                   "section": section, "pid": os.getpid()},
            step=step)


def install(run_dir: str | os.PathLike[str], *, rank: int | None = None, node: str | None = None,
            watchdog: Any = None, events: EventWriter | None = None) -> CrashRecorder:
    """Install the process's crash recorder (idempotent: a second call returns the first one,
    given the watchdog if it had none)."""
    global _installed
    with _install_lock:
        if _installed is not None:
            if watchdog is not None and _installed.watchdog is None:
                _installed.watchdog = watchdog
            return _installed
        ev = events if events is not None else getattr(watchdog, "events", None)
        _installed = CrashRecorder(run_dir, rank=rank, node=node, watchdog=watchdog, events=ev).hook()
        return _installed


def installed() -> CrashRecorder | None:
    """The process's crash recorder, if `install` was called."""
    return _installed


def read_crash_records(run_dir: str | os.PathLike[str]) -> dict[int, dict[str, Any]]:
    """Every `crash-rank<R>.json` of a run directory by rank; a corrupt one is
    `{"rank": R, "corrupt": "<reason>", "path": ...}`, never an exception."""
    out: dict[int, dict[str, Any]] = {}
    for path in sorted(Path(run_dir).glob("crash-rank*.json")):
        digits = path.stem[len("crash-rank"):]
        if not digits.isdigit():
            continue
        rank = int(digits)
        try:
            doc, why = load_record(path.name, path.read_bytes())  # the run directory's one reader
        except OSError as exc:
            doc, why = None, f"{type(exc).__name__}: {exc}"
        if doc is None:
            out[rank] = {"rank": rank, "corrupt": why, "path": str(path)}
            continue
        doc.setdefault("rank", rank)
        doc["path"] = str(path)
        out[rank] = doc
    return out


def _message(exc: BaseException | None) -> str:
    if exc is None:
        return ""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001
        text = f"<unprintable {type(exc).__name__}>"
    return text[:MESSAGE_LIMIT]


def _write_atomic(path: Path, rec: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(json.dumps(rec, indent=1, default=str).encode())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("preflight: cannot write crash record %s: %s", path, exc)
