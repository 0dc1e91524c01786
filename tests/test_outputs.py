"""Outputs operators' tools read: JUnit that agrees with the verdict, a schema_version in every
JSON document, Prometheus textfiles in base units with no `node="cluster"`, and the fleet's
latest state taken from each node's last run."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from datetime import datetime
from pathlib import Path

import pytest

from preflight.history.analysis import latest_results
from preflight.history.query import read_reports
from preflight.history.store import open_store
from preflight.model import Result, Status
from preflight.report import Report, write_all
from preflight.report import junit as junit_report
from preflight.report.base import SCHEMA_VERSION
from preflight.report.prometheus import render
from tests import fakes, scenarios
from tests.conftest import FIXTURES, ROOT, need
from tests.history import T0, res, sweep_rows

# a unit suffix that is not a Prometheus base unit (GB/s, milliseconds, microseconds, GB, ...)
NOT_BASE_UNIT = re.compile(r"_(gbps|gbs|mbps|gb|mb|kb|gib|mib|ms|us|ns|minutes|hours|percent_x100)$")


def _r(check: str, node: str, status: str, summary: str = "") -> Result:
    return Result(check=check, node=node, status=Status(status), summary=summary or f"{check} {status}")


def _mixed(warn_as_fail: bool) -> Report:
    return Report.build("node", [_r("gpu.inventory", "n1", "warn", "persistence mode off on GPU 3"),
                                 _r("gpu.xid", "n1", "pass"), _r("ib.hca", "n2", "skip"),
                                 _r("gpu.health", "n2", "pass")], warn_as_fail, duration_s=2.5)


def _junit(text: str) -> ET.Element:
    return ET.fromstring(text.split("\n", 1)[1])  # after the XML declaration


def _totals(el: ET.Element) -> tuple[int, int, int, int]:
    return tuple(int(el.attrib[k]) for k in ("tests", "failures", "errors", "skipped"))  # type: ignore[return-value]


def test_junit_with_warn_as_fail_reports_the_warn_as_a_failure_with_totals_on_the_root() -> None:
    rep = _mixed(warn_as_fail=True)
    assert rep.verdict.verdict == "NO-GO" and rep.warn_as_fail
    root = _junit(junit_report.render(rep))
    assert root.tag == "testsuites" and _totals(root) == (4, 1, 0, 1)
    started = datetime.fromisoformat(root.attrib["timestamp"])
    assert started.tzinfo is not None and float(root.attrib["time"]) == 2.5
    assert abs((datetime.fromisoformat(rep.started) - started).total_seconds()) < 1
    case = root.find(".//testcase[@name='gpu.inventory']")
    assert case is not None
    failure = case.find("failure")
    assert failure is not None and failure.attrib["type"] == "warn"
    assert "persistence mode off" in failure.attrib["message"]
    suites = {s.attrib["name"]: s for s in root.findall("testsuite")}
    assert _totals(suites["n1"]) == (2, 1, 0, 0) and _totals(suites["n2"]) == (2, 0, 0, 1)
    assert all("timestamp" in s.attrib and "time" in s.attrib for s in suites.values())


def test_junit_of_a_go_report_has_no_failures_and_every_fail_or_error_is_counted() -> None:
    go = _mixed(warn_as_fail=False)
    assert go.verdict.verdict == "GO"
    root = _junit(junit_report.render(go))
    assert _totals(root) == (4, 0, 0, 1)
    case = root.find(".//testcase[@name='gpu.inventory']")
    assert case is not None and case.find("failure") is None
    out = case.find("system-out")
    assert out is not None and (out.text or "").startswith("WARN: ")
    bad = Report.build("run", [_r("gpu.xid", "n1", "fail"), _r("net.mtu", "n2", "error"), _r("ib.hca", "n2", "fail"),
                               _r("gpu.health", "n3", "pass")])
    root = _junit(junit_report.render(bad))
    assert _totals(root) == (4, 2, 1, 0)
    assert len(root.findall(".//failure")) == 2 and len(root.findall(".//error")) == 1
    assert {f.attrib["type"] for f in root.findall(".//failure")} == {"fail"}


def test_report_json_files_carry_the_schema_version_first(tmp_path: Path) -> None:
    rep = _mixed(warn_as_fail=True)
    written = write_all(rep, tmp_path)
    doc = json.loads(written["json"].read_text())
    assert list(doc)[0] == "schema_version" and doc["schema_version"] == SCHEMA_VERSION == 1
    assert doc["warn_as_fail"] is True and doc["verdict"] == "NO-GO"
    assert json.loads(rep.to_json())["schema_version"] == SCHEMA_VERSION
    assert read_reports([tmp_path])[0]["schema_version"] == 1


def test_a_report_from_a_newer_schema_is_refused_by_name(tmp_path: Path) -> None:
    from preflight.engine import UsageError

    doc = json.loads(_mixed(False).to_json())
    (tmp_path / "report.json").write_text(json.dumps({**doc, "schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(UsageError, match=f"schema_version {SCHEMA_VERSION + 1} is newer"):
        read_reports([tmp_path])
    (tmp_path / "report.json").write_text(json.dumps({**doc, "schema_version": "one"}))
    with pytest.raises(UsageError, match="not a positive integer"):
        read_reports([tmp_path])
    old = {k: v for k, v in doc.items() if k != "schema_version"}  # written before schema versions
    (tmp_path / "report.json").write_text(json.dumps(old))
    assert read_reports([tmp_path])[0]["command"] == "node"


def assert_clean_metrics(text: str) -> dict[str, object]:
    """Parse a textfile like Prometheus does; every name is preflight_*, a gauge with HELP, in
    base units, and no sample has the pseudo-node (or a link) as its node label."""
    from prometheus_client.parser import text_string_to_metric_families

    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert fams, "no metrics"
    for name, fam in fams.items():
        assert name.startswith("preflight_") and fam.type == "gauge" and fam.documentation, name
        assert not NOT_BASE_UNIT.search(name), f"{name}: not a base unit"
        for s in fam.samples:
            assert not NOT_BASE_UNIT.search(s.name), s.name
            node = s.labels.get("node")
            assert node != "cluster" and "<->" not in (node or ""), s
    assert 'node="cluster"' not in text
    return fams


def test_prometheus_is_in_base_units_and_never_labels_the_cluster_a_node() -> None:
    ar = res("nccl.allreduce", "cluster", "pass", "peak 360", peak_busbw=360.0, rows=sweep_rows(360.0),
             table="multi_node", hosts=["gpu002", "gpu001"])
    pp = res("nccl.pingpong", "cluster", "pass", "pairs ok",
             pairs=[{"a": "gpu002", "b": "gpu001", "status": "ok", "bw_gbps": 40.5}])
    mtu = res("net.mtu", "cluster", "error", "no reply from gpu002")
    link = res("net.mtu", "gpu001<->gpu002", "fail", "9000-byte pings lost")
    node = res("gpu.xid", "gpu001", "pass")
    fams = assert_clean_metrics(render(Report.build("run", [ar, pp, mtu, link, node], duration_s=42.0)))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in fams.values() for s in f.samples}  # type: ignore[attr-defined]
    assert samples[("preflight_sweep_peak_busbw_bytes_per_second", (("nodes", "gpu001+gpu002"),))] == 360e9
    assert samples[("preflight_pair_bandwidth_bytes_per_second", (("a", "gpu001"), ("b", "gpu002")))] == 40.5e9
    assert samples[("preflight_last_run_duration_seconds", (("command", "run"),))] == 42.0
    ok = {(s.labels["check"], s.labels["nodes"]): s.value
          for s in fams["preflight_cluster_check_ok"].samples}  # type: ignore[attr-defined]
    assert ok == {("nccl.allreduce", "gpu001+gpu002"): 1.0, ("nccl.pingpong", ""): 1.0, ("net.mtu", ""): 0.0,
                  ("net.mtu", "gpu001+gpu002"): 0.0}
    nodes = {s.labels["node"] for s in fams["preflight_check_status"].samples}  # type: ignore[attr-defined]
    assert nodes == {"gpu001"}


def _run_doc(i: int, results: list[Result], command: str = "run") -> dict:
    from tests.history import _iso

    return {"command": command, "started": _iso(T0 + i * 3600.0), "duration_s": 1.0,
            "results": [r.to_dict() for r in results]}


def _two_runs() -> list[dict]:
    """Run 1: nodeA ERROR (unreachable) and a failed sweep; run 2: nodeA and nodeB GO, and a
    fresh sweep that passed; nodeB's gpu.xid was only in run 1."""
    run1 = [res("gpu.health", "nodeA", "error", "output lost: timed out"), res("ib.hca", "nodeA", "pass"),
            res("gpu.xid", "nodeB", "fail", "Xid 79"), res("gpu.health", "nodeB", "pass"),
            res("nccl.allreduce", "cluster", "error", "rank 3 did not answer", hosts=["nodeA", "nodeB"])]
    run2 = [res("gpu.health", "nodeA", "pass"), res("ib.hca", "nodeA", "pass"), res("gpu.health", "nodeB", "pass"),
            res("net.mtu", "nodeA<->nodeB", "pass", "9000-byte pings pass"),
            res("nccl.allreduce", "cluster", "pass", "peak 350", peak_busbw=350.0, rows=sweep_rows(350.0),
                hosts=["nodeA", "nodeB"])]
    return [_run_doc(1, run1), _run_doc(2, run2)]


def test_latest_state_is_each_nodes_last_run_only(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path}/h.db") as store:
        for doc in _two_runs():
            store.record(doc)
        # a later node-only run of nodeA: the sweep of run 2 is still the cluster's latest
        store.record(_run_doc(3, [res("gpu.health", "nodeA", "pass"), res("ib.hca", "nodeA", "warn", "slow port")],
                              command="node"))
        rows = store.rows()
    latest = latest_results(rows)
    state = {(r.node, r.check): r.status.value for r in latest}
    assert state == {("nodeA", "gpu.health"): "pass", ("nodeA", "ib.hca"): "warn", ("nodeB", "gpu.health"): "pass",
                     ("cluster", "nccl.allreduce"): "pass", ("nodeA<->nodeB", "net.mtu"): "pass"}
    # nodeB's old gpu.xid FAIL is not current
    assert Report.build("history", latest).verdict.verdict == "GO"


# ---- end to end, through the command line ------------------------------------------------------


def _env(tmp: Path, warn: bool = False) -> dict[str, str]:
    bin_dir = fakes.install(tmp / "bin", scenarios.TOOLS)
    sc = scenarios.healthy_h100(tmp / "sc")
    if warn:  # GPU 3's persistence mode is off: a WARN of gpu.inventory
        q = sc / "query.csv"
        lines = q.read_text().splitlines(True)
        lines[4] = lines[4].replace(", Enabled,", ", Disabled,", 1)
        q.write_text("".join(lines))
    env = fakes.env_for(bin_dir, sc)
    scenarios.nvml_env(env)
    env["PYTHONPATH"] = str(ROOT)
    env["PREFLIGHT_HISTORY"] = "off"
    env.pop("PREFLIGHT_CONFIG", None)
    return env


def _cli(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = env or {**os.environ, "PREFLIGHT_HISTORY": "off"}
    e.pop("PREFLIGHT_CONFIG", None)
    p = subprocess.run([sys.executable, "-m", "preflight.cli", *args], capture_output=True, text=True, env=e,
                       cwd=ROOT, timeout=240)
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    return p


@pytest.mark.real
def test_node_warn_as_fail_is_a_junit_failure_and_writes_a_clean_textfile(tmp_path: Path) -> None:
    env = _env(tmp_path, warn=True)
    out, prom = tmp_path / "r", tmp_path / "textfile" / "preflight-node.prom"
    p = _cli(["node", "--warn-as-fail", "-o", str(out), "--prometheus", str(prom), "--json"], env)
    assert p.returncode == 1, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert doc["schema_version"] == SCHEMA_VERSION and doc["verdict"] == "NO-GO" and doc["warn_as_fail"] is True
    assert json.loads((out / "report.json").read_text())["schema_version"] == SCHEMA_VERSION
    root = ET.parse(out / "junit.xml").getroot()
    assert int(root.attrib["failures"]) >= 1 and int(root.attrib["errors"]) == 0
    assert int(root.attrib["tests"]) == len(doc["results"]) and datetime.fromisoformat(root.attrib["timestamp"])
    inv = root.find(".//testcase[@name='gpu.inventory']/failure")
    assert inv is not None and inv.attrib["type"] == "warn" and "persistence" in inv.attrib["message"]
    fams = assert_clean_metrics(prom.read_text())
    assert [p.name for p in prom.parent.iterdir()] == [prom.name]  # the temp file was renamed
    go = {s.labels["command"]: s.value for s in fams["preflight_verdict_go"].samples}  # type: ignore[attr-defined]
    assert go == {"node": 0.0}
    p = _cli(["run", "--no-sweep", "--warn-as-fail", "--no-report", "--json"], env)
    doc = json.loads(p.stdout)
    assert p.returncode == 1 and doc["schema_version"] == SCHEMA_VERSION and doc["command"] == "run"
    # the same node without --warn-as-fail: GO, and JUnit says so
    p = _cli(["node", "-o", str(tmp_path / "r2")], env)
    assert p.returncode == 0, p.stdout[-2000:]
    root = ET.parse(tmp_path / "r2" / "junit.xml").getroot()
    assert (root.attrib["failures"], root.attrib["errors"]) == ("0", "0")


@pytest.mark.real
def test_prologue_writes_a_per_node_textfile_flag_over_config(tmp_path: Path) -> None:
    env = _env(tmp_path)
    cfg = tmp_path / "config.toml"
    cfg.write_text('prometheus_textfile = "from-config.prom"\n')
    env["PREFLIGHT_CONFIG"] = str(cfg)
    prom = tmp_path / "tf" / "preflight-prologue.prom"
    p = subprocess.run([sys.executable, "-m", "preflight.cli", "prologue", "--json", "--no-drain", "--history", "off",
                        "--node", "gpu007", "--prometheus", str(prom)], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=120)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert json.loads(p.stdout)["schema_version"] == SCHEMA_VERSION
    fams = assert_clean_metrics(prom.read_text())
    nodes = {s.labels["node"] for s in fams["preflight_check_ok"].samples}  # type: ignore[attr-defined]
    assert nodes == {"gpu007"} and not (tmp_path / "from-config.prom").exists()
    # a textfile that cannot be written does not fail the gate of a node that passed
    (tmp_path / "a-file").write_text("x")
    p = subprocess.run([sys.executable, "-m", "preflight.cli", "prologue", "--no-drain", "--history", "off",
                        "--node", "gpu007", "--prometheus", str(tmp_path / "a-file" / "p.prom")],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert f"warning: cannot write {tmp_path / 'a-file' / 'p.prom'}" in p.stderr and "GO" in p.stdout


@pytest.mark.real
def test_history_json_and_textfile_show_each_nodes_last_run(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    for i, doc in enumerate(_two_runs()):
        (reports / f"r{i}").mkdir(parents=True)
        (reports / f"r{i}" / "report.json").write_text(json.dumps(doc))
    url = f"sqlite:///{tmp_path}/h.db"
    assert _cli(["record", str(reports), "--history", url]).returncode == 0
    prom = tmp_path / "fleet.prom"
    p = _cli(["history", "--history", url, "--since", "all", "--json", "--prometheus", str(prom)])
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert list(doc)[0] == "schema_version" and doc["schema_version"] == SCHEMA_VERSION and doc["runs"] == 2
    fams = assert_clean_metrics(prom.read_text())
    ok = {(s.labels["node"], s.labels["check"]): s.value
          for s in fams["preflight_check_ok"].samples}  # type: ignore[attr-defined]
    assert ok == {("nodeA", "gpu.health"): 1.0, ("nodeA", "ib.hca"): 1.0, ("nodeB", "gpu.health"): 1.0}
    cluster = {(s.labels["check"], s.labels["nodes"]): s.value
               for s in fams["preflight_cluster_check_ok"].samples}  # type: ignore[attr-defined]
    assert cluster == {("nccl.allreduce", "nodeA+nodeB"): 1.0, ("net.mtu", "nodeA+nodeB"): 1.0}
    graded = {(s.labels.get("node"), s.labels.get("nodes"), s.labels["check"]): s.value
              for s in fams["preflight_history_graded_runs"].samples}  # type: ignore[attr-defined]
    assert graded[(None, "nodeA+nodeB", "net.mtu")] == 1 and graded[("nodeA", None, "gpu.health")] >= 1
    failed = fams["preflight_history_failed_runs"].samples  # type: ignore[attr-defined]
    assert any(s.labels.get("node") == "nodeB" and s.labels["check"] == "gpu.xid" and s.value == 1 for s in failed)


@pytest.mark.real
def test_analyze_triage_and_list_json_carry_the_schema_version(tmp_path: Path) -> None:
    p = _cli(["analyze", str(FIXTURES / "nvidia-smi" / "query_8xh100_ok.csv"), "--profile", "h100-sxm-8x", "--json"])
    assert p.returncode in (0, 1) and json.loads(p.stdout)["schema_version"] == SCHEMA_VERSION, p.stderr[-2000:]
    run = tmp_path / "run"
    run.mkdir()
    p = _cli(["triage", "--run-dir", str(run), "--json", "--no-node-checks"])
    doc = json.loads(p.stdout)
    assert p.returncode == 2 and list(doc)[0] == "schema_version" and doc["category"] == "unknown"
    p = _cli(["list", "--json"])
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["schema_version"] == SCHEMA_VERSION and "gpu.xid" in {c["id"] for c in doc["checks"]}


@pytest.mark.real
def test_sweep_json_junit_and_metrics(tmp_path: Path) -> None:
    need(importlib.util.find_spec("torch") is not None, "torch is not installed")
    profile = str(ROOT / "tests" / "sweep" / "gloo-test.toml")
    p = _cli(["sweep", "--nproc", "2", "--max-bytes", "64K", "--iters", "2", "--warmup", "1", "--pingpong", "none",
              "--op-timeout", "20", "--deadline", "120", "--profile", profile, "--out", str(tmp_path), "--json"])
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert doc["schema_version"] == SCHEMA_VERSION and doc["verdict"] == "GO"
    root = ET.parse(tmp_path / "junit.xml").getroot()
    assert (root.attrib["failures"], root.attrib["errors"]) == ("0", "0") and "timestamp" in root.attrib
    text = render(Report.build("sweep", [Result.from_dict(r) for r in doc["results"]]))
    fams = assert_clean_metrics(text)
    busbw = fams["preflight_sweep_busbw_bytes_per_second"].samples  # type: ignore[attr-defined]
    assert busbw and all(s.value > 1e3 for s in busbw if int(s.labels["bytes"]) >= 1024)  # bytes/s, not GB/s
