"""Downtime in the history: totals per cause and node, each incident once however often its run
was triaged or recorded, an open incident replaced by its closed record, the config's price,
`preflight history` piped and --json, `preflight record --run-dir`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from preflight.history import downtime as hd
from preflight.history.store import open_store
from preflight.model import Result, Status
from preflight.runtime import downtime as dt
from tests.conftest import ROOT
from tests.runtime.test_downtime import T0, Run, _hang_then_restart


def _incident(key: str, cause: str, nodes: list[str], lost: float, world: int = 8, **more: Any) -> Result:
    n = {"incident": key, "cause": cause, "nodes": nodes, "ranks": [0], "lost_s": lost, "world_size": world,
         "gpu_hours": round(world * lost / 3600, 6), "cost": None, "currency": None, "until": "training again",
         "last_good": T0, "last_good_iso": dt.iso(T0), "from_step": 10, "resumed_step": 5, **more}
    return Result(check=dt.CHECK, node=",".join(nodes) or "job", status=Status.WARN, summary=dt.describe(n),
                  facts=n)


def _store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    with open_store(url) as s:
        verdict = Result(check="triage.verdict", node="n3", status=Status.FAIL, summary="[communication hang] ...")
        # run A triaged twice: its hang counted once
        s.record([verdict, _incident("/runs/a@1.000", "hang", ["n3"], 3600.0)], "triage", when=T0)
        s.record([verdict, _incident("/runs/a@1.000", "hang", ["n3"], 3600.0)], "triage", when=T0 + 60)
        # run B: first triaged while it had not trained again (open), later after its restart
        s.record([_incident("/runs/b@2.000", "crash", ["n1", "n3"], 900.0, open=True, until="triage time")],
                 "triage", when=T0 + 100)
        s.record([_incident("/runs/b@2.000", "crash", ["n1", "n3"], 450.0)], "runtime", when=T0 + 200)
        # run C: preempted, priced when it was measured
        s.record([_incident("/runs/c@3.000", "preempted", [], 1800.0, cost=10.0, currency="$")], "triage",
                 when=T0 + 300)
    return url


def test_totals_per_cause_and_node_count_each_incident_once(tmp_path: Path) -> None:
    url = _store(tmp_path)
    with open_store(url) as s:
        doc = hd.summarize(s.rows())
    assert doc["incidents"] == 3 and doc["records"] == 5
    tot = doc["total"]
    assert tot["lost_s"] == 3600 + 450 + 1800 and tot["gpu_hours"] == 8.0 + 1.0 + 4.0
    assert {k: v["incidents"] for k, v in tot["by_cause"].items()} == {"hang": 1, "crash": 1, "preempted": 1}
    assert tot["by_cause"]["crash"]["lost_s"] == 450.0  # the closed record, not the open one
    assert tot["by_node"] == {"n3": {"incidents": 2, "lost_s": 4050.0, "gpu_hours": 9.0, "cost": None},
                              "n1": {"incidents": 1, "lost_s": 450.0, "gpu_hours": 1.0, "cost": None}}
    assert tot["cost"] == 10.0  # only C was priced
    priced = hd.summarize(s_rows(url), cost_per_gpu_hour=2.0)
    assert priced["total"]["cost"] == 10.0 + 2.0 * (8.0 + 1.0)  # C keeps its own price
    assert priced["total"]["by_node"]["n3"]["cost"] == 18.0


def s_rows(url: str) -> list[Any]:
    with open_store(url) as s:
        return s.rows()


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("PREFLIGHT_CONFIG", "PREFLIGHT_HISTORY",
                                                             dt.PRICE_ENV, "FORCE_COLOR")}
    return subprocess.run([sys.executable, "-m", "preflight.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**base, "PYTHONPATH": str(ROOT), **(env or {})})


def test_history_shows_downtime_piped_and_in_json_priced_from_the_config(tmp_path: Path) -> None:
    url = _store(tmp_path)
    cfg = tmp_path / "config.toml"
    cfg.write_text('gpu_hour_cost = 2.0\ncurrency = "EUR"\n')
    p = _cli("history", "--history", url, "--since", "all", env={"PREFLIGHT_CONFIG": str(cfg)})
    assert p.returncode == 0, p.stderr
    out = p.stdout.splitlines()
    assert ("downtime: 3 incident(s), lost 97.5 min, 13 GPU-h, 28.00 EUR (2 repeated record(s) of the same "
            "incidents counted once)") in out, p.stdout
    assert "downtime-cause hang: 1 incident(s), lost 60.0 min, 8 GPU-h, 16.00 EUR" in out
    assert "downtime-node n3: 2 incident(s), lost 67.5 min, 9 GPU-h, 18.00 EUR" in out
    assert "runtime.downtime" not in p.stdout  # not counted as a node's failing check
    j = _cli("history", "--history", url, "--since", "all", "--json")
    doc = json.loads(j.stdout)["downtime"]
    assert doc["incidents"] == 3 and doc["total"]["gpu_hours"] == 13.0 and doc["total"]["cost"] == 10.0
    assert [r["incident"] for r in doc["recent"]] == ["/runs/c@3.000", "/runs/b@2.000", "/runs/a@1.000"]


def test_a_bad_price_in_the_config_is_exit_2_naming_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text('gpu_hour_cost = "cheap"\n')
    p = _cli("history", "--history", f"sqlite:///{tmp_path / 'h.db'}", env={"PREFLIGHT_CONFIG": str(cfg)})
    assert p.returncode == 2 and "gpu_hour_cost must be a number" in p.stderr and "Traceback" not in p.stderr


def test_record_run_dir_imports_a_runs_downtime_once(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    _hang_then_restart(run)
    run.clean(130, 4, 200)
    url = f"sqlite:///{tmp_path / 'h.db'}"
    for _ in range(2):
        p = _cli("record", "--run-dir", str(run.root), "--history", url, env={dt.PRICE_ENV: "3"})
        assert p.returncode == 0, p.stderr
        assert "lost 26.6 s (0.0295 GPU-h, $0.09) to a hang of rank 2 on n3" in p.stdout  # redone steps in
    doc = hd.summarize(s_rows(url))
    assert doc["incidents"] == 1 and doc["records"] == 2 and doc["total"]["by_node"]["n3"]["lost_s"] == 26.55
    empty = tmp_path / "empty"
    empty.mkdir()
    p = _cli("record", "--run-dir", str(empty), "--history", url)
    assert p.returncode == 2 and "no events, heartbeats, hang or crash records" in p.stderr


def test_the_incident_lines_carry_the_configured_price() -> None:
    rows = [hd.Row(run_id=1, ts=T0, command="triage", check=dt.CHECK, node="n3", status=Status.WARN,
                   summary="as recorded", facts=_incident("/r@1.000", "hang", ["n3"], 3600.0).facts)]
    doc = hd.summarize(rows, cost_per_gpu_hour=2.0, currency="EUR")
    assert doc["recent"][0]["summary"].startswith("lost 60.0 min (8 GPU-h, 16.00 EUR) to a hang of rank 0 on n3")


def test_on_a_terminal_downtime_is_a_table_per_cause_and_node(tmp_path: Path) -> None:
    import io

    from rich.console import Console

    url = _store(tmp_path)
    buf = io.StringIO()
    hd.render(hd.summarize(s_rows(url)), Console(file=buf, force_terminal=True, width=120, color_system=None))
    text = buf.getvalue()
    assert "downtime per cause" in text and "downtime per node" in text and "preempted" in text and "n1" in text
    empty = io.StringIO()
    hd.render(hd.summarize([]), Console(file=empty, force_terminal=True, width=120))
    assert empty.getvalue() == "downtime: no interruption recorded in this window\n"
