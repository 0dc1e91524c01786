"""The live progress line: one count across the collection phases."""

from __future__ import annotations

from preflight.model import Capture, CaptureState
from preflight.report.progress import NodeProgress

OK = Capture("p", ["p"], CaptureState.OK)


def test_the_probe_count_runs_on_across_phases() -> None:
    seen: list[str] = []
    prog = NodeProgress(seen.append)
    prog.expect({"n1": 3, "n2": 3})  # phase 1
    for node in ("n1", "n2"):
        for _ in range(3):
            prog(node, OK)
    assert prog.line() == "nodes: 2 done, 0 failed, 0 pending (6 of 6 probe results)"
    prog.expect({"n1": 2, "n2": 2})  # phase 2: the profile's and the peers' probes
    assert prog.line() == "nodes: 0 done, 0 failed, 2 pending (6 of 10 probe results)"
    prog("n1", OK)
    prog("n1", Capture("ping", ["ping"], CaptureState.TIMEOUT))
    assert prog.line() == "nodes: 1 done, 0 failed, 1 pending (8 of 10 probe results, 1 probe(s) not ok)"
    counts = [int(line.split("(")[1].split()[0]) for line in seen]
    assert counts == sorted(counts) and counts[-1] == 8  # never back to 0 between the phases


def test_a_node_that_failed_in_phase_one_is_not_pending_in_phase_two() -> None:
    prog = NodeProgress()
    prog.expect({"n1": 2, "n2": 2})
    prog("n1", OK)
    prog("n1", OK)
    prog.node_failed("n2")
    prog.expect({"n1": 1})
    prog("n1", OK)
    assert prog.line() == "nodes: 1 done, 1 failed, 0 pending (3 of 5 probe results)"
