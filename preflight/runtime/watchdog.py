"""Hang watchdog for a training rank: section timeouts, peer progress, hang records.

    wd = Watchdog(run_dir, timeouts={"step": "auto", "checkpoint": 900})
    with wd.section("setup"):
        model = build()
    for step in range(start, total):
        with wd.section("step", step=step):
            train_step()
        if step % 1000 == 0:
            with wd.section("checkpoint"):   # every rank, the barrier included
                save()
    wd.close()

A daemon monitor thread compares the time spent in the open section with that section's
timeout (polling every `poll_s`, so an overrun is noticed within about a second). A timeout
is a number of seconds, None (not watched) or "auto": `auto_factor` times the longest
duration of that section observed after warm-up, never under `auto_floor_s`; before warm-up
(the first `warmup_steps` steps, the first occurrence of any other section) the generous
`auto_initial_s` applies, so compilation and first-batch costs never raise a false alarm.
Nested sections pause the clock of their parent: a checkpoint taken inside a step is
timed against the checkpoint timeout and not charged to the step.
A loop may also call `heartbeat(step)` once per step instead of opening "step" sections: while
no section is open, the time since the last heartbeat is timed as an implicit "step".

Peer progress: the monitor thread writes `heartbeat-rank<R>.json` (step, section, time) into
the run directory every `heartbeat_interval_s` (0.5 s; under a 4 s step floor, floor / 8),
atomically. A rank that is SIGSTOPped,
dead or stuck holding the GIL stops writing; a rank that is slower stays at a lower step.
The run directory should be on a shared filesystem for ranks of other nodes to be seen.

Stopped peers, warm-up or not: a "step" that has been open longer than the step's floor
(`auto_floor_s`, or the fixed step timeout) while a peer went silent fires at once, before
the warm-up or auto timeout. Silent means: the peer's heartbeat, written during this run,
still says "running" in a step, at this rank's step or below (its peers moved on), and is
older than `peer_stale_s`: three quarters of the step floor, at most 5 s, at least 1 s and four
beats (a live rank starved of CPU for a moment must not look stopped), so that a peer stopped
as this rank entered its step is caught when the step reaches its floor, and never before it
(`liveness_timing`; the values are derived from the step timeout given at construction).
A SIGSTOPped or dead rank stops
its monitor thread with it, so its heartbeat goes stale; a slow rank, a rank compiling its
first step or writing a checkpoint keeps beating and is never a suspect this way (a peer
that went silent inside a checkpoint is left to the checkpoint's timeout). Waiting for the
floor, not only for the heartbeat to go stale, keeps a heartbeat that merely looks old (a peer
holding the GIL for a moment, a shared filesystem's attribute cache) from ending a healthy job.
Silence is counted over time this rank was running itself: when the whole job is paused
(`scontrol suspend` and `resume`, every rank SIGSTOPped and continued, a VM its host did not
run) or the wall clock steps forward, the time its own monitor lost is taken off every peer's
silence, so that no rank takes its peers for stopped on resume before they had their turn.

Ending a stuck peer: with `kill_stuck_peers` (the default) a rank whose watchdog fired
SIGKILLs the silent peers that run on the same host, after its hang record is written and
its `exit_grace_s` has passed (the other waiting peers have written theirs), so that a
launcher's restart does not wait out its SIGTERM-then-SIGKILL grace (a stopped
process never handles the SIGTERM). Only a pid taken from that peer's heartbeat, on this
host (same host name), whose /proc start time equals the one in the heartbeat and whose
environment says RANK=<that rank>, never this process. The rank records its own end first,
then kills and exits at once, so that a launcher polling its workers sees this rank's exit
code with the victim's death rather than ending this rank with a SIGTERM of its own. The
hang record's `peers` carry each rank's host and pid, for the launcher or triage to end a
stuck rank on another node.

On a hang the monitor writes `hang-rank<R>.json` (host, rank, section, step, elapsed,
timeout, the Python stacks of every thread, the ranks that are behind or stale) and, when
torch.distributed is in use, the flight recorder's dump `fr-rank<R>.json` beside it (gloo
writes none by itself on a timeout); it emits a `runtime.watchdog` event, waits
`exit_grace_s` so that peers blocked in the same collective can write their own records, and
ends the process with `os._exit(exit_code)`.

Before `os._exit` the rank's `runtime.exit` event (how "hang") is written through the
crash recorder (`preflight.runtime.crash`).

Exit code: 75 by default, EX_TEMPFAIL of sysexits.h ("temporary failure, retry later"):
a launcher with restarts (`torchrun --max-restarts N`, Slurm `--requeue`) restarts the job
from its last checkpoint, and the code tells a hang apart from a crash (1) or a signal.

The watchdog never raises into training: a fault in the monitor is logged and the monitor
goes on; every file it writes is bounded in time.
"""

from __future__ import annotations

import atexit
import collections
import faulthandler
import json
import logging
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from preflight.model import Status
from preflight.runtime.events import EventWriter, env_rank, flush_std_streams

log = logging.getLogger("preflight.runtime")

EXIT_HANG = 75  # EX_TEMPFAIL (sysexits.h): a hang, the launcher should restart the job
CHECK = "runtime.watchdog"

DEFAULT_TIMEOUTS: dict[str, float | str | None] = {
    "step": "auto",
    "setup": 600.0,
    "checkpoint": 900.0,
    "eval": 1800.0,
}
# Flight-recorder ring size. torch 2.13 reads TORCH_FR_BUFFER_SIZE (falling back to
# TORCH_NCCL_TRACE_BUFFER_SIZE) when a process group is created, for gloo as for NCCL
# (torch/distributed/distributed_c10d.py and libtorch_cpu); 0 turns the recorder off.
FR_ENV = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
FR_DEFAULT_ENTRIES = 2000


def enable_flight_recorder(entries: int = FR_DEFAULT_ENTRIES) -> bool:
    """Turn the collective flight recorder on for process groups created from now on.

    Sets TORCH_FR_BUFFER_SIZE unless the job already chose a size through either variable.
    Call it before `init_process_group`. Returns True when this call set the variable.
    """
    if any(k in os.environ for k in FR_ENV):
        return False
    os.environ[FR_ENV[0]] = str(int(entries))
    return True


def dump_flight_recorder(path: str | os.PathLike[str], timeout_s: float = 10.0) -> dict[str, Any]:
    """Write the flight recorder's JSON dump to `path`, bounded by `timeout_s`.

    Returns a summary: {"path", "entries", "last": {op, seq, state}} or {"error": reason}.
    Never raises; never imports torch (a job that did not import it has nothing recorded).
    """
    c10d = sys.modules.get("torch._C._distributed_c10d")
    if c10d is None:
        return {"error": "torch.distributed not loaded in this process"}
    fn = getattr(c10d, "_dump_fr_trace_json", None) or getattr(c10d, "_dump_nccl_trace_json", None)
    if fn is None:
        return {"error": "this torch build has no flight-recorder dump"}
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["raw"] = fn()
        except Exception as exc:  # noqa: BLE001 - reported, never raised
            box["error"] = f"{type(exc).__name__}: {exc}"

    t = threading.Thread(target=work, name="preflight-fr-dump", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        return {"error": f"flight-recorder dump did not return within {timeout_s:g} s"}
    if "error" in box:
        return {"error": box["error"]}
    raw = box.get("raw", b"")
    data = raw if isinstance(raw, bytes) else str(raw).encode()
    summary: dict[str, Any] = {"path": str(path)}
    try:
        _atomic_write(Path(path), data)
    except OSError as exc:
        return {"error": f"could not write {path}: {exc}"}
    try:
        entries = json.loads(data).get("entries") or []
    except (ValueError, AttributeError):
        entries = []
    summary["entries"] = len(entries)
    if entries:
        last = entries[-1]
        summary["last"] = {"op": last.get("profiling_name"), "seq": last.get("collective_seq_id"),
                           "state": last.get("state"), "pg": last.get("process_group")}
    return summary


def thread_stacks() -> dict[str, list[str]]:
    """The Python stack of every thread, innermost frame last, keyed "name (ident)"."""
    names = {t.ident: t.name for t in threading.enumerate()}
    out: dict[str, list[str]] = {}
    for ident, frame in sys._current_frames().items():
        lines = [ln.rstrip("\n") for ln in traceback.format_stack(frame)]
        out[f"{names.get(ident, 'unknown')} ({ident})"] = lines
    return out


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def read_heartbeats(run_dir: str | os.PathLike[str]) -> dict[int, dict[str, Any]]:
    """Every rank's last heartbeat in a run directory (unreadable files are skipped; read by
    `preflight.runtime.story.load_record`, the run directory's one reader)."""
    from preflight.runtime.story import load_record

    beats: dict[int, dict[str, Any]] = {}
    for path in Path(run_dir).glob("heartbeat-rank*.json"):
        try:
            rec, _ = load_record(path.name, path.read_bytes())
        except OSError:
            continue
        if rec is not None:
            beats[int(rec["rank"])] = rec
    return beats


# Liveness timing. A peer's heartbeat is written by its monitor thread, which runs beside
# (not inside) its training loop: a live rank that is slow or busy keeps beating, a stopped or
# dead one does not. With a step floor of 5 s or more the historic values hold (a beat every
# 0.5 s, a peer stopped after 5 s of silence); under it, both shrink with the floor so that a
# stopped peer is caught at the floor itself, while a live peer still has several beats of slack.
HEARTBEAT_S = 0.5  # the interval when the floor allows it
HEARTBEATS_PER_FLOOR = 8  # under a 4 s floor, the interval is floor / 8 (0.25 s at 2 s) ...
MIN_HEARTBEAT_S = 0.1  # ... never under this
PEER_STALE_MAX_S = 5.0  # a silent peer is stopped after at most this much silence
PEER_STALE_FRACTION = 0.75  # ... or three quarters of the floor when that is shorter ...
PEER_STALE_MIN_S = 1.0  # ... never under this, nor under four beats (a live rank starved of CPU)
STALE_LISTED_S = 1.5  # a hang record lists a peer stale after this much silence (or 3 beats)
# A pause of the whole job (SIGSTOP of every rank, Slurm's `scontrol suspend`/`resume`, a VM
# its host did not run for a moment) or a forward step of the wall clock silences every rank
# at once: on resume each monitor would find its peers silent before they had their turn to
# beat. A peer's silence is therefore counted over time this rank's own monitor was running:
# the time its polls came late by (a gap over `PAUSE_GAP_POLLS` polls, less the one poll it
# waits anyway) and the wall clock's forward steps are taken off.
PAUSE_GAP_POLLS = 2.0  # polls further apart than this many poll intervals: the rest was a pause
CLOCK_STEP_S = 0.1  # the wall clock running ahead of the monotonic one by more than this: a step
PAUSES_KEPT = 256  # the latest pauses remembered (older ones discount nothing)


def liveness_timing(step_floor_s: float | None, poll_s: float, heartbeat_interval_s: float | None = None,
                    stale_after_s: float | None = None,
                    peer_stale_s: float | None = None) -> tuple[float, float, float]:
    """(heartbeat interval, stale_after_s, peer_stale_s) for a step floor; given values are kept.

    The heartbeat interval is 0.5 s, or floor / 8 under a 4 s floor (at least 0.1 s). A peer
    is stopped after `peer_stale_s` of silence: three quarters of the floor, between 1 s (and
    four beats, a beat being written on the monitor's poll) and 5 s, so that the silence of a
    peer stopped when this rank entered its step is seen by the time the step reaches its floor.
    A hang record lists a peer as stale after `stale_after_s`: 1.5 s (3 beats when that is
    longer), never more than `peer_stale_s`. Pure.
    """
    floor = step_floor_s if step_floor_s is not None and step_floor_s > 0 else None
    hb = heartbeat_interval_s
    if hb is None:
        hb = HEARTBEAT_S if floor is None else min(HEARTBEAT_S, max(MIN_HEARTBEAT_S, floor / HEARTBEATS_PER_FLOOR))
    hb = float(hb)
    period = max(hb, float(poll_s))  # the monitor writes a beat on its poll, at most this often
    if peer_stale_s is None:
        lo = max(PEER_STALE_MIN_S, 4 * period)
        peer = PEER_STALE_MAX_S if floor is None else PEER_STALE_FRACTION * floor
        peer = max(lo, min(PEER_STALE_MAX_S, peer))
        if stale_after_s is not None:
            peer = max(peer, float(stale_after_s))
    else:
        peer = float(peer_stale_s)
    stale = float(stale_after_s) if stale_after_s is not None else max(3 * hb, min(STALE_LISTED_S, peer))
    return hb, stale, peer


def peer_progress(beats: Mapping[int, Mapping[str, Any]], now: float, stale_after_s: float,
                  self_rank: int | None = None) -> dict[str, Any]:
    """Which ranks are behind (lower step) or stale (no heartbeat for `stale_after_s`).

    A rank whose own watchdog fired (state "hang") is waiting like this one, not stale.
    Suspects: the stale ranks, or when none is stale the ranks behind.
    Pure: heartbeats and the current wall time in, a summary out.
    """
    peers = []
    steps: list[int] = [int(b["step"]) for b in beats.values() if isinstance(b.get("step"), int)]
    top = max(steps) if steps else None
    behind, stale = [], []
    for rank in sorted(beats):
        b = beats[rank]
        age = now - float(b.get("time", 0.0))
        state = str(b.get("state", "running"))
        step = b.get("step")
        is_stale = state == "running" and age > stale_after_s and rank != self_rank
        is_behind = isinstance(step, int) and top is not None and step < top and state != "closed"
        if is_stale:
            stale.append(rank)
        if is_behind:
            behind.append(rank)
        peers.append({"rank": rank, "host": b.get("host"), "pid": b.get("pid"), "step": step, "section": b.get("section"),
                      "state": state, "age_s": round(age, 3), "behind": is_behind, "stale": is_stale})
    # A rank that stopped heartbeating is the prime suspect. Ranks blocked in one collective
    # may legitimately differ by a step (a rank that got its last chunk has left it), so a
    # lower step names a suspect only when no rank is stale.
    suspects = sorted(stale) if stale else sorted(behind)
    return {"max_step": top, "behind": behind, "stale": stale, "suspects": suspects, "peers": peers}


class _Frame:
    __slots__ = ("name", "start", "timeout", "timeout_kind")

    def __init__(self, name: str, start: float, timeout: float | None, kind: str) -> None:
        self.name = name
        self.start = start  # monotonic; moved forward by the time spent in nested sections
        self.timeout = timeout
        self.timeout_kind = kind


class _Section:
    __slots__ = ("_wd", "_name", "_step")

    def __init__(self, wd: Watchdog, name: str, step: int | None) -> None:
        self._wd = wd
        self._name = name
        self._step = step

    def __enter__(self) -> _Section:
        self._wd._enter(self._name, self._step)
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        if ev is not None and getattr(ev, "__preflight_section__", None) is None:
            try:  # the crash record names the innermost section the exception left
                ev.__preflight_section__ = self._name  # type: ignore[attr-defined]
            except (AttributeError, TypeError):
                pass
        self._wd._exit()


class Watchdog:
    """Per-rank hang detection with per-section timeouts; see the module docstring."""

    def __init__(self, run_dir: str | os.PathLike[str],
                 timeouts: Mapping[str, float | str | None] | None = None, *,
                 warmup_steps: int = 20, auto_factor: float = 5.0, auto_floor_s: float = 60.0,
                 auto_initial_s: float = 1800.0, default_timeout_s: float | None = 1800.0,
                 exit_code: int = EXIT_HANG, events: EventWriter | None = None,
                 rank: int | None = None, poll_s: float = 0.25, heartbeat_interval_s: float | None = None,
                 stale_after_s: float | None = None, exit_on_hang: bool = True, exit_grace_s: float = 2.0,
                 flight_recorder: bool = True, gil_backstop_s: float | None = None,
                 on_hang: Callable[[dict[str, Any]], None] | None = None, start: bool = True,
                 peer_stale_s: float | None = None, kill_stuck_peers: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.timeouts: dict[str, float | str | None] = dict(DEFAULT_TIMEOUTS)
        self.timeouts.update(timeouts or {})
        self.warmup_steps = int(warmup_steps)
        self.auto_factor = float(auto_factor)
        self.auto_floor_s = float(auto_floor_s)
        self.auto_initial_s = float(auto_initial_s)
        self.default_timeout_s = default_timeout_s
        self.exit_code = int(exit_code)
        self.rank = env_rank() if rank is None else int(rank)
        self.host = socket.gethostname().split(".")[0]
        self.events = events if events is not None else EventWriter(self.run_dir, rank=self.rank)
        self.poll_s = float(poll_s)
        # how often this rank beats, when a silent peer is listed stale in a record, and when
        # a peer silent while this rank waits in a step past the step floor is stopped or dead
        # (fire, warm-up or not): scaled to the step floor unless given
        self.heartbeat_interval_s, self.stale_after_s, self.peer_stale_s = liveness_timing(
            self.step_floor_s(), self.poll_s, heartbeat_interval_s, stale_after_s, peer_stale_s)
        self.exit_on_hang = exit_on_hang
        self.exit_grace_s = float(exit_grace_s)
        self.kill_stuck_peers = kill_stuck_peers
        self.killed_peers: list[dict[str, Any]] = []
        self._started_wall = time.time()
        self._next_peer_check = 0.0
        self._last_poll: tuple[float, float] | None = None  # (monotonic, wall) of the previous poll
        # (wall time of the resume, seconds this monitor lost): see PAUSE_GAP_POLLS
        self.pauses: collections.deque[tuple[float, float]] = collections.deque(maxlen=PAUSES_KEPT)
        self.gil_backstop_s = gil_backstop_s
        self.on_hang = on_hang
        self.fired: dict[str, Any] | None = None
        self._recorded = threading.Event()
        self.monitor_faults = 0
        self._init_progress()
        self._closed = False
        self._stop = threading.Event()
        self._backstop_file: Any = None
        self._open_run_dir(flight_recorder)
        self._thread = threading.Thread(target=self._monitor, name="preflight-watchdog", daemon=True)
        if start:
            try:
                self._thread.start()
            except RuntimeError as exc:  # no thread to be had: train unwatched rather than not at all
                log.warning("preflight: watchdog monitor could not start, hangs go undetected: %s", exc)

    def _init_progress(self) -> None:
        """The state written by the training thread, read by the monitor (attribute stores are
        atomic): the open sections, the step, and the durations that set the auto timeouts."""
        self._stack: list[_Frame] = []
        self._current: _Frame | None = None
        self._step: int | None = None
        self._steps_done = 0
        self._counts: dict[str, int] = {}
        self._longest: dict[str, float] = {}
        self._last_beat: float | None = None  # monotonic time of the last heartbeat
        self._beat_clean = False  # no section ran since the last heartbeat

    def _open_run_dir(self, flight_recorder: bool) -> None:
        """This rank's files in the run directory (created when missing), and PyTorch's flight
        recorder switched on so that a hang record can say which collective was in flight."""
        self.heartbeat_path = self.run_dir / f"heartbeat-rank{self.rank}.json"
        self.record_path = self.run_dir / f"hang-rank{self.rank}.json"
        self.fr_path = self.run_dir / f"fr-rank{self.rank}.json"
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            log.warning("preflight: watchdog cannot create %s: %s", self.run_dir, exc)
        if flight_recorder:
            enable_flight_recorder()

    # ----- training-thread API -----------------------------------------------------------
    def section(self, name: str, step: int | None = None) -> _Section:
        """Context manager timing one section ("step", "setup", "checkpoint", "eval", ...)."""
        return _Section(self, name, step)

    def heartbeat(self, step: int | None = None) -> None:
        """Progress mark, once per step: records the step and restarts the implicit step clock."""
        now = time.monotonic()
        if step is not None:
            self._step = int(step)
        if not self._stack:
            if self._last_beat is not None and self._beat_clean:
                self._observe("step", now - self._last_beat)
                self._steps_done += 1
            self._last_beat = now
            self._beat_clean = True
            self._current = _Frame("step", now, *self.timeout_for("step"))

    @property
    def step(self) -> int:
        """The last step number the loop gave, else the number of steps completed."""
        return self._step if self._step is not None else self._steps_done

    def timeout_for(self, name: str) -> tuple[float | None, str]:
        """(timeout in seconds or None, how it was chosen: fixed / auto / warmup / off)."""
        spec = self.timeouts.get(name, self.default_timeout_s)
        if spec is None:
            return None, "off"
        if spec == "auto":
            warm = self.warmup_steps if name == "step" else 1
            if self._counts.get(name, 0) <= warm or name not in self._longest:
                return max(self.auto_initial_s, self.auto_floor_s), "warmup"
            return max(self.auto_floor_s, self.auto_factor * self._longest[name]), "auto"
        try:
            return float(spec), "fixed"
        except (TypeError, ValueError):
            return self.default_timeout_s, "fixed"

    def close(self) -> None:
        """Stop watching (end of training); marks this rank "closed" for its peers."""
        if self._closed:
            return
        self._closed = True
        self._current = None
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=2.0)
        if self._backstop_file is not None:
            try:
                faulthandler.cancel_dump_traceback_later()
                self._backstop_file.close()
            except Exception:  # noqa: BLE001
                pass
        self._write_heartbeat(state="closed")

    def __enter__(self) -> Watchdog:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _enter(self, name: str, step: int | None) -> None:
        now = time.monotonic()
        if step is not None:
            self._step = int(step)
        self._beat_clean = False
        frame = _Frame(name, now, *self.timeout_for(name))
        self._stack.append(frame)
        self._current = frame

    def _exit(self) -> None:
        now = time.monotonic()
        if not self._stack:
            return
        frame = self._stack.pop()
        own = now - frame.start
        self._observe(frame.name, own)
        if frame.name == "step":
            self._steps_done += 1
        if self._stack:
            parent = self._stack[-1]
            parent.start += own  # the parent's clock pauses while a nested section runs
            self._current = parent
        elif self._last_beat is not None:
            self._last_beat = now  # back in heartbeat mode: the implicit step restarts now
            self._current = _Frame("step", now, *self.timeout_for("step"))
        else:
            self._current = None

    def _observe(self, name: str, duration: float) -> None:
        n = self._counts.get(name, 0) + 1
        self._counts[name] = n
        warm = self.warmup_steps if name == "step" else 1
        if n > warm and duration > self._longest.get(name, 0.0):
            self._longest[name] = duration

    # ----- monitor thread -----------------------------------------------------------------
    def _monitor(self) -> None:
        next_beat = 0.0
        while not self._stop.wait(self.poll_s):
            try:
                now = time.monotonic()
                self._note_pause(now, time.time())
                if now >= next_beat:
                    self._write_heartbeat()
                    self._arm_backstop()
                    next_beat = now + self.heartbeat_interval_s
                frame = self._current
                if frame is None or frame.timeout is None or self.fired is not None:
                    continue
                elapsed = now - frame.start
                if elapsed > frame.timeout and frame is self._current:
                    self._fire(frame, elapsed)
                elif (frame.name == "step" and elapsed > self.peer_timeout_s(frame)
                      and now >= self._next_peer_check):
                    self._next_peer_check = now + self.heartbeat_interval_s
                    if self._stopped_peers() and frame is self._current:
                        self._fire(_Frame(frame.name, frame.start, self.peer_timeout_s(frame), "peer-stale"),
                                   elapsed)
            except Exception:  # noqa: BLE001 - monitoring must never take training down
                self.monitor_faults += 1
                if self.monitor_faults <= 3:
                    log.exception("preflight: watchdog monitor fault (training continues)")

    def _note_pause(self, mono: float, wall: float) -> None:
        """Remember the time this monitor lost since its previous poll: a gap of more than
        `PAUSE_GAP_POLLS` polls less the one poll it waits (the process or machine was paused
        or starved), plus a forward step of the wall clock over `CLOCK_STEP_S`."""
        prev, self._last_poll = self._last_poll, (mono, wall)
        if prev is None:
            return
        gap = mono - prev[0]
        lost = gap - self.poll_s if gap > PAUSE_GAP_POLLS * self.poll_s else 0.0
        step = (wall - prev[1]) - gap
        if step > CLOCK_STEP_S:
            lost += step
        if lost > 0.0:
            self.pauses.append((wall, lost))

    def paused_since(self, wall: float) -> float:
        """Seconds this monitor lost to pauses after wall time `wall` (a pause that began
        before it counts from it)."""
        return sum(min(lost, resumed - wall) for resumed, lost in self.pauses if resumed > wall)

    def peer_timeout_s(self, frame: _Frame) -> float:
        """How long a step must have been open before a silent peer makes it a hang: the
        step's floor (`auto_floor_s` for an auto timeout, the fixed timeout otherwise), never
        under `peer_stale_s` (which, unless given, is scaled under the floor: the floor is the
        detection time). Before warm-up this is what catches a stopped rank."""
        floor = self.auto_floor_s if frame.timeout_kind in ("auto", "warmup") else (frame.timeout or 0.0)
        return max(self.peer_stale_s, floor)

    def step_floor_s(self) -> float | None:
        """The step's floor as configured: `auto_floor_s` for an auto step timeout, the fixed
        step timeout otherwise, None when steps are not watched."""
        spec = self.timeouts.get("step", self.default_timeout_s)
        if spec is None:
            return None
        if spec == "auto":
            return self.auto_floor_s
        try:
            return float(spec)
        except (TypeError, ValueError):
            return self.default_timeout_s

    def _stopped_peers(self) -> list[int]:
        """Peers that beat during this run and then went silent past `peer_stale_s` while
        still "running" in a step, at this rank's step or below (a SIGSTOPped or dead process:
        its monitor thread stopped with it). A heartbeat older than this watchdog's start is a
        rank not started yet (a restart); a peer silent in another section (a checkpoint) is
        left to that section's timeout; a peer at a later step has moved on, not stopped. The
        time this monitor itself lost to pauses is not the peer's silence (`paused_since`)."""
        now = time.time()
        mine = self.step
        out = []
        for rank, b in read_heartbeats(self.run_dir).items():
            t = float(b.get("time") or 0.0)
            step = b.get("step")
            if (rank != self.rank and str(b.get("state", "running")) == "running" and t >= self._started_wall
                    and now - t - self.paused_since(t) > self.peer_stale_s and b.get("section") in ("step", None)
                    and (not isinstance(step, int) or step <= mine)):
                out.append(rank)
        return out

    def _stuck_peers(self, record: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The stale peers of the hang record that this rank may end: a pid of this host whose
        environment says it is that rank and whose start time is the one its heartbeat recorded
        (never ourselves, never a reused pid), and only while its heartbeat is still stale or
        the process is stopped."""
        beats = read_heartbeats(self.run_dir)
        out: list[dict[str, Any]] = []
        for p in record.get("peers") or []:
            pid = p.get("pid") if isinstance(p.get("pid"), int) else None
            if not p.get("stale") or p.get("host") != self.host or not pid or pid == os.getpid():
                continue
            beat = beats.get(int(p["rank"])) or {}
            if beat.get("pid") != pid or beat.get("host") != self.host:
                continue
            proc = _proc_stat(pid)
            if proc is None or beat.get("start_ticks") is None or proc[1] != beat.get("start_ticks"):
                continue  # gone, or the pid now belongs to another process
            still_silent = time.time() - float(beat.get("time") or 0.0) > self.stale_after_s
            if not (still_silent or proc[0] in ("T", "t")):
                continue
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"RANK={p['rank']}".encode() in env:
                out.append({"rank": p["rank"], "pid": pid, "host": self.host})
        return out

    def _kill_stuck_peers(self, record: Mapping[str, Any],
                          victims: list[dict[str, Any]] | None = None) -> None:
        """SIGKILL the stuck peers on this host (`victims`, else those `_stuck_peers` finds), so
        the launcher's restart need not wait out its SIGTERM-then-SIGKILL grace for a stopped
        process."""
        import signal

        for v in self._stuck_peers(record) if victims is None else victims:
            try:
                os.kill(v["pid"], signal.SIGKILL)
            except OSError:
                continue
            if v not in self.killed_peers:
                self.killed_peers.append(v)
            log.warning("preflight: watchdog ended stuck rank %s (pid %s on %s)", v["rank"], v["pid"], self.host)

    def _arm_backstop(self) -> None:
        """faulthandler dumps every stack and exits if this thread cannot run (GIL held)."""
        if not self.gil_backstop_s:
            return
        if self._backstop_file is None:
            self._backstop_file = open(self.run_dir / f"stacks-rank{self.rank}.txt", "w")  # noqa: SIM115
        faulthandler.dump_traceback_later(self.gil_backstop_s, repeat=False, file=self._backstop_file, exit=True)

    def _state(self) -> dict[str, Any]:
        frame = self._current
        return {"rank": self.rank, "host": self.host, "pid": os.getpid(), "start_ticks": _start_ticks(),
                "step": self.step,
                "section": frame.name if frame is not None else None,
                "section_elapsed_s": round(time.monotonic() - frame.start, 3) if frame is not None else None,
                "time": time.time()}

    def _write_heartbeat(self, state: str = "running") -> None:
        rec = self._state()
        rec["state"] = state
        try:
            _atomic_write(self.heartbeat_path, json.dumps(rec).encode())
        except OSError as exc:
            self.monitor_faults += 1
            if self.monitor_faults <= 3:
                log.warning("preflight: watchdog cannot write %s: %s", self.heartbeat_path, exc)

    def _fire(self, frame: _Frame, elapsed: float) -> None:
        detected = time.time()
        record: dict[str, Any] = {"rank": self.rank, "host": self.host, "pid": os.getpid(),
                                  "section": frame.name, "step": self.step,
                                  "elapsed_s": round(elapsed, 3), "timeout_s": frame.timeout,
                                  "timeout_kind": frame.timeout_kind, "time": detected,
                                  "exit_code": self.exit_code if self.exit_on_hang else None}
        self.fired = record
        if self.exit_on_hang:
            # from now on, should the training thread die (a peer's connection reset) or
            # return, the process still ends with our code, once the hang record is written
            self._exit_with_code_on_shutdown()
        if self._backstop_file is not None:  # this thread runs: the GIL backstop has done its part
            faulthandler.cancel_dump_traceback_later()
        self._write_heartbeat(state="hang")
        done = threading.Event()

        def write() -> None:
            try:
                self._write_record(record)
            except Exception:  # noqa: BLE001
                log.exception("preflight: watchdog could not write the hang record")
            finally:
                done.set()

        threading.Thread(target=write, name="preflight-hang-record", daemon=True).start()
        done.wait(30.0)  # a hung shared filesystem must not keep a hung job alive
        self._recorded.set()
        if self.on_hang is not None:
            try:
                self.on_hang(record)
            except Exception:  # noqa: BLE001
                log.exception("preflight: on_hang callback failed")
        if self.exit_on_hang:
            # peers blocked in the same collective fire within a poll or two: let them write
            # their records before this exit breaks their connections. Should the training
            # thread die meanwhile (a peer went first), the process still ends with our code.
            time.sleep(self.exit_grace_s)
            victims: list[dict[str, Any]] = []
            if self.kill_stuck_peers and "peers" in record:
                # after the grace, when every waiting peer has written its own record: end a
                # stopped peer on this node, so a restart need not wait for the launcher's
                # SIGTERM-then-SIGKILL of a process that cannot handle SIGTERM
                try:
                    victims = self._stuck_peers(record)
                except Exception:  # noqa: BLE001
                    log.exception("preflight: could not look for stuck peers")
            # this rank's end is recorded before the kill, and the process exits right after
            # it: a launcher that polls its workers sees our exit code together with the
            # victim's death, instead of ending us with a SIGTERM first
            self._record_exit(record, ending=victims)
            if victims:
                try:
                    self._kill_stuck_peers(record, victims)
                except Exception:  # noqa: BLE001
                    log.exception("preflight: could not end a stuck peer")
            _flush_and_exit(self.exit_code)

    def _record_exit(self, record: Mapping[str, Any], ending: list[dict[str, Any]] | None = None) -> None:
        """This rank's `runtime.exit` event (how "hang") before `os._exit`, through the crash
        recorder of the process (or one made for the purpose): every end is accounted for."""
        try:
            from preflight.runtime import crash

            rec = crash.installed()
            if rec is None:
                rec = crash.CrashRecorder(self.run_dir, rank=self.rank, node=self.host, watchdog=self,
                                          events=self.events)
            killed = ", ".join(f"rank {k['rank']} (pid {k['pid']})" for k in [*self.killed_peers, *(ending or [])])
            rec.exit("hang", exit_code=self.exit_code,
                     summary=f"watchdog: section '{record.get('section')}' at step {record.get('step')} ran "
                             f"{record.get('elapsed_s')} s > {record.get('timeout_s')} s"
                             + (f"; ended stopped {killed}" if killed else ""))
        except Exception:  # noqa: BLE001
            log.exception("preflight: could not record this rank's exit")

    def _exit_with_code_on_shutdown(self) -> None:
        code = self.exit_code
        previous = sys.excepthook

        def hook(et: type[BaseException], ev: BaseException, tb: TracebackType | None) -> None:
            try:
                previous(et, ev, tb)
            finally:
                self._end_once_recorded(code)

        sys.excepthook = hook
        atexit.register(self._end_once_recorded, code)

    def _end_once_recorded(self, code: int) -> None:
        """End the process with `code` once the hang record is written (bounded wait)."""
        self._recorded.wait(35.0)
        self._record_exit(self.fired or {})
        _flush_and_exit(code)

    def _write_record(self, record: dict[str, Any]) -> None:
        record["stacks"] = thread_stacks()
        record["flight_recorder"] = dump_flight_recorder(self.fr_path)
        progress = peer_progress(read_heartbeats(self.run_dir), time.time(), self.stale_after_s, self.rank)
        record.update(progress)
        try:
            _atomic_write(self.record_path, json.dumps(record, indent=1, default=str).encode())
        except OSError as exc:
            log.warning("preflight: cannot write %s: %s", self.record_path, exc)
        fr = record["flight_recorder"]
        last = fr.get("last") or {}
        main = record["stacks"].get(next((k for k in record["stacks"] if k.startswith("MainThread")), ""), [])
        suspects = progress["suspects"]
        who = ", ".join(f"rank {r}" for r in suspects) or "none found"
        evidence = [f"section {_frame_desc(record)}; timeout chosen: {record['timeout_kind']}"]
        if main:
            evidence.append("main thread at: " + main[-1].strip().splitlines()[0])
        if last:
            evidence.append(f"last collective: {last.get('op')} seq {last.get('seq')} ({last.get('state')})")
        for p in progress["peers"]:
            if p["behind"] or p["stale"]:
                evidence.append(f"rank {p['rank']} on {p['host']} (pid {p.get('pid')}): step {p['step']} in {p['section']}, "
                                f"last heartbeat {p['age_s']:.1f} s ago")
        evidence.append(f"hang record: {self.record_path}")
        remedy = (f"the process exits with code {self.exit_code} for the launcher to restart the job "
                  "from its last checkpoint; ")
        remedy += (f"inspect the suspect ranks ({who}) and their nodes (stacks in hang-rank*.json, dmesg, "
                   "GPU health); drain the node if the hang repeats there" if suspects else
                   "compare the hang records of every rank (preflight triage) to find the culprit")
        facts = {"op": last.get("op") or record["section"], "seq": last.get("seq"),
                 "timeout_ms": int((record["timeout_s"] or 0) * 1000), "ran_ms": int(record["elapsed_s"] * 1000),
                 "rank": self.rank, "section": record["section"], "step": record["step"],
                 "behind": progress["behind"], "stale": progress["stale"], "suspects": suspects,
                 "record": str(self.record_path), "flight_recorder": fr.get("path")}
        self.events.emit(CHECK, Status.FAIL,
                         f"rank {self.rank} hung in section '{record['section']}' at step {record['step']} for "
                         f"{record['elapsed_s']:.1f} s (timeout {record['timeout_s']:.1f} s); suspects: {who}",
                         evidence=evidence, remedy=remedy, facts=facts, step=record["step"])


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks after boot) of a process, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


_own_start: dict[int, int | None] = {}


def _start_ticks() -> int | None:
    """This process's start time (clock ticks after boot), per pid (a forked child has its own)."""
    pid = os.getpid()
    if pid not in _own_start:
        st = _proc_stat(pid)
        _own_start[pid] = st[1] if st else None
    return _own_start[pid]


def _flush_and_exit(code: int) -> None:
    flush_std_streams()
    try:
        logging.shutdown()
    finally:
        os._exit(code)


def _frame_desc(record: Mapping[str, Any]) -> str:
    return (f"{record.get('section')} at step {record.get('step')}: {record.get('elapsed_s')} s "
            f"> {record.get('timeout_s')} s")
