"""Sweep grading, the less travelled paths: what each event kind adds to the outcome, a graded
table with the isolation's verdict or the ranks' errors, and a sweep that measured nothing."""

from __future__ import annotations

from preflight.model import Status
from preflight.profile import load
from preflight.sweep import launch, outcome
from tests.sweep.test_outcome import NODES, TEST_PROFILE, by, hello, launched, row, spec

PAIR_OK = {"ev": "pair", "status": "ok", "bw_gbps": 1.0, "lat_us": 100.0, "bytes": 262144}


def _grade(events: list[dict], **kw: object) -> list:
    out = outcome.collect(launched(events), spec(**kw), NODES)
    results, _ = outcome.grade(out, load(TEST_PROFILE))
    return results


def test_each_event_kind_lands_in_its_place() -> None:
    ev = [{"ev": "begin", "rank": 1, "phase": "allreduce", "bytes": 8}, {"ev": "begin", "rank": 2, "bytes": 8},
          {"ev": "end", "rank": 1}, {"ev": "stall", "rank": 2, "phase": "allreduce", "bytes": 8},
          {"ev": "stall", "rank": "?", "bytes": 8}, {"ev": "done", "rank": 0}, {"ev": "done", "rank": "x"},
          {"ev": "agent_kill", "node": "n2", "reason": "deadline of 60 s reached"},
          {"ev": "agent_kill", "node": "n3", "reason": "the launcher went away (stdin closed)"},
          {"ev": "deadline", "rank": 3, "phase": "allreduce", "bytes": 8}, {"ev": "error", "rank": 0, "error": "e"},
          {"ev": "log", "rank": 0, "line": "NCCL INFO NET/Socket"}, {"ev": "beat", "node": "n1"}, {"no": "kind"},
          row(1 << 20, 10.0), row(262144, 5.0), {**PAIR_OK, "a": "n1", "b": "n2"}]
    out = outcome.collect(launched(ev), spec(), [])
    assert out.nodes == NODES  # no node list given: the ranks' hosts
    assert sorted(out.started_nodes) == NODES and out.world == 4 and sorted(out.ranks) == [0, 1, 2, 3]
    assert out.in_flight == {} and out.done == {0}
    assert len(out.stalls) == 2 and len(out.errors) == 1 and out.logs == ["NCCL INFO NET/Socket"]
    assert [d.get("phase") for d in out.deadline_hits] == ["agent", "allreduce"]
    assert [r["bytes"] for r in out.rows] == [262144, 1 << 20] and len(out.pairs) == 1


def test_a_slow_table_names_the_node_isolation_found() -> None:
    slow = [row(262144, 2e6), row(1 << 20, 8e6)]
    pairs = [{**PAIR_OK, "a": "n1", "b": "n2"}, {**PAIR_OK, "a": "n3", "b": "n4", "bw_gbps": 0.001},
             {**PAIR_OK, "a": "n2", "b": "n3", "bw_gbps": 0.001}, {**PAIR_OK, "a": "n4", "b": "n1"}]
    ar = by(_grade(slow + pairs + [{"ev": "done", "rank": r} for r in range(4)]), "nccl.allreduce")
    assert ar.status is Status.FAIL and ar.summary.endswith("; isolation names n3")
    assert ar.facts["graded_from"] == "nccl-tests table of the sweep rows" and ar.source == "sweep"


def test_a_slow_table_with_every_pair_healthy_blames_no_node() -> None:
    slow = [row(262144, 2e6), row(1 << 20, 8e6)]
    pairs = [{**PAIR_OK, "a": a, "b": b} for a, b in (("n1", "n2"), ("n3", "n4"), ("n2", "n3"), ("n4", "n1"))]
    ar = by(_grade(slow + pairs + [{"ev": "done", "rank": r} for r in range(4)]), "nccl.allreduce")
    assert ar.status is Status.FAIL and "isolation" not in ar.summary
    assert any(e.startswith("every node pair passed ping-pong: no single node or link to blame") for e in ar.evidence)


def test_a_rank_error_fails_a_table_that_passed() -> None:
    ev = [row(262144, 2184.53), row(1 << 20, 4369.07), {"ev": "error", "rank": 2, "error": "RuntimeError: boom"}]
    ar = by(_grade(ev + [{"ev": "done", "rank": r} for r in range(4)]), "nccl.allreduce")
    assert ar.status is Status.FAIL and "rank 2 (n3): RuntimeError: boom" in ar.evidence


def test_nothing_measured_is_an_error_unless_a_node_never_started() -> None:
    ev = [{"ev": "error", "rank": 1, "error": "ImportError: no torch.distributed"}]
    out = outcome.collect(launched(ev, raw={"n1": ["ranks started"]}), spec(), NODES)
    out.done = set(range(4))
    results, _ = outcome.grade(out, load(TEST_PROFILE))
    ar = by(results, "nccl.allreduce")
    assert ar.status is Status.ERROR and ar.summary == "the sweep measured nothing"
    assert ar.evidence == ["rank 1: ImportError: no torch.distributed", "ranks started"]
    events = [{"ev": "agent", "node": n} for n in NODES[:3]] + [hello(i, n) for i, n in enumerate(NODES[:3])]
    out = outcome.collect(launch.Launched(events=events), spec(), NODES)
    out.done = set(range(4))
    results, _ = outcome.grade(out, load(TEST_PROFILE))
    assert [(r.node, r.status) for r in results if r.check == "nccl.allreduce"] == [("n4", Status.ERROR)]


def test_a_launch_that_failed_after_some_rows_renders_in_every_report() -> None:
    """The count of rows measured before a launch failed is its own fact, never `rows` (which
    every reader takes for the measured table): the HTML report and the metrics still render."""
    from preflight import facts
    from preflight.model import Result
    from preflight.report import html, prometheus
    from preflight.report.base import Report

    r = Result("nccl.allreduce", "cluster", Status.ERROR, "launch failed on n2",
               facts={"reason": "launch-failed", "failed": ["n2"], "rows_measured": 3}, source="sweep")
    assert facts.problems("nccl.allreduce", r.facts) == []
    assert facts.sweep_rows(r) == []
    report = Report.build("sweep", [r])
    assert "launch failed on n2" in html.render(report)
    assert 'preflight_cluster_check_ok{check="nccl.allreduce",nodes=""} 0' in prometheus.render_results([r])
