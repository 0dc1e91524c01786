"""The scheduler's view of a run: real nodes only in bad_nodes, --bad-nodes FILE, --exclude,
and hostlists in the form Slurm accepts.

`cluster` (cross-node checks, the sweep), a link `a<->b` and a triage verdict's `job` are
pseudo-nodes: a failure there makes the verdict NO-GO but names no node a scheduler could
drain. Slurm's own reading of the hostlists written here is tests/slurm/test_bad_nodes_real.py.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from preflight import engine
from preflight.grading import decide
from preflight.history.analysis import summarize
from preflight.history.store import open_store
from preflight.inventory import compress, expand
from preflight.model import CLUSTER, JOB, Result, Status, is_node, real_nodes
from preflight.report.base import Report
from preflight.report.emit import BadNodesSink, Output, OutputError, choose_sinks, emit
from preflight.sweep.pairs import key as link_key
from tests.history import HOUR, T0, res

ROOT = Path(__file__).resolve().parents[1]
XID79 = ("NVRM: Xid (PCI:0000:5d:00): 79, pid=1234, name=python3, GPU has fallen off the bus.")


def r(check: str, node: str, status: Status) -> Result:
    return Result(check=check, node=node, status=status, summary=f"{check} {status.value}")


def cli(*args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PREFLIGHT_HISTORY"] = "off"
    return subprocess.run([sys.executable, "-m", "preflight.cli", *args], input=stdin, capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=env)


# --------------------------------------------------------------------------------------------
# pseudo-nodes


def test_pseudo_nodes_are_not_nodes() -> None:
    assert not is_node(CLUSTER) and not is_node(JOB) and not is_node(link_key("n2", "n1")) and not is_node("")
    assert is_node("gpu001") and is_node("rack1-node01") and is_node("10.0.0.7")
    # a triage verdict names its culprits comma-separated: each is a node of its own
    assert real_nodes(["n3,n1", CLUSTER, "n1<->n2", JOB, "n2"]) == ["n1", "n2", "n3"]


def test_decide_lists_real_nodes_only() -> None:
    results = [r("cluster.mtu", CLUSTER, Status.FAIL), r("nccl.pingpong", link_key("n1", "n2"), Status.FAIL),
               r("nccl.allreduce", CLUSTER, Status.ERROR), r("gpu.xid", "n3", Status.FAIL),
               r("gpu.xid", "n1", Status.PASS), r("triage.verdict", "n5,n6", Status.FAIL),
               r("triage.verdict", JOB, Status.ERROR)]
    v = decide(results)
    assert v.verdict == "NO-GO" and v.bad_nodes == ["n3", "n5", "n6"]
    assert {x.node for x in v.blocking} >= {CLUSTER, "n1<->n2", JOB}  # still what made it NO-GO


def test_a_failure_that_concerns_no_single_node_is_no_go_with_no_node_named() -> None:
    results = [r("gpu.xid", "n1", Status.PASS), r("gpu.xid", "n2", Status.PASS),
               r("nccl.allreduce", CLUSTER, Status.FAIL)]
    report = Report.build("run", results)
    assert report.verdict.verdict == "NO-GO" and report.verdict.exit_code == 1
    assert report.verdict.bad_nodes == [] and report.bad_hostlist() == ""
    doc = json.loads(report.to_json())
    assert doc["bad_nodes"] == [] and doc["nodes"] == ["n1", "n2"]


def test_reports_list_no_pseudo_node() -> None:
    from preflight.report import html, markdown

    results = [r("gpu.xid", "gpu001", Status.FAIL), r("gpu.xid", "gpu002", Status.PASS),
               r("gpu.xid", "gpu003", Status.FAIL), r("cluster.mtu", CLUSTER, Status.FAIL),
               r("nccl.pingpong", link_key("gpu001", "gpu002"), Status.FAIL)]
    report = Report.build("run", results)
    assert report.nodes == ["gpu001", "gpu002", "gpu003"] and report.verdict.bad_nodes == ["gpu001", "gpu003"]
    md = markdown.render(report)
    assert "- nodes blocking the job: gpu[001,003]" in md
    matrix = md.split("## Matrix", 1)[1].split("##", 1)[0]
    assert "gpu002" in matrix and "| cluster " not in matrix and "<->" not in matrix
    assert "cluster.mtu" in md  # the cross-node failure is still reported, under Findings
    page = html.render(report)
    nodes_table = page.split('<table id="nodes">', 1)[1].split("</table>", 1)[0]
    assert "<td>gpu001</td>" in nodes_table and "<td>cluster</td>" not in nodes_table
    assert "Nodes blocking the job:</b> gpu[001,003]" in page


def test_history_lemons_flappers_and_node_lists_hold_real_nodes_only(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path}/h.db") as store:
        for i in range(8):
            flap = Status.FAIL if i % 2 else Status.PASS
            results = [res("gpu.xid", "n1", "pass"), res("gpu.xid", "n2", "fail" if i >= 4 else "pass"),
                       res("cluster.mtu", CLUSTER, flap.value), res("cluster.nodes", CLUSTER, "error"),
                       res("nccl.pingpong", link_key("n1", "n2"), "fail")]
            store.record({"command": "run", "started": T0 + i * HOUR, "results": [x.to_dict() for x in results]})
        rows = store.rows()
        runs = store.runs()
    summary = summarize(rows)
    assert summary.nodes == ["n1", "n2"]
    assert summary.lemon_nodes == ["n2"]  # cluster.mtu and the link failed as often, but are no node
    assert summary.flapping_nodes == []  # cluster.mtu alternates every run: not a flapping node
    assert summary.unchecked_nodes == [] and set(summary.node_checked) == {"n1", "n2"}
    assert all(list(run.nodes) == ["n1", "n2"] for run in runs)


# --------------------------------------------------------------------------------------------
# --bad-nodes


def test_bad_nodes_sink_writes_one_hostlist_line_atomically(tmp_path: Path) -> None:
    target = tmp_path / "bad.txt"
    target.write_text("an older list\n")
    names = [f"gpu{i:03d}" for i in (1, 2, 3, 7, 10, 11)] + ["login2", "rack1-node01", "rack1-node02"]
    results = [r("gpu.xid", n, Status.FAIL) for n in names] + [r("gpu.xid", "gpu004", Status.PASS),
                                                              r("cluster.mtu", CLUSTER, Status.FAIL)]
    written = BadNodesSink(target).write(Report.build("run", results))
    assert written == [target]
    text = target.read_text()
    assert text == "gpu[001-003,007,010-011],login2,rack1-node[01-02]\n"
    assert sorted(expand(text.strip())) == sorted(names)
    assert [p.name for p in tmp_path.iterdir()] == ["bad.txt"]  # no temporary file left


def test_a_go_report_writes_an_empty_file(tmp_path: Path) -> None:
    target = tmp_path / "bad.txt"
    target.write_text("gpu001\n")
    emit(Report.build("run", [r("gpu.xid", "gpu001", Status.PASS)]),
         choose_sinks(Output(bad_nodes=target, quiet=True, history="off")))
    assert target.exists() and target.read_text() == ""


def test_a_bad_nodes_file_that_cannot_be_written_is_an_output_error(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="cannot write the bad-node list"):
        BadNodesSink(tmp_path).write(Report.build("run", [r("gpu.xid", "n1", Status.FAIL)]))


def _pdsh(bad: set[str], hosts: list[str]) -> str:
    lines = []
    for h in hosts:
        lines.append(f"{h}: [Mon Jun  3 10:12:01 2024] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07")
        if h in bad:
            lines.append(f"{h}: [Mon Jun  3 10:12:09 2024] {XID79}")
    return "\n".join(lines) + "\n"


def test_analyze_writes_the_bad_nodes_of_a_pdsh_paste(tmp_path: Path) -> None:
    hosts = [f"gpu{i:03d}" for i in range(1, 9)] + ["login1", "login2"]
    bad = {"gpu001", "gpu002", "gpu003", "gpu007", "login2"}
    target = tmp_path / "out" / "bad.txt"
    p = cli("analyze", "-", "--json", "--bad-nodes", str(target), stdin=_pdsh(bad, hosts))
    assert p.returncode == 1, p.stderr
    assert set(json.loads(p.stdout)["bad_nodes"]) == bad
    assert target.read_text() == "gpu[001-003,007],login2\n"
    p = cli("analyze", "-", "--json", "--bad-nodes", str(target), stdin=_pdsh(set(), hosts))
    assert p.returncode == 0 and target.read_text() == ""


def test_an_unwritable_bad_nodes_path_is_one_line_exit_2(tmp_path: Path) -> None:
    p = cli("analyze", "-", "--bad-nodes", str(tmp_path), stdin=_pdsh({"gpu001"}, ["gpu001"]))
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert "Traceback" not in p.stderr and lines[-1].startswith("preflight: cannot write the bad-node list")


# --------------------------------------------------------------------------------------------
# --exclude and ^


def test_select_nodes_takes_the_excluded_nodes_out(tmp_path: Path) -> None:
    broken = tmp_path / "broken.txt"
    broken.write_text("gpu07  # RMA\n")
    assert engine.select_nodes("gpu[01-08]", exclude="gpu[02-03,07]") == ["gpu01", "gpu04", "gpu05", "gpu06", "gpu08"]
    assert engine.select_nodes("gpu[01-04]", exclude=f"@{broken}") == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert engine.select_nodes("gpu[05-08]", exclude=f"@{broken}") == ["gpu05", "gpu06", "gpu08"]
    assert engine.select_nodes("gpu[01-04]^gpu02") == ["gpu01", "gpu03", "gpu04"]
    assert engine.select_nodes("gpu[01-04]^gpu02", exclude="gpu04,gpu99") == ["gpu01", "gpu03"]


def test_exclude_from_the_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[001-004]")
    assert engine.select_nodes(None, exclude="gpu003") == ["gpu001", "gpu002", "gpu004"]


@pytest.mark.parametrize("hosts,exclude,needle", [
    ("gpu[1-3]", "gpu[1-", "--exclude 'gpu[1-': unbalanced '['"),
    ("gpu[1-3]", "gpu[3-1]", "--exclude 'gpu[3-1]': descending range"),
    ("gpu[1-3]", "gpu[1-3]", "leaves no node of the 3 selected (gpu[1-3])"),
    ("gpu[1-3]", "gpu1,gpu2,gpu3,gpu9", "leaves no node"),
    (None, "gpu1", "--exclude needs a node list"),
])
def test_bad_exclude_is_a_usage_error(hosts: str | None, exclude: str, needle: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    monkeypatch.delenv("SLURM_NODELIST", raising=False)
    with pytest.raises(engine.UsageError) as exc:
        engine.select_nodes(hosts, exclude=exclude)
    assert needle in str(exc.value)


@pytest.mark.parametrize("args", [
    ["run", "--hosts", "gpu[1-3]", "--exclude", "gpu[1-"],
    ["run", "--hosts", "gpu[1-3]", "--exclude", "gpu[1-3]"],
    ["run", "--hosts", "gpu[1-3]^gpu[1-3]"],
    ["sweep", "--hosts", "n[1-2]", "--exclude", "n[1-2]"],
    ["sweep", "--exclude", "n1"],
])
def test_cli_exclude_errors_are_one_line_exit_2(args: list[str]) -> None:
    p = cli(*args, timeout=60)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert p.stderr.startswith("preflight: ")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the socket is: connections are refused


def test_run_checks_only_the_nodes_left_after_exclude(tmp_path: Path) -> None:
    """Every node here refuses SSH (ERROR, node not checked): the run's nodes are exactly the
    ones --hosts, ^ and --exclude leave, and all of them are the bad-node list."""
    port = _closed_port()
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host gpu* login*\n  HostName 127.0.0.1\n  Port {port}\n  User root\n"
                   f"  UserKnownHostsFile {tmp_path / 'known_hosts'}\n")
    target = tmp_path / "bad.txt"
    p = cli("run", "--hosts", "gpu[001-008],login[1-2]^gpu002", "--exclude", "gpu[005-006],login1",
            "--transport", "ssh", "--ssh-config", str(cfg), "--connect-timeout", "5", "--no-sweep", "--json",
            "--no-report", "--bad-nodes", str(target), timeout=120)
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    left = ["gpu001", "gpu003", "gpu004", "gpu007", "gpu008", "login2"]
    assert p.returncode == 1 and sorted(doc["nodes"]) == left
    assert {x["node"] for x in doc["results"]} <= set(left) | {CLUSTER}
    assert sorted(doc["bad_nodes"]) == left
    assert target.read_text() == "gpu[001,003-004,007-008],login2\n"


# --------------------------------------------------------------------------------------------
# hostlists Slurm accepts


@pytest.mark.parametrize("names,text", [
    ([f"gpu{i:03d}" for i in range(1, 65) if i != 16], "gpu[001-015,017-064]"),  # padding kept
    (["gpu001", "gpu002", "login1"], "gpu[001-002],login1"),  # mixed prefixes
    (["rack1-node01", "rack1-node02", "rack1-node03", "rack1-node04"], "rack1-node[01-04]"),  # several numbers
    (["rack1-node01", "rack2-node01", "rack2-node02"], "rack1-node01,rack2-node[01-02]"),
    (["login", "head", "gpu7"], "gpu7,login,head"),  # names without digits, single nodes unbracketed
    (["gpu001"], "gpu001"),
    (["n1-ib", "n2-ib"], "n1-ib,n2-ib"),  # Slurm 22.05 rejects a suffix after a bracket
    (["n9", "n10", "n099", "n100"], "n[9-10],n[099-100]"),
])
def test_compress_writes_what_slurm_reads(names: list[str], text: str) -> None:
    assert compress(names) == text
    assert sorted(expand(text)) == sorted(names)
    assert not re.search(r"\][^,]", text)  # nothing follows a closing bracket but the next name


def test_triage_writes_the_culprit_node(tmp_path: Path) -> None:
    """A hang whose silent rank is on gpu018: `triage --bad-nodes` names that node only."""
    from preflight.triage.collect import write_bundle
    from tests.triage._bundles import files_capture, make_bundle

    wd = ROOT / "tests" / "fixtures" / "triage" / "wd_versions"
    nodes = {"gpu017": {"triage-run-dir": files_capture({f"rank{r}.log": wd / f"rank{r}.log" for r in (0, 1, 2)})},
             "gpu018": {"triage-run-dir": files_capture({f"rank{r}.log": wd / f"rank{r}.log" for r in (3, 4, 5)})}}
    bundle = write_bundle(make_bundle(nodes), tmp_path / "job.tar.gz")
    target = tmp_path / "bad.txt"
    p = cli("triage", str(bundle), "--json", "--bad-nodes", str(target))
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    assert json.loads(p.stdout)["category"] == "communication hang" and p.returncode == 1
    assert target.read_text() == "gpu018\n"
