"""Benchmark: the console at fleet scale. A fleet of N nodes x 10 node checks where every node
passes except one with an Xid 79 and 1% that could not be reached (every check ERROR "node not
checked", as the transport reports them): what the root-cause fold and the grouped console cost,
and how many lines an operator reads, on a terminal and in a pipe, against the results count
(one table row per result, what an ungrouped console prints before any detail line).

    .venv/bin/python benchmarks/bench_console.py [--nodes 64 256 1000 4000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402

from preflight import rootcause  # noqa: E402
from preflight.model import Result, Status  # noqa: E402
from preflight.report.base import Report  # noqa: E402
from preflight.report.console import render  # noqa: E402

CHECKS = ("fabric.manager", "gpu.driver", "gpu.health", "gpu.inventory", "gpu.nvlink", "gpu.topology", "gpu.xid",
          "ib.hca", "net.mtu", "net.nic")
XID = ("[Mon Nov 23 09:12:44 2026] NVRM: Xid (PCI:0000:5d:00): 79, pid=0, GPU has fallen off the bus.")


def fleet(n: int) -> list[Result]:
    nodes = [f"gpu{i:04d}" for i in range(1, n + 1)]
    unreachable = set(nodes[5::100])
    out: list[Result] = []
    for node in nodes:
        for c in CHECKS:
            if node in unreachable:
                why = f"cannot connect to {node} (10.0.{int(node[3:]) // 250}.{int(node[3:]) % 250}:22): timed out"
                out.append(Result(c, node, Status.ERROR, f"node not checked: {why}", evidence=[why],
                                  remedy=f"make {node} reachable, or drain it"))
            elif node == nodes[len(nodes) // 2] and c == "gpu.xid":
                out.append(Result(c, node, Status.FAIL, "GPU reset or reboot needed: GPU 0000:5d:00: Xid 79",
                                  evidence=[XID], remedy="drain node; reboot clears Xid 79"))
            else:
                out.append(Result(c, node, Status.PASS, f"{c} ok"))
    return out


def measure(n: int, repeat: int) -> dict[str, float]:
    results = fleet(n)
    fold_s, tty_s, pipe_s = [], [], []
    tty_lines = pipe_lines = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        folded = rootcause.fold(results)
        fold_s.append(time.perf_counter() - t0)
        report = Report.build("run", folded)
        for terminal, times in ((True, tty_s), (False, pipe_s)):
            buf = io.StringIO()
            console = Console(file=buf, force_terminal=terminal, width=160, color_system="standard" if terminal else None)
            t0 = time.perf_counter()
            render(report, console)
            times.append(time.perf_counter() - t0)
            count = buf.getvalue().count("\n")
            if terminal:
                tty_lines = count
            else:
                pipe_lines = count
    return {"results": len(results), "fold_ms": statistics.median(fold_s) * 1e3,
            "tty_ms": statistics.median(tty_s) * 1e3, "pipe_ms": statistics.median(pipe_s) * 1e3,
            "tty_lines": tty_lines, "pipe_lines": pipe_lines}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, nargs="+", default=[64, 256, 1000, 4000])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print("| nodes | results (ungrouped rows) | unreachable | fold ms | terminal: lines, ms | pipe: lines, ms |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in args.nodes:
        m = measure(n, args.repeat)
        print(f"| {n} | {m['results']} | {len(range(5, n, 100))} | {m['fold_ms']:.1f} | "
              f"{m['tty_lines']}, {m['tty_ms']:.1f} | {m['pipe_lines']}, {m['pipe_ms']:.1f} |")


if __name__ == "__main__":
    main()
