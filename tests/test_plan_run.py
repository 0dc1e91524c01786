"""engine.plan_run and the prologue's drain/damping decision (history.gate.settle): the
planning the command line used to do, tested without running a probe."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from preflight import engine
from preflight.history.damping import Decision
from preflight.history.gate import Gate, settle
from preflight.model import Result, Status
from preflight.report import Report
from preflight.transport.base import Transport


class FakeTransport(Transport):
    name = "fake"

    def __init__(self) -> None:
        self.closed = False

    def collect(self, bundles: Any, progress: Any = None) -> Any:
        raise AssertionError("planning must not collect")

    def resolve_addresses(self, nodes: Sequence[str]) -> dict[str, str]:
        return {n: f"10.0.0.{i + 1}" for i, n in enumerate(nodes)}

    def close(self) -> None:
        self.closed = True


@pytest.fixture()
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeTransport:
    tr = FakeTransport()
    monkeypatch.setattr(engine, "make_transport", lambda kind, nodes, o: tr)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    return tr


def test_this_node_alone_is_local_with_no_cross_node_checks() -> None:
    from preflight.transport.local import LocalTransport, local_node_name

    plan = engine.plan_run(engine.CheckRequest(command="node", node_only=True), engine.Config())
    assert plan.nodes == [local_node_name()] and isinstance(plan.transport, LocalTransport)
    assert plan.cluster_checks == [] and plan.peers is None
    assert plan.checks and all(c.node_local for c in plan.checks)


def test_several_nodes_get_a_ring_by_address_and_the_cross_node_checks(fake: FakeTransport) -> None:
    plan = engine.plan_run(engine.CheckRequest(nodes=["a", "b", "c"], transport="ssh"), engine.Config())
    assert plan.transport is fake and plan.nodes == ["a", "b", "c"]
    assert plan.addresses == {"10.0.0.1": "a", "10.0.0.2": "b", "10.0.0.3": "c"}
    assert plan.peers is not None
    ring = plan.peers(["a", "c"])  # drawn over the nodes that answered
    assert ring == {"a": ["10.0.0.3"], "c": ["10.0.0.1"]}
    assert {c.id for c in plan.cluster_checks} >= {"cluster.mtu"}


def test_only_net_mtu_keeps_the_mtu_path_matrix(fake: FakeTransport) -> None:
    plan = engine.plan_run(engine.CheckRequest(nodes=["a", "b"], transport="ssh", only=["net.mtu"]), engine.Config())
    assert [c.id for c in plan.cluster_checks] == ["cluster.mtu"]
    assert all(c.id.startswith("net.mtu") for c in plan.checks)


def test_skip_drops_a_cross_node_check_and_the_half_of_a_skipped_node_check(fake: FakeTransport) -> None:
    every = {c.id for c in engine.plan_run(engine.CheckRequest(nodes=["a", "b"], transport="ssh"),
                                           engine.Config()).cluster_checks}
    assert {"cluster.mtu", "cluster.clock", "cluster.versions"} <= every
    for skip, gone in ((["node.clock"], {"cluster.clock"}), (["net.mtu"], {"cluster.mtu"}),
                       (["cluster.versions"], {"cluster.versions"}), (["cluster"], every)):
        plan = engine.plan_run(engine.CheckRequest(nodes=["a", "b"], transport="ssh", skip=skip), engine.Config())
        assert {c.id for c in plan.cluster_checks} == every - gone, skip
        assert not any(c.id in skip for c in plan.checks)


def test_expect_nodes_alone_keeps_the_node_count_check() -> None:
    plan = engine.plan_run(engine.CheckRequest(command="node", node_only=True, expect_nodes=2), engine.Config())
    assert [c.id for c in plan.cluster_checks] == ["cluster.nodes"]
    assert plan.options.extra["expect_nodes"] == 2


@pytest.mark.parametrize(("req", "message"), [
    (engine.CheckRequest(transport="srun"), "--transport srun needs nodes"),
    (engine.CheckRequest(nodes=["a", "b"], transport="local"), "--transport local runs on this node only"),
    (engine.CheckRequest(nodes=["a", "b"], transport="mpi"), "--transport 'mpi': use auto, local, ssh or srun"),
    (engine.CheckRequest(only=["no.such.check"]), "--only names unknown check 'no.such.check'"),
    (engine.CheckRequest(only=["nccl.allreduce"], node_only=True), "no check selected"),
])
def test_what_cannot_run_is_a_usage_error(req: engine.CheckRequest, message: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(engine.UsageError, match=message.replace("(", r"\(")):
        engine.plan_run(req, engine.Config())


def _prologue_report(status: Status) -> Report:
    return Report.build("prologue", [Result(check="gpu.xid", node="n1", status=status, summary="Xid 79"),
                                     Result(check="ib.port", node="n1", status=status, summary="port down")],
                        nodes=["n1"])


def test_settle_without_damping_drains_on_no_go_with_the_worst_result() -> None:
    s = settle(_prologue_report(Status.FAIL), Gate())
    assert s.code == 1 and s.drain is not None and s.drain[1].endswith("(+1 more)") and not s.resume
    assert settle(_prologue_report(Status.PASS), Gate()).drain is None


def test_settle_with_damping() -> None:
    below_k = Gate(decision=Decision(node="n1", drain=False, resume=False, reason="1 of 3 failing runs"))
    s = settle(_prologue_report(Status.FAIL), below_k)
    assert s.code == 0 and s.drain is None  # damped: neither drains nor fails the job
    counted = Gate(decision=Decision(node="n1", drain=True, resume=False, reason="3 failing runs",
                                     check="gpu.xid", summary="Xid 79 in 3 runs"))
    s = settle(_prologue_report(Status.FAIL), counted)
    assert s.code == 1 and s.drain == ("gpu.xid", "Xid 79 in 3 runs")
    passing = Gate(decision=Decision(node="n1", drain=False, resume=True, reason="3 passing runs"))
    s = settle(_prologue_report(Status.PASS), passing)
    assert s.code == 0 and s.drain is None and s.resume


def test_sweep_launch_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert engine.sweep_launch("auto", [], None, 1) == ("local", [], 1)
    assert engine.sweep_launch("auto", ["a", "b"], None, 2) == ("ssh", ["a", "b"], 2)
    assert engine.sweep_launch("ssh", [], 4, 1) == ("local", [], 4)  # --nproc: this machine
    with pytest.raises(engine.UsageError, match="--transport ssh needs --hosts"):
        engine.sweep_launch("ssh", [], None, 1)
    monkeypatch.setenv("SLURM_JOB_ID", "5")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-2]")
    assert engine.sweep_launch("auto", [], None, 1) == ("srun", ["n1", "n2"], 1)
    assert engine.sweep_launch("auto", ["a"], None, 1) == ("ssh", ["a"], 1)  # --hosts inside an allocation
    with pytest.raises(engine.UsageError, match="--nproc runs on this machine"):
        engine.sweep_launch("auto", ["a"], 4, 1)
    monkeypatch.delenv("SLURM_JOB_NODELIST")
    monkeypatch.delenv("SLURM_NODELIST", raising=False)
    with pytest.raises(engine.UsageError, match="--transport srun needs an allocation"):
        engine.sweep_launch("srun", [], None, 1)


def test_an_exclude_naming_unknown_hosts_is_one_warning_and_the_run_goes_on() -> None:
    said: list[str] = []
    left = engine.exclude_nodes(["gpu1", "gpu2", "gpu3"], "gpu2,node9,node10,node11", warn=said.append)
    assert left == ["gpu1", "gpu3"]
    assert said == ["preflight: --exclude names node[9-11], not among the nodes checked"]
    said.clear()
    assert engine.exclude_nodes(["gpu1", "gpu2"], "gpu2", warn=said.append) == ["gpu1"] and said == []


def test_the_cli_warns_on_stderr_about_an_unknown_excluded_host(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from preflight.transport.local import local_node_name

    env = {k: v for k, v in os.environ.items() if k not in ("PREFLIGHT_CONFIG", "SLURM_JOB_ID")}
    p = subprocess.run([sys.executable, "-m", "preflight.cli", "run", "--hosts", local_node_name(), "--exclude",
                        "node9", "--only", "gpu.xid", "--no-report", "--history", "off", "--no-sweep"],
                       capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert p.returncode != 2, p.stderr  # not a usage error: the run went on
    assert p.stderr.splitlines().count("preflight: --exclude names node9, not among the nodes checked") == 1, p.stderr
    assert f"{local_node_name()}" in p.stdout or "gpu.xid" in p.stdout, p.stdout


def test_a_disabled_cross_node_check_is_one_skip_for_the_cluster(fake: FakeTransport,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The kill switch over a cross-node check (cluster.versions, the MTU path matrix): one SKIP
    for the cluster, not one per node; a disabled node check is still a SKIP on each node."""
    cfg = engine.Config(disabled_checks=["cluster.versions", "cluster.mtu", "ib.hca"], path="/etc/preflight.toml")
    plan = engine.plan_run(engine.CheckRequest(nodes=["a", "b", "c"], transport="ssh"), cfg)
    assert not {"cluster.versions", "cluster.mtu"} & {c.id for c in plan.cluster_checks}
    monkeypatch.setattr(engine, "run", lambda *a, **k: ([], {}))
    report = engine.execute(plan, "run")
    got = sorted((r.check, r.node, r.status.value) for r in report.results)
    assert got == [("cluster.mtu", "cluster", "skip"), ("cluster.versions", "cluster", "skip"),
                   ("ib.hca", "a", "skip"), ("ib.hca", "b", "skip"), ("ib.hca", "c", "skip")], got
    assert {r.summary for r in report.results} == {"disabled by config (/etc/preflight.toml)"}
    assert fake.closed
