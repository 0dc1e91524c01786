"""No test leaves a process behind.

The leak check of tests/conftest.py runs in a pytest of its own over small test files that
leak on purpose: a child never waited for, an orphan under init that inherited the session's
mark, an orphan with an empty environment tied only by its open file in the session's
temporary folder, and one left by a session fixture. The run fails and names each one with the
test that started it, and ends them. A test that leaks nothing passes.

The test cluster's teardown ends what runs in its nodes' namespaces, not only the daemons it
started: a process detached from an ssh session (as sshd's session child blocked on a dead
connection is) is gone after `down()`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import leaks
from tests.conftest import need
from tests.netcluster import ROOT, NetCluster, prerequisites

pytestmark = pytest.mark.real

LEAKY = '''
import os, subprocess, sys, time
import pytest

TOKEN = "{token}"

def test_leaks_a_child():
    subprocess.Popen(["sleep", TOKEN + "1"])
    time.sleep(0.05)

def test_leaks_an_orphan():
    subprocess.run(["sh", "-c", "sleep " + TOKEN + "2 >/dev/null 2>&1 &"], check=True)
    time.sleep(0.05)

def test_leaks_an_orphan_with_no_environment(tmp_path):
    subprocess.run(["env", "-i", "/bin/sh", "-c", "sleep " + TOKEN + "3 >" + str(tmp_path / "log") + " 2>&1 &"],
                   check=True)
'''

SESSION_FIXTURE = '''
import subprocess
import pytest

@pytest.fixture(scope="session")
def server():
    yield
    subprocess.run(["sh", "-c", "sleep {token}4 >/dev/null 2>&1 &"], check=True)

def test_uses_the_server(server):
    pass
'''

CLEAN = '''
import subprocess

def test_waits_for_its_children():
    subprocess.run(["sleep", "0.1"], check=True)
    p = subprocess.Popen(["sleep", "{token}5"])
    p.kill()
    p.wait()
'''


def _sleeps(token: str) -> list[int]:
    """The pids of the sleep processes with our token in their argument."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[:1] == [b"sleep"] and len(argv) > 1 and argv[1].startswith(token.encode()):
                found.append(int(entry.name))
    return found


def _pytest(tmp_path: Path, name: str, text: str, token: str) -> subprocess.CompletedProcess[str]:
    folder = tmp_path / "inner"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(text.replace("{token}", token))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           "-q", "--rootdir", str(folder), f"--basetemp={tmp_path / 'bt'}",
                           str(folder / name)], cwd=folder, env=env, capture_output=True, text=True, timeout=120)


def _token() -> str:
    return f"{700 + os.getpid() % 100}.{time.time_ns() % 10**6:06d}"


def test_a_test_that_leaves_processes_fails_the_run_and_names_them(tmp_path: Path) -> None:
    token = _token()
    try:
        p = _pytest(tmp_path, "test_leaky.py", LEAKY, token)
        out = p.stdout + p.stderr
        assert p.returncode == 1, out[-3000:]
        assert "3 process(es) started by the tests outlived their module test_leaky.py" in out, out[-3000:]
        for n, test, tie in ((1, "test_leaks_a_child", "child of the test process"),
                             (2, "test_leaks_an_orphan", "environment PREFLIGHT_TEST_SESSION"),
                             (3, "test_leaks_an_orphan_with_no_environment", "open file ")):
            line = next((ln for ln in out.splitlines() if f"sleep {token}{n}" in ln), "")
            assert f"likely started by test_leaky.py::{test}; {tie}" in line, (n, out[-3000:])
            assert "parent 1)" in line or n == 1, line  # the orphans are init's
        assert _sleeps(token) == [], "the check ends what it found"
    finally:
        leaks.end(_sleeps(token), grace=0.5)


def test_a_process_left_by_a_session_fixture_fails_the_session(tmp_path: Path) -> None:
    token = _token()
    try:
        p = _pytest(tmp_path, "test_session_leak.py", SESSION_FIXTURE, token)
        out = p.stdout + p.stderr
        assert p.returncode == 1 and "1 passed" in out, out[-3000:]
        assert "processes left behind" in out and "outlived the test session" in out, out[-3000:]
        assert f"sleep {token}4" in out, out[-3000:]
        assert _sleeps(token) == []
    finally:
        leaks.end(_sleeps(token), grace=0.5)


def test_a_test_that_leaves_nothing_passes(tmp_path: Path) -> None:
    token = _token()
    p = _pytest(tmp_path, "test_clean.py", CLEAN, token)
    out = p.stdout + p.stderr
    assert p.returncode == 0 and "1 passed" in out and "outlived" not in out, out[-3000:]


def test_cluster_teardown_ends_what_runs_in_its_namespaces(tmp_path: Path) -> None:
    need(not prerequisites(), f"namespace cluster prerequisites: {prerequisites()}")
    token = _token()
    c = NetCluster(1, tmp_path / "cluster", prefix="lk", subnet="10.66.40")
    try:
        c.up([])
        ino = leaks.named_netns_inode(c.nodes[0].ns)
        # a process an ssh session left running in the node (its own session, not the daemon's
        # process group), as sshd's session child blocked on a dead connection is
        c.client("ssh", "-F", str(c.ssh_config), "n1", f"setsid sleep {token}6 </dev/null >/dev/null 2>&1 &",
                 timeout=30)
        deadline = time.monotonic() + 10
        while not _sleeps(token) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _sleeps(token), "the detached process did not start"
        assert ino is not None and all(leaks.netns_inode(p) == ino for p in _sleeps(token))
        # a second run's cluster of the same prefix neither takes these namespaces away as stale
        # nor ends what runs in them: it waits for the prefix (here: gives up after 1 s)
        other = NetCluster(1, tmp_path / "other", prefix="lk", subnet="10.66.40")
        with pytest.raises(RuntimeError, match=f"'lk' still in use after 1 s by pid {os.getpid()}"):
            other._lock_prefix(timeout=1)
        other.down()
        assert leaks.named_netns_inode(c.nodes[0].ns) == ino and _sleeps(token), "the other run took the cluster"
        c.down()
        assert _sleeps(token) == [], "the node's process outlived the cluster"
        assert leaks.in_namespaces({ino}) == []
    finally:
        c.down()
        leaks.end(_sleeps(token), grace=0.5)
