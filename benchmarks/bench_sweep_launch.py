"""Benchmark: how long a sweep takes to end when one node's agent cannot start, and a healthy
sweep for reference, over SSH (the paramiko transport's sessions) on the namespace test
cluster (3 nodes, real sshd).

Cases: n3's known_hosts entry holds another key (the transport refuses it); n3's python has
no torch; the login node and n2 at MTU 9000 with n2's switch port at 1500 (the handshake
connects, then the agent's jumbo-sized first line vanishes), with the default
--connect-timeout 10 and with 5. Each sweep is
`preflight sweep --hosts n1,n2,n3` with small sizes and the default 60 s op timeout, which is
what the ranks would otherwise wait out. Needs root and torch. Prints a table; results go to
BENCHMARKS.md.

    .venv/bin/python benchmarks/bench_sweep_launch.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.netcluster import NetCluster, prerequisites, sh  # noqa: E402

PREFLIGHT = [sys.executable, "-c", "from preflight.cli import main; main()"]
SMALL = ["--max-bytes", "64K", "--iters", "3", "--warmup", "1", "--pp-bytes", "64K", "--pp-iters", "3",
         "--profile", str(ROOT / "tests" / "sweep" / "gloo-test.toml"), "--deadline", "120", "--json",
         "--no-report", "--ifname", "eth0"]


def sweep(c: NetCluster, cfg: Path, *extra: str) -> tuple[float, str]:
    t = time.monotonic()
    p = c.client(*PREFLIGHT, "sweep", "--hosts", "n1,n2,n3", "--ssh-config", str(cfg), *SMALL, *extra,
                 check=False, timeout=200)
    took = time.monotonic() - t
    doc = json.loads(p.stdout) if p.stdout.strip().startswith("{") else {}
    errs = [f"{r['node']}: {r['facts'].get('cause')}" for r in doc.get("results", []) if r["status"] == "error"]
    return took, "; ".join(errs) or doc.get("verdict", f"exit {p.returncode}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    if prerequisites():
        sys.exit(f"cannot build the namespace cluster: {prerequisites()}")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        c = NetCluster(3, d / "cluster", prefix="swb", subnet="10.94.0")
        c.up([])
        rows: list[tuple[str, list[float], str]] = []
        try:
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "other"))
            wrong = " ".join((d / "other.pub").read_text().split()[:2])
            known = d / "known_hosts"
            known.write_text("".join(f"{ln.split()[0]} {wrong}\n" if ln.startswith("n3,") else ln + "\n"
                                     for ln in c.known_hosts.read_text().splitlines()))
            bad_cfg = d / "ssh_config"
            bad_cfg.write_text(c.ssh_config.read_text().replace(str(c.known_hosts), str(known)))
            wrapper = d / "python"
            wrapper.write_text(f'#!/bin/sh\nif [ "$(hostname)" = n3 ]; then exec /usr/bin/python3 "$@"; fi\n'
                               f'exec {sys.executable} "$@"\n')
            wrapper.chmod(0o755)
            py = ["--python", sys.executable]
            cases: list[tuple[str, Path, list[str], str | None]] = [
                ("healthy", c.ssh_config, py, None),
                ("n3 host key refused", bad_cfg, py, None),
                ("n3 python without torch", c.ssh_config, ["--python", str(wrapper)], None),
                ("n2 black hole, --connect-timeout 10", c.ssh_config, py, "n2"),
                ("n2 black hole, --connect-timeout 5", c.ssh_config, [*py, "--connect-timeout", "5"], "n2"),
            ]
            for name, cfg, extra, hole in cases:
                if hole:
                    c.set_port_mtu(hole, 1500)
                try:
                    got = [sweep(c, cfg, *extra) for _ in range(a.runs)]
                finally:
                    if hole:
                        c.set_port_mtu(hole, c.mtu)
                rows.append((name, [t for t, _ in got], sorted({r for _, r in got})[0]))
        finally:
            c.down()
    print(f"{os.uname().nodename}, {a.runs} runs per case, load {os.getloadavg()[0]:.1f}")
    print("| case | min | median | max | result |\n|---|---|---|---|---|")
    for name, ts, res in rows:
        print(f"| {name} | {min(ts):.1f} s | {statistics.median(ts):.1f} s | {max(ts):.1f} s | {res} |")


if __name__ == "__main__":
    main()
