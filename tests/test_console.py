"""The console report: a fleet in one screen on a terminal, one plain line per finding in a pipe.

The 64-node runs go through `engine.run` with a transport double that replays real captures:
the probes of a healthy faked 8xH100 node and of one with Xid 79, collected once each by the
real local transport from the fake tools (real-format output), given back per node."""

from __future__ import annotations

import copy
import io
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from rich.console import Console

from preflight import engine
from preflight import registry as reg
from preflight.inventory import compress
from preflight.model import Capture, Result, Status
from preflight.probes import Probe
from preflight.registry import Options
from preflight.report.base import Report
from preflight.report.console import hostlist, lines, render
from preflight.transport.base import NodeOutcome, ProgressFn, Transport
from preflight.transport.local import LocalTransport
from tests import fakes, scenarios

PROFILE = "h100-sxm-8x"
NODES = [f"gpu{i:03d}" for i in range(1, 65)]
BAD = "gpu016"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Replay(Transport):
    """Gives each node the recorded captures of its kind (healthy, or the Xid 79 node's)."""

    name = "replay"

    def __init__(self, kinds: Mapping[str, Mapping[str, Capture]], bad: Sequence[str]) -> None:
        self.kinds, self.bad = kinds, set(bad)

    def collect(self, bundles: Mapping[str, Sequence[Probe]], progress: ProgressFn | None = None
                ) -> dict[str, NodeOutcome]:
        out = {}
        for node, probes in bundles.items():
            recorded = self.kinds["xid79" if node in self.bad else "healthy"]
            out[node] = NodeOutcome(node=node, captures={p.name: copy.deepcopy(recorded[p.name]) for p in probes
                                                         if p.name in recorded})
        return out


def _record(tmp: Path, build) -> dict[str, Capture]:  # type: ignore[no-untyped-def]
    bin_dir = fakes.install(tmp / "bin", scenarios.TOOLS)
    env = fakes.env_for(bin_dir, build(tmp / "sc"))
    env["PYTHONPATH"] = scenarios.NVML_PATH
    r = reg.load()
    from preflight.profile import load

    bundles = {"rec": engine.plan_node(engine.select(r, node_only=True), "rec", load(PROFILE), Options()).probes()}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        out = LocalTransport().collect(bundles)["rec"]
    assert not out.error and all(c.ok for c in out.captures.values()), out.error
    return out.captures


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Report:
    """64 nodes, gpu016 with Xid 79, graded by the engine as `preflight run` grades them."""
    tmp = tmp_path_factory.mktemp("fleet")
    kinds = {"healthy": _record(tmp / "ok", scenarios.healthy_h100), "xid79": _record(tmp / "bad", scenarios.with_xid79)}
    r = reg.load()
    results, used = engine.run(r, engine.select(r, node_only=True), NODES, Replay(kinds, [BAD]), profile_name=PROFILE)
    return Report.build("run", results, nodes=NODES)


def _tty(report: Report, **kw: bool) -> list[str]:
    buf = io.StringIO()
    render(report, Console(file=buf, force_terminal=True, width=120), **kw)
    return buf.getvalue().splitlines()


def _piped(report: Report, **kw: bool) -> list[str]:
    buf = io.StringIO()
    render(report, Console(file=buf, width=80), **kw)
    return buf.getvalue().splitlines()


def test_a_64_node_fleet_with_one_bad_node_reads_in_one_screen(fleet: Report) -> None:
    assert len(fleet.results) >= 640 and fleet.verdict.bad_nodes == [BAD]
    tty = [ANSI.sub("", ln) for ln in _tty(fleet)]
    assert len(tty) < 15, "\n".join(tty)
    assert any(ln.startswith("FAIL") and BAD in ln and "gpu.xid" in ln and "79" in ln for ln in tty), tty
    assert any(ln.startswith("PASS") and "gpu[001-015,017-064]" in ln and "checks pass" in ln for ln in tty), tty
    assert any("remedy:" in ln and "reboot" in ln.lower() for ln in tty)
    assert tty[-2].startswith("NO-GO") and "(blocking: gpu016)" in tty[-2] and tty[-1] == "--exclude=gpu016"
    assert ANSI.search("\n".join(_tty(fleet)))  # a terminal gets colour

    piped = _piped(fleet)
    assert len(piped) < 15, "\n".join(piped)
    fails = [ln for ln in piped if ln.startswith("FAIL ")]
    assert len(fails) == 1 and fails[0].startswith(f"FAIL {BAD} gpu.xid: ") and "| remedy: " in fails[0]
    assert "PASS gpu[001-015,017-064]: 10 checks pass" in piped and f"PASS {BAD}: 9 checks pass" in piped
    assert piped[-2].startswith("NO-GO pass 639, fail 1") and piped[-1] == "--exclude=gpu016"


def test_quiet_prints_only_the_failures_and_the_verdict(fleet: Report) -> None:
    piped = _piped(fleet, failures_only=True)
    assert len(piped) == 3 and piped[0].startswith(f"FAIL {BAD} gpu.xid: ")
    assert piped[1].startswith("NO-GO") and piped[2] == "--exclude=gpu016"
    tty = [ANSI.sub("", ln) for ln in _tty(fleet, failures_only=True)]
    assert not [ln for ln in tty if ln.startswith(("PASS", "SKIP"))] and tty[0].startswith("FAIL") and len(tty) <= 5


def _nasty() -> Report:
    long = "rate 200 Gb/sec (4X HDR), expected 400 " + "x" * 300
    res = [Result("ib.hca", "gpu002", Status.FAIL, f"mlx5_3 port 1 slow:\n{long}  ",
                  evidence=["\x1b[31mPort 1:\x1b[0m\tState: Active   ", "  Rate: 200  "], remedy="reseat the cable\n"),
           Result("ib.hca", "gpu003", Status.FAIL, f"mlx5_3 port 1 slow:\n{long}  ",
                  evidence=["Rate: 200"], remedy="reseat the cable\n"),
           Result("net.nic", "gpu002", Status.WARN, "eno2 down  ", remedy=""),
           Result("gpu.xid", "gpu001", Status.PASS, "no Xid"),
           Result("net.mtu", "gpu001", Status.SKIP, "no peers\t"),
           Result("net.mtu", "gpu002", Status.SKIP, "no peers\t"),
           Result("nccl.allreduce", "cluster", Status.ERROR, "sweep did not finish")]
    return Report.build("run", res)


def test_piped_lines_are_one_finding_each_and_greppable() -> None:
    rep = _nasty()
    out = _piped(rep)
    text = "\n".join(out)
    assert not ANSI.search(text) and "\t" not in text and not any(ln != ln.rstrip() for ln in out)
    assert not any(c in text for c in "┃│┏━")  # no box drawing
    finding = re.compile(r"^(FAIL|ERROR|WARN) (\S+) (\S+): ")
    failures = [ln for ln in out if finding.match(ln)]
    assert [finding.match(ln).group(1, 2, 3) for ln in failures] == [  # type: ignore[union-attr]
        ("FAIL", "gpu002", "ib.hca"), ("FAIL", "gpu003", "ib.hca"), ("ERROR", "cluster", "nccl.allreduce"),
        ("WARN", "gpu002", "net.nic")]
    assert all("x" * 300 in ln for ln in failures[:2])  # long text is never wrapped onto a second line
    assert "| evidence: Port 1: State: Active | remedy: reseat the cable" in failures[0]
    assert "SKIP gpu[001-002] net.mtu: no peers" in out and "PASS gpu001: 1 check pass" in out
    assert out[-1] == "--exclude=gpu[002-003]" and out[-2].startswith("NO-GO") and "blocking: gpu[002-003]" in out[-2]
    assert "cluster" not in out[-1]
    assert out == lines(rep)


def test_terminal_groups_nodes_and_prints_evidence_and_remedy_once() -> None:
    out = [ANSI.sub("", ln) for ln in _tty(_nasty())]
    assert sum("reseat the cable" in ln for ln in out) == 1
    head = next(ln for ln in out if ln.startswith("FAIL"))
    assert "gpu[002-003]" in head and "ib.hca" in head
    assert out[-1] == "--exclude=gpu[002-003]"


def test_hostlist_keeps_names_it_cannot_compress() -> None:
    assert hostlist(["gpu001", "gpu002", "gpu004", "login1", "cluster"]) == "gpu[001-002,004],login1,cluster"
    assert hostlist(["a b", "gpu1"]) == "gpu1,a b"


@pytest.mark.real
def test_cli_quiet_on_an_xid79_node(tmp_path: Path) -> None:
    bin_dir = fakes.install(tmp_path / "bin", scenarios.TOOLS)
    env = fakes.env_for(bin_dir, scenarios.with_xid79(tmp_path / "sc"))
    env["PYTHONPATH"] = scenarios.NVML_PATH
    env.pop("PREFLIGHT_CONFIG", None)
    p = subprocess.run([sys.executable, "-m", "preflight.cli", "node", "-q", "--history", "off"], capture_output=True,
                       text=True, env=env, timeout=120)
    assert p.returncode == 1, p.stderr
    out = p.stdout.splitlines()
    assert len(out) == 3 and out[0].split()[0] == "FAIL" and out[0].split()[2] == "gpu.xid:", p.stdout
    assert out[1].startswith("NO-GO") and out[2].startswith("--exclude=")


def test_unreachable_nodes_group_on_a_terminal_and_keep_their_own_words_in_a_pipe() -> None:
    from preflight import rootcause

    checks = engine.select(reg.load(), node_only=True)
    results: list[Result] = []
    for i in (1, 2, 3):
        node = f"gpu{i:03d}"
        why = f"{node} (10.1.0.{i}:22) did not answer within 10 s (connect)"
        results += engine.node_error_results(NodeOutcome(node=node, error=why), checks)
    rep = Report.build("run", rootcause.fold(results, {}))
    tty = [ANSI.sub("", ln) for ln in _tty(rep)]
    heads = [ln for ln in tty if ln.startswith("ERROR")]
    assert len(heads) == 1 and "gpu[001-003]" in heads[0] and "(<address>)" in heads[0], tty
    assert f"({len(checks)} dependent checks skipped on each)" in " ".join(" ".join(tty).split())  # (wrapped)
    assert any("remedy: make <node> reachable" in ln for ln in tty)  # the hostlist is on the line above
    piped = _piped(rep)
    errors = [ln for ln in piped if ln.startswith("ERROR ")]
    assert [ln.split(":", 1)[0] for ln in errors] == [f"ERROR gpu{i:03d} node.reachable" for i in (1, 2, 3)]
    assert all(f"(10.1.0.{i}:22)" in ln and f"make gpu{i:03d} reachable" in ln for i, ln in zip((1, 2, 3), errors, strict=True))
    assert len(piped) == 5 and piped[-1] == "--exclude=gpu[001-003]"


def test_a_long_list_of_blocking_nodes_is_a_count_on_the_verdict_line_and_whole_on_the_exclude_line() -> None:
    results = [Result("gpu.xid", f"gpu{i:04d}", Status.FAIL, "Xid 79") for i in range(1, 400, 7)]
    rep = Report.build("run", results)
    out = lines(rep)
    assert out[-2].endswith(f"(blocking: {len(results)} nodes)"), out[-2]
    assert out[-1] == "--exclude=" + compress([r.node for r in results])
