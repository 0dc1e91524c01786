"""Probes run real processes: timeouts, missing tools, caps, fallbacks, concurrency."""

from __future__ import annotations

import json
import sys
import time

import pytest

from preflight import probe_runner
from preflight.model import CaptureState
from preflight.probes import Probe, capture_of, run_bundle, run_command, run_probe

PY = sys.executable


def test_ok_capture_has_stdout_stderr_rc_duration() -> None:
    c = run_command([PY, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"])
    assert c.state is CaptureState.OK
    assert c.stdout.strip() == "out" and c.stderr.strip() == "err" and c.rc == 3
    assert c.duration > 0


def test_missing_tool_is_missing_not_an_exception() -> None:
    c = run_command(["definitely-not-a-tool-xyz", "-q"])
    assert c.state is CaptureState.MISSING
    assert "definitely-not-a-tool-xyz not found" in c.reason


def test_hung_tool_is_killed_at_its_timeout_with_its_children() -> None:
    start = time.monotonic()
    # the child keeps the pipes open: the whole process group must go
    c = run_command(["sh", "-c", "sleep 30 & sleep 30"], timeout=0.5)
    took = time.monotonic() - start
    assert c.state is CaptureState.TIMEOUT and c.rc is None
    assert "did not finish within 0.5 s" in c.reason
    assert took < 5


def test_flood_is_capped_head_and_tail_kept() -> None:
    code = "import sys\nsys.stdout.write('FIRST\\n' + 'x' * 20_000_000 + '\\nLAST\\n')"
    c = run_command([PY, "-c", code], cap=1 << 20)
    assert c.truncated
    assert c.stdout.startswith("FIRST") and c.stdout.rstrip().endswith("LAST")
    assert len(c.stdout) < (1 << 20) + 200
    assert "bytes of output dropped here" in c.stdout


def test_fallback_runs_when_first_is_missing_or_fails() -> None:
    p = Probe.of("k", ["no-such-tool-abc"], ["sh", "-c", "exit 1"], ["echo", "third"])
    c = run_probe(p)
    assert c.ok and c.stdout.strip() == "third" and c.argv == ["echo", "third"]


def test_all_alternatives_missing_names_them() -> None:
    c = run_probe(Probe.of("k", ["no-such-a"], ["no-such-b"]))
    assert c.state is CaptureState.MISSING and "no-such-a, no-such-b" in c.reason


def test_nonzero_exit_of_last_alternative_is_kept() -> None:
    c = run_probe(Probe.of("k", ["sh", "-c", "echo boom >&2; exit 255"]))
    assert c.ok and c.rc == 255 and "boom" in c.stderr


@pytest.mark.real
def test_bundle_runs_concurrently() -> None:
    probes = [Probe.of(f"p{i}", ["sleep", "0.5"]) for i in range(6)]
    start = time.monotonic()
    caps = run_bundle(probes)
    took = time.monotonic() - start
    assert set(caps) == {f"p{i}" for i in range(6)}
    assert all(c.ok for c in caps.values())
    assert took < 2.5  # six half-second probes side by side, not 3 s in a row


def test_undecodable_bytes_do_not_raise() -> None:
    c = run_command([PY, "-c", "import sys; sys.stdout.buffer.write(b'\\xff\\xfe ok\\n')"])
    assert c.ok and "ok" in c.stdout


def test_empty_command_is_failed_with_a_reason() -> None:
    c = run_command([])
    assert c.state is CaptureState.FAILED and c.reason == "empty command"


def test_runner_results_are_the_wire_records_captures_are_built_from() -> None:
    r = probe_runner.run_probe(Probe.of("k", ["sh", "-c", "echo out; echo err >&2; exit 4"]))
    assert (r.state, r.rc, r.stdout, r.stderr) == (probe_runner.OK, 4, "out\n", "err\n")
    rec = json.loads(json.dumps(r.record()))
    assert probe_runner.Result.from_record(rec) == r
    cap = capture_of(r, "ssh:n1:probe:k")
    assert cap.state is CaptureState.OK and cap.rc == 4 and cap.source == "ssh:n1:probe:k"
    assert capture_of(r).source == "probe:k"
    # every state the runner writes is a CaptureState the controller knows
    assert {CaptureState(s) for s in probe_runner.STATES} <= set(CaptureState)


@pytest.mark.parametrize("change", [{"state": "exploded"}, {"argv": "echo"}, {"rc": "x"}, {"duration": None}])
def test_a_record_that_is_not_a_result_is_refused(change: dict) -> None:
    rec = probe_runner.Result("k", ["echo"], probe_runner.OK).record()
    with pytest.raises((ValueError, TypeError)):
        probe_runner.Result.from_record({**rec, **change})
    with pytest.raises(KeyError):
        probe_runner.Result.from_record({k: v for k, v in rec.items() if k != "stdout"})


def test_bundle_hands_the_same_capture_to_on_done_and_to_the_result() -> None:
    seen = []
    caps = run_bundle([Probe.of("a", ["echo", "a"]), Probe.of("b", ["no-such-tool-q"])], on_done=seen.append)
    assert sorted(c.probe for c in seen) == ["a", "b"]
    assert all(caps[c.probe] is c for c in seen)
    assert caps["b"].state is CaptureState.MISSING and caps["a"].source == "probe:a"


def test_a_failing_progress_display_loses_no_capture() -> None:
    def boom(c) -> None:
        raise RuntimeError("display broke")

    caps = run_bundle([Probe.of("a", ["echo", "a"])], on_done=boom)
    assert caps["a"].stdout == "a\n"


def test_the_runner_module_needs_nothing_but_the_standard_library() -> None:
    import ast
    from pathlib import Path

    tree = ast.parse(Path(probe_runner.__file__).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= set(sys.stdlib_module_names) | {"__future__"}, names
