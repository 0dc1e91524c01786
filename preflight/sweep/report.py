"""The sweep's own report pages: the per-size table, the pair matrix, the chart.

Written next to the standard report files (report.json / report.md / junit.xml, through
`preflight.report.write_all`): `sweep.md` and `sweep-busbw.svg`, and the same section
appended to report.md so one page tells the whole story.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tabulate import tabulate

from preflight.model import CLUSTER, Result
from preflight.profile import Profile
from preflight.sweep import pairs as pairmod
from preflight.sweep.outcome import SweepOutcome, expected_row
from preflight.sweep.plot import busbw_svg
from preflight.sweep.spec import NCCL_TESTS_DTYPE

PLOT_NAME = "sweep-busbw.svg"


def _size(b: int) -> str:
    for unit, div in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"


# The all-reduce table in all_reduce_perf's column order (out-of-place group), then our extras.
TABLE_HEADERS = ["size (B)", "count (elements)", "type", "redop", "root", "time (us)", "algbw (GB/s)",
                 "busbw (GB/s)", "#wrong", "p99 (us)", "expected", "status"]
TABLE_ALIGN = ("right", "right", "left", "left", "right", "right", "right", "right", "right", "right", "left", "left")


def _time(us: float) -> str:
    """A time the way all_reduce_perf prints it: fewer decimals as it grows."""
    return f"{us:.0f}" if us >= 10000 else f"{us:.1f}" if us >= 100 else f"{us:.2f}"


def _bw(gbps: float) -> str:
    """GB/s to two decimals as nccl-tests prints it; a CPU run's tiny figures keep two digits."""
    return f"{gbps:.2f}" if gbps >= 0.01 or gbps == 0 else f"{gbps:.2g}"


def table_rows(out: SweepOutcome, profile: Profile) -> list[list[Any]]:
    """The rows as all_reduce_perf prints them (out-of-place; the sweep measures no in-place
    group): time is the mean per op, the figure algbw (bytes / time) and busbw follow from."""
    multi = len(out.hosts) > 1
    rows = []
    for row in out.rows:
        exp, st = expected_row(row, profile, multi)
        dtype = str(row.get("dtype") or out.spec.dtype)
        p99 = row.get("p99_us")
        rows.append([int(row["bytes"]), int(row.get("count") or 0), NCCL_TESTS_DTYPE.get(dtype, dtype), "sum", -1,
                     _time(row["time_us"]), _bw(row["algbw"]), _bw(row["busbw"]), int(row.get("wrong") or 0),
                     _time(p99) if isinstance(p99, (int, float)) else "", exp, st.value])
    return rows


def markdown(out: SweepOutcome, results: list[Result], profile: Profile, plot_name: str | None = PLOT_NAME) -> str:
    spec = out.spec
    multi = len(out.hosts) > 1
    lines = ["## Collective sweep", "",
             f"- backend {spec.backend}, dtype {spec.dtype}, {out.world} rank(s) on {len(out.hosts)} node(s) "
             f"({', '.join(out.hosts)}), table {'multi_node' if multi else 'single_node'} of profile {profile.name}",
             f"- {spec.warmup} warm-up + {spec.iters} timed iterations per size; time = the slowest rank's mean "
             "per op (as nccl-tests), algbw = size / time, busbw = algbw x 2(n-1)/n; p99 = the slowest rank's "
             "99th percentile",
             f"- took {out.seconds:.1f} s (deadline {spec.deadline_s:g} s, collective timeout {spec.op_timeout_s:g} s)",
             ""]
    if out.rows:
        lines += ["### All-reduce (out-of-place; in-place not measured)", "",
                  tabulate(table_rows(out, profile), headers=TABLE_HEADERS, tablefmt="github", disable_numparse=True,
                           colalign=TABLE_ALIGN),
                  ""]
        if plot_name:
            lines += [f"![busbw vs size]({plot_name})", ""]
    stalled = [r for r in results if r.check == "nccl.allreduce" and "stalled" in r.summary]
    for r in stalled:
        lines += [f"**{r.summary}**", ""]
    nodes = out.nodes or out.hosts
    if out.pairs:
        lines += ["### Node pairs (send/recv)", "",
                  f"Bandwidth GB/s at {_size(spec.pp_large_bytes)} (half round trip):", "",
                  tabulate(pairmod.matrix(nodes, out.pairs, "bw_gbps"), headers=["", *nodes], tablefmt="github"), "",
                  f"Latency us at {spec.pp_small_bytes} B:", "",
                  tabulate(pairmod.matrix(nodes, out.pairs, "lat_us"), headers=["", *nodes], tablefmt="github"), ""]
    named = [r for r in results if r.check == "nccl.pingpong" and r.node != CLUSTER]
    if named:
        lines += ["### Isolation", ""]
        for r in named:
            lines.append(f"- **{r.node}**: {r.summary}")
            lines += [f"  - {e}" for e in r.evidence[:6]]
        lines.append("")
    return "\n".join(lines) + "\n"


def plot(out: SweepOutcome, profile: Profile) -> str:
    multi = len(out.hosts) > 1
    table = "multi_node" if multi else "single_node"
    fail = profile.get(f"nccl.allreduce.{table}.peak_busbw_fail")
    warn = profile.get(f"nccl.allreduce.{table}.peak_busbw_warn")
    stats = [expected_row(r, profile, multi)[1].value for r in out.rows]
    return busbw_svg([r["bytes"] for r in out.rows], [r["busbw"] for r in out.rows],
                     f"all-reduce busbw, {out.world} ranks, {out.spec.backend} {out.spec.dtype}",
                     floor_fail=float(fail) if fail else None, floor_warn=float(warn) if warn else None,
                     floor_from=int(profile.get("nccl.allreduce.peak_min_bytes") or 0), statuses=stats)


def write(out_dir: Path, out: SweepOutcome, results: list[Result], profile: Profile,
          written: dict[str, Path] | None = None) -> dict[str, Path]:
    """sweep.md and the chart into out_dir; the section is appended to report.md when there."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, Any] = {}
    svg = out_dir / PLOT_NAME
    if out.rows:
        svg.write_text(plot(out, profile), encoding="utf-8")
        files["svg"] = svg
    md = markdown(out, results, profile, PLOT_NAME if out.rows else None)
    p = out_dir / "sweep.md"
    p.write_text("# preflight sweep\n\n" + md, encoding="utf-8")
    files["sweep_md"] = p
    report_md = (written or {}).get("md")
    if report_md is not None and report_md.exists():
        with report_md.open("a", encoding="utf-8") as fh:
            fh.write("\n" + md)
    return files
