"""Preemption: catch a stop signal on any rank, and stop every rank at the same step boundary.

Usage in a training loop::

    with Preemption(events=EventWriter(run_dir)) as pre, CheckpointManager(ckpt_dir) as ckpt:
        for step in range(start, total):
            train_one_step(step)
            stop = pre.should_stop(step + 1)     # collective: call it on every rank, every step
            if stop or (step + 1) % save_every == 0:
                ckpt.save(step + 1, state())     # every rank saves the same step, once
            if stop:
                ckpt.wait()
                sys.exit(EXIT_PREEMPTED)         # 85: "saved; run again to resume"

The handler only sets a flag (it never does I/O: a signal can arrive while the main thread holds
a lock); the event "signal caught" is written at the next `should_stop()` call, the event
"stop agreed" when the ranks agree (on every rank; the console gets one line for it, from rank
0: `preflight[rank 0]: stop agreed at step N: SIGUSR1 on rank R ...`). A signal arriving while a previous Python handler was
installed is passed on to it after the flag is set (default actions and SIG_IGN are replaced:
terminating would defeat the point); `close()` (or leaving the `with` block) puts the previous
handlers back, unless someone installed another handler after this one.

Victims are not preempted. When one rank fails, torchrun SIGTERMs the others: the same signal
as a preemption. A rank that caught a signal and then finds the group broken (the agreement
collective fails: a peer is gone) was ended from outside after a failure, so it records its
end as `runtime.exit` how "signal" (a victim, never the culprit; exit code -N as the launcher
reports it), and ends the way the signal would have ended it (`end_victims=False` keeps the
old answer: the local flag).

`should_stop()` is one all_reduce (MAX) of three int64 over the default process group (or
`group=`): whether this rank caught a signal, which rank, which signal. Every rank gets the
same answer at the same call, so all save the same step exactly once. Its cost is the latency
of one 24-byte collective: measured with gloo on a 2-core VM, 1.2 ms per call with 2 ranks
and 3.8 ms with 4 ranks (processes sharing the cores; a collective waits for the slowest to be
scheduled). With NCCL the tensor lives on the GPU and reading the answer (`.item()`) waits
for the kernels queued before it, which removes the CPU's lead over the GPU at that point.
With `every=N` the collective runs only on every N-th call (on steps divisible by N when a
step is given) and the other calls return at once: a stop then takes up to N-1 more steps.
Pick N so that N steps take well under the grace time before SIGKILL. Without
torch.distributed (or with one rank) it is a local check.

Slurm. `#SBATCH --signal=B:USR1@90` sends SIGUSR1 to the batch shell only (the `B:`), 90 s
before the time limit; without `B:` it goes to the processes of the job steps instead. The
batch script therefore traps USR1 and signals the step, e.g.::

    srun torchrun ... train.py & pid=$!
    trap 'scancel --signal=TERM $SLURM_JOB_ID' USR1
    wait $pid; while kill -0 $pid 2>/dev/null; do wait $pid; done
    [ -f "$RUN_DIR/preempted" ] && scontrol requeue $SLURM_JOB_ID

`scancel --signal` without `--batch`/`--full` signals every process of the job's steps (torchrun
and its workers) and not the batch shell. Not `kill -TERM $pid`: srun takes a SIGTERM as
"terminate the step" ("srun: forcing job termination") and the workers die before saving.
The requeue keys on the `preempted` marker (`write_marker`, once every rank has saved), not
on an exit code: torchrun's is 1 after a signal whatever its workers did. With `#SBATCH
--requeue` the job goes back to the queue and resumes from the checkpoint
(`CheckpointManager.load_latest()`); examples/slurm/train.sbatch does all of this.

torchrun starts each worker in a session of its own, so a signal meant for the workers reaches
them only through torchrun. torchrun handles and forwards `--signals-to-handle`, by default
SIGTERM, SIGINT, SIGHUP and SIGQUIT; any other signal (SIGUSR1 included) is not forwarded and
takes its default action on torchrun itself (SIGUSR1: terminate). To forward SIGUSR1, pass
`--signals-to-handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1` (env TORCHELASTIC_SIGNALS_TO_HANDLE).
After forwarding, torchrun waits `--shutdown-timeout` (default 30 s, or
TORCH_ELASTIC_SHUTDOWN_TIMEOUT) and then SIGKILLs the workers: the checkpoint must fit in that
time; torchrun does not restart workers it shut down on a signal (requeue does). A signal sent
straight to one worker (as `kill -USR1 <pid>`) is handled here like any other: every rank
stops at the same step. A preempted job must not be restarted by `--max-restarts` inside its
dying allocation: the example exits 0 under torchrun after writing the marker (so torchrun
neither SIGTERMs the other ranks nor restarts), and a restart that finds the marker does not
train; running the job again (a requeue) resumes from the checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType
from typing import Any

from preflight.model import Status
from preflight.runtime.events import EventWriter, emit_guarded, env_rank, flush_std_streams, say

log = logging.getLogger("preflight.runtime")

CHECK = "runtime.preemption"
DEFAULT_SIGNALS = (signal.SIGUSR1, signal.SIGTERM)
# Exit code of a rank that stopped on request after its checkpoint was complete: "run me again
# to resume". Not 0 (a launcher must not take it for the end of training) and apart from the
# watchdog's 75 (a hang), 1 (a crash) and 128+N (killed by signal N).
EXIT_PREEMPTED = 85

_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def _signame(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Preemption:
    """Catches `signals` on this rank; `should_stop()` tells every rank together to stop."""

    def __init__(self, signals: Iterable[int] = DEFAULT_SIGNALS, events: EventWriter | None = None, *,
                 every: int = 1, group: Any = None, end_victims: bool = True, announce: bool = True) -> None:
        if every < 1:
            raise ValueError("every must be at least 1")
        self.signals = tuple(signal.Signals(s) for s in signals)
        self.events = events
        self.every = every
        self.group = group
        # a signal caught while the ranks cannot agree (a peer is gone) ends this rank as the
        # signal would have: a launcher ending the survivors after a failure, not a preemption
        self.end_victims = end_victims
        # the console: a caught signal logged by its rank, the agreement one line said by the
        # group's rank 0. False: events only, the caller says what happened once it has saved
        # (as Resilience does; under torchrun every rank catches the forwarded signal)
        self.announce = announce
        self.signum: int | None = None  # the first signal caught
        self.caught_at: float | None = None  # time.time() of the first one
        self.stop_step: int | None = None  # the step boundary agreed on
        self.stop_rank: int | None = None  # the lowest rank that asked to stop
        self.stop_signum: int | None = None  # the signal agreed on (caught on any rank)
        self.stop_what = ""  # what asked for the stop, in words ("SIGUSR1", a request's reason)
        self.checks = 0  # collective checks done
        self.check_seconds = 0.0  # time spent in them
        self._requested = False
        self._agreed = False
        self._calls = 0
        self._pending_event = False
        self._reason = ""
        self._previous: dict[signal.Signals, _Handler] = {}
        self._installed = False
        self.install()

    # ------------------------------------------------------------------ handlers

    def install(self) -> None:
        """Install the handlers (done by the constructor; main thread only, else a warning)."""
        if self._installed:
            return
        if threading.current_thread() is not threading.main_thread():
            self._emit(Status.WARN, "signal handlers not installed: not in the main thread",
                       remedy="create Preemption in the main thread of the training script",
                       facts={"signals": [s.name for s in self.signals]})
            return
        for sig in self.signals:
            try:
                self._previous[sig] = signal.getsignal(sig)
                signal.signal(sig, self._handle)
            except (OSError, ValueError) as exc:
                self._previous.pop(sig, None)
                self._emit(Status.WARN, f"cannot handle {sig.name}: {exc}", facts={"signal": sig.name})
        self._installed = True

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # No I/O and no locks here: the main thread may be inside a write when this runs.
        if not self._requested:
            self._requested = True
            self.signum = signum
            self.caught_at = time.time()
            self._reason = _signame(signum)
            self._pending_event = True
        prev = self._previous.get(signal.Signals(signum))
        if callable(prev) and prev is not signal.default_int_handler:
            prev(signum, frame)

    def close(self) -> None:
        """Put back the handlers that were there before (unless replaced since); emit a pending event."""
        self._flush_event(None)
        if not self._installed:
            return
        if threading.current_thread() is threading.main_thread():
            for sig, prev in self._previous.items():
                try:
                    if signal.getsignal(sig) == self._handle:
                        signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
                except (OSError, ValueError, TypeError) as exc:
                    log.warning("preflight: could not restore the handler of %s: %s", sig.name, exc)
        self._previous.clear()
        self._installed = False

    def __enter__(self) -> Preemption:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ state

    @property
    def requested(self) -> bool:
        """True once this rank caught one of the signals (or `request()` was called); local."""
        return self._requested

    def request(self, reason: str = "requested") -> None:
        """Ask for a stop from code (a watchdog, an operator file): as if a signal was caught."""
        if not self._requested:
            self._requested = True
            self.caught_at = time.time()
            self._reason = reason
            self._pending_event = True

    def should_stop(self, step: int | None = None) -> bool:
        """Whether every rank should save and stop now; the same answer on every rank.

        Collective when torch.distributed is initialized with more than one rank: call it on
        every rank at the same point of each step. A monitoring fault (a failing collective) is
        logged and answered with the local flag rather than raised.
        """
        self._flush_event(step)
        if self._agreed:
            return True
        self._calls += 1
        dist = _dist(self.group)
        if dist is None:
            if self._requested:
                self._agree(step, env_rank(), self.signum, here=env_rank())
            return self._agreed
        tick = step if step is not None else self._calls
        if tick % self.every:
            return False
        t0 = time.perf_counter()
        try:
            agreed, first, signum = self._all_reduce(dist)
        except Exception as exc:  # never raised into the training loop
            log.warning("preflight: preemption check failed: %s", exc)
            if self._requested and self.signum is not None and self.end_victims:
                self._end_as_victim(step, exc)
            return self._requested
        finally:
            self.checks += 1
            self.check_seconds += time.perf_counter() - t0
        if agreed:
            self._agree(step, first, signum or None, here=_group_rank(dist, self.group))
        return self._agreed

    def _all_reduce(self, dist: Any) -> tuple[bool, int, int]:
        import torch

        world = dist.get_world_size(self.group)
        rank = dist.get_rank(self.group)
        device = "cpu"
        if dist.get_backend(self.group) == "nccl":
            device = f"cuda:{torch.cuda.current_device()}"
        flag = 1 if self._requested else 0
        t = torch.tensor([flag, (world - rank) if flag else 0, int(self.signum or 0) if flag else 0],
                         dtype=torch.int64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        agreed, inv_rank, signum = (int(v) for v in t.tolist())
        return bool(agreed), world - inv_rank if agreed else -1, signum

    def _end_as_victim(self, step: int | None, exc: BaseException) -> None:
        """A signal arrived and the ranks cannot agree: the group is broken (a peer ended
        first), so the signal is a launcher ending the survivors, not a preemption. Record this
        rank's end as "signal" (a victim, not the culprit) and end the way the signal would
        have ended it without our handler; saving is impossible without the peers anyway."""
        signum = int(self.signum or signal.SIGTERM)
        name = _signame(signum)
        self._emit(Status.WARN, f"{name} caught while the ranks cannot agree ({type(exc).__name__}): "
                   f"ended from outside after a peer failed, not preempted", step=step,
                   evidence=[f"collective check failed: {str(exc)[:300]}"],
                   remedy="none here: look for the rank that failed first (preflight triage)",
                   facts={"signal": name, "victim": True, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
        try:
            from preflight.runtime import crash

            rec = crash.installed()
            if rec is None and self.events is not None:
                rec = crash.CrashRecorder(self.events.run_dir, rank=self.events.rank, events=self.events)
            if rec is not None:
                rec.exit("signal", exit_code=-signum, signal=name,
                         summary=f"ended by {name} after a peer failed (the stop could not be agreed: "
                                 f"{type(exc).__name__})")
        except Exception as err:  # noqa: BLE001 - the end goes on regardless
            log.warning("preflight: could not record this rank's end: %s", err)
        flush_std_streams()
        try:
            signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
            os.kill(os.getpid(), signum)
            time.sleep(1.0)
        finally:
            os._exit(128 + signum)

    def _agree(self, step: int | None, first: int, signum: int | None, *, here: int | None) -> None:
        """Every rank reached the same answer: recorded on each (an event, not logged: every
        rank has one), said once on the console by rank 0 (`here`: this rank in the group)."""
        self._agreed = True
        self.stop_step = step
        self.stop_rank = first
        self.stop_signum = signum or self.signum  # the signal the first rank caught, as agreed
        what = _signame(signum) if signum else (self._reason or "a stop request")
        self.stop_what = what
        at = f"step {step}" if step is not None else "this step"
        summary = f"stop agreed at {at}: {what} on rank {first}"
        self._emit(Status.WARN, summary, step=step, quiet=True,
                   evidence=[f"{what} first seen on rank {first}; all ranks stop at {at}"],
                   remedy="none: the job saves a checkpoint and exits; a requeue or restart resumes from it",
                   facts={"step": step, "first_rank": first, "signal": what, "requested_here": self._requested})
        if self.announce and here == 0:
            say(f"{summary} (every rank stops there)", rank=0)

    def _flush_event(self, step: int | None) -> None:
        if not self._pending_event:
            return
        self._pending_event = False
        what = self._reason or "stop request"
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.caught_at or time.time()))
        self._emit(Status.WARN, f"{what} caught on rank {env_rank()} (pid {os.getpid()})", step=step,
                   quiet=not self.announce,
                   evidence=[f"{what} at {when}"],
                   remedy="none: the job checkpoints at the next agreed step and exits",
                   facts={"signal": what, "pid": os.getpid(), "caught_at": self.caught_at,
                          "delay_s": round(time.time() - (self.caught_at or time.time()), 6)})

    def _emit(self, status: Status, summary: str, *, quiet: bool = False, **kw: Any) -> None:
        """An event of this rank, also logged unless `quiet` (a line every rank would repeat)."""
        if not quiet:
            emit_guarded(self.events, CHECK, status, summary, what="preemption", log_pass=True, **kw)
            return
        if self.events is None:
            return
        try:
            self.events.emit(CHECK, status, summary, **kw)
        except Exception as exc:  # noqa: BLE001 - an event never breaks what it reports on
            log.warning("preflight: preemption event not written: %s", exc)


def _group_rank(dist: Any, group: Any) -> int | None:
    try:
        return int(dist.get_rank(group))
    except Exception:  # noqa: BLE001 - only decides who says the line
        return None


def _dist(group: Any) -> Any:
    if "torch" not in sys.modules:
        return None
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not (dist.is_available() and dist.is_initialized()):
        return None
    return dist if dist.get_world_size(group) > 1 else None


# ---- the marker the batch script keys on ------------------------------------------------------
MARKER = "preempted"


def write_marker(run_dir: str | os.PathLike[str], step: int, *, world_size: int = 1, signum: int | None = None,
                 stop_rank: int | None = None) -> Path | None:
    """After every rank saved `step`: write `<run_dir>/preempted` (JSON, atomically) for the
    batch script: "checkpoint saved, requeue". A launcher's exit code cannot say it (torchrun
    turns the first worker's exit into a SIGTERM of the others and its own exit 1). Never raises."""
    path = Path(run_dir) / MARKER
    doc = {"step": step, "time": time.time(), "world_size": world_size,
           "signal": _signame(signum) if signum else None, "rank": stop_rank}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{MARKER}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)
        return path
    except OSError as exc:
        log.warning("preflight: cannot write the preemption marker %s: %s", path, exc)
        return None


def read_marker(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The marker's content, {} when present but unreadable, None when absent."""
    path = Path(run_dir) / MARKER
    if not path.exists():
        return None
    from preflight.runtime.story import load_marker  # the run directory's one reader

    try:
        return load_marker(path.read_bytes())
    except OSError:
        return {}


def clear_marker(run_dir: str | os.PathLike[str]) -> None:
    """Remove the marker once a new run of the job has resumed from the checkpoint."""
    try:
        (Path(run_dir) / MARKER).unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("preflight: cannot remove the preemption marker: %s", exc)
