"""Nodes in natural order everywhere a report names them (node3 before node12): the JSON
report's `bad_nodes` and `nodes` as the console's hostlists; and the console's finding lines
grouped by node (a node's findings together, the nodes in natural order), status first."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from preflight.model import Result, Status
from preflight.report.base import Report
from preflight.report.console import lines

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "examples" / "captures"


def fail(node: str, check: str, summary: str, status: Status = Status.FAIL) -> Result:
    return Result(check=check, node=node, status=status, summary=summary, evidence=[f"{summary} line"],
                  remedy="drain")


def heads(out: list[str]) -> list[tuple[str, str, str]]:
    """(status, hosts, check) of each finding line."""
    return [(w[0], w[1], w[2].rstrip(":")) for w in (ln.split() for ln in out) if w[0] in ("FAIL", "ERROR", "WARN")]


def test_json_bad_nodes_and_nodes_are_in_natural_order() -> None:
    # before: "bad_nodes": ["node12", "node3"] (text order) while the console says node[3,12]
    report = Report.build("run", [fail("node12", "gpu.xid", "Xid 79"), fail("node3", "gpu.xid", "Xid 79"),
                                  fail("node100", "ib.hca", "port down")])
    doc = json.loads(report.to_json())
    assert doc["bad_nodes"] == ["node3", "node12", "node100"]
    assert doc["nodes"] == ["node3", "node12", "node100"]


def test_analyze_json_of_captured_folders_lists_bad_nodes_in_natural_order(tmp_path: Path) -> None:
    for name in ("node12", "node3"):
        shutil.copytree(CAPTURES / "faulty-node", tmp_path / name)
    shutil.copytree(CAPTURES / "healthy-node", tmp_path / "node4")
    p = subprocess.run([sys.executable, "-m", "preflight.cli", "analyze", str(tmp_path), "--json", "-j", "1"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)
    assert doc["bad_nodes"] == ["node3", "node12"]
    assert doc["nodes"] == ["node3", "node4", "node12"]


def test_fail_lines_are_grouped_by_node_in_natural_order() -> None:
    # before: grouped by check (gpu.xid node3, gpu.xid node12, ib.hca node3, ib.hca node12)
    report = Report.build("run", [
        fail("node12", "gpu.xid", "Xid 79 on GPU 1"), fail("node3", "ib.hca", "mlx5_2 down"),
        fail("node12", "ib.hca", "mlx5_6 down"), fail("node3", "gpu.xid", "Xid 48 on GPU 2"),
        fail("node3", "node.clock", "clock off", Status.WARN), fail("node12", "gpu.health", "ECC", Status.ERROR)])
    assert heads(lines(report)) == [
        ("FAIL", "node3", "gpu.xid"), ("FAIL", "node3", "ib.hca"),
        ("FAIL", "node12", "gpu.xid"), ("FAIL", "node12", "ib.hca"),
        ("ERROR", "node12", "gpu.health"), ("WARN", "node3", "node.clock")]


def test_a_group_of_nodes_stands_at_its_first_node_and_per_node_lines_follow_the_nodes() -> None:
    report = Report.build("run", [
        fail("node12", "ib.hca", "port down"), fail("node3", "ib.hca", "port down"),
        fail("node3", "gpu.xid", "Xid 79"), fail("node20", "gpu.health", "ECC"), fail("node12", "gpu.xid", "Xid 48")])
    assert heads(lines(report)) == [
        ("FAIL", "node3", "gpu.xid"), ("FAIL", "node[3,12]", "ib.hca"),
        ("FAIL", "node12", "gpu.xid"), ("FAIL", "node20", "gpu.health")]
    assert heads(lines(report, per_node=True)) == [
        ("FAIL", "node3", "gpu.xid"), ("FAIL", "node3", "ib.hca"),
        ("FAIL", "node12", "gpu.xid"), ("FAIL", "node12", "ib.hca"), ("FAIL", "node20", "gpu.health")]
