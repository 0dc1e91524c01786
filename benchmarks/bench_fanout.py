"""Benchmark: SSH fan-out to 16 (or --nodes N) nodes against 1 node, on a real namespace cluster.

Builds a NetCluster of 16 nodes (network namespaces, one real sshd each, fake GPU/IB tools
with a healthy 8xH100 scenario), then runs the SSH transport inside the client namespace.
The bundle is the probes of a typical `preflight node` run whose tools are faked, plus
`hostname`. Cold = a new transport (TCP + SSH handshake + key auth + the round trip);
warm = a second collect on the same transport (connections reused, as phase 2 of a run).
Prints a short table (median of --repeat runs each, ratio N/1). Needs root.

The SSH rows also give the controller's own CPU time per node (process CPU time of the
process running the transport: its worker and paramiko threads; the nodes' sshd and probes
are other processes) and a projection for 1,000 nodes from one login node: the controller
holds the GIL, so its CPU time adds up on one core whatever the concurrency; the wall time
is at least that and at least one 1-node round per wave of `concurrency` (64) nodes.

    .venv/bin/python benchmarks/bench_fanout.py [--repeat 5] [--nodes 16]   # also --nodes 64

`--mode run` times `preflight run` end to end as a user runs it (a subprocess of the CLI with
`--json --no-report --no-sweep`): its wall time and the controller's CPU from os.wait4's
rusage of that process (its threads, and its children such as srun; the nodes' sshd, slurmd
and probes are other processes). Over ssh: `run --hosts n[1-K] --transport ssh`; over srun:
`salloc -N K` around a measurer that starts `run --transport srun` inside the allocation.
`--json` prints the figures; `run_figures()` returns them to other benchmarks.

    .venv/bin/python benchmarks/bench_fanout.py --mode run --transport ssh --repeat 3 [--json]
    .venv/bin/python benchmarks/bench_fanout.py --mode run --transport srun --repeat 3 [--json]

`--mode width` measures the fan-out width one controller sustains: one SSH collect of the
hostname bundle over new connections to every node (--nodes, e.g. 64) at each --widths
(`--concurrency`), its wall and the controller's CPU (process CPU time around the collect).

    .venv/bin/python benchmarks/bench_fanout.py --mode width --nodes 64 --widths 8,16,32,64 --repeat 2

`--mode aliases` measures many host names on one server (aliases of one sshd, as behind a
bastion): one cold collect of the hostname bundle over --nodes aliases of a 1-node cluster at
each --per-server (the transport's handshakes at once per server; 0: leave the transport's
default, for a tree whose transport has no such bound). Its wall, the controller's CPU, the
node errors, and the connections sshd accepted. The test cluster's sshd allows 100 start-ups;
`--max-startups 10:30:100` (sshd's default) measures against a second sshd on the node with
that limit instead (and counts the connections it dropped).

    .venv/bin/python benchmarks/bench_fanout.py --mode aliases --nodes 32 --per-server 1,4,8,64 --repeat 3
    .venv/bin/python benchmarks/bench_fanout.py --mode aliases --nodes 32 --max-startups 10:30:100
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from preflight.probes import Probe  # noqa: E402

CONCURRENCY = 64  # SSHTransport's default: connections made at once


def typical_bundle() -> list[Probe]:
    """The probes of a node run on an 8xH100 profile whose tools the cluster fakes."""
    from preflight import engine, registry
    from preflight.profile import load
    from preflight.registry import Options
    from tests.scenarios import TOOLS

    reg = registry.load()
    plan = engine.plan_node(engine.select(reg, node_only=True), "n", load("h100-sxm-8x"), Options())
    probes = [p for p in plan.probes() if p.commands and p.commands[0][0] in TOOLS]
    return [Probe.of("hostname", ["hostname"]), *probes]


def all_bundles() -> dict[str, list[Probe]]:
    """typical: a node run's probes; hostname: the transport's own cost; wait: a tool that waits."""
    return {"typical": typical_bundle(), "hostname": [Probe.of("hostname", ["hostname"])],
            "wait": [Probe.of("hostname", ["hostname"]), Probe.of("wait", ["sleep", "1"])]}


def inner_srun(spec: dict[str, Any]) -> None:
    """Inside the client namespace: one srun step per collect (srun allocates the nodes)."""
    from preflight.transport.srun import SrunTransport

    bundles = all_bundles()
    out: dict[str, Any] = {"probes": len(bundles["typical"])}
    for label, probes in bundles.items():
        for count in spec["counts"]:
            nodes = spec["nodes"][:count]
            times: list[float] = []
            errors = 0
            for _ in range(spec["repeat"]):
                t = SrunTransport(deadline=120)
                start = time.perf_counter()
                res = t.collect({n: probes for n in nodes})
                times.append(time.perf_counter() - start)
                errors += sum(1 for o in res.values() if o.error or len(o.captures) != len(probes))
            out[f"{label}/{count}"] = {"cold": times, "warm": times, "errors": errors}
    print(json.dumps(out))


def inner(spec: dict[str, Any]) -> None:
    """Runs inside the client namespace: time cold and warm collects."""
    if spec.get("transport") == "srun":
        inner_srun(spec)
        return
    from preflight.transport.ssh import SSHTransport

    bundles = all_bundles()
    out: dict[str, Any] = {"probes": len(bundles["typical"])}
    for label, probes in bundles.items():
        for count in spec["counts"]:
            nodes = spec["nodes"][:count]
            got: dict[str, list[float]] = {"cold": [], "warm": [], "cold_cpu": [], "warm_cpu": []}
            errors = 0
            for _ in range(spec["repeat"]):
                with SSHTransport(ssh_config=Path(spec["config"]), connect_timeout=10, command_timeout=60,
                                  remote_python=spec.get("python", "python3")) as t:
                    for series in ("cold", "warm"):
                        start, cpu = time.perf_counter(), time.process_time()
                        res = t.collect({n: probes for n in nodes})
                        got[f"{series}_cpu"].append(time.process_time() - cpu)
                        got[series].append(time.perf_counter() - start)
                        errors += sum(1 for o in res.values() if o.error or len(o.captures) != len(probes))
            out[f"{label}/{count}"] = {**got, "errors": errors}
    print(json.dumps(out))


RUN_ARGS = ["--json", "--no-report", "--no-sweep", "--profile", "h100-sxm-8x", "--deadline", "300",
            "--command-timeout", "120"]


def measure(argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Start argv, wait for it with os.wait4: wall, its CPU (user + system, its threads and the
    children it waited for), peak memory, exit status and the verdict its JSON gives."""
    import subprocess

    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        text, errtext = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    verdict, nodes, bad = "", 0, 0
    try:
        doc = json.loads(text[text.index("{"):])
        verdict = doc.get("verdict", "")
        nodes = len({r["node"] for r in doc.get("results", [])})
        bad = sum(1 for r in doc.get("results", []) if r.get("status") in ("error", "fail"))
    except (ValueError, KeyError, TypeError):
        pass
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "maxrss_kb": ru.ru_maxrss, "rc": proc.returncode,
            "verdict": verdict, "nodes": nodes, "bad": bad, "stderr": errtext[-800:] if proc.returncode not in (0, 1) else ""}


def inner_width(spec: dict[str, Any]) -> None:
    """Inside the client namespace: one cold collect of the hostname bundle per width."""
    from preflight.transport.ssh import SSHTransport

    out: dict[str, Any] = {}
    for width in spec["widths"]:
        rows = []
        for _ in range(spec["repeat"]):
            with SSHTransport(ssh_config=Path(spec["config"]), concurrency=width, connect_timeout=20,
                              command_timeout=120, remote_python=spec.get("python", "python3")) as t:
                start, cpu = time.perf_counter(), time.process_time()
                res = t.collect({n: [Probe.of("hostname", ["hostname"])] for n in spec["nodes"]})
                rows.append({"wall": time.perf_counter() - start, "cpu": time.process_time() - cpu,
                             "errors": sum(1 for o in res.values() if o.error)})
        out[str(width)] = rows
    print(json.dumps(out))


def width_figures(nodes: int, widths: list[int], repeat: int = 2, remote_python: str = "python3") -> dict[str, Any]:
    """Wall and controller CPU of a cold SSH collect over `nodes` nodes at each width."""
    from tests.netcluster import NetCluster, prerequisites

    missing = prerequisites()
    if missing:
        raise RuntimeError(f"cannot build the test cluster: {', '.join(missing)}")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        cluster = NetCluster(nodes, Path(tmp), prefix="pfw", subnet="10.84.0")
        try:
            cluster.up(["nvidia-smi"])
            spec = {"config": str(cluster.ssh_config), "nodes": [n.name for n in cluster.nodes], "widths": widths,
                    "repeat": repeat, "mode": "width", "python": remote_python}
            p = cluster.client(sys.executable, str(Path(__file__).resolve()), "--inner", json.dumps(spec), timeout=3000)
            data = json.loads(p.stdout.strip().splitlines()[-1])
        finally:
            cluster.down()
    return {"nodes": nodes, "repeat": repeat, "load_before": load_before, "load_after": os.getloadavg()[0],
            "loop_10m_s": loop_time(), "runs": data,
            "median": {w: {"wall": med([r["wall"] for r in rows]), "cpu": med([r["cpu"] for r in rows]),
                           "cpu_per_node_ms": med([r["cpu"] for r in rows]) / nodes * 1000,
                           "errors": sum(r["errors"] for r in rows)} for w, rows in data.items()}}


def inner_aliases(spec: dict[str, Any]) -> None:
    """Inside the client namespace: one cold collect over every alias, at each per-server bound."""
    from preflight.transport.ssh import SSHTransport

    out: dict[str, Any] = {}
    for per in spec["per_server"]:
        rows = []
        opts: dict[str, Any] = {"handshakes_per_server": per} if per else {}
        for _ in range(spec["repeat"]):
            with SSHTransport(ssh_config=Path(spec["config"]), connect_timeout=20, command_timeout=120, **opts) as t:
                start, cpu = time.perf_counter(), time.process_time()
                res = t.collect({n: [Probe.of("hostname", ["hostname"])] for n in spec["nodes"]})
                rows.append({"wall": time.perf_counter() - start, "cpu": time.process_time() - cpu,
                             "errors": sum(1 for o in res.values() if o.error),
                             "said": sorted({o.error for o in res.values() if o.error})[:3]})
        out[str(per)] = rows
    print(json.dumps(out))


def alias_figures(aliases: int, per_server: list[int], repeat: int = 3, max_startups: str = "") -> dict[str, Any]:
    """Wall and controller CPU of a cold collect over `aliases` names of one sshd at each bound
    (the test cluster's sshd, or one with `max_startups`)."""
    from tests.netcluster import NetCluster, prerequisites

    missing = prerequisites()
    if missing:
        raise RuntimeError(f"cannot build the test cluster: {', '.join(missing)}")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        cluster = NetCluster(1, Path(tmp), prefix="pfa", subnet="10.85.0")
        try:
            cluster.up(["nvidia-smi"])
            node = cluster.nodes[0]
            names = [f"alias{i:03d}" for i in range(1, aliases + 1)]
            config = Path(tmp) / "ssh_config_aliases"
            config.write_text("".join(f"Host {a}\n  HostName {node.addr}\n  User root\n  IdentityFile {cluster.key}\n"
                                      f"  UserKnownHostsFile {cluster.known_hosts}\n  StrictHostKeyChecking yes\n\n"
                                      for a in names))
            log = node.home / "sshd.log"
            limited = None
            if max_startups:
                from tests.transport.test_ssh_startups import LimitedSSHD

                limited = LimitedSSHD(cluster, node.name, max_startups)
                config, log = limited.config(names), limited.log
            spec = {"config": str(config), "nodes": names, "per_server": per_server, "repeat": repeat,
                    "mode": "aliases"}
            accepted = log.read_text().count("Accepted publickey")
            try:
                p = cluster.client(sys.executable, str(Path(__file__).resolve()), "--inner", json.dumps(spec),
                                   timeout=3000)
            finally:
                if limited is not None:
                    limited.stop()
            data = json.loads(p.stdout.strip().splitlines()[-1])
            text = log.read_text()
            accepted = text.count("Accepted publickey") - accepted
            dropped = text.count("past MaxStartups")
        finally:
            cluster.down()
    return {"aliases": aliases, "repeat": repeat, "load_before": load_before, "load_after": os.getloadavg()[0],
            "loop_10m_s": loop_time(), "runs": data, "accepted": accepted, "dropped": dropped,
            "max_startups": max_startups or "100:30:200 (the test cluster's)",
            "median": {w: {"wall": med([r["wall"] for r in rows]), "cpu": med([r["cpu"] for r in rows]),
                           "cpu_per_node_ms": med([r["cpu"] for r in rows]) / aliases * 1000,
                           "errors": sum(r["errors"] for r in rows),
                           "said": sorted({e for r in rows for e in r["said"]})[:2]} for w, rows in data.items()}}


def inner_run(spec: dict[str, Any]) -> None:
    """Inside the client namespace: `preflight run` over ssh, or salloc + measurer over srun."""
    py = sys.executable
    out: dict[str, Any] = {}
    for count in spec["counts"]:
        runs = []
        for _ in range(spec["repeat"]):
            if spec["transport"] == "ssh":
                hosts = ",".join(spec["nodes"][:count])
                argv = [py, "-m", "preflight.cli", "run", "--hosts", hosts, "--transport", "ssh",
                        "--ssh-config", spec["config"], "--concurrency", str(spec["concurrency"]), *RUN_ARGS]
                runs.append(measure(argv))
            else:
                argv = [py, "-m", "preflight.cli", "run", "--transport", "srun", *RUN_ARGS]
                p = __import__("subprocess").run(
                    ["salloc", f"-N{count}", "--time=10", py, str(Path(__file__).resolve()), "--measure",
                     json.dumps(argv)], capture_output=True, text=True, timeout=900)
                try:
                    runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
                except (ValueError, IndexError):
                    runs.append({"wall": float("nan"), "cpu": float("nan"), "rc": p.returncode, "verdict": "",
                                 "nodes": 0, "bad": 0, "maxrss_kb": 0, "stderr": p.stderr[-800:]})
        out[str(count)] = runs
    print(json.dumps(out))


def run_figures(nodes: list[int], transport: str = "ssh", repeat: int = 3, concurrency: int = CONCURRENCY) -> dict[str, Any]:
    """`preflight run` end to end on a fresh namespace cluster of max(nodes) nodes: for each
    count, every run's wall, controller CPU, peak memory, verdict; the medians; and the
    marginal controller CPU per added node against the smallest count. Needs root."""
    from tests.netcluster import NetCluster, prerequisites, slurm_prerequisites
    from tests.scenarios import TOOLS, healthy_h100

    missing = prerequisites() + (slurm_prerequisites() if transport == "srun" else [])
    if missing:
        raise RuntimeError(f"cannot build the test cluster: {', '.join(missing)}")
    size = max(nodes)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        cluster = NetCluster(size, Path(tmp), prefix="pfr", subnet="10.82.0")
        try:
            cluster.up(TOOLS)
            for node in cluster.nodes:
                healthy_h100(node.home / "scenario")
            spec = {"config": str(cluster.ssh_config), "nodes": [n.name for n in cluster.nodes],
                    "counts": sorted(set(nodes)), "repeat": repeat, "transport": transport,
                    "concurrency": concurrency, "mode": "run"}
            env = None
            if transport == "srun":
                cluster.start_slurm()
                env = cluster.slurm_env()
            p = cluster.client(sys.executable, str(Path(__file__).resolve()), "--inner", json.dumps(spec),
                               timeout=3000, env=env)
            data = json.loads(p.stdout.strip().splitlines()[-1])
        finally:
            cluster.down()
    counts_ = sorted(set(nodes))
    result: dict[str, Any] = {"transport": transport, "repeat": repeat, "concurrency": concurrency,
                              "loop_10m_s": loop_time(), "load_before": load_before,
                              "load_after": os.getloadavg()[0], "runs": data, "median": {}}
    for c in counts_:
        runs = data[str(c)]
        result["median"][str(c)] = {k: med([r[k] for r in runs]) for k in ("wall", "cpu", "maxrss_kb")}
        result["median"][str(c)]["verdicts"] = sorted({r["verdict"] or f"rc {r['rc']}" for r in runs})
    base = counts_[0]
    for c in counts_[1:]:
        a, b = result["median"][str(base)], result["median"][str(c)]
        b["cpu_per_added_node_ms"] = (b["cpu"] - a["cpu"]) / (c - base) * 1000
        b["wall_ratio"] = b["wall"] / a["wall"]
    return result


def loop_time() -> float:
    """Seconds for a 10M-iteration Python loop on this machine (the yardstick for CPU figures)."""
    start = time.perf_counter()
    for _ in range(10_000_000):
        pass
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("transport", "run", "width", "aliases"), default="transport",
                    help="transport: the transport's collect alone; run: `preflight run` end to end; "
                         "width: a cold collect over --nodes at each of --widths; "
                         "aliases: a cold collect over --nodes names of one server at each --per-server")
    ap.add_argument("--max-startups", default="",
                    help="--mode aliases: measure against a second sshd with this MaxStartups (e.g. 10:30:100)")
    ap.add_argument("--per-server", default="1,4,8,64",
                    help="--mode aliases: the handshakes at once per server measured (0: the transport's default)")
    ap.add_argument("--widths", default="8,16,32,64", help="--mode width: the concurrencies measured")
    ap.add_argument("--json", action="store_true", help="--mode run: print the figures as JSON")
    ap.add_argument("--concurrency", type=int, default=CONCURRENCY)
    ap.add_argument("--measure", default="", help=argparse.SUPPRESS)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--inner", default="")
    ap.add_argument("--transport", choices=("ssh", "srun"), default="ssh")
    ap.add_argument("--remote-python", default="python3",
                    help="interpreter on the nodes (a version-manager shim costs CPU on every node)")
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(json.loads(args.measure))))
        return
    if args.inner:
        spec = json.loads(args.inner)
        if spec.get("mode") == "run":
            inner_run(spec)
        elif spec.get("mode") == "width":
            inner_width(spec)
        elif spec.get("mode") == "aliases":
            inner_aliases(spec)
        else:
            inner(spec)
        return
    if args.mode == "width":
        fig = width_figures(args.nodes, [int(w) for w in args.widths.split(",")], args.repeat, args.remote_python)
        if args.json:
            print(json.dumps(fig, indent=2))
            return
        print(f"cold SSH collect of the hostname bundle over {fig['nodes']} nodes, median of {fig['repeat']}; "
              f"10M-iteration loop {fig['loop_10m_s']:.2f} s; load {fig['load_before']:.1f} -> {fig['load_after']:.1f}")
        for w, m in fig["median"].items():
            print(f"  width {w:>3}: wall {m['wall']:.2f} s | controller CPU {m['cpu']:.2f} s "
                  f"({m['cpu_per_node_ms']:.1f} ms/node) | node errors {m['errors']}")
        return
    if args.mode == "aliases":
        fig = alias_figures(args.nodes, [int(w) for w in args.per_server.split(",")], args.repeat, args.max_startups)
        if args.json:
            print(json.dumps(fig, indent=2))
            return
        print(f"cold SSH collect of the hostname bundle over {fig['aliases']} names of one sshd (MaxStartups "
              f"{fig['max_startups']}), median of {fig['repeat']}; sshd accepted {fig['accepted']} logins, dropped "
              f"{fig['dropped']} connections; 10M-iteration loop {fig['loop_10m_s']:.2f} s; "
              f"load {fig['load_before']:.1f} -> {fig['load_after']:.1f}")
        for w, m in fig["median"].items():
            print(f"  {w if w != '0' else 'default':>7} per server: wall {m['wall']:.2f} s | controller CPU "
                  f"{m['cpu']:.2f} s ({m['cpu_per_node_ms']:.1f} ms/node) | node errors {m['errors']}"
                  + (f" ({'; '.join(m['said'])})" if m["said"] else ""))
        return
    if args.mode == "run":
        fig = run_figures(counts(args.nodes), args.transport, args.repeat, args.concurrency)
        if args.json:
            print(json.dumps(fig, indent=2))
        else:
            report_run(fig)
        return
    from tests.netcluster import NetCluster, prerequisites
    from tests.scenarios import TOOLS, healthy_h100

    missing = prerequisites()
    if missing:
        sys.exit(f"cannot build the test cluster: {', '.join(missing)}")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        cluster = NetCluster(args.nodes, Path(tmp), prefix="pfb", subnet="10.80.0")
        try:
            cluster.up(TOOLS)
            for node in cluster.nodes:
                healthy_h100(node.home / "scenario")
            spec = {"config": str(cluster.ssh_config), "nodes": [n.name for n in cluster.nodes],
                    "counts": counts(args.nodes), "repeat": args.repeat, "transport": args.transport,
                    "python": args.remote_python}
            env = None
            if args.transport == "srun":
                cluster.start_slurm()
                env = cluster.slurm_env()
            p = cluster.client(sys.executable, str(Path(__file__).resolve()), "--inner", json.dumps(spec),
                               timeout=600, env=env)
            data = json.loads(p.stdout)
        finally:
            cluster.down()
    report(args, data, load_before)


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def cpu_rows(one: dict[str, Any], many: dict[str, Any], n: int, kind: str) -> list[tuple[str, str]]:
    """The controller's CPU time per node, and what it projects for 1,000 nodes."""
    cpu_1, cpu_n, wall_1 = med(one[f"{kind}_cpu"]), med(many[f"{kind}_cpu"]), med(one[kind])
    marginal = max(0.0, (cpu_n - cpu_1) / (n - 1))
    cpu_1000 = cpu_1 + 999 * marginal
    wall_1000 = max(cpu_1000, math.ceil(1000 / CONCURRENCY) * wall_1)
    return [(f"  controller CPU, {kind}",
             f"1 node {cpu_1 * 1000:.1f} ms | {n} nodes {cpu_n * 1000:.1f} ms = {cpu_n / n * 1000:.1f} ms/node | "
             f"marginal {marginal * 1000:.1f} ms/node (goal <= 20)"),
            (f"  projection for 1,000 nodes, {kind}",
             f"controller CPU {cpu_1000:.1f} s on one core (GIL); wall >= {wall_1000:.1f} s "
             f"(goal <= 60 s; {math.ceil(1000 / CONCURRENCY)} waves of {CONCURRENCY} at the 1-node time)")]


def report(args: argparse.Namespace, data: dict[str, Any], load_before: float) -> None:
    n = args.nodes
    rows = [
        ("machine", f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}"),
        ("transport", f"{args.transport} (remote python: {args.remote_python})"),
        ("note", f"all nodes share this machine's cores; 1-min load average {load_before:.1f} before, "
                 f"{os.getloadavg()[0]:.1f} after"),
    ]
    errors = 0
    for label, title in (("typical", f"typical bundle ({data['probes']} probes: hostname + faked node-run tools)"),
                         ("hostname", "hostname only (fan-out cost of the transport)"),
                         ("wait", "hostname + a 1 s wait (a tool waiting on hardware, little CPU)")):
        one = data[f"{label}/1"]
        errors += one["errors"]
        kinds = ((("cold", "new transport: connect + auth + round trip"),
                  ("warm", "second collect, connections reused")) if args.transport == "ssh"
                 else (("cold", "one srun step: allocation + launch + round trip"),))
        for count in counts(n)[1:]:
            many = data[f"{label}/{count}"]
            errors += many["errors"]
            for kind, what in kinds:
                a, b = med(one[kind]), med(many[kind])
                rows.append((f"{title}, {kind} ({what})",
                             f"1 node {a:.3f} s | {count} nodes {b:.3f} s | ratio {count}/1 {b / a:.2f}x"))
                if f"{kind}_cpu" in many:
                    rows.extend(cpu_rows(one, many, count, kind))
    rows.append((f"median of {args.repeat} runs each; node outcomes with an error or a missing capture", str(errors)))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


def report_run(fig: dict[str, Any]) -> None:
    """A short table of --mode run's medians."""
    print(f"preflight run over {fig['transport']}, concurrency {fig['concurrency']}, median of {fig['repeat']}; "
          f"10M-iteration loop {fig['loop_10m_s']:.2f} s; load {fig['load_before']:.1f} -> {fig['load_after']:.1f}")
    for c, m in fig["median"].items():
        extra = (f" | +{m['cpu_per_added_node_ms']:.1f} ms CPU per added node | wall {m['wall_ratio']:.2f}x"
                 if "wall_ratio" in m else "")
        print(f"  {c:>4} nodes: wall {m['wall']:.2f} s | controller CPU {m['cpu']:.2f} s | "
              f"peak RSS {m['maxrss_kb'] / 1024:.0f} MiB | {','.join(m['verdicts'])}{extra}")


def counts(nodes: int) -> list[int]:
    """The fan-outs measured: 1 node, 16 when there are more, and all of them."""
    return sorted({1, min(16, nodes), nodes})


if __name__ == "__main__":
    main()
