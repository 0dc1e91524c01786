"""The remote probe bundle: one program, delimited captures, and nothing left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from preflight.probe_runner import PROTOCOL, encode_payload
from preflight.probes import Probe
from preflight.remote import MARK, build_script, parse_output


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


# ----- the bundle is the runner module's own text, and a version handshake ----------------------


def _run(script: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)


def test_script_is_the_runner_module_verbatim_plus_one_call() -> None:
    from pathlib import Path

    from preflight import probe_runner

    script, nonce = build_script([Probe.of("echo", ["echo", "hi"])])
    text = Path(probe_runner.__file__).read_text()
    assert script.startswith(text.rstrip("\n") + "\n")
    tail = script[len(text.rstrip("\n")) + 1:].splitlines()
    assert len(tail) == 1 and tail[0].startswith("sys.exit(serve(") and nonce in tail[0]
    assert "from preflight" not in text.replace("`", "").split('"""', 2)[2]  # the code, not the docstring


def test_handshake_line_and_protocol_in_every_result() -> None:
    script, nonce = build_script([Probe.of("echo", ["echo", "hi"])])
    p = _run(script)
    lines = p.stdout.splitlines()
    node = lines[0].split()[3]
    assert lines[0] == f"{MARK} {nonce} hello {node} {PROTOCOL}"
    assert lines[-1].startswith(f"{MARK} {nonce} done {node} ") and lines[-1].endswith(f" {PROTOCOL}")
    out = parse_output(p.stdout, nonce)
    assert out.protocols == {node: PROTOCOL} and out.errors == {} and out.captures[node]["echo"].ok


def test_output_of_another_protocol_is_an_error_not_captures() -> None:
    rec = {"node": "n1", "protocol": PROTOCOL + 1, "probe": "echo", "argv": ["echo"], "state": "ok", "stdout": "hi",
           "stderr": "", "rc": 0, "duration": 0.1, "truncated": False, "timeout": 10.0, "reason": ""}
    text = "\n".join([f"{MARK} n0 hello n1 {PROTOCOL + 1}", f"{MARK} n0 capture {json.dumps(rec)}",
                      f"{MARK} n0 done n1 0.5 {PROTOCOL + 1}"])
    out = parse_output(text, "n0")
    assert out.captures == {} and out.finished == {}
    assert f"protocol {PROTOCOL + 1}, this preflight speaks protocol {PROTOCOL}" in out.errors["n1"]
    assert out.garbage == [out.errors["n1"]]  # a transport that only reads garbage still says why
    # line by line (as the SSH transport reads), each line is refused on its own
    for line in text.splitlines():
        one = parse_output(line, "n0")
        assert one.captures == {} and one.finished == {} and "n1" in one.errors


def test_output_of_the_unversioned_first_protocol_is_refused() -> None:
    rec = {"node": "n1", "probe": "echo", "argv": ["echo"], "state": "ok", "stdout": "hi", "stderr": "",
           "rc": 0, "duration": 0.1, "truncated": False, "timeout": 10.0, "reason": ""}
    out = parse_output(f"{MARK} n0 capture {json.dumps(rec)}\n{MARK} n0 done n1 0.5\n", "n0")
    assert out.captures == {} and out.finished == {} and "protocol 1," in out.errors["n1"]


def test_a_payload_of_another_protocol_runs_nothing() -> None:
    payload = json.loads(encode_payload([Probe.of("touch", ["sh", "-c", "echo ran"])], "abc"))
    payload["protocol"] = PROTOCOL + 1
    p = subprocess.run([sys.executable, "-m", "preflight.probe_runner", json.dumps(payload)],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert f"the bundle is for protocol {PROTOCOL + 1}, this runner speaks protocol {PROTOCOL}" in p.stderr
    out = parse_output(p.stdout, "abc")
    assert out.captures == {} and out.finished == {}
    assert len(p.stdout.splitlines()) == 1 and out.protocols and not out.errors  # the runner's hello only


_V = {"nonce": "x", "protocol": PROTOCOL}
_BAD_TEXT = [{"name": "p", "commands": [["\0text:3"]], "env": [], "timeout": 1}]


@pytest.mark.parametrize("payload", ["", "not json", "[1, 2]", json.dumps({"protocol": PROTOCOL}), json.dumps(_V),
                                     json.dumps({**_V, "cap": 1, "probes": [{"name": "p"}]}),
                                     json.dumps({**_V, "cap": 1, "texts": [], "probes": _BAD_TEXT})])
def test_a_bad_payload_is_a_sentence_not_a_traceback(payload: str) -> None:
    p = subprocess.run([sys.executable, "-m", "preflight.probe_runner", "-"], input=payload + "\n",
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "payload" in p.stderr
    assert "capture" not in p.stdout and "done" not in p.stdout


def test_python_m_runs_the_payload_from_stdin_or_argv() -> None:
    probes = [Probe.of("echo", ["echo", "hi"]), Probe.of("py", [sys.executable, "-c", "print(7)"])]
    payload = encode_payload(probes, "n0n")
    via_stdin = subprocess.run([sys.executable, "-m", "preflight.probe_runner"], input=payload + "\n",
                               capture_output=True, text=True, timeout=30)
    via_argv = subprocess.run([sys.executable, "-m", "preflight.probe_runner", payload],
                              capture_output=True, text=True, timeout=30)
    for p in (via_stdin, via_argv):
        assert p.returncode == 0, p.stderr
        (caps,) = parse_output(p.stdout, "n0n").captures.values()
        assert caps["echo"].stdout == "hi\n" and caps["py"].stdout == "7\n"


def test_a_long_program_shared_by_probes_travels_once() -> None:
    program = "import sys\n" + "# padding\n" * 200 + "print('arg', sys.argv[1])\n"
    probes = [Probe.of(f"p{i}", [sys.executable, "-c", program, str(i)]) for i in range(3)]
    script, nonce = build_script(probes)
    assert script.count("# padding") == 200
    caps = next(iter(parse_output(_run(script).stdout, nonce).captures.values()))
    assert {n: c.stdout for n, c in caps.items()} == {"p0": "arg 0\n", "p1": "arg 1\n", "p2": "arg 2\n"}


def test_a_damaged_capture_record_is_garbage() -> None:
    bad = json.dumps({"node": "n1", "protocol": PROTOCOL, "probe": "x", "argv": "echo", "state": "ok"})
    weird = json.dumps({"node": "n1", "protocol": PROTOCOL, "probe": "x", "argv": [], "state": "weird",
                        "stdout": "", "stderr": "", "rc": None, "duration": 0, "truncated": False, "timeout": 1,
                        "reason": ""})
    out = parse_output(f"{MARK} n capture {bad}\n{MARK} n capture {weird}\n{MARK} n capture []\n", "n")
    assert out.captures == {} and len(out.garbage) == 3 and out.errors == {}
