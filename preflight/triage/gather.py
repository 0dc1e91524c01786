"""The triage gatherers: the run's files and its processes, read on each node.

Standard library only, and no import of the rest of preflight: `preflight.triage.collect` ships
this file's text verbatim as a probe command, `python3 -c <this text> files|procs ARGS...`, to
nodes that have nothing but `python3`; where preflight is installed on the node,
`python -m preflight.triage.gather files|procs ARGS...` is the same. Each prints one JSON
document that states its `protocol`:

    files MODE TARGET PER_FILE TOTAL MAX_FILES
        MODE `dir`: the files of folder TARGET (two levels down, no dot files); `glob`: the
        files the pattern TARGET matches. Base64 content, bounded per file (the tail of a long
        log) and in total, structured small files first.
    procs PATTERN SPY_TIMEOUT DEADLINE MAX_PROCS
        the python processes whose command line matches the regex PATTERN: pid, state (`T` is
        stopped), RANK, and a `py-spy dump` of each where py-spy is installed, all within
        DEADLINE seconds.
"""

from __future__ import annotations

import base64
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

PROTOCOL = 1  # the documents' format; a document without "protocol" is of protocol 1
# file name prefixes in the order they are kept when the total runs out (records first)
_FIRST = ("crash-", "hang-", "fr-", "heartbeat-", "events-", "stacks-", "nccl_trace")
_LOG_SUFFIXES = (".log", ".txt", ".out", ".err")
_SPY_KEPT = 200_000  # characters of a py-spy dump kept (its end)
_USAGE = ("usage: gather files dir|glob TARGET PER_FILE TOTAL MAX_FILES\n"
          "       gather procs PATTERN SPY_TIMEOUT DEADLINE MAX_PROCS\n")


# ----- files ----------------------------------------------------------------------------------


def _folder_files(target: str) -> list[str]:
    """The files of a folder and of its sub-folders two levels down, dot names left out."""
    paths = []
    for root, dirs, names in os.walk(target):
        if root[len(target):].count(os.sep) >= 2:
            dirs[:] = []
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        paths += [os.path.join(root, n) for n in names if not n.startswith(".")]
    return paths


def _priority(path: str) -> tuple[int, str]:
    """Records (crash, hang, flight recorder, heartbeat...) first, then logs, then the rest."""
    name = os.path.basename(path)
    for i, prefix in enumerate(_FIRST):
        if name.startswith(prefix):
            return i, name
    return (8 if name.endswith(_LOG_SUFFIXES) else 9), name


def _read_tail(path: str, limit: int) -> tuple[bytes, int, float]:
    """(the last `limit` bytes, the size, the mtime) of a file; OSError when unreadable."""
    st = os.stat(path)
    keep = min(st.st_size, limit)
    if keep <= 0:
        return b"", st.st_size, st.st_mtime
    with open(path, "rb") as fh:
        if keep < st.st_size:
            fh.seek(st.st_size - keep)
        return fh.read(keep), st.st_size, st.st_mtime


def gather_files(mode: str, target: str, per_file: int, total: int, max_files: int) -> dict[str, Any]:
    """The document of a folder's files (`mode` "dir") or of a glob's files ("glob")."""
    doc: dict[str, Any] = {"protocol": PROTOCOL, "mode": mode, "target": target, "exists": False,
                           "files": [], "skipped": []}
    if mode == "dir":
        doc["exists"] = os.path.isdir(target)
        paths = _folder_files(target) if doc["exists"] else []
    else:
        paths = sorted(glob.glob(target, recursive=True))
        doc["exists"] = bool(paths)
    used = 0
    for path in sorted(paths, key=_priority):
        if len(doc["files"]) >= max_files:
            doc["skipped"].append({"path": path, "reason": "over the file-count limit"})
            continue
        if not os.path.isfile(path):
            doc["skipped"].append({"path": path, "reason": "not a regular file"})
            continue
        try:
            data, size, mtime = _read_tail(path, min(per_file, max(0, total - used)))
        except OSError as exc:
            doc["skipped"].append({"path": path, "reason": exc.strerror or str(exc), "error": True})
            continue
        if not data and size > 0:
            doc["skipped"].append({"path": path, "reason": "over the total size limit"})
            continue
        used += len(data)
        doc["files"].append({"name": os.path.relpath(path, target) if mode == "dir" else path, "size": size,
                             "mtime": mtime, "truncated": len(data) < size,
                             "b64": base64.b64encode(data).decode()})
    return doc


# ----- processes ------------------------------------------------------------------------------


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat after the command name: state, ppid, ..."""
    return _read(f"/proc/{pid}/stat").decode("utf-8", "replace").rsplit(")", 1)[1].split()


def _lineage(pid: int) -> set[int]:
    """`pid` and its ancestors: the gatherer's own chain is never a training process."""
    seen = set()
    for _ in range(64):
        seen.add(pid)
        try:
            pid = int(_stat_fields(pid)[1])
        except (OSError, IndexError, ValueError):
            break
        if pid <= 1:
            break
    return seen


def _rank(pid: int) -> int | None:
    """The RANK in a process's environment (None when unset or unreadable)."""
    try:
        env = _read(f"/proc/{pid}/environ").split(b"\0")
    except OSError:
        return None
    rank = None
    for kv in env:
        if kv.startswith(b"RANK="):
            try:
                rank = int(kv[5:])
            except ValueError:
                rank = None
    return rank


def process_info(pid: int, pattern: re.Pattern[str]) -> dict[str, Any] | None:
    """A python process whose command line matches `pattern`, else None (or gone)."""
    try:
        argv = [a.decode("utf-8", "replace") for a in _read(f"/proc/{pid}/cmdline").split(b"\0") if a]
        if not argv or "python" not in os.path.basename(argv[0]):
            return None
        cmd = " ".join(argv)
        if not pattern.search(cmd):
            return None
        state = _stat_fields(pid)[0]
    except (OSError, IndexError):
        return None
    return {"pid": pid, "state": state, "rank": _rank(pid), "cmdline": cmd[:500]}


def _spy(spy: str, proc: dict[str, Any], timeout: float) -> None:
    """Add a py-spy dump of the process (or why there is none) to its record."""
    try:
        r = subprocess.run([spy, "dump", "--pid", str(proc["pid"])], capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        proc["py_spy_error"] = "py-spy dump timed out"
        return
    except OSError as exc:
        proc["py_spy_error"] = str(exc)
        return
    proc["py_spy"] = r.stdout[-_SPY_KEPT:]
    if r.returncode != 0:
        proc["py_spy_error"] = (r.stderr or "").strip()[-500:]


def gather_procs(pattern: str, spy_timeout: float, deadline_s: float, max_procs: int) -> dict[str, Any]:
    """The document of the matching python processes, ranks first, with their stacks."""
    until = time.monotonic() + deadline_s
    regex = re.compile(pattern)
    mine = _lineage(os.getpid())
    procs = [info for info in (process_info(int(e), regex) for e in os.listdir("/proc")
                               if e.isdigit() and int(e) not in mine) if info is not None]
    procs.sort(key=lambda p: (p["rank"] if p["rank"] is not None else 1 << 30, p["pid"]))
    spy = shutil.which("py-spy")
    doc: dict[str, Any] = {"protocol": PROTOCOL, "py_spy": spy or "", "processes": procs[:max_procs]}
    for proc in doc["processes"] if spy else []:
        left = until - time.monotonic()
        if left <= 1:
            proc["py_spy_error"] = "collection deadline reached"
            continue
        _spy(str(spy), proc, min(spy_timeout, left))
    return doc


# ----- the command line -----------------------------------------------------------------------


def gather(argv: Sequence[str]) -> dict[str, Any]:
    """The document the arguments ask for; ValueError (or re.error) for arguments that don't fit."""
    if len(argv) == 6 and argv[0] == "files" and argv[1] in ("dir", "glob"):
        return gather_files(argv[1], argv[2], int(argv[3]), int(argv[4]), int(argv[5]))
    if len(argv) == 5 and argv[0] == "procs":
        return gather_procs(argv[1], float(argv[2]), float(argv[3]), int(argv[4]))
    raise ValueError(f"unknown arguments {' '.join(argv)[:200]!r}")


def main(argv: Sequence[str]) -> int:
    try:
        doc = gather(argv)
    except (ValueError, re.error) as exc:
        sys.stderr.write(f"preflight gather: {exc}\n{_USAGE}")
        return 2
    sys.stdout.write(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
