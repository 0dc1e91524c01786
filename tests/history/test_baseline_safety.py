"""`preflight baseline learn` cannot poison a fleet's floors: it learns from passing results
only, needs enough nodes per table, never writes a floor at or below zero, and refuses (unless
forced, which the profile then says) floors far under the parent's and results of another
backend or GPU model. Through the CLI, from report.json files and from a SQLite store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from preflight.profile import load as load_profile
from tests.conftest import ROOT
from tests.history import HOUR, T0, _iso, res, sweep_rows

H100 = "NVIDIA H100 80GB HBM3"


def _inventory(node: str, model: str = H100) -> dict[str, Any]:
    return res("gpu.inventory", node, "pass", f"8 x {model}", count=8, models=[model]).to_dict()


def _allreduce(node: str, status: str, peak: float, **facts: Any) -> dict[str, Any]:
    return res("nccl.allreduce", node, status, f"all-reduce peak busbw {peak:g} GB/s", peak_busbw=peak,
               rows=sweep_rows(peak), table="single_node", hosts=[node], **facts).to_dict()


def _run(i: int, results: list[dict[str, Any]], profile: str = "h100-sxm-8x") -> dict[str, Any]:
    nodes = sorted({str(r["node"]) for r in results})
    return {"command": "run", "started": _iso(T0 + i * HOUR), "nodes": nodes, "profiles": dict.fromkeys(nodes, profile),
            "duration_s": 2.0, "results": results}


def _h100_fleet(peaks: dict[str, tuple[str, float]], inventory: bool = True) -> dict[str, Any]:
    """One run over the nodes: node -> (nccl.allreduce status, peak busbw), GPU model by inventory."""
    results = []
    for node, (status, peak) in sorted(peaks.items()):
        results.append(_allreduce(node, status, peak))
        if inventory:
            results.append(_inventory(node))
    return _run(0, results)


def _write(tmp: Path, *docs: dict[str, Any]) -> Path:
    folder = tmp / "reports"
    for i, d in enumerate(docs):
        (folder / f"r{i}").mkdir(parents=True)
        (folder / f"r{i}" / "report.json").write_text(json.dumps(d))
    return folder


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("PREFLIGHT_CONFIG", None)
    env["PREFLIGHT_HISTORY"] = "off"
    return subprocess.run([sys.executable, "-m", "preflight.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=env)


def _learn(reports: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return _cli("baseline", "learn", str(reports), "--out", str(out), *extra)


def _refused(p: subprocess.CompletedProcess[str], out: Path) -> str:
    assert p.returncode == 2, p.stdout + p.stderr
    assert not out.exists()
    assert "Traceback" not in p.stderr and "refused" in p.stderr
    return " ".join(p.stderr.split())


def test_fewer_nodes_than_min_samples_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    reports = _write(tmp_path, _h100_fleet({"n1": ("pass", 361.0), "n2": ("pass", 358.0), "n3": ("pass", 362.0)}))
    out = tmp_path / "fleet.toml"
    msg = _refused(_learn(reports, out), out)
    assert "single_node: 3 nodes with a passing all-reduce, fewer than --min-samples 8" in msg
    # --force does not lower the sample count a floor needs
    _refused(_learn(reports, out, "--force"), out)
    p = _learn(reports, out, "--min-samples", "3")
    assert p.returncode == 0 and out.exists(), p.stderr
    bad = _learn(reports, out, "--min-samples", "0")
    assert bad.returncode == 2 and "--min-samples must be at least 1" in bad.stderr


def test_a_spread_that_would_give_a_floor_below_zero_is_never_written(tmp_path: Path) -> None:
    # three unlike nodes: median 180, sigma ~208 -> a 3-sigma warn floor of about -440 GB/s
    reports = _write(tmp_path, _h100_fleet({"n1": ("pass", 40.0), "n2": ("pass", 180.0), "n3": ("pass", 370.0)}))
    out = tmp_path / "fleet.toml"
    msg = _refused(_learn(reports, out, "--min-samples", "3", "--extends", "generic"), out)
    assert "single_node: the learned floors would be warn -" in msg and "spread is too wide" in msg
    msg = _refused(_learn(reports, out, "--min-samples", "3", "--force"), out)
    assert "would be warn -" in msg and "--force writes it anyway" not in msg


def test_only_passing_results_are_learned_from(tmp_path: Path) -> None:
    """Eight nodes over three runs: a fabric incident FAILed the first two runs everywhere at
    ~150 GB/s; the third passed at ~360. Plus a node that only ever failed, a WARN and an ERROR."""
    docs = []
    for i in range(3):
        peaks = {f"n{n:02d}": ("fail", 150.0 + n) if i < 2 else ("pass", 360.0 + n % 5) for n in range(8)}
        peaks |= {"bad": ("fail", 90.0), "w0": ("warn", 320.0), "e0": ("error", 0.0)} if i == 2 else {}
        docs.append({**_h100_fleet(peaks), "started": _iso(T0 + i * HOUR)})
    out = tmp_path / "fleet.toml"
    p = _learn(_write(tmp_path, *docs), out)
    assert p.returncode == 0, p.stderr
    assert "left out 1 ERROR, 17 FAIL, 1 WARN" in p.stdout and "learned from 8 nodes" in p.stdout
    prof = load_profile(str(out))
    warn = prof.get("nccl.allreduce.single_node.peak_busbw_warn")
    fail = prof.get("nccl.allreduce.single_node.peak_busbw_fail")
    assert 350.0 < warn <= 360.0 and 0 < fail < warn  # the incident's 150 GB/s did not drag the floor
    assert "FORCED" not in out.read_text()
    # the same runs with every result taken for a pass: each node's median is the incident's
    for d in docs:
        for r in d["results"]:
            r["status"] = "pass"
    msg = _refused(_learn(_write(tmp_path / "all", *docs), tmp_path / "all.toml"), tmp_path / "all.toml")
    assert "single_node: learned warn floor 1" in msg and "under 0.5 x the warn floor of h100-sxm-8x" in msg


def _gloo_sweeps(nodes: int) -> list[dict[str, Any]]:
    """Single-node gloo sweeps on CPUs, one per node, run under the H100 profile."""
    docs = []
    for i in range(nodes):
        node = f"cpu{i:02d}"
        ar = res("nccl.allreduce", "cluster", "pass", "all-reduce peak busbw 0.3 GB/s", peak_busbw=0.3 + i * 0.002,
                 rows=sweep_rows(0.3), table="single_node", hosts=[node], backend="gloo", gpu_models=["cpu"],
                 world=2)
        docs.append({**_run(i, [ar.to_dict()]), "command": "sweep", "nodes": [node],
                     "profiles": {node: "h100-sxm-8x"}})
    return docs


def test_a_cpu_gloo_run_cannot_extend_an_h100_nccl_profile(tmp_path: Path) -> None:
    reports = _write(tmp_path, *_gloo_sweeps(8))
    out = tmp_path / "fleet.toml"
    msg = _refused(_learn(reports, out), out)
    assert "8 result(s) ran gloo, but profile h100-sxm-8x describes GPU nodes graded over NCCL" in msg
    assert f"8 result(s) ran on cpu, but profile h100-sxm-8x is for {H100}" in msg
    assert "single_node: learned warn floor 0.2892 GB/s is under 0.5 x the warn floor of h100-sxm-8x (330 GB/s)" in msg
    assert "single_node: learned fail floor 0.2303 GB/s is under 0.5 x the fail floor of h100-sxm-8x (250 GB/s)" in msg
    assert "--force writes it anyway" in msg
    p = _learn(reports, out, "--force")
    assert p.returncode == 0 and "FORCED despite" in p.stdout, p.stderr
    prof = load_profile(str(out))
    assert prof.get("nccl.allreduce.single_node.peak_busbw_warn") > 0
    assert "FORCED (--force) despite: 8 result(s) ran gloo" in prof.source("nccl.allreduce.single_node.peak_busbw_warn")
    # under a parent that describes no GPUs (generic) the CPU fleet is learned as it is
    p = _learn(reports, tmp_path / "cpu.toml", "--extends", "generic")
    assert p.returncode == 0 and "FORCED" not in (tmp_path / "cpu.toml").read_text(), p.stderr


def test_floors_under_the_parent_fraction_are_refused_unless_forced(tmp_path: Path) -> None:
    # H100 nodes at ~150 GB/s: half the profile's 330 GB/s warn floor is 165
    reports = _write(tmp_path, _h100_fleet({f"n{i:02d}": ("pass", 150.0 + i % 3) for i in range(9)}))
    out = tmp_path / "fleet.toml"
    msg = _refused(_learn(reports, out), out)
    assert "single_node: learned warn floor 146.6 GB/s is under 0.5 x the warn floor of h100-sxm-8x (330 GB/s)" in msg
    assert "ran gloo" not in msg and "ran on" not in msg
    p = _learn(reports, out, "--parent-fraction", "0.4")  # 0.4 x 330 = 132, 0.4 x 250 = 100: not under
    assert p.returncode == 0, p.stderr
    out.unlink()
    p = _learn(reports, out, "--force", "--json")
    assert p.returncode == 0, p.stderr
    (table,) = json.loads(p.stdout)
    assert table["samples"] == 9 and table["forced"] and "0.5 x the warn floor" in table["forced"][0]
    prof = load_profile(str(out))
    assert prof.get("nccl.allreduce.single_node.peak_busbw_warn") == table["warn"] > 0
    assert "FORCED (--force)" in prof.source("nccl.allreduce.single_node.peak_busbw_fail")
    assert "# single_node written with --force despite" in out.read_text()


def test_results_with_no_gpu_model_cannot_extend_a_model_profile(tmp_path: Path) -> None:
    reports = _write(tmp_path, _h100_fleet({f"n{i:02d}": ("pass", 360.0 + i % 4) for i in range(8)},
                                           inventory=False))
    out = tmp_path / "fleet.toml"
    msg = _refused(_learn(reports, out), out)
    assert f"8 result(s) name no GPU model (no gpu_models fact, no gpu.inventory result of the same run), and " \
           f"profile h100-sxm-8x is for {H100}" in msg


def test_a_healthy_fleet_from_the_store(tmp_path: Path) -> None:
    """Ten runs of ten H100 nodes recorded into SQLite, with two multi-node groups (too few to
    learn a multi_node table): single_node is learned, the GPU model read from the runs'
    gpu.inventory results, multi_node stays the parent's."""
    docs = []
    for i in range(10):
        results = []
        for n in range(10):
            node = f"gpu{n:02d}"
            results += [_allreduce(node, "pass", 362.0 + n % 4 - (i % 2)), _inventory(node)]
        for group in (("gpu00", "gpu01"), ("gpu02", "gpu03")):
            results.append(res("nccl.allreduce", "cluster", "pass", "multi", peak_busbw=345.0, rows=sweep_rows(345.0),
                               table="multi_node", hosts=list(group), backend="nccl", gpu_models=[H100]).to_dict())
        docs.append(_run(i, results))
    reports = _write(tmp_path, *docs)
    url = f"sqlite:///{tmp_path}/h.db"
    p = _cli("record", str(reports), "--history", url)
    assert p.returncode == 0 and "recorded 10 run(s)" in p.stdout, p.stderr
    out = tmp_path / "fleet.toml"
    p = _cli("baseline", "learn", "--history", url, "--since", "all", "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert "multi_node: 2 node groups with a passing all-reduce, fewer than --min-samples 8; not learned" in p.stdout
    assert "learned from 10 nodes" in p.stdout and "extends h100-sxm-8x" in p.stdout
    prof = load_profile(str(out))
    assert 330.0 < prof.get("nccl.allreduce.single_node.peak_busbw_warn") < 362.0
    parent = load_profile("h100-sxm-8x").get("nccl.allreduce.multi_node.peak_busbw_warn")
    assert prof.get("nccl.allreduce.multi_node.peak_busbw_warn") == parent  # the parent's
    assert "FORCED" not in out.read_text()
