"""The Slurm adapter against fake Slurm clients (pure, no daemon): node addresses for any
number of nodes with one scontrol call, host names of a partition or nodelist, a job's nodes
from scontrol or sacct, the drain command line; the srun transport resolves through it."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest

from preflight import slurm
from preflight.inventory import HostlistError, expand
from preflight.transport.srun import SrunTransport

# A stand-in for Slurm's client: logs its argv, answers `show node -o HOSTLIST` in the one-line
# format for the nodes of its table (NAME ADDR per line), "not found" on stderr (exit 1) for the
# others; its own small hostlist expansion, independent of preflight's.
FAKE = r'''#!PYTHON
import json, os, re, sys
with open(os.environ["FAKE_LOG"], "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\n")
if os.environ.get("FAKE_FAIL"):
    print(os.environ["FAKE_FAIL"], file=sys.stderr)
    sys.exit(1)
table = dict(line.split() for line in open(os.environ["FAKE_TABLE"]) if line.strip())

def expand(text):
    out = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?([^,\[]*)", text):
        head, ranges, tail = m.groups()
        if ranges is None:
            out.append(head + tail)
            continue
        for item in ranges.split(","):
            lo, _, hi = item.partition("-")
            for i in range(int(lo), int(hi or lo) + 1):
                out.append(head + str(i).zfill(len(lo)) + tail)
    return out

args = sys.argv[1:]
if args[:3] == ["show", "node", "-o"]:
    missing = 0
    for name in expand(args[3]):
        if name not in table:
            print("Node %s not found" % name, file=sys.stderr)
            missing += 1
            continue
        print("NodeName=%s Arch=x86_64 CoresPerSocket=4 CPUAlloc=0 NodeAddr=%s NodeHostName=%s "
              "Version=23.11.4 OS=Linux 6.8.0 #1 SMP RealMemory=1000 State=IDLE ThreadsPerCore=1 "
              "Partitions=main Reason=(null)" % (name, table[name], name))
    sys.exit(1 if missing else 0)
sys.exit(2)
'''


def fake_slurm(tmp_path: Path, table: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake `scontrol` on PATH; returns the log of its calls (one JSON argv per line)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    script = bindir / "scontrol"
    script.write_text(FAKE.replace("PYTHON", sys.executable))
    script.chmod(0o755)
    (tmp_path / "table").write_text("".join(f"{n} {a}\n" for n, a in table.items()))
    log = tmp_path / "calls.log"
    log.write_text("")
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("FAKE_TABLE", str(tmp_path / "table"))
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return log


def calls(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line]


def test_a_thousand_node_addresses_take_one_scontrol_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [f"gpu{i:04d}" for i in range(1, 1001)]
    table = {n: f"10.{i // 250}.{i % 250}.{7 + i % 3}" for i, n in enumerate(nodes)}
    log = fake_slurm(tmp_path, table, monkeypatch)
    addrs = slurm.node_addresses(nodes)
    assert calls(log) == ['["show", "node", "-o", "gpu[0001-1000]"]']
    assert addrs == table and list(addrs) == nodes


def test_node_addr_differs_from_the_name_and_unknown_nodes_keep_their_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = fake_slurm(tmp_path, {"n1": "10.0.0.11", "n2": "n2-ib.fabric", "n4": "10.0.0.14"}, monkeypatch)
    # n3 is unknown to Slurm: scontrol fails (exit 1) but still describes the others
    assert slurm.node_addresses(["n1", "n2", "n3", "n4"]) == {"n1": "10.0.0.11", "n2": "n2-ib.fabric", "n3": "n3",
                                                              "n4": "10.0.0.14"}
    assert len(calls(log)) == 1


def test_node_addresses_never_raise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = fake_slurm(tmp_path, {"n1": "10.0.0.11"}, monkeypatch)
    assert slurm.node_addresses([]) == {} and calls(log) == []  # nothing to ask: no call
    # a name that is not a plain host name is never put on scontrol's command line
    assert slurm.node_addresses(["n1", "-oProxyCommand=x"]) == {"n1": "10.0.0.11",
                                                                "-oProxyCommand=x": "-oProxyCommand=x"}
    assert calls(log) == ['["show", "node", "-o", "n1"]']
    monkeypatch.setenv("FAKE_FAIL", "slurm_load_node error: Unable to contact slurm controller")
    assert slurm.node_addresses(["n1", "n2"]) == {"n1": "n1", "n2": "n2"}
    assert slurm.node_addresses(["n1"], scontrol=str(tmp_path / "no-such-scontrol")) == {"n1": "n1"}


def test_show_nodes_fails_only_when_slurm_describes_no_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_slurm(tmp_path, {"n1": "10.0.0.11"}, monkeypatch)
    assert set(slurm.show_nodes(["n1", "n9"])) == {"n1"}
    with pytest.raises(slurm.SlurmError, match=r"failed \(1\): Node n9 not found"):
        slurm.show_nodes(["n9"])


def test_srun_transport_resolves_all_nodes_with_one_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [f"n{i}" for i in range(1, 17)]
    log = fake_slurm(tmp_path, {n: f"10.9.0.{i}" for i, n in enumerate(nodes, 1)}, monkeypatch)
    t = SrunTransport()
    got = t.resolve_addresses(nodes + ["ghost"])
    assert got == {**{n: f"10.9.0.{i}" for i, n in enumerate(nodes, 1)}, "ghost": "ghost"}
    assert len(calls(log)) == 1
    assert t.resolve_hostname("n3") == "10.9.0.3" and t.resolve_addresses(["n1", "ghost"])["n1"] == "10.9.0.1"
    assert len(calls(log)) == 1  # answered from what the first call brought back
    t.close()


def _tool(bindir: Path, name: str, body: str) -> None:
    bindir.mkdir(exist_ok=True)
    path = bindir / name
    path.write_text(f"#!/bin/sh\necho \"$0 $*\" >> {bindir / 'calls'}\n{body}\n")
    path.chmod(0o755)


def test_hostnames_of_a_nodelist_and_a_partition(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bindir = tmp_path / "bin"
    _tool(bindir, "scontrol", 'printf "n1\\nn2\\nn2\\n\\n"')
    _tool(bindir, "sinfo", 'printf "g1\\ng2\\n"')
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    assert slurm.hostnames(nodelist="n[1-2]") == ["n1", "n2"]
    assert slurm.hostnames(partition="gpu") == ["g1", "g2"]
    said = (bindir / "calls").read_text().splitlines()
    assert said[0].endswith("scontrol show hostnames n[1-2]") and said[1].endswith("sinfo -h -N -o %N -p gpu")


@pytest.mark.parametrize("body,needle", [
    ('echo "n1;reboot"', "invalid node name"),
    ("true", "no nodes in partition p"),
    ('echo "sinfo: error: Unable to contact slurm controller" >&2; exit 1', "Unable to contact"),
    ("sleep 30", "did not answer within 1 s"),
])
def test_hostnames_errors_are_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, needle: str) -> None:
    bindir = tmp_path / "bin"
    _tool(bindir, "sinfo", body)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(HostlistError, match=needle):
        slurm.hostnames(partition="p", timeout=1)


def test_hostnames_without_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(HostlistError, match="not found: give --hosts"):
        slurm.hostnames(nodelist="n1")


SCONTROL_JOB = ("JobId=4242 JobName=train UserId=ml(1000) JobState=RUNNING Reason=None ExitCode=0:0 "
                "StartTime=2026-11-23T09:02:11 EndTime=Unknown NodeList=gpu[01-04] BatchHost=gpu01")
SACCT_JOB = "4243|gpu[05-06]|2026-11-22T08:00:00|2026-11-22T10:00:00|FAILED|1:0"


def _job_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scontrol: str, sacct: str) -> Path:
    bindir = tmp_path / "bin"
    _tool(bindir, "scontrol", scontrol)
    _tool(bindir, "sacct", sacct)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return bindir / "calls"


def test_job_nodes_from_scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _job_tools(tmp_path, monkeypatch, f"echo {shlex.quote(SCONTROL_JOB)}", "exit 1")
    job = slurm.job_nodes("4242")
    assert (job.job_id, job.nodelist, job.start, job.state, job.problem) == ("4242", "gpu[01-04]",
                                                                           "2026-11-23T09:02:11", "RUNNING", "")
    assert expand(job.nodelist) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert len(log.read_text().splitlines()) == 1  # no sacct when scontrol knew the job


def test_job_nodes_falls_back_to_sacct(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _job_tools(tmp_path, monkeypatch, 'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1',
                     f"echo {shlex.quote(SACCT_JOB)}")
    job = slurm.job_nodes("4243")
    assert (job.job_id, job.nodelist, job.end, job.state, job.exit_code) == ("4243", "gpu[05-06]",
                                                                           "2026-11-22T10:00:00", "FAILED", "1:0")
    said = log.read_text().splitlines()
    assert said[0].endswith("scontrol show job -o 4243")
    assert said[1].endswith("sacct -j 4243 -X -n -P -o JobID,NodeList,Start,End,State,ExitCode")


def test_job_nodes_says_why_when_nobody_knows_the_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _job_tools(tmp_path, monkeypatch, 'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1', "true")
    job = slurm.job_nodes("99")
    assert not job.nodelist and job.problem == "scontrol: slurm_load_jobs error: Invalid job id specified; sacct: no output"
    _job_tools(tmp_path, monkeypatch, "exit 0", 'echo "sacct: error: accounting storage is disabled" >&2; exit 1')
    job = slurm.job_nodes("99")
    assert not job.nodelist and job.problem == "scontrol: no output; sacct: sacct: error: accounting storage is disabled"
    for bad in ("", "42; reboot", "-1", "4242_x", "4242\n"):
        assert "use digits" in slurm.job_nodes(bad).problem
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert "not found" in slurm.job_nodes("7").problem


def test_drain_command_is_one_quoted_line() -> None:
    reason = slurm.drain_reason("triage", 'Xid 79 "GPU fell off" [bus]')
    line = slurm.drain_command(["gpu02", "gpu01", "gpu03"], reason)
    assert line == ("scontrol update 'NodeName=gpu[01-03]' State=DRAIN "
                    "'Reason=preflight: triage Xid 79 \"GPU fell off\" (bus)'")
    assert shlex.split(line)[-1] == f"Reason={reason}"


def test_requeue_command() -> None:
    assert slurm.requeue_command("4242_7") == "scontrol requeue 4242_7"
    assert slurm.requeue_command("") == slurm.requeue_command("1; reboot") == "scontrol requeue <job>"
