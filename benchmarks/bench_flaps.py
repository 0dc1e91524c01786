"""Benchmark: `preflight analyze` on a 1,000,000-line kernel log whose mlx5 link events name ~250 devices.

The link-flap grader (`checks/flaps.py`, called by net.nic and ib.hca) and its parser
(`preflight/parsers/netlog.py`) must stay linear in the number of events: a node with 8 HCAs
and 32 VFs per port logs link events for hundreds of netdevs, and a grader that filters every
event once per interface turns a 1 s analyze into several seconds (5.7 s on this log before the
events were indexed by interface).

The generated `dmesg` holds the noise of a busy HGX node (PCIe AER corrections, perf throttling,
audit lines, kernel stack frames, peermem complaints), mlx5 `Port module event` lines (cable
plugged / unplugged, now and then an error), and `mlx5_core <pci> <netdev>: Link down` / `Link up`
pairs of `--devices` RoCE netdevs (one event every `--link-every` lines), plus IPoIB netdevs of IB
ports (down, then their link becomes ready). Every device flaps; a few lose their link for good at the end. Times the
real CLI end to end (bytecode cached, as an installed package runs) and the in-process
analyze() call, for raw dmesg and journal (`short-iso`) framing, and checks that net.nic FAILs
naming the flapping links. Prints a short table; results go to BENCHMARKS.md.

    .venv/bin/python benchmarks/bench_flaps.py [--lines 1000000] [--devices 250] [--repeat 3] [--link-every 10]
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
MODULE = ("Cable plugged", "Cable unplugged")
MODULE_ERROR = "Cable error, High Temperature"
MODULE_EVERY = 50  # a port module event every this many lines
IPOIB = 8  # IPoIB ports among the devices (their IPv6 link becomes ready; graded by ib.hca)
DOWN_AT_END = 3  # devices whose last event is a Link down (a link lost for good)


def device(i: int) -> tuple[str, str]:
    """(PCI address, netdev) of device i: 8 HCAs' physical functions and their virtual functions."""
    bus, fn = 0x17 + i // 32, i % 32
    pci = f"0000:{bus:02x}:{fn // 8:02x}.{fn % 8}"
    return pci, f"ens{bus}f{fn}np0" if fn < 2 else f"ens{bus}f0v{fn - 2}"


def stamp(style: str, i: int) -> str:
    s = i // 1000
    if style == "dmesg-raw":
        return f"[{s:>6}.{i % 1000:06d}] "
    return f"2024-06-03T{10 + s // 3600 % 10:02d}:{s // 60 % 60:02d}:{s % 60:02d}+0000 gpu042 kernel: "


def link_line(n: int, devices: int) -> str:
    """The n-th link event: devices take turns, each alternating down and up."""
    d, turn = n % devices, n // devices
    pci, dev = device(d)
    if d < IPOIB:  # an IB port's IPoIB netdev
        dev = f"ibp{0x17 + d}s0"
        if turn % 2:
            return f"IPv6: ADDRCONF(NETDEV_CHANGE): {dev}: link becomes ready"
    return f"mlx5_core {pci} {dev}: Link {'up' if turn % 2 else 'down'}"


def write_log(path: Path, lines: int, devices: int, link_every: int, style: str) -> int:
    """Write the log; the number of link events in it."""
    events = 0
    with path.open("w") as fh:
        for i in range(lines - DOWN_AT_END):
            if i % link_every == 3:
                msg = link_line(events, devices)
                events += 1
            elif i % MODULE_EVERY == 11:
                pci, _ = device(i // MODULE_EVERY % devices)
                status = MODULE[i // MODULE_EVERY % 2]
                msg = f"mlx5_core {pci}: mlx5_port_module_event:1158:(pid 0): Port module event: module 0, {status}"
                if i // MODULE_EVERY % 997 == 0:
                    msg = (f"mlx5_core {pci}: mlx5_port_module_event:1158:(pid 0): Port module event[error]: "
                           f"module 0, {MODULE_ERROR}")
            else:
                msg = NOISE[i % len(NOISE)]
            fh.write(stamp(style, i) + msg + "\n")
        for k in range(DOWN_AT_END):
            pci, dev = device(IPOIB + k)
            fh.write(stamp(style, lines + k) + f"mlx5_core {pci} {dev}: Link down\n")
    return events + DOWN_AT_END


def check(results: list[dict], devices: int) -> str:
    [nic] = [r for r in results if r["check"] == "net.nic"]
    assert nic["status"] == "fail", nic["summary"]
    flaps = nic["facts"]["flaps"]
    assert len(flaps) == devices - IPOIB, len(flaps)
    assert sum(1 for x in flaps if x["down_now"]) == DOWN_AT_END
    [ib] = [r for r in results if r["check"] == "ib.hca"]
    assert len(ib["facts"]["flaps"]) == IPOIB, ib["facts"]["flaps"]
    return f"net.nic {nic['status'].upper()} ({len(flaps)} links), ib.hca {ib['status'].upper()} ({IPOIB} ports)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--devices", type=int, default=250)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--link-every", type=int, default=10, help="a link event every this many lines")
    args = ap.parse_args()
    from preflight import registry
    from preflight.analyze import analyze

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "preflight.cli", "--version"], env=env, capture_output=True, timeout=120)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for style in ("dmesg-raw", "journal-short-iso"):
            path = Path(tmp) / f"{style}.log"
            events = write_log(path, args.lines, args.devices, args.link_every, style)
            cli_times, proc_times, verdict = [], [], ""
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                p = subprocess.run([sys.executable, "-m", "preflight.cli", "analyze", str(path), "--json"],
                                   capture_output=True, text=True, timeout=300, env=env)
                cli_times.append(time.perf_counter() - t0)
                verdict = check(json.loads(p.stdout)["results"], args.devices)
                t0 = time.perf_counter()
                res = analyze(registry.load(), [path])
                proc_times.append(time.perf_counter() - t0)
                check([r.to_dict() for r in res], args.devices)
            rows.append((style, path.stat().st_size, events, statistics.median(cli_times), max(cli_times),
                         statistics.median(proc_times), verdict))
    print(f"# {time.strftime('%Y-%m-%d')} {platform.machine()} {os.cpu_count()} CPU, Python "
          f"{platform.python_version()}, load {os.getloadavg()[0]:.2f}; {args.lines:,} lines, {args.devices} devices, "
          f"a link event every {args.link_every} lines, median of {args.repeat}")
    print("| framing | size | link events | `preflight analyze` (CLI), median | max | analyze() in process, median "
          "| verdict |")
    print("|---|---|---|---|---|---|---|")
    for style, size, events, cli_med, cli_max, proc_med, verdict in rows:
        print(f"| {style} | {size / 1e6:.0f} MB | {events:,} | {cli_med:.2f} s | {cli_max:.2f} s | {proc_med:.2f} s "
              f"| {verdict} |")


if __name__ == "__main__":
    main()
