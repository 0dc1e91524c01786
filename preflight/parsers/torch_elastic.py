"""The torchelastic agent's own lines (torchrun, torch.distributed.launch, TorchX, Ray) as facts.

What torch/distributed/elastic prints about its worker group, in both of its logging formats
(`ERROR:torch.distributed.elastic.multiprocessing.api:...` and the glog-style
`E0213 12:07:20.086000 870572 .../api.py:869] ...`), whatever precedes it on the line (a tqdm
bar the message was glued to, a Ray actor's `(CommandActor pid=N)` prefix):

- a worker that failed: `failed (exitcode: N) local_rank: L (pid: P) of binary: B` (or
  `of fn: F (start_method: M)`), `local_rank L FAILED with no error file`;
- the worker group's state: `[role] Worker group FAILED. 3/3 attempts left; will restart worker
  group`, `exceeded max_restarts`, `Worker group in X state`;
- a healthy start and end: `Rendezvous complete for workers. Result:` with its indented
  `restart_count=`, `group_world_size=` ... lines, `Starting worker group`, `worker group
  successfully finished`, `Local worker group finished (SUCCEEDED)`, `Done waiting for other agents`;
- a death signal from outside: `Received SIGTERM death signal, shutting down workers`,
  `SignalException: Process N got signal: 15`;
- the ChildFailedError table's title (`train.py FAILED`).

Sources: pytorch/pytorch torch/distributed/elastic/agent/server/api.py, multiprocessing/api.py,
multiprocessing/errors/__init__.py (1.9 - 2.9) and pytorch/elastic torchelastic/agent/server/api.py
(before 1.9); see `preflight/parsers/pytorch.inventory.toml`. Pure: no I/O, one pass, never raises.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from preflight import lazyre

# Linux signal numbers (signal(7), x86-64 and arm64): a worker's negative exit code is the signal
# that ended it
LINUX_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS",
                 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE",
                 14: "SIGALRM", 15: "SIGTERM", 24: "SIGXCPU", 25: "SIGXFSZ"}

_FAILED = lazyre.compile(r"failed \(exitcode: (-?\d+|None)\) local_rank: (\d+) \(pid: (\d+|None)\) of "
                     r"(?:binary: (.+?)|fn: (\S+?)(?: \(start_method: (\w+)\))?)\s*$")
# an f-string before 2.2; later the format and the rank are logged as a tuple: "('local_rank %s FAILED ...', 3)"
_NO_ERROR_FILE = lazyre.compile(r"local_rank (?:(\d+)|%s) FAILED with no error file(?:[^)]*', (\d+)\))?")
_GROUP_STATE = lazyre.compile(r"\[([^\]]*)\] Worker group (FAILED|UNHEALTHY)\. (\d+)/(\d+) attempts left; "
                          r"will restart worker group")
# 1.9 - 1.10 LocalElasticAgent._monitor_workers() and torchelastic: "[role] Worker group failed" (with a
# traceback in torchelastic); agents built on it: "[role] Worker group failed; N restarts remaining"
_GROUP_FAILED = lazyre.compile(r"\[([^\]]*)\] Worker group failed(?:; (\d+) restarts remaining)?\s*$")
_EXCEEDED = lazyre.compile(r"\[([^\]]*)\] exceeded max_restarts=(\d+)|\[([^\]]*)\] Worker group in (\w+) state")
_RDZV = lazyre.compile(r"\[([^\]]*)\] Rendezvous complete for workers\.(?:\s*Result:)?\s*$")
_RESULT = lazyre.compile(r"(?:^|\s)(restart_count|master_addr|master_port|group_rank|group_world_size|local_ranks|"
                     r"role_ranks|global_ranks|role_world_sizes|global_world_sizes|workers)=(.*?)\s*$")
_STARTING = lazyre.compile(r"\[([^\]]*)\] Starting worker group\s*$")
_SUCCEEDED = lazyre.compile(r"\[([^\]]*)\] worker group successfully finished\.|"
                        r"Local worker group finished \((?:WorkerState\.)?(\w+)\)\.")
_BARRIER = lazyre.compile(r"Done waiting for other agents\. Elapsed")
_SIGNALLED = lazyre.compile(r"Received (?:Signals\.)?(\w+) death signal, shutting down workers|"
                        r"SignalException: Process (\d+) got signal: (?:Signals\.)?(\w+)|"
                        r"Got termination signal: (?:Signals\.)?(\w+)")
_TITLE = lazyre.compile(r"^\s*(\S.*) FAILED\s*$")
_BORDER = lazyre.compile(r"^\s*(?:={8,}|\*{8,})\s*$")
_RESULT_SPAN = 14  # lines after "Rendezvous complete" that may hold its Result (10 keys, a Ray prefix, blanks)

# the agent's error level in either logging format: `ERROR:torch.distributed.elastic.<module>:` (logging's
# default format, before 2.2) and glog-style `E1125 10:11:12.123000 123 torch/distributed/elastic/<file>.py:N] `
_ERROR_LINE = lazyre.compile(r"(?:ERROR|CRITICAL):torch\.distributed\.elastic[\w.]*:|"
                         r"\b[EF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+\s+\S*torch/distributed/elastic/\S+\.py:\d+\]")
NEEDLES = ("ERROR:torch.distributed.elastic", "CRITICAL:torch.distributed.elastic", "torch/distributed/elastic/",
           "failed (exitcode:", "FAILED with no error file", "attempts left; will restart", "exceeded max_restarts",
           "] Worker group failed",
           "Worker group in ", "Rendezvous complete for workers", "Starting worker group",
           "worker group successfully finished", "Local worker group finished", "Done waiting for other agents",
           "death signal, shutting down workers", "SignalException: Process")
DETECT = lazyre.compile(_ERROR_LINE.pattern + r"|failed \(exitcode: (?:-?\d+|None)\) local_rank: \d+ \(pid: |FAILED with no error file|"
                    r"Worker group (?:FAILED|UNHEALTHY)\. \d+/\d+ attempts left|exceeded max_restarts=\d+|"
                    r"\] Worker group failed(?:; \d+ restarts remaining)?\s*$|"
                    r"Worker group in \w+ state|Rendezvous complete for workers\.|\] Starting worker group|"
                    r"worker group successfully finished\.|Local worker group finished \(|"
                    r"Done waiting for other agents\.|death signal, shutting down workers|"
                    r"SignalException: Process \d+ got signal")


def signal_of(exitcode: int | None) -> str:
    """The signal a negative exit code stands for ("" for an exit code)."""
    if exitcode is None or exitcode >= 0:
        return ""
    return LINUX_SIGNALS.get(-exitcode, f"signal {-exitcode}")


def _int(v: str | None) -> int | None:
    return int(v) if v is not None and re.fullmatch(r"-?\d+", v) else None


@dataclass
class AgentFailure:
    """A worker the agent saw fail."""

    local_rank: int
    exitcode: int | None
    pid: int | None
    signal: str  # the signal of a negative exit code
    binary: str  # the binary, or the function with its start method
    line: str
    index: int  # line index in the log (order of events)


@dataclass
class AgentEvent:
    """A state of the worker group the agent logged.

    kind: rendezvous, started, failed (the group failed), restart (failed, will restart), exceeded
    (failed, no restart left),
    succeeded (the group finished), barrier (the agents' exit barrier passed, whatever their
    state), signalled (a death signal)."""

    kind: str
    role: str = ""
    state: str = ""  # FAILED / UNHEALTHY, or the signal's name
    left: int | None = None
    max_restarts: int | None = None
    result: dict[str, str] = field(default_factory=dict)  # Rendezvous complete: restart_count=, ...
    line: str = ""
    index: int = 0


@dataclass
class Elastic:
    failures: list[AgentFailure] = field(default_factory=list)
    events: list[AgentEvent] = field(default_factory=list)
    title: str = ""  # "train.py FAILED": the entrypoint of a ChildFailedError table
    unread: list[str] = field(default_factory=list)  # the agent's ERROR lines no rule here reads

    def kind(self, k: str) -> list[AgentEvent]:
        return [e for e in self.events if e.kind == k]

    @property
    def recognised(self) -> bool:
        return bool(self.failures or self.events or self.unread)

    def to_dict(self) -> dict[str, Any]:
        last = self.kind("rendezvous")[-1].result if self.kind("rendezvous") else {}
        return {"failures": [{"local_rank": x.local_rank, "exitcode": x.exitcode, "pid": x.pid, "signal": x.signal or None,
                              "binary": x.binary} for x in self.failures],
                "events": [e.kind for e in self.events], "rendezvous": last or None, "title": self.title or None}


@dataclass
class _Reader:
    out: Elastic = field(default_factory=Elastic)
    result_until: int = -1  # the last line index that may hold the current rendezvous's Result
    prev_border: bool = False

    def feed(self, i: int, text: str) -> None:
        if i <= self.result_until and self._result(text):
            return
        if self.prev_border and not self.out.title:
            t = _TITLE.match(text)
            self.out.title = t.group(1).strip() if t else ""
        self.prev_border = bool(_BORDER.match(text))
        for read in (self._failed, self._group, self._healthy, self._signalled):
            if read(i, text):
                return
        if _ERROR_LINE.search(text):
            self.out.unread.append(text.strip())

    def _result(self, text: str) -> bool:
        m = _RESULT.search(text)
        if not m:
            return False
        self.out.kind("rendezvous")[-1].result[m.group(1)] = m.group(2).strip()
        return True

    def _failed(self, i: int, text: str) -> bool:
        m = _FAILED.search(text)
        if m:
            code = _int(m.group(1))
            binary = m.group(4) or (f"{m.group(5)} (start_method {m.group(6)})" if m.group(6) else m.group(5))
            self.out.failures.append(AgentFailure(int(m.group(2)), code, _int(m.group(3)), signal_of(code),
                                                  binary.strip(), text.strip(), i))
            return True
        n = _NO_ERROR_FILE.search(text)
        rank = _int(n.group(1) or n.group(2)) if n else None
        if rank is not None and not self.out.failures:  # the agent's own line, when there, says more
            self.out.failures.append(AgentFailure(rank, None, None, "", "", text.strip(), i))
        return n is not None

    def _group(self, i: int, text: str) -> bool:
        m = _GROUP_STATE.search(text)
        if m:
            self.out.events.append(AgentEvent("restart", m.group(1), m.group(2), int(m.group(3)), int(m.group(4)),
                                              line=text.strip(), index=i))
            return True
        g = _GROUP_FAILED.search(text)
        if g:
            kind = "restart" if g.group(2) else "failed"
            self.out.events.append(AgentEvent(kind, g.group(1), "FAILED", _int(g.group(2)), line=text.strip(), index=i))
            return True
        x = _EXCEEDED.search(text)
        if x:
            limit = _int(x.group(2))
            self.out.events.append(AgentEvent("exceeded", x.group(1) or x.group(3) or "", x.group(4) or "FAILED",
                                              0 if limit is not None else None, limit, line=text.strip(), index=i))
            return True
        return False

    def _healthy(self, i: int, text: str) -> bool:
        r = _RDZV.search(text)
        if r:
            self.out.events.append(AgentEvent("rendezvous", r.group(1), line=text.strip(), index=i))
            self.result_until = i + _RESULT_SPAN
            return True
        s = _STARTING.search(text)
        if s:
            self.out.events.append(AgentEvent("started", s.group(1), line=text.strip(), index=i))
            return True
        if _BARRIER.search(text):
            self.out.events.append(AgentEvent("barrier", line=text.strip(), index=i))
            return True
        d = _SUCCEEDED.search(text)
        if d is None:
            return False
        state = d.group(2) or "SUCCEEDED"
        kind = "succeeded" if state == "SUCCEEDED" else "exceeded"
        self.out.events.append(AgentEvent(kind, d.group(1) or "", state, line=text.strip(), index=i))
        return True

    def _signalled(self, i: int, text: str) -> bool:
        m = _SIGNALLED.search(text)
        if m is None:
            return False
        sig = m.group(1) or m.group(3) or m.group(4)
        name = LINUX_SIGNALS.get(int(sig), sig) if sig.isdigit() else sig
        if not any(e.kind == "signalled" and e.state == name for e in self.out.events):
            self.out.events.append(AgentEvent("signalled", state=name, line=text.strip(), index=i))
        return True


def parse_elastic(lines: Iterable[str]) -> Elastic:
    """The agent's facts of a log's lines (framing peeled)."""
    reader = _Reader()
    for i, text in enumerate(lines):
        reader.feed(i, text)
    return reader.out


__all__ = ["DETECT", "LINUX_SIGNALS", "NEEDLES", "AgentEvent", "AgentFailure", "Elastic", "parse_elastic",
           "signal_of"]
