"""benchmarks/bench_fleet.py: its chart, its fleet folders, its report checks, and a smoke run
of its analyze part through the real CLI (1 and 2 nodes)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SVG = "{http://www.w3.org/2000/svg}"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_fleet", ROOT / "benchmarks" / "bench_fleet.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


bf = _bench()


def test_chart_is_svg_with_each_series_on_log_axes() -> None:
    series = [
        {"name": "analyze, before", "points": [{"n": n, "cpu_per_node_ms": 300.0 + 2000 / n, "wall": 2 + 0.3 * n}
                                                for n in (1, 10, 100, 1000)]
         + [{"n": 10_000, "cpu_per_node_ms": 300.2, "wall": 3002.0, "projected": True}]},
        {"name": "analyze, after, --jobs 2", "points": [{"n": n, "cpu_per_node_ms": 30.0 + 600 / n, "wall": 1 + 0.02 * n}
                                                         for n in (1, 10, 100, 1000, 10_000)]},
    ]
    root = ET.fromstring(bf.fleet_svg(series, "fleet & <scale>"))  # raises on malformed XML
    assert root.tag == f"{SVG}svg"
    panels = root.findall(f"{SVG}g")
    assert [p.get("data-quantity") for p in panels] == ["cpu_per_node_ms", "wall"]
    for panel in panels:
        lines = {p.get("data-series") for p in panel.findall(f"{SVG}path[@class='series']")}
        assert lines == {"analyze, before", "analyze, after, --jobs 2"}
        assert [p.get("data-series") for p in panel.findall(f"{SVG}path[@class='projection']")] == ["analyze, before"]
        # x: one tick per decade, 1 to 10,000, evenly spaced (a log axis)
        labels = panel.findall(f"{SVG}text[@class='xlabel']")
        assert [t.text for t in labels] == ["1", "10", "100", "1,000", "10,000"]
        xs = [float(t.get("x", "nan")) for t in labels]
        gaps = [b - a for a, b in zip(xs, xs[1:], strict=False)]
        assert max(gaps) - min(gaps) < 0.5 and min(gaps) > 10
        ys = [float(t.get("y", "nan")) for t in panel.findall(f"{SVG}text[@class='ylabel']")]
        ygaps = [a - b for a, b in zip(ys, ys[1:], strict=False)]
        assert len(ys) >= 2 and max(ygaps) - min(ygaps) < 0.5
        # every point has its circle; a value 10x larger sits one decade higher
        assert len(panel.findall(f"{SVG}circle")) == 10
    legend = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "legend"]
    assert legend == ["analyze, before", "analyze, after, --jobs 2"]
    ax = bf.LogAxes(0, 4, 0, 3, left=0)
    assert math.isclose(ax.px(10) - ax.px(1), ax.px(1000) - ax.px(100))
    assert math.isclose(ax.py(1) - ax.py(10), ax.py(100) - ax.py(1000))


def test_fleet_folders_are_hard_links_with_one_faulty_node_in_fifty(tmp_path: Path) -> None:
    names, faulty = bf.build_fleet(tmp_path, 120)
    fleet = tmp_path / "fleet"
    assert sorted(p.name for p in fleet.iterdir()) == names == [f"gpu{i:04d}" for i in range(1, 121)]
    assert faulty == ["gpu0002", "gpu0052", "gpu0102"]
    healthy_files = sorted(p.name for p in bf.HEALTHY.iterdir())
    faulty_files = sorted(p.name for p in bf.FAULTY.iterdir())
    for name in names:
        files = sorted(p.name for p in (fleet / name).iterdir())
        assert files == (faulty_files if name in faulty else healthy_files), name
    one = fleet / "gpu0001" / "nvidia-smi-q.txt"
    assert one.stat().st_nlink == 1 + 117  # the copy under .captures and 117 healthy nodes
    assert os.path.samefile(one, fleet / "gpu0120" / "nvidia-smi-q.txt")
    assert one.read_bytes() == (bf.HEALTHY / "nvidia-smi-q.txt").read_bytes()
    assert (fleet / "gpu0052" / "dmesg.txt").read_bytes() == (bf.FAULTY / "dmesg.txt").read_bytes()
    assert bf.node_name(7, 10_000) == "gpu00007"


def _report(folder: Path, verdict: str, bad: list[str], nodes: list[str], started: str, extra: str = "") -> Path:
    folder.mkdir(parents=True)
    doc = {"schema_version": 1, "verdict": verdict, "bad_nodes": bad, "started": started, "duration_s": 1.5,
           "nodes": nodes, "results": [{"check": "gpu.xid", "node": n, "status": "pass", "summary": f"ok{extra}"}
                                       for n in nodes]}
    (folder / "report.json").write_text(json.dumps(doc, indent=2) + "\n")
    (folder / "report.md").write_text(f"# preflight analyze: {verdict}\n\n- started: {started}, took 1.50 s\n")
    (folder / "bad-nodes.txt").write_text(",".join(bad) + "\n")
    (folder / "console.txt").write_text(f"{verdict}\nreports: {folder}\n")
    return folder


def test_report_comparison_masks_only_the_run_time_and_says_what_differs(tmp_path: Path) -> None:
    nodes = ["gpu0001", "gpu0002"]
    a = _report(tmp_path / "a", "NO-GO", ["gpu0002"], nodes, "2026-12-05T10:00:00+00:00")
    b = _report(tmp_path / "b", "NO-GO", ["gpu0002"], nodes, "2026-12-05T10:00:07+00:00")
    assert bf.compare_outputs(a, b) == []
    c = _report(tmp_path / "c", "NO-GO", ["gpu0002"], nodes, "2026-12-05T10:00:00+00:00", extra=" (changed)")
    diffs = bf.compare_outputs(a, c)
    assert len(diffs) == 1 and diffs[0].startswith("report.json line ") and "changed" in diffs[0]
    (c / "report.md").unlink()
    assert any(d.startswith("report.md: missing") for d in bf.compare_outputs(a, c))
    assert bf.check_report(a, 1, nodes, ["gpu0002"]) == []
    problems = bf.check_report(a, 0, nodes, ["gpu0001"])
    assert any("exit code 0, expected 1" in p for p in problems)
    assert any("blocking nodes ['gpu0002']" in p for p in problems)
    assert bf.check_report(a, 1, [*nodes, "gpu0003"], ["gpu0002"]) == ["2 nodes in the report, expected 3"]
    assert bf.check_report(tmp_path / "missing", 1, nodes, ["gpu0002"])[0].startswith("no readable report.json")


def test_reused_figures_keep_the_sizes_and_series_not_measured_again() -> None:
    def pt(n: int, cpu: float) -> dict[str, object]:
        return {"n": n, "cpu": cpu, "wall": cpu, "cpu_per_node_ms": cpu / n * 1000}

    old: dict[str, Any] = {"series": {"before": {"points": {"1": pt(1, 2.0), "1000": pt(1000, 300.0)}},
                      "after, --jobs 1": {"points": {"1": pt(1, 1.0), "1000": pt(1000, 50.0)}}},
           "identity": {"after/1000": []}, "problems": ["after, --jobs 1, 1000 nodes: exit code 0, expected 1"],
           "sizes": [1, 1000]}
    new: dict[str, Any] = {"series": {"after, --jobs 1": {"points": {"1000": pt(1000, 40.0), "10000": pt(10000, 400.0)}}},
           "identity": {"after/10000": ["report.md line 9: differs"]}, "problems": ["after, 10000 nodes: differ"],
           "sizes": [1000, 10000]}
    got = bf.merge_analyze(old, new)
    assert sorted(got["series"]) == ["after, --jobs 1", "before"]
    assert got["series"]["before"]["points"] == old["series"]["before"]["points"]
    after = got["series"]["after, --jobs 1"]["points"]
    assert sorted(after, key=int) == ["1", "1000", "10000"] and after["1000"]["cpu"] == 40.0
    assert got["identity"] == {"after/1000": [], "after/10000": ["report.md line 9: differs"]}
    assert got["problems"] == ["after, 10000 nodes: differ"]  # 1,000 nodes measured again
    assert got["sizes"] == [1, 1000, 10000]
    proj = bf.project(got["series"]["before"]["points"], 10000)  # 298 s more for 999 more nodes
    assert proj["projected"] and proj["n"] == 10000
    assert math.isclose(proj["cpu"], 300 + 9000 * 298 / 999) and math.isclose(proj["wall"], proj["cpu"])
    assert math.isclose(proj["cpu_per_node_ms"], proj["cpu"] / 10)
    assert bf.project({"1000": pt(1000, 300.0)}, 10000)["cpu"] == 3000.0  # one size: in proportion


def test_quick_run_end_to_end(tmp_path: Path) -> None:
    out, svg, js = tmp_path / "fleet.md", tmp_path / "fleet.svg", tmp_path / "fleet.json"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_fleet.py"), "--quick", "--out", str(out),
                        "--svg", str(svg), "--json-out", str(js)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    data = json.loads(js.read_text())
    an = data["analyze"]
    assert an["problems"] == []
    assert an["sizes"] == [1, 2]
    for s in an["series"].values():
        assert sorted(s["points"], key=int) == ["1", "2"]
        for pt in s["points"].values():
            assert pt["ok"] and pt["cpu"] > 0 and pt["wall"] > 0 and pt["main_maxrss_mb"] > 10
    if len(an["series"]) == 2:  # a tree whose analyze has --jobs: both reports compared at each size
        assert an["identity"] == {"after/1": [], "after/2": []}
    text = out.read_text()
    assert p.stdout == text
    assert "| 2 |" in text and "as expected" in text and "WRONG" not in text
    assert data["machine"]["loop_10m_s"] > 0 and len(data["machine"]["load_after"]) == 3
    ET.fromstring(svg.read_text())
    again = tmp_path / "again.md"  # --render: the same table from the saved figures, nothing measured
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_fleet.py"), "--render", "--out", str(again),
                        "--svg", str(tmp_path / "again.svg"), "--json-out", str(js)], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert again.read_text() == text and (tmp_path / "again.svg").read_text() == svg.read_text()
