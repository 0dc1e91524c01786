"""Absence of evidence is not evidence: a capture that did not arrive is never graded.

The captures of a healthy faked 8xH100 node are collected once with the real local transport
(the fake tools print real-format output). Then, for every check and every probe it runs,
the probe's output is made to fail to arrive in each way a transport can fail, and the node
is graded by the engine as `preflight run` grades it. The property: the check that needed
that probe is ERROR (SKIP for a tool that is not installed) and says why; never PASS, never
FAIL (except a tool the profile requires, whose absence is itself the fault).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from preflight import engine
from preflight import registry as reg
from preflight.model import Capture, CaptureState, Result, Status
from preflight.probes import Probe
from preflight.registry import Options
from preflight.transport.base import NodeOutcome, ProgressFn, Transport
from preflight.transport.local import LocalTransport
from tests import fakes, scenarios

NODE = "gpu001"
PROFILE = "h100-sxm-8x"
CAUSE = "SSH to gpu001 (10.0.0.1) stalled while the probes ran: 3 of 12 came back (test cause)"


class Replay(Transport):
    """Gives back recorded captures, with one probe's delivery failed as a transport fails it."""

    name = "replay"

    def __init__(self, recorded: Mapping[str, Capture], probe: str | None = None, mode: str = "",
                 unreachable: bool = False) -> None:
        self.recorded, self.probe, self.mode, self.unreachable = recorded, probe, mode, unreachable

    def collect(self, bundles: Mapping[str, Sequence[Probe]], progress: ProgressFn | None = None
                ) -> dict[str, NodeOutcome]:
        out = {}
        for node, probes in bundles.items():
            if self.unreachable:
                out[node] = NodeOutcome(node=node, error=f"{node}: Connection refused (test cause)")
                continue
            caps = {p.name: copy.deepcopy(self.recorded[p.name]) for p in probes if p.name in self.recorded}
            o = NodeOutcome(node=node, captures=caps)
            if self.probe in caps:
                cap = caps[self.probe]
                if self.mode == "lost":
                    del caps[self.probe]
                    o.error = CAUSE
                elif self.mode == "vanished":  # no capture and no error: a transport that said nothing
                    del caps[self.probe]
                elif self.mode == "timeout":
                    caps[self.probe] = Capture(probe=cap.probe, argv=cap.argv, state=CaptureState.TIMEOUT,
                                               stdout=cap.stdout[:40], timeout=30.0,
                                               reason=f"{cap.argv[0] if cap.argv else cap.probe} killed after 30 s")
                elif self.mode == "failed":
                    caps[self.probe] = Capture(probe=cap.probe, argv=cap.argv, state=CaptureState.FAILED,
                                               reason="could not start: Permission denied (test cause)")
                elif self.mode == "missing":
                    caps[self.probe] = Capture(probe=cap.probe, argv=cap.argv, state=CaptureState.MISSING,
                                               reason=f"{cap.argv[0] if cap.argv else cap.probe}: not found")
            out[node] = o
        return out


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Capture]:
    """Every probe's capture on a healthy faked node, collected by the real local transport."""
    tmp = tmp_path_factory.mktemp("delivery")
    bin_dir = fakes.install(tmp / "bin", scenarios.TOOLS)
    env = fakes.env_for(bin_dir, scenarios.healthy_h100(tmp / "sc"))
    scenarios.nvml_env(env)
    r = reg.load()
    checks = engine.select(r)
    bundles = {NODE: [p for p in engine.plan_node(checks, NODE, _profile(), _options()).probes()]}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        out = LocalTransport().collect(bundles)[NODE]
    assert not out.error
    return out.captures


def _profile():  # type: ignore[no-untyped-def]
    from preflight.profile import load

    return load(PROFILE)


def _options() -> Options:
    return Options(peers=["127.0.0.1"])


def _grade(transport: Transport, profile: str = PROFILE) -> dict[str, Result]:
    r = reg.load()
    checks = engine.select(r)
    results, _ = engine.run(r, checks, [NODE], transport, profile_name=profile, options=_options())
    return {x.check: x for x in results}


def _root(got: dict[str, Result], r: Result) -> Result:
    """The result that says why: `r` itself, or the root whose cause `r` shares (a SKIP
    "depends on <check>" names it; see preflight.rootcause)."""
    if r.status is Status.SKIP and r.facts.get("depends_on"):
        root = got[r.facts["depends_on"]]
        assert r.summary.startswith(f"depends on {root.check}: "), (r, root)
        return root
    return r


def _planned() -> dict[str, list[str]]:
    r = reg.load()
    plan = engine.plan_node(engine.select(r), NODE, _profile(), _options())
    return {cid: [p.name for p in ps] for cid, ps in plan.per_check.items()}


def _cases() -> list[tuple[str, str]]:
    return sorted({(probe, cid) for cid, probes in _planned().items() for probe in probes})


def test_the_recorded_node_is_healthy(healthy: dict[str, Capture]) -> None:
    got = _grade(Replay(healthy))
    assert {c: x.status for c, x in got.items() if x.status is not Status.PASS} == {}
    assert set(got) >= {"gpu.inventory", "gpu.driver", "gpu.health", "gpu.xid", "fabric.manager", "gpu.nvlink",
                        "gpu.topology", "net.nic", "net.mtu", "ib.hca"}


@pytest.mark.parametrize("mode", ["lost", "vanished", "timeout", "failed"])
@pytest.mark.parametrize(("probe", "check"), _cases())
def test_output_that_did_not_arrive_is_an_error_with_its_cause(healthy: dict[str, Capture], probe: str, check: str,
                                                               mode: str) -> None:
    got = _grade(Replay(healthy, probe, mode))
    r = _root(got, got[check])  # one cause shared by several checks is said once, by the root
    assert r.status is Status.ERROR, (probe, mode, r.status, r.summary)
    said = r.summary + " " + " ".join(r.evidence)
    cause = {"lost": "test cause", "vanished": "output lost", "timeout": "timed out",
             "failed": "Permission denied"}[mode]
    assert cause in said, said
    if mode in ("lost", "vanished"):
        assert r.summary.startswith("output lost: ")
    # the other checks still grade what did arrive; after a node fault the second round of
    # probes (peer pings) is not sent, and the checks that needed it say so
    untouched = [_root(got, x) for c, x in got.items() if probe not in _planned().get(c, [])]
    wrong = [(x.check, x.summary) for x in untouched if x.status is not Status.PASS
             and not (mode == "lost" and x.status is Status.ERROR and CAUSE in x.summary)]
    assert not wrong


@pytest.mark.parametrize(("probe", "check"), _cases())
def test_a_tool_not_installed_is_skip_or_the_profiles_requirement(healthy: dict[str, Capture], probe: str,
                                                                  check: str) -> None:
    got = _grade(Replay(healthy, probe, "missing"))
    r = _root(got, got[check])
    needed = probe in (reg.load().checks[check].required or _planned()[check])
    if not needed:  # an optional tool: the check grades from its other inputs
        assert r.status in (Status.PASS, Status.SKIP, Status.ERROR), r.summary
        return
    assert r.status is Status.SKIP or (r.status is Status.FAIL and "requires it" in r.summary), r.summary
    assert "not found" in r.summary + " ".join(r.evidence) or "missing" in r.summary


def test_an_unreachable_node_is_error_in_every_check_naming_the_cause(healthy: dict[str, Capture]) -> None:
    got = _grade(Replay(healthy, unreachable=True))
    root = got.pop("node.reachable")  # one ERROR for the node, every check depends on it
    assert root.status is Status.ERROR and "Connection refused" in root.summary
    assert got and all(x.status is Status.SKIP and x.summary == "depends on node.reachable: node not checked"
                       for x in got.values())


def test_captures_are_real_output_of_the_fake_tools(healthy: dict[str, Capture]) -> None:
    """The recording is what the local transport got from real executables, not test text."""
    assert healthy["nvidia-smi-query"].ok and "H100" in healthy["nvidia-smi-query"].stdout
    # a chrony node has no ntpd tools: those two probes find their tool missing, as on a real node
    ntpd = {"ntpstat", "ntpq-peers"}
    assert ntpd <= set(healthy) and all(healthy[n].state is CaptureState.MISSING for n in ntpd)
    assert all(c.state is CaptureState.OK for n, c in healthy.items() if n not in ntpd), {
        n: c.reason for n, c in healthy.items() if not c.ok}
    assert os.environ.get("PATH", "").split(os.pathsep)[0] != str(Path("bin"))
