"""Child processes with deadlines: the one place that spawns and ends process groups.

Every child runs in a session (and process group) of its own, so that ending it also ends
whatever it started (srun's helpers, ssh's proxies, torchrun's ranks). `stop_group` is the
one way to end such a group: SIGTERM, a grace period, SIGKILL, reap; it never raises.
`run_bounded` runs a short command to completion within a deadline and never raises either:
a missing program or a timeout comes back as rc None with the cause in the stderr text.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

_File = int | IO[Any] | None
TIMED_OUT = "did not finish within"  # in run_bounded's stderr when the deadline ended the command
POLL_S = 0.05
REAP_S = 5.0  # at most this long for the kernel to deliver a SIGKILL and the child to be reaped


def spawn(argv: Sequence[str], *, env: Mapping[str, str] | None = None, stdin: _File = subprocess.DEVNULL,
          stdout: _File = subprocess.PIPE, stderr: _File = subprocess.PIPE,
          cwd: str | os.PathLike[str] | None = None) -> subprocess.Popen[bytes]:
    """Start `argv` in a new session (its own process group); binary pipes.

    Raises OSError (FileNotFoundError, PermissionError) when the program cannot be started."""
    return subprocess.Popen(list(argv), env=dict(env) if env is not None else None, stdin=stdin, stdout=stdout,
                            stderr=stderr, cwd=cwd, start_new_session=True)


def _members_running(pgid: int) -> bool | None:
    """Whether a process of group `pgid` is still running (zombies waiting for their reaper do
    not count); None when /proc cannot tell."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid).encode() and fields[0] != b"Z":
            return True
    return False


def _group_alive(pgid: int) -> bool:
    running = _members_running(pgid)
    if running is not None:
        return running
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: something is there, though not ours to signal
        return True
    return True


def _signal(proc: subprocess.Popen[Any], sig: int) -> None:
    """`sig` to the group `proc` leads, and to `proc` itself (should it not lead a group)."""
    try:
        os.killpg(proc.pid, sig)
    except OSError:
        pass
    if proc.poll() is None:
        try:
            proc.send_signal(sig)
        except OSError:
            pass


def _wait_gone(proc: subprocess.Popen[Any], until: float) -> bool:
    """Poll until the leader is reaped and its group is empty, or `until`; True when gone."""
    while True:
        if proc.poll() is not None and not _group_alive(proc.pid):
            return True
        if time.monotonic() >= until:
            return False
        time.sleep(POLL_S)


def stop_group(proc: subprocess.Popen[Any], grace_s: float) -> None:
    """End `proc` and its whole process group: SIGTERM, up to `grace_s` seconds for everyone
    to leave, then SIGKILL; the leader is reaped. Never raises.

    `proc` must lead its own group (started by `spawn`, or with start_new_session=True)."""
    try:
        if proc.poll() is not None and not _group_alive(proc.pid):
            return
        _signal(proc, signal.SIGTERM)
        if _wait_gone(proc, time.monotonic() + max(0.0, grace_s)):
            return
        _signal(proc, signal.SIGKILL)
        _wait_gone(proc, time.monotonic() + REAP_S)
    except Exception:  # noqa: BLE001 - ending a process is best effort and must not raise
        pass


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")


def run_bounded(argv: Sequence[str], timeout: float,
                env: Mapping[str, str] | None = None) -> tuple[int | None, str, str]:
    """Run `argv` to completion within `timeout` seconds: (rc, stdout, stderr).

    rc is None when the program could not be started or did not finish in time; stderr then
    says why (its last line holds TIMED_OUT for a timeout). A timed-out command's whole process group is stopped."""
    name = str(argv[0]) if argv else "(empty command)"
    if not argv:
        return None, "", "no command given"
    try:
        proc = spawn(argv, env=env)
    except OSError as exc:
        why = "not found" if isinstance(exc, FileNotFoundError) else (exc.strerror or str(exc))
        return None, "", f"cannot run {name}: {why}"
    try:
        out, err = proc.communicate(timeout=max(0.0, timeout))
    except subprocess.TimeoutExpired:
        stop_group(proc, grace_s=1.0)
        try:
            out, err = proc.communicate(timeout=1.0)
        except (subprocess.TimeoutExpired, OSError, ValueError):  # a descendant that left the group holds a pipe
            out, err = b"", b""
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        note = f"{name} {TIMED_OUT} {timeout:g} s"
        return None, _text(out), (_text(err).rstrip("\n") + "\n" + note).lstrip("\n")
    return proc.returncode, _text(out), _text(err)
