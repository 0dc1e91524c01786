"""In-process restart: on a collective fault the surviving ranks re-form and go on.

    rs = InProcessRestart(run_dir, timeout_s=3.0, max_restarts=3, max_faults_per_rank=1)
    model, opt = build()                       # before start(): a spare called in restores at once
    if not rs.start():                         # a warm spare the job never needed
        sys.exit(0)
    state = {"model": model, "opt": opt}
    step = rs.restore(state, start_step)       # a spare called in receives the state here
    while step < total:
        try:
            train_step(step, rs.rank, rs.world_size)   # shard by rs.rank / rs.world_size
            step += 1
        except Exception as exc:
            if not rs.is_fault(exc):
                raise
            step = rs.recover(exc, step, state)   # the step to redo
    rs.close()

Detection. A rank that dies (a crash, SIGKILL, the OOM killer) is seen when its process ends:
the launcher records every worker's exit code in the store it hosts, and each rank's death
watch (a daemon thread with its own store connection, `watch_s`, 0.1 s by default) reads the
store's key count at that rate and, when it changed, the exit records of the current
generation's members: one small request per look. On a member's recorded exit it marks the
fault detected with the cause "rank R (slot, pid on host) died: killed by SIGKILL" (or its exit
code) and breaks this rank's collective: gloo's, which cannot be aborted from another thread
(torch 2.13), by shutting down the process group's connections (the TCP sockets that appeared
while the group was created; never the listening one, never the store's), so the blocked
receive fails at once; NCCL's by aborting the communicator. A rank's own collective with the
dead rank may fail first on the closed connection; the cause is still the death, named from
the leader's plan. The watch ends with `done()`. A rank that is stopped (SIGSTOP, a hung
driver call) makes the survivors' collective wait for the process group's timeout,
`timeout_s`. `abort()` (from the watchdog's `on_hang`, for instance) marks the fault detected
and, with NCCL, aborts the communicator; a recent `abort()` is the recorded cause and the start
of the recovery's clock. A watchdog next to this must not end the process on a hang
(`Watchdog(exit_on_hang=False, on_hang=lambda rec: rs.abort("watchdog"))`).

Agreement. Every survivor calls `recover(exc, step, state)` with the number of steps whose
update it applied. Through the job's TCPStore, under a namespace of the launch attempt and a
generation number, each survivor writes a join record; the first to arrive (`store.add`) leads:
it waits until every member of the failed generation has joined or is known gone (a process of
this host that is gone, a zombie or stopped, or one whose exit the launcher recorded), at most
`join_timeout_s` (default: the process-group timeout + max(1 s, half of it), so that a healthy
survivor still blocked in its collective is never taken for a failed one), then writes the plan every survivor reads: the members of the new generation
(a warm spare takes the failed rank's number, so the world size and the data sharding stay;
without one the world shrinks and the ranks above the failed one move down), the rank to
restore from (the survivor that applied the most steps), or the fallback with its reason. The
leader fences the failed ranks of its host (SIGKILL, after checking the pid's start time and
that it is still the registered process), the others those of theirs; a failed rank elsewhere
that comes back finds itself excluded and exits with `EXIT_EXCLUDED`. Every wait is bounded:
a leader that dies before writing the plan costs the survivors one generation, not a hang.

Re-form and restore. `recover` lets go of the failed collective's traceback (it holds the
process group alive; its sockets close when the group goes, and that is what makes a survivor
still blocked on this rank fail at once). The survivors destroy the broken process group and create the next one
through a `PrefixStore` of the generation (gloo's connect is bounded by `timeout_s`); the
state is broadcast from the source rank (tensors one by one, the structure of the state dicts
with `broadcast_object_list`) and loaded on every other rank, a spare included; `recover`
returns the step to redo. A fault during recovery moves to the next generation.

Randomness. A peer's state dicts carry no per-rank random generator state: a run reproduces an
uninterrupted one (a spare in the failed rank's place) when each rank derives its randomness
from (seed, step, rank), for instance by reseeding at every step.

Limits and the fallback. Past `max_restarts` re-forms tried, a rank number that failed more than
`max_faults_per_rank` times with no spare left to fill it and a world under `min_world_size`,
a store that cannot be reached, or a rank gone under a launcher that restarts every worker
anyway (torchrun's agent does, when one worker dies), `recover` raises `RestartFallback`, a
`SystemExit` with code 75 (EX_TEMPFAIL, the watchdog's hang code): uncaught, the process exits
75 and the launcher (`torchrun --max-restarts`, `python -m preflight.runtime.launch
--max-restarts`, Slurm's requeue) restarts the job from its checkpoint.

Events and the console: after a re-form the new rank 0 prints one line
(`preflight[rank 0]: in-process restart N: rank R on HOST killed by SIGKILL; world 4 -> 3 (no
spare); down 0.31 s; redoing step S`; the downtime from the end of the last completed step
when `recover` is given `last_good_at`, else from the detection, or for a collective that timed
out from the start of its wait) and writes one `runtime.restart` event (WARN) with facts
generation, failed ranks (rank, slot, host, pid, cause, fenced), cause, seconds from detection
to re-form, the downtime, old and new world size, spares used and called in; FAIL from the
leader when it decides the fallback. Restarts are numbered by the re-forms that held, without
gaps: a fault during a recovery (a second rank dies while the group re-forms) is folded into
that restart, whose event names every rank lost since the last re-form, by its rank in the
world before the restart (`generation_rank`: its number where it failed); `attempts` counts
the re-forms tried, and `max_restarts` bounds those.

Other process groups (a CheckpointManager's `new_group`) belong to the destroyed generation:
create them again after `recover` returns (`rs.generation` tells that it changed), inside
`with rs.track():` so that a member's death breaks their collectives too (Resilience does).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from preflight.model import Status
from preflight.runtime.events import EventWriter, say

log = logging.getLogger("preflight.runtime")

CHECK = "runtime.restart"
EXIT_FALLBACK = 75  # EX_TEMPFAIL, as the watchdog's hang code: the launcher restarts the job
EXIT_EXCLUDED = 77  # this process was fenced out of the group: the job goes on without it (76 is replay's suspect hardware)
POLL_S = 0.02
WATCH_S = 0.1  # how often a rank looks in the store for a member's recorded exit
# environment set by `python -m preflight.runtime.launch`
ENV_INPROCESS = "PREFLIGHT_INPROCESS"  # "1": the launcher keeps the survivors alive and hosts the store
ENV_SLOT = "PREFLIGHT_SLOT"  # the process's number in its launch, stable for its life
ENV_SPARE = "PREFLIGHT_SPARE"  # "1": a warm spare
ENV_NPROC = "PREFLIGHT_NPROC"
ENV_SPARES = "PREFLIGHT_SPARES"
ENV_ATTEMPT = "PREFLIGHT_ATTEMPT"  # the launcher's restart count (fallback restarts)
_FAULT_WORDS = ("gloo", "nccl", "connection reset", "connection closed", "timed out", "timeout",
                "processgroup", "process group", "broken pipe", "aborted", "socket", "peer")


_end_code: int | None = None


def _launched() -> bool:
    """Whether this process is a launcher's worker (ours or torchrun's), whose exit code is
    what the launcher reads."""
    return os.environ.get(ENV_INPROCESS) == "1" or "TORCHELASTIC_RUN_ID" in os.environ


def _end_with(code: int) -> None:
    """A worker that took the fallback or was left out ends with `code`, whatever its way out
    does: the interpreter's teardown destroys what the broken process group left (gloo's pairs,
    the store's client), and a C++ destructor that aborts there ("terminate called without an
    active exception", SIGABRT) would turn the agreed exit 75 into 134. So once the code is
    known, the exit handlers registered before this one and the teardown are skipped: the logs
    and standard streams are flushed, then the process exits with it. Only in a launched worker
    (a test raising the exception in its own process is left alone)."""
    global _end_code
    if not _launched():
        return
    if _end_code is None:
        atexit.register(_exit_now)
    _end_code = code


def _exit_now() -> None:
    if _end_code is None:
        return
    with contextlib.suppress(Exception):
        logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(_end_code)


class RestartFallback(SystemExit):
    """In-process recovery is impossible or over its limits: exit 75 for the launcher's restart."""

    def __init__(self, reason: str) -> None:
        super().__init__(EXIT_FALLBACK)
        self.reason = reason
        _end_with(EXIT_FALLBACK)

    def __str__(self) -> str:
        return f"in-process restart gave up: {self.reason} (exit {EXIT_FALLBACK})"


class Excluded(SystemExit):
    """This process was left out of the next generation (late, stopped, fenced): exit 77."""

    def __init__(self, reason: str) -> None:
        super().__init__(EXIT_EXCLUDED)
        self.reason = reason
        _end_with(EXIT_EXCLUDED)


def namespace(attempt: str | int | None = None) -> str:
    """The store prefix of one launch attempt (the launcher's or torchrun's restart count), so a
    restarted job never reads the keys of the attempt before it."""
    if attempt is None:
        attempt = os.environ.get(ENV_ATTEMPT) or os.environ.get("TORCHELASTIC_RESTART_COUNT") or "0"
    run = os.environ.get("TORCHELASTIC_RUN_ID") or "run"
    return f"preflight-ip/{run}/{attempt}"


def exit_key(ns: str, slot: int) -> str:
    """Where the launcher records a worker's exit code."""
    return f"{ns}/exit/{slot}"


def done_key(ns: str) -> str:
    return f"{ns}/done"


def latest_key(ns: str) -> str:
    return f"{ns}/latest"


def plan_key(ns: str, gen: int) -> str:
    return f"{ns}/g{gen}/plan"


def proc_state(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks after boot) of a process, or None when gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _host() -> str:
    return socket.gethostname().split(".")[0]


def _int_env(name: str, default: int) -> int:
    v = os.environ.get(name, "")
    return int(v) if v.strip().lstrip("-").isdigit() else default


def _same_process(info: Mapping[str, Any]) -> str | None:
    """For a member registered on this host: "gone", "stopped", "running" (the same process,
    checked by its start time), or None when it is not on this host."""
    if info.get("host") != _host() or not isinstance(info.get("pid"), int):
        return None
    st = proc_state(int(info["pid"]))
    if st is None or st[1] != info.get("start_ticks") or st[0] in ("Z", "X"):
        return "gone"
    return "stopped" if st[0] in ("T", "t") else "running"


def _zombie_cause(info: Mapping[str, Any]) -> str | None:
    """How a member of this host that has not been reaped yet ended, from its /proc exit code."""
    try:
        fields = Path(f"/proc/{int(info['pid'])}/stat").read_text().rsplit(")", 1)[1].split()
        if fields[0] != "Z" or int(fields[19]) != info.get("start_ticks"):
            return None
        status = int(fields[49])
    except (OSError, IndexError, ValueError, KeyError, TypeError):
        return None
    return exit_words(-(status & 0x7F) if status & 0x7F else status >> 8)


def exit_words(code: int) -> str:
    """A process's end in words from its exit code (negative: the signal that killed it, as
    subprocess reports it)."""
    if code >= 0:
        return f"exited (code {code})"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    oom = " (an outside kill or the OOM killer: check the kernel log)" if -code == signal.SIGKILL else ""
    return f"killed by {name}{oom}"


def fence(info: Mapping[str, Any]) -> bool:
    """SIGKILL a failed member when it is on this host and still the registered process
    (pid and start time), never this process. True when a signal was sent."""
    pid = info.get("pid")
    if not isinstance(pid, int) or pid == os.getpid() or _same_process(info) in (None, "gone"):
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        return False
    log.warning("preflight: in-process restart fenced rank slot %s (pid %s on %s)", info.get("slot"), pid,
                info.get("host"))
    return True


def _socket_fds() -> dict[int, int]:
    """This process's sockets: inode -> file descriptor (Linux /proc)."""
    out: dict[int, int] = {}
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return out
    for name in names:
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:[") and target.endswith("]") and target[8:-1].isdigit():
            out[int(target[8:-1])] = int(name)
    return out


def _tcp_sockets() -> dict[int, tuple[int, int, str]]:
    """Every TCP socket of this network namespace: inode -> (local port, remote port, state),
    the state as the kernel's hex code ("0A" listening, "01" established)."""
    out: dict[int, tuple[int, int, str]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            try:
                out[int(f[9])] = (int(f[1].rsplit(":", 1)[1], 16), int(f[2].rsplit(":", 1)[1], 16), f[3])
            except (IndexError, ValueError):
                continue
    return out


def shut_connections(inodes: set[int], keep_port: int = -1) -> int:
    """Shut down (both ways) this process's TCP connections among `inodes`, never a listening
    socket (gloo's accept thread ends the process on one) nor one to or from `keep_port` (the
    store). A thread blocked on such a connection's receive (a gloo collective) fails at once,
    and the peer at the other end sees the connection close. Each socket is checked, on a
    duplicate of its descriptor, to be the one named (a descriptor closed and reused meanwhile
    is left alone). Returns how many were shut down; never raises."""
    if not inodes:
        return 0
    table = _tcp_sockets()
    n = 0
    for ino, fd in _socket_fds().items():
        row = table.get(ino)
        if ino not in inodes or row is None or row[2] == "0A" or keep_port in (row[0], row[1]):
            continue
        try:
            dup = os.dup(fd)
        except OSError:
            continue
        try:
            if os.fstat(dup).st_ino != ino:
                continue
            sock = socket.socket(fileno=dup)
            dup = -1  # the socket object owns the duplicate now
            try:
                sock.shutdown(socket.SHUT_RDWR)
                n += 1
            except OSError:
                pass
            finally:
                sock.close()
        except OSError:
            continue
        finally:
            if dup >= 0:
                os.close(dup)
    return n


def _drop_tracebacks(exc: BaseException | None) -> None:
    """Let go of the frames of a failed collective (they hold its process group alive)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc.__traceback__ = None
        exc = exc.__cause__ or exc.__context__


def describe(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


class InProcessRestart:
    """Re-forms the process group of the surviving ranks on a fault; see the module docstring."""

    def __init__(self, run_dir: str | os.PathLike[str], *, backend: str = "gloo", timeout_s: float = 3.0,
                 join_timeout_s: float | None = None, max_restarts: int = 3, max_faults_per_rank: int = 1,
                 min_world_size: int = 1, events: EventWriter | None = None, store: Any = None,
                 init_timeout_s: float = 120.0, spare_wait_s: float | None = None,
                 watch_s: float | None = WATCH_S) -> None:
        if timeout_s <= 0 or max_restarts < 0 or max_faults_per_rank < 0 or min_world_size < 1:
            raise ValueError("timeout_s > 0, max_restarts >= 0, max_faults_per_rank >= 0, min_world_size >= 1")
        self.run_dir = Path(run_dir)
        self.backend = backend
        self.timeout_s = float(timeout_s)
        # a survivor blocked on a failed rank raises at the latest timeout_s after its collective
        # began: a window shorter than that could fence a healthy rank
        self.join_timeout_s = (float(join_timeout_s) if join_timeout_s is not None
                               else self.timeout_s + max(1.0, 0.5 * self.timeout_s))
        self.max_restarts = int(max_restarts)
        self.max_faults_per_rank = int(max_faults_per_rank)
        self.min_world_size = int(min_world_size)
        self.init_timeout_s = float(init_timeout_s)
        self.spare_wait_s = spare_wait_s
        self._events = events
        self._store = store
        self.slot = _int_env(ENV_SLOT, _int_env("RANK", 0))
        self.is_spare = os.environ.get(ENV_SPARE) == "1"
        self.nproc = _int_env(ENV_NPROC, _int_env("WORLD_SIZE", 1))
        self.nspares = _int_env(ENV_SPARES, 0)
        self.keeps_survivors = os.environ.get(ENV_INPROCESS) == "1"
        self.ns = namespace()
        self.rank = -1 if self.is_spare else self.slot
        self.world_size = self.nproc
        self.generation = 0
        self.restarts = 0
        self.members: list[int] = list(range(self.nproc))
        self.faults: dict[int, int] = {}
        self.spares_used: list[int] = []
        self.history: list[dict[str, Any]] = []
        self.last_restart: dict[str, Any] | None = None
        self._pending: dict[str, Any] | None = None
        self._detected_at: float | None = None
        self._abort_reason = ""
        self._formed = False
        self.attempts = 0  # re-forms tried (the limit max_restarts counts these)
        # the death watch: a member's exit recorded by the launcher breaks this rank's collective
        self.watch_s = float(watch_s) if watch_s else 0.0
        self._watch_store: Any = None
        self._watch_stop = threading.Event()
        self._watch_thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._group_sockets: set[int] = set()  # inodes of the current process group's connections
        self._death: str | None = None  # what the watch saw, until recover() takes it

    # ----- store and process group ---------------------------------------------------------
    def _connect(self) -> Any:
        if self._store is not None:
            return self._store
        import torch.distributed as dist

        addr = os.environ.get("MASTER_ADDR")
        port = _int_env("MASTER_PORT", -1)
        if not addr or port < 0:
            if self.nproc == 1:
                self._store = dist.HashStore()
                return self._store
            raise ValueError("InProcessRestart needs MASTER_ADDR and MASTER_PORT (a launcher's store)")
        hosted = self.keeps_survivors or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
        self._store = dist.TCPStore(addr, port, is_master=not hosted and self.slot == 0,
                                    wait_for_workers=False, timeout=timedelta(seconds=self.init_timeout_s))
        return self._store

    def _form(self, gen: int) -> None:
        import torch.distributed as dist

        self.rank = self.members.index(self.slot)
        self.world_size = len(self.members)
        self.generation = gen
        os.environ["RANK"] = str(self.rank)
        os.environ["WORLD_SIZE"] = str(self.world_size)
        before = set(_socket_fds())
        dist.init_process_group(self.backend, store=dist.PrefixStore(f"{self.ns}/pg{gen}", self._store),
                                rank=self.rank, world_size=self.world_size,
                                timeout=timedelta(seconds=self.init_timeout_s if gen == 0 else self.timeout_s))
        if gen == 0:
            self._set_pg_timeout(self.timeout_s)
        with self._lock:
            # gloo connects every pair while the group is created: the sockets that appeared are its own
            self._group_sockets = set(_socket_fds()) - before
            self._formed = True

    def _set_pg_timeout(self, seconds: float) -> None:
        """Collectives after the first formation use `timeout_s` (the first one waited for every
        process to start)."""
        try:
            import torch
            import torch.distributed as dist

            pg = dist.distributed_c10d._get_default_group()
            device = torch.device("cuda" if self.backend == "nccl" else "cpu")
            pg._get_backend(device)._set_default_timeout(timedelta(seconds=seconds))
        except Exception as exc:  # noqa: BLE001 - older torch: the init timeout stays
            log.debug("preflight: could not set the process-group timeout: %s", exc)

    def _teardown(self) -> None:
        """Destroy the process group. Its sockets close only when the last reference goes (the
        failed collective's traceback held one), and that is what makes the collectives of the
        survivors still blocked on this rank raise at once instead of at their timeout. (No
        gc.collect() for a group held by a reference cycle: it costs 0.4-0.8 s on a loaded
        2-core VM; such a group leaves its peers to their timeout, which is slower, not wrong.)"""
        with self._lock:
            if not self._formed:
                return
            self._formed = False
            self._group_sockets = set()
        try:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception as exc:  # noqa: BLE001 - a broken group is expected here
            log.debug("preflight: destroying the failed process group: %s", exc)

    def _register(self) -> None:
        from preflight.runtime.watchdog import _start_ticks

        info = {"slot": self.slot, "host": _host(), "pid": os.getpid(), "start_ticks": _start_ticks()}
        self._store.set(f"{self.ns}/member/{self.slot}", json.dumps(info))
        if self.is_spare:
            self._store.set(f"{self.ns}/spare/{self.slot}", "1")

    def _member_info(self, slot: int, store: Any = None) -> dict[str, Any]:
        key = f"{self.ns}/member/{slot}"
        store = store if store is not None else self._store
        try:
            if store.check([key]):
                info = json.loads(store.get(key))
                return info if isinstance(info, dict) else {"slot": slot}
        except Exception:  # noqa: BLE001
            pass
        return {"slot": slot}

    # ----- public API --------------------------------------------------------------------
    def start(self) -> bool:
        """Form the first process group. A warm spare waits (polling the store) until it is
        called in to replace a failed rank (True, with a restore pending) or the job ends (False).
        Raises ValueError when the launch environment is unusable."""
        self._connect()
        self._register()
        self._start_watch()
        if not self.is_spare:
            self._form(0)
            return True
        return self._wait_as_spare()

    # ----- the death watch -----------------------------------------------------------------
    def _start_watch(self) -> None:
        """Under the launcher (which records every worker's exit in its store), a daemon thread
        with a connection of its own to the store looks every `watch_s` seconds whether the
        store's key count changed, and then whether a member of the current generation has an
        exit recorded: one small request per look, nothing else while no key is added."""
        if not self.watch_s or not self.keeps_survivors or self.nproc + self.nspares < 2:
            return
        addr, port = os.environ.get("MASTER_ADDR"), _int_env("MASTER_PORT", -1)
        if not addr or port < 0:
            return
        try:
            import torch.distributed as dist

            # made here, before any process group: its socket is never taken for one of the group's
            self._watch_store = dist.TCPStore(addr, port, is_master=False, wait_for_workers=False,
                                              timeout=timedelta(seconds=max(5.0, self.timeout_s)))
        except Exception as exc:  # noqa: BLE001 - without the watch a dead rank costs the timeout
            log.warning("preflight: no watch for dead ranks (%s); a dead rank is seen at the collective's timeout",
                        describe(exc))
            return
        self._watch_thread = threading.Thread(target=self._watch, name="preflight-death-watch", daemon=True)
        self._watch_thread.start()

    def _watch(self) -> None:
        seen: tuple[int, int] | None = None
        while not self._watch_stop.wait(self.watch_s):
            try:
                now = (int(self._watch_store.num_keys()), self.generation)
                if now == seen:
                    continue
                seen = now
                gen, members = self.generation, list(self.members)
                dead = self._recorded_exits(members)
                if not dead:
                    continue
                if self._watch_store.check([done_key(self.ns)]):
                    return  # the job is ending: ranks that finished leave, nothing to break
                self._on_death(gen, members, dead)
            except Exception as exc:  # noqa: BLE001 - the store went away: the launcher is ending
                log.debug("preflight: the death watch stops: %s", describe(exc))
                return

    def _recorded_exits(self, members: list[int]) -> dict[int, str]:
        out: dict[int, str] = {}
        for slot in members:
            key = exit_key(self.ns, slot)
            if slot != self.slot and self._watch_store.check([key]):
                raw = self._watch_store.get(key).decode(errors="replace").strip()
                out[slot] = exit_words(int(raw)) if raw.lstrip("-").isdigit() else f"exited ({raw})"
        return out

    def _on_death(self, gen: int, members: list[int], dead: Mapping[int, str]) -> None:
        """A member of generation `gen` is dead: the fault is detected now, its cause is that
        death, and this rank's collective is broken (gloo: its connections shut down; NCCL: the
        communicator aborted) so that recover() starts at once instead of at the timeout."""
        with self._lock:
            if gen != self.generation or not self._formed or self._death is not None:
                return
            words = []
            for slot, why in sorted(dead.items()):
                info = self._member_info(slot, self._watch_store)
                where = f" on {info['host']}" if info.get("host") else ""
                words.append(f"rank {members.index(slot)} (slot {slot}, pid {info.get('pid')}{where}) died: {why}")
            self._death = "; ".join(words)
            self._detected_at = time.monotonic()
            self._abort_reason = self._death
            sockets = set(self._group_sockets)
        log.warning("preflight: %s", self._death)
        if self.backend == "nccl":
            self.abort(self._death)
            return
        shut = shut_connections(sockets, keep_port=_int_env("MASTER_PORT", -1))
        log.debug("preflight: %d connections of generation %d shut down", shut, gen)

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        """Process groups created inside this block (`dist.new_group`, a CheckpointManager's)
        belong to the current generation: when a member dies their connections are shut down
        with the default group's, so a collective blocked on one of them fails at once too."""
        before = set(_socket_fds())
        try:
            yield
        finally:
            new = set(_socket_fds()) - before
            with self._lock:
                if self._formed:
                    self._group_sockets |= new

    def _stop_watch(self) -> None:
        self._watch_stop.set()
        t = self._watch_thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=2 * self.watch_s + 1.0)

    def _wait_as_spare(self) -> bool:
        deadline = None if self.spare_wait_s is None else time.monotonic() + self.spare_wait_s
        seen = 0
        while deadline is None or time.monotonic() < deadline:
            try:
                if self._store.check([done_key(self.ns)]):
                    return False
                if self._store.check([latest_key(self.ns)]):
                    latest = int(self._store.get(latest_key(self.ns)))
                    if latest > seen:
                        seen = latest
                        plan = json.loads(self._store.get(plan_key(self.ns, latest)))
                        if plan.get("decision") == "go" and self.slot in plan["members"]:
                            self._adopt(plan)
                            self.restarts = int(plan.get("restarts", self.restarts))  # the restart that calls it in
                            self._form(int(plan["gen"]))
                            self._pending = plan
                            return True
            except Exception as exc:  # noqa: BLE001 - the launcher (and its store) went away
                log.warning("preflight: spare %s stops waiting: %s", self.slot, describe(exc))
                return False
            time.sleep(0.05)
        return False

    def is_fault(self, exc: BaseException) -> bool:
        """Whether `exc` is a collective's failure (a peer gone or stopped, a timeout, an abort)
        that `recover` handles; anything else is the training code's own error."""
        if not isinstance(exc, Exception):
            return False
        if self._aborted_at() is not None and isinstance(exc, RuntimeError):
            return True  # abort() was called just now: what the aborted collective raised is that fault
        try:
            import torch.distributed as dist

            if isinstance(exc, dist.DistError):
                return True
        except (ImportError, AttributeError):
            pass
        if not isinstance(exc, RuntimeError):
            return False
        text = str(exc).lower()
        return any(w in text for w in _FAULT_WORDS)

    def _aborted_at(self) -> float | None:
        """When abort() was called, if recently enough to be the fault at hand (a watchdog alarm
        whose step then completed must not turn a later training error into a restart)."""
        at = self._detected_at
        if at is None or time.monotonic() - at > 2 * self.timeout_s + self.join_timeout_s:
            return None
        return at

    def abort(self, reason: str = "abort requested") -> None:
        """From any thread (the watchdog's `on_hang`): mark the fault detected now and, with
        NCCL, abort the communicator so the blocked collective returns. A gloo collective cannot
        be aborted (it ends at its timeout); never raises."""
        if self._aborted_at() is None:
            self._detected_at = time.monotonic()
            self._abort_reason = reason
        if self.backend != "nccl":
            return
        try:
            import torch.distributed as dist

            dist.distributed_c10d._abort_process_group()
        except Exception as exc:  # noqa: BLE001
            log.warning("preflight: could not abort the NCCL communicator: %s", exc)

    def restore(self, stateful: Mapping[str, Any], step: int) -> int:
        """Call once after start() with the state built (and loaded from a checkpoint, if any):
        on a spare just called in, receives the survivors' state and returns the step to run;
        otherwise returns `step` without communicating."""
        plan, self._pending = self._pending, None
        if plan is None:
            return step
        return self._restore_from(plan, stateful)

    def recover(self, exc: BaseException | None, step: int, stateful: Mapping[str, Any], *,
                last_good_at: float | None = None) -> int:
        """After a fault: agree, fence, re-form, restore; returns the step to redo. `step` is the
        number of steps whose update this rank applied; `last_good_at` (wall clock), when the
        caller knows it, the end of its last completed step: the console line's downtime counts
        from there. Raises RestartFallback (exit 75) when recovery is impossible or over its
        limits, Excluded (exit 77) on a process left out."""
        with self._lock:
            aborted = self._aborted_at()
            self._detected_at = None
            death, self._death = self._death, None
        detected = aborted if aborted is not None else time.monotonic()
        cause = describe(exc) if aborted is None else f"{self._abort_reason}; then {describe(exc)}"
        _drop_tracebacks(exc)
        self._teardown()
        gen = self.generation
        lost: list[dict[str, Any]] = []  # every rank lost since the last re-form that held
        before = list(self.members)  # the world before this restart: the failed ranks are named in it
        spares_before = set(self.spares_used)
        old_world = self.world_size
        while True:
            gen += 1
            plan = self._agree(gen, step, cause)
            if plan is None:
                if gen - self.generation > self.max_restarts + 1:
                    raise RestartFallback("no plan was agreed in any generation")
                continue  # the leader went away before writing it: the next generation
            lost.extend(_named_in(f, before, gen - 1) for f in plan.get("failed") or [])
            self._check_plan(plan)
            self._adopt(plan)
            self._fence_local(plan)
            try:
                self._form(gen)
                new_step = self._restore_from(plan, stateful)
            except Exception as again:  # noqa: BLE001 - a second fault during recovery
                if not self.is_fault(again):
                    raise
                with self._lock:
                    death, self._death = self._death, None
                    self._detected_at = None
                cause = f"{death}; then {describe(again)}" if death else describe(again)
                self._teardown()
                continue
            self.restarts = int(plan.get("restarts", self.restarts + 1))
            cause = _fault_cause(lost, cause)
            called = [s for s in self.spares_used if s not in spares_before]
            self._record(dict(plan, failed=lost, old_world=old_world, spares_called=called), detected, cause,
                         since=_downtime_start(detected, last_good_at, cause, death, self.timeout_s))
            return new_step

    def done(self) -> None:
        """End of training: releases the waiting spares and ends the death watch (ranks that
        finished leave). Never raises."""
        self._watch_stop.set()
        try:
            if self._store is not None:
                self._store.set(done_key(self.ns), "1")
        except Exception as exc:  # noqa: BLE001
            log.debug("preflight: could not mark the job done: %s", exc)

    def close(self) -> None:
        """done(), then destroy the process group."""
        self.done()
        self._stop_watch()
        self._teardown()

    # ----- agreement -----------------------------------------------------------------------
    def _agree(self, gen: int, step: int, cause: str) -> dict[str, Any] | None:
        """Join generation `gen`; the first to join decides. The plan, or None when none was
        written in time (the leader is gone)."""
        st = self._store
        try:
            st.set(f"{self.ns}/g{gen}/join/{self.slot}", json.dumps({"step": step, "cause": cause}))
            leader = st.add(f"{self.ns}/g{gen}/leader", 1) == 1
            if leader:
                plan = self._decide(gen)
                st.set(plan_key(self.ns, gen), json.dumps(plan))
                st.set(latest_key(self.ns), str(gen))
                return plan
            st.wait([plan_key(self.ns, gen)], timedelta(seconds=self.join_timeout_s + 2 * self.timeout_s + 2.0))
            plan = json.loads(st.get(plan_key(self.ns, gen)))
            return plan if isinstance(plan, dict) else None
        except RestartFallback:
            raise
        except Exception as exc:  # noqa: BLE001
            if "timeout" in str(exc).lower() or "timed out" in str(exc).lower():
                return None
            raise RestartFallback(f"the job's store cannot be reached: {describe(exc)}") from exc

    def _joined(self, gen: int) -> dict[int, dict[str, Any]]:
        out: dict[int, dict[str, Any]] = {}
        for slot in self.members:
            key = f"{self.ns}/g{gen}/join/{slot}"
            if self._store.check([key]):
                out[slot] = json.loads(self._store.get(key))
        return out

    def _gone(self, slot: int, info: Mapping[str, Any]) -> str | None:
        """Why a member that did not join is known to be out (launcher's exit record, or this
        host's /proc), or None when it may still join."""
        if self._store.check([exit_key(self.ns, slot)]):
            raw = self._store.get(exit_key(self.ns, slot)).decode(errors="replace").strip()
            return exit_words(int(raw)) if raw.lstrip("-").isdigit() else f"exited ({raw})"
        state = _same_process(info)
        if state == "gone":
            return _zombie_cause(info) or "process gone"
        if state == "stopped":
            return "process stopped (SIGSTOP or traced)"
        return None

    def _wait_joins(self, gen: int) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
        """Wait until every member joined or is known out, at most join_timeout_s."""
        infos = {s: self._member_info(s) for s in self.members}
        deadline = time.monotonic() + self.join_timeout_s
        while True:
            joined = self._joined(gen)
            out = {s: why for s in self.members if s not in joined
                   for why in [self._gone(s, infos[s])] if why is not None}
            missing = [s for s in self.members if s not in joined and s not in out]
            if not missing:
                return joined, out
            if time.monotonic() >= deadline:
                out.update({s: f"did not rejoin within {self.join_timeout_s:g} s" for s in missing})
                return joined, out
            time.sleep(POLL_S)

    def _free_spares(self) -> list[int]:
        out = []
        for slot in range(self.nproc, self.nproc + self.nspares):
            if slot in self.spares_used or slot in self.members:
                continue
            if not self._store.check([f"{self.ns}/spare/{slot}"]) or self._gone(slot, self._member_info(slot)):
                continue
            out.append(slot)
        return out

    def _decide(self, gen: int) -> dict[str, Any]:
        """The leader's plan for generation `gen` (see the module docstring)."""
        joined, out = self._wait_joins(gen)
        faults = dict(self.faults)
        failed: list[dict[str, Any]] = []
        for rank, slot in enumerate(self.members):
            if slot in out:
                faults[rank] = faults.get(rank, 0) + 1
                info = self._member_info(slot)
                failed.append({"rank": rank, "slot": slot, "host": info.get("host"), "pid": info.get("pid"),
                               "cause": out[slot], "fenced": fence(info)})
        members: list[int | None] = list(self.members)
        spares = self._free_spares()
        used = list(self.spares_used)
        for rank in [int(f["rank"]) for f in failed]:
            if faults[rank] <= self.max_faults_per_rank and spares:
                spare = spares.pop(0)
                members[rank] = spare
                used.append(spare)
                log.warning("preflight: spare slot %s takes rank %s", spare, rank)
            else:
                members[rank] = None
        new = [s for s in members if s is not None]
        source_slot = max(joined, key=lambda s: (int(joined[s].get("step", -1)), -self.members.index(s)))
        plan = {"gen": gen, "decision": "go", "reason": "", "members": new, "failed": failed, "faults": faults,
                "spares_used": used, "restarts": self.restarts + 1, "attempts": self.attempts + 1,
                "leader": self.slot,
                "old_world": len(self.members), "source": new.index(source_slot) if source_slot in new else 0,
                "step": int(joined[source_slot].get("step", 0)),
                "cause": next((j.get("cause") for j in joined.values() if j.get("cause")), "")}
        reason = self._limit_reason(plan)
        if reason:
            plan.update(decision="fallback", reason=reason)
            self._emit_fallback(plan)
        return plan

    def _limit_reason(self, plan: Mapping[str, Any]) -> str:
        if plan["attempts"] > self.max_restarts:
            return f"restart {plan['attempts']} is over max_restarts={self.max_restarts}"
        if plan["failed"] and not self.keeps_survivors:
            return ("a rank is gone and the launcher restarts every worker when one dies (torchrun): "
                    "use `python -m preflight.runtime.launch` for in-process restarts")
        if len(plan["members"]) < self.min_world_size:
            over = [f["rank"] for f in plan["failed"] if plan["faults"].get(f["rank"], 0) > self.max_faults_per_rank]
            why = f" (rank {', '.join(map(str, over))} over max_faults_per_rank={self.max_faults_per_rank})" if over else ""
            return f"{len(plan['members'])} ranks left, under min_world_size={self.min_world_size}{why}"
        return ""

    def _check_plan(self, plan: Mapping[str, Any]) -> None:
        if plan.get("decision") != "go":
            raise RestartFallback(str(plan.get("reason") or "the leader decided the fallback"))
        if self.slot not in plan.get("members", []):
            raise Excluded(f"slot {self.slot} is not a member of generation {plan.get('gen')}")

    def _adopt(self, plan: Mapping[str, Any]) -> None:
        self.members = [int(s) for s in plan["members"]]
        self.faults = {int(k): int(v) for k, v in dict(plan.get("faults") or {}).items()}
        self.spares_used = [int(s) for s in plan.get("spares_used") or []]
        self.attempts = int(plan.get("attempts", self.attempts + 1))

    def _fence_local(self, plan: Mapping[str, Any]) -> None:
        """Fence the failed members of this host the leader (on another host) could not."""
        for f in plan.get("failed") or []:
            if not f.get("fenced") and f.get("host") == _host():
                f["fenced"] = fence(self._member_info(int(f["slot"])))

    # ----- state ---------------------------------------------------------------------------
    def _restore_from(self, plan: Mapping[str, Any], stateful: Mapping[str, Any]) -> int:
        broadcast_state(stateful, src=int(plan["source"]), backend=self.backend)
        return int(plan["step"])

    # ----- records -------------------------------------------------------------------------
    def _writer(self) -> EventWriter:
        if self._events is not None:
            return self._events
        return EventWriter(self.run_dir, rank=self.rank)

    def _record(self, plan: Mapping[str, Any], detected: float, cause: str, since: float | None = None) -> None:
        """The restart's record on every rank; its event and its console line once, by the new
        rank 0. `since` (monotonic): where its downtime starts (default: the detection)."""
        now = time.monotonic()
        seconds = round(now - detected, 3)
        down = round(now - (detected if since is None else min(since, detected)), 3)
        failed = list(plan.get("failed") or [])
        rec = {"generation": self.generation, "failed_ranks": [f["rank"] for f in failed], "failed": failed,
               "cause": cause, "detect_to_reform_s": seconds, "down_s": down, "old_world_size": plan.get("old_world"),
               "new_world_size": self.world_size, "spares_used": list(plan.get("spares_used") or []),
               "spares_called": list(plan.get("spares_called") or []),
               "restarts": self.restarts, "attempts": self.attempts, "step": plan.get("step"),
               "source_rank": plan.get("source"), "rank": self.rank}
        self.last_restart = rec
        self.history.append(rec)
        if self.rank != 0:
            return
        say(console_line(rec, self.members), rank=self.rank)
        try:
            who = ", ".join(f"rank {f['rank']} (pid {f.get('pid')} on {f.get('host')}: {f['cause']}"
                            f"{', fenced' if f.get('fenced') else ''})" for f in failed) or "no rank lost"
            self._writer().emit(
                CHECK, Status.WARN,
                f"in-process restart {self.restarts} (generation {self.generation}): {who}; "
                f"re-formed with {self.world_size} ranks in {seconds:.2f} s, redoing step {plan.get('step')}",
                evidence=[f"collective fault: {cause}"] + [f"rank {f['rank']}: {f['cause']}" for f in failed],
                remedy="training goes on; inspect the failed ranks' nodes (dmesg, GPU health) and drain a node "
                       "that fails again",
                facts=rec, step=plan.get("step"))
        except Exception:  # noqa: BLE001 - a record must not stop training
            log.exception("preflight: could not record the in-process restart")

    def _emit_fallback(self, plan: Mapping[str, Any]) -> None:
        try:
            self._writer().emit(
                CHECK, Status.FAIL,
                f"in-process restart impossible: {plan['reason']}; every rank exits {EXIT_FALLBACK} for the "
                "launcher to restart the job from its checkpoint",
                evidence=[f"rank {f['rank']}: {f['cause']}" for f in plan.get("failed") or []],
                remedy="the launcher's restart (torchrun --max-restarts, preflight.runtime.launch --max-restarts, "
                       "Slurm requeue) resumes from the last checkpoint",
                facts={"generation": plan.get("gen"), "reason": plan["reason"], "restarts": plan.get("restarts"),
                       "failed_ranks": [f["rank"] for f in plan.get("failed") or []],
                       "failed": list(plan.get("failed") or []), "exit_code": EXIT_FALLBACK},
                step=plan.get("step"))
        except Exception:  # noqa: BLE001
            log.exception("preflight: could not record the fallback")


def _named_in(failed: Mapping[str, Any], before: list[int], gen: int) -> dict[str, Any]:
    """A failed member named by its rank in the world before the restart (the number the job
    knew it by); `generation_rank` keeps its number in generation `gen`, where it failed. A
    spare called in during the recovery keeps the number it was to take."""
    out = dict(failed, generation=gen, generation_rank=failed.get("rank"))
    slot = failed.get("slot")
    if isinstance(slot, int) and slot in before:
        out["rank"] = before.index(slot)
    return out


def _fault_cause(lost: list[dict[str, Any]], cause: str) -> str:
    """The restart's cause: the ranks lost and how (a death the launcher recorded, a stop, a
    rank that did not rejoin), then what the collective raised; the collective's error alone
    when no rank was lost or the death watch already named them."""
    if not lost or cause.startswith("rank "):
        return cause
    words = []
    for f in lost:
        why = str(f.get("cause") or "failed")
        verb = "died" if why.startswith(("killed", "exited", "process gone")) else "failed"
        where = f" on {f['host']}" if f.get("host") else ""
        words.append(f"rank {f.get('rank')} (slot {f.get('slot')}, pid {f.get('pid')}{where}) {verb}: {why}")
    return f"{'; '.join(words)}; then {cause}"


def _downtime_start(detected: float, last_good_at: float | None, cause: str, death: str | None,
                    timeout_s: float) -> float:
    """Where a restart's downtime starts (monotonic): the end of the last completed step when
    the caller gave it; else, for a collective that timed out (a stopped rank), the start of
    its wait, `timeout_s` before the detection; else the detection itself (a death seen by the
    watch, or a closed connection, is seen within a fraction of a second)."""
    if last_good_at is not None:
        return min(detected, time.monotonic() - max(0.0, time.time() - last_good_at))
    if death is None and "timed out" in cause.lower():
        return detected - timeout_s
    return detected


def _why(cause: str) -> str:
    """A failed rank's cause for the console: the words without the advice in brackets."""
    return cause.split(" (an outside kill")[0]


def console_line(rec: Mapping[str, Any], members: list[int]) -> str:
    """The one console line of a restart: which ranks on which nodes and why, the world before
    and after, the spare used or not, the downtime, the step redone."""
    failed = list(rec.get("failed") or [])
    who = "; ".join(f"rank {f.get('rank')}" + (f" on {f['host']}" if f.get("host") else "")
                    + f" {_why(str(f.get('cause') or 'failed'))}" + (", fenced" if f.get("fenced") else "")
                    for f in failed)
    if not who:
        who = f"no rank lost ({str(rec.get('cause') or 'a collective fault')[:160]})"
    called = [int(s) for s in rec.get("spares_called") or [] if s in members]
    if called:
        spare = ", ".join(f"spare slot {s} is rank {members.index(s)}" for s in called)
    else:
        spare = "no spare" if failed else "same ranks"
    return (f"in-process restart {rec.get('restarts')}: {who}; world {rec.get('old_world_size')} -> "
            f"{rec.get('new_world_size')} ({spare}); down {float(rec.get('down_s') or 0):.2f} s; "
            f"redoing step {rec.get('step')}")


# ----- state broadcast ----------------------------------------------------------------------------
def _split(obj: Any, tensors: list[Any]) -> Any:
    """The structure of `obj` with every tensor replaced by a marker (its index in `tensors`)."""
    import torch

    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return {"__pf_tensor__": len(tensors) - 1, "shape": list(obj.shape), "dtype": str(obj.dtype).split(".")[-1]}
    if isinstance(obj, dict):
        return {k: _split(v, tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        seq = [_split(v, tensors) for v in obj]
        return seq if isinstance(obj, list) else tuple(seq)
    return obj


def _join(obj: Any, tensors: list[Any]) -> Any:
    if isinstance(obj, dict):
        if "__pf_tensor__" in obj and "dtype" in obj:
            return tensors[int(obj["__pf_tensor__"])]
        return {k: _join(v, tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        seq = [_join(v, tensors) for v in obj]
        return seq if isinstance(obj, list) else tuple(seq)
    return obj


def _specs(obj: Any, out: list[tuple[list[int], str]]) -> None:
    if isinstance(obj, dict):
        if "__pf_tensor__" in obj and "dtype" in obj:
            out.append((list(obj["shape"]), str(obj["dtype"])))
            return
        for v in obj.values():
            _specs(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _specs(v, out)


def broadcast_state(stateful: Mapping[str, Any], src: int, backend: str = "gloo") -> None:
    """Give every rank of the current process group the state of rank `src`: each value of
    `stateful` has state_dict()/load_state_dict(); tensors travel by `broadcast`, the rest of the
    structure by `broadcast_object_list`. Collective: every rank calls it."""
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    me = dist.get_rank()
    tensors: list[Any] = []
    skeleton = _split({k: v.state_dict() for k, v in stateful.items()}, tensors) if me == src else None
    box = [skeleton]
    dist.broadcast_object_list(box, src=src)
    skeleton = box[0]
    if me == src:
        wire = [t.detach().to(device).contiguous() for t in tensors]
    else:
        specs: list[tuple[list[int], str]] = []
        _specs(skeleton, specs)
        wire = [torch.empty(shape, dtype=getattr(torch, dtype), device=device) for shape, dtype in specs]
    for t in wire:
        dist.broadcast(t, src=src)
    if me != src:
        states = _join(skeleton, wire)
        for key, obj in stateful.items():
            obj.load_state_dict(states[key])
