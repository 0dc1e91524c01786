"""The facts other parts of preflight read from a Result (`preflight.facts`): every grader's
output fits them, and the typed readers tolerate facts from older runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight import facts, registry
from preflight.analyze import analyze
from preflight.model import Result, Status

FIXTURES = Path(__file__).parent / "fixtures"
# the checks whose facts are read elsewhere and that analyze grades from the fixtures
GRADED = {"gpu.xid", "gpu.health", "gpu.inventory", "ib.hca", "net.nic", "nccl.allreduce"}


@pytest.fixture(scope="module")
def graded() -> list[Result]:
    files = sorted(p for p in FIXTURES.rglob("*") if p.is_file() and "triage" not in p.parts)
    out: list[Result] = []
    for path in files:
        out += analyze(registry.load(), [path], profile_name="auto")
    return out


def test_every_grader_output_fits_the_declared_facts(graded: list[Result]) -> None:
    seen = {r.check for r in graded if r.facts and r.check in facts.SCHEMAS}
    assert GRADED <= seen, GRADED - seen
    bad = {(r.check, r.source): p for r in graded if (p := facts.problems(r.check, r.facts))}
    assert not bad, bad


def test_the_readers_find_what_the_graders_wrote(graded: list[Result]) -> None:
    xid_fail = [r for r in graded if r.check == "gpu.xid" and r.status is Status.FAIL]
    assert xid_fail and all(facts.xid_events(r) or facts.xid_faults(r) for r in xid_fail)
    assert any(facts.gpu_health(r) for r in graded if r.check == "gpu.health")
    assert any(facts.gpu_count(r) for r in graded if r.check == "gpu.inventory")
    assert any(facts.ib_ports(r) for r in graded if r.check == "ib.hca")
    assert any(facts.peak_busbw(r) for r in graded if r.check == "nccl.allreduce")


def test_a_renamed_key_is_a_problem() -> None:
    ev = {"xid": 79, "pci": "0000:5d:00", "severity": "fail", "action": "RESTART_BM", "count": 1, "time": None,
          "time_text": "", "last_time": None, "caused_by": None}
    good = {"events": [ev], "source_command": "dmesg -T"}
    assert facts.problems("gpu.xid", good) == []
    renamed = {"events": [{**{k: v for k, v in ev.items() if k != "xid"}, "code": 79}], "source_command": "x"}
    assert facts.problems("gpu.xid", renamed)
    assert facts.problems("gpu.xid", {"events": [{**ev, "count": "1"}], "source_command": "x"})
    assert facts.problems("gpu.health", {"gpus": [{"index": True, "gpu": "GPU 0", "uncorrectable_ecc": 0,
                                                   "remapped_failure": None, "remapped_pending": None}]})
    assert facts.problems("no.such.check", {"anything": 1}) == []


def test_readers_tolerate_older_and_broken_facts() -> None:
    old = Result("gpu.xid", "n1", Status.FAIL, "x", facts={"events": [{"xid": 48}, {"code": 1}, "junk", {"xid": "79"}]})
    events = facts.xid_events(old)
    assert [e["xid"] for e in events] == [48] and events[0]["severity"] == "fail" and events[0]["action"] == ""
    assert facts.xid_events(Result("gpu.xid", "n1", Status.FAIL, "x", facts={"events": "nope"})) == []
    assert facts.xid_events(Result("gpu.health", "n1", Status.FAIL, "x", facts={"events": [{"xid": 48}]})) == []
    health = Result("gpu.health", "n1", Status.FAIL, "x", facts={"gpus": [{"index": 3, "uncorrectable_ecc": 2}]})
    assert facts.gpu_health(health)[0]["uncorrectable_ecc"] == 2
    assert facts.gpu_count(Result("gpu.inventory", "n1", Status.PASS, "x", facts={"count": True})) is None
    assert facts.gpu_count(Result("gpu.inventory", "n1", Status.PASS, "x", facts={"count": 8})) == 8
    sweep = Result("nccl.allreduce", "cluster", Status.PASS, "x", facts={"peak_busbw": 371, "hosts": ["a", "b"]})
    assert facts.peak_busbw(sweep) == 371.0 and facts.sweep_hosts(sweep) == ["a", "b"]
    pairs = Result("nccl.pingpong", "cluster", Status.PASS, "x",
                   facts={"pairs": [{"a": "n1", "b": "n2", "status": "ok", "bw_gbps": 40.5}, {"a": 1}]})
    assert [p.get("bw_gbps") for p in facts.pingpong_pairs(pairs)] == [40.5]
