"""Sweep grading (pure): events -> results, the nccl-tests equivalence, command lines, chart."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from preflight import registry
from preflight.analyze import analyze
from preflight.model import Status
from preflight.profile import load
from preflight.sweep import launch, outcome
from preflight.sweep.plot import busbw_svg
from preflight.sweep.spec import SpecError, SweepSpec, busbw_factor, message_sizes, parse_event

HERE = Path(__file__).resolve().parent
TEST_PROFILE = str(HERE / "gloo-test.toml")
NODES = ["n1", "n2", "n3", "n4"]


def hello(rank: int, node: str) -> dict:
    return {"ev": "hello", "rank": rank, "world": 4, "local_rank": 0, "node": node, "pid": 40000 + rank,
            "device": "cpu", "model": "cpu", "backend": "gloo"}


def row(size: int, time_us: float, world: int = 4, wrong: int = 0) -> dict:
    algbw = size / (time_us * 1e-6) / 1e9
    return {"ev": "row", "bytes": size, "count": size // 4, "dtype": "float32", "iters": 3, "time_us": time_us,
            "p99_us": time_us * 1.1, "mean_us": time_us, "min_us": time_us, "algbw": algbw,
            "busbw": algbw * busbw_factor(world), "wrong": wrong}


def launched(events: list[dict], timed_out: bool = False, raw: dict | None = None) -> launch.Launched:
    base = [{"ev": "agent", "node": n} for n in NODES] + [hello(i, n) for i, n in enumerate(NODES)]
    return launch.Launched(events=base + events, timed_out=timed_out, raw=raw or {})


def spec(**kw: object) -> SweepSpec:
    s = SweepSpec(min_bytes=262144, max_bytes=1 << 20, iters=3, warmup=1, op_timeout_s=8, deadline_s=60,
                  pair_slow_ratio=0.2)
    for k, v in kw.items():
        setattr(s, k, v)
    return s


def grade(events: list[dict], timed_out: bool = False) -> tuple[list, outcome.SweepOutcome]:
    out = outcome.collect(launched(events, timed_out=timed_out), spec(), NODES)
    results, _ = outcome.grade(out, load(TEST_PROFILE))
    return results, out


def by(results: list, check: str, node: str = "cluster"):
    return next(r for r in results if r.check == check and r.node == node)


def test_sizes_and_spec_roundtrip() -> None:
    assert message_sizes(8, 1 << 20, 4, 4)[:3] == [8, 32, 128]
    assert message_sizes(8, 1000, 4, 4)[-1] == 1000  # the maximum is always measured
    assert message_sizes(1, 8, 2, 4) == [4, 8]
    s = SweepSpec(dtype="bfloat16", nodes=["a", "b"])
    assert SweepSpec.decode(s.encode()) == s
    with pytest.raises(SpecError):
        SweepSpec(dtype="complex").validate()
    with pytest.raises(SpecError):
        SweepSpec(min_bytes=10, max_bytes=5).validate()
    assert busbw_factor(8) == pytest.approx(1.75)
    assert parse_event("0: @@pfsweep {\"ev\": \"done\", \"rank\": 3}") == {"ev": "done", "rank": 3}
    assert parse_event("@@pfsweep {broken") is None


@pytest.mark.parametrize(("fixture", "times", "status"), [
    ("allreduce_4node_ok.txt", (2184.53, 4369.07), Status.PASS),
    ("allreduce_4node_slow.txt", (157286.0, 629145.0), Status.FAIL),
])
def test_sweep_rows_grade_like_the_nccl_tests_file(fixture: str, times: tuple, status: Status) -> None:
    results, out = grade([row(262144, times[0]), row(1 << 20, times[1])])
    mine = by(results, "nccl.allreduce")
    files = analyze(registry.load(), [HERE / "fixtures" / fixture], profile_name=TEST_PROFILE)
    theirs = next(r for r in files if r.check == "nccl.allreduce")
    assert mine.status is theirs.status is status
    assert mine.summary == theirs.summary
    assert mine.facts["peak_busbw"] == pytest.approx(max(r["busbw"] for r in out.rows))
    assert {"bytes", "time_us", "algbw", "busbw", "p99_us", "expected", "status"} <= set(mine.facts["rows"][0])


def test_wrong_values_fail() -> None:
    results, _ = grade([row(262144, 2184.53), row(1 << 20, 4369.07, wrong=17)])
    r = by(results, "nccl.allreduce")
    assert r.status is Status.FAIL and "wrong" in r.summary
    assert r.facts["rows"][1]["status"] == "fail"


def test_stall_names_size_ranks_and_isolated_node() -> None:
    ev = [row(262144, 2184.53), {"ev": "begin", "rank": 0, "phase": "allreduce", "bytes": 1 << 20}]
    ev += [{"ev": "stall", "rank": r, "node": NODES[r], "phase": "allreduce", "bytes": 1 << 20,
            "error": "RuntimeError: Timed out waiting 8000ms for recv operation to complete"} for r in range(4)]
    ev += [{"ev": "pair", "a": "n1", "b": "n2", "status": "ok", "bw_gbps": 1.0, "lat_us": 100.0, "bytes": 262144},
           {"ev": "pair", "a": "n3", "b": "n4", "status": "stalled", "stalled_bytes": 4096, "error": "Timed out"},
           {"ev": "pair", "a": "n2", "b": "n3", "status": "stalled", "stalled_bytes": 4096, "error": "Timed out"},
           {"ev": "pair", "a": "n4", "b": "n1", "status": "ok", "bw_gbps": 0.9, "lat_us": 90.0, "bytes": 262144}]
    results, _ = grade(ev)
    ar = by(results, "nccl.allreduce")
    assert ar.status is Status.FAIL
    assert "stalled at 1 MB" in ar.summary and "n3" in ar.summary
    assert ar.facts["stuck_nodes"] == NODES
    assert by(results, "nccl.pingpong", "n3").status is Status.FAIL
    assert by(results, "nccl.pingpong").facts["culprits"] == ["n3"]
    assert by(results, "nccl.transport").status is Status.SKIP


def test_deadline_kill_names_in_flight_ranks() -> None:
    ev = [row(262144, 2184.53)] + [{"ev": "begin", "rank": r, "phase": "allreduce", "bytes": 1 << 20}
                                   for r in (1, 2)]
    results, _ = grade(ev, timed_out=True)
    ar = by(results, "nccl.allreduce")
    assert ar.status is Status.FAIL and "killed at the deadline" in ar.summary
    assert ar.facts["stuck_ranks"] == [1, 2]


def test_node_that_never_started_is_an_error_on_that_node() -> None:
    out = outcome.collect(launch.Launched(events=[{"ev": "agent", "node": n} for n in NODES[:3]],
                                          raw={"n4": ["ssh: connect to host n4 port 22: Connection timed out"]}),
                          spec(), NODES)
    results, _ = outcome.grade(out, load(TEST_PROFILE))
    r = by(results, "nccl.allreduce", "n4")
    assert r.status is Status.ERROR and "Connection timed out" in r.evidence[0]


def test_expect_busbw_override_keeps_provenance() -> None:
    prof = outcome.effective_profile(load("generic"), expect_busbw=5.0, expect_min_bytes=1024)
    assert prof.get("nccl.allreduce.multi_node.peak_busbw_fail") == 5.0
    assert "--expect-busbw" in prof.source("nccl.allreduce.multi_node.peak_busbw_fail")
    exp, st = outcome.expected_row({"bytes": 4096, "busbw": 1.0, "time_us": 1.0, "wrong": 0}, prof, True)
    assert st is Status.FAIL and ">= 5" in exp


def test_h100_row_expectations_come_from_the_profile() -> None:
    prof = load("h100-sxm-8x")
    exp, st = outcome.expected_row({"bytes": 1 << 20, "busbw": 1.0, "time_us": 500.0, "wrong": 0}, prof, False)
    assert "<= 200 us" in exp and st is Status.WARN
    exp, st = outcome.expected_row({"bytes": 1 << 30, "busbw": 20.0, "time_us": 14000.0, "wrong": 0}, prof, True)
    assert st is Status.FAIL and "TCP-fallback" in exp


def test_command_lines() -> None:
    s = spec(socket_ifname="eth0")
    a = launch.agent_argv("/opt/py/bin/python", s, "n2", 1, 8, 16, "10.0.0.1", 29500)
    assert a[:4] == ["/opt/py/bin/python", "-m", "preflight.sweep.worker", "agent"]
    assert a[a.index("--node-rank") + 1] == "1" and "--watch-stdin" in a
    srun = launch.srun_argv(4, 8, s, "gpu001", 29400, "job77", partition="batch")
    assert srun[0] == "srun" and "--nodes=4" in srun and "--ntasks-per-node=1" in srun
    # each node first answers through the worker's torchrun door, which then execs torchrun
    i = srun.index("torchrun")
    assert srun[i - 2:i] == ["-m", "preflight.sweep.worker"] and srun[i + 1] == "--"
    tr = srun[i + 2:]
    assert "--nnodes=4" in tr and "--nproc-per-node=8" in tr and "--rdzv-backend=c10d" in tr
    assert "--rdzv-endpoint=gpu001:29400" in tr and "--rdzv-id=job77" in tr
    assert tr[tr.index("-m") + 1:tr.index("-m") + 3] == ["preflight.sweep.worker", "rank"]
    assert any(x.startswith("--export=ALL,GLOO_SOCKET_IFNAME=eth0") for x in srun)
    for bad in ("-oProxyCommand=x", "a;b", "$(x)", ""):
        with pytest.raises(launch.LaunchError):
            launch.check_name(bad)
        with pytest.raises(launch.LaunchError):
            launch.agent_argv("/opt/py/bin/python", s, bad, 1, 8, 16, "10.0.0.1", 29500)
    with pytest.raises(launch.LaunchError):
        launch.check_ifname("eth0;rm")


def test_watchdog_bounds_a_hung_process() -> None:
    import time

    t = time.monotonic()
    got = launch.run_processes({"hang": ["sleep", "30"], "quick": ["echo", "@@pfsweep {\"ev\":\"done\",\"rank\":0}"]},
                               deadline_s=1.0, grace_s=1.0)
    assert time.monotonic() - t < 6
    assert got.timed_out and got.events[0]["ev"] == "done"
    missing = launch.run_processes({"x": ["/nonexistent/tool"]}, deadline_s=1.0)
    assert "cannot start" in missing.raw["x"][0]


def test_svg_chart_is_valid_xml() -> None:
    svg = busbw_svg([8, 1024, 1 << 20], [1e-6, 0.01, 0.3], "t", floor_fail=0.012, floor_warn=0.05,
                    floor_from=1024, statuses=["pass", "pass", "fail"])
    root = ET.fromstring(svg)
    assert root.tag.endswith("svg") and svg.count("<circle") == 3
    assert "no data" in busbw_svg([], [], "empty")
