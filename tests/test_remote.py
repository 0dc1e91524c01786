"""The remote probe bundle: one program, delimited captures, and nothing left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from preflight.probes import Probe
from preflight.remote import build_script, parse_output


def test_bundle_runs_probes_and_parses_back() -> None:
    probes = [Probe.of("echo", ["echo", "hi"]), Probe.of("gone", ["no-such-tool-xyz"]),
              Probe.of("slow", ["sleep", "5"], timeout=0.5), Probe.of("py", [sys.executable, "-c", "print(7)"])]
    script, nonce = build_script(probes)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    out = parse_output("noise line\n" + p.stdout, nonce)
    (node,) = out.captures
    caps = out.captures[node]
    assert caps["echo"].stdout == "hi\n" and caps["echo"].rc == 0
    assert caps["gone"].state.value == "missing"
    assert caps["slow"].state.value == "timeout"
    assert caps["py"].stdout.strip() == "7"
    assert node in out.finished and out.garbage == ["noise line"]


def test_torn_and_foreign_lines_are_garbage_not_errors() -> None:
    out = parse_output("@@preflight abc capture {not json\n@@preflight other capture {}\n", "abc")
    assert out.captures == {} and len(out.garbage) == 2


def _wait_for(path) -> None:
    deadline = time.monotonic() + 10
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def _assert_gone(pid: int, why: str) -> None:
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    pytest.fail(why)


@pytest.mark.real
def test_bundle_ends_its_probes_when_its_caller_goes_away(tmp_path) -> None:
    marker = tmp_path / "pid"
    probe = Probe.of("hang", ["sh", "-c", f"echo $$ > {marker}; exec sleep 60"], timeout=60)
    script, _ = build_script([probe], watch_stdin=True)
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    _wait_for(marker)
    child = int(marker.read_text())
    proc.stdin.close()  # the SSH session is gone
    assert proc.wait(timeout=10) == 3
    _assert_gone(child, "the probe's process outlived its bundle")


@pytest.mark.real
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_cancelled_bundle_stops_quietly_and_takes_its_probes_along(tmp_path, sig) -> None:
    """srun cancelling the step signals the bundle: no traceback, no killed probe reported as a
    result, no probe left running (probes run in their own sessions, out of the signal's reach)."""
    marker = tmp_path / "pid"
    hang = Probe.of("hang", ["sh", "-c", f"echo $$ > {marker}; exec sleep 60"], timeout=60)
    script, nonce = build_script([Probe.of("echo", ["echo", "hi"]), hang])
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for(marker)
    time.sleep(0.3)  # the echo probe has reported by now
    child = int(marker.read_text())
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 128 + sig
    assert b"Traceback" not in err and b"KeyboardInterrupt" not in err
    (node,) = parse_output(out.decode(), nonce).captures.values()
    assert set(node) == {"echo"}
    _assert_gone(child, "the probe's process outlived its cancelled bundle")
