"""Runtime events: JSON lines in the run directory, in the project's result schema.

Every runtime component (preemption, watchdog, checkpoints, stragglers, loss guard) writes
through an `EventWriter` to `<run_dir>/events-rank<R>.jsonl`, one object per line:
`{check, node, status, summary, evidence, remedy, facts, source, time, rank, step}`.
Writing never raises into the training loop: a failed write is counted and logged.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from preflight.model import Result, Status

log = logging.getLogger("preflight.runtime")


def env_rank() -> int:
    for key in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"):
        if os.environ.get(key, "").isdigit():
            return int(os.environ[key])
    return 0


class EventWriter:
    """Appends result-schema events for one rank; thread-safe, line-atomic, never raises."""

    def __init__(self, run_dir: str | os.PathLike[str], rank: int | None = None, node: str | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.rank = env_rank() if rank is None else rank
        self.node = node or socket.gethostname().split(".")[0]
        self.path = self.run_dir / f"events-rank{self.rank}.jsonl"
        self.failed_writes = 0
        self._lock = threading.Lock()

    def emit(self, check: str, status: Status | str, summary: str, *, evidence: list[str] | None = None,
             remedy: str = "", facts: dict[str, Any] | None = None, step: int | None = None,
             source: str = "runtime") -> dict[str, Any]:
        rec = Result(check=check, node=self.node, status=Status(status), summary=summary,
                     evidence=list(evidence or []), remedy=remedy, facts=dict(facts or {}),
                     source=source).to_dict()
        rec.update({"time": time.time(), "rank": self.rank, "step": step})
        line = json.dumps(rec, default=str) + "\n"
        try:
            with self._lock:
                self.run_dir.mkdir(parents=True, exist_ok=True)
                # O_APPEND writes of one line are not interleaved with other writers of the file
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                try:
                    os.write(fd, line.encode())
                finally:
                    os.close(fd)
        except OSError as exc:
            self.failed_writes += 1
            log.warning("preflight: could not write event to %s: %s", self.path, exc)
        return rec


def emit_guarded(events: EventWriter | None, check: str, status: Status | str, summary: str, *, what: str,
                 log_pass: bool = False, step: int | None = None, evidence: list[str] | None = None,
                 remedy: str = "", facts: dict[str, Any] | None = None) -> None:
    """A runtime component's event: logged unless it is a pass (or `log_pass`), written when there
    is an event writer, and a failure to write it only logged (`what` names the component)."""
    if log_pass or Status(status) is not Status.PASS:
        log.warning("preflight: %s", summary)
    if events is None:
        return
    try:
        events.emit(check, status, summary, evidence=evidence, remedy=remedy, facts=facts, step=step)
    except Exception as exc:  # noqa: BLE001 - an event never breaks what it reports on
        log.warning("preflight: %s event not written: %s", what, exc)


def read_events(run_dir: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Every event of every rank in a run directory (read by `preflight.runtime.story`, the run
    directory's one reader); torn or garbage lines are skipped."""
    from preflight.runtime.story import load_events

    for path in sorted(Path(run_dir).glob("events-rank*.jsonl")):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        yield from load_events(data)[0]


def say(text: str, *, rank: int | None = None, stream: Any = None) -> str:
    """One console line where the job owner looks (the rank's stderr, which torchrun, srun and
    the launcher prefix and collect): `preflight[rank R]: text`. The runtime says each start,
    resume, restart and preemption once, here. Returns the line; never raises."""
    who = f"[rank {rank}]" if rank is not None else ""
    line = f"preflight{who}: {' '.join(str(text).split())}"
    try:
        out = stream if stream is not None else sys.stderr
        out.write(line + "\n")
        out.flush()
    except Exception:  # noqa: BLE001 - a closed stream never breaks training
        pass
    return line


def flush_std_streams() -> None:
    """Flush stdout and stderr before the process ends without Python's own shutdown
    (`os._exit`, a re-raised fatal signal); a broken stream is ignored."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
