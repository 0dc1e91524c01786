"""Benchmark: `preflight run` over SSH, default options, with one node's switch port black-holing
jumbo frames.

Builds the namespace test cluster (4 faked healthy 8xH100 nodes, real sshd, MTU 9000 veths),
sets n3's bridge port to MTU 1500 (small packets pass, full-size segments vanish), and runs
`preflight run --hosts n[1-4] --transport ssh --json` N times with no timeout options. For each
run it records the wall time and what became of n3's output: "stalled" (some captures came
back, the rest ERROR "output lost: <cause>"), "not checked" (the session stalled before the
probes ran) or "arrived" (TSO let every capture through); and it asserts, as the e2e test
does, that no check whose output did not arrive is PASS or FAIL. Needs root. Prints a table;
results go to BENCHMARKS.md.

    .venv/bin/python benchmarks/bench_black_hole.py [--runs 10]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import scenarios  # noqa: E402
from tests.netcluster import NetCluster, prerequisites  # noqa: E402
from tests.test_cluster_e2e import black_hole_run, lost_output_kind  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    a = ap.parse_args()
    missing = prerequisites()
    if missing:
        sys.exit(f"cannot build the namespace cluster: {missing}")
    with tempfile.TemporaryDirectory() as tmp:
        c = NetCluster(4, Path(tmp) / "cluster", prefix="bh", subnet="10.96.0")
        c.up(scenarios.TOOLS)
        rows = []
        try:
            for node in c.nodes:
                scenarios.healthy_h100(node.home / "scenario")
            for i in range(a.runs):
                rc, doc, took = black_hole_run(c)
                kind = lost_output_kind(doc)  # asserts: nothing that did not arrive is PASS or FAIL
                lost = sorted(r["check"] for r in doc["results"] if r["node"] == "n3" and r["status"] == "error")
                rows.append((i + 1, rc, doc["verdict"], kind, took, lost))
                print(f"run {i + 1:2d}: exit {rc} {doc['verdict']:5s} {took:5.1f} s  n3: {kind:11s} "
                      f"ERROR: {', '.join(lost) or '-'}", flush=True)
        finally:
            c.down()
    times = [r[4] for r in rows]
    kinds = {k: sum(1 for r in rows if r[3] == k) for k in ("stalled", "not checked", "arrived")}
    print(f"\n{platform.node()} {platform.machine()}, {len(rows)} runs: wall min {min(times):.1f} s, median "
          f"{statistics.median(times):.1f} s, max {max(times):.1f} s; n3 {kinds}; every run NO-GO: "
          f"{all(r[2] == 'NO-GO' for r in rows)}; under 20 s: {sum(1 for t in times if t < 20)}/{len(rows)}")


if __name__ == "__main__":
    main()
