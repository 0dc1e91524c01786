"""Processes a test run leaves behind: find them, name them, end them.

A process belongs to this test session when one of these ties holds:
- its environment carries `PREFLIGHT_TEST_SESSION=<this session's id>` (every child of the
  pytest process inherits it: fake tools, torchrun and its workers, munged/slurmd/slurmctld);
- it lives in a network namespace that a test cluster of this session created (what sshd
  starts for a session does not inherit our environment, but it does inherit the namespace),
  and it started before that namespace was deleted (the kernel may reuse a freed namespace's
  number for another run's namespace later);
- its working folder or one of its open files lies under this session's temporary folder
  (e.g. an sshd session child whose stderr is a node's sshd.log);
- its parent is such a process.

`end()` stops processes: SIGTERM, a bounded grace, SIGKILL, then waits (bounded) until they are
gone. Used by the test cluster's teardown (everything in a node's namespace) and by the leak
check of tests/conftest.py.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

MARK = "PREFLIGHT_TEST_SESSION"
HZ = os.sysconf("SC_CLK_TCK")
# netns inode -> (name, boot time in ticks when it was deleted, or None while it exists)
NAMESPACES: dict[int, tuple[str, float | None]] = {}


def boot_ticks() -> float:
    """Now, in the clock of /proc/PID/stat's start time (ticks since boot)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) * HZ


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    start: int  # ticks since boot
    state: str

    @property
    def key(self) -> tuple[int, int]:
        return (self.pid, self.start)


def _stat(pid: int) -> Proc | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        rest = text.rsplit(")", 1)[1].split()
        return Proc(pid=pid, ppid=int(rest[1]), start=int(rest[19]), state=rest[0])
    except (OSError, ValueError, IndexError):
        return None


def processes() -> dict[int, Proc]:
    """Every process of this machine (zombies left out: they hold nothing and are reaped)."""
    out: dict[int, Proc] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            p = _stat(int(entry.name))
            if p is not None and p.state not in ("Z", "X"):
                out[p.pid] = p
    return out


def snapshot() -> set[tuple[int, int]]:
    """The processes alive now, as (pid, start time) keys (a reused pid is a new key)."""
    return {p.key for p in processes().values()}


def netns_inode(pid: int | str) -> int | None:
    try:
        link = os.readlink(f"/proc/{pid}/ns/net")  # net:[4026532374]
        return int(link.split("[", 1)[1].rstrip("]"))
    except (OSError, ValueError, IndexError):
        return None


def named_netns_inode(name: str) -> int | None:
    """The inode of a named namespace (`ip netns add NAME`), None when it does not exist."""
    try:
        return os.stat(f"/run/netns/{name}").st_ino
    except OSError:
        return None


def register_namespace(name: str) -> None:
    ino = named_netns_inode(name)
    if ino is not None:
        NAMESPACES[ino] = (name, None)


def namespace_deleted(ino: int) -> None:
    if ino in NAMESPACES:
        NAMESPACES[ino] = (NAMESPACES[ino][0], boot_ticks())


def in_namespaces(inodes: set[int]) -> list[int]:
    """The processes whose network namespace is one of these (never this process)."""
    me = os.getpid()
    return sorted(pid for pid in processes() if pid != me and netns_inode(pid) in inodes)


def end(pids: list[int], grace: float = 3.0, wait: float = 5.0) -> list[int]:
    """SIGTERM, up to `grace` seconds, SIGKILL, then up to `wait` seconds until they are gone
    (reaped by us when they are our children, by their parent or init otherwise). Returns the
    pids still alive at the end (none, normally)."""
    me = os.getpid()
    pids = [p for p in pids if p != me]
    starts = {p: s.start for p in pids if (s := _stat(p)) is not None}

    def alive() -> list[int]:
        left = []
        for pid in starts:
            try:  # reap it if it is our child
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            except OSError:
                pass
            s = _stat(pid)
            if s is not None and s.start == starts[pid] and s.state not in ("Z", "X"):
                left.append(pid)
        return left

    def send(sig: int, targets: list[int]) -> None:
        for pid in targets:
            try:
                os.kill(pid, sig)
            except OSError:
                pass

    send(signal.SIGTERM, list(starts))
    deadline = time.monotonic() + grace
    left = alive()
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = alive()
    send(signal.SIGKILL, left)
    deadline = time.monotonic() + wait
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = alive()
    return left


@dataclass
class Leak:
    pid: int
    ppid: int
    start: int
    cmdline: str
    tie: str


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip() or "?"


def _tie(p: Proc, session: str, tmp: str | None) -> str:
    if p.ppid == os.getpid():
        return "child of the test process"
    try:
        if f"{MARK}={session}".encode() in Path(f"/proc/{p.pid}/environ").read_bytes().split(b"\0"):
            return f"environment {MARK}"
    except OSError:
        pass
    ino = netns_inode(p.pid)
    if ino is not None and ino in NAMESPACES:
        name, deleted = NAMESPACES[ino]
        if deleted is None or p.start <= deleted:
            return f"network namespace {name} (net:[{ino}])"
    if tmp:
        under = tmp.rstrip("/") + "/"
        try:
            cwd = os.readlink(f"/proc/{p.pid}/cwd")
            if (cwd + "/").startswith(under):
                return f"working folder {cwd}"
        except OSError:
            pass
        try:
            for fd in os.scandir(f"/proc/{p.pid}/fd"):
                try:
                    target = os.readlink(fd.path)
                except OSError:
                    continue
                if target.startswith(under):
                    return f"open file {target}"
        except OSError:
            pass
    return ""


def _helper_of_ours(p: Proc) -> bool:
    """A process that Python's multiprocessing keeps for the life of the test process (it ends
    with it): not a leak of a test."""
    if p.ppid != os.getpid():
        return False
    cmd = _cmdline(p.pid)
    return "multiprocessing.resource_tracker" in cmd or "multiprocessing.forkserver" in cmd


def leaked(before: set[tuple[int, int]], session: str, tmp: str | None) -> list[Leak]:
    """The processes started since `before` that belong to this session (see the module's
    doc), and their descendants. The test process and its ancestors are never listed."""
    procs = processes()
    me = os.getpid()
    ancestors = set()
    pid = me
    while pid > 1 and pid in procs and pid not in ancestors:
        ancestors.add(pid)
        pid = procs[pid].ppid
    new = {pid: p for pid, p in procs.items() if p.key not in before and pid not in ancestors}
    ties = {pid: t for pid, p in new.items() if not _helper_of_ours(p) and (t := _tie(p, session, tmp))}
    for _ in range(20):  # descendants of a tied process
        more = {pid: f"child of {p.ppid}" for pid, p in new.items()
                if pid not in ties and p.ppid in ties and not _helper_of_ours(p)}
        if not more:
            break
        ties.update(more)
    return [Leak(pid, new[pid].ppid, new[pid].start, _cmdline(pid), tie) for pid, tie in sorted(ties.items())]


def settle(before: set[tuple[int, int]], session: str, tmp: str | None, wait: float = 3.0) -> list[Leak]:
    """`leaked`, after waiting up to `wait` seconds for processes that are on their way out."""
    deadline = time.monotonic() + wait
    found = leaked(before, session, tmp)
    while found and time.monotonic() < deadline:
        time.sleep(0.1)
        found = leaked(before, session, tmp)
    return found


def last_pid() -> int:
    """The pid the kernel gave last (pids are handed out in increasing order until they wrap)."""
    try:
        return int(Path("/proc/loadavg").read_text().split()[4])
    except (OSError, ValueError, IndexError):
        return 0


def describe(leaks: list[Leak], started: list[tuple[float, int, str]]) -> str:
    """One line per process: pid, parent, the test that likely started it, the tie, cmdline.
    `started`: (boot ticks, last pid, test id) as each test started."""
    lines = []
    ticks = [int(t) for t, _, _ in started]
    for lk in leaks:
        # the test that started last before the process did; start times count in ticks
        # (10 ms), so within a tick the pid order decides, and when even that cannot (the pids
        # wrapped), both tests are named
        near = [i for i in range(len(started))
                if ticks[i] <= lk.start and (i + 1 == len(ticks) or ticks[i + 1] >= lk.start)]
        by_pid = [i for i in near if started[i][1] < lk.pid and (i + 1 == len(started) or started[i + 1][1] >= lk.pid)]
        test = " or ".join(started[i][2] for i in (by_pid if len(by_pid) == 1 else near)) or "before the first test"
        lines.append(f"  pid {lk.pid} (parent {lk.ppid}) likely started by {test}; {lk.tie}: {lk.cmdline[:200]}")
    return "\n".join(lines)
