"""Prometheus text format, for node_exporter's textfile collector.

Names follow the Prometheus conventions: a `preflight_` prefix, base units in the name's
suffix (`_seconds`, `_bytes`, `_bytes_per_second`; bandwidths are measured in GB/s and written
times 1e9), a HELP and a TYPE line per family. Everything here is a gauge.

- per check and node, the status as a state set (`preflight_check_status{check,node,status}`
  is 1 for the current status, 0 for the others) and `preflight_check_ok{check,node}`;
- results about several nodes (the pseudo-node `cluster`: the sweep, cross-node checks; a
  link `a<->b`) never carry a `node` label: `preflight_cluster_check_status{check,nodes,status}`
  and `preflight_cluster_check_ok{check,nodes}`, where `nodes` names the nodes measured
  (`gpu001+gpu002`; empty, that is absent, for the whole cluster); the sweep's bandwidth is
  labelled the same way: `preflight_sweep_busbw_bytes_per_second{nodes,bytes}` per message
  size, `preflight_sweep_peak_busbw_bytes_per_second{nodes}`, and the ping-pong
  `preflight_pair_bandwidth_bytes_per_second{a,b}` per node pair;
- per command, the last run's start (`preflight_last_run_timestamp_seconds`), length
  (`preflight_last_run_duration_seconds`), verdict (`preflight_verdict_go`) and blocking nodes
  (`preflight_bad_nodes`).

`write_textfile` writes atomically (temp file + rename in the same folder), as the collector
requires.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from preflight import facts
from preflight.model import CLUSTER, LINK_SEP, Result, Status, is_node
from preflight.timeparse import epoch

GB = 1e9  # the sweep measures GB/s (10^9 bytes per second)

HELP = {
    "preflight_check_status": "Status of a check on a node (1 for the current status, 0 for the others).",
    "preflight_check_ok": "1 when the check passed (pass, warn or skip) on the node, 0 on fail or error.",
    "preflight_cluster_check_status": "Status of a check of the nodes together (1 for the current status).",
    "preflight_cluster_check_ok": "1 when the check of the nodes together passed (pass, warn or skip).",
    "preflight_last_run_timestamp_seconds": "Unix time the last preflight run of the command started.",
    "preflight_last_run_duration_seconds": "How long the last preflight run of the command took.",
    "preflight_verdict_go": "1 when the last run of the command was GO.",
    "preflight_bad_nodes": "Nodes blocking the last run of the command.",
    "preflight_sweep_busbw_bytes_per_second": "All-reduce bus bandwidth per message size (bytes label).",
    "preflight_sweep_peak_busbw_bytes_per_second": "All-reduce peak bus bandwidth of the last sweep.",
    "preflight_pair_bandwidth_bytes_per_second": "Ping-pong send/recv bandwidth per node pair.",
}


def _esc(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Mapping[str, Any]) -> str:
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items()) + "}"


def _num(value: float) -> str:
    return repr(float(value)) if value == value else "NaN"


class _Families:
    def __init__(self) -> None:
        self.samples: dict[str, list[str]] = {}

    def add(self, name: str, labels: Mapping[str, Any], value: float) -> None:
        self.samples.setdefault(name, []).append(f"{name}{_labels(labels)} {_num(value)}")

    def text(self) -> str:
        out: list[str] = []
        for name, lines in self.samples.items():
            out += [f"# HELP {name} {HELP.get(name, name)}", f"# TYPE {name} gauge"]
            out += list(dict.fromkeys(lines))
        return "\n".join(out) + "\n"


def _latest(results: Iterable[Result]) -> dict[tuple[str, str], Result]:
    """The worst result per (check, node)."""
    seen: dict[tuple[str, str], Result] = {}
    for r in results:
        cur = seen.get((r.check, r.node))
        if cur is None or r.status.rank > cur.status.rank:
            seen[(r.check, r.node)] = r
    return seen


def _allreduce(fam: _Families, node: str, r: Result) -> None:
    group = node if is_node(node) else _group(node, r)
    for row in facts.sweep_rows(r):
        bw = row["busbw"] if row["busbw"] is not None else row.get("ip_busbw")
        if bw is not None:
            fam.add("preflight_sweep_busbw_bytes_per_second", {"nodes": group, "bytes": int(row["bytes"] or 0)},
                    float(bw) * GB)
    peak = facts.peak_busbw(r)
    if peak is not None:
        fam.add("preflight_sweep_peak_busbw_bytes_per_second", {"nodes": group}, peak * GB)


def _pingpong(fam: _Families, r: Result) -> None:
    for p in facts.pingpong_pairs(r):
        if isinstance(p.get("bw_gbps"), (int, float)):
            a, b = sorted((str(p.get("a")), str(p.get("b"))))
            fam.add("preflight_pair_bandwidth_bytes_per_second", {"a": a, "b": b}, float(p["bw_gbps"]) * GB)


def _ok(r: Result) -> float:
    return 0.0 if r.status in (Status.FAIL, Status.ERROR) else 1.0


def _group(node: str, r: Result) -> str:
    """The nodes a result about several nodes measured: the sweep's hosts, a link's two ends,
    or '' (the whole cluster: no label)."""
    if LINK_SEP in node:
        return "+".join(sorted(node.split(LINK_SEP)))
    return "+".join(sorted(facts.sweep_hosts(r)))


def _results(fam: _Families, results: Iterable[Result]) -> None:
    seen = sorted(_latest(results).items())
    per_node = [(check, node, r) for (check, node), r in seen if is_node(node)]
    together = [(check, _group(node, r), r) for (check, node), r in seen if not is_node(node)]
    for prefix, label, rows in (("preflight_check", "node", per_node), ("preflight_cluster_check", "nodes", together)):
        for check, who, r in rows:
            for s in Status:
                fam.add(f"{prefix}_status", {"check": check, label: who, "status": s.value},
                        1.0 if r.status is s else 0.0)
        for check, who, r in rows:
            fam.add(f"{prefix}_ok", {"check": check, label: who}, _ok(r))
    for (check, node), r in seen:
        if check == "nccl.allreduce":
            _allreduce(fam, node, r)
        if check == "nccl.pingpong" and node == CLUSTER:
            _pingpong(fam, r)


def _last_runs(fam: _Families, runs: Sequence[Mapping[str, Any]]) -> None:
    last: dict[str, Mapping[str, Any]] = {}
    for run in runs:
        cmd = str(run.get("command", ""))
        if cmd not in last or float(run.get("ts", 0)) >= float(last[cmd].get("ts", 0)):
            last[cmd] = run
    ordered = sorted(last.items())
    for cmd, run in ordered:
        fam.add("preflight_last_run_timestamp_seconds", {"command": cmd}, float(run.get("ts", 0)))
    for cmd, run in ordered:
        if run.get("duration_s") is not None:
            fam.add("preflight_last_run_duration_seconds", {"command": cmd}, float(run["duration_s"]))
    for cmd, run in ordered:
        fam.add("preflight_verdict_go", {"command": cmd}, 1.0 if run.get("verdict") == "GO" else 0.0)
    for cmd, run in ordered:
        if "bad_nodes" in run:
            fam.add("preflight_bad_nodes", {"command": cmd}, float(run.get("bad_nodes") or 0))


def render_results(results: Sequence[Result], runs: Sequence[Mapping[str, Any]] = ()) -> str:
    """Metrics for results (the worst per check and node) and the last run per command
    (`runs`: dicts with command, ts (Unix time of the start), verdict, and optionally
    duration_s and bad_nodes)."""
    fam = _Families()
    _last_runs(fam, runs)
    _results(fam, results)
    return fam.text()


def render(report: Any, now: float | None = None) -> str:
    """Metrics for one Report."""
    ts = epoch(report.started) if getattr(report, "started", "") else (now or time.time())
    run = {"command": report.command, "ts": ts, "verdict": report.verdict.verdict,
           "duration_s": float(getattr(report, "duration_s", 0.0) or 0.0),
           "bad_nodes": len(report.verdict.bad_nodes)}
    return render_results(report.results, [run])


def write_textfile(text: str, path: Path) -> Path:
    """Write atomically: a temp file in the same folder, fsync, then rename over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
