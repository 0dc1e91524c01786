"""Prometheus text format, for node_exporter's textfile collector.

Per check and node the status as a state set (`preflight_check_status{check,node,status}` is 1
for the current status, 0 for the others) plus `preflight_check_ok`, the verdict and time of
the last run per command, the sweep's busbw per message size and its peak, and ping-pong
bandwidth per node pair. `write_textfile` writes atomically (temp file + rename in the same
folder), as the collector requires.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from preflight import facts
from preflight.model import Result, Status
from preflight.timeparse import epoch

_HELP = {
    "preflight_check_status": "Status of a check on a node (1 for the current status).",
    "preflight_check_ok": "1 when the check passed (pass, warn or skip) on the node, 0 on fail or error.",
    "preflight_last_run_timestamp_seconds": "Unix time of the last preflight run, per command.",
    "preflight_verdict_go": "1 when the last run of the command was GO.",
    "preflight_bad_nodes": "Nodes blocking the last run of the command.",
    "preflight_sweep_busbw_gbps": "All-reduce bus bandwidth per message size (GB/s).",
    "preflight_sweep_peak_busbw_gbps": "All-reduce peak bus bandwidth of the last sweep (GB/s).",
    "preflight_pair_bw_gbps": "Ping-pong send/recv bandwidth per node pair (GB/s).",
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
            out += [f"# HELP {name} {_HELP.get(name, name)}", f"# TYPE {name} gauge"]
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
    hosts = facts.sweep_hosts(r)
    group = "+".join(sorted(hosts)) if node == "cluster" and hosts else node
    for row in facts.sweep_rows(r):
        fam.add("preflight_sweep_busbw_gbps", {"nodes": group, "bytes": int(row["bytes"] or 0)}, float(row["busbw"]))
    peak = facts.peak_busbw(r)
    if peak is not None:
        fam.add("preflight_sweep_peak_busbw_gbps", {"nodes": group}, peak)


def _pingpong(fam: _Families, r: Result) -> None:
    for p in facts.pingpong_pairs(r):
        if isinstance(p.get("bw_gbps"), (int, float)):
            a, b = sorted((str(p.get("a")), str(p.get("b"))))
            fam.add("preflight_pair_bw_gbps", {"a": a, "b": b}, float(p["bw_gbps"]))


def _results(fam: _Families, results: Iterable[Result]) -> None:
    seen = sorted(_latest(results).items())
    for (check, node), r in seen:
        for s in Status:
            fam.add("preflight_check_status", {"check": check, "node": node, "status": s.value},
                    1.0 if r.status is s else 0.0)
    for (check, node), r in seen:
        fam.add("preflight_check_ok", {"check": check, "node": node},
                0.0 if r.status in (Status.FAIL, Status.ERROR) else 1.0)
    for (check, node), r in seen:
        if check == "nccl.allreduce":
            _allreduce(fam, node, r)
        if check == "nccl.pingpong" and node == "cluster":
            _pingpong(fam, r)


def render_results(results: Sequence[Result], runs: Sequence[Mapping[str, Any]] = ()) -> str:
    """Metrics for results (the latest per check and node) and the last run per command
    (`runs`: dicts with command, ts (Unix time), verdict, bad_nodes)."""
    fam = _Families()
    last: dict[str, Mapping[str, Any]] = {}
    for run in runs:
        cmd = str(run.get("command", ""))
        if cmd not in last or float(run.get("ts", 0)) >= float(last[cmd].get("ts", 0)):
            last[cmd] = run
    for cmd, run in sorted(last.items()):
        fam.add("preflight_last_run_timestamp_seconds", {"command": cmd}, float(run.get("ts", 0)))
    for cmd, run in sorted(last.items()):
        fam.add("preflight_verdict_go", {"command": cmd}, 1.0 if run.get("verdict") == "GO" else 0.0)
    for cmd, run in sorted(last.items()):
        if "bad_nodes" in run:
            fam.add("preflight_bad_nodes", {"command": cmd}, float(run.get("bad_nodes") or 0))
    _results(fam, results)
    return fam.text()


def render(report: Any, now: float | None = None) -> str:
    """Metrics for one Report."""
    ts = epoch(report.started) if getattr(report, "started", "") else (now or time.time())
    run = {"command": report.command, "ts": ts, "verdict": report.verdict.verdict,
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
