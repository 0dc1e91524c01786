"""Benchmark: `preflight analyze` on a 1,000,000-line kernel log whose only Xid is the last line.

The log mixes the noise a busy HGX node's `dmesg -T` holds (mlx5 port module events, PCIe AER
corrections, perf throttling, audit lines, kernel stack dumps, peermem complaints) with NVRM
driver lines that are not events (1% of the lines, 10,000 of them) and the link events of a
flapping port (Link down / Link up / link becomes ready, every `--link-every` lines);
the last line is an Xid 79. Times the real CLI end to end (process start, reading, framing,
classifying, parsing, grading, JSON report; bytecode cached, as an installed package runs) and
the in-process analyze call, for raw dmesg,
`dmesg -T` and journal (`short-iso`) framing, and checks that every run FAILs naming Xid 79 and
finds every Xid (a second Xid sits in the middle). Prints a short table; results go to
BENCHMARKS.md.

    .venv/bin/python benchmarks/bench_kernel_log.py [--lines 1000000] [--repeat 3] [--link-every 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NOISE = [
    "mlx5_core 0000:17:00.0: Port module event: module 0, Cable plugged",
    "pcieport 0000:00:01.0: AER: Corrected error received: 0000:17:00.0",
    "perf: interrupt took too long (2503 > 2500), lowering kernel.perf_event_max_sample_rate to 79750",
    "audit: type=1400 audit(1717409521.123:4242): apparmor=\"ALLOWED\" operation=\"open\" profile=\"snap\"",
    "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping further processing",
    "Call Trace:",
    " <TASK>",
    " ? __schedule+0x2d5/0x890",
    "EXT4-fs (nvme0n1p2): re-mounted. Opts: errors=remount-ro. Quota mode: none.",
    "nvidia-nvlink: Nvlink Core is being initialized, major device number 234",
]
# every this many lines, a line of the NVIDIA driver that is not an event (1% of the log)
DRIVER_EVERY = 100
DRIVER = "NVRM: GPU at PCI:0000:3b:00: GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
MIDDLE = "NVRM: Xid (PCI:0000:1b:00): 13, pid=4242, name=python3, Graphics SM Warp Exception on (GPC 1, TPC 2)"
LAST = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus."
# a port that flaps: its driver logs Link down / Link up, and IPoIB its link becoming ready
LINK = ("mlx5_core 0000:17:00.0 ens6f0np0: Link down", "mlx5_core 0000:17:00.0 ens6f0np0: Link up",
        "IPv6: ADDRCONF(NETDEV_CHANGE): ib0: link becomes ready")


def stamp(style: str, i: int) -> str:
    s = i // 1000
    if style == "dmesg-raw":
        return f"[{s:>6}.{i % 1000:06d}] "
    if style == "dmesg-T":
        return f"[Mon Jun  3 {10 + s // 3600 % 10:02d}:{s // 60 % 60:02d}:{s % 60:02d} 2024] "
    return f"2024-06-03T{10 + s // 3600 % 10:02d}:{s // 60 % 60:02d}:{s % 60:02d}+0000 gpu042 kernel: "


def write_log(path: Path, lines: int, style: str, link_every: int) -> None:
    with path.open("w") as fh:
        for i in range(lines - 1):
            if i == lines // 2:
                msg = MIDDLE
            elif i % DRIVER_EVERY == 0:
                msg = DRIVER
            elif i % link_every == 7:
                msg = LINK[i // link_every % len(LINK)]
            else:
                msg = NOISE[i % len(NOISE)]
            fh.write(stamp(style, i) + msg + "\n")
        fh.write(stamp(style, lines) + LAST + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--link-every", type=int, default=1000,
                    help="a link event every this many lines (1000: a badly flapping port; 10: the worst case)")
    args = ap.parse_args()
    from preflight import registry
    from preflight.analyze import analyze

    # the CLI runs as an installed package does: with its bytecode cached (a first run writes it)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "preflight.cli", "--version"], env=env, capture_output=True, timeout=120)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for style in ("dmesg-raw", "dmesg-T", "journal-short-iso"):
            path = Path(tmp) / f"{style}.log"
            write_log(path, args.lines, style, args.link_every)
            size = path.stat().st_size
            cli_times, proc_times = [], []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                p = subprocess.run([sys.executable, "-m", "preflight.cli", "analyze", str(path), "--json"],
                                   capture_output=True, text=True, timeout=120, env=env)
                cli_times.append(time.perf_counter() - t0)
                [r] = [x for x in json.loads(p.stdout)["results"] if x["check"] == "gpu.xid"]
                assert r["status"] == "fail" and "Xid 79" in r["summary"], r["summary"]
                assert sorted(e["xid"] for e in r["facts"]["events"]) == [13, 79], r["facts"]["events"]
                t0 = time.perf_counter()
                res = analyze(registry.load(), [path])
                proc_times.append(time.perf_counter() - t0)
                assert [x.status.value for x in res if x.check == "gpu.xid"] == ["fail"]
            rows.append((style, size, statistics.median(cli_times), max(cli_times), statistics.median(proc_times)))
    print(f"# {time.strftime('%Y-%m-%d')} {platform.machine()} {os.cpu_count()} CPU, Python {platform.python_version()}, "
          f"load {os.getloadavg()[0]:.2f}; {args.lines:,} lines, a link event every {args.link_every} lines, "
          f"median of {args.repeat}")
    print("| framing | size | `preflight analyze` (CLI), median | max | analyze() in process, median | verdict |")
    print("|---|---|---|---|---|---|")
    for style, size, cli_med, cli_max, proc_med in rows:
        print(f"| {style} | {size / 1e6:.0f} MB | {cli_med:.2f} s | {cli_max:.2f} s | {proc_med:.2f} s | "
              "FAIL, Xid 79 named, Xid 13 found |")


if __name__ == "__main__":
    main()
