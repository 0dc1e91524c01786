"""What the history says (pure): flapping, lemons, trends; and the flap-damping decision."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.history.analysis import (
    Thresholds,
    episodes,
    latest_results,
    own_baseline,
    summarize,
    transitions,
)
from preflight.history.damping import Damping, decide, hard_fault
from preflight.history.store import Row, open_store
from preflight.model import Status
from tests.history import FLAPPY, T0, res, ten_runs, xid_event


def _rows(tmp_path: Path) -> list[Row]:
    with open_store(f"sqlite:///{tmp_path}/h.db") as s:
        for d in ten_runs():
            s.record(d)
        return s.rows()


def test_ten_runs_name_the_flapper_and_the_lemons(tmp_path: Path) -> None:
    summary = summarize(_rows(tmp_path))
    assert summary.runs == 10 and summary.nodes == ["n1", "n2", "n3", "n4"]  # real nodes only
    assert summary.flapping_nodes == ["n2"]
    flap = summary.flapping[0]
    assert (flap.check, flap.sequence) == ("ib.hca", FLAPPY) and (flap.episodes, flap.transitions) == (4, 7)
    lemons = {(lm.node, lm.kind, lm.key): lm for lm in summary.lemons}
    assert lemons[("n3", "xid", "Xid 79")].count == 2
    assert "2 distinct event(s)" in lemons[("n3", "xid", "Xid 79")].summary
    assert ("n2", "port", "mlx5_3/1") in lemons and ("n2", "check", "ib.hca") in lemons
    assert "n1" not in summary.lemon_nodes and "n4" not in summary.lemon_nodes
    stats = {(s.node, s.check): s for s in summary.stats}
    assert stats[("n2", "ib.hca")].bad == 6 and stats[("n3", "gpu.xid")].sequence == "PPFPPPFPPP"


def test_trends_compare_each_node_with_its_own_past(tmp_path: Path) -> None:
    trends = {t.label: t for t in summarize(_rows(tmp_path)).trends}
    n4 = trends["n4"]
    assert n4.low and n4.previous == 9 and n4.summary.startswith("busbw 16% under n4's median of its last 9 runs")
    assert not trends["n1"].low and "over n1's median" in trends["n1"].summary
    assert trends["n1<->n2"].kind == "pingpong" and not trends["n1<->n2"].low
    short = summarize(_rows(tmp_path), Thresholds(trend_runs=3))
    assert {t.label: t for t in short.trends}["n4"].previous == 3


def test_the_same_xid_event_seen_by_every_run_is_one_event() -> None:
    ev = xid_event(79, "2026-09-21T01:00:00")
    rows = [Row(run_id=i, ts=T0 + i, command="prologue", check="gpu.xid", node="n1", status=Status.FAIL,
                summary="Xid 79", facts={"events": [ev]}) for i in range(5)]
    summary = summarize(rows)
    assert [lm.kind for lm in summary.lemons] == ["check"]  # failing often, but one Xid event
    again = rows + [Row(run_id=9, ts=T0 + 9, command="prologue", check="gpu.xid", node="n1", status=Status.FAIL,
                        summary="Xid 79", facts={"events": [xid_event(79, "2026-09-22T05:00:00")]})]
    assert [lm.key for lm in summarize(again).lemons if lm.kind == "xid"] == ["Xid 79"]


def test_transitions_ignore_skips_and_latest_results() -> None:
    S = Status
    assert transitions([S.PASS, S.SKIP, S.FAIL, S.WARN, S.FAIL]) == 3
    assert transitions([S.PASS, S.SKIP, S.FAIL, S.WARN, S.ERROR]) == 2  # not checked: no evidence
    assert transitions([]) == 0 and transitions([S.FAIL]) == 0
    assert episodes([S.FAIL, S.FAIL, S.PASS, S.SKIP, S.FAIL, S.PASS, S.FAIL]) == 3
    assert episodes([S.FAIL, S.FAIL, S.PASS, S.SKIP, S.ERROR, S.PASS, S.FAIL]) == 2
    assert episodes([S.FAIL, S.ERROR, S.FAIL]) == 1  # one episode, a run not checked in the middle
    rows = [Row(1, T0, "node", "gpu.xid", "n1", S.FAIL, "old"), Row(2, T0 + 5, "node", "gpu.xid", "n1", S.PASS, "new")]
    assert [r.summary for r in latest_results(rows)] == ["new"]
    first = own_baseline([(T0, 100.0)], "n1", "allreduce", Thresholds())
    assert first.median is None and not first.low and "first run" in first.summary


# ---- damping ----------------------------------------------------------------------------


def _run(node: str, status: str, check: str = "net.mtu", **facts: object) -> list:
    return [res(check, node, status, f"{check} {status}", **facts), res("gpu.xid", node, "pass")]


def test_soft_failure_drains_only_after_k_in_a_row() -> None:
    d = Damping(fail_runs=3, pass_runs=2)
    one = decide("n1", _run("n1", "fail"), [_run("n1", "pass")], d)
    assert not one.drain and not one.resume and one.fail_streak == 1 and one.action == "damped"
    assert one.reason.startswith("damped: net.mtu fail 1/3 runs")
    two = decide("n1", _run("n1", "fail"), [_run("n1", "pass"), _run("n1", "fail")], d)
    assert not two.drain and two.fail_streak == 2
    three = decide("n1", _run("n1", "fail"), [_run("n1", "fail", "ib.hca"), _run("n1", "fail")], d)
    assert three.drain and not three.hard and three.fail_streak == 3
    assert three.summary.startswith("fail 2/3 runs: net.mtu fail") and three.check == "net.mtu"
    full = decide("n1", _run("n1", "fail"), [_run("n1", "fail")] * 2, d)
    assert full.reason.startswith("net.mtu fail 3/3 runs: drained after 3 failing runs in a row")
    from preflight.slurm import drain_reason

    assert drain_reason(full.check, full.summary).startswith("preflight: net.mtu fail 3/3 runs: ")


def test_hard_faults_drain_at_once() -> None:
    d = Damping()
    xid = decide("n1", _run("n1", "fail", "gpu.xid", events=[xid_event(79, "t")]), [], d)
    assert xid.drain and xid.hard and "Xid 79" in xid.reason and xid.summary.startswith("hard fault: ")
    ecc = [res("gpu.health", "n1", "fail", gpus=[{"index": 3, "uncorrectable_ecc": 2}])]
    assert decide("n1", ecc, [], d).hard
    assert decide("n1", [res("fabric.manager", "n1", "fail")], [], d).hard
    soft_xid = res("gpu.xid", "n1", "fail", events=[{"xid": 13, "severity": "warn", "action": "RESTART_APP"}])
    assert hard_fault(soft_xid, d) == "" and not decide("n1", [soft_xid], [], d).drain
    only_48 = Damping(hard_xids=frozenset({48}))
    assert hard_fault(res("gpu.xid", "n1", "fail", events=[xid_event(48, "t")]), only_48)
    assert not hard_fault(res("gpu.xid", "n1", "fail", events=[xid_event(31, "t", count=1) | {"action": "x"}]),
                          only_48)


def test_resume_only_after_m_passes() -> None:
    d = Damping(fail_runs=3, pass_runs=2)
    first = decide("n1", _run("n1", "pass"), [_run("n1", "fail")], d)
    assert not first.resume and first.pass_streak == 1 and "1/2" in first.reason
    second = decide("n1", _run("n1", "pass"), [_run("n1", "fail"), _run("n1", "pass")], d)
    assert second.resume and second.reason.startswith("passed 2/2 runs in a row")
    other_node = decide("n1", _run("n2", "fail"), [], d)  # results of other nodes do not count
    assert not other_node.drain and other_node.pass_streak == 1


def test_damp_spec_and_profile_values() -> None:
    class Prof:
        values = {"history.damp_fail_runs": 4, "history.damp_pass_runs": 3, "history.hard_xids": [79, 48]}

        def get(self, key: str) -> object:
            return self.values.get(key)

    assert Damping.parse("on", Prof()) == Damping(4, 3, frozenset({79, 48}))
    assert (Damping.parse("5,1").fail_runs, Damping.parse("5,1").pass_runs) == (5, 1)
    assert Damping.parse("2", Prof()).pass_runs == 3
    for bad in ("x", "0,1", "1,2,3"):
        with pytest.raises(ValueError, match="--damp"):
            Damping.parse(bad)
