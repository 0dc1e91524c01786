"""Benchmark: the results store. What one prologue pays to record its run (open + migrate
check + insert, SQLite in WAL mode), and how long `preflight history` takes to read and
summarise a fleet's month (default 16 nodes x 4 runs a day x 30 days, 10 checks each).

    .venv/bin/python benchmarks/bench_history.py [--nodes 16] [--runs 120] [--records 50]

`--fleet`: a fleet-size store (default 1,000 nodes x 100 prologue runs of 11 checks, about 1.1
million results) written through the store's bulk path (`Store.record_many`), in SQLite or in a
throwaway PostgreSQL server (`--backend postgres`), then every `preflight history` view timed
through the functions the CLI calls (median of `--repeat`), once through the CLI itself, and the
prologue's gate query (`Store.node_runs`, median of 11): a markdown table.

    .venv/bin/python benchmarks/bench_history.py --fleet [--backend sqlite|postgres] [--nodes 1000] [--runs 100]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from preflight.history.analysis import summarize  # noqa: E402
from preflight.history.store import open_store  # noqa: E402
from preflight.model import Result, Status  # noqa: E402

CHECKS = ("gpu.inventory", "gpu.driver", "gpu.health", "gpu.xid", "fabric.manager", "gpu.nvlink", "gpu.topology",
          "net.nic", "net.mtu", "ib.hca")


def node_run(node: str, i: int) -> list[Result]:
    out = []
    for c in CHECKS:
        bad = node == "n003" and c == "ib.hca" and i % 3 == 0
        facts = {"ports": [{"ca": f"mlx5_{k}", "port": 1, "state": "Down" if bad and k == 2 else "Active"}
                           for k in range(8)]} if c == "ib.hca" else {"events": []} if c == "gpu.xid" else {}
        out.append(Result(c, node, Status.FAIL if bad else Status.PASS, f"{c} ok", facts=facts))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=None, help="nodes (default 16; --fleet: 1000)")
    ap.add_argument("--runs", type=int, default=None, help="runs per node (default 120; --fleet: 100)")
    ap.add_argument("--records", type=int, default=50, help="timed prologue-style records")
    ap.add_argument("--fleet", action="store_true", help="a fleet-size store and every history view timed")
    ap.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite", help="--fleet: the store")
    ap.add_argument("--repeat", type=int, default=3, help="--fleet: timings per view (median)")
    ap.add_argument("--store", default=None, help="--fleet: time the views on this existing store (no build)")
    a = ap.parse_args()
    if a.fleet:
        fleet(a.nodes or 1000, a.runs or 100, a.backend, a.repeat, a.store)
        return
    a.nodes, a.runs = a.nodes or 16, a.runs or 120
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'h.db'}"
        nodes = [f"n{i:03d}" for i in range(a.nodes)]
        t0 = time.perf_counter()
        with open_store(url) as s:
            start = time.time() - a.runs * 6 * 3600
            for i in range(a.runs):
                for n in nodes:
                    s.record(node_run(n, i), "prologue", when=start + i * 6 * 3600)
        fill = time.perf_counter() - t0
        lat = []
        for i in range(a.records):
            t = time.perf_counter()
            with open_store(url, timeout=5) as s:
                s.record(node_run("n000", i), "prologue")
            lat.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        with open_store(url) as s:
            rows = s.rows()
        read = time.perf_counter() - t
        t = time.perf_counter()
        summary = summarize(rows)
        summ = time.perf_counter() - t
        size = (Path(tmp) / "h.db").stat().st_size
    runs = a.runs * a.nodes
    print(f"{'measure':44s} {'value':>12s}")
    print(f"{'fill: runs recorded (one connection)':44s} {runs:12d}")
    print(f"{'fill: runs per second':44s} {runs / fill:12.0f}")
    print(f"{'record one prologue run, open+write (median)':44s} {statistics.median(lat):10.2f} ms")
    print(f"{'record one prologue run (p95)':44s} {sorted(lat)[int(0.95 * len(lat)) - 1]:10.2f} ms")
    print(f"{'read all rows':44s} {read * 1000:10.0f} ms  ({len(rows)} rows)")
    print(f"{'summarise (flapping, lemons, trends)':44s} {summ * 1000:10.0f} ms")
    print(f"{'database size':44s} {size / 1e6:10.1f} MB")
    print(f"{'flapping nodes found':44s} {','.join(summary.flapping_nodes):>12s}")


# ---- --fleet: a fleet-size store -------------------------------------------------------------

FLEET_CHECKS = ("gpu.inventory", "gpu.driver", "gpu.health", "gpu.xid", "fabric.manager", "gpu.nvlink",
                "gpu.topology", "net.nic", "net.mtu", "ib.hca", "nccl.allreduce")
RUN_GAP_S = 1.5 * 3600  # one prologue per node every 90 min: 100 runs fit the default 7-day window


def _ports(down: bool) -> list[dict[str, object]]:
    return [{"ca": f"mlx5_{k}", "port": 1, "state": "Down" if down and k == 3 else "Active", "rate": 400}
            for k in range(8)]


def fleet_run(k: int, node: str, i: int, runs: int) -> list[Result]:
    """Node k's run i: mostly passing; every 97th node a lemon (net.mtu fails every 3rd run),
    every 89th flaps (ib.hca port down in alternate runs), every 101st not checked every 7th run
    (all ERROR: unreachable), every 83rd logs a fresh Xid 79 every 25th run, and every 53rd's
    busbw sinks in the last run (a trend)."""
    if k % 101 == 5 and i % 7 == 3:
        return [Result(c, node, Status.ERROR, f"node not checked: ssh: connect to host {node} port 22: "
                       "Connection refused") for c in FLEET_CHECKS]
    out = []
    for c in FLEET_CHECKS:
        status, summary = Status.PASS, f"{c} ok"
        facts: dict[str, Any] = {}
        if c == "net.mtu" and k % 97 == 1 and i % 3 == 0:
            status, summary = Status.FAIL, "mlx5_2 MTU 1500, expected 4096"
        elif c == "ib.hca":
            down = k % 89 == 2 and i % 2 == 1
            status, summary = (Status.FAIL, "mlx5_3 port 1 Down") if down else (Status.PASS, "8/8 ports Active")
            facts = {"ports": _ports(down)}
        elif c == "gpu.xid":
            if k % 83 == 3 and i % 25 == 24:
                status, summary = Status.FAIL, "GPU reset or reboot needed: Xid 79"
                facts = {"events": [{"xid": 79, "pci": "0000:5d:00", "time": f"2026-12-0{1 + i // 25}T03:00:00",
                                     "count": 1, "action": "RESTART_BM", "severity": "fail"}]}
            else:
                facts = {"events": []}
        elif c == "gpu.inventory":
            facts = {"count": 8, "models": ["NVIDIA H100 80GB HBM3"]}
        elif c == "nccl.allreduce":
            peak = 360.0 + (k % 7) - (40.0 if k % 53 == 4 and i == runs - 1 else 0.0) + (i % 5) * 0.3
            facts = {"peak_busbw": peak, "avg_busbw": round(peak * 0.6, 3), "hosts": [node], "table": "single_node",
                     "gpu_models": ["NVIDIA H100 80GB HBM3"]}
            summary = f"peak busbw {peak:.1f} GB/s"
        out.append(Result(c, node, status, summary, facts=facts))
    return out


def _build(url: str, nodes: int, runs: int, start: float) -> float:
    names = [f"gpu{k:04d}" for k in range(nodes)]
    t0 = time.perf_counter()
    with open_store(url) as s:
        for i in range(runs):
            batch = [(fleet_run(k, n, i, runs), "prologue", start + i * RUN_GAP_S + k * 0.5)
                     for k, n in enumerate(names)]
            s.record_many(batch, host="bench")
    return time.perf_counter() - t0


def _median_ms(fn: object, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()  # type: ignore[operator]
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), out


def _size(url: str, backend: str) -> int:
    if backend == "sqlite":
        path = Path(url[len("sqlite:///") - 1:])
        return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    with open_store(url) as s:
        return int(s._query("SELECT pg_database_size(current_database())")[0][0])


def _size_note(view: object) -> str:
    s = view.summary  # type: ignore[attr-defined]
    return f"{sum(st.runs for st in s.stats)} results in {s.runs} runs"


def _views(url: str, repeat: int, tmp: Path) -> list[tuple[str, float, str]]:
    import io
    from contextlib import redirect_stdout

    from preflight.history import query
    from preflight.history.analysis import Thresholds
    from preflight.report.history_console import render

    th = Thresholds()
    week = datetime.now(timezone.utc) - timedelta(days=7)
    out: list[tuple[str, float, str]] = []

    def timed(name: str, fn: object, note: object = "") -> object:
        ms, got = _median_ms(fn, repeat)
        out.append((name, ms, note(got) if callable(note) else str(note)))
        return got

    view = timed("summary (store read + flapping, lemons, trends, not checked, downtime)",
                 lambda: query.summarize(url, query.Filters(since=week), th),
                 _size_note)
    s = view.summary  # type: ignore[attr-defined]
    out.append(("  lemons found", 0.0, f"{len(s.lemon_nodes)} nodes ({len(s.lemons)} findings)"))
    out.append(("  flapping found", 0.0, f"{len(s.flapping_nodes)} nodes"))
    out.append(("  trends", 0.0, f"{len(s.trends)} series, {sum(t.low for t in s.trends)} low"))
    out.append(("  not checked found", 0.0, f"{len(s.unchecked_nodes)} nodes"))

    def console() -> None:
        with redirect_stdout(io.StringIO()):
            render(query.summarize(url, query.Filters(since=week), th).summary, url)

    timed("console (`preflight history`)", console)
    timed("--json document", lambda: json.dumps(query.summary_document(query.summarize(url, query.Filters(
        since=week), th))))
    timed("--html", lambda: query.export(query.summarize(url, query.Filters(since=week), th, latest=True),
                                         tmp / "h.html", None))
    timed("--prometheus", lambda: query.export(query.summarize(url, query.Filters(since=week), th, latest=True),
                                                 None, tmp / "h.prom"))
    timed("--node gpu0002 (one node)", lambda: query.summarize(url, query.Filters(since=week, nodes=["gpu0002"]), th),
          _size_note)
    timed("--check net.mtu (one check)", lambda: query.summarize(url, query.Filters(since=week, checks=["net.mtu"]),
                                                                  th), _size_note)
    timed("baseline learn's store read", lambda: query._store_rows(url, week), lambda r: f"{len(r[0])} rows")
    env = {k: v for k, v in os.environ.items() if k not in ("PREFLIGHT_CONFIG",)}
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "preflight.cli", "history", "--history", url, "--json"],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=3600)
    cli_ms = (time.perf_counter() - t) * 1000
    out.append(("CLI `preflight history --json` (one process, once)", cli_ms,
                f"rc {p.returncode}, {len(p.stdout) // 1000} kB" + (f": {p.stderr.strip()[:80]}" if p.returncode else "")))
    with open_store(url) as st:
        gate: list[float] = []
        for j in range(11):
            t = time.perf_counter()
            st.node_runs(f"gpu{(j * 37) % 1000:04d}", ("prologue", "node"), limit=4)
            gate.append((time.perf_counter() - t) * 1000)
    out.append(("gate query (`Store.node_runs`, open store, median of 11)", statistics.median(gate), ""))
    with_open: list[float] = []
    for j in range(11):
        t = time.perf_counter()
        with open_store(url, timeout=5) as st:
            st.node_runs(f"gpu{(j * 37) % 1000:04d}", ("prologue", "node"), limit=4)
        with_open.append((time.perf_counter() - t) * 1000)
    out.append(("gate query with open + migrate check (median of 11)", statistics.median(with_open), ""))
    return out


def fleet(nodes: int, runs: int, backend: str, repeat: int, store: str | None = None) -> None:
    from contextlib import ExitStack

    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        build = float("nan")
        if store:
            url = store
            backend = "postgres" if store.startswith("postgres") else "sqlite"
        elif backend == "postgres":
            from tests.history import postgres_server

            url = stack.enter_context(postgres_server())
        else:
            url = f"sqlite:///{tmp / 'fleet.db'}"
        if not store:
            build = _build(url, nodes, runs, time.time() - runs * RUN_GAP_S)
        if backend == "postgres":
            with open_store(url) as s:
                s.conn.execute("ANALYZE")
                s.conn.commit()
        size = _size(url, backend)
        with open_store(url) as s:
            counts = s.counts()
        rows = _views(url, repeat, tmp)
    load = os.getloadavg()
    print(f"fleet store: {backend}, {nodes} nodes x {runs} runs: {counts['runs']} runs, {counts['results']} results")
    print(f"build (Store.record_many, one batch per run round): {build:.1f} s, {counts['results'] / build:.0f} "
          f"results/s; size {size / 1e6:.0f} MB; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print()
    print(f"| view ({backend}) | median ms | |")
    print("|---|---:|---|")
    for name, ms, note in rows:
        print(f"| {name} | {ms:.0f} | {note} |" if ms else f"| {name} | | {note} |")


if __name__ == "__main__":
    main()
