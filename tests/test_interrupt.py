"""SIGINT / SIGTERM during `preflight node` and `preflight run` (real processes, a hung fake
`nvidia-smi`): every probe process the run started is ended, one line says which nodes were
still pending, the report of what finished is written with the verdict INTERRUPTED, and the
exit code is 128 + the signal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import fakes, scenarios

HUNG_NVIDIA_SMI = [{"match": ".", "hang": True}]


def hung_node_env(tmp: Path) -> tuple[dict[str, str], str]:
    """A healthy faked node whose nvidia-smi hangs on every call; (environment, the marker
    that the hung tools' environments hold: their tool name and this test's scenario folder)."""
    bin_dir = fakes.install(tmp / "bin", scenarios.TOOLS)
    sc = scenarios.healthy_h100(tmp / "sc")
    (sc / "nvidia-smi.json").write_text(json.dumps({"rules": HUNG_NVIDIA_SMI}))
    env = fakes.env_for(bin_dir, sc)
    env.pop("PREFLIGHT_CONFIG", None)
    env["PREFLIGHT_HISTORY"] = "off"
    return env, f"PREFLIGHT_FAKE_DIR={sc}\0"


def procs_with(marker: str, tool: str = "nvidia-smi") -> list[int]:
    """The pids of live (not zombie) fake `tool` processes whose environment holds `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().decode(errors="replace") + "\0"
            state = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in environ and f"PREFLIGHT_FAKE_TOOL={tool}\0" in environ and state != b"Z":
            found.append(int(entry))
    return found


def wait_for(cond, limit: float) -> bool:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return bool(cond())


def kill_left(marker: str, tool: str = "nvidia-smi") -> None:
    for pid in procs_with(marker, tool):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@dataclass
class Ended:
    rc: int
    stdout: str
    stderr: str
    gone: bool  # the hung tools were gone within the wait after preflight ended
    left: list[int]


def interrupt(cmd: list[str], sig: int, marker: str, what: str, *, tool: str = "nvidia-smi", started: int = 2,
              settle: float = 1.0, gone_within: float = 5, **popen: Any) -> Ended:
    """Start `cmd`, wait until `started` of the hung `tool` run, let the others answer for
    `settle` s, send `sig`; its end (within 30 s, or the test fails) and whether the hung tools
    were gone within `gone_within` s. Whatever is left is killed."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    try:
        assert wait_for(lambda: len(procs_with(marker, tool)) >= started, 60), f"the hung {tool} never started"
        time.sleep(settle)
        proc.send_signal(sig)
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            pytest.fail(f"{what} did not end within 30 s of {signal.Signals(sig).name}: {stderr[-2000:]}")
        gone = wait_for(lambda: not procs_with(marker, tool), gone_within)
        left = procs_with(marker, tool)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        kill_left(marker, tool)
    return Ended(proc.returncode, stdout, stderr, gone, left)


COMMANDS = {
    "node": ["node", "--probe-timeout", "120"],
    "run": ["run", "--transport", "local", "--no-sweep", "--probe-timeout", "120"],
}


@pytest.mark.real
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("command", ["node", "run"])
def test_signal_ends_hung_probes_and_writes_an_interrupted_report(tmp_path: Path, command: str,
                                                                   sig: signal.Signals) -> None:
    env, marker = hung_node_env(tmp_path)
    out = tmp_path / "reports"
    # the hung nvidia-smi probes are running (several of them, each in a session of its own)
    e = interrupt([sys.executable, "-m", "preflight.cli", *COMMANDS[command], "--out", str(out)], sig, marker,
                  f"preflight {command}", env=env, cwd=tmp_path)
    gone, left, stdout, stderr = e.gone, e.left, e.stdout, e.stderr
    assert gone, f"{len(left)} hung nvidia-smi probe(s) outlived preflight {command} ({sig.name}): {left}"
    assert e.rc == 128 + sig, (e.rc, stderr[-2000:])
    assert "Traceback" not in stderr, stderr[-2000:]
    node = next(line for line in stderr.splitlines() if line.startswith("interrupted: "))
    assert node.startswith("interrupted: 0 of 1 nodes answered; pending: "), node
    assert node.split("pending: ", 1)[1].strip(), node
    doc = json.loads((out / "report.json").read_text())
    assert doc["verdict"] == "INTERRUPTED", doc["verdict"]
    # what finished is graded; what needed the hung tool is ERROR, interrupted before it answered
    assert any(r["status"] == "pass" for r in doc["results"]), [(r["check"], r["status"]) for r in doc["results"]]
    cut = [r for r in doc["results"] if r["status"] == "error"]
    assert cut and all("interrupted before it answered" in r["summary"] + " ".join(r["evidence"]) for r in cut), cut
    assert "gpu.driver" in {r["check"] for r in cut}, cut
    assert doc["bad_nodes"] == [], doc["bad_nodes"]
    assert "INTERRUPTED" in stdout


@pytest.mark.real
def test_sigterm_ends_the_prologue_without_a_verdict_on_the_node(tmp_path: Path) -> None:
    """slurmd cancelling the job sends SIGTERM: the prologue ends its hung probes, drains
    nothing, writes what finished as INTERRUPTED and exits 143."""
    env, marker = hung_node_env(tmp_path)
    out = tmp_path / "reports"
    e = interrupt([sys.executable, "-m", "preflight.cli", "prologue", "--no-drain", "--budget", "120",
                   "--node", "gpu017", "--history", "off", "--out", str(out)], signal.SIGTERM, marker,
                  "the prologue", env=env, cwd=tmp_path)
    gone, stdout, stderr = e.gone, e.stdout, e.stderr
    assert gone, "hung nvidia-smi probes outlived the prologue"
    assert e.rc == 143, (e.rc, stdout[-1000:], stderr[-2000:])
    assert "interrupted: 0 of 1 nodes answered; pending: gpu017" in stderr, stderr[-2000:]
    assert stdout.startswith("preflight prologue gpu017: INTERRUPTED"), stdout[-2000:]
    assert "drain" not in stdout, stdout
    doc = json.loads((out / "report.json").read_text())
    assert doc["verdict"] == "INTERRUPTED" and doc["bad_nodes"] == [], doc["verdict"]


@pytest.mark.real
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_over_ssh_ends_the_nodes_hung_tools_and_names_the_pending_node(tmp_path: Path,
                                                                              sig: signal.Signals) -> None:
    """Three nodes over real sshd, n2's nvidia-smi hung: the signal ends n2's hung tools (on the
    node), n1 and n3 answered, n2 is pending, and the report is INTERRUPTED."""
    from tests.conftest import need
    from tests.netcluster import healthy_cluster, prerequisites

    need(not prerequisites(), f"namespace cluster prerequisites: {prerequisites()}")
    with healthy_cluster(3, tmp_path / "c", prefix="pi", subnet="10.62.7") as c:
        n2 = c.node("n2").home / "scenario"
        (n2 / "nvidia-smi.json").write_text(json.dumps({"rules": HUNG_NVIDIA_SMI}))
        marker = f"PREFLIGHT_FAKE_DIR={n2}\0"
        out = tmp_path / "reports"
        e = interrupt(["ip", "netns", "exec", c.client_ns, sys.executable, "-m", "preflight.cli", "run",
                       "--hosts", "n[1-3]", "--ssh-config", str(c.ssh_config), "--transport", "ssh",
                       "--connect-timeout", "5", "--command-timeout", "120", "--probe-timeout", "120",
                       "--no-sweep", "--profile", "h100-sxm-8x", "--out", str(out)], sig, marker, "preflight run",
                      settle=3.0, gone_within=10, cwd=tmp_path,  # settle: n1 and n3 answer
                      env={**os.environ, "PREFLIGHT_HISTORY": "off"})
    gone, stderr = e.gone, e.stderr
    assert gone, "n2's hung nvidia-smi probes outlived preflight run"
    assert e.rc == 128 + sig, (e.rc, stderr[-2000:])
    assert "Traceback" not in stderr, stderr[-2000:]
    assert "interrupted: 2 of 3 nodes answered; pending: n2" in stderr, stderr[-2000:]
    doc = json.loads((out / "report.json").read_text())
    assert doc["verdict"] == "INTERRUPTED" and doc["bad_nodes"] == [], (doc["verdict"], doc["bad_nodes"])
    answered = {r["node"] for r in doc["results"] if r["status"] == "pass"}
    assert {"n1", "n3"} <= answered, answered
    cut = [r for r in doc["results"] if r["status"] == "error"]
    assert cut and all("interrupted before it answered" in r["summary"] + " ".join(r["evidence"]) for r in cut), cut


# ----- the verdict, the writers, ending the probes: pure or small ---------------------------------


def _interrupted_report(signum: int = signal.SIGINT):
    from preflight.grading import interrupted
    from preflight.model import Result, Status
    from preflight.report.base import Report

    cut = Result("gpu.driver", "n2", Status.ERROR, "output lost: interrupted before it answered",
                 ["probe nvidia-smi-q: sent, its output never came back"], facts={"interrupted": True})
    found = Result("gpu.xid", "n3", Status.FAIL, "Xid 79 on GPU 0000:5d:00")
    report = Report.build("run", [Result("gpu.xid", "n1", Status.PASS, "no Xid"), cut, found], nodes=["n1", "n2", "n3"])
    report.verdict = interrupted(report.verdict, signum)
    return report


def test_the_interrupted_verdict_blocks_on_findings_not_on_the_interruption() -> None:
    report = _interrupted_report()
    v = report.verdict
    assert v.verdict == "INTERRUPTED" and v.exit_code == 130
    assert [r.check for r in v.blocking] == ["gpu.xid"] and v.bad_nodes == ["n3"]  # a FAIL found before stays
    assert v.counts["error"] == 1 and v.counts["fail"] == 1
    assert _interrupted_report(signal.SIGTERM).verdict.exit_code == 143


def test_every_writer_takes_the_interrupted_verdict() -> None:
    from preflight.report import html, junit, markdown, prometheus

    report = _interrupted_report()
    doc = json.loads(report.to_json())
    assert doc["verdict"] == "INTERRUPTED" and doc["bad_nodes"] == ["n3"]
    assert markdown.render(report).startswith("# preflight run: INTERRUPTED")
    assert "INTERRUPTED" in html.render(report)
    xml = junit.render(report)
    assert "interrupted before it answered" in xml and "Xid 79" in xml
    prom = prometheus.render(report, now=1.0)
    assert 'preflight_verdict_go{command="run"} 0' in prom, prom


@pytest.mark.real
def test_end_live_ends_a_group_that_ignores_sigterm_and_starts_no_more(tmp_path: Path) -> None:
    import threading

    from preflight import probe_runner

    script = tmp_path / "stubborn"
    script.write_text("#!/bin/sh\ntrap '' TERM\nsleep 300 &\nwait\n")  # its child ignores TERM too
    script.chmod(0o755)
    results: list = []
    worker = threading.Thread(target=lambda: results.append(probe_runner.run_command([str(script)], timeout=120)))
    worker.start()
    try:
        assert wait_for(lambda: bool(probe_runner.LIVE), 10)
        pgid = next(iter(probe_runner.LIVE)).pid
        time.sleep(0.3)
        start = time.monotonic()
        assert probe_runner.end_live(grace=0.5) == 1
        worker.join(timeout=10)
        assert not worker.is_alive() and results[0].rc == -signal.SIGKILL, results  # TERM ignored: SIGKILL ended it
        assert time.monotonic() - start < 5
        assert wait_for(lambda: not _group_members(pgid), 5), _group_members(pgid)
        late = probe_runner.run_command([str(script)], timeout=5)
        assert late.state == probe_runner.FAILED and "not started" in late.reason
    finally:
        probe_runner.reopen()
        probe_runner.kill_live()
    assert probe_runner.run_command(["true"], timeout=5).rc == 0


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[2] == str(pgid).encode() and fields[0] != b"Z":
                members.append(int(entry))
    return members


@pytest.mark.real
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_over_srun_cancels_the_step_and_names_the_pending_node(tmp_path: Path, sig: signal.Signals) -> None:
    """Three Slurm nodes, n2's dmesg hung: the signal cancels the srun step (n2's runner ends its
    hung probe), n2 is pending, what n1 and n3 sent is graded, the report is INTERRUPTED."""
    from tests.slurm import ROOT, clean_kernel_logs, slurm_cluster

    with slurm_cluster(tmp_path / "c", "psi", "10.62.9", n=3) as c:
        clean_kernel_logs(c)
        n2 = c.node("n2").home / "scenario"
        c.scenario("n2", {"dmesg": [{"match": ".*", "hang": True}]})
        marker = f"PREFLIGHT_FAKE_DIR={n2}\0"
        out = tmp_path / "reports"
        e = interrupt(["ip", "netns", "exec", c.client_ns, sys.executable, "-m", "preflight.cli", "run",
                       "--transport", "srun", "--hosts", "n[1-3]", "--only", "gpu.xid", "--no-sweep",
                       "--probe-timeout", "120", "--profile", "generic", "--out", str(out)], sig, marker,
                      "preflight run", tool="dmesg", started=1, settle=2.0, gone_within=15, cwd=tmp_path,
                      env={**c.slurm_env(), "PYTHONPATH": str(ROOT), "PREFLIGHT_HISTORY": "off"})
    gone, stderr = e.gone, e.stderr
    assert gone, "n2's hung dmesg outlived preflight run over srun"
    assert e.rc == 128 + sig, (e.rc, stderr[-2000:])
    assert "Traceback" not in stderr, stderr[-2000:]
    assert "interrupted: 2 of 3 nodes answered; pending: n2" in stderr, stderr[-2000:]
    doc = json.loads((out / "report.json").read_text())
    assert doc["verdict"] == "INTERRUPTED" and doc["bad_nodes"] == [], (doc["verdict"], doc["bad_nodes"])
    xid = {r["node"]: r for r in doc["results"] if r["check"] == "gpu.xid"}
    assert xid["n1"]["status"] == "pass" and xid["n3"]["status"] == "pass", xid
    assert xid["n2"]["status"] in ("error", "skip"), xid["n2"]  # ERROR, or folded under n2's one ERROR
    cut = [r for r in doc["results"] if r["status"] == "error"]
    assert [r["node"] for r in cut] == ["n2"], cut
    assert "interrupted before it answered" in cut[0]["summary"] + " ".join(cut[0]["evidence"]), cut
