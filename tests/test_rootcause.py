"""One cause is one result: a missing tool, a dead driver, an unreachable node or output lost for
one reason is one FAIL/ERROR per node, the checks that only repeat it SKIP "depends on"."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from preflight import engine, registry, rootcause
from preflight import profile as profiles
from preflight.grading import FactStore, decide, grade_node
from preflight.model import Capture, CaptureState, Result, Status
from preflight.registry import Options
from tests import fakes, scenarios

DRIVER_DEAD = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
               "latest NVIDIA driver is installed and running.\n")
GPU_CHECKS = {"fabric.manager", "gpu.health", "gpu.inventory", "gpu.nvlink", "gpu.topology"}


def _graded(node: str, capture_for) -> tuple[list[Result], dict[str, Capture]]:
    """Every node-local check graded by the real grader over captures made by `capture_for(probe)`."""
    reg = registry.load()
    checks = engine.select(reg, node_only=True)
    prof = profiles.load("h100-sxm-8x")
    plan = engine.plan_node(checks, node, prof, Options())
    caps = {p.name: capture_for(p) for p in plan.probes()}
    ran = {c: [p.name for p in ps] for c, ps in plan.per_check.items()}
    return grade_node(checks, node, FactStore(reg, captures=caps), prof, Options(), ran), caps


def _no_nvidia_smi(probe) -> Capture:
    argv = list(probe.commands[0])
    if argv[0] == "nvidia-smi":
        return Capture(probe=probe.name, argv=argv, state=CaptureState.MISSING, reason="nvidia-smi not found on PATH",
                       source=f"probe:{probe.name}")
    return Capture(probe=probe.name, argv=argv, state=CaptureState.OK, stdout="", rc=0, source=f"probe:{probe.name}")


def _dead_driver(probe) -> Capture:
    argv = list(probe.commands[0])
    if argv[0] == "nvidia-smi":
        return Capture(probe=probe.name, argv=argv, state=CaptureState.OK, stdout=DRIVER_DEAD, rc=9,
                       source=f"probe:{probe.name}")
    return Capture(probe=probe.name, argv=argv, state=CaptureState.OK, stdout="", rc=0, source=f"probe:{probe.name}")


def test_missing_nvidia_smi_is_one_fail_per_node_the_rest_depend_on_it() -> None:
    results, caps = [], {}
    for node in ("gpu001", "gpu002"):
        got, caps[node] = _graded(node, _no_nvidia_smi)
        results += got
    before = decide(results)
    assert sum(r.status is Status.FAIL and "nvidia-smi" in r.summary for r in results) >= 10  # 5+ per node
    folded = rootcause.fold(results, caps)
    for node in ("gpu001", "gpu002"):
        mine = {r.check: r for r in folded if r.node == node}
        fails = [r for r in mine.values() if r.status is Status.FAIL and "nvidia-smi" in r.summary]
        assert [r.check for r in fails] == ["gpu.driver"], fails  # (ib.hca fails on its empty capture)
        root = fails[0]
        assert "nvidia-smi is missing" in root.summary and "nvidia-driver" in root.remedy
        assert "OFED" not in root.remedy  # OFED ships no nvidia-smi
        assert set(root.facts["dependents"]) >= GPU_CHECKS
        for check in root.facts["dependents"]:
            dep = mine[check]
            assert dep.status is Status.SKIP and dep.summary == "depends on gpu.driver: nvidia-smi is missing"
            assert dep.facts["depends_on"] == "gpu.driver" and dep.facts["own_status"] == "fail"
            assert dep.evidence[0].startswith(f"gpu.driver on {node}: FAIL")
    after = decide(folded)
    assert (after.verdict, after.bad_nodes) == (before.verdict, before.bad_nodes) == ("NO-GO", ["gpu001", "gpu002"])
    assert len(folded) == len(results)


def test_a_dead_driver_is_one_fail_on_gpu_driver() -> None:
    results, caps = _graded("gpu007", _dead_driver)
    gpu = GPU_CHECKS | {"gpu.driver"}  # (the other checks fail on their empty captures, each its own way)
    bad = [r for r in results if r.status in (Status.FAIL, Status.ERROR) and r.check in gpu]
    assert len(bad) >= 4, bad  # every GPU check repeats the driver's message
    folded = rootcause.fold(results, {"gpu007": caps})
    bad = [r for r in folded if r.status in (Status.FAIL, Status.ERROR) and r.check in gpu]
    assert [r.check for r in bad] == ["gpu.driver"] and "not loaded" in bad[0].summary
    others = [(r.check, r.status) for r in results if r.check not in gpu]
    assert [(r.check, r.status) for r in folded if r.check not in gpu] == others
    deps = [r for r in folded if rootcause.is_dependent(r)]
    assert {r.check for r in deps} >= {"gpu.health", "gpu.inventory", "gpu.nvlink", "gpu.topology"}
    assert all(r.summary == "depends on gpu.driver: the NVIDIA kernel driver is not loaded" for r in deps)
    assert all(any(ln.startswith("was: ") for ln in r.evidence) for r in deps)  # what it said is kept
    inv = next(r for r in folded if r.check == "gpu.inventory")
    assert "count" in inv.facts  # the readers' facts stay
    assert decide(folded).verdict == "NO-GO"


def test_unreachable_node_is_one_error_under_node_reachable() -> None:
    checks = engine.select(registry.load(), node_only=True)
    out = engine.NodeOutcome(node="gpu003", error="gpu003 (10.0.0.3:22) refused the connection")
    results = engine.node_error_results(out, checks) + [
        Result(check="gpu.xid", node="gpu004", status=Status.PASS, summary="no Xid")]
    folded = rootcause.fold(results, {"gpu003": {}})
    errors = [r for r in folded if r.status is Status.ERROR]
    assert [(r.check, r.node) for r in errors] == [("node.reachable", "gpu003")]
    assert errors[0].summary == "node not checked: gpu003 (10.0.0.3:22) refused the connection"
    assert sorted(errors[0].facts["dependents"]) == sorted(c.id for c in checks)
    skipped = [r for r in folded if r.node == "gpu003" and r.status is Status.SKIP]
    assert len(skipped) == len(checks) and all(r.summary == "depends on node.reachable: node not checked"
                                               for r in skipped)
    assert decide(folded).bad_nodes == ["gpu003"]
    assert "node.reachable" in registry.load().known_ids()


def test_lost_output_folds_only_where_the_cause_is_the_same() -> None:
    """A node that answered in part: ERRORs with one cause are one, a different cause stays."""
    def lost(probe) -> Capture:
        argv = list(probe.commands[0])
        if probe.name == "nvidia-smi-topo":
            return Capture(probe=probe.name, argv=argv, state=CaptureState.LOST, reason="deadline passed",
                           source=f"probe:{probe.name}")
        if argv[0] == "nvidia-smi":
            return Capture(probe=probe.name, argv=argv, state=CaptureState.LOST, reason="SSH to gpu009 stalled",
                           source=f"probe:{probe.name}")
        return Capture(probe=probe.name, argv=argv, state=CaptureState.OK, stdout="", rc=0,
                       source=f"probe:{probe.name}")

    results, caps = _graded("gpu009", lost)
    folded = rootcause.fold(results, {"gpu009": caps})
    errors = {r.check: r.summary for r in folded if r.status is Status.ERROR}
    assert errors.get("gpu.topology") == "output lost: deadline passed", errors
    stalled = [c for c, s in errors.items() if s == "output lost: SSH to gpu009 stalled"]
    assert len(stalled) == 1, errors
    deps = [r for r in folded if rootcause.is_dependent(r)]
    assert deps and all(r.summary == f"depends on {stalled[0]}: output lost" for r in deps)


def test_results_without_a_shared_cause_are_untouched() -> None:
    results = [Result(check="gpu.xid", node="n1", status=Status.FAIL, summary="Xid 79"),
               Result(check="gpu.health", node="n1", status=Status.FAIL, summary="pending row remap"),
               Result(check="nccl.allreduce", node="cluster", status=Status.SKIP, summary="not run")]
    assert rootcause.fold(results, {}) == results


def _hung(tools: set[str], deadline_killed: bool = False):
    """Captures in which every call of `tools` hung: killed at its timeout (TIMEOUT), or by the
    run's deadline while still running (LOST, the local transport's words)."""
    def capture_for(probe) -> Capture:
        argv = list(probe.commands[0])
        if rootcause.probe_tool(probe.name, argv) in tools:
            if deadline_killed:
                why = (f"the 30 s deadline of the run passed while probe {probe.name} was still running "
                       "(after 29.5 s); it was killed")
                return Capture(probe=probe.name, argv=argv, state=CaptureState.LOST, reason=why,
                               timeout=probe.timeout, source=f"probe:{probe.name}")
            why = f"probe {probe.name} ({' '.join(argv)}) timed out after {probe.timeout:g} s"
            return Capture(probe=probe.name, argv=argv, state=CaptureState.TIMEOUT, reason=why, timeout=probe.timeout,
                           duration=probe.timeout, source=f"probe:{probe.name}")
        return _no_nvidia_smi(probe) if argv[0] != "nvidia-smi" else Capture(
            probe=probe.name, argv=argv, state=CaptureState.OK, stdout="", rc=0, source=f"probe:{probe.name}")
    return capture_for


def test_a_hung_nvidia_smi_is_one_error_on_gpu_driver_naming_it_and_the_drain_reason_names_it() -> None:
    from preflight.history.gate import drain_summary

    results, caps = _graded("gpu001", _hung({"nvidia-smi"}))
    timed_out = [r for r in results if r.status is Status.ERROR and "timed out" in r.summary]
    assert len(timed_out) >= 5, [(r.check, r.summary) for r in results]  # every nvidia-smi reader: its own ERROR
    before = decide(results)
    folded = rootcause.fold(results, {"gpu001": caps})
    hung = [r for r in folded if r.status is Status.ERROR and "nvidia-smi" in r.summary]
    assert [r.check for r in hung] == ["gpu.driver"], [(r.check, r.summary) for r in folded]
    root = hung[0]
    assert root.summary.startswith("nvidia-smi did not finish within 20 s (hung): probes ")
    assert "nvidia-smi-q" in root.summary and root.facts["tool"] == "nvidia-smi"
    assert root.facts["codes"] == ["run.probe/timed-out"]
    assert any("timed out after 20 s" in e for e in root.evidence)
    assert set(root.facts["dependents"]) >= {"fabric.manager", "gpu.health", "gpu.inventory", "gpu.nvlink",
                                             "gpu.topology"}
    for dep in (r for r in folded if r.check in root.facts["dependents"]):
        assert dep.status is Status.SKIP and dep.summary == "depends on gpu.driver: nvidia-smi hung"
        assert dep.facts["own_status"] == "error"
    after = decide(folded)
    assert (after.verdict, after.bad_nodes) == (before.verdict, before.bad_nodes)
    assert len(folded) == len(results)
    # what blocks because of the hang is the root alone (the other checks fail on their empty fakes)
    hang = [r for r in after.blocking if "nvidia-smi" in r.summary or "timed out" in r.summary]
    check, summary = drain_summary(hang)
    assert check == "gpu.driver" and summary.startswith("nvidia-smi did not finish") and "(+" not in summary


def test_two_hung_tools_are_one_node_responsive_error_naming_each() -> None:
    results, caps = _graded("gpu002", _hung({"nvidia-smi", "ibstat"}))
    folded = rootcause.fold(results, {"gpu002": caps})
    errors = [r for r in folded if r.status is Status.ERROR and ("hung" in r.summary or "timed out" in r.summary)]
    assert [r.check for r in errors] == ["node.responsive"], [(r.check, r.summary) for r in errors]
    root = errors[0]
    assert root.summary == ("2 tools hung (none of their calls finished within its timeout): "
                            "ibstat 10 s, nvidia-smi 20 s")
    assert root.facts["codes"] == ["node.responsive/tools-hung"] and root.facts["tools"] == ["ibstat", "nvidia-smi"]
    assert "ib.hca" in root.facts["dependents"] and "gpu.driver" in root.facts["dependents"]
    deps = [r for r in folded if rootcause.is_dependent(r)]
    assert {r.summary for r in deps} == {"depends on node.responsive: ibstat, nvidia-smi hung"}
    assert len(folded) == len(results) + 1  # the node's root, in front of what it folds
    assert decide(folded).bad_nodes == decide(results).bad_nodes == ["gpu002"]
    assert "node.responsive" in registry.load().known_ids()


def test_a_tool_the_deadline_killed_while_it_ran_is_a_hung_tool() -> None:
    results, caps = _graded("gpu003", _hung({"nvidia-smi"}, deadline_killed=True))
    folded = rootcause.fold(results, {"gpu003": caps})
    errors = [r for r in folded if r.status is Status.ERROR and ("hung" in r.summary or "lost" in r.summary)]
    assert [r.check for r in errors] == ["gpu.driver"], [(r.check, r.summary) for r in errors]
    assert errors[0].summary.startswith("nvidia-smi did not finish within 20 s (hung)")
    assert any("was still running" in e for e in errors[0].evidence)


def test_a_single_timed_out_probe_keeps_its_own_words() -> None:
    results, caps = _graded("gpu004", _hung({"dmesg", "journalctl"}))
    folded = rootcause.fold(results, {"gpu004": caps})
    xid = next(r for r in folded if r.check == "gpu.xid")
    assert xid.status is Status.ERROR and xid.summary.startswith("probe kernel-log timed out after")


def test_the_tool_a_probe_runs() -> None:
    assert rootcause.probe_tool("nvidia-smi-q", ["/usr/bin/nvidia-smi", "-q"]) == "nvidia-smi"
    assert rootcause.probe_tool("nvml", ["/usr/bin/python3", "-c", "..."]) == "nvml"  # the library, not python
    assert rootcause.probe_tool("env", ["sh", "-c", "env | grep NCCL"]) == "env"  # a snippet is its own tool
    assert rootcause.probe_tool("x", []) == "x"
    assert rootcause.TOOL_OWNER["nvml"] == "gpu.driver"


def _stalled_node() -> list[Result]:
    lost = "SSH stalled after authentication with node2 (10.9.0.2:22): the command was never acknowledged"
    def gone(check: str, probe: str) -> Result:
        return Result(check=check, node="node2", status=Status.ERROR, summary=f"output lost: {lost}",
                      evidence=[f"probe {probe}: sent, its output never came back", lost], source=f"probe:{probe}",
                      facts={"codes": ["run.probe/output-lost"]})
    return [
        Result(check="gpu.driver", node="node2", status=Status.PASS, summary="driver 535"),
        gone("gpu.xid", "kernel-log"), gone("ib.hca", "ibstat"), gone("cluster.versions", "ofed"),
        Result(check="gpu.health", node="node2", status=Status.WARN, summary="power brake"),
        Result(check="net.mtu", node="node2", status=Status.FAIL, summary="jumbo frames to and from node2 are dropped",
               facts={"codes": ["net.mtu/black-hole-at-node"], "ssh_stalled": True, "explains_lost": True}),
        Result(check="net.mtu", node="node1", status=Status.PASS, summary="losses only towards node2"),
        Result(check="gpu.xid", node="node1", status=Status.ERROR, summary="output lost: something else",
               facts={"codes": ["run.probe/output-lost"]}),
    ]


def test_lost_output_a_fail_explains_is_folded_into_that_fail() -> None:
    results = _stalled_node()
    folded = rootcause.fold(results, {})
    mine = {r.check: r for r in folded if r.node == "node2"}
    assert [r.check for r in folded if r.node == "node2" and r.status is Status.ERROR] == []
    assert mine["net.mtu"].status is Status.FAIL
    assert sorted(mine["net.mtu"].facts["dependents"]) == ["cluster.versions", "gpu.xid", "ib.hca"]
    for c in ("gpu.xid", "ib.hca", "cluster.versions"):
        assert mine[c].summary == ("output lost: the ssh connection to node2 stalled behind the MTU black hole at "
                                   "node2") and mine[c].facts["own_status"] == "error"
    assert mine["gpu.health"].status is Status.WARN and mine["gpu.driver"].status is Status.PASS
    other = next(r for r in folded if r.node == "node1" and r.check == "gpu.xid")
    assert other.status is Status.ERROR  # another node's loss is its own
    assert decide(folded).bad_nodes == decide(results).bad_nodes == ["node1", "node2"]
    # without the explaining fact the FAIL stands apart and the lost outputs stay ERROR
    plain = [replace(r, facts={k: v for k, v in r.facts.items() if k != "explains_lost"}) for r in results]
    folded = rootcause.fold(plain, {})
    assert sum(r.node == "node2" and r.status is Status.ERROR for r in folded) == 3
    assert "dependents" not in next(r for r in folded if r.check == "net.mtu" and r.node == "node2").facts


def test_an_unreachable_node_that_a_fail_explains_folds_into_it() -> None:
    checks = engine.select(registry.load(), node_only=True)
    out = engine.NodeOutcome(node="node2", error="SSH stalled after key exchange with node2")
    results = [r for r in engine.node_error_results(out, checks) if r.check != "net.mtu"] + [
        Result(check="net.mtu", node="node2", status=Status.FAIL, summary="jumbo frames to and from node2 are dropped",
               facts={"explains_lost": True})]
    folded = rootcause.fold(results, {"node2": {}})
    assert [(r.check, r.status) for r in folded if r.status is not Status.SKIP] == [("net.mtu", Status.FAIL)]
    assert len(folded) == len(results)


# ---- through the command line ---------------------------------------------------------------


def _path_without_nvidia_smi(tmp: Path, bin_dir: Path) -> str:
    """The fake tools first, then the system's folders; where the system has nvidia-smi, a
    folder of links to everything else in them instead."""
    system = "/usr/bin:/bin"
    if shutil.which("nvidia-smi", path=system) is None:
        return f"{bin_dir}:{system}"
    farm = tmp / "sysbin"
    farm.mkdir()
    for d in system.split(":"):
        for f in Path(d).iterdir():
            if f.name != "nvidia-smi" and not (farm / f.name).exists():
                (farm / f.name).symlink_to(f)
    return f"{bin_dir}:{farm}"


@pytest.mark.real
def test_cli_node_without_nvidia_smi_prints_one_fail(tmp_path: Path) -> None:
    tools = [t for t in scenarios.TOOLS if t != "nvidia-smi"]
    bin_dir = fakes.install(tmp_path / "bin", tools)
    env = fakes.env_for(bin_dir, scenarios.healthy_h100(tmp_path / "sc"))
    env["PATH"] = _path_without_nvidia_smi(tmp_path, bin_dir)
    env.pop("PREFLIGHT_CONFIG", None)
    p = subprocess.run([sys.executable, "-m", "preflight.cli", "node", "--profile", "h100-sxm-8x", "--history", "off",
                        "--out", str(tmp_path / "r")], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 1, p.stderr
    lines = p.stdout.splitlines()
    fails = [ln for ln in lines if ln.startswith("FAIL ")]
    assert len(fails) == 1 and " gpu.driver: nvidia-smi is missing" in fails[0], p.stdout
    assert "dependent checks skipped" in fails[0] and "nvidia-driver" in fails[0]
    assert not [ln for ln in lines if "depends on" in ln]  # folded into the count
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    deps = [r for r in doc["results"] if r["summary"] == "depends on gpu.driver: nvidia-smi is missing"]
    assert {r["check"] for r in deps} >= GPU_CHECKS and all(r["status"] == "skip" for r in deps)
    assert doc["verdict"] == "NO-GO" and sum(r["status"] == "fail" for r in doc["results"]) == 1


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_three_unreachable_hosts_are_one_error_line_with_their_host_list(tmp_path: Path) -> None:
    port = _closed_port()
    cfg = tmp_path / "ssh_config"
    cfg.write_text("".join(f"Host dead{i}\n  HostName 127.0.0.1\n  Port {port}\n  User root\n" for i in (1, 2, 3)))
    env = dict(os.environ)
    env.pop("PREFLIGHT_CONFIG", None)
    p = subprocess.run([sys.executable, "-m", "preflight.cli", "run", "--hosts", "dead[1-3]", "--transport", "ssh",
                        "--ssh-config", str(cfg), "--no-report", "--history", "off", "--connect-timeout", "20"],
                       capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    lines = p.stdout.splitlines()
    errors = [ln for ln in lines if ln.startswith("ERROR ")]
    assert [ln.split()[1:3] for ln in errors] == [["dead[1-3]", "node.reachable:"]], p.stdout
    assert all("refused" in ln and "dependent checks skipped" in ln for ln in errors)
    assert not [ln for ln in lines if "depends on" in ln]
    assert lines[-2].startswith("NO-GO ") and "(blocking: dead[1-3])" in lines[-2]
    assert lines[-1] == "--exclude=dead[1-3]"
    assert len(lines) <= 6, p.stdout


def test_an_unreachable_node_is_under_node_reachable_even_with_one_check() -> None:
    only = [c for c in engine.select(registry.load(), node_only=True) if c.id == "gpu.xid"]
    results = engine.node_error_results(engine.NodeOutcome(node="n5", error="n5: Connection refused"), only)
    folded = rootcause.fold(results, {})
    assert [(r.check, r.status) for r in folded] == [("node.reachable", Status.ERROR), ("gpu.xid", Status.SKIP)]


def test_a_gpu_off_the_bus_is_one_fail_on_inventory_and_listings_that_only_miss_it_depend_on_it() -> None:
    lost = "Unable to determine the device handle for GPU0000:9D:00.0: Unknown Error"
    results = [
        Result("gpu.inventory", "gpu016", Status.FAIL, "1 GPU(s) do not answer: 0000:9D:00.0 (Unknown Error); "
               "7 of 8 GPUs visible (index 4 missing)", evidence=[lost]),
        Result("gpu.nvlink", "gpu016", Status.FAIL, "0000:9D:00.0 not listed by nvidia-smi nvlink: a GPU does not "
               "answer the driver", evidence=[lost]),
        Result("gpu.topology", "gpu016", Status.FAIL, "0000:9D:00.0 not listed by nvidia-smi topo: a GPU does not "
               "answer the driver; GPU1-GPU2 over SYS (no NVLink)", evidence=[lost]),
        Result("gpu.health", "gpu016", Status.FAIL, "GPU 2 (00000000:52:00.0): row remap pending; GPU 0000:9D:00.0: "
               "a GPU does not answer the driver (Unknown Error)", evidence=[lost]),
        Result("gpu.nvlink", "gpu017", Status.FAIL, "0000:9D:00.0 not listed by nvidia-smi nvlink: a GPU does not "
               "answer the driver", evidence=[lost]),
    ]
    folded = {(r.node, r.check): r for r in rootcause.fold(results)}
    root = folded[("gpu016", "gpu.inventory")]
    assert root.status is Status.FAIL and root.facts["dependents"] == ["gpu.nvlink"]
    dep = folded[("gpu016", "gpu.nvlink")]
    assert dep.status is Status.SKIP and dep.facts["own_status"] == "fail"
    assert dep.summary == "depends on gpu.inventory: GPU 0000:9d:00 does not answer the driver"
    # a listing with another finding, and gpu.health's other faults, keep their own FAIL
    assert folded[("gpu016", "gpu.topology")].status is Status.FAIL
    assert folded[("gpu016", "gpu.health")].status is Status.FAIL
    # another node: no inventory root there, nothing folds
    assert folded[("gpu017", "gpu.nvlink")].status is Status.FAIL
    assert decide(rootcause.fold(results)).bad_nodes == decide(results).bad_nodes


HUNG_CONFIG = "[check_timeouts]\n" + "".join(f'"{c}" = 2\n' for c in (
    "gpu.driver", "gpu.health", "gpu.inventory", "gpu.nvlink", "gpu.topology", "fabric.manager", "gpu.xid", "ib.hca",
    "net.nic", "net.mtu"))


@pytest.mark.real
@pytest.mark.parametrize(("hang", "line"), [
    (["nvidia-smi"], " gpu.driver: nvidia-smi did not finish within 2 s (hung): probes "),
    (["nvidia-smi", "dmesg", "journalctl", "ibstat", "ip", "systemctl"], " node.responsive: "),
])
def test_cli_node_with_hung_tools_prints_one_error_line_naming_them(tmp_path: Path, hang: list[str],
                                                                    line: str) -> None:
    """Fake tools of a healthy 8xH100 node, the named ones hanging on every call (their checks'
    probes given 2 s by the site config): one ERROR line, naming the tools, piped."""
    sc = scenarios.healthy_h100(tmp_path / "sc")
    for tool in hang:
        f = sc / f"{tool}.json"
        rules = json.loads(f.read_text())["rules"] if f.exists() else [{"match": ".*"}]
        f.write_text(json.dumps({"rules": [{**r, "hang": True} for r in rules]}))
    env = fakes.env_for(fakes.install(tmp_path / "bin", scenarios.TOOLS), sc)
    (tmp_path / "config.toml").write_text(HUNG_CONFIG)
    env["PREFLIGHT_CONFIG"] = str(tmp_path / "config.toml")
    p = subprocess.run([sys.executable, "-m", "preflight.cli", "node", "--profile", "h100-sxm-8x", "--history", "off",
                        "--out", str(tmp_path / "r")], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    errors = [ln for ln in p.stdout.splitlines() if ln.startswith("ERROR ")]
    assert len(errors) == 1 and line in errors[0], p.stdout
    assert all(t in errors[0] for t in ("nvidia-smi", *(t for t in hang if t not in ("journalctl", "systemctl")))), \
        errors[0]
    assert "dependent checks skipped" in errors[0]
    assert not [ln for ln in p.stdout.splitlines() if "timed out after" in ln and not ln.startswith("ERROR ")]
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    assert sum(r["status"] == "error" for r in doc["results"]) == 1, [(r["check"], r["summary"])
                                                                       for r in doc["results"]]


# ---- the fold's rules one at a time, on hand-made results (each rule pinned) ------------------


def _r(check: str, status: Status = Status.FAIL, summary: str = "x", node: str = "n1", source: str = "",
       evidence: list[str] | None = None, **facts: object) -> Result:
    return Result(check=check, node=node, status=status, summary=summary, evidence=evidence or [], source=source,
                  facts=dict(facts))


def test_probe_tool_shells_interpreters_and_paths() -> None:
    for shell in ("sh", "bash", "env", "timeout", "/bin/bash", "python3.11"):
        assert rootcause.probe_tool("snippet", [shell, "-c", "..."]) == "snippet", shell
    assert rootcause.probe_tool("ib", ["/usr/sbin/ibstat"]) == "ibstat"
    # RHEL's platform-python does not start with "python": the NVML probe is still the library
    assert rootcause.probe_tool("nvml", ["/usr/libexec/platform-python", "-c", "..."]) == "nvml"


@pytest.mark.parametrize(("tool", "owner"), [(t, o) for t, o in rootcause.TOOL_OWNER.items() if o != "gpu.driver"])
def test_a_missing_tool_is_kept_by_the_check_that_owns_it(tool: str, owner: str) -> None:
    """Its owner keeps the FAIL even when another check that lacks it sorts first; the tool is
    named by its file name whatever its path, and a capture without a source is its probe."""
    caps = {"p": Capture(probe="p", argv=[f"/usr/sbin/{tool}", "-x"], state=CaptureState.MISSING,
                         reason=f"{tool} not found on PATH")}
    results = [_r("aaa.first", Status.PASS, source="probe:p"),  # a PASS on the same capture is left alone
               _r("aaa.first", source="probe:p"), _r(owner, source="probe:p")]
    folded = rootcause.fold(results, {"n1": caps})
    assert folded[0] == results[0]
    assert [(r.check, r.status) for r in folded[1:]] == [("aaa.first", Status.SKIP), (owner, Status.FAIL)], folded
    assert folded[1].summary == f"depends on {owner}: {tool} is missing"


def test_checks_about_the_node_itself_are_never_folded() -> None:
    gone = "node not checked: n1 refused the connection"
    results = [_r("analyze.node", Status.ERROR, gone), _r("gpu.xid", Status.ERROR, gone),
               _r("ib.hca", Status.ERROR, gone)]
    folded = rootcause.fold(results, {})
    assert [(r.check, r.status) for r in folded] == [("analyze.node", Status.ERROR), ("node.reachable", Status.ERROR),
                                                     ("gpu.xid", Status.SKIP), ("ib.hca", Status.SKIP)]


def test_results_not_about_one_node_are_never_folded() -> None:
    gone = "node not checked: refused"
    results = [_r(c, Status.ERROR, gone, node=n) for n in ("cluster", "job", "n1<->n2", "n1,n2", "")
               for c in ("gpu.xid", "ib.hca")]
    assert rootcause.fold(results, {}) == results


def test_is_dependent_needs_all_three_marks() -> None:
    dep = _r("gpu.xid", Status.SKIP, "depends on gpu.driver: x", depends_on="gpu.driver")
    assert rootcause.is_dependent(dep)
    assert not rootcause.is_dependent(_r("gpu.xid", Status.SKIP, "not run"))
    assert not rootcause.is_dependent(_r("gpu.xid", Status.SKIP, "depends on gpu.driver: x"))
    assert not rootcause.is_dependent(_r("gpu.xid", Status.FAIL, "depends on gpu.driver: x", depends_on="gpu.driver"))


def _timed_out(check: str, probe: str) -> Result:
    return _r(check, Status.ERROR, f"probe {probe} timed out after 10 s", source=f"probe:{probe}",
              codes=["run.probe/timed-out"])


def _hung_cap(probe: str, tool: str, timeout: float = 10.0) -> Capture:
    return Capture(probe=probe, argv=[tool], state=CaptureState.TIMEOUT, timeout=timeout,
                   reason=f"probe {probe} ({tool}) timed out after {timeout:g} s", source=f"probe:{probe}")


def test_a_hung_tool_with_one_probe_is_kept_by_its_owner_in_its_own_words() -> None:
    caps = {"ibstat": _hung_cap("ibstat", "ibstat")}
    results = [_timed_out("gpu.aaa", "ibstat"), _timed_out("ib.hca", "ibstat")]
    folded = rootcause.fold(results, {"n1": caps})
    assert [(r.check, r.status) for r in folded] == [("gpu.aaa", Status.SKIP), ("ib.hca", Status.ERROR)]
    assert folded[1].summary == "ibstat did not finish within 10 s (hung): probe ibstat timed out"
    assert folded[0].summary == "depends on ib.hca: ibstat hung"
    # two probes of the tool, no timeout known
    caps = {p: _hung_cap(p, "ibstat", 0.0) for p in ("ibstat", "ibstat-v")}
    results = [_timed_out("gpu.aaa", "ibstat"), _timed_out("ib.hca", "ibstat-v")]
    root = rootcause.fold(results, {"n1": caps})[1]
    assert root.summary == "ibstat did not finish (hung): probes ibstat, ibstat-v timed out", root


def test_a_timed_out_result_whose_capture_did_not_time_out_is_not_a_hang() -> None:
    caps = {"ibstat": Capture(probe="ibstat", argv=["ibstat"], state=CaptureState.LOST, reason="stalled",
                              source="probe:ibstat")}
    results = [_timed_out("gpu.aaa", "ibstat"), _timed_out("ib.hca", "ibstat"), _timed_out("net.nic", "gone")]
    folded = rootcause.fold(results, {"n1": caps})
    assert not any("hung" in r.summary for r in folded), folded


def test_two_hung_tools_evidence_is_each_tools_words_then_the_reasons() -> None:
    caps = {"ibstat": _hung_cap("ibstat", "ibstat"), "smi": _hung_cap("smi", "nvidia-smi", 20.0)}
    results = [_timed_out("ib.hca", "ibstat"), _timed_out("gpu.driver", "smi")]
    root = rootcause.fold(results, {"n1": caps})[0]
    assert root.check == "node.responsive"
    assert root.evidence == ["ibstat did not finish within 10 s (hung): probe ibstat timed out",
                             "nvidia-smi did not finish within 20 s (hung): probe smi timed out",
                             "probe ibstat (ibstat) timed out after 10 s", "probe smi (nvidia-smi) timed out after 20 s"]


def test_missing_tool_fold_reads_captures_without_a_source() -> None:
    caps = {"p": Capture(probe="p", argv=["ibstat"], state=CaptureState.MISSING, reason="ibstat not found")}
    folded = rootcause.fold([_r("gpu.aaa", source="probe:p"), _r("ib.hca", source="probe:p")], {"n1": caps})
    assert [r.status for r in folded] == [Status.SKIP, Status.FAIL]


@pytest.mark.parametrize(("message", "short"), [
    ("Failed to initialize NVML: Driver/library version mismatch",
     "the loaded NVIDIA kernel module and the user-space driver library differ"),
    ("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system.",
     "the NVML library (libnvidia-ml.so) was not found"),
    ("Failed to initialize NVML: Unknown Error", "NVML could not be initialised"),
])
def test_each_driver_failure_is_kept_by_gpu_driver(message: str, short: str) -> None:
    results = [_r("aaa.first", Status.PASS, "fine"), _r("gpu.health", Status.ERROR, message),
               _r("gpu.driver", Status.FAIL, message), _r("gpu.topology", Status.SKIP, message)]
    folded = rootcause.fold(results, {})
    assert [(r.check, r.status) for r in folded] == [("aaa.first", Status.PASS), ("gpu.health", Status.SKIP),
                                                     ("gpu.driver", Status.FAIL), ("gpu.topology", Status.SKIP)]
    assert folded[1].summary == f"depends on gpu.driver: {short}"


LOST_A = "Unable to determine the device handle for GPU0000:9D:00.0: Unknown Error"
LOST_B = "Unable to determine the device handle for GPU0000:A0:00.0: Unknown Error"


def test_two_lost_gpus_are_one_root_on_inventory_and_xid_keeps_its_own() -> None:
    results = [
        _r("gpu.health", summary="GPU 0000:9D:00.0: a GPU does not answer the driver", evidence=[LOST_A]),
        _r("gpu.inventory", summary="2 GPU(s) do not answer: 0000:9D:00.0, 0000:A0:00.0", evidence=[LOST_A, LOST_B]),
        _r("gpu.xid", summary="Xid 79 on 0000:9D:00.0", evidence=[LOST_A]),
        _r("gpu.nvlink", summary="0000:9D:00.0 and 0000:A0:00.0 not listed", evidence=[LOST_A, LOST_B]),
    ]
    folded = {r.check: r for r in rootcause.fold(results, {})}
    assert folded["gpu.inventory"].status is Status.FAIL and folded["gpu.xid"].status is Status.FAIL
    assert folded["gpu.health"].status is Status.SKIP
    assert folded["gpu.nvlink"].summary == ("depends on gpu.inventory: GPU 0000:9d:00, 0000:a0:00 does not answer "
                                            "the driver")


def test_another_gpu_error_naming_a_gpu_is_not_a_lost_gpu() -> None:
    rom = "infoROM is corrupted at gpu 0000:52:00.0"
    results = [_r("gpu.inventory", summary="1 GPU(s) do not answer: 0000:9D:00.0", evidence=[LOST_A, rom]),
               _r("gpu.nvlink", summary="0000:9D:00.0 not listed", evidence=[LOST_A])]
    folded = rootcause.fold(results, {})
    assert folded[1].summary == "depends on gpu.inventory: GPU 0000:9d:00 does not answer the driver", folded


def test_output_lost_behind_a_black_hole_says_the_connection_stalled_not_a_dependency() -> None:
    """ib.hca's output lost behind the MTU black hole at node2 is labelled with what happened: its
    capture was lost, the run's connection to node2 (ssh or srun) stalled behind the black hole;
    not "depends on net.mtu", a dependency no check has. It is still folded (a count on the
    FAIL's line, not a line of its own)."""
    for transport, words in (("ssh", "the ssh connection"), ("srun", "the srun connection"), (None, "the connection")):
        results = _stalled_node()
        mtu = next(r for r in results if r.check == "net.mtu" and r.node == "node2")
        mtu.facts = {"codes": ["net.mtu/black-hole-at-node"], "connection_stalled": True, "explains_lost": True,
                     **({"transport": transport} if transport else {})}
        mine = {r.check: r for r in rootcause.fold(results, {}) if r.node == "node2"}
        for c in ("gpu.xid", "ib.hca", "cluster.versions"):
            r = mine[c]
            assert r.summary == f"output lost: {words} to node2 stalled behind the MTU black hole at node2", r.summary
            assert r.status is Status.SKIP and rootcause.is_dependent(r) and r.facts["depends_on"] == "net.mtu"
            assert r.evidence[0].startswith("net.mtu on node2: FAIL jumbo frames")
            assert r.remedy == "see net.mtu on node2"


def test_a_black_hole_result_of_an_older_run_with_the_ssh_stall_fact_is_read() -> None:
    """Results written before the stall fact was named for any transport say `ssh_stalled`
    (history, a saved JSON report): they fold with the same words, the transport being ssh."""
    results = _stalled_node()  # its net.mtu FAIL carries the old fact
    assert next(r for r in results if r.check == "net.mtu" and r.node == "node2").facts["ssh_stalled"] is True
    mine = {r.check: r for r in rootcause.fold(results, {}) if r.node == "node2"}
    assert mine["ib.hca"].summary == "output lost: the ssh connection to node2 stalled behind the MTU black hole at node2"
    assert rootcause.connection_stalled({"ssh_stalled": True}) == (True, "ssh")
    assert rootcause.connection_stalled({"connection_stalled": True, "transport": "srun"}) == (True, "srun")
    assert rootcause.connection_stalled({"connection_stalled": False, "ssh_stalled": True}) == (False, "")
    assert rootcause.connection_stalled({}) == (False, "")
