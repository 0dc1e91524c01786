"""hang.watchdog, the launcher's part: what torchrun / torchelastic and multiprocessing spawn say
about the workers (`preflight.parsers.torch_log`, `preflight.parsers.torch_elastic`).

A worker that failed ends the job (FAIL), named by the launcher's record: its rank and host from
the ChildFailedError table, or the agent's own line (local rank, pid, exit code, the binary). A
negative exit code is the signal that ended the worker, and the signal says who did: SIGKILL is
the OOM killer's signature, SIGABRT an abort (PyTorch's watchdog after a timeout, a C++
exception). An elastic agent that restarted the worker group, which then started again, recovered
(WARN: a worker failed); a healthy start or finish is a PASS.
"""

from __future__ import annotations

from typing import Any

from preflight.findings import Findings
from preflight.parsers.torch_elastic import AgentFailure, Elastic
from preflight.parsers.torch_log import ChildFailure, Crash, TorchLog

_MSG = 160  # pragma: no mutate - characters of a message quoted in a summary, a display limit
_QUOTE = 6  # pragma: no mutate - lines quoted per finding, a display limit
_FEW = 3  # pragma: no mutate - lines quoted for a secondary part of a finding, a display limit

# what ended a worker, by the signal of its negative exit code (signal(7); the causes seen on GPU clusters)
MEANING = {
    "SIGKILL": "the OOM killer's signature (host memory ran out), or a kill -9 from the scheduler",
    "SIGABRT": "an abort: PyTorch's watchdog after a collective timeout or NCCL error, or a C++ exception",
    "SIGSEGV": "a segmentation fault in native code (an extension, a library, the driver)",
    "SIGBUS": "a bus error, most often /dev/shm too small for the data loader's shared memory",
    "SIGTERM": "terminated from outside (the scheduler's time limit, preemption, scancel, or the launcher)",
    "SIGINT": "interrupted (Ctrl-C)",
    "SIGHUP": "the session that started it ended",
    "SIGILL": "an illegal instruction (a binary built for another CPU)",
    "SIGFPE": "an arithmetic fault in native code",
}
REMEDY_FAILED = ("the job failed on this rank first: read its log for the first error (traceback, NCCL/CUDA error, "
                 "OOM); a negative exit code is the signal that killed it (-9 SIGKILL: the OOM killer, look for "
                 "'Out of memory: Killed process' in the node's kernel log, or the scheduler; -6 SIGABRT: the NCCL "
                 "watchdog or an abort; -7 SIGBUS: /dev/shm too small; -11 SIGSEGV: native code)")
REMEDY_RESTARTED = ("a worker failed and the elastic agent restarted the worker group: read the failed worker's log "
                    "for its first error; a failure that repeats on every restart (same rank, same exit code) is a "
                    "bug or a bad node, not a transient fault")
REMEDY_SIGNALLED = ("the launcher was stopped from outside: read the scheduler's record of the job (sacct -j <job> "
                    "-o State,ExitCode,Reason: TIMEOUT, PREEMPTED, CANCELLED, NODE_FAIL) and, under srun, the other "
                    "tasks' logs (srun ends a step's tasks when one fails)")


def _why(exitcode: int | None, signal: str) -> str:
    """ ", the OOM killer's signature ..." for a signal; ", an uncaught ..." for exit code 1."""
    if signal:
        return f", {MEANING[signal]}" if signal in MEANING else ""
    if exitcode == 1:
        return ", an uncaught exception in the worker (its traceback is in the worker's own output)"
    return ""


def _exit_text(exitcode: int | None, signal: str) -> str:
    return f"exitcode {exitcode if exitcode is not None else 'unknown'}" + (f" ({signal})" if signal else "")


def _root(tl: TorchLog) -> ChildFailure | None:
    fails = tl.rank_log.failures
    return next((x for x in fails if x.root_cause), fails[0] if fails else None)


_FAILED_GROUP = ("failed", "restart", "exceeded")  # the agent's events of a worker group that failed
_WRAPPERS = ("ChildFailedError", "ProcessRaisedException")  # launcher exceptions that wrap the worker's own


def _crash(tl: TorchLog) -> Crash | None:
    return next((c for c in tl.rank_log.crashes if not c.secondary and not c.exception.endswith(_WRAPPERS)), None)


def _child_failed(tl: TorchLog) -> Crash | None:
    return next((c for c in tl.rank_log.crashes if c.exception.endswith("ChildFailedError")), None)


def _table_failure(root: ChildFailure, crash: Crash | None, f: Findings) -> None:
    cause = f": {crash.exception}: {crash.message[:_MSG]}" if crash is not None else _why(root.exitcode, root.signal)
    f.add("hang.watchdog/worker-failed", f"torchrun: rank {root.rank} on {root.host or 'its host'} failed with "
          f"{_exit_text(root.exitcode, root.signal)}{cause}",
          root.lines[:_QUOTE] + (crash.lines[-_FEW:] if crash else []), REMEDY_FAILED,
          proof=(f"{crash.exception}:" if crash else "", "exitcode"))  # the error, else the exit code


def _who(x: AgentFailure, el: Elastic) -> str:
    pid = f" (pid {x.pid})" if x.pid is not None else ""
    script = el.title if el.title and el.title not in x.binary else ""
    binary = f" of {x.binary}" if x.binary else ""
    return f"local rank {x.local_rank}{pid}{binary}" + (f" running {script}" if script else "")


def _restart_text(el: Elastic) -> str:
    r = el.kind("restart")
    if r:
        left = f"{r[-1].left}/{r[-1].max_restarts}" if r[-1].max_restarts is not None else f"{r[-1].left}"
        return f"; the worker group {r[-1].state}, the agent restarts it ({left} attempts left)"
    x = el.kind("exceeded")
    if x:
        limit = f" (max_restarts={x[-1].max_restarts})" if x[-1].max_restarts is not None else ""
        return f"; the worker group {x[-1].state} with no restart left{limit}"
    return ""


def _last_failure(el: Elastic) -> int:
    """The line index of the last failure the agent logged (-1: none)."""
    marks = [x.index for x in el.failures] + [e.index for e in el.events if e.kind in _FAILED_GROUP]
    return max(marks, default=-1)


def _recovered(el: Elastic) -> str:
    """How the worker group came back after the last failure ("" when it did not)."""
    last = _last_failure(el)
    after = [e for e in el.events if e.index > last and e.kind in ("started", "succeeded")]
    if last < 0 or not after:
        return ""
    count = next((e.result.get("restart_count") for e in reversed(el.kind("rendezvous")) if e.index > last), None)
    again = "started again" + (f" (restart_count={count})" if count else "")
    return again + (" and finished successfully" if after[-1].kind == "succeeded" else "")


def _agent_failure(tl: TorchLog, crash: Crash | None, f: Findings) -> bool:
    """The agent's own record of a failed worker, or of a failed worker group."""
    el = tl.elastic
    if not (el.failures or any(e.kind in _FAILED_GROUP for e in el.events)):
        return False
    if el.failures:
        x = el.failures[0]
        what = f"{_who(x, el)} failed with {_exit_text(x.exitcode, x.signal)}"
        cause = f": {crash.exception}: {crash.message[:_MSG]}" if crash is not None else _why(x.exitcode, x.signal)
        summary = f"torchrun: {what}{cause}"
    else:
        summary = "torchelastic: a worker failed" + (f": {crash.exception}: {crash.message[:_MSG]}" if crash else "")
    ev = [x.line for x in el.failures[:_FEW]] + [e.line for e in el.events if e.kind in _FAILED_GROUP][:_FEW]
    ev += crash.lines[-_FEW:] if crash else []
    again = "" if _child_failed(tl) else _recovered(el)
    if again:
        f.add("hang.watchdog/worker-restarted", f"{summary}; the agent restarted the worker group, which {again}",
              ev + [e.line for e in el.events if e.kind in ("started", "succeeded")][-_FEW:], REMEDY_RESTARTED)
        return True
    f.add("hang.watchdog/worker-failed", summary + _restart_text(el), ev, REMEDY_FAILED)
    return True


def _launcher_only(tl: TorchLog, crash: Crash | None, f: Findings) -> None:
    """No failure record: a ChildFailedError raised, a process that ended, an earlier restart, a
    death signal."""
    el, child = tl.elastic, _child_failed(tl)
    ended = [x for x in tl.exits if x.signal or x.code]
    cause = f": {crash.exception}: {crash.message[:_MSG]}" if crash is not None else ""
    if child is not None:
        title = f" ({el.title})" if el.title else ""
        f.add("hang.watchdog/worker-failed", f"torchrun: a worker failed{title} (ChildFailedError); its failure "
              "record is not in the capture", child.lines[-_QUOTE:], REMEDY_FAILED)
    elif ended:
        x = ended[0]
        how = ("raised an exception" if x.raised else f"terminated with signal {x.signal}" if x.signal
               else f"terminated with exit code {x.code}")
        f.add("hang.watchdog/worker-failed", f"process {x.process} {how}{cause}",
              [y.line for y in ended[:_FEW]] + (crash.lines[-_FEW:] if crash else []),
              "read that process's log for the error that ended it")
    elif el.kind("signalled"):
        sig = el.kind("signalled")[0]
        f.add("hang.watchdog/agent-signalled", f"torchrun received {sig.state} and shut its workers down: stopped "
              "from outside (the scheduler's time limit, preemption or scancel, or srun ending the step after "
              "another task failed)", [e.line for e in el.kind("signalled")][:_FEW], REMEDY_SIGNALLED)
    else:
        _earlier_restarts(el, f)


def _earlier_restarts(el: Elastic, f: Findings) -> None:
    counts = [(e, e.result.get("restart_count", "")) for e in el.kind("rendezvous")]
    restarted = [(e, c) for e, c in counts if c.isdigit() and int(c) > 0]
    if restarted:
        e, c = restarted[-1]
        f.add("hang.watchdog/elastic-restarted", f"torchelastic: the worker group runs after {c} restart(s) "
              f"(restart_count={c}): workers failed before this capture starts", [e.line, f"restart_count={c}"],
              REMEDY_RESTARTED, proof="restart_count=")


def grade_workers(tl: TorchLog, f: Findings, facts: dict[str, Any]) -> None:
    """torchrun's failure table, the agent's own lines, multiprocessing's exits, a traceback: the
    workers' fate, as a finding when no collective failure says more (facts in any case)."""
    root = _root(tl)
    if root is not None:
        facts["torchrun"] = {"rank": root.rank, "host": root.host or None, "exitcode": root.exitcode,
                             "signal": root.signal or None}
    if tl.elastic.recognised:
        facts["elastic"] = tl.elastic.to_dict()
    said = bool(f)  # a collective's failure already says more than the workers' fate
    f.unread("hang.watchdog", "torchelastic", tl.elastic.unread,
             "read the agent's log around these lines (torchrun's own output, or the launcher's stderr); torchelastic "
             "logged them as errors")
    if said:
        return
    crash = _crash(tl)
    if root is not None:
        _table_failure(root, crash, f)
    elif not _agent_failure(tl, crash, f):
        _launcher_only(tl, crash, f)


def elastic_ok_summary(el: Elastic) -> str:
    """A healthy start or finish of the worker group, in words ("" when the agent logged neither)."""
    if el.kind("succeeded") or el.kind("barrier"):
        return "torchelastic: the worker group finished successfully, no failure in the log"
    if not (el.kind("started") or el.kind("rendezvous")):
        return ""
    res = el.kind("rendezvous")[-1].result if el.kind("rendezvous") else {}
    size = ", ".join(f"{k} {res[k]}" for k in ("group_world_size", "group_rank", "restart_count") if k in res)
    return "torchelastic: workers started" + (f" ({size})" if size else "") + ", no failure in the log"


__all__ = ["MEANING", "elastic_ok_summary", "grade_workers"]
