"""`preflight history` piped: plain greppable lines, never cut at 80 columns; the most common
cause of a node not checked is grouped by its template (numbers, PCI ids, addresses masked)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from preflight.history.analysis import cause_template, summarize
from preflight.history.store import open_store
from preflight.model import Result, Status
from preflight.report.history_console import lines, render
from tests.history import HOUR, T0, _iso, res

NODE = "gpu-rack17-node007"  # long names: a table at 80 columns would wrap them


def _docs(n: int = 12) -> list[dict[str, Any]]:
    docs = []
    for i in range(n):
        fm = res("fabric.manager", NODE, "fail", "nvidia-fabricmanager is failed (result exit-code, exit status 1) "
                 "while the GPUs still show a stale Completed fabric state") if i % 3 == 0 else \
            res("fabric.manager", NODE, "pass", "fabric manager running")
        results = [fm, res("gpu.xid", NODE, "pass", "no Xid"), res("gpu.xid", "gpu-rack17-node008", "pass", "no Xid")]
        if i % 2:  # node009 lost in half the runs, the GPU named differently each time
            pci = ["0000:5d:00.0", "0000:9b:00.0", "0000:1b:00.0"][i % 3]
            results += [Result(check=c, node="gpu-rack17-node009", status=Status.ERROR,
                               summary=f"probe nvidia-smi-q timed out after {3 + i % 2}.5 s: GPU {pci} stuck")
                        for c in ("gpu.health", "fabric.manager")]
        else:
            results += [res("gpu.health", "gpu-rack17-node009", "pass", "ok")]
        docs.append({"command": "run", "started": _iso(T0 + i * HOUR), "results": [r.to_dict() for r in results]})
    return docs


def _store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/h.db"
    with open_store(url) as s:
        for d in _docs():
            s.record(d)
    return url


def test_piped_history_is_plain_lines_that_grep_finds(tmp_path: Path) -> None:
    url = _store(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PREFLIGHT_CONFIG", "FORCE_COLOR")} | {"COLUMNS": "80"}
    cmd = f"{sys.executable} -m preflight.cli history --history {url} --since all | grep fabric.manager"
    p = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    rows = p.stdout.splitlines()
    assert rows and rows[0].startswith(f"failed {NODE} fabric.manager: 4 failed, 0 warn of 12 checked runs"), rows
    assert "runs FPPFPPFPPFPP" in rows[0] and len(rows[0]) > 80  # one line, never cut
    full = subprocess.run([sys.executable, "-m", "preflight.cli", "history", "--history", url, "--since", "all"],
                          capture_output=True, text=True, timeout=120, env=env).stdout
    assert not any(c in full for c in "┃│┏━") and "\x1b[" not in full
    assert any(ln.startswith("not-checked gpu-rack17-node009: 6 of 12 runs") for ln in full.splitlines()), full


def test_the_most_common_cause_is_grouped_by_its_template(tmp_path: Path) -> None:
    with open_store(_store(tmp_path)) as s:
        summary = summarize(s.rows())
    (u,) = summary.unchecked
    # three GPUs, two timeouts: one cause, counted in every run it was the cause of
    assert u.node == "gpu-rack17-node009" and (u.count, u.cause_count) == (6, 6), u
    assert u.cause.startswith("probe nvidia-smi-q timed out after ") and "GPU 0000:" in u.cause
    assert "(6 of 6 runs)" not in u.summary
    out = lines(summary, "sqlite:///h.db")
    assert any("most common cause: probe nvidia-smi-q timed out" in ln and "(6 runs)" in ln for ln in out), out


def test_cause_templates_mask_what_varies() -> None:
    assert cause_template("Xid 79 on GPU 0000:5d:00.0") == cause_template("Xid 79 on GPU 0000:9b:00.0")
    assert cause_template("gpu007 (10.1.0.7:22) did not answer within 10 s") == \
        cause_template("gpu012 (10.1.0.12:22) did not answer within 10 s") == "gpu# (<address>) did not answer within # s"
    assert cause_template("GPU-2b1e4c7a-90d3-4f6e-b1a2-7c8d9e0f1a2b lost, mask 0xff00") == "<uuid> lost, mask <hex>"
    assert cause_template("fe80::ba3f:d2ff:fe17:440a unreachable") == "<address> unreachable"
    assert cause_template("output lost: connection lost") == "output lost: connection lost"
    assert cause_template("ssh refused") != cause_template("output lost")


def test_a_terminal_still_gets_tables(tmp_path: Path) -> None:
    with open_store(_store(tmp_path)) as s:
        summary = summarize(s.rows())
    buf = io.StringIO()
    render(summary, "sqlite:///h.db", Console(file=buf, force_terminal=True, width=200))
    assert "━" in buf.getvalue() or "┃" in buf.getvalue()
