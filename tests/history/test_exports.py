"""Exports: the Prometheus textfile (parsed by prometheus_client), the HTML report (and in
headless Chromium), `preflight history --json/--html/--prometheus`, `baseline learn`."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from preflight.history.analysis import summarize
from preflight.history.baseline import learn, profile_toml, robust_fit
from preflight.history.store import open_store
from preflight.model import Result, Status
from preflight.profile import load as load_profile
from preflight.report import Report
from preflight.report import html as html_report
from preflight.report.prometheus import render, render_results, write_textfile
from tests.conftest import ROOT, need
from tests.history import res, sweep_rows, ten_runs


def _sweep_report() -> Report:
    ar = res("nccl.allreduce", "cluster", "warn", "peak busbw 300 GB/s is below the expected 330",
             avg_busbw=180.0, peak_busbw=300.0, rows=sweep_rows(300.0), table="single_node", hosts=["gpu001"])
    ar.evidence = ['1073741824  268435456  float  sum  -1  9000.0  119.3  300.00  0 <"quoted">']
    ar.remedy = "compare nodes one by one"
    xid = res("gpu.xid", "gpu002", "fail", "GPU reset or reboot needed: Xid 79")
    xid.remedy = "drain node; reboot clears Xid 79"
    return Report.build("sweep", [ar, xid, res("ib.hca", "gpu001", "pass", "8/8 ports Active")],
                        profiles={"gpu001": "h100-sxm-8x"})


def test_prometheus_text_parses_and_says_status_busbw_and_time(tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    text = render(_sweep_report())
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    status = {(s.labels["check"], s.labels["node"], s.labels["status"]): s.value
              for s in fams["preflight_check_status"].samples}
    assert status[("gpu.xid", "gpu002", "fail")] == 1.0 and status[("gpu.xid", "gpu002", "pass")] == 0.0
    ok = {(s.labels["check"], s.labels["node"]): s.value for s in fams["preflight_check_ok"].samples}
    assert ok == {("gpu.xid", "gpu002"): 0.0, ("ib.hca", "gpu001"): 1.0}
    cluster_ok = {(s.labels["check"], s.labels["nodes"]): s.value for s in fams["preflight_cluster_check_ok"].samples}
    assert cluster_ok == {("nccl.allreduce", "gpu001"): 1.0}
    busbw = {int(s.labels["bytes"]): s.value for s in fams["preflight_sweep_busbw_bytes_per_second"].samples}
    assert len(busbw) == 6 and busbw[1 << 30] == pytest.approx(300e9)
    assert fams["preflight_sweep_busbw_bytes_per_second"].samples[0].labels["nodes"] == "gpu001"
    assert fams["preflight_last_run_timestamp_seconds"].samples[0].value > 1.7e9
    assert fams["preflight_verdict_go"].samples[0].value == 0.0
    assert all(f.type == "gauge" for f in fams.values())
    odd = render_results([Result("x", 'n"1\\\n', Status.PASS, "")])
    assert list(text_string_to_metric_families(odd))[0].samples[0].labels["node"] == 'n"1\\\n'
    target = tmp_path / "tf" / "preflight.prom"
    write_textfile(text, target)
    write_textfile(text, target)  # replaced atomically, no temp file left behind
    assert target.read_text() == text and [p.name for p in target.parent.iterdir()] == ["preflight.prom"]


def test_html_is_self_contained_with_verdict_failures_first_and_plots(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path}/h.db") as s:
        for d in ten_runs():
            s.record(d)
        summary = summarize(s.rows())
    page = html_report.render(_sweep_report(), history=summary)
    assert 'id="verdict"' in page and "preflight sweep: NO-GO" in page
    assert page.index("gpu.xid on gpu002") < page.index("nccl.allreduce on cluster")
    assert '<svg id="sweep-plot"' in page and 'class="band-warn"' in page and "expected &gt;= 330 GB/s" in page
    assert '<svg id="history-plot-allreduce"' in page and 'id="flapping"' in page and 'id="lemons"' in page
    assert "&lt;&quot;quoted&quot;&gt;" in page or "&lt;\"quoted\"&gt;" in page
    for external in ("<script src", "<link ", "http://", "https://"):
        assert external not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    go = html_report.render(Report.build("node", [res("gpu.xid", "n1", "pass")]))
    assert 'class="verdict go"' in go and "<svg" not in go


def _png_stats(data: bytes) -> tuple[int, int, int]:
    """(width, height, distinct colours in a sample of rows) of an 8-bit RGB/RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, head = 8, b"", b""
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            head = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, ctype = struct.unpack(">IIBB", head[:10])
    assert depth == 8 and ctype in (2, 6)
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev = bytearray(stride)
    colours: set[bytes] = set()
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        if y % 10 == 0:
            colours.update(bytes(line[i:i + 3]) for i in range(0, stride, bpp * 2))
        prev = line
    return w, h, len(colours)


@pytest.mark.real
def test_html_report_in_headless_chromium(tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    need(os.path.exists(chromium), "Debian's chromium package (apt-get install -y chromium)")
    page = tmp_path / "report.html"
    page.write_text(html_report.render(_sweep_report()))
    args = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,900"]
    dom = subprocess.run([*args, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=90)
    assert "preflight sweep: NO-GO" in dom.stdout, dom.stderr[-1500:]
    assert '<svg id="sweep-plot"' in dom.stdout and "<polyline" in dom.stdout
    shot = tmp_path / "shot.png"
    p = subprocess.run([*args, f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True, timeout=90)
    assert shot.is_file(), p.stderr[-1500:]
    w, h, colours = _png_stats(shot.read_bytes())
    assert (w, h) == (1200, 900)
    assert colours > 8  # verdict banner, text, plot bands and lines: not a blank page


def test_baseline_drops_outliers_iteratively_and_writes_a_loadable_profile(tmp_path: Path) -> None:
    values = {f"n{i:02d}": 360.0 + (i % 5) for i in range(14)} | {"n90": 250.0, "n91": 330.0}
    fit = robust_fit(values)
    assert set(fit.dropped) == {"n90", "n91"} and fit.iterations >= 2 and len(fit.kept) == 14
    assert robust_fit(values, "std").dropped.keys() >= {"n90"}
    with pytest.raises(ValueError):
        robust_fit({})
    docs = ten_runs()
    with open_store(f"sqlite:///{tmp_path}/h.db") as s:
        for d in docs:
            s.record(d)
        rows = s.rows(checks=["nccl.allreduce"])
    learned = learn(rows, today="2026-09-21")
    assert [lr.table for lr in learned] == ["single_node"] and learned[0].fail < learned[0].warn
    text = profile_toml(learned, "fleet", "h100-sxm-8x")
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    prof = load_profile(str(path))
    assert prof.get("nccl.allreduce.single_node.peak_busbw_warn") == learned[0].warn
    assert prof.source("nccl.allreduce.single_node.peak_busbw_warn").startswith("learned from 4 nodes on 2026-09-21")
    assert prof.get("gpu.count") == 8  # the rest comes from the parent profile


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = dict(env or os.environ)
    e.pop("PREFLIGHT_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "preflight.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=e)


@pytest.mark.real
def test_history_record_and_baseline_commands(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    for i, d in enumerate(ten_runs()):
        (reports / f"r{i}").mkdir(parents=True)
        (reports / f"r{i}" / "report.json").write_text(json.dumps(d))
    url = f"sqlite:///{tmp_path}/h.db"
    p = _cli("record", str(reports), "--history", url)
    assert p.returncode == 0 and "recorded 10 run(s)" in p.stdout, p.stderr
    p = _cli("history", "--history", url, "--since", "all", "--json", "--html", str(tmp_path / "h.html"),
             "--prometheus", str(tmp_path / "preflight.prom"))
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["flapping_nodes"] == ["n2"] and "n3" in doc["lemon_nodes"] and doc["runs"] == 10
    assert "history-plot-allreduce" in (tmp_path / "h.html").read_text()
    assert "preflight_check_status" in (tmp_path / "preflight.prom").read_text()
    table = _cli("history", "--history", url, "--since", "all")
    assert table.returncode == 0 and "\nflapping n2 " in table.stdout and "\nlemon n3 " in table.stdout  # piped: lines
    assert "16% under n4's median" in table.stdout
    out = tmp_path / "fleet.toml"
    p = _cli("baseline", "learn", "--history", url, "--since", "all", "--out", str(out), "--min-samples", "4")
    assert p.returncode == 0 and "single_node: warn <" in p.stdout and "extends h100-sxm-8x" in p.stdout, p.stderr
    assert load_profile(str(out)).get("nccl.allreduce.single_node.peak_busbw_fail") > 0
    p = _cli("baseline", "learn", str(reports), "--out", str(tmp_path / "b.toml"), "--json", "--min-samples", "4")
    assert p.returncode == 0 and json.loads(p.stdout)[0]["table"] == "single_node", p.stderr
    bad = _cli("history", "--history", url, "--since", "yesterday")
    assert bad.returncode == 2 and "--since" in bad.stderr
