"""Benchmark: the results store. What one prologue pays to record its run (open + migrate
check + insert, SQLite in WAL mode), and how long `preflight history` takes to read and
summarise a fleet's month (default 16 nodes x 4 runs a day x 30 days, 10 checks each).

    .venv/bin/python benchmarks/bench_history.py [--nodes 16] [--runs 120] [--records 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

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
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--runs", type=int, default=120, help="runs per node")
    ap.add_argument("--records", type=int, default=50, help="timed prologue-style records")
    a = ap.parse_args()
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


if __name__ == "__main__":
    main()
