"""decide's rules, one at a time, over facts built by hand: which rule speaks first, and what its
verdict says (culprit, evidence lines, action)."""

from __future__ import annotations

from preflight.parsers.torch_log import ChildFailure, Crash
from preflight.triage import attribute as at

T0 = 1_795_431_000.0


def _facts(*states: at.RankState, **kw: object) -> at.Facts:
    facts = at.Facts(nodes=["n1", "n2"], **kw)  # type: ignore[arg-type]
    for st in states:
        facts.ranks[st.rank] = st
        facts.world.add(st.rank)
    return facts


def _exit(rank: int, code: int, signal: str = "", root: bool = False) -> ChildFailure:
    return ChildFailure(rank=rank, host="n1", exitcode=code, pid=100 + rank, signal=signal,
                        time="2026-11-23_09:10:00", lines=[], root_cause=root)


def _crashed(rank: int, node: str, t: float, what: str = "ValueError", secondary: bool = False) -> at.RankState:
    st = at.RankState(rank=rank, node=node)
    st.record = {"type": what, "message": "bad batch", "step": 7, "section": "step", "stack": ["a.py:1\nb.py:2"],
                 "secondary": secondary}
    st.fail_at(t, "crash record")
    return st


def test_a_crash_is_named_with_the_later_crashes_and_the_bystanders() -> None:
    first = _crashed(0, "n1", T0)
    second = _crashed(1, "n2", T0 + 1.5, "KeyError")
    victim = at.RankState(rank=2, node="n2", end={"how": "signal", "signal": "SIGTERM"})
    waiting = at.RankState(rank=3, node="n2", end={"how": "hang", "exit_code": 75})
    v = at.decide(_facts(first, second, victim, waiting))
    assert v.category == "software crash" and v.culprits == [{"node": "n1", "ranks": [0]}]
    assert v.summary == "rank 0 on n1 crashed at step 7 in section 'step': ValueError: bad batch"
    assert "rank 1 also raised 1.50 s later: KeyError: bad batch" in v.evidence
    assert "rank 0 traceback: b.py:2" in v.evidence
    assert any(e.startswith("rank 2 ended by SIGTERM from outside") for e in v.evidence)
    assert any(e.startswith("rank 3 exit 75 / hang record") for e in v.evidence)


def test_an_exit_code_without_a_traceback_is_a_crash_and_the_launcher_is_outweighed() -> None:
    segv = at.RankState(rank=1, node="n2", exits=[_exit(1, -11, "SIGSEGV")])
    segv.fail_at(T0, "runtime.exit event")
    named = at.RankState(rank=0, node="n1", exits=[_exit(0, 1, root=True)])
    v = at.decide(_facts(segv, named))
    assert v.category == "software crash" and v.culprits == [{"node": "n2", "ranks": [1]}]
    assert v.summary == "rank 1 on n2 crashed: exit code -11 (SIGSEGV)"
    assert any("the launcher's Root Cause names rank 0 (exit code 1)" in e and "outweighs it" in e for e in v.evidence)
    assert "install preflight.runtime.crash" in v.action


def test_sigkill_as_the_launchers_root_cause_is_the_oom_killer_suspect() -> None:
    killed = at.RankState(rank=2, node="n2", exits=[_exit(2, -9, "SIGKILL", root=True)])
    termed = at.RankState(rank=0, node="n1", exits=[_exit(0, -15, "SIGTERM")])
    v = at.decide(_facts(killed, termed))
    assert v.category == "software crash" and v.summary.startswith("rank 2 on n2 was killed by a signal (SIGKILL)")
    assert "OOM killer" in v.action and v.culprits == [{"node": "n2", "ranks": [2]}]


def test_a_hang_names_the_rank_that_never_entered_and_fr_trace_adds_its_missing_rank() -> None:
    from preflight.parsers.flight_recorder import FRTraceFinding

    a = at.RankState(rank=0, node="n1", reported=True, entered=12, stuck=12, stuck_op="ALLREDUCE")
    b = at.RankState(rank=1, node="n2", entered=11, entered_op="ALLREDUCE")
    c = at.RankState(rank=2, node="n2", reported=True, entered=12, stuck=12, end={"how": "hang", "exit_code": 75})
    finding = FRTraceFinding(kind="missing", seq=12, op="ALLREDUCE", missing_ranks=[3], lines=["rank 3 missing"])
    v = at.decide(_facts(a, b, c, fr_findings=[("n1:fr", finding)]))
    assert v.category == "communication hang" and v.collective == {"op": "ALLREDUCE", "seq": 12}
    assert v.culprits == [{"node": "n2", "ranks": [1]}, {"node": "unknown", "ranks": [3]}]
    assert v.evidence[0] == "ranks 0, 2 waited in ALLREDUCE seq 12"
    assert "rank 1 never entered ALLREDUCE seq 12: its last was seq 11" in v.evidence
    assert "n1:fr: fr_trace: rank 3 missing (ALLREDUCE; missing ranks [3])" in v.evidence
    assert any(e.startswith("rank 2 ended with exit code 75") for e in v.evidence)
    assert "--exclude=n2" in v.action


def test_a_node_fault_after_the_first_failure_is_still_the_cause_within_the_window() -> None:
    crash = _crashed(0, "n1", T0)
    fault = at.NodeFault(node="n2", check="gpu.xid", summary="Xid 79", evidence=["e1"], remedy="reseat the GPU",
                         time=T0 + 30)
    late = at.NodeFault(node="n1", check="gpu.xid", summary="Xid 79", evidence=[], remedy="",
                        time=T0 + at.FAULT_WINDOW_AFTER_S + 1)
    v = at.decide(_facts(crash, node_faults=[fault, late]), {"job_id": "5"})
    assert v.category == "hardware" and [c["node"] for c in v.culprits] == ["n2"]
    assert "n2:gpu.xid: Xid 79 (30 s after the first failure)" in v.evidence
    assert v.action.endswith(". reseat the GPU") and "scontrol requeue 5" in v.action
    assert [f["correlated"] for f in v.node_faults] == [True, False]


def test_stragglers_are_a_slowdown_placed_on_their_only_host() -> None:
    v = at.decide(_facts(at.RankState(rank=0, node="n1"), at.RankState(rank=5),
                         stragglers=[{"source": "n1:events", "summary": "rank 5 slow", "ranks": [5],
                                      "hosts": ["n2"], "time": T0}]))
    assert v.category == "slowdown" and v.culprits == [{"node": "n2", "ranks": [5]}]
    assert v.summary == "slowdown: stragglers 5 on n2"


def test_every_rank_ended_cleanly_is_none_and_anything_less_is_unknown() -> None:
    clean = [at.RankState(rank=r, node="n1", end={"how": "clean", "exit_code": 0}) for r in (0, 1)]
    assert at.decide(_facts(*clean)).category == "none"
    lost = at.RankState(rank=2, node="n2", record={"type": "DistBackendError", "message": "Connection closed by peer",
                                                   "secondary": True})
    termed = at.RankState(rank=3, node="n2", end={"how": "signal", "signal": "SIGTERM"})
    v = at.decide(_facts(*clean, lost, termed))
    assert v.category == "unknown"
    assert v.summary == "insufficient evidence: ranks failed, but none recorded a failure of its own"
    assert any(e.startswith("rank 2 failed on a lost peer (DistBackendError: Connection closed by peer)")
               for e in v.evidence)
    assert any(e.startswith("rank 3 were ended from outside (SIGTERM)") for e in v.evidence)
    assert at.decide(at.Facts()).summary.startswith("insufficient evidence: nothing from the job")


def test_a_traceback_in_a_log_counts_when_no_crash_record_exists() -> None:
    st = at.RankState(rank=4, node="n2", crashes=[Crash(exception="RuntimeError", message="CUDA error",
                                                        lines=["x.py:3"], secondary=False, rank=4)])
    v = at.decide(_facts(st))
    assert v.category == "software crash" and v.summary == "rank 4 on n2 crashed: RuntimeError: CUDA error"


def _kernel_log_kill(pid: int, t: float) -> str:
    from datetime import datetime

    stamp = datetime.fromtimestamp(t).strftime("%a %b %d %H:%M:%S %Y")
    return (f"[{stamp}] Out of memory: Killed process {pid} (python) total-vm:98211044kB, anon-rss:64179832kB, "
            "file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:126512kB oom_score_adj:0\n")


def test_an_oom_kill_of_another_pid_is_offered_only_when_it_came_with_the_failure() -> None:
    """A SIGKILLed rank whose pid the kernel log does not name: an OOM kill of another pid (a
    container's pid namespace) seconds before the failure may be it; one 50 minutes before is an
    earlier job's and is not offered."""
    from preflight.parsers import oom_kill

    for before, offered in ((50 * 60.0, False), (8.0, True)):
        killed = at.RankState(rank=2, node="n2", exits=[_exit(2, -9, "SIGKILL", root=True)], pids={4242})
        killed.fail_at(T0, "launcher")
        termed = at.RankState(rank=0, node="n1", exits=[_exit(0, -15, "SIGTERM")])
        facts = _facts(killed, termed)
        facts.oom["n2"] = oom_kill.parse(_kernel_log_kill(777, T0 - before), origin="n2:kernel-log")
        v = at.decide(facts)
        line = next(e for e in v.evidence if "no OOM-killer line for pid 4242" in e)
        assert ("it killed pid 777 (python) 8 s before the first failure" in line) is offered, line
        assert ("the signal came from elsewhere" in line) is not offered, line
