"""procs: children in their own process group, ended as a group within a deadline; bounded
runs that never raise."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from preflight import procs


def _alive(pid: int) -> bool:
    """Running (not a zombie waiting for its reaper)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _wait_file(path: Path, limit: float = 10.0) -> str:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.02)
    raise AssertionError(f"{path} never written")


def test_spawn_gives_the_child_its_own_session() -> None:
    p = procs.spawn([sys.executable, "-c", "import os; print(os.getsid(0), os.getpgid(0))"])
    out, _ = p.communicate(timeout=30)
    sid, pgid = (int(x) for x in out.split())
    assert sid == pgid == p.pid and pgid != os.getpgid(0)


def test_spawn_passes_env_cwd_and_stdin(tmp_path: Path) -> None:
    p = procs.spawn([sys.executable, "-c", "import os,sys; print(os.environ['PF_X'], os.getcwd(), sys.stdin.read())"],
                    env={**os.environ, "PF_X": "42"}, stdin=subprocess.PIPE, cwd=tmp_path)
    out, _ = p.communicate(b"hello", timeout=30)
    assert out.decode().split() == ["42", str(tmp_path), "hello"]


def test_stop_group_ends_the_leader_and_its_descendants(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    p = procs.spawn(["sh", "-c", f"sleep 60 & echo $! > {pids}; sleep 60"])
    child = int(_wait_file(pids))
    start = time.monotonic()
    procs.stop_group(p, grace_s=5.0)
    assert time.monotonic() - start < 3.0  # SIGTERM was enough: no wait for the grace period
    assert p.returncode is not None and p.returncode < 0
    assert not _alive(child)


def test_stop_group_kills_what_ignores_sigterm_after_the_grace(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    code = (f"sh -c 'trap \"\" TERM; sleep 60' & echo $! > {pids}; trap '' TERM; sleep 60")
    p = procs.spawn(["sh", "-c", code])
    child = int(_wait_file(pids))
    time.sleep(0.2)  # both traps set
    start = time.monotonic()
    procs.stop_group(p, grace_s=0.5)
    took = time.monotonic() - start
    assert 0.4 < took < 4.0, took
    assert p.returncode is not None
    assert not _alive(child)


def test_stop_group_reaches_descendants_after_the_leader_is_gone(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    p = procs.spawn(["sh", "-c", f"sleep 60 & echo $! > {pids}"])
    child = int(_wait_file(pids))
    p.wait(timeout=10)
    assert _alive(child)
    procs.stop_group(p, grace_s=2.0)
    assert not _alive(child)


def test_stop_group_never_raises() -> None:
    p = procs.spawn(["true"])
    p.wait(timeout=10)
    procs.stop_group(p, grace_s=0.1)
    procs.stop_group(p, grace_s=0.1)  # twice, on a reaped child: still quiet
    assert p.returncode == 0


def test_run_bounded_returns_output_and_status() -> None:
    rc, out, err = procs.run_bounded([sys.executable, "-c", "import sys; print('o'); print('e', file=sys.stderr); "
                                      "sys.exit(3)"], timeout=30)
    assert (rc, out, err) == (3, "o\n", "e\n")


def test_run_bounded_missing_program_and_empty_argv() -> None:
    rc, out, err = procs.run_bounded(["/nonexistent/preflight-tool"], timeout=5)
    assert rc is None and out == "" and "not found" in err and "preflight-tool" in err
    rc, _, err = procs.run_bounded([], timeout=5)
    assert rc is None and "no command" in err


def test_run_bounded_times_out_and_ends_the_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    start = time.monotonic()
    rc, out, err = procs.run_bounded(["sh", "-c", f"echo partial; sleep 60 & echo $! > {pids}; wait"], timeout=1.0)
    took = time.monotonic() - start
    assert rc is None and "did not finish within 1 s" in err and out == "partial\n"
    assert took < 5.0, took
    assert not _alive(int(pids.read_text()))


def test_run_bounded_decodes_bad_bytes() -> None:
    rc, out, _ = procs.run_bounded([sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'a\\xffb')"],
                                   timeout=30)
    assert rc == 0 and out == "a\ufffdb"


def test_stop_group_still_ends_a_child_that_leads_no_group() -> None:
    p = subprocess.Popen(["sh", "-c", "trap '' TERM; exec sleep 60"])  # our own group, not its own
    time.sleep(0.2)
    procs.stop_group(p, grace_s=0.3)
    assert p.returncode is not None and not _alive(p.pid)
