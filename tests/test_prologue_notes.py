"""The prologue's note about probe timeouts cut to fit the budget: only when it matters (a cut
probe timed out, or the verdict is NO-GO for a timeout), never on every GO."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.model import Result, Status
from preflight.prologue import cut_and_timed_out
from preflight.report.base import Report
from tests.slurm.test_slurm import KMSG_CLEAN, _prologue

CUT = ["kernel-log 15s->3.1s", "nvidia-smi-q 10s->3.1s"]


def test_no_note_when_nothing_timed_out() -> None:
    go = Report.build("prologue", [Result("gpu.xid", "n1", Status.PASS, "no Xid")])
    assert cut_and_timed_out(CUT, go) == []
    other = Report.build("prologue", [Result("gpu.xid", "n1", Status.FAIL, "Xid 79 on GPU 0000:5d:00")])
    assert cut_and_timed_out(CUT, other) == []  # a NO-GO for another reason says nothing about cuts


def test_the_note_names_the_cut_probe_that_timed_out() -> None:
    hung = Report.build("prologue", [Result("gpu.xid", "n1", Status.ERROR, "probe kernel-log timed out after 3.1 s")])
    assert cut_and_timed_out(CUT, hung) == ["kernel-log 15s->3.1s"]
    # a timeout naming no cut probe still makes every cut worth saying when it blocks
    other = Report.build("prologue", [Result("gpu.health", "n1", Status.ERROR, "probe nvml timed out after 3.1 s")])
    assert cut_and_timed_out(CUT, other) == CUT
    assert cut_and_timed_out([], hung) == []


@pytest.mark.real
def test_a_go_prologue_with_cut_timeouts_prints_no_note(tmp_path: Path) -> None:
    # a budget under the probes' own timeouts (so they are cut) with room for a loaded machine
    p, _ = _prologue(tmp_path, KMSG_CLEAN, "--no-drain", "--budget", "12")
    assert p.returncode == 0 and p.stdout.startswith("preflight prologue gpu017: GO"), (p.stdout, p.stderr)
    assert "cut to fit" not in p.stdout + p.stderr, p.stdout
