"""History keeps "not checked" apart from "failed": a node whose sshd was stopped, whose link
was down or whose output was lost in transit is ERROR in those runs; that is its own finding,
never a lemon, never flapping, and never a failure in the damping decision."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from preflight.history.analysis import Thresholds, prometheus_text, summarize
from preflight.history.damping import Damping, decide, hard_fault
from preflight.history.store import Row, open_store
from preflight.model import Result, Status
from preflight.report import Report
from preflight.report import html as html_report
from tests.conftest import ROOT
from tests.history import HOUR, T0, _iso, res

CHECKS = ("gpu.health", "gpu.xid", "ib.hca", "net.mtu", "fabric.manager")
REFUSED = "ssh: connect to host n3 port 22: Connection refused"
LOST = "output lost: connection lost mid-bundle after 4 of 10 captures"
UNREACHABLE_N3 = {3, 4, 9, 15, 21, 30, 38}  # 7 of 42 runs, spread out: the old count made n3 flap
UNREACHABLE_N2 = {2, 8, 14, 20, 26, 32, 40}  # 7 of 42 runs
FAILING_N2 = {1, 5, 11, 17, 23, 29, 35}  # gpu.health FAILs in 7 of n2's 35 graded runs


def _unreached(node: str, cause: str) -> list[Result]:
    """What engine.node_error_results gives for a node that could not be reached."""
    return [Result(check=c, node=node, status=Status.ERROR, summary=f"node not checked: {cause}",
                   evidence=[cause], remedy=f"make {node} reachable, or drain it") for c in CHECKS]


def _healthy(node: str) -> list[Result]:
    return [res(c, node, "pass", f"{c} ok") for c in CHECKS]


def _runs(n: int = 42) -> list[dict[str, Any]]:
    docs = []
    for i in range(n):
        results = _healthy("n1")
        if i in UNREACHABLE_N2:
            results += _unreached("n2", "ssh: connect to host n2 port 22: No route to host")
        else:
            results += [res("gpu.health", "n2", "fail", "GPU 3: uncorrectable ECC 2",
                            gpus=[{"index": 3, "uncorrectable_ecc": 2}]) if i in FAILING_N2
                        else res("gpu.health", "n2", "pass", "8 GPUs healthy")]
            results += [res(c, "n2", "pass", f"{c} ok") for c in CHECKS[1:]]
        results += _unreached("n3", REFUSED) if i in UNREACHABLE_N3 else _healthy("n3")
        docs.append({"command": "run", "started": _iso(T0 + i * HOUR), "nodes": ["n1", "n2", "n3"],
                     "profiles": {}, "duration_s": 2.0, "results": [r.to_dict() for r in results]})
    return docs


def _store(tmp_path: Path, docs: list[dict[str, Any]]) -> str:
    url = f"sqlite:///{tmp_path}/h.db"
    with open_store(url) as s:
        for d in docs:
            s.record(d)
    return url


def _rows(url: str) -> list[Row]:
    with open_store(url) as s:
        return s.rows()


def test_an_unreachable_node_is_not_a_lemon_nor_flapping_but_its_own_finding(tmp_path: Path) -> None:
    summary = summarize(_rows(_store(tmp_path, _runs())))
    assert summary.runs == 42
    assert "n3" not in summary.lemon_nodes and "n3" not in summary.flapping_nodes
    assert "n1" not in summary.lemon_nodes + summary.flapping_nodes + summary.unchecked_nodes
    stats = {(s.node, s.check): s for s in summary.stats}
    n3 = stats[("n3", "gpu.health")]
    assert (n3.bad, n3.graded, n3.not_checked, n3.runs) == (0, 35, 7, 42)
    assert n3.sequence.count("E") == 7 and "F" not in n3.sequence
    u = {x.node: x for x in summary.unchecked}
    assert u["n3"].summary == f"n3 not checked in 7 of 42 runs: node not checked: {REFUSED}"
    assert (u["n3"].count, u["n3"].runs, u["n3"].whole, u["n3"].cause_count) == (7, 42, 7, 7)
    assert u["n3"].sequence.count("N") == 7 and u["n3"].sequence.count("G") == 35
    assert summary.node_checked["n3"] == (7, 42) and summary.node_checked["n1"] == (0, 42)


def test_a_failing_node_counts_failures_out_of_its_graded_runs(tmp_path: Path) -> None:
    summary = summarize(_rows(_store(tmp_path, _runs())))
    lemons = {(lm.node, lm.key): lm for lm in summary.lemons}
    assert list(lemons) == [("n2", "gpu.health")]
    lm = lemons[("n2", "gpu.health")]
    assert lm.count == 7
    assert lm.summary == "gpu.health failed in 7 of 35 runs in which it was checked (not checked in 7 more)"
    st = {(s.node, s.check): s for s in summary.stats}[("n2", "gpu.health")]
    assert (st.bad, st.graded, st.not_checked) == (7, 35, 7)
    # the other checks on n2 never failed: not lemons, although n2 was unreachable 7 times
    assert all(st.bad == 0 for st in summary.stats if st.node == "n2" and st.check != "gpu.health")
    assert "n2" in summary.unchecked_nodes and "No route to host" in summary.unchecked[0].cause
    # failures every 6 runs with passes between are flapping; the unreachable runs are not
    assert [(f.node, f.check, f.episodes) for f in summary.flapping] == [("n2", "gpu.health", 7)]


def test_partial_and_mixed_causes_name_the_most_common(tmp_path: Path) -> None:
    docs = []
    for i in range(10):
        results = _healthy("n1")
        if i in (1, 4, 7):
            results += _unreached("n1x", REFUSED)
        elif i in (2, 8):  # the connection broke mid-bundle: some checks graded, the rest lost
            results += [res("gpu.health", "n1x", "pass"), res("gpu.xid", "n1x", "pass")]
            results += [Result(check=c, node="n1x", status=Status.ERROR, summary=LOST) for c in CHECKS[2:]]
        else:
            results += _healthy("n1x")
        docs.append({"command": "run", "started": _iso(T0 + i * HOUR), "results": [r.to_dict() for r in results]})
    summary = summarize(_rows(_store(tmp_path, docs)))
    (u,) = summary.unchecked
    assert (u.node, u.count, u.runs, u.whole, u.cause_count) == ("n1x", 5, 10, 3, 3)
    assert u.summary == (f"n1x not checked in 5 of 10 runs: node not checked: {REFUSED} (3 of 5 runs); "
                         "2 of them in part (some checks graded)")
    assert u.sequence == "GNPGNGGNPG"
    assert not summary.lemons and not summary.flapping
    assert summarize(_rows(f"sqlite:///{tmp_path}/h.db"), Thresholds(unchecked_runs=6)).unchecked == []


def test_a_fail_beside_an_error_in_one_run_is_still_a_failure() -> None:
    rows = []
    for i in range(6):
        status = Status.FAIL if i % 2 == 0 else Status.PASS
        rows.append(Row(i, T0 + i, "run", "gpu.health", "n1", status, "x"))
        rows.append(Row(i, T0 + i, "run", "ib.hca", "n1", Status.ERROR, "output lost: timed out"))
    summary = summarize(rows)
    assert [(f.node, f.check) for f in summary.flapping] == [("n1", "gpu.health")]
    assert [lm.summary for lm in summary.lemons] == ["gpu.health failed in 3 of 6 runs in which it was checked"]
    assert summary.unchecked[0].summary == ("n1 not checked in 6 of 6 runs: output lost: timed out; "
                                            "6 of them in part (some checks graded)")


def test_prometheus_and_html_carry_the_not_checked_counts(tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    summary = summarize(_rows(_store(tmp_path, _runs())))
    fams = {f.name: f for f in text_string_to_metric_families(prometheus_text(summary))}
    nc = {(s.labels["node"], s.labels["check"]): s.value for s in fams["preflight_history_not_checked_runs"].samples}
    failed = {(s.labels["node"], s.labels["check"]): s.value for s in fams["preflight_history_failed_runs"].samples}
    graded = {(s.labels["node"], s.labels["check"]): s.value for s in fams["preflight_history_graded_runs"].samples}
    assert nc[("n3", "gpu.health")] == 7 and failed[("n3", "gpu.health")] == 0 and graded[("n3", "gpu.health")] == 35
    assert failed[("n2", "gpu.health")] == 7
    node_nc = {s.labels["node"]: s.value for s in fams["preflight_history_node_not_checked_runs"].samples}
    assert node_nc == {"n1": 0, "n2": 7, "n3": 7}
    page = html_report.render(Report.build("history", [], nodes=summary.nodes), history=summary)
    assert 'id="not-checked"' in page and "Connection refused" in page


# ---- damping: an ERROR is neither a hard fault nor a repeated failure ------------------------


def _err(node: str, check: str = "gpu.health", summary: str = LOST) -> list[Result]:
    return [Result(check=check, node=node, status=Status.ERROR, summary=summary),
            res("gpu.xid", node, "pass")]


def _fail(node: str) -> list[Result]:
    return [res("net.mtu", node, "fail", "jumbo frames lost"), res("gpu.xid", node, "pass")]


def _pass(node: str) -> list[Result]:
    return [res("net.mtu", node, "pass"), res("gpu.xid", node, "pass")]


def test_errors_are_not_hard_faults() -> None:
    d = Damping()
    for check in ("fabric.manager", "gpu.xid", "gpu.health"):
        r = Result(check=check, node="n1", status=Status.ERROR, summary=f"node not checked: {REFUSED}",
                   facts={"events": [{"xid": 79, "action": "RESTART_BM", "severity": "fail"}],
                          "gpus": [{"index": 0, "uncorrectable_ecc": 3}]})
        assert hard_fault(r, d) == ""
        dec = decide("n1", [r], [], d)
        assert not dec.drain and not dec.hard and dec.action == "unchecked" and dec.fail_streak == 0
    assert hard_fault(res("fabric.manager", "n1", "fail"), d)  # a graded one still is


def test_errors_neither_extend_nor_break_a_fail_streak() -> None:
    d = Damping(fail_runs=3, pass_runs=2)
    # fail, not checked, fail: two failing runs, not three
    two = decide("n1", _fail("n1"), [_fail("n1"), _err("n1")], d)
    assert not two.drain and two.fail_streak == 2 and two.action == "damped"
    # fail, not checked, fail, fail: three failing runs in a row (the unchecked one is transparent)
    three = decide("n1", _fail("n1"), [_fail("n1"), _err("n1"), _fail("n1")], d)
    assert three.drain and three.fail_streak == 3 and three.summary.startswith("fail 3/3 runs: ")
    # before: error, error, fail was a drain after three "failing" runs
    once = decide("n1", _fail("n1"), [_err("n1"), _err("n1")], d)
    assert not once.drain and once.fail_streak == 1


def test_a_node_not_checked_is_not_resumed_and_drains_as_not_checked() -> None:
    d = Damping(fail_runs=3, pass_runs=2)
    dec = decide("n1", _err("n1"), [_fail("n1"), _pass("n1")], d)
    assert not dec.resume and not dec.drain and dec.unchecked_streak == 1
    assert "neither a failure nor a pass" in dec.reason
    # a run not checked does not count towards resuming either: pass, unchecked, pass = 2 passes
    assert not decide("n1", _pass("n1"), [_fail("n1"), _err("n1")], d).resume
    assert decide("n1", _pass("n1"), [_fail("n1"), _pass("n1"), _err("n1")], d).resume
    # never checked K runs in a row: drained, and the reason says not checked, not failed
    gone = decide("n1", _err("n1"), [_err("n1"), _err("n1")], d)
    assert gone.drain and not gone.hard and gone.fail_streak == 0 and gone.unchecked_streak == 3
    assert gone.summary.startswith("not checked 3/3 runs: output lost") and "fail" not in gone.reason


# ---- the CLI: every output format of `preflight history` ------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="240")  # wide enough that rich does not wrap a finding
    env.pop("PREFLIGHT_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "preflight.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=env)


@pytest.mark.real
def test_history_command_shows_not_checked_apart(tmp_path: Path) -> None:
    url = _store(tmp_path, _runs())
    prom, page = tmp_path / "h.prom", tmp_path / "h.html"
    p = _cli("history", "--history", url, "--since", "all", "--json", "--html", str(page), "--prometheus", str(prom))
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["lemon_nodes"] == ["n2"] and doc["not_checked_nodes"] == ["n2", "n3"]
    assert doc["flapping_nodes"] == ["n2"] and "n3" not in doc["flapping_nodes"]
    n3 = {u["node"]: u for u in doc["not_checked"]}["n3"]
    assert n3["summary"].startswith("n3 not checked in 7 of 42 runs: node not checked: ssh: connect")
    st = {(s["node"], s["check"]): s for s in doc["stats"]}
    assert (st[("n3", "gpu.health")]["bad"], st[("n3", "gpu.health")]["not_checked"]) == (0, 7)
    assert doc["node_not_checked_runs"]["n3"] == {"not_checked": 7, "runs": 42}
    assert 'preflight_history_not_checked_runs{node="n3",check="gpu.health"} 7' in prom.read_text()
    assert 'id="not-checked"' in page.read_text()
    table = _cli("history", "--history", url, "--since", "all")
    assert table.returncode == 0, table.stderr
    out = " ".join(table.stdout.split())
    assert "not-checked n3: 7 of 42 runs" in out and "Connection refused" in out  # piped: one line per row
    assert "gpu.health failed in 7 of 35 runs in which it was checked" in out
    bad = _cli("history", "--history", url, "--unchecked-runs", "0")
    assert bad.returncode == 2 and "--unchecked-runs" in bad.stderr
