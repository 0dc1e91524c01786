"""Every planned result exists: whatever a run loses, each (node, planned check) has exactly one
result.

A property test over random loss patterns. The transport is the engine's real `Transport`
interface; every capture it hands back is real: each probe is run once on this machine by the
real probe runner against the fake tools of a healthy 8xH100 node (the jumbo and small pings,
which would leave the machine, are the real ping output of the fixtures with the peer's
address). Then, per seed, it loses what a fleet loses: a node that cannot be reached, an SSH
session that stalls after some captures (half of them arrived), a probe whose output is lost
or absent, a probe that timed out, a tool that is missing, phase 2 lost for a node, a node left
out of the transport's answer, a transport that raises, a cross-node input (ofed, uname -r, the
NCCL libraries, the environment) that never came back.

What "planned for a node" means: every node check on every node; a cross-node check that
compares nodes (cluster.versions, cluster.nccl_env) once on every node; a cross-node check about
the nodes together (cluster.mtu, cluster.clock, cluster.nodes) once on `cluster`. Results the
engine adds about a node itself (node.reachable, node.responsive, profile.detect) are at most one
per node. A node that lost anything is never GO (no verdict from missing evidence).
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from preflight import engine, registry
from preflight.grading import decide
from preflight.model import CLUSTER, Capture, CaptureState, Result, Status
from preflight.probes import Probe, run_probe
from preflight.registry import Options
from preflight.transport.base import NodeOutcome, ProgressFn, Transport, stalled
from tests import fakes, scenarios

NODES = ["n1", "n2", "n3", "n4"]
ADDR = {n: f"10.77.0.{i + 1}" for i, n in enumerate(NODES)}
SEEDS = list(range(40))
PER_NODE = {"cluster.versions", "cluster.nccl_env"}  # cross-node checks that compare nodes: one result each
NODE_ROOTS = {"node.reachable", "node.responsive", "profile.detect"}  # results about the node itself
CROSS_INPUTS = ("ofed", "uname-r", "nccl-libs", "env")
PING = scenarios.FIX / "ping"
# what a node's fate loses: evidence (the node must not be GO) or not (a missing optional tool)
LOSSES = ("unreachable", "stall", "probe_lost", "probe_absent", "probe_timeout", "phase2_lost", "omitted",
          "omitted2", "cross_input")
FATES = ("ok", "ok", "tool_missing", *LOSSES)


class Recorded:
    """Each probe's real capture on a healthy node with fake tools, run once and kept."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self.kept: dict[str, Capture] = {}

    def capture(self, probe: Probe) -> Capture:
        if probe.name.startswith("ping-"):
            return self._ping(probe)
        if probe.name not in self.kept:
            saved = dict(os.environ)
            os.environ.update(self.env)
            try:
                self.kept[probe.name] = run_probe(probe, timeout=min(probe.timeout, 20.0))
            finally:
                os.environ.clear()
                os.environ.update(saved)
        return replace(self.kept[probe.name])

    @staticmethod
    def _ping(probe: Probe) -> Capture:
        """The fixture's real ping output, addressed to the probe's peer with its size."""
        argv = list(probe.commands[0])
        peer, size = argv[-1], int(argv[argv.index("-s") + 1])
        text = (PING / ("small_ok.txt" if "-small-" in probe.name else "jumbo_ok.txt")).read_text()
        text = text.replace("10.45.3.22", peer).replace("8972(9000)", f"{size}({size + 28})")
        text = text.replace("8980 bytes", f"{size + 8} bytes")
        return Capture(probe=probe.name, argv=argv, state=CaptureState.OK, stdout=text, rc=0, duration=0.4,
                       timeout=probe.timeout, source=f"probe:{probe.name}")


def _gone(probe: Probe, how: str) -> Capture | None:
    """A capture that did not arrive usable: absent (None), LOST, TIMEOUT or MISSING."""
    argv = list(probe.commands[0]) if probe.commands else []
    if how == "absent":
        return None
    if how == "lost":
        return Capture(probe=probe.name, argv=argv, state=CaptureState.LOST, timeout=probe.timeout,
                       reason="the connection dropped before its output came back", source=f"probe:{probe.name}")
    if how == "timeout":
        return Capture(probe=probe.name, argv=argv, state=CaptureState.TIMEOUT, timeout=probe.timeout,
                       duration=probe.timeout, source=f"probe:{probe.name}",
                       reason=f"probe {probe.name} ({' '.join(argv)}) timed out after {probe.timeout:g} s")
    return Capture(probe=probe.name, argv=argv, state=CaptureState.MISSING, rc=127, source=f"probe:{probe.name}",
                   reason=f"{argv[0] if argv else probe.name}: command not found")


class LossyTransport(Transport):
    """The engine's transport interface over recorded real captures, losing what `fates` say."""

    name = "lossy"

    def __init__(self, recorded: Recorded, rnd: random.Random, fates: dict[str, str], raise_phase2: bool) -> None:
        self.recorded, self.rnd, self.fates, self.raise_phase2 = recorded, rnd, fates, raise_phase2
        self.phase = 0

    def resolve_addresses(self, nodes: Sequence[str]) -> dict[str, str]:
        return {n: ADDR[n] for n in nodes}

    def collect(self, bundles: Mapping[str, Sequence[Probe]], progress: ProgressFn | None = None
                ) -> dict[str, NodeOutcome]:
        self.phase += 1
        if self.phase == 2 and self.raise_phase2:
            raise RuntimeError("a bug in the transport")
        out: dict[str, NodeOutcome] = {}
        for node, probes in bundles.items():
            outcome = self._node(node, list(probes))
            if outcome is not None:
                out[node] = outcome
        return out

    def _node(self, node: str, probes: list[Probe]) -> NodeOutcome | None:
        fate, first = self.fates[node], self.phase == 1
        if (fate == "omitted" and first) or (fate == "omitted2" and not first):
            return None
        if fate == "unreachable" and first:
            return NodeOutcome(node=node, error=f"{node} ({ADDR[node]}:22) refused the connection: no SSH server "
                                                "listening", detail={"kind": "refused", "stage": "connect"})
        if fate == "phase2_lost" and not first:
            return NodeOutcome(node=node, error=f"{node} dropped the connection while running the probes",
                               detail={"kind": "disconnected", "stage": "command"})
        caps = {p.name: self.recorded.capture(p) for p in probes}
        out = NodeOutcome(node=node, captures=caps)
        if fate == "stall" and first:
            for p in probes[self.rnd.randrange(len(probes)):]:  # the rest never came back
                del caps[p.name]
            out.error = (f"SSH stalled after authentication with {node} ({ADDR[node]}:22): the command was never "
                         "acknowledged while the small handshake packets got through")
            out.detail = {"kind": "timeout", "stage": "command"}
        self._lose(fate, probes, caps)
        return out

    def _lose(self, fate: str, probes: list[Probe], caps: dict[str, Capture]) -> None:
        how = {"probe_lost": "lost", "probe_absent": "absent", "probe_timeout": "timeout", "tool_missing": "missing",
               "cross_input": self.rnd.choice(["absent", "lost", "timeout"])}.get(fate)
        if how is None:
            return
        pool = [p for p in probes if p.name in CROSS_INPUTS] if fate == "cross_input" else probes
        for p in self.rnd.sample(pool, k=min(len(pool), self.rnd.randint(1, 3))):
            cap = _gone(p, how)
            if cap is None:
                caps.pop(p.name, None)
            else:
                caps[p.name] = cap


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    tmp = tmp_path_factory.mktemp("every-result")
    bin_dir = fakes.install(tmp / "bin", scenarios.TOOLS)
    yield Recorded(fakes.env_for(bin_dir, scenarios.healthy_h100(tmp / "sc")))


def _ring(answered: list[str]) -> dict[str, list[str]]:
    from preflight import inventory

    return {n: [ADDR[p] for p in ps] for n, ps in inventory.ring_peers(answered).items()}


def _run(recorded: Recorded, seed: int) -> tuple[list[Result], dict[str, str], list[str], list[str]]:
    rnd = random.Random(seed)
    fates = {n: rnd.choice(FATES) for n in NODES}
    reg = registry.load()
    checks = engine.select(reg)
    cluster = [c for c in reg.cluster_checks.values()]
    opts = Options(extra={"expect_nodes": len(NODES)})
    transport = LossyTransport(recorded, rnd, fates, raise_phase2=rnd.random() < 0.1)
    results, _ = engine.run(reg, checks, list(NODES), transport, profile_name="auto", options=opts, peers=_ring,
                            cluster_checks=cluster, addresses={a: n for n, a in ADDR.items()})
    return results, fates, [c.id for c in checks], [c.id for c in cluster]


@pytest.mark.parametrize("seed", SEEDS)
def test_every_node_has_exactly_one_result_per_planned_check(recorded: Recorded, seed: int) -> None:
    results, fates, checks, cluster = _run(recorded, seed)
    count = Counter((r.node, r.check) for r in results)
    why = f"seed {seed}, fates {fates}"
    for node in NODES:  # per node: every node check, every comparing cross-node check, once
        wrong = {c: count[(node, c)] for c in [*checks, *PER_NODE] if count[(node, c)] != 1}
        assert not wrong, f"{node}: {wrong} ({why})"
        extra = {c: k for (n, c), k in count.items() if n == node and c not in checks and c not in cluster}
        assert set(extra) <= NODE_ROOTS and all(k == 1 for k in extra.values()), f"{node}: {extra} ({why})"
    for cid in cluster:  # per check: on every node, or once about the nodes together
        on_nodes = [count[(n, cid)] for n in NODES]
        if cid in PER_NODE:
            assert on_nodes == [1] * len(NODES) and count[(CLUSTER, cid)] == 0, f"{cid}: {on_nodes} ({why})"
        else:
            assert on_nodes == [0] * len(NODES) and count[(CLUSTER, cid)] == 1, f"{cid}: {on_nodes} ({why})"
    assert not [k for k in count if k[0] not in NODES and k[0] != CLUSTER], why
    bad = decide(results).bad_nodes
    lost = [n for n, f in fates.items() if f in LOSSES]
    assert set(lost) <= set(bad), f"a node that lost evidence is not GO: {lost} vs {bad} ({why})"


def test_the_seeds_cover_every_fate_and_a_raising_transport() -> None:
    """The property test above is only as good as its patterns: every fate is drawn."""
    drawn, raised = set(), 0
    for seed in SEEDS:
        rnd = random.Random(seed)
        drawn |= {rnd.choice(FATES) for _ in NODES}
        raised += rnd.random() < 0.1
    assert drawn == set(FATES) and raised >= 1


def test_a_missing_result_is_filled_and_a_second_one_merged() -> None:
    ok = Result(check="gpu.xid", node="n1", status=Status.PASS, summary="no Xid")
    twice = Result(check="gpu.xid", node="n1", status=Status.FAIL, summary="Xid 79",
                   facts={"codes": ["gpu.xid/x79"]})
    about = Result(check="cluster.versions", node="n1", status=Status.PASS, summary="same")
    out = engine.complete([ok, twice, about], ["n1", "n2"], ["gpu.xid"], ["cluster.versions", "cluster.mtu"],
                          {"n2": "refused"})
    count = Counter((r.node, r.check) for r in out)
    assert set(count.values()) == {1}
    assert set(count) == {("n1", "gpu.xid"), ("n2", "gpu.xid"), ("n1", "cluster.versions"),
                          ("n2", "cluster.versions"), (CLUSTER, "cluster.mtu")}
    merged = next(r for r in out if (r.node, r.check) == ("n1", "gpu.xid"))
    assert merged.status is Status.FAIL and merged.summary == "Xid 79"  # the worst is kept
    assert merged.evidence[0] == "was: PASS no Xid" and merged.facts["codes"] == ["gpu.xid/x79"]
    filled = next(r for r in out if (r.node, r.check) == ("n2", "gpu.xid"))
    assert filled.status is Status.ERROR and filled.facts["codes"] == ["run.result/missing"]
    assert filled.summary == "no result: gpu.xid said nothing about n2 (refused)"
    mtu = next(r for r in out if r.check == "cluster.mtu")
    assert mtu.summary == "no result: cluster.mtu said nothing about the cluster"


def test_a_transport_that_raises_or_forgets_a_node_is_an_error_for_those_nodes() -> None:
    class Raises(Transport):
        name = "broken"

        def collect(self, bundles: Mapping[str, Sequence[Probe]], progress: ProgressFn | None = None
                    ) -> dict[str, NodeOutcome]:
            raise OSError("boom")

    class Forgets(Raises):
        def collect(self, bundles: Mapping[str, Sequence[Probe]], progress: ProgressFn | None = None
                    ) -> dict[str, NodeOutcome]:
            return {}

    probes = {"a": [scenarios_probe()]}
    got = engine._collect(Raises(), probes, None)
    assert got["a"].error == "the broken transport failed: OSError: boom" and not got["a"].captures
    assert engine._collect(Forgets(), probes, None)["a"].error == "no result from the broken transport"


def scenarios_probe() -> Probe:
    return Probe.of("uname-r", ["uname", "-r"], timeout=5)


def test_the_recorded_captures_are_real(recorded: Recorded) -> None:
    """The double hands back what the real runner printed (not text made up by the test)."""
    cap = recorded.capture(Probe.of("nvidia-smi-L", ["nvidia-smi", "-L"], timeout=15))
    assert cap.state is CaptureState.OK and cap.stdout.startswith("GPU 0: NVIDIA H100"), cap
    ping = recorded.capture(Probe.of("ping-jumbo-10.77.0.2", ["ping", "-n", "-M", "do", "-s", "8972", "-c", "3",
                                                              "10.77.0.2"], timeout=5))
    assert "8980 bytes from 10.77.0.2" in ping.stdout and "8972(9000)" in ping.stdout
    assert Path(scenarios.FIX / "ping" / "jumbo_ok.txt").is_file()


def test_a_node_whose_session_stalled_is_still_pinged_by_its_peers(recorded: Recorded) -> None:
    """A stalled SSH session (the bundle too large for a black-holed path) sent nothing back, yet
    its peers must ping it: that is how net.mtu finds the black hole. A node that refused the
    connection is left out of the ring."""
    fates = {"n1": "ok", "n2": "stall", "n3": "unreachable", "n4": "ok"}
    class Nothing(random.Random):
        def randrange(self, *args: object, **kw: object) -> int:  # type: ignore[override]
            return 0  # the stall cuts n2's captures at the first: nothing arrives

    transport = LossyTransport(recorded, Nothing(0), fates, raise_phase2=False)
    rings: list[list[str]] = []

    def ring(answered: list[str]) -> dict[str, list[str]]:
        rings.append(list(answered))
        return _ring(answered)

    reg = registry.load()
    engine.run(reg, engine.select(reg, only=["net.mtu", "gpu.xid"]), list(NODES), transport, profile_name="h100-sxm-8x",
               peers=ring)
    assert rings == [["n1", "n2", "n4"]]
    assert stalled({"kind": "timeout", "stage": "auth"}) and stalled({"kind": "deadline", "stage": "kex"})
    assert not stalled({"kind": "timeout", "stage": "connect"}) and not stalled({"kind": "refused", "stage": "auth"})
    assert not stalled({"kind": "timeout", "stage": "command", "connection": "alive"})
    assert stalled({"kind": "lost", "stage": "launch", "connection": "stalled"})  # stalled while open: any stage


def test_nothing_lost_is_go(recorded: Recorded) -> None:
    """The double loses nothing: the same healthy fleet is GO, one result per planned check."""
    reg = registry.load()
    transport = LossyTransport(recorded, random.Random(0), dict.fromkeys(NODES, "ok"), raise_phase2=False)
    results, _ = engine.run(reg, engine.select(reg), list(NODES), transport, options=Options(extra={"expect_nodes": 4}),
                            peers=_ring, cluster_checks=list(reg.cluster_checks.values()),
                            addresses={a: n for n, a in ADDR.items()})
    verdict = decide(results)
    assert verdict.verdict == "GO", [(r.node, r.check, r.summary) for r in verdict.blocking]
    assert set(Counter((r.node, r.check) for r in results).values()) == {1}
