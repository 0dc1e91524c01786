"""The console report: a fleet in one screen on a terminal, one plain line per finding in a pipe.

The 64-node runs go through `engine.run` with a transport double that replays real captures:
the probes of a healthy faked 8xH100 node and of one with Xid 79, collected once each by the
real local transport from the fake tools (real-format output), given back per node."""

from __future__ import annotations

import copy
import io
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from rich.console import Console

from preflight import engine
from preflight import registry as reg
from preflight.inventory import compress
from preflight.model import Capture, CaptureState, Result, Status
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
    scenarios.nvml_env(env)
    r = reg.load()
    from preflight.profile import load

    bundles = {"rec": engine.plan_node(engine.select(r, node_only=True), "rec", load(PROFILE), Options()).probes()}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        out = LocalTransport().collect(bundles)["rec"]
    # every probe ran, or its tool is not among the fakes (then the same on every node)
    assert not out.error and all(c.ok or c.state is CaptureState.MISSING for c in out.captures.values()), out.error
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


def _piped(report: Report, **kw: bool) -> list[str]:  # a file: not a terminal
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
    assert len(piped) <= 8, "\n".join(piped)
    fails = [ln for ln in piped if ln.startswith("FAIL ")]
    assert len(fails) == 1 and fails[0].startswith(f"FAIL {BAD} gpu.xid: ") and "| remedy: " in fails[0]
    n = sum(r.status is Status.PASS for r in fleet.results if r.node == "gpu001")  # the node checks in force
    assert f"PASS gpu[001-015,017-064]: {n} checks pass" in piped and f"PASS {BAD}: {n - 1} checks pass" in piped
    assert piped[-2].startswith(f"NO-GO pass {64 * n - 1}, fail 1") and piped[-1] == "--exclude=gpu016"


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


def test_piped_lines_group_like_the_terminal_and_per_node_gives_one_line_per_node() -> None:
    rep = _nasty()
    out = _piped(rep)
    text = "\n".join(out)
    assert not ANSI.search(text) and "\t" not in text and not any(ln != ln.rstrip() for ln in out)
    assert not any(c in text for c in "┃│┏━")  # no box drawing
    finding = re.compile(r"^(FAIL|ERROR|WARN) (\S+) (\S+): ")
    failures = [ln for ln in out if finding.match(ln)]
    assert [finding.match(ln).group(1, 2, 3) for ln in failures] == [  # type: ignore[union-attr]
        ("FAIL", "gpu[002-003]", "ib.hca"), ("ERROR", "cluster", "nccl.allreduce"), ("WARN", "gpu002", "net.nic")]
    assert "x" * 300 in failures[0]  # long text is never wrapped onto a second line
    # the group shows its first node's evidence, naming that node, and its remedy once
    assert "| evidence: Port 1: State: Active (gpu002) | remedy: reseat the cable" in failures[0]
    assert "SKIP gpu[001-002] net.mtu: no peers" in out and "PASS gpu001: 1 check pass" in out
    assert out[-1] == "--exclude=gpu[002-003]" and out[-2].startswith("NO-GO") and "blocking: gpu[002-003]" in out[-2]
    assert "cluster" not in out[-1]
    assert out == lines(rep)

    per = _piped(rep, per_node=True)
    failures = [ln for ln in per if finding.match(ln)]
    assert [finding.match(ln).group(1, 2, 3) for ln in failures] == [  # type: ignore[union-attr]
        ("FAIL", "gpu002", "ib.hca"), ("FAIL", "gpu003", "ib.hca"), ("ERROR", "cluster", "nccl.allreduce"),
        ("WARN", "gpu002", "net.nic")]
    assert "| evidence: Port 1: State: Active | remedy: reseat the cable" in failures[0]
    assert "| evidence: Rate: 200 | remedy: reseat the cable" in failures[1]  # each node its own evidence
    assert "SKIP gpu001 net.mtu: no peers" in per and "SKIP gpu002 net.mtu: no peers" in per
    assert per[-2:] == out[-2:] and per == lines(rep, per_node=True)
    assert _tty_plain(rep, per_node=True) == per  # --per-node is plain lines on a terminal too


def _tty_plain(report: Report, **kw: bool) -> list[str]:
    return [ANSI.sub("", ln) for ln in _tty(report, **kw)]


def test_quiet_shows_fail_and_error_only_in_both_views() -> None:
    rep = _nasty()
    for out in (_piped(rep, failures_only=True), _tty_plain(rep, failures_only=True),
                _piped(rep, failures_only=True, per_node=True)):
        heads = [ln.split()[0] for ln in out if ln.split()[0] in ("FAIL", "ERROR", "WARN", "SKIP", "PASS")]
        assert heads and set(heads) <= {"FAIL", "ERROR"}, out
        assert "net.nic" not in "\n".join(out) and out[-1] == "--exclude=gpu[002-003]", out
        assert out[-2].startswith("NO-GO") and "warn 1" in out[-2]  # the counts still say there was a WARN
    strict = Report.build("run", rep.results, warn_as_fail=True)  # a WARN that blocks is shown
    assert any(ln.startswith("WARN gpu002 net.nic") for ln in _piped(strict, failures_only=True))


def test_nodes_are_in_natural_order() -> None:
    nodes = ["node10", "node2", "node1", "node9", "node11"]
    res = [Result("gpu.xid", n, Status.FAIL, "Xid 79") for n in nodes]
    res += [Result("net.nic", n, Status.WARN, f"{n}: eno2 down") for n in nodes]
    res += [Result("gpu.driver", n, Status.PASS, "ok") for n in nodes]
    rep = Report.build("run", res)
    per = lines(rep, per_node=True)
    assert [ln.split()[1] for ln in per if ln.startswith("FAIL")] == ["node1", "node2", "node9", "node10", "node11"]
    out = lines(rep)
    assert out[0] == "FAIL node[1-2,9-11] gpu.xid: Xid 79"
    assert out[1] == "WARN node[1-2,9-11] net.nic: <node>: eno2 down"  # the node's own name abstracted
    assert hostlist(nodes) == "node[1-2,9-11]"
    assert hostlist(["n10", "login", "n9"]) == "n[9-10],login"
    assert out[-1] == "--exclude=node[1-2,9-11]"
    from preflight.report import html, junit

    suites = re.findall(r'<testsuite name="([^"]+)"', junit.render(rep))
    assert suites == ["node1", "node2", "node9", "node10", "node11"], suites
    page = html.render(rep)
    assert [page.index(f">{n}<") for n in ("node1", "node2", "node9", "node10")] == \
        sorted(page.index(f">{n}<") for n in ("node1", "node2", "node9", "node10"))


def test_a_wrapped_terminal_line_keeps_its_indent() -> None:
    long_ev = "Active: failed (Result: exit-code) since Mon 2026-11-23 09:12:46 UTC; 28min ago " * 2
    res = [Result("fabric.manager", "gpu001", Status.FAIL, "nvidia-fabricmanager is failed " + "and stays so " * 8,
                  evidence=[long_ev], remedy="systemctl restart nvidia-fabricmanager; " * 4)]
    buf = io.StringIO()
    render(Report.build("run", res), Console(file=buf, force_terminal=True, width=60, record=True))
    out = [ANSI.sub("", ln) for ln in buf.getvalue().splitlines()]
    head = out.index(next(ln for ln in out if ln.startswith("FAIL")))
    column = out[head].index("nvidia-fabricmanager is failed")
    body = out[head + 1:out.index(next(ln for ln in out if ln.startswith("NO-GO")))]
    summary_rest = [ln for ln in body if ln.strip() and not ln.startswith(" " * 6)]
    assert not summary_rest, out  # nothing under a group's line starts at the margin
    wrapped_summary = body[:next(i for i, ln in enumerate(body) if "Active:" in ln)]
    assert wrapped_summary and all(ln[:column].strip() == "" for ln in wrapped_summary), out
    remedy = body[next(i for i, ln in enumerate(body) if "remedy:" in ln):]
    assert len(remedy) > 1 and all(ln.startswith(" " * 6) and ln[6] != " " for ln in remedy), out


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
    scenarios.nvml_env(env)
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
    assert len(errors) == 1 and errors[0].startswith("ERROR gpu[001-003] node.reachable: node not checked: <node> (<address>) did not")
    assert "make <node> reachable" in errors[0] and "evidence" not in errors[0] and len(piped) == 3 and piped[-1] == "--exclude=gpu[001-003]"
    per = _piped(rep, per_node=True)
    errors = [ln for ln in per if ln.startswith("ERROR ")]
    assert [ln.split(":", 1)[0] for ln in errors] == [f"ERROR gpu{i:03d} node.reachable" for i in (1, 2, 3)]
    assert all(f"(10.1.0.{i}:22)" in ln and f"make gpu{i:03d} reachable" in ln for i, ln in zip((1, 2, 3), errors, strict=True))
    assert len(per) == 5 and per[-1] == "--exclude=gpu[001-003]"


def test_a_long_list_of_blocking_nodes_is_a_count_on_the_verdict_line_and_whole_on_the_exclude_line() -> None:
    results = [Result("gpu.xid", f"gpu{i:04d}", Status.FAIL, "Xid 79") for i in range(1, 400, 7)]
    rep = Report.build("run", results)
    out = lines(rep)
    assert out[-2].endswith(f"(blocking: {len(results)} nodes)"), out[-2]
    assert out[-1] == "--exclude=" + compress([r.node for r in results])


def _fleet_folders(root: Path, n: int = 18, bad: Mapping[str, str] | None = None) -> Path:
    """Per-node capture folders of `n` nodes (node1..) saved from the example captures: every
    node has persistence mode off (a fleet-wide WARN), node7 an Xid 79 in its kernel log,
    node12 a failed fabric manager (the faulty example's `systemctl status`)."""
    examples = Path(__file__).resolve().parent.parent / "examples" / "captures"
    fleet = root / "fleet"
    for i in range(1, n + 1):
        node = fleet / f"node{i}"
        shutil.copytree(examples / "healthy-node", node)
        (node / "all_reduce_perf.txt").unlink()
        csv = node / "nvidia-smi-query-gpu.csv"
        csv.write_text(csv.read_text().replace("Enabled", "Disabled"))
    with (fleet / "node7" / "dmesg.txt").open("a") as f:
        f.write(scenarios.XID79)
    shutil.copy(examples / "faulty-node" / "systemctl-status-nvidia-fabricmanager.txt", fleet / "node12")
    return fleet


def _analyze(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PREFLIGHT_CONFIG", "FORCE_COLOR")}
    return subprocess.run([sys.executable, "-m", "preflight.cli", "analyze", *args, "--history", "off"],
                          capture_output=True, text=True, timeout=300, env=env)  # stdout is a pipe


@pytest.mark.real
def test_sixteen_healthy_and_two_faulty_nodes_piped_read_in_a_few_lines(tmp_path: Path) -> None:
    fleet = _fleet_folders(tmp_path)
    p = _analyze(str(fleet))
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    out = p.stdout.splitlines()
    assert len(out) <= 8, p.stdout
    assert [ln.split(":")[0] for ln in out if ln.startswith(("FAIL", "WARN"))] == [
        "FAIL node7 gpu.xid", "FAIL node12 fabric.manager", "WARN node[1-18] gpu.inventory"], p.stdout
    assert "| evidence: Active: failed" in out[1]  # the telling line, not `Loaded: loaded`
    assert "PASS node[1-6,8-11,13-18]: " in p.stdout and out[-1].startswith("NO-GO") and "node[7,12]" in out[-1]
    assert not p.stderr.strip(), p.stderr  # nothing about reports (none were written)

    per = _analyze(str(fleet), "--per-node").stdout.splitlines()
    findings = [ln for ln in per if ln.startswith(("FAIL", "ERROR", "WARN", "SKIP"))]
    assert len(findings) == 2 + 18, per  # one line per node and finding
    assert [ln.split()[1] for ln in findings if ln.startswith("WARN")] == [f"node{i}" for i in range(1, 19)]
    assert [ln.split()[1] for ln in per if ln.startswith("FAIL")] == ["node7", "node12"]  # by node, natural order

    quiet = _analyze(str(fleet), "-q").stdout.splitlines()
    assert [ln.split()[0] for ln in quiet] == ["FAIL", "FAIL", "NO-GO"], quiet


def test_a_long_hostlist_on_a_narrow_terminal_is_whole_and_indented() -> None:
    nodes = [f"gpu{i:03d}" for i in range(1, 200, 3)]
    res = [Result("net.nic", n, Status.WARN, "eno2 MTU 1500, expected 9000", remedy="set MTU 9000") for n in nodes]
    res += [Result("gpu.driver", n, Status.PASS, "ok") for n in nodes]
    buf = io.StringIO()
    render(Report.build("run", res), Console(file=buf, force_terminal=True, width=80, color_system=None))
    out = buf.getvalue().splitlines()
    assert "…" not in buf.getvalue()  # nothing cut off
    assert "".join(ln.strip() for ln in out).count("net.nic") == 1
    hosts = "".join(ln.strip() for ln in out[:next(i for i, ln in enumerate(out) if "net.nic" in ln)])
    assert hosts == "WARN  " + hostlist(nodes), out
    assert all(ln.startswith(" " * 6) for ln in out[1:next(i for i, ln in enumerate(out) if "remedy" in ln) + 1])
